/* emit_source.c: prints the CUDA source codegen writes for one variant of
 * a shape, and on stderr its launch geometry, so that a standalone nvcc
 * probe (bench/phase_probe.cu) can build the tuner's own kernel with hooks
 * added to its text. Rows-family variants without a grid split only: those
 * are what the probe launches.
 *
 *   emit_source [KERNEL:]ROWSxCOLS fp16|bf16|fp32 CONFIG > kernel.cu
 *
 * stderr: "blocks B threads T" (B blocks of T threads, the cluster's shape
 * compiled into the kernel). Not installed. */
#include <stdio.h>
#include <stdlib.h>

#include "src/codegen/config.h"
#include "src/codegen/source.h"
#include "probe_shape.h"

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: emit_source [KERNEL:]ROWSxCOLS fp16|bf16|fp32 CONFIG\n");
        return 2;
    }
    tuned__shape s = {0};
    if (probe_parse_shape(argv[1], &s) != 0) {
        fprintf(stderr, "emit_source: bad shape '%s' (want [KERNEL:]ROWSxCOLS)\n", argv[1]);
        return 2;
    }
    if (tuned_dtype_parse(argv[2], &s.dtype) != 0) {
        fprintf(stderr, "emit_source: bad dtype '%s' (fp16, bf16 or fp32)\n", argv[2]);
        return 2;
    }
    tuned__err e = {0};
    tuned__config c;
    if (tuned__config_parse(argv[3], &c, &e) != 0) {
        fprintf(stderr, "emit_source: %s\n", e.msg);
        return 2;
    }
    if (c.family != TUNED__FAMILY_ROWS || c.grid > 1) {
        fprintf(stderr, "emit_source: '%s' is not a rows-family variant without a grid split\n",
                argv[3]);
        return 2;
    }
    char why[256];
    if (!tuned__config_check(&c, &s, 90, 132, why, sizeof why)) {
        fprintf(stderr, "emit_source: '%s' is not valid for %s %s: %s\n", argv[3], argv[1],
                argv[2], why);
        return 2;
    }
    char *src = NULL;
    if (tuned__source_kernel(&c, &s, NULL, &src, &e) != 0) {
        fprintf(stderr, "emit_source: %s\n", e.msg);
        return 1;
    }
    fputs(src, stdout);
    free(src);
    const unsigned long long groups = (s.rows + c.rows - 1) / c.rows;
    fprintf(stderr, "blocks %llu threads %u\n", groups * c.cluster, (unsigned)c.warps * 32u);
    return 0;
}
