/* records.c: the records of the tier: get, publish (SET NX), replace
 * (compare-and-set), forget, the index of shapes, and waiting for a record
 * that another daemon is tuning (pub/sub with a polling fallback).
 *
 * Writes are Lua scripts, so the record, its index entry and the done
 * notification change together: a reader never sees an index entry
 * without its record. A replace reads the stored value, decides in C
 * (check it; compare the medians), then runs a script that writes only if
 * the value is still the one it read, and, for a "faster" replace,
 * compares the medians again itself. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cache/record.h"
#include "src/common/clock.h"
#include "src/fleet/internal.h"
#include "tuned.h"

/* KEYS rec, idx; ARGV value, index member, channel. */
static const char PUBLISH_LUA[] =
    "if redis.call('SET', KEYS[1], ARGV[1], 'NX') then\n"
    "  redis.call('SADD', KEYS[2], ARGV[2])\n"
    "  redis.call('PUBLISH', ARGV[3], KEYS[1])\n"
    "  return 1\n"
    "end\n"
    "return 0\n";

/* KEYS rec, idx; ARGV value, member, channel, expected value ('' : none
 * stored), new median, noise, mode ("absent", "swap", "faster").
 * Returns {applied, why, stored median}. */
static const char REPLACE_LUA[] =
    "local cur = redis.call('GET', KEYS[1])\n"
    "if ARGV[4] == '' then\n"
    "  if cur then return {0, 'changed', ''} end\n"
    "elseif cur ~= ARGV[4] then return {0, 'changed', ''} end\n"
    "if ARGV[7] == 'faster' then\n"
    "  local ok, old = pcall(cjson.decode, cur)\n"
    "  local med = ok and type(old) == 'table' and tonumber(old['median_us'])\n"
    "  if not med or not (tonumber(ARGV[5]) < med * (1 - tonumber(ARGV[6]))) then\n"
    "    return {0, 'slower', tostring(med)}\n"
    "  end\n"
    "end\n"
    "redis.call('SET', KEYS[1], ARGV[1])\n"
    "redis.call('SADD', KEYS[2], ARGV[2])\n"
    "redis.call('PUBLISH', ARGV[3], KEYS[1])\n"
    "return {1, ARGV[7], ''}\n";

/* KEYS rec, idx; ARGV member. */
static const char FORGET_LUA[] =
    "local n = redis.call('DEL', KEYS[1])\n"
    "redis.call('SREM', KEYS[2], ARGV[1])\n"
    "return n\n";

#define MAX_REPLACE_ATTEMPTS 3
#define MAX_SHAPES 1000000

int tuned__fleet_cmd(tuned__fleet_req *q, int argc, const char **argv, tuned__err *e)
{
    size_t lens[16];
    for (int i = 0; i < argc; i++)
        lens[i] = strlen(argv[i]);
    return tuned__fleet_req_cmd(q, argc, argv, lens, e);
}

void tuned__fleet_fail_reply(tuned__fleet_req *q, const redisReply *r, const char *what)
{
    if (r->type == REDIS_REPLY_ERROR)
        tuned__fleet_finish(q, tuned__fleet_error_status(r->str), "%s: %s", what, r->str);
    else
        tuned__fleet_finish(q, TUNED__FLEET_ERROR, "%s: unexpected reply (type %d)", what,
                            r->type);
}

/* ---- get ---- */

void tuned__fleet_parse_record(tuned__fleet_req *q, const redisReply *r)
{
    char key[TUNED__FLEET_KEY];
    tuned__fleet_key(key, sizeof key, "rec", &q->id);
    if (r->type == REDIS_REPLY_NIL) {
        tuned__fleet_finish(q, TUNED__FLEET_MISS, "no record under %s", key);
        return;
    }
    if (r->type != REDIS_REPLY_STRING) {
        tuned__fleet_fail_reply(q, r, key);
        return;
    }
    tuned__err ce = {0};
    if (tuned__fleet_check_record(r->str, r->len, &q->id, &q->reply.record, &ce) != 0) {
        tuned__fleet_finish(q, TUNED__FLEET_INVALID, "%s: %s", key, ce.msg);
        return;
    }
    q->reply.has_record = true;
    tuned__fleet_finish(q, TUNED__FLEET_OK, NULL);
}

