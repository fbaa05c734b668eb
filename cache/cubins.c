/* cubins.c: the "cubins" database: the compile cache. NVRTC takes 60-170 ms
 * per variant; a repeat tune that finds its cubins here skips that (store.h).
 *
 * Key: tag 'C' and the caller's 64-bit hash (key.h). Value: a 32-byte
 * header, then the blob:
 *   version(1) = 1, reserved(7) = 0, created(8, BE, unix seconds),
 *   size(8, BE), FNV-1a 64 of the blob(8, BE)
 * A blob whose length or checksum does not match its header is refused, so
 * a damaged cubin is recompiled rather than handed to the driver. */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "src/common/hash.h"
#include "cache/key.h"
#include "cache/store.h"
#include "tuned.h"
#include "cache/txn.h"

#define CUBIN_VERSION 1
#define HEADER 32

int tuned__cubin_header(const void *data, size_t n, uint64_t *created, uint64_t *size,
                        tuned__err *e)
{
    const uint8_t *p = data;
    if (n < HEADER)
        return tuned__errf(e, TUNED_ESTORE, "cubin: %zu bytes, shorter than its header", n);
    if (p[0] != CUBIN_VERSION)
        return tuned__errf(e, TUNED_ESTORE, "cubin: version %u, this build reads %d",
                           (unsigned)p[0], CUBIN_VERSION);
    *created = tuned__get_be64(p + 8);
    *size = tuned__get_be64(p + 16);
    if (*size != n - HEADER)
        return tuned__errf(e, TUNED_ESTORE, "cubin: header says %" PRIu64 " bytes, holds %zu",
                           *size, n - HEADER);
    return 0;
}

typedef struct put_arg {
    uint8_t key[TUNED__KEY_CUBIN_LEN];
    uint8_t header[HEADER];
    const void *data;
    size_t size;
} put_arg;

static void put_write(tuned__txn *t, void *arg, tuned__err *e)
{
    const put_arg *a = arg;
    MDB_val k = {.mv_size = sizeof a->key, .mv_data = (void *)a->key};
    MDB_val v = {.mv_size = HEADER + a->size, .mv_data = NULL};
    /* MDB_RESERVE: the blob is copied once, straight into the map. */
    int rc = mdb_put(t->txn, t->s->cubins, &k, &v, MDB_RESERVE);
    if (rc != 0) {
        tuned__txn_fail(t, "mdb_put", rc, e);
        return;
    }
    memcpy(v.mv_data, a->header, HEADER);
    memcpy((uint8_t *)v.mv_data + HEADER, a->data, a->size);
}

int tuned__store_put_cubin(tuned__store *s, uint64_t hash, const void *data, size_t size,
                           tuned__err *e)
{
    if (size < 1 || size > TUNED__CUBIN_MAX || data == NULL)
        return tuned__errf(e, TUNED_EINVAL, "store %s: cubin %016" PRIx64 ": %zu bytes, "
                           "expected 1..%zu", s->path, hash, size, TUNED__CUBIN_MAX);
    put_arg a = {.data = data, .size = size};
    tuned__key_encode_cubin(a.key, hash);
    memset(a.header, 0, sizeof a.header);
    a.header[0] = CUBIN_VERSION;
    time_t now = time(NULL);
    tuned__put_be64(a.header + 8, now > 0 ? (uint64_t)now : 0);
    tuned__put_be64(a.header + 16, size);
    tuned__put_be64(a.header + 24, tuned__fnv1a64(data, size, TUNED__FNV_SEED));
    return tuned__store_write(s, put_write, &a, e);
}

typedef struct get_arg {
    uint64_t hash;
    void *copy;   /* malloc()ed blob */
    size_t size;
} get_arg;

static void get_read(tuned__txn *t, void *arg, tuned__err *e)
{
    get_arg *a = arg;
    const char *path = t->s->path;
    uint8_t kb[TUNED__KEY_CUBIN_LEN];
    tuned__key_encode_cubin(kb, a->hash);
    MDB_val v;
    int found = tuned__txn_get(t, t->s->cubins, kb, sizeof kb, &v, e);
    if (found == 0) {
        tuned__txn_error(t, tuned__errf(e, TUNED_ENOTFOUND, "store %s: no cubin %016" PRIx64,
                                        path, a->hash));
        return;
    }
    if (found < 0)
        return;
    const uint8_t *p = v.mv_data;
    uint64_t created, n;
    int rc = tuned__cubin_header(p, v.mv_size, &created, &n, e);
    if (rc != 0)
        rc = tuned__err_prefix(e, rc, "store %s: %016" PRIx64 ": ", path, a->hash);
    else if (n == 0 || tuned__fnv1a64(p + HEADER, n, TUNED__FNV_SEED) != tuned__get_be64(p + 24))
        rc = tuned__errf(e, TUNED_ESTORE, "store %s: cubin %016" PRIx64 ": checksum mismatch: "
                         "damaged", path, a->hash);
    else if ((a->copy = malloc(n)) == NULL)
        rc = tuned__errf(e, TUNED_ENOMEM, "store %s: cubin: out of memory", path);
    if (rc != 0) {
        tuned__txn_error(t, rc);
        return;
    }
    memcpy(a->copy, p + HEADER, n);
    a->size = (size_t)n;
}

int tuned__store_get_cubin(tuned__store *s, uint64_t hash, void **data, size_t *size,
                           tuned__err *e)
{
    *data = NULL;
    *size = 0;
    int ready = tuned__store_dbs(s, e);
    if (ready < 0)
        return ready;
    if (ready == 0)
        return tuned__errf(e, TUNED_ENOTFOUND, "store %s: no cubin %016" PRIx64, s->path, hash);
    get_arg a = {.hash = hash};
    int rc = tuned__store_read(s, get_read, &a, e);
    if (rc != 0) {
        free(a.copy);
        return rc;
    }
    *data = a.copy;
    *size = a.size;
    return 0;
}
