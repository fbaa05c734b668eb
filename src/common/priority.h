/* priority.h: background work at idle CPU priority.
 *
 * A bulk job (an import, a rebuild of the daemon's index) must not take a
 * core from the daemon's loop or its clients on a small machine: at an
 * equal share the scheduler gives it a third of two cores, and a client's
 * request then waits behind it. At SCHED_IDLE it runs on what the others
 * leave, and any other task that wakes takes its core at once. */
#ifndef TUNED_COMMON_PRIORITY_H
#define TUNED_COMMON_PRIORITY_H

#include "src/common/err.h"

/* Puts the calling thread (and the threads and processes it starts later)
 * at SCHED_IDLE; where the system refuses that, at nice 19. Fails only
 * when both are refused. A thread cannot come back from either without
 * CAP_SYS_NICE, so call it on a thread (or in a process) that runs only
 * background work. */
int tuned__thread_idle(tuned__err *e);

#endif
