/* expect.h: the unit tests' one assertion. EXPECT(cond, fmt, ...) counts a
 * failure in `failures` and prints where and why, then the test goes on, so
 * one run reports every broken case; main returns failures != 0. */
#ifndef TUNED_TESTS_EXPECT_H
#define TUNED_TESTS_EXPECT_H

#include <stdio.h>

/* A test whose EXPECTs run in several threads defines EXPECT_ATOMIC first. */
#ifdef EXPECT_ATOMIC
#include <stdatomic.h>
static atomic_int failures;
#else
static int failures;
#endif

#define EXPECT(cond, ...)                                                                       \
    do {                                                                                        \
        if (!(cond)) {                                                                          \
            failures++;                                                                         \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                                \
            fprintf(stderr, __VA_ARGS__);                                                       \
            fprintf(stderr, "\n");                                                              \
        }                                                                                       \
    } while (0)

#endif
