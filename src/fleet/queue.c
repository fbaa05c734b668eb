/* queue.c: the fleet queue. A daemon asked to tune a shape for a GPU
 * model it does not have pushes a job onto that hardware class's stream,
 * tuned:v1:queue:HWCLASS; every daemon with that model reads the stream
 * in one consumer group (XREADGROUP), so each job goes to one of them,
 * and acknowledges it when the tune is done (XACK). A job read by a
 * consumer that died stays pending; after an idle time another consumer
 * takes it over (XAUTOCLAIM). A mark, tuned:v1:queued:<shape>:HWCLASS,
 * holding the entry id, keeps one job per shape in the queue at a time.
 *
 * An entry is a flat list of fields: v (1), kernel, dtype, rows, cols,
 * layout, hwclass, toolchain, code, policy, origin, params. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cache/key.h"
#include "src/fleet/internal.h"
#include "tuned.h"

#define MAX_CLASSES (TUNED__FLEET_CMDS - 1)
#define STREAM_MAXLEN "100000" /* approximate cap of a stream (acknowledged jobs age out) */

/* KEYS stream, mark; ARGV group, ttl ms, fields... Returns {queued, id}. */
static const char PUSH_LUA[] =
    "if not redis.call('SET', KEYS[2], 'pending', 'NX', 'PX', ARGV[2]) then\n"
    "  return {0, redis.call('GET', KEYS[2]) or ''}\n"
    "end\n"
    "redis.pcall('XGROUP', 'CREATE', KEYS[1], ARGV[1], '0', 'MKSTREAM')\n"
    "local id = redis.call('XADD', KEYS[1], 'MAXLEN', '~', '" STREAM_MAXLEN "', '*',"
    " unpack(ARGV, 3))\n"
    "redis.call('SET', KEYS[2], id, 'PX', ARGV[2])\n"
    "return {1, id}\n";

/* KEYS stream, mark; ARGV group, entry id. */
static const char ACK_LUA[] =
    "local n = redis.call('XACK', KEYS[1], ARGV[1], ARGV[2])\n"
    "if redis.call('GET', KEYS[2]) == ARGV[2] then redis.call('DEL', KEYS[2]) end\n"
    "return n\n";

/* ---- push ---- */

static void parse_push(tuned__fleet_req *q, const redisReply *r)
{
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
        r->element[0]->type != REDIS_REPLY_INTEGER || r->element[1]->type != REDIS_REPLY_STRING) {
        tuned__fleet_fail_reply(q, r, "queue push");
        return;
    }
    snprintf(q->reply.entry, sizeof q->reply.entry, "%s", r->element[1]->str);
    if (r->element[0]->integer == 1)
        tuned__fleet_finish(q, TUNED__FLEET_OK, NULL);
    else
        tuned__fleet_finish(q, TUNED__FLEET_MISS, "a job of that shape is queued already (%s)",
                            q->reply.entry);
}

int tuned__fleet_queue_push(tuned__fleet *f, const tuned__fleet_id *id, const char *params,
                            unsigned ttl_ms, tuned__fleet_cb cb, void *ctx, tuned__err *e)
{
    if (ttl_ms == 0)
        return tuned__errf(e, TUNED_EINVAL, "fleet: a queued job needs a ttl > 0");
    if (params != NULL && strlen(params) >= sizeof ((tuned__fleet_job *)0)->params)
        return tuned__errf(e, TUNED_EINVAL, "fleet: job params longer than %zu bytes",
                           sizeof ((tuned__fleet_job *)0)->params - 1);
    tuned__fleet_req *q = tuned__fleet_req_for(f, id, cb, ctx, e);
    if (q == NULL)
        return e != NULL ? e->code : TUNED_EINVAL;
    char stream[TUNED__FLEET_KEY], mark[TUNED__FLEET_KEY], ttl[16], rows[24], cols[24], lb[8];
    tuned__fleet_queue_key(stream, sizeof stream, id->hwclass);
    tuned__fleet_queued_key(mark, sizeof mark, id);
    snprintf(ttl, sizeof ttl, "%u", ttl_ms);
    snprintf(rows, sizeof rows, "%" PRIu64, id->rows);
    snprintf(cols, sizeof cols, "%" PRIu64, id->cols);
    const char *argv[] = {
        "EVAL", PUSH_LUA, "2", stream, mark, f->group, ttl,
        "v", "1",
        "kernel", tuned__kernel_name(id->kernel),
        "dtype", tuned_dtype_name((tuned_dtype)id->dtype),
        "rows", rows, "cols", cols,
        "layout", tuned__fleet_layout_text(id->layout, lb, sizeof lb),
        "hwclass", id->hwclass, "toolchain", id->toolchain, "code", id->code,
        "policy", id->policy, "origin", f->owner, "params", params != NULL ? params : "",
    };
    size_t argc = sizeof argv / sizeof argv[0];
    size_t lens[sizeof argv / sizeof argv[0]];
    for (size_t i = 0; i < argc; i++)
        lens[i] = strlen(argv[i]);
    q->parse = parse_push;
    return tuned__fleet_submit_or_free(q, tuned__fleet_req_cmd(q, (int)argc, argv, lens, e));
}

