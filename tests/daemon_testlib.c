/* daemon_testlib.c: what the daemon's C tests share (test_daemon.c and
 * test_daemon_gpus.c): the real `tuned serve` started from the built binary
 * on a socket and store under a scratch root, a client that speaks the
 * protocol's JSON lines with timeouts, and the waits on jobs that those
 * tests make. The functions are described in daemon_testlib.h. */
#include "tests/daemon_testlib.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

int failures;
int case_failures; /* failures before the running case */
const char *tuned_exe;
char root[256];

double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* ---- the daemon ---- */

void dump_log(daemon_t *d)
{
    if (d->dumped++)
        return;
    fprintf(stderr, "---- daemon log %s ----\n", d->log);
    FILE *f = fopen(d->log, "r");
    char line[1024];
    while (f != NULL && fgets(line, sizeof line, f) != NULL)
        fputs(line, stderr);
    if (f != NULL)
        fclose(f);
    fprintf(stderr, "---- end of log ----\n");
}

static int connect_unix(const char *path)
{
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s", path);
    if (fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0)
        return fd;
    if (fd >= 0)
        close(fd);
    return -1;
}

/* Prepares names under root/name (the store survives restarts). */
void daemon_init(daemon_t *d, const char *name)
{
    memset(d, 0, sizeof *d);
    snprintf(d->dir, sizeof d->dir, "%s/%s", root, name);
    mkdir(d->dir, 0700);
    snprintf(d->sock, sizeof d->sock, "%s/%s.sock", root, name);
    snprintf(d->db, sizeof d->db, "%s/db", d->dir);
    snprintf(d->log, sizeof d->log, "%s/log", d->dir);
}

/* Starts `tuned serve` with extra environment (NULL-ended "K=V") and
 * arguments (daemon_start then waits until the socket accepts). */
static bool daemon_spawn(daemon_t *d, const char *const *env, const char *const *args)
{
    const char *argv[32];
    int n = 0;
    argv[n++] = tuned_exe;
    argv[n++] = "serve";
    argv[n++] = "--socket";
    argv[n++] = d->sock;
    argv[n++] = "--db";
    argv[n++] = d->db;
    for (int i = 0; args != NULL && args[i] != NULL && n < 30; i++)
        argv[n++] = args[i];
    argv[n] = NULL;
    size_t ne = 0;
    while (environ[ne] != NULL)
        ne++;
    const char **envp = calloc(ne + 16, sizeof *envp);
    size_t k = 0;
    for (size_t i = 0; i < ne; i++)
        if (strncmp(environ[i], "TUNED_TEST_", 11) != 0 && strncmp(environ[i], "TUNED_SOCKET=", 13))
            envp[k++] = environ[i];
    for (int i = 0; env != NULL && env[i] != NULL && k < ne + 15; i++)
        envp[k++] = env[i];
    envp[k] = NULL;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, STDOUT_FILENO, d->log, O_WRONLY | O_CREAT | O_APPEND, 0600);
    posix_spawn_file_actions_adddup2(&fa, STDOUT_FILENO, STDERR_FILENO);
    int rc = posix_spawn(&d->pid, tuned_exe, &fa, NULL, (char **)argv, (char **)envp);
    posix_spawn_file_actions_destroy(&fa);
    free(envp);
    if (rc != 0) {
        fprintf(stderr, "posix_spawn %s: %s\n", tuned_exe, strerror(rc));
        d->pid = 0;
        return false;
    }
    return true;
}

/* Starts a daemon that must refuse to start: its exit status (-1 if it
 * ran on for 30 s, then it is killed). */
int daemon_start_fails(daemon_t *d, const char *const *env)
{
    if (!daemon_spawn(d, env, NULL))
        return -1;
    double end = now_s() + 30;
    int status;
    while (now_s() < end) {
        if (waitpid(d->pid, &status, WNOHANG) == d->pid) {
            d->pid = 0;
            return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
        }
        sleep_ms(10);
    }
    kill(d->pid, SIGKILL);
    waitpid(d->pid, &status, 0);
    d->pid = 0;
    return -1;
}

