/* cli_args.c: the command line of `tuned`: one table of options, each
 * naming the commands it applies to, from which both the parser and every
 * command's --help are made (so a command's help lists exactly what it
 * accepts); shapes, numbers, the environment, and the default store path.
 * Every bad argument gets one line naming it and exit status 2. */
#include <errno.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "tools/cli.h"
#include "src/client/client.h"

/* No GPU holds a call whose tensors together exceed this. */
#define MAX_TOTAL_BYTES (1ull << 40)

enum {
    OPT_SHAPE = 256, OPT_DTYPE, OPT_BUDGET, OPT_TIME, OPT_SEED, OPT_DEVICE, OPT_DB, OPT_VERSION,
    OPT_EXHAUSTIVE, OPT_TRACE, OPT_RETUNE, OPT_POPULATION, OPT_COPIES, OPT_MIN_GAIN, OPT_SOCKET,
    OPT_LISTEN, OPT_GROUP, OPT_LIMIT, OPT_JSON, OPT_FORCE, OPT_FIX, OPT_DRY_RUN, OPT_GPU, OPT_DAYS,
    OPT_EFFORT, OPT_PROGRESS, OPT_SKIP_STORE, OPT_REMOTE, OPT_REMOTE_CREDENTIALS, OPT_KERNEL,
    OPT_RETUNE_COMPATIBLE, OPT_PRIORITY, OPT_TRY,
    OPT_QUIET = 'q', OPT_HELP = 'h',
};

#define T CLI_ON(CLI_TUNE)
#define G CLI_ON(CLI_GET)
#define D CLI_ON(CLI_DEVICES)
#define S CLI_ON(CLI_SERVE)
#define W CLI_ON(CLI_WORKER)
#define L CLI_ON(CLI_LIST)
#define E CLI_ON(CLI_EXPORT)
#define I CLI_ON(CLI_IMPORT)
#define F CLI_ON(CLI_FORGET)
#define C CLI_ON(CLI_GC)
#define V CLI_ON(CLI_VERIFY)
#define X CLI_ON(CLI_STATS)
#define ALL (CLI_ON(CLI_COMMAND_COUNT) - 1)

/* One option as some commands take it. An option whose meaning differs
 * between commands has one row per meaning; a command takes an option when
 * a row with its name names the command. */
typedef struct cli_option {
    const char *name;
    bool has_arg;
    int id;
    const char *arg;  /* the value's name in --help */
    unsigned commands;
    const char *help; /* lines after the first are indented under it */
} cli_option;

