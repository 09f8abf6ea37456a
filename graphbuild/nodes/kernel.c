/* kernel.c - the engine-kernel node kind (tpg_plan_add_kernel): an engine's
 * own kernel as a kernel node, with arguments by value and slot views.
 *
 * The plan checks shapes and argument kinds; fill resolves the kernel on the
 * graph's device (lib/module.c), checks the argument list against the
 * kernel's real parameter layout and packs it (lib/kit_args.c) into the
 * node's own buffer (gn->ext), which kernelParams points into. set_ptrs is
 * the one writer of the view arguments: fill and patch both call it, so a
 * rebind writes exactly what creation wrote, with the new addresses.
 * By-value arguments change only through set_arg (tpg_graph_set_kernel_arg),
 * which writes the graph's plan copy too, so a later fill agrees.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graphbuild/nodes/common.h"
#include "lib/kit_args.h"
#include "lib/module.h"

static const tpg_arg_rec *args_of(const tpg_node_rec *n) { return (const tpg_arg_rec *)n->data; }

static const char *name_of(const tpg_node_rec *n) {
  return n->u.kernel.name_off == SIZE_MAX ? NULL : (const char *)n->data + n->u.kernel.name_off;
}

/* ---- plan time ------------------------------------------------------------ */

static tpg_status check(const tpg_plan *p, const char *fn, const tpg_node_rec *n) {
  const unsigned *gr = n->u.kernel.grid, *bl = n->u.kernel.block, *cl = n->u.kernel.cluster;
  static const char xyz[] = "xyz";
  for (int i = 0; i < 3; i++) {
    if (gr[i] == 0) return tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn, "desc->grid[%d] is 0: expected >= 1 block", i);
    if (i > 0 && gr[i] > 65535)
      return tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn, "desc->grid[%d] is %u: CUDA allows at most 65535 in %c", i,
                     gr[i], xyz[i]);
    if (bl[i] == 0) return tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn, "desc->block[%d] is 0: expected >= 1 thread", i);
  }
  if (gr[0] > 0x7fffffffu)
    return tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn, "desc->grid[0] is %u: CUDA allows at most 2^31 - 1", gr[0]);
  unsigned long long threads = (unsigned long long)bl[0] * bl[1] * bl[2];
  if (threads > 1024)
    return tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn,
                   "desc->block is %u x %u x %u = %llu threads: expected at most 1024 per block", bl[0], bl[1], bl[2],
                   threads);
  int cl_set = cl[0] || cl[1] || cl[2];
  for (int i = 0; cl_set && i < 3; i++) {
    if (cl[i] == 0)
      return tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn,
                     "desc->cluster[%d] is 0 while another dimension is set: expected all three >= 1, or {0, 0, 0} "
                     "for no cluster",
                     i);
    if (gr[i] % cl[i])
      return tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn,
                     "desc->grid[%d] = %u is not a multiple of desc->cluster[%d] = %u", i, gr[i], i, cl[i]);
  }
  if (n->u.kernel.pdl != 0 && n->u.kernel.pdl != 1)
    return tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn, "desc->pdl is %d: expected 0 or 1", n->u.kernel.pdl);
  if (n->u.kernel.nviews > TPG_MAX_NODE_VIEWS)
    return tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn, "desc has %d view arguments: at most %d per kernel node",
                   n->u.kernel.nviews, TPG_MAX_NODE_VIEWS);
  const tpg_arg_rec *a = args_of(n);
  for (int i = 0; i < n->u.kernel.nargs; i++) {
    if (a[i].kind == TPG_ARG_COND && (a[i].view.offset == 0 || a[i].view.offset > (uint64_t)p->nconds))
      return tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn,
                     "desc->args[%d] is condition %llu: not a condition of this plan (expected 1..%d, from "
                     "tpg_plan_add_cond)",
                     i, (unsigned long long)a[i].view.offset, p->nconds);
    if (a[i].kind != TPG_ARG_VIEW) continue;
    char what[48];
    snprintf(what, sizeof what, "desc->args[%d].view", i);
    /* A pointer into the slot: at least its first element must exist. */
    TPG_TRY(tpg_view_check(p, fn, what, a[i].view, 1, 1));
  }
  return TPG_SUCCESS;
}

