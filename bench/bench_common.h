/* bench_common.h - what every benchmark program shares: fail-fast checks
 * (a benchmark that hits an error has nothing to report), a monotonic clock,
 * percentiles, strict flag parsing (a typo is an error naming the flag, not a
 * silent default) and the run's metadata for JSON (GPU, driver, NCCL, commit,
 * date), so a result file says where it came from. */
#ifndef TPG_BENCH_COMMON_H
#define TPG_BENCH_COMMON_H

#include <cuda_runtime_api.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "tpgraph.h"

/* The error exit. Not exit(): in the benchmarks that drive one GPU per thread
 * (allreduce_bench, rebind_bench, tpbench) it ran the atexit handlers and the
 * CUDA / NCCL libraries' destructors while the other rank threads were still
 * inside those libraries, and a CUDA error ended in "free(): corrupted
 * unsorted chunks" and a segfault (exit code 139) instead of the message and
 * 2. Output is flushed first; the driver reclaims the process's GPU state. */
static inline void bench_die(void) {
  fflush(NULL);
  _exit(2);
}

#define MUST(call)                                                                      \
  do {                                                                                  \
    tpg_status s_ = (call);                                                             \
    if (s_ != TPG_SUCCESS) {                                                            \
      fprintf(stderr, "\n%s:%d: %s: %s\n", __FILE__, __LINE__, #call, tpg_last_error()); \
      bench_die();                                                                      \
    }                                                                                   \
  } while (0)

#define CUDA_OK(call)                                                                   \
  do {                                                                                  \
    cudaError_t e_ = (call);                                                            \
    if (e_ != cudaSuccess) {                                                            \
      fprintf(stderr, "\n%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
      bench_die();                                                                      \
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

/* p-th percentile (0..100) of sorted v[0..n), linear between neighbours. */
static inline double bench_pct_sorted(const double *v, int n, double p) {
  if (n <= 0) return 0.0;
  double r = p / 100.0 * (n - 1);
  int i = (int)r;
  return i + 1 < n ? v[i] + (r - i) * (v[i + 1] - v[i]) : v[n - 1];
}

typedef struct bench_pcts { double p10, p50, p90; } bench_pcts;

/* p10 / median / p90 of v[0..n) (sorts v). */
static inline bench_pcts bench_percentiles(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, bench_cmpd);
  bench_pcts r = {bench_pct_sorted(v, n, 10), bench_pct_sorted(v, n, 50), bench_pct_sorted(v, n, 90)};
  return r;
}

/* Parses a whole decimal integer in [lo, hi] for `flag`; on failure prints
 * "prog: flag: ..." and returns 0. */
static inline int bench_parse_long(const char *prog, const char *flag, const char *s, long lo, long hi, long *out) {
  char *end;
  errno = 0;
  long v = s ? strtol(s, &end, 10) : 0;
  if (!s || !*s || *end || errno || v < lo || v > hi) {
    fprintf(stderr, "%s: %s: '%s' is not an integer in %ld..%ld\n", prog, flag, s ? s : "", lo, hi);
    return 0;
  }
  *out = v;
  return 1;
}

static inline int bench_parse_int(const char *prog, const char *flag, const char *s, int lo, int hi, int *out) {
  long v;
  if (!bench_parse_long(prog, flag, s, lo, hi, &v)) return 0;
  *out = (int)v;
  return 1;
}

/* A byte count as nccl-tests takes it: 1024, 64K, 8M, 1G (powers of 1024). */
static inline int bench_parse_bytes(const char *prog, const char *flag, const char *s, size_t *out) {
  char *end;
  errno = 0;
  unsigned long long v = s && *s && *s != '-' ? strtoull(s, &end, 10) : 0;
  if (!s || !*s || *s == '-' || errno || end == s) goto bad;
  if (*end == 'K' || *end == 'k') v <<= 10, end++;
  else if (*end == 'M' || *end == 'm') v <<= 20, end++;
  else if (*end == 'G' || *end == 'g') v <<= 30, end++;
  if (*end || v == 0 || v > (1ull << 40)) goto bad;
  *out = (size_t)v;
  return 1;
bad:
  fprintf(stderr, "%s: %s: '%s' is not a byte count (e.g. 1024, 64K, 8M, 1G; > 0)\n", prog, flag, s ? s : "");
  return 0;
}

/* The commit the binary was built from: $TPG_COMMIT, else the GPU bundle's
 * COMMIT file beside bin/ (tools/gpu_bundle.sh), else git in the workspace
 * (bazel run) or the working directory, else "unknown". */
static inline void bench_commit(char *out, size_t cap) {
  const char *env = getenv("TPG_COMMIT");
  snprintf(out, cap, "unknown");
  if (env && *env) { snprintf(out, cap, "%s", env); return; }
  char exe[4096];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 32);
  if (n > 0) {
    exe[n] = 0;
    char *slash = strrchr(exe, '/');
    if (slash) {
      strcpy(slash, "/../COMMIT");
      FILE *f = fopen(exe, "r");
      if (f) {
        if (fgets(out, (int)cap, f)) out[strcspn(out, "\n")] = 0;
        fclose(f);
        return;
      }
    }
  }
  const char *ws = getenv("BUILD_WORKSPACE_DIRECTORY");
  char cmd[4200];
  snprintf(cmd, sizeof cmd, "git -C '%s' rev-parse --short HEAD 2>/dev/null", ws && *ws ? ws : ".");
  FILE *p = popen(cmd, "r");
  if (p) {
    char line[64];
    if (fgets(line, sizeof line, p) && line[0] != '\n') {
      line[strcspn(line, "\n")] = 0;
      snprintf(out, cap, "%s", line);
    }
    pclose(p);
  }
}

/* Writes `"meta": {...}` (no trailing comma): what ran, where, when. */
static inline void bench_meta_json(FILE *f, const char *prog, int gpus) {
  tpg_runtime_info ri;
  memset(&ri, 0, sizeof ri);
  tpg_runtime_get_info(&ri, sizeof ri);
  tpg_device_info di;
  memset(&di, 0, sizeof di);
  if (tpg_device_get_info(0, &di, sizeof di) != TPG_SUCCESS) snprintf(di.name, sizeof di.name, "none");
  for (char *c = di.name; *c; c++)
    if (*c == '"' || *c == '\\' || (unsigned char)*c < 32) *c = ' ';
  char commit[64], date[32];
  bench_commit(commit, sizeof commit);
  time_t t = time(NULL);
  struct tm tm;
  gmtime_r(&t, &tm);
  strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", &tm);
  fprintf(f,
          "\"meta\": {\"program\": \"%s\", \"gpu\": \"%s\", \"sm_arch\": %d, \"gpus\": %d, \"driver\": %d, "
          "\"nccl\": %d, \"tpgraph\": %d, \"kernels\": \"%s\", \"commit\": \"%s\", \"date\": \"%s\"}",
          prog, di.name, di.sm_arch, gpus, ri.driver_version, ri.nccl_version, ri.version, ri.kernel_archs, commit, date);
}

#endif
