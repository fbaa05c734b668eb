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
 * before the fork. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "api.h"

#define TAIL_BYTES 4096
#define REPLY_MAX ((size_t)1 << 20)

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

void tuned__api_default_store(char *out, size_t n)
{
    const char *env = getenv("TUNED_DB");
    const char *xdg = getenv("XDG_DATA_HOME");
    const char *home = getenv("HOME");
    if (env != NULL && *env != '\0')
        snprintf(out, n, "%s", env);
    else if (xdg != NULL && *xdg == '/')
        snprintf(out, n, "%s/tuned", xdg);
    else if (home != NULL && *home == '/')
        snprintf(out, n, "%s/.local/share/tuned", home);
    else
        snprintf(out, n, "/var/lib/tuned");
}

void tuned__api_default_socket(char *out, size_t n)
{
    const char *env = getenv("TUNED_SOCKET");
    const char *xdg = getenv("XDG_RUNTIME_DIR");
    if (env != NULL && *env != '\0')
        snprintf(out, n, "%s", env);
    else if (xdg != NULL && *xdg == '/')
        snprintf(out, n, "%s/tuned/tuned.sock", xdg);
    else
        snprintf(out, n, "/run/tuned/tuned.sock");
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

int tuned__api_run_child(const tuned__api_child *c, tuned__err *e)
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
    char shape[64], device[16], time_s[32];
    snprintf(shape, sizeof shape, "%llux%llu", (unsigned long long)c->shape.rows,
             (unsigned long long)c->shape.cols);
    snprintf(device, sizeof device, "%d", c->device);
    snprintf(time_s, sizeof time_s, "%g", c->time_s);
    char *argv[16];
    int argc = 0;
    argv[argc++] = exe;
    argv[argc++] = (char *)"tune";
    argv[argc++] = (char *)"--shape";
    argv[argc++] = shape;
    argv[argc++] = (char *)"--dtype";
    argv[argc++] = (char *)dtype;
    argv[argc++] = (char *)"--device";
    argv[argc++] = device;
    argv[argc++] = (char *)"--db";
    argv[argc++] = (char *)c->store;
    argv[argc++] = (char *)"-q";
    if (c->time_s > 0) {
        argv[argc++] = (char *)"--time";
        argv[argc++] = time_s;
    }
    argv[argc] = NULL;
    char what[160];
    snprintf(what, sizeof what, "tune of %s %s on GPU %d", shape, dtype, c->device);

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
    double deadline = c->timeout_s > 0 ? now_s() + c->timeout_s : 0;
    int killed = 0; /* 1: timeout, 2: cancelled */
    for (;;) {
        if (c->cancel != NULL && atomic_load(c->cancel) != 0) {
            killed = 2;
            break;
        }
        if (deadline > 0 && now_s() > deadline) {
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
        /* buf is smaller than tail: keep the newest bytes. */
        if (tail_len + (size_t)got >= sizeof tail) {
            size_t drop = tail_len + (size_t)got - (sizeof tail - 1);
            memmove(tail, tail + drop, tail_len - drop);
            tail_len -= drop;
        }
        memcpy(tail + tail_len, buf, (size_t)got);
        tail_len += (size_t)got;
    }
    if (killed)
        kill(pid, SIGKILL);
    close(err_pipe[0]);
    int status = 0;
    pid_t w;
    do
        w = waitpid(pid, &status, 0);
    while (w < 0 && errno == EINTR);
    char line[512];
    last_line(tail, tail_len, line, sizeof line);
    if (killed == 2)
        return tuned__errf(e, TUNED_EIO, "%s: cancelled (the handle was closed)", what);
    if (killed == 1)
        return tuned__errf(e, TUNED_ETIMEOUT, "%s: still running after %.0f s, killed%s%s", what,
                           c->timeout_s, line[0] ? "; last said: " : "", line);
    if (w < 0)
        /* SIGCHLD ignored by the application: the status is gone. The
         * store tells whether it worked. */
        return 0;
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
        return 0;
    if (WIFEXITED(status) && WEXITSTATUS(status) == 127 && strstr(line, "exec failed") != NULL)
        return tuned__errf(e, TUNED_EIO, "%s: cannot execute %s", what, exe);
    if (WIFEXITED(status))
        return tuned__errf(e, TUNED_ETUNE, "%s (%s) failed, exit status %d%s%s", what, exe,
                           WEXITSTATUS(status), line[0] ? ": " : "", line);
    return tuned__errf(e, TUNED_ETUNE, "%s (%s) died of signal %d%s%s", what, exe,
                       WIFSIGNALED(status) ? WTERMSIG(status) : 0, line[0] ? "; last said: " : "",
                       line);
}

/* ---- the daemon ---- */

static int wait_fd(int fd, short events, double deadline, const char *socket, tuned__err *e)
{
    for (;;) {
        double left = deadline - now_s();
        if (left <= 0)
            return tuned__errf(e, TUNED_ETIMEOUT, "daemon %s: no answer in time", socket);
        struct pollfd p = {.fd = fd, .events = events};
        int ready = poll(&p, 1, (int)(left * 1000) + 1);
        if (ready > 0)
            return 0;
        if (ready < 0 && errno != EINTR)
            return tuned__errf(e, TUNED_EIO, "daemon %s: poll: %s", socket, strerror(errno));
    }
}

int tuned__api_daemon_call(const char *socket_path, const char *line, double timeout_s,
                           char **reply, tuned__err *e)
{
    *reply = NULL;
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    if (socket_path == NULL || strlen(socket_path) >= sizeof addr.sun_path ||
        socket_path[0] == '\0')
        return tuned__errf(e, TUNED_EINVAL, "daemon: bad socket path '%s'",
                           socket_path ? socket_path : "(null)");
    memcpy(addr.sun_path, socket_path, strlen(socket_path) + 1);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0)
        return tuned__errf(e, TUNED_EIO, "daemon %s: socket: %s", socket_path, strerror(errno));
    double deadline = now_s() + timeout_s;
    int rc = 0;
    if (connect(fd, (struct sockaddr *)&addr, sizeof addr) != 0) {
        if (errno != EINPROGRESS && errno != EAGAIN) {
            rc = tuned__errf(e, TUNED_EIO, "daemon %s: cannot connect: %s (is `tuned serve` running?)",
                             socket_path, strerror(errno));
            close(fd);
            return rc;
        }
        if ((rc = wait_fd(fd, POLLOUT, deadline, socket_path, e)) != 0) {
            close(fd);
            return rc;
        }
        int soerr = 0;
        socklen_t len = sizeof soerr;
        getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &len);
        if (soerr != 0) {
            rc = tuned__errf(e, TUNED_EIO, "daemon %s: cannot connect: %s", socket_path,
                             strerror(soerr));
            close(fd);
            return rc;
        }
    }
    size_t n = strlen(line), sent = 0;
    while (sent < n) {
        ssize_t w = send(fd, line + sent, n - sent, MSG_NOSIGNAL);
        if (w > 0) {
            sent += (size_t)w;
            continue;
        }
        if (w < 0 && (errno == EAGAIN || errno == EINTR)) {
            if ((rc = wait_fd(fd, POLLOUT, deadline, socket_path, e)) != 0)
                break;
            continue;
        }
        rc = tuned__errf(e, TUNED_EIO, "daemon %s: send: %s", socket_path, strerror(errno));
        break;
    }
    char *buf = NULL;
    size_t len = 0, cap = 0;
    while (rc == 0) {
        if (len + 4096 + 1 > cap) {
            size_t ncap = cap ? cap * 2 : 8192;
            char *nb = realloc(buf, ncap);
            if (nb == NULL) {
                rc = tuned__errf(e, TUNED_ENOMEM, "daemon: out of memory for a reply");
                break;
            }
            buf = nb;
            cap = ncap;
        }
        ssize_t got = recv(fd, buf + len, cap - len - 1, 0);
        if (got > 0) {
            char *nl = memchr(buf + len, '\n', (size_t)got);
            len += (size_t)got;
            if (nl != NULL) {
                *nl = '\0';
                break;
            }
            if (len > REPLY_MAX)
                rc = tuned__errf(e, TUNED_EIO, "daemon %s: a reply over %zu bytes", socket_path,
                                 REPLY_MAX);
            continue;
        }
        if (got == 0) {
            rc = tuned__errf(e, TUNED_EIO, "daemon %s: closed the connection without answering",
                             socket_path);
            break;
        }
        if (errno == EAGAIN || errno == EINTR) {
            rc = wait_fd(fd, POLLIN, deadline, socket_path, e);
            continue;
        }
        rc = tuned__errf(e, TUNED_EIO, "daemon %s: recv: %s", socket_path, strerror(errno));
    }
    close(fd);
    if (rc != 0) {
        free(buf);
        return rc;
    }
    *reply = buf;
    return 0;
}

