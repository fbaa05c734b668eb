/* kind.h: the registry of kernel kinds, one spec per kind.
 *
 * A kind (softmax, softmax_bwd, ...) is data here, not a branch in the
 * files that use it. Its id and name come from TUNED_KERNEL_MAP in
 * tuned.h; everything else a layer needs to know about it is a field of
 * its spec (kind.c): the tensors a call reads and writes (whose bytes are
 * its floor), its runtime scalars, the templates and entry points it is
 * compiled from, which dimensions of the config space it has, the float64
 * reference it is checked against, and its code identity (the hash of
 * what it compiles, under which its results are stored). The space, the
 * check, the evaluator, the store key, the daemon, the fleet, the CLI and
 * the API read specs; none of them asks which kind it holds.
 *
 * docs/kernels.md says how to add a kind. */
#ifndef TUNED_CODEGEN_KIND_H
#define TUNED_CODEGEN_KIND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tuned.h"
#include "src/common/err.h"

/* How a call uses one of its tensors. */
enum {
    TUNED__TENSOR_UNUSED = 0, /* a parameter of the entry point this kind leaves
                                 alone: NULL, no bytes */
    TUNED__TENSOR_IN = 1,     /* read */
    TUNED__TENSOR_OUT = 2,    /* written */
};

/* The element type of a tensor: the shape's dtype, or a fixed one. */
enum {
    TUNED__ELEM_DTYPE = 0, /* the call's dtype (fp16, bf16, fp32) */
    TUNED__ELEM_F32,       /* always fp32 */
    TUNED__ELEM_I64,       /* int64 (labels, expert ids) */
    TUNED__ELEM_I32,       /* int32 (counts) */
};

/* The shape of a tensor, from the call's rows x cols. */
enum {
    TUNED__EXTENT_MATRIX = 0, /* rows x cols, rows row_stride elements apart */
    TUNED__EXTENT_ROWS,       /* one element per row */
    TUNED__EXTENT_ROWS_K,     /* rows x k, dense: k the kind's key parameter "k" */
    TUNED__EXTENT_COLS,       /* one element per column, shared by the rows */
    TUNED__EXTENT_ROWS_HIDDEN, /* rows x the key parameter "hidden", dense (a linear
                                  layer's input) */
    TUNED__EXTENT_COLS_HIDDEN, /* cols x "hidden", dense (a linear layer's weight) */
};

typedef struct tuned__tensor_spec {
    const char *name; /* "x", "y", "dy", "dx", "labels", ... */
    uint8_t role;     /* TUNED__TENSOR_* */
    uint8_t elem;     /* TUNED__ELEM_* */
    uint8_t extent;   /* TUNED__EXTENT_* */
    /* An output that may be exactly this tensor + 1 (an index plus one;
     * 0: none): computed in place (the kernel reads each element before
     * it writes it). Any other overlap is refused. */
    uint8_t in_place;
    /* A call may pass NULL for it (a router's bias, its counts): the
     * check runs the kernel without and with it, and a timing without,
     * unless present_param says otherwise. */
    uint8_t optional;
    /* An optional tensor's key parameter (its index + 1; 0: none) saying
     * whether the calls pass it: the API sets it from the pointer on every
     * call (an index, not a name: no string compare there), and a timing
     * of the key passes the tensor where it is 1. */
    uint8_t present_param;
    /* An int32 tensor whose values index the rows x k expanded rows (a
     * router's source rows, i * rows + r): a call that passes it needs
     * rows x k within 2^31 (the API refuses more). */
    uint8_t indexes_rows_k;
} tuned__tensor_spec;

/* How a config's kernel is built: the template paths. Which one a config
 * takes follows from the config alone (tuned__kind_path). */
enum {
    TUNED__PATH_ROWS = 0, /* register rows, one block or a cluster a row */
    TUNED__PATH_GRID,     /* register rows, a row split over the grid */
    TUNED__PATH_STAGED,   /* rows streamed through shared memory (tma family) */
    TUNED__PATH_COUNT
};

/* The float64 references of src/driver/check.c (kernels/templates/reference.cu):
 * how a kind's inputs are drawn and its output checked. */
