/* router_topk.cu: family "rows", the mixture-of-experts router: a row of
 * expert logits scored (softmax, sigmoid or sqrt-softplus), its top k
 * experts chosen (optionally among the best groups of experts, with a
 * bias that moves the choice only) and their weights written, in one
 * kernel; and its backward.
 *
 * Idea: a row is E = T_COLS logits (2 to 2048), so a row fits in the
 * registers of part of a warp: TPR = T_WARPS*32/T_ROWS threads (1, 2, 4,
 * 8, 16 or 32) share it, every element is read once, and all the
 * selection happens in registers and warp instructions, with no shared
 * memory and no block barrier. Per row, x the logits, b the bias (fp32,
 * E entries, or NULL), c the scaling:
 *   score   s_j = softmax_j(x) (T_SCORE 0), sigmoid(x_j) (1) or
 *           sqrt(softplus(x_j)) (2), in fp32
 *   choose  v_j = s_j + b_j (no bias: v_j = s_j, ordered as x_j is: every
 *           score is increasing in x, and x keeps apart what the fp32 and
 *           float64 scores round together; for softmax a row whose scores
 *           are all NaN (a NaN or +inf logit, or only -inf) has every v NaN)
 *           groups (T_GROUPS > 1): E/T_GROUPS consecutive experts a group,
 *           a group's score the sum of its two largest v (its one v if it
 *           has one expert), the T_TOPK_GROUP best groups kept (ties to the
 *           lower group), the other groups' experts out of the choice
 *           the T_TOPK largest v, in descending order, ties to the lower
 *           index, NaN above +inf (as torch.topk), two NaNs tied
 *   weight  w_i = c s_{id_i}, or with T_RENORM c s_{id_i} / sum_m s_{id_m}
 *           formed as exp(l_i - L) / sum_m exp(l_m - L), l = log s (softmax:
 *           l = x, the softmax over the chosen logits), L the largest
 *           chosen l: the same number, with no underflow where the scores
 *           do (a bias picking logits far below the row's maximum, sigmoid
 *           below -87); softmax: NaN where the row's softmax is NaN, as
 *           s_{id_i} / sum is; a +inf score (sqrt-softplus) makes the
 *           row's renormalized weights NaN
 *   outputs weights fp32 and ids (int32, T_IDS64: int64), rows x k, row r
 *           at r*k; counts (int32, E, caller-zeroed, or NULL): one
 *           atomicAdd per chosen expert
 * Backward (tuned_router_topk_bwd), from the logits, the chosen ids and
 * the weights' gradient g (g_i for the i-th chosen, 0 for the others),
 * the scores recomputed, every element of dlogits written once:
 *   softmax            dx_j = c p_j (g_j - sum_i g_i p_{id_i})
 *   sigmoid, sqrt-sp.  dx_{id_i} = c g_i f'(x_{id_i}); others 0
 *   renorm (any)       dx_m = (c/S)(g_m - sum_i g_i s_i / S) f'(x_m) for
 *                      chosen m, S = sum of the chosen s, others 0; formed
 *                      as c q_m (g_m - sum_i g_i q_i) f'(x_m) / f(x_m), q
 *                      the forward's renormalized weights over c (softmax:
 *                      f'/f is 1 and q the softmax over the chosen logits,
 *                      NaN where the row's softmax is NaN)
 *   f' = s (1 - s) for sigmoid (as sigmoid(x) sigmoid(-x)), sigmoid(x) /
 *   (2 sqrt(softplus(x))) for sqrt-softplus. Ids outside [0, E) choose
 *   nothing (never an index); an id given twice adds its g twice.
 *
 * Stages (the forward; the backward loads, scatters g, reduces, stores):
 *   load     each thread's T_VEC-element vectors, pass it of lane l
 *            covering columns (it*TPR + l)*T_VEC ..: coalesced; whole
 *            vectors where the row starts on a vector boundary, else (and
 *            for the vector the row's end cuts) element by element; slots
 *            past the row hold -inf for the softmax and no key
 *   stats    softmax only: the row's maximum and sum of exp(x - max),
 *            reduced over the row's lanes with xor shuffles
 *   keys     each element's v as a 32-bit integer whose signed order is
 *            the choice's order (NaN the largest, -0 as +0), slots past
 *            the row a key below every float's; without a bias from the
 *            logits alone, so the rounds run beside the stats' shuffles
 *            (a softmax row of NaN scores gets ids 0 to k-1 at the store)
 *   groups   each thread's two largest keys of every group, combined over
 *            the lanes, the groups' scores, the kept groups; the keys of
 *            the others dropped
 *   select   k rounds of an argmax over the row's lanes (a warp: two
 *            redux.sync, the largest key, then the lowest index holding
 *            it; part of a warp: xor shuffles of (key, index) pairs), each
 *            thread offering its best key not yet taken:
 *              T_SEL 0  its best by a scan of its keys, the taken key
 *                       dropped by its owner, rescanned every round
 *              T_SEL 1  its min(k, held) best sorted once (insertion, in
 *                       registers), then its list's head; the owner pops it
 *            the i-th chosen lands in lane i % TPR, slot i / TPR
 *   weight   each lane its slots' scores (T_RENORM: exp(l - L) of the
 *            log-scores, summed over the row's lanes), times c
 *   store    weights and ids, a lane per output (coalesced), counts
 * With a bias the selection needs the scores first and the winner's logit
 * comes from its owner by one shuffle; without one the keys are the
 * logits', and every lane reads the winner's logit back from its key.
 * A thread whose row is past the last returns at once: no reduction
 * spans more than its row's lanes (their mask), and there is no barrier.
 * Cost (H200, 16384 x 128 fp32, softmax, k 8, TPR 32, T_SEL 1): 9.3 us,
 * 5.2 us at k 1, where a copy kernel of the same bytes takes 4.4 us: each
 * round costs about 0.55 us, issue-bound on its dozen integer
 * instructions and two redux.sync a row (one row per warp instruction;
 * TPR 8 and 16, several rows a warp, lose more to their shuffles and
 * their per-thread sorts and scans). With a bias and groups (16384 x 256
 * bf16, sigmoid, 8 groups keep 4, k 8) 31 us (TPR 8, T_SEL 1), the copy
 * 4.3 us: the per-thread sort of 32 held keys and the group scans are
 * what to make cheaper next.
 *
 * Variants (codegen prepends the defines, then softmax_common.cu, which
 * this file follows; it is compiled with no other part):
 *   T_DTYPE       0 fp16, 1 bf16, 2 fp32 (math in fp32)
 *   T_WARPS       warps per block, 1 to 32
 *   T_ROWS        rows per block; TPR = T_WARPS*32/T_ROWS in 1, 2, 4, 8,
 *                 16, 32; a thread holds at most 64 elements (T_COLS / TPR
 *                 in whole vectors: E = 2048 needs TPR 32, E = 256 TPR >= 4)
 *   T_MIN_BLOCKS  __launch_bounds__' minimum blocks per SM
 *   T_VEC         elements per vector load: 1, 2, 4, 8; at most 16 bytes
 *   T_COLS        E, 2 to 2048; the kernels' cols must equal it (a launch
 *                 with another does nothing)
 *   T_LD          0 ld.global, 1 ld.global.nc, 2 ld.global.cs
 *   T_SEL         0 rescans (absent: 0), 1 sorted lists (above)
 *   T_TOPK        k, 1 to min(E, 64); with groups at most
 *                 T_TOPK_GROUP * E / T_GROUPS
 *   T_SCORE       0 softmax, 1 sigmoid, 2 sqrt(softplus)
 *   T_GROUPS      1 (no groups) to 32, dividing E
 *   T_TOPK_GROUP  groups kept, 1 to T_GROUPS (1 without groups)
 *   T_RENORM      0, 1: weights divided by the chosen scores' sum
 *   T_IDS64       0 int32 ids, 1 int64; absent: 0 where T_IDS32 (the
 *                 kind's flag) is 1, else 1
 *   T_ST          softmax_common.cu's store hint, for dlogits (absent: 0)
 * The other rows-family defines codegen may emit are ignored (T_ITERS,
 * T_HEAD_FREE, T_HEAD_ALIGN, T_BWD: both kernels are always here) or
 * refused when they ask for what this kernel has not (T_CLUSTER > 1,
 * T_GRID > 1, T_REG_PACKED, T_EXP16, T_FUSED, T_LOG, T_STASH, T_REPLICAS,
 * T_PLANT_BUG).
 *
 * Checked against: the float64 router on the host
 * (src/driver/router_reference.c: weights and ids per row, dlogits per
 * element, same order, ties, NaN and groups), by src/driver/
 * check_router.c. Where two v differ by less than fp32 rounding (a bias
 * added to near-equal scores, groups' sums) the kernel and the reference
 * may order them apart: the check accepts such swaps. */

