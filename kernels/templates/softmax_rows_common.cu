/* softmax_rows_common.cu: the stages of family "rows", rows held in
 * registers, shared by its kernels: softmax_rows.cu (a row in part of a
 * warp, a block or a cluster of blocks), softmax_grid.cu (a row cut over
 * several blocks of the grid), both for softmax and log_softmax, and
 * softmax_bwd.cu (the backward kernels, two rows held: y and dy).
 *
 * Idea: softmax is memory-bound, so every element is read once and written
 * once. The TPR = T_WARPS*32/T_ROWS threads of a block that share a row
 * (ROW_THREADS of them over the blocks the row is cut across) run these
 * stages in order:
 *   load         each thread issues all of its T_ITERS vector loads (T_VEC
 *                elements each, at most 16 bytes) before the first reduction,
 *                into a Held row part; -inf fills the slots past the row
 *   max          the thread's maximum (on packed pairs where it can be)
 *   exp-and-sum  exp(x - shift) summed, kept for the store where it can be
 *   reduce       over the row's threads: warp shuffles (a warp's maximum in
 *                one redux.sync), shared memory across the group's warps,
 *                mailboxes in distributed shared memory across the
 *                cluster's blocks; either two rounds (the maximum before the
 *                exps, then the sum) or, with T_FUSED, one round of (max, sum)
 *                pairs, each sum rescaled by exp(its max - the larger max)
 *                when pairs meet (online softmax): half the barriers; in a
 *                small cluster every warp sends its pair to every block,
 *                with no barrier between the block's warps (WARP_SENDS)
 *   store        exp(x - max) / sum (T_LOG: x - max - log sum), a vector at
 *                a time
 * The forward kernels take a scale s > 0 and compute all of it on s x:
 * max(s x) = s max(x), and s rides on exp's multiply by log2 e (ks below).
 * Rows need not start on a vector boundary: vector slots are counted from the
 * address at or below the row start aligned to T_HEAD_ALIGN elements (the
 * vector, or for long rows the 128-byte line, so that a warp's vectors
 * after the row's first fill whole sectors and lines); slots wholly before
 * the row are neither loaded nor stored; the partial first and last
 * vectors are loaded whole, their elements outside the row then replaced,
 * and stored element by element.
 *
 * Variant defines it reads (codegen prepends them, then softmax_common.cu):
 *   1. T_DTYPE      0 fp16, 1 bf16, 2 fp32 (math is always fp32)
 *   2. T_WARPS      warps per block: 1, 2, 4, 8, 16, 32
 *   3. T_ROWS       rows per block: threads per row TPR = T_WARPS*32/T_ROWS, 1 to 1024
 *   4. T_CLUSTER    blocks per row in a cluster (sm_90; 1 = none; else T_ROWS = 1)
 *   5. T_GRID       blocks per row through global memory: softmax_grid.cu's
 *                   variants only; absent means 1
 *   6. T_HEAD_FREE  1 when every row starts on a vector boundary (aligned base
 *                   pointers, columns a multiple of T_VEC): no partial head,
 *                   and every vector lies wholly inside its row or wholly past
 *                   its end, so an access is one predicated vector
 *                   instruction, and none at all where T_COLS shows every
 *                   thread's slot inside
 *   7. T_VEC        elements per vector access (T_VEC * element size <= 16 bytes)
 *   8. T_HEAD_ALIGN without T_HEAD_FREE: the alignment, in elements (T_VEC,
 *                   or the 128-byte line's for long rows), the row's slots
 *                   are counted from; absent means T_VEC
 *   9. T_ITERS      vector accesses per thread per row (from the column count)
 *  10. T_COLS       the column count the source is generated for; the kernel's
 *                   cols parameter must equal it (launchers pass the shape's)
 *  11. T_LD         0 ld.global, 1 .nc, 2 .cs (evict-first)
 *  12. T_ST         0 st.global, 1 .cs (evict-first)
 *  13. T_REG_PACKED 0: keep fp32 values; 1: keep the loaded words, convert on
 *                   use (the maximum then taken on the packed pairs: max.f16x2
 *                   or max.bf16x2, no conversion)
 *  14. T_EXP16      with T_REG_PACKED (16-bit types): the words are overwritten
 *                   by their exp values rounded to the dtype, so exp is
 *                   computed once; the output is rounded twice (within 1 ulp,
 *                   not 1/2)
 *  15. T_FUSED      0: max, then sum (two rounds); 1: (max, sum) pairs, one round
 *  16. T_PLANT_BUG  test builds only (codegen emits it with TUNED_TEST_HOOKS):
 *                   1 skips the last element of each row, 2 writes one element
 *                   past the end of the last row; absent means 0
 *  17. T_LOG        1: log_softmax (or its backward): absent means 0
 *  18. T_BWD        1: a backward kernel (softmax_bwd.cu): the slots past a
 *                   row's end hold 0, not -inf; absent means 0
 *  19. T_STASH      passes 1 .. T_STASH of each thread's row part are kept in
 *                   the block's shared memory, not in registers: loaded by
 *                   cp.async (no register waits for them), read back by the
 *                   max, exp-and-sum and store stages, their exps computed
 *                   again at the store. Forward kernels of register rows
 *                   only (no grid split, no T_EXP16), vectors of 4 bytes or
 *                   more, every stashed pass whole inside the row whatever
 *                   its head; absent means 0
 *  20. T_REPLICAS   clusters that each hold the whole row (T_CLUSTER > 1,
 *                   forward kernels): every one loads it and reduces it in
 *                   full, and replica r stores the passes it with
 *                   it % T_REPLICAS == r, so that a few rows' stores leave
 *                   T_REPLICAS times the SMs (the loads after the first
 *                   replica's come from L2); absent means 1
 *
 * Semantics match torch.softmax on the last dimension: the maximum ignores
 * NaN (fmaxf), and then a NaN or +inf in a row, or a row of only -inf,
 * makes the whole row NaN through the sum.
 *
 * Checked against: the float64 reference in reference.cu (per element, with
 * dtype tolerances, NaN for NaN), itself checked against a CPU float64
 * softmax by the evaluator before any variant is timed. */

