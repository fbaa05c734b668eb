/* cmd_import.c: `tuned import [--force] [--priority PRIORITY] FILE.jsonl...` ('-' reads stdin):
 * every line validated (the store's checks, among them that its GPU name
 * agrees with its identity and its time is physically possible, then a
 * config this build can parse, in canonical form, and a shape within
 * tuned's limits); skipped lines are named with their reason; a stored
 * record is replaced only by a faster one of its measurement policy, or by
 * one of this build's policy over one of another, unless --force. A FILE must be
 * a regular file (not a device or a FIFO: /dev/zero never ends), and no
 * input is read past IMPORT_MAX_BYTES (stdin may be an endless pipe).
 * Every FILE is opened and checked before the store is opened, and the
 * store is not opened (so not created) when none can be read. Exit 1 when
 * any line was invalid, a file was truncated, refused or could not be
 * read; what was valid is stored regardless.
 *
 * An import is a bulk job, often run beside a serving daemon: parsing and
 * checking 20k records takes a core for a third of a second, and on a
 * small machine the daemon's clients would wait for it. So it runs at idle
 * CPU priority unless --priority normal (priority.h). Its write
 * transactions are short (a batch of 256 records), so the daemon's own
 * writes wait at most for one batch, also while the import waits for a
 * core. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>

#include "cache/key.h"
#include "src/common/priority.h"
#include "src/tuner/policy.h"
#include "tools/cli.h"

#define MAX_NOTES 50 /* per file; the rest are counted */
/* Far above any real export (a record line is under 2 KB: a million
 * records are about 1.5 GB), far below an endless input. */
#define IMPORT_MAX_BYTES ((uint64_t)4 << 30)

static uint64_t max_bytes(void)
{
#if TUNED_TEST_HOOKS
    const char *t = getenv("TUNED_TEST_IMPORT_MAX_BYTES"); /* a test's endless pipe ends sooner */
    if (t != NULL && atoll(t) > 0)
        return (uint64_t)atoll(t);
#endif
    return IMPORT_MAX_BYTES;
}

/* stdin through a cap: a read past it fails with EFBIG. */
typedef struct capped {
    FILE *in;
    uint64_t left;
} capped;

static ssize_t capped_read(void *cookie, char *buf, size_t n)
{
    capped *c = cookie;
    if (c->left == 0) {
        if (fgetc(c->in) == EOF && !ferror(c->in))
            return 0; /* it ended right at the cap */
        errno = EFBIG;
        return -1;
    }
    if (n > c->left)
        n = (size_t)c->left;
    size_t got = fread(buf, 1, n, c->in);
    c->left -= got;
    if (got == 0 && ferror(c->in))
        return -1;
    return (ssize_t)got;
}

typedef struct import_ctx {
    size_t notes;
    tuned__pacer pacer; /* lets a daemon on the same CPU answer between records */
} import_ctx;

static void note(void *ctx, const char *line)
{
    import_ctx *c = ctx;
    tuned__pace(&c->pacer);
    if (c->notes++ < MAX_NOTES)
        fprintf(stderr, "tuned: %s\n", line);
}

static int check(void *ctx, const tuned__record *r, tuned__err *e)
{
    tuned__pace(&((import_ctx *)ctx)->pacer);
    tuned__config cfg;
    if (tuned__config_parse_canonical(r->config, TUNED_EINVAL, &cfg, e) != 0)
        return TUNED_EINVAL;
    tuned__shape s = tuned__store_key_shape(&r->key);
    char why[192];
    if (!tuned__shape_check(&s, why, sizeof why))
        return tuned__errf(e, TUNED_EINVAL, "%s", why);
    return 0;
}

/* Opens the input at path ('-': stdin) and checks it can be imported: a
 * regular file (or, for stdin, a pipe) under the size cap. NULL after
 * saying why on stderr. */
static FILE *open_input(const char *path)
{
    bool is_stdin = strcmp(path, "-") == 0;
    const char *name = is_stdin ? "<stdin>" : path;
    FILE *raw = is_stdin ? stdin : fopen(path, "rb");
    if (raw == NULL) {
        fprintf(stderr, "tuned: import %s: %s\n", path, strerror(errno));
        return NULL;
    }
    struct stat st_in;
    uint64_t cap = max_bytes();
    const char *refuse = NULL;
    if (fstat(fileno(raw), &st_in) != 0)
        refuse = strerror(errno);
    else if (!is_stdin && !S_ISREG(st_in.st_mode))
        refuse = "not a regular file (a device or a FIFO may never end); use '-' for a pipe";
    else if (is_stdin && !S_ISREG(st_in.st_mode) && !S_ISFIFO(st_in.st_mode) &&
             !S_ISSOCK(st_in.st_mode))
        refuse = "stdin is not a regular file or a pipe (a device may never end)";
    else if (S_ISREG(st_in.st_mode) && (uint64_t)st_in.st_size > cap)
        refuse = "larger than the import limit";
    if (refuse != NULL) {
        fprintf(stderr, "tuned: import %s: %s (limit %llu bytes)\n", name, refuse,
                (unsigned long long)cap);
        if (!is_stdin)
            fclose(raw);
        return NULL;
    }
    return raw;
}