/* ---- the defines: required, and what is refused ---- */

#if !defined(T_WARPS) || !defined(T_ROWS) || !defined(T_MIN_BLOCKS) || !defined(T_VEC) || \
    !defined(T_COLS) || !defined(T_LD)
#error "router_topk.cu: needs T_WARPS, T_ROWS, T_MIN_BLOCKS, T_VEC, T_COLS and T_LD"
#endif
/* The backward kind selects nothing, and codegen gives it no T_SEL (its
 * space has no sel): the forward, compiled beside it, then scans. */
#ifndef T_SEL
#define T_SEL 0
#endif

/* The router's own defines and types (codegen sets them from the kind's
 * key parameters and its flag T_IDS32). */
#ifndef TUNED_ROUTER_DEFINES
#define TUNED_ROUTER_DEFINES
/* The ids' width from codegen: the kind's compiled-in option T_IDS32 (its
 * flag), else int64, the width the kind is tuned and checked at. */
#ifndef T_IDS64
#if defined(T_IDS32) && T_IDS32
#define T_IDS64 0
#else
#define T_IDS64 1
#endif
#endif
#if !defined(T_TOPK) || !defined(T_SCORE) || !defined(T_GROUPS) || !defined(T_TOPK_GROUP) || \
    !defined(T_RENORM) || !defined(T_IDS64) || !defined(T_COLS)
#error "router: needs T_TOPK, T_SCORE, T_GROUPS, T_TOPK_GROUP, T_RENORM, T_IDS64 and T_COLS"
#endif
#if T_COLS < 2 || T_COLS > 2048
#error "router: T_COLS (experts) is 2 to 2048"
#endif
#if T_TOPK < 1 || T_TOPK > 64 || T_TOPK > T_COLS
#error "router: T_TOPK is 1 to min(T_COLS, 64)"
#endif
#if T_SCORE < 0 || T_SCORE > 2
#error "router: T_SCORE is 0 (softmax), 1 (sigmoid) or 2 (sqrt(softplus))"
#endif
#if T_GROUPS < 1 || T_GROUPS > 32 || T_COLS % T_GROUPS != 0
#error "router: T_GROUPS is 1 to 32 and divides T_COLS"
#endif
#if T_TOPK_GROUP < 1 || T_TOPK_GROUP > T_GROUPS
#error "router: T_TOPK_GROUP is 1 to T_GROUPS (1 without groups)"
#endif
#if T_TOPK > T_TOPK_GROUP * (T_COLS / T_GROUPS)
#error "router: T_TOPK is more than the kept groups hold (T_TOPK_GROUP * T_COLS / T_GROUPS)"
#endif
#if T_RENORM != 0 && T_RENORM != 1
#error "router: T_RENORM is 0 or 1"
#endif
#if T_IDS64 != 0 && T_IDS64 != 1
#error "router: T_IDS64 is 0 (int32 ids) or 1 (int64)"
#endif

/* The logits' element: fp32, or the bits of an fp16 or bf16. */
#if T_DTYPE == 2
typedef float T;
#else
typedef unsigned short T;
#endif
#if T_IDS64
typedef long long IDX;
#else
typedef int IDX;
#endif

/* The options, by value: exactly one float, so the host passes a float. */
struct tuned_router_options {
    float scaling; /* c: the weights' factor */
};
static_assert(sizeof(tuned_router_options) == 4, "tuned_router_options is one float");
#endif

#if (defined(T_CLUSTER) && T_CLUSTER > 1) || (defined(T_GRID) && T_GRID > 1)
#error "router_topk.cu: a row lives in one warp: no T_CLUSTER or T_GRID above 1"
#endif
#if (defined(T_REG_PACKED) && T_REG_PACKED) || (defined(T_EXP16) && T_EXP16) || \
    (defined(T_FUSED) && T_FUSED) || (defined(T_LOG) && T_LOG) ||                   \
    (defined(T_STASH) && T_STASH) || (defined(T_REPLICAS) && T_REPLICAS > 1) ||     \
    (defined(T_PLANT_BUG) && T_PLANT_BUG)
#error "router_topk.cu: no T_REG_PACKED, T_EXP16, T_FUSED, T_LOG, T_STASH, T_REPLICAS or T_PLANT_BUG"
#endif
#if T_WARPS < 1 || T_WARPS > 32 || T_ROWS < 1 || (T_WARPS * 32) % T_ROWS != 0
#error "router_topk.cu: T_WARPS is 1 to 32, T_ROWS divides the block's threads"
#endif

