/* config_test.c - tpg_graph_config's ABI and tuning rules, on a machine
 * without a GPU (every refusal here comes before the driver is touched; an
 * accepted config then stops at TPG_ERROR_NO_DRIVER):
 * - a config from an older, smaller header (tpgraph 0.2.0, before the tuning
 *   fields) is accepted, the rest read as 0; a larger size or a garbage
 *   version is refused, naming the field;
 * - tuning fields out of range are refused, naming the field;
 * - the TPG_* environment overrides are parsed strictly: garbage, a
 *   trailing suffix, a sign, or a value out of range is an error naming the
 *   variable (it used to be a silent clamp or atoi's 0).
 */
#define _POSIX_C_SOURCE 200809L
#include <stddef.h>
#include <stdlib.h>

#include "tests/tpg_test.h"

static tpg_plan *p;
static tpg_binding bind[2];

static tpg_status create(const tpg_graph_config *cfg) {
  tpg_graph *g = (tpg_graph *)0x1;
  tpg_status st = tpg_graph_create(p, cfg, &g);
  if (g) tpg_graph_destroy(g);
  return st;
}

static tpg_graph_config base(void) {
  tpg_graph_config cfg = TPG_GRAPH_CONFIG_INIT;
  cfg.bindings = bind;
  cfg.nbindings = 2;
  return cfg;
}

