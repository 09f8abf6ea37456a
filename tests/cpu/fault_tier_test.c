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
 * seen no violation; a failed run must have said why, under the name of the
 * public call that failed (never an inner function's).
 */
#define _GNU_SOURCE /* RTLD_DEFAULT */
#include <dlfcn.h>
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
  int timeout_ms; /* the comm's: short when a peer is expected to fail */
  tpg_comm_id id;
  tpg_status st;
  char msg[1024];
  int wrong; /* result elements that differ from the expected */
} job;

/* A destroy that fails (its context could not be made current) leaves the
 * graph whole, and the documented recovery is to call it again: the
 * injected failure is one-shot, so the second call must free everything. */
static _Thread_local char g_destroy_msg[1024]; /* the first failure's message: the retry clears it */
static tpg_status graph_destroy(tpg_graph *g) {
  tpg_status st = tpg_graph_destroy(g);
  if (st != TPG_SUCCESS) snprintf(g_destroy_msg, sizeof g_destroy_msg, "%s", tpg_last_error());
  if (st != TPG_SUCCESS && g) {
    tpg_status again = tpg_graph_destroy(g);
    if (again != TPG_SUCCESS) return again;
  }
  return st;
}

/* Known defects of graphbuild/, counted apart (with a note here saying what
 * leaks and which test reproduces it) so that the tier can stay green until
 * they are fixed. None is left: the graph destroy leak when cuCtxPushCurrent
 * fails (docs/reliability.md, item 7) is fixed, and graph_destroy above
 * checks it. */
static int known_defect(const char *failed) {
  static const char *const known[] = {NULL};
  for (int i = 0; failed && known[i]; i++)
    if (strcmp(failed, known[i]) == 0) return 1;
  return 0;
}

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
  STEP(tpg_runtime_get_info(&ri, sizeof ri));
  if (ri.driver_error[0]) {
    j->st = TPG_ERROR_NO_DRIVER;
    snprintf(j->msg, sizeof j->msg, "runtime: %s", ri.driver_error);
    goto done;
  }
  STEP(tpg_device_get_info(j->rank, &di, sizeof di));
  if (j->check && (di.sm_arch != 90 || ri.device_count < j->nranks)) j->wrong++;
  tpg_comm_config cc = TPG_COMM_CONFIG_INIT;
  cc.device = j->rank;
  cc.rank = j->rank;
  cc.nranks = j->nranks;
  cc.timeout_ms = j->timeout_ms;
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
  /* A destroy's message is kept at once: the calls after it clear it. */
  char dmsg[1024] = "";
  tpg_status d1 = graph_destroy(g2);
  if (d1 != TPG_SUCCESS) snprintf(dmsg, sizeof dmsg, "%s", g_destroy_msg);
  tpg_status d2 = graph_destroy(g);
  if (d2 != TPG_SUCCESS && !dmsg[0]) snprintf(dmsg, sizeof dmsg, "%s", g_destroy_msg);
  tpg_plan_destroy(plan2);
  tpg_plan_destroy(plan);
  tpg_status d3 = tpg_comm_destroy(comm);
  /* A destroy that failed left the comm intact: the documented recovery is
   * to call it again (the failure was the injected one). */
  if (d3 != TPG_SUCCESS && comm) {
    if (j->st == TPG_SUCCESS) {
      j->st = d3;
      snprintf(j->msg, sizeof j->msg, "teardown: %s", tpg_last_error());
    }
    d3 = tpg_comm_destroy(comm);
  }
  tpg_status d = d1 != TPG_SUCCESS ? d1 : d2 != TPG_SUCCESS ? d2 : d3;
  if (j->st == TPG_SUCCESS && d != TPG_SUCCESS) {
    j->st = d;
    snprintf(j->msg, sizeof j->msg, "teardown: %s", dmsg[0] ? dmsg : tpg_last_error());
  }
  tpgfake_free(x);
  tpgfake_free(x2);
  tpgfake_free(y);
  tpgfake_free(out);
  tpgfake_free(rsb);
  tpgfake_free(host);
  return NULL;
}

/* The layers on top (tpg_plan_mlp, buckets) and our kernels' argument
 * blocks: a 2-layer MLP stack (GEMV and tensor-map GEMM kernels, PDL edges)
 * as a graph and as token buckets, and an all-reduce with the fused
 * epilogue (bias, residual in place, RMSNorm) by NCCL and by AUTO. The fake
 * checks every kernel pointer; results are not (kernels do not compute). */
