/* router_topk.cu: family "rows", the mixture-of-experts router: a row of
 * expert logits scored (softmax, sigmoid or sqrt-softplus), its top k
 * experts chosen (optionally among the best groups of experts, with a
 * bias that moves the choice only) and their weights written, in one
 * kernel; and its backward.
 *
 * Idea: a row is E = T_COLS logits (2 to 2048), so a row fits in the
 * registers of part of a warp: TPR = T_WARPS*32/T_ROWS threads (1, 2, 4,
 * 8, 16 or 32) share it, every element is read once, and all the
 * selection happens in registers and warp instructions, with no block
 * barrier (the vote form's winners reach their output lanes through 8
 * bytes of shared memory an output, ordered by a __syncwarp); T_SEL 5's
 * forward (router_rank.cu) holds a row in a block instead. Per row, x
 * the logits, b the bias (fp32, E entries, or NULL), c the scaling:
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
 *   outputs weights fp32 (T_WEIGHTS_BF16: bf16, rounded to nearest even)
 *           and ids (int32, T_IDS64: int64), rows x k, row r at r*k;
 *           counts (int32, E, caller-zeroed, or NULL): one atomicAdd per
 *           chosen expert; source rows (int32, rows x k, or NULL): output
 *           i of row r is row i*rows + r of the k-major expanded token
 *           list a MoE dispatch permutes
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
 *            reduced over the row's lanes with xor shuffles (without a
 *            bias or groups the maximum is the first round's key, and the
 *            sum runs beside the later rounds; renormalised, no sum: the
 *            row's softmax is NaN exactly where that key's logit is not
 *            finite, all the weights need of it)
 *   keys     each element's v as a 32-bit integer whose signed order is
 *            the choice's order (NaN the largest, -0 as +0), slots past
 *            the row a key below every float's; without a bias from the
 *            logits alone, so the rounds run beside the stats' shuffles
 *            (a softmax row of NaN scores gets ids 0 to k-1 at the store)
 *   groups   each thread's two largest keys of every group, combined over
 *            the lanes (a power of two of groups within part of a warp:
 *            by recursive halving, a lane ending with one group; 16384 x
 *            256, 8 groups keep 4, k 8: 25.5 to 22.7 us on the H200), the
 *            groups' scores, the kept groups; the keys of the others
 *            dropped
 *   select   k rounds of an argmax over the row's lanes (a warp: the
 *            largest key by redux.sync, then a ballot of its holders, the
 *            winner the one holder; where several lanes hold it the rounds
 *            run again with a second redux.sync, the lowest index holding
 *            it; part of a warp: xor shuffles of (key, index) pairs), each
 *            thread offering its best key not yet taken:
 *              T_SEL 0  its best by a scan of its keys, the taken key
 *                       dropped by its owner, rescanned every round
 *              T_SEL 1  its min(k, held) best sorted once (insertion, in
 *                       registers), then its list's head; the owner pops it
 *              T_SEL 2  as 1 with at most 4 sorted (3 at a warp a row: a
 *                       shorter insertion);
 *                       where a list runs dry early, the rounds run again
 *                       as T_SEL 1's
 *              T_SEL 3  as 2, the 4 from a sorting network over exact
 *                       64-bit (key, column) entries, and the rounds'
 *                       first form (largest key, then a vote of its
 *                       holders) at any TPR: the largest key by xor
 *                       shuffles of the key alone, the vote's bits of the
 *                       row's lanes; the whole warp stays to the end (a
 *                       row past the last as an empty row) so that every
 *                       mask is the warp's, and it reruns as one
 *              T_SEL 4  no rounds (k <= 8): each thread's best k as
 *                       32-bit entries (key, or with a bias its
 *                       distance below the row's largest, and column in
 *                       a word) from a bitonic network, merged between
 *                       the row's lanes by log2(TPR) exchanges; a row
 *                       whose dropped key bits (or clamped distances)
 *                       could change the choice reruns as T_SEL 0
 *                       (router_select_merge); the whole warp as T_SEL 3
 *            the i-th chosen lands in lane i % TPR, slot i / TPR (in
 *            the vote form: its winner writes it to the row's entry i in
 *            shared memory, read back after the rounds)
 *   weight   each lane its slots' scores (T_RENORM: exp(l - L) of the
 *            log-scores, sigmoid's without a log, summed over the row's
 *            lanes, or, for k <= 16 and not T_TERMS_LANES, by every lane
 *            over every round's winner, their parts formed in the rounds),
 *            times c
 *   store    weights and ids, a lane per output (coalesced), counts (the
 *            source rows, which need no choice, first, after the load)
 * With a bias the selection needs the scores first and the winner's logit
 * comes from its owner by one shuffle; without one the keys are the
 * logits', and every lane reads the winner's logit back from its key.
 * A thread whose row is past the last returns at once: no reduction
 * spans more than its row's lanes (their mask), and there is no barrier
 * (T_SEL 5's block runs such a row empty through its barriers).
 * Cost (H200, 16384 x 128 fp32, softmax, k 8, TPR 32, T_SEL 1): 9.3 us,
 * 5.2 us at k 1, where a copy kernel of the same bytes takes 4.4 us: each
 * round costs about 0.55 us, issue-bound on its dozen integer
 * instructions and two redux.sync a row (one row per warp instruction;
 * TPR 8 and 16, several rows a warp, lose more to their shuffles and
 * their per-thread sorts and scans). Counted in SASS (sm_90, int64 ids,
 * the path without a bias or a rerun; not yet timed): TPR 32 T_SEL 1
 * issues 321 warp instructions a row (34 to load, about 22 a round, 35
 * to store), a floor of 321 x 31 rows a scheduler / 1.98 GHz = 5.0 us at
 * one instruction a cycle, whatever the rounds' latency; the per-row work
 * of a warp instruction is the limit, not the selection's idea. T_SEL 3
 * at TPR 8 (w4.r16, v4: 4 rows a warp, 16 held) issues 754 a warp, 189 a
 * row: keys 5 an element (the NaN and -0 folded into a float compare and
 * a min), the network about 240 a thread (32 exchanges, 12 selections),
 * rounds about 20 a warp (three shuffles and maxima, a vote, the pops),
 * no convergence tests; predicted 189 x 31 / 1.98 GHz = 3.0 us of issue,
 * under which the 8.4 MB read (about 2.2 us) can hide, so about 3.5 to 4
 * us if the warps overlap as the copy's do. Reruns: a row holding two
 * equal largest keys, or a thread of TPR 8 holding 5 of the 8 (0.6% of
 * random rows, 2.3% of warps; a tie reruns only with RT_ITERS > 1). TPR
 * 16 and TPR 32 T_SEL 3 issue 275 and
 * 312 a row: more threads a row repeat the per-row work. Measured since
 * (H200, a 6 s tune a key, every variant checked first): at 16384 x 128
 * k 8 the search kept T_SEL 2 at TPR 32 (11.4 us in the tune, 10.5 in
 * the router bench), so the 3.5 to 4 us of the model did not appear: the
 * model counts issue slots only, not the registers (91 at TPR 8) nor the
 * latency of a warp's chain; T_SEL 3 won E60k4, E160k6 and E384k8 at
 * 4096 to 16384 tokens (6.3, 11.0, 23.8 us at 16384) and E384k8 at one
 * token (4.6 us under graph replay, 5.3 before). With a bias and groups
 * (16384 x 256 bf16, sigmoid, 8 groups keep 4, k 8) 31 us (TPR 8, T_SEL
 * 1), the copy 4.3 us: the per-thread sort of 32 held keys and the group
 * scans are what to make cheaper next.
 * Nsight Compute (16384 x 128 k 8, TPR 32 T_SEL 2, v4) then showed the
 * ALU pipe (ISETP, LOP3, SEL, FLO, BREV: two cycles a warp instruction on
 * Hopper) the busiest, 55% of the elapsed cycles, 73% of the SMs' active
 * ones: 190 of the 308 instructions a row were ALU's (SASS, the path
 * without a bias or a rerun), a floor of 31 rows x 380 cycles = 6.1 us.
 * Two changes took it to 124 of 285 (T_SEL 3 v4: 119 of 292; v1: 190 of
 * 308 to 138 of 315; TPR 8 T_SEL 3: 123 to 111 a row), registers 56 to
 * 40 at v4: ties rerun only where a lane holds several passes (with one,
 * lane order is column order and the lowest holder is the exact winner:
 * the rerun's code went with it), and the vote form's winners go to
 * their output lanes through shared memory (RT_STAGE) instead of a
 * shuffle a round and a tree of selects. Predicted: issue (285 a row,
 * 4.5 us) is the floor now, so about 8 us where ncu measured 10.
 * Measured (a 15 s tune, each variant checked first): 10.1 us in the tune
 * (11.3 before), 9.4 us eager and 9.7 under graph replay in the router
 * bench (10.5 and 10.6 before; the copy of the bytes 6.8), the winner
 * w16.r16 v4 T_SEL 2 (one row a warp); 65536 x 128 31.6 to 26.9 us. Rows
 * of 512 tokens or fewer moved within the runs' noise (0.2-0.4 us).
 *
 * Variants (codegen prepends the defines, then softmax_common.cu, which
 * this file follows; the forward's source has router_rank.cu after it,
 * which is empty but for T_SEL 5):
 *   T_DTYPE       0 fp16, 1 bf16, 2 fp32 (math in fp32)
 *   T_WARPS       warps per block, 1 to 32
 *   T_ROWS        rows per block; TPR = T_WARPS*32/T_ROWS in 1, 2, 4, 8,
 *                 16, 32 (T_SEL 5: 32 to 1024); a thread holds at most 64
 *                 elements (T_COLS / TPR
 *                 in whole vectors: E = 2048 needs TPR 32, E = 256 TPR >= 4)
 *   T_MIN_BLOCKS  __launch_bounds__' minimum blocks per SM
 *   T_VEC         elements per vector load: 1, 2, 4, 8; at most 16 bytes
 *   T_COLS        E, 2 to 2048; the kernels' cols must equal it (a launch
 *                 with another does nothing)
 *   T_LD          0 ld.global, 1 ld.global.nc, 2 ld.global.cs
 *   T_SEL         0 rescans (absent: 0), 1 sorted lists, 2 short sorted
 *                 lists, 3 network lists with voted rounds, 4 merged
 *                 lists (k <= 8) (above), 5 ranks in shared memory over
 *                 32 to 1024 threads a row (router_rank.cu, which follows
 *                 this file in the forward's source and brings its kernel)
 *   T_TOPK        k, 1 to min(E, 64); with groups at most
 *                 T_TOPK_GROUP * E / T_GROUPS
 *   T_SCORE       0 softmax, 1 sigmoid, 2 sqrt(softplus)
 *   T_GROUPS      1 (no groups) to 32, dividing E
 *   T_TOPK_GROUP  groups kept, 1 to T_GROUPS (1 without groups)
 *   T_RENORM      0, 1: weights divided by the chosen scores' sum
 *   T_IDS64       0 int32 ids, 1 int64; absent: 0 where T_IDS32 (the
 *                 kind's flag) is 1, else 1
 *   T_WEIGHTS_BF16 1: bf16 weights (the forward's flag; absent: 0, fp32)
 *   T_ST          softmax_common.cu's store hint, for dlogits (absent: 0)
 *   T_KEY_BIAS    the forward key's bias: 1 calls pass one, 0 they pass
 *                 NULL; only that path is compiled (absent, as in the
 *                 backward's module: both, chosen by the pointer)
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
/* Nor a place for renormalised terms (the config's terms=lanes). */
#ifndef T_TERMS_LANES
#define T_TERMS_LANES 0
#endif

