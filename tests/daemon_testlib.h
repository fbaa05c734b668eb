/* daemon_testlib.h: what the daemon's C tests share: a real `tuned serve`
 * (the binary tuned_exe) on a socket and store under root/NAME, a client
 * that sends one JSON request line and reads one reply line with a
 * timeout, and the waits on jobs. Everything waits with a deadline; a
 * failed check is counted by expect.h's EXPECT (shared across the files:
 * include this header instead of expect.h). */
#ifndef TUNED_TESTS_DAEMON_TESTLIB_H
#define TUNED_TESTS_DAEMON_TESTLIB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <jansson.h>

#define EXPECT_SHARED
#include "tests/expect.h"

extern int case_failures;     /* failures before the running case */
extern const char *tuned_exe; /* the built binary */
extern char root[256];        /* the scratch root: each daemon has root/NAME */

/* The test-only fake GPU (a -Dtest_hooks=true build), its variants timed
 * at 1 ms. */
extern const char *const FAKE_FAST[];

double now_s(void);
void sleep_ms(int ms);

/* ---- a daemon ---- */

typedef struct daemon_t {
    pid_t pid;
    char dir[512], sock[108], db[512], log[512];
    int dumped;
} daemon_t;

/* Names d's folder, socket, store and log under root/name. */
void daemon_init(daemon_t *d, const char *name);
/* Starts `tuned serve` with env ("K=V", NULL-ended, added to ours less any
 * TUNED_TEST_*) and args; true once its socket accepts (30 s at most). */
bool daemon_start(daemon_t *d, const char *const *env, const char *const *args);
/* For a daemon that must refuse to start: its exit status (-1 when it ran
 * on for 30 s and was killed). */
int daemon_start_fails(daemon_t *d, const char *const *env);
/* SIGTERM, then its exit status (-1: killed or died of a signal; -2: a
 * sanitizer report in its log). */
int daemon_stop(daemon_t *d);
void daemon_kill9(daemon_t *d);
bool log_has(daemon_t *d, const char *needle);
/* Prints d's log to stderr, once. */
void dump_log(daemon_t *d);

/* ---- a client ---- */

typedef struct client {
    int fd;
    char *buf;
    size_t len, cap;
} client;

bool cl_open(client *c, const daemon_t *d);
bool cl_open_fd(client *c, int fd);
void cl_close(client *c);
bool cl_send(client *c, const char *s, size_t n);
char *cl_line(client *c, double timeout_s);
bool cl_eof(client *c, double timeout_s);
json_t *cl_call(client *c, const char *req);
json_t *call_fmt(client *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* A reply's "ok"; its error code ("" without one); a string member ("" if
 * absent); an integer member (0 if absent). */
bool is_ok(const json_t *v);
const char *err_code(const json_t *v);
const char *str(const json_t *v, const char *key);
long long integer(const json_t *v, const char *key);

/* ---- jobs ---- */

/* A tune of rows x cols with extra members (",\"budget\":8"); its job id,
 * -1 when refused. */
long long submit_tune(client *c, uint64_t rows, uint64_t cols, const char *extra);
json_t *wait_job(client *c, long long id, double timeout_s);
json_t *wait_job_probing(client *c, long long id, double timeout_s, const char *probe,
                         double *worst);
bool job_done(client *c, long long id, double timeout_s);
bool job_is(client *c, long long id, const char *state);
bool job_becomes(client *c, long long id, const char *state, double timeout_s);
bool job_progressed(client *c, long long id, double timeout_s);
bool both_running(client *c, long long a, long long b, int polls, int ms);

/* ---- a case ---- */

void start_case(daemon_t *d, client *c, const char *name, const char *const *env,
                const char *const *args);
void restart_case(daemon_t *d, client *c, const char *const *env, const char *const *args);
bool get_source_is(client *c, const char *req, const char *source);
void end_case(daemon_t *d, client *c);

/* Around a case of a program's list: case_start() counts its failures
 * apart (case_failures) and returns its start; case_report() prints "ok:
 * NAME (T s)" or "FAIL: ...". */
double case_start(void);
void case_report(const char *name, double start);

/* The real GPUs a daemon finds (0: none), printed, and GPU 0's
 * architecture in *arch. */
size_t real_gpus(int *arch);

#endif
