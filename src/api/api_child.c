/* api_child.c: tunes outside the embedding process.
 *
 * A tune runs untrusted generated kernels for seconds on the GPU; a kernel
 * that faults kills its CUDA context, and a hang holds the GPU. So the
 * embedding API never tunes in the caller's process: either a child
 * process `tuned --shape ... --db STORE` does (the CLI's own tune, which
 * stores the winner), or the daemon does (its GPU workers are child
 * processes too), asked over its socket with the protocol of
 * docs/protocol.md. Either way the caller sees an error code and a
 * message, never a crash.
 *
 * The child is started with fork + exec (not posix_spawn) so that it can
 * ask to be killed when the thread that started it dies
 * (PR_SET_PDEATHSIG): a tune never outlives the application that asked for
 * it. Between fork and exec the child calls only async-signal-safe
 * functions; everything it needs (argv, the executable's path) is built
 * before the fork.
 *
 * One tune of a shape at a time across every process sharing a store: the
 * parent holds an advisory lock (flock) on
 * STORE/tune-locks/KIND-ROWSxCOLS-DTYPE-gpuN.lock while its child runs. A
 * second process that wants the same tune waits for the lock, then starts
 * its child, which finds the first one's winner stored and prints it
 * instead of tuning again (or resumes the first one's history if it
 * failed). A store where the lock cannot be made is tuned unlocked. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "src/api/api.h"
#include "src/common/clock.h"

#include <jansson.h>

#define TAIL_BYTES 4096

/* ---- progress ---- */

static int64_t int_field(const json_t *v, const char *key)
{
    return (int64_t)json_integer_value(json_object_get(v, key));
}

void tuned__api_progress_from_json(const json_t *v, const tuned__shape *s, tuned_progress *p,
                                   char *best, size_t n)
{
    memset(p, 0, sizeof *p);
    p->rows = (int64_t)s->rows;
    p->cols = (int64_t)s->cols;
    p->dtype = s->dtype;
    p->device = json_is_integer(json_object_get(v, "device")) ? (int)int_field(v, "device") : -1;
    const char *state = json_string_value(json_object_get(v, "state"));
    p->state = state != NULL ? state : "running";
    p->generation = json_is_integer(json_object_get(v, "generation"))
                        ? (int)int_field(v, "generation")
                        : -1;
    p->evaluated = int_field(v, "evaluated");
    p->failed = int_field(v, "failed");
    p->budget = int_field(v, "budget");
    const char *cfg = json_string_value(json_object_get(v, "best_config"));
    if (cfg != NULL && n > 0) {
        snprintf(best, n, "%s", cfg);
        p->best_config = best;
    }
    p->best_us = json_number_value(json_object_get(v, "best_us"));
    p->copy_us = json_number_value(json_object_get(v, "copy_us"));
    p->elapsed_s = json_number_value(json_object_get(v, "elapsed_s"));
}

/* Progress callbacks the calling thread is inside (0 or 1: a callback
 * cannot start a tune; a count is as cheap as a flag and needs no proof). */
static _Thread_local int in_progress;

void tuned__api_progress_call(tuned_progress_fn fn, void *ctx, const tuned_progress *p)
{
    in_progress++;
    fn(ctx, p);
    in_progress--;
}

bool tuned__api_in_progress(void)
{
    return in_progress > 0;
}

/* One line of the child's stderr: a progress object becomes a call
 * (true), anything else is for the error message (false). */
static bool progress_line(const tuned__api_child *c, const char *line)
{
    if (strncmp(line, "{\"progress\":", 12) != 0)
        return false;
    json_t *v = json_loads(line, 0, NULL);
    const json_t *pr = json_object_get(v, "progress");
    if (json_is_object(pr) && c->on_progress != NULL) {
        tuned_progress p;
        char best[128];
        tuned__api_progress_from_json(pr, &c->shape, &p, best, sizeof best);
        tuned__api_progress_call(c->on_progress, c->progress_ctx, &p);
    }
    json_decref(v);
    return true;
}

/* ---- the child process ---- */

