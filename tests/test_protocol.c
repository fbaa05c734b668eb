/* test_protocol.c: the daemon's request parser, reply writer and index,
 * without a daemon (suite 'unit').
 *
 * Every class of malformed input gets the error code the protocol names
 * (docs/protocol.md): not JSON, not an object, no op, unknown op, unknown
 * field, missing field, wrong type, out-of-range values (zero, negative,
 * over 2^31 per row, too many bytes), duplicate keys, NUL bytes, invalid
 * UTF-8, overlong ids. Replies must always be one line of valid JSON,
 * whatever bytes went into them. The index: exact lookup, nearest (only
 * configs valid for the asked shape), the memo, identity parsing. Exit 0
 * when everything passed; each failed check prints its line. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "src/daemon/index.h"
#include "src/daemon/protocol.h"
#include "src/tuner/space.h"
#include "tuned.h"
#include "src/tuner/policy.h"
#include "tests/store_testlib.h"

/* Parses line; checks the error code name (NULL: success). */
static void expect(const char *line, const char *code)
{
    tuned__request r;
    tuned__proto_error pe;
    int rc = tuned__proto_parse(line, strlen(line), &r, &pe);
    const char *got = rc == 0 ? NULL : tuned__perr_name(pe.code);
    bool ok = (code == NULL && got == NULL) || (code != NULL && got != NULL && strcmp(code, got) == 0);
    EXPECT(ok, "%s -> %s (%s), expected %s", line, got ? got : "ok", pe.message,
           code ? code : "ok");
    EXPECT(rc == 0 || pe.message[0] != '\0', "%s: error without a message", line);
}

static void expect_n(const char *line, size_t n, const char *code)
{
    tuned__request r;
    tuned__proto_error pe;
    int rc = tuned__proto_parse(line, n, &r, &pe);
    EXPECT(rc != 0 && strcmp(tuned__perr_name(pe.code), code) == 0, "%zu bytes -> %s, expected %s",
           n, rc == 0 ? "ok" : tuned__perr_name(pe.code), code);
}

