/* index.c: the in-memory copy of the store (index.h).
 *
 * Records sit in one array (with room to spare for records put one by one
 * after the load); `order` lists their positions in store key order, and
 * a power-of-two open-addressing table maps a key's hash to its position.
 * Each record's reply text is rendered once into a text arena: the head of
 * a `get` answer (config and time), then the record's fields (a record put
 * again gets a new fragment; the old one stays until the next load), so
 * that a hit formats no number. The memo is a second,
 * fixed-size table of derived answers that is simply emptied when full:
 * its entries are cheap to recompute, and a client asking for random
 * shapes must not grow the daemon's memory. */
#include "src/daemon/index.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cache/key.h"
#include "src/common/hash.h"
#include "src/common/priority.h"
#include "src/daemon/protocol.h"
#include "tuned.h"
#include "src/tuner/policy.h"

#define MEMO_SLOTS 8192          /* a power of two */
#define MEMO_MAX (MEMO_SLOTS / 2)

typedef struct memo_entry {
    bool used;
    tuned__store_key key;
    tuned__answer a;
} memo_entry;

struct tuned__index {
    tuned__record *recs;
    size_t n, cap;     /* records, and room for them in each per-record array */
    uint32_t *order;   /* positions in store key order */
    bool *exact;       /* measured under this build's policy: may be served as exact */
    uint64_t *hw;      /* the hardware class fingerprint it spells; 0 when it does not */
    size_t *frag_off;  /* where its text starts: the answer head, then the fields */
    size_t *head_len, *frag_len;
    tuned__buf text;
    uint32_t *table;   /* position + 1; 0 is empty */
    size_t table_size; /* a power of two */
    tuned__index_gpu *gpus;
    size_t ngpus, gpus_cap;
    memo_entry *memo;
    size_t memo_n;
    tuned__record *here;  /* the local systems (tuned__index_set_here) */
    size_t nhere;
};

static uint64_t key_hash(const tuned__store_key *k)
{
    uint64_t h = TUNED__FNV_SEED;
    h = tuned__fnv1a64(&k->kernel, 1, h);
    h = tuned__fnv1a64(&k->dtype, 1, h);
    h = tuned__fnv1a64(&k->rows, sizeof k->rows, h);
    h = tuned__fnv1a64(&k->cols, sizeof k->cols, h);
    h = tuned__fnv1a64(&k->gpu_fp, sizeof k->gpu_fp, h);
    return h ^ (h >> 29);
}

static bool key_eq(const tuned__store_key *a, const tuned__store_key *b)
{
    return a->kernel == b->kernel && a->dtype == b->dtype && a->rows == b->rows &&
           a->cols == b->cols && a->gpu_fp == b->gpu_fp;
}

int tuned__index_new(tuned__index **out, tuned__err *e)
{
    tuned__index *ix = calloc(1, sizeof *ix);
    if (ix != NULL)
        ix->memo = calloc(MEMO_SLOTS, sizeof *ix->memo);
    if (ix == NULL || ix->memo == NULL) {
        free(ix);
        return tuned__errf(e, TUNED_ENOMEM, "index: out of memory");
    }
    *out = ix;
    return 0;
}

static void clear(tuned__index *ix)
{
    free(ix->recs);
    free(ix->order);
    free(ix->exact);
    free(ix->hw);
    free(ix->frag_off);
    free(ix->head_len);
    free(ix->frag_len);
    tuned__buf_free(&ix->text);
    free(ix->table);
    free(ix->gpus);
    ix->recs = NULL;
    ix->order = NULL;
    ix->exact = NULL;
    ix->hw = NULL;
    ix->frag_off = ix->head_len = ix->frag_len = NULL;
    ix->table = NULL;
    ix->gpus = NULL;
    ix->n = ix->cap = ix->table_size = ix->ngpus = ix->gpus_cap = 0;
}

void tuned__index_free(tuned__index *ix)
{
    if (ix == NULL)
        return;
    clear(ix);
    free(ix->memo);
    free(ix->here);
    free(ix);
}

