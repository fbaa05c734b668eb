/* test_daemon_gpus.c: one daemon, two GPUs: its workers (one per GPU) run
 * jobs side by side, for every kind the registry holds, and a worker
 * killed on one GPU costs nothing on the other.
 *
 *   test_daemon_gpus TUNED          suite 'integration': two test-only fake
 *                                   GPUs (TUNED_TEST_FAKE_GPU=2); exit 77
 *                                   in a build without the test hooks
 *   test_daemon_gpus TUNED --gpu2   suite 'gpu': the real GPUs; exit 77
 *                                   with fewer than two
 *
 * The cases, each on a daemon of its own:
 *   two shapes   two tunes submitted together run at once, one per GPU,
 *                and both finish;
 *   every kind   one tune of each kind (its registry example's columns,
 *                default key parameters) submitted at once: each is a job
 *                of its own (single flight joins a job of the same kind
 *                only), runs on some GPU, both GPUs take jobs, every job
 *                ends done and stored, and a get of that kind on the GPU
 *                that ran it answers exact;
 *   killed       two tunes running on the two GPUs; the worker of one is
 *                killed with SIGKILL mid-tune. That job is retried by a new
 *                worker and ends done and stored; the other GPU's job has
 *                no restart and no crash, and its worker is the same
 *                process throughout.
 * Exit 0 when every check passed; a failure prints its line and the
 * daemon's log. */
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/types.h>

#include "src/codegen/kind.h"
#include "tests/daemon_testlib.h"
#include "tuned.h"

/* What differs between the fake GPUs and the real ones: the environment
 * and the work a tune is given. */
typedef struct setup {
    const char *const *env;   /* NULL: the real GPUs */
    unsigned kind_budget;     /* variants of each kind's tune */
    uint64_t kind_rows;       /* rows (tokens) of each kind's tune */
    unsigned long_budget;     /* a tune that runs for seconds */
    double wait_s;            /* the longest a job may take */
} setup;

static const char *const FAKE_TWO[] = {"TUNED_TEST_FAKE_GPU=2", "TUNED_TEST_FAKE_MS=20", NULL};

/* The job view of id (owned by the caller; NULL without a reply). */
static json_t *job_view(client *c, long long id)
{
    return call_fmt(c, "{\"op\":\"job\",\"job\":%lld}", id);
}

/* The worker process of GPU ordinal dev (0 when not found). */
static long long worker_of(client *c, long long dev)
{
    json_t *r = cl_call(c, "{\"op\":\"stats\"}");
    const json_t *gpus = json_object_get(r, "gpus");
    long long pid = 0;
    for (size_t i = 0; i < json_array_size(gpus); i++)
        if (integer(json_array_get(gpus, i), "ordinal") == dev)
            pid = integer(json_array_get(gpus, i), "worker_pid");
    json_decref(r);
    return pid;
}

/* Tunes of rows x cols_a and rows x cols_b (the setup's long budget)
 * submitted together: whether they came to run at once on different GPUs
 * (a failure counted if not), their jobs in *a and *b. */
static bool two_long_tunes(client *c, const setup *s, uint64_t rows, uint64_t cols_a,
                           uint64_t cols_b, long long *a, long long *b)
{
    char extra[64];
    snprintf(extra, sizeof extra, ",\"budget\":%u", s->long_budget);
    *a = submit_tune(c, rows, cols_a, extra);
    *b = submit_tune(c, rows, cols_b, extra);
    bool both = both_running(c, *a, *b, (int)(s->wait_s * 100), 10);
    EXPECT(both, "jobs %lld and %lld never ran at once on two GPUs", *a, *b);
    return both;
}

static void case_two_shapes(const setup *s)
{
    daemon_t d;
    client c;
    start_case(&d, &c, "two-shapes", s->env, NULL);
    long long a, b;
    bool both = two_long_tunes(&c, s, 2048, 8192, 32000, &a, &b);
    printf("two shapes: both jobs running at once on different GPUs: %s\n", both ? "yes" : "NO");
    EXPECT(job_done(&c, a, s->wait_s));
    EXPECT(job_done(&c, b, s->wait_s));
    end_case(&d, &c);
}

