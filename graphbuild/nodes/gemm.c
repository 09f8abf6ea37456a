/* gemm.c - the GEMM node kind: y = epilogue(x * w^T), one kernel node, or
 * one child graph where cuBLASLt runs it (gemm_lt.c).
 *
 * The kernel (and its launch shape, split, workspace) is chosen once per
 * node by tpg_gemm_select_rule for this GPU (our kernels, a CUTLASS one or
 * cuBLASLt, by the rule between the families), or with tuning on by the tuner
 * (timed at prepare, during creation only): prepare picks it to size the
 * workspace (the graph places it: graphbuild/workspace.c), fill picks it
 * again (same inputs and, with tuning, a process cache hit: same answer)
 * and refuses a kernel that would need more workspace than the node's lane
 * holds. On Hopper
 * the kernel reads x and w through tensor maps that hold their base
 * addresses, so setting the pointers re-encodes the maps; a CUTLASS
 * kernel's argument block (CUTLASS's Params, whose descriptors CUTLASS
 * encodes) is rebuilt whole by lib/gemm/cutlass.h. Either way set_ptrs is
 * the one writer, for fill and rebind alike.
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graphbuild/nodes/common.h"
#include "graphbuild/nodes/gemm_lt.h"
#include "lib/device.h"
#include "lib/gemm/cutlass.h"
#include "lib/gemm/ours.h"
#include "lib/gemm/tune_device.h"

/* ---- plan time ---------------------------------------------------------- */

_Static_assert(TPG_NORM_FOLD_MAX_ROWS == TPG_FOLD_MAX_M, "tpgraph.h and the kernels agree on a folded norm's rows");

/* A folded norm (tpg_x_norm): m within the GEMV's rows, the sums fp32, read
 * by every CTA while y is written, so no view meets y. */
static tpg_status check_fold(const tpg_plan *p, const char *fn, const tpg_gemm_desc *d) {
  const size_t m = (size_t)d->m, n = (size_t)d->n, k = (size_t)d->k;
  const tpg_x_norm *xn = &d->x_norm;
#define CHECK(cond, ...) \
  do {                   \
    if (!(cond)) return tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn, __VA_ARGS__); \
  } while (0)
  if (!d->y_ssq.slot && !xn->ssq.slot) {
    CHECK(!xn->weight.slot, "desc->x_norm.weight.slot is %u without x_norm.ssq: expected both or neither",
          xn->weight.slot);
    return TPG_SUCCESS;
  }
  CHECK(d->m <= TPG_NORM_FOLD_MAX_ROWS, "desc->m is %d with a folded norm (y_ssq or x_norm): expected <= %d (the "
        "decode GEMV's rows)", d->m, TPG_NORM_FOLD_MAX_ROWS);
  if (d->y_ssq.slot) {
    CHECK(d->epilogue == TPG_EPILOGUE_NONE || d->epilogue == TPG_EPILOGUE_BIAS || d->epilogue == TPG_EPILOGUE_RESIDUAL,
          "desc->y_ssq is set with epilogue %d: expected TPG_EPILOGUE_NONE, _BIAS or _RESIDUAL", (int)d->epilogue);
    TPG_TRY(tpg_plan_check_view(p, fn, "desc->y_ssq", d->y_ssq, m * TPG_NORM_FOLD_GROUPS(n), 4, TPG_F32));
    CHECK(!tpg_views_overlap(d->y_ssq, m * TPG_NORM_FOLD_GROUPS(n), d->y, m * n),
          "desc->y_ssq overlaps desc->y in slot %u: expected disjoint ranges", d->y.slot);
  }
  if (xn->ssq.slot) {
    TPG_TRY(tpg_plan_check_view(p, fn, "desc->x_norm.ssq", xn->ssq, m * TPG_NORM_FOLD_GROUPS(k), 4, TPG_F32));
    CHECK(xn->weight.slot, "desc->x_norm.weight.slot is 0: a folded norm needs its weight");
    TPG_TRY(tpg_plan_check_view(p, fn, "desc->x_norm.weight", xn->weight, k, 16, d->dtype));
    CHECK(isfinite(xn->eps) && xn->eps >= 0.0f, "desc->x_norm.eps is %g: expected a finite value >= 0",
          (double)xn->eps);
    CHECK(!tpg_views_overlap(d->y, m * n, xn->ssq, m * TPG_NORM_FOLD_GROUPS(k)) &&
              !tpg_views_overlap(d->y, m * n, xn->weight, k),
          "desc->y overlaps desc->x_norm's ssq or weight in slot %u: expected disjoint ranges", d->y.slot);
    CHECK(!d->y_ssq.slot || !tpg_views_overlap(d->y_ssq, m * TPG_NORM_FOLD_GROUPS(n), xn->ssq,
                                               m * TPG_NORM_FOLD_GROUPS(k)),
          "desc->y_ssq overlaps desc->x_norm.ssq in slot %u: expected disjoint ranges", d->y_ssq.slot);
  }