#define RT_TPR (T_WARPS * 32 / T_ROWS)
#if RT_TPR != 1 && RT_TPR != 2 && RT_TPR != 4 && RT_TPR != 8 && RT_TPR != 16 && RT_TPR != 32
#error "router_topk.cu: threads per row (T_WARPS*32/T_ROWS) is 1, 2, 4, 8, 16 or 32"
#endif
#if T_VEC != 1 && T_VEC != 2 && T_VEC != 4 && T_VEC != 8
#error "router_topk.cu: T_VEC is 1, 2, 4 or 8"
#endif
#define RT_VBYTES (T_VEC * ESIZE)
#if RT_VBYTES > 16
#error "router_topk.cu: a vector is at most 16 bytes (T_VEC * element size)"
#endif
#if T_SEL != 0 && T_SEL != 1
#error "router_topk.cu: T_SEL is 0 (rescans) or 1 (sorted lists)"
#endif

/* A thread's share of the row: RT_ITERS passes of T_VEC, RT_HELD elements. */
#define RT_NWORDS (RT_VBYTES >= 4 ? RT_VBYTES / 4 : 1)
#define RT_PASS (RT_TPR * T_VEC)
#define RT_ITERS ((T_COLS + RT_PASS - 1) / RT_PASS)
#define RT_HELD (RT_ITERS * T_VEC)
/* Registers bound the row part: at 128 elements a thread every variant
 * spilled, and one took 7 minutes to compile (at 64, 25 s at most). */
#if RT_HELD > 64
#error "router_topk.cu: a thread holds at most 64 elements (T_COLS / TPR in whole vectors): use more threads per row"
#endif
/* Outputs a lane keeps (output i in lane i % TPR, slot i / TPR). */
#define RT_SLOTS ((T_TOPK + RT_TPR - 1) / RT_TPR)
/* A thread's sorted candidates (T_SEL 1). */
#define RT_LIST (T_TOPK < RT_HELD ? T_TOPK : RT_HELD)
#define RT_GS (T_COLS / T_GROUPS)
#define RT_SELW ((RT_HELD + 31) / 32)

/* Element e of a thread (pass e / T_VEC, place e % T_VEC) is column
 * lane*T_VEC + rt_off(e): the offset is known when the source is compiled. */
__device__ constexpr int rt_off(int e)
{
    return (e / T_VEC) * RT_PASS + e % T_VEC;
}
/* Whether element e lies inside the row in every lane. */
__device__ constexpr bool rt_always_in(int e)
{
    return rt_off(e) + (RT_TPR - 1) * T_VEC < T_COLS;
}

/* ---- loads with the variant's cache hint ---- */

#if T_LD == 0
#define RT_LD_OP "ld.global"
#elif T_LD == 1
#define RT_LD_OP "ld.global.nc"
#elif T_LD == 2
#define RT_LD_OP "ld.global.cs"
#else
#error "router_topk.cu: T_LD is 0 (ld.global), 1 (.nc) or 2 (.cs)"
#endif

__device__ __forceinline__ u32 router_load_elem(const unsigned char *p)
{
#if ESIZE == 2
    u16 h;
    asm volatile(RT_LD_OP ".u16 %0, [%1];" : "=h"(h) : "l"(p));
    return h;
#else
    u32 w;
    asm volatile(RT_LD_OP ".u32 %0, [%1];" : "=r"(w) : "l"(p));
    return w;
#endif
}

/* One whole vector (RT_VBYTES, aligned) at p. */
__device__ __forceinline__ void router_load_vec(const unsigned char *p, u32 (&w)[RT_NWORDS])
{
#if RT_VBYTES == 2
    w[0] = router_load_elem(p);
#elif RT_VBYTES == 4
    asm volatile(RT_LD_OP ".u32 %0, [%1];" : "=r"(w[0]) : "l"(p));
#elif RT_VBYTES == 8
    asm volatile(RT_LD_OP ".v2.u32 {%0, %1}, [%2];" : "=r"(w[0]), "=r"(w[1]) : "l"(p));
#else
    asm volatile(RT_LD_OP ".v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(w[0]), "=r"(w[1]), "=r"(w[2]), "=r"(w[3]) : "l"(p));
#endif
}

__device__ __forceinline__ void router_store_vec(unsigned char *p, const u32 (&w)[RT_NWORDS])
{
#if RT_VBYTES == 2
    store_elem(p, w[0]);
#elif RT_VBYTES == 4
    asm volatile(ST_OP ".u32 [%0], %1;" : : "l"(p), "r"(w[0]) : "memory");
#elif RT_VBYTES == 8
    asm volatile(ST_OP ".v2.u32 [%0], {%1, %2};" : : "l"(p), "r"(w[0]), "r"(w[1]) : "memory");
#else
    asm volatile(ST_OP ".v4.u32 [%0], {%1, %2, %3, %4};"
                 : : "l"(p), "r"(w[0]), "r"(w[1]), "r"(w[2]), "r"(w[3]) : "memory");
#endif
}

/* Element k of a vector held as words. */
__device__ __forceinline__ u32 router_word_elem(const u32 (&w)[RT_NWORDS], int k)
{
#if ESIZE == 2 && RT_VBYTES >= 4
    return (w[k / 2] >> (16 * (k % 2))) & 0xFFFFu;
#else
    return w[k];
#endif
}

/* ---- the row's lanes ---- */

/* Which row a thread works on, its lane among the row's TPR threads, and
 * the mask of those threads in its warp (every reduction names only
 * them, so a row past the last may return at once). */
struct RouterSlot {
    long long row;
    int lane;
    unsigned mask;
};

__device__ __forceinline__ RouterSlot router_slot()
{
    RouterSlot s;
    s.lane = (int)(threadIdx.x % RT_TPR);
    s.row = (long long)blockIdx.x * T_ROWS + threadIdx.x / RT_TPR;
    s.mask = RT_TPR == 32 ? 0xFFFFFFFFu
                          : ((1u << (RT_TPR % 32)) - 1u) << (threadIdx.x % 32 / RT_TPR * RT_TPR);
    return s;
}

__device__ __forceinline__ float lanes_sum(float v, unsigned mask)
{
#pragma unroll
    for (int o = RT_TPR / 2; o > 0; o /= 2)
        v += __shfl_xor_sync(mask, v, o);
    return v;
}

__device__ __forceinline__ float lanes_max(float v, unsigned mask)
{
#pragma unroll
    for (int o = RT_TPR / 2; o > 0; o /= 2)
        v = fmaxf(v, __shfl_xor_sync(mask, v, o));
    return v;
}

/* Integer reductions over the row's lanes: for a whole warp one
 * redux.sync each; for part of a warp xor shuffles (redux.sync with a
 * sub-warp mask gave wrong groups on the H200: T_WARPS 1, TPR 4, T_VEC 2,
 * 32 groups; a debug store moved the bug away, so it was not trusted). */
__device__ __forceinline__ int lanes_max_int(int v, unsigned mask)
{
#if RT_TPR == 32
    int r;
    asm volatile("redux.sync.max.s32 %0, %1, %2;" : "=r"(r) : "r"(v), "r"(mask));
    return r;
#else
#pragma unroll
    for (int o = RT_TPR / 2; o > 0; o /= 2)
        v = max(v, __shfl_xor_sync(mask, v, o));
    return v;
#endif
}

#if RT_TPR == 32
__device__ __forceinline__ unsigned lanes_min_u32(unsigned v, unsigned mask)
{
    unsigned r;
    asm volatile("redux.sync.min.u32 %0, %1, %2;" : "=r"(r) : "r"(v), "r"(mask));
    return r;
}

__device__ __forceinline__ int lanes_add_int(int v, unsigned mask)
{
    int r;
    asm volatile("redux.sync.add.s32 %0, %1, %2;" : "=r"(r) : "r"(v), "r"(mask));
    return r;
}
#endif

/* ---- load ---- */

/* The row at xr into x (fp32), -inf past its end: whole vectors where xr
 * is on a vector boundary (aligned) and the vector lies inside the row,
 * else element by element. Nothing past the row is read. */
__device__ __forceinline__ void router_load_row(float (&x)[RT_HELD], const unsigned char *xr,
                                                bool aligned, int lane)
{
#pragma unroll
    for (int it = 0; it < RT_ITERS; it++) {
        const int first = (it * RT_TPR + lane) * T_VEC;
        const bool pass_inside = (it + 1) * RT_PASS <= T_COLS;
        if (aligned && (pass_inside || first + T_VEC <= T_COLS)) {
            u32 w[RT_NWORDS];
            router_load_vec(xr + (long long)first * ESIZE, w);
#pragma unroll
            for (int k = 0; k < T_VEC; k++)
                x[it * T_VEC + k] = bits_to_float(router_word_elem(w, k));
        } else {
#pragma unroll
            for (int k = 0; k < T_VEC; k++) {
                const int c = first + k;
                x[it * T_VEC + k] = (pass_inside || c < T_COLS)
                                        ? bits_to_float(router_load_elem(xr + (long long)c * ESIZE))
                                        : NEG_INF;
            }
        }
    }
}

/* Whether element e of lane is a column of the row. */
__device__ __forceinline__ bool router_in_row(int e, int lane)
{
    return rt_always_in(e) || lane * T_VEC + rt_off(e) < T_COLS;
}

/* ---- scores ---- */

__device__ __forceinline__ float router_ex2(float a)
{
    float r;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(a));
    return r;
}

