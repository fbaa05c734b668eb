/* tuned.h: the one public header of libtuned, the softmax autotuner.
 *
 * Every function that can fail returns 0 or a negative TUNED_E* code;
 * tuned_strerror() names a code, and tuned_last_error() gives the calling
 * thread's message for the last failure on a handle. All state lives in
 * handles the caller owns (the one exception: handles of one process that
 * name the same store share one open LMDB environment, as LMDB requires).
 *
 * Build against it with `pkg-config --cflags --libs tuned`. The CUDA driver
 * (libcuda.so.1) and NVRTC are loaded at run time: the library itself
 * needs neither to link or start, and says so when they are missing. */
#ifndef TUNED_H
#define TUNED_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define TUNED_EXTERN __attribute__((visibility("default")))
#else
#define TUNED_EXTERN
#endif

#define TUNED_VERSION_STRING "0.1.0"

/* Error codes: 0 is success, every failure is negative. One table holds
 * each code's name, value and tuned_strerror() text (libuv's
 * UV_ERRNO_MAP): the enum below and tuned_strerror() are both made from
 * it. The values are ABI: never change or reuse one; add new codes at the
 * end. */
#define TUNED_ERRNO_MAP(XX)                                                                 \
    XX(EINVAL, -1, "invalid argument")                /* a bad argument or input */         \
    XX(ENOMEM, -2, "out of memory")                   /* out of host memory */              \
    XX(ENODRIVER, -3, "no CUDA driver found")         /* no libcuda.so.1 could be loaded */ \
    XX(ENONVRTC, -4, "no NVRTC library found")        /* no NVRTC could be loaded */        \
    XX(ENODEV, -5, "no such GPU")                                                           \
    XX(ECUDA, -6, "CUDA driver call failed")                                                \
    XX(ECOMPILE, -7, "kernel compile failed")         /* NVRTC rejected a variant */        \
    XX(EWRONG, -8, "kernel computed a wrong result")  /* a variant's softmax was wrong */   \
    XX(ESTORE, -9, "store error")                     /* the LMDB store failed */           \
    XX(ENOTFOUND, -10, "not found")                   /* no record for that key */          \
    XX(ESCHEMA, -11, "store schema mismatch")         /* written by another schema */       \
    XX(EIO, -12, "I/O error")                         /* a file or socket failed */         \
    XX(ETIMEOUT, -13, "timed out")                    /* a budget or timeout ran out */     \
    XX(EUNSUPPORTED, -14, "not supported")            /* valid, not on this GPU/build */    \
    XX(ENOSPACE, -15, "no valid variant for this shape")                                    \
    XX(ETUNE, -16, "tune failed")                     /* failed or refused (see message) */

#define TUNED__ERRNO_ENUM(name, value, text) TUNED_##name = (value),
enum {
    TUNED_OK = 0,
    TUNED_ERRNO_MAP(TUNED__ERRNO_ENUM)
};
#undef TUNED__ERRNO_ENUM

/* A short English phrase for an error code; never NULL. */
TUNED_EXTERN const char *tuned_strerror(int err);

/* The library's version, e.g. "0.1.0". */
TUNED_EXTERN const char *tuned_version(void);

/* Element types of the softmax input and output; math is always fp32. */
typedef enum tuned_dtype {
    TUNED_FP16 = 0,
    TUNED_BF16 = 1,
    TUNED_FP32 = 2,
} tuned_dtype;

/* "fp16", "bf16", "fp32"; NULL for an unknown value. */
TUNED_EXTERN const char *tuned_dtype_name(tuned_dtype dtype);

/* Parses "fp16"/"half"/"float16", "bf16"/"bfloat16", "fp32"/"float"/"float32".
 * Returns 0 or TUNED_EINVAL. */
TUNED_EXTERN int tuned_dtype_parse(const char *name, tuned_dtype *out);

/* Size in bytes of one element of dtype (2 or 4); 0 for an unknown value. */
TUNED_EXTERN size_t tuned_dtype_size(tuned_dtype dtype);

/* The kernel kinds tuned generates and tunes, each over the last
 * dimension of rows x cols (math in fp32, s the forward kernels' scale):
 *   softmax             y = exp(s x - max(s x)) / sum exp(s x - max(s x))
 *   softmax_bwd         dx = y (dy - sum(dy y))             (reads y and dy)
 *   log_softmax         y = s x - max(s x) - log sum exp(s x - max(s x))
 *   log_softmax_bwd     dx = dy - exp(y) sum(dy)            (reads y and dy)
 *   cross_entropy       per row of logits x and its label: the loss, its
 *                       log-sum-exp and the gradient, in one read of x and
 *                       one write (in place allowed): tuned_cross_entropy
 *   cross_entropy_loss  the loss and log-sum-exp alone: one read
 *   cross_entropy_bwd   the gradient from x and the saved log-sum-exp
 * One table holds each kind's name and id (the error map's style): the enum
 * below, tuned_kernel_name() and the library's registry of kinds are all
 * made from it, and the Python package's table is checked against it. The
 * ids are the store's (a record's kernel byte): stable forever once
 * shipped; add new kinds at the end. */
