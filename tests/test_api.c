/* test_api.c: the embedding API's parts that need no GPU (issue 6).
 *
 *   map      the lock-free table: put, replace, growth, and readers
 *            running against a writer (every key they find carries its
 *            own payload, none vanishes once published)
 *   pick     exact / nearest / default from a real store with records of
 *            a synthetic GPU identity (other GPUs, dtypes, configs that
 *            do not fit the shape are passed over), no store, no space
 *   cubin    (`test_api cubin`, a test of its own, exit 77 where NVRTC
 *            cannot be loaded) NVRTC once, then the compile cache; aligned
 *            and unaligned variants are different cubins; a read-only cache
 *            is not written
 *   child    a fake `tuned` script: the argument list, success, a failure
 *            with its last stderr line, a hang killed at the timeout, a
 *            cancel, a missing executable, a name found in $PATH
 *   daemon   a fake daemon on a Unix socket: the tune request's JSON, a
 *            job id, error replies mapped to codes, no daemon, a daemon
 *            that closes or stalls, job state, the store path
 *   public   tuned_open without a driver (this CI machine) says so, bad
 *            arguments, tuned_last_error per thread and handle, names */
#include <errno.h>
#include <jansson.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "src/codegen/source.h"
#include "src/codegen/templates.h"
#include "src/common/hash.h"
#include "src/api/api.h"
#include "src/tuner/space.h"
#include "src/tuner/tune.h"

#include "tests/expect.h"

static char tmpdir[256];

/* ---- map ---- */

static tuned__api_entry *new_entry(uint64_t rows, unsigned payload)
{
    tuned__api_entry *e = calloc(1, sizeof *e);
    e->key.ctx = (void *)0x1000;
    e->key.rows = rows;
    e->key.cols = 1000;
    e->key.stride = 1000;
    e->key.dtype = TUNED_FP16;
    e->key.kernel = TUNED_KERNEL_SOFTMAX;
    e->key.aligned = 1;
    e->hash = tuned__api_key_hash(&e->key);
    e->launch.grid = payload;
    e->launch.block = (unsigned)rows; /* readers check block == rows */
    atomic_init(&e->recheck_ns, INT64_MAX);
    return e;
}

typedef struct map_race {
    tuned__api_map *m;
    atomic_ulong published; /* keys 1..published are in the map */
    atomic_int done;
    unsigned long found, bad;
} map_race;

static void *map_reader(void *arg)
{
    map_race *r = arg;
    unsigned seed = 7;
    while (!atomic_load(&r->done)) {
        unsigned long n = atomic_load(&r->published);
        if (n == 0)
            continue;
        seed = seed * 1103515245u + 12345u;
        uint64_t rows = 1 + seed % n;
        tuned__api_key k = {.ctx = (void *)0x1000, .rows = rows, .cols = 1000, .stride = 1000,
                            .dtype = TUNED_FP16, .kernel = TUNED_KERNEL_SOFTMAX, .aligned = 1};
        tuned__api_entry *e = tuned__api_map_find(r->m, &k, tuned__api_key_hash(&k));
        if (e == NULL || e->launch.block != rows || (e->launch.grid != 1 && e->launch.grid != 2))
            r->bad++;
        else
            r->found++;
    }
    return NULL;
}

static void test_map(void)
{
    tuned__err e = {0};
    tuned__api_map m;
    EXPECT(tuned__api_map_init(&m, &e) == 0, "%s", e.msg);
    tuned__api_entry *all[20001] = {0};
    /* Single thread: put, find, replace, growth. */
    for (uint64_t r = 1; r <= 1000; r++) {
        all[r] = new_entry(r, 1);
        EXPECT(tuned__api_map_put(&m, all[r], NULL, &e) == 0, "put %llu", (unsigned long long)r);
    }
    for (uint64_t r = 1; r <= 1000; r++) {
        tuned__api_key k = all[r]->key;
        EXPECT(tuned__api_map_find(&m, &k, tuned__api_key_hash(&k)) == all[r], "find %llu",
               (unsigned long long)r);
    }
    tuned__api_key absent = all[1]->key;
    absent.rows = 5000;
    EXPECT(tuned__api_map_find(&m, &absent, tuned__api_key_hash(&absent)) == NULL, "absent key");
    absent = all[1]->key;
    absent.aligned = 0;
    EXPECT(tuned__api_map_find(&m, &absent, tuned__api_key_hash(&absent)) == NULL,
           "the unaligned twin of a key is another key");
    /* So is the same shape of another kernel, with its own hash. */
    absent = all[1]->key;
    absent.kernel = TUNED_KERNEL_SOFTMAX_BWD;
    EXPECT(tuned__api_map_find(&m, &absent, tuned__api_key_hash(&absent)) == NULL &&
               tuned__api_key_hash(&absent) != all[1]->hash,
           "the softmax_bwd twin of a key is another key");
    /* And the same shape with other compiled-in options (a cross-entropy
     * call with int32 labels or label smoothing): found, it would run a
     * module built without them. */
    absent = all[1]->key;
    absent.flags = 2;
    EXPECT(tuned__api_map_find(&m, &absent, tuned__api_key_hash(&absent)) == NULL &&
               tuned__api_key_hash(&absent) != all[1]->hash,
           "the twin of a key with other compiled-in options is another key");
    tuned__api_entry *twin = new_entry(7, 2), *replaced = NULL;
    EXPECT(tuned__api_map_put(&m, twin, &replaced, &e) == 0 && replaced == all[7], "replace");
    EXPECT(tuned__api_map_find(&m, &twin->key, twin->hash) == twin, "replaced entry found");
    EXPECT(m.count == 1000, "count %zu after a replacement", m.count);
    free(all[7]);
    all[7] = twin;
    for (uint64_t r = 1; r <= 1000; r++)
        free(all[r]);
    tuned__api_map_free(&m);

    /* Readers against a writer that inserts, grows and replaces. */
    EXPECT(tuned__api_map_init(&m, &e) == 0, "%s", e.msg);
    map_race race = {.m = &m};
    atomic_init(&race.published, 0);
    atomic_init(&race.done, 0);
    map_race per[4];
    pthread_t t[4];
    for (int i = 0; i < 4; i++) {
        per[i] = (map_race){.m = &m};
        atomic_init(&per[i].published, 0);
        atomic_init(&per[i].done, 0);
        pthread_create(&t[i], NULL, map_reader, &per[i]);
    }
    tuned__api_entry *spare[20001] = {0};
    for (uint64_t r = 1; r <= 20000; r++) {
        all[r] = new_entry(r, 1);
        tuned__api_map_put(&m, all[r], NULL, &e);
        for (int i = 0; i < 4; i++)
            atomic_store(&per[i].published, (unsigned long)r);
        if (r % 7 == 0) { /* replace an older key while readers probe it */
            uint64_t old = r / 2;
            spare[old] = new_entry(old, 2);
            tuned__api_entry *was = NULL;
            tuned__api_map_put(&m, spare[old], &was, &e);
            spare[old]->all_next = was; /* keep the replaced one until the end */
        }
    }
    for (int i = 0; i < 4; i++) {
        atomic_store(&per[i].done, 1);
        pthread_join(t[i], NULL);
        EXPECT(per[i].bad == 0, "reader %d: %lu bad or missing lookups of %lu", i, per[i].bad,
               per[i].found + per[i].bad);
    }
    EXPECT(m.count == 20000, "count %zu", m.count);
    for (uint64_t r = 1; r <= 20000; r++) {
        tuned__api_key k = all[r]->key;
        tuned__api_entry *got = tuned__api_map_find(&m, &k, tuned__api_key_hash(&k));
        EXPECT(got != NULL && got->launch.block == r, "key %llu after the race", (unsigned long long)r);
    }
    for (uint64_t r = 1; r <= 20000; r++) {
        if (spare[r] != NULL) {
            /* The chain of replaced entries for r: spare -> older entries. */
            tuned__api_entry *x = spare[r]->all_next;
            while (x != NULL && x != all[r]) {
                tuned__api_entry *next = x->all_next;
                free(x);
                x = next;
            }
            free(spare[r]);
        }
        free(all[r]);
    }
    tuned__api_map_free(&m);
}

