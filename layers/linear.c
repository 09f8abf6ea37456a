/* linear.c - one tensor-parallel linear layer added to a caller's plan.
 *
 * tpg_plan_mlp owns its plan; this adds to the caller's, on slots the caller
 * declared, so engines compose their own blocks. The decisions:
 * - Everything is checked before the first node is added, and a failure
 *   after that (out of memory) drops what was added: a call either adds the
 *   whole layer or leaves the plan as it was (tpg_plan_checkpoint /
 *   tpg_plan_rollback). Only the public API is used (layers/ sits above
 *   graphbuild/), so views are checked here through tpg_plan_get_slot_info.
 * - ROW adds bias and residual once, in rank 0's GEMM epilogue, before the
 *   all-reduce (the reduction of the other ranks' plain partials then is the
 *   finished output), as tpg_plan_mlp does.
 * - COLUMN with gather: NCCL's all-gather concatenates rank blocks,
 *   [R][T][F]; the layer's output is [T][R*F]. For T = 1 the two agree, so
 *   the all-gather writes y in place (2 nodes). For T > 1 it writes the
 *   caller's work buffer and one concat kernel node lays it out in y (3
 *   nodes, the concat being one node deep; see materialize.c for why not R
 *   strided memcpy nodes).
 * - Uneven splits are refused with the rule, as tpg_plan_mlp does: the GEMM
 *   kernels need 16-byte rows, and ranks of unequal parts would need
 *   all-gatherv, which NCCL graphs do not have as one call.
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "lib/device.h"
#include "lib/internal.h"

/* A view of `need` elements of `dtype` in device memory, `align`-byte
 * aligned; messages as the node builders word them, from `fn`. */
static tpg_status check_view(const tpg_plan *p, const char *fn, const char *what, tpg_view v, size_t need,
                             size_t align, tpg_dtype dtype) {
  static const char *nm[] = {"f32", "f16", "bf16"};
  tpg_slot_info si;
  int nslots = 0;
  if (tpg_plan_get_slot_info(p, v.slot, &si, sizeof si) != TPG_SUCCESS) {
    tpg_plan_get_stats(p, NULL, &nslots, NULL);
    return tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn, "%s.slot is %u: not a slot of this plan (expected 1..%d)", what,
                   v.slot, nslots);
  }
  if (v.reserved_ != 0)
    return tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn, "%s.reserved_ is %u: expected 0 (a view is {slot, 0, offset})", what,
                   v.reserved_);
  const size_t es = tpg_dtype_size(si.dtype);
  if (align > 1 && (v.offset * es) % align != 0)
    return tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn,
                   "%s: offset %llu of slot \"%s\" is not %zu-byte aligned (expected a multiple of %zu elements)", what,
                   (unsigned long long)v.offset, si.name, align, align / es);
  if (v.offset > si.count || need > si.count - v.offset)
    return tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn,
                   "%s: elements [%llu, %llu + %zu) fall outside slot \"%s\" (%zu elements)", what,
                   (unsigned long long)v.offset, (unsigned long long)v.offset, need, si.name, si.count);
  if (si.dtype != dtype)
    return tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn, "%s: slot \"%s\" holds %s: expected %s (dtype mismatch)", what,
                   si.name, nm[si.dtype], nm[dtype]);
  if (si.where == TPG_MEM_HOST)
    return tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn, "%s: slot \"%s\" is host memory: expected a device slot", what,
                   si.name);
  return TPG_SUCCESS;
}

/* Sizes of the descs before the folded norm's fields (tpgraph 0.3): such a
 * caller's desc is read as this version's with no fold (in_desc, in_norm). */
#define TPG_LINEAR_DESC_V3_SIZE offsetof(tpg_linear_desc, x_norm)
#define TPG_LINEAR_NORM_V3_SIZE offsetof(tpg_linear_norm, ssq)

static const tpg_linear_desc *in_desc(const tpg_linear_desc *d, tpg_linear_desc *buf) {
  if (!d || d->size != TPG_LINEAR_DESC_V3_SIZE) return d;
  const tpg_linear_desc init = TPG_LINEAR_DESC_INIT;
  *buf = init;
  memcpy(buf, d, TPG_LINEAR_DESC_V3_SIZE);
  buf->size = sizeof *buf;
  return buf;
}

