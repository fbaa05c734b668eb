/* config.h: one softmax kernel variant, as codegen sees it.
 *
 * A config is a handful of small integers; its canonical text form
 * (tuned__config_format) is what logs, the store and the CLI show, e.g.
 * "w8.r1.c1.m1.v8.ld=cs.st=cs.reg=f32" (family rows; ".red=fused" follows
 * for the one-round reduction, absent for the default two rounds, then
 * ".g128" for a row split over 128 blocks of the grid or ".stash8" for a
 * thread's passes 1..8 kept in shared memory, then ".rep4" for a row held
 * by 4 clusters that each store a quarter) or "tma.w16.c2.s3.st=cs"
 * (family tma, whose unused fields are fixed: rows 1, minb 1, 16-byte
 * vectors, ld def, reg f32). Parsing that text back gives the same
 * config. What a config may be for a shape and a GPU is decided in one
 * place, tuned__config_check, which the parser, codegen and the tuner's
 * space apply; the space adds only its search policy (what it leaves out
 * on purpose). */
#ifndef TUNED_CODEGEN_CONFIG_H
#define TUNED_CODEGEN_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tuned.h"
#include "src/common/err.h"
#include "src/codegen/kind.h"

/* Kernel families; each is one template in kernels/templates/. */
enum {
    TUNED__FAMILY_ROWS = 0, /* softmax_rows.cu: rows held in registers */
    TUNED__FAMILY_TMA = 1,  /* softmax_staged.cu: rows streamed through shared memory */
    /* no kernel of its own: the rows of a chunk of a composite evaluation
     * (kind.h: TUNED__EVALUATE_CHUNKED_LINEAR_CE), "chunk1024", and the
     * vocabulary blocks each chunk's logits are made in, "chunk2048.v17";
     * every other field 0 */
    TUNED__FAMILY_CHUNK = 2,
};

/* Most rows of a chunk a config's text may name. */
#define TUNED__MAX_CHUNK 16777216u

/* Load cache hints, in the order the text form and the space use them. */
enum {
    TUNED__LD_DEF = 0, /* ld.global */
    TUNED__LD_NC,      /* ld.global.nc: read-only path */
    TUNED__LD_CS,      /* ld.global.cs: evict-first, streaming */
    TUNED__LD_EL,      /* ld.global.L2::cache_hint with an L2 evict_last policy */
    TUNED__LD_COUNT
};

/* Store cache hints. */
enum {
    TUNED__ST_DEF = 0, /* st.global */
    TUNED__ST_CS,      /* st.global.cs: evict-first, streaming */
    TUNED__ST_COUNT
};

/* How a thread keeps its part of the row in registers between passes. */
enum {
    TUNED__REG_F32 = 0, /* converted to fp32 once; exp computed once */
    TUNED__REG_PK,      /* the loaded words as they came (2 elements per word
                           for 16-bit types): half the registers, exp twice */
    TUNED__REG_EX,      /* 16-bit types: the loaded words, then each replaced
                           by its two exp values rounded to the dtype: half
                           the registers and exp once, but the output is
                           rounded twice (within 1 ulp instead of 1/2) */
    TUNED__REG_COUNT
};

/* How a kind that chooses the top k of a row (its spec's `selects`) picks
 * them: k rounds of an argmax over the row's threads, each thread offering
 * its best element not yet taken, found by a scan of its elements every
 * round, or by the head of its own best elements sorted once (".sel=sort"
 * after the register mode; the scan is left out of the text), or by the
 * head of its best 4 sorted once, 3 at a warp a row (".sel=short": a
 * shorter sort, the rounds run again with whole lists where a thread's
 * short list runs dry), or by
 * the head of its best 4 from a sorting network, the rounds a vote of the
 * holders at any threads per row (".sel=net": several rows a warp, for many
 * tokens); or with no rounds, each thread's best k (a power of two up to 8)
 * sorted by a network and merged between the row's threads, key and column
 * in one word (".sel=merge": k at most TUNED__SEL_MERGE_MAX_K); or a row
 * over a warp or more (32 to TUNED__SEL_RANK_MAX_THREADS threads), its
 * candidates bounded by segments' maxima and ranked in shared memory
 * (".sel=rank": few tokens, where a row's chain of steps is the time). */
enum {
    TUNED__SEL_SCAN = 0,
    TUNED__SEL_SORT,
    TUNED__SEL_SHORT,
    TUNED__SEL_NET,
    TUNED__SEL_MERGE,
    TUNED__SEL_RANK,
    TUNED__SEL_COUNT
};
#define TUNED__SEL_MERGE_MAX_K 8
#define TUNED__SEL_RANK_MAX_THREADS 1024u
/* sel=rank's block holds each row's RankRow (router_rank.cu) in static
 * shared memory: at most this many bytes a block. */
