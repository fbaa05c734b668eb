/* server.c: the event loop: listeners, connections, backpressure, signals
 * and the orderly stop (daemon.h).
 *
 * One libuv loop on one thread does all the serving. Each connection has
 * one read buffer (start/end indices; libuv reads into its free tail) that
 * grows up to the line limit; complete lines are answered in order and the
 * replies collected in an output buffer that is written with one
 * uv_try_write per read, the rest (if the socket is full) through uv_write.
 * A client whose queued replies pass max_output is no longer read (its
 * unanswered lines wait in its buffer) until they drain to half; one whose
 * replies do not drain for client_timeout_s, or pass 4 x max_output, is
 * cut off; so is, while the replies queued for all clients together pass
 * max_output_total, the client with the most. At most ACCEPTS_PER_TURN
 * connections are accepted per loop turn, so clients already connected
 * are read even while a storm of new ones fills the backlog. A client with nothing in
 * flight (no reply queued, no complete line unanswered) for
 * idle_timeout_s is closed, with an idle_timeout error line; bytes of a
 * line not yet ended do not count as activity. A line over
 * max_line gets a line_too_long error and the connection is closed after
 * it; so does a connection over max_clients (TCP clients over
 * max_clients - unix_reserve: the rest is kept for local clients). A slot
 * is free again the moment its connection is closed. At start the file
 * limit is raised to its hard limit and max_clients fitted under it,
 * keeping descriptors for the store, the workers and logs, so that a
 * client past it gets too_many_clients and a worker can always restart.
 *
 * Stop (SIGTERM or SIGINT): the listeners close at once, the jobs are told
 * to stop (running ones checkpoint); connections are still read for
 * STOP_DRAIN_MS, every request line that arrives gets a shutting_down
 * error, and each is closed at its EOF or at the drain's end (a partial
 * request line then gets its shutting_down too). A 100 ms timer then watches for the jobs to finish
 * and closes the remaining handles with uv_walk. SIGHUP re-reads the
 * store (off the loop) and never stops the daemon; the log is stderr, so
 * there is no file to reopen. The socket file is removed; a stale one
 * left by a crash is replaced at start (a live daemon on it is an
 * error). */
#include "src/daemon/daemon.h"
#include "src/client/client.h"

#include <errno.h>
#include <grp.h>
#include <signal.h>
#include <stddef.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <uv.h>

#include "src/daemon/remote.h"
#include "src/daemon/sockets.h"
#include "src/daemon/state.h"
#include "tuned.h"
#include "src/common/log.h"

#define TICK_MS 100
#define container_of(ptr, type, member) ((type *)((char *)(ptr) - offsetof(type, member)))
#define READ_BUF_MIN 4096
#define BACKLOG 511
#define STOP_DRAIN_MS 1000
/* Connections accepted per loop turn: past it the rest wait for the next
 * turn, so that a connect storm cannot keep the loop accepting while the
 * clients it already has are never read. */
#define ACCEPTS_PER_TURN 32
/* File descriptors kept from clients: stdio, the store, the loop's own,
 * listeners, the fleet's connections, and per GPU its worker's pipes (two
 * kept, four while one starts). */
#define FD_RESERVE 32
#define FD_PER_GPU 4

typedef struct server server;

typedef struct conn {
    union {
        uv_handle_t handle;
        uv_stream_t stream;
        uv_pipe_t pipe;
        uv_tcp_t tcp;
    } h;
    server *srv;
    struct conn *prev, *next;
    char *in;
    size_t in_start, in_end, in_cap;
    tuned__buf out;          /* replies not yet handed to libuv */
    tuned__later later;      /* a reply that waits for the fleet tier */
    size_t queued;           /* bytes in uv_write requests in flight */
    uint64_t stalled_since;  /* uv_now() when queued output last made no progress; 0 */
    uint64_t active_ms;      /* uv_now() at its last request, reply progress or work in flight */
    bool tcp;
    bool reading;
    bool paused;             /* backpressure: not reading, lines left unanswered */
    bool eof;
    bool close_after_flush;
    bool closing;
    bool counted;            /* counted in clients_now */
} conn;

static void on_later(tuned__later *l, const char *reply, size_t len);

typedef struct wreq {
    uv_write_t req;
    conn *c;
    size_t len;
    char data[];
} wreq;

struct server {
    tuned__daemon d;
    const tuned__serve_opts *o;
    uv_loop_t loop;
    bool loop_ready;
    uv_pipe_t unix_listener;
    bool unix_open;
    uv_tcp_t tcp_listener;
    bool tcp_open;
    uv_signal_t sigterm, sigint, sighup;
    bool signals_open;
    uv_timer_t tick;
    bool tick_open;
    uv_prepare_t turn;       /* each loop turn: a fresh accept budget */
    unsigned accepts_left;   /* accepts this turn still allowed */
    bool unix_deferred, tcp_deferred; /* a connection waits in libuv for uv_accept */
    conn *conns;
    unsigned max_clients;    /* o->max_clients, less what the file limit cannot hold */
    size_t tcp_now;          /* counted TCP connections */
    size_t queued_total;     /* bytes in uv_write requests of every open connection */
    uint64_t stop_ms;
    bool stopping;
    bool socket_made;
    struct stat socket_st;
    char exe[4096];
};

