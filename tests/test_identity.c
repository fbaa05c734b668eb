/* test_identity.c: the GPU identity's four parts and the serving tiers,
 * without a GPU: the parts made from a record and from a GPU agree; the
 * shipped H100 records, imported into a temporary store, serve a
 * synthetic H100 of another driver as compatible and one of another SM
 * count not at all; nearest crosses toolchains but not hardware classes;
 * exact wins when present; another policy is compatible, not exact; a
 * compatible record whose config does not fit, or that a check refused,
 * is not served. Argument: the source root (for cache/pretuned). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cache/key.h"
#include "cache/record.h"
#include "src/api/api.h"
#include "src/common/hash.h"
#include "src/tuner/policy.h"
#include "src/tuner/tune.h"

#include "tests/expect.h"

#define H100 "NVIDIA H100 80GB HBM3"
#define SYNTHETIC_TPL 0xdc3334dffb22c2bbull

static char tmpdir[256];

/* An H100 with driver and SM count given (the rest as the shipped
 * records' machine had it; their template hash is read from them). */
static uint64_t shipped_tpl = SYNTHETIC_TPL;
static void h100(tuned__gpu *g, int driver, int sms)
{
    memset(g, 0, sizeof *g);
    snprintf(g->name, sizeof g->name, "%s", H100);
    g->cc_major = 9;
    g->sm_count = sms;
    g->total_mem = (size_t)81079 << 20;
    g->l2_bytes = 50 << 20;
    g->driver_version = driver;
    g->nvrtc_major = 13;
    g->template_hash = shipped_tpl;
    tuned__gpu_identify(g);
}

static void put_record(tuned__store *s, const tuned__gpu *g, tuned_dtype dtype, uint64_t rows,
                       uint64_t cols, const char *config, double us, tuned__record *out)
{
    static tuned__tune_outcome o;
    memset(&o, 0, sizeof o);
    o.gpu = *g;
    o.copy_us = us * 0.9;
    o.search.best_us = us;
    o.search.evaluations = 10;
    tuned__err e = {0};
    EXPECT(tuned__config_parse(config, &o.search.best, &e) == 0, "%s: %s", config, e.msg);
    tuned__shape shape = {.dtype = dtype, .rows = rows, .cols = cols};
    tuned__record rec;
    tuned__tune_record(&o, &shape, &rec);
    EXPECT(tuned__store_put_best(s, &rec, &e) == 0, "put %s: %s", config, e.msg);
    if (out != NULL)
        *out = rec;
}