static int views(const tpg_node_rec *n, tpg_view_use *out) {
  const tpg_arg_rec *a = args_of(n);
  int k = 0;
  for (int i = 0; i < n->u.kernel.nargs && k < TPG_MAX_NODE_VIEWS; i++)
    if (a[i].kind == TPG_ARG_VIEW) out[k++] = (tpg_view_use){a[i].view, 1, 1}; /* extent and direction: the kernel's */
  return k;
}

static void label(const tpg_node_rec *n, int idx, char *buf, size_t cap) {
  const char *nm = name_of(n);
  snprintf(buf, cap, "%s#%d", nm ? nm : "kernel", idx);
}

static void dot(tpg_sbuf *s, const tpg_plan *p, const tpg_node_rec *n) {
  const unsigned *g = n->u.kernel.grid, *b = n->u.kernel.block;
  tpg_sb_printf(s, "\\ngrid %ux%ux%u block %ux%ux%u", g[0], g[1], g[2], b[0], b[1], b[2]);
  if (n->u.kernel.shared_bytes) tpg_sb_printf(s, " smem %u", n->u.kernel.shared_bytes);
  const tpg_arg_rec *a = args_of(n);
  for (int i = 0; i < n->u.kernel.nargs; i++) {
    char role[24];
    snprintf(role, sizeof role, "arg%d", i);
    if (a[i].kind == TPG_ARG_VIEW) tpg_sb_view(s, p, role, a[i].view);
  }
}

/* ---- create time ---------------------------------------------------------- */

/* gn->ext: the packed arguments kernelParams points into, and the PDL role. */
typedef struct kernel_state {
  tpg_kit_args *args;
  int secondary;      /* desc.pdl: may end a programmatic edge */
} kernel_state;

static void release(tpg_graph *g, tpg_gnode *gn) {
  (void)g;
  kernel_state *ks = gn->ext;
  if (ks) tpg_kit_args_free(ks->args);
  free(ks);
  gn->ext = NULL;
  gn->ext_bytes = 0;
}

/* The one writer of the node's pointer arguments (fill and patch). */
static tpg_status set_ptrs(const tpg_nctx *c) {
  tpg_kit_args *k = ((kernel_state *)c->gn->ext)->args;
  const tpg_arg_rec *a = args_of(c->n);
  for (int i = 0; i < c->n->u.kernel.nargs; i++) {
    if (a[i].kind == TPG_ARG_VIEW) tpg_kit_args_set_ptr(k, i, tpg_view_ptr(c->p, c->bind, a[i].view));
    if (a[i].kind == TPG_ARG_COND) {
      /* The handle the graph made for this condition (materialize.c): only
       * an explicit graph has one. */
      tpg_cond cd = (tpg_cond)a[i].view.offset;
      const tpg_graph *g = c->g;
      if (!g->cond_handles || !g->cond_handles[cd - 1])
        return tpg_err(g->mode == TPG_MODE_EXPLICIT ? TPG_ERROR_INVALID_ARGUMENT : TPG_ERROR_UNSUPPORTED,
                       "tpg_graph_create",
                       g->mode == TPG_MODE_EXPLICIT
                           ? "node %s: args[%d] is condition %u, which no conditional node of the plan uses"
                           : "node %s: args[%d] is condition %u: conditions need TPG_MODE_EXPLICIT (capture and "
                             "eager modes have no graph a condition handle could belong to)",
                       tpg_nctx_label(c), i, (unsigned)cd);
      tpg_kit_args_set_ptr(k, i, g->cond_handles[cd - 1]);
    }
  }
  return TPG_SUCCESS;
}

