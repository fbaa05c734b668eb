/* test_space.c: the variant space's constraints, the config text form's
 * round trip, neighbours and random draws. No GPU, no NVRTC. */
#include <stdio.h>
#include <string.h>

#include "src/common/hash.h"
#include "src/tuner/space.h"

#include "tests/expect.h"

/* Every text of bad is refused by the parser, with a message. */
static void expect_unparsed(const char *const *bad, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        tuned__config c;
        tuned__err e = {0};
        EXPECT(tuned__config_parse(bad[i], &c, &e) == TUNED_EINVAL && e.msg[0] != '\0',
               "'%s' was accepted", bad[i]);
    }
}

static void text_round_trip(void)
{
    tuned__err e = {0};
    tuned__config c;
    EXPECT(tuned__config_parse("w8.r1.c1.m1.v8.ld=cs.st=cs.reg=f32", &c, &e) == 0, "%s", e.msg);
    EXPECT(c.warps == 8 && c.rows == 1 && c.cluster == 1 && c.minb == 1 && c.vec == 8 && c.ld == TUNED__LD_CS &&
               c.st == TUNED__ST_CS && c.reg == TUNED__REG_F32 && c.red == TUNED__RED_SPLIT,
           "parsed fields");
    /* The one-round reduction is a ninth field; two rounds print none. */
    char red_text[TUNED__CONFIG_TEXT];
    EXPECT(tuned__config_parse("w8.r1.c4.m2.v8.ld=el.st=def.reg=pk.red=fused", &c, &e) == 0 &&
               c.red == TUNED__RED_FUSED && c.cluster == 4 && c.reg == TUNED__REG_PK,
           "red=fused: %s", e.msg);
    tuned__config_format(&c, red_text, sizeof red_text);
    EXPECT(strcmp(red_text, "w8.r1.c4.m2.v8.ld=el.st=def.reg=pk.red=fused") == 0, "formatted %s",
           red_text);
    EXPECT(tuned__config_parse("w8.r1.c4.m2.v8.ld=el.st=def.reg=pk.red=split", &c, &e) == 0 &&
               c.red == TUNED__RED_SPLIT,
           "red=split: %s", e.msg);
    tuned__config_format(&c, red_text, sizeof red_text);
    EXPECT(strcmp(red_text, "w8.r1.c4.m2.v8.ld=el.st=def.reg=pk") == 0, "formatted %s", red_text);
    /* A row split over the grid is a tenth field, after red=fused. */
    EXPECT(tuned__config_parse("w8.r1.c1.m1.v8.ld=def.st=cs.reg=pk.red=fused.g128", &c, &e) == 0 &&
               c.grid == 128 && c.red == TUNED__RED_FUSED && c.st == TUNED__ST_CS,
           "g128: %s", e.msg);
    tuned__config_format(&c, red_text, sizeof red_text);
    EXPECT(strcmp(red_text, "w8.r1.c1.m1.v8.ld=def.st=cs.reg=pk.red=fused.g128") == 0,
           "formatted %s", red_text);
    EXPECT(tuned__config_blocks_per_row(&c) == 128, "blocks a row of g128");
    static const char *const bad[] = {
        "w8.r1.c1.m1.v8.ld=def.st=def.reg=f32.red=fused.g1",
        "w8.r1.c1.m1.v8.ld=def.st=def.reg=f32.red=fused.g3",
        "w8.r1.c1.m1.v8.ld=def.st=def.reg=f32.red=fused.g512",
        "w8.r1.c2.m1.v8.ld=def.st=def.reg=f32.red=fused.g4",
        "w8.r2.c1.m1.v8.ld=def.st=def.reg=f32.red=fused.g4",
        "w8.r1.c1.m1.v8.ld=def.st=def.reg=f32.red=fused.c4",
        "w8.r1.c1.m1.v8.ld=def.st=def.reg=f32.red=fused.g4.g4",
        "", "w8", "w8.r1.c1.m1.v8.ld=cs.st=cs", "w3.r1.c1.m1.v8.ld=cs.st=cs.reg=f32",
        "w8.r512.c1.m1.v8.ld=cs.st=cs.reg=f32", "w8.r1.c1.m1.v16.ld=cs.st=cs.reg=f32",
        "w8.r1.c1.m1.v8.ld=xx.st=cs.reg=f32", "w8.r1.c1.m1.v8.ld=cs.st=nc.reg=f32",
        "w8.r1.c1.m1.v8.ld=cs.st=cs.reg=f64", "w8.r1.c1.m1.v8.ld=cs.st=cs.reg=f32.x",
        "w-8.r1.c1.m1.v8.ld=cs.st=cs.reg=f32", "w64.r1.c1.m1.v8.ld=cs.st=cs.reg=f32",
        "w8.r2.c2.m1.v8.ld=cs.st=cs.reg=f32", "w8.r1.c32.m1.v8.ld=cs.st=cs.reg=f32",
        "w8.r1.v8.ld=cs.st=cs.reg=f32", "w8.r1.c1.m3.v8.ld=cs.st=cs.reg=f32",
        "w32.r1.c1.m4.v8.ld=cs.st=cs.reg=f32", "w8.r1.c1.m1.v8.ld=cs.st=cs.reg=f32.red=one",
        "w8.r1.c1.m1.v8.ld=cs.st=cs.reg=f32.red=fused.red=fused",
        "w8.r1.c1.m1.v8.ld=cs.st=cs.reg=f32.........................................",
    };
    expect_unparsed(bad, sizeof bad / sizeof bad[0]);
    /* A grid split's reduction depends on the kernel: one-round pairs
     * forward, the one sum backward. */
    {
        tuned__err ge = {0};
        char why[160];
        tuned__shape fwd = {TUNED_FP16, 1, 262144, TUNED_KERNEL_SOFTMAX, 0};
        tuned__shape bwd = {TUNED_FP16, 1, 262144, TUNED_KERNEL_SOFTMAX_BWD, 0};
        EXPECT(tuned__config_parse("w8.r1.c1.m1.v8.ld=def.st=def.reg=f32.red=split.g64", &c, &ge) ==
                   0,
               "%s", ge.msg);
        EXPECT(!tuned__config_check(&c, &fwd, 90, 132, why, sizeof why) &&
                   strstr(why, "one-round") != NULL,
               "a forward grid split without one-round pairs: %s", why);
        EXPECT(tuned__config_check(&c, &bwd, 90, 132, why, sizeof why), "softmax_bwd: %s", why);
        EXPECT(tuned__config_parse("w8.r1.c1.m1.v8.ld=def.st=def.reg=f32.red=fused.g64", &c, &ge) ==
                   0,
               "%s", ge.msg);
        EXPECT(tuned__config_check(&c, &fwd, 90, 132, why, sizeof why), "softmax: %s", why);
        EXPECT(!tuned__config_check(&c, &bwd, 90, 132, why, sizeof why),
               "a backward grid split with one-round pairs was accepted");
    }
    /* Every valid config of a few spaces survives format -> parse. */
    static const tuned__shape shapes[] = {
        {TUNED_FP16, 4096, 32000, TUNED_KERNEL_SOFTMAX, 0}, {TUNED_BF16, 7, 7, TUNED_KERNEL_SOFTMAX, 0}, {TUNED_FP32, 1, 4097, TUNED_KERNEL_SOFTMAX, 0},
        {TUNED_FP16, 1, 262144, TUNED_KERNEL_SOFTMAX_BWD, 0}, {TUNED_BF16, 8, 65536, TUNED_KERNEL_LOG_SOFTMAX_BWD, 0}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        tuned__space sp;
        EXPECT(tuned__space_init(&sp, &shapes[s], 90, 132, &e) == 0, "%s", e.msg);
        for (size_t i = 0; i < sp.count; i++) {
            char text[TUNED__CONFIG_TEXT];
            tuned__config back;
            tuned__config_format(&sp.valid[i], text, sizeof text);
            EXPECT(tuned__config_parse(text, &back, &e) == 0 &&
                       tuned__config_equal(&back, &sp.valid[i]),
                   "round trip of %s", text);
        }
        tuned__space_free(&sp);
    }
}

/* A config that parses but that tuned__config_check refuses for shape
 * (on sm_90 with 132 SMs), with why naming the reason. */
typedef struct refusal {
    const char *config;
    tuned__shape shape;
    const char *why;
} refusal;

/* Texts that parse to a valid config but are not its printed form: the
 * canonical parse refuses each, naming the form it prints as, with the
 * code asked for; the printed form itself passes. */
