/* cli_answer.c: what get and tune print, the same whether a daemon
 * answered or the store did (cli.h: answers), and the CLI's JSON output.
 *
 * Both sources are first made one JSON form, the store's record fields
 * (docs/store-format.md) plus "key"; the daemon's record is a subset of
 * them under two other names. Text output then prints, from that form,
 * only the fields both sources have, so a script that reads `tuned get`
 * cannot tell who answered; --json prints the whole form. */
#include <errno.h>
#include <string.h>

#include "cache/key.h"
#include "cache/record.h"
#include "tools/cli.h"

/* The key of a record in store form, from its fields. */
static void add_key(json_t *r)
{
    tuned__store_key k = {.kernel = TUNED__KIND_DEFAULT, .layout = TUNED__LAYOUT_DENSE};
    const char *kernel = json_string_value(json_object_get(r, "kernel"));
    if (kernel != NULL && tuned__kernel_parse(kernel, &k.kernel) != 0)
        return;
    tuned_dtype dt;
    const char *dtype = json_string_value(json_object_get(r, "dtype"));
    const char *fp = json_string_value(json_object_get(r, "gpu_fp"));
    if (dtype == NULL || tuned_dtype_parse(dtype, &dt) != 0 || fp == NULL)
        return;
    char *end;
    errno = 0;
    k.gpu_fp = strtoull(fp, &end, 16);
    if (errno != 0 || *end != '\0')
        return;
    k.dtype = (uint8_t)dt;
    k.rows = (uint64_t)json_integer_value(json_object_get(r, "rows"));
    k.cols = (uint64_t)json_integer_value(json_object_get(r, "cols"));
    const char *params = json_string_value(json_object_get(r, "params"));
    uint32_t word = 0;
    if (params != NULL && tuned__kind(k.kernel) != NULL &&
        tuned__params_parse(tuned__kind(k.kernel), params, &word, NULL) == 0)
        k.cols = tuned__wire_cols(k.cols, word);
    if (json_is_integer(json_object_get(r, "layout")))
        k.layout = (uint8_t)json_integer_value(json_object_get(r, "layout"));
    char ks[TUNED__KEY_TEXT];
    tuned__key_format(ks, sizeof ks, &k);
    json_object_set_new(r, "key", json_string(ks));
}

json_t *cli_record_json(const tuned__record *r)
{
    json_t *o;
    tuned__err e = {0};
    if (tuned__record_to_json(r, &o, &e) != 0)
        return NULL;
    char ks[TUNED__KEY_TEXT];
    tuned__key_format(ks, sizeof ks, &r->key);
    if (json_object_set_new(o, "key", json_string(ks)) != 0) {
        json_decref(o);
        return NULL;
    }
    return o;
}

json_t *cli_daemon_record_json(const json_t *d)
{
    json_t *r = json_deep_copy(d);
    if (r == NULL)
        return NULL;
    static const char *const renames[][2] = {{"gpu", "gpu_name"}, {"tuned", "tool_version"}};
    for (size_t i = 0; i < sizeof renames / sizeof renames[0]; i++) {
        json_t *v = json_object_get(r, renames[i][0]);
        if (v != NULL) {
            json_object_set(r, renames[i][1], v);
            json_object_del(r, renames[i][0]);
        }
    }
    if (json_object_get(r, "layout") == NULL)
        json_object_set_new(r, "layout", json_integer(TUNED__LAYOUT_DENSE));
    add_key(r);
    return r;
}

json_t *cli_answer(const char *source, json_t *record)
{
    json_t *a = json_object();
    if (a == NULL) {
        json_decref(record);
        return NULL;
    }
    json_object_set_new(a, "source", json_string(source));
    json_object_set(a, "config", json_object_get(record, "config"));
    json_object_set(a, "median_us", json_object_get(record, "median_us"));
    json_object_set(a, "gpu", json_object_get(record, "gpu_name"));
    json_object_set(a, "gpu_fp", json_object_get(record, "gpu_fp"));
    json_object_set_new(a, "record", record);
    return a;
}

bool cli_stdout_gone(void)
{
    return ferror(stdout) && errno == EPIPE;
}

int cli_print_json(json_t *v)
{
    if (v == NULL) {
        fprintf(stderr, "tuned: out of memory\n");
        return CLI_ERROR;
    }
    int rc = json_dumpf(v, stdout, JSON_INDENT(2) | JSON_REAL_PRECISION(17));
    json_decref(v);
    if (rc != 0 || putchar('\n') == EOF || fflush(stdout) != 0) {
        if (cli_stdout_gone())
            return CLI_OK; /* the reader has what it wanted */
        fprintf(stderr, "tuned: cannot write to stdout: %s\n", strerror(errno));
        return CLI_ERROR;
    }
    return CLI_OK;
}

static const char *str(const json_t *o, const char *key)
{
    const char *s = json_string_value(json_object_get(o, key));
    return s != NULL ? s : "?";
}

/* The lines every source has, in one order. */
static void print_record_text(const char *source, const json_t *r, const char *differs)
{
    printf("source       %s\n", source);
    if (json_is_string(json_object_get(r, "kernel")))
        printf("kernel       %s\n", str(r, "kernel"));
    printf("shape        %lldx%lld %s\n", (long long)json_integer_value(json_object_get(r, "rows")),
           (long long)json_integer_value(json_object_get(r, "cols")), str(r, "dtype"));
    printf("gpu          %s\n", str(r, "gpu_name"));
    printf("gpu_fp       %s\n", str(r, "gpu_fp"));
    printf("config       %s\n", str(r, "config"));
    double us = json_number_value(json_object_get(r, "median_us"));
    double copy = json_number_value(json_object_get(r, "copy_us"));
    printf("median_us    %.2f\n", us);
    printf("copy_us      %.2f\n", copy);
    printf("gbps         %.1f\n", json_number_value(json_object_get(r, "gbps")));
    printf("of_copy      %.1f%%\n", us > 0 ? 100.0 * copy / us : 0.0);
    printf("evaluations  %lld\n", (long long)json_integer_value(json_object_get(r, "evaluations")));
    printf("date         %s\n", str(r, "date"));
    printf("tuned        %s\n", str(r, "tool_version"));
    printf("key          %s\n", str(r, "key"));
    if (differs != NULL)
        printf("differs      %s\n", differs);
}

int cli_print_answer(const cli_opts *o, json_t *a)
{
    if (a == NULL) {
        fprintf(stderr, "tuned: out of memory\n");
        return CLI_ERROR;
    }
    if (o->json)
        return cli_print_json(a);
    const char *source = str(a, "source");
    const json_t *recs = json_object_get(a, "records");
    if (json_is_array(recs)) {
        size_t i;
        const json_t *r;
        json_array_foreach(recs, i, r) {
            if (i > 0)
                printf("\n");
            print_record_text(source, r, NULL);
        }
    } else {
        print_record_text(source, json_object_get(a, "record"),
                          json_string_value(json_object_get(a, "differs")));
    }
    json_decref(a);
    if (fflush(stdout) != 0 && !cli_stdout_gone()) {
        fprintf(stderr, "tuned: cannot write to stdout: %s\n", strerror(errno));
        return CLI_ERROR;
    }
    return CLI_OK;
}
