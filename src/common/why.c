/* why.c: reason lists (why.h). */
#include "src/common/why.h"

#include <stdarg.h>
#include <stdio.h>

tuned__why tuned__why_start(char *buf, size_t n)
{
    tuned__why w = {.buf = buf, .n = n};
    if (buf != NULL && n > 0)
        buf[0] = '\0';
    return w;
}

void tuned__why_add(tuned__why *w, const char *fmt, ...)
{
    w->count++;
    if (w->buf == NULL || w->n == 0 || w->used + 1 >= w->n)
        return;
    char item[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(item, sizeof item, fmt, ap);
    va_end(ap);
    int k = snprintf(w->buf + w->used, w->n - w->used, "%s%s", w->count > 1 ? "; " : "", item);
    w->used += k > 0 ? (size_t)k : 0;
    if (w->used >= w->n)
        w->used = w->n - 1;
}