/* ---- read and reclaim ---- */

static const redisReply *field(const redisReply *fields, const char *name)
{
    for (size_t i = 0; i + 1 < fields->elements; i += 2) {
        const redisReply *k = fields->element[i];
        if (k->type == REDIS_REPLY_STRING && strcmp(k->str, name) == 0 &&
            fields->element[i + 1]->type == REDIS_REPLY_STRING)
            return fields->element[i + 1];
    }
    return NULL;
}

static int copy_field(const redisReply *fields, const char *name, char *out, size_t n)
{
    const redisReply *v = field(fields, name);
    if (v == NULL || v->len >= n)
        return -1;
    memcpy(out, v->str, v->len);
    out[v->len] = '\0';
    return 0;
}

/* One stream entry [id, [field, value, ...]] of the stream of hwclass
 * into job: 0, or -1 for a malformed one. */
static int parse_job(const redisReply *entry, const char *hwclass, tuned__fleet_job *job)
{
    memset(job, 0, sizeof *job);
    if (entry->type != REDIS_REPLY_ARRAY || entry->elements != 2 ||
        entry->element[0]->type != REDIS_REPLY_STRING ||
        entry->element[0]->len >= sizeof job->entry)
        return -1;
    memcpy(job->entry, entry->element[0]->str, entry->element[0]->len);
    const redisReply *fields = entry->element[1];
    if (fields->type != REDIS_REPLY_ARRAY)
        return -1;
    char v[8], kernel[32], dtype[16], rows[24], cols[24], layout[8];
    char tail;
    tuned_dtype dt;
    if (copy_field(fields, "v", v, sizeof v) != 0 || strcmp(v, "1") != 0 ||
        copy_field(fields, "kernel", kernel, sizeof kernel) != 0 ||
        tuned__kernel_parse(kernel, &job->id.kernel) != 0 ||
        copy_field(fields, "dtype", dtype, sizeof dtype) != 0 ||
        tuned_dtype_parse(dtype, &dt) != 0 ||
        copy_field(fields, "rows", rows, sizeof rows) != 0 ||
        sscanf(rows, "%" SCNu64 "%c", &job->id.rows, &tail) != 1 ||
        copy_field(fields, "cols", cols, sizeof cols) != 0 ||
        sscanf(cols, "%" SCNu64 "%c", &job->id.cols, &tail) != 1 ||
        copy_field(fields, "layout", layout, sizeof layout) != 0 ||
        tuned__fleet_layout_parse(layout, &job->id.layout) != 0 ||
        copy_field(fields, "hwclass", job->id.hwclass, sizeof job->id.hwclass) != 0 ||
        copy_field(fields, "toolchain", job->id.toolchain, sizeof job->id.toolchain) != 0 ||
        copy_field(fields, "code", job->id.code, sizeof job->id.code) != 0 ||
        copy_field(fields, "policy", job->id.policy, sizeof job->id.policy) != 0 ||
        copy_field(fields, "origin", job->origin, sizeof job->origin) != 0 ||
        copy_field(fields, "params", job->params, sizeof job->params) != 0)
        return -1;
    job->id.dtype = (uint8_t)dt;
    if (tuned__fleet_id_check(&job->id, NULL) != 0 || strcmp(job->id.hwclass, hwclass) != 0)
        return -1;
    return 0;
}

/* Appends the entries of one stream to q's jobs; a malformed entry is
 * acknowledged away (it would come back to every consumer otherwise). */
static int add_entries(tuned__fleet_req *q, const char *stream, const redisReply *entries,
                       size_t *cap)
{
    tuned__fleet *f = q->f;
    const char *hwclass = stream + strlen(TUNED__FLEET_PREFIX ":queue:");
    for (size_t i = 0; i < entries->elements; i++) {
        if (q->reply.n_jobs == *cap) {
            size_t ncap = *cap ? *cap * 2 : 8;
            tuned__fleet_job *nj = realloc(q->jobs, ncap * sizeof *nj);
            if (nj == NULL)
                return -1;
            q->jobs = nj;
            *cap = ncap;
        }
        tuned__fleet_job *job = &q->jobs[q->reply.n_jobs];
        if (parse_job(entries->element[i], hwclass, job) == 0) {
            q->reply.n_jobs++;
            continue;
        }
        f->st.jobs_invalid++;
        const redisReply *id = entries->element[i];
        if (id->type == REDIS_REPLY_ARRAY && id->elements >= 1 &&
            id->element[0]->type == REDIS_REPLY_STRING) {
            const char *argv[] = {"XACK", stream, f->group, id->element[0]->str};
            size_t lens[] = {4, strlen(stream), strlen(f->group), id->element[0]->len};
            tuned__fleet_send_forget(f, 4, argv, lens);
        }
    }
    return 0;
}

