/* kernel_arg_fake_test.c - tpg_graph_set_kernel_arg on the stand-in driver:
 * a by-value argument of an engine kernel node changed between launches
 * through the exec's kernel node setter, no re-instantiation.
 * The fake's C kernel axpy(y, x, n, double a, float b) computes y = a x + b,
 * so every result is exact. Checked: the next launch uses the new value, in
 * explicit and eager modes; one exec setter call per change; the value stays
 * through a rebind, a whole-graph update from the graph's own plan and an
 * export (the template, run by itself, gives what the exec gives); an update
 * with a new plan takes that plan's value; a node in a conditional body;
 * refusals naming the node (view argument, index, size, other kinds, other
 * plans, capture mode); a failing setter leaves the argument as it was.
 * Nothing live and no violation at the end. */
#define _POSIX_C_SOURCE 200809L
#include <stdlib.h>
#include <string.h>

#include "tests/fake/tpgfake.h"
#include "tests/tpg_test.h"

#define N 64

static int g_n = N;

typedef struct {
  tpg_plan *p;
  tpg_slot x, y;
  tpg_node k, ms;
} kplan;

static void make_plan(kplan *k, tpg_module *m, double a, float b) {
  tpg_arg args[5] = {tpg_arg_view(0, 0), tpg_arg_view(0, 0), TPG_ARG_VALUE(g_n), TPG_ARG_VALUE(a),
                     TPG_ARG_VALUE(b)};
  CHECK_OK(tpg_plan_create(&k->p));
  CHECK_OK(tpg_plan_add_slot(k->p, "x", TPG_F32, TPG_MEM_DEVICE, N, &k->x));
  CHECK_OK(tpg_plan_add_slot(k->p, "y", TPG_F32, TPG_MEM_DEVICE, N, &k->y));
  args[0] = tpg_arg_view(k->y, 0);
  args[1] = tpg_arg_view(k->x, 0);
  tpg_kernel_desc d = TPG_KERNEL_DESC_INIT;
  d.module = m;
  d.name = "axpy";
  d.args = args;
  d.nargs = 5;
  CHECK_OK(tpg_plan_add_kernel(k->p, &d, NULL, 0, &k->k));
  CHECK_OK(tpg_plan_set_node_name(k->p, k->k, "scale"));
  CHECK_OK(tpg_plan_add_memset(k->p, (tpg_view){k->x, 0, 0}, 0x40000000u, N, NULL, 0, &k->ms)); /* x = 2 */
  CHECK_OK(tpg_plan_add_dependency(k->p, k->ms, k->k));
}

static tpg_graph *make_graph(kplan *k, float *x, float *y, tpg_graph_mode mode) {
  tpg_binding b[2] = {{k->x, x}, {k->y, y}};
  tpg_graph_config cfg = TPG_GRAPH_CONFIG_INIT;
  cfg.bindings = b;
  cfg.nbindings = 2;
  cfg.mode = mode;
  tpg_graph *g = NULL;
  CHECK_OK(tpg_graph_create(k->p, &cfg, &g));
  return g;
}

static int all(const float *p, float v) {
  for (int i = 0; i < N; i++)
    if (p[i] != v) return 0;
  return 1;
}

/* Launches and checks y = a * 2 + b. */
static int launched_gives(tpg_graph *g, float *y, float want) {
  memset(y, 0xff, N * sizeof(float));
  if (tpg_graph_launch(g, NULL) != TPG_SUCCESS) return 0;
  return all(y, want);
}

