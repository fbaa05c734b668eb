/* fuzz_protocol.c: libFuzzer target for the daemon's request parser and
 * reply writer (src/daemon/protocol.c). Built and run by
 * tests/fuzz/fuzz_protocol.sh (clang -fsanitize=fuzzer,address,undefined).
 *
 * For any bytes: tuned__proto_parse() must return (no crash, no leak, no
 * undefined behaviour), and the reply built from its result (an error
 * with the echoed id, or a reply echoing the parsed fields) must be one
 * line of valid JSON. The JSON string writer must turn any bytes into a
 * valid JSON string. The fast `get` scanner (protocol_get.c) must accept
 * only what the jansson path accepts, with the same request. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "src/daemon/protocol.h"
#include "src/daemon/protocol_get.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void must_be_one_json_line(const tuned__buf *b)
{
    if (b->oom || b->len == 0 || b->data[b->len - 1] != '\n' ||
        memchr(b->data, '\n', b->len - 1) != NULL)
        abort();
    json_error_t jerr;
    json_t *v = json_loadb(b->data, b->len, 0, &jerr);
    if (!json_is_object(v))
        abort();
    json_decref(v);
}

/* What the scanner accepts, jansson accepts the same way. */
static void fast_path_agrees(const uint8_t *data, size_t size)
{
    tuned__request fast, json;
    tuned__proto_error pe;
    if (!tuned__proto_parse_get_fast((const char *)data, size, &fast))
        return;
    if (tuned__proto_parse_json((const char *)data, size, &json, &pe) != 0 ||
        memcmp(&fast, &json, sizeof fast) != 0)
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    tuned__request r;
    tuned__proto_error pe;
    tuned__buf b = {0};
    fast_path_agrees(data, size);
    if (tuned__proto_parse((const char *)data, size, &r, &pe) != 0) {
        if (pe.code <= TUNED__PE_NONE || pe.code >= TUNED__PE_COUNT)
            abort();
        tuned__reply_error(&b, r.id, pe.code, pe.message);
    } else {
        if (r.op < 0 || r.op >= TUNED__OP_COUNT)
            abort();
        tuned__reply_begin(&b, r.id);
        tuned__json_key(&b, "op", false);
        tuned__json_str(&b, tuned__op_name(r.op));
        tuned__json_key(&b, "gpu", false);
        tuned__json_str(&b, r.gpu.name);
        tuned__json_key(&b, "rows", false);
        tuned__json_u64(&b, r.shape.rows);
        tuned__json_key(&b, "time_s", false);
        tuned__json_double(&b, r.time_s);
        tuned__reply_end(&b);
    }
    must_be_one_json_line(&b);
    /* the string writer on the raw bytes */
    b.len = 0;
    tuned__buf_add(&b, "{\"s\":", 5);
    tuned__json_strn(&b, (const char *)data, size);
    tuned__buf_add(&b, "}\n", 2);
    must_be_one_json_line(&b);
    tuned__buf_free(&b);
    return 0;
}
