/* client.c: the fleet client itself: open and close, the requests every
 * operation is (queued, sent, finished, delivered, freed), the one timer
 * that serves every deadline, and the statistics. The ordering rules are
 * in internal.h. */
#include <netdb.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "src/common/clock.h"
#include "src/fleet/internal.h"
#include "tuned.h"

static void on_idle(uv_idle_t *h);

/* ---- lists ---- */

void tuned__fleet_list_init(tuned__fleet_link *head)
{
    head->prev = head->next = head;
}

void tuned__fleet_list_push(tuned__fleet_link *head, tuned__fleet_link *l)
{
    l->prev = head->prev;
    l->next = head;
    head->prev->next = l;
    head->prev = l;
}

void tuned__fleet_list_remove(tuned__fleet_link *l)
{
    l->prev->next = l->next;
    l->next->prev = l->prev;
    l->prev = l->next = l;
}

/* ---- errors and statistics ---- */

void tuned__fleet_set_error(tuned__fleet *f, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(f->st.last_error, sizeof f->st.last_error, fmt, ap);
    va_end(ap);
}

tuned__fleet_status tuned__fleet_error_status(const char *text)
{
    if (strstr(text, "NOPERM") != NULL || strstr(text, "NOAUTH") != NULL ||
        strstr(text, "WRONGPASS") != NULL)
        return TUNED__FLEET_DENIED;
    return TUNED__FLEET_ERROR;
}

static int status_code(tuned__fleet_status s)
{
    switch (s) {
    case TUNED__FLEET_OK: return 0;
    case TUNED__FLEET_MISS: return TUNED_ENOTFOUND;
    case TUNED__FLEET_INVALID: return TUNED_ESTORE;
    case TUNED__FLEET_TIMEOUT: return TUNED_ETIMEOUT;
    default: return TUNED_EIO;
    }
}

static void count_status(tuned__fleet *f, const tuned__fleet_req *q, tuned__fleet_status s)
{
    if (q->is_get) {
        f->st.gets++;
        f->st.hits += s == TUNED__FLEET_OK;
        f->st.misses += s == TUNED__FLEET_MISS;
        f->st.invalid += s == TUNED__FLEET_INVALID;
    }
    if (q->is_put) {
        f->st.puts++;
        f->st.puts_applied += s == TUNED__FLEET_OK;
    }
    if (s == TUNED__FLEET_TIMEOUT || s == TUNED__FLEET_DOWN || s == TUNED__FLEET_DENIED ||
        s == TUNED__FLEET_ERROR)
        f->st.errors++;
    f->st.timeouts += s == TUNED__FLEET_TIMEOUT;
}

/* ---- requests ---- */

tuned__fleet_req *tuned__fleet_req_new(tuned__fleet *f, tuned__fleet_cb cb, void *ctx,
                                       tuned__err *e)
{
    tuned__fleet_req *q = calloc(1, sizeof *q);
    if (q == NULL) {
        tuned__errf(e, TUNED_ENOMEM, "fleet: out of memory");
        return NULL;
    }
    q->f = f;
    q->cb = cb;
    q->ctx = ctx;
    q->deadline = tuned__now_s() + f->timeout_ms / 1000.0;
    q->reply.ttl_ms = -2;
    tuned__fleet_list_init(&q->link);
    return q;
}

static void req_free(tuned__fleet_req *q)
{
    for (int i = 0; i < q->ncmd; i++)
        redisFreeCommand(q->cmd[i]);
    free(q->value);
    free(q->jobs);
    free(q->shapes);
    free(q);
}

/* Frees q once it is delivered and hiredis no longer holds it. */
static void maybe_free(tuned__fleet_req *q)
{
    if (q->finished && q->delivered && !q->held && q->child == NULL)
        req_free(q);
}