/* ---- pick ---- */

static void fake_gpu(tuned__gpu *g, const char *name, int cc_major)
{
    memset(g, 0, sizeof *g);
    snprintf(g->name, sizeof g->name, "%s", name);
    g->cc_major = cc_major;
    g->cc_minor = 0;
    g->sm_count = 132;
    g->total_mem = (size_t)80 << 30;
    g->l2_bytes = 50 << 20;
    g->driver_version = 13000;
    g->nvrtc_major = 13;
    g->template_hash = tuned__templates_hash();
    tuned__gpu_identify(g);
}

static void put_kernel_record(tuned__store *s, const tuned__gpu *g, unsigned kernel,
                              tuned_dtype dtype, uint64_t rows, uint64_t cols, const char *config,
                              double us)
{
    static tuned__tune_outcome o;
    memset(&o, 0, sizeof o);
    o.gpu = *g;
    o.copy_us = us * 0.9;
    o.search.best_us = us;
    o.search.evaluations = 10;
    tuned__err e = {0};
    EXPECT(tuned__config_parse(config, &o.search.best, &e) == 0, "%s: %s", config, e.msg);
    tuned__shape shape = {.dtype = dtype, .rows = rows, .cols = cols, .kernel = (uint8_t)kernel};
    tuned__record rec;
    tuned__tune_record(&o, &shape, &rec);
    EXPECT(tuned__store_put_best(s, &rec, &e) == 0, "put %s: %s", config, e.msg);
}

static void put_record(tuned__store *s, const tuned__gpu *g, tuned_dtype dtype, uint64_t rows,
                       uint64_t cols, const char *config, double us)
{
    put_kernel_record(s, g, TUNED_KERNEL_SOFTMAX, dtype, rows, cols, config, us);
}

/* A recheck's question (tuned__api_store_moved) after the writes a
 * process sees most: its own and other shapes' cubins going into the
 * compile cache, a tune's history. Only a best record written makes it
 * pick again. seen: what the last pick saw. */
static void store_moved_only_with_best_records(tuned__store *s, const tuned__gpu *g,
                                               const tuned__api_seen *seen)
{
    tuned__api_seen now = *seen;
    EXPECT(!tuned__api_store_moved(s, &now), "moved with nothing written");
    tuned__err e = {0};
    static const unsigned char cubin[64] = {1, 2, 3};
    EXPECT(tuned__store_put_cubin(s, 0x1234, cubin, sizeof cubin, &e) == 0, "cubin: %s", e.msg);
    tuned__store_eval ev = {.status = TUNED__HIST_OK, .median_us = 9.0};
    tuned__shape other = {.dtype = TUNED_FP16, .rows = 8, .cols = 8};
    tuned__tune_key(g, &other, &ev.key);
    snprintf(ev.config, sizeof ev.config, "w1.r8.c1.m1.v8.ld=def.st=def.reg=f32");
    snprintf(ev.date, sizeof ev.date, "2026-11-24T12:00:00Z");
    EXPECT(tuned__store_put_evals(s, &ev, 1, &e) == 0, "history: %s", e.msg);
    EXPECT(!tuned__api_store_moved(s, &now),
           "a compile-cache put and a history entry read as a new best record");
    EXPECT(now.txnid > seen->txnid && now.generation == seen->generation,
           "the transaction id seen was not brought up to date (%llu -> %llu)",
           (unsigned long long)seen->txnid, (unsigned long long)now.txnid);
    put_record(s, g, TUNED_FP16, 8, 8, "w1.r8.c1.m1.v8.ld=def.st=def.reg=f32", 2.0);
    EXPECT(tuned__api_store_moved(s, &now), "a best record stored and not seen");
}

