/* remote_forget.c: `tuned forget --remote` (remote.h): removes records
 * from the fleet tier, named by key or selected by shape, dtype and
 * hardware class, through the fleet client on a loop of its own (the
 * command runs no daemon). */
#include "src/daemon/remote.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <uv.h>

#include "src/codegen/kind.h"
#include "src/fleet/fleet.h"
#include "tuned.h"

typedef struct sync_call {
    bool done;
    tuned__fleet_status status;
    char err[256];
    tuned__fleet_shape *shapes;
    size_t n_shapes;
} sync_call;

static void on_sync(void *ctx, const tuned__fleet_reply *r)
{
    sync_call *c = ctx;
    c->done = true;
    c->status = r->status;
    snprintf(c->err, sizeof c->err, "%s", r->err.msg);
    if (r->n_shapes > 0 && (c->shapes = calloc(r->n_shapes, sizeof *c->shapes)) != NULL) {
        memcpy(c->shapes, r->shapes, r->n_shapes * sizeof *c->shapes);
        c->n_shapes = r->n_shapes;
    }
}

static void run_until(uv_loop_t *loop, const bool *done)
{
    while (!*done)
        uv_run(loop, UV_RUN_ONCE);
}

static void on_forget_closed(void *ctx)
{
    *(bool *)ctx = true;
}

int tuned__remote_forget(const tuned__remote_forget_req *q, size_t *removed, tuned__err *e)
{
    *removed = 0;
    tuned__fleet_id *ids = NULL;
    size_t nids = 0, cap = 0;
    int rc = 0;
    for (size_t i = 0; i < q->nkeys; i++) {
        if (nids == cap) {
            cap = cap ? 2 * cap : 8;
            tuned__fleet_id *p = realloc(ids, cap * sizeof *p);
            if (p == NULL) {
                free(ids);
                return tuned__errf(e, TUNED_ENOMEM, "forget: out of memory");
            }
            ids = p;
        }
        if ((rc = tuned__fleet_record_key_parse(q->keys[i], &ids[nids], e)) != 0) {
            free(ids);
            return rc;
        }
        nids++;
    }
    uv_loop_t loop;
    if (uv_loop_init(&loop) != 0) {
        free(ids);
        return tuned__errf(e, TUNED_EIO, "forget: uv_loop_init failed");
    }
    tuned__fleet_opts fo;
    tuned__fleet_opts_init(&fo);
    fo.url = q->url;
    if (q->credentials != NULL && strncmp(q->credentials, "env:", 4) == 0)
        fo.credentials_env = q->credentials + 4;
    else
        fo.credentials_file = q->credentials;
    fo.timeout_ms = q->timeout_s > 0 ? (unsigned)(q->timeout_s * 1000) : 2000;
    fo.connect_timeout_ms = fo.timeout_ms;
    tuned__fleet *f = NULL;
    if ((rc = tuned__fleet_open(&loop, &fo, &f, e)) != 0) {
        free(ids);
        uv_loop_close(&loop);
        return rc;
    }
    /* A filter: the records the index lists for the shape, of every
     * toolchain, code and policy. The class as its text ("NAME|sm_XY|Nsm",
     * as list prints it) or its name. */
    char hwclass[TUNED__FLEET_NAME] = "";
    if (q->hwclass != NULL && strchr(q->hwclass, '|') != NULL)
        tuned__fleet_hwclass_name(q->hwclass, hwclass, sizeof hwclass);
    else if (q->hwclass != NULL)
        snprintf(hwclass, sizeof hwclass, "%s", q->hwclass);
    size_t nkinds = q->hwclass != NULL ? tuned__kind_count() : 0;
    for (size_t at = 0; rc == 0 && at < nkinds * 3; at++) {
        const tuned__kind_spec *kind = tuned__kind_at(at / 3);
        int dt = (int)(at % 3);
        if ((q->have_dtype && dt != q->dtype) || (q->have_kernel && kind->id != q->kernel))
            continue;
        sync_call c = {0};
        if ((rc = tuned__fleet_shapes(f, kind->id, (uint8_t)dt, hwclass, on_sync, &c, e)) != 0)
            break;
        run_until(&loop, &c.done);
        if (c.status != TUNED__FLEET_OK) {
            rc = tuned__errf(e, TUNED_EIO, "fleet %s: %s", q->url, c.err);
        }
        for (size_t i = 0; rc == 0 && i < c.n_shapes; i++) {
            if (c.shapes[i].rows != q->rows || c.shapes[i].cols != q->cols)
                continue;
            if (nids == cap) {
                cap = cap ? 2 * cap : 8;
                tuned__fleet_id *p = realloc(ids, cap * sizeof *p);
                if (p == NULL) {
                    rc = tuned__errf(e, TUNED_ENOMEM, "forget: out of memory");
                    break;
                }
                ids = p;
            }
            tuned__fleet_id *id = &ids[nids++];
            memset(id, 0, sizeof *id);
            id->kernel = kind->id;
            id->dtype = (uint8_t)dt;
            id->rows = q->rows;
            id->cols = q->cols;
            id->layout = c.shapes[i].layout;
            snprintf(id->hwclass, sizeof id->hwclass, "%s", hwclass);
            snprintf(id->toolchain, sizeof id->toolchain, "%s", c.shapes[i].toolchain);
            snprintf(id->code, sizeof id->code, "%s", c.shapes[i].code);
            snprintf(id->policy, sizeof id->policy, "%s", c.shapes[i].policy);
        }
        free(c.shapes);
    }
    for (size_t i = 0; rc == 0 && i < nids; i++) {
        char key[512];
        tuned__fleet_record_key(key, sizeof key, &ids[i]);
        if (q->dry_run) {
            if (q->say != NULL)
                q->say(q->ctx, key, "would forget");
            (*removed)++;
            continue;
        }
        sync_call c = {0};
        if ((rc = tuned__fleet_forget(f, &ids[i], on_sync, &c, e)) != 0)
            break;
        run_until(&loop, &c.done);
        free(c.shapes);
        if (c.status == TUNED__FLEET_OK) {
            (*removed)++;
            if (q->say != NULL)
                q->say(q->ctx, key, "forgot");
        } else if (c.status == TUNED__FLEET_MISS) {
            if (q->say != NULL)
                q->say(q->ctx, key, "no record");
        } else {
            rc = tuned__errf(e, TUNED_EIO, "fleet %s: forget %s: %s: %s", q->url, key,
                             tuned__fleet_status_name(c.status), c.err);
        }
    }
    bool closed = false;
    tuned__fleet_close(f, on_forget_closed, &closed);
    run_until(&loop, &closed);
    uv_run(&loop, UV_RUN_DEFAULT);
    if (uv_loop_close(&loop) != 0 && rc == 0)
        rc = tuned__errf(e, TUNED_EIO, "forget: a handle was left open");
    free(ids);
    return rc;
}
