/* cmd_gc.c: `tuned gc [--days N] [--dry-run]`: drops evaluation history and
 * compiled cubins that no stored winner uses and that are older than N days
 * (default 30; 0 drops every unused one). Damaged entries always go. */
#include <time.h>

#include "tools/cli.h"

#define DEFAULT_DAYS 30

int cli_cmd_gc(const cli_opts *o)
{
    tuned__err e = {0};
    tuned__store *s = NULL;
    if (cli_open_store(o, 0, &s, &e) != 0)
        return cli_fail(&e);
    double days = o->have_days ? o->days : DEFAULT_DAYS;
    tuned__gc_stats st;
    int rc = tuned__store_gc(s, days, time(NULL), o->dry_run, &st, &e);
    tuned__store_close(s);
    if (rc != 0)
        return cli_fail(&e);
    const char *verb = o->dry_run ? "would drop" : "dropped";
    printf("history: %s %zu entr%s, kept %zu\n", verb, st.evals_removed,
           st.evals_removed == 1 ? "y" : "ies", st.evals_kept);
    printf("cubins:  %s %zu (%.1f KiB), kept %zu\n", verb, st.cubins_removed,
           (double)st.cubin_bytes_removed / 1024.0, st.cubins_kept);
    if (st.damaged_removed > 0)
        printf("damaged: %s %zu entr%s that did not decode\n", verb, st.damaged_removed,
               st.damaged_removed == 1 ? "y" : "ies");
    return CLI_OK;
}
