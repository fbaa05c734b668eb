/* cross_entropy.cu: family "rows", cross-entropy over the vocabulary: a row
 * of logits held in registers by a group of threads (part of a warp, one
 * or more warps, a whole block, or a thread-block cluster of up to 16
 * blocks, sm_90, which keeps a 128256- or 262144-column row on chip).
 *
 * Idea: the loss and its gradient need the row's log-sum-exp, which needs
 * the whole row; held on chip, the row is read once and the gradient
 * written once, so the fused forward + backward costs what a copy of the
 * logits costs. Per row r with label y, s the scale, V the columns:
 *   lse   = log sum_j exp(s x_j)                           (fp32)
 *   loss  = (1 - eps) (lse - s x_y) + eps (lse - mean_j s x_j) + z lse^2
 *   grad  = gscale_r s (p_j (1 + 2 z lse) - (1 - eps) [j == y] - eps / V),
 *           p_j = exp(s x_j - lse), in fp32, rounded to the dtype once
 * eps the label smoothing, z the z-loss (lse_square_scale); gscale_r the
 * upstream gradient (a device scalar, or per row), for reduction "mean"
 * divided by the count of valid rows, which tuned_cross_entropy_count
 * writes to device memory before (same stream: no host sync). A row whose
 * label is ignore_index has loss 0 and gradient 0. A label outside
 * [0, V) that is not ignore_index is never used as an index: the row's
 * loss and gradient are NaN and bit 0 of the error word is set.
 * The stages are softmax_rows_common.cu's (reduce_max, reduce_row,
 * row_out; its load_row and store_row as ce_load_row and ce_store_row,
 * reworked for rows off a vector boundary), plus:
 *   sum     the exps' sum without the target's term (ce_exp_and_sum)
 *   target  the thread whose slot holds column y (the owner) loads x_y
 *           as the row arrives (2 bytes from the line its own loads bring),
 *           before any store: the owner is the only thread that stores
 *           that element, so grad may be the logits themselves (in place)
 *   mean    with T_CE_SMOOTH, each thread's sum of its x, reduced over the
 *           row after the (max, sum) round (its own mailbox round)
 *   store   the gradient, a vector at a time (ce_store_row through
 *           ce_store_grad_row; the backward's ce_grad_words), with the
 *           softmax's one multiply an element; then the owner stores the
 *           label's element again, with its target (ce_store_target)
 * The owner writes the row's loss, lse and z term (lane 0 where there is
 * no owner: an ignored or bad label), and, when asked (prm.lse_lo), the
 * part of the lse its fp32 rounding drops.
 *
 * The backward's precision: p_j = exp(s x_j - lse) from an fp32 lse
 * carries lse's rounding, 2^-24 |lse| absolute in the exponent (1e-6 at
 * lse 16), where torch's fp32 log-softmax carries that of log sum
 * (x_j - max is exact): 5.4x torch's gradient error on the H200. The
 * forward can write lo = (s max + log sum) - lse exactly (ce_lse_lo: a
 * two-sum, whose remaining error is log sum's own rounding, as torch's),
 * and the backward then takes exp((s x - lse) - lo); for fp32 logits
 * with expf (no ex2 of a product rounded at 2^-24 |arg|), where the
 * gradient keeps the bits that the rounding to bf16 or fp16 drops.
 *
 * With T_CE_SOFTCAP every x above is c = cap tanh(x / cap) (Gemma 2's
 * logit cap), formed in fp32 from the x the thread holds, and the
 * gradient is chained through it: dL/dx = dL/dc (1 - (c / cap)^2), in
 * fp32, rounded once. x = -inf (a masked lane, and the slots past a row's
 * end) stays -inf, so it carries no mass (tanh would make it -cap);
 * its gradient is 0. tanh is formed from one ex2 and one reciprocal
 * (ce_cap: an absolute error of about 4e-7, where tanh.approx.f32's 2^-11
 * relative error moved the loss of confident rows by 1e-4 relative, ten
 * times the loss's budget; docs/decisions.md). Registers that hold
 * fp32 values are capped once, as loaded; packed registers
 * (reg=pk) are capped at each use (the sum, the store): two tanhs an
 * element, no more registers. The row's maximum is the cap of the
 * maximum x (the cap rises with x).
 *   capped   the stages above then run on c: the sum's exps are not kept
 *            (the store needs c again for the chain), so the store takes
 *            exp(s (c - max)) / S again, as reg=pk does
 * With T_CE_ARGMAX the forward kernels write each row's argmax: the
 * lowest column holding the row's maximum of s c (of s x without the
 * cap), a NaN counting as the maximum (as torch.argmax), as the labels'
 * type. Each thread notes, before its exps, the lowest column of its own
 * maximum and of its first NaN (argmax); once the row's maximum is
 * reduced, a thread whose own maximum is the row's offers its column,
 * and one more reduction, a min over the row (its own round: a barrier,
 * and in a cluster one more mailbox exchange), picks the lowest. Keys are
 * floats: col for a maximum, col - 2^24 for a NaN (below every maximum),
 * +inf for none; exact while the row has fewer than 2^24 columns.
 *
 * Kernels:
 *   tuned_cross_entropy_rows   T_CE_KIND 0: fused loss + gradient;
 *                              T_CE_KIND 1: loss (and lse) only, grad unused
 *   tuned_cross_entropy_bwd    T_CE_KIND 2: gradient from the saved fp32 lse
 *                              (no reduction: one read, one write; p at
 *                              most 1, ce_prob; lse's low part when given)
 *   tuned_cross_entropy_count  any kind: valid rows and gscale, one block
 *
 * Variants (codegen prepends the defines, then softmax_common.cu and
 * softmax_rows_common.cu, which explain the rows family's):
 *   T_DTYPE, T_WARPS, T_ROWS, T_CLUSTER (1 to 16; > 8 needs the non-portable
 *   cluster size allowed on the function), T_MIN_BLOCKS, T_VEC, T_ITERS,
 *   T_COLS, T_HEAD_FREE, T_HEAD_ALIGN, T_LD, T_ST, T_REG_PACKED (reg=pk),
 *   T_FUSED (red=fused or split) as in softmax_rows.cu; and
 *   T_CE_KIND    0 fused (default), 1 loss only, 2 backward
 *   T_CE_SMOOTH  1: label smoothing compiled in (one more reduction round);
 *                0 (default): a nonzero eps makes every row's loss NaN and
 *                sets bit 1 of the error word, never a silently wrong loss
 *   T_CE_LABEL32 1: labels are int32; 0 (default): int64
 *   T_CE_SOFTCAP 1: the tanh cap compiled in (prm.softcap); 0 (default):
 *                a nonzero cap makes every row's loss NaN and sets bit 2
 *                of the error word
 *   T_CE_ARGMAX  1: the forward kernels write prm.argmax (one more
 *                reduction round); 0 (default): prm.argmax is not written
 * Not applicable (refused below): T_LOG, T_EXP16 (reg=ex: the exps would
 * be rounded to the dtype before the gradient is formed), T_STASH, T_GRID,
 * T_REPLICAS, T_BWD, T_PLANT_BUG. In place, T_LD 1 (.nc) reads memory the
 * kernel writes: use T_LD 0 or 2 for in-place calls.
 *
 * Semantics follow torch.nn.functional.cross_entropy: a NaN or +inf logit,
 * or a row of only -inf, gives a NaN loss (and gradient) for the row.
 *
 * Checked against: cross_entropy_reference.cu's float64 per-row lse, loss
 * and per-element gradient (dtype tolerances, NaN for NaN), and by
 * bench/cross_entropy_kernel.py against a float64 torch reference (itself
 * checked against F.cross_entropy) with ignored rows, label smoothing,
 * z-loss, in-place gradients and a bad label. The softcap and the argmax
 * against the same float64 reference (its cap and its argmax, near-ties
 * within fp32 rounding allowed), with the variant built with both. */

