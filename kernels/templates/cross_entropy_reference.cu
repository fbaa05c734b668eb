/* cross_entropy_reference.cu: the float64 check of the cross-entropy
 * kernels (cross_entropy.cu): per row its lse, its loss and every element
 * of its gradient, recomputed in double precision from the same logits,
 * labels and options, and compared with what a variant wrote.
 *
 * Idea: one block per row (rows strided over the grid), as reference.cu's
 * tuned_check: max of s x (fmax, NaN ignored), sum of exp(s x - max), so
 * lse = max + log sum, and sum of s x for label smoothing; then
 *   loss = (1 - eps)(lse - s x_y) + eps (lse - mean s x) + z lse^2
 *   grad = gscale_r s (p (1 + 2 z lse) - (1 - eps)[j == y] - eps / V)
 * with ignored rows 0 and 0, and a label outside [0, V) (not ignored) NaN
 * and NaN, never an index. Tolerances follow reference.cu: each value
 * passes when |got - ref| <= atol + rtol |ref| + slack (agrees(): NaN only
 * for NaN, an infinity only for the same one), rtol and atol the dtype's
 * rounding (the caller's), slack the fp32 arithmetic of the kernel:
 * CE_EPS times the magnitudes that enter the value (for the gradient,
 * |gscale s| (p |1 + 2 z lse| + the target), for the loss its terms,
 * fp32 sums of up to 262144 values included), plus CE_TINY |gscale s| for
 * exps that ex2.approx.ftz flushes to 0. Failures are counted in
 * bad[0] (gradient elements), bad[1] (loss rows), bad[2] (lse rows), the
 * lowest failing index of each in first_bad[i] (row * cols + col for the
 * gradient, the row for the others). grad, loss or lse NULL: not checked.
 * lse_in, when not NULL, is the backward's saved input: the gradient's
 * reference is then formed from it (as the kernel must), not from the
 * float64 lse, whose fp32 rounding differs by far more than the dtype's
 * rounding on rows of huge logits.
 * row_ref, if not NULL, receives each row's float64 (loss, lse), for the
 * harness's check of this reference against torch.
 * softcap, when not 0, caps every logit first, c = cap tanh(x / cap) (-inf
 * kept), as the kernels' T_CE_SOFTCAP: the formulas take s c for s x, and
 * the gradient is times 1 - tanh(x / cap)^2 (0 at -inf), with slack for
 * the kernel's fp32 tanh (CE_CAP_EPS of cap, a few ulps). argmax, when not
 * NULL, is checked (bad[3]): the row's first NaN's column where it has
 * one, else a column whose s c is within CE_ARG_TOL of the row's largest
 * (the kernel compares fp32 caps: values a float64 tanh tells apart may
 * tie there) and no later than the float64 first column of the largest.
 *
 * Variants (codegen prepends the defines, then softmax_common.cu and
 * reference.cu, whose bits_to_double, load_bits, block_reduce, agrees and
 * report it uses):
 *   1. T_DTYPE       0 fp16, 1 bf16, 2 fp32
 *   2. T_CE_LABEL32  1: int32 labels; absent or 0: int64
 *
 * Checked against: bench/cross_entropy_kernel.py compares row_ref with a
 * float64 torch reference (itself compared with F.cross_entropy), and
 * proves the check fails on a corrupted gradient and loss. */

#ifndef T_CE_LABEL32
#define T_CE_LABEL32 0
#endif
#if T_CE_LABEL32
typedef int CeRefLabel;
#else
typedef long long CeRefLabel;
#endif

/* The kernels' fp32 arithmetic, relative to the magnitudes that enter a
 * value: exp2.approx (2 ulp), the sum over the row in fp32 (each thread's
 * part in order, then a tree), log and the final multiplies. */
#define CE_EPS 2e-5
/* ex2.approx.ftz flushes results below 2^-126 to 0. */
#define CE_TINY 1e-37
/* The kernel's cap in fp32 (x / cap as a product, tanhf's 2 ulp, the
 * multiply by cap): relative to cap, the error of c; and of 1 - t^2. */
#define CE_CAP_EPS 6e-7
/* argmax: how far below the row's largest s c a chosen column may be. */
#define CE_ARG_TOL 1e-6

__device__ __forceinline__ double ce_x(const unsigned char *xr, int c)
{
    return bits_to_double(load_bits(xr + (long long)c * ESIZE));
}

/* The logit as the softmax sees it (before the scale): capped when cap is
 * not 0, -inf kept. */
__device__ __forceinline__ double ce_c(const unsigned char *xr, int c, double cap)
{
    const double x = ce_x(xr, c);
    return cap == 0.0 || x == (double)NEG_INF ? x : cap * tanh(x / cap);
}

/* d c / d x: 1 without a cap, 1 - tanh^2 with (0 at -inf). */
__device__ __forceinline__ double ce_slope(const unsigned char *xr, int c, double cap)
{
    if (cap == 0.0)
        return 1.0;
    const double x = ce_x(xr, c);
    if (x == (double)NEG_INF)
        return 0.0;
    const double t = tanh(x / cap);
    return 1.0 - t * t;
}

