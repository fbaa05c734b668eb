/* why.h: a reason list, "driver 13000 (here 12080); nvrtc 13.0 (here
 * 12.8)": the explanations of why a record does not match, built item by
 * item into the caller's buffer, cut to fit, always NUL-terminated. */
#ifndef TUNED_COMMON_WHY_H
#define TUNED_COMMON_WHY_H

#include <stddef.h>

#include "src/common/err.h"

typedef struct tuned__why {
    char *buf;     /* may be NULL: only count */
    size_t n, used;
    int count;     /* items added, whether they fit or not */
} tuned__why;

/* Starts a list in buf (n bytes; buf may be NULL), emptying it. */
tuned__why tuned__why_start(char *buf, size_t n);

/* Appends one formatted item, "; " between items. */
void tuned__why_add(tuned__why *w, const char *fmt, ...) TUNED__PRINTF(2, 3);

#endif
