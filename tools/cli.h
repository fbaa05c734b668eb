/* cli.h: what the `tuned` executable's files share: parsed options, the
 * commands, and the printing of records. */
#ifndef TUNED_TOOLS_CLI_H
#define TUNED_TOOLS_CLI_H

#include <stdbool.h>
#include <stdio.h>

#include "../cache/store.h"
#include "../src/tuner/tune.h"

/* Exit statuses, documented in --help. */
enum { CLI_OK = 0, CLI_ERROR = 1, CLI_USAGE = 2, CLI_NOT_FOUND = 3 };

typedef struct cli_opts {
    const char *command;   /* "tune", "get", "devices" */
    bool have_shape;
    tuned__tune_request request;
    char db[4096];
    bool quiet;
    const char *trace;     /* --trace FILE: every evaluated variant, tab-separated */
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
} cli_command;

/* The command table (tuned.c), ended by a NULL name. */
extern const cli_command cli_commands[];

/* The command called name, or NULL. */
const cli_command *cli_find_command(const char *name);

int cli_cmd_tune(const cli_opts *o);
int cli_cmd_get(const cli_opts *o);
int cli_cmd_devices(const cli_opts *o);

/* Prints a stored record as aligned "key value" lines. */
void cli_print_record(FILE *f, const tuned__record *r);

/* Prints "tuned: <message>" on stderr and returns CLI_ERROR. */
int cli_fail(const tuned__err *e);

#endif
