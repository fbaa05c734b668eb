/* test_store_procs.c: the store across processes: writers killed with
 * SIGKILL in the middle of a write transaction, repeatedly; two writers and
 * a reader at once; a map grown by another process; stale reader slots of a
 * killed reader cleared at open.
 *
 * Children are this program re-executed with a role argument, so each is a
 * fresh process image with its own store handle, as the daemon and CLI
 * runs are. A writer child reports every committed operation on a pipe
 * ("acked"); in "hooked" rounds (`test_store_procs --hooked-kills`, a test
 * of its own: it needs a build with test hooks, else exits 77) the store's
 * test hook stops it inside a write transaction, after its work and before
 * its commit, and reports which operation is in flight, and the parent
 * kills it there; in the others it is killed at a random moment. After every kill
 * the store must open, hold every acked operation intact, hold nothing of
 * the killed transaction, hold every multi-entry batch whole or not at all,
 * and take new writes, also through a handle the parent kept open. */
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cache/store.h"
#include "cache/store_internal.h"
#include "tests/store_testlib.h"
#include "tuned.h"
#include "src/tuner/policy.h"

#define TINY_MAP ((size_t)64 << 10)
#define BATCH 40 /* history entries per batch */

enum { OP_BEST = 1, OP_EVALS = 2, OP_CUBIN = 3 };
enum { MSG_ACK = 1, MSG_HUNG = 2 };

typedef struct msg {
    uint32_t type, op, index;
} msg;

/* ---- what writers write, so the parent can check it ---- */

static void best_record(tuned__record *r, uint32_t i, const char *gpu)
{
    make_record(r, gpu, (uint64_t)i + 1, 4096);
    r->evaluations = i;
    r->median_us = 10.0 + i;
}

static tuned__store_key evals_group(void)
{
    tuned__record r;
    make_record(&r, "gpu-evals", 7, 7);
    return r.key;
}

static void eval_config(char *buf, size_t n, uint32_t batch, int j)
{
    snprintf(buf, n, "b%06" PRIu32 "-%02d", batch, j);
}

static size_t cubin_size(uint32_t i)
{
    return (size_t)(i * 997u % 20000u) + 1;
}

static unsigned char cubin_byte(uint32_t i, size_t j)
{
    return (unsigned char)(i * 131u + j * 7u);
}

/* ---- the writer child ---- */

static int pipe_fd = -1;
static msg in_flight;
static long hang_at = -1; /* the write transaction to stop in, -1: none */

static void send_msg(uint32_t type, uint32_t op, uint32_t index)
{
    msg m = {type, op, index};
    if (write(pipe_fd, &m, sizeof m) != (ssize_t)sizeof m)
        _exit(3);
}

#if HAVE_TEST_HOOKS
static long txns; /* write transactions begun */

static void hook(void *ctx, const char *where)
{
    (void)ctx;
    (void)where;
    if (txns++ == hang_at) {
        send_msg(MSG_HUNG, in_flight.op, in_flight.index);
        for (;;)
            pause(); /* SIGKILL comes */
    }
}
#endif

/* Stops this writer in its write transaction number hang_at (the store's
 * test hook); never without the test hooks (main skips those rounds). */
static void stop_in_txn(tuned__store *s)
{
#if HAVE_TEST_HOOKS
    if (hang_at >= 0)
        tuned__store_set_test_hook(s, hook, NULL);
#else
    (void)s;
#endif
}

