/* expect.h: the one assertion header of the C tests.
 *
 *   EXPECT(cond)                prints where and the condition's text
 *   EXPECT(cond, fmt, ...)      prints where and a message instead
 *   EXPECT_RC(expr, want, e)    expr returns want (0 or a TUNED_E* code);
 *                               else prints both codes and e->msg
 *   EXPECT_OK(expr, e)          EXPECT_RC(expr, 0, e)
 *   EXPECT_MSG(e, needle)       e->msg holds needle
 *
 * Each failure is counted in `failures` and the test goes on, so one run
 * reports every broken case; main returns failures != 0. A test that
 * cannot check what it is for (no GPU, no NVRTC, a build without test
 * hooks) exits TEST_SKIP, which meson reports as skipped, never 0.
 *
 * expect_done(name, dir) ends a test program: its scratch directory, its
 * summary line and its exit status.
 *
 * The count is one per program: a test of one file has its own; one whose
 * EXPECTs run in several threads defines EXPECT_ATOMIC first; one of
 * several files (a *_testlib.c beside it) defines EXPECT_SHARED first in
 * each, and its testlib defines `int failures`. */
#ifndef TUNED_TESTS_EXPECT_H
#define TUNED_TESTS_EXPECT_H

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tuned.h"

#if defined(EXPECT_ATOMIC)
#include <stdatomic.h>
static atomic_int failures;
#elif defined(EXPECT_SHARED)
extern int failures;
#else
static int failures;
#endif

/* The exit status meson reads as "skipped". */
#define TEST_SKIP 77

/* Whether this build has the test hooks (-Dtest_hooks=true): the fake GPU,
 * the planted fault, the store's commit hook. */
#ifdef TUNED_TEST_HOOKS
#define HAVE_TEST_HOOKS 1
#else
#define HAVE_TEST_HOOKS 0
#endif

static inline void expect_fail_(const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static inline void expect_fail_(const char *file, int line, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "FAIL %s:%d: ", file, line);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
}

/* EXPECT(cond) or EXPECT(cond, fmt, ...) (up to 15 values): the argument
 * count picks the form; the text of all the arguments goes first, for the
 * form without a message. */
#define EXPECT(...)                                                                          \
    EXPECT_PICK_(__VA_ARGS__, EXPECT_SAY_, EXPECT_SAY_, EXPECT_SAY_, EXPECT_SAY_,          \
                 EXPECT_SAY_, EXPECT_SAY_, EXPECT_SAY_, EXPECT_SAY_, EXPECT_SAY_, EXPECT_SAY_, \
                 EXPECT_SAY_, EXPECT_SAY_, EXPECT_SAY_, EXPECT_SAY_, EXPECT_SAY_, EXPECT_SAY_, \
                 EXPECT_COND_, 0)(#__VA_ARGS__, __VA_ARGS__)
#define EXPECT_PICK_(a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15, a16, \
                     a17, form, ...)                                                         \
    form
#define EXPECT_COND_(text, cond)                                                             \
    do {                                                                                     \
        if (!(cond)) {                                                                       \
            failures++;                                                                      \
            expect_fail_(__FILE__, __LINE__, "%s", text);                                    \
        }                                                                                    \
    } while (0)
#define EXPECT_SAY_(text, cond, ...)                                                         \
    do {                                                                                     \
        if (!(cond)) {                                                                       \
            failures++;                                                                      \
            expect_fail_(__FILE__, __LINE__, __VA_ARGS__);                                   \
        }                                                                                    \
    } while (0)

#define EXPECT_RC(expr, want, e)                                                             \
    do {                                                                                     \
        int rc_ = (expr), want_ = (want);                                                    \
        if (rc_ != want_) {                                                                  \
            failures++;                                                                      \
            expect_fail_(__FILE__, __LINE__, "%s returned %d (%s), expected %d (%s): %s",    \
                         #expr, rc_, tuned_strerror(rc_), want_, tuned_strerror(want_),      \
                         (e)->msg);                                                          \
        }                                                                                    \
    } while (0)

#define EXPECT_OK(expr, e) EXPECT_RC(expr, 0, e)

#define EXPECT_MSG(e, needle)                                                                \
    do {                                                                                     \
        if (strstr((e)->msg, (needle)) == NULL) {                                            \
            failures++;                                                                      \
            expect_fail_(__FILE__, __LINE__, "message \"%s\" lacks \"%s\"", (e)->msg,        \
                         (needle));                                                          \
        }                                                                                    \
    } while (0)

/* Removes the program's scratch directory dir (NULL: none) unless a check
 * failed (then it is kept for a look), prints the failure count or "NAME:
 * all checks passed", and returns the exit status (1 after a failure). */
static inline int expect_done(const char *name, const char *dir)
{
    int n = failures;
    if (dir != NULL && n != 0) {
        fprintf(stderr, "%s: kept %s for inspection\n", name, dir);
    } else if (dir != NULL) {
        char cmd[1100];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
        if (system(cmd) != 0)
            fprintf(stderr, "%s: could not remove %s\n", name, dir);
    }
    if (n != 0) {
        fprintf(stderr, "%s: %d failure(s)\n", name, n);
        return 1;
    }
    printf("%s: all checks passed\n", name);
    return 0;
}

#endif
