/* softmax_grid.cu: family "rows" with a row cut across T_GRID blocks of the
 * grid (long rows on few of them: a cooperative launch keeps all blocks
 * resident at once).
 *
 * Idea: the T_GRID blocks of a row run the stages of
 * softmax_rows_common.cu (load, max, exp-and-sum, reduce, store) over a
 * row of ROW_THREADS = T_WARPS*32*T_GRID threads, the reduce stage always
 * the one-round (max, sum) pairs. After a block has its pair, it publishes
 * it in a workspace in global memory, tagged with the launch's ticket, and
 * reads the row's other pairs once their tags match: one round.
 *
 * The ticket comes from the GPU, not the host: a CUDA graph replays a
 * launch with the parameters it was captured with, so a ticket passed in
 * would be the same on every replay, and a block would take the last
 * replay's pairs for this one's. The host passes the launch's number only
 * to pick one of T_GRID_SLOTS slots (launches on several streams sharing
 * the workspace take different slots); each slot has a word of (epoch,
 * arrivals) at the workspace's head. Every block adds one arrival at its
 * start, its ticket the epoch it saw plus one; the block that arrives last
 * opens the next epoch, with no arrivals, for the slot's next launch. A
 * launch of any grid size thus leaves the word ready for the next. Hence
 * two more parameters than softmax_rows.cu: the workspace and the launch's
 * number. Softmax, or with T_LOG log_softmax, of s x (s the scale
 * parameter, s > 0).
 *
 * Variants (codegen prepends the defines, then softmax_common.cu and
 * softmax_rows_common.cu, which explains each):
 *   1. T_DTYPE      0 fp16, 1 bf16, 2 fp32
 *   2. T_WARPS      warps per block: 1, 2, 4, 8, 16, 32 (T_ROWS = 1,
 *                   T_CLUSTER = 1, T_FUSED = 1)
 *   3. T_GRID       blocks per row: 2 to TUNED__GRID_MAX
 *   4. T_GRID_SLOTS slots of the workspace; launch n uses slot n % T_GRID_SLOTS
 *   5. T_MIN_BLOCKS blocks per SM the registers must leave room for (1, 2, 4)
 *   6. T_VEC        elements per vector access (at most 16 bytes)
 *   7. T_ITERS      vector accesses per thread per row
 *   8. T_COLS       the column count the source is generated for
 *   9. T_HEAD_FREE  1: every row starts on a vector boundary
 *  10. T_LD         0 ld.global, 1 .nc, 2 .cs
 *  11. T_ST         0 st.global, 1 .cs
 *  12. T_REG_PACKED 1: keep the loaded words, convert on use
 *  13. T_EXP16      1: keep the exps rounded to the 16-bit dtype
 *  14. T_PLANT_BUG  test builds only: 1 or 2, a planted bug
 *  15. T_LOG        1: log_softmax
 *
 * Checked against: the float64 reference in reference.cu, like every
 * family (the GPU tests run splits on long, ragged and unaligned rows). */

#if T_GRID < 2 || T_ROWS != 1 || T_CLUSTER != 1 || !T_FUSED
#error "a grid split has T_GRID >= 2 blocks of one row each, no cluster, one-round pairs"
#endif

/* How long a block waits for the row's other blocks before it traps: they
 * are resident (cooperative launch) and arrive within microseconds, so a
 * wait this long means the workspace was shared by launches running at
 * once. An error is better than a GPU that never finishes. */
#define GRID_WAIT_NS 2000000000ull
/* Pairs each lane of warp 0 reads: pairs l, l + 32, ... */
#define PER_LANE ((T_GRID + 31) / 32)

/* Adds the pair (m2, s2) to (m, s): the larger maximum, each sum rescaled
 * to it; a pair with m = -inf adds its sum as it is (see lanes_combine). */
__device__ __forceinline__ void pair_add(float &m, float &s, float m2, float s2, float ks)
{
    const float big = fmaxf(m, m2);
    const float a = m == NEG_INF ? s : s * exp_shifted(m, big, ks);
    const float b = m2 == NEG_INF ? s2 : s2 * exp_shifted(m2, big, ks);
    m = big;
    s = a + b;
}