static const cli_option options[] = {
    {"shape", true, OPT_SHAPE, "RxC[:P]", T | G, "rows x columns; the kernel runs over each row (the last dimension); :P a kind's key parameters, e.g. 16384x128:k=8,score=sigmoid (docs/kernels.md)"},
    {"shape", true, OPT_SHAPE, "RxC", L | E | F | V, "only records of this shape"},
    {"dtype", true, OPT_DTYPE, "D", T | G, "fp16 (default), bf16 or fp32; the math is fp32 for all three"},
    /* Its help lists the kinds of the registry (print_option). */
    {"kernel", true, OPT_KERNEL, "KERNEL", T | G, "the kind of kernel"},
    {"kernel", true, OPT_KERNEL, "KERNEL", F, "only records of this kind"},
    {"dtype", true, OPT_DTYPE, "D", L | E | F | V, "only records of this dtype"},
    {"gpu", true, OPT_GPU, "NAME", G,
     "the records of that GPU: a part of its name or its 16-hex-digit fingerprint\n"
     "(read from the store, not asked of a daemon)"},
    {"gpu", true, OPT_GPU, "NAME", L | E | F | V,
     "only records of GPUs whose name contains NAME (any case), or of that\n"
     "16-hex-digit fingerprint (list --socket: the daemon's rule, a whole model name)"},
    {"effort", true, OPT_EFFORT, "E", T,
     "quick, default or full: the budget, first population, time and finalist\n"
     "rounds together (quick 60/16/15 s/2, default 200/40/50 s/3, full 1000/120/300 s/5);\n"
     "--budget, --population and --time given as well win (default: $TUNED_EFFORT)"},
    {"budget", true, OPT_BUDGET, "N", T, "evaluate at most N new variants (default 200)"},
    {"time", true, OPT_TIME, "S", T, "search for at most S seconds (default 50)"},
    {"seed", true, OPT_SEED, "N", T, "seed of the random population (default 1): same seed, same search"},
    {"population", true, OPT_POPULATION, "N", T, "random variants in the first generation (default 40)"},
    {"copies", true, OPT_COPIES, "N", T, "incumbents the pattern search moves from (default 4)"},
    {"min-gain", true, OPT_MIN_GAIN, "F", T,
     "stop after two generations in a row gain less than F (default 0.002)"},
    {"exhaustive", false, OPT_EXHAUSTIVE, NULL, T, "evaluate every valid variant (within --budget and --time)"},
    {"try", true, OPT_TRY, "CONFIG", T, "measure CONFIG (a config text, as tuned list prints) first: a variant the search might not draw; repeatable, up to 8"},
    {"retune", false, OPT_RETUNE, NULL, T,
     "tune again although a winner is stored (compiled variants are reused);\n"
     "without it a stored winner is printed (default: $TUNED_RETUNE)"},
    {"skip-store", false, OPT_SKIP_STORE, NULL, T,
     "measure only: no store is read or written, no daemon asked (default:\n"
     "$TUNED_SKIP_STORE)"},
    {"trace", true, OPT_TRACE, "FILE", T, "write every evaluated variant (status, times) to FILE"},
    {"progress", true, OPT_PROGRESS, "MODE", T,
     "line (default: one line per generation), json (one JSON object per\n"
     "generation, the daemon's job fields) or none"},
    {"device", true, OPT_DEVICE, "N", T | V, "GPU ordinal (default 0)"},
    {"device", true, OPT_DEVICE, "N", G | L, "the local GPU records are matched against (default 0)"},
    {"device", true, OPT_DEVICE, "N", W, "GPU ordinal (set by the daemon)"},
    {"json", false, OPT_JSON, NULL, T, "print the final record as one JSON object (as get --json)"},
    {"json", false, OPT_JSON, NULL, G,
     "one JSON object: source, config, median_us, gpu, gpu_fp and the record"},
    {"json", false, OPT_JSON, NULL, D, "one JSON object: driver, NVRTC and the GPUs"},
    {"json", false, OPT_JSON, NULL, L, "one JSON array of records instead of a table"},
    {"json", false, OPT_JSON, NULL, E, "with --dry-run: the count as one JSON object"},
    {"json", false, OPT_JSON, NULL, I, "one JSON object per file (added, replaced, ...) in an array"},
    {"json", false, OPT_JSON, NULL, V, "one JSON array, an object per record re-measured"},
    {"json", false, OPT_JSON, NULL, X, "the daemon's reply as it is (docs/protocol.md)"},
    {"force", false, OPT_FORCE, NULL, I, "replace stored records even when they are faster"},
    {"priority", true, OPT_PRIORITY, "PRIORITY", I,
     "idle (default): at idle CPU priority (SCHED_IDLE), on what a serving\n"
     "daemon and its clients leave; normal: at the caller's priority"},
    {"dry-run", false, OPT_DRY_RUN, NULL, F, "say what would be forgotten, change nothing"},
    {"dry-run", false, OPT_DRY_RUN, NULL, C, "say what would be dropped, change nothing"},
    {"dry-run", false, OPT_DRY_RUN, NULL, E, "write no records; say how many would be written"},
    {"fix", false, OPT_FIX, NULL, V,
     "store the time measured now for a winner of this GPU that is slower than\n"
     "its stored time by more than the noise"},
    {"days", true, OPT_DAYS, "N", C, "keep unused entries younger than N days (default 30; 0: none)"},
    {"db", true, OPT_DB, "PATH", T | G | L | E | I | F | C | V | S,
     "the store directory (default: $TUNED_DB, else $XDG_DATA_HOME/tuned, else\n"
     "~/.local/share/tuned)"},
    {"db", true, OPT_DB, "PATH", W, "the daemon's store"},
    {"socket", true, OPT_SOCKET, "PATH", T | G,
     "ask the daemon there (default: $TUNED_SOCKET, else $XDG_RUNTIME_DIR/tuned/\n"
     "tuned.sock when a daemon listens there, else /run/tuned-softmax/tuned.sock);\n"
     "the store answers when none runs or --db is given"},
    {"socket", true, OPT_SOCKET, "PATH", L, "ask the daemon there instead of reading the store"},
    {"socket", true, OPT_SOCKET, "PATH", X,
     "the daemon's socket (default: $TUNED_SOCKET, else $XDG_RUNTIME_DIR/tuned/\n"
     "tuned.sock when a daemon listens there, else /run/tuned-softmax/tuned.sock)"},
    {"socket", true, OPT_SOCKET, "PATH", S,
     "listen there (default: $TUNED_SOCKET, else $XDG_RUNTIME_DIR/tuned/tuned.sock\n"
     "when XDG_RUNTIME_DIR is set, else /run/tuned-softmax/tuned.sock)"},
    {"listen", true, OPT_LISTEN, "A", S, "TCP too, on [HOST:]PORT (HOST defaults to 127.0.0.1)"},
    {"group", true, OPT_GROUP, "G", S,
     "socket mode 0660 and group G, its directory 0750 (default 0600, 0700):\n"
     "members of G may use the daemon"},
    {"limit", true, OPT_LIMIT, "N=V", S,
     "clients, unix-reserve, jobs, line, output, output-total (bytes), idle,\n"
     "variant-timeout, client-timeout, grace, remote-timeout, lease, reclaim\n"
     "(seconds), nice (docs/protocol.md)"},
    {"remote", true, OPT_REMOTE, "URL", S,
     "share results through the remote tier at URL (redis://HOST[:PORT][/DB] or\n"
     "unix:///PATH[?db=N]; no TLS: docs/fleet.md)"},
    {"remote", true, OPT_REMOTE, "URL", F,
     "remove records from the remote tier at URL instead: KEY... (tuned:v2:rec:...),\n"
     "or --shape RxC [--dtype D] --gpu HWCLASS (its hw... name, as stats shows it, or\n"
     "its text, as list --json prints it)"},
    {"retune-compatible", false, OPT_RETUNE_COMPATIBLE, NULL, S,
     "tune a key once, in the background at the quick effort, when get answers it\n"
     "from the compatible tier (another driver, NVRTC or policy): the search starts\n"
     "at that record's config and stores an exact record"},
    {"remote-credentials", true, OPT_REMOTE_CREDENTIALS, "C", S | F,
     "the remote tier's user and password: FILE, or env:NAME for a variable"},
    {"quiet", false, OPT_QUIET, NULL, T | G | S | L | E | I | F | V,
     "no progress lines or notes on stderr (as TUNED_LOG=warn)"},
    {"help", false, OPT_HELP, NULL, ALL, "this text"},
    {"version", false, OPT_VERSION, NULL, ALL, "the version"},
};
#define NOPTIONS (sizeof options / sizeof options[0])

