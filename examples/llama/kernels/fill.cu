// fill.cu - seeded random tensors made on the device, for runs without
// --weights. Each element's value is a hash of (seed, tensor, its index in
// the WHOLE unsplit tensor), so every rank, whatever its shard, and every
// tensor-parallel degree see the same model: a TP=1 and a TP=2 run of one
// seed compute the same function (their outputs differ only by rounding).
// Launched with the CUDA runtime at load time; never part of the graph.
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>

namespace {

__device__ __forceinline__ uint64_t mix(uint64_t z) {  // splitmix64's finaliser
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// dst[i * pitch + j] = U(lo, hi) of whole element (row0 + i, col0 + j).
__global__ void fill_part(__nv_bfloat16 *dst, size_t pitch, size_t rows, size_t cols, size_t whole_cols,
                          size_t row0, size_t col0, uint64_t key, float lo, float hi) {
  const size_t n = rows * cols;
  for (size_t e = blockIdx.x * (size_t)blockDim.x + threadIdx.x; e < n; e += (size_t)gridDim.x * blockDim.x) {
    const size_t i = e / cols, j = e % cols;
    const uint64_t h = mix(key ^ mix((row0 + i) * whole_cols + col0 + j));
    const float u = (float)(h >> 40) * (1.0f / 16777216.0f);  // 24 bits: [0, 1)
    dst[i * pitch + j] = __float2bfloat16_rn(__fmaf_rn(hi - lo, u, lo));  // no contraction choices: host_tensor repeats it bit for bit
  }
}

}  // namespace

// Keep in step with weights.cc's host_tensor, which repeats this for --verify.
extern "C" cudaError_t llama_fill_part(void *dst, size_t pitch, size_t rows, size_t cols, size_t whole_cols,
                                       size_t row0, size_t col0, uint64_t seed, uint32_t tensor, float lo, float hi,
                                       cudaStream_t stream) {
  if (rows == 0 || cols == 0) return cudaSuccess;
  const uint64_t key = ((seed * 0x9e3779b97f4a7c15ull) ^ ((uint64_t)tensor << 32 | tensor)) + 1;
  const size_t n = rows * cols;
  const unsigned blocks = (unsigned)(n / 256 + 1 < 4096 ? n / 256 + 1 : 4096);
  fill_part<<<blocks, 256, 0, stream>>>((__nv_bfloat16 *)dst, pitch, rows, cols, whole_cols, row0, col0, key, lo, hi);
  return cudaGetLastError();
}
