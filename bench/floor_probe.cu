/* floor_probe.cu: an experiment outside the tuner, built with nvcc on the
 * GPU machine by bench/floor-probe.sh. It asks what the few-row, long-row
 * (decode) shapes can reach at all: how long the bare skeleton of any
 * one-launch softmax takes, with no arithmetic in it.
 *
 * A softmax of a row cut over G blocks must (1) load its part, (2) learn
 * the other parts' statistics, (3) store. The skeletons here do exactly
 * that and nothing more, on the bytes of a row (or of a few rows):
 *   copy     load, store: no exchange (the floor of the work itself)
 *   grid     load, a barrier across all G blocks (several rows' blocks
 *            together: stricter than a row needs) through one counter in
 *            global memory (one L2 atomic round trip, then polling), store;
 *            a plain launch, G no more than the SMs (the probe's own
 *            assumption of residency)
 *   pairs    the grid skeleton with the tuner's exchange (softmax_grid_common.cu)
 *            instead of a counter: each block publishes a 16-byte pair
 *            tagged with the launch, warp 0 polls all G pairs until their
 *            tags match
 *   ticket   pairs, with the tuner's ticket: thread 0 of every block adds
 *            one arrival to a single word at the block's start (an atomic
 *            with return, its value waited for at the exchange)
 *   cluster  load, barrier.cluster arrive/wait (one cluster a row, of up
 *            to 16 blocks), store: the cheapest exchange a cluster has
 *   tiers    (`floor_probe tiers`) a row over K clusters of C blocks: the
 *            cluster barrier, then block 0 of each cluster publishes a
 *            tagged pair to global memory and warp 0 of every block polls
 *            the row's K pairs (one L2 round trip among K writers, not
 *            K x C); with no more clusters than fit at once, launched
 *            cooperatively as well where the driver takes that. With
 *            `+exp` every skeleton also computes one exp per element
 *            (ex2.approx of a scaled input, summed into the folded value),
 *            the arithmetic a softmax adds, so the line says what a row
 *            spread over K times more SMs saves in exps and pays in its
 *            second exchange.
 *   tma      the cluster skeleton with the part brought into shared memory
 *            by the bulk copy engine (cp.async.bulk, one per block, done on
 *            an mbarrier) instead of register loads: whether the engine
 *            moves more bytes per SM than a block's loads do
 *   nothing  a launch of G blocks that touch no memory
 * The grid skeletons launch cooperatively, as the tuner's grid splits do
 * ("+coop"; a first run found a plain launch no faster).
 * Every exchange waits for the block's loads, as a reduction would: each
 * thread folds its words into one through shared memory first.
 * A result is checked (the output equals the input) before it is timed.
 *
 * Timing: median of 60 launches after 5 warm-ups; before each, L2 flushed
 * (a 256 MiB memset) and a 100 us spin on the GPU (the evaluator's
 * settle), then cudaEvent around the launch alone. The copy engine's copy
 * (cudaMemcpyAsync of the same bytes) is timed the same way in the run. */

#include <cuda.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "probe_common.cuh"


enum Exchange { NOTHING, COPY, GRID, PAIRS, TICKET, CLUSTER, TIERS };

/* ---- device ---- */

__device__ __forceinline__ void cluster_barrier()
{
    asm volatile("barrier.cluster.arrive.relaxed.aligned;\n\tbarrier.cluster.wait.aligned;"
                 ::: "memory");
}

/* All G blocks of the launch: thread 0 adds one arrival with release and
 * polls with acquire until the launch's target (G arrivals a launch, the
 * counter never reset between launches). */
__device__ __forceinline__ void grid_barrier(unsigned *counter, unsigned target, unsigned fold)
{
    if (threadIdx.x == 0) {
        /* the store waits for the fold, the release orders it first */
        asm volatile("st.relaxed.gpu.global.u32 [%0], %1;" ::"l"(counter + 1), "r"(fold) : "memory");
        asm volatile("red.release.gpu.global.add.u32 [%0], 1;" ::"l"(counter) : "memory");
        unsigned seen;
        do
            asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(seen) : "l"(counter) : "memory");
        while ((int)(seen - target) < 0);
    }
    __syncthreads();
}

/* What a block reduction costs and what it waits for: every thread's
 * loaded words folded into one, through shared memory, so that no block
 * publishes before all its loads are back (as a block whose (max, sum)
 * pair depends on them). */
