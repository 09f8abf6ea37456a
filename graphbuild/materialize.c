/* materialize.c - plan -> CUDA graph, through explicit driver-API nodes.
 *
 * One loop in topological order: each node's kind fills its parameters and
 * adds its CUDA node(s) (graphbuild/nodes/): kernel nodes for our kernels,
 * memcpy/memset nodes, empty nodes for joins, child graphs for what only a
 * stream can issue (NCCL). Dependencies are exactly the plan's edges, plus
 * one implicit edge per collective:
 *
 * Collectives of one graph (NCCL or ours) are chained in the plan's
 * topological order (an edge from each to the next): every rank must run a
 * communicator's operations in the same order, and two collectives on
 * independent branches could otherwise run in either order.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graphbuild/graph.h"

tpg_gnode *tpg_gnodes_alloc(int n) {
  /* the parameter blocks inside are aligned (tensor maps: 64, CUTLASS's
   * Params: 128 bytes) */
  const size_t align = _Alignof(tpg_gnode);
  size_t bytes = (size_t)(n > 0 ? n : 1) * sizeof(tpg_gnode);
  bytes = (bytes + align - 1) & ~(align - 1);
  tpg_gnode *p = aligned_alloc(align, bytes);
  if (p) memset(p, 0, bytes);
  return p;
}

void tpg_gnodes_free(tpg_graph *g, tpg_gnode *nodes, int n) {
  if (!nodes) return;
  for (int i = 0; g->plan && i < n; i++) {
    const tpg_kind_ops *k = tpg_kind(g->plan->nodes[i].kind);
    if (k->release) k->release(g, &nodes[i]);
  }
  free(nodes);
}

tpg_status tpg_prepare_nodes(tpg_graph *g, const tpg_state *st, const tpg_plan *p, tpg_gnode *nodes) {
  char lb[160];
  for (int oi = 0; oi < p->nnodes; oi++) {
    int i = st->order[oi];
    const tpg_kind_ops *k = tpg_kind(p->nodes[i].kind);
    if (!k->prepare) continue;
    tpg_nctx c;
    tpg_nctx_init(&c, g, p, g->bind, i, &nodes[i], lb, sizeof lb);
    TPG_TRY(k->prepare(&c));
  }
  return TPG_SUCCESS;
}

tpg_status tpg_fill_nodes(tpg_graph *g, const tpg_state *st, const tpg_plan *p, void **bind, tpg_gnode *nodes) {
  char lb[160];
  for (int oi = 0; oi < p->nnodes; oi++) {
    int i = st->order[oi];
    tpg_nctx c;
    tpg_nctx_init(&c, g, p, bind, i, &nodes[i], lb, sizeof lb);
    TPG_TRY(tpg_kind(p->nodes[i].kind)->fill(&c));
  }
  /* Before the first capture: every rank resolved the same algorithms (only
   * where something was resolved: one collective step less otherwise). */
  int resolved = 0;
  for (int i = 0; i < p->nnodes && !resolved; i++) {
    const tpg_kind_ops *k = tpg_kind(p->nodes[i].kind);
    resolved = k->resolves && k->resolves(&p->nodes[i]);
  }
  return resolved ? tpg_fingerprint_check(g, st, p, nodes, "after resolving algorithms") : TPG_SUCCESS;
}

/* ---- Programmatic dependent launch (TPG_GRAPH_PDL) ------------------------
 *
 * An edge A -> B is made programmatic (CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC,
 * from port CU_GRAPH_KERNEL_NODE_PORT_PROGRAMMATIC) only when all of these
 * hold, and is ordinary otherwise:
 * - the graph has TPG_GRAPH_PDL, is explicit, and the GPU is sm_90+ (g->pdl):
 *   griddepcontrol exists only there; the sm_80 image would not wait.
 * - A's kind says TPG_PDL_PRIMARY for it: a programmatic edge must start at
 *   a kernel node. NCCL child graphs, memcpy, memset and empty nodes never
 *   are primaries, and their successors wait for them normally.
 * - B's kind says TPG_PDL_SECONDARY: one of our kernels that executes
 *   griddepcontrol.wait in EVERY block on EVERY path (GEMM, axpby, concat):
 *   before it reads anything A wrote, before it writes anything A may still
 *   read (WAR: e.g. the all-reduce's in-place buffer, or a GEMV's input that
 *   the next one overwrites), and before it exits, so that a node C after B
 *   by an ordinary edge still runs after A (B cannot complete before A did).
 *   The GEMVs issue only an L2 bulk prefetch of their W rows before the
 *   wait: a hint that writes no registers, correct whatever A writes.
 * - Our all-reduce kernels (not NCCL's child graphs) are secondaries too:
 *   their epoch protocol assumes the previous node has finished, and they
 *   run in place (in == out), so each waits (griddepcontrol.wait) before
 *   anything else, and only the launch moves earlier. They are primaries,
 *   and trigger their dependents right after that wait (allreduce.cu), so
 *   the next layer's GEMV pulls its weights into L2 during the all-reduce.
 * Primaries that are GEMM/elementwise kernels trigger after their own wait
 * (griddepcontrol.launch_dependents), so at most one grid of a chain is
 * launched ahead. Only edge data changes: rebind (exec kernel-node setters)
 * and whole-graph update (the same code builds the same edges) keep them.
 */

