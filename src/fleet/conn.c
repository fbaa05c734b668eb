/* conn.c: one connection to the server through hiredis's libuv adapter,
 * and its life: connect, handshake (AUTH, SELECT, PING), ready, down, and
 * the reconnect after an exponential, capped, jittered backoff.
 *
 * The client has two: the command connection, and the notification
 * connection that stays in pub/sub mode (PSUBSCRIBE to the done channels;
 * hiredis takes no other commands on a subscribed connection). The second
 * starts with the first wait; when the server's ACL refuses it, waits poll.
 *
 * hiredis 0.14 has no timeouts of its own: the client's timer ends a
 * handshake that takes longer than connect_timeout_ms (conn.next_at). A
 * context is forgotten (c->ac = NULL) before it is freed, so callbacks of
 * a context that is going away recognise themselves as stale. */
#include <stdio.h>
#include <string.h>

#include <hiredis/adapters/libuv.h>

#include "src/common/clock.h"
#include "src/fleet/internal.h"

#define SUB_PATTERN TUNED__FLEET_PREFIX ":done:*"

void tuned__fleet_conn_init(tuned__fleet_conn *c, tuned__fleet *f, bool is_sub)
{
    memset(c, 0, sizeof *c);
    c->f = f;
    c->is_sub = is_sub;
    c->state = TUNED__FLEET_STATE_DOWN;
    c->backoff_ms = f->backoff_min_ms;
}

static const char *conn_name(const tuned__fleet_conn *c)
{
    return c->is_sub ? "notifications" : "commands";
}

/* The connection is gone (failed, dropped or refused): plan the next try. */
static void went_down(tuned__fleet_conn *c, const char *why)
{
    tuned__fleet *f = c->f;
    bool was_connecting = c->state == TUNED__FLEET_STATE_CONNECTING;
    c->state = TUNED__FLEET_STATE_DOWN;
    c->subscribed = false;
    c->handshake_left = 0;
    if (was_connecting)
        f->st.connect_failures++;
    /* jitter in [0.75, 1.25) spreads a fleet's reconnects */
    double jitter = 0.75 + (double)tuned__rng_below(&f->rng, 1000) / 2000.0;
    double delay_ms = c->backoff_ms * jitter;
    c->next_at = f->closing ? 0 : tuned__now_s() + delay_ms / 1000.0;
    c->backoff_ms = c->backoff_ms * 2 > f->backoff_max_ms ? f->backoff_max_ms : c->backoff_ms * 2;
    if (c->is_sub && strstr(why, "NOPERM") != NULL) {
        c->denied = true; /* it would be refused again: waits poll */
        c->next_at = 0;
        tuned__fleet_set_error(f, "notifications refused by the server's ACL (%s): waits poll "
                               "every %u ms", why, f->poll_ms);
    } else {
        tuned__fleet_set_error(f, "%s connection: %s; reconnecting in %.0f ms", conn_name(c), why,
                               delay_ms);
    }
    if (!c->is_sub)
        tuned__fleet_on_down(f, why);
    tuned__fleet_reschedule(f);
}

static void on_connect(const redisAsyncContext *ac, int status)
{
    tuned__fleet_conn *c = ac->data;
    if (c == NULL || c->ac != ac || status == REDIS_OK)
        return; /* a successful connect goes on with the handshake replies */
    c->ac = NULL; /* hiredis frees it after this callback */
    went_down(c, ac->errstr[0] != '\0' ? ac->errstr : "connect failed");
}

static void on_disconnect(const redisAsyncContext *ac, int status)
{
    tuned__fleet_conn *c = ac->data;
    if (c == NULL || c->ac != ac)
        return;
    c->ac = NULL;
    went_down(c, ac->errstr[0] != '\0' ? ac->errstr : "closed by the server");
}

/* Pub/sub traffic of the notification connection. */
static void on_sub(redisAsyncContext *ac, void *reply, void *privdata)
{
    tuned__fleet_conn *c = privdata;
    redisReply *r = reply;
    if (c->ac != ac || r == NULL || r->type != REDIS_REPLY_ARRAY || r->elements < 3 ||
        r->element[0]->type != REDIS_REPLY_STRING)
        return;
    if (strcmp(r->element[0]->str, "psubscribe") == 0) {
        c->subscribed = true;
        tuned__fleet_wake(c->f, NULL); /* messages sent while down are lost: look now */
    } else if (strcmp(r->element[0]->str, "pmessage") == 0 && r->elements >= 4 &&
               r->element[2]->type == REDIS_REPLY_STRING) {
        c->f->st.notifications++;
        tuned__fleet_wake(c->f, r->element[2]->str);
    }
}

