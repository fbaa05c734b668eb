/* stream_probe.cu: an experiment outside the tuner, built with nvcc on the
 * GPU machine by bench/stream-probe.sh. It asks whether two kernel ideas
 * the variant space lacks beat the register-held rows where those lose:
 * the backward at 1024x50257 (1.12x its floor) and the forward on 64-row,
 * long-row decode shapes (4-12% behind QuACK).
 *
 * Both kernels cut a row over a thread-block cluster and make two passes:
 *   stats   read the row's part (y and dy: their dot; x: an online max and
 *           sum), keeping it in shared memory (SMEM) or not; the loads ask
 *           L2 to keep the lines (evict_last) when the second pass reads
 *           global memory again
 *   reduce  over the block, then the cluster through distributed shared
 *           memory
 *   output  read the part again, from shared memory or (hopefully) L2,
 *           write the output with evict-first stores
 * So their registers do not grow with the row, and the rows in flight on an
 * SM are bounded by shared memory or not at all, where the register-held
 * kernels keep at most one backward row pair per SM at 1024x50257.
 *
 * fp16 only. Each result is checked against a float64 CPU reference on
 * sampled rows before it is timed; a wrong kernel prints WRONG and no time.
 * Timing: median of 40 launches after 5 warm-ups, L2 flushed (a 256 MiB
 * memset) before each, cudaEvent around the launch alone; the copy is a
 * cudaMemcpyAsync of one tensor's bytes, timed the same way, in the run. */

#include <cooperative_groups.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "probe_common.cuh"

namespace cg = cooperative_groups;

constexpr int VEC = 8; /* halves per 16-byte vector */
constexpr int UNROLL = 4;

__device__ __forceinline__ unsigned long long keep_policy()
{
    unsigned long long p;
    asm("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(p));
    return p;
}

template <bool KEEP>
__device__ __forceinline__ uint4 load16(const __half *p, unsigned long long policy)
{
    uint4 v;
    if (KEEP)
        asm volatile("ld.global.L2::cache_hint.v4.u32 {%0,%1,%2,%3}, [%4], %5;"
                     : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p), "l"(policy));
    else
        asm volatile("ld.global.cs.v4.u32 {%0,%1,%2,%3}, [%4];"
                     : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
    return v;
}

__device__ __forceinline__ void store16(__half *p, uint4 v)
{
    asm volatile("st.global.cs.v4.u32 [%0], {%1,%2,%3,%4};"
                 : : "l"(p), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w) : "memory");
}

__device__ __forceinline__ float elem(const uint4 &v, int k)
{
    const unsigned w = k < 2 ? v.x : k < 4 ? v.y : k < 6 ? v.z : v.w;
    const unsigned short h = (unsigned short)(k % 2 ? w >> 16 : w & 0xFFFFu);
    return __half2float(__ushort_as_half(h));
}

__device__ __forceinline__ unsigned pack(float lo, float hi)
{
    return (unsigned)__half_as_ushort(__float2half_rn(lo)) |
           ((unsigned)__half_as_ushort(__float2half_rn(hi)) << 16);
}

/* Where a block's vectors lie: the row's aligned body cut in cluster-many
 * contiguous parts; rank 0 also takes the unaligned head and tail. */
struct Part {
    const __half *row0;
    int head, body_vecs, first, count;
};

__device__ __forceinline__ Part part_of(const __half *base, long long row, int cols, int rank,
                                        int nblocks)
{
    Part p;
    p.row0 = base + row * (long long)cols;
    const int mis = (int)(((unsigned long long)p.row0 / 2) % VEC);
    p.head = mis ? VEC - mis : 0;
    if (p.head > cols)
        p.head = cols;
    p.body_vecs = (cols - p.head) / VEC;
    const int per = (p.body_vecs + nblocks - 1) / nblocks;
    p.first = rank * per;
    p.count = p.body_vecs - p.first < per ? p.body_vecs - p.first : per;
    if (p.count < 0)
        p.count = 0;
    return p;
}

template <typename Op>
__device__ float block_reduce(float v, float *scratch, Op op)
{
    for (int o = 16; o > 0; o /= 2)
        v = op(v, __shfl_xor_sync(0xFFFFFFFFu, v, o));
    const int warps = blockDim.x / 32;
    if (threadIdx.x % 32 == 0)
        scratch[threadIdx.x / 32] = v;
    __syncthreads();
    v = scratch[0];
    for (int i = 1; i < warps; i++)
        v = op(v, scratch[i]);
    return v;
}

