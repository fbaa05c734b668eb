/* probe_shape.c: the bench probes' "[KERNEL:]ROWSxCOLS[:PARAMS]" argument
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
    /* ROWSxCOLS, then the kind's key parameters after a colon (defaults
     * without) */
    const tuned__kind_spec *k = tuned__kind(s->kernel);
    s->params = tuned__params_default(k);
    const char *params = strchr(text, ':');
    if (params != NULL) {
        tuned__err e = {0};
        if (k == NULL || tuned__params_parse(k, params + 1, &s->params, &e) != 0)
            return -1;
    }
    char dims[64];
    size_t len = params != NULL ? (size_t)(params - text) : strlen(text);
    if (len >= sizeof dims)
        return -1;
    memcpy(dims, text, len);
    dims[len] = '\0';
    if (sscanf(dims, "%llux%llu%c", &r, &c, &tail) != 2 || r == 0 || c == 0)
        return -1;
    s->rows = r;
    s->cols = c;
    return 0;
}
