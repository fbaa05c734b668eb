/* probe_shape.c: the bench probes' "[KERNEL:]ROWSxCOLS" argument
 * (probe_shape.h). */
#include "probe_shape.h"

#include <stdio.h>
#include <string.h>

int probe_parse_shape(const char *text, tuned__shape *s)
{
    unsigned long long r, c;
    char tail;
    const char *colon = strchr(text, ':');
    if (colon != NULL) {
        char name[32];
        size_t len = (size_t)(colon - text);
        if (len >= sizeof name)
            return -1;
        memcpy(name, text, len);
        name[len] = '\0';
        if (tuned__kernel_parse(name, &s->kernel) != 0)
            return -1;
        text = colon + 1;
    }
    if (sscanf(text, "%llux%llu%c", &r, &c, &tail) != 2 || r == 0 || c == 0)
        return -1;
    s->rows = r;
    s->cols = c;
    return 0;
}