#ifndef T_GRID
#define T_GRID 1
#endif
#ifndef T_PLANT_BUG
#define T_PLANT_BUG 0
#endif
#ifndef T_LOG
#define T_LOG 0
#endif
#ifndef T_BWD
#define T_BWD 0
#endif
#ifndef T_STASH
#define T_STASH 0
#endif
#ifndef T_REPLICAS
#define T_REPLICAS 1
#endif
#if T_REPLICAS > 1 && (T_CLUSTER < 2 || T_GRID > 1 || T_BWD)
#error "T_REPLICAS: forward rows cut over a cluster, no grid split"
#endif
#if T_EXP16 && (T_LOG || T_BWD)
#error "T_EXP16 keeps softmax's exps; log_softmax and the backward kernels have none to keep"
#endif

#ifndef T_HEAD_ALIGN
#define T_HEAD_ALIGN T_VEC
#endif

#define TPR (T_WARPS * 32 / T_ROWS)
/* The threads that share one row, over all the blocks it is cut across. */
#define ROW_THREADS (TPR * T_CLUSTER * T_GRID)
/* With T_HEAD_FREE: whether pass it of every row thread lies inside the row
 * (known when the source is generated), so it needs no bounds check. */
#define PASS_INSIDE(it) (T_HEAD_FREE && ((it) + 1) * ROW_THREADS * T_VEC <= T_COLS)
/* Without T_HEAD_FREE: whether pass it of every row thread is a whole
 * vector inside the row whatever its head (0 to T_HEAD_ALIGN - 1
 * elements): starting past the largest head, and ending by the row's end
 * even with head 0. */
#define PASS_WHOLE(it)                                                                      \
    ((it) * ROW_THREADS * T_VEC >= T_HEAD_ALIGN - 1 && ((it) + 1) * ROW_THREADS * T_VEC <= T_COLS)
/* Without T_HEAD_FREE: whether no vector of pass it lies wholly before the
 * row whatever its head (every pass but the first few, known when the
 * source is generated: the check costs registers where it is not). */
#define PASS_AFTER_HEAD(it) ((it) * ROW_THREADS * T_VEC >= T_HEAD_ALIGN - T_VEC)
/* Without T_HEAD_FREE: whether the vector at element first, of pass it,
 * holds an element of the row. */
#define VEC_IN_ROW(it, first, cols) ((first) < (cols) && (PASS_AFTER_HEAD(it) || (first) + T_VEC > 0))
#define VBYTES (T_VEC * ESIZE)
#define NWORDS (VBYTES >= 4 ? VBYTES / 4 : 1)
/* 16-bit elements two to a word: vectors of 4 bytes or more. */
#define PAIRED (ESIZE == 2 && VBYTES >= 4)
#if T_EXP16 && !(T_REG_PACKED && PAIRED)
#error "T_EXP16 needs packed registers of a 16-bit type, vectors of 4 bytes or more"
#endif
/* Whether pass it of a thread's row part is kept in shared memory. */
#define STASHED(it) (T_STASH > 0 && (it) >= 1 && (it) <= T_STASH)
#if T_STASH
#if T_BWD || T_GRID > 1 || T_EXP16 || VBYTES < 4
#error "T_STASH: forward register rows without a grid split or T_EXP16, vectors of 4 bytes or more"
#endif
#if (T_STASH + 1) * ROW_THREADS * T_VEC > T_COLS || ROW_THREADS * T_VEC < T_HEAD_ALIGN
#error "T_STASH: every stashed pass must lie whole inside the row whatever its head"
#endif
#endif

/* ---- loads and stores with the variant's cache hints ---- */

#if T_LD == 0
#define LD_OP "ld.global"
#elif T_LD == 1
#define LD_OP "ld.global.nc"
#elif T_LD == 2
#define LD_OP "ld.global.cs"
#else
#error "T_LD is 0 (ld.global), 1 (.nc) or 2 (.cs)"
#endif

/* One element's bits from address p. */
__device__ __forceinline__ u32 load_elem(const unsigned char *p)
{
#if ESIZE == 2
    u16 h;
    asm volatile(LD_OP ".u16 %0, [%1];" : "=h"(h) : "l"(p));
    return h;
#else
    u32 w;
    asm volatile(LD_OP ".u32 %0, [%1];" : "=r"(w) : "l"(p));
    return w;
#endif
}