/* What the check counts: gradient elements, loss rows, lse rows, argmax
 * rows. */
#define CE_CHECKS 4

extern "C" __global__ void __launch_bounds__(CHECK_THREADS)
tuned_ce_check(const unsigned char *x, const CeRefLabel *labels, const unsigned char *grad,
               const float *loss, const float *lse, long long rows, int cols,
               long long row_stride, double scale, double eps, double z,
               long long ignore_index, const float *grad_scale, int grad_per_row, double rtol,
               double atol, u64 *bad, u64 *first_bad, double *row_ref, const float *lse_in,
               double softcap, const CeRefLabel *argmax)
{
    __shared__ double scratch[CHECK_THREADS / 32];
    const double nan = __longlong_as_double(0x7ff8000000000000ll);
    for (long long row = blockIdx.x; row < rows; row += gridDim.x) {
        const unsigned char *xr = x + row * row_stride * ESIZE;
        const long long label = (long long)labels[row];
        const bool ignored = label == ignore_index;
        const bool bad_label = !ignored && (label < 0 || label >= cols);
        double m = (double)NEG_INF;
        for (int c = threadIdx.x; c < cols; c += CHECK_THREADS)
            m = fmax(m, scale * ce_c(xr, c, softcap));
        m = block_reduce<true>(m, scratch);
        /* argmax: the first NaN's column, the first column of the largest
         * (as -(column): block_reduce takes maxima) */
        double nan_at = -(double)cols, max_at = -(double)cols;
        for (int c = threadIdx.x; argmax != NULL && c < cols; c += CHECK_THREADS) {
            const double v = scale * ce_c(xr, c, softcap);
            if (v != v)
                nan_at = fmax(nan_at, -(double)c);
            if (v == m)
                max_at = fmax(max_at, -(double)c);
        }
        if (argmax != NULL) {
            nan_at = -block_reduce<true>(nan_at, scratch);
            max_at = -block_reduce<true>(max_at, scratch);
        }
        double s = 0.0, sx = 0.0, sabs = 0.0;
        for (int c = threadIdx.x; c < cols; c += CHECK_THREADS) {
            const double v = scale * ce_c(xr, c, softcap);
            s += exp(v - m);
            sx += v;
            sabs += fabs(v);
        }
        s = block_reduce<false>(s, scratch);
        sx = block_reduce<false>(sx, scratch);
        sabs = block_reduce<false>(sabs, scratch);
        const double log_s = log(s);
        /* log 0 for a row of only -inf, as torch.logsumexp */
        const double lse_ref = m == (double)NEG_INF ? m : m + log_s;
        const double xy = (!ignored && !bad_label) ? scale * ce_c(xr, (int)label, softcap) : 0.0;
        /* the cap's fp32 error, in s c */
        const double cap_slack = softcap != 0.0 ? 4.0 * CE_CAP_EPS * scale * softcap : 0.0;
        double loss_ref, loss_slack;
        if (ignored) {
            loss_ref = 0.0;
            loss_slack = 0.0;
        } else if (bad_label) {
            loss_ref = nan;
            loss_slack = 0.0;
        } else {
            const double nll = (m - xy) + log_s;
            const double smooth = (m - sx / cols) + log_s;
            /* the terms of a zero eps or z left out, not multiplied by 0: a
             * masked (-inf) logit makes the smoothing term inf */
            loss_ref = (1.0 - eps) * nll + (eps != 0.0 ? eps * smooth : 0.0) +
                       (z != 0.0 ? z * lse_ref * lse_ref : 0.0);
            loss_slack = CE_EPS * (fabs(m - xy) + fabs(log_s) + (eps != 0.0 ? eps * (fabs(m) + sabs / cols) : 0.0) +
                                   (z != 0.0 ? 2.0 * z * fabs(lse_ref) * (fabs(m) + fabs(log_s)) : 0.0)) +
                         cap_slack * (1.0 + (z != 0.0 ? 2.0 * z * fabs(lse_ref) : 0.0));
        }
        u64 nbad[CE_CHECKS] = {0, 0, 0, 0};
        u64 first[CE_CHECKS] = {~0ull, ~0ull, ~0ull, ~0ull};
        if (threadIdx.x == 0) {
            if (row_ref != NULL) {
                row_ref[2 * row] = loss_ref;
                row_ref[2 * row + 1] = lse_ref;
            }
            /* the outputs are fp32: the reference rounded to fp32 (a z-loss
             * of a fully masked row's lse^2 is past fp32's range: inf) */
            if (loss != NULL &&
                !agrees((double)loss[row], (double)(float)loss_ref, 1e-6 + loss_slack)) {
                nbad[1] = 1;
                first[1] = (u64)row;
            }
            if (lse != NULL && !ignored &&
                !agrees((double)lse[row], (double)(float)lse_ref,
                        1e-6 + CE_EPS * (fabs(m) + fabs(log_s)) + cap_slack)) {
                nbad[2] = 1;
                first[2] = (u64)row;
            }
            if (argmax != NULL) {
                const long long got = (long long)argmax[row];
                bool ok;
                if (nan_at < (double)cols)
                    ok = got == (long long)nan_at;
                else
                    ok = got >= 0 && got < cols && got <= (long long)max_at &&
                         scale * ce_c(xr, (int)got, softcap) >= m - CE_ARG_TOL * fabs(m);
                if (!ok) {
                    nbad[3] = 1;
                    first[3] = (u64)row;
                }
            }
        }
        if (grad != NULL) {
            const unsigned char *gr = grad + row * row_stride * ESIZE;
            double gs = grad_scale == NULL ? 1.0 : (double)grad_scale[grad_per_row ? row : 0];
            gs *= scale;
            const double lse_g = lse_in != NULL ? (double)lse_in[row] : lse_ref;
            /* p from the shift by the max first: on a row of huge logits
             * (a fully masked row of the lowest value: s x = -2.5e38), m +
             * log_s rounds to m even in float64, and exp(s x - lse) would
             * be 1, not 1/V */
            const double shift_g = lse_in != NULL ? lse_g : m;
            const double log_g = lse_in != NULL ? 0.0 : log_s;
            const double zf = 1.0 + 2.0 * z * lse_g;
            for (int c = threadIdx.x; c < cols; c += CHECK_THREADS) {
                double ref, slack = 0.0;
                if (ignored) {
                    ref = 0.0;
                } else if (bad_label) {
                    ref = nan;
                } else {
                    /* at most 1, as the backward kernel takes it: a
                     * saved fp32 lse may sit below a huge row's logit */
                    const double d = (scale * ce_c(xr, c, softcap) - shift_g) - log_g;
                    const double p = exp(lse_in != NULL && d > 0.0 ? 0.0 : d);
                    const double target = (c == label ? 1.0 - eps : 0.0) + eps / cols;
                    const double slope = ce_slope(xr, c, softcap);
                    ref = gs * (p * zf - target) * slope;
                    slack = fabs(gs) * ((CE_EPS * (p * fabs(zf) + target) + CE_TINY) * slope +
                                        (softcap != 0.0 ? fabs(p * zf - target) * 4.0 * CE_CAP_EPS +
                                                              p * fabs(zf) * cap_slack : 0.0));
                }
                const double got = bits_to_double(load_bits(gr + (long long)c * ESIZE));
                if (!agrees(got, ref, atol + rtol * fabs(ref) + slack)) {
                    nbad[0]++;
                    const u64 index = (u64)row * (u64)cols + (u64)c;
                    first[0] = index < first[0] ? index : first[0];
                }
            }
        }
        for (int i = 0; i < CE_CHECKS; i++)
            report(nbad[i], first[i], &bad[i], &first_bad[i]);
        __syncthreads(); /* scratch is reused by the next row */
    }
}