#define H 64
#define FFN 256
static void *run_layers(void *arg) {
  job *j = arg;
  j->st = TPG_SUCCESS;
  j->msg[0] = '\0';
  tpg_comm *comm = NULL;
  tpg_plan *plan = NULL, *ep = NULL;
  tpg_graph *g = NULL, *ge[2] = {NULL, NULL};
  tpg_mlp_buckets *bk = NULL;
  void *bufs[32];
  int nbuf = 0;
  tpg_binding b[32];
  int nb = 0;
  tpg_comm_config cc = TPG_COMM_CONFIG_INIT;
  cc.device = cc.rank = j->rank;
  cc.nranks = j->nranks;
  cc.timeout_ms = j->timeout_ms;
  STEP(tpg_comm_create(&j->id, &cc, &comm));
  tpg_mlp_desc d = TPG_MLP_DESC_INIT;
  d.layers = 2;
  d.tokens = 32; /* m <= 32: our kernels, whose programmatic edges are checked below */
  d.hidden = H;
  d.ffn = FFN;
  d.rank = j->rank;
  d.nranks = j->nranks;
  STEP(tpg_plan_mlp(&d, &plan));
  const size_t F = FFN / (size_t)j->nranks;
  struct { const char *name; size_t count; } sl[] = {
      {"x", 128 * H}, {"y", 128 * H}, {"l0.w1", F * H}, {"l0.b1", F}, {"l0.w2", H * F}, {"l0.b2", H},
      {"l1.w1", F * H}, {"l1.b1", F}, {"l1.w2", H * F}, {"l1.b2", H}};
  for (size_t i = 0; i < sizeof sl / sizeof sl[0]; i++) {
    STEP(tpg_plan_find_slot(plan, sl[i].name, &b[nb].slot));
    b[nb].ptr = bufs[nbuf++] = tpgfake_dev_alloc(j->rank, sl[i].count * 2);
    nb++;
  }
  tpg_graph_config gc = TPG_GRAPH_CONFIG_INIT;
  gc.device = j->rank;
  gc.comm = comm;
  gc.bindings = b;
  gc.nbindings = nb;
  gc.flags = TPG_GRAPH_PDL;
  STEP(tpg_graph_create(plan, &gc, &g));
  tpg_graph_info info;
  STEP(tpg_graph_get_info(g, &info, sizeof info));
  if (j->check && info.programmatic_edges == 0) j->wrong++;
  STEP(tpg_graph_launch(g, NULL));
  STEP(tpg_comm_wait(comm, NULL));
  tpg_binding nx = {b[0].slot, bufs[1]}; /* x -> another buffer of the same size */
  STEP(tpg_graph_rebind(g, &nx, 1));
  STEP(tpg_graph_launch(g, NULL));
  STEP(tpg_comm_wait(comm, NULL));
  char dot[300];
  const char *t = getenv("TEST_TMPDIR");
  snprintf(dot, sizeof dot, "%s/tpgfake_%d.dot", t ? t : "/tmp", j->rank);
  STEP(tpg_graph_write_dot(g, dot));
  remove(dot);
  /* Buckets: one graph per token count, the same buffers. */
  int sizes[3] = {1, 8, 32};
  gc.flags = 0;
  STEP(tpg_mlp_buckets_create(&d, sizes, 3, &gc, &bk));
  int bt = 0;
  tpg_graph *pick = NULL;
  STEP(tpg_mlp_buckets_pick(bk, 5, &bt, &pick));
  if (j->check && bt != 8) j->wrong++;
  STEP(tpg_graph_launch(pick, NULL));
  STEP(tpg_comm_wait(comm, NULL));
  /* The all-reduce epilogue: h = sum + bias + residual; residual = h; recv = rmsnorm(h) * w. */
  STEP(tpg_plan_create(&ep));
  tpg_slot es[5];
  static const char *const en[5] = {"send", "recv", "bias", "res", "normw"};
  const size_t ec[5] = {16 * H, 16 * H, H, 16 * H, H};
  for (int i = 0; i < 5; i++) {
    STEP(tpg_plan_add_slot(ep, en[i], TPG_BF16, TPG_MEM_DEVICE, ec[i], &es[i]));
    b[nb + i].slot = es[i];
    b[nb + i].ptr = bufs[nbuf++] = tpgfake_dev_alloc(j->rank, ec[i] * 2);
  }
  for (int algo = 0; algo < 2; algo++) {
    tpg_collective_desc c = TPG_COLLECTIVE_DESC_INIT;
    c.send.slot = es[0];
    c.recv.slot = es[1];
    c.count = 16 * H;
    c.algo = algo ? TPG_ALGO_NCCL : TPG_ALGO_AUTO;
    c.hidden = H;
    c.bias.slot = es[2];
    c.residual.slot = c.residual_out.slot = es[3];
    c.norm_weight.slot = es[4];
    tpg_plan *one = NULL;
    STEP(tpg_plan_create(&one));
    tpg_slot tmp;
    for (int i = 0; i < 5; i++) tpg_plan_add_slot(one, en[i], TPG_BF16, TPG_MEM_DEVICE, ec[i], &tmp);
    tpg_status ast = tpg_plan_add_collective(one, &c, NULL, 0, NULL);
    gc.bindings = b + nb;
    gc.nbindings = 5;
    if (ast == TPG_SUCCESS) ast = tpg_graph_create(one, &gc, &ge[algo]);
    tpg_plan_destroy(one);
    STEP(ast);
    STEP(tpg_graph_launch(ge[algo], NULL));
    STEP(tpg_comm_wait(comm, NULL));
  }
done:
  if (j->st != TPG_SUCCESS && !j->msg[0]) snprintf(j->msg, sizeof j->msg, "(no message)");
  graph_destroy(ge[0]);
  graph_destroy(ge[1]);
  if (tpg_mlp_buckets_destroy(bk) != TPG_SUCCESS) tpg_mlp_buckets_destroy(bk); /* kept what it could not free */
  graph_destroy(g);
  tpg_plan_destroy(plan);
  tpg_plan_destroy(ep);
  if (tpg_comm_destroy(comm) != TPG_SUCCESS) tpg_comm_destroy(comm);
  for (int i = 0; i < nbuf; i++) tpgfake_free(bufs[i]);
  return NULL;
}