__device__ __forceinline__ unsigned block_fold(unsigned fold)
{
    __shared__ unsigned folded;
    if (threadIdx.x == 0)
        folded = 0;
    __syncthreads();
    atomicXor(&folded, fold);
    __syncthreads();
    return folded;
}

/* The tuner's grid exchange, without its arithmetic: thread 0 publishes a
 * pair tagged with the launch's target; lane l of warp 0 polls pairs l,
 * l + 32, .. until every tag matches. */
__device__ __forceinline__ void grid_pairs(unsigned *counter, unsigned target, unsigned fold)
{
    unsigned long long *slots = (unsigned long long *)(counter + 16);
    const unsigned long long tag = (unsigned long long)target << 32;
    if (threadIdx.x == 0)
        asm volatile("st.relaxed.gpu.global.v2.u64 [%0], {%1, %2};"
                     ::"l"(slots + 2 * blockIdx.x), "l"(tag | fold), "l"(tag | 2u) : "memory");
    if (threadIdx.x < 32) {
        bool ready;
        do {
            ready = true;
            unsigned long long a[4], b[4];
#pragma unroll
            for (int j = 0; j < 4; j++)
                if (threadIdx.x + 32 * j < gridDim.x)
                    asm volatile("ld.relaxed.gpu.global.v2.u64 {%0, %1}, [%2];"
                                 : "=l"(a[j]), "=l"(b[j])
                                 : "l"(slots + 2 * (threadIdx.x + 32 * j)) : "memory");
#pragma unroll
            for (int j = 0; j < 4; j++)
                if (threadIdx.x + 32 * j < gridDim.x && ((a[j] >> 32) != target || (b[j] >> 32) != target))
                    ready = false;
            ready = __all_sync(0xffffffffu, ready);
        } while (!ready);
    }
    __syncthreads();
}

/* The row's K clusters after each one's barrier: block 0 of a cluster
 * publishes the cluster's pair tagged with the launch's target; warp 0 of
 * every block polls the row's K pairs (lane k reads cluster k's) until all
 * tags match, so no second cluster round is needed. */
__device__ __forceinline__ void tier_pairs(unsigned *counter, unsigned target, unsigned fold,
                                           int per_row)
{
    cluster_barrier();
    unsigned rank, cluster_id;
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(rank));
    asm volatile("mov.u32 %0, %%clusterid.x;" : "=r"(cluster_id));
    unsigned long long *slots = (unsigned long long *)(counter + 16) +
                                2 * (cluster_id - cluster_id % (unsigned)per_row);
    const unsigned long long tag = (unsigned long long)target << 32;
    if (rank == 0 && threadIdx.x == 0)
        asm volatile("st.relaxed.gpu.global.v2.u64 [%0], {%1, %2};"
                     ::"l"(slots + 2 * (cluster_id % per_row)), "l"(tag | fold), "l"(tag | 2u)
                     : "memory");
    if (threadIdx.x < 32) {
        bool ready;
        do {
            unsigned long long a = tag, b = tag;
            if ((int)threadIdx.x < per_row)
                asm volatile("ld.relaxed.gpu.global.v2.u64 {%0, %1}, [%2];"
                             : "=l"(a), "=l"(b) : "l"(slots + 2 * threadIdx.x) : "memory");
            ready = __all_sync(0xffffffffu, (a >> 32) == target && (b >> 32) == target);
        } while (!ready);
    }
    __syncthreads();
}

/* One exp per element of a thread's vectors (EXPS 1: eight fp16 halves a
 * vector, 2: four floats), summed: what a softmax's exp-and-sum stage
 * issues to the MUFU unit, folded into the value the exchange carries. */
template <int ITERS, int EXPS> __device__ __forceinline__ unsigned exp_sum(const uint4 (&v)[ITERS])
{
    float sum = 0.0f;
#pragma unroll
    for (int i = 0; i < ITERS; i++) {
        const unsigned w[4] = {v[i].x, v[i].y, v[i].z, v[i].w};
#pragma unroll
        for (int j = 0; j < 4; j++) {
            float x[2];
            int n = 1;
            if (EXPS == 1) {
                const __half2 h = *reinterpret_cast<const __half2 *>(&w[j]);
                x[0] = __low2float(h);
                x[1] = __high2float(h);
                n = 2;
            } else {
                x[0] = __uint_as_float(w[j]);
            }
            for (int k = 0; k < n; k++) {
                float e;
                asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(e) : "f"(fminf(x[k], 0.0f) * 1.4427f - 1.0f));
                sum += e;
            }
        }
    }
    return __float_as_uint(sum);
}

