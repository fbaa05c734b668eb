/* softmax_staged.cu: family "tma", rows streamed into shared memory by the
 * Hopper bulk copy engine, several rows in flight per block (sm_90).
 *
 * Idea: a register-held row ends every block's life in a load phase, then a
 * reduce phase, then a store phase, and the SM's memory pipe idles between.
 * Here a persistent block (or cluster of blocks) walks over rows g, g + G,
 * g + 2G, ...; T_STAGES shared-memory buffers each hold one row (or this
 * block's slice of it), filled by one `cp.async.bulk` (the TMA engine)
 * completing on an mbarrier, so while the block reduces and writes one row
 * the next T_STAGES - 1 rows are already on their way. The 16-byte-aligned
 * body of a row goes through the copy engine; the few elements before and
 * after it (rows need not start on 16 bytes) are loaded directly. With a
 * cluster, each block takes a contiguous slice of every row and the (max,
 * sum) pair is exchanged through distributed shared memory. Each row runs
 * the stages load (issue_row ahead of time; the edges, then the wait for
 * the stage), max, reduce (block_reduce), exp-and-sum, reduce, store, and
 * its stage is refilled with a later row. (The stages take scalars, not
 * structs: a struct of the row's edges changed the machine code.)
 *
 * Softmax, or with T_LOG log_softmax, of s x (s the scale parameter, s > 0).
 *
 * Variants (codegen prepends the defines, then softmax_common.cu):
 *   1. T_DTYPE       0 fp16, 1 bf16, 2 fp32 (math is always fp32)
 *   2. T_WARPS       warps per block: 1 .. 32
 *   3. T_CLUSTER     blocks per row (a cluster): 1, 2, 4, 8, 16
 *   4. T_STAGES      rows in flight per block: 1 .. 4
 *   5. T_STAGE_BYTES bytes of one stage (the largest slice of a row body)
 *   6. T_ST          0 st.global, 1 .cs (evict-first)
 *   7. T_LOG         1: log_softmax; absent means 0
 *
 * Semantics as softmax_rows_common.cu (torch.softmax on the last dimension).
 * Checked against: the float64 reference in reference.cu, like every family. */

#ifndef T_LOG
#define T_LOG 0
#endif

#define THREADS (T_WARPS * 32)
#define PER_UNIT (16 / ESIZE) /* elements per 16-byte unit */

__device__ __forceinline__ u32 load_elem(const unsigned char *p)
{
#if ESIZE == 2
    u16 h;
    asm volatile("ld.global.nc.u16 %0, [%1];" : "=h"(h) : "l"(p));
    return h;
#else
    u32 w;
    asm volatile("ld.global.nc.u32 %0, [%1];" : "=r"(w) : "l"(p));
    return w;
#endif
}

__device__ __forceinline__ void store_unit(unsigned char *p, const u32 (&w)[4])
{
    asm volatile(ST_OP ".v4.u32 [%0], {%1, %2, %3, %4};"
                 : : "l"(p), "r"(w[0]), "r"(w[1]), "r"(w[2]), "r"(w[3]) : "memory");
}

__device__ __forceinline__ u32 unit_elem(const u32 (&w)[4], int k)
{
#if ESIZE == 2
    return (w[k / 2] >> (16 * (k % 2))) & 0xFFFFu;
#else
    return w[k];
#endif
}

__device__ __forceinline__ void unit_set(u32 (&w)[4], int k, u32 bits)
{
#if ESIZE == 2
    w[k / 2] = k % 2 ? (w[k / 2] & 0x0000FFFFu) | (bits << 16) : (w[k / 2] & 0xFFFF0000u) | bits;
#else
    w[k] = bits;
#endif
}

/* Element k of a 16-byte unit as fp32 (bf16: a shift or a mask). */
__device__ __forceinline__ float unit_float(const u32 (&w)[4], int k)
{
#if T_DTYPE == 1
    return __uint_as_float(k % 2 ? w[k / 2] & 0xFFFF0000u : w[k / 2] << 16);
#else
    return bits_to_float(unit_elem(w, k));
#endif
}

/* ---- shared memory, mbarriers and the bulk copy engine ---- */

__device__ __forceinline__ void load_unit_shared(u32 addr, u32 (&w)[4])
{
    asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(w[0]), "=r"(w[1]), "=r"(w[2]), "=r"(w[3]) : "r"(addr));
}

__device__ __forceinline__ void mbar_init(u32 bar)
{
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" : : "r"(bar) : "memory");
}

/* One arrival that also announces the bytes the copy will deliver. */
__device__ __forceinline__ void mbar_expect(u32 bar, u32 bytes)
{
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;"
                 : : "r"(bar), "r"(bytes) : "memory");
}

__device__ __forceinline__ void mbar_wait(u32 bar, u32 parity)
{
    u32 done = 0;
    while (!done)
        asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;"
                     " selp.u32 %0, 1, 0, p; }"
                     : "=r"(done) : "r"(bar), "r"(parity) : "memory");
}