#define T_CE 1
#ifndef T_CE_KIND
#define T_CE_KIND 0
#endif
#ifndef T_CE_SMOOTH
#define T_CE_SMOOTH 0
#endif
#ifndef T_CE_LABEL32
#define T_CE_LABEL32 0
#endif
#ifndef T_CE_SOFTCAP
#define T_CE_SOFTCAP 0
#endif
#ifndef T_CE_ARGMAX
#define T_CE_ARGMAX 0
#endif
#if T_CE_ARGMAX && T_COLS >= (1 << 24)
#error "T_CE_ARGMAX: its keys are exact below 2^24 columns"
#endif
#if T_LOG || T_EXP16 || T_STASH || T_GRID > 1 || T_REPLICAS > 1 || T_BWD || T_PLANT_BUG
#error "cross_entropy.cu: no T_LOG, T_EXP16, T_STASH, T_GRID, T_REPLICAS, T_BWD or T_PLANT_BUG"
#endif
#if T_CE_KIND < 0 || T_CE_KIND > 2
#error "T_CE_KIND is 0 (fused), 1 (loss only) or 2 (backward)"
#endif

#if T_CE_LABEL32
typedef int CeLabel;
#else
typedef long long CeLabel;
#endif

/* The options, passed by value. Exact C layout (x86-64 and the device
 * agree; the host mirrors it and asserts its size, 80):
 *   offset  0  float        scale         s > 0
 *   offset  4  float        smoothing     eps in [0, 1]
 *   offset  8  float        z_loss        z >= 0 (lse_square_scale)
 *   offset 12  int          grad_per_row  1: grad_scale[r] per row (reduction
 *                                         "none"); 0: grad_scale[0] for all
 *   offset 16  long long    ignore_index
 *   offset 24  const float *grad_scale    device; NULL means 1. "mean": the
 *                                         count kernel's upstream / valid rows
 *   offset 32  float       *z_out         z lse^2 per row (0 if ignored); NULL:
 *                                         not written
 *   offset 40  unsigned    *error         device word, OR-ed: bit 0 a label
 *                                         out of range, bit 1 eps != 0 in a
 *                                         build without T_CE_SMOOTH, bit 2 a
 *                                         cap without T_CE_SOFTCAP; NULL: not
 *                                         written
 *   offset 48  CeLabel     *argmax        per row (T_CE_ARGMAX, forward kernels);
 *                                         NULL: not written
 *   offset 56  float        softcap       cap > 0 (T_CE_SOFTCAP); 0: none
 *   offset 60  int          classes       V, the classes of a whole row; 0: cols.
 *                                         Above cols only in the backward, whose
 *                                         rows are then a slice of the whole rows:
 *   offset 64  long long    class_offset  the slice's first class (0: none).
 *                                         Labels index the whole row (a label
 *                                         outside [0, V) is bad); one outside
 *                                         the slice is another slice's target,
 *                                         so this one has no target term; the
 *                                         smoothing's eps / V takes the whole V.
 *                                         The linear cross-entropy's vocabulary
 *                                         blocks take the backward this way.
 *   offset 72  float       *lse_lo        per row, lse's low part (ce_lse_lo):
 *                                         the forward kernels write it, the
 *                                         backward reads it; NULL: neither
 *                                         (the backward takes lo = 0) */
struct CeParams {
    float scale;
    float smoothing;
    float z_loss;
    int grad_per_row;
    long long ignore_index;
    const float *grad_scale;
    float *z_out;
    unsigned *error;
    CeLabel *argmax;
    float softcap;
    int classes;
    long long class_offset;
    float *lse_lo;
};
static_assert(sizeof(CeParams) == 80 && alignof(CeParams) == 8, "CeParams layout changed");

#define CE_ERR_LABEL 1u
#define CE_ERR_SMOOTH 2u
#define CE_ERR_SOFTCAP 4u

/* The error bits of options asked of a build without them (smoothing,
 * the cap): the row's loss and gradient are then NaN. */
__device__ __forceinline__ unsigned ce_missing(const CeParams &prm)
{
    return (!T_CE_SMOOTH && prm.smoothing != 0.0f ? CE_ERR_SMOOTH : 0u) |
           (!T_CE_SOFTCAP && prm.softcap != 0.0f ? CE_ERR_SOFTCAP : 0u);
}

/* ---- capped: the tanh cap (T_CE_SOFTCAP) ---- */

struct CeCap {
    float cap, inv; /* cap and 1 / cap */
    float ex2_arg;  /* 2 log2(e) / cap: e^(2 |x| / cap) = 2^(|x| ex2_arg) */
};

__device__ __forceinline__ CeCap ce_cap_of(const CeParams &prm)
{
    CeCap k;
    k.cap = prm.softcap;
    k.inv = T_CE_SOFTCAP ? 1.0f / prm.softcap : 0.0f;
    k.ex2_arg = 2.0f * LOG2E * k.inv;
    return k;
}

/* c = cap tanh(x / cap), -inf kept (no mass leaks through the cap), with
 * tanh y = sign(y) (1 - 2 / (e^(2|y|) + 1)): one ex2.approx and one
 * approximate reciprocal (MUFU), where tanhf's polynomial and branches
 * cost about 25 instructions an element, twice an element in packed
 * registers (5.1 ms against the copy's 1.0 at 8192 x 128256 bf16 on the
 * H200). Its error is absolute, about 4e-7 in t (both steps within 2
 * ulp), 1e-5 in c at cap 30: the softmax moves with absolute errors of
 * its logits, so the loss moves by less than that over the loss (1e-6
 * relative), where tanh.approx.f32's 2^-11 relative error moved it 1e-4.
 * |y| above 44 makes e^(2|y|) inf and t exactly +-1 (x = +inf: c = cap);
 * NaN stays NaN. */