static void ready(tuned__fleet_conn *c)
{
    tuned__fleet *f = c->f;
    c->state = TUNED__FLEET_STATE_CONNECTED;
    c->backoff_ms = f->backoff_min_ms;
    c->next_at = 0;
    if (c->is_sub) {
        if (redisAsyncCommand(c->ac, on_sub, c, "PSUBSCRIBE %s", SUB_PATTERN) != REDIS_OK)
            tuned__fleet_conn_drop(c, "PSUBSCRIBE could not be sent");
    } else {
        f->st.connects++;
        tuned__fleet_on_ready(f);
    }
    tuned__fleet_reschedule(f);
}

static void on_handshake(redisAsyncContext *ac, void *reply, void *privdata)
{
    tuned__fleet_conn *c = privdata;
    redisReply *r = reply;
    if (c->ac != ac || r == NULL)
        return; /* stale, or the connection ends: on_disconnect says why */
    if (r->type == REDIS_REPLY_ERROR) {
        char why[300];
        snprintf(why, sizeof why, "handshake: %.250s", r->str);
        tuned__fleet_conn_drop(c, why);
        return;
    }
    if (--c->handshake_left == 0)
        ready(c);
}

void tuned__fleet_conn_connect(tuned__fleet_conn *c)
{
    tuned__fleet *f = c->f;
    c->state = TUNED__FLEET_STATE_CONNECTING;
    c->next_at = tuned__now_s() + f->connect_timeout_ms / 1000.0;
    redisAsyncContext *ac = f->unix_socket ? redisAsyncConnectUnix(f->path)
                                           : redisAsyncConnect(f->host, f->port);
    if (ac == NULL) {
        went_down(c, "out of memory");
        return;
    }
    if (ac->err) {
        char why[256];
        snprintf(why, sizeof why, "connect %s: %s", f->unix_socket ? f->path : f->host,
                 ac->errstr);
        redisAsyncFree(ac);
        went_down(c, why);
        return;
    }
    ac->data = c;
    if (redisLibuvAttach(ac, f->loop) != REDIS_OK) {
        redisAsyncFree(ac);
        went_down(c, "cannot attach to the loop");
        return;
    }
    redisAsyncSetConnectCallback(ac, on_connect);
    redisAsyncSetDisconnectCallback(ac, on_disconnect);
    c->ac = ac;
    c->handshake_left = 0;
    int rc = REDIS_OK;
    if (f->auth) {
        c->handshake_left++;
        rc = f->user[0] != '\0'
                 ? redisAsyncCommand(ac, on_handshake, c, "AUTH %s %s", f->user, f->password)
                 : redisAsyncCommand(ac, on_handshake, c, "AUTH %s", f->password);
    }
    if (rc == REDIS_OK && !c->is_sub && f->db != 0) {
        c->handshake_left++;
        rc = redisAsyncCommand(ac, on_handshake, c, "SELECT %d", f->db);
    }
    if (rc == REDIS_OK) {
        c->handshake_left++;
        rc = redisAsyncCommand(ac, on_handshake, c, "PING");
    }
    if (rc != REDIS_OK)
        tuned__fleet_conn_drop(c, "handshake could not be sent");
    tuned__fleet_reschedule(f);
}

void tuned__fleet_conn_drop(tuned__fleet_conn *c, const char *why)
{
    redisAsyncContext *ac = c->ac;
    if (ac == NULL)
        return;
    c->ac = NULL;
    went_down(c, why);
    redisAsyncFree(ac); /* pending requests get their NULL reply: they end DOWN */
}

void tuned__fleet_conn_shutdown(tuned__fleet_conn *c)
{
    redisAsyncContext *ac = c->ac;
    c->ac = NULL;
    c->state = TUNED__FLEET_STATE_DOWN;
    c->next_at = 0;
    c->subscribed = false;
    if (ac != NULL)
        redisAsyncFree(ac);
}