/* The row of option id for command cmd, or NULL when cmd does not take it. */
static const cli_option *option_for(int id, cli_command_id cmd)
{
    for (size_t i = 0; i < NOPTIONS; i++)
        if (options[i].id == id && (options[i].commands & CLI_ON(cmd)))
            return &options[i];
    return NULL;
}

static const char *option_name(int id)
{
    for (size_t i = 0; i < NOPTIONS; i++)
        if (options[i].id == id)
            return options[i].name;
    return "?";
}

static void print_option(FILE *f, const cli_option *op)
{
    char head[48], kinds[256], help[400];
    const char *text = op->help;
    if (op->id == OPT_KERNEL) {
        tuned__kind_list(kinds, sizeof kinds);
        snprintf(help, sizeof help, "%s: %s (default %s)", op->help, kinds,
                 tuned__kernel_name(TUNED__KIND_DEFAULT));
        text = help;
    }
    if (op->id == OPT_QUIET || op->id == OPT_HELP)
        snprintf(head, sizeof head, "-%c, --%s", op->id, op->name);
    else
        snprintf(head, sizeof head, "--%s%s%s", op->name, op->arg ? " " : "", op->arg ? op->arg : "");
    fprintf(f, "  %-22s ", head);
    for (const char *p = text; *p != '\0';) {
        const char *nl = strchr(p, '\n');
        int len = nl != NULL ? (int)(nl - p) : (int)strlen(p);
        fprintf(f, "%.*s\n", len, p);
        if (nl == NULL)
            break;
        p = nl + 1;
        fprintf(f, "  %-22s ", "");
    }
}

