/* softmax_rows.cu: family "rows": a row held in registers by a group of
 * threads: part of a warp (short rows), one or more warps, a whole block, or
 * a thread-block cluster of up to 16 blocks (long rows, sm_90).
 *
 * Idea: softmax is memory-bound, so every element is read once and written
 * once. A group of TPR = T_WARPS*32/T_ROWS threads in each of T_CLUSTER
 * blocks owns one row. Each thread
 * issues all of its T_ITERS vector loads (T_VEC elements each, at most 16
 * bytes) before the first reduction, reduces the row maximum and then the sum
 * of exp(x - max) across the group (warp shuffles, then shared memory across
 * the group's warps, then across the cluster's blocks through distributed
 * shared memory), and writes exp(x - max) / sum. Rows need not start on a
 * vector boundary: vector slots are counted from the aligned address at or
 * below the row start, and the partial first and last vectors go element by
 * element.
 *
 * Variants (codegen prepends the defines, then softmax_common.cu):
 *   T_DTYPE      0 fp16, 1 bf16, 2 fp32 (math is always fp32)
 *   T_WARPS      warps per block: 1, 2, 4, 8, 16, 32
 *   T_ROWS       rows per block: threads per row = T_WARPS*32/T_ROWS, 1 to 1024
 *   T_CLUSTER    blocks per row (a cluster, sm_90; 1 = no cluster; then T_ROWS = 1)
 *   T_HEAD_FREE  1 when every row starts on a vector boundary (aligned base
 *                pointers, columns a multiple of T_VEC): no partial head
 *   T_MIN_BLOCKS blocks per SM the registers must leave room for (1, 2, 4)
 *   T_VEC        elements per vector access (T_VEC * element size <= 16 bytes)
 *   T_ITERS      vector accesses per thread per row (from the column count)
 *   T_LD         0 ld.global, 1 .nc, 2 .cs (evict-first), 3 L2 evict_last policy
 *   T_ST         0 st.global, 1 .cs (evict-first)
 *   T_REG_PACKED 0: keep fp32 values; 1: keep the loaded words, convert on use
 *   T_PLANT_BUG  test only: 1 skips the last element of each row, 2 writes
 *                one element past the end of the last row
 *
 * Semantics match torch.softmax on the last dimension: the maximum ignores
 * NaN (fmaxf), and then a NaN or +inf in a row, or a row of only -inf,
 * makes the whole row NaN through the sum.
 *
 * Checked against: the float64 reference in reference.cu (per element, with
 * dtype tolerances, NaN for NaN), itself checked against a CPU float64
 * softmax by the evaluator before any variant is timed. */

#define TPR (T_WARPS * 32 / T_ROWS)
#define VBYTES (T_VEC * ESIZE)
#define NWORDS (VBYTES >= 4 ? VBYTES / 4 : 1)

/* The bit pattern of -inf, used for slots outside the row. */
#if T_DTYPE == 0
#define NEG_INF_BITS 0xFC00u
#elif T_DTYPE == 1
#define NEG_INF_BITS 0xFF80u
#else
#define NEG_INF_BITS 0xFF800000u
#endif

/* ---- loads and stores with the variant's cache hints ---- */

#if T_LD == 0
#define LD_OP "ld.global"
#define LD_POLICY_ARG
#elif T_LD == 1
#define LD_OP "ld.global.nc"
#define LD_POLICY_ARG
#elif T_LD == 2
#define LD_OP "ld.global.cs"
#define LD_POLICY_ARG
#else
#define LD_OP "ld.global.L2::cache_hint"
#define LD_POLICY_ARG , "l"(policy)
#endif

#if T_LD == 3
#define POLICY_OPERAND ", %2"
#define POLICY_OPERAND_V2 ", %3"
#define POLICY_OPERAND_V4 ", %5"
#else
#define POLICY_OPERAND
#define POLICY_OPERAND_V2
#define POLICY_OPERAND_V4
#endif