static void canonical_form(void)
{
    static const char *const canon = "w8.r1.c4.m2.v8.ld=el.st=def.reg=pk";
    static const char *const others[] = {
        "w08.r1.c4.m2.v8.ld=el.st=def.reg=pk",           /* a leading zero */
        "w8..r1.c4.m2.v8.ld=el.st=def.reg=pk",           /* an empty field */
        "w8.r1.c4.m2.v8.ld=el.st=def.reg=pk.",           /* a trailing dot */
        "w8.r1.c4.m2.v8.ld=el.st=def.reg=pk.red=split",  /* the default, spelt out */
    };
    tuned__err e = {0};
    tuned__config c, want;
    EXPECT(tuned__config_parse_canonical(canon, TUNED_ESTORE, &want, &e) == 0, "%s", e.msg);
    for (size_t i = 0; i < sizeof others / sizeof others[0]; i++) {
        e = (tuned__err){0};
        EXPECT(tuned__config_parse(others[i], &c, &e) == 0 && tuned__config_equal(&c, &want),
               "'%s' is not another text of %s: %s", others[i], canon, e.msg);
        e = (tuned__err){0};
        EXPECT(tuned__config_parse_canonical(others[i], TUNED_ESTORE, &c, &e) == TUNED_ESTORE &&
                   e.code == TUNED_ESTORE && strstr(e.msg, "canonical") != NULL &&
                   strstr(e.msg, canon) != NULL,
               "'%s' taken as canonical: %s", others[i], e.msg);
    }
    e = (tuned__err){0};
    EXPECT(tuned__config_parse_canonical("w8.r1.bogus", TUNED_EINVAL, &c, &e) == TUNED_EINVAL &&
               e.code == TUNED_EINVAL && strstr(e.msg, "w8.r1.bogus") != NULL,
           "an unparsable text: %d %s", e.code, e.msg);
}

static void expect_refused(const refusal *refused, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        tuned__err e = {0};
        tuned__config c;
        char why[200] = "";
        EXPECT(tuned__config_parse(refused[i].config, &c, &e) == 0, "%s", e.msg);
        EXPECT(!tuned__config_check(&c, &refused[i].shape, 90, 132, why, sizeof why) &&
                   strstr(why, refused[i].why) != NULL,
               "%s accepted, or refused for another reason: %s", refused[i].config, why);
    }
}

/* Parses text into *c and checks that it formats back to the same text. */
static void expect_round_trip(const char *text, tuned__config *c)
{
    tuned__err e = {0};
    char back[TUNED__CONFIG_TEXT] = "";
    EXPECT(tuned__config_parse(text, c, &e) == 0, "%s", e.msg);
    tuned__config_format(c, back, sizeof back);
    EXPECT(strcmp(back, text) == 0, "%s formatted as %s", text, back);
}

/* Whether sp holds c. */
static bool space_holds(const tuned__space *sp, const tuned__config *c)
{
    for (size_t i = 0; i < sp->count; i++)
        if (tuned__config_equal(&sp->valid[i], c))
            return true;
    return false;
}

/* A stash: its text, its rules (forward kernels, no grid split, no
 * reg=ex, vectors of 4 bytes, every stashed pass inside the row, at most
 * TUNED__STASH_MAX_BYTES a block), its registers, and the space's one size
 * of it where the registers cannot hold the row. */
static void stash(void)
{
    tuned__err e = {0};
    tuned__config c;
    char why[200];
    const char *good = "w8.r1.c16.m4.v2.ld=def.st=def.reg=f32.red=fused.stash16";
    expect_round_trip(good, &c);
    EXPECT(c.stash == 16 && c.grid == 0, "%s: stash %u, grid %u", good, c.stash, c.grid);
    tuned__shape s = {TUNED_FP32, 64, 262144, TUNED_KERNEL_SOFTMAX, 0};
    EXPECT(tuned__config_check(&c, &s, 90, 132, why, sizeof why), "%s: %s", good, why);
    /* 32 passes, 16 in registers: 32 registers of the row, not 64 */
    EXPECT(tuned__config_row_registers(&c, &s, true) == 32, "registers %llu",
           (unsigned long long)tuned__config_row_registers(&c, &s, true));
    tuned__config held = c;
    held.stash = 0;
    EXPECT(!tuned__config_check(&held, &s, 90, 132, why, sizeof why) && strstr(why, "registers"),
           "the same without a stash fits: %s", why);
    static const refusal refused[] = {
        {"w8.r1.c16.m4.v2.ld=def.st=def.reg=f32.stash16",
         {TUNED_FP32, 64, 262144, TUNED_KERNEL_SOFTMAX_BWD, 0}, "softmax_bwd keeps no stash"},
        {"w8.r1.c16.m4.v1.ld=def.st=def.reg=f32.red=fused.stash16",
         {TUNED_FP16, 64, 262144, TUNED_KERNEL_SOFTMAX, 0}, "4 bytes"},
        {"w8.r1.c16.m4.v2.ld=def.st=def.reg=f32.red=fused.stash32",
         {TUNED_FP32, 64, 262144, TUNED_KERNEL_SOFTMAX, 0}, "inside"},
        {"w32.r1.c16.m1.v4.ld=def.st=def.reg=f32.red=fused.stash3",
         {TUNED_FP32, 64, 262144, TUNED_KERNEL_SOFTMAX, 0}, "bytes a block"},
    };
    expect_refused(refused, sizeof refused / sizeof refused[0]);
    static const char *const bad[] = {
        "w8.r1.c1.m1.v4.ld=def.st=def.reg=f32.red=fused.g4.stash2",
        "w8.r1.c16.m1.v4.ld=def.st=def.reg=f32.red=fused.stash0",
        "w8.r1.c16.m1.v4.ld=def.st=def.reg=f32.red=fused.stash256",
        "w8.r1.c16.m1.v4.ld=def.st=def.reg=f32.red=fused.stash",
        "w8.r1.c16.m1.v4.ld=def.st=def.reg=f32.red=fused.stash2.g4",
        "w8.r1.c16.m1.v4.ld=def.st=def.reg=ex.red=fused.stash2",
    };
    expect_unparsed(bad, sizeof bad / sizeof bad[0]);
    /* The space holds the half-stashed w8.c16.m4.v2 at 64x262144 fp32, and
     * no stash where the registers hold the row (64x8192). */
    tuned__space sp;
    EXPECT(tuned__space_init(&sp, &s, 90, 132, &e) == 0, "%s", e.msg);
    EXPECT(tuned__config_parse(good, &c, &e) == 0, "%s", e.msg);
    size_t stashed = 0;
    for (size_t i = 0; i < sp.count; i++)
        stashed += sp.valid[i].stash > 0;
    EXPECT(space_holds(&sp, &c) && stashed > 0, "%s not in the space (%zu stashed configs)", good,
           stashed);
    c.minb = 2, c.stash = 8; /* valid, with registers for a quarter in a stash */
    EXPECT(tuned__config_check(&c, &s, 90, 132, why, sizeof why), "%s", why);
    EXPECT(!tuned__space_valid(&sp, &c, why, sizeof why) && strstr(why, "half"),
           "a stash of a quarter searched: %s", why);
    tuned__space_free(&sp);
    tuned__shape short_rows = {TUNED_FP32, 64, 8192, TUNED_KERNEL_SOFTMAX, 0};
    EXPECT(tuned__space_init(&sp, &short_rows, 90, 132, &e) == 0, "%s", e.msg);
    for (size_t i = 0; i < sp.count; i++)
        EXPECT(sp.valid[i].stash == 0, "a stash at 64x8192");
    tuned__space_free(&sp);
}

/* Replicas: their text, their rules (a row cut over a cluster, no grid
 * split, forward kernels, 2, 4 or 8), the launch's blocks, and the
 * space's policy: few rows whose replicas fit half the SMs, 2 or 4 of
 * them, each with a pass to store, reached by a move. */
