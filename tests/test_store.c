/* test_store.c: tests of the LMDB store in one process: keys, records,
 * provenance, the best / history / cubins databases, maintenance, and the
 * unhappy paths.
 *
 * Runs every case in a fresh directory under a mkdtemp() root, removed at
 * the end. The unhappy paths are tested on purpose: values written behind
 * the store's back with raw LMDB calls (garbage, wrong types, a newer
 * record version, another schema), damaged and unwritable files, read-only
 * opens of nothing, and a 64 KiB map that must grow many times, from one
 * thread and from several. Crashes and several processes: test_store_procs.c;
 * export / import: test_import.c. Exit status 0 when everything passed. */
#include <errno.h>
#include <inttypes.h>
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

#include "cache/key.h"
#include "cache/record.h"
#include "cache/store.h"
#include "cache/store_internal.h"
#include "src/common/hash.h"
#include "tests/store_testlib.h"
#include "tuned.h"
#include "src/tuner/policy.h"

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
    EXPECT(raw_put(path, "best", kb, sizeof kb, json, strlen(json)) == 0);
}

/* raw_put() on the store s has open: closes it first (LMDB's locks are per
 * process: one process must not open an environment twice) and reopens. */
static void raw_put_open(tuned__store **s, const char *path, const char *db, const void *k,
                         size_t kn, const void *v, size_t vn)
{
    tuned__err e = {0};
    tuned__store_close(*s);
    *s = NULL;
    EXPECT(raw_put(path, db, k, kn, v, vn) == 0);
    EXPECT_OK(tuned__store_open(s, path, 0, &e), &e);
    if (*s == NULL)
        exit(1);
}

/* ---- keys ---- */

static void test_key(void)
{
    tuned__store_key k = {.kernel = 1, .dtype = 2, .rows = 0x0102030405060708ull,
                          .cols = 0x1112131415161718ull, .layout = 0x42,
                          .gpu_fp = 0xa1a2a3a4a5a6a7a8ull};
    uint8_t b[TUNED__KEY_LEN];
    tuned__key_encode(b, TUNED__KEY_TAG_BEST, &k);
    static const uint8_t want[TUNED__KEY_LEN] = {
        'B',  1,    2,    0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x11, 0x12, 0x13,
        0x14, 0x15, 0x16, 0x17, 0x18, 0x42, 0xa1, 0xa2, 0xa3, 0xa4, 0xa5, 0xa6, 0xa7, 0xa8};
    EXPECT(memcmp(b, want, sizeof want) == 0);

    tuned__err e = {0};
    tuned__store_key back;
    EXPECT_OK(tuned__key_decode(b, sizeof b, TUNED__KEY_TAG_BEST, &back, &e), &e);
    EXPECT(back.kernel == 1 && back.dtype == 2 && back.rows == k.rows && back.cols == k.cols
          && back.layout == 0x42 && back.gpu_fp == k.gpu_fp);
    EXPECT_RC(tuned__key_decode(b, sizeof b - 1, TUNED__KEY_TAG_BEST, &back, &e), TUNED_ESTORE, &e);
    EXPECT_MSG(&e, "27 bytes");
    EXPECT_RC(tuned__key_decode(b, sizeof b, 'X', &back, &e), TUNED_ESTORE, &e);
    EXPECT_MSG(&e, "tag");

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
    EXPECT(memcmp(r1, r256, TUNED__KEY_LEN) < 0);
    EXPECT(memcmp(r256, r65536, TUNED__KEY_LEN) < 0);
    EXPECT(memcmp(r1, r2, TUNED__KEY_LEN) < 0);
    EXPECT(r256[3 + 6] == 1 && r256[3 + 7] == 0); /* 256 = ...01 00 */

    /* The shape prefix is the key's first 19 bytes. */
    uint8_t p[TUNED__KEY_SHAPE_LEN];
    tuned__key_encode_shape(p, TUNED__KEY_TAG_BEST, 1, 0, 2, 1);
    EXPECT(memcmp(p, r2, sizeof p) == 0);

    /* History keys: the best key under 'H', then the config text. */
    uint8_t h[TUNED__KEY_HIST_MAX];
    size_t hn;
    char cfg[TUNED__KEY_CONFIG_MAX + 1];
    EXPECT_OK(tuned__key_encode_hist(h, &k, "w8.r1", &hn, &e), &e);
    EXPECT(hn == TUNED__KEY_LEN + 5 && h[0] == 'H' && memcmp(h + 1, b + 1, TUNED__KEY_LEN - 1) == 0);
    EXPECT_OK(tuned__key_decode_hist(h, hn, &back, cfg, &e), &e);
    EXPECT(strcmp(cfg, "w8.r1") == 0 && back.rows == k.rows && back.layout == 0x42);
    EXPECT_RC(tuned__key_encode_hist(h, &k, "has space", &hn, &e), TUNED_EINVAL, &e);
    EXPECT_RC(tuned__key_encode_hist(h, &k, "", &hn, &e), TUNED_EINVAL, &e);
    char longcfg[200];
    memset(longcfg, 'x', sizeof longcfg - 1);
    longcfg[sizeof longcfg - 1] = '\0';
    EXPECT_RC(tuned__key_encode_hist(h, &k, longcfg, &hn, &e), TUNED_EINVAL, &e);
    EXPECT_RC(tuned__key_decode_hist(h, TUNED__KEY_LEN, &back, cfg, &e), TUNED_ESTORE, &e);

    /* Cubin keys. */
    uint8_t c[TUNED__KEY_CUBIN_LEN];
    uint64_t hash;
    tuned__key_encode_cubin(c, 0x1122334455667788ull);
    EXPECT(c[0] == 'C' && c[1] == 0x11 && c[8] == 0x88);
    EXPECT_OK(tuned__key_decode_cubin(c, sizeof c, &hash, &e), &e);
    EXPECT(hash == 0x1122334455667788ull);
    EXPECT_RC(tuned__key_decode_cubin(c, 3, &hash, &e), TUNED_ESTORE, &e);

    /* Text form, both ways. */
    char text[TUNED__KEY_TEXT];
    tuned__store_key t = {.kernel = 1, .dtype = TUNED_BF16, .rows = 4096, .cols = 32000,
                          .gpu_fp = 0x00000000deadbeefull};
    tuned__key_format(text, sizeof text, &t);
    EXPECT(strcmp(text, "softmax/bf16/4096x32000/dense/00000000deadbeef") == 0);
    EXPECT_OK(tuned__key_parse(text, &back, &e), &e);
    EXPECT(memcmp(&back, &t, sizeof t) != 0 || 1);
    EXPECT(back.kernel == 1 && back.dtype == TUNED_BF16 && back.rows == 4096 &&
          back.cols == 32000 && back.layout == 0 && back.gpu_fp == 0xdeadbeefull);
    EXPECT_OK(tuned__key_parse("softmax/fp16/1x2/L7/00000000DEADBEEF", &back, &e), &e);
    EXPECT(back.layout == 7 && back.gpu_fp == 0xdeadbeefull);
    static const char *const bad[] = {
        "", "softmax", "softmax/fp16/1x2/dense", "softmax/fp16/1x2/dense/123/4",
        "matmul/fp16/1x2/dense/00000000deadbeef", "softmax/fp8/1x2/dense/00000000deadbeef",
        "softmax/fp16/1y2/dense/00000000deadbeef", "softmax/fp16/-1x2/dense/00000000deadbeef",
        "softmax/fp16/1x2/L256/00000000deadbeef", "softmax/fp16/1x2/dense/00000000deadbeeg",
        "softmax/fp16/1x2/dense/0000000deadbeef",
        "softmax/fp16/99999999999999999999x2/dense/00000000deadbeef",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        EXPECT(tuned__key_parse(bad[i], &back, &e) == TUNED_EINVAL, "key '%s' parsed", bad[i]);
    }
    /* Every kernel's id: its byte in the binary key (right after the tag,
     * so a kernel's records sort together), its name in the text form and
     * in a record's JSON, both ways. The ids are on disk: fixed here. */
    static const struct {
        uint8_t id;
        const char *name;
    } kernels[] = {{1, "softmax"}, {2, "softmax_bwd"}, {3, "log_softmax"}, {4, "log_softmax_bwd"}};
    for (size_t i = 0; i < sizeof kernels / sizeof kernels[0]; i++) {
        tuned__store_key kk = t;
        kk.kernel = kernels[i].id;
        uint8_t bin[TUNED__KEY_LEN];
        tuned__key_encode(bin, TUNED__KEY_TAG_BEST, &kk);
        EXPECT(bin[0] == 'B' && bin[1] == kernels[i].id, "kernel %s: byte %u", kernels[i].name,
               bin[1]);
        tuned__key_format(text, sizeof text, &kk);
        char want_text[TUNED__KEY_TEXT];
        snprintf(want_text, sizeof want_text, "%s/bf16/4096x32000/dense/00000000deadbeef", kernels[i].name);
        EXPECT(strcmp(text, want_text) == 0, "kernel %u: key text %s", kernels[i].id, text);
        EXPECT_OK(tuned__key_parse(text, &back, &e), &e);
        EXPECT(back.kernel == kernels[i].id, "kernel %s parsed as %u", kernels[i].name,
               back.kernel);
        EXPECT_OK(tuned__key_decode(bin, sizeof bin, TUNED__KEY_TAG_BEST, &back, &e), &e);
        EXPECT(back.kernel == kernels[i].id);
    }
    EXPECT(tuned__key_parse("softmax_backward/fp16/1x2/dense/00000000deadbeef", &back, &e) ==
               TUNED_EINVAL,
           "an unknown kernel name parsed");
}

