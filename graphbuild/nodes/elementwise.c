/* elementwise.c - our element-wise kernels as node kinds: axpby
 * (y = alpha*x + beta*y) and concat_cols (blocks of columns side by side).
 * One kernel node each, grid-stride kernels sized by the element count.
 */
#define _POSIX_C_SOURCE 200809L
#include <string.h>

#include "graphbuild/nodes/common.h"

/* ---- shared by both kinds: one kernel node, one argument struct --------- */

static tpg_status kernel_add(const tpg_nctx *c, CUgraph graph, const tpg_deps *deps) {
  return tpg_add_kernel_node(c, graph, deps, &c->gn->kp, "cuGraphAddKernelNode");
}

static tpg_status kernel_run(const tpg_nctx *c, CUstream stream) { return tpg_launch_params(&c->gn->kp, stream); }

static unsigned kernel_pdl(const tpg_gnode *gn) {
  (void)gn;
  return TPG_PDL_PRIMARY | TPG_PDL_SECONDARY;
}

static void kernel_count(const tpg_gnode *gn, tpg_graph_info *info) {
  (void)gn;
  info->nodes++;
  info->kernel_nodes++;
}

/* A 1-D launch of 256-thread blocks of kernel `name`. */
static tpg_status kernel_launch(const tpg_nctx *c, const char *name, unsigned blocks) {
  tpg_gnode *gn = c->gn;
  CUfunction f;
  TPG_TRY(tpg_kernel_function(name, 0, &f));
  gn->kernel = name;
  memset(&gn->kp, 0, sizeof gn->kp);
  gn->kp.func = f;
  gn->kp.gridDimX = blocks;
  gn->kp.gridDimY = gn->kp.gridDimZ = 1;
  gn->kp.blockDimX = 256;
  gn->kp.blockDimY = gn->kp.blockDimZ = 1;
  tpg_kernel_params(&gn->kp, gn->kparams, &gn->args);
  return TPG_SUCCESS;
}

/* ---- axpby -------------------------------------------------------------- */

static tpg_status axpby_check(const tpg_plan *p, const char *fn, const tpg_node_rec *n) {
  tpg_view y = n->u.axpby.y, x = n->u.axpby.x;
  size_t count = n->u.axpby.count;
  if (count == 0) return tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn, "count is 0: expected >= 1 element");
  TPG_TRY(tpg_view_check(p, fn, "y", y, count, 4));
  TPG_TRY(tpg_view_check(p, fn, "x", x, count, 4));
  TPG_TRY(tpg_view_check_device(p, fn, "y", y));
  TPG_TRY(tpg_view_check_device(p, fn, "x", x));
  TPG_TRY(tpg_view_check_dtype(p, fn, "x", x, p->slots[y.slot - 1].dtype));
  /* Each element is read and written by one thread: the same range (y = (a + b) y) or disjoint ones. */
  if (tpg_views_overlap(y, count, x, count) && y.offset != x.offset)
    return tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn,
                   "y and x partly overlap in slot \"%s\": expected the same range (in place) or disjoint ranges",
                   p->slots[y.slot - 1].name);
  return TPG_SUCCESS;
}

static int axpby_views(const tpg_node_rec *n, tpg_view_use *v) {
  v[0] = (tpg_view_use){n->u.axpby.y, n->u.axpby.count, 1};
  v[1] = (tpg_view_use){n->u.axpby.x, n->u.axpby.count, 0};
  return 2;
}

static void axpby_dot(tpg_sbuf *s, const tpg_plan *p, const tpg_node_rec *n) {
  tpg_sb_printf(s, "\\ny=%g*x+%g*y n=%zu", (double)n->u.axpby.alpha, (double)n->u.axpby.beta, n->u.axpby.count);
  tpg_sb_view(s, p, "y", n->u.axpby.y);
  tpg_sb_view(s, p, "x", n->u.axpby.x);
}

static tpg_status axpby_set_ptrs(const tpg_nctx *c) {
  c->gn->args.axpby.y = TPG_VPTR(c, c->n->u.axpby.y);
  c->gn->args.axpby.x = TPG_VPTR(c, c->n->u.axpby.x);
  return TPG_SUCCESS;
}

static tpg_status axpby_fill(const tpg_nctx *c) {
  tpg_axpby_args *a = &c->gn->args.axpby;
  memset(a, 0, sizeof *a);
  a->count = c->n->u.axpby.count;
  a->alpha = c->n->u.axpby.alpha;
  a->beta = c->n->u.axpby.beta;
  a->dtype = (int32_t)c->p->slots[c->n->u.axpby.y.slot - 1].dtype;
  TPG_TRY(kernel_launch(c, "tpg_axpby", tpg_grid_for(c->n->u.axpby.count, 256 * 8, (unsigned)c->g->dev.sm_count * 8)));
  return axpby_set_ptrs(c);
}

static tpg_status axpby_patch(const tpg_nctx *c) {
  TPG_TRY(axpby_set_ptrs(c));
  if (c->g->mode == TPG_MODE_EAGER) return TPG_SUCCESS;
  TPG_CU(cuGraphExecKernelNodeSetParams(c->g->exec, c->gn->cu[0], &c->gn->kp));
  return TPG_SUCCESS;
}

