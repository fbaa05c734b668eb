/* cmd_serve.c: `tuned serve`: run the daemon (src/daemon/daemon.h) until
 * SIGTERM or SIGINT. Options: --socket, --db, --listen [HOST:]PORT,
 * --group NAME, --remote URL and --remote-credentials FILE|env:NAME (the
 * fleet tier), and --limit NAME=VALUE for the limits below; all of them
 * are checked before anything is created or started. */
#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "src/daemon/daemon.h"
#include "tools/cli.h"

static bool number(const char *s, double min, double max, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno != 0 || end == s || *end != '\0' || !(v >= min) || !(v <= max))
        return false;
    *out = v;
    return true;
}

/* One --limit NAME=VALUE into so; false (with a message) if bad. */
static bool apply_limit(const char *spec, tuned__serve_opts *so)
{
    static const struct {
        const char *name;
        double min, max;
        int kind; /* 0 unsigned, 1 size_t, 2 double, 3 int */
        size_t off;
    } table[] = {
        {"clients", 1, 1e6, 0, offsetof(tuned__serve_opts, max_clients)},
        {"unix-reserve", 0, 1e6, 0, offsetof(tuned__serve_opts, unix_reserve)},
        {"idle", 0.01, 86400 * 30, 2, offsetof(tuned__serve_opts, idle_timeout_s)},
        {"output-total", 4096, 1ull << 40, 1, offsetof(tuned__serve_opts, max_output_total)},
        {"jobs", 1, 1e5, 0, offsetof(tuned__serve_opts, max_jobs)},
        {"line", 64, 64 << 20, 1, offsetof(tuned__serve_opts, max_line)},
        {"output", 4096, 1 << 30, 1, offsetof(tuned__serve_opts, max_output)},
        {"variant-timeout", 0.01, 86400, 2, offsetof(tuned__serve_opts, variant_timeout_s)},
        {"client-timeout", 0.01, 86400, 2, offsetof(tuned__serve_opts, client_timeout_s)},
        {"grace", 0, 3600, 2, offsetof(tuned__serve_opts, shutdown_grace_s)},
        {"nice", 0, 19, 3, offsetof(tuned__serve_opts, worker_nice)},
        {"remote-timeout", 0.001, 600, 2, offsetof(tuned__serve_opts, remote_timeout_s)},
        {"lease", 0.1, 86400, 2, offsetof(tuned__serve_opts, lease_s)},
        {"reclaim", 0.1, 86400 * 30, 2, offsetof(tuned__serve_opts, reclaim_s)},
    };
    const char *eq = strchr(spec, '=');
    for (size_t i = 0; eq != NULL && i < sizeof table / sizeof table[0]; i++) {
        if (strlen(table[i].name) != (size_t)(eq - spec) ||
            strncmp(table[i].name, spec, (size_t)(eq - spec)) != 0)
            continue;
        double v;
        if (!number(eq + 1, table[i].min, table[i].max, &v) ||
            (table[i].kind != 2 && v != (double)(long long)v)) {
            fprintf(stderr, "tuned: --limit %s: expected a %s from %g to %g (see tuned serve --help)\n",
                    spec, table[i].kind == 2 ? "number" : "whole number", table[i].min,
                    table[i].max);
            return false;
        }
        char *p = (char *)so + table[i].off;
        if (table[i].kind == 0)
            *(unsigned *)p = (unsigned)v;
        else if (table[i].kind == 1)
            *(size_t *)p = (size_t)v;
        else if (table[i].kind == 2)
            *(double *)p = v;
        else
            *(int *)p = (int)v;
        return true;
    }
    fprintf(stderr,
            "tuned: --limit %s: expected NAME=VALUE, NAME one of clients, unix-reserve, idle, "
            "jobs, line, output, output-total, variant-timeout, client-timeout, grace, nice, "
            "remote-timeout, lease, reclaim "
            "(see tuned serve --help)\n",
            spec);
    return false;
}

int cli_cmd_serve(const cli_opts *o)
{
    tuned__serve_opts so;
    tuned__serve_opts_default(&so);
    if (o->socket[0] != '\0')
        snprintf(so.socket_path, sizeof so.socket_path, "%s", o->socket);
    snprintf(so.db, sizeof so.db, "%s", o->db);
    if (o->listen != NULL)
        snprintf(so.listen, sizeof so.listen, "%s", o->listen);
    if (o->group != NULL)
        snprintf(so.group, sizeof so.group, "%s", o->group);
    so.quiet = o->quiet;
    so.retune_compatible = o->retune_compatible;
    if (o->remote != NULL)
        snprintf(so.remote, sizeof so.remote, "%s", o->remote);
    if (o->remote_credentials != NULL)
        snprintf(so.remote_credentials, sizeof so.remote_credentials, "%s",
                 o->remote_credentials);
    for (size_t i = 0; i < o->nlimits; i++)
        if (!apply_limit(o->limits[i], &so))
            return CLI_USAGE;
    tuned__err e = {0};
    /* Every option, before any directory, socket, store or worker exists. */
    if (tuned__serve_check(&so, &e) != 0) {
        fprintf(stderr, "tuned: %s (see tuned serve --help)\n", e.msg);
        return CLI_USAGE;
    }
    if (tuned__serve(&so, &e) != 0)
        return cli_fail(&e);
    return CLI_OK;
}