enum {
    /* y = f(s x) row by row, x drawn from the generator, checked against
     * the float64 softmax (T_LOG: log_softmax) of s x */
    TUNED__REF_FORWARD = 1,
    /* y drawn as the float64 softmax (log_softmax) of drawn rows, dy drawn,
     * dx checked against the float64 gradient */
    TUNED__REF_BACKWARD,
    /* logits drawn as the forward's x, labels drawn (some ignored), the
     * float64 lse when the kind reads it; gradient, loss and lse checked
     * against the float64 cross-entropy (cross_entropy_reference.cu) */
    TUNED__REF_CROSS_ENTROPY,
    /* logits drawn as the forward's x, a selection bias drawn; the ids,
     * weights and counts checked against a float64 router computed on the
     * host (router_reference.c), near-ties allowed to swap */
    TUNED__REF_ROUTER,
    /* logits drawn as the forward's x, distinct ids and their weights'
     * gradient drawn on the host; dlogits checked against the float64
     * gradient (router_reference.c) */
    TUNED__REF_ROUTER_BWD,
};

/* The router kinds' compiled-in options (codegen's flags; kind.c's specs
 * name them): int32 ids (both kinds), bf16 weights (the forward). */
#define TUNED__ROUTER_FLAG_IDS32 1u         /* T_IDS32 */
#define TUNED__ROUTER_FLAG_WEIGHTS_BF16 2u  /* T_WEIGHTS_BF16 */

/* How a kind's variants are evaluated: what one of its configs is, and
 * what the evaluator runs, checks and times for it (src/tuner/evaluator.c
 * reads it; the space, src/tuner/space.c, enumerates the configs it
 * implies). */
enum {
    /* a generated kernel (family rows or tma): compiled by NVRTC, checked
     * against the float64 reference, timed alone; its floor a copy of the
     * bytes it moves */
    TUNED__EVALUATE_KERNEL = 0,
    /* a chunk size (family chunk, "chunk1024"): the loss of a linear
     * layer's output, logits = hidden @ weight^T (rows x "hidden" times
     * cols x "hidden"), computed a chunk of rows at a time: cuBLAS GEMMs
     * around the fused kernel of the spec's `inner` kind in place on each
     * chunk's logits, then the two gradient GEMMs (src/driver/lce.c); or
     * each chunk's logits made a vocabulary block at a time, around the
     * spec's block_lse and block_grad kinds (lce.h says how). The
     * chunk's logits stay within the key parameter "budget" (MiB); the
     * check is a small instance against a host float64 computation; the
     * floor is the GEMMs alone (lce.h) */
    TUNED__EVALUATE_CHUNKED_LINEAR_CE,
};

/* The version of the composite evaluations' code (src/driver/lce.c: the
 * GEMMs' order and types around the inner kernel): part of such a kind's
 * code hash, so raising it demotes their records. */
#define TUNED__COMPOSITE_VERSION 2

#define TUNED__KIND_MAX_TENSORS 6
#define TUNED__KIND_MAX_PARTS 6
#define TUNED__KIND_MAX_PARAMS 6
/* Compiled-in options a kind may have (codegen's flags: bits 0 .. 3). */
#define TUNED__KIND_MAX_FLAGS 4
/* Helper kernels of a kind's module (the cross-entropy kinds' three). */
#define TUNED__KIND_MAX_HELPERS 3
#define TUNED__PARAM_MAX_VALUES 4

/* A key parameter: a small integer beyond (rows, cols) that the kind's
 * code is compiled for and its winners are kept under (a router's k).
 * The kind's parameters pack into one 32-bit word, each in its own field
 * (shift, bits) holding the value itself; a kind without parameters has
 * the word 0, so that every key written before parameters existed keeps
 * its bytes (cache/key.h: the word rides above bit 32 of the key's
 * columns). Codegen defines `define` to the value, in the variant and in
 * its reference. Text names the values that differ from dflt:
 * "k=8,score=sigmoid" (params.c). */
