/* test_daemon.c: the real daemon, started from the built `tuned` binary on
 * a temporary socket and store, talked to over the socket.
 *
 *   test_daemon TUNED            suite 'integration': the test-only fake GPU
 *                                (TUNED_TEST_FAKE_GPU) stands in for a GPU
 *   test_daemon TUNED --no-gpu   suite 'integration': a daemon without a GPU
 *                                serves the store and refuses to tune (exit
 *                                77 where a GPU driver is found)
 *   test_daemon TUNED --gpu      suite 'gpu': a real GPU, with a fault planted
 *                                in one variant (exit 77 without a GPU)
 *
 * All need the test hooks (the fake GPU, the planted fault): built without
 * -Dtest_hooks=true they exit 77. Two GPUs are test_daemon_gpus.c's; the
 * daemon and the client these cases drive are daemon_testlib.c's.
 *
 * Integration cases: start, ping, socket mode, a stale socket replaced and
 * a live one refused; every malformed-input class over the wire (the
 * connection survives each); an overlong line, too many clients and a
 * client that reads none of its replies (each closed cleanly, the daemon
 * serving on); get exact / nearest / default; tune, joining, job
 * progress, tune_if_missing, a full queue, a shape too big for the GPU;
 * concurrent clients and a pipelined one; a worker that aborts and one
 * that hangs during a tune (the job still finishes with a winner); SIGTERM
 * during a tune (exit 0, i.e. uv_loop_close() == 0, and a checkpoint); a
 * kill -9 during a tune and a restart that finds the store intact and no
 * worker left; TCP on loopback; the CLI through the daemon. Everything waits with a deadline; an alarm ends
 * a stuck run. Exit 0 when every check passed; each failure prints its line
 * and the daemon's log. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "src/tuner/space.h"
#include "tests/daemon_testlib.h"
#include "tuned.h"

/* The i-th heuristic seed of shape's space on sm_90 (what a tune tries
 * first), as text. */
static void seed_config(uint64_t rows, uint64_t cols, int arch, size_t i, char *out, size_t n)
{
    tuned__shape s = {TUNED_FP16, rows, cols, TUNED_KERNEL_SOFTMAX, 0};
    tuned__space sp;
    tuned__err e = {0};
    tuned__config seeds[16];
    out[0] = '\0';
    if (tuned__space_init(&sp, &s, arch, 132, &e) != 0) /* the fake GPU has 132 SMs */
        return;
    size_t k = tuned__space_seeds(&sp, seeds, 16);
    if (i < k)
        tuned__config_format(&seeds[i], out, n);
    tuned__space_free(&sp);
}

/* ---- cases ---- */

static void test_start_and_socket(void)
{
    daemon_t d;
    daemon_init(&d, "start");
    /* a stale socket file, as a crash leaves it */
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s", d.sock);
    EXPECT(bind(fd, (struct sockaddr *)&sa, sizeof sa) == 0);
    close(fd);
    EXPECT(daemon_start(&d, FAKE_FAST, NULL));
    struct stat st;
    EXPECT(stat(d.sock, &st) == 0 && S_ISSOCK(st.st_mode) && (st.st_mode & 0777) == 0600);
    client c;
    EXPECT(cl_open(&c, &d));
    json_t *r = cl_call(&c, "{\"op\":\"ping\",\"id\":42}");
    EXPECT(is_ok(r) && integer(r, "id") == 42 && json_is_true(json_object_get(r, "pong")));
    json_decref(r);
    r = cl_call(&c, "{\"op\":\"stats\"}");
    const json_t *gpus = json_object_get(r, "gpus");
    EXPECT(is_ok(r) && json_array_size(gpus) == 1);
    EXPECT(json_is_true(json_object_get(json_array_get(gpus, 0), "test_only_fake")));
    json_decref(r);
    /* a second daemon on a live socket refuses to start, as a bad option:
     * exit 2, before it creates its store or starts a GPU worker */
    daemon_t d2 = d;
    snprintf(d2.log, sizeof d2.log, "%s/log2", d.dir);
    snprintf(d2.db, sizeof d2.db, "%s/db2", d.dir);
    EXPECT(daemon_start_fails(&d2, FAKE_FAST) == 2);
    EXPECT(log_has(&d2, "another daemon is listening"));
    EXPECT(access(d2.db, F_OK) != 0, "the refused daemon created its store %s", d2.db);
    EXPECT(!log_has(&d2, "worker pid"), "the refused daemon started a GPU worker");
    /* a file that is not a socket is never replaced */
    daemon_t d3;
    daemon_init(&d3, "notasocket");
    FILE *f = fopen(d3.sock, "w");
    if (f != NULL)
        fclose(f);
    EXPECT(daemon_start_fails(&d3, FAKE_FAST) == 2);
    EXPECT(log_has(&d3, "is not a socket"));
    EXPECT(access(d3.db, F_OK) != 0, "the refused daemon created its store %s", d3.db);
    EXPECT(access(d3.sock, F_OK) == 0);
    cl_close(&c);
    EXPECT(daemon_stop(&d) == 0);
    EXPECT(access(d.sock, F_OK) != 0); /* removed at exit */
    if (failures > case_failures)
        dump_log(&d);
}

