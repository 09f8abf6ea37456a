/* rebind_fake_test.c - a rebind that fails part-way is undone completely,
 * on the stand-in driver with two thread ranks: an NCCL
 * all-reduce x -> y followed by a memset of z (so two nodes use the rebound
 * slots, in that order). Rank 0's second child-graph swap is made to fail:
 * its rebind of {y -> y2, z -> z2} must report "(bindings restored)" with
 * the all-reduce re-captured back onto y, so the next launch writes y and z
 * again; rank 1's rebind succeeds and writes y2, z2. Then an all-gather
 * whose recv holds one rank's block, not two: refused in every mode before
 * any NCCL call (eager and capture modes skipped that check). */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/fake/tpgfake.h"
#include "tests/tpg_test.h"

#define N 64

typedef struct {
  int rank;
  tpg_comm_id id;
  int ok_rebind, restored, wrong, ag_refused;
  char msg[1024];
  pthread_barrier_t *bar;
} job;

static int all(const float *p, float v) {
  for (int i = 0; i < N; i++)
    if (p[i] != v) return 0;
  return 1;
}

static void *rank_main(void *arg) {
  job *j = arg;
  tpg_comm *comm = NULL;
  tpg_plan *p = NULL;
  tpg_graph *g = NULL;
  float *x = tpgfake_dev_alloc(j->rank, N * 4), *y = tpgfake_dev_alloc(j->rank, N * 4);
  float *y2 = tpgfake_dev_alloc(j->rank, N * 4), *z = tpgfake_dev_alloc(j->rank, N * 4);
  float *z2 = tpgfake_dev_alloc(j->rank, N * 4);
  for (int i = 0; i < N; i++) x[i] = 1.0f;
  tpg_comm_config cc = TPG_COMM_CONFIG_INIT;
  cc.device = j->rank;
  cc.rank = j->rank;
  cc.nranks = 2;
  cc.timeout_ms = 5000;
  tpg_slot sx, sy, sz;
  tpg_node ar, ms;
  if (tpg_comm_create(&j->id, &cc, &comm) || tpg_plan_create(&p) ||
      tpg_plan_add_slot(p, "x", TPG_F32, TPG_MEM_DEVICE, N, &sx) ||
      tpg_plan_add_slot(p, "y", TPG_F32, TPG_MEM_DEVICE, N, &sy) ||
      tpg_plan_add_slot(p, "z", TPG_F32, TPG_MEM_DEVICE, N, &sz)) {
    snprintf(j->msg, sizeof j->msg, "setup: %s", tpg_last_error());
    goto done;
  }
  tpg_collective_desc d = TPG_COLLECTIVE_DESC_INIT;
  d.send = (tpg_view){sx, 0, 0};
  d.recv = (tpg_view){sy, 0, 0};
  d.count = N;
  d.algo = TPG_ALGO_NCCL;
  tpg_binding b[3] = {{sx, x}, {sy, y}, {sz, z}};
  tpg_graph_config gc = TPG_GRAPH_CONFIG_INIT;
  gc.device = j->rank;
  gc.comm = comm;
  gc.bindings = b;
  gc.nbindings = 3;
  if (tpg_plan_add_collective(p, &d, NULL, 0, &ar) ||
      tpg_plan_add_memset(p, (tpg_view){sz, 0, 0}, 0x40400000u, N, &ar, 1, &ms) || /* 3.0f */
      tpg_graph_create(p, &gc, &g)) {
    snprintf(j->msg, sizeof j->msg, "create: %s", tpg_last_error());
    goto done;
  }
  /* Rank 0 fails its memset setter (the node after the re-captured
   * all-reduce); rank 1 does not. The failure is armed process-wide (the
   * fake's call counters are not per thread), so the ranks rebind in turn:
   * rank 1 running first used to take rank 0's failure. */
  pthread_barrier_wait(j->bar);
  tpg_binding nb[2] = {{sy, y2}, {sz, z2}};
  for (int turn = 0; turn < 2; turn++) {
    if (turn == j->rank) {
      if (j->rank == 0) tpgfake_fail_call("cuGraphExecMemsetNodeSetParams", 1);
      const tpg_status st = tpg_graph_rebind(g, nb, 2);
      j->ok_rebind = st == TPG_SUCCESS;
      snprintf(j->msg, sizeof j->msg, "%s", tpg_last_error());
      j->restored = strstr(j->msg, "(bindings restored)") != NULL;
      if (j->rank == 0) tpgfake_fail_call(NULL, 0);
    }
    pthread_barrier_wait(j->bar);
  }
  memset(y, 0, N * 4);
  memset(y2, 0, N * 4);
  memset(z, 0, N * 4);
  memset(z2, 0, N * 4);
  if (tpg_graph_launch(g, NULL) || tpg_comm_wait(comm, NULL)) {
    snprintf(j->msg, sizeof j->msg, "launch: %s", tpg_last_error());
    j->wrong++;
    goto done;
  }
  if (j->ok_rebind) j->wrong += !all(y2, 2.0f) + !all(z2, 3.0f) + !all(y, 0.0f) + !all(z, 0.0f);
  else j->wrong += !all(y, 2.0f) + !all(z, 3.0f) + !all(y2, 0.0f) + !all(z2, 0.0f);
  for (int mode = 0; mode < 3; mode++) { /* explicit, capture, eager */
    tpg_plan *q = NULL;
    tpg_graph *h = NULL;
    tpg_slot a, r;
    tpg_collective_desc ag = TPG_COLLECTIVE_DESC_INIT;
    ag.kind = TPG_ALL_GATHER;
    ag.count = N / 2;
    if (tpg_plan_create(&q) || tpg_plan_add_slot(q, "a", TPG_F32, TPG_MEM_DEVICE, N, &a) ||
        tpg_plan_add_slot(q, "r", TPG_F32, TPG_MEM_DEVICE, N / 2, &r)) /* needs N for 2 ranks */
      j->wrong++;
    ag.send = (tpg_view){a, 0, 0};
    ag.recv = (tpg_view){r, 0, 0};
    tpg_binding qb[2] = {{a, x}, {r, y}};
    tpg_graph_config qc = TPG_GRAPH_CONFIG_INIT;
    qc.device = j->rank;
    qc.comm = comm;
    qc.bindings = qb;
    qc.nbindings = 2;
    qc.mode = (tpg_graph_mode)mode;
    if (tpg_plan_add_collective(q, &ag, NULL, 0, NULL)) j->wrong++;
    tpg_status qs = tpg_graph_create(q, &qc, &h);
    j->ag_refused += qs == TPG_ERROR_INVALID_ARGUMENT && strstr(tpg_last_error(), "recv needs 64 elements") != NULL;
    if (qs != TPG_ERROR_INVALID_ARGUMENT) fprintf(stderr, "rank %d mode %d: %s\n", j->rank, mode, tpg_last_error());
    tpg_graph_destroy(h);
    tpg_plan_destroy(q);
  }
done:
  tpg_graph_destroy(g);
  tpg_plan_destroy(p);
  tpg_comm_destroy(comm);
  tpgfake_free(x);
  tpgfake_free(y);
  tpgfake_free(y2);
  tpgfake_free(z);
  tpgfake_free(z2);
  return NULL;
}