typedef struct tuned__key_param {
    const char *name;   /* "k" */
    const char *define; /* "T_TOPK" */
    uint8_t shift, bits;
    uint16_t min, max, dflt;
    /* the names of values min, min + 1, ... when the values are choices
     * ("softmax", "sigmoid", ...); NULL-terminated, NULL: a number */
    const char *value_name[TUNED__PARAM_MAX_VALUES];
} tuned__key_param;

/* The columns as they travel (store keys, messages, exports): cols, and
 * above bit 32 the key parameters' word (cols itself for a kind without:
 * every key and message written before key parameters existed reads back
 * unchanged); and the two taken apart again. */
#define TUNED__WIRE_PARAMS_SHIFT 32
static inline uint64_t tuned__wire_cols(uint64_t cols, uint32_t params)
{
    return cols | ((uint64_t)params << TUNED__WIRE_PARAMS_SHIFT);
}
static inline uint64_t tuned__wire_cols_cols(uint64_t wire)
{
    return wire & ((1ull << TUNED__WIRE_PARAMS_SHIFT) - 1);
}
static inline uint32_t tuned__wire_params(uint64_t wire)
{
    return (uint32_t)(wire >> TUNED__WIRE_PARAMS_SHIFT);
}

typedef struct tuned__kind_path {
    const char *entry;                          /* the kernel's entry point; NULL: no such path */
    const char *parts[TUNED__KIND_MAX_PARTS];  /* templates, in order, NULL-terminated */
} tuned__kind_path;

typedef struct tuned__kind_spec {
    uint8_t id;       /* TUNED_KERNEL_* */
    const char *name; /* "softmax" */
    const char *math; /* what a call computes, one line */

    /* The tensors, in the kernel's parameter order: the entry point takes
     * them, then (long long rows, int cols, long long row_stride), then its
     * options block by value (params_size bytes; none when 0), then a grid
     * split's (workspace, launch number). Row tensors (MATRIX) have
     * row_stride elements between rows; the others are dense. */
    uint8_t ntensors;
    tuned__tensor_spec tensor[TUNED__KIND_MAX_TENSORS];
    uint16_t params_size;
    bool scaled;            /* the options are one float, a scale: positive and
                               finite, 1 for none */

    /* Helper kernels of the same module that a call may launch around the
     * kind's own (NULL: none); their roles are said where they are used
     * (the kind's entry point in the API). */
    const char *helper[TUNED__KIND_MAX_HELPERS];

    /* Codegen: the defines that select the kind in the shared templates,
     * and its paths. */
    int define_log; /* T_LOG */
    int define_bwd; /* T_BWD */
    const char *defines; /* more #define lines after the config's (NULL: none) */
    tuned__kind_path path[TUNED__PATH_COUNT];
    /* Compiled-in options a call may ask for (codegen's flags, bit i the
     * define flag[i] set to 1); a tune measures none of them: they cost the
     * same, or the kind says why not. Unused slots are NULL. */
    const char *flag[TUNED__KIND_MAX_FLAGS];
    /* The tensor (its index + 1; 0: none) whose elements flag[i] makes
     * 4-byte integers (labels given as int32). */
    uint8_t flag_int32[TUNED__KIND_MAX_FLAGS];
    /* The tensor (its index + 1; 0: none) whose fp32 elements flag[i]
     * makes bf16 (a router's weights). */
    uint8_t flag_bf16[TUNED__KIND_MAX_FLAGS];
    /* The most blocks an SM a build with flag[i] is bound to (its
     * T_MIN_BLOCKS; 0: the config's): a flag whose registers would spill
     * under the bound of a winner tuned without it (the tune measures no
     * flag) relaxes that bound instead. */
    uint8_t flag_min_blocks[TUNED__KIND_MAX_FLAGS];

    /* The config space: what the kind's kernel has (tuned__config_check). */
    uint8_t rows_held; /* row tensors a register-row thread holds */
    bool pairs;        /* reduces (max, sum): red=fused may pair them, and a
                          grid split must; false: one reduction, a sum */
    bool keeps_exps;   /* its store writes exps: reg=ex may keep them */
    bool stash;        /* passes may be stashed in shared memory */
    bool replicas;     /* a few rows may be held by several clusters */
    bool line_head;    /* long rows off a vector boundary count slots from their line */
    /* Most threads sharing a row (0: no limit beyond the family's): a row
     * the kernel keeps inside one warp says 32, and has no cluster. */
    uint16_t max_row_threads;
    /* Most elements of its row a thread holds, in whole vectors (0: the
     * register budget alone decides). */
    uint16_t max_thread_elems;
    bool fixed_store_hint; /* writes too little for st=cs to matter: st=def only */
    bool fixed_registers;  /* holds its row as fp32 only: reg=f32 only */
    bool selects;          /* chooses the top k of a row: sel=scan or sort (T_SEL) */
    /* The key parameter (its index + 1; 0: none) that renormalises a row's
     * chosen weights: where a key sets it, a config with several threads a
     * row may place the terms (terms=lanes, T_TERMS_LANES). */
    uint8_t terms_param;

    /* The float64 reference (TUNED__REF_*) and the templates of its module
     * (compiled with T_DTYPE and the call's flags). */
    uint8_t reference;
    const char *reference_parts[TUNED__KIND_MAX_PARTS];

    /* Its code hash (tuned__kind_code_hash) when the registry came, for
     * the kinds that existed before it; 0 for a kind added since. While
     * the kind's code is still that, its records are filed under
     * TUNED__LEGACY_CODE_HASH, the one hash every kind's records carried
     * before, so that stored and shipped records stay exact with no
     * migration (tuned__kind_identity_hash). */
    uint64_t legacy_code;

    /* Its key parameters (none for most kinds), and the rules between
     * them and the columns that no single range says (NULL: none): false
     * with why filled in. */
    uint8_t nparams;
    tuned__key_param param[TUNED__KIND_MAX_PARAMS];
    bool (*params_rule)(uint64_t cols, uint32_t params, char *why, size_t n);
    /* Columns the kind takes, for code that visits every kind with one
     * shape (tests, examples) where that shape's are not (0: any). */
    uint32_t example_cols;

    /* How its variants are evaluated (TUNED__EVALUATE_*; 0: a generated
     * kernel), and for a composite evaluation the kind whose kernel it
     * runs inside (TUNED_KERNEL_*; 0: none). */
    uint8_t evaluate;
    uint8_t inner;
    /* A composite made in vocabulary blocks ("chunk2048.v17"): the kinds
     * whose kernels give a block's log-sum-exp and its gradient over a
     * class slice, and the templates of its own small kernels (the
     * target logit's pick and the blocks' combination). */
    uint8_t block_lse, block_grad;
    const char *block_parts[TUNED__KIND_MAX_PARTS];
} tuned__kind_spec;