/* The check's labels: uniform in [0, V) from the seed, and ignore_index on
 * row 1 and every row 7 past it (so that every check sees ignored rows
 * among counted ones). Labels are never out of range here: a bad label is
 * the loss kernels' error path, tested by the Python package's tests. */
extern "C" __global__ void tuned_ce_gen_labels(CeRefLabel *labels, long long rows, int cols,
                                               u64 seed, long long ignore_index)
{
    for (long long row = blockIdx.x * (long long)blockDim.x + threadIdx.x; row < rows;
         row += (long long)gridDim.x * blockDim.x) {
        const bool ignored = rows > 1 && row % 7 == 1;
        const u64 h = mix64(seed ^ mix64((u64)row ^ 0x6c6162656c000000ull));
        labels[row] = (CeRefLabel)(ignored ? ignore_index : (long long)(h % (u64)cols));
    }
}

/* The backward's saved input: each row's lse of s x (s c) in float64, rounded
 * to fp32 as the forward stores it (log 0 = -inf for a row of only -inf,
 * NaN where a NaN or +inf makes it so), one block per row. */
extern "C" __global__ void __launch_bounds__(CHECK_THREADS)
tuned_ce_gen_lse(const unsigned char *x, float *lse, long long rows, int cols,
                 long long row_stride, double scale, double softcap)
{
    __shared__ double scratch[CHECK_THREADS / 32];
    for (long long row = blockIdx.x; row < rows; row += gridDim.x) {
        const unsigned char *xr = x + row * row_stride * ESIZE;
        double m = (double)NEG_INF;
        for (int c = threadIdx.x; c < cols; c += CHECK_THREADS)
            m = fmax(m, scale * ce_c(xr, c, softcap));
        m = block_reduce<true>(m, scratch);
        double s = 0.0;
        for (int c = threadIdx.x; c < cols; c += CHECK_THREADS)
            s += exp(scale * ce_c(xr, c, softcap) - m);
        s = block_reduce<false>(s, scratch);
        if (threadIdx.x == 0)
            lse[row] = (float)(m == (double)NEG_INF ? m : m + log(s));
        __syncthreads();
    }
}