static const tpg_linear_norm *in_norm(const tpg_linear_norm *e, tpg_linear_norm *buf) {
  if (!e || e->size != TPG_LINEAR_NORM_V3_SIZE) return e;
  const tpg_linear_norm init = TPG_LINEAR_NORM_INIT;
  *buf = init;
  memcpy(buf, e, TPG_LINEAR_NORM_V3_SIZE);
  buf->size = sizeof *buf;
  return buf;
}

static tpg_view at(tpg_view v, uint64_t off) {
  v.offset += off;
  return v;
}

/* The desc's scalar fields (shared with tpg_linear_shard); F: the rank's part
 * of the split dimension. Messages come from `fn`. */
static tpg_status check_shape(const tpg_linear_desc *d, const char *fn, size_t *part) {
#define ARG(cond, ...) \
  do { if (!(cond)) return tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn, __VA_ARGS__); } while (0)
  ARG(d != NULL, "desc is NULL: expected a tpg_linear_desc (TPG_LINEAR_DESC_INIT)");
  ARG(d->size == sizeof(tpg_linear_desc), "desc->size is %zu: expected sizeof(tpg_linear_desc) = %zu (initialise "
      "with TPG_LINEAR_DESC_INIT; %zu, without the folded norm's fields, is read as no fold)", d->size,
      sizeof(tpg_linear_desc), (size_t)TPG_LINEAR_DESC_V3_SIZE);
  ARG(d->kind == TPG_LINEAR_COLUMN || d->kind == TPG_LINEAR_ROW,
      "desc->kind is %d: expected TPG_LINEAR_COLUMN or TPG_LINEAR_ROW", (int)d->kind);
  ARG(d->nranks >= 1 && d->nranks <= 4096, "desc->nranks is %d: expected 1..4096", d->nranks);
  ARG(d->rank >= 0 && d->rank < d->nranks, "desc->rank is %d: expected 0..%d (desc->nranks - 1)", d->rank,
      d->nranks - 1);
  ARG(d->tokens >= 1, "desc->tokens is %d: expected >= 1", d->tokens);
  ARG(d->dtype == TPG_BF16 || d->dtype == TPG_F16, "desc->dtype is %d: expected TPG_BF16 or TPG_F16",
      (int)d->dtype);
  ARG(d->activation >= TPG_ACT_NONE && d->activation < TPG_ACTIVATION_COUNT,
      "desc->activation is %d: expected TPG_ACT_NONE, _GELU, _SILU or _SWIGLU", (int)d->activation);
  ARG(d->algo == TPG_ALGO_AUTO || d->algo == TPG_ALGO_NCCL || d->algo == TPG_ALGO_ONESHOT ||
          d->algo == TPG_ALGO_TWOSHOT,
      "desc->algo is %d: expected TPG_ALGO_AUTO, _NCCL, _ONESHOT or _TWOSHOT", (int)d->algo);
  ARG(d->gather == 0 || d->gather == 1, "desc->gather is %d: expected 0 or 1", d->gather);
  ARG(d->in_features >= 8, "desc->in_features is %d: expected >= 8", d->in_features);
  ARG(d->out_features >= 8, "desc->out_features is %d: expected >= 8", d->out_features);
  const int col = d->kind == TPG_LINEAR_COLUMN;
  /* The split dimension: rows of W (out) for COLUMN, columns (in) for ROW. */
  const char *sname = col ? "out_features" : "in_features", *oname = col ? "in_features" : "out_features";
  const int split = col ? d->out_features : d->in_features, other = col ? d->in_features : d->out_features;
  ARG(split % d->nranks == 0,
      "desc->%s %d does not split evenly over %d ranks: the %s layer splits %s, and uneven tensor-parallel "
      "splits are not supported (pad the weight to a multiple of 8 * nranks)",
      sname, split, d->nranks, col ? "column-parallel" : "row-parallel", sname);
  ARG((split / d->nranks) % 8 == 0,
      "desc->%s / nranks = %d is not a multiple of 8 (16-byte rows): choose %s divisible by 8 * nranks = %d",
      sname, split / d->nranks, sname, 8 * d->nranks);
  ARG(other % 8 == 0, "desc->%s is %d: expected a multiple of 8 (16-byte rows)", oname, other);
  if (col) {
    ARG(d->algo != TPG_ALGO_ONESHOT && d->algo != TPG_ALGO_TWOSHOT,
        "desc->algo is TPG_ALGO_%s for a column-parallel layer: its only collective is an all-gather, which "
        "always uses NCCL (expected TPG_ALGO_AUTO or TPG_ALGO_NCCL)", d->algo == TPG_ALGO_ONESHOT ? "ONESHOT" : "TWOSHOT");
  } else {
    ARG(d->activation == TPG_ACT_NONE,
        "desc->activation is %d for a row-parallel layer: expected TPG_ACT_NONE (an activation of a sum cannot run "
        "on the per-rank partials; activate after the layer)", (int)d->activation);
    ARG(d->gather == 0, "desc->gather is 1 for a row-parallel layer: its all-reduce already gives every rank the "
        "full output (expected 0)");
  }
  *part = (size_t)split / (size_t)d->nranks;
