/* test_store.c: tests of the LMDB store, its keys and its records.
 *
 * Runs every case in a fresh directory under a mkdtemp() root, removed at
 * the end. The unhappy paths are tested on purpose: values written behind
 * the store's back with raw LMDB calls (garbage, wrong types, a newer
 * record version, a foreign schema), unwritable paths, read-only opens of
 * nothing, and a 64 KiB map that must grow many times, from one thread and
 * from several. Exit status 0 when everything passed, 1 otherwise; each
 * failed check prints its line. */
#include <errno.h>
#include <ftw.h>
#include <inttypes.h>
#include <lmdb.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../cache/key.h"
#include "../cache/record.h"
#include "../cache/store.h"
#include "../cache/store_internal.h"
#include "../src/common/hash.h"
#include "tuned.h"

static int failures;
static char root[1024];
static const char *self_exe = "/proc/self/exe"; /* argv[0] when it is a path (valgrind) */

#define CHECK(cond)                                                                   \
    do {                                                                              \
        if (!(cond)) {                                                                \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
            failures++;                                                               \
        }                                                                             \
    } while (0)

/* Checks that expr returns want; on a mismatch prints both and e's message. */
#define CHECK_RC(expr, want, e)                                                            \
    do {                                                                                   \
        int rc_ = (expr);                                                                  \
        if (rc_ != (want)) {                                                               \
            fprintf(stderr, "%s:%d: %s returned %d (%s), expected %d (%s); message: %s\n", \
                    __FILE__, __LINE__, #expr, rc_, tuned_strerror(rc_), (want),           \
                    tuned_strerror(want), (e)->msg);                                       \
            failures++;                                                                    \
        }                                                                                  \
    } while (0)

#define CHECK_MSG(e, needle)                                                            \
    do {                                                                                \
        if (strstr((e)->msg, (needle)) == NULL) {                                       \
            fprintf(stderr, "%s:%d: message \"%s\" lacks \"%s\"\n", __FILE__, __LINE__, \
                    (e)->msg, (needle));                                                \
            failures++;                                                                 \
        }                                                                               \
    } while (0)

/* A fresh directory name under root (not created). */
static void dir_path(char *buf, size_t size, const char *name)
{
    snprintf(buf, size, "%s/%s", root, name);
}

static void make_record(tuned__record *r, const char *gpu, uint64_t rows, uint64_t cols)
{
    memset(r, 0, sizeof *r);
    r->key.kernel = TUNED__KERNEL_SOFTMAX;
    r->key.dtype = TUNED_FP16;
    r->key.rows = rows;
    r->key.cols = cols;
    r->key.gpu_fp = tuned__store_gpu_fingerprint(gpu);
    snprintf(r->config, sizeof r->config, "w32.r1.v8.ld=el.st=cs.reg=f32");
    snprintf(r->gpu, sizeof r->gpu, "%s", gpu);
    snprintf(r->gpu_name, sizeof r->gpu_name, "NVIDIA H100 80GB HBM3");
    r->median_us = 12.345678901234567;
    r->copy_us = 10.0;
    r->gbps = 2876.5;
    r->evaluations = 96;
    snprintf(r->date, sizeof r->date, "2026-11-21T10:00:00Z");
    snprintf(r->tool_version, sizeof r->tool_version, "%s", TUNED_VERSION_STRING);
}

static int record_equal(const tuned__record *a, const tuned__record *b)
{
    return a->key.kernel == b->key.kernel && a->key.dtype == b->key.dtype
           && a->key.rows == b->key.rows && a->key.cols == b->key.cols
           && a->key.gpu_fp == b->key.gpu_fp && strcmp(a->config, b->config) == 0
           && strcmp(a->gpu, b->gpu) == 0 && strcmp(a->gpu_name, b->gpu_name) == 0
           && memcmp(&a->median_us, &b->median_us, sizeof a->median_us) == 0
           && memcmp(&a->copy_us, &b->copy_us, sizeof a->copy_us) == 0
           && memcmp(&a->gbps, &b->gbps, sizeof a->gbps) == 0
           && a->evaluations == b->evaluations && strcmp(a->date, b->date) == 0
           && strcmp(a->tool_version, b->tool_version) == 0;
}

/* Writes one key/value into db dbname of the store at path with plain LMDB
 * calls, as a foreign or broken writer would. The store must be closed. */