/* name itself when it has a slash, else the first executable file called
 * name in $PATH; false when there is none. */
static bool find_executable(const char *name, char *out, size_t n)
{
    if (strchr(name, '/') != NULL) {
        snprintf(out, n, "%s", name);
        return access(name, X_OK) == 0;
    }
    const char *path = getenv("PATH");
    if (path == NULL || *path == '\0')
        path = "/usr/local/bin:/usr/bin:/bin";
    for (const char *p = path;;) {
        const char *end = strchr(p, ':');
        size_t len = end != NULL ? (size_t)(end - p) : strlen(p);
        if (len > 0 && len + strlen(name) + 2 <= n) {
            snprintf(out, n, "%.*s/%s", (int)len, p, name);
            struct stat st;
            if (stat(out, &st) == 0 && S_ISREG(st.st_mode) && access(out, X_OK) == 0)
                return true;
        }
        if (end == NULL)
            return false;
        p = end + 1;
    }
}

/* The last non-empty line of text (at most n - 1 bytes of it) into out. */
static void last_line(const char *text, size_t len, char *out, size_t n)
{
    while (len > 0 && (text[len - 1] == '\n' || text[len - 1] == '\r' || text[len - 1] == ' '))
        len--;
    size_t start = len;
    while (start > 0 && text[start - 1] != '\n' && text[start - 1] != '\r')
        start--;
    snprintf(out, n, "%.*s", (int)(len - start), text + start);
}

/* The shape's lock file, open and locked, into *fd (-1: none could be made;
 * the tune runs unlocked). Waits while another process holds it, until
 * cancelled or timeout_s. */
static int tune_lock(const tuned__api_child *c, const char *what, int *fd, tuned__err *e)
{
    *fd = -1;
    char path[PATH_MAX];
    if (snprintf(path, sizeof path, "%s/tune-locks", c->store) >= (int)sizeof path)
        return 0;
    if (mkdir(path, 0775) != 0 && errno != EEXIST)
        return 0;
    size_t used = strlen(path);
    /* the key parameters as their word: a lock file's name takes no ',' or '=' */
    char params[16] = "";
    if (c->shape.params != 0)
        snprintf(params, sizeof params, "-p%08x", (unsigned)c->shape.params);
    snprintf(path + used, sizeof path - used, "/%s-%llux%llu%s-%s-gpu%d.lock",
             tuned__kernel_name((uint8_t)tuned__shape_kernel(&c->shape)),
             (unsigned long long)c->shape.rows, (unsigned long long)c->shape.cols, params,
             tuned_dtype_name(c->shape.dtype), c->device);
    int lock = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0664);
    if (lock < 0)
        return 0;
    double deadline = c->timeout_s > 0 ? tuned__now_s() + c->timeout_s : 0;
    while (flock(lock, LOCK_EX | LOCK_NB) != 0) {
        if (errno != EWOULDBLOCK && errno != EINTR) {
            close(lock); /* no locks here (a file system without them) */
            return 0;
        }
        if (c->cancel != NULL && atomic_load(c->cancel) != 0) {
            close(lock);
            return tuned__errf(e, TUNED_EIO, "%s: cancelled (the handle was closed) while "
                               "another process tuned it", what);
        }
        if (deadline > 0 && tuned__now_s() > deadline) {
            close(lock);
            return tuned__errf(e, TUNED_ETIMEOUT, "%s: another process has tuned it for over "
                               "%.0f s (it holds %s)", what, c->timeout_s, path);
        }
        struct timespec pause = {.tv_sec = 0, .tv_nsec = 100 * 1000000L};
        nanosleep(&pause, NULL);
    }
    *fd = lock;
    return 0;
}

static int run_locked(const tuned__api_child *c, tuned__err *e);

