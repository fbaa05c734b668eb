/* cublas.c: finding and dlopen'ing cuBLAS, and its GEMM (see cublas.h). */
#include "src/driver/cublas.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* cuBLAS's ABI values (cublas_api.h, library_types.h). */
#define CUBLAS_STATUS_SUCCESS 0
#define CUDA_R_32F 0
#define CUDA_R_16F 2
#define CUDA_R_16BF 14
#define CUBLAS_COMPUTE_32F 68
#define CUBLAS_GEMM_DEFAULT (-1)

static const char *const sonames[][2] = {{"libcublas.so.13", "libcublasLt.so.13"},
                                         {"libcublas.so.12", "libcublasLt.so.12"}};
/* The wheels' directories under a site-packages directory: CUDA 13's
 * (torch's nvidia-cublas), then CUDA 12's. */
static const char *const wheel_dirs[] = {"nvidia/cu13/lib", "nvidia/cublas/lib"};

typedef struct tried {
    char text[768];
} tried;

static void note(tried *t, const char *what)
{
    size_t at = strlen(t->text);
    snprintf(t->text + at, sizeof t->text - at, "%s%s", at > 0 ? "; " : "", what);
}

/* Opens cuBLAS (and first its Lt beside it) from dir, or by soname from
 * the loader's path when dir is NULL. */
static bool open_in(tuned__cublas *c, const char *dir, tried *t)
{
    for (size_t i = 0; i < sizeof sonames / sizeof sonames[0]; i++) {
        char lib[4096], lt[4096];
        if (dir != NULL) {
            snprintf(lib, sizeof lib, "%s/%s", dir, sonames[i][0]);
            snprintf(lt, sizeof lt, "%s/%s", dir, sonames[i][1]);
            if (access(lib, F_OK) != 0)
                continue;
        } else {
            snprintf(lib, sizeof lib, "%s", sonames[i][0]);
            snprintf(lt, sizeof lt, "%s", sonames[i][1]);
        }
        /* libcublas needs libcublasLt; from a directory the loader does
         * not search, only an Lt already loaded satisfies it. */
        void *l2 = dlopen(lt, RTLD_NOW | RTLD_GLOBAL | RTLD_NODELETE);
        void *l1 = dlopen(lib, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
        if (l1 != NULL) {
            c->lib = l1;
            c->lt = l2;
            snprintf(c->path, sizeof c->path, "%s", lib);
            return true;
        }
        const char *why = dlerror();
        char msg[1024];
        snprintf(msg, sizeof msg, "%s: %s", lib, why != NULL ? why : "not loadable");
        note(t, msg);
        if (l2 != NULL)
            dlclose(l2);
    }
    return false;
}

static bool search(tuned__cublas *c, tried *t)
{
    const char *v = getenv("TUNED_NVRTC_PATH");
    if (v != NULL && *v != '\0') {
        /* NVRTC named: cuBLAS beside it (its directory, or it) */
        char dir[4096];
        struct stat st;
        snprintf(dir, sizeof dir, "%s", v);
        if (!(stat(dir, &st) == 0 && S_ISDIR(st.st_mode))) {
            char *slash = strrchr(dir, '/');
            if (slash != NULL)
                *slash = '\0';
        }
        if (open_in(c, dir, t))
            return true;
    }
    if (open_in(c, NULL, t))
        return true;
    v = getenv("TUNED_TOOLKIT_ROOT");
    const char *root = v != NULL && *v != '\0' ? v : "/usr/local/cuda";
    static const char *const subdirs[] = {"lib64", "lib"};
    for (size_t i = 0; i < 2; i++) {
        char dir[4096];
        snprintf(dir, sizeof dir, "%s/%s", root, subdirs[i]);
        if (open_in(c, dir, t))
            return true;
    }
    char msg[4200];
    snprintf(msg, sizeof msg, "none in %s/lib64 or %s/lib", root, root);
    note(t, msg);
    v = getenv("TUNED_SITE_PACKAGES");
    for (const char *p = v != NULL ? v : ""; *p != '\0';) {
        const char *end = strchr(p, ':');
        size_t len = end != NULL ? (size_t)(end - p) : strlen(p);
        for (size_t i = 0; len > 0 && i < sizeof wheel_dirs / sizeof wheel_dirs[0]; i++) {
            char dir[4096];
            if (snprintf(dir, sizeof dir, "%.*s/%s", (int)len, p, wheel_dirs[i]) <
                    (int)sizeof dir &&
                open_in(c, dir, t))
                return true;
        }
        if (end == NULL)
            break;
        p = end + 1;
    }
    note(t, "no nvidia-cublas wheel under $TUNED_SITE_PACKAGES");
    return false;
}

int tuned__cublas_load(tuned__cublas *c, tuned__err *e)
{
    memset(c, 0, sizeof *c);
    tried t = {.text = ""};
    if (!search(c, &t))
        return tuned__errf(e, TUNED_EUNSUPPORTED,
                           "cublas: no cuBLAS library found (%s); a chunked evaluation needs it: "
                           "the CUDA toolkit's, or torch's nvidia wheels (TUNED_SITE_PACKAGES)",
                           t.text);
    struct {
        void **slot;
        const char *name;
    } syms[] = {
        {(void **)&c->create, "cublasCreate_v2"},
        {(void **)&c->destroy, "cublasDestroy_v2"},
        {(void **)&c->set_stream, "cublasSetStream_v2"},
        {(void **)&c->status_string, "cublasGetStatusString"},
        {(void **)&c->gemm_ex, "cublasGemmEx"},
    };
    for (size_t i = 0; i < sizeof syms / sizeof syms[0]; i++) {
        *syms[i].slot = dlsym(c->lib, syms[i].name);
        if (*syms[i].slot == NULL) {
            int rc = tuned__errf(e, TUNED_EUNSUPPORTED, "cublas: %s has no %s", c->path,
                                 syms[i].name);
            tuned__cublas_unload(c);
            return rc;
        }
    }
    return 0;
}

void tuned__cublas_unload(tuned__cublas *c)
{
    if (c->lib != NULL)
        dlclose(c->lib);
    if (c->lt != NULL)
        dlclose(c->lt);
    memset(c, 0, sizeof *c);
}

int tuned__cublas_check(const tuned__cublas *c, int status, tuned__err *e, const char *what)
{
    if (status == CUBLAS_STATUS_SUCCESS)
        return 0;
    const char *s = c->status_string != NULL ? c->status_string(status) : NULL;
    return tuned__errf(e, TUNED_ECUDA, "cublas: %s: %s (%d)", what, s != NULL ? s : "?", status);
}

int tuned__cublas_gemm(const tuned__cublas *c, tuned__cublas_handle h, tuned_dtype dtype,
                       int transa, int transb, int m, int n, int k, float alpha, CUdeviceptr a,
                       int lda, CUdeviceptr b, int ldb, float beta, CUdeviceptr out, int ldc,
                       tuned__err *e, const char *what)
{
    int type = dtype == TUNED_FP16 ? CUDA_R_16F : dtype == TUNED_BF16 ? CUDA_R_16BF : CUDA_R_32F;
    int st = c->gemm_ex(h, transa, transb, m, n, k, &alpha, (const void *)(uintptr_t)a, type,
                        lda, (const void *)(uintptr_t)b, type, ldb, &beta,
                        (void *)(uintptr_t)out, type, ldc, CUBLAS_COMPUTE_32F,
                        CUBLAS_GEMM_DEFAULT);
    return tuned__cublas_check(c, st, e, what);
}