static void print_options(FILE *f, cli_command_id cmd)
{
    for (size_t i = 0; i < NOPTIONS; i++)
        if (options[i].commands & CLI_ON(cmd))
            print_option(f, &options[i]);
}

static const char exit_text[] =
    "exit status: 0 success, 1 error, 2 bad usage, 3 no stored record (get, forget)\n";

void cli_usage(FILE *f, cli_command_id id, bool overview)
{
    const cli_command *c = &cli_commands[id];
    if (!overview) {
        fprintf(f, "usage: tuned %s %s\n\n%s\n\noptions:\n", c->name, c->synopsis, c->summary);
        print_options(f, id);
        fprintf(f, "\nenvironment and files: tuned(1).\n%s", exit_text);
        return;
    }
    fprintf(f, "usage: tuned [COMMAND] [options]    (tuned COMMAND --help: its options)\n\n"
               "commands:\n");
    for (const cli_command *k = cli_commands; k->name != NULL; k++) {
        if (k->hidden)
            continue;
        const char *nl = strchr(k->summary, '\n');
        int len = nl != NULL ? (int)(nl - k->summary) : (int)strlen(k->summary);
        fprintf(f, "  %-8s %.*s%s\n", k->name, len, k->summary, nl != NULL ? " ..." : "");
    }
    fprintf(f, "\nenvironment: TUNED_DB, TUNED_SOCKET, TUNED_EFFORT, TUNED_RETUNE, "
               "TUNED_SKIP_STORE, TUNED_LOG\n(error, warn, info, debug); for libtuned "
               "TUNED_BIN; for Python TUNED_POLICY, TUNED_TUNE_TIME,\nTUNED_STRICT, "
               "TUNED_LIBRARY: see tuned(1).\n");
    fprintf(f, "\nusage: tuned [tune] %s\noptions of tune, the default command:\n", c->synopsis);
    print_options(f, CLI_TUNE);
    fprintf(f, "\n%s", exit_text);
}

/* Strict unsigned decimal: digits only, no sign, within [min, max]. */
static bool parse_u64(const char *s, uint64_t min, uint64_t max, uint64_t *out)
{
    if (s == NULL || *s < '0' || *s > '9')
        return false;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno != 0 || *end != '\0' || v < min || v > max)
        return false;
    *out = v;
    return true;
}

/* The key parameters after a shape's ':' (none: the kind's defaults),
 * for shape's kind and columns. */
static bool parse_shape_params(const char *text, const char *params, tuned__shape *shape,
                               char *why, size_t n)
{
    const tuned__kind_spec *k = tuned__shape_spec(shape);
    if (k == NULL) {
        snprintf(why, n, "--shape %s: unknown kernel", text);
        return false;
    }
    tuned__err e = {0};
    shape->params = tuned__params_default(k);
    if (params != NULL && tuned__params_parse(k, params, &shape->params, &e) != 0) {
        snprintf(why, n, "--shape %s: %s", text, e.msg);
        return false;
    }
    char rule[192];
    if (!tuned__params_check(k, shape->cols, shape->params, rule, sizeof rule)) {
        snprintf(why, n, "--shape %s: %s", text, rule);
        return false;
    }
    return true;
}

