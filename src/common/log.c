/* log.c: prefixed log lines to stderr (log.h). */
#include "src/common/log.h"

#include <stdarg.h>
#include <stdio.h>

void tuned__logf(bool quiet, const char *prefix, const char *fmt, ...)
{
    if (quiet)
        return;
    char line[TUNED__LOG_LINE];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    fprintf(stderr, "%s: %s\n", prefix, line);
}