tuned__fleet_req *tuned__fleet_req_for(tuned__fleet *f, const tuned__fleet_id *id, tuned__fleet_cb cb,
                                 void *ctx, tuned__err *e)
{
    if (f == NULL || id == NULL || cb == NULL) {
        tuned__errf(e, TUNED_EINVAL, "fleet: no client, id or callback");
        return NULL;
    }
    if (tuned__fleet_id_check(id, e) != 0)
        return NULL;
    tuned__fleet_req *q = tuned__fleet_req_new(f, cb, ctx, e);
    if (q != NULL)
        q->id = *id;
    return q;
}

static int add_get(tuned__fleet_req *q, tuned__err *e)
{
    char key[TUNED__FLEET_KEY];
    tuned__fleet_key(key, sizeof key, "rec", &q->id);
    const char *argv[] = {"GET", key};
    q->parse = tuned__fleet_parse_record;
    q->is_get = true;
    return tuned__fleet_cmd(q, 2, argv, e);
}

int tuned__fleet_submit_or_free(tuned__fleet_req *q, int rc)
{
    if (rc != 0) {
        free(q->value);
        for (int i = 0; i < q->ncmd; i++)
            redisFreeCommand(q->cmd[i]);
        free(q);
        return rc;
    }
    return tuned__fleet_submit(q);
}

int tuned__fleet_get(tuned__fleet *f, const tuned__fleet_id *id, tuned__fleet_cb cb, void *ctx,
                     tuned__err *e)
{
    tuned__fleet_req *q = tuned__fleet_req_for(f, id, cb, ctx, e);
    if (q == NULL)
        return e != NULL ? e->code : TUNED_EINVAL;
    return tuned__fleet_submit_or_free(q, add_get(q, e));
}

/* ---- publish and replace ---- */

/* r's JSON, checked as a reader will check it, into q->value. */
static int encode_checked(tuned__fleet_req *q, const tuned__record *r, tuned__err *e)
{
    if (r == NULL)
        return tuned__errf(e, TUNED_EINVAL, "fleet: no record");
    char *text = NULL;
    size_t len = 0;
    int rc = tuned__record_encode(r, &text, &len, e);
    if (rc != 0)
        return rc;
    tuned__record back;
    tuned__err ce = {0};
    tuned__fleet_id got;
    tuned__fleet_id_from_record(r, &got);
    if (tuned__fleet_check_record(text, len, &q->id, &back, &ce) != 0)
        rc = tuned__errf(e, TUNED_EINVAL, "fleet: refusing to publish: %s", ce.msg);
    else if (strcmp(got.code, q->id.code) != 0 || strcmp(got.policy, q->id.policy) != 0)
        rc = tuned__errf(e, TUNED_EINVAL, "fleet: refusing to publish a record of code %s, "
                         "policy %s under code %s, policy %s", got.code, got.policy, q->id.code,
                         q->id.policy);
    if (rc != 0) {
        free(text);
        return rc;
    }
    char *z = realloc(text, len + 1); /* the value's text, NUL-ended for the argv helpers */
    if (z == NULL) {
        free(text);
        return tuned__errf(e, TUNED_ENOMEM, "fleet: out of memory");
    }
    z[len] = '\0';
    q->value = z;
    q->value_len = len;
    return 0;
}

static void parse_publish(tuned__fleet_req *q, const redisReply *r)
{
    char key[TUNED__FLEET_KEY];
    tuned__fleet_key(key, sizeof key, "rec", &q->id);
    if (r->type != REDIS_REPLY_INTEGER)
        tuned__fleet_fail_reply(q, r, "publish");
    else if (r->integer == 1)
        tuned__fleet_finish(q, TUNED__FLEET_OK, NULL);
    else
        tuned__fleet_finish(q, TUNED__FLEET_MISS, "a record is stored already under %s", key);
}

int tuned__fleet_publish(tuned__fleet *f, const tuned__fleet_id *id, const tuned__record *r,
                         tuned__fleet_cb cb, void *ctx, tuned__err *e)
{
    tuned__fleet_req *q = tuned__fleet_req_for(f, id, cb, ctx, e);
    if (q == NULL)
        return e != NULL ? e->code : TUNED_EINVAL;
    int rc = encode_checked(q, r, e);
    if (rc == 0) {
        char key[TUNED__FLEET_KEY], idx[TUNED__FLEET_KEY], member[TUNED__FLEET_KEY],
            chan[TUNED__FLEET_KEY];
        tuned__fleet_key(key, sizeof key, "rec", id);
        tuned__fleet_index_key(idx, sizeof idx, id->kernel, id->dtype, id->hwclass);
        tuned__fleet_index_member(member, sizeof member, id);
        tuned__fleet_key(chan, sizeof chan, "done", id);
        const char *argv[] = {"EVAL", PUBLISH_LUA, "2", key, idx, q->value, member, chan};
        q->parse = parse_publish;
        q->is_put = true;
        rc = tuned__fleet_cmd(q, 8, argv, e);
    }
    return tuned__fleet_submit_or_free(q, rc);
}