/* A log line of the server, unless it is quiet. */
#define logf_(s, ...) tuned__logf((s)->o->quiet, "tuned serve", __VA_ARGS__)

void tuned__serve_opts_default(tuned__serve_opts *o)
{
    memset(o, 0, sizeof *o);
    tuned__listen_socket(o->socket_path, sizeof o->socket_path);
    o->max_clients = 1024;
    o->unix_reserve = 32;
    o->idle_timeout_s = 60;
    o->max_output_total = (size_t)256 << 20;
    o->max_line = 65536;
    o->max_output = 1 << 20;
    o->max_jobs = 64;
    o->variant_timeout_s = 60;
    o->client_timeout_s = 30;
    o->shutdown_grace_s = 10;
    o->worker_nice = 10;
    o->remote_timeout_s = 1;
    o->lease_s = 30;
    o->reclaim_s = 300;
}

static uint64_t loop_now(void *ctx)
{
    return uv_now(ctx);
}

/* ---- connections ---- */

static void on_conn_closed(uv_handle_t *h)
{
    conn *c = h->data;
    server *s = c->srv;
    if (c->prev != NULL)
        c->prev->next = c->next;
    else if (s->conns == c)
        s->conns = c->next;
    if (c->next != NULL)
        c->next->prev = c->prev;
    free(c->in);
    tuned__buf_free(&c->out);
    free(c);
}

static void conn_close(conn *c)
{
    if (c->closing)
        return;
    c->closing = true;
    server *s = c->srv;
    /* The slot and the output it held are free at once, not at the close
     * callback: a storm of short connections must not lock others out. */
    if (c->counted) {
        s->d.st.clients_now--;
        s->tcp_now -= c->tcp;
        c->counted = false;
    }
    s->queued_total -= c->queued;
    if (c->later.pending)
        tuned__remote_cancel(&s->d, &c->later);
    uv_close(&c->h.handle, on_conn_closed);
}

static void process(conn *c);
static void on_read(uv_stream_t *st, ssize_t nread, const uv_buf_t *buf);

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    (void)suggested;
    conn *c = h->data;
    size_t limit = c->srv->o->max_line + 1;
    if (c->in_end == c->in_cap && c->in_start > 0) {
        memmove(c->in, c->in + c->in_start, c->in_end - c->in_start);
        c->in_end -= c->in_start;
        c->in_start = 0;
    }
    if (c->in_end == c->in_cap && c->in_cap < limit) {
        size_t cap = c->in_cap ? c->in_cap * 2 : READ_BUF_MIN;
        if (cap > limit)
            cap = limit;
        char *p = realloc(c->in, cap);
        if (p != NULL) {
            c->in = p;
            c->in_cap = cap;
        }
    }
    /* Full with no newline: len 0 makes libuv report UV_ENOBUFS. */
    *buf = uv_buf_init(c->in + c->in_end, (unsigned)(c->in_cap - c->in_end));
}

static void start_reading(conn *c)
{
    if (c->reading || c->closing || c->eof || c->close_after_flush)
        return;
    int rc = uv_read_start(&c->h.stream, on_alloc, on_read);
    if (rc != 0) {
        logf_(c->srv, "uv_read_start: %s", uv_strerror(rc));
        conn_close(c);
        return;
    }
    c->reading = true;
}

static void stop_reading(conn *c)
{
    if (!c->reading)
        return;
    int rc = uv_read_stop(&c->h.stream);
    if (rc != 0)
        logf_(c->srv, "uv_read_stop: %s", uv_strerror(rc));
    c->reading = false;
}

static bool drained(const conn *c)
{
    return c->queued == 0 && c->out.len == 0;
}

static void on_write(uv_write_t *req, int status)
{
    wreq *w = container_of(req, wreq, req);
    conn *c = w->c;
    c->queued -= w->len;
    if (!c->closing)
        c->srv->queued_total -= w->len; /* a closing one's left the total already */
    free(w);
    if (c->closing)
        return;
    if (status < 0) {
        conn_close(c);
        return;
    }
    c->stalled_since = c->queued > 0 ? uv_now(&c->srv->loop) : 0;
    c->active_ms = uv_now(&c->srv->loop);
    if (c->paused && c->queued + c->out.len <= c->srv->o->max_output / 2) {
        c->paused = false;
        process(c);
    }
    if (!c->closing && (c->close_after_flush || (c->eof && !c->paused)) && drained(c))
        conn_close(c);
}

