/* phase_probe.cu: where a forward rows-family kernel's time goes, stage by
 * stage, on the few-row, long-row (decode) shapes. An experiment outside
 * the tuner, built with nvcc on the GPU machine by bench/phase-probe.sh,
 * which writes the tuner's own source of one variant (bench/emit_source)
 * into PROBE_KERNEL with hooks added after each stage of the kernel body
 * and of its one-round cluster reduction (row_combine):
 *   0 start            the block's first instruction
 *   1 loads in         thread_max returned: every load of the thread arrived
 *   2 exps             exp_and_sum returned
 *   3 warp combined    the warp's (max, sum) pair is known
 *   4 block combined   the block's pair is known (blocks that send one pair)
 *   5 pairs in         every pair the block waits for has landed
 *   6 reduced          the row's (max, sum) is known
 *   7 stores issued    store_row returned (not drained: stores do not wait)
 * Lane 0 of every warp writes the SM clock (clock64) at each hook, each
 * read made after the value the stage produced, and the global timer at
 * 0 and 7. A stage's length runs from the hook before it that the variant
 * has; they are SM cycles, turned into ns with the clock's rate measured
 * in the same run.
 *
 * Timed in the same run, each the median of 60 launches with the L2
 * flushed before each (probe_common.cuh): the kernel without stamps (the
 * hooks test a null pointer in constant memory), the copy engine's copy of
 * the same bytes, and two empty launches of the kernel's geometry, one in
 * clusters of the kernel's size and one without, to show what the cluster
 * launch itself costs. The output's first and last rows are checked to sum
 * to 1 before anything is timed: a check of the probe's launch, not of the
 * kernel, which the tuner's evaluator checks against the float64
 * reference (a prototype edited into the source is checked only this
 * far). */

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "probe_common.cuh"

enum { STAGES = 8, STORES = 7, GT_START = 8, GT_END = 9, SLOTS = 10 };

__constant__ unsigned long long *probe_stamps;

/* Lane 0 of each warp: the SM clock into slot k, read after dep exists. */
__device__ __forceinline__ void probe_stamp(int k, float dep)
{
    unsigned long long *s = probe_stamps;
    if (s == nullptr || (threadIdx.x & 31) != 0)
        return;
    s[(blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32) * SLOTS + k] =
        probe_clock_after(__float_as_uint(dep));
}

__device__ __forceinline__ void probe_global_time(int k)
{
    unsigned long long *s = probe_stamps;
    if (s == nullptr || (threadIdx.x & 31) != 0)
        return;
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    s[(blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32) * SLOTS + k] = t;
}

#define PHASE_START()                                                                            \
    do {                                                                                         \
        probe_global_time(GT_START);                                                             \
        probe_stamp(0, 0.0f);                                                                    \
    } while (0)
#define PHASE(k, dep) probe_stamp((k), (dep))
#define PHASE_END(dep)                                                                           \
    do {                                                                                         \
        probe_stamp(STORES, (dep));                                                              \
        probe_global_time(GT_END);                                                               \
    } while (0)

#include PROBE_KERNEL

/* ---- helpers ---- */

__device__ __forceinline__ unsigned probe_hash(unsigned long long i)
{
    unsigned x = (unsigned)i * 2654435761u ^ (unsigned)(i >> 32);
    x ^= x >> 15;
    x *= 2246822519u;
    x ^= x >> 13;
    return x;
}

/* Uniform values in [-8, 8) in the kernel's dtype (its own conversion and
 * element store, from the included templates). */
__global__ void probe_fill(unsigned char *x, unsigned long long n)
{
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;
         i += (unsigned long long)gridDim.x * blockDim.x) {
        const float v = (float)(probe_hash(i) >> 8) * (16.0f / 16777216.0f) - 8.0f;
        store_elem(x + i * ESIZE, float_to_bits(v));
    }
}

/* The sum of row `row` of y, one block (the templates' element load and
 * conversion). */
__global__ void probe_row_sum(const unsigned char *y, int cols, long long row, float *out)
{
    __shared__ float part[1024];
    float s = 0.0f;
    for (int i = threadIdx.x; i < cols; i += blockDim.x) {
        const unsigned long long at = (unsigned long long)row * cols + i;
        s += bits_to_float(load_elem(y + at * ESIZE));
    }
    part[threadIdx.x] = s;
    __syncthreads();
    if (threadIdx.x == 0) {
        float t = 0.0f;
        for (unsigned i = 0; i < blockDim.x; i++)
            t += part[i];
        *out = t;
    }
}

__global__ void __cluster_dims__(T_CLUSTER, 1, 1) probe_empty_cluster() {}
__global__ void probe_empty() {}