__device__ __forceinline__ float ce_cap(float x, const CeCap &k)
{
    float e;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(e) : "f"(fabsf(x) * k.ex2_arg));
    const float t = copysignf(1.0f - __fdividef(2.0f, e + 1.0f), x);
    return x == NEG_INF ? NEG_INF : k.cap * t;
}

/* d c / d x = 1 - (c / cap)^2, as (1 - t)(1 + t): no cancellation near
 * |t| = 1; 0 at c = -inf (t held at -1). */
__device__ __forceinline__ float ce_cap_slope(float c, const CeCap &k)
{
    const float t = fmaxf(c * k.inv, -1.0f);
    return (1.0f - t) * (1.0f + t);
}

/* capped: the fp32 values of a thread's row part replaced by their caps,
 * once, as loaded; packed registers keep x (ce_value caps at each use). */
__device__ __forceinline__ void ce_cap_row(Held &h, const CeCap &k)
{
#if T_CE_SOFTCAP && !T_REG_PACKED
#pragma unroll
    for (int it = 0; it < T_ITERS; it++)
#pragma unroll
        for (int k2 = 0; k2 < T_VEC; k2++)
            h.v[it][k2] = ce_cap(h.v[it][k2], k);
#else
    (void)h, (void)k;
#endif
}

/* Element k of vector it as the softmax sees it (before its scale): c
 * with the cap, x without. */
__device__ __forceinline__ float ce_value(const Held &h, int it, int k, const CeCap &cap)
{
#if T_CE_SOFTCAP && T_REG_PACKED
    return ce_cap(held_value(h, it, k), cap);
#else
    (void)cap;
    return held_value(h, it, k);
#endif
}

/* max: the thread's maximum of the values, the cap of its maximum x
 * where the registers hold x. */
__device__ __forceinline__ float ce_thread_max(const Held &h, const CeCap &cap)
{
#if T_CE_SOFTCAP && T_REG_PACKED
    return ce_cap(thread_max(h), cap);
#else
    (void)cap;
    return thread_max(h);
#endif
}

/* What a thread knows of its row's label: whether it is ignored or out of
 * range, and where the owner's slot of column y lies. */
struct CeRow {
    long long label;
    long long col;    /* the label's column in this row (its slice's); 0 without an owner */
    bool ignored, bad;
    bool owner;       /* this thread's slots hold column y: it loads x_y, stores g_y */
    bool writer;      /* this thread writes the row's loss, lse and z term */
    int own_it, own_k; /* the owner's vector pass and element */
    int own_warp;      /* the warp of the row's threads that holds the owner */
};

/* The row's label, loaded before the row: its latency then hides under
 * the row's loads. (Loaded after them, every block waited one more
 * memory latency before its reduction, for the branch on the owner:
 * measured on the H200 at 8192x128256 bf16, 1.29x the copy.) */
__device__ __forceinline__ long long ce_label(const CeLabel *labels, long long row, bool active,
                                              const CeParams &prm)
{
    return active ? (long long)__ldg(labels + row) : prm.ignore_index;
}

/* V, the classes of the whole rows (CeParams.classes; 0: this call's cols). */
__device__ __forceinline__ long long ce_classes(const CeParams &prm, int cols)
{
    return prm.classes > 0 ? prm.classes : cols;
}

/* target: the label's place among the row's slots (slot q = y + head is
 * element q % T_VEC of vector q / T_VEC, which is pass
 * (q / T_VEC) / ROW_THREADS of lane (q / T_VEC) % ROW_THREADS). */
__device__ __forceinline__ CeRow ce_row(long long label, bool active, int lane, int head,
                                        int cols, const CeParams &prm)
{
    CeRow r;
    r.label = label;
    r.ignored = r.label == prm.ignore_index;
    const long long classes = ce_classes(prm, cols);
    r.bad = !r.ignored && (r.label < 0 || r.label >= classes);
    /* a label in another slice of the row (the backward's class slices):
     * no owner, no target term here */
    const long long col = r.label - prm.class_offset;
    const bool valid = active && !r.ignored && !r.bad && col >= 0 && col < cols;
    r.col = valid ? col : 0;
    const long long q = r.col + head;
    const long long v = q / T_VEC;
    r.own_k = (int)(q % T_VEC);
    r.own_it = (int)(v / ROW_THREADS);
    r.own_warp = (int)(v % ROW_THREADS) / 32;
    r.owner = valid && lane == (int)(v % ROW_THREADS);
    r.writer = valid ? r.owner : (active && lane == 0);
    return r;
}

/* target: x_y, loaded by every thread of a counted row from the row at the
 * start (a plain load, not the variant's .nc: in place, the owner stores
 * this element later, and it, like every thread, loads it before its part
 * of the row's reduction, which every store waits for). Two bytes, one
 * sector a warp, from the line the owner's loads bring. Every thread
 * needs it: the row's sum is reduced without the target's term (see
 * ce_exp_and_sum) and each thread adds it back. (Selected out of
 * the held registers instead, the compare an element cost 16 to 34 more
 * registers: ptxas hoists them.) */
__device__ __forceinline__ float ce_target_logit(const RowPtrs &p, const CeRow &r, bool valid)
{
    /* Predicated, not branched: a branch waits for the label here, the
     * load's result is waited for only after the reduction. */
    const unsigned char *at = p.xr + (valid ? r.col : 0) * ESIZE;
    u32 bits = 0;
#if ESIZE == 2
    u16 b16 = 0;
    asm volatile("{ .reg .pred q; setp.ne.u32 q, %2, 0; @q ld.global.u16 %0, [%1]; }"
                 : "+h"(b16) : "l"(at), "r"((u32)valid) : "memory");
    bits = b16;
#else
    asm volatile("{ .reg .pred q; setp.ne.u32 q, %2, 0; @q ld.global.u32 %0, [%1]; }"
                 : "+r"(bits) : "l"(at), "r"((u32)valid) : "memory");
#endif
    return bits_to_float(bits);
}

/* The shift of a thread's exps: the row's maximum; under the fused
 * reduction a thread's own, 0 where all its values are -inf (its exps are
 * then 0, not NaN). */
__device__ __forceinline__ float ce_exp_shift(float max)
{
#if T_FUSED
    return max == NEG_INF ? 0.0f : max;
#else
    return max;
#endif
}