/* Hands the collected replies to the socket. */
static void flush(conn *c)
{
    if (c->closing || c->out.len == 0)
        return;
    if (c->out.oom) {
        conn_close(c);
        return;
    }
    size_t off = 0;
    if (c->queued == 0) {
        uv_buf_t b = uv_buf_init(c->out.data, (unsigned)c->out.len);
        int n = uv_try_write(&c->h.stream, &b, 1);
        if (n >= 0) {
            off = (size_t)n;
        } else if (n != UV_EAGAIN) {
            conn_close(c); /* the peer is gone */
            return;
        }
    }
    if (off < c->out.len) {
        size_t rest = c->out.len - off;
        wreq *w = malloc(sizeof *w + rest);
        if (w == NULL) {
            conn_close(c);
            return;
        }
        w->c = c;
        w->len = rest;
        memcpy(w->data, c->out.data + off, rest);
        uv_buf_t b = uv_buf_init(w->data, (unsigned)rest);
        int rc = uv_write(&w->req, &c->h.stream, &b, 1, on_write);
        if (rc != 0) {
            free(w);
            conn_close(c);
            return;
        }
        if (c->queued == 0)
            c->stalled_since = uv_now(&c->srv->loop);
        c->queued += rest;
        c->srv->queued_total += rest;
    }
    c->out.len = 0;
    if (c->out.cap > ((size_t)1 << 20)) /* do not keep a big list reply's buffer */
        tuned__buf_free(&c->out);
    if (c->close_after_flush && drained(c))
        conn_close(c);
}

/* A protocol error that ends the connection: the reply, then close. */
static void fatal_reply(conn *c, int code, const char *msg)
{
    tuned__reply_error(&c->out, "", code, msg);
    c->close_after_flush = true;
    stop_reading(c);
    flush(c);
}

static void line_too_long(conn *c)
{
    c->srv->d.st.lines_too_long++;
    char msg[128];
    snprintf(msg, sizeof msg, "a request line is longer than %zu bytes", c->srv->o->max_line);
    fatal_reply(c, TUNED__PE_LINE_TOO_LONG, msg);
}

static void answer(conn *c, const char *line, size_t len)
{
    while (len > 0 && line[len - 1] == '\r')
        len--;
    if (len == 0)
        return; /* blank lines are ignored */
    server *s = c->srv;
    c->active_ms = uv_now(&s->loop);
    if (s->stopping) {
        /* Read, not run: the request's id is echoed when it can be read. */
        tuned__request r;
        tuned__proto_error pe;
        tuned__proto_parse(line, len, &r, &pe);
        s->d.st.requests++;
        s->d.st.errors++;
        tuned__reply_error(&c->out, r.id, TUNED__PE_SHUTTING_DOWN, "the daemon is stopping");
        return;
    }
    tuned__daemon_answer(&s->d, line, len, &c->out, &c->later);
}

/* Cuts off the clients with the most queued output until all of them
 * together are within max_output_total. */
static void enforce_output_total(server *s)
{
    while (s->queued_total > s->o->max_output_total) {
        conn *worst = NULL;
        for (conn *c = s->conns; c != NULL; c = c->next)
            if (!c->closing && (worst == NULL || c->queued > worst->queued))
                worst = c;
        if (worst == NULL || worst->queued == 0)
            return;
        s->d.st.clients_cut_off++;
        s->d.st.output_cut_off++;
        logf_(s, "client cut off: %zu of the %zu reply bytes queued for all clients (limit "
              "output-total %zu)", worst->queued, s->queued_total, s->o->max_output_total);
        conn_close(worst);
    }
}

/* Answers the complete lines in the buffer, until backpressure. */
static void process(conn *c)
{
    server *s = c->srv;
    while (!c->paused && !c->closing && !c->close_after_flush && !c->later.pending) {
        char *start = c->in + c->in_start;
        size_t avail = c->in_end - c->in_start;
        char *nl = avail > 0 ? memchr(start, '\n', avail) : NULL;
        if (nl == NULL) {
            if (avail > s->o->max_line) {
                line_too_long(c);
                return;
            }
            if (c->eof && avail > 0) { /* a last line without its newline */
                answer(c, start, avail);
                c->in_start = c->in_end;
            }
            break;
        }
        size_t len = (size_t)(nl - start);
        if (len > s->o->max_line) {
            line_too_long(c);
            return;
        }
        answer(c, start, len);
        c->in_start += len + 1;
        size_t pending = c->out.len + c->queued;
        if (pending > 4 * s->o->max_output) {
            s->d.st.clients_cut_off++;
            logf_(s, "client cut off: %zu reply bytes pending", pending);
            conn_close(c);
            return;
        }
        if (pending > s->o->max_output) {
            c->paused = true;
            flush(c);
            if (c->closing)
                return;
            /* flush may have drained it all */
            if (c->queued + c->out.len > s->o->max_output / 2) {
                stop_reading(c);
                return;
            }
            c->paused = false;
        }
    }
    if (c->in_start == c->in_end)
        c->in_start = c->in_end = 0;
    flush(c);
    enforce_output_total(s);
    if (c->later.pending) {
        /* Lines wait until the reply came; so does reading (the buffer
         * must not fill up and read as a line too long). */
        stop_reading(c);
        return;
    }
    if (!c->closing && !c->paused && c->eof && drained(c))
        conn_close(c);
    else if (!c->closing && !c->paused)
        start_reading(c);
}

/* The reply that waited for the fleet: in its place, then the next lines. */
static void on_later(tuned__later *l, const char *reply, size_t len)
{
    conn *c = container_of(l, conn, later);
    if (c->closing)
        return;
    tuned__buf_add(&c->out, reply, len);
    c->active_ms = uv_now(&c->srv->loop);
    process(c);
}