#undef ARG
  return TPG_SUCCESS;
}

/* [a, a + na) and [b, b + nb) of the same slot do not meet. */
static int disjoint(tpg_view a, size_t na, tpg_view b, size_t nb) {
  return a.slot != b.slot || a.offset + na <= b.offset || b.offset + nb <= a.offset;
}

static tpg_status name_node(tpg_plan *p, const tpg_linear_desc *d, tpg_node n, const char *what) {
  if (!d->name) return TPG_SUCCESS;
  char nm[128];
  snprintf(nm, sizeof nm, "%.100s.%s", d->name, what);
  return tpg_plan_set_node_name(p, n, nm);
}

static tpg_status add_nodes(tpg_plan *p, const tpg_linear_desc *d, size_t F, const tpg_node *deps, int ndeps,
                            tpg_node *last) {
  const int col = d->kind == TPG_LINEAR_COLUMN, R = d->nranks;
  const size_t T = (size_t)d->tokens, out = (size_t)d->out_features;
  tpg_gemm_desc g = TPG_GEMM_DESC_INIT;
  g.m = d->tokens;
  g.n = col ? (int)F : d->out_features;
  g.k = col ? d->in_features : (int)F;
  g.dtype = d->dtype;
  g.x = d->x;
  g.w = d->w;
  g.y = d->y;
  g.x_norm = d->x_norm;
  tpg_node n;
  if (col) {
    static const tpg_epilogue epi[TPG_ACTIVATION_COUNT] = {TPG_EPILOGUE_NONE, TPG_EPILOGUE_BIAS_GELU,
                                                           TPG_EPILOGUE_BIAS_SILU, TPG_EPILOGUE_SWIGLU};
    g.epilogue = epi[d->activation];
    if (d->activation == TPG_ACT_NONE && d->bias.slot) g.epilogue = TPG_EPILOGUE_BIAS;
    g.bias = d->bias;
    const int gathered = d->gather && R > 1;
    if (gathered) g.y = T == 1 ? at(d->y, (uint64_t)d->rank * F) : at(d->work, (uint64_t)d->rank * T * F);
    TPG_TRY(tpg_plan_add_gemm(p, &g, deps, ndeps, &n));
    TPG_TRY(name_node(p, d, n, "gemm"));
    if (gathered) {
      tpg_collective_desc c = TPG_COLLECTIVE_DESC_INIT;
      c.kind = TPG_ALL_GATHER;
      c.send = g.y;              /* in place: send = recv + rank * count */
      c.recv = T == 1 ? d->y : d->work;
      c.count = T * F;
      c.algo = d->algo;
      TPG_TRY(tpg_plan_add_collective(p, &c, &n, 1, &n));
      TPG_TRY(name_node(p, d, n, "all_gather"));
      if (T > 1) {
        TPG_TRY(tpg_plan_add_concat_cols(p, d->y, d->work, R, d->tokens, (int)F, &n, 1, &n));
        TPG_TRY(name_node(p, d, n, "concat"));
      }
    }
  } else {
    /* Rank 0 (or every rank when nothing is summed) adds bias and residual. */
    if (d->rank == 0 || R == 1) {
      g.bias = d->bias;
      g.residual = d->residual;
      g.epilogue = d->residual.slot ? TPG_EPILOGUE_RESIDUAL : d->bias.slot ? TPG_EPILOGUE_BIAS : TPG_EPILOGUE_NONE;
    }
    TPG_TRY(tpg_plan_add_gemm(p, &g, deps, ndeps, &n));
    TPG_TRY(name_node(p, d, n, "gemm"));
    if (R > 1) {
      tpg_collective_desc c = TPG_COLLECTIVE_DESC_INIT;
      c.kind = TPG_ALL_REDUCE;
      c.send = d->y;
      c.recv = d->y;
      c.count = T * out;
      c.algo = d->algo;
      TPG_TRY(tpg_plan_add_collective(p, &c, &n, 1, &n));
      TPG_TRY(name_node(p, d, n, "all_reduce"));
    }
  }
  *last = n;
  return TPG_SUCCESS;
}

