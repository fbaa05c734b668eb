/* test_fleet.c: the remote tier (src/fleet) against a real redis-server.
 *
 * The run starts its own redis-server on a Unix socket in a temporary
 * directory (no TCP port, no persistence) and stops it at the end; exit
 * 77 when redis-server is not installed. A synchronous hiredis connection
 * ("admin") plants values, users and stream entries behind the client's
 * back. Cases: URL and credential parsing; get miss and hit, SET NX twice,
 * the index; compare-and-set faster-only and not within the noise; planted
 * invalid records (a wrong config text, an impossible time, an identity
 * mismatch, garbage), a stale one, and forget; leases (two contenders, an
 * owner that stops renewing, renew and release by a non-owner); waiting
 * for a record woken by the notification, and by polling when the
 * notification is lost; the queue (push, read, ack, a malformed entry, a
 * dead consumer's job reclaimed); Redis stopped (SIGSTOP) for 1.5 s: calls
 * end within their timeouts while a loop timer keeps ticking, then the
 * client continues; Redis killed and restarted on the same socket: down,
 * backoff, reconnect; ACL users (a reader that can read but not publish,
 * credentials from a file and from a variable, a wrong password); close
 * with operations pending. Every callback is counted: each must fire
 * exactly once. Every loop runs under a deadline; an alarm ends a stuck
 * run. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <hiredis/hiredis.h>
#include <uv.h>

#include "cache/record.h"
#include "src/codegen/config.h"
#include "src/common/clock.h"
#include "src/fleet/fleet.h"
#include "src/tuner/policy.h"
#include "tests/expect.h"

extern char **environ;

static char dir[256], sock[300], logpath[300];
static pid_t redis_pid = -1;
static uv_loop_t loop;

/* ---- the server ---- */

static bool on_path(const char *name)
{
    const char *path = getenv("PATH");
    char buf[1024];
    while (path != NULL && *path != '\0') {
        size_t n = strcspn(path, ":");
        snprintf(buf, sizeof buf, "%.*s/%s", (int)n, path, name);
        if (access(buf, X_OK) == 0)
            return true;
        path += n + (path[n] == ':');
    }
    return false;
}

static redisContext *admin_ctx;

static redisContext *admin(void)
{
    if (admin_ctx != NULL && admin_ctx->err == 0)
        return admin_ctx;
    if (admin_ctx != NULL)
        redisFree(admin_ctx);
    struct timeval tv = {2, 0};
    admin_ctx = redisConnectUnixWithTimeout(sock, tv);
    if (admin_ctx != NULL && admin_ctx->err == 0)
        redisSetTimeout(admin_ctx, tv);
    return admin_ctx;
}

static void admin_drop(void)
{
    if (admin_ctx != NULL)
        redisFree(admin_ctx);
    admin_ctx = NULL;
}

