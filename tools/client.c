/* client.c: the CLI's end of the daemon protocol (docs/protocol.md).
 *
 * `tuned get` and `tuned tune` ask the daemon when one answers on the
 * socket (--socket, else $TUNED_SOCKET, else the default path), and work
 * on the store directly when none does, or when --db was given on the
 * command line (an explicit store is that store). `tuned list` asks a
 * daemon only with an explicit --socket: the store itself answers the
 * same, with more (keys, damaged records), and readers never wait. A tune
 * through the daemon is queued there (joining a running tune of the same
 * shape) and followed with `job` requests until it ends. What get and
 * tune print is an answer (cli_answer.c), the same as the store's; --gpu
 * goes to the daemon as the request's "gpu". */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jansson.h>

#include "src/client/client.h"
#include "src/daemon/daemon.h"
#include "tools/cli.h"

#define REPLY_TIMEOUT_S 30.0

typedef tuned__client client;

/* The daemon's socket: --socket, else the default one. */
static void socket_path(const cli_opts *o, char *path, size_t n)
{
    if (o->socket[0] != '\0')
        snprintf(path, n, "%s", o->socket);
    else
        tuned__default_socket(path, n);
}

/* 0: connected; 1: no daemon there (fall back to the store); -1: error
 * printed. */
static int client_open(const cli_opts *o, client *c)
{
    memset(c, 0, sizeof *c);
    c->fd = -1;
    if (o->db_given || o->skip_store)
        return 1;
    char path[TUNED__SOCKET_PATH_MAX + 1];
    socket_path(o, path, sizeof path);
    tuned__err e = {0};
    int rc = tuned__client_connect(c, path, REPLY_TIMEOUT_S, &e);
    if (rc == TUNED_ENOTFOUND) {
        if (o->socket[0] != '\0' && !o->quiet && o->id != CLI_STATS)
            fprintf(stderr, "tuned: no daemon on %s; using the store %s\n", path, o->db);
        return 1;
    }
    if (rc != 0) {
        fprintf(stderr, "tuned: %s\n", e.msg);
        return -1;
    }
    return 0;
}

static void client_close(client *c)
{
    tuned__client_close(c);
}

/* Sends req (taken) and reads one reply object into *rep; prints errors. */
static int call(client *c, json_t *req, json_t **rep)
{
    *rep = NULL;
    if (req == NULL) {
        fprintf(stderr, "tuned: out of memory\n");
        return -1;
    }
    tuned__err e = {0};
    int rc = tuned__client_call(c, req, REPLY_TIMEOUT_S, rep, &e);
    json_decref(req);
    if (rc != 0)
        fprintf(stderr, "tuned: %s\n", e.msg);
    return rc != 0 ? -1 : 0;
}

/* An error reply as one line; CLI_ERROR. */
static int reply_error(const json_t *rep)
{
    const json_t *err = json_object_get(rep, "error");
    const char *code = json_string_value(json_object_get(err, "code"));
    const char *msg = json_string_value(json_object_get(err, "message"));
    fprintf(stderr, "tuned: daemon: %s (%s)\n", msg ? msg : "error", code ? code : "?");
    return CLI_ERROR;
}

/* req (taken) on a connection of its own: CLI_OK with the daemon's ok
 * reply in *rep (the caller's to free); -1 with no daemon there (fall
 * back to the store); else the error printed and its exit status. */
static int ask(const cli_opts *o, json_t *req, json_t **rep)
{
    *rep = NULL;
    client c;
    int rc = client_open(o, &c);
    if (rc != 0) {
        json_decref(req);
        return rc > 0 ? -1 : CLI_ERROR;
    }
    rc = call(&c, req, rep) != 0 ? CLI_ERROR : CLI_OK;
    client_close(&c);
    if (rc == CLI_OK && !json_is_true(json_object_get(*rep, "ok"))) {
        rc = reply_error(*rep);
        json_decref(*rep);
        *rep = NULL;
    }
    return rc;
}

static json_t *shape_request(const cli_opts *o, const char *op)
{
    const tuned__shape *s = &o->request.shape;
    json_t *req = json_pack("{s:s, s:s, s:s, s:I, s:I}", "op", op, "kernel",
                            tuned__kernel_name((uint8_t)tuned__shape_kernel(s)), "dtype",
                            tuned_dtype_name(s->dtype), "rows", (json_int_t)s->rows, "cols",
                            (json_int_t)s->cols);
    if (req != NULL)
        tuned__client_add_params(req, s);
    if (req != NULL && o->gpu != NULL)
        json_object_set_new(req, "gpu", json_string(o->gpu));
    else if (req != NULL && o->request.device > 0)
        json_object_set_new(req, "gpu", json_integer(o->request.device));
    return req;
}

