/* router_rank.cu: the router's forward with T_SEL 5 (".sel=rank"): a row
 * over a warp or more of threads, its top k chosen by ranks in shared
 * memory, with no rounds. It follows router_topk.cu (its scores, keys,
 * loads and output rules) and replaces that file's forward kernel.
 *
 * Idea: at few tokens a row's choice is a chain of dependent steps, and a
 * warp that holds E / 32 elements a lane issues every step for all of
 * them (DeepSeek-V3's 256 experts: about 1.2 us over a copy of its bytes
 * at one token). Here a row has TPR = T_WARPS * 32 / T_ROWS threads, 32
 * to 1024, each holding at most ceil(E / TPR) elements (one at TPR >= E), and
 * the selection is a few block-wide steps whatever k is:
 *   load     the row (one element a pass, coalesced) and the bias
 *   stats    softmax: the row's maximum and sum of exp, over its warps
 *            through shared memory (before the keys where a bias or the
 *            groups need the scores; else beside the selection)
 *   keys     router_keys's, and a key's entry: key above, column below
 *            (64 bits, so that entries never tie: a larger entry is a
 *            larger key, or the same key at a lower column)
 *   groups   the keys in shared memory; thread g scans group g for its
 *            two largest, scores it; each group ranks itself among the
 *            others (ties to the lower group); the other groups' keys
 *            dropped (router_keep_groups's rules)
 *   bound    the row's threads in RK_M segments (at least k of them where
 *            the threads allow, more where groups drop some): each
 *            segment's largest entry of an expert still chosen. An element
 *            below k of those maxima is below k elements of the row, so
 *            it is not chosen: the others, the candidates (k or more; a
 *            few times k on random rows), go to a list in shared memory
 *   rank     each candidate counts the candidates above it: its rank, the
 *            output it is (every chosen one is a candidate, and so is
 *            everything above it)
 *   weight   output i's thread: its score, or renormalised over the k
 *            (every such thread sums the k terms in one order: the same
 *            bits), times c; store ids, weights, counts as router_store
 * Measured (H200, tunes at 1 to 512 tokens, every variant checked
 * first): the chain's prediction did not hold. It wins only at the widest
 * rows (2048 experts, k 8: 5.38 against 5.54 us at one token, 8.22
 * against 8.26 at 64); at 384 experts or fewer its barriers, shared
 * memory round trips and atomic adds cost 0.1 to 0.6 us more than the
 * warp forms' chains (ties at DeepSeek-V3's and E384k8's one token). The
 * tuner keeps it where it wins.
 * A row past the last runs with no elements (every thread meets every
 * barrier) and stores nothing. Shared memory: RankRow a row, the
 * candidate list room for the whole row (fewer segments than k would make
 * every element a candidate: config.c keeps k threads a row or more, so
 * there are k segments; a row of tied keys makes the first k segments'
 * elements candidates: slower, still exact).
 *
 * Checked against: the float64 router on the host, as router_topk.cu's
 * forward (src/driver/check_router.c). */

#if T_SEL == 5

#if RT_TPR < 32 || RT_TPR > 1024
#error "router_rank.cu: T_SEL 5 keeps a row in 32 to 1024 threads (T_WARPS*32/T_ROWS)"
#endif
#if (RT_TPR & (RT_TPR - 1)) != 0
#error "router_rank.cu: T_SEL 5's threads a row are a power of two (its segments split warps)"
#endif
#if T_VEC != 1
#error "router_rank.cu: T_SEL 5 loads one element a pass: T_VEC 1"
#endif

#define RK_T RT_TPR
#define RK_W (RK_T / 32)
/* Enough segments to bound the choice: k of them holding kept experts,
 * where the groups keep T_TOPK_GROUP of T_GROUPS (k G / kept, rounded up
 * to a power of two) */
#define RK_NEED ((T_TOPK * T_GROUPS + T_TOPK_GROUP - 1) / T_TOPK_GROUP)
#define RK_K2 (RK_NEED <= 1 ? 1 : RK_NEED <= 2 ? 2 : RK_NEED <= 4 ? 4 : RK_NEED <= 8 ? 8 :     \
               RK_NEED <= 16 ? 16 : RK_NEED <= 32 ? 32 : RK_NEED <= 64 ? 64 : RK_NEED <= 128 ? \
               128 : RK_NEED <= 256 ? 256 : RK_NEED <= 512 ? 512 : 1024)
#define RK_M_WANT (RK_W > RK_K2 ? RK_W : RK_K2)
#define RK_M (RK_M_WANT < RK_T ? RK_M_WANT : RK_T)
#define RK_S (RK_T / RK_M) /* lanes a segment, 1 to 32, inside one warp */

