/* internal.h: the fleet client's inside, shared by its files: the client,
 * its two connections (commands, and notifications in pub/sub mode), and
 * the request every operation is.
 *
 * A request lives in exactly one of the client's lists: `open` (queued
 * until the command connection is ready, or sent), `waiters` (a wait), or
 * `done` (finished, its callback not yet delivered). Callbacks are
 * delivered from a uv_idle handle, never inside an API call or a hiredis
 * callback, so user code never re-enters the client. A request is freed
 * once it is delivered and hiredis no longer holds its callback (`held`):
 * one that timed out stays allocated until its late reply, or the
 * connection's end, releases it. One uv_timer serves every deadline:
 * requests', waiters' and the connections' (reconnect, handshake). */
#ifndef TUNED_FLEET_INTERNAL_H
#define TUNED_FLEET_INTERNAL_H

#include <hiredis/async.h>
#include <hiredis/hiredis.h>

#include "src/common/rng.h"
#include "src/fleet/fleet.h"

#define TUNED__FLEET_PREFIX "tuned:v2"
#define TUNED__FLEET_KEY 384       /* longest key or channel plus NUL */
#define TUNED__FLEET_VALUE_MAX (64 * 1024)
#define TUNED__FLEET_CMDS 9        /* fire-and-forget commands before the answered one, + 1 */

typedef struct tuned__fleet_link {
    struct tuned__fleet_link *prev, *next;
} tuned__fleet_link;

typedef struct tuned__fleet_conn {
    tuned__fleet *f;
    redisAsyncContext *ac;     /* NULL while down */
    bool is_sub;               /* the notification connection */
    bool started;              /* the notification connection starts with the first wait */
    bool denied;               /* notifications refused by the ACL: polling only */
    bool subscribed;
    tuned__fleet_state state;
    double next_at;            /* down: reconnect time; connecting: handshake deadline */
    double backoff_ms;
    int handshake_left;        /* replies the handshake still waits for */
} tuned__fleet_conn;

typedef struct tuned__fleet_req tuned__fleet_req;

/* An operation's reply parser: fills q->reply and calls
 * tuned__fleet_finish(), or sends its next step. */
typedef void (*tuned__fleet_parse_fn)(tuned__fleet_req *q, const redisReply *r);

struct tuned__fleet_req {
    tuned__fleet_link link;
    tuned__fleet *f;
    tuned__fleet_parse_fn parse;
    tuned__fleet_cb cb;
    void *ctx;
    double deadline;
    bool sent;                 /* on the connection (else queued for it) */
    bool held;                 /* hiredis holds its callback */
    bool finished;
    bool delivered;            /* its callback ran (or it had none) */
    bool is_get;               /* counts in gets/hits */
    bool is_put;               /* counts in puts */
    char *cmd[TUNED__FLEET_CMDS]; /* formatted commands; the last is answered */
    size_t cmd_len[TUNED__FLEET_CMDS];
    int ncmd;
    tuned__fleet_id id;
    /* replace */
    char *value;               /* the new record's JSON */
    size_t value_len;
    double noise;
    int attempts;
    /* wait */
    tuned__fleet_req *parent;  /* a wait's poll: the wait */
    tuned__fleet_req *child;   /* a wait: its poll in flight */
    double next_poll;
    char channel[TUNED__FLEET_KEY];
    /* read, reclaim, shapes: what reply points into */
    tuned__fleet_job *jobs;
    tuned__fleet_shape *shapes;
    tuned__fleet_reply reply;
};

struct tuned__fleet {
    uv_loop_t *loop;
    uv_timer_t timer;
    uv_idle_t idle;
    int handles;               /* open uv handles */
    bool closing;
    void (*close_done)(void *ctx);
    void *close_ctx;
    /* where and who */
    bool unix_socket;
    char host[256];
    int port;
    char path[108];
    int db;
    bool auth;
    char user[128];
    char password[256];
    char owner[128];
    char group[64];
    unsigned timeout_ms, connect_timeout_ms, backoff_min_ms, backoff_max_ms, poll_ms;
    tuned__fleet_conn cmd, sub;
    tuned__fleet_link open, done, waiters;
    tuned__fleet_stats st;
    tuned__rng rng;
};

/* ---- lists ---- */
void tuned__fleet_list_init(tuned__fleet_link *head);
void tuned__fleet_list_push(tuned__fleet_link *head, tuned__fleet_link *l);
void tuned__fleet_list_remove(tuned__fleet_link *l);
#define TUNED__FLEET_REQ(l) ((tuned__fleet_req *)(void *)((char *)(l) - offsetof(tuned__fleet_req, link)))

/* ---- keys (check.c) ---- */
/* "KERNEL:DTYPE:RxC:LAYOUT:HWCLASS:TOOLCHAIN:CODE:POLICY": the part of
 * rec, lock and done names after their kind. */
void tuned__fleet_key_suffix(char *buf, size_t n, const tuned__fleet_id *id);
/* TUNED__FLEET_PREFIX ":" kind ":" suffix. */
void tuned__fleet_key(char *buf, size_t n, const char *kind, const tuned__fleet_id *id);
void tuned__fleet_index_key(char *buf, size_t n, uint8_t kernel, uint8_t dtype,
                            const char *hwclass);