/* Each malformed class gets its error, and the connection stays usable. */
static void test_malformed(void)
{
    static const struct {
        const char *line;
        const char *code;
    } cases[] = {
        {"{", "bad_json"},
        {"not json at all", "bad_json"},
        {"{\"op\":\"ping\",\"op\":\"get\"}", "bad_json"},
        {"{\"op\":\"get\",\"rows\":1e999,\"cols\":1}", "bad_json"},
        {"[1,2,3]", "bad_request"},
        {"{}", "bad_request"},
        {"{\"op\":7}", "bad_request"},
        {"{\"op\":\"frobnicate\"}", "unknown_op"},
        {"{\"op\":\"ping\",\"extra\":true}", "unknown_field"},
        {"{\"op\":\"get\",\"cols\":5}", "missing_field"},
        {"{\"op\":\"get\",\"rows\":\"5\",\"cols\":5}", "bad_type"},
        {"{\"op\":\"get\",\"rows\":5,\"cols\":5.5}", "bad_type"},
        {"{\"op\":\"get\",\"rows\":0,\"cols\":5}", "bad_value"},
        {"{\"op\":\"get\",\"rows\":-3,\"cols\":5}", "bad_value"},
        {"{\"op\":\"get\",\"rows\":5,\"cols\":2147483648}", "bad_value"},
        {"{\"op\":\"get\",\"rows\":5,\"cols\":5,\"dtype\":\"int8\"}", "bad_value"},
        {"{\"op\":\"get\",\"rows\":2147483647,\"cols\":2147483392}", "too_big"},
        /* beyond the fake GPU's 80 GiB, within 1 TiB */
        {"{\"op\":\"get\",\"rows\":1000000,\"cols\":65536}", "too_big"},
        {"{\"op\":\"tune\",\"rows\":1000000,\"cols\":65536}", "too_big"},
        {"{\"op\":\"get\",\"rows\":5,\"cols\":5,\"gpu\":\"GeForce 256\"}", "unknown_gpu"},
        {"{\"op\":\"get\",\"rows\":5,\"cols\":5,\"gpu\":7}", "unknown_gpu"},
        {"{\"op\":\"get\",\"rows\":5,\"cols\":5,\"gpu\":\"0123456789abcdef\"}", "unknown_gpu"},
        {"{\"op\":\"job\",\"job\":999999}", "no_such_job"},
    };
    const char *const args[] = {"--limit", "line=1024", "--limit", "clients=4", NULL};
    daemon_t d;
    client c;
    start_case(&d, &c, "malformed", FAKE_FAST, args);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        json_t *r = cl_call(&c, cases[i].line);
        EXPECT(r != NULL && !is_ok(r) && strcmp(err_code(r), cases[i].code) == 0,
               "%s -> %s, expected %s", cases[i].line,
               r == NULL ? "no reply" : is_ok(r) ? "ok" : err_code(r), cases[i].code);
        json_decref(r);
    }
    /* raw bytes: NULs, invalid UTF-8, CRLF, blank lines (ignored) */
    EXPECT(cl_send(&c, "{\"op\":\0\"ping\"}\n", 16));
    char *line = cl_line(&c, 10);
    EXPECT(line != NULL && strstr(line, "bad_json") != NULL);
    free(line);
    EXPECT(cl_send(&c, "\xff\xfe\xfd\n", 4));
    line = cl_line(&c, 10);
    EXPECT(line != NULL && strstr(line, "bad_json") != NULL);
    free(line);
    const char *crlf = "\n\r\n\n{\"op\":\"ping\",\"id\":\"crlf\"}\r\n";
    EXPECT(cl_send(&c, crlf, strlen(crlf)));
    line = cl_line(&c, 10);
    EXPECT(line != NULL && strstr(line, "\"crlf\"") != NULL && strstr(line, "\"pong\":true"));
    free(line);
    json_t *r = cl_call(&c, "{\"op\":\"ping\"}");
    EXPECT(is_ok(r)); /* the connection survived every error */
    json_decref(r);

    /* an overlong line: line_too_long, then the connection is closed */
    client big;
    EXPECT(cl_open(&big, &d));
    char *huge = malloc(5000);
    memset(huge, 'x', 5000);
    EXPECT(cl_send(&big, huge, 5000));
    line = cl_line(&big, 10);
    EXPECT(line != NULL && strstr(line, "line_too_long") != NULL);
    free(line);
    EXPECT(cl_eof(&big, 10));
    cl_close(&big);
    /* ... also when the newline comes in the same read */
    EXPECT(cl_open(&big, &d));
    huge[1999] = '\n';
    EXPECT(cl_send(&big, huge, 2000));
    line = cl_line(&big, 10);
    EXPECT(line != NULL && strstr(line, "line_too_long") != NULL);
    free(line);
    EXPECT(cl_eof(&big, 10));
    cl_close(&big);
    free(huge);

    /* too many clients: the 5th gets too_many_clients and is closed */
    client more[4];
    for (int i = 0; i < 3; i++)
        EXPECT(cl_open(&more[i], &d)); /* c plus 3 = 4 */
    sleep_ms(100);
    EXPECT(cl_open(&more[3], &d));
    line = cl_line(&more[3], 10);
    EXPECT(line != NULL && strstr(line, "too_many_clients") != NULL);
    free(line);
    EXPECT(cl_eof(&more[3], 10));
    cl_close(&more[3]);
    cl_close(&more[0]);
    sleep_ms(100);
    EXPECT(cl_open(&more[0], &d));
    r = cl_call(&more[0], "{\"op\":\"ping\"}");
    EXPECT(is_ok(r)); /* a slot came free */
    json_decref(r);
    r = cl_call(&c, "{\"op\":\"stats\"}");
    const json_t *cls = json_object_get(r, "clients");
    EXPECT(integer(cls, "rejected") == 1 && integer(cls, "lines_too_long") == 2);
    json_decref(r);
    for (int i = 0; i < 3; i++)
        cl_close(&more[i]);
    end_case(&d, &c);
}

