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
 * shared memory), and writes exp(x - max) / sum. With T_FUSED the two
 * reductions are one: each thread sums exp(x - its own max) and the (max,
 * sum) pairs are combined level by level, every sum rescaled by exp(its max
 * - the larger max) (online softmax), which halves the block and cluster
 * barriers. The cluster's last barrier (no block may exit while another
 * reads its shared memory) is split: arrive after the last remote read,
 * wait after the stores. With T_GRID > 1 a row is cut across T_GRID blocks
 * of the grid instead, all resident at once (a cooperative launch): each
 * block publishes its (max, sum) pair in a workspace, tagged with the
 * launch's ticket, and reads the row's other pairs once their tags match
 * (one round, no counters to reset). Rows need not start on a
 * vector boundary: vector slots are counted from the aligned address at or
 * below the row start, and the partial first and last vectors go element by
 * element.
 *
 * Variants (codegen prepends the defines, then softmax_common.cu):
 *   T_DTYPE      0 fp16, 1 bf16, 2 fp32 (math is always fp32)
 *   T_WARPS      warps per block: 1, 2, 4, 8, 16, 32
 *   T_ROWS       rows per block: threads per row = T_WARPS*32/T_ROWS, 1 to 1024
 *   T_CLUSTER    blocks per row (a cluster, sm_90; 1 = no cluster; then T_ROWS = 1)
 *   T_GRID       blocks per row through global memory (1 = none; else T_ROWS = 1,
 *                T_CLUSTER = 1, T_FUSED = 1, and the kernel takes two more
 *                parameters: the workspace and the launch's ticket, never 0)
 *   T_GRID_SLOTS slots of the workspace; launch t uses slot t % T_GRID_SLOTS
 *   T_HEAD_FREE  1 when every row starts on a vector boundary (aligned base
 *                pointers, columns a multiple of T_VEC): no partial head, and
 *                every vector lies wholly inside its row or wholly past its
 *                end, so an access is one predicated vector instruction, and
 *                none at all where T_COLS shows every thread's slot inside
 *   T_MIN_BLOCKS blocks per SM the registers must leave room for (1, 2, 4)
 *   T_VEC        elements per vector access (T_VEC * element size <= 16 bytes)
 *   T_ITERS      vector accesses per thread per row (from the column count)
 *   T_COLS       the column count the source is generated for; the kernel's
 *                cols parameter must equal it (launchers pass the shape's)
 *   T_LD         0 ld.global, 1 .nc, 2 .cs (evict-first), 3 L2 evict_last policy
 *   T_ST         0 st.global, 1 .cs (evict-first)
 *   T_REG_PACKED 0: keep fp32 values; 1: keep the loaded words, convert on use
 *                (the maximum then taken on the packed pairs: max.f16x2 or
 *                max.bf16x2, no conversion)
 *   T_EXP16      with T_REG_PACKED (16-bit types): the words are overwritten
 *                by their exp values rounded to the dtype, so exp is computed
 *                once; the output is rounded twice (within 1 ulp, not 1/2)
 *   T_FUSED      0: max, then sum (two rounds); 1: (max, sum) pairs, one round
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
/* With T_HEAD_FREE: whether pass it of every row thread lies inside the row
 * (known when the source is generated), so it needs no bounds check. */
#define PASS_INSIDE(it) (T_HEAD_FREE && ((it) + 1) * ROW_THREADS * T_VEC <= T_COLS)
#define VBYTES (T_VEC * ESIZE)
#define NWORDS (VBYTES >= 4 ? VBYTES / 4 : 1)
#if T_EXP16 && !(T_REG_PACKED && ESIZE == 2 && VBYTES >= 4)
#error "T_EXP16 needs packed registers of a 16-bit type, vectors of 4 bytes or more"
#endif

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
    /* A mask or a shift, in asm like fp16's cvt: as plain code ptxas
     * shares it between the passes and the packed variants spill. */
    float f;
    if (k % 2)
        asm("{ .reg .b32 b; and.b32 b, %1, 0xFFFF0000; mov.b32 %0, b; }" : "=f"(f) : "r"(w[k / 2]));
    else
        asm("{ .reg .b32 b; shl.b32 b, %1, 16; mov.b32 %0, b; }" : "=f"(f) : "r"(w[k / 2]));
    return f;
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
/* v reduced over aligned groups of WIDTH lanes (a power of two up to 32). */
template <int WIDTH, typename Op>
__device__ __forceinline__ float lanes_reduce(float v, Op op)
{
#pragma unroll
    for (int offset = WIDTH / 2; offset > 0; offset /= 2)
        v = op(v, __shfl_xor_sync(0xFFFFFFFFu, v, offset));
    return v;
}

/* (m, s) pairs, s a sum of exp(x - m), combined over aligned groups of
 * WIDTH lanes: the largest m, then each s rescaled to it (one exp per lane)
 * and summed. A pair with m = -inf (slots past the row, -inf or NaN only)
 * adds its s as it is: 0, or the NaN that makes the row NaN. Rescaled, it
 * would be 0 * exp(-inf - -inf) = NaN wherever the group's largest m is
 * -inf too, such as a warp entirely past the row's end (the GPU test
 * caught that: rows of 128256 on 16 blocks of 1024 threads came out NaN). */
template <int WIDTH>
__device__ __forceinline__ void lanes_combine(float &m, float &s)
{
    if (WIDTH == 1)
        return;
    const float largest = lanes_reduce<WIDTH>(m, MaxOp());
    const float rescaled = m == -__int_as_float(0x7f800000) ? s : s * exp_shifted(m, largest);
    s = lanes_reduce<WIDTH>(rescaled, SumOp());
    m = largest;
}

template <typename Op>
__device__ __forceinline__ float row_reduce(float v, float *partial, float *exchange, Op op)
{
    v = lanes_reduce<(TPR < 32 ? TPR : 32)>(v, op);
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

/* The one-round reduction: each thread's (max m, sum s of exp(x - m)) pair
 * combined over the row's threads, its warps and its cluster's blocks.
 * Every warp combines the partial pairs itself (lane l takes pair l), so
 * each level costs one barrier and one exp per thread, and every block of
 * a cluster combines the same pairs in the same order. */
__device__ __forceinline__ void row_combine(float &m, float &s, float *partial_m, float *partial_s,
                                            float *exchange_m, float *exchange_s)
{
    lanes_combine<(TPR < 32 ? TPR : 32)>(m, s);
#if TPR > 32
    if (threadIdx.x % 32 == 0) {
        partial_m[threadIdx.x / 32] = m;
        partial_s[threadIdx.x / 32] = s;
    }
    __syncthreads();
    {
        const int i = (threadIdx.x / TPR) * (TPR / 32) + (threadIdx.x % 32) % (TPR / 32);
        m = partial_m[i];
        s = partial_s[i];
        lanes_combine<TPR / 32>(m, s);
    }
#else
    (void)partial_m, (void)partial_s;
#endif
#if T_CLUSTER > 1
    if (threadIdx.x == 0) {
        exchange_m[0] = m;
        exchange_s[0] = s;
    }
    cluster_sync();
    {
        const unsigned rank = (threadIdx.x % 32) % T_CLUSTER;
        m = load_remote(exchange_m, rank);
        s = load_remote(exchange_s, rank);
        lanes_combine<T_CLUSTER>(m, s);
    }
#else
    (void)exchange_m, (void)exchange_s;
#endif
}

#if T_GRID > 1
/* Adds the pair (m2, s2) to (m, s): the larger maximum, each sum rescaled
 * to it; a pair with m = -inf adds its sum as it is (see lanes_combine). */
__device__ __forceinline__ void pair_add(float &m, float &s, float m2, float s2)
{
    const float ninf = -__int_as_float(0x7f800000);
    const float big = fmaxf(m, m2);
    const float a = m == ninf ? s : s * exp_shifted(m, big);
    const float b = m2 == ninf ? s2 : s2 * exp_shifted(m2, big);
    m = big;
    s = a + b;
}

/* How long a block waits for the row's other blocks before it traps: they
 * are resident (cooperative launch) and arrive within microseconds, so a
 * wait this long means the workspace was shared by launches running at
 * once. An error is better than a GPU that never finishes. */
#define GRID_WAIT_NS 2000000000ull
/* Pairs each lane of warp 0 reads: pairs l, l + 32, ... */
#define PER_LANE ((T_GRID + 31) / 32)

__device__ __forceinline__ u64 global_ns()
{
    u64 t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

/* The block's (m, s) pair combined with those of the T_GRID blocks of its
 * row. Thread 0 publishes the pair as two 64-bit words, each carrying the
 * ticket in its high half: a word is written and read whole, so a reader
 * that sees the ticket sees the value with it, and the slot needs no reset
 * between launches. Warp 0 then waits for the row's pairs (lane l takes
 * pairs l, l + 32, ...) and combines them, in the same order in every
 * block, so every block normalises by the same (max, sum). A pair of 16
 * bytes is 2 u64, so pair l + 32 j lies 64 j words after pair l. */
__device__ __forceinline__ void grid_combine(float &m, float &s, unsigned char *work,
                                             unsigned ticket, float *shared_m, float *shared_s)
{
    u64 *slots = (u64 *)(work + (u64)(ticket % T_GRID_SLOTS) * gridDim.x * 16);
    const u64 tag = (u64)ticket << 32;
    if (threadIdx.x == 0)
        asm volatile("st.relaxed.gpu.global.v2.u64 [%0], {%1, %2};"
                     : : "l"(slots + 2 * blockIdx.x), "l"(tag | __float_as_uint(m)),
                       "l"(tag | __float_as_uint(s)) : "memory");
    if (threadIdx.x < 32) {
        /* All of a lane's slots are read at once, every round: one round
         * trip to L2 a round, however many pairs the lane takes. */
        const u64 *p = slots + 2 * (blockIdx.x - blockIdx.x % T_GRID + threadIdx.x);
        u64 a[PER_LANE], b[PER_LANE];
        u64 started = 0;
        for (;;) {
            bool ready = true;
#pragma unroll
            for (int j = 0; j < PER_LANE; j++)
                if (threadIdx.x + 32 * j < T_GRID)
                    asm volatile("ld.relaxed.gpu.global.v2.u64 {%0, %1}, [%2];"
                                 : "=l"(a[j]), "=l"(b[j]) : "l"(p + 64 * j) : "memory");
#pragma unroll
            for (int j = 0; j < PER_LANE; j++)
                if (threadIdx.x + 32 * j < T_GRID && ((a[j] >> 32) != ticket || (b[j] >> 32) != ticket))
                    ready = false;
            if (ready)
                break;
            const u64 now = global_ns();
            if (started == 0)
                started = now;
            else if (now - started > GRID_WAIT_NS)
                asm volatile("trap;");
        }
        float gm = -__int_as_float(0x7f800000), gs = 0.0f;
#pragma unroll
        for (int j = 0; j < PER_LANE; j++)
            if (threadIdx.x + 32 * j < T_GRID)
                pair_add(gm, gs, __uint_as_float((u32)a[j]), __uint_as_float((u32)b[j]));
        lanes_combine<(T_GRID < 32 ? T_GRID : 32)>(gm, gs);
        if (threadIdx.x == 0) {
            shared_m[0] = gm;
            shared_s[0] = gs;
        }
    }
    __syncthreads();
    m = shared_m[0];
    s = shared_s[0];
}
#define GRID_PARAMS , unsigned char *work, unsigned ticket
#else
#define GRID_PARAMS
#endif

#if T_REG_PACKED && ESIZE == 2 && VBYTES >= 4 && __CUDA_ARCH__ >= 800
/* The larger of each half of two packed pairs (NaN loses, as in fmaxf):
 * the maximum is exact in any precision, so it needs no conversion. */
__device__ __forceinline__ u32 max_pairs(u32 a, u32 b)
{
    u32 d;
#if T_DTYPE == 0
    asm("max.f16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
#else
    asm("max.bf16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
#endif
    return d;
}
#define PACKED_MAX 1
#else
#define PACKED_MAX 0
#endif

extern "C" __global__ void __launch_bounds__(T_WARPS * 32, T_MIN_BLOCKS) CLUSTER_ATTRIBUTE
tuned_softmax_rows(const unsigned char *x, unsigned char *y, long long rows, int cols,
                   long long row_stride GRID_PARAMS)
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
#elif T_GRID > 1
    /* Likewise the TPR threads (the whole block) of each of T_GRID blocks. */
    const int lane = (int)(blockIdx.x % T_GRID) * TPR + (int)threadIdx.x;
    const long long row = blockIdx.x / T_GRID;
#elif T_ROWS == 1
    /* Said outright: the compiler cannot tell that threadIdx.x < TPR, and
     * the row then sits in a uniform register before the first load. */
    const int lane = (int)threadIdx.x;
    const long long row = blockIdx.x;
#else
    const int lane = threadIdx.x % TPR;
    const long long row = (long long)blockIdx.x * T_ROWS + threadIdx.x / TPR;
#endif
#define ROW_THREADS (TPR * T_CLUSTER * T_GRID)
    /* Threads past the last row still take part in the barriers. With one
     * row a block (or a cluster, or a grid split) the launch has exactly
     * one block (group) per row: every thread is active. */
    const bool active = T_ROWS == 1 || row < rows;
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
#if T_HEAD_FREE
        if (active && (PASS_INSIDE(it) || first < T_COLS)) {
            load_vec(xv + (long long)(it * ROW_THREADS + lane) * VBYTES, w[it], policy);
        } else {
#pragma unroll
            for (int k = 0; k < NWORDS; k++)
                w[it][k] = NWORDS == T_VEC ? NEG_INF_BITS : NEG_INF_BITS | (NEG_INF_BITS << 16);
        }
#else
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
#endif
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

    /* This thread's maximum. */
    float max;
#if PACKED_MAX
    {
        u32 pairs = NEG_INF_BITS | (NEG_INF_BITS << 16);
#pragma unroll
        for (int it = 0; it < T_ITERS; it++)
#pragma unroll
            for (int k = 0; k < NWORDS; k++)
                pairs = max_pairs(pairs, w[it][k]);
        max = fmaxf(bits_to_float(pairs & 0xFFFFu), bits_to_float(pairs >> 16));
    }
#else
    max = -__int_as_float(0x7f800000);
#pragma unroll
    for (int it = 0; it < T_ITERS; it++)
#pragma unroll
        for (int k = 0; k < T_VEC; k++)
            max = fmaxf(max, VALUE(it, k));
#endif

#if T_FUSED
    /* Shifted by this thread's own maximum; a thread holding only -inf
     * (or slots past the row) shifts by 0, so its exps are 0, not NaN. */
    const float shift = max == -__int_as_float(0x7f800000) ? 0.0f : max;
#else
    max = row_reduce(max, partial_max, exchange_max, MaxOp());
    const float shift = max;
#endif
    float sum = 0.0f;
#if T_EXP16
    /* Each word's two inputs replaced by their exps, rounded to the dtype;
     * the sum takes them unrounded. */
#pragma unroll
    for (int it = 0; it < T_ITERS; it++)
#pragma unroll
        for (int j = 0; j < NWORDS; j++) {
            const float lo = exp_shifted(word_float(w[it], 2 * j), shift);
            const float hi = exp_shifted(word_float(w[it], 2 * j + 1), shift);
            sum += lo;
            sum += hi;
            w[it][j] = pack_pair(lo, hi);
        }
#else
#pragma unroll
    for (int it = 0; it < T_ITERS; it++)
#pragma unroll
        for (int k = 0; k < T_VEC; k++) {
#if !T_REG_PACKED
            v[it][k] = exp_shifted(v[it][k], shift);
            sum += v[it][k];
#else
            sum += exp_shifted(VALUE(it, k), shift);
#endif
        }
#endif
#if T_FUSED
    float row_max = max;
    row_combine(row_max, sum, partial_max, partial_sum, exchange_max, exchange_sum);
#if T_GRID > 1
    grid_combine(row_max, sum, work, ticket, exchange_max, exchange_sum);
#endif
#else
    const float row_max = max;
    sum = row_reduce(sum, partial_sum, exchange_sum, SumOp());
#endif
#if T_CLUSTER > 1
    /* Every remote read is done; no block may exit before all have
     * arrived here (cluster_wait below, after the stores). */
    cluster_arrive();
#endif

#if !T_REG_PACKED
    /* v holds exp(x - shift): one factor turns it into exp(x - row max) / sum. */
#if T_FUSED
    const float scale = exp_shifted(max, row_max) * __frcp_rn(sum);
#else
    const float scale = __frcp_rn(sum);
#endif
#define NORMALIZED(it, k) (v[it][k] * scale)
#elif T_EXP16
    /* w holds exp(x - shift) in the dtype: widened and scaled, no exp. */
#if T_FUSED
    const float scale = exp_shifted(max, row_max) * __frcp_rn(sum);
#else
    const float scale = __frcp_rn(sum);
#endif
#define NORMALIZED(it, k) (word_float(w[it], k) * scale)
#else
    /* exp computed again from the packed input: folding 1/sum into the
     * exp's argument saves a multiply, but then ptxas shares the
     * conversions and differences with the sum pass and keeps them live
     * across the reduction (measured: the packed variants spilled). */
    const float inv = __frcp_rn(sum);
#define NORMALIZED(it, k) (exp_shifted(VALUE(it, k), row_max) * inv)
#endif

#pragma unroll
    for (int it = 0; it < T_ITERS && active; it++) {
        const int first = (it * ROW_THREADS + lane) * T_VEC - head;
        u32 out[NWORDS] = {};
#if ESIZE == 2 && VBYTES >= 4
#pragma unroll
        for (int k = 0; k < T_VEC; k += 2)
            out[k / 2] = pack_pair(NORMALIZED(it, k), NORMALIZED(it, k + 1));
#else
#pragma unroll
        for (int k = 0; k < T_VEC; k++)
            word_set(out, k, float_to_bits(NORMALIZED(it, k)));
#endif
#if T_HEAD_FREE
        if (!PASS_INSIDE(it) && first >= T_COLS)
            continue;
        const bool whole = !(T_PLANT_BUG == 1 && first + T_VEC == T_COLS);
#else
        const bool whole = y_aligned && first >= 0 && first + T_VEC <= cols &&
                           !(T_PLANT_BUG == 1 && first + T_VEC == cols);
#endif
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
#if T_CLUSTER > 1
    cluster_wait();
#endif
}