static void case_every_kind(const setup *s)
{
    daemon_t d;
    client c;
    start_case(&d, &c, "every-kind", s->env, NULL);
    long long ids[TUNED__KIND_COUNT + 1] = {0};
    uint64_t cols[TUNED__KIND_COUNT + 1] = {0};
    for (unsigned k = 1; k <= TUNED__KIND_COUNT; k++) {
        uint32_t params;
        cols[k] = 8192;
        tuned__kind_example(tuned__kind(k), &cols[k], &params);
        char extra[128];
        snprintf(extra, sizeof extra, ",\"kernel\":\"%s\",\"dtype\":\"bf16\",\"budget\":%u",
                 tuned_kernel_name((tuned_kernel)k), s->kind_budget);
        ids[k] = submit_tune(&c, s->kind_rows, cols[k], extra);
        EXPECT(ids[k] > 0, "the tune of %s was refused", tuned_kernel_name((tuned_kernel)k));
        for (unsigned j = 1; j < k; j++)
            EXPECT(ids[j] != ids[k], "%s joined %s's job %lld", tuned_kernel_name((tuned_kernel)k),
                   tuned_kernel_name((tuned_kernel)j), ids[k]);
    }
    bool used[2] = {false, false};
    printf("%-22s %5s %6s %8s %6s %10s  %s\n", "kind", "job", "device", "state", "tried",
           "best_us", "exact on its GPU");
    for (unsigned k = 1; k <= TUNED__KIND_COUNT; k++) {
        const char *name = tuned_kernel_name((tuned_kernel)k);
        json_t *r = ids[k] > 0 ? wait_job(&c, ids[k], s->wait_s) : NULL;
        const json_t *job = json_object_get(r, "job");
        long long dev = integer(job, "device");
        if (dev >= 0 && dev < 2)
            used[dev] = true;
        char get[256];
        snprintf(get, sizeof get, "{\"op\":\"get\",\"kernel\":\"%s\",\"dtype\":\"bf16\","
                 "\"rows\":%llu,\"cols\":%llu,\"gpu\":%lld}", name,
                 (unsigned long long)s->kind_rows, (unsigned long long)cols[k], dev);
        bool exact = get_source_is(&c, get, "exact");
        printf("%-22s %5lld %6lld %8s %6lld %10.2f  %s\n", name, ids[k], dev, str(job, "state"),
               integer(job, "evaluated"), json_real_value(json_object_get(job, "best_us")),
               exact ? "yes" : "NO");
        EXPECT(strcmp(str(job, "state"), "done") == 0 && json_is_true(json_object_get(job, "stored")),
               "%s: job %lld ended %s (%s)", name, ids[k], str(job, "state"),
               str(job, "stop_reason"));
        EXPECT(strcmp(str(job, "kernel"), name) == 0, "%s: job %lld is of kind %s", name, ids[k],
               str(job, "kernel"));
        EXPECT(integer(job, "joined") == 0, "%s: job %lld was joined %lld times", name, ids[k],
               integer(job, "joined"));
        EXPECT(exact, "%s: no exact record on GPU %lld, which tuned it", name, dev);
        json_decref(r);
    }
    EXPECT(used[0] && used[1], "the jobs ran on GPU 0: %s, GPU 1: %s", used[0] ? "yes" : "no",
           used[1] ? "yes" : "no");
    end_case(&d, &c);
}

