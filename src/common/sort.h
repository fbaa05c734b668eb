/* sort.h: comparison functions for qsort of the timing arrays. */
#ifndef TUNED_COMMON_SORT_H
#define TUNED_COMMON_SORT_H

/* Ascending doubles. */
int tuned__cmp_double(const void *a, const void *b);

#endif
