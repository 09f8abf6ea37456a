/* export.c - the graph's CUDA graph handed out (tpg_graph_export), kept
 * equal to what the exec runs, and tpg_graph_launch under stream capture.
 *
 * The template graph the exec was instantiated from is what engines embed.
 * Rebind and update change the exec through its setters; the template gets
 * the same parameters through the non-exec setters, from our own copy of
 * each node's parameters (the same struct the exec setter was given), so
 * the two cannot disagree. After a rebind that happens at the next export,
 * not in the rebind: rebinding is on an engine's per-step path and most
 * graphs are never exported, so it should not pay a second driver call per
 * node for them. Captured children of the template are mirrored by
 * their kind (nodes/captured.c). NCCL children cannot be: their kernels'
 * arguments point into resources the new capture owns, which the exec keeps
 * alive but the template would not, so after such a re-capture export is
 * refused instead of handing out a graph that would read freed memory.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>

#include "graphbuild/graph.h"
#include "lib/capture.h"

/* The template's CUDA nodes cu[0..ncu) take the parameters in `from`: a
 * kernel node the epilogue's when `from` has an NCCL epilogue (the kernel
 * after the child) or is a one-rank all-reduce's epilogue alone, else the
 * node's own; memset and memcpy theirs. */
static tpg_status sync_nodes(const char *fn, const CUgraphNode *cu, int ncu, const tpg_gnode *from) {
  for (int j = 0; j < ncu; j++) {
    CUgraphNodeType t;
    CUresult r = tpg_cu->cuGraphNodeGetType(cu[j], &t);
    if (r != CUDA_SUCCESS) return tpg_cu_fail(r, fn, "cuGraphNodeGetType");
    if (t == CU_GRAPH_NODE_TYPE_KERNEL) {
      const int epi = (from->has_epi && j > 0) || from->solo == TPG_SOLO_EPILOGUE; /* one rank: the epilogue alone */
      r = tpg_cu->cuGraphKernelNodeSetParams(cu[j], epi ? &from->epi_kp : &from->kp);
      if (r != CUDA_SUCCESS) return tpg_cu_fail(r, fn, "cuGraphKernelNodeSetParams (template)");
    } else if (t == CU_GRAPH_NODE_TYPE_MEMSET) {
      r = tpg_cu->cuGraphMemsetNodeSetParams(cu[j], &from->ms);
      if (r != CUDA_SUCCESS) return tpg_cu_fail(r, fn, "cuGraphMemsetNodeSetParams (template)");
    } else if (t == CU_GRAPH_NODE_TYPE_MEMCPY) {
      r = tpg_cu->cuGraphMemcpyNodeSetParams(cu[j], &from->cp);
      if (r != CUDA_SUCCESS) return tpg_cu_fail(r, fn, "cuGraphMemcpyNodeSetParams (template)");
    }
  }
  return TPG_SUCCESS;
}

void tpg_template_mark(tpg_graph *g, int nccl_recaptured) {
  if (g->mode != TPG_MODE_EXPLICIT) return;
  if (nccl_recaptured) g->export_stale = 1;
  g->template_dirty = 1;
}

tpg_status tpg_template_update(tpg_graph *g, const tpg_plan *p, const tpg_gnode *fresh) {
  static const char fn[] = "tpg_graph_update";
  for (int i = 0; i < p->nnodes; i++) {
    const tpg_gnode *old = &g->nodes[i], *nw = &fresh[i];
    if (old->ncu != nw->ncu)
      return tpg_err(TPG_ERROR_INTERNAL, fn, "node %d: %d CUDA nodes, %d before", i, nw->ncu, old->ncu);
    TPG_TRY(sync_nodes(fn, old->cu, old->ncu, nw));
    for (int j = 0; j < old->ncu; j++) {
      CUgraphNodeType t;
      CUresult r = tpg_cu->cuGraphNodeGetType(old->cu[j], &t);
      if (r != CUDA_SUCCESS) return tpg_cu_fail(r, fn, "cuGraphNodeGetType");
      if (t != CU_GRAPH_NODE_TYPE_GRAPH) continue;
      if (tpg_kind(p->nodes[i].kind)->collective) {
        g->export_stale = 1; /* NCCL's child: see the top of this file */
        continue;
      }
      CUgraph to, from;
      r = tpg_cu->cuGraphChildGraphNodeGetGraph(old->cu[j], &to);
      if (r == CUDA_SUCCESS) r = tpg_cu->cuGraphChildGraphNodeGetGraph(nw->cu[j], &from);
      if (r != CUDA_SUCCESS) return tpg_cu_fail(r, fn, "cuGraphChildGraphNodeGetGraph");
      TPG_TRY(tpg_graph_mirror(fn, to, from));
    }
  }
  return TPG_SUCCESS;
}

/* Brings the template up to date with the rebinds since the last time (the
 * graph's context is current). */
static tpg_status template_refresh(tpg_graph *g, const char *fn) {
  if (!g->template_dirty) return TPG_SUCCESS;
  for (int i = 0; i < g->plan->nnodes; i++) TPG_TRY(sync_nodes(fn, g->nodes[i].cu, g->nodes[i].ncu, &g->nodes[i]));
  g->template_dirty = 0;
  return TPG_SUCCESS;
}