/* What the scores need of the row: the softmax's maximum and 1 / sum, and
 * whether its scores are all NaN (a NaN or +inf logit, or only -inf). */
struct RouterStats {
    float max, inv_sum;
    bool nan_row;
};

/* stats: the row's maximum (NaN ignored, as fmaxf) and sum of
 * exp(x - max), reduced over its lanes; the slots past the row hold -inf
 * and add 0. Nothing for sigmoid and sqrt-softplus. */
__device__ __forceinline__ RouterStats router_stats(const float (&x)[RT_HELD], unsigned mask)
{
    RouterStats st;
#if T_SCORE == 0
    float m = NEG_INF;
#pragma unroll
    for (int e = 0; e < RT_HELD; e++)
        m = fmaxf(m, x[e]);
    m = lanes_max(m, mask);
    float s = 0.0f;
#pragma unroll
    for (int e = 0; e < RT_HELD; e++)
        s += exp_shifted(x[e], m, LOG2E);
    s = lanes_sum(s, mask);
    st.max = m;
    st.inv_sum = __frcp_rn(s);
    st.nan_row = isnan(s);
#else
    (void)x, (void)mask;
    st.max = 0.0f;
    st.inv_sum = 1.0f;
    st.nan_row = false;
#endif
    return st;
}

/* 1 / d correctly rounded for d in [1, 2]: rcp.rn's own fast path (one
 * MUFU.RCP and a Newton step, the same instructions, so the same bits),
 * without its test for operands near the exponent's ends and the branch
 * to the slow path. That branch closed a BSSY/BSYNC region around every
 * sigmoid: ptxas could not overlap one element's exp and reciprocal with
 * the next's, and a bias's keys (E / TPR sigmoids a thread, 12 at E = 384
 * in a warp) formed a serial chain of about 90 cycles each. */
__device__ __forceinline__ float router_rcp_1to2(float d)
{
    float r;
    asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(d));
    return fmaf(r, fmaf(-d, r, 1.0f), r);
}

/* sigmoid(x) and its derivative sigmoid(x) sigmoid(-x), from one exp of
 * -|x| (<= 1: no overflow, and both sides keep their relative precision). */
__device__ __forceinline__ void router_sigmoid(float x, float &s, float &ds)
{
    const float e = router_ex2(-fabsf(x) * LOG2E);
    const float r = router_rcp_1to2(1.0f + e); /* 1 + e in [1, 2] */
    s = x >= 0.0f ? r : e * r;
    ds = e * r * r;
}

/* Below this x, softplus(x) = e^x and sigmoid(x) = e^x to fp32 precision:
 * sqrt(softplus) is e^(x/2) (which stays a normal float well after e^x
 * has underflowed) and its derivative e^(x/2) / 2. */
#define RT_SOFTPLUS_TAIL -20.0f

__device__ __forceinline__ float router_sqrt_softplus(float x)
{
    if (x < RT_SOFTPLUS_TAIL)
        return router_ex2(x * (0.5f * LOG2E));
    return sqrtf(fmaxf(x, 0.0f) + log1pf(router_ex2(-fabsf(x) * LOG2E)));
}

/* log s(x) up to a constant of the row (softmax: x), what renormalized
 * weights are formed from: q_i = exp(l_i - L) / sum_m exp(l_m - L), L the
 * largest chosen l (l increases with x, so L = l(the largest chosen x)).
 * It is s_i / sum s, with no underflow where the scores are below fp32's
 * range (sigmoid of logits below -87: s / sum s would be 0 / 0). */