/* Register skeleton: each thread holds ITERS 16-byte vectors of its block's
 * part (vector i of the block at threadIdx.x + i * blockDim.x). */
template <int ITERS, Exchange EX, int EXPS = 0>
__global__ void skeleton(const uint4 *in, uint4 *out, long long vecs, unsigned *counter,
                         unsigned target, int per_row)
{
    if (EX == NOTHING)
        return;
    unsigned long long arrival = 0;
    if (EX == TICKET && threadIdx.x == 0)
        asm volatile("atom.relaxed.gpu.global.add.u64 %0, [%1], 1;"
                     : "=l"(arrival) : "l"((unsigned long long *)counter + 4) : "memory");
    const long long base = (long long)blockIdx.x * ITERS * blockDim.x + threadIdx.x;
    uint4 v[ITERS] = {};
#pragma unroll
    for (int i = 0; i < ITERS; i++) {
        const long long k = base + (long long)i * blockDim.x;
        if (k < vecs)
            asm volatile("ld.global.v4.u32 {%0,%1,%2,%3}, [%4];"
                         : "=r"(v[i].x), "=r"(v[i].y), "=r"(v[i].z), "=r"(v[i].w)
                         : "l"(in + k));
    }
    if (EX != COPY) {
        unsigned fold = 0;
#pragma unroll
        for (int i = 0; i < ITERS; i++)
            fold ^= v[i].x;
        if (EXPS)
            fold ^= exp_sum<ITERS, EXPS>(v);
        fold = block_fold(fold);
        if (EX == TIERS)
            tier_pairs(counter, target, fold, per_row);
        else if (EX == GRID)
            grid_barrier(counter, target, fold);
        else if (EX == CLUSTER)
            cluster_barrier();
        else {
            if (EX == TICKET && arrival == ~0ull) /* never: the exchange waits for the atomic */
                target++;
            grid_pairs(counter, target, fold);
        }
    }
#pragma unroll
    for (int i = 0; i < ITERS; i++) {
        const long long k = base + (long long)i * blockDim.x;
        if (k < vecs)
            asm volatile("st.global.v4.u32 [%0], {%1,%2,%3,%4};"
                         ::"l"(out + k), "r"(v[i].x), "r"(v[i].y), "r"(v[i].z), "r"(v[i].w)
                         : "memory");
    }
}

/* Bulk-copy skeleton: one cp.async.bulk of the block's part (part_bytes,
 * a multiple of 16) into dynamic shared memory, completing on an mbarrier;
 * then a cluster barrier (EX == CLUSTER) and stores from shared memory. */
template <Exchange EX>
__global__ void bulk_skeleton(const uint4 *in, uint4 *out, unsigned part_bytes)
{
    extern __shared__ __align__(128) uint4 stage[];
    __shared__ __align__(8) unsigned long long bar;
    const unsigned bar_addr = (unsigned)__cvta_generic_to_shared(&bar);
    const unsigned stage_addr = (unsigned)__cvta_generic_to_shared(stage);
    const char *src = (const char *)in + (size_t)blockIdx.x * part_bytes;
    if (threadIdx.x == 0) {
        asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(bar_addr) : "memory");
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
        asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;"
                     ::"r"(bar_addr), "r"(part_bytes) : "memory");
        asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes"
                     " [%0], [%1], %2, [%3];"
                     ::"r"(stage_addr), "l"(src), "r"(part_bytes), "r"(bar_addr) : "memory");
    }
    __syncthreads();
    unsigned done = 0;
    while (!done)
        asm volatile("{\n\t.reg .pred p;\n\t"
                     "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], 0;\n\t"
                     "selp.u32 %0, 1, 0, p;\n\t}"
                     : "=r"(done) : "r"(bar_addr) : "memory");
    if (EX == CLUSTER)
        cluster_barrier();
    uint4 *dst = (uint4 *)((char *)out + (size_t)blockIdx.x * part_bytes);
    for (unsigned i = threadIdx.x; i < part_bytes / 16; i += blockDim.x)
        dst[i] = stage[i];
}

/* ---- host ---- */

static void launch(const void *kernel, int blocks, int threads, int cluster, size_t smem,
                   void **args, bool coop = false)
{
    CHECK(probe_launch(kernel, blocks, threads, smem, cluster, coop, args));
}

struct Buffers {
    uint4 *in, *out;
    unsigned *counter;
    size_t bytes;
    int rows; /* the bytes are this many rows: a cluster exchange covers one */
    std::vector<unsigned char> host;
};