bool tuned__identity_parse(const char *identity, int *arch, int *sms, uint64_t *total_mem)
{
    const char *p = strstr(identity, "|sm_");
    if (p == NULL)
        return false;
    char *end;
    long a = strtol(p + 4, &end, 10);
    if (end == p + 4 || *end != '|' || a <= 0 || a > 1000)
        return false;
    const char *q = end + 1;
    long m = strtol(q, &end, 10);
    if (end == q || strncmp(end, "sm|", 3) != 0 || m <= 0 || m > 100000)
        return false;
    q = end + 3;
    unsigned long long mib = strtoull(q, &end, 10);
    if (end == q || strncmp(end, "MiB", 3) != 0 || mib > (1ull << 40))
        return false;
    *arch = (int)a;
    *sms = (int)m;
    *total_mem = (uint64_t)mib << 20;
    return true;
}

int tuned__index_set_here(tuned__index *ix, const tuned__record *here, size_t n, tuned__err *e)
{
    tuned__record *copy = NULL;
    if (n > 0 && (copy = malloc(n * sizeof *copy)) == NULL)
        return tuned__errf(e, TUNED_ENOMEM, "index: out of memory");
    if (n > 0)
        memcpy(copy, here, n * sizeof *copy);
    free(ix->here);
    ix->here = copy;
    ix->nhere = n;
    return 0;
}

/* Whether stored record r may be served as exact (see set_here). */
static bool servable(const tuned__index *ix, const tuned__record *r)
{
    for (size_t i = 0; i < ix->nhere; i++) {
        if (ix->here[i].key.gpu_fp != r->key.gpu_fp || ix->here[i].key.kernel != r->key.kernel)
            continue;
        tuned__record here = ix->here[i];
        here.key.kernel = r->key.kernel;
        here.key.dtype = r->key.dtype;
        here.key.rows = r->key.rows;
        here.key.cols = r->key.cols;
        here.key.layout = TUNED__LAYOUT_DENSE;
        return tuned__record_exact(r, &here, NULL, 0);
    }
    return r->key.layout == TUNED__LAYOUT_DENSE &&
           strcmp(r->prov.policy, TUNED__MEASURE_POLICY) == 0;
}

/* The GPU record r names, added to the list when new; false when out of memory. */
static bool note_gpu(tuned__index *ix, const tuned__record *r)
{
    for (size_t g = 0; g < ix->ngpus; g++)
        if (ix->gpus[g].fp == r->key.gpu_fp)
            return true;
    if (ix->ngpus == ix->gpus_cap) {
        size_t cap = ix->gpus_cap ? 2 * ix->gpus_cap : 8;
        tuned__index_gpu *p = realloc(ix->gpus, cap * sizeof *p);
        if (p == NULL)
            return false;
        ix->gpus = p;
        ix->gpus_cap = cap;
    }
    tuned__index_gpu *x = &ix->gpus[ix->ngpus++];
    memset(x, 0, sizeof *x);
    x->fp = r->key.gpu_fp;
    memcpy(x->name, r->gpu_name, sizeof x->name);
    x->name[sizeof x->name - 1] = '\0';
    if (!tuned__identity_parse(r->gpu, &x->arch, &x->sms, &x->total_mem))
        x->arch = 0, x->sms = 0, x->total_mem = 0;
    tuned__identity id;
    x->hwclass = tuned__record_identity(r, &id) ? id.hwclass.fp : 0;
    return true;
}

/* Resizes every per-record array to cap and the hash table to fit it
 * (positions are kept, the table is rebuilt); false when out of memory,
 * the index then unchanged except for arrays already grown. */
static bool reserve(tuned__index *ix, size_t cap)
{
    if (cap > UINT32_MAX - 1)
        return false;
    tuned__record *recs = realloc(ix->recs, cap * sizeof *recs);
    if (recs == NULL)
        return false;
    ix->recs = recs;
    uint32_t *order = realloc(ix->order, cap * sizeof *order);
    if (order == NULL)
        return false;
    ix->order = order;
    bool *exact = realloc(ix->exact, cap * sizeof *exact);
    if (exact == NULL)
        return false;
    ix->exact = exact;
    uint64_t *hw = realloc(ix->hw, cap * sizeof *hw);
    if (hw == NULL)
        return false;
    ix->hw = hw;
    size_t *off = realloc(ix->frag_off, cap * sizeof *off);
    if (off == NULL)
        return false;
    ix->frag_off = off;
    size_t *head = realloc(ix->head_len, cap * sizeof *head);
    if (head == NULL)
        return false;
    ix->head_len = head;
    size_t *len = realloc(ix->frag_len, cap * sizeof *len);
    if (len == NULL)
        return false;
    ix->frag_len = len;
    size_t size = 16;
    while (size < 2 * cap + 1)
        size *= 2;
    if (size != ix->table_size) {
        uint32_t *table = calloc(size, sizeof *table);
        if (table == NULL)
            return false;
        for (size_t i = 0; i < ix->n; i++) {
            size_t h = (size_t)key_hash(&ix->recs[i].key) & (size - 1);
            while (table[h] != 0)
                h = (h + 1) & (size - 1);
            table[h] = (uint32_t)(i + 1);
        }
        free(ix->table);
        ix->table = table;
        ix->table_size = size;
    }
    ix->cap = cap;
    return true;
}

