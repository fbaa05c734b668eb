/* priority.c: the calling thread at idle CPU priority (priority.h).
 *
 * Linux schedules threads, not processes: sched_setscheduler() and
 * setpriority() given the thread's own id change that thread only, which
 * is what the daemon's background threads need; a single-threaded command
 * (`tuned import`) lowers itself the same way. The pacer yields from a
 * bulk loop on such a thread every TUNED__PACE_NS, checked against the
 * vDSO clock, so a loop of small items pays a clock read per item and a
 * system call per interval. */
#include "src/common/priority.h"

#include <errno.h>
#include <sched.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "tuned.h"

#define FALLBACK_NICE 19

int tuned__thread_idle(tuned__err *e)
{
    pid_t tid = (pid_t)syscall(SYS_gettid);
    struct sched_param sp = {.sched_priority = 0};
    if (sched_setscheduler(tid, SCHED_IDLE, &sp) == 0)
        return 0;
    int idle_errno = errno;
    if (setpriority(PRIO_PROCESS, (id_t)tid, FALLBACK_NICE) == 0)
        return 0;
    return tuned__errf(e, TUNED_EIO, "lowering the CPU priority: SCHED_IDLE: %s; nice %d: %s",
                       strerror(idle_errno), FALLBACK_NICE, strerror(errno));
}

static unsigned long long monotonic_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts); /* vDSO: no system call */
    return (unsigned long long)ts.tv_sec * 1000000000ull + (unsigned long long)ts.tv_nsec;
}

void tuned__pacer_init(tuned__pacer *p)
{
    /* pid 0: the calling thread, for both calls on Linux. */
    int policy = sched_getscheduler(0);
    errno = 0;
    int nice = getpriority(PRIO_PROCESS, 0);
    p->idle = policy == SCHED_IDLE || (errno == 0 && nice > 0);
    p->last_ns = p->idle ? monotonic_ns() : 0;
    p->yields = 0;
}

void tuned__pace(tuned__pacer *p)
{
    if (!p->idle)
        return;
    unsigned long long now = monotonic_ns();
    if (now - p->last_ns < TUNED__PACE_NS)
        return;
    sched_yield();
    p->yields++;
    p->last_ns = monotonic_ns();
}