static void parse_read(tuned__fleet_req *q, const redisReply *r)
{
    size_t cap = 0;
    if (r->type == REDIS_REPLY_NIL) { /* nothing new */
        tuned__fleet_finish(q, TUNED__FLEET_OK, NULL);
        return;
    }
    if (r->type != REDIS_REPLY_ARRAY) {
        tuned__fleet_fail_reply(q, r, "queue read");
        return;
    }
    for (size_t s = 0; s < r->elements; s++) {
        const redisReply *st = r->element[s];
        if (st->type != REDIS_REPLY_ARRAY || st->elements != 2 ||
            st->element[0]->type != REDIS_REPLY_STRING ||
            st->element[1]->type != REDIS_REPLY_ARRAY) {
            tuned__fleet_finish(q, TUNED__FLEET_ERROR, "queue read: a reply of unexpected form");
            return;
        }
        if (add_entries(q, st->element[0]->str, st->element[1], &cap) != 0) {
            tuned__fleet_finish(q, TUNED__FLEET_ERROR, "queue read: out of memory");
            return;
        }
    }
    q->reply.jobs = q->jobs;
    tuned__fleet_finish(q, TUNED__FLEET_OK, NULL);
}

static tuned__fleet_req *queue_req(tuned__fleet *f, tuned__fleet_cb cb, void *ctx, tuned__err *e)
{
    if (f == NULL || cb == NULL) {
        tuned__errf(e, TUNED_EINVAL, "fleet: no client or callback");
        return NULL;
    }
    return tuned__fleet_req_new(f, cb, ctx, e);
}

/* XGROUP CREATE for stream, its reply unread (BUSYGROUP when it exists). */
static int add_group(tuned__fleet_req *q, const char *stream, tuned__err *e)
{
    const char *argv[] = {"XGROUP", "CREATE", stream, q->f->group, "0", "MKSTREAM"};
    return tuned__fleet_cmd(q, 6, argv, e);
}

int tuned__fleet_queue_read(tuned__fleet *f, const char *const *hwclasses, size_t n,
                            unsigned count, tuned__fleet_cb cb, void *ctx, tuned__err *e)
{
    if (n == 0 || n > MAX_CLASSES || hwclasses == NULL || count == 0)
        return tuned__errf(e, TUNED_EINVAL, "fleet: read 1..%d hardware classes, count > 0",
                           MAX_CLASSES);
    for (size_t i = 0; i < n; i++)
        if (hwclasses[i] == NULL || !tuned__fleet_name_ok(hwclasses[i]))
            return tuned__errf(e, TUNED_EINVAL, "fleet: hwclass '%.63s' is not 1..63 of "
                               "[A-Za-z0-9._+-]", hwclasses[i] != NULL ? hwclasses[i] : "");
    tuned__fleet_req *q = queue_req(f, cb, ctx, e);
    if (q == NULL)
        return e != NULL ? e->code : TUNED_ENOMEM;
    char streams[MAX_CLASSES][TUNED__FLEET_KEY], cnt[16];
    const char *argv[7 + 2 * MAX_CLASSES];
    int argc = 0, rc = 0;
    snprintf(cnt, sizeof cnt, "%u", count);
    argv[argc++] = "XREADGROUP";
    argv[argc++] = "GROUP";
    argv[argc++] = f->group;
    argv[argc++] = f->owner;
    argv[argc++] = "COUNT";
    argv[argc++] = cnt;
    argv[argc++] = "STREAMS";
    for (size_t i = 0; i < n; i++) {
        tuned__fleet_queue_key(streams[i], sizeof streams[i], hwclasses[i]);
        argv[argc++] = streams[i];
        if (rc == 0)
            rc = add_group(q, streams[i], e);
    }
    for (size_t i = 0; i < n; i++)
        argv[argc++] = ">";
    q->parse = parse_read;
    if (rc == 0)
        rc = tuned__fleet_cmd(q, argc, argv, e);
    return tuned__fleet_submit_or_free(q, rc);
}

