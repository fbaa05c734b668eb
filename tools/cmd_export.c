/* cmd_export.c: `tuned export [--gpu NAME] [--shape RxC] [--dtype D] >
 * FILE.jsonl`: the stored winners as JSON lines (docs/store-format.md),
 * from one snapshot of the store. */
#include <unistd.h>

#include "tools/cli.h"

static void note(void *ctx, const char *line)
{
    (void)ctx;
    fprintf(stderr, "tuned: export: %s\n", line);
}

int cli_cmd_export(const cli_opts *o)
{
    tuned__err e = {0};
    tuned__store *s = NULL;
    int rc = cli_open_store(o, TUNED__STORE_READONLY, &s, &e);
    if (rc != 0)
        return cli_fail(&e);
    tuned__store_filter f;
    cli_filter(o, &f);
    size_t n = 0;
    rc = tuned__store_export(s, &f, stdout, note, NULL, &n, &e);
    tuned__store_close(s);
    if (rc != 0)
        return cli_fail(&e);
    if (!o->quiet)
        fprintf(stderr, "tuned: exported %zu record%s from %s\n", n, n == 1 ? "" : "s", o->db);
    return CLI_OK;
}