static void explicit_and_eager(tpg_module *m, tpg_graph_mode mode) {
  kplan k;
  make_plan(&k, m, 1.0, 0.5f);
  float *x = tpgfake_dev_alloc(0, N * 4), *y = tpgfake_dev_alloc(0, N * 4), *y2 = tpgfake_dev_alloc(0, N * 4);
  tpg_graph *g = make_graph(&k, x, y, mode);
  CHECK(launched_gives(g, y, 2.5f));
  long ksets = tpgfake_counter(TPGFAKE_C_EXEC_KSET);
  double a = 3.0;
  float b = 0.25f;
  CHECK_OK(tpg_graph_set_kernel_arg(g, k.k, 3, &a, sizeof a));
  CHECK_OK(tpg_graph_set_kernel_arg(g, k.k, 4, &b, sizeof b));
  CHECK(tpgfake_counter(TPGFAKE_C_EXEC_KSET) - ksets == (mode == TPG_MODE_EXPLICIT ? 2 : 0));
  CHECK(launched_gives(g, y, 6.25f));
  /* Kept through a rebind of a view of the same node. */
  tpg_binding nb = {k.y, y2};
  CHECK_OK(tpg_graph_rebind(g, &nb, 1));
  CHECK(launched_gives(g, y2, 6.25f));
  if (mode == TPG_MODE_EXPLICIT) {
    /* ... through a whole-graph update from the graph's own plan ... */
    CHECK_OK(tpg_graph_update(g, NULL, NULL, 0));
    CHECK(launched_gives(g, y2, 6.25f));
    /* ... and into the exported template. */
    a = 5.0;
    CHECK_OK(tpg_graph_set_kernel_arg(g, k.k, 3, &a, sizeof a));
    tpg_cu_graph cg = NULL;
    CHECK_OK(tpg_graph_get_cu_graph(g, &cg));
    memset(y2, 0, N * sizeof(float));
    tpgfake_run_graph(cg);
    CHECK(all(y2, 10.25f));
    void *cg2 = NULL;
    CHECK_OK(tpg_graph_export(g, &cg2));
    CHECK(cg2 == (void *)cg);
    /* A failing setter: the argument keeps its value. */
    double a_bad = 7.0;
    tpgfake_fail_call("cuGraphExecKernelNodeSetParams", 1);
    CHECK_ST(tpg_graph_set_kernel_arg(g, k.k, 3, &a_bad, sizeof a_bad), TPG_ERROR_CUDA,
             "tpg_graph_set_kernel_arg: cuGraphExecKernelNodeSetParams for node scale failed");
    tpgfake_fail_call(NULL, 0);
    CHECK(launched_gives(g, y2, 10.25f));
    CHECK_OK(tpg_graph_update(g, NULL, NULL, 0)); /* the plan copy kept the old value too */
    CHECK(launched_gives(g, y2, 10.25f));
    /* An update with a new plan takes that plan's values. */
    kplan k2;
    make_plan(&k2, m, 4.0, 1.0f);
    CHECK_OK(tpg_graph_update(g, k2.p, NULL, 0));
    CHECK(launched_gives(g, y2, 9.0f));
    CHECK_OK(tpg_graph_set_kernel_arg(g, k.k, 3, &a, sizeof a)); /* the first plan's handle still names it */
    CHECK(launched_gives(g, y2, 11.0f));
    tpg_plan_destroy(k2.p);
  }
  /* Refusals, each naming what was wrong; nothing changes. */
  double d = 1.0;
  int i4 = 1;
  CHECK_ST(tpg_graph_set_kernel_arg(g, k.k, 0, &d, 8), TPG_ERROR_INVALID_ARGUMENT,
           "args[0] of node scale is a slot view, not a by-value argument: rebind its slot instead");
  CHECK_ST(tpg_graph_set_kernel_arg(g, k.k, 5, &d, 8), TPG_ERROR_INVALID_ARGUMENT,
           "index is 5: node scale has 5 arguments (0..4)");
  CHECK_ST(tpg_graph_set_kernel_arg(g, k.k, -1, &d, 8), TPG_ERROR_INVALID_ARGUMENT, "index is -1");
  CHECK_ST(tpg_graph_set_kernel_arg(g, k.k, 3, &i4, sizeof i4), TPG_ERROR_INVALID_ARGUMENT,
           "size is 4: args[3] of node scale is 8 bytes");
  CHECK_ST(tpg_graph_set_kernel_arg(g, k.ms, 0, &i4, sizeof i4), TPG_ERROR_INVALID_ARGUMENT,
           "node memset#1 is a memset node: only engine kernel nodes (tpg_plan_add_kernel)");
  CHECK_ST(tpg_graph_set_kernel_arg(g, k.k, 3, NULL, 8), TPG_ERROR_INVALID_ARGUMENT, "value is NULL");
  CHECK_ST(tpg_graph_set_kernel_arg(NULL, k.k, 3, &d, 8), TPG_ERROR_INVALID_ARGUMENT, "graph is NULL");
  kplan other;
  make_plan(&other, m, 1.0, 0.0f);
  CHECK_ST(tpg_graph_set_kernel_arg(g, other.k, 3, &d, 8), TPG_ERROR_INVALID_ARGUMENT,
           "is not a node of the plan this graph was created from");
  tpg_plan_destroy(other.p);
  CHECK(launched_gives(g, y2, mode == TPG_MODE_EXPLICIT ? 11.0f : 6.25f));
  CHECK_OK(tpg_graph_destroy(g));
  CHECK_ST(tpg_graph_set_kernel_arg(g, k.k, 3, &d, 8), TPG_ERROR_INVALID_ARGUMENT, "not a live tpg_graph");
  tpg_plan_destroy(k.p);
  tpgfake_free(x);
  tpgfake_free(y);
  tpgfake_free(y2);
}

