/* cli_args.c: the command line of `tuned`: options, shapes, numbers, and
 * the default store path. Every bad argument gets one line naming it. */
#include <errno.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tools/cli.h"
#include "src/client/client.h"

/* No GPU holds a softmax whose input and output together exceed this. */
#define MAX_TOTAL_BYTES (1ull << 40)

void cli_usage(FILE *f)
{
    fprintf(f,
            "usage: tuned [tune] --shape ROWSxCOLS [options]   tune softmax on a GPU, store the winner\n"
            "       tuned get --shape ROWSxCOLS [options]      print the stored winner\n"
            "       tuned devices                              list the GPUs the driver sees\n"
            "       tuned serve [--socket PATH] [options]      the daemon: answers over a socket, tunes\n"
            "                                                  in the background (docs/protocol.md)\n"
            "       tuned list [--json] [filters]              the stored winners\n"
            "       tuned export [filters] > FILE.jsonl        write stored winners as JSON lines\n"
            "       tuned import [--force] FILE.jsonl...       add an export's records ('-': stdin)\n"
            "       tuned forget KEY... | filters [--dry-run]  remove stored winners\n"
            "       tuned gc [--days N] [--dry-run]            drop unused history and cubins\n"
            "       tuned verify [filters] [--fix]             re-measure stored winners on this GPU\n"
            "       tuned --help | --version\n"
            "\n"
            "options:\n"
            "  --shape RxC    rows x columns; softmax runs over each row (the last dimension)\n"
            "  --dtype D      fp16 (default), bf16 or fp32; math is fp32 for all three\n"
            "  --kernel K     softmax (default), softmax_bwd, log_softmax or log_softmax_bwd\n"
            "  --budget N     evaluate at most N new variants (default 200)\n"
            "  --time S       search for at most S seconds (default 50)\n"
            "  --seed N       seed of the random population (default 1): same seed, same search\n"
            "  --device N     GPU ordinal (default 0)\n"
            "  --db PATH      store directory (default: $TUNED_DB, else $XDG_DATA_HOME/tuned,\n"
            "                 else ~/.local/share/tuned)\n"
            "  --exhaustive   evaluate every valid variant (within --budget and --time)\n"
            "  --retune       tune again although a winner is stored (compiled variants are\n"
            "                 reused); without it a stored winner is printed, and an interrupted\n"
            "                 tune resumes from the variants it already measured\n"
            "  --population N random variants in the first generation (default 40)\n"
            "  --copies N     incumbents the pattern search moves from (default 4)\n"
            "  --min-gain F   stop after two generations in a row gain less than F (default 0.002)\n"
            "  --trace FILE   write every evaluated variant (status, times) to FILE\n"
            "  -q, --quiet    no progress line\n"
            "  --socket PATH  the daemon's socket (default: $TUNED_SOCKET, else\n"
            "                 $XDG_RUNTIME_DIR/tuned/tuned.sock, else /run/tuned/tuned.sock);\n"
            "                 get and tune ask a daemon there, the store when none runs or\n"
            "                 --db is given\n"
            "  --listen A     serve: TCP too, on [HOST:]PORT (HOST defaults to 127.0.0.1)\n"
            "  --group G      serve: socket mode 0660 for group G (default 0600)\n"
            "  --limit N=V    serve: clients, unix-reserve, jobs, line, output, output-total\n"
            "                 (bytes), idle, variant-timeout, client-timeout, grace (seconds),\n"
            "                 nice (docs/protocol.md)\n"
            "  filters        --gpu NAME (part of the GPU name, or its 16-hex-digit fingerprint),\n"
            "                 --shape RxC, --dtype D\n"
            "  --json         list: one JSON array instead of a table\n"
            "  --force        import: replace stored records even when they are faster\n"
            "  --dry-run      forget, gc: say what would go, change nothing\n"
            "  --fix          verify: store the time measured now for a winner of this GPU\n"
            "                 that is slower than its stored time by more than the noise\n"
            "  --days N       gc: keep unused entries younger than N days (default 30; 0: none)\n"
            "\n"
            "`tuned get` on a machine without a GPU prints the records of every GPU for the shape.\n"
            "exit status: 0 success, 1 error, 2 bad usage, 3 no stored record (get)\n");
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

bool cli_parse_shape(const char *text, tuned__shape *shape, char *why, size_t n)
{
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
    return true;
}

static int bad(const char *fmt, ...) TUNED__PRINTF(1, 2);

static int bad(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "tuned: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, " (see tuned --help)\n");
    va_end(ap);
    return CLI_USAGE;
}

int cli_parse(int argc, char **argv, cli_opts *o)
{
    memset(o, 0, sizeof *o);
    tuned__tune_request_default(&o->request);
    tuned__default_store(o->db, sizeof o->db);
    o->command = "tune";
    int first = 1;
    if (argc > 1 && argv[1][0] != '-') {
        o->command = argv[1];
        first = 2;
        if (cli_find_command(o->command) == NULL)
            return bad("unknown command '%s'", o->command);
    }
    enum { OPT_SHAPE = 256, OPT_DTYPE, OPT_BUDGET, OPT_TIME, OPT_SEED, OPT_DEVICE, OPT_DB,
           OPT_VERSION, OPT_EXHAUSTIVE, OPT_TRACE, OPT_RETUNE, OPT_POPULATION, OPT_COPIES, OPT_MIN_GAIN, OPT_SOCKET, OPT_LISTEN, OPT_GROUP, OPT_LIMIT, OPT_JSON, OPT_FORCE, OPT_FIX, OPT_DRY_RUN, OPT_GPU,
           OPT_DAYS, OPT_KERNEL };
    static const struct option longopts[] = {
        {"shape", required_argument, NULL, OPT_SHAPE},
        {"dtype", required_argument, NULL, OPT_DTYPE},
        {"kernel", required_argument, NULL, OPT_KERNEL},
        {"budget", required_argument, NULL, OPT_BUDGET},
        {"time", required_argument, NULL, OPT_TIME},
        {"seed", required_argument, NULL, OPT_SEED},
        {"device", required_argument, NULL, OPT_DEVICE},
        {"db", required_argument, NULL, OPT_DB},
        {"quiet", no_argument, NULL, 'q'},
        {"exhaustive", no_argument, NULL, OPT_EXHAUSTIVE},
        {"retune", no_argument, NULL, OPT_RETUNE},
        {"population", required_argument, NULL, OPT_POPULATION},
        {"copies", required_argument, NULL, OPT_COPIES},
        {"min-gain", required_argument, NULL, OPT_MIN_GAIN},
        {"trace", required_argument, NULL, OPT_TRACE},
        {"socket", required_argument, NULL, OPT_SOCKET},
        {"listen", required_argument, NULL, OPT_LISTEN},
        {"group", required_argument, NULL, OPT_GROUP},
        {"limit", required_argument, NULL, OPT_LIMIT},
        {"json", no_argument, NULL, OPT_JSON},
        {"force", no_argument, NULL, OPT_FORCE},
        {"dry-run", no_argument, NULL, OPT_DRY_RUN},
        {"fix", no_argument, NULL, OPT_FIX},
        {"gpu", required_argument, NULL, OPT_GPU},
        {"days", required_argument, NULL, OPT_DAYS},
        {"help", no_argument, NULL, 'h'},
        {"version", no_argument, NULL, OPT_VERSION},
        {NULL, 0, NULL, 0},
    };
    optind = first;
    opterr = 0;
    const char *shape_text = NULL;
    int c;
    while ((c = getopt_long(argc, argv, ":qh", longopts, NULL)) != -1) {
        uint64_t v;
        char *end;
        switch (c) {
        case OPT_SHAPE:
            if (strncmp(optarg, "--", 2) == 0)
                return bad("--shape needs a value ROWSxCOLS, got '%s'", optarg);
            shape_text = optarg;
            break;
        case OPT_KERNEL:
            if (tuned__kernel_parse(optarg, &o->request.shape.kernel) != 0)
                return bad("--kernel %s: unknown kernel (softmax, softmax_bwd, log_softmax or "
                           "log_softmax_bwd)",
                           optarg);
            break;
        case OPT_DTYPE:
            if (tuned_dtype_parse(optarg, &o->request.shape.dtype) != 0)
                return bad("--dtype %s: unknown dtype (fp16, bf16 or fp32)", optarg);
            o->have_dtype = true;
            break;
        case OPT_BUDGET:
            if (!parse_u64(optarg, 1, 100000, &v))
                return bad("--budget %s: expected a whole number of variants from 1 to 100000",
                           optarg);
            o->request.search.budget = v;
            break;
        case OPT_TIME:
            errno = 0;
            o->request.search.time_s = strtod(optarg, &end);
            if (errno != 0 || end == optarg || *end != '\0' || !(o->request.search.time_s > 0) ||
                o->request.search.time_s > 86400)
                return bad("--time %s: expected seconds, more than 0 and at most 86400", optarg);
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
        case 'q': o->quiet = true; break;
        case OPT_EXHAUSTIVE:
            o->request.search.exhaustive = true;
            if (o->request.search.budget < 100000)
                o->request.search.budget = 100000;
            if (o->request.search.time_s < 3600)
                o->request.search.time_s = 3600;
            break;
        case OPT_RETUNE: o->request.retune = true; break;
        case OPT_POPULATION:
            if (!parse_u64(optarg, 1, 10000, &v))
                return bad("--population %s: expected a whole number from 1 to 10000", optarg);
            o->request.search.population = v;
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
        case OPT_JSON: o->json = true; break;
        case OPT_FORCE: o->force = true; break;
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
        case 'h': cli_usage(stdout); return -1;
        case OPT_VERSION: printf("tuned %s\n", tuned_version()); return -1;
        case ':': return bad("%s needs a value", argv[optind - 1]);
        default: return bad("unknown option '%s'", argv[optind - 1]);
        }
    }
    if (o->fix && strcmp(o->command, "verify") != 0)
        return bad("--fix is an option of verify only");
    if (optind < argc && !cli_find_command(o->command)->takes_args)
        return bad("unexpected argument '%s'", argv[optind]);
    o->args = argv + optind;
    o->nargs = argc - optind;
    if (shape_text != NULL) {
        char why[256];
        if (!cli_parse_shape(shape_text, &o->request.shape, why, sizeof why))
            return bad("%s", why);
        uint64_t esize = tuned_dtype_size(o->request.shape.dtype);
        uint64_t tensors = tuned__kernel_tensors(tuned__shape_kernel(&o->request.shape));
        if (o->request.shape.rows > MAX_TOTAL_BYTES / tensors / esize / o->request.shape.cols)
            return bad("--shape %s: inputs and output would exceed 1 TiB", shape_text);
        o->have_shape = true;
    }
    if (cli_find_command(o->command)->needs_shape && !o->have_shape)
        return bad("%s needs --shape ROWSxCOLS", o->command);
    return 0;
}
