/* bench_common.h - what every benchmark program shares: fail-fast checks
 * (a benchmark that hits an error has nothing to report), a monotonic clock
 * and the median. */
#ifndef TPG_BENCH_COMMON_H
#define TPG_BENCH_COMMON_H

#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "tpgraph.h"

#define MUST(call)                                                                      \
  do {                                                                                  \
    tpg_status s_ = (call);                                                             \
    if (s_ != TPG_SUCCESS) {                                                            \
      fprintf(stderr, "\n%s:%d: %s: %s\n", __FILE__, __LINE__, #call, tpg_last_error()); \
      exit(2);                                                                          \
    }                                                                                   \
  } while (0)

#define CUDA_OK(call)                                                                   \
  do {                                                                                  \
    cudaError_t e_ = (call);                                                            \
    if (e_ != cudaSuccess) {                                                            \
      fprintf(stderr, "\n%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
      exit(2);                                                                          \
    }                                                                                   \
  } while (0)

static inline double bench_now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e6 + ts.tv_nsec * 1e-3;
}

static inline int bench_cmpd(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* Median of v[0..n) (sorts v). */
static inline double bench_median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, bench_cmpd);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

#endif
