/* cmd_list.c: `tuned list`: the stored winners as a table (or, with
 * --json, one JSON array of the stored records, each with its "key" and
 * "hwclass"), filtered by --gpu, --shape and --dtype. Where a GPU can be
 * identified, each record's serving tier on it (exact, compatible, none;
 * docs/store-format.md) is shown too ("tier"; "-" without a GPU). Damaged
 * records are listed on stderr and make the exit status 1. */
#include <jansson.h>
#include <string.h>

#include "cache/key.h"
#include "cache/record.h"
#include "tools/cli.h"
#include "src/driver/gpu.h"
#include "src/tuner/policy.h"

typedef struct list_ctx {
    bool have_gpu;
    tuned__gpu gpu;       /* the local GPU, when have_gpu */
    tuned__identity here; /* its identity for the record at hand */
    bool json;
    json_t *array;
    size_t shown, damaged;
    int failed;
    tuned__err e;
} list_ctx;

static int row(void *ctx, const tuned__store_key *key, const tuned__record *r, const char *damage)
{
    list_ctx *c = ctx;
    char ks[TUNED__KEY_TEXT];
    tuned__key_format(ks, sizeof ks, key);
    if (r == NULL) {
        c->damaged++;
        fprintf(stderr, "tuned: damaged record %s: %s\n", ks, damage);
        return 0;
    }
    c->shown++;
    if (c->have_gpu)
        tuned__gpu_identity(&c->gpu, r->key.kernel, TUNED__MEASURE_POLICY, &c->here);
    const char *tier = c->have_gpu ? tuned__tier_name(tuned__record_tier(r, &c->here, NULL, 0))
                                   : "-";
    if (c->json) {
        json_t *o;
        tuned__identity id;
        tuned__record_identity(r, &id);
        if (tuned__record_to_json(r, &o, &c->e) != 0)
            return c->failed = 1;
        if (json_object_set_new(o, "key", json_string(ks)) != 0 ||
            json_object_set_new(o, "hwclass", json_string(id.hwclass.text)) != 0 ||
            (c->have_gpu && json_object_set_new(o, "tier", json_string(tier)) != 0) ||
            json_array_append_new(c->array, o) != 0) {
            tuned__errf(&c->e, TUNED_ENOMEM, "list: out of memory");
            return c->failed = 1;
        }
        return 0;
    }
    char shape[48];
    /* the key parameters are the key's (the last column) */
    snprintf(shape, sizeof shape, "%llux%llu", (unsigned long long)r->key.rows,
             (unsigned long long)tuned__wire_cols_cols(r->key.cols));
    printf("%-14s %-5s %-24.24s %-36s %10.2f %7.1f%%  %-20s  %-10s  %s\n", shape,
           tuned_dtype_name((tuned_dtype)r->key.dtype), r->gpu_name, r->config, r->median_us,
           r->median_us > 0 ? 100.0 * r->copy_us / r->median_us : 0.0, r->date, tier, ks);
    return 0;
}

int cli_cmd_list(const cli_opts *o)
{
    if (o->socket[0] != '\0') { /* --socket: ask that daemon, the store if none runs */
        int daemon_rc = cli_daemon_list(o);
        if (daemon_rc >= 0)
            return daemon_rc;
    }
    tuned__err e = {0};
    tuned__store *s = NULL;
    int rc = cli_open_store(o, TUNED__STORE_READONLY, &s, &e);
    if (rc != 0)
        return cli_fail(&e); /* a missing store too: not an empty list */
    static list_ctx c; /* an identity is large; the CLI is single-threaded */
    memset(&c, 0, sizeof c);
    c.json = o->json;
    tuned__gpu gpu;
    tuned__err no_gpu = {0};
    if (cli_local_gpu(o->request.device, &gpu, &no_gpu)) {
        c.have_gpu = true;
        c.gpu = gpu;
    }
    if (o->json && (c.array = json_array()) == NULL) {
        tuned__store_close(s);
        return cli_fail(&(tuned__err){TUNED_ENOMEM, "list: out of memory"});
    }
    if (!o->json)
        printf("%-14s %-5s %-24s %-36s %10s %8s  %-20s  %-10s  %s\n", "SHAPE", "DTYPE", "GPU",
               "CONFIG", "MEDIAN_US", "OF_COPY", "DATE", "TIER", "KEY");
    tuned__store_filter f;
    cli_filter(o, &f);
    rc = tuned__store_each_best(s, &f, row, &c, &e);
    tuned__store_close(s);
    if (c.failed) {
        json_decref(c.array);
        return cli_fail(&c.e);
    }
    if (rc != 0) {
        json_decref(c.array);
        return cli_fail(&e);
    }
    if (o->json && cli_print_json(c.array) != CLI_OK)
        return CLI_ERROR;
    if (fflush(stdout) != 0)
        return cli_stdout_gone() ? CLI_OK
                                 : cli_fail(&(tuned__err){TUNED_EIO, "list: cannot write to stdout"});
    if (!o->quiet)
        fprintf(stderr, "tuned: %zu record%s in %s\n", c.shown, c.shown == 1 ? "" : "s", o->db);
    return c.damaged > 0 ? CLI_ERROR : CLI_OK;
}
