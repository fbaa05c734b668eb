/* softmax_grid_common.cu: the exchange of a row cut across T_GRID blocks
 * of the grid (softmax_grid.cu's forward kernels, softmax_bwd.cu's
 * backward ones): each block's (max, sum) pair through a workspace in
 * global memory, in one round. A cooperative launch keeps every block of
 * the grid resident at once, so a block may wait for the others.
 *
 * A block publishes its pair tagged with the launch's ticket and reads the
 * row's other pairs once their tags match. The ticket comes from the GPU,
 * not the host: a CUDA graph replays a launch with the parameters it was
 * captured with, so a ticket passed in would be the same on every replay,
 * and a block would take the last replay's pairs for this one's. The host
 * passes the launch's number only to pick one of T_GRID_SLOTS slots
 * (launches on several streams sharing the workspace take different
 * slots); each slot has a word of (epoch, arrivals) at the workspace's
 * head. Every block adds one arrival at its start, its ticket the epoch it
 * saw plus one; the block that arrives last opens the next epoch, with no
 * arrivals, for the slot's next launch. A launch of any grid size thus
 * leaves the word ready for the next.
 *
 * A backward kernel (T_BWD) has one sum and no maximum: its pairs carry
 * the maximum 0, and combining them adds the sums.
 *
 * Checked against: the float64 reference in reference.cu, through the
 * kernels that use it (the GPU tests run splits on long, ragged and
 * unaligned rows, and replay them from CUDA graphs). */

#if T_GRID < 2 || T_ROWS != 1 || T_CLUSTER != 1
#error "a grid split has T_GRID >= 2 blocks of one row each, no cluster"
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

/* The launch's ticket from thread 0's arrival. The last block to arrive
 * opens the slot's next epoch; every block of this launch has read the
 * epoch by then. The ticket names the slot as well as the epoch, never 0
 * (which zeroed memory carries): a slot's pairs lie where the grid's size
 * puts them, so launches of other sizes (the evaluator's variants share
 * one workspace) leave pairs of other slots where this one reads, and
 * those must never match. Tickets repeat only after 2^26 launches a
 * slot. */
__device__ __forceinline__ unsigned grid_ticket(unsigned char *work, unsigned slot, u64 arrival)
{
    const unsigned epoch = (unsigned)(arrival >> 32);
    if ((unsigned)arrival == gridDim.x - 1)
        asm volatile("st.relaxed.gpu.global.u64 [%0], %1;"
                     : : "l"((u64 *)work + slot), "l"((u64)(epoch + 1u) << 32) : "memory");
    return (unsigned)(((u64)epoch * T_GRID_SLOTS + slot) % 0xffffffffull) + 1u;
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
#if T_BWD
        /* One sum: the maxima are all 0, added as they are. */
        float gm = 0.0f, gs = 0.0f;
#pragma unroll
        for (int j = 0; j < PER_LANE; j++)
            if (threadIdx.x + 32 * j < T_GRID)
                gs += __uint_as_float((u32)b[j]);
        gs = lanes_reduce<(T_GRID < 32 ? T_GRID : 32)>(gs, SumOp());
        (void)ks;
#else
        float gm = NEG_INF, gs = 0.0f;
#pragma unroll
        for (int j = 0; j < PER_LANE; j++)
            if (threadIdx.x + 32 * j < T_GRID)
                pair_add(gm, gs, __uint_as_float((u32)a[j]), __uint_as_float((u32)b[j]), ks);
        lanes_combine<(T_GRID < 32 ? T_GRID : 32)>(gm, gs, ks);
#endif
        if (threadIdx.x == 0) {
            shared_m[0] = gm;
            shared_s[0] = gs;
        }
    }
    __syncthreads();
    m = shared_m[0];
    s = shared_s[0];
}