static int raw_put(const char *path, const char *dbname, const void *k, size_t kn,
                   const void *v, size_t vn)
{
    MDB_env *env;
    MDB_txn *txn;
    MDB_dbi dbi;
    int rc = mdb_env_create(&env);
    if (rc != 0)
        return rc;
    if ((rc = mdb_env_set_maxdbs(env, 4)) != 0 || (rc = mdb_env_open(env, path, 0, 0600)) != 0)
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

/* json with the value of top-level field replaced by value (values in the
 * test records hold no ',' or '}'). */
static void with_field(char *out, size_t size, const char *json, const char *field,
                       const char *value)
{
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\":", field);
    const char *at = strstr(json, pat);
    if (at == NULL) {
        fprintf(stderr, "with_field: no %s in %s\n", field, json);
        exit(1);
    }
    const char *v = at + strlen(pat);
    const char *end = v + strcspn(v, ",}");
    snprintf(out, size, "%.*s%s%s", (int)(v - json), json, value, end);
}

static void raw_put_record(const char *path, const tuned__store_key *k, const char *json)
{
    uint8_t kb[TUNED__KEY_LEN];
    tuned__key_encode(kb, TUNED__KEY_TAG_BEST, k);
    CHECK(raw_put(path, "best", kb, sizeof kb, json, strlen(json)) == 0);
}

/* ---- keys ---- */

static void test_key(void)
{
    tuned__store_key k = {.kernel = 1, .dtype = 2, .rows = 0x0102030405060708ull,
                          .cols = 0x1112131415161718ull, .gpu_fp = 0xa1a2a3a4a5a6a7a8ull};
    uint8_t b[TUNED__KEY_LEN];
    tuned__key_encode(b, TUNED__KEY_TAG_BEST, &k);
    static const uint8_t want[TUNED__KEY_LEN] = {
        'B',  1,    2,    0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x11, 0x12, 0x13,
        0x14, 0x15, 0x16, 0x17, 0x18, 0xa1, 0xa2, 0xa3, 0xa4, 0xa5, 0xa6, 0xa7, 0xa8};
    CHECK(memcmp(b, want, sizeof want) == 0);

    tuned__err e = {0};
    tuned__store_key back;
    CHECK_RC(tuned__key_decode(b, sizeof b, TUNED__KEY_TAG_BEST, &back, &e), 0, &e);
    CHECK(back.kernel == 1 && back.dtype == 2 && back.rows == k.rows && back.cols == k.cols
          && back.gpu_fp == k.gpu_fp);
    CHECK_RC(tuned__key_decode(b, sizeof b - 1, TUNED__KEY_TAG_BEST, &back, &e), TUNED_ESTORE, &e);
    CHECK_MSG(&e, "26 bytes");
    CHECK_RC(tuned__key_decode(b, sizeof b, 'X', &back, &e), TUNED_ESTORE, &e);
    CHECK_MSG(&e, "tag");

    /* Byte order is numeric order: rows 1 < 256 < 65536, and rows outrank cols. */
    uint8_t r1[TUNED__KEY_LEN], r256[TUNED__KEY_LEN], r65536[TUNED__KEY_LEN], r2[TUNED__KEY_LEN];
    tuned__store_key a = {.kernel = 1, .dtype = 0, .rows = 1, .cols = 1000, .gpu_fp = 5};
    tuned__key_encode(r1, TUNED__KEY_TAG_BEST, &a);
    a.rows = 256;
    tuned__key_encode(r256, TUNED__KEY_TAG_BEST, &a);
    a.rows = 65536;
    tuned__key_encode(r65536, TUNED__KEY_TAG_BEST, &a);
    a.rows = 2;
    a.cols = 1;
    tuned__key_encode(r2, TUNED__KEY_TAG_BEST, &a);
    CHECK(memcmp(r1, r256, TUNED__KEY_LEN) < 0);
    CHECK(memcmp(r256, r65536, TUNED__KEY_LEN) < 0);
    CHECK(memcmp(r1, r2, TUNED__KEY_LEN) < 0);
    CHECK(r256[3 + 6] == 1 && r256[3 + 7] == 0); /* 256 = ...01 00 */

    /* The shape prefix is the key's first 19 bytes. */
    uint8_t p[TUNED__KEY_SHAPE_LEN];
    tuned__key_encode_shape(p, TUNED__KEY_TAG_BEST, 1, 0, 2, 1);
    CHECK(memcmp(p, r2, sizeof p) == 0);
}

static void test_fingerprint(void)
{
    CHECK(tuned__store_gpu_fingerprint("") == 0xcbf29ce484222325ull);
    CHECK(tuned__store_gpu_fingerprint("a") == 0xaf63dc4c8601ec8cull);
    const char *id = "NVIDIA H100 80GB HBM3|sm_90|GPU-1234";
    CHECK(tuned__store_gpu_fingerprint(id) == tuned__fnv1a64(id, strlen(id), TUNED__FNV_SEED));
}