/* Conditional nodes through the fake's conditional entry points,
 * one rank, explicit mode: x filled with 1, y = 2x, a WHILE doubling y
 * until the device counter ctr runs out, an IF / ELSE on the device value v
 * (u = 2x, or u = x/3 + 1/4), computed by the fake's C kernels and checked
 * exactly; then x and u rebound (the body nodes' exec copies updated), the
 * ELSE body's axpy given another a (tpg_graph_set_kernel_arg: its exec
 * setter), and launched again with other ctr and v. */
static tpg_status add_k(tpg_plan *p, tpg_module *m, const char *name, const tpg_arg *a, int na, const tpg_node *dep,
                        tpg_node *out) {
  tpg_kernel_desc d = TPG_KERNEL_DESC_INIT;
  d.module = m;
  d.name = name;
  d.args = a;
  d.nargs = na;
  return tpg_plan_add_kernel(p, &d, dep, dep ? 1 : 0, out);
}

static void *run_cond(void *arg) {
  job *j = arg;
  j->st = TPG_SUCCESS;
  j->msg[0] = '\0';
  j->wrong = 0;
  tpg_module *m = NULL;
  tpg_plan *p = NULL;
  tpg_graph *g = NULL;
  float *buf[6] = {NULL};
  /* The module by name from an embedded table, as an engine loads its own. */
  static const unsigned char image[] = "fake module";
  static const tpg_embedded_blob table[] = {{"kernels", image, image + sizeof image}, {NULL, NULL, NULL}};
  STEP(tpg_module_load_embedded(table, "kernels", &m));
  STEP(tpg_plan_create(&p));
  tpg_slot x, y, u, ctr, v;
  STEP(tpg_plan_add_slot(p, "x", TPG_F32, TPG_MEM_DEVICE, N, &x));
  STEP(tpg_plan_add_slot(p, "y", TPG_F32, TPG_MEM_DEVICE, N, &y));
  STEP(tpg_plan_add_slot(p, "u", TPG_F32, TPG_MEM_DEVICE, N, &u));
  STEP(tpg_plan_add_slot(p, "ctr", TPG_F32, TPG_MEM_DEVICE, 1, &ctr));
  STEP(tpg_plan_add_slot(p, "v", TPG_F32, TPG_MEM_DEVICE, 1, &v));
  const int n = N;
  const double a = 1.0 / 3.0;
  const float b0 = 0.25f;
  tpg_cond cw, ci;
  STEP(tpg_plan_add_cond(p, 1, 1, &cw));
  STEP(tpg_plan_add_cond(p, 0, 1, &ci));
  tpg_node ms, k0, loop, si, nif;
  STEP(tpg_plan_add_memset(p, (tpg_view){x, 0, 0}, 0x3f800000u, N, NULL, 0, &ms));
  tpg_arg a0[3] = {tpg_arg_view(y, 0), tpg_arg_view(x, 0), TPG_ARG_VALUE(n)};
  STEP(add_k(p, m, "scale2", a0, 3, &ms, &k0));
  tpg_conditional_desc cd = TPG_CONDITIONAL_DESC_INIT;
  cd.type = TPG_COND_WHILE;
  cd.cond = cw;
  STEP(tpg_plan_add_conditional(p, &cd, &k0, 1, &loop));
  STEP(tpg_plan_body_begin(p, loop, 0));
  tpg_node k2, ar1, ar2;
  tpg_arg a2[3] = {tpg_arg_view(y, 0), tpg_arg_view(y, 0), TPG_ARG_VALUE(n)};
  STEP(add_k(p, m, "scale2", a2, 3, NULL, &k2));
  /* One rank (no comm): an all-reduce of y in place is no node at all, one
   * into u a copy; the countdown waits for k2 through both. */
  tpg_collective_desc arc = TPG_COLLECTIVE_DESC_INIT;
  arc.send = arc.recv = (tpg_view){y, 0, 0};
  arc.count = N;
  STEP(tpg_plan_add_collective(p, &arc, &k2, 1, &ar1));
  arc.recv = (tpg_view){u, 0, 0};
  STEP(tpg_plan_add_collective(p, &arc, &ar1, 1, &ar2));
  tpg_arg acd[2] = {tpg_arg_cond(cw), tpg_arg_view(ctr, 0)};
  STEP(add_k(p, m, "cond_countdown", acd, 2, &ar2, NULL));
  STEP(tpg_plan_body_end(p));
  tpg_arg aci[2] = {tpg_arg_cond(ci), tpg_arg_view(v, 0)};
  STEP(add_k(p, m, "cond_set", aci, 2, &loop, &si));
  cd.type = TPG_COND_IF;
  cd.cond = ci;
  cd.nbodies = 2;
  STEP(tpg_plan_add_conditional(p, &cd, &si, 1, &nif));
  STEP(tpg_plan_body_begin(p, nif, 0));
  tpg_arg au[3] = {tpg_arg_view(u, 0), tpg_arg_view(x, 0), TPG_ARG_VALUE(n)};
  STEP(add_k(p, m, "scale2", au, 3, NULL, NULL));
  STEP(tpg_plan_body_end(p));
  STEP(tpg_plan_body_begin(p, nif, 1));
  tpg_arg ax[5] = {tpg_arg_view(u, 0), tpg_arg_view(x, 0), TPG_ARG_VALUE(n), TPG_ARG_VALUE(a), TPG_ARG_VALUE(b0)};
  tpg_node kax;
  STEP(add_k(p, m, "axpy", ax, 5, NULL, &kax));
  STEP(tpg_plan_body_end(p));
  for (int i = 0; i < 6; i++) {
    buf[i] = tpgfake_dev_alloc(0, (size_t)N * sizeof(float));
    if (!buf[i]) {
      j->st = TPG_ERROR_OUT_OF_MEMORY;
      snprintf(j->msg, sizeof j->msg, "tpgfake_dev_alloc failed");
      goto done;
    }
  }
  int *bctr = (int *)buf[3], *bv = (int *)buf[4];
  tpg_binding bd[5] = {{x, buf[0]}, {y, buf[1]}, {u, buf[2]}, {ctr, bctr}, {v, bv}};
  tpg_graph_config cfg = TPG_GRAPH_CONFIG_INIT;
  cfg.bindings = bd;
  cfg.nbindings = 5;
  STEP(tpg_graph_create(p, &cfg, &g));
  const double a_set = 0.5; /* set between the launches */
  const float ax2 = (float)(a_set * 1.0 + (double)b0);
  for (int round = 0; round < 2; round++) {
    if (round == 1) {
      tpg_binding nb[2] = {{x, buf[5]}, {u, buf[0]}}; /* the old x is the new u */
      STEP(tpg_graph_rebind(g, nb, 2));
      STEP(tpg_graph_set_kernel_arg(g, kax, 3, &a_set, sizeof a_set));
    }
    float *bx = buf[round ? 5 : 0], *bu = buf[round ? 0 : 2];
    memset(buf[1], 0xff, (size_t)N * sizeof(float));
    memset(bu, 0xff, (size_t)N * sizeof(float));
    bctr[0] = 3 - round; /* the loop runs 3, then 2 times */
    bv[0] = 1 - round;   /* IF, then ELSE */
    /* No collective: the fake's stream runs the work as it is enqueued. */
    STEP(tpg_graph_launch(g, NULL));
    if (!j->check) continue;
    j->wrong += count_wrong(bx, N, 1.0f) + (bctr[0] != 0);
    j->wrong += count_wrong(buf[1], N, (float)(2 << (3 - round)));
    j->wrong += count_wrong(bu, N, round ? ax2 : 2.0f);
  }
done:
  if (j->st != TPG_SUCCESS && !j->msg[0]) snprintf(j->msg, sizeof j->msg, "(no message)");
  graph_destroy(g);
  tpg_plan_destroy(p);
  tpg_module_destroy(m);
  for (int i = 0; i < 6; i++) tpgfake_free(buf[i]);
  return NULL;
}

