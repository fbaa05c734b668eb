/* cmd_export.c: `tuned export [--gpu NAME] [--shape RxC] [--dtype D] >
 * FILE.jsonl`: the stored winners as JSON lines (docs/store-format.md),
 * from one snapshot of the store. With --dry-run nothing is written but
 * the count ("would export N records", or with --json {"records": N,
 * "db": PATH}). */
#include <errno.h>
#include <string.h>
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
    FILE *to = o->dry_run ? fopen("/dev/null", "w") : stdout;
    if (to == NULL) {
        tuned__store_close(s);
        return cli_fail(&(tuned__err){TUNED_EIO, "export: /dev/null cannot be opened"});
    }
    rc = tuned__store_export(s, &f, to, note, NULL, &n, &e);
    tuned__store_close(s);
    if (o->dry_run)
        fclose(to);
    if (rc != 0 && !o->dry_run && cli_stdout_gone())
        return CLI_OK; /* the reader stopped reading: no complaint */
    if (rc != 0)
        return cli_fail(&e);
    if (o->dry_run && o->json)
        return cli_print_json(json_pack("{s:I, s:s}", "records", (json_int_t)n, "db", o->db));
    if (o->dry_run) {
        printf("would export %zu record%s from %s\n", n, n == 1 ? "" : "s", o->db);
        return CLI_OK;
    }
    if (!o->quiet)
        fprintf(stderr, "tuned: exported %zu record%s from %s\n", n, n == 1 ? "" : "s", o->db);
    return CLI_OK;
}
