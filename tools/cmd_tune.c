/* cmd_tune.c: `tuned [tune] --shape RxC`: tune on one GPU with a live
 * progress line (or JSON progress objects, which the embedding library
 * reads from its child tunes), print the winner as an answer
 * (cli_answer.c), store it. The store is opened first so that a bad --db
 * fails before any GPU time is spent; --skip-store opens none. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tools/cli.h"
#include "src/tuner/policy.h"

typedef struct progress_line {
    bool quiet, tty;
    cli_progress mode;
    const tuned__shape *shape;
} progress_line;

/* The daemon's job fields (docs/protocol.md), one object a line. */
static void progress_json(const progress_line *pl, const tuned__tune_progress *p)
{
    const tuned__search_progress *s = p->search;
    char best[TUNED__CONFIG_TEXT] = "";
    if (s != NULL && s->have_best)
        tuned__config_format(&s->best, best, sizeof best);
    json_t *o = json_pack("{s:{s:s, s:s, s:I, s:I, s:s, s:i, s:I, s:I, s:I, s:i, s:o, s:o, s:f, s:f}}",
                          "progress", "state", "running", "dtype",
                          tuned_dtype_name(pl->shape->dtype), "rows", (json_int_t)pl->shape->rows,
                          "cols", (json_int_t)pl->shape->cols, "gpu", p->gpu->name, "device",
                          p->gpu->ordinal, "budget", (json_int_t)(s ? s->budget : 0), "evaluated",
                          (json_int_t)(s ? s->tried : 0), "failed", (json_int_t)(s ? s->failed : 0),
                          "generation", s ? s->generation : -1, "best_config",
                          s && s->have_best ? json_string(best) : json_null(), "best_us",
                          s && s->have_best ? json_real(s->best_us) : json_null(), "copy_us",
                          p->copy_us, "elapsed_s", s ? s->elapsed_s : 0.0);
    char *line = o != NULL ? json_dumps(o, JSON_COMPACT) : NULL;
    if (line != NULL)
        fprintf(stderr, "%s\n", line);
    free(line);
    json_decref(o);
}

static void on_progress(void *ctx, const tuned__tune_progress *p)
{
    progress_line *pl = ctx;
    if (pl->mode == CLI_PROGRESS_JSON) {
        progress_json(pl, p);
        return;
    }
    if (pl->mode == CLI_PROGRESS_NONE)
        return;
    /* The floor: the copy moves two tensors' bytes; the kind moves what its
     * spec says. */
    unsigned kernel = tuned__shape_kernel(pl->shape);
    size_t esize = tuned_dtype_size(pl->shape->dtype);
    double floor_us = p->copy_us * tuned__kind_copies(tuned__shape_spec(pl->shape),
                                                      pl->shape->rows, tuned__wire_cols_of(pl->shape), esize);
    if (p->search == NULL) {
        double bytes = 2.0 * (double)pl->shape->rows * (double)pl->shape->cols *
                       (double)tuned_dtype_size(pl->shape->dtype);
        fprintf(stderr, "tuned: %s %llux%llu %s on GPU %d, %s (sm_%d%d, %d SMs)\n",
                tuned__kernel_name((uint8_t)kernel), (unsigned long long)pl->shape->rows,
                (unsigned long long)pl->shape->cols, tuned_dtype_name(pl->shape->dtype),
                p->gpu->ordinal, p->gpu->name, p->gpu->cc_major, p->gpu->cc_minor,
                p->gpu->sm_count);
        const tuned__kind_spec *spec = tuned__shape_spec(pl->shape);
        if (spec->evaluate != TUNED__EVALUATE_KERNEL)
            fprintf(stderr, "tuned: floor (%s): %.2f us\n", tuned__kind_floor_text(spec),
                    floor_us);
        else
            fprintf(stderr, "tuned: %s: %.2f us, %.0f GB/s; floor %.2f us\n",
                    tuned__kind_floor_text(spec), p->copy_us, bytes / (p->copy_us * 1e3),
                    floor_us);
        return;
    }
    const tuned__search_progress *s = p->search;
    char best[TUNED__CONFIG_TEXT] = "-";
    if (s->have_best)
        tuned__config_format(&s->best, best, sizeof best);
    fprintf(stderr, "%sgen %d  tried %zu/%zu  failed %zu  best %.2f us  %.1f%% of floor  %s  %.1fs%s",
            pl->tty ? "\r\033[K" : "", s->generation, s->tried, s->budget, s->failed,
            s->have_best ? s->best_us : 0.0,
            s->have_best ? 100.0 * floor_us / s->best_us : 0.0, best, s->elapsed_s,
            pl->tty ? "" : "\n");
    fflush(stderr);
}

