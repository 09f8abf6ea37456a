/* kernel_arg.c - changing a by-value argument of an engine kernel node
 * between launches (tpg_graph_set_kernel_arg), through the exec's kernel
 * node setter: no re-instantiation, as a rebind changes a pointer.
 *
 * Arguments were frozen when the node was added; a scalar that changes per
 * step (a sequence length, a step counter) otherwise needed a whole-graph
 * update from a new plan. The kind does the work (its set_arg writes the
 * graph's plan copy, the packed parameters and the exec), so every later
 * fill — rebind, update from the graph's own plan, export — keeps the value.
 */
#define _POSIX_C_SOURCE 200809L
#include "graphbuild/graph.h"

static tpg_status set_kernel_arg(tpg_graph *g, tpg_node node, int index, const void *value, size_t size) {
  TPG_CHECK_ARG(g != NULL, "graph is NULL: expected a tpg_graph");
  TPG_CHECK_ARG(tpg_graph_live(g), "graph is not a live tpg_graph (destroyed or corrupt handle)");
  TPG_CHECK_ARG(value != NULL, "value is NULL: expected the argument's new bytes");
  const tpg_plan *p = g->plan;
  int i = tpg_plan_node_index(p, node);
  TPG_CHECK_ARG(i >= 0, "node 0x%llx is not a node of the plan this graph was created from",
                (unsigned long long)node);
  char lb[160];
  tpg_nctx c;
  tpg_nctx_init(&c, g, p, g->bind, i, &g->nodes[i], lb, sizeof lb);
  if (!c.kind->set_arg)
    return TPG_FAIL(TPG_ERROR_INVALID_ARGUMENT,
                    "node %s is a %s node: only engine kernel nodes (tpg_plan_add_kernel) have by-value arguments "
                    "to set",
                    tpg_nctx_label(&c), c.kind->name);
  if (g->mode == TPG_MODE_CAPTURE)
    return TPG_FAIL(TPG_ERROR_UNSUPPORTED, "a stream-captured graph (TPG_MODE_CAPTURE) cannot change a node's "
                                           "arguments: they belong to the capture; use TPG_MODE_EXPLICIT");
  TPG_TRY(tpg_dev_push(&g->dev));
  tpg_status st = c.kind->set_arg(&c, "tpg_graph_set_kernel_arg", index, value, size);
  if (st == TPG_SUCCESS) tpg_template_mark(g, 0); /* what tpg_graph_export hands out follows */
  tpg_dev_pop();
  return st;
}

tpg_status tpg_graph_set_kernel_arg(tpg_graph *g, tpg_node node, int index, const void *value, size_t size) {
  tpg_err_clear();
  tpg_status st = set_kernel_arg(g, node, index, value, size);
  if (st != TPG_SUCCESS) tpg_err_rename(__func__);
  return st;
}