/* Graph sets (one step at several batch sizes): one graph per size, then
 * one retargeted exec, over the same builder. Per size s: t = x (scratch),
 * y = 2 (2 t) by the fake's computing C kernel, and a row linear whose
 * all-reduce applies an RMSNorm (one rank: the epilogue kernel alone; two:
 * our one-shot kernel), so a launch must leave y = 4 x on the picked size's
 * rows and the rest as it was. */
#define SH 16
#define SMAX 24
typedef struct {
  tpg_module *m;
  void *buf[6];
  tpg_binding b[6];
  int rank, nranks;
} set_job;

static tpg_status set_step(void *user, int s, tpg_graph_set_step *out) {
  set_job *sj = user;
  tpg_plan *p = NULL;
  tpg_status st = tpg_plan_create(&p);
  if (st != TPG_SUCCESS) return st;
  out->plan = p;
  tpg_slot x, y, t, u, a, w, c, r, nw;
#define T(call) if ((st = (call)) != TPG_SUCCESS) return st
  T(tpg_plan_add_slot(p, "x", TPG_F32, TPG_MEM_DEVICE, (size_t)SMAX * SH, &x));
  T(tpg_plan_add_slot(p, "y", TPG_F32, TPG_MEM_DEVICE, (size_t)SMAX * SH, &y));
  T(tpg_plan_add_slot(p, "t", TPG_F32, TPG_MEM_SCRATCH, (size_t)s * SH, &t));
  T(tpg_plan_add_slot(p, "u", TPG_F32, TPG_MEM_SCRATCH, (size_t)s * SH, &u));
  T(tpg_plan_add_slot(p, "a", TPG_BF16, TPG_MEM_DEVICE, (size_t)SMAX * H, &a));
  T(tpg_plan_add_slot(p, "w", TPG_BF16, TPG_MEM_DEVICE, (size_t)H * H, &w));
  T(tpg_plan_add_slot(p, "c", TPG_BF16, TPG_MEM_SCRATCH, (size_t)s * H, &c));
  T(tpg_plan_add_slot(p, "r", TPG_BF16, TPG_MEM_DEVICE, (size_t)SMAX * H, &r));
  T(tpg_plan_add_slot(p, "nw", TPG_BF16, TPG_MEM_DEVICE, H, &nw));
  const int n = s * SH;
  tpg_node k[4];
  T(tpg_plan_add_memcpy(p, (tpg_view){t, 0, 0}, (tpg_view){x, 0, 0}, (size_t)n, NULL, 0, &k[0]));
  tpg_arg a1[3] = {tpg_arg_view(u, 0), tpg_arg_view(t, 0), TPG_ARG_VALUE(n)};
  T(add_k(p, sj->m, "scale2", a1, 3, &k[0], &k[1]));
  tpg_arg a2[3] = {tpg_arg_view(y, 0), tpg_arg_view(u, 0), TPG_ARG_VALUE(n)};
  T(add_k(p, sj->m, "scale2", a2, 3, &k[1], &k[2]));
  /* The row layer whose all-reduce applies the norm (tpg_plan_add_linear_norm). */
  tpg_linear_desc ld = TPG_LINEAR_DESC_INIT;
  ld.kind = TPG_LINEAR_ROW;
  ld.rank = sj->rank, ld.nranks = sj->nranks, ld.tokens = s;
  ld.in_features = H * sj->nranks, ld.out_features = H;
  ld.x.slot = a, ld.w.slot = w, ld.y.slot = r;
  tpg_linear_norm ln = TPG_LINEAR_NORM_INIT;
  ln.partial.slot = c, ln.norm_weight.slot = nw;
  T(tpg_plan_add_linear_norm(p, &ld, &ln, &k[2], 1, &k[3]));
#undef T
  const tpg_slot bound[6] = {x, y, a, w, r, nw};
  for (int i = 0; i < 6; i++) sj->b[i] = (tpg_binding){bound[i], sj->buf[i]};
  out->bindings = sj->b;
  out->nbindings = 6;
  return TPG_SUCCESS;
}