static void send_replace(tuned__fleet_req *q, const char *expected, size_t expected_len,
                         const char *mode)
{
    char key[TUNED__FLEET_KEY], idx[TUNED__FLEET_KEY], member[TUNED__FLEET_KEY],
        chan[TUNED__FLEET_KEY], med[32], noise[32];
    tuned__fleet_key(key, sizeof key, "rec", &q->id);
    tuned__fleet_index_key(idx, sizeof idx, q->id.kernel, q->id.dtype, q->id.hwclass);
    tuned__fleet_index_member(member, sizeof member, &q->id);
    tuned__fleet_key(chan, sizeof chan, "done", &q->id);
    tuned__record mine;
    tuned__err ce = {0};
    if (tuned__fleet_check_record(q->value, q->value_len, &q->id, &mine, &ce) != 0) {
        tuned__fleet_finish(q, TUNED__FLEET_ERROR, "replace: %s", ce.msg); /* checked at the call */
        return;
    }
    snprintf(med, sizeof med, "%.17g", mine.median_us);
    snprintf(noise, sizeof noise, "%.17g", q->noise);
    const char *argv[] = {"EVAL", REPLACE_LUA, "2", key, idx, q->value, member, chan,
                          expected, med, noise, mode};
    size_t lens[12];
    for (int i = 0; i < 12; i++)
        lens[i] = strlen(argv[i]);
    lens[5] = q->value_len;
    lens[8] = expected_len;
    tuned__fleet_send_step(q, 12, argv, lens);
}

static void parse_replace_cas(tuned__fleet_req *q, const redisReply *r);

/* The stored value: decide whether and how to replace it. */
static void parse_replace_get(tuned__fleet_req *q, const redisReply *r)
{
    char key[TUNED__FLEET_KEY];
    tuned__fleet_key(key, sizeof key, "rec", &q->id);
    q->parse = parse_replace_cas;
    if (r->type == REDIS_REPLY_NIL) {
        q->reply.stored_us = 0;
        send_replace(q, "", 0, "absent");
        return;
    }
    if (r->type != REDIS_REPLY_STRING) {
        tuned__fleet_fail_reply(q, r, key);
        return;
    }
    tuned__record old, mine;
    tuned__err ce = {0};
    if (tuned__fleet_check_record(r->str, r->len, &q->id, &old, &ce) != 0) {
        send_replace(q, r->str, r->len, "swap"); /* an invalid value never blocks a valid one */
        return;
    }
    q->reply.stored_us = old.median_us;
    /* Checked when the replace was asked for: it decodes. */
    (void)tuned__fleet_check_record(q->value, q->value_len, &q->id, &mine, &ce);
    if (!(mine.median_us < old.median_us * (1 - q->noise))) {
        tuned__fleet_finish(q, TUNED__FLEET_MISS, "%s: kept: %.6g us is not faster than the "
                            "stored %.6g us by more than %.3g%%", key, mine.median_us,
                            old.median_us, q->noise * 100);
        return;
    }
    send_replace(q, r->str, r->len, "faster");
}

static void parse_replace_cas(tuned__fleet_req *q, const redisReply *r)
{
    char key[TUNED__FLEET_KEY];
    tuned__fleet_key(key, sizeof key, "rec", &q->id);
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 3 ||
        r->element[0]->type != REDIS_REPLY_INTEGER || r->element[1]->type != REDIS_REPLY_STRING) {
        tuned__fleet_fail_reply(q, r, "replace");
        return;
    }
    if (r->element[0]->integer == 1) {
        tuned__fleet_finish(q, TUNED__FLEET_OK, NULL);
        return;
    }
    if (strcmp(r->element[1]->str, "changed") == 0) {
        if (++q->attempts >= MAX_REPLACE_ATTEMPTS) {
            tuned__fleet_finish(q, TUNED__FLEET_ERROR, "%s: changed by other writers %d times "
                                "during the replace", key, q->attempts);
            return;
        }
        const char *argv[] = {"GET", key};
        size_t lens[] = {3, strlen(key)};
        q->parse = parse_replace_get;
        tuned__fleet_send_step(q, 2, argv, lens);
        return;
    }
    tuned__fleet_finish(q, TUNED__FLEET_MISS, "%s: kept: not faster than the stored record by "
                        "more than %.3g%% (checked by the server)", key, q->noise * 100);
}

