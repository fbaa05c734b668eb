/* test_codegen.c: every sampled variant of every kernel (softmax,
 * softmax_bwd, log_softmax, log_softmax_bwd) and dtype compiles with NVRTC
 * for sm_90 and sm_80, and its PTX shows the vector width and cache hints
 * its config asks for, and the kernel's own entry point and parameters
 * (under AddressSanitizer the cubins of every fourth variant only).
 * Needs NVRTC (the CUDA toolkit), not a GPU. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "src/codegen/cross_entropy.h"
#include "src/codegen/nvrtc.h"
#include "src/codegen/source.h"
#include "src/tuner/space.h"

#include "tests/expect.h"

#if defined(__SANITIZE_ADDRESS__)
#define SANITIZED 1
#else
#define SANITIZED 0
#endif

/* Indexed by TUNED__LD_*; ld=el is no longer generated. */
static const char *const ld_ops[] = {"ld.global", "ld.global.nc", "ld.global.cs"};

/* The PTX load/store instruction a config must produce for full vectors. */
static void expected_ops(const tuned__config *c, tuned_dtype dtype, char *ld, size_t nl, char *st,
                         size_t ns)
{
    static const char *const st_ops[] = {"st.global", "st.global.cs"};
    unsigned bytes = c->vec * (unsigned)tuned_dtype_size(dtype);
    const char *suffix = bytes == 16 ? ".v4.u32" : bytes == 8 ? ".v2.u32" : bytes == 4 ? ".u32"
                                                                                       : ".u16";
    snprintf(ld, nl, "%s%s ", ld_ops[c->ld], suffix);
    snprintf(st, ns, "%s%s ", st_ops[c->st], suffix);
}

static size_t count(const char *text, const char *needle)
{
    size_t n = 0;
    for (const char *p = strstr(text, needle); p != NULL; p = strstr(p + 1, needle))
        n++;
    return n;
}

/* The register-row family's PTX: vector width and cache hints, the
 * reduction's cluster barriers, the packed maximum. */