int tuned__fleet_req_cmd(tuned__fleet_req *q, int argc, const char **argv, const size_t *lens,
                         tuned__err *e)
{
    if (q->ncmd == TUNED__FLEET_CMDS)
        return tuned__errf(e, TUNED_EINVAL, "fleet: too many commands in one request");
    char *cmd = NULL;
    int len = redisFormatCommandArgv(&cmd, argc, argv, lens);
    if (len < 0 || cmd == NULL)
        return tuned__errf(e, TUNED_ENOMEM, "fleet: out of memory");
    q->cmd[q->ncmd] = cmd;
    q->cmd_len[q->ncmd] = (size_t)len;
    q->ncmd++;
    return 0;
}

static void on_reply(redisAsyncContext *ac, void *reply, void *privdata)
{
    tuned__fleet_req *q = privdata;
    q->held = false;
    if (q->finished) {
        maybe_free(q); /* a late reply to a request that timed out or was closed */
        return;
    }
    if (reply == NULL) {
        tuned__fleet_finish(q, TUNED__FLEET_DOWN, "connection lost: %s",
                            ac->errstr[0] != '\0' ? ac->errstr : q->f->st.last_error);
        return;
    }
    q->parse(q, reply);
}

static void send_req(tuned__fleet_req *q)
{
    redisAsyncContext *ac = q->f->cmd.ac;
    int rc = ac != NULL ? REDIS_OK : REDIS_ERR;
    for (int i = 0; rc == REDIS_OK && i < q->ncmd; i++) {
        bool last = i == q->ncmd - 1;
        rc = redisAsyncFormattedCommand(ac, last ? on_reply : NULL, last ? q : NULL, q->cmd[i],
                                        q->cmd_len[i]);
    }
    if (rc != REDIS_OK) {
        tuned__fleet_finish(q, TUNED__FLEET_DOWN, "could not send: the connection is closing");
        return;
    }
    q->sent = true;
    q->held = true;
}

void tuned__fleet_send_step(tuned__fleet_req *q, int argc, const char **argv, const size_t *lens)
{
    redisAsyncContext *ac = q->f->cmd.ac;
    if (ac == NULL || redisAsyncCommandArgv(ac, on_reply, q, argc, argv, lens) != REDIS_OK) {
        tuned__fleet_finish(q, TUNED__FLEET_DOWN, "could not send: the connection is closing");
        return;
    }
    q->held = true;
}

void tuned__fleet_send_forget(tuned__fleet *f, int argc, const char **argv, const size_t *lens)
{
    if (f->cmd.ac != NULL && f->cmd.state == TUNED__FLEET_STATE_CONNECTED)
        (void)redisAsyncCommandArgv(f->cmd.ac, NULL, NULL, argc, argv, lens);
}

int tuned__fleet_submit(tuned__fleet_req *q)
{
    tuned__fleet *f = q->f;
    tuned__fleet_list_push(&f->open, &q->link);
    if (f->closing)
        tuned__fleet_finish(q, TUNED__FLEET_CLOSED, "the client is closing");
    else if (f->cmd.state == TUNED__FLEET_STATE_CONNECTED)
        send_req(q);
    else if (f->cmd.state == TUNED__FLEET_STATE_DOWN)
        tuned__fleet_finish(q, TUNED__FLEET_DOWN, "remote down: %s", f->st.last_error);
    /* connecting: queued until ready (on_ready) or down (on_down) */
    tuned__fleet_reschedule(f);
    return 0;
}

void tuned__fleet_finish(tuned__fleet_req *q, tuned__fleet_status status, const char *fmt, ...)
{
    if (q->finished)
        return;
    tuned__fleet *f = q->f;
    q->finished = true;
    q->reply.status = status;
    q->reply.err.code = status_code(status);
    q->reply.err.msg[0] = '\0';
    if (fmt != NULL) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(q->reply.err.msg, sizeof q->reply.err.msg, fmt, ap);
        va_end(ap);
    }
    count_status(f, q, status);
    tuned__fleet_list_remove(&q->link);
    tuned__fleet_list_push(&f->done, &q->link);
    if (!uv_is_active((uv_handle_t *)&f->idle) && !uv_is_closing((uv_handle_t *)&f->idle))
        uv_idle_start(&f->idle, on_idle);
}