static unsigned pdl_role(const tpg_plan *p, const tpg_gnode *nodes, int i) {
  const tpg_kind_ops *k = tpg_kind(p->nodes[i].kind);
  return k->pdl ? k->pdl(&nodes[i]) : 0;
}

tpg_status tpg_count_programmatic_edges(CUgraph graph, int *out) {
  *out = 0;
  size_t n = 0;
  TPG_CU(cuGraphGetEdges(graph, NULL, NULL, NULL, &n));
  if (n == 0) return TPG_SUCCESS;
  CUgraphNode *from = malloc(n * sizeof *from), *to = malloc(n * sizeof *to);
  CUgraphEdgeData *ed = calloc(n, sizeof *ed);
  tpg_status st = TPG_SUCCESS;
  if (!from || !to || !ed) {
    st = TPG_FAIL(TPG_ERROR_OUT_OF_MEMORY, "out of host memory");
  } else {
    CUresult r = tpg_cu->cuGraphGetEdges(graph, from, to, ed, &n);
    if (r != CUDA_SUCCESS) st = tpg_cu_fail(r, __func__, "cuGraphGetEdges");
    else
      for (size_t e = 0; e < n; e++) *out += ed[e].type == CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC;
  }
  free(from);
  free(to);
  free(ed);
  return st;
}

/* Whether node i must be chained with the collectives of its scope: a
 * collective, or a conditional node with one inside (its bodies run them in
 * between the scope's other collectives, every rank alike). */
static int chained(const tpg_plan *p, int i) {
  if (tpg_kind(p->nodes[i].kind)->collective) return 1;
  for (int j = i + 1; j < p->nnodes; j++) /* a body's nodes come after its conditional node */
    if (tpg_kind(p->nodes[j].kind)->collective && tpg_node_inside(p, j, i)) return 1;
  return 0;
}

tpg_status tpg_materialize_scope(tpg_graph *g, const tpg_state *st, const tpg_plan *p, void **bind, tpg_gnode *nodes,
                                 int parent, int body, CUgraph graph) {
  CUgraphNode *deps = NULL;
  CUgraphEdgeData *edata = NULL;
  tpg_status rc = TPG_SUCCESS;
  char lb[160];
  int maxdeps = 1;
  for (int i = 0; i < p->nnodes; i++)
    if (p->nodes[i].ndeps + 1 > maxdeps) maxdeps = p->nodes[i].ndeps + 1;
  maxdeps *= TPG_GNODE_MAX_CU; /* a dependency with no node of its own forwards up to that many */
  deps = malloc((size_t)maxdeps * sizeof *deps);
  edata = calloc((size_t)maxdeps, sizeof *edata);
  if (!deps || !edata) {
    rc = TPG_FAIL(TPG_ERROR_OUT_OF_MEMORY, "out of host memory");
    goto out;
  }
  const int32_t prefetch = g->pdl ? g->tune.pdl_prefetch : 0;
  /* One rank: collectives exchange nothing, so nothing orders them. */
  const int one_rank = !g->comm || g->comm->nranks == 1;
  int last_coll = -1;
  for (int oi = 0; oi < p->nnodes; oi++) {
    int i = st->order[oi];
    const tpg_node_rec *n = &p->nodes[i];
    if (n->parent != parent || (parent >= 0 && n->body != body)) continue;
    const tpg_kind_ops *k = tpg_kind(n->kind);
    tpg_nctx c;
    tpg_nctx_init(&c, g, p, bind, i, &nodes[i], lb, sizeof lb);
    /* Incoming edges: the tails of the node's dependencies, the previous
     * collective for a collective, and which of them are programmatic. */
    /* Programmatic edges at the top level and inside conditional bodies
     * (a device loop's step overlaps its kernels as the host loop's does:
     * on an H100 that took the loop from 1.028x to 1.011x the body's time);
     * $TPG_GRAPH_PDL_BODIES=0 keeps ordinary edges in bodies. */
    const int secondary = tpg_pdl_in_scope(g, parent) && (k->pdl ? k->pdl(&nodes[i]) : 0) & TPG_PDL_SECONDARY;
    const int is_coll = !one_rank && chained(p, i);
    size_t nd = 0, nprog = 0;
    int has_last = 0;
    for (int j = 0; j <= n->ndeps; j++) {
      int src;
      if (j < n->ndeps) {
        src = n->deps[j];
        has_last |= src == last_coll;
      } else if (is_coll && last_coll >= 0 && !has_last) {
        src = last_coll;
      } else {
        break;
      }
      const tpg_gnode *sg = &nodes[src];
      /* A dependency with no CUDA node of its own (a one-rank collective
       * with nothing to do) forwards its own dependencies, by ordinary
       * edges; a node reached twice keeps one edge, ordinary if either is. */
      const int nt = sg->ncu ? 1 : sg->nfwd;
      for (int f = 0; f < nt; f++) {
        const CUgraphNode tail = sg->ncu ? tpg_gnode_tail(sg) : sg->cu[f];
        const int prog = sg->ncu && secondary && (pdl_role(p, nodes, src) & TPG_PDL_PRIMARY);
        size_t e = 0;
        while (e < nd && deps[e] != tail) e++;
        if (e < nd) {
          if (!prog && edata[e].type == CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC) {
            memset(&edata[e], 0, sizeof edata[e]);
            nprog--;
          }
          continue;
        }
        memset(&edata[nd], 0, sizeof edata[nd]);
        if (prog) {
          edata[nd].type = CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC;
          edata[nd].from_port = CU_GRAPH_KERNEL_NODE_PORT_PROGRAMMATIC;
          nprog++;
        }
        deps[nd++] = tail;
      }
    }
    if (is_coll) last_coll = i;
    tpg_deps d = {deps, edata, nd, nprog, prefetch};
    nodes[i].ncu = 0;
    nodes[i].nfwd = 0;
    TPG_TRYGOTO(k->add(&c, graph, &d), rc, out);
  }
out:
  free(deps);
  free(edata);
  return rc;
}