static void test_fingerprint(void)
{
    EXPECT(tuned__store_gpu_fingerprint("") == 0xcbf29ce484222325ull);
    EXPECT(tuned__store_gpu_fingerprint("a") == 0xaf63dc4c8601ec8cull);
    const char *id = "NVIDIA H100 80GB HBM3|sm_90|GPU-1234";
    EXPECT(tuned__store_gpu_fingerprint(id) == tuned__fnv1a64(id, strlen(id), TUNED__FNV_SEED));
}

/* ---- records, without a store ---- */

static void test_record_json(void)
{
    tuned__err e = {0};
    tuned__record r, back;
    make_record(&r, "gpu-a", 4096, 4096);
    r.cubin = 0xfedcba9876543210ull;
    char *text;
    size_t len;
    EXPECT_OK(tuned__record_encode(&r, &text, &len, &e), &e);
    char copy[4096];
    snprintf(copy, sizeof copy, "%.*s", (int)len, text);
    EXPECT(strlen(copy) == len);
    EXPECT(strncmp(copy, "{\"v\":2,\"kernel\":\"softmax\",\"dtype\":\"fp16\",", 40) == 0);
    char fp[64];
    snprintf(fp, sizeof fp, "\"gpu_fp\":\"%016" PRIx64 "\"", r.key.gpu_fp);
    EXPECT(strstr(copy, fp) != NULL);
    EXPECT(strstr(copy, "\"median_us\":12.345678901234567") != NULL);
    EXPECT(strstr(copy, "\"policy\":\"" TUNED__MEASURE_POLICY "\"") != NULL);
    EXPECT(strstr(copy, "\"cubin\":\"fedcba9876543210\"") != NULL);
    EXPECT_OK(tuned__record_decode(text, len, &back, &e), &e);
    EXPECT(record_equal(&r, &back));
    free(text);

    /* What cannot be written faithfully is refused. */
    tuned__record bad = r;
    memset(bad.config, 'x', sizeof bad.config);
    EXPECT_RC(tuned__record_encode(&bad, &text, &len, &e), TUNED_EINVAL, &e);
    EXPECT_MSG(&e, "\"config\"");
    bad = r;
    bad.median_us = NAN;
    EXPECT_RC(tuned__record_encode(&bad, &text, &len, &e), TUNED_EINVAL, &e);
    EXPECT_MSG(&e, "\"median_us\"");
    bad = r;
    bad.gbps = -1;
    EXPECT_RC(tuned__record_encode(&bad, &text, &len, &e), TUNED_EINVAL, &e);
    bad = r;
    snprintf(bad.gpu_name, sizeof bad.gpu_name, "bad \xc3\x28 utf8");
    EXPECT_RC(tuned__record_encode(&bad, &text, &len, &e), TUNED_EINVAL, &e);
    EXPECT_MSG(&e, "UTF-8");
    bad = r;
    bad.key.rows = UINT64_MAX;
    EXPECT_RC(tuned__record_encode(&bad, &text, &len, &e), TUNED_EINVAL, &e);
    EXPECT_MSG(&e, "\"rows\"");
    bad = r;
    bad.key.dtype = 9;
    EXPECT_RC(tuned__record_encode(&bad, &text, &len, &e), TUNED_EINVAL, &e);

    /* The checks every stored record passes. */
    struct {
        const char *what, *needle;
        void (*spoil)(tuned__record *);
    } checks[] = {
        {"fingerprint", "fingerprint", NULL},
        {"zero median", "median_us", NULL},
        {"empty config", "config", NULL},
        {"config with a space", "config", NULL},
        {"empty policy", "policy", NULL},
        {"bad date", "date", NULL},
        {"zero rows", "shape", NULL},
        {"unknown kernel", "kernel", NULL},
    };
    for (size_t i = 0; i < sizeof checks / sizeof checks[0]; i++) {
        bad = r;
        switch (i) {
        case 0: bad.key.gpu_fp ^= 1; break;
        case 1: bad.median_us = 0; break;
        case 2: bad.config[0] = '\0'; break;
        case 3: snprintf(bad.config, sizeof bad.config, "w8 r1"); break;
        case 4: bad.prov.policy[0] = '\0'; break;
        case 5: snprintf(bad.date, sizeof bad.date, "yesterday"); break;
        case 6: bad.key.rows = 0; break;
        case 7: bad.key.kernel = TUNED__KIND_COUNT + 1; break;
        }
        EXPECT_RC(tuned__record_check(&bad, TUNED_EINVAL, &e), TUNED_EINVAL, &e);
        EXPECT_MSG(&e, checks[i].needle);
    }
    EXPECT_OK(tuned__record_check(&r, TUNED_EINVAL, &e), &e);

    /* UTF-8 that fits goes through. */
    bad = r;
    snprintf(bad.gpu_name, sizeof bad.gpu_name, "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80");
    EXPECT_OK(tuned__record_encode(&bad, &text, &len, &e), &e);
    EXPECT_OK(tuned__record_decode(text, len, &back, &e), &e);
    EXPECT(strcmp(back.gpu_name, bad.gpu_name) == 0);
    free(text);

    /* Another kernel's record: its name in the JSON, its id back. */
    bad = r;
    bad.key.kernel = TUNED_KERNEL_LOG_SOFTMAX_BWD;
    EXPECT_OK(tuned__record_encode(&bad, &text, &len, &e), &e);
    EXPECT(strstr(text, "\"kernel\":\"log_softmax_bwd\"") != NULL);
    EXPECT_OK(tuned__record_decode(text, len, &back, &e), &e);
    EXPECT(back.key.kernel == TUNED_KERNEL_LOG_SOFTMAX_BWD);
    free(text);

    /* Duplicate keys and a NUL in a string are refused on reading. */
    const char *dup = "{\"v\":2,\"v\":2}";
    EXPECT_RC(tuned__record_decode(dup, strlen(dup), &back, &e), TUNED_ESTORE, &e);
    EXPECT_MSG(&e, "duplicate");
    const char *arr = "[1,2]";
    EXPECT_RC(tuned__record_decode(arr, strlen(arr), &back, &e), TUNED_ESTORE, &e);
    const char *nul = "{\"v\":2,\"kernel\":\"softmax\",\"dtype\":\"fp16\",\"rows\":1,\"cols\":1,"
                      "\"layout\":0,\"gpu_fp\":\"0000000000000001\",\"config\":\"a\\u0000b\"}";
    EXPECT_RC(tuned__record_decode(nul, strlen(nul), &back, &e), TUNED_ESTORE, &e);
    EXPECT_MSG(&e, "NUL");
    const char *fpbad = "{\"v\":2,\"kernel\":\"softmax\",\"dtype\":\"fp16\",\"rows\":1,"
                        "\"cols\":1,\"layout\":0,\"gpu_fp\":\"000000000000000g\"}";
    EXPECT_RC(tuned__record_decode(fpbad, strlen(fpbad), &back, &e), TUNED_ESTORE, &e);
    EXPECT_MSG(&e, "\"gpu_fp\"");
    const char *kbad = "{\"v\":2,\"kernel\":1}";
    EXPECT_RC(tuned__record_decode(kbad, strlen(kbad), &back, &e), TUNED_ESTORE, &e);
    EXPECT_MSG(&e, "\"kernel\"");
    const char *v1 = "{\"v\":1}";
    EXPECT_RC(tuned__record_decode(v1, strlen(v1), &back, &e), TUNED_ESCHEMA, &e);
    const char *v3 = "{\"v\":3}";
    EXPECT_RC(tuned__record_decode(v3, strlen(v3), &back, &e), TUNED_ESCHEMA, &e);
    EXPECT_MSG(&e, "version 3");
}

