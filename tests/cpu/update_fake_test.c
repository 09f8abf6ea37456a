/* update_fake_test.c - the whole-graph update's checks (a)-(c) (see
 * state_test.c) through the whole public API on the stand-in driver
 * (tests/fake), plus a loop that fails
 * every driver call of a create/update/rebind/launch/destroy sequence in
 * turn and checks that nothing leaks and the fake saw no violation. */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/fake/tpgfake.h"
#include "tests/fake/fake_clean.h"
#include "tests/tpg_test.h"

#define N 64

static tpg_view V(tpg_slot s) { return (tpg_view){s, 0, 0}; }

/* slots a, b, out (device, 4N floats each), s (scratch, `sc` floats);
 * memset `target` to 1.0f (N), memset s to 2.0f (sc), memcpy s -> out (sc). */
static tpg_plan *plan_of(char target, tpg_memory s_where, size_t sc, int use_c) {
  tpg_plan *p = NULL;
  tpg_slot a, b, out, s, c;
  tpg_node m1, m2, cp;
  if (tpg_plan_create(&p)) return NULL;
  tpg_plan_add_slot(p, "a", TPG_F32, TPG_MEM_DEVICE, 4 * N, &a);
  tpg_plan_add_slot(p, "b", TPG_F32, TPG_MEM_DEVICE, 4 * N, &b);
  tpg_plan_add_slot(p, "out", TPG_F32, TPG_MEM_DEVICE, 4 * N, &out);
  tpg_plan_add_slot(p, "s", TPG_F32, s_where, sc, &s);
  tpg_plan_add_slot(p, "c", TPG_F32, TPG_MEM_DEVICE, 4 * N, &c);
  tpg_slot t = target == 'a' ? a : b;
  if (use_c) t = c;
  if (tpg_plan_add_memset(p, V(t), 0x3f800000u, N, NULL, 0, &m1) ||
      tpg_plan_add_memset(p, V(s), 0x40000000u, sc, &m1, 1, &m2) ||
      tpg_plan_add_memcpy(p, V(out), V(s), sc, &m2, 1, &cp)) {
    tpg_plan_destroy(p);
    return NULL;
  }
  return p;
}

static int count(const float *p, size_t n, float want) {
  int k = 0;
  for (size_t i = 0; i < n; i++) k += p[i] == want;
  return k;
}

