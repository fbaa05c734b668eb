/* jobs.h: tune jobs: the queue, the job table, and one thread per GPU.
 *
 * A job tunes one (kind, dtype, rows, cols) on one GPU model (the store's
 * GPU fingerprint). Submitting a job for a key that is already queued or
 * running joins that job instead of starting another. Each GPU has a
 * thread that takes the oldest queued job for its model and has that
 * GPU's worker process (worker.h) run it with tuned__tune. A worker that
 * crashes, reports a lost GPU or misses its deadline is replaced, the
 * variant that took it down is marked failed in the store's history, and
 * the tune resumes without it.
 *
 * The event loop calls in here to submit and to read job state; all of it
 * is guarded by one mutex and nothing here blocks on a GPU while holding
 * it. */
#ifndef TUNED_DAEMON_JOBS_H
#define TUNED_DAEMON_JOBS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "cache/store.h"
#include "src/driver/gpu.h"
#include "src/tuner/search.h"

typedef struct tuned__jobs tuned__jobs;

typedef struct tuned__jobs_opts {
    const char *worker_exe;
    const char *db;           /* the store path, for the workers' compile cache */
    int worker_nice;
    double hello_timeout_s;   /* worker start-up (driver load, cuInit) */
    double variant_timeout_s; /* longest a worker may go without a result line */
    double shutdown_grace_s;  /* how long a stop waits for a running chunk */
    unsigned max_queued;      /* queued (not running) jobs */
    unsigned history;         /* finished jobs kept for `job` requests */
    bool quiet;
} tuned__jobs_opts;

/* Starts a worker for GPU 0, learns how many GPUs there are, starts one
 * for each other, and one thread per GPU. No GPU (no driver, say) is not
 * an error: the daemon then serves the store only, and
 * tuned__jobs_no_gpu() says why. */
int tuned__jobs_start(tuned__jobs **out, tuned__store *store, const tuned__jobs_opts *o,
                      tuned__err *e);

/* Asks every thread to stop: queued jobs are cancelled, running ones
 * stop at the next chunk boundary (within the grace) and store the best
 * found so far when it beats what is stored (a checkpoint). */
void tuned__jobs_stop(tuned__jobs *j);

/* Whether every GPU thread has finished (after tuned__jobs_stop). */
bool tuned__jobs_finished(tuned__jobs *j);

/* Stops (if not yet), joins the threads, stops the workers, frees. */
void tuned__jobs_free(tuned__jobs *j);

/* ---- GPUs ---- */

typedef struct tuned__jobs_gpu {
    tuned__gpu gpu;
    int arch;           /* 10 * major + minor */
    bool fake;          /* TEST ONLY backend */
    pid_t worker_pid;   /* 0 while none runs */
    uint64_t job;       /* the running job, 0 if idle */
    unsigned restarts;  /* workers replaced after a crash or hang */
} tuned__jobs_gpu;

/* Number of GPUs (fixed after start). */
size_t tuned__jobs_gpu_count(tuned__jobs *j);

/* A snapshot of GPU i; false when i is out of range. */
bool tuned__jobs_gpu_at(tuned__jobs *j, size_t i, tuned__jobs_gpu *out);

/* Why there is no GPU, when there is none ("" otherwise). */
const char *tuned__jobs_no_gpu(tuned__jobs *j);

/* ---- jobs ---- */

enum {
    TUNED__JOB_QUEUED = 0,
    TUNED__JOB_RUNNING,
    TUNED__JOB_DONE,      /* a winner was stored */
    TUNED__JOB_FAILED,    /* error says why */
    TUNED__JOB_CANCELLED, /* the daemon stopped; checkpointed says if stored */
};

const char *tuned__job_state_name(int state);

#define TUNED__JOB_CRASHES_SHOWN 8