struct Sum {
    __device__ float operator()(float a, float b) const { return a + b; }
};

/* ---- backward: dx = y (dy - sum(dy y)) ---- */
template <bool SMEM, bool KEEP>
__global__ void bwd_stream(const __half *y, const __half *dy, __half *dx, int cols)
{
    extern __shared__ uint4 stage[]; /* SMEM: y's then dy's vectors of the part */
    __shared__ float scratch[32];
    __shared__ float cluster_sum;
    cg::cluster_group cluster = cg::this_cluster();
    const int rank = (int)cluster.block_rank(), nblocks = (int)cluster.num_blocks();
    const long long row = blockIdx.x / nblocks;
    const Part py = part_of(y, row, cols, rank, nblocks);
    const __half *dyr = dy + row * (long long)cols;
    __half *dxr = dx + row * (long long)cols;
    const unsigned long long pol = keep_policy();
    const int T = blockDim.x;

    /* stats */
    float dot = 0.0f;
    for (int base = threadIdx.x; base < py.count; base += T * UNROLL) {
        uint4 a[UNROLL], b[UNROLL];
#pragma unroll
        for (int u = 0; u < UNROLL; u++) {
            const int i = base + u * T;
            if (i < py.count) {
                const long long off = py.head + (long long)(py.first + i) * VEC;
                a[u] = load16<KEEP>(py.row0 + off, pol);
                b[u] = load16<KEEP>(dyr + off, pol);
            }
        }
#pragma unroll
        for (int u = 0; u < UNROLL; u++) {
            const int i = base + u * T;
            if (i < py.count) {
                if (SMEM) {
                    stage[i] = a[u];
                    stage[py.count + i] = b[u];
                }
#pragma unroll
                for (int k = 0; k < VEC; k++)
                    dot = fmaf(elem(a[u], k), elem(b[u], k), dot);
            }
        }
    }
    const int tail0 = py.head + py.body_vecs * VEC;
    if (rank == 0)
        for (int c = threadIdx.x; c < cols; c += T)
            if (c < py.head || c >= tail0)
                dot += __half2float(py.row0[c]) * __half2float(dyr[c]);
    dot = block_reduce(dot, scratch, Sum());
    if (threadIdx.x == 0)
        cluster_sum = dot;
    cluster.sync();
    float sum = 0.0f;
    for (int r = 0; r < nblocks; r++)
        sum += *cluster.map_shared_rank(&cluster_sum, r);
    cluster.sync();

    /* output */
    for (int i = threadIdx.x; i < py.count; i += T) {
        const long long off = py.head + (long long)(py.first + i) * VEC;
        uint4 a, b;
        if (SMEM) {
            a = stage[i];
            b = stage[py.count + i];
        } else {
            a = load16<false>(py.row0 + off, pol);
            b = load16<false>(dyr + off, pol);
        }
        uint4 o;
        o.x = pack(elem(a, 0) * (elem(b, 0) - sum), elem(a, 1) * (elem(b, 1) - sum));
        o.y = pack(elem(a, 2) * (elem(b, 2) - sum), elem(a, 3) * (elem(b, 3) - sum));
        o.z = pack(elem(a, 4) * (elem(b, 4) - sum), elem(a, 5) * (elem(b, 5) - sum));
        o.w = pack(elem(a, 6) * (elem(b, 6) - sum), elem(a, 7) * (elem(b, 7) - sum));
        store16(dxr + off, o);
    }
    if (rank == 0)
        for (int c = threadIdx.x; c < cols; c += T)
            if (c < py.head || c >= tail0) {
                const float yv = __half2float(py.row0[c]);
                dxr[c] = __float2half_rn(yv * (__half2float(dyr[c]) - sum));
            }
}

/* ---- forward: y = exp(x - max) / sum ---- */
__device__ __forceinline__ void online(float &m, float &s, float x)
{
    if (x > m) {
        s = s * __expf(m - x) + 1.0f;
        m = x;
    } else {
        s += __expf(x - m);
    }
}