static void test_parts(void)
{
    tuned__gpu g;
    h100(&g, 13000, 132);
    /* The whole string is spelled as it always was: stores need no migration. */
    char old[512];
    snprintf(old, sizeof old, "%s|sm_%d%d|%dsm|%zuMiB|drv%d|nvrtc%d.%d|tpl%016llx", g.name,
             g.cc_major, g.cc_minor, g.sm_count, g.total_mem >> 20, g.driver_version,
             g.nvrtc_major, g.nvrtc_minor, (unsigned long long)g.template_hash);
    EXPECT(strcmp(g.identity, old) == 0, "identity %s, was %s", g.identity, old);
    EXPECT(strcmp(g.identity, "NVIDIA H100 80GB HBM3|sm_90|132sm|81079MiB|drv13000|nvrtc13.0|"
                              "tpldc3334dffb22c2bb") == 0,
           "identity %s", g.identity);
    EXPECT(g.fingerprint == 0xe30492512fa2f48dull, "fingerprint %016" PRIx64, g.fingerprint);

    tuned__identity live;
    tuned__gpu_identity(&g, TUNED__KIND_DEFAULT, TUNED__MEASURE_POLICY, &live);
    EXPECT(strcmp(live.hwclass.text, "NVIDIA H100 80GB HBM3|sm_90|132sm") == 0, "hwclass %s",
           live.hwclass.text);
    EXPECT(strcmp(live.toolchain.text, "drv13000|nvrtc13.0") == 0, "toolchain %s",
           live.toolchain.text);
    EXPECT(strcmp(live.code.text, "tpldc3334dffb22c2bb") == 0, "code %s", live.code.text);
    EXPECT(strcmp(live.policy.text, TUNED__MEASURE_POLICY) == 0, "policy %s", live.policy.text);
    const tuned__ident_part *parts[] = {&live.hwclass, &live.toolchain, &live.code, &live.policy};
    for (size_t i = 0; i < 4; i++)
        EXPECT(parts[i]->fp == tuned__fnv1a64(parts[i]->text, strlen(parts[i]->text),
                                              TUNED__FNV_SEED),
               "part %zu's fingerprint", i);
    EXPECT(live.full_fp == g.fingerprint && strcmp(live.full, g.identity) == 0, "whole identity");

    /* A record measured on it gives the same parts. */
    static tuned__tune_outcome o;
    memset(&o, 0, sizeof o);
    o.gpu = g;
    o.search.best_us = 5;
    tuned__shape shape = {.dtype = TUNED_FP16, .rows = 64, .cols = 1024};
    EXPECT(tuned__config_parse("w4.r4.c1.m1.v8.ld=def.st=def.reg=f32", &o.search.best, NULL) == 0,
           "config");
    tuned__record r;
    tuned__tune_record(&o, &shape, &r);
    tuned__identity stored;
    EXPECT(tuned__record_identity(&r, &stored), "a tuned record spells its own identity");
    EXPECT(memcmp(&stored.hwclass, &live.hwclass, sizeof live.hwclass) == 0 &&
               memcmp(&stored.toolchain, &live.toolchain, sizeof live.toolchain) == 0 &&
               memcmp(&stored.code, &live.code, sizeof live.code) == 0 &&
               memcmp(&stored.policy, &live.policy, sizeof live.policy) == 0 &&
               stored.full_fp == live.full_fp,
           "record and GPU parts differ: %s / %s", stored.full, live.full);
    EXPECT(tuned__record_tier(&r, &live, NULL, 0) == TUNED__TIER_EXACT, "its own GPU: exact");
    EXPECT(tuned__identity_diff(&stored, &live, NULL, 0) == 0, "no difference");

    /* Each fact moves its own part. */
    tuned__gpu other = g;
    other.driver_version = 12080;
    tuned__gpu_identify(&other);
    tuned__identity id;
    tuned__gpu_identity(&other, TUNED__KIND_DEFAULT, TUNED__MEASURE_POLICY, &id);
    char why[256];
    unsigned diff = tuned__identity_diff(&stored, &id, why, sizeof why);
    EXPECT(diff == TUNED__IDENT_TOOLCHAIN && strcmp(why, "driver 13000 (here 12080)") == 0,
           "driver: %x %s", diff, why);
    EXPECT(id.hwclass.fp == live.hwclass.fp && id.toolchain.fp != live.toolchain.fp &&
               id.full_fp != live.full_fp,
           "driver fingerprints");
    EXPECT(tuned__record_tier(&r, &id, why, sizeof why) == TUNED__TIER_COMPATIBLE, "driver: %s",
           why);
    other = g;
    other.total_mem = (size_t)81000 << 20;
    tuned__gpu_identity(&other, TUNED__KIND_DEFAULT, TUNED__MEASURE_POLICY, &id);
    EXPECT(tuned__identity_diff(&stored, &id, NULL, 0) == TUNED__IDENT_MEMORY &&
               tuned__record_tier(&r, &id, NULL, 0) == TUNED__TIER_COMPATIBLE,
           "memory size: compatible");
    other = g;
    other.sm_count = 114;
    tuned__gpu_identity(&other, TUNED__KIND_DEFAULT, TUNED__MEASURE_POLICY, &id);
    EXPECT(tuned__identity_diff(&stored, &id, why, sizeof why) == TUNED__IDENT_HWCLASS &&
               tuned__record_tier(&r, &id, NULL, 0) == TUNED__TIER_NONE,
           "SM count: %s", why);
    other = g;
    other.template_hash ^= 1;
    tuned__gpu_identity(&other, TUNED__KIND_DEFAULT, TUNED__MEASURE_POLICY, &id);
    EXPECT(tuned__identity_diff(&stored, &id, NULL, 0) == TUNED__IDENT_CODE &&
               tuned__record_tier(&r, &id, NULL, 0) == TUNED__TIER_NONE,
           "kernel code: none");
    tuned__gpu_identity(&g, TUNED__KIND_DEFAULT, "another-policy/1", &id);
    EXPECT(tuned__identity_diff(&stored, &id, why, sizeof why) == TUNED__IDENT_POLICY &&
               tuned__record_tier(&r, &id, NULL, 0) == TUNED__TIER_COMPATIBLE,
           "policy: %s", why);
    /* A record whose identity string does not spell its fields is not
     * trusted to be of this class. */
    tuned__record forged = r;
    forged.prov.driver_version = 12080; /* the string still says drv13000 */
    tuned__gpu_identity(&g, TUNED__KIND_DEFAULT, TUNED__MEASURE_POLICY, &id);
    EXPECT(!tuned__record_identity(&forged, &stored) &&
               tuned__record_tier(&forged, &id, NULL, 0) == TUNED__TIER_NONE,
           "a record that does not spell its identity");
}