static void capture_mode(tpg_module *m) {
  kplan k;
  make_plan(&k, m, 1.0, 0.5f);
  float *x = tpgfake_dev_alloc(0, N * 4), *y = tpgfake_dev_alloc(0, N * 4);
  tpg_graph *g = make_graph(&k, x, y, TPG_MODE_CAPTURE);
  double a = 3.0;
  CHECK_ST(tpg_graph_set_kernel_arg(g, k.k, 3, &a, sizeof a), TPG_ERROR_UNSUPPORTED, "TPG_MODE_CAPTURE");
  CHECK(launched_gives(g, y, 2.5f));
  CHECK_OK(tpg_graph_destroy(g));
  tpg_plan_destroy(k.p);
  tpgfake_free(x);
  tpgfake_free(y);
}

/* axpy in the body of an IF whose condition defaults to 1 at every launch. */
static void in_a_body(tpg_module *m) {
  tpg_plan *p = NULL;
  tpg_slot x, y;
  tpg_cond c;
  tpg_node ms, nif, kk;
  CHECK_OK(tpg_plan_create(&p));
  CHECK_OK(tpg_plan_add_slot(p, "x", TPG_F32, TPG_MEM_DEVICE, N, &x));
  CHECK_OK(tpg_plan_add_slot(p, "y", TPG_F32, TPG_MEM_DEVICE, N, &y));
  CHECK_OK(tpg_plan_add_memset(p, (tpg_view){x, 0, 0}, 0x40000000u, N, NULL, 0, &ms));
  CHECK_OK(tpg_plan_add_cond(p, 1, 1, &c));
  tpg_conditional_desc cd = TPG_CONDITIONAL_DESC_INIT;
  cd.type = TPG_COND_IF;
  cd.cond = c;
  CHECK_OK(tpg_plan_add_conditional(p, &cd, &ms, 1, &nif));
  CHECK_OK(tpg_plan_body_begin(p, nif, 0));
  double a = 1.0;
  float b = 0.0f;
  tpg_arg args[5] = {tpg_arg_view(y, 0), tpg_arg_view(x, 0), TPG_ARG_VALUE(g_n), TPG_ARG_VALUE(a), TPG_ARG_VALUE(b)};
  tpg_kernel_desc d = TPG_KERNEL_DESC_INIT;
  d.module = m;
  d.name = "axpy";
  d.args = args;
  d.nargs = 5;
  CHECK_OK(tpg_plan_add_kernel(p, &d, NULL, 0, &kk));
  CHECK_OK(tpg_plan_body_end(p));
  float *bx = tpgfake_dev_alloc(0, N * 4), *by = tpgfake_dev_alloc(0, N * 4);
  tpg_binding bb[2] = {{x, bx}, {y, by}};
  tpg_graph_config cfg = TPG_GRAPH_CONFIG_INIT;
  cfg.bindings = bb;
  cfg.nbindings = 2;
  tpg_graph *g = NULL;
  CHECK_OK(tpg_graph_create(p, &cfg, &g));
  CHECK(launched_gives(g, by, 2.0f));
  a = -1.5;
  CHECK_OK(tpg_graph_set_kernel_arg(g, kk, 3, &a, sizeof a));
  CHECK(launched_gives(g, by, -3.0f));
  CHECK_OK(tpg_graph_destroy(g));
  tpg_plan_destroy(p);
  tpgfake_free(bx);
  tpgfake_free(by);
}

int main(int argc, char **argv) {
  if (tpgfake_setup(argc, argv)) return 2;
  tpgfake_reset();
  static const char image[] = "fake module";
  tpg_module *m = NULL;
  CHECK_OK(tpg_module_load(image, sizeof image, &m));
  explicit_and_eager(m, TPG_MODE_EXPLICIT);
  explicit_and_eager(m, TPG_MODE_EAGER);
  capture_mode(m);
  in_a_body(m);
  CHECK_OK(tpg_module_destroy(m));
  CHECK(tpgfake_violations() == 0);
  if (tpgfake_violations()) fprintf(stderr, "violations: %s\n", tpgfake_violation_text());
  char why[256] = "";
  CHECK(tpgfake_live(why, sizeof why) == 0);
  if (tpgfake_live(NULL, 0)) fprintf(stderr, "live: %s\n", why);
  return TPG_TEST_END();
}
