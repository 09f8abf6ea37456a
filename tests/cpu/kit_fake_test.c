/* kit_fake_test.c - the kit's driver paths on a CPU, against the stand-in
 * driver of //tests/fake (host memory with bounds checks, kernels as C
 * functions, graphs run in order, every handle checked, objects counted). Runs what kit_test runs on a GPU, minus what only a
 * real driver can show: engine kernels by module name, CUkernel and
 * CUfunction; arguments checked against the kernel's parameters; a
 * captured node captured, re-captured only when one of its views moves, and
 * refused when its capture is empty, invalidated, allocates or its callback
 * fails; host and event nodes; rebind, whole-graph update, export (the
 * template run by itself must give what the exec gives), launch under
 * capture; eager and capture modes. Every result is compared exactly.
 * ASan / valgrind in CI see the graphs tpgraph creates and destroys here;
 * at the end nothing may be live in the fake and no violation recorded.
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/fake/tpgfake.h"
#include "tests/tpg_test.h"

#define MUST_OK(call)                                                                    \
  do {                                                                                   \
    tpg_status s_ = (call);                                                              \
    if (s_ != TPG_SUCCESS) {                                                             \
      fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, tpg_last_error());   \
      exit(2);                                                                           \
    }                                                                                    \
  } while (0)

#define C_EXEC_KSET TPGFAKE_C_EXEC_KSET
#define C_EXEC_CHILD TPGFAKE_C_EXEC_CHILD
#define C_EXEC_UPDATE TPGFAKE_C_EXEC_UPDATE
#define C_EVREC TPGFAKE_C_EVREC
#define C_EVWAIT TPGFAKE_C_EVWAIT
#define C_CLUSTER_NODE TPGFAKE_C_CLUSTER_NODE
#define C_CLUSTER_LAUNCH TPGFAKE_C_CLUSTER_LAUNCH

enum { N = 1000 };
static const int g_n = N;
static const double g_a = 1.0 / 3.0;
static const float g_b = 0.25f;

static void *g_ev_rec, *g_ev_wait; /* live events of the fake, for the event nodes */

static float *buf(void) {
  void *p = tpgfake_dev_alloc(0, N * 4);
  if (!p) abort();
  memset(p, 0xff, N * 4); /* NaN: poisoned */
  return p;
}
static float *rnd_buf(unsigned seed) {
  float *p = buf();
  for (int i = 0; i < N; i++) p[i] = (float)((seed * 7919u + (unsigned)i * 104729u) % 2001u) / 1000.0f - 1.0f;
  return p;
}
static void poison(float *p) { memset(p, 0xff, N * 4); }
/* y == fma(a, x, b) and z == 2 y, exactly. */
static int wrong_y(const float *y, const float *x) {
  int bad = 0;
  for (int i = 0; i < N; i++) {
    float want = (float)fma(g_a, (double)x[i], (double)g_b);
    bad += memcmp(&y[i], &want, 4) != 0;
  }
  return bad;
}
static int wrong_z(const float *z, const float *x) {
  int bad = 0;
  for (int i = 0; i < N; i++) {
    float want = 2.0f * (float)fma(g_a, (double)x[i], (double)g_b);
    bad += memcmp(&z[i], &want, 4) != 0;
  }
  return bad;
}

/* The "library": z = 2 y through a kernel it launches on the stream. */
static int calls;
static int lib_scale(void *user, tpg_stream s, void *const *ptrs, int n) {
  (void)user;
  calls++;
  if (n != 2) return -1;
  void *z = ptrs[1], *y = ptrs[0];
  int cnt = N;
  void *params[3] = {&z, &y, &cnt};
  return tpgfake_launch(s, "scale2", params);
}
static int lib_nothing(void *u, tpg_stream s, void *const *p, int n) {
  (void)u, (void)s, (void)p, (void)n;
  return 0;
}
static int lib_fail(void *u, tpg_stream s, void *const *p, int n) {
  lib_scale(u, s, p, n);
  return 7;
}
static int lib_alloc(void *u, tpg_stream s, void *const *p, int n) {
  tpgfake_capture_alloc(s);
  return lib_scale(u, s, p, n);
}
static int lib_sync(void *u, tpg_stream s, void *const *p, int n) {
  lib_scale(u, s, p, n);
  tpgfake_capture_invalidate(s); /* what synchronizing inside a capture does */
  return 0;
}