__device__ __forceinline__ void bulk_copy(u32 dst, const unsigned char *src, u32 bytes, u32 bar)
{
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes"
                 " [%0], [%1], %2, [%3];"
                 : : "r"(dst), "l"(src), "r"(bytes), "r"(bar) : "memory");
}

/* ---- reductions over the block and the cluster ---- */

#if T_CLUSTER > 1
#define RANK cluster_rank()
#else
#define RANK 0u
#endif

/* Reduces v over the block, then over the cluster (exchange is this row's
 * slot: the slots alternate between rows, and the cluster barriers of row
 * k+1 keep row k+2 from overwriting a slot row k still reads). */
template <typename Op>
__device__ __forceinline__ float block_reduce(float v, float *partial, float *exchange, Op op)
{
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2)
        v = op(v, __shfl_xor_sync(0xFFFFFFFFu, v, offset));
#if T_WARPS > 1
    if (threadIdx.x % 32 == 0)
        partial[threadIdx.x / 32] = v;
    __syncthreads();
    v = partial[0];
#pragma unroll
    for (int i = 1; i < T_WARPS; i++)
        v = op(v, partial[i]);
#endif
#if T_CLUSTER > 1
    v = cluster_reduce(v, exchange, op);
#else
    (void)exchange;
#endif
    return v;
}

/* Where this block's part of a row lies. */
struct Slice {
    const unsigned char *xr; /* row start */
    unsigned char *yr;
    const unsigned char *body; /* first 16-byte boundary in the row */
    int head, tail;            /* elements before and after the 16-byte body */
    u32 unit0, units;          /* this block's 16-byte units of the body */
};

__device__ __forceinline__ Slice slice_of(const unsigned char *x, unsigned char *y, long long row,
                                          int cols, long long row_stride, unsigned rank)
{
    Slice s;
    s.xr = x + row * row_stride * ESIZE;
    s.yr = y + row * row_stride * ESIZE;
    const u64 start = (u64)s.xr, end = start + (u64)cols * ESIZE;
    u64 body_start = (start + 15) & ~15ull, body_end = end & ~15ull;
    if (body_end < body_start)
        body_end = body_start = end; /* no whole unit: all head */
    s.body = (const unsigned char *)body_start;
    s.head = (int)((body_start - start) / ESIZE);
    s.tail = (int)((end - body_end) / ESIZE);
    const u32 total = (u32)((body_end - body_start) / 16);
    const u32 per_block = (total + T_CLUSTER - 1) / T_CLUSTER;
    s.unit0 = rank * per_block < total ? rank * per_block : total;
    s.units = s.unit0 + per_block <= total ? per_block : total - s.unit0;
    return s;
}

/* load, started ahead: the copy of this block's slice of a row into a
 * stage, completing on the stage's mbarrier. */
__device__ __forceinline__ void issue_row(const Slice &s, u32 stage, u32 bar)
{
    mbar_expect(bar, s.units * 16);
    if (s.units > 0)
        bulk_copy(stage, s.body + (u64)s.unit0 * 16, s.units * 16, bar);
}

/* ---- the stages ---- */

/* max: this thread's maximum over its row edges and its units of the stage. */
__device__ __forceinline__ float thread_max(u32 stage, u32 units, float head_v, float tail_v)
{
    float max = fmaxf(head_v, tail_v);
    for (u32 u = threadIdx.x; u < units; u += THREADS) {
        u32 w[4];
        load_unit_shared(stage + u * 16, w);
#pragma unroll
        for (int e = 0; e < PER_UNIT; e++)
            max = fmaxf(max, unit_float(w, e));
    }
    return max;
}

/* exp-and-sum: this thread's sum of exp(s (x - max)), max the row's. */
__device__ __forceinline__ float exp_and_sum(u32 stage, u32 units, bool has_head, float head_v,
                                             bool has_tail, float tail_v, float max, float ks)
{
    float sum = (has_head ? exp_shifted(head_v, max, ks) : 0.0f) +
                (has_tail ? exp_shifted(tail_v, max, ks) : 0.0f);
    for (u32 u = threadIdx.x; u < units; u += THREADS) {
        u32 w[4];
        load_unit_shared(stage + u * 16, w);
#pragma unroll
        for (int e = 0; e < PER_UNIT; e++)
            sum += exp_shifted(unit_float(w, e), max, ks);
    }
    return sum;
}

/* One output element of input v: exp(s (v - max)) * inv, or with T_LOG
 * s (v - max) - log_sum. */
__device__ __forceinline__ float out_elem(float v, float max, float inv, float ks, float scale,
                                          float log_sum)
{
#if T_LOG
    (void)inv, (void)ks;
    return (v - max) * scale - log_sum;
#else
    (void)scale, (void)log_sum;
    return exp_shifted(v, max, ks) * inv;
#endif
}