#undef CHECK
  return TPG_SUCCESS;
}

static tpg_status check(const tpg_plan *p, const char *fn, const tpg_node_rec *rec) {
  const tpg_gemm_desc *d = &rec->u.gemm;
#define CHECK(cond, ...) \
  do {                   \
    if (!(cond)) return tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn, __VA_ARGS__); \
  } while (0)
  CHECK(d->dtype == TPG_BF16 || d->dtype == TPG_F16, "desc->dtype is %d: expected TPG_BF16 or TPG_F16", (int)d->dtype);
  CHECK(d->epilogue >= 0 && d->epilogue < TPG_EPILOGUE_COUNT, "desc->epilogue is %d: expected 0..%d",
        (int)d->epilogue, TPG_EPILOGUE_COUNT - 1);
  CHECK(d->m >= 1, "desc->m is %d: expected >= 1", d->m);
  CHECK(d->sm_reserve >= 0 && d->sm_reserve <= 256, "desc->sm_reserve is %d: expected 0..256 SMs", d->sm_reserve);
  CHECK(d->n >= 8 && d->n % 8 == 0, "desc->n is %d: expected a positive multiple of 8 (16-byte rows)", d->n);
  CHECK(d->k >= 8 && d->k % 8 == 0, "desc->k is %d: expected a positive multiple of 8 (16-byte rows)", d->k);
  size_t m = (size_t)d->m, n = (size_t)d->n, k = (size_t)d->k;
  int swiglu = d->epilogue == TPG_EPILOGUE_SWIGLU;
  size_t wrows = swiglu ? 2 * n : n;
  TPG_TRY(tpg_plan_check_view(p, fn, "desc->x", d->x, m * k, 16, d->dtype));
  TPG_TRY(tpg_plan_check_view(p, fn, "desc->w", d->w, wrows * k, 16, d->dtype));
  TPG_TRY(tpg_plan_check_view(p, fn, "desc->y", d->y, m * n, 16,
                              d->epilogue == TPG_EPILOGUE_F32_PARTIAL ? TPG_F32 : d->dtype));
  int bias_needed = d->epilogue == TPG_EPILOGUE_BIAS || d->epilogue == TPG_EPILOGUE_BIAS_GELU ||
                    d->epilogue == TPG_EPILOGUE_BIAS_SILU;
  int bias_allowed = bias_needed || swiglu || d->epilogue == TPG_EPILOGUE_RESIDUAL;
  if (bias_needed) CHECK(d->bias.slot != TPG_SLOT_NONE, "desc->bias.slot is 0: epilogue %d needs a bias slot",
                         (int)d->epilogue);
  if (!bias_allowed)
    CHECK(d->bias.slot == TPG_SLOT_NONE, "desc->bias.slot is %u: epilogue %d takes no bias (expected 0)", d->bias.slot,
          (int)d->epilogue);
  if (d->bias.slot != TPG_SLOT_NONE)
    TPG_TRY(tpg_plan_check_view(p, fn, "desc->bias", d->bias, swiglu ? 2 * n : n, 16, d->dtype));
  if (d->epilogue == TPG_EPILOGUE_RESIDUAL) {
    CHECK(d->residual.slot != TPG_SLOT_NONE, "desc->residual.slot is 0: TPG_EPILOGUE_RESIDUAL needs one");
    TPG_TRY(tpg_plan_check_view(p, fn, "desc->residual", d->residual, m * n, 16, d->dtype));
  } else {
    CHECK(d->residual.slot == TPG_SLOT_NONE,
          "desc->residual.slot is %u: only TPG_EPILOGUE_RESIDUAL reads a residual (expected 0)", d->residual.slot);
  }
  if (d->x.slot == d->y.slot)
    CHECK(d->x.offset + m * k <= d->y.offset || d->y.offset + m * n <= d->x.offset,
          "desc->y overlaps desc->x in slot %u: a GEMM cannot run in place", d->x.slot);
  /* y is written tile by tile while w and bias are still read by other
   * tiles: no overlap. The residual is read element by element where y is
   * written: the same view (in place) or disjoint. */
  CHECK(!tpg_views_overlap(d->y, m * n, d->w, wrows * k),
        "desc->y overlaps desc->w in slot %u: expected disjoint ranges", d->y.slot);
  CHECK(!tpg_views_overlap(d->y, m * n, d->bias, swiglu ? 2 * n : n),
        "desc->y overlaps desc->bias in slot %u: expected disjoint ranges", d->y.slot);
  CHECK(!tpg_views_overlap(d->y, m * n, d->residual, m * n) ||
            (d->y.slot == d->residual.slot && d->y.offset == d->residual.offset),
        "desc->residual overlaps desc->y in slot %u without being the same range: expected exactly y (in place) "
        "or disjoint ranges", d->y.slot);