__device__ __forceinline__ float router_log_score(float x)
{
#if T_SCORE == 0
    return x;
#elif T_SCORE == 1
    return fminf(x, 0.0f) - log1pf(router_ex2(-fabsf(x) * LOG2E));
#else
    if (x < RT_SOFTPLUS_TAIL)
        return 0.5f * x;
    return 0.5f * logf(fmaxf(x, 0.0f) + log1pf(router_ex2(-fabsf(x) * LOG2E)));
#endif
}

/* f'(x) / f(x), the renormalized backward's factor: 1 for softmax (its
 * q is the softmax over the chosen logits), sigmoid(-x) for sigmoid,
 * sigmoid(x) / (2 softplus(x)) for sqrt-softplus (1/2 in its tail). */
__device__ __forceinline__ float router_dlog_score(float x)
{
#if T_SCORE == 0
    (void)x;
    return 1.0f;
#elif T_SCORE == 1
    float s, ds;
    router_sigmoid(-x, s, ds);
    return s;
#else
    if (x < RT_SOFTPLUS_TAIL)
        return 0.5f;
    float s, ds;
    router_sigmoid(x, s, ds);
    return s * __frcp_rn(2.0f * (fmaxf(x, 0.0f) + log1pf(router_ex2(-fabsf(x) * LOG2E))));
#endif
}

/* score: s = f(x) in fp32. */
__device__ __forceinline__ float router_score(float x, const RouterStats &st)
{
#if T_SCORE == 0
    return exp_shifted(x, st.max, LOG2E) * st.inv_sum;
#elif T_SCORE == 1
    float s, ds;
    router_sigmoid(x, s, ds);
    return s;
#else
    (void)st;
    return router_sqrt_softplus(x);
#endif
}

/* ---- keys ---- */

/* v as an integer of the same order: a float's bits with a negative's
 * magnitude flipped (the map is its own inverse), every NaN the largest
 * key, -0 the key of +0 (they tie); RT_KEY_NONE, below every float's key
 * (-inf's is 0x807FFFFF), marks a slot that is not a candidate. */
#define RT_KEY_NONE ((int)0x80000000)
#define RT_KEY_NAN 0x7FFFFFFF

__device__ __forceinline__ int router_key(float v)
{
    const int b = __float_as_int(v);
    if ((b & 0x7FFFFFFF) > 0x7F800000)
        return RT_KEY_NAN;
    const int k = b ^ ((b >> 31) & 0x7FFFFFFF);
    return k == -1 ? 0 : k;
}

__device__ __forceinline__ float router_key_value(int k)
{
    return __int_as_float(k ^ ((k >> 31) & 0x7FFFFFFF));
}

/* The bias of each element a thread holds (0 past the row), loaded
 * through the read-only cache (E floats every row shares) all at once,
 * before any math: loaded where each key is formed, every load waited
 * for the score before it (12 DRAM round trips in a row at E = 384 when
 * the cache is cold, a few microseconds for a decode step's router). */
__device__ __forceinline__ void router_load_bias(float (&b)[RT_HELD], const float *bias, int lane)
{
#pragma unroll
    for (int e = 0; e < RT_HELD; e++)
        b[e] = router_in_row(e, lane) ? __ldg(bias + lane * T_VEC + rt_off(e)) : 0.0f;
}

/* keys: each element's selection key. No bias: its logit's, formed from
 * the loaded row alone, so that the selection's rounds need not wait for
 * the softmax's stats (two chains of five shuffles): they run beside them,
 * and a softmax row whose scores are all NaN takes its ids from
 * router_store (0 to k-1, every NaN tied); with a bias: s + b's (b from
 * router_load_bias). */
template <bool BIAS>
__device__ __forceinline__ void router_keys(int (&key)[RT_HELD], const float (&x)[RT_HELD],
                                            const float (&b)[RT_HELD], const RouterStats &st,
                                            int lane)
{
#pragma unroll
    for (int e = 0; e < RT_HELD; e++) {
        if (!router_in_row(e, lane)) {
            key[e] = RT_KEY_NONE;
        } else if (BIAS) {
            key[e] = router_key(router_score(x[e], st) + b[e]);
        } else {
            key[e] = router_key(x[e]);
        }
    }
}

/* The logit a key of the no-bias kind stands for, and v of any key: the
 * bias's keys are v's own, the others' the logit's, whose score is v. */
template <bool BIAS>
__device__ __forceinline__ float router_key_v(int k, const RouterStats &st)
{
    return BIAS ? router_key_value(k) : router_score(router_key_value(k), st);
}

/* ---- groups ---- */

#if T_GROUPS > 1
/* The two largest keys over the row's lanes, from each lane's two largest
 * (a1 >= a2). A warp: the largest (redux.sync); the second is the largest
 * again where two lanes hold it, else the largest of the others' largest
 * and its holder's second. Part of a warp: pairs merged by xor shuffles. */
__device__ __forceinline__ void router_top2(int a1, int a2, unsigned mask, int &t1, int &t2)
{
#if RT_TPR == 32
    t1 = lanes_max_int(a1, mask);
    const int holders = lanes_add_int(a1 == t1 ? 1 : 0, mask);
    const int rest = lanes_max_int(a1 == t1 ? a2 : a1, mask);
    t2 = holders > 1 ? t1 : rest;
#else
#pragma unroll
    for (int o = RT_TPR / 2; o > 0; o /= 2) {
        const int b1 = __shfl_xor_sync(mask, a1, o), b2 = __shfl_xor_sync(mask, a2, o);
        a2 = max(min(a1, b1), max(a2, b2));
        a1 = max(a1, b1);
    }
    t1 = a1;
    t2 = a2;
#endif
}

/* groups: each thread's two largest keys of each group, combined over the
 * row's lanes (router_top2); a group's score v1 + v2 (v1 alone for one expert
 * a group); the T_TOPK_GROUP best groups by score (NaN first, ties to the
 * lower group) kept, every other group's keys dropped. */