#define TUNED_KERNEL_MAP(XX)                   \
    XX(SOFTMAX, 1, "softmax")                  \
    XX(SOFTMAX_BWD, 2, "softmax_bwd")          \
    XX(LOG_SOFTMAX, 3, "log_softmax")          \
    XX(LOG_SOFTMAX_BWD, 4, "log_softmax_bwd")  \
    XX(CROSS_ENTROPY, 5, "cross_entropy")      \
    XX(CROSS_ENTROPY_LOSS, 6, "cross_entropy_loss") \
    XX(CROSS_ENTROPY_BWD, 7, "cross_entropy_bwd") \
    XX(ROUTER_TOPK, 8, "router_topk")          \
    XX(ROUTER_TOPK_BWD, 9, "router_topk_bwd")  \
    XX(LINEAR_CROSS_ENTROPY, 10, "linear_cross_entropy")

#define TUNED__KERNEL_ENUM(name, value, text) TUNED_KERNEL_##name = (value),
typedef enum tuned_kernel {
    TUNED_KERNEL_MAP(TUNED__KERNEL_ENUM)
} tuned_kernel;
#undef TUNED__KERNEL_ENUM

/* "softmax", "softmax_bwd", ...; NULL for an unknown value. */
TUNED_EXTERN const char *tuned_kernel_name(tuned_kernel kernel);

/* The kind called name. Returns 0, or TUNED_EINVAL for an unknown name. */
TUNED_EXTERN int tuned_kernel_parse(const char *name, tuned_kernel *out);

/* ======================================================================
 * The embedding API: a handle that launches the tuned softmax on the
 * caller's CUDA stream.
 *
 *     tuned_handle *h;
 *     if (tuned_open(&h, NULL) != 0) { puts(tuned_last_error(NULL)); ... }
 *     tuned_softmax(h, x, y, rows, cols, cols, TUNED_FP16, stream);
 *     ...
 *     tuned_close(h);
 *
 * What a call does. tuned_softmax(h, x, y, rows, cols, row_stride, dtype,
 * stream) computes y[r][c] = softmax over c of x[r][c] (as torch.softmax
 * on the last dimension: math in fp32) for rows rows of cols elements,
 * row r starting row_stride elements after row r - 1, in both x and y.
 * The first call for a key (the current context, rows, cols, row_stride,
 * dtype, and whether x, y and every row start are 16-byte aligned) takes
 * the slow path: it finds the GPU of the current context, picks a config
 * (see tuned_source), gets its compiled kernel (the store's compile cache,
 * else NVRTC, about 0.1-0.2 s, then into the cache), loads it into the
 * context, and remembers the launch. Every later call for that key takes
 * the fast path: no lock, no allocation, no system call; a table lookup
 * and one cuLaunchKernel on the caller's stream. Calls for a shape whose
 * config is not exact look again at most once a second (a cheap check of
 * the store) and switch to a better record when one was stored.
 *
 * Contexts. Calls run in the CUDA context current on the calling thread
 * (the CUDA runtime's current device: its primary context). When none is
 * current, the slow path takes the context x was allocated in and makes
 * it current on the thread, as the CUDA runtime would. Kernels are loaded
 * into each context a handle is used in and unloaded by tuned_close():
 * close the handle before destroying (or resetting) such a context, and
 * after destroying every CUDA graph that captured one of its launches.
 * Launches may be captured into CUDA graphs; take the first call of a
 * shape (or tuned_prepare) outside the capture, since it loads a module.
 *
 * Thread safety. Every function may be called from any number of threads
 * on one handle at once, except tuned_close(), which must be the last
 * call on the handle (no call may be running or start). Slow paths (and
 * lookups) of one handle take turns; fast paths never wait.
 *
 * Tuning. Nothing tunes inside the calling process: a policy chooses who
 * tunes a shape that has no exact record, in the background, while calls
 * go on with the nearest or default config (see tuned_policy). A tune is
 * a child process or the daemon's job; whatever it does, the host process
 * only ever sees an error code.
 *
 * Memory. A handle keeps every kernel and key it has launched until it is
 * closed (a few hundred bytes a key, one module per distinct variant and
 * context). */

/* An open handle; opaque. */
typedef struct tuned_handle tuned_handle;

/* Who tunes a shape that has no exact record. */
typedef enum tuned_policy {
    TUNED_POLICY_NEVER = 0,   /* nobody: use nearest or default until someone
                                 else stores a winner (tuned_tune, the CLI) */
    TUNED_POLICY_DAEMON = 1,  /* ask the daemon (`tuned serve`, on the socket)
                                 to tune it; once per shape and handle */
    TUNED_POLICY_PROCESS = 2, /* run `tuned --shape ...` as a child process of
                                 this handle (one at a time, in a background
                                 thread); it stores its winner in the store */
} tuned_policy;