/* Exact means the same key, identity, parts and policy. */
static void test_exact(void)
{
    tuned__record here, r;
    make_record(&here, "NVIDIA H100|sm_90|drv13000", 4096, 32000);
    char why[512];
    r = here;
    EXPECT(tuned__record_exact(&r, &here, why, sizeof why) && why[0] == '\0');
    EXPECT(tuned__record_exact(&r, &here, NULL, 0));

    r.prov.driver_version = 12080;
    EXPECT(!tuned__record_exact(&r, &here, why, sizeof why));
    EXPECT(strstr(why, "driver 12080 (here 13000)") != NULL);

    r = here;
    snprintf(r.prov.policy, sizeof r.prov.policy, "old-policy/0");
    r.prov.nvrtc_minor = 8;
    EXPECT(!tuned__record_exact(&r, &here, why, sizeof why));
    EXPECT(strstr(why, "policy old-policy/0") != NULL && strstr(why, "nvrtc 13.8") != NULL);

    r = here;
    r.key.layout = 3;
    EXPECT(!tuned__record_exact(&r, &here, why, sizeof why) && strstr(why, "layout 3"));

    /* Same parts, another identity string: still not exact. */
    make_record(&r, "NVIDIA H100|sm_90|drv13000|x", 4096, 32000);
    EXPECT(!tuned__record_exact(&r, &here, why, sizeof why) && strstr(why, "identity"));

    /* A tiny buffer is cut, never overrun. */
    r = here;
    r.prov.sm_count = 1;
    r.prov.mem_mib = 1;
    char small[8];
    EXPECT(!tuned__record_exact(&r, &here, small, sizeof small) && strlen(small) < sizeof small);
}

/* ---- the store ---- */

static void test_roundtrip(void)
{
    char path[4200];
    tuned__store *s = open_test_store(path, sizeof path, "rt/nested/store", 0);
    if (s == NULL)
        return;
    tuned__err e = {0};
    EXPECT(strcmp(tuned__store_path(s), path) == 0);

    /* mkdir -p made every level 0700. */
    struct stat st;
    char sub[4300];
    snprintf(sub, sizeof sub, "%s/rt", root);
    EXPECT(stat(sub, &st) == 0 && (st.st_mode & 0777) == 0700);
    EXPECT(stat(path, &st) == 0 && (st.st_mode & 0777) == 0700);

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
    memset(r.tool_version, 't', sizeof r.tool_version - 1);
    r.tool_version[sizeof r.tool_version - 1] = '\0';
    r.key.dtype = TUNED_BF16;
    r.key.rows = (uint64_t)INT64_MAX;
    r.key.cols = 1;
    r.key.layout = 255;
    r.prov.mem_mib = (uint64_t)INT64_MAX;
    r.prov.template_hash = UINT64_MAX;
    r.prov.driver_version = UINT32_MAX;
    r.median_us = 0.1;
    r.copy_us = 1e-300;
    r.gbps = 1.7976931348623157e308;
    r.evaluations = UINT32_MAX;
    r.cubin = UINT64_MAX;
    EXPECT_OK(tuned__store_put_best(s, &r, &e), &e);
    memset(&got, 0x5a, sizeof got);
    EXPECT_OK(tuned__store_get_best(s, &r.key, &got, TUNED__MEASURE_POLICY, &e), &e);
    EXPECT(record_equal(&r, &got));

    /* A missing key. */
    tuned__store_key miss = r.key;
    miss.cols = 2;
    EXPECT_RC(tuned__store_get_best(s, &miss, &got, TUNED__MEASURE_POLICY, &e), TUNED_ENOTFOUND, &e);
    EXPECT_MSG(&e, path);
    miss = r.key;
    miss.layout = 0;
    EXPECT_RC(tuned__store_get_best(s, &miss, &got, TUNED__MEASURE_POLICY, &e), TUNED_ENOTFOUND, &e);

    /* A newer record replaces the older one. */
    tuned__record r2 = r;
    snprintf(r2.config, sizeof r2.config, "w8.r4.v4");
    r2.median_us = 9.5;
    EXPECT_OK(tuned__store_put_best(s, &r2, &e), &e);
    EXPECT_OK(tuned__store_get_best(s, &r.key, &got, TUNED__MEASURE_POLICY, &e), &e);
    EXPECT(record_equal(&r2, &got));

    /* A record that fails its checks is refused before any write. */
    tuned__record bad = r2;
    bad.key.gpu_fp ^= 1;
    EXPECT_RC(tuned__store_put_best(s, &bad, &e), TUNED_EINVAL, &e);
    EXPECT_MSG(&e, "fingerprint");
    EXPECT_MSG(&e, path);
    tuned__store_close(s);

    /* Reopened, writable and read-only, it still has the record. */
    EXPECT_OK(tuned__store_open(&s, path, 0, &e), &e);
    if (s != NULL) {
        EXPECT_OK(tuned__store_get_best(s, &r.key, &got, TUNED__MEASURE_POLICY, &e), &e);
        EXPECT(record_equal(&r2, &got));
        tuned__store_close(s);
    }
    EXPECT_OK(tuned__store_open(&s, path, TUNED__STORE_READONLY, &e), &e);
    if (s != NULL) {
        EXPECT_OK(tuned__store_get_best(s, &r.key, &got, TUNED__MEASURE_POLICY, &e), &e);
        EXPECT(record_equal(&r2, &got));
        EXPECT_RC(tuned__store_put_best(s, &r, &e), TUNED_EINVAL, &e);
        EXPECT_MSG(&e, "read-only");
        tuned__store_eval ev;
        make_eval(&ev, &r.key, "w8", 1.0);
        EXPECT_RC(tuned__store_put_eval(s, &ev, &e), TUNED_EINVAL, &e);
        EXPECT_RC(tuned__store_put_cubin(s, 1, "x", 1, &e), TUNED_EINVAL, &e);
        tuned__store_close(s);
    }
    tuned__store_close(NULL);
}

/* Only this build's measurement policy is served; other records stay
 * visible to find_shape (to seed a search) and can be replaced. */
static void test_policy(void)
{
    char path[4200];
    tuned__store *s = open_test_store(path, sizeof path, "policy", 0);
    if (s == NULL)
        return;
    tuned__err e = {0};
    tuned__record r, got;
    make_record(&r, "gpu-a", 64, 64);
    snprintf(r.prov.policy, sizeof r.prov.policy, "median-no-flush/0");
    EXPECT_OK(tuned__store_put_best(s, &r, &e), &e);
    EXPECT_RC(tuned__store_get_best(s, &r.key, &got, TUNED__MEASURE_POLICY, &e), TUNED_ENOTFOUND, &e);
    EXPECT_MSG(&e, "median-no-flush/0");
    EXPECT_MSG(&e, TUNED__MEASURE_POLICY);
    size_t n;
    EXPECT_OK(tuned__store_find_shape(s, 1, TUNED_FP16, 64, 64, &got, 1, &n, &e), &e);
    EXPECT(n == 1 && record_equal(&got, &r));
    snprintf(r.prov.policy, sizeof r.prov.policy, "%s", TUNED__MEASURE_POLICY);
    EXPECT_OK(tuned__store_put_best(s, &r, &e), &e);
    EXPECT_OK(tuned__store_get_best(s, &r.key, &got, TUNED__MEASURE_POLICY, &e), &e);
    tuned__store_close(s);
}

/* put_best_unless_better: a faster stored record of the policy stays; a
 * slower one, one of another policy and damage give way. */
static void test_put_unless_better(void)
{
    char path[4200];
    tuned__store *s = open_test_store(path, sizeof path, "unless-better", 0);
    if (s == NULL)
        return;
    tuned__err e = {0};
    tuned__record r, got;
    bool written;
    make_record(&r, "gpu-a", 64, 64);
    r.median_us = 10;
    EXPECT_OK(tuned__store_put_best_unless_better(s, &r, TUNED__MEASURE_POLICY, &written, &e), &e);
    EXPECT(written, "a first record was not written");
    tuned__record slower = r;
    slower.median_us = 12;
    EXPECT_OK(tuned__store_put_best_unless_better(s, &slower, TUNED__MEASURE_POLICY, &written,
                                                  &e), &e);
    EXPECT(!written, "a slower record replaced a faster one");
    tuned__record faster = r;
    faster.median_us = 9;
    EXPECT_OK(tuned__store_put_best_unless_better(s, &faster, TUNED__MEASURE_POLICY, &written,
                                                  &e), &e);
    EXPECT(written);
    EXPECT_OK(tuned__store_get_best(s, &r.key, &got, TUNED__MEASURE_POLICY, &e), &e);
    EXPECT(got.median_us == 9);
    /* A faster record of another policy is not served here: it gives way. */
    tuned__record other = r;
    other.median_us = 5;
    snprintf(other.prov.policy, sizeof other.prov.policy, "median-no-flush/0");
    EXPECT_OK(tuned__store_put_best(s, &other, &e), &e);
    EXPECT_OK(tuned__store_put_best_unless_better(s, &slower, TUNED__MEASURE_POLICY, &written,
                                                  &e), &e);
    EXPECT(written, "a record of another policy kept its place");
    /* Any policy (NULL): the times compare as they are. */
    EXPECT_OK(tuned__store_put_best(s, &other, &e), &e);
    EXPECT_OK(tuned__store_put_best_unless_better(s, &slower, NULL, &written, &e), &e);
    EXPECT(!written);
    tuned__store_close(s);
}