void tuned__fleet_deliver(tuned__fleet_req *q)
{
    tuned__fleet_list_remove(&q->link);
    q->delivered = true;
    if (q->parent != NULL) {
        tuned__fleet_req *w = q->parent;
        q->parent = NULL;
        tuned__fleet_wait_polled(w, q);
    } else if (q->cb != NULL) {
        q->cb(q->ctx, &q->reply);
    }
    maybe_free(q);
}

/* ---- the ready and down transitions of the command connection ---- */

void tuned__fleet_on_ready(tuned__fleet *f)
{
    for (tuned__fleet_link *l = f->open.next; l != &f->open;) {
        tuned__fleet_req *q = TUNED__FLEET_REQ(l);
        l = l->next;
        if (!q->sent && !q->finished)
            send_req(q); /* a failure moves q to done; l is already past it */
    }
}

void tuned__fleet_on_down(tuned__fleet *f, const char *why)
{
    for (tuned__fleet_link *l = f->open.next; l != &f->open;) {
        tuned__fleet_req *q = TUNED__FLEET_REQ(l);
        l = l->next;
        if (!q->sent)
            tuned__fleet_finish(q, TUNED__FLEET_DOWN, "remote down: %s", why);
    }
}

void tuned__fleet_wake(tuned__fleet *f, const char *channel)
{
    double now = tuned__now_s();
    for (tuned__fleet_link *l = f->waiters.next; l != &f->waiters; l = l->next) {
        tuned__fleet_req *w = TUNED__FLEET_REQ(l);
        if (channel == NULL || strcmp(channel, w->channel) == 0)
            w->next_poll = now;
    }
    tuned__fleet_reschedule(f);
}

/* ---- the timer: every deadline ---- */

static void conn_due(tuned__fleet_conn *c, double now)
{
    if (c->f->closing)
        return;
    if (c->state == TUNED__FLEET_STATE_CONNECTING && c->next_at > 0 && now >= c->next_at) {
        char why[128];
        snprintf(why, sizeof why, "connect and handshake took longer than %u ms",
                 c->f->connect_timeout_ms);
        tuned__fleet_conn_drop(c, why);
    } else if (c->state == TUNED__FLEET_STATE_DOWN && c->next_at > 0 && now >= c->next_at &&
               (!c->is_sub || (c->started && !c->denied))) {
        tuned__fleet_conn_connect(c);
    }
}

static void on_timer(uv_timer_t *t)
{
    tuned__fleet *f = t->data;
    double now = tuned__now_s();
again:
    for (tuned__fleet_link *l = f->open.next; l != &f->open; l = l->next) {
        tuned__fleet_req *q = TUNED__FLEET_REQ(l);
        if (q->deadline > now)
            continue;
        bool sent = q->sent;
        tuned__fleet_finish(q, TUNED__FLEET_TIMEOUT, "no answer within %u ms", f->timeout_ms);
        /* A server that does not answer is treated as down: the pipeline
         * behind the late reply would be as late. */
        if (sent) {
            char why[128];
            snprintf(why, sizeof why, "a command got no answer within %u ms", f->timeout_ms);
            tuned__fleet_conn_drop(&f->cmd, why);
        }
        goto again;
    }
    for (tuned__fleet_link *l = f->waiters.next; l != &f->waiters; l = l->next) {
        tuned__fleet_req *w = TUNED__FLEET_REQ(l);
        if (w->deadline <= now) {
            tuned__fleet_wait_end(w, TUNED__FLEET_TIMEOUT);
            goto again;
        }
        if (w->child == NULL && w->next_poll <= now)
            tuned__fleet_wait_poll(w);
    }
    conn_due(&f->cmd, now);
    conn_due(&f->sub, now);
    tuned__fleet_reschedule(f);
}

