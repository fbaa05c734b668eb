/* test_import.c: export and import of best records (JSON lines), with
 * hostile input on purpose: malformed, truncated and binary files, wrong
 * types, huge strings and lines, duplicate object keys and duplicate
 * record keys, other schemas, a failing output. Every bad line must be
 * skipped with a note naming the file, the line and the reason; nothing
 * may crash, grow without bound, or replace a faster stored record with a
 * slower one unless forced. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cache/key.h"
#include "cache/record.h"
#include "cache/store.h"
#include "cache/store_internal.h"
#include "tests/store_testlib.h"
#include "tuned.h"
#include "src/tuner/policy.h"

#define HEADER "{\"tuned_export\":1,\"schema\":2,\"record_version\":2,\"writer\":\"t\"," \
               "\"date\":\"2026-11-21T10:00:00Z\",\"records\":%d}\n"

/* ---- notes ---- */

typedef struct notes {
    char text[64][512];
    int n;
} notes;

static void take_note(void *ctx, const char *line)
{
    notes *ns = ctx;
    if (ns->n < 64)
        snprintf(ns->text[ns->n], sizeof ns->text[0], "%s", line);
    ns->n++;
}

static int noted(const notes *ns, const char *needle)
{
    for (int i = 0; i < ns->n && i < 64; i++)
        if (strstr(ns->text[i], needle) != NULL)
            return 1;
    return 0;
}

/* EXPECT that a note says needle; the notes follow the failure. */
#define EXPECT_NOTE(ns, needle)                                                       \
    do {                                                                              \
        EXPECT(noted((ns), (needle)), "no note says \"%s\"", (needle));              \
        if (!noted((ns), (needle)))                                                   \
            for (int i_ = 0; i_ < (ns)->n && i_ < 64; i_++)                           \
                fprintf(stderr, "    %s\n", (ns)->text[i_]);                          \
    } while (0)

/* ---- helpers ---- */

static tuned__store *open_store(const char *name)
{
    char path[4200];
    return open_test_store(path, sizeof path, name, 0);
}

/* Imports the bytes text[0..n) as file `name`. */
static int import_text_as(tuned__store *s, const char *name, const char *text, size_t n,
                          bool force, const char *policy, notes *ns, tuned__import_stats *st,
                          tuned__err *e)
{
    char path[4200];
    dir_path(path, sizeof path, name);
    write_file(path, text, n);
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return TUNED_EIO;
    memset(ns, 0, sizeof *ns);
    tuned__import_opts o = {.force = force, .policy = policy, .note = take_note, .ctx = ns};
    int rc = tuned__store_import(s, f, name, &o, st, e);
    fclose(f);
    return rc;
}

/* The same, by an importer with no policy of its own. */
static int import_text(tuned__store *s, const char *name, const char *text, size_t n,
                       bool force, notes *ns, tuned__import_stats *st, tuned__err *e)
{
    return import_text_as(s, name, text, n, force, NULL, ns, st, e);
}

static char *record_line(const tuned__record *r)
{
    char *text;
    size_t len;
    tuned__err e = {0};
    if (tuned__record_encode(r, &text, &len, &e) != 0) {
        fprintf(stderr, "record_line: %s\n", e.msg);
        exit(1);
    }
    char *line = malloc(len + 2);
    memcpy(line, text, len);
    line[len] = '\n';
    line[len + 1] = '\0';
    free(text);
    return line;
}

/* A growing text buffer. */
typedef struct buf {
    char *p;
    size_t n, cap;
} buf;

