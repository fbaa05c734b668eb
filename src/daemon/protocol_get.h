/* protocol_get.h: the fast path of the request parser, for `get` lines.
 *
 * Under load nearly every request line is a `get` of one shape, and
 * building a jansson tree for it took a quarter of the event loop's CPU.
 * This scanner reads such a line directly. It accepts only lines it fully
 * understands and that the jansson path (tuned__proto_parse_json) would
 * accept too, and fills the request exactly as that path does; anything
 * else (another op, an unknown or repeated field, an escape, a character
 * outside printable ASCII, a number with a fraction or an exponent, any
 * value the jansson path would refuse) is declined, and the caller parses
 * the line with jansson, so error replies never come from here.
 * tests/test_protocol_get.c checks the two paths against each other. */
#ifndef TUNED_DAEMON_PROTOCOL_GET_H
#define TUNED_DAEMON_PROTOCOL_GET_H

#include <stdbool.h>
#include <stddef.h>

#include "src/daemon/protocol.h"

/* True when line (len bytes, need not be NUL-ended) is a valid `get`
 * request of the shape this scanner reads, with req filled as
 * tuned__proto_parse_json fills it; false otherwise (req is then
 * unspecified). */
bool tuned__proto_parse_get_fast(const char *line, size_t len, tuned__request *req);

#endif