/* A running tune's progress: the fields `tuned tune` shows on its
 * progress line and the daemon's `job` reply carries (docs/protocol.md). */
typedef struct tuned_progress {
    int64_t rows, cols;
    tuned_dtype dtype;
    int device;              /* GPU ordinal; -1 while a daemon job is queued */
    const char *state;       /* "queued", "running", "done", "failed", "cancelled" */
    int generation;          /* of the search; -1 before the first */
    int64_t evaluated;       /* variants measured so far */
    int64_t failed;          /* of those, ones that did not compile, were wrong or did not run */
    int64_t budget;          /* the most it will measure */
    const char *best_config; /* the fastest correct variant so far; NULL before one */
    double best_us;          /* its median time; 0 before one */
    double copy_us;          /* a copy of the same bytes (the roofline); 0 before it is measured */
    double elapsed_s;        /* since the tune started */
    const char *message;     /* state "failed": why; else NULL. A background
                                child tune that fails reports once so */
} tuned_progress;

/* Receives progress; p and its strings are valid during the call only. */
typedef void (*tuned_progress_fn)(void *ctx, const tuned_progress *p);

/* What tuned_open() takes. Initialise with tuned_options_init(); the
 * strings are copied, the caller keeps them. */
typedef struct tuned_options {
    /* The store directory (created if missing). NULL: the daemon's store
     * when the policy is TUNED_POLICY_DAEMON and a daemon answers (so that
     * its results are seen), else $TUNED_DB, else $XDG_DATA_HOME/tuned,
     * else ~/.local/share/tuned, else /var/lib/tuned. "": no store: every
     * call uses the default config, kernels are compiled each time a
     * handle first needs them, and tuned_tune() is refused. */
    const char *store;
    /* The daemon's socket. NULL: $TUNED_SOCKET, else
     * $XDG_RUNTIME_DIR/tuned/tuned.sock where a daemon listens, else
     * /run/tuned-softmax/tuned.sock (the service); see tuned(1). */
    const char *socket;
    tuned_policy policy;
    /* The tuned executable for TUNED_POLICY_PROCESS and tuned_tune().
     * NULL: $TUNED_BIN, else the installed one (BINDIR/tuned), else
     * "tuned" in $PATH. */
    const char *tuned_path;
    /* Search time of a background tune in seconds (tuned --time); 0:
     * tuned's default (50 s). */
    double tune_time_s;
    /* Called with the progress of this handle's tunes (NULL: none), on the
     * thread that runs the tune: the handle's background thread, or the
     * caller of tuned_tune(). A child tune reports once per generation; a
     * daemon job followed by tuned_tune() every 250 ms (a background daemon
     * job is not followed: the store says when it is done). Never called
     * under the lock that slow paths and lookups take, so it may call
     * tuned_last_choice() or tuned_lookup(); a child tune's reports come
     * while the handle holds its one-tune-at-a-time lock, and the tune
     * that reports is still running below the call. So, from a callback,
     * tuned_tune() (of any handle) returns TUNED_EINVAL at once instead of
     * waiting for that lock forever, and tuned_close() (of any handle)
     * closes nothing: the handle stays open, and tuned_last_error() on it
     * says why. Start the next tune, or close, after tuned_tune() returns. */
    tuned_progress_fn on_progress;
    void *progress_ctx;
} tuned_options;

/* Fills o with the defaults: every string NULL, TUNED_POLICY_NEVER, 0. */
TUNED_EXTERN void tuned_options_init(tuned_options *o);

/* Opens a handle: loads the CUDA driver and NVRTC, opens the store. o may
 * be NULL for the defaults. On success *out is the handle (free it with
 * tuned_close()); on failure *out is NULL and tuned_last_error(NULL) says
 * why. Returns 0 or
 *   TUNED_EINVAL      out is NULL, or o holds a bad policy or time
 *   TUNED_ENODRIVER   no CUDA driver (libcuda.so.1) on this machine
 *   TUNED_ENODEV      a driver, but no GPU
 *   TUNED_ENONVRTC    no NVRTC (libnvrtc.so.13 or .12)
 *   TUNED_ESTORE      the store cannot be opened or created (the message
 *                     names the path); TUNED_ESCHEMA: it is of another schema
 *   TUNED_ECUDA       a driver call failed
 *   TUNED_ENOMEM      out of memory */
TUNED_EXTERN int tuned_open(tuned_handle **out, const tuned_options *o);

/* Stops a running background tune (its child is killed; a daemon job goes
 * on), unloads every kernel the handle loaded (from the contexts it loaded
 * them into), releases the store, and frees the handle. NULL is allowed.
 * Must be the handle's last call (see "Thread safety" above). Called from
 * a progress callback it does nothing (see on_progress). */
TUNED_EXTERN void tuned_close(tuned_handle *h);