static void add(buf *b, const char *s, size_t n)
{
    if (b->n + n + 1 > b->cap) {
        b->cap = (b->n + n + 1) * 2;
        b->p = realloc(b->p, b->cap);
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = '\0';
}

static void adds(buf *b, const char *s)
{
    add(b, s, strlen(s));
}

static void add_record(buf *b, const tuned__record *r)
{
    char *line = record_line(r);
    adds(b, line);
    free(line);
}

static void add_header(buf *b, int records)
{
    char h[256];
    snprintf(h, sizeof h, HEADER, records);
    adds(b, h);
}

static int counter(void *ctx, const tuned__record *r)
{
    (void)r;
    (*(size_t *)ctx)++;
    return 0;
}

static size_t count_records(tuned__store *s)
{
    size_t n = 0;
    tuned__err e = {0};
    EXPECT_OK(tuned__store_scan(s, counter, &n, NULL, &e), &e);
    return n;
}

/* ---- tests ---- */

static void test_roundtrip(void)
{
    tuned__store *a = open_store("rt-a");
    tuned__store *b = open_store("rt-b");
    if (a == NULL || b == NULL)
        return;
    tuned__err e = {0};
    static const char *const gpus[] = {"NVIDIA H100 80GB HBM3", "NVIDIA H200"};
    for (int g = 0; g < 2; g++)
        for (int i = 0; i < 10; i++) {
            tuned__record r;
            char id[64];
            snprintf(id, sizeof id, "%s|drv13000", gpus[g]);
            make_record(&r, id, 1024, 1000 + (uint64_t)i);
            snprintf(r.gpu_name, sizeof r.gpu_name, "%s", gpus[g]);
            r.median_us = 10.0 + 1.0 / 3.0 + i; /* 17 significant digits must survive;
                                                   over its copy_us, a possible time */
            r.cubin = 0xabcdef0123456789ull + (uint64_t)i;
            r.key.dtype = (uint8_t)(i % 3);
            EXPECT_OK(tuned__store_put_best(a, &r, &e), &e);
        }
    char path[4200];
    dir_path(path, sizeof path, "rt.jsonl");
    FILE *f = fopen(path, "wb");
    size_t n;
    notes ns = {0};
    tuned__store_filter all = {0};
    EXPECT_OK(tuned__store_export(a, &all, f, take_note, &ns, &n, &e), &e);
    fclose(f);
    EXPECT(n == 20 && ns.n == 0);
    f = fopen(path, "rb");
    tuned__import_stats st;
    tuned__import_opts o = {.note = take_note, .ctx = &ns};
    EXPECT_OK(tuned__store_import(b, f, "rt.jsonl", &o, &st, &e), &e);
    fclose(f);
    EXPECT(st.added == 20 && st.invalid == 0 && !st.truncated && st.lines == 21);
    /* Every record came back bit for bit. */
    tuned__record ra[32], rb[32];
    for (uint64_t c = 1000; c < 1010; c++) {
        for (uint8_t dt = 0; dt < 3; dt++) {
            size_t na, nb;
            EXPECT_OK(tuned__store_find_shape(a, 1, dt, 1024, c, ra, 32, &na, &e), &e);
            EXPECT_OK(tuned__store_find_shape(b, 1, dt, 1024, c, rb, 32, &nb, &e), &e);
            EXPECT(na == nb);
            for (size_t i = 0; i < na && i < nb; i++)
                EXPECT(record_equal(&ra[i], &rb[i]));
        }
    }
    /* Filtered: one GPU. */
    dir_path(path, sizeof path, "h200.jsonl");
    f = fopen(path, "wb");
    tuned__store_filter h200 = {.gpu = "h200"};
    EXPECT_OK(tuned__store_export(a, &h200, f, NULL, NULL, &n, &e), &e);
    fclose(f);
    EXPECT(n == 10);
    struct stat sb;
    EXPECT(stat(path, &sb) == 0 && sb.st_size > 0);
    /* Importing again changes nothing. */
    f = fopen(path, "rb");
    EXPECT_OK(tuned__store_import(b, f, "h200.jsonl", &o, &st, &e), &e);
    fclose(f);
    EXPECT(st.unchanged == 10 && st.added == 0 && st.replaced == 0);

    /* An export into a full device fails with TUNED_EIO, saying so. */
    FILE *full = fopen("/dev/full", "wb");
    if (full != NULL) {
        EXPECT_RC(tuned__store_export(a, &all, full, NULL, NULL, &n, &e), TUNED_EIO, &e);
        EXPECT_MSG(&e, "write failed");
        fclose(full);
    }
    /* An empty store exports a header with 0 records. */
    tuned__store *c = open_store("rt-c");
    dir_path(path, sizeof path, "empty.jsonl");
    f = fopen(path, "wb");
    EXPECT_OK(tuned__store_export(c, &all, f, NULL, NULL, &n, &e), &e);
    fclose(f);
    EXPECT(n == 0);
    f = fopen(path, "rb");
    EXPECT_OK(tuned__store_import(c, f, "empty.jsonl", &o, &st, &e), &e);
    fclose(f);
    EXPECT(st.added == 0 && !st.truncated);
    tuned__store_close(c);
    tuned__store_close(a);
    tuned__store_close(b);
}

/* A stored record is replaced only by a faster one, unless forced. */
static void test_better_only(void)
{
    tuned__store *s = open_store("better");
    if (s == NULL)
        return;
    tuned__err e = {0};
    tuned__record r, got;
    make_record(&r, "gpu-a", 4096, 32000);
    r.median_us = 100;
    EXPECT_OK(tuned__store_put_best(s, &r, &e), &e);

    tuned__record slower = r, faster = r;
    slower.median_us = 120;
    snprintf(slower.config, sizeof slower.config, "w4.slow");
    faster.median_us = 90;
    snprintf(faster.config, sizeof faster.config, "w16.fast");
    buf b = {0};
    notes ns;
    tuned__import_stats st;

    add_header(&b, 1);
    add_record(&b, &slower);
    EXPECT_OK(import_text(s, "slower.jsonl", b.p, b.n, false, &ns, &st, &e), &e);
    EXPECT(st.kept == 1 && st.replaced == 0);
    EXPECT_NOTE(&ns, "slower.jsonl:2: skipped");
    EXPECT_NOTE(&ns, "--force");
    EXPECT_OK(tuned__store_get_best(s, &r.key, &got, TUNED__MEASURE_POLICY, &e), &e);
    EXPECT(got.median_us == 100);

    /* The same record again: unchanged, silently. */
    b.n = 0;
    add_header(&b, 1);
    add_record(&b, &r);
    EXPECT_OK(import_text(s, "same.jsonl", b.p, b.n, false, &ns, &st, &e), &e);
    EXPECT(st.unchanged == 1 && ns.n == 0);

    b.n = 0;
    add_header(&b, 1);
    add_record(&b, &faster);
    EXPECT_OK(import_text(s, "faster.jsonl", b.p, b.n, false, &ns, &st, &e), &e);
    EXPECT(st.replaced == 1);
    EXPECT_OK(tuned__store_get_best(s, &r.key, &got, TUNED__MEASURE_POLICY, &e), &e);
    EXPECT(record_equal(&got, &faster));

    /* --force: the slower one goes in, with a note. */
    b.n = 0;
    add_header(&b, 1);
    add_record(&b, &slower);
    EXPECT_OK(import_text(s, "forced.jsonl", b.p, b.n, true, &ns, &st, &e), &e);
    EXPECT(st.replaced == 1);
    EXPECT_NOTE(&ns, "--force");
    EXPECT_OK(tuned__store_get_best(s, &r.key, &got, TUNED__MEASURE_POLICY, &e), &e);
    EXPECT(record_equal(&got, &slower));

    /* Duplicate record keys inside one file: the fastest wins. */
    tuned__record d1 = r, d2 = r, d3 = r;
    d1.median_us = 80;
    d2.median_us = 60; /* 4096x32000 fp16 moves 524 MB: under 10 TB/s, 52 us at least */
    d3.median_us = 70;
    b.n = 0;
    add_header(&b, 3);
    add_record(&b, &d1);
    add_record(&b, &d2);
    add_record(&b, &d3);
    EXPECT_OK(import_text(s, "dups.jsonl", b.p, b.n, false, &ns, &st, &e), &e);
    EXPECT(st.replaced == 2 && st.kept == 1);
    EXPECT_NOTE(&ns, "dups.jsonl:4: skipped");
    EXPECT_OK(tuned__store_get_best(s, &r.key, &got, TUNED__MEASURE_POLICY, &e), &e);
    EXPECT(got.median_us == 60);

    /* A damaged stored record is replaced, with a note. */
    char path[4200];
    dir_path(path, sizeof path, "better");
    tuned__store_close(s);
    uint8_t kb[TUNED__KEY_LEN];
    tuned__key_encode(kb, TUNED__KEY_TAG_BEST, &r.key);
    EXPECT(raw_put(path, "best", kb, sizeof kb, "{\"v\":2", 6) == 0);
    s = open_store("better");
    b.n = 0;
    add_header(&b, 1);
    add_record(&b, &slower);
    EXPECT_OK(import_text(s, "over-damage.jsonl", b.p, b.n, false, &ns, &st, &e), &e);
    EXPECT(st.replaced == 1);
    EXPECT_NOTE(&ns, "damaged");

    /* A stored record of another version is another tuned's: kept, unless
     * --force. */
    tuned__store_close(s);
    const char *newer = "{\"v\":3,\"kernel\":\"softmax\"}";
    EXPECT(raw_put(path, "best", kb, sizeof kb, newer, strlen(newer)) == 0);
    s = open_store("better");
    EXPECT_OK(import_text(s, "over-newer.jsonl", b.p, b.n, false, &ns, &st, &e), &e);
    EXPECT(st.kept == 1 && st.replaced == 0, "kept %zu replaced %zu", st.kept, st.replaced);
    EXPECT_NOTE(&ns, "another record version");
    EXPECT_OK(import_text(s, "over-newer.jsonl", b.p, b.n, true, &ns, &st, &e), &e);
    EXPECT(st.replaced == 1, "--force replaced %zu", st.replaced);
    EXPECT_OK(tuned__store_get_best(s, &r.key, &got, TUNED__MEASURE_POLICY, &e), &e);
    EXPECT(got.median_us == slower.median_us);
    free(b.p);
    tuned__store_close(s);
}

/* Times of two measurement policies do not compare: a record of the
 * importer's policy stays over a faster one of another, and one of another
 * policy (not served here) gives way to one of the importer's. */
static void test_policies(void)
{
    tuned__store *s = open_store("policies");
    if (s == NULL)
        return;
    tuned__err e = {0};
    tuned__record here, got;
    make_record(&here, "gpu-a", 4096, 32000);
    here.median_us = 100;
    EXPECT_OK(tuned__store_put_best(s, &here, &e), &e);
    tuned__record other = here;
    snprintf(other.prov.policy, sizeof other.prov.policy, "events-median/1");
    other.median_us = 90;
    snprintf(other.config, sizeof other.config, "w8.other");
    buf b = {0};
    notes ns;
    tuned__import_stats st;
    add_header(&b, 1);
    add_record(&b, &other);
    EXPECT_OK(import_text_as(s, "other.jsonl", b.p, b.n, false, TUNED__MEASURE_POLICY, &ns, &st,
                             &e), &e);
    EXPECT(st.kept == 1 && st.replaced == 0, "kept %zu replaced %zu", st.kept, st.replaced);
    EXPECT_NOTE(&ns, "do not compare");
    EXPECT_OK(tuned__store_get_best(s, &here.key, &got, TUNED__MEASURE_POLICY, &e), &e);
    EXPECT(got.median_us == 100);
    /* With --force it goes in; then this policy's record, though slower,
     * takes its place back. */
    EXPECT_OK(import_text_as(s, "other.jsonl", b.p, b.n, true, TUNED__MEASURE_POLICY, &ns, &st,
                             &e), &e);
    EXPECT(st.replaced == 1);
    b.n = 0;
    add_header(&b, 1);
    add_record(&b, &here);
    EXPECT_OK(import_text_as(s, "here.jsonl", b.p, b.n, false, TUNED__MEASURE_POLICY, &ns, &st,
                             &e), &e);
    EXPECT(st.replaced == 1, "replaced %zu", st.replaced);
    EXPECT_NOTE(&ns, "events-median/1");
    EXPECT_OK(tuned__store_get_best(s, &here.key, &got, TUNED__MEASURE_POLICY, &e), &e);
    EXPECT(got.median_us == 100 && strcmp(got.config, here.config) == 0);
    free(b.p);
    tuned__store_close(s);
}

static int refuse_config(void *ctx, const tuned__record *r, tuned__err *e)
{
    (void)ctx;
    if (strcmp(r->config, "refused-by-caller") == 0)
        return tuned__errf(e, TUNED_EINVAL, "config '%s' is not one this build can run",
                           r->config);
    return 0;
}

/* One malformed line at a time after a valid header and before a valid
 * record: the bad line is skipped with its reason, the good one stored. */
static void test_hostile_lines(void)
{
    tuned__record good;
    make_record(&good, "gpu-good", 8, 8);
    char *good_line = record_line(&good);
    /* good_line without its newline, to splice fields into. */
    size_t gl = strlen(good_line) - 1;

    static char big[100 * 1024];
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    char *nested = malloc(40001);
    memset(nested, '[', 20000);
    memset(nested + 20000, ']', 20000);
    nested[40000] = '\0';

    typedef struct hostile {
        const char *what;
        char *line; /* without newline; built below */
        const char *needle;
    } hostile;
    hostile cases[40];
    int nc = 0;
#define CASE(w, l, n) (cases[nc++] = (hostile){(w), (l), (n)})
    char *tmp;
    CASE("garbage", strdup("this is not json"), "invalid JSON");
    CASE("an array", strdup("[1,2,3]"), "not a JSON object");
    CASE("an empty object", strdup("{}"), "\"v\"");
    CASE("a number", strdup("42"), "invalid JSON");
    /* Fields with the wrong type or out of range. */
    static const struct {
        const char *field, *value, *needle;
    } fields[] = {
        {"rows", "\"4096\"", "\"rows\": not an integer"},
        {"rows", "-1", "\"rows\""},
        {"rows", "0", "shape"},
        {"rows", "9223372036854775808", "invalid JSON"},
        {"median_us", "1e999", "invalid JSON"},
        {"median_us", "-5", "\"median_us\""},
        {"median_us", "0", "median_us"},
        {"dtype", "\"fp8\"", "\"dtype\""},
        {"kernel", "\"matmul\"", "\"kernel\""},
        {"gpu_fp", "\"0000000000000000\"", "fingerprint"},
        {"gpu_fp", "12", "\"gpu_fp\": not a string"},
        {"v", "3", "version 3"},
        {"v", "1", "version 1"},
        {"config", "\"a\\u0000b\"", "NUL"},
        {"config", "\"two words\"", "\"config\""},
        {"config", "\"refused-by-caller\"", "not one this build can run"},
        {"date", "\"2026-02-30T99:00:00Z\"", "\"date\""},
        {"layout", "256", "\"layout\""},
        {"policy", "\"\"", "\"policy\""},
    };
    for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++) {
        char pat[64];
        snprintf(pat, sizeof pat, "\"%s\":", fields[i].field);
        const char *at = strstr(good_line, pat);
        const char *v = at + strlen(pat);
        const char *end = v + strcspn(v, ",}");
        size_t n = (size_t)(v - good_line) + strlen(fields[i].value) + (good_line + gl - end) + 1;
        tmp = malloc(n);
        snprintf(tmp, n, "%.*s%s%.*s", (int)(v - good_line), good_line, fields[i].value,
                 (int)(good_line + gl - end), end);
        CASE(fields[i].field, tmp, fields[i].needle);
    }
    /* Duplicate object keys. */
    tmp = malloc(gl + 32);
    snprintf(tmp, gl + 32, "{\"rows\":9,%s", good_line + 1);
    tmp[strlen(tmp) - 1] = '\0';
    CASE("duplicate object keys", tmp, "duplicate");
    /* A huge string that fits the line cap but not the field. */
    tmp = malloc(gl + 60 * 1024);
    snprintf(tmp, gl + 60 * 1024, "{\"gpu_name\":\"%.*s\",%s", 60000, big, good_line + 1);
    tmp[strlen(tmp) - 1] = '\0';
    {
        /* drop the original gpu_name so the key is not duplicated */
        char *second = strstr(tmp + 10, "\"gpu_name\":");
        if (second != NULL) {
            char *q = strchr(second + 12, '"');
            memmove(second, q + 2, strlen(q + 2) + 1);
        }
    }
    CASE("a 60 KB string", tmp, "\"gpu_name\"");
    CASE("a 100 KB line", strdup(big), "longer than");
    CASE("nesting 20000 deep", strdup(nested), "invalid JSON");
    CASE("invalid UTF-8", strdup("{\"v\":2,\"kernel\":\"soft\xff\xfe\"}"), "invalid JSON");
    tmp = strdup("{\"v\":2,\"kernel\":\"softmax\"} trailing");
    CASE("trailing garbage", tmp, "invalid JSON");
#undef CASE

    tuned__store *s = open_store("hostile");
    if (s == NULL)
        return;
    tuned__err e = {0};
    notes ns;
    tuned__import_stats st;
    for (int i = 0; i < nc; i++) {
        buf b = {0};
        add_header(&b, 2);
        adds(&b, cases[i].line);
        adds(&b, "\n");
        adds(&b, good_line);
        tuned__import_opts o = {.check = refuse_config, .note = take_note, .ctx = &ns};
        char path[4200];
        dir_path(path, sizeof path, "case.jsonl");
        write_file(path, b.p, b.n);
        FILE *f = fopen(path, "rb");
        memset(&ns, 0, sizeof ns);
        EXPECT_OK(tuned__store_import(s, f, "case.jsonl", &o, &st, &e), &e);
        fclose(f);
        int ok = st.invalid == 1 && st.added + st.unchanged == 1 && ns.n == 1 &&
                 noted(&ns, "case.jsonl:2: skipped") && noted(&ns, cases[i].needle);
        if (!ok) {
            fprintf(stderr, "%s:%d: case \"%s\": invalid %zu added %zu unchanged %zu; notes:\n",
                    __FILE__, __LINE__, cases[i].what, st.invalid, st.added, st.unchanged);
            for (int k = 0; k < ns.n && k < 64; k++)
                fprintf(stderr, "    %s\n", ns.text[k]);
            failures++;
        } else if (strlen(ns.text[0]) < 200) {
            printf("  %-22s %s\n", cases[i].what, ns.text[0]);
        } else {
            printf("  %-22s %.160s...\n", cases[i].what, ns.text[0]);
        }
        free(b.p);
        free(cases[i].line);
    }
    /* The good record is there, once, and nothing else. */
    EXPECT(count_records(s) == 1);
    free(good_line);
    free(nested);
    tuned__store_close(s);
}

