/* stream_rows_probe.cu: would a persistent, streaming softmax reach the copy
 * on many long rows? A prototype, not a tuner family: fp16 rows only, each
 * row's length a multiple of 8 x the cluster size.
 *
 * Idea: the register rows (the tuner's winners) hold one row slice a block
 * and end every block's life in a load phase, a reduction and a store
 * phase; at 64x262144 on the H200 the whole space stays under 97% of the
 * copy (bench/results/2026-11-25-h200-exhaustive-64x262144). Here a cluster
 * walks over rows g, g + G, ... (G the clusters resident at once, so the
 * grid never runs in rounds) with STAGES shared-memory stages a block,
 * each filled by one bulk copy (`cp.async.bulk`) completing on an
 * mbarrier, so the next rows stream in while a row is reduced and stored.
 * A row takes one pass over its stage (an online max and sum a thread, 9
 * exps for 8 elements), a warp and a block fold of the (max, sum) pairs,
 * one cluster barrier to publish each block's pair in its mailbox (two,
 * by the row's parity, so a mailbox is rewritten only after every block
 * has read it), a read of the cluster's pairs through distributed shared
 * memory, and a second pass that writes exp(x - max) / sum. Variants
 * named ".pipe" split that cluster barrier around the previous row's
 * store pass (see stream_rows).
 *
 * Checked against: a float64 softmax on the host of three rows a shape
 * (first, middle, last); a config that misses prints FAIL and is not
 * timed. Timed as the other probes (probe_common.cuh: 256 MiB memset, the
 * evaluator's 100 µs settle, events around the launch alone), beside
 * cudaMemcpyAsync of the same bytes, medians of 3 interleaved rounds.
 * Then one more launch a variant in which thread 0 of each block sums the
 * SM clocks of a row's stages (wait, pass and folds, cluster step, store)
 * over its rows; the medians over blocks are printed in ns a row.
 *
 *   stream_rows_probe ROWSxCOLS...
 *
 * Built and run by bench/stream-rows-probe.sh on the GPU machine. */
#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "probe_common.cuh"

typedef unsigned u32;

__device__ __forceinline__ u32 smem_addr(const void *p)
{
    return (u32)__cvta_generic_to_shared(p);
}

__device__ __forceinline__ void mbar_init(u32 bar)
{
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(bar) : "memory");
}

/* load, started ahead: one bulk copy of a row slice into a stage. */
__device__ __forceinline__ void issue_slice(u32 stage, const void *src, u32 bytes, u32 bar)
{
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes)
                 : "memory");
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes"
                 " [%0], [%1], %2, [%3];" ::"r"(stage),
                 "l"(src), "r"(bytes), "r"(bar)
                 : "memory");
}

__device__ __forceinline__ void mbar_wait(u32 bar, u32 parity)
{
    asm volatile("{\n\t.reg .pred done;\n"
                 "wait_%=:\n\t"
                 "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n\t"
                 "@!done bra wait_%=;\n\t}" ::"r"(bar),
                 "r"(parity)
                 : "memory");
}

__device__ __forceinline__ void cluster_sync()
{
    asm volatile("barrier.cluster.arrive.release.aligned;\n\t"
                 "barrier.cluster.wait.acquire.aligned;" ::
                     : "memory");
}

__device__ __forceinline__ u32 cluster_rank()
{
    u32 r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
    return r;
}

/* A peer block's (max, sum) pair at the same shared address as ours. */
__device__ __forceinline__ float2 peer_pair(u32 local, u32 peer)
{
    u32 remote;
    float2 p;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(local), "r"(peer));
    asm volatile("ld.shared::cluster.v2.f32 {%0, %1}, [%2];"
                 : "=f"(p.x), "=f"(p.y)
                 : "r"(remote)
                 : "memory");
    return p;
}

__device__ __forceinline__ void unpack8(const uint4 &w, float (&v)[8])
{
    const u32 words[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const float2 f = __half22float2(*reinterpret_cast<const __half2 *>(&words[i]));
        v[2 * i] = f.x;
        v[2 * i + 1] = f.y;
    }
}

/* (m, s) += (m2, s2), each sum rescaled to the larger maximum (k = log2 e). */
__device__ __forceinline__ void pair_add(float &m, float &s, float m2, float s2)
{
    const float k = 1.4426950408889634f;
    const float big = fmaxf(m, m2);
    const float a = m == -INFINITY ? 0.0f : s * exp2f((m - big) * k);
    const float b = m2 == -INFINITY ? 0.0f : s2 * exp2f((m2 - big) * k);
    m = big;
    s = a + b;
}

