/* log.h: one line to stderr with a prefix naming who speaks ("tuned
 * serve: ..."), unless quiet. The daemon's parts log through it, so every
 * line has the same form and length cap. */
#ifndef TUNED_COMMON_LOG_H
#define TUNED_COMMON_LOG_H

#include <stdbool.h>

#include "src/common/err.h"

/* Longest line written; a longer message is cut. */
#define TUNED__LOG_LINE 1024

void tuned__logf(bool quiet, const char *prefix, const char *fmt, ...) TUNED__PRINTF(3, 4);

#endif