static void check_rows_ptx(const tuned__config *c, const tuned__shape *s, const char *name,
                           const char *ptx)
{
    unsigned kernel = tuned__shape_kernel(s);
    bool backward = (tuned__kind(kernel)->reference == TUNED__REF_BACKWARD);
    char ld[64], st[64];
    expected_ops(c, s->dtype, ld, sizeof ld, st, sizeof st);
    /* A row shorter than one vector per thread never uses full vectors. */
    if (s->cols >= (uint64_t)tuned__config_threads_per_row(c) * c->vec * 2) {
        EXPECT(strstr(ptx, ld) != NULL, "%s %s: PTX lacks '%s'", name,
               tuned_dtype_name(s->dtype), ld);
        EXPECT(strstr(ptx, st) != NULL, "%s %s: PTX lacks '%s'", name,
               tuned_dtype_name(s->dtype), st);
    }
    /* Rows that start on a vector boundary: one vector load a pass (a
     * copy into shared memory for a stashed pass) and no element loads
     * (the per-element path serves unaligned rows only). */
    if (tuned__source_head_free(c, s, NULL) && c->vec > 1) {
        size_t esize = tuned_dtype_size(s->dtype);
        size_t iters = (size_t)tuned__config_iters(c, s, true);
        char elem[64];
        snprintf(elem, sizeof elem, "%s%s ", ld_ops[c->ld], esize == 2 ? ".u16" : ".u32");
        /* a backward kernel loads two rows, y and dy */
        size_t want = backward ? 2 * iters : iters - c->stash;
        EXPECT(count(ptx, ld) == want && count(ptx, elem) == 0,
               "%s %s x %llu: %zu vector loads for %zu passes, %zu element loads", name,
               tuned_dtype_name(s->dtype), (unsigned long long)s->cols, count(ptx, ld), want,
               count(ptx, elem));
    }
    /* A stash: one cp.async a stashed pass, one wait for them all. */
    size_t copies =
        count(ptx, "cp.async.cg.shared.global") + count(ptx, "cp.async.ca.shared.global");
    EXPECT(copies == c->stash && count(ptx, "cp.async.wait_all") == (c->stash > 0),
           "%s %s x %llu: %zu cp.async copies and %zu waits for a stash of %u", name,
           tuned_dtype_name(s->dtype), (unsigned long long)s->cols, copies,
           count(ptx, "cp.async.wait_all"), c->stash);
    EXPECT(strstr(ptx, "createpolicy") == NULL, "%s: an L2 policy in PTX", name);
    if (c->ld != TUNED__LD_NC)
        EXPECT(strstr(ptx, "ld.global.nc") == NULL, "%s: unexpected .nc load", name);
    if (c->st != TUNED__ST_CS)
        EXPECT(strstr(ptx, "st.global.cs") == NULL, "%s: unexpected .cs store", name);
    /* A cluster's blocks push their values into mailboxes: one relaxed
     * cluster arrival (the mailboxes set up) and no fenced one, a mailbox
     * per round (the one-round reduction and a backward kernel's one sum:
     * one; else two), sends that credit an mbarrier, and no remote load. */
    if (c->cluster > 1) {
        size_t arrives = count(ptx, "barrier.cluster.arrive");
        size_t relaxed = count(ptx, "barrier.cluster.arrive.relaxed");
        size_t inits = count(ptx, "mbarrier.init");
        size_t want = c->red == TUNED__RED_FUSED || backward ? 1 : 2;
        EXPECT(arrives == 1 && relaxed == 1, "%s: %zu cluster arrivals (%zu relaxed), want 1",
               name, arrives, relaxed);
        EXPECT(inits == want, "%s: %zu mailboxes, want %zu", name, inits, want);
        EXPECT(strstr(ptx, "st.async.shared::cluster.mbarrier::complete_tx::bytes") != NULL &&
                   strstr(ptx, "ld.shared::cluster") == NULL,
               "%s: the exchange is not pushed through mailboxes", name);
    }
    /* A grid split (its own entry point, forward and backward): the pair
     * published and polled whole, at GPU scope, the slot's arrival taken
     * by an atomic, with a timed-out wait that traps; the workspace and
     * the launch number as the last two parameters. */
    const char *entry = backward ? (c->grid > 1 ? "tuned_softmax_bwd_grid"
                                                : "tuned_softmax_bwd_rows")
                        : c->grid > 1 ? "tuned_softmax_grid"
                                      : "tuned_softmax_rows";
    EXPECT(strcmp(tuned__source_entry(c, s), entry) == 0, "%s: entry point %s", name,
           tuned__source_entry(c, s));
    char entry_text[64], last_param[64], past_param[64];
    /* (y, dy, dx, rows, cols, row_stride) backward, (x, y, rows, cols,
     * row_stride, scale) forward: six; a grid split's two more */
    int params = c->grid > 1 ? 8 : 6;
    snprintf(entry_text, sizeof entry_text, ".entry %s(", entry);
    snprintf(last_param, sizeof last_param, "%s_param_%d", entry, params - 1);
    snprintf(past_param, sizeof past_param, "%s_param_%d", entry, params);
    EXPECT(strstr(ptx, entry_text) != NULL && strstr(ptx, last_param) != NULL &&
               strstr(ptx, past_param) == NULL,
           "%s: %s does not take %d parameters", name, entry, params);
    if (c->grid > 1) {
        EXPECT(strstr(ptx, "st.relaxed.gpu.global.v2.u64") != NULL &&
                   strstr(ptx, "ld.relaxed.gpu.global.v2.u64") != NULL &&
                   strstr(ptx, "atom.relaxed.gpu.global.add.u64") != NULL,
               "%s: no relaxed 64-bit pair exchange or arrival in PTX", name);
        EXPECT(strstr(ptx, "%globaltimer") != NULL && strstr(ptx, "trap;") != NULL,
               "%s: no timed-out wait in PTX", name);
    } else {
        EXPECT(strstr(ptx, "%globaltimer") == NULL,
               "%s: a wait without a grid split", name);
    }
    if (backward) {
        /* log_softmax_bwd takes exp(y) at the store; softmax_bwd has no exp */
        EXPECT((strstr(ptx, "ex2.approx") != NULL) == (kernel == TUNED_KERNEL_LOG_SOFTMAX_BWD),
               "%s: ex2 in PTX %s", name, kernel == TUNED_KERNEL_LOG_SOFTMAX_BWD ? "missing" : "unexpected");
    }
    /* exp kept as 16-bit: one ex2 per element (iterations x vector),
     * where packed registers compute it twice */
    if (c->reg == TUNED__REG_EX) {
        size_t ex2 = count(ptx, "ex2.approx");
        size_t elems = (size_t)tuned__config_iters(c, s, tuned__config_head_free(c, s->cols)) *
                       c->vec;
        EXPECT(ex2 >= elems && ex2 < elems + 16, "%s: %zu ex2 in PTX for %zu elements a thread",
               name, ex2, elems);
    }
    if (c->reg != TUNED__REG_F32 && !backward)
        EXPECT(strstr(ptx, s->dtype == TUNED_BF16 ? "max.bf16x2" : "max.f16x2") != NULL,
               "%s %s: the packed maximum is not taken on pairs", name,
               tuned_dtype_name(s->dtype));
}

/* Any other kind's PTX: the entry point its spec names, taking its
 * tensors, (rows, cols, row_stride) and its options block, and its helper
 * kernels beside it. */
static void check_kind_entry(const tuned__config *c, const tuned__shape *s, const char *name,
                             const char *ptx)
{
    const tuned__kind_spec *k = tuned__shape_spec(s);
    const char *entry = tuned__source_entry(c, s);
    int params = k->ntensors + 3 + (k->params_size > 0);
    char entry_text[96], last_param[96], past_param[96];
    snprintf(entry_text, sizeof entry_text, ".entry %s(", entry);
    snprintf(last_param, sizeof last_param, "%s_param_%d", entry, params - 1);
    snprintf(past_param, sizeof past_param, "%s_param_%d", entry, params);
    EXPECT(strstr(ptx, entry_text) != NULL && strstr(ptx, last_param) != NULL &&
               strstr(ptx, past_param) == NULL,
           "%s %s: %s does not take %d parameters", k->name, name, entry, params);
    for (unsigned i = 0; i < TUNED__KIND_MAX_HELPERS && k->helper[i] != NULL; i++) {
        snprintf(entry_text, sizeof entry_text, ".entry %s(", k->helper[i]);
        EXPECT(strstr(ptx, entry_text) != NULL, "%s %s: no helper %s", k->name, name,
               k->helper[i]);
    }
    if (c->st != TUNED__ST_CS)
        EXPECT(strstr(ptx, "st.global.cs") == NULL, "%s %s: unexpected .cs store", k->name,
               name);
}