/* One whole vector (VBYTES, aligned) from p into w. */
__device__ __forceinline__ void load_vec(const unsigned char *p, u32 (&w)[NWORDS])
{
#if VBYTES == 2
    w[0] = load_elem(p);
#elif VBYTES == 4
    asm volatile(LD_OP ".u32 %0, [%1];" : "=r"(w[0]) : "l"(p));
#elif VBYTES == 8
    asm volatile(LD_OP ".v2.u32 {%0, %1}, [%2];" : "=r"(w[0]), "=r"(w[1]) : "l"(p));
#else
    asm volatile(LD_OP ".v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(w[0]), "=r"(w[1]), "=r"(w[2]), "=r"(w[3]) : "l"(p));
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

/* ---- elements of a vector held as words ---- */

__device__ __forceinline__ u32 word_elem(const u32 (&w)[NWORDS], int k)
{
#if PAIRED
    return (w[k / 2] >> (16 * (k % 2))) & 0xFFFFu;
#else
    return w[k];
#endif
}

__device__ __forceinline__ void word_set(u32 (&w)[NWORDS], int k, u32 bits)
{
#if PAIRED
    if (k % 2 == 0)
        w[k / 2] = (w[k / 2] & 0xFFFF0000u) | bits;
    else
        w[k / 2] = (w[k / 2] & 0x0000FFFFu) | (bits << 16);
#else
    w[k] = bits;
#endif
}

/* Element k as fp32: for 16-bit types the half is taken straight from its
 * word (bf16: a shift or a mask). */
__device__ __forceinline__ float word_float(const u32 (&w)[NWORDS], int k)
{
#if PAIRED && T_DTYPE == 1
    /* A mask or a shift, in asm like fp16's cvt: as plain code ptxas
     * shares it between the passes and the packed variants spill. */
    float f;
    if (k % 2)
        asm("{ .reg .b32 b; and.b32 b, %1, 0xFFFF0000; mov.b32 %0, b; }" : "=f"(f) : "r"(w[k / 2]));
    else
        asm("{ .reg .b32 b; shl.b32 b, %1, 16; mov.b32 %0, b; }" : "=f"(f) : "r"(w[k / 2]));
    return f;
#elif PAIRED
    float f;
    if (k % 2)
        asm("{ .reg .b16 lo, hi; mov.b32 {lo, hi}, %1; cvt.f32.f16 %0, hi; }" : "=f"(f) : "r"(w[k / 2]));
    else
        asm("{ .reg .b16 lo, hi; mov.b32 {lo, hi}, %1; cvt.f32.f16 %0, lo; }" : "=f"(f) : "r"(w[k / 2]));
    return f;
#else
    return bits_to_float(word_elem(w, k));
#endif
}

#if T_REG_PACKED && PAIRED && __CUDA_ARCH__ >= 800
/* The larger of each half of two packed pairs (NaN loses, as in fmaxf):
 * the maximum is exact in any precision, so it needs no conversion. */
__device__ __forceinline__ u32 max_pairs(u32 a, u32 b)
{
    u32 d;
    asm("max" PAIR_TYPE " %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
    return d;
}
#define PACKED_MAX 1
#else
#define PACKED_MAX 0
#endif

/* ---- passes kept in shared memory (T_STASH) ---- */

#if T_STASH
/* The block's stash: pass it's vector of thread t at [it - 1][t], so that
 * a warp's accesses of one pass are 32 consecutive vectors. */
struct Stash {
    alignas(16) u32 w[T_STASH][T_WARPS * 32][NWORDS];
};

__device__ __forceinline__ Stash &block_stash()
{
    __shared__ Stash stash;
    return stash;
}

/* The shared-memory address of pass it's vector of this thread: one base
 * and a constant a pass, which ptxas folds into each access's offset
 * (an address taken a pass apart stays live in a register of its own). */
__device__ __forceinline__ u32 stash_addr(int it)
{
    const u32 pass_bytes = T_WARPS * 32 * VBYTES;
    return smem_addr(&block_stash().w[0][threadIdx.x][0]) + (u32)(it - 1) * pass_bytes;
}

/* load: pass it's vector at p copied into the stash by cp.async, with no
 * register written: nothing waits for it until stash_wait. */
__device__ __forceinline__ void stash_issue(int it, const unsigned char *p)
{
    const u32 dst = stash_addr(it);
#if VBYTES == 16
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" : : "r"(dst), "l"(p) : "memory");
#else
    asm volatile("cp.async.ca.shared.global [%0], [%1], %2;" : : "r"(dst), "l"(p), "n"(VBYTES)
                 : "memory");
#endif
}

/* Before the first read of the stash: this thread's copies have landed
 * (each thread reads only its own vectors, so no barrier). */
__device__ __forceinline__ void stash_wait()
{
    asm volatile("cp.async.wait_all;" ::: "memory");
}

/* Every STASH_GROUP passes a stage reads from the stash, a warp barrier:
 * shared loads do not move across it, so ptxas cannot issue all of a
 * stage's reads at once, whose results (beside the passes held in
 * registers) overflowed the registers of blocks at their limit. */
#define STASH_GROUP 4
__device__ __forceinline__ void stash_group_fence(int it)
{
    if ((it - 1) % STASH_GROUP == 0 && it > 1)
        __syncwarp();
}

/* Pass it's vector of this thread, as loaded: read again by each stage
 * (volatile: as plain loads the compiler may keep one stage's reads in
 * registers for the next, which is what the stash is there to avoid). */
__device__ __forceinline__ void stash_words(int it, u32 (&w)[NWORDS])
{
    const u32 src = stash_addr(it);
#if NWORDS == 4
    asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(w[0]), "=r"(w[1]), "=r"(w[2]), "=r"(w[3]) : "r"(src));
#elif NWORDS == 2
    asm volatile("ld.shared.v2.u32 {%0, %1}, [%2];" : "=r"(w[0]), "=r"(w[1]) : "r"(src));
#else
    asm volatile("ld.shared.u32 %0, [%1];" : "=r"(w[0]) : "r"(src));
#endif
}
#else
__device__ __forceinline__ void stash_group_fence(int) {}
__device__ __forceinline__ void stash_issue(int, const unsigned char *) {}
__device__ __forceinline__ void stash_wait() {}
__device__ __forceinline__ void stash_words(int, u32 (&w)[NWORDS])
{
#pragma unroll
    for (int j = 0; j < NWORDS; j++)
        w[j] = 0;
}
#endif

/* Stashed pass it read back by a stage: the warp barrier its group asks
 * for, then its words. */
__device__ __forceinline__ void stash_pass(int it, u32 (&w)[NWORDS])
{
    stash_group_fence(it);
    stash_words(it, w);
}

/* use(w) for each stashed pass in order, its words read once; nothing
 * without a stash. */
template <typename Use>
__device__ __forceinline__ void each_stashed_pass(Use use)
{
#pragma unroll
    for (int it = 0; it < T_ITERS; it++) {
        if (!STASHED(it))
            continue;
        u32 w[NWORDS];
        stash_pass(it, w);
        use(w);
    }
}

/* ---- reductions over the threads of one row ---- */

/* v reduced over aligned groups of WIDTH lanes (a power of two up to 32).
 * Row groups of fewer than 32 threads are such groups, so xor shuffles with
 * offsets below WIDTH stay inside the row. */
template <int WIDTH, typename Op>
__device__ __forceinline__ float lanes_reduce(float v, Op op)
{
#pragma unroll
    for (int offset = WIDTH / 2; offset > 0; offset /= 2)
        v = op(v, __shfl_xor_sync(0xFFFFFFFFu, v, offset));
    return v;
}

/* The largest v of the warp's 32 lanes, in one redux.sync where five
 * dependent shuffles were: floats map to signed integers in the same order
 * (a negative float's magnitude bits flipped; the map is its own inverse),
 * so the integer maximum is the float maximum. No NaN comes here: every
 * maximum starts as fmaxf's (or max.f16x2's), which drop NaN. */
__device__ __forceinline__ float warp_max(float v)
{
    const int b = __float_as_int(v);
    int r;
    asm("redux.sync.max.s32 %0, %1, 0xFFFFFFFF;" : "=r"(r) : "r"(b ^ ((b >> 31) & 0x7FFFFFFF)));
    return __int_as_float(r ^ ((r >> 31) & 0x7FFFFFFF));
}

/* The maximum over aligned groups of WIDTH lanes; a whole warp's in one
 * instruction (warp_max). */
template <int WIDTH>
__device__ __forceinline__ float lanes_reduce(float v, MaxOp op)
{
    if (WIDTH == 32)
        return warp_max(v);
#pragma unroll
    for (int offset = WIDTH / 2; offset > 0; offset /= 2)
        v = op(v, __shfl_xor_sync(0xFFFFFFFFu, v, offset));
    return v;
}

/* (m, s) pairs, s a sum of exp(x - m), combined over aligned groups of
 * WIDTH lanes: the largest m, then each s rescaled to it (one exp per lane)
 * and summed. WARP_COPIES: every group of the warp holds the same pairs
 * (lane l holds pair l % WIDTH), so the warp's maximum is the group's. A
 * pair with m = -inf (slots past the row, -inf or NaN only) adds its s as
 * it is: 0, or the NaN that makes the row NaN. Rescaled, it
 * would be 0 * exp(-inf - -inf) = NaN wherever the group's largest m is
 * -inf too, such as a warp entirely past the row's end (the GPU test
 * caught that: rows of 128256 on 16 blocks of 1024 threads came out NaN). */
template <int WIDTH, bool WARP_COPIES = false>
__device__ __forceinline__ void lanes_combine(float &m, float &s, float ks)
{
    if (WIDTH == 1)
        return;
    const float largest = WARP_COPIES ? warp_max(m) : lanes_reduce<WIDTH>(m, MaxOp());
    const float rescaled = m == NEG_INF ? s : s * exp_shifted(m, largest, ks);
    s = lanes_reduce<WIDTH>(rescaled, SumOp());
    m = largest;
}

/* Reduces v over the TPR threads of this thread's row in this block and,
 * with a cluster, over the T_CLUSTER blocks that share the row, through
 * box (first: the block's first cluster exchange). partial has a slot per
 * warp; each reduction uses its own arrays so that no barrier is needed
 * before reuse. Every block folds the blocks' values in rank order, so all
 * compute the same result. */
template <typename Op>
__device__ __forceinline__ float row_reduce(float v, float *partial, Mailbox &box, bool first,
                                            Op op)
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
    /* one row per block (T_ROWS == 1) */
    mailbox_exchange(box, v, 0.0f, 1, first);
    v = box.slot[0][0];
#pragma unroll
    for (int r = 1; r < T_CLUSTER; r++)
        v = op(v, box.slot[0][r]);
#else
    (void)box, (void)first;
#endif
    return v;
}

#if T_CLUSTER > 1
/* The row's (max, sum) from the MAILBOX_PAIRS pairs (of the warps, or of
 * the blocks) in this block's pair mailbox: lane l folds pairs l, l + 32, ... (its largest m, then
 * each s rescaled to it), or with fewer than 32 pairs holds pair l % n;
 * then the warp combines. A pair with m = -inf adds its s as it is (see
 * lanes_combine). */
__device__ __forceinline__ void fold_pairs(const PairMailbox &box, float &m, float &s, float ks)
{
    const int lane = threadIdx.x % 32;
#if MAILBOX_PAIRS >= 32
    m = box.pair[lane][0];
#pragma unroll
    for (int j = 1; j < MAILBOX_PAIRS / 32; j++)
        m = fmaxf(m, box.pair[lane + 32 * j][0]);
    s = 0.0f;
#pragma unroll
    for (int j = 0; j < MAILBOX_PAIRS / 32; j++) {
        const float pm = box.pair[lane + 32 * j][0], ps = box.pair[lane + 32 * j][1];
        s += pm == NEG_INF ? ps : ps * exp_shifted(pm, m, ks);
    }
    lanes_combine<32>(m, s, ks);
#else
    m = box.pair[lane % MAILBOX_PAIRS][0];
    s = box.pair[lane % MAILBOX_PAIRS][1];
    lanes_combine<MAILBOX_PAIRS, true>(m, s, ks);
#endif
}
#endif

/* The one-round reduction: each thread's (max m, sum s of exp(x - m)) pair
 * combined over the row's threads, its warps and its cluster's blocks.
 * The warps' pairs meet in shared memory, each warp combining them itself
 * (lane l takes pair l), unless every warp sends its pair to the cluster's
 * blocks itself (WARP_SENDS): then each block folds all of them
 * (fold_pairs), with no barrier between the block's warps. Each level
 * costs one exp per thread, and every block of a cluster combines the
 * same pairs in the same order. */
__device__ __forceinline__ void row_combine(float &m, float &s, float *partial_m, float *partial_s,
                                            PairMailbox &box, float ks)
{
    lanes_combine<(TPR < 32 ? TPR : 32)>(m, s, ks);
#if TPR > 32 && !WARP_SENDS
    if (threadIdx.x % 32 == 0) {
        partial_m[threadIdx.x / 32] = m;
        partial_s[threadIdx.x / 32] = s;
    }
    __syncthreads();
    {
        /* A warp lies in one row: its lanes hold copies of the row's pairs. */
        const int i = (threadIdx.x / TPR) * (TPR / 32) + (threadIdx.x % 32) % (TPR / 32);
        m = partial_m[i];
        s = partial_s[i];
        lanes_combine<TPR / 32, true>(m, s, ks);
    }
#else
    (void)partial_m, (void)partial_s;
#endif
#if T_CLUSTER > 1
    pair_mailbox_exchange(box, m, s);
    fold_pairs(box, m, s, ks);
#else
    (void)box;
#endif
}

/* Sets up the mailboxes of a forward kernel's cluster reductions at its
 * start: the pair mailbox (T_FUSED: (max, sum) pairs in one round), else
 * one for the maximum and one for the sum. Nothing without a cluster. */
__device__ __forceinline__ void open_mailboxes(Mailbox &box_max, Mailbox &box_sum,
                                               PairMailbox &box_pairs)
{
#if T_CLUSTER > 1
    if (T_FUSED) {
        pair_mailbox_init(box_pairs);
    } else {
        mailbox_init(box_max, 1);
        mailbox_init(box_sum, 1);
    }
    mailboxes_ready();
#else
    (void)box_max, (void)box_sum, (void)box_pairs;
#endif
}

/* The backward kernels' one mailbox, for the sum; nothing without a
 * cluster. */
__device__ __forceinline__ void open_sum_mailbox(Mailbox &box_sum)
{
#if T_CLUSTER > 1
    mailbox_init(box_sum, 1);
    mailboxes_ready();
#else
    (void)box_sum;
#endif
}

/* ---- the stages ---- */

/* Where a thread's row lies: its first element in x and y, and how many
 * elements past the T_HEAD_ALIGN boundary at or below it x's starts (head). */
struct RowPtrs {
    const unsigned char *xr;
    unsigned char *yr;
    int head;
    bool y_aligned; /* y's vectors line up with x's */
};

/* A thread that is not active (past the last row: it loads and stores
 * nothing, but takes part in the barriers) points at row 0. */
__device__ __forceinline__ RowPtrs row_ptrs(const unsigned char *x, unsigned char *y,
                                            long long row, bool active, long long row_stride)
{
    RowPtrs p;
    const long long row_bytes = (active ? row : 0) * row_stride * ESIZE;
    p.xr = x + row_bytes;
    p.yr = y + row_bytes;
#if T_HEAD_FREE
    /* Codegen knows every row starts on a vector boundary. */
    p.head = 0;
    p.y_aligned = true;
#else
    p.head = (int)(((u64)p.xr / ESIZE) % T_HEAD_ALIGN);
    /* Output vectors line up with the input's only when both start at the
     * same offset inside a vector; otherwise every store is per element. */
    p.y_aligned = (int)(((u64)p.yr / ESIZE) % T_VEC) == p.head % T_VEC;
#endif
    return p;
}

/* A thread's part of its row: T_ITERS vectors, as loaded (T_REG_PACKED)
 * or as fp32 values. */
struct Held {
#if T_REG_PACKED
    u32 w[T_ITERS][NWORDS];
#else
    float v[T_ITERS][T_VEC];
#endif
};

/* Element k of vector it as fp32. */
__device__ __forceinline__ float held_value(const Held &h, int it, int k)
{
#if T_REG_PACKED
    return word_float(h.w[it], k);
#else
    return h.v[it][k];
#endif
}

/* What the slots past a row's end hold: -inf loses every maximum and its
 * exp is 0; the backward kernels sum products, where 0 adds nothing. */
#if T_BWD
#define FILL_BITS 0u
#define FILL_PAIR 0u
#else
#define FILL_BITS NEG_INF_BITS
#define FILL_PAIR NEG_INF_PAIR
#endif

/* Whether load_row_words fills a vector wholly outside the row at once
 * rather than through the element-by-element path (which then loads
 * nothing): measured on the H200 at 1024x50257, 16-bit rows 2-4% faster
 * (no predicated element loads in the code), fp32 rows 7-12% slower
 * (ptxas then issued the row's last vector after the other vectors'
 * maximum, a memory latency later). */
#define FILL_OUTSIDE (ESIZE == 2)

/* The address of lane's vector of pass it, from the slots' origin v, in
 * a variant with a stash: the lane's first slot plus a constant a pass,
 * which ptxas folds into each access's offset. Computed a pass apart (as
 * the variants without a stash do, measured faster where registers are
 * not short: bench/results/2026-11-25-h200-addresses/), the 64-bit
 * addresses of all passes are live at once, which the stash's blocks, at
 * their register limit, spilled. */
template <typename Byte>
__device__ __forceinline__ Byte *stash_variant_addr(Byte *v, int it, int lane)
{
    return v + (long long)lane * VBYTES + (long long)it * (ROW_THREADS * VBYTES);
}

/* A thread's loaded words of one row, before finish_row. */
typedef u32 RowWords[T_ITERS][NWORDS];

/* The words a row is loaded into: the held ones where they are kept
 * (T_REG_PACKED), else scratch, widened into h by finish_row. */
__device__ __forceinline__ RowWords &words_of(Held &h, RowWords &scratch)
{
#if T_REG_PACKED
    (void)scratch;
    return h.w;
#else
    (void)h;
    return scratch;
#endif
}

/* A vector wholly outside the row: every element FILL. */
__device__ __forceinline__ void fill_vec(u32 (&w)[NWORDS])
{
#pragma unroll
    for (int k = 0; k < NWORDS; k++)
        w[k] = NWORDS == T_VEC ? FILL_BITS : FILL_PAIR;
}

/* load, issue: lane's vectors it * ROW_THREADS + lane of the row starting
 * at xr, counted from the boundary head elements before it (on a vector
 * boundary), into w; FILL where a vector lies wholly before or past the
 * row (or the thread has no row).
 * vec_ok false: this row's vectors do not line up with the slots (a second
 * input whose offset inside a vector differs from the first's): every
 * element is loaded alone. Nothing here reads a loaded word, so no load
 * waits for another; finish_row does, once every row's loads are issued. */
__device__ __forceinline__ void load_row_words(RowWords &w, const unsigned char *xr, int head,
                                               bool vec_ok, int lane, int cols, bool active)
{
    const unsigned char *xv = xr - head * ESIZE;
#pragma unroll
    for (int it = 0; it < T_ITERS; it++) {
        const int first = (it * ROW_THREADS + lane) * T_VEC - head;
        if (STASHED(it))
            continue; /* issued below, after the loads into registers */
#if T_HEAD_FREE
        (void)vec_ok;
        if (active && (PASS_INSIDE(it) || first < T_COLS)) {
            load_vec(T_STASH > 0 ? stash_variant_addr(xv, it, lane)
                                 : xv + (long long)(it * ROW_THREADS + lane) * VBYTES,
                     w[it]);
        } else {
            fill_vec(w[it]);
        }
#else
        if (active && vec_ok && VEC_IN_ROW(it, first, cols)) {
            /* Whole, also where it holds the row's first or last element:
             * its aligned bytes share a 16-byte block with an element of
             * the tensor, so they lie in the caller's (16-byte aligned)
             * allocation. finish_row replaces its elements outside the
             * row. */
            load_vec(T_STASH > 0 ? stash_variant_addr(xv, it, lane)
                                 : xv + (long long)(it * ROW_THREADS + lane) * VBYTES,
                     w[it]);
        } else if (FILL_OUTSIDE && (vec_ok || !active)) {
            /* wholly outside the row (or no row): nothing to load */
            fill_vec(w[it]);
        } else {
#pragma unroll
            for (int k = 0; k < NWORDS; k++)
                w[it][k] = 0;
#pragma unroll
            for (int k = 0; k < T_VEC; k++) {
                const int c = first + k;
                const u32 bits = (active && c >= 0 && c < cols)
                                     ? load_elem(xr + (long long)c * ESIZE)
                                     : FILL_BITS;
                word_set(w[it], k, bits);
            }
        }
#endif
    }
    /* The stashed passes, whole inside the row (T_STASH's rule), copied
     * after the loads into registers are issued: ptxas keeps the copies'
     * wait after them. Addressed from the lane's first slot plus a
     * constant, which ptxas folds into the copy's offset. */
#pragma unroll
    for (int it = 1; it <= T_STASH; it++)
        if (active)
            stash_issue(it, stash_variant_addr(xv, it, lane));
}

/* load, finish: FILL in the elements outside the row of the vectors at
 * its two ends, which load_row_words loaded whole (a pass whose vectors
 * all lie inside the row whatever its head has none), then the words
 * widened to fp32 into h unless they are kept. Same arguments as the
 * row's load_row_words. */
__device__ __forceinline__ void finish_row(Held &h, RowWords &w, int head, bool vec_ok, int lane,
                                           int cols, bool active)
{
#if T_HEAD_FREE
    (void)w, (void)head, (void)vec_ok, (void)lane, (void)cols, (void)active;
#else
#pragma unroll
    for (int it = 0; it < T_ITERS; it++) {
        const int first = (it * ROW_THREADS + lane) * T_VEC - head;
        if (PASS_WHOLE(it) || !(active && vec_ok && VEC_IN_ROW(it, first, cols)))
            continue;
#pragma unroll
        for (int k = 0; k < T_VEC; k++)
            if (first + k < 0 || first + k >= cols)
                word_set(w[it], k, FILL_BITS);
    }
#endif
#if !T_REG_PACKED
#pragma unroll
    for (int it = 0; it < T_ITERS; it++)
#pragma unroll
        for (int k = 0; k < T_VEC && !STASHED(it); k++)
            h.v[it][k] = word_float(w[it], k);
#else
    (void)h;
#endif
}

/* load of the row p points at: x. */
__device__ __forceinline__ void load_row(Held &h, const RowPtrs &p, int lane, int cols,
                                         bool active)
{
    RowWords scratch;
    RowWords &w = words_of(h, scratch);
    load_row_words(w, p.xr, p.head, true, lane, cols, active);
    finish_row(h, w, p.head, true, lane, cols, active);
}

/* max: this thread's maximum, over the passes in registers first, then
 * (T_STASH) over those in shared memory once they have landed. */
__device__ __forceinline__ float thread_max(const Held &h)
{
#if PACKED_MAX
    u32 pairs = NEG_INF_PAIR;
#pragma unroll
    for (int it = 0; it < T_ITERS; it++)
#pragma unroll
        for (int k = 0; k < NWORDS && !STASHED(it); k++)
            pairs = max_pairs(pairs, h.w[it][k]);
    if (T_STASH)
        stash_wait();
    each_stashed_pass([&](const u32 (&w)[NWORDS]) {
#pragma unroll
        for (int k = 0; k < NWORDS; k++)
            pairs = max_pairs(pairs, w[k]);
    });
    return fmaxf(bits_to_float(pairs & 0xFFFFu), bits_to_float(pairs >> 16));
#else
    float max = NEG_INF;
#pragma unroll
    for (int it = 0; it < T_ITERS; it++)
#pragma unroll
        for (int k = 0; k < T_VEC && !STASHED(it); k++)
            max = fmaxf(max, held_value(h, it, k));
    if (T_STASH)
        stash_wait();
    each_stashed_pass([&](const u32 (&w)[NWORDS]) {
#pragma unroll
        for (int k = 0; k < T_VEC; k++)
            max = fmaxf(max, word_float(w, k));
    });
    return max;
#endif
}

/* reduce, first of two rounds: the row's maximum, before the exps. With
 * T_FUSED the thread's own is kept; the pairs are combined after the sums. */
__device__ __forceinline__ float reduce_max(float max, float *partial_max, Mailbox &box_max)
{
#if T_FUSED
    (void)partial_max, (void)box_max;
    return max;
#else
    return row_reduce(max, partial_max, box_max, true, MaxOp());
#endif
}

/* exp-and-sum: the sum of exp(s (x - shift)) over the thread's elements,
 * shift the row's maximum, or with T_FUSED the thread's own: a thread
 * holding only -inf (or slots past the row) shifts by 0, so its exps are
 * 0, not NaN. The exps replace the values where they are kept for the
 * store (softmax; log_softmax's store reads x). */
__device__ __forceinline__ float exp_and_sum(Held &h, float max, float ks)
{
#if T_FUSED
    const float shift = max == NEG_INF ? 0.0f : max;
#else
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
            const float lo = exp_shifted(word_float(h.w[it], 2 * j), shift, ks);
            const float hi = exp_shifted(word_float(h.w[it], 2 * j + 1), shift, ks);
            sum += lo;
            sum += hi;
            h.w[it][j] = pack_pair(lo, hi);
        }
#elif !T_REG_PACKED && !T_LOG
#pragma unroll
    for (int it = 0; it < T_ITERS; it++)
#pragma unroll
        for (int k = 0; k < T_VEC && !STASHED(it); k++) {
            h.v[it][k] = exp_shifted(h.v[it][k], shift, ks);
            sum += h.v[it][k];
        }
#else
#pragma unroll
    for (int it = 0; it < T_ITERS; it++)
#pragma unroll
        for (int k = 0; k < T_VEC && !STASHED(it); k++)
            sum += exp_shifted(held_value(h, it, k), shift, ks);
#endif
    /* The stashed passes' exps are summed, not kept: the store computes
     * them again. */
    each_stashed_pass([&](const u32 (&w)[NWORDS]) {
#pragma unroll
        for (int k = 0; k < T_VEC; k++)
            sum += exp_shifted(word_float(w, k), shift, ks);
    });
    return sum;
}