int tuned__fleet_replace(tuned__fleet *f, const tuned__fleet_id *id, const tuned__record *r,
                         double noise, tuned__fleet_cb cb, void *ctx, tuned__err *e)
{
    if (!(noise >= 0 && noise <= 0.5))
        return tuned__errf(e, TUNED_EINVAL, "fleet: noise %g is not a fraction in 0..0.5", noise);
    tuned__fleet_req *q = tuned__fleet_req_for(f, id, cb, ctx, e);
    if (q == NULL)
        return e != NULL ? e->code : TUNED_EINVAL;
    q->noise = noise;
    int rc = encode_checked(q, r, e);
    if (rc == 0) {
        char key[TUNED__FLEET_KEY];
        tuned__fleet_key(key, sizeof key, "rec", id);
        const char *argv[] = {"GET", key};
        q->parse = parse_replace_get;
        q->is_put = true;
        rc = tuned__fleet_cmd(q, 2, argv, e);
    }
    return tuned__fleet_submit_or_free(q, rc);
}

/* ---- forget and the index ---- */

static void parse_forget(tuned__fleet_req *q, const redisReply *r)
{
    char key[TUNED__FLEET_KEY];
    tuned__fleet_key(key, sizeof key, "rec", &q->id);
    if (r->type != REDIS_REPLY_INTEGER)
        tuned__fleet_fail_reply(q, r, "forget");
    else if (r->integer > 0)
        tuned__fleet_finish(q, TUNED__FLEET_OK, NULL);
    else
        tuned__fleet_finish(q, TUNED__FLEET_MISS, "no record under %s", key);
}

int tuned__fleet_forget(tuned__fleet *f, const tuned__fleet_id *id, tuned__fleet_cb cb,
                        void *ctx, tuned__err *e)
{
    tuned__fleet_req *q = tuned__fleet_req_for(f, id, cb, ctx, e);
    if (q == NULL)
        return e != NULL ? e->code : TUNED_EINVAL;
    char key[TUNED__FLEET_KEY], idx[TUNED__FLEET_KEY], member[TUNED__FLEET_KEY];
    tuned__fleet_key(key, sizeof key, "rec", id);
    tuned__fleet_index_key(idx, sizeof idx, id->kernel, id->dtype, id->hwclass);
    tuned__fleet_index_member(member, sizeof member, id);
    const char *argv[] = {"EVAL", FORGET_LUA, "2", key, idx, member};
    q->parse = parse_forget;
    return tuned__fleet_submit_or_free(q, tuned__fleet_cmd(q, 6, argv, e));
}

static void parse_shapes(tuned__fleet_req *q, const redisReply *r)
{
    if (r->type != REDIS_REPLY_ARRAY) {
        tuned__fleet_fail_reply(q, r, "shapes");
        return;
    }
    size_t n = r->elements < MAX_SHAPES ? r->elements : MAX_SHAPES;
    q->shapes = calloc(n > 0 ? n : 1, sizeof *q->shapes);
    if (q->shapes == NULL) {
        tuned__fleet_finish(q, TUNED__FLEET_ERROR, "shapes: out of memory");
        return;
    }
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        const redisReply *m = r->element[i];
        if (m->type == REDIS_REPLY_STRING &&
            tuned__fleet_index_parse(m->str, m->len, &q->shapes[k]) == 0)
            k++;
    }
    q->reply.shapes = q->shapes;
    q->reply.n_shapes = k;
    tuned__fleet_finish(q, TUNED__FLEET_OK, NULL);
}