static void check_variant_opts(const tuned__nvrtc *n, const tuned__config *c,
                               const tuned__shape *s, const tuned__codegen_opts *opts)
{
    char name[TUNED__CONFIG_TEXT], *src = NULL;
    tuned__config_format(c, name, sizeof name);
    tuned__err e = {0};
    if (tuned__source_kernel(c, s, opts, &src, &e) != 0) {
        EXPECT(0, "%s: source: %s", name, e.msg);
        return;
    }
    tuned__blob ptx;
    if (tuned__nvrtc_compile(n, src, name, 90, TUNED__NVRTC_PTX, &ptx, &e) != 0) {
        EXPECT(0, "%s %s %s cols %llu: %s", tuned__kernel_name((uint8_t)tuned__shape_kernel(s)),
               name, tuned_dtype_name(s->dtype), (unsigned long long)s->cols, e.msg);
        free(src);
        return;
    }
    if (c->family == TUNED__FAMILY_TMA) {
        EXPECT(strstr(ptx.data, "cp.async.bulk.shared::cluster.global") != NULL &&
                   strstr(ptx.data, "mbarrier.try_wait") != NULL,
               "%s: no bulk copy on an mbarrier in PTX", name);
        EXPECT(strstr(ptx.data, c->st == TUNED__ST_CS ? "st.global.cs.v4" : "st.global.v4") != NULL,
               "%s: PTX lacks the 16-byte store with its hint", name);
    } else if (opts == NULL && (tuned__shape_spec(s)->reference == TUNED__REF_FORWARD ||
                                tuned__shape_spec(s)->reference == TUNED__REF_BACKWARD)) {
        check_rows_ptx(c, s, name, ptx.data);
    } else if (opts == NULL) {
        check_kind_entry(c, s, name, ptx.data);
    }
    if (c->cluster > 1 && tuned__shape_spec(s)->pairs)
        EXPECT(strstr(ptx.data, "mapa.shared::cluster") != NULL &&
                   strstr(ptx.data, "barrier.cluster") != NULL,
               "%s: no distributed shared memory exchange in PTX", name);
    tuned__blob_free(&ptx);
    /* Under AddressSanitizer (whose allocator NVRTC's own allocations go
     * through: three times the plain build's time) every variant's source
     * and PTX are still checked, the machine code of every fourth: the
     * plain build compiles them all. */
    static unsigned variants_seen;
    if (SANITIZED && variants_seen++ % 4 != 0) {
        free(src);
        return;
    }
    /* Clusters and the bulk copy engine exist from sm_90 on. */
    for (int arch = c->cluster > 1 || c->family == TUNED__FAMILY_TMA ? 90 : 80; arch <= 90;
         arch += 10) {
        tuned__blob cubin;
        if (tuned__nvrtc_compile(n, src, name, arch, TUNED__NVRTC_CUBIN, &cubin, &e) != 0) {
            EXPECT(0, "%s sm_%d: %s", name, arch, e.msg);
            continue;
        }
        EXPECT(cubin.size > 4 && memcmp(cubin.data, "\177ELF", 4) == 0,
               "%s sm_%d: cubin is not an ELF file", name, arch);
        tuned__blob_free(&cubin);
    }
    free(src);
}

static void check_variant(const tuned__nvrtc *n, const tuned__config *c, const tuned__shape *s)
{
    check_variant_opts(n, c, s, NULL);
}

/* Rows off a vector boundary count their slots from the 128-byte line
 * when they are long (16 KiB or more) in a forward kernel, else from their
 * vector: the define codegen emits, and the passes it sizes the row for. */
static void head_alignment(void)
{
    static const struct {
        unsigned kernel;
        tuned_dtype dtype;
        uint64_t cols;
        const char *config;
        unsigned align;
        uint64_t iters;
    } cases[] = {
        /* 50257 + 63 slots over 8192 a pass */
        {TUNED_KERNEL_SOFTMAX, TUNED_BF16, 50257, "w8.r1.c4.m4.v8.ld=nc.st=def.reg=pk.red=fused", 64, 7},
        /* 50257 + 31 over 8192: 6.14 passes, 7 */
        {TUNED_KERNEL_LOG_SOFTMAX, TUNED_FP32, 50257, "w8.r1.c8.m1.v4.ld=def.st=def.reg=f32", 32, 7},
        /* 4097 fp32 is 16388 bytes: a line; 4097 + 31 over 512 a pass */
        {TUNED_KERNEL_SOFTMAX, TUNED_FP32, 4097, "w4.r1.c1.m1.v4.ld=def.st=def.reg=f32", 32, 9},
        /* 1001 bf16 is short: its vector; 1001 + 7 over 256 */
        {TUNED_KERNEL_SOFTMAX, TUNED_BF16, 1001, "w4.r1.c1.m1.v2.ld=def.st=def.reg=f32", 2, 4},
        /* a backward kernel keeps its vector: 50257 + 7 over 8192 */
        {TUNED_KERNEL_SOFTMAX_BWD, TUNED_FP16, 50257, "w8.r1.c4.m2.v8.ld=def.st=def.reg=pk", 8, 7},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        tuned__config c;
        tuned__err e = {0};
        tuned__shape s = {cases[i].dtype, 64, cases[i].cols, (uint8_t)cases[i].kernel, 0};
        EXPECT(tuned__config_parse(cases[i].config, &c, &e) == 0, "%s", e.msg);
        unsigned align = tuned__config_head_align(&c, &s);
        uint64_t iters = tuned__config_iters(&c, &s, false);
        EXPECT(align == cases[i].align && iters == cases[i].iters,
               "%s %s x %llu: align %u, %llu passes; want %u, %llu", cases[i].config,
               tuned_dtype_name(s.dtype), (unsigned long long)s.cols, align,
               (unsigned long long)iters, cases[i].align, (unsigned long long)cases[i].iters);
        char *src = NULL, want[64];
        snprintf(want, sizeof want, "#define T_HEAD_ALIGN %u\n", cases[i].align);
        EXPECT(tuned__source_kernel(&c, &s, NULL, &src, &e) == 0 && strstr(src, want) != NULL,
               "%s: source lacks '%s' (%s)", cases[i].config, want, e.msg);
        free(src);
    }
}

