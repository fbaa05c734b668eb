/* softmax_common.cu: what both softmax families (softmax_rows.cu,
 * softmax_staged.cu) are made of beside their own layout: element
 * conversions (one PTX cvt each; no cuda_fp16.h, which keeps NVRTC compiles
 * fast), the store with the variant's cache hint, the cluster's distributed
 * shared memory exchange, the reduction operators and exp(x - max).
 *
 * Codegen puts it between the variant's defines and the family's template.
 * The float64 reference (reference.cu) deliberately shares none of it: a
 * conversion bug here must not be repeated in the checker.
 *
 * Needs: T_DTYPE (0 fp16, 1 bf16, 2 fp32), T_ST (0 st.global, 1 .cs),
 * T_CLUSTER (blocks per row, 1 = no cluster). */

#define ESIZE (T_DTYPE == 2 ? 4 : 2)
#define LOG2E 1.4426950408889634f

typedef unsigned short u16;
typedef unsigned int u32;
typedef unsigned long long u64;

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
#if T_DTYPE == 0
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(d) : "f"(hi), "f"(lo));
#else
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(d) : "f"(hi), "f"(lo));
#endif
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

/* A cluster barrier in two halves, so that work between them overlaps
 * the wait for the other blocks. */
__device__ __forceinline__ void cluster_arrive()
{
    asm volatile("barrier.cluster.arrive.release.aligned;" ::: "memory");
}

__device__ __forceinline__ void cluster_wait()
{
    asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory");
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

#define CLUSTER_ATTRIBUTE __cluster_dims__(T_CLUSTER, 1, 1)
#else
#define CLUSTER_ATTRIBUTE
#endif

/* ---- the reductions' operators and the exponential ---- */

struct MaxOp {
    __device__ __forceinline__ float operator()(float a, float b) const { return fmaxf(a, b); }
};
struct SumOp {
    __device__ __forceinline__ float operator()(float a, float b) const { return a + b; }
};

/* exp(x - max) as ex2((x - max) * log2 e). The difference is taken first:
 * prescaling max (x * log2e - max * log2e in one FMA) loses max's rounding
 * error, which for |max| above ~4e9 (rows masked with -1e10 or the dtype's
 * lowest value) exceeds the exponent range and turned whole rows into NaN. */
__device__ __forceinline__ float exp_shifted(float x, float max)
{
    float r;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"((x - max) * LOG2E));
    return r;
}
