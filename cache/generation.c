/* generation.c: the store's generation, a counter under meta "generation"
 * that every write transaction touching the best records raises by one.
 *
 * A process that keeps a copy of the best records (the daemon's index)
 * asks LMDB's last transaction id first (no transaction at all), and only
 * when that moved reads this counter (one read transaction): history and
 * compile-cache writes, which a running tune makes all the time, move the
 * transaction id but not the generation, so they cost the copy nothing.
 * The counter is bumped inside the writer's own transaction, so it is
 * committed, or lost, with the change it announces. A store that has
 * never been written by this version reads as generation 0. */
#include <lmdb.h>
#include <stdint.h>
#include <string.h>

#include "cache/store.h"
#include "cache/txn.h"

static const char gen_key[] = "generation";

static uint64_t decode(const MDB_val *v)
{
    uint64_t g = 0;
    if (v->mv_size != 8)
        return 0;
    const unsigned char *p = v->mv_data;
    for (int i = 0; i < 8; i++)
        g = g << 8 | p[i];
    return g;
}

void tuned__generation_bump(tuned__txn *t, tuned__err *e)
{
    MDB_val v;
    int found = tuned__txn_get(t, t->s->meta, gen_key, sizeof gen_key - 1, &v, e);
    if (found < 0)
        return;
    uint64_t g = found == 1 ? decode(&v) + 1 : 1;
    unsigned char out[8];
    for (int i = 7; i >= 0; i--, g >>= 8)
        out[i] = (unsigned char)(g & 0xff);
    tuned__txn_put(t, t->s->meta, gen_key, sizeof gen_key - 1, out, sizeof out, e);
}

int tuned__store_generation(tuned__store *s, uint64_t *out, tuned__err *e)
{
    *out = 0;
    int ready = tuned__store_dbs(s, e);
    if (ready <= 0)
        return ready;
    tuned__txn t;
    int rc = tuned__txn_begin(&t, s, MDB_RDONLY, e);
    if (rc != 0)
        return rc;
    MDB_val v;
    if (tuned__txn_get(&t, s->meta, gen_key, sizeof gen_key - 1, &v, e) == 1)
        *out = decode(&v);
    tuned__txn_discard(&t);
    return tuned__txn_end(&t, e);
}
