/* tune.h - choose a GEMM kernel configuration by timing candidates on
 * the device, once per distinct GEMM, with a process cache and an optional
 * cache file; the deterministic heuristic (tpg_gemm_select_rule) when off.
 *
 * Why: a rule fitted on the model zoo is right on average, not on every
 * shape. Timing a dozen candidates of every family takes a few ms per
 * distinct GEMM; a model has tens of them, so the first graph pays well under
 * a second and later graphs (and, with a file, later processes) pay a lookup.
 *
 * The timing itself is a function the caller passes (tpg_gemm_time_fn): the
 * graph builder passes tpg_gemm_dev_time (tune_device.c, driver API),
 * tests pass a fake. This file never touches the device.
 *
 * Cache file (text, one writer at a time through `<path>.lock` + flock, each
 * write to a temporary file renamed over the old one, so a reader never sees a
 * half-written file; a file that fails validation is ignored with a warning on
 * stderr and rewritten by the next store):
 *   tpgraph-gemm-tune 1
 *   <m> <n> <k> <dtype> <epilogue> <sm_count> <arch> <variant> <us>   (one per GEMM)
 *   end <entries>
 */
#ifndef TPG_GEMM_TUNE_H
#define TPG_GEMM_TUNE_H

#include <stddef.h>
#include <stdint.h>

#include "lib/gemm/select.h"
#include "lib/tpgraph.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A distinct GEMM: Y[m,n] = epi(X[m,k] W[n,k]^T) on a device with sm_count
 * SMs of architecture `arch` (10*major+minor). dtype TPG_KDT_F16/BF16,
 * epilogue TPG_EPI_*. The cache's key: a problem's leading dimensions and
 * stream-K setting are not part of it (they do not change which kernel is
 * fastest; the pick checks the cached variant can run them). */
typedef struct tpg_gemm_key {
  int32_t m, n, k, dtype, epilogue, sm_count, arch;
} tpg_gemm_key;

/* Times one candidate: fills *us (median or mean per launch, microseconds)
 * and returns 0, or nonzero when it could not run (the candidate is skipped).
 * `launch`, `x_map`, `w_map` are what tpg_gemm_select_variant returned. */
typedef int (*tpg_gemm_time_fn)(void *ctx, const tpg_gemm_problem *p, const tpg_gemm_variant *v,
                                const tpg_kernel_launch *launch, const tpg_tma_encode *x_map,
                                const tpg_tma_encode *w_map, double *us);

enum { TPG_GEMM_TUNE_OFF = 0, TPG_GEMM_TUNE_ON = 1 };

typedef struct tpg_gemm_tune_cfg {
  int mode;                 /* TPG_GEMM_TUNE_OFF: the heuristic, nothing timed  */
  const char *cache_path;   /* borrowed; NULL: the process cache only         */
  double budget_us;         /* wall time one key may spend timing; the heuristic
                               is always timed, candidates while time is left */
  double min_gain;          /* a candidate replaces the heuristic only if at
                               least this much faster (0.03: 3%, run noise)   */
  tpg_gemm_time_fn time_fn; /* required when mode is ON                       */
  void *time_ctx;
  int family;               /* TPG_GEMM_FAMILY_*: the heuristic is
                               tpg_gemm_select_rule with it; OURS times ours
                               only, a forced family times its own candidates
                               and ours but no TMA kernel of ours where it has
                               one; a cached variant of a family not allowed is
                               timed anew */
} tpg_gemm_tune_cfg;
#define TPG_GEMM_TUNE_CFG_INIT {TPG_GEMM_TUNE_OFF, NULL, 50000.0, 0.03, NULL, NULL, TPG_GEMM_FAMILY_AUTO}

/* What a pick did, for tpg_graph_info and logs. */
typedef struct tpg_gemm_tune_info {
  int source;            /* TPG_GEMM_TUNE_FROM_*                            */
  int timed;             /* candidates timed by this call                   */
  double best_us;        /* the chosen variant's time (0 for the heuristic) */
  double heuristic_us;   /* the heuristic's time when timed now, else 0     */
  double tune_us;        /* wall time this call spent timing                */
  char variant[32];      /* chosen variant's name                           */
} tpg_gemm_tune_info;
enum {
  TPG_GEMM_TUNE_FROM_HEURISTIC = 0, /* tuning off, or nothing could be timed */
  TPG_GEMM_TUNE_FROM_PROCESS = 1,   /* process cache hit                     */
  TPG_GEMM_TUNE_FROM_FILE = 2,      /* loaded from the cache file            */
  TPG_GEMM_TUNE_FROM_TIMING = 3     /* timed by this call                    */
};

/* Pick the kernel for p: the launch and, for TMA kernels, the two map
 * descriptions (as tpg_gemm_select_rule). info may be NULL. Thread-safe.
 * Errors: TPG_ERROR_INVALID_ARGUMENT naming the argument (NULL pointers, a
 * shape the rule refuses, tuning on without time_fn). A failing cache file
 * never fails the call. */
tpg_status tpg_gemm_tune_pick(const tpg_gemm_tune_cfg *cfg, const tpg_gemm_problem *p, tpg_kernel_launch *out,
                              tpg_tma_encode *x_map, tpg_tma_encode *w_map, tpg_gemm_tune_info *info);

/* ---- one graph's GEMMs (the graph builder's policy, testable on a CPU) ----
 * A graph times only while it is being created (may_time), within a budget
 * for the whole graph; GEMMs met after the budget is spent, or outside
 * creation (a whole-graph update), take what a cache holds, else the
 * heuristic: an update never re-times. Counts what creation did for
 * tpg_graph_info. */
typedef struct tpg_gemm_tune_graph {
  tpg_gemm_tune_cfg cfg;   /* mode, family, cache_path, per-key budget, timer */
  double budget_us;        /* timing the whole graph may spend              */
  double spent_us;         /* spent so far                                  */
  int may_time;            /* 0: caches and the heuristic only               */
  int file_loaded;         /* cfg.cache_path merged into the process cache   */
  int timed, cached;       /* GEMMs timed now / found in a cache (counted picks) */
} tpg_gemm_tune_graph;

/* tpg_gemm_tune_pick under the graph's policy; `count`: add this pick to
 * timed/cached/spent (the graph counts each node once, at prepare). */
tpg_status tpg_gemm_tune_graph_pick(tpg_gemm_tune_graph *s, const tpg_gemm_problem *p, int count,
                                    tpg_kernel_launch *out, tpg_tma_encode *x_map, tpg_tma_encode *w_map);

/* Forget the process cache (tests; a device change). */
void tpg_gemm_tune_reset(void);

/* Cache file primitives (used by the pick, exposed for tests and tools).
 * load: merges the file's entries into the process cache; returns the number
 * merged, or -1 if the file was absent (0 entries) or invalid (warned). */
int tpg_gemm_tune_load(const char *path);
/* store: merges the process cache into the file under the lock (entries in
 * the file that this process does not have are kept); 0 on success. */
int tpg_gemm_tune_store(const char *path);
/* Process-cache lookup: 0 and *v when present. */
int tpg_gemm_tune_lookup(const tpg_gemm_key *key, tpg_gemm_variant *v, double *us);

#ifdef __cplusplus
}
#endif
#endif