static void test_malformed(void)
{
    /* not JSON */
    expect("", "bad_json");
    expect("{", "bad_json");
    expect("{\"op\":\"ping\"} x", "bad_json");
    expect("{'op':'ping'}", "bad_json");
    expect("{\"op\":\"ping\",\"op\":\"ping\"}", "bad_json");          /* duplicate key */
    expect("{\"op\":\"get\",\"rows\":99999999999999999999,\"cols\":1}", "bad_json");
    expect("{\"op\":\"ping\",\"id\":\"a\\u0000b\"}", "bad_json");      /* NUL in a string */
    expect("{\"op\":\"ping\",\"id\":\"\xff\xfe\"}", "bad_json");        /* not UTF-8 */
    expect_n("{\"op\":\"ping\"}\0garbage", 22, "bad_json");            /* a NUL byte */
    /* not a request */
    expect("[]", "bad_request");
    expect("42", "bad_request");
    expect("\"ping\"", "bad_request");
    expect("null", "bad_request");
    expect("{}", "bad_request");
    expect("{\"op\":1}", "bad_request");
    expect("{\"op\":null}", "bad_request");
    expect("{\"op\":\"nope\"}", "unknown_op");
    expect("{\"op\":\"PING\"}", "unknown_op");
    expect("{\"op\":\"pingx\"}", "unknown_op");
    /* fields */
    expect("{\"op\":\"ping\",\"x\":1}", "unknown_field");
    expect("{\"op\":\"get\",\"rows\":1,\"cols\":1,\"budget\":5}", "unknown_field");
    expect("{\"op\":\"tune\",\"rows\":1,\"cols\":1,\"tune_if_missing\":true}", "unknown_field");
    expect("{\"op\":\"stats\",\"rows\":1}", "unknown_field");
    expect("{\"op\":\"get\"}", "missing_field");
    expect("{\"op\":\"get\",\"rows\":1}", "missing_field");
    expect("{\"op\":\"tune\",\"cols\":1}", "missing_field");
    expect("{\"op\":\"job\"}", "missing_field");
    /* types */
    expect("{\"op\":\"get\",\"rows\":\"1\",\"cols\":1}", "bad_type");
    expect("{\"op\":\"get\",\"rows\":1.5,\"cols\":1}", "bad_type");
    expect("{\"op\":\"get\",\"rows\":1.0,\"cols\":1}", "bad_type");
    expect("{\"op\":\"get\",\"rows\":true,\"cols\":1}", "bad_type");
    expect("{\"op\":\"get\",\"rows\":[1],\"cols\":1}", "bad_type");
    expect("{\"op\":\"get\",\"rows\":1,\"cols\":1,\"dtype\":5}", "bad_type");
    expect("{\"op\":\"get\",\"rows\":1,\"cols\":1,\"kernel\":{}}", "bad_type");
    expect("{\"op\":\"get\",\"rows\":1,\"cols\":1,\"gpu\":true}", "bad_type");
    expect("{\"op\":\"get\",\"rows\":1,\"cols\":1,\"tune_if_missing\":\"yes\"}", "bad_type");
    expect("{\"op\":\"tune\",\"rows\":1,\"cols\":1,\"time_s\":\"1\"}", "bad_type");
    expect("{\"op\":\"job\",\"job\":\"1\"}", "bad_type");
    expect("{\"op\":\"ping\",\"id\":{}}", "bad_type");
    expect("{\"op\":\"ping\",\"id\":1.5}", "bad_type");
    char longid[200];
    snprintf(longid, sizeof longid, "{\"op\":\"ping\",\"id\":\"%065d\"}", 0);
    expect(longid, "bad_type");
    /* values */
    expect("{\"op\":\"get\",\"rows\":0,\"cols\":1}", "bad_value");
    expect("{\"op\":\"get\",\"rows\":-1,\"cols\":1}", "bad_value");
    expect("{\"op\":\"get\",\"rows\":1,\"cols\":0}", "bad_value");
    expect("{\"op\":\"get\",\"rows\":1,\"cols\":-5}", "bad_value");
    expect("{\"op\":\"get\",\"rows\":2147483648,\"cols\":1}", "bad_value");    /* > 2^31-1 */
    expect("{\"op\":\"get\",\"rows\":1,\"cols\":2147483648}", "bad_value");    /* 2^31 per row */
    expect("{\"op\":\"get\",\"rows\":1,\"cols\":9223372036854775807}", "bad_value");
    expect("{\"op\":\"get\",\"rows\":1,\"cols\":1,\"dtype\":\"fp8\"}", "bad_value");
    expect("{\"op\":\"get\",\"rows\":1,\"cols\":1,\"kernel\":\"gemm\"}", "bad_value");
    expect("{\"op\":\"get\",\"rows\":1,\"cols\":1,\"gpu\":\"\"}", "bad_value");
    expect("{\"op\":\"get\",\"rows\":1,\"cols\":1,\"gpu\":-1}", "bad_value");
    expect("{\"op\":\"get\",\"rows\":1,\"cols\":1,\"gpu\":1024}", "bad_value");
    char longgpu[300];
    snprintf(longgpu, sizeof longgpu, "{\"op\":\"get\",\"rows\":1,\"cols\":1,\"gpu\":\"%0128d\"}", 0);
    expect(longgpu, "bad_value");
    expect("{\"op\":\"tune\",\"rows\":1,\"cols\":1,\"budget\":0}", "bad_value");
    expect("{\"op\":\"tune\",\"rows\":1,\"cols\":1,\"budget\":100001}", "bad_value");
    expect("{\"op\":\"tune\",\"rows\":1,\"cols\":1,\"time_s\":0}", "bad_value");
    expect("{\"op\":\"tune\",\"rows\":1,\"cols\":1,\"time_s\":-1}", "bad_value");
    expect("{\"op\":\"tune\",\"rows\":1,\"cols\":1,\"time_s\":1e300}", "bad_value");
    expect("{\"op\":\"tune\",\"rows\":1,\"cols\":1,\"seed\":-1}", "bad_value");
    expect("{\"op\":\"tune\",\"rows\":1,\"cols\":1,\"retune\":1}", "bad_type");
    expect("{\"op\":\"get\",\"rows\":1,\"cols\":1,\"retune\":true}", "unknown_field");
    expect("{\"op\":\"job\",\"job\":0}", "bad_value");
    expect("{\"op\":\"list\",\"limit\":0}", "bad_value");
    expect("{\"op\":\"list\",\"limit\":1001}", "bad_value");
    /* too many bytes for any GPU (input + output over 1 TiB) */
    expect("{\"op\":\"get\",\"rows\":2147483647,\"cols\":2147483392,\"dtype\":\"fp32\"}", "too_big");
    expect("{\"op\":\"tune\",\"rows\":1073741824,\"cols\":1048576}", "too_big");
    /* valid */
    expect("{\"op\":\"ping\"}", NULL);
    expect("  {\"op\" : \"ping\" }  ", NULL);
    expect("{\"op\":\"stats\",\"id\":\"x\"}", NULL);
    expect("{\"op\":\"get\",\"rows\":1,\"cols\":2147483392}", NULL);
    expect("{\"op\":\"get\",\"rows\":2147483647,\"cols\":1}", NULL);
    expect("{\"op\":\"get\",\"rows\":4096,\"cols\":32000,\"dtype\":\"bfloat16\",\"kernel\":\"softmax\","
           "\"gpu\":\"NVIDIA H100 80GB HBM3\",\"tune_if_missing\":false}", NULL);
    expect("{\"op\":\"tune\",\"rows\":4096,\"cols\":32000,\"budget\":100,\"time_s\":2.5,\"seed\":7}", NULL);
    expect("{\"op\":\"list\",\"dtype\":\"fp32\",\"limit\":1000}", NULL);
    expect("{\"op\":\"job\",\"job\":9223372036854775807}", NULL);
}

