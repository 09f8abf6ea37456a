/* one_rank_test.c - TP = 1 as a first-class case: a plan's
 * collectives on one rank, with no comm and with a one-rank comm, on the
 * stand-in driver. On one rank a collective exchanges nothing, so:
 *   - no NCCL call is made (every NCCL collective is made to fail: the runs
 *     must still succeed) and tpg_graph_get_info counts 0 collective nodes;
 *   - an in-place collective without an epilogue is no CUDA node, and its
 *     dependents wait for its dependencies (here two of them) instead;
 *   - send -> recv is a memcpy node, exact;
 *   - an all-reduce with an epilogue is the epilogue's kernel alone, reading
 *     send (the fake checks every pointer of its argument block);
 *   - explicit, capture and eager modes, rebind and a whole-graph update give
 *     the same results; nothing is left live and the fake sees no violation.
 * And the other side: a plan sharded for more ranks (tpg_plan_set_ranks, as
 * the layer helpers set it) is refused without a comm of that many ranks, at
 * creation and at update, instead of running as one rank's share.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/fake/tpgfake.h"
#include "tests/tpg_test.h"

#define N 256
#define HID 64

static int count_wrong(const float *p, size_t n, float want) {
  int w = 0;
  for (size_t i = 0; i < n; i++) w += p[i] != want;
  return w;
}

/* a = 1 (memset), b = 2 (memset), both before an in-place all-reduce of a
 * that depends on the two; then a copy a -> c by an all-reduce, an
 * all-gather c -> d and a reduce-scatter d -> e (one rank: copies), and an
 * all-reduce of part with the residual + RMSNorm epilogue into h. */
static tpg_status build(tpg_plan **out, tpg_slot s[8], tpg_node *last) {
  tpg_plan *p = NULL;
  tpg_status st = tpg_plan_create(&p);
  if (st != TPG_SUCCESS) return st;
#define T(call)                       \
  if ((st = (call)) != TPG_SUCCESS) { \
    tpg_plan_destroy(p);              \
    return st;                        \
  }
  static const char *const names[8] = {"a", "b", "c", "d", "e", "part", "x", "h"};
  for (int i = 0; i < 8; i++) T(tpg_plan_add_slot(p, names[i], TPG_F32, TPG_MEM_DEVICE, N, &s[i]));
  tpg_node ma, mb, ar, cp, ag, rs, ep, deps[2];
  T(tpg_plan_add_memset(p, (tpg_view){s[0], 0, 0}, 0x3f800000u, N, NULL, 0, &ma)); /* 1.0f */
  T(tpg_plan_add_memset(p, (tpg_view){s[1], 0, 0}, 0x40000000u, N, NULL, 0, &mb)); /* 2.0f */
  deps[0] = ma;
  deps[1] = mb;
  tpg_collective_desc c = TPG_COLLECTIVE_DESC_INIT;
  c.send = c.recv = (tpg_view){s[0], 0, 0};
  c.count = N;
  T(tpg_plan_add_collective(p, &c, deps, 2, &ar)); /* in place: no node, waits for both memsets */
  c.recv = (tpg_view){s[2], 0, 0};
  T(tpg_plan_add_collective(p, &c, &ar, 1, &cp)); /* a -> c */
  tpg_collective_desc g = TPG_COLLECTIVE_DESC_INIT;
  g.kind = TPG_ALL_GATHER;
  g.send = (tpg_view){s[2], 0, 0};
  g.recv = (tpg_view){s[3], 0, 0};
  g.count = N;
  T(tpg_plan_add_collective(p, &g, &cp, 1, &ag));
  g.kind = TPG_REDUCE_SCATTER;
  g.send = (tpg_view){s[3], 0, 0};
  g.recv = (tpg_view){s[4], 0, 0};
  T(tpg_plan_add_collective(p, &g, &ag, 1, &rs));
  tpg_collective_desc e = TPG_COLLECTIVE_DESC_INIT;
  e.send = (tpg_view){s[5], 0, 0};
  e.recv = (tpg_view){s[7], 0, 0};
  e.count = N;
  e.hidden = HID;
  e.residual = e.residual_out = (tpg_view){s[6], 0, 0};
  e.norm_weight = (tpg_view){s[1], 0, 0};
  e.norm_eps = 1e-5f;
  T(tpg_plan_add_collective(p, &e, &rs, 1, &ep));
#undef T
  *out = p;
  *last = ep;
  return TPG_SUCCESS;
}