static void close_input(FILE *raw)
{
    if (raw != NULL && raw != stdin)
        fclose(raw);
}

/* Imports raw (opened by open_input; closed here). With --json, one object
 * per file into results. */
static int import_one(tuned__store *s, const cli_opts *o, const char *path, FILE *raw,
                      json_t *results)
{
    const char *name = raw == stdin ? "<stdin>" : path;
    capped cc = {.in = raw, .left = max_bytes()};
    FILE *in = fopencookie(&cc, "rb", (cookie_io_functions_t){.read = capped_read});
    if (in == NULL) {
        fprintf(stderr, "tuned: import %s: %s\n", name, strerror(errno));
        close_input(raw);
        return CLI_ERROR;
    }
    import_ctx c = {0};
    tuned__pacer_init(&c.pacer);
    tuned__import_opts io = {.force = o->force, .policy = TUNED__MEASURE_POLICY, .check = check,
                             .note = note, .ctx = &c};
    tuned__import_stats st;
    tuned__err e = {0};
    int rc = tuned__store_import(s, in, name, &io, &st, &e);
    fclose(in);
    close_input(raw);
    if (c.notes > MAX_NOTES)
        fprintf(stderr, "tuned: %s: %zu more notes not shown\n", name, c.notes - MAX_NOTES);
    if (results != NULL)
        json_array_append_new(results,
                              json_pack("{s:s, s:I, s:I, s:I, s:I, s:I, s:b, s:s?}", "file", name,
                                        "added", (json_int_t)st.added, "replaced",
                                        (json_int_t)st.replaced, "unchanged",
                                        (json_int_t)st.unchanged, "kept", (json_int_t)st.kept,
                                        "invalid", (json_int_t)st.invalid, "truncated",
                                        st.truncated, "error", rc != 0 ? e.msg : NULL));
    if (!o->quiet || rc != 0 || st.invalid > 0 || st.truncated)
        fprintf(stderr, "tuned: %s: %zu added, %zu replaced, %zu already stored, %zu kept "
                "(stored is as fast or faster), %zu invalid%s\n", name, st.added, st.replaced,
                st.unchanged, st.kept, st.invalid, st.truncated ? ", file truncated" : "");
    if (rc != 0) {
        cli_fail(&e);
        return CLI_ERROR;
    }
    return st.invalid > 0 || st.truncated ? CLI_ERROR : CLI_OK;
}

/* Opens every input first (a mistyped name must not leave a new store
 * behind): raws[i] NULL for one refused. Returns how many opened. */
static int open_inputs(const cli_opts *o, FILE **raws)
{
    int opened = 0;
    for (int i = 0; i < o->nargs; i++) {
        raws[i] = open_input(o->args[i]);
        opened += raws[i] != NULL;
    }
    return opened;
}

int cli_cmd_import(const cli_opts *o)
{
    if (o->nargs == 0) {
        fprintf(stderr, "tuned: import needs one or more files (or '-' for stdin) (see tuned "
                        "--help)\n");
        return CLI_USAGE;
    }
    FILE **raws = calloc((size_t)o->nargs, sizeof *raws);
    if (raws == NULL) {
        fprintf(stderr, "tuned: import: out of memory for %d inputs\n", o->nargs);
        return CLI_ERROR;
    }
    int opened = open_inputs(o, raws);
    int status = opened == o->nargs ? CLI_OK : CLI_ERROR;
    tuned__err e = {0};
    tuned__store *s = NULL;
    /* Nothing readable: no store is opened (or created). */
    if (opened > 0) {
        /* A system that refuses both idle and nice 19 still imports. */
        if (!o->priority_normal && tuned__thread_idle(&e) != 0 && !o->quiet)
            fprintf(stderr, "tuned: import runs at normal priority: %s\n", e.msg);
        if (cli_open_store(o, 0, &s, &e) != 0) {
            for (int i = 0; i < o->nargs; i++)
                close_input(raws[i]);
            free(raws);
            return cli_fail(&e);
        }
    }
    json_t *results = o->json ? json_array() : NULL;
    for (int i = 0; i < o->nargs; i++) {
        if (raws[i] != NULL && import_one(s, o, o->args[i], raws[i], results) != CLI_OK)
            status = CLI_ERROR;
        if (raws[i] == NULL && results != NULL) /* refused before reading */
            json_array_append_new(results, json_pack("{s:s, s:s}", "file", o->args[i],
                                                     "error", "not read (see stderr)"));
    }
    free(raws);
    if (s != NULL)
        tuned__store_close(s);
    if (results != NULL && cli_print_json(results) != CLI_OK)
        status = CLI_ERROR;
    return status;
}