/* store: out_elem for the row's edges and the thread's units. */
__device__ __forceinline__ void store_row(u32 stage, const Slice &s, bool has_head, float head_v,
                                          bool has_tail, float tail_v, u64 tail_off, float max,
                                          float inv, float ks, float scale, float log_sum)
{
    if (has_head)
        store_elem(s.yr + threadIdx.x * ESIZE,
                   float_to_bits(out_elem(head_v, max, inv, ks, scale, log_sum)));
    if (has_tail)
        store_elem(s.yr + tail_off, float_to_bits(out_elem(tail_v, max, inv, ks, scale, log_sum)));
    /* y's body lines up with 16 bytes only when y and x share their
     * offset inside 16 bytes; otherwise it is written element by element. */
    unsigned char *ybody = s.yr + (s.body - s.xr);
    const bool y_aligned = ((u64)ybody & 15) == 0;
    for (u32 u = threadIdx.x; u < s.units; u += THREADS) {
        u32 w[4], out[4] = {0, 0, 0, 0};
        load_unit_shared(stage + u * 16, w);
#if ESIZE == 2
#pragma unroll
        for (int e = 0; e < PER_UNIT; e += 2)
            out[e / 2] = pack_pair(out_elem(unit_float(w, e), max, inv, ks, scale, log_sum),
                                   out_elem(unit_float(w, e + 1), max, inv, ks, scale, log_sum));
#else
#pragma unroll
        for (int e = 0; e < PER_UNIT; e++)
            unit_set(out, e,
                     float_to_bits(out_elem(unit_float(w, e), max, inv, ks, scale, log_sum)));
#endif
        unsigned char *dst = ybody + (u64)(s.unit0 + u) * 16;
        if (y_aligned) {
            store_unit(dst, out);
        } else {
#pragma unroll
            for (int e = 0; e < PER_UNIT; e++)
                store_elem(dst + e * ESIZE, unit_elem(out, e));
        }
    }
}

extern "C" __global__ void __launch_bounds__(THREADS, 1) CLUSTER_ATTRIBUTE
tuned_softmax_staged(const unsigned char *x, unsigned char *y, long long rows, int cols,
                     long long row_stride, float scale)
{
    const float ks = scale * LOG2E;
    extern __shared__ __align__(128) unsigned char stage_mem[];
    __shared__ __align__(8) u64 bars[T_STAGES];
    __shared__ float partial_max[T_WARPS], partial_sum[T_WARPS];
    __shared__ float exchange_max[2], exchange_sum[2];

    const unsigned rank = RANK;
    const long long group = blockIdx.x / T_CLUSTER;
    const long long groups = gridDim.x / T_CLUSTER;
    const u32 stage0 = smem_addr(stage_mem);
    const u32 bar0 = smem_addr(bars);

    if (threadIdx.x == 0) {
        for (int st = 0; st < T_STAGES; st++)
            mbar_init(bar0 + 8 * st);
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
        for (int st = 0; st < T_STAGES; st++) {
            const long long row = group + st * groups;
            if (row < rows)
                issue_row(slice_of(x, y, row, cols, row_stride, rank),
                          stage0 + st * T_STAGE_BYTES, bar0 + 8 * st);
        }
    }
    __syncthreads();

    long long k = 0;
    for (long long row = group; row < rows; row += groups, k++) {
        const int st = (int)(k % T_STAGES);
        const u32 stage = stage0 + st * T_STAGE_BYTES;
        const Slice s = slice_of(x, y, row, cols, row_stride, rank);
        /* load: the row's body is in the stage (issue_row); the head
         * belongs to the first block, the tail to the last, and their
         * loads go out before the wait for the body. */
        const bool has_head = rank == 0 && (int)threadIdx.x < s.head;
        const bool has_tail = rank == T_CLUSTER - 1 && (int)threadIdx.x < s.tail;
        const u64 tail_off = (u64)(cols - s.tail + (int)threadIdx.x) * ESIZE;
        const float head_v = has_head ? bits_to_float(load_elem(s.xr + threadIdx.x * ESIZE)) : NEG_INF;
        const float tail_v = has_tail ? bits_to_float(load_elem(s.xr + tail_off)) : NEG_INF;
        mbar_wait(bar0 + 8 * st, (u32)((k / T_STAGES) & 1));

        float max = thread_max(stage, s.units, head_v, tail_v);
        max = block_reduce(max, partial_max, &exchange_max[k & 1], MaxOp());

        float sum = exp_and_sum(stage, s.units, has_head, head_v, has_tail, tail_v, max, ks);
        sum = block_reduce(sum, partial_sum, &exchange_sum[k & 1], SumOp());
#if T_LOG
        const float inv = 0.0f, log_sum = logf(sum);
#else
        const float inv = __frcp_rn(sum), log_sum = 0.0f;
#endif

        store_row(stage, s, has_head, head_v, has_tail, tail_v, tail_off, max, inv, ks, scale,
                  log_sum);
        /* Every thread is done with this stage: refill it with a later row. */
        __syncthreads();
        const long long next = row + (long long)T_STAGES * groups;
        if (threadIdx.x == 0 && next < rows) {
            asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
            issue_row(slice_of(x, y, next, cols, row_stride, rank), stage, bar0 + 8 * st);
        }
    }
#if T_CLUSTER > 1
    /* No block may exit while another still reads its shared memory. */
    cluster_sync();
#endif
}