/* The spec of kind id, or NULL for an unknown id. */
const tuned__kind_spec *tuned__kind(unsigned id);

/* The kind called name, or NULL. */
const tuned__kind_spec *tuned__kind_find(const char *name);

/* The kinds in id order: tuned__kind_at(0 .. tuned__kind_count() - 1). */
size_t tuned__kind_count(void);
const tuned__kind_spec *tuned__kind_at(size_t i);

/* How many kinds there are; their ids are 1 .. TUNED__KIND_COUNT. */
#define TUNED__KIND_COUNT_ONE(name, value, text) +1
enum { TUNED__KIND_COUNT = 0 TUNED_KERNEL_MAP(TUNED__KIND_COUNT_ONE) };
#undef TUNED__KIND_COUNT_ONE

/* The kind a request that names none means (softmax): shapes and records
 * written without a kind keep their meaning. */
#define TUNED__KIND_DEFAULT ((uint8_t)TUNED_KERNEL_SOFTMAX)

/* The kinds' names joined by ", " into buf (for errors that list them). */
void tuned__kind_list(char *buf, size_t n);

/* In the functions below, cols is the columns as they travel: the kind's
 * key parameters above bit 32 (tuned__wire_cols, config.h), which some
 * tensors' extents read (rows x k).
 *
 * Bytes a call of kind k on rows x cols of a dtype of esize bytes must
 * move: every tensor read once and written once (an optional one where a
 * timing of the key passes it: tuned__tensor_timed). Its floor is the time of
 * a device-to-device copy of half as many bytes each way. */
double tuned__kind_bytes(const tuned__kind_spec *k, uint64_t rows, uint64_t cols, size_t esize);

