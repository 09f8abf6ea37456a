/* empty.c - the empty node kind: a join (many edges in, one out) with no
 * work; an empty graph node, nothing in eager mode. */
#include "graphbuild/nodes/common.h"

static tpg_status check(const tpg_plan *p, const char *fn, const tpg_node_rec *n) {
  (void)p, (void)fn, (void)n;
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

static tpg_status add(const tpg_nctx *c, CUgraph graph, const tpg_deps *deps) {
  CUresult r = tpg_cu->cuGraphAddEmptyNode(&c->gn->cu[0], graph, deps->nodes, deps->n);
  if (r != CUDA_SUCCESS) return tpg_node_cu_fail(c, r, "cuGraphAddEmptyNode");
  c->gn->ncu = 1;
  return TPG_SUCCESS;
}

static tpg_status run_eager(const tpg_nctx *c, CUstream stream) {
  (void)c, (void)stream;
  return TPG_SUCCESS;
}

static tpg_status patch(const tpg_nctx *c) {
  (void)c;
  return TPG_SUCCESS;
}

static void count(const tpg_gnode *gn, tpg_graph_info *info) {
  (void)gn;
  info->nodes++;
  info->empty_nodes++;
}

const tpg_kind_ops tpg_kind_empty = {
    .name = "empty",
    .dot_shape = "circle",
    .check = check,
    .views = views,
    .fill = fill,
    .add = add,
    .run_eager = run_eager,
    .patch = patch,
    .retarget = tpg_retarget_kernel, /* no parameters at all */
    .count = count,
};