/* get's three sources, tune joining, progress, tune_if_missing, list. */
static void test_get_and_tune(void)
{
    const char *const env[] = {"TUNED_TEST_FAKE_GPU=1", "TUNED_TEST_FAKE_MS=3", NULL};
    const char *const args[] = {"--limit", "jobs=2", NULL};
    daemon_t d;
    client c;
    start_case(&d, &c, "gettune", env, args);
    json_t *r = cl_call(&c, "{\"op\":\"get\",\"rows\":4096,\"cols\":32000}");
    char seed0[64];
    seed_config(4096, 32000, 90, 0, seed0, sizeof seed0);
    EXPECT(is_ok(r) && strcmp(str(r, "source"), "default") == 0);
    EXPECT(strcmp(str(r, "config"), seed0) == 0 && json_is_null(json_object_get(r, "median_us")));
    json_decref(r);
    long long id = submit_tune(&c, 4096, 32000, ",\"budget\":60,\"id\":\"t1\"");
    r = cl_call(&c, "{\"op\":\"tune\",\"rows\":4096,\"cols\":32000,\"dtype\":\"fp16\"}");
    EXPECT(is_ok(r) && integer(r, "job") == id && json_is_true(json_object_get(r, "joined")));
    json_decref(r);
    EXPECT(job_progressed(&c, id, 30)); /* progress while it runs (or done: too fast to see) */
    r = wait_job(&c, id, 60);
    const json_t *job = json_object_get(r, "job");
    EXPECT(strcmp(str(job, "state"), "done") == 0 && json_is_true(json_object_get(job, "stored")));
    EXPECT(integer(job, "evaluated") == 60 && integer(job, "joined") == 1);
    char best[64];
    snprintf(best, sizeof best, "%s", str(job, "best_config"));
    json_decref(r);
    r = cl_call(&c, "{\"op\":\"get\",\"rows\":4096,\"cols\":32000,\"id\":5}");
    EXPECT(is_ok(r) && strcmp(str(r, "source"), "exact") == 0 && strcmp(str(r, "config"), best) == 0);
    EXPECT(json_number_value(json_object_get(r, "median_us")) > 0);
    EXPECT(integer(json_object_get(r, "record"), "evaluations") == 60);
    json_decref(r);
    /* nearest: a shape close by, same GPU and dtype; never for another dtype */
    r = cl_call(&c, "{\"op\":\"get\",\"rows\":4096,\"cols\":31000}");
    EXPECT(is_ok(r));
    if (strcmp(str(r, "source"), "nearest") == 0)
        EXPECT(integer(json_object_get(r, "record"), "cols") == 32000);
    else
        EXPECT(strcmp(str(r, "source"), "default") == 0); /* the winner may not fit */
    json_decref(r);
    r = cl_call(&c, "{\"op\":\"get\",\"rows\":4096,\"cols\":32000,\"dtype\":\"fp32\"}");
    EXPECT(is_ok(r) && strcmp(str(r, "source"), "default") == 0);
    json_decref(r);
    r = cl_call(&c, "{\"op\":\"get\",\"rows\":4096,\"cols\":32000,\"gpu\":\"TUNED TEST-ONLY FAKE GPU\"}");
    EXPECT(is_ok(r) && strcmp(str(r, "source"), "exact") == 0); /* names match without case */
    json_decref(r);
    /* tune_if_missing: answers at once, with a job */
    r = cl_call(&c, "{\"op\":\"get\",\"rows\":512,\"cols\":512,\"tune_if_missing\":true}");
    EXPECT(is_ok(r) && strcmp(str(r, "source"), "exact") != 0 && integer(r, "job") > 0);
    long long id2 = integer(r, "job");
    json_decref(r);
    EXPECT(job_done(&c, id2, 60));
    r = cl_call(&c, "{\"op\":\"get\",\"rows\":512,\"cols\":512,\"tune_if_missing\":true}");
    EXPECT(is_ok(r) && strcmp(str(r, "source"), "exact") == 0 && json_object_get(r, "job") == NULL);
    json_decref(r);
    /* list, filtered */
    r = cl_call(&c, "{\"op\":\"list\"}");
    EXPECT(is_ok(r) && integer(r, "count") == 2 && !json_is_true(json_object_get(r, "truncated")));
    json_decref(r);
    r = cl_call(&c, "{\"op\":\"list\",\"rows\":512,\"cols\":512}");
    EXPECT(is_ok(r) && integer(r, "count") == 1);
    json_decref(r);
    r = cl_call(&c, "{\"op\":\"list\",\"limit\":1}");
    EXPECT(is_ok(r) && integer(r, "count") == 1 && integer(r, "total") == 2);
    EXPECT(json_is_true(json_object_get(r, "truncated")));
    json_decref(r);
    r = cl_call(&c, "{\"op\":\"list\",\"dtype\":\"bf16\"}");
    EXPECT(is_ok(r) && integer(r, "count") == 0);
    json_decref(r);
    /* a full queue: one running, two queued (the limit), the next refused */
    EXPECT(daemon_stop(&d) == 0);
    const char *const slow[] = {"TUNED_TEST_FAKE_GPU=1", "TUNED_TEST_FAKE_MS=200", NULL};
    const char *const slow_args[] = {"--limit", "jobs=2", "--limit", "grace=0.5", NULL};
    cl_close(&c);
    EXPECT(daemon_start(&d, slow, slow_args));
    EXPECT(cl_open(&c, &d));
    long long a = submit_tune(&c, 64, 1000, NULL);
    EXPECT(job_becomes(&c, a, "running", 30));
    EXPECT(submit_tune(&c, 64, 1001, NULL) > 0);
    EXPECT(submit_tune(&c, 64, 1002, NULL) > 0);
    r = cl_call(&c, "{\"op\":\"tune\",\"rows\":64,\"cols\":1003}");
    EXPECT(!is_ok(r) && strcmp(err_code(r), "queue_full") == 0);
    json_decref(r);
    r = cl_call(&c, "{\"op\":\"tune\",\"rows\":64,\"cols\":1001}");
    EXPECT(is_ok(r) && json_is_true(json_object_get(r, "joined"))); /* joining needs no room */
    json_decref(r);
    r = cl_call(&c, "{\"op\":\"stats\"}");
    const json_t *jobs = json_object_get(r, "jobs");
    EXPECT(integer(jobs, "queued") == 2 && integer(jobs, "running") == 1);
    json_decref(r);
    /* SIGTERM with one running and two queued: exit 0; the queued ones
     * are cancelled, the running one checkpoints */
    end_case(&d, &c);
    EXPECT(log_has(&d, "stopped"));
}

