/* test_protocol_get.c: the fast `get` scanner against the jansson path
 * (suite 'unit').
 *
 * The scanner (src/daemon/protocol_get.c) may decline any line, but a line
 * it accepts must be one the jansson path accepts, with a byte-identical
 * request; and tuned__proto_parse (scanner, then jansson) must give what
 * the jansson path alone gives, error code and message included. Checked
 * on: hand-written lines (the shapes clients send, which the scanner must
 * accept, and edge cases); requests generated from pools of good and bad
 * values, in random order, with random whitespace, repeats and unknown
 * fields; and every single-byte deletion, replacement, insertion and
 * truncation of a few valid lines. Exit 0 when everything passed; each
 * failed check prints its line. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "src/daemon/protocol.h"
#include "src/daemon/protocol_get.h"
#include "tests/expect.h"

/* Lines the scanner accepted, and lines checked, over the whole run. */
typedef struct tally {
    size_t lines, fast;
} tally;

enum { FAST_ANY = -1, FAST_NO = 0, FAST_YES = 1 };

/* Prints line with its non-printable bytes as \xNN, for a failure. */
static const char *shown(const char *line, size_t len, char *out, size_t cap)
{
    size_t o = 0;
    for (size_t i = 0; i < len && o + 5 < cap; i++) {
        unsigned char c = (unsigned char)line[i];
        if (c >= 0x20 && c < 0x7f)
            out[o++] = (char)c;
        else
            o += (size_t)snprintf(out + o, cap - o, "\\x%02x", c);
    }
    out[o] = '\0';
    return out;
}

/* Runs line through the scanner, the jansson path and the two together. */
static void check(tally *t, const char *line, size_t len, int want_fast)
{
    tuned__request fast, json, both;
    tuned__proto_error ejson, eboth;
    char text[1024];
    bool took = tuned__proto_parse_get_fast(line, len, &fast);
    int rc_json = tuned__proto_parse_json(line, len, &json, &ejson);
    int rc_both = tuned__proto_parse(line, len, &both, &eboth);
    t->lines++;
    t->fast += took;
    if (want_fast != FAST_ANY)
        EXPECT(took == (want_fast == FAST_YES), "scanner %s: %s", took ? "accepted" : "declined",
               shown(line, len, text, sizeof text));
    if (took) {
        EXPECT(rc_json == 0, "scanner accepted what jansson refuses (%s: %s): %s",
               tuned__perr_name(ejson.code), ejson.message, shown(line, len, text, sizeof text));
        EXPECT(rc_json != 0 || memcmp(&fast, &json, sizeof fast) == 0,
               "scanner and jansson read different requests (id %s / %s, rows %llu / %llu): %s",
               fast.id, json.id, (unsigned long long)fast.shape.rows,
               (unsigned long long)json.shape.rows, shown(line, len, text, sizeof text));
    }
    EXPECT(rc_both == rc_json && eboth.code == ejson.code &&
               strcmp(eboth.message, ejson.message) == 0 &&
               memcmp(&both, &json, sizeof both) == 0,
           "parse differs from jansson (%s \"%s\" / %s \"%s\"): %s", tuned__perr_name(eboth.code),
           eboth.message, tuned__perr_name(ejson.code), ejson.message,
           shown(line, len, text, sizeof text));
}

static void check_str(tally *t, const char *line, int want_fast)
{
    check(t, line, strlen(line), want_fast);
}