static tpg_status fill(const tpg_nctx *c) {
  static const char fn[] = "tpg_graph_create";
  const tpg_node_rec *n = c->n;
  tpg_gnode *gn = c->gn;
  release(c->g, gn);
  const char *lb = tpg_nctx_label(c);
  tpg_kit_kernel kk;
  TPG_TRY(tpg_kit_kernel_resolve(fn, lb, n->u.kernel.module, name_of(n), n->u.kernel.cu_kernel,
                                 n->u.kernel.cu_function, n->u.kernel.shared_bytes, &kk));
  tpg_status st = TPG_SUCCESS;
  const unsigned *bl = n->u.kernel.block;
  unsigned threads = bl[0] * bl[1] * bl[2];
  tpg_arg *tmp = NULL;
  if (kk.max_threads > 0 && threads > (unsigned)kk.max_threads) {
    st = tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn,
                 "node %s: block %u x %u x %u = %u threads; the kernel runs at most %d per block here (its "
                 "registers or __launch_bounds__)",
                 lb, bl[0], bl[1], bl[2], threads, kk.max_threads);
    goto out;
  }
  int na = n->u.kernel.nargs;
  tmp = malloc((size_t)(na ? na : 1) * sizeof *tmp);
  if (!tmp) {
    st = tpg_err(TPG_ERROR_OUT_OF_MEMORY, fn, "out of host memory");
    goto out;
  }
  const tpg_arg_rec *a = args_of(n);
  for (int i = 0; i < na; i++) {
    tmp[i].kind = a[i].kind;
    tmp[i].size = a[i].size;
    tmp[i].view = a[i].view;
    tmp[i].bytes = a[i].kind == TPG_ARG_BYTES ? (const unsigned char *)n->data + a[i].value_off : NULL;
  }
  tpg_param_layout layout = tpg_kit_kernel_layout(&kk);
  kernel_state *ks = calloc(1, sizeof *ks);
  if (!ks) {
    st = tpg_err(TPG_ERROR_OUT_OF_MEMORY, fn, "out of host memory");
    goto out;
  }
  st = tpg_kit_args_layout(fn, lb, tmp, na, &layout, &ks->args);
  if (st != TPG_SUCCESS) {
    free(ks);
    goto out;
  }
  tpg_kit_args *k = ks->args;
  ks->secondary = n->u.kernel.pdl;
  gn->ext = ks;
  gn->ext_bytes = sizeof *ks + k->bytes;
  gn->kernel = name_of(n) ? name_of(n) : "engine kernel";
  memset(&gn->kp, 0, sizeof gn->kp);
  gn->kp.func = kk.func;
  gn->kp.gridDimX = n->u.kernel.grid[0];
  gn->kp.gridDimY = n->u.kernel.grid[1];
  gn->kp.gridDimZ = n->u.kernel.grid[2];
  gn->kp.blockDimX = bl[0];
  gn->kp.blockDimY = bl[1];
  gn->kp.blockDimZ = bl[2];
  gn->kp.sharedMemBytes = n->u.kernel.shared_bytes;
  gn->kp.kernelParams = na ? k->params : NULL;
  st = set_ptrs(c);
out:
  free(tmp);
  tpg_kit_kernel_release(&kk);
  return st;
}

static tpg_status add(const tpg_nctx *c, CUgraph graph, const tpg_deps *deps) {
  TPG_TRY(tpg_add_kernel_node(c, graph, deps, &c->gn->kp, "cuGraphAddKernelNode (engine kernel)"));
  return c->n->u.kernel.cluster[0] ? tpg_node_set_cluster(c, c->n->u.kernel.cluster) : TPG_SUCCESS;
}

static tpg_status run_eager(const tpg_nctx *c, CUstream stream) {
  return tpg_launch_params_ex(c, &c->gn->kp, c->n->u.kernel.cluster, stream);
}

/* ---- rebind --------------------------------------------------------------- */

static CUresult apply(const tpg_nctx *c);

static tpg_status patch(const tpg_nctx *c) {
  TPG_TRY(set_ptrs(c));
  CUresult r = apply(c); /* eager mode: the next launch reads the patched buffer */
  if (r != CUDA_SUCCESS) {
    char what[200];
    snprintf(what, sizeof what, "cuGraphExecKernelNodeSetParams for node %s", tpg_nctx_label(c));
    return tpg_cu_fail(r, "tpg_graph_rebind", what);
  }
  return TPG_SUCCESS;
}

/* ---- by-value arguments ----------------------------------------------------- */

/* The exec setter with the node's parameters as they are now. */
static CUresult apply(const tpg_nctx *c) {
  if (c->g->mode == TPG_MODE_EAGER) return CUDA_SUCCESS; /* the next launch reads gn->kp */
  return tpg_cu->cuGraphExecKernelNodeSetParams(c->g->exec, c->gn->cu[0], &c->gn->kp);
}

