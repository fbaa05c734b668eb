# Prototype: lanes_combine's warp sum (WIDTH 32) as a fixed-point sum in
# two redux.sync.add.u32 instead of five shuffle-adds.
import sys
src, dst = sys.argv[1], sys.argv[2]
t = open(src).read()
helper = r'''
__host__ __device__ constexpr int fixed_log2_ceil(long long n) { return n <= 1 ? 0 : 1 + fixed_log2_ceil((n + 1) / 2); }
/* Each lane's value <= T_COLS (a sum of exps each <= 1); 32 of them below 2^58. */
#define FIXED_SCALE ((float)(1ull << (53 - fixed_log2_ceil(T_COLS))))
__device__ __forceinline__ float fixed_warp_sum(float v)
{
    const unsigned long long q = __float2ull_rn(v * FIXED_SCALE);
    const unsigned lo = (unsigned)q & 0x3FFFFFFu, hi = (unsigned)(q >> 26);
    unsigned slo, shi;
    asm("redux.sync.add.u32 %0, %1, 0xFFFFFFFF;" : "=r"(slo) : "r"(lo));
    asm("redux.sync.add.u32 %0, %1, 0xFFFFFFFF;" : "=r"(shi) : "r"(hi));
    const unsigned long long total = ((unsigned long long)shi << 26) + slo;
    const float r = __ull2float_rn(total) * (1.0f / FIXED_SCALE);
    return __any_sync(0xFFFFFFFFu, v != v) ? __int_as_float(0x7FFFFFFF) : r;
}

'''
anchor = "template <int WIDTH, bool WARP_COPIES = false>\n__device__ __forceinline__ void lanes_combine("
assert t.count(anchor) == 1, "no lanes_combine"
t = t.replace(anchor, helper + anchor)
old = "    s = lanes_reduce<WIDTH>(rescaled, SumOp());\n    m = largest;"
assert t.count(old) == 1, "no sum line"
t = t.replace(old, "    s = WIDTH == 32 ? fixed_warp_sum(rescaled) : lanes_reduce<WIDTH>(rescaled, SumOp());\n    m = largest;")
open(dst, 'w').write(t)