static void test_fields(void)
{
    tuned__request r;
    tuned__proto_error pe;
    const char *l = "{\"op\":\"get\",\"rows\":8,\"cols\":9,\"gpu\":3,\"id\":-7}";
    EXPECT(tuned__proto_parse(l, strlen(l), &r, &pe) == 0);
    EXPECT(r.op == TUNED__OP_GET && r.shape.rows == 8 && r.shape.cols == 9);
    EXPECT(r.shape.dtype == TUNED_FP16 && r.kernel == TUNED_KERNEL_SOFTMAX);
    EXPECT(r.gpu.kind == TUNED__GPU_ORDINAL && r.gpu.ordinal == 3);
    EXPECT(strcmp(r.id, "-7") == 0);
    l = "{\"op\":\"get\",\"rows\":8,\"cols\":9,\"gpu\":\"00000000DEADBEEF\"}";
    EXPECT(tuned__proto_parse(l, strlen(l), &r, &pe) == 0);
    EXPECT(r.gpu.kind == TUNED__GPU_FP && r.gpu.fp == 0xdeadbeefull);
    l = "{\"op\":\"get\",\"rows\":8,\"cols\":9,\"gpu\":\"NVIDIA H200\",\"id\":\"q\\\"\\n\"}";
    EXPECT(tuned__proto_parse(l, strlen(l), &r, &pe) == 0);
    EXPECT(r.gpu.kind == TUNED__GPU_NAME && strcmp(r.gpu.name, "NVIDIA H200") == 0);
    EXPECT(strcmp(r.id, "\"q\\\"\\n\"") == 0);
    /* the id is kept for the error reply when a later field is bad */
    l = "{\"id\":12,\"op\":\"get\",\"rows\":0,\"cols\":9}";
    EXPECT(tuned__proto_parse(l, strlen(l), &r, &pe) != 0 && strcmp(r.id, "12") == 0);
}

