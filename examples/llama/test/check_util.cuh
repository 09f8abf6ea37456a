// test/check_util.cuh - what the engine's fp64 checks (kernel_check.cu,
// prefill_check.cu) share on the host: a CUDA call that must succeed (else
// exit 2), bf16 bit patterns to and from float, and device buffers filled
// from the host, read back, or poisoned first.
#ifndef LLAMA_CHECK_UTIL_CUH
#define LLAMA_CHECK_UTIL_CUH

#include <cuda_runtime.h>

#include <cmath>
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

// Element-wise |got - ref| <= tol (NaN fails) and the relative norm error
// ||got - ref|| / ||ref||; report() prints one line and counts it in *pass
// or *fail.
struct Cmp {
  double worst = 0, num = 0, den = 0;  // worst: max |err| / tol
  size_t bad = 0, n = 0, first_bad = SIZE_MAX;
  void add(double got, double ref, double tol) {
    const double e = std::fabs(got - ref);
    if (!(e <= tol)) {
      if (!bad) first_bad = n;
      bad++;
    }
    if (e / tol > worst || e != e) worst = e != e ? INFINITY : e / tol;
    num += (got - ref) * (got - ref);
    den += ref * ref;
    n++;
  }
  bool report(const char *what, double rel_max, int *pass, int *fail) const {
    const double rel = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
    const bool ok = bad == 0 && rel <= rel_max && n > 0;
    std::printf("%s %-66s max err/bound %.3f, rel norm %.2e (<= %.1e), %zu/%zu bad\n", ok ? "PASS" : "FAIL", what,
                worst, rel, rel_max, bad, n);
    if (bad) std::printf("      first bad at index %zu\n", first_bad);
    (ok ? *pass : *fail)++;
    return ok;
  }
};

// One line for a check that is a yes or no.
inline bool verdict(bool ok, const char *what, const char *detail, int *pass, int *fail) {
  std::printf("%s %-66s %s\n", ok ? "PASS" : "FAIL", what, detail);
  (ok ? *pass : *fail)++;
  return ok;
}

}  // namespace llama_check

#endif
