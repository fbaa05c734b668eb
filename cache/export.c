/* export.c: best records to and from JSON lines (docs/store-format.md).
 *
 * An export is a header line, then one record per line, each the same JSON
 * object the store holds (record.c):
 *   {"tuned_export":1,"schema":2,"record_version":2,"writer":"0.1.0",
 *    "date":"2026-11-21T10:00:00Z","records":60}
 *   {"v":2,"kernel":"softmax","dtype":"fp16","rows":4096,...}
 * The header's record count lets an import notice a truncated file; files
 * may be concatenated (each header starts a section).
 *
 * Import treats the file as hostile: lines are capped, every record is
 * decoded with duplicate object keys rejected and every field checked, the
 * caller may check more (config text, shape limits); a bad line is noted
 * and skipped, never fatal. Valid records go to the store in batches, one
 * write transaction each; a stored record is replaced only by a faster one
 * of the same key, unless forced. */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cache/json.h"
#include "cache/key.h"
#include "cache/record.h"
#include "cache/store.h"
#include "tuned.h"
#include "cache/txn.h"

#define EXPORT_FORMAT 1
#define LINE_MAX_BYTES (64 * 1024) /* a record is under 2 KiB */
#define BATCH 256

static void note(tuned__store_note_fn fn, void *ctx, const char *fmt, ...) TUNED__PRINTF(3, 4);

