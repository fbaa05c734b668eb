/* priority.h: background work at idle CPU priority.
 *
 * A bulk job (an import, a rebuild of the daemon's index) must not take a
 * core from the daemon's loop or its clients on a small machine: at an
 * equal share the scheduler gives it a third of two cores, and a client's
 * request then waits behind it. At SCHED_IDLE it runs on what the others
 * leave, and any other task that wakes takes its core at once. */
#ifndef TUNED_COMMON_PRIORITY_H
#define TUNED_COMMON_PRIORITY_H

#include <stdbool.h>

#include "src/common/err.h"

/* Puts the calling thread (and the threads and processes it starts later)
 * at SCHED_IDLE; where the system refuses that, at nice 19. Fails only
 * when both are refused. A thread cannot come back from either without
 * CAP_SYS_NICE, so call it on a thread (or in a process) that runs only
 * background work. */
int tuned__thread_idle(tuned__err *e);

/* Paces a bulk loop on a thread at idle priority. A woken task does not
 * take the CPU from a running one at once on every kernel: with lazy
 * preemption (Linux 6.13 and later, the default of many builds) the
 * running task keeps it until it next enters the kernel or until the
 * next timer tick, 4 ms at HZ=250, and a bulk loop in user space may not
 * enter the kernel for that long. So the loop calls tuned__pace() between
 * items, which yields the CPU once a pace interval has passed since the
 * last yield. On a thread at normal priority it does nothing. */
typedef struct tuned__pacer {
    bool idle;                  /* the thread runs at SCHED_IDLE or a positive nice */
    unsigned long long last_ns; /* CLOCK_MONOTONIC of the last yield */
    unsigned long yields;       /* how many times it yielded */
} tuned__pacer;

/* How long a paced loop runs between yields. */
#define TUNED__PACE_NS 100000ull

/* Reads the calling thread's priority; call it on the thread that paces. */
void tuned__pacer_init(tuned__pacer *p);

void tuned__pace(tuned__pacer *p);

#endif
