/* test_lce_check.c: the float64 check of a chunked linear cross-entropy
 * (src/driver/lce_reference.c) and its chunk configs, on the CPU.
 *
 *   reference  the float64 loss and gradients agree with a direct
 *              float64 computation of the same instance
 *   passes     a host run of the chunked block in the dtype's roundings
 *              (logits and their gradient rounded, d W summed in the dtype
 *              a chunk at a time) passes, in fp32 and bf16
 *   planted    the same run with one bug each fails: the partial last
 *              chunk left out, 1/rows for 1/count, d W of the last chunk
 *              only, each label one off, d hidden transposed
 *   config     "chunk1024" round-trips; a chunk is refused for a kernel
 *              kind, a kernel config's fields beside a chunk are refused
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "expect.h"
#include "src/codegen/config.h"
#include "src/driver/check.h"
#include "src/driver/lce_reference.h"

/* v rounded to the dtype (nearest even), as the GPU stores it. */
static double round_to(double v, tuned_dtype dtype)
{
    float f = (float)v;
    if (dtype != TUNED_BF16)
        return f;
    uint32_t b;
    memcpy(&b, &f, 4);
    b = (b + 0x7fffu + ((b >> 16) & 1u)) & 0xffff0000u;
    memcpy(&f, &b, 4);
    return f;
}

static void store(void *base, uint64_t i, double v, tuned_dtype dtype)
{
    float f = (float)round_to(v, dtype);
    if (dtype == TUNED_FP32) {
        memcpy((char *)base + i * 4, &f, 4);
    } else {
        uint32_t b;
        memcpy(&b, &f, 4);
        uint16_t h = (uint16_t)(b >> 16);
        memcpy((char *)base + i * 2, &h, 2);
    }
}

enum { BUG_NONE, BUG_SKIP_LAST, BUG_COUNT, BUG_DW_LAST, BUG_LABEL, BUG_DH_T };

/* The chunked block on the host, in the dtype's roundings, with one bug. */
static void run_chunked(const tuned__lce_ref *r, uint64_t chunk, int bug, float *loss, void *dh,
                        void *dw)
{
    uint64_t T = r->tokens, H = r->hidden, V = r->vocab;
    size_t es = tuned_dtype_size(r->dtype);
    double *acc = calloc(V * H, sizeof *acc), *g = malloc(chunk * V * sizeof *g);
    double gs = r->gscale;
    if (bug == BUG_COUNT)
        gs = 1.0 / (double)T;
    memset(dh, 0x7B, T * H * es);
    for (uint64_t t = 0; t < T; t++)
        loss[t] = 1.3e36f;
    for (uint64_t c0 = 0; c0 < T; c0 += chunk) {
        uint64_t rows = T - c0 < chunk ? T - c0 : chunk;
        if (bug == BUG_SKIP_LAST && c0 + chunk >= T && c0 > 0)
            break;
        if (bug == BUG_DW_LAST)
            memset(acc, 0, V * H * sizeof *acc);
        for (uint64_t i = 0; i < rows; i++) {
            uint64_t t = c0 + i;
            double *z = g + i * V, m = -INFINITY, s = 0;
            for (uint64_t v = 0; v < V; v++) {
                double d = 0;
                for (uint64_t j = 0; j < H; j++)
                    d += r->h[t * H + j] * r->w[v * H + j];
                z[v] = round_to(d, r->dtype);
                m = fmax(m, z[v]);
            }
            for (uint64_t v = 0; v < V; v++)
                s += exp(z[v] - m);
            double lse = m + log(s);
            int64_t y = r->labels[t];
            if (y != TUNED__LCE_IGNORE_INDEX && bug == BUG_LABEL)
                y = (y + 1) % (int64_t)V;
            loss[t] = y == TUNED__LCE_IGNORE_INDEX ? 0.0f : (float)(lse - z[y]);
            for (uint64_t v = 0; v < V; v++)
                z[v] = y == TUNED__LCE_IGNORE_INDEX
                           ? 0.0
                           : round_to(gs * (exp(z[v] - lse) - (v == (uint64_t)y)), r->dtype);
            for (uint64_t j = 0; j < H; j++) {
                double d = 0;
                for (uint64_t v = 0; v < V; v++)
                    d += z[v] * r->w[v * H + (bug == BUG_DH_T ? (j + 1) % H : j)];
                store(dh, t * H + j, d, r->dtype);
            }
        }
        for (uint64_t v = 0; v < V; v++)
            for (uint64_t j = 0; j < H; j++) {
                double d = 0;
                for (uint64_t i = 0; i < rows; i++)
                    d += g[i * V + v] * r->h[(c0 + i) * H + j];
                acc[v * H + j] = round_to(acc[v * H + j] + d, r->dtype);
            }
    }
    for (uint64_t i = 0; i < V * H; i++)
        store(dw, i, acc[i], r->dtype);
    free(acc);
    free(g);
}