/* The router's own defines and types (codegen sets them from the kind's
 * key parameters and its flags T_IDS32 and T_WEIGHTS_BF16). */
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
#ifndef T_WEIGHTS_BF16
#define T_WEIGHTS_BF16 0
#endif
#if T_WEIGHTS_BF16 != 0 && T_WEIGHTS_BF16 != 1
#error "router: T_WEIGHTS_BF16 is 0 (fp32 weights) or 1 (bf16)"
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
/* The weights' element: fp32, or a bf16's bits. */
#if T_WEIGHTS_BF16
typedef unsigned short WT;
#else
typedef float WT;
#endif

/* A weight as stored: bf16 rounded to nearest even (a NaN stays a quiet
 * NaN, an overflow is inf), or the float. */
__device__ __forceinline__ WT router_weight_out(float w)
{
#if T_WEIGHTS_BF16
    const unsigned b = __float_as_uint(w);
    if ((b & 0x7FFFFFFFu) > 0x7F800000u)
        return (WT)((b >> 16) | 0x40u);
    return (WT)((b + 0x7FFFu + ((b >> 16) & 1u)) >> 16);
#else
    return w;
#endif
}

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
#if T_SEL == 5
/* router_rank.cu's forward: a row over 32 to 1024 threads (it checks) */
#elif RT_TPR != 1 && RT_TPR != 2 && RT_TPR != 4 && RT_TPR != 8 && RT_TPR != 16 && RT_TPR != 32
#error "router_topk.cu: threads per row (T_WARPS*32/T_ROWS) is 1, 2, 4, 8, 16 or 32"
#endif
#if T_VEC != 1 && T_VEC != 2 && T_VEC != 4 && T_VEC != 8
#error "router_topk.cu: T_VEC is 1, 2, 4 or 8"
#endif
#define RT_VBYTES (T_VEC * ESIZE)
#if RT_VBYTES > 16
#error "router_topk.cu: a vector is at most 16 bytes (T_VEC * element size)"
#endif
#if T_SEL != 0 && T_SEL != 1 && T_SEL != 2 && T_SEL != 3 && T_SEL != 4 && T_SEL != 5
#error "router_topk.cu: T_SEL is 0 to 5 (rescans, sorted, short, network, merged lists; ranks)"
#endif
#if T_SEL == 4 && T_TOPK > 8
#error "router_topk.cu: T_SEL 4 keeps k entries a thread: k at most 8"
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
/* T_SEL 2's short lists, and T_SEL 3's (the same length): a whole list
 * up to 4, else 4; T_SEL 2 keeps 3 at a warp a row, where a thread holds
 * few of a row's candidates: 4 of k 8 of 384 in one thread of 32 is a row
 * in 800 that reruns (5: one in 30000), for a tenth of the path of 16384
 * x 384 biased (892 to 800 instructions; at 8 threads a row 3 would rerun
 * 7% of rows). The network's chunks of 4 measured slower cut to 3. */
#define RT_SHORT (RT_LIST <= 4 ? RT_LIST : RT_TPR == 32 && T_SEL == 2 ? 3 : 4)
/* T_SEL 3's network works on chunks of RT_NET_P entries, the power of two
 * at or above its list's length. */
#define RT_NET_P (RT_SHORT > 2 ? 4 : RT_SHORT)
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
 * them, so a row past the last may return at once). The forward of T_SEL
 * 3 keeps the whole warp instead (RT_WHOLE_WARP: a row past the last runs
 * as an empty row and stores nothing), so that its masks are the full
 * warp's, a constant: with a row's mask, known only at run time, ptxas
 * wrapped every shuffle and vote in a test of the warp's convergence and a
 * branch (MATCH, REDUX, VOTEU, BRA.DIV: about 70 instructions a warp at
 * TPR 8, k 8, 8% of the whole). */
#define RT_WHOLE_WARP (T_SEL == 3 || T_SEL == 4)

struct RouterSlot {
    long long row;
    int lane;
    unsigned mask;
};

