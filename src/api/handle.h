/* handle.h: the embedding API's handle, shared by its files (api.c: open,
 * close, calls and lookups; api_tune.c: the tunes a handle asks for), and
 * the helpers they share. Not installed: include/tuned.h is the API. */
#ifndef TUNED_API_HANDLE_H
#define TUNED_API_HANDLE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "src/api/api.h"
#include "src/common/err.h"

/* How long a background or explicit tune may run past its search time. */
#define TUNE_SLACK_S 300.0
#define TUNE_DEFAULT_S 50.0

typedef struct module_rec {
    CUcontext ctx;
    uint64_t hash;     /* the cubin's compile-cache key */
    CUmodule module;
    CUfunction fn;
    /* The kind's helper kernels (NULL: none). */
    CUfunction helper[TUNED__KIND_MAX_HELPERS];
    struct module_rec *next;
} module_rec;

typedef struct device_info {
    bool ready;
    tuned__gpu gpu;
} device_info;

/* A compatible record whose config failed its check here: never served
 * by this handle (a record stored over it with another config is a new
 * candidate). */
typedef struct refusal {
    tuned__store_key key;
    char config[128];
    struct refusal *next;
} refusal;

/* Compatible records checked at most this many times for one pick; then
 * the pick goes on to nearest or default. */
#define CHECKS_PER_PICK 4

typedef struct tune_job {
    int device;
    uint64_t fp;
    tuned__shape shape;
    tuned_tune_state state;
    bool started;      /* taken by the background thread or an explicit tune */
    char message[256];
    struct tune_job *next;
} tune_job;

struct tuned_handle {
    uint64_t serial;   /* unique in the process: tags the per-thread records */
    tuned__driver *d;
    tuned__nvrtc *n;
    tuned__store *store; /* NULL: no store; else acquired (shared by the handles
                            of one store directory: cache/registry.c) */
    char *socket;
    char *tuned_path;
    tuned_policy policy;
    double tune_time_s;
    tuned_progress_fn on_progress; /* tuned_options.on_progress, may be NULL */
    void *progress_ctx;
    tuned__api_map map;
    pthread_mutex_t mu;        /* everything below, and map writes */
    tuned__api_entry *entries; /* every entry made, newest first */
    module_rec *modules;
    device_info *devs;
    int ndev;
    tune_job *jobs;
    refusal *refused;          /* compatible records that failed their check */
    pthread_cond_t cv;         /* the background thread waits on it */
    pthread_t worker;
    bool worker_started, stopping;
    atomic_int cancel;         /* kills a running child tune */
    pthread_mutex_t tune_mu;   /* one child tune at a time */
};

/* The failure of a call: its code, and e's message as the calling
 * thread's last error (tuned_last_error). */
int tuned__api_fail(const tuned_handle *h, const tuned__err *e);
int tuned__api_failf(const tuned_handle *h, int code, const char *fmt, ...) TUNED__PRINTF(3, 4);

/* Whether the device spans [a, a + a_span) and [b, b + b_span) overlap. */
static inline bool tuned__api_overlap(uintptr_t a, uint64_t a_span, uintptr_t b, uint64_t b_span)
{
    return a < b + b_span && b < a + a_span;
}

/* The GPU at ordinal (identified once; under h->mu). */
int tuned__api_device_get(tuned_handle *h, int ordinal, const tuned__gpu **out, tuned__err *e);

/* The ordinal for device (-1: the current context's, else 0; under h->mu). */
int tuned__api_resolve_device(tuned_handle *h, int device, int *ordinal, tuned__err *e);

/* ---- a call (api.c): the kind-specific entry points build one ---- */

/* One call: the entry point's name (for messages), the kind, one device
 * pointer per tensor of the kind in its spec's order (NULL for an unused
 * one), the options block (NULL: the scale, for a scaled kind) and the
 * kind's compiled-in options (codegen flags). */
typedef struct tuned__api_args {
    const char *fn;
    const tuned__kind_spec *kind;
    const void *ptr[TUNED__KIND_MAX_TENSORS];
    const void *params;
    unsigned flags;
    uint32_t key_params; /* the kind's key parameters (kind.h; 0: none) */
} tuned__api_args;

/* The entry for a call (checking its arguments): the fast path, else the
 * slow path (pick, compile, load). The calling thread's last choice is it. */
int tuned__api_resolve(tuned_handle *h, const tuned__api_args *a, int64_t rows, int64_t cols,
                       int64_t stride, tuned_dtype dtype, float scale, void *stream,
                       tuned__api_entry **out);

/* An entry of kind kernel for this shape in the current context (or,
 * when none is current, ptr's, made current), of any alignment and
 * compiled-in options (the fast path's lookup, no lock), or NULL: for a
 * helper kernel that every such entry's module holds. */
const tuned__api_entry *tuned__api_find_kind(tuned_handle *h, tuned_kernel kernel, const void *ptr,
                                             int64_t rows, int64_t cols, int64_t row_stride,
                                             tuned_dtype dtype);

/* Launches e's kernel for a on stream. */
int tuned__api_launch(tuned_handle *h, const tuned__api_args *a, const tuned__api_entry *e,
                      int64_t rows, int64_t cols, int64_t row_stride, tuned_dtype dtype,
                      float scale, void *stream);

/* 0, or TUNED_EINVAL (said as fn's error) for a bad handle, kind, dtype,
 * shape or device. */
int tuned__api_shape_ok(const tuned_handle *h, const char *fn, tuned_kernel kernel, int64_t rows,
                        int64_t cols, tuned_dtype dtype, int device);

/* ---- api_tune.c (under h->mu) ---- */

/* The handle's tune of shape s on the GPU of fingerprint fp, or NULL. */
tune_job *tuned__api_job_find(tuned_handle *h, uint64_t fp, const tuned__shape *s);

/* Under the daemon and process policies, queues a background tune of a
 * shape that has no exact record (once per shape and handle). */
void tuned__api_request_tune(tuned_handle *h, int device, const tuned__gpu *gpu,
                             const tuned__shape *s, tuned_source source);

#endif