static int writer_child(const char *path, uint32_t start, long hang, int fd)
{
    pipe_fd = fd;
    hang_at = hang;
    tuned__store *s;
    tuned__err e = {0};
    if (tuned__store_open_mapsize(&s, path, 0, TINY_MAP, &e) != 0) {
        fprintf(stderr, "writer: %s\n", e.msg);
        return 1;
    }
    stop_in_txn(s);
    tuned__store_key group = evals_group();
    tuned__store_eval *evs = calloc(BATCH, sizeof *evs);
    unsigned char *blob = malloc(20001);
    for (uint32_t i = start; i < start + 100000; i++) {
        tuned__record r;
        best_record(&r, i, "gpu-crash");
        in_flight = (msg){0, OP_BEST, i};
        if (tuned__store_put_best(s, &r, &e) != 0)
            break;
        send_msg(MSG_ACK, OP_BEST, i);
        if (i % 3 == 0) {
            for (int j = 0; j < BATCH; j++) {
                char cfg[32];
                eval_config(cfg, sizeof cfg, i, j);
                make_eval(&evs[j], &group, cfg, 1.0 + j);
            }
            in_flight = (msg){0, OP_EVALS, i};
            if (tuned__store_put_evals(s, evs, BATCH, &e) != 0)
                break;
            send_msg(MSG_ACK, OP_EVALS, i);
            size_t n = cubin_size(i);
            for (size_t j = 0; j < n; j++)
                blob[j] = cubin_byte(i, j);
            in_flight = (msg){0, OP_CUBIN, i};
            if (tuned__store_put_cubin(s, 1000000 + i, blob, n, &e) != 0)
                break;
            send_msg(MSG_ACK, OP_CUBIN, i);
        }
    }
    fprintf(stderr, "writer: %s\n", e.msg);
    return 1;
}

/* ---- the parent's checks ---- */

typedef struct ledger {
    uint32_t next;            /* the next index a writer starts at */
    uint32_t hi;              /* 1 + the highest index any writer reported */
    unsigned char *best;      /* per index: 1 acked */
    unsigned char *evals;
    unsigned char *cubin;
    size_t cap;
} ledger;

static void mark(ledger *l, const msg *m)
{
    if (m->index >= l->cap)
        return;
    if (m->index + 1 > l->hi)
        l->hi = m->index + 1;
    unsigned char *a = m->op == OP_BEST ? l->best : m->op == OP_EVALS ? l->evals : l->cubin;
    a[m->index] = 1;
}

/* Checks the store against the ledger; hung (op 0 = none) must be absent.
 * Returns 1 + the highest best index present. */
static uint32_t check_store(tuned__store *s, const ledger *l, const msg *hung)
{
    tuned__err e = {0};
    uint32_t present_to = 0;
    /* A killed writer may have committed one operation past its last ack. */
    uint32_t end = (l->hi > l->next ? l->hi : l->next) + 2;
    for (uint32_t i = 0; i < end && i < l->cap; i++) {
        tuned__record want, got;
        best_record(&want, i, "gpu-crash");
        int rc = tuned__store_get_best(s, &want.key, &got, TUNED__MEASURE_POLICY, &e);
        if (rc == 0) {
            EXPECT(record_equal(&want, &got));
            present_to = i + 1;
        } else {
            EXPECT_RC(rc, TUNED_ENOTFOUND, &e);
            EXPECT(!l->best[i], "acked record %" PRIu32 " lost", i);
        }
        EXPECT(!(hung->op == OP_BEST && hung->index == i && rc == 0),
               "record %" PRIu32 " of the killed transaction is there", i);
        if (i % 3 == 0) {
            void *blob;
            size_t n;
            rc = tuned__store_get_cubin(s, 1000000 + i, &blob, &n, &e);
            if (rc == 0) {
                int same = n == cubin_size(i);
                for (size_t j = 0; same && j < n; j++)
                    same = ((unsigned char *)blob)[j] == cubin_byte(i, j);
                EXPECT(same);
                free(blob);
                EXPECT(!(hung->op == OP_CUBIN && hung->index == i));
            } else {
                EXPECT_RC(rc, TUNED_ENOTFOUND, &e);
                EXPECT(!l->cubin[i]);
            }
        }
    }
    /* History: every batch whole or absent; acked ones whole; the hung one
     * absent. Listed page by page, as a resuming tune would. */
    tuned__store_key group = evals_group();
    tuned__store_eval page[64];
    char after[128] = "";
    int *count = calloc(l->cap, sizeof *count);
    for (;;) {
        size_t n;
        EXPECT_OK(tuned__store_list_evals(s, &group, after, page, 64, &n, &e), &e);
        for (size_t i = 0; i < n; i++) {
            unsigned long b = strtoul(page[i].config + 1, NULL, 10);
            if (b < l->cap)
                count[b]++;
        }
        if (n < 64)
            break;
        snprintf(after, sizeof after, "%s", page[n - 1].config);
    }
    for (uint32_t i = 0; i < l->cap; i++) {
        EXPECT(count[i] == 0 || count[i] == BATCH, "batch %" PRIu32 " has %d of %d entries", i,
               count[i], BATCH);
        EXPECT(!l->evals[i] || count[i] != 0, "acked history batch %" PRIu32 " lost", i);
    }
    EXPECT(!(hung->op == OP_EVALS && hung->index < l->cap && count[hung->index] != 0),
           "history batch of the killed transaction is there");
    free(count);
    return present_to;
}

