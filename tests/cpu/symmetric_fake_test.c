/* symmetric_fake_test.c - TPG_GRAPH_NCCL_SYMMETRIC on tpgraph's non-blocking
 * communicators, through the public API on the stand-in driver.
 *
 *   symmetric_fake_test <libcuda_fake.so>
 *
 * The stand-in NCCL registers a window the way NCCL 2.28.9 does on a
 * non-blocking comm: ncclCommWindowRegister returns ncclSuccess while the
 * registration still runs (the window handle appears two polls later), and
 * any call on the comm before then is refused and counted as a violation.
 * Code that trusts the success (what made the flag fail on the GPU machine)
 * fails here: the second window's registration or the all-reduce is refused.
 * Two ranks, one thread each; every scratch slot a collective uses becomes a
 * window; the sums, the absence of violations and of leaks are checked, and
 * the same with each NCCL window call failing in turn (both ranks end in an
 * error, nothing leaks).
 */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/fake/tpgfake.h"
#include "tests/tpg_test.h"

#define N 512

typedef struct {
  int rank, timeout_ms;
  tpg_comm_id id;
  tpg_status create, run;
  int wrong;
  char msg[256];
} job;

static void *rank_main(void *arg) {
  job *j = arg;
  tpg_comm *c = NULL;
  tpg_comm_config cc = TPG_COMM_CONFIG_INIT;
  cc.device = cc.rank = j->rank;
  cc.nranks = 2;
  cc.timeout_ms = j->timeout_ms;
  float *in = tpgfake_dev_alloc(j->rank, N * 4), *out = tpgfake_dev_alloc(j->rank, N * 4);
  for (int i = 0; i < N; i++) {
    in[i] = (float)(i % 7) + (float)j->rank * 100.0f;
    out[i] = -1.0f;
  }
  tpg_plan *p = NULL;
  tpg_graph *g = NULL;
  j->create = j->run = TPG_ERROR_INTERNAL;
  j->wrong = -1;
  j->msg[0] = '\0';
  tpg_status st = tpg_comm_create(&j->id, &cc, &c);
  if (st == TPG_SUCCESS) st = tpg_plan_create(&p);
  if (st == TPG_SUCCESS) {
    /* in (bound) -> x (scratch) -> y (scratch) -> out (bound), three
     * all-reduces (the stand-in computes NCCL's, not our kernels): two
     * windows per rank, a registration followed by another call on the
     * comm, and out = 4 x the sum of the inputs. */
    tpg_slot is, xs, ys, os;
    tpg_node ar1, ar2;
    tpg_plan_add_slot(p, "in", TPG_F32, TPG_MEM_DEVICE, N, &is);
    tpg_plan_add_slot(p, "x", TPG_F32, TPG_MEM_SCRATCH, N, &xs);
    tpg_plan_add_slot(p, "y", TPG_F32, TPG_MEM_SCRATCH, N, &ys);
    tpg_plan_add_slot(p, "out", TPG_F32, TPG_MEM_DEVICE, N, &os);
    tpg_collective_desc d = TPG_COLLECTIVE_DESC_INIT;
    d.send = (tpg_view){is, 0, 0};
    d.recv = (tpg_view){xs, 0, 0};
    d.count = N;
    d.algo = TPG_ALGO_NCCL;
    tpg_plan_add_collective(p, &d, NULL, 0, &ar1);
    d.send = (tpg_view){xs, 0, 0};
    d.recv = (tpg_view){ys, 0, 0};
    tpg_plan_add_collective(p, &d, &ar1, 1, &ar2);
    d.send = (tpg_view){ys, 0, 0};
    d.recv = (tpg_view){os, 0, 0};
    tpg_plan_add_collective(p, &d, &ar2, 1, NULL);
    tpg_binding b[2] = {{is, in}, {os, out}};
    tpg_graph_config gc = TPG_GRAPH_CONFIG_INIT;
    gc.device = j->rank;
    gc.comm = c;
    gc.bindings = b;
    gc.nbindings = 2;
    gc.flags = TPG_GRAPH_NCCL_SYMMETRIC;
    st = j->create = tpg_graph_create(p, &gc, &g);
    if (st == TPG_SUCCESS) st = tpg_graph_launch(g, NULL);
    if (st == TPG_SUCCESS) st = tpg_comm_wait(c, NULL);
    j->run = st;
    if (st == TPG_SUCCESS) {
      j->wrong = 0;
      for (int i = 0; i < N; i++) {
        float want = 4.0f * (2.0f * (float)(i % 7) + 100.0f);
        if (out[i] != want && j->wrong++ < 2)
          fprintf(stderr, "rank %d: out[%d] = %g, want %g\n", j->rank, i, (double)out[i], (double)want);
      }
    }
  }
  if (st != TPG_SUCCESS) snprintf(j->msg, sizeof j->msg, "%s", tpg_last_error());
  tpg_graph_destroy(g);
  tpg_plan_destroy(p);
  tpg_comm_destroy(c);
  tpgfake_free(in);
  tpgfake_free(out);
  return NULL;
}

