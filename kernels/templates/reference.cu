/* reference.cu: the evaluator's helper kernels, the input generators, the
 * float64 reference checks every variant must pass before it is timed, and
 * the L2 priority reset that makes each timing's flush a real one, and the
 * pause between the flush and the timed launch.
 *
 * Idea: the reference of the forward kernels (tuned_check) is the plain
 * three-pass softmax in double precision of s x (max ignoring NaN as fmax
 * does, sum of exp(s x - max), then exp(s x - max) / sum, or for
 * log_softmax s x - max - log sum), computed per row on the GPU so that a
 * check of a 131M-element output costs milliseconds, not a copy to the
 * host. It compares each output element with |y - ref| <= atol + rtol *
 * |ref| (log_softmax: plus LOG_ATOL, the fp32 rounding of log sum near 0),
 * an infinity only where the reference has the same one, NaN only where
 * the reference is NaN, and counts the failures. It also writes each row's
 * (max, sum) so that the evaluator can check this reference itself against
 * a CPU float64 softmax. The backward kernels' reference (tuned_check_bwd)
 * is their formula in double precision on the same y and dy, its bound
 * widened by the fp32 rounding of the row's sum (BWD_EPS), and it writes
 * each row's (sum, sum of magnitudes) for the same CPU check. Their input
 * is y = softmax (or log_softmax) of generated x, computed in double and
 * rounded to the dtype (tuned_gen_probs), and dy uniform in [-1, 1)
 * (tuned_gen_grad).
 *
 * The generator fills rows with uniform values in [-8, 8) from a counter-based
 * hash (fresh data for every seed) and plants torch's awkward cases: rows
 * sprinkled with -inf (masked attention), and when there are at least 8 rows,
 * one row of only -inf, one with a NaN, one with a +inf, one of only the
 * dtype's lowest finite value (a fully masked row) and one of values around
 * 1e10 (60000 in fp16).
 *
 * Variants (codegen prepends the define, then softmax_common.cu, for ESIZE,
 * NEG_INF and the generator's float_to_bits):
 *   1. T_DTYPE  0 fp16, 1 bf16, 2 fp32
 *
 * Checked against: a CPU float64 softmax of the row (max, sum) pairs it
 * writes, by the evaluator, before any variant is checked with it. */

#define CHECK_THREADS 256
/* Large magnitudes for the masked and the huge rows: the dtype's lowest
 * finite value (how frameworks mask), and values around 1e10 (60000 in
 * fp16) a few thousand apart. */
#if T_DTYPE == 0
#define LOWEST -65504.0f
#define HUGE_BASE 60000.0f
#define HUGE_SPREAD 4000.0f
#else
#if T_DTYPE == 1
#define LOWEST -3.3895314e38f /* bf16's lowest finite value */
#else
#define LOWEST -3.40282347e38f
#endif
#define HUGE_BASE 1.0e10f
#define HUGE_SPREAD 1.0e5f
#endif

/* The check's own widening, deliberately not softmax_common.cu's
 * bits_to_float: the check reads every output through it, and a bug shared
 * with the kernels' conversion would cancel out instead of being caught.
 * (The generator does share float_to_bits: a rounding bug there changes
 * only the inputs, which the kernels and the check both read.) */
__device__ __forceinline__ double bits_to_double(u32 b)
{
#if T_DTYPE == 0
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"((u16)b));
    return (double)f;
#elif T_DTYPE == 1
    return (double)__uint_as_float(b << 16);
#else
    return (double)__uint_as_float(b);
#endif
}

/* Plain C loads and stores, not the kernels' asm with cache hints. */
__device__ __forceinline__ u32 load_bits(const unsigned char *p)
{
#if ESIZE == 2
    return *(const u16 *)p;
#else
    return *(const u32 *)p;
#endif
}

__device__ __forceinline__ void store_bits(unsigned char *p, u32 bits)
{
#if ESIZE == 2
    *(u16 *)p = (u16)bits;
#else
    *(u32 *)p = bits;
#endif
}

__device__ __forceinline__ u64 mix64(u64 z)
{
    z += 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

extern "C" __global__ void tuned_gen_input(unsigned char *x, long long rows, int cols,
                                           long long row_stride, u64 seed)
{
    const float inf = -NEG_INF;
    const long long n = rows * (long long)cols;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x) {
        const long long row = i / cols;
        const int col = (int)(i % cols);
        const u64 h = mix64(seed ^ mix64((u64)i));
        float v = (float)(h >> 40) * (16.0f / 16777216.0f) - 8.0f;
        const u64 pick = mix64(seed ^ (u64)row) % (u64)cols;
        if ((row % 4 == 1 || rows == 1) && (h & 15) == 0)
            v = -inf;
        if (rows >= 8) {
            if (row == rows - 1)
                v = -inf;
            else if (row == rows / 2 && (u64)col == pick)
                v = __int_as_float(0x7fc00000);
            else if (row == rows / 3 && (u64)col == pick)
                v = inf;
            else if (row == rows / 2 + 1)
                v = LOWEST; /* a fully masked row: softmax is uniform */
            else if (row == rows / 2 + 2)
                v = HUGE_BASE + (float)(h >> 40) * (HUGE_SPREAD / 16777216.0f);
        }
        store_bits(x + (row * row_stride + col) * ESIZE, float_to_bits(v));
    }
}