/* Whole files that are not exports, or not of this schema. */
static void test_bad_files(void)
{
    tuned__store *s = open_store("badfiles");
    if (s == NULL)
        return;
    tuned__err e = {0};
    notes ns;
    tuned__import_stats st;
    tuned__record r;
    make_record(&r, "gpu-a", 2, 2);
    char *line = record_line(&r);

    EXPECT_RC(import_text(s, "empty", "", 0, false, &ns, &st, &e), TUNED_EINVAL, &e);
    EXPECT_MSG(&e, "empty");
    EXPECT_RC(import_text(s, "blank", "\n\n  \n", 5, false, &ns, &st, &e), TUNED_EINVAL, &e);
    EXPECT_RC(import_text(s, "noheader", line, strlen(line), false, &ns, &st, &e), TUNED_EINVAL,
             &e);
    EXPECT_MSG(&e, "noheader:1: not a tuned export");
    printf("  no header: %s\n", e.msg);
    const char *h3 = "{\"tuned_export\":1,\"schema\":3,\"records\":1}\n";
    EXPECT_RC(import_text(s, "schema3", h3, strlen(h3), false, &ns, &st, &e), TUNED_ESCHEMA, &e);
    EXPECT_MSG(&e, "schema 3");
    EXPECT_MSG(&e, "imports format 1 of schema 2");
    printf("  another schema: %s\n", e.msg);
    const char *f2 = "{\"tuned_export\":2,\"schema\":2,\"records\":1}\n";
    EXPECT_RC(import_text(s, "format2", f2, strlen(f2), false, &ns, &st, &e), TUNED_ESCHEMA, &e);
    const char *hbad = "{\"tuned_export\":\"yes\",\"schema\":2,\"records\":1}\n";
    EXPECT_RC(import_text(s, "hbad", hbad, strlen(hbad), false, &ns, &st, &e), TUNED_EINVAL, &e);
    EXPECT_MSG(&e, "header");
    const char *hneg = "{\"tuned_export\":1,\"schema\":2,\"records\":-4}\n";
    EXPECT_RC(import_text(s, "hneg", hneg, strlen(hneg), false, &ns, &st, &e), TUNED_EINVAL, &e);

    /* 1 MiB of binary garbage, and 10 MB on one line with no newline. */
    size_t n = 1 << 20;
    unsigned char *bin = malloc(10 * n);
    uint64_t x = 88172645463325252ull;
    for (size_t i = 0; i < n; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        bin[i] = (unsigned char)x;
    }
    EXPECT(import_text(s, "binary", (char *)bin, n, false, &ns, &st, &e) == TUNED_EINVAL);
    memset(bin, '{', 10 * n);
    EXPECT_RC(import_text(s, "oneline", (char *)bin, 10 * n, false, &ns, &st, &e), TUNED_EINVAL,
             &e);
    EXPECT_MSG(&e, "longer than");
    free(bin);

    /* A directory is not readable as a file: TUNED_EIO. */
    char path[4200];
    dir_path(path, sizeof path, "a-directory");
    EXPECT(mkdir(path, 0700) == 0);
    FILE *f = fopen(path, "rb");
    if (f != NULL) {
        tuned__import_opts o = {0};
        EXPECT_RC(tuned__store_import(s, f, "a-directory", &o, &st, &e), TUNED_EIO, &e);
        fclose(f);
    }

    /* 20000 bad lines: all counted, the import finishes. */
    buf b = {0};
    add_header(&b, 20001);
    for (int i = 0; i < 20000; i++)
        adds(&b, "{\"v\":2}\n");
    adds(&b, line);
    EXPECT_OK(import_text(s, "many", b.p, b.n, false, &ns, &st, &e), &e);
    EXPECT(st.invalid == 20000 && st.added == 1 && ns.n == 20000);
    free(b.p);

    /* A record, then a header of another schema: the record is kept, the
     * import stops with TUNED_ESCHEMA. */
    tuned__record r2;
    make_record(&r2, "gpu-b", 2, 2);
    b = (buf){0};
    add_header(&b, 1);
    add_record(&b, &r2);
    adds(&b, h3);
    EXPECT_RC(import_text(s, "mixed", b.p, b.n, false, &ns, &st, &e), TUNED_ESCHEMA, &e);
    EXPECT_MSG(&e, "mixed:3");
    tuned__record got;
    EXPECT_OK(tuned__store_get_best(s, &r2.key, &got, TUNED__MEASURE_POLICY, &e), &e);
    free(b.p);

    /* Read-only stores take no import. */
    tuned__store_close(s);
    dir_path(path, sizeof path, "badfiles");
    EXPECT_OK(tuned__store_open(&s, path, TUNED__STORE_READONLY, &e), &e);
    EXPECT_RC(import_text(s, "ro", line, strlen(line), false, &ns, &st, &e), TUNED_EINVAL, &e);
    EXPECT_MSG(&e, "read-only");
    tuned__store_close(s);
    free(line);
}

