/* worker.c: the daemon's end of a GPU worker process (worker.h).
 *
 * Called only from job threads, never from the event loop: everything here
 * blocks, but never without a deadline. The child is started with
 * posix_spawn (safe in a threaded process), its pipes are non-blocking on
 * our side and every wait is a poll() in slices of at most 100 ms, so a
 * cancel (daemon shutdown) is noticed quickly. A worker that misses a
 * deadline is SIGKILLed and reaped here; no other part of the daemon ever
 * sees a child process. The child asks for SIGKILL when the thread that
 * spawned it dies (PR_SET_PDEATHSIG, set on its side), so a daemon killed
 * with -9 leaves no worker behind. */
#include "src/daemon/worker.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "cache/record.h"
#include "cache/store.h"
#include "tuned.h"
#include "src/client/client.h"
#include "src/common/clock.h"

extern char **environ;

#define LINE_MAX_BYTES ((size_t)8 << 20) /* a reply line from a worker */

struct tuned__worker {
    pid_t pid;
    int to_child;   /* its stdin */
    int from_child; /* its stdout */
    char *buf;
    size_t start, end, cap;
    bool reaped;
    int status;     /* waitpid status once reaped */
};

pid_t tuned__worker_pid(const tuned__worker *w)
{
    return w != NULL ? w->pid : 0;
}

