/* priority.c: the calling thread at idle CPU priority (priority.h).
 *
 * Linux schedules threads, not processes: sched_setscheduler() and
 * setpriority() given the thread's own id change that thread only, which
 * is what the daemon's background threads need; a single-threaded command
 * (`tuned import`) lowers itself the same way. */
#include "src/common/priority.h"

#include <errno.h>
#include <sched.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
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
