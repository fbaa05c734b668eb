/* store_probe.cu: how fast a few SMs can write, the one stage of a
 * few-row softmax that starts only after the row's reduction and grows
 * with the row's bytes per SM (docs/decisions.md, "Where a few-row
 * kernel's time goes"). An experiment outside the tuner, built with nvcc
 * on the GPU machine by bench/store-probe.sh.
 *
 * Each kernel writes TOTAL bytes (a row of 262144 fp16 values, or of
 * 131072) from G blocks, each its contiguous part, in one of two ways:
 *   stg   every thread stores its 16-byte words from registers (st.global,
 *         coalesced: a warp's 32 words are 512 contiguous bytes)
 *   bulk  the block writes its part into shared memory, then one thread
 *         hands it to the bulk copy engine (cp.async.bulk global <- shared)
 *         and waits for the copy to complete
 * Timed like the other probes (probe_common.cuh: median of 60 launches,
 * the L2 flushed before each, cudaEvent around the launch), and, inside
 * the kernel, thread 0's SM clock from the block's start to the last
 * store issued (stg) or to the bulk copy's completion (bulk), the median
 * over blocks, in ns. Each output is checked before it is timed. */

#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

#include "probe_common.cuh"

enum Way { STG, BULK };

/* Block b writes words [b * part, (b + 1) * part) of out, word i = i. */
template <Way WAY>
__global__ void store_kernel(uint4 *out, unsigned part_words, unsigned long long *cycles)
{
    extern __shared__ uint4 stage[];
    const unsigned long long t0 = probe_clock_after(0);
    uint4 *mine = out + (size_t)blockIdx.x * part_words;
    const unsigned base = blockIdx.x * part_words;
    unsigned last = 0;
    if (WAY == STG) {
        for (unsigned i = threadIdx.x; i < part_words; i += blockDim.x) {
            mine[i] = make_uint4(base + i, base + i, base + i, base + i);
            last = i;
        }
    } else {
        for (unsigned i = threadIdx.x; i < part_words; i += blockDim.x)
            stage[i] = make_uint4(base + i, base + i, base + i, base + i);
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
        __syncthreads();
        if (threadIdx.x == 0) {
            const unsigned src = (unsigned)__cvta_generic_to_shared(stage);
            asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;"
                         ::"l"(mine), "r"(src), "r"(part_words * 16) : "memory");
            asm volatile("cp.async.bulk.commit_group;" ::: "memory");
            asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
            last = 1;
        }
    }
    if (threadIdx.x == 0)
        cycles[blockIdx.x] = probe_clock_after(last) - t0;
}

template <Way WAY>
static void run(Timer &timer, uint4 *out, unsigned long long *cycles, size_t total, int blocks,
                int threads, double cycles_per_ns)
{
    const unsigned part_words = (unsigned)(total / 16 / blocks);
    const size_t smem = WAY == BULK ? (size_t)part_words * 16 : 0;
    const void *kernel = (const void *)store_kernel<WAY>;
    if (smem > 48 * 1024)
        CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    auto launch = [&] { store_kernel<WAY><<<blocks, threads, smem>>>(out, part_words, cycles); };
    CHECK(cudaMemset(out, 0, total));
    launch();
    CHECK(cudaDeviceSynchronize());
    std::vector<uint4> got(total / 16);
    CHECK(cudaMemcpy(got.data(), out, total, cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < got.size(); i++)
        if (got[i].x != (unsigned)i || got[i].w != (unsigned)i) {
            printf("  %-4s G%-4d t%-5d WRONG at word %zu\n", WAY == STG ? "stg" : "bulk", blocks,
                   threads, i);
            return;
        }
    const float us = timer.median_us(launch);
    std::vector<unsigned long long> c(blocks);
    CHECK(cudaMemcpy(c.data(), cycles, blocks * sizeof c[0], cudaMemcpyDeviceToHost));
    std::sort(c.begin(), c.end());
    printf("  %-4s G%-4d t%-5d %4zu KB a block  %6.2f us  in-kernel %5.0f ns (%.1f B/clock)\n",
           WAY == STG ? "stg" : "bulk", blocks, threads, total / blocks / 1024, us,
           c[blocks / 2] / cycles_per_ns, (double)(total / blocks) / (double)c[blocks / 2]);
}

int main()
{
    const size_t totals[] = {262144 * 2, 131072 * 2};
    const size_t most = totals[0];
    uint4 *out;
    unsigned long long *cycles;
    double *rate, cycles_per_ns;
    CHECK(cudaMalloc(&out, most));
    CHECK(cudaMalloc(&cycles, 1024 * sizeof(unsigned long long)));
    CHECK(cudaMalloc(&rate, sizeof(double)));
    probe_clock_rate<<<1, 1>>>(rate);
    CHECK(cudaMemcpy(&cycles_per_ns, rate, sizeof cycles_per_ns, cudaMemcpyDeviceToHost));
    Timer timer(60, 0);
    for (size_t total : totals) {
        const float copy_us = timer.median_us(
            [&] { CHECK(cudaMemsetAsync(out, 1, total)); });
        printf("%zu bytes written: memset %.2f us; SM clock %.3f GHz\n", total, copy_us,
               cycles_per_ns);
        for (int blocks : {16, 32, 128})
            for (int threads : {256, 1024}) {
                run<STG>(timer, out, cycles, total, blocks, threads, cycles_per_ns);
                run<BULK>(timer, out, cycles, total, blocks, threads, cycles_per_ns);
            }
    }
    CHECK(cudaFree(out));
    CHECK(cudaFree(cycles));
    CHECK(cudaFree(rate));
    return 0;
}