bool daemon_start(daemon_t *d, const char *const *env, const char *const *args)
{
    if (!daemon_spawn(d, env, args))
        return false;
    double end = now_s() + 30;
    while (now_s() < end) {
        int status;
        if (waitpid(d->pid, &status, WNOHANG) == d->pid) {
            d->pid = 0;
            return false; /* it exited: the caller looks at the log */
        }
        int fd = connect_unix(d->sock);
        if (fd >= 0) {
            close(fd);
            return true;
        }
        sleep_ms(10);
    }
    fprintf(stderr, "daemon did not start in 30 s\n");
    dump_log(d);
    return false;
}

bool log_has(daemon_t *d, const char *needle)
{
    FILE *f = fopen(d->log, "r");
    char line[2048];
    bool found = false;
    while (!found && f != NULL && fgets(line, sizeof line, f) != NULL)
        found = strstr(line, needle) != NULL;
    if (f != NULL)
        fclose(f);
    return found;
}

/* SIGTERM, then the exit status (-1: it had to be killed, or died of a signal). */
int daemon_stop(daemon_t *d)
{
    if (d->pid <= 0)
        return -1;
    kill(d->pid, SIGTERM);
    double end = now_s() + 60;
    int status = 0;
    while (waitpid(d->pid, &status, WNOHANG) == 0) {
        if (now_s() > end) {
            fprintf(stderr, "daemon did not stop in 60 s after SIGTERM\n");
            kill(d->pid, SIGKILL);
            waitpid(d->pid, &status, 0);
            d->pid = 0;
            return -1;
        }
        sleep_ms(10);
    }
    d->pid = 0;
    if (log_has(d, "Sanitizer")) { /* a worker's report: it exits on its own */
        fprintf(stderr, "a sanitizer report in %s\n", d->log);
        return -2;
    }
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

void daemon_kill9(daemon_t *d)
{
    kill(d->pid, SIGKILL);
    waitpid(d->pid, NULL, 0);
    d->pid = 0;
}

/* ---- a client ---- */

bool cl_open_fd(client *c, int fd)
{
    memset(c, 0, sizeof *c);
    c->fd = fd;
    c->cap = 1 << 20;
    c->buf = malloc(c->cap);
    return fd >= 0 && c->buf != NULL;
}

bool cl_open(client *c, const daemon_t *d)
{
    return cl_open_fd(c, connect_unix(d->sock));
}

void cl_close(client *c)
{
    if (c->fd >= 0)
        close(c->fd);
    free(c->buf);
    c->fd = -1;
    c->buf = NULL;
}

bool cl_send(client *c, const char *s, size_t n)
{
    size_t off = 0;
    while (off < n) {
        ssize_t w = send(c->fd, s + off, n - off, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return false;
        off += (size_t)w;
    }
    return true;
}

/* The next line (malloc'd, no newline), or NULL on EOF, error or timeout. */
char *cl_line(client *c, double timeout_s)
{
    double end = now_s() + timeout_s;
    for (;;) {
        char *nl = c->len > 0 ? memchr(c->buf, '\n', c->len) : NULL;
        if (nl != NULL) {
            size_t n = (size_t)(nl - c->buf);
            char *line = malloc(n + 1);
            memcpy(line, c->buf, n);
            line[n] = '\0';
            memmove(c->buf, nl + 1, c->len - n - 1);
            c->len -= n + 1;
            return line;
        }
        if (c->len == c->cap)
            return NULL;
        double left = end - now_s();
        if (left <= 0)
            return NULL;
        struct pollfd p = {.fd = c->fd, .events = POLLIN};
        int r = poll(&p, 1, (int)(left * 1000) + 1);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return NULL;
        ssize_t got = recv(c->fd, c->buf + c->len, c->cap - c->len, 0);
        if (got <= 0)
            return NULL;
        c->len += (size_t)got;
    }
}

/* Whether the daemon closed the connection (EOF) within timeout_s, reading
 * and dropping whatever comes before. */
bool cl_eof(client *c, double timeout_s)
{
    double end = now_s() + timeout_s;
    char junk[65536];
    while (now_s() < end) {
        struct pollfd p = {.fd = c->fd, .events = POLLIN};
        if (poll(&p, 1, 50) <= 0)
            continue;
        ssize_t got = recv(c->fd, junk, sizeof junk, 0);
        if (got == 0 || (got < 0 && errno == ECONNRESET))
            return true;
    }
    return false;
}

/* Sends one request line and parses the reply (NULL on any failure). */
json_t *cl_call(client *c, const char *req)
{
    size_t n = strlen(req);
    char *line = malloc(n + 2);
    memcpy(line, req, n);
    line[n] = '\n';
    bool sent = cl_send(c, line, n + 1);
    free(line);
    if (!sent)
        return NULL;
    char *rep = cl_line(c, 30);
    if (rep == NULL)
        return NULL;
    json_error_t jerr;
    json_t *v = json_loads(rep, 0, &jerr);
    if (!json_is_object(v))
        fprintf(stderr, "reply is not a JSON object: %s\n", rep);
    free(rep);
    return v;
}


json_t *call_fmt(client *c, const char *fmt, ...)
{
    char req[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(req, sizeof req, fmt, ap);
    va_end(ap);
    return cl_call(c, req);
}

bool is_ok(const json_t *v)
{
    return json_is_true(json_object_get(v, "ok"));
}

const char *err_code(const json_t *v)
{
    const char *s = json_string_value(json_object_get(json_object_get(v, "error"), "code"));
    return s != NULL ? s : "";
}

const char *str(const json_t *v, const char *key)
{
    const char *s = json_string_value(json_object_get(v, key));
    return s != NULL ? s : "";
}

long long integer(const json_t *v, const char *key)
{
    return (long long)json_integer_value(json_object_get(v, key));
}

/* Polls job id until it ends; NULL after timeout_s. With probe, sends that
 * request before each poll and keeps the slowest answer's seconds in
 * *worst: the daemon must stay responsive while it tunes. */
json_t *wait_job_probing(client *c, long long id, double timeout_s, const char *probe,
                                double *worst)
{
    double end = now_s() + timeout_s;
    while (now_s() < end) {
        if (probe != NULL) {
            double t = now_s();
            json_t *p = cl_call(c, probe);
            EXPECT(is_ok(p));
            json_decref(p);
            if (now_s() - t > *worst)
                *worst = now_s() - t;
        }
        json_t *r = call_fmt(c, "{\"op\":\"job\",\"job\":%lld}", id);
        const json_t *job = json_object_get(r, "job");
        const char *state = str(job, "state");
        if (r == NULL || (strcmp(state, "queued") != 0 && strcmp(state, "running") != 0))
            return r;
        json_decref(r);
        sleep_ms(20);
    }
    fprintf(stderr, "job %lld did not end in %.0f s\n", id, timeout_s);
    return NULL;
}

json_t *wait_job(client *c, long long id, double timeout_s)
{
    return wait_job_probing(c, id, timeout_s, NULL, NULL);
}

long long submit_tune(client *c, uint64_t rows, uint64_t cols, const char *extra)
{
    json_t *r = call_fmt(c, "{\"op\":\"tune\",\"rows\":%llu,\"cols\":%llu%s}",
                         (unsigned long long)rows, (unsigned long long)cols, extra ? extra : "");
    long long id = is_ok(r) ? integer(r, "job") : -1;
    if (id < 0)
        fprintf(stderr, "tune refused: %s\n", r ? err_code(r) : "no reply");
    json_decref(r);
    return id;
}

/* Whether job id ends done within timeout_s. */
bool job_done(client *c, long long id, double timeout_s)
{
    json_t *r = wait_job(c, id, timeout_s);
    bool done = strcmp(str(json_object_get(r, "job"), "state"), "done") == 0;
    json_decref(r);
    return done;
}

/* Whether job id is in state now. */
bool job_is(client *c, long long id, const char *state)
{
    json_t *r = call_fmt(c, "{\"op\":\"job\",\"job\":%lld}", id);
    bool is = strcmp(str(json_object_get(r, "job"), "state"), state) == 0;
    json_decref(r);
    return is;
}

/* Polls job id until it runs with at least one variant evaluated, or
 * has ended done (true), or timeout_s passes (false): what a loaded
 * machine (sanitizers, a worker at nice 10) needs, not a fixed sleep. */
bool job_progressed(client *c, long long id, double timeout_s)
{
    double end = now_s() + timeout_s;
    do {
        json_t *r = call_fmt(c, "{\"op\":\"job\",\"job\":%lld}", id);
        const json_t *j = json_object_get(r, "job");
        const char *state = str(j, "state");
        bool moved = strcmp(state, "done") == 0 ||
                     (strcmp(state, "running") == 0 && integer(j, "evaluated") > 0);
        json_decref(r);
        if (moved)
            return true;
        sleep_ms(5);
    } while (now_s() < end);
    fprintf(stderr, "job %lld evaluated nothing in %.0f s\n", id, timeout_s);
    return false;
}

/* Whether job id reaches state within timeout_s. */
bool job_becomes(client *c, long long id, const char *state, double timeout_s)
{
    double end = now_s() + timeout_s;
    while (!job_is(c, id, state)) {
        if (now_s() >= end)
            return false;
        sleep_ms(10);
    }
    return true;
}

/* Polls jobs a and b until both run at once on different GPUs (true), or
 * polls run out. */
bool both_running(client *c, long long a, long long b, int polls, int ms)
{
    bool both = false;
    for (int i = 0; i < polls && !both; i++) {
        json_t *ra = call_fmt(c, "{\"op\":\"job\",\"job\":%lld}", a);
        json_t *rb = call_fmt(c, "{\"op\":\"job\",\"job\":%lld}", b);
        const json_t *ja = json_object_get(ra, "job"), *jb = json_object_get(rb, "job");
        both = strcmp(str(ja, "state"), "running") == 0 &&
               strcmp(str(jb, "state"), "running") == 0 &&
               integer(ja, "device") != integer(jb, "device");
        json_decref(ra);
        json_decref(rb);
        if (!both)
            sleep_ms(ms);
    }
    return both;
}

const char *const FAKE_FAST[] = {"TUNED_TEST_FAKE_GPU=1", "TUNED_TEST_FAKE_MS=1", NULL};

/* A case's start: daemon d named name with env and args, and a client c
 * connected to it. */
void start_case(daemon_t *d, client *c, const char *name, const char *const *env,
                       const char *const *args)
{
    daemon_init(d, name);
    EXPECT(daemon_start(d, env, args), "daemon %s did not start", name);
    EXPECT(cl_open(c, d), "no connection to daemon %s", name);
}

/* Closes c, stops d (exit 0), starts it again with env and args (the same
 * socket and store) and connects c again. */
void restart_case(daemon_t *d, client *c, const char *const *env, const char *const *args)
{
    cl_close(c);
    EXPECT(daemon_stop(d) == 0);
    EXPECT(daemon_start(d, env, args), "daemon %s did not start again", d->dir);
    EXPECT(cl_open(c, d), "no connection to daemon %s", d->dir);
}

/* Sends get request req; whether the answer is ok with this source. */
bool get_source_is(client *c, const char *req, const char *source)
{
    json_t *r = cl_call(c, req);
    bool is = is_ok(r) && strcmp(str(r, "source"), source) == 0;
    json_decref(r);
    return is;
}

/* A case's end: the client closed, the daemon stopped (exit 0), and its
 * log printed when the case failed. */
void end_case(daemon_t *d, client *c)
{
    cl_close(c);
    EXPECT(daemon_stop(d) == 0);
    if (failures > case_failures)
        dump_log(d);
}

/* ---- real GPUs ---- */

/* The real GPUs the daemon finds (0: none, or it did not start), and
 * GPU 0's architecture. */
size_t real_gpus(int *arch)
{
    daemon_t d;
    client c;
    start_case(&d, &c, "gpus", NULL, NULL);
    json_t *r = cl_call(&c, "{\"op\":\"stats\"}");
    const json_t *gpus = json_object_get(r, "gpus");
    size_t n = json_array_size(gpus);
    *arch = (int)integer(json_array_get(gpus, 0), "arch");
    if (n == 0)
        printf("no GPU (%s)\n", str(r, "no_gpu"));
    else
        printf("GPUs: %zu, GPU 0: %s (sm_%d)\n", n, str(json_array_get(gpus, 0), "name"), *arch);
    json_decref(r);
    end_case(&d, &c);
    return n;
}

double case_start(void)
{
    case_failures = failures;
    return now_s();
}

void case_report(const char *name, double start)
{
    printf("%s: %s (%.1f s)\n", failures == case_failures ? "ok" : "FAIL", name, now_s() - start);
    fflush(stdout);
}
