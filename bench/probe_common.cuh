/* probe_common.cuh: what the standalone nvcc probes (stream_probe.cu,
 * floor_probe.cu, phase_probe.cu, store_probe.cu) share: CHECK, which ends
 * the probe on a CUDA error with its place; probe_config and probe_launch,
 * a launch in clusters, cooperative, or both; probe_clock_after and probe_clock_rate,
 * the SM clock read after a value exists and its rate; and Timer, the
 * median time of a launch with the L2 flushed before each repeat (a 256
 * MiB memset, then optionally the evaluator's settle, a spin of the GPU
 * for settle_ns), cudaEvent around the launch alone, after 5 warm-ups. */
#ifndef TUNED_BENCH_PROBE_COMMON_CUH
#define TUNED_BENCH_PROBE_COMMON_CUH

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define CHECK(call)                                                                              \
    do {                                                                                         \
        cudaError_t err_ = (call);                                                               \
        if (err_ != cudaSuccess) {                                                               \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call,                        \
                    cudaGetErrorString(err_));                                                   \
            exit(1);                                                                             \
        }                                                                                        \
    } while (0)

/* The launch configuration of blocks x threads with smem bytes of dynamic
 * shared memory, in clusters of `cluster` blocks (1: none) and, with coop,
 * cooperative: the attributes go in attr, which must outlive it. The same
 * configuration serves an occupancy query and the launch. */
static inline cudaLaunchConfig_t probe_config(cudaLaunchAttribute (&attr)[2], int blocks,
                                              int threads, size_t smem, int cluster, bool coop)
{
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(blocks);
    cfg.blockDim = dim3(threads);
    cfg.dynamicSmemBytes = smem;
    cfg.attrs = attr;
    if (cluster > 1) {
        attr[cfg.numAttrs].id = cudaLaunchAttributeClusterDimension;
        attr[cfg.numAttrs].val.clusterDim.x = cluster;
        attr[cfg.numAttrs].val.clusterDim.y = 1;
        attr[cfg.numAttrs].val.clusterDim.z = 1;
        cfg.numAttrs++;
    }
    if (coop) {
        attr[cfg.numAttrs].id = cudaLaunchAttributeCooperative;
        attr[cfg.numAttrs].val.cooperative = 1;
        cfg.numAttrs++;
    }
    return cfg;
}

/* Launches kernel as probe_config describes; the launch's error. */
static inline cudaError_t probe_launch(const void *kernel, int blocks, int threads, size_t smem,
                                       int cluster, bool coop, void **args)
{
    cudaLaunchAttribute attr[2];
    const cudaLaunchConfig_t cfg = probe_config(attr, blocks, threads, smem, cluster, coop);
    return cudaLaunchKernelExC(&cfg, kernel, args);
}

/* Spins one thread until ns nanoseconds of the GPU's global timer pass. */
__global__ void probe_settle_spin(long long ns)
{
    unsigned long long t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    do
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    while ((long long)(t - t0) < ns);
}

/* The SM clock, read after dep exists (the read takes it as an operand, so
 * it cannot be scheduled before the instruction that makes it). */
__device__ __forceinline__ unsigned long long probe_clock_after(unsigned dep)
{
    unsigned long long t;
    asm volatile("mov.u64 %0, %%clock64; // %1" : "=l"(t) : "r"(dep));
    return t;
}

/* Cycles of the SM clock per ns of the global timer, over about 200 us
 * (one thread). */
__global__ void probe_clock_rate(double *out)
{
    unsigned long long g0, g1, c0, c1;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(g0));
    asm volatile("mov.u64 %0, %%clock64;" : "=l"(c0));
    do
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(g1));
    while (g1 - g0 < 200000);
    asm volatile("mov.u64 %0, %%clock64;" : "=l"(c1));
    *out = (double)(c1 - c0) / (double)(g1 - g0);
}

struct Timer {
    void *flush = nullptr;
    size_t flush_bytes = 256u << 20;
    int repeats;
    long long settle_ns;
    cudaEvent_t a, b;
    Timer(int repeats_, long long settle_ns_) : repeats(repeats_), settle_ns(settle_ns_)
    {
        CHECK(cudaMalloc(&flush, flush_bytes));
        CHECK(cudaEventCreate(&a));
        CHECK(cudaEventCreate(&b));
    }
    template <typename F> float median_us(F launch)
    {
        for (int i = 0; i < 5; i++)
            launch();
        CHECK(cudaDeviceSynchronize());
        std::vector<float> t;
        for (int i = 0; i < repeats; i++) {
            CHECK(cudaMemsetAsync(flush, i, flush_bytes));
            if (settle_ns > 0)
                probe_settle_spin<<<1, 1>>>(settle_ns);
            CHECK(cudaEventRecord(a));
            launch();
            CHECK(cudaEventRecord(b));
            CHECK(cudaEventSynchronize(b));
            float ms;
            CHECK(cudaEventElapsedTime(&ms, a, b));
            t.push_back(ms * 1000.0f);
        }
        CHECK(cudaGetLastError());
        std::sort(t.begin(), t.end());
        return t[t.size() / 2];
    }
};

#endif /* TUNED_BENCH_PROBE_COMMON_CUH */
