/* conditional.c - the conditional node kind (tpg_plan_add_conditional): an
 * IF / IF-ELSE, WHILE or SWITCH node whose bodies are scopes of the same
 * plan (the nodes whose parent is this node), run by the value of a
 * condition that device code sets (cudaGraphSetConditional).
 *
 * add makes the node with cuGraphAddNode, which hands back one body graph
 * per body (CUDA owns them, for the node's life), and materializes each
 * body's nodes into its graph through the same kind table
 * (tpg_materialize_scope): a body node is an ordinary node of its kind,
 * filled like any other, and its CUDA node handle is what rebind's exec
 * setters take, so rebinding reaches inside bodies with no code here.
 * The condition's handle is the graph's (materialize.c makes one per
 * condition before any fill, for the kernels that set it).
 *
 * Only TPG_MODE_EXPLICIT: capture and eager modes run the node sequence on a
 * stream, where nothing could test a device value without a host readback;
 * fill refuses them rather than run the bodies unconditionally.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <string.h>

#include "graphbuild/nodes/common.h"

#define TPG_MAX_BODIES 256

static const char *type_name(tpg_cond_type t) {
  return t == TPG_COND_IF ? "if" : t == TPG_COND_WHILE ? "while" : t == TPG_COND_SWITCH ? "switch" : "?";
}

/* ---- plan time ------------------------------------------------------------ */

static tpg_status check(const tpg_plan *p, const char *fn, const tpg_node_rec *n) {
  tpg_cond_type t = n->u.cond.type;
  int nb = n->u.cond.nbodies;
  if (t != TPG_COND_IF && t != TPG_COND_WHILE && t != TPG_COND_SWITCH)
    return tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn,
                   "desc->type is %d: expected TPG_COND_IF, TPG_COND_WHILE or TPG_COND_SWITCH", (int)t);
  if (t == TPG_COND_IF && (nb < 1 || nb > 2))
    return tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn, "desc->nbodies is %d: an IF has 1 body, or 2 (with ELSE)", nb);
  if (t == TPG_COND_WHILE && nb != 1)
    return tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn, "desc->nbodies is %d: a WHILE has 1 body", nb);
  if (t == TPG_COND_SWITCH && (nb < 1 || nb > TPG_MAX_BODIES))
    return tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn, "desc->nbodies is %d: a SWITCH has 1..%d bodies", nb,
                   TPG_MAX_BODIES);
  tpg_cond c = n->u.cond.cond;
  if (c == 0 || c > (tpg_cond)p->nconds)
    return tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn,
                   "desc->cond is %u: not a condition of this plan (expected 1..%d, from tpg_plan_add_cond)",
                   (unsigned)c, p->nconds);
  int user = p->conds[c - 1].node;
  if (user >= 0) {
    char lb[160];
    return tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn,
                   "desc->cond %u already drives conditional node %s: one condition serves one node (CUDA ties a "
                   "handle to one node)",
                   (unsigned)c, tpg_node_label(p, user, lb, sizeof lb));
  }
  return TPG_SUCCESS;
}

static int views(const tpg_node_rec *n, tpg_view_use *v) {
  (void)n, (void)v;
  return 0; /* its bodies' nodes declare their own */
}

static void label(const tpg_node_rec *n, int idx, char *buf, size_t cap) {
  snprintf(buf, cap, "%s#%d", type_name(n->u.cond.type), idx);
}

static void dot(tpg_sbuf *s, const tpg_plan *p, const tpg_node_rec *n) {
  (void)p;
  tpg_sb_printf(s, "\\ncondition %u, %d bod%s", (unsigned)n->u.cond.cond, n->u.cond.nbodies,
                n->u.cond.nbodies == 1 ? "y" : "ies");
}

/* Bodies are built against this node's CUDA topology: a whole-graph update
 * would bring new handles the exec's kernels do not hold. */
static tpg_status same_shape(const tpg_node_rec *a, const tpg_node_rec *b, const char *lb) {
  (void)a, (void)b;
  return tpg_err(TPG_ERROR_UNSUPPORTED, "tpg_graph_update",
                 "node %s is a conditional node: a whole-graph update of a plan with conditional nodes is not "
                 "supported (rebind the slots instead, or create a new graph)",
                 lb);
}

/* Ranks must agree on the conditional nodes that hold collectives (their
 * kind and body count, in order): the collectives' own fingerprints say
 * which body they sit in. */