__device__ __forceinline__ void warp_pairs(float &m, float &s)
{
#pragma unroll
    for (int off = 16; off > 0; off /= 2) {
        const float m2 = __shfl_xor_sync(0xffffffffu, m, off);
        const float s2 = __shfl_xor_sync(0xffffffffu, s, off);
        pair_add(m, s, m2, s2);
    }
}

/* split cluster barrier: arrive after publishing, wait before reading */
__device__ __forceinline__ void cluster_arrive()
{
    asm volatile("barrier.cluster.arrive.release.aligned;" ::: "memory");
}

__device__ __forceinline__ void cluster_wait()
{
    asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory");
}

__device__ __forceinline__ uint4 stage_unit(u32 stage, u32 u)
{
    uint4 w;
    asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(w.x), "=r"(w.y), "=r"(w.z), "=r"(w.w)
                 : "r"(stage + u * 16));
    return w;
}

/* pass: a thread's online (max, sum) over its units of a stage */
template <int THREADS> __device__ __forceinline__ float2 row_pass(u32 stage, u32 units)
{
    const float k = 1.4426950408889634f;
    float m = -INFINITY, s = 0.0f;
    for (u32 u = threadIdx.x; u < units; u += THREADS) {
        float v[8];
        unpack8(stage_unit(stage, u), v);
        float mu = v[0];
#pragma unroll
        for (int e = 1; e < 8; e++)
            mu = fmaxf(mu, v[e]);
        const float big = fmaxf(m, mu);
        float add = 0.0f;
#pragma unroll
        for (int e = 0; e < 8; e++)
            add += exp2f((v[e] - big) * k);
        s = (m == -INFINITY ? 0.0f : s * exp2f((m - big) * k)) + add;
        m = big;
    }
    return make_float2(m, s);
}

/* block fold: the block's pair into *mail (by warp 0's lane 0) */
template <int THREADS>
__device__ __forceinline__ void block_fold(float2 p, float2 *warp_result, float2 *mail)
{
    constexpr int WARPS = THREADS / 32;
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    warp_pairs(p.x, p.y);
    if (lane == 0)
        warp_result[warp] = p;
    __syncthreads();
    if (warp == 0) {
        p = lane < WARPS ? warp_result[lane] : make_float2(-INFINITY, 0.0f);
        warp_pairs(p.x, p.y);
        if (lane == 0)
            *mail = p;
    }
}

/* cluster fold: the row's (max, 1 / sum) from every block's mailbox, into
 * *result (by warp 0's lane 0); the caller synchronises the block. */
template <int CLUSTER> __device__ __forceinline__ void cluster_fold(float2 *mail, float2 *result)
{
    const int lane = threadIdx.x % 32;
    if (threadIdx.x / 32 == 0) {
        float2 p = lane < CLUSTER ? peer_pair(smem_addr(mail), (u32)lane)
                                  : make_float2(-INFINITY, 0.0f);
        warp_pairs(p.x, p.y);
        if (lane == 0)
            *result = make_float2(p.x, 1.0f / p.y);
    }
}

/* store: the second pass writes exp(x - max) / sum */
template <int THREADS>
__device__ __forceinline__ void store_pass(u32 stage, u32 units, __half *out, float2 result)
{
    const float k = 1.4426950408889634f;
    for (u32 u = threadIdx.x; u < units; u += THREADS) {
        float v[8];
        unpack8(stage_unit(stage, u), v);
        u32 o[4];
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const __half2 h = __floats2half2_rn(exp2f((v[2 * i] - result.x) * k) * result.y,
                                                exp2f((v[2 * i + 1] - result.x) * k) * result.y);
            o[i] = *reinterpret_cast<const u32 *>(&h);
        }
        asm volatile("st.global.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(out + u * 8), "r"(o[0]),
                     "r"(o[1]), "r"(o[2]), "r"(o[3])
                     : "memory");
    }
}

#define PHASES 4

/* A cluster's walk over its rows. PIPELINED 0: each row's pass, folds,
 * cluster barrier and store pass in turn. PIPELINED 1: the cluster
 * barrier of row n is split around the store pass of row n - 1 (arrive
 * after publishing row n's pair, wait before reading the cluster's), so
 * that its latency hides behind that store; a stage is refilled once its
 * row is stored, so a row's stage lives one iteration longer. */