#undef CHECK
  return check_fold(p, fn, d);
}

static int views(const tpg_node_rec *n, tpg_view_use *v) {
  const tpg_gemm_desc *d = &n->u.gemm;
  size_t m = (size_t)d->m, nn = (size_t)d->n, k = (size_t)d->k;
  int swiglu = d->epilogue == TPG_EPILOGUE_SWIGLU;
  int c = 0;
  v[c++] = (tpg_view_use){d->x, m * k, 0};
  v[c++] = (tpg_view_use){d->w, (swiglu ? 2 * nn : nn) * k, 0};
  v[c++] = (tpg_view_use){d->y, m * nn, 1};
  if (d->bias.slot) v[c++] = (tpg_view_use){d->bias, swiglu ? 2 * nn : nn, 0};
  if (d->residual.slot) v[c++] = (tpg_view_use){d->residual, m * nn, 0};
  if (d->y_ssq.slot) v[c++] = (tpg_view_use){d->y_ssq, m * TPG_NORM_FOLD_GROUPS(nn), 1};
  if (d->x_norm.ssq.slot) {
    v[c++] = (tpg_view_use){d->x_norm.ssq, m * TPG_NORM_FOLD_GROUPS(k), 0};
    v[c++] = (tpg_view_use){d->x_norm.weight, k, 0};
  }
  return c;
}

static void dot(tpg_sbuf *s, const tpg_plan *p, const tpg_node_rec *n) {
  static const char *epi[] = {"", "+bias", "+bias,gelu", "+bias,silu", "swiglu", "+residual", "f32 partial"};
  tpg_sb_printf(s, "\\n%dx%dx%d %s", n->u.gemm.m, n->u.gemm.n, n->u.gemm.k, epi[n->u.gemm.epilogue]);
  tpg_sb_view(s, p, "x", n->u.gemm.x);
  tpg_sb_view(s, p, "w", n->u.gemm.w);
  tpg_sb_view(s, p, "y", n->u.gemm.y);
  if (n->u.gemm.y_ssq.slot) tpg_sb_view(s, p, "y_ssq", n->u.gemm.y_ssq);
  if (n->u.gemm.x_norm.ssq.slot) {
    tpg_sb_view(s, p, "x_norm.ssq", n->u.gemm.x_norm.ssq);
    tpg_sb_view(s, p, "x_norm.weight", n->u.gemm.x_norm.weight);
  }
}

/* ---- kernel choice ------------------------------------------------------ */

/* SMs a GEMM node may use: the GPU's less its sm_reserve (at least half). */
static int gemm_sms(const tpg_graph *g, const tpg_gemm_desc *d) {
  int n = g->dev.sm_count - d->sm_reserve;
  return n >= g->dev.sm_count / 2 ? n : g->dev.sm_count / 2; /* never starve the GEMM itself */
}

/* The tuner's timer on this graph's device, created at the first GEMM that
 * needs timing (a graph that finds everything cached allocates nothing) and
 * destroyed by graph.c once the nodes are prepared. */