/* What clients send, and what the scanner must read itself. */
static void test_accepted(tally *t)
{
    /* bench/loadgen.c */
    check_str(t, "{\"op\":\"get\",\"dtype\":\"fp16\",\"rows\":4096,\"cols\":32000,"
                 "\"gpu\":\"5e0c5e0c5e0c5e0c\"}", FAST_YES);
    /* docs/protocol.md's example */
    check_str(t, "{\"op\":\"get\",\"rows\":4096,\"cols\":32000,\"dtype\":\"fp16\",\"id\":7}",
              FAST_YES);
    /* Python's json.dumps (a space after ':' and ',') */
    check_str(t, "{\"op\": \"get\", \"rows\": 1, \"cols\": 1, \"dtype\": \"bf16\", \"id\": \"a b\"}",
              FAST_YES);
    check_str(t, " \t{ \"rows\" :1 ,\"op\":\"get\",\"cols\":2147483392 } \r\n", FAST_YES);
    check_str(t, "{\"op\":\"get\",\"rows\":2147483647,\"cols\":1,\"kernel\":\"log_softmax_bwd\"}",
              FAST_YES);
    check_str(t, "{\"op\":\"get\",\"rows\":1,\"cols\":1,\"gpu\":1023,\"tune_if_missing\":true}",
              FAST_YES);
    check_str(t, "{\"op\":\"get\",\"rows\":1,\"cols\":1,\"gpu\":\"NVIDIA H200\","
                 "\"tune_if_missing\":false,\"kernel\":\"softmax_bwd\"}", FAST_YES);
    /* Every kind tunes: tune_if_missing with a backward kind is the scanner's. */
    check_str(t, "{\"op\":\"get\",\"rows\":1,\"cols\":1,\"kernel\":\"softmax_bwd\","
                 "\"tune_if_missing\":true}", FAST_YES);
    /* Two tensors of 0.4 TiB (a forward kind) are under the cap. */
    check_str(t, "{\"op\":\"get\",\"rows\":1048576,\"cols\":104858,\"dtype\":\"fp32\"}",
              FAST_YES);
    check_str(t, "{\"op\":\"get\",\"rows\":1,\"cols\":1,\"gpu\":\"ABCDEF0123456789\"}", FAST_YES);
    check_str(t, "{\"op\":\"get\",\"rows\":1,\"cols\":1,\"gpu\":\"hw993c0000000001\"}", FAST_YES);
    check_str(t, "{\"op\":\"get\",\"rows\":1,\"cols\":1,\"id\":-123456789012345678}", FAST_YES);
    check_str(t, "{\"op\":\"get\",\"rows\":1,\"cols\":1,\"id\":0}", FAST_YES);
    check_str(t, "{\"op\":\"get\",\"rows\":1,\"cols\":1,\"id\":\"\"}", FAST_YES);
    check_str(t, "{\"op\":\"get\",\"rows\":1,\"cols\":1,\"id\":"
                 "\"0123456789012345678901234567890123456789012345678901234567890123\"}", FAST_YES);
    check_str(t, "{\"op\":\"get\",\"rows\":1,\"cols\":1,\"dtype\":\"float32\"}", FAST_YES);
}

