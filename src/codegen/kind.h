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
    TUNED__ELEM_I64,       /* int64 (labels) */
};

/* The shape of a tensor, from the call's rows x cols. */
enum {
    TUNED__EXTENT_MATRIX = 0, /* rows x cols, rows row_stride elements apart */
    TUNED__EXTENT_ROWS,       /* one element per row */
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
};

#define TUNED__KIND_MAX_TENSORS 6
#define TUNED__KIND_MAX_PARTS 6

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
    const char *helper[2];

    /* Codegen: the defines that select the kind in the shared templates,
     * and its paths. */
    int define_log; /* T_LOG */
    int define_bwd; /* T_BWD */
    const char *defines; /* more #define lines after the config's (NULL: none) */
    tuned__kind_path path[TUNED__PATH_COUNT];
    /* Compiled-in options a call may ask for (codegen's flags, bit i the
     * define flag[i] set to 1); a tune measures none of them: they cost the
     * same, or the kind says why not. NULL-terminated. */
    const char *flag[3];
    /* The tensor (its index + 1; 0: none) whose elements flag[i] makes
     * 4-byte integers (labels given as int32). */
    uint8_t flag_int32[3];

    /* The config space: what the kind's kernel has (tuned__config_check). */
    uint8_t rows_held; /* row tensors a register-row thread holds */
    bool pairs;        /* reduces (max, sum): red=fused may pair them, and a
                          grid split must; false: one reduction, a sum */
    bool keeps_exps;   /* its store writes exps: reg=ex may keep them */
    bool stash;        /* passes may be stashed in shared memory */
    bool replicas;     /* a few rows may be held by several clusters */
    bool line_head;    /* long rows off a vector boundary count slots from their line */

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

/* Bytes a call of kind k on rows x cols of a dtype of esize bytes must
 * move: every tensor read once and written once. Its floor is the time of
 * a device-to-device copy of half as many bytes each way. */
double tuned__kind_bytes(const tuned__kind_spec *k, uint64_t rows, uint64_t cols, size_t esize);

/* The kind's floor in copies: its bytes over those of a device-to-device
 * copy of one rows x cols matrix (which reads one and writes one), so that
 * its floor is this times the copy's time (1 for a forward softmax, 1.5
 * for a backward, about 0.5 for the loss-only cross-entropy). */
double tuned__kind_copies(const tuned__kind_spec *k, uint64_t rows, uint64_t cols, size_t esize);

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