int main(int argc, char **argv) {
  if (tpgfake_setup(argc, argv) != 0) return 2;
  tpg_comm_id id;
  CHECK_OK(tpg_comm_id_create(&id));
  pthread_barrier_t bar;
  pthread_barrier_init(&bar, NULL, 2);
  job j[2];
  memset(j, 0, sizeof j);
  pthread_t t[2];
  tpgfake_reset();
  for (int r = 0; r < 2; r++) {
    j[r].rank = r;
    j[r].id = id;
    j[r].bar = &bar;
    pthread_create(&t[r], NULL, rank_main, &j[r]);
  }
  for (int r = 0; r < 2; r++) pthread_join(t[r], NULL);
  printf("rank 0: rebind %s: %s\nrank 1: rebind %s\n", j[0].ok_rebind ? "ok" : "failed", j[0].msg,
         j[1].ok_rebind ? "ok" : "failed");
  CHECK(!j[0].ok_rebind && j[0].restored);
  CHECK(j[1].ok_rebind);
  CHECK(j[0].wrong == 0 && j[1].wrong == 0);
  CHECK(j[0].ag_refused == 3 && j[1].ag_refused == 3);
  char why[512];
  long live = tpgfake_live(why, sizeof why);
  if (live || tpgfake_violations()) fprintf(stderr, "%ld live (%s)\n%s", live, why, tpgfake_violation_text());
  CHECK(live == 0 && tpgfake_violations() == 0);
  return TPG_TEST_END();
}
