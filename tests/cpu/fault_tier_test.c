/* fault_tier_test.c - the whole lifecycle through the stand-in driver + NCCL.
 *
 *   fault_tier_test <libcuda_fake.so> smoke   every mode, 1 rank and 2 thread
 *                                            ranks, results checked
 *   fault_tier_test <libcuda_fake.so> loop    SQLite's loop: count the driver
 *                                            and NCCL calls of a clean run, then
 *                                            for k = 1..N fail call k
 *
 * One "run" is what an engine does with tpgraph, public API only: query the
 * runtime and device, create an id and a comm, build a plan (memset, memcpy,
 * axpby, all-reduce, all-gather, reduce-scatter, copy to pinned host memory),
 * create a graph, launch, wait, rebind, launch, update, launch, build a second
 * graph whose all-reduce is AUTO (our one-shot kernel over the peer buffers
 * with 2 ranks), launch it, then destroy everything. With no failure injected
 * the results are checked exactly: x is filled with 1.0, so the all-reduce
 * gives nranks, the all-gather nranks everywhere, the reduce-scatter nranks^2.
 * After every run, failed or not, the fake must hold no live object and have
 * seen no violation; a failed run must have said why.
 */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/fake/tpgfake.h"
#include "tests/tpg_test.h"

#define N 256 /* elements per rank */
#define MAX_RANKS 2

typedef struct {
  int rank, nranks, mode, check;
  tpg_comm_id id;
  tpg_status st;
  char msg[1024];
  int wrong; /* result elements that differ from the expected */
} job;

static const char *const mode_name[] = {"explicit", "capture", "eager"};