__device__ __forceinline__ u64 make_policy()
{
    u64 policy = 0;
#if T_LD == 3
    asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(policy));
#endif
    return policy;
}

/* One element's bits from address p. */
__device__ __forceinline__ u32 load_elem(const unsigned char *p, u64 policy)
{
    (void)policy;
#if ESIZE == 2
    u16 h;
    asm volatile(LD_OP ".u16 %0, [%1]" POLICY_OPERAND ";" : "=h"(h) : "l"(p) LD_POLICY_ARG);
    return h;
#else
    u32 w;
    asm volatile(LD_OP ".u32 %0, [%1]" POLICY_OPERAND ";" : "=r"(w) : "l"(p) LD_POLICY_ARG);
    return w;
#endif
}

/* One whole vector (VBYTES, aligned) from p into w. */
__device__ __forceinline__ void load_vec(const unsigned char *p, u32 (&w)[NWORDS], u64 policy)
{
    (void)policy;
#if VBYTES == 2
    w[0] = load_elem(p, policy);
#elif VBYTES == 4
    asm volatile(LD_OP ".u32 %0, [%1]" POLICY_OPERAND ";" : "=r"(w[0]) : "l"(p) LD_POLICY_ARG);
#elif VBYTES == 8
    asm volatile(LD_OP ".v2.u32 {%0, %1}, [%2]" POLICY_OPERAND_V2 ";"
                 : "=r"(w[0]), "=r"(w[1]) : "l"(p) LD_POLICY_ARG);
#else
    asm volatile(LD_OP ".v4.u32 {%0, %1, %2, %3}, [%4]" POLICY_OPERAND_V4 ";"
                 : "=r"(w[0]), "=r"(w[1]), "=r"(w[2]), "=r"(w[3]) : "l"(p) LD_POLICY_ARG);
#endif
}

__device__ __forceinline__ void store_vec(unsigned char *p, const u32 (&w)[NWORDS])
{
#if VBYTES == 2
    store_elem(p, w[0]);
#elif VBYTES == 4
    asm volatile(ST_OP ".u32 [%0], %1;" : : "l"(p), "r"(w[0]) : "memory");
#elif VBYTES == 8
    asm volatile(ST_OP ".v2.u32 [%0], {%1, %2};" : : "l"(p), "r"(w[0]), "r"(w[1]) : "memory");
#else
    asm volatile(ST_OP ".v4.u32 [%0], {%1, %2, %3, %4};"
                 : : "l"(p), "r"(w[0]), "r"(w[1]), "r"(w[2]), "r"(w[3]) : "memory");
#endif
}

/* Element k of a vector held as words. */
__device__ __forceinline__ u32 word_elem(const u32 (&w)[NWORDS], int k)
{
#if ESIZE == 2 && VBYTES >= 4
    return (w[k / 2] >> (16 * (k % 2))) & 0xFFFFu;
#else
    return w[k];
#endif
}

__device__ __forceinline__ void word_set(u32 (&w)[NWORDS], int k, u32 bits)
{
#if ESIZE == 2 && VBYTES >= 4
    if (k % 2 == 0)
        w[k / 2] = (w[k / 2] & 0xFFFF0000u) | bits;
    else
        w[k / 2] = (w[k / 2] & 0x0000FFFFu) | (bits << 16);
#else
    w[k] = bits;
#endif
}

/* Element k of a vector held as words, as fp32: for 16-bit types the half
 * is taken straight from its word (bf16: a shift or a mask). */