static void replicas(void)
{
    tuned__err e = {0};
    tuned__config c;
    char why[200];
    const char *good = "w8.r1.c16.m4.v8.ld=def.st=def.reg=ex.red=fused.rep4";
    expect_round_trip(good, &c);
    EXPECT(c.replicas == 4 && c.stash == 0 && c.grid == 0, "%s: replicas %u, stash %u, grid %u",
           good, c.replicas, c.stash, c.grid);
    EXPECT(tuned__config_blocks_per_row(&c) == 16 && tuned__config_launch_blocks_per_row(&c) == 64,
           "a row of 4 replicas of 16 blocks launches %u blocks, shares %u",
           tuned__config_launch_blocks_per_row(&c), tuned__config_blocks_per_row(&c));
    tuned__shape one_row = {TUNED_FP16, 1, 262144, TUNED_KERNEL_SOFTMAX, 0};
    EXPECT(tuned__config_check(&c, &one_row, 90, 132, why, sizeof why), "%s: %s", good, why);
    const char *stashed = "w8.r1.c16.m4.v2.ld=def.st=def.reg=f32.red=fused.stash16.rep2";
    expect_round_trip(stashed, &c);
    EXPECT(c.stash == 16 && c.replicas == 2, "%s: stash %u, replicas %u", stashed, c.stash,
           c.replicas);
    static const refusal refused[] = {
        {"w8.r1.c16.m1.v8.ld=def.st=def.reg=f32.rep2",
         {TUNED_FP16, 1, 262144, TUNED_KERNEL_SOFTMAX_BWD, 0}, "forward kernels only"},
    };
    expect_refused(refused, sizeof refused / sizeof refused[0]);
    static const char *const bad[] = {
        "w8.r1.c1.m1.v8.ld=def.st=def.reg=f32.red=fused.rep2",
        "w8.r1.c1.m1.v8.ld=def.st=def.reg=f32.red=fused.g64.rep2",
        "w8.r1.c16.m1.v8.ld=def.st=def.reg=f32.red=fused.rep1",
        "w8.r1.c16.m1.v8.ld=def.st=def.reg=f32.red=fused.rep3",
        "w8.r1.c16.m1.v8.ld=def.st=def.reg=f32.red=fused.rep16",
        "w8.r1.c16.m1.v8.ld=def.st=def.reg=f32.red=fused.rep",
        "w8.r1.c16.m1.v8.ld=def.st=def.reg=f32.red=fused.rep2.stash2",
        "w8.r1.c16.m1.v8.ld=def.st=def.reg=f32.red=fused.rep2.rep2",
    };
    expect_unparsed(bad, sizeof bad / sizeof bad[0]);
    /* The space of one long row holds the replicas of 2 and 4, moves to
     * them and seeds them; with 8 rows (128 blocks and more) it holds
     * none, nor does a GPU of unknown SMs. */
    tuned__space sp;
    EXPECT(tuned__space_init(&sp, &one_row, 90, 132, &e) == 0, "%s", e.msg);
    EXPECT(tuned__config_parse(good, &c, &e) == 0, "%s", e.msg);
    size_t held[9] = {0};
    for (size_t i = 0; i < sp.count; i++)
        held[sp.valid[i].replicas]++;
    EXPECT(space_holds(&sp, &c) && held[2] > 0 && held[4] > 0 && held[8] == 0,
           "%s not in the space, or replicas of 2/4/8: %zu/%zu/%zu", good, held[2], held[4],
           held[8]);
    c.replicas = 8;
    EXPECT(tuned__config_check(&c, &one_row, 90, 132, why, sizeof why), "%s", why);
    EXPECT(!tuned__space_valid(&sp, &c, why, sizeof why) && strstr(why, "SMs"),
           "8 replicas of 16 blocks searched: %s", why);
    tuned__config small;
    EXPECT(tuned__config_parse("w16.r1.c8.m1.v8.ld=def.st=def.reg=f32.red=fused.rep8", &small,
                               &e) == 0,
           "%s", e.msg);
    EXPECT(tuned__config_check(&small, &one_row, 90, 132, why, sizeof why), "%s", why);
    EXPECT(!tuned__space_valid(&sp, &small, why, sizeof why) && strstr(why, "2 or 4"),
           "8 replicas of 8 blocks searched: %s", why);
    c.replicas = 0;
    tuned__config nb[64];
    size_t n = tuned__space_neighbors(&sp, &c, nb, 64);
    bool to_two = false;
    for (size_t i = 0; i < n; i++)
        to_two |= nb[i].replicas == 2 && nb[i].warps == c.warps && nb[i].vec == c.vec;
    EXPECT(to_two, "no move from one cluster a row to 2 replicas");
    tuned__config seeds[64];
    size_t ns = tuned__space_seeds(&sp, seeds, 64);
    bool seeded = false;
    for (size_t i = 0; i < ns; i++)
        seeded |= seeds[i].replicas == 4;
    EXPECT(seeded, "no seed with 4 replicas at 1x262144");
    tuned__space_free(&sp);
    tuned__shape rows8 = {TUNED_FP16, 8, 262144, TUNED_KERNEL_SOFTMAX, 0};
    EXPECT(tuned__space_init(&sp, &rows8, 90, 132, &e) == 0, "%s", e.msg);
    for (size_t i = 0; i < sp.count; i++)
        EXPECT(sp.valid[i].replicas == 0 || sp.valid[i].cluster * sp.valid[i].replicas * 8 <= 66,
               "replicas over half the SMs at 8x262144");
    tuned__space_free(&sp);
    EXPECT(tuned__space_init(&sp, &one_row, 90, 0, &e) == 0, "%s", e.msg);
    for (size_t i = 0; i < sp.count; i++)
        EXPECT(sp.valid[i].replicas == 0, "replicas without the GPU's SM count");
    tuned__space_free(&sp);
}

static void constraints(void)
{
    tuned__err e = {0};
    tuned__space sp;
    tuned__shape s = {TUNED_FP16, 4096, 32000, TUNED_KERNEL_SOFTMAX, 0};
    EXPECT(tuned__space_init(&sp, &s, 90, 132, &e) == 0, "%s", e.msg);
    EXPECT(sp.count > 50, "only %zu configs for 4096x32000 fp16", sp.count);
    char why[256];
    tuned__config c = {.warps = 32, .rows = 1, .cluster = 1, .minb = 1, .vec = 8, .ld = TUNED__LD_EL, .st = TUNED__ST_CS};
    /* evict_last keeps the input in L2 past the timing's flush: parsed (old
     * records), never searched. */
    EXPECT(!tuned__space_valid(&sp, &c, why, sizeof why) && strstr(why, "ld=el") != NULL,
           "w32.r1.v8.ld=el accepted (%s)", why);
    c.ld = TUNED__LD_NC;
    EXPECT(tuned__space_valid(&sp, &c, why, sizeof why), "w32.r1.v8 invalid: %s", why);
    c.warps = 1; /* 32000 elements over 32 threads: far too many registers */
    EXPECT(!tuned__space_valid(&sp, &c, why, sizeof why) && strstr(why, "per thread") != NULL,
           "one warp per 32000-column row accepted (%s)", why);
    c = (tuned__config){.warps = 8, .rows = 1, .cluster = 1, .minb = 1, .vec = 16};
    EXPECT(!tuned__space_valid(&sp, &c, why, sizeof why), "16 fp16 elements a vector accepted");
    c = (tuned__config){.warps = 8, .rows = 512, .cluster = 1, .minb = 1, .vec = 8};
    EXPECT(!tuned__space_valid(&sp, &c, why, sizeof why), "rows above threads accepted");
    c = (tuned__config){.warps = 8, .rows = 2, .cluster = 2, .minb = 1, .vec = 8};
    EXPECT(!tuned__space_valid(&sp, &c, why, sizeof why), "two rows a block in a cluster");
    tuned__space_free(&sp);

    /* fp32: no packed registers, at most 4 elements a vector. */
    s = (tuned__shape){TUNED_FP32, 64, 1000, TUNED_KERNEL_SOFTMAX, 0};
    EXPECT(tuned__space_init(&sp, &s, 90, 132, &e) == 0, "%s", e.msg);
    for (size_t i = 0; i < sp.count; i++)
        EXPECT(sp.valid[i].reg == TUNED__REG_F32 && sp.valid[i].vec <= 4, "fp32 config %zu", i);
    tuned__space_free(&sp);

    /* Before sm_90 there is no cluster; evict_last nowhere. Before sm_80
     * nothing: the templates do not compile there. */
    s = (tuned__shape){TUNED_FP16, 64, 1000, TUNED_KERNEL_SOFTMAX, 0};
    EXPECT(tuned__space_init(&sp, &s, 80, 108, &e) == 0, "%s", e.msg);
    for (size_t i = 0; i < sp.count; i++)
        EXPECT(sp.valid[i].ld != TUNED__LD_EL && sp.valid[i].cluster == 1,
               "evict_last or a cluster offered on sm_80");
    tuned__space_free(&sp);
    EXPECT(tuned__space_init(&sp, &s, 75, 40, &e) == TUNED_EUNSUPPORTED &&
               strstr(e.msg, "sm_80 or newer") != NULL && strstr(e.msg, "sm_75") != NULL,
           "a space on sm_75: %s", e.msg);
    tuned__space_free(&sp);
    c = (tuned__config){.warps = 4, .rows = 1, .cluster = 1, .minb = 1, .vec = 8};
    EXPECT(!tuned__config_check(&c, &s, 75, 40, why, sizeof why) && strstr(why, "sm_75") != NULL,
           "a config on sm_75 passed its check (%s)", why);
    s = (tuned__shape){TUNED_FP16, 4096, 4096, TUNED_KERNEL_SOFTMAX, 0};
    EXPECT(tuned__space_init(&sp, &s, 90, 132, &e) == 0, "%s", e.msg);
    for (size_t i = 0; i < sp.count; i++)
        EXPECT(sp.valid[i].ld != TUNED__LD_EL, "evict_last offered on sm_90");
    tuned__space_free(&sp);

    /* One column: one thread a row. */
    s = (tuned__shape){TUNED_FP16, 64, 1, TUNED_KERNEL_SOFTMAX, 0};
    EXPECT(tuned__space_init(&sp, &s, 90, 132, &e) == 0, "%s", e.msg);
    for (size_t i = 0; i < sp.count; i++)
        EXPECT(sp.valid[i].warps * 32u == sp.valid[i].rows && sp.valid[i].cluster == 1,
               "idle threads on a 1-column row");
    tuned__space_free(&sp);

    /* Very long rows need a cluster on sm_90, and none fit before it. */
    s = (tuned__shape){TUNED_FP16, 8192, 128256, TUNED_KERNEL_SOFTMAX, 0};
    EXPECT(tuned__space_init(&sp, &s, 90, 132, &e) == 0, "%s", e.msg);
    for (size_t i = 0; i < sp.count; i++)
        EXPECT(sp.valid[i].cluster > 1, "128256 columns without a cluster");
    tuned__space_free(&sp);
    EXPECT(tuned__space_init(&sp, &s, 80, 108, &e) == TUNED_ENOSPACE, "128256 columns on sm_80");

    /* Streamed rows: long rows on sm_90 only; text round trip. */
    tuned__config t;
    EXPECT(tuned__config_parse("tma.w16.c2.s3.st=cs", &t, &e) == 0 &&
               t.family == TUNED__FAMILY_TMA && t.stages == 3 && t.cluster == 2,
           "tma parse: %s", e.msg);
    EXPECT(tuned__config_parse("tma.w16.c2.s5.st=cs", &t, &e) == TUNED_EINVAL, "5 stages parsed");
    s = (tuned__shape){TUNED_FP16, 4096, 32000, TUNED_KERNEL_SOFTMAX, 0};
    EXPECT(tuned__space_init(&sp, &s, 90, 132, &e) == 0, "%s", e.msg);
    size_t tma = 0;
    for (size_t i = 0; i < sp.count; i++)
        tma += sp.valid[i].family == TUNED__FAMILY_TMA;
    EXPECT(tma > 10, "only %zu tma variants for 4096x32000", tma);
    t = (tuned__config){.family = TUNED__FAMILY_TMA, .warps = 16, .rows = 1, .cluster = 1,
                        .minb = 1, .stages = 4};
    EXPECT(!tuned__space_valid(&sp, &t, why, sizeof why) && strstr(why, "shared memory"),
           "4 stages of 64000 bytes accepted: %s", why);
    tuned__space_free(&sp);
    s = (tuned__shape){TUNED_FP16, 4096, 1024, TUNED_KERNEL_SOFTMAX, 0};
    EXPECT(tuned__space_init(&sp, &s, 90, 132, &e) == 0, "%s", e.msg);
    for (size_t i = 0; i < sp.count; i++)
        EXPECT(sp.valid[i].family == TUNED__FAMILY_ROWS, "tma offered for 2 KiB rows");
    tuned__space_free(&sp);

    /* Every tiny shape has some variant (one short row still needs a block). */
    for (int dt = TUNED_FP16; dt <= TUNED_FP32; dt++)
        for (uint64_t r = 1; r <= 3; r++)
            for (uint64_t cols = 1; cols <= 9; cols++) {
                s = (tuned__shape){(tuned_dtype)dt, r, cols, TUNED_KERNEL_SOFTMAX, 0};
                EXPECT(tuned__space_init(&sp, &s, 90, 132, &e) == 0, "%s", e.msg);
                tuned__space_free(&sp);
            }

    /* Rows too long for registers: a clear ENOSPACE, not an empty space. */
    s = (tuned__shape){TUNED_FP32, 8, 1000000, TUNED_KERNEL_SOFTMAX, 0};
    EXPECT(tuned__space_init(&sp, &s, 90, 132, &e) == TUNED_ENOSPACE && strstr(e.msg, "1000000"),
           "no ENOSPACE for 8x1000000: %s", e.msg);
    s = (tuned__shape){TUNED_FP16, 0, 10, TUNED_KERNEL_SOFTMAX, 0};
    EXPECT(tuned__space_init(&sp, &s, 90, 132, &e) == TUNED_EINVAL, "0 rows accepted");
}