/* reduce: the row's (max, sum) from the thread's (row_max, sum): with
 * T_FUSED one round of pairs, else the second round, the sums (row_max is
 * already the row's). */
__device__ __forceinline__ void reduce_row(float &row_max, float &sum, float *partial_max,
                                           float *partial_sum, Mailbox &box_sum,
                                           PairMailbox &box_pairs, float ks)
{
#if T_FUSED
    (void)box_sum;
    row_combine(row_max, sum, partial_max, partial_sum, box_pairs, ks);
#else
    (void)row_max, (void)partial_max, (void)box_pairs, (void)ks;
    sum = row_reduce(sum, partial_sum, box_sum, false, SumOp());
#endif
}

/* The factor that turns what Held keeps into the output: max is what
 * exp_and_sum shifted by (with T_FUSED the thread's own maximum), row_max
 * and sum the row's. */
__device__ __forceinline__ float out_scale(float max, float row_max, float sum, float ks)
{
#if T_REG_PACKED && !T_EXP16
    (void)max, (void)row_max, (void)ks;
    return __frcp_rn(sum);
#elif T_FUSED
    return exp_shifted(max, row_max, ks) * __frcp_rn(sum);
#else
    (void)max, (void)row_max, (void)ks;
    return __frcp_rn(sum);
#endif
}

