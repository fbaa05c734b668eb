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
#include "worker.h"

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

#include "../../cache/store.h"
#include "tuned.h"

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

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

pid_t tuned__worker_pid(const tuned__worker *w)
{
    return w != NULL ? w->pid : 0;
}

/* Reaps the child, waiting at most wait_s, then SIGKILLs it and waits. */
static void reap(tuned__worker *w, double wait_s)
{
    if (w->reaped || w->pid <= 0)
        return;
    double end = now_s() + wait_s;
    for (;;) {
        pid_t r = waitpid(w->pid, &w->status, WNOHANG);
        if (r == w->pid || (r < 0 && errno != EINTR)) {
            w->reaped = true;
            return;
        }
        if (now_s() >= end)
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
        double left = deadline - now_s();
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
        double left = deadline - now_s();
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
    gpu->fingerprint = tuned__store_gpu_fingerprint(gpu->identity);
    return 0;
}

int tuned__worker_start(tuned__worker **out, const tuned__worker_opts *o, tuned__gpu *gpu,
                        int *count, int *chunk, bool *fake, tuned__err *e)
{
    *out = NULL;
    tuned__worker *w = calloc(1, sizeof *w);
    if (w == NULL)
        return tuned__errf(e, TUNED_ENOMEM, "worker: out of memory");
    w->to_child = w->from_child = -1;
    int rc = spawn(w, o, e);
    json_t *hello = NULL;
    if (rc == 0)
        rc = read_json(w, now_s() + o->hello_timeout_s, NULL, NULL, &hello, e);
    if (rc == 0) {
        const json_t *h = json_object_get(hello, "hello");
        const json_t *err = json_object_get(hello, "error");
        if (err != NULL) {
            rc = worker_error(err, TUNED_ENODEV, e);
        } else if (!json_is_object(h) || !json_is_integer(json_object_get(h, "count")) ||
                   !json_is_integer(json_object_get(h, "chunk"))) {
            rc = tuned__errf(e, TUNED_EIO, "worker: malformed hello");
        } else {
            rc = parse_gpu(json_object_get(h, "gpu"), o->device, gpu, e);
            *count = (int)json_integer_value(json_object_get(h, "count"));
            *chunk = (int)json_integer_value(json_object_get(h, "chunk"));
            *fake = json_is_true(json_object_get(h, "fake"));
            if (rc == 0 && (*chunk < 1 || *count < 1))
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

int tuned__worker_open(tuned__worker *w, const tuned__shape *s, double timeout_s,
                       double *copy_us, tuned__err *e)
{
    double deadline = now_s() + timeout_s;
    json_t *req = json_pack("{s:s, s:s, s:I, s:I}", "op", "open", "dtype",
                            tuned_dtype_name(s->dtype), "rows", (json_int_t)s->rows, "cols",
                            (json_int_t)s->cols);
    if (req == NULL)
        return tuned__errf(e, TUNED_ENOMEM, "worker: out of memory");
    int rc = send_json(w, req, deadline, e);
    json_t *rep = NULL;
    if (rc == 0)
        rc = read_json(w, deadline, NULL, NULL, &rep, e);
    if (rc != 0)
        return rc;
    const json_t *ok = json_object_get(rep, "opened");
    const json_t *err = json_object_get(rep, "error");
    if (json_is_object(ok) && json_is_number(json_object_get(ok, "copy_us"))) {
        *copy_us = json_number_value(json_object_get(ok, "copy_us"));
    } else if (err != NULL) {
        rc = worker_error(err, TUNED_ECUDA, e);
    } else {
        rc = tuned__errf(e, TUNED_EIO, "worker %d: malformed reply to open", (int)w->pid);
    }
    json_decref(rep);
    return rc;
}

/* Appends the results array r to res[*done..n). */
static int take_results(const json_t *r, tuned__eval_result *res, size_t n, size_t *done)
{
    if (r == NULL)
        return 0;
    if (!json_is_array(r) || *done + json_array_size(r) > n)
        return -1;
    size_t i;
    const json_t *v;
    json_array_foreach(r, i, v) {
        tuned__eval_result *x = &res[*done];
        memset(x, 0, sizeof *x);
        const json_t *s = json_object_get(v, "s");
        if (!json_is_integer(s) || json_integer_value(s) < TUNED__EVAL_OK ||
            json_integer_value(s) > TUNED__EVAL_LAUNCH_ERROR)
            return -1;
        x->status = (int)json_integer_value(s);
        x->median_us = num(v, "us");
        x->p20_us = num(v, "p20");
        x->p80_us = num(v, "p80");
        x->reps = (int)num(v, "reps");
        x->compile_ms = num(v, "cms");
        x->registers = (int)num(v, "regs");
        x->local_bytes = (int)num(v, "local");
        copy_str(x->detail, sizeof x->detail, json_object_get(v, "detail"));
        (*done)++;
    }
    return 0;
}

int tuned__worker_eval(tuned__worker *w, const tuned__config *cfgs, size_t n,
                       tuned__eval_result *res, size_t *done, double line_timeout_s,
                       tuned__worker_cancel_fn cancel, void *ctx, tuned__err *e)
{
    *done = 0;
    if (n == 0)
        return 0;
    if (n > TUNED__WORKER_MAX_BATCH)
        return tuned__errf(e, TUNED_EINVAL, "worker: batch of %zu variants (at most %d)", n,
                           TUNED__WORKER_MAX_BATCH);
    json_t *list = json_array();
    json_t *req = json_pack("{s:s, s:o}", "op", "eval", "configs", list);
    if (req == NULL)
        return tuned__errf(e, TUNED_ENOMEM, "worker: out of memory");
    for (size_t i = 0; i < n; i++) {
        char text[TUNED__CONFIG_TEXT];
        tuned__config_format(&cfgs[i], text, sizeof text);
        if (json_array_append_new(list, json_string(text)) != 0) {
            json_decref(req);
            return tuned__errf(e, TUNED_ENOMEM, "worker: out of memory");
        }
    }
    int rc = send_json(w, req, now_s() + line_timeout_s, e);
    while (rc == 0 && *done < n) {
        json_t *rep = NULL;
        rc = read_json(w, now_s() + line_timeout_s, cancel, ctx, &rep, e);
        if (rc != 0)
            break;
        const json_t *fatal = json_object_get(rep, "fatal");
        if (take_results(json_object_get(rep, "results"), res, n, done) != 0) {
            kill(w->pid, SIGKILL);
            rc = lost(w, TUNED_EIO, e, "sent malformed results; killed");
        } else if (fatal != NULL) {
            char why[1024];
            tuned__err fe = {0};
            worker_error(fatal, TUNED_ECUDA, &fe);
            snprintf(why, sizeof why, "GPU error: %s", fe.msg);
            rc = lost(w, TUNED_ECUDA, e, why);
        } else if (json_object_get(rep, "results") == NULL) {
            kill(w->pid, SIGKILL);
            rc = lost(w, TUNED_EIO, e, "sent an unexpected line; killed");
        }
        json_decref(rep);
    }
    return rc;
}

int tuned__worker_close_shape(tuned__worker *w, double timeout_s, tuned__err *e)
{
    double deadline = now_s() + timeout_s;
    json_t *req = json_pack("{s:s}", "op", "close");
    if (req == NULL)
        return tuned__errf(e, TUNED_ENOMEM, "worker: out of memory");
    int rc = send_json(w, req, deadline, e);
    json_t *rep = NULL;
    if (rc == 0)
        rc = read_json(w, deadline, NULL, NULL, &rep, e);
    if (rc == 0 && !json_is_true(json_object_get(rep, "closed")))
        rc = tuned__errf(e, TUNED_EIO, "worker %d: malformed reply to close", (int)w->pid);
    json_decref(rep);
    return rc;
}