template <bool BIAS>
__device__ __forceinline__ void router_keep_groups(int (&key)[RT_HELD], const RouterStats &st,
                                                   int lane, unsigned mask)
{
    int a1[T_GROUPS], a2[T_GROUPS];
#pragma unroll
    for (int g = 0; g < T_GROUPS; g++)
        a1[g] = a2[g] = RT_KEY_NONE;
#pragma unroll
    for (int e = 0; e < RT_HELD; e++) {
        const int ge = (lane * T_VEC + rt_off(e)) / RT_GS;
#pragma unroll
        for (int g = 0; g < T_GROUPS; g++) {
            if (ge == g) {
                const int hi = max(a1[g], key[e]), lo = min(a1[g], key[e]);
                a2[g] = max(a2[g], lo);
                a1[g] = hi;
            }
        }
    }
    int gkey[T_GROUPS];
#pragma unroll
    for (int g = 0; g < T_GROUPS; g++) {
        int t1, t2;
        router_top2(a1[g], a2[g], mask, t1, t2);
        float score = router_key_v<BIAS>(t1, st);
        if (RT_GS > 1)
            score += router_key_v<BIAS>(t2, st);
        gkey[g] = router_key(score);
    }
    unsigned kept = 0;
#pragma unroll
    for (int r = 0; r < T_TOPK_GROUP; r++) {
        int best = 0, bk = RT_KEY_NONE;
#pragma unroll
        for (int g = T_GROUPS - 1; g >= 0; g--) {
            /* from the last group down, >=: ties go to the lower group */
            if (!(kept >> g & 1u) && gkey[g] >= bk) {
                bk = gkey[g];
                best = g;
            }
        }
        kept |= 1u << best;
    }
#pragma unroll
    for (int e = 0; e < RT_HELD; e++) {
        const int ge = (lane * T_VEC + rt_off(e)) / RT_GS;
        if (!(kept >> (ge % 32) & 1u))
            key[e] = RT_KEY_NONE;
    }
}
#endif

/* ---- select ---- */

/* What the selection leaves in a lane: its outputs' columns and logits,
 * and (for T_RENORM) the largest chosen logit. */
struct RouterChoice {
    int id[RT_SLOTS];
    float x[RT_SLOTS];
    float max_x;
};

/* Round i's winner, known to every lane of the row: lane i % TPR keeps
 * its column and its logit. Without a bias the logit is the key's, kept
 * as the key's bits and turned back into the logit once, at the store
 * (router_chosen_x), not in every round; and the largest chosen logit is
 * round 0's, the keys coming out in descending order. With a bias v
 * orders the choice, not x: the owner's logit, and their running max. */
template <bool BIAS>
__device__ __forceinline__ void router_keep(RouterChoice &ch, int i, int win, int top, float xw,
                                            int lane)
{
    if (lane == i % RT_TPR) {
        ch.id[i / RT_TPR] = win;
        ch.x[i / RT_TPR] = BIAS ? xw : __int_as_float(top);
    }
    if (BIAS)
        ch.max_x = fmaxf(ch.max_x, xw);
    else if (i == 0)
        ch.max_x = router_key_value(top);
}

/* The logit of a lane's slot s (router_keep). */
template <bool BIAS>
__device__ __forceinline__ float router_chosen_x(const RouterChoice &ch, int s)
{
    return BIAS ? ch.x[s] : router_key_value(__float_as_int(ch.x[s]));
}

/* The argmax of one round over the row's lanes, each offering its best
 * key k at column c: the largest key, ties to the lowest column. A warp:
 * the largest key, then the lowest column holding it (two redux.sync);
 * part of a warp: (key, column) pairs combined by xor shuffles. */
__device__ __forceinline__ int router_argmax(int k, int c, unsigned mask, int &top)
{
#if RT_TPR == 32
    top = lanes_max_int(k, mask);
    return (int)lanes_min_u32(k == top ? (unsigned)c : 0xFFFFFFFFu, mask);
#else
#pragma unroll
    for (int o = RT_TPR / 2; o > 0; o /= 2) {
        const int ok = __shfl_xor_sync(mask, k, o), oc = __shfl_xor_sync(mask, c, o);
        if (ok > k || (ok == k && oc < c)) {
            k = ok;
            c = oc;
        }
    }
    top = k;
    return c;
#endif
}

/* The winner's logit: without a bias its key's; with one its owner's,
 * by one shuffle (owner_x: the owner's logit of its offered key). */
template <bool BIAS>
__device__ __forceinline__ float router_winner_x(int top, int win, float owner_x, unsigned mask)
{
    if (!BIAS)
        return router_key_value(top);
    return __shfl_sync(mask, owner_x, (win / T_VEC) % RT_TPR, RT_TPR);
}

#if T_SEL == 0
/* select, T_SEL 0: every round each thread scans its keys for its best
 * (in column order, strict >: ties to the lower column), the row takes
 * the argmax, and its owner drops that key. */
template <bool BIAS>
__device__ __forceinline__ void router_select(RouterChoice &ch, int (&key)[RT_HELD],
                                              const float (&x)[RT_HELD], int lane, unsigned mask)
{
#pragma unroll
    for (int i = 0; i < T_TOPK; i++) {
        int bk = RT_KEY_NONE, bo = 0;
        float bx = 0.0f;
#pragma unroll
        for (int e = 0; e < RT_HELD; e++) {
            if (key[e] > bk) {
                bk = key[e];
                bo = rt_off(e);
                if (BIAS)
                    bx = x[e];
            }
        }
        int top;
        const int win = router_argmax(bk, lane * T_VEC + bo, mask, top);
        router_keep<BIAS>(ch, i, win, top, router_winner_x<BIAS>(top, win, bx, mask), lane);
        const int rel = win - lane * T_VEC;
#pragma unroll
        for (int e = 0; e < RT_HELD; e++)
            if (rel == rt_off(e))
                key[e] = RT_KEY_NONE;
    }
}
#else
/* select, T_SEL 1: each thread sorts its RT_LIST best keys once (insertion
 * in column order: an equal key stays behind, so ties keep the lower
 * column first); every round it offers its list's head, and the owner of
 * the winner pops it. */
template <bool BIAS>
__device__ __forceinline__ void router_select(RouterChoice &ch, int (&key)[RT_HELD],
                                              const float (&x)[RT_HELD], int lane, unsigned mask)
{
    int lk[RT_LIST], lo[RT_LIST];
    float lx[RT_LIST];
#pragma unroll
    for (int p = 0; p < RT_LIST; p++) {
        lk[p] = RT_KEY_NONE;
        lo[p] = 0;
        lx[p] = 0.0f;
    }
#pragma unroll
    for (int e = 0; e < RT_HELD; e++) {
        int ck = key[e], co = rt_off(e);
        float cx = BIAS ? x[e] : 0.0f;
        /* before element e the list holds at most e keys; once the new
         * one is in, every later entry moves down one (a moved entry goes
         * before its equals further down: it has the lower column) */
        bool moved = false;
#pragma unroll
        for (int p = 0; p < RT_LIST && p <= e; p++) {
            if (moved || ck > lk[p]) {
                moved = true;
                const int tk = lk[p], to = lo[p];
                lk[p] = ck;
                lo[p] = co;
                ck = tk;
                co = to;
                if (BIAS) {
                    const float tx = lx[p];
                    lx[p] = cx;
                    cx = tx;
                }
            }
        }
    }
#pragma unroll
    for (int i = 0; i < T_TOPK; i++) {
        int top;
        const int win = router_argmax(lk[0], lane * T_VEC + lo[0], mask, top);
        router_keep<BIAS>(ch, i, win, top, router_winner_x<BIAS>(top, win, lx[0], mask), lane);
        if (i + 1 < T_TOPK && lane * T_VEC + lo[0] == win) {
#pragma unroll
            for (int p = 0; p + 1 < RT_LIST; p++) {
                lk[p] = lk[p + 1];
                lo[p] = lo[p + 1];
                if (BIAS)
                    lx[p] = lx[p + 1];
            }
            lk[RT_LIST - 1] = RT_KEY_NONE;
        }
    }
}
#endif

