// kit_kernels.cuh - an engine's "own" kernels for tests/gpu/kit_test.c. The
// bodies live here once; kit_kernels.cu makes them a fatbin the test loads
// as a tpg_module, kit_rt.cu the same code as CUDA-runtime kernels (reached
// through cudaGetKernel / cudaGetFuncBySymbol).
#pragma once

// y[i] = fma(a, x[i], b) in fp64, rounded once to float: the test's fp64
// reference (the same fma, C99) gives the same float, bit for bit. Mixed
// parameter sizes (8, 8, 4, 8, 4), so offsets are not all multiples of one.
__device__ __forceinline__ void kit_axpy_body(float *y, const float *x, int n, double a, float b) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
    y[i] = (float)fma(a, (double)x[i], (double)b);
}
