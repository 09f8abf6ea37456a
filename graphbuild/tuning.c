/* tuning.c - a graph's tuning values: tpg_graph_config's fields, each
 * overridden by its TPG_* environment variable, resolved once at creation.
 *
 * The environment stays for A/B runs and benchmarks, but is parsed
 * strictly: a value that is not a plain decimal number in range is an error
 * naming the variable, not a silent clamp (a typo would otherwise run other
 * kernels than asked). Defaults live beside what uses them (the all-reduce
 * limits in nodes/collective_select.h).
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "graphbuild/graph.h"

/* Timing one graph's GEMMs may take: 2 s covers a model's tens of distinct
 * GEMMs at a few ms each (lib/gemm/tune.h); an hour is the most we accept. */
#define TPG_GEMM_TUNE_BUDGET_DEFAULT_MS 2000
#define TPG_GEMM_TUNE_BUDGET_MAX_MS 3600000

/* $name as a decimal in [lo, hi] into *out; *out unchanged when unset or empty. */
static tpg_status env_num(const char *name, unsigned long long lo, unsigned long long hi, unsigned long long *out,
                          const char *fn) {
  const char *env = getenv(name);
  if (!env || !env[0]) return TPG_SUCCESS;
  char *end = NULL;
  errno = 0;
  unsigned long long v = strtoull(env, &end, 10);
  if (env[0] < '0' || env[0] > '9' || errno != 0 || !end || *end != '\0' || v < lo || v > hi)
    return tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn, "environment variable %s is \"%s\": expected a decimal number in "
                   "%llu..%llu (unset it for the default)", name, env, lo, hi);
  *out = v;
  return TPG_SUCCESS;
}

/* A config field: 0 is the default, else within [lo, hi]. */
static tpg_status field(const char *name, unsigned long long v, unsigned long long lo, unsigned long long hi,
                        unsigned long long dflt, unsigned long long *out, const char *fn) {
  if (v != 0 && (v < lo || v > hi))
    return tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn, "cfg->%s is %llu: expected 0 (the default) or %llu..%llu", name, v,
                   lo, hi);
  *out = v ? v : dflt;
  return TPG_SUCCESS;
}