static void test_pick(void)
{
    char path[400];
    snprintf(path, sizeof path, "%s/pick-store", tmpdir);
    tuned__err e = {0};
    tuned__store *s = NULL;
    if (tuned__store_open(&s, path, 0, &e) != 0) {
        EXPECT(0, "store: %s", e.msg);
        return;
    }
    tuned__gpu h100, other;
    fake_gpu(&h100, "NVIDIA H100 80GB HBM3", 9);
    fake_gpu(&other, "NVIDIA A100-SXM4-80GB", 8);
    tuned__shape shape = {.dtype = TUNED_FP16, .rows = 4096, .cols = 32000};
    tuned__api_pick p;

    /* Nothing stored: the first seed of the space. */
    EXPECT(tuned__api_pick_config(s, &h100, &shape, NULL, &p, &e) == 0, "%s", e.msg);
    tuned__space sp;
    EXPECT(tuned__space_init(&sp, &shape, 90, 132, &e) == 0, "%s", e.msg);
    tuned__config seed;
    EXPECT(tuned__space_seeds(&sp, &seed, 1) == 1, "a seed");
    EXPECT(p.source == TUNED_SOURCE_DEFAULT && tuned__config_equal(&p.config, &seed) &&
               p.median_us == 0 && p.record_rows == 0,
           "default pick");
    tuned__api_seen seen0 = p.seen;

    /* Exact. */
    const char *exact_cfg = "w32.r1.c1.m1.v8.ld=nc.st=cs.reg=pk";
    put_record(s, &h100, TUNED_FP16, 4096, 32000, exact_cfg, 150.0);
    EXPECT(tuned__api_pick_config(s, &h100, &shape, NULL, &p, &e) == 0, "%s", e.msg);
    char text[TUNED__CONFIG_TEXT];
    tuned__config_format(&p.config, text, sizeof text);
    EXPECT(p.source == TUNED_SOURCE_EXACT && strcmp(text, exact_cfg) == 0 && p.median_us == 150.0 &&
               p.record_rows == 4096 && p.record_cols == 32000,
           "exact pick: %s %s", tuned_source_name(p.source), text);
    EXPECT(p.seen.txnid > seen0.txnid && p.seen.generation > seen0.generation,
           "the transaction id and generation moved with the write (%llu -> %llu, %llu -> %llu)",
           (unsigned long long)seen0.txnid, (unsigned long long)p.seen.txnid,
           (unsigned long long)seen0.generation, (unsigned long long)p.seen.generation);
    store_moved_only_with_best_records(s, &h100, &p.seen);

    /* Nearest: 2048x32000 is closer than 4096x16000 (cols weigh double);
     * records of another GPU, another dtype and a config invalid here are
     * passed over even when closer. */
    put_record(s, &h100, TUNED_FP16, 4096, 16000, "w16.r1.c1.m1.v8.ld=def.st=def.reg=f32", 90.0);
    put_record(s, &other, TUNED_FP16, 1024, 32000, "w8.r1.c1.m1.v8.ld=def.st=def.reg=f32", 80.0);
    put_record(s, &h100, TUNED_BF16, 1024, 32000, "w8.r1.c1.m1.v8.ld=def.st=def.reg=f32", 80.0);
    tuned__shape near = {.dtype = TUNED_FP16, .rows = 1024, .cols = 32000};
    EXPECT(tuned__api_pick_config(s, &h100, &near, NULL, &p, &e) == 0, "%s", e.msg);
    tuned__config_format(&p.config, text, sizeof text);
    EXPECT(p.source == TUNED_SOURCE_NEAREST && strcmp(text, exact_cfg) == 0 &&
               p.record_rows == 4096 && p.record_cols == 32000 && p.median_us == 150.0,
           "nearest pick: %s %s from %llux%llu", tuned_source_name(p.source), text,
           (unsigned long long)p.record_rows, (unsigned long long)p.record_cols);
    /* 8 rows of 100 columns: the 32000-column configs leave most threads
     * idle (invalid); a 4-row-per-block config stored for 64x100 fits. */
    put_record(s, &h100, TUNED_FP16, 64, 100, "w4.r4.c1.m1.v4.ld=def.st=def.reg=f32", 3.0);
    tuned__shape small = {.dtype = TUNED_FP16, .rows = 8, .cols = 100};
    EXPECT(tuned__api_pick_config(s, &h100, &small, NULL, &p, &e) == 0, "%s", e.msg);
    tuned__config_format(&p.config, text, sizeof text);
    EXPECT(p.source == TUNED_SOURCE_NEAREST && p.record_rows == 64 && p.record_cols == 100,
           "nearest small pick: %s %s from %llux%llu", tuned_source_name(p.source), text,
           (unsigned long long)p.record_rows, (unsigned long long)p.record_cols);
    /* The other GPU sees only its own record. */
    EXPECT(tuned__api_pick_config(s, &other, &shape, NULL, &p, &e) == 0, "%s", e.msg);
    EXPECT(p.source == TUNED_SOURCE_NEAREST && p.record_rows == 1024, "other GPU: %s from %llu rows",
           tuned_source_name(p.source), (unsigned long long)p.record_rows);
    /* fp32 on the H100: nothing of that dtype, default. */
    tuned__shape f32 = {.dtype = TUNED_FP32, .rows = 4096, .cols = 32000};
    EXPECT(tuned__api_pick_config(s, &h100, &f32, NULL, &p, &e) == 0 && p.source == TUNED_SOURCE_DEFAULT,
           "fp32 default: %s", tuned_source_name(p.source));
    /* No store: default. */
    EXPECT(tuned__api_pick_config(NULL, &h100, &shape, NULL, &p, &e) == 0 &&
               p.source == TUNED_SOURCE_DEFAULT && p.seen.txnid == 0,
           "no store");
    /* No variant at all (sm_80 has no staged family; 2^30 fp32 columns
     * cannot be held in registers). */
    tuned__shape huge = {.dtype = TUNED_FP32, .rows = 1, .cols = 1ull << 30};
    tuned__err ne = {0};
    EXPECT(tuned__api_pick_config(s, &other, &huge, NULL, &p, &ne) == TUNED_ENOSPACE && ne.msg[0],
           "no space: %d %s", ne.code, ne.msg);
    /* Each kernel picks from its own records: softmax's winner of the
     * shape is neither exact nor nearest for softmax_bwd, whose default is
     * its own space's first seed; its own record is exact for it alone. */
    tuned__shape bwd = shape;
    bwd.kernel = TUNED_KERNEL_SOFTMAX_BWD;
    tuned__space bsp;
    tuned__config bseed;
    EXPECT(tuned__space_init(&bsp, &bwd, 90, 132, &e) == 0 && tuned__space_seeds(&bsp, &bseed, 1) == 1,
           "softmax_bwd space: %s", e.msg);
    EXPECT(tuned__api_pick_config(s, &h100, &bwd, NULL, &p, &e) == 0 &&
               p.source == TUNED_SOURCE_DEFAULT && tuned__config_equal(&p.config, &bseed),
           "softmax_bwd pick with only softmax records: %s", tuned_source_name(p.source));
    const char *bwd_cfg = "w16.r1.c1.m1.v8.ld=nc.st=def.reg=pk";
    put_kernel_record(s, &h100, TUNED_KERNEL_SOFTMAX_BWD, TUNED_FP16, 4096, 32000, bwd_cfg, 260.0);
    EXPECT(tuned__api_pick_config(s, &h100, &bwd, NULL, &p, &e) == 0, "%s", e.msg);
    tuned__config_format(&p.config, text, sizeof text);
    EXPECT(p.source == TUNED_SOURCE_EXACT && strcmp(text, bwd_cfg) == 0 && p.median_us == 260.0,
           "softmax_bwd exact pick: %s %s", tuned_source_name(p.source), text);
    EXPECT(p.record_key.kernel == TUNED_KERNEL_SOFTMAX_BWD, "the record's key names the kernel");
    EXPECT(tuned__api_pick_config(s, &h100, &shape, NULL, &p, &e) == 0, "%s", e.msg);
    tuned__config_format(&p.config, text, sizeof text);
    EXPECT(p.source == TUNED_SOURCE_EXACT && strcmp(text, exact_cfg) == 0,
           "softmax after a softmax_bwd record: %s %s", tuned_source_name(p.source), text);
    tuned__shape bwd_near = bwd;
    bwd_near.rows = 1024;
    EXPECT(tuned__api_pick_config(s, &h100, &bwd_near, NULL, &p, &e) == 0 &&
               p.source == TUNED_SOURCE_NEAREST && p.record_key.kernel == TUNED_KERNEL_SOFTMAX_BWD,
           "softmax_bwd nearest: %s", tuned_source_name(p.source));
    tuned__space_free(&bsp);
    tuned__space_free(&sp);
    tuned__store_close(s);
}