/* A string field, or "?" when absent. */
static const char *text(const json_t *obj, const char *key)
{
    const char *s = json_string_value(json_object_get(obj, key));
    return s != NULL ? s : "?";
}

/* A compatible answer as the store's get prints it: the record and what
 * differs from this system. */
static int print_compatible(const cli_opts *o, const json_t *rep, const json_t *record)
{
    json_t *a = cli_answer("compatible", cli_daemon_record_json(record));
    json_t *differs = json_object_get(rep, "differs");
    if (a != NULL && json_is_string(differs))
        json_object_set(a, "differs", differs);
    return cli_print_answer(o, a);
}

/* The answer of a get reply: exact or compatible with its record, as the
 * store's get prints them; else exit status 3, the daemon's suggestion on
 * stderr (the store's get says what is stored instead). */
static int print_get_reply(const cli_opts *o, const json_t *rep)
{
    const char *source = text(rep, "source");
    const json_t *record = json_object_get(rep, "record");
    if (strcmp(source, "exact") == 0 && json_is_object(record))
        return cli_print_answer(o, cli_answer("exact", cli_daemon_record_json(record)));
    if (strcmp(source, "compatible") == 0 && json_is_object(record))
        return print_compatible(o, rep, record);
    const tuned__shape *s = &o->request.shape;
    if (strcmp(source, "nearest") == 0 && json_is_object(record))
        fprintf(stderr, "tuned: no record for %llux%llu %s on %s; the daemon suggests %s from the "
                        "nearest stored shape %lldx%lld (%.2f us there)\n",
                (unsigned long long)s->rows, (unsigned long long)s->cols,
                tuned_dtype_name(s->dtype), text(rep, "gpu"), text(rep, "config"),
                (long long)json_integer_value(json_object_get(record, "rows")),
                (long long)json_integer_value(json_object_get(record, "cols")),
                json_number_value(json_object_get(record, "median_us")));
    else
        fprintf(stderr, "tuned: no record for %llux%llu %s on %s; the daemon suggests the %s "
                        "config %s\n",
                (unsigned long long)s->rows, (unsigned long long)s->cols,
                tuned_dtype_name(s->dtype), text(rep, "gpu"), source, text(rep, "config"));
    return CLI_NOT_FOUND;
}

int cli_daemon_get(const cli_opts *o)
{
    json_t *rep;
    int rc = ask(o, shape_request(o, "get"), &rep);
    if (rc != CLI_OK)
        return rc;
    rc = print_get_reply(o, rep);
    json_decref(rep);
    return rc;
}

/* One progress report of a job: a line, or (--progress json) the job's
 * fields as one JSON object, as a local tune reports them. */
static void job_progress(const cli_opts *o, json_int_t id, const json_t *job)
{
    if (o->progress == CLI_PROGRESS_NONE)
        return;
    if (o->progress == CLI_PROGRESS_JSON) {
        json_t *p = json_pack("{s:O}", "progress", job);
        char *line = p != NULL ? json_dumps(p, JSON_COMPACT) : NULL;
        if (line != NULL)
            fprintf(stderr, "%s\n", line);
        free(line);
        json_decref(p);
        return;
    }
    const char *state = json_string_value(json_object_get(job, "state"));
    /* -1 until the first generation ends */
    json_int_t gen = json_integer_value(json_object_get(job, "generation"));
    char gen_text[24] = "-";
    if (gen >= 0)
        snprintf(gen_text, sizeof gen_text, "%lld", (long long)gen);
    fprintf(stderr, "tuned: job %lld %s: gen %s  tried %lld/%lld  failed %lld  best %.2f us  %s  %.1fs\n",
            (long long)id, state ? state : "?", gen_text,
            (long long)json_integer_value(json_object_get(job, "evaluated")),
            (long long)json_integer_value(json_object_get(job, "budget")),
            (long long)json_integer_value(json_object_get(job, "failed")),
            json_number_value(json_object_get(job, "best_us")),
            json_is_string(json_object_get(job, "best_config"))
                ? json_string_value(json_object_get(job, "best_config"))
                : "-",
            json_number_value(json_object_get(job, "elapsed_s")));
}

