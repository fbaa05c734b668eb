/* sass_diff.c: proves that a change to the kernel templates left the
 * machine code alone. For each shape, dtype and kernel it takes the
 * tuner's space (sm_90, 132 SMs) and a deterministic sample of its configs,
 * evenly spaced within each kind (rows, clusters, stashes, grid splits,
 * tma), builds each variant twice, as this build's codegen writes it and
 * with every embedded template in that text replaced by its old version
 * read from a folder (so the define block is this codegen's: the tool
 * answers for template changes, not codegen changes), compiles both to
 * sm_90 cubins with NVRTC, and compares the kernels' machine code byte for
 * byte (the .text section of the cubin: the SASS itself, which needs no
 * disassembler to compare), their register counts and their shared and
 * parameter memory. It prints every config that differs, with both
 * instruction counts, and a summary.
 *
 *   sass_diff OLD_TEMPLATE_DIR [PER_KIND [THREADS]]
 *
 * PER_KIND (default 4) caps the configs of each kind per space; THREADS
 * (default 2) compiles in parallel.
 * SASS_DIFF_CONFIG="[KERNEL:]ROWSxCOLS[:PARAMS] DTYPE CONFIG" compares
 * that one variant instead of the sample. Exits 1 when any kernel differs or a
 * compile fails. bench/sass-diff.sh fetches the old templates from git and
 * runs it. Not installed. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "src/codegen/nvrtc.h"
#include "src/codegen/source.h"
#include "src/codegen/templates.h"
#include "src/tuner/space.h"
#include "probe_shape.h"

#define ARCH 90
#define SMS 132
#define MAX_CONFIGS 4096

/* The templates of the old set, read whole: text[i] is the old version
 * of tuned__templates[i], or NULL where the folder has none (a template
 * new in this build, used as it is). */
typedef struct old_templates {
    char *text[64];
} old_templates;

/* One config's comparison: filled by a worker, printed by main. */
typedef struct job {
    tuned__shape shape;
    tuned__config config;
    int status; /* 0 identical, 1 different, -1 failed */
    char note[512];
} job;

/* "KERNEL ROWSxCOLS DTYPE CONFIG": how a job is printed and selected. */
static void job_label(const job *j, char *out, size_t n)
{
    char name[TUNED__CONFIG_TEXT];
    tuned__config_format(&j->config, name, sizeof name);
    snprintf(out, n, "%s %llux%llu %s %s", tuned__kernel_name((uint8_t)tuned__shape_kernel(&j->shape)),
             (unsigned long long)j->shape.rows, (unsigned long long)j->shape.cols,
             tuned_dtype_name(j->shape.dtype), name);
}

typedef struct run {
    const tuned__nvrtc *nvrtc;
    const old_templates *old;
    job *jobs;
    size_t count;
    atomic_size_t next;
} run;

static char *read_file(const char *dir, const char *name)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s.cu", dir, name);
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return NULL;
    char *text = NULL;
    long size = -1;
    if (fseek(f, 0, SEEK_END) == 0 && (size = ftell(f)) >= 0 && fseek(f, 0, SEEK_SET) == 0 &&
        (text = malloc((size_t)size + 1)) != NULL) {
        if (fread(text, 1, (size_t)size, f) != (size_t)size) {
            free(text);
            text = NULL;
        } else {
            text[size] = '\0';
        }
    }
    fclose(f);
    return text;
}

/* The fresh source with each embedded template's text, which codegen
 * copies in verbatim, replaced by its old version; NULL when out of
 * memory. */
static char *old_source(const old_templates *old, const char *fresh)
{
    char *src = strdup(fresh);
    for (size_t i = 0; src != NULL && i < tuned__template_count; i++) {
        const tuned__template *t = &tuned__templates[i];
        char *at = old->text[i] != NULL ? strstr(src, t->text) : NULL;
        if (at == NULL)
            continue;
        size_t head = (size_t)(at - src), new_size = strlen(old->text[i]);
        size_t tail = strlen(at + t->size);
        char *next = malloc(head + new_size + tail + 1);
        if (next != NULL) {
            memcpy(next, src, head);
            memcpy(next + head, old->text[i], new_size);
            memcpy(next + head + new_size, at + t->size, tail + 1);
        }
        free(src);
        src = next;
    }
    return src;
}