__device__ __forceinline__ float word_float(const u32 (&w)[NWORDS], int k)
{
#if ESIZE == 2 && VBYTES >= 4
#if T_DTYPE == 1
    return __uint_as_float(k % 2 ? w[k / 2] & 0xFFFF0000u : w[k / 2] << 16);
#else
    float f;
    if (k % 2)
        asm("{ .reg .b16 lo, hi; mov.b32 {lo, hi}, %1; cvt.f32.f16 %0, hi; }" : "=f"(f) : "r"(w[k / 2]));
    else
        asm("{ .reg .b16 lo, hi; mov.b32 {lo, hi}, %1; cvt.f32.f16 %0, lo; }" : "=f"(f) : "r"(w[k / 2]));
    return f;
#endif
#else
    return bits_to_float(word_elem(w, k));
#endif
}

/* ---- reductions over the threads of one row ---- */

/* Reduces v over the TPR threads of this thread's row in this block and,
 * with a cluster, over the T_CLUSTER blocks that share the row. Groups of
 * fewer than 32 threads are aligned power-of-two lane ranges, so xor
 * shuffles with offsets below TPR stay inside the group. partial has a
 * slot per warp and exchange one per cluster block; each reduction uses
 * its own arrays so that no barrier is needed before reuse. */
template <typename Op>
__device__ __forceinline__ float row_reduce(float v, float *partial, float *exchange, Op op)
{
#pragma unroll
    for (int offset = (TPR < 32 ? TPR : 32) / 2; offset > 0; offset /= 2)
        v = op(v, __shfl_xor_sync(0xFFFFFFFFu, v, offset));
#if TPR > 32
    const int warp = threadIdx.x / 32;
    if (threadIdx.x % 32 == 0)
        partial[warp] = v;
    __syncthreads();
    const int first_warp = (threadIdx.x / TPR) * (TPR / 32);
    v = partial[first_warp];
#pragma unroll
    for (int i = 1; i < TPR / 32; i++)
        v = op(v, partial[first_warp + i]);
#else
    (void)partial;
#endif
#if T_CLUSTER > 1
    /* One row per block (T_ROWS == 1): thread 0 publishes the block's
     * value, and every thread combines all blocks' values in rank order,
     * so every block computes the same result. */
    if (threadIdx.x == 0)
        exchange[0] = v;
    cluster_sync();
    v = load_remote(exchange, 0);
#pragma unroll
    for (unsigned r = 1; r < T_CLUSTER; r++)
        v = op(v, load_remote(exchange, r));
#else
    (void)exchange;
#endif
    return v;
}