/* The CUDA handles of the plan's conditions, made against the top-level
 * graph (CUDA lets a handle serve a conditional node in it or in any body
 * below it); conditions no conditional node uses get none: CUDA may refuse
 * to instantiate a graph with a stray handle. */
static tpg_status make_cond_handles(tpg_graph *g, const tpg_plan *p, CUgraph graph) {
  free(g->cond_handles);
  g->cond_handles = NULL;
  if (p->nconds == 0) return TPG_SUCCESS;
  g->cond_handles = calloc((size_t)p->nconds, sizeof *g->cond_handles);
  if (!g->cond_handles) return TPG_FAIL(TPG_ERROR_OUT_OF_MEMORY, "out of host memory");
  for (int q = 0; q < p->nconds; q++) {
    if (p->conds[q].node < 0) continue;
    if (!tpg_cu->cuGraphConditionalHandleCreate)
      return TPG_FAIL(TPG_ERROR_UNSUPPORTED, "the plan has conditional nodes: they need a CUDA 12.3+ driver "
                                             "(cuGraphConditionalHandleCreate)");
    CUresult r = tpg_cu->cuGraphConditionalHandleCreate(&g->cond_handles[q], graph, g->dev.ctx, p->conds[q].dflt,
                                                        p->conds[q].reset ? CU_GRAPH_COND_ASSIGN_DEFAULT : 0);
    if (r != CUDA_SUCCESS) {
      char what[96];
      snprintf(what, sizeof what, "cuGraphConditionalHandleCreate (condition %d)", q + 1);
      return tpg_cu_fail(r, __func__, what);
    }
  }
  return TPG_SUCCESS;
}

tpg_status tpg_materialize(tpg_graph *g, const tpg_state *st, const tpg_plan *p, void **bind, tpg_gnode *nodes,
                           CUgraph *out) {
  *out = NULL;
  CUgraph graph = NULL;
  tpg_status rc = TPG_SUCCESS;
  /* The graph first: kernels that set a condition take its handle, which
   * belongs to the graph, as an argument filled in with the others. */
  TPG_CUGOTO(cuGraphCreate(&graph, 0), rc, fail);
  TPG_TRYGOTO(make_cond_handles(g, p, graph), rc, fail);
  TPG_TRYGOTO(tpg_fill_nodes(g, st, p, bind, nodes), rc, fail);
  TPG_TRYGOTO(tpg_materialize_scope(g, st, p, bind, nodes, -1, 0, graph), rc, fail);
  *out = graph;
  return TPG_SUCCESS;
fail:
  if (graph) tpg_cu->cuGraphDestroy(graph);
  return rc;
}