/* ---- weight and store ---- */

/* weight: each lane its slots' weights (scores, renormalized over the
 * row's lanes), times c; store: weights, ids and counts, output i by lane
 * i % TPR (a row's outputs are consecutive: one coalesced store a slot). */
template <bool BIAS>
__device__ __forceinline__ void router_store(const RouterChoice &ch, const RouterStats &st,
                                             long long row, int lane, unsigned mask,
                                             float scaling, float *weights, IDX *ids,
                                             int *counts)
{
    float w[RT_SLOTS];
    float part = 0.0f;
#if T_RENORM
    const float top = router_log_score(ch.max_x);
#endif
#pragma unroll
    for (int s = 0; s < RT_SLOTS; s++) {
        const bool valid = s * RT_TPR + lane < T_TOPK;
#if T_RENORM
        w[s] = router_ex2((router_log_score(router_chosen_x<BIAS>(ch, s)) - top) * LOG2E);
#else
        w[s] = router_score(router_chosen_x<BIAS>(ch, s), st);
#endif
        part += valid ? w[s] : 0.0f;
    }
#if T_RENORM
    const float total = lanes_sum(part, mask);
    const float nan = __int_as_float(0x7fc00000);
#pragma unroll
    for (int s = 0; s < RT_SLOTS; s++)
        w[s] = (T_SCORE == 0 && st.nan_row) ? nan : w[s] / total;
#else
    (void)part, (void)mask;
#endif
    const long long out = row * T_TOPK;
    /* A softmax row of NaN scores without a bias: every v is NaN and tied,
     * so the choice is the first k columns (router_keys ordered the logits
     * without waiting for the stats; with groups, every group's score is
     * NaN too and the first groups are kept, which hold the first k). */
    const bool first_k = !BIAS && T_SCORE == 0 && st.nan_row;
#pragma unroll
    for (int s = 0; s < RT_SLOTS; s++) {
        const int i = s * RT_TPR + lane;
        if (i < T_TOPK) {
            const int id = first_k ? i : ch.id[s];
            weights[out + i] = w[s] * scaling;
            ids[out + i] = (IDX)id;
            if (counts != NULL)
                atomicAdd(counts + id, 1);
        }
    }
}

/* keys, groups, select, weight and store for one row held in x. */
template <bool BIAS>
__device__ __forceinline__ void router_route(const float (&x)[RT_HELD], const float *bias,
                                             const RouterSlot &slot, float scaling,
                                             float *weights, IDX *ids, int *counts)
{
    float b[RT_HELD];
    if (BIAS)
        router_load_bias(b, bias, slot.lane);
    const RouterStats st = router_stats(x, slot.mask);
    int key[RT_HELD];
    router_keys<BIAS>(key, x, b, st, slot.lane);
#if T_GROUPS > 1
    router_keep_groups<BIAS>(key, st, slot.lane, slot.mask);
#endif
    RouterChoice ch;
#pragma unroll
    for (int s = 0; s < RT_SLOTS; s++) {
        ch.id[s] = 0;
        ch.x[s] = 0.0f;
    }
    ch.max_x = NEG_INF;
    router_select<BIAS>(ch, key, x, slot.lane, slot.mask);
    router_store<BIAS>(ch, st, slot.row, slot.lane, slot.mask, scaling, weights, ids, counts);
}

/* The forward: one row per TPR threads, T_ROWS rows a block; the launch
 * has rows / T_ROWS blocks, rounded up. bias and counts may be NULL. */
extern "C" __global__ void __launch_bounds__(T_WARPS * 32, T_MIN_BLOCKS)
tuned_router_topk(const T *__restrict__ logits, const float *__restrict__ bias,
                  float *__restrict__ weights, IDX *__restrict__ ids, int *__restrict__ counts,
                  long long rows, int cols, long long row_stride, tuned_router_options opt)
{
    const RouterSlot slot = router_slot();
    if (slot.row >= rows || cols != T_COLS)
        return;
    const unsigned char *xr = (const unsigned char *)logits + slot.row * row_stride * ESIZE;
    float x[RT_HELD];
    router_load_row(x, xr, (u64)xr % RT_VBYTES == 0, slot.lane);
    if (bias != NULL)
        router_route<true>(x, bias, slot, opt.scaling, weights, ids, counts);
    else
        router_route<false>(x, bias, slot, opt.scaling, weights, ids, counts);
}

/* ---- the backward ---- */

/* scatter: the row's ids and gradients, output i loaded by lane i % TPR
 * (coalesced) and handed round the row's lanes; the owner of column id
 * adds g_i to its element and marks it chosen (sel, a bit an element).
 * An id outside [0, E) matches no element. */
__device__ __forceinline__ void router_scatter(float (&g)[RT_HELD], u32 (&sel)[RT_SELW],
                                               const IDX *ids, const float *dweights,
                                               long long row, int lane, unsigned mask)
{
    int my_id[RT_SLOTS];
    float my_g[RT_SLOTS];
#pragma unroll
    for (int s = 0; s < RT_SLOTS; s++) {
        const int i = s * RT_TPR + lane;
        my_id[s] = -1;
        my_g[s] = 0.0f;
        if (i < T_TOPK) {
            const long long id = (long long)ids[row * T_TOPK + i];
            my_id[s] = (id >= 0 && id < T_COLS) ? (int)id : -1;
            my_g[s] = dweights[row * T_TOPK + i];
        }
    }
#pragma unroll
    for (int e = 0; e < RT_HELD; e++)
        g[e] = 0.0f;
#pragma unroll
    for (int w = 0; w < RT_SELW; w++)
        sel[w] = 0;
#pragma unroll
    for (int i = 0; i < T_TOPK; i++) {
        int id = my_id[i / RT_TPR];
        float gi = my_g[i / RT_TPR];
        if (RT_TPR > 1) {
            id = __shfl_sync(mask, id, i % RT_TPR, RT_TPR);
            gi = __shfl_sync(mask, gi, i % RT_TPR, RT_TPR);
        }
        /* -1 - lane*T_VEC, or another lane's column: below 0 or no rt_off */
        const int rel = id < 0 ? -1 : id - lane * T_VEC;
#pragma unroll
        for (int e = 0; e < RT_HELD; e++) {
            if (rel == rt_off(e)) {
                g[e] += gi;
                sel[e / 32] |= 1u << (e % 32);
            }
        }
    }
}