/* Truncated exports: cut inside a line, and cut at a line end. */
static void test_truncated(void)
{
    tuned__store *s = open_store("trunc");
    if (s == NULL)
        return;
    tuned__err e = {0};
    buf b = {0};
    add_header(&b, 5);
    size_t ends[6];
    ends[0] = b.n;
    for (int i = 0; i < 5; i++) {
        tuned__record r;
        make_record(&r, "gpu-t", 16, 100 + (uint64_t)i);
        add_record(&b, &r);
        ends[i + 1] = b.n;
    }
    notes ns;
    tuned__import_stats st;
    /* In the middle of the 4th record. */
    size_t cut = ends[3] + (ends[4] - ends[3]) / 2;
    EXPECT_OK(import_text(s, "cut-mid", b.p, cut, false, &ns, &st, &e), &e);
    EXPECT(st.added == 3 && st.invalid == 1 && st.truncated);
    EXPECT_NOTE(&ns, "cut-mid:5: skipped: line: invalid JSON");
    EXPECT_NOTE(&ns, "cut-mid:1: the header declares 5 records, 4 follow it: the file is truncated");
    /* At the end of the 3rd. */
    EXPECT_OK(import_text(s, "cut-line", b.p, ends[3], false, &ns, &st, &e), &e);
    EXPECT(st.unchanged == 3 && st.invalid == 0 && st.truncated);
    EXPECT_NOTE(&ns, "3 follow it");
    /* Whole, without the final newline, with CRLF line ends and blank
     * lines: fine. */
    buf crlf = {0};
    for (size_t i = 0; i < b.n - 1; i++) {
        if (b.p[i] == '\n')
            adds(&crlf, "\r\n\n");
        else
            add(&crlf, &b.p[i], 1);
    }
    EXPECT_OK(import_text(s, "crlf", crlf.p, crlf.n, false, &ns, &st, &e), &e);
    EXPECT(st.added == 2 && st.unchanged == 3 && st.invalid == 0 && !st.truncated && ns.n == 0);
    /* Two exports concatenated: each header starts a section. */
    buf two = {0};
    add(&two, b.p, b.n);
    add_header(&two, 2);
    add(&two, b.p + ends[0], ends[2] - ends[0]);
    EXPECT_OK(import_text(s, "two", two.p, two.n, false, &ns, &st, &e), &e);
    EXPECT(st.unchanged == 7 && !st.truncated && st.invalid == 0);
    /* More records than declared: noted, not an error. */
    buf more = {0};
    add_header(&more, 1);
    add(&more, b.p + ends[0], ends[2] - ends[0]);
    EXPECT_OK(import_text(s, "more", more.p, more.n, false, &ns, &st, &e), &e);
    EXPECT(!st.truncated && st.unchanged == 2);
    EXPECT_NOTE(&ns, "declares 1 records, 2 follow");
    free(b.p);
    free(crlf.p);
    free(two.p);
    free(more.p);
    tuned__store_close(s);
}

