/* check.h: whether a variant computes its kernel (softmax, softmax_bwd,
 * log_softmax, log_softmax_bwd: the shape says which): run it once on
 * generated input and compare every element with the float64 reference.
 *
 * The tuner's evaluator checks every variant this way before it times one,
 * and the embedding API checks a compatible record's config (measured
 * under another driver, NVRTC or policy) this way before it serves it, so
 * both hold a variant to one standard. The reference kernels
 * (kernels/templates/reference.cu: the input generator with its planted
 * rows, the float64 check, and the evaluator's timing helpers) are
 * compiled from text through codegen and NVRTC; they share no code with
 * the kernel families, so a conversion bug cannot pass in both.
 *
 * A check: poison the output and a guard band on each side of it with one
 * byte value (0x7B... is finite and far above 1 in every dtype, so an unwritten
 * element fails even where the reference is NaN), launch, then count the
 * elements with |y - ref| > atol + rtol |ref| or NaN where the reference
 * is not (rtol: fp16 1.5e-3, bf16 8e-3, fp32 2e-5; the reference kernels
 * add what each kernel's fp32 rounding needs, see reference.cu), and read
 * both guards: a row's line head (the slots before its first element) or
 * an index off by one below 0 writes before the output, past its end the
 * other way.
 *
 * Inputs: forward kernels read x (uniform in [-8, 8) plus planted rows) and
 * run at scale TUNED__CHECK_SCALE, so a variant that drops or misplaces the
 * scale fails; backward kernels read y, the softmax (log_softmax) of such
 * an x computed in float64 and rounded to the dtype, and dy uniform in
 * [-1, 1). */
#ifndef TUNED_DRIVER_CHECK_H
#define TUNED_DRIVER_CHECK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "src/codegen/config.h"
#include "src/codegen/nvrtc.h"
#include "src/driver/driver.h"
#include "src/driver/launch.h"

#define TUNED__CHECK_GUARD_BYTES 4096
/* The scale the forward kernels are checked (and timed) at: not 1, so
 * that the scale must be applied, and exact in binary, so that s x is. */
#define TUNED__CHECK_SCALE 0.75f

/* Buffers and reference kernels for one shape, in the context current at
 * tuned__check_open(). Read-only for callers, except that the evaluator
 * times launches on x and y and takes its timing helpers from module. */
typedef struct tuned__check {
    const tuned__driver *d;
    tuned__shape shape;
    size_t esize;
    size_t bytes;                      /* of x, and of y */
    const tuned__kind_spec *kind;      /* the shape's kind */
    float scale;                       /* forward kernels' (TUNED__CHECK_SCALE) */
    /* The options block every run of the variant takes (the kind's
     * params_size bytes): the scale, or the reference's options. */
    _Alignas(8) unsigned char params[128];
    CUstream stream;                   /* the caller's */
    CUdeviceptr x_alloc, y_alloc;      /* y_alloc holds a guard before y
                                          (TUNED__CHECK_GUARD_BYTES and the
                                          y_offset elements) and one after */
    size_t x_alloc_bytes, y_alloc_bytes;
    CUdeviceptr x, y;                  /* offset into their allocations: the
                                          input (backward: y) and the output */
    CUdeviceptr x2_alloc, x2;          /* backward kernels' second input, dy
                                          (x_offset into it, as x; one more
                                          where the rows are unaligned
                                          anyway); else 0 */
    size_t x2_alloc_bytes;
    CUdeviceptr counters;              /* wrong elements, first wrong index (64 bytes:
                                          the cross-entropy check counts three of each) */
    CUdeviceptr rows_alloc;            /* the per-row (ROWS) tensors of the kind, then
                                          the error word; 0 for kinds without them */
    size_t rows_alloc_bytes;
    CUdeviceptr row_tensor[TUNED__KIND_MAX_TENSORS]; /* each ROWS tensor's; else 0 */
    CUdeviceptr error_word;            /* the kernel's error bits (cross-entropy) */
    CUdeviceptr argmax;                /* the per-row argmax (cross-entropy) */
    unsigned flags;                    /* the variant's compiled-in options
                                          (tuned__check_flags; 0 after open) */
    void *method;                      /* a method's own host state (check_router.c) */
    CUfunction ref_fn[3];              /* the reference method's own kernels (check_ce.c) */
    CUdeviceptr stats;                 /* the reference's (max, sum) of the row
                                          tuned__check_reference() checks */
    CUmodule module;                   /* reference.cu */
    CUfunction gen, check;
    CUfunction gen_grad, gen_probs, check_bwd; /* the backward kernels' */
    double rtol, atol;
    uint64_t seed;                     /* of the next input drawn */
    size_t front_bytes;                /* of the guard before y */
    unsigned char *guard_host;         /* front_bytes: the larger guard */
    long long stray_write;             /* test only: a byte at y + this is
                                          overwritten after each checked
                                          launch (0: none); honoured only in a
                                          build with TUNED_TEST_HOOKS */
} tuned__check;

/* ---- inside the driver: the cross-entropy method (check_ce.c) and what
 * it shares with check.c ---- */
double tuned__check_bits_to_double(const unsigned char *p, tuned_dtype dtype);
/* Its inverse for values the dtype holds exactly (zero, or normal with
 * few significant bits: an LCE instance's multiples of 1/64, the router
 * check's planted rows), which the host writes as inputs. */
