/* probe_attrs.c: does a launch attribute that the templates leave alone
 * move a variant's time? For one shape and dtype, it times the given
 * configs through the evaluator (its L2 flush, pause and events, each
 * config checked first) under each of these settings of the kernel's
 * function, interleaved over 3 rounds:
 *
 *   default   the driver's choice of L1/shared split and cluster placement
 *   carve0    CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT 0 (the
 *             least shared memory that fits: the split of a kernel with
 *             none, such as the evaluator's pause and the copy)
 *   carve100  the same attribute at 100 (the most shared memory)
 *   spread    CU_FUNC_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE
 *             SPREAD (a cluster's blocks on SMs of their own)
 *   balance   the same attribute at LOAD_BALANCING
 *
 *   probe_attrs [KERNEL:]ROWSxCOLS fp16|bf16|fp32 CONFIG...
 *
 * The settings are applied by wrapping the driver table's two launch
 * entry points, so the evaluator's own code runs unchanged, and only to
 * the variants' kernels (named tuned_softmax*), never to the evaluator's
 * pause, flush or check; the wrapper finds the setting in a file-scope
 * variable because a launch carries no context of ours. Not installed; bench/attrs-probe.sh runs it on the GPU
 * machine. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "probe_gpu.h"
#include "probe_shape.h"

#define ROUNDS 3

typedef struct setting {
    const char *name;
    int carveout; /* CU_SHAREDMEM_CARVEOUT_DEFAULT (-1) or a percentage */
    int cluster_policy;
} setting;

static const setting SETTINGS[] = {
    {"default", CU_SHAREDMEM_CARVEOUT_DEFAULT, CU_CLUSTER_SCHEDULING_POLICY_DEFAULT},
    {"carve0", 0, CU_CLUSTER_SCHEDULING_POLICY_DEFAULT},
    {"carve100", 100, CU_CLUSTER_SCHEDULING_POLICY_DEFAULT},
    {"spread", CU_SHAREDMEM_CARVEOUT_DEFAULT, CU_CLUSTER_SCHEDULING_POLICY_SPREAD},
    {"balance", CU_SHAREDMEM_CARVEOUT_DEFAULT, CU_CLUSTER_SCHEDULING_POLICY_LOAD_BALANCING},
};
#define NSETTINGS (sizeof SETTINGS / sizeof SETTINGS[0])

/* The probe's one piece of shared state: what the wrappers apply, and the
 * driver's own entry points they call. */
static struct {
    const setting *now;
    __typeof__(&cuFuncSetAttribute) set_attribute;
    __typeof__(&cuLaunchKernel) launch;
    __typeof__(&cuLaunchCooperativeKernel) launch_cooperative;
    __typeof__(&cuFuncGetName) get_name; /* not in the tuner's table */
    CUresult first_error;
} probe;

static CUresult apply(CUfunction f)
{
    const char *name = NULL;
    CUresult r = probe.get_name(&name, f);
    if (r == CUDA_SUCCESS && strncmp(name, "tuned_softmax", 13) != 0)
        return CUDA_SUCCESS;
    if (r == CUDA_SUCCESS)
        r = probe.set_attribute(f, CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT,
                                     probe.now->carveout);
    if (r == CUDA_SUCCESS)
        r = probe.set_attribute(f, CU_FUNC_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE,
                                probe.now->cluster_policy);
    if (r != CUDA_SUCCESS && probe.first_error == CUDA_SUCCESS)
        probe.first_error = r;
    return r;
}

static CUresult CUDAAPI launch(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                               unsigned by, unsigned bz, unsigned smem, CUstream s, void **args,
                               void **extra)
{
    CUresult r = apply(f);
    return r != CUDA_SUCCESS ? r : probe.launch(f, gx, gy, gz, bx, by, bz, smem, s, args, extra);
}