extern "C" __global__ void __launch_bounds__(T_WARPS * 32, T_MIN_BLOCKS) CLUSTER_ATTRIBUTE
tuned_softmax_rows(const unsigned char *x, unsigned char *y, long long rows, int cols,
                   long long row_stride)
{
    __shared__ float partial_max[T_WARPS];
    __shared__ float partial_sum[T_WARPS];
    __shared__ float exchange_max[1];
    __shared__ float exchange_sum[1];

#if T_CLUSTER > 1
    /* The row's threads are the TPR threads of each of the cluster's
     * blocks, numbered block by block. */
    const int lane = (int)cluster_rank() * TPR + (int)threadIdx.x % TPR;
    const long long row = (long long)(blockIdx.x / T_CLUSTER) * T_ROWS + threadIdx.x / TPR;
#else
    const int lane = threadIdx.x % TPR;
    const long long row = (long long)blockIdx.x * T_ROWS + threadIdx.x / TPR;
#endif
#define ROW_THREADS (TPR * T_CLUSTER)
    /* Threads past the last row still take part in the barriers. */
    const bool active = row < rows;
    const long long row_bytes = (active ? row : 0) * row_stride * ESIZE;
    const unsigned char *xr = x + row_bytes;
    unsigned char *yr = y + row_bytes;
#if T_HEAD_FREE
    /* Codegen knows every row starts on a vector boundary. */
    const int head = 0;
    const bool y_aligned = true;
#else
    const int head = (int)(((u64)xr / ESIZE) % T_VEC);
    /* Output vectors line up with the input's only when both start at the
     * same offset inside a vector; otherwise every store is per element. */
    const bool y_aligned = (int)(((u64)yr / ESIZE) % T_VEC) == head;
#endif
    const unsigned char *xv = xr - head * ESIZE;
    const u64 policy = make_policy();

    u32 w[T_ITERS][NWORDS];
#pragma unroll
    for (int it = 0; it < T_ITERS; it++) {
        const int first = (it * ROW_THREADS + lane) * T_VEC - head;
        if (active && first >= 0 && first + T_VEC <= cols) {
            load_vec(xv + (long long)(it * ROW_THREADS + lane) * VBYTES, w[it], policy);
        } else {
#pragma unroll
            for (int k = 0; k < NWORDS; k++)
                w[it][k] = 0;
#pragma unroll
            for (int k = 0; k < T_VEC; k++) {
                const int c = first + k;
                const u32 bits = (active && c >= 0 && c < cols)
                                     ? load_elem(xr + (long long)c * ESIZE, policy)
                                     : NEG_INF_BITS;
                word_set(w[it], k, bits);
            }
        }
    }

#if !T_REG_PACKED
    float v[T_ITERS][T_VEC];
#pragma unroll
    for (int it = 0; it < T_ITERS; it++)
#pragma unroll
        for (int k = 0; k < T_VEC; k++)
            v[it][k] = word_float(w[it], k);
#define VALUE(it, k) v[it][k]
#else
#define VALUE(it, k) word_float(w[it], k)
#endif

    float max = -__int_as_float(0x7f800000);
#pragma unroll
    for (int it = 0; it < T_ITERS; it++)
#pragma unroll
        for (int k = 0; k < T_VEC; k++)
            max = fmaxf(max, VALUE(it, k));
    max = row_reduce(max, partial_max, exchange_max, MaxOp());

    float sum = 0.0f;
#pragma unroll
    for (int it = 0; it < T_ITERS; it++)
#pragma unroll
        for (int k = 0; k < T_VEC; k++) {
#if !T_REG_PACKED
            v[it][k] = exp_shifted(v[it][k], max);
            sum += v[it][k];
#else
            sum += exp_shifted(VALUE(it, k), max);
#endif
        }
    sum = row_reduce(sum, partial_sum, exchange_sum, SumOp());
    const float inv = __frcp_rn(sum);
#if T_CLUSTER > 1
    /* No block may exit while another still reads its shared memory. */
    cluster_sync();
#endif

    if (!active)
        return;
#pragma unroll
    for (int it = 0; it < T_ITERS; it++) {
        const int first = (it * ROW_THREADS + lane) * T_VEC - head;
        u32 out[NWORDS] = {};
#if !T_REG_PACKED
#define EXPONENTIAL(it, k) v[it][k]
#else
#define EXPONENTIAL(it, k) exp_shifted(VALUE(it, k), max)
#endif
#if ESIZE == 2 && VBYTES >= 4
#pragma unroll
        for (int k = 0; k < T_VEC; k += 2)
            out[k / 2] = pack_pair(EXPONENTIAL(it, k) * inv, EXPONENTIAL(it, k + 1) * inv);
#else
#pragma unroll
        for (int k = 0; k < T_VEC; k++)
            word_set(out, k, float_to_bits(EXPONENTIAL(it, k) * inv));
#endif
        const bool whole = y_aligned && first >= 0 && first + T_VEC <= cols &&
                           !(T_PLANT_BUG == 1 && first + T_VEC == cols);
        if (whole) {
            store_vec(yr + (long long)first * ESIZE, out);
        } else {
#pragma unroll
            for (int k = 0; k < T_VEC; k++) {
                const int c = first + k;
                if (c >= 0 && c < cols && !(T_PLANT_BUG == 1 && c == cols - 1))
                    store_elem(yr + (long long)c * ESIZE, word_elem(out, k));
            }
        }
    }
#if T_PLANT_BUG == 2
    if (row == rows - 1 && lane == 0)
        store_elem(yr + (long long)cols * ESIZE, 0);
#endif
}