/* ---- records, without a store ---- */

static void test_record_json(void)
{
    tuned__err e = {0};
    tuned__record r, back;
    make_record(&r, "gpu-a", 4096, 4096);
    char *text;
    size_t len;
    CHECK_RC(tuned__record_encode(&r, &text, &len, &e), 0, &e);
    char copy[4096];
    snprintf(copy, sizeof copy, "%.*s", (int)len, text);
    CHECK(strlen(copy) == len);
    CHECK(strncmp(copy, "{\"v\":1,", 7) == 0);
    char fp[32];
    snprintf(fp, sizeof fp, "\"gpu_fp\":\"%016" PRIx64 "\"", r.key.gpu_fp);
    CHECK(strstr(copy, fp) != NULL);
    CHECK(strstr(copy, "\"median_us\":12.345678901234567") != NULL);
    CHECK_RC(tuned__record_decode(text, len, &back, &e), 0, &e);
    CHECK(record_equal(&r, &back));
    free(text);

    /* What cannot be written faithfully is refused. */
    tuned__record bad = r;
    memset(bad.config, 'x', sizeof bad.config);
    CHECK_RC(tuned__record_encode(&bad, &text, &len, &e), TUNED_EINVAL, &e);
    CHECK_MSG(&e, "\"config\"");
    bad = r;
    bad.median_us = NAN;
    CHECK_RC(tuned__record_encode(&bad, &text, &len, &e), TUNED_EINVAL, &e);
    CHECK_MSG(&e, "\"median_us\"");
    bad = r;
    bad.gbps = -1;
    CHECK_RC(tuned__record_encode(&bad, &text, &len, &e), TUNED_EINVAL, &e);
    bad = r;
    snprintf(bad.gpu_name, sizeof bad.gpu_name, "bad \xc3\x28 utf8");
    CHECK_RC(tuned__record_encode(&bad, &text, &len, &e), TUNED_EINVAL, &e);
    CHECK_MSG(&e, "UTF-8");
    bad = r;
    bad.key.rows = UINT64_MAX;
    CHECK_RC(tuned__record_encode(&bad, &text, &len, &e), TUNED_EINVAL, &e);
    CHECK_MSG(&e, "\"rows\"");

    /* UTF-8 that fits goes through. */
    bad = r;
    snprintf(bad.gpu_name, sizeof bad.gpu_name, "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80");
    CHECK_RC(tuned__record_encode(&bad, &text, &len, &e), 0, &e);
    CHECK_RC(tuned__record_decode(text, len, &back, &e), 0, &e);
    CHECK(strcmp(back.gpu_name, bad.gpu_name) == 0);
    free(text);

    /* Duplicate keys and a NUL in a string are refused on reading. */
    const char *dup = "{\"v\":1,\"v\":1}";
    CHECK_RC(tuned__record_decode(dup, strlen(dup), &back, &e), TUNED_ESTORE, &e);
    CHECK_MSG(&e, "duplicate");
    const char *arr = "[1,2]";
    CHECK_RC(tuned__record_decode(arr, strlen(arr), &back, &e), TUNED_ESTORE, &e);
    const char *nul = "{\"v\":1,\"kernel\":1,\"dtype\":0,\"rows\":1,\"cols\":1,"
                      "\"gpu_fp\":\"0000000000000001\",\"config\":\"a\\u0000b\"}";
    CHECK_RC(tuned__record_decode(nul, strlen(nul), &back, &e), TUNED_ESTORE, &e);
    CHECK_MSG(&e, "NUL");
    const char *fpbad = "{\"v\":1,\"kernel\":1,\"dtype\":0,\"rows\":1,\"cols\":1,"
                        "\"gpu_fp\":\"000000000000000g\"}";
    CHECK_RC(tuned__record_decode(fpbad, strlen(fpbad), &back, &e), TUNED_ESTORE, &e);
    CHECK_MSG(&e, "\"gpu_fp\"");
    const char *big = "{\"v\":1,\"kernel\":256}";
    CHECK_RC(tuned__record_decode(big, strlen(big), &back, &e), TUNED_ESTORE, &e);
    CHECK_MSG(&e, "\"kernel\"");
    const char *v0 = "{\"v\":0}";
    CHECK_RC(tuned__record_decode(v0, strlen(v0), &back, &e), TUNED_ESTORE, &e);
}

/* ---- the store ---- */

