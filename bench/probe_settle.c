/* probe_settle.c: how long the evaluator should pause between its L2 flush
 * and a timed launch. For one shape and dtype, it times the copy and the
 * given configs with each pause in turn (in 3 interleaved rounds, one
 * evaluator a pause) and prints the median of each round, so that the pause
 * after which the times stop falling can be read off. A pause written "20s"
 * also runs each repeat alone, the GPU idle before its flush.
 *
 *   probe_settle [KERNEL:]ROWSxCOLS fp16|bf16|fp32 US[s][,US[s]...] CONFIG...
 *
 * KERNEL is softmax (the default), softmax_bwd, log_softmax or
 * log_softmax_bwd; the copy is of one tensor whatever the kernel. With
 * PROBE_UNALIGNED_CODE=1 in the environment the variants are generated as
 * for rows off a vector boundary (no T_HEAD_FREE) although the buffers
 * are aligned, which separates that code's cost from the unaligned rows'.
 *
 * Not installed; bench/probe-settle.sh runs it on the GPU machine. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "probe_gpu.h"
#include "probe_shape.h"

#define MAX_SETTLE 8
#define ROUNDS 3

/* "20" is a pause of 20 µs; "20s" the same with each repeat run alone
 * (tuned__eval_opts.serial). */
static int parse_settle(const char *text, double *us, bool *serial, int *n)
{
    char *copy = strdup(text), *save = NULL;
    if (copy == NULL)
        return -1;
    *n = 0;
    for (char *t = strtok_r(copy, ",", &save); t != NULL; t = strtok_r(NULL, ",", &save)) {
        char *end;
        double v = strtod(t, &end);
        serial[*n] = *end == 's';
        if (serial[*n])
            end++;
        if (*end != '\0' || v < 0 || *n == MAX_SETTLE) {
            free(copy);
            return -1;
        }
        us[(*n)++] = v;
    }
    free(copy);
    return *n > 0 ? 0 : -1;
}

int main(int argc, char **argv)
{
    tuned__shape shape = {0};
    double settle[MAX_SETTLE];
    bool serial[MAX_SETTLE];
    int nsettle = 0;
    if (argc < 5 || probe_parse_shape(argv[1], &shape) != 0 ||
        tuned_dtype_parse(argv[2], &shape.dtype) != 0 ||
        parse_settle(argv[3], settle, serial, &nsettle) != 0) {
        fprintf(stderr,
                "usage: probe_settle [KERNEL:]ROWSxCOLS fp16|bf16|fp32 US[s][,US[s]...] CONFIG...\n");
        return 2;
    }
    tuned__evaluator *ev[MAX_SETTLE] = {0};
    probe_gpu p;
    tuned__err e = {0};
    int status = 1;
    if (probe_gpu_open(&p, "probe_settle", argv + 4, argc - 4) != 0)
        goto out;
    const char *unaligned_code = getenv("PROBE_UNALIGNED_CODE");
    const bool unaligned = unaligned_code != NULL && strcmp(unaligned_code, "1") == 0;
    for (int s = 0; s < nsettle; s++) {
        tuned__eval_opts o;
        tuned__eval_opts_default(&o);
        o.settle_us = settle[s];
        o.serial = serial[s];
        o.codegen.unaligned = unaligned;
        if (tuned__evaluator_open(&ev[s], p.d, p.n, &p.gpu, &shape, &o, &e) != 0) {
            fprintf(stderr, "probe_settle: pause %g µs: %s\n", settle[s], e.msg);
            goto out;
        }
    }
    printf("# %s, %s %s; median µs of each round (%d rounds, interleaved)\n", p.gpu.name,
           argv[1], argv[2], ROUNDS);
    printf("%-10s %-48s %s\n", "pause_us", "what", "rounds");
    for (int round = 0; round < ROUNDS; round++)
        for (int s = 0; s < nsettle; s++) {
            if (tuned__evaluator_run(ev[s], p.cfgs, (size_t)p.ncfg, p.res, &e) != 0) {
                fprintf(stderr, "probe_settle: %s\n", e.msg);
                goto out;
            }
            char mode = serial[s] ? 's' : ' ';
            /* The copy is timed once, when the evaluator opens. */
            if (round == 0)
                printf("%-9g%c %-48s %.3f\n", settle[s], mode, "copy (at open)",
                       tuned__evaluator_copy_us(ev[s]));
            for (int i = 0; i < p.ncfg; i++) {
                const tuned__eval_result *res = &p.res[i];
                if (res->status == TUNED__EVAL_OK)
                    printf("%-9g%c %-48s %.3f (round %d, %d reps, p20 %.3f, p80 %.3f)\n",
                           settle[s], mode, argv[4 + i], res->median_us, round + 1,
                           res->reps, res->p20_us, res->p80_us);
                else
                    printf("%-9g%c %-48s %s: %s\n", settle[s], mode, argv[4 + i],
                           tuned__eval_status_name(res->status), res->detail);
            }
        }
    status = 0;
out:
    for (int s = 0; s < nsettle; s++)
        tuned__evaluator_close(ev[s]);
    probe_gpu_close(&p);
    return status;
}
