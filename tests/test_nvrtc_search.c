/* test_nvrtc_search.c: where NVRTC is found when no toolkit is (nvrtc.h's
 * search), with no GPU.
 *
 * A fake site-packages laid out as the nvidia-* wheels are
 * (nvidia/cu13/lib/ for CUDA 13's nvidia-cuda-nvrtc, nvidia/cuda_nvrtc/lib/
 * for nvidia-cuda-nvrtc-cu12), its libraries symlinked to the toolkit's,
 * is searched with the dynamic loader and the toolkit left out: NVRTC
 * loads from there and compiles a kernel. $TUNED_NVRTC_PATH (a directory)
 * is taken alone. With nothing present the message says what was tried
 * and what to install. Exit 77 where no libnvrtc.so.13 or .12 is found
 * under $TUNED_TOOLKIT_ROOT or /usr/local/cuda to plant. */
#include <dirent.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "src/codegen/nvrtc.h"

#include "tests/expect.h"

static const char KERNEL[] = "extern \"C\" __global__ void k(float *x) { x[threadIdx.x] *= 2.0f; }";

/* The toolkit's directory holding libnvrtc.so.<major>, into dir. */
static bool real_nvrtc(char *dir, size_t n, int *major)
{
    const char *root = getenv("TUNED_TOOLKIT_ROOT");
    const char *roots[] = {root != NULL && *root ? root : "/usr/local/cuda", "/usr/local/cuda"};
    const char *subs[] = {"lib64", "lib"};
    for (int r = 0; r < 2; r++)
        for (int s = 0; s < 2; s++)
            for (int m = 13; m >= 12; m--) {
                char path[PATH_MAX];
                snprintf(path, sizeof path, "%s/%s/libnvrtc.so.%d", roots[r], subs[s], m);
                if (access(path, R_OK) == 0 && realpath(path, dir) != NULL) {
                    *strrchr(dir, '/') = '\0';
                    *major = m;
                    (void)n;
                    return true;
                }
            }
    return false;
}

static void mkdirs(const char *path)
{
    char p[PATH_MAX];
    snprintf(p, sizeof p, "%s", path);
    for (char *s = p + 1; *s; s++)
        if (*s == '/') {
            *s = '\0';
            mkdir(p, 0755);
            *s = '/';
        }
    mkdir(p, 0755);
}

/* Symlinks every libnvrtc* of from into to (as a wheel holds NVRTC and
 * its builtins side by side); as_major renames libnvrtc.so.N. */
static void plant(const char *from, const char *to, int major, int as_major)
{
    mkdirs(to);
    DIR *d = opendir(from);
    struct dirent *ent;
    char soname[32];
    snprintf(soname, sizeof soname, "libnvrtc.so.%d", major);
    while (d != NULL && (ent = readdir(d)) != NULL) {
        if (strncmp(ent->d_name, "libnvrtc", 8) != 0)
            continue;
        char src[PATH_MAX], dst[PATH_MAX];
        snprintf(src, sizeof src, "%s/%s", from, ent->d_name);
        if (strcmp(ent->d_name, soname) == 0)
            snprintf(dst, sizeof dst, "%s/libnvrtc.so.%d", to, as_major);
        else
            snprintf(dst, sizeof dst, "%s/%s", to, ent->d_name);
        EXPECT(symlink(src, dst) == 0, "symlink %s %s", src, dst);
    }
    if (d != NULL)
        closedir(d);
}

/* Loads with s, expects the library at want, and compiles a kernel. */
static void expect_loads(const tuned__nvrtc_search *s, const char *want, const char *what)
{
    tuned__err e = {0};
    tuned__nvrtc *n = NULL;
    EXPECT_OK(tuned__nvrtc_load_from(s, &n, &e), &e);
    if (n == NULL)
        return;
    EXPECT(strcmp(tuned__nvrtc_path(n), want) == 0, "%s: loaded %s, expected %s", what,
           tuned__nvrtc_path(n), want);
    tuned__blob ptx;
    EXPECT_OK(tuned__nvrtc_compile(n, KERNEL, "k", 80, TUNED__NVRTC_PTX, &ptx, &e), &e);
    EXPECT(ptx.data != NULL && strstr(ptx.data, ".entry k") != NULL, "%s: no PTX entry", what);
    tuned__blob_free(&ptx);
    tuned__nvrtc_unload(n);
}

