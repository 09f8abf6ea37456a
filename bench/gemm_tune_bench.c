/* gemm_tune_bench.c - the GEMM tuner on the device, end to end: the driver-API
 * timer (lib/gemm/tune_device.c), the pick, the process cache and the cache
 * file, on real model shapes, before the graph builder relies on them.
 *
 *   gemm_tune_bench [--cache PATH] [--budget-ms B] [--reps R] [--m 1,16,...]
 *
 * For every shape: the variant chosen, how many candidates were timed, the
 * tuning time, and the tuner's own times of the heuristic and of the winner
 * (cold L2, median of R). Then the same keys again: all must be process-cache
 * hits, in microseconds. With --cache, a second run of the program must find
 * every key in the file (source "file") and time nothing.
 * Exit status 1 if a pick fails, if tuning on a shape timed nothing (the timer
 * is broken), or if the second pass is not all hits.
 */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench_common.h"
#include "kernels/tpg_kargs.h"
#include "lib/gemm/tune_device.h"

/* Llama-3 70B at TP 2 and Llama-3 8B at TP 1 (N, K, epilogue): the shapes of
 * tpbench's two layer sizes plus their attention projections. */
static const int kShapes[][3] = {
    {5120, 8192, TPG_EPI_NONE},     {8192, 4096, TPG_EPI_NONE},     {14336, 8192, TPG_EPI_SWIGLU},
    {8192, 14336, TPG_EPI_NONE},    {6144, 4096, TPG_EPI_NONE},     {4096, 4096, TPG_EPI_NONE},
    {14336, 4096, TPG_EPI_SWIGLU},  {4096, 14336, TPG_EPI_RESIDUAL},
};

static const char *const kSource[] = {"heuristic", "process", "file", "timed"};

int main(int argc, char **argv) {
  const char *cache = NULL;
  double budget_ms = 50;
  int reps = 5, nm = 0, i, j, fails = 0;
  int ms[16] = {1, 16, 64, 128, 512, 1024};
  nm = 6;
  for (i = 1; i < argc; ++i) {
    if (!strcmp(argv[i], "--cache") && i + 1 < argc) cache = argv[++i];
    else if (!strcmp(argv[i], "--budget-ms") && i + 1 < argc) budget_ms = atof(argv[++i]);
    else if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--m") && i + 1 < argc) {
      char *p = argv[++i];
      nm = 0;
      while (*p && nm < 16) {
        ms[nm++] = (int)strtol(p, &p, 10);
        if (*p == ',') ++p;
      }
    } else {
      fprintf(stderr, "usage: %s [--cache PATH] [--budget-ms B] [--reps R] [--m 1,16,...]\n", argv[0]);
      return 2;
    }
  }
  int dev = 0, sms = 0, major = 0, minor = 0;
  CUDA_OK(cudaSetDevice(dev));
  CUDA_OK(cudaFree(0)); /* the primary context, current on this thread: the timer uses it */
  CUDA_OK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  CUDA_OK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
  CUDA_OK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev));
  tpg_gemm_dev_timer *tm = NULL;
  MUST(tpg_gemm_dev_timer_create(NULL, reps, &tm));
  tpg_gemm_tune_cfg c = TPG_GEMM_TUNE_CFG_INIT;
  c.mode = TPG_GEMM_TUNE_ON;
  c.cache_path = cache;
  c.budget_us = budget_ms * 1e3;
  c.time_fn = tpg_gemm_dev_time;
  c.time_ctx = tm;
  printf("device: %d SMs, sm_%d%d; budget %.0f ms a key, %d reps; cache %s\n", sms, major, minor, budget_ms, reps,
         cache ? cache : "(process only)");
  printf("%5s %6s %6s %-9s %-16s %-9s %5s %9s %9s %9s %7s\n", "M", "N", "K", "epi", "variant", "source", "timed",
         "tune_ms", "heur_us", "best_us", "gain");
  double total_ms = 0;
  int timed_keys = 0;
  for (int pass = 0; pass < 2; ++pass) {
    double pass_us = bench_now_us();
    int hits = 0, keys = 0;
    for (i = 0; i < (int)(sizeof kShapes / sizeof kShapes[0]); ++i)
      for (j = 0; j < nm; ++j) {
        const tpg_gemm_problem k = tpg_gemm_problem_make(ms[j], kShapes[i][0], kShapes[i][1], TPG_KDT_BF16,
                                                         kShapes[i][2], major * 10 + minor, sms);
        tpg_kernel_launch L;
        tpg_tma_encode xm, wm;
        tpg_gemm_tune_info info;
        ++keys;
        if (tpg_gemm_tune_pick(&c, &k, &L, &xm, &wm, &info) != TPG_SUCCESS) {
          printf("FAIL pick %dx%dx%d: %s\n", k.m, k.n, k.k, tpg_last_error());
          ++fails;
          continue;
        }
        if (pass == 1) {
          hits += info.source == TPG_GEMM_TUNE_FROM_PROCESS || info.source == TPG_GEMM_TUNE_FROM_FILE;
          continue;
        }
        if (info.source == TPG_GEMM_TUNE_FROM_TIMING) ++timed_keys;
        if (info.source == TPG_GEMM_TUNE_FROM_HEURISTIC) {
          printf("FAIL %dx%dx%d: tuning timed nothing (%s)\n", k.m, k.n, k.k, tpg_last_error());
          ++fails;
        }
        total_ms += info.tune_us / 1e3;
        printf("%5d %6d %6d %-9d %-16s %-9s %5d %9.2f %9.1f %9.1f %7.3f\n", k.m, k.n, k.k, k.epilogue, info.variant,
               kSource[info.source], info.timed, info.tune_us / 1e3, info.heuristic_us, info.best_us,
               info.heuristic_us > 0 && info.best_us > 0 ? info.heuristic_us / info.best_us : 0.0);
      }
    pass_us = bench_now_us() - pass_us;
    if (pass == 0)
      printf("pass 1: %d keys, %d timed now, %.1f ms tuning in all (%.1f ms wall)\n", keys, timed_keys, total_ms,
             pass_us / 1e3);
    else {
      printf("pass 2: %d of %d keys from the cache, %.1f us wall in all\n", hits, keys, pass_us);
      if (hits != keys) ++fails;
    }
  }
  tpg_gemm_dev_timer_destroy(tm);
  printf("%s\n", fails ? "FAILED" : "passed");
  return fails ? 1 : 0;
}