static tpg_status set_arg(const tpg_nctx *c, const char *fn, int index, const void *value, size_t size) {
  const tpg_node_rec *n = c->n;
  const char *lb = tpg_nctx_label(c);
  if (index < 0 || index >= n->u.kernel.nargs)
    return tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn, "index is %d: node %s has %d argument%s (0..%d)", index, lb,
                   n->u.kernel.nargs, n->u.kernel.nargs == 1 ? "" : "s", n->u.kernel.nargs - 1);
  const tpg_arg_rec *a = &args_of(n)[index];
  if (a->kind != TPG_ARG_BYTES)
    return tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn,
                   "args[%d] of node %s is %s, not a by-value argument: %s", index, lb,
                   a->kind == TPG_ARG_VIEW ? "a slot view" : "a condition handle",
                   a->kind == TPG_ARG_VIEW ? "rebind its slot instead (tpg_graph_rebind)" : "it cannot be set");
  if (size != a->size)
    return tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn, "size is %zu: args[%d] of node %s is %u bytes", size, index, lb,
                   a->size);
  /* c->n is the graph's own copy of the plan (g->plan), the one thing a
   * graph edits of it: its argument values. */
  unsigned char *kept = (unsigned char *)n->data + a->value_off;
  tpg_kit_args *k = ((kernel_state *)c->gn->ext)->args;
  unsigned char *packed = k->buf + k->offset[index];
  unsigned char old[TPG_ARG_MAX_BYTES];
  memcpy(old, packed, size);
  memcpy(packed, value, size);
  CUresult r = apply(c);
  if (r != CUDA_SUCCESS) {
    memcpy(packed, old, size); /* the exec kept the old parameters */
    char what[200];
    snprintf(what, sizeof what, "cuGraphExecKernelNodeSetParams for node %s", lb);
    return tpg_cu_fail(r, fn, what); /* the argument keeps its value: the header says so */
  }
  memcpy(kept, value, size);
  return TPG_SUCCESS;
}

/* ---- facts ---------------------------------------------------------------- */

/* Any kernel node may start a programmatic edge (its dependents wait for its
 * completion); it may end one only when the engine says it waits
 * (griddepcontrol.wait) in every block before touching memory (desc.pdl). */
static unsigned pdl(const tpg_gnode *gn) {
  const kernel_state *ks = gn->ext;
  return TPG_PDL_PRIMARY | (ks && ks->secondary ? TPG_PDL_SECONDARY : 0u);
}

/* desc.pdl promises the wait before memory accesses, not before the exit. */
static int pdl_early_exit(const tpg_node_rec *n) { return n->u.kernel.pdl; }

static void count(const tpg_gnode *gn, tpg_graph_info *info) {
  (void)gn;
  info->nodes++;
  info->user_kernel_nodes++;
}

/* Grid, block, shared memory and arguments go through the exec setter; the
 * cluster shape is a node attribute it cannot change, and desc.pdl decides
 * the exec's edge into the node and which GEMMs may share a workspace
 * (graphbuild/workspace.c): neither may differ between sizes. */
static int retarget(const tpg_node_rec *a, const tpg_gnode *ga, const tpg_node_rec *b, const tpg_gnode *gb) {
  (void)ga, (void)gb;
  return a->u.kernel.pdl == b->u.kernel.pdl &&
         memcmp(a->u.kernel.cluster, b->u.kernel.cluster, sizeof a->u.kernel.cluster) == 0;
}

/* A whole-graph update keeps the graph's GEMM workspaces, shared by what
 * desc.pdl promised at creation: a plan that changes it needs a new graph. */
static tpg_status same_shape(const tpg_node_rec *a, const tpg_node_rec *b, const char *label) {
  if (a->u.kernel.pdl != b->u.kernel.pdl)
    return TPG_ARG_FAIL("node %s: desc.pdl is %d in the graph, %d in plan: expected the same (the graph's edges and "
                        "its shared GEMM workspaces follow it)", label, a->u.kernel.pdl, b->u.kernel.pdl);
  return TPG_SUCCESS;
}

const tpg_kind_ops tpg_kind_kernel = {
    .name = "kernel",
    .dot_shape = "box3d",
    .check = check,
    .views = views,
    .label = label,
    .dot = dot,
    .fill = fill,
    .add = add,
    .run_eager = run_eager,
    .patch = patch,
    .retarget = retarget,
    .same_shape = same_shape,
    .set_arg = set_arg,
    .pdl = pdl,
    .pdl_early_exit = pdl_early_exit,
    .count = count,
    .release = release,
};