int main(void)
{
    char real[PATH_MAX];
    int major = 0;
    if (!real_nvrtc(real, sizeof real, &major)) {
        printf("nvrtc-search: skipped, no libnvrtc.so.13 or .12 in a CUDA toolkit to plant\n");
        return TEST_SKIP;
    }
    char dir[] = "/tmp/test_nvrtc_search.XXXXXX";
    if (mkdtemp(dir) == NULL) {
        perror("mkdtemp");
        return 1;
    }
    char site[PATH_MAX], site12[PATH_MAX], empty[PATH_MAX], none[PATH_MAX], lib[PATH_MAX],
        want[PATH_MAX], paths[3 * PATH_MAX + 8];
    snprintf(site, sizeof site, "%s/site-packages", dir);
    snprintf(site12, sizeof site12, "%s/site-packages-cu12", dir);
    snprintf(empty, sizeof empty, "%s/empty", dir);
    snprintf(none, sizeof none, "%s/no-toolkit", dir);
    mkdirs(empty);

    /* CUDA 13's wheel layout (the real library under its own major's name
     * where it is 12: dlopen by path does not check the soname). */
    snprintf(lib, sizeof lib, "%s/nvidia/cu13/lib", site);
    plant(real, lib, major, 13);
    snprintf(paths, sizeof paths, "%s::%s", empty, site);
    tuned__nvrtc_search s = {.loader = false, .toolkit_root = none, .site_packages = paths};
    snprintf(want, sizeof want, "%s/libnvrtc.so.13", lib);
    expect_loads(&s, want, "nvidia/cu13");

    /* CUDA 12's (nvidia-cuda-nvrtc-cu12). */
    snprintf(lib, sizeof lib, "%s/nvidia/cuda_nvrtc/lib", site12);
    plant(real, lib, major, 12);
    s.site_packages = site12;
    snprintf(want, sizeof want, "%s/libnvrtc.so.12", lib);
    expect_loads(&s, want, "nvidia/cuda_nvrtc");

    /* From the environment: $TUNED_NVRTC_PATH, a directory, alone. */
    snprintf(lib, sizeof lib, "%s/nvidia/cu13/lib", site);
    setenv("TUNED_NVRTC_PATH", lib, 1);
    tuned__nvrtc_search env;
    tuned__nvrtc_search_from_env(&env);
    EXPECT(env.explicit_path != NULL && env.loader);
    snprintf(want, sizeof want, "%s/libnvrtc.so.13", lib);
    expect_loads(&env, want, "$TUNED_NVRTC_PATH");

    /* ... and when it names nothing, nothing else is tried. */
    setenv("TUNED_NVRTC_PATH", empty, 1);
    tuned__nvrtc_search_from_env(&env);
    tuned__err e = {0};
    tuned__nvrtc *n = NULL;
    EXPECT_RC(tuned__nvrtc_load_from(&env, &n, &e), TUNED_ENONVRTC, &e);
    EXPECT_MSG(&e, "$TUNED_NVRTC_PATH");
    EXPECT_MSG(&e, empty);
    EXPECT(strstr(e.msg, "libnvrtc.so.13: cannot open") == NULL, "the loader was tried: %s",
           e.msg);
    unsetenv("TUNED_NVRTC_PATH");

    /* Nothing present: what was tried, and what to install. */
    s.site_packages = empty;
    EXPECT_RC(tuned__nvrtc_load_from(&s, &n, &e), TUNED_ENONVRTC, &e);
    EXPECT_MSG(&e, "no NVRTC library found");
    EXPECT_MSG(&e, none);
    EXPECT_MSG(&e, "no nvidia-cuda-nvrtc wheel in the 1 directory of $TUNED_SITE_PACKAGES");
    EXPECT_MSG(&e, "pip install nvidia-cuda-nvrtc");
    EXPECT_MSG(&e, "TUNED_TOOLKIT_ROOT=");
    printf("nothing present: %s\n", e.msg);
    s.site_packages = NULL;
    EXPECT_RC(tuned__nvrtc_load_from(&s, &n, &e), TUNED_ENONVRTC, &e);
    EXPECT_MSG(&e, "$TUNED_SITE_PACKAGES, which the tuned Python package sets, is unset");
    return expect_done("nvrtc-search", dir);
}
