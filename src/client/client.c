/* client.c: one connection to the daemon (client.h): connect with a
 * deadline, send a request line, read reply lines (framing, the size cap,
 * the deadline), and the daemon's error codes mapped to ours.
 *
 * The socket is non-blocking and every wait is a poll() bounded by the
 * call's deadline, so a daemon that stops answering costs a caller at most
 * its timeout, never a hang. */
#include "src/client/client.h"

#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "src/common/clock.h"
#include "tuned.h"

static int wait_fd(const tuned__client *c, short events, double deadline, tuned__err *e)
{
    for (;;) {
        double left = deadline - tuned__now_s();
        if (left <= 0)
            return tuned__errf(e, TUNED_ETIMEOUT, "daemon %s: no answer in time", c->path);
        struct pollfd p = {.fd = c->fd, .events = events};
        int ready = poll(&p, 1, (int)(left * 1000) + 1);
        if (ready > 0)
            return 0;
        if (ready < 0 && errno != EINTR)
            return tuned__errf(e, TUNED_EIO, "daemon %s: poll: %s", c->path, strerror(errno));
    }
}

/* One connect() on a fresh non-blocking socket in c->fd: 0 when it is
 * connected, 1 when the daemon's listen backlog is full (EAGAIN on a Unix
 * socket: no connection is pending, so there is nothing to wait for but a
 * retry), or an error. */
static int connect_once(tuned__client *c, const struct sockaddr_un *addr, double deadline,
                        tuned__err *e)
{
    c->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (c->fd < 0)
        return tuned__errf(e, TUNED_EIO, "daemon %s: socket: %s", c->path, strerror(errno));
    if (connect(c->fd, (const struct sockaddr *)addr, sizeof *addr) == 0)
        return 0;
    int err = errno;
    if (err == EAGAIN)
        return 1;
    if (err == ENOENT || err == ECONNREFUSED)
        return tuned__errf(e, TUNED_ENOTFOUND,
                           "daemon %s: cannot connect: %s (is `tuned serve` running?)", c->path,
                           strerror(err));
    if (err != EINPROGRESS)
        return tuned__errf(e, TUNED_EIO, "daemon %s: cannot connect: %s", c->path, strerror(err));
    int rc = wait_fd(c, POLLOUT, deadline, e);
    if (rc != 0)
        return rc;
    int soerr = 0;
    socklen_t len = sizeof soerr;
    if (getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &soerr, &len) != 0)
        soerr = errno;
    if (soerr != 0)
        return tuned__errf(e, soerr == ECONNREFUSED ? TUNED_ENOTFOUND : TUNED_EIO,
                           "daemon %s: cannot connect: %s", c->path, strerror(soerr));
    return 0;
}

int tuned__client_connect(tuned__client *c, const char *socket_path, double timeout_s,
                          tuned__err *e)
{
    memset(c, 0, sizeof *c);
    c->fd = -1;
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    if (socket_path == NULL || socket_path[0] == '\0' ||
        strlen(socket_path) >= sizeof addr.sun_path || strlen(socket_path) >= sizeof c->path)
        return tuned__errf(e, TUNED_EINVAL, "daemon: bad socket path '%s'",
                           socket_path ? socket_path : "(null)");
    memcpy(addr.sun_path, socket_path, strlen(socket_path) + 1);
    snprintf(c->path, sizeof c->path, "%s", socket_path);
    double deadline = tuned__now_s() + timeout_s;
    /* A full backlog (a connect storm) drains as the daemon accepts: retry
     * after 1 ms, doubling to 64 ms, until the deadline. */
    double pause_s = 0.001;
    for (;;) {
        int rc = connect_once(c, &addr, deadline, e);
        if (rc <= 0) {
            if (rc != 0)
                tuned__client_close(c);
            return rc;
        }
        close(c->fd);
        c->fd = -1;
        double left = deadline - tuned__now_s();
        if (left <= 0)
            return tuned__errf(e, TUNED_ETIMEOUT, "daemon %s: busy: its queue of new "
                               "connections stayed full for %.3g s", c->path, timeout_s);
        double nap = pause_s < left ? pause_s : left;
        struct timespec ts = {.tv_sec = (time_t)nap,
                              .tv_nsec = (long)((nap - (double)(time_t)nap) * 1e9)};
        while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
        }
        if (pause_s < 0.064)
            pause_s *= 2;
    }
}