static void case_killed(const setup *s)
{
    daemon_t d;
    client c;
    start_case(&d, &c, "killed", s->env, NULL);
    long long a, b;
    two_long_tunes(&c, s, 4096, 8192, 16384, &a, &b);
    /* mid-tune: a has evaluated a variant and goes on */
    json_t *r = NULL;
    for (double end = now_s() + s->wait_s; now_s() < end; sleep_ms(20)) {
        json_decref(r);
        r = job_view(&c, a);
        if (integer(json_object_get(r, "job"), "evaluated") > 0)
            break;
    }
    const json_t *ja = json_object_get(r, "job");
    EXPECT(strcmp(str(ja, "state"), "running") == 0 && integer(ja, "evaluated") > 0,
           "job %lld is %s after %lld variants: not mid-tune", a, str(ja, "state"),
           integer(ja, "evaluated"));
    long long dev_a = integer(ja, "device");
    json_decref(r);
    r = job_view(&c, b);
    long long dev_b = integer(json_object_get(r, "job"), "device");
    json_decref(r);
    long long victim = worker_of(&c, dev_a), bystander = worker_of(&c, dev_b);
    EXPECT(victim > 0 && bystander > 0 && victim != bystander,
           "workers: GPU %lld %lld, GPU %lld %lld", dev_a, victim, dev_b, bystander);
    if (victim > 0)
        EXPECT(kill((pid_t)victim, SIGKILL) == 0);
    printf("killed: worker %lld of GPU %lld during job %lld; job %lld runs on GPU %lld\n", victim,
           dev_a, a, b, dev_b);
    json_t *ra = wait_job(&c, a, s->wait_s), *rb = wait_job(&c, b, s->wait_s);
    ja = json_object_get(ra, "job");
    const json_t *jb = json_object_get(rb, "job");
    printf("killed: job %lld %s, stored %s, restarts %lld; job %lld %s, stored %s, restarts %lld, "
           "crashes %lld\n", a, str(ja, "state"), json_is_true(json_object_get(ja, "stored")) ?
           "yes" : "no", integer(ja, "worker_restarts"), b, str(jb, "state"),
           json_is_true(json_object_get(jb, "stored")) ? "yes" : "no",
           integer(jb, "worker_restarts"), integer(jb, "crashes"));
    EXPECT(strcmp(str(ja, "state"), "done") == 0 && json_is_true(json_object_get(ja, "stored")),
           "the killed worker's job %lld ended %s", a, str(ja, "state"));
    EXPECT(integer(ja, "worker_restarts") >= 1);
    EXPECT(strcmp(str(jb, "state"), "done") == 0 && json_is_true(json_object_get(jb, "stored")),
           "the other GPU's job %lld ended %s", b, str(jb, "state"));
    EXPECT(integer(jb, "worker_restarts") == 0 && integer(jb, "crashes") == 0,
           "the other GPU's job %lld: %lld restarts, %lld crashes", b,
           integer(jb, "worker_restarts"), integer(jb, "crashes"));
    EXPECT(worker_of(&c, dev_b) == bystander, "GPU %lld's worker changed", dev_b);
    long long replaced = worker_of(&c, dev_a);
    EXPECT(replaced > 0 && replaced != victim, "GPU %lld's worker is %lld after the kill of %lld",
           dev_a, replaced, victim);
    json_decref(ra);
    json_decref(rb);
    end_case(&d, &c);
}

int main(int argc, char **argv)
{
    bool real = argc == 3 && strcmp(argv[2], "--gpu2") == 0;
    if (argc < 2 || argc > 3 || (argc == 3 && !real)) {
        fprintf(stderr, "usage: test_daemon_gpus TUNED [--gpu2]\n");
        return 2;
    }
    if (!real && !HAVE_TEST_HOOKS) {
        printf("built without test hooks (-Dtest_hooks=true): no fake GPUs: skipped\n");
        return TEST_SKIP;
    }
    tuned_exe = argv[1];
    signal(SIGPIPE, SIG_IGN);
    alarm(real ? 1500 : 280); /* a stuck run ends; meson's timeout is longer */
    snprintf(root, sizeof root, "/tmp/tuned-daemon-gpus-XXXXXX");
    if (mkdtemp(root) == NULL) {
        perror("mkdtemp");
        return 1;
    }
    const setup fake = {FAKE_TWO, 4, 64, 120, 120}, gpus = {NULL, 12, 1024, 60, 600};
    const setup *s = real ? &gpus : &fake;
    if (real) {
        int arch;
        size_t n = real_gpus(&arch);
        if (n < 2) {
            printf("%zu GPU(s): the two-GPU checks need a machine with two: skipped\n", n);
            int rc = expect_done("test_daemon_gpus", root);
            return rc != 0 ? rc : TEST_SKIP;
        }
    }
    struct {
        const char *name;
        void (*fn)(const setup *);
    } cases[] = {
        {"two shapes at once", case_two_shapes},
        {"every kind on two GPUs", case_every_kind},
        {"a worker killed on one GPU", case_killed},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        double t = case_start();
        cases[i].fn(s);
        case_report(cases[i].name, t);
    }
    return expect_done("test_daemon_gpus", root);
}