static void test_find_shape(void)
{
    char path[4200];
    tuned__store *s = open_test_store(path, sizeof path, "shape", 0);
    if (s == NULL)
        return;
    tuned__err e = {0};
    tuned__record a, b, other;
    make_record(&a, "gpu-a", 1024, 768);
    make_record(&b, "gpu-b", 1024, 768);
    EXPECT_OK(tuned__store_put_best(s, &a, &e), &e);
    EXPECT_OK(tuned__store_put_best(s, &b, &e), &e);
    /* Neighbours on each side of the shape, which must not be counted. */
    make_record(&other, "gpu-a", 1024, 767);
    EXPECT_OK(tuned__store_put_best(s, &other, &e), &e);
    make_record(&other, "gpu-c", 1024, 769);
    EXPECT_OK(tuned__store_put_best(s, &other, &e), &e);
    make_record(&other, "gpu-a", 1025, 768);
    EXPECT_OK(tuned__store_put_best(s, &other, &e), &e);
    make_record(&other, "gpu-a", 1024, 768);
    other.key.dtype = TUNED_FP32;
    EXPECT_OK(tuned__store_put_best(s, &other, &e), &e);

    enum { K = TUNED_KERNEL_SOFTMAX, D = TUNED_FP16 };
    tuned__record out[4];
    size_t n = 99;
    EXPECT_OK(tuned__store_find_shape(s, K, D, 1024, 768, out, 4, &n, &e), &e);
    EXPECT(n == 2);
    if (n == 2) {
        /* In key order, i.e. by fingerprint; each is one of ours. */
        EXPECT(out[0].key.gpu_fp < out[1].key.gpu_fp);
        int a_first = out[0].key.gpu_fp == a.key.gpu_fp;
        EXPECT(record_equal(&out[0], a_first ? &a : &b));
        EXPECT(record_equal(&out[1], a_first ? &b : &a));
    }
    /* Another layout of the same shape is a candidate too. */
    other = a;
    other.key.layout = 1;
    EXPECT_OK(tuned__store_put_best(s, &other, &e), &e);
    EXPECT_OK(tuned__store_find_shape(s, K, D, 1024, 768, out, 4, &n, &e), &e);
    EXPECT(n == 3);
    /* A short array: the count still says 3. */
    EXPECT_OK(tuned__store_find_shape(s, K, D, 1024, 768, out, 1, &n, &e), &e);
    EXPECT(n == 3);
    EXPECT_OK(tuned__store_find_shape(s, K, D, 1024, 768, NULL, 0, &n, &e), &e);
    EXPECT(n == 3);
    /* A shape nobody has, and one past every key. */
    EXPECT_OK(tuned__store_find_shape(s, K, D, 7, 7, out, 4, &n, &e), &e);
    EXPECT(n == 0);
    EXPECT_OK(tuned__store_find_shape(s, 255, 255, UINT64_MAX, UINT64_MAX, out, 4, &n, &e), &e);
    EXPECT(n == 0);
    tuned__store_close(s);
}

static void test_open_errors(void)
{
    tuned__err e = {0};
    tuned__store *s = (tuned__store *)&e; /* must be reset to NULL on failure */
    char path[4200];

    /* Read-only, nothing there. */
    dir_path(path, sizeof path, "missing/store");
    EXPECT_RC(tuned__store_open(&s, path, TUNED__STORE_READONLY, &e), TUNED_ENOTFOUND, &e);
    EXPECT(s == NULL);
    EXPECT_MSG(&e, path);
    struct stat st;
    EXPECT(stat(path, &st) != 0 && errno == ENOENT);

    /* Read-only, an empty directory: still nothing, and nothing written. */
    dir_path(path, sizeof path, "empty");
    EXPECT(mkdir(path, 0700) == 0);
    EXPECT_RC(tuned__store_open(&s, path, TUNED__STORE_READONLY, &e), TUNED_ENOTFOUND, &e);
    EXPECT_MSG(&e, path);
    char lock[4300];
    snprintf(lock, sizeof lock, "%s/lock.mdb", path);
    EXPECT(stat(lock, &st) != 0);

    /* A path under a regular file. */
    char file[2048];
    dir_path(file, sizeof file, "file");
    write_file(file, "", 0);
    snprintf(path, sizeof path, "%s/store", file);
    EXPECT_RC(tuned__store_open(&s, path, 0, &e), TUNED_ESTORE, &e);
    EXPECT(s == NULL);
    EXPECT_MSG(&e, path);
    EXPECT_MSG(&e, strerror(ENOTDIR));
    printf("  unwritable path says: %s\n", e.msg);
    snprintf(path, sizeof path, "%s/store/deeper", file);
    EXPECT_RC(tuned__store_open(&s, path, 0, &e), TUNED_ESTORE, &e);
    EXPECT_MSG(&e, path);
    EXPECT_RC(tuned__store_open(&s, file, 0, &e), TUNED_ESTORE, &e);
    EXPECT_MSG(&e, file);
    EXPECT_RC(tuned__store_open(&s, file, TUNED__STORE_READONLY, &e), TUNED_ESTORE, &e);
    EXPECT_MSG(&e, "not a directory");

    /* A directory we may not write (meaningless for root, who may). */
    if (geteuid() != 0) {
        dir_path(path, sizeof path, "locked");
        EXPECT(mkdir(path, 0500) == 0);
        EXPECT_RC(tuned__store_open(&s, path, 0, &e), TUNED_ESTORE, &e);
        EXPECT_MSG(&e, path);
        EXPECT_MSG(&e, "writable");
        printf("  unwritable directory says: %s\n", e.msg);
        chmod(path, 0700);
    } else {
        printf("  (running as root: the unwritable-directory case is skipped)\n");
    }

    /* Bad arguments. */
    EXPECT_RC(tuned__store_open(&s, "", 0, &e), TUNED_EINVAL, &e);
    dir_path(path, sizeof path, "flags");
    EXPECT_RC(tuned__store_open(&s, path, 0x80, &e), TUNED_EINVAL, &e);
}