typedef struct worker_arg {
    const daemon_t *d;
    int id;
    int bad;
} worker_arg;

/* One of many concurrent clients: gets, pings, stats, bad requests. */
static void *hammer(void *p)
{
    worker_arg *a = p;
    client c;
    if (!cl_open(&c, a->d)) {
        a->bad++;
        return NULL;
    }
    for (int i = 0; i < 300; i++) {
        json_t *r;
        switch (i % 5) {
        case 0:
            r = call_fmt(&c, "{\"op\":\"get\",\"rows\":256,\"cols\":%d,\"id\":%d}", 1024 + (i % 7),
                         i);
            if (!is_ok(r) || integer(r, "id") != i)
                a->bad++;
            break;
        case 1: r = cl_call(&c, "{\"op\":\"ping\"}"); a->bad += !is_ok(r); break;
        case 2: r = cl_call(&c, "{\"op\":\"stats\"}"); a->bad += !is_ok(r); break;
        case 3:
            r = cl_call(&c, "{\"op\":\"get\",\"rows\":-1}");
            a->bad += r == NULL || strcmp(err_code(r), "bad_value") != 0;
            break;
        default:
            r = cl_call(&c, "{\"op\":\"list\",\"limit\":3}");
            a->bad += !is_ok(r);
            break;
        }
        json_decref(r);
    }
    cl_close(&c);
    return NULL;
}