static void moves(void)
{
    tuned__err e = {0};
    tuned__space sp;
    tuned__shape s = {TUNED_BF16, 1024, 50257, TUNED_KERNEL_SOFTMAX, 0};
    EXPECT(tuned__space_init(&sp, &s, 90, 132, &e) == 0, "%s", e.msg);
    tuned__rng a = {7}, b = {7};
    for (int i = 0; i < 200; i++) {
        tuned__config x, y, nb[32];
        tuned__space_random(&sp, &a, &x);
        tuned__space_random(&sp, &b, &y);
        EXPECT(tuned__config_equal(&x, &y), "same seed, different draw");
        EXPECT(tuned__space_valid(&sp, &x, NULL, 0), "random draw invalid");
        size_t n = tuned__space_neighbors(&sp, &x, nb, 32);
        for (size_t k = 0; k < n; k++) {
            EXPECT(tuned__space_valid(&sp, &nb[k], NULL, 0), "invalid neighbour");
            EXPECT(!tuned__config_equal(&nb[k], &x), "a config is its own neighbour");
            /* warps moves alone, with rows, with the cluster or with the
             * grid split (which brings the one-round reduction along) */
            int changed = (nb[k].vec != x.vec) + (nb[k].ld != x.ld) + (nb[k].st != x.st) +
                          (nb[k].reg != x.reg) + (nb[k].red != x.red && nb[k].grid == x.grid) +
                          (nb[k].warps != x.warps || nb[k].rows != x.rows ||
                           nb[k].cluster != x.cluster || nb[k].grid != x.grid) +
                          (nb[k].minb != x.minb) + (nb[k].stages != x.stages);
            /* a stash moves alone, or follows another move (half the passes) */
            changed += changed == 0 && nb[k].stash != x.stash;
            changed += nb[k].replicas != x.replicas;
            EXPECT(changed == 1, "neighbour changes %d parameters", changed);
        }
    }
    tuned__config seeds[16];
    size_t ns = tuned__space_seeds(&sp, seeds, 16);
    EXPECT(ns > 0, "no seeds");
    for (size_t i = 0; i < ns; i++)
        EXPECT(tuned__space_valid(&sp, &seeds[i], NULL, 0), "invalid seed");
    tuned__space_free(&sp);
}

/* Rows split over the grid: only where every block fits on the SMs at
 * once, only with an SM count, seeded for few long rows, reachable. */