/* Parses a reply; an {"ok":false} one becomes our code and its message. */
static int parse_reply(const char *socket, const char *text, json_t **out, tuned__err *e)
{
    json_error_t jerr;
    json_t *v = json_loads(text, JSON_REJECT_DUPLICATES, &jerr);
    if (v == NULL || !json_is_object(v)) {
        json_decref(v);
        return tuned__errf(e, TUNED_EIO, "daemon %s: a reply that is not a JSON object: %.80s",
                           socket, text);
    }
    json_t *ok = json_object_get(v, "ok");
    if (json_is_true(ok)) {
        *out = v;
        return 0;
    }
    json_t *err = json_object_get(v, "error");
    const char *code = json_string_value(json_object_get(err, "code"));
    const char *msg = json_string_value(json_object_get(err, "message"));
    int rc = TUNED_ETUNE;
    if (code == NULL)
        rc = TUNED_EIO;
    else if (strcmp(code, "no_gpu") == 0 || strcmp(code, "unknown_gpu") == 0)
        rc = TUNED_ENODEV;
    else if (strcmp(code, "no_space") == 0)
        rc = TUNED_ENOSPACE;
    else if (strcmp(code, "bad_value") == 0 || strcmp(code, "too_big") == 0)
        rc = TUNED_EINVAL;
    else if (strcmp(code, "store_error") == 0)
        rc = TUNED_ESTORE;
    rc = tuned__errf(e, rc, "daemon %s: %s: %s", socket, code ? code : "malformed reply",
                     msg ? msg : "");
    json_decref(v);
    return rc;
}

