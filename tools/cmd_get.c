/* cmd_get.c: `tuned get`: the stored winner for a shape on this GPU:
 * "exact" when its provenance matches this system exactly (same GPU
 * identity, driver, NVRTC, templates, measurement policy and layout), else
 * "compatible" when one was measured on this hardware class (GPU model,
 * compute capability, SM count) with the same kernel code under another
 * driver, NVRTC or policy (printed with what differs; an application
 * checks it against the float64 reference before it uses it). Otherwise
 * the stored records of the shape are named with why they do not serve,
 * and the exit status is 3. Where no GPU can be identified, or --gpu
 * names another GPU, the records of the shape (of that GPU) are printed,
 * source "unchecked". The output is an answer (cli_answer.c): the same
 * as a daemon's. */
#include <string.h>
#include <strings.h>

#include "cache/key.h"
#include "tools/cli.h"
#include "src/tuner/policy.h"
#include "src/driver/gpu.h"

#define MAX_LISTED 64

/* A compatible record is offered only when this build can read its config. */
static bool config_readable(void *ctx, const tuned__record *r, tuned__tier tier)
{
    (void)ctx;
    (void)tier;
    tuned__config c;
    return tuned__config_parse(r->config, &c, NULL) == 0;
}

/* Whether r's GPU is the one --gpu names (a part of the name, or the
 * fingerprint), as the store's filters match. */
static bool gpu_named(const tuned__record *r, const char *gpu)
{
    char fp[17];
    snprintf(fp, sizeof fp, "%016llx", (unsigned long long)r->key.gpu_fp);
    return strcasecmp(fp, gpu) == 0 || strcasestr(r->gpu_name, gpu) != NULL;
}

/* Every record of the shape (of the --gpu GPU, when given), each with its
 * tier on the local GPU when there is one, as one "unchecked" answer. */
static int print_stored(const cli_opts *o, tuned__store *store, const tuned__identity *here)
{
    const tuned__shape *s = &o->request.shape;
    static tuned__record recs[MAX_LISTED];
    size_t n = 0;
    tuned__err e = {0};
    int rc = tuned__store_find_shape(store, (uint8_t)tuned__shape_kernel(s), (uint8_t)s->dtype, s->rows,
                                     s->cols, recs, MAX_LISTED, &n, &e);
    if (rc != 0)
        return cli_fail(&e);
    json_t *list = json_array();
    for (size_t i = 0; list != NULL && i < n && i < MAX_LISTED; i++) {
        if (o->gpu != NULL && !gpu_named(&recs[i], o->gpu))
            continue;
        /* Exact or compatible on this GPU, when one is here and it is the
         * record's GPU model: then this is what get answers anyway. */
        if (here != NULL && tuned__record_tier(&recs[i], here, NULL, 0) == TUNED__TIER_EXACT) {
            json_decref(list);
            return cli_print_answer(o, cli_answer("exact", cli_record_json(&recs[i])));
        }
        json_array_append_new(list, cli_record_json(&recs[i]));
    }
    if (list == NULL)
        return cli_fail(&(tuned__err){TUNED_ENOMEM, "get: out of memory"});
    if (json_array_size(list) == 0) {
        json_decref(list);
        fprintf(stderr, "tuned: no record for %llux%llu %s%s%s\n", (unsigned long long)s->rows,
                (unsigned long long)s->cols, tuned_dtype_name(s->dtype),
                o->gpu != NULL ? " on a GPU named " : " on any GPU", o->gpu != NULL ? o->gpu : "");
        return CLI_NOT_FOUND;
    }
    json_t *a = json_object();
    if (a == NULL) {
        json_decref(list);
        return cli_fail(&(tuned__err){TUNED_ENOMEM, "get: out of memory"});
    }
    json_object_set_new(a, "source", json_string("unchecked"));
    json_object_set_new(a, "records", list);
    return cli_print_answer(o, a);
}

