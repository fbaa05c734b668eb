/* lease.c: single flight across the fleet. Before tuning a key a daemon
 * takes its lease, tuned:v1:lock:<key>, a string holding the owner's name
 * with a time to live: SET NX PX takes it, and only the owner may renew it
 * (PEXPIRE) or release it (DEL), each a Lua script that checks the owner
 * and acts in one step. A daemon that dies stops renewing; its lease
 * expires and the next daemon that asks takes it. Every script answers
 * {held, holder, ttl ms}. */
#include <stdio.h>
#include <string.h>

#include "src/fleet/internal.h"
#include "tuned.h"

/* KEYS lock; ARGV owner, ttl ms. */
static const char ACQUIRE_LUA[] =
    "if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then\n"
    "  return {1, ARGV[1], tonumber(ARGV[2])}\n"
    "end\n"
    "local cur = redis.call('GET', KEYS[1])\n"
    "if cur == ARGV[1] then\n"
    "  redis.call('PEXPIRE', KEYS[1], ARGV[2])\n"
    "  return {1, cur, tonumber(ARGV[2])}\n"
    "end\n"
    "return {0, cur or '', redis.call('PTTL', KEYS[1])}\n";

static const char RENEW_LUA[] =
    "local cur = redis.call('GET', KEYS[1])\n"
    "if cur == ARGV[1] then\n"
    "  redis.call('PEXPIRE', KEYS[1], ARGV[2])\n"
    "  return {1, cur, tonumber(ARGV[2])}\n"
    "end\n"
    "return {0, cur or '', redis.call('PTTL', KEYS[1])}\n";

static const char RELEASE_LUA[] =
    "local cur = redis.call('GET', KEYS[1])\n"
    "if cur == ARGV[1] then\n"
    "  redis.call('DEL', KEYS[1])\n"
    "  return {1, '', -2}\n"
    "end\n"
    "return {0, cur or '', redis.call('PTTL', KEYS[1])}\n";

static void parse_lease(tuned__fleet_req *q, const redisReply *r)
{
    char key[TUNED__FLEET_KEY];
    tuned__fleet_key(key, sizeof key, "lock", &q->id);
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 3 ||
        r->element[0]->type != REDIS_REPLY_INTEGER || r->element[1]->type != REDIS_REPLY_STRING ||
        r->element[2]->type != REDIS_REPLY_INTEGER) {
        tuned__fleet_fail_reply(q, r, key);
        return;
    }
    snprintf(q->reply.holder, sizeof q->reply.holder, "%s", r->element[1]->str);
    q->reply.ttl_ms = r->element[2]->integer;
    if (r->element[0]->integer == 1)
        tuned__fleet_finish(q, TUNED__FLEET_OK, NULL);
    else if (q->reply.holder[0] != '\0')
        tuned__fleet_finish(q, TUNED__FLEET_MISS, "%s is held by %s for %lld ms more", key,
                            q->reply.holder, (long long)q->reply.ttl_ms);
    else
        tuned__fleet_finish(q, TUNED__FLEET_MISS, "%s is not held", key);
}

static int lease(tuned__fleet *f, const tuned__fleet_id *id, const char *script, unsigned ttl_ms,
                 bool with_ttl, tuned__fleet_cb cb, void *ctx, tuned__err *e)
{
    if (with_ttl && ttl_ms == 0)
        return tuned__errf(e, TUNED_EINVAL, "fleet: a lease needs a ttl > 0");
    tuned__fleet_req *q = tuned__fleet_req_for(f, id, cb, ctx, e);
    if (q == NULL)
        return e != NULL ? e->code : TUNED_EINVAL;
    char key[TUNED__FLEET_KEY], ttl[16];
    tuned__fleet_key(key, sizeof key, "lock", id);
    snprintf(ttl, sizeof ttl, "%u", ttl_ms);
    const char *argv[] = {"EVAL", script, "1", key, f->owner, ttl};
    q->parse = parse_lease;
    return tuned__fleet_submit_or_free(q, tuned__fleet_cmd(q, with_ttl ? 6 : 5, argv, e));
}

int tuned__fleet_lease_acquire(tuned__fleet *f, const tuned__fleet_id *id, unsigned ttl_ms,
                               tuned__fleet_cb cb, void *ctx, tuned__err *e)
{
    return lease(f, id, ACQUIRE_LUA, ttl_ms, true, cb, ctx, e);
}

int tuned__fleet_lease_renew(tuned__fleet *f, const tuned__fleet_id *id, unsigned ttl_ms,
                             tuned__fleet_cb cb, void *ctx, tuned__err *e)
{
    return lease(f, id, RENEW_LUA, ttl_ms, true, cb, ctx, e);
}

int tuned__fleet_lease_release(tuned__fleet *f, const tuned__fleet_id *id, tuned__fleet_cb cb,
                               void *ctx, tuned__err *e)
{
    return lease(f, id, RELEASE_LUA, 0, false, cb, ctx, e);
}
