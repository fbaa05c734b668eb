/* err.h: the error object every fallible internal function fills.
 *
 * A function returns 0 or a negative TUNED_E* code and, when it fails,
 * writes a one-line message with its context into a tuned__err the caller
 * passed (which may be NULL when the caller does not care). Callers going
 * up the stack prepend their own context with tuned__err_prefix(), so the
 * final line reads like "nvrtc: softmax w8.r1.v8: error: ...". */
#ifndef TUNED_COMMON_ERR_H
#define TUNED_COMMON_ERR_H

#include <stddef.h>

#define TUNED__ERR_MSG 2048

typedef struct tuned__err {
    int code;
    char msg[TUNED__ERR_MSG];
} tuned__err;

#if defined(__GNUC__)
#define TUNED__PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define TUNED__PRINTF(a, b)
#endif

/* Records code and the formatted message in e (if e is not NULL) and
 * returns code, so that call sites read `return tuned__errf(e, ...);`. */
int tuned__errf(tuned__err *e, int code, const char *fmt, ...) TUNED__PRINTF(3, 4);

/* Puts a formatted context in front of e's message; returns e->code
 * (or code when e is NULL). */
int tuned__err_prefix(tuned__err *e, int code, const char *fmt, ...) TUNED__PRINTF(3, 4);

/* Clears e. */
void tuned__err_clear(tuned__err *e);

#endif