/* Fills b with `rows` rows of `bytes` in all (a fixed byte pattern, a
 * zeroed exchange counter) and times the copy engine's copy of them,
 * printed under the label; that copy's median. */
static float open_buffers(Timer &timer, Buffers &b, const char *label, int rows, size_t bytes)
{
    b.bytes = bytes;
    b.rows = rows;
    b.host.resize(bytes);
    for (size_t i = 0; i < bytes; i++)
        b.host[i] = (unsigned char)(i * 2654435761u >> 13);
    CHECK(cudaMalloc(&b.in, bytes));
    CHECK(cudaMalloc(&b.out, bytes));
    CHECK(cudaMalloc(&b.counter, 64 + 16 * 128));
    CHECK(cudaMemset(b.counter, 0, 64 + 16 * 128));
    CHECK(cudaMemcpy(b.in, b.host.data(), bytes, cudaMemcpyHostToDevice));
    const float copy = timer.median_us(
        [&] { CHECK(cudaMemcpyAsync(b.out, b.in, bytes, cudaMemcpyDeviceToDevice)); });
    printf("%s (%zu KB): copy engine %.2f us\n", label, bytes / 1024, copy);
    return copy;
}

static void close_buffers(Buffers &b)
{
    CHECK(cudaFree(b.in));
    CHECK(cudaFree(b.out));
    CHECK(cudaFree(b.counter));
}

/* Blocks of ITERS vectors of `threads` threads each that cover b. */
static int skeleton_blocks(const Buffers &b, int iters, int threads)
{
    const long long vecs = (long long)(b.bytes / 16);
    return (int)((vecs + (long long)iters * threads - 1) / ((long long)iters * threads));
}

/* Clusters of more than 8 blocks are non-portable: the kernel must allow them. */
static void allow_cluster(const void *kernel, int cluster)
{
    if (cluster > 8)
        CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
}

/* One launch into a cleared output: whether it holds the input. */
template <typename F> static bool copied_right(const Buffers &b, F go)
{
    CHECK(cudaMemset(b.out, 0, b.bytes));
    go();
    CHECK(cudaDeviceSynchronize());
    std::vector<unsigned char> got(b.bytes);
    CHECK(cudaMemcpy(got.data(), b.out, b.bytes, cudaMemcpyDeviceToHost));
    return got == b.host;
}

static const char *name(Exchange ex)
{
    return ex == NOTHING ? "nothing" : ex == COPY ? "copy" : ex == GRID ? "grid"
                         : ex == PAIRS ? "pairs" : ex == TICKET ? "ticket"
                         : ex == CLUSTER ? "cluster" : "tiers";
}

template <int ITERS, Exchange EX>
static void run_skeleton(Timer &timer, Buffers &b, int threads, float copy_us, int sms,
                         bool coop)
{
    const long long vecs = (long long)(b.bytes / 16);
    const int blocks = skeleton_blocks(b, ITERS, threads);
    /* one cluster a row, of at most 16 blocks; the grid barrier needs all
     * blocks resident */
    const int cluster = EX == CLUSTER ? blocks / b.rows : 1;
    if ((EX == CLUSTER && (blocks % b.rows != 0 || cluster > 16)) ||
        ((EX == GRID || EX == PAIRS || EX == TICKET) && blocks > std::min(sms, 128)))
        return;
    const void *kernel = (const void *)skeleton<ITERS, EX>;
    allow_cluster(kernel, cluster);
    int per_sm = 0;
    CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, 0));
    if (per_sm == 0)
        return; /* too many registers for the block */
    unsigned launches = 0, target = 0;
    int per_row = 1;
    void *args[] = {&b.in, &b.out, (void *)&vecs, &b.counter, &target, &per_row};
    auto go = [&] {
        target = (unsigned)blocks * ++launches;
        launch(kernel, blocks, threads, cluster, 0, args, coop);
    };
    CHECK(cudaMemset(b.counter, 0, 64 + 16 * 128));
    if (EX != NOTHING && !copied_right(b, go)) {
        printf("  %s%s G%d t%d x%d WRONG\n", name(EX), coop ? "+coop" : "", blocks, threads, ITERS);
        return;
    }
    const float t = timer.median_us(go);
    char label[32];
    snprintf(label, sizeof label, "%s%s", name(EX), coop ? "+coop" : "");
    printf("  %-13s G%-4d t%-5d x%-3d %7.2f us  copy%+.2f\n", label, blocks, threads, ITERS, t,
           t - copy_us);
}

