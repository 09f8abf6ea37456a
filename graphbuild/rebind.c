/* rebind.c - pointing slots at other buffers without re-instantiating.
 *
 * Two ways, both leaving the exec in place:
 * - tpg_graph_rebind: per node. Only the nodes that use a rebound slot are
 *   touched, each through its exec setter (kernel, memset, memcpy); a
 *   collective is re-captured from NCCL and swapped in with
 *   cuGraphExecChildGraphNodeSetParams (NCCL does not support editing its own
 *   kernel nodes' parameters, so its child graph is replaced whole) — only
 *   when its send or recv moved; the epilogue node after an NCCL all-reduce
 *   is a kernel node like any other.
 * - tpg_graph_update: whole graph. The new plan's state is derived again
 *   (state.c), the bindings checked against it, scratch that grew
 *   re-allocated, a topologically identical graph materialized into a new
 *   node array and applied with cuGraphExecUpdate; CUDA's refusal names a
 *   node, which we report by its plan label. State, nodes, scratch and plan
 *   are swapped in only when everything succeeded.
 * Either way all arguments are checked before the first CUDA call. A rebind
 * that fails part-way patches every node it changed back (re-capturing an
 * NCCL child back), and says so if one could not be restored.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graphbuild/graph.h"

/* Node i's kind rewrites its pointers from g->bind and applies them. */
static tpg_status patch_node(tpg_graph *g, int i) {
  char lb[160];
  tpg_nctx c;
  tpg_nctx_init(&c, g, g->plan, g->bind, i, &g->nodes[i], lb, sizeof lb);
  return c.kind->patch(&c);
}

/* Patching node i with g->bind now would be a collective call (an NCCL
 * re-capture). */
static int patch_is_collective(tpg_graph *g, int i) {
  char lb[160];
  tpg_nctx c;
  tpg_nctx_init(&c, g, g->plan, g->bind, i, &g->nodes[i], lb, sizeof lb);
  return c.kind->patch_collective ? c.kind->patch_collective(&c) : 0;
}

static tpg_status check_bindings(const tpg_graph *g, const tpg_plan *p, const tpg_binding *b, int n,
                                 const char *fn) {
  if (n < 0) return tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn, "nbindings is %d: expected >= 0", n);
  if (n > 0 && !b) return tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn, "bindings is NULL but nbindings is %d", n);
  for (int i = 0; i < n; i++) TPG_TRY(tpg_check_binding(g, p, b[i].slot, b[i].ptr, fn, "bindings", i));
  return tpg_bindings_unique(p, b, n, fn, "bindings");
}

static tpg_status graph_usable(tpg_graph *g, const char *fn) {
  if (!g) return tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn, "graph is NULL: expected a tpg_graph");
  if (!tpg_graph_live(g))
    return tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn, "graph is not a live tpg_graph (destroyed or corrupt handle)");
  return TPG_SUCCESS;
}

