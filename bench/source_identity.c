/* source_identity.c: prints an FNV-1a hash of the generated source and the
 * entry point of every valid config of every softmax-family kind (ids 1..4),
 * dtype and ten shapes, aligned and unaligned, for sm_90 (132 SMs) and sm_80
 * (108 SMs). Built against two trees (bench/source-identity.sh), the two
 * outputs must be equal: the same NVRTC input is the same machine code. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "src/codegen/config.h"
#include "src/codegen/source.h"
#include "src/tuner/space.h"

static unsigned long long fnv(const char *s)
{
    unsigned long long h = 1469598103934665603ull;
    for (; *s; s++) { h ^= (unsigned char)*s; h *= 1099511628211ull; }
    return h;
}

int main(void)
{
    static const unsigned long long shapes[][2] = {{32, 128}, {256, 1024}, {1, 262144}, {4096, 32000},
        {1024, 50257}, {8192, 128256}, {65536, 128}, {64, 262144}, {7, 1001}, {3000, 7777}};
    static const int archs[][2] = {{90, 132}, {80, 108}};
    size_t total = 0;
    for (size_t a = 0; a < 2; a++)
    for (unsigned k = 1; k <= 4; k++)
        for (int dt = 0; dt <= 2; dt++)
            for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
                tuned__shape s = {(tuned_dtype)dt, shapes[i][0], shapes[i][1], (uint8_t)k};
                tuned__space sp;
                tuned__err e = {0};
                if (tuned__space_init(&sp, &s, archs[a][0], archs[a][1], &e) != 0) {
                    printf("%u %llux%llu %d sm%d none: %s\n", k, shapes[i][0], shapes[i][1], dt, archs[a][0], e.msg);
                    continue;
                }
                for (size_t c = 0; c < sp.count; c++)
                    for (int un = 0; un <= 1; un++) {
                        tuned__codegen_opts o = {.unaligned = un};
                        char *src = NULL;
                        char name[TUNED__CONFIG_TEXT];
                        tuned__config_format(&sp.valid[c], name, sizeof name);
                        if (tuned__source_kernel(&sp.valid[c], &s, &o, &src, &e) != 0) {
                            printf("%u %llux%llu %d %s %d error %s\n", k, shapes[i][0], shapes[i][1], dt, name, un, e.msg);
                            continue;
                        }
                        printf("%u %llux%llu %d sm%d %s %d %016llx %s\n", k, shapes[i][0], shapes[i][1], dt, archs[a][0], name, un, fnv(src),
                               tuned__source_entry(&sp.valid[c], &s));
                        free(src);
                        total++;
                    }
                tuned__space_free(&sp);
            }
    fprintf(stderr, "%zu sources\n", total);
    return 0;
}