static tpg_status add_linear(tpg_plan *p, const tpg_linear_desc *d, const tpg_node *deps, int ndeps,
                             tpg_node *out) {
  const char *fn = "tpg_plan_add_linear";
  if (!p) return tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn, "plan is NULL: expected a tpg_plan");
  tpg_plan_mark before;
  if (tpg_plan_checkpoint(p, &before) != TPG_SUCCESS)
    return tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn, "plan is not a live tpg_plan (destroyed or corrupt handle)");
  size_t F;
  TPG_TRY(check_shape(d, fn, &F));
  const int col = d->kind == TPG_LINEAR_COLUMN, R = d->nranks;
  const int swiglu = d->activation == TPG_ACT_SWIGLU;
  const size_t T = (size_t)d->tokens, in = (size_t)d->in_features, o = (size_t)d->out_features;
  /* Element counts of every view, as the header states them. */
  const size_t nx = T * (col ? in : F), nw = col ? (swiglu ? 2 : 1) * F * in : o * F;
  const size_t nb = col ? (swiglu ? 2 : 1) * F : o, ny = col && !d->gather ? T * F : T * o;
  const int need_work = col && d->gather && R > 1 && T > 1;
  TPG_TRY(check_view(p, fn, "desc->x", d->x, nx, 16, d->dtype));
  TPG_TRY(check_view(p, fn, "desc->w", d->w, nw, 16, d->dtype));
  TPG_TRY(check_view(p, fn, "desc->y", d->y, ny, 16, d->dtype));
  if (col && (d->activation == TPG_ACT_GELU || d->activation == TPG_ACT_SILU) && !d->bias.slot)
    return tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn,
                   "desc->bias.slot is 0 with desc->activation %s: the GeLU and SiLU epilogues take a bias "
                   "(declare a zero bias slot if the model has none)",
                   d->activation == TPG_ACT_GELU ? "TPG_ACT_GELU" : "TPG_ACT_SILU");
  if (d->bias.slot) TPG_TRY(check_view(p, fn, "desc->bias", d->bias, nb, 16, d->dtype));
  if (col && d->residual.slot)
    return tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn,
                   "desc->residual.slot is %u for a column-parallel layer: only TPG_LINEAR_ROW adds a residual "
                   "(expected 0)", d->residual.slot);
  if (d->residual.slot) {
    TPG_TRY(check_view(p, fn, "desc->residual", d->residual, T * o, 16, d->dtype));
    if (!(d->residual.slot == d->y.slot && d->residual.offset == d->y.offset) &&
        !disjoint(d->residual, T * o, d->y, ny))
      return tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn,
                     "desc->residual overlaps desc->y without being the same range: expected exactly y (in place) "
                     "or a disjoint range");
  }
  if (!disjoint(d->x, nx, d->y, ny))
    return tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn,
                   "desc->y overlaps desc->x in slot %u: a linear layer cannot run in place (expected disjoint "
                   "ranges)", d->x.slot);
  if (d->x_norm.ssq.slot && (!col && R > 1))
    return tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn,
                   "desc->x_norm.ssq is set for a row-parallel layer over %d ranks: a folded norm needs whole rows "
                   "of x (a column-parallel layer, or one rank)", R);
  if (need_work) {
    if (!d->work.slot)
      return tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn,
                     "desc->work.slot is 0: a gathered column-parallel layer over %d ranks with %zu tokens needs a "
                     "work view of tokens * out_features = %zu elements (the all-gather's rank-major buffer; a "
                     "TPG_MEM_SCRATCH slot is the natural choice)", R, T, T * o);
    TPG_TRY(check_view(p, fn, "desc->work", d->work, T * o, 16, d->dtype));
    if (!disjoint(d->work, T * o, d->x, nx) || !disjoint(d->work, T * o, d->y, ny))
      return tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn,
                     "desc->work overlaps desc->x or desc->y: expected its own range");
  }
  if (d->name)
    if (!d->name[0] || strlen(d->name) > 100)
      return tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn, "desc->name is %s: expected NULL or 1..100 characters",
                     d->name[0] ? "longer than 100 characters" : "empty");

  tpg_node last = 0;
  tpg_status st = add_nodes(p, d, F, deps, ndeps, &last);
  /* With a collective: its graph then refuses to run without a comm of R
   * ranks (and a plan sharded for another count refuses this layer). */
  if (st == TPG_SUCCESS && R > 1 && (!col || d->gather)) st = tpg_plan_set_ranks(p, R);
  if (st != TPG_SUCCESS) {
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", tpg_last_error());
    tpg_plan_rollback(p, before);
    const char *rest = strstr(msg, ": "); /* the inner call's message, under this call's name */
    return tpg_err(st, fn, "%s", rest ? rest + 2 : msg);
  }
  *out = last;
  return TPG_SUCCESS;
}