static int host_runs;
static void host_fn(void *u) { (*(int *)u)++; }

typedef struct kplan {
  tpg_plan *p;
  tpg_slot x, y, z;
  tpg_node k, c, h, r, w;
  tpg_arg args[5];
} kplan;

/* y = axpy(x) (engine kernel) -> z = 2 y (captured) -> host -> event record;
 * an event wait on its own. How the kernel is named: 0 module, 1 CUkernel,
 * 2 CUfunction. */
static void make_plan(kplan *k, tpg_module *m, int how, tpg_capture_fn fn) {
  MUST_OK(tpg_plan_create(&k->p));
  MUST_OK(tpg_plan_add_slot(k->p, "x", TPG_F32, TPG_MEM_DEVICE, N, &k->x));
  MUST_OK(tpg_plan_add_slot(k->p, "y", TPG_F32, TPG_MEM_DEVICE, N, &k->y));
  MUST_OK(tpg_plan_add_slot(k->p, "z", TPG_F32, TPG_MEM_DEVICE, N, &k->z));
  k->args[0] = tpg_arg_view(k->y, 0);
  k->args[1] = tpg_arg_view(k->x, 0);
  k->args[2] = TPG_ARG_VALUE(g_n);
  k->args[3] = TPG_ARG_VALUE(g_a);
  k->args[4] = TPG_ARG_VALUE(g_b);
  tpg_kernel_desc d = TPG_KERNEL_DESC_INIT;
  if (how == 0) { d.module = m; d.name = "axpy"; }
  if (how == 1) d.cu_kernel = tpgfake_kernel("axpy");
  if (how == 2) d.cu_function = tpgfake_kernel("axpy");
  d.grid[0] = 4;
  d.block[0] = 256;
  d.args = k->args;
  d.nargs = 5;
  MUST_OK(tpg_plan_add_kernel(k->p, &d, NULL, 0, &k->k));
  tpg_view v[2] = {{k->y, 0, 0}, {k->z, 0, 0}};
  tpg_captured_desc cd = TPG_CAPTURED_DESC_INIT;
  cd.fn = fn;
  cd.views = v;
  cd.nviews = 2;
  MUST_OK(tpg_plan_add_captured(k->p, &cd, &k->k, 1, &k->c));
  MUST_OK(tpg_plan_set_node_name(k->p, k->c, "lib"));
  MUST_OK(tpg_plan_add_host(k->p, host_fn, &host_runs, &k->c, 1, &k->h));
  MUST_OK(tpg_plan_add_event_record(k->p, (tpg_event)g_ev_rec, &k->h, 1, &k->r));
  MUST_OK(tpg_plan_add_event_wait(k->p, (tpg_event)g_ev_wait, NULL, 0, &k->w));
}

static tpg_graph *make_graph(kplan *k, float *x, float *y, float *z, tpg_graph_mode mode) {
  tpg_binding b[3] = {{k->x, x}, {k->y, y}, {k->z, z}};
  tpg_graph_config cfg = TPG_GRAPH_CONFIG_INIT;
  cfg.bindings = b;
  cfg.nbindings = 3;
  cfg.mode = mode;
  tpg_graph *g = NULL;
  tpg_status st = tpg_graph_create(k->p, &cfg, &g);
  if (st != TPG_SUCCESS) fprintf(stderr, "tpg_graph_create: %s\n", tpg_last_error());
  CHECK(st == TPG_SUCCESS);
  return g;
}