void tuned__client_close(tuned__client *c)
{
    if (c->fd >= 0)
        close(c->fd);
    free(c->buf);
    c->fd = -1;
    c->buf = NULL;
    c->len = c->cap = 0;
}

static int send_all(tuned__client *c, const char *text, size_t n, double deadline, tuned__err *e)
{
    size_t sent = 0;
    while (sent < n) {
        ssize_t w = send(c->fd, text + sent, n - sent, MSG_NOSIGNAL);
        if (w > 0) {
            sent += (size_t)w;
            continue;
        }
        if (w < 0 && (errno == EAGAIN || errno == EINTR)) {
            int rc = wait_fd(c, POLLOUT, deadline, e);
            if (rc != 0)
                return rc;
            continue;
        }
        return tuned__errf(e, TUNED_EIO, "daemon %s: send: %s", c->path, strerror(errno));
    }
    return 0;
}

/* The next reply line (without its newline) as a JSON object. */
static int read_reply(tuned__client *c, double deadline, json_t **reply, tuned__err *e)
{
    for (;;) {
        char *nl = c->len > 0 ? memchr(c->buf, '\n', c->len) : NULL;
        if (nl != NULL) {
            size_t line = (size_t)(nl - c->buf);
            json_error_t jerr;
            json_t *v = json_loadb(c->buf, line, JSON_REJECT_DUPLICATES, &jerr);
            int rc = 0;
            if (!json_is_object(v)) {
                rc = tuned__errf(e, TUNED_EIO, "daemon %s: a reply that is not a JSON object: %.80s",
                                 c->path, c->buf);
                json_decref(v);
                v = NULL;
            }
            memmove(c->buf, nl + 1, c->len - line - 1);
            c->len -= line + 1;
            *reply = v;
            return rc;
        }
        if (c->len + 1 >= c->cap) {
            size_t cap = c->cap ? c->cap * 2 : 8192;
            char *p = cap <= TUNED__CLIENT_REPLY_MAX + 8192 ? realloc(c->buf, cap) : NULL;
            if (p == NULL)
                return tuned__errf(e, TUNED_EIO, "daemon %s: a reply over %zu bytes", c->path,
                                   TUNED__CLIENT_REPLY_MAX);
            c->buf = p;
            c->cap = cap;
        }
        ssize_t got = recv(c->fd, c->buf + c->len, c->cap - c->len - 1, 0);
        if (got > 0) {
            c->len += (size_t)got;
            continue;
        }
        if (got == 0)
            return tuned__errf(e, TUNED_EIO, "daemon %s: closed the connection without answering",
                               c->path);
        if (errno != EAGAIN && errno != EINTR)
            return tuned__errf(e, TUNED_EIO, "daemon %s: recv: %s", c->path, strerror(errno));
        int rc = wait_fd(c, POLLIN, deadline, e);
        if (rc != 0)
            return rc;
    }
}

int tuned__client_call(tuned__client *c, const json_t *req, double timeout_s, json_t **reply,
                       tuned__err *e)
{
    *reply = NULL;
    if (c->fd < 0)
        return tuned__errf(e, TUNED_EINVAL, "daemon: not connected");
    char *text = json_dumps(req, JSON_COMPACT);
    if (text == NULL)
        return tuned__errf(e, TUNED_ENOMEM, "daemon %s: out of memory for a request", c->path);
    double deadline = tuned__now_s() + timeout_s;
    size_t n = strlen(text);
    int rc = send_all(c, text, n, deadline, e);
    if (rc == 0)
        rc = send_all(c, "\n", 1, deadline, e);
    free(text);
    if (rc == 0)
        rc = read_reply(c, deadline, reply, e);
    return rc;
}

int tuned__client_reply_error(const tuned__client *c, const json_t *reply, tuned__err *e)
{
    const json_t *err = json_object_get(reply, "error");
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
    return tuned__errf(e, rc, "daemon %s: %s: %s", c->path, code ? code : "malformed reply",
                       msg ? msg : "");
}