#define TUNED__SEL_RANK_MAX_SHARED 49152u

/* Where a kind whose rows may renormalise their chosen weights (its spec's
 * `terms_param`) forms the weights' terms and their sum, with several
 * threads a row: every thread every round's winner's term, in the rounds,
 * and the sum in each thread (the default, left out of the text: the
 * shortest chain after the last round, for few rows), or each output's
 * thread its own term after the rounds, summed over the row's threads
 * (".terms=lanes": fewer instructions a row, for many rows). */
enum {
    TUNED__TERMS_ROUNDS = 0,
    TUNED__TERMS_LANES,
    TUNED__TERMS_COUNT
};

/* How the row's (max, sum) is reduced across the threads (and blocks) of a
 * row: two rounds (the maximum, then the sum of exp(x - max)), or one round
 * of (max, sum) pairs, each thread summing exp(x - its own max) and the
 * sums rescaled when pairs meet (online softmax): half the barriers. */
enum {
    TUNED__RED_SPLIT = 0, /* two rounds; the text form omits it */
    TUNED__RED_FUSED,     /* one round of pairs: ".red=fused" */
    TUNED__RED_COUNT
};

typedef struct tuned__config {
    uint8_t family; /* TUNED__FAMILY_* */
    uint8_t warps;    /* warps per block: 1, 2, 4, ... 32 */
    uint16_t rows;    /* rows per block: 1 .. 32 * warps (threads per row = 32 * warps / rows) */
    uint8_t cluster;  /* blocks sharing one row (a thread-block cluster): 1, 2, 4, 8, 16 */
    uint8_t minb;     /* blocks per SM the compiler must leave room for (__launch_bounds__):
                         1, 2, 4; caps registers at 65536 / (threads * minb) */
    uint8_t vec;      /* elements per vector access: 1, 2, 4, 8 (at most 16 bytes) */
    uint8_t ld;     /* TUNED__LD_* */
    uint8_t st;     /* TUNED__ST_* */
    uint8_t reg;    /* TUNED__REG_* */
    uint8_t red;    /* TUNED__RED_*: rows family; tma: 0 */
    uint8_t stages; /* tma: rows in flight per block, 1..4; rows family: 0 */
    uint16_t grid;  /* rows family: blocks of the grid sharing one row through global memory,
                       2 .. TUNED__GRID_MAX (a cooperative launch, a workspace, the one-round
                       reduction, no cluster); 0: none. tma: 0 */
    uint8_t stash;  /* rows family: a thread's passes 1 .. stash kept in the block's shared
                       memory (loaded by cp.async, their exps computed again at the store), not
                       in registers: forward kernels, no grid split, no reg=ex; 0: none. tma: 0 */
    uint8_t replicas; /* rows family, forward kernels, rows cut over a cluster: clusters that
                         each load and reduce the whole row, replica r storing the passes it
                         with it % replicas == r (a few rows' stores spread over more SMs):
                         2, 4, 8; 0: one cluster a row. tma: 0 */
    uint8_t sel;      /* TUNED__SEL_*: kinds that choose the top k; else 0 */
    uint8_t terms;    /* TUNED__TERMS_*: renormalised rows of a kind that has them; else 0 */
    uint32_t chunk;   /* family chunk: rows a chunk, 1 .. TUNED__MAX_CHUNK; else 0 */
    uint8_t splits;   /* family chunk: vocabulary blocks a chunk's logits are made in,
                         2 .. TUNED__MAX_SPLITS ("chunk2048.v17"); 0: whole rows */
} tuned__config;

/* Most bytes of a block's stash (static shared memory stops at 48 KiB,
 * and the mailboxes need some of it). */
#define TUNED__STASH_MAX_BYTES 40960u
/* Most stashed passes a config's text may name (the field is a byte). */
#define TUNED__MAX_STASH 255
/* Most clusters holding one row. */
#define TUNED__MAX_REPLICAS 8
/* The oldest GPU architecture the templates compile for (sm_80: redux.sync,
 * packed f16x2 and bf16 conversions, cp.async). */
#define TUNED__MIN_ARCH 80

/* Most blocks of a row split over the grid. */
#define TUNED__GRID_MAX 256
/* Most blocks in a grid-split launch: its workspace holds one (max, sum)
 * pair of 16 bytes per block in each of TUNED__GRID_SLOTS slots. */
#define TUNED__GRID_MAX_BLOCKS 1024
/* Slots of a grid-split workspace: launch n uses slot n % TUNED__GRID_SLOTS,
 * so that up to this many launches sharing one workspace may run at once. */
