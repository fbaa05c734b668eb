/* params.c: a kind's key parameters (kind.h): the 32-bit word they pack
 * into, its check against the kind's ranges and rule, its text form
 * ("k=8,score=sigmoid": the values that differ from the defaults, in the
 * kind's order) and the defines codegen compiles it into. Nothing here
 * knows a particular kind: names, fields, ranges and value names are the
 * spec's. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "src/codegen/kind.h"

static uint32_t field_mask(const tuned__key_param *p)
{
    return p->bits >= 32 ? 0xffffffffu : ((1u << p->bits) - 1u) << p->shift;
}

unsigned tuned__params_get(const tuned__kind_spec *k, uint32_t word, unsigned i)
{
    if (k == NULL || i >= k->nparams)
        return 0;
    const tuned__key_param *p = &k->param[i];
    return (word & field_mask(p)) >> p->shift;
}

uint32_t tuned__params_set(const tuned__kind_spec *k, uint32_t word, unsigned i, unsigned v)
{
    if (k == NULL || i >= k->nparams)
        return word;
    const tuned__key_param *p = &k->param[i];
    return (word & ~field_mask(p)) | (((uint32_t)v << p->shift) & field_mask(p));
}

uint32_t tuned__params_present(const tuned__kind_spec *k, uint32_t word, const void *const *ptrs)
{
    for (unsigned i = 0; k != NULL && i < k->ntensors; i++)
        if (k->tensor[i].present_param != 0)
            word = tuned__params_set(k, word, k->tensor[i].present_param - 1u, ptrs[i] != NULL);
    return word;
}

bool tuned__tensor_timed(const tuned__kind_spec *k, unsigned i, uint32_t word)
{
    const tuned__tensor_spec *t = &k->tensor[i];
    if (t->role == TUNED__TENSOR_UNUSED)
        return false;
    return !t->optional ||
           (t->present_param != 0 && tuned__params_get(k, word, t->present_param - 1u) == 1);
}

void tuned__kind_example(const tuned__kind_spec *k, uint64_t *cols, uint32_t *params)
{
    *params = tuned__params_default(k);
    if (k->example_cols != 0 && !tuned__params_check(k, *cols, *params, NULL, 0))
        *cols = k->example_cols;
}

uint32_t tuned__params_default(const tuned__kind_spec *k)
{
    uint32_t w = 0;
    for (unsigned i = 0; k != NULL && i < k->nparams; i++)
        w = tuned__params_set(k, w, i, k->param[i].dflt);
    return w;
}

unsigned tuned__params_value(const tuned__kind_spec *k, uint32_t word, const char *name,
                             unsigned dflt)
{
    for (unsigned i = 0; k != NULL && i < k->nparams; i++)
        if (strcmp(k->param[i].name, name) == 0)
            return tuned__params_get(k, word, i);
    return dflt;
}

bool tuned__params_check(const tuned__kind_spec *k, uint64_t cols, uint32_t word, char *why,
                         size_t n)
{
    uint32_t fields = 0;
    for (unsigned i = 0; i < k->nparams; i++) {
        const tuned__key_param *p = &k->param[i];
        fields |= field_mask(p);
        unsigned v = tuned__params_get(k, word, i);
        if (v < p->min || v > p->max) {
            if (why != NULL)
                snprintf(why, n, "%s: %s %u out of range (%u to %u)", k->name, p->name, v,
                         (unsigned)p->min, (unsigned)p->max);
            return false;
        }
    }
    if ((word & ~fields) != 0) {
        if (why != NULL)
            snprintf(why, n, "%s: key parameters 0x%08x: bits outside its parameters%s", k->name,
                     (unsigned)word, k->nparams == 0 ? " (it has none)" : "");
        return false;
    }
    return k->params_rule == NULL || k->params_rule(cols, word, why, n);
}

/* The text of value v of p: its name, or the number. */
static void value_text(const tuned__key_param *p, unsigned v, char *buf, size_t n)
{
    unsigned at = v - p->min;
    if (p->value_name[0] != NULL && v >= p->min && at < TUNED__PARAM_MAX_VALUES &&
        p->value_name[at] != NULL)
        snprintf(buf, n, "%s", p->value_name[at]);
    else
        snprintf(buf, n, "%u", v);
}