/* The kind's floor in copies: its bytes over those of a device-to-device
 * copy of one rows x cols matrix (which reads one and writes one), so that
 * its floor is this times the copy's time (1 for a forward softmax, 1.5
 * for a backward, about 0.5 for the loss-only cross-entropy; 1 for a
 * kind evaluated as a composite, whose reference time is its floor). */
double tuned__kind_copies(const tuned__kind_spec *k, uint64_t rows, uint64_t cols, size_t esize);

/* Whether k is tuned by its chunk of rows (evaluated in chunks: its
 * configs are family chunk, "chunk1024"), not by a kernel config. */
bool tuned__kind_chunked(const tuned__kind_spec *k);

/* Chunks are whole multiples of this many rows (the rule's step, and the
 * smallest chunk a tune tries): a GEMM of fewer rows wastes the tensor
 * cores. */
#define TUNED__CHUNK_STEP 64u

/* Most vocabulary blocks a chunk config may name ("chunk4096.v64"). */
#define TUNED__MAX_SPLITS 64u

/* The width of every vocabulary block but the last when cols columns are
 * made in splits blocks: cols / splits rounded up to a multiple of 64
 * columns (a block's rows then start 128-byte aligned), so that there may
 * be fewer blocks than splits; cols itself for splits <= 1 or cols <= 64
 * (bindings/python/tuned/linear_cross_entropy.py _split_bounds is the
 * same). */
uint64_t tuned__kind_block_cols(uint64_t cols, unsigned splits);

/* The fewest vocabulary blocks (0: whole rows, else 2 .. TUNED__MAX_SPLITS)
 * in which chunk rows of cols columns of esize bytes fit the "budget" of
 * chunked kind k's key, or -1 where none does. */
int tuned__kind_chunk_splits(const tuned__kind_spec *k, uint32_t chunk, uint64_t cols,
                             uint32_t params, size_t esize);

/* Elements of the logits buffer that every chunk config of chunked kind
 * k's space at this key needs: the rule's whole rows or the budget,
 * whichever is more. */
uint64_t tuned__kind_chunk_elems(const tuned__kind_spec *k, uint64_t rows, uint64_t cols,
                                 uint32_t params, size_t esize);

/* The chunk of rows a call of chunked kind k takes without a record: the
 * largest multiple of TUNED__CHUNK_STEP rows whose logits (rows x cols of
 * esize bytes) fit its key parameter "budget" (MiB), at least one step,
 * at most rows (the Python call's rule, bindings/python/tuned/
 * linear_cross_entropy.py _chunk_rows, is the same). */
uint32_t tuned__kind_chunk_rule(const tuned__kind_spec *k, uint64_t rows, uint64_t cols,
                                uint32_t params, size_t esize);

/* What the evaluator's reference time (copy_us in records) is a time of,
 * for messages: a copy of one tensor for a kernel, the GEMMs alone for a
 * chunked linear cross-entropy (whose floor it is, tuned__kind_copies 1). */
const char *tuned__kind_floor_text(const tuned__kind_spec *k);

/* Tensors of rows x cols the kind moves (tuned__kind_bytes over one
 * matrix's bytes, rounded down): the daemon's and CLI's size caps. */
unsigned tuned__kind_matrices(const tuned__kind_spec *k);

/* Bytes of one element of tensor i of k for a dtype of esize bytes. */
size_t tuned__kind_elem_size(const tuned__kind_spec *k, unsigned i, size_t esize);

/* The same under the compiled-in options flags (a flag may narrow a
 * tensor to int32). */
size_t tuned__kind_elem_size_flags(const tuned__kind_spec *k, unsigned i, size_t esize,
                                   unsigned flags);

/* Bytes tensor i of k spans for rows x cols, row_stride elements between
 * rows of a MATRIX tensor, under the compiled-in options flags. */
uint64_t tuned__kind_span(const tuned__kind_spec *k, unsigned i, uint64_t rows, uint64_t cols,
                          uint64_t row_stride, size_t esize, unsigned flags);

/* Whether an output of k may be computed in place (then no variant may read
 * through the read-only cache, ld.global.nc). */
