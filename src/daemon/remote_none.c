/* remote_none.c: remote.h in a build without the fleet tier (no hiredis):
 * no --remote, and every call is a no-op. */
#include <stdio.h>

#include "src/daemon/remote.h"

bool tuned__remote_available(void)
{
    return false;
}

int tuned__remote_open(tuned__daemon *d, tuned__err *e)
{
    if (d->o->remote[0] == '\0')
        return 0;
    return tuned__errf(e, TUNED_EINVAL, "--remote: this tuned was built without the fleet tier "
                       "(no hiredis; meson setup -Dfleet=enabled)");
}

bool tuned__remote_usable(tuned__daemon *d)
{
    (void)d;
    return false;
}

bool tuned__remote_read_through(tuned__daemon *d, const tuned__request *r, size_t slot,
                                tuned__later *later)
{
    (void)d, (void)r, (void)slot, (void)later;
    return false;
}

void tuned__remote_cancel(tuned__daemon *d, tuned__later *later)
{
    (void)d;
    later->pending = false;
}

void tuned__remote_tune(tuned__daemon *d, uint64_t job, size_t slot, const tuned__shape *shape,
                        bool retune)
{
    (void)slot, (void)shape, (void)retune;
    tuned__jobs_ungate(d->jobs, job);
}

bool tuned__remote_queue(tuned__daemon *d, const tuned__request *r, const char *hwclass,
                         tuned__later *later)
{
    (void)d, (void)r, (void)hwclass, (void)later;
    return false;
}

void tuned__remote_hwclass_name(uint64_t hwclass_fp, char *out, size_t n)
{
    snprintf(out, n, "hw%016llx", (unsigned long long)hwclass_fp);
}

void tuned__remote_tick(tuned__daemon *d)
{
    (void)d;
}

void tuned__remote_put_pending(tuned__daemon *d, struct tuned__index *ix)
{
    (void)d;
    (void)ix;
}

void tuned__remote_stop(tuned__daemon *d)
{
    (void)d;
}

bool tuned__remote_close(tuned__daemon *d)
{
    (void)d;
    return true;
}

void tuned__remote_free(tuned__daemon *d)
{
    (void)d;
}

void tuned__remote_stats(tuned__daemon *d, tuned__buf *out)
{
    (void)d, (void)out;
}

int tuned__remote_forget(const tuned__remote_forget_req *q, size_t *removed, tuned__err *e)
{
    (void)q;
    *removed = 0;
    return tuned__errf(e, TUNED_EINVAL, "--remote: this tuned was built without the fleet tier "
                       "(no hiredis)");
}