/* One configuration: comm NULL or a one-rank comm, a mode. */
static void run(int with_comm, tpg_graph_mode mode) {
  char what[96];
  snprintf(what, sizeof what, "%s, %s", with_comm ? "one-rank comm" : "no comm",
           mode == TPG_MODE_EXPLICIT ? "explicit" : mode == TPG_MODE_CAPTURE ? "capture" : "eager");
  tpgfake_reset();
  tpg_comm *comm = NULL;
  if (with_comm) {
    tpg_comm_id id;
    tpg_comm_config cc = TPG_COMM_CONFIG_INIT;
    cc.nranks = 1;
    CHECK_OK(tpg_comm_id_create(&id));
    CHECK_OK(tpg_comm_create(&id, &cc, &comm)); /* its warm-up all-reduce is NCCL's, before the graph */
  }
  /* Every NCCL collective fails from here on: the graph must make none. */
  tpgfake_fail_call("ncclAllReduce", 0);
  tpg_plan *p = NULL;
  tpg_slot s[8];
  tpg_node last;
  CHECK_OK(build(&p, s, &last));
  float *buf[9];
  for (int i = 0; i < 9; i++) buf[i] = tpgfake_dev_alloc(0, N * 4);
  tpg_binding b[8];
  for (int i = 0; i < 8; i++) b[i] = (tpg_binding){s[i], buf[i]};
  tpg_graph_config gc = TPG_GRAPH_CONFIG_INIT;
  gc.comm = comm;
  gc.bindings = b;
  gc.nbindings = 8;
  gc.mode = mode;
  tpg_graph *g = NULL;
  CHECK_OK(tpg_graph_create(p, &gc, &g));
  if (g) {
    tpg_graph_info info;
    CHECK_OK(tpg_graph_get_info(g, &info, sizeof info));
    CHECK(info.collective_nodes == 0 && info.child_nodes == 0);
    if (mode == TPG_MODE_EXPLICIT) {
      /* 2 memsets, 3 memcpys (all-reduce a -> c, all-gather, reduce-scatter),
       * the epilogue kernel; the in-place all-reduce is no node. */
      CHECK(info.nodes == 6 && info.memset_nodes == 2 && info.memcpy_nodes == 3 && info.kernel_nodes == 1);
      if (info.nodes != 6)
        fprintf(stderr, "%s: %d nodes (%d memset, %d memcpy, %d kernel, %d empty)\n", what, info.nodes,
                info.memset_nodes, info.memcpy_nodes, info.kernel_nodes, info.empty_nodes);
    }
    for (int round = 0; round < 3; round++) {
      float *e = buf[round == 1 ? 8 : 4];
      if (round == 1) { /* rebind the last copy's recv (explicit and eager) */
        tpg_binding nb = {s[4], buf[8]};
        tpg_status rs = tpg_graph_rebind(g, &nb, 1);
        if (mode == TPG_MODE_CAPTURE) {
          CHECK(rs == TPG_ERROR_UNSUPPORTED);
          e = buf[4];
        } else {
          CHECK_OK(rs);
        }
      }
      if (round == 2 && mode == TPG_MODE_EXPLICIT) { /* update back to e */
        tpg_binding nb = {s[4], buf[4]};
        CHECK_OK(tpg_graph_update(g, NULL, &nb, 1));
      } else if (round == 2 && mode == TPG_MODE_EAGER) {
        tpg_binding nb = {s[4], buf[4]};
        CHECK_OK(tpg_graph_rebind(g, &nb, 1));
      }
      if (round == 2) e = buf[4];
      for (int i = 2; i < 5; i++) memset(buf[i], 0, N * 4);
      memset(buf[8], 0, N * 4);
      CHECK_OK(tpg_graph_launch(g, NULL));
      int w = count_wrong(buf[0], N, 1.0f) + count_wrong(buf[2], N, 1.0f) + count_wrong(buf[3], N, 1.0f) +
              count_wrong(e, N, 1.0f);
      CHECK(w == 0);
      if (w) fprintf(stderr, "%s, round %d: %d wrong elements\n", what, round, w);
    }
  }
  char why[256];
  CHECK_OK(tpg_graph_destroy(g));
  tpg_plan_destroy(p);
  CHECK_OK(tpg_comm_destroy(comm));
  for (int i = 0; i < 9; i++) tpgfake_free(buf[i]);
  long live = tpgfake_live(why, sizeof why), v = tpgfake_violations();
  CHECK(live == 0 && v == 0);
  if (live || v) fprintf(stderr, "%s: %ld live (%s), %ld violations: %s\n", what, live, why, v, tpgfake_violation_text());
  CHECK(tpgfake_failed() == NULL); /* no NCCL collective was attempted */
  printf("%s: %s\n", what, tpg_t_fail ? "FAILED so far" : "ok");
  tpgfake_fail_call(NULL, 0);
}