bool cli_parse_shape(const char *full, tuned__shape *shape, char *why, size_t n)
{
    /* ROWSxCOLS, then ":NAME=VALUE,..." for a kind's key parameters */
    char text[64];
    const char *colon = strchr(full, ':');
    size_t tl = colon != NULL ? (size_t)(colon - full) : strlen(full);
    if (tl >= sizeof text) {
        snprintf(why, n, "--shape %s: expected ROWSxCOLS, e.g. 4096x32000", full);
        return false;
    }
    memcpy(text, full, tl);
    text[tl] = '\0';
    const char *x = strchr(text, 'x');
    if (x == NULL || x == text || x[1] == '\0' || strchr(x + 1, 'x') != NULL) {
        snprintf(why, n, "--shape %s: expected ROWSxCOLS, e.g. 4096x32000", text);
        return false;
    }
    char rows_text[32];
    size_t rl = (size_t)(x - text);
    if (rl >= sizeof rows_text) {
        snprintf(why, n, "--shape %s: rows out of range (1..%llu)", text,
                 (unsigned long long)TUNED__MAX_ROWS);
        return false;
    }
    memcpy(rows_text, text, rl);
    rows_text[rl] = '\0';
    const char *digits = "0123456789";
    if (strspn(rows_text, digits) != rl || strspn(x + 1, digits) != strlen(x + 1)) {
        snprintf(why, n, "--shape %s: rows and columns must be positive whole numbers", text);
        return false;
    }
    uint64_t rows, cols;
    if (!parse_u64(rows_text, 1, TUNED__MAX_ROWS, &rows)) {
        snprintf(why, n, "--shape %s: rows out of range (1..%llu)", text,
                 (unsigned long long)TUNED__MAX_ROWS);
        return false;
    }
    if (!parse_u64(x + 1, 1, TUNED__MAX_COLS, &cols)) {
        snprintf(why, n, "--shape %s: columns out of range (1..%llu)", text,
                 (unsigned long long)TUNED__MAX_COLS);
        return false;
    }
    shape->rows = rows;
    shape->cols = cols;
    return parse_shape_params(full, colon != NULL ? colon + 1 : NULL, shape, why, n);
}

/* The command whose --help a usage error points to. */
static const char *usage_of = NULL;

static int bad(const char *fmt, ...) TUNED__PRINTF(1, 2);

static int bad(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "tuned: ");
    vfprintf(stderr, fmt, ap);
    if (usage_of != NULL)
        fprintf(stderr, " (see tuned %s --help)\n", usage_of);
    else
        fprintf(stderr, " (see tuned --help)\n");
    va_end(ap);
    return CLI_USAGE;
}

/* A yes/no environment variable: unset or empty is no. */
static int env_flag(const char *name, bool *out)
{
    const char *v = getenv(name);
    if (v == NULL || *v == '\0')
        return 0;
    static const char *const yes[] = {"1", "yes", "true", "on"}, *const no[] = {"0", "no", "false", "off"};
    for (size_t i = 0; i < 4; i++) {
        if (strcasecmp(v, yes[i]) == 0) {
            *out = true;
            return 0;
        }
        if (strcasecmp(v, no[i]) == 0) {
            *out = false;
            return 0;
        }
    }
    return bad("%s=%.40s: expected 1, yes, true or on (0, no, false, off: not set)", name, v);
}

/* The environment's defaults for o->id, before the command line. */
static int read_environment(cli_opts *o)
{
    const char *log = getenv("TUNED_LOG");
    o->log = CLI_LOG_INFO;
    if (log != NULL && *log != '\0') {
        static const char *const names[] = {"error", "warn", "info", "debug"};
        size_t i = 0;
        while (i < 4 && strcasecmp(log, names[i]) != 0)
            i++;
        if (i == 4)
            return bad("TUNED_LOG=%.40s: expected error, warn, info or debug", log);
        o->log = (cli_log_level)i;
    }
    if (o->id != CLI_TUNE)
        return 0;
    const char *effort = getenv("TUNED_EFFORT");
    if (effort != NULL && *effort != '\0' && tuned__effort_parse(effort, &o->effort) != 0)
        return bad("TUNED_EFFORT=%.40s: expected quick, default or full", effort);
    int rc = env_flag("TUNED_RETUNE", &o->request.retune);
    if (rc == 0)
        rc = env_flag("TUNED_SKIP_STORE", &o->skip_store);
    return rc;
}