static void test_concurrent(void)
{
    daemon_t d;
    client c;
    start_case(&d, &c, "concurrent", FAKE_FAST, NULL);
    EXPECT(job_done(&c, submit_tune(&c, 256, 1024, ",\"budget\":20"), 60));
    enum { N = 32 };
    pthread_t th[N];
    worker_arg args[N];
    for (int i = 0; i < N; i++) {
        args[i] = (worker_arg){.d = &d, .id = i};
        EXPECT(pthread_create(&th[i], NULL, hammer, &args[i]) == 0);
    }
    /* and one pipelined client: 1000 requests in one write, replies in order */
    char *batch = malloc(1000 * 64);
    size_t len = 0;
    for (int i = 0; i < 1000; i++)
        len += (size_t)snprintf(batch + len, 64, "{\"op\":\"ping\",\"id\":%d}\n", i);
    EXPECT(cl_send(&c, batch, len));
    for (int i = 0; i < 1000; i++) {
        char *line = cl_line(&c, 30);
        char want[32];
        snprintf(want, sizeof want, "{\"id\":%d,", i);
        if (line == NULL || strncmp(line, want, strlen(want)) != 0) {
            fprintf(stderr, "pipelined reply %d: %s\n", i, line ? line : "none");
            failures++;
            free(line);
            break;
        }
        free(line);
    }
    free(batch);
    int bad = 0;
    for (int i = 0; i < N; i++) {
        pthread_join(th[i], NULL);
        bad += args[i].bad;
    }
    EXPECT(bad == 0);
    json_t *r = cl_call(&c, "{\"op\":\"stats\"}");
    EXPECT(integer(json_object_get(r, "requests"), "total") >= N * 300 + 1000);
    json_decref(r);
    end_case(&d, &c);
}

/* A client that sends and never reads is stopped, then cut off; the
 * daemon serves others all along. */
static void test_slow_reader(void)
{
    const char *const args[] = {"--limit", "output=4096", "--limit", "client-timeout=1", NULL};
    daemon_t d;
    client c, hog;
    start_case(&d, &c, "slowreader", FAKE_FAST, args);
    EXPECT(cl_open(&hog, &d));
    EXPECT(job_done(&c, submit_tune(&c, 128, 4096, ",\"budget\":8"), 60));
    /* 20000 list requests (about 400 bytes of reply each), never read */
    int fl = fcntl(hog.fd, F_GETFL);
    fcntl(hog.fd, F_SETFL, fl | O_NONBLOCK);
    const char *req = "{\"op\":\"list\"}\n";
    size_t sent = 0;
    double end = now_s() + 5;
    for (int i = 0; i < 20000 && now_s() < end;) {
        ssize_t w = send(hog.fd, req, strlen(req), MSG_NOSIGNAL);
        if (w == (ssize_t)strlen(req)) {
            i++;
            sent++;
        } else if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            sleep_ms(5); /* the daemon stopped reading us: backpressure */
        } else {
            break;
        }
    }
    fcntl(hog.fd, F_SETFL, fl);
    json_t *r = cl_call(&c, "{\"op\":\"ping\"}");
    EXPECT(is_ok(r));
    json_decref(r);
    sleep_ms(2500); /* past client-timeout */
    EXPECT(cl_eof(&hog, 10));
    r = cl_call(&c, "{\"op\":\"stats\"}");
    EXPECT(is_ok(r) && integer(json_object_get(r, "clients"), "cut_off") == 1);
    json_decref(r);
    cl_close(&hog);
    end_case(&d, &c);
}

/* A variant that aborts the worker, and one that hangs it: the job ends
 * done, with a winner, the culprits named; the daemon serves throughout. */
static void test_worker_crash_and_hang(void)
{
    char fault[64], hang[64], envf[128], envh[128];
    seed_config(1024, 4096, 90, 0, fault, sizeof fault);
    seed_config(1024, 4096, 90, 1, hang, sizeof hang);
    EXPECT(fault[0] != '\0' && hang[0] != '\0' && strcmp(fault, hang) != 0);
    snprintf(envf, sizeof envf, "TUNED_TEST_FAKE_FAULT=%s", fault);
    snprintf(envh, sizeof envh, "TUNED_TEST_FAKE_HANG=%s", hang);
    const char *const env[] = {"TUNED_TEST_FAKE_GPU=1", "TUNED_TEST_FAKE_MS=2", envf, envh, NULL};
    const char *const args[] = {"--limit", "variant-timeout=1", NULL};
    daemon_t d;
    client c;
    start_case(&d, &c, "crash", env, args);
    json_t *r = cl_call(&c, "{\"op\":\"stats\"}");
    long long pid0 = integer(json_array_get(json_object_get(r, "gpus"), 0), "worker_pid");
    json_decref(r);
    long long id = submit_tune(&c, 1024, 4096, ",\"budget\":50");
    double worst = 0; /* ping all along: the daemon never stalls */
    json_t *done = wait_job_probing(&c, id, 120, "{\"op\":\"ping\"}", &worst);
    const json_t *job = json_object_get(done, "job");
    EXPECT(strcmp(str(job, "state"), "done") == 0 && json_is_true(json_object_get(job, "stored")));
    EXPECT(integer(job, "crashes") == 2 && integer(job, "worker_restarts") >= 2);
    const json_t *crashed = json_object_get(job, "crashed");
    bool has_fault = false, has_hang = false;
    for (size_t i = 0; i < json_array_size(crashed); i++) {
        const char *s = json_string_value(json_array_get(crashed, i));
        has_fault = has_fault || (s != NULL && strcmp(s, fault) == 0);
        has_hang = has_hang || (s != NULL && strcmp(s, hang) == 0);
    }
    EXPECT(has_fault && has_hang);
    EXPECT(strcmp(str(job, "best_config"), fault) != 0 && strcmp(str(job, "best_config"), hang) != 0);
    EXPECT(integer(job, "evaluated") == 50 && integer(job, "failed") >= 2);
    EXPECT(worst < 0.5);
    json_decref(done);
    r = cl_call(&c, "{\"op\":\"stats\"}");
    const json_t *g0 = json_array_get(json_object_get(r, "gpus"), 0);
    EXPECT(integer(g0, "worker_pid") > 0 && integer(g0, "worker_pid") != pid0);
    json_decref(r);
    EXPECT(log_has(&d, "took the worker down"));
    end_case(&d, &c);
}

