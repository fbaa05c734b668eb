/* test_kind.c SOURCE_ROOT: the registry of kernel kinds (src/codegen/kind.c).
 *
 *   list     every TUNED_KERNEL_MAP entry has one spec, ids 1..N in order,
 *            names unique and round-tripping, unknown ids and names refused
 *   specs    each spec is whole: tensors with an input and an output, a
 *            register-row path whose templates this build embeds, the bytes
 *            it moves (a forward softmax two tensors, a backward one three)
 *   code     a kind's code hash covers its own templates only; the four
 *            kinds from before the registry still compile what they did
 *            (code hash == legacy_code), so their records stay filed under
 *            TUNED__LEGACY_CODE_HASH
 *   shipped  every record of cache/pretuned/ *.jsonl carries that hash and
 *            a kind of this registry: exact after the upgrade, by hash
 *            arithmetic, for the H100 file too (no H100 to measure on)
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "expect.h"
#include "src/codegen/kind.h"
#include "src/codegen/templates.h"
#include "cache/record.h"

static void test_list(void)
{
    static const struct { const char *name; int id; } map[] = {
#define ROW(up, value, text) {text, value},
        TUNED_KERNEL_MAP(ROW)
#undef ROW
    };
    size_t n = sizeof map / sizeof map[0];
    EXPECT(tuned__kind_count() == n && n == TUNED__KIND_COUNT, "%zu specs, %zu kinds",
           tuned__kind_count(), n);
    for (size_t i = 0; i < n; i++) {
        const tuned__kind_spec *k = tuned__kind((unsigned)map[i].id);
        EXPECT(k != NULL && strcmp(k->name, map[i].name) == 0 && k->id == map[i].id,
               "kind %d: spec %s", map[i].id, k != NULL ? k->name : "missing");
        EXPECT(map[i].id == (int)i + 1, "ids are 1..N in order: %s is %d", map[i].name,
               map[i].id);
        EXPECT(tuned__kind_at(i) == k, "kind_at(%zu)", i);
        tuned_kernel parsed;
        EXPECT(tuned_kernel_parse(map[i].name, &parsed) == 0 && (int)parsed == map[i].id &&
                   strcmp(tuned_kernel_name(parsed), map[i].name) == 0,
               "%s round trip", map[i].name);
        for (size_t j = 0; j < i; j++)
            EXPECT(strcmp(map[i].name, map[j].name) != 0, "%s twice", map[i].name);
    }
    tuned_kernel k;
    EXPECT(tuned__kind(0) == NULL && tuned__kind((unsigned)n + 1) == NULL &&
               tuned_kernel_name((tuned_kernel)(n + 1)) == NULL &&
               tuned_kernel_parse("softmax ", &k) == TUNED_EINVAL &&
               tuned_kernel_parse(NULL, &k) == TUNED_EINVAL && tuned__kind_find("") == NULL,
           "unknown kinds refused");
    char list[256];
    tuned__kind_list(list, sizeof list);
    EXPECT(strncmp(list, "softmax, softmax_bwd, ", 22) == 0, "list: %s", list);
    char tiny[8];
    tuned__kind_list(tiny, sizeof tiny);
    EXPECT(strlen(tiny) < sizeof tiny, "a short buffer is cut, not overrun");
}

static void test_specs(void)
{
    for (size_t i = 0; i < tuned__kind_count(); i++) {
        const tuned__kind_spec *k = tuned__kind_at(i);
        unsigned in = 0, out = 0;
        for (unsigned t = 0; t < k->ntensors; t++) {
            in += k->tensor[t].role == TUNED__TENSOR_IN;
            out += k->tensor[t].role == TUNED__TENSOR_OUT;
            EXPECT(k->tensor[t].name != NULL, "%s: tensor %u has no name", k->name, t);
            /* a present_param names a one-bit parameter of an optional tensor */
            unsigned pp = k->tensor[t].present_param;
            EXPECT(pp == 0 || (k->tensor[t].optional && pp <= k->nparams &&
                               k->param[pp - 1].bits == 1 && k->param[pp - 1].max == 1),
                   "%s: tensor %u's present_param %u", k->name, t, pp);
        }
        /* a terms_param names a parameter of a kind that chooses a top k */
        EXPECT(k->terms_param == 0 || (k->selects && k->terms_param <= k->nparams),
               "%s: terms_param %u", k->name, (unsigned)k->terms_param);
        EXPECT(k->ntensors <= TUNED__KIND_MAX_TENSORS && in >= 1 && out >= 1,
               "%s: %u inputs, %u outputs", k->name, in, out);
        EXPECT(k->tensor[tuned__kind_first_in(k)].role == TUNED__TENSOR_IN &&
                   k->tensor[tuned__kind_first_out(k)].role == TUNED__TENSOR_OUT,
               "%s: first input and output", k->name);
        /* a kernel kind has a register-row path; a composite has none of
         * its own and runs an inner kind that has */
        if (k->evaluate == TUNED__EVALUATE_KERNEL)
            EXPECT(k->path[TUNED__PATH_ROWS].entry != NULL, "%s: no register-row path",
                   k->name);
        else
            EXPECT(k->path[TUNED__PATH_ROWS].entry == NULL && tuned__kind(k->inner) != NULL &&
                       tuned__kind(k->inner)->evaluate == TUNED__EVALUATE_KERNEL,
                   "%s: a composite with an inner kernel kind", k->name);
        for (unsigned p = 0; p < TUNED__PATH_COUNT; p++)
            for (unsigned j = 0; k->path[p].entry != NULL && j < TUNED__KIND_MAX_PARTS &&
                                 k->path[p].parts[j] != NULL;
                 j++)
                EXPECT(tuned__template_find(k->path[p].parts[j]) != NULL,
                       "%s: template %s is not in this build", k->name, k->path[p].parts[j]);
        /* a composite's check is its evaluation's own (lce_reference.c) */
        EXPECT(k->rows_held >= 1 && (k->reference != 0 || k->evaluate != 0) && k->math != NULL,
               "%s: facts", k->name);
    }
    /* The linear cross-entropy: its tensors' bytes from the hidden size
     * (8192 x 128256, hidden 4096, bf16: h and dh, W and dW, labels, loss) */
    const tuned__kind_spec *lce = tuned__kind(TUNED_KERNEL_LINEAR_CROSS_ENTROPY);
    uint32_t word = tuned__params_default(lce);
    EXPECT(tuned__params_value(lce, word, "hidden", 0) == 4096 &&
               tuned__params_value(lce, word, "budget", 0) == 256,
           "linear_cross_entropy: hidden 4096 and a 256 MiB budget by default");
    double want = 2.0 * 8192 * 4096 * 2 + 2.0 * 128256 * 4096 * 2 + 8192 * 8 + 8192 * 4;
    EXPECT(tuned__kind_bytes(lce, 8192, tuned__wire_cols(128256, word), 2) == want,
           "linear_cross_entropy bytes %g, want %g",
           tuned__kind_bytes(lce, 8192, tuned__wire_cols(128256, word), 2), want);
    uint32_t w2 = 0;
    EXPECT(tuned__params_parse(lce, "hidden=32768,budget=4096", &w2, NULL) == 0 &&
               tuned__params_value(lce, w2, "hidden", 0) == 32768 &&
               tuned__params_value(lce, w2, "budget", 0) == 4096,
           "hidden up to 32768 and a budget in MiB fit the word");
    EXPECT(tuned__kind_code_hash(lce) != tuned__kind_code_hash(tuned__kind(lce->inner)),
           "a composite's code is its own and its inner kind's");
    const tuned__kind_spec *fwd = tuned__kind(TUNED_KERNEL_SOFTMAX);
    const tuned__kind_spec *bwd = tuned__kind(TUNED_KERNEL_SOFTMAX_BWD);
    EXPECT(tuned__kind_bytes(fwd, 4096, 32000, 2) == 2.0 * 4096 * 32000 * 2 &&
               tuned__kind_bytes(bwd, 4096, 32000, 2) == 3.0 * 4096 * 32000 * 2 &&
               tuned__kind_matrices(fwd) == 2 && tuned__kind_matrices(bwd) == 3,
           "bytes moved: forward two tensors, backward three");
}