/* First failure of a run: its status and message, kept. */
#define STEP(call)                                                       \
  do {                                                                   \
    tpg_status s_ = (call);                                              \
    if (s_ != TPG_SUCCESS) {                                             \
      if (j->st == TPG_SUCCESS) {                                        \
        j->st = s_;                                                      \
        snprintf(j->msg, sizeof j->msg, "%s [%s]", tpg_last_error(), #call); \
      }                                                                  \
      goto done;                                                         \
    }                                                                    \
  } while (0)

static int count_wrong(const float *p, size_t n, float want) {
  int w = 0;
  for (size_t i = 0; i < n; i++) w += p[i] != want;
  return w;
}

static tpg_status build_plan(tpg_plan **out, int nranks, tpg_collective_algo algo, tpg_slot s[8]) {
  tpg_plan *p = NULL;
  tpg_status st = tpg_plan_create(&p);
  if (st != TPG_SUCCESS) return st;
  tpg_node ms, cp, ax, ar, ag, rs, hc;
#define T(call)                       \
  if ((st = (call)) != TPG_SUCCESS) { \
    tpg_plan_destroy(p);              \
    return st;                        \
  }
  T(tpg_plan_add_slot(p, "x", TPG_F32, TPG_MEM_DEVICE, N, &s[0]));
  T(tpg_plan_add_slot(p, "y", TPG_F32, TPG_MEM_DEVICE, N, &s[1]));
  T(tpg_plan_add_slot(p, "out", TPG_F32, TPG_MEM_DEVICE, N, &s[2]));
  T(tpg_plan_add_slot(p, "work", TPG_F32, TPG_MEM_SCRATCH, (size_t)N * nranks, &s[3]));
  T(tpg_plan_add_slot(p, "rs", TPG_F32, TPG_MEM_DEVICE, N, &s[4]));
  T(tpg_plan_add_slot(p, "host", TPG_F32, TPG_MEM_HOST, N, &s[5]));
  T(tpg_plan_add_memset(p, (tpg_view){s[0], 0, 0}, 0x3f800000u, N, NULL, 0, &ms));
  T(tpg_plan_add_memcpy(p, (tpg_view){s[1], 0, 0}, (tpg_view){s[0], 0, 0}, N, &ms, 1, &cp));
  /* y = 0 * x + 1 * y: a kernel node whose pointers the fake checks. */
  T(tpg_plan_add_axpby(p, (tpg_view){s[1], 0, 0}, (tpg_view){s[0], 0, 0}, N, 0.0f, 1.0f, &cp, 1, &ax));
  tpg_collective_desc c = TPG_COLLECTIVE_DESC_INIT;
  c.kind = TPG_ALL_REDUCE;
  c.send.slot = s[1];
  c.recv.slot = s[2];
  c.count = N;
  c.algo = algo;
  T(tpg_plan_add_collective(p, &c, &ax, 1, &ar));
  tpg_collective_desc g = TPG_COLLECTIVE_DESC_INIT;
  g.kind = TPG_ALL_GATHER;
  g.send.slot = s[2];
  g.recv.slot = s[3];
  g.count = N;
  T(tpg_plan_add_collective(p, &g, &ar, 1, &ag));
  tpg_collective_desc r = TPG_COLLECTIVE_DESC_INIT;
  r.kind = TPG_REDUCE_SCATTER;
  r.send.slot = s[3];
  r.recv.slot = s[4];
  r.count = N;
  T(tpg_plan_add_collective(p, &r, &ag, 1, &rs));
  T(tpg_plan_add_memcpy(p, (tpg_view){s[5], 0, 0}, (tpg_view){s[2], 0, 0}, N, &rs, 1, &hc));
#undef T
  *out = p;
  return TPG_SUCCESS;
}

static void *run_rank(void *arg) {
  job *j = arg;
  j->st = TPG_SUCCESS;
  j->msg[0] = '\0';
  j->wrong = 0;
  tpg_comm *comm = NULL;
  tpg_plan *plan = NULL, *plan2 = NULL;
  tpg_graph *g = NULL, *g2 = NULL;
  float *x = tpgfake_dev_alloc(j->rank, N * 4), *x2 = tpgfake_dev_alloc(j->rank, N * 4);
  float *y = tpgfake_dev_alloc(j->rank, N * 4), *out = tpgfake_dev_alloc(j->rank, N * 4);
  float *rsb = tpgfake_dev_alloc(j->rank, N * 4), *host = tpgfake_host_alloc(N * 4);
  tpg_runtime_info ri;
  tpg_device_info di;
  STEP(tpg_runtime_query(&ri));
  if (ri.driver_error[0]) {
    j->st = TPG_ERROR_NO_DRIVER;
    snprintf(j->msg, sizeof j->msg, "runtime: %s", ri.driver_error);
    goto done;
  }
  STEP(tpg_device_query(j->rank, &di));
  if (j->check && (di.sm_arch != 90 || ri.device_count < j->nranks)) j->wrong++;
  tpg_comm_config cc = TPG_COMM_CONFIG_INIT;
  cc.device = j->rank;
  cc.rank = j->rank;
  cc.nranks = j->nranks;
  cc.timeout_ms = 150;
  STEP(tpg_comm_create(&j->id, &cc, &comm));
  tpg_slot s[8];
  STEP(build_plan(&plan, j->nranks, TPG_ALGO_NCCL, s));
  tpg_binding b[5] = {{s[0], x}, {s[1], y}, {s[2], out}, {s[4], rsb}, {s[5], host}};
  tpg_graph_config gc = TPG_GRAPH_CONFIG_INIT;
  gc.device = j->rank;
  gc.comm = comm;
  gc.bindings = b;
  gc.nbindings = 5;
  gc.mode = (tpg_graph_mode)j->mode;
  STEP(tpg_graph_create(plan, &gc, &g));
  const float R = (float)j->nranks;
  for (int round = 0; round < 3; round++) {
    memset(host, 0, N * 4);
    memset(rsb, 0, N * 4);
    if (round == 1) { /* rebind x (explicit and eager; capture refuses) */
      tpg_binding nb = {s[0], x2};
      tpg_status rs = tpg_graph_rebind(g, &nb, 1);
      if (j->mode == TPG_MODE_CAPTURE) {
        if (rs != TPG_ERROR_UNSUPPORTED && j->check) j->wrong++;
      } else {
        STEP(rs);
      }
    }
    if (round == 2) { /* whole-graph update back to x (explicit mode only) */
      tpg_binding nb = {s[0], x};
      tpg_status us = tpg_graph_update(g, NULL, &nb, 1);
      if (j->mode == TPG_MODE_EXPLICIT) STEP(us);
      else if (us == TPG_SUCCESS && j->check) j->wrong++;
      if (j->mode == TPG_MODE_EAGER) STEP(tpg_graph_rebind(g, &nb, 1));
    }
    STEP(tpg_graph_launch(g, NULL));
    STEP(tpg_comm_wait(comm, NULL));
    if (j->check) j->wrong += count_wrong(host, N, R) + count_wrong(rsb, N, R * R);
  }
  if (j->nranks > 1) { /* AUTO: our one-shot kernel over the peer buffers */
    STEP(build_plan(&plan2, j->nranks, TPG_ALGO_AUTO, s));
    STEP(tpg_graph_create(plan2, &gc, &g2));
    STEP(tpg_graph_launch(g2, NULL));
    STEP(tpg_comm_wait(comm, NULL));
  }
done:
  if (j->st != TPG_SUCCESS && !j->msg[0]) snprintf(j->msg, sizeof j->msg, "(no message)");
  /* Teardown in the documented order; a failure here is a failure too. */
  tpg_status d1 = tpg_graph_destroy(g2), d2 = tpg_graph_destroy(g);
  tpg_plan_destroy(plan2);
  tpg_plan_destroy(plan);
  tpg_status d3 = tpg_comm_destroy(comm);
  tpg_status d = d1 != TPG_SUCCESS ? d1 : d2 != TPG_SUCCESS ? d2 : d3;
  if (j->st == TPG_SUCCESS && d != TPG_SUCCESS) {
    j->st = d;
    snprintf(j->msg, sizeof j->msg, "teardown: %s", tpg_last_error());
  }
  tpgfake_free(x);
  tpgfake_free(x2);
  tpgfake_free(y);
  tpgfake_free(out);
  tpgfake_free(rsb);
  tpgfake_free(host);
  return NULL;
}

/* One run over nranks thread ranks; returns the ranks' first failure. */
static tpg_status run(int nranks, int mode, int check, job jobs[MAX_RANKS]) {
  tpg_comm_id id;
  memset(&id, 0, sizeof id);
  tpg_status st = tpg_comm_id_create(&id);
  for (int r = 0; r < nranks; r++) {
    memset(&jobs[r], 0, sizeof jobs[r]);
    jobs[r] = (job){r, nranks, mode, check, id, TPG_SUCCESS, "", 0};
  }
  if (st != TPG_SUCCESS) {
    jobs[0].st = st;
    snprintf(jobs[0].msg, sizeof jobs[0].msg, "%s", tpg_last_error());
    return st;
  }
  if (nranks == 1) {
    run_rank(&jobs[0]);
  } else {
    pthread_t t[MAX_RANKS];
    for (int r = 0; r < nranks; r++) pthread_create(&t[r], NULL, run_rank, &jobs[r]);
    for (int r = 0; r < nranks; r++) pthread_join(t[r], NULL);
  }
  for (int r = 0; r < nranks; r++)
    if (jobs[r].st != TPG_SUCCESS) return jobs[r].st;
  return TPG_SUCCESS;
}

/* Nothing live, no violation: after every run. */
static int clean_after(const char *what) {
  char why[512];
  long live = tpgfake_live(why, sizeof why), v = tpgfake_violations(), pend = tpgfake_pending();
  if (live || v || pend) {
    fprintf(stderr, "%s: %ld live objects (%s), %ld violations, %ld pending stream ops\n%s", what, live, why, v,
            pend, tpgfake_violation_text());
    return 0;
  }
  return 1;
}

static void smoke(void) {
  for (int nranks = 1; nranks <= MAX_RANKS; nranks++)
    for (int mode = 0; mode < 3; mode++) {
      job jobs[MAX_RANKS];
      tpgfake_reset();
      tpg_status st = run(nranks, mode, 1, jobs);
      char what[64];
      snprintf(what, sizeof what, "smoke %s, %d rank%s", mode_name[mode], nranks, nranks > 1 ? "s" : "");
      if (st != TPG_SUCCESS)
        for (int r = 0; r < nranks; r++) fprintf(stderr, "%s: rank %d: %s\n", what, r, jobs[r].msg);
      CHECK(st == TPG_SUCCESS);
      for (int r = 0; r < nranks; r++) CHECK(jobs[r].wrong == 0);
      CHECK(clean_after(what));
      printf("%s: %s, %ld driver/NCCL calls, %ld kernels checked\n", what, st == TPG_SUCCESS ? "ok" : "FAILED",
             tpgfake_calls(), tpgfake_kernels());
    }
}

int main(int argc, char **argv) {
  if (tpgfake_setup(argc, argv) != 0) return 2;
  setenv("TPG_FAKE_SYNC_MS", "3000", 0);
  const char *what = argc > 2 ? argv[2] : "smoke";
  if (strcmp(what, "smoke") == 0) smoke();
  return TPG_TEST_END();
}