static int time_gemm(void *ctx, const tpg_gemm_problem *p, const tpg_gemm_variant *v, const tpg_kernel_launch *launch,
                     const tpg_tma_encode *x_map, const tpg_tma_encode *w_map, double *us) {
  tpg_graph *g = ctx;
  if (!g->gemm_timer && tpg_gemm_dev_timer_create(g->cap_stream, 5, &g->gemm_timer) != TPG_SUCCESS) return 1;
  return tpg_gemm_dev_time(g->gemm_timer, p, v, launch, x_map, w_map, us);
}

/* The GEMM kernel for a node on this GPU; fails naming the node. Tuning off:
 * tpg_gemm_select_rule with the graph's family. On: the tuner's policy (lib/gemm/tune.h): timed only
 * while the graph is created, cached for every later pick. count: this is
 * the node's first pick (prepare), counted in tpg_graph_info. */
static tpg_gemm_problem problem_of(const tpg_nctx *c) {
  const tpg_gemm_desc *d = &c->n->u.gemm;
  const int kdt = d->dtype == TPG_F16 ? TPG_KDT_F16 : TPG_KDT_BF16;
  tpg_gemm_problem p =
      tpg_gemm_problem_make(d->m, d->n, d->k, kdt, (int)d->epilogue, c->g->dev.sm_arch, gemm_sms(c->g, d));
  p.streamk = c->g->tune.streamk;
  p.residual_bias = d->epilogue == TPG_EPILOGUE_RESIDUAL && d->bias.slot != TPG_SLOT_NONE;
  p.fold = (d->y_ssq.slot ? TPG_GEMM_FOLD_SSQ : 0) | (d->x_norm.ssq.slot ? TPG_GEMM_FOLD_XNORM : 0);
  p.sm_target = d->sm_reserve > 0 ? p.sms : 0;
  return p;
}

static tpg_status pick(const tpg_nctx *c, int count, tpg_kernel_launch *l, tpg_tma_encode *xe, tpg_tma_encode *we) {
  tpg_graph *g = c->g;
  char why[256] = {0};
  const tpg_gemm_problem p = problem_of(c);
  if (g->tune.gemm_tune) {
    g->gemm_tune.cfg.mode = TPG_GEMM_TUNE_ON;
    g->gemm_tune.cfg.time_fn = time_gemm;
    g->gemm_tune.cfg.time_ctx = g;
    tpg_status st = tpg_gemm_tune_graph_pick(&g->gemm_tune, &p, count, l, xe, we);
    if (st != TPG_SUCCESS)
      return TPG_ARG_FAIL("node %s: no GEMM kernel for this shape: %s", tpg_nctx_label(c), tpg_last_error());
    return TPG_SUCCESS;
  }
  if (tpg_gemm_select_rule(&p, g->tune.gemm_family, l, xe, we, why, sizeof why) != 0)
    return TPG_ARG_FAIL("node %s: no GEMM kernel for this shape: %s", tpg_nctx_label(c), why);
  return TPG_SUCCESS;
}

/* What the node's kernel needs of workspace; the graph places it (and
 * zeroes it once: kernels leave their counters zeroed, so that serves every
 * launch) after every node is prepared (workspace.c). */
static tpg_status prepare(const tpg_nctx *c) {
  tpg_kernel_launch l;
  tpg_tma_encode xe, we;
  TPG_TRY(pick(c, 1, &l, &xe, &we));
  c->gn->res.need = l.workspace_bytes;
  c->gn->res.need_zeroed = l.workspace_zeroed < l.workspace_bytes ? l.workspace_zeroed : l.workspace_bytes;
  c->gn->res.need_private = l.workspace_private;
  return TPG_SUCCESS;
}

/* ---- parameters --------------------------------------------------------- */

/* The GEMM args inside a node's parameter block (after the maps for TMA,
 * the plain view in front of CUTLASS's Params). */
static tpg_gemm_args *gemm_args(tpg_gnode *gn) {
  return gn->cutlass ? &gn->args.gemm_cutlass.a : gn->tma ? &gn->args.gemm_tma.a : &gn->args.gemm;
}

/* A CUTLASS node's argument block from its plain view: CUTLASS's Params
 * for these pointers, its descriptors encoded by the driver. */