/* exp-and-sum without the target: the row's sum is reduced as S' = sum
 * over j != y of exp(s (x_j - max)), which holds no term near 1 when p_y
 * is near 1, so that S' keeps its relative precision (summed with the
 * target, a row's fp32 sum loses about 1e-7 per term added to it, and
 * -log p_y = log(1 + S' / e_y) of a p_y of 0.999 came out 0.8% off on the
 * H200). Each pass's exps are summed apart, then the owner's sum leaves
 * the target out, in one of two ways, each in the kernel where it
 * measured faster (H200, 8192 x 50257, docs/decisions.md):
 *   by pass  (the loss-only kernel) in the pass that holds the target
 *            (own_it, the same for all the row's threads), the warp that
 *            holds the owner (own_warp: no warp diverges) sums that pass
 *            again without element own_k, and the owner takes that sum:
 *            the loss kernel went from 1.19 to 1.02-1.03 of its floor
 *   again    (the fused kernel) the owner sums its whole part again, the
 *            target left out, one warp while the row's others wait at the
 *            reduction: the per-pass test cost the fused kernel, whose
 *            store is bound by issue, 0.015 of its floor, the rescan less
 * The values are kept as exps where the registers hold fp32 without a
 * cap; packed or capped registers keep x (the store takes the exps
 * again). */
#define CE_SUM_BY_PASS (T_CE_KIND == 1)

/* exp(s (x - shift)), the exps of the loss and the gradient: for 16-bit
 * logits exp_shifted's ex2 of (x - shift) s log2 e, whose product is
 * rounded at 2^-24 of itself (6e-7 relative in p at an exponent of -10),
 * hidden by the gradient's rounding to the dtype; for fp32 logits expf of
 * (x - shift) s (exact for s = 1 near the maximum), whose error is about
 * an ulp of p, as torch's fp32 softmax. */
__device__ __forceinline__ float ce_exp(float x, float shift, float ks, float scale)
{
#if T_DTYPE == 2
    (void)ks;
    return expf((x - shift) * scale);
#else
    (void)scale;
    return exp_shifted(x, shift, ks);
#endif
}

/* exp(s (c_jk - shift)) of element k of pass it: as kept, or again. */
__device__ __forceinline__ float ce_exp_again(const Held &h, int it, int k, float shift,
                                              float ks, float scale, const CeCap &cap)
{
#if T_REG_PACKED || T_CE_SOFTCAP
    return ce_exp(ce_value(h, it, k, cap), shift, ks, scale);
#else
    (void)shift, (void)ks, (void)scale, (void)cap;
    return h.v[it][k];
#endif
}

/* A thread's running sum of its exps. For fp32 logits compensated
 * (Kahan): a thread sums up to hundreds of exps one after another, whose
 * rounding, about sqrt(n) ulp of the sum, reached 5.6e-7 relative in
 * fp32 gradients (2.8x torch's, the H200, 64 x 32000 rows), where the
 * compensated sum keeps about an ulp whatever n; three more adds an
 * element. 16-bit logits' gradients round that away: a plain sum. */
struct CeSum {
    float s = 0.0f;
#if T_DTYPE == 2
    float c = 0.0f;
    __device__ __forceinline__ void add(float v)
    {
        const float y = v - c;
        const float t = s + y;
        c = (t - s) - y;
        s = t;
    }
#else
    __device__ __forceinline__ void add(float v) { s += v; }
#endif
};

__device__ __forceinline__ float ce_exp_and_sum(Held &h, const CeRow &r, int lane, float max,
                                                float ks, float scale, const CeCap &cap)
{
    const float shift = ce_exp_shift(max);
    const bool owner_warp = CE_SUM_BY_PASS && lane / 32 == r.own_warp;
    CeSum sum;
#pragma unroll
    for (int it = 0; it < T_ITERS; it++) {
        /* the fused kernel keeps one running sum, as the softmax does:
         * summed a pass at a time, it spilled registers */
        CeSum pass;
        CeSum &into = CE_SUM_BY_PASS ? pass : sum;
#pragma unroll
        for (int k = 0; k < T_VEC; k++) {
#if T_REG_PACKED || T_CE_SOFTCAP
            into.add(ce_exp(ce_value(h, it, k, cap), shift, ks, scale));
#else
            h.v[it][k] = ce_exp(h.v[it][k], shift, ks, scale);
            into.add(h.v[it][k]);
#endif
        }
        if (!CE_SUM_BY_PASS)
            continue;
        if (owner_warp && it == r.own_it) {
            float without = 0.0f;
#pragma unroll
            for (int k = 0; k < T_VEC; k++) {
                const float e = ce_exp_again(h, it, k, shift, ks, scale, cap);
                without += k == r.own_k ? 0.0f : e;
            }
            if (r.owner) {
                pass = CeSum();
                pass.add(without);
            }
        }
        sum.add(pass.s);
    }
    if (!CE_SUM_BY_PASS && r.owner) {
        sum = CeSum();
#pragma unroll
        for (int it = 0; it < T_ITERS; it++)
#pragma unroll
            for (int k = 0; k < T_VEC; k++) {
                const float e = ce_exp_again(h, it, k, shift, ks, scale, cap);
                sum.add(it == r.own_it && k == r.own_k ? 0.0f : e);
            }
    }
    return sum.s;
}

/* The row's sum with the target's term added back, and that term, e_y =
 * exp(s (x_y - max)): 0 for a row with no counted label. */
struct CeSums {
    float all;    /* S = S' + e_y: the softmax's denominator */
    float others; /* S' */
    float e_y;
};

__device__ __forceinline__ CeSums ce_sums(const CeRow &r, float others, float x_y, float row_max,
                                          float ks, float scale, bool active)
{
    CeSums c;
    const bool counted = active && !r.ignored && !r.bad;
    c.e_y = counted ? ce_exp(x_y, row_max, ks, scale) : 0.0f;
    c.others = others;
    c.all = others + c.e_y;
    return c;
}

/* mean: the thread's sum of its x (c) inside the row (the slots past its
 * ends hold -inf: left out). */
__device__ __forceinline__ float thread_sum_x(const Held &h, int lane, int head, int cols,
                                              bool active, const CeCap &cap)
{
    float sum = 0.0f;
#pragma unroll
    for (int it = 0; it < T_ITERS; it++) {
        const int first = (it * ROW_THREADS + lane) * T_VEC - head;
#pragma unroll
        for (int k = 0; k < T_VEC; k++) {
            const int c = first + k;
            if (PASS_INSIDE(it) || (c >= 0 && c < cols))
                sum += ce_value(h, it, k, cap);
        }
    }
    return active ? sum : 0.0f;
}

/* ---- argmax (T_CE_ARGMAX) ---- */

#define CE_ARG_NAN 16777216.0f /* 2^24: a NaN's key is its column minus this */

struct CeMinOp {
    __device__ __forceinline__ float operator()(float a, float b) const { return fminf(a, b); }
};

/* argmax: the thread's key, before its exps replace the values: its first
 * NaN's column - 2^24, else the lowest column inside the row holding own
 * (its maximum), else +inf. */
