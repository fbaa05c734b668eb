/* store_testlib.c: helpers of the store's test programs (store_testlib.h). */
#include "tests/store_testlib.h"
#include "cache/store_internal.h"
#include "src/tuner/policy.h"

#include <errno.h>
#include <ftw.h>
#include <lmdb.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <time.h>

int failures;
char root[1024];
const char *self_exe = "/proc/self/exe";

void dir_path(char *buf, size_t size, const char *name)
{
    snprintf(buf, size, "%s/%s", root, name);
}

tuned__store *open_test_store(char *path, size_t size, const char *name, size_t mapsize)
{
    dir_path(path, size, name);
    tuned__err e = {0};
    tuned__store *s = NULL;
    EXPECT_OK(tuned__store_open_mapsize(&s, path, 0, mapsize, &e), &e);
    return s;
}

void make_record(tuned__record *r, const char *gpu, uint64_t rows, uint64_t cols)
{
    memset(r, 0, sizeof *r);
    r->key.kernel = TUNED_KERNEL_SOFTMAX;
    r->key.dtype = TUNED_FP16;
    r->key.rows = rows;
    r->key.cols = cols;
    r->key.layout = TUNED__LAYOUT_DENSE;
    r->key.gpu_fp = tuned__store_gpu_fingerprint(gpu);
    snprintf(r->config, sizeof r->config, "w32.r1.v8.ld=el.st=cs.reg=f32");
    snprintf(r->gpu, sizeof r->gpu, "%s", gpu);
    snprintf(r->gpu_name, sizeof r->gpu_name, "NVIDIA H100 80GB HBM3");
    r->prov.cc_major = 9;
    r->prov.cc_minor = 0;
    r->prov.sm_count = 132;
    r->prov.mem_mib = 81079;
    r->prov.driver_version = 13000;
    r->prov.nvrtc_major = 13;
    r->prov.nvrtc_minor = 0;
    r->prov.template_hash = 0x0123456789abcdefull;
    snprintf(r->prov.policy, sizeof r->prov.policy, "%s", TUNED__MEASURE_POLICY);
    r->median_us = 12.345678901234567;
    r->copy_us = 10.0;
    r->gbps = 2876.5;
    r->evaluations = 96;
    r->cubin = 0;
    snprintf(r->date, sizeof r->date, "2026-11-21T10:00:00Z");
    snprintf(r->tool_version, sizeof r->tool_version, "%s", TUNED_VERSION_STRING);
}

void make_eval(tuned__store_eval *ev, const tuned__store_key *key, const char *config,
               double median_us)
{
    memset(ev, 0, sizeof *ev);
    ev->key = *key;
    snprintf(ev->config, sizeof ev->config, "%s", config);
    ev->status = TUNED__HIST_OK;
    ev->median_us = median_us;
    ev->p20_us = median_us * 0.99;
    ev->p80_us = median_us * 1.01;
    ev->compile_ms = 120.5;
    snprintf(ev->date, sizeof ev->date, "2026-11-21T10:00:00Z");
}

int record_equal(const tuned__record *a, const tuned__record *b)
{
    const tuned__provenance *p = &a->prov, *q = &b->prov;
    return a->key.kernel == b->key.kernel && a->key.dtype == b->key.dtype
           && a->key.rows == b->key.rows && a->key.cols == b->key.cols
           && a->key.layout == b->key.layout && a->key.gpu_fp == b->key.gpu_fp
           && strcmp(a->config, b->config) == 0 && strcmp(a->gpu, b->gpu) == 0
           && strcmp(a->gpu_name, b->gpu_name) == 0 && p->cc_major == q->cc_major
           && p->cc_minor == q->cc_minor && p->sm_count == q->sm_count
           && p->mem_mib == q->mem_mib && p->driver_version == q->driver_version
           && p->nvrtc_major == q->nvrtc_major && p->nvrtc_minor == q->nvrtc_minor
           && p->template_hash == q->template_hash && strcmp(p->policy, q->policy) == 0
           && memcmp(&a->median_us, &b->median_us, sizeof a->median_us) == 0
           && memcmp(&a->copy_us, &b->copy_us, sizeof a->copy_us) == 0
           && memcmp(&a->gbps, &b->gbps, sizeof a->gbps) == 0
           && a->evaluations == b->evaluations && a->cubin == b->cubin
           && strcmp(a->date, b->date) == 0 && strcmp(a->tool_version, b->tool_version) == 0;
}

int raw_put(const char *path, const char *dbname, const void *k, size_t kn, const void *v,
            size_t vn)
{
    MDB_env *env;
    MDB_txn *txn;
    MDB_dbi dbi;
    int rc = mdb_env_create(&env);
    if (rc != 0)
        return rc;
    if ((rc = mdb_env_set_maxdbs(env, 8)) != 0 || (rc = mdb_env_open(env, path, 0, 0600)) != 0)
        goto out;
    if ((rc = mdb_txn_begin(env, NULL, 0, &txn)) != 0)
        goto out;
    MDB_val key = {.mv_size = kn, .mv_data = (void *)k};
    MDB_val val = {.mv_size = vn, .mv_data = (void *)v};
    if ((rc = mdb_dbi_open(txn, dbname, MDB_CREATE, &dbi)) != 0
        || (rc = mdb_put(txn, dbi, &key, &val, 0)) != 0) {
        mdb_txn_abort(txn);
        goto out;
    }
    rc = mdb_txn_commit(txn);
out:
    mdb_env_close(env);
    if (rc != 0)
        fprintf(stderr, "raw_put %s: %s\n", path, mdb_strerror(rc));
    return rc;
}

void write_file(const char *path, const void *data, size_t n)
{
    FILE *f = fopen(path, "wb");
    EXPECT(f != NULL);
    if (f == NULL)
        return;
    EXPECT(fwrite(data, 1, n, f) == n);
    EXPECT(fclose(f) == 0);
}

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    if (remove(path) != 0)
        fprintf(stderr, "cleanup: remove %s: %s\n", path, strerror(errno));
    return 0;
}

double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int run_tests(const char *prog, const test_case *tests, size_t n)
{
    const char *tmp = getenv("TMPDIR");
    snprintf(root, sizeof root, "%s/%s.XXXXXX", tmp != NULL && tmp[0] ? tmp : "/tmp", prog);
    if (mkdtemp(root) == NULL) {
        fprintf(stderr, "mkdtemp %s: %s\n", root, strerror(errno));
        return 1;
    }
    for (size_t i = 0; i < n; i++) {
        int before = failures;
        double t0 = now_s();
        tests[i].fn();
        printf("%s - %s (%.3f s)\n", failures == before ? "ok" : "FAIL", tests[i].name,
               now_s() - t0);
        fflush(stdout);
    }
    nftw(root, rm_one, 16, FTW_DEPTH | FTW_PHYS);
    struct stat st;
    if (stat(root, &st) == 0) {
        fprintf(stderr, "cleanup: %s still exists\n", root);
        failures++;
    }
    if (failures != 0) {
        printf("%d check(s) failed\n", failures);
        return 1;
    }
    printf("all passed\n");
    return 0;
}