static void test_explicit(tpg_module *m, int how) {
  kplan k;
  make_plan(&k, m, how, lib_scale);
  float *x = rnd_buf(1), *x2 = rnd_buf(2), *x3 = rnd_buf(3), *y = buf(), *z = buf(), *z2 = buf();
  calls = host_runs = 0;
  tpg_graph *g = make_graph(&k, x, y, z, TPG_MODE_EXPLICIT);
  if (!g) return;
  CHECK(calls == 1);
  tpg_graph_info info;
  CHECK_OK(tpg_graph_get_info(g, &info, sizeof info));
  CHECK(info.user_kernel_nodes == 1 && info.captured_nodes == 1 && info.host_nodes == 1 && info.event_nodes == 2);
  CHECK(info.nodes == 5);
  CHECK_OK(tpg_graph_launch(g, NULL));
  CHECK(wrong_y(y, x) == 0 && wrong_z(z, x) == 0 && host_runs == 1);

  /* A kernel view moves: an exec kernel-node update, no capture. */
  int kset = tpgfake_counter(C_EXEC_KSET), child = tpgfake_counter(C_EXEC_CHILD);
  tpg_binding b1 = {k.x, x2};
  CHECK_OK(tpg_graph_rebind(g, &b1, 1));
  CHECK(calls == 1 && tpgfake_counter(C_EXEC_KSET) == kset + 1 && tpgfake_counter(C_EXEC_CHILD) == child);
  poison(y), poison(z);
  CHECK_OK(tpg_graph_launch(g, NULL));
  CHECK(wrong_y(y, x2) == 0 && wrong_z(z, x2) == 0);

  /* A view of the captured node moves: captured again, swapped into the exec. */
  tpg_binding b2 = {k.z, z2};
  CHECK_OK(tpg_graph_rebind(g, &b2, 1));
  CHECK(calls == 2 && tpgfake_counter(C_EXEC_CHILD) == child + 1);
  poison(z), poison(z2);
  CHECK_OK(tpg_graph_launch(g, NULL));
  CHECK(wrong_z(z2, x2) == 0);
  CHECK(isnan(z[0]) && isnan(z[N - 1])); /* the old buffer is no longer written */

  /* Export: the template, run by itself, does what the exec does now. */
  void *cg = NULL;
  CHECK_OK(tpg_graph_export(g, &cg));
  CHECK(cg != NULL);
  poison(y), poison(z2);
  tpgfake_run_graph(cg);
  CHECK(wrong_y(y, x2) == 0 && wrong_z(z2, x2) == 0);

  /* Launch under the engine's capture: the graph as bound now, one node. */
  void *s = tpgfake_stream();
  CHECK(tpgfake_begin(s) == 0);
  CHECK_OK(tpg_graph_launch(g, (tpg_stream)s));
  void *cap = tpgfake_end(s);
  CHECK(cap != NULL);
  void *ex = cap ? tpgfake_instantiate(cap) : NULL;
  tpg_binding b3 = {k.x, x}; /* after the capture: not in its copy */
  CHECK_OK(tpg_graph_rebind(g, &b3, 1));
  poison(y), poison(z2);
  if (ex) tpgfake_exec_launch(ex);
  CHECK(wrong_y(y, x2) == 0 && wrong_z(z2, x2) == 0);
  poison(y), poison(z2);
  CHECK_OK(tpg_graph_launch(g, NULL));
  CHECK(wrong_y(y, x) == 0 && wrong_z(z2, x) == 0);
  /* A capture that was invalidated is refused. */
  CHECK(tpgfake_begin(s) == 0);
  tpgfake_capture_invalidate(s);
  CHECK_ST(tpg_graph_launch(g, (tpg_stream)s), TPG_ERROR_INVALID_STATE, "tpg_graph_launch: stream: its capture was invalidated");
  void *gone = tpgfake_end(s);
  CHECK(gone == NULL);
  if (ex) tpgfake_exec_destroy(ex);
  if (cap) tpgfake_graph_destroy(cap);
  tpgfake_stream_destroy(s);

  /* Whole-graph update: everything materialized again (captured again), the
   * template follows. */
  int upd = tpgfake_counter(C_EXEC_UPDATE);
  tpg_binding b4[2] = {{k.x, x3}, {k.z, z}};
  CHECK_OK(tpg_graph_update(g, NULL, b4, 2));
  CHECK(calls == 3 && tpgfake_counter(C_EXEC_UPDATE) == upd + 1); /* create, the rebind of z, this */
  poison(y), poison(z);
  CHECK_OK(tpg_graph_launch(g, NULL));
  CHECK(wrong_y(y, x3) == 0 && wrong_z(z, x3) == 0);
  poison(y), poison(z);
  CHECK_OK(tpg_graph_export(g, &cg));
  tpgfake_run_graph(cg);
  CHECK(wrong_y(y, x3) == 0 && wrong_z(z, x3) == 0);
  CHECK(host_runs >= 5);

  CHECK_OK(tpg_graph_destroy(g));
  tpg_plan_destroy(k.p);
  tpgfake_free(x), tpgfake_free(x2), tpgfake_free(x3), tpgfake_free(y), tpgfake_free(z), tpgfake_free(z2);
}