/* The message of the calling thread's last failed call on h (tuned_open
 * failures: h NULL), e.g. "tuned_softmax: x is not 2-byte aligned"; "" if
 * that thread's last failure was on another handle, or there was none.
 * Valid until the thread's next call into the library. */
TUNED_EXTERN const char *tuned_last_error(const tuned_handle *h);

/* Where a call's config came from. */
typedef enum tuned_source {
    TUNED_SOURCE_EXACT = 0,   /* the stored winner of this shape on this GPU,
                                 driver, NVRTC, kernel code and measurement
                                 policy */
    TUNED_SOURCE_NEAREST = 1, /* the stored winner of the closest other shape
                                 on this GPU model (name, compute capability,
                                 SM count; any driver and NVRTC) and dtype
                                 whose config is valid for this shape
                                 (distance |log rows ratio| + 2 |log cols
                                 ratio|, as the daemon's `get`) */
    TUNED_SOURCE_DEFAULT = 2, /* nothing suitable stored: the first heuristic
                                 seed of this shape's variant space */
    TUNED_SOURCE_COMPATIBLE = 3, /* the stored winner of this shape on this
                                 GPU model with the same kernel code, measured
                                 under another driver, NVRTC or measurement
                                 policy; compiled here and checked against
                                 the float64 reference on first use before it
                                 is served (one that fails is not served:
                                 tune_message says why). Tried after exact,
                                 before nearest. */
} tuned_source;

/* "exact", "nearest", "default", "compatible"; NULL for another value. */
TUNED_EXTERN const char *tuned_source_name(tuned_source s);

/* A background or explicit tune of one shape requested by this handle. */
typedef enum tuned_tune_state {
    TUNED_TUNE_NONE = 0,    /* none requested by this handle */
    TUNED_TUNE_QUEUED = 1,  /* requested: waiting or running (here or in the daemon) */
    TUNED_TUNE_DONE = 2,    /* finished; the winner is stored */
    TUNED_TUNE_FAILED = 3,  /* failed; tune_message says why */
} tuned_tune_state;

/* Which kernel a call used or a lookup would use. */
typedef struct tuned_choice {
    char config[64];          /* e.g. "w32.r1.c1.m1.v8.ld=nc.st=cs.reg=f32" */
    tuned_source source;
    double median_us;         /* the record's measured median (exact: this
                                 shape; nearest: record_rows x record_cols);
                                 0 for default */
    int64_t record_rows, record_cols; /* the record's shape; 0 for default */
    int device;               /* GPU ordinal */
    char gpu[128];            /* its name */
    int aligned;              /* 1: the kernel assumes 16-byte-aligned rows */
    tuned_tune_state tune;    /* this handle's tune of the shape, if any */
    char tune_message[256];   /* e.g. "daemon job 4" or why it failed; then,
                                 after "; " when both, what needs saying
                                 about the config: a compatible record's
                                 differences ("compatible: driver 12080 (here
                                 13000); checked against the float64
                                 reference"), or why one was not served */
    /* The launch, as the call makes it (tuned_last_choice only; NULL and
     * 0 from tuned_lookup): function is the CUfunction, valid in the
     * context of the call until tuned_close(). Kernel parameters: forward
     * kernels (tuned_softmax, tuned_softmax_scaled, tuned_log_softmax)
     * (const void *x, void *y, long long rows, int cols, long long
     * row_stride, float scale), backward kernels (const void *y, const
     * void *dy, void *dx, long long rows, int cols, long long row_stride),
     * launched with cuLaunchKernel, unless cooperative is 1. */
    void *function;
    unsigned grid, block, smem;
    int cooperative;          /* 1: a row split over the grid (".g<blocks>" in
                                 config), launched with cuLaunchCooperativeKernel
                                 and two more parameters, a workspace and a
                                 launch ticket, that only tuned_softmax has */
} tuned_choice;

/* Softmax over the last dimension: see "What a call does" above. x and y
 * are device pointers in the current context, element-aligned, and must
 * not overlap; row_stride >= cols; stream is a CUstream / cudaStream_t of
 * the current context (NULL: the legacy default stream). Asynchronous like
 * any launch: errors of the kernel itself show up on the stream. Returns 0
 * or
 *   TUNED_EINVAL      h, x or y NULL; rows or cols < 1 or too big (rows up
 *                     to 2^31-1, cols up to 2147483392); row_stride < cols;
 *                     an unknown dtype; a misaligned or overlapping x / y;
 *                     no current context and x not device memory
 *   TUNED_ENOSPACE    no variant fits the shape on this GPU
 *   TUNED_EUNSUPPORTED the launch does not fit a CUDA grid
 *   TUNED_ECOMPILE    NVRTC rejected the variant
 *   TUNED_ECUDA       a driver call failed (loading, cuLaunchKernel)
 *   TUNED_ESTORE      the store could not be read
 *   TUNED_ENOMEM      out of host memory (or of GPU memory for the module) */
