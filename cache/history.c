/* history.c: the "history" database: one entry per evaluated variant of a
 * (shape, layout, GPU), so an interrupted tune can resume where it stopped
 * and a finished one can be audited (store.h).
 *
 * Key: the best key under tag 'H', then the config text (key.h), so the
 * entries of one tune sit together in config order and a prefix scan lists
 * them. Value: a versioned JSON object
 *   {"v":1,"status":"ok","median_us":..,"p20_us":..,"p80_us":..,
 *    "compile_ms":..,"date":"...","detail":"..."}
 * with the status as text, so the numbering of TUNED__HIST_* never reaches
 * the disk. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cache/json.h"
#include "cache/key.h"
#include "cache/store.h"
#include "tuned.h"
#include "cache/txn.h"

#define WHAT "history"
#define HIST_VERSION 1

static const char *const status_names[TUNED__HIST_COUNT] = {
    [TUNED__HIST_OK] = "ok",
    [TUNED__HIST_COMPILE_ERROR] = "compile_error",
    [TUNED__HIST_WRONG] = "wrong",
    [TUNED__HIST_LAUNCH_ERROR] = "launch_error",
    [TUNED__HIST_TIMEOUT] = "timeout",
};

const char *tuned__hist_status_name(int status)
{
    return status >= 0 && status < TUNED__HIST_COUNT ? status_names[status] : NULL;
}

static int check_eval(const tuned__store_eval *ev, tuned__err *e)
{
    time_t t;
    if (tuned__kernel_name(ev->key.kernel) == NULL ||
        tuned_dtype_name((tuned_dtype)ev->key.dtype) == NULL)
        return tuned__errf(e, TUNED_EINVAL, WHAT ": unknown kernel %u or dtype %u",
                           (unsigned)ev->key.kernel, (unsigned)ev->key.dtype);
    if (ev->key.rows < 1 || ev->key.cols < 1 || ev->key.rows > INT64_MAX ||
        ev->key.cols > INT64_MAX)
        return tuned__errf(e, TUNED_EINVAL, WHAT ": shape out of range");
    if (strnlen(ev->config, sizeof ev->config) == sizeof ev->config ||
        !tuned__key_config_ok(ev->config))
        return tuned__errf(e, TUNED_EINVAL, WHAT ": config text must be 1..%d printable "
                           "characters without spaces", TUNED__KEY_CONFIG_MAX);
    if (tuned__hist_status_name(ev->status) == NULL)
        return tuned__errf(e, TUNED_EINVAL, WHAT ": unknown status %d", ev->status);
    const double t3[] = {ev->median_us, ev->p20_us, ev->p80_us, ev->compile_ms};
    for (size_t i = 0; i < 4; i++)
        if (!isfinite(t3[i]) || t3[i] < 0)
            return tuned__errf(e, TUNED_EINVAL, WHAT ": times must be finite and >= 0");
    if (ev->status == TUNED__HIST_OK && !(ev->median_us > 0))
        return tuned__errf(e, TUNED_EINVAL, WHAT ": an ok evaluation needs median_us > 0");
    if (strnlen(ev->date, sizeof ev->date) == sizeof ev->date || tuned__date_parse(ev->date, &t))
        return tuned__errf(e, TUNED_EINVAL, WHAT ": date is not YYYY-MM-DDTHH:MM:SSZ");
    return 0;
}

static int encode_value(const tuned__store_eval *ev, char **text, size_t *len, tuned__err *e)
{
    json_t *o = json_object();
    if (o == NULL)
        return tuned__errf(e, TUNED_ENOMEM, WHAT ": out of memory");
    int rc;
    if ((rc = tuned__json_set_uint(o, WHAT, "v", HIST_VERSION, e)) != 0
        || (rc = tuned__json_set_str(o, WHAT, "status", status_names[ev->status], 32, e)) != 0
        || (rc = tuned__json_set_num(o, WHAT, "median_us", ev->median_us, e)) != 0
        || (rc = tuned__json_set_num(o, WHAT, "p20_us", ev->p20_us, e)) != 0
        || (rc = tuned__json_set_num(o, WHAT, "p80_us", ev->p80_us, e)) != 0
        || (rc = tuned__json_set_num(o, WHAT, "compile_ms", ev->compile_ms, e)) != 0
        || (rc = tuned__json_set_str(o, WHAT, "date", ev->date, sizeof ev->date, e)) != 0
        || (rc = tuned__json_set_str(o, WHAT, "detail", ev->detail, sizeof ev->detail, e)) != 0
        || (rc = tuned__json_dump(o, WHAT, text, len, e)) != 0) {
        json_decref(o);
        return rc;
    }
    json_decref(o);
    return 0;
}

/* The fields of a history value into ev (key and config are the caller's). */
static int value_from_json(const json_t *v, tuned__store_eval *ev, tuned__err *e)
{
    char status[32];
    int rc;
    if ((rc = tuned__json_check_version(v, WHAT, HIST_VERSION, e)) != 0
        || (rc = tuned__json_get_str(v, WHAT, "status", status, sizeof status, e)) != 0
        || (rc = tuned__json_get_num(v, WHAT, "median_us", &ev->median_us, e)) != 0
        || (rc = tuned__json_get_num(v, WHAT, "p20_us", &ev->p20_us, e)) != 0
        || (rc = tuned__json_get_num(v, WHAT, "p80_us", &ev->p80_us, e)) != 0
        || (rc = tuned__json_get_num(v, WHAT, "compile_ms", &ev->compile_ms, e)) != 0
        || (rc = tuned__json_get_str(v, WHAT, "date", ev->date, sizeof ev->date, e)) != 0
        || (rc = tuned__json_get_str(v, WHAT, "detail", ev->detail, sizeof ev->detail, e)) != 0)
        return rc;
    for (int i = 0; i < TUNED__HIST_COUNT; i++) {
        if (strcmp(status, status_names[i]) == 0) {
            ev->status = i;
            return 0;
        }
    }
    return tuned__errf(e, TUNED_ESTORE, WHAT ": field \"status\": unknown \"%s\"", status);
}