/* ---- cubin (its own test: `test_api cubin`) ---- */

/* TEST_SKIP where NVRTC cannot be loaded. */
static int test_cubin(void)
{
    tuned__err e = {0};
    tuned__nvrtc *n = NULL;
    if (tuned__nvrtc_load(&n, &e) != 0) {
        printf("cubin: no NVRTC (%s): skipped\n", e.msg);
        return TEST_SKIP;
    }
    char path[400];
    snprintf(path, sizeof path, "%s/cubin-store", tmpdir);
    tuned__store *s = NULL;
    EXPECT(tuned__store_open(&s, path, 0, &e) == 0, "%s", e.msg);
    tuned__config c;
    EXPECT(tuned__config_parse("w4.r1.c1.m1.v8.ld=def.st=def.reg=f32", &c, &e) == 0, "%s", e.msg);
    tuned__shape shape = {.dtype = TUNED_FP16, .rows = 64, .cols = 1024};
    tuned__blob b1, b2, b3, b4;
    uint64_t h1, h2, h3, h4;
    bool cached;
    EXPECT(tuned__api_cubin(n, s, true, &c, &shape, true, 0, 90, &b1, &h1, &cached, &e) == 0,
           "%s", e.msg);
    EXPECT(!cached && b1.size > 0, "first compile");
    EXPECT(tuned__api_cubin(n, s, true, &c, &shape, true, 0, 90, &b2, &h2, &cached, &e) == 0,
           "%s", e.msg);
    EXPECT(cached && h2 == h1 && b2.size == b1.size && memcmp(b1.data, b2.data, b1.size) == 0,
           "the second comes from the cache, the same bytes");
    /* Unaligned rows: a different source, so a different cubin. */
    EXPECT(tuned__api_cubin(n, s, true, &c, &shape, false, 0, 90, &b3, &h3, &cached, &e) == 0,
           "%s", e.msg);
    EXPECT(!cached && h3 != h1, "unaligned variant compiled separately");
    /* Rows are not compiled in: another row count shares the cubin. */
    tuned__shape more = shape;
    more.rows = 4096;
    EXPECT(tuned__api_cubin(n, s, false, &c, &more, true, 0, 90, &b4, &h4, &cached, &e) == 0,
           "%s", e.msg);
    EXPECT(cached && h4 == h1, "another row count hits the cache");
    tuned__blob_free(&b1);
    tuned__blob_free(&b2);
    tuned__blob_free(&b3);
    tuned__blob_free(&b4);
    /* writable false: compiled, not stored. */
    more.cols = 2048;
    EXPECT(tuned__api_cubin(n, s, false, &c, &more, true, 0, 90, &b4, &h4, &cached, &e) == 0 &&
               !cached,
           "%s", e.msg);
    tuned__blob_free(&b4);
    EXPECT(tuned__api_cubin(n, s, false, &c, &more, true, 0, 90, &b4, &h4, &cached, &e) == 0 &&
               !cached,
           "a cubin compiled for a read-only cache is not stored");
    tuned__blob_free(&b4);
    /* A config codegen refuses. */
    tuned__config bad = c;
    bad.vec = 16;
    tuned__err be = {0};
    EXPECT(tuned__api_cubin(n, s, true, &bad, &shape, true, 0, 90, &b4, &h4, &cached, &be) ==
                   TUNED_EINVAL && be.msg[0],
           "bad config: %s", be.msg);
    tuned__store_close(s);
    tuned__nvrtc_unload(n);
    return 0;
}