/* The table slot of key k: its record's, or the empty one it would take. */
static size_t slot_of(const tuned__index *ix, const tuned__store_key *k)
{
    size_t mask = ix->table_size - 1, h = (size_t)key_hash(k) & mask;
    while (ix->table[h] != 0 && !key_eq(&ix->recs[ix->table[h] - 1].key, k))
        h = (h + 1) & mask;
    return h;
}

/* Sets record at (new or replaced) and renders its reply text. */
static void set_record(tuned__index *ix, size_t at, const tuned__record *r)
{
    ix->recs[at] = *r;
    ix->exact[at] = servable(ix, r);
    tuned__identity id;
    ix->hw[at] = tuned__record_identity(r, &id) ? id.hwclass.fp : 0;
    ix->frag_off[at] = ix->text.len;
    tuned__reply_answer_head(&ix->text, r);
    ix->head_len[at] = ix->text.len - ix->frag_off[at];
    tuned__reply_record(&ix->text, r);
    ix->frag_len[at] = ix->text.len - ix->frag_off[at] - ix->head_len[at];
}

int tuned__index_load(tuned__index *ix, const tuned__record *recs, size_t n, tuned__err *e)
{
    tuned__index fresh = {.memo = ix->memo, .here = ix->here, .nhere = ix->nhere};
    /* Room for records put one by one until the next load. */
    if (!reserve(&fresh, n + n / 16 + 64))
        goto oom;
    /* Off the loop (a background build) this yields now and then; on the
     * loop thread it does nothing. */
    tuned__pacer pacer;
    tuned__pacer_init(&pacer);
    for (size_t i = 0; i < n; i++) {
        tuned__pace(&pacer);
        const tuned__record *r = &recs[i];
        if (r->key.layout != TUNED__LAYOUT_DENSE)
            continue; /* the daemon serves dense rows only */
        size_t h = slot_of(&fresh, &r->key);
        size_t at = fresh.n;
        if (fresh.table[h] != 0) {
            at = fresh.table[h] - 1; /* a duplicate key: the later record wins */
        } else {
            fresh.table[h] = (uint32_t)(fresh.n + 1);
            fresh.order[fresh.n] = (uint32_t)fresh.n; /* recs come in key order */
            fresh.n++;
        }
        set_record(&fresh, at, r);
        if (!note_gpu(&fresh, r))
            goto oom;
    }
    if (fresh.text.oom)
        goto oom;
    clear(ix);
    *ix = fresh; /* memo, here: the same pointers */
    memset(ix->memo, 0, MEMO_SLOTS * sizeof *ix->memo);
    ix->memo_n = 0;
    return 0;
oom:
    fresh.memo = NULL;
    fresh.here = NULL;
    clear(&fresh);
    return tuned__errf(e, TUNED_ENOMEM, "index: out of memory for %zu records", n);
}

static int key_cmp(const tuned__store_key *a, const tuned__store_key *b)
{
    uint8_t ka[TUNED__KEY_LEN], kb[TUNED__KEY_LEN];
    tuned__key_encode(ka, TUNED__KEY_TAG_BEST, a);
    tuned__key_encode(kb, TUNED__KEY_TAG_BEST, b);
    return memcmp(ka, kb, sizeof ka);
}