/* timeout_ms: 10 s for the run that must succeed (valgrind serializes the
 * threads), 0.5 s where a failed peer ends the other rank by the deadline. */
static void run2(job *j, int timeout_ms) {
  tpg_comm_id id;
  tpg_comm_id_create(&id);
  pthread_t t[2];
  for (int r = 0; r < 2; r++) {
    memset(&j[r], 0, sizeof j[r]);
    j[r].rank = r;
    j[r].timeout_ms = timeout_ms;
    j[r].id = id;
    pthread_create(&t[r], NULL, rank_main, &j[r]);
  }
  for (int r = 0; r < 2; r++) pthread_join(t[r], NULL);
}

int main(int argc, char **argv) {
  if (tpgfake_setup(argc, argv) != 0) return 2;
  char why[512];
  tpgfake_reset();
  long base = tpgfake_live(why, sizeof why);
  job j[2];
  run2(j, 10000);
  for (int r = 0; r < 2; r++) {
    if (j[r].run != TPG_SUCCESS) printf("rank %d: %s\n", r, j[r].msg);
    CHECK(j[r].create == TPG_SUCCESS);
    CHECK(j[r].run == TPG_SUCCESS);
    CHECK(j[r].wrong == 0);
  }
  if (tpgfake_violations()) printf("violations: %s\n", tpgfake_violation_text());
  CHECK(tpgfake_violations() == 0);
  CHECK(tpgfake_live(why, sizeof why) == base);
  printf("symmetric windows on non-blocking comms: create %s, sums %s\n",
         j[0].create == TPG_SUCCESS && j[1].create == TPG_SUCCESS ? "ok" : "FAILED",
         j[0].wrong == 0 && j[1].wrong == 0 ? "ok" : "WRONG");

  /* ncclMemAlloc and ncclCommWindowRegister failing on one rank, each call in
   * turn: the error is reported, the other rank ends by its deadline, nothing
   * leaks and nothing is misused. (The whole-run fault loops of
   * fault_tier_test cover the rest of graph creation.) */
  static const char *const calls[] = {"ncclMemAlloc", "ncclCommWindowRegister"};
  int leaks = 0, viol = 0, clean_errors = 0;
  for (int c = 0; c < 2; c++)
    for (long n = 1; n <= 2; n++) {
      tpgfake_reset();
      tpgfake_fail_call(calls[c], n);
      run2(j, 500);
      clean_errors += j[0].run != TPG_SUCCESS && j[1].run != TPG_SUCCESS;
      long live = tpgfake_live(why, sizeof why) - base;
      if (live && leaks++ < 3) printf("%s #%ld failing: %ld live: %s\n", calls[c], n, live, why);
      if (tpgfake_violations() && viol++ < 3) printf("%s #%ld failing: %s\n", calls[c], n, tpgfake_violation_text());
      printf("%s #%ld failing: rank 0 %s / rank 1 %s\n", calls[c], n, tpg_status_string(j[0].run),
             tpg_status_string(j[1].run));
    }
  CHECK(leaks == 0);
  CHECK(viol == 0);
  CHECK(clean_errors == 4);
  return TPG_TEST_END();
}