static tpg_status cutlass_block(const tpg_nctx *c) {
  tpg_gnode *gn = c->gn;
  const tpg_gemm_desc *d = &c->n->u.gemm;
  const tpg_gemm_args a = gn->args.gemm_cutlass.a;
  tpg_cutlass_problem p;
  CUresult cu = CUDA_SUCCESS;
  char why[200];
  memset(&p, 0, sizeof p);
  p.kernel = gn->cutlass - 1;
  p.mode = gn->cutlass_mode;
  p.splits = gn->cutlass_splits;
  p.m = a.m, p.n = a.n, p.k = a.k, p.ldx = a.ldx, p.ldw = a.ldw, p.ldy = a.ldy, p.ldr = a.ldr;
  p.dtype = a.dtype, p.epilogue = a.epilogue, p.num_sms = gemm_sms(c->g, d);
  if (tpg_cutlass_fill(&p, &a, tpg_tmap_encode_driver, NULL, &gn->args.gemm_cutlass, &cu, why, sizeof why)) {
    gn->args.gemm_cutlass.a = a; /* the plain view stays what the node holds */
    if (cu != CUDA_SUCCESS) return tpg_cu_fail(cu, __func__, "cuTensorMapEncodeTiled (CUTLASS GEMM)");
    return TPG_ARG_FAIL("node %s: CUTLASS kernel %s: %s", tpg_nctx_label(c), gn->kernel, why);
  }
  return TPG_SUCCESS;
}

/* Encodes a tensor map for the TMA GEMM kernels from the selector's recipe. */
static tpg_status encode_map(tpg_tmap *map, const tpg_tma_encode *e, int kdt, const void *base) {
  cuuint64_t dims[4] = {0, 0, 0, 0}, strides[3] = {0, 0, 0};
  cuuint32_t box[4] = {0, 0, 0, 0}, es[4] = {1, 1, 1, 1};
  for (int i = 0; i < e->rank; i++) {
    dims[i] = e->dims[i];
    box[i] = e->box[i];
    if (i < 3) strides[i] = e->strides[i];
  }
  TPG_CU(cuTensorMapEncodeTiled((CUtensorMap *)map,
                                kdt == TPG_KDT_BF16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16,
                                (cuuint32_t)e->rank, (void *)base, dims, strides, box, es,
                                CU_TENSOR_MAP_INTERLEAVE_NONE,
                                e->swizzle == 64 ? CU_TENSOR_MAP_SWIZZLE_64B : CU_TENSOR_MAP_SWIZZLE_128B,
                                CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE));
  return TPG_SUCCESS;
}

/* The one writer of the node's pointer fields (fill and patch). */
static tpg_status set_ptrs(const tpg_nctx *c) {
  const tpg_gemm_desc *d = &c->n->u.gemm;
  tpg_gnode *gn = c->gn;
  tpg_gemm_args *a = gemm_args(gn);
  a->x = TPG_VPTR(c, d->x);
  a->w = TPG_VPTR(c, d->w);
  a->y = TPG_VPTR(c, d->y);
  a->bias = TPG_VPTR(c, d->bias);
  a->residual = TPG_VPTR(c, d->residual);
  a->y_ssq = (float *)TPG_VPTR(c, d->y_ssq);
  a->x_ssq = (const float *)TPG_VPTR(c, d->x_norm.ssq);
  a->x_norm_w = TPG_VPTR(c, d->x_norm.weight);
  a->workspace = (void *)(uintptr_t)gn->res.workspace;
  if (gn->cutlass) return cutlass_block(c);
  if (!gn->tma) return TPG_SUCCESS;
  /* the maps hold x's, w's and y's base addresses */
  TPG_TRY(encode_map(&gn->args.gemm_tma.tx, &gn->xe, a->dtype, a->x));
  TPG_TRY(encode_map(&gn->args.gemm_tma.tw, &gn->we, a->dtype, a->w));
  tpg_tma_encode ye;
  tpg_gemm_y_map(d->m, d->n, a->ldy, &ye);
  return encode_map(&gn->args.gemm_tma.ty, &ye, a->dtype, a->y);
}