static void *run_sets(void *arg) {
  job *j = arg;
  j->st = TPG_SUCCESS;
  j->msg[0] = '\0';
  j->wrong = 0;
  set_job sj;
  memset(&sj, 0, sizeof sj);
  sj.rank = j->rank;
  sj.nranks = j->nranks;
  tpg_comm *comm = NULL;
  tpg_graph_set *set[2] = {NULL, NULL};
  static const size_t bytes[6] = {SMAX * SH * 4, SMAX * SH * 4, SMAX * H * 2, H * H * 2, SMAX * H * 2, H * 2};
  for (int i = 0; i < 6; i++) sj.buf[i] = tpgfake_dev_alloc(j->rank, bytes[i]);
  float *x = sj.buf[0], *y = sj.buf[1];
  static const unsigned char image[] = "fake module";
  static const tpg_embedded_blob table[] = {{"kernels", image, image + sizeof image}, {NULL, NULL, NULL}};
  STEP(tpg_module_load_embedded(table, "kernels", &sj.m));
  tpg_graph_config gc = TPG_GRAPH_CONFIG_INIT;
  gc.device = j->rank;
  if (j->nranks > 1) {
    tpg_comm_config cc = TPG_COMM_CONFIG_INIT;
    cc.device = cc.rank = j->rank;
    cc.nranks = j->nranks;
    cc.timeout_ms = j->timeout_ms;
    STEP(tpg_comm_create(&j->id, &cc, &comm));
    gc.comm = comm;
  }
  static const int sizes[3] = {SMAX, 1, 8};
  for (int v = 0; v < 2; v++) {
    STEP(tpg_graph_set_create(sizes, 3, set_step, &sj, &gc, v ? TPG_GRAPH_SET_RETARGET : 0, &set[v]));
    static const int batch[4] = {5, 1, SMAX, 8}, want[4] = {8, 1, SMAX, 8};
    for (int b = 0; b < 4; b++) {
      int size = 0;
      tpg_graph *g = NULL;
      for (int i = 0; i < SMAX * SH; i++) x[i] = (float)(i % 13) - 6.0f;
      memset(y, 0, (size_t)SMAX * SH * 4);
      STEP(tpg_graph_set_pick(set[v], batch[b], &size, &g));
      STEP(tpg_graph_launch(g, NULL));
      if (comm) STEP(tpg_comm_wait(comm, NULL));
      if (!j->check) continue;
      j->wrong += size != want[b];
      for (int i = 0; i < SMAX * SH; i++) j->wrong += y[i] != (i < size * SH ? 4.0f * x[i] : 0.0f);
    }
  }
done:
  if (j->st != TPG_SUCCESS && !j->msg[0]) snprintf(j->msg, sizeof j->msg, "(no message)");
  for (int v = 0; v < 2; v++)
    if (tpg_graph_set_destroy(set[v]) != TPG_SUCCESS) tpg_graph_set_destroy(set[v]); /* kept what it could not free */
  if (tpg_comm_destroy(comm) != TPG_SUCCESS) tpg_comm_destroy(comm);
  tpg_module_destroy(sj.m);
  for (int i = 0; i < 6; i++) tpgfake_free(sj.buf[i]);
  return NULL;
}