/* Eager and capture modes give the explicit graph's results. */
static void test_modes(tpg_module *m) {
  static const tpg_graph_mode modes[2] = {TPG_MODE_EAGER, TPG_MODE_CAPTURE};
  for (int i = 0; i < 2; i++) {
    kplan k;
    make_plan(&k, m, 0, lib_scale);
    float *x = rnd_buf(9), *y = buf(), *z = buf();
    calls = host_runs = 0;
    int rec = tpgfake_counter(C_EVREC), wait = tpgfake_counter(C_EVWAIT);
    tpg_graph *g = make_graph(&k, x, y, z, modes[i]);
    if (!g) continue;
    CHECK_OK(tpg_graph_launch(g, NULL));
    CHECK_OK(tpg_graph_launch(g, NULL));
    CHECK(wrong_y(y, x) == 0 && wrong_z(z, x) == 0 && host_runs == 2);
    CHECK(calls == (modes[i] == TPG_MODE_EAGER ? 2 : 1));
    CHECK(tpgfake_counter(C_EVREC) == rec + 2 && tpgfake_counter(C_EVWAIT) == wait + 2);
    void *cg = (void *)1;
    CHECK_ST(tpg_graph_export(g, &cg), TPG_ERROR_UNSUPPORTED, "only a TPG_MODE_EXPLICIT graph");
    CHECK(cg == NULL);
    if (modes[i] == TPG_MODE_EAGER) { /* rebinding an eager graph: the next launch's callback sees it */
      float *z2 = buf();
      tpg_binding b = {k.z, z2};
      CHECK_OK(tpg_graph_rebind(g, &b, 1));
      CHECK_OK(tpg_graph_launch(g, NULL));
      CHECK(wrong_z(z2, x) == 0);
      tpgfake_free(z2);
    }
    CHECK_OK(tpg_graph_destroy(g));
    tpg_plan_destroy(k.p);
    tpgfake_free(x), tpgfake_free(y), tpgfake_free(z);
  }
}

/* A cluster shape reaches the node (explicit) and the launch (eager). */
static void test_cluster(tpg_module *m) {
  static const tpg_graph_mode modes[2] = {TPG_MODE_EXPLICIT, TPG_MODE_EAGER};
  for (int i = 0; i < 2; i++) {
    tpg_plan *p;
    tpg_slot x, y;
    MUST_OK(tpg_plan_create(&p));
    MUST_OK(tpg_plan_add_slot(p, "x", TPG_F32, TPG_MEM_DEVICE, N, &x));
    MUST_OK(tpg_plan_add_slot(p, "y", TPG_F32, TPG_MEM_DEVICE, N, &y));
    tpg_arg a[5] = {tpg_arg_view(y, 0), tpg_arg_view(x, 0), TPG_ARG_VALUE(g_n), TPG_ARG_VALUE(g_a),
                    TPG_ARG_VALUE(g_b)};
    tpg_kernel_desc d = TPG_KERNEL_DESC_INIT;
    d.module = m;
    d.name = "axpy";
    d.grid[0] = 4;
    d.cluster[0] = 2;
    d.cluster[1] = d.cluster[2] = 1;
    d.args = a;
    d.nargs = 5;
    MUST_OK(tpg_plan_add_kernel(p, &d, NULL, 0, NULL));
    float *bx = rnd_buf(6), *by = buf();
    tpg_binding b[2] = {{x, bx}, {y, by}};
    tpg_graph_config cfg = TPG_GRAPH_CONFIG_INIT;
    cfg.bindings = b;
    cfg.nbindings = 2;
    cfg.mode = modes[i];
    int node0 = tpgfake_counter(C_CLUSTER_NODE), launch0 = tpgfake_counter(C_CLUSTER_LAUNCH);
    tpg_graph *g = NULL;
    CHECK_OK(tpg_graph_create(p, &cfg, &g));
    CHECK_OK(tpg_graph_launch(g, NULL));
    CHECK(wrong_y(by, bx) == 0);
    if (modes[i] == TPG_MODE_EXPLICIT) CHECK(tpgfake_counter(C_CLUSTER_NODE) == node0 + 1);
    else CHECK(tpgfake_counter(C_CLUSTER_LAUNCH) == launch0 + 1);
    CHECK_OK(tpg_graph_destroy(g));
    tpg_plan_destroy(p);
    tpgfake_free(bx), tpgfake_free(by);
  }
}