static void test_roundtrip(void)
{
    char path[4200];
    dir_path(path, sizeof path, "rt/nested/store");
    tuned__err e = {0};
    tuned__store *s;
    CHECK_RC(tuned__store_open(&s, path, 0, &e), 0, &e);
    if (s == NULL)
        return;

    /* mkdir -p made every level 0700. */
    struct stat st;
    char sub[4300];
    snprintf(sub, sizeof sub, "%s/rt", root);
    CHECK(stat(sub, &st) == 0 && (st.st_mode & 0777) == 0700);
    CHECK(stat(path, &st) == 0 && (st.st_mode & 0777) == 0700);

    /* Every field, strings at their longest, awkward doubles. */
    tuned__record r, got;
    make_record(&r, "gpu-a", 4096, 4096);
    memset(r.config, 'c', sizeof r.config - 1);
    r.config[sizeof r.config - 1] = '\0';
    memset(r.gpu, 'g', sizeof r.gpu - 1);
    r.gpu[sizeof r.gpu - 1] = '\0';
    r.key.gpu_fp = tuned__store_gpu_fingerprint(r.gpu);
    memset(r.gpu_name, 'n', sizeof r.gpu_name - 1);
    r.gpu_name[sizeof r.gpu_name - 1] = '\0';
    memset(r.date, 'd', sizeof r.date - 1);
    r.date[sizeof r.date - 1] = '\0';
    memset(r.tool_version, 't', sizeof r.tool_version - 1);
    r.tool_version[sizeof r.tool_version - 1] = '\0';
    r.key.dtype = TUNED_BF16;
    r.key.rows = (uint64_t)INT64_MAX;
    r.key.cols = 1;
    r.median_us = 0.1;
    r.copy_us = 1e-300;
    r.gbps = 1.7976931348623157e308;
    r.evaluations = UINT32_MAX;
    CHECK_RC(tuned__store_put_best(s, &r, &e), 0, &e);
    memset(&got, 0x5a, sizeof got);
    CHECK_RC(tuned__store_get_best(s, &r.key, &got, &e), 0, &e);
    CHECK(record_equal(&r, &got));

    /* A missing key. */
    tuned__store_key miss = r.key;
    miss.cols = 2;
    CHECK_RC(tuned__store_get_best(s, &miss, &got, &e), TUNED_ENOTFOUND, &e);
    CHECK_MSG(&e, path);

    /* A newer record replaces the older one. */
    tuned__record r2 = r;
    snprintf(r2.config, sizeof r2.config, "w8.r4.v4");
    r2.median_us = 9.5;
    CHECK_RC(tuned__store_put_best(s, &r2, &e), 0, &e);
    CHECK_RC(tuned__store_get_best(s, &r.key, &got, &e), 0, &e);
    CHECK(record_equal(&r2, &got));
    tuned__store_close(s);

    /* Reopened, writable and read-only, it still has the record. */
    CHECK_RC(tuned__store_open(&s, path, 0, &e), 0, &e);
    if (s != NULL) {
        CHECK_RC(tuned__store_get_best(s, &r.key, &got, &e), 0, &e);
        CHECK(record_equal(&r2, &got));
        tuned__store_close(s);
    }
    CHECK_RC(tuned__store_open(&s, path, TUNED__STORE_READONLY, &e), 0, &e);
    if (s != NULL) {
        CHECK_RC(tuned__store_get_best(s, &r.key, &got, &e), 0, &e);
        CHECK(record_equal(&r2, &got));
        CHECK_RC(tuned__store_put_best(s, &r, &e), TUNED_EINVAL, &e);
        CHECK_MSG(&e, "read-only");
        tuned__store_close(s);
    }
    tuned__store_close(NULL);
}