/* One run over nranks thread ranks; returns the ranks' first failure. */
static tpg_status run_with(void *(*fn)(void *), int nranks, int mode, int check, job jobs[MAX_RANKS]) {
  tpg_comm_id id;
  memset(&id, 0, sizeof id);
  tpg_status st = tpg_comm_id_create(&id);
  for (int r = 0; r < nranks; r++) {
    memset(&jobs[r], 0, sizeof jobs[r]);
    jobs[r] = (job){r, nranks, mode, 1, check ? 5000 : 60, id, TPG_SUCCESS, "", 0};
  }
  if (st != TPG_SUCCESS) {
    jobs[0].st = st;
    snprintf(jobs[0].msg, sizeof jobs[0].msg, "%s", tpg_last_error());
    return st;
  }
  if (nranks == 1) {
    fn(&jobs[0]);
  } else {
    pthread_t t[MAX_RANKS];
    for (int r = 0; r < nranks; r++) pthread_create(&t[r], NULL, fn, &jobs[r]);
    for (int r = 0; r < nranks; r++) pthread_join(t[r], NULL);
  }
  for (int r = 0; r < nranks; r++)
    if (jobs[r].st != TPG_SUCCESS) return jobs[r].st;
  return TPG_SUCCESS;
}

static tpg_status run(int nranks, int mode, int check, job jobs[MAX_RANKS]) {
  return run_with(run_rank, nranks, mode, check, jobs);
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
  {
    job jobs[MAX_RANKS];
    tpgfake_reset();
    tpg_status st = run_with(run_cond, 1, TPG_MODE_EXPLICIT, 1, jobs);
    if (st != TPG_SUCCESS) fprintf(stderr, "smoke conditional nodes: %s\n", jobs[0].msg);
    CHECK(st == TPG_SUCCESS);
    CHECK(jobs[0].wrong == 0);
    CHECK(clean_after("smoke conditional nodes"));
    printf("smoke conditional nodes (WHILE, IF/ELSE, rebind into bodies), 1 rank: %s, %ld driver/NCCL calls, %ld "
           "kernels checked\n",
           st == TPG_SUCCESS ? "ok" : "FAILED", tpgfake_calls(), tpgfake_kernels());
  }
  for (int nranks = 1; nranks <= MAX_RANKS; nranks++) {
    job jobs[MAX_RANKS];
    tpgfake_reset();
    tpg_status st = run_with(run_layers, nranks, TPG_MODE_EXPLICIT, 1, jobs);
    char what[64];
    snprintf(what, sizeof what, "smoke layers (MLP, buckets, epilogue), %d rank%s", nranks, nranks > 1 ? "s" : "");
    if (st != TPG_SUCCESS)
      for (int r = 0; r < nranks; r++) fprintf(stderr, "%s: rank %d: %s\n", what, r, jobs[r].msg);
    CHECK(st == TPG_SUCCESS);
    for (int r = 0; r < nranks; r++) CHECK(jobs[r].wrong == 0);
    CHECK(clean_after(what));
    printf("%s: %s, %ld driver/NCCL calls, %ld kernels checked\n", what, st == TPG_SUCCESS ? "ok" : "FAILED",
           tpgfake_calls(), tpgfake_kernels());
  }
  for (int nranks = 1; nranks <= MAX_RANKS; nranks++) {
    job jobs[MAX_RANKS];
    tpgfake_reset();
    tpg_status st = run_with(run_sets, nranks, TPG_MODE_EXPLICIT, 1, jobs);
    char what[80];
    snprintf(what, sizeof what, "smoke graph sets (per size, retargeted), %d rank%s", nranks, nranks > 1 ? "s" : "");
    if (st != TPG_SUCCESS)
      for (int r = 0; r < nranks; r++) fprintf(stderr, "%s: rank %d: %s\n", what, r, jobs[r].msg);
    CHECK(st == TPG_SUCCESS);
    for (int r = 0; r < nranks; r++) CHECK(jobs[r].wrong == 0);
    CHECK(clean_after(what));
    printf("%s: %s, %ld driver/NCCL calls, %ld kernels checked\n", what, st == TPG_SUCCESS ? "ok" : "FAILED",
           tpgfake_calls(), tpgfake_kernels());
  }
}