template <Exchange EX>
static void run_bulk(Timer &timer, Buffers &b, int blocks, int threads, float copy_us)
{
    const unsigned part = (unsigned)(b.bytes / blocks);
    if (part % 16 != 0 || part > 200 * 1024 || (EX == CLUSTER && (blocks % b.rows != 0 || blocks / b.rows > 16)))
        return;
    const int cluster = EX == CLUSTER ? blocks / b.rows : 1;
    const void *kernel = (const void *)bulk_skeleton<EX>;
    CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)part));
    allow_cluster(kernel, cluster);
    void *args[] = {&b.in, &b.out, (void *)&part};
    auto go = [&] { launch(kernel, blocks, threads, cluster, part, args); };
    if (!copied_right(b, go)) {
        printf("  bulk-%-3s G%-4d t%-5d WRONG\n", EX == CLUSTER ? "cl" : "cp", blocks, threads);
        return;
    }
    const float t = timer.median_us(go);
    printf("  bulk-%-3s G%-4d t%-5d %4uKB %7.2f us  copy%+.2f\n", EX == CLUSTER ? "cl" : "cp",
           blocks, threads, part / 1024, t, t - copy_us);
}

/* Every skeleton at one G per (ITERS, threads) pair. */
template <Exchange EX>
static void run_all(Timer &timer, Buffers &b, float copy_us, int sms, bool coop = false)
{
    for (int threads : {256, 512, 1024}) {
        run_skeleton<1, EX>(timer, b, threads, copy_us, sms, coop);
        run_skeleton<2, EX>(timer, b, threads, copy_us, sms, coop);
        run_skeleton<4, EX>(timer, b, threads, copy_us, sms, coop);
        run_skeleton<8, EX>(timer, b, threads, copy_us, sms, coop);
    }
}

/* One row over K = blocks a row / cluster clusters of `cluster` blocks:
 * EX == CLUSTER needs K = 1, EX == TIERS K from 2 to 32. */
template <int ITERS, Exchange EX, int EXPS>
static void run_tier(Timer &timer, Buffers &b, int threads, int cluster, float copy_us)
{
    const long long vecs = (long long)(b.bytes / 16);
    const int blocks = skeleton_blocks(b, ITERS, threads);
    if (blocks % b.rows != 0 || (blocks / b.rows) % cluster != 0)
        return;
    int per_row = blocks / b.rows / cluster;
    if ((EX == CLUSTER && per_row != 1) || (EX == TIERS && (per_row < 2 || per_row > 32)))
        return;
    const void *kernel = (const void *)skeleton<ITERS, EX, EXPS>;
    allow_cluster(kernel, cluster);
    /* every cluster of a tiered row must be resident while it waits */
    cudaLaunchAttribute attr[2];
    const cudaLaunchConfig_t cfg = probe_config(attr, blocks, threads, 0, cluster, false);
    int fit = 0;
    CHECK(cudaOccupancyMaxActiveClusters(&fit, kernel, &cfg));
    if (fit < blocks / cluster) {
        printf("  %-13s c%-2d k%-2d G%-4d t%-5d x%-3d only %d clusters fit\n", name(EX), cluster,
               per_row, blocks, threads, ITERS, fit);
        return;
    }
    unsigned launches = 0, target = 0;
    void *args[] = {&b.in, &b.out, (void *)&vecs, &b.counter, &target, &per_row};
    bool coop = EX == TIERS;
    if (coop) {
        target = (unsigned)blocks * ++launches;
        if (probe_launch(kernel, blocks, threads, 0, cluster, true, args) != cudaSuccess) {
            (void)cudaGetLastError(); /* the driver refused coop: not sticky */
            coop = false;
        }
        CHECK(cudaDeviceSynchronize());
    }
    auto go = [&] {
        target = (unsigned)blocks * ++launches;
        launch(kernel, blocks, threads, cluster, 0, args, coop);
    };
    char label[32];
    snprintf(label, sizeof label, "%s%s%s", name(EX), EXPS ? "+exp" : "", coop ? "+coop" : "");
    if (!copied_right(b, go)) {
        printf("  %-17s c%-2d k%-2d G%-4d t%-5d x%-3d WRONG\n", label, cluster, per_row, blocks,
               threads, ITERS);
        return;
    }
    const float t = timer.median_us(go);
    printf("  %-17s c%-2d k%-2d G%-4d t%-5d x%-3d %7.2f us  copy%+.2f\n", label, cluster, per_row,
           blocks, threads, ITERS, t, t - copy_us);
}

