/* gpu_common.h - helpers for the GPU tests: CUDA runtime checks, bf16/fp16
 * conversion on the host, seeded random data, relative-norm comparison.
 *
 * Tests may use the CUDA runtime (the library itself does not): it is the
 * shortest way to allocate and copy, and it shares the primary context the
 * library uses, so pointers pass between them unchanged.
 */
#ifndef TPG_GPU_COMMON_H
#define TPG_GPU_COMMON_H

#include <cuda_runtime_api.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tests/tpg_test.h"

/* The error exit: not exit(), whose handlers and library destructors would
 * run while other rank threads are still inside CUDA / NCCL (heap corruption
 * and a segfault instead of exit code 2; bench/bench_common.h). */
static inline void gpu_die(void) {
  fflush(NULL);
  _exit(2);
}

#define CUDA_OK(call)                                                                   \
  do {                                                                                  \
    cudaError_t e_ = (call);                                                            \
    if (e_ != cudaSuccess) {                                                            \
      fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
      gpu_die();                                                                        \
    }                                                                                   \
  } while (0)

/* Stop the test at once if a setup step fails: later checks would be noise. */
#define MUST(call)                                                                      \
  do {                                                                                  \
    tpg_status s_ = (call);                                                             \
    if (s_ != TPG_SUCCESS) {                                                            \
      fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, tpg_last_error());  \
      gpu_die();                                                                        \
    }                                                                                   \
  } while (0)

static inline uint16_t f2bf(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fc0;
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}
static inline float bf2f(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}
static inline uint16_t f2h(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000u;
  int e = (int)((x >> 23) & 0xff) - 127 + 15;
  uint32_t m = x & 0x7fffffu;
  if (((x >> 23) & 0xff) == 0xff) return (uint16_t)(sign | 0x7c00u | (m ? 0x200u : 0));
  if (e >= 31) return (uint16_t)(sign | 0x7c00u);
  if (e <= 0) {
    if (e < -10) return (uint16_t)sign;
    m |= 0x800000u;
    int shift = 14 - e;
    uint32_t hm = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (hm & 1))) hm++;
    return (uint16_t)(sign | hm);
  }
  uint32_t hm = m >> 13, rem = m & 0x1fffu;
  uint32_t h = sign | ((uint32_t)e << 10) | hm;
  if (rem > 0x1000u || (rem == 0x1000u && (hm & 1))) h++;
  return (uint16_t)h;
}
static inline float h2f(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1f, m = h & 0x3ffu, x;
  if (e == 0) {
    if (m == 0) x = sign;
    else {
      int s = 0;
      while (!(m & 0x400u)) { m <<= 1; s++; }
      m &= 0x3ffu;
      x = sign | ((uint32_t)(127 - 15 + 1 - s) << 23) | (m << 13);
    }
  } else if (e == 31) {
    x = sign | 0x7f800000u | (m << 13);
  } else {
    x = sign | ((e + 127 - 15) << 23) | (m << 13);
  }
  float f;
  memcpy(&f, &x, 4);
  return f;
}

/* Value in [-1, 1) from (seed, index): every rank can recompute any rank's data. */
static inline float rnd(uint64_t seed, uint64_t i) {
  uint64_t z = seed * 0x9E3779B97F4A7C15ull + i * 0xBF58476D1CE4E5B9ull + 0x94D049BB133111EBull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return (float)((double)(z >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

/* Host buffer in `dt` from floats (rounded); returns the rounded floats in back. */
static inline void *pack(tpg_dtype dt, const float *src, size_t n, float *back) {
  size_t es = tpg_dtype_size(dt);
  unsigned char *b = malloc(n * es);
  for (size_t i = 0; i < n; i++) {
    if (dt == TPG_F32) {
      memcpy(b + 4 * i, &src[i], 4);
      if (back) back[i] = src[i];
    } else {
      uint16_t h = dt == TPG_BF16 ? f2bf(src[i]) : f2h(src[i]);
      memcpy(b + 2 * i, &h, 2);
      if (back) back[i] = dt == TPG_BF16 ? bf2f(h) : h2f(h);
    }
  }
  return b;
}

static inline void unpack(tpg_dtype dt, const void *src, size_t n, float *out) {
  const unsigned char *b = src;
  for (size_t i = 0; i < n; i++) {
    if (dt == TPG_F32) memcpy(&out[i], b + 4 * i, 4);
    else {
      uint16_t h;
      memcpy(&h, b + 2 * i, 2);
      out[i] = dt == TPG_BF16 ? bf2f(h) : h2f(h);
    }
  }
}

/* n seeded values in [-scale, scale), rounded to bf16 (kept as floats). */
static inline float *rnd_bf16(uint64_t seed, size_t n, float scale) {
  float *f = malloc(n * 4);
  for (size_t i = 0; i < n; i++) f[i] = scale * rnd(seed, i);
  free(pack(TPG_BF16, f, n, f)); /* round in place */
  return f;
}

/* A new device buffer holding f as bf16. */
static inline void *upload(const float *f, size_t n) {
  void *h = pack(TPG_BF16, f, n, NULL), *d;
  CUDA_OK(cudaMalloc(&d, n * 2));
  CUDA_OK(cudaMemcpy(d, h, n * 2, cudaMemcpyHostToDevice));
  free(h);
  return d;
}

/* ||out - ref|| / ||ref||; NaN (an unwritten, poisoned element) gives +inf. */
static inline double rel_err(const float *out, const double *ref, size_t n) {
  double num = 0, den = 0;
  for (size_t i = 0; i < n; i++) {
    if (isnan(out[i]) || isinf(out[i])) return INFINITY;
    double d = (double)out[i] - ref[i];
    num += d * d;
    den += ref[i] * ref[i];
  }
  return den > 0 ? sqrt(num / den) : sqrt(num);
}

static inline double tol_for(tpg_dtype dt) { return dt == TPG_F32 ? 1e-5 : 1e-2; }

/* Poison a device buffer with 0xFF bytes: NaN in every float format. */
static inline void poison(void *d, size_t bytes) { CUDA_OK(cudaMemset(d, 0xFF, bytes)); }

#endif