static tpg_status plan_add_linear(tpg_plan *p, const tpg_linear_desc *d, const tpg_node *deps, int ndeps,
                                  tpg_node *out) {
  tpg_node node = 0; /* out may alias a dep: written last */
  tpg_status st = add_linear(p, d, deps, ndeps, &node);
  if (out) *out = st == TPG_SUCCESS ? node : 0;
  return st;
}

tpg_status tpg_plan_add_linear(tpg_plan *p, const tpg_linear_desc *d, const tpg_node *deps, int ndeps,
                               tpg_node *out) {
  tpg_err_clear();
  tpg_linear_desc buf;
  return tpg_err_public(plan_add_linear(p, in_desc(d, &buf), deps, ndeps, out), __func__);
}

/* ---- a ROW layer whose all-reduce finishes the block ------------------------ */

/* A view of the layer: its name and range, in this order. */
typedef struct nview { const char *name; tpg_view v; size_t n; } nview;
enum { NV_X, NV_W, NV_Y, NV_BIAS, NV_RES, NV_PART, NV_ROUT, NV_NORM, NV_SSQ, NV_COUNT };

/* A folded norm (norm->ssq): one rank, few rows, h kept, the norm named
 * for the next linear, and no y or partial written. */
static tpg_status check_fold(const tpg_plan *p, const char *fn, const tpg_linear_desc *d, const tpg_linear_norm *e,
                             const nview *v) {
#define ARG(cond, ...) \
  do { if (!(cond)) return tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn, __VA_ARGS__); } while (0)
  ARG(d->nranks == 1, "norm->ssq is set with desc->nranks %d: a folded norm runs on one rank (the all-reduce's "
      "epilogue applies it on several)", d->nranks);
  ARG(d->tokens <= TPG_NORM_FOLD_MAX_ROWS, "norm->ssq is set with desc->tokens %d: a folded norm serves at most %d "
      "rows", d->tokens, TPG_NORM_FOLD_MAX_ROWS);
  ARG(e->residual_out.slot, "norm->residual_out.slot is 0 with norm->ssq set: the next linear reads h from it");
  ARG(e->norm_weight.slot, "norm->norm_weight.slot is 0 with norm->ssq set: expected the norm the next linear folds");
  ARG(!d->y.slot, "desc->y.slot is %u with norm->ssq set: a folded norm writes no y (expected 0; the next linear "
      "reads residual_out with x_norm)", d->y.slot);
#undef ARG
  return check_view(p, fn, v[NV_SSQ].name, v[NV_SSQ].v, v[NV_SSQ].n, 4, TPG_F32);
}

/* The views of tpg_plan_add_linear_norm one by one (ranges, dtype, device
 * memory, 16-byte alignment: what the all-reduce's epilogue kernels read). */