int tuned__index_put(tuned__index *ix, const tuned__record *r, tuned__err *e)
{
    if (r->key.layout != TUNED__LAYOUT_DENSE)
        return 0;
    if (ix->n == ix->cap && !reserve(ix, ix->cap + ix->cap / 2 + 64))
        return tuned__errf(e, TUNED_ENOMEM, "index: out of memory");
    size_t h = slot_of(ix, &r->key);
    size_t at = ix->table[h] != 0 ? ix->table[h] - 1 : ix->n;
    if (!note_gpu(ix, r))
        return tuned__errf(e, TUNED_ENOMEM, "index: out of memory");
    set_record(ix, at, r);
    if (at == ix->n) {
        /* A new key: its place in key order (binary search, then shift). */
        size_t lo = 0, hi = ix->n;
        while (lo < hi) {
            size_t mid = lo + (hi - lo) / 2;
            if (key_cmp(&ix->recs[ix->order[mid]].key, &r->key) < 0)
                lo = mid + 1;
            else
                hi = mid;
        }
        memmove(ix->order + lo + 1, ix->order + lo, (ix->n - lo) * sizeof *ix->order);
        ix->order[lo] = (uint32_t)at;
        ix->table[h] = (uint32_t)(at + 1);
        ix->n++;
    }
    memset(ix->memo, 0, MEMO_SLOTS * sizeof *ix->memo); /* nearest answers may change */
    ix->memo_n = 0;
    if (ix->text.oom)
        return tuned__errf(e, TUNED_ENOMEM, "index: out of memory");
    return 0;
}

typedef struct collect {
    tuned__record *recs;
    size_t n, cap;
    bool oom;
    tuned__pacer pacer;
} collect;

static int collect_one(void *ctx, const tuned__record *r)
{
    collect *c = ctx;
    tuned__pace(&c->pacer);
    if (c->n == c->cap) {
        size_t cap = c->cap ? c->cap * 2 : 64;
        tuned__record *p = realloc(c->recs, cap * sizeof *p);
        if (p == NULL) {
            c->oom = true;
            return 1;
        }
        c->recs = p;
        c->cap = cap;
    }
    c->recs[c->n++] = *r;
    return 0;
}

int tuned__index_load_store(tuned__index *ix, tuned__store *s, size_t *skipped, tuned__err *e)
{
    collect c = {0};
    tuned__pacer_init(&c.pacer);
    int rc = tuned__store_scan(s, collect_one, &c, skipped, e);
    if (rc == 0 && c.oom)
        rc = tuned__errf(e, TUNED_ENOMEM, "index: out of memory reading the store");
    if (rc == 0)
        rc = tuned__index_load(ix, c.recs, c.n, e);
    free(c.recs);
    return rc;
}

size_t tuned__index_count(const tuned__index *ix)
{
    return ix->n;
}

const tuned__record *tuned__index_at(const tuned__index *ix, size_t i)
{
    return i < ix->n ? &ix->recs[i] : NULL;
}

size_t tuned__index_ordered(const tuned__index *ix, size_t k)
{
    return ix->order[k];
}

long tuned__index_find(const tuned__index *ix, const tuned__store_key *k)
{
    if (ix->table_size == 0)
        return -1;
    size_t h = slot_of(ix, k);
    if (ix->table[h] == 0)
        return -1;
    size_t at = ix->table[h] - 1;
    return ix->exact[at] ? (long)at : -1;
}

const char *tuned__index_fields(const tuned__index *ix, size_t i, size_t *len)
{
    *len = ix->frag_len[i];
    return ix->text.data + ix->frag_off[i] + ix->head_len[i];
}

const char *tuned__index_answer_head(const tuned__index *ix, size_t i, size_t *len)
{
    *len = ix->head_len[i];
    return ix->text.data + ix->frag_off[i];
}

size_t tuned__index_gpu_count(const tuned__index *ix)
{
    return ix->ngpus;
}

const tuned__index_gpu *tuned__index_gpu_at(const tuned__index *ix, size_t i)
{
    return i < ix->ngpus ? &ix->gpus[i] : NULL;
}

/* The hardware class of GPU fp: a local GPU's, else one a record names; 0
 * when none spells it. */
static uint64_t hwclass_of(const tuned__index *ix, uint64_t fp)
{
    tuned__identity id;
    for (size_t i = 0; i < ix->nhere; i++)
        if (ix->here[i].key.gpu_fp == fp && tuned__record_identity(&ix->here[i], &id))
            return id.hwclass.fp;
    for (size_t g = 0; g < ix->ngpus; g++)
        if (ix->gpus[g].fp == fp)
            return ix->gpus[g].hwclass;
    return 0;
}