__device__ __forceinline__ u64 global_ns()
{
    u64 t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

/* The block's arrival in its slot, taken by thread 0 at the block's start:
 * the slot's word of (epoch, arrivals) before it. Relaxed, and its value
 * first used in grid_combine, so the round trip overlaps the row's loads. */
__device__ __forceinline__ u64 grid_arrive(unsigned char *work, unsigned slot)
{
    u64 old;
    asm volatile("atom.relaxed.gpu.global.add.u64 %0, [%1], 1;"
                 : "=l"(old) : "l"((u64 *)work + slot) : "memory");
    return old;
}

/* The launch's ticket from thread 0's arrival: the epoch plus one, never 0,
 * which zeroed memory carries. The last block to arrive opens the slot's
 * next epoch; every block of this launch has read the epoch by then. */
__device__ __forceinline__ unsigned grid_ticket(unsigned char *work, unsigned slot, u64 arrival)
{
    const unsigned epoch = (unsigned)(arrival >> 32);
    if ((unsigned)arrival == gridDim.x - 1)
        asm volatile("st.relaxed.gpu.global.u64 [%0], %1;"
                     : : "l"((u64 *)work + slot), "l"((u64)(epoch + 1u) << 32) : "memory");
    return epoch % 0xffffffffu + 1u;
}

/* reduce, across the grid: the block's (m, s) pair combined with those of
 * the T_GRID blocks of its row. Thread 0 publishes the pair as two 64-bit
 * words, each carrying the ticket in its high half: a word is written and
 * read whole, so a reader that sees the ticket sees the value with it, and
 * the slot needs no reset between launches. Warp 0 then waits for the
 * row's pairs (lane l takes pairs l, l + 32, ...) and combines them, in the
 * same order in every block, so every block normalises by the same (max,
 * sum). A pair of 16 bytes is 2 u64, so pair l + 32 j lies 64 j words
 * after pair l. */
__device__ __forceinline__ void grid_combine(float &m, float &s, unsigned char *work,
                                             unsigned slot, u64 arrival, float *shared_m,
                                             float *shared_s, float ks)
{
    u64 *slots = (u64 *)(work + T_GRID_SLOTS * 8 + (u64)slot * gridDim.x * 16);
    unsigned ticket = threadIdx.x == 0 ? grid_ticket(work, slot, arrival) : 0u;
    const u64 tag = (u64)ticket << 32;
    if (threadIdx.x == 0)
        asm volatile("st.relaxed.gpu.global.v2.u64 [%0], {%1, %2};"
                     : : "l"(slots + 2 * blockIdx.x), "l"(tag | __float_as_uint(m)),
                       "l"(tag | __float_as_uint(s)) : "memory");
    if (threadIdx.x < 32) {
        ticket = __shfl_sync(0xffffffffu, ticket, 0); /* thread 0 took it */
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
        float gm = NEG_INF, gs = 0.0f;
#pragma unroll
        for (int j = 0; j < PER_LANE; j++)
            if (threadIdx.x + 32 * j < T_GRID)
                pair_add(gm, gs, __uint_as_float((u32)a[j]), __uint_as_float((u32)b[j]), ks);
        lanes_combine<(T_GRID < 32 ? T_GRID : 32)>(gm, gs, ks);
        if (threadIdx.x == 0) {
            shared_m[0] = gm;
            shared_s[0] = gs;
        }
    }
    __syncthreads();
    m = shared_m[0];
    s = shared_s[0];
}

extern "C" __global__ void __launch_bounds__(T_WARPS * 32, T_MIN_BLOCKS)
tuned_softmax_grid(const unsigned char *x, unsigned char *y, long long rows, int cols,
                   long long row_stride, float scale, unsigned char *work, unsigned launch)
{
    __shared__ float partial_max[T_WARPS];
    __shared__ float partial_sum[T_WARPS];
    __shared__ float exchange_max[1];
    __shared__ float exchange_sum[1];

    /* The row's threads are the whole blocks of its T_GRID blocks, numbered
     * block by block; the launch has exactly T_GRID blocks per row. */
    const int lane = (int)(blockIdx.x % T_GRID) * TPR + (int)threadIdx.x;
    const long long row = blockIdx.x / T_GRID;
    const bool active = true;
    const RowPtrs p = row_ptrs(x, y, row, active, row_stride);

    const float ks = scale * LOG2E;
    const unsigned slot = launch % T_GRID_SLOTS;
    const u64 arrival = threadIdx.x == 0 ? grid_arrive(work, slot) : 0u;
    Held h;
    load_row(h, p, lane, cols, active);
    const float max = thread_max(h);
    float sum = exp_and_sum(h, max, ks);
    float row_max = max;
    reduce_row(row_max, sum, partial_max, partial_sum, exchange_max, exchange_sum, ks);
    grid_combine(row_max, sum, work, slot, arrival, exchange_max, exchange_sum, ks);
    const RowOut o = row_out(max, row_max, sum, scale, ks);
    store_row(p, lane, cols, active, [&](int it, int k) { return forward_value(h, it, k, o); });
    plant_overrun(p, row, rows, lane, cols);
}
