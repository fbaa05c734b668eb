/* clock.h: the two clocks tuned reads: a monotonic one for deadlines and
 * durations, and UTC wall time written as ISO 8601 dates
 * ("YYYY-MM-DDTHH:MM:SSZ"), the form every record, history entry and
 * export carries. */
#ifndef TUNED_COMMON_CLOCK_H
#define TUNED_COMMON_CLOCK_H

#include <stddef.h>
#include <time.h>

/* Seconds on CLOCK_MONOTONIC. */
double tuned__now_s(void);

/* Longest date plus NUL. */
#define TUNED__DATE_TEXT 21

/* Writes t as a date into buf (at least TUNED__DATE_TEXT bytes). */
void tuned__date_format(char *buf, size_t n, time_t t);

/* The current time as a date. */
void tuned__date_now(char *buf, size_t n);

/* Parses a date (exactly that form, fields in range) into *t.
 * 0 or TUNED_EINVAL. */
int tuned__date_parse(const char *s, time_t *t);

#endif
