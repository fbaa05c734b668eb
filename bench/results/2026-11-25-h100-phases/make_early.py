# Prototype: turns a generated rows-family cluster source (with the probe's
# hooks) into the "early max" reduction: warp maxima pushed with
# red.async.max right after the loads, the row's sum as a fixed-point
# red.async.add.u64 after the exps.
import re, sys
src, dst = sys.argv[1], sys.argv[2]
t = open(src).read()
helpers = r'''
__device__ __forceinline__ int early_key(float v)
{
    const int b = __float_as_int(v);
    return b ^ ((b >> 31) & 0x7FFFFFFF);
}
__host__ __device__ constexpr int early_log2_ceil(long long n) { return n <= 1 ? 0 : 1 + early_log2_ceil((n + 1) / 2); }
#define EARLY_FIX_BITS (53 - early_log2_ceil(T_COLS))
#define EARLY_FIX_SCALE ((float)(1ull << EARLY_FIX_BITS))
#define EARLY_FIX_NAN (1ull << 54)
__device__ __forceinline__ void early_red_max(int *word, u64 *bar, int key, unsigned to)
{
    u32 rw, rb;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(rw) : "r"(smem_addr(word)), "r"(to));
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(rb) : "r"(smem_addr(bar)), "r"(to));
    asm volatile("red.async.relaxed.cluster.shared::cluster.mbarrier::complete_tx::bytes.max.s32 [%0], %1, [%2];"
                 :: "r"(rw), "r"(key), "r"(rb) : "memory");
}
__device__ __forceinline__ void early_red_add(unsigned long long *word, u64 *bar, unsigned long long q, unsigned to)
{
    u32 rw, rb;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(rw) : "r"(smem_addr(word)), "r"(to));
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(rb) : "r"(smem_addr(bar)), "r"(to));
    asm volatile("red.async.relaxed.cluster.shared::cluster.mbarrier::complete_tx::bytes.add.u64 [%0], %1, [%2];"
                 :: "r"(rw), "l"(q), "r"(rb) : "memory");
}
'''
i = t.index('extern "C" __global__')
t = t[:i] + helpers + t[i:]
# The mailboxes' setup becomes the two words' and barriers' setup.
setup_old = "    open_mailboxes(box_max, box_sum, box_pairs);\n"
setup_new = r"""    __shared__ int early_max_key;
    __shared__ unsigned long long early_sum_fixed;
    __shared__ u64 early_bar_max, early_bar_sum;
    __shared__ u32 early_zero;
    (void)box_max, (void)box_sum, (void)box_pairs;
    if (threadIdx.x == 0) {
        early_max_key = (int)0x80000000;
        early_sum_fixed = 0ull;
        early_zero = 0u;
    }
    mailbox_expect(early_bar_max, T_CLUSTER * T_WARPS * 4);
    mailbox_expect(early_bar_sum, T_CLUSTER * T_WARPS * 8);
    if (threadIdx.x == 0) {
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
        asm volatile("fence.acq_rel.cluster;" ::: "memory");
    }
    asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory");
"""
assert t.count(setup_old) == 1, "no open_mailboxes line"
t = t.replace(setup_old, setup_new)
# From the thread's maximum to the row's (max, sum): the early exchange.
first = "    const float probe_tmax = thread_max(h);\n"
last = "    PHASE(6, sum);\n"
i, j = t.index(first), t.index(last) + len(last)
t = t[:i] + r"""    const float thread_max_value = thread_max(h);
    PHASE(1, thread_max_value);
    const unsigned lane = threadIdx.x % 32;
    const int key = early_key(warp_max(thread_max_value));
    mailboxes_wait_ready();
    if (lane < T_CLUSTER)
        early_red_max(&early_max_key, &early_bar_max, key, lane);
    /* The exps wait for the send: they take a run-time zero read after it
     * (a volatile load, which ptxas keeps after the send). */
    u32 zero;
    asm volatile("ld.volatile.shared.u32 %0, [%1];" : "=r"(zero) : "r"(smem_addr(&early_zero)) : "memory");
    const float max = thread_max_value + __int_as_float(zero);
    float sum = exp_and_sum(h, max, ks);
    PHASE(2, sum);
    mailbox_wait(early_bar_max);
    const int mk = *(volatile int *)&early_max_key;
    const float row_max = __int_as_float(mk ^ ((mk >> 31) & 0x7FFFFFFF));
    float s = max == NEG_INF ? sum : sum * exp_shifted(max, row_max, ks);
    s = lanes_reduce<32>(s, SumOp());
    PHASE(3, s);
    {
        const unsigned long long q = s == s ? __float2ull_rn(s * EARLY_FIX_SCALE) : EARLY_FIX_NAN;
        if (lane < T_CLUSTER)
            early_red_add(&early_sum_fixed, &early_bar_sum, q, lane);
    }
    mailbox_wait(early_bar_sum);
    const unsigned long long total = *(volatile unsigned long long *)&early_sum_fixed;
    PHASE(5, (float)total);
    sum = total >= EARLY_FIX_NAN ? __int_as_float(0x7FFFFFFF) : __ull2float_rn(total) * (1.0f / EARLY_FIX_SCALE);
    PHASE(6, sum);
""" + t[j:]
open(dst, 'w').write(t)