void tuned__fleet_reschedule(tuned__fleet *f)
{
    if (f->closing)
        return;
    double next = 0;
#define EARLIEST(t)                      \
    do {                                 \
        double t_ = (t);                 \
        if (t_ > 0 && (next == 0 || t_ < next)) \
            next = t_;                   \
    } while (0)
    for (tuned__fleet_link *l = f->open.next; l != &f->open; l = l->next)
        EARLIEST(TUNED__FLEET_REQ(l)->deadline);
    for (tuned__fleet_link *l = f->waiters.next; l != &f->waiters; l = l->next) {
        tuned__fleet_req *w = TUNED__FLEET_REQ(l);
        EARLIEST(w->deadline);
        if (w->child == NULL)
            EARLIEST(w->next_poll);
    }
    EARLIEST(f->cmd.next_at);
    if (f->sub.started && !f->sub.denied)
        EARLIEST(f->sub.next_at);
#undef EARLIEST
    if (next == 0) {
        uv_timer_stop(&f->timer);
        return;
    }
    /* at least 1 ms: a timer re-armed due at once from its own callback
     * would run again in the same pass of the loop, forever */
    double ms = (next - tuned__now_s()) * 1000.0;
    uv_timer_start(&f->timer, on_timer, ms < 1 ? 1 : (uint64_t)ms + 1, 0);
}

/* ---- delivery and close ---- */

static void on_handle_closed(uv_handle_t *h)
{
    tuned__fleet *f = h->data;
    if (--f->handles > 0)
        return;
    void (*done)(void *) = f->close_done;
    void *ctx = f->close_ctx;
    memset(f->password, 0, sizeof f->password);
    free(f);
    if (done != NULL)
        done(ctx);
}

static void on_idle(uv_idle_t *h)
{
    tuned__fleet *f = h->data;
    /* user callbacks may finish more requests (an operation refused at
     * once): they join the list and are delivered in this same round */
    while (f->done.next != &f->done)
        tuned__fleet_deliver(TUNED__FLEET_REQ(f->done.next));
    uv_idle_stop(&f->idle);
    if (f->closing && !uv_is_closing((uv_handle_t *)&f->timer)) {
        uv_close((uv_handle_t *)&f->timer, on_handle_closed);
        uv_close((uv_handle_t *)&f->idle, on_handle_closed);
    }
}

void tuned__fleet_close(tuned__fleet *f, void (*done)(void *ctx), void *ctx)
{
    if (f == NULL || f->closing)
        return;
    f->closing = true;
    f->close_done = done;
    f->close_ctx = ctx;
    uv_timer_stop(&f->timer);
    while (f->waiters.next != &f->waiters)
        tuned__fleet_wait_end(TUNED__FLEET_REQ(f->waiters.next), TUNED__FLEET_CLOSED);
    while (f->open.next != &f->open)
        tuned__fleet_finish(TUNED__FLEET_REQ(f->open.next), TUNED__FLEET_CLOSED,
                            "the client was closed");
    /* now every request is finished: the NULL replies of the contexts'
     * end only release them */
    tuned__fleet_conn_shutdown(&f->cmd);
    tuned__fleet_conn_shutdown(&f->sub);
    /* the idle handle delivers what is left, then closes the handles */
    uv_idle_start(&f->idle, on_idle);
}

/* ---- open ---- */

void tuned__fleet_opts_init(tuned__fleet_opts *o)
{
    memset(o, 0, sizeof *o);
    o->timeout_ms = 1000;
    o->connect_timeout_ms = 2000;
    o->backoff_min_ms = 100;
    o->backoff_max_ms = 10000;
    o->poll_ms = 1000;
}

/* The server's address, resolved once here (hiredis would resolve on the
 * loop at each reconnect, blocking it on a slow DNS). */
static int resolve(tuned__fleet *f, tuned__err *e)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
    struct addrinfo *res = NULL;
    int rc = getaddrinfo(f->host, NULL, &hints, &res);
    if (rc != 0 || res == NULL)
        return tuned__errf(e, TUNED_EINVAL, "remote: cannot resolve '%s': %s", f->host,
                           gai_strerror(rc));
    char addr[NI_MAXHOST];
    rc = getnameinfo(res->ai_addr, res->ai_addrlen, addr, sizeof addr, NULL, 0, NI_NUMERICHOST);
    freeaddrinfo(res);
    if (rc != 0)
        return tuned__errf(e, TUNED_EINVAL, "remote: '%s': %s", f->host, gai_strerror(rc));
    snprintf(f->host, sizeof f->host, "%s", addr);
    return 0;
}