static void sharded_needs_its_comm(void) {
  tpgfake_reset();
  tpg_plan *p = NULL, *q = NULL;
  tpg_slot s[8];
  tpg_node last;
  CHECK_OK(build(&p, s, &last));
  CHECK_OK(build(&q, s, &last)); /* the same plan, said to be sharded for 2 ranks */
  CHECK_ST(tpg_plan_set_ranks(NULL, 2), TPG_ERROR_INVALID_ARGUMENT, "plan is NULL");
  CHECK_ST(tpg_plan_set_ranks(q, 0), TPG_ERROR_INVALID_ARGUMENT, "nranks is 0");
  CHECK_OK(tpg_plan_set_ranks(q, 2));
  CHECK_OK(tpg_plan_set_ranks(q, 2)); /* the same count again */
  CHECK_ST(tpg_plan_set_ranks(q, 4), TPG_ERROR_INVALID_ARGUMENT, "already sharded for 2 ranks");
  float *buf[8];
  tpg_binding b[8];
  for (int i = 0; i < 8; i++) buf[i] = tpgfake_dev_alloc(0, N * 4);
  for (int i = 0; i < 8; i++) b[i] = (tpg_binding){s[i], buf[i]};
  tpg_graph_config gc = TPG_GRAPH_CONFIG_INIT;
  gc.bindings = b;
  gc.nbindings = 8;
  tpg_graph *g = (tpg_graph *)&gc; /* must come back NULL */
  CHECK_ST(tpg_graph_create(q, &gc, &g), TPG_ERROR_INVALID_ARGUMENT, "cfg->comm is NULL but the plan's 5 collectives are sharded for 2 ranks");
  CHECK(g == NULL);
  tpg_comm_id id;
  tpg_comm_config cc = TPG_COMM_CONFIG_INIT;
  cc.nranks = 1;
  tpg_comm *one = NULL;
  CHECK_OK(tpg_comm_id_create(&id));
  CHECK_OK(tpg_comm_create(&id, &cc, &one));
  gc.comm = one;
  CHECK_ST(tpg_graph_create(q, &gc, &g), TPG_ERROR_INVALID_ARGUMENT, "cfg->comm has 1 ranks but the plan's collectives are sharded for 2");
  CHECK(g == NULL);
  /* A graph of the unsharded plan takes no update to the sharded one, and
   * keeps working after the refusal. */
  gc.comm = NULL;
  CHECK_OK(tpg_graph_create(p, &gc, &g));
  CHECK_ST(tpg_graph_update(g, q, NULL, 0), TPG_ERROR_INVALID_ARGUMENT, "the graph's comm is NULL but");
  memset(buf[4], 0, N * 4);
  CHECK_OK(tpg_graph_launch(g, NULL));
  CHECK(count_wrong(buf[4], N, 1.0f) == 0);
  CHECK_OK(tpg_graph_destroy(g));
  /* The helpers say it: an MLP sharded for 2, and a row-parallel layer for 2
   * added to a plan sharded for 4 (refused, the plan as it was). */
  tpg_mlp_desc md = TPG_MLP_DESC_INIT;
  md.hidden = 64;
  md.ffn = 256;
  md.rank = 1;
  md.nranks = 2;
  tpg_plan *mp = NULL;
  CHECK_OK(tpg_plan_mlp(&md, &mp));
  gc.bindings = NULL;
  gc.nbindings = 0;
  CHECK_ST(tpg_graph_create(mp, &gc, &g), TPG_ERROR_INVALID_ARGUMENT, "sharded for 2 ranks");
  tpg_plan_destroy(mp);
  tpg_plan *lp = NULL;
  tpg_slot x, w, y;
  CHECK_OK(tpg_plan_create(&lp));
  CHECK_OK(tpg_plan_add_slot(lp, "x", TPG_BF16, TPG_MEM_DEVICE, 32, &x));
  CHECK_OK(tpg_plan_add_slot(lp, "w", TPG_BF16, TPG_MEM_DEVICE, 64 * 32, &w));
  CHECK_OK(tpg_plan_add_slot(lp, "y", TPG_BF16, TPG_MEM_DEVICE, 64, &y));
  CHECK_OK(tpg_plan_set_ranks(lp, 4));
  tpg_linear_desc ld = TPG_LINEAR_DESC_INIT;
  ld.kind = TPG_LINEAR_ROW;
  ld.nranks = 2;
  ld.in_features = 64;
  ld.out_features = 64;
  ld.x = (tpg_view){x, 0, 0};
  ld.w = (tpg_view){w, 0, 0};
  ld.y = (tpg_view){y, 0, 0};
  tpg_node ln = 0;
  CHECK_ST(tpg_plan_add_linear(lp, &ld, NULL, 0, &ln), TPG_ERROR_INVALID_ARGUMENT, "tpg_plan_add_linear: nranks is 2 but the plan is already sharded for 4 ranks");
  int nodes = -1;
  CHECK_OK(tpg_plan_get_stats(lp, &nodes, NULL, NULL));
  CHECK(nodes == 0 && ln == 0);
  ld.nranks = 4;
  ld.in_features = 128; /* in / 4 = 32 */
  CHECK_OK(tpg_plan_add_linear(lp, &ld, NULL, 0, &ln));
  tpg_plan_destroy(lp);
  tpg_plan_destroy(p);
  tpg_plan_destroy(q);
  CHECK_OK(tpg_comm_destroy(one));
  for (int i = 0; i < 8; i++) tpgfake_free(buf[i]);
  char why[256];
  long live = tpgfake_live(why, sizeof why);
  CHECK(live == 0 && tpgfake_violations() == 0);
  if (live) fprintf(stderr, "sharded: %ld live (%s)\n", live, why);
  printf("sharded plan without its comm: %s\n", tpg_t_fail ? "FAILED so far" : "ok");
}

int main(int argc, char **argv) {
  if (tpgfake_setup(argc, argv) != 0) return 2;
  for (int with_comm = 0; with_comm < 2; with_comm++)
    for (int mode = 0; mode < 3; mode++) run(with_comm, (tpg_graph_mode)mode);
  sharded_needs_its_comm();
  return TPG_TEST_END();
}