static tpg_status check_norm_each(const tpg_plan *p, const char *fn, const tpg_linear_desc *d,
                                  const tpg_linear_norm *e, const nview *v, int nv) {
  const int fold = e->ssq.slot != 0;
  for (int i = 0; i < nv; i++) { /* x, w, y and partial are required (folded: x and w); the rest when set */
    const int need = i == NV_X || i == NV_W || (!fold && (i == NV_Y || i == NV_PART));
    if (i != NV_SSQ && (need || v[i].v.slot)) TPG_TRY(check_view(p, fn, v[i].name, v[i].v, v[i].n, 16, d->dtype));
  }
  if (fold) TPG_TRY(check_fold(p, fn, d, e, v));
  if (!(isfinite(e->norm_eps) && e->norm_eps >= 0.0f))
    return tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn, "norm->norm_eps is %g: expected a finite value >= 0",
                   (double)e->norm_eps);
  if (d->name && (!d->name[0] || strlen(d->name) > 100))
    return tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn, "desc->name is %s: expected NULL or 1..100 characters",
                   d->name[0] ? "longer than 100 characters" : "empty");
  return TPG_SUCCESS;
}

/* Which views may meet: partial meets nothing; residual_out is residual
 * itself or meets nothing; y meets none of the epilogue's inputs, x or w. */
static tpg_status check_norm_overlaps(const char *fn, const nview *v, int nv) {
  for (int a = 0; a < nv; a++)
    for (int b = a + 1; b < nv; b++) {
      if (!v[a].v.slot || !v[b].v.slot) continue;
      const int read_a = a != NV_Y && a != NV_PART && a != NV_ROUT && a != NV_SSQ;
      const int read_b = b != NV_Y && b != NV_PART && b != NV_ROUT && b != NV_SSQ;
      const int in_place = a == NV_RES && b == NV_ROUT && v[a].v.slot == v[b].v.slot && v[a].v.offset == v[b].v.offset;
      if ((read_a && read_b) || in_place || disjoint(v[a].v, v[a].n, v[b].v, v[b].n)) continue;
      return tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn, "%s overlaps %s in slot %u: expected disjoint ranges%s",
                     v[b].name, v[a].name, v[a].v.slot,
                     b == NV_ROUT && a == NV_RES ? " (or exactly desc->residual, to update it in place)" : "");
    }
  return TPG_SUCCESS;
}

static tpg_status add_norm_nodes(tpg_plan *p, const tpg_linear_desc *d, const tpg_linear_norm *e, size_t F,
                                 const tpg_node *deps, int ndeps, tpg_node *last) {
  const size_t T = (size_t)d->tokens, o = (size_t)d->out_features;
  tpg_gemm_desc g = TPG_GEMM_DESC_INIT;
  g.m = d->tokens;
  g.n = d->out_features;
  g.k = (int)F;
  g.dtype = d->dtype;
  g.x = d->x;
  g.w = d->w;
  g.y = e->partial;
  g.x_norm = d->x_norm;
  tpg_node n;
  if (e->ssq.slot) { /* folded: the GEMM alone, h and its sums of squares */
    g.y = e->residual_out;
    g.bias = d->bias;
    g.residual = d->residual;
    g.epilogue = d->residual.slot ? TPG_EPILOGUE_RESIDUAL : d->bias.slot ? TPG_EPILOGUE_BIAS : TPG_EPILOGUE_NONE;
    g.y_ssq = e->ssq;
    TPG_TRY(tpg_plan_add_gemm(p, &g, deps, ndeps, &n));
    TPG_TRY(name_node(p, d, n, "gemm"));
    *last = n;
    return TPG_SUCCESS;
  }
  TPG_TRY(tpg_plan_add_gemm(p, &g, deps, ndeps, &n));
  TPG_TRY(name_node(p, d, n, "gemm"));
  tpg_collective_desc c = TPG_COLLECTIVE_DESC_INIT;
  c.kind = TPG_ALL_REDUCE;
  c.send = e->partial;
  c.recv = d->y;
  c.count = T * o;
  c.algo = d->algo;
  if (d->bias.slot || d->residual.slot || e->residual_out.slot || e->norm_weight.slot) {
    c.hidden = o;
    c.bias = d->bias;
    c.residual = d->residual;
    c.residual_out = e->residual_out;
    c.norm_weight = e->norm_weight;
    c.norm_eps = e->norm_eps;
  }
  TPG_TRY(tpg_plan_add_collective(p, &c, &n, 1, &n));
  TPG_TRY(name_node(p, d, n, "all_reduce"));
  *last = n;
  return TPG_SUCCESS;
}