static void test_find_shape(void)
{
    char path[4200];
    dir_path(path, sizeof path, "shape");
    tuned__err e = {0};
    tuned__store *s;
    CHECK_RC(tuned__store_open(&s, path, 0, &e), 0, &e);
    if (s == NULL)
        return;
    tuned__record a, b, other;
    make_record(&a, "gpu-a", 1024, 768);
    make_record(&b, "gpu-b", 1024, 768);
    CHECK_RC(tuned__store_put_best(s, &a, &e), 0, &e);
    CHECK_RC(tuned__store_put_best(s, &b, &e), 0, &e);
    /* Neighbours on each side of the shape, which must not be counted. */
    make_record(&other, "gpu-a", 1024, 767);
    CHECK_RC(tuned__store_put_best(s, &other, &e), 0, &e);
    make_record(&other, "gpu-c", 1024, 769);
    CHECK_RC(tuned__store_put_best(s, &other, &e), 0, &e);
    make_record(&other, "gpu-a", 1025, 768);
    CHECK_RC(tuned__store_put_best(s, &other, &e), 0, &e);
    make_record(&other, "gpu-a", 1024, 768);
    other.key.dtype = TUNED_FP32;
    CHECK_RC(tuned__store_put_best(s, &other, &e), 0, &e);

    enum { K = TUNED__KERNEL_SOFTMAX, D = TUNED_FP16 };
    tuned__record out[4];
    size_t n = 99;
    CHECK_RC(tuned__store_find_shape(s, K, D, 1024, 768, out, 4, &n, &e),
             0, &e);
    CHECK(n == 2);
    if (n == 2) {
        /* In key order, i.e. by fingerprint; each is one of ours. */
        CHECK(out[0].key.gpu_fp < out[1].key.gpu_fp);
        int a_first = out[0].key.gpu_fp == a.key.gpu_fp;
        CHECK(record_equal(&out[0], a_first ? &a : &b));
        CHECK(record_equal(&out[1], a_first ? &b : &a));
    }
    /* A short array: the count still says 2. */
    CHECK_RC(tuned__store_find_shape(s, K, D, 1024, 768, out, 1, &n, &e),
             0, &e);
    CHECK(n == 2);
    CHECK_RC(tuned__store_find_shape(s, K, D, 1024, 768, NULL, 0, &n, &e),
             0, &e);
    CHECK(n == 2);
    /* A shape nobody has, and one past every key. */
    CHECK_RC(tuned__store_find_shape(s, K, D, 7, 7, out, 4, &n, &e), 0,
             &e);
    CHECK(n == 0);
    CHECK_RC(tuned__store_find_shape(s, 255, 255, UINT64_MAX, UINT64_MAX, out, 4, &n, &e), 0, &e);
    CHECK(n == 0);
    tuned__store_close(s);
}

static void test_open_errors(void)
{
    tuned__err e = {0};
    tuned__store *s = (tuned__store *)&e; /* must be reset to NULL on failure */
    char path[4200];

    /* Read-only, nothing there. */
    dir_path(path, sizeof path, "missing/store");
    CHECK_RC(tuned__store_open(&s, path, TUNED__STORE_READONLY, &e), TUNED_ENOTFOUND, &e);
    CHECK(s == NULL);
    CHECK_MSG(&e, path);
    struct stat st;
    CHECK(stat(path, &st) != 0 && errno == ENOENT);

    /* Read-only, an empty directory: still nothing, and nothing written. */
    dir_path(path, sizeof path, "empty");
    CHECK(mkdir(path, 0700) == 0);
    CHECK_RC(tuned__store_open(&s, path, TUNED__STORE_READONLY, &e), TUNED_ENOTFOUND, &e);
    CHECK_MSG(&e, path);
    char lock[4300];
    snprintf(lock, sizeof lock, "%s/lock.mdb", path);
    CHECK(stat(lock, &st) != 0);

    /* A path under a regular file. */
    char file[2048];
    dir_path(file, sizeof file, "file");
    FILE *f = fopen(file, "w");
    CHECK(f != NULL);
    if (f != NULL)
        fclose(f);
    snprintf(path, sizeof path, "%s/store", file);
    CHECK_RC(tuned__store_open(&s, path, 0, &e), TUNED_ESTORE, &e);
    CHECK(s == NULL);
    CHECK_MSG(&e, path);
    CHECK_MSG(&e, strerror(ENOTDIR));
    printf("  unwritable path says: %s\n", e.msg);
    snprintf(path, sizeof path, "%s/store/deeper", file);
    CHECK_RC(tuned__store_open(&s, path, 0, &e), TUNED_ESTORE, &e);
    CHECK_MSG(&e, path);
    CHECK_RC(tuned__store_open(&s, file, 0, &e), TUNED_ESTORE, &e);
    CHECK_MSG(&e, file);
    CHECK_RC(tuned__store_open(&s, file, TUNED__STORE_READONLY, &e), TUNED_ESTORE, &e);
    CHECK_MSG(&e, "not a directory");

    /* Bad arguments. */
    CHECK_RC(tuned__store_open(&s, "", 0, &e), TUNED_EINVAL, &e);
    dir_path(path, sizeof path, "flags");
    CHECK_RC(tuned__store_open(&s, path, 0x80, &e), TUNED_EINVAL, &e);
}