TUNED_EXTERN int tuned_softmax(tuned_handle *h, const void *x, void *y, int64_t rows,
                               int64_t cols, int64_t row_stride, tuned_dtype dtype,
                               void *stream);

/* The same with a scale s applied to x first, fused: y = softmax(s x),
 * e.g. s = 1/temperature or 1/sqrt(d). s must be positive and finite
 * (TUNED_EINVAL otherwise); s = 1 is tuned_softmax, and costs it nothing.
 * Errors as tuned_softmax. */
TUNED_EXTERN int tuned_softmax_scaled(tuned_handle *h, const void *x, void *y, int64_t rows,
                                      int64_t cols, int64_t row_stride, tuned_dtype dtype,
                                      float scale, void *stream);

/* log_softmax over the last dimension: y = s x - max(s x) - log sum
 * exp(s x - max(s x)) per row (torch.log_softmax of s x; math in fp32), s
 * as for tuned_softmax_scaled (1 for none). Tuned and stored as its own
 * kernel ("log_softmax"). Arguments and errors as tuned_softmax_scaled. */
TUNED_EXTERN int tuned_log_softmax(tuned_handle *h, const void *x, void *y, int64_t rows,
                                   int64_t cols, int64_t row_stride, tuned_dtype dtype,
                                   float scale, void *stream);

/* The gradient of softmax over the last dimension: dx = y (dy - sum over
 * the row of dy y), y the forward's output and dy the gradient of the
 * loss with respect to it (for a forward with scale s, multiply dx by s,
 * or fold s into dy). Reads y and dy, writes dx: its floor is 1.5 times a
 * copy of one tensor. y, dy and dx are device pointers of rows rows with
 * row_stride elements between rows; dx must not overlap y or dy (y and dy
 * may be the same). Tuned and stored as its own kernel ("softmax_bwd").
 * Errors as tuned_softmax. */
TUNED_EXTERN int tuned_softmax_backward(tuned_handle *h, const void *y, const void *dy, void *dx,
                                        int64_t rows, int64_t cols, int64_t row_stride,
                                        tuned_dtype dtype, void *stream);

/* The gradient of log_softmax over the last dimension: dx = dy - exp(y)
 * (sum over the row of dy), y the forward's output (log-probabilities).
 * Arguments and errors as tuned_softmax_backward ("log_softmax_bwd"). */
TUNED_EXTERN int tuned_log_softmax_backward(tuned_handle *h, const void *y, const void *dy,
                                            void *dx, int64_t rows, int64_t cols,
                                            int64_t row_stride, tuned_dtype dtype, void *stream);

/* ======================================================================
 * Cross-entropy over the last dimension (the vocabulary): the loss of
 * rows of logits x (rows x cols, row_stride elements apart) against their
 * labels, its per-row log-sum-exp, and its gradient, in one read of the
 * logits and one write of the gradient ("cross_entropy"; in place when
 * grad == logits), or the loss alone in one read ("cross_entropy_loss",
 * grad NULL), or the gradient from the saved log-sum-exp
 * (tuned_cross_entropy_backward, "cross_entropy_bwd"). Math in fp32; loss
 * and lse are fp32; the gradient is rounded to the dtype once. Per row r
 * with label y, s = scale, V = cols, eps = label_smoothing, z = z_loss:
 *   lse  = log sum_j exp(s x_j)
 *   loss = (1 - eps)(lse - s x_y) + eps (lse - mean_j s x_j) + z lse^2
 *   grad = g_r s (p_j (1 + 2 z lse) - (1 - eps)[j == y] - eps / V),
 *          p_j = exp(s x_j - lse)
 * A row whose label is ignore_index has loss 0 and gradient 0 (and lse
 * written). g_r, the gradient flowing into the row's loss: reduction
 * "mean": grad_output[0] (NULL: 1) over the count of rows not ignored,
 * counted on the GPU before the loss kernel (the workspace holds it), so
 * no call waits on the host and every call can be captured in a CUDA
 * graph; "sum": grad_output[0] (NULL: 1); "none": grad_output[r] (NULL:
 * 1). The per-row losses are written; summing them is the caller's (one
 * small reduction). A label outside [0, V) that is not ignore_index is
 * never used as an index: its row's loss and gradient are NaN and bit
 * TUNED_CE_ERR_LABEL is OR-ed into *error (when given), which the caller
 * reads whenever it likes (after a synchronisation it makes anyway):
 * nothing on the hot path waits for it. NaN or +inf logits and rows of
 * only -inf give a NaN loss, as torch.nn.functional.cross_entropy.
 *
 * softcap (0: none): every logit is first capped, c = softcap *
 * tanh(x / softcap) (Gemma 2's final logit cap), in the kernel, in fp32
 * (no capped copy of the logits): the formulas above take s c for s x,
 * and the gradient is chained through the cap, d loss / d x = d loss / d c
 * (1 - (c / softcap)^2). A logit of -inf (a masked class) stays -inf:
 * it takes no probability through the cap (tanh would give it -softcap)
 * and its gradient is 0. The backward must be given the same softcap as
 * the forward whose lse it reads.
 * argmax (NULL: none; the forward calls only): per row, the lowest column
 * holding the row's largest s c (s x without a cap), a NaN counting as the
 * largest (as torch.argmax), written in the same pass, with the labels'
 * type (int64, or int32 with labels_int32), for ignored rows too. Each of
 * the two is compiled in only when a call asks for it (its own variant of
 * the kernel; the first call compiles it), so a call without it costs
 * nothing more. */