static tpg_status rebind(tpg_graph *g, const tpg_binding *b, int n) {
  TPG_TRY(graph_usable(g, __func__));
  if (g->mode == TPG_MODE_CAPTURE)
    return TPG_FAIL(TPG_ERROR_UNSUPPORTED, "a stream-captured graph (TPG_MODE_CAPTURE) cannot be rebound: its node "
                                           "parameters belong to the capture; use TPG_MODE_EXPLICIT");
  if (n == 0) return TPG_SUCCESS;
  const tpg_plan *p = g->plan;
  TPG_TRY(tpg_dev_push(&g->dev));
  tpg_status st = check_bindings(g, p, b, n, __func__);
  if (st != TPG_SUCCESS) goto out;
  void **old = malloc((size_t)p->nslots * sizeof *old);
  char *mark = calloc((size_t)p->nnodes, 1);
  if (!old || !mark) {
    free(old);
    free(mark);
    st = TPG_FAIL(TPG_ERROR_OUT_OF_MEMORY, "out of host memory");
    goto out;
  }
  memcpy(old, g->bind, (size_t)p->nslots * sizeof *old);
  for (int k = 0; k < n; k++) {
    g->bind[b[k].slot - 1] = b[k].ptr;
    for (int u = g->st->users_at[b[k].slot - 1]; u < g->st->users_at[b[k].slot]; u++) mark[g->st->users[u]] = 1;
  }
  int coll_touched = 0;
  for (int i = 0; i < p->nnodes && !coll_touched; i++) coll_touched = mark[i] && patch_is_collective(g, i);
  if (coll_touched) st = tpg_comm_check_usable(g->comm, __func__, "the graph's comm");
  /* Topological order: collectives are re-captured in the same order on every rank. */
  int done = 0;
  for (; st == TPG_SUCCESS && done < p->nnodes; done++) {
    int i = g->st->order[done];
    if (!mark[i]) continue;
    int nccl = patch_is_collective(g, i);
    st = patch_node(g, i);
    if (st != TPG_SUCCESS) break;
    tpg_template_mark(g, nccl); /* what tpg_graph_export hands out follows */
  }
  if (st != TPG_SUCCESS) {
    /* Put back what was already changed, all of it: the nodes already
     * patched are patched again with the old bindings (an NCCL child that
     * was re-captured is re-captured back). Keep the first error's message,
     * and say so if a node could not be restored. */
    char msg[1024], lb[160];
    snprintf(msg, sizeof msg, "%s", tpg_last_error());
    memcpy(g->bind, old, (size_t)p->nslots * sizeof *old);
    int bad = -1;
    for (int oi = 0; oi <= done && oi < p->nnodes; oi++) { /* the failed node too: its copy may be half set */
      int i = g->st->order[oi];
      if (mark[i] && patch_node(g, i) != TPG_SUCCESS && bad < 0) bad = i;
    }
    const char *rest = strstr(msg, ": ");
    if (bad < 0) tpg_err(st, "tpg_graph_rebind", "%s (bindings restored)", rest ? rest + 2 : msg);
    else
      tpg_err(st, "tpg_graph_rebind", "%s (bindings NOT restored: node %s kept the new buffers; rebind it again or "
              "destroy the graph)", rest ? rest + 2 : msg, tpg_node_label(p, bad, lb, sizeof lb));
  }
  free(old);
  free(mark);
out:
  tpg_dev_pop();
  return st;
}

/* The driver-free part of an update's checks against the new state:
 * every used slot bound, kept bindings covering the new sizes, and the
 * scratch that must be (re)allocated into need[]. */
static tpg_status update_checks(tpg_graph *g, const tpg_state *ns, const tpg_plan *p, void **bind,
                                const tpg_binding *b, int n, size_t *need, const char *fn) {
  TPG_TRY(tpg_state_check_bound(ns, p, bind, fn));
  for (int q = 0; q < p->nslots; q++) {
    if (p->slots[q].where == TPG_MEM_SCRATCH || !bind[q]) continue;
    int rebound = 0;
    for (int k = 0; k < n; k++) rebound |= b[k].slot == (tpg_slot)(q + 1);
    /* A new plan may declare larger slots: the kept bindings must cover them. */
    if (!rebound) TPG_TRY(tpg_check_binding(g, p, (tpg_slot)(q + 1), bind[q], fn, NULL, -1));
  }
  size_t *owned = malloc((size_t)(p->nslots ? p->nslots : 1) * sizeof *owned);
  if (!owned) return TPG_FAIL(TPG_ERROR_OUT_OF_MEMORY, "out of host memory");
  for (int q = 0; q < p->nslots; q++) owned[q] = g->scratch[q].bytes;
  const int sym = g->comm && g->comm->nranks > 1 && (g->flags & TPG_GRAPH_NCCL_SYMMETRIC);
  tpg_status st = tpg_state_scratch_needs(ns, p, owned, sym, need, fn);
  free(owned);
  return st;
}

/* An update that succeeded: the graph takes the new node array (keeping its
 * template node handles: the exec setters take nodes of the graph the exec
 * was instantiated from), the new scratch (freeing what it replaced once the
 * last launch is done), bindings, state and plan. What it gives up comes
 * back in *tmp, *ns and *copy for the caller to free. */