static void parse_reclaim(tuned__fleet_req *q, const redisReply *r)
{
    size_t cap = 0;
    /* [next cursor, entries, deleted ids] */
    if (r->type != REDIS_REPLY_ARRAY || r->elements < 2 ||
        r->element[1]->type != REDIS_REPLY_ARRAY) {
        tuned__fleet_fail_reply(q, r, "queue reclaim");
        return;
    }
    const redisReply *next = r->element[0];
    if ((next->type != REDIS_REPLY_STRING && next->type != REDIS_REPLY_STATUS) ||
        next->len == 0 || next->len >= sizeof q->reply.entry) {
        tuned__fleet_fail_reply(q, r, "queue reclaim");
        return;
    }
    memcpy(q->reply.entry, next->str, next->len);
    q->reply.entry[next->len] = '\0';
    char stream[TUNED__FLEET_KEY];
    tuned__fleet_queue_key(stream, sizeof stream, q->id.hwclass);
    if (add_entries(q, stream, r->element[1], &cap) != 0) {
        tuned__fleet_finish(q, TUNED__FLEET_ERROR, "queue reclaim: out of memory");
        return;
    }
    q->reply.jobs = q->jobs;
    tuned__fleet_finish(q, TUNED__FLEET_OK, NULL);
}

/* Whether s is a stream entry id, "MS-SEQ" in decimal. */
static bool entry_id_ok(const char *s)
{
    size_t n = strnlen(s, 48), dash = strcspn(s, "-");
    if (n == 0 || n == 48 || dash == 0 || dash >= n - 1)
        return false;
    for (size_t i = 0; i < n; i++)
        if (i != dash && (s[i] < '0' || s[i] > '9'))
            return false;
    return true;
}

int tuned__fleet_queue_reclaim(tuned__fleet *f, const char *hwclass, const char *from,
                               unsigned min_idle_ms, unsigned count, tuned__fleet_cb cb, void *ctx,
                               tuned__err *e)
{
    if (hwclass == NULL || !tuned__fleet_name_ok(hwclass) || count == 0)
        return tuned__errf(e, TUNED_EINVAL, "fleet: reclaim needs a hwclass of [A-Za-z0-9._+-] "
                           "and count > 0");
    if (from == NULL || from[0] == '\0')
        from = "0-0";
    if (!entry_id_ok(from))
        return tuned__errf(e, TUNED_EINVAL, "fleet: reclaim from '%.48s': not a stream entry id",
                           from);
    tuned__fleet_req *q = queue_req(f, cb, ctx, e);
    if (q == NULL)
        return e != NULL ? e->code : TUNED_ENOMEM;
    snprintf(q->id.hwclass, sizeof q->id.hwclass, "%s", hwclass);
    char stream[TUNED__FLEET_KEY], idle[16], cnt[16];
    tuned__fleet_queue_key(stream, sizeof stream, hwclass);
    snprintf(idle, sizeof idle, "%u", min_idle_ms);
    snprintf(cnt, sizeof cnt, "%u", count);
    const char *argv[] = {"XAUTOCLAIM", stream, f->group, f->owner, idle, from, "COUNT", cnt};
    q->parse = parse_reclaim;
    int rc = add_group(q, stream, e);
    if (rc == 0)
        rc = tuned__fleet_cmd(q, 8, argv, e);
    return tuned__fleet_submit_or_free(q, rc);
}

/* ---- ack ---- */

static void parse_ack(tuned__fleet_req *q, const redisReply *r)
{
    if (r->type != REDIS_REPLY_INTEGER)
        tuned__fleet_fail_reply(q, r, "queue ack");
    else if (r->integer > 0)
        tuned__fleet_finish(q, TUNED__FLEET_OK, NULL);
    else
        tuned__fleet_finish(q, TUNED__FLEET_MISS, "job was not pending");
}

int tuned__fleet_queue_ack(tuned__fleet *f, const tuned__fleet_job *job, tuned__fleet_cb cb,
                           void *ctx, tuned__err *e)
{
    if (job == NULL || job->entry[0] == '\0')
        return tuned__errf(e, TUNED_EINVAL, "fleet: no job to acknowledge");
    tuned__fleet_req *q = tuned__fleet_req_for(f, &job->id, cb, ctx, e);
    if (q == NULL)
        return e != NULL ? e->code : TUNED_EINVAL;
    char stream[TUNED__FLEET_KEY], mark[TUNED__FLEET_KEY];
    tuned__fleet_queue_key(stream, sizeof stream, job->id.hwclass);
    tuned__fleet_queued_key(mark, sizeof mark, &job->id);
    const char *argv[] = {"EVAL", ACK_LUA, "2", stream, mark, f->group, job->entry};
    q->parse = parse_ack;
    return tuned__fleet_submit_or_free(q, tuned__fleet_cmd(q, 7, argv, e));
}
