/* captured.c - the captured-work node kind (tpg_plan_add_captured): any
 * library's work, issued by the engine's callback on a stream we capture,
 * as one child-graph node.
 *
 * The callback sees the resolved addresses of the views it declared; those
 * addresses are baked into what it enqueues, so a rebind that moves one of
 * them captures again (lib/capture.c: thread-local mode, checked child) and
 * swaps the new child into the exec with cuGraphExecChildGraphNodeSetParams;
 * the template's copy gets the new node parameters too, so tpg_graph_export
 * hands out what the next launch runs. A rebind that moves none of them
 * captures nothing. In eager mode the callback simply runs at every launch.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graphbuild/nodes/common.h"
#include "lib/capture.h"

static const tpg_view *views_of(const tpg_node_rec *n) { return (const tpg_view *)n->data; }
static const size_t *counts_of(const tpg_node_rec *n) {
  return (const size_t *)(views_of(n) + n->u.captured.nviews);
}

/* ---- plan time ------------------------------------------------------------ */

static tpg_status check(const tpg_plan *p, const char *fn, const tpg_node_rec *n) {
  if (!n->u.captured.fn) return tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn, "desc->fn is NULL: expected a callback");
  const tpg_view *v = views_of(n);
  const size_t *cnt = counts_of(n);
  for (int i = 0; i < n->u.captured.nviews; i++) {
    char what[40];
    snprintf(what, sizeof what, "desc->views[%d]", i);
    if (cnt[i] == 0)
      return tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn, "desc->counts[%d] is 0: expected >= 1 element", i);
    TPG_TRY(tpg_view_check(p, fn, what, v[i], cnt[i], 1));
  }
  return TPG_SUCCESS;
}

static int views(const tpg_node_rec *n, tpg_view_use *out) {
  const tpg_view *v = views_of(n);
  const size_t *cnt = counts_of(n);
  int k = 0;
  for (int i = 0; i < n->u.captured.nviews && k < TPG_MAX_NODE_VIEWS; i++) out[k++] = (tpg_view_use){v[i], cnt[i], 1};
  return k;
}

static void dot(tpg_sbuf *s, const tpg_plan *p, const tpg_node_rec *n) {
  tpg_sb_printf(s, "\\ncaptured");
  for (int i = 0; i < n->u.captured.nviews; i++) {
    char role[24];
    snprintf(role, sizeof role, "v%d", i);
    tpg_sb_view(s, p, role, views_of(n)[i]);
  }
}

/* ---- create time ---------------------------------------------------------- */

/* gn->ext: the addresses handed to the callback, and those the child in the
 * exec was captured with (a rebind that moves none of them captures nothing). */
typedef struct captured_state {
  int n;
  void **ptrs;          /* [n] */
  void **captured;      /* [n] */
} captured_state;

static void release(tpg_graph *g, tpg_gnode *gn) {
  (void)g;
  free(gn->ext);
  gn->ext = NULL;
  gn->ext_bytes = 0;
}

/* The one writer of the addresses (fill and patch). */
static tpg_status set_ptrs(const tpg_nctx *c) {
  captured_state *cs = c->gn->ext;
  const tpg_view *v = views_of(c->n);
  for (int i = 0; i < cs->n; i++) cs->ptrs[i] = TPG_VPTR(c, v[i]);
  return TPG_SUCCESS;
}

static tpg_status fill(const tpg_nctx *c) {
  release(c->g, c->gn);
  int n = c->n->u.captured.nviews;
  size_t bytes = sizeof(captured_state) + 2 * (size_t)n * sizeof(void *);
  captured_state *cs = calloc(1, bytes);
  if (!cs) return tpg_err(TPG_ERROR_OUT_OF_MEMORY, "tpg_graph_create", "out of host memory");
  cs->n = n;
  cs->ptrs = (void **)(cs + 1);
  cs->captured = cs->ptrs + n;
  c->gn->ext = cs;
  c->gn->ext_bytes = bytes;
  return set_ptrs(c);
}

/* Captures the callback's work with the current addresses (recorded as the
 * ones the child holds). */
