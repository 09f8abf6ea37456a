/* host.c - the host-callback node kind (tpg_plan_add_host): fn(user) on a
 * driver thread once the node's dependencies are done. A host node in the
 * graph; cuLaunchHostFunc in eager mode (a host node again when that is
 * stream-captured). Nothing in it depends on a slot, so rebinding never
 * touches it.
 */
#define _POSIX_C_SOURCE 200809L
#include "graphbuild/nodes/common.h"

static tpg_status check(const tpg_plan *p, const char *fn, const tpg_node_rec *n) {
  (void)p;
  if (!n->u.host.fn) return tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn, "fn is NULL: expected a host callback");
  return TPG_SUCCESS;
}

static int views(const tpg_node_rec *n, tpg_view_use *v) {
  (void)n, (void)v;
  return 0;
}

static tpg_status fill(const tpg_nctx *c) {
  (void)c;
  return TPG_SUCCESS;
}

/* tpg_host_fn and CUhostFn are both void (*)(void *). */
static CUDA_HOST_NODE_PARAMS params(const tpg_nctx *c) {
  CUDA_HOST_NODE_PARAMS hp = {(CUhostFn)c->n->u.host.fn, c->n->u.host.user};
  return hp;
}

static tpg_status add(const tpg_nctx *c, CUgraph graph, const tpg_deps *deps) {
  CUDA_HOST_NODE_PARAMS hp = params(c);
  CUresult r = tpg_cu->cuGraphAddHostNode(&c->gn->cu[0], graph, deps->nodes, deps->n, &hp);
  if (r != CUDA_SUCCESS) return tpg_node_cu_fail(c, r, "cuGraphAddHostNode");
  c->gn->ncu = 1;
  return TPG_SUCCESS;
}

static tpg_status run_eager(const tpg_nctx *c, CUstream stream) {
  CUresult r = tpg_cu->cuLaunchHostFunc(stream, (CUhostFn)c->n->u.host.fn, c->n->u.host.user);
  if (r != CUDA_SUCCESS) return tpg_node_cu_fail(c, r, "cuLaunchHostFunc");
  return TPG_SUCCESS;
}

static tpg_status patch(const tpg_nctx *c) {
  (void)c;
  return TPG_SUCCESS;
}

static void count(const tpg_gnode *gn, tpg_graph_info *info) {
  (void)gn;
  info->nodes++;
  info->host_nodes++;
}

static tpg_status in_body(const tpg_plan *p, const char *fn, const tpg_node_rec *n, const char *parent) {
  (void)p;
  (void)n;
  return tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn,
                 "the open body is of conditional node %s: CUDA allows no host nodes in a conditional body "
                 "(kernel, memset, memcpy, empty, child-graph and conditional nodes only)",
                 parent);
}

const tpg_kind_ops tpg_kind_host = {
    .name = "host",
    .dot_shape = "hexagon",
    .check = check,
    .in_body = in_body,
    .views = views,
    .fill = fill,
    .add = add,
    .run_eager = run_eager,
    .patch = patch,
    .count = count,
};