static CUresult CUDAAPI launch_cooperative(CUfunction f, unsigned gx, unsigned gy, unsigned gz,
                                           unsigned bx, unsigned by, unsigned bz, unsigned smem,
                                           CUstream s, void **args)
{
    CUresult r = apply(f);
    return r != CUDA_SUCCESS ? r
                             : probe.launch_cooperative(f, gx, gy, gz, bx, by, bz, smem, s, args);
}

int main(int argc, char **argv)
{
    tuned__shape shape = {0};
    if (argc < 4 || probe_parse_shape(argv[1], &shape) != 0 ||
        tuned_dtype_parse(argv[2], &shape.dtype) != 0) {
        fprintf(stderr, "usage: probe_attrs [KERNEL:]ROWSxCOLS fp16|bf16|fp32 CONFIG...\n");
        return 2;
    }
    tuned__evaluator *ev = NULL;
    probe_gpu p;
    tuned__err e = {0};
    void *lib = NULL;
    int status = 1;
    if (probe_gpu_open(&p, "probe_attrs", argv + 3, argc - 3) != 0)
        goto out;
    lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    void *sym = lib != NULL ? dlsym(lib, "cuFuncGetName") : NULL;
    /* dlsym's void * to a function pointer, without ISO C's complaint. */
    memcpy(&probe.get_name, &sym, sizeof sym);
    if (probe.get_name == NULL) {
        fprintf(stderr, "probe_attrs: this driver has no cuFuncGetName\n");
        goto out;
    }
    probe.now = &SETTINGS[0];
    probe.set_attribute = p.d->cuFuncSetAttribute;
    probe.launch = p.d->cuLaunchKernel;
    probe.launch_cooperative = p.d->cuLaunchCooperativeKernel;
    p.d->cuLaunchKernel = launch;
    p.d->cuLaunchCooperativeKernel = launch_cooperative;
    tuned__eval_opts o;
    tuned__eval_opts_default(&o);
    if (tuned__evaluator_open(&ev, p.d, p.n, &p.gpu, &shape, &o, &e) != 0) {
        fprintf(stderr, "probe_attrs: %s\n", e.msg);
        goto out;
    }
    printf("# %s, %s %s; median µs of each round (%d rounds, settings interleaved)\n", p.gpu.name,
           argv[1], argv[2], ROUNDS);
    printf("%-9s %-56s %s\n", "setting", "what", "median");
    printf("%-9s %-56s %.3f\n", "-", "copy (at open)", tuned__evaluator_copy_us(ev));
    for (int round = 0; round < ROUNDS; round++)
        for (size_t s = 0; s < NSETTINGS; s++) {
            probe.now = &SETTINGS[s];
            if (tuned__evaluator_run(ev, p.cfgs, (size_t)p.ncfg, p.res, &e) != 0) {
                fprintf(stderr, "probe_attrs: %s: %s\n", SETTINGS[s].name, e.msg);
                goto out;
            }
            if (probe.first_error != CUDA_SUCCESS) {
                const char *name = NULL;
                p.d->cuGetErrorName(probe.first_error, &name);
                fprintf(stderr, "probe_attrs: %s: setting an attribute: %s\n", SETTINGS[s].name,
                        name != NULL ? name : "unknown error");
                goto out;
            }
            for (int i = 0; i < p.ncfg; i++) {
                const tuned__eval_result *res = &p.res[i];
                if (res->status == TUNED__EVAL_OK)
                    printf("%-9s %-56s %.3f (round %d, %d reps, p20 %.3f, p80 %.3f)\n",
                           SETTINGS[s].name, argv[3 + i], res->median_us, round + 1,
                           res->reps, res->p20_us, res->p80_us);
                else
                    printf("%-9s %-56s %s: %s\n", SETTINGS[s].name, argv[3 + i],
                           tuned__eval_status_name(res->status), res->detail);
            }
        }
    status = 0;
out:
    tuned__evaluator_close(ev);
    probe_gpu_close(&p);
    if (lib != NULL)
        dlclose(lib);
    return status;
}