static void test_reference(void)
{
    tuned__lce_ref r;
    EXPECT(tuned__lce_ref_make(&r, 5, 3, 4, TUNED_FP32, 7, NULL) == 0, "a tiny instance");
    /* row 3 is ignored; the others' loss and d h straight from the formula */
    EXPECT(r.labels[3] == TUNED__LCE_IGNORE_INDEX && r.loss[3] == 0.0 && r.gscale == 0.25,
           "every seventh row from 3 ignored, 1/count of the rest: %g", r.gscale);
    for (uint64_t t = 0; t < 5; t++) {
        if (t == 3)
            continue;
        double z[4], m = -INFINITY, s = 0;
        for (int v = 0; v < 4; v++) {
            z[v] = 0;
            for (int j = 0; j < 3; j++)
                z[v] += r.h[t * 3 + j] * r.w[v * 3 + j];
            m = fmax(m, z[v]);
        }
        for (int v = 0; v < 4; v++)
            s += exp(z[v] - m);
        double lse = m + log(s);
        EXPECT(fabs(r.loss[t] - (lse - z[r.labels[t]])) < 1e-12, "loss of row %llu",
               (unsigned long long)t);
        for (int j = 0; j < 3; j++) {
            double d = 0;
            for (int v = 0; v < 4; v++)
                d += 0.25 * (exp(z[v] - lse) - (v == r.labels[t])) * r.w[v * 3 + j];
            EXPECT(fabs(r.dh[t * 3 + j] - d) < 1e-12, "d h[%llu][%d]", (unsigned long long)t, j);
        }
    }
    for (uint64_t i = 0; i < 15; i++)
        EXPECT(r.h[i] * 64 == round(r.h[i] * 64) && fabs(r.h[i]) <= 1, "inputs k/64 in [-1, 1]");
    tuned__lce_ref_free(&r);
    unsigned char b[4];
    tuned__check_double_to_bits(-0.75, TUNED_FP16, b);
    EXPECT(b[0] == 0x00 && b[1] == 0xba, "fp16 -0.75 is 0xba00: %02x%02x", b[1], b[0]);
    tuned__check_double_to_bits(1.0 / 64, TUNED_BF16, b);
    EXPECT(b[0] == 0x80 && b[1] == 0x3c, "bf16 1/64 is 0x3c80: %02x%02x", b[1], b[0]);
}

static void test_runs(tuned_dtype dtype)
{
    /* 150 rows in chunks of 64: two whole chunks and a partial third */
    const uint64_t T = 150, H = 16, V = 37, chunk = 64;
    tuned__lce_ref r;
    EXPECT(tuned__lce_ref_make(&r, T, H, V, dtype, 11, NULL) == 0, "an instance");
    size_t es = tuned_dtype_size(dtype);
    float *loss = malloc(T * sizeof *loss);
    void *dh = malloc(T * H * es), *dw = malloc(V * H * es);
    static const char *const names[] = {"none", "the partial last chunk left out",
                                        "1/rows for 1/count", "d W of the last chunk only",
                                        "labels one off", "d hidden's columns moved"};
    for (int bug = BUG_NONE; bug <= BUG_DH_T; bug++) {
        char detail[256];
        run_chunked(&r, chunk, bug, loss, dh, dw);
        uint64_t bad = tuned__lce_ref_compare(&r, loss, dh, dw, chunk, 1, detail, sizeof detail);
        if (bug == BUG_NONE)
            EXPECT(bad == 0, "%s: a right run passes: %s", tuned_dtype_name(dtype), detail);
        else
            EXPECT(bad > 0 && detail[0] != '\0', "%s: planted bug (%s) caught",
                   tuned_dtype_name(dtype), names[bug]);
    }
    free(loss);
    free(dh);
    free(dw);
    tuned__lce_ref_free(&r);
}

static void test_config(void)
{
    tuned__config c;
    char text[TUNED__CONFIG_TEXT];
    EXPECT(tuned__config_parse("chunk1024", &c, NULL) == 0 && c.family == TUNED__FAMILY_CHUNK &&
               c.chunk == 1024,
           "chunk1024 parses");
    tuned__config_format(&c, text, sizeof text);
    EXPECT(strcmp(text, "chunk1024") == 0, "and prints back: %s", text);
    EXPECT(tuned__config_parse_canonical("chunk01024", TUNED_ESTORE, &c, NULL) == TUNED_ESTORE,
           "a leading zero is not canonical");
    EXPECT(tuned__config_parse("chunk2048.v17", &c, NULL) == 0 && c.chunk == 2048 &&
               c.splits == 17,
           "chunk2048.v17 parses");
    tuned__config_format(&c, text, sizeof text);
    EXPECT(strcmp(text, "chunk2048.v17") == 0, "and prints back: %s", text);
    EXPECT(tuned__config_parse_canonical("chunk2048.v017", TUNED_ESTORE, &c, NULL) ==
               TUNED_ESTORE,
           "a leading zero in the blocks is not canonical");
    static const char *const bad[] = {"chunk",        "chunk0",      "chunk-1",
                                      "chunk12x",     "chunk64.v1",  "chunk64.v65",
                                      "chunk64.v",    "chunk64.v8.v2", "chunk64.x8",
                                      "chunk64.v0",   "chunk99999999"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        EXPECT(tuned__config_parse(bad[i], &c, NULL) == TUNED_EINVAL, "%s refused", bad[i]);
    tuned__shape s = {.dtype = TUNED_BF16, .rows = 4096, .cols = 32000,
                      .kernel = TUNED_KERNEL_SOFTMAX};
    tuned__config chunk = {.family = TUNED__FAMILY_CHUNK, .chunk = 512};
    char why[160];
    EXPECT(!tuned__config_check(&chunk, &s, 90, 132, why, sizeof why) &&
               strstr(why, "not chunks") != NULL,
           "softmax takes no chunk: %s", why);
    chunk.vec = 8;
    EXPECT(!tuned__config_check(&chunk, NULL, 0, 0, why, sizeof why),
           "a chunk with a kernel field refused: %s", why);
}

int main(void)
{
    test_reference();
    test_runs(TUNED_FP32);
    test_runs(TUNED_BF16);
    test_config();
    return expect_done("lce-check", NULL);
}