static void grid_split(void)
{
    tuned__err e = {0};
    tuned__space sp;
    tuned__shape s = {TUNED_FP16, 1, 262144, TUNED_KERNEL_SOFTMAX, 0};
    EXPECT(tuned__space_init(&sp, &s, 90, 132, &e) == 0, "%s", e.msg);
    size_t splits = 0;
    for (size_t i = 0; i < sp.count; i++) {
        const tuned__config *c = &sp.valid[i];
        if (c->grid == 0)
            continue;
        splits++;
        EXPECT(c->grid <= 132u * c->minb && c->cluster == 1 && c->rows == 1 &&
                   c->red == TUNED__RED_FUSED,
               "invalid split w%u.g%u.m%u", c->warps, c->grid, c->minb);
    }
    EXPECT(splits > 0, "no grid splits for 1x262144");
    tuned__config c;
    char why[160] = "";
    EXPECT(tuned__config_parse("w8.r1.c1.m1.v8.ld=def.st=def.reg=f32.red=fused.g128", &c, &e) == 0 &&
               tuned__space_valid(&sp, &c, why, sizeof why),
           "g128 on 132 SMs: %s", why);
    EXPECT(tuned__config_parse("w8.r1.c1.m1.v8.ld=def.st=def.reg=f32.red=fused.g256", &c, &e) == 0 &&
               !tuned__space_valid(&sp, &c, why, sizeof why) && strstr(why, "132 SMs"),
           "g256 at one block a SM on 132 SMs accepted (%s)", why);
    c.minb = 2, c.warps = 4;
    EXPECT(tuned__space_valid(&sp, &c, why, sizeof why), "w4.g256 at two a SM: %s", why);
    /* Seeds: the largest split at one block a SM. */
    tuned__config seeds[48];
    size_t ns = tuned__space_seeds(&sp, seeds, 48), seeded = 0;
    for (size_t i = 0; i < ns; i++)
        seeded += seeds[i].grid == 128 && seeds[i].minb == 1;
    EXPECT(seeded >= 2, "%zu g128 seeds for 1x262144", seeded);
    /* Moves: halving and doubling the split, and from 2 blocks to none. */
    tuned__config nb[64];
    EXPECT(tuned__config_parse("w32.r1.c1.m1.v8.ld=def.st=def.reg=pk.red=fused.g16", &c, &e) == 0,
           "%s", e.msg);
    size_t n = tuned__space_neighbors(&sp, &c, nb, 64), g8 = 0, g32 = 0;
    for (size_t i = 0; i < n; i++) {
        g8 += nb[i].grid == 8 && nb[i].warps == 32;
        g32 += nb[i].grid == 32 && (nb[i].warps == 32 || nb[i].warps == 16);
    }
    EXPECT(g8 == 1 && g32 == 2, "neighbours of w32.g16: %zu at g8, %zu at g32", g8, g32);
    tuned__space_free(&sp);
    s = (tuned__shape){TUNED_FP16, 1, 8192, TUNED_KERNEL_SOFTMAX, 0};
    EXPECT(tuned__space_init(&sp, &s, 90, 132, &e) == 0, "%s", e.msg);
    EXPECT(tuned__config_parse("w4.r1.c1.m1.v8.ld=def.st=def.reg=f32.red=fused.g2", &c, &e) == 0 &&
               tuned__space_valid(&sp, &c, why, sizeof why), "w4.g2 on 1x8192: %s", why);
    n = tuned__space_neighbors(&sp, &c, nb, 64);
    size_t none = 0;
    for (size_t i = 0; i < n; i++)
        none += nb[i].grid == 0 && nb[i].warps == 4 && nb[i].red == TUNED__RED_FUSED;
    EXPECT(none == 1, "neighbours of w4.g2: %zu without a split", none);
    tuned__space_free(&sp);
    /* Without an SM count, or with many rows, no splits. */
    EXPECT(tuned__space_init(&sp, &s, 90, 0, &e) == 0, "%s", e.msg);
    for (size_t i = 0; i < sp.count; i++)
        EXPECT(sp.valid[i].grid == 0, "a split without an SM count");
    tuned__space_free(&sp);
    s = (tuned__shape){TUNED_FP16, 32, 128256, TUNED_KERNEL_SOFTMAX, 0};
    EXPECT(tuned__space_init(&sp, &s, 90, 132, &e) == 0, "%s", e.msg);
    EXPECT(tuned__config_parse("w8.r1.c1.m1.v8.ld=def.st=def.reg=f32.red=fused.g4", &c, &e) == 0 &&
               tuned__space_valid(&sp, &c, why, sizeof why),
           "32 rows x g4: %s", why);
    c.grid = 8;
    EXPECT(!tuned__space_valid(&sp, &c, NULL, 0), "32 rows x g8 at one a SM accepted");
    tuned__space_free(&sp);
    s = (tuned__shape){TUNED_FP16, 4096, 32000, TUNED_KERNEL_SOFTMAX, 0};
    EXPECT(tuned__space_init(&sp, &s, 90, 132, &e) == 0, "%s", e.msg);
    size_t ex = 0;
    for (size_t i = 0; i < sp.count; i++) {
        EXPECT(sp.valid[i].grid == 0, "a split of 4096 rows");
        ex += sp.valid[i].reg == TUNED__REG_EX;
    }
    EXPECT(ex > 0, "no 16-bit exp variants for fp16");
    tuned__space_free(&sp);
    /* exp kept as 16-bit needs a 16-bit dtype and words to pack into. */
    s = (tuned__shape){TUNED_FP32, 4096, 32000, TUNED_KERNEL_SOFTMAX, 0};
    EXPECT(tuned__space_init(&sp, &s, 90, 132, &e) == 0, "%s", e.msg);
    EXPECT(tuned__config_parse("w8.r1.c1.m2.v4.ld=def.st=def.reg=ex", &c, &e) == 0 &&
               !tuned__space_valid(&sp, &c, NULL, 0),
           "reg=ex accepted for fp32");
    tuned__space_free(&sp);
}


/* tuned__config_check is the one rule of validity: the parser, codegen
 * (for any GPU: arch and sms 0) and the space apply it; the space adds
 * only what the search leaves out on purpose. */
static void one_rule(void)
{
    tuned__err e = {0};
    tuned__config c;
    char why[160] = "";
    tuned__shape s = {TUNED_FP16, 4096, 32000, TUNED_KERNEL_SOFTMAX, 0};
    /* Clusters: any GPU and sm_90, not sm_80. */
    EXPECT(tuned__config_parse("w8.r1.c4.m1.v8.ld=def.st=def.reg=f32.red=fused", &c, &e) == 0,
           "%s", e.msg);
    EXPECT(tuned__config_check(&c, &s, 0, 0, why, sizeof why) &&
               tuned__config_check(&c, &s, 90, 132, why, sizeof why),
           "a cluster refused: %s", why);
    EXPECT(!tuned__config_check(&c, &s, 80, 108, why, sizeof why) && strstr(why, "sm_90"),
           "a cluster on sm_80 accepted (%s)", why);
    /* evict_last: old records parse, but the templates no longer emit it. */
    tuned__space sp;
    EXPECT(tuned__space_rules(&sp, &s, 90, 132, &e) == 0, "%s", e.msg);
    EXPECT(tuned__config_parse("w32.r1.c1.m1.v8.ld=el.st=cs.reg=f32", &c, &e) == 0 &&
               !tuned__config_check(&c, &s, 90, 132, why, sizeof why) && strstr(why, "ld=el"),
           "ld=el accepted (%s)", why);
    EXPECT(!tuned__space_valid(&sp, &c, why, sizeof why) && strstr(why, "ld=el"),
           "ld=el in the space (%s)", why);
    /* Registers: one warp for a 32000-column row, on any GPU. */
    c.ld = TUNED__LD_DEF, c.warps = 1;
    EXPECT(!tuned__config_check(&c, &s, 0, 0, why, sizeof why) && strstr(why, "registers"),
           "w1 for 32000 columns accepted (%s)", why);
    /* Exp kept in 16 bits cannot be emitted for fp32; packing fp32 can,
     * and repeats reg=f32: the policy leaves it out. */
    tuned__shape f32 = {TUNED_FP32, 4096, 4096, TUNED_KERNEL_SOFTMAX, 0};
    tuned__space sp32;
    EXPECT(tuned__space_rules(&sp32, &f32, 90, 132, &e) == 0, "%s", e.msg);
    EXPECT(tuned__config_parse("w8.r1.c1.m1.v4.ld=def.st=def.reg=ex", &c, &e) == 0 &&
               !tuned__config_check(&c, &f32, 0, 0, why, sizeof why) && strstr(why, "reg=ex"),
           "reg=ex for fp32 accepted (%s)", why);
    c.reg = TUNED__REG_PK;
    EXPECT(tuned__config_check(&c, &f32, 90, 132, why, sizeof why) &&
               !tuned__space_valid(&sp32, &c, NULL, 0),
           "reg=pk for fp32: %s", why);
    /* Grid splits: one row over 256 blocks fits a workspace on any GPU,
     * not 132 SMs at one a SM; eight rows never; no SM count, no split
     * in the space. */
    tuned__shape one = {TUNED_FP16, 1, 262144, TUNED_KERNEL_SOFTMAX, 0}, eight = {TUNED_FP16, 8, 262144, TUNED_KERNEL_SOFTMAX, 0};
    EXPECT(tuned__config_parse("w8.r1.c1.m1.v8.ld=def.st=def.reg=f32.red=fused.g256", &c, &e) == 0,
           "%s", e.msg);
    EXPECT(tuned__config_check(&c, &one, 0, 0, why, sizeof why), "1 x g256: %s", why);
    EXPECT(!tuned__config_check(&c, &one, 90, 132, why, sizeof why) && strstr(why, "132 SMs"),
           "1 x g256 on 132 SMs accepted (%s)", why);
    EXPECT(!tuned__config_check(&c, &eight, 0, 0, why, sizeof why), "8 x g256 accepted");
    c.grid = 64;
    tuned__space nosms;
    EXPECT(tuned__space_rules(&nosms, &one, 90, 0, &e) == 0, "%s", e.msg);
    EXPECT(tuned__config_check(&c, &one, 90, 0, why, sizeof why) &&
               !tuned__space_valid(&nosms, &c, NULL, 0),
           "g64 without an SM count: %s", why);
    /* Streamed rows: sm_90 only, stages within shared memory. */
    EXPECT(tuned__config_parse("tma.w16.c1.s4.st=def", &c, &e) == 0, "%s", e.msg);
    EXPECT(!tuned__config_check(&c, &s, 0, 0, why, sizeof why) && strstr(why, "shared memory"),
           "4 stages of 64000 bytes accepted (%s)", why);
    c.stages = 2;
    EXPECT(tuned__config_check(&c, &s, 90, 132, why, sizeof why), "tma s2: %s", why);
    EXPECT(!tuned__config_check(&c, &s, 80, 108, why, sizeof why) && strstr(why, "sm_90"),
           "tma on sm_80 accepted (%s)", why);
    /* The shape: a known dtype, rows and columns in range. */
    tuned__shape bad = {(tuned_dtype)9, 4, 100, TUNED_KERNEL_SOFTMAX, 0};
    EXPECT(!tuned__config_check(&c, &bad, 90, 132, why, sizeof why) && strstr(why, "dtype"),
           "dtype 9 accepted (%s)", why);
    bad = (tuned__shape){TUNED_FP16, 4, TUNED__MAX_COLS + 1, TUNED_KERNEL_SOFTMAX, 0};
    EXPECT(!tuned__shape_check(&bad, why, sizeof why), "%llu columns accepted",
           (unsigned long long)bad.cols);
    /* A space needs a compute capability; with no valid config, its
     * default says why, as tuned__space_init does. */
    EXPECT(tuned__space_rules(&sp, &s, 0, 132, &e) == TUNED_EINVAL, "arch 0 accepted");
    tuned__shape huge = {TUNED_FP32, 8, 1000000, TUNED_KERNEL_SOFTMAX, 0};
    EXPECT(tuned__space_rules(&sp, &huge, 90, 132, &e) == 0, "%s", e.msg);
    EXPECT(tuned__space_default(&sp, &c, &e) == TUNED_ENOSPACE && strstr(e.msg, "1000000") &&
               strstr(e.msg, "registers"),
           "no ENOSPACE for 8x1000000 without the enumeration: %s", e.msg);
}