/* Edge cases: each must come out as jansson has it; most are declined. */
static void test_edges(tally *t)
{
    static const char *const declined[] = {
        "", "{", "}", "{}", "[]", "null", "{\"op\":\"get\"}", "{\"op\":\"get\",\"rows\":1}",
        "{\"op\":\"ping\"}", "{\"op\":\"GET\",\"rows\":1,\"cols\":1}",
        "{\"op\":\"ge\\u0074\",\"rows\":1,\"cols\":1}",        /* an escape in a value */
        "{\"o\\u0070\":\"get\",\"rows\":1,\"cols\":1}",        /* ... and in a key */
        "{\"op\":\"get\",\"rows\":1,\"cols\":1,\"id\":\"a\\\"b\"}",
        "{\"op\":\"get\",\"rows\":1,\"cols\":1,\"id\":\"\xc3\xa9\"}", /* UTF-8 */
        "{\"op\":\"get\",\"rows\":1,\"cols\":1,\"id\":\"\xff\"}",     /* not UTF-8 */
        "{\"op\":\"get\",\"rows\":1,\"cols\":1,\"id\":\"a\x01\"}",    /* a control character */
        "{\"op\":\"get\",\"rows\":1,\"cols\":1,\"id\":\"a\x7f\"}",
        "{\"op\":\"get\",\"rows\":1e3,\"cols\":1}", "{\"op\":\"get\",\"rows\":1E3,\"cols\":1}",
        "{\"op\":\"get\",\"rows\":1.0,\"cols\":1}", "{\"op\":\"get\",\"rows\":10e-1,\"cols\":1}",
        "{\"op\":\"get\",\"rows\":01,\"cols\":1}", "{\"op\":\"get\",\"rows\":-1,\"cols\":1}",
        "{\"op\":\"get\",\"rows\":-0,\"cols\":1}", "{\"op\":\"get\",\"rows\":0,\"cols\":1}",
        "{\"op\":\"get\",\"rows\":+1,\"cols\":1}", "{\"op\":\"get\",\"rows\":\"1\",\"cols\":1}",
        "{\"op\":\"get\",\"rows\":2147483648,\"cols\":1}",
        "{\"op\":\"get\",\"rows\":1,\"cols\":2147483393}",
        "{\"op\":\"get\",\"rows\":99999999999999999999,\"cols\":1}",
        "{\"op\":\"get\",\"rows\":2147483647,\"cols\":2147483392}", /* over 1 TiB */
        "{\"op\":\"get\",\"rows\":262144,\"cols\":1048576,\"dtype\":\"fp32\"}",
        "{\"op\":\"get\",\"rows\":1,\"cols\":1,\"rows\":1}",      /* a repeat */
        "{\"op\":\"get\",\"rows\":1,\"cols\":1,\"op\":\"get\"}",
        "{\"op\":\"get\",\"rows\":1,\"cols\":1,\"budget\":5}",    /* a field get does not take */
        "{\"op\":\"get\",\"rows\":1,\"cols\":1,\"x\":1}", "{\"op\":\"get\",\"rows\":1,\"cols\":1,\"\":1}",
        "{\"op\":\"get\",\"rows\":1,\"cols\":1,}", "{,\"op\":\"get\",\"rows\":1,\"cols\":1}",
        "{\"op\":\"get\",\"rows\":1,\"cols\":1} x", "{\"op\":\"get\",\"rows\":1,\"cols\":1}}",
        "{\"op\":\"get\" \"rows\":1,\"cols\":1}", "{\"op\"::\"get\",\"rows\":1,\"cols\":1}",
        "{\"op\":\"get\",\"rows\":1 2,\"cols\":1}", "{\"op\":\"get\",\"rows\":1,\"cols\":1\f}",
        "{\"op\":\"get\",\"rows\":1,\"cols\":1,\"id\":-0}",       /* jansson echoes 0 */
        "{\"op\":\"get\",\"rows\":1,\"cols\":1,\"id\":- 1}",
        "{\"op\":\"get\",\"rows\":1,\"cols\":1,\"id\":1234567890123456789}", /* 19 digits */
        "{\"op\":\"get\",\"rows\":1,\"cols\":1,\"id\":1.5}", "{\"op\":\"get\",\"rows\":1,\"cols\":1,\"id\":true}",
        "{\"op\":\"get\",\"rows\":1,\"cols\":1,\"id\":"
        "\"01234567890123456789012345678901234567890123456789012345678901234\"}", /* 65 */
        "{\"op\":\"get\",\"rows\":1,\"cols\":1,\"gpu\":1024}",
        "{\"op\":\"get\",\"rows\":1,\"cols\":1,\"gpu\":-1}", "{\"op\":\"get\",\"rows\":1,\"cols\":1,\"gpu\":\"\"}",
        "{\"op\":\"get\",\"rows\":1,\"cols\":1,\"gpu\":1.0}", "{\"op\":\"get\",\"rows\":1,\"cols\":1,\"gpu\":null}",
        "{\"op\":\"get\",\"rows\":1,\"cols\":1,\"gpu\":\"\\u0041\"}",
        "{\"op\":\"get\",\"rows\":1,\"cols\":1,\"kernel\":\"SOFTMAX\"}",
        "{\"op\":\"get\",\"rows\":1,\"cols\":1,\"kernel\":\"softmax\\u0000\"}",
        /* three tensors of 0.4 TiB: a backward kind is over the 1 TiB cap */
        "{\"op\":\"get\",\"rows\":1048576,\"cols\":104858,\"dtype\":\"fp32\","
        "\"kernel\":\"softmax_bwd\"}",
        "{\"op\":\"get\",\"rows\":1,\"cols\":1,\"dtype\":\"int8\"}",
        "{\"op\":\"get\",\"rows\":1,\"cols\":1,\"dtype\":\"fp16fp16fp16fp16fp16fp16fp16fp16\"}",
        "{\"op\":\"get\",\"rows\":1,\"cols\":1,\"tune_if_missing\":1}",
        "{\"op\":\"get\",\"rows\":1,\"cols\":1,\"tune_if_missing\":tru}",
        "{\"op\":\"get\",\"rows\":1,\"cols\":1,\"tune_if_missing\":truex}",
        "{\"op\":\"get\",\"rows\":1,\"cols\":1,\"tune_if_missing\":True}",
        "{'op':'get','rows':1,'cols':1}",
        "\xef\xbb\xbf{\"op\":\"get\",\"rows\":1,\"cols\":1}",    /* a byte order mark */
    };
    for (size_t i = 0; i < sizeof declined / sizeof declined[0]; i++)
        check_str(t, declined[i], FAST_NO);
    /* A NUL byte: inside a string, between tokens, after the object. */
    static const char nul_in[] = "{\"op\":\"get\",\"rows\":1,\"cols\":1,\"gpu\":\"a\0b\"}";
    static const char nul_ws[] = "{\"op\":\"get\",\0\"rows\":1,\"cols\":1}";
    static const char nul_end[] = "{\"op\":\"get\",\"rows\":1,\"cols\":1}\0";
    check(t, nul_in, sizeof nul_in - 1, FAST_NO);
    check(t, nul_ws, sizeof nul_ws - 1, FAST_NO);
    check(t, nul_end, sizeof nul_end - 1, FAST_NO);
    /* A line not NUL-ended: the scanner must stop at len. */
    static const char cut[] = "{\"op\":\"get\",\"rows\":1,\"cols\":12}";
    check(t, cut, sizeof cut - 3, FAST_NO);
    check(t, cut, sizeof cut - 2, FAST_NO);
    check(t, cut, sizeof cut - 1, FAST_YES);
}

