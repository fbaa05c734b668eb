/* err.c: formatting of tuned__err messages and the public tuned_strerror(). */
#include "src/common/err.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "tuned.h"

int tuned__errf(tuned__err *e, int code, const char *fmt, ...)
{
    if (e == NULL)
        return code;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->msg, sizeof e->msg, fmt, ap);
    va_end(ap);
    e->code = code;
    return code;
}

int tuned__err_prefix(tuned__err *e, int code, const char *fmt, ...)
{
    if (e == NULL)
        return code;
    char head[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(head, sizeof head, fmt, ap);
    va_end(ap);
    char old[TUNED__ERR_MSG];
    memcpy(old, e->msg, sizeof old);
    snprintf(e->msg, sizeof e->msg, "%s%s", head, old);
    if (e->code == 0)
        e->code = code;
    return e->code;
}

void tuned__err_clear(tuned__err *e)
{
    if (e != NULL) {
        e->code = 0;
        e->msg[0] = '\0';
    }
}

const char *tuned_strerror(int err)
{
    switch (err) {
    case TUNED_OK: return "success";
    case TUNED_EINVAL: return "invalid argument";
    case TUNED_ENOMEM: return "out of memory";
    case TUNED_ENODRIVER: return "no CUDA driver found";
    case TUNED_ENONVRTC: return "no NVRTC library found";
    case TUNED_ENODEV: return "no such GPU";
    case TUNED_ECUDA: return "CUDA driver call failed";
    case TUNED_ECOMPILE: return "kernel compile failed";
    case TUNED_EWRONG: return "kernel computed a wrong result";
    case TUNED_ESTORE: return "store error";
    case TUNED_ENOTFOUND: return "not found";
    case TUNED_ESCHEMA: return "store schema mismatch";
    case TUNED_EIO: return "I/O error";
    case TUNED_ETIMEOUT: return "timed out";
    case TUNED_EUNSUPPORTED: return "not supported";
    case TUNED_ENOSPACE: return "no valid variant for this shape";
    case TUNED_ETUNE: return "tune failed";
    default: return "unknown error";
    }
}

const char *tuned_version(void)
{
    return TUNED_VERSION_STRING;
}