__device__ __forceinline__ float ce_thread_argkey(const Held &h, float own, int lane, int head,
                                                  int cols, bool active, const CeCap &cap)
{
    int first_nan = 0x7fffffff, first_max = 0x7fffffff;
#pragma unroll
    for (int it = T_ITERS - 1; it >= 0; it--) {
        const int first = (it * ROW_THREADS + lane) * T_VEC - head;
#pragma unroll
        for (int k = T_VEC - 1; k >= 0; k--) {
            const int c = first + k;
            if (PASS_INSIDE(it) || (c >= 0 && c < cols)) {
                const float v = ce_value(h, it, k, cap);
                first_nan = v != v ? c : first_nan;
                first_max = v == own ? c : first_max;
            }
        }
    }
    if (!active)
        return __int_as_float(0x7f800000);
    return first_nan != 0x7fffffff ? (float)first_nan - CE_ARG_NAN
           : first_max != 0x7fffffff ? (float)first_max
                                     : __int_as_float(0x7f800000);
}

/* argmax: the row's, from the row's keys: a NaN's column, else the
 * lowest column of the maximum. */
__device__ __forceinline__ long long ce_argmax_of(float key)
{
    return key < 0.0f ? (long long)(key + CE_ARG_NAN) : (long long)key;
}

/* The row's gradient factors: g_j = gs (p_j zf - target_j), target_j =
 * on at j == y plus off everywhere; ignored rows store 0, bad rows NaN. */
struct CeGrad {
    float gs;  /* gscale_r s; NaN for a bad label */
    float zf;  /* 1 + 2 z lse */
    float on;  /* 1 - eps */
    float off; /* eps / V */
    float on_off; /* 1 - eps + eps / V, at j == y */
    bool zero; /* ignored row: exact zeros */
};

/* gscale_r: from device memory (the count kernel's, the upstream's, or per
 * row), 1 where the pointer is NULL. */
__device__ __forceinline__ float ce_gscale(const CeParams &prm, long long row, bool active)
{
    if (prm.grad_scale == NULL || !active)
        return 1.0f;
    return prm.grad_per_row ? prm.grad_scale[row] : prm.grad_scale[0];
}

/* lse is asked for (lse_of()) only with a z-loss, and eps / V only with
 * T_CE_SMOOTH: a row's log and division are as many instructions as a
 * dozen elements' gradients (the fused kernel at 8192 x 50256 issued 49%
 * more instructions than the softmax at its config before: the store is
 * issue-bound; docs/decisions.md). */
template <typename Lse>
__device__ __forceinline__ CeGrad ce_grad(const CeRow &r, float gscale, Lse lse_of, int cols,
                                          const CeParams &prm)
{
    CeGrad g;
    const float nan = __int_as_float(0x7fc00000);
    const float eps = T_CE_SMOOTH ? prm.smoothing : 0.0f;
    g.gs = r.bad || ce_missing(prm) != 0u ? nan : gscale * prm.scale;
    g.zf = 1.0f;
    if (prm.z_loss != 0.0f)
        g.zf = fmaf(2.0f * prm.z_loss, lse_of(), 1.0f);
    g.on = 1.0f - eps;
    g.off = T_CE_SMOOTH ? eps / (float)ce_classes(prm, cols) : 0.0f;
    g.on_off = g.on + g.off;
    g.zero = r.ignored;
    return g;
}

/* load: the rows family's load_row (softmax_rows_common.cu) as these
 * kernels need it (no stash; one input, so its vectors line up with the
 * slots), with a pass whole inside the row whatever its head (PASS_WHOLE,
 * known when the source is made) loaded with no bounds test, as
 * ce_store_passes stores it. Measured on rows that start off a vector
 * boundary (H200, 8192x50257 bf16, the same call): the fused kernel from
 * 1.046 to 1.036 of a copy, the loss and backward kernels unchanged
 * (docs/decisions.md). The softmax kinds keep load_row_words, which their
 * shipped records were tuned with; the passes that are not whole take its
 * rules unchanged (a vector wholly outside the row filled at once for
 * 16-bit types, element by element for fp32).
 * Each vector is addressed from the row's vector boundary by its index,
 * as load_row_words does: a lane pointer plus a constant a pass (the
 * store's form) held one more 64-bit pointer through the row and made
 * ptxas spill 16-28 bytes in the fused kernel at w8.c4.m4 (8192x50257). */
__device__ __forceinline__ void ce_load_row(Held &h, const RowPtrs &p, int lane, int cols,
                                            bool active)
{
#if T_HEAD_FREE
    load_row(h, p, lane, cols, active);
#else
    RowWords scratch;
    RowWords &w = words_of(h, scratch);
    const unsigned char *const xv = p.xr - p.head * ESIZE; /* the row's vector boundary */
#pragma unroll
    for (int it = 0; it < T_ITERS; it++) {
        const int first = (it * ROW_THREADS + lane) * T_VEC - p.head;
        if (active && (PASS_WHOLE(it) || VEC_IN_ROW(it, first, cols))) {
            /* whole, also at the row's ends: finish_row fills those */
            load_vec(xv + (long long)(it * ROW_THREADS + lane) * VBYTES, w[it]);
        } else if (FILL_OUTSIDE) {
            fill_vec(w[it]);
        } else {
#pragma unroll
            for (int k = 0; k < NWORDS; k++)
                w[it][k] = 0;
#pragma unroll
            for (int k = 0; k < T_VEC; k++) {
                const int c = first + k;
                word_set(w[it], k, (active && c >= 0 && c < cols)
                                       ? load_elem(p.xr + (long long)c * ESIZE)
                                       : FILL_BITS);
            }
        }
    }
    finish_row(h, w, p.head, true, lane, cols, active);
#endif
}

/* store: the rows family's store_row (softmax_rows_common.cu) as these
 * kernels need it (no stash, replicas or planted bug), reworked for rows
 * that start off a vector boundary, where the gradient's store is bound
 * by issue (ncu at 8192x50257 bf16: 14% more instructions than at 50264,
 * in the store's element path and its per-pass tests): a vector wholly
 * outside the row is skipped before the element path; whether y lines up
 * with x is tested once a row, each answer its own loop, so a pass whole
 * inside the row whatever its head (PASS_WHOLE) stores with no test; and
 * whole vectors are addressed from the row's vector boundary, as the loads
 * address x, so the pass's offset is a constant in the store. Measured:
 * the fused kernel at 8192x50257 from 1.061 to 1.045 of a copy, and with
 * ce_load_row to 1.036 (docs/decisions.md). The softmax kinds keep store_row:
 * their stores measured within 1% of a copy on such rows, and their code
 * is what their shipped records were tuned with. */
