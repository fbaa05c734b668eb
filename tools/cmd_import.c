/* cmd_import.c: `tuned import [--force] FILE.jsonl...` ('-' reads stdin):
 * every line validated (the store's checks, then a config this build can
 * parse, in canonical form, and a shape within tuned's limits); skipped
 * lines are named with their reason; a stored record is replaced only by a
 * faster one unless --force. Exit 1 when any line was invalid, a file was
 * truncated or could not be read; what was valid is stored regardless. */
#include <errno.h>
#include <string.h>

#include "tools/cli.h"

#define MAX_NOTES 50 /* per file; the rest are counted */

typedef struct import_ctx {
    size_t notes;
} import_ctx;

static void note(void *ctx, const char *line)
{
    import_ctx *c = ctx;
    if (c->notes++ < MAX_NOTES)
        fprintf(stderr, "tuned: %s\n", line);
}

static int check(void *ctx, const tuned__record *r, tuned__err *e)
{
    (void)ctx;
    tuned__config cfg;
    char canon[TUNED__CONFIG_TEXT];
    if (tuned__config_parse(r->config, &cfg, e) != 0)
        return e->code;
    tuned__config_format(&cfg, canon, sizeof canon);
    if (strcmp(canon, r->config) != 0)
        return tuned__errf(e, TUNED_EINVAL, "config '%s' is not in canonical form ('%s')",
                           r->config, canon);
    if (r->key.rows > TUNED__MAX_ROWS || r->key.cols > TUNED__MAX_COLS)
        return tuned__errf(e, TUNED_EINVAL, "shape %llux%llu is beyond tuned's limits",
                           (unsigned long long)r->key.rows, (unsigned long long)r->key.cols);
    return 0;
}

static int import_one(tuned__store *s, const cli_opts *o, const char *path)
{
    bool is_stdin = strcmp(path, "-") == 0;
    const char *name = is_stdin ? "<stdin>" : path;
    FILE *in = is_stdin ? stdin : fopen(path, "rb");
    if (in == NULL) {
        fprintf(stderr, "tuned: import %s: %s\n", path, strerror(errno));
        return CLI_ERROR;
    }
    import_ctx c = {0};
    tuned__import_opts io = {.force = o->force, .check = check, .note = note, .ctx = &c};
    tuned__import_stats st;
    tuned__err e = {0};
    int rc = tuned__store_import(s, in, name, &io, &st, &e);
    if (!is_stdin)
        fclose(in);
    if (c.notes > MAX_NOTES)
        fprintf(stderr, "tuned: %s: %zu more notes not shown\n", name, c.notes - MAX_NOTES);
    if (!o->quiet || rc != 0 || st.invalid > 0 || st.truncated)
        fprintf(stderr, "tuned: %s: %zu added, %zu replaced, %zu already stored, %zu kept "
                "(stored is as fast or faster), %zu invalid%s\n", name, st.added, st.replaced,
                st.unchanged, st.kept, st.invalid, st.truncated ? ", file truncated" : "");
    if (rc != 0) {
        cli_fail(&e);
        return CLI_ERROR;
    }
    return st.invalid > 0 || st.truncated ? CLI_ERROR : CLI_OK;
}

int cli_cmd_import(const cli_opts *o)
{
    if (o->nargs == 0) {
        fprintf(stderr, "tuned: import needs one or more files (or '-' for stdin) (see tuned "
                        "--help)\n");
        return CLI_USAGE;
    }
    tuned__err e = {0};
    tuned__store *s = NULL;
    if (cli_open_store(o, 0, &s, &e) != 0)
        return cli_fail(&e);
    int status = CLI_OK;
    for (int i = 0; i < o->nargs; i++)
        if (import_one(s, o, o->args[i]) != CLI_OK)
            status = CLI_ERROR;
    tuned__store_close(s);
    return status;
}
