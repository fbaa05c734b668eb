/* cmd_devices.c: `tuned devices [--json]`: the GPUs the driver sees, or
 * why none. --json prints one object, {"driver": "13.0"|null, "nvrtc":
 * true|false, "devices": [...], "error": null|"why"}, also when there is
 * no driver (exit status 1 then, as the text form). */
#include <string.h>

#include "tools/cli.h"

static json_t *gpu_json(const tuned__gpu *g)
{
    char arch[16];
    snprintf(arch, sizeof arch, "sm_%d%d", g->cc_major, g->cc_minor);
    return json_pack("{s:i, s:s, s:s, s:i, s:I, s:I, s:s}", "ordinal", g->ordinal, "name", g->name,
                     "arch", arch, "sm_count", g->sm_count, "total_mem", (json_int_t)g->total_mem,
                     "l2_bytes", (json_int_t)g->l2_bytes, "identity", g->identity);
}

int cli_cmd_devices(const cli_opts *o)
{
    tuned__err e = {0};
    tuned__driver *d = NULL;
    json_t *out = o->json ? json_pack("{s:n, s:b, s:[], s:n}", "driver", "nvrtc", 0, "devices",
                                      "error")
                          : NULL;
    if (o->json && out == NULL)
        return cli_fail(&(tuned__err){TUNED_ENOMEM, "devices: out of memory"});
    if (tuned__driver_load(&d, &e) != 0) {
        if (!o->json)
            return cli_fail(&e);
        json_object_set_new(out, "error", json_string(e.msg));
        cli_print_json(out);
        return CLI_ERROR;
    }
    tuned__nvrtc *n = NULL;
    tuned__err nvrtc_err = {0};
    if (tuned__nvrtc_load(&n, &nvrtc_err) != 0 && o->log >= CLI_LOG_WARN)
        fprintf(stderr, "tuned: warning: %s\n", nvrtc_err.msg);
    if (out != NULL) {
        char v[32];
        snprintf(v, sizeof v, "%d.%d", d->version / 1000, (d->version % 1000) / 10);
        json_object_set_new(out, "driver", json_string(v));
        json_object_set_new(out, "nvrtc", json_boolean(n != NULL));
    }
    json_t *list = out != NULL ? json_object_get(out, "devices") : NULL;
    int count = 0, rc = tuned__gpu_count(d, &count, &e);
    if (rc == 0 && count == 0 && out == NULL)
        printf("the driver sees no GPU\n");
    for (int i = 0; rc == 0 && i < count; i++) {
        tuned__gpu g;
        if (n != NULL) {
            rc = tuned__gpu_query(d, n, i, &g, &e);
            if (rc == 0 && list != NULL) {
                json_array_append_new(list, gpu_json(&g));
            } else if (rc == 0) {
                printf("%d  %s  sm_%d%d  %d SMs  %.1f GiB  L2 %d MiB  driver %d.%d  %s\n", i,
                       g.name, g.cc_major, g.cc_minor, g.sm_count, g.total_mem / 1073741824.0,
                       g.l2_bytes >> 20, d->version / 1000, (d->version % 1000) / 10, g.identity);
            }
        } else {
            char name[128];
            CUdevice dev;
            rc = tuned__cuda_check(d, d->cuDeviceGet(&dev, i), &e, "cuDeviceGet");
            if (rc == 0)
                rc = tuned__cuda_check(d, d->cuDeviceGetName(name, sizeof name, dev), &e,
                                       "cuDeviceGetName");
            if (rc == 0 && list != NULL)
                json_array_append_new(list, json_pack("{s:i, s:s}", "ordinal", i, "name", name));
            else if (rc == 0)
                printf("%d  %s\n", i, name);
        }
    }
    tuned__nvrtc_unload(n);
    tuned__driver_unload(d);
    if (out != NULL) {
        if (rc != 0)
            json_object_set_new(out, "error", json_string(e.msg));
        int prc = cli_print_json(out);
        return rc != 0 ? CLI_ERROR : prc;
    }
    return rc != 0 ? cli_fail(&e) : CLI_OK;
}