int cli_cmd_get(const cli_opts *o)
{
    /* A running daemon answers first, for its own GPU; a GPU named with
     * --gpu is the store's to list (a name's part matches there, where
     * the daemon takes a whole model name). */
    int daemon_rc = o->gpu == NULL ? cli_daemon_get(o) : -1;
    if (daemon_rc >= 0)
        return daemon_rc;
    const tuned__shape *s = &o->request.shape;
    const char *dtype = tuned_dtype_name(s->dtype);
    tuned__err e = {0};
    tuned__store *store = NULL;
    int rc = tuned__store_open(&store, o->db, TUNED__STORE_READONLY, &e);
    if (rc == TUNED_ENOTFOUND) {
        fprintf(stderr, "tuned: no record for %llux%llu %s: %s\n", (unsigned long long)s->rows,
                (unsigned long long)s->cols, dtype, e.msg);
        return CLI_NOT_FOUND;
    }
    if (rc != 0)
        return cli_fail(&e);
    static tuned__record recs[MAX_LISTED];
    size_t n = 0;
    tuned__gpu gpu;
    tuned__err no_gpu = {0};
    static tuned__identity id; /* large; the CLI is single-threaded */
    bool have_gpu = cli_local_gpu(o->request.device, &gpu, &no_gpu);
    if (have_gpu)
        tuned__gpu_identity(&gpu, tuned__shape_kernel(s), TUNED__MEASURE_POLICY, &id);
    if (have_gpu && (o->gpu == NULL || strcasestr(gpu.name, o->gpu) != NULL ||
                     strcasecmp(gpu.identity, o->gpu) == 0)) {
        tuned__record here, rec;
        cli_here_record(&gpu, s, &here);
        char why[1024];
        rc = tuned__store_get_best(store, &here.key, &rec, TUNED__MEASURE_POLICY, &e);
        if (rc == 0 && tuned__record_exact(&rec, &here, why, sizeof why)) {
            tuned__store_close(store);
            return cli_print_answer(o, cli_answer("exact", cli_record_json(&rec)));
        }
        if (rc != 0 && rc != TUNED_ENOTFOUND) {
            tuned__store_close(store);
            return cli_fail(&e);
        }
        /* Another toolchain or policy on this hardware class. */
        tuned__tier tier;
        rc = tuned__store_find_compatible(store, &here.key, &id, config_readable, NULL, &rec,
                                          &tier, &e);
        if (rc == 0) {
            tuned__store_close(store);
            tuned__record_tier(&rec, &id, why, sizeof why);
            json_t *a = cli_answer(tuned__tier_name(tier), cli_record_json(&rec));
            if (a != NULL && tier != TUNED__TIER_EXACT)
                json_object_set_new(a, "differs", json_string(why));
            return cli_print_answer(o, a);
        }
        if (rc != TUNED_ENOTFOUND) {
            tuned__store_close(store);
            return cli_fail(&e);
        }
        /* Nothing exact or compatible: say what there is, and why it does
         * not serve. */
        rc = tuned__store_find_shape(store, (uint8_t)tuned__shape_kernel(s), (uint8_t)s->dtype, s->rows,
                                     s->cols, recs, MAX_LISTED, &n, &e);
        tuned__store_close(store);
        if (rc != 0)
            return cli_fail(&e);
        fprintf(stderr, "tuned: no exact or compatible record for %llux%llu %s on %s (tune it with: tuned "
                        "--shape %llux%llu --dtype %s)\n",
                (unsigned long long)s->rows, (unsigned long long)s->cols, dtype, gpu.name,
                (unsigned long long)s->rows, (unsigned long long)s->cols, dtype);
        for (size_t i = 0; i < n && i < MAX_LISTED; i++) {
            tuned__record_tier(&recs[i], &id, why, sizeof why);
            fprintf(stderr, "tuned:   stored for %s: %s, %.2f us; not exact: %s\n",
                    recs[i].gpu_name, recs[i].config, recs[i].median_us, why);
        }
        return CLI_NOT_FOUND;
    }
    /* No GPU to ask (or another one named): what is stored, unchecked. */
    if (!have_gpu && !o->quiet)
        fprintf(stderr, "tuned: no local GPU to match (%s); the stored records:\n", no_gpu.msg);
    rc = print_stored(o, store, have_gpu ? &id : NULL);
    tuned__store_close(store);
    return rc;
}