static void test_schema(void)
{
    char path[4200];
    dir_path(path, sizeof path, "schema");
    tuned__err e = {0};
    tuned__store *s;
    CHECK_RC(tuned__store_open(&s, path, 0, &e), 0, &e);
    tuned__store_close(s);

    CHECK(raw_put(path, "meta", "schema", 6, "999", 3) == 0);
    CHECK_RC(tuned__store_open(&s, path, 0, &e), TUNED_ESCHEMA, &e);
    CHECK(s == NULL);
    CHECK_MSG(&e, path);
    CHECK_MSG(&e, "999");
    CHECK_MSG(&e, "uses 1");
    printf("  schema mismatch says: %s\n", e.msg);
    CHECK_RC(tuned__store_open(&s, path, TUNED__STORE_READONLY, &e), TUNED_ESCHEMA, &e);

    CHECK(raw_put(path, "meta", "schema", 6, "1x", 2) == 0);
    CHECK_RC(tuned__store_open(&s, path, 0, &e), TUNED_ESTORE, &e);
    CHECK_MSG(&e, "schema");

    /* The writer's version is recorded. */
    CHECK(raw_put(path, "meta", "schema", 6, "1", 1) == 0);
    CHECK_RC(tuned__store_open(&s, path, 0, &e), 0, &e);
    tuned__store_close(s);

    /* An LMDB environment without our dbs, opened read-only, is empty. */
    dir_path(path, sizeof path, "foreign");
    CHECK(mkdir(path, 0700) == 0);
    CHECK(raw_put(path, "other", "k", 1, "v", 1) == 0);
    CHECK_RC(tuned__store_open(&s, path, TUNED__STORE_READONLY, &e), 0, &e);
    if (s != NULL) {
        tuned__record r;
        make_record(&r, "gpu-a", 1, 1);
        CHECK_RC(tuned__store_get_best(s, &r.key, &r, &e), TUNED_ENOTFOUND, &e);
        size_t n = 9;
        CHECK_RC(tuned__store_find_shape(s, 1, 0, 1, 1, &r, 1, &n, &e), 0, &e);
        CHECK(n == 0);
        tuned__store_close(s);
    }
}

static void test_malformed(void)
{
    char path[4200];
    dir_path(path, sizeof path, "malformed");
    tuned__err e = {0};
    tuned__store *s;
    CHECK_RC(tuned__store_open(&s, path, 0, &e), 0, &e);
    tuned__store_close(s);

    tuned__record r, got;
    make_record(&r, "gpu-a", 64, 64);
    char good[2048];
    snprintf(good, sizeof good,
             "{\"v\":1,\"kernel\":1,\"dtype\":0,\"rows\":64,\"cols\":64,\"gpu_fp\":\"%016" PRIx64
             "\",\"config\":\"c\",\"gpu\":\"gpu-a\",\"gpu_name\":\"n\",\"median_us\":1,"
             "\"copy_us\":1.5,\"gbps\":3,\"evaluations\":4,\"date\":\"d\",\"tool_version\":\"t\","
             "\"future_field\":[1,2]}",
             r.key.gpu_fp);

    struct {
        const char *what, *json, *needle;
        int want;
    } cases[] = {
        {"valid, with an unknown field", good, NULL, 0},
        {"garbage", "\x01\x02garbage{{", "invalid JSON", TUNED_ESTORE},
        {"empty", "", "invalid JSON", TUNED_ESTORE},
        {"wrong types", "{\"v\":1,\"kernel\":\"softmax\"}", "\"kernel\"", TUNED_ESTORE},
        {"a string number", NULL, "\"median_us\"", TUNED_ESTORE},
        {"a missing field", "{\"v\":1,\"kernel\":1,\"dtype\":0}", "\"rows\"", TUNED_ESTORE},
        {"a newer version", "{\"v\":2,\"kernel\":1}", "version 2", TUNED_ESCHEMA},
        {"a too-long string", NULL, "\"config\"", TUNED_ESTORE},
        {"another key's record", NULL, "another key", TUNED_ESTORE},
        {"evaluations past u32", NULL, "\"evaluations\"", TUNED_ESTORE},
    };
    char strnum[2048], toolong[2048], otherkey[2048], evals[2048];
    char longcfg[140];
    memset(longcfg, 'x', 130);
    longcfg[0] = longcfg[129] = '"';
    longcfg[130] = '\0';
    with_field(strnum, sizeof strnum, good, "median_us", "\"1\"");
    with_field(toolong, sizeof toolong, good, "config", longcfg);
    with_field(otherkey, sizeof otherkey, good, "rows", "65");
    with_field(evals, sizeof evals, good, "evaluations", "4294967296");
    cases[4].json = strnum;
    cases[7].json = toolong;
    cases[8].json = otherkey;
    cases[9].json = evals;

    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        raw_put_record(path, &r.key, cases[i].json);
        CHECK_RC(tuned__store_open(&s, path, 0, &e), 0, &e);
        if (s == NULL)
            continue;
        tuned__err_clear(&e);
        int rc = tuned__store_get_best(s, &r.key, &got, &e);
        if (rc != cases[i].want) {
            fprintf(stderr, "%s:%d: malformed case \"%s\": get returned %d, expected %d: %s\n",
                    __FILE__, __LINE__, cases[i].what, rc, cases[i].want, e.msg);
            failures++;
        }
        if (cases[i].needle != NULL) {
            CHECK_MSG(&e, cases[i].needle);
            CHECK_MSG(&e, path);
            size_t n;
            CHECK_RC(tuned__store_find_shape(s, 1, 0, 64, 64, &got, 1, &n, &e), cases[i].want, &e);
            printf("  %s: %s\n", cases[i].what, e.msg);
        } else {
            CHECK(got.median_us == 1 && got.copy_us == 1.5 && got.evaluations == 4);
        }
        tuned__store_close(s);
    }

    /* A key of the wrong length in "best" is found by the shape scan
     * (after the good record, which sorts first). */
    raw_put_record(path, &r.key, good);
    uint8_t kb[TUNED__KEY_LEN + 1];
    tuned__key_encode(kb, TUNED__KEY_TAG_BEST, &r.key);
    kb[TUNED__KEY_LEN] = 0;
    CHECK(raw_put(path, "best", kb, sizeof kb, good, strlen(good)) == 0);
    CHECK_RC(tuned__store_open(&s, path, 0, &e), 0, &e);
    if (s != NULL) {
        size_t n;
        CHECK_RC(tuned__store_find_shape(s, 1, 0, 64, 64, &got, 1, &n, &e), TUNED_ESTORE, &e);
        CHECK_MSG(&e, "28 bytes");
        tuned__store_close(s);
    }
}

