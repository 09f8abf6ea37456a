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
 * - tpg_graph_update: whole graph. A topologically identical graph is
 *   materialized and applied with cuGraphExecUpdate; CUDA's refusal names a
 *   node, which we report by its plan label.
 * Either way all arguments are checked before the first CUDA call, and a
 * failure part-way restores the previous bindings on the nodes already set.
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
  for (int i = 0; i < n; i++) {
    TPG_TRY(tpg_check_binding(g, p, b[i].slot, b[i].ptr, fn, i));
    for (int j = 0; j < i; j++)
      if (b[j].slot == b[i].slot)
        return tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn, "bindings[%d] rebinds slot \"%s\" again (first at [%d])", i,
                       p->slots[b[i].slot - 1].name, j);
  }
  return TPG_SUCCESS;
}

static tpg_status graph_usable(tpg_graph *g, const char *fn) {
  if (!g) return tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn, "graph is NULL: expected a tpg_graph");
  if (g->magic != TPG_MAGIC_GRAPH)
    return tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn, "graph is not a live tpg_graph (destroyed or corrupt handle)");
  return TPG_SUCCESS;
}

tpg_status tpg_graph_rebind(tpg_graph *g, const tpg_binding *b, int n) {
  tpg_err_clear();
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
    for (int u = g->users_at[b[k].slot - 1]; u < g->users_at[b[k].slot]; u++) mark[g->users[u]] = 1;
  }
  int coll_touched = 0;
  for (int i = 0; i < p->nnodes && !coll_touched; i++) coll_touched = mark[i] && patch_is_collective(g, i);
  if (coll_touched) st = tpg_comm_check_usable(g->comm, __func__, "the graph's comm");
  /* Topological order: collectives are re-captured in the same order on every rank. */
  int done = 0;
  for (; st == TPG_SUCCESS && done < p->nnodes; done++) {
    int i = g->order[done];
    if (!mark[i]) continue;
    int nccl = patch_is_collective(g, i);
    st = patch_node(g, i);
    if (st != TPG_SUCCESS) break;
    tpg_template_mark(g, nccl); /* what tpg_graph_export hands out follows */
  }
  if (st != TPG_SUCCESS) {
    /* Put back what was already changed; keep the first error's message. */
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", tpg_last_error());
    memcpy(g->bind, old, (size_t)p->nslots * sizeof *old);
    for (int oi = 0; oi < done; oi++) {
      int i = g->order[oi];
      /* NCCL children are not re-captured back (a collective call); our own
       * all-reduce kernel nodes, and the epilogue node of an NCCL all-reduce
       * whose child was not re-captured, are restored like any kernel node. */
      if (mark[i] && !patch_is_collective(g, i)) patch_node(g, i);
    }
    tpg_err(st, "tpg_graph_rebind", "%s (bindings restored)", msg);
  }
  free(old);
  free(mark);
out:
  tpg_dev_pop();
  return st;
}