int tuned__fleet_shapes(tuned__fleet *f, uint8_t kernel, uint8_t dtype, const char *hwclass,
                        tuned__fleet_cb cb, void *ctx, tuned__err *e)
{
    tuned__fleet_id id = {.kernel = kernel, .dtype = dtype, .rows = 1, .cols = 1};
    snprintf(id.hwclass, sizeof id.hwclass, "%s", hwclass != NULL ? hwclass : "");
    snprintf(id.toolchain, sizeof id.toolchain, "any");
    snprintf(id.code, sizeof id.code, "any");
    snprintf(id.policy, sizeof id.policy, "any");
    tuned__fleet_req *q = tuned__fleet_req_for(f, &id, cb, ctx, e);
    if (q == NULL)
        return e != NULL ? e->code : TUNED_EINVAL;
    char idx[TUNED__FLEET_KEY];
    tuned__fleet_index_key(idx, sizeof idx, kernel, dtype, id.hwclass);
    const char *argv[] = {"SMEMBERS", idx};
    q->parse = parse_shapes;
    return tuned__fleet_submit_or_free(q, tuned__fleet_cmd(q, 2, argv, e));
}

/* ---- wait ---- */

int tuned__fleet_wait(tuned__fleet *f, const tuned__fleet_id *id, unsigned timeout_ms,
                      tuned__fleet_cb cb, void *ctx, tuned__err *e)
{
    if (timeout_ms == 0)
        return tuned__errf(e, TUNED_EINVAL, "fleet: wait needs a timeout > 0");
    tuned__fleet_req *w = tuned__fleet_req_for(f, id, cb, ctx, e);
    if (w == NULL)
        return e != NULL ? e->code : TUNED_EINVAL;
    double now = tuned__now_s();
    w->deadline = now + timeout_ms / 1000.0;
    w->next_poll = now; /* it may be there already */
    tuned__fleet_key(w->channel, sizeof w->channel, "done", id);
    w->reply.status = TUNED__FLEET_TIMEOUT;
    if (f->closing) {
        tuned__fleet_list_push(&f->open, &w->link);
        tuned__fleet_finish(w, TUNED__FLEET_CLOSED, "the client is closing");
        return 0;
    }
    tuned__fleet_list_push(&f->waiters, &w->link);
    if (!f->sub.started) {
        f->sub.started = true;
        tuned__fleet_conn_connect(&f->sub);
    }
    tuned__fleet_reschedule(f);
    return 0;
}

void tuned__fleet_wait_poll(tuned__fleet_req *w)
{
    tuned__fleet *f = w->f;
    tuned__fleet_req *p = tuned__fleet_req_new(f, NULL, NULL, NULL);
    if (p != NULL) {
        p->id = w->id;
        if (add_get(p, NULL) != 0) {
            tuned__fleet_submit_or_free(p, TUNED_ENOMEM);
            p = NULL;
        }
    }
    if (p == NULL) { /* out of memory: try at the next interval */
        w->next_poll = tuned__now_s() + f->poll_ms / 1000.0;
        return;
    }
    p->parent = w;
    w->child = p;
    tuned__fleet_submit(p);
}

void tuned__fleet_wait_polled(tuned__fleet_req *w, tuned__fleet_req *p)
{
    w->child = NULL;
    if (w->finished)
        return;
    if (p->reply.status == TUNED__FLEET_OK) {
        w->reply.record = p->reply.record;
        w->reply.has_record = true;
        tuned__fleet_finish(w, TUNED__FLEET_OK, NULL);
        return;
    }
    if (p->reply.status == TUNED__FLEET_INVALID) {
        w->reply.status = TUNED__FLEET_INVALID; /* remembered for the timeout */
        w->reply.err = p->reply.err;
    } else if (p->reply.status == TUNED__FLEET_MISS) {
        w->reply.status = TUNED__FLEET_TIMEOUT;
    }
    w->next_poll = tuned__now_s() + w->f->poll_ms / 1000.0;
    tuned__fleet_reschedule(w->f);
}

void tuned__fleet_wait_end(tuned__fleet_req *w, tuned__fleet_status status)
{
    if (w->child != NULL) {
        w->child->parent = NULL; /* its reply is nobody's now */
        w->child = NULL;
    }
    char key[TUNED__FLEET_KEY];
    tuned__fleet_key(key, sizeof key, "rec", &w->id);
    if (status == TUNED__FLEET_TIMEOUT && w->reply.status == TUNED__FLEET_INVALID) {
        char why[TUNED__ERR_MSG];
        snprintf(why, sizeof why, "%s", w->reply.err.msg);
        tuned__fleet_finish(w, TUNED__FLEET_INVALID, "%s", why);
    } else if (status == TUNED__FLEET_TIMEOUT) {
        tuned__fleet_finish(w, status, "no valid record under %s within the wait", key);
    } else {
        tuned__fleet_finish(w, status, "the client was closed");
    }
}
