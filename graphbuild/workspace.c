/* workspace.c - where GEMM workspaces live: nodes that can never run at the
 * same time share one buffer (a lane), and a graph set's sizes share lanes.
 *
 * The decisions:
 * - Two nodes never run at once when a path of plan edges leads from one to
 *   the other. An ordinary edge starts its node after its tail completed; a
 *   programmatic one (TPG_GRAPH_PDL, materialize.c) ends at one of our GEMM,
 *   element-wise or all-reduce kernels, each of which executes
 *   griddepcontrol.wait in every block before it touches memory and before
 *   it exits (the GEMVs issue only an L2 prefetch of W before it), so it
 *   completes after its primary, and a GEMM at the end of the path touches
 *   its workspace only after every node before it completed. An engine
 *   kernel's desc.pdl promises the wait before memory accesses only (its
 *   kind's pdl_early_exit): a programmatic edge into one orders nothing.
 *   cuBLASLt nodes are child graphs, never at either end of one. Nodes in
 *   conditional bodies are compared through their conditional nodes (which
 *   complete after their bodies) in the innermost scope holding both; two
 *   nodes of one conditional's different bodies are never ordered. Eager and
 *   captured graphs run every node in turn on one stream: all ordered.
 * - Lanes are made greedily in topological order: a node joins the first
 *   lane whose last node is ordered before it (so every two members of a
 *   lane are ordered), else opens one. A chain of GEMMs is one lane; GEMMs
 *   on concurrent branches get one each.
 * - The counters rule (lib/gemm/problem.h): a kernel's first
 *   workspace_zeroed bytes are counters, zero at its entry and left zero at
 *   its exit; the rest is scratch it writes before it reads. A sharer must
 *   not leave dirt where another keeps counters, so a lane is [counters |
 *   scratch] around a boundary and each node's pointer is the boundary less
 *   its counters: every sharer's counters end at the boundary, every
 *   sharer's scratch starts there. The part before the boundary only ever
 *   holds counters, which every sharer leaves zero, and the one memset at
 *   creation zeroes it. cuBLASLt has no counters (its workspace is scratch,
 *   as PyTorch's one workspace per stream relies on). A kernel with zero
 *   words past its counters (CUTLASS's stream-K barriers: workspace_private)
 *   or counters that are not whole 256-byte blocks gets a lane of its own,
 *   never placed in a set's arena; so does every node with
 *   $TPG_GEMM_WORKSPACE_SHARE=0 (what sharing saves, measured in one build).
 * - One graph of a set runs at a time, so its sizes share lanes too: lane k
 *   of every size (lanes numbered largest first) lies at one place in the
 *   set's arena, as large as the largest lane k, its boundary at one
 *   address, so no size's scratch ever covers another size's counters.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdlib.h>
#include <string.h>

#include "graphbuild/graph.h"

#define WS_ROUND(b) (((b) + 255) & ~(size_t)255)

void tpg_ws_plan_free(tpg_ws_plan *wp) {
  free(wp->lane);
  memset(wp, 0, sizeof *wp);
}

size_t tpg_ws_bytes(const tpg_ws_plan *wp, int from, int to) {
  size_t b = 0;
  for (int k = from; k < to; k++) b += wp->lane[k].zero + wp->lane[k].tail;
  return b;
}

/* Edges into node x order their tails before x's completion: false for an
 * engine kernel that may end a programmatic edge and exit before its wait. */
static int edges_order(const tpg_graph *g, const tpg_plan *p, int x) {
  const tpg_kind_ops *k = tpg_kind(p->nodes[x].kind);
  return !(tpg_pdl_in_scope(g, p->nodes[x].parent) && k->pdl_early_exit && k->pdl_early_exit(&p->nodes[x]));
}

/* mark[u] = stamp for every node u that completes before node i starts (in
 * i's scope), and likewise for each conditional node holding i in its own
 * scope: each search stays in one scope (edges never leave one). */
static void mark_before(const tpg_graph *g, const tpg_plan *p, int i, int stamp, int *mark, int *stack) {
  for (int s = i; s >= 0; s = p->nodes[s].parent) {
    int top = 0;
    stack[top++] = s;
    while (top) {
      const int x = stack[--top];
      if (!edges_order(g, p, x)) continue;
      for (int j = 0; j < p->nodes[x].ndeps; j++) {
        const int d = p->nodes[x].deps[j];
        if (mark[d] == stamp) continue;
        mark[d] = stamp;
        stack[top++] = d;
      }
    }
  }
}