static pid_t spawn(const char *role, const char *a1, const char *a2, const char *a3,
                   const char *a4)
{
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        execl(self_exe, self_exe, role, a1, a2, a3, a4, (char *)NULL);
        fprintf(stderr, "exec %s: %s\n", self_exe, strerror(errno));
        _exit(127);
    }
    EXPECT(pid > 0);
    return pid;
}

/* Writers killed in the middle of write transactions, 16 times: stopped
 * by the store's test hook inside a write transaction before its commit
 * (hooked), or at a random moment. In half the rounds this process holds
 * the store open the whole time (as the daemon would), so the next writer
 * must recover the dead one's robust write lock; in the others nobody
 * does, so the next open resets the lock file. (One process never opens
 * the store twice at once: LMDB's fcntl locks are per process.) */
static void sigkill_rounds(bool hooked)
{
    char path[4200];
    dir_path(path, sizeof path, "crash");
    tuned__err e = {0};
    ledger l = {.cap = 1 << 16};
    l.best = calloc(l.cap, 1);
    l.evals = calloc(l.cap, 1);
    l.cubin = calloc(l.cap, 1);
    uint64_t seed = 0x5eed;
    const char *env = getenv("TUNED_TEST_SEED");
    if (env != NULL)
        seed = strtoull(env, NULL, 0);
    printf("  seed %" PRIu64 " (TUNED_TEST_SEED)\n", seed);
    enum { ROUNDS = 16 };
    int hung_rounds = 0;
    int kinds[4] = {0};
    for (int round = 0; round < ROUNDS; round++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        int hook_round = hooked;
        int held = round % 2 == 0;
        tuned__store *keep = NULL;
        if (held) {
            EXPECT_OK(tuned__store_open_mapsize(&keep, path, 0, TINY_MAP, &e), &e);
            if (keep == NULL)
                break;
        }
        long hang = hook_round ? (long)((seed >> 33) % 24) : -1;
        int fds[2];
        EXPECT(pipe(fds) == 0);
        char a_start[32], a_hang[32], a_fd[32];
        snprintf(a_start, sizeof a_start, "%" PRIu32, l.next);
        snprintf(a_hang, sizeof a_hang, "%ld", hang);
        snprintf(a_fd, sizeof a_fd, "%d", fds[1]);
        pid_t pid = spawn("--writer", path, a_start, a_hang, a_fd);
        close(fds[1]);
        msg hung = {0};
        msg m;
        if (hook_round) {
            while (read(fds[0], &m, sizeof m) == (ssize_t)sizeof m) {
                if (m.type == MSG_HUNG) {
                    hung = m;
                    break;
                }
                mark(&l, &m);
            }
            EXPECT(hung.op != 0);
            hung_rounds += hung.op != 0;
        } else {
            /* A random moment: mid-transaction, mid-commit, mid-grow. */
            struct timespec ts = {0, (long)((seed >> 20) % 40) * 1000000L + 5000000L};
            nanosleep(&ts, NULL);
        }
        kill(pid, SIGKILL);
        while (read(fds[0], &m, sizeof m) == (ssize_t)sizeof m)
            if (m.type == MSG_ACK)
                mark(&l, &m);
        close(fds[0]);
        int status;
        EXPECT(waitpid(pid, &status, 0) == pid);
        EXPECT(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
        kinds[hook_round * 2 + held]++;

        /* Every acked operation is there, nothing of the killed one, and
         * the store takes writes again. */
        tuned__store *s = keep;
        if (s == NULL)
            EXPECT_OK(tuned__store_open_mapsize(&s, path, 0, TINY_MAP, &e), &e);
        if (s == NULL)
            break;
        uint32_t present = check_store(s, &l, &hung);
        tuned__record r, got;
        best_record(&r, 60000 + (uint32_t)round, "gpu-parent");
        EXPECT_OK(tuned__store_put_best(s, &r, &e), &e);
        EXPECT_OK(tuned__store_get_best(s, &r.key, &got, TUNED__MEASURE_POLICY, &e), &e);
        tuned__store_close(s);
        l.next = present + 1;
        if (l.hi < l.next)
            l.hi = l.next;
    }
    printf("  %d kills: %d stopped inside a write transaction before its commit (%d of them "
           "with the store held open here), %d at a random moment (%d held); %" PRIu32
           " record indices used, every acked operation intact, no batch split\n",
           ROUNDS, hung_rounds, kinds[3], kinds[0] + kinds[1], kinds[1], l.next);
    EXPECT(!hooked || hung_rounds == ROUNDS);
    free(l.best);
    free(l.evals);
    free(l.cubin);
}

static void test_random_kills(void)
{
    sigkill_rounds(false);
}

static void test_hooked_kills(void)
{
    sigkill_rounds(true);
}

/* ---- two writers and a reader ---- */

enum { PER_WRITER = 150 };

static int rw_writer(const char *path, const char *id)
{
    tuned__store *s;
    tuned__err e = {0};
    if (tuned__store_open_mapsize(&s, path, 0, TINY_MAP, &e) != 0) {
        fprintf(stderr, "writer %s: %s\n", id, e.msg);
        return 1;
    }
    char gpu[32];
    snprintf(gpu, sizeof gpu, "gpu-w%s", id);
    tuned__store_eval evs[10];
    for (uint32_t i = 0; i < PER_WRITER; i++) {
        tuned__record r;
        best_record(&r, i, gpu);
        if (tuned__store_put_best(s, &r, &e) != 0)
            goto fail;
        if (i % 10 == 0) {
            for (int j = 0; j < 10; j++) {
                char cfg[32];
                snprintf(cfg, sizeof cfg, "w%s-%04" PRIu32 "-%d", id, i, j);
                make_eval(&evs[j], &r.key, cfg, 1 + j);
            }
            if (tuned__store_put_evals(s, evs, 10, &e) != 0)
                goto fail;
        }
    }
    tuned__store_close(s);
    return 0;
fail:
    fprintf(stderr, "writer %s: %s\n", id, e.msg);
    tuned__store_close(s);
    return 1;
}

typedef struct reader_ctx {
    size_t n;
} reader_ctx;

static int reader_count(void *ctx, const tuned__store_key *key, const tuned__record *r,
                        const char *damage)
{
    (void)key;
    reader_ctx *c = ctx;
    if (r == NULL) {
        fprintf(stderr, "reader: damaged record: %s\n", damage);
        return 1;
    }
    c->n++;
    return 0;
}

static int rw_reader(const char *path)
{
    tuned__store *s = NULL;
    tuned__err e = {0};
    double t0 = now_s();
    /* The writers create the store; wait for it. */
    while (tuned__store_open(&s, path, TUNED__STORE_READONLY, &e) == TUNED_ENOTFOUND &&
           now_s() - t0 < 30)
        usleep(1000);
    if (s == NULL) {
        fprintf(stderr, "reader: %s\n", e.msg);
        return 1;
    }
    size_t last = 0, reads = 0;
    while (now_s() - t0 < 60) {
        reader_ctx c = {0};
        if (tuned__store_each_best(s, NULL, reader_count, &c, &e) != 0) {
            fprintf(stderr, "reader: %s\n", e.msg);
            tuned__store_close(s);
            return 1;
        }
        reads++;
        if (c.n < last) {
            fprintf(stderr, "reader: saw %zu records after %zu\n", c.n, last);
            tuned__store_close(s);
            return 1;
        }
        last = c.n;
        if (last == 2 * PER_WRITER)
            break;
    }
    printf("  reader: %zu snapshots, never fewer records than before, ended at %zu\n", reads,
           last);
    tuned__store_close(s);
    return last == 2 * PER_WRITER ? 0 : 1;
}

static void test_two_writers_one_reader(void)
{
    char path[4200];
    dir_path(path, sizeof path, "rw");
    pid_t r = spawn("--reader", path, "", "", "");
    pid_t w1 = spawn("--rw-writer", path, "1", "", "");
    pid_t w2 = spawn("--rw-writer", path, "2", "", "");
    pid_t pids[3] = {w1, w2, r};
    for (int i = 0; i < 3; i++) {
        int status;
        EXPECT(waitpid(pids[i], &status, 0) == pids[i]);
        EXPECT(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    }
    tuned__err e = {0};
    tuned__store *s;
    EXPECT_OK(tuned__store_open(&s, path, TUNED__STORE_READONLY, &e), &e);
    if (s == NULL)
        return;
    for (int w = 1; w <= 2; w++) {
        char gpu[32];
        snprintf(gpu, sizeof gpu, "gpu-w%d", w);
        int lost = 0;
        for (uint32_t i = 0; i < PER_WRITER; i++) {
            tuned__record want, got;
            best_record(&want, i, gpu);
            if (tuned__store_get_best(s, &want.key, &got, TUNED__MEASURE_POLICY, &e) != 0 || !record_equal(&want, &got))
                lost++;
            if (i % 10 == 0) {
                tuned__store_eval page[16];
                size_t n;
                EXPECT_OK(tuned__store_list_evals(s, &want.key, NULL, page, 16, &n, &e), &e);
                EXPECT(n == 10);
            }
        }
        EXPECT(lost == 0);
    }
    char data[4300];
    snprintf(data, sizeof data, "%s/data.mdb", path);
    struct stat st;
    EXPECT(stat(data, &st) == 0);
    printf("  %d records and their history from 2 writers, none lost; data.mdb grew to %lld "
           "KiB from a 64 KiB map\n", 2 * PER_WRITER, (long long)st.st_size >> 10);
    tuned__store_close(s);
}

/* ---- a map grown by another process ---- */

enum { CHILD_RECORDS = 1500 };

static int grow_child(const char *path)
{
    tuned__store *c;
    tuned__err e = {0};
    int bad = tuned__store_open_mapsize(&c, path, 0, TINY_MAP, &e) != 0;
    tuned__record r;
    make_record(&r, "gpu-child", 1, 2);
    for (uint64_t i = 0; i < CHILD_RECORDS && !bad; i++) {
        r.key.rows = i + 1;
        bad = tuned__store_put_best(c, &r, &e) != 0;
    }
    if (bad)
        fprintf(stderr, "grow child: %s\n", e.msg);
    tuned__store_close(c);
    return bad;
}

static void test_other_process_grows(void)
{
    char path[4200];
    tuned__store *s = open_test_store(path, sizeof path, "grow", TINY_MAP);
    if (s == NULL)
        return;
    tuned__err e = {0};
    tuned__record r, got;
    make_record(&r, "gpu-parent", 1, 1);
    EXPECT_OK(tuned__store_put_best(s, &r, &e), &e);
    size_t before = tuned__store_mapsize(s);
    pid_t pid = spawn("--grow-child", path, "", "", "");
    int status;
    EXPECT(waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0);
    /* This handle's next transactions find MDB_MAP_RESIZED and adopt the size. */
    make_record(&got, "gpu-child", CHILD_RECORDS, 2);
    EXPECT_OK(tuned__store_get_best(s, &got.key, &got, TUNED__MEASURE_POLICY, &e), &e);
    EXPECT(tuned__store_mapsize(s) > before);
    r.key.rows = 2;
    EXPECT_OK(tuned__store_put_best(s, &r, &e), &e);
    size_t n;
    EXPECT_OK(tuned__store_find_shape(s, 1, 0, CHILD_RECORDS, 2, &got, 1, &n, &e), &e);
    EXPECT(n == 1);
    tuned__store_close(s);
}

/* A read-only handle opened before any writer created the store's
 * databases finds them once another process has. */
static void test_reader_before_writer(void)
{
    char path[4200];
    dir_path(path, sizeof path, "early-reader");
    EXPECT(mkdir(path, 0700) == 0);
    EXPECT(raw_put(path, "unrelated", "k", 1, "v", 1) == 0); /* an LMDB env, none of our dbs */
    tuned__err e = {0};
    tuned__store *s;
    EXPECT_OK(tuned__store_open(&s, path, TUNED__STORE_READONLY, &e), &e);
    if (s == NULL)
        return;
    tuned__record r;
    make_record(&r, "gpu-child", CHILD_RECORDS, 2);
    EXPECT_RC(tuned__store_get_best(s, &r.key, &r, TUNED__MEASURE_POLICY, &e), TUNED_ENOTFOUND, &e);
    pid_t pid = spawn("--grow-child", path, "", "", "");
    int status;
    EXPECT(waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0);
    EXPECT_OK(tuned__store_get_best(s, &r.key, &r, TUNED__MEASURE_POLICY, &e), &e);
    size_t n;
    EXPECT_OK(tuned__store_find_shape(s, 1, 0, 1, 2, &r, 1, &n, &e), &e);
    EXPECT(n == 1);
    tuned__store_close(s);
}

/* ---- stale readers ---- */

static int hold_fd = -1;

static int hold_visit(void *ctx, const tuned__store_key *key, const tuned__record *r,
                      const char *damage)
{
    (void)key;
    (void)r;
    (void)damage;
    char c = (char)('0' + *(int *)ctx); /* the stale slots its own open cleared */
    if (write(hold_fd, &c, 1) != 1)
        _exit(3);
    for (;;)
        pause(); /* inside a read transaction: SIGKILL comes */
}

static int hold_reader(const char *path, int fd)
{
    hold_fd = fd;
    tuned__store *s;
    tuned__err e = {0};
    if (tuned__store_open(&s, path, TUNED__STORE_READONLY, &e) != 0) {
        fprintf(stderr, "hold reader: %s\n", e.msg);
        return 1;
    }
    int cleared = tuned__store_stale_readers(s);
    tuned__store_each_best(s, NULL, hold_visit, &cleared, &e);
    return 1;
}

/* Opens the store and exits with the number of stale reader slots the
 * open cleared (at most 100). */
static int count_stale(const char *path)
{
    tuned__store *s;
    tuned__err e = {0};
    if (tuned__store_open(&s, path, 0, &e) != 0) {
        fprintf(stderr, "count stale: %s\n", e.msg);
        return 101;
    }
    int n = tuned__store_stale_readers(s);
    tuned__store_close(s);
    return n > 100 ? 100 : n;
}

/* Readers killed inside read transactions leave reader slots behind; while
 * another process holds the store open (so LMDB does not reset its lock
 * file), the next open must clear them. */
static void test_stale_reader(void)
{
    char path[4200];
    tuned__store *s = open_test_store(path, sizeof path, "stale", 0);
    if (s == NULL)
        return;
    tuned__err e = {0};
    tuned__record r;
    make_record(&r, "gpu-a", 1, 1);
    EXPECT_OK(tuned__store_put_best(s, &r, &e), &e);
    int total = 0;
    for (int i = 0; i < 3; i++) {
        int fds[2];
        EXPECT(pipe(fds) == 0);
        char a_fd[16];
        snprintf(a_fd, sizeof a_fd, "%d", fds[1]);
        pid_t pid = spawn("--hold-reader", path, a_fd, "", "");
        close(fds[1]);
        char c = 0;
        EXPECT(read(fds[0], &c, 1) == 1);
        close(fds[0]);
        /* Each reader's open cleared the slot its killed predecessor left. */
        EXPECT(c == (i == 0 ? '0' : '1'));
        total += c - '0';
        kill(pid, SIGKILL);
        int status;
        EXPECT(waitpid(pid, &status, 0) == pid);
    }
    pid_t pid = spawn("--count-stale", path, "", "", "");
    int status;
    EXPECT(waitpid(pid, &status, 0) == pid && WIFEXITED(status));
    int cleared = WEXITSTATUS(status);
    total += cleared;
    printf("  3 readers killed inside read transactions: %d stale slots cleared by the opens "
           "that followed each kill\n", total);
    EXPECT(cleared == 1 && total == 3);
    /* This process's own handle was never disturbed. */
    tuned__record got;
    EXPECT_OK(tuned__store_put_best(s, &r, &e), &e);
    EXPECT_OK(tuned__store_get_best(s, &r.key, &got, TUNED__MEASURE_POLICY, &e), &e);
    tuned__store_close(s);
}

int main(int argc, char **argv)
{
    if (argc >= 2 && strcmp(argv[1], "--writer") == 0 && argc >= 6)
        return writer_child(argv[2], (uint32_t)strtoul(argv[3], NULL, 10),
                            strtol(argv[4], NULL, 10), atoi(argv[5]));
    if (argc >= 4 && strcmp(argv[1], "--rw-writer") == 0)
        return rw_writer(argv[2], argv[3]);
    if (argc >= 3 && strcmp(argv[1], "--reader") == 0)
        return rw_reader(argv[2]);
    if (argc >= 3 && strcmp(argv[1], "--grow-child") == 0)
        return grow_child(argv[2]);
    if (argc >= 4 && strcmp(argv[1], "--hold-reader") == 0)
        return hold_reader(argv[2], atoi(argv[3]));
    if (argc >= 3 && strcmp(argv[1], "--count-stale") == 0)
        return count_stale(argv[2]);
    if (argc > 0 && strchr(argv[0], '/') != NULL)
        self_exe = argv[0];
    signal(SIGPIPE, SIG_IGN);
    if (argc >= 2 && strcmp(argv[1], "--hooked-kills") == 0) {
        if (!HAVE_TEST_HOOKS) {
            printf("built without test hooks (-Dtest_hooks=true): skipped\n");
            return TEST_SKIP;
        }
        static const test_case hooked[] = {
            {"writers killed with SIGKILL inside a write transaction", test_hooked_kills},
        };
        return run_tests("test_store_procs", hooked, 1);
    }
    static const test_case tests[] = {
        {"writers killed with SIGKILL at random moments", test_random_kills},
        {"two writers and a reader", test_two_writers_one_reader},
        {"another process grows the map", test_other_process_grows},
        {"a reader opened before the store existed", test_reader_before_writer},
        {"stale readers cleared at open", test_stale_reader},
    };
    return run_tests("test_store_procs", tests, sizeof tests / sizeof tests[0]);
}