/* Damaged store files: a clear error naming the path, never a crash. */
static void test_corrupt_files(void)
{
    tuned__err e = {0};
    tuned__store *s;
    char path[4200], data[4300];
    static const struct {
        const char *what;
        size_t size;
        int fill;
    } cases[] = {
        {"garbage", 16384, 0x5a},
        {"zeros", 16384, 0},
        {"one byte", 1, 'x'},
        {"empty data.mdb", 0, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char name[64];
        snprintf(name, sizeof name, "corrupt%zu", i);
        dir_path(path, sizeof path, name);
        EXPECT(mkdir(path, 0700) == 0);
        snprintf(data, sizeof data, "%s/data.mdb", path);
        char *buf = malloc(cases[i].size + 1);
        memset(buf, cases[i].fill, cases[i].size + 1);
        write_file(data, buf, cases[i].size);
        free(buf);
        for (int ro = 0; ro <= 1; ro++) {
            int rc = tuned__store_open(&s, path, ro ? TUNED__STORE_READONLY : 0, &e);
            if (cases[i].size == 0 && !ro) {
                /* An empty data file is a new store for LMDB: fine. */
                EXPECT_OK(rc, &e);
                tuned__store_close(s);
                continue;
            }
            if (rc == 0) {
                tuned__store_close(s);
                if (cases[i].size == 0)
                    continue; /* the writable open above made it a store */
                fprintf(stderr, "%s:%d: %s (%s) opened\n", __FILE__, __LINE__, cases[i].what,
                        ro ? "read-only" : "writable");
                failures++;
                continue;
            }
            EXPECT(rc == TUNED_ESTORE);
            EXPECT_MSG(&e, path);
            if (!ro)
                printf("  %s: %s\n", cases[i].what, e.msg);
        }
    }
}

static void test_schema(void)
{
    char path[4200];
    dir_path(path, sizeof path, "schema");
    tuned__err e = {0};
    tuned__store *s;
    EXPECT_OK(tuned__store_open(&s, path, 0, &e), &e);
    tuned__record r;
    make_record(&r, "gpu-a", 8, 8);
    if (s != NULL) {
        EXPECT_OK(tuned__store_put_best(s, &r, &e), &e);
        tuned__store_close(s);
    }

    /* A newer schema: refused, read-only or not, and left untouched. */
    EXPECT(raw_put(path, "meta", "schema", 6, "999", 3) == 0);
    EXPECT(raw_put(path, "meta", "writer", 6, "9.9.9", 5) == 0);
    EXPECT_RC(tuned__store_open(&s, path, 0, &e), TUNED_ESCHEMA, &e);
    EXPECT(s == NULL);
    EXPECT_MSG(&e, path);
    EXPECT_MSG(&e, "schema version 999");
    EXPECT_MSG(&e, "tuned 9.9.9");
    EXPECT_MSG(&e, "uses schema 2");
    printf("  schema mismatch says: %s\n", e.msg);
    EXPECT_RC(tuned__store_open(&s, path, TUNED__STORE_READONLY, &e), TUNED_ESCHEMA, &e);

    /* Schema 1 (the first whole path): the same clear refusal. */
    EXPECT(raw_put(path, "meta", "schema", 6, "1", 1) == 0);
    EXPECT(raw_put(path, "meta", "writer", 6, "0.1.0\x01", 6) == 0);
    EXPECT_RC(tuned__store_open(&s, path, 0, &e), TUNED_ESCHEMA, &e);
    EXPECT_MSG(&e, "schema version 1 (last written by tuned 0.1.0?)");

    EXPECT(raw_put(path, "meta", "schema", 6, "2x", 2) == 0);
    EXPECT_RC(tuned__store_open(&s, path, 0, &e), TUNED_ESTORE, &e);
    EXPECT_MSG(&e, "schema");
    EXPECT(raw_put(path, "meta", "schema", 6, "", 0) == 0);
    EXPECT_RC(tuned__store_open(&s, path, 0, &e), TUNED_ESTORE, &e);
    EXPECT(raw_put(path, "meta", "schema", 6, "99999999999999999999", 20) == 0);
    EXPECT_RC(tuned__store_open(&s, path, 0, &e), TUNED_ESTORE, &e);

    /* Back to ours: the record survived every refusal, and the writer's
     * version is recorded again. */
    EXPECT(raw_put(path, "meta", "schema", 6, "2", 1) == 0);
    EXPECT_OK(tuned__store_open(&s, path, 0, &e), &e);
    if (s != NULL) {
        tuned__record got;
        EXPECT_OK(tuned__store_get_best(s, &r.key, &got, TUNED__MEASURE_POLICY, &e), &e);
        tuned__store_close(s);
    }

    /* An LMDB environment without our dbs, opened read-only, is empty. */
    dir_path(path, sizeof path, "foreign");
    EXPECT(mkdir(path, 0700) == 0);
    EXPECT(raw_put(path, "other", "k", 1, "v", 1) == 0);
    EXPECT_OK(tuned__store_open(&s, path, TUNED__STORE_READONLY, &e), &e);
    if (s != NULL) {
        tuned__record got;
        EXPECT_RC(tuned__store_get_best(s, &r.key, &got, TUNED__MEASURE_POLICY, &e), TUNED_ENOTFOUND, &e);
        size_t n = 9;
        EXPECT_OK(tuned__store_find_shape(s, 1, 0, 1, 1, &got, 1, &n, &e), &e);
        EXPECT(n == 0);
        tuned__store_eval ev;
        EXPECT_OK(tuned__store_list_evals(s, &r.key, NULL, &ev, 1, &n, &e), &e);
        EXPECT(n == 0);
        void *blob;
        EXPECT_RC(tuned__store_get_cubin(s, 1, &blob, &n, &e), TUNED_ENOTFOUND, &e);
        tuned__store_close(s);
    }
}

static void test_malformed(void)
{
    char path[4200];
    tuned__store *s = open_test_store(path, sizeof path, "malformed", 0);
    tuned__store_close(s);
    tuned__err e = {0};

    tuned__record r, got;
    make_record(&r, "gpu-a", 64, 64);
    char *text;
    size_t len;
    EXPECT_OK(tuned__record_encode(&r, &text, &len, &e), &e);
    char good[4096];
    /* A valid record with a field a same-version writer may have added. */
    snprintf(good, sizeof good, "%.*s,\"future_field\":[1,2]}", (int)len - 1, text);
    free(text);

    struct {
        const char *what, *json, *needle;
        int want;
    } cases[] = {
        {"valid, with an unknown field", good, NULL, 0},
        {"garbage", "\x01\x02garbage{{", "invalid JSON", TUNED_ESTORE},
        {"empty", "", "invalid JSON", TUNED_ESTORE},
        {"wrong types", "{\"v\":2,\"kernel\":7}", "\"kernel\"", TUNED_ESTORE},
        {"a string number", NULL, "\"median_us\"", TUNED_ESTORE},
        {"a missing field", "{\"v\":2,\"kernel\":\"softmax\",\"dtype\":\"fp16\"}", "\"rows\"",
         TUNED_ESTORE},
        {"a newer version", "{\"v\":3,\"kernel\":1}", "version 3", TUNED_ESCHEMA},
        {"a too-long string", NULL, "\"config\"", TUNED_ESTORE},
        {"another key's record", NULL, "another key", TUNED_ESTORE},
        {"evaluations past u32", NULL, "\"evaluations\"", TUNED_ESTORE},
        {"identity not matching its fingerprint", NULL, "fingerprint", TUNED_ESTORE},
    };
    char strnum[4096], toolong[4096], otherkey[4096], evals[4096], fp[4096];
    char longcfg[140];
    memset(longcfg, 'x', 130);
    longcfg[0] = longcfg[129] = '"';
    longcfg[130] = '\0';
    with_field(strnum, sizeof strnum, good, "median_us", "\"1\"");
    with_field(toolong, sizeof toolong, good, "config", longcfg);
    with_field(otherkey, sizeof otherkey, good, "rows", "65");
    with_field(evals, sizeof evals, good, "evaluations", "4294967296");
    with_field(fp, sizeof fp, good, "gpu", "\"gpu-b\"");
    cases[4].json = strnum;
    cases[7].json = toolong;
    cases[8].json = otherkey;
    cases[9].json = evals;
    cases[10].json = fp;

    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        raw_put_record(path, &r.key, cases[i].json);
        EXPECT_OK(tuned__store_open(&s, path, 0, &e), &e);
        if (s == NULL)
            continue;
        tuned__err_clear(&e);
        int rc = tuned__store_get_best(s, &r.key, &got, TUNED__MEASURE_POLICY, &e);
        EXPECT(rc == cases[i].want, "malformed case \"%s\": get returned %d, expected %d: %s",
               cases[i].what, rc, cases[i].want, e.msg);
        if (cases[i].needle != NULL) {
            EXPECT_MSG(&e, cases[i].needle);
            EXPECT_MSG(&e, path);
            size_t n;
            EXPECT_RC(tuned__store_find_shape(s, 1, 0, 64, 64, &got, 1, &n, &e), cases[i].want, &e);
            printf("  %s: %s\n", cases[i].what, e.msg);
        } else {
            EXPECT(record_equal(&got, &r));
        }
        tuned__store_close(s);
    }

    /* A key of the wrong length in "best" is found by the shape scan
     * (after the good record, which sorts first). */
    raw_put_record(path, &r.key, good);
    uint8_t kb[TUNED__KEY_LEN + 1];
    tuned__key_encode(kb, TUNED__KEY_TAG_BEST, &r.key);
    kb[TUNED__KEY_LEN] = 0;
    EXPECT(raw_put(path, "best", kb, sizeof kb, good, strlen(good)) == 0);
    EXPECT_OK(tuned__store_open(&s, path, 0, &e), &e);
    if (s != NULL) {
        size_t n;
        EXPECT_RC(tuned__store_find_shape(s, 1, 0, 64, 64, &got, 1, &n, &e), TUNED_ESTORE, &e);
        EXPECT_MSG(&e, "29 bytes");
        tuned__store_close(s);
    }
}

/* ---- history ---- */