template <bool SMEM, bool KEEP>
__global__ void fwd_stream(const __half *x, __half *y, int cols)
{
    extern __shared__ uint4 stage[];
    __shared__ float scratch_m[32], scratch_s[32];
    __shared__ float cluster_m, cluster_s;
    cg::cluster_group cluster = cg::this_cluster();
    const int rank = (int)cluster.block_rank(), nblocks = (int)cluster.num_blocks();
    const long long row = blockIdx.x / nblocks;
    const Part px = part_of(x, row, cols, rank, nblocks);
    __half *yr = y + row * (long long)cols;
    const unsigned long long pol = keep_policy();
    const int T = blockDim.x;

    /* stats: per vector its max, then the pair rescaled once */
    float m = -INFINITY, s = 0.0f;
    for (int base = threadIdx.x; base < px.count; base += T * UNROLL) {
        uint4 a[UNROLL];
#pragma unroll
        for (int u = 0; u < UNROLL; u++) {
            const int i = base + u * T;
            if (i < px.count)
                a[u] = load16<KEEP>(px.row0 + px.head + (long long)(px.first + i) * VEC, pol);
        }
#pragma unroll
        for (int u = 0; u < UNROLL; u++) {
            const int i = base + u * T;
            if (i < px.count) {
                if (SMEM)
                    stage[i] = a[u];
                float vm = elem(a[u], 0);
#pragma unroll
                for (int k = 1; k < VEC; k++)
                    vm = fmaxf(vm, elem(a[u], k));
                const float nm = fmaxf(m, vm);
                float vs = 0.0f;
#pragma unroll
                for (int k = 0; k < VEC; k++)
                    vs += __expf(elem(a[u], k) - nm);
                s = (m == -INFINITY ? 0.0f : s * __expf(m - nm)) + vs;
                m = nm;
            }
        }
    }
    const int tail0 = px.head + px.body_vecs * VEC;
    if (rank == 0)
        for (int c = threadIdx.x; c < cols; c += T)
            if (c < px.head || c >= tail0)
                online(m, s, __half2float(px.row0[c]));
    /* block: max, then rescaled sums */
    float bm = m;
    for (int o = 16; o > 0; o /= 2)
        bm = fmaxf(bm, __shfl_xor_sync(0xFFFFFFFFu, bm, o));
    if (threadIdx.x % 32 == 0)
        scratch_m[threadIdx.x / 32] = bm;
    __syncthreads();
    bm = scratch_m[0];
    for (int i = 1; i < T / 32; i++)
        bm = fmaxf(bm, scratch_m[i]);
    float bs = m == -INFINITY ? 0.0f : s * __expf(m - bm);
    bs = block_reduce(bs, scratch_s, Sum());
    if (threadIdx.x == 0) {
        cluster_m = bm;
        cluster_s = bs;
    }
    cluster.sync();
    float rm = -INFINITY;
    for (int r = 0; r < nblocks; r++)
        rm = fmaxf(rm, *cluster.map_shared_rank(&cluster_m, r));
    float rs = 0.0f;
    for (int r = 0; r < nblocks; r++) {
        const float om = *cluster.map_shared_rank(&cluster_m, r);
        rs += *cluster.map_shared_rank(&cluster_s, r) * __expf(om - rm);
    }
    cluster.sync();
    const float inv = 1.0f / rs;

    /* output */
    for (int i = threadIdx.x; i < px.count; i += T) {
        const long long off = px.head + (long long)(px.first + i) * VEC;
        const uint4 a = SMEM ? stage[i] : load16<false>(px.row0 + off, pol);
        uint4 o;
        o.x = pack(__expf(elem(a, 0) - rm) * inv, __expf(elem(a, 1) - rm) * inv);
        o.y = pack(__expf(elem(a, 2) - rm) * inv, __expf(elem(a, 3) - rm) * inv);
        o.z = pack(__expf(elem(a, 4) - rm) * inv, __expf(elem(a, 5) - rm) * inv);
        o.w = pack(__expf(elem(a, 6) - rm) * inv, __expf(elem(a, 7) - rm) * inv);
        store16(yr + off, o);
    }
    if (rank == 0)
        for (int c = threadIdx.x; c < cols; c += T)
            if (c < px.head || c >= tail0)
                yr[c] = __float2half_rn(__expf(__half2float(px.row0[c]) - rm) * inv);
}

/* ---- host ---- */

static std::vector<__half> random_halves(size_t n, unsigned seed, float lo, float hi)
{
    std::vector<__half> v(n);
    srand(seed);
    for (size_t i = 0; i < n; i++)
        v[i] = __float2half(lo + (hi - lo) * (float)rand() / (float)RAND_MAX);
    return v;
}