/* A small deterministic generator (xorshift64*). */
static uint64_t next_rand(uint64_t *s)
{
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 0x2545F4914F6CDD1Dull;
}

static const char *pick(uint64_t *s, const char *const *pool, size_t n)
{
    return pool[next_rand(s) % n];
}

#define PICK(s, pool) pick(s, pool, sizeof pool / sizeof pool[0])

/* Requests put together from good and bad values of every field. Each
 * pool lists its good values (ones the scanner reads) first. */
static void test_generated(tally *t, size_t count)
{
    static const char *const ops[] = {"\"get\"", "\"ping\"", "\"GET\"", "\"ge\\u0074\"", "1",
                                      "null", "\"get \""};
    static const char *const ids[] = {
        "0", "7", "-7", "123456789012345678", "-123456789012345678", "\"abc\"", "\"\"",
        "\"a/b c\"", "\"0123456789012345678901234567890123456789012345678901234567890123\"",
        /* bad */
        "-0", "1234567890123456789", "99999999999999999999", "1.5", "1e3", "\"a\\\"b\"",
        "\"\xc3\xa9\"", "true", "null", "\"\\u00e9\"", "[1]", "{}", "- 1", "01",
        "\"01234567890123456789012345678901234567890123456789012345678901234\""};
    static const char *const kernels[] = {
        "\"softmax\"", "\"softmax_bwd\"", "\"log_softmax\"", "\"log_softmax_bwd\"",
        /* bad */
        "\"SOFTMAX\"", "\"nope\"", "1", "\"softmax\\u0000\"", "\"\""};
    static const char *const dtypes[] = {"\"fp16\"", "\"bf16\"", "\"fp32\"", "\"half\"",
                                         "\"float\"", "\"float16\"", "\"bfloat16\"",
                                         "\"float32\"",
                                         /* bad */
                                         "\"int8\"", "\"\"", "5", "\"Fp16\""};
    static const char *const rows[] = {
        "1", "4096", "8192", "2147483647", "262144", "65536",
        /* bad */
        "2147483648", "0", "-1", "-0", "01", "1.0", "1e3", "1E3", "\"5\"",
        "99999999999999999999", "4096.5", "true"};
    static const char *const cols[] = {
        "1", "32000", "2147483392", "50257", "1048576", "100000000", "128256", "4096",
        /* bad */
        "2147483393", "0", "1e2", "-5", "32000.0", "0x10"};
    static const char *const gpus[] = {
        "0", "1023", "\"5e0c5e0c5e0c5e0c\"", "\"5E0C5E0C5E0C5E0C\"", "\"5e0c5e0c5e0c5e0g\"",
        "\"5e0c5e0c5e0c5e0\"", "\"NVIDIA H200\"", "\"hw993c000000000001\"",
        "\"0123456789012345678901234567890123456789012345678901234567890123456789012345678"
        "901234567890123456789012345678901234567890123456\"",  /* 127 bytes */
        /* bad */
        "1024", "-1", "\"\"", "1.5", "null", "\"\\u0041\"", "007",
        "\"0123456789012345678901234567890123456789012345678901234567890123456789012345678"
        "9012345678901234567890123456789012345678901234567\""}; /* 128 bytes */
    static const char *const bools[] = {"true", "false", "1", "\"true\"", "null", "tru"};
    static const char *const others[] = {"\"budget\":5", "\"x\":1", "\"Rows\":1", "\"limit\":1",
                                         "\"job\":1", "\"\":0"};
    /* Between tokens: mostly nothing, sometimes JSON whitespace, rarely
     * something JSON does not take for whitespace. */
    static const char *const gaps[] = {"", "", "", "", "", "", " ", " ", "\t", "\r", "\n",
                                       "  ", "\f", "\v", "\xc2\xa0"};
#define POOL(p, good) p, sizeof p / sizeof p[0], good
    static const struct {
        const char *key;
        const char *const *pool;
        size_t n, good;
    } fields[] = {
        {"op", POOL(ops, 1)},         {"id", POOL(ids, 9)},       {"kernel", POOL(kernels, 4)},
        {"dtype", POOL(dtypes, 8)},   {"rows", POOL(rows, 6)},    {"cols", POOL(cols, 8)},
        {"gpu", POOL(gpus, 9)},       {"tune_if_missing", POOL(bools, 2)},
    };
#undef POOL
    const size_t nfields = sizeof fields / sizeof fields[0];
    uint64_t s = 0x9E3779B97F4A7C15ull;
    char line[2048];
    for (size_t k = 0; k < count; k++) {
        /* Clean lines (good values only, no odd whitespace, no repeats)
         * half of the time, so that many are accepted. */
        bool clean = next_rand(&s) % 2 == 0;
        size_t order[16], n = 0;
        for (size_t f = 0; f < nfields; f++)
            if (f == 0 || f == 4 || f == 5 || next_rand(&s) % 3 == 0)
                order[n++] = f;
        if (!clean && next_rand(&s) % 8 == 0)
            order[n++] = next_rand(&s) % nfields; /* a repeat */
        if (!clean && next_rand(&s) % 8 == 0)
            order[n++] = nfields;                 /* another field */
        if (!clean && next_rand(&s) % 10 == 0) { /* rows, cols or op may go missing */
            size_t gone = next_rand(&s) % n;
            order[gone] = order[--n];
        }
        for (size_t i = n; i > 1; i--) {
            size_t j = next_rand(&s) % i, tmp = order[i - 1];
            order[i - 1] = order[j];
            order[j] = tmp;
        }
        size_t o = 0;
#define GAP() (clean ? (next_rand(&s) % 4 == 0 ? " " : "") : PICK(&s, gaps))
        o += (size_t)snprintf(line + o, sizeof line - o, "%s{", GAP());
        for (size_t i = 0; i < n; i++) {
            const char *sep = i > 0 ? "," : "";
            if (order[i] == nfields) {
                o += (size_t)snprintf(line + o, sizeof line - o, "%s%s%s%s", GAP(), sep, GAP(),
                                      PICK(&s, others));
                continue;
            }
            size_t v = next_rand(&s) % (clean ? fields[order[i]].good : fields[order[i]].n);
            const char *g1 = GAP(), *g2 = GAP(), *g3 = GAP(), *g4 = GAP();
            o += (size_t)snprintf(line + o, sizeof line - o, "%s%s%s\"%s\"%s:%s%s", g1, sep, g2,
                                  fields[order[i]].key, g3, g4, fields[order[i]].pool[v]);
        }
        o += (size_t)snprintf(line + o, sizeof line - o, "%s}%s", GAP(), GAP());
#undef GAP
        if (o >= sizeof line)
            o = sizeof line - 1;
        check(t, line, o, FAST_ANY);
    }
}

