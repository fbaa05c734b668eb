/* nvrtc.c: dlopen of NVRTC and the compile of one source.
 *
 * Every nvrtcResult is translated here, with the program's name and the
 * compiler log, so NVRTC's codes never leak upward. The function table is
 * filled once at load and only read afterwards, so compiles may run on
 * many threads at once (NVRTC itself is thread-safe per program). */
#include "src/codegen/nvrtc.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <nvrtc.h>

#include "src/common/hash.h"
#include "tuned.h"

struct tuned__nvrtc {
    void *lib;
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

int tuned__nvrtc_load(tuned__nvrtc **out, tuned__err *e)
{
    void *lib = NULL;
    char reasons[1024] = "";
    for (size_t i = 0; i < sizeof nvrtc_sonames / sizeof nvrtc_sonames[0] && lib == NULL; i++) {
        /* NODELETE: NVRTC's runtime keeps allocations in its own globals;
         * unmapping it at unload would turn them into leaks. */
        lib = dlopen(nvrtc_sonames[i], RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
        if (lib == NULL) {
            const char *why = dlerror();
            size_t used = strlen(reasons);
            snprintf(reasons + used, sizeof reasons - used, "%s%s", used ? "; " : "",
                     why ? why : nvrtc_sonames[i]);
        }
    }
    if (lib == NULL)
        return tuned__errf(e, TUNED_ENONVRTC,
                           "nvrtc: no NVRTC library found (%s); install the CUDA toolkit's NVRTC "
                           "or add its lib64 folder to LD_LIBRARY_PATH",
                           reasons);
    tuned__nvrtc *n = calloc(1, sizeof *n);
    if (n == NULL) {
        dlclose(lib);
        return tuned__errf(e, TUNED_ENOMEM, "nvrtc: out of memory");
    }
    n->lib = lib;
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