__device__ __forceinline__ RouterSlot router_slot(bool whole_warp)
{
    RouterSlot s;
    s.lane = (int)(threadIdx.x % RT_TPR);
    s.row = (long long)blockIdx.x * T_ROWS + threadIdx.x / RT_TPR;
    s.mask = (RT_TPR == 32 || whole_warp)
                 ? 0xFFFFFFFFu
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

/* The row at xr into x where live, else a row of -inf (past the last
 * row: the whole warp's forms run it as an empty row). */
__device__ __forceinline__ void router_read_row(float (&x)[RT_HELD], const unsigned char *xr,
                                                bool live, int lane)
{
    if (live) {
        router_load_row(x, xr, (u64)xr % RT_VBYTES == 0, lane);
    } else {
#pragma unroll
        for (int e = 0; e < RT_HELD; e++)
            x[e] = NEG_INF;
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

/* 1 / d correctly rounded for d in [1, 2]: rcp.rn's own fast path (one
 * MUFU.RCP and a Newton step, the same instructions, so the same bits),
 * without its test for operands near the exponent's ends and the branch
 * to the slow path. That branch closed a BSSY/BSYNC region around every
 * sigmoid: ptxas could not overlap one element's exp and reciprocal with
 * the next's, and a bias's keys (E / TPR sigmoids a thread, 12 at E = 384
 * in a warp) formed a serial chain of about 90 cycles each. For any d
 * whose reciprocal is a normal float (the renormalisation's sum, 1/2 to
 * 64) it is within an ulp; a NaN stays NaN. */
__device__ __forceinline__ float router_rcp_1to2(float d)
{
    float r;
    asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(d));
    return fmaf(r, fmaf(-d, r, 1.0f), r);
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
__device__ __forceinline__ RouterStats router_stats_at(const float (&x)[RT_HELD], float m,
                                                     unsigned mask)
{
    RouterStats st;
#if T_SCORE == 0
    float s = 0.0f;
#pragma unroll
    for (int e = 0; e < RT_HELD; e++)
        s += exp_shifted(x[e], m, LOG2E);
    s = lanes_sum(s, mask);
    st.max = m;
    st.inv_sum = router_rcp_1to2(s); /* s: 1 to E (the maximum's term is 1) or NaN */
    st.nan_row = isnan(s);
#else
    (void)x, (void)m, (void)mask;
    st.max = 0.0f;
    st.inv_sum = 1.0f;
    st.nan_row = false;
#endif
    return st;
}

__device__ __forceinline__ RouterStats router_stats(const float (&x)[RT_HELD], unsigned mask)
{
    float m = NEG_INF;
#if T_SCORE == 0
#pragma unroll
    for (int e = 0; e < RT_HELD; e++)
        m = fmaxf(m, x[e]);
    m = lanes_max(m, mask);
#endif
    return router_stats_at(x, m, mask);
}

/* Whether the stats wait for the selection: a softmax without a bias or
 * groups, whose first round's key is the row's largest logit (where a NaN
 * leads, the key's NaN makes the sum NaN, as fmaxf's maximum and the NaN
 * element do), so its sum of exp needs no chain of max shuffles and runs
 * beside the later rounds. T_SEL 4 has no rounds to run them beside, and
 * its merged lists' first entry is the row's largest only where the row
 * does not rerun: its stats come first, and the row's logits are then no
 * longer held through the merge. */
template <bool BIAS>
__device__ constexpr bool router_late_stats()
{
    return !BIAS && T_SCORE == 0 && T_GROUPS == 1 && T_SEL != 4;
}

/* The late stats from the first round's key's logit m, the row's largest
 * (NaN counted largest). Renormalised, the weights need only whether the
 * row's softmax is NaN, and it is exactly where m is not finite (a NaN, a
 * +inf, or every logit -inf; a finite m makes the sum of exp(x - m) at
 * least 1 and finite): the sum of exps is not formed. */
__device__ __forceinline__ RouterStats router_late_stats_of(const float (&x)[RT_HELD], float m,
                                                          unsigned mask)
{
#if T_RENORM && T_SCORE == 0
    (void)x, (void)mask;
    RouterStats st = {m, 1.0f, !isfinite(m)};
    return st;
#else
    return router_stats_at(x, m, mask);
#endif
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

/* The renormalisation's terms: q_i = t(x_i) / sum_m t(x_m), t(x) = s(x)
 * e^-R, R = lead(top) from the largest chosen logit top, so the largest
 * term is 1 (sigmoid: 1/2 to 1) and none overflows or underflows where
 * the scores do. Softmax and sqrt-softplus: t = exp(l - l(top)), l the
 * log-score. Sigmoid: s(x) = e^min(x, 0) / (1 + e^-|x|), so t =
 * e^(min(x, 0) - min(top, 0)) / (1 + e^-|x|): the same number as exp(l -
 * l(top)) with no log1pf (two in series after the last round) and every
 * denominator known as soon as its round's winner is. A term's two parts
 * need not wait for top: t = exp(lead(x) - lead(top)) tail(x). */
__device__ __forceinline__ float router_renorm_lead(float x)
{
#if T_SCORE == 0
    return x;
#elif T_SCORE == 1
    return fminf(x, 0.0f);
#else
    return router_log_score(x);
#endif
}

__device__ __forceinline__ float router_renorm_tail(float x)
{
#if T_SCORE == 1
    return router_rcp_1to2(1.0f + router_ex2(-fabsf(x) * LOG2E)); /* 1 + e in [1, 2] */
#else
    (void)x;
    return 1.0f;
#endif
}

__device__ __forceinline__ float router_renorm_from(float lead, float tail, float ref)
{
    return router_ex2((lead - ref) * LOG2E) * tail;
}

__device__ __forceinline__ float router_renorm_term(float x, float ref)
{
    return router_renorm_from(router_renorm_lead(x), router_renorm_tail(x), ref);
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
 * (-inf's is 0x807FFFFF), marks a slot that is not a candidate. Formed
 * from the magnitude a: ~a where v < 0 (a float compare, false for -0 and
 * for NaN), else min(a, RT_KEY_NAN), which gives every NaN the one key
 * just above +inf's: five instructions, where testing the NaN and the -0
 * apart took seven and a constant. */
#define RT_KEY_NONE ((int)0x80000000)
#define RT_KEY_NAN 0x7F800001

__device__ __forceinline__ int router_key(float v)
{
    const int a = __float_as_int(v) & 0x7FFFFFFF;
    return v < 0.0f ? ~a : min(a, RT_KEY_NAN);
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
template <bool VOLATILE = false>
__device__ __forceinline__ void router_load_bias(float (&b)[RT_HELD], const float *bias, int lane)
{
#pragma unroll
    for (int e = 0; e < RT_HELD; e++) {
        const float *p = bias + lane * T_VEC + rt_off(e);
        float v = 0.0f;
        if (router_in_row(e, lane)) {
            if (VOLATILE)
                asm volatile("ld.global.nc.f32 %0, [%1];" : "=f"(v) : "l"(p));
            else
                v = __ldg(p);
        }
        b[e] = v;
    }
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

/* The groups' two best over the row's lanes by recursive halving, where
 * the groups are a power of two and no more than the lanes of part of a
 * warp (DeepSeek-V3's 8 at 8 or 16 threads a row; a whole warp keeps its
 * three redux.sync a group, 168 instructions fewer there): at each xor
 * step while a lane holds several groups it keeps half of them, merged
 * with its partner's copy of that half (the partner keeps the other), so
 * that after log2(G) steps lane l
 * holds group l / (TPR / G) alone, over 2^steps lanes, and the remaining
 * steps merge that one group over the rest. 2 (G - 1) + 2 log2(TPR / G)
 * shuffles where a butterfly a group takes 2 G log2(TPR) (8 groups at 16
 * threads: 16 against 64, and one score a lane instead of 8). Then each
 * lane ranks its group among the others' (a shuffle from each group's
 * first lane; ties to the lower group), and a ballot over the row's lanes
 * says which groups are kept. */
#define RT_GROUPS_HALVED \
    (RT_TPR > 1 && RT_TPR < 32 && T_GROUPS <= RT_TPR && (T_GROUPS & (T_GROUPS - 1)) == 0)

#if RT_GROUPS_HALVED
template <bool BIAS>
__device__ __forceinline__ void router_keep_groups_halved(int (&key)[RT_HELD],
                                                          int (&a1)[T_GROUPS],
                                                          int (&a2)[T_GROUPS],
                                                          const RouterStats &st, int lane,
                                                          unsigned mask)
{
    constexpr int STRIDE = RT_TPR / T_GROUPS; /* lanes a group ends up in */
    /* halve: at offset o a lane holding n groups keeps the half picked by
     * its bit o, merged with the partner's copy (the partner's index
     * arithmetic is the same, so both halves line up) */
#pragma unroll
    for (int o = RT_TPR / 2, n = T_GROUPS; n > 1; o /= 2, n /= 2) {
        const bool upper = (lane & o) != 0;
#pragma unroll
        for (int i = 0; i < n / 2; i++) {
            /* send the half the partner keeps, take the half kept here */
            const int s1 = upper ? a1[i] : a1[i + n / 2], s2 = upper ? a2[i] : a2[i + n / 2];
            const int k1 = upper ? a1[i + n / 2] : a1[i], k2 = upper ? a2[i + n / 2] : a2[i];
            const int b1 = __shfl_xor_sync(mask, s1, o), b2 = __shfl_xor_sync(mask, s2, o);
            a2[i] = max(min(k1, b1), max(k2, b2));
            a1[i] = max(k1, b1);
        }
    }
    /* merge the one group over the lanes that share it */
    int t1 = a1[0], t2 = a2[0];
#pragma unroll
    for (int o = STRIDE / 2; o > 0; o /= 2) {
        const int b1 = __shfl_xor_sync(mask, t1, o), b2 = __shfl_xor_sync(mask, t2, o);
        t2 = max(min(t1, b1), max(t2, b2));
        t1 = max(t1, b1);
    }
    float score = router_key_v<BIAS>(t1, st);
    if (RT_GS > 1)
        score += router_key_v<BIAS>(t2, st);
    const int mine = router_key(score), g = lane / STRIDE;
    int rank = 0;
#pragma unroll
    for (int h = 0; h < T_GROUPS; h++) {
        const int other = __shfl_sync(mask, mine, h * STRIDE, RT_TPR);
        rank += other > mine || (other == mine && h < g);
    }
    /* the row's lanes' votes, lane h * STRIDE of the row standing for group h */
    const int base = (int)(threadIdx.x % 32) / RT_TPR * RT_TPR; /* RT_TPR < 32 here */
    const unsigned votes = __ballot_sync(mask, rank < T_TOPK_GROUP) >> base;
#pragma unroll
    for (int e = 0; e < RT_HELD; e++) {
        const int ge = (lane * T_VEC + rt_off(e)) / RT_GS;
        if (ge >= T_GROUPS || !((votes >> (ge * STRIDE)) & 1u))
            key[e] = RT_KEY_NONE;
    }
}
#endif

/* groups: each thread's two largest keys of each group, combined over the
 * row's lanes (router_top2, or halved as above); a group's score v1 + v2
 * (v1 alone for one expert a group); the T_TOPK_GROUP best groups by score
 * (NaN first, ties to the lower group) kept, every other group's keys
 * dropped. */
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
#if RT_GROUPS_HALVED
    router_keep_groups_halved<BIAS>(key, a1, a2, st, lane, mask);
#else
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
#endif
}
#endif

/* ---- select ---- */

/* Renormalised weights over few lanes' worth of outputs (k <= 16): every
 * lane keeps every round's winner's term parts (each round's winner is
 * known to every lane; the parts formed in the rounds, which leave the
 * issue idle while their redux.sync and votes are in flight) and sums all
 * k terms itself, with no chain of shuffles after the last round. That is
 * k terms a lane where one would do: with many rows, where the issue is
 * busy, T_TERMS_LANES (terms=lanes) forms each output's term in its own
 * lane after the rounds, summed over the row's lanes (H200, 16384 x 384
 * sigmoid, bias, k 8, TPR 32, the same config: 23.3 to 21.3 us; 0.05 to
 * 0.18 us slower at 1 to 512 tokens, which the tuner sees). */
#define RT_ALL_CHOSEN (T_RENORM && RT_TPR > 1 && T_TOPK <= 16 && !T_TERMS_LANES && T_SEL != 4)

/* Whether the rounds take the vote form (FAST; router_argmax says what
 * the two forms are). T_SEL 4 has no rounds but its reruns' exact ones. */
#if (RT_TPR == 32 && T_SEL != 4) || T_SEL == 3
#define RT_FAST_ROUNDS 1
#else
#define RT_FAST_ROUNDS 0
#endif

/* The vote form's winners reach their output lanes through shared memory
 * (RT_STAGE): round i's winner, the one lane that knows it won, writes
 * its column and logit into its row's entry i, and after the rounds each
 * lane reads its slots' entries (router_unstage). Handed round by round
 * in registers, every lane needed the winner's lane (BREV, FLO), a shuffle
 * of the column, and the output lane a tree of compares and selects on its
 * lane index to keep it: ALU-pipe instructions, the pipe that bounds this
 * kernel, about 35 of 170 a row at TPR 32, k 8. Entries: T_ROWS * k, 8
 * bytes each, a few KiB at most (above 16 KiB a block, registers as
 * before). The exact form (the reruns, and part of a warp) keeps its
 * winners in registers: every lane knows the column there. */
#define RT_STAGE (RT_FAST_ROUNDS && T_ROWS * T_TOPK * 8 <= 16384)

/* With terms in the lanes and the winners staged, a biased row's largest
 * chosen logit (the terms' reference) is taken after the rounds, over the
 * row's slots, so that no round hands its winner's logit to every lane. */
#define RT_LATE_MAX (T_TERMS_LANES && RT_STAGE && T_RENORM)

struct __align__(8) RouterOut {
    int col;
    float x; /* as router_keep keeps it in ch.x */
};

/* What the selection leaves in a lane: its outputs' columns and logits,
 * and (for T_RENORM) the largest chosen logit and, where RT_ALL_CHOSEN,
 * every chosen logit. */
struct RouterChoice {
    int id[RT_SLOTS];
    float x[RT_SLOTS];
    float max_x;
#if RT_ALL_CHOSEN
    float lead[T_TOPK], tail[T_TOPK]; /* every round's winner's term parts */
    float slead[RT_SLOTS], stail[RT_SLOTS]; /* the lane's slots' */
#endif
#if RT_STAGE
    RouterOut *stage; /* the row's T_TOPK entries in shared memory */
#endif
#if T_SEL == 4
    const unsigned char *row; /* the row's logits (NULL past the last row) */
#endif
};

#if RT_STAGE
/* The winner's entry, stored by its lane alone: a predicated store in
 * PTX. Written as C (if (mine) ...), ptxas predicated the rounds of some
 * kernels and branched round each store in others, which a change
 * elsewhere in the kernel can flip (16384 x 128, k 8, TPR 32 short lists:
 * 9.5 to 10.8 us on the H200, once the bias path left the code). */
__device__ __forceinline__ void router_stage_put(RouterOut *at, bool mine, int col, float x)
{
    const unsigned addr = (unsigned)__cvta_generic_to_shared(at);
    asm volatile("{\n\t.reg .pred p;\n\tsetp.ne.u32 p, %0, 0;\n\t"
                 "@p st.shared.v2.b32 [%1], {%2, %3};\n\t}"
                 :
                 : "r"((unsigned)mine), "r"(addr), "r"(col), "r"(__float_as_int(x))
                 : "memory");
}
#endif

/* Round i's winner, known to every lane of the row: lane i % TPR keeps
 * its column and its logit; in the vote form with RT_STAGE (STAGED) the
 * winning lane (mine, offering column own) writes them to the row's entry
 * i instead, and win is unused. Without a bias the logit is the key's, kept
 * as the key's bits and turned back into the logit once, at the store
 * (router_chosen_x), not in every round; and the largest chosen logit is
 * round 0's, the keys coming out in descending order. With a bias v
 * orders the choice, not x: the owner's logit, and their running max. */
template <bool BIAS, bool STAGED>
__device__ __forceinline__ void router_keep(RouterChoice &ch, int i, int win, bool mine, int own,
                                            int top, float xw, int lane)
{
#if RT_STAGE
    if (STAGED)
        router_stage_put(&ch.stage[i], mine, own, BIAS ? xw : __int_as_float(top));
    else
#endif
    if (lane == i % RT_TPR) {
        ch.id[i / RT_TPR] = win;
        ch.x[i / RT_TPR] = BIAS ? xw : __int_as_float(top);
    }
    (void)mine, (void)own;
#if RT_ALL_CHOSEN
    const float xv = BIAS ? xw : router_key_value(top);
    ch.lead[i] = router_renorm_lead(xv);
    ch.tail[i] = router_renorm_tail(xv);
    if (lane == i % RT_TPR) {
        ch.slead[i / RT_TPR] = ch.lead[i];
        ch.stail[i / RT_TPR] = ch.tail[i];
    }
#endif
    if (BIAS && !(RT_LATE_MAX && STAGED))
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


/* One round's winner: its column (known to every lane of the row),
 * whether this lane offered it (mine: the lane that pops it), and the
 * offering lane's index among the row's lanes (src). */
struct RouterWin {
    int col, src;
    bool mine;
};

/* A warp's rounds come in two forms. FAST: the largest key (redux.sync),
 * then a ballot of its holders, the lowest holding lane the winner: one
 * vote and a mask where the exact form waits for a second redux.sync, the
 * column from the winner by a shuffle the next round does not wait for
 * (unused, and dropped by ptxas, where RT_STAGE hands the winners over).
 * It is the exact winner when one lane holds the largest key (distinct
 * scores: always), or when each lane holds one pass (RT_ITERS 1: the
 * lanes' columns are in lane order); where several do and a lane holds
 * several passes (ties, several NaNs), the lowest lane
 * may hold a higher column (a later pass's), so the round sets redo and
 * router_route runs the selection again in the exact form. In line (a
 * branch per round) ptxas predicated the second redux.sync, and every
 * round waited for it; out of line (a call), the rounds were blocks apart
 * and the softmax's stats no longer ran beside them. Exact (and part of a
 * warp): the largest key, then the lowest column holding it (a warp: a
 * second redux.sync; part of a warp: (key, column) pairs combined by xor
 * shuffles, exact in one pass). */

/* The argmax of one round over the row's lanes, each offering its best
 * key k at column c: the largest key, ties to the lowest column. */
template <bool FAST>
__device__ __forceinline__ RouterWin router_argmax(int k, int c, unsigned mask, int lane, int &top,
                                                   bool &redo)
{
    RouterWin w;
    if (FAST) {
        /* the holders' bits in warp lanes, the row's lanes only (the
         * mask may be the whole warp's: RT_WHOLE_WARP); src a warp lane,
         * which a shuffle of width TPR reads as the row's lane src % TPR */
        top = lanes_max_int(k, mask);
        const bool holds = k == top;
        const int wl = (int)(threadIdx.x % 32);
        const unsigned row_lanes =
            RT_TPR == 32 ? 0xFFFFFFFFu : ((1u << (RT_TPR % 32)) - 1u) << (wl / RT_TPR * RT_TPR);
        const unsigned held = __ballot_sync(mask, holds) & row_lanes;
        w.mine = ((held & (0xFFFFFFFFu >> (31 - wl))) ^ (1u << wl)) == 0u;
        w.src = __ffs(held) - 1;
        w.col = __shfl_sync(mask, c, w.src, RT_TPR);
        /* one pass a lane (RT_ITERS 1): lane order is column order, so
         * the lowest holding lane holds the lowest column, and ties need
         * no rerun (a lane offers its equal keys lower column first) */
        if (RT_ITERS > 1)
            redo |= (held & (held - 1u)) != 0u;
        (void)lane;
        return w;
    }
#if RT_TPR == 32
    top = lanes_max_int(k, mask);
    const bool holds = k == top;
    w.col = (int)lanes_min_u32(holds ? (unsigned)c : 0xFFFFFFFFu, mask);
    w.mine = c == w.col;
    w.src = (w.col / T_VEC) % RT_TPR;
#else
    const int own = c;
#pragma unroll
    for (int o = RT_TPR / 2; o > 0; o /= 2) {
        const int ok = __shfl_xor_sync(mask, k, o), oc = __shfl_xor_sync(mask, c, o);
        if (ok > k || (ok == k && oc < c)) {
            k = ok;
            c = oc;
        }
    }
    (void)lane, (void)redo;
    top = k;
    w.col = c;
    w.mine = own == c;
    w.src = (c / T_VEC) % RT_TPR;
#endif
    return w;
}

/* The winner's logit: without a bias its key's; with one its owner's,
 * by one shuffle (owner_x: the owner's logit of its offered key). */
template <bool BIAS>
__device__ __forceinline__ float router_winner_x(int top, const RouterWin &w, float owner_x,
                                                 unsigned mask)
{
    if (!BIAS)
        return router_key_value(top);
    return __shfl_sync(mask, owner_x, w.src, RT_TPR);
}

/* select, T_SEL 0: every round each thread scans its keys for its best
 * (in column order, strict >: ties to the lower column), the row takes
 * the argmax, and its owner drops that key. Also T_SEL 4's rerun: it
 * holds no list, so it adds few registers to the merge's kernel (a rerun
 * by sorted lists took 48 to 89 at 16384 x 128, k 8, 8 threads a row). */
template <bool BIAS, bool FAST>
__device__ __forceinline__ bool router_select_scan(RouterChoice &ch, const int (&keys)[RT_HELD],
                                                   const float (&x)[RT_HELD], int lane,
                                                   unsigned mask)
{
    int key[RT_HELD]; /* a copy: the exact form may run again from keys */
#pragma unroll
    for (int e = 0; e < RT_HELD; e++)
        key[e] = keys[e];
    bool redo = false;
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
        const int own = lane * T_VEC + bo;
        const RouterWin w = router_argmax<FAST>(bk, own, mask, lane, top, redo);
        router_keep<BIAS, FAST && RT_STAGE>(ch, i, w.col, w.mine, own, top,
                                            router_winner_x<BIAS>(top, w, bx, mask), lane);
#pragma unroll
        for (int e = 0; e < RT_HELD; e++)
            if (w.mine && bo == rt_off(e))
                key[e] = RT_KEY_NONE;
    }
    return redo;
}

#if T_SEL == 0
template <bool BIAS, bool FAST, bool EXACT>
__device__ __forceinline__ bool router_select(RouterChoice &ch, const int (&key)[RT_HELD],
                                              const float (&x)[RT_HELD], int lane, unsigned mask)
{
    return router_select_scan<BIAS, FAST>(ch, key, x, lane, mask);
}
#else
/* T_SEL 3's lists by a sorting network rather than insertion. An entry
 * is one 64-bit integer: the key above, below it RT_NET_LO less the
 * element's column offset in the thread (rt_off, larger for the lower
 * column), so that one signed 64-bit compare (two ISETP) orders entries as
 * the choice does, ties to the lower column, with every bit of the key
 * kept; the pad entry (key none, 0) is below every element's. The thread's
 * elements go in chunks of RT_NET_P: each chunk sorted (RT_NET_P 4: five
 * compare-exchanges), then merged into the running best RT_NET_P (the
 * bitonic way: the larger of acc_i and chunk_{P-1-i}, a V-shaped sequence
 * holding the best P, sorted by log2 P half-cleaners). At 16 held and a
 * list of 4 that is 32 exchanges and 12 selections, about 240 instructions,
 * where insertion took about 5 a step over 16 x 4 steps and its chain of
 * moves; the column offsets never move, only the 64-bit entries (and, with
 * a bias, the logits beside them). */
#define RT_NET_LO 0xFFFFu
#define RT_NET_PAD ((long long)0x8000000000000000ull)

__device__ __forceinline__ long long rt_net_entry(int key, int e)
{
    const unsigned long long hi = (unsigned long long)(unsigned)key << 32;
    return (long long)(hi | (RT_NET_LO - (unsigned)rt_off(e)));
}

/* a before b: the larger entry first. One setp and its selects in PTX:
 * written as C, ptxas saw a 64-bit max and min and compared twice (four
 * ISETP where two do). */
template <bool BIAS>
__device__ __forceinline__ void rt_net_cas(long long &a, long long &b, float &xa, float &xb)
{
    long long hi, lo;
    if (BIAS) {
        float xh, xl;
        asm("{.reg .pred q; setp.gt.s64 q, %5, %4; selp.b64 %0, %5, %4, q; "
            "selp.b64 %1, %4, %5, q; selp.f32 %2, %7, %6, q; selp.f32 %3, %6, %7, q;}"
            : "=l"(hi), "=l"(lo), "=f"(xh), "=f"(xl)
            : "l"(a), "l"(b), "f"(xa), "f"(xb));
        xa = xh;
        xb = xl;
    } else {
        asm("{.reg .pred q; setp.gt.s64 q, %3, %2; selp.b64 %0, %3, %2, q; "
            "selp.b64 %1, %2, %3, q;}"
            : "=l"(hi), "=l"(lo)
            : "l"(a), "l"(b));
    }
    a = hi;
    b = lo;
}

template <bool BIAS>
__device__ __forceinline__ void rt_net_sort(long long (&a)[RT_NET_P], float (&ax)[RT_NET_P])
{
    if (RT_NET_P == 2) {
        rt_net_cas<BIAS>(a[0], a[RT_NET_P - 1], ax[0], ax[RT_NET_P - 1]);
    } else if (RT_NET_P == 4) {
        rt_net_cas<BIAS>(a[0], a[1 % RT_NET_P], ax[0], ax[1 % RT_NET_P]);
        rt_net_cas<BIAS>(a[2 % RT_NET_P], a[3 % RT_NET_P], ax[2 % RT_NET_P], ax[3 % RT_NET_P]);
        rt_net_cas<BIAS>(a[0], a[2 % RT_NET_P], ax[0], ax[2 % RT_NET_P]);
        rt_net_cas<BIAS>(a[1 % RT_NET_P], a[3 % RT_NET_P], ax[1 % RT_NET_P], ax[3 % RT_NET_P]);
        rt_net_cas<BIAS>(a[1 % RT_NET_P], a[2 % RT_NET_P], ax[1 % RT_NET_P], ax[2 % RT_NET_P]);
    }
}

/* acc: the best RT_NET_P of acc and c, sorted (both come sorted) */
template <bool BIAS>
__device__ __forceinline__ void rt_net_merge(long long (&acc)[RT_NET_P], float (&ax)[RT_NET_P],
                                             const long long (&c)[RT_NET_P],
                                             const float (&cx)[RT_NET_P])
{
#pragma unroll
    for (int i = 0; i < RT_NET_P; i++) {
        const bool take = c[RT_NET_P - 1 - i] > acc[i];
        acc[i] = take ? c[RT_NET_P - 1 - i] : acc[i];
        if (BIAS)
            ax[i] = take ? cx[RT_NET_P - 1 - i] : ax[i];
    }
#pragma unroll
    for (int h = RT_NET_P / 2; h >= 1; h /= 2)
#pragma unroll
        for (int i = 0; i < RT_NET_P; i++)
            if ((i & h) == 0)
                rt_net_cas<BIAS>(acc[i], acc[i + h], ax[i], ax[i + h]);
}

/* The thread's LIST (<= RT_NET_P) best keys, their column offsets and
 * (with a bias) logits, in the choice's order. */
template <bool BIAS, int LIST>
__device__ __forceinline__ void router_net_list(int (&lk)[LIST], int (&lo)[LIST], float (&lx)[LIST],
                                                const int (&key)[RT_HELD],
                                                const float (&x)[RT_HELD])
{
    long long acc[RT_NET_P];
    float ax[RT_NET_P];
#pragma unroll
    for (int c0 = 0; c0 < RT_HELD; c0 += RT_NET_P) {
        long long c[RT_NET_P];
        float cx[RT_NET_P];
#pragma unroll
        for (int j = 0; j < RT_NET_P; j++) {
            const int e = c0 + j;
            c[j] = e < RT_HELD ? rt_net_entry(key[e < RT_HELD ? e : 0], e) : RT_NET_PAD;
            cx[j] = (BIAS && e < RT_HELD) ? x[e < RT_HELD ? e : 0] : 0.0f;
        }
        rt_net_sort<BIAS>(c, cx);
        if (c0 == 0) {
#pragma unroll
            for (int j = 0; j < RT_NET_P; j++) {
                acc[j] = c[j];
                ax[j] = cx[j];
            }
        } else {
            rt_net_merge<BIAS>(acc, ax, c, cx);
        }
    }
    /* (T_SEL 3's list is RT_SHORT, at most RT_NET_P; the exact form,
     * which never calls this, instantiates it with longer lists) */
#pragma unroll
    for (int p = 0; p < (LIST < RT_NET_P ? LIST : RT_NET_P); p++) {
        lk[p] = (int)(acc[p] >> 32);
        lo[p] = (int)(RT_NET_LO - (unsigned)(unsigned long long)acc[p]);
        lx[p] = ax[p];
    }
}

/* select, T_SEL 1 and 2: each thread sorts its LIST best keys once
 * (insertion in column order: an equal key stays behind, so ties keep the
 * lower column first); every round it offers its list's head, and the
 * owner of the winner pops it. T_SEL 1: LIST = RT_LIST, min(k, held), so
 * no list runs dry while its thread holds a candidate. T_SEL 2: LIST =
 * RT_SHORT (at most 4): about half the insertion's steps at 12 held and k
 * 8 (the chain before the first round with a bias, which carries the
 * logits too) and a third of each pop's moves; a thread that pops its
 * list's last entry before the last round while it may hold more (its
 * list was full) sets redo, and router_route runs the rounds again with
 * RT_LIST (k winners over a row's lanes seldom take 4 from one thread). */
template <bool BIAS, bool FAST, int LIST, bool NET>
__device__ __forceinline__ bool router_select_sorted(RouterChoice &ch, const int (&key)[RT_HELD],
                                                     const float (&x)[RT_HELD], int lane,
                                                     unsigned mask)
{
    bool redo = false;
    int lk[LIST], lo[LIST];
    float lx[LIST];
#pragma unroll
    for (int p = 0; p < LIST; p++) {
        lk[p] = RT_KEY_NONE;
        lo[p] = 0;
        lx[p] = 0.0f;
    }
    if (NET)
        router_net_list<BIAS, LIST>(lk, lo, lx, key, x);
#pragma unroll
    for (int e = 0; e < (NET ? 0 : RT_HELD); e++) {
        int ck = key[e], co = rt_off(e);
        float cx = BIAS ? x[e] : 0.0f;
        /* before element e the list holds at most e keys; once the new
         * one is in, every later entry moves down one (a moved entry goes
         * before its equals further down: it has the lower column) */
        bool moved = false;
#pragma unroll
        for (int p = 0; p < LIST && p <= e; p++) {
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
    /* whether this thread may hold a candidate its short list left out */
    const bool more = LIST < RT_LIST && lk[LIST - 1] != RT_KEY_NONE;
#pragma unroll
    for (int i = 0; i < T_TOPK; i++) {
        int top;
        const int own = lane * T_VEC + lo[0];
        const RouterWin w = router_argmax<FAST>(lk[0], own, mask, lane, top, redo);
        router_keep<BIAS, FAST && RT_STAGE>(ch, i, w.col, w.mine, own, top,
                                            router_winner_x<BIAS>(top, w, lx[0], mask), lane);
        if (i + 1 < T_TOPK && w.mine) {
            if (LIST < RT_LIST)
                redo |= more && (LIST == 1 || lk[LIST > 1 ? 1 : 0] == RT_KEY_NONE);
#pragma unroll
            for (int p = 0; p + 1 < LIST; p++) {
                lk[p] = lk[p + 1];
                lo[p] = lo[p + 1];
                if (BIAS)
                    lx[p] = lx[p + 1];
            }
            lk[LIST - 1] = RT_KEY_NONE;
        }
    }
    /* a dry list is its owner's alone: the rerun is the row's */
    if (LIST < RT_LIST)
        redo = __any_sync(mask, redo);
    return redo;
}

#if T_SEL == 4
/* select, T_SEL 4: merged lists, no rounds. An entry is an element's key
 * and column in 32 bits: the key with its low RT_CBITS bits replaced by
 * RT_CMASK less the column (a larger entry for the lower column), so that
 * a signed max and min order entries as the choice does, ties to the
 * lower column. Each thread keeps its best RT_ML entries (RT_ML, below,
 * at least k): chunks of RT_ML sorted by a bitonic network and
 * merged into the running list (the larger of a_i and c_{L-1-i}, a
 * bitonic sequence holding the best L, sorted by log2 L half-cleaners).
 * Then log2(TPR) exchanges between the row's lanes merge their lists
 * the same way, each split between two lanes (rt_entries_exchange): every
 * lane of the row ends with the row's best RT_ML in order, and lane i %
 * TPR keeps output i. Where TPR 32 rounds cost a dependent redux.sync,
 * vote and pop each (about 130 cycles, k of them), this is a few
 * independent compare networks and log2(TPR) shuffle exchanges.
 *
 * Without a bias the entry drops the key's low RT_CBITS bits (with one
 * it holds a distance, exact: rt_entry), so two elements whose keys
 * differ only there compare by column. Where that can change the choice
 * or its order (two of the best k share their high bits, or an element
 * not chosen shares the k-th's) the row sets redo and runs the exact
 * rounds (by the scan, which holds no lists: rare, and few registers; the
 * row and bias read again). fp32 of an fp16 or bf16 logit has 13 or 16
 * low zero bits (a negative one's key 13 or 16 ones), more than RT_CBITS
 * (at most 11), so without a bias only a NaN (whose key sits just above
 * +inf's) beside a +inf can tie there: such a row (its best entry at
 * +inf's high bits) reruns. The chosen logits are read again from the row
 * (just read: in the caches), as the entries no longer hold them whole.
 * The softmax's stats come before the merge (router_late_stats). */
__device__ constexpr int rt_bits(int n)
{
    return n <= 1 ? 0 : 1 + rt_bits((n + 1) / 2);
}
#define RT_CBITS rt_bits(T_COLS)
#define RT_CMASK ((1 << RT_CBITS) - 1)
/* A thread's list: the power of two at or above k, and above it for k 1
 * and 2 (the check below reruns a row where one thread's whole list was
 * chosen: for k 4 and 8 a thread holding every winner, seldom; for k 1 or
 * 2 a list of k would rerun a row in TPR). */
#define RT_ML (T_TOPK <= 1 ? 2 : T_TOPK <= 2 ? 4 : T_TOPK <= 4 ? 4 : 8)
#define RT_ENTRY_PAD ((int)0x80000000)

/* With a bias an entry holds the key's distance below the row's largest
 * key instead of its high bits: exact where the choice is crowded. v = s
 * + b of a sigmoid router sits in (-0.05, 1.05), where a dropped 8 or 9
 * bits (E 256, 384) put two of the best 8 in one bin on, by estimate, a
 * fifth of the rows, and every such row ran the rounds again (16384 x
 * 384 k 8: 30.8 us, the rounds alone 19.9). The distance d (top less the
 * key, at most RT_DIST_MAX: 24 bits at E 256, two binades of fp32 near
 * the top) goes in as RT_DIST_MAX - d; keys RT_DIST_MAX or more below the
 * top share the entry's high part 0 and compare by column, so a row whose
 * k-th entry lies there reruns. */
#define RT_DIST_MAX ((1 << (31 - RT_CBITS)) - 1)

/* The softmax without a bias or groups forms its entries from the logit
 * alone: its bits with the magnitude flipped where negative (two integer
 * instructions) after x + 0, which turns -0 into +0 (an add, on the FMA
 * pipe), where router_key takes five on the ALU pipe, the merge's busiest
 * (16384 x 128, k 8: 422 of a warp's 634 instructions). A NaN anywhere
 * in such a row makes every score NaN, and router_store then writes the
 * first k columns, whatever the order of NaN's bits here. */
template <bool BIAS>
__device__ constexpr bool rt_raw_entries()
{
    return !BIAS && T_SCORE == 0 && T_GROUPS == 1;
}

/* Element e's entry (a slot past the row: the pad, below every entry);
 * floor: the biased form's lowest exact key (rt_dist_floor), unused
 * without a bias. */
template <bool BIAS>
__device__ __forceinline__ int rt_entry(const int (&key)[RT_HELD], const float (&x)[RT_HELD], int e,
                                        int lane, int floor)
{
    if (e >= RT_HELD || !router_in_row(e, lane))
        return RT_ENTRY_PAD;
    const int k = key[e < RT_HELD ? e : 0], low = RT_CMASK - (lane * T_VEC + rt_off(e));
    if (BIAS)
        return ((max(k, floor) - floor) << RT_CBITS) | low;
    if (rt_raw_entries<BIAS>()) {
        const int b = __float_as_int(x[e < RT_HELD ? e : 0] + 0.0f);
        return ((b ^ ((b >> 31) & 0x7FFFFFFF)) & ~RT_CMASK) | low;
    }
    return (k & ~RT_CMASK) | low;
}

/* The key RT_DIST_MAX below the row's largest (top): the entries' zero,
 * clamped at the lowest key. */
__device__ __forceinline__ int rt_dist_floor(int top)
{
    return top < RT_KEY_NONE + RT_DIST_MAX ? RT_KEY_NONE : top - RT_DIST_MAX;
}

__device__ __forceinline__ void rt_entry_cas(int &a, int &b)
{
    const int hi = max(a, b), lo = min(a, b);
    a = hi;
    b = lo;
}

/* a sorted, largest first, by a bitonic network */
__device__ __forceinline__ void rt_entries_sort(int (&a)[RT_ML])
{
#pragma unroll
    for (int size = 2; size <= RT_ML; size *= 2)
#pragma unroll
        for (int stride = size / 2; stride > 0; stride /= 2)
#pragma unroll
            for (int i = 0; i < RT_ML; i++) {
                const int j = i ^ stride;
                if (j > i) {
                    if ((i & size) == 0) /* descending (every pair at size RT_ML) */
                        rt_entry_cas(a[i], a[j]);
                    else
                        rt_entry_cas(a[j], a[i]);
                }
            }
}

/* a, a bitonic sequence of N, sorted largest first by log2 N
 * half-cleaners */
template <int N>
__device__ __forceinline__ void rt_entries_clean(int (&a)[N])
{
#pragma unroll
    for (int h = N / 2; h >= 1; h /= 2)
#pragma unroll
        for (int i = 0; i < N; i++)
            if ((i & h) == 0)
                rt_entry_cas(a[i], a[i + h]);
}

/* a: the best RT_ML of a and b, sorted (both come sorted) */
__device__ __forceinline__ void rt_entries_merge(int (&a)[RT_ML], const int (&b)[RT_ML])
{
#pragma unroll
    for (int i = 0; i < RT_ML; i++)
        a[i] = max(a[i], b[RT_ML - 1 - i]);
    rt_entries_clean(a);
}

/* best: the row's best RT_ML in every lane, from each lane's own (sorted).
 * Lanes o apart could each merge both lists whole, log2(TPR) times, but
 * the two would compute the same list: 32 integer min/max a lane a level
 * at RT_ML 8, the ALU pipe's half-rate work, which bounds the merge at
 * 16384 x 128 (Nsight Compute: 61% of the SMs' active cycles). So the
 * lanes O = TPR/2 apart split each merged list: the upper lane (bit O
 * clear) keeps its best half, the lower lane the rest. The first exchange
 * swaps whole lists (c_i = max(a_i, b_{L-1-i}), bitonic, holds the best
 * L; its half-cleaner's max or min a lane); each later one, with the
 * group o apart, takes the other group's opposite half (lane ^ o ^ O,
 * reversed: the same c_i for the lane's own half) and the half-cleaner's
 * partner from lane ^ O; then each half is sorted by its own cleaners. At
 * 8 threads a row and L 8: 52 min/max a lane over the three exchanges
 * against 96 (SASS at 16384 x 128: 184 against 216 in all), 24 shuffles
 * as before; the lists are whole again (L / 2 shuffles, L selects) for
 * the checks and the outputs. Measured on the H200, the same configs
 * both ways: 0.07 to 1.62 us faster at 16384 and 65536 tokens. */
__device__ __forceinline__ void rt_entries_exchange(int (&best)[RT_ML], int lane, unsigned mask)
{
#if RT_TPR > 1
    constexpr int H = RT_ML / 2, O = RT_TPR / 2;
    const bool up = (lane & O) == 0;
    int h[H];
    {
        int other[RT_ML];
#pragma unroll
        for (int j = 0; j < RT_ML; j++)
            other[j] = __shfl_xor_sync(mask, best[j], O);
        int c[RT_ML];
#pragma unroll
        for (int i = 0; i < RT_ML; i++)
            c[i] = max(best[i], other[RT_ML - 1 - i]);
#pragma unroll
        for (int i = 0; i < H; i++)
            h[i] = up ? max(c[i], c[i + H]) : min(c[i], c[i + H]);
        rt_entries_clean(h);
    }
#pragma unroll
    for (int o = O / 2; o > 0; o /= 2) {
        int q[H], c[H], r[H];
#pragma unroll
        for (int j = 0; j < H; j++)
            q[j] = __shfl_xor_sync(mask, h[j], o | O);
#pragma unroll
        for (int i = 0; i < H; i++)
            c[i] = max(h[i], q[H - 1 - i]);
#pragma unroll
        for (int j = 0; j < H; j++)
            r[j] = __shfl_xor_sync(mask, c[j], O);
#pragma unroll
        for (int i = 0; i < H; i++)
            h[i] = up ? max(c[i], r[i]) : min(c[i], r[i]);
        rt_entries_clean(h);
    }
    int r[H];
#pragma unroll
    for (int j = 0; j < H; j++)
        r[j] = __shfl_xor_sync(mask, h[j], O);
#pragma unroll
    for (int j = 0; j < H; j++) {
        best[j] = up ? h[j] : r[j];
        best[j + H] = up ? r[j] : h[j];
    }
#else
    (void)best, (void)lane, (void)mask;
#endif
}

template <bool BIAS>
__device__ __forceinline__ bool router_select_merge(RouterChoice &ch, const int (&key)[RT_HELD],
                                                    const float (&x)[RT_HELD], int lane,
                                                    unsigned mask)
{
    /* with a bias, the row's largest key, the distances' origin */
    int floor = 0;
    if (BIAS) {
        int top = RT_KEY_NONE;
#pragma unroll
        for (int e = 0; e < RT_HELD; e++)
            top = max(top, key[e]);
        floor = rt_dist_floor(lanes_max_int(top, mask));
    }
    /* the thread's best RT_ML entries */
    int best[RT_ML];
#pragma unroll
    for (int c0 = 0; c0 < RT_HELD; c0 += RT_ML) {
        int c[RT_ML];
#pragma unroll
        for (int j = 0; j < RT_ML; j++)
            c[j] = rt_entry<BIAS>(key, x, c0 + j, lane, floor);
        rt_entries_sort(c);
        if (c0 == 0) {
#pragma unroll
            for (int j = 0; j < RT_ML; j++)
                best[j] = c[j];
        } else {
            rt_entries_merge(best, c);
        }
    }
    /* the thread's own, for the check */
    int mine[RT_ML];
#pragma unroll
    for (int j = 0; j < RT_ML; j++)
        mine[j] = best[j];
    /* the row's */
    rt_entries_exchange(best, lane, mask);
    /* whether the dropped bits could have ordered the choice otherwise */
    bool redo;
    if (BIAS) {
        /* the k-th among the keys too far below the top (or a pad) */
        redo = best[T_TOPK - 1] <= RT_CMASK;
    } else if (ESIZE == 2) {
        redo = (best[0] & ~RT_CMASK) == (0x7F800000 & ~RT_CMASK);
    } else {
        redo = false;
#pragma unroll
        for (int i = 0; i + 1 < T_TOPK; i++)
            redo |= ((best[i] ^ best[i + 1]) & ~RT_CMASK) == 0;
        /* an element not chosen with the k-th's high bits: where a thread
         * holds one, it or one above it that is not chosen either is in
         * the thread's own list, unless that list was chosen whole */
        const int kth = best[T_TOPK - 1], low = kth & ~RT_CMASK;
#pragma unroll
        for (int j = 0; j < RT_ML; j++)
            redo |= mine[j] >= low && mine[j] < kth;
        redo |= mine[RT_ML - 1] >= kth;
    }
    /* each lane its outputs: the column, and the logit read again */
    float first = 0.0f, m = NEG_INF;
#pragma unroll
    for (int s = 0; s < RT_SLOTS; s++) {
        const int i = s * RT_TPR + lane;
        int en = best[0];
#pragma unroll
        for (int j = 1; j < RT_ML; j++)
            if (i == j)
                en = best[j];
        const int col = RT_CMASK - (en & RT_CMASK);
        float xv = 0.0f;
        if (ch.row != NULL && i < T_TOPK)
            xv = bits_to_float(router_load_elem(ch.row + (long long)col * ESIZE));
        ch.id[s] = col;
        ch.x[s] = BIAS ? xv : __int_as_float(router_key(xv));
        if (s == 0)
            first = xv;
        if (i < T_TOPK)
            m = fmaxf(m, xv);
    }
    /* the largest chosen logit: without a bias the row's largest, output
     * 0's (lane 0, slot 0; a NaN stays NaN); with one the maximum over the
     * chosen, as the rounds' running fmaxf takes it */
    ch.max_x = BIAS ? lanes_max(m, mask) : __shfl_sync(mask, first, 0, RT_TPR);
    return redo;
}
#endif

/* EXACT: the rerun's form (T_SEL 2 and 3: the whole list, by insertion;
 * T_SEL 4: the scan). */
template <bool BIAS, bool FAST, bool EXACT>
__device__ __forceinline__ bool router_select(RouterChoice &ch, const int (&key)[RT_HELD],
                                              const float (&x)[RT_HELD], int lane, unsigned mask)
{
#if T_SEL == 4
    if (!EXACT)
        return router_select_merge<BIAS>(ch, key, x, lane, mask);
    return router_select_scan<BIAS, false>(ch, key, x, lane, mask);
#endif
    return router_select_sorted<BIAS, FAST,
                                ((T_SEL == 2 || T_SEL == 3) && !EXACT) ? RT_SHORT : RT_LIST,
                                T_SEL == 3 && !EXACT>(ch, key, x, lane, mask);
}
#endif

/* ---- weight and store ---- */


/* weight: each lane its slots' weights (scores, renormalized over the
 * row's lanes), times c; store: weights, ids and counts, output i by lane
 * i % TPR (a row's outputs are consecutive: one coalesced store a slot). */
template <bool BIAS>
__device__ __forceinline__ void router_store(const RouterChoice &ch, const RouterStats &st,
                                             long long row, int lane, unsigned mask,
                                             bool live, float scaling, WT *weights, IDX *ids,
                                             int *counts)
{
    float w[RT_SLOTS];
    float part = 0.0f;
#if T_RENORM
    const float ref = router_renorm_lead(ch.max_x);
#endif
#pragma unroll
    for (int s = 0; s < RT_SLOTS; s++) {
        const bool valid = s * RT_TPR + lane < T_TOPK;
#if T_RENORM && RT_ALL_CHOSEN
        w[s] = router_renorm_from(ch.slead[s], ch.stail[s], ref);
#elif T_RENORM
        w[s] = router_renorm_term(router_chosen_x<BIAS>(ch, s), ref);
#else
        w[s] = router_score(router_chosen_x<BIAS>(ch, s), st);
#endif
        part += valid ? w[s] : 0.0f;
    }
#if T_RENORM
#if RT_ALL_CHOSEN
    /* every lane sums the k terms itself, pairwise (the same bits in every
     * lane: the same instructions on the same numbers) */
    float t[T_TOPK];
#pragma unroll
    for (int i = 0; i < T_TOPK; i++)
        t[i] = router_renorm_from(ch.lead[i], ch.tail[i], ref);
#pragma unroll
    for (int h = 1; h < T_TOPK; h *= 2)
#pragma unroll
        for (int i = 0; i + h < T_TOPK; i += 2 * h)
            t[i] += t[i + h];
    const float total = t[0];
    (void)part, (void)mask;
#else
    const float total = lanes_sum(part, mask);
#endif
    /* total is 1/2 to k (the largest term's at least 1/2) or NaN: the
     * reciprocal's fast path and a multiply, within an ulp of w / total */
    const float inv = router_rcp_1to2(total);
    const float nan = __int_as_float(0x7fc00000);
#pragma unroll
    for (int s = 0; s < RT_SLOTS; s++)
        w[s] = (T_SCORE == 0 && st.nan_row) ? nan : w[s] * inv;
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
        if (live && i < T_TOPK) {
            const int id = first_k ? i : ch.id[s];
            weights[out + i] = router_weight_out(w[s] * scaling);
            ids[out + i] = (IDX)id;
            if (counts != NULL)
                atomicAdd(counts + id, 1);
        }
    }
}

__device__ __forceinline__ void router_choice_init(RouterChoice &ch)
{
#pragma unroll
    for (int s = 0; s < RT_SLOTS; s++) {
        ch.id[s] = 0;
        ch.x[s] = 0.0f;
    }
    ch.max_x = NEG_INF;
#if RT_ALL_CHOSEN
#pragma unroll
    for (int s = 0; s < RT_SLOTS; s++)
        ch.slead[s] = ch.stail[s] = 0.0f;
#endif
}

/* The vote form's winners from the row's entries (RT_STAGE): each lane
 * its slots', once every lane of the row has written (the mask's
 * __syncwarp orders the writes before the reads). */
__device__ __forceinline__ void router_unstage(RouterChoice &ch, unsigned mask, int lane)
{
#if RT_STAGE
    __syncwarp(mask);
#pragma unroll
    for (int s = 0; s < RT_SLOTS; s++) {
        const int i = s * RT_TPR + lane;
        if (i < T_TOPK) {
            const RouterOut o = ch.stage[i];
            ch.id[s] = o.col;
            ch.x[s] = o.x;
        }
    }
#else
    (void)ch, (void)mask, (void)lane;
#endif
}

/* keys, groups, select, weight and store for one row held in x, read
 * from xr (NULL past the last row; stage: the row's entries, RT_STAGE). */
template <bool BIAS>
__device__ __forceinline__ void router_route(const float (&x)[RT_HELD], const unsigned char *xr,
                                             const float *bias, const RouterSlot &slot,
                                             bool live, float scaling, WT *weights, IDX *ids,
                                             int *counts, RouterOut *stage)
{
    float b[RT_HELD];
    if (BIAS)
        router_load_bias(b, bias, slot.lane);
    RouterStats st = {0.0f, 1.0f, false};
    if (!router_late_stats<BIAS>())
        st = router_stats(x, slot.mask);
    int key[RT_HELD];
    router_keys<BIAS>(key, x, b, st, slot.lane);
#if T_GROUPS > 1
    router_keep_groups<BIAS>(key, st, slot.lane, slot.mask);
#endif
    RouterChoice ch;
    router_choice_init(ch);
#if RT_STAGE
    ch.stage = stage;
#else
    (void)stage;
#endif
#if T_SEL == 4
    ch.row = xr;
#else
    (void)xr;
#endif
    bool redo = router_select<BIAS, RT_FAST_ROUNDS, false>(ch, key, x, slot.lane, slot.mask);
    /* before the rerun's branch: every lane of the row reaches it (redo
     * is the row's) and the rerun keeps its winners in registers */
    router_unstage(ch, slot.mask, slot.lane);
#if RT_LATE_MAX
    if (BIAS) {
        float m = NEG_INF;
#pragma unroll
        for (int s = 0; s < RT_SLOTS; s++)
            if (s * RT_TPR + slot.lane < T_TOPK)
                m = fmaxf(m, ch.x[s]);
        ch.max_x = lanes_max(m, slot.mask);
    }
#endif
    /* the whole warp's masks: the whole warp reruns, or none of it (a row
     * past the last, which stores nothing, asks for nothing) */
    if (RT_WHOLE_WARP)
        redo = __any_sync(0xFFFFFFFFu, redo && live);
    /* before the branch below, so that ptxas can place the sum among the
     * rounds (the first round's key, ch.max_x, is the same either way) */
    if (router_late_stats<BIAS>())
        st = router_late_stats_of(x, ch.max_x, slot.mask);
    /* the usual row stores here and returns, so that ptxas lays its store
     * right after the rounds and the rerun's copy of them after it, where
     * the path no longer jumps over it (the same configs both ways: 27 of
     * 30 rows faster under graph replay on the H200, by up to 0.25 us) */
    if (!redo) {
        router_store<BIAS>(ch, st, slot.row, slot.lane, slot.mask, live, scaling, weights, ids,
                           counts);
        return;
    }
    /* several lanes held a round's largest key, or a short list ran dry:
     * again, exact */
    router_choice_init(ch);
#if T_SEL == 4
    /* The merge's rerun reads its row and bias again and forms the keys
     * again, so that neither the row nor its keys hold registers through
     * the merge (volatile loads, which the compiler cannot replace by the
     * first ones: kept, they took 48 to 78 registers at 16384 x 128, k 8, 8
     * threads a row). */
    float x2[RT_HELD];
    int key2[RT_HELD];
    router_read_row(x2, xr, live, slot.lane);
    if (BIAS)
        router_load_bias<true>(b, bias, slot.lane);
    router_keys<BIAS>(key2, x2, b, st, slot.lane);
#if T_GROUPS > 1
    router_keep_groups<BIAS>(key2, st, slot.lane, slot.mask);
#endif
    router_select<BIAS, false, true>(ch, key2, x2, slot.lane, slot.mask);
#else
    router_select<BIAS, false, true>(ch, key, x, slot.lane, slot.mask);
#endif
    router_store<BIAS>(ch, st, slot.row, slot.lane, slot.mask, live, scaling, weights, ids,
                       counts);
}

#if T_SEL != 5 /* T_SEL 5: router_rank.cu's forward */
/* The forward: one row per TPR threads, T_ROWS rows a block; the launch
 * has rows / T_ROWS blocks, rounded up. bias, counts and source_rows may
 * be NULL. */
extern "C" __global__ void __launch_bounds__(T_WARPS * 32, T_MIN_BLOCKS)
tuned_router_topk(const T *__restrict__ logits, const float *__restrict__ bias,
                  WT *__restrict__ weights, IDX *__restrict__ ids, int *__restrict__ counts,
                  int *__restrict__ source_rows, long long rows, int cols, long long row_stride,
                  tuned_router_options opt)
{
    const RouterSlot slot = router_slot(RT_WHOLE_WARP);
    const bool live = slot.row < rows;
#if RT_STAGE
    __shared__ RouterOut stage_all[T_ROWS * T_TOPK];
    RouterOut *const stage = stage_all + threadIdx.x / RT_TPR * T_TOPK;
#else
    RouterOut *const stage = NULL;
#endif
    if ((!RT_WHOLE_WARP && !live) || cols != T_COLS)
        return;
    float x[RT_HELD];
    const unsigned char *const xr =
        live ? (const unsigned char *)logits + slot.row * row_stride * ESIZE : NULL;
    router_read_row(x, xr, live, slot.lane);
    /* The source rows need no choice: written first, while the loads are in
     * flight. Written beside the weights at the store, they kept the
     * pointer and rows live through the rounds, and ptxas turned the
     * rounds' predicated stores into branches (616 to 776 instructions at
     * 16384 x 128, k 8, TPR 32; 9.3 to 10.6 us on the H200). */
    if (source_rows != NULL && live)
        for (int i = slot.lane; i < T_TOPK; i += RT_TPR)
            source_rows[slot.row * T_TOPK + i] = (int)(i * rows + slot.row);
#ifdef T_KEY_BIAS
    /* Only the key's path: its calls pass the bias exactly where it says
     * bias=1 (the launch refuses any other), so the other path would be
     * dead code, about half the kernel's. For size, not speed: jumping
     * over it measured no cost at 1 to 512 tokens on the H200. */
    router_route<T_KEY_BIAS != 0>(x, xr, bias, slot, live, opt.scaling, weights, ids, counts,
                                  stage);
#else
    if (bias != NULL)
        router_route<true>(x, xr, bias, slot, live, opt.scaling, weights, ids, counts, stage);
    else
        router_route<false>(x, xr, bias, slot, live, opt.scaling, weights, ids, counts, stage);
#endif
}
#endif

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
    const RouterSlot slot = router_slot(false);
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
