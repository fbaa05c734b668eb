/* sass_diff.c: proves that a change to the kernel templates left the
 * machine code alone. For each shape and dtype it takes the tuner's space
 * (sm_90, 132 SMs) and a deterministic sample of its configs, evenly spaced
 * within each kind (rows, clusters, grid splits, tma), builds each variant
 * twice, from the templates this build embeds and from an old set of
 * templates read from a folder (with the define block the old codegen
 * wrote, frozen below), compiles both to sm_90 cubins with NVRTC, and
 * compares the kernels' machine code byte for byte (the .text section of
 * the cubin: the SASS itself, which needs no disassembler to compare),
 * their register counts and their shared and parameter memory. It prints
 * every config that differs, with both instruction counts, and a summary.
 *
 *   sass_diff OLD_TEMPLATE_DIR [PER_KIND [THREADS]]
 *
 * PER_KIND (default 12) caps the configs of each kind per space; THREADS
 * (default 2) compiles in parallel. Exits 1 when any kernel differs or a
 * compile fails. bench/sass-diff.sh fetches the old templates from git and
 * runs it. Not installed. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "src/codegen/nvrtc.h"
#include "src/codegen/source.h"
#include "src/tuner/space.h"

#define ARCH 90
#define SMS 132
#define MAX_CONFIGS 4096

/* The templates of the old set, read whole. */
typedef struct old_templates {
    char *common, *rows, *staged;
} old_templates;

/* One config's comparison: filled by a worker, printed by main. */
typedef struct job {
    tuned__shape shape;
    tuned__config config;
    int status; /* 0 identical, 1 different, -1 failed */
    char note[512];
} job;

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

/* The source the codegen of commit e14ad99 generated for c and s: its
 * define block, verbatim, then softmax_common.cu and the family's template.
 * The validity checks are the new codegen's (it ran first and accepted c). */