static tpg_status add_linear_norm(tpg_plan *p, const tpg_linear_desc *d, const tpg_linear_norm *e,
                                  const tpg_node *deps, int ndeps, tpg_node *out) {
  const char *fn = "tpg_plan_add_linear_norm";
  if (!p) return tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn, "plan is NULL: expected a tpg_plan");
  tpg_plan_mark before;
  if (tpg_plan_checkpoint(p, &before) != TPG_SUCCESS)
    return tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn, "plan is not a live tpg_plan (destroyed or corrupt handle)");
  size_t F;
  TPG_TRY(check_shape(d, fn, &F));
  if (d->kind != TPG_LINEAR_ROW)
    return tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn, "desc->kind is TPG_LINEAR_COLUMN: expected TPG_LINEAR_ROW (only a "
                   "row-parallel layer ends in an all-reduce)");
  if (!e)
    return tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn, "norm is NULL: expected a tpg_linear_norm (TPG_LINEAR_NORM_INIT)");
  if (e->size != sizeof *e)
    return tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn, "norm->size is %zu: expected sizeof(tpg_linear_norm) = %zu "
                   "(initialise with TPG_LINEAR_NORM_INIT; %zu, without ssq, is read as no fold)", e->size, sizeof *e,
                   (size_t)TPG_LINEAR_NORM_V3_SIZE);
  const size_t T = (size_t)d->tokens, o = (size_t)d->out_features;
  const nview v[NV_COUNT] = {{"desc->x", d->x, T * F},           {"desc->w", d->w, o * F},
                      {"desc->y", d->y, T * o},           {"desc->bias", d->bias, o},
                      {"desc->residual", d->residual, T * o}, {"norm->partial", e->partial, T * o},
                      {"norm->residual_out", e->residual_out, T * o}, {"norm->norm_weight", e->norm_weight, o},
                      {"norm->ssq", e->ssq, T * TPG_NORM_FOLD_GROUPS(o)}};
  TPG_TRY(check_norm_each(p, fn, d, e, v, NV_COUNT));
  TPG_TRY(check_norm_overlaps(fn, v, NV_COUNT));
  tpg_node last = 0;
  tpg_status st = add_norm_nodes(p, d, e, F, deps, ndeps, &last);
  if (st == TPG_SUCCESS && d->nranks > 1) st = tpg_plan_set_ranks(p, d->nranks);
  if (st != TPG_SUCCESS) {
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", tpg_last_error());
    tpg_plan_rollback(p, before);
    const char *rest = strstr(msg, ": ");
    return tpg_err(st, fn, "%s", rest ? rest + 2 : msg);
  }
  *out = last;
  return TPG_SUCCESS;
}

tpg_status tpg_plan_add_linear_norm(tpg_plan *p, const tpg_linear_desc *d, const tpg_linear_norm *e,
                                    const tpg_node *deps, int ndeps, tpg_node *out) {
  tpg_err_clear();
  tpg_node node = 0; /* out may alias a dep: written last */
  tpg_linear_desc dbuf;
  tpg_linear_norm ebuf;
  tpg_status st = add_linear_norm(p, in_desc(d, &dbuf), in_norm(e, &ebuf), deps, ndeps, &node);
  if (out) *out = st == TPG_SUCCESS ? node : 0;
  return tpg_err_public(st, __func__);
}

/* ---- splitting a whole layer ---------------------------------------------- */