/* dy for the backward kernels: uniform in [-1, 1), fresh for every seed. */
extern "C" __global__ void tuned_gen_grad(unsigned char *dy, long long rows, int cols,
                                          long long row_stride, u64 seed)
{
    const long long n = rows * (long long)cols;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x) {
        const long long row = i / cols;
        const int col = (int)(i % cols);
        const u64 h = mix64(seed ^ mix64((u64)i ^ 0x6772616400000000ull));
        const float v = (float)(h >> 40) * (2.0f / 16777216.0f) - 1.0f;
        store_bits(dy + (row * row_stride + col) * ESIZE, float_to_bits(v));
    }
}

/* Block-wide reduction of one double; every thread gets the result. */
template <bool IsMax>
__device__ double block_reduce(double v, double *scratch)
{
    for (int offset = 16; offset > 0; offset /= 2) {
        double o = __shfl_xor_sync(0xFFFFFFFFu, v, offset);
        v = IsMax ? fmax(v, o) : v + o;
    }
    __syncthreads(); /* scratch may still be read by the last reduction */
    if (threadIdx.x % 32 == 0)
        scratch[threadIdx.x / 32] = v;
    __syncthreads();
    v = scratch[0];
    for (int i = 1; i < CHECK_THREADS / 32; i++)
        v = IsMax ? fmax(v, scratch[i]) : v + scratch[i];
    return v;
}

/* log_softmax's output is s (x - max) - log sum: near 0, where one element
 * dominates its row, the fp32 rounding of the sum (a few ulps of 1) is all
 * of it, far more than rtol of it. */
#define LOG_ATOL 1e-5
/* The backward kernels sum a row in fp32 (each thread its elements in
 * order, then a tree): the error of that sum, relative to the sum of the
 * terms' magnitudes, is at most a few times 2^-24 times the terms a thread
 * adds in order plus the levels of the tree; this bound leaves room for
 * 160 of those and is still far below any wrong term or lost partial sum. */
#define BWD_EPS 1e-5

/* Whether got passes against ref within tol: NaN only for NaN, an infinity
 * only for the same one. */
__device__ __forceinline__ bool agrees(double got, double ref, double tol)
{
    if (isnan(ref))
        return isnan(got);
    if (isinf(ref))
        return got == ref;
    return fabs(got - ref) <= tol;
}

/* Counts a row's failures into bad_count and the lowest failing index into
 * first_bad. */
__device__ __forceinline__ void report(u64 bad, u64 first, u64 *bad_count, u64 *first_bad)
{
    if (bad != 0) {
        atomicAdd(bad_count, bad);
        atomicMin(first_bad, first);
    }
}

/* The forward kernels' check, of y = softmax(s x) (log: log_softmax(s x)). */
extern "C" __global__ void __launch_bounds__(CHECK_THREADS)
tuned_check(const unsigned char *x, const unsigned char *y, long long rows, int cols,
            long long row_stride, double rtol, double atol, u64 *bad_count, u64 *first_bad,
            double *row_stats, double scale, int log_out)
{
    __shared__ double scratch[CHECK_THREADS / 32];
    for (long long row = blockIdx.x; row < rows; row += gridDim.x) {
        const unsigned char *xr = x + row * row_stride * ESIZE;
        const unsigned char *yr = y + row * row_stride * ESIZE;
        double m = (double)NEG_INF;
        for (int c = threadIdx.x; c < cols; c += CHECK_THREADS)
            m = fmax(m, scale * bits_to_double(load_bits(xr + (long long)c * ESIZE)));
        m = block_reduce<true>(m, scratch);
        double s = 0.0;
        for (int c = threadIdx.x; c < cols; c += CHECK_THREADS)
            s += exp(scale * bits_to_double(load_bits(xr + (long long)c * ESIZE)) - m);
        s = block_reduce<false>(s, scratch);
        if (row_stats != NULL && threadIdx.x == 0) {
            row_stats[2 * row] = m;
            row_stats[2 * row + 1] = s;
        }
        const double log_s = log(s);
        u64 bad = 0;
        u64 first = ~0ull;
        for (int c = threadIdx.x; c < cols; c += CHECK_THREADS) {
            const double v = scale * bits_to_double(load_bits(xr + (long long)c * ESIZE)) - m;
            const double ref = log_out ? v - log_s : exp(v) / s;
            const double got = bits_to_double(load_bits(yr + (long long)c * ESIZE));
            if (!agrees(got, ref, atol + rtol * fabs(ref) + (log_out ? LOG_ATOL : 0.0))) {
                bad++;
                const u64 index = (u64)row * (u64)cols + (u64)c;
                first = index < first ? index : first;
            }
        }
        report(bad, first, bad_count, first_bad);
    }
}

/* The backward kernels' input: y = softmax(x) (log: log_softmax(x)) of the
 * generated x, in double, rounded to the dtype. */