template <Exchange EX, int EXPS>
static void run_tiers(Timer &timer, Buffers &b, float copy_us)
{
    for (int cluster : {4, 8, 16})
        for (int threads : {256, 512, 1024}) {
            run_tier<1, EX, EXPS>(timer, b, threads, cluster, copy_us);
            run_tier<2, EX, EXPS>(timer, b, threads, cluster, copy_us);
            run_tier<4, EX, EXPS>(timer, b, threads, cluster, copy_us);
            run_tier<8, EX, EXPS>(timer, b, threads, cluster, copy_us);
        }
}

/* `floor_probe tiers`: one cluster a row against K clusters a row, with
 * and without the exps, on the shapes a row's cluster of 16 SMs bounds. */
static void probe_tiers(Timer &timer, const char *label, int rows, size_t bytes, bool fp32)
{
    Buffers b;
    const float copy = open_buffers(timer, b, label, rows, bytes);
    run_tiers<CLUSTER, 0>(timer, b, copy);
    run_tiers<TIERS, 0>(timer, b, copy);
    if (fp32) {
        run_tiers<CLUSTER, 2>(timer, b, copy);
        run_tiers<TIERS, 2>(timer, b, copy);
    } else {
        run_tiers<CLUSTER, 1>(timer, b, copy);
        run_tiers<TIERS, 1>(timer, b, copy);
    }
    close_buffers(b);
}

static void probe(Timer &timer, const char *label, int rows, size_t bytes, int sms)
{
    Buffers b;
    const float copy = open_buffers(timer, b, label, rows, bytes);
    for (int blocks : {16, 132})
        for (int threads : {128, 512}) {
            unsigned zero = 0;
            long long none = 0;
            int one = 1;
            void *args[] = {&b.in, &b.out, &none, &b.counter, &zero, &one};
            const float t = timer.median_us(
                [&] { launch((const void *)skeleton<1, NOTHING>, blocks, threads, 1, 0, args); });
            printf("  nothing       G%-4d t%-5d       %7.2f us  copy%+.2f\n", blocks, threads, t,
                   t - copy);
            const float tc = timer.median_us([&] {
                launch((const void *)skeleton<1, NOTHING>, blocks, threads, 1, 0, args, true);
            });
            printf("  nothing+coop  G%-4d t%-5d       %7.2f us  copy%+.2f\n", blocks, threads, tc,
                   tc - copy);
        }
    run_all<COPY>(timer, b, copy, sms);
    run_all<GRID>(timer, b, copy, sms, true);
    run_all<PAIRS>(timer, b, copy, sms, true);
    run_all<TICKET>(timer, b, copy, sms, true);
    run_all<CLUSTER>(timer, b, copy, sms);
    for (int blocks : {8, 16, 32, 64, 128})
        for (int threads : {256, 512}) {
            run_bulk<COPY>(timer, b, blocks, threads, copy);
            run_bulk<CLUSTER>(timer, b, blocks, threads, copy);
        }
    close_buffers(b);
}

int main(int argc, char **argv)
{
    cudaDeviceProp prop;
    CHECK(cudaGetDeviceProperties(&prop, 0));
    printf("device: %s, %d SMs, L2 %d MiB\n", prop.name, prop.multiProcessorCount,
           prop.l2CacheSize >> 20);
    Timer timer(60, 100000); /* the evaluator's 100 us settle */
    if (argc > 1 && strcmp(argv[1], "tiers") == 0) {
        probe_tiers(timer, "1x128256 fp16", 1, 128256 * 2, false);
        probe_tiers(timer, "1x262144 fp16", 1, 262144 * 2, false);
        probe_tiers(timer, "1x262144 fp32", 1, 262144 * 4, true);
        probe_tiers(timer, "8x128256 fp16", 8, 8 * 128256 * 2, false);
        probe_tiers(timer, "8x262144 fp16", 8, 8 * 262144 * 2, false);
        return 0;
    }
    probe(timer, "1x128256 fp16", 1, 128256 * 2, prop.multiProcessorCount);
    probe(timer, "1x262144 fp16", 1, 262144 * 2, prop.multiProcessorCount);
    probe(timer, "1x262144 fp32", 1, 262144 * 4, prop.multiProcessorCount);
    probe(timer, "8x262144 fp16", 8, 8 * 262144 * 2, prop.multiProcessorCount);
    return 0;
}