/* Output element k of vector it, exp(x - row max) / sum, from what Held
 * keeps: exp(x - shift) in fp32 (scaled), exp(x - shift) in the dtype
 * (widened and scaled, no exp), or the packed input: exp computed again.
 * (Folding 1/sum into that exp's argument saves a multiply, but then ptxas
 * shares the conversions and differences with the sum pass and keeps them
 * live across the reduction: measured, the packed variants spilled.) */
__device__ __forceinline__ float normalized(const Held &h, int it, int k, float scale,
                                            float row_max, float ks)
{
#if !T_REG_PACKED
    (void)row_max, (void)ks;
    return h.v[it][k] * scale;
#elif T_EXP16
    (void)row_max, (void)ks;
    return word_float(h.w[it], k) * scale;
#else
    return exp_shifted(held_value(h, it, k), row_max, ks) * scale;
#endif
}

/* What the forward store needs of the row: softmax, the factor out_scale
 * gives (and the row's maximum, for exps computed again); log_softmax,
 * the row's maximum, the scale and log sum (the sum taken against the
 * row's maximum, as both reductions leave it). */
struct RowOut {
    float mul, row_max, ks, scale, log_sum;
    float inv_sum; /* 1 / sum: the stashed passes' factor (T_STASH) */
};

__device__ __forceinline__ RowOut row_out(float max, float row_max, float sum, float scale,
                                          float ks)
{
    RowOut o;
    o.row_max = row_max;
    o.ks = ks;
    o.scale = scale;
#if T_STASH
    o.inv_sum = __frcp_rn(sum);
#else
    o.inv_sum = 0.0f;
#endif
#if T_LOG
    o.mul = 0.0f;
    (void)max;
    o.log_sum = logf(sum);
#else
    o.mul = out_scale(max, row_max, sum, ks);
    o.log_sum = 0.0f;
#endif
    return o;
}