static tpg_status capture(const tpg_nctx *c, const char *fn, CUgraph *out) {
  captured_state *cs = c->gn->ext;
  TPG_TRY(tpg_capture_user(fn, tpg_nctx_label(c), c->g->dev.ctx, c->g->cap_stream, c->n->u.captured.fn,
                           c->n->u.captured.user, cs->ptrs, cs->n, out));
  memcpy(cs->captured, cs->ptrs, (size_t)cs->n * sizeof *cs->ptrs);
  return TPG_SUCCESS;
}

static tpg_status add(const tpg_nctx *c, CUgraph graph, const tpg_deps *deps) {
  CUgraph child;
  TPG_TRY(capture(c, "tpg_graph_create", &child));
  /* The child is cloned into the parent; ours can go. */
  CUresult r = tpg_cu->cuGraphAddChildGraphNode(&c->gn->cu[0], graph, deps->nodes, deps->n, child);
  tpg_cu->cuGraphDestroy(child);
  if (r != CUDA_SUCCESS) return tpg_node_cu_fail(c, r, "cuGraphAddChildGraphNode (captured work)");
  c->gn->ncu = 1;
  return TPG_SUCCESS;
}

static tpg_status run_eager(const tpg_nctx *c, CUstream stream) {
  captured_state *cs = c->gn->ext;
  int rc = c->n->u.captured.fn(c->n->u.captured.user, (tpg_stream)stream, cs->ptrs, cs->n);
  if (rc != 0)
    return tpg_err(TPG_ERROR_INVALID_ARGUMENT, "tpg_graph_launch", "node %s: the callback returned %d",
                   tpg_nctx_label(c), rc);
  return TPG_SUCCESS;
}

/* ---- rebind --------------------------------------------------------------- */

static tpg_status patch(const tpg_nctx *c) {
  static const char fn[] = "tpg_graph_rebind";
  TPG_TRY(set_ptrs(c));
  if (c->g->mode == TPG_MODE_EAGER) return TPG_SUCCESS; /* the next launch passes the new addresses */
  captured_state *cs = c->gn->ext;
  if (memcmp(cs->ptrs, cs->captured, (size_t)cs->n * sizeof *cs->ptrs) == 0) return TPG_SUCCESS;
  CUgraph child;
  TPG_TRY(capture(c, fn, &child));
  tpg_status st = TPG_SUCCESS;
  CUresult r = tpg_cu->cuGraphExecChildGraphNodeSetParams(c->g->exec, c->gn->cu[0], child);
  if (r == CUDA_ERROR_INVALID_VALUE || r == CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE) {
    st = tpg_err(TPG_ERROR_UNSUPPORTED, fn,
                 "node %s: the work captured for the new addresses has another shape than the first capture (the "
                 "library chose other kernels or a different number of them), and an instantiated graph can only "
                 "take the same shape (cuGraphExecChildGraphNodeSetParams: %s); create the graph with these "
                 "bindings instead",
                 tpg_nctx_label(c), r == CUDA_ERROR_INVALID_VALUE ? "CUDA_ERROR_INVALID_VALUE"
                                                                  : "CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE");
  } else if (r != CUDA_SUCCESS) {
    st = tpg_cu_fail(r, fn, "cuGraphExecChildGraphNodeSetParams (captured work)");
  } else {
    /* The template's child follows (tpg_graph_export): same shape, new parameters. */
    CUgraph embedded = NULL;
    r = tpg_cu->cuGraphChildGraphNodeGetGraph(c->gn->cu[0], &embedded);
    if (r != CUDA_SUCCESS) st = tpg_cu_fail(r, fn, "cuGraphChildGraphNodeGetGraph");
    else st = tpg_graph_mirror(fn, embedded, child);
  }
  tpg_cu->cuGraphDestroy(child);
  if (st != TPG_SUCCESS) memset(cs->captured, 0, (size_t)cs->n * sizeof *cs->captured); /* capture again next time */
  return st;
}

/* ---- facts ---------------------------------------------------------------- */

static void count(const tpg_gnode *gn, tpg_graph_info *info) {
  (void)gn;
  info->nodes++;
  info->captured_nodes++;
}

const tpg_kind_ops tpg_kind_captured = {
    .name = "captured",
    .dot_shape = "component",
    .check = check,
    .views = views,
    .dot = dot,
    .fill = fill,
    .add = add,
    .run_eager = run_eager,
    .patch = patch,
    .count = count,
    .release = release,
};
