/* test_replay.c: the search against recorded GPU landscapes (every valid
 * variant's measured time for a shape, from tools/search-quality.sh), with
 * no GPU: for several seeds, the search must reach within 2% of the
 * table's best with at most 15% of the table's evaluations.
 *
 *   test_replay TABLE.tsv ROWSxCOLS DTYPE
 * Configs the table lacks (the space grew since it was recorded) count as
 * failed variants; configs the table has that the space lacks are ignored. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "src/tuner/search.h"

typedef struct entry {
    tuned__config config;
    bool ok;
    double us;
} entry;

typedef struct table {
    entry *rows;
    size_t n;
    size_t evaluated;
} table;

static int load(const char *path, table *t)
{
    FILE *f = fopen(path, "r");
    if (f == NULL) {
        perror(path);
        return -1;
    }
    char line[4096];
    size_t cap = 0;
    while (fgets(line, sizeof line, f) != NULL) {
        char *save = NULL, *config = strtok_r(line, "\t", &save);
        char *status = strtok_r(NULL, "\t", &save), *median = strtok_r(NULL, "\t", &save);
        tuned__config c;
        if (config == NULL || status == NULL || median == NULL ||
            tuned__config_parse(config, &c, NULL) != 0)
            continue; /* the header, or a config of another codegen */
        if (t->n == cap) {
            cap = cap ? 2 * cap : 1024;
            entry *grown = realloc(t->rows, cap * sizeof *grown);
            if (grown == NULL) {
                fclose(f);
                return -1;
            }
            t->rows = grown;
        }
        t->rows[t->n++] = (entry){c, strcmp(status, "ok") == 0, strtod(median, NULL)};
    }
    fclose(f);
    return 0;
}

static const entry *find(const table *t, const tuned__config *c)
{
    for (size_t k = 0; k < t->n; k++)
        if (tuned__config_equal(&t->rows[k].config, c))
            return &t->rows[k];
    return NULL;
}

static int replay(void *ctx, const tuned__config *cfgs, size_t n, tuned__eval_result *out,
                  tuned__err *e)
{
    (void)e;
    table *t = ctx;
    for (size_t i = 0; i < n; i++) {
        memset(&out[i], 0, sizeof out[i]);
        out[i].status = TUNED__EVAL_LAUNCH_ERROR;
        snprintf(out[i].detail, sizeof out[i].detail, "not in the table");
        const entry *r = find(t, &cfgs[i]);
        if (r != NULL) {
            out[i].status = r->ok ? TUNED__EVAL_OK : TUNED__EVAL_WRONG;
            out[i].median_us = r->ok ? r->us : 0.0;
        }
        t->evaluated++;
    }
    return 0;
}

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: test_replay TABLE.tsv ROWSxCOLS DTYPE\n");
        return 2;
    }
    table t = {0};
    tuned__shape s = {0};
    tuned__err e = {0};
    if (load(argv[1], &t) != 0 || t.n == 0 ||
        sscanf(argv[2], "%llux%llu", (unsigned long long *)&s.rows,
               (unsigned long long *)&s.cols) != 2 ||
        tuned_dtype_parse(argv[3], &s.dtype) != 0) {
        fprintf(stderr, "FAIL: cannot read %s for %s %s\n", argv[1], argv[2], argv[3]);
        free(t.rows);
        return 1;
    }
    tuned__space sp;
    if (tuned__space_init(&sp, &s, 90, 132, &e) != 0) {
        fprintf(stderr, "FAIL: %s\n", e.msg);
        free(t.rows);
        return 1;
    }
    double best = 0.0;
    size_t in_space = 0;
    for (size_t k = 0; k < t.n; k++)
        if (tuned__space_valid(&sp, &t.rows[k].config, NULL, 0) && t.rows[k].ok &&
            (best == 0.0 || t.rows[k].us < best))
            best = t.rows[k].us;
    /* The landscape as the search sees it: the space's configs the table
     * has a line for. */
    for (size_t i = 0; i < sp.count; i++)
        in_space += find(&t, &sp.valid[i]) != NULL;
    size_t budget = in_space * 15 / 100;
    int failures = 0;
    for (uint64_t seed = 1; seed <= 5; seed++) {
        tuned__search_opts o;
        tuned__search_opts_default(&o);
        o.seed = seed;
        o.budget = budget;
        tuned__search_result r;
        t.evaluated = 0;
        if (tuned__search_run(&sp, &o, replay, &t, NULL, NULL, &r, &e) != 0 || !r.found) {
            fprintf(stderr, "FAIL seed %llu: %s\n", (unsigned long long)seed, e.msg);
            failures++;
            continue;
        }
        char name[TUNED__CONFIG_TEXT];
        tuned__config_format(&r.best, name, sizeof name);
        double gap = r.best_us / best - 1.0;
        bool ok = gap <= 0.02 && r.evaluations <= budget;
        printf("%s seed %llu: %s %.3f us, %+.2f%% from the best %.3f, %zu evaluations (%.1f%% of "
               "%zu), %s\n",
               ok ? "ok" : "FAIL", (unsigned long long)seed, name, r.best_us, 100 * gap, best,
               r.evaluations, 100.0 * r.evaluations / in_space, in_space, r.stop_reason);
        failures += !ok;
    }
    tuned__space_free(&sp);
    free(t.rows);
    return failures ? 1 : 0;
}