static void adopt(tpg_graph *g, const tpg_plan *p, tpg_gnode **tmp, tpg_state **ns, tpg_scratch *fresh, void **bind,
                  tpg_plan **copy) {
  for (int i = 0; i < p->nnodes; i++) {
    memcpy((*tmp)[i].cu, g->nodes[i].cu, sizeof (*tmp)[i].cu);
    (*tmp)[i].ncu = g->nodes[i].ncu;
    (*tmp)[i].nfwd = g->nodes[i].nfwd; /* forwarded tails are template nodes too */
    memset(&g->nodes[i].res, 0, sizeof g->nodes[i].res); /* now the new node's */
  }
  tpg_gnode *old_nodes = g->nodes;
  g->nodes = *tmp;
  *tmp = old_nodes;
  /* Replaced scratch: launches already enqueued may still use it. */
  int replaced = 0;
  for (int q = 0; q < p->nslots; q++) replaced |= fresh[q].ptr != NULL;
  if (replaced && g->launched) tpg_cu->cuEventSynchronize(g->done);
  for (int q = 0; q < p->nslots; q++) {
    if (!fresh[q].ptr) continue;
    /* a set's arena (how 0) is not the graph's to count */
    g->info.workspace_bytes += fresh[q].bytes - (g->scratch[q].how ? g->scratch[q].bytes : 0);
    tpg_scratch_free(g, &g->scratch[q]);
    g->scratch[q] = fresh[q];
    memset(&fresh[q], 0, sizeof fresh[q]);
  }
  memcpy(g->bind, bind, (size_t)p->nslots * sizeof *bind);
  tpg_state *old_state = g->st;
  g->st = *ns;
  *ns = old_state;
  if (*copy) {
    tpg_plan *old_plan = g->plan;
    g->plan = *copy;
    *copy = old_plan;
  }
}

/* cuGraphExecUpdate's failure as tpg_graph_update reports it: a refusal
 * names the node CUDA blamed (tmp holds the new graph's node handles). */
static tpg_status update_failed(const tpg_plan *p, const tpg_gnode *tmp, CUresult r,
                                const CUgraphExecUpdateResultInfo *info) {
  const char *fn = "update"; /* as update() itself names its failures */
  char lb[160] = "(none)";
  for (int i = 0; i < p->nnodes; i++)
    for (int j = 0; j < tmp[i].ncu; j++)
      if (info->errorNode && tmp[i].cu[j] == info->errorNode) tpg_node_label(p, i, lb, sizeof lb);
  static const char *why[] = {"success", "error", "topology changed", "node type changed", "function changed",
                              "parameters changed", "not supported", "unsupported function change",
                              "attributes changed"};
  const int res = (int)info->result;
  if (res == CU_GRAPH_EXEC_UPDATE_ERROR || res == CU_GRAPH_EXEC_UPDATE_SUCCESS)
    return tpg_cu_fail(r, fn, "cuGraphExecUpdate"); /* not a refusal: out of memory, a driver error */
  return tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn,
                 "CUDA refused the whole-graph update at node %s: %s (%d); the graph is unchanged", lb,
                 res >= 0 && res < (int)(sizeof why / sizeof why[0]) ? why[res] : "?", res);
}