/* ---- the space's fingerprints ----
 *
 * The search's seeded draws index the enumeration, and the replay tests
 * replay recorded landscapes through the search: the enumeration's order,
 * its set, the seeds, every neighbour list and the verdict on configs the
 * enumeration never makes must stay what they were. Each is hashed for a
 * few shapes; the numbers were recorded from the code before validity
 * moved into tuned__config_check. A change that means to alter the space
 * records new ones (the failure prints them) and says why: replicas
 * (clusters that each hold a few rows whole, storing a share) grew the
 * spaces of few long rows (1x262144, 16x65536). */

typedef struct space_print {
    size_t count;
    uint64_t order;     /* the formatted valid configs, in enumeration order */
    uint64_t seeds;     /* tuned__space_seeds, up to 64 */
    uint64_t neighbors; /* tuned__space_neighbors of every valid config */
    uint64_t verdicts;  /* tuned__space_valid on random configs, mostly invalid */
} space_print;

static uint64_t hash_configs(const tuned__config *c, size_t n, uint64_t h)
{
    for (size_t i = 0; i < n; i++) {
        char text[TUNED__CONFIG_TEXT];
        tuned__config_format(&c[i], text, sizeof text);
        h = tuned__fnv1a64(text, strlen(text) + 1, h);
    }
    return h;
}

/* A config whose every field is drawn from its values and a few beyond
 * them (0, too large, not a power of two), or, every other draw, a
 * config of either family near the valid ones, so that the deeper rules
 * (registers, idle threads, grid splits) are reached too. */
static tuned__config random_config(tuned__rng *r)
{
    static const uint8_t warps[] = {0, 1, 2, 3, 4, 8, 16, 32, 64};
    static const uint16_t rows[] = {0, 1, 2, 3, 4, 8, 16, 32, 64, 128, 256, 512, 1024};
    static const uint8_t pow2_32[] = {0, 1, 2, 3, 4, 8, 16, 32};
    static const uint16_t grid[] = {0, 0, 0, 1, 2, 3, 4, 8, 16, 32, 64, 128, 256, 512};
#define PICK(a) a[tuned__rng_below(r, sizeof a / sizeof a[0])]
    if (tuned__rng_below(r, 2) == 0)
        return (tuned__config){
            .family = (uint8_t)tuned__rng_below(r, 3), .warps = PICK(warps),
            .rows = PICK(rows), .cluster = PICK(pow2_32), .minb = PICK(pow2_32),
            .vec = PICK(pow2_32), .ld = (uint8_t)tuned__rng_below(r, TUNED__LD_COUNT + 1),
            .st = (uint8_t)tuned__rng_below(r, TUNED__ST_COUNT + 1),
            .reg = (uint8_t)tuned__rng_below(r, TUNED__REG_COUNT + 1),
            .red = (uint8_t)tuned__rng_below(r, TUNED__RED_COUNT + 1),
            .stages = (uint8_t)tuned__rng_below(r, 6), .grid = PICK(grid)};
    if (tuned__rng_below(r, 4) == 0)
        return (tuned__config){.family = TUNED__FAMILY_TMA, .warps = PICK(warps), .rows = 1,
                               .cluster = PICK(pow2_32), .minb = 1,
                               .st = (uint8_t)tuned__rng_below(r, TUNED__ST_COUNT),
                               .stages = (uint8_t)tuned__rng_below(r, 6)};
    tuned__config c = {.family = TUNED__FAMILY_ROWS,
                       .warps = (uint8_t)(1u << tuned__rng_below(r, 6)),
                       .cluster = (uint8_t)(1u << tuned__rng_below(r, 5) * tuned__rng_below(r, 2)),
                       .minb = (uint8_t)(1u << tuned__rng_below(r, 3)),
                       .vec = (uint8_t)(1u << tuned__rng_below(r, 5)),
                       .ld = (uint8_t)tuned__rng_below(r, TUNED__LD_COUNT),
                       .st = (uint8_t)tuned__rng_below(r, TUNED__ST_COUNT),
                       .reg = (uint8_t)tuned__rng_below(r, TUNED__REG_COUNT),
                       .red = (uint8_t)tuned__rng_below(r, TUNED__RED_COUNT)};
    c.rows = (uint16_t)(c.cluster > 1 ? 1 : 1u << tuned__rng_below(r, 11));
    if (tuned__rng_below(r, 3) == 0)
        c.grid = PICK(grid), c.rows = 1, c.cluster = 1, c.red = TUNED__RED_FUSED;
#undef PICK
    return c;
}

static space_print print_space(const tuned__space *sp)
{
    space_print p = {.count = sp->count};
    p.order = hash_configs(sp->valid, sp->count, TUNED__FNV_SEED);
    tuned__config out[64];
    size_t n = tuned__space_seeds(sp, out, 64);
    p.seeds = hash_configs(out, n, TUNED__FNV_SEED);
    p.neighbors = TUNED__FNV_SEED;
    for (size_t i = 0; i < sp->count; i++) {
        n = tuned__space_neighbors(sp, &sp->valid[i], out, 64);
        p.neighbors = tuned__fnv1a64(&n, sizeof n, p.neighbors);
        p.neighbors = hash_configs(out, n, p.neighbors);
    }
    tuned__rng r = {42};
    p.verdicts = TUNED__FNV_SEED;
    for (int i = 0; i < 200000; i++) {
        tuned__config c = random_config(&r);
        unsigned char ok = tuned__space_valid(sp, &c, NULL, 0);
        p.verdicts = tuned__fnv1a64(&ok, 1, p.verdicts);
    }
    return p;
}