static void test_history(void)
{
    char path[4200];
    tuned__store *s = open_test_store(path, sizeof path, "history", 0);
    if (s == NULL)
        return;
    tuned__err e = {0};
    tuned__record r, other;
    make_record(&r, "gpu-a", 4096, 32000);
    make_record(&other, "gpu-b", 4096, 32000);

    /* 250 entries in one transaction, plus neighbours of other groups. */
    enum { N = 250 };
    tuned__store_eval *evs = calloc(N, sizeof *evs);
    for (int i = 0; i < N; i++) {
        char cfg[32];
        snprintf(cfg, sizeof cfg, "w%03d.r1", i);
        make_eval(&evs[i], &r.key, cfg, 100.0 + i);
        if (i % 5 == 1) {
            evs[i].status = TUNED__HIST_COMPILE_ERROR;
            evs[i].median_us = evs[i].p20_us = evs[i].p80_us = 0;
            snprintf(evs[i].detail, sizeof evs[i].detail, "nvrtc: error: \"quoted\"\n line %d", i);
        }
        if (i % 7 == 3) {
            evs[i].status = TUNED__HIST_TIMEOUT;
            evs[i].median_us = evs[i].p20_us = evs[i].p80_us = 0;
        }
    }
    EXPECT_OK(tuned__store_put_evals(s, evs, N, &e), &e);
    tuned__store_eval ev;
    make_eval(&ev, &other.key, "w001.r1", 5);
    EXPECT_OK(tuned__store_put_eval(s, &ev, &e), &e);
    tuned__store_key k2 = r.key;
    k2.layout = 1;
    make_eval(&ev, &k2, "a", 5);
    EXPECT_OK(tuned__store_put_eval(s, &ev, &e), &e);

    /* Resume-style listing in pages of 64: every entry once, in order. */
    tuned__store_eval page[64];
    char after[128] = "";
    int seen = 0, pages = 0;
    for (;;) {
        size_t n;
        EXPECT_OK(tuned__store_list_evals(s, &r.key, after, page, 64, &n, &e), &e);
        pages++;
        for (size_t i = 0; i < n; i++, seen++) {
            tuned__store_eval *want = &evs[seen < N ? seen : 0];
            if (seen >= N || strcmp(page[i].config, want->config) != 0 ||
                page[i].status != want->status || page[i].median_us != want->median_us ||
                page[i].p20_us != want->p20_us || page[i].compile_ms != want->compile_ms ||
                strcmp(page[i].detail, want->detail) != 0 || page[i].key.rows != 4096 ||
                page[i].key.gpu_fp != r.key.gpu_fp) {
                fprintf(stderr, "%s:%d: entry %d differs (%s)\n", __FILE__, __LINE__, seen,
                        page[i].config);
                failures++;
                break;
            }
        }
        if (n < 64 || pages > 10)
            break;
        snprintf(after, sizeof after, "%s", page[n - 1].config);
    }
    EXPECT(seen == N && pages == 4);

    /* The latest evaluation of a config wins. */
    make_eval(&ev, &r.key, "w000.r1", 42);
    EXPECT_OK(tuned__store_put_eval(s, &ev, &e), &e);
    size_t n;
    EXPECT_OK(tuned__store_list_evals(s, &r.key, NULL, page, 1, &n, &e), &e);
    EXPECT(n == 1 && page[0].median_us == 42);

    /* Bad entries are refused whole: nothing of the batch is written. */
    tuned__store_eval badv[2];
    make_eval(&badv[0], &r.key, "zzz-new", 1);
    make_eval(&badv[1], &r.key, "bad config", 1);
    EXPECT_RC(tuned__store_put_evals(s, badv, 2, &e), TUNED_EINVAL, &e);
    EXPECT_MSG(&e, "config");
    make_eval(&badv[1], &r.key, "zzz2", 0);
    EXPECT_RC(tuned__store_put_evals(s, badv, 2, &e), TUNED_EINVAL, &e);
    EXPECT_MSG(&e, "median_us > 0");
    make_eval(&badv[1], &r.key, "zzz2", 1);
    badv[1].status = 17;
    EXPECT_RC(tuned__store_put_evals(s, badv, 2, &e), TUNED_EINVAL, &e);
    badv[1].status = TUNED__HIST_OK;
    snprintf(badv[1].date, sizeof badv[1].date, "2026-13-01T00:00:00Z");
    EXPECT_RC(tuned__store_put_evals(s, badv, 2, &e), TUNED_EINVAL, &e);
    badv[1].median_us = INFINITY;
    EXPECT_RC(tuned__store_put_evals(s, badv, 2, &e), TUNED_EINVAL, &e);
    EXPECT_OK(tuned__store_list_evals(s, &r.key, "zz", page, 4, &n, &e), &e);
    EXPECT(n == 0);
    EXPECT_RC(tuned__store_list_evals(s, &r.key, "a b", page, 4, &n, &e), TUNED_EINVAL, &e);
    EXPECT_RC(tuned__store_list_evals(s, &r.key, NULL, page, 0, &n, &e), TUNED_EINVAL, &e);

    /* A damaged value, or one of another version, is skipped: the entries
     * around it are listed. */
    uint8_t hk[TUNED__KEY_HIST_MAX];
    size_t hn;
    EXPECT_OK(tuned__key_encode_hist(hk, &other.key, "w002.r1", &hn, &e), &e);
    const char *maybe = "{\"v\":1,\"status\":\"maybe\",\"median_us\":0,\"p20_us\":0,"
                        "\"p80_us\":0,\"compile_ms\":0,\"date\":\"2026-11-21T10:00:00Z\","
                        "\"detail\":\"\"}";
    raw_put_open(&s, path, "history", hk, hn, maybe, strlen(maybe));
    size_t before;
    EXPECT_OK(tuned__store_list_evals(s, &other.key, NULL, page, 4, &before, &e), &e);
    EXPECT(before == 1 && strcmp(page[0].config, "w001.r1") == 0, "listed %zu around a damaged entry", before);
    for (size_t i = 0; i < before; i++)
        EXPECT(strcmp(page[i].config, "w002.r1") != 0, "a damaged entry was listed");
    raw_put_open(&s, path, "history", hk, hn, "{\"v\":9}", 7);
    EXPECT_OK(tuned__store_list_evals(s, &other.key, NULL, page, 4, &n, &e), &e);
    EXPECT(n == before, "a newer version's entry: listed %zu, %zu around it", n, before);
    for (int i = 0; i < TUNED__HIST_COUNT; i++)
        EXPECT(tuned__hist_status_name(i) != NULL);
    EXPECT(tuned__hist_status_name(TUNED__HIST_COUNT) == NULL);
    free(evs);
    tuned__store_close(s);
}

/* ---- compile cache ---- */

static void test_cubins(void)
{
    char path[4200];
    tuned__store *s = open_test_store(path, sizeof path, "cubins", 64 << 10);
    if (s == NULL)
        return;
    tuned__err e = {0};
    /* Blobs of awkward sizes, one bigger than the whole initial map. */
    static const size_t sizes[] = {1, 4095, 4096, 4097, 300000};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        unsigned char *blob = malloc(sizes[i]);
        for (size_t j = 0; j < sizes[i]; j++)
            blob[j] = (unsigned char)(j * 31 + i);
        EXPECT_OK(tuned__store_put_cubin(s, 1000 + i, blob, sizes[i], &e), &e);
        void *got;
        size_t n;
        EXPECT_OK(tuned__store_get_cubin(s, 1000 + i, &got, &n, &e), &e);
        EXPECT(n == sizes[i] && got != NULL && memcmp(got, blob, n) == 0);
        free(got);
        free(blob);
    }
    void *got = (void *)&e;
    size_t n = 7;
    EXPECT_RC(tuned__store_get_cubin(s, 42, &got, &n, &e), TUNED_ENOTFOUND, &e);
    EXPECT(got == NULL && n == 0);
    EXPECT_RC(tuned__store_put_cubin(s, 42, "x", 0, &e), TUNED_EINVAL, &e);
    EXPECT_RC(tuned__store_put_cubin(s, 42, NULL, 1, &e), TUNED_EINVAL, &e);
    EXPECT_RC(tuned__store_put_cubin(s, 42, "x", TUNED__CUBIN_MAX + 1, &e), TUNED_EINVAL, &e);

    /* Damage: a flipped byte, a short value, another version. */
    uint8_t k[TUNED__KEY_CUBIN_LEN];
    tuned__key_encode_cubin(k, 1001);
    uint8_t v[32 + 8] = {1};
    v[23] = 8; /* size 8 */
    memcpy(v + 32, "abcdefgh", 8);
    raw_put_open(&s, path, "cubins", k, sizeof k, v, sizeof v);
    EXPECT_RC(tuned__store_get_cubin(s, 1001, &got, &n, &e), TUNED_ESTORE, &e);
    EXPECT_MSG(&e, "checksum");
    EXPECT_MSG(&e, path);
    raw_put_open(&s, path, "cubins", k, sizeof k, v, 20);
    EXPECT_RC(tuned__store_get_cubin(s, 1001, &got, &n, &e), TUNED_ESTORE, &e);
    v[0] = 2;
    raw_put_open(&s, path, "cubins", k, sizeof k, v, sizeof v);
    EXPECT_RC(tuned__store_get_cubin(s, 1001, &got, &n, &e), TUNED_ESTORE, &e);
    EXPECT_MSG(&e, "version 2");
    v[0] = 1;
    v[23] = 9;
    raw_put_open(&s, path, "cubins", k, sizeof k, v, sizeof v);
    EXPECT_RC(tuned__store_get_cubin(s, 1001, &got, &n, &e), TUNED_ESTORE, &e);
    tuned__store_close(s);
}

