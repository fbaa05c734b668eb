/* nvrtc.c: finding and dlopen'ing NVRTC, and the compile of one source.
 *
 * NVRTC comes from the dynamic loader, a CUDA toolkit, or the nvidia-*
 * wheels a PyTorch install brings (the search is in nvrtc.h). The
 * templates include no header, so no CUDA include directory is needed at
 * run time.
 *
 * Every nvrtcResult is translated here, with the program's name and the
 * compiler log, so NVRTC's codes never leak upward. The function table is
 * filled once at load and only read afterwards, so compiles may run on
 * many threads at once (NVRTC itself is thread-safe per program). */
#include "src/codegen/nvrtc.h"

#include <dirent.h>
#include <dlfcn.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <nvrtc.h>

#include "src/common/hash.h"
#include "tuned.h"

struct tuned__nvrtc {
    void *lib;
    char path[PATH_MAX]; /* what was dlopen'ed: a path, or a soname the loader found */
    int major, minor;
    __typeof__(&nvrtcGetErrorString) GetErrorString;
    __typeof__(&nvrtcVersion) Version;
    __typeof__(&nvrtcCreateProgram) CreateProgram;
    __typeof__(&nvrtcCompileProgram) CompileProgram;
    __typeof__(&nvrtcDestroyProgram) DestroyProgram;
    __typeof__(&nvrtcGetProgramLogSize) GetProgramLogSize;
    __typeof__(&nvrtcGetProgramLog) GetProgramLog;
    __typeof__(&nvrtcGetCUBINSize) GetCUBINSize;
    __typeof__(&nvrtcGetCUBIN) GetCUBIN;
    __typeof__(&nvrtcGetPTXSize) GetPTXSize;
    __typeof__(&nvrtcGetPTX) GetPTX;
};

static const char *const nvrtc_sonames[] = {"libnvrtc.so.13", "libnvrtc.so.12"};

/* Where the nvidia-* wheels (which torch installs) keep NVRTC, relative to
 * a site-packages directory: CUDA 13's nvidia-cuda-nvrtc, then CUDA 12's
 * nvidia-cuda-nvrtc-cu12. */
static const char *const wheel_libs[] = {
    "nvidia/cu13/lib/libnvrtc.so.13",
    "nvidia/cuda_nvrtc/lib/libnvrtc.so.12",
};

/* What the search has said so far, for the message when nothing loads. */
typedef struct search_log {
    char text[1400];
} search_log;

static void log_add(search_log *l, const char *fmt, ...) TUNED__PRINTF(2, 3);
static void log_add(search_log *l, const char *fmt, ...)
{
    size_t used = strlen(l->text);
    if (used + 3 >= sizeof l->text)
        return;
    if (used > 0) {
        memcpy(l->text + used, "; ", 3);
        used += 2;
    }
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(l->text + used, sizeof l->text - used, fmt, ap);
    va_end(ap);
}