/* out: value(k) for each element k of a vector, as the dtype's words. */
template <typename Value>
__device__ __forceinline__ void vector_words(u32 (&out)[NWORDS], Value value)
{
#if PAIRED
#pragma unroll
    for (int k = 0; k < T_VEC; k += 2)
        out[k / 2] = pack_pair(value(k), value(k + 1));
#else
#pragma unroll
    for (int k = 0; k < T_VEC; k++)
        word_set(out, k, float_to_bits(value(k)));
#endif
}

/* Forward output of x, an input element of a stashed pass: softmax's
 * exp computed again, or log_softmax's. */
__device__ __forceinline__ float stashed_value(float x, const RowOut &o)
{
    return T_LOG ? (x - o.row_max) * o.scale - o.log_sum
                 : exp_shifted(x, o.row_max, o.ks) * o.inv_sum;
}

/* Forward output element k of vector it, from Held: softmax's
 * (normalized), or log_softmax's s (x - max) - log sum (both terms <= 0
 * and >= 0: no cancellation; an x of -inf gives -inf). */
__device__ __forceinline__ float forward_value(const Held &h, int it, int k, const RowOut &o)
{
#if T_LOG
    return (held_value(h, it, k) - o.row_max) * o.scale - o.log_sum;
#else
    return normalized(h, it, k, o.mul, o.row_max, o.ks);
#endif
}