static void fingerprints(void)
{
    static const struct {
        tuned__shape shape;
        int arch, sms;
        space_print want;
    } cases[] = {
        {{TUNED_FP16, 4096, 32000, TUNED_KERNEL_SOFTMAX, 0}, 90, 132,
         {7956, 0xa3757755d5b8bba7ull, 0xbaf6a70e003cf359ull,
          0xcba23c6b92b2adc5ull, 0xd9e42a9144c524a2ull}},
        {{TUNED_FP32, 32, 128, TUNED_KERNEL_SOFTMAX, 0}, 90, 132,
         {2880, 0xbe8e470c575f0c83ull, 0x1ff9f892fb240a31ull,
          0x232f9c91b9429549ull, 0x7708796702a32930ull}},
        {{TUNED_BF16, 1, 262144, TUNED_KERNEL_SOFTMAX, 0}, 90, 132,
         {10614, 0x52b96ef10ee69440ull, 0xf6ee5cac380ab86dull,
          0x41f800fd8d20159cull, 0xdb61b2c6141da0d1ull}},
        {{TUNED_FP16, 64, 1000, TUNED_KERNEL_SOFTMAX, 0}, 86, 84,
         {9432, 0x7ce644308f86e23full, 0xc26e8c062970886cull,
          0xd02e95568806ef38ull, 0xa0dcade4d33454feull}},
        {{TUNED_FP16, 8192, 128256, TUNED_KERNEL_SOFTMAX, 0}, 90, 132,
         {4428, 0xe5f1f0a301d97ca1ull, 0x19dc187bee47af78ull,
          0xb046f5dd56c4f92bull, 0xb68593629176346full}},
        {{TUNED_FP16, 1, 8192, TUNED_KERNEL_SOFTMAX, 0}, 90, 0,
         {10260, 0x0795776f7155da55ull, 0x5f0d0dcdb9588744ull,
          0xa219dbade9afceddull, 0x670846c9c1d79332ull}},
        {{TUNED_BF16, 7, 7, TUNED_KERNEL_SOFTMAX, 0}, 90, 132,
         {1980, 0x5cf90ef0b38c613full, 0xcbf29ce484222325ull,
          0xb5bc782c3cd99b59ull, 0x91c35211f6319fd8ull}},
        {{TUNED_BF16, 1024, 50257, TUNED_KERNEL_SOFTMAX, 0}, 80, 108,
         {420, 0x58081bb4e066137dull, 0x358d4389819e58bdull,
          0xb899f62003857761ull, 0x7d78e78d3939fcfaull}},
        {{TUNED_FP32, 4096, 4096, TUNED_KERNEL_SOFTMAX, 0}, 90, 114,
         {3396, 0x68f7d4cbc0400d93ull, 0x8ebd55ba58e400d0ull,
          0xd350e9c024bcf681ull, 0x93550bc7e4abc198ull}},
        {{TUNED_FP32, 1, 4097, TUNED_KERNEL_SOFTMAX, 0}, 89, 128,
         {2442, 0xe772e342bb75969cull, 0x8981272e190edd49ull,
          0x26262d5e566737fbull, 0x27fe44697da45595ull}},
        {{TUNED_FP16, 64, 1, TUNED_KERNEL_SOFTMAX, 0}, 90, 132,
         {720, 0xfaa14005495c4db1ull, 0xcbf29ce484222325ull,
          0x4c1fef7a21eb98d5ull, 0x21be068c16ccc888ull}},
        {{TUNED_FP32, 16, 65536, TUNED_KERNEL_SOFTMAX, 0}, 90, 132,
         {2430, 0x080147c9a3e7977eull, 0x7e8def88ee25cba9ull,
          0x2455debe0a0a48f0ull, 0xec7a520aa08e16e0ull}},
        /* the other kernels' spaces */
        {{TUNED_FP16, 4096, 32000, TUNED_KERNEL_SOFTMAX_BWD, 0}, 90, 132,
         {1878, 0x4b58f8de41e10464ull, 0x2d089b615299facfull,
          0xd497078980eeca98ull, 0xeec8da02aed78bbeull}},
        {{TUNED_FP16, 4096, 32000, TUNED_KERNEL_LOG_SOFTMAX, 0}, 90, 132,
         {5508, 0x5930a3c32931fdf5ull, 0xbaf6a70e003cf359ull,
          0x2bb0395ae34eefc5ull, 0x93926ade1b1effd9ull}},
        {{TUNED_BF16, 1, 262144, TUNED_KERNEL_LOG_SOFTMAX_BWD, 0}, 90, 132,
         {2484, 0x8ce091d41c6f0dd7ull, 0xea0911eecde1e48dull,
          0x48fd1cdbbb9f9cd5ull, 0x0cd13af256b6cd81ull}},
        {{TUNED_FP32, 32, 128, TUNED_KERNEL_SOFTMAX_BWD, 0}, 80, 108,
         {1344, 0x52300570045be26full, 0x1ff9f892fb240a31ull,
          0x60c01f69987a882full, 0xa443f9cc6b85a38bull}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        tuned__err e = {0};
        tuned__space sp;
        const tuned__shape *s = &cases[i].shape;
        EXPECT(tuned__space_init(&sp, s, cases[i].arch, cases[i].sms, &e) == 0, "%s", e.msg);
        space_print got = print_space(&sp), want = cases[i].want;
        /* The space of rules only answers the same, and its default is the
         * enumerated space's first seed, else its first config. */
        tuned__space rules;
        EXPECT(tuned__space_rules(&rules, s, cases[i].arch, cases[i].sms, &e) == 0 &&
                   rules.count == 0 && rules.valid == NULL,
               "rules: %s", e.msg);
        space_print lean = print_space(&rules);
        EXPECT(lean.seeds == got.seeds && lean.verdicts == got.verdicts,
               "a space of rules only judges otherwise");
        tuned__config first, seed;
        EXPECT(tuned__space_default(&rules, &first, &e) == 0, "default: %s", e.msg);
        if (tuned__space_seeds(&sp, &seed, 1) != 1)
            seed = sp.valid[0];
        EXPECT(tuned__config_equal(&first, &seed), "another default without the enumeration");
        EXPECT(got.count == want.count && got.order == want.order && got.seeds == want.seeds &&
                   got.neighbors == want.neighbors && got.verdicts == want.verdicts,
               "the %s space of %llux%llu %s on sm_%d with %d SMs changed: now "
               "{%zu, 0x%016llxull, 0x%016llxull, 0x%016llxull, 0x%016llxull}",
               tuned__kernel_name((uint8_t)tuned__shape_kernel(s)),
               (unsigned long long)s->rows, (unsigned long long)s->cols,
               tuned_dtype_name(s->dtype), cases[i].arch, cases[i].sms, got.count,
               (unsigned long long)got.order, (unsigned long long)got.seeds,
               (unsigned long long)got.neighbors, (unsigned long long)got.verdicts);
        tuned__space_free(&sp);
    }
}

/* A kind tuned by its chunk: the budget's rule and the powers of two
 * below it in whole rows, and above it the powers of two (and the rows)
 * each in the fewest vocabulary blocks that fit; neighbours and seeds
 * inside; the key's budget bounds every chunk (8192 x 128256 bf16: 256 MiB
 * holds 1046 rows, so 1024 whole; 2048 in 2 blocks, 4096 in 4, 8192 in 8;
 * 4096 MiB all 8192). */
static void chunk_spaces(void)
{
    const tuned__kind_spec *k = tuned__kind(TUNED_KERNEL_LINEAR_CROSS_ENTROPY);
    static const struct {
        uint64_t rows, cols;
        const char *params;
        uint32_t rule;
        size_t count;
        const char *member; /* a config the space holds */
    } cases[] = {
        {8192, 128256, "", 1024, 8, "chunk4096.v4"},  /* 64 .. 512, 1024; 2048 .. 8192 */
        {8192, 128256, "budget=4096", 8192, 8, "chunk8192"}, /* 64 .. 4096, 8192 */
        {4096, 128256, "hidden=2048", 1024, 7, "chunk2048.v2"},
        {300, 32000, "budget=16", 256, 4, "chunk300.v2"}, /* 16 MiB: 262 rows, 256 */
        {40, 128256, "", 40, 1, "chunk40"},              /* fewer rows than a step */
        /* the rule's floor: 64 rows; 128 in 16 blocks .. 512 in 62 */
        {100000, 1000000, "budget=16", 64, 4, "chunk512.v62"},
        /* Liger's memory (128 rows whole): 2048 rows in 17 blocks of 7552 */
        {4096, 128256, "budget=30", 64, 7, "chunk2048.v17"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        tuned__shape s = {TUNED_BF16, cases[i].rows, cases[i].cols,
                          TUNED_KERNEL_LINEAR_CROSS_ENTROPY, 0};
        tuned__err e = {0};
        EXPECT_OK(tuned__params_parse(k, cases[i].params, &s.params, &e), &e);
        EXPECT(tuned__chunk_rule(&s) == cases[i].rule, "%llux%llu:%s: rule %u, want %u",
               (unsigned long long)s.rows, (unsigned long long)s.cols, cases[i].params,
               tuned__chunk_rule(&s), cases[i].rule);
        tuned__space sp;
        EXPECT_OK(tuned__space_init(&sp, &s, 90, 132, &e), &e);
        EXPECT(sp.count == cases[i].count, "%s: %zu chunks, want %zu", cases[i].params,
               sp.count, cases[i].count);
        tuned__config member;
        EXPECT_OK(tuned__config_parse(cases[i].member, &member, &e), &e);
        bool found = false;
        const uint64_t budget = (uint64_t)tuned__params_value(k, s.params, "budget", 0) << 20;
        for (size_t j = 0; j < sp.count; j++) {
            const tuned__config *c = &sp.valid[j];
            char text[TUNED__CONFIG_TEXT];
            tuned__config_format(c, text, sizeof text);
            found |= tuned__config_equal(c, &member);
            const uint64_t rows = c->chunk < s.rows ? c->chunk : s.rows;
            const uint64_t cols = tuned__kind_block_cols(s.cols, c->splits);
            const bool fits = rows * cols * 2 <= budget;
            EXPECT(c->family == TUNED__FAMILY_CHUNK &&
                       (c->splits == 0 ? c->chunk <= cases[i].rule &&
                                             (fits || c->chunk == cases[i].rule)
                                       : c->chunk > cases[i].rule && fits && cols < s.cols),
                   "%s within the budget", text);
            tuned__config nb[8];
            size_t n = tuned__space_neighbors(&sp, c, nb, 8);
            for (size_t m = 0; m < n; m++)
                EXPECT(tuned__space_valid(&sp, &nb[m], NULL, 0) &&
                           !tuned__config_equal(&nb[m], c),
                       "neighbour chunk%u.v%u of %s", nb[m].chunk, nb[m].splits, text);
        }
        EXPECT(found, "%s: %s in the space", cases[i].params, cases[i].member);
        tuned__config d;
        EXPECT(tuned__space_default(&sp, &d, &e) == 0 && d.chunk == cases[i].rule,
               "the default is the rule's chunk");
        /* a kernel config is no config of this kind, nor a chunk past the budget */
        tuned__config rows = {.family = TUNED__FAMILY_ROWS, .warps = 4, .rows = 1, .cluster = 1,
                              .minb = 1, .vec = 8};
        tuned__config big = {.family = TUNED__FAMILY_CHUNK, .chunk = cases[i].rule * 2};
        char why[160];
        EXPECT(!tuned__space_valid(&sp, &rows, why, sizeof why), "a kernel config refused");
        EXPECT(!tuned__space_valid(&sp, &big, why, sizeof why), "chunk%u refused", big.chunk);
        /* in blocks, one block fewer than the fewest that fit is refused,
         * and one more (only more GEMMs); whole rows in blocks too */
        if (member.splits > 2) {
            tuned__config fewer = member, more = member;
            fewer.splits--;
            more.splits++;
            EXPECT(!tuned__space_valid(&sp, &fewer, why, sizeof why) &&
                       strstr(why, "exceeds the budget") != NULL,
                   "%s in one block fewer refused: %s", cases[i].member, why);
            EXPECT(!tuned__space_valid(&sp, &more, why, sizeof why) &&
                       strstr(why, "fits the budget in") != NULL,
                   "%s in one block more refused: %s", cases[i].member, why);
        }
        tuned__config rule_in_blocks = {.family = TUNED__FAMILY_CHUNK, .chunk = cases[i].rule,
                                        .splits = 2};
        EXPECT(!tuned__space_valid(&sp, &rule_in_blocks, why, sizeof why),
               "the rule's chunk in blocks refused");
        tuned__space_free(&sp);
    }
}

/* The other kernels' spaces: what each kernel has of the family, the
 * backward kernels' registers for two rows, seeds and defaults that
 * belong, neighbours that stay inside. */
static void kernel_spaces(void)
{
    static const uint64_t cols_list[] = {1, 100, 4097, 32000, 128256, 262144};
    for (unsigned kernel = TUNED_KERNEL_SOFTMAX; kernel <= TUNED__KIND_COUNT; kernel++)
        for (int dt = TUNED_FP16; dt <= TUNED_FP32; dt++)
            for (size_t i = 0; i < sizeof cols_list / sizeof cols_list[0]; i++) {
                if (tuned__kind(kernel)->evaluate != TUNED__EVALUATE_KERNEL)
                    continue; /* chunks, not kernels: chunk_spaces() */
                tuned__err e = {0};
                tuned__shape s = {(tuned_dtype)dt, cols_list[i] > 100000 ? 1 : 256, cols_list[i],
                                  (uint8_t)kernel, 0};
                tuned__kind_example(tuned__kind(kernel), &s.cols, &s.params);
                tuned__shape fwd = s;
                fwd.kernel = TUNED_KERNEL_SOFTMAX;
                fwd.params = 0;
                /* a kind that chooses a top k has its selection methods
                 * besides the family's fields */
                bool selects = tuned__kind(kernel)->selects;
                tuned__space sp, sp_fwd;
                EXPECT(tuned__space_init(&sp, &s, 90, 132, &e) == 0, "%s %s x %llu: %s",
                       tuned__kernel_name((uint8_t)kernel), tuned_dtype_name(s.dtype),
                       (unsigned long long)s.cols, e.msg);
                EXPECT(tuned__space_init(&sp_fwd, &fwd, 90, 132, &e) == 0, "%s", e.msg);
                size_t tma = 0, grid = 0, fused = 0, ex = 0, outside = 0;
                for (size_t k = 0; k < sp.count; k++) {
                    const tuned__config *c = &sp.valid[k];
                    tma += c->family == TUNED__FAMILY_TMA;
                    grid += c->grid > 1;
                    fused += c->red == TUNED__RED_FUSED;
                    ex += c->reg == TUNED__REG_EX;
                    /* every config of a kernel's space is one softmax's has
                     * too (a backward grid split's with the forward's
                     * one-round pairs), or one that needs the registers of
                     * one row */
                    tuned__config f = *c;
                    if ((tuned__kind(kernel)->reference == TUNED__REF_BACKWARD) && f.grid > 1)
                        f.red = TUNED__RED_FUSED;
                    f.sel = TUNED__SEL_SCAN;
                    outside += !tuned__space_valid(&sp_fwd, &f, NULL, 0);
                }
                bool backward = (tuned__kind(kernel)->reference == TUNED__REF_BACKWARD);
                EXPECT(outside == 0, "%s: %zu configs softmax's space lacks",
                       tuned__kernel_name((uint8_t)kernel), outside);
                EXPECT(sp.count <= sp_fwd.count * (selects ? TUNED__SEL_COUNT : 1),
                       "%s: a larger space than softmax's", tuned__kernel_name((uint8_t)kernel));
                if (kernel != TUNED_KERNEL_SOFTMAX)
                    EXPECT(ex == 0, "%s: reg=ex in the space", tuned__kernel_name((uint8_t)kernel));
                if (backward) {
                    /* one long row: split over the grid too */
                    EXPECT(tma == 0 && fused == 0 && (s.rows > 1 || grid > 0),
                           "%s x %llu: %zu tma, %zu grid splits, %zu one-round in a backward space",
                           tuned_dtype_name(s.dtype), (unsigned long long)s.cols, tma, grid, fused);
                } else if (kernel == TUNED_KERNEL_LOG_SOFTMAX && s.cols >= 32000) {
                    EXPECT(tma > 0 && fused > 0 && (s.rows > 66 || grid > 0),
                           "log_softmax %s x %llu: %zu tma, %zu grid splits, %zu one-round",
                           tuned_dtype_name(s.dtype), (unsigned long long)s.cols, tma, grid,
                           fused);
                }
                tuned__config seeds[64], def, nb[128];
                size_t ns = tuned__space_seeds(&sp, seeds, 64);
                /* (one column: no seed idles fewer than half its threads) */
                EXPECT(ns > 0 || s.cols == 1, "%s %s x %llu: no seeds",
                       tuned__kernel_name((uint8_t)kernel), tuned_dtype_name(s.dtype),
                       (unsigned long long)s.cols);
                for (size_t k = 0; k < ns; k++) {
                    EXPECT(tuned__space_valid(&sp, &seeds[k], NULL, 0), "a seed outside the space");
                    size_t nn = tuned__space_neighbors(&sp, &seeds[k], nb, 128);
                    for (size_t j = 0; j < nn; j++)
                        EXPECT(tuned__space_valid(&sp, &nb[j], NULL, 0),
                               "a neighbour outside the space");
                }
                EXPECT(tuned__space_default(&sp, &def, &e) == 0 &&
                           tuned__space_valid(&sp, &def, NULL, 0),
                       "%s: default: %s", tuned__kernel_name((uint8_t)kernel), e.msg);
                tuned__space_free(&sp);
                tuned__space_free(&sp_fwd);
            }
    /* An unknown kernel is no shape at all. */
    tuned__space sp;
    tuned__err e = {0};
    tuned__shape bad = {TUNED_FP16, 4, 100, TUNED__KIND_COUNT + 1, 0};
    EXPECT(tuned__space_init(&sp, &bad, 90, 132, &e) == TUNED_EINVAL &&
               strstr(e.msg, "kernel") != NULL,
           "kernel %d accepted: %s", TUNED__KIND_COUNT + 1, e.msg);
    /* Names and ids, both ways, stable. */
    static const char *const names[] = {NULL, "softmax", "softmax_bwd", "log_softmax",
                                        "log_softmax_bwd"};
    for (unsigned k = 1; k <= 4; k++) {
        uint8_t id = 0;
        EXPECT(strcmp(tuned__kernel_name((uint8_t)k), names[k]) == 0 &&
                   tuned__kernel_parse(names[k], &id) == 0 && id == k,
               "kernel %u is not %s", k, names[k]);
    }
    uint8_t id;
    EXPECT(tuned__kernel_name(0) == NULL && tuned__kernel_name(TUNED__KIND_COUNT + 1) == NULL &&
               tuned__kernel_parse("softmax_backward", &id) == TUNED_EINVAL,
           "unknown kernel names or ids accepted");
}

int main(void)
{
    fingerprints();
    kernel_spaces();
    chunk_spaces();
    one_rule();
    text_round_trip();
    canonical_form();
    stash();
    replicas();
    constraints();
    moves();
    grid_split();
    printf("%d failures\n", failures);
    return failures ? 1 : 0;
}