int cli_parse(int argc, char **argv, cli_opts *o)
{
    memset(o, 0, sizeof *o);
    tuned__tune_request_default(&o->request);
    tuned__default_store(o->db, sizeof o->db);
    o->command = "tune";
    o->id = CLI_TUNE;
    o->effort = TUNED__EFFORT_DEFAULT;
    usage_of = NULL;
    int first = 1;
    if (argc > 1 && argv[1][0] != '-') {
        const cli_command *c = cli_find_command(argv[1]);
        if (c == NULL)
            return bad("unknown command '%s'", argv[1]);
        o->command = c->name;
        o->id = c->id;
        usage_of = c->name;
        first = 2;
    }
    int rc = read_environment(o);
    if (rc != 0)
        return rc;
    /* getopt_long wants each name once; which row applies is looked up
     * per command. */
    struct option longopts[NOPTIONS + 1];
    size_t nlong = 0;
    for (size_t i = 0; i < NOPTIONS; i++) {
        bool seen = false;
        for (size_t k = 0; k < nlong && !seen; k++)
            seen = strcmp(longopts[k].name, options[i].name) == 0;
        if (!seen)
            longopts[nlong++] = (struct option){options[i].name,
                                                options[i].has_arg ? required_argument : no_argument,
                                                NULL, options[i].id};
    }
    longopts[nlong] = (struct option){NULL, 0, NULL, 0};
    optind = first;
    opterr = 0;
    const char *shape_text = NULL;
    /* Explicit search settings win over --effort whatever their order. */
    bool have_budget = false, have_time = false, have_population = false, have_effort = false;
    uint64_t budget = 0, population = 0;
    double time_s = 0;
    int c;
    while ((c = getopt_long(argc, argv, ":qh", longopts, NULL)) != -1) {
        uint64_t v;
        char *end;
        if (c != ':' && c != '?' && option_for(c, o->id) == NULL) {
            if (o->id == CLI_TUNE && first == 1)
                return bad("--%s is not an option of tune (the default command); it belongs to "
                           "another command", option_name(c));
            return bad("%s does not take --%s", o->command, option_name(c));
        }
        switch (c) {
        case OPT_SHAPE:
            if (strncmp(optarg, "--", 2) == 0)
                return bad("--shape needs a value ROWSxCOLS, got '%s'", optarg);
            shape_text = optarg;
            break;
        case OPT_KERNEL:
            if (tuned__kernel_parse(optarg, &o->request.shape.kernel) != 0) {
                char kinds[256];
                tuned__kind_list(kinds, sizeof kinds);
                return bad("--kernel %s: unknown kernel (one of %s)", optarg, kinds);
            }
            break;
        case OPT_DTYPE:
            if (tuned_dtype_parse(optarg, &o->request.shape.dtype) != 0)
                return bad("--dtype %s: unknown dtype (fp16, bf16 or fp32)", optarg);
            o->have_dtype = true;
            break;
        case OPT_EFFORT:
            if (tuned__effort_parse(optarg, &o->effort) != 0)
                return bad("--effort %s: expected quick, default or full", optarg);
            have_effort = true;
            break;
        case OPT_BUDGET:
            if (!parse_u64(optarg, 1, 100000, &v))
                return bad("--budget %s: expected a whole number of variants from 1 to 100000",
                           optarg);
            budget = v;
            have_budget = true;
            break;
        case OPT_TIME:
            errno = 0;
            time_s = strtod(optarg, &end);
            if (errno != 0 || end == optarg || *end != '\0' || !(time_s > 0) || time_s > 86400)
                return bad("--time %s: expected seconds, more than 0 and at most 86400", optarg);
            have_time = true;
            break;
        case OPT_SEED:
            if (!parse_u64(optarg, 0, UINT64_MAX, &v))
                return bad("--seed %s: expected a whole number", optarg);
            o->request.search.seed = v;
            break;
        case OPT_DEVICE:
            if (!parse_u64(optarg, 0, 1023, &v))
                return bad("--device %s: expected a GPU ordinal (0, 1, ...)", optarg);
            o->request.device = (int)v;
            break;
        case OPT_DB:
            if (optarg[0] == '\0' || strlen(optarg) >= sizeof o->db)
                return bad("--db '%s': expected a directory path", optarg);
            snprintf(o->db, sizeof o->db, "%s", optarg);
            o->db_given = true;
            break;
        case OPT_QUIET: o->quiet = true; break;
        case OPT_EXHAUSTIVE: o->request.search.exhaustive = true; break;
        case OPT_TRY: {
            tuned__err pe = {0};
            if (o->request.ntries == TUNED__TUNE_MAX_TRIES)
                return bad("--try %s: at most %d configs to try first", optarg,
                           TUNED__TUNE_MAX_TRIES);
            if (tuned__config_parse(optarg, &o->request.tries[o->request.ntries], &pe) != 0)
                return bad("--try %s: %s", optarg, pe.msg);
            o->request.ntries++;
            break;
        }
        case OPT_RETUNE: o->request.retune = true; break;
        case OPT_SKIP_STORE: o->skip_store = true; break;
        case OPT_POPULATION:
            if (!parse_u64(optarg, 1, 10000, &v))
                return bad("--population %s: expected a whole number from 1 to 10000", optarg);
            population = v;
            have_population = true;
            break;
        case OPT_COPIES:
            if (!parse_u64(optarg, 1, 64, &v))
                return bad("--copies %s: expected a whole number from 1 to 64", optarg);
            o->request.search.copies = v;
            break;
        case OPT_MIN_GAIN:
            errno = 0;
            o->request.search.min_gain = strtod(optarg, &end);
            if (errno != 0 || end == optarg || *end != '\0' || !(o->request.search.min_gain >= 0) ||
                o->request.search.min_gain >= 1)
                return bad("--min-gain %s: expected a fraction from 0 to below 1", optarg);
            break;
        case OPT_TRACE:
            if (optarg[0] == '\0')
                return bad("--trace needs a file name");
            o->trace = optarg;
            break;
        case OPT_PROGRESS:
            if (strcmp(optarg, "line") == 0)
                o->progress = CLI_PROGRESS_LINE;
            else if (strcmp(optarg, "json") == 0)
                o->progress = CLI_PROGRESS_JSON;
            else if (strcmp(optarg, "none") == 0)
                o->progress = CLI_PROGRESS_NONE;
            else
                return bad("--progress %s: expected line, json or none", optarg);
            break;
        case OPT_SOCKET:
            if (optarg[0] == '\0' || strlen(optarg) >= sizeof o->socket)
                return bad("--socket '%.40s': expected a path of 1 to %zu bytes", optarg,
                           sizeof o->socket - 1);
            snprintf(o->socket, sizeof o->socket, "%s", optarg);
            break;
        case OPT_LISTEN:
            if (optarg[0] == '\0' || strlen(optarg) > 127)
                return bad("--listen '%.40s': expected [HOST:]PORT", optarg);
            o->listen = optarg;
            break;
        case OPT_GROUP:
            if (optarg[0] == '\0' || strlen(optarg) > 63)
                return bad("--group '%.40s': expected a group name", optarg);
            o->group = optarg;
            break;
        case OPT_LIMIT:
            if (o->nlimits == sizeof o->limits / sizeof o->limits[0])
                return bad("at most %zu --limit options", o->nlimits);
            o->limits[o->nlimits++] = optarg;
            break;
        case OPT_REMOTE:
            if (optarg[0] == '\0' || strlen(optarg) > 1023)
                return bad("--remote '%.40s': expected a URL (redis://, unix://)",
                           optarg);
            if (o->id == CLI_FORGET)
                o->forget_remote = optarg;
            else
                o->remote = optarg;
            break;
        case OPT_RETUNE_COMPATIBLE:
            o->retune_compatible = true;
            break;
        case OPT_REMOTE_CREDENTIALS:
            if (optarg[0] == '\0' || strlen(optarg) > 4095)
                return bad("--remote-credentials '%.40s': expected FILE or env:NAME", optarg);
            o->remote_credentials = optarg;
            break;
        case OPT_JSON: o->json = true; break;
        case OPT_FORCE: o->force = true; break;
        case OPT_PRIORITY:
            if (strcmp(optarg, "idle") != 0 && strcmp(optarg, "normal") != 0)
                return bad("--priority %s: expected idle or normal", optarg);
            o->priority_normal = strcmp(optarg, "normal") == 0;
            break;
        case OPT_DRY_RUN: o->dry_run = true; break;
        case OPT_FIX: o->fix = true; break;
        case OPT_GPU:
            if (optarg[0] == '\0' || strlen(optarg) > 127)
                return bad("--gpu '%.40s': expected a part of a GPU name (1 to 127 bytes)",
                           optarg);
            o->gpu = optarg;
            break;
        case OPT_DAYS:
            errno = 0;
            o->days = strtod(optarg, &end);
            if (errno != 0 || end == optarg || *end != '\0' || !(o->days >= 0) ||
                o->days > 100000)
                return bad("--days %s: expected a number of days from 0 to 100000", optarg);
            o->have_days = true;
            break;
        case OPT_HELP: cli_usage(stdout, o->id, first == 1); return -1;
        case OPT_VERSION: printf("tuned %s\n", tuned_version()); return -1;
        case ':': return bad("%s needs a value", argv[optind - 1]);
        default: return bad("unknown option '%s'", argv[optind - 1]);
        }
    }
    const cli_command *cmd = &cli_commands[o->id];
    if (optind < argc && !cmd->takes_args)
        return bad("unexpected argument '%s'", argv[optind]);
    o->args = argv + optind;
    o->nargs = argc - optind;
    if (o->id == CLI_EXPORT && o->json && !o->dry_run)
        return bad("export --json needs --dry-run (the export itself is JSON lines)");
    if (o->remote_credentials != NULL && o->remote == NULL && o->forget_remote == NULL)
        return bad("--remote-credentials needs --remote");
    /* The effort first, then what was given explicitly. */
    if (o->id == CLI_TUNE) {
        tuned__effort_apply(o->effort, &o->request);
        if (have_budget)
            o->request.search.budget = budget;
        if (have_time)
            o->request.search.time_s = time_s;
        if (have_population)
            o->request.search.population = population;
        if (o->request.search.exhaustive) {
            if (o->request.search.budget < 100000)
                o->request.search.budget = 100000;
            if (o->request.search.time_s < 3600)
                o->request.search.time_s = 3600;
        }
        if (o->skip_store && o->request.retune == false)
            o->request.retune = true; /* nothing stored is read either */
    }
    (void)have_effort;
    if (o->quiet && o->log > CLI_LOG_WARN)
        o->log = CLI_LOG_WARN;
    o->quiet = o->log < CLI_LOG_INFO;
    if (o->quiet && o->progress == CLI_PROGRESS_LINE)
        o->progress = CLI_PROGRESS_NONE;
    if (shape_text != NULL) {
        char why[256];
        if (!cli_parse_shape(shape_text, &o->request.shape, why, sizeof why))
            return bad("%s", why);
        uint64_t esize = tuned_dtype_size(o->request.shape.dtype);
        /* --kernel comes before or after --shape: an unknown one is refused
         * where it is parsed; the cap counts the default kind's tensors then. */
        uint64_t tensors = tuned__shape_matrices(&o->request.shape);
        if (o->request.shape.rows > MAX_TOTAL_BYTES / tensors / esize / o->request.shape.cols)
            return bad("--shape %s: inputs and output would exceed 1 TiB", shape_text);
        o->have_shape = true;
    }
    if (cmd->needs_shape && !o->have_shape)
        return bad("%s needs --shape ROWSxCOLS", o->command);
    return 0;
}