static bool process_gone(long long pid, double timeout_s)
{
    double end = now_s() + timeout_s;
    while (now_s() < end) {
        char path[64], buf[512] = "";
        snprintf(path, sizeof path, "/proc/%lld/stat", pid);
        FILE *f = fopen(path, "r");
        if (f == NULL)
            return true;
        size_t n = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
        buf[n] = '\0';
        const char *rp = strrchr(buf, ')');
        if (rp != NULL && (rp[2] == 'Z' || rp[2] == 'X'))
            return true; /* a zombie waiting for init: dead */
        sleep_ms(20);
    }
    return false;
}

/* SIGTERM during a tune: exit 0 and a checkpoint; then kill -9 during a
 * tune: the restart replaces the stale socket and finds every record. */
static void test_stop_and_kill(void)
{
    daemon_t d;
    client c;
    start_case(&d, &c, "kill", FAKE_FAST, NULL);
    for (int i = 0; i < 3; i++)
        EXPECT(job_done(&c, submit_tune(&c, 512, 2048 + 128 * i, ",\"budget\":10"), 60));
    /* slow variants: a tune that runs for many seconds */
    const char *const slow[] = {"TUNED_TEST_FAKE_GPU=1", "TUNED_TEST_FAKE_MS=40", NULL};
    const char *const grace[] = {"--limit", "grace=2", NULL};
    restart_case(&d, &c, slow, grace);
    long long first = submit_tune(&c, 2048, 2048, ",\"budget\":400");
    EXPECT(first > 0);
    EXPECT(job_progressed(&c, first, 30)); /* a result to checkpoint (generation 0 is 1.6 s) */
    cl_close(&c);
    double t = now_s();
    EXPECT(daemon_stop(&d) == 0); /* exit 0: uv_loop_close() == 0 and the store closed */
    EXPECT(now_s() - t < 5); /* the grace (2 s), then the worker is killed */
    EXPECT(log_has(&d, "checkpoint stored"));
    /* kill -9 during a tune */
    EXPECT(daemon_start(&d, slow, NULL));
    EXPECT(cl_open(&c, &d));
    EXPECT(get_source_is(&c, "{\"op\":\"get\",\"rows\":2048,\"cols\":2048}", "exact")); /* the checkpoint */
    json_t *r = cl_call(&c, "{\"op\":\"stats\"}");
    long long worker = integer(json_array_get(json_object_get(r, "gpus"), 0), "worker_pid");
    json_decref(r);
    long long id = submit_tune(&c, 4096, 4096, ",\"budget\":400");
    sleep_ms(700);
    EXPECT(job_is(&c, id, "running"));
    cl_close(&c);
    daemon_kill9(&d);
    EXPECT(process_gone(worker, 5)); /* the worker dies with the daemon */
    struct stat st;
    EXPECT(lstat(d.sock, &st) == 0); /* the stale socket is left behind */
    EXPECT(daemon_start(&d, FAKE_FAST, NULL));
    EXPECT(cl_open(&c, &d));
    r = cl_call(&c, "{\"op\":\"list\"}");
    EXPECT(is_ok(r) && integer(r, "count") == 4); /* 3 tunes and the checkpoint */
    json_decref(r);
    for (int i = 0; i < 3; i++) {
        char req[128];
        snprintf(req, sizeof req, "{\"op\":\"get\",\"rows\":512,\"cols\":%d}", 2048 + 128 * i);
        EXPECT(get_source_is(&c, req, "exact"));
    }
    EXPECT(job_done(&c, submit_tune(&c, 4096, 4096, ",\"budget\":20"), 60));
    end_case(&d, &c);
}