static void write_trace(void *ctx, const tuned__config *c, const tuned__eval_result *r)
{
    char name[TUNED__CONFIG_TEXT];
    tuned__config_format(c, name, sizeof name);
    fprintf(ctx, "%s\t%s\t%.3f\t%.3f\t%.3f\t%d\t%.0f\t%d\t%d\t%s\n", name,
            tuned__eval_status_name(r->status), r->median_us, r->p20_us, r->p80_us, r->reps,
            r->compile_ms, r->registers, r->local_bytes, r->detail);
    fflush(ctx);
}

/* Whether the store already holds a winner for this shape on this GPU. */
static int stored_winner(const tuned__driver *d, const tuned__nvrtc *n, tuned__store *store,
                         const tuned__tune_request *r, tuned__record *rec, bool *found,
                         tuned__err *e)
{
    tuned__gpu gpu;
    int rc = tuned__gpu_query(d, n, r->device, &gpu, e);
    if (rc != 0)
        return rc;
    tuned__store_key key;
    tuned__tune_key(&gpu, &r->shape, &key);
    rc = tuned__store_get_best(store, &key, rec, TUNED__MEASURE_POLICY, e);
    *found = rc == 0;
    if (rc == TUNED_ENOTFOUND) {
        tuned__err_clear(e);
        rc = 0;
    }
    return rc;
}

int cli_cmd_tune(const cli_opts *o)
{
    int daemon_rc = cli_daemon_tune(o); /* a running daemon tunes it */
    if (daemon_rc >= 0)
        return daemon_rc;
    tuned__err e = {0};
    tuned__tune_request request = o->request;
    FILE *trace = NULL;
    if (o->trace == NULL && o->log == CLI_LOG_DEBUG) {
        /* TUNED_LOG=debug: every variant on stderr, as --trace writes it. */
        request.trace = write_trace;
        request.trace_ctx = stderr;
    } else if (o->trace != NULL) {
        trace = fopen(o->trace, "w");
        if (trace == NULL) {
            tuned__errf(&e, TUNED_EIO, "--trace %s: %s", o->trace, strerror(errno));
            return cli_fail(&e);
        }
        fprintf(trace, "config\tstatus\tmedian_us\tp20_us\tp80_us\treps\tcompile_ms\t"
                       "registers\tlocal_bytes\tdetail\n");
        request.trace = write_trace;
        request.trace_ctx = trace;
    }
    tuned__store *store = NULL;
    if (!o->skip_store && tuned__store_open(&store, o->db, 0, &e) != 0) {
        if (trace != NULL)
            fclose(trace);
        return cli_fail(&e);
    }
    request.store = store; /* NULL with --skip-store: no cache, history or winner */
    tuned__driver *d = NULL;
    tuned__nvrtc *n = NULL;
    int rc = tuned__driver_load(&d, &e);
    if (rc == 0)
        rc = tuned__nvrtc_load(&n, &e);
    tuned__record rec;
    bool stored = false;
    if (rc == 0 && !request.retune && store != NULL)
        rc = stored_winner(d, n, store, &request, &rec, &stored, &e);
    if (rc == 0 && stored && !o->quiet)
        fprintf(stderr, "tuned: already tuned on this GPU (tune again with --retune)\n");
    tuned__tune_outcome out;
    progress_line pl = {.quiet = o->quiet, .tty = isatty(STDERR_FILENO) == 1,
                        .mode = o->progress, .shape = &o->request.shape};
    if (rc == 0 && !stored)
        rc = tuned__tune(d, n, &request, on_progress, &pl, &out, &e);
    if (trace != NULL && fclose(trace) != 0 && rc == 0)
        rc = tuned__errf(&e, TUNED_EIO, "--trace %s: %s", o->trace, strerror(errno));
    if (pl.tty && pl.mode == CLI_PROGRESS_LINE && !stored)
        fprintf(stderr, "\n");
    if (rc == 0 && !stored) {
        tuned__tune_record(&out, &o->request.shape, &rec);
        if (store != NULL)
            rc = tuned__store_put_best(store, &rec, &e);
    }
    tuned__nvrtc_unload(n);
    tuned__driver_unload(d);
    tuned__store_close(store);
    if (rc != 0)
        return cli_fail(&e);
    if (stored)
        return cli_print_answer(o, cli_answer("exact", cli_record_json(&rec)));
    if (!o->quiet)
        fprintf(stderr,
            "tuned: %s after %zu new variants (%zu failed, %zu resumed from the store, %zu warm "
            "seeds) in %.1f s, %d generations; %zu finalists re-timed, noise %.1f%%\n",
            out.search.stop_reason, out.search.evaluations, out.search.failed,
            out.search.resumed, out.warm_seeds, out.search.elapsed_s, out.search.generations,
            out.finalists, 100.0 * out.noise);
    if (!o->quiet)
        fprintf(stderr, store != NULL ? "tuned: stored in %s\n" : "tuned: not stored (%s)\n",
                store != NULL ? o->db : "--skip-store");
    return cli_print_answer(o, cli_answer("exact", cli_record_json(&rec)));
}
