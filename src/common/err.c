/* err.c: formatting of tuned__err messages and the public tuned_strerror()
 * (made from the one error table, TUNED_ERRNO_MAP in tuned.h). */
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

/* Made from TUNED_ERRNO_MAP (tuned.h): a code added there is named here,
 * and two codes of one value fail to compile (duplicate case labels). */
#define STRERROR_CASE(name, value, text) case TUNED_##name: return text;

const char *tuned_strerror(int err)
{
    switch (err) {
    case TUNED_OK: return "success";
    TUNED_ERRNO_MAP(STRERROR_CASE)
    default: return "unknown error";
    }
}

#undef STRERROR_CASE

const char *tuned_version(void)
{
    return TUNED_VERSION_STRING;
}