/* Both public forms: the template brought up to date, then handed out. */
static tpg_status get_cu_graph(tpg_graph *g, CUgraph *out, const char *fn, const char *outname) {
  if (!out) return tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn, "%s is NULL: expected a CUgraph to set", outname);
  *out = NULL;
  if (!g) return tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn, "graph is NULL: expected a tpg_graph");
  if (!tpg_graph_live(g))
    return tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn, "graph is not a live tpg_graph (destroyed or corrupt handle)");
  if (g->mode != TPG_MODE_EXPLICIT)
    return tpg_err(TPG_ERROR_UNSUPPORTED, fn,
                   "the graph is mode %d: only a TPG_MODE_EXPLICIT graph has a CUDA graph to export", (int)g->mode);
  if (g->export_stale)
    return tpg_err(TPG_ERROR_UNSUPPORTED, fn,
                   "an NCCL collective of this graph was re-captured by a rebind or update, and its new capture "
                   "cannot be copied into the exported graph (NCCL's resources belong to the exec): export before "
                   "rebinding collective buffers, or create the graph with the buffers it should keep");
  if (g->template_dirty) {
    TPG_TRY(tpg_dev_push(&g->dev));
    tpg_status st = template_refresh(g, fn);
    tpg_dev_pop();
    TPG_TRY(st);
  }
  *out = g->graph;
  return TPG_SUCCESS;
}

tpg_status tpg_graph_get_cu_graph(tpg_graph *g, tpg_cu_graph *out) {
  tpg_err_clear();
  _Static_assert(sizeof(tpg_cu_graph) == sizeof(CUgraph), "tpg_cu_graph is a CUgraph");
  return tpg_err_public(get_cu_graph(g, (CUgraph *)out, __func__, "out"), __func__);
}

tpg_status tpg_graph_export(const tpg_graph *g, void **cu_graph) {
  tpg_err_clear();
  /* The older form: a const handle, though the template it hands out is
   * brought up to date (kept for source compatibility; see the header). */
  CUgraph cg = NULL;
  tpg_status st = get_cu_graph((tpg_graph *)g, cu_graph ? &cg : NULL, __func__, "cu_graph");
  if (cu_graph) *cu_graph = (void *)cg;
  return tpg_err_public(st, __func__);
}

tpg_status tpg_launch_into_capture(tpg_graph *g, CUstream stream, int *into) {
  static const char fn[] = "tpg_graph_launch";
  *into = 0;
  CUstreamCaptureStatus cs = CU_STREAM_CAPTURE_STATUS_NONE;
  cuuint64_t id = 0;
  CUgraph cg = NULL;
  const CUgraphNode *deps = NULL;
  const CUgraphEdgeData *edata = NULL;
  size_t nd = 0;
  CUresult r = tpg_cu->cuStreamGetCaptureInfo(stream, &cs, &id, &cg, &deps, &edata, &nd);
  if (r != CUDA_SUCCESS) return tpg_cu_fail(r, fn, "cuStreamGetCaptureInfo");
  if (cs == CU_STREAM_CAPTURE_STATUS_NONE) return TPG_SUCCESS;
  if (cs != CU_STREAM_CAPTURE_STATUS_ACTIVE)
    return tpg_err(TPG_ERROR_INVALID_STATE, fn, "stream: its capture was invalidated before this launch");
  if (g->mode == TPG_MODE_EAGER) { /* its work goes into the capture as it is issued */
    *into = 2;
    return TPG_SUCCESS;
  }
  if (g->export_stale)
    return tpg_err(TPG_ERROR_UNSUPPORTED, fn,
                   "an NCCL collective of this graph was re-captured by a rebind or update, and the graph handed "
                   "to a capture cannot follow it (NCCL's resources belong to the exec): capture before "
                   "rebinding collective buffers, or launch without capturing");
  if (g->cond_handles) /* made only for conditions a conditional node uses */
    for (int q = 0; q < g->plan->nconds; q++)
      if (g->cond_handles[q])
        return tpg_err(TPG_ERROR_UNSUPPORTED, fn,
                       "the graph has conditional nodes, and CUDA refuses a child graph holding them "
                       "(cuGraphAddChildGraphNode): launch it outside the stream capture");
  TPG_TRY(template_refresh(g, fn)); /* the copy the capture takes is the graph as bound now */
  /* The graph as bound now, one child node after the capture's current
   * frontier; the capture then continues from it. The child is a copy:
   * later rebinds do not reach it. Edge data of the frontier (programmatic
   * edges of the engine's capture) become ordinary edges into it. */
  CUgraphNode node;
  r = tpg_cu->cuGraphAddChildGraphNode(&node, cg, deps, nd, g->graph);
  if (r != CUDA_SUCCESS) return tpg_cu_fail(r, fn, "cuGraphAddChildGraphNode (into the stream's capture)");
  r = tpg_cu->cuStreamUpdateCaptureDependencies(stream, &node, NULL, 1, CU_STREAM_SET_CAPTURE_DEPENDENCIES);
  if (r != CUDA_SUCCESS) return tpg_cu_fail(r, fn, "cuStreamUpdateCaptureDependencies");
  *into = 1;
  return TPG_SUCCESS;
}
