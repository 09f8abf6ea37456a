/* cutlass_fake_test.c - CUTLASS GEMMs as graph nodes on the stand-in driver
 * (tests/fake): the same paths as our kernels' nodes.
 *
 * Each case's kernel and scheduler mode come from a tune cache file
 * (TPG_GEMM_TUNE=1, nothing timed), so every kernel is covered whatever the
 * fitted family table picks: the swapped 128 x 64 with stream-K (M = 64),
 * 128 x 128 with a 1 x 2 cluster and stream-K (M = 256), 128 x 256 with a
 * 2 x 1 cluster (M = 1024 split-K in two, M = 4096 data-parallel) and the
 * ping-pong 128 x 128 (2 x 1). The cluster each node or launch got must be
 * that kernel's, and none for the unclustered one. For each: create, launch,
 * rebind x, w, y (and the residual, in place), launch again, in explicit,
 * capture (no rebind there) and eager modes. The fake checks every launch of a CUTLASS kernel
 * (its argument block's plain view within bounds, every tensor map inside
 * CUTLASS's Params mapping one of its pointers: a rebind that left one
 * behind fails), and that cluster attributes divide the grid. Then every
 * driver call of one such sequence is failed in turn: nothing may leak, no
 * violation, every failure with a message.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tests/fake/tpgfake.h"
#include "tests/fake/fake_clean.h"
#include "tests/tpg_test.h"

static tpg_view V(tpg_slot s) { return (tpg_view){s, 0, 0}; }

typedef struct {
  int m, n, k;
  tpg_epilogue epi;
  const char *expect; /* substring of the kernel the rule should pick */
} gcase;

/* One GEMM (bias and residual when the epilogue takes them; the residual is
 * y itself, in place), create / launch / rebind everything / launch /
 * destroy. check: also count what the fake saw. */