static void test_code(void)
{
    for (size_t i = 0; i < tuned__kind_count(); i++) {
        const tuned__kind_spec *k = tuned__kind_at(i);
        uint64_t code = tuned__kind_code_hash(k);
        for (size_t j = 0; j < i; j++)
            EXPECT(code != tuned__kind_code_hash(tuned__kind_at(j)), "%s and %s share a code hash",
                   k->name, tuned__kind_at(j)->name);
        if (k->legacy_code != 0)
            EXPECT(code == k->legacy_code &&
                       tuned__kind_identity_hash(k) == TUNED__LEGACY_CODE_HASH &&
                       tuned__kind_default_code(k),
                   "%s compiles something else than when the registry came (code %016" PRIx64
                   ", then %016" PRIx64 "): its records are demoted; if meant, say so in "
                   "docs/decisions.md and set its legacy_code to 0",
                   k->name, code, k->legacy_code);
        else
            EXPECT(tuned__kind_identity_hash(k) == code, "%s: a new kind files under its own code",
                   k->name);
    }
    EXPECT(tuned__templates_hash() == TUNED__LEGACY_CODE_HASH, "the default kind's identity");
}

static void test_shipped(const char *root)
{
    static const char *const files[] = {"cache/pretuned/h100.jsonl", "cache/pretuned/h200.jsonl"};
    for (size_t f = 0; f < 2; f++) {
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", root, files[f]);
        FILE *fp = fopen(path, "r");
        EXPECT(fp != NULL, "%s: cannot open", path);
        if (fp == NULL)
            continue;
        char line[4096];
        size_t records = 0, exact = 0;
        while (fgets(line, sizeof line, fp) != NULL) {
            const char *kp = strstr(line, "\"kernel\":\"");
            const char *tp = strstr(line, "\"template_hash\":\"");
            if (kp == NULL || tp == NULL)
                continue;
            records++;
            char kind[32] = "";
            sscanf(kp + 10, "%31[a-z_]", kind);
            uint64_t tpl = strtoull(tp + 17, NULL, 16);
            const tuned__kind_spec *k = tuned__kind_find(kind);
            if (k != NULL && tuned__kind_identity_hash(k) == tpl)
                exact++;
            else
                EXPECT(0, "%s: a %s record with code %016" PRIx64 " is not exact here", files[f],
                       kind, tpl);
        }
        fclose(fp);
        EXPECT(records >= 30 && exact == records, "%s: %zu of %zu records exact", files[f], exact,
               records);
        printf("%s: %zu of %zu records filed under this build's code of their kind\n", files[f],
               exact, records);
    }
}

/* The store's plausibility of a time against its copy counts the kind's
 * bytes: a loss-only cross-entropy reads the logits once, so half the
 * copy's time is possible for it, not for a softmax. */
static void test_plausible_by_kind(void)
{
    tuned__record r;
    memset(&r, 0, sizeof r);
    r.key.dtype = TUNED_BF16;
    r.key.rows = 8192;
    r.key.cols = 128256;
    snprintf(r.gpu, sizeof r.gpu, "test label");
    r.copy_us = 987.7;
    r.median_us = 492.5;
    tuned__err e = {0};
    r.key.kernel = TUNED_KERNEL_CROSS_ENTROPY_LOSS;
    EXPECT(tuned__record_plausible(&r, TUNED_EINVAL, &e) == 0, "loss only at half the copy: %s",
           e.msg);
    r.key.kernel = TUNED_KERNEL_SOFTMAX;
    EXPECT(tuned__record_plausible(&r, TUNED_EINVAL, &e) == TUNED_EINVAL,
           "a softmax at half the copy taken as possible");
}

int main(int argc, char **argv)
{
    test_plausible_by_kind();
    test_list();
    test_specs();
    test_code();
    test_shipped(argc > 1 ? argv[1] : ".");
    return expect_done("kind", NULL);
}