/* ---- the kernel in a cubin (ELF64) ---- */

typedef struct kernel_code {
    const unsigned char *text; /* the kernel's machine code */
    size_t text_size;
    unsigned regs;             /* registers per thread */
    size_t frame;              /* stack frame bytes (spills) */
    size_t shared, params;     /* static shared memory, parameter bank bytes */
} kernel_code;

static uint64_t rd(const unsigned char *p, int bytes)
{
    uint64_t v = 0;
    for (int i = bytes - 1; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

/* The register count and stack frame from a kernel's .nv.info section:
 * attributes of a format byte, an id byte and (format 4) a 16-bit size and
 * that many bytes, or (format 3) a 16-bit value, (2) a byte, (1) nothing.
 * REGCOUNT (0x2f) and FRAME_SIZE (0x11) hold a symbol index, then the value. */
static void info_of(const unsigned char *p, size_t n, kernel_code *k)
{
    size_t at = 0;
    while (at + 2 <= n) {
        unsigned fmt = p[at], id = p[at + 1];
        at += 2;
        if (fmt == 4) {
            if (at + 2 > n)
                return;
            size_t size = (size_t)rd(p + at, 2);
            at += 2;
            if (at + size > n)
                return;
            if (size == 8 && id == 0x2f)
                k->regs = (unsigned)rd(p + at + 4, 4);
            if (size == 8 && id == 0x11)
                k->frame = (size_t)rd(p + at + 4, 4);
            at += size;
        } else if (fmt == 3) {
            at += 2;
        } else if (fmt == 2) {
            at += 1;
        } else if (fmt != 1) {
            return;
        }
    }
}

/* The kernel called entry in a cubin (a kind's module may hold helper
 * kernels beside it): its .text.ENTRY section, the register count and
 * frame from .nv.info (and .nv.info.ENTRY), and the sizes of
 * .nv.shared.ENTRY and .nv.constant0.ENTRY. -1 if it is not there, or
 * there twice. */
static bool section_of(const char *sname, const char *prefix, const char *entry)
{
    size_t n = strlen(prefix);
    return strncmp(sname, prefix, n) == 0 && strcmp(sname + n, entry) == 0;
}

static int kernel_of(const tuned__blob *cubin, const char *entry, kernel_code *k)
{
    const unsigned char *b = (const unsigned char *)cubin->data;
    size_t n = cubin->size;
    if (n < 64 || memcmp(b, "\177ELF", 4) != 0 || b[4] != 2)
        return -1;
    uint64_t shoff = rd(b + 0x28, 8);
    unsigned shentsize = (unsigned)rd(b + 0x3A, 2), shnum = (unsigned)rd(b + 0x3C, 2);
    unsigned shstrndx = (unsigned)rd(b + 0x3E, 2);
    if (shentsize < 64 || shoff + (uint64_t)shnum * shentsize > n || shstrndx >= shnum)
        return -1;
    const unsigned char *strsh = b + shoff + (uint64_t)shstrndx * shentsize;
    uint64_t stroff = rd(strsh + 0x18, 8), strsize = rd(strsh + 0x20, 8);
    if (stroff + strsize > n)
        return -1;
    memset(k, 0, sizeof *k);
    int texts = 0;
    for (unsigned i = 0; i < shnum; i++) {
        const unsigned char *sh = b + shoff + (uint64_t)i * shentsize;
        uint64_t nameoff = rd(sh, 4), off = rd(sh + 0x18, 8), size = rd(sh + 0x20, 8);
        unsigned type = (unsigned)rd(sh + 4, 4);
        if (nameoff >= strsize)
            return -1;
        const char *sname = (const char *)b + stroff + nameoff;
        if (section_of(sname, ".text.", entry)) {
            if (off + size > n)
                return -1;
            k->text = b + off;
            k->text_size = (size_t)size;
            texts++;
        } else if (section_of(sname, ".nv.shared.", entry) && type == 8 /* NOBITS */) {
            k->shared = (size_t)size;
        } else if (section_of(sname, ".nv.constant0.", entry)) {
            k->params = (size_t)size;
        } else if ((strcmp(sname, ".nv.info") == 0 || section_of(sname, ".nv.info.", entry)) &&
                   off + size <= n) {
            info_of(b + off, (size_t)size, k);
        }
    }
    return texts == 1 ? 0 : -1;
}

static int compile(const run *r, const char *src, const char *what, tuned__blob *out,
                   char *note, size_t nn)
{
    tuned__err e = {0};
    if (tuned__nvrtc_compile(r->nvrtc, src, what, ARCH, TUNED__NVRTC_CUBIN, out, &e) != 0) {
        snprintf(note, nn, "%s", e.msg);
        return -1;
    }
    return 0;
}

static void compare(const run *r, job *j)
{
    tuned__err e = {0};
    char *fresh = NULL, *old = NULL;
    tuned__blob a = {0}, b = {0};
    j->status = -1;
    if (tuned__source_kernel(&j->config, &j->shape, NULL, &fresh, &e) != 0) {
        snprintf(j->note, sizeof j->note, "new source: %s", e.msg);
        goto done;
    }
    if ((old = old_source(r->old, fresh)) == NULL) {
        snprintf(j->note, sizeof j->note, "old source: out of memory");
        goto done;
    }
    if (compile(r, old, "old", &a, j->note, sizeof j->note) != 0 ||
        compile(r, fresh, "new", &b, j->note, sizeof j->note) != 0)
        goto done;
    kernel_code ka, kb;
    const char *entry = tuned__source_entry(&j->config, &j->shape);
    if (kernel_of(&a, entry, &ka) != 0 || kernel_of(&b, entry, &kb) != 0) {
        snprintf(j->note, sizeof j->note, "a cubin without exactly one %s", entry);
        goto done;
    }
    bool same = ka.text_size == kb.text_size && memcmp(ka.text, kb.text, ka.text_size) == 0 &&
                ka.regs == kb.regs && ka.frame == kb.frame && ka.shared == kb.shared &&
                ka.params == kb.params;
    j->status = same ? 0 : 1;
    /* SASS_DIFF_KEEP=DIR keeps both cubins and sources of every
     * difference, for nvdisasm, and those of the one variant
     * SASS_DIFF_CONFIG names. */
    const char *keep = getenv("SASS_DIFF_KEEP");
    if ((!same || getenv("SASS_DIFF_CONFIG") != NULL) && keep != NULL) {
        char path[4096], label[256];
        job_label(j, label, sizeof label);
        for (char *c = label; *c != '\0'; c++)
            if (*c == ' ')
                *c = '.';
        const tuned__blob *both[2] = {&a, &b};
        for (int i = 0; i < 2; i++) {
            snprintf(path, sizeof path, "%s/%s.%s.cubin", keep, label, i == 0 ? "old" : "new");
            FILE *f = fopen(path, "wb");
            if (f != NULL) {
                fwrite(both[i]->data, 1, both[i]->size, f);
                fclose(f);
            }
            strcpy(path + strlen(path) - strlen("cubin"), "cu");
            if ((f = fopen(path, "w")) != NULL) {
                fputs(i == 0 ? old : fresh, f);
                fclose(f);
            }
        }
    }
    if (!same)
        snprintf(j->note, sizeof j->note,
                 "old %zu instructions, %u registers, %zu B frame, %zu B shared, %zu B params; "
                 "new %zu instructions, %u registers, %zu B frame, %zu B shared, %zu B params%s",
                 ka.text_size / 16, ka.regs, ka.frame, ka.shared, ka.params, kb.text_size / 16,
                 kb.regs, kb.frame, kb.shared, kb.params,
                 ka.text_size == kb.text_size && ka.regs == kb.regs ? " (same size, other bytes)"
                                                                    : "");
done:
    tuned__blob_free(&a);
    tuned__blob_free(&b);
    free(fresh);
    free(old);
}

static void *worker(void *arg)
{
    run *r = arg;
    for (;;) {
        size_t i = atomic_fetch_add(&r->next, 1);
        if (i >= r->count)
            return NULL;
        compare(r, &r->jobs[i]);
    }
}

enum { KIND_ROWS, KIND_CLUSTER, KIND_STASH, KIND_GRID, KIND_TMA, KIND_COUNT };
static const char *const kind_names[KIND_COUNT] = {"rows", "cluster", "stash", "grid", "tma"};

static int kind_of(const tuned__config *c)
{
    if (c->family == TUNED__FAMILY_TMA)
        return KIND_TMA;
    if (c->grid > 1)
        return KIND_GRID;
    return c->stash > 0 ? KIND_STASH : c->cluster > 1 ? KIND_CLUSTER : KIND_ROWS;
}

/* Up to per_kind configs of each kind of sp, evenly spaced through the
 * space's enumeration order, appended to jobs. */
static size_t sample(const tuned__space *sp, size_t per_kind, job *jobs, size_t n, size_t cap)
{
    for (int kind = 0; kind < KIND_COUNT; kind++) {
        size_t total = 0;
        for (size_t i = 0; i < sp->count; i++)
            total += kind_of(&sp->valid[i]) == kind;
        /* the configs of this kind numbered seen = 0, 1, ...: taken at
         * seen = t * total / per_kind for t = 0, 1, ... */
        size_t seen = 0, taken = 0;
        for (size_t i = 0; i < sp->count && n < cap && taken < per_kind; i++) {
            if (kind_of(&sp->valid[i]) != kind)
                continue;
            if (seen == taken * total / per_kind) {
                jobs[n].shape = sp->shape;
                jobs[n].config = sp->valid[i];
                n++;
                taken++;
            }
            seen++;
        }
    }
    return n;
}

/* j from "[KERNEL:]ROWSxCOLS[:PARAMS] DTYPE CONFIG"; 0, or -1 with a
 * message. */
static int one_job(const char *text, job *j)
{
    /* config: longer than any config, so a bad one is refused, not cut */
    char shape[192], dtype[16], config[128];
    tuned__err e = {0};
    memset(j, 0, sizeof *j);
    if (sscanf(text, "%191s %15s %127s", shape, dtype, config) != 3 ||
        probe_parse_shape(shape, &j->shape) != 0 || tuned_dtype_parse(dtype, &j->shape.dtype) != 0) {
        fprintf(stderr,
                "sass_diff: SASS_DIFF_CONFIG '%s': want [KERNEL:]ROWSxCOLS[:PARAMS] DTYPE CONFIG\n",
                text);
        return -1;
    }
    if (tuned__config_parse(config, &j->config, &e) != 0) {
        fprintf(stderr, "sass_diff: SASS_DIFF_CONFIG: %s\n", e.msg);
        return -1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 2 || argc > 4) {
        fprintf(stderr, "usage: sass_diff OLD_TEMPLATE_DIR [PER_KIND [THREADS]]\n");
        return 2;
    }
    size_t per_kind = argc > 2 ? (size_t)strtoul(argv[2], NULL, 10) : 4;
    int threads = argc > 3 ? atoi(argv[3]) : 2;
    if (threads < 1 || threads > 64)
        threads = 1;
    old_templates old = {{NULL}};
    size_t found = 0;
    if (tuned__template_count > sizeof old.text / sizeof old.text[0]) {
        fprintf(stderr, "sass_diff: %zu templates, more than this tool holds\n",
                tuned__template_count);
        return 2;
    }
    for (size_t i = 0; i < tuned__template_count; i++)
        found += (old.text[i] = read_file(argv[1], tuned__templates[i].name)) != NULL;
    if (found == 0) {
        fprintf(stderr, "sass_diff: no old template in %s\n", argv[1]);
        return 2;
    }
    tuned__err e = {0};
    tuned__nvrtc *nvrtc = NULL;
    if (tuned__nvrtc_load(&nvrtc, &e) != 0) {
        fprintf(stderr, "sass_diff: %s\n", e.msg);
        return 2;
    }
    /* Aligned and ragged rows, few and many, short and long (64x262144
     * fp32 is where the space holds stashes). */
    static const uint64_t shapes[][2] = {{4096, 32000}, {1024, 1024},   {32, 128},
                                         {1, 262144},   {8192, 128256}, {65536, 128},
                                         {64, 262144},  {1024, 50257}};
    job *jobs = calloc(MAX_CONFIGS, sizeof *jobs);
    if (jobs == NULL)
        return 2;
    size_t n = 0;
    const char *one = getenv("SASS_DIFF_CONFIG");
    if (one != NULL) {
        if (one_job(one, &jobs[0]) != 0) {
            free(jobs);
            return 2;
        }
        n = 1;
    }
    for (size_t i = 0; one == NULL && i < sizeof shapes / sizeof shapes[0]; i++)
        for (int dt = TUNED_FP16; dt <= TUNED_FP32; dt++)
            for (size_t ki = 0; ki < tuned__kind_count(); ki++) {
                unsigned k = tuned__kind_at(ki)->id;
                tuned__shape s = {(tuned_dtype)dt, shapes[i][0], shapes[i][1], (uint8_t)k, 0};
                tuned__space sp;
                if (tuned__space_init(&sp, &s, ARCH, SMS, &e) != 0) {
                    fprintf(stderr, "sass_diff: space %s %llux%llu %s: %s\n",
                            tuned__kernel_name((uint8_t)k), (unsigned long long)s.rows,
                            (unsigned long long)s.cols, tuned_dtype_name(s.dtype), e.msg);
                    continue;
                }
                n = sample(&sp, per_kind, jobs, n, MAX_CONFIGS);
                tuned__space_free(&sp);
            }
    /* SASS_DIFF_ONLY=TEXT: only the configs whose "KERNEL ROWSxCOLS DTYPE
     * CONFIG" contains TEXT. */
    const char *only = getenv("SASS_DIFF_ONLY");
    if (only != NULL) {
        size_t kept = 0;
        for (size_t i = 0; i < n; i++) {
            char line[256];
            job_label(&jobs[i], line, sizeof line);
            if (strstr(line, only) != NULL)
                jobs[kept++] = jobs[i];
        }
        n = kept;
    }
    run r = {.nvrtc = nvrtc, .old = &old, .jobs = jobs, .count = n};
    atomic_init(&r.next, 0);
    pthread_t tid[64];
    int started = 0;
    for (int t = 0; t < threads; t++)
        if (pthread_create(&tid[t], NULL, worker, &r) == 0)
            started++;
    if (started == 0)
        worker(&r);
    for (int t = 0; t < started; t++)
        pthread_join(tid[t], NULL);

    size_t same[KIND_COUNT] = {0}, all[KIND_COUNT] = {0}, differ = 0, failed = 0;
    for (size_t i = 0; i < n; i++) {
        const job *j = &jobs[i];
        int kind = kind_of(&j->config);
        all[kind]++;
        if (j->status == 0) {
            same[kind]++;
            continue;
        }
        char label[256];
        job_label(j, label, sizeof label);
        printf("%s %s: %s\n", j->status > 0 ? "DIFFERS" : "FAILED", label, j->note);
        differ += j->status > 0;
        failed += j->status < 0;
    }
    size_t identical = 0;
    for (int kind = 0; kind < KIND_COUNT; kind++) {
        printf("%-8s %zu of %zu identical\n", kind_names[kind], same[kind], all[kind]);
        identical += same[kind];
    }
    printf("%zu configs: %zu identical machine code, %zu differ, %zu failed\n", n, identical,
           differ, failed);
    free(jobs);
    for (size_t i = 0; i < tuned__template_count; i++)
        free(old.text[i]);
    tuned__nvrtc_unload(nvrtc);
    return differ || failed ? 1 : 0;
}
