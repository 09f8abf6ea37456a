/* gemm_lt.c - the cuBLASLt GEMM node: the plan (lib/gemm/cublaslt.h) made
 * at fill, stream-captured into a child graph at add, captured again on a
 * rebind that moves one of its pointers and swapped in with
 * cuGraphExecChildGraphNodeSetParams, the template's child following (as
 * captured.c does, so tpg_graph_export hands out what runs). Why a child
 * graph and not cuBLASLt's kernel as a node of ours: lib/gemm/cublaslt.c.
 * The workspace is the node's lane (gn->res, placed at creation), the same
 * pointer at every capture; the argument view gn->args.gemm holds the
 * pointers, written by gemm.c's set_ptrs. A SwiGLU plan's child holds two
 * nodes, cuBLASLt's GEMM and our tpg_lt_swiglu (lib/gemm/lt_run.h).
 */
#define _POSIX_C_SOURCE 200809L
#include "graphbuild/nodes/gemm_lt.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/capture.h"
#include "lib/gemm/cublaslt.h"
#include "lib/gemm/lt_run.h"

typedef struct lt_state {
  tpg_lt_plan *plan;
  tpg_gemm_args cap; /* the view the exec's child was captured with */
} lt_state;

void tpg_gemm_lt_release(tpg_gnode *gn) {
  lt_state *s = gn->ext;
  if (!s) return;
  tpg_lt_plan_destroy(s->plan);
  free(s);
  gn->ext = NULL;
  gn->ext_bytes = 0;
}

tpg_status tpg_gemm_lt_fill(const tpg_nctx *c, const tpg_gemm_problem *p, const tpg_kernel_launch *l) {
  char why[300];
  tpg_gemm_lt_release(c->gn); /* a fill again (update) makes a new plan */
  lt_state *s = calloc(1, sizeof *s);
  if (!s) return tpg_err(TPG_ERROR_OUT_OF_MEMORY, "tpg_graph_create", "out of host memory");
  if (tpg_lt_plan_create(p, l->lt_algo, c->g->dev.ctx, &s->plan, why, sizeof why)) {
    free(s);
    return TPG_FAIL(TPG_ERROR_CUDA, "node %s: cuBLASLt: %s", tpg_nctx_label(c), why);
  }
  if (tpg_lt_plan_workspace(s->plan) > tpg_ws_room(c->gn, 0)) { /* no counters: from the lane's boundary */
    tpg_lt_plan_destroy(s->plan);
    free(s);
    return TPG_ARG_FAIL("node %s: cuBLASLt's algorithm needs more workspace than the graph allocated at creation "
                        "(a shape change needs a new graph)", tpg_nctx_label(c));
  }
  c->gn->ext = s;
  c->gn->ext_bytes = sizeof *s;
  return TPG_SUCCESS;
}

static tpg_status issue(const tpg_nctx *c, CUstream stream) {
  lt_state *s = c->gn->ext;
  char who[160];
  snprintf(who, sizeof who, "node %s", tpg_nctx_label(c));
  return tpg_lt_run(s->plan, &c->gn->args.gemm, stream, who);
}

tpg_status tpg_gemm_lt_run(const tpg_nctx *c, CUstream stream) { return issue(c, stream); }

tpg_status tpg_gemm_lt_add(const tpg_nctx *c, CUgraph graph, const tpg_deps *deps) {
  lt_state *s = c->gn->ext;
  CUgraph child;
  TPG_TRY(tpg_capture_child(c, issue, &child));
  /* The child is cloned into the parent; ours can go. */
  CUresult r = tpg_cu->cuGraphAddChildGraphNode(&c->gn->cu[0], graph, deps->nodes, deps->n, child);
  tpg_cu->cuGraphDestroy(child);
  if (r != CUDA_SUCCESS) return tpg_node_cu_fail(c, r, "cuGraphAddChildGraphNode (cuBLASLt GEMM)");
  c->gn->ncu = 1;
  s->cap = c->gn->args.gemm;
  return TPG_SUCCESS;
}

/* Whether the view moved since the child was captured (sizes never change). */
static int moved(const tpg_gemm_args *a, const tpg_gemm_args *b) {
  return a->x != b->x || a->w != b->w || a->y != b->y || a->bias != b->bias || a->residual != b->residual ||
         a->workspace != b->workspace;
}

tpg_status tpg_gemm_lt_patch(const tpg_nctx *c) {
  static const char fn[] = "tpg_graph_rebind";
  lt_state *s = c->gn->ext;
  CUgraph child, embedded = NULL;
  if (!moved(&s->cap, &c->gn->args.gemm)) return TPG_SUCCESS;
  TPG_TRY(tpg_capture_child(c, issue, &child));
  tpg_status st = TPG_SUCCESS;
  CUresult r = tpg_cu->cuGraphExecChildGraphNodeSetParams(c->g->exec, c->gn->cu[0], child);
  if (r != CUDA_SUCCESS) {
    st = tpg_cu_fail(r, fn, "cuGraphExecChildGraphNodeSetParams (cuBLASLt GEMM)");
  } else {
    /* The template's child follows (tpg_graph_export): same shape, new parameters. */
    r = tpg_cu->cuGraphChildGraphNodeGetGraph(c->gn->cu[0], &embedded);
    st = r != CUDA_SUCCESS ? tpg_cu_fail(r, fn, "cuGraphChildGraphNodeGetGraph") : tpg_graph_mirror(fn, embedded, child);
  }
  tpg_cu->cuGraphDestroy(child);
  if (st == TPG_SUCCESS) s->cap = c->gn->args.gemm;
  else memset(&s->cap, 0, sizeof s->cap); /* capture again next time */
  return st;
}
