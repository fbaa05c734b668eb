#include <cuda_fp16.h>
extern "C" __global__ void k(const __half2* x, __half2* y, float* s){
  int i = threadIdx.x;
  __half2 v = x[i];
  unsigned r, a = *(unsigned*)&v;
  asm("ex2.approx.f16x2 %0, %1;" : "=r"(r) : "r"(a));
  y[i] = *(__half2*)&r;
}
extern "C" __global__ void kb(const unsigned* x, unsigned* y){
  int i = threadIdx.x;
  unsigned r, a = x[i];
  asm("ex2.approx.ftz.bf16x2 %0, %1;" : "=r"(r) : "r"(a));
  y[i] = r;
}