typedef enum tuned_reduction {
    TUNED_REDUCTION_NONE = 0,
    TUNED_REDUCTION_SUM = 1,
    TUNED_REDUCTION_MEAN = 2,
} tuned_reduction;

#define TUNED_CE_ERR_LABEL 1u /* a label outside [0, cols) that is not ignore_index */
#define TUNED_CE_WORKSPACE_BYTES 16 /* device bytes a "mean" call needs */

typedef struct tuned_ce_options {
    float scale;              /* s, positive and finite (1: none) */
    float label_smoothing;    /* eps in [0, 1] */
    float z_loss;             /* z >= 0 (PaLM's z-loss, lse_square_scale) */
    int64_t ignore_index;     /* -100 by default */
    tuned_reduction reduction;
    const float *grad_output; /* device: the upstream gradient (see above); NULL: 1 */
    float *z_out;             /* device, rows floats: z lse^2 per row; NULL: none */
    uint32_t *error;          /* device word for TUNED_CE_ERR_*; NULL: none */
    void *workspace;          /* device, TUNED_CE_WORKSPACE_BYTES, 4-byte aligned:
                                 "mean" only; NULL otherwise */
    int labels_int32;         /* 1: labels are int32; 0: int64 */
    /* Added 2026-11-29, at the end (a caller that sets them must have
     * called tuned_ce_options_init on this header's struct): */
    float softcap;            /* > 0 and finite: the tanh cap (see above); 0: none */
    void *argmax;             /* device, rows elements of the labels' type, aligned
                                 to it: each row's argmax (see above); NULL: none */
    /* Added 2026-11-29, the backward only (0 and 0 in a forward call): the
     * logits are a slice, columns [class_offset, class_offset + cols), of
     * rows of `classes` classes (a linear cross-entropy's block of the
     * vocabulary). Labels index the whole rows: one outside [0, classes)
     * is an error as above, one outside the slice has no target term in
     * it (another slice holds it), and eps / V takes V = classes. */
    int64_t class_offset;     /* >= 0; 0: the whole row */
    int64_t classes;          /* class_offset + cols to 2^31 - 1; 0: cols */
    /* Added 2026-11-30: the lse's low part, rows floats (NULL: none). A
     * forward call writes lse_lo[r] = (the row's log-sum-exp) - lse[r],
     * which the fp32 lse rounds away (2^-24 |lse|); a backward call given
     * the same rows' lse_lo takes p_j = exp((s x_j - lse) - lse_lo), and
     * so carries the rounding of log sum, as torch's fp32 log-softmax
     * does, not that of lse (5x torch's fp32 gradient error without). */
    float *lse_lo;
    /* Added 2026-11-30, the forward only, reduction sum or mean: one
     * device float (NULL: none) that the call writes with the reduced
     * loss, the rows' losses summed (in fp64, in a fixed order: the same
     * bits every call) and times the gradient's scale, g: sum,
     * grad_output[0] (NULL: 1); mean, that over the count of rows not
     * ignored (none: NaN, as torch's 0 / 0). So a caller needs no
     * reduction of its own after the call; a kernel launch more. */
    float *total;
} tuned_ce_options;

/* The defaults: scale 1, no smoothing, no z-loss, ignore_index -100,
 * reduction mean, everything else NULL or 0. */
TUNED_EXTERN void tuned_ce_options_init(tuned_ce_options *o);

/* The loss and lse of rows x cols logits of dtype against labels (device
 * arrays of rows int64, or int32 with labels_int32), and, when grad is not
 * NULL, the gradient into grad (grad == logits: in place). loss and lse
 * are device arrays of rows floats, both written. o NULL: the defaults
 * (whose reduction, mean, needs a workspace: EINVAL). Errors as
 * tuned_softmax, and
 * TUNED_EINVAL for bad options (a scale not positive, eps outside [0, 1],
 * z < 0, a softcap negative or not finite, mean without a workspace,
 * total with reduction none, misaligned or overlapping tensors). */
TUNED_EXTERN int tuned_cross_entropy(tuned_handle *h, const void *logits, const void *labels,
                                     void *grad, float *loss, float *lse, int64_t rows,
                                     int64_t cols, int64_t row_stride, tuned_dtype dtype,
                                     const tuned_ce_options *o, void *stream);