template <int CLUSTER, int STAGES, int THREADS, int PIPELINED>
__global__ void __launch_bounds__(THREADS, 1)
    stream_rows(const __half *x, __half *y, int rows, int cols, int groups,
                unsigned long long *phases)
{
    constexpr int WARPS = THREADS / 32;
    extern __shared__ __align__(128) unsigned char stage_mem[];
    __shared__ __align__(8) unsigned long long bars[STAGES];
    __shared__ __align__(8) float2 mailbox[2];
    __shared__ float2 warp_result[WARPS];
    __shared__ float2 row_result[2];
    const u32 rank = cluster_rank();
    const int group = blockIdx.x / CLUSTER;
    const int slice = cols / CLUSTER;
    const u32 slice_bytes = (u32)slice * 2u, units = slice_bytes / 16u;
    const u32 stage0 = smem_addr(stage_mem), bar0 = smem_addr(bars);
    /* the rows of this cluster: group + n * groups, n < count */
    const int count = group < rows ? (rows - group + groups - 1) / groups : 0;
    auto row_of = [&](int n) { return (long long)group + (long long)n * groups; };
    auto src_of = [&](int n) { return x + row_of(n) * cols + (long long)rank * slice; };

    if (threadIdx.x == 0) {
        for (int st = 0; st < STAGES; st++)
            mbar_init(bar0 + 8 * st);
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
        for (int n = 0; n < STAGES && n < count; n++)
            issue_slice(stage0 + n * slice_bytes, src_of(n), slice_bytes, bar0 + 8 * n);
    }
    __syncthreads();
    /* phases (thread 0, when asked): SM clocks spent waiting for the
     * stage, in the pass and block fold, at the cluster barrier and fold,
     * and in the store pass, summed over the rows */
    unsigned long long spent[PHASES] = {0, 0, 0, 0};
    unsigned long long t0 = clock64();
    auto mark = [&](int phase) {
        if (phases != nullptr && threadIdx.x == 0) {
            const unsigned long long t = clock64();
            spent[phase] += t - t0;
            t0 = t;
        }
    };

    for (int n = 0; n < count + PIPELINED; n++) {
        const int st = n % STAGES;
        const u32 stage = stage0 + st * slice_bytes;
        if (n < count) {
            mbar_wait(bar0 + 8 * st, (u32)((n / STAGES) & 1));
            mark(0);
            block_fold<THREADS>(row_pass<THREADS>(stage, units), warp_result, &mailbox[n & 1]);
            mark(1);
        }
        /* the row whose store this iteration writes */
        const int done = n - PIPELINED;
        if (PIPELINED) {
            cluster_arrive();
            if (done >= 0) {
                const u32 done_stage = stage0 + (done % STAGES) * slice_bytes;
                store_pass<THREADS>(done_stage, units, y + row_of(done) * cols + (long long)rank * slice,
                                    row_result[done & 1]);
            }
            cluster_wait();
            if (n < count)
                cluster_fold<CLUSTER>(&mailbox[n & 1], &row_result[n & 1]);
        } else {
            cluster_sync();
            cluster_fold<CLUSTER>(&mailbox[n & 1], &row_result[n & 1]);
            __syncthreads();
            mark(2);
            store_pass<THREADS>(stage, units, y + row_of(n) * cols + (long long)rank * slice,
                                row_result[n & 1]);
        }
        /* refill: every thread is done with the stored row's stage */
        __syncthreads();
        mark(PIPELINED ? 2 : 3);
        if (threadIdx.x == 0 && done >= 0 && done + STAGES < count) {
            asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
            issue_slice(stage0 + (done % STAGES) * slice_bytes, src_of(done + STAGES), slice_bytes,
                        bar0 + 8 * (done % STAGES));
        }
    }
    if (phases != nullptr && threadIdx.x == 0)
        for (int i = 0; i < PHASES; i++)
            phases[blockIdx.x * PHASES + i] = count > 0 ? spent[i] / count : 0;
    /* No block leaves while a peer may still read its mailbox. */
    cluster_sync();
}

__global__ void fill_input(__half *x, long long n, unsigned seed)
{
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x) {
        unsigned h = (unsigned)i * 2654435761u ^ seed;
        h ^= h >> 15;
        h *= 2246822519u;
        h ^= h >> 13;
        x[i] = __float2half((float)(h % 16384u) / 1024.0f - 8.0f); /* [-8, 8) */
    }
}

struct Variant {
    const char *name;
    const void *kernel;
    int cluster, stages, threads;
};

