/* identity.c: the GPU identity's whole string, its four parts and their
 * fingerprints, and what differs between two identities (identity.h). */
#include "src/common/identity.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "src/common/err.h"
#include "src/common/hash.h"
#include "src/common/why.h"

uint64_t tuned__ident_fingerprint(const char *text)
{
    return tuned__fnv1a64(text, strlen(text), TUNED__FNV_SEED);
}

static void copy_text(char *dst, size_t n, const char *src)
{
    size_t len = strnlen(src, n - 1);
    memcpy(dst, src, len);
    dst[len] = '\0';
}

static void part_done(tuned__ident_part *p)
{
    p->fp = p->text[0] != '\0' ? tuned__ident_fingerprint(p->text) : 0;
}

void tuned__identity_make(const tuned__ident_facts *f, tuned__identity *out)
{
    memset(out, 0, sizeof *out);
    tuned__ident_facts *g = &out->f;
    *g = *f;
    /* Terminated whatever the caller left in the arrays. */
    copy_text(g->gpu_name, sizeof g->gpu_name, f->gpu_name);
    copy_text(g->policy, sizeof g->policy, f->policy);
    snprintf(out->full, sizeof out->full,
             "%s|sm_%" PRIu32 "%" PRIu32 "|%" PRIu32 "sm|%" PRIu64 "MiB|drv%" PRIu32
             "|nvrtc%" PRIu32 ".%" PRIu32 "|tpl%016" PRIx64,
             g->gpu_name, g->cc_major, g->cc_minor, g->sm_count, g->mem_mib, g->driver_version,
             g->nvrtc_major, g->nvrtc_minor, g->template_hash);
    out->full_fp = tuned__ident_fingerprint(out->full);
    snprintf(out->hwclass.text, sizeof out->hwclass.text, "%s|sm_%" PRIu32 "%" PRIu32 "|%" PRIu32 "sm",
             g->gpu_name, g->cc_major, g->cc_minor, g->sm_count);
    snprintf(out->toolchain.text, sizeof out->toolchain.text,
             "drv%" PRIu32 "|nvrtc%" PRIu32 ".%" PRIu32, g->driver_version, g->nvrtc_major,
             g->nvrtc_minor);
    snprintf(out->code.text, sizeof out->code.text, "tpl%016" PRIx64, g->template_hash);
    copy_text(out->policy.text, sizeof out->policy.text, g->policy);
    part_done(&out->hwclass);
    part_done(&out->toolchain);
    part_done(&out->code);
    part_done(&out->policy);
}

unsigned tuned__identity_diff(const tuned__identity *a, const tuned__identity *here, char *why,
                              size_t n)
{
    tuned__why w = tuned__why_start(why, n);
    const tuned__ident_facts *p = &a->f, *q = &here->f;
    unsigned diff = 0;
    if (strcmp(a->hwclass.text, here->hwclass.text) != 0) {
        diff |= TUNED__IDENT_HWCLASS;
        if (strcmp(p->gpu_name, q->gpu_name) != 0)
            tuned__why_add(&w, "GPU %s (here %s)", p->gpu_name, q->gpu_name);
        if (p->cc_major != q->cc_major || p->cc_minor != q->cc_minor)
            tuned__why_add(&w, "sm_%" PRIu32 "%" PRIu32 " (here sm_%" PRIu32 "%" PRIu32 ")", p->cc_major,
                    p->cc_minor, q->cc_major, q->cc_minor);
        if (p->sm_count != q->sm_count)
            tuned__why_add(&w, "%" PRIu32 " SMs (here %" PRIu32 ")", p->sm_count, q->sm_count);
    }
    if (p->mem_mib != q->mem_mib) {
        diff |= TUNED__IDENT_MEMORY;
        tuned__why_add(&w, "%" PRIu64 " MiB (here %" PRIu64 ")", p->mem_mib, q->mem_mib);
    }
    if (strcmp(a->toolchain.text, here->toolchain.text) != 0) {
        diff |= TUNED__IDENT_TOOLCHAIN;
        if (p->driver_version != q->driver_version)
            tuned__why_add(&w, "driver %" PRIu32 " (here %" PRIu32 ")", p->driver_version,
                    q->driver_version);
        if (p->nvrtc_major != q->nvrtc_major || p->nvrtc_minor != q->nvrtc_minor)
            tuned__why_add(&w, "nvrtc %" PRIu32 ".%" PRIu32 " (here %" PRIu32 ".%" PRIu32 ")",
                    p->nvrtc_major, p->nvrtc_minor, q->nvrtc_major, q->nvrtc_minor);
    }
    if (strcmp(a->code.text, here->code.text) != 0) {
        diff |= TUNED__IDENT_CODE;
        tuned__why_add(&w, "templates %016" PRIx64 " (here %016" PRIx64 ")", p->template_hash,
                q->template_hash);
    }
    if (strcmp(a->policy.text, here->policy.text) != 0) {
        diff |= TUNED__IDENT_POLICY;
        tuned__why_add(&w, "policy %s (here %s)", a->policy.text[0] ? a->policy.text : "none",
                here->policy.text[0] ? here->policy.text : "none");
    }
    /* The parts spell the facts; texts cut at their arrays' ends could hide
     * a difference only in the whole string. */
    if (diff == 0 && strcmp(a->full, here->full) != 0) {
        diff |= TUNED__IDENT_HWCLASS;
        tuned__why_add(&w, "GPU identity %s (here %s)", a->full, here->full);
    }
    return diff;
}