/* Every one-byte change of a few valid lines. */
static void test_mutations(tally *t)
{
    static const char *const seeds[] = {
        "{\"op\":\"get\",\"dtype\":\"fp16\",\"rows\":4096,\"cols\":32000,\"gpu\":\"5e0c5e0c5e0c5e0c\"}",
        "{\"id\":-12,\"op\":\"get\",\"rows\":1,\"cols\":10,\"gpu\":7,\"tune_if_missing\":false}",
        "{ \"op\": \"get\", \"kernel\": \"log_softmax\", \"rows\": 20, \"cols\": 30, \"id\": \"x\" }",
        "{\"op\":\"get\",\"rows\":2147483647,\"cols\":128,\"dtype\":\"half\",\"gpu\":\"NVIDIA H200\"}",
    };
    static const char bytes[] = {'"', '\\', ',', ':', '{', '}', ' ', '\t', '0', '1', '9', '-',
                                 '+', 'e', 'E', '.', 'x', 'u', '\0', (char)0x80, (char)0xff,
                                 '\n', '\f', 't'};
    char line[512];
    for (size_t k = 0; k < sizeof seeds / sizeof seeds[0]; k++) {
        const char *seed = seeds[k];
        size_t n = strlen(seed);
        check(t, seed, n, FAST_YES);
        for (size_t i = 0; i <= n; i++) {
            check(t, seed, i, i == n ? FAST_YES : FAST_ANY); /* truncated */
            if (i < n) {                                     /* one byte deleted */
                memcpy(line, seed, i);
                memcpy(line + i, seed + i + 1, n - i - 1);
                check(t, line, n - 1, FAST_ANY);
            }
            for (size_t b = 0; b < sizeof bytes; b++) {
                memcpy(line, seed, i); /* one byte inserted */
                line[i] = bytes[b];
                memcpy(line + i + 1, seed + i, n - i);
                check(t, line, n + 1, FAST_ANY);
                if (i < n) { /* one byte replaced */
                    memcpy(line, seed, n);
                    line[i] = bytes[b];
                    check(t, line, n, FAST_ANY);
                }
            }
        }
    }
}

int main(void)
{
    tally t = {0};
    test_accepted(&t);
    test_edges(&t);
    tally gen = {0};
    test_generated(&gen, 200000);
    /* The generator must exercise both sides, or it proves nothing. */
    EXPECT(gen.fast > gen.lines / 10 && gen.fast < gen.lines * 9 / 10,
           "generated lines: %zu of %zu taken by the scanner", gen.fast, gen.lines);
    tally mut = {0};
    test_mutations(&mut);
    printf("lines checked: %zu hand-written (%zu taken by the scanner), %zu generated (%zu), "
           "%zu mutated (%zu)\n",
           t.lines, t.fast, gen.lines, gen.fast, mut.lines, mut.fast);
    printf("%d failures\n", failures);
    return failures == 0 ? 0 : 1;
}
