/* softmax_common.cu: what every kernel family (softmax_rows.cu,
 * softmax_grid.cu, softmax_staged.cu) is made of beside its own layout:
 * the dtype's size and -inf, element conversions (one PTX cvt each; no
 * cuda_fp16.h, which keeps NVRTC compiles fast), the store with the
 * variant's cache hint, the cluster's distributed shared memory exchanges
 * (remote loads after a cluster barrier, or pushed into mailboxes: a
 * value or a (max, sum) pair per block, or a pair per warp),
 * the reduction operators and exp(x - max).
 *
 * Idea: one spelling of each primitive, so that a family's template reads
 * as its stages (load, max, exp-and-sum, reduce, store) and nothing else.
 * Codegen puts this file between the variant's defines and the family's
 * template; reference.cu is built on it too, for the dtype's size, -inf and
 * its input generator's rounding, but widens with its own conversion (see
 * there).
 *
 * Variant defines it reads (codegen prepends them):
 *   1. T_DTYPE    0 fp16, 1 bf16, 2 fp32
 *   2. T_ST       0 st.global, 1 .cs (evict-first); absent (reference.cu): 0
 *   3. T_CLUSTER  blocks per row in a thread-block cluster (sm_90); absent
 *                 or 1: no cluster
 *
 * Checked against: everything built on it is compared per element with the
 * float64 reference of reference.cu before it is timed. */

#define ESIZE (T_DTYPE == 2 ? 4 : 2)
#define LOG2E 1.4426950408889634f

typedef unsigned short u16;
typedef unsigned int u32;
typedef unsigned long long u64;

/* -inf as a float, as the dtype's bits, and as a word of two 16-bit
 * elements (the slots past a row's end hold it: it loses every maximum
 * and its exp is 0). */
#define NEG_INF (-__int_as_float(0x7f800000))
#if T_DTYPE == 0
#define NEG_INF_BITS 0xFC00u
#elif T_DTYPE == 1
#define NEG_INF_BITS 0xFF80u
#else
#define NEG_INF_BITS 0xFF800000u
#endif
#define NEG_INF_PAIR (NEG_INF_BITS | (NEG_INF_BITS << 16))

/* The PTX type of two 16-bit elements in one word. */
#if T_DTYPE == 0
#define PAIR_TYPE ".f16x2"
#else
#define PAIR_TYPE ".bf16x2"
#endif

/* ---- element conversions ---- */

__device__ __forceinline__ float bits_to_float(u32 b)
{
#if T_DTYPE == 0
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"((u16)b));
    return f;
#elif T_DTYPE == 1
    return __uint_as_float(b << 16);
#else
    return __uint_as_float(b);
#endif
}

__device__ __forceinline__ u32 float_to_bits(float f)
{
#if T_DTYPE == 0
    u16 h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
    return h;
#elif T_DTYPE == 1
    u16 h;
    asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(f));
    return h;
#else
    return __float_as_uint(f);
#endif
}

#if ESIZE == 2
/* Two fp32 values rounded into one word (lo first), one cvt for the pair. */
__device__ __forceinline__ u32 pack_pair(float lo, float hi)
{
    u32 d;
    asm("cvt.rn" PAIR_TYPE ".f32 %0, %1, %2;" : "=r"(d) : "f"(hi), "f"(lo));
    return d;
}
#endif

/* ---- stores with the variant's cache hint ---- */

#if T_ST == 0
#define ST_OP "st.global"
#else
#define ST_OP "st.global.cs"
#endif

__device__ __forceinline__ void store_elem(unsigned char *p, u32 bits)
{
#if ESIZE == 2
    asm volatile(ST_OP ".u16 [%0], %1;" : : "l"(p), "h"((u16)bits) : "memory");
#else
    asm volatile(ST_OP ".u32 [%0], %1;" : : "l"(p), "r"(bits) : "memory");
#endif
}

/* ---- shared memory and the cluster ---- */

/* The 32-bit shared-memory address of a generic pointer into it. */
__device__ __forceinline__ u32 smem_addr(const void *p)
{
    u32 a;
    asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(a) : "l"(p));
    return a;
}

#if T_CLUSTER > 1
__device__ __forceinline__ unsigned cluster_rank()
{
    unsigned r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
    return r;
}

__device__ __forceinline__ void cluster_sync()
{
    asm volatile("barrier.cluster.arrive.release.aligned;\n\t"
                 "barrier.cluster.wait.acquire.aligned;" ::: "memory");
}

/* The float at the same shared-memory address in CTA `rank` of the
 * cluster (distributed shared memory). */