static void fingerprint(const tpg_plan *p, const tpg_node_rec *n, const tpg_gnode *gn, uint64_t *h) {
  (void)gn;
  const int i = (int)(n - p->nodes);
  int has = 0;
  for (int j = i + 1; j < p->nnodes && !has; j++) /* bodies come after their node */
    has = tpg_kind(p->nodes[j].kind)->collective && tpg_node_inside(p, j, i);
  if (!has) return;
  *h = (*h ^ (uint64_t)(0xc0d0u + (unsigned)n->u.cond.type)) * 1099511628211ull;
  *h = (*h ^ (uint64_t)n->u.cond.nbodies) * 1099511628211ull;
}

/* ---- create time ---------------------------------------------------------- */

static tpg_status fill(const tpg_nctx *c) {
  if (c->g->mode != TPG_MODE_EXPLICIT)
    return tpg_err(TPG_ERROR_UNSUPPORTED, "tpg_graph_create",
                   "node %s is a conditional node: conditional nodes need TPG_MODE_EXPLICIT (capture and eager modes have no graph "
                   "in which device code could choose a body)",
                   tpg_nctx_label(c));
  c->gn->bodies = NULL;
  c->gn->nbodies = 0;
  return TPG_SUCCESS;
}

static tpg_status add(const tpg_nctx *c, CUgraph graph, const tpg_deps *deps) {
  const tpg_node_rec *n = c->n;
  tpg_graph *g = c->g;
  if (!tpg_cu->cuGraphAddNode)
    return tpg_err(TPG_ERROR_UNSUPPORTED, "tpg_graph_create",
                   "node %s: conditional nodes need a CUDA 12.3+ driver (cuGraphAddNode)", tpg_nctx_label(c));
  CUgraphNodeParams np;
  memset(&np, 0, sizeof np);
  np.type = CU_GRAPH_NODE_TYPE_CONDITIONAL;
  np.conditional.handle = g->cond_handles[n->u.cond.cond - 1];
  np.conditional.type = n->u.cond.type == TPG_COND_IF       ? CU_GRAPH_COND_TYPE_IF
                        : n->u.cond.type == TPG_COND_WHILE  ? CU_GRAPH_COND_TYPE_WHILE
                                                            : CU_GRAPH_COND_TYPE_SWITCH;
  np.conditional.size = (unsigned)n->u.cond.nbodies;
  np.conditional.ctx = g->dev.ctx;
  CUresult r = tpg_cu->cuGraphAddNode(&c->gn->cu[0], graph, deps->nodes, deps->nprog ? deps->edata : NULL, deps->n,
                                      &np);
  if (r != CUDA_SUCCESS)
    return tpg_node_cu_fail(c, r,
                            n->u.cond.type == TPG_COND_WHILE ? "cuGraphAddNode (conditional WHILE)"
                            : n->u.cond.nbodies > 1 || n->u.cond.type == TPG_COND_SWITCH
                                ? "cuGraphAddNode (conditional IF-ELSE / SWITCH: CUDA 12.8+)"
                                : "cuGraphAddNode (conditional IF)");
  c->gn->ncu = 1;
  c->gn->bodies = np.conditional.phGraph_out;
  c->gn->nbodies = n->u.cond.nbodies;
  /* c->gn is nodes[c->i] of the array being materialized (the graph's at
   * creation, the only time this runs: updates are refused above). */
  tpg_gnode *nodes = c->gn - c->i;
  for (int b = 0; b < n->u.cond.nbodies; b++)
    TPG_TRY(tpg_materialize_scope(g, g->st, c->p, c->bind, nodes, c->i, b, c->gn->bodies[b]));
  return TPG_SUCCESS;
}

static tpg_status run_eager(const tpg_nctx *c, CUstream stream) {
  (void)stream;
  return tpg_err(TPG_ERROR_UNSUPPORTED, "tpg_graph_launch", "node %s: conditional nodes need TPG_MODE_EXPLICIT",
                 tpg_nctx_label(c));
}

/* ---- rebind --------------------------------------------------------------- */

static tpg_status patch(const tpg_nctx *c) {
  (void)c;
  return TPG_SUCCESS; /* no pointer of its own; its bodies' nodes are patched as themselves */
}

static void count(const tpg_gnode *gn, tpg_graph_info *info) {
  (void)gn;
  info->nodes++;
}

const tpg_kind_ops tpg_kind_conditional = {
    .name = "conditional",
    .dot_shape = "diamond",
    .check = check,
    .views = views,
    .label = label,
    .dot = dot,
    .same_shape = same_shape,
    .fill = fill,
    .fingerprint = fingerprint,
    .add = add,
    .run_eager = run_eager,
    .patch = patch,
    .count = count,
};