static void note(tuned__store_note_fn fn, void *ctx, const char *fmt, ...)
{
    if (fn == NULL)
        return;
    char line[TUNED__ERR_MSG + 256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    fn(ctx, line);
}

/* ---- export ---- */

static int write_line(FILE *out, const char *text, size_t len, tuned__err *e)
{
    if (fwrite(text, 1, len, out) != len || putc('\n', out) == EOF)
        return tuned__errf(e, TUNED_EIO, "export: write failed: %s", strerror(errno));
    return 0;
}

/* One pass over the best records of a snapshot: counts (out == NULL) or
 * writes the records f selects. */
typedef struct export_pass {
    const tuned__store_filter *f;
    FILE *out;
    tuned__store_note_fn nfn;
    void *ctx;
    size_t count;
} export_pass;

static int export_visit(void *ctx, tuned__txn *t, const tuned__best_entry *b, tuned__err *e)
{
    export_pass *p = ctx;
    if (b->r == NULL) {
        if (p->out != NULL)
            note(p->nfn, p->ctx, "skipped a damaged record: %s", b->why->msg);
        return 0;
    }
    if (!tuned__filter_match(p->f, &b->key, b->r))
        return 0;
    if (p->out != NULL) {
        char *text;
        size_t len;
        int rc = tuned__record_encode(b->r, &text, &len, e);
        if (rc == 0) {
            rc = write_line(p->out, text, len, e);
            free(text);
        }
        if (rc != 0) {
            tuned__txn_error(t, rc);
            return 1;
        }
    }
    p->count++;
    return 0;
}

static int write_header(FILE *out, size_t records, tuned__err *e)
{
    char date[32];
    tuned__date_format(date, sizeof date, time(NULL));
    json_t *h = json_object();
    if (h == NULL)
        return tuned__errf(e, TUNED_ENOMEM, "export: out of memory");
    int rc;
    char *text = NULL;
    size_t len;
    if ((rc = tuned__json_set_uint(h, "export", "tuned_export", EXPORT_FORMAT, e)) == 0 &&
        (rc = tuned__json_set_uint(h, "export", "schema", TUNED__STORE_SCHEMA, e)) == 0 &&
        (rc = tuned__json_set_uint(h, "export", "record_version", TUNED__RECORD_VERSION, e)) == 0 &&
        (rc = tuned__json_set_str(h, "export", "writer", TUNED_VERSION_STRING, 32, e)) == 0 &&
        (rc = tuned__json_set_str(h, "export", "date", date, sizeof date, e)) == 0 &&
        (rc = tuned__json_set_uint(h, "export", "records", records, e)) == 0 &&
        (rc = tuned__json_dump(h, "export", &text, &len, e)) == 0) {
        rc = write_line(out, text, len, e);
        free(text);
    }
    json_decref(h);
    return rc;
}

/* Counts, writes the header, then the records a (its out set) selects,
 * all from one snapshot. */
static void export_read(tuned__txn *t, void *arg, tuned__err *e)
{
    export_pass *a = arg;
    export_pass counting = {.f = a->f};
    tuned__best_walk(t, NULL, 0, export_visit, &counting, e);
    int rc;
    if (t->rc == 0 && (rc = write_header(a->out, counting.count, e)) != 0)
        tuned__txn_error(t, rc);
    a->count = 0;
    tuned__best_walk(t, NULL, 0, export_visit, a, e);
}

int tuned__store_export(tuned__store *s, const tuned__store_filter *f, FILE *out,
                        tuned__store_note_fn nfn, void *ctx, size_t *exported, tuned__err *e)
{
    *exported = 0;
    export_pass a = {.f = f, .out = out, .nfn = nfn, .ctx = ctx};
    int rc = tuned__store_dbs(s, e);
    if (rc < 0)
        return rc;
    if (rc == 0)
        rc = write_header(out, 0, e);
    else
        rc = tuned__store_read(s, export_read, &a, e);
    if (rc == 0 && fflush(out) != 0)
        rc = tuned__errf(e, TUNED_EIO, "export: write failed: %s", strerror(errno));
    if (rc == 0)
        *exported = a.count;
    return rc;
}

/* ---- import: reading lines ---- */

typedef struct line_reader {
    FILE *in;
    char *buf;       /* LINE_MAX_BYTES + 1 */
    size_t len;      /* bytes of the current line in buf */
    int too_long;    /* the line was longer; its rest was skipped */
    int eof;
} line_reader;

/* Reads the next line (without '\n' and a trailing '\r'). 1: a line, 0: end
 * of input, -1: a read error. */
static int next_line(line_reader *lr)
{
    if (lr->eof)
        return 0;
    lr->len = 0;
    lr->too_long = 0;
    int c, any = 0;
    while ((c = getc_unlocked(lr->in)) != EOF) {
        any = 1;
        if (c == '\n')
            break;
        if (lr->len < LINE_MAX_BYTES)
            lr->buf[lr->len++] = (char)c;
        else
            lr->too_long = 1;
    }
    if (c == EOF) {
        if (ferror(lr->in))
            return -1;
        lr->eof = 1;
        if (!any)
            return 0;
    }
    if (lr->len > 0 && lr->buf[lr->len - 1] == '\r')
        lr->len--;
    return 1;
}

static int blank(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (s[i] != ' ' && s[i] != '\t')
            return 0;
    return 1;
}

/* ---- import: storing a batch ---- */

enum { OUT_ADDED, OUT_REPLACED, OUT_REPLACED_DAMAGED, OUT_REPLACED_IMPOSSIBLE,
       OUT_REPLACED_POLICY, OUT_UNCHANGED, OUT_KEPT, OUT_KEPT_VERSION, OUT_KEPT_POLICY };

typedef struct pending {
    tuned__record r;
    size_t line;
    int outcome;
    double stored_us;  /* the stored record's median, for OUT_KEPT / OUT_REPLACED */
    char stored_policy[sizeof ((tuned__provenance *)0)->policy];
} pending;

typedef struct batch_arg {
    pending *p;
    size_t n;
    bool force;
    const char *policy; /* the importer's measurement policy, or NULL */
} batch_arg;

/* What becomes of p against the stored record old (decoded and plausible).
 * Medians compare only under one measurement policy: a record of the
 * importer's policy is served here and one of another is not, so the
 * policy decides before the time does. */
static int outcome_over(const batch_arg *a, const pending *p, const tuned__record *old)
{
    bool same_policy = strcmp(old->prov.policy, p->r.prov.policy) == 0;
    if (same_policy && strcmp(old->config, p->r.config) == 0 && old->median_us == p->r.median_us)
        return OUT_UNCHANGED;
    if (a->force)
        return OUT_REPLACED;
    if (!same_policy && a->policy != NULL) {
        if (strcmp(old->prov.policy, a->policy) == 0)
            return OUT_KEPT_POLICY;
        if (strcmp(p->r.prov.policy, a->policy) == 0)
            return OUT_REPLACED_POLICY;
    }
    return p->r.median_us < old->median_us ? OUT_REPLACED : OUT_KEPT;
}

static void batch_write(tuned__txn *t, void *arg, tuned__err *e)
{
    batch_arg *a = arg;
    for (size_t i = 0; i < a->n && t->rc == 0; i++) {
        pending *p = &a->p[i];
        uint8_t kb[TUNED__KEY_LEN];
        tuned__key_encode(kb, TUNED__KEY_TAG_BEST, &p->r.key);
        MDB_val v;
        int found = tuned__txn_get(t, t->s->best, kb, sizeof kb, &v, e);
        if (found < 0)
            return;
        tuned__record old;
        tuned__err ignore = {0};
        int drc;
        if (found == 0) {
            p->outcome = OUT_ADDED;
        } else if ((drc = tuned__best_decode(t->s, &p->r.key, v.mv_data, v.mv_size, &old,
                                             &ignore)) != 0) {
            /* Another record version is another tuned's, not damage. */
            p->outcome = drc != TUNED_ESCHEMA ? OUT_REPLACED_DAMAGED
                         : a->force           ? OUT_REPLACED
                                              : OUT_KEPT_VERSION;
        } else if (tuned__record_plausible(&old, TUNED_EINVAL, &ignore) != 0) {
            /* A poisoned record must not keep a real one out. */
            p->stored_us = old.median_us;
            p->outcome = OUT_REPLACED_IMPOSSIBLE;
        } else {
            p->stored_us = old.median_us;
            snprintf(p->stored_policy, sizeof p->stored_policy, "%s", old.prov.policy);
            p->outcome = outcome_over(a, p, &old);
        }
        if (p->outcome == OUT_ADDED || p->outcome == OUT_REPLACED ||
            p->outcome == OUT_REPLACED_DAMAGED || p->outcome == OUT_REPLACED_IMPOSSIBLE ||
            p->outcome == OUT_REPLACED_POLICY) {
            char *text;
            size_t len;
            int rc = tuned__record_encode(&p->r, &text, &len, e);
            if (rc != 0) {
                tuned__txn_error(t, rc);
                return;
            }
            tuned__txn_put(t, t->s->best, kb, sizeof kb, text, len, e);
            free(text);
        }
    }
}

typedef struct import_state {
    tuned__store *s;
    const char *name;
    const tuned__import_opts *o;
    tuned__import_stats *st;
    pending *batch;
    size_t n;
} import_state;

static int flush_batch(import_state *is, tuned__err *e)
{
    if (is->n == 0)
        return 0;
    batch_arg a = {.p = is->batch, .n = is->n, .force = is->o->force, .policy = is->o->policy};
    int rc = tuned__store_write(is->s, batch_write, &a, e);
    if (rc != 0)
        return rc;
    for (size_t i = 0; i < is->n; i++) {
        pending *p = &is->batch[i];
        char ks[TUNED__KEY_TEXT];
        tuned__key_format(ks, sizeof ks, &p->r.key);
        switch (p->outcome) {
        case OUT_ADDED: is->st->added++; break;
        case OUT_UNCHANGED: is->st->unchanged++; break;
        case OUT_REPLACED:
            is->st->replaced++;
            if (is->o->force && p->stored_us > 0 && p->r.median_us >= p->stored_us)
                note(is->o->note, is->o->ctx, "%s:%zu: %s: replaced a record as fast or faster "
                     "(%.3f us, new %.3f us): --force", is->name, p->line, ks, p->stored_us,
                     p->r.median_us);
            break;
        case OUT_REPLACED_DAMAGED:
            is->st->replaced++;
            note(is->o->note, is->o->ctx, "%s:%zu: %s: replaced a damaged stored record",
                 is->name, p->line, ks);
            break;
        case OUT_REPLACED_IMPOSSIBLE:
            is->st->replaced++;
            note(is->o->note, is->o->ctx, "%s:%zu: %s: replaced a stored record that is not a "
                 "possible measurement (%.3f us)", is->name, p->line, ks, p->stored_us);
            break;
        case OUT_REPLACED_POLICY:
            is->st->replaced++;
            note(is->o->note, is->o->ctx, "%s:%zu: %s: replaced a record measured under policy "
                 "%s, which this build does not serve (%.3f us, this one %.3f us under %s)",
                 is->name, p->line, ks, p->stored_policy, p->stored_us, p->r.median_us,
                 p->r.prov.policy);
            break;
        case OUT_KEPT_POLICY:
            is->st->kept++;
            note(is->o->note, is->o->ctx, "%s:%zu: skipped: %s: the stored record was measured "
                 "under this build's policy %s, this one under %s: their times do not compare; "
                 "--force replaces it", is->name, p->line, ks, p->stored_policy,
                 p->r.prov.policy);
            break;
        case OUT_KEPT_VERSION:
            is->st->kept++;
            note(is->o->note, is->o->ctx, "%s:%zu: skipped: %s: the stored record is of another "
                 "record version (a newer or older tuned's); --force replaces it", is->name,
                 p->line, ks);
            break;
        case OUT_KEPT:
            is->st->kept++;
            note(is->o->note, is->o->ctx, "%s:%zu: skipped: %s: the stored record is as fast or "
                 "faster (%.3f us, this one %.3f us); --force replaces it", is->name, p->line, ks,
                 p->stored_us, p->r.median_us);
            break;
        }
    }
    is->n = 0;
    return 0;
}

/* A file-level failure after some records were read: what was valid is
 * still stored (as it would have been at the next batch), then rc. */
static int fail_after_flush(import_state *is, int rc)
{
    tuned__err ignore = {0};
    flush_batch(is, &ignore);
    return rc;
}

/* ---- import: the file ---- */

typedef struct section {
    int open;          /* a header was read */
    size_t header_line;
    uint64_t declared; /* records the header declares */
    size_t seen;       /* record lines since it, valid or not */
} section;

static void close_section(import_state *is, const section *sec)
{
    if (!sec->open)
        return;
    if (sec->seen < sec->declared) {
        is->st->truncated = true;
        note(is->o->note, is->o->ctx, "%s:%zu: the header declares %" PRIu64 " records, %zu "
             "follow it: the file is truncated", is->name, sec->header_line, sec->declared,
             sec->seen);
    } else if (sec->seen > sec->declared) {
        note(is->o->note, is->o->ctx, "%s:%zu: the header declares %" PRIu64 " records, %zu "
             "follow it", is->name, sec->header_line, sec->declared, sec->seen);
    }
}

/* A header line: {"tuned_export":1,"schema":N,"records":N,...}. */
static int read_header(import_state *is, const json_t *h, size_t line, section *sec,
                       tuned__err *e)
{
    uint64_t format, schema, records;
    tuned__err why = {0};
    if (tuned__json_get_uint(h, "header", "tuned_export", INT64_MAX, &format, &why) != 0 ||
        tuned__json_get_uint(h, "header", "schema", INT64_MAX, &schema, &why) != 0 ||
        tuned__json_get_uint(h, "header", "records", INT64_MAX, &records, &why) != 0)
        return tuned__errf(e, TUNED_EINVAL, "%s:%zu: not a valid export header: %s", is->name,
                           line, why.msg);
    if (format != EXPORT_FORMAT || schema != TUNED__STORE_SCHEMA)
        return tuned__errf(e, TUNED_ESCHEMA,
                           "%s:%zu: export format %" PRIu64 " of store schema %" PRIu64
                           "; this build imports format %d of schema %d",
                           is->name, line, format, schema, EXPORT_FORMAT, TUNED__STORE_SCHEMA);
    close_section(is, sec);
    sec->open = 1;
    sec->header_line = line;
    sec->declared = records;
    sec->seen = 0;
    return 0;
}

static int import_lines(import_state *is, line_reader *lr, tuned__err *e)
{
    section sec = {0};
    size_t lineno = 0;
    int rc = 0, got;
    while ((got = next_line(lr)) == 1) {
        lineno++;
        is->st->lines++;
        if (!lr->too_long && blank(lr->buf, lr->len))
            continue;
        if (lr->too_long) {
            if (!sec.open)
                return tuned__errf(e, TUNED_EINVAL, "%s:%zu: not a tuned export: the first line "
                                   "is longer than %d bytes", is->name, lineno, LINE_MAX_BYTES);
            sec.seen++;
            is->st->invalid++;
            note(is->o->note, is->o->ctx, "%s:%zu: skipped: longer than %d bytes", is->name,
                 lineno, LINE_MAX_BYTES);
            continue;
        }
        json_t *v = NULL;
        tuned__err why = {0};
        if (tuned__json_load(lr->buf, lr->len, "line", &v, &why) != 0) {
            if (!sec.open)
                return tuned__errf(e, TUNED_EINVAL, "%s:%zu: not a tuned export (no header "
                                   "line): %s", is->name, lineno, why.msg);
            sec.seen++;
            is->st->invalid++;
            note(is->o->note, is->o->ctx, "%s:%zu: skipped: %s", is->name, lineno, why.msg);
            continue;
        }
        if (json_is_object(v) && json_object_get(v, "tuned_export") != NULL) {
            rc = read_header(is, v, lineno, &sec, e);
            json_decref(v);
            if (rc != 0)
                return fail_after_flush(is, rc);
            continue;
        }
        if (!sec.open) {
            json_decref(v);
            return tuned__errf(e, TUNED_EINVAL, "%s:%zu: not a tuned export: the first line is "
                               "not a header {\"tuned_export\":1,...}", is->name, lineno);
        }
        sec.seen++;
        pending *p = &is->batch[is->n];
        memset(p, 0, sizeof *p);
        p->line = lineno;
        int vrc = tuned__record_from_json(v, &p->r, &why);
        json_decref(v);
        if (vrc == 0)
            vrc = tuned__record_plausible(&p->r, TUNED_EINVAL, &why);
        if (vrc == 0 && is->o->check != NULL)
            vrc = is->o->check(is->o->ctx, &p->r, &why);
        if (vrc != 0) {
            is->st->invalid++;
            note(is->o->note, is->o->ctx, "%s:%zu: skipped: %s", is->name, lineno, why.msg);
            continue;
        }
        if (++is->n == BATCH && (rc = flush_batch(is, e)) != 0)
            return rc;
    }
    if (got < 0)
        return fail_after_flush(is, tuned__errf(e, TUNED_EIO, "%s: read failed after line %zu: "
                                                "%s", is->name, lineno, strerror(errno)));
    if (!sec.open)
        return tuned__errf(e, TUNED_EINVAL, "%s: not a tuned export: empty", is->name);
    if ((rc = flush_batch(is, e)) != 0)
        return rc;
    close_section(is, &sec);
    return 0;
}

int tuned__store_import(tuned__store *s, FILE *in, const char *name, const tuned__import_opts *o,
                        tuned__import_stats *st, tuned__err *e)
{
    static const tuned__import_opts defaults = {0};
    if (o == NULL)
        o = &defaults;
    memset(st, 0, sizeof *st);
    if (s->readonly)
        return tuned__errf(e, TUNED_EINVAL, "store %s: opened read-only", s->path);
    line_reader lr = {.in = in, .buf = malloc(LINE_MAX_BYTES + 1)};
    import_state is = {.s = s, .name = name, .o = o, .st = st,
                       .batch = malloc(BATCH * sizeof(pending))};
    int rc;
    if (lr.buf == NULL || is.batch == NULL)
        rc = tuned__errf(e, TUNED_ENOMEM, "%s: out of memory", name);
    else
        rc = import_lines(&is, &lr, e);
    free(lr.buf);
    free(is.batch);
    return rc;
}