/* Vetoes every compatible record (a check that failed). */
static bool refuse_all(void *ctx, const tuned__record *r)
{
    (void)r;
    (*(int *)ctx)++;
    return true;
}

static void test_pretuned(const char *root)
{
    char path[512], file[512];
    snprintf(path, sizeof path, "%s/pretuned-store", tmpdir);
    snprintf(file, sizeof file, "%s/cache/pretuned/h100.jsonl", root);
    tuned__err e = {0};
    tuned__store *s = NULL;
    if (tuned__store_open(&s, path, 0, &e) != 0) {
        EXPECT(0, "store: %s", e.msg);
        return;
    }
    FILE *in = fopen(file, "r");
    EXPECT(in != NULL, "%s", file);
    if (in == NULL) {
        tuned__store_close(s);
        return;
    }
    tuned__import_stats st;
    EXPECT(tuned__store_import(s, in, file, NULL, &st, &e) == 0 && st.added == 33 && st.invalid == 0,
           "import: %s (%zu added, %zu invalid)", e.msg, st.added, st.invalid);
    fclose(in);

    tuned__shape shape = {.dtype = TUNED_FP16, .rows = 4096, .cols = 32000};
    /* The shipped record of this shape says which machine measured it
     * (the records are made anew whenever the templates change). */
    tuned__record ship;
    size_t nfound = 0;
    EXPECT(tuned__store_find_shape(s, TUNED_KERNEL_SOFTMAX, TUNED_FP16, 4096, 32000, &ship, 1,
                                   &nfound, &e) == 0 && nfound == 1,
           "the shipped 4096x32000 fp16 record: %s (%zu)", e.msg, nfound);
    char shipped[sizeof ship.config];
    snprintf(shipped, sizeof shipped, "%s", ship.config);
    shipped_tpl = ship.prov.template_hash;
    EXPECT(strcmp(ship.gpu_name, H100) == 0 && ship.prov.driver_version == 13000 &&
               ship.prov.sm_count == 132 && ship.prov.mem_mib == 81079 &&
               ship.prov.nvrtc_major == 13 && ship.prov.nvrtc_minor == 0,
           "the shipped records' machine changed (%s, driver %u, %u SMs, %llu MiB): update h100()",
           ship.gpu_name, ship.prov.driver_version, ship.prov.sm_count,
           (unsigned long long)ship.prov.mem_mib);
    tuned__api_pick p;
    char text[TUNED__CONFIG_TEXT];

    /* The machine that measured them: exact. */
    tuned__gpu same, drv, sms;
    h100(&same, 13000, 132);
    EXPECT(tuned__api_pick_config(s, &same, &shape, NULL, &p, &e) == 0 &&
               p.source == TUNED_SOURCE_EXACT,
           "the measuring machine: %s %s", tuned_source_name(p.source), e.msg);

    /* Another driver: compatible, saying what differs. */
    h100(&drv, 12080, 132);
    tuned__identity id;
    tuned__gpu_identity(&drv, TUNED__KIND_DEFAULT, TUNED__MEASURE_POLICY, &id);
    tuned__store_key key = tuned__store_key_of(&shape, drv.fingerprint);
    tuned__record rec;
    tuned__tier tier;
    EXPECT(tuned__store_find_compatible(s, &key, &id, NULL, NULL, &rec, &tier, &e) == 0 &&
               tier == TUNED__TIER_COMPATIBLE && strcmp(rec.config, shipped) == 0,
           "find_compatible: %s %s", tuned__tier_name(tier), e.msg);
    EXPECT(tuned__api_pick_config(s, &drv, &shape, NULL, &p, &e) == 0, "%s", e.msg);
    tuned__config_format(&p.config, text, sizeof text);
    EXPECT(p.source == TUNED_SOURCE_COMPATIBLE && strcmp(text, shipped) == 0 &&
               strstr(p.note, "driver 13000 (here 12080)") != NULL && p.record_rows == 4096 &&
               p.record_key.gpu_fp == same.fingerprint,
           "another driver: %s %s (%s)", tuned_source_name(p.source), text, p.note);
    EXPECT(strcmp(tuned_source_name(TUNED_SOURCE_COMPATIBLE), "compatible") == 0, "its name");

    /* Another NVRTC too. */
    tuned__gpu nv = drv;
    nv.nvrtc_major = 12;
    nv.nvrtc_minor = 8;
    tuned__gpu_identify(&nv);
    EXPECT(tuned__api_pick_config(s, &nv, &shape, NULL, &p, &e) == 0 &&
               p.source == TUNED_SOURCE_COMPATIBLE && strstr(p.note, "nvrtc 13.0 (here 12.8)"),
           "another NVRTC: %s (%s)", tuned_source_name(p.source), p.note);

    /* A check that failed: not served, and the next tier (nearest) answers. */
    int asked = 0;
    tuned__api_veto veto = {.refused = refuse_all, .ctx = &asked};
    EXPECT(tuned__api_pick_config(s, &drv, &shape, &veto, &p, &e) == 0 &&
               p.source == TUNED_SOURCE_NEAREST && asked > 0 &&
               strstr(p.note, "failed its check") != NULL,
           "vetoed: %s (%s)", tuned_source_name(p.source), p.note);

    /* Another SM count: another hardware class, neither compatible nor
     * nearest. */
    h100(&sms, 13000, 114);
    tuned__gpu_identity(&sms, TUNED__KIND_DEFAULT, TUNED__MEASURE_POLICY, &id);
    key = tuned__store_key_of(&shape, sms.fingerprint);
    EXPECT(tuned__store_find_compatible(s, &key, &id, NULL, NULL, &rec, &tier, &e) ==
               TUNED_ENOTFOUND,
           "another SM count found %s", tuned__tier_name(tier));
    EXPECT(tuned__api_pick_config(s, &sms, &shape, NULL, &p, &e) == 0 &&
               p.source == TUNED_SOURCE_DEFAULT,
           "another SM count: %s", tuned_source_name(p.source));

    /* Nearest crosses toolchains, not hardware classes. */
    tuned__shape near = {.dtype = TUNED_FP16, .rows = 4000, .cols = 32000};
    EXPECT(tuned__api_pick_config(s, &drv, &near, NULL, &p, &e) == 0 &&
               p.source == TUNED_SOURCE_NEAREST && p.record_rows == 4096 &&
               p.record_cols == 32000,
           "nearest across drivers: %s from %llux%llu", tuned_source_name(p.source),
           (unsigned long long)p.record_rows, (unsigned long long)p.record_cols);
    EXPECT(tuned__api_pick_config(s, &sms, &near, NULL, &p, &e) == 0 &&
               p.source == TUNED_SOURCE_DEFAULT,
           "nearest across hardware classes: %s", tuned_source_name(p.source));
    /* At equal distance, this GPU's own record wins. */
    put_record(s, &drv, TUNED_FP16, 1024, 32000, "w32.r1.c1.m1.v8.ld=nc.st=cs.reg=pk", 40.0,
               NULL);
    tuned__shape mid = {.dtype = TUNED_FP16, .rows = 2048, .cols = 32000};
    EXPECT(tuned__api_pick_config(s, &drv, &mid, NULL, &p, &e) == 0 &&
               p.source == TUNED_SOURCE_NEAREST && p.record_key.gpu_fp == drv.fingerprint &&
               p.record_rows == 1024,
           "nearest tie: %s from %llux%llu", tuned_source_name(p.source),
           (unsigned long long)p.record_rows, (unsigned long long)p.record_cols);
    EXPECT(tuned__api_pick_config(s, &same, &mid, NULL, &p, &e) == 0 &&
               p.source == TUNED_SOURCE_NEAREST && p.record_key.gpu_fp == same.fingerprint &&
               p.record_rows == 4096,
           "nearest tie on the other toolchain: %s from %llux%llu", tuned_source_name(p.source),
           (unsigned long long)p.record_rows, (unsigned long long)p.record_cols);

    /* Exact still wins when present. */
    const char *own = "w32.r1.c1.m1.v8.ld=nc.st=cs.reg=pk";
    put_record(s, &drv, TUNED_FP16, 4096, 32000, own, 150.0, NULL);
    EXPECT(tuned__api_pick_config(s, &drv, &shape, NULL, &p, &e) == 0, "%s", e.msg);
    tuned__config_format(&p.config, text, sizeof text);
    EXPECT(p.source == TUNED_SOURCE_EXACT && strcmp(text, own) == 0 && p.note[0] == '\0',
           "exact over compatible: %s %s", tuned_source_name(p.source), text);

    /* Another policy under this very identity: compatible, not exact. */
    tuned__record other_policy;
    put_record(s, &nv, TUNED_FP16, 2048, 2048, "w1.r1.c1.m1.v8.ld=cs.st=cs.reg=f32", 9.0,
               &other_policy);
    snprintf(other_policy.prov.policy, sizeof other_policy.prov.policy, "older-method/2");
    EXPECT(tuned__store_put_best(s, &other_policy, &e) == 0, "%s", e.msg);
    tuned__shape sq = {.dtype = TUNED_FP16, .rows = 2048, .cols = 2048};
    EXPECT(tuned__api_pick_config(s, &nv, &sq, NULL, &p, &e) == 0, "%s", e.msg);
    tuned__config_format(&p.config, text, sizeof text);
    /* The shipped record (this policy, another toolchain) ranks above the
     * own record of another policy: the same policy comes first. */
    EXPECT(p.source == TUNED_SOURCE_COMPATIBLE && p.record_key.gpu_fp == same.fingerprint,
           "same policy first: %s from %016" PRIx64 " (%s)", tuned_source_name(p.source),
           p.record_key.gpu_fp, p.note);
    tuned__store_key shipped_key = tuned__store_key_of(&sq, same.fingerprint);
    EXPECT(tuned__store_forget_key(s, &shipped_key, &e) == 0, "%s", e.msg);
    EXPECT(tuned__api_pick_config(s, &nv, &sq, NULL, &p, &e) == 0 &&
               p.source == TUNED_SOURCE_COMPATIBLE && p.record_key.gpu_fp == nv.fingerprint &&
               strstr(p.note, "policy older-method/2") != NULL,
           "policy mismatch: %s (%s)", tuned_source_name(p.source), p.note);
    tuned__gpu_identity(&nv, TUNED__KIND_DEFAULT, TUNED__MEASURE_POLICY, &id);
    key = tuned__store_key_of(&sq, nv.fingerprint);
    tuned__record got;
    EXPECT(tuned__store_get_best(s, &key, &got, TUNED__MEASURE_POLICY, &e) == TUNED_ENOTFOUND,
           "another policy is never exact");

    /* Among compatible records of one policy: the same NVRTC before a
     * newer date. */
    tuned__shape wide = {.dtype = TUNED_FP16, .rows = 1024, .cols = 50257};
    tuned__gpu nv_old = drv; /* nvrtc 13.0, driver 12080 */
    nv_old.driver_version = 12090;
    tuned__gpu_identify(&nv_old);
    tuned__record newer;
    put_record(s, &nv_old, TUNED_FP16, 1024, 50257, "w8.r1.c1.m1.v8.ld=def.st=def.reg=f32", 50.0,
               &newer);
    snprintf(newer.date, sizeof newer.date, "2099-01-01T00:00:00Z");
    newer.prov.nvrtc_minor = 9; /* another NVRTC, but newest */
    newer.gpu[0] = '\0';
    tuned__identity nid;
    tuned__record_identity(&newer, &nid);
    snprintf(newer.gpu, sizeof newer.gpu, "%s", nid.full);
    newer.key.gpu_fp = nid.full_fp;
    EXPECT(tuned__store_put_best(s, &newer, &e) == 0, "%s", e.msg);
    tuned__gpu here = drv;
    here.driver_version = 12345;
    tuned__gpu_identify(&here);
    EXPECT(tuned__api_pick_config(s, &here, &wide, NULL, &p, &e) == 0 &&
               p.source == TUNED_SOURCE_COMPATIBLE && p.record_key.gpu_fp != newer.key.gpu_fp,
           "same NVRTC before newer: %s from %016" PRIx64, tuned_source_name(p.source),
           p.record_key.gpu_fp);

    /* A compatible record whose config does not fit the shape here is not
     * served (4 rows of 100 columns: 32-warp rows leave threads idle). */
    tuned__record bad;
    put_record(s, &nv_old, TUNED_FP32, 4, 100, "w1.r1.c1.m1.v4.ld=def.st=def.reg=f32", 2.0, &bad);
    snprintf(bad.config, sizeof bad.config, "w32.r1.c1.m1.v4.ld=def.st=def.reg=f32");
    EXPECT(tuned__store_put_best(s, &bad, &e) == 0, "%s", e.msg);
    tuned__shape tiny = {.dtype = TUNED_FP32, .rows = 4, .cols = 100};
    EXPECT(tuned__api_pick_config(s, &here, &tiny, NULL, &p, &e) == 0 &&
               p.source != TUNED_SOURCE_COMPATIBLE && strstr(p.note, "not valid here") != NULL,
           "an invalid compatible config: %s (%s)", tuned_source_name(p.source), p.note);
    tuned__store_close(s);
}

int main(int argc, char **argv)
{
    const char *root = argc > 1 ? argv[1] : ".";
    snprintf(tmpdir, sizeof tmpdir, "/tmp/tuned-test-identity-XXXXXX");
    if (mkdtemp(tmpdir) == NULL) {
        perror("mkdtemp");
        return 1;
    }
    test_parts();
    test_pretuned(root);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", tmpdir);
    if (failures == 0)
        printf("ok\n");
    return failures != 0;
}