/* Node u completes before the node mark_before searched from starts: u, or
 * a conditional node holding it, is marked. */
static int marked(const tpg_plan *p, int u, const int *mark, int stamp) {
  for (int a = u; a >= 0; a = p->nodes[a].parent)
    if (mark[a] == stamp) return 1;
  return 0;
}

/* A lane alone: the node's own sizes, its end on a 256-byte block (every
 * node's with $TPG_GEMM_WORKSPACE_SHARE=0, the A/B switch). */
static int alone(const tpg_graph *g, const tpg_gnode *gn) {
  return !g->tune.gemm_ws_share || gn->res.need_private || gn->res.need_zeroed % 256 != 0;
}

/* Lanes of nodes that share, as built: sizes, each lane's last node. */
typedef struct lane_set {
  tpg_ws_lane *lane;
  int *last;
  int n;
} lane_set;

/* Node i joins the first lane whose last node `ordered` says is before it
 * (or a new one); gn->res.lane is 1 + the lane's index for now. */
static void join(lane_set *ls, tpg_gnode *gn, int i, const tpg_plan *p, const int *mark, int stamp, int all) {
  int k = 0;
  while (k < ls->n && !(all || marked(p, ls->last[k], mark, stamp))) k++;
  if (k == ls->n) memset(&ls->lane[ls->n++], 0, sizeof ls->lane[0]);
  tpg_ws_lane *l = &ls->lane[k];
  const size_t tail = WS_ROUND(gn->res.need - gn->res.need_zeroed);
  if (gn->res.need_zeroed > l->zero) l->zero = gn->res.need_zeroed;
  if (tail > l->tail) l->tail = tail;
  ls->last[k] = i;
  gn->res.lane = k + 1;
}

/* out: the shared lanes largest first, then each node's own lane in
 * topological order; node lanes renumbered to match. */
static tpg_status assemble(const lane_set *ls, const tpg_state *st, const tpg_plan *p, tpg_gnode *nodes, int nalone,
                           tpg_ws_plan *out) {
  const int n = ls->n + nalone;
  int *pos = malloc((size_t)(ls->n ? ls->n : 1) * sizeof *pos);
  out->lane = calloc((size_t)(n ? n : 1), sizeof *out->lane);
  if (!pos || !out->lane) {
    free(pos);
    tpg_ws_plan_free(out);
    return TPG_FAIL(TPG_ERROR_OUT_OF_MEMORY, "out of host memory");
  }
  for (int k = 0; k < ls->n; k++) { /* stable: the larger first, ties by opening order */
    int r = 0;
    const size_t bk = ls->lane[k].zero + ls->lane[k].tail;
    for (int j = 0; j < ls->n; j++) {
      const size_t bj = ls->lane[j].zero + ls->lane[j].tail;
      r += bj > bk || (bj == bk && j < k);
    }
    pos[k] = r;
    out->lane[r] = ls->lane[k];
  }
  out->n = ls->n;
  out->shared = ls->n;
  for (int oi = 0; oi < p->nnodes; oi++) {
    tpg_gnode *gn = &nodes[st->order[oi]];
    if (!gn->res.need) continue;
    if (gn->res.lane > 0) {
      gn->res.lane = 1 + pos[gn->res.lane - 1];
      continue;
    }
    tpg_ws_lane *l = &out->lane[out->n++];
    l->zero = gn->res.need_zeroed;
    l->tail = WS_ROUND(gn->res.need) - gn->res.need_zeroed; /* the next lane starts on a block */
    l->alone = 1;
    gn->res.lane = out->n;
  }
  free(pos);
  return TPG_SUCCESS;
}