int tuned__client_request(const char *socket_path, const json_t *req, double timeout_s,
                          json_t **reply, tuned__err *e)
{
    *reply = NULL;
    tuned__client c;
    int rc = tuned__client_connect(&c, socket_path, timeout_s, e);
    if (rc != 0)
        return rc;
    json_t *v = NULL;
    rc = tuned__client_call(&c, req, timeout_s, &v, e);
    if (rc == 0 && !json_is_true(json_object_get(v, "ok"))) {
        rc = tuned__client_reply_error(&c, v, e);
        json_decref(v);
        v = NULL;
    }
    tuned__client_close(&c);
    *reply = v;
    return rc;
}

/* tuned__client_request for a request just built (NULL: out of memory),
 * which it takes. */
static int request_built(const char *socket_path, json_t *req, double timeout_s, json_t **reply,
                         tuned__err *e)
{
    *reply = NULL;
    if (req == NULL)
        return tuned__errf(e, TUNED_ENOMEM, "daemon %s: out of memory for a request", socket_path);
    int rc = tuned__client_request(socket_path, req, timeout_s, reply, e);
    json_decref(req);
    return rc;
}

int tuned__client_add_params(json_t *req, const tuned__shape *s)
{
    char params[128];
    tuned__shape_params_text(s, params, sizeof params);
    if (params[0] == '\0')
        return 0;
    return json_object_set_new(req, "params", json_string(params)) == 0 ? 0 : -1;
}

int tuned__client_tune(const char *socket_path, const tuned__shape *shape, uint64_t gpu_fp,
                       double time_s, uint64_t *job, tuned__err *e)
{
    char fp[17];
    snprintf(fp, sizeof fp, "%016" PRIx64, gpu_fp);
    json_t *req = json_pack("{s:s, s:s, s:s, s:I, s:I, s:s}", "op", "tune", "kernel",
                            tuned__kernel_name((uint8_t)tuned__shape_kernel(shape)), "dtype", tuned_dtype_name(shape->dtype), "rows",
                            (json_int_t)shape->rows, "cols", (json_int_t)shape->cols, "gpu", fp);
    if (req != NULL && time_s > 0)
        json_object_set_new(req, "time_s", json_real(time_s));
    if (req != NULL)
        tuned__client_add_params(req, shape);
    json_t *v = NULL;
    int rc = request_built(socket_path, req, 10.0, &v, e);
    if (rc != 0)
        return rc;
    json_t *id = json_object_get(v, "job");
    if (!json_is_integer(id) || json_integer_value(id) < 0)
        rc = tuned__errf(e, TUNED_EIO, "daemon %s: a tune reply without a job id", socket_path);
    else
        *job = (uint64_t)json_integer_value(id);
    json_decref(v);
    return rc;
}

int tuned__client_job(const char *socket_path, uint64_t job, char *state, size_t state_n,
                      char *why, size_t why_n, tuned__err *e)
{
    json_t *v = NULL;
    int rc = request_built(socket_path, json_pack("{s:s, s:I}", "op", "job", "job", (json_int_t)job),
                           10.0, &v, e);
    if (rc != 0)
        return rc;
    const json_t *j = json_object_get(v, "job");
    const char *st = json_string_value(json_object_get(j, "state"));
    if (st == NULL) {
        json_decref(v);
        return tuned__errf(e, TUNED_EIO, "daemon %s: a job reply without a state", socket_path);
    }
    snprintf(state, state_n, "%s", st);
    why[0] = '\0';
    const json_t *err = json_object_get(j, "error");
    const char *msg = json_is_string(err) ? json_string_value(err)
                                          : json_string_value(json_object_get(err, "message"));
    if (msg != NULL)
        snprintf(why, why_n, "%s", msg);
    else if (err != NULL && !json_is_null(err))
        snprintf(why, why_n, "failed");
    json_decref(v);
    return 0;
}

int tuned__client_store_path(const char *socket_path, char *out, size_t n, tuned__err *e)
{
    json_t *v = NULL;
    int rc = request_built(socket_path, json_pack("{s:s}", "op", "stats"), 2.0, &v, e);
    if (rc != 0)
        return rc;
    const char *path = json_string_value(json_object_get(json_object_get(v, "store"), "path"));
    if (path == NULL || path[0] == '\0' || strlen(path) >= n)
        rc = tuned__errf(e, TUNED_EIO, "daemon %s: stats names no store path", socket_path);
    else
        snprintf(out, n, "%s", path);
    json_decref(v);
    return rc;
}