/* ---- child ---- */

static void write_file(const char *path, const char *text, mode_t mode)
{
    FILE *f = fopen(path, "w");
    if (f == NULL) {
        EXPECT(0, "cannot write %s", path);
        return;
    }
    fputs(text, f);
    fclose(f);
    chmod(path, mode);
}

static void read_file(const char *path, char *out, size_t n)
{
    out[0] = '\0';
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return;
    size_t got = fread(out, 1, n - 1, f);
    out[got] = '\0';
    fclose(f);
}

typedef struct cancel_later {
    atomic_int *flag;
    int ms;
} cancel_later;

static void *cancel_thread(void *arg)
{
    cancel_later *c = arg;
    struct timespec ts = {.tv_sec = c->ms / 1000, .tv_nsec = (c->ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
    atomic_store(c->flag, 1);
    return NULL;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

typedef struct progress_seen {
    int calls;
    tuned_progress last;
    char best[64], state[16];
    bool first_best_null;
} progress_seen;

static void on_progress(void *ctx, const tuned_progress *p)
{
    progress_seen *s = ctx;
    if (s->calls++ == 0)
        s->first_best_null = p->best_config == NULL && p->best_us == 0;
    s->last = *p;
    snprintf(s->best, sizeof s->best, "%s", p->best_config ? p->best_config : "");
    snprintf(s->state, sizeof s->state, "%s", p->state ? p->state : "");
}

static void test_child(void)
{
    char bin[400], args[400], script[1400];
    snprintf(bin, sizeof bin, "%s/bin/fake-tuned", tmpdir);
    snprintf(args, sizeof args, "%s/args.txt", tmpdir);
    char dir[400];
    snprintf(dir, sizeof dir, "%s/bin", tmpdir);
    mkdir(dir, 0700);
    snprintf(script, sizeof script,
             "#!/bin/sh\n"
             "echo \"$@\" > '%s'\n"
             "case \"$FAKE_TUNED_MODE\" in\n"
             "  ok) echo 'tuned: progress' >&2; exit 0 ;;\n"
             "  fail) echo 'gen 1 ...' >&2; echo 'tuned: cuda: the GPU fell off the bus' >&2; exit 1 ;;\n"
             "  hang) exec sleep 30 ;;\n"
             "  progress) echo '{\"progress\":{\"state\":\"running\",\"generation\":0,"
             "\"evaluated\":7,\"failed\":1,\"budget\":60,\"best_config\":null,\"best_us\":null,"
             "\"copy_us\":9.5,\"elapsed_s\":0.5,\"device\":1}}' >&2;"
             " echo '{\"progress\":{\"state\":\"running\",\"generation\":1,\"evaluated\":23,"
             "\"failed\":2,\"budget\":60,\"best_config\":\"w8.r1\",\"best_us\":12.25,"
             "\"copy_us\":9.5,\"elapsed_s\":1.5,\"device\":1}}' >&2;"
             " echo 'tuned: out of patience' >&2; exit 1 ;;\n"
             "  signal) kill -SEGV $$ ;;\n"
             "esac\n"
             "exit 9\n",
             args);
    write_file(bin, script, 0755);
    tuned__api_child c = {.binary = bin, .store = "/tmp/some store", .device = 1,
                          .shape = {.dtype = TUNED_BF16, .rows = 64, .cols = 1000},
                          .time_s = 2.5, .timeout_s = 20};
    tuned__err e = {0};
    char text[1024];

    setenv("FAKE_TUNED_MODE", "ok", 1);
    EXPECT(tuned__api_run_child(&c, &e) == 0, "ok: %s", e.msg);
    read_file(args, text, sizeof text);
    EXPECT(strcmp(text, "tune --shape 64x1000 --dtype bf16 --device 1 --db /tmp/some store -q "
                        "--time 2.5\n") == 0,
           "arguments: '%s'", text);
    c.time_s = 0;
    EXPECT(tuned__api_run_child(&c, &e) == 0, "ok: %s", e.msg);
    read_file(args, text, sizeof text);
    EXPECT(strstr(text, "--time") == NULL, "no --time by default: '%s'", text);
    /* Another kernel is named; softmax, the default, is not. */
    c.shape.kernel = TUNED_KERNEL_LOG_SOFTMAX_BWD;
    EXPECT(tuned__api_run_child(&c, &e) == 0, "ok: %s", e.msg);
    read_file(args, text, sizeof text);
    EXPECT(strncmp(text, "tune --kernel log_softmax_bwd --shape 64x1000 ", 46) == 0,
           "arguments for log_softmax_bwd: '%s'", text);
    c.shape.kernel = 0;

    setenv("FAKE_TUNED_MODE", "fail", 1);
    tuned__err_clear(&e);
    EXPECT(tuned__api_run_child(&c, &e) == TUNED_ETUNE &&
               strstr(e.msg, "exit status 1: tuned: cuda: the GPU fell off the bus") != NULL,
           "fail: %s", e.msg);

    /* Progress lines become calls; the error names the last other line. */
    setenv("FAKE_TUNED_MODE", "progress", 1);
    tuned__err_clear(&e);
    progress_seen seen = {0};
    c.on_progress = on_progress;
    c.progress_ctx = &seen;
    EXPECT(tuned__api_run_child(&c, &e) == TUNED_ETUNE &&
               strstr(e.msg, "exit status 1: tuned: out of patience") != NULL,
           "progress: %s", e.msg);
    read_file(args, text, sizeof text);
    EXPECT(strstr(text, "-q --progress json") != NULL, "progress arguments: '%s'", text);
    EXPECT(seen.calls == 2 && seen.last.evaluated == 23 && seen.last.failed == 2 &&
               seen.last.budget == 60 && seen.last.generation == 1 && seen.last.best_us == 12.25 &&
               strcmp(seen.best, "w8.r1") == 0 && seen.last.rows == 64 && seen.last.cols == 1000 &&
               seen.last.dtype == TUNED_BF16 && seen.last.device == 1 &&
               strcmp(seen.state, "running") == 0 && seen.first_best_null,
           "progress calls %d: evaluated %lld best %s %.2f", seen.calls,
           (long long)seen.last.evaluated, seen.best, seen.last.best_us);
    c.on_progress = NULL;
    c.progress_ctx = NULL;

    setenv("FAKE_TUNED_MODE", "signal", 1);
    tuned__err_clear(&e);
    EXPECT(tuned__api_run_child(&c, &e) == TUNED_ETUNE && strstr(e.msg, "signal 11") != NULL,
           "signal: %s", e.msg);

    setenv("FAKE_TUNED_MODE", "hang", 1);
    c.timeout_s = 0.5;
    tuned__err_clear(&e);
    double t0 = now_s();
    EXPECT(tuned__api_run_child(&c, &e) == TUNED_ETIMEOUT && strstr(e.msg, "killed") != NULL,
           "hang: %s", e.msg);
    EXPECT(now_s() - t0 < 5, "the hang was killed after %.1f s", now_s() - t0);

    atomic_int cancel;
    atomic_init(&cancel, 0);
    c.timeout_s = 20;
    c.cancel = &cancel;
    cancel_later cl = {.flag = &cancel, .ms = 300};
    pthread_t t;
    pthread_create(&t, NULL, cancel_thread, &cl);
    tuned__err_clear(&e);
    t0 = now_s();
    EXPECT(tuned__api_run_child(&c, &e) == TUNED_EIO && strstr(e.msg, "cancelled") != NULL,
           "cancel: %s", e.msg);
    EXPECT(now_s() - t0 < 5, "cancelled after %.1f s", now_s() - t0);
    pthread_join(t, NULL);
    c.cancel = NULL;

    /* Missing executables, and a name found in $PATH. */
    char missing[420];
    snprintf(missing, sizeof missing, "%s/bin/no-such-tuned", tmpdir);
    c.binary = missing;
    tuned__err_clear(&e);
    EXPECT(tuned__api_run_child(&c, &e) == TUNED_EIO && strstr(e.msg, "TUNED_BIN") != NULL,
           "missing: %s", e.msg);
    c.binary = "no-such-tuned-anywhere";
    tuned__err_clear(&e);
    EXPECT(tuned__api_run_child(&c, &e) == TUNED_EIO && strstr(e.msg, "$PATH") != NULL,
           "not in PATH: %s", e.msg);
    const char *old_path = getenv("PATH");
    char *saved = old_path ? strdup(old_path) : NULL;
    char path[1200];
    snprintf(path, sizeof path, "/nonexistent:%s:%s", dir, saved ? saved : "/usr/bin:/bin");
    setenv("PATH", path, 1);
    setenv("FAKE_TUNED_MODE", "ok", 1);
    c.binary = "fake-tuned";
    tuned__err_clear(&e);
    EXPECT(tuned__api_run_child(&c, &e) == 0, "found in PATH: %s", e.msg);
    if (saved != NULL) {
        setenv("PATH", saved, 1);
        free(saved);
    }
    unsetenv("FAKE_TUNED_MODE");
}

/* ---- daemon ---- */

typedef struct fake_daemon {
    char path[200];
    int listen_fd;
    const char *reply;   /* sent after reading a line; NULL: close at once */
    int delay_ms;        /* before replying */
    char got[2048];      /* the request line received */
} fake_daemon;

static void *fake_daemon_main(void *arg)
{
    fake_daemon *d = arg;
    int fd = accept(d->listen_fd, NULL, NULL);
    if (fd < 0)
        return NULL;
    size_t len = 0;
    while (len + 1 < sizeof d->got) {
        ssize_t n = read(fd, d->got + len, sizeof d->got - 1 - len);
        if (n <= 0)
            break;
        len += (size_t)n;
        if (memchr(d->got, '\n', len) != NULL)
            break;
    }
    d->got[len] = '\0';
    if (d->delay_ms > 0) {
        struct timespec ts = {.tv_sec = d->delay_ms / 1000, .tv_nsec = (d->delay_ms % 1000) * 1000000L};
        nanosleep(&ts, NULL);
    }
    if (d->reply != NULL) {
        ssize_t ignored = write(fd, d->reply, strlen(d->reply));
        (void)ignored;
    }
    close(fd);
    return NULL;
}

static void daemon_start(fake_daemon *d, pthread_t *t, const char *reply, int delay_ms)
{
    memset(d->got, 0, sizeof d->got);
    d->reply = reply;
    d->delay_ms = delay_ms;
    d->listen_fd = socket(AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    snprintf(a.sun_path, sizeof a.sun_path, "%s", d->path);
    unlink(d->path);
    if (bind(d->listen_fd, (struct sockaddr *)&a, sizeof a) != 0 || listen(d->listen_fd, 4) != 0)
        EXPECT(0, "fake daemon: %s", strerror(errno));
    pthread_create(t, NULL, fake_daemon_main, d);
}

static void daemon_stop(fake_daemon *d, pthread_t t)
{
    pthread_join(t, NULL);
    close(d->listen_fd);
    unlink(d->path);
}

static void test_daemon(void)
{
    fake_daemon d;
    snprintf(d.path, sizeof d.path, "%s/d.sock", tmpdir);
    pthread_t t;
    tuned__err e = {0};
    tuned__shape shape = {.dtype = TUNED_BF16, .rows = 4096, .cols = 32000};

    daemon_start(&d, &t, "{\"ok\":true,\"job\":3,\"joined\":false,\"state\":\"queued\"}\n", 0);
    uint64_t job = 0;
    EXPECT(tuned__client_tune(d.path, &shape, 0x5e0c00000000abcdull, 12.5, &job, &e) == 0 &&
               job == 3,
           "tune: %s", e.msg);
    daemon_stop(&d, t);
    json_error_t jerr;
    json_t *req = json_loads(d.got, 0, &jerr);
    EXPECT(req != NULL, "request is JSON: %s", d.got);
    if (req != NULL) {
        EXPECT(strcmp(json_string_value(json_object_get(req, "op")), "tune") == 0 &&
                   strcmp(json_string_value(json_object_get(req, "kernel")), "softmax") == 0 &&
                   strcmp(json_string_value(json_object_get(req, "dtype")), "bf16") == 0 &&
                   json_integer_value(json_object_get(req, "rows")) == 4096 &&
                   json_integer_value(json_object_get(req, "cols")) == 32000 &&
                   strcmp(json_string_value(json_object_get(req, "gpu")), "5e0c00000000abcd") == 0 &&
                   json_real_value(json_object_get(req, "time_s")) == 12.5,
               "request fields: %s", d.got);
        json_decref(req);
    }
    EXPECT(strchr(d.got, '\n') == d.got + strlen(d.got) - 1, "one line: %s", d.got);

    static const struct {
        const char *reply;
        int code;
        const char *text;
    } errors[] = {
        {"{\"ok\":false,\"error\":{\"code\":\"no_gpu\",\"message\":\"this daemon has no GPU\"}}\n",
         TUNED_ENODEV, "no_gpu: this daemon has no GPU"},
        {"{\"ok\":false,\"error\":{\"code\":\"no_space\",\"message\":\"none fits\"}}\n",
         TUNED_ENOSPACE, "none fits"},
        {"{\"ok\":false,\"error\":{\"code\":\"queue_full\",\"message\":\"64 jobs wait\"}}\n",
         TUNED_ETUNE, "queue_full"},
        {"{\"ok\":false,\"error\":{\"code\":\"too_big\",\"message\":\"x\"}}\n", TUNED_EINVAL,
         "too_big"},
        {"not json\n", TUNED_EIO, "not a JSON object"},
        {"{\"ok\":true}\n", TUNED_EIO, "without a job id"},
        {NULL, TUNED_EIO, "closed the connection"},
    };
    for (size_t i = 0; i < sizeof errors / sizeof errors[0]; i++) {
        daemon_start(&d, &t, errors[i].reply, 0);
        tuned__err_clear(&e);
        int rc = tuned__client_tune(d.path, &shape, 1, 0, &job, &e);
        EXPECT(rc == errors[i].code && strstr(e.msg, errors[i].text) != NULL,
               "reply %zu: %d %s", i, rc, e.msg);
        daemon_stop(&d, t);
        EXPECT(strstr(d.got, "time_s") == NULL, "no time_s when 0: %s", d.got);
    }

    /* No daemon at all. */
    tuned__err_clear(&e);
    EXPECT(tuned__client_tune(d.path, &shape, 1, 0, &job, &e) == TUNED_ENOTFOUND &&
               strstr(e.msg, "tuned serve") != NULL,
           "no daemon: %s", e.msg);
    /* A daemon that answers too late. */
    daemon_start(&d, &t, "{\"ok\":true}\n", 1500);
    json_t *ping = json_pack("{s:s}", "op", "ping"), *reply = NULL;
    tuned__err_clear(&e);
    EXPECT(tuned__client_request(d.path, ping, 0.3, &reply, &e) == TUNED_ETIMEOUT && reply == NULL,
           "slow daemon: %s", e.msg);
    daemon_stop(&d, t);
    /* Job state and store path. */
    daemon_start(&d, &t,
                 "{\"ok\":true,\"job\":{\"id\":3,\"state\":\"failed\",\"error\":\"no variant "
                 "passed its check\"}}\n",
                 0);
    char state[32], why[256];
    EXPECT(tuned__client_job(d.path, 3, state, sizeof state, why, sizeof why, &e) == 0 &&
               strcmp(state, "failed") == 0 && strcmp(why, "no variant passed its check") == 0,
           "job: %s / %s / %s", state, why, e.msg);
    daemon_stop(&d, t);
    EXPECT(strcmp(d.got, "{\"op\":\"job\",\"job\":3}\n") == 0, "job request: %s", d.got);
    daemon_start(&d, &t, "{\"ok\":true,\"store\":{\"records\":2,\"path\":\"/var/lib/tuned\"}}\n", 0);
    char store[256];
    EXPECT(tuned__client_store_path(d.path, store, sizeof store, &e) == 0 &&
               strcmp(store, "/var/lib/tuned") == 0,
           "store: %s", e.msg);
    daemon_stop(&d, t);
    /* A path too long for a socket address. */
    char longpath[300];
    memset(longpath, 'a', sizeof longpath - 1);
    longpath[sizeof longpath - 1] = '\0';
    EXPECT(tuned__client_request(longpath, ping, 1, &reply, &e) == TUNED_EINVAL, "long path");
    json_decref(ping);

    /* Default paths follow the environment. */
    char out[256];
    setenv("TUNED_SOCKET", "/x/y.sock", 1);
    tuned__default_socket(out, sizeof out);
    EXPECT(strcmp(out, "/x/y.sock") == 0, "socket %s", out);
    unsetenv("TUNED_SOCKET");
    setenv("XDG_RUNTIME_DIR", "/run/user/7", 1);
    tuned__default_socket(out, sizeof out);
    EXPECT(strcmp(out, "/run/user/7/tuned/tuned.sock") == 0, "socket %s", out);
    setenv("TUNED_DB", "/data/tuned", 1);
    tuned__default_store(out, sizeof out);
    EXPECT(strcmp(out, "/data/tuned") == 0, "store %s", out);
    unsetenv("TUNED_DB");
}

/* ---- the public API without a GPU ---- */

static void *other_thread_error(void *arg)
{
    (void)arg;
    /* This thread has had no failure: nothing to say. */
    return (void *)(uintptr_t)(tuned_last_error(NULL)[0] == '\0');
}

static void test_public(void)
{
    tuned_handle *h = (tuned_handle *)0x1;
    tuned_options o;
    tuned_options_init(&o);
    EXPECT(o.store == NULL && o.socket == NULL && o.policy == TUNED_POLICY_NEVER &&
               o.tune_time_s == 0,
           "defaults");
    char store[400];
    snprintf(store, sizeof store, "%s/public-store", tmpdir);
    o.store = store;
    int rc = tuned_open(&h, &o);
    if (rc == 0) {
        printf("public: a CUDA driver and GPU are here; tuned_open succeeded\n");
        tuned_close(h);
    } else {
        EXPECT(h == NULL, "*out is NULL after a failed open");
        EXPECT(rc == TUNED_ENODRIVER || rc == TUNED_ENODEV || rc == TUNED_ENONVRTC,
               "open without a GPU: %d %s", rc, tuned_last_error(NULL));
        EXPECT(strncmp(tuned_last_error(NULL), "tuned_open: ", 12) == 0 &&
                   strstr(tuned_last_error(NULL), rc == TUNED_ENODRIVER ? "no CUDA driver" : "") !=
                       NULL,
               "message: %s", tuned_last_error(NULL));
        printf("public: tuned_open without a GPU: %s (%s)\n", tuned_strerror(rc),
               tuned_last_error(NULL));
        pthread_t t;
        void *clean = NULL;
        pthread_create(&t, NULL, other_thread_error, NULL);
        pthread_join(t, &clean);
        EXPECT(clean != NULL, "the message is per thread");
    }
    EXPECT(tuned_open(NULL, &o) == TUNED_EINVAL, "NULL out");
    o.policy = (tuned_policy)7;
    EXPECT(tuned_open(&h, &o) == TUNED_EINVAL && strstr(tuned_last_error(NULL), "policy"),
           "bad policy: %s", tuned_last_error(NULL));
    o.policy = TUNED_POLICY_NEVER;
    o.tune_time_s = -1;
    EXPECT(tuned_open(&h, &o) == TUNED_EINVAL, "negative time");
    EXPECT(tuned_softmax(NULL, (void *)16, (void *)4096, 1, 1, 1, TUNED_FP16, NULL) ==
                   TUNED_EINVAL &&
               strstr(tuned_last_error(NULL), "handle is NULL") != NULL,
           "NULL handle: %s", tuned_last_error(NULL));
    EXPECT(tuned_softmax_scaled(NULL, (void *)16, (void *)4096, 1, 1, 1, TUNED_FP16, 0.5f, NULL) ==
                   TUNED_EINVAL &&
               tuned_log_softmax(NULL, (void *)16, (void *)4096, 1, 1, 1, TUNED_FP16, 1.0f,
                                 NULL) == TUNED_EINVAL &&
               tuned_softmax_backward(NULL, (void *)16, (void *)32, (void *)4096, 1, 1, 1,
                                      TUNED_FP16, NULL) == TUNED_EINVAL &&
               tuned_log_softmax_backward(NULL, (void *)16, (void *)32, (void *)4096, 1, 1, 1,
                                          TUNED_FP16, NULL) == TUNED_EINVAL &&
               strstr(tuned_last_error(NULL), "tuned_log_softmax_backward: the handle is NULL") !=
                   NULL,
           "NULL handle (new kernels): %s", tuned_last_error(NULL));
    tuned_choice ch;
    EXPECT(tuned_last_choice(NULL, &ch) == TUNED_EINVAL, "last choice of NULL");
    EXPECT(tuned_lookup(NULL, TUNED_KERNEL_SOFTMAX, 1, 1, TUNED_FP16, 0, &ch) == TUNED_EINVAL, "lookup NULL");
    EXPECT(tuned_tune(NULL, TUNED_KERNEL_SOFTMAX, 1, 1, TUNED_FP16, 0, 0) == TUNED_EINVAL, "tune NULL");
    EXPECT(tuned_prepare(NULL, TUNED_KERNEL_SOFTMAX, (const void *[]){(void *)16, (void *)4096}, 1, 1, 1, TUNED_FP16, &ch) ==
               TUNED_EINVAL,
           "prepare NULL");
    tuned_close(NULL);
    EXPECT(strcmp(tuned_source_name(TUNED_SOURCE_EXACT), "exact") == 0 &&
               strcmp(tuned_source_name(TUNED_SOURCE_NEAREST), "nearest") == 0 &&
               strcmp(tuned_source_name(TUNED_SOURCE_DEFAULT), "default") == 0 &&
               tuned_source_name((tuned_source)9) == NULL,
           "source names");
    EXPECT(strcmp(tuned_strerror(TUNED_ETUNE), "tune failed") == 0, "ETUNE text");
    EXPECT(sizeof(tuned__api_key) == 40, "the key has no padding (%zu bytes)",
           sizeof(tuned__api_key));
}

int main(int argc, char **argv)
{
    bool cubin = argc > 1 && strcmp(argv[1], "cubin") == 0;
    if (argc > 2 || (argc == 2 && !cubin)) {
        fprintf(stderr, "usage: test_api [cubin]\n");
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    snprintf(tmpdir, sizeof tmpdir, "/tmp/tuned-test-api-XXXXXX");
    if (mkdtemp(tmpdir) == NULL) {
        perror("mkdtemp");
        return 1;
    }
    int skip = 0;
    if (cubin) {
        skip = test_cubin();
    } else {
        test_map();
        test_pick();
        test_child();
        test_daemon();
        test_public();
    }
    int status = expect_done(cubin ? "api cubin" : "api", tmpdir);
    return status != 0 ? status : skip;
}