static char *old_source(const old_templates *old, const tuned__config *c, const tuned__shape *s)
{
    char name[TUNED__CONFIG_TEXT], defines[640];
    tuned__config_format(c, name, sizeof name);
    const char *body;
    if (c->family == TUNED__FAMILY_TMA) {
        snprintf(defines, sizeof defines,
                 "// tuned softmax variant %s for %s x %llu columns\n"
                 "#define T_DTYPE %d\n#define T_WARPS %u\n#define T_CLUSTER %u\n#define T_STAGES %u\n"
                 "#define T_STAGE_BYTES %zu\n#define T_ST %u\n",
                 name, tuned_dtype_name(s->dtype), (unsigned long long)s->cols, (int)s->dtype,
                 c->warps, c->cluster, c->stages, tuned__source_stage_bytes(c, s), c->st);
        body = old->staged;
    } else {
        bool head_free = tuned__source_head_free(c, s, NULL);
        uint64_t iters = tuned__config_iters(c, s, head_free);
        snprintf(defines, sizeof defines,
                 "// tuned softmax variant %s for %s x %llu columns\n"
                 "#define T_DTYPE %d\n#define T_WARPS %u\n#define T_ROWS %u\n#define T_CLUSTER %u\n"
                 "#define T_GRID %u\n#define T_GRID_SLOTS %d\n"
                 "#define T_MIN_BLOCKS %u\n#define T_VEC %u\n#define T_ITERS %llu\n#define T_COLS %llu\n"
                 "#define T_HEAD_FREE %d\n#define T_LD %u\n"
                 "#define T_ST %u\n#define T_REG_PACKED %d\n#define T_EXP16 %d\n#define T_FUSED %d\n"
                 "#define T_PLANT_BUG %d\n",
                 name, tuned_dtype_name(s->dtype), (unsigned long long)s->cols, (int)s->dtype,
                 c->warps, c->rows, c->cluster, c->grid > 1 ? c->grid : 1u, TUNED__GRID_SLOTS,
                 c->minb, c->vec, (unsigned long long)iters, (unsigned long long)s->cols, head_free,
                 c->ld, c->st, c->reg != TUNED__REG_F32, c->reg == TUNED__REG_EX,
                 c->red == TUNED__RED_FUSED, 0);
        body = old->rows;
    }
    size_t dl = strlen(defines), cl = strlen(old->common), bl = strlen(body);
    char *src = malloc(dl + cl + bl + 1);
    if (src == NULL)
        return NULL;
    memcpy(src, defines, dl);
    memcpy(src + dl, old->common, cl);
    memcpy(src + dl + cl, body, bl + 1);
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

/* The one kernel of a cubin: its .text.NAME section, the register count
 * and frame from .nv.info (and .nv.info.NAME), and the sizes of .nv.shared.NAME and
 * .nv.constant0.NAME. -1 if it is not there, or there twice. */
static int kernel_of(const tuned__blob *cubin, kernel_code *k)
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
        if (strncmp(sname, ".text.", 6) == 0) {
            if (off + size > n)
                return -1;
            k->text = b + off;
            k->text_size = (size_t)size;
            texts++;
        } else if (strncmp(sname, ".nv.shared.", 11) == 0 && type == 8 /* NOBITS */) {
            k->shared = (size_t)size;
        } else if (strncmp(sname, ".nv.constant0.", 14) == 0) {
            k->params = (size_t)size;
        } else if (strncmp(sname, ".nv.info", 8) == 0 && off + size <= n) {
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
    char name[TUNED__CONFIG_TEXT];
    tuned__config_format(&j->config, name, sizeof name);
    tuned__err e = {0};
    char *fresh = NULL, *old = NULL;
    tuned__blob a = {0}, b = {0};
    j->status = -1;
    if (tuned__source_softmax(&j->config, &j->shape, NULL, &fresh, &e) != 0) {
        snprintf(j->note, sizeof j->note, "new source: %s", e.msg);
        goto done;
    }
    if ((old = old_source(r->old, &j->config, &j->shape)) == NULL) {
        snprintf(j->note, sizeof j->note, "old source: out of memory");
        goto done;
    }
    if (compile(r, old, "old", &a, j->note, sizeof j->note) != 0 ||
        compile(r, fresh, "new", &b, j->note, sizeof j->note) != 0)
        goto done;
    kernel_code ka, kb;
    if (kernel_of(&a, &ka) != 0 || kernel_of(&b, &kb) != 0) {
        snprintf(j->note, sizeof j->note, "a cubin without exactly one kernel");
        goto done;
    }
    bool same = ka.text_size == kb.text_size && memcmp(ka.text, kb.text, ka.text_size) == 0 &&
                ka.regs == kb.regs && ka.frame == kb.frame && ka.shared == kb.shared &&
                ka.params == kb.params;
    j->status = same ? 0 : 1;
    /* SASS_DIFF_KEEP=DIR keeps both cubins and sources of every
     * difference, for nvdisasm. */
    const char *keep = getenv("SASS_DIFF_KEEP");
    if (!same && keep != NULL) {
        char path[4096];
        const tuned__blob *both[2] = {&a, &b};
        for (int i = 0; i < 2; i++) {
            snprintf(path, sizeof path, "%s/%llux%llu.%s.%s.%s.cubin", keep,
                     (unsigned long long)j->shape.rows, (unsigned long long)j->shape.cols,
                     tuned_dtype_name(j->shape.dtype), name, i == 0 ? "old" : "new");
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

enum { KIND_ROWS, KIND_CLUSTER, KIND_GRID, KIND_TMA, KIND_COUNT };
static const char *const kind_names[KIND_COUNT] = {"rows", "cluster", "grid", "tma"};

static int kind_of(const tuned__config *c)
{
    if (c->family == TUNED__FAMILY_TMA)
        return KIND_TMA;
    return c->grid > 1 ? KIND_GRID : c->cluster > 1 ? KIND_CLUSTER : KIND_ROWS;
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

int main(int argc, char **argv)
{
    if (argc < 2 || argc > 4) {
        fprintf(stderr, "usage: sass_diff OLD_TEMPLATE_DIR [PER_KIND [THREADS]]\n");
        return 2;
    }
    size_t per_kind = argc > 2 ? (size_t)strtoul(argv[2], NULL, 10) : 12;
    int threads = argc > 3 ? atoi(argv[3]) : 2;
    if (threads < 1 || threads > 64)
        threads = 1;
    old_templates old = {read_file(argv[1], "softmax_common"), read_file(argv[1], "softmax_rows"),
                         read_file(argv[1], "softmax_staged")};
    if (old.common == NULL || old.rows == NULL || old.staged == NULL) {
        fprintf(stderr, "sass_diff: cannot read the old templates in %s\n", argv[1]);
        return 2;
    }
    tuned__err e = {0};
    tuned__nvrtc *nvrtc = NULL;
    if (tuned__nvrtc_load(&nvrtc, &e) != 0) {
        fprintf(stderr, "sass_diff: %s\n", e.msg);
        return 2;
    }
    static const uint64_t shapes[][2] = {{4096, 32000}, {1024, 1024},  {32, 128},
                                         {1, 262144},   {8192, 128256}, {65536, 128}};
    job *jobs = calloc(MAX_CONFIGS, sizeof *jobs);
    if (jobs == NULL)
        return 2;
    size_t n = 0;
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        for (int dt = TUNED_FP16; dt <= TUNED_FP32; dt++) {
            tuned__shape s = {(tuned_dtype)dt, shapes[i][0], shapes[i][1], TUNED__KERNEL_SOFTMAX};
            tuned__space sp;
            if (tuned__space_init(&sp, &s, ARCH, SMS, &e) != 0) {
                fprintf(stderr, "sass_diff: space %llux%llu %s: %s\n",
                        (unsigned long long)s.rows, (unsigned long long)s.cols,
                        tuned_dtype_name(s.dtype), e.msg);
                continue;
            }
            n = sample(&sp, per_kind, jobs, n, MAX_CONFIGS);
            tuned__space_free(&sp);
        }
    /* SASS_DIFF_ONLY=TEXT: only the configs whose "ROWSxCOLS DTYPE CONFIG"
     * contains TEXT. */
    const char *only = getenv("SASS_DIFF_ONLY");
    if (only != NULL) {
        size_t kept = 0;
        for (size_t i = 0; i < n; i++) {
            char name[TUNED__CONFIG_TEXT], line[256];
            tuned__config_format(&jobs[i].config, name, sizeof name);
            snprintf(line, sizeof line, "%llux%llu %s %s", (unsigned long long)jobs[i].shape.rows,
                     (unsigned long long)jobs[i].shape.cols, tuned_dtype_name(jobs[i].shape.dtype),
                     name);
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
        char name[TUNED__CONFIG_TEXT];
        tuned__config_format(&j->config, name, sizeof name);
        printf("%s %llux%llu %s %s: %s\n", j->status > 0 ? "DIFFERS" : "FAILED",
               (unsigned long long)j->shape.rows, (unsigned long long)j->shape.cols,
               tuned_dtype_name(j->shape.dtype), name, j->note);
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
    free(old.common);
    free(old.rows);
    free(old.staged);
    tuned__nvrtc_unload(nvrtc);
    return differ || failed ? 1 : 0;
}