static bool text_ok(const char *s, size_t cap)
{
    size_t n = strnlen(s, cap);
    if (n == 0 || n == cap)
        return false;
    for (size_t i = 0; i < n; i++)
        if (s[i] <= ' ' || s[i] > '~')
            return false;
    return true;
}

int tuned__fleet_open(uv_loop_t *loop, const tuned__fleet_opts *o, tuned__fleet **out,
                      tuned__err *e)
{
    *out = NULL;
    if (loop == NULL || o == NULL)
        return tuned__errf(e, TUNED_EINVAL, "remote: no loop or options");
    if (o->timeout_ms == 0 || o->connect_timeout_ms == 0 || o->backoff_min_ms == 0 ||
        o->backoff_max_ms < o->backoff_min_ms || o->poll_ms == 0)
        return tuned__errf(e, TUNED_EINVAL, "remote: timeouts, backoff and poll interval must be "
                           "> 0 (backoff_max >= backoff_min)");
    tuned__fleet *f = calloc(1, sizeof *f);
    if (f == NULL)
        return tuned__errf(e, TUNED_ENOMEM, "remote: out of memory");
    f->loop = loop;
    f->timeout_ms = o->timeout_ms;
    f->connect_timeout_ms = o->connect_timeout_ms;
    f->backoff_min_ms = o->backoff_min_ms;
    f->backoff_max_ms = o->backoff_max_ms;
    f->poll_ms = o->poll_ms;
    f->rng.state = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32) ^ (uint64_t)(uintptr_t)f;
    int rc = tuned__fleet_parse_url(f, o->url, e);
    if (rc == 0 && !f->unix_socket)
        rc = resolve(f, e);
    if (rc == 0)
        rc = tuned__fleet_read_credentials(f, o, e);
    if (rc == 0 && o->owner != NULL) {
        snprintf(f->owner, sizeof f->owner, "%s", o->owner);
        if (!text_ok(o->owner, sizeof f->owner))
            rc = tuned__errf(e, TUNED_EINVAL, "remote: owner must be 1..127 printable "
                             "characters without spaces");
    } else if (rc == 0) {
        char host[64] = "host";
        gethostname(host, sizeof host - 1);
        host[strcspn(host, " \t")] = '\0';
        snprintf(f->owner, sizeof f->owner, "%s:%ld:%08llx", host, (long)getpid(),
                 (unsigned long long)(tuned__rng_next(&f->rng) & 0xffffffffu));
    }
    snprintf(f->group, sizeof f->group, "%s", o->group != NULL ? o->group : "tuned");
    if (rc == 0 && !text_ok(f->group, sizeof f->group))
        rc = tuned__errf(e, TUNED_EINVAL, "remote: group must be 1..63 printable characters "
                         "without spaces");
    if (rc != 0) {
        memset(f->password, 0, sizeof f->password);
        free(f);
        return rc;
    }
    tuned__fleet_list_init(&f->open);
    tuned__fleet_list_init(&f->done);
    tuned__fleet_list_init(&f->waiters);
    tuned__fleet_conn_init(&f->cmd, f, false);
    tuned__fleet_conn_init(&f->sub, f, true);
    uv_timer_init(loop, &f->timer);
    uv_idle_init(loop, &f->idle);
    f->timer.data = f;
    f->idle.data = f;
    f->handles = 2;
    tuned__fleet_conn_connect(&f->cmd);
    *out = f;
    return 0;
}

void tuned__fleet_stats_get(const tuned__fleet *f, tuned__fleet_stats *out)
{
    *out = f->st;
    out->state = f->cmd.state;
    out->subscribed = f->sub.subscribed;
}

const char *tuned__fleet_owner(const tuned__fleet *f)
{
    return f->owner;
}