/* Writes s with the JSON writer and reads it back with jansson. */
static void roundtrip(const char *s, size_t n, const char *want)
{
    tuned__buf b = {0};
    tuned__buf_adds(&b, "{\"k\":");
    tuned__json_strn(&b, s, n);
    tuned__buf_adds(&b, "}");
    json_error_t jerr;
    json_t *v = json_loadb(b.data, b.len, 0, &jerr);
    const char *got = json_string_value(json_object_get(v, "k"));
    EXPECT(v != NULL && got != NULL && strcmp(got, want) == 0, "json_strn(%.*s) -> %.*s", (int)n,
           s, (int)b.len, b.data);
    json_decref(v);
    tuned__buf_free(&b);
}

static void test_writer(void)
{
    roundtrip("plain", 5, "plain");
    roundtrip("q\"b\\n\nt\tc\x01\x1f", 11, "q\"b\\n\nt\tc\x01\x1f");
    roundtrip("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80", 14, "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80");
    roundtrip("a\xff" "b", 3, "a\xef\xbf\xbd" "b");            /* invalid byte -> U+FFFD */
    roundtrip("\xc3", 1, "\xef\xbf\xbd");                       /* truncated sequence */
    roundtrip("\xed\xa0\x80", 3, "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"); /* a surrogate */
    roundtrip("\xc0\xaf", 2, "\xef\xbf\xbd\xef\xbf\xbd");       /* overlong */
    roundtrip("nul\0x", 5, "nul\xef\xbf\xbdx");                /* NUL -> U+FFFD */
    tuned__buf b = {0};
    double vals[] = {1.0, 0.1, 143.63, 1e300, -2.5e-7, 3.0e15};
    for (size_t i = 0; i < sizeof vals / sizeof vals[0]; i++) {
        b.len = 0;
        tuned__json_double(&b, vals[i]);
        tuned__buf_add(&b, "", 1);
        json_error_t jerr;
        json_t *v = json_loads(b.data, JSON_DECODE_ANY, &jerr);
        EXPECT(json_is_real(v) && json_real_value(v) == vals[i]);
        json_decref(v);
    }
    b.len = 0;
    tuned__json_double(&b, NAN);
    tuned__json_double(&b, INFINITY);
    EXPECT(b.len == 8 && memcmp(b.data, "nullnull", 8) == 0);
    /* an error reply is one line of JSON, whatever the message holds */
    b.len = 0;
    tuned__reply_error(&b, "\"id\"", TUNED__PE_BAD_VALUE, "bad \"x\"\n\xff");
    EXPECT(b.len > 0 && b.data[b.len - 1] == '\n' && memchr(b.data, '\n', b.len - 1) == NULL);
    json_error_t jerr;
    json_t *v = json_loadb(b.data, b.len, 0, &jerr);
    EXPECT(v != NULL && json_is_false(json_object_get(v, "ok")));
    EXPECT(strcmp(json_string_value(json_object_get(json_object_get(v, "error"), "code")),
                 "bad_value") == 0);
    json_decref(v);
    /* every error code has a name */
    for (int c = 1; c < TUNED__PE_COUNT; c++)
        EXPECT(strcmp(tuned__perr_name(c), "internal") != 0 || c == TUNED__PE_INTERNAL);
    tuned__buf_free(&b);
}

/* A record of store_testlib.h on the test GPU: key.gpu_fp fp, config, us. */
static void index_record(tuned__record *r, uint64_t rows, uint64_t cols, uint64_t fp,
                         const char *config, double us)
{
    make_record(r, "Test GPU|sm_90|132sm|81559MiB|drv13000|nvrtc13.0|tpl0", rows, cols);
    r->key.gpu_fp = fp;
    snprintf(r->config, sizeof r->config, "%s", config);
    snprintf(r->gpu_name, sizeof r->gpu_name, "Test GPU");
    r->median_us = us;
}