/* "RxC:LAYOUT:TOOLCHAIN:CODE:POLICY", and back (0 or -1). */
void tuned__fleet_index_member(char *buf, size_t n, const tuned__fleet_id *id);
int tuned__fleet_index_parse(const char *s, size_t len, tuned__fleet_shape *out);
void tuned__fleet_queue_key(char *buf, size_t n, const char *hwclass);
void tuned__fleet_queued_key(char *buf, size_t n, const tuned__fleet_id *id);
bool tuned__fleet_name_ok(const char *s);
/* A policy text: the same and '/'. */
bool tuned__fleet_policy_ok(const char *s);
const char *tuned__fleet_layout_text(uint8_t layout, char *buf, size_t n);
int tuned__fleet_layout_parse(const char *s, uint8_t *out);

/* ---- where to connect (url.c) ---- */
int tuned__fleet_parse_url(tuned__fleet *f, const char *url, tuned__err *e);
int tuned__fleet_read_credentials(tuned__fleet *f, const tuned__fleet_opts *o, tuned__err *e);

/* ---- the client (client.c) ---- */
/* A new request of f for cb (NULL when out of memory: e says so). */
tuned__fleet_req *tuned__fleet_req_new(tuned__fleet *f, tuned__fleet_cb cb, void *ctx,
                                       tuned__err *e);
/* Appends one command (argv form) to q; the last appended is answered. */
int tuned__fleet_req_cmd(tuned__fleet_req *q, int argc, const char **argv, const size_t *lens,
                         tuned__err *e);
/* Hands q to the client: sent when connected, queued while connecting,
 * finished DOWN while down, CLOSED while closing. Always returns 0. */
int tuned__fleet_submit(tuned__fleet_req *q);
/* Sends one more command for q on the command connection (a next step,
 * from its parser); finishes q DOWN when it cannot be sent. */
void tuned__fleet_send_step(tuned__fleet_req *q, int argc, const char **argv,
                            const size_t *lens);
/* Sends a command whose reply nobody reads (best effort). */
void tuned__fleet_send_forget(tuned__fleet *f, int argc, const char **argv, const size_t *lens);
/* Ends q with status and a message (fmt may be NULL), queueing its
 * delivery. A second call is ignored. */
void tuned__fleet_finish(tuned__fleet_req *q, tuned__fleet_status status, const char *fmt, ...)
    TUNED__PRINTF(3, 4);
/* The status of an error reply: DENIED for ACL refusals, else ERROR. */
tuned__fleet_status tuned__fleet_error_status(const char *text);
/* Re-arms the timer for the earliest deadline. */
void tuned__fleet_reschedule(tuned__fleet *f);
/* Makes f's waiters poll at once (a notification, a new subscription). */
void tuned__fleet_wake(tuned__fleet *f, const char *channel);
/* Delivers a finished request (from the idle handle). */
void tuned__fleet_deliver(tuned__fleet_req *q);
/* Checks r (the stored value of a GET) for q->id into q->reply. */
void tuned__fleet_parse_record(tuned__fleet_req *q, const redisReply *r);
/* A wait's poll finished (records.c). */
void tuned__fleet_wait_polled(tuned__fleet_req *wait, tuned__fleet_req *poll);
/* Starts the poll of a wait that is due (records.c). */
void tuned__fleet_wait_poll(tuned__fleet_req *wait);
/* A wait reached its deadline or the client closes (records.c). */
void tuned__fleet_wait_end(tuned__fleet_req *wait, tuned__fleet_status status);

/* ---- request helpers (records.c) ---- */
/* A request for id (checked) and cb; NULL with e filled on a bad argument. */
tuned__fleet_req *tuned__fleet_req_for(tuned__fleet *f, const tuned__fleet_id *id,
                                       tuned__fleet_cb cb, void *ctx, tuned__err *e);
/* tuned__fleet_req_cmd() with the lengths of NUL-ended arguments (argc <= 16). */
int tuned__fleet_cmd(tuned__fleet_req *q, int argc, const char **argv, tuned__err *e);
/* Submits q when rc is 0; otherwise frees it and returns rc. */
int tuned__fleet_submit_or_free(tuned__fleet_req *q, int rc);
/* Finishes q for an error reply, or a reply of an unexpected type. */
void tuned__fleet_fail_reply(tuned__fleet_req *q, const redisReply *r, const char *what);

/* ---- connections (conn.c) ---- */
void tuned__fleet_conn_init(tuned__fleet_conn *c, tuned__fleet *f, bool is_sub);
void tuned__fleet_conn_connect(tuned__fleet_conn *c);
/* Drops the connection (pending requests end DOWN with why) and plans
 * the reconnect. */
void tuned__fleet_conn_drop(tuned__fleet_conn *c, const char *why);
/* Frees the connection for good (close). */
void tuned__fleet_conn_shutdown(tuned__fleet_conn *c);
/* Called by conn.c when the command connection becomes ready or goes down. */
void tuned__fleet_on_ready(tuned__fleet *f);
void tuned__fleet_on_down(tuned__fleet *f, const char *why);
void tuned__fleet_set_error(tuned__fleet *f, const char *fmt, ...) TUNED__PRINTF(2, 3);

#endif