static void refused(tpg_module *m, tpg_capture_fn fn, const char *needle) {
  kplan k;
  make_plan(&k, m, 0, fn);
  float *x = rnd_buf(4), *y = buf(), *z = buf();
  tpg_binding b[3] = {{k.x, x}, {k.y, y}, {k.z, z}};
  tpg_graph_config cfg = TPG_GRAPH_CONFIG_INIT;
  cfg.bindings = b;
  cfg.nbindings = 3;
  tpg_graph *g = (tpg_graph *)1;
  CHECK_ST(tpg_graph_create(k.p, &cfg, &g), TPG_ERROR_INVALID_ARGUMENT, needle);
  CHECK(g == NULL);
  tpg_plan_destroy(k.p);
  tpgfake_free(x), tpgfake_free(y), tpgfake_free(z);
}

/* One kernel node whose arguments or launch the driver-side checks refuse. */
static void refused_kernel(tpg_module *m, const char *name, int arg3_float, int nargs, unsigned smem,
                           const char *needle) {
  tpg_plan *p;
  tpg_slot x, y;
  MUST_OK(tpg_plan_create(&p));
  MUST_OK(tpg_plan_add_slot(p, "x", TPG_F32, TPG_MEM_DEVICE, N, &x));
  MUST_OK(tpg_plan_add_slot(p, "y", TPG_F32, TPG_MEM_DEVICE, N, &y));
  float af = (float)g_a;
  tpg_arg a[5] = {tpg_arg_view(y, 0), tpg_arg_view(x, 0), TPG_ARG_VALUE(g_n), TPG_ARG_VALUE(g_a),
                  TPG_ARG_VALUE(g_b)};
  if (arg3_float) a[3] = TPG_ARG_VALUE(af);
  tpg_kernel_desc d = TPG_KERNEL_DESC_INIT;
  d.module = m;
  d.name = name;
  d.args = a;
  d.nargs = nargs;
  d.shared_bytes = smem;
  tpg_node n;
  MUST_OK(tpg_plan_add_kernel(p, &d, NULL, 0, &n));
  MUST_OK(tpg_plan_set_node_name(p, n, "attn"));
  float *bx = rnd_buf(5), *by = buf();
  tpg_binding b[2] = {{x, bx}, {y, by}};
  tpg_graph_config cfg = TPG_GRAPH_CONFIG_INIT;
  cfg.bindings = b;
  cfg.nbindings = 2;
  tpg_graph *g = (tpg_graph *)1;
  CHECK_ST(tpg_graph_create(p, &cfg, &g), TPG_ERROR_INVALID_ARGUMENT, needle);
  CHECK(g == NULL);
  tpg_plan_destroy(p);
  tpgfake_free(bx), tpgfake_free(by);
}

/* Conditional nodes through the driver path (the stand-in runs IF, WHILE
 * and SWITCH bodies by the value its cond_* kernels set): a WHILE doubling y
 * until a device counter runs out, an IF/ELSE and a SWITCH (one empty body)
 * keyed by a device value, rebind of slots used only inside bodies (exec
 * setters on body nodes), and the refusals: eager / capture mode, update. */