/* SQLite's loop over one configuration: fail call k of a run, for every k.
 * Counts go to the totals printed at the end. */
static long g_points, g_failed_clean, g_tolerated, g_leaky, g_violations, g_silent, g_known, g_corrupt;
static char g_tolerated_names[1024];

static void note_tolerated(const char *name) {
  char key[72];
  snprintf(key, sizeof key, " %s", name);
  if (!strstr(g_tolerated_names, key) && strlen(g_tolerated_names) + strlen(key) + 1 < sizeof g_tolerated_names)
    strcat(g_tolerated_names, key);
}

static long g_live_before; /* live objects before the run (earlier leaks) */

/* A failed call's message starts with the public call's name: one of the
 * library's TPG_API functions, which -rdynamic (tests/fake) puts among the
 * executable's dynamic symbols, where the hidden inner ones are not. Only
 * the test's own notes ("runtime: ...", an allocation of the test) and
 * "teardown: " before a destroy's message are not the library's. */
static long g_inner_names;
static int names_public_call(const char *msg) {
  if (strncmp(msg, "teardown: ", 10) == 0) msg += 10;
  if (strncmp(msg, "runtime: ", 9) == 0 || strncmp(msg, "tpgfake", 7) == 0 || msg[0] == '(') return 1;
  const char *colon = strstr(msg, ": ");
  char name[64];
  if (!colon || colon - msg >= (long)sizeof name || strncmp(msg, "tpg_", 4) != 0) return 0;
  memcpy(name, msg, (size_t)(colon - msg));
  name[colon - msg] = '\0';
  return dlsym(RTLD_DEFAULT, name) != NULL;
}

static int check_after(const char *what, int k, int nranks, job jobs[MAX_RANKS], tpg_status st) {
  int ok = 1;
  const char *fired = tpgfake_failed();
  long v = tpgfake_violations();
  char why[512];
  long live = tpgfake_live(why, sizeof why) - g_live_before;
  if (v) {
    g_violations += v;
    fprintf(stderr, "%s, call %d (%s): %ld violations:\n%s", what, k, fired ? fired : "-", v,
            tpgfake_violation_text());
    ok = 0;
  }
  int known = known_defect(fired);
  if (live > 0 && known) {
    g_known++;
    g_live_before += live;
    live = 0;
  }
  if (live > 0 || tpgfake_pending()) {
    g_leaky++;
    g_live_before += live > 0 ? live : 0; /* report each leak once */
    fprintf(stderr, "%s, call %d (%s): left %ld more live objects: %s\n", what, k, fired ? fired : "-", live, why);
    ok = 0;
  }
  for (int r = 0; r < nranks; r++)
    if (jobs[r].st != TPG_SUCCESS && strlen(jobs[r].msg) < 8) {
      g_silent++;
      fprintf(stderr, "%s, call %d (%s): rank %d failed without a message\n", what, k, fired ? fired : "-", r);
      ok = 0;
    }
  for (int r = 0; r < nranks; r++)
    if (jobs[r].st != TPG_SUCCESS && strlen(jobs[r].msg) >= 8 && !names_public_call(jobs[r].msg)) {
      g_inner_names++;
      fprintf(stderr, "%s, call %d (%s): rank %d's message names no public call: %s\n", what, k,
              fired ? fired : "-", r, jobs[r].msg);
      ok = 0;
    }
  for (int r = 0; r < nranks; r++)
    if (st == TPG_SUCCESS && jobs[r].wrong) {
      g_corrupt++;
      fprintf(stderr, "%s, call %d (%s): rank %d succeeded with %d wrong results\n", what, k, fired ? fired : "-", r,
              jobs[r].wrong);
      ok = 0;
    }
  if (fired) {
    g_points++;
    if (st == TPG_SUCCESS) {
      g_tolerated++;
      note_tolerated(fired);
    } else {
      g_failed_clean += ok;
    }
  }
  return ok;
}