/* The gradient alone from the logits and the lse a forward saved: one read
 * and one write. Arguments as tuned_cross_entropy (o->argmax and o->total
 * must be NULL: TUNED_EINVAL). */
TUNED_EXTERN int tuned_cross_entropy_backward(tuned_handle *h, const void *logits,
                                              const void *labels, const float *lse, void *grad,
                                              int64_t rows, int64_t cols, int64_t row_stride,
                                              tuned_dtype dtype, const tuned_ce_options *o,
                                              void *stream);

/* grad *= *factor (a device float), nothing moved when it is 1: the fused
 * forward's gradient assumes an upstream gradient of 1, and autograd
 * learns the real one only in the backward. The key (rows, cols,
 * row_stride, dtype, alignment) must have been called with
 * tuned_cross_entropy on this handle and context first (TUNED_EINVAL
 * otherwise). */
TUNED_EXTERN int tuned_cross_entropy_rescale(tuned_handle *h, void *grad, int64_t rows,
                                             int64_t cols, int64_t row_stride, tuned_dtype dtype,
                                             const float *factor, void *stream);

/* ======================================================================
 * The mixture-of-experts router in one kernel ("router_topk"): per row of
 * router logits x (rows x experts, row_stride elements apart; 2 to 2048
 * experts), a score s (softmax over the row, sigmoid, or
 * sqrt(softplus)), the k best experts by s + bias (bias: fp32, one per
 * expert, or NULL; it moves the choice, never the weight), optionally only
 * among the topk_group best of num_groups consecutive groups (a group
 * scored by the sum of its two best), in descending order with ties to the
 * lower index and NaN above everything (as torch.topk orders it); weights
 * = scaling * s of each chosen expert, divided by the chosen scores' sum
 * with renorm. Outputs: weights fp32 (bf16 with weights_bf16, rounded to
 * nearest even) and ids (int64, or int32 with ids_int32), rows x k,
 * dense; counts (int32, one per expert, NULL for none) gets one added per
 * chosen expert (zero it first); source_rows (the options'; int32, rows x
 * k, NULL for none) gets i * rows + r for output i of row r: the row of
 * the k-major expanded token list that a MoE dispatch permutes (rows x k
 * at most 2^31). Math in fp32;
 * x fp32, bf16 or fp16. A softmax row whose scores are NaN (a NaN or +inf
 * logit, or all -inf) chooses experts 0 .. k-1 with NaN weights.
 *
 * tuned_router_topk_backward ("router_topk_bwd"): dx (the logits' shape,
 * every element written) of sum dweights * weights for the given ids,
 * through the score and the renormalisation (the logits are read again:
 * one read, one write).
 *
 * k, score, num_groups, topk_group and renorm are the kernel's key
 * parameters: each combination is compiled, tuned and stored apart
 * (`tuned tune --kernel router_topk --shape 16384x128:k=8`). Errors:
 * TUNED_EINVAL for a NULL handle, logits, weights or ids, k outside 1 ..
 * min(experts, 64), experts outside 2 .. 2048, groups that do not divide
 * the experts (at most 32), topk_group outside 1 .. num_groups, k more
 * than the kept groups hold, scaling not positive and finite, overlapping
 * or misaligned outputs (source_rows included), source_rows with rows x k
 * past 2^31; else as tuned_softmax. */
typedef enum tuned_router_score {
    TUNED_ROUTER_SOFTMAX = 0,
    TUNED_ROUTER_SIGMOID = 1,
    TUNED_ROUTER_SQRT_SOFTPLUS = 2,
} tuned_router_score;

typedef struct tuned_router_options {
    int k;                    /* experts a row chooses */
    tuned_router_score score; /* default softmax */
    int num_groups;           /* 1: no groups */
    int topk_group;           /* groups kept (1 without groups) */
    int renorm;               /* nonzero: weights over the chosen scores' sum */
    float scaling;            /* the routed scaling factor (1: none) */
    int ids_int32;            /* nonzero: ids are int32 (default int64) */
    /* Added 2026-11-30, at the end, the forward's (the backward ignores
     * them: its dweights are fp32). The library reads them on every call:
     * a program built against an older tuned.h must be rebuilt, and one
     * that sets them must have called tuned_router_options_init on this
     * header's struct. */
    int weights_bf16;         /* nonzero: weights are bf16 (default fp32) */
    int32_t *source_rows;     /* device, rows x k int32 (see above); NULL: none */
} tuned_router_options;

/* k 8, softmax, no groups, no renorm, scaling 1, int64 ids, fp32
 * weights, no source rows. */
TUNED_EXTERN void tuned_router_options_init(tuned_router_options *o);

TUNED_EXTERN int tuned_router_topk(tuned_handle *h, const void *logits, const float *bias,
                                   void *weights, void *ids, int *counts, int64_t rows,
                                   int64_t experts, int64_t row_stride, tuned_dtype dtype,
                                   const tuned_router_options *o, void *stream);