__device__ __forceinline__ float load_remote(const float *local, unsigned rank)
{
    unsigned remote;
    float v;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;"
                 : "=r"(remote) : "r"(smem_addr(local)), "r"(rank));
    asm volatile("ld.shared::cluster.f32 %0, [%1];" : "=f"(v) : "r"(remote) : "memory");
    return v;
}

/* Reduces v over the cluster's blocks, one value per block (the staged
 * family, whose persistent blocks reduce row after row): thread 0
 * publishes the block's value in exchange, and every thread combines all
 * blocks' values in rank order, so every block computes the same result. */
template <typename Op>
__device__ __forceinline__ float cluster_reduce(float v, float *exchange, Op op)
{
    if (threadIdx.x == 0)
        *exchange = v;
    cluster_sync();
    v = load_remote(exchange, 0);
#pragma unroll
    for (unsigned r = 1; r < T_CLUSTER; r++)
        v = op(v, load_remote(exchange, r));
    return v;
}

/* A mailbox: one round of the register-row kernels' cluster exchange (a
 * block per row part, one round per reduction). Every block pushes its
 * value, or its pair, into slot [its rank] of every block's mailbox with
 * st.async, each store crediting the receiving block's mbarrier with its
 * bytes; a block then waits on its own mbarrier until all T_CLUSTER blocks'
 * bytes have landed, and reads only its own shared memory. So the exchange
 * needs no release/acquire cluster barrier, whose memory fence waits on
 * the block's memory traffic (Nsight Compute, 64x262144 at 16 blocks a
 * row: the largest warp stall), and no block waits for the others before
 * it exits: nobody reads its shared memory, and all that is sent to it has
 * arrived before it goes on. The only cluster barrier is relaxed, and it
 * overlaps the row's loads: arrive after the mailboxes are set up, wait
 * before the first send. */
struct Mailbox {
    float slot[2][T_CLUSTER];
    u64 bar;
};

/* Thread 0, at the start: the mailbox barrier bar expects `bytes` in one
 * phase, from every block's sends (its own included). */
__device__ __forceinline__ void mailbox_expect(u64 &bar_word, int bytes)
{
    if (threadIdx.x == 0) {
        const u32 bar = smem_addr(&bar_word);
        asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" : : "r"(bar) : "memory");
        asm volatile("{ .reg .b64 state; mbarrier.arrive.expect_tx.shared::cta.b64 state, [%0], %1; }"
                     : : "r"(bar), "r"(bytes) : "memory");
    }
}

/* Thread 0, at the start: the mailbox expects `values` floats from each
 * block (its own included), in one phase. */
__device__ __forceinline__ void mailbox_init(Mailbox &box, int values)
{
    mailbox_expect(box.bar, values * T_CLUSTER * 4);
}

/* After mailbox_init: tells the cluster this block's mailboxes are set up.
 * The mbarrier-init fence makes them visible to the other blocks; the
 * arrive itself is relaxed (no fence). */
__device__ __forceinline__ void mailboxes_ready()
{
    if (threadIdx.x == 0)
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory");
}

/* Before a block's first send: every block of the cluster has set its
 * mailboxes up (the other half of mailboxes_ready's relaxed arrive). */
__device__ __forceinline__ void mailboxes_wait_ready()
{
    asm volatile("barrier.cluster.wait.aligned;" ::: "memory");
}

/* Waits until every byte the mailbox barrier expects has landed in this
 * block's shared memory (its one phase). */
__device__ __forceinline__ void mailbox_wait(u64 &bar_word)
{
    const u32 bar = smem_addr(&bar_word);
    u32 done;
    do {
        asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], 0; "
                     "selp.u32 %0, 1, 0, p; }"
                     : "=r"(done) : "r"(bar) : "memory");
    } while (!done);
}

/* The exchange: threads 0 .. T_CLUSTER - 1 send this block's a (and b)
 * to block threadIdx.x; then every thread waits for all blocks' values.
 * first: the block's first exchange, which waits first for every block to
 * have set its mailboxes up. */
__device__ __forceinline__ void mailbox_exchange(Mailbox &box, float a, float b, int values,
                                                 bool first)
{
    if (first)
        mailboxes_wait_ready();
    if (threadIdx.x < T_CLUSTER) {
        const u32 rank = cluster_rank();
        u32 slot_a, slot_b, bar;
        asm volatile("mapa.shared::cluster.u32 %0, %1, %2;"
                     : "=r"(slot_a) : "r"(smem_addr(&box.slot[0][rank])), "r"(threadIdx.x));
        asm volatile("mapa.shared::cluster.u32 %0, %1, %2;"
                     : "=r"(bar) : "r"(smem_addr(&box.bar)), "r"(threadIdx.x));
        asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.f32 [%0], %1, [%2];"
                     : : "r"(slot_a), "f"(a), "r"(bar) : "memory");
        if (values == 2) {
            asm volatile("mapa.shared::cluster.u32 %0, %1, %2;"
                         : "=r"(slot_b) : "r"(smem_addr(&box.slot[1][rank])), "r"(threadIdx.x));
            asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.f32 [%0], %1, [%2];"
                         : : "r"(slot_b), "f"(b), "r"(bar) : "memory");
        }
    }
    mailbox_wait(box.bar);
}