static void on_read(uv_stream_t *st, ssize_t nread, const uv_buf_t *buf)
{
    (void)buf;
    conn *c = st->data;
    if (nread > 0) {
        /* No refresh of active_ms here: bytes of a line that never ends
         * are idleness (a slow-loris), a request that starts is not. */
        c->in_end += (size_t)nread;
        process(c);
    } else if (nread == UV_ENOBUFS) {
        line_too_long(c);
    } else if (nread == UV_EOF) {
        /* Answer what is left (a last line may lack its newline), write
         * it, then close: process() and on_write() close once drained. */
        c->eof = true;
        stop_reading(c);
        process(c);
    } else if (nread < 0) {
        conn_close(c);
    }
    /* nread == 0: nothing read (EAGAIN); not EOF. */
}

/* At the limit: connections whose peer has closed (their EOF not read
 * yet: a connect/close storm is accepted faster than its EOFs are read)
 * are closed now, so that their slots go to the one waiting. */
static void reap_closed(server *s)
{
    for (conn *c = s->conns, *next; c != NULL; c = next) {
        next = c->next;
        uv_os_fd_t fd;
        char byte;
        if (c->closing || !c->counted || c->in_end != c->in_start || !drained(c) ||
            uv_fileno(&c->h.handle, &fd) != 0)
            continue;
        ssize_t n = recv(fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK))
            conn_close(c);
    }
}

/* Slots kept for Unix-socket clients (at least one slot stays for TCP). */
static unsigned unix_reserve(const server *s)
{
    return s->o->unix_reserve < s->max_clients ? s->o->unix_reserve : s->max_clients - 1;
}

static void accept_one(server *s, uv_stream_t *listener)
{
    conn *c = calloc(1, sizeof *c);
    if (c == NULL) {
        logf_(s, "accept: out of memory");
        return;
    }
    c->srv = s;
    c->later.done = on_later;
    int rc = listener == (uv_stream_t *)&s->unix_listener ? uv_pipe_init(&s->loop, &c->h.pipe, 0)
                                                           : uv_tcp_init(&s->loop, &c->h.tcp);
    if (rc != 0) {
        logf_(s, "accept: init: %s", uv_strerror(rc));
        free(c);
        return;
    }
    c->h.handle.data = c;
    c->next = s->conns;
    if (s->conns != NULL)
        s->conns->prev = c;
    s->conns = c;
    if ((rc = uv_accept(listener, &c->h.stream)) != 0) {
        logf_(s, "uv_accept: %s", uv_strerror(rc));
        conn_close(c);
        return;
    }
    c->tcp = listener == (uv_stream_t *)&s->tcp_listener;
    if (c->tcp)
        uv_tcp_nodelay(&c->h.tcp, 1); /* replies are small and latency-bound */
    c->active_ms = uv_now(&s->loop);
    s->d.st.clients_total++;
    if (s->d.st.clients_now >= s->max_clients ||
        (c->tcp && s->tcp_now >= s->max_clients - unix_reserve(s)))
        reap_closed(s);
    if (s->d.st.clients_now >= s->max_clients ||
        (c->tcp && s->tcp_now >= s->max_clients - unix_reserve(s))) {
        s->d.st.clients_rejected++;
        char msg[128];
        if (c->tcp && s->d.st.clients_now < s->max_clients)
            snprintf(msg, sizeof msg, "the daemon serves at most %u TCP clients at once (%u "
                     "more slots are kept for local clients)",
                     s->max_clients - unix_reserve(s), unix_reserve(s));
        else
            snprintf(msg, sizeof msg, "the daemon serves at most %u clients at once",
                     s->max_clients);
        fatal_reply(c, TUNED__PE_TOO_MANY_CLIENTS, msg);
        return;
    }
    c->counted = true;
    s->d.st.clients_now++;
    s->tcp_now += c->tcp;
    start_reading(c);
}

/* Without a uv_accept here libuv stops watching the listener and keeps the
 * connection until on_turn accepts it. */
static void on_connection(uv_stream_t *listener, int status)
{
    server *s = listener->data;
    if (status < 0) {
        logf_(s, "accept: %s", uv_strerror(status));
        return;
    }
    if (s->accepts_left == 0) {
        if (listener == (uv_stream_t *)&s->unix_listener)
            s->unix_deferred = true;
        else
            s->tcp_deferred = true;
        return;
    }
    s->accepts_left--;
    accept_one(s, listener);
}

static void on_turn(uv_prepare_t *p)
{
    server *s = p->data;
    s->accepts_left = ACCEPTS_PER_TURN;
    if (s->unix_deferred && s->unix_open) {
        s->accepts_left--;
        accept_one(s, (uv_stream_t *)&s->unix_listener);
    }
    if (s->tcp_deferred && s->tcp_open) {
        s->accepts_left--;
        accept_one(s, (uv_stream_t *)&s->tcp_listener);
    }
    s->unix_deferred = s->tcp_deferred = false;
}

/* ---- stop ---- */

static void close_any(uv_handle_t *h, void *arg)
{
    (void)arg;
    if (!uv_is_closing(h))
        uv_close(h, NULL);
}

static void stop_close(conn *c);