#define TUNED__GRID_SLOTS 64

/* Bytes of the workspace of a grid split of `blocks` blocks: a word of
 * (epoch, arrivals) per slot (softmax_grid_common.cu), then each slot's pairs. */
static inline size_t tuned__grid_work_bytes(uint64_t blocks)
{
    return (size_t)TUNED__GRID_SLOTS * 8 + (size_t)TUNED__GRID_SLOTS * (size_t)blocks * 16;
}

/* Blocks that share one row: a cluster's, or a grid split's. */
static inline unsigned tuned__config_blocks_per_row(const tuned__config *c)
{
    return (unsigned)c->cluster * (c->grid > 1 ? c->grid : 1u);
}

/* Blocks the launch gives each row: those that share it, times the
 * clusters that hold it (replicas). */
static inline unsigned tuned__config_launch_blocks_per_row(const tuned__config *c)
{
    return tuned__config_blocks_per_row(c) * (c->replicas > 1 ? c->replicas : 1u);
}

/* The problem a variant is generated and tuned for. */
typedef struct tuned__shape {
    tuned_dtype dtype;
    uint64_t rows;
    uint64_t cols;
    /* TUNED_KERNEL_* (the registry, src/codegen/kind.h); 0 means the
     * default kind (softmax), so that every shape written without the
     * field keeps its meaning (read it with tuned__shape_kernel). Last, so
     * positional initializers still fit. */
    uint8_t kernel;
    /* The kind's key parameters (kind.h; 0 for a kind without any). Where
     * a shape travels as (rows, cols) numbers (store keys, the daemon's
     * and the fleet's messages, export files), they ride above bit 32 of
     * the columns: tuned__shape_wire_cols. */
    uint32_t params;
} tuned__shape;

/* s's columns as they travel (kind.h: tuned__wire_cols). */
static inline uint64_t tuned__wire_cols_of(const tuned__shape *s)
{
    return tuned__wire_cols(s->cols, s->params);
}
/* Splits travelling columns into s's cols and params. */
static inline void tuned__shape_set_wire_cols(tuned__shape *s, uint64_t wire)
{
    s->cols = tuned__wire_cols_cols(wire);
    s->params = tuned__wire_params(wire);
}
/* The text of s's key parameters (tuned__params_format: "" for the
 * defaults), as messages carry them in "params". */
static inline void tuned__shape_params_text(const tuned__shape *s, char *buf, size_t n)
{
    tuned__params_format(tuned__kind(s->kernel != 0 ? s->kernel : TUNED__KIND_DEFAULT),
                         s->params, buf, n);
}

/* s's kind id, 0 read as the default kind. */
static inline unsigned tuned__shape_kernel(const tuned__shape *s)
{
    return s->kernel != 0 ? s->kernel : (unsigned)TUNED__KIND_DEFAULT;
}

/* s's kind's spec; NULL for an unknown kind (tuned__shape_check refuses it). */
static inline const tuned__kind_spec *tuned__shape_spec(const tuned__shape *s)
{
    return tuned__kind(tuned__shape_kernel(s));
}

/* Tensors of rows x cols s's kind moves (the size caps); 1 for an unknown
 * kind, which the caps' callers refuse anyway. */
static inline unsigned tuned__shape_matrices(const tuned__shape *s)
{
    const tuned__kind_spec *k = tuned__shape_spec(s);
    unsigned n = k != NULL ? tuned__kind_matrices(k) : 0;
    return n > 0 ? n : 1;
}

/* The kind's name; NULL for an unknown id. */
const char *tuned__kernel_name(uint8_t kernel);

/* The id of a kind's name; TUNED_EINVAL for an unknown name. */
int tuned__kernel_parse(const char *name, uint8_t *out);

/* Largest rows and columns tuned accepts (a CUDA grid holds 2^31-1 blocks;
 * kernels index columns with int). */
#define TUNED__MAX_ROWS 2147483647ull
#define TUNED__MAX_COLS 2147483392ull

/* Whether s is a shape tuned takes (a known kernel and dtype, rows and
 * columns in range); when not, why says why (if not NULL). */
bool tuned__shape_check(const tuned__shape *s, char *why, size_t n);

/* Longest text form plus NUL. */
#define TUNED__CONFIG_TEXT 64

/* Writes the canonical text form into buf (at least TUNED__CONFIG_TEXT). */
void tuned__config_format(const tuned__config *c, char *buf, size_t n);

/* Parses a text form; TUNED_EINVAL with the offending part named. Checks
 * the syntax, and the rules of tuned__config_check that need no shape. */
int tuned__config_parse(const char *text, tuned__config *out, tuned__err *e);

