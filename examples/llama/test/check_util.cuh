// test/check_util.cuh - what the engine's fp64 checks (kernel_check.cu,
// prefill_check.cu) share on the host: a CUDA call that must succeed (else
// exit 2), bf16 bit patterns to and from float, and device buffers filled
// from the host, read back, or poisoned first.
#ifndef LLAMA_CHECK_UTIL_CUH
#define LLAMA_CHECK_UTIL_CUH

#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#define CK(call)                                                                                  \
  do {                                                                                            \
    cudaError_t e_ = (call);                                                                      \
    if (e_ != cudaSuccess) {                                                                      \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
      std::exit(2);                                                                               \
    }                                                                                             \
  } while (0)

namespace llama_check {

// fp32 -> bf16, round to nearest even
inline uint16_t f2b(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}
inline float b2f(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
template <class T>
T *up(const std::vector<T> &h) {
  T *d;
  CK(cudaMalloc(&d, h.size() * sizeof(T)));
  CK(cudaMemcpy(d, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
  return d;
}
template <class T>
std::vector<T> down(const T *d, size_t n) {
  std::vector<T> h(n);
  CK(cudaMemcpy(h.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost));
  return h;
}
template <class T>
T *poisoned(size_t n) {  // 0xff bytes: NaN in bf16 and fp32
  T *d;
  CK(cudaMalloc(&d, n * sizeof(T)));
  CK(cudaMemset(d, 0xff, n * sizeof(T)));
  return d;
}

}  // namespace llama_check

#endif
