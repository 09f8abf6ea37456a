// kit_rt.cu - kit_axpy as a CUDA-runtime kernel: the handles a runtime
// engine would pass to tpg_plan_add_kernel (desc.cu_kernel from
// cudaGetKernel, desc.cu_function from cudaGetFuncBySymbol).
#include <cuda_runtime.h>

#include "tests/gpu/kit_kernels.cuh"

namespace {
__global__ void kit_axpy_rt(float *y, const float *x, int n, double a, float b) { kit_axpy_body(y, x, n, a, b); }
}  // namespace

// cudaKernel_t (a CUkernel), or NULL.
extern "C" void *kit_rt_axpy_kernel(void) {
  cudaKernel_t k = nullptr;
  if (cudaGetKernel(&k, kit_axpy_rt) != cudaSuccess) return nullptr;
  return (void *)k;
}

// cudaFunction_t (a CUfunction of the current device's primary context), or NULL.
extern "C" void *kit_rt_axpy_function(void) {
  cudaFunction_t f = nullptr;
  if (cudaGetFuncBySymbol(&f, (const void *)kit_axpy_rt) != cudaSuccess) return nullptr;
  return (void *)f;
}
