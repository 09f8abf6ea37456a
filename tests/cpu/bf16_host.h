/* bf16_host.h - bf16 values on the host for the GEMM tests on the stand-in
 * driver: rounding to nearest even, back to double, and seeded fills. */
#ifndef TPG_BF16_HOST_H
#define TPG_BF16_HOST_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

static inline uint16_t bf(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  u += 0x7fffu + ((u >> 16) & 1);
  return (uint16_t)(u >> 16);
}

static inline double fb(uint16_t b) {
  const uint32_t u = (uint32_t)b << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

/* n values uniform in [-scale/2, scale/2), rounded to bf16, from an LCG. */
static inline void fill_bf(uint16_t *p, size_t n, unsigned seed, float scale) {
  for (size_t i = 0; i < n; i++) {
    seed = seed * 1664525u + 1013904223u;
    p[i] = bf(scale * ((float)(seed >> 8) / 16777216.0f - 0.5f));
  }
}

#endif