/* The sequence (explicit mode). check: results are checked (no injected failure). */
static tpg_status sequence(int check, char *msg, size_t cap) {
  float *a0 = tpgfake_dev_alloc(0, 4 * N * 4), *b0 = tpgfake_dev_alloc(0, 4 * N * 4);
  float *b1 = tpgfake_dev_alloc(0, 4 * N * 4), *out = tpgfake_dev_alloc(0, 4 * N * 4);
  tpg_plan *p1 = plan_of('a', TPG_MEM_SCRATCH, N, 0), *p2 = plan_of('b', TPG_MEM_SCRATCH, 4 * N, 0);
  tpg_plan *p3 = plan_of('a', TPG_MEM_SCRATCH, N, 1), *p4 = plan_of('a', TPG_MEM_DEVICE, N, 0);
  tpg_graph *g = NULL;
  tpg_status st = TPG_SUCCESS;
  msg[0] = '\0';
#define STEP(call)                                                   \
  do {                                                               \
    if ((st = (call)) != TPG_SUCCESS) {                              \
      snprintf(msg, cap, "%s [%s]", tpg_last_error(), #call);        \
      goto done;                                                     \
    }                                                                \
  } while (0)
  if (!a0 || !b0 || !b1 || !out || !p1 || !p2 || !p3 || !p4) {
    st = TPG_ERROR_OUT_OF_MEMORY;
    snprintf(msg, cap, "setup");
    goto done;
  }
  memset(a0, 0, 4 * N * 4);
  memset(b0, 0, 4 * N * 4);
  memset(b1, 0, 4 * N * 4);
  memset(out, 0, 4 * N * 4);
  tpg_slot sa = 1, sb = 2, so = 3;
  tpg_binding bind[3] = {{sa, a0}, {sb, b0}, {so, out}};
  tpg_graph_config cfg = TPG_GRAPH_CONFIG_INIT;
  cfg.bindings = bind;
  cfg.nbindings = 3;
  STEP(tpg_graph_create(p1, &cfg, &g));
  STEP(tpg_graph_launch(g, NULL));
  /* (c) scratch -> device: refused, naming the slot; the graph unchanged. */
  if (check) {
    CHECK_ST(tpg_graph_update(g, p4, NULL, 0), TPG_ERROR_INVALID_ARGUMENT, "slot 4 (\"s\") is scratch memory");
    /* (b) a slot the new plan uses that was never bound. */
    CHECK_ST(tpg_graph_update(g, p3, NULL, 0), TPG_ERROR_INVALID_ARGUMENT, "slot \"c\" is used by the plan but not bound");
  }
  /* (a) + (c): the memset moves to b, the scratch grows 4x. */
  STEP(tpg_graph_update(g, p2, NULL, 0));
  tpg_binding rb = {sb, b1};
  STEP(tpg_graph_rebind(g, &rb, 1));
  memset(b0, 0, 4 * N * 4);
  STEP(tpg_graph_launch(g, NULL));
  STEP(tpg_graph_destroy(g));
  g = NULL;
  if (check) {
    CHECK(count(b1, N, 1.0f) == N); /* (a): the rebind reached the memset that moved to b */
    CHECK(count(b0, 4 * N, 0.0f) == 4 * N);
    CHECK(count(out, 4 * N, 2.0f) == 4 * N); /* (c): the grown scratch, all of it */
    CHECK(count(a0, N, 1.0f) == N);          /* the first launch */
  }
done:
  if (g) tpg_graph_destroy(g);
  tpg_plan_destroy(p1);
  tpg_plan_destroy(p2);
  tpg_plan_destroy(p3);
  tpg_plan_destroy(p4);
  tpgfake_free(a0);
  tpgfake_free(b0);
  tpgfake_free(b1);
  tpgfake_free(out);
  return st;
#undef STEP
}

/* A plan of one GEMM y = x w^T (bf16) and its three slots. */
static tpg_plan *gemm_plan(int m, int n, int k, tpg_slot s[3]) {
  tpg_plan *p = NULL;
  if (tpg_plan_create(&p) != TPG_SUCCESS) return NULL;
  CHECK(tpg_plan_add_slot(p, "x", TPG_BF16, TPG_MEM_DEVICE, (size_t)m * k, &s[0]) == TPG_SUCCESS);
  CHECK(tpg_plan_add_slot(p, "w", TPG_BF16, TPG_MEM_DEVICE, (size_t)n * k, &s[1]) == TPG_SUCCESS);
  CHECK(tpg_plan_add_slot(p, "y", TPG_BF16, TPG_MEM_DEVICE, (size_t)m * n, &s[2]) == TPG_SUCCESS);
  tpg_gemm_desc d = TPG_GEMM_DESC_INIT;
  d.m = m;
  d.n = n;
  d.k = k;
  d.x = V(s[0]);
  d.w = V(s[1]);
  d.y = V(s[2]);
  CHECK(tpg_plan_add_gemm(p, &d, NULL, 0, NULL) == TPG_SUCCESS);
  return p;
}

/* A TMA GEMM node's output moved by a rebind: the kernel's Y tensor map must
 * move with it (the epilogue stores through it; the fake checks that every
 * map's base is the argument block's pointer). Our kernels only (main
 * sets TPG_GEMM_FAMILY=ours); M = 128 on the fake's sm_90 then picks a TMA
 * kernel, and the count below fails the test if it ever does not. */
static void gemm_y_rebind(void) {
  enum { M = 128, NN = 256, K = 256 };
  tpgfake_reset();
  uint16_t *x = tpgfake_dev_alloc(0, M * K * 2), *w = tpgfake_dev_alloc(0, NN * K * 2);
  uint16_t *y = tpgfake_dev_alloc(0, M * NN * 2), *y2 = tpgfake_dev_alloc(0, M * NN * 2);
  tpg_graph *g = NULL;
  tpg_slot s[3];
  tpg_plan *p = gemm_plan(M, NN, K, s);
  CHECK(x && w && y && y2 && p);
  tpg_binding b[3] = {{s[0], x}, {s[1], w}, {s[2], y}};
  tpg_graph_config cfg = TPG_GRAPH_CONFIG_INIT;
  cfg.bindings = b;
  cfg.nbindings = 3;
  CHECK(tpg_graph_create(p, &cfg, &g) == TPG_SUCCESS);
  CHECK(tpg_graph_launch(g, NULL) == TPG_SUCCESS);
  tpg_binding ny = {s[2], y2};
  CHECK(tpg_graph_rebind(g, &ny, 1) == TPG_SUCCESS);
  CHECK(tpg_graph_launch(g, NULL) == TPG_SUCCESS);
  CHECK(tpgfake_tma_gemm_kernels() == 2);
  CHECK(tpg_graph_destroy(g) == TPG_SUCCESS);
  tpg_plan_destroy(p);
  tpgfake_free(x);
  tpgfake_free(w);
  tpgfake_free(y);
  tpgfake_free(y2);
  CHECK(tpgfake_clean("GEMM y rebind"));
}

/* A GEMM whose K is split over a launch-time cluster ("_kc<S>": M = 128,
 * N = 4096, K = 7168 picks 64 tiles of 128 x 64 in clusters of two on the
 * fake's 132 SMs): the graph node must carry the cluster shape
 * (cuGraphKernelNodeSetAttribute), a captured or eager launch must pass it
 * (cuLaunchKernelEx), and a failure of either call, or of any other, must
 * say why and leave nothing behind. */
static tpg_status kc_run(tpg_graph_mode mode, int check, char *msg, size_t cap) {
  enum { M = 128, NN = 4096, K = 7168 };
  tpg_status st = TPG_SUCCESS;
  uint16_t *x = tpgfake_dev_alloc(0, M * K * 2), *w = tpgfake_dev_alloc(0, (size_t)NN * K * 2);
  uint16_t *y = tpgfake_dev_alloc(0, M * NN * 2);
  tpg_plan *p = NULL;
  tpg_graph *g = NULL;
  tpg_slot s[3];
  const long nodes = tpgfake_counter(TPGFAKE_C_CLUSTER_NODE), launches = tpgfake_counter(TPGFAKE_C_CLUSTER_LAUNCH);
  msg[0] = '\0';
  if (!x || !w || !y || !(p = gemm_plan(M, NN, K, s))) {
    st = TPG_ERROR_OUT_OF_MEMORY;
    goto done;
  }
  tpg_binding b[3] = {{s[0], x}, {s[1], w}, {s[2], y}};
  tpg_graph_config cfg = TPG_GRAPH_CONFIG_INIT;
  cfg.bindings = b;
  cfg.nbindings = 3;
  cfg.mode = mode;
  if ((st = tpg_graph_create(p, &cfg, &g)) != TPG_SUCCESS) goto done;
  if ((st = tpg_graph_launch(g, NULL)) != TPG_SUCCESS) goto done;
  if (check) {
    CHECK(tpgfake_tma_gemm_kernels() == 1);
    /* explicit: the node's attribute; capture and eager: the launch's (capture records it) */
    if (mode == TPG_MODE_EXPLICIT) CHECK(tpgfake_counter(TPGFAKE_C_CLUSTER_NODE) == nodes + 1);
    else CHECK(tpgfake_counter(TPGFAKE_C_CLUSTER_LAUNCH) == launches + 1);
  }
done:
  if (st != TPG_SUCCESS) snprintf(msg, cap, "%s", tpg_last_error()); /* before the clean-up's calls */
  if (g && tpg_graph_destroy(g) != TPG_SUCCESS) tpg_graph_destroy(g);
  tpg_plan_destroy(p);
  tpgfake_free(x);
  tpgfake_free(w);
  tpgfake_free(y);
  return st;
}

static void gemm_kcluster(void) {
  static const tpg_graph_mode modes[3] = {TPG_MODE_EXPLICIT, TPG_MODE_CAPTURE, TPG_MODE_EAGER};
  static const char *const names[3] = {"explicit", "capture", "eager"};
  for (int i = 0; i < 3; i++) {
    tpgfake_reset();
    char msg[1024];
    CHECK(kc_run(modes[i], 1, msg, sizeof msg) == TPG_SUCCESS);
    CHECK(tpgfake_clean("GEMM K over a cluster"));
    const long calls = tpgfake_calls();
    long bad = 0;
    for (long k = 1; k <= calls; k++) {
      tpgfake_reset();
      tpgfake_fail_at(k);
      const tpg_status st = kc_run(modes[i], 0, msg, sizeof msg);
      char what[160];
      snprintf(what, sizeof what, "GEMM K over a cluster, fail call %ld (%s)", k,
               tpgfake_failed() ? tpgfake_failed() : "-");
      if (st != TPG_SUCCESS && (!msg[0] || strstr(msg, ": ") == NULL)) {
        fprintf(stderr, "%s: failed without a message\n", what);
        bad++;
      }
      if (!tpgfake_clean(what)) bad++;
    }
    printf("GEMM K over a cluster (%s): %ld failure points, %ld bad\n", names[i], calls, bad);
    CHECK(bad == 0);
  }
}

int main(int argc, char **argv) {
  if (tpgfake_setup(argc, argv) != 0) return 2;
  char msg[1024];
  /* These two are about our TMA kernels' maps and clusters: the fitted
   * family table may give their shapes to a CUTLASS kernel, whose nodes
   * and rebinds cutlass_fake_test covers. */
  setenv("TPG_GEMM_FAMILY", "ours", 1);
  gemm_y_rebind();
  gemm_kcluster();
  unsetenv("TPG_GEMM_FAMILY");
  tpgfake_reset();
  tpg_status st = sequence(1, msg, sizeof msg);
  if (st) fprintf(stderr, "clean run failed: %s\n", msg);
  CHECK(st == TPG_SUCCESS);
  CHECK(tpgfake_clean("clean run"));
  long calls = tpgfake_calls();
  printf("clean run: %ld driver calls, %ld violations\n", calls, tpgfake_violations());
  long failed = 0, bad = 0;
  for (long k = 1; k <= calls + 5; k++) {
    tpgfake_reset();
    tpgfake_fail_at(k);
    st = sequence(0, msg, sizeof msg);
    if (st != TPG_SUCCESS) {
      failed++;
      if (!msg[0] || strstr(msg, ": ") == NULL) {
        fprintf(stderr, "call %ld (%s): failed without a message\n", k, tpgfake_failed());
        bad++;
      }
    }
    char what[128];
    snprintf(what, sizeof what, "fail call %ld (%s)", k, tpgfake_failed() ? tpgfake_failed() : "-");
    if (!tpgfake_clean(what)) bad++;
  }
  printf("fault loop: %ld runs, %ld failed with a message, %ld bad\n", calls + 5, failed, bad);
  CHECK(bad == 0);
  return TPG_TEST_END();
}