typedef struct tuned__job_view {
    uint64_t id;
    int state;
    tuned__shape shape;
    uint64_t gpu_fp;
    char gpu_name[128];
    int device;                /* the GPU running it, -1 before it starts */
    size_t queue_position;     /* for a queued job: jobs ahead of it */
    size_t budget;
    size_t evaluated;          /* variants evaluated so far */
    size_t failed;             /* of those, how many failed */
    int generation;            /* of the search; -1 before the first ends */
    bool have_best;
    char best_config[TUNED__CONFIG_TEXT];
    double best_us;
    double copy_us;
    double elapsed_s;
    unsigned worker_restarts;
    unsigned crashes;          /* variants that took a worker down */
    char crashed[TUNED__JOB_CRASHES_SHOWN][TUNED__CONFIG_TEXT];
    char stop_reason[64];
    bool stored;               /* the winner (or checkpoint) is in the store */
    bool checkpointed;
    char error[512];
    unsigned joined;           /* further requests that joined it */
    bool from_remote;          /* done by the fleet's record, not by a tune here */
    char remote[160];          /* what the fleet tier does for it ("" without one) */
} tuned__job_view;

typedef struct tuned__job_params {
    tuned__shape shape;
    uint64_t gpu_fp;           /* the model to run on */
    tuned__search_opts search; /* budget, time_s, seed and population are used */
    int finalist_rounds;       /* 1..TUNED__FINALIST_ROUNDS_MAX; 0: the default */
    bool retune;               /* ignore the shape's history (else resume from it) */
    bool gated;                /* no GPU takes it before tuned__jobs_ungate() (the
                                  fleet's lease decides whether it runs here) */
} tuned__job_params;

enum {
    TUNED__SUBMIT_OK = 0,
    TUNED__SUBMIT_FULL,        /* max_queued jobs wait already */
    TUNED__SUBMIT_NO_GPU,      /* no GPU of that model */
    TUNED__SUBMIT_STOPPING,
    TUNED__SUBMIT_NOMEM,
};

/* Queues a job, or joins the queued or running one with the same shape
 * (kind, dtype, rows, cols) and GPU model. Returns TUNED__SUBMIT_*; *id and *joined on success. */
int tuned__jobs_submit(tuned__jobs *j, const tuned__job_params *p, uint64_t *id, bool *joined);

/* A gated job may run (true), or (false) it is no longer queued. */
bool tuned__jobs_ungate(tuned__jobs *j, uint64_t id);

/* Ends queued job id as done with rec, a record another daemon of the
 * fleet measured (stored: it is in the local store now); false when the
 * job is no longer queued. */
bool tuned__jobs_resolve(tuned__jobs *j, uint64_t id, const tuned__record *rec, bool stored);

/* Sets job id's `remote` text (what the fleet tier does for it). */
void tuned__jobs_note(tuned__jobs *j, uint64_t id, const char *remote);

/* The record finished job id stored (or was resolved with); false when
 * it has none. */
bool tuned__jobs_record(tuned__jobs *j, uint64_t id, tuned__record *out);

/* A snapshot of job id; false when there is no such job (any more). */
bool tuned__jobs_get(tuned__jobs *j, uint64_t id, tuned__job_view *out);

typedef struct tuned__jobs_counts {
    uint64_t submitted, joined, done, failed, cancelled;
    uint64_t from_remote;      /* of done: the fleet's record, no tune here */
    size_t queued, running;
    uint64_t worker_restarts;
} tuned__jobs_counts;

void tuned__jobs_counts_get(tuned__jobs *j, tuned__jobs_counts *out);

/* Bumped (atomically) after every record a job writes, before the job is
 * marked done, so that a reader that sees the job done and then compares
 * this number knows to reload the store. */
uint64_t tuned__jobs_writes(tuned__jobs *j);

/* The record of write number seq (1, 2, ... as tuned__jobs_writes()
 * counts them), if it is among the last few; false when it is not. */
bool tuned__jobs_written(tuned__jobs *j, uint64_t seq, tuned__record *out);

#endif