int cli_daemon_tune(const cli_opts *o)
{
    client c;
    int rc = client_open(o, &c);
    if (rc != 0)
        return rc > 0 ? -1 : CLI_ERROR;
    tuned__search_opts def;
    tuned__search_opts_default(&def);
    const tuned__search_opts *so = &o->request.search;
    if (so->exhaustive || o->trace != NULL || so->copies != def.copies ||
        so->min_gain != def.min_gain || o->request.ntries > 0) {
        client_close(&c);
        fprintf(stderr, "tuned: --exhaustive, --trace, --copies, --min-gain and --try tune "
                        "locally: a daemon runs, so pass --db to bypass it\n");
        return CLI_USAGE;
    }
    if (so->seed > INT64_MAX) { /* the protocol's seeds are JSON integers */
        client_close(&c);
        fprintf(stderr, "tuned: --seed %llu: a daemon takes seeds up to %lld; pass --db to tune "
                        "locally\n", (unsigned long long)so->seed, (long long)INT64_MAX);
        return CLI_USAGE;
    }
    if (!o->request.retune) { /* as without a daemon: a stored winner is printed */
        json_t *got;
        if (call(&c, shape_request(o, "get"), &got) != 0) {
            client_close(&c);
            return CLI_ERROR;
        }
        bool exact = json_is_true(json_object_get(got, "ok")) &&
                     strcmp(text(got, "source"), "exact") == 0;
        if (exact) {
            client_close(&c);
            if (!o->quiet)
                fprintf(stderr, "tuned: already tuned on this GPU (tune again with --retune)\n");
            rc = cli_print_answer(o, cli_answer("exact", cli_daemon_record_json(
                                                            json_object_get(got, "record"))));
            json_decref(got);
            return rc;
        }
        json_decref(got);
    }
    json_t *req = shape_request(o, "tune");
    json_object_set_new(req, "budget", json_integer((json_int_t)o->request.search.budget));
    json_object_set_new(req, "retune", json_boolean(o->request.retune));
    json_object_set_new(req, "time_s", json_real(o->request.search.time_s));
    json_object_set_new(req, "seed", json_integer((json_int_t)o->request.search.seed));
    /* --effort's population and finalist rounds: the same search as without a daemon. */
    json_object_set_new(req, "population", json_integer((json_int_t)so->population));
    json_object_set_new(req, "finalist_rounds", json_integer(o->request.finalist_rounds));
    json_t *rep;
    if (call(&c, req, &rep) != 0) {
        client_close(&c);
        return CLI_ERROR;
    }
    if (!json_is_true(json_object_get(rep, "ok"))) {
        rc = reply_error(rep);
        json_decref(rep);
        client_close(&c);
        return rc;
    }
    json_int_t id = json_integer_value(json_object_get(rep, "job"));
    if (!o->quiet)
        fprintf(stderr, "tuned: daemon job %lld%s\n", (long long)id,
                json_is_true(json_object_get(rep, "joined")) ? " (joined a running tune)" : "");
    json_decref(rep);
    rc = CLI_ERROR;
    for (;;) {
        if (call(&c, json_pack("{s:s, s:I}", "op", "job", "job", id), &rep) != 0)
            break;
        if (!json_is_true(json_object_get(rep, "ok"))) {
            reply_error(rep);
            json_decref(rep);
            break;
        }
        const json_t *job = json_object_get(rep, "job");
        const char *state = json_string_value(json_object_get(job, "state"));
        job_progress(o, id, job);
        bool end = state == NULL || (strcmp(state, "queued") != 0 && strcmp(state, "running") != 0);
        if (end && state != NULL && strcmp(state, "done") == 0)
            rc = CLI_OK;
        else if (end)
            fprintf(stderr, "tuned: job %lld %s: %s\n", (long long)id, state ? state : "?",
                    json_is_string(json_object_get(job, "error"))
                        ? json_string_value(json_object_get(job, "error"))
                        : "no winner stored");
        json_decref(rep);
        if (end)
            break;
        struct timespec ts = {0, 250 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    client_close(&c);
    if (rc == CLI_OK) {
        cli_opts get = *o;
        rc = cli_daemon_get(&get);
    }
    return rc;
}

int cli_daemon_list(const cli_opts *o)
{
    json_t *req = json_pack("{s:s, s:i}", "op", "list", "limit", 1000);
    if (req != NULL && o->have_shape) {
        json_object_set_new(req, "rows", json_integer((json_int_t)o->request.shape.rows));
        json_object_set_new(req, "cols", json_integer((json_int_t)o->request.shape.cols));
    }
    if (req != NULL && o->have_dtype)
        json_object_set_new(req, "dtype", json_string(tuned_dtype_name(o->request.shape.dtype)));
    if (req != NULL && o->gpu != NULL) /* the daemon matches a whole model name */
        json_object_set_new(req, "gpu", json_string(o->gpu));
    json_t *rep;
    int rc = ask(o, req, &rep);
    if (rc != CLI_OK)
        return rc;
    const json_t *recs = json_object_get(rep, "records");
    json_t *list = json_array();
    size_t i;
    const json_t *r;
    json_array_foreach(recs, i, r)
        json_array_append_new(list, cli_daemon_record_json(r));
    if (o->json) {
        rc = cli_print_json(list);
    } else {
        /* The store's table; the tier on this GPU is the store's to say. */
        printf("%-14s %-5s %-24s %-36s %10s %8s  %-20s  %-10s  %s\n", "SHAPE", "DTYPE", "GPU",
               "CONFIG", "MEDIAN_US", "OF_COPY", "DATE", "TIER", "KEY");
        json_array_foreach(list, i, r) {
            char shape[48];
            snprintf(shape, sizeof shape, "%lldx%lld",
                     (long long)json_integer_value(json_object_get(r, "rows")),
                     (long long)json_integer_value(json_object_get(r, "cols")));
            double us = json_number_value(json_object_get(r, "median_us"));
            double copy = json_number_value(json_object_get(r, "copy_us"));
            printf("%-14s %-5s %-24.24s %-36s %10.2f %7.1f%%  %-20s  %-10s  %s\n", shape,
                   text(r, "dtype"), text(r, "gpu_name"), text(r, "config"), us,
                   us > 0 ? 100.0 * copy / us : 0.0, text(r, "date"), "-", text(r, "key"));
        }
        json_decref(list);
    }
    if (json_is_true(json_object_get(rep, "truncated")))
        fprintf(stderr, "tuned: %lld records; the daemon sent the first %zu\n",
                (long long)json_integer_value(json_object_get(rep, "total")), json_array_size(recs));
    json_decref(rep);
    return rc;
}

int cli_cmd_stats(const cli_opts *o)
{
    json_t *rep;
    int rc = ask(o, json_pack("{s:s}", "op", "stats"), &rep);
    if (rc < 0) {
        char path[TUNED__SOCKET_PATH_MAX + 1];
        socket_path(o, path, sizeof path);
        fprintf(stderr, "tuned: no daemon answers on %s\n", path);
        return CLI_ERROR;
    }
    if (rc != CLI_OK)
        return rc;
    if (o->json)
        return cli_print_json(rep);
    const json_t *req = json_object_get(rep, "requests"), *get = json_object_get(rep, "get"),
                 *cl = json_object_get(rep, "clients"), *jobs = json_object_get(rep, "jobs"),
                 *st = json_object_get(rep, "store");
#define N(obj, key) ((long long)json_integer_value(json_object_get((obj), (key))))
    printf("version      %s\n", text(rep, "version"));
    printf("uptime_s     %.1f\n", json_number_value(json_object_get(rep, "uptime_s")));
    printf("requests     %lld (%lld errors)\n", N(req, "total"), N(req, "errors"));
    printf("get          %lld exact, %lld nearest, %lld default\n", N(get, "exact"),
           N(get, "nearest"), N(get, "default"));
    printf("clients      %lld now, %lld total, %lld rejected, %lld cut off\n", N(cl, "now"),
           N(cl, "total"), N(cl, "rejected"), N(cl, "cut_off"));
    printf("jobs         %lld queued, %lld running, %lld done, %lld failed, %lld cancelled\n",
           N(jobs, "queued"), N(jobs, "running"), N(jobs, "done"), N(jobs, "failed"),
           N(jobs, "cancelled"));
    printf("store        %s: %lld records\n", text(st, "path"), N(st, "records"));
    size_t i;
    const json_t *g;
    json_array_foreach(json_object_get(rep, "gpus"), i, g)
        printf("gpu %-8lld %s  worker pid %lld  %lld restarts\n", N(g, "ordinal"), text(g, "name"),
               N(g, "worker_pid"), N(g, "worker_restarts"));
    if (json_is_string(json_object_get(rep, "no_gpu")))
        printf("no_gpu       %s\n", text(rep, "no_gpu"));
#undef N
    json_decref(rep);
    return fflush(stdout) != 0 && !cli_stdout_gone() ? CLI_ERROR : CLI_OK;
}
