/* api_table.c: the map behind tuned_softmax's fast path.
 *
 * Open addressing with linear probing over atomic pointers to immutable
 * entries. Readers (api.h: tuned__api_map_find) load the live table and
 * its slots with acquire ordering and never write; one writer at a time
 * (the handle's lock) fills an empty slot or swaps a key's entry with a
 * release store, so a reader sees either the old entry or the new one,
 * each fully built. Slots are never emptied, so a probe that reaches an
 * empty slot knows the key is absent. At half full the writer builds a
 * table twice the size, publishes it, and keeps the old one (a reader may
 * still be probing it) until the map is freed. Entries belong to the
 * caller, who frees them only when no reader can run (tuned_close). */
#include <stdlib.h>
#include <string.h>

#include "src/api/api.h"

#define FIRST_SLOTS 64

uint64_t tuned__api_key_hash(const tuned__api_key *k)
{
    /* A multiply-xorshift mix of the fields (the finaliser of MurmurHash3's
     * 64-bit variant after each word): a few nanoseconds, and distinct
     * shapes of one context spread over the table. */
    uint64_t words[5] = {(uint64_t)(uintptr_t)k->ctx, k->rows, k->cols, k->stride,
                         ((uint64_t)k->dtype << 32) | ((uint64_t)k->kernel << 16) |
                             ((uint64_t)k->flags << 8) | k->aligned};
    uint64_t h = 0x9e3779b97f4a7c15ull;
    for (int i = 0; i < 5; i++) {
        h ^= words[i];
        h ^= h >> 33;
        h *= 0xff51afd7ed558ccdull;
        h ^= h >> 33;
        h *= 0xc4ceb9fe1a85ec53ull;
        h ^= h >> 33;
    }
    return h;
}

static tuned__api_table *table_new(size_t slots)
{
    tuned__api_table *t = malloc(sizeof *t + slots * sizeof t->slot[0]);
    if (t == NULL)
        return NULL;
    t->mask = slots - 1;
    t->retired = NULL;
    for (size_t i = 0; i < slots; i++)
        atomic_init(&t->slot[i], NULL);
    return t;
}

int tuned__api_map_init(tuned__api_map *m, tuned__err *e)
{
    tuned__api_table *t = table_new(FIRST_SLOTS);
    if (t == NULL)
        return tuned__errf(e, TUNED_ENOMEM, "tuned: out of memory for the kernel table");
    atomic_init(&m->live, t);
    m->count = 0;
    return 0;
}

void tuned__api_map_free(tuned__api_map *m)
{
    tuned__api_table *t = atomic_load_explicit(&m->live, memory_order_relaxed);
    while (t != NULL) {
        tuned__api_table *older = t->retired;
        free(t);
        t = older;
    }
    atomic_store_explicit(&m->live, NULL, memory_order_relaxed);
    m->count = 0;
}

static bool same_key(const tuned__api_entry *a, const tuned__api_key *k, uint64_t hash)
{
    return a->hash == hash && memcmp(&a->key, k, sizeof *k) == 0;
}

/* The slot of key in t: the one holding it, or the empty one ending its probe. */
static size_t probe(tuned__api_table *t, const tuned__api_key *k, uint64_t hash)
{
    size_t i = (size_t)hash & t->mask;
    for (;;) {
        tuned__api_entry *cur = atomic_load_explicit(&t->slot[i], memory_order_relaxed);
        if (cur == NULL || same_key(cur, k, hash))
            return i;
        i = (i + 1) & t->mask;
    }
}

int tuned__api_map_put(tuned__api_map *m, tuned__api_entry *e, tuned__api_entry **replaced,
                       tuned__err *e_out)
{
    if (replaced != NULL)
        *replaced = NULL;
    tuned__api_table *t = atomic_load_explicit(&m->live, memory_order_relaxed);
    size_t i = probe(t, &e->key, e->hash);
    tuned__api_entry *cur = atomic_load_explicit(&t->slot[i], memory_order_relaxed);
    if (cur != NULL) {
        atomic_store_explicit(&t->slot[i], e, memory_order_release);
        if (replaced != NULL)
            *replaced = cur;
        return 0;
    }
    if ((m->count + 1) * 2 > t->mask + 1) {
        /* Grow: copy every entry into a table twice the size, then publish
         * it whole. Readers of the old table still find what it holds. */
        size_t slots = (t->mask + 1) * 2;
        tuned__api_table *bigger = table_new(slots);
        if (bigger == NULL)
            return tuned__errf(e_out, TUNED_ENOMEM,
                               "tuned: out of memory growing the kernel table to %zu slots",
                               slots);
        for (size_t j = 0; j <= t->mask; j++) {
            tuned__api_entry *old = atomic_load_explicit(&t->slot[j], memory_order_relaxed);
            if (old != NULL)
                atomic_store_explicit(&bigger->slot[probe(bigger, &old->key, old->hash)], old,
                                      memory_order_relaxed);
        }
        bigger->retired = t;
        atomic_store_explicit(&m->live, bigger, memory_order_release);
        t = bigger;
        i = probe(t, &e->key, e->hash);
    }
    atomic_store_explicit(&t->slot[i], e, memory_order_release);
    m->count++;
    return 0;
}
