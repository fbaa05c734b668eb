/* cli.h: what the `tuned` executable's files share: parsed options, the
 * commands, and the printing of records. */
#ifndef TUNED_TOOLS_CLI_H
#define TUNED_TOOLS_CLI_H

#include <stdbool.h>
#include <stdio.h>

#include <jansson.h>

#include "cache/store.h"
#include "src/tuner/effort.h"
#include "src/tuner/tune.h"

/* Exit statuses, documented in --help. */
enum { CLI_OK = 0, CLI_ERROR = 1, CLI_USAGE = 2, CLI_NOT_FOUND = 3 };

/* The commands, in the order of the command table (tuned.c); an option
 * names the commands it applies to as a mask of CLI_ON() bits. */
typedef enum cli_command_id {
    CLI_TUNE, CLI_GET, CLI_DEVICES, CLI_SERVE, CLI_WORKER, CLI_LIST, CLI_EXPORT, CLI_IMPORT,
    CLI_FORGET, CLI_GC, CLI_VERIFY, CLI_STATS, CLI_COMMAND_COUNT
} cli_command_id;
#define CLI_ON(id) (1u << (id))

/* $TUNED_LOG, or -q: what goes to stderr. */
typedef enum cli_log_level { CLI_LOG_ERROR, CLI_LOG_WARN, CLI_LOG_INFO, CLI_LOG_DEBUG } cli_log_level;

/* tune's progress on stderr: a line per generation (default), one JSON
 * object per generation (what the embedding library reads from its
 * child tunes), or none. */
typedef enum cli_progress { CLI_PROGRESS_LINE, CLI_PROGRESS_JSON, CLI_PROGRESS_NONE } cli_progress;

typedef struct cli_opts {
    const char *command;   /* "tune", "get", "devices" */
    cli_command_id id;
    bool have_shape;
    tuned__tune_request request;
    char db[4096];
    bool quiet;            /* -q, or $TUNED_LOG error or warn: no progress or notes */
    cli_log_level log;     /* $TUNED_LOG (default info; -q: warn) */
    cli_progress progress; /* tune --progress */
    tuned__effort effort;  /* --effort, else $TUNED_EFFORT, else default */
    bool skip_store;       /* tune --skip-store or $TUNED_SKIP_STORE: measure, store nothing */
    const char *trace;     /* --trace FILE: every evaluated variant, tab-separated */
    /* The daemon: serve, and get/tune/list through it (client.c). */
    char socket[108];      /* --socket PATH ("": the default socket) */
    bool db_given;         /* --db was on the command line: that store, no daemon */
    const char *listen;    /* serve --listen [HOST:]PORT */
    const char *group;     /* serve --group NAME */
    const char *limits[16];/* serve --limit NAME=VALUE */
    size_t nlimits;
    /* The remote tier (docs/fleet.md): serve --remote URL and
     * --remote-credentials FILE|env:NAME; forget --remote URL (the record
     * is deleted there too; forget takes --remote-credentials as well). */
    const char *remote;
    const char *remote_credentials;
    const char *forget_remote;
    bool retune_compatible; /* serve --retune-compatible */
    /* Store maintenance (export, import, list, forget, gc, verify). */
    bool have_dtype;       /* --dtype was given (filters select every dtype otherwise) */
    bool json;             /* --json */
    bool force;            /* --force: import replaces better records */
    bool priority_normal;  /* import --priority normal: not lowered to idle priority */
    bool dry_run;          /* --dry-run: forget and gc change nothing; export writes nothing */
    bool fix;              /* --fix: verify replaces stored times it cannot reproduce */
    const char *gpu;       /* --gpu NAME: a part of the GPU name, or its fingerprint */
    bool have_days;
    double days;           /* --days N: gc's age limit */
    char **args;           /* positional arguments of commands that take them */
    int nargs;
} cli_opts;

/* Parses argv into o; on a bad argument prints one line to stderr and
 * returns CLI_USAGE. Returns -1 after printing --help or --version. */
int cli_parse(int argc, char **argv, cli_opts *o);

/* Parses "ROWSxCOLS" with the limits tuned accepts; on failure writes the
 * reason (without the program name) into why. */
bool cli_parse_shape(const char *text, tuned__shape *shape, char *why, size_t n);

/* `tuned --help` (the commands, then the default command's options), or
 * `tuned COMMAND --help` (that command's synopsis and options). */
