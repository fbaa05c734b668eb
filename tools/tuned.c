/* tuned.c: main() of the `tuned` executable: parse, then run one command.
 * Every failure ends in one line on stderr and a non-zero exit status. */
#include <signal.h>
#include <string.h>

#include "tools/cli.h"

int cli_fail(const tuned__err *e)
{
    fprintf(stderr, "tuned: %s\n", e->msg[0] ? e->msg : tuned_strerror(e->code));
    return CLI_ERROR;
}

void cli_print_record(FILE *f, const tuned__record *r)
{
    const char *dtype = tuned_dtype_name((tuned_dtype)r->key.dtype);
    const char *kernel = tuned__kernel_name(r->key.kernel);
    fprintf(f, "kernel       %s\n", kernel ? kernel : "?");
    fprintf(f, "shape        %llux%llu %s\n", (unsigned long long)r->key.rows,
            (unsigned long long)r->key.cols, dtype ? dtype : "?");
    fprintf(f, "gpu          %s\n", r->gpu_name);
    fprintf(f, "identity     %s\n", r->gpu);
    fprintf(f, "provenance   sm_%u%u, %u SMs, %llu MiB, driver %u, nvrtc %u.%u, templates %016llx\n",
            r->prov.cc_major, r->prov.cc_minor, r->prov.sm_count,
            (unsigned long long)r->prov.mem_mib, r->prov.driver_version, r->prov.nvrtc_major,
            r->prov.nvrtc_minor, (unsigned long long)r->prov.template_hash);
    fprintf(f, "policy       %s\n", r->prov.policy);
    fprintf(f, "config       %s\n", r->config);
    fprintf(f, "median_us    %.2f\n", r->median_us);
    fprintf(f, "copy_us      %.2f\n", r->copy_us);
    fprintf(f, "gbps         %.1f\n", r->gbps);
    fprintf(f, "of_copy      %.1f%%\n", r->median_us > 0 ? 100.0 * r->copy_us / r->median_us : 0.0);
    fprintf(f, "evaluations  %u\n", r->evaluations);
    fprintf(f, "date         %s\n", r->date);
    fprintf(f, "tuned        %s\n", r->tool_version);
}

/* Every command: its name, whether it needs --shape, its function, and
 * whether it takes positional arguments (files, keys).
 * A new command is one line here and one cmd_*.c file. */
const cli_command cli_commands[] = {
    {"tune", true, cli_cmd_tune, false},
    {"get", true, cli_cmd_get, false},
    {"devices", false, cli_cmd_devices, false},
    {"serve", false, cli_cmd_serve, false},
    {"worker", false, cli_cmd_worker, false}, /* hidden: the daemon's GPU process */
    {"list", false, cli_cmd_list, false},
    {"export", false, cli_cmd_export, false},
    {"import", false, cli_cmd_import, true},
    {"forget", false, cli_cmd_forget, true},
    {"gc", false, cli_cmd_gc, false},
    {"verify", false, cli_cmd_verify, false},
    {NULL, false, NULL, false},
};

const cli_command *cli_find_command(const char *name)
{
    for (const cli_command *c = cli_commands; c->name != NULL; c++)
        if (strcmp(c->name, name) == 0)
            return c;
    return NULL;
}

int main(int argc, char **argv)
{
    /* A closed pipe on stdout must be an error return, not a kill. */
    signal(SIGPIPE, SIG_IGN);
    cli_opts o;
    int rc = cli_parse(argc, argv, &o);
    if (rc != 0)
        return rc < 0 ? CLI_OK : rc;
    return cli_find_command(o.command)->run(&o);
}