const tpg_kind_ops tpg_kind_axpby = {
    .name = "axpby",
    .dot_shape = "box",
    .check = axpby_check,
    .views = axpby_views,
    .dot = axpby_dot,
    .fill = axpby_fill,
    .add = kernel_add,
    .run_eager = kernel_run,
    .patch = axpby_patch,
    .retarget = tpg_retarget_kernel,
    .pdl = kernel_pdl,
    .count = kernel_count,
};

/* ---- concat_cols -------------------------------------------------------- */

static size_t concat_elems(const tpg_node_rec *n) {
  return (size_t)n->u.concat.blocks * (size_t)n->u.concat.rows * (size_t)n->u.concat.cols;
}

static tpg_status concat_check(const tpg_plan *p, const char *fn, const tpg_node_rec *rec) {
  tpg_view dst = rec->u.concat.dst, src = rec->u.concat.src;
  int blocks = rec->u.concat.blocks, rows = rec->u.concat.rows, cols = rec->u.concat.cols;
  if (blocks < 1) return tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn, "blocks is %d: expected >= 1", blocks);
  if (rows < 1) return tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn, "rows is %d: expected >= 1", rows);
  if (cols < 1) return tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn, "cols is %d: expected >= 1", cols);
  size_t n, per;
  if (!tpg_mul_ok((size_t)rows, (size_t)cols, &per) || !tpg_mul_ok(per, (size_t)blocks, &n))
    return tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn, "blocks * rows * cols overflows: expected a size that fits in memory");
  TPG_TRY(tpg_view_check(p, fn, "dst", dst, n, 1));
  TPG_TRY(tpg_view_check_device(p, fn, "dst", dst));
  TPG_TRY(tpg_view_check(p, fn, "src", src, n, 1));
  TPG_TRY(tpg_view_check_device(p, fn, "src", src));
  TPG_TRY(tpg_view_check_dtype(p, fn, "src", src, p->slots[dst.slot - 1].dtype));
  if (dst.slot == src.slot && !(dst.offset + n <= src.offset || src.offset + n <= dst.offset))
    return tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn,
                   "dst and src overlap in slot \"%s\": expected disjoint ranges (the move is not in place)",
                   p->slots[dst.slot - 1].name);
  return TPG_SUCCESS;
}

static int concat_views(const tpg_node_rec *n, tpg_view_use *v) {
  v[0] = (tpg_view_use){n->u.concat.dst, concat_elems(n), 1};
  v[1] = (tpg_view_use){n->u.concat.src, concat_elems(n), 0};
  return 2;
}

static void concat_dot(tpg_sbuf *s, const tpg_plan *p, const tpg_node_rec *n) {
  tpg_sb_printf(s, "\\n%d x [%d, %d] -> [%d, %lld]", n->u.concat.blocks, n->u.concat.rows, n->u.concat.cols,
                n->u.concat.rows, (long long)n->u.concat.blocks * n->u.concat.cols);
  tpg_sb_view(s, p, "dst", n->u.concat.dst);
  tpg_sb_view(s, p, "src", n->u.concat.src);
}

static tpg_status concat_set_ptrs(const tpg_nctx *c) {
  c->gn->args.concat.dst = TPG_VPTR(c, c->n->u.concat.dst);
  c->gn->args.concat.src = TPG_VPTR(c, c->n->u.concat.src);
  return TPG_SUCCESS;
}

/* One kernel node rather than one strided 2-D memcpy node per block: the
 * same depth on the critical path, but R copy-engine nodes of short rows
 * (cols * 2 bytes each) cost more launches and run below the bandwidth one
 * grid-stride kernel gets. */
static tpg_status concat_fill(const tpg_nctx *c) {
  tpg_concat_args *a = &c->gn->args.concat;
  memset(a, 0, sizeof *a);
  a->rows = (uint64_t)c->n->u.concat.rows;
  a->cols = (uint64_t)c->n->u.concat.cols;
  a->blocks = c->n->u.concat.blocks;
  a->esize = (int32_t)tpg_slot_esize(c->p, c->n->u.concat.dst.slot);
  size_t bytes = (size_t)c->n->u.concat.blocks * a->rows * a->cols * (size_t)a->esize;
  TPG_TRY(kernel_launch(c, "tpg_concat_cols", tpg_grid_for(bytes / 16 + 1, 256, (unsigned)c->g->dev.sm_count * 8)));
  return concat_set_ptrs(c);
}

static tpg_status concat_patch(const tpg_nctx *c) {
  TPG_TRY(concat_set_ptrs(c));
  if (c->g->mode == TPG_MODE_EAGER) return TPG_SUCCESS;
  TPG_CU(cuGraphExecKernelNodeSetParams(c->g->exec, c->gn->cu[0], &c->gn->kp));
  return TPG_SUCCESS;
}

const tpg_kind_ops tpg_kind_concat = {
    .name = "concat_cols",
    .dot_shape = "box",
    .check = concat_check,
    .views = concat_views,
    .dot = concat_dot,
    .fill = concat_fill,
    .add = kernel_add,
    .run_eager = kernel_run,
    .patch = concat_patch,
    .retarget = tpg_retarget_kernel,
    .pdl = kernel_pdl,
    .count = kernel_count,
};