__device__ __forceinline__ bool router_chosen(const u32 (&sel)[RT_SELW], int e)
{
    return (sel[e / 32] >> (e % 32)) & 1u;
}

/* The gradient of each element into x (which it replaces), by the
 * header's formulas; renormalized as dx_m = c q_m (g_m - sum_i g_i q_i)
 * f'(x_m) / f(x_m) for every score (q the renormalized weights, formed
 * from log-scores as the forward's), the same as (c/S)(g_m - ...) f'(x_m)
 * with no underflow of S. */
__device__ __forceinline__ void router_grad(float (&x)[RT_HELD], const float (&g)[RT_HELD],
                                            const u32 (&sel)[RT_SELW], float c, unsigned mask)
{
#if T_RENORM
    const float nan = __int_as_float(0x7fc00000);
    const bool nan_row = T_SCORE == 0 && router_stats(x, mask).nan_row;
    float m = NEG_INF;
#pragma unroll
    for (int e = 0; e < RT_HELD; e++)
        m = router_chosen(sel, e) ? fmaxf(m, x[e]) : m;
    const float top = router_log_score(lanes_max(m, mask));
    float h[RT_HELD];
    float total = 0.0f, dot = 0.0f;
#pragma unroll
    for (int e = 0; e < RT_HELD; e++) {
        const bool chosen = router_chosen(sel, e);
        h[e] = router_dlog_score(x[e]);
        x[e] = chosen ? router_ex2((router_log_score(x[e]) - top) * LOG2E) : 0.0f;
        total += x[e];
        dot += g[e] * x[e];
    }
    total = lanes_sum(total, mask);
    dot = lanes_sum(dot, mask);
    const float inv = __frcp_rn(total);
    const float mean = dot * inv;
#pragma unroll
    for (int e = 0; e < RT_HELD; e++) {
        const float v = nan_row ? nan : c * (x[e] * inv) * (g[e] - mean) * h[e];
        x[e] = router_chosen(sel, e) ? v : 0.0f;
    }
#elif T_SCORE == 0
    /* dx_j = c p_j (g_j - sum_i g_i p_{id_i}) */
    const RouterStats st = router_stats(x, mask);
    float dot = 0.0f;
#pragma unroll
    for (int e = 0; e < RT_HELD; e++) {
        x[e] = router_score(x[e], st); /* p; 0 past the row */
        dot += g[e] * x[e];
    }
    dot = lanes_sum(dot, mask);
#pragma unroll
    for (int e = 0; e < RT_HELD; e++)
        x[e] = c * x[e] * (g[e] - dot);
#else
    /* dx = c g f'(x) for the chosen */
    (void)mask;
#pragma unroll
    for (int e = 0; e < RT_HELD; e++) {
        float d;
#if T_SCORE == 1
        float s;
        router_sigmoid(x[e], s, d);
#else
        if (x[e] < RT_SOFTPLUS_TAIL) {
            d = 0.5f * router_ex2(x[e] * (0.5f * LOG2E));
        } else {
            float sg, dsg;
            router_sigmoid(x[e], sg, dsg);
            d = sg * __frcp_rn(2.0f * router_sqrt_softplus(x[e]));
        }
#endif
        x[e] = router_chosen(sel, e) ? c * g[e] * d : 0.0f;
    }
#endif
}

/* store: dx into the row at dr: whole vectors where dr is on a vector
 * boundary and the vector lies inside the row, else element by element;
 * the dtype rounded once, with the variant's store hint. */
__device__ __forceinline__ void router_store_row(unsigned char *dr, bool aligned,
                                                 const float (&dx)[RT_HELD], int lane)
{
#pragma unroll
    for (int it = 0; it < RT_ITERS; it++) {
        const int first = (it * RT_TPR + lane) * T_VEC;
        const bool pass_inside = (it + 1) * RT_PASS <= T_COLS;
        if (aligned && (pass_inside || first + T_VEC <= T_COLS)) {
            u32 w[RT_NWORDS];
#if ESIZE == 2 && RT_VBYTES >= 4
#pragma unroll
            for (int j = 0; j < RT_NWORDS; j++)
                w[j] = pack_pair(dx[it * T_VEC + 2 * j], dx[it * T_VEC + 2 * j + 1]);
#else
#pragma unroll
            for (int k = 0; k < T_VEC; k++)
                w[k] = float_to_bits(dx[it * T_VEC + k]);
#endif
            router_store_vec(dr + (long long)first * ESIZE, w);
        } else {
#pragma unroll
            for (int k = 0; k < T_VEC; k++) {
                const int c = first + k;
                if (pass_inside || c < T_COLS)
                    store_elem(dr + (long long)c * ESIZE, float_to_bits(dx[it * T_VEC + k]));
            }
        }
    }
}

/* The backward: same rows, lanes and launch as the forward; ids and
 * dweights rows x k (row r at r*k), dlogits row_stride apart as the
 * logits (it must not overlap them). */
extern "C" __global__ void __launch_bounds__(T_WARPS * 32, T_MIN_BLOCKS)
tuned_router_topk_bwd(const T *__restrict__ logits, const IDX *__restrict__ ids,
                      const float *__restrict__ dweights, T *__restrict__ dlogits,
                      long long rows, int cols, long long row_stride, tuned_router_options opt)
{
    const RouterSlot slot = router_slot();
    if (slot.row >= rows || cols != T_COLS)
        return;
    const long long at = slot.row * row_stride * ESIZE;
    const unsigned char *xr = (const unsigned char *)logits + at;
    unsigned char *dr = (unsigned char *)dlogits + at;
    float x[RT_HELD];
    router_load_row(x, xr, (u64)xr % RT_VBYTES == 0, slot.lane);
    float g[RT_HELD];
    u32 sel[RT_SELW];
    router_scatter(g, sel, ids, dweights, slot.row, slot.lane, slot.mask);
    router_grad(x, g, sel, opt.scaling, slot.mask);
    router_store_row(dr, (u64)dr % RT_VBYTES == 0, x, slot.lane);
}
