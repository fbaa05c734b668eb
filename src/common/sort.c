/* sort.c: qsort comparisons (sort.h). */
#include "src/common/sort.h"

int tuned__cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}