/* Imports into a tiny map: batches retried after the map grows. */
static void test_import_grows_map(void)
{
    char path[4200];
    tuned__store *s = open_test_store(path, sizeof path, "grow", 64 << 10);
    if (s == NULL)
        return;
    tuned__err e = {0};
    buf b = {0};
    add_header(&b, 1000);
    for (int i = 0; i < 1000; i++) {
        tuned__record r;
        make_record(&r, "gpu-g", 1 + (uint64_t)i, 64);
        add_record(&b, &r);
    }
    notes ns;
    tuned__import_stats st;
    EXPECT_OK(import_text(s, "grow.jsonl", b.p, b.n, false, &ns, &st, &e), &e);
    EXPECT(st.added == 1000 && ns.n == 0);
    EXPECT(count_records(s) == 1000);
    free(b.p);
    tuned__store_close(s);
}

int main(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    static const test_case tests[] = {
        {"export / import round trip", test_roundtrip},
        {"only faster records replace stored ones", test_better_only},
        {"measurement policies do not compare", test_policies},
        {"hostile lines", test_hostile_lines},
        {"files that are not exports", test_bad_files},
        {"truncated and concatenated files", test_truncated},
        {"import into a tiny map", test_import_grows_map},
    };
    return run_tests("test_import", tests, sizeof tests / sizeof tests[0]);
}