static tpg_status cond_kernel(tpg_plan *p, tpg_module *m, const char *name, const tpg_arg *a, int na,
                              const tpg_node *deps, int nd, tpg_node *out) {
  tpg_kernel_desc d = TPG_KERNEL_DESC_INIT;
  d.module = m;
  d.name = name;
  d.args = a;
  d.nargs = na;
  return tpg_plan_add_kernel(p, &d, deps, nd, out);
}

static int times_equal(const float *y, const float *x, float f) {
  int bad = 0;
  for (int i = 0; i < N; i++) bad += y[i] != f * x[i];
  return bad;
}
static int poisoned(const float *y) {
  int bad = 0;
  for (int i = 0; i < N; i++) bad += !isnan(y[i]);
  return bad;
}

static void test_conditional(tpg_module *m) {
  tpg_plan *p;
  MUST_OK(tpg_plan_create(&p));
  tpg_slot x, y, u, z, ctr, v;
  MUST_OK(tpg_plan_add_slot(p, "x", TPG_F32, TPG_MEM_DEVICE, N, &x));
  MUST_OK(tpg_plan_add_slot(p, "y", TPG_F32, TPG_MEM_DEVICE, N, &y));
  MUST_OK(tpg_plan_add_slot(p, "u", TPG_F32, TPG_MEM_DEVICE, N, &u));
  MUST_OK(tpg_plan_add_slot(p, "z", TPG_F32, TPG_MEM_DEVICE, N, &z));
  MUST_OK(tpg_plan_add_slot(p, "ctr", TPG_F32, TPG_MEM_DEVICE, 4, &ctr));
  MUST_OK(tpg_plan_add_slot(p, "v", TPG_F32, TPG_MEM_DEVICE, 4, &v));
  tpg_cond cw, ci, cs;
  MUST_OK(tpg_plan_add_cond(p, 1, 1, &cw));
  MUST_OK(tpg_plan_add_cond(p, 0, 1, &ci));
  MUST_OK(tpg_plan_add_cond(p, 9, 1, &cs)); /* no body has 9: the set kernel must win */
  tpg_conditional_desc cd = TPG_CONDITIONAL_DESC_INIT;
  tpg_node cp, loop, si, nif, ss, nsw;
  /* WHILE: y = 2 x, then y = 2 y until --ctr reaches 0. */
  tpg_arg a0[3] = {tpg_arg_view(y, 0), tpg_arg_view(x, 0), TPG_ARG_VALUE(g_n)};
  MUST_OK(cond_kernel(p, m, "scale2", a0, 3, NULL, 0, &cp));
  cd.type = TPG_COND_WHILE;
  cd.cond = cw;
  MUST_OK(tpg_plan_add_conditional(p, &cd, &cp, 1, &loop));
  MUST_OK(tpg_plan_body_begin(p, loop, 0));
  tpg_node k2;
  tpg_arg a2[3] = {tpg_arg_view(y, 0), tpg_arg_view(y, 0), TPG_ARG_VALUE(g_n)};
  MUST_OK(cond_kernel(p, m, "scale2", a2, 3, NULL, 0, &k2));
  tpg_arg acd[2] = {tpg_arg_cond(cw), tpg_arg_view(ctr, 0)};
  MUST_OK(cond_kernel(p, m, "cond_countdown", acd, 2, &k2, 1, NULL));
  MUST_OK(tpg_plan_body_end(p));
  /* IF / ELSE on v: u = 2 x, or u = axpy(x). */
  tpg_arg aci[2] = {tpg_arg_cond(ci), tpg_arg_view(v, 0)};
  MUST_OK(cond_kernel(p, m, "cond_set", aci, 2, NULL, 0, &si));
  cd.type = TPG_COND_IF;
  cd.cond = ci;
  cd.nbodies = 2;
  MUST_OK(tpg_plan_add_conditional(p, &cd, &si, 1, &nif));
  MUST_OK(tpg_plan_body_begin(p, nif, 0));
  tpg_arg au2[3] = {tpg_arg_view(u, 0), tpg_arg_view(x, 0), TPG_ARG_VALUE(g_n)};
  MUST_OK(cond_kernel(p, m, "scale2", au2, 3, NULL, 0, NULL));
  MUST_OK(tpg_plan_body_end(p));
  MUST_OK(tpg_plan_body_begin(p, nif, 1));
  tpg_arg aax[5] = {tpg_arg_view(u, 0), tpg_arg_view(x, 0), TPG_ARG_VALUE(g_n), TPG_ARG_VALUE(g_a),
                    TPG_ARG_VALUE(g_b)};
  MUST_OK(cond_kernel(p, m, "axpy", aax, 5, NULL, 0, NULL));
  MUST_OK(tpg_plan_body_end(p));
  /* SWITCH on v: z = axpy(x), z = 2 x, nothing (an empty body). */
  tpg_arg acs[2] = {tpg_arg_cond(cs), tpg_arg_view(v, 0)};
  MUST_OK(cond_kernel(p, m, "cond_set", acs, 2, NULL, 0, &ss));
  cd.type = TPG_COND_SWITCH;
  cd.cond = cs;
  cd.nbodies = 3;
  MUST_OK(tpg_plan_add_conditional(p, &cd, &ss, 1, &nsw));
  MUST_OK(tpg_plan_body_begin(p, nsw, 0));
  tpg_arg az[5] = {tpg_arg_view(z, 0), tpg_arg_view(x, 0), TPG_ARG_VALUE(g_n), TPG_ARG_VALUE(g_a),
                   TPG_ARG_VALUE(g_b)};
  MUST_OK(cond_kernel(p, m, "axpy", az, 5, NULL, 0, NULL));
  MUST_OK(tpg_plan_body_end(p));
  MUST_OK(tpg_plan_body_begin(p, nsw, 1));
  tpg_arg az2[3] = {tpg_arg_view(z, 0), tpg_arg_view(x, 0), TPG_ARG_VALUE(g_n)};
  MUST_OK(cond_kernel(p, m, "scale2", az2, 3, NULL, 0, NULL));
  MUST_OK(tpg_plan_body_end(p));

  float *bx = rnd_buf(11), *bx2 = rnd_buf(12), *by = buf(), *bu = buf(), *bz = buf(), *bz2 = buf();
  int *bctr = (int *)buf(), *bv = (int *)buf();
  tpg_binding b[6] = {{x, bx}, {y, by}, {u, bu}, {z, bz}, {ctr, bctr}, {v, bv}};
  tpg_graph_config cfg = TPG_GRAPH_CONFIG_INIT;
  cfg.bindings = b;
  cfg.nbindings = 6;
  tpg_graph *g = NULL;
  for (int mode = TPG_MODE_CAPTURE; mode <= TPG_MODE_EAGER; mode++) {
    cfg.mode = (tpg_graph_mode)mode;
    CHECK_ST(tpg_graph_create(p, &cfg, &g), TPG_ERROR_UNSUPPORTED, "need TPG_MODE_EXPLICIT");
    CHECK(g == NULL);
  }
  cfg.mode = TPG_MODE_EXPLICIT;
  CHECK_OK(tpg_graph_create(p, &cfg, &g));
  if (!g) goto out;
  for (int key = 0; key < 4; key++) {
    bctr[0] = 3 + key;
    bv[0] = key;
    poison(by);
    poison(bu);
    poison(bz);
    CHECK_OK(tpg_graph_launch(g, NULL));
    CHECK(bctr[0] == 0);
    CHECK(times_equal(by, bx, (float)(1 << (4 + key))) == 0); /* the loop ran 3 + key times */
    CHECK(key ? times_equal(bu, bx, 2.0f) == 0 : wrong_y(bu, bx) == 0);
    CHECK(key == 0 ? wrong_y(bz, bx) == 0 : key == 1 ? times_equal(bz, bx, 2.0f) == 0 : poisoned(bz) == 0);
  }
  /* Rebind x (top-level copy and every body) and z (bodies only): the body
   * nodes' exec copies take the new addresses. */
  int ksets = tpgfake_counter(C_EXEC_KSET);
  tpg_binding nb[2] = {{x, bx2}, {z, bz2}};
  CHECK_OK(tpg_graph_rebind(g, nb, 2));
  CHECK(tpgfake_counter(C_EXEC_KSET) - ksets == 5); /* y = 2 x, the IF's 2 bodies, the SWITCH's 2 */
  bctr[0] = 1;
  bv[0] = 1;
  poison(bz);
  poison(bz2);
  CHECK_OK(tpg_graph_launch(g, NULL));
  CHECK(times_equal(by, bx2, 4.0f) == 0);
  CHECK(times_equal(bu, bx2, 2.0f) == 0);
  CHECK(times_equal(bz2, bx2, 2.0f) == 0 && poisoned(bz) == 0);
  CHECK_ST(tpg_graph_update(g, p, NULL, 0), TPG_ERROR_UNSUPPORTED, "a whole-graph update of a plan with conditional");
  /* CUDA refuses a child graph with conditional nodes: so is a launch into
   * the engine's capture (which adds the graph as a child). */
  void *cst = tpgfake_stream();
  CHECK(tpgfake_begin(cst) == 0);
  CHECK_ST(tpg_graph_launch(g, (tpg_stream)cst), TPG_ERROR_UNSUPPORTED, "CUDA refuses a child graph holding them");
  void *cg = tpgfake_end(cst);
  if (cg) tpgfake_graph_destroy(cg);
  tpgfake_stream_destroy(cst);
  CHECK_OK(tpg_graph_destroy(g));
out:
  tpgfake_free(bx);
  tpgfake_free(bx2);
  tpgfake_free(by);
  tpgfake_free(bu);
  tpgfake_free(bz);
  tpgfake_free(bz2);
  tpgfake_free(bctr);
  tpgfake_free(bv);
  tpg_plan_destroy(p);
}