static void on_tick(uv_timer_t *t)
{
    server *s = t->data;
    uint64_t now = uv_now(&s->loop);
    uint64_t limit = (uint64_t)(s->o->client_timeout_s * 1000.0);
    uint64_t idle = (uint64_t)(s->o->idle_timeout_s * 1000.0);
    bool drain_over = s->stopping && now - s->stop_ms >= STOP_DRAIN_MS;
    for (conn *c = s->conns, *next; c != NULL; c = next) {
        next = c->next;
        if (c->closing)
            continue;
        if (c->queued > 0 && c->stalled_since != 0 && now - c->stalled_since > limit) {
            s->d.st.clients_cut_off++;
            logf_(s, "client cut off: it read none of %zu reply bytes for %.0f s", c->queued,
                  s->o->client_timeout_s);
            conn_close(c);
        } else if (drain_over) {
            stop_close(c);
        } else if (!s->stopping && !c->paused && !c->close_after_flush && drained(c) &&
                   !c->later.pending && now - c->active_ms >= idle) {
            /* Nothing in flight (a partial line is not a request yet). */
            s->d.st.clients_idle++;
            char msg[96];
            snprintf(msg, sizeof msg, "closed after %.0f s without a request",
                     s->o->idle_timeout_s);
            fatal_reply(c, TUNED__PE_IDLE, msg);
        } else if (c->paused || !drained(c)) {
            c->active_ms = now; /* a request in flight is not idleness */
        }
    }
    if (!s->stopping)
        tuned__daemon_refresh(&s->d); /* store changes show up without requests too */
    tuned__remote_tick(&s->d);
    /* The fleet client closes its own handles first (its callbacks end). */
    if (s->stopping && s->conns == NULL && s->d.rebuild == NULL && s->d.bg.running == 0 &&
        tuned__jobs_finished(s->d.jobs) && tuned__remote_close(&s->d)) {
        logf_(s, "stopped");
        uv_walk(&s->loop, close_any, NULL);
    }
}

static void begin_stop(server *s, int signum)
{
    if (s->stopping) {
        logf_(s, "%s again: still waiting for running jobs to checkpoint", strsignal(signum));
        return;
    }
    s->stopping = true;
    s->d.stopping = true;
    s->stop_ms = uv_now(&s->loop);
    logf_(s, "%s: no new clients; running jobs checkpoint, then exit", strsignal(signum));
    if (s->unix_open)
        uv_close((uv_handle_t *)&s->unix_listener, NULL);
    if (s->tcp_open)
        uv_close((uv_handle_t *)&s->tcp_listener, NULL);
    s->unix_open = s->tcp_open = false;
    tuned__jobs_stop(s->d.jobs);
    tuned__remote_stop(&s->d);
    /* Lines already read get their shutting_down now; the rest as they come. */
    for (conn *c = s->conns, *next; c != NULL; c = next) {
        next = c->next;
        if (c->closing || c->close_after_flush)
            continue;
        c->paused = false;
        process(c);
    }
}

/* The drain is over: a partial request gets its shutting_down too. */
static void stop_close(conn *c)
{
    stop_reading(c);
    if (c->close_after_flush) {
        if (drained(c))
            conn_close(c);
        else
            c->close_after_flush = true;
        return;
    }
    if (c->in_end != c->in_start)
        tuned__reply_error(&c->out, "", TUNED__PE_SHUTTING_DOWN, "the daemon is stopping");
    c->in_start = c->in_end = 0;
    c->close_after_flush = true;
    flush(c);
    if (!c->closing && drained(c))
        conn_close(c);
}

static void on_signal(uv_signal_t *h, int signum)
{
    server *s = h->data;
    if (signum == SIGHUP) {
        logf_(s, "SIGHUP: re-reading the store %s (the log is stderr: nothing to reopen)",
              s->o->db);
        tuned__daemon_rebuild(&s->d);
        return;
    }
    begin_stop(s, signum);
}

/* ---- start ---- */

static int listen_unix(server *s, tuned__err *e)
{
    const char *path = s->o->socket_path;
    gid_t gid = (gid_t)-1;
    if (s->o->group[0] != '\0') {
        struct group gr, *res = NULL;
        char buf[4096];
        if (getgrnam_r(s->o->group, &gr, buf, sizeof buf, &res) != 0 || res == NULL)
            return tuned__errf(e, TUNED_EINVAL, "--group %s: no such group", s->o->group);
        gid = gr.gr_gid;
    }
    int rc = tuned__socket_make_dir(path, gid != (gid_t)-1 ? 0750 : 0700, gid, e);
    if (rc == 0)
        rc = tuned__socket_clear_stale(path, e);
    if (rc != 0)
        return rc;
    if ((rc = uv_pipe_init(&s->loop, &s->unix_listener, 0)) != 0)
        return tuned__errf(e, TUNED_EIO, "uv_pipe_init: %s", uv_strerror(rc));
    s->unix_listener.data = s;
    s->unix_open = true;
    /* Created 0600 (0660 with a group) from the start: no window. */
    mode_t old = umask(gid != (gid_t)-1 ? 0117 : 0177);
    rc = uv_pipe_bind(&s->unix_listener, path);
    umask(old);
    if (rc != 0)
        return tuned__errf(e, TUNED_EIO, "socket %s: bind: %s", path, uv_strerror(rc));
    s->socket_made = true;
    if (lstat(path, &s->socket_st) != 0)
        return tuned__errf(e, TUNED_EIO, "socket %s: %s", path, strerror(errno));
    if (gid != (gid_t)-1 && (chown(path, (uid_t)-1, gid) != 0 || chmod(path, 0660) != 0))
        return tuned__errf(e, TUNED_EIO, "socket %s: group %s: %s", path, s->o->group,
                           strerror(errno));
    if ((rc = uv_listen((uv_stream_t *)&s->unix_listener, BACKLOG, on_connection)) != 0)
        return tuned__errf(e, TUNED_EIO, "socket %s: listen: %s", path, uv_strerror(rc));
    logf_(s, "listening on %s (mode %s)", path, gid != (gid_t)-1 ? "0660" : "0600");
    return 0;
}