int main(void)
{
    head_alignment();
    tuned__err e = {0};
    tuned__nvrtc *n = NULL;
    if (tuned__nvrtc_load(&n, &e) != 0) {
        fprintf(stderr, "FAIL: %s\n", e.msg);
        return 1;
    }
    /* Shapes chosen to exercise tails, unaligned rows and long rows. */
    static const uint64_t cols_list[] = {100, 4097, 32000, 128256};
    /* Softmax sampled most; the other kernels share its stages (the
     * router's own test, test_router, compiles its cases). */
    static const int per_shape[TUNED__KIND_COUNT + 1] = {0, 5, 2, 2, 2, 2, 2, 2, 1, 1, 0};
    size_t compiled = 0, clusters = 0, staged = 0, fused = 0, splits = 0;
    size_t per_kernel[TUNED__KIND_COUNT + 1] = {0};
    for (unsigned kernel = TUNED_KERNEL_SOFTMAX; kernel <= TUNED__KIND_COUNT; kernel++)
    for (int dt = TUNED_FP16; dt <= TUNED_FP32; dt++) {
        /* a composite compiles its inner kind's kernel: nothing of its own */
        if (tuned__kind(kernel)->evaluate != TUNED__EVALUATE_KERNEL)
            continue;
        for (size_t i = 0; i < sizeof cols_list / sizeof cols_list[0]; i++) {
            tuned__shape s = {(tuned_dtype)dt, 64, cols_list[i], (uint8_t)kernel, 0};
            tuned__kind_example(tuned__kind(kernel), &s.cols, &s.params);
            tuned__space sp;
            if (tuned__space_init(&sp, &s, 90, 132, &e) != 0) {
                EXPECT(0, "space %s %s x %llu: %s", tuned__kernel_name((uint8_t)kernel),
                       tuned_dtype_name(s.dtype), (unsigned long long)s.cols, e.msg);
                continue;
            }
            tuned__rng rng = {0x1234 + (uint64_t)dt * 7 + i + 1000 * (kernel - 1)};
            /* Every hint at least once per shape, the rest random. */
            for (int k = 0; k < per_shape[kernel]; k++) {
                tuned__config c;
                tuned__space_random(&sp, &rng, &c);
                c.ld = (uint8_t)(k % TUNED__LD_EL); /* el is never generated */
                c.st = (uint8_t)(k % TUNED__ST_COUNT);
                if (c.family == TUNED__FAMILY_ROWS)
                    c.red = (uint8_t)(k % TUNED__RED_COUNT);
                if (!tuned__space_valid(&sp, &c, NULL, 0))
                    tuned__space_random(&sp, &rng, &c);
                clusters += c.cluster > 1;
                splits += c.grid > 1;
                fused += c.red == TUNED__RED_FUSED;
                staged += c.family == TUNED__FAMILY_TMA;
                check_variant(n, &c, &s);
                compiled++;
                per_kernel[kernel]++;
            }
            tuned__space_free(&sp);
        }
    }
    /* Rows split over the grid, in each dtype and register mode, with a
     * tail and with an unaligned row length. */
    static const char *const split_configs[] = {
        "w8.r1.c1.m1.v8.ld=def.st=def.reg=pk.red=fused.g128",
        "w4.r1.c1.m2.v4.ld=nc.st=cs.reg=f32.red=fused.g64",
        "w32.r1.c1.m1.v2.ld=cs.st=def.reg=f32.red=fused.g2",
        "w8.r1.c1.m1.v8.ld=def.st=cs.reg=ex.red=fused.g32",
    };
    for (int dt = TUNED_FP16; dt <= TUNED_FP32; dt++)
        for (size_t i = 0; i < sizeof split_configs / sizeof split_configs[0]; i++) {
            tuned__config c;
            tuned__shape s = {(tuned_dtype)dt, 1, i == 2 ? 32003 : 262144, TUNED_KERNEL_SOFTMAX, 0};
            EXPECT(tuned__config_parse(split_configs[i], &c, &e) == 0, "%s", e.msg);
            if (c.reg != TUNED__REG_F32 && dt == TUNED_FP32)
                c.reg = TUNED__REG_F32, c.vec = 4;
            check_variant(n, &c, &s);
            compiled++;
            splits++;
        }
    /* Rows held by replicas (the launch's blocks times replicas, each
     * storing its passes), softmax and log_softmax, a row of a whole
     * number of passes and a ragged one, in every dtype. */
    static const char *const replica_configs[] = {
        "w8.r1.c16.m4.v8.ld=def.st=def.reg=pk.red=fused.rep4",
        "w4.r1.c8.m1.v4.ld=cs.st=cs.reg=f32.red=fused.rep2",
    };
    for (int dt = TUNED_FP16; dt <= TUNED_FP32; dt++)
        for (size_t i = 0; i < sizeof replica_configs / sizeof replica_configs[0]; i++) {
            tuned__config c;
            tuned__shape s = {(tuned_dtype)dt, 1, i == 1 ? 200003 : 262144,
                              (uint8_t)(i == 1 ? TUNED_KERNEL_LOG_SOFTMAX : TUNED_KERNEL_SOFTMAX), 0};
            EXPECT(tuned__config_parse(replica_configs[i], &c, &e) == 0, "%s", e.msg);
            if (c.reg != TUNED__REG_F32 && dt == TUNED_FP32)
                c.reg = TUNED__REG_F32, c.vec = 4, c.minb = 1;
            char *src = NULL;
            EXPECT(tuned__source_kernel(&c, &s, NULL, &src, &e) == 0 && src != NULL &&
                       strstr(src, i == 1 ? "#define T_REPLICAS 2\n" : "#define T_REPLICAS 4\n"),
                   "%s: no replicas in the source: %s", replica_configs[i], e.msg);
            free(src);
            check_variant(n, &c, &s);
            compiled++, clusters++;
        }
    /* log_softmax's grid splits and staged rows, in every dtype. */
    for (int dt = TUNED_FP16; dt <= TUNED_FP32; dt++) {
        tuned__config c;
        tuned__shape s = {(tuned_dtype)dt, 1, 262144, TUNED_KERNEL_LOG_SOFTMAX, 0};
        EXPECT(tuned__config_parse(dt == TUNED_FP32 ? "w4.r1.c1.m2.v4.ld=nc.st=cs.reg=f32.red=fused.g64"
                                                    : "w8.r1.c1.m1.v8.ld=def.st=def.reg=pk.red=fused.g128",
                                   &c, &e) == 0,
               "%s", e.msg);
        check_variant(n, &c, &s);
        tuned__shape t = {(tuned_dtype)dt, 64, 32000, TUNED_KERNEL_LOG_SOFTMAX, 0};
        EXPECT(tuned__config_parse("tma.w8.c2.s2.st=cs", &c, &e) == 0, "%s", e.msg);
        check_variant(n, &c, &t);
        compiled += 2, splits++, staged++, per_kernel[TUNED_KERNEL_LOG_SOFTMAX] += 2;
    }
    /* The backward kernels: clusters, a tail, packed registers, and rows
     * that are not 16-byte aligned (dy loaded element by element where its
     * offset differs from y's). */
    static const char *const bwd_configs[] = {"w8.r1.c4.m1.v8.ld=nc.st=cs.reg=pk",
                                              "w2.r4.c1.m2.v2.ld=cs.st=def.reg=f32"};
    for (unsigned kernel = TUNED_KERNEL_SOFTMAX_BWD; kernel <= TUNED_KERNEL_LOG_SOFTMAX_BWD;
         kernel += 2)
        for (int dt = TUNED_FP16; dt <= TUNED_FP32; dt++)
            for (size_t i = 0; i < sizeof bwd_configs / sizeof bwd_configs[0]; i++) {
                tuned__config c;
                tuned__shape s = {(tuned_dtype)dt, 64, i == 0 ? 128256 : 1001, (uint8_t)kernel, 0};
                EXPECT(tuned__config_parse(bwd_configs[i], &c, &e) == 0, "%s", e.msg);
                if (dt == TUNED_FP32 && c.vec == 8)
                    c.vec = 4, c.reg = TUNED__REG_F32, c.cluster = 8;
                check_variant(n, &c, &s);
                compiled++, per_kernel[kernel]++, clusters += c.cluster > 1;
                if (i == 1) {
                    tuned__codegen_opts unaligned = {.unaligned = true};
                    check_variant_opts(n, &c, &s, &unaligned);
                    compiled++, per_kernel[kernel]++;
                }
            }
    /* The cross-entropy kinds' compiled-in options: the softcap and the
     * argmax (with smoothing and int32 labels, and alone), in every dtype,
     * on a cluster of packed registers, fp32 rows of one block (two-round
     * and fused reductions) and rows in part of a warp, with a tail. */
    static const char *const ce_configs[] = {"w8.r1.c8.m1.v8.ld=cs.st=def.reg=pk.red=fused",
                                             "w16.r1.c1.m1.v4.ld=def.st=cs.reg=f32.red=split",
                                             "w4.r8.c1.m2.v2.ld=cs.st=def.reg=f32.red=fused"};
    static const unsigned ce_flags[] = {TUNED__CE_FLAG_SOFTCAP | TUNED__CE_FLAG_ARGMAX,
                                        TUNED__CE_FLAG_SOFTCAP | TUNED__CE_FLAG_SMOOTH |
                                            TUNED__CE_FLAG_LABEL32,
                                        TUNED__CE_FLAG_ARGMAX | TUNED__CE_FLAG_SMOOTH};
    for (unsigned kernel = TUNED_KERNEL_CROSS_ENTROPY; kernel <= TUNED_KERNEL_CROSS_ENTROPY_BWD;
         kernel++)
        for (int dt = TUNED_FP16; dt <= TUNED_FP32; dt++)
            for (size_t i = 0; i < sizeof ce_configs / sizeof ce_configs[0]; i++) {
                tuned__config c;
                tuned__shape s = {(tuned_dtype)dt, 64, i == 0 ? 128256 : i == 1 ? 32003 : 1001,
                                  (uint8_t)kernel, 0};
                EXPECT(tuned__config_parse(ce_configs[i], &c, &e) == 0, "%s", e.msg);
                if (dt == TUNED_FP32 && c.reg == TUNED__REG_PK)
                    c.vec = 4, c.reg = TUNED__REG_F32, c.cluster = 16;
                if (!tuned__kind(kernel)->pairs)
                    c.red = TUNED__RED_SPLIT; /* the backward reduces nothing */
                tuned__codegen_opts o = {.unaligned = i == 1,
                                         .flags = ce_flags[(i + (size_t)dt) % 3]};
                char *src = NULL;
                EXPECT(tuned__source_kernel(&c, &s, &o, &src, &e) == 0 && src != NULL &&
                           ((o.flags & TUNED__CE_FLAG_SOFTCAP) == 0) ==
                               (strstr(src, "#define T_CE_SOFTCAP 1\n") == NULL),
                       "%s: the softcap define: %s", ce_configs[i], e.msg);
                free(src);
                check_variant_opts(n, &c, &s, &o);
                compiled++, per_kernel[kernel]++, clusters += c.cluster > 1;
            }
    /* A softcap or argmax build relaxes the winner's bound of 4 blocks an
     * SM to 2 (its registers spill under 4); smoothing and int32 labels
     * keep it. */
    {
        static const struct {
            unsigned flags;
            const char *define;
        } bounds[] = {{0, "#define T_MIN_BLOCKS 4\n"},
                      {TUNED__CE_FLAG_LABEL32 | TUNED__CE_FLAG_SMOOTH, "#define T_MIN_BLOCKS 4\n"},
                      {TUNED__CE_FLAG_SOFTCAP, "#define T_MIN_BLOCKS 2\n"},
                      {TUNED__CE_FLAG_ARGMAX | TUNED__CE_FLAG_LABEL32, "#define T_MIN_BLOCKS 2\n"}};
        tuned__config c;
        tuned__shape s = {TUNED_BF16, 8192, 128256, TUNED_KERNEL_CROSS_ENTROPY, 0};
        EXPECT(tuned__config_parse("w8.r1.c8.m4.v8.ld=def.st=def.reg=pk.red=fused", &c, &e) == 0,
               "%s", e.msg);
        for (size_t i = 0; i < sizeof bounds / sizeof bounds[0]; i++) {
            tuned__codegen_opts o = {.flags = bounds[i].flags};
            char *src = NULL;
            EXPECT(tuned__source_kernel(&c, &s, &o, &src, &e) == 0 &&
                       strstr(src, bounds[i].define) != NULL,
                   "flags 0x%x: want %s", bounds[i].flags, bounds[i].define);
            free(src);
        }
    }
    static const char *const ex_configs[] = {"w32.r1.c2.m1.v8.ld=def.st=def.reg=ex.red=fused",
                                             "w8.r1.c8.m4.v8.ld=cs.st=def.reg=ex",
                                             "w4.r1.c1.m1.v2.ld=def.st=cs.reg=ex"};
    for (int dt = TUNED_FP16; dt <= TUNED_BF16; dt++)
        for (size_t i = 0; i < sizeof ex_configs / sizeof ex_configs[0]; i++) {
            tuned__config c;
            tuned__shape s = {(tuned_dtype)dt, 64, i == 2 ? 1001 : 128256, TUNED_KERNEL_SOFTMAX, 0};
            EXPECT(tuned__config_parse(ex_configs[i], &c, &e) == 0, "%s", e.msg);
            check_variant(n, &c, &s);
            compiled++;
        }
    /* The staged family in every dtype, sampled or not. */
    for (int dt = TUNED_FP16; dt <= TUNED_FP32; dt++) {
        tuned__config c;
        tuned__shape s = {(tuned_dtype)dt, 64, 32000, TUNED_KERNEL_SOFTMAX, 0};
        EXPECT(tuned__config_parse(dt == TUNED_FP32 ? "tma.w16.c2.s2.st=cs" : "tma.w8.c1.s3.st=def",
                                   &c, &e) == 0,
               "%s", e.msg);
        check_variant(n, &c, &s);
        compiled++;
        staged++;
    }
    /* A composite's kernels for vocabulary blocks, for every dtype: both
     * entry points in the PTX. */
    for (int dt = TUNED_FP16; dt <= TUNED_FP32; dt++) {
        const tuned__kind_spec *lce = tuned__kind(TUNED_KERNEL_LINEAR_CROSS_ENTROPY);
        char *src = NULL;
        tuned__blob ptx = {0};
        EXPECT(tuned__source_blocks(lce, (tuned_dtype)dt, &src, &e) == 0, "blocks: %s", e.msg);
        EXPECT(src == NULL ||
                   tuned__nvrtc_compile(n, src, "linear_ce_blocks", 90, TUNED__NVRTC_PTX, &ptx,
                                        &e) == 0,
               "blocks %s: %s", tuned_dtype_name((tuned_dtype)dt), e.msg);
        EXPECT(ptx.data != NULL && strstr((const char *)ptx.data, ".entry tuned_lce_pick") &&
                   strstr((const char *)ptx.data, ".entry tuned_lce_combine"),
               "blocks %s: an entry point is missing", tuned_dtype_name((tuned_dtype)dt));
        tuned__blob_free(&ptx);
        free(src);
        compiled++;
    }
    EXPECT(tuned__source_blocks(tuned__kind(TUNED_KERNEL_SOFTMAX), TUNED_FP32, &(char *){NULL},
                                &e) == TUNED_EINVAL,
           "softmax has no kernels for vocabulary blocks");
    for (int dt = TUNED_FP16; dt <= TUNED_FP32; dt++) {
        char *src = NULL;
        tuned__blob cubin;
        EXPECT(tuned__source_reference(tuned__kind(TUNED_KERNEL_SOFTMAX), (tuned_dtype)dt, &src, &e) == 0, "reference: %s", e.msg);
        if (src != NULL) {
            EXPECT(tuned__nvrtc_compile(n, src, "reference", 90, TUNED__NVRTC_CUBIN, &cubin, &e) == 0,
                   "reference %s: %s", tuned_dtype_name((tuned_dtype)dt), e.msg);
            tuned__blob_free(&cubin);
            /* The evaluator's flush relies on the L2 priority reset being
             * there on sm_80 and newer, the oldest tuned runs on. */
            for (int arch = 80; arch <= 90; arch += 10) {
                tuned__blob ptx = {0};
                EXPECT(tuned__nvrtc_compile(n, src, "reference", arch, TUNED__NVRTC_PTX, &ptx,
                                            &e) == 0,
                       "reference sm_%d: %s", arch, e.msg);
                bool reset = ptx.data != NULL &&
                             strstr((const char *)ptx.data,
                                    "applypriority.global.L2::evict_normal") != NULL;
                EXPECT(reset == (arch >= 80), "reference sm_%d: the L2 priority reset is %s",
                       arch, reset ? "there" : "missing");
                /* The pause after each flush reads the global timer in a loop. */
                bool settle = ptx.data != NULL &&
                              strstr((const char *)ptx.data, ".entry tuned_settle") != NULL &&
                              strstr((const char *)ptx.data, "%globaltimer") != NULL;
                EXPECT(settle, "reference sm_%d: the pause after the flush is missing", arch);
                tuned__blob_free(&ptx);
            }
            free(src);
        }
    }
    /* Codegen refuses what it cannot emit, and a compile error carries the
     * variant's name and NVRTC's log. */
    tuned__shape fp32 = {TUNED_FP32, 4, 100, TUNED_KERNEL_SOFTMAX, 0};
    tuned__config wide = {.warps = 4, .rows = 1, .cluster = 1, .minb = 1, .vec = 8};
    char *src = NULL;
    EXPECT(tuned__source_kernel(&wide, &fp32, NULL, &src, &e) == TUNED_EINVAL &&
               strstr(e.msg, "16 bytes") != NULL,
           "an 8 x fp32 vector was not refused: %s", e.msg);
    /* Row groups that are not power-of-two lane ranges would mix rows in
     * the shuffles: refused even where the text form never produces them. */
    tuned__config odd = {.warps = 3, .rows = 2, .cluster = 1, .minb = 1, .vec = 4};
    tuned__shape f16 = {TUNED_FP16, 4, 100, TUNED_KERNEL_SOFTMAX, 0};
    EXPECT(tuned__source_kernel(&odd, &f16, NULL, &src, &e) == TUNED_EINVAL,
           "3 warps for 2 rows not refused");
    tuned__config tma = {.family = TUNED__FAMILY_TMA, .warps = 16, .rows = 1, .cluster = 1,
                         .minb = 1, .stages = 2};
    tuned__codegen_opts plant = {.plant_bug = 1};
    tuned__shape long_rows = {TUNED_FP16, 4, 32000, TUNED_KERNEL_SOFTMAX, 0};
    EXPECT(tuned__source_kernel(&tma, &long_rows, &plant, &src, &e) == TUNED_EINVAL,
           "a planted bug accepted for a tma variant");
    /* ld=el left the space and the templates: codegen refuses it. */
    tuned__config el = {.warps = 4, .rows = 1, .cluster = 1, .minb = 1, .vec = 8,
                        .ld = TUNED__LD_EL};
    EXPECT(tuned__source_kernel(&el, &long_rows, NULL, &src, &e) == TUNED_EINVAL &&
               strstr(e.msg, "ld=el") != NULL,
           "ld=el not refused: %s", e.msg);
    /* Which templates a variant is made of: a grid split from
     * softmax_grid.cu, other rows from softmax_rows.cu, both on the shared
     * stages; no planted bug unless asked for. */
    tuned__config rows_cfg = {.warps = 32, .rows = 1, .cluster = 1, .minb = 1, .vec = 8};
    tuned__config grid_cfg = {.warps = 8, .rows = 1, .cluster = 1, .minb = 1, .vec = 8,
                              .red = TUNED__RED_FUSED, .grid = 4};
    for (int split = 0; split <= 1; split++) {
        EXPECT(tuned__source_kernel(split ? &grid_cfg : &rows_cfg, &long_rows, NULL, &src, &e) == 0,
               "%s", e.msg);
        if (src != NULL) {
            bool from_grid = strstr(src, "/* softmax_grid.cu:") != NULL;
            bool from_rows = strstr(src, "/* softmax_rows.cu:") != NULL;
            EXPECT(from_grid == (split == 1) && from_rows == (split == 0) &&
                       strstr(src, "/* softmax_rows_common.cu:") != NULL &&
                       strstr(src, "/* softmax_common.cu:") != NULL,
                   "%s variant: templates grid %d rows %d", split ? "grid" : "rows", from_grid,
                   from_rows);
            /* the define block: the text before the first template */
            const char *first = strstr(src, "/* softmax_common.cu:");
            if (first != NULL)
                src[first - src] = '\0';
            EXPECT(strstr(src, "#define T_PLANT_BUG") == NULL,
                   "a T_PLANT_BUG define without a planted bug");
            EXPECT((strstr(src, "#define T_GRID ") != NULL) == (split == 1),
                   "T_GRID %s for a %s variant", split ? "missing" : "emitted",
                   split ? "grid" : "rows");
            free(src);
            src = NULL;
        }
    }
    /* Planted bugs are a test hook: emitted in a hooks build, refused
     * (TUNED_EUNSUPPORTED) otherwise. */
    int rc = tuned__source_kernel(&rows_cfg, &long_rows, &plant, &src, &e);
#ifdef TUNED_TEST_HOOKS
    EXPECT(rc == 0 && src != NULL && strstr(src, "#define T_PLANT_BUG 1\n") != NULL,
           "planted bug 1 not emitted: %s", e.msg);
#else
    EXPECT(rc == TUNED_EUNSUPPORTED && strstr(e.msg, "test hook") != NULL,
           "a planted bug accepted without test hooks (%d): %s", rc, e.msg);
#endif
    free(src);
    src = NULL;
    tuned__blob junk;
    EXPECT(tuned__nvrtc_compile(n, "this is not CUDA", "softmax junk", 90, TUNED__NVRTC_CUBIN, &junk,
                                &e) == TUNED_ECOMPILE &&
               strstr(e.msg, "nvrtc: softmax junk for sm_90: ") == e.msg && strstr(e.msg, "error") != NULL,
           "compile error message: %s", e.msg);
    for (unsigned kernel = TUNED_KERNEL_SOFTMAX; kernel <= TUNED__KIND_COUNT; kernel++)
        EXPECT(per_kernel[kernel] >= 10 || tuned__kind(kernel)->evaluate != TUNED__EVALUATE_KERNEL,
               "%s: only %zu variants compiled", tuned__kernel_name((uint8_t)kernel),
               per_kernel[kernel]);
    /* A chunk has no source: codegen says so and names the inner kind. */
    {
        tuned__shape s = {TUNED_BF16, 4096, 128256, TUNED_KERNEL_LINEAR_CROSS_ENTROPY,
                          tuned__params_default(tuned__kind(TUNED_KERNEL_LINEAR_CROSS_ENTROPY))};
        tuned__config c = {.family = TUNED__FAMILY_CHUNK, .chunk = 1024};
        char *chunk_src = NULL;
        EXPECT(tuned__source_kernel(&c, &s, NULL, &chunk_src, &e) == TUNED_EINVAL &&
                   strstr(e.msg, "cross_entropy") != NULL && chunk_src == NULL,
               "a chunk's source refused: %s", e.msg);
    }
    /* What a kernel does not have is refused, by the one rule. */
    static const struct {
        unsigned kernel;
        const char *config;
    } refused[] = {
        {TUNED_KERNEL_SOFTMAX_BWD, "w8.r1.c1.m1.v8.ld=def.st=def.reg=ex"},
        {TUNED_KERNEL_SOFTMAX_BWD, "w8.r1.c1.m1.v8.ld=def.st=def.reg=f32.red=fused"},
        {TUNED_KERNEL_LOG_SOFTMAX_BWD, "w8.r1.c1.m1.v8.ld=def.st=def.reg=f32.red=fused.g4"},
        {TUNED_KERNEL_LOG_SOFTMAX_BWD, "tma.w16.c1.s2.st=def"},
        {TUNED_KERNEL_LOG_SOFTMAX, "w8.r1.c1.m1.v8.ld=def.st=def.reg=ex"},
    };
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        tuned__config c;
        tuned__shape s = {TUNED_FP16, 64, 32000, (uint8_t)refused[i].kernel, 0};
        EXPECT(tuned__config_parse(refused[i].config, &c, &e) == 0, "%s", e.msg);
        char why[160] = "";
        EXPECT(!tuned__config_check(&c, &s, 90, 132, why, sizeof why) &&
                   strstr(why, tuned__kernel_name((uint8_t)refused[i].kernel)) != NULL,
               "%s accepted for %s (%s)", refused[i].config,
               tuned__kernel_name((uint8_t)refused[i].kernel), why);
        EXPECT(tuned__source_kernel(&c, &s, NULL, &src, &e) == TUNED_EINVAL,
               "codegen emitted %s for %s", refused[i].config,
               tuned__kernel_name((uint8_t)refused[i].kernel));
    }
    /* A backward kernel holds two rows: a config whose one row just fits
     * the registers does not fit for it. */
    {
        tuned__config c;
        EXPECT(tuned__config_parse("w32.r1.c1.m1.v8.ld=def.st=def.reg=f32", &c, &e) == 0, "%s",
               e.msg);
        tuned__shape fwd = {TUNED_FP16, 64, 32768, TUNED_KERNEL_SOFTMAX, 0};
        tuned__shape bwd = {TUNED_FP16, 64, 32768, TUNED_KERNEL_SOFTMAX_BWD, 0};
        EXPECT(tuned__config_check(&c, &fwd, 90, 132, NULL, 0) &&
                   !tuned__config_check(&c, &bwd, 90, 132, NULL, 0),
               "w32 v8 f32 on 32768 columns: one row of 128 registers fits, two must not");
    }
    EXPECT(clusters > 0, "no cluster variant sampled");
    EXPECT(staged > 0, "no tma variant sampled");
    EXPECT(fused > 0, "no one-round reduction sampled");
    tuned__config split_cluster = {.warps = 8, .rows = 1, .cluster = 2, .minb = 1, .vec = 8,
                                   .red = TUNED__RED_FUSED, .grid = 4};
    EXPECT(tuned__source_kernel(&split_cluster, &long_rows, NULL, &src, &e) == TUNED_EINVAL,
           "a grid split of clusters accepted");
    tuned__nvrtc_unload(n);
    printf("%zu variants (%zu softmax, %zu softmax_bwd, %zu log_softmax, %zu log_softmax_bwd; "
           "%zu with clusters, %zu tma, %zu one-round, %zu grid splits) compiled for sm_80 and "
           "sm_90, PTX checked; %d failures\n",
           compiled, per_kernel[1], per_kernel[2], per_kernel[3], per_kernel[4], clusters, staged,
           fused, splits, failures);
    return failures ? 1 : 0;
}
