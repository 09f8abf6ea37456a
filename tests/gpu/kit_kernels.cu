// kit_kernels.cu - engine kernels the kit test loads from bytes (tpg_module_load).
#include <cuda_runtime.h>

#include "tests/gpu/kit_kernels.cuh"

extern "C" __global__ void kit_axpy(float *y, const float *x, int n, double a, float b) {
  kit_axpy_body(y, x, n, a, b);
}

// One block stages n floats in dynamic shared memory (above the 48 KiB
// default when n > 12288) and writes them reversed.
extern "C" __global__ void kit_reverse_smem(float *y, const float *x, int n) {
  extern __shared__ float s[];
  for (int i = threadIdx.x; i < n; i += blockDim.x) s[i] = x[i];
  __syncthreads();
  for (int i = threadIdx.x; i < n; i += blockDim.x) y[i] = s[n - 1 - i];
}

// out[block] = the block's rank in its thread-block cluster (sm_90+).
extern "C" __global__ void kit_cluster_rank(int *out) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  unsigned r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
  if (threadIdx.x == 0) out[blockIdx.x] = (int)r;
#else
  if (threadIdx.x == 0) out[blockIdx.x] = -1;
#endif
}

// w[i] = z[i] + y[i]: reads z, which the engine's other stream writes.
extern "C" __global__ void kit_add(float *w, const float *z, const float *y, int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) w[i] = z[i] + y[i];
}