template <bool Y_ALIGNED, typename Words>
__device__ __forceinline__ void ce_store_passes(const RowPtrs &p, int lane, int cols,
                                                Words words)
{
    /* this lane's first whole vector, from the row's vector boundary */
    unsigned char *const yl = p.yr - p.head * ESIZE + (long long)lane * VBYTES;
#pragma unroll
    for (int it = 0; it < T_ITERS; it++) {
        const int first = (it * ROW_THREADS + lane) * T_VEC - p.head;
#if T_HEAD_FREE
        (void)cols;
        if (!PASS_INSIDE(it) && first >= T_COLS)
            continue;
        const bool whole = true;
#else
        if (!PASS_WHOLE(it) && (first >= cols || first + T_VEC <= 0))
            continue;
        const bool whole = Y_ALIGNED && (PASS_WHOLE(it) || (first >= 0 && first + T_VEC <= cols));
#endif
        u32 out[NWORDS] = {};
        words(it, out);
        if (whole) {
            store_vec(yl + (long long)it * ROW_THREADS * VBYTES, out);
        } else {
#pragma unroll
            for (int k = 0; k < T_VEC; k++)
                if (first + k >= 0 && first + k < cols)
                    store_elem(p.yr + (long long)(first + k) * ESIZE, word_elem(out, k));
        }
    }
}

template <typename Words>
__device__ __forceinline__ void ce_store_row(const RowPtrs &p, int lane, int cols, bool active,
                                             Words words)
{
    if (!active)
        return;
#if T_HEAD_FREE
    ce_store_passes<true>(p, lane, cols, words);
#else
    if (p.y_aligned)
        ce_store_passes<true>(p, lane, cols, words);
    else
        ce_store_passes<false>(p, lane, cols, words);
#endif
}

/* store: gradient vector it from p_j = prob(k), every element with the
 * target eps / V; the label's element is stored again after the row by
 * ce_store_target. (Measured with ptxas at w8.c8 bf16 128256: a compare
 * with the label an element, however cheap, had its results hoisted above
 * the reduction and held in registers, 142 to 167 where the softmax takes
 * 90 and this takes 108; a branch on the owner's pass put the row in local
 * memory.) */
template <typename Prob>
__device__ __forceinline__ void ce_grad_words(u32 (&out)[NWORDS], const CeGrad &g, Prob prob)
{
    vector_words(out, [&](int k) {
        const float v = g.gs * fmaf(prob(k), g.zf, -g.off);
        return g.zero ? 0.0f : v;
    });
}

/* store, fused: element j's gradient gs (p_j zf - off) as e_j (mul gs zf)
 * - gs off, with p_j = e_j mul the softmax's (forward_value at out's
 * factor mul gs zf): one multiply an element, as the softmax's store, where
 * ce_grad_words takes three more instructions (fma, multiply, the ignored
 * row's select); without T_CE_SMOOTH off is 0 and not added. An ignored
 * row (the same for every thread of it) stores zeros instead. */
__device__ __forceinline__ void ce_store_grad_row(const RowPtrs &p, int lane, int cols,
                                                  bool active, const Held &h, const RowOut &o,
                                                  const CeGrad &g)
{
    if (g.zero) {
        ce_store_row(p, lane, cols, active, [&](int, u32(&out)[NWORDS]) {
            vector_words(out, [&](int) { return 0.0f; });
        });
        return;
    }
    RowOut og = o;
    og.mul = o.mul * (g.gs * g.zf);
    const float add = -g.gs * g.off;
    (void)add;
    ce_store_row(p, lane, cols, active, [&](int it, u32(&out)[NWORDS]) {
        vector_words(out, [&](int k) {
            const float v = forward_value(h, it, k, og);
            return T_CE_SMOOTH ? v + add : v;
        });
    });
}

/* capped store: element j's gradient from p_j and d c_j / d x_j. */
__device__ __forceinline__ float ce_grad_capped(const CeGrad &g, float p, float slope)
{
    const float v = g.gs * (fmaf(p, g.zf, -g.off) * slope);
    return g.zero ? 0.0f : v;
}

/* store, the label's element: the owner stores it again, after its own
 * vector store of the same element (same thread, program order: the later
 * store wins), with the target 1 - eps + eps / V; p_y from x_y, which the
 * owner took before the reduction. Two more bytes a row. */
__device__ __forceinline__ void ce_store_target(const RowPtrs &p, const CeRow &r, const CeGrad &g,
                                                float p_y, float slope)
{
    if (r.owner)
        store_elem(p.yr + r.col * ESIZE,
                   float_to_bits(g.gs * (fmaf(p_y, g.zf, -g.on_off) * slope)));
}

/* The same from the row's sums: p_y - 1 formed as -S' / S, not p_y - 1
 * in fp32 (which keeps only the bits of p_y below 1: a bf16 p_y of 0.999
 * lost a third of them), then p_y (zf - 1) + eps - eps / V added. */
__device__ __forceinline__ void ce_store_target_sums(const RowPtrs &p, const CeRow &r,
                                                     const CeGrad &g, const CeSums &c, float slope)
{
    if (!r.owner)
        return;
    const float inv = __frcp_rn(c.all);
    const float p_y = c.e_y * inv;
    const float pm1 = -c.others * inv;
    /* eps - eps / V = (1 - on) - off */
    const float v = pm1 + fmaf(p_y, g.zf - 1.0f, (1.0f - g.on) - g.off);
    store_elem(p.yr + r.col * ESIZE, float_to_bits(g.gs * (T_CE_SOFTCAP ? v * slope : v)));
}

/* lse = s max + log sum; a row of only -inf has lse -inf (log 0, as
 * torch.logsumexp), whatever the sum's 0 * NaN came to. */
__device__ __forceinline__ float ce_lse(float row_max, float sum, float scale)
{
    return row_max == NEG_INF ? NEG_INF : fmaf(scale, row_max, logf(sum));
}

/* lse's low part: lo = (s max + log_sum) - lse, exact but for log_sum's
 * own rounding (the two-sum of s max, itself split in two, and log_sum;
 * lse is ce_lse's fma, within half an ulp of that sum, so h - lse is
 * exact). The products and sums are the _rn intrinsics so that no fma is
 * contracted into them. 0 where lse is not finite. */
__device__ __forceinline__ float ce_lse_lo(float row_max, float log_sum, float scale, float lse)
{
    if (!(fabsf(lse) <= 3.4e38f))
        return 0.0f;
    const float a = __fmul_rn(scale, row_max);
    const float a_err = fmaf(scale, row_max, -a);
    const float h = __fadd_rn(a, log_sum);
    const float b = __fsub_rn(h, a);
    const float h_err = __fadd_rn(__fsub_rn(a, __fsub_rn(h, b)), __fsub_rn(log_sum, b));
    return __fadd_rn(__fsub_rn(h, lse), __fadd_rn(h_err, a_err));
}