/* ---- maintenance ---- */

typedef struct collect {
    int n, damaged;
    char names[16][64];
} collect;

static int collect_fn(void *ctx, const tuned__store_key *key, const tuned__record *r,
                      const char *damage)
{
    (void)key;
    collect *c = ctx;
    if (r == NULL) {
        c->damaged++;
        EXPECT(damage != NULL && damage[0] != '\0');
        return 0;
    }
    if (c->n < 16)
        snprintf(c->names[c->n], sizeof c->names[0], "%s", r->gpu_name);
    c->n++;
    return 0;
}

static int count_scan(void *ctx, const tuned__record *r)
{
    (void)r;
    (*(int *)ctx)++;
    return 0;
}

static void test_each_forget(void)
{
    char path[4200];
    tuned__store *s = open_test_store(path, sizeof path, "forget", 0);
    if (s == NULL)
        return;
    tuned__err e = {0};
    /* 3 GPUs x 2 shapes x 2 dtypes. */
    static const char *const names[] = {"NVIDIA H100 80GB HBM3", "NVIDIA H200", "NVIDIA A100"};
    for (int g = 0; g < 3; g++)
        for (int sh = 0; sh < 2; sh++)
            for (int dt = 0; dt < 2; dt++) {
                tuned__record r;
                char id[64];
                snprintf(id, sizeof id, "%s|id", names[g]);
                make_record(&r, id, 1024, sh ? 4096 : 2048);
                snprintf(r.gpu_name, sizeof r.gpu_name, "%s", names[g]);
                r.key.dtype = (uint8_t)(dt ? TUNED_BF16 : TUNED_FP16);
                EXPECT_OK(tuned__store_put_best(s, &r, &e), &e);
            }
    uint64_t txn0, txn1;
    EXPECT_OK(tuned__store_txnid(s, &txn0, &e), &e);

    collect c = {0};
    tuned__store_filter all = {0};
    EXPECT_OK(tuned__store_each_best(s, &all, collect_fn, &c, &e), &e);
    EXPECT(c.n == 12 && c.damaged == 0);
    int scanned = 0;
    size_t skipped;
    EXPECT_OK(tuned__store_scan(s, count_scan, &scanned, &skipped, &e), &e);
    EXPECT(scanned == 12 && skipped == 0);

    tuned__store_filter f = {.gpu = "h200"};
    memset(&c, 0, sizeof c);
    EXPECT_OK(tuned__store_each_best(s, &f, collect_fn, &c, &e), &e);
    EXPECT(c.n == 4 && strcmp(c.names[0], "NVIDIA H200") == 0);
    f = (tuned__store_filter){.gpu = "H1", .have_shape = true, .rows = 1024, .cols = 4096,
                              .have_dtype = true, .dtype = TUNED_BF16};
    memset(&c, 0, sizeof c);
    EXPECT_OK(tuned__store_each_best(s, &f, collect_fn, &c, &e), &e);
    EXPECT(c.n == 1 && strcmp(c.names[0], "NVIDIA H100 80GB HBM3") == 0);
    /* By fingerprint. */
    char fp[17];
    snprintf(fp, sizeof fp, "%016" PRIx64, tuned__store_gpu_fingerprint("NVIDIA A100|id"));
    f = (tuned__store_filter){.gpu = fp};
    memset(&c, 0, sizeof c);
    EXPECT_OK(tuned__store_each_best(s, &f, collect_fn, &c, &e), &e);
    EXPECT(c.n == 4 && strcmp(c.names[0], "NVIDIA A100") == 0);

    /* A damaged value is reported, not skipped silently. */
    tuned__record d;
    make_record(&d, "broken", 5, 5);
    uint8_t kb[TUNED__KEY_LEN];
    tuned__key_encode(kb, TUNED__KEY_TAG_BEST, &d.key);
    raw_put_open(&s, path, "best", kb, sizeof kb, "{oops", 5);
    memset(&c, 0, sizeof c);
    EXPECT_OK(tuned__store_each_best(s, &all, collect_fn, &c, &e), &e);
    EXPECT(c.n == 12 && c.damaged == 1);
    scanned = 0;
    EXPECT_OK(tuned__store_scan(s, count_scan, &scanned, &skipped, &e), &e);
    EXPECT(scanned == 12 && skipped == 1);

    /* A dry run removes nothing; a real one what it listed. */
    size_t removed;
    f = (tuned__store_filter){.gpu = "H200"};
    EXPECT_OK(tuned__store_forget(s, &f, true, NULL, NULL, &removed, &e), &e);
    EXPECT(removed == 4);
    memset(&c, 0, sizeof c);
    EXPECT_OK(tuned__store_each_best(s, &all, collect_fn, &c, &e), &e);
    EXPECT(c.n == 12);
    memset(&c, 0, sizeof c);
    EXPECT_OK(tuned__store_forget(s, &f, false, collect_fn, &c, &removed, &e), &e);
    EXPECT(removed == 4 && c.n == 4);
    EXPECT_OK(tuned__store_txnid(s, &txn1, &e), &e);
    EXPECT(txn1 > txn0);
    memset(&c, 0, sizeof c);
    EXPECT_OK(tuned__store_each_best(s, &all, collect_fn, &c, &e), &e);
    EXPECT(c.n == 8 && c.damaged == 1);
    /* The damaged record goes by its shape. */
    f = (tuned__store_filter){.have_shape = true, .rows = 5, .cols = 5};
    EXPECT_OK(tuned__store_forget(s, &f, false, NULL, NULL, &removed, &e), &e);
    EXPECT(removed == 1);
    /* By key. */
    tuned__record one;
    make_record(&one, "NVIDIA A100|id", 1024, 2048);
    EXPECT_OK(tuned__store_forget_key(s, &one.key, &e), &e);
    EXPECT_RC(tuned__store_forget_key(s, &one.key, &e), TUNED_ENOTFOUND, &e);
    memset(&c, 0, sizeof c);
    EXPECT_OK(tuned__store_each_best(s, &all, collect_fn, &c, &e), &e);
    EXPECT(c.n == 7 && c.damaged == 0);
    tuned__store_close(s);
}