static long g_stride2 = 1; /* 2 ranks: every g_stride2-th failure point (sanitizer runs) */

static void loop(void *(*fn)(void *), int nranks, int mode) {
  job jobs[MAX_RANKS];
  char what[64];
  snprintf(what, sizeof what, "loop %s%s, %d rank%s",
           fn == run_layers ? "layers " : fn == run_cond ? "conditional " : fn == run_sets ? "graph sets " : "",
           mode_name[mode], nranks,
           nranks > 1 ? "s" : "");
  tpgfake_reset();
  tpg_status st = run_with(fn, nranks, mode, 1, jobs);
  long n = tpgfake_calls();
  CHECK(st == TPG_SUCCESS);
  CHECK(check_after(what, 0, nranks, jobs, st));
  if (st != TPG_SUCCESS) return;
  int bad = 0;
  for (long k = 1; k <= n; k++) {
    if (nranks > 1 && (k - 1) % g_stride2) continue;
    tpgfake_reset();
    tpgfake_fail_at(k);
    st = run_with(fn, nranks, mode, 0, jobs);
    int ok = check_after(what, (int)k, nranks, jobs, st);
    CHECK(ok);
    bad += !ok;
    /* A clean run still works (and still gives the right results) after it;
     * with 2 ranks (peers wait out their deadline) after every 8th. */
    if (nranks > 1 && k % 8 && k != n) continue;
    tpgfake_reset();
    st = run_with(fn, nranks, mode, 1, jobs);
    int again = st == TPG_SUCCESS && jobs[0].wrong == 0 && check_after(what, -1, nranks, jobs, st);
    if (!again) fprintf(stderr, "%s: the clean run after failing call %ld failed: %s\n", what, k, jobs[0].msg);
    CHECK(again);
  }
  /* Polling calls fail by name: the first few of each. */
  static const char *const polls[] = {"cuStreamQuery", "cuEventQuery", "ncclCommGetAsyncError"};
  for (int p = 0; p < 3; p++)
    for (long i = 1; i <= 3; i++) {
      tpgfake_reset();
      tpgfake_fail_call(polls[p], i);
      st = run_with(fn, nranks, mode, 0, jobs);
      int ok = check_after(what, (int)i, nranks, jobs, st);
      CHECK(ok);
      bad += !ok;
    }
  printf("%s: %ld failure points%s, %d with a defect\n", what, n, nranks > 1 && g_stride2 > 1 ? " (every few)" : "",
         bad);
}

int main(int argc, char **argv) {
  if (tpgfake_setup(argc, argv) != 0) return 2;
  setenv("TPG_FAKE_SYNC_MS", "3000", 0);
  const char *what = argc > 2 ? argv[2] : "smoke";
  if (strcmp(what, "smoke") == 0) smoke();
  if (strcmp(what, "loop") == 0) {
    /* [max ranks [modes of 2 ranks, e.g. "0" for explicit only [stride]]] */
    int max_ranks = argc > 3 ? atoi(argv[3]) : MAX_RANKS;
    const char *modes2 = argc > 4 ? argv[4] : "012";
    if (argc > 5 && atol(argv[5]) > 0) g_stride2 = atol(argv[5]);
    for (int nranks = 1; nranks <= max_ranks && nranks <= MAX_RANKS; nranks++)
      for (int mode = 0; mode < 3; mode++)
        if (nranks == 1 || strchr(modes2, '0' + mode)) loop(run_rank, nranks, mode);
    loop(run_layers, 1, TPG_MODE_EXPLICIT); /* the layers on top, every call of 1 rank */
    loop(run_cond, 1, TPG_MODE_EXPLICIT);   /* conditional nodes, every call */
    loop(run_sets, 1, TPG_MODE_EXPLICIT);   /* graph sets, both kinds, every call */
    printf("fault tier: %ld failure points exercised (%ld failed with a clear error and nothing left, %ld tolerated), "
           "leaks %ld, bounds violations %ld, silent failures %ld, wrong results %ld, known graphbuild defects %ld, "
           "messages under an inner name %ld\n",
           g_points, g_failed_clean, g_tolerated, g_leaky, g_violations, g_silent, g_corrupt, g_known, g_inner_names);
    printf("fault tier: failures tolerated (the run succeeded, results right) in:%s\n", g_tolerated_names);
  }
  return TPG_TEST_END();
}