static void *try_open(const char *name, search_log *l)
{
    /* NODELETE: NVRTC's runtime keeps allocations in its own globals;
     * unmapping it at unload would turn them into leaks. */
    void *lib = dlopen(name, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
    if (lib == NULL) {
        const char *why = dlerror();
        log_add(l, "%s", why ? why : name);
    }
    return lib;
}

/* name/<soname> for each soname where that file exists; a file that is
 * absent is not worth a line of the message, one that fails to load is. */
static void *try_dir(const char *dir, char *path, size_t n, search_log *l)
{
    for (size_t i = 0; i < sizeof nvrtc_sonames / sizeof nvrtc_sonames[0]; i++) {
        snprintf(path, n, "%s/%s", dir, nvrtc_sonames[i]);
        if (access(path, F_OK) != 0)
            continue;
        void *lib = try_open(path, l);
        if (lib != NULL)
            return lib;
    }
    return NULL;
}

void tuned__nvrtc_search_from_env(tuned__nvrtc_search *s)
{
    memset(s, 0, sizeof *s);
    const char *v = getenv("TUNED_NVRTC_PATH");
    s->explicit_path = v != NULL && *v != '\0' ? v : NULL;
    s->loader = true;
    v = getenv("TUNED_TOOLKIT_ROOT");
    s->toolkit_root = v != NULL && *v != '\0' ? v : "/usr/local/cuda";
    v = getenv("TUNED_SITE_PACKAGES");
    s->site_packages = v != NULL && *v != '\0' ? v : NULL;
}

/* The search of tuned__nvrtc_search's comment (nvrtc.h); the library and
 * its path, or NULL with what was tried in l. */
static void *search(const tuned__nvrtc_search *s, char *path, size_t n, search_log *l)
{
    void *lib = NULL;
    if (s->explicit_path != NULL) {
        /* An explicit choice: nothing else is tried. */
        struct stat st;
        if (stat(s->explicit_path, &st) == 0 && S_ISDIR(st.st_mode)) {
            lib = try_dir(s->explicit_path, path, n, l);
            if (lib == NULL)
                log_add(l, "no libnvrtc.so.13 or .12 in %s ($TUNED_NVRTC_PATH)",
                        s->explicit_path);
            return lib;
        }
        snprintf(path, n, "%s", s->explicit_path);
        lib = try_open(path, l);
        if (lib == NULL)
            log_add(l, "(that is $TUNED_NVRTC_PATH)");
        return lib;
    }
    if (s->loader)
        for (size_t i = 0; i < sizeof nvrtc_sonames / sizeof nvrtc_sonames[0]; i++) {
            snprintf(path, n, "%s", nvrtc_sonames[i]);
            if ((lib = try_open(path, l)) != NULL)
                return lib;
        }
    if (s->toolkit_root != NULL) {
        static const char *const subdirs[] = {"lib64", "lib"};
        for (size_t i = 0; i < 2 && lib == NULL; i++) {
            char dir[PATH_MAX];
            snprintf(dir, sizeof dir, "%s/%s", s->toolkit_root, subdirs[i]);
            lib = try_dir(dir, path, n, l);
        }
        if (lib != NULL)
            return lib;
        log_add(l, "none in %s/lib64 or %s/lib (the CUDA toolkit)", s->toolkit_root,
                s->toolkit_root);
    }
    if (s->site_packages == NULL) {
        log_add(l, "no Python directories to look in for the nvidia-cuda-nvrtc wheel "
                   "($TUNED_SITE_PACKAGES, which the tuned Python package sets, is unset)");
        return NULL;
    }
    int dirs = 0;
    for (const char *p = s->site_packages;;) {
        const char *end = strchr(p, ':');
        size_t len = end != NULL ? (size_t)(end - p) : strlen(p);
        if (len > 0) {
            dirs++;
            for (size_t i = 0; i < sizeof wheel_libs / sizeof wheel_libs[0]; i++) {
                if (snprintf(path, n, "%.*s/%s", (int)len, p, wheel_libs[i]) >= (int)n)
                    continue;
                if (access(path, F_OK) == 0 && (lib = try_open(path, l)) != NULL)
                    return lib;
            }
        }
        if (end == NULL)
            break;
        p = end + 1;
    }
    log_add(l, "no nvidia-cuda-nvrtc wheel in the %d director%s of $TUNED_SITE_PACKAGES", dirs,
            dirs == 1 ? "y" : "ies");
    return NULL;
}

/* NVRTC loads its builtins (libnvrtc-builtins.so.MAJOR.MINOR) with dlopen
 * by soname at its first compile; a libnvrtc found by path (a wheel's, a
 * toolkit's not on the loader's path) would not find them beside it, as
 * a child `tuned` with no torch in the process did not ("Make sure that
 * libnvrtc-builtins.so.13.0 is installed"). Loaded here by path from the
 * library's directory, NVRTC's own dlopen finds them already loaded. A
 * failure is left to NVRTC's own message at the compile. */
static void preload_builtins(const char *lib_path)
{
    const char *slash = strrchr(lib_path, '/');
    if (slash == NULL)
        return; /* found by the loader, which finds the builtins too */
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%.*s", (int)(slash - lib_path), lib_path);
    DIR *d = opendir(dir);
    if (d == NULL)
        return;
    struct dirent *ent;
    while ((ent = readdir(d)) != NULL) {
        if (strncmp(ent->d_name, "libnvrtc-builtins.so.", 21) != 0)
            continue;
        char path[PATH_MAX];
        if (snprintf(path, sizeof path, "%s/%s", dir, ent->d_name) >= (int)sizeof path)
            continue;
        /* NODELETE, as NVRTC itself: it keeps it for the process. */
        if (dlopen(path, RTLD_NOW | RTLD_GLOBAL | RTLD_NODELETE) == NULL)
            (void)dlerror();
    }
    closedir(d);
}

int tuned__nvrtc_load(tuned__nvrtc **out, tuned__err *e)
{
    tuned__nvrtc_search s;
    tuned__nvrtc_search_from_env(&s);
    return tuned__nvrtc_load_from(&s, out, e);
}

int tuned__nvrtc_load_from(const tuned__nvrtc_search *s, tuned__nvrtc **out, tuned__err *e)
{
    char path[PATH_MAX];
    search_log l = {.text = ""};
    void *lib = search(s, path, sizeof path, &l);
    if (lib == NULL)
        return tuned__errf(e, TUNED_ENONVRTC,
                           "nvrtc: no NVRTC library found (%s); install it: `pip install "
                           "nvidia-cuda-nvrtc` (CUDA 13; nvidia-cuda-nvrtc-cu12 for CUDA 12) or "
                           "the CUDA toolkit, or name it: TUNED_TOOLKIT_ROOT=/path/to/cuda or "
                           "TUNED_NVRTC_PATH=/path/to/libnvrtc.so.13",
                           l.text);
    tuned__nvrtc *n = calloc(1, sizeof *n);
    if (n == NULL) {
        dlclose(lib);
        return tuned__errf(e, TUNED_ENOMEM, "nvrtc: out of memory");
    }
    n->lib = lib;
    snprintf(n->path, sizeof n->path, "%s", path);
    preload_builtins(path);
    /* dlsym returns void *; going through memcpy keeps ISO C quiet about
     * object-to-function pointer conversion. */
#define RESOLVE(field, symbol)                                                                  \
    do {                                                                                        \
        void *sym = dlsym(lib, symbol);                                                         \
        if (sym == NULL) {                                                                      \
            tuned__nvrtc_unload(n);                                                             \
            return tuned__errf(e, TUNED_ENONVRTC, "nvrtc: %s lacks %s", "libnvrtc", symbol);    \
        }                                                                                       \
        memcpy(&n->field, &sym, sizeof sym);                                                    \
    } while (0)
    RESOLVE(GetErrorString, "nvrtcGetErrorString");
    RESOLVE(Version, "nvrtcVersion");
    RESOLVE(CreateProgram, "nvrtcCreateProgram");
    RESOLVE(CompileProgram, "nvrtcCompileProgram");
    RESOLVE(DestroyProgram, "nvrtcDestroyProgram");
    RESOLVE(GetProgramLogSize, "nvrtcGetProgramLogSize");
    RESOLVE(GetProgramLog, "nvrtcGetProgramLog");
    RESOLVE(GetCUBINSize, "nvrtcGetCUBINSize");
    RESOLVE(GetCUBIN, "nvrtcGetCUBIN");
    RESOLVE(GetPTXSize, "nvrtcGetPTXSize");
    RESOLVE(GetPTX, "nvrtcGetPTX");
#undef RESOLVE
    if (n->Version(&n->major, &n->minor) != NVRTC_SUCCESS) {
        tuned__nvrtc_unload(n);
        return tuned__errf(e, TUNED_ENONVRTC, "nvrtc: nvrtcVersion failed");
    }
    *out = n;
    return 0;
}

void tuned__nvrtc_unload(tuned__nvrtc *n)
{
    if (n == NULL)
        return;
    dlclose(n->lib);
    free(n);
}

const char *tuned__nvrtc_path(const tuned__nvrtc *n)
{
    return n->path;
}

void tuned__nvrtc_version(const tuned__nvrtc *n, int *major, int *minor)
{
    *major = n->major;
    *minor = n->minor;
}

void tuned__blob_free(tuned__blob *b)
{
    if (b != NULL) {
        free(b->data);
        b->data = NULL;
        b->size = 0;
    }
}

#define STD_OPTION "--std=c++17"

static void arch_option(int arch, int output, char *buf, size_t n)
{
    snprintf(buf, n, "--gpu-architecture=%s_%d", output == TUNED__NVRTC_PTX ? "compute" : "sm",
             arch);
}

uint64_t tuned__nvrtc_cache_key(const tuned__nvrtc *n, const char *source, int arch, int output)
{
    char opts[128];
    arch_option(arch, output, opts, sizeof opts);
    size_t len = strlen(opts);
    snprintf(opts + len, sizeof opts - len, " %s nvrtc %d.%d", STD_OPTION, n->major, n->minor);
    uint64_t h = tuned__fnv1a64(source, strlen(source), TUNED__FNV_SEED);
    return tuned__fnv1a64(opts, strlen(opts), h);
}

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* The program's log, malloc'd (an empty string when there is none). */
static char *program_log(const tuned__nvrtc *n, nvrtcProgram prog)
{
    size_t size = 0;
    if (n->GetProgramLogSize(prog, &size) != NVRTC_SUCCESS || size == 0)
        return calloc(1, 1);
    char *log = malloc(size + 1);
    if (log == NULL)
        return NULL;
    if (n->GetProgramLog(prog, log) != NVRTC_SUCCESS)
        log[0] = '\0';
    log[size] = '\0';
    /* NVRTC logs end in newlines; the message is one line of context
     * followed by the log, so drop the trailing ones. */
    for (size_t len = strlen(log); len > 0 && (log[len - 1] == '\n' || log[len - 1] == '\r');)
        log[--len] = '\0';
    return log;
}

int tuned__nvrtc_compile(const tuned__nvrtc *n, const char *source, const char *name, int arch,
                         int output, tuned__blob *out, tuned__err *e)
{
    memset(out, 0, sizeof *out);
    if (arch < 50 || arch > 200)
        return tuned__errf(e, TUNED_EINVAL, "nvrtc: %s: architecture %d out of range", name, arch);
    char arch_opt[48];
    arch_option(arch, output, arch_opt, sizeof arch_opt);
    const char *opts[] = {arch_opt, STD_OPTION};
    double t0 = now_ms();
    nvrtcProgram prog;
    nvrtcResult r = n->CreateProgram(&prog, source, name, 0, NULL, NULL);
    if (r != NVRTC_SUCCESS)
        return tuned__errf(e, r == NVRTC_ERROR_OUT_OF_MEMORY ? TUNED_ENOMEM : TUNED_ECOMPILE,
                           "nvrtc: %s: create program: %s", name, n->GetErrorString(r));
    r = n->CompileProgram(prog, (int)(sizeof opts / sizeof opts[0]), opts);
    if (r != NVRTC_SUCCESS) {
        char *log = program_log(n, prog);
        int rc = tuned__errf(e, TUNED_ECOMPILE, "nvrtc: %s for %s: %s: %s", name, strchr(arch_opt, '=') + 1,
                             n->GetErrorString(r), log != NULL ? log : "(no log: out of memory)");
        free(log);
        n->DestroyProgram(&prog);
        return rc;
    }
    size_t size = 0;
    r = output == TUNED__NVRTC_PTX ? n->GetPTXSize(prog, &size) : n->GetCUBINSize(prog, &size);
    char *data = r == NVRTC_SUCCESS ? malloc(size + 1) : NULL;
    if (r == NVRTC_SUCCESS && data == NULL) {
        n->DestroyProgram(&prog);
        return tuned__errf(e, TUNED_ENOMEM, "nvrtc: %s: out of memory for %zu bytes", name, size);
    }
    if (r == NVRTC_SUCCESS)
        r = output == TUNED__NVRTC_PTX ? n->GetPTX(prog, data) : n->GetCUBIN(prog, data);
    n->DestroyProgram(&prog);
    if (r != NVRTC_SUCCESS) {
        free(data);
        return tuned__errf(e, TUNED_ECOMPILE, "nvrtc: %s: fetching the %s: %s", name,
                           output == TUNED__NVRTC_PTX ? "PTX" : "cubin", n->GetErrorString(r));
    }
    data[size] = '\0';
    out->data = data;
    out->size = output == TUNED__NVRTC_PTX ? strlen(data) : size;
    out->compile_ms = now_ms() - t0;
    return 0;
}