tpg_status tpg_graph_update(tpg_graph *g, const tpg_plan *plan, const tpg_binding *b, int n) {
  tpg_err_clear();
  TPG_TRY(graph_usable(g, __func__));
  if (g->mode != TPG_MODE_EXPLICIT)
    return TPG_FAIL(TPG_ERROR_UNSUPPORTED, "whole-graph update needs a TPG_MODE_EXPLICIT graph (this one is mode %d)",
                    (int)g->mode);
  if (plan) {
    TPG_TRY(tpg_plan_check(plan, __func__, "plan"));
    TPG_TRY(tpg_plan_validate(plan));
    TPG_TRY(tpg_plan_same_topology(g->plan, plan));
  }
  const tpg_plan *p = plan ? plan : g->plan;
  TPG_TRY(tpg_dev_push(&g->dev));
  tpg_status st = check_bindings(g, p, b, n, __func__);
  void **bind = NULL;
  tpg_gnode *tmp = NULL;
  CUgraph ng = NULL;
  tpg_plan *copy = NULL;
  if (st != TPG_SUCCESS) goto out;
  if (g->ncoll) {
    st = tpg_comm_check_usable(g->comm, __func__, "the graph's comm");
    if (st != TPG_SUCCESS) goto out;
  }
  bind = malloc((size_t)p->nslots * sizeof *bind);
  tmp = tpg_gnodes_alloc(p->nnodes);
  if (!bind || !tmp) {
    st = TPG_FAIL(TPG_ERROR_OUT_OF_MEMORY, "out of host memory");
    goto out;
  }
  /* The new node state works with the resources the graph holds (workspaces):
   * lent here, handed over on success. */
  for (int i = 0; i < p->nnodes; i++) tmp[i].res = g->nodes[i].res;
  memcpy(bind, g->bind, (size_t)p->nslots * sizeof *bind);
  for (int k = 0; k < n; k++) bind[b[k].slot - 1] = b[k].ptr;
  for (int s = 0; s < p->nslots; s++) {
    if (!bind[s] && g->users_at[s + 1] > g->users_at[s]) {
      st = TPG_ARG_FAIL("slot \"%s\" is used but not bound", p->slots[s].name);
      goto out;
    }
    /* A new plan may declare larger slots: the kept bindings must cover them. */
    if (plan && bind[s] && !g->owned[s]) {
      st = tpg_check_binding(g, p, (tpg_slot)(s + 1), bind[s], __func__, -1);
      if (st != TPG_SUCCESS) goto out;
    }
  }
  if (plan) {
    st = tpg_plan_clone(plan, &copy);
    if (st != TPG_SUCCESS) goto out;
    copy->serial = g->plan->serial;
  }
  st = tpg_materialize(g, p, bind, tmp, &ng);
  if (st != TPG_SUCCESS) goto out;
  CUgraphExecUpdateResultInfo info;
  memset(&info, 0, sizeof info);
  CUresult r = tpg_cu->cuGraphExecUpdate(g->exec, ng, &info);
  if (r != CUDA_SUCCESS) {
    char lb[160] = "(none)";
    for (int i = 0; i < p->nnodes; i++)
      for (int j = 0; j < tmp[i].ncu; j++)
        if (info.errorNode && tmp[i].cu[j] == info.errorNode) tpg_node_label(p, i, lb, sizeof lb);
    static const char *why[] = {"success", "error", "topology changed", "node type changed", "function changed",
                                "parameters changed", "not supported", "unsupported function change",
                                "attributes changed"};
    int res = (int)info.result;
    st = TPG_FAIL(TPG_ERROR_INVALID_ARGUMENT, "CUDA refused the whole-graph update at node %s: %s (%d); the graph is unchanged",
                  lb, res >= 0 && res < (int)(sizeof why / sizeof why[0]) ? why[res] : "?", res);
    goto out;
  }
  /* The template follows the exec (tpg_graph_export). */
  st = tpg_template_update(g, p, tmp);
  if (st != TPG_SUCCESS) goto out;
  /* Adopt the new node state; node handles stay those of the template (the
   * exec setters take nodes of the graph the exec was instantiated from). */
  for (int i = 0; i < p->nnodes; i++) {
    memcpy(tmp[i].cu, g->nodes[i].cu, sizeof tmp[i].cu);
    tmp[i].ncu = g->nodes[i].ncu;
    memset(&g->nodes[i].res, 0, sizeof g->nodes[i].res); /* now tmp's */
  }
  {
    tpg_gnode *old = g->nodes;
    g->nodes = tmp;
    tmp = old; /* released below, without the resources it handed over */
  }
  memcpy(g->bind, bind, (size_t)p->nslots * sizeof *bind);
  if (copy) {
    tpg_plan_destroy(g->plan);
    g->plan = copy;
    copy = NULL;
  }
out:
  if (ng) tpg_cu->cuGraphDestroy(ng);
  if (tmp && st != TPG_SUCCESS)
    for (int i = 0; i < p->nnodes; i++) memset(&tmp[i].res, 0, sizeof tmp[i].res); /* lent, still the graph's */
  tpg_gnodes_free(g, tmp, tmp ? p->nnodes : 0);
  tpg_plan_destroy(copy);
  free(bind);
  tpg_dev_pop();
  return st;
}