static double median(std::vector<double> v)
{
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

int main(int argc, char **argv)
{
    if (argc != 5) {
        fprintf(stderr, "usage: phase_probe ROWS BLOCKS THREADS LABEL\n");
        return 2;
    }
    const long long rows = atoll(argv[1]);
    const int blocks = atoi(argv[2]), threads = atoi(argv[3]);
    const char *label = argv[4];
    const int cols = T_COLS;
    const size_t bytes = (size_t)rows * cols * ESIZE;
    const int warps = blocks * threads / 32;

    unsigned char *x, *y;
    unsigned long long *stamps;
    float *row_sum;
    double *rate;
    CHECK(cudaMalloc(&x, bytes));
    CHECK(cudaMalloc(&y, bytes));
    CHECK(cudaMalloc(&stamps, (size_t)warps * SLOTS * 8));
    CHECK(cudaMalloc(&row_sum, sizeof(float)));
    CHECK(cudaMalloc(&rate, sizeof(double)));
    probe_fill<<<1024, 256>>>(x, (unsigned long long)rows * cols);
    CHECK(cudaGetLastError());
    if (T_CLUSTER > 8) {
        CHECK(cudaFuncSetAttribute((const void *)tuned_softmax_rows,
                                   cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
        CHECK(cudaFuncSetAttribute((const void *)probe_empty_cluster,
                                   cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
    }
    unsigned long long *none = nullptr;
    CHECK(cudaMemcpyToSymbol(probe_stamps, &none, sizeof none));
    const float scale = 1.0f;
    auto launch = [&] {
        tuned_softmax_rows<<<blocks, threads>>>(x, y, rows, cols, (long long)cols, scale);
    };
    launch();
    CHECK(cudaDeviceSynchronize());
    for (long long row : {0LL, rows - 1}) {
        probe_row_sum<<<1, 1024>>>(y, cols, row, row_sum);
        float got;
        CHECK(cudaMemcpy(&got, row_sum, sizeof got, cudaMemcpyDeviceToHost));
        if (!(got > 0.99f && got < 1.01f)) {
            fprintf(stderr, "%s: row %lld of the output sums to %g, not 1\n", label, row, got);
            return 1;
        }
    }

    Timer timer(60, 0);
    const double t_kernel = timer.median_us(launch);
    const double t_copy = timer.median_us(
        [&] { CHECK(cudaMemcpyAsync(y, x, bytes, cudaMemcpyDeviceToDevice)); });
    const double t_empty_cluster =
        timer.median_us([&] { probe_empty_cluster<<<blocks, threads>>>(); });
    const double t_empty = timer.median_us([&] { probe_empty<<<blocks, threads>>>(); });
    probe_clock_rate<<<1, 1>>>(rate);
    double cycles_per_ns;
    CHECK(cudaMemcpy(&cycles_per_ns, rate, sizeof cycles_per_ns, cudaMemcpyDeviceToHost));

    /* Stamped launches: per run, each stage's median and largest length
     * over the warps, the spread of the blocks' starts and the span from
     * the first start to the last warp's stores. */
    CHECK(cudaMemcpyToSymbol(probe_stamps, &stamps, sizeof stamps));
    const int runs = 41;
    std::vector<std::vector<double>> stage_med(STAGES), stage_max(STAGES);
    std::vector<double> skew, span;
    std::vector<unsigned long long> h((size_t)warps * SLOTS);
    for (int r = 0; r < runs; r++) {
        CHECK(cudaMemsetAsync(timer.flush, r, timer.flush_bytes));
        CHECK(cudaMemsetAsync(stamps, 0, h.size() * 8));
        launch();
        CHECK(cudaDeviceSynchronize());
        CHECK(cudaMemcpy(h.data(), stamps, h.size() * 8, cudaMemcpyDeviceToHost));
        if (r < 3)
            continue;
        for (int k = 1; k < STAGES; k++) {
            if (h[k] == 0)
                continue; /* a hook this variant has not */
            int before = k - 1;
            while (h[before] == 0)
                before--;
            std::vector<double> d;
            for (int w = 0; w < warps; w++)
                d.push_back((double)(h[w * SLOTS + k] - h[w * SLOTS + before]) / cycles_per_ns);
            stage_med[k].push_back(median(d));
            stage_max[k].push_back(*std::max_element(d.begin(), d.end()));
        }
        std::vector<double> d;
        for (int w = 0; w < warps; w++)
            d.push_back((double)(h[w * SLOTS + STORES] - h[w * SLOTS + 0]) / cycles_per_ns);
        stage_med[0].push_back(median(d));
        stage_max[0].push_back(*std::max_element(d.begin(), d.end()));
        unsigned long long first = ~0ull, last_start = 0, last_end = 0;
        for (int w = 0; w < warps; w++) {
            first = std::min(first, h[w * SLOTS + GT_START]);
            last_start = std::max(last_start, h[w * SLOTS + GT_START]);
            last_end = std::max(last_end, h[w * SLOTS + GT_END]);
        }
        skew.push_back((double)(last_start - first));
        span.push_back((double)(last_end - first));
    }
    CHECK(cudaMemcpyToSymbol(probe_stamps, &none, sizeof none));
    const double t_stamped = timer.median_us(launch);

    const char *names[STAGES] = {"whole",          "loads in",  "exps",    "warp combined",
                                 "block combined", "pairs in",  "reduced", "stores issued"};
    printf("%s: kernel %.2f us (stamped %.2f), copy %.2f, kernel - copy %+.2f; empty launch "
           "%.2f, in clusters of %d %.2f; SM clock %.3f GHz\n",
           label, t_kernel, t_stamped, t_copy, t_kernel - t_copy, t_empty, T_CLUSTER,
           t_empty_cluster, cycles_per_ns);
    printf("%s: stage ns (median over warps / slowest warp, medians of %d runs):", label,
           runs - 3);
    for (int k = 1; k < STAGES; k++)
        if (!stage_med[k].empty())
            printf(" %s %.0f/%.0f;", names[k], median(stage_med[k]), median(stage_max[k]));
    printf(" start to stores %.0f/%.0f\n", median(stage_med[0]), median(stage_max[0]));
    printf("%s: global timer: blocks' starts spread %.0f ns, first start to last stores %.0f ns\n",
           label, median(skew), median(span));
    CHECK(cudaFree(x));
    CHECK(cudaFree(y));
    CHECK(cudaFree(stamps));
    CHECK(cudaFree(row_sum));
    CHECK(cudaFree(rate));
    return 0;
}