bool tuned__kind_in_place(const tuned__kind_spec *k);

/* The index of the kind's first input and first output tensor. */
unsigned tuned__kind_first_in(const tuned__kind_spec *k);
unsigned tuned__kind_first_out(const tuned__kind_spec *k);

/* ---- key parameters (params.c) ---- */

/* For code that visits every kind with one shape: k's default key
 * parameters into params, and its example columns into cols where k does
 * not take cols with them. */
void tuned__kind_example(const tuned__kind_spec *k, uint64_t *cols, uint32_t *params);

/* The word of k's parameters at their defaults (0 for a kind without). */
uint32_t tuned__params_default(const tuned__kind_spec *k);

/* The value of parameter i of k in word. */
unsigned tuned__params_get(const tuned__kind_spec *k, uint32_t word, unsigned i);

/* The value of k's parameter called name in word, or dflt when k has none
 * of that name. */
unsigned tuned__params_value(const tuned__kind_spec *k, uint32_t word, const char *name,
                             unsigned dflt);

/* word with parameter i set to v (v within its field's bits). */
uint32_t tuned__params_set(const tuned__kind_spec *k, uint32_t word, unsigned i, unsigned v);

/* word with each optional tensor's present_param set from the call's
 * pointers (ptrs[i] for tensor i): 1 where it passes the tensor. */
uint32_t tuned__params_present(const tuned__kind_spec *k, uint32_t word, const void *const *ptrs);

/* Whether a launch for a key of k with parameters word passes tensor i (a
 * timing: every tensor the kind uses, an optional one where its
 * present_param is 1). */
bool tuned__tensor_timed(const tuned__kind_spec *k, unsigned i, uint32_t word);

/* Whether word is a parameter word of k for cols columns: every field in
 * range, no bit outside the fields, and the kind's rule; why says why
 * not. */
bool tuned__params_check(const tuned__kind_spec *k, uint64_t cols, uint32_t word, char *why,
                         size_t n);

/* The text of word: its values that differ from the defaults,
 * "k=8,score=sigmoid" ("" when none do). */
void tuned__params_format(const tuned__kind_spec *k, uint32_t word, char *buf, size_t n);

/* Parses "name=value,..." (names and values as params_format writes them,
 * numbers in decimal; "" for the defaults) into *word, starting from the
 * defaults. TUNED_EINVAL naming the part it cannot take. Ranges and the
 * kind's rule are tuned__params_check's (it needs the columns). */
int tuned__params_parse(const tuned__kind_spec *k, const char *text, uint32_t *word,
                        tuned__err *e);

/* Appends "#define T_X v\n" for each parameter of word to buf (at most n
 * bytes in all, NUL included); TUNED_EINVAL when it does not fit. */
int tuned__params_defines(const tuned__kind_spec *k, uint32_t word, char *buf, size_t n,
                          tuned__err *e);

/* The code identity of kind k: an FNV-1a hash of the templates it
 * compiles (every path's parts, each once, in the order of first use),
 * its defines and the codegen version. Results are stored under it
 * (src/common/identity.h, "kernel code"), so a changed template demotes
 * the records of the kinds that compile it, and no other kind's. */
uint64_t tuned__kind_code_hash(const tuned__kind_spec *k);

/* The code hash of every record stored or shipped before the registry:
 * one hash over the eight templates of that build, in its order, and
 * codegen version 3 (cache/pretuned/ *.jsonl carry it). */
#define TUNED__LEGACY_CODE_HASH 0xe9f63e15bc01ec11ull

/* The code hash kind k's records are filed under (the identity's "kernel
 * code" part): TUNED__LEGACY_CODE_HASH while k compiles what it compiled
 * when the registry came (its code hash equals legacy_code), else its own
 * code hash. So a changed template demotes the records of the kinds that
 * compile it and no other kind's, and adding a kind demotes none. */
uint64_t tuned__kind_identity_hash(const tuned__kind_spec *k);

/* Whether k's records are filed under the default kind's code hash (and
 * so under a GPU's own identity and fingerprint, src/driver/gpu.h); true
 * for NULL. */
bool tuned__kind_default_code(const tuned__kind_spec *k);

#endif