int tuned__hist_decode(const MDB_val *k, const MDB_val *v, tuned__store_eval *ev,
                       tuned__err *e)
{
    memset(ev, 0, sizeof *ev);
    json_t *o;
    int rc = tuned__key_decode_hist(k->mv_data, k->mv_size, &ev->key, ev->config, e);
    if (rc == 0 && (rc = tuned__json_load(v->mv_data, v->mv_size, WHAT, &o, e)) == 0) {
        rc = value_from_json(o, ev, e);
        json_decref(o);
    }
    return rc;
}

/* ---- writing ---- */

typedef struct put_arg {
    uint8_t (*keys)[TUNED__KEY_HIST_MAX];
    size_t *klen;
    char **text;
    size_t *len;
    size_t n;
} put_arg;

static void put_write(tuned__txn *t, void *arg, tuned__err *e)
{
    const put_arg *a = arg;
    for (size_t i = 0; i < a->n && t->rc == 0; i++)
        tuned__txn_put(t, t->s->hist, a->keys[i], a->klen[i], a->text[i], a->len[i], e);
}

int tuned__store_put_evals(tuned__store *s, const tuned__store_eval *evs, size_t n,
                           tuned__err *e)
{
    if (s->readonly)
        return tuned__errf(e, TUNED_EINVAL, "store %s: opened read-only", s->path);
    if (n == 0)
        return 0;
    if (n > SIZE_MAX / TUNED__KEY_HIST_MAX)
        return tuned__errf(e, TUNED_EINVAL, "store %s: %zu history entries at once", s->path, n);
    put_arg a = {.n = n};
    a.keys = malloc(n * sizeof *a.keys);
    a.klen = calloc(n, sizeof *a.klen);
    a.text = calloc(n, sizeof *a.text);
    a.len = calloc(n, sizeof *a.len);
    int rc = 0;
    if (a.keys == NULL || a.klen == NULL || a.text == NULL || a.len == NULL)
        rc = tuned__errf(e, TUNED_ENOMEM, "store %s: history: out of memory", s->path);
    for (size_t i = 0; rc == 0 && i < n; i++) {
        if ((rc = check_eval(&evs[i], e)) == 0 &&
            (rc = tuned__key_encode_hist(a.keys[i], &evs[i].key, evs[i].config, &a.klen[i], e)) == 0)
            rc = encode_value(&evs[i], &a.text[i], &a.len[i], e);
        if (rc != 0) {
            char ks[160];
            tuned__store_key_str(ks, sizeof ks, &evs[i].key);
            tuned__err_prefix(e, rc, "store %s: %s config %.127s: ", s->path, ks,
                              evs[i].config);
        }
    }
    if (rc == 0)
        rc = tuned__store_write(s, put_write, &a, e);
    for (size_t i = 0; a.text != NULL && i < n; i++)
        free(a.text[i]);
    free(a.keys);
    free(a.klen);
    free(a.text);
    free(a.len);
    return rc;
}