static int listen_tcp(server *s, tuned__err *e)
{
    char host[128];
    const char *spec = s->o->listen;
    long port;
    struct sockaddr_storage sa;
    int rc = tuned__listen_parse(spec, &sa, host, sizeof host, &port, e);
    if (rc != 0)
        return rc;
    if ((rc = uv_tcp_init(&s->loop, &s->tcp_listener)) != 0)
        return tuned__errf(e, TUNED_EIO, "uv_tcp_init: %s", uv_strerror(rc));
    s->tcp_listener.data = s;
    s->tcp_open = true;
    if ((rc = uv_tcp_bind(&s->tcp_listener, (struct sockaddr *)&sa, 0)) != 0 ||
        (rc = uv_listen((uv_stream_t *)&s->tcp_listener, BACKLOG, on_connection)) != 0)
        return tuned__errf(e, TUNED_EIO, "--listen %s: %s", spec, uv_strerror(rc));
    logf_(s, "listening on tcp %s port %ld%s", host, port,
          strcmp(host, "127.0.0.1") == 0 || strcmp(host, "::1") == 0 ? " (loopback)" : "");
    return 0;
}

/* The limits, each on its own and against each other; the message names
 * the limit (and the one it is compared with). */
static int check_limits(const tuned__serve_opts *o, tuned__err *e)
{
    const struct {
        bool bad;
        const char *what;
    } one[] = {
        {o->max_clients == 0, "clients must be at least 1"},
        {o->max_line < 64, "line must be at least 64 bytes"},
        {o->max_output < 4096, "output must be at least 4096 bytes"},
        {o->max_jobs == 0, "jobs must be at least 1"},
        {!(o->variant_timeout_s > 0), "variant-timeout must be more than 0 s"},
        {!(o->client_timeout_s > 0), "client-timeout must be more than 0 s"},
        {!(o->idle_timeout_s > 0), "idle must be more than 0 s"},
        {!(o->shutdown_grace_s >= 0), "grace must be 0 s or more"},
        {!(o->remote_timeout_s >= 0.001), "remote-timeout must be at least 0.001 s"},
        {!(o->lease_s >= 0.1), "lease must be at least 0.1 s"},
        {!(o->reclaim_s >= 0.1), "reclaim must be at least 0.1 s"},
    };
    for (size_t i = 0; i < sizeof one / sizeof one[0]; i++)
        if (one[i].bad)
            return tuned__errf(e, TUNED_EINVAL, "serve: --limit %s", one[i].what);
    if (o->max_output_total < o->max_output)
        return tuned__errf(e, TUNED_EINVAL, "serve: --limit output-total %zu must be at least "
                           "output (%zu)", o->max_output_total, o->max_output);
    return 0;
}

int tuned__serve_check(const tuned__serve_opts *o, tuned__err *e)
{
    if (o->socket_path[0] == '\0' || strlen(o->socket_path) > TUNED__SOCKET_PATH_MAX)
        return tuned__errf(e, TUNED_EINVAL, "socket path must be 1 to %d bytes",
                           TUNED__SOCKET_PATH_MAX);
    if (o->db[0] == '\0')
        return tuned__errf(e, TUNED_EINVAL, "serve: no store path");
    int rc = check_limits(o, e);
    if (rc != 0)
        return rc;
    /* Before the store and the GPU workers: a second daemon on a live
     * socket must find out first. One that cannot be told is bind's to
     * report; a stale one is replaced then. */
    bool stale;
    tuned__err pe = {0};
    if (tuned__socket_probe(o->socket_path, &stale, &pe) == TUNED_EINVAL) {
        *e = pe;
        return TUNED_EINVAL;
    }
    if (o->remote[0] != '\0') {
        if (!tuned__remote_available())
            return tuned__errf(e, TUNED_EINVAL, "--remote: this tuned was built without the "
                               "fleet tier (no hiredis)");
        if (strncmp(o->remote, "redis://", 8) != 0 && strncmp(o->remote, "unix:///", 8) != 0)
            return tuned__errf(e, TUNED_EINVAL, "--remote %s: expected redis://HOST[:PORT][/DB] "
                               "or unix:///PATH", o->remote);
    } else if (o->remote_credentials[0] != '\0') {
        return tuned__errf(e, TUNED_EINVAL, "--remote-credentials needs --remote");
    }
    if (o->group[0] != '\0') {
        struct group gr, *res = NULL;
        char buf[4096];
        if (getgrnam_r(o->group, &gr, buf, sizeof buf, &res) != 0 || res == NULL)
            return tuned__errf(e, TUNED_EINVAL, "--group %s: no such group", o->group);
    }
    if (o->listen[0] != '\0') {
        struct sockaddr_storage sa;
        char host[128];
        long port;
        rc = tuned__listen_parse(o->listen, &sa, host, sizeof host, &port, e);
        if (rc != 0)
            return rc;
    }
    return 0;
}

