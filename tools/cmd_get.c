/* cmd_get.c: `tuned get`: the stored winner for a shape on this GPU:
 * "exact" when its provenance matches this system exactly (same GPU
 * identity, driver, NVRTC, templates, measurement policy and layout), else
 * "compatible" when one was measured on this hardware class (GPU model,
 * compute capability, SM count) with the same kernel code under another
 * driver, NVRTC or policy (printed with what differs; an application
 * checks it against the float64 reference before it uses it). Otherwise
 * the stored records of the shape are named with why they do not serve,
 * and the exit status is 3. Where no GPU can be identified, every GPU's
 * record for the shape is printed, marked as unchecked. */
#include "cache/key.h"
#include "tools/cli.h"
#include "src/tuner/policy.h"
#include "src/driver/gpu.h"

#define MAX_LISTED 64

static void print_match(FILE *f, const tuned__record *r, const char *match)
{
    char ks[TUNED__KEY_TEXT];
    tuned__key_format(ks, sizeof ks, &r->key);
    cli_print_record(f, r);
    fprintf(f, "key          %s\n", ks);
    fprintf(f, "match        %s\n", match);
}

/* A compatible record is offered only when this build can read its config. */
static bool config_readable(void *ctx, const tuned__record *r, tuned__tier tier)
{
    (void)ctx;
    (void)tier;
    tuned__config c;
    return tuned__config_parse(r->config, &c, NULL) == 0;
}

int cli_cmd_get(const cli_opts *o)
{
    int daemon_rc = cli_daemon_get(o); /* a running daemon answers first */
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
    if (cli_local_gpu(o->request.device, &gpu, &no_gpu)) {
        tuned__record here, rec;
        cli_here_record(&gpu, s, &here);
        char why[1024];
        rc = tuned__store_get_best(store, &here.key, &rec, TUNED__MEASURE_POLICY, &e);
        if (rc == 0 && tuned__record_exact(&rec, &here, why, sizeof why)) {
            tuned__store_close(store);
            print_match(stdout, &rec, "exact");
            printf("source       exact\n");
            return CLI_OK;
        }
        if (rc != 0 && rc != TUNED_ENOTFOUND) {
            tuned__store_close(store);
            return cli_fail(&e);
        }
        /* Another toolchain or policy on this hardware class. */
        tuned__identity id;
        tuned__gpu_identity(&gpu, TUNED__MEASURE_POLICY, &id);
        tuned__tier tier;
        rc = tuned__store_find_compatible(store, &here.key, &id, config_readable, NULL, &rec,
                                          &tier, &e);
        if (rc == 0) {
            tuned__store_close(store);
            tuned__record_tier(&rec, &id, why, sizeof why);
            print_match(stdout, &rec, tier == TUNED__TIER_EXACT ? "exact" : "compatible");
            printf("source       %s\n", tuned__tier_name(tier));
            if (tier != TUNED__TIER_EXACT)
                printf("differs      %s\n", why);
            return CLI_OK;
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
    /* No GPU to ask: show what is stored for every GPU, unchecked. */
    rc = tuned__store_find_shape(store, (uint8_t)tuned__shape_kernel(s), (uint8_t)s->dtype, s->rows, s->cols,
                                 recs, MAX_LISTED, &n, &e);
    tuned__store_close(store);
    if (rc != 0)
        return cli_fail(&e);
    fprintf(stderr, "tuned: no local GPU to match (%s); records for every GPU:\n", no_gpu.msg);
    if (n == 0) {
        fprintf(stderr, "tuned: no record for %llux%llu %s on any GPU\n",
                (unsigned long long)s->rows, (unsigned long long)s->cols, dtype);
        return CLI_NOT_FOUND;
    }
    for (size_t i = 0; i < n && i < MAX_LISTED; i++) {
        if (i > 0)
            printf("\n");
        print_match(stdout, &recs[i], "unchecked (no local GPU)");
    }
    return CLI_OK;
}