long tuned__index_nearest(const tuned__index *ix, const tuned__space *sp, uint64_t fp)
{
    uint64_t hw = hwclass_of(ix, fp);
    long best = -1;
    double best_d = INFINITY;
    bool best_own = false;
    for (size_t i = 0; i < ix->n; i++) {
        const tuned__record *r = &ix->recs[i];
        bool own = r->key.gpu_fp == fp;
        if (!(own || (hw != 0 && ix->hw[i] == hw)) ||
            r->key.kernel != (uint8_t)tuned__shape_kernel(&sp->shape) ||
            r->key.dtype != (uint8_t)sp->shape.dtype || !tuned__key_params_match(&r->key, &sp->shape) ||
            (r->key.rows == sp->shape.rows && r->key.cols == tuned__wire_cols_of(&sp->shape)))
            continue;
        double d = 2.0 * fabs(log((double)tuned__wire_cols_cols(r->key.cols) /
                                  (double)sp->shape.cols)) +
                   fabs(log((double)r->key.rows / (double)sp->shape.rows));
        /* closer, or as close and of this GPU's own identity */
        if (!(d < best_d || (d == best_d && own && !best_own)))
            continue;
        tuned__config c;
        tuned__err ignored = {0};
        if (tuned__config_parse(r->config, &c, &ignored) != 0 ||
            !tuned__space_valid(sp, &c, NULL, 0))
            continue;
        best = (long)i;
        best_d = d;
        best_own = own;
    }
    return best;
}

long tuned__index_compatible(const tuned__index *ix, const tuned__store_key *k,
                             const tuned__identity *here, tuned__store_accept_fn accept,
                             void *ctx, tuned__tier *tier)
{
    long best = -1;
    int best_rank[4] = {0};
    *tier = TUNED__TIER_NONE;
    for (size_t i = 0; i < ix->n; i++) {
        const tuned__record *r = &ix->recs[i];
        if (r->key.kernel != k->kernel || r->key.dtype != k->dtype || r->key.rows != k->rows ||
            r->key.cols != k->cols || r->key.layout != k->layout ||
            ix->hw[i] != here->hwclass.fp)
            continue;
        tuned__tier t = tuned__record_tier(r, here, NULL, 0);
        if (t == TUNED__TIER_NONE || (accept != NULL && !accept(ctx, r, t)))
            continue;
        /* As the store ranks them (tuned__store_find_compatible): exact,
         * then this policy, this NVRTC, this driver, then the newest. */
        const tuned__provenance *p = &r->prov;
        const tuned__ident_facts *q = &here->f;
        int rank[4] = {t == TUNED__TIER_EXACT, strcmp(p->policy, q->policy) == 0,
                       p->nvrtc_major == q->nvrtc_major && p->nvrtc_minor == q->nvrtc_minor,
                       p->driver_version == q->driver_version};
        bool better = best < 0;
        for (int j = 0; !better && j < 4; j++) {
            if (rank[j] != best_rank[j]) {
                better = rank[j] > best_rank[j];
                break;
            }
            if (j == 3)
                better = strcmp(r->date, ix->recs[best].date) > 0;
        }
        if (!better)
            continue;
        best = (long)i;
        memcpy(best_rank, rank, sizeof rank);
        *tier = t;
    }
    return best;
}

static size_t memo_slot(const tuned__index *ix, const tuned__store_key *k, bool *found)
{
    size_t mask = MEMO_SLOTS - 1, h = (size_t)key_hash(k) & mask;
    while (ix->memo[h].used && !key_eq(&ix->memo[h].key, k))
        h = (h + 1) & mask;
    *found = ix->memo[h].used;
    return h;
}

bool tuned__index_memo_get(const tuned__index *ix, const tuned__store_key *k, tuned__answer *out)
{
    bool found;
    size_t h = memo_slot(ix, k, &found);
    if (found)
        *out = ix->memo[h].a;
    return found;
}

void tuned__index_memo_put(tuned__index *ix, const tuned__store_key *k, const tuned__answer *a)
{
    if (ix->memo_n >= MEMO_MAX) {
        memset(ix->memo, 0, MEMO_SLOTS * sizeof *ix->memo);
        ix->memo_n = 0;
    }
    bool found;
    size_t h = memo_slot(ix, k, &found);
    if (!found) {
        ix->memo[h].used = true;
        ix->memo[h].key = *k;
        ix->memo_n++;
    }
    ix->memo[h].a = *a;
}