/* TCP on loopback, and the CLI through the daemon and without it. */
static void test_tcp_and_cli(void)
{
    /* a free loopback port */
    int s = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t sl = sizeof sa;
    EXPECT(bind(s, (struct sockaddr *)&sa, sizeof sa) == 0 &&
          getsockname(s, (struct sockaddr *)&sa, &sl) == 0);
    int port = ntohs(sa.sin_port);
    close(s);
    char listen[32];
    snprintf(listen, sizeof listen, "%d", port);
    daemon_t d;
    daemon_init(&d, "tcpcli");
    const char *const args[] = {"--listen", listen, NULL};
    EXPECT(daemon_start(&d, FAKE_FAST, args));
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    sa.sin_port = htons((uint16_t)port);
    EXPECT(connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0);
    client c;
    EXPECT(cl_open_fd(&c, fd));
    json_t *r = cl_call(&c, "{\"op\":\"ping\"}");
    EXPECT(is_ok(r));
    json_decref(r);
    cl_close(&c);
    EXPECT(log_has(&d, "(loopback)"));
    /* tuned tune / get through the daemon */
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "TUNED_SOCKET=%s %s tune --shape 300x3000 --budget 12 -q > %s/out 2>&1",
             d.sock, tuned_exe, d.dir);
    EXPECT(system(cmd) == 0);
    snprintf(cmd, sizeof cmd, "TUNED_SOCKET=%s %s tune --shape 300x3000 > %s/out 2>&1 && "
             "grep -q 'already tuned' %s/out", d.sock, tuned_exe, d.dir, d.dir);
    EXPECT(system(cmd) == 0); /* a stored winner is printed, not tuned again */
    snprintf(cmd, sizeof cmd, "TUNED_SOCKET=%s %s tune --retune --budget 5 --shape 300x3000 > %s/out 2>&1 "
             "&& grep -q 'daemon job 2' %s/out", d.sock, tuned_exe, d.dir, d.dir);
    EXPECT(system(cmd) == 0);
    snprintf(cmd, sizeof cmd, "%s get --socket %s --shape 300x3000 > %s/out 2>&1", tuned_exe,
             d.sock, d.dir);
    EXPECT(system(cmd) == 0);
    snprintf(cmd, sizeof cmd, "grep -q 'source       exact' %s/out", d.dir);
    EXPECT(system(cmd) == 0);
    snprintf(cmd, sizeof cmd, "%s get --socket %s --shape 300x3001 > %s/out 2>&1", tuned_exe,
             d.sock, d.dir);
    EXPECT(WEXITSTATUS(system(cmd)) == 3); /* not stored: nearest or default, exit 3 */
    snprintf(cmd, sizeof cmd, "%s list --socket %s > %s/out 2>&1 && grep -q '^300x3000 ' %s/out",
             tuned_exe, d.sock, d.dir, d.dir);
    EXPECT(system(cmd) == 0);
    snprintf(cmd, sizeof cmd, "%s list --json --socket %s > %s/out 2>&1 && grep -q '\"cols\": 3000' %s/out",
             tuned_exe, d.sock, d.dir, d.dir);
    EXPECT(system(cmd) == 0);
    EXPECT(daemon_stop(&d) == 0);
    /* no daemon: get reads the store itself */
    snprintf(cmd, sizeof cmd, "%s get --socket %s/none.sock --db %s --shape 300x3000 > %s/out 2>&1",
             tuned_exe, root, d.db, d.dir);
    int rc = system(cmd);
    EXPECT(WIFEXITED(rc) && WEXITSTATUS(rc) != 1 && WEXITSTATUS(rc) != 2);
    if (failures > case_failures)
        dump_log(&d);
}

/* ---- the checks that run alone (each may be skipped) ---- */

/* A daemon with no GPU (no driver) serves what the store holds and
 * refuses to tune (its own test: exit 77 where a GPU driver is found). */
static int no_gpu_check(void)
{
    daemon_t d;
    client c;
    start_case(&d, &c, "nogpu", FAKE_FAST, NULL); /* a store with one fake-GPU record */
    EXPECT(job_done(&c, submit_tune(&c, 640, 640, ",\"budget\":8"), 60));
    restart_case(&d, &c, NULL, NULL);
    json_t *r = cl_call(&c, "{\"op\":\"stats\"}");
    bool none = json_is_string(json_object_get(r, "no_gpu"));
    json_decref(r);
    if (!none) {
        printf("a GPU driver is here: the no-GPU checks need a machine without one: skipped\n");
        end_case(&d, &c);
        return failures == 0 ? TEST_SKIP : 1;
    }
    /* the store's only GPU */
    EXPECT(get_source_is(&c, "{\"op\":\"get\",\"rows\":640,\"cols\":640}", "exact"));
    r = cl_call(&c, "{\"op\":\"get\",\"rows\":640,\"cols\":700,\"gpu\":\"tuned test-only fake GPU\"}");
    EXPECT(is_ok(r) && strcmp(str(r, "source"), "exact") != 0);
    json_decref(r);
    r = cl_call(&c, "{\"op\":\"tune\",\"rows\":640,\"cols\":700}");
    EXPECT(!is_ok(r) && strcmp(err_code(r), "no_gpu") == 0);
    json_decref(r);
    r = cl_call(&c, "{\"op\":\"get\",\"rows\":9,\"cols\":9,\"tune_if_missing\":true}");
    EXPECT(is_ok(r) && json_is_null(json_object_get(r, "job")) &&
           strcmp(str(json_object_get(r, "job_error"), "code"), "no_gpu") == 0);
    json_decref(r);
    end_case(&d, &c);
    printf("no GPU: %s\n", failures == 0 ? "ok" : "FAIL");
    return failures == 0 ? 0 : 1;
}