tpg_status tpg_tuning_resolve(const tpg_graph_config *cfg, tpg_tuning *t, const char *fn) {
  const unsigned long long big = (unsigned long long)1 << 40;
  unsigned long long v;
  /* No config field (tpg_graph_config is ABI): the environment only. */
  v = TPG_SMALL_MAX_DEFAULT;
  TPG_TRY(env_num("TPG_ONESHOT_SMALL_MAX", 0, big, &v, fn));
  t->ar.small_max = (size_t)v;
  TPG_TRY(field("allreduce_push_max", cfg->allreduce_push_max, 1, big, TPG_PUSH_MAX_DEFAULT, &v, fn));
  TPG_TRY(env_num("TPG_ONESHOT_PUSH_MAX", 0, big, &v, fn));
  t->ar.push_max = (size_t)v;
  TPG_TRY(field("allreduce_twoshot_max", cfg->allreduce_twoshot_max, 1, big, TPG_TWOSHOT_MAX_DEFAULT, &v, fn));
  TPG_TRY(env_num("TPG_TWOSHOT_MAX", 0, big, &v, fn));
  t->ar.twoshot_max = (size_t)v;
  v = TPG_ROUNDS_MAX_DEFAULT; /* environment only, as the small limit */
  TPG_TRY(env_num("TPG_PUSH_ROUNDS_MAX", 0, big, &v, fn));
  t->ar.rounds_max = (size_t)v;
  if (cfg->allreduce_twoshot_blocks < 0)
    return tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn, "cfg->allreduce_twoshot_blocks is %d: expected 0 (the default) or "
                   "1..%d", cfg->allreduce_twoshot_blocks, TPG_AR_MAX_BLOCKS);
  TPG_TRY(field("allreduce_twoshot_blocks", (unsigned long long)cfg->allreduce_twoshot_blocks, 1, TPG_AR_MAX_BLOCKS,
                TPG_TWOSHOT_BLOCKS_DEFAULT, &v, fn));
  TPG_TRY(env_num("TPG_TWOSHOT_BLOCKS", 1, TPG_AR_MAX_BLOCKS, &v, fn));
  t->ar.twoshot_blocks = (unsigned)v;
  /* Stream-K: the config's TPG_STREAMK_* and the environment's 0/1/2 as the
   * selector's streamk (0 never, 1 where its rule says it pays, 2 always). */
  if (cfg->gemm_streamk != TPG_STREAMK_AUTO && cfg->gemm_streamk != TPG_STREAMK_OFF &&
      cfg->gemm_streamk != TPG_STREAMK_ALWAYS)
    return tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn, "cfg->gemm_streamk is %d: expected TPG_STREAMK_AUTO, "
                   "TPG_STREAMK_OFF or TPG_STREAMK_ALWAYS", cfg->gemm_streamk);
  v = cfg->gemm_streamk == TPG_STREAMK_OFF ? 0 : cfg->gemm_streamk == TPG_STREAMK_ALWAYS ? 2 : 1;
  TPG_TRY(env_num("TPG_GEMM_STREAMK", 0, 2, &v, fn));
  t->streamk = (int)v;
  /* The GEMM families (lib/gemm/select.h): environment only, no config field
   * (tpg_graph_config is ABI, and the switch is for A/B runs): auto (0),
   * ours (1), cutlass (2), cublaslt (3). */
  {
    const char *env = getenv("TPG_GEMM_FAMILY");
    t->gemm_family = TPG_GEMM_FAMILY_AUTO;
    if (env && env[0] && (t->gemm_family = tpg_gemm_family_parse(env)) < 0)
      return tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn, "environment variable TPG_GEMM_FAMILY is \"%s\": expected auto, "
                     "ours, cutlass or cublaslt (or 0..3; unset it for auto)", env);
  }
  const unsigned long long mib = (unsigned long long)1 << 20;
  if (cfg->pdl_prefetch < 0 || (unsigned long long)cfg->pdl_prefetch > mib)
    return tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn, "cfg->pdl_prefetch is %d: expected 0..%llu bytes",
                   cfg->pdl_prefetch, mib);
  v = (unsigned long long)cfg->pdl_prefetch;
  TPG_TRY(env_num("TPG_PDL_PREFETCH", 0, mib, &v, fn));
  t->pdl_prefetch = (int32_t)(v & ~15ull);
  /* GEMM tuning: off unless asked (the config's TPG_TUNE_*, $TPG_GEMM_TUNE 0/1) */
  if (cfg->gemm_tune != TPG_TUNE_DEFAULT && cfg->gemm_tune != TPG_TUNE_OFF && cfg->gemm_tune != TPG_TUNE_ON)
    return tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn, "cfg->gemm_tune is %d: expected TPG_TUNE_DEFAULT, TPG_TUNE_OFF "
                   "or TPG_TUNE_ON", cfg->gemm_tune);
  v = cfg->gemm_tune == TPG_TUNE_ON;
  TPG_TRY(env_num("TPG_GEMM_TUNE", 0, 1, &v, fn));
  t->gemm_tune = (int)v;
  t->gemm_tune_cache = cfg->gemm_tune_cache;
  if (cfg->gemm_tune_cache && !cfg->gemm_tune_cache[0])
    return tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn, "cfg->gemm_tune_cache is \"\": expected a file path or NULL");
  {
    const char *env = getenv("TPG_GEMM_TUNE_CACHE");
    if (env && env[0]) t->gemm_tune_cache = env;
  }
  if (cfg->gemm_tune_budget_ms < 0)
    return tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn, "cfg->gemm_tune_budget_ms is %d: expected 0 (the default) or "
                   "1..%d", cfg->gemm_tune_budget_ms, TPG_GEMM_TUNE_BUDGET_MAX_MS);
  TPG_TRY(field("gemm_tune_budget_ms", (unsigned long long)cfg->gemm_tune_budget_ms, 1, TPG_GEMM_TUNE_BUDGET_MAX_MS,
                TPG_GEMM_TUNE_BUDGET_DEFAULT_MS, &v, fn));
  TPG_TRY(env_num("TPG_GEMM_TUNE_BUDGET_MS", 1, TPG_GEMM_TUNE_BUDGET_MAX_MS, &v, fn));
  t->gemm_tune_budget_us = 1000.0 * (double)v;
  v = 1; /* environment only: the A/B switch of graphbuild/workspace.c */
  TPG_TRY(env_num("TPG_GEMM_WORKSPACE_SHARE", 0, 1, &v, fn));
  t->gemm_ws_share = (int)v;
  v = 1; /* environment only: 0 turns the bodies' programmatic edges off (materialize.c) */
  TPG_TRY(env_num("TPG_GRAPH_PDL_BODIES", 0, 1, &v, fn));
  t->pdl_bodies = (int)v;
  return TPG_SUCCESS;
}