static int request(const char *socket, const char *line, double timeout_s, json_t **out,
                   tuned__err *e)
{
    char *text = NULL;
    int rc = tuned__api_daemon_call(socket, line, timeout_s, &text, e);
    if (rc == 0)
        rc = parse_reply(socket, text, out, e);
    free(text);
    return rc;
}

int tuned__api_daemon_tune(const char *socket, const tuned__shape *shape, uint64_t gpu_fp,
                           double time_s, uint64_t *job, tuned__err *e)
{
    char line[256], extra[64] = "";
    if (time_s > 0)
        snprintf(extra, sizeof extra, ",\"time_s\":%.3f", time_s);
    snprintf(line, sizeof line,
             "{\"op\":\"tune\",\"kernel\":\"softmax\",\"dtype\":\"%s\",\"rows\":%llu,"
             "\"cols\":%llu,\"gpu\":\"%016llx\"%s}\n",
             tuned_dtype_name(shape->dtype), (unsigned long long)shape->rows,
             (unsigned long long)shape->cols, (unsigned long long)gpu_fp, extra);
    json_t *v = NULL;
    int rc = request(socket, line, 10.0, &v, e);
    if (rc != 0)
        return rc;
    json_t *id = json_object_get(v, "job");
    if (!json_is_integer(id) || json_integer_value(id) < 0) {
        json_decref(v);
        return tuned__errf(e, TUNED_EIO, "daemon %s: a tune reply without a job id", socket);
    }
    *job = (uint64_t)json_integer_value(id);
    json_decref(v);
    return 0;
}

int tuned__api_daemon_job(const char *socket, uint64_t job, char *state, size_t state_n,
                          char *why, size_t why_n, tuned__err *e)
{
    char line[96];
    snprintf(line, sizeof line, "{\"op\":\"job\",\"job\":%" PRIu64 "}\n", job);
    json_t *v = NULL;
    int rc = request(socket, line, 10.0, &v, e);
    if (rc != 0)
        return rc;
    json_t *j = json_object_get(v, "job");
    const char *st = json_string_value(json_object_get(j, "state"));
    if (st == NULL) {
        json_decref(v);
        return tuned__errf(e, TUNED_EIO, "daemon %s: a job reply without a state", socket);
    }
    snprintf(state, state_n, "%s", st);
    why[0] = '\0';
    json_t *err = json_object_get(j, "error");
    if (json_is_string(err))
        snprintf(why, why_n, "%s", json_string_value(err));
    else if (json_is_object(err))
        snprintf(why, why_n, "%s",
                 json_string_value(json_object_get(err, "message"))
                     ? json_string_value(json_object_get(err, "message"))
                     : "failed");
    json_decref(v);
    return 0;
}

int tuned__api_daemon_store(const char *socket, char *out, size_t n, tuned__err *e)
{
    json_t *v = NULL;
    int rc = request(socket, "{\"op\":\"stats\"}\n", 2.0, &v, e);
    if (rc != 0)
        return rc;
    const char *path = json_string_value(json_object_get(json_object_get(v, "store"), "path"));
    if (path == NULL || path[0] == '\0' || strlen(path) >= n)
        rc = tuned__errf(e, TUNED_EIO, "daemon %s: stats names no store path", socket);
    else
        snprintf(out, n, "%s", path);
    json_decref(v);
    return rc;
}