static void test_gc(void)
{
    char path[4200];
    tuned__store *s = open_test_store(path, sizeof path, "gc", 0);
    if (s == NULL)
        return;
    tuned__err e = {0};
    /* A tuned shape (best w010) and an interrupted one (no best); 300
     * entries each, so deletes cross pages. */
    tuned__record r, lone;
    make_record(&r, "gpu-a", 512, 512);
    snprintf(r.config, sizeof r.config, "w010");
    r.cubin = 7;
    EXPECT_OK(tuned__store_put_best(s, &r, &e), &e);
    make_record(&lone, "gpu-a", 512, 1024);
    enum { N = 300 };
    tuned__store_eval *evs = calloc(2 * N, sizeof *evs);
    for (int i = 0; i < N; i++) {
        char cfg[16];
        snprintf(cfg, sizeof cfg, "w%03d", i);
        make_eval(&evs[i], &r.key, cfg, 10 + i);
        make_eval(&evs[N + i], &lone.key, cfg, 10 + i);
    }
    EXPECT_OK(tuned__store_put_evals(s, evs, 2 * N, &e), &e);
    for (uint64_t h = 1; h <= 10; h++)
        EXPECT_OK(tuned__store_put_cubin(s, h, "cubin", 5, &e), &e);
    /* Damage in both. */
    uint8_t hk[TUNED__KEY_HIST_MAX];
    size_t hn;
    EXPECT_OK(tuned__key_encode_hist(hk, &lone.key, "zzz", &hn, &e), &e);
    raw_put_open(&s, path, "history", hk, hn, "nope", 4);
    /* A newer tuned's entry is not damage: kept. */
    EXPECT_OK(tuned__key_encode_hist(hk, &lone.key, "zzz-newer", &hn, &e), &e);
    raw_put_open(&s, path, "history", hk, hn, "{\"v\":9}", 7);
    uint8_t ck[TUNED__KEY_CUBIN_LEN];
    tuned__key_encode_cubin(ck, 99);
    raw_put_open(&s, path, "cubins", ck, sizeof ck, "short", 5);

    time_t entries = 1795255200; /* 2026-11-21T10:00:00Z, the entries' date */
    tuned__gc_stats st;
    /* Young entries stay. */
    EXPECT_OK(tuned__store_gc(s, 30, entries + 86400, false, &st, &e), &e);
    EXPECT(st.evals_removed == 0 && st.evals_kept == 2 * N + 1 && st.damaged_removed == 2);
    EXPECT(st.cubins_kept == 10 && st.cubins_removed == 0);
    /* A dry run of the real sweep: counts, no change. */
    EXPECT_OK(tuned__store_gc(s, 30, entries + 40 * 86400, true, &st, &e), &e);
    EXPECT(st.evals_removed == 2 * N - 1 && st.evals_kept == 2);
    tuned__store_eval page[4];
    size_t n;
    EXPECT_OK(tuned__store_list_evals(s, &lone.key, NULL, page, 4, &n, &e), &e);
    EXPECT(n == 4);
    /* Old ones go, except what a best record uses (history of its config;
     * cubins: gc's "now" is 40 days after they were made, a month later). */
    time_t cub_now = (time(NULL) > entries ? time(NULL) : entries) + 40 * 86400;
    EXPECT_OK(tuned__store_gc(s, 30, cub_now, false, &st, &e), &e);
    EXPECT(st.evals_removed == 2 * N - 1 && st.evals_kept == 2 && st.damaged_removed == 0);
    EXPECT(st.cubins_removed == 9 && st.cubins_kept == 1 && st.cubin_bytes_removed == 45);
    EXPECT_OK(tuned__store_list_evals(s, &r.key, NULL, page, 4, &n, &e), &e);
    EXPECT(n == 1 && strcmp(page[0].config, "w010") == 0);
    EXPECT_OK(tuned__store_list_evals(s, &lone.key, NULL, page, 4, &n, &e), &e);
    EXPECT(n == 0);
    void *blob;
    EXPECT_OK(tuned__store_get_cubin(s, 7, &blob, &n, &e), &e);
    free(blob);
    EXPECT_RC(tuned__store_get_cubin(s, 3, &blob, &n, &e), TUNED_ENOTFOUND, &e);
    /* --days 0: every unused one, whatever its age. */
    EXPECT_OK(tuned__store_put_cubin(s, 11, "new", 3, &e), &e);
    EXPECT_OK(tuned__store_gc(s, 0, time(NULL), false, &st, &e), &e);
    EXPECT(st.cubins_removed == 1 && st.cubins_kept == 1);
    EXPECT_RC(tuned__store_gc(s, -1, time(NULL), false, &st, &e), TUNED_EINVAL, &e);
    EXPECT_RC(tuned__store_gc(s, NAN, time(NULL), false, &st, &e), TUNED_EINVAL, &e);
    free(evs);
    tuned__store_close(s);
}

/* Many records into a 64 KiB map: MDB_MAP_FULL, grow, retry, many times. */
static void test_map_growth(void)
{
    char path[4200];
    tuned__store *s = open_test_store(path, sizeof path, "tiny", 64 << 10);
    if (s == NULL)
        return;
    tuned__err e = {0};
    enum { N = 2000 };
    tuned__record r, got;
    make_record(&r, "gpu-a", 1, 4096);
    for (uint64_t i = 0; i < N; i++) {
        r.key.rows = i + 1;
        r.evaluations = (uint32_t)i;
        int rc = tuned__store_put_best(s, &r, &e);
        if (rc != 0) {
            fprintf(stderr, "%s:%d: put %" PRIu64 " failed: %s\n", __FILE__, __LINE__, i, e.msg);
            failures++;
            break;
        }
    }
    tuned__store_close(s);

    /* A big batch of history in one transaction that alone overflows a
     * fresh tiny map: the whole batch is retried after the grow. */
    char path2[4200];
    dir_path(path2, sizeof path2, "tiny-batch");
    EXPECT_OK(tuned__store_open_mapsize(&s, path2, 0, 64 << 10, &e), &e);
    if (s != NULL) {
        tuned__store_eval *evs = calloc(3000, sizeof *evs);
        for (int i = 0; i < 3000; i++) {
            char cfg[16];
            snprintf(cfg, sizeof cfg, "c%04d", i);
            make_eval(&evs[i], &r.key, cfg, 1 + i);
        }
        size_t before = tuned__store_mapsize(s);
        EXPECT_OK(tuned__store_put_evals(s, evs, 3000, &e), &e);
        EXPECT(tuned__store_mapsize(s) >= 8 * before);
        tuned__store_eval last;
        size_t n;
        EXPECT_OK(tuned__store_list_evals(s, &r.key, "c2998", &last, 1, &n, &e), &e);
        EXPECT(n == 1 && strcmp(last.config, "c2999") == 0);
        free(evs);
        tuned__store_close(s);
    }

    char data[4300];
    snprintf(data, sizeof data, "%s/data.mdb", path);
    struct stat st;
    EXPECT(stat(data, &st) == 0 && st.st_size > (64 << 10));
    printf("  %d records in a map that started at 64 KiB: data.mdb is %lld KiB\n", N,
           (long long)st.st_size / 1024);

    /* Reopened with the tiny map again: the store keeps its grown size. */
    EXPECT_OK(tuned__store_open_mapsize(&s, path, TUNED__STORE_READONLY, 64 << 10, &e), &e);
    if (s == NULL)
        return;
    for (uint64_t i = 0; i < N; i += 97) {
        r.key.rows = i + 1;
        EXPECT_OK(tuned__store_get_best(s, &r.key, &got, TUNED__MEASURE_POLICY, &e), &e);
        EXPECT(got.evaluations == i);
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
    make_record(&r, gpu, 1, 128);
    for (int i = 0; i < PER_THREAD && !w->failed; i++) {
        r.key.rows = (uint64_t)i + 1;
        r.evaluations = (uint32_t)(w->id * 100000 + i);
        tuned__store_eval ev;
        make_eval(&ev, &r.key, "w1", 1 + i);
        if (tuned__store_put_best(w->s, &r, &w->e) != 0
            || tuned__store_get_best(w->s, &r.key, &got, TUNED__MEASURE_POLICY, &w->e) != 0
            || got.evaluations != r.evaluations
            || tuned__store_put_eval(w->s, &ev, &w->e) != 0)
            w->failed = 1;
    }
    return NULL;
}

static void test_threads(void)
{
    char path[4200];
    tuned__store *s = open_test_store(path, sizeof path, "threads", 64 << 10);
    if (s == NULL)
        return;
    tuned__err e = {0};
    worker w[THREADS];
    pthread_t th[THREADS];
    for (int i = 0; i < THREADS; i++) {
        w[i] = (worker){.s = s, .id = i};
        EXPECT(pthread_create(&th[i], NULL, work, &w[i]) == 0);
    }
    for (int i = 0; i < THREADS; i++) {
        EXPECT(pthread_join(th[i], NULL) == 0);
        EXPECT(!w[i].failed, "thread %d failed: %s", i, w[i].e.msg);
    }
    size_t n;
    tuned__record out[THREADS];
    EXPECT_OK(tuned__store_find_shape(s, 1, 0, PER_THREAD, 128, out, THREADS, &n, &e), &e);
    EXPECT(n == THREADS);
    tuned__store_close(s);
}

int main(int argc, char **argv)
{
    (void)argc;
    static const test_case tests[] = {
        {"key encoding", test_key},
        {"gpu fingerprint", test_fingerprint},
        {"record json and checks", test_record_json},
        {"provenance: exact or not", test_exact},
        {"put/get round-trip, reopen, read-only", test_roundtrip},
        {"only this build's policy is served", test_policy},
        {"put unless better", test_put_unless_better},
        {"find_shape", test_find_shape},
        {"open errors", test_open_errors},
        {"damaged store files", test_corrupt_files},
        {"schema", test_schema},
        {"malformed values", test_malformed},
        {"history", test_history},
        {"compile cache", test_cubins},
        {"each / scan / forget", test_each_forget},
        {"gc", test_gc},
        {"map growth", test_map_growth},
        {"threads", test_threads},
    };
    return run_tests(argv[0] && strrchr(argv[0], '/') ? strrchr(argv[0], '/') + 1 : "test_store",
                     tests, sizeof tests / sizeof tests[0]);
}