tpg_status tpg_ws_plan_build(const tpg_graph *g, const tpg_state *st, const tpg_plan *p, tpg_gnode *nodes,
                             tpg_ws_plan *out) {
  memset(out, 0, sizeof *out);
  int want = 0, nalone = 0;
  for (int i = 0; i < p->nnodes; i++) {
    nodes[i].res.lane = 0;
    want += nodes[i].res.need > 0;
    nalone += nodes[i].res.need > 0 && alone(g, &nodes[i]);
  }
  if (!want) return TPG_SUCCESS;
  lane_set ls = {calloc((size_t)want, sizeof *ls.lane), malloc((size_t)want * sizeof *ls.last), 0};
  int *mark = calloc((size_t)p->nnodes, sizeof *mark), *stack = malloc((size_t)(p->nnodes + 1) * sizeof *stack);
  tpg_status rc = TPG_SUCCESS;
  if (!ls.lane || !ls.last || !mark || !stack) {
    rc = TPG_FAIL(TPG_ERROR_OUT_OF_MEMORY, "out of host memory");
  } else {
    const int all = g->mode != TPG_MODE_EXPLICIT; /* one stream: every node in turn */
    for (int oi = 0, stamp = 1; oi < p->nnodes; oi++) {
      const int i = st->order[oi];
      tpg_gnode *gn = &nodes[i];
      if (!gn->res.need || alone(g, gn)) continue;
      if (!all) mark_before(g, p, i, ++stamp, mark, stack);
      join(&ls, gn, i, p, mark, stamp, all);
    }
    rc = assemble(&ls, st, p, nodes, nalone, out);
  }
  free(ls.lane);
  free(ls.last);
  free(mark);
  free(stack);
  return rc;
}

tpg_status tpg_ws_caps_merge(tpg_ws_plan *caps, const tpg_ws_plan *wp) {
  if (wp->shared > caps->n) {
    tpg_ws_lane *l = realloc(caps->lane, (size_t)wp->shared * sizeof *l);
    if (!l) return TPG_FAIL(TPG_ERROR_OUT_OF_MEMORY, "out of host memory");
    memset(l + caps->n, 0, (size_t)(wp->shared - caps->n) * sizeof *l);
    caps->lane = l;
    caps->n = caps->shared = wp->shared;
  }
  for (int k = 0; k < wp->shared; k++) {
    if (wp->lane[k].zero > caps->lane[k].zero) caps->lane[k].zero = wp->lane[k].zero;
    if (wp->lane[k].tail > caps->lane[k].tail) caps->lane[k].tail = wp->lane[k].tail;
  }
  return TPG_SUCCESS;
}

void tpg_ws_place(tpg_ws_plan *wp, const tpg_ws_plan *caps, CUdeviceptr shared, CUdeviceptr own, tpg_gnode *nodes,
                  int nnodes) {
  for (int k = 0; k < wp->n; k++) {
    tpg_ws_lane *l = &wp->lane[k];
    const tpg_ws_lane *c = k < wp->shared ? &caps->lane[k] : l;
    CUdeviceptr *base = k < wp->shared ? &shared : &own;
    l->at = *base + c->zero;
    l->zero_cap = c->zero;
    l->tail_cap = c->tail;
    *base += c->zero + c->tail;
  }
  for (int i = 0; i < nnodes; i++) {
    tpg_gnode *gn = &nodes[i];
    const tpg_ws_lane *l = gn->res.lane ? &wp->lane[gn->res.lane - 1] : NULL;
    gn->res.at = l ? l->at : 0;
    gn->res.zero_cap = l ? l->zero_cap : 0;
    gn->res.tail_cap = l ? l->tail_cap : 0;
    gn->res.alone = l ? l->alone : 0;
    gn->res.workspace = 0;
  }
}

tpg_status tpg_ws_mem(size_t bytes, CUstream stream, CUdeviceptr *out) {
  *out = 0;
  if (!bytes) return TPG_SUCCESS;
  CUdeviceptr d = 0;
  TPG_CU(cuMemAlloc(&d, bytes));
  CUresult r = tpg_cu->cuMemsetD32Async(d, 0, bytes / 4, stream);
  if (r != CUDA_SUCCESS) {
    tpg_cu->cuMemFree(d);
    return tpg_cu_fail(r, __func__, "cuMemsetD32Async(GEMM workspace)");
  }
  *out = d;
  return TPG_SUCCESS;
}

tpg_status tpg_ws_alloc(tpg_graph *g, const tpg_graph_ext *ext) {
  const int in_set = ext && ext->ws_caps;
  const size_t shared = in_set ? 0 : tpg_ws_bytes(&g->ws, 0, g->ws.shared);
  const size_t own = shared + tpg_ws_bytes(&g->ws, g->ws.shared, g->ws.n);
  TPG_TRY(tpg_ws_mem(own, g->cap_stream, &g->ws_mem));
  g->info.workspace_bytes += own;
  tpg_ws_place(&g->ws, in_set ? ext->ws_caps : &g->ws, in_set ? ext->ws : g->ws_mem, g->ws_mem + shared, g->nodes,
               g->plan->nnodes);
  g->info.gemm_workspaces = g->ws.n;
  g->info.gemm_workspace_bytes = tpg_ws_bytes(&g->ws, 0, g->ws.n);
  return TPG_SUCCESS;
}