int tuned__store_put_eval(tuned__store *s, const tuned__store_eval *ev, tuned__err *e)
{
    return tuned__store_put_evals(s, ev, 1, e);
}

/* ---- listing ---- */

typedef struct list_arg {
    const tuned__store_key *key;
    const uint8_t *start;   /* the group, then the config to list after */
    size_t slen;
    tuned__store_eval *out;
    size_t cap, count;
    size_t skipped; /* entries that did not decode */
} list_arg;

static int list_visit(void *ctx, tuned__txn *t, MDB_cursor *cur, const MDB_val *k,
                      const MDB_val *v, tuned__err *e)
{
    (void)cur;
    list_arg *a = ctx;
    if (a->slen > TUNED__KEY_LEN && k->mv_size == a->slen &&
        memcmp(k->mv_data, a->start, a->slen) == 0)
        return 0; /* the entry to list after */
    if (a->count == a->cap)
        return 1;
    (void)t;
    (void)e;
    tuned__store_eval *ev = &a->out[a->count];
    tuned__err ignore = {0};
    /* An entry this build cannot read (damage, or a newer tuned's) is
     * skipped, not fatal: a tune measures that config anew, and gc drops
     * what is damaged. */
    if (tuned__hist_decode(k, v, ev, &ignore) != 0) {
        a->skipped++;
        return 0;
    }
    a->count++;
    return 0;
}

static void list_read(tuned__txn *t, void *arg, tuned__err *e)
{
    list_arg *a = arg;
    tuned__txn_walk_from(t, t->s->hist, a->start, a->slen, TUNED__KEY_LEN, list_visit, a, e);
}

int tuned__store_list_evals(tuned__store *s, const tuned__store_key *key, const char *after,
                            tuned__store_eval *out, size_t cap, size_t *n, tuned__err *e)
{
    *n = 0;
    if (cap == 0 || out == NULL)
        return tuned__errf(e, TUNED_EINVAL, "store %s: list_evals: no room for entries", s->path);
    if (after != NULL && after[0] != '\0' && !tuned__key_config_ok(after))
        return tuned__errf(e, TUNED_EINVAL, "store %s: list_evals: 'after' is not a config text",
                           s->path);
    int ready = tuned__store_dbs(s, e);
    if (ready <= 0)
        return ready;
    uint8_t start[TUNED__KEY_HIST_MAX];
    size_t slen = TUNED__KEY_LEN;
    tuned__key_encode(start, TUNED__KEY_TAG_HIST, key);
    if (after != NULL && after[0] != '\0' &&
        tuned__key_encode_hist(start, key, after, &slen, e) != 0)
        return TUNED_EINVAL;
    list_arg a = {.key = key, .start = start, .slen = slen, .out = out, .cap = cap};
    int rc = tuned__store_read(s, list_read, &a, e);
    if (rc == 0)
        *n = a.count;
    return rc;
}