/* tuned__config_parse, then refuses (code) a text that does not print back
 * as itself: leading zeros, empty fields, an explicit default. The text of
 * a record names its variant in the store, the history and the fleet, so
 * where records come in from outside (import, the fleet) two texts of one
 * variant must not both be taken; configs read from this build's own store
 * are parsed with tuned__config_parse, which keeps older records usable. */
int tuned__config_parse_canonical(const char *text, int code, tuned__config *out, tuned__err *e);

bool tuned__config_equal(const tuned__config *a, const tuned__config *b);

/* Threads that share one row. */
static inline unsigned tuned__config_threads_per_row(const tuned__config *c)
{
    return (unsigned)c->warps * 32u / c->rows;
}

/* Whether rows of cols elements always start on a vector boundary when
 * the base pointers are 16-byte aligned (then no partial head vector). */
static inline bool tuned__config_head_free(const tuned__config *c, uint64_t cols)
{
    /* tma variants find each row's 16-byte body at run time */
    return c->family == TUNED__FAMILY_TMA || cols % c->vec == 0;
}

/* A forward kernel's rows of at least this many bytes that may start off
 * a vector boundary count their vector slots from the 128-byte line they
 * start in, not from their first vector: a warp's vectors after the row's
 * first then fill whole sectors and lines (measured on the H200: 1024-row
 * shapes 1-3% of the copy faster on rows on a line than on rows 4 or 16
 * bytes off one), at the price of up to a line of slots before the row,
 * which a short row cannot afford, and of a few registers, which the
 * backward kernels (two rows held) pay in spills. */
#define TUNED__LINE_HEAD_MIN_ROW_BYTES 16384u
#define TUNED__LINE_BYTES 128u

/* The alignment, in elements, that a register-row variant's slots of a row
 * of s off a vector boundary are counted from (T_HEAD_ALIGN): the 128-byte
 * line's for a forward kernel's rows of TUNED__LINE_HEAD_MIN_ROW_BYTES or
 * more, else the vector's. */
static inline unsigned tuned__config_head_align(const tuned__config *c, const tuned__shape *s)
{
    size_t esize = tuned_dtype_size(s->dtype);
    const tuned__kind_spec *k = tuned__shape_spec(s);
    if (esize == 0 || c->vec == 0 || k == NULL || !k->line_head ||
        s->cols * esize < TUNED__LINE_HEAD_MIN_ROW_BYTES)
        return c->vec;
    return TUNED__LINE_BYTES / (unsigned)esize;
}

/* Vector accesses each thread makes per row of s: enough that the vectors
 * of a row's threads (in all its cluster's blocks) cover its columns
 * starting anywhere up to tuned__config_head_align elements past a
 * boundary, or, when head_free, on its start. Register rows only (0 for
 * tma variants, which keep no row in registers). */
uint64_t tuned__config_iters(const tuned__config *c, const tuned__shape *s, bool head_free);

/* 32-bit registers a thread needs to hold its part of a row (of one
 * tensor: a backward kernel holds two, y and dy), its stashed passes not
 * counted. */
uint64_t tuned__config_row_registers(const tuned__config *c, const tuned__shape *s,
                                     bool head_free);

/* Whether c is a config that codegen emits for shape s and that a GPU of
 * compute capability arch (10 * major + minor) with sms multiprocessors
 * runs: the one rule of validity (thread counts, powers of two, clusters
 * on sm_90 only, grid splits that fit the SMs, vectors of at most 16 bytes,
 * the register budget of a row held in registers on a vector boundary, the
 * unrolling cap, tma stages in shared memory, hints in range, and what the
 * shape's kernel has: the backward kernels hold two rows, have one
 * reduction and no exp to keep, and only the register-row family without
 * a grid split). Unknowns
 * skip the rules that need them: arch 0, any architecture (codegen emits
 * text for any); sms 0, any SM count (a grid split still fits its
 * workspace); s NULL, any shape (the parser). When not, why says why (if
 * not NULL). Not here: what the search leaves out on purpose (the space's
 * policy, src/tuner/space.c). */
bool tuned__config_check(const tuned__config *c, const tuned__shape *s, int arch, int sms,
                         char *why, size_t n);

/* Writes a refusal's reason into why (when not NULL and n > 0); returns
 * false, the verdict it explains. */
bool tuned__config_refuse(char *why, size_t n, const char *fmt, ...) TUNED__PRINTF(3, 4);

/* Names for the hint values, as in the text form ("def", "nc", ...). */
const char *tuned__ld_name(unsigned ld);
const char *tuned__st_name(unsigned st);
const char *tuned__reg_name(unsigned reg);
const char *tuned__red_name(unsigned red);

#endif