int main(int argc, char **argv) {
  if (tpgfake_setup(argc, argv) != 0) return 2;
  tpgfake_reset();
  g_ev_rec = tpgfake_event();
  g_ev_wait = tpgfake_event();
  CHECK(g_ev_rec && g_ev_wait);

  static const char image[] = "fake module";
  tpg_module *m = NULL;
  CHECK_OK(tpg_module_load(image, sizeof image, &m));
  static const char bad[] = "not a module";
  tpg_module *m2 = (tpg_module *)1;
  CHECK_ST(tpg_module_load(bad, sizeof bad, &m2), TPG_ERROR_INVALID_ARGUMENT, "the driver refused the image");
  CHECK(m2 == NULL);
  if (!m) return TPG_TEST_END();

  for (int how = 0; how < 3; how++) test_explicit(m, how);
  test_modes(m);
  test_cluster(m);
  test_conditional(m);
  refused(m, lib_nothing, "node lib: the capture holds no work");
  refused(m, lib_fail, "node lib: the capture callback returned 7");
  refused(m, lib_alloc, "node lib: the captured work allocates device memory");
  refused(m, lib_sync, "node lib: the capture was invalidated");
  refused_kernel(m, "axpy", 1, 5, 0, "node attn: args[3] is 4 bytes; the kernel's parameter 3 is 8 bytes at offset 24");
  refused_kernel(m, "axpy", 0, 4, 0, "node attn: 4 arguments given; the kernel takes 5 parameters");
  refused_kernel(m, "nope", 0, 5, 0, "node attn: the module has no kernel named \"nope\"");
  refused_kernel(m, "axpy", 0, 5, 300 * 1024, "node attn: shared_bytes = 307200 is more dynamic shared memory");
  CHECK_OK(tpg_module_destroy(m));
  tpgfake_event_destroy(g_ev_rec);
  tpgfake_event_destroy(g_ev_wait);
  char why[512];
  long live = tpgfake_live(why, sizeof why);
  if (live || tpgfake_violations()) fprintf(stderr, "%ld live (%s)\n%s", live, why, tpgfake_violation_text());
  CHECK(live == 0 && tpgfake_violations() == 0);
  return TPG_TEST_END();
}