struct RankRow {
    long long seg[RK_M];       /* each segment's largest entry */
    long long cand[T_COLS];    /* the candidates' entries */
    float cand_x[T_COLS];      /* and their logits */
    float part_max[RK_W], part_sum[RK_W];
    int ncand;
    int slot_col[T_TOPK];
    float slot_x[T_TOPK];
#if T_GROUPS > 1
    int keys[T_COLS];
    int gkey[T_GROUPS];
    int kept[T_GROUPS];
#endif
};

static_assert(sizeof(RankRow) * T_ROWS <= 49152,
              "router_rank.cu: the rows' RankRows pass 48 KiB (config.c's rank_row_bytes)");

/* An entry: the key in the high word, the column's complement in the low
 * (a signed 64-bit compare orders by key, then the lower column first). */
__device__ __forceinline__ long long rk_entry(int key, int col)
{
    return (long long)(((u64)(u32)key << 32) | (u64)(0xFFFFFFFFu - (u32)col));
}

__device__ __forceinline__ int rk_col(long long entry)
{
    return (int)(0xFFFFFFFFu - (u32)(u64)entry);
}

__device__ __forceinline__ float rk_warp_max(float v)
{
#pragma unroll
    for (int o = 16; o > 0; o /= 2)
        v = fmaxf(v, __shfl_xor_sync(0xFFFFFFFFu, v, o));
    return v;
}

__device__ __forceinline__ float rk_warp_sum(float v)
{
#pragma unroll
    for (int o = 16; o > 0; o /= 2)
        v += __shfl_xor_sync(0xFFFFFFFFu, v, o);
    return v;
}

/* The row's maximum (NaN ignored, as fmaxf), its warps' parts in shared
 * memory: post writes them, fold (after a barrier) reads them in one
 * order in every thread. */
__device__ __forceinline__ void rk_max_post(RankRow &R, const float (&x)[RT_HELD], int t)
{
    float m = NEG_INF;
#pragma unroll
    for (int e = 0; e < RT_HELD; e++)
        m = fmaxf(m, x[e]);
    m = rk_warp_max(m);
    if (t % 32 == 0)
        R.part_max[t / 32] = m;
}

__device__ __forceinline__ float rk_max_fold(const RankRow &R)
{
    float m = R.part_max[0];
#pragma unroll
    for (int w = 1; w < RK_W; w++)
        m = fmaxf(m, R.part_max[w]);
    return m;
}

/* The sum of exp(x - m) (the slots past the row hold -inf: 0). */
__device__ __forceinline__ void rk_sum_post(RankRow &R, const float (&x)[RT_HELD], float m, int t)
{
    float s = 0.0f;
#pragma unroll
    for (int e = 0; e < RT_HELD; e++)
        s += exp_shifted(x[e], m, LOG2E);
    s = rk_warp_sum(s);
    if (t % 32 == 0)
        R.part_sum[t / 32] = s;
}

__device__ __forceinline__ RouterStats rk_stats_fold(const RankRow &R, float m)
{
    float s = R.part_sum[0];
#pragma unroll
    for (int w = 1; w < RK_W; w++)
        s += R.part_sum[w];
    RouterStats st;
    st.max = m;
    st.inv_sum = router_rcp_1to2(s); /* s: 1 to E (the maximum's term is 1) or NaN */
    st.nan_row = isnan(s);
    return st;
}

#if T_GROUPS > 1
/* groups: thread g scans group g's keys for its two largest and scores
 * the group; each group ranks itself (NaN first, ties to the lower
 * group); the keys of the groups not kept dropped. Three barriers. */
template <bool BIAS>
__device__ __forceinline__ void rk_keep_groups(RankRow &R, int (&key)[RT_HELD],
                                               const RouterStats &st, int t)
{
#pragma unroll
    for (int e = 0; e < RT_HELD; e++)
        if (router_in_row(e, t))
            R.keys[t + rt_off(e)] = key[e];
    __syncthreads();
    if (t < T_GROUPS) {
        int a1 = RT_KEY_NONE, a2 = RT_KEY_NONE;
#pragma unroll 8
        for (int j = 0; j < RT_GS; j++) {
            const int k = R.keys[t * RT_GS + j];
            a2 = max(a2, min(a1, k));
            a1 = max(a1, k);
        }
        float score = router_key_v<BIAS>(a1, st);
        if (RT_GS > 1)
            score += router_key_v<BIAS>(a2, st);
        R.gkey[t] = router_key(score);
    }
    __syncthreads();
    if (t < T_GROUPS) {
        const int mine = R.gkey[t];
        int rank = 0;
#pragma unroll
        for (int h = 0; h < T_GROUPS; h++) {
            const int other = R.gkey[h];
            rank += other > mine || (other == mine && h < t);
        }
        R.kept[t] = rank < T_TOPK_GROUP;
    }
    __syncthreads();
#pragma unroll
    for (int e = 0; e < RT_HELD; e++)
        if (router_in_row(e, t) && !R.kept[(t + rt_off(e)) / RT_GS])
            key[e] = RT_KEY_NONE;
}
#endif