void tuned__params_format(const tuned__kind_spec *k, uint32_t word, char *buf, size_t n)
{
    size_t at = 0;
    if (n > 0)
        buf[0] = '\0';
    for (unsigned i = 0; k != NULL && i < k->nparams; i++) {
        unsigned v = tuned__params_get(k, word, i);
        if (v == k->param[i].dflt)
            continue;
        char value[32];
        value_text(&k->param[i], v, value, sizeof value);
        int w = snprintf(buf + at, at < n ? n - at : 0, "%s%s=%s", at > 0 ? "," : "",
                         k->param[i].name, value);
        if (w > 0)
            at += (size_t)w;
    }
}

/* The value called text of p (a value name, or a decimal number). */
static int parse_value(const tuned__kind_spec *k, const tuned__key_param *p, const char *text,
                       unsigned *out, tuned__err *e)
{
    for (unsigned j = 0; j < TUNED__PARAM_MAX_VALUES && p->value_name[j] != NULL; j++)
        if (strcmp(p->value_name[j], text) == 0) {
            *out = p->min + j;
            return 0;
        }
    char *end = NULL;
    errno = 0;
    unsigned long v = text[0] >= '0' && text[0] <= '9' ? strtoul(text, &end, 10) : 0;
    if (end == NULL || *end != '\0' || errno != 0 || v > ((1ul << p->bits) - 1ul)) {
        if (p->value_name[0] == NULL)
            return tuned__errf(e, TUNED_EINVAL, "%s: %s=%s: not a number from %u to %u",
                               k->name, p->name, text, (unsigned)p->min, (unsigned)p->max);
        char names[96] = "";
        for (unsigned j = 0; j < TUNED__PARAM_MAX_VALUES && p->value_name[j] != NULL; j++)
            snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s",
                     j > 0 ? ", " : "", p->value_name[j]);
        return tuned__errf(e, TUNED_EINVAL, "%s: %s=%s: expected one of %s", k->name, p->name,
                           text, names);
    }
    *out = (unsigned)v;
    return 0;
}

int tuned__params_parse(const tuned__kind_spec *k, const char *text, uint32_t *word,
                        tuned__err *e)
{
    uint32_t w = tuned__params_default(k);
    char buf[256];
    if (strlen(text) >= sizeof buf)
        return tuned__errf(e, TUNED_EINVAL, "%s: key parameters: text too long", k->name);
    snprintf(buf, sizeof buf, "%s", text);
    char *save = NULL;
    for (char *part = strtok_r(buf, ",", &save); part != NULL; part = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(part, '=');
        if (eq == NULL)
            return tuned__errf(e, TUNED_EINVAL, "%s: key parameter '%s': expected NAME=VALUE",
                               k->name, part);
        *eq = '\0';
        unsigned i = 0;
        while (i < k->nparams && strcmp(k->param[i].name, part) != 0)
            i++;
        if (i == k->nparams) {
            char names[96] = "";
            for (unsigned j = 0; j < k->nparams; j++)
                snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s",
                         j > 0 ? ", " : "", k->param[j].name);
            return tuned__errf(e, TUNED_EINVAL, "%s: no key parameter '%s' (%s)", k->name, part,
                               k->nparams > 0 ? names : "it has none");
        }
        unsigned v = 0;
        int rc = parse_value(k, &k->param[i], eq + 1, &v, e);
        if (rc != 0)
            return rc;
        w = tuned__params_set(k, w, i, v);
    }
    *word = w;
    return 0;
}

int tuned__params_defines(const tuned__kind_spec *k, uint32_t word, char *buf, size_t n,
                          tuned__err *e)
{
    size_t at = strlen(buf);
    for (unsigned i = 0; i < k->nparams; i++) {
        int w = snprintf(buf + at, at < n ? n - at : 0, "#define %s %u\n", k->param[i].define,
                         tuned__params_get(k, word, i));
        if (w < 0 || at + (size_t)w >= n)
            return tuned__errf(e, TUNED_EINVAL, "codegen: %s: key parameters' defines too long",
                               k->name);
        at += (size_t)w;
    }
    return 0;
}
