/* cmd_forget.c: `tuned forget KEY...` (keys as `tuned list` prints them)
 * or `tuned forget --gpu NAME | --shape RxC [--dtype D]`: removes stored
 * winners, printing each one (with --dry-run, only printing). With
 * --remote URL, the fleet's records instead (src/daemon/remote.h). Refuses to
 * run with no key and no filter: forgetting everything is `rm -r` of the
 * store directory, on purpose. */
#include <stdlib.h>

#include "cache/key.h"
#include "src/daemon/remote.h"
#include "tools/cli.h"

typedef struct forget_ctx {
    bool dry_run;
} forget_ctx;

static int say(void *ctx, const tuned__store_key *key, const tuned__record *r,
               const char *damage)
{
    forget_ctx *c = ctx;
    char ks[TUNED__KEY_TEXT];
    tuned__key_format(ks, sizeof ks, key);
    printf("%s %s  %s  %s\n", c->dry_run ? "would forget" : "forgot", ks,
           r != NULL ? r->gpu_name : "(damaged)", r != NULL ? r->config : damage);
    return 0;
}

static void say_remote(void *ctx, const char *key, const char *what)
{
    (void)ctx;
    printf("%s %s\n", what, key);
}

/* --remote URL: the fleet's records, by key or by --shape [--dtype] --gpu HWCLASS. */
static int forget_remote(const cli_opts *o)
{
    if (o->nargs == 0 && (!o->have_shape || o->gpu == NULL)) {
        fprintf(stderr, "tuned: forget --remote needs record keys (tuned:v2:rec:...) or --shape "
                "and --gpu HWCLASS (see tuned --help)\n");
        return CLI_USAGE;
    }
    tuned__remote_forget_req q = {.url = o->forget_remote, .credentials = o->remote_credentials,
                                  .keys = (const char *const *)o->args, .nkeys = (size_t)o->nargs,
                                  .dry_run = o->dry_run, .say = say_remote};
    if (o->nargs == 0) {
        q.hwclass = o->gpu;
        q.rows = o->request.shape.rows;
        q.cols = tuned__wire_cols_of(&o->request.shape);
        q.have_kernel = o->request.shape.kernel != 0;
        q.kernel = o->request.shape.kernel;
        q.have_dtype = o->have_dtype;
        q.dtype = (uint8_t)o->request.shape.dtype;
    }
    size_t n = 0;
    tuned__err e = {0};
    int rc = tuned__remote_forget(&q, &n, &e);
    if (rc != 0)
        return rc == TUNED_EINVAL ? (fprintf(stderr, "tuned: %s\n", e.msg), CLI_USAGE)
                                  : cli_fail(&e);
    if (n == 0) {
        fprintf(stderr, "tuned: no fleet record matches\n");
        return CLI_NOT_FOUND;
    }
    return CLI_OK;
}

int cli_cmd_forget(const cli_opts *o)
{
    if (o->forget_remote != NULL)
        return forget_remote(o);
    bool filtered = o->gpu != NULL || o->have_shape || o->have_dtype || o->request.shape.kernel != 0;
    if (o->nargs == 0 && !filtered) {
        fprintf(stderr, "tuned: forget needs KEYs or --gpu/--shape/--dtype (see tuned forget --help)\n");
        return CLI_USAGE;
    }
    if (o->nargs > 0 && filtered) {
        fprintf(stderr, "tuned: forget takes KEYs or filters, not both (see tuned forget --help)\n");
        return CLI_USAGE;
    }
    tuned__err e = {0};
    tuned__store_key *keys = NULL;
    if (o->nargs > 0) {
        keys = calloc((size_t)o->nargs, sizeof *keys);
        if (keys == NULL)
            return cli_fail(&(tuned__err){TUNED_ENOMEM, "forget: out of memory"});
        for (int i = 0; i < o->nargs; i++) {
            if (tuned__key_parse(o->args[i], &keys[i], &e) != 0) {
                free(keys);
                fprintf(stderr, "tuned: %s (see tuned list)\n", e.msg);
                return CLI_USAGE;
            }
        }
    }
    tuned__store *s = NULL;
    int rc = cli_open_store(o, 0, &s, &e);
    if (rc != 0) {
        free(keys);
        return cli_fail(&e);
    }
    forget_ctx c = {.dry_run = o->dry_run};
    int status = CLI_OK;
    if (keys != NULL) {
        for (int i = 0; i < o->nargs; i++) {
            if (o->dry_run) {
                /* Same walk, narrowed to the key's shape and GPU fingerprint. */
                char fp[17];
                snprintf(fp, sizeof fp, "%016llx", (unsigned long long)keys[i].gpu_fp);
                tuned__store_filter f = {.gpu = fp, .have_shape = true, .rows = keys[i].rows,
                                         .cols = keys[i].cols, .have_dtype = true,
                                         .dtype = keys[i].dtype, .have_kernel = true,
                                         .kernel = keys[i].kernel};
                size_t n;
                rc = tuned__store_forget(s, &f, true, say, &c, &n, &e);
                if (rc == 0 && n == 0)
                    rc = tuned__errf(&e, TUNED_ENOTFOUND, "no record under %s", o->args[i]);
            } else if ((rc = tuned__store_forget_key(s, &keys[i], &e)) == 0) {
                printf("forgot %s\n", o->args[i]);
            }
            if (rc != 0) {
                cli_fail(&e);
                status = rc == TUNED_ENOTFOUND ? CLI_NOT_FOUND : CLI_ERROR;
            }
        }
    } else {
        tuned__store_filter f;
        cli_filter(o, &f);
        f.have_kernel = o->request.shape.kernel != 0;
        f.kernel = o->request.shape.kernel;
        size_t n = 0;
        rc = tuned__store_forget(s, &f, o->dry_run, say, &c, &n, &e);
        if (rc != 0) {
            status = cli_fail(&e);
        } else if (n == 0) {
            fprintf(stderr, "tuned: no stored record matches\n");
            status = CLI_NOT_FOUND;
        } else if (!o->quiet) {
            fprintf(stderr, "tuned: %s %zu record%s\n", o->dry_run ? "would forget" : "forgot",
                    n, n == 1 ? "" : "s");
        }
    }
    tuned__store_close(s);
    free(keys);
    return status;
}