int main(void) {
  static float fake[64] __attribute__((aligned(16)));
  tpg_slot a, b;
  CHECK_OK(tpg_plan_create(&p));
  CHECK_OK(tpg_plan_add_slot(p, "a", TPG_F32, TPG_MEM_DEVICE, 32, &a));
  CHECK_OK(tpg_plan_add_slot(p, "b", TPG_F32, TPG_MEM_DEVICE, 32, &b));
  tpg_view va = {a, 0, 0}, vb = {b, 0, 0};
  CHECK_OK(tpg_plan_add_memcpy(p, va, vb, 32, NULL, 0, NULL));
  bind[0] = (tpg_binding){a, fake};
  bind[1] = (tpg_binding){b, fake + 32};
  tpg_runtime_info ri;
  CHECK_OK(tpg_runtime_get_info(&ri, sizeof ri));
  const tpg_status past = ri.driver_version > 0 ? TPG_SUCCESS : TPG_ERROR_NO_DRIVER; /* what an accepted config meets */
  if (ri.driver_version > 0) printf("config_test: a driver is present; accepted configs may get further\n");
  tpg_graph_config cfg = base();
  if (past == TPG_ERROR_NO_DRIVER) CHECK_ST(create(&cfg), past, "");

  /* ABI: the 0.2.0 size (through flags) is accepted, its tail zero. */
  cfg = base();
  cfg.size = offsetof(tpg_graph_config, flags) + sizeof(unsigned);
  cfg.allreduce_twoshot_blocks = -5; /* beyond the old size: never read */
  if (past == TPG_ERROR_NO_DRIVER) CHECK_ST(create(&cfg), past, "");
  cfg.size = offsetof(tpg_graph_config, flags); /* cuts a field */
  CHECK_ST(create(&cfg), TPG_ERROR_INVALID_ARGUMENT, "cfg was not initialised with TPG_GRAPH_CONFIG_INIT");
  cfg = base();
  cfg.size = sizeof cfg + 8; /* a newer header than this library */
  CHECK_ST(create(&cfg), TPG_ERROR_INVALID_ARGUMENT, "size");
  cfg = base();
  cfg.version = 0x7fffffff;
  CHECK_ST(create(&cfg), TPG_ERROR_INVALID_ARGUMENT, "cfg->version is 2147483647");
  cfg.version = 7;
  CHECK_ST(create(&cfg), TPG_ERROR_INVALID_ARGUMENT, "cfg->version is 7");

  /* Tuning fields. */
  cfg = base();
  cfg.allreduce_twoshot_blocks = 129;
  CHECK_ST(create(&cfg), TPG_ERROR_INVALID_ARGUMENT, "cfg->allreduce_twoshot_blocks is 129");
  cfg.allreduce_twoshot_blocks = -1;
  CHECK_ST(create(&cfg), TPG_ERROR_INVALID_ARGUMENT, "cfg->allreduce_twoshot_blocks is -1");
  cfg = base();
  cfg.gemm_streamk = 3;
  CHECK_ST(create(&cfg), TPG_ERROR_INVALID_ARGUMENT, "cfg->gemm_streamk is 3");
  cfg = base();
  cfg.pdl_prefetch = (1 << 20) + 16;
  CHECK_ST(create(&cfg), TPG_ERROR_INVALID_ARGUMENT, "cfg->pdl_prefetch");
  cfg = base();
  cfg.gemm_tune = 3;
  CHECK_ST(create(&cfg), TPG_ERROR_INVALID_ARGUMENT, "cfg->gemm_tune is 3");
  cfg = base();
  cfg.gemm_tune_budget_ms = -1;
  CHECK_ST(create(&cfg), TPG_ERROR_INVALID_ARGUMENT, "cfg->gemm_tune_budget_ms is -1");
  cfg.gemm_tune_budget_ms = 3600001;
  CHECK_ST(create(&cfg), TPG_ERROR_INVALID_ARGUMENT, "cfg->gemm_tune_budget_ms is 3600001");
  cfg = base();
  cfg.gemm_tune_cache = "";
  CHECK_ST(create(&cfg), TPG_ERROR_INVALID_ARGUMENT, "cfg->gemm_tune_cache");
  /* the size before the GEMM tuning fields (through pdl_prefetch) is accepted: they are never read */
  cfg = base();
  cfg.size = offsetof(tpg_graph_config, pdl_prefetch) + sizeof(int);
  cfg.gemm_tune = 99;
  if (past == TPG_ERROR_NO_DRIVER) CHECK_ST(create(&cfg), past, "");
  cfg = base();
  cfg.allreduce_push_max = (size_t)1 << 41;
  CHECK_ST(create(&cfg), TPG_ERROR_INVALID_ARGUMENT, "cfg->allreduce_push_max");
  cfg = base();
  cfg.allreduce_push_max = 4096;
  cfg.allreduce_twoshot_max = 1 << 20;
  cfg.allreduce_twoshot_blocks = 64;
  cfg.gemm_streamk = TPG_STREAMK_OFF;
  cfg.pdl_prefetch = 4096;
  cfg.gemm_tune = TPG_TUNE_ON;
  cfg.gemm_tune_cache = "/tmp/tpg_config_test_tune.txt";
  cfg.gemm_tune_budget_ms = 500;
  if (past == TPG_ERROR_NO_DRIVER) CHECK_ST(create(&cfg), past, "");

  /* The environment, strictly. */
  static const struct { const char *var, *val; } bad[] = {
      {"TPG_TWOSHOT_BLOCKS", "12x"}, {"TPG_TWOSHOT_BLOCKS", "0"},     {"TPG_TWOSHOT_BLOCKS", "500"},
      {"TPG_TWOSHOT_BLOCKS", "-3"},  {"TPG_ONESHOT_PUSH_MAX", "2MiB"}, {"TPG_ONESHOT_PUSH_MAX", " 5"},
      {"TPG_TWOSHOT_MAX", "1e6"},    {"TPG_GEMM_STREAMK", "3"},       {"TPG_GEMM_STREAMK", "yes"},
      {"TPG_PDL_PREFETCH", "99999999999999999999999"}, {"TPG_GEMM_TUNE", "2"}, {"TPG_GEMM_TUNE", "on"},
      {"TPG_GEMM_TUNE_BUDGET_MS", "0"}, {"TPG_GEMM_TUNE_BUDGET_MS", "3600001"}, {"TPG_GEMM_TUNE_BUDGET_MS", "1s"},
      {"TPG_GEMM_WORKSPACE_SHARE", "2"}, {"TPG_GEMM_WORKSPACE_SHARE", "no"},
      {"TPG_GRAPH_PDL_BODIES", "2"},     {"TPG_GRAPH_PDL_BODIES", "yes"},
  };
  cfg = base();
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    setenv(bad[i].var, bad[i].val, 1);
    CHECK_ST(create(&cfg), TPG_ERROR_INVALID_ARGUMENT, bad[i].var);
    CHECK(strstr(tpg_last_error(), bad[i].val) != NULL);
    unsetenv(bad[i].var);
  }
  static const struct { const char *var, *val; } good[] = {
      {"TPG_TWOSHOT_BLOCKS", "96"}, {"TPG_ONESHOT_PUSH_MAX", "2097152"}, {"TPG_TWOSHOT_MAX", "0"},
      {"TPG_GEMM_STREAMK", "0"},    {"TPG_PDL_PREFETCH", "4096"},         {"TPG_GEMM_STREAMK", ""},
      {"TPG_GEMM_TUNE", "1"},       {"TPG_GEMM_TUNE_BUDGET_MS", "100"},    {"TPG_GEMM_TUNE_CACHE", "/tmp/x"},
      {"TPG_GEMM_WORKSPACE_SHARE", "0"}, {"TPG_GRAPH_PDL_BODIES", "1"},
  };
  for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
    setenv(good[i].var, good[i].val, 1);
    if (past == TPG_ERROR_NO_DRIVER) CHECK_ST(create(&cfg), past, "");
    unsetenv(good[i].var);
  }
  /* The message names the public function once (no "tpg_graph_create: tpg_graph_create:"). */
  setenv("TPG_TWOSHOT_BLOCKS", "x", 1);
  create(&cfg);
  CHECK(strncmp(tpg_last_error(), "tpg_graph_create: ", 18) == 0);
  CHECK(strstr(tpg_last_error() + 1, "tpg_graph_create:") == NULL);
  unsetenv("TPG_TWOSHOT_BLOCKS");
  cfg.nbindings = 1;
  create(&cfg);
  CHECK(strstr(tpg_last_error() + 1, "tpg_graph_create:") == NULL);

  tpg_plan_destroy(p);
  return TPG_TEST_END();
}