/* Forward output vector it: from the stash, read once, or from Held. */
__device__ __forceinline__ void forward_words(const Held &h, int it, const RowOut &o,
                                              u32 (&out)[NWORDS])
{
    if (STASHED(it)) {
        u32 w[NWORDS];
        stash_pass(it, w);
        vector_words(out, [&](int k) { return stashed_value(word_float(w, k), o); });
    } else {
        vector_words(out, [&](int k) { return forward_value(h, it, k, o); });
    }
}

/* store: the row's output, vector it's words as words(it, out) fills them,
 * a vector at a time where it lies whole inside the row and y lines up,
 * else element by element; with T_REPLICAS, this replica's passes only. */
template <typename Words>
__device__ __forceinline__ void store_row(const RowPtrs &p, int lane, int cols, bool active,
                                          Words words)
{
    const int replica = T_REPLICAS > 1 ? (int)(blockIdx.x / T_CLUSTER % T_REPLICAS) : 0;
#pragma unroll
    for (int it = 0; it < T_ITERS && active; it++) {
        if (T_REPLICAS > 1 && it % T_REPLICAS != replica)
            continue;
        const int first = (it * ROW_THREADS + lane) * T_VEC - p.head;
        u32 out[NWORDS] = {};
        words(it, out);
#if T_HEAD_FREE
        if (!PASS_INSIDE(it) && first >= T_COLS)
            continue;
        const bool whole = !(T_PLANT_BUG == 1 && first + T_VEC == T_COLS);
#else
        const bool whole = p.y_aligned && first >= 0 && first + T_VEC <= cols &&
                           !(T_PLANT_BUG == 1 && first + T_VEC == cols);
#endif
        if (whole) {
            store_vec(T_STASH > 0 ? stash_variant_addr(p.yr - p.head * ESIZE, it, lane)
                                  : p.yr + (long long)first * ESIZE,
                      out);
        } else {
#pragma unroll
            for (int k = 0; k < T_VEC; k++) {
                const int c = first + k;
                if (c >= 0 && c < cols && !(T_PLANT_BUG == 1 && c == cols - 1))
                    store_elem(p.yr + (long long)c * ESIZE, word_elem(out, k));
            }
        }
    }
}