/* A fault planted in one variant (TUNED_TEST_PLANT_FAULT: the worker makes
 * the context fault with an out-of-bounds store when that variant comes
 * up) during a tune on a real GPU: the daemon keeps answering, the worker
 * is replaced, the job ends done with another winner. Exit 77 without a
 * GPU. */
static int gpu_fault_check(void)
{
    int arch;
    if (real_gpus(&arch) == 0)
        return failures == 0 ? TEST_SKIP : 1;
    const uint64_t rows = 4096, cols = 4096;
    char fault[64], env[128];
    seed_config(rows, cols, arch, 0, fault, sizeof fault);
    snprintf(env, sizeof env, "TUNED_TEST_PLANT_FAULT=%s", fault);
    printf("planting a fault in %s for %llux%llu fp16\n", fault, (unsigned long long)rows,
           (unsigned long long)cols);
    const char *const envs[] = {env, NULL};
    daemon_t d;
    client c;
    start_case(&d, &c, "gpu", envs, NULL);
    long long id = submit_tune(&c, rows, cols, ",\"budget\":80");
    double worst = 0;
    json_t *done = wait_job_probing(&c, id, 600, "{\"op\":\"get\",\"rows\":64,\"cols\":64}",
                                    &worst);
    char *text = done ? json_dumps(json_object_get(done, "job"), JSON_INDENT(2)) : NULL;
    printf("job: %s\n", text ? text : "(did not end)");
    free(text);
    const json_t *job = json_object_get(done, "job");
    EXPECT(strcmp(str(job, "state"), "done") == 0 && json_is_true(json_object_get(job, "stored")));
    EXPECT(integer(job, "crashes") >= 1 && integer(job, "worker_restarts") >= 1);
    const char *first = json_string_value(json_array_get(json_object_get(job, "crashed"), 0));
    EXPECT(first != NULL && strcmp(first, fault) == 0);
    EXPECT(strcmp(str(job, "best_config"), fault) != 0);
    printf("slowest answer while tuning: %.2f ms\n", worst * 1e3);
    EXPECT(worst < 0.1);
    json_decref(done);
    end_case(&d, &c);
    return failures == 0 ? 0 : 1;
}

int main(int argc, char **argv)
{
    const char *mode = argc > 2 ? argv[2] : "";
    if (argc < 2 || argc > 3 || (argc == 3 && strcmp(mode, "--no-gpu") != 0 &&
                                 strcmp(mode, "--gpu") != 0)) {
        fprintf(stderr, "usage: test_daemon TUNED [--no-gpu | --gpu]\n");
        return 2;
    }
    /* the fake GPU and the planted fault are test hooks */
    if (!HAVE_TEST_HOOKS) {
        printf("built without test hooks (-Dtest_hooks=true): skipped\n");
        return TEST_SKIP;
    }
    tuned_exe = argv[1];
    signal(SIGPIPE, SIG_IGN);
    alarm(strcmp(mode, "--gpu") == 0 ? 1500 : 280); /* a stuck run ends; meson's timeout is longer */
    snprintf(root, sizeof root, "/tmp/tuned-daemon-XXXXXX");
    if (mkdtemp(root) == NULL) {
        perror("mkdtemp");
        return 1;
    }
    int rc;
    if (strcmp(mode, "--no-gpu") == 0) {
        rc = no_gpu_check();
    } else if (strcmp(mode, "--gpu") == 0) {
        rc = gpu_fault_check();
    } else {
        struct {
            const char *name;
            void (*fn)(void);
        } cases[] = {
            {"start and socket", test_start_and_socket},
            {"malformed input", test_malformed},
            {"get and tune", test_get_and_tune},
            {"concurrent clients", test_concurrent},
            {"slow reader", test_slow_reader},
            {"worker crash and hang", test_worker_crash_and_hang},
            {"SIGTERM and kill -9", test_stop_and_kill},
            {"TCP and CLI", test_tcp_and_cli},
        };
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
            double t = case_start();
            cases[i].fn();
            case_report(cases[i].name, t);
        }
        printf("%d failures\n", failures);
        rc = failures == 0 ? 0 : 1;
    }
    int status = expect_done("test_daemon", root);
    return status != 0 ? status : rc;
}