/* A pair mailbox: the one-round (max, sum) exchange of the register-row
 * kernels. With WARP_SENDS every warp of every block pushes its pair into
 * slot [rank * T_WARPS + warp] of every block's mailbox, so a block needs
 * no barrier of its own between its warps' reductions and the cluster's;
 * otherwise the block combines its warps' pairs first and pushes one, into
 * slot [rank]. The mbarrier counts all MAILBOX_PAIRS pairs in.
 * Per-warp sends, measured on the H100 against one send a block
 * (bench/ab-probe.sh): 0.1 to 0.4 us faster while a cluster's blocks
 * send at most 2048 pairs between them (T_CLUSTER^2 * T_WARPS), 0.1 to
 * 0.3 us slower at 4096 and 0.6 to 2.9 us slower at 8192, where each
 * block takes 256 or 512 pairs in. */
#define WARP_SENDS (T_CLUSTER * T_CLUSTER * T_WARPS <= 2048)
#define MAILBOX_PAIRS (WARP_SENDS ? T_CLUSTER * T_WARPS : T_CLUSTER)
struct PairMailbox {
    alignas(8) float pair[MAILBOX_PAIRS][2];
    u64 bar;
};

/* Thread 0, at the start: the pair mailbox expects every warp's pair. */
__device__ __forceinline__ void pair_mailbox_init(PairMailbox &box)
{
    mailbox_expect(box.bar, MAILBOX_PAIRS * 8);
}

/* Lanes 0 .. T_CLUSTER - 1 of each warp (WARP_SENDS; else of the first
 * warp) send the warp's (or the block's) (m, s) to block lane, one 8-byte
 * st.async each; then every thread waits for all pairs. It is the block's
 * first exchange (it waits for the mailboxes to be set up), and its only
 * one. */
__device__ __forceinline__ void pair_mailbox_exchange(PairMailbox &box, float m, float s)
{
    mailboxes_wait_ready();
    const unsigned lane = threadIdx.x % 32;
    if (lane < T_CLUSTER && (WARP_SENDS || threadIdx.x < 32)) {
        const unsigned slot = WARP_SENDS ? cluster_rank() * T_WARPS + threadIdx.x / 32
                                         : cluster_rank();
        u32 remote_slot, remote_bar;
        asm volatile("mapa.shared::cluster.u32 %0, %1, %2;"
                     : "=r"(remote_slot) : "r"(smem_addr(&box.pair[slot][0])), "r"(lane));
        asm volatile("mapa.shared::cluster.u32 %0, %1, %2;"
                     : "=r"(remote_bar) : "r"(smem_addr(&box.bar)), "r"(lane));
        asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.v2.f32 [%0], {%1, %2}, [%3];"
                     : : "r"(remote_slot), "f"(m), "f"(s), "r"(remote_bar) : "memory");
    }
    mailbox_wait(box.bar);
}

#define CLUSTER_ATTRIBUTE __cluster_dims__(T_CLUSTER, 1, 1)
#else
struct Mailbox {};
struct PairMailbox {};
#define WARP_SENDS 0
#define CLUSTER_ATTRIBUTE
#endif

/* ---- the reductions' operators and the exponential ---- */

struct MaxOp {
    __device__ __forceinline__ float operator()(float a, float b) const { return fmaxf(a, b); }
};
struct SumOp {
    __device__ __forceinline__ float operator()(float a, float b) const { return a + b; }
};

/* exp(s (x - max)) as ex2((x - max) * ks), ks = s log2 e, s the forward
 * kernels' scale (s > 0, so max(s x) = s max(x)): the scale rides on the
 * multiply by log2 e that is there anyway, so s costs nothing, and with
 * s = 1 the result is bit for bit the unscaled one. The difference is
 * taken first: prescaling max (x * ks - max * ks in one FMA) loses max's
 * rounding error, which for |max| above ~4e9 (rows masked with -1e10 or
 * the dtype's lowest value) exceeds the exponent range and turned whole
 * rows into NaN. */
__device__ __forceinline__ float exp_shifted(float x, float max, float ks)
{
    float r;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"((x - max) * ks));
    return r;
}