void cli_usage(FILE *f, cli_command_id id, bool overview);

typedef struct cli_command {
    cli_command_id id;
    const char *name;
    bool needs_shape;
    int (*run)(const cli_opts *o);
    bool takes_args;  /* positional arguments (files, keys) allowed */
    bool hidden;      /* not in `tuned --help` (the daemon's worker) */
    bool writes;      /* changes a store or runs the daemon: SIGPIPE stays ignored */
    const char *synopsis; /* after "tuned NAME" */
    const char *summary;  /* what it does, for --help */
} cli_command;

/* The command table (tuned.c), ended by a NULL name. */
extern const cli_command cli_commands[];

/* The command called name, or NULL. */
const cli_command *cli_find_command(const char *name);

int cli_cmd_tune(const cli_opts *o);
int cli_cmd_get(const cli_opts *o);
int cli_cmd_devices(const cli_opts *o);
int cli_cmd_serve(const cli_opts *o);
int cli_cmd_worker(const cli_opts *o);
int cli_cmd_stats(const cli_opts *o);

/* ---- the daemon's clients (client.c) ---- */

/* Each asks the daemon, when one answers on the socket, and returns the
 * exit status; -1 when none does or --db was given: the caller then works
 * on the store itself. */
int cli_daemon_get(const cli_opts *o);
int cli_daemon_tune(const cli_opts *o);
int cli_daemon_list(const cli_opts *o);
int cli_cmd_export(const cli_opts *o);
int cli_cmd_import(const cli_opts *o);
int cli_cmd_list(const cli_opts *o);
int cli_cmd_forget(const cli_opts *o);
int cli_cmd_gc(const cli_opts *o);
int cli_cmd_verify(const cli_opts *o);

/* ---- store helpers (cli_store.c) ---- */

/* The identity of GPU `device`, if the driver and NVRTC are here; else
 * false with the reason in why. */
bool cli_local_gpu(int device, tuned__gpu *gpu, tuned__err *why);

/* What a record measured now for shape on gpu would hold, minus the
 * measurement: its key and provenance, to compare stored records with. */
void cli_here_record(const tuned__gpu *gpu, const tuned__shape *shape, tuned__record *here);

/* The record filter of --gpu, --shape and --dtype. */
void cli_filter(const cli_opts *o, tuned__store_filter *f);

/* Opens the store at o->db; a missing store is TUNED_ENOTFOUND (nothing is
 * created) unless the command is tune or import and flags ask for writing.
 * Prints nothing. */
int cli_open_store(const cli_opts *o, unsigned flags, tuned__store **s, tuned__err *e);

/* ---- answers: one output for a daemon's reply and the store's record
 * (cli_answer.c) ----
 *
 * An answer is a JSON object {"source": S, "config": C, "median_us": T,
 * "gpu": NAME, "gpu_fp": FP, "record": R} (compatible adds "differs"; an
 * answer without a local GPU to match is {"source": "unchecked",
 * "records": [R...]}); R has the store's record fields
 * (docs/store-format.md) with "key": all of them from the store, the
 * ones a daemon sends (kernel, dtype, rows, cols, gpu_fp, config, times,
 * evaluations, date, gpu_name, tool_version) from a daemon. Text output
 * prints the fields both have, so it is the same either way. */

/* The store form of r with its "key"; NULL when out of memory. */
json_t *cli_record_json(const tuned__record *r);

/* A daemon's record (docs/protocol.md: "gpu" the name, "tuned" the
 * version) renamed into the store form's names, with its "key". */
json_t *cli_daemon_record_json(const json_t *daemon_record);

/* {"source": source, ... "record": record (taken)}. */
json_t *cli_answer(const char *source, json_t *record);

/* Prints an answer (taken) as --json or text; CLI_OK, or CLI_ERROR when
 * stdout failed. */
int cli_print_answer(const cli_opts *o, json_t *answer);

/* Prints v (taken) as indented JSON and a newline; CLI_OK or CLI_ERROR. */
int cli_print_json(json_t *v);

/* Whether stdout was closed by its reader (EPIPE): the CLI then stops
 * quietly, as head(1) expects. */
bool cli_stdout_gone(void);

/* Prints "tuned: <message>" on stderr and returns CLI_ERROR. */
int cli_fail(const tuned__err *e);

#endif