static void test_index(void)
{
    int arch, sms;
    uint64_t mem;
    EXPECT(tuned__identity_parse("NVIDIA H200|sm_90|132sm|143771MiB|drv13000|nvrtc13.0|tpl1",
                                &arch, &sms, &mem));
    EXPECT(arch == 90 && sms == 132 && mem == 143771ull << 20);
    EXPECT(tuned__identity_parse("B|sm_100|148sm|1MiB|x", &arch, &sms, &mem) && arch == 100);
    EXPECT(!tuned__identity_parse("garbage", &arch, &sms, &mem));
    EXPECT(!tuned__identity_parse("a|sm_|1sm|1MiB", &arch, &sms, &mem));
    EXPECT(!tuned__identity_parse("a|sm_90|1sm|xMiB", &arch, &sms, &mem));
    EXPECT(!tuned__identity_parse("a|sm_90|sm|1MiB", &arch, &sms, &mem));
    EXPECT(!tuned__identity_parse("a|sm_90|12|1MiB", &arch, &sms, &mem));

    /* Configs: the seeds of two shapes on sm_90, so they parse today. */
    tuned__shape small = {TUNED_FP16, 1024, 1024, TUNED_KERNEL_SOFTMAX, 0}, big = {TUNED_FP16, 4096, 32000, TUNED_KERNEL_SOFTMAX, 0};
    tuned__space sp_small, sp_big;
    tuned__err e = {0};
    EXPECT(tuned__space_init(&sp_small, &small, 90, 132, &e) == 0);
    EXPECT(tuned__space_init(&sp_big, &big, 90, 132, &e) == 0);
    tuned__config cs, cb;
    EXPECT(tuned__space_seeds(&sp_small, &cs, 1) == 1);
    EXPECT(tuned__space_seeds(&sp_big, &cb, 1) == 1);
    char tsmall[TUNED__CONFIG_TEXT], tbig[TUNED__CONFIG_TEXT];
    tuned__config_format(&cs, tsmall, sizeof tsmall);
    tuned__config_format(&cb, tbig, sizeof tbig);

    tuned__record recs[6];
    index_record(&recs[0], 1024, 1024, 7, tsmall, 6.0);
    index_record(&recs[1], 4096, 32000, 7, tbig, 143.0);
    index_record(&recs[2], 4096, 32000, 8, tbig, 150.0); /* another GPU */
    index_record(&recs[3], 4096, 32000, 7, tbig, 140.0); /* the same key again: it wins */
    index_record(&recs[4], 2048, 2048, 7, tsmall, 9.0);  /* another policy: never exact */
    snprintf(recs[4].prov.policy, sizeof recs[4].prov.policy, "some-older-policy/0");
    index_record(&recs[5], 512, 512, 7, tsmall, 3.0);    /* another layout: not held */
    recs[5].key.layout = 1;
    tuned__index *ix;
    EXPECT(tuned__index_new(&ix, &e) == 0);
    EXPECT(tuned__index_load(ix, recs, 6, &e) == 0);
    EXPECT(tuned__index_count(ix) == 4);
    EXPECT(tuned__index_find(ix, &recs[4].key) == -1);
    recs[5].key.layout = 0;
    EXPECT(tuned__index_find(ix, &recs[5].key) == -1);
    EXPECT(tuned__index_gpu_count(ix) == 2);
    EXPECT(tuned__index_gpu_at(ix, 0)->arch == 90);
    tuned__store_key k = recs[1].key;
    long at = tuned__index_find(ix, &k);
    EXPECT(at >= 0 && tuned__index_at(ix, (size_t)at)->median_us == 140.0);
    k.gpu_fp = 9;
    EXPECT(tuned__index_find(ix, &k) == -1);
    size_t len;
    const char *f = tuned__index_fields(ix, 0, &len);
    EXPECT(len > 0 && f[0] == ',');
    /* The texts rendered at indexing are what the writers write now. */
    for (size_t i = 0; i < tuned__index_count(ix); i++) {
        tuned__buf want = {0};
        size_t head_len;
        const char *head = tuned__index_answer_head(ix, i, &head_len);
        tuned__reply_answer_head(&want, tuned__index_at(ix, i));
        EXPECT(!want.oom && head_len == want.len && memcmp(head, want.data, want.len) == 0,
               "record %zu: answer head %.*s", i, (int)head_len, head);
        want.len = 0;
        f = tuned__index_fields(ix, i, &len);
        tuned__reply_record(&want, tuned__index_at(ix, i));
        EXPECT(!want.oom && len == want.len && memcmp(f, want.data, want.len) == 0,
               "record %zu: fields %.*s", i, (int)len, f);
        tuned__buf_free(&want);
    }
    /* nearest to 4096x30000 on GPU 7: 4096x32000's config when valid there */
    tuned__shape q = {TUNED_FP16, 4096, 30000, TUNED_KERNEL_SOFTMAX, 0};
    tuned__space sq;
    EXPECT(tuned__space_init(&sq, &q, 90, 132, &e) == 0);
    long n = tuned__index_nearest(ix, &sq, 7);
    tuned__config cbig;
    EXPECT(tuned__config_parse(tbig, &cbig, &e) == 0);
    if (tuned__space_valid(&sq, &cbig, NULL, 0))
        EXPECT(n >= 0 && tuned__index_at(ix, (size_t)n)->key.cols == 32000);
    EXPECT(tuned__index_nearest(ix, &sq, 99) == -1); /* no record on that GPU */
    /* a record is never its own nearest */
    n = tuned__index_nearest(ix, &sp_big, 8);
    EXPECT(n == -1);
    /* memo */
    tuned__answer a = {.source = TUNED__SOURCE_DEFAULT, .rec = -1}, b;
    snprintf(a.config, sizeof a.config, "%s", tsmall);
    k.gpu_fp = 5;
    EXPECT(!tuned__index_memo_get(ix, &k, &b));
    tuned__index_memo_put(ix, &k, &a);
    EXPECT(tuned__index_memo_get(ix, &k, &b) && b.source == TUNED__SOURCE_DEFAULT);
    for (uint64_t i = 0; i < 20000; i++) { /* fills and empties itself, never grows */
        k.rows = i + 1;
        tuned__index_memo_put(ix, &k, &a);
    }
    /* GPU 7 is local: its records must match this system's provenance */
    tuned__record here;
    index_record(&here, 1, 1, 7, tsmall, 0);
    here.prov.driver_version = 13000;
    EXPECT(tuned__index_set_here(ix, &here, 1, &e) == 0);
    recs[1].prov.driver_version = 13000;
    recs[3].prov.driver_version = 12080; /* measured under another driver */
    EXPECT(tuned__index_load(ix, recs, 4, &e) == 0);
    EXPECT(tuned__index_find(ix, &recs[3].key) == -1);
    recs[3].prov.driver_version = 13000;
    EXPECT(tuned__index_load(ix, recs, 4, &e) == 0);
    EXPECT(tuned__index_find(ix, &recs[3].key) >= 0);
    EXPECT(tuned__index_find(ix, &recs[2].key) >= 0); /* GPU 8 is not local: key and policy */
    EXPECT(tuned__index_load(ix, recs, 1, &e) == 0); /* a reload empties the memo */
    EXPECT(!tuned__index_memo_get(ix, &k, &b));
    EXPECT(tuned__index_load(ix, NULL, 0, &e) == 0);
    EXPECT(tuned__index_count(ix) == 0 && tuned__index_find(ix, &recs[0].key) == -1);
    tuned__index_free(ix);
    tuned__space_free(&sp_small);
    tuned__space_free(&sp_big);
    tuned__space_free(&sq);
}

int main(void)
{
    test_malformed();
    test_fields();
    test_writer();
    test_index();
    printf("%d failures\n", failures);
    return failures == 0 ? 0 : 1;
}