/* The store, for writing if it can be; else (a full disk, a read-only file
 * system or directory) read-only, saying so. */
static int open_store(server *s, tuned__err *e)
{
    tuned__err we = {0};
    int rc = tuned__store_open(&s->d.store, s->o->db, 0, &we);
    if (rc == 0)
        return 0;
    if (rc == TUNED_ESCHEMA || tuned__store_open(&s->d.store, s->o->db, TUNED__STORE_READONLY,
                                                 e) != 0) {
        *e = we;
        return rc;
    }
    s->d.read_only = true;
    logf_(s, "store %s cannot be written (%s): serving it READ-ONLY: get and list answer, tune "
          "gets read_only", s->o->db, we.msg);
    return 0;
}

static int start_signals(server *s, tuned__err *e)
{
    int rc;
    if ((rc = uv_signal_init(&s->loop, &s->sigterm)) != 0 ||
        (rc = uv_signal_init(&s->loop, &s->sigint)) != 0 ||
        (rc = uv_signal_init(&s->loop, &s->sighup)) != 0)
        return tuned__errf(e, TUNED_EIO, "uv_signal_init: %s", uv_strerror(rc));
    s->signals_open = true;
    s->sigterm.data = s->sigint.data = s->sighup.data = s;
    if ((rc = uv_signal_start(&s->sigterm, on_signal, SIGTERM)) != 0 ||
        (rc = uv_signal_start(&s->sigint, on_signal, SIGINT)) != 0 ||
        (rc = uv_signal_start(&s->sighup, on_signal, SIGHUP)) != 0)
        return tuned__errf(e, TUNED_EIO, "uv_signal_start: %s", uv_strerror(rc));
    return 0;
}

/* Raises the soft file limit to the hard one, then fits the client limit
 * under it, keeping FD_RESERVE + FD_PER_GPU per GPU for the rest: past the
 * limit, libuv closes new connections without a word and a worker that
 * dies cannot be replaced (its job fails). Says so when it clamps. */
static int fit_fd_limit(server *s, size_t ngpus, tuned__err *e)
{
    s->max_clients = s->o->max_clients;
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0) {
        logf_(s, "getrlimit RLIMIT_NOFILE: %s; clients not fitted to the file limit",
              strerror(errno));
        return 0;
    }
    if (rl.rlim_cur < rl.rlim_max) {
        struct rlimit raised = {.rlim_cur = rl.rlim_max, .rlim_max = rl.rlim_max};
        if (setrlimit(RLIMIT_NOFILE, &raised) == 0)
            rl = raised;
        else
            logf_(s, "setrlimit RLIMIT_NOFILE to %llu: %s", (unsigned long long)rl.rlim_max,
                  strerror(errno));
    }
    if (rl.rlim_cur == RLIM_INFINITY)
        return 0;
    uint64_t reserve = FD_RESERVE + FD_PER_GPU * (uint64_t)ngpus;
    if ((uint64_t)rl.rlim_cur <= reserve)
        return tuned__errf(e, TUNED_EINVAL, "the file limit (RLIMIT_NOFILE %llu) leaves no file "
                           "descriptor for clients: %llu are kept for the store, the workers "
                           "and logs (raise it: ulimit -n, LimitNOFILE=)",
                           (unsigned long long)rl.rlim_cur, (unsigned long long)reserve);
    uint64_t room = (uint64_t)rl.rlim_cur - reserve;
    if (s->max_clients > room) {
        s->max_clients = (unsigned)room;
        logf_(s, "--limit clients %u does not fit the file limit (RLIMIT_NOFILE %llu, %llu kept "
              "for the store, the workers and logs): serving at most %u clients",
              s->o->max_clients, (unsigned long long)rl.rlim_cur, (unsigned long long)reserve,
              s->max_clients);
    }
    return 0;
}

/* Finished jobs kept for `job` requests. */
static unsigned job_history(void)
{
#if TUNED_TEST_HOOKS
    /* TEST ONLY: a short history, so a test fills it with a few jobs. */
    const char *t = getenv("TUNED_TEST_JOB_HISTORY");
    if (t != NULL && atoi(t) > 0)
        return (unsigned)atoi(t);
#endif
    return 1024;
}