/* The row's outputs, by the writer. nll and the smoothing term are taken
 * as s (max - x) + log sum, not lse - s x: both terms are >= 0, so no
 * cancellation of large logits (rows around 1e10); where p_y >= 1/2, nll
 * is log1p(S' / e_y), precise to the last bits however near 1 p_y is. */
__device__ __forceinline__ void ce_write_row(const CeRow &r, long long row, float row_max,
                                             const CeSums &c, float x_y, float mean_x,
                                             float *loss, float *lse_out, const CeParams &prm)
{
    if (!r.writer)
        return;
    const float nan = __int_as_float(0x7fc00000);
    const float sum = c.all;
    const float log_sum = logf(sum);
    const float lse = ce_lse(row_max, sum, prm.scale);
    const unsigned missing = ce_missing(prm);
    float l, zterm = prm.z_loss * lse * lse;
    if (r.ignored) {
        l = 0.0f;
        zterm = 0.0f;
    } else if (r.bad || missing != 0u) {
        l = nan;
    } else {
        l = c.e_y >= 0.5f * sum ? log1pf(c.others / c.e_y)
                                : fmaf(prm.scale, row_max - x_y, log_sum);
        if (T_CE_SMOOTH && prm.smoothing != 0.0f) {
            const float smooth = fmaf(prm.scale, row_max - mean_x, log_sum);
            l = (1.0f - prm.smoothing) * l + prm.smoothing * smooth;
        }
        if (prm.z_loss != 0.0f)
            l += zterm;
    }
    if (loss != NULL)
        loss[row] = l;
    if (lse_out != NULL)
        lse_out[row] = lse;
    if (prm.lse_lo != NULL)
        prm.lse_lo[row] = ce_lse_lo(row_max, log_sum, prm.scale, lse);
    if (prm.z_out != NULL)
        prm.z_out[row] = zterm;
    if (prm.error != NULL && (r.bad || missing != 0u))
        atomicOr(prm.error, (r.bad ? CE_ERR_LABEL : 0u) | missing);
}

#if T_CE_KIND != 2
/* Fused loss + gradient (T_CE_KIND 0), or loss only (1: grad unused, may
 * be NULL). loss, lse: fp32 per row, either may be NULL. grad may equal
 * logits. One cluster (T_CLUSTER > 1), else one block, per T_ROWS rows:
 * the launch has exactly rows / T_ROWS (rounded up) of them. */
extern "C" __global__ void __launch_bounds__(T_WARPS * 32, T_MIN_BLOCKS) CLUSTER_ATTRIBUTE
tuned_cross_entropy_rows(const unsigned char *logits, const CeLabel *labels, unsigned char *grad,
                         float *loss, float *lse, long long rows, int cols, long long row_stride,
                         const CeParams prm)
{
    __shared__ float partial_max[T_WARPS];
    __shared__ float partial_sum[T_WARPS];
    __shared__ Mailbox box_max, box_sum;
    __shared__ PairMailbox box_pairs;
#if T_CE_SMOOTH
    __shared__ float partial_x[T_WARPS];
    __shared__ Mailbox box_x;
#endif
#if T_CE_ARGMAX
    __shared__ float partial_arg[T_WARPS];
    __shared__ Mailbox box_arg;
#endif

#if T_CLUSTER > 1
    /* open_mailboxes, with the smoothing and argmax rounds' mailboxes set
     * up before the cluster is told they are ready. */
    if (T_FUSED) {
        pair_mailbox_init(box_pairs);
    } else {
        mailbox_init(box_max, 1);
        mailbox_init(box_sum, 1);
    }
#if T_CE_SMOOTH
    mailbox_init(box_x, 1);
#endif
#if T_CE_ARGMAX
    mailbox_init(box_arg, 1);
#endif
    mailboxes_ready();
#endif
    const RowSlot slot = row_slot();
    const bool active = T_ROWS == 1 || slot.row < rows;
    const RowPtrs p = row_ptrs(logits, T_CE_KIND == 0 ? grad : (unsigned char *)logits,
                               slot.row, active, row_stride);
    const float ks = prm.scale * LOG2E;
    const CeCap cap = ce_cap_of(prm);

    const long long label = ce_label(labels, slot.row, active, prm);
    const float gscale = T_CE_KIND == 0 ? ce_gscale(prm, slot.row, active) : 1.0f;
    Held h;
    ce_load_row(h, p, slot.lane, cols, active);
    ce_cap_row(h, cap);
    const CeRow r = ce_row(label, active, slot.lane, p.head, cols, prm);
    float x_y = ce_target_logit(p, r, active && !r.ignored && !r.bad);
    if (T_CE_SOFTCAP)
        x_y = ce_cap(x_y, cap);
    /* the smoothing's sum before the exps replace x */
    float sum_x = T_CE_SMOOTH ? thread_sum_x(h, slot.lane, p.head, cols, active, cap) : 0.0f;

    const float own = ce_thread_max(h, cap);
    /* argmax: the thread's key before the exps replace the values */
    float arg_key = T_CE_ARGMAX ? ce_thread_argkey(h, own, slot.lane, p.head, cols, active, cap)
                                : 0.0f;
    const float max = reduce_max(own, partial_max, box_max);
    float sum = ce_exp_and_sum(h, r, slot.lane, max, ks, prm.scale, cap);
    float row_max = max;
    reduce_row(row_max, sum, partial_max, partial_sum, box_sum, box_pairs, ks);
#if T_CE_SMOOTH
    sum_x = row_reduce(sum_x, partial_x, box_x, false, SumOp());
#endif
#if T_CE_ARGMAX
    /* a thread whose maximum is not the row's offers no column (a NaN's
     * key stays: it wins) */
    if (!(arg_key < 0.0f) && own != row_max)
        arg_key = __int_as_float(0x7f800000);
    arg_key = row_reduce(arg_key, partial_arg, box_arg, false, CeMinOp());
    if (r.writer && prm.argmax != NULL)
        prm.argmax[slot.row] = (CeLabel)ce_argmax_of(arg_key);
#else
    (void)arg_key;
#endif
    const CeSums c = ce_sums(r, sum, x_y, row_max, ks, prm.scale, active);
    ce_write_row(r, slot.row, row_max, c, x_y, sum_x / (float)cols, loss, lse, prm);

#if T_CE_KIND == 0
    const CeGrad g =
        ce_grad(r, gscale, [&] { return ce_lse(row_max, c.all, prm.scale); }, cols, prm);
#if T_CE_SOFTCAP
    /* capped: exp(s (c - max)) / S again, chained through the cap */
    const float inv_sum = __frcp_rn(c.all);
    ce_store_row(p, slot.lane, cols, active, [&](int it, u32(&out)[NWORDS]) {
        vector_words(out, [&](int k) {
            const float cv = ce_value(h, it, k, cap);
            return ce_grad_capped(g, ce_exp(cv, row_max, ks, prm.scale) * inv_sum,
                                  ce_cap_slope(cv, cap));
        });
    });
#else
    /* exps of a thread's own shift (T_FUSED) take the row's through
     * row_out, whose sum is the whole S */
    ce_store_grad_row(p, slot.lane, cols, active, h, row_out(max, row_max, c.all, prm.scale, ks),
                      g);
#endif
    ce_store_target_sums(p, r, g, c, T_CE_SOFTCAP ? ce_cap_slope(x_y, cap) : 1.0f);
#else
    (void)grad, (void)gscale;
#endif
}
#endif