extern "C" __global__ void __launch_bounds__(CHECK_THREADS)
tuned_gen_probs(const unsigned char *x, unsigned char *y, long long rows, int cols,
                long long row_stride, int log_out)
{
    __shared__ double scratch[CHECK_THREADS / 32];
    for (long long row = blockIdx.x; row < rows; row += gridDim.x) {
        const unsigned char *xr = x + row * row_stride * ESIZE;
        unsigned char *yr = y + row * row_stride * ESIZE;
        double m = (double)NEG_INF;
        for (int c = threadIdx.x; c < cols; c += CHECK_THREADS)
            m = fmax(m, bits_to_double(load_bits(xr + (long long)c * ESIZE)));
        m = block_reduce<true>(m, scratch);
        double s = 0.0;
        for (int c = threadIdx.x; c < cols; c += CHECK_THREADS)
            s += exp(bits_to_double(load_bits(xr + (long long)c * ESIZE)) - m);
        s = block_reduce<false>(s, scratch);
        const double log_s = log(s);
        for (int c = threadIdx.x; c < cols; c += CHECK_THREADS) {
            const double v = bits_to_double(load_bits(xr + (long long)c * ESIZE)) - m;
            const double p = log_out ? v - log_s : exp(v) / s;
            store_bits(yr + (long long)c * ESIZE, float_to_bits((float)p));
        }
    }
}

/* The backward kernels' check, of dx = y (dy - sum(dy y)) (log: dx = dy -
 * exp(y) sum(dy)). Each row's (sum, sum of the terms' magnitudes) go to
 * row_stats. */
extern "C" __global__ void __launch_bounds__(CHECK_THREADS)
tuned_check_bwd(const unsigned char *y, const unsigned char *dy, const unsigned char *dx,
                long long rows, int cols, long long row_stride, double rtol, double atol,
                u64 *bad_count, u64 *first_bad, double *row_stats, int log_in)
{
    __shared__ double scratch[CHECK_THREADS / 32];
    for (long long row = blockIdx.x; row < rows; row += gridDim.x) {
        const long long off = row * row_stride * ESIZE;
        double s = 0.0, mag = 0.0;
        for (int c = threadIdx.x; c < cols; c += CHECK_THREADS) {
            const double g = bits_to_double(load_bits(dy + off + (long long)c * ESIZE));
            const double t = log_in ? g : g * bits_to_double(load_bits(y + off + (long long)c * ESIZE));
            s += t;
            mag += fabs(t);
        }
        s = block_reduce<false>(s, scratch);
        mag = block_reduce<false>(mag, scratch);
        if (row_stats != NULL && threadIdx.x == 0) {
            row_stats[2 * row] = s;
            row_stats[2 * row + 1] = mag;
        }
        u64 bad = 0;
        u64 first = ~0ull;
        for (int c = threadIdx.x; c < cols; c += CHECK_THREADS) {
            const double yv = bits_to_double(load_bits(y + off + (long long)c * ESIZE));
            const double g = bits_to_double(load_bits(dy + off + (long long)c * ESIZE));
            const double got = bits_to_double(load_bits(dx + off + (long long)c * ESIZE));
            double ref, slack;
            if (log_in) {
                const double p = exp(yv);
                ref = g - p * s;
                slack = BWD_EPS * (fabs(g) + p * mag);
            } else {
                ref = yv * (g - s);
                slack = BWD_EPS * fabs(yv) * (fabs(g) + mag);
            }
            if (!agrees(got, ref, atol + rtol * fabs(ref) + slack)) {
                bad++;
                const u64 index = (u64)row * (u64)cols + (u64)c;
                first = index < first ? index : first;
            }
        }
        report(bad, first, bad_count, first_bad);
    }
}

/* Gives every 128-byte line of [p, p + bytes) the normal L2 eviction
 * priority. The evaluator runs it on x and y before each timing's flush: a
 * line some kernel loaded with an evict_last policy outlives a memset of
 * twice the L2 (measured on the H200: repeats of a 4 MB softmax read their
 * input from L2 and ran 15% faster), and then every later timing of that
 * input, of any variant or of the copy, would start L2-hot. */
extern "C" __global__ void tuned_l2_normal(const unsigned char *p, long long bytes)
{
#if __CUDA_ARCH__ >= 800
    for (long long i = ((long long)blockIdx.x * blockDim.x + threadIdx.x) * 128; i < bytes;
         i += (long long)gridDim.x * blockDim.x * 128)
        asm volatile("applypriority.global.L2::evict_normal [%0], 128;" ::"l"(p + i) : "memory");
#endif
}

/* One thread spins until ns nanoseconds of the GPU's global timer have
 * passed. The evaluator runs it between each timing's flush and the start
 * event, as bench/bench_torch.py does: launched right behind the memset
 * flush, a few-us kernel's time depended on its launch shape (measured on
 * the H200, 32x128 fp16: one variant 0.7 us slower than after any pause of
 * 2 to 100 us, another 0.4 us faster), and the tune ranked variants by that
 * artefact. */
extern "C" __global__ void tuned_settle(long long ns)
{
    unsigned long long start, now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
    do
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    while ((long long)(now - start) < ns);
}