/* Many records into a 64 KiB map: MDB_MAP_FULL, grow, retry, many times. */
static void test_map_growth(void)
{
    char path[4200];
    dir_path(path, sizeof path, "tiny");
    tuned__err e = {0};
    tuned__store *s;
    CHECK_RC(tuned__store_open_mapsize(&s, path, 0, 64 << 10, &e), 0, &e);
    if (s == NULL)
        return;
    enum { N = 2000 };
    tuned__record r, got;
    make_record(&r, "gpu-a", 0, 4096);
    for (uint64_t i = 0; i < N; i++) {
        r.key.rows = i;
        r.evaluations = (uint32_t)i;
        int rc = tuned__store_put_best(s, &r, &e);
        if (rc != 0) {
            fprintf(stderr, "%s:%d: put %" PRIu64 " failed: %s\n", __FILE__, __LINE__, i, e.msg);
            failures++;
            break;
        }
    }
    tuned__store_close(s);

    char data[4300];
    snprintf(data, sizeof data, "%s/data.mdb", path);
    struct stat st;
    CHECK(stat(data, &st) == 0 && st.st_size > (64 << 10));
    printf("  %d records in a map that started at 64 KiB: data.mdb is %lld KiB\n", N,
           (long long)st.st_size / 1024);

    /* Reopened with the tiny map again: the store keeps its grown size. */
    CHECK_RC(tuned__store_open_mapsize(&s, path, TUNED__STORE_READONLY, 64 << 10, &e), 0, &e);
    if (s == NULL)
        return;
    for (uint64_t i = 0; i < N; i += 97) {
        r.key.rows = i;
        CHECK_RC(tuned__store_get_best(s, &r.key, &got, &e), 0, &e);
        CHECK(got.evaluations == i);
    }
    tuned__store_close(s);
}

/* Several threads writing and reading one store whose map must grow: the
 * resize lock keeps map changes away from live transactions. */
enum { THREADS = 4, PER_THREAD = 300 };

typedef struct worker {
    tuned__store *s;
    int id;
    int failed;
    tuned__err e;
} worker;

static void *work(void *arg)
{
    worker *w = arg;
    tuned__record r, got;
    char gpu[32];
    snprintf(gpu, sizeof gpu, "gpu-%d", w->id);
    make_record(&r, gpu, 0, 128);
    for (int i = 0; i < PER_THREAD && !w->failed; i++) {
        r.key.rows = (uint64_t)i;
        r.evaluations = (uint32_t)(w->id * 100000 + i);
        if (tuned__store_put_best(w->s, &r, &w->e) != 0
            || tuned__store_get_best(w->s, &r.key, &got, &w->e) != 0
            || got.evaluations != r.evaluations)
            w->failed = 1;
    }
    return NULL;
}