#if T_CE_KIND == 2
/* p = exp((s x - lse) - lo), s x - lse one fma (rounded once), lo the
 * lse's low part (0 when the forward wrote none), and at most 1: p is a
 * probability, and a saved fp32 lse can sit below one of its row's logits
 * where the row is huge (an lse near 7e9 is rounded by up to 256, so
 * s x - lse reached +256 and p overflowed to inf on the H200, the planted
 * row of 1e10 logits in fp32). The argument is clamped at 0 by a compare,
 * not fminf, so that a NaN stays NaN. fp32 logits take expf (its error
 * about an ulp of p), the others ex2 of the argument times log2 e (whose
 * rounding, 2^-24 |arg| in p, the dtype's rounding hides). */
__device__ __forceinline__ float ce_prob(float x, float lse, float lo, float scale)
{
    float a = fmaf(x, scale, -lse) - lo;
    a = a > 0.0f ? 0.0f : a;
#if T_DTYPE == 2
    return expf(a);
#else
    float e;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(e) : "f"(a * LOG2E));
    return e;
#endif
}

/* The split backward: grad = gscale_r s (exp(s x - lse_r)(1 + 2 z lse_r)
 * - (1 - eps)[j == y] - eps / V) from the saved fp32 lse (the forward's),
 * for any upstream gradient (prm.grad_scale: the count kernel's for
 * "mean", the upstream scalar for "sum", per row for "none"). No
 * reduction: the row's threads (clusters included) each load their part,
 * then store it. exp's argument is one fma, s x - lse rounded once. */
extern "C" __global__ void __launch_bounds__(T_WARPS * 32, T_MIN_BLOCKS) CLUSTER_ATTRIBUTE
tuned_cross_entropy_bwd(const unsigned char *logits, const CeLabel *labels, const float *lse,
                        unsigned char *grad, long long rows, int cols, long long row_stride,
                        const CeParams prm)
{
    const RowSlot slot = row_slot();
    const bool active = T_ROWS == 1 || slot.row < rows;
    const RowPtrs p = row_ptrs(logits, grad, slot.row, active, row_stride);
    const CeCap cap = ce_cap_of(prm);
    const long long label = ce_label(labels, slot.row, active, prm);
    const float lse_r = active ? __ldg(lse + slot.row) : 0.0f;
    const float lo_r = active && prm.lse_lo != NULL ? __ldg(prm.lse_lo + slot.row) : 0.0f;
    const float gscale = ce_gscale(prm, slot.row, active);
    Held h;
    ce_load_row(h, p, slot.lane, cols, active);
    ce_cap_row(h, cap);
    const CeRow r = ce_row(label, active, slot.lane, p.head, cols, prm);
    const CeGrad g = ce_grad(r, gscale, [&] { return lse_r; }, cols, prm);
    const unsigned missing = ce_missing(prm);
    if (prm.error != NULL && r.writer && (r.bad || missing != 0u))
        atomicOr(prm.error, (r.bad ? CE_ERR_LABEL : 0u) | missing);
    /* only the owner stores the label's element: no reduction to feed */
    float x_y = ce_target_logit(p, r, r.owner);
#if T_CE_SOFTCAP
    x_y = ce_cap(x_y, cap);
    ce_store_row(p, slot.lane, cols, active, [&](int it, u32(&out)[NWORDS]) {
        vector_words(out, [&](int k) {
            const float cv = ce_value(h, it, k, cap);
            return ce_grad_capped(g, ce_prob(cv, lse_r, lo_r, prm.scale), ce_cap_slope(cv, cap));
        });
    });
    ce_store_target(p, r, g, ce_prob(x_y, lse_r, lo_r, prm.scale), ce_cap_slope(x_y, cap));
#else
    ce_store_row(p, slot.lane, cols, active, [&](int it, u32(&out)[NWORDS]) {
        ce_grad_words(out, g, [&](int k) {
            return ce_prob(held_value(h, it, k), lse_r, lo_r, prm.scale);
        });
    });
    ce_store_target(p, r, g, ce_prob(x_y, lse_r, lo_r, prm.scale), 1.0f);
#endif
}
#endif

/* The sum of every thread's v over one block of CE_BLOCK_THREADS (the
 * launch's block, api_ce.c's CE_HELPER_BLOCK: every warp's sum is read), in a
 * fixed order (a butterfly in each warp, then the warps' sums in turn), so
 * that every call gives the same bits: in thread 0 only. */
#define CE_BLOCK_THREADS 1024
template <typename T>
__device__ T ce_block_sum(T v)
{
    __shared__ T warp_sums[CE_BLOCK_THREADS / 32];
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2)
        v += __shfl_xor_sync(0xFFFFFFFFu, v, offset);
    if (threadIdx.x % 32 == 0)
        warp_sums[threadIdx.x / 32] = v;
    __syncthreads();
    T all = 0;
    if (threadIdx.x == 0)
        for (int w = 0; w < CE_BLOCK_THREADS / 32; w++)
            all += warp_sums[w];
    return all;
}

/* The valid (non-ignored) rows, counted by one block of CE_BLOCK_THREADS
 * before the loss kernels on the same stream, and gscale = upstream /
 * count (upstream NULL means 1) for reduction "mean": the loss kernels
 * read it from device memory, so nothing waits on the host. valid may be
 * NULL. With no valid row gscale is inf or NaN, which only ignored rows
 * (exact zeros) and the reduced loss (0 * inf: NaN, as torch's mean) see. */
extern "C" __global__ void __launch_bounds__(CE_BLOCK_THREADS)
tuned_cross_entropy_count(const CeLabel *labels, long long rows, long long ignore_index,
                          const float *upstream, float *grad_scale, long long *valid)
{
    long long n = 0;
    for (long long i = threadIdx.x; i < rows; i += CE_BLOCK_THREADS)
        n += (long long)labels[i] != ignore_index;
    const long long total = ce_block_sum(n);
    if (threadIdx.x == 0) {
        if (grad_scale != NULL)
            grad_scale[0] = (upstream != NULL ? upstream[0] : 1.0f) / (float)total;
        if (valid != NULL)
            valid[0] = total;
    }
}