/* bound: each segment's largest entry (a segment is RK_S consecutive
 * lanes of one warp) among the experts still in the choice (a dropped
 * group's are not: the kept ones are k or more), posted for the barrier
 * that follows. */
__device__ __forceinline__ void rk_bound_post(RankRow &R, const int (&key)[RT_HELD], int t)
{
    long long best = (long long)0x8000000000000000ull;
#pragma unroll
    for (int e = 0; e < RT_HELD; e++)
        if (router_in_row(e, t) && key[e] != RT_KEY_NONE)
            best = max(best, rk_entry(key[e], t + rt_off(e)));
#pragma unroll
    for (int o = RK_S / 2; o > 0; o /= 2)
        best = max(best, __shfl_xor_sync(0xFFFFFFFFu, best, o));
    if (t % RK_S == 0)
        R.seg[t / RK_S] = best;
}

/* candidates: the elements below fewer than k segments' maxima, to the
 * row's list (in any order: the ranks do not depend on it). */
__device__ __forceinline__ void rk_candidates(RankRow &R, const int (&key)[RT_HELD],
                                              const float (&x)[RT_HELD], int t)
{
    /* the maxima in registers where they are few (each element compares
     * with all of them), else read where compared */
#if RK_M <= 16
    long long seg[RK_M];
#pragma unroll
    for (int m = 0; m < RK_M; m++)
        seg[m] = R.seg[m];
#else
    const long long *const seg = R.seg;
#endif
#pragma unroll
    for (int e = 0; e < RT_HELD; e++) {
        if (!router_in_row(e, t) || key[e] == RT_KEY_NONE)
            continue;
        const long long en = rk_entry(key[e], t + rt_off(e));
        int above = 0;
#pragma unroll
        for (int m = 0; m < RK_M; m++)
            above += seg[m] > en;
        if (above < T_TOPK) {
            const int at = atomicAdd(&R.ncand, 1);
            R.cand[at] = en;
            R.cand_x[at] = x[e];
        }
    }
}

/* rank: candidate i's place among the n candidates; the first k are the
 * outputs, in order. */
__device__ __forceinline__ void rk_rank(RankRow &R, int t)
{
    const int n = R.ncand;
    for (int i = t; i < n; i += RK_T) {
        const long long en = R.cand[i];
        int rank = 0;
#pragma unroll 4
        for (int j = 0; j < n; j++)
            rank += R.cand[j] > en;
        if (rank < T_TOPK) {
            R.slot_col[rank] = rk_col(en);
            R.slot_x[rank] = R.cand_x[i];
        }
    }
}

/* weight and store: output i by the row's thread i (i += TPR where k is
 * more than the threads): router_store's rules. */
template <bool BIAS>
__device__ __forceinline__ void rk_store(const RankRow &R, const RouterStats &st, long long row,
                                         int t, float scaling, WT *weights, IDX *ids,
                                         int *counts)
{
#if T_RENORM
    /* the largest chosen logit (the terms' reference: the largest term 1) */
    float top = R.slot_x[0];
#pragma unroll
    for (int i = 1; i < T_TOPK; i++)
        top = fmaxf(top, R.slot_x[i]);
    const float ref = router_renorm_lead(top);
    float sum[T_TOPK];
#pragma unroll
    for (int i = 0; i < T_TOPK; i++)
        sum[i] = router_renorm_term(R.slot_x[i], ref);
#pragma unroll
    for (int h = 1; h < T_TOPK; h *= 2)
#pragma unroll
        for (int i = 0; i + h < T_TOPK; i += 2 * h)
            sum[i] += sum[i + h];
    /* the sum is 1/2 to k or NaN (router_store's reciprocal) */
    const float inv = router_rcp_1to2(sum[0]);
#endif
    const bool first_k = !BIAS && T_SCORE == 0 && st.nan_row;
    const long long out = row * T_TOPK;
    for (int i = t; i < T_TOPK; i += RK_T) {
#if T_RENORM
        /* the same function of the same logit as its term in the sum */
        const float w = (T_SCORE == 0 && st.nan_row) ? __int_as_float(0x7fc00000)
                                                     : router_renorm_term(R.slot_x[i], ref) * inv;
#else
        const float w = router_score(R.slot_x[i], st);
#endif
        const int id = first_k ? i : R.slot_col[i];
        weights[out + i] = router_weight_out(w * scaling);
        ids[out + i] = (IDX)id;
        if (counts != NULL)
            atomicAdd(counts + id, 1);
    }
}