void tuned__check_double_to_bits(double v, tuned_dtype dtype, unsigned char *out);
bool tuned__check_stats_agree(double cpu, double gpu);
int tuned__check_ce_open(tuned__check *c, tuned__err *e);
int tuned__check_ce_flags(tuned__check *c, unsigned flags, tuned__err *e);
int tuned__check_ce_input(tuned__check *c, unsigned long long seed, tuned__err *e);
int tuned__check_ce_poison(tuned__check *c, unsigned char poison, tuned__err *e);
/* Compares nrows rows from first_row; row_ref (0: none) receives each
 * row's float64 (loss, lse). */
int tuned__check_ce_compare(tuned__check *c, uint64_t first_row, uint64_t nrows,
                            CUdeviceptr row_ref, uint64_t *bad, uint64_t *first, tuned__err *e);
int tuned__check_ce_reference(tuned__check *c, const uint64_t *picks, size_t npicks,
                              tuned__err *e);
/* The values at a wrong element (row * cols + col) of a cross-entropy
 * check, for its message, into out (empty where they cannot be read). */
void tuned__check_ce_describe(tuned__check *c, uint64_t first, char *out, size_t n);

/* The router's method (check_router.c): its per-row and per-column
 * buffers between guards and its host state; the drawn bias (and the
 * backward's ids and dweights); a run of both forward launches (without
 * and with bias, counts and source rows) or the backward's, under the
 * variant's int32 ids and bf16 weights, compared with
 * router_reference.c. */
int tuned__check_router_open(tuned__check *c, tuned__err *e);
int tuned__check_router_flags(tuned__check *c, unsigned flags, tuned__err *e);
void tuned__check_router_close(tuned__check *c);
int tuned__check_router_input(tuned__check *c, unsigned long long seed, tuned__err *e);
int tuned__check_router_run(tuned__check *c, const tuned__launch *l, tuned__workspace *work,
                            unsigned char poison, bool *wrong, char *detail, size_t n,
                            tuned__err *e);

/* Compiles the reference kernels for arch and allocates input and output
 * for s, x_offset and y_offset elements into their allocations (so rows
 * need not start 16-byte aligned), on stream of the current context.
 * Cleans up after itself on failure; close with tuned__check_close(). */
int tuned__check_open(tuned__check *c, const tuned__driver *d, const tuned__nvrtc *n, int arch,
                      const tuned__shape *s, size_t x_offset, size_t y_offset, CUstream stream,
                      tuned__err *e);

/* The compiled-in options (codegen's flags) of the variants this check
 * runs, after open: their runs then take them (cross-entropy: the cap,
 * the argmax, checked against the reference's). TUNED_EINVAL for options
 * the kind's check cannot run. */
int tuned__check_flags(tuned__check *c, unsigned flags, tuned__err *e);

/* Frees what open made (in the current context); a zeroed one is fine. */
void tuned__check_close(tuned__check *c);

/* Draws fresh input into x (uniform in [-8, 8) plus planted rows: -inf,
 * NaN, +inf, the dtype's lowest value, values near 1e10); for a backward
 * kernel, y from such an x into x, and dy into x2 (see above). */
int tuned__check_input(tuned__check *c, tuned__err *e);

/* Draws input and checks the GPU reference's row maxima and sums against
 * a CPU float64 softmax on 8 rows, the planted ones among them (backward
 * kernels: the row sums and sums of magnitudes): TUNED_EWRONG when they
 * disagree. */
int tuned__check_reference(tuned__check *c, tuned__err *e);

/* The check's buffers as the kind's tensors, in its spec's order: its
 * inputs x then x2, its output y (tensors holds TUNED__KIND_MAX_TENSORS). */
void tuned__check_tensors(const tuned__check *c, CUdeviceptr *tensors);

/* Poisons y and its guards with poison, enqueues l (work: its workspace, if
 * it needs one) on x (and x2), and compares y with the reference of the
 * current input. *wrong and detail (n bytes) say whether and where it is wrong. A
 * nonzero return is a failure of the launch or the GPU. */
int tuned__check_run(tuned__check *c, const tuned__launch *l, tuned__workspace *work,
                     unsigned char poison, bool *wrong, char *detail, size_t n, tuned__err *e);

/* The whole check of one loaded variant, for code that has no evaluator:
 * fn is config cfg compiled for shape s (aligned: for 16-byte-aligned
 * rows; otherwise the check offsets its rows so they are not), loaded in
 * the current context of a GPU with sm_count SMs and compute capability
 * arch, for s's kernel. Runs it once on generated input on a stream of
 * its own and compares with the float64 reference. A shape whose buffers would take
 * more than half the free GPU memory is checked on fewer rows (a multiple
 * of 256 plus rows % 256, so the last block's rows are the same). *ok and
 * detail (n bytes) say whether it computes softmax; a launch the driver
 * refuses is *ok false. A nonzero return: the check itself could not run
 * (NVRTC, memory, a GPU error). */
int tuned__check_variant(const tuned__driver *d, const tuned__nvrtc *n, int arch, int sm_count,
                         CUfunction fn, const tuned__config *cfg, const tuned__shape *s,
                         bool aligned, bool *ok, char *detail, size_t dn, tuned__err *e);

#endif