int tuned__api_run_child(const tuned__api_child *c, tuned__err *e)
{
    const char *dtype = tuned_dtype_name(c->shape.dtype);
    if (c->binary == NULL || c->store == NULL || dtype == NULL || c->device < 0)
        return tuned__errf(e, TUNED_EINVAL, "tune: bad child arguments");
    char what[160];
    snprintf(what, sizeof what, "tune of %s %llux%llu %s on GPU %d",
             tuned__kernel_name((uint8_t)tuned__shape_kernel(&c->shape)),
             (unsigned long long)c->shape.rows, (unsigned long long)c->shape.cols, dtype,
             c->device);
    int lock = -1;
    int rc = tune_lock(c, what, &lock, e);
    if (rc != 0)
        return rc;
    rc = run_locked(c, e);
    if (lock >= 0)
        close(lock); /* releases the lock */
    return rc;
}

/* The child, once this process holds the shape's lock (or none exists). */
static int run_locked(const tuned__api_child *c, tuned__err *e)
{
    const char *dtype = tuned_dtype_name(c->shape.dtype);
    if (c->binary == NULL || c->store == NULL || dtype == NULL || c->device < 0)
        return tuned__errf(e, TUNED_EINVAL, "tune: bad child arguments");
    char exe[PATH_MAX];
    if (!find_executable(c->binary, exe, sizeof exe))
        return tuned__errf(e, TUNED_EIO,
                           "tune: cannot run the tuned executable '%s' (%s); set "
                           "tuned_options.tuned_path or $TUNED_BIN",
                           c->binary,
                           strchr(c->binary, '/') != NULL ? strerror(errno) : "not in $PATH");
    char shape[192], params[128], device[16], time_s[32];
    tuned__shape_params_text(&c->shape, params, sizeof params);
    snprintf(shape, sizeof shape, "%llux%llu%s%s", (unsigned long long)c->shape.rows,
             (unsigned long long)c->shape.cols, params[0] != '\0' ? ":" : "", params);
    snprintf(device, sizeof device, "%d", c->device);
    snprintf(time_s, sizeof time_s, "%g", c->time_s);
    char *argv[20];
    int argc = 0;
    unsigned kernel = tuned__shape_kernel(&c->shape);
    argv[argc++] = exe;
    argv[argc++] = (char *)"tune";
    if (kernel != TUNED__KIND_DEFAULT) {
        argv[argc++] = (char *)"--kernel";
        argv[argc++] = (char *)tuned__kernel_name((uint8_t)kernel);
    }
    argv[argc++] = (char *)"--shape";
    argv[argc++] = shape;
    argv[argc++] = (char *)"--dtype";
    argv[argc++] = (char *)dtype;
    argv[argc++] = (char *)"--device";
    argv[argc++] = device;
    argv[argc++] = (char *)"--db";
    argv[argc++] = (char *)c->store;
    argv[argc++] = (char *)"-q";
    if (c->on_progress != NULL) {
        argv[argc++] = (char *)"--progress";
        argv[argc++] = (char *)"json";
    }
    if (c->time_s > 0) {
        argv[argc++] = (char *)"--time";
        argv[argc++] = time_s;
    }
    argv[argc] = NULL;
    char what[160];
    snprintf(what, sizeof what, "tune of %s %s %s on GPU %d", tuned__kernel_name((uint8_t)kernel),
             shape, dtype, c->device);

    int err_pipe[2];
    if (pipe2(err_pipe, O_CLOEXEC) != 0)
        return tuned__errf(e, TUNED_EIO, "%s: pipe: %s", what, strerror(errno));
    int devnull = open("/dev/null", O_RDWR | O_CLOEXEC);
    if (devnull < 0) {
        int saved = errno;
        close(err_pipe[0]);
        close(err_pipe[1]);
        return tuned__errf(e, TUNED_EIO, "%s: /dev/null: %s", what, strerror(saved));
    }
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0) {
        int saved = errno;
        close(err_pipe[0]);
        close(err_pipe[1]);
        close(devnull);
        return tuned__errf(e, TUNED_EIO, "%s: fork: %s", what, strerror(saved));
    }
    if (pid == 0) {
        /* The child: async-signal-safe calls only, until exec. */
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent)
            _exit(127);
        if (dup2(devnull, STDIN_FILENO) < 0 || dup2(devnull, STDOUT_FILENO) < 0 ||
            dup2(err_pipe[1], STDERR_FILENO) < 0)
            _exit(127);
        execv(exe, argv);
        static const char msg[] = "tuned: exec failed\n";
        ssize_t ignored = write(STDERR_FILENO, msg, sizeof msg - 1);
        (void)ignored;
        _exit(127);
    }
    close(err_pipe[1]);
    close(devnull);

    /* Read its stderr (keeping the tail) until it closes, watching the
     * clock and the cancel flag. */
    char tail[TAIL_BYTES];
    size_t tail_len = 0;
    char line[TAIL_BYTES]; /* the line being read; a longer one is cut */
    size_t line_len = 0;
    double deadline = c->timeout_s > 0 ? tuned__now_s() + c->timeout_s : 0;
    int killed = 0; /* 1: timeout, 2: cancelled */
    for (;;) {
        if (c->cancel != NULL && atomic_load(c->cancel) != 0) {
            killed = 2;
            break;
        }
        if (deadline > 0 && tuned__now_s() > deadline) {
            killed = 1;
            break;
        }
        struct pollfd p = {.fd = err_pipe[0], .events = POLLIN};
        int ready = poll(&p, 1, 100);
        if (ready < 0 && errno != EINTR)
            break;
        if (ready <= 0)
            continue;
        char buf[1024];
        ssize_t got = read(err_pipe[0], buf, sizeof buf);
        if (got < 0 && (errno == EINTR || errno == EAGAIN))
            continue;
        if (got <= 0)
            break; /* EOF: the child exited (or closed its stderr) */
        for (ssize_t i = 0; i < got; i++) {
            if (buf[i] != '\n') {
                if (line_len < sizeof line - 2)
                    line[line_len++] = buf[i];
                continue;
            }
            line[line_len] = '\0';
            if (!progress_line(c, line)) {
                /* Keep the newest lines for the error message. */
                line[line_len++] = '\n';
                if (tail_len + line_len >= sizeof tail) {
                    size_t drop = tail_len + line_len - (sizeof tail - 1);
                    if (drop > tail_len)
                        drop = tail_len;
                    memmove(tail, tail + drop, tail_len - drop);
                    tail_len -= drop;
                }
                memcpy(tail + tail_len, line, line_len);
                tail_len += line_len;
            }
            line_len = 0;
        }
    }
    if (line_len > 0 && tail_len + line_len < sizeof tail) { /* a last line without '\n' */
        memcpy(tail + tail_len, line, line_len);
        tail_len += line_len;
    }
    if (killed)
        kill(pid, SIGKILL);
    close(err_pipe[0]);
    int status = 0;
    pid_t w;
    do
        w = waitpid(pid, &status, 0);
    while (w < 0 && errno == EINTR);
    char last[512];
    last_line(tail, tail_len, last, sizeof last);
    if (killed == 2)
        return tuned__errf(e, TUNED_EIO, "%s: cancelled (the handle was closed)", what);
    if (killed == 1)
        return tuned__errf(e, TUNED_ETIMEOUT, "%s: still running after %.0f s, killed%s%s", what,
                           c->timeout_s, last[0] ? "; last said: " : "", last);
    if (w < 0)
        /* SIGCHLD ignored by the application: the status is gone. The
         * store tells whether it worked. */
        return 0;
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
        return 0;
    if (WIFEXITED(status) && WEXITSTATUS(status) == 127 && strstr(last, "exec failed") != NULL)
        return tuned__errf(e, TUNED_EIO, "%s: cannot execute %s", what, exe);
    if (WIFEXITED(status))
        return tuned__errf(e, TUNED_ETUNE, "%s (%s) failed, exit status %d%s%s", what, exe,
                           WEXITSTATUS(status), last[0] ? ": " : "", last);
    return tuned__errf(e, TUNED_ETUNE, "%s (%s) died of signal %d%s%s", what, exe,
                       WIFSIGNALED(status) ? WTERMSIG(status) : 0, last[0] ? "; last said: " : "",
                       last);
}