TUNED_EXTERN int tuned_router_topk_backward(tuned_handle *h, const void *logits, const void *ids,
                                            const float *dweights, void *dlogits, int64_t rows,
                                            int64_t experts, int64_t row_stride,
                                            tuned_dtype dtype, const tuned_router_options *o,
                                            void *stream);

/* Everything a call of kind kernel does for these arguments except the
 * launch (the slow path, if this key has none yet): for warming up shapes
 * before a CUDA graph capture or a timed loop. tensors as for tuned_run.
 * out (may be NULL) receives the choice. Errors as tuned_softmax. */
TUNED_EXTERN int tuned_prepare(tuned_handle *h, tuned_kernel kernel, const void *const *tensors,
                               int64_t rows, int64_t cols, int64_t row_stride, tuned_dtype dtype,
                               tuned_choice *out);

/* Any kind by its id: tensors holds one device pointer per tensor of the
 * kind, in the order of the kind's named entry point (softmax: x, y;
 * softmax_bwd: y, dy, dx; ...; router_topk: logits, bias, weights, ids,
 * counts, source_rows: six since 2026-11-30, at its default key), scale
 * its scalar where it has one (else ignored). Errors as that entry
 * point's, and TUNED_EINVAL for an unknown kind (the message lists the
 * kinds). tuned_softmax(h, x, y, ...) is
 * tuned_run(h, TUNED_KERNEL_SOFTMAX, (const void *[]){x, y}, ..., 1.0f, ...). */
TUNED_EXTERN int tuned_run(tuned_handle *h, tuned_kernel kernel, const void *const *tensors,
                           int64_t rows, int64_t cols, int64_t row_stride, tuned_dtype dtype,
                           float scale, void *stream);

/* The choice of the calling thread's last successful call (tuned_softmax,
 * tuned_softmax_backward, ...) or tuned_prepare on h. TUNED_ENOTFOUND when this thread has made none;
 * TUNED_EINVAL for NULL arguments. */
TUNED_EXTERN int tuned_last_choice(tuned_handle *h, tuned_choice *out);

/* The config a call of kind kernel of this shape would use on GPU device (-1: the current
 * context's device, or 0 without one), without launching or compiling
 * anything (function NULL). Like a call, it asks for a tune under the
 * daemon and process policies when the answer is not exact. Returns 0 or
 * TUNED_EINVAL, TUNED_ENODEV (no such GPU), TUNED_ENOSPACE, TUNED_ESTORE,
 * TUNED_ECUDA, TUNED_ENOMEM. */
TUNED_EXTERN int tuned_lookup(tuned_handle *h, tuned_kernel kernel, int64_t rows, int64_t cols,
                              tuned_dtype dtype, int device, tuned_choice *out);

/* tuned_lookup for a kind with key parameters (a router's k, a linear
 * cross-entropy's hidden size and memory budget), named as text:
 * "k=8,score=sigmoid" ("" or NULL: the defaults; the names and values
 * `tuned --shape ROWSxCOLS:PARAMS` takes). TUNED_EINVAL for a name, value
 * or combination the kind does not take; otherwise as tuned_lookup. */
TUNED_EXTERN int tuned_lookup_params(tuned_handle *h, tuned_kernel kernel, int64_t rows,
                                     int64_t cols, const char *params, tuned_dtype dtype,
                                     int device, tuned_choice *out);

/* Tunes kind kernel over rows x cols of dtype on GPU device (-1 as for tuned_lookup) and
 * waits for it: through the daemon under TUNED_POLICY_DAEMON (following its
 * job), else as a child process `tuned --shape ...` writing to this
 * handle's store (one tune at a time per handle; a shape the store already
 * has a winner for on this GPU is not tuned again). time_s: the search
 * time (0: the handle's tune_time_s, else tuned's default). Afterwards
 * calls of the shape switch to the stored winner (source exact). Returns 0
 * or
 *   TUNED_EINVAL      bad arguments, a handle without a store, or a call
 *                     from a progress callback (see on_progress)
 *   TUNED_ENODEV      no such GPU (or the daemon has none of its model)
 *   TUNED_ENOSPACE    no variant fits the shape on that GPU (said at once:
 *                     no child or daemon job is started)
 *   TUNED_ETUNE       the tune failed or the daemon refused it (the message
 *                     has the tuner's own last line)
 *   TUNED_ETIMEOUT    it ran far past its time and was killed
 *   TUNED_EIO         the tuned executable could not be run, or the daemon
 *                     could not be reached
 *   TUNED_ESTORE, TUNED_ECUDA, TUNED_ENOMEM as above */
TUNED_EXTERN int tuned_tune(tuned_handle *h, tuned_kernel kernel, int64_t rows, int64_t cols,
                            tuned_dtype dtype, int device, double time_s);

#ifdef __cplusplus
}
#endif
#endif /* TUNED_H */
