// check_kernels.cu - device-side helpers for the GPU tests: count wrong
// elements without a host round trip, and hold a stream back (a slow rank).
#include <cuda_runtime.h>

namespace {
__global__ void count_mismatch(const float *out, unsigned long long n, float expected, unsigned *bad) {
  unsigned local = 0;
  for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;
       i += (unsigned long long)gridDim.x * blockDim.x)
    local += out[i] != expected;
  if (local) atomicAdd(bad, local);
}
__global__ void spin(long long cycles) {
  long long t0 = clock64();
  while (clock64() - t0 < cycles) {
  }
}
}  // namespace

extern "C" void tpgt_count_mismatch(const float *out, unsigned long long n, float expected, unsigned *bad,
                                    cudaStream_t s) {
  count_mismatch<<<4, 256, 0, s>>>(out, n, expected, bad);
}

extern "C" void tpgt_spin(long long cycles, cudaStream_t s) { spin<<<1, 32, 0, s>>>(cycles); }