static tpg_status run(const gcase *c, tpg_graph_mode mode, int check, char *msg, size_t cap) {
  const size_t xs = (size_t)c->m * c->k * 2, ws = (size_t)c->n * c->k * 2, ys = (size_t)c->m * c->n * 2;
  uint16_t *x = tpgfake_dev_alloc(0, xs), *w = tpgfake_dev_alloc(0, ws), *y = tpgfake_dev_alloc(0, ys);
  uint16_t *x2 = tpgfake_dev_alloc(0, xs), *w2 = tpgfake_dev_alloc(0, ws), *y2 = tpgfake_dev_alloc(0, ys);
  uint16_t *b = tpgfake_dev_alloc(0, (size_t)c->n * 2);
  tpg_plan *p = NULL;
  tpg_graph *g = NULL;
  tpg_status st = TPG_SUCCESS;
  tpg_slot sx, sw, sy, sb = 0;
  const long runs0 = tpgfake_cutlass_gemm_kernels();
  const int bias = c->epi != TPG_EPILOGUE_NONE, res = c->epi == TPG_EPILOGUE_RESIDUAL;
  msg[0] = '\0';
#define STEP(call)                                                   \
  do {                                                               \
    if ((st = (call)) != TPG_SUCCESS) {                              \
      snprintf(msg, cap, "%s [%s]", tpg_last_error(), #call);        \
      goto done;                                                     \
    }                                                                \
  } while (0)
  if (!x || !w || !y || !x2 || !w2 || !y2 || !b) {
    st = TPG_ERROR_OUT_OF_MEMORY;
    snprintf(msg, cap, "setup: out of memory");
    goto done;
  }
  STEP(tpg_plan_create(&p));
  STEP(tpg_plan_add_slot(p, "x", TPG_BF16, TPG_MEM_DEVICE, (size_t)c->m * c->k, &sx));
  STEP(tpg_plan_add_slot(p, "w", TPG_BF16, TPG_MEM_DEVICE, (size_t)c->n * c->k, &sw));
  STEP(tpg_plan_add_slot(p, "y", TPG_BF16, TPG_MEM_DEVICE, (size_t)c->m * c->n, &sy));
  if (bias) STEP(tpg_plan_add_slot(p, "b", TPG_BF16, TPG_MEM_DEVICE, (size_t)c->n, &sb));
  {
    tpg_gemm_desc d = TPG_GEMM_DESC_INIT;
    d.m = c->m, d.n = c->n, d.k = c->k, d.epilogue = c->epi;
    d.x = V(sx), d.w = V(sw), d.y = V(sy);
    if (bias) d.bias = V(sb);
    if (res) d.residual = V(sy);
    STEP(tpg_plan_add_gemm(p, &d, NULL, 0, NULL));
  }
  {
    tpg_binding bd[4] = {{sx, x}, {sw, w}, {sy, y}, {sb, b}};
    tpg_graph_config cfg = TPG_GRAPH_CONFIG_INIT;
    cfg.bindings = bd;
    cfg.nbindings = bias ? 4 : 3;
    cfg.mode = mode;
    STEP(tpg_graph_create(p, &cfg, &g));
  }
  STEP(tpg_graph_launch(g, NULL));
  if (mode != TPG_MODE_CAPTURE) { /* (a captured graph cannot be rebound) */
    /* everything a CUTLASS block holds a descriptor of moves at once */
    tpg_binding nb[3] = {{sx, x2}, {sw, w2}, {sy, y2}};
    STEP(tpg_graph_rebind(g, nb, 3));
  }
  STEP(tpg_graph_launch(g, NULL));
  if (check) {
    tpg_graph_info info;
    CHECK(tpg_graph_get_info(g, &info, sizeof info) == TPG_SUCCESS && info.kernel_nodes == 1);
    /* capture mode launches its captured graph: the same kernel, counted the same */
    CHECK(tpgfake_cutlass_gemm_kernels() == runs0 + 2);
  }
done:
  if (st != TPG_SUCCESS && !msg[0]) snprintf(msg, cap, "%s", tpg_last_error());
  if (g && tpg_graph_destroy(g) != TPG_SUCCESS) tpg_graph_destroy(g);
  tpg_plan_destroy(p);
  tpgfake_free(x);
  tpgfake_free(w);
  tpgfake_free(y);
  tpgfake_free(x2);
  tpgfake_free(w2);
  tpgfake_free(y2);
  tpgfake_free(b);
#undef STEP
  return st;
}

int main(int argc, char **argv) {
  /* Each case's kernel and mode are pinned through a tune cache file, so the
   * test covers every kernel, cluster shape and scheduler mode whatever
   * the fitted family table (lib/gemm/family_table.inc) picks today. */
  static const gcase cases[] = {
      {64, 1024, 512, TPG_EPILOGUE_BIAS, "coop_sw_128x64_sk"},
      {256, 1024, 512, TPG_EPILOGUE_BIAS_GELU, "coop_128x128_c1x2_sk"},
      {1024, 1024, 512, TPG_EPILOGUE_RESIDUAL, "coop_128x256_c2x1_k2"},
      {4096, 512, 256, TPG_EPILOGUE_NONE, "coop_128x256_c2x1"},
      {1024, 1024, 512, TPG_EPILOGUE_BIAS, "ping_128x128_c2x1"},
  };
  static const tpg_graph_mode modes[3] = {TPG_MODE_EXPLICIT, TPG_MODE_CAPTURE, TPG_MODE_EAGER};
  char msg[1024];
  if (tpgfake_setup(argc, argv) != 0) return 2;

  /* a bad switch is an error naming the variable */
  {
    tpg_graph *g = NULL;
    tpg_plan *p = NULL;
    tpg_graph_config cfg = TPG_GRAPH_CONFIG_INIT;
    setenv("TPG_GEMM_FAMILY", "cutlas", 1);
    CHECK(tpg_plan_create(&p) == TPG_SUCCESS);
    CHECK_ST(tpg_graph_create(p, &cfg, &g), TPG_ERROR_INVALID_ARGUMENT, "TPG_GEMM_FAMILY");
    CHECK(g == NULL);
    tpg_plan_destroy(p);
  }
  setenv("TPG_GEMM_FAMILY", "cutlass", 1);
  char path[] = "/tmp/tpg_cutlass_fake_XXXXXX";
  {
    const int fd = mkstemp(path);
    FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
    if (!f) {
      fprintf(stderr, "cutlass_fake_test: cannot write a tune cache in /tmp\n");
      return 1;
    }
    fprintf(f, "tpgraph-gemm-tune 1\n");
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i)
      fprintf(f, "%d %d %d %d %d %d %d cutlass_%s 10.0\n", cases[i].m, cases[i].n, cases[i].k, 2 /* TPG_KDT_BF16 */,
              (int)cases[i].epi, 132, 90, cases[i].expect);
    fprintf(f, "end %zu\n", sizeof cases / sizeof cases[0]);
    fclose(f);
    /* from the file, without timing anything (the fake has no clock) */
    setenv("TPG_GEMM_TUNE", "1", 1);
    setenv("TPG_GEMM_TUNE_CACHE", path, 1);
  }

  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i)
    for (int md = 0; md < 3; ++md) {
      const long ny = tpgfake_counter(TPGFAKE_C_CLUSTER_Y), nx = tpgfake_counter(TPGFAKE_C_CLUSTER_NODE),
                 lx = tpgfake_counter(TPGFAKE_C_CLUSTER_LAUNCH);
      tpgfake_reset();
      const tpg_status st = run(&cases[i], modes[md], 1, msg, sizeof msg);
      if (st) fprintf(stderr, "case %zu mode %d: %s\n", i, md, msg);
      CHECK(st == TPG_SUCCESS);
      /* the cluster shape reached the node (explicit) or the launches (capture records them, eager makes them) */
      const int cy = tpgfake_counter(TPGFAKE_C_CLUSTER_Y) > ny,
                cx = tpgfake_counter(TPGFAKE_C_CLUSTER_NODE) > nx || tpgfake_counter(TPGFAKE_C_CLUSTER_LAUNCH) > lx;
      CHECK(cy == (strstr(cases[i].expect, "c1x2") != NULL));
      CHECK(cx == (strstr(cases[i].expect, "c2x1") != NULL));
      CHECK(tpgfake_clean(cases[i].expect));
    }

  /* every driver call of one sequence failed in turn (stream-K with its
   * barrier words and a 1 x 2 cluster, and the residual in place) */
  for (int md = 0; md < 3; ++md) {
    const gcase *c = &cases[md == 0 ? 1 : 2];
    tpgfake_reset();
    CHECK(run(c, modes[md], 0, msg, sizeof msg) == TPG_SUCCESS);
    const long calls = tpgfake_calls();
    long bad = 0;
    for (long k = 1; k <= calls; k++) {
      tpgfake_reset();
      tpgfake_fail_at(k);
      const tpg_status st = run(c, modes[md], 0, msg, sizeof msg);
      char what[200];
      snprintf(what, sizeof what, "%s mode %d, fail call %ld (%s)", c->expect, md, k,
               tpgfake_failed() ? tpgfake_failed() : "-");
      if (st != TPG_SUCCESS && (!msg[0] || strstr(msg, ": ") == NULL)) {
        fprintf(stderr, "%s: failed without a message\n", what);
        bad++;
      }
      if (!tpgfake_clean(what)) bad++;
    }
    printf("CUTLASS GEMM node, %s, mode %d: %ld failure points, %ld bad\n", c->expect, md, calls, bad);
    CHECK(bad == 0);
  }
  unsetenv("TPG_GEMM_FAMILY");
  unsetenv("TPG_GEMM_TUNE");
  unsetenv("TPG_GEMM_TUNE_CACHE");
  unlink(path);
  return TPG_TEST_END();
}