template <int C, int S, int T, int P> static Variant variant(const char *name)
{
    return Variant{name, (const void *)stream_rows<C, S, T, P>, C, S, T};
}

/* Launch geometry of v for the shape: 0, or -1 when it does not apply. */
static int prepare(const Variant &v, int rows, int cols, size_t *smem, int *groups)
{
    if (cols % (8 * v.cluster) != 0)
        return -1;
    *smem = (size_t)v.stages * (size_t)(cols / v.cluster) * 2;
    if (*smem > 227u * 1024u)
        return -1;
    CHECK(cudaFuncSetAttribute(v.kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)*smem));
    if (v.cluster > 8)
        CHECK(cudaFuncSetAttribute(v.kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(v.cluster);
    cfg.blockDim = dim3(v.threads);
    cfg.dynamicSmemBytes = *smem;
    cudaLaunchAttribute attr;
    attr.id = cudaLaunchAttributeClusterDimension;
    attr.val.clusterDim.x = v.cluster;
    attr.val.clusterDim.y = 1;
    attr.val.clusterDim.z = 1;
    cfg.attrs = &attr;
    cfg.numAttrs = 1;
    int clusters = 0;
    if (cudaOccupancyMaxActiveClusters(&clusters, v.kernel, &cfg) != cudaSuccess || clusters < 1) {
        cudaGetLastError();
        return -1;
    }
    *groups = clusters < rows ? clusters : rows;
    return 0;
}

/* The largest error of y against a float64 softmax, over rows first,
 * middle and last, relative to each output or to 1e-4, whichever is
 * larger (fp16 holds outputs under 6.1e-5 as subnormals, 6e-8 apart). */
static double check_rows(const __half *dx, const __half *dy, int rows, int cols)
{
    std::vector<__half> x(cols), y(cols);
    double worst = 0.0;
    const int picks[3] = {0, rows / 2, rows - 1};
    for (int r : picks) {
        CHECK(cudaMemcpy(x.data(), dx + (long long)r * cols, cols * 2, cudaMemcpyDeviceToHost));
        CHECK(cudaMemcpy(y.data(), dy + (long long)r * cols, cols * 2, cudaMemcpyDeviceToHost));
        double mx = -INFINITY, sum = 0.0;
        for (int c = 0; c < cols; c++)
            mx = std::fmax(mx, (double)__half2float(x[c]));
        for (int c = 0; c < cols; c++)
            sum += std::exp((double)__half2float(x[c]) - mx);
        for (int c = 0; c < cols; c++) {
            const double want = std::exp((double)__half2float(x[c]) - mx) / sum;
            const double err = std::fabs((double)__half2float(y[c]) - want) / std::fmax(want, 1e-4);
            worst = std::fmax(worst, err);
        }
    }
    return worst;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: stream_rows_probe ROWSxCOLS...\n");
        return 2;
    }
    const std::vector<Variant> variants = {
        variant<8, 2, 256, 0>("c8.s2.t256"),     variant<8, 3, 256, 1>("c8.s3.t256.pipe"),
        variant<8, 3, 512, 1>("c8.s3.t512.pipe"), variant<16, 2, 256, 0>("c16.s2.t256"),
        variant<16, 2, 256, 1>("c16.s2.t256.pipe"), variant<16, 3, 256, 1>("c16.s3.t256.pipe"),
        variant<16, 3, 512, 1>("c16.s3.t512.pipe"), variant<16, 4, 256, 1>("c16.s4.t256.pipe"),
        variant<4, 3, 512, 1>("c4.s3.t512.pipe"),
    };
    cudaDeviceProp prop;
    CHECK(cudaGetDeviceProperties(&prop, 0));
    printf("# %s; fp16; median µs of each round (3 rounds, interleaved), 50 repeats a round\n",
           prop.name);
    printf("%-14s %-13s %7s %6s %9s %9s %9s %8s\n", "shape", "variant", "groups", "smem", "round1",
           "round2", "round3", "error");
    Timer timer(50, 100000);
    double *drate, clocks_per_ns;
    CHECK(cudaMalloc(&drate, sizeof *drate));
    probe_clock_rate<<<1, 1>>>(drate);
    CHECK(cudaMemcpy(&clocks_per_ns, drate, sizeof clocks_per_ns, cudaMemcpyDeviceToHost));
    CHECK(cudaFree(drate));
    for (int a = 1; a < argc; a++) {
        int rows = 0, cols = 0;
        if (sscanf(argv[a], "%dx%d", &rows, &cols) != 2 || rows < 1 || cols < 1) {
            fprintf(stderr, "stream_rows_probe: '%s' is not ROWSxCOLS\n", argv[a]);
            return 2;
        }
        const long long n = (long long)rows * cols;
        __half *x, *y;
        CHECK(cudaMalloc(&x, n * 2));
        CHECK(cudaMalloc(&y, n * 2));
        fill_input<<<1024, 256>>>(x, n, 12345u + (unsigned)a);
        CHECK(cudaGetLastError());
        struct Ready {
            const Variant *v;
            size_t smem;
            int groups;
            double err;
            float us[3];
        };
        std::vector<Ready> ready;
        for (const Variant &v : variants) {
            Ready r = {&v, 0, 0, 0.0, {0, 0, 0}};
            if (prepare(v, rows, cols, &r.smem, &r.groups) != 0)
                continue;
            CHECK(cudaMemset(y, 0xFF, n * 2));
            int rows_arg = rows, cols_arg = cols, groups_arg = r.groups;
            unsigned long long *no_phases = nullptr;
            void *args[] = {&x, &y, &rows_arg, &cols_arg, &groups_arg, &no_phases};
            CHECK(probe_launch(v.kernel, r.groups * v.cluster, v.threads, r.smem, v.cluster, false,
                               args));
            CHECK(cudaDeviceSynchronize());
            r.err = check_rows(x, y, rows, cols);
            if (r.err > 2e-3) {
                printf("%-14s %-13s %7d %6zu FAIL: relative error %.3g\n", argv[a], v.name,
                       r.groups, r.smem >> 10, r.err);
                continue;
            }
            ready.push_back(r);
        }
        float copy_us[3];
        for (int round = 0; round < 3; round++) {
            copy_us[round] = timer.median_us(
                [&] { CHECK(cudaMemcpyAsync(y, x, n * 2, cudaMemcpyDeviceToDevice)); });
            for (Ready &r : ready) {
                int rows_arg = rows, cols_arg = cols, groups_arg = r.groups;
                unsigned long long *no_phases = nullptr;
                void *args[] = {&x, &y, &rows_arg, &cols_arg, &groups_arg, &no_phases};
                r.us[round] = timer.median_us([&] {
                    CHECK(probe_launch(r.v->kernel, r.groups * r.v->cluster, r.v->threads, r.smem,
                                       r.v->cluster, false, args));
                });
            }
        }
        printf("%-14s %-13s %7s %6s %9.3f %9.3f %9.3f %8s\n", argv[a], "copy", "-", "-", copy_us[0],
               copy_us[1], copy_us[2], "-");
        for (const Ready &r : ready)
            printf("%-14s %-13s %7d %5zuK %9.3f %9.3f %9.3f %8.2g\n", argv[a], r.v->name, r.groups,
                   r.smem >> 10, r.us[0], r.us[1], r.us[2], r.err);
        /* one more launch a variant, its blocks' clocks per row */
        for (const Ready &r : ready) {
            const int blocks = r.groups * r.v->cluster;
            unsigned long long *dphases;
            CHECK(cudaMalloc(&dphases, (size_t)blocks * PHASES * sizeof *dphases));
            int rows_arg = rows, cols_arg = cols, groups_arg = r.groups;
            void *args[] = {&x, &y, &rows_arg, &cols_arg, &groups_arg, &dphases};
            CHECK(probe_launch(r.v->kernel, blocks, r.v->threads, r.smem, r.v->cluster, false, args));
            std::vector<unsigned long long> h((size_t)blocks * PHASES);
            CHECK(cudaMemcpy(h.data(), dphases, h.size() * sizeof h[0], cudaMemcpyDeviceToHost));
            CHECK(cudaFree(dphases));
            printf("%-14s %-13s phases, ns a row (median over blocks): ", argv[a], r.v->name);
            const char *names[PHASES] = {"wait", "pass+fold", "cluster", "store"};
            for (int i = 0; i < PHASES; i++) {
                std::vector<double> v;
                for (int b = 0; b < blocks; b++)
                    v.push_back((double)h[(size_t)b * PHASES + i] / clocks_per_ns);
                std::sort(v.begin(), v.end());
                printf("%s %.0f%s", names[i], v[v.size() / 2], i + 1 < PHASES ? ", " : "\n");
            }
        }
        CHECK(cudaFree(x));
        CHECK(cudaFree(y));
    }
    return 0;
}