static tpg_status linear_shard(const tpg_linear_desc *d, int device, const tpg_linear_whole *w,
                               const tpg_linear_part *o, tpg_stream stream) {
  size_t F;
  TPG_TRY(check_shape(d, __func__, &F));
  TPG_CHECK_ARG(w != NULL, "whole is NULL: expected the layer's unsplit weights");
  TPG_CHECK_ARG(o != NULL, "out is NULL: expected this rank's buffers");
  const int col = d->kind == TPG_LINEAR_COLUMN, sw = d->activation == TPG_ACT_SWIGLU, bias = d->bias.slot != 0;
  TPG_CHECK_ARG(w->w != NULL, "whole->w is NULL: expected the [out, in] weight");
  TPG_CHECK_ARG(!sw || w->w_up, "whole->w_up is NULL: TPG_ACT_SWIGLU needs the up projection");
  TPG_CHECK_ARG(sw || !w->w_up, "whole->w_up is set without TPG_ACT_SWIGLU: expected NULL");
  TPG_CHECK_ARG(o->w != NULL, "out->w is NULL: expected this rank's weight buffer");
  if (bias) {
    TPG_CHECK_ARG(w->bias != NULL, "whole->bias is NULL but desc->bias.slot is set: expected the [out] bias");
    TPG_CHECK_ARG(!sw || w->bias_up, "whole->bias_up is NULL: a TPG_ACT_SWIGLU layer with a bias needs the up bias");
    TPG_CHECK_ARG(o->bias != NULL, "out->bias is NULL but desc->bias.slot is set: expected this rank's bias buffer");
  } else {
    TPG_CHECK_ARG(!w->bias && !w->bias_up, "whole->bias is set but desc->bias.slot is 0: expected NULL (or give "
                  "the layer a bias view)");
  }
  const size_t es = tpg_dtype_size(d->dtype), in = (size_t)d->in_features, out = (size_t)d->out_features;
  const size_t r0 = (size_t)d->rank * F;
  tpg_dev dev;
  TPG_TRY(tpg_dev_open(device, &dev));
  tpg_status st = tpg_dev_push(&dev);
  if (st != TPG_SUCCESS) {
    tpg_dev_close(&dev);
    return st;
  }
  CUstream s = (CUstream)stream;
  CUdeviceptr ow = (CUdeviceptr)(uintptr_t)o->w, ob = (CUdeviceptr)(uintptr_t)o->bias;
  if (col) {
    /* Rows [r0, r0 + F) of W (and of Wu after them): contiguous. */
    TPG_CUGOTO(cuMemcpyAsync(ow, (CUdeviceptr)(uintptr_t)w->w + r0 * in * es, F * in * es, s), st, done);
    if (sw)
      TPG_CUGOTO(cuMemcpyAsync(ow + F * in * es, (CUdeviceptr)(uintptr_t)w->w_up + r0 * in * es, F * in * es, s), st,
                 done);
    if (bias) {
      TPG_CUGOTO(cuMemcpyAsync(ob, (CUdeviceptr)(uintptr_t)w->bias + r0 * es, F * es, s), st, done);
      if (sw) TPG_CUGOTO(cuMemcpyAsync(ob + F * es, (CUdeviceptr)(uintptr_t)w->bias_up + r0 * es, F * es, s), st, done);
    }
  } else {
    /* Columns [r0, r0 + F) of W: a strided 2-D copy, out rows of F elements. */
    CUDA_MEMCPY2D c;
    memset(&c, 0, sizeof c);
    c.srcMemoryType = CU_MEMORYTYPE_DEVICE;
    c.srcDevice = (CUdeviceptr)(uintptr_t)w->w + r0 * es;
    c.srcPitch = in * es;
    c.dstMemoryType = CU_MEMORYTYPE_DEVICE;
    c.dstDevice = ow;
    c.dstPitch = F * es;
    c.WidthInBytes = F * es;
    c.Height = out;
    TPG_CUGOTO(cuMemcpy2DAsync(&c, s), st, done);
    if (bias) TPG_CUGOTO(cuMemcpyAsync(ob, (CUdeviceptr)(uintptr_t)w->bias, out * es, s), st, done);
  }
done:
  tpg_dev_pop();
  tpg_dev_close(&dev);
  return st;
}

tpg_status tpg_linear_shard(const tpg_linear_desc *d, int device, const tpg_linear_whole *w,
                            const tpg_linear_part *o, tpg_stream stream) {
  tpg_err_clear();
  tpg_linear_desc buf;
  return tpg_err_public(linear_shard(in_desc(d, &buf), device, w, o, stream), __func__);
}