/* The argument view but for its pointers. */
static void fill_view(const tpg_nctx *c, const tpg_kernel_launch *l) {
  const tpg_gemm_desc *d = &c->n->u.gemm;
  tpg_gemm_args *a = gemm_args(c->gn);
  a->m = d->m;
  a->n = d->n;
  a->k = d->k;
  a->ldx = d->k;
  a->ldw = d->k;
  a->ldy = d->n;
  a->ldr = d->n;
  a->dtype = d->dtype == TPG_F16 ? TPG_KDT_F16 : TPG_KDT_BF16;
  a->epilogue = (int32_t)d->epilogue;
  a->split_k = l->split_k;
  a->x_norm_eps = d->x_norm.eps;
  c->gn->kernel = l->kernel;
}

/* The kernel node's parameters: function, launch shape, cluster. */
static tpg_status fill_kernel(const tpg_nctx *c, const tpg_kernel_launch *l) {
  tpg_gnode *gn = c->gn;
  CUfunction f;
  TPG_TRY(tpg_kernel_function(l->kernel, l->smem_bytes, &f));
  tpg_kernel_launch_cluster(l, gn->cluster); /* "_kc<S>" and CUTLASS: a launch-time cluster */
  memset(&gn->kp, 0, sizeof gn->kp);
  gn->kp.func = f;
  gn->kp.gridDimX = l->grid[0];
  gn->kp.gridDimY = l->grid[1];
  gn->kp.gridDimZ = l->grid[2];
  gn->kp.blockDimX = l->block[0];
  gn->kp.blockDimY = l->block[1];
  gn->kp.blockDimZ = l->block[2];
  gn->kp.sharedMemBytes = l->smem_bytes;
  tpg_kernel_params(&gn->kp, gn->kparams, &gn->args); /* every block starts the union */
  return TPG_SUCCESS;
}

/* A kernel that keeps state past its counters (workspace_private), or whose
 * counters are not whole 256-byte blocks, got a lane of its own at creation
 * (graphbuild/workspace.c), sized and aligned for the kernel prepare chose:
 * fill (an update, another pick) may only run that same need there. */
static tpg_status own_lane_kept(const tpg_nctx *c, const tpg_kernel_launch *l) {
  const tpg_gnode *gn = c->gn;
  const size_t zeroed = l->workspace_zeroed < l->workspace_bytes ? l->workspace_zeroed : l->workspace_bytes;
  if (!l->workspace_bytes || !(l->workspace_private || zeroed % 256 != 0)) return TPG_SUCCESS;
  if (gn->res.alone && l->workspace_bytes == gn->res.need && zeroed == gn->res.need_zeroed &&
      l->workspace_private == gn->res.need_private)
    return TPG_SUCCESS;
  return TPG_ARG_FAIL("node %s: its kernel keeps state in its workspace (%zu bytes, %zu of them counters%s), which "
                      "needs the lane placed for it at creation (%zu bytes, %zu counters%s) (a shape change needs a "
                      "new graph)", tpg_nctx_label(c), l->workspace_bytes, zeroed,
                      l->workspace_private ? ", private" : "", gn->res.need, gn->res.need_zeroed,
                      gn->res.alone ? "" : ", shared");
}

static tpg_status fill(const tpg_nctx *c) {
  tpg_gnode *gn = c->gn;
  tpg_kernel_launch l;
  memset(&gn->args, 0, sizeof gn->args);
  TPG_TRY(pick(c, 0, &l, &gn->xe, &gn->we));
  gn->tma = gn->xe.rank > 0;
  gn->cutlass = l.cutlass;
  gn->cutlass_mode = l.cutlass_mode;
  gn->cutlass_splits = l.cutlass_splits;
  if (l.workspace_bytes > tpg_ws_room(gn, l.workspace_zeroed))
    return TPG_ARG_FAIL("node %s: needs %zu bytes of workspace (%zu of them counters), its place at creation holds "
                        "%zu and %zu (a shape change needs a new graph)", tpg_nctx_label(c), l.workspace_bytes,
                        l.workspace_zeroed, gn->res.zero_cap, gn->res.tail_cap);
  TPG_TRY(own_lane_kept(c, &l));
  gn->res.workspace = l.workspace_bytes ? gn->res.at - l.workspace_zeroed : 0;
  fill_view(c, &l);
  if (l.family == TPG_GEMM_FAMILY_CUBLASLT) {
    const tpg_gemm_problem p = problem_of(c);
    TPG_TRY(tpg_gemm_lt_fill(c, &p, &l));
  } else {
    tpg_gemm_lt_release(gn); /* a cuBLASLt plan of an earlier fill (update) */
    TPG_TRY(fill_kernel(c, &l));
  }
  return set_ptrs(c);
}