static void test_threads(void)
{
    char path[4200];
    dir_path(path, sizeof path, "threads");
    tuned__err e = {0};
    tuned__store *s;
    CHECK_RC(tuned__store_open_mapsize(&s, path, 0, 64 << 10, &e), 0, &e);
    if (s == NULL)
        return;
    worker w[THREADS];
    pthread_t th[THREADS];
    for (int i = 0; i < THREADS; i++) {
        w[i] = (worker){.s = s, .id = i};
        CHECK(pthread_create(&th[i], NULL, work, &w[i]) == 0);
    }
    for (int i = 0; i < THREADS; i++) {
        CHECK(pthread_join(th[i], NULL) == 0);
        if (w[i].failed) {
            fprintf(stderr, "%s:%d: thread %d failed: %s\n", __FILE__, __LINE__, i, w[i].e.msg);
            failures++;
        }
    }
    size_t n;
    tuned__record out[THREADS];
    CHECK_RC(tuned__store_find_shape(s, 1, 0, PER_THREAD - 1, 128, out, THREADS, &n, &e), 0, &e);
    CHECK(n == THREADS);
    tuned__store_close(s);
}

enum { CHILD_RECORDS = 1500 };

/* The child of test_other_process(): writes into the store at path from a
 * 64 KiB map, growing it. Returns the exit status. */
static int grow_child(const char *path)
{
    tuned__store *c;
    tuned__err e = {0};
    int bad = tuned__store_open_mapsize(&c, path, 0, 64 << 10, &e) != 0;
    tuned__record r;
    make_record(&r, "gpu-child", 0, 2);
    for (uint64_t i = 0; i < CHILD_RECORDS && !bad; i++) {
        r.key.rows = i;
        bad = tuned__store_put_best(c, &r, &e) != 0;
    }
    if (bad)
        fprintf(stderr, "grow child: %s\n", e.msg);
    tuned__store_close(c);
    return bad;
}

/* Another process grows the map while this one has the store open: this
 * one's next transactions see MDB_MAP_RESIZED and must adopt the size. */
static void test_other_process(void)
{
    char path[4200];
    dir_path(path, sizeof path, "twoproc");
    tuned__err e = {0};
    tuned__store *s;
    CHECK_RC(tuned__store_open_mapsize(&s, path, 0, 64 << 10, &e), 0, &e);
    if (s == NULL)
        return;
    tuned__record r, got;
    make_record(&r, "gpu-parent", 1, 1);
    CHECK_RC(tuned__store_put_best(s, &r, &e), 0, &e);

    fflush(NULL);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        /* A fresh process image: nothing of this process's store survives. */
        execl(self_exe, self_exe, "--grow-child", path, (char *)NULL);
        fprintf(stderr, "exec %s: %s\n", self_exe, strerror(errno));
        _exit(127);
    }
    int status;
    CHECK(waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0);

    make_record(&got, "gpu-child", CHILD_RECORDS - 1, 2);
    CHECK_RC(tuned__store_get_best(s, &got.key, &got, &e), 0, &e);
    r.key.rows = 2;
    CHECK_RC(tuned__store_put_best(s, &r, &e), 0, &e);
    size_t n;
    CHECK_RC(tuned__store_find_shape(s, 1, 0, CHILD_RECORDS - 1, 2, &got, 1, &n, &e), 0, &e);
    CHECK(n == 1);
    tuned__store_close(s);
}

/* ---- driver ---- */

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    if (remove(path) != 0)
        fprintf(stderr, "cleanup: remove %s: %s\n", path, strerror(errno));
    return 0;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "--grow-child") == 0)
        return grow_child(argv[2]);
    if (argc > 0 && strchr(argv[0], '/') != NULL)
        self_exe = argv[0];

    const char *tmp = getenv("TMPDIR");
    snprintf(root, sizeof root, "%s/test_store.XXXXXX", tmp != NULL && tmp[0] ? tmp : "/tmp");
    if (mkdtemp(root) == NULL) {
        fprintf(stderr, "mkdtemp %s: %s\n", root, strerror(errno));
        return 1;
    }

    static const struct {
        const char *name;
        void (*fn)(void);
    } tests[] = {
        {"key encoding", test_key},
        {"gpu fingerprint", test_fingerprint},
        {"record json", test_record_json},
        {"put/get round-trip, reopen, read-only", test_roundtrip},
        {"find_shape", test_find_shape},
        {"open errors", test_open_errors},
        {"schema", test_schema},
        {"malformed values", test_malformed},
        {"map growth", test_map_growth},
        {"threads", test_threads},
        {"another process grows the map", test_other_process},
    };
    for (size_t i = 0; i < sizeof tests / sizeof tests[0]; i++) {
        int before = failures;
        double t0 = now_s();
        tests[i].fn();
        printf("%s - %s (%.3f s)\n", failures == before ? "ok" : "FAIL", tests[i].name,
               now_s() - t0);
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