static tpg_status update(tpg_graph *g, const tpg_plan *plan, const tpg_binding *b, int n) {
  TPG_TRY(graph_usable(g, __func__));
  if (g->in_set == 2)
    return TPG_FAIL(TPG_ERROR_UNSUPPORTED, "the graph is the one exec of a retargeting tpg_graph_set, whose plan "
                    "changes with each pick: create the set again (or rebind it)");
  if (g->mode != TPG_MODE_EXPLICIT)
    return TPG_FAIL(TPG_ERROR_UNSUPPORTED, "whole-graph update needs a TPG_MODE_EXPLICIT graph (this one is mode %d)",
                    (int)g->mode);
  if (plan) {
    TPG_TRY(tpg_plan_check(plan, __func__, "plan"));
    TPG_TRY(tpg_plan_validate(plan));
    TPG_TRY(tpg_plan_same_topology(g->plan, plan));
  }
  const tpg_plan *p = plan ? plan : g->plan;
  const int ns_slots = p->nslots ? p->nslots : 1;
  tpg_state *ns = NULL;
  void **bind = NULL;
  size_t *need = NULL;
  tpg_scratch *fresh = NULL;
  tpg_gnode *tmp = NULL;
  CUgraph ng = NULL;
  tpg_plan *copy = NULL;
  TPG_TRY(tpg_dev_push(&g->dev));
  tpg_status st = check_bindings(g, p, b, n, __func__);
  if (st != TPG_SUCCESS) goto out;
  /* Everything the graph derives from a plan, derived again from this one. */
  TPG_TRYGOTO(tpg_state_build(p, &ns), st, out);
  if (ns->ncoll && g->comm) TPG_TRYGOTO(tpg_comm_check_usable(g->comm, __func__, "the graph's comm"), st, out);
  TPG_TRYGOTO(tpg_plan_comm_check(p, ns->ncoll, g->comm, __func__, "the graph's comm"), st, out);
  bind = malloc((size_t)ns_slots * sizeof *bind);
  need = calloc((size_t)ns_slots, sizeof *need);
  fresh = calloc((size_t)ns_slots, sizeof *fresh);
  tmp = tpg_gnodes_alloc(p->nnodes);
  if (!bind || !need || !fresh || !tmp) {
    st = TPG_FAIL(TPG_ERROR_OUT_OF_MEMORY, "out of host memory");
    goto out;
  }
  memcpy(bind, g->bind, (size_t)p->nslots * sizeof *bind);
  for (int k = 0; k < n; k++) bind[b[k].slot - 1] = b[k].ptr;
  TPG_TRYGOTO(update_checks(g, ns, p, bind, b, n, need, __func__), st, out);
  /* Scratch that is new or grew: allocated now, the old freed on success. */
  for (int q = 0; q < p->nslots; q++) {
    if (!need[q]) continue;
    TPG_TRYGOTO(tpg_scratch_alloc(g, p, q, need[q], 0, &fresh[q]), st, out);
    bind[q] = fresh[q].ptr;
  }
  if (plan) {
    TPG_TRYGOTO(tpg_plan_clone(plan, &copy), st, out);
    copy->serial = g->plan->serial;
  }
  /* The new node state works with the resources the graph holds (workspaces):
   * lent here, handed over on success. */
  for (int i = 0; i < p->nnodes; i++) tmp[i].res = g->nodes[i].res;
  TPG_TRYGOTO(tpg_fingerprint_check(g, ns, p, NULL, "in tpg_graph_update"), st, out);
  TPG_TRYGOTO(tpg_materialize(g, ns, p, bind, tmp, &ng), st, out);
  CUgraphExecUpdateResultInfo info;
  memset(&info, 0, sizeof info);
  CUresult r = tpg_cu->cuGraphExecUpdate(g->exec, ng, &info);
  if (r != CUDA_SUCCESS) {
    st = update_failed(p, tmp, r, &info);
    goto out;
  }
  /* The template follows the exec (tpg_graph_export): before adopt, while
   * tmp still holds the new graph's node handles. */
  st = tpg_template_update(g, p, tmp);
  if (st != TPG_SUCCESS) goto out;
  adopt(g, p, &tmp, &ns, fresh, bind, &copy);
out:
  if (ng) tpg_cu->cuGraphDestroy(ng);
  if (tmp && st != TPG_SUCCESS)
    for (int i = 0; i < p->nnodes; i++) memset(&tmp[i].res, 0, sizeof tmp[i].res); /* lent, still the graph's */
  tpg_gnodes_free(g, tmp, tmp ? p->nnodes : 0);
  for (int q = 0; fresh && q < p->nslots; q++) tpg_scratch_free(g, &fresh[q]);
  free(fresh);
  free(need);
  tpg_state_free(ns);
  tpg_plan_destroy(copy);
  free(bind);
  tpg_dev_pop();
  return st;
}

tpg_status tpg_graph_update(tpg_graph *g, const tpg_plan *plan, const tpg_binding *b, int n) {
  tpg_err_clear();
  tpg_status st = update(g, plan, b, n);
  if (st != TPG_SUCCESS) tpg_err_rename(__func__);
  return st;
}

tpg_status tpg_graph_rebind(tpg_graph *g, const tpg_binding *b, int n) {
  tpg_err_clear();
  tpg_status st = rebind(g, b, n);
  if (st != TPG_SUCCESS) tpg_err_rename(__func__);
  return st;
}