template <typename K>
static bool launch_cluster(K kernel, int rows, int cluster, int threads, size_t smem,
                           void **args)
{
    if (smem > 48 * 1024 &&
        cudaFuncSetAttribute((const void *)kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             (int)smem) != cudaSuccess)
        return false;
    if (cluster > 8)
        CHECK(cudaFuncSetAttribute((const void *)kernel,
                                   cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
    return probe_launch((const void *)kernel, rows * cluster, threads, smem, cluster, false, args) ==
           cudaSuccess;
}

/* One checked launch before timing: the output cleared, the kernel run,
 * the result copied back into host. False (and a line saying so) where the
 * launch is refused, such as a cluster too large for the GPC. */
template <typename K>
static bool run_once(K kernel, int rows, int cluster, int threads, size_t smem, void **args,
                     __half *out, size_t bytes, std::vector<__half> &host, const char *label)
{
    CHECK(cudaMemset(out, 0, bytes));
    if (!launch_cluster(kernel, rows, cluster, threads, smem, args)) {
        cudaGetLastError();
        printf("  %s c%-2d t%-4d refused by the launch\n", label, cluster, threads);
        return false;
    }
    CHECK(cudaDeviceSynchronize());
    CHECK(cudaMemcpy(host.data(), out, bytes, cudaMemcpyDeviceToHost));
    return true;
}

static void probe_bwd(Timer &timer, int rows, int cols)
{
    const size_t n = (size_t)rows * cols, bytes = n * 2;
    /* y: a softmax of random logits per row; dy uniform */
    std::vector<__half> hy(n), hdy = random_halves(n, 2, -1.0f, 1.0f);
    {
        std::vector<__half> logits = random_halves(n, 1, -4.0f, 4.0f);
        for (int r = 0; r < rows; r++) {
            double mx = -1e300, s = 0;
            for (int c = 0; c < cols; c++)
                mx = std::max(mx, (double)__half2float(logits[(size_t)r * cols + c]));
            for (int c = 0; c < cols; c++)
                s += std::exp((double)__half2float(logits[(size_t)r * cols + c]) - mx);
            for (int c = 0; c < cols; c++)
                hy[(size_t)r * cols + c] = __float2half(
                    (float)(std::exp((double)__half2float(logits[(size_t)r * cols + c]) - mx) / s));
        }
    }
    __half *y, *dy, *dx;
    CHECK(cudaMalloc(&y, bytes));
    CHECK(cudaMalloc(&dy, bytes));
    CHECK(cudaMalloc(&dx, bytes));
    CHECK(cudaMemcpy(y, hy.data(), bytes, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(dy, hdy.data(), bytes, cudaMemcpyHostToDevice));
    const float copy = timer.median_us([&] { CHECK(cudaMemcpyAsync(dx, y, bytes, cudaMemcpyDeviceToDevice)); });
    printf("bwd %dx%d fp16: copy %.2f us, floor (1.5 copies) %.2f us\n", rows, cols, copy, 1.5f * copy);
    std::vector<__half> out(n);
    for (int smem = 0; smem < 2; smem++)
        for (int keep = 0; keep < 2; keep++) {
            if (smem && keep)
                continue;
            for (int cluster : {1, 2, 4, 8, 16})
                for (int threads : {256, 512, 1024}) {
                    const int vecs = (cols / VEC + cluster - 1) / cluster + 1;
                    const size_t sm = smem ? (size_t)vecs * 2 * 16 : 0;
                    if (sm > 227 * 1024)
                        continue;
                    int c = cols;
                    void *args[] = {&y, &dy, &dx, &c};
                    auto kernel = smem ? bwd_stream<true, false>
                                       : keep ? bwd_stream<false, true> : bwd_stream<false, false>;
                    char label[64];
                    snprintf(label, sizeof label, "bwd smem=%d keep=%d", smem, keep);
                    if (!run_once(kernel, rows, cluster, threads, sm, args, dx, bytes, out, label))
                        continue;
                    double worst = 0;
                    for (int r = 0; r < rows; r += std::max(1, rows / 16)) {
                        double dot = 0;
                        for (int k = 0; k < cols; k++)
                            dot += (double)__half2float(hy[(size_t)r * cols + k]) *
                                   __half2float(hdy[(size_t)r * cols + k]);
                        for (int k = 0; k < cols; k++) {
                            const size_t i = (size_t)r * cols + k;
                            const double want = __half2float(hy[i]) * (__half2float(hdy[i]) - dot);
                            const double err = fabs(__half2float(out[i]) - want) /
                                               (1e-6 + 1e-2 * fabs(want));
                            worst = std::max(worst, err);
                        }
                    }
                    if (worst > 1.0) {
                        printf("  bwd smem=%d keep=%d c%-2d t%-4d WRONG (error %.2f of tolerance)\n",
                               smem, keep, cluster, threads, worst);
                        continue;
                    }
                    const float t = timer.median_us([&] {
                        if (!launch_cluster(kernel, rows, cluster, threads, sm, args))
                            CHECK(cudaGetLastError());
                    });
                    printf("  bwd smem=%d keep=%d c%-2d t%-4d %8.2f us  %.3fx floor\n", smem, keep,
                           cluster, threads, t, t / (1.5f * copy));
                }
        }
    CHECK(cudaFree(y));
    CHECK(cudaFree(dy));
    CHECK(cudaFree(dx));
}

static void probe_fwd(Timer &timer, int rows, int cols)
{
    const size_t n = (size_t)rows * cols, bytes = n * 2;
    std::vector<__half> hx = random_halves(n, 3, -8.0f, 8.0f);
    __half *x, *y;
    CHECK(cudaMalloc(&x, bytes));
    CHECK(cudaMalloc(&y, bytes));
    CHECK(cudaMemcpy(x, hx.data(), bytes, cudaMemcpyHostToDevice));
    const float copy = timer.median_us([&] { CHECK(cudaMemcpyAsync(y, x, bytes, cudaMemcpyDeviceToDevice)); });
    printf("fwd %dx%d fp16: copy %.2f us\n", rows, cols, copy);
    std::vector<__half> out(n);
    float best = 1e30f;
    for (int smem = 0; smem < 2; smem++)
        for (int keep = 0; keep < 2; keep++) {
            if (smem && keep)
                continue;
            for (int cluster : {2, 4, 8, 16})
                for (int threads : {128, 256, 512, 1024}) {
                    const int vecs = (cols / VEC + cluster - 1) / cluster + 1;
                    const size_t sm = smem ? (size_t)vecs * 16 : 0;
                    if (sm > 227 * 1024)
                        continue;
                    int c = cols;
                    void *args[] = {&x, &y, &c};
                    auto kernel = smem ? fwd_stream<true, false>
                                       : keep ? fwd_stream<false, true> : fwd_stream<false, false>;
                    char label[64];
                    snprintf(label, sizeof label, "fwd smem=%d keep=%d", smem, keep);
                    if (!run_once(kernel, rows, cluster, threads, sm, args, y, bytes, out, label))
                        continue;
                    double worst = 0;
                    for (int r = 0; r < rows; r += std::max(1, rows / 8)) {
                        double mx = -1e300, s = 0;
                        for (int k = 0; k < cols; k++)
                            mx = std::max(mx, (double)__half2float(hx[(size_t)r * cols + k]));
                        for (int k = 0; k < cols; k++)
                            s += std::exp((double)__half2float(hx[(size_t)r * cols + k]) - mx);
                        for (int k = 0; k < cols; k++) {
                            const size_t i = (size_t)r * cols + k;
                            const double want = std::exp((double)__half2float(hx[i]) - mx) / s;
                            worst = std::max(worst, fabs(__half2float(out[i]) - want) /
                                                        (1e-7 + 1e-2 * want));
                        }
                    }
                    if (worst > 1.0) {
                        printf("  fwd smem=%d keep=%d c%-2d t%-4d WRONG (error %.2f of tolerance)\n",
                               smem, keep, cluster, threads, worst);
                        continue;
                    }
                    const float t = timer.median_us([&] {
                        if (!launch_cluster(kernel, rows, cluster, threads, sm, args))
                            CHECK(cudaGetLastError());
                    });
                    best = std::min(best, t);
                    printf("  fwd smem=%d keep=%d c%-2d t%-4d %8.2f us  %.3fx copy  copy%+.2f us\n",
                           smem, keep, cluster, threads, t, t / copy, t - copy);
                }
        }
    printf("fwd %dx%d fp16: best %.2f us, copy %.2f us\n", rows, cols, best, copy);
    CHECK(cudaFree(x));
    CHECK(cudaFree(y));
}

int main(int argc, char **argv)
{
    cudaDeviceProp prop;
    CHECK(cudaGetDeviceProperties(&prop, 0));
    printf("device: %s, %d SMs, L2 %d MiB\n", prop.name, prop.multiProcessorCount,
           prop.l2CacheSize >> 20);
    Timer timer(40, 0); /* no settle: as the runs kept were timed */
    const bool only_fwd = argc > 1 && argv[1][0] == 'f';
    if (!only_fwd) {
        probe_bwd(timer, 1024, 50257);
        probe_bwd(timer, 4096, 32000);
    }
    for (int cols : {32768, 65536, 128256, 262144})
        probe_fwd(timer, 64, cols);
    probe_fwd(timer, 8, 128256);
    return 0;
}