static int start(server *s, tuned__err *e)
{
    const tuned__serve_opts *o = s->o;
    int rc = tuned__serve_check(o, e);
    if (rc != 0)
        return rc;
    if ((rc = uv_loop_init(&s->loop)) != 0)
        return tuned__errf(e, TUNED_EIO, "uv_loop_init: %s", uv_strerror(rc));
    s->loop_ready = true;
    s->d.loop = &s->loop;
    /* First: a SIGHUP or SIGTERM during the start must not kill us. */
    if ((rc = start_signals(s, e)) != 0)
        return rc;
    if ((rc = tuned__bg_init(&s->d.bg, &s->loop, e)) != 0)
        return rc;
    rc = open_store(s, e);
    if (rc == 0)
        rc = tuned__index_new(&s->d.index, e);
    if (rc != 0)
        return rc;
    s->d.now_ms = loop_now;
    s->d.now_ctx = &s->loop;
    s->d.start_ms = uv_now(&s->loop);
    /* The workers run this same binary. */
    if (o->worker_exe[0] != '\0') {
        snprintf(s->exe, sizeof s->exe, "%s", o->worker_exe);
    } else {
        ssize_t n = readlink("/proc/self/exe", s->exe, sizeof s->exe - 1);
        if (n <= 0)
            return tuned__errf(e, TUNED_EIO, "readlink /proc/self/exe: %s", strerror(errno));
        s->exe[n] = '\0';
    }
    tuned__jobs_opts jo = {.worker_exe = s->exe, .db = o->db, .worker_nice = o->worker_nice,
                           .hello_timeout_s = 120, .variant_timeout_s = o->variant_timeout_s,
                           .shutdown_grace_s = o->shutdown_grace_s, .max_queued = o->max_jobs,
                           .history = job_history(), .quiet = o->quiet};
    if ((rc = tuned__jobs_start(&s->d.jobs, s->d.store, &jo, e)) != 0)
        return rc;
    if ((rc = fit_fd_limit(s, tuned__jobs_gpu_count(s->d.jobs), e)) != 0)
        return rc;
    /* The index knows the local GPUs, to match records exactly. */
    if ((rc = tuned__daemon_reload(&s->d, e)) != 0)
        return rc;
    if ((rc = uv_prepare_init(&s->loop, &s->turn)) != 0)
        return tuned__errf(e, TUNED_EIO, "uv_prepare_init: %s", uv_strerror(rc));
    s->turn.data = s;
    s->accepts_left = ACCEPTS_PER_TURN;
    if ((rc = uv_prepare_start(&s->turn, on_turn)) != 0)
        return tuned__errf(e, TUNED_EIO, "uv_prepare_start: %s", uv_strerror(rc));
    uv_unref((uv_handle_t *)&s->turn); /* it alone does not keep the loop running */
    /* TCP before the Unix socket: whoever sees the Unix socket accept
     * (a service manager, a test) finds every listener up. */
    if (o->listen[0] != '\0' && (rc = listen_tcp(s, e)) != 0)
        return rc;
    if ((rc = listen_unix(s, e)) != 0)
        return rc;
    if ((rc = uv_timer_init(&s->loop, &s->tick)) != 0)
        return tuned__errf(e, TUNED_EIO, "uv_timer_init: %s", uv_strerror(rc));
    s->tick_open = true;
    s->tick.data = s;
    if ((rc = uv_timer_start(&s->tick, on_tick, TICK_MS, TICK_MS)) != 0)
        return tuned__errf(e, TUNED_EIO, "uv_timer_start: %s", uv_strerror(rc));
    /* Last: it connects in the background; a server that is down is
     * retried with backoff while the daemon serves locally. */
    if ((rc = tuned__remote_open(&s->d, e)) != 0)
        return rc;
    logf_(s, "store %s: %zu records%s; ready", o->db, tuned__index_count(s->d.index),
          s->d.read_only ? " (read-only)" : "");
    return 0;
}

/* Removes the socket file if it is still the one we made. */
static void remove_socket(server *s)
{
    struct stat st;
    if (s->socket_made && lstat(s->o->socket_path, &st) == 0 &&
        st.st_ino == s->socket_st.st_ino && st.st_dev == s->socket_st.st_dev)
        unlink(s->o->socket_path);
}

int tuned__serve(const tuned__serve_opts *o, tuned__err *e)
{
    server *s = calloc(1, sizeof *s);
    if (s == NULL)
        return tuned__errf(e, TUNED_ENOMEM, "serve: out of memory");
    s->o = o;
    s->d.o = o;
    int rc = start(s, e);
    if (rc == 0) {
        rc = uv_run(&s->loop, UV_RUN_DEFAULT);
        (void)rc; /* returns when every handle is closed */
        rc = 0;
    } else if (s->loop_ready) {
        /* A failed start: close what was opened. */
        uv_walk(&s->loop, close_any, NULL);
        uv_run(&s->loop, UV_RUN_DEFAULT);
    }
    remove_socket(s);
    tuned__remote_free(&s->d);
    tuned__jobs_free(s->d.jobs);
    tuned__index_free(s->d.index);
    tuned__daemon_reload_free(&s->d);
    tuned__store_close(s->d.store);
    if (s->loop_ready) {
        int lc = uv_loop_close(&s->loop);
        if (lc != 0 && rc == 0)
            rc = tuned__errf(e, TUNED_EIO, "uv_loop_close: %s (a handle was left open)",
                             uv_strerror(lc));
    }
    tuned__bg_free(&s->d.bg);
    free(s);
    return rc;
}