static tpg_status add(const tpg_nctx *c, CUgraph graph, const tpg_deps *deps) {
  if (tpg_gemm_lt_node(c->gn)) return tpg_gemm_lt_add(c, graph, deps);
  /* A decode GEMV behind a programmatic edge may prefetch W (materialize.c). */
  if (deps->nprog) gemm_args(c->gn)->pdl_prefetch = deps->pdl_prefetch;
  TPG_TRY(tpg_add_kernel_node(c, graph, deps, &c->gn->kp, "cuGraphAddKernelNode"));
  /* "_kc<S>" (the kernel's K ranges are the CTAs of a launch-time cluster)
   * and the CUTLASS kernels: the cluster shape as a node attribute */
  return c->gn->cluster[0] ? tpg_node_set_cluster(c, c->gn->cluster) : TPG_SUCCESS;
}

static tpg_status run_eager(const tpg_nctx *c, CUstream stream) {
  if (tpg_gemm_lt_node(c->gn)) return tpg_gemm_lt_run(c, stream);
  return c->gn->cluster[0] ? tpg_launch_params_ex(c, &c->gn->kp, c->gn->cluster, stream)
                           : tpg_launch_params(&c->gn->kp, stream);
}

static tpg_status patch(const tpg_nctx *c) {
  TPG_TRY(set_ptrs(c));
  if (c->g->mode == TPG_MODE_EAGER) return TPG_SUCCESS; /* the next launch reads the patched copy */
  if (tpg_gemm_lt_node(c->gn)) return tpg_gemm_lt_patch(c);
  TPG_CU(cuGraphExecKernelNodeSetParams(c->g->exec, c->gn->cu[0], &c->gn->kp));
  return TPG_SUCCESS;
}

/* The kernel may change (its exec setter takes another function), its
 * cluster attribute may not; a GEMV's PDL prefetch is set when the node is
 * added, so it must agree too. A cuBLASLt node is a child graph whose
 * kernels and their number follow its M (the algorithm is chosen per
 * shape): never retargeted, nor an exec node of ours to one of its. */
static int retarget(const tpg_node_rec *a, const tpg_gnode *ga, const tpg_node_rec *b, const tpg_gnode *gb) {
  (void)a, (void)b;
  if (tpg_gemm_lt_node(ga) || tpg_gemm_lt_node(gb)) return 0;
  return memcmp(ga->cluster, gb->cluster, sizeof ga->cluster) == 0 &&
         gemm_args((tpg_gnode *)ga)->pdl_prefetch == gemm_args((tpg_gnode *)gb)->pdl_prefetch;
}

/* Our kernels and CUTLASS's wait in every block (griddepcontrol): both ends
 * of a programmatic edge. A cuBLASLt child graph is neither. */
static unsigned pdl(const tpg_gnode *gn) { return tpg_gemm_lt_node(gn) ? 0u : TPG_PDL_PRIMARY | TPG_PDL_SECONDARY; }

/* A GEMM counts as a kernel node whichever family runs it (a cuBLASLt one
 * is a child graph of cuBLASLt's kernels), and by its family. */
static void count(const tpg_gnode *gn, tpg_graph_info *info) {
  info->nodes++;
  info->kernel_nodes++;
  if (tpg_gemm_lt_node(gn)) info->gemm_cublaslt_nodes++;
  else if (gn->cutlass) info->gemm_cutlass_nodes++;
  else info->gemm_ours_nodes++;
}

/* The workspace is the graph's (or its set's): only the cuBLASLt plan. */
static void release(tpg_graph *g, tpg_gnode *gn) {
  (void)g;
  tpg_gemm_lt_release(gn);
}

const tpg_kind_ops tpg_kind_gemm = {
    .name = "gemm",
    .dot_shape = "box",
    .check = check,
    .views = views,
    .dot = dot,
    .prepare = prepare,
    .fill = fill,
    .add = add,
    .run_eager = run_eager,
    .patch = patch,
    .retarget = retarget,
    .pdl = pdl,
    .count = count,
    .release = release,
};