/* Reaps the child, waiting at most wait_s, then SIGKILLs it and waits. */
static void reap(tuned__worker *w, double wait_s)
{
    if (w->reaped || w->pid <= 0)
        return;
    double end = tuned__now_s() + wait_s;
    for (;;) {
        pid_t r = waitpid(w->pid, &w->status, WNOHANG);
        if (r == w->pid || (r < 0 && errno != EINTR)) {
            w->reaped = true;
            return;
        }
        if (tuned__now_s() >= end)
            break;
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    kill(w->pid, SIGKILL);
    while (waitpid(w->pid, &w->status, 0) < 0 && errno == EINTR)
        ;
    w->reaped = true;
}

/* "exited with status 3", "was killed by signal 6 (Aborted)". */
static void describe_exit(const tuned__worker *w, char *out, size_t n)
{
    if (!w->reaped)
        snprintf(out, n, "is still running");
    else if (WIFEXITED(w->status))
        snprintf(out, n, "exited with status %d", WEXITSTATUS(w->status));
    else if (WIFSIGNALED(w->status))
        snprintf(out, n, "was killed by signal %d (%s)", WTERMSIG(w->status),
                 strsignal(WTERMSIG(w->status)));
    else
        snprintf(out, n, "ended (status 0x%x)", (unsigned)w->status);
}

static void close_fds(tuned__worker *w)
{
    if (w->to_child >= 0)
        close(w->to_child);
    if (w->from_child >= 0)
        close(w->from_child);
    w->to_child = w->from_child = -1;
}

void tuned__worker_stop(tuned__worker *w, double grace_s)
{
    if (w == NULL)
        return;
    if (w->to_child >= 0) {
        close(w->to_child); /* EOF: a healthy worker exits */
        w->to_child = -1;
    }
    reap(w, grace_s);
    close_fds(w);
    free(w->buf);
    free(w);
}

/* The child died or broke protocol: reap it and describe it in e. */
static int lost(tuned__worker *w, int code, tuned__err *e, const char *what)
{
    if (code == TUNED_ETIMEOUT && !w->reaped)
        kill(w->pid, SIGKILL);
    reap(w, 2.0);
    char how[128];
    describe_exit(w, how, sizeof how);
    return tuned__errf(e, code, "worker %d: %s; it %s", (int)w->pid, what, how);
}

/* Reads one line (without its newline, NUL-terminated in w->buf) before
 * the deadline. TUNED_EIO on EOF, TUNED_ETIMEOUT on the deadline or a
 * cancel; e is filled by lost(). */
static int read_line(tuned__worker *w, double deadline, tuned__worker_cancel_fn cancel, void *ctx,
                     char **line, tuned__err *e)
{
    for (;;) {
        char *nl = w->end > w->start ? memchr(w->buf + w->start, '\n', w->end - w->start) : NULL;
        if (nl != NULL) {
            *nl = '\0';
            *line = w->buf + w->start;
            w->start = (size_t)(nl - w->buf) + 1;
            return 0;
        }
        if (w->start > 0) {
            memmove(w->buf, w->buf + w->start, w->end - w->start);
            w->end -= w->start;
            w->start = 0;
        }
        if (w->end == w->cap) {
            if (w->cap >= LINE_MAX_BYTES)
                return lost(w, TUNED_ETIMEOUT, e, "sent a line over 8 MiB; killed");
            size_t cap = w->cap ? w->cap * 2 : 65536;
            char *p = realloc(w->buf, cap);
            if (p == NULL)
                return lost(w, TUNED_ETIMEOUT, e, "out of memory reading its reply; killed");
            w->buf = p;
            w->cap = cap;
        }
        double left = deadline - tuned__now_s();
        if (left <= 0)
            return lost(w, TUNED_ETIMEOUT, e, "no reply before the deadline; killed");
        if (cancel != NULL && cancel(ctx))
            return lost(w, TUNED_ETIMEOUT, e, "cancelled (daemon stopping); killed");
        struct pollfd p = {.fd = w->from_child, .events = POLLIN};
        int ms = left > 0.1 ? 100 : (int)(left * 1000) + 1;
        int r = poll(&p, 1, ms);
        if (r < 0 && errno != EINTR)
            return lost(w, TUNED_ETIMEOUT, e, "poll failed; killed");
        if (r <= 0)
            continue;
        ssize_t got = read(w->from_child, w->buf + w->end, w->cap - w->end);
        if (got > 0)
            w->end += (size_t)got;
        else if (got == 0)
            return lost(w, TUNED_EIO, e, "closed its pipe");
        else if (errno != EAGAIN && errno != EINTR)
            return lost(w, TUNED_EIO, e, "read failed");
    }
}

static int send_json(tuned__worker *w, json_t *msg, double deadline, tuned__err *e)
{
    char *text = json_dumps(msg, JSON_COMPACT);
    json_decref(msg);
    if (text == NULL)
        return tuned__errf(e, TUNED_ENOMEM, "worker %d: out of memory", (int)w->pid);
    size_t len = strlen(text);
    text[len] = '\n'; /* replaces the NUL; len + 1 bytes are sent */
    size_t off = 0;
    int rc = 0;
    while (off < len + 1) {
        ssize_t n = write(w->to_child, text + off, len + 1 - off);
        if (n > 0) {
            off += (size_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno != EAGAIN) {
            rc = lost(w, TUNED_EIO, e, "its stdin is closed");
            break;
        }
        double left = deadline - tuned__now_s();
        if (left <= 0) {
            rc = lost(w, TUNED_ETIMEOUT, e, "does not read its requests; killed");
            break;
        }
        struct pollfd p = {.fd = w->to_child, .events = POLLOUT};
        poll(&p, 1, left > 0.1 ? 100 : (int)(left * 1000) + 1);
    }
    free(text);
    return rc;
}

/* Reads one line and parses it as a JSON object. */
static int read_json(tuned__worker *w, double deadline, tuned__worker_cancel_fn cancel, void *ctx,
                     json_t **out, tuned__err *e)
{
    char *line = NULL;
    int rc = read_line(w, deadline, cancel, ctx, &line, e);
    if (rc != 0)
        return rc;
    json_error_t jerr;
    *out = json_loads(line, 0, &jerr);
    if (*out == NULL || !json_is_object(*out)) {
        json_decref(*out);
        *out = NULL;
        kill(w->pid, SIGKILL);
        return lost(w, TUNED_EIO, e, "sent a line that is not a JSON object; killed");
    }
    return 0;
}

/* The worker's {"error":{"code":C,"message":M}} into e. */
static int worker_error(const json_t *err, int fallback, tuned__err *e)
{
    const json_t *code = json_object_get(err, "code");
    const json_t *msg = json_object_get(err, "message");
    int c = json_is_integer(code) ? (int)json_integer_value(code) : fallback;
    if (c >= 0 || c < TUNED_ENOSPACE)
        c = fallback;
    return tuned__errf(e, c, "%s", json_is_string(msg) ? json_string_value(msg) : "worker error");
}

static void copy_str(char *dst, size_t n, const json_t *v)
{
    snprintf(dst, n, "%s", json_is_string(v) ? json_string_value(v) : "");
}

static int spawn(tuned__worker *w, const tuned__worker_opts *o, tuned__err *e)
{
    int in[2] = {-1, -1}, out[2] = {-1, -1};
    if (pipe2(in, O_CLOEXEC) != 0 || pipe2(out, O_CLOEXEC) != 0) {
        int err = errno;
        if (in[0] >= 0) {
            close(in[0]);
            close(in[1]);
        }
        return tuned__errf(e, TUNED_EIO, "worker: pipe: %s", strerror(err));
    }
    char device[16], parent[40], nice_env[40];
    snprintf(device, sizeof device, "%d", o->device);
    snprintf(parent, sizeof parent, "TUNED_WORKER_PARENT=%d", (int)getpid());
    snprintf(nice_env, sizeof nice_env, "TUNED_WORKER_NICE=%d", o->nice);
    char *argv[] = {(char *)o->exe, "worker", "--device", device, NULL, NULL, NULL};
    if (o->db != NULL && o->db[0] != '\0') {
        argv[4] = "--db";
        argv[5] = (char *)o->db;
    }
    size_t n = 0;
    while (environ[n] != NULL)
        n++;
    char **envp = calloc(n + 3, sizeof *envp);
    int rc = 0;
    if (envp == NULL) {
        rc = tuned__errf(e, TUNED_ENOMEM, "worker: out of memory");
        goto out;
    }
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (strncmp(environ[i], "TUNED_WORKER_", 13) != 0)
            envp[k++] = environ[i];
    envp[k++] = parent;
    envp[k++] = nice_env;
    envp[k] = NULL;
    posix_spawn_file_actions_t fa;
    int err = posix_spawn_file_actions_init(&fa);
    if (err == 0) {
        err = posix_spawn_file_actions_adddup2(&fa, in[0], STDIN_FILENO);
        if (err == 0)
            err = posix_spawn_file_actions_adddup2(&fa, out[1], STDOUT_FILENO);
        if (err == 0)
            err = posix_spawn(&w->pid, o->exe, &fa, NULL, argv, envp);
        posix_spawn_file_actions_destroy(&fa);
    }
    if (err != 0)
        rc = tuned__errf(e, TUNED_EIO, "worker: cannot start %s: %s", o->exe, strerror(err));
out:
    free(envp);
    close(in[0]);
    close(out[1]);
    if (rc != 0) {
        close(in[1]);
        close(out[0]);
        return rc;
    }
    w->to_child = in[1];
    w->from_child = out[0];
    if (fcntl(w->to_child, F_SETFL, O_NONBLOCK) != 0 ||
        fcntl(w->from_child, F_SETFL, O_NONBLOCK) != 0)
        return lost(w, TUNED_EIO, e, "fcntl O_NONBLOCK failed; killed");
    return 0;
}

static double num(const json_t *o, const char *k)
{
    const json_t *v = json_object_get(o, k);
    return json_is_number(v) ? json_number_value(v) : 0.0;
}

static int parse_gpu(const json_t *g, int device, tuned__gpu *gpu, tuned__err *e)
{
    memset(gpu, 0, sizeof *gpu);
    gpu->ordinal = device;
    copy_str(gpu->name, sizeof gpu->name, json_object_get(g, "name"));
    copy_str(gpu->identity, sizeof gpu->identity, json_object_get(g, "identity"));
    const json_t *cc = json_object_get(g, "cc");
    const json_t *sms = json_object_get(g, "sms");
    const json_t *mem = json_object_get(g, "total_mem");
    if (gpu->name[0] == '\0' || gpu->identity[0] == '\0' || !json_is_integer(cc) ||
        !json_is_integer(sms) || !json_is_integer(mem) || json_integer_value(mem) <= 0)
        return tuned__errf(e, TUNED_EIO, "worker: malformed hello");
    gpu->cc_major = (int)(json_integer_value(cc) / 10);
    gpu->cc_minor = (int)(json_integer_value(cc) % 10);
    gpu->sm_count = (int)json_integer_value(sms);
    gpu->total_mem = (size_t)json_integer_value(mem);
    gpu->l2_bytes = (int)num(g, "l2");
    gpu->driver_version = (int)num(g, "driver");
    gpu->nvrtc_major = (int)num(g, "nvrtc_major");
    gpu->nvrtc_minor = (int)num(g, "nvrtc_minor");
    const json_t *tpl = json_object_get(g, "template_hash");
    gpu->template_hash = json_is_string(tpl) ? strtoull(json_string_value(tpl), NULL, 16) : 0;
    /* The identity is spelt from the facts here, as for a GPU queried in
     * this process; a worker whose string says otherwise is not trusted. */
    char sent[sizeof gpu->identity];
    memcpy(sent, gpu->identity, sizeof sent);
    tuned__gpu_identify(gpu);
    if (strcmp(sent, gpu->identity) != 0)
        return tuned__errf(e, TUNED_EIO, "worker: hello names GPU %s, its facts spell %s", sent,
                           gpu->identity);
    return 0;
}

int tuned__worker_start(tuned__worker **out, const tuned__worker_opts *o, tuned__gpu *gpu,
                        int *count, bool *fake, tuned__err *e)
{
    *out = NULL;
    tuned__worker *w = calloc(1, sizeof *w);
    if (w == NULL)
        return tuned__errf(e, TUNED_ENOMEM, "worker: out of memory");
    w->to_child = w->from_child = -1;
    int rc = spawn(w, o, e);
    json_t *hello = NULL;
    if (rc == 0)
        rc = read_json(w, tuned__now_s() + o->hello_timeout_s, o->cancel, o->cancel_ctx, &hello,
                       e);
    if (rc == 0) {
        const json_t *h = json_object_get(hello, "hello");
        const json_t *err = json_object_get(hello, "error");
        if (err != NULL) {
            rc = worker_error(err, TUNED_ENODEV, e);
        } else if (!json_is_object(h) || !json_is_integer(json_object_get(h, "count"))) {
            rc = tuned__errf(e, TUNED_EIO, "worker: malformed hello");
        } else {
            rc = parse_gpu(json_object_get(h, "gpu"), o->device, gpu, e);
            *count = (int)json_integer_value(json_object_get(h, "count"));
            *fake = json_is_true(json_object_get(h, "fake"));
            if (rc == 0 && *count < 1)
                rc = tuned__errf(e, TUNED_EIO, "worker: malformed hello");
        }
    }
    json_decref(hello);
    if (rc != 0) {
        tuned__worker_stop(w, 2.0);
        return rc;
    }
    *out = w;
    return 0;
}

int tuned__worker_send_tune(tuned__worker *w, const tuned__worker_tune *t, tuned__err *e)
{
    const char *kernel = tuned__kernel_name((uint8_t)tuned__shape_kernel(&t->shape));
    if (kernel == NULL)
        return tuned__errf(e, TUNED_EINVAL, "worker: a tune of unknown kind %u",
                           tuned__shape_kernel(&t->shape));
    json_t *req = json_pack("{s:s, s:s, s:s, s:I, s:I, s:I, s:f, s:I, s:I, s:i, s:b}", "op",
                            "tune", "kernel", kernel, "dtype", tuned_dtype_name(t->shape.dtype),
                            "rows",
                            (json_int_t)t->shape.rows, "cols", (json_int_t)t->shape.cols,
                            "budget", (json_int_t)t->budget, "time_s", t->time_s, "seed",
                            (json_int_t)(t->seed & INT64_MAX), "population",
                            (json_int_t)t->population, "finalist_rounds", t->finalist_rounds,
                            "retune", t->retune);
    if (req != NULL && tuned__client_add_params(req, &t->shape) != 0) {
        json_decref(req);
        req = NULL;
    }
    if (req == NULL)
        return tuned__errf(e, TUNED_ENOMEM, "worker: out of memory");
    return send_json(w, req, tuned__now_s() + 10.0, e);
}

static size_t count_of(const json_t *o, const char *k)
{
    double v = num(o, k);
    return v > 0 ? (size_t)v : 0;
}

/* Fills ev from one event line; -1 if it is none of the known events. */
static int parse_event(const json_t *m, tuned__worker_event *ev)
{
    memset(ev, 0, sizeof *ev);
    const json_t *v;
    if ((v = json_object_get(m, "running")) != NULL) {
        ev->kind = TUNED__WEV_RUNNING;
        copy_str(ev->config, sizeof ev->config, v);
        return ev->config[0] != '\0' ? 0 : -1;
    }
    if ((v = json_object_get(m, "evaluated")) != NULL) {
        ev->kind = TUNED__WEV_EVALUATED;
        copy_str(ev->config, sizeof ev->config, json_object_get(v, "config"));
        ev->status = (int)num(v, "s");
        ev->us = num(v, "us");
        copy_str(ev->detail, sizeof ev->detail, json_object_get(v, "detail"));
        return ev->config[0] != '\0' ? 0 : -1;
    }
    if ((v = json_object_get(m, "progress")) != NULL) {
        ev->kind = TUNED__WEV_PROGRESS;
        ev->copy_us = num(v, "copy_us");
        ev->have_generation = json_is_integer(json_object_get(v, "generation"));
        ev->generation = (int)num(v, "generation");
        return 0;
    }
    if ((v = json_object_get(m, "outcome")) != NULL) {
        ev->kind = TUNED__WEV_OUTCOME;
        tuned__err re = {0};
        if (tuned__record_from_json(json_object_get(v, "record"), &ev->record, &re) != 0)
            return -1;
        ev->evaluations = count_of(v, "evaluations");
        ev->resumed = count_of(v, "resumed");
        ev->failed = count_of(v, "failed");
        ev->finalists = count_of(v, "finalists");
        ev->warm_seeds = count_of(v, "warm_seeds");
        copy_str(ev->stop_reason, sizeof ev->stop_reason, json_object_get(v, "stop_reason"));
        return 0;
    }
    if ((v = json_object_get(m, "error")) != NULL) {
        ev->kind = TUNED__WEV_ERROR;
        tuned__err we = {0};
        ev->code = worker_error(v, TUNED_ECUDA, &we);
        snprintf(ev->message, sizeof ev->message, "%s", we.msg);
        ev->lost = json_is_true(json_object_get(m, "lost"));
        return 0;
    }
    return -1;
}

int tuned__worker_next(tuned__worker *w, tuned__worker_event *ev, double timeout_s,
                       tuned__worker_cancel_fn cancel, void *ctx, tuned__err *e)
{
    json_t *m = NULL;
    int rc = read_json(w, tuned__now_s() + timeout_s, cancel, ctx, &m, e);
    if (rc != 0)
        return rc;
    if (parse_event(m, ev) != 0) {
        kill(w->pid, SIGKILL);
        rc = lost(w, TUNED_EIO, e, "sent an unknown or malformed event; killed");
    }
    json_decref(m);
    return rc;
}
