/* cli.h: what the `tuned` executable's files share: parsed options, the
 * commands, and the printing of records. */
#ifndef TUNED_TOOLS_CLI_H
#define TUNED_TOOLS_CLI_H

#include <stdbool.h>
#include <stdio.h>

#include "cache/store.h"
#include "src/tuner/tune.h"

/* Exit statuses, documented in --help. */
enum { CLI_OK = 0, CLI_ERROR = 1, CLI_USAGE = 2, CLI_NOT_FOUND = 3 };

typedef struct cli_opts {
    const char *command;   /* "tune", "get", "devices" */
    bool have_shape;
    tuned__tune_request request;
    char db[4096];
    bool quiet;
    const char *trace;     /* --trace FILE: every evaluated variant, tab-separated */
    /* The daemon: serve, and get/tune/list through it (client.c). */
    char socket[108];      /* --socket PATH ("": the default socket) */
    bool db_given;         /* --db was on the command line: that store, no daemon */
    const char *listen;    /* serve --listen [HOST:]PORT */
    const char *group;     /* serve --group NAME */
    const char *limits[16];/* serve --limit NAME=VALUE */
    const char *remote;    /* serve, forget: --remote URL (the fleet tier) */
    const char *remote_credentials; /* --remote-credentials FILE | env:NAME */
    size_t nlimits;
    /* Store maintenance (export, import, list, forget, gc, verify). */
    bool have_dtype;       /* --dtype was given (filters select every dtype otherwise) */
    bool json;             /* --json */
    bool force;            /* --force: import replaces better records */
    bool dry_run;          /* --dry-run: forget and gc change nothing */
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

void cli_usage(FILE *f);

typedef struct cli_command {
    const char *name;
    bool needs_shape;
    int (*run)(const cli_opts *o);
    bool takes_args;  /* positional arguments (files, keys) allowed */
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

/* Prints a stored record as aligned "key value" lines. */
void cli_print_record(FILE *f, const tuned__record *r);

/* Prints "tuned: <message>" on stderr and returns CLI_ERROR. */
int cli_fail(const tuned__err *e);

#endif