/* The stages for one row. The softmax's stats come before the keys where
 * a bias's keys or the groups' scores need the scores; beside the bound
 * and the candidates (no barrier of their own) where only the weights
 * do; from the top chosen logit where the weights are renormalised (only
 * whether the row's softmax is NaN, as router_late_stats_of). */
template <bool BIAS>
__device__ __forceinline__ void rk_route(RankRow &R, const float (&x)[RT_HELD],
                                         const float *bias, long long row, int t, bool live,
                                         float scaling, WT *weights, IDX *ids, int *counts)
{
    /* where the softmax's stats come from (above) */
    constexpr bool early = T_SCORE == 0 && (BIAS || T_GROUPS > 1);
    constexpr bool beside = T_SCORE == 0 && !early && !T_RENORM;
    constexpr bool from_top = T_SCORE == 0 && !early && T_RENORM;
    float b[RT_HELD];
    if (BIAS)
        router_load_bias(b, bias, t);
    RouterStats st = {0.0f, 1.0f, false};
    if (early) {
        rk_max_post(R, x, t);
        __syncthreads();
        const float m = rk_max_fold(R);
        rk_sum_post(R, x, m, t);
        __syncthreads();
        st = rk_stats_fold(R, m);
    }
    int key[RT_HELD];
    router_keys<BIAS>(key, x, b, st, t);
#if T_GROUPS > 1
    rk_keep_groups<BIAS>(R, key, st, t);
#endif
    if (beside)
        rk_max_post(R, x, t);
    if (!live) {
#pragma unroll
        for (int e = 0; e < RT_HELD; e++)
            key[e] = RT_KEY_NONE;
    }
    rk_bound_post(R, key, t);
    __syncthreads();
    float m = 0.0f;
    if (beside) {
        m = rk_max_fold(R);
        rk_sum_post(R, x, m, t);
    }
    if (live)
        rk_candidates(R, key, x, t);
    __syncthreads();
    if (live)
        rk_rank(R, t);
    __syncthreads();
    if (beside)
        st = rk_stats_fold(R, m);
    /* the row's softmax is NaN exactly where the top key's logit is not
     * finite */
    if (from_top && live) {
        const float top = R.slot_x[0];
        st.max = top;
        st.inv_sum = 1.0f;
        st.nan_row = !isfinite(top);
    }
    if (live)
        rk_store<BIAS>(R, st, row, t, scaling, weights, ids, counts);
}

/* The forward: one row per TPR threads, T_ROWS rows a block; the launch
 * has rows / T_ROWS blocks, rounded up. bias, counts and source_rows may
 * be NULL. */
extern "C" __global__ void __launch_bounds__(T_WARPS * 32, T_MIN_BLOCKS)
tuned_router_topk(const T *__restrict__ logits, const float *__restrict__ bias,
                  WT *__restrict__ weights, IDX *__restrict__ ids, int *__restrict__ counts,
                  int *__restrict__ source_rows, long long rows, int cols, long long row_stride,
                  tuned_router_options opt)
{
    __shared__ RankRow rank_rows[T_ROWS];
    if (cols != T_COLS)
        return; /* every thread of the block: no barrier waits */
    const int t = (int)(threadIdx.x % RK_T);
    RankRow &R = rank_rows[threadIdx.x / RK_T];
    const long long row = (long long)blockIdx.x * T_ROWS + threadIdx.x / RK_T;
    const bool live = row < rows;
    if (t == 0)
        R.ncand = 0; /* read after the bound's barrier */
    float x[RT_HELD];
    const unsigned char *const xr =
        live ? (const unsigned char *)logits + row * row_stride * ESIZE : NULL;
    router_read_row(x, xr, live, t);
    /* the source rows need no choice: written while the loads fly */
    if (source_rows != NULL && live)
        for (int i = t; i < T_TOPK; i += RK_T)
            source_rows[row * T_TOPK + i] = (int)(i * rows + row);
#ifdef T_KEY_BIAS
    rk_route<T_KEY_BIAS != 0>(R, x, bias, row, t, live, opt.scaling, weights, ids, counts);
#else
    if (bias != NULL)
        rk_route<true>(R, x, bias, row, t, live, opt.scaling, weights, ids, counts);
    else
        rk_route<false>(R, x, bias, row, t, live, opt.scaling, weights, ids, counts);
#endif
}

#endif
