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

/* Every command: its name, whether it needs --shape, its function,
 * whether it takes positional arguments (files, keys), whether it is
 * hidden, whether it writes (a store, the daemon), and its --help. Its
 * options are the ones of the option table (cli_args.c) that name it.
 * A new command is one line here, its options' bits there, and one
 * cmd_*.c file. In the order of cli_command_id. */
const cli_command cli_commands[] = {
    {CLI_TUNE, "tune", true, cli_cmd_tune, false, false, true,
     "--shape ROWSxCOLS [--dtype D] [--effort E] [--budget N] [--time S] [--json] [options]",
     "Tune a kernel (--kernel) for one shape on one GPU and store the winner (the default command:\n"
     "`tuned --shape ...` is `tuned tune --shape ...`). A winner already stored for this GPU\n"
     "is printed instead (--retune tunes again); an interrupted tune resumes from the\n"
     "variants it measured. Through a running daemon unless --db is given."},
    {CLI_GET, "get", true, cli_cmd_get, false, false, false,
     "--shape ROWSxCOLS [--dtype D] [--gpu NAME] [--json] [options]",
     "Print the stored winner of a shape for this GPU: exact, else compatible (measured\n"
     "on this GPU model under another driver, NVRTC or policy). From the daemon when one\n"
     "answers (for its GPU; one without a GPU answers for the GPU its store names), else\n"
     "from the store, in the same form. With --gpu, or from the store without a local GPU,\n"
     "the store's records of the shape are printed, source \"unchecked\". Exit status 3\n"
     "when there is none."},
    {CLI_DEVICES, "devices", false, cli_cmd_devices, false, false, false, "[--json]",
     "List the GPUs the CUDA driver sees, with their identity, or say why there are none."},
    {CLI_SERVE, "serve", false, cli_cmd_serve, false, false, true,
     "[--socket PATH] [--db PATH] [--group G] [--listen [HOST:]PORT] [--limit N=V]... "
     "[--retune-compatible] [--remote URL [--remote-credentials FILE|env:NAME]]",
     "The daemon: answers config queries over a Unix socket (docs/protocol.md) and tunes\n"
     "in the background in one worker process per GPU. The socket appears once the store\n"
     "and the workers are up. Runs until SIGTERM or SIGINT; SIGHUP re-reads the store."},
    {CLI_WORKER, "worker", false, cli_cmd_worker, false, true, true, "--device N [--db PATH]",
     "Internal: the GPU worker process `tuned serve` starts, speaking JSON lines on stdin\n"
     "and stdout. Not for people: the daemon sets its options."},
    {CLI_LIST, "list", false, cli_cmd_list, false, false, false,
     "[--json] [--gpu NAME] [--shape RxC] [--dtype D] [options]",
     "The stored winners as a table, or one JSON array of records (each with its \"key\"\n"
     "and \"hwclass\"), with each record's serving tier on this GPU. Reads the store;\n"
     "asks a daemon only with --socket, whose records are the protocol's (no tier, no\n"
     "\"hwclass\"; --gpu then a whole model name or a fingerprint). Damaged records are\n"
     "named on stderr (exit 1)."},
    {CLI_EXPORT, "export", false, cli_cmd_export, false, false, false,
     "[--gpu NAME] [--shape RxC] [--dtype D] [--dry-run [--json]] > FILE.jsonl",
     "Write the stored winners as JSON lines (docs/store-format.md), from one snapshot\n"
     "of the store. --dry-run writes nothing and says how many would be written."},
    {CLI_IMPORT, "import", false, cli_cmd_import, true, false, true, "[--force] [--json] [--priority PRIORITY] FILE.jsonl...",
     "Add the records of exports ('-' reads stdin). Every line is validated; a stored\n"
     "record is replaced only by a faster one unless --force. Exit 1 when a line was\n"
     "invalid or a file could not be read; the valid records are stored regardless."},
    {CLI_FORGET, "forget", false, cli_cmd_forget, true, false, true,
     "KEY... | --gpu NAME | --shape RxC [--dtype D] [--dry-run] [--remote URL]",
     "Remove stored winners, by key (as `tuned list` prints them) or by filters; each is\n"
     "printed. Forgetting everything is removing the store directory, on purpose."},
    {CLI_GC, "gc", false, cli_cmd_gc, false, false, true, "[--days N] [--dry-run]",
     "Drop evaluation history and compiled cubins that no stored winner uses and that\n"
     "are older than N days; damaged entries always go."},
    {CLI_VERIFY, "verify", false, cli_cmd_verify, false, false, true,
     "[--gpu NAME] [--shape RxC] [--dtype D] [--device N] [--fix] [--json]",
     "Re-measure the stored winners of this GPU model on this GPU and report each one's\n"
     "drift from its stored time. Exit 1 when a winner now fails, or without a GPU."},
    {CLI_STATS, "stats", false, cli_cmd_stats, false, false, false, "[--socket PATH] [--json]",
     "Ask the running daemon for its counters: requests, answers, clients, jobs, the\n"
     "store and each GPU's worker. Exit 1 when no daemon answers."},
    {CLI_COMMAND_COUNT, NULL, false, NULL, false, false, false, NULL, NULL},
};
_Static_assert(sizeof cli_commands / sizeof cli_commands[0] == CLI_COMMAND_COUNT + 1,
               "one command table row per cli_command_id");

const cli_command *cli_find_command(const char *name)
{
    for (const cli_command *c = cli_commands; c->name != NULL; c++)
        if (strcmp(c->name, name) == 0)
            return c;
    return NULL;
}

int main(int argc, char **argv)
{
    cli_opts o;
    int rc = cli_parse(argc, argv, &o);
    if (rc != 0)
        return rc < 0 ? CLI_OK : rc;
    const cli_command *c = &cli_commands[o.id];
    /* A command that only prints ends as head(1) expects when its reader
     * goes: killed by SIGPIPE, quietly. One that writes a store or runs
     * the daemon (whose fleet client writes to sockets) ignores it and
     * sees EPIPE instead, so that it finishes what it changes. */
    signal(SIGPIPE, c->writes && !(o.id == CLI_VERIFY && !o.fix) ? SIG_IGN : SIG_DFL);
    return c->run(&o);
}