/* Which row a thread works on, and its place among the row's threads (a
 * row in part of a warp, a block, a cluster or blocks of the grid). */
struct RowSlot {
    int lane;
    long long row;
};

__device__ __forceinline__ RowSlot row_slot()
{
    RowSlot s;
#if T_GRID > 1
    /* The row's threads are the whole blocks of its T_GRID blocks, numbered
     * block by block; the launch has exactly T_GRID blocks per row. */
    s.lane = (int)(blockIdx.x % T_GRID) * TPR + (int)threadIdx.x;
    s.row = blockIdx.x / T_GRID;
#elif T_CLUSTER > 1
    /* The row's threads are the TPR threads of each of the cluster's
     * blocks, numbered block by block; T_REPLICAS clusters in a row hold
     * the same row. */
    s.lane = (int)cluster_rank() * TPR + (int)threadIdx.x % TPR;
    s.row = (long long)(blockIdx.x / (T_CLUSTER * T_REPLICAS)) * T_ROWS + threadIdx.x / TPR;
#elif T_ROWS == 1
    /* Said outright: the compiler cannot tell that threadIdx.x < TPR, and
     * the row then sits in a uniform register before the first load. */
    s.lane = (int)threadIdx.x;
    s.row = blockIdx.x;
#else
    s.lane = threadIdx.x % TPR;
    s.row = (long long)blockIdx.x * T_ROWS + threadIdx.x / TPR;
#endif
    return s;
}

/* Planted bug 2 (test builds): one element written past the last row. */
__device__ __forceinline__ void plant_overrun(const RowPtrs &p, long long row, long long rows,
                                              int lane, int cols)
{
#if T_PLANT_BUG == 2
    if (row == rows - 1 && lane == 0)
        store_elem(p.yr + (long long)cols * ESIZE, 0);
#else
    (void)p, (void)row, (void)rows, (void)lane, (void)cols;
#endif
}