/* Runs one command on the admin connection; the reply's type, or -1. */
static int admin_cmd(redisReply **out, const char *fmt, ...)
{
    redisContext *c = admin();
    if (c == NULL || c->err) {
        admin_drop();
        return -1;
    }
    va_list ap;
    va_start(ap, fmt);
    redisReply *r = redisvCommand(c, fmt, ap);
    va_end(ap);
    if (r == NULL) {
        admin_drop();
        return -1;
    }
    int type = r->type;
    if (type == REDIS_REPLY_ERROR)
        fprintf(stderr, "admin: %s\n", r->str);
    if (out != NULL)
        *out = r;
    else
        freeReplyObject(r);
    return type;
}

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static int redis_start(void)
{
    char *argv[] = {"redis-server", "--port", "0", "--unixsocket", sock, "--unixsocketperm",
                    "700", "--save", "", "--appendonly", "no", "--dir", dir, "--logfile",
                    logpath, NULL};
    /* its output goes to the log, not to the test's pipes (a server left
     * behind by a crashed run must not hold them open) */
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
    int rc = posix_spawnp(&redis_pid, "redis-server", &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    if (rc != 0) {
        redis_pid = -1;
        return -1;
    }
    admin_drop();
    double end = tuned__now_s() + 10;
    while (tuned__now_s() < end) {
        redisReply *r = NULL;
        if (admin_cmd(&r, "PING") == REDIS_REPLY_STATUS) {
            freeReplyObject(r);
            return 0;
        }
        if (r != NULL)
            freeReplyObject(r);
        sleep_ms(20);
    }
    return -1;
}

static void redis_kill(int sig)
{
    if (redis_pid <= 0)
        return;
    kill(redis_pid, sig);
    double end = tuned__now_s() + 10;
    int st;
    while (waitpid(redis_pid, &st, WNOHANG) == 0) {
        if (tuned__now_s() > end) {
            kill(redis_pid, SIGKILL);
            waitpid(redis_pid, &st, 0);
            break;
        }
        sleep_ms(10);
    }
    redis_pid = -1;
    admin_drop();
}

static void dump_redis_log(void)
{
    FILE *in = fopen(logpath, "r");
    char line[512];
    fprintf(stderr, "---- redis log ----\n");
    while (in != NULL && fgets(line, sizeof line, in) != NULL)
        fputs(line, stderr);
    if (in != NULL)
        fclose(in);
}

/* ---- the loop ---- */

static void on_flag_timer(uv_timer_t *t)
{
    *(bool *)t->data = true;
}

/* Runs the loop until *fired > 0 (or for ms when fired is NULL); whether
 * it happened within ms. */
static bool run_until(const int *fired, int ms)
{
    bool expired = false;
    uv_timer_t t;
    uv_timer_init(&loop, &t);
    t.data = &expired;
    uv_timer_start(&t, on_flag_timer, (uint64_t)ms, 0);
    while (!expired && (fired == NULL || *fired == 0))
        uv_run(&loop, UV_RUN_ONCE);
    uv_close((uv_handle_t *)&t, NULL);
    uv_run(&loop, UV_RUN_NOWAIT);
    return fired == NULL || *fired > 0;
}

static void run_for(int ms)
{
    run_until(NULL, ms);
}

/* What a callback saw. Every result is registered, so the end can check
 * that each callback fired exactly once. */
typedef struct result {
    int fired;
    double at;
    tuned__fleet_reply r;
    tuned__fleet_job jobs[8];
    size_t n_jobs;
    tuned__fleet_shape shapes[8];
    size_t n_shapes;
} result;

#define MAX_RESULTS 512
static result *results[MAX_RESULTS];
static size_t n_results;

static result *res(void)
{
    result *x = calloc(1, sizeof *x);
    if (x == NULL || n_results == MAX_RESULTS) {
        fprintf(stderr, "test: out of result slots\n");
        exit(1);
    }
    results[n_results++] = x;
    return x;
}

static void on_reply(void *ctx, const tuned__fleet_reply *r)
{
    result *x = ctx;
    x->fired++;
    x->at = tuned__now_s();
    x->r = *r;
    x->r.jobs = NULL;
    x->r.shapes = NULL;
    x->n_jobs = r->n_jobs < 8 ? r->n_jobs : 8;
    if (x->n_jobs > 0)
        memcpy(x->jobs, r->jobs, x->n_jobs * sizeof *x->jobs);
    x->n_shapes = r->n_shapes < 8 ? r->n_shapes : 8;
    if (x->n_shapes > 0)
        memcpy(x->shapes, r->shapes, x->n_shapes * sizeof *x->shapes);
}

/* Waits for x (5 s at most) and returns its status, or -1. */
static int wait_res(result *x)
{
    if (!run_until(&x->fired, 5000))
        return -1;
    return (int)x->r.status;
}

#define ST(s) tuned__fleet_status_name((tuned__fleet_status)(s))
#define EXPECT_STATUS(x, want)                                                                  \
    do {                                                                                        \
        int got_ = wait_res(x);                                                                 \
        EXPECT(got_ == (int)(want), "status %s (%s), want %s", got_ < 0 ? "none" : ST(got_),    \
               (x)->r.err.msg, ST(want));                                                       \
    } while (0)

/* ---- clients ---- */

static tuned__fleet *open_client(const char *owner, unsigned poll_ms, const char *cred_file,
                                 const char *cred_env)
{
    tuned__fleet_opts o;
    tuned__fleet_opts_init(&o);
    char url[400];
    snprintf(url, sizeof url, "unix://%s", sock);
    o.url = url;
    o.owner = owner;
    o.poll_ms = poll_ms;
    o.timeout_ms = 1000;
    o.connect_timeout_ms = 1000;
    o.backoff_min_ms = 50;
    o.backoff_max_ms = 400;
    o.credentials_file = cred_file;
    o.credentials_env = cred_env;
    tuned__fleet *f = NULL;
    tuned__err e = {0};
    int rc = tuned__fleet_open(&loop, &o, &f, &e);
    EXPECT(rc == 0, "open %s: %s", owner, e.msg);
    return f;
}

static void on_closed(void *ctx)
{
    (*(int *)ctx)++;
}

static void close_client(tuned__fleet *f)
{
    if (f == NULL)
        return;
    int closed = 0;
    tuned__fleet_close(f, on_closed, &closed);
    EXPECT(run_until(&closed, 3000), "close did not finish");
}

static bool wait_connected(tuned__fleet *f, int ms)
{
    double end = tuned__now_s() + ms / 1000.0;
    tuned__fleet_stats st;
    for (;;) {
        tuned__fleet_stats_get(f, &st);
        if (st.state == TUNED__FLEET_STATE_CONNECTED || tuned__now_s() > end)
            return st.state == TUNED__FLEET_STATE_CONNECTED;
        run_for(10);
    }
}

/* ---- records ---- */

#define CONFIG "w8.r1.c1.m1.v8.ld=nc.st=def.reg=pk"

static tuned__record make_record(uint64_t rows, uint64_t cols, double median_us)
{
    tuned__record r;
    memset(&r, 0, sizeof r);
    r.key.kernel = TUNED_KERNEL_SOFTMAX;
    r.key.dtype = TUNED_FP16;
    r.key.rows = rows;
    r.key.cols = cols;
    r.key.layout = TUNED__LAYOUT_DENSE;
    snprintf(r.config, sizeof r.config, CONFIG);
    snprintf(r.gpu_name, sizeof r.gpu_name, "NVIDIA H100 80GB HBM3");
    snprintf(r.gpu, sizeof r.gpu,
             "NVIDIA H100 80GB HBM3|sm_90|132sm|81559MiB|drv13000|nvrtc13.0|tpl0123456789abcdef");
    r.key.gpu_fp = tuned__store_gpu_fingerprint(r.gpu);
    r.prov.cc_major = 9;
    r.prov.cc_minor = 0;
    r.prov.sm_count = 132;
    r.prov.mem_mib = 81559;
    r.prov.driver_version = 13000;
    r.prov.nvrtc_major = 13;
    r.prov.nvrtc_minor = 0;
    r.prov.template_hash = 0x0123456789abcdefull;
    snprintf(r.prov.policy, sizeof r.prov.policy, "%s", TUNED__MEASURE_POLICY);
    double bytes = 2.0 * (double)rows * (double)cols * 2;
    r.median_us = median_us;
    r.copy_us = median_us * 0.9;
    r.gbps = bytes / (median_us * 1e-6) / 1e9;
    r.evaluations = 77;
    snprintf(r.date, sizeof r.date, "2026-11-21T10:00:00Z");
    snprintf(r.tool_version, sizeof r.tool_version, "0.1.0");
    return r;
}

static tuned__fleet_id id_of(const tuned__record *r)
{
    tuned__fleet_id id;
    tuned__fleet_id_from_record(r, &id);
    return id;
}

/* Plants r's JSON (whatever it holds) under key. */
static void plant(const char *key, const tuned__record *r)
{
    char *text = NULL;
    size_t len = 0;
    tuned__err e = {0};
    EXPECT(tuned__record_encode(r, &text, &len, &e) == 0, "encode: %s", e.msg);
    EXPECT(admin_cmd(NULL, "SET %s %b", key, text, len) == REDIS_REPLY_STATUS, "plant %s", key);
    free(text);
}

/* The record key of id as docs/fleet.md spells it (dense layout). */
static void rec_key(char *buf, size_t n, const tuned__fleet_id *id)
{
    snprintf(buf, n, "tuned:v2:rec:softmax:%s:%llux%llu:dense:%s:%s:%s:%s",
             tuned_dtype_name((tuned_dtype)id->dtype), (unsigned long long)id->rows,
             (unsigned long long)id->cols, id->hwclass, id->toolchain, id->code, id->policy);
}

/* ---- cases ---- */

static void test_parsing(void)
{
    tuned__fleet_opts o;
    tuned__fleet_opts_init(&o);
    tuned__fleet *f = NULL;
    tuned__err e = {0};
    const char *bad[] = {"redis://user:pw@127.0.0.1:6379/0", "rediss://127.0.0.1", "http://x",
                         "redis://127.0.0.1:99999", "unix://relative.sock", "redis://[::1",
                         "unix:///tmp/x.sock?db=x", NULL};
    for (int i = 0; bad[i] != NULL; i++) {
        o.url = bad[i];
        EXPECT(tuned__fleet_open(&loop, &o, &f, &e) == TUNED_EINVAL && f == NULL,
               "url %s accepted", bad[i]);
    }
    o.url = "redis://user:pw@127.0.0.1";
    tuned__fleet_open(&loop, &o, &f, &e);
    EXPECT(strstr(e.msg, "credentials") != NULL, "why not: %s", e.msg);
    o.url = "unix:///tmp/none.sock";
    o.credentials_file = "/nonexistent/cred";
    EXPECT(tuned__fleet_open(&loop, &o, &f, &e) == TUNED_EIO, "missing credentials file");
    o.credentials_file = NULL;
    o.credentials_env = "TUNED_TEST_NO_SUCH_VARIABLE";
    EXPECT(tuned__fleet_open(&loop, &o, &f, &e) == TUNED_EINVAL, "unset credentials variable");

    /* the record check alone */
    tuned__record r = make_record(4096, 32000, 150.0), out;
    tuned__fleet_id id = id_of(&r);
    char *text = NULL;
    size_t len = 0;
    EXPECT(tuned__record_encode(&r, &text, &len, &e) == 0, "encode");
    EXPECT(tuned__fleet_check_record(text, len, &id, &out, &e) == 0, "valid refused: %s", e.msg);
    EXPECT(tuned__fleet_check_record("{\"v\":2}", 7, &id, &out, &e) == TUNED_ESTORE,
           "a bare object passed");
    free(text);
    tuned__fleet_id bad_id = id;
    snprintf(bad_id.hwclass, sizeof bad_id.hwclass, "has:colon");
    EXPECT(tuned__fleet_id_check(&bad_id, &e) == TUNED_EINVAL, "hwclass with ':' accepted");
    bad_id = id;
    snprintf(bad_id.policy, sizeof bad_id.policy, "has:colon/1");
    EXPECT(tuned__fleet_id_check(&bad_id, &e) == TUNED_EINVAL, "policy with ':' accepted");

    /* record keys, as docs/fleet.md spells them, and back */
    char key[512], want[512];
    tuned__fleet_record_key(key, sizeof key, &id);
    rec_key(want, sizeof want, &id);
    EXPECT(strcmp(key, want) == 0, "key %s, docs/fleet.md spells %s", key, want);
    tuned__fleet_id back;
    EXPECT(tuned__fleet_record_key_parse(key, &back, &e) == 0, "%s: %s", key, e.msg);
    tuned__fleet_record_key(want, sizeof want, &back);
    EXPECT(strcmp(key, want) == 0, "key %s read back as %s", key, want);
    const char *not_keys[] = {
        "tuned:v1:rec:softmax:fp16:4096x32000:dense:hw1:drv13000.nvrtc13.0",
        "tuned:v2:rec:softmax:fp16:4096x32000:dense:hw1:drv13000.nvrtc13.0:0123456789abcdef",
        "tuned:v2:rec:softmax:fp16:4096x32000:dense:hw1:drv1:c:p/1:extra",
        "tuned:v2:rec:softmax:fp99:4096x32000:dense:hw1:drv1:c:p/1",
        "tuned:v2:rec:softmax:fp16:0x32000:dense:hw1:drv1:c:p/1",
        "tuned:v2:rec:softmax:fp16:4096x32000:dense:hw1:drv1:c:p 1",
        "tuned:v2:lock:softmax:fp16:4096x32000:dense:hw1:drv1:c:p/1",
        NULL};
    for (int i = 0; not_keys[i] != NULL; i++)
        EXPECT(tuned__fleet_record_key_parse(not_keys[i], &back, &e) == TUNED_EINVAL,
               "%s read as a record key", not_keys[i]);
}

static void test_records(tuned__fleet *f)
{
    tuned__err e = {0};
    tuned__record r = make_record(4096, 32000, 150.0);
    tuned__fleet_id id = id_of(&r);
    result *x = res();
    EXPECT(tuned__fleet_get(f, &id, on_reply, x, &e) == 0, "get: %s", e.msg);
    EXPECT_STATUS(x, TUNED__FLEET_MISS);

    x = res();
    EXPECT(tuned__fleet_publish(f, &id, &r, on_reply, x, &e) == 0, "publish: %s", e.msg);
    EXPECT_STATUS(x, TUNED__FLEET_OK);
    x = res();
    tuned__fleet_get(f, &id, on_reply, x, &e);
    EXPECT_STATUS(x, TUNED__FLEET_OK);
    EXPECT(x->r.has_record && x->r.record.median_us == 150.0 &&
           strcmp(x->r.record.config, CONFIG) == 0, "hit: %g %s", x->r.record.median_us,
           x->r.record.config);

    /* SET NX: a second publish does not replace */
    tuned__record r2 = make_record(4096, 32000, 100.0);
    x = res();
    tuned__fleet_publish(f, &id, &r2, on_reply, x, &e);
    EXPECT_STATUS(x, TUNED__FLEET_MISS);
    x = res();
    tuned__fleet_get(f, &id, on_reply, x, &e);
    EXPECT_STATUS(x, TUNED__FLEET_OK);
    EXPECT(x->r.record.median_us == 150.0, "second publish replaced: %g", x->r.record.median_us);

    /* what one record costs the server */
    char key[512];
    rec_key(key, sizeof key, &id);
    redisReply *mr = NULL;
    if (admin_cmd(&mr, "MEMORY USAGE %s", key) == REDIS_REPLY_INTEGER)
        fprintf(stderr, "  one record: key %zu bytes, MEMORY USAGE %lld bytes\n", strlen(key),
                mr->integer);
    if (mr != NULL)
        freeReplyObject(mr);

    /* the index lists the shape */
    x = res();
    EXPECT(tuned__fleet_shapes(f, id.kernel, id.dtype, id.hwclass, on_reply, x, &e) == 0,
           "shapes: %s", e.msg);
    EXPECT_STATUS(x, TUNED__FLEET_OK);
    EXPECT(x->n_shapes == 1 && x->shapes[0].rows == 4096 && x->shapes[0].cols == 32000 &&
           strcmp(x->shapes[0].toolchain, id.toolchain) == 0, "index: %zu shapes", x->n_shapes);

    /* a publish of a record that is not what its id says is refused at once */
    tuned__fleet_id other = id;
    other.rows = 8;
    EXPECT(tuned__fleet_publish(f, &other, &r, on_reply, NULL, &e) == TUNED_EINVAL,
           "mismatched publish accepted");

    /* compare-and-set */
    tuned__record slower = make_record(4096, 32000, 160.0);
    tuned__record within = make_record(4096, 32000, 148.0); /* 1.3% faster, noise 2% */
    tuned__record faster = make_record(4096, 32000, 140.0);
    x = res();
    tuned__fleet_replace(f, &id, &slower, 0.02, on_reply, x, &e);
    EXPECT_STATUS(x, TUNED__FLEET_MISS);
    EXPECT(x->r.stored_us == 150.0, "stored_us %g", x->r.stored_us);
    x = res();
    tuned__fleet_replace(f, &id, &within, 0.02, on_reply, x, &e);
    EXPECT_STATUS(x, TUNED__FLEET_MISS);
    x = res();
    tuned__fleet_replace(f, &id, &faster, 0.02, on_reply, x, &e);
    EXPECT_STATUS(x, TUNED__FLEET_OK);
    x = res();
    tuned__fleet_get(f, &id, on_reply, x, &e);
    EXPECT_STATUS(x, TUNED__FLEET_OK);
    EXPECT(x->r.record.median_us == 140.0, "after replace: %g", x->r.record.median_us);
    /* within the noise with noise 0: replaced */
    x = res();
    tuned__record tiny = make_record(4096, 32000, 139.9);
    tuned__fleet_replace(f, &id, &tiny, 0.0, on_reply, x, &e);
    EXPECT_STATUS(x, TUNED__FLEET_OK);
    /* replace of an absent key stores */
    tuned__record fresh = make_record(1024, 1024, 20.0);
    tuned__fleet_id fid = id_of(&fresh);
    x = res();
    tuned__fleet_replace(f, &fid, &fresh, 0.02, on_reply, x, &e);
    EXPECT_STATUS(x, TUNED__FLEET_OK);

    tuned__fleet_stats st;
    tuned__fleet_stats_get(f, &st);
    EXPECT(st.gets == 4 && st.hits == 3 && st.misses == 1 && st.puts == 7 && st.puts_applied == 4,
           "stats: hits %llu misses %llu puts %llu applied %llu", (unsigned long long)st.hits,
           (unsigned long long)st.misses, (unsigned long long)st.puts,
           (unsigned long long)st.puts_applied);
}

static void test_invalid(tuned__fleet *f)
{
    tuned__err e = {0};
    char key[512];
    struct {
        const char *what, *expect;
        tuned__record r;
        tuned__fleet_id id;
    } cases[5];
    /* a config this build cannot parse */
    cases[0].what = "wrong config";
    cases[0].expect = "config";
    cases[0].r = make_record(256, 1024, 5.0);
    snprintf(cases[0].r.config, sizeof cases[0].r.config, "w8.r1.bogus");
    cases[0].id = id_of(&cases[0].r);
    /* an impossible time: 4096x32000 fp16 in a nanosecond */
    cases[1].what = "impossible time";
    cases[1].expect = "not a possible measurement";
    cases[1].r = make_record(4096, 1024, 1.0);
    cases[1].r.median_us = 0.001;
    cases[1].id = id_of(&cases[1].r);
    /* a record of 64x64 under the key of 128x128 */
    cases[2].what = "identity mismatch";
    cases[2].expect = "identity mismatch";
    cases[2].r = make_record(64, 64, 3.0);
    cases[2].id = id_of(&cases[2].r);
    cases[2].id.rows = cases[2].id.cols = 128;
    /* no copy time: every tune measures one, and without it the time
     * against the copy could not be checked */
    cases[3].what = "no copy time";
    cases[3].expect = "every tune times the copy first";
    cases[3].r = make_record(32, 128, 3.0);
    cases[3].r.copy_us = 0.0;
    cases[3].id = id_of(&cases[3].r);
    /* another text of a config this build runs (a leading zero): taken,
     * it would stand beside the canonical text's history of one variant */
    cases[4].what = "config not canonical";
    cases[4].expect = "not in canonical form";
    cases[4].r = make_record(16, 4096, 4.0);
    snprintf(cases[4].r.config, sizeof cases[4].r.config, "w0%s", CONFIG + 1);
    cases[4].id = id_of(&cases[4].r);
    for (int i = 0; i < 5; i++) {
        rec_key(key, sizeof key, &cases[i].id);
        plant(key, &cases[i].r);
        result *x = res();
        tuned__fleet_get(f, &cases[i].id, on_reply, x, &e);
        EXPECT_STATUS(x, TUNED__FLEET_INVALID);
        EXPECT(!x->r.has_record, "%s: a record came with INVALID", cases[i].what);
        EXPECT(strstr(x->r.err.msg, cases[i].expect) != NULL, "%s: why: %s", cases[i].what,
               x->r.err.msg);
    }
    /* garbage */
    tuned__record g = make_record(512, 512, 9.0);
    tuned__fleet_id gid = id_of(&g);
    rec_key(key, sizeof key, &gid);
    admin_cmd(NULL, "SET %s %s", key, "not json at all");
    result *x = res();
    tuned__fleet_get(f, &gid, on_reply, x, &e);
    EXPECT_STATUS(x, TUNED__FLEET_INVALID);
    /* a publish does not get past an invalid value (SET NX), a replace does */
    x = res();
    tuned__fleet_publish(f, &gid, &g, on_reply, x, &e);
    EXPECT_STATUS(x, TUNED__FLEET_MISS);
    x = res();
    tuned__fleet_replace(f, &gid, &g, 0.02, on_reply, x, &e);
    EXPECT_STATUS(x, TUNED__FLEET_OK);
    x = res();
    tuned__fleet_get(f, &gid, on_reply, x, &e);
    EXPECT_STATUS(x, TUNED__FLEET_OK);

    /* Two builds (another kernel code; another policy) keep a record each
     * under one shape: an upgrade's two versions do not contend for one
     * key, and neither is served the other's. */
    tuned__record here = make_record(2048, 2048, 30.0);
    tuned__record other_code = make_record(2048, 2048, 20.0);
    other_code.prov.template_hash = 0xfeedfacecafebeefull;
    tuned__record other_policy = make_record(2048, 2048, 25.0);
    snprintf(other_policy.prov.policy, sizeof other_policy.prov.policy, "another-policy/1");
    tuned__fleet_id want = id_of(&here), code_id = id_of(&other_code),
                    policy_id = id_of(&other_policy);
    const tuned__record *builds[] = {&here, &other_code, &other_policy};
    const tuned__fleet_id *build_ids[] = {&want, &code_id, &policy_id};
    for (int i = 0; i < 3; i++) {
        x = res();
        tuned__fleet_publish(f, build_ids[i], builds[i], on_reply, x, &e);
        EXPECT_STATUS(x, TUNED__FLEET_OK);
    }
    for (int i = 0; i < 3; i++) {
        x = res();
        tuned__fleet_get(f, build_ids[i], on_reply, x, &e);
        EXPECT_STATUS(x, TUNED__FLEET_OK);
        EXPECT(x->r.has_record && x->r.record.median_us == builds[i]->median_us,
               "build %d got the record of %.6g us", i, x->r.record.median_us);
    }
    /* A record of another build under this build's key is not served, and
     * a replace writes over it. */
    rec_key(key, sizeof key, &want);
    plant(key, &other_code);
    x = res();
    tuned__fleet_get(f, &want, on_reply, x, &e);
    EXPECT_STATUS(x, TUNED__FLEET_INVALID);
    EXPECT(strstr(x->r.err.msg, "identity mismatch") != NULL, "why: %s", x->r.err.msg);
    x = res();
    tuned__fleet_replace(f, &want, &here, 0.02, on_reply, x, &e);
    EXPECT_STATUS(x, TUNED__FLEET_OK);
    x = res();
    tuned__fleet_get(f, &want, on_reply, x, &e);
    EXPECT_STATUS(x, TUNED__FLEET_OK);
    /* The index lists the shape once per build, each with its build. */
    x = res();
    tuned__fleet_shapes(f, want.kernel, want.dtype, want.hwclass, on_reply, x, &e);
    EXPECT_STATUS(x, TUNED__FLEET_OK);
    int listed = 0;
    for (size_t i = 0; i < x->n_shapes; i++)
        for (int b = 0; b < 3; b++)
            listed += x->shapes[i].rows == 2048 &&
                      strcmp(x->shapes[i].code, build_ids[b]->code) == 0 &&
                      strcmp(x->shapes[i].policy, build_ids[b]->policy) == 0;
    EXPECT(listed == 3, "the index lists %d of the 3 builds of 2048x2048", listed);

    /* forget */
    x = res();
    EXPECT(tuned__fleet_forget(f, &cases[1].id, on_reply, x, &e) == 0, "forget: %s", e.msg);
    EXPECT_STATUS(x, TUNED__FLEET_OK);
    x = res();
    tuned__fleet_get(f, &cases[1].id, on_reply, x, &e);
    EXPECT_STATUS(x, TUNED__FLEET_MISS);
    x = res();
    tuned__fleet_forget(f, &cases[1].id, on_reply, x, &e);
    EXPECT_STATUS(x, TUNED__FLEET_MISS);

    tuned__fleet_stats st;
    tuned__fleet_stats_get(f, &st);
    EXPECT(st.invalid >= 5, "stats: invalid %llu", (unsigned long long)st.invalid);
}

static void test_lease(tuned__fleet *a, tuned__fleet *b)
{
    tuned__err e = {0};
    tuned__record r = make_record(8192, 4096, 80.0);
    tuned__fleet_id id = id_of(&r);
    /* two contenders at once: exactly one wins */
    result *xa = res(), *xb = res();
    tuned__fleet_lease_acquire(a, &id, 600, on_reply, xa, &e);
    tuned__fleet_lease_acquire(b, &id, 600, on_reply, xb, &e);
    wait_res(xa);
    wait_res(xb);
    EXPECT((xa->r.status == TUNED__FLEET_OK) + (xb->r.status == TUNED__FLEET_OK) == 1,
           "contenders: %s and %s", ST(xa->r.status), ST(xb->r.status));
    tuned__fleet *owner = xa->r.status == TUNED__FLEET_OK ? a : b;
    tuned__fleet *other = owner == a ? b : a;
    result *lost = owner == a ? xb : xa;
    EXPECT(strcmp(lost->r.holder, tuned__fleet_owner(owner)) == 0 && lost->r.ttl_ms > 0,
           "loser sees holder '%s' ttl %lld", lost->r.holder, (long long)lost->r.ttl_ms);

    /* renew and release by a non-owner fail */
    result *x = res();
    tuned__fleet_lease_renew(other, &id, 600, on_reply, x, &e);
    EXPECT_STATUS(x, TUNED__FLEET_MISS);
    x = res();
    tuned__fleet_lease_release(other, &id, on_reply, x, &e);
    EXPECT_STATUS(x, TUNED__FLEET_MISS);
    x = res();
    tuned__fleet_lease_renew(owner, &id, 600, on_reply, x, &e);
    EXPECT_STATUS(x, TUNED__FLEET_OK);

    /* the owner stops renewing: the lease expires and the other takes it */
    run_for(800);
    x = res();
    tuned__fleet_lease_acquire(other, &id, 5000, on_reply, x, &e);
    EXPECT_STATUS(x, TUNED__FLEET_OK);
    x = res();
    tuned__fleet_lease_renew(owner, &id, 600, on_reply, x, &e);
    EXPECT_STATUS(x, TUNED__FLEET_MISS);
    EXPECT(strcmp(x->r.holder, tuned__fleet_owner(other)) == 0, "lost to '%s'", x->r.holder);
    x = res();
    tuned__fleet_lease_release(owner, &id, on_reply, x, &e);
    EXPECT_STATUS(x, TUNED__FLEET_MISS);
    x = res();
    tuned__fleet_lease_release(other, &id, on_reply, x, &e);
    EXPECT_STATUS(x, TUNED__FLEET_OK);
    x = res();
    tuned__fleet_lease_acquire(owner, &id, 600, on_reply, x, &e);
    EXPECT_STATUS(x, TUNED__FLEET_OK);
}

static void test_wait(tuned__fleet *writer, tuned__fleet *slow_poller, tuned__fleet *fast_poller)
{
    tuned__err e = {0};
    /* woken by the notification: the poller's interval (10 s) is far away */
    tuned__record r = make_record(1000, 1000, 20.0);
    tuned__fleet_id id = id_of(&r);
    result *w = res();
    double t0 = tuned__now_s();
    EXPECT(tuned__fleet_wait(slow_poller, &id, 8000, on_reply, w, &e) == 0, "wait: %s", e.msg);
    tuned__fleet_stats st;
    for (int i = 0; i < 200; i++) {
        tuned__fleet_stats_get(slow_poller, &st);
        if (st.subscribed)
            break;
        run_for(10);
    }
    EXPECT(st.subscribed, "notification connection not subscribed: %s", st.last_error);
    run_for(100);
    EXPECT(w->fired == 0, "wait ended before the publish: %s", ST(w->r.status));
    result *p = res();
    tuned__fleet_publish(writer, &id, &r, on_reply, p, &e);
    EXPECT_STATUS(p, TUNED__FLEET_OK);
    EXPECT_STATUS(w, TUNED__FLEET_OK);
    EXPECT(w->at - t0 < 3.0 && w->r.record.median_us == 20.0, "woken after %.2f s",
           w->at - t0);
    tuned__fleet_stats_get(slow_poller, &st);
    EXPECT(st.notifications >= 1, "no notification counted");

    /* the notification lost: a record planted without PUBLISH is found by polling */
    tuned__record r2 = make_record(1000, 2000, 30.0);
    tuned__fleet_id id2 = id_of(&r2);
    w = res();
    t0 = tuned__now_s();
    tuned__fleet_wait(fast_poller, &id2, 5000, on_reply, w, &e);
    run_for(300);
    EXPECT(w->fired == 0, "wait ended before the record came");
    char key[512];
    rec_key(key, sizeof key, &id2);
    plant(key, &r2);
    EXPECT_STATUS(w, TUNED__FLEET_OK);
    EXPECT(w->at - t0 < 2.0, "polling found it after %.2f s", w->at - t0);

    /* nothing comes: TIMEOUT at the deadline; an invalid value: INVALID */
    tuned__record r3 = make_record(1000, 3000, 30.0);
    tuned__fleet_id id3 = id_of(&r3);
    w = res();
    t0 = tuned__now_s();
    tuned__fleet_wait(fast_poller, &id3, 400, on_reply, w, &e);
    EXPECT_STATUS(w, TUNED__FLEET_TIMEOUT);
    EXPECT(w->at - t0 >= 0.39 && w->at - t0 < 1.2, "timeout after %.2f s", w->at - t0);
    rec_key(key, sizeof key, &id3);
    admin_cmd(NULL, "SET %s %s", key, "{\"v\":2}");
    w = res();
    tuned__fleet_wait(fast_poller, &id3, 400, on_reply, w, &e);
    EXPECT_STATUS(w, TUNED__FLEET_INVALID);
}

static void test_queue(tuned__fleet *pusher, tuned__fleet *worker_a, tuned__fleet *worker_b)
{
    tuned__err e = {0};
    tuned__record r = make_record(4096, 8192, 60.0);
    tuned__fleet_id id = id_of(&r);
    const char *classes[] = {id.hwclass};
    result *x = res();
    EXPECT(tuned__fleet_queue_push(pusher, &id, "{\"budget\":100}", 60000, on_reply, x, &e) == 0,
           "push: %s", e.msg);
    EXPECT_STATUS(x, TUNED__FLEET_OK);
    EXPECT(x->r.entry[0] != '\0', "no entry id");
    x = res();
    tuned__fleet_queue_push(pusher, &id, NULL, 60000, on_reply, x, &e);
    EXPECT_STATUS(x, TUNED__FLEET_MISS);

    /* a malformed entry, acknowledged away */
    char stream[256];
    snprintf(stream, sizeof stream, "tuned:v2:queue:%s", id.hwclass);
    admin_cmd(NULL, "XADD %s * v 9 kernel softmax", stream);

    x = res();
    EXPECT(tuned__fleet_queue_read(worker_a, classes, 1, 8, on_reply, x, &e) == 0, "read: %s",
           e.msg);
    EXPECT_STATUS(x, TUNED__FLEET_OK);
    EXPECT(x->n_jobs == 1 && x->jobs[0].id.rows == 4096 && x->jobs[0].id.cols == 8192 &&
           strcmp(x->jobs[0].params, "{\"budget\":100}") == 0 &&
           strcmp(x->jobs[0].origin, tuned__fleet_owner(pusher)) == 0,
           "read %zu jobs", x->n_jobs);
    tuned__fleet_job job = x->jobs[0];
    tuned__fleet_stats st;
    tuned__fleet_stats_get(worker_a, &st);
    EXPECT(st.jobs_invalid == 1, "malformed entries %llu", (unsigned long long)st.jobs_invalid);
    x = res();
    tuned__fleet_queue_read(worker_b, classes, 1, 8, on_reply, x, &e);
    EXPECT_STATUS(x, TUNED__FLEET_OK);
    EXPECT(x->n_jobs == 0, "a read job was read again by another consumer");

    /* worker_a "dies" without acknowledging: after the idle time, b takes it */
    x = res();
    tuned__fleet_queue_reclaim(worker_b, id.hwclass, NULL, 60000, 8, on_reply, x, &e);
    EXPECT_STATUS(x, TUNED__FLEET_OK);
    EXPECT(x->n_jobs == 0, "a job taken before its idle time");
    run_for(300);
    x = res();
    tuned__fleet_queue_reclaim(worker_b, id.hwclass, NULL, 200, 8, on_reply, x, &e);
    EXPECT_STATUS(x, TUNED__FLEET_OK);
    EXPECT(x->n_jobs == 1 && strcmp(x->jobs[0].entry, job.entry) == 0, "reclaimed %zu",
           x->n_jobs);
    if (x->n_jobs == 1)
        job = x->jobs[0];
    x = res();
    tuned__fleet_queue_ack(worker_b, &job, on_reply, x, &e);
    EXPECT_STATUS(x, TUNED__FLEET_OK);
    x = res();
    tuned__fleet_queue_ack(worker_b, &job, on_reply, x, &e);
    EXPECT_STATUS(x, TUNED__FLEET_MISS);
    redisReply *pr = NULL;
    if (admin_cmd(&pr, "XPENDING %s tuned", stream) == REDIS_REPLY_ARRAY)
        EXPECT(pr->element[0]->integer == 0, "%lld entries still pending", pr->element[0]->integer);
    if (pr != NULL)
        freeReplyObject(pr);
    /* the shape's mark is gone with the ack: it can be queued again */
    x = res();
    tuned__fleet_queue_push(pusher, &id, NULL, 60000, on_reply, x, &e);
    EXPECT_STATUS(x, TUNED__FLEET_OK);
}

/* A dead consumer's job behind more live ones than one XAUTOCLAIM looks
 * at (10 a job asked for): reached by going on from the cursor. */
static void test_reclaim_cursor(tuned__fleet *pusher, tuned__fleet *worker_a,
                                tuned__fleet *worker_b)
{
    enum { JOBS = 13 };
    tuned__err e = {0};
    tuned__record r = make_record(1000, 1000, 20.0);
    tuned__fleet_id id = id_of(&r);
    snprintf(id.hwclass, sizeof id.hwclass, "hwcursortest");
    const char *classes[] = {id.hwclass};
    char entries[JOBS][48];
    for (int i = 0; i < JOBS; i++) {
        id.rows = 100 + (uint64_t)i;
        result *x = res();
        tuned__fleet_queue_push(pusher, &id, NULL, 60000, on_reply, x, &e);
        EXPECT_STATUS(x, TUNED__FLEET_OK);
    }
    size_t got = 0;
    for (int round = 0; round < 3 && got < JOBS; round++) {
        result *x = res();
        tuned__fleet_queue_read(worker_a, classes, 1, 8, on_reply, x, &e);
        EXPECT_STATUS(x, TUNED__FLEET_OK);
        for (size_t i = 0; i < x->n_jobs && got < JOBS; i++)
            snprintf(entries[got++], sizeof entries[0], "%s", x->jobs[i].entry);
    }
    EXPECT(got == JOBS, "read %zu of %d jobs", got, JOBS);
    if (got != JOBS)
        return;
    run_for(300);
    /* The first twelve are taken by a live consumer (idle 0 again); the
     * last stays idle, its consumer "dead". */
    char stream[256];
    snprintf(stream, sizeof stream, "tuned:v2:queue:%s", id.hwclass);
    for (int i = 0; i < JOBS - 1; i++)
        admin_cmd(NULL, "XCLAIM %s tuned live 0 %s", stream, entries[i]);
    char from[48] = "";
    bool found = false;
    int calls = 0;
    for (; calls < 5 && !found; calls++) {
        result *x = res();
        tuned__fleet_queue_reclaim(worker_b, id.hwclass, from, 200, 1, on_reply, x, &e);
        EXPECT_STATUS(x, TUNED__FLEET_OK);
        found = x->n_jobs == 1 && strcmp(x->jobs[0].entry, entries[JOBS - 1]) == 0;
        EXPECT(x->n_jobs == 0 || found, "reclaimed %s, a live consumer's job", x->jobs[0].entry);
        snprintf(from, sizeof from, "%s", x->r.entry);
        if (!found && strcmp(from, "0-0") == 0)
            break;
    }
    EXPECT(found && calls >= 2, "the dead consumer's job behind %d live ones: found %d after "
           "%d calls", JOBS - 1, (int)found, calls);
    result refused = {0}; /* a call refused at once calls back never */
    EXPECT_RC(tuned__fleet_queue_reclaim(worker_b, id.hwclass, "12x", 200, 1, on_reply, &refused,
                                         &e),
              TUNED_EINVAL, &e);
    EXPECT(refused.fired == 0);
    admin_cmd(NULL, "DEL %s", stream);
}

typedef struct ticker {
    uv_timer_t t;
    int ticks;
} ticker;

static void on_tick(uv_timer_t *t)
{
    ((ticker *)t->data)->ticks++;
}

static void test_stopped(void)
{
    tuned__err e = {0};
    tuned__fleet_opts o;
    tuned__fleet_opts_init(&o);
    char url[400];
    snprintf(url, sizeof url, "unix://%s", sock);
    o.url = url;
    o.owner = "stopped";
    o.timeout_ms = 300;
    o.connect_timeout_ms = 300;
    o.backoff_min_ms = 50;
    o.backoff_max_ms = 400;
    tuned__fleet *f = NULL;
    EXPECT(tuned__fleet_open(&loop, &o, &f, &e) == 0, "open: %s", e.msg);
    if (f == NULL)
        return;
    EXPECT(wait_connected(f, 3000), "not connected");
    tuned__record r = make_record(333, 777, 10.0);
    tuned__fleet_id id = id_of(&r);
    ticker tk = {.ticks = 0};
    uv_timer_init(&loop, &tk.t);
    tk.t.data = &tk;
    uv_timer_start(&tk.t, on_tick, 20, 20);

    kill(redis_pid, SIGSTOP);
    double t0 = tuned__now_s();
    int late = 0, ended = 0, timeouts = 0;
    while (tuned__now_s() - t0 < 1.5) {
        result *x = res();
        double start = tuned__now_s();
        tuned__fleet_get(f, &id, on_reply, x, &e);
        if (run_until(&x->fired, 2000)) {
            ended++;
            timeouts += x->r.status == TUNED__FLEET_TIMEOUT;
            EXPECT(x->r.status == TUNED__FLEET_TIMEOUT || x->r.status == TUNED__FLEET_DOWN,
                   "while stopped: %s", ST(x->r.status));
            late += x->at - start > 0.3 + 0.2;
        }
        run_for(50);
    }
    int ticks = tk.ticks;
    fprintf(stderr, "  stopped 1.5 s: %d calls ended (%d timeouts, %d late), %d loop ticks\n",
            ended, timeouts, late, ticks);
    EXPECT(late == 0 && ended >= 4 && timeouts >= 1,
           "stopped: %d calls ended, %d late, %d timeouts", ended, late, timeouts);
    EXPECT(ticks >= 40, "the loop stalled: %d ticks of 20 ms in 1.5 s", ticks);
    kill(redis_pid, SIGCONT);

    /* it continues: a get answers again */
    bool answered = false;
    double t1 = tuned__now_s();
    while (!answered && tuned__now_s() - t1 < 5) {
        result *x = res();
        tuned__fleet_get(f, &id, on_reply, x, &e);
        run_until(&x->fired, 1000);
        answered = x->r.status == TUNED__FLEET_MISS;
        if (!answered)
            run_for(50);
    }
    EXPECT(answered, "no answer after SIGCONT");
    tuned__fleet_stats st;
    tuned__fleet_stats_get(f, &st);
    fprintf(stderr, "  answered %.2f s after SIGCONT; timeouts %llu, connects %llu, failed "
            "connects %llu\n", tuned__now_s() - t1, (unsigned long long)st.timeouts,
            (unsigned long long)st.connects, (unsigned long long)st.connect_failures);
    EXPECT(st.timeouts >= 1 && st.connects >= 2, "stats: timeouts %llu connects %llu",
           (unsigned long long)st.timeouts, (unsigned long long)st.connects);
    uv_timer_stop(&tk.t);
    uv_close((uv_handle_t *)&tk.t, NULL);
    close_client(f);
}

static void test_restart(tuned__fleet *f, tuned__fleet *waiter)
{
    tuned__err e = {0};
    tuned__record r = make_record(555, 555, 12.0);
    tuned__fleet_id id = id_of(&r);
    EXPECT(wait_connected(f, 2000), "not connected before the kill");
    tuned__fleet_stats before;
    tuned__fleet_stats_get(f, &before);
    redis_kill(SIGKILL);
    run_for(1000);
    tuned__fleet_stats st;
    tuned__fleet_stats_get(f, &st);
    EXPECT(st.state != TUNED__FLEET_STATE_CONNECTED, "still connected to a killed server");
    EXPECT(st.connect_failures >= before.connect_failures + 2,
           "backoff: %llu failed attempts in 1 s", (unsigned long long)(st.connect_failures -
                                                                        before.connect_failures));
    EXPECT(st.last_error[0] != '\0', "no last error");
    fprintf(stderr, "  killed: %llu failed connects in 1 s; state %s; last error: %s\n",
            (unsigned long long)(st.connect_failures - before.connect_failures),
            tuned__fleet_state_name(st.state), st.last_error);
    result *x = res();
    double t0 = tuned__now_s();
    tuned__fleet_get(f, &id, on_reply, x, &e);
    wait_res(x);
    EXPECT(x->r.status == TUNED__FLEET_DOWN || x->r.status == TUNED__FLEET_TIMEOUT,
           "get while down: %s", ST(x->r.status));
    EXPECT(x->at - t0 < 1.2, "get while down took %.2f s", x->at - t0);
    /* a wait started while down still ends */
    result *w = res();
    tuned__fleet_wait(waiter, &id, 5000, on_reply, w, &e);

    EXPECT(redis_start() == 0, "restart failed");
    double t1 = tuned__now_s();
    EXPECT(wait_connected(f, 3000), "no reconnect after the restart: %s", st.last_error);
    fprintf(stderr, "  reconnected %.2f s after the restart\n", tuned__now_s() - t1);
    x = res();
    tuned__fleet_publish(f, &id, &r, on_reply, x, &e);
    EXPECT_STATUS(x, TUNED__FLEET_OK);
    EXPECT_STATUS(w, TUNED__FLEET_OK);
}

static void test_acl(void)
{
    tuned__err e = {0};
    /* the users of docs/fleet.md, command for command */
    EXPECT(admin_cmd(NULL, "ACL SETUSER writer on >wpw resetkeys ~tuned:v2:* resetchannels "
                     "&tuned:v2:done:* -@all +ping +select +get +smembers +psubscribe +eval "
                     "+set +sadd +srem +del +publish +pexpire +pttl +xgroup|create +xadd "
                     "+xreadgroup +xack +xautoclaim") == REDIS_REPLY_STATUS, "ACL writer");
    EXPECT(admin_cmd(NULL, "ACL SETUSER reader on >rpw resetkeys %%R~tuned:v2:* resetchannels "
                     "&tuned:v2:done:* -@all +ping +select +get +smembers +psubscribe") ==
               REDIS_REPLY_STATUS, "ACL reader");
    char cred[400];
    snprintf(cred, sizeof cred, "%s/reader.cred", dir);
    FILE *out = fopen(cred, "w");
    EXPECT(out != NULL, "credentials file");
    if (out == NULL)
        return;
    fputs("reader:rpw\n", out);
    fclose(out);
    chmod(cred, 0600);
    setenv("TUNED_TEST_WRITER", "writer:wpw", 1);
    tuned__fleet *w = open_client("acl-writer", 1000, NULL, "TUNED_TEST_WRITER");
    tuned__fleet *r = open_client("acl-reader", 1000, cred, NULL);
    EXPECT(wait_connected(w, 3000) && wait_connected(r, 3000), "ACL users not connected");
    tuned__record rec = make_record(4096, 4096, 40.0);
    tuned__fleet_id id = id_of(&rec);
    result *x = res();
    tuned__fleet_publish(w, &id, &rec, on_reply, x, &e);
    EXPECT_STATUS(x, TUNED__FLEET_OK);
    x = res();
    tuned__fleet_get(r, &id, on_reply, x, &e);
    EXPECT_STATUS(x, TUNED__FLEET_OK);
    /* the writer may do everything a tuning daemon does */
    tuned__record faster = make_record(4096, 4096, 30.0);
    const char *classes[] = {id.hwclass};
    result *wr[7];
    for (int i = 0; i < 7; i++)
        wr[i] = res();
    tuned__fleet_replace(w, &id, &faster, 0.02, on_reply, wr[0], &e);
    tuned__fleet_lease_acquire(w, &id, 1000, on_reply, wr[1], &e);
    tuned__fleet_lease_release(w, &id, on_reply, wr[2], &e);
    tuned__fleet_queue_push(w, &id, NULL, 1000, on_reply, wr[3], &e);
    tuned__fleet_queue_read(w, classes, 1, 1, on_reply, wr[4], &e);
    tuned__fleet_queue_reclaim(w, id.hwclass, NULL, 0, 1, on_reply, wr[5], &e);
    tuned__fleet_shapes(w, id.kernel, id.dtype, id.hwclass, on_reply, wr[6], &e);
    for (int i = 0; i < 7; i++)
        EXPECT_STATUS(wr[i], TUNED__FLEET_OK);
    if (wr[4]->n_jobs == 1) {
        x = res();
        tuned__fleet_queue_ack(w, &wr[4]->jobs[0], on_reply, x, &e);
        EXPECT_STATUS(x, TUNED__FLEET_OK);
    }
    EXPECT(wr[4]->n_jobs == 1, "writer read %zu jobs", wr[4]->n_jobs);

    tuned__record rec2 = make_record(4096, 2048, 20.0);
    tuned__fleet_id id2 = id_of(&rec2);
    x = res();
    tuned__fleet_publish(r, &id2, &rec2, on_reply, x, &e);
    EXPECT_STATUS(x, TUNED__FLEET_DENIED);
    EXPECT(strstr(x->r.err.msg, "NOPERM") != NULL, "why: %s", x->r.err.msg);
    x = res();
    tuned__fleet_lease_acquire(r, &id2, 1000, on_reply, x, &e);
    EXPECT_STATUS(x, TUNED__FLEET_DENIED);
    /* a reader's wait works: it may subscribe and read */
    x = res();
    tuned__fleet_wait(r, &id, 2000, on_reply, x, &e);
    EXPECT_STATUS(x, TUNED__FLEET_OK);

    /* a wrong password never connects, and says why */
    snprintf(cred, sizeof cred, "%s/wrong.cred", dir);
    out = fopen(cred, "w");
    if (out != NULL) {
        fputs("reader:nope", out);
        fclose(out);
    }
    tuned__fleet *bad = open_client("acl-wrong", 1000, cred, NULL);
    EXPECT(!wait_connected(bad, 500), "connected with a wrong password");
    tuned__fleet_stats st;
    tuned__fleet_stats_get(bad, &st);
    EXPECT(strstr(st.last_error, "WRONGPASS") != NULL, "last error: %s", st.last_error);
    x = res();
    tuned__fleet_get(bad, &id, on_reply, x, &e);
    wait_res(x);
    EXPECT(x->r.status == TUNED__FLEET_DOWN || x->r.status == TUNED__FLEET_TIMEOUT,
           "wrong password get: %s", ST(x->r.status));
    close_client(bad);
    close_client(r);
    close_client(w);
}

static void test_close_pending(void)
{
    tuned__err e = {0};
    tuned__fleet *f = open_client("closing", 1000, NULL, NULL);
    tuned__record r = make_record(4096, 100, 9.0);
    tuned__fleet_id id = id_of(&r);
    result *g = res(), *w = res(), *l = res();
    tuned__fleet_get(f, &id, on_reply, g, &e);
    tuned__fleet_wait(f, &id, 10000, on_reply, w, &e);
    tuned__fleet_lease_acquire(f, &id, 1000, on_reply, l, &e);
    int closed = 0;
    tuned__fleet_close(f, on_closed, &closed);
    EXPECT(g->fired == 0 && w->fired == 0, "a callback fired inside close");
    EXPECT(run_until(&closed, 3000), "close did not finish");
    EXPECT(g->r.status == TUNED__FLEET_CLOSED && w->r.status == TUNED__FLEET_CLOSED &&
           l->r.status == TUNED__FLEET_CLOSED, "after close: %s %s %s", ST(g->r.status),
           ST(w->r.status), ST(l->r.status));
}

/* A stuck run: stop the server, fail. */
static void on_alarm(int sig)
{
    (void)sig;
    if (redis_pid > 0) {
        kill(redis_pid, SIGCONT);
        kill(redis_pid, SIGKILL);
    }
    static const char msg[] = "test_fleet: stuck, ended by the alarm\n";
    ssize_t n = write(2, msg, sizeof msg - 1);
    (void)n;
    _exit(1);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN); /* a write to a killed server must not end the process */
    signal(SIGALRM, on_alarm);
    alarm(150);
    if (!on_path("redis-server")) {
        fprintf(stderr, "redis-server not installed: skipped\n");
        return 77;
    }
    snprintf(dir, sizeof dir, "/tmp/tuned-fleet-XXXXXX");
    if (mkdtemp(dir) == NULL) {
        perror("mkdtemp");
        return 1;
    }
    snprintf(sock, sizeof sock, "%s/redis.sock", dir);
    snprintf(logpath, sizeof logpath, "%s/redis.log", dir);
    uv_loop_init(&loop);
    {
        tuned__config c;
        char canon[TUNED__CONFIG_TEXT];
        tuned__err e = {0};
        EXPECT(tuned__config_parse(CONFIG, &c, &e) == 0, "test config: %s", e.msg);
        tuned__config_format(&c, canon, sizeof canon);
        EXPECT(strcmp(canon, CONFIG) == 0, "test config is not canonical: %s", canon);
    }
    test_parsing();
    if (redis_start() != 0) {
        fprintf(stderr, "redis-server did not start\n");
        dump_redis_log();
        return 1;
    }
    tuned__fleet *a = open_client("alpha", 10000, NULL, NULL);
    tuned__fleet *b = open_client("beta", 10000, NULL, NULL);
    tuned__fleet *c = open_client("gamma", 200, NULL, NULL);
    if (a != NULL && b != NULL && c != NULL) {
        fprintf(stderr, "records\n");
        test_records(a);
        fprintf(stderr, "invalid\n");
        test_invalid(a);
        fprintf(stderr, "lease\n");
        test_lease(a, b);
        fprintf(stderr, "wait\n");
        test_wait(a, b, c);
        fprintf(stderr, "queue\n");
        test_queue(a, b, c);
        test_reclaim_cursor(a, b, c);
        fprintf(stderr, "stopped\n");
        test_stopped();
        fprintf(stderr, "restart\n");
        test_restart(a, c);
        fprintf(stderr, "acl\n");
        test_acl();
        fprintf(stderr, "close\n");
        test_close_pending();
    }
    close_client(c);
    close_client(b);
    close_client(a);
    run_for(50);
    /* every callback fired exactly once */
    for (size_t i = 0; i < n_results; i++) {
        EXPECT(results[i]->fired == 1, "result %zu fired %d times", i, results[i]->fired);
        free(results[i]);
    }
    redis_kill(SIGTERM);
    EXPECT(uv_loop_close(&loop) == 0, "handles left open on the loop");
    if (failures)
        dump_redis_log();
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
    fprintf(stderr, "fleet: %d failure(s), %zu callbacks\n", failures, n_results);
    return failures != 0;
}
