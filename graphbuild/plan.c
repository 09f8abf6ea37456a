/* plan.c - building and checking a plan on the CPU.
 *
 * Each add_* call checks its own arguments at once (the message names the
 * argument and the rule), so a bad call fails where it was made, not later at
 * graph creation. What needs the whole plan (cycles) is tpg_plan_validate's.
 */
#define _POSIX_C_SOURCE 200809L
#include "graphbuild/plan.h"

#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static atomic_uint g_plan_serial = 1;

#define TPG_MAX_NAME 128
#define TPG_MAX_NODES (1 << 24)
#define TPG_MAX_SLOTS (1 << 20)

static char *dup_str(const char *s) {
  size_t n = strlen(s) + 1;
  char *d = malloc(n);
  if (d) memcpy(d, s, n);
  return d;
}

const char *tpg_node_kind_name(tpg_node_kind k) {
  switch (k) {
    case TPG_NK_GEMM: return "gemm";
    case TPG_NK_AXPBY: return "axpby";
    case TPG_NK_MEMSET: return "memset";
    case TPG_NK_MEMCPY: return "memcpy";
    case TPG_NK_EMPTY: return "empty";
    case TPG_NK_COLLECTIVE: return "collective";
    case TPG_NK_CONCAT: return "concat_cols";
    default: return "?";
  }
}

static const char *coll_name(tpg_collective c) {
  switch (c) {
    case TPG_ALL_REDUCE: return "all_reduce";
    case TPG_ALL_GATHER: return "all_gather";
    case TPG_REDUCE_SCATTER: return "reduce_scatter";
    default: return "?";
  }
}

const char *tpg_node_label(const tpg_plan *p, int idx, char *buf, size_t cap) {
  const tpg_node_rec *n = &p->nodes[idx];
  if (n->name) snprintf(buf, cap, "%s", n->name);
  else if (n->kind == TPG_NK_COLLECTIVE) snprintf(buf, cap, "%s#%d", coll_name(n->u.coll.kind), idx);
  else snprintf(buf, cap, "%s#%d", tpg_node_kind_name(n->kind), idx);
  return buf;
}

tpg_status tpg_plan_check(const tpg_plan *p, const char *fn, const char *arg) {
  if (!p) return tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn, "%s is NULL: expected a tpg_plan", arg);
  if (p->magic != TPG_MAGIC_PLAN)
    return tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn, "%s is not a live tpg_plan (destroyed or corrupt handle)", arg);
  return TPG_SUCCESS;
}

tpg_status tpg_plan_create(tpg_plan **out) {
  tpg_err_clear();
  TPG_CHECK_ARG(out != NULL, "out is NULL: expected a tpg_plan * to set");
  *out = NULL;
  tpg_plan *p = calloc(1, sizeof *p);
  if (!p) return TPG_FAIL(TPG_ERROR_OUT_OF_MEMORY, "out of host memory");
  p->magic = TPG_MAGIC_PLAN;
  p->serial = atomic_fetch_add(&g_plan_serial, 1);
  if (p->serial == 0) p->serial = atomic_fetch_add(&g_plan_serial, 1);
  *out = p;
  return TPG_SUCCESS;
}

void tpg_plan_destroy(tpg_plan *p) {
  if (!p || p->magic != TPG_MAGIC_PLAN) return;
  for (int i = 0; i < p->nslots; i++) free(p->slots[i].name);
  for (int i = 0; i < p->nnodes; i++) {
    free(p->nodes[i].name);
    free(p->nodes[i].deps);
  }
  free(p->slots);
  free(p->nodes);
  p->magic = TPG_MAGIC_DEAD;
  free(p);
}

tpg_status tpg_plan_clone(const tpg_plan *src, tpg_plan **out) {
  *out = NULL;
  tpg_plan *p = calloc(1, sizeof *p);
  if (!p) return TPG_FAIL(TPG_ERROR_OUT_OF_MEMORY, "out of host memory");
  p->magic = TPG_MAGIC_PLAN;
  p->serial = src->serial;
  p->slots = calloc((size_t)(src->nslots ? src->nslots : 1), sizeof *p->slots);
  p->nodes = calloc((size_t)(src->nnodes ? src->nnodes : 1), sizeof *p->nodes);
  if (!p->slots || !p->nodes) goto oom;
  p->capslots = src->nslots ? src->nslots : 1;
  p->capnodes = src->nnodes ? src->nnodes : 1;
  for (int i = 0; i < src->nslots; i++) {
    p->slots[i] = src->slots[i];
    p->slots[i].name = dup_str(src->slots[i].name);
    p->nslots = i + 1;
    if (!p->slots[i].name) goto oom;
  }
  for (int i = 0; i < src->nnodes; i++) {
    const tpg_node_rec *s = &src->nodes[i];
    tpg_node_rec *d = &p->nodes[i];
    *d = *s;
    d->name = NULL;
    d->deps = NULL;
    p->nnodes = i + 1;
    if (s->name && !(d->name = dup_str(s->name))) goto oom;
    if (s->ndeps) {
      d->deps = malloc((size_t)s->ndeps * sizeof *d->deps);
      if (!d->deps) goto oom;
      memcpy(d->deps, s->deps, (size_t)s->ndeps * sizeof *d->deps);
    }
    d->capdeps = s->ndeps;
  }
  *out = p;
  return TPG_SUCCESS;
oom:
  tpg_plan_destroy(p);
  return TPG_FAIL(TPG_ERROR_OUT_OF_MEMORY, "out of host memory copying the plan");
}

/* ---- slots -------------------------------------------------------------- */

tpg_status tpg_plan_add_slot(tpg_plan *p, const char *name, tpg_dtype dtype, tpg_memory where, size_t count,
                             tpg_slot *out) {
  tpg_err_clear();
  if (out) *out = TPG_SLOT_NONE;
  TPG_TRY(tpg_plan_check(p, __func__, "plan"));
  TPG_CHECK_ARG(out != NULL, "out is NULL: expected a tpg_slot to set");
  TPG_CHECK_ARG(name != NULL && name[0], "name is NULL or empty: expected a slot name");
  TPG_CHECK_ARG(strlen(name) < TPG_MAX_NAME, "name is %zu bytes long: expected < %d", strlen(name), TPG_MAX_NAME);
  TPG_CHECK_ARG(tpg_dtype_size(dtype) != 0, "dtype is %d: expected TPG_F32, TPG_F16 or TPG_BF16", (int)dtype);
  TPG_CHECK_ARG(where == TPG_MEM_DEVICE || where == TPG_MEM_HOST || where == TPG_MEM_SCRATCH,
                "where is %d: expected TPG_MEM_DEVICE, TPG_MEM_HOST or TPG_MEM_SCRATCH", (int)where);
  size_t bytes;
  TPG_CHECK_ARG(count > 0, "count of slot \"%s\" is 0: expected >= 1 element", name);
  TPG_CHECK_ARG(tpg_mul_ok(count, tpg_dtype_size(dtype), &bytes) && bytes <= ((size_t)1 << 48),
                "count of slot \"%s\" is %zu elements: larger than any GPU memory", name, count);
  for (int i = 0; i < p->nslots; i++)
    TPG_CHECK_ARG(strcmp(p->slots[i].name, name) != 0, "name \"%s\" is already slot %d of this plan", name, i + 1);
  TPG_CHECK_ARG(p->nslots < TPG_MAX_SLOTS, "plan already has %d slots (the limit)", TPG_MAX_SLOTS);
  if (p->nslots == p->capslots) {
    int cap = p->capslots ? 2 * p->capslots : 16;
    tpg_slot_rec *s = realloc(p->slots, (size_t)cap * sizeof *s);
    if (!s) return TPG_FAIL(TPG_ERROR_OUT_OF_MEMORY, "out of host memory");
    p->slots = s;
    p->capslots = cap;
  }
  char *nm = dup_str(name);
  if (!nm) return TPG_FAIL(TPG_ERROR_OUT_OF_MEMORY, "out of host memory");
  p->slots[p->nslots] = (tpg_slot_rec){nm, dtype, where, count};
  p->nslots++;
  *out = (tpg_slot)p->nslots;
  return TPG_SUCCESS;
}

tpg_status tpg_plan_find_slot(const tpg_plan *p, const char *name, tpg_slot *out) {
  tpg_err_clear();
  if (out) *out = TPG_SLOT_NONE;
  TPG_TRY(tpg_plan_check(p, __func__, "plan"));
  TPG_CHECK_ARG(name != NULL, "name is NULL: expected a slot name");
  TPG_CHECK_ARG(out != NULL, "out is NULL: expected a tpg_slot to set");
  for (int i = 0; i < p->nslots; i++)
    if (strcmp(p->slots[i].name, name) == 0) {
      *out = (tpg_slot)(i + 1);
      return TPG_SUCCESS;
    }
  return TPG_ARG_FAIL("no slot named \"%s\" in this plan", name);
}

/* A view of `need` elements: the slot exists, the range fits, and the start is
 * `align` bytes aligned within the slot (buffers are checked at bind time). */
static tpg_status check_view(const tpg_plan *p, const char *fn, const char *what, tpg_view v, size_t need,
                             size_t align) {
  if (v.slot == TPG_SLOT_NONE || v.slot > (tpg_slot)p->nslots)
    return tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn, "%s.slot is %u: not a slot of this plan (expected 1..%d)", what,
                   v.slot, p->nslots);
  const tpg_slot_rec *s = &p->slots[v.slot - 1];
  if (align > 1 && (v.offset * tpg_dtype_size(s->dtype)) % align != 0)
    return tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn,
                   "%s: offset %llu of slot \"%s\" is not %zu-byte aligned (expected a multiple of %zu elements)", what,
                   (unsigned long long)v.offset, s->name, align, align / tpg_dtype_size(s->dtype));
  if (v.offset > s->count || need > s->count - v.offset)
    return tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn,
                   "%s: elements [%llu, %llu + %zu) fall outside slot \"%s\" (%zu elements)", what,
                   (unsigned long long)v.offset, (unsigned long long)v.offset, need, s->name, s->count);
  return TPG_SUCCESS;
}

static tpg_status check_dtype(const tpg_plan *p, const char *fn, const char *what, tpg_view v, tpg_dtype want) {
  const tpg_slot_rec *s = &p->slots[v.slot - 1];
  if (s->dtype != want) {
    static const char *nm[] = {"f32", "f16", "bf16"};
    return tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn, "%s: slot \"%s\" holds %s: expected %s (dtype mismatch)", what,
                   s->name, nm[s->dtype], nm[want]);
  }
  return TPG_SUCCESS;
}

static tpg_status check_device(const tpg_plan *p, const char *fn, const char *what, tpg_view v) {
  const tpg_slot_rec *s = &p->slots[v.slot - 1];
  if (s->where == TPG_MEM_HOST)
    return tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn, "%s: slot \"%s\" is host memory: expected a device slot", what,
                   s->name);
  return TPG_SUCCESS;
}

tpg_status tpg_plan_check_view(const tpg_plan *p, const char *fn, const char *what, tpg_view v, size_t need,
                               size_t align, tpg_dtype dtype) {
  TPG_TRY(check_view(p, fn, what, v, need, align));
  TPG_TRY(check_dtype(p, fn, what, v, dtype));
  return check_device(p, fn, what, v);
}

void tpg_plan_truncate(tpg_plan *p, int nnodes) {
  while (p->nnodes > nnodes) {
    p->nnodes--;
    free(p->nodes[p->nnodes].name);
    free(p->nodes[p->nnodes].deps);
  }
}

/* ---- nodes -------------------------------------------------------------- */

/* Index of a node handle of plan p, or -1. */
static int node_index(const tpg_plan *p, tpg_node n) {
  uint32_t serial = (uint32_t)(n >> 32);
  uint32_t idx1 = (uint32_t)(n & 0xffffffffu);
  if (serial != p->serial || idx1 == 0 || idx1 > (uint32_t)p->nnodes) return -1;
  return (int)idx1 - 1;
}

static tpg_status check_deps(const tpg_plan *p, const char *fn, const tpg_node *deps, int ndeps) {
  if (ndeps < 0) return tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn, "ndeps is %d: expected >= 0", ndeps);
  if (ndeps > 0 && !deps)
    return tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn, "deps is NULL but ndeps is %d: expected %d node handles", ndeps,
                   ndeps);
  for (int i = 0; i < ndeps; i++) {
    if (node_index(p, deps[i]) < 0) {
      uint32_t serial = (uint32_t)(deps[i] >> 32);
      if (serial != p->serial && serial != 0)
        return tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn, "deps[%d] is a node of another plan: expected a node of this plan",
                       i);
      return tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn, "deps[%d] (0x%llx) is not a node of this plan", i,
                     (unsigned long long)deps[i]);
    }
    for (int j = 0; j < i; j++)
      if (deps[j] == deps[i])
        return tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn, "deps[%d] repeats deps[%d]: expected each node once", i, j);
  }
  return TPG_SUCCESS;
}

static tpg_status push_node(tpg_plan *p, const char *fn, tpg_node_rec *rec, const tpg_node *deps, int ndeps,
                            tpg_node *out) {
  if (p->nnodes >= TPG_MAX_NODES)
    return tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn, "plan already has %d nodes (the limit)", TPG_MAX_NODES);
  if (p->nnodes == p->capnodes) {
    int cap = p->capnodes ? 2 * p->capnodes : 32;
    tpg_node_rec *n = realloc(p->nodes, (size_t)cap * sizeof *n);
    if (!n) return tpg_err(TPG_ERROR_OUT_OF_MEMORY, fn, "out of host memory");
    p->nodes = n;
    p->capnodes = cap;
  }
  rec->name = NULL;
  rec->deps = NULL;
  rec->ndeps = rec->capdeps = 0;
  if (ndeps > 0) {
    rec->deps = malloc((size_t)ndeps * sizeof *rec->deps);
    if (!rec->deps) return tpg_err(TPG_ERROR_OUT_OF_MEMORY, fn, "out of host memory");
    for (int i = 0; i < ndeps; i++) rec->deps[i] = node_index(p, deps[i]);
    rec->ndeps = rec->capdeps = ndeps;
  }
  p->nodes[p->nnodes] = *rec;
  p->nnodes++;
  if (out) *out = ((uint64_t)p->serial << 32) | (uint64_t)p->nnodes;
  return TPG_SUCCESS;
}

/* `out` may alias an element of `deps` (prev = add(prev) is natural), so
 * every add_* body writes a local and its public wrapper stores it last. */
#define TPG_NODE_PROLOGUE()                                            \
  tpg_err_clear();                                                     \
  TPG_TRY(tpg_plan_check(p, __func__, "plan"));                        \
  TPG_TRY(check_deps(p, __func__, deps, ndeps))

#define TPG_NODE_WRAPPER(call)                                         \
  do {                                                                 \
    tpg_node node_ = 0;                                                \
    tpg_status st_ = (call);                                           \
    if (out) *out = st_ == TPG_SUCCESS ? node_ : 0;                    \
    if (st_ != TPG_SUCCESS) tpg_err_rename(__func__);                  \
    return st_;                                                        \
  } while (0)

static tpg_status add_gemm_impl(tpg_plan *p, const tpg_gemm_desc *d, const tpg_node *deps, int ndeps, tpg_node *out) {
  TPG_NODE_PROLOGUE();
  TPG_CHECK_ARG(d != NULL, "desc is NULL: expected a tpg_gemm_desc (TPG_GEMM_DESC_INIT)");
  TPG_CHECK_ARG(d->size == sizeof(tpg_gemm_desc), "desc->size is %zu: expected sizeof(tpg_gemm_desc) = %zu",
                d->size, sizeof(tpg_gemm_desc));
  TPG_CHECK_ARG(d->dtype == TPG_BF16 || d->dtype == TPG_F16, "desc->dtype is %d: expected TPG_BF16 or TPG_F16",
                (int)d->dtype);
  TPG_CHECK_ARG(d->epilogue >= 0 && d->epilogue < TPG_EPILOGUE_COUNT, "desc->epilogue is %d: expected 0..%d",
                (int)d->epilogue, TPG_EPILOGUE_COUNT - 1);
  TPG_CHECK_ARG(d->m >= 1, "desc->m is %d: expected >= 1", d->m);
  TPG_CHECK_ARG(d->sm_reserve >= 0 && d->sm_reserve <= 256, "desc->sm_reserve is %d: expected 0..256 SMs",
                d->sm_reserve);
  TPG_CHECK_ARG(d->n >= 8 && d->n % 8 == 0, "desc->n is %d: expected a positive multiple of 8 (16-byte rows)", d->n);
  TPG_CHECK_ARG(d->k >= 8 && d->k % 8 == 0, "desc->k is %d: expected a positive multiple of 8 (16-byte rows)", d->k);
  size_t m = (size_t)d->m, n = (size_t)d->n, k = (size_t)d->k;
  int swiglu = d->epilogue == TPG_EPILOGUE_SWIGLU;
  size_t wrows = swiglu ? 2 * n : n;
  TPG_TRY(check_view(p, __func__, "desc->x", d->x, m * k, 16));
  TPG_TRY(check_dtype(p, __func__, "desc->x", d->x, d->dtype));
  TPG_TRY(check_device(p, __func__, "desc->x", d->x));
  TPG_TRY(check_view(p, __func__, "desc->w", d->w, wrows * k, 16));
  TPG_TRY(check_dtype(p, __func__, "desc->w", d->w, d->dtype));
  TPG_TRY(check_device(p, __func__, "desc->w", d->w));
  TPG_TRY(check_view(p, __func__, "desc->y", d->y, m * n, 16));
  TPG_TRY(check_dtype(p, __func__, "desc->y", d->y, d->epilogue == TPG_EPILOGUE_F32_PARTIAL ? TPG_F32 : d->dtype));
  TPG_TRY(check_device(p, __func__, "desc->y", d->y));
  int bias_needed = d->epilogue == TPG_EPILOGUE_BIAS || d->epilogue == TPG_EPILOGUE_BIAS_GELU ||
                    d->epilogue == TPG_EPILOGUE_BIAS_SILU;
  int bias_allowed = bias_needed || swiglu || d->epilogue == TPG_EPILOGUE_RESIDUAL;
  if (bias_needed)
    TPG_CHECK_ARG(d->bias.slot != TPG_SLOT_NONE, "desc->bias.slot is 0: epilogue %d needs a bias slot",
                  (int)d->epilogue);
  if (!bias_allowed)
    TPG_CHECK_ARG(d->bias.slot == TPG_SLOT_NONE, "desc->bias.slot is %u: epilogue %d takes no bias (expected 0)",
                  d->bias.slot, (int)d->epilogue);
  if (d->bias.slot != TPG_SLOT_NONE) {
    TPG_TRY(check_view(p, __func__, "desc->bias", d->bias, swiglu ? 2 * n : n, 16));
    TPG_TRY(check_dtype(p, __func__, "desc->bias", d->bias, d->dtype));
    TPG_TRY(check_device(p, __func__, "desc->bias", d->bias));
  }
  if (d->epilogue == TPG_EPILOGUE_RESIDUAL) {
    TPG_CHECK_ARG(d->residual.slot != TPG_SLOT_NONE, "desc->residual.slot is 0: TPG_EPILOGUE_RESIDUAL needs one");
    TPG_TRY(check_view(p, __func__, "desc->residual", d->residual, m * n, 16));
    TPG_TRY(check_dtype(p, __func__, "desc->residual", d->residual, d->dtype));
    TPG_TRY(check_device(p, __func__, "desc->residual", d->residual));
  } else {
    TPG_CHECK_ARG(d->residual.slot == TPG_SLOT_NONE,
                  "desc->residual.slot is %u: only TPG_EPILOGUE_RESIDUAL reads a residual (expected 0)",
                  d->residual.slot);
  }
  if (d->x.slot == d->y.slot)
    TPG_CHECK_ARG(d->x.offset + m * k <= d->y.offset || d->y.offset + m * n <= d->x.offset,
                  "desc->y overlaps desc->x in slot %u: a GEMM cannot run in place", d->x.slot);
  tpg_node_rec rec;
  memset(&rec, 0, sizeof rec);
  rec.kind = TPG_NK_GEMM;
  rec.u.gemm = *d;
  return push_node(p, __func__, &rec, deps, ndeps, out);
}

tpg_status tpg_plan_add_gemm(tpg_plan *p, const tpg_gemm_desc *d, const tpg_node *deps, int ndeps, tpg_node *out) {
  TPG_NODE_WRAPPER(add_gemm_impl(p, d, deps, ndeps, &node_));
}

static tpg_status add_axpby_impl(tpg_plan *p, tpg_view y, tpg_view x, size_t count, float alpha, float beta,
                              const tpg_node *deps, int ndeps, tpg_node *out) {
  TPG_NODE_PROLOGUE();
  TPG_CHECK_ARG(count > 0, "count is 0: expected >= 1 element");
  TPG_TRY(check_view(p, __func__, "y", y, count, 4));
  TPG_TRY(check_view(p, __func__, "x", x, count, 4));
  TPG_TRY(check_device(p, __func__, "y", y));
  TPG_TRY(check_device(p, __func__, "x", x));
  TPG_TRY(check_dtype(p, __func__, "x", x, p->slots[y.slot - 1].dtype));
  tpg_node_rec rec;
  memset(&rec, 0, sizeof rec);
  rec.kind = TPG_NK_AXPBY;
  rec.u.axpby.y = y;
  rec.u.axpby.x = x;
  rec.u.axpby.count = count;
  rec.u.axpby.alpha = alpha;
  rec.u.axpby.beta = beta;
  return push_node(p, __func__, &rec, deps, ndeps, out);
}

tpg_status tpg_plan_add_axpby(tpg_plan *p, tpg_view y, tpg_view x, size_t count, float alpha, float beta,
                              const tpg_node *deps, int ndeps, tpg_node *out) {
  TPG_NODE_WRAPPER(add_axpby_impl(p, y, x, count, alpha, beta, deps, ndeps, &node_));
}

static tpg_status add_memset_impl(tpg_plan *p, tpg_view dst, uint32_t value, size_t count, const tpg_node *deps,
                               int ndeps, tpg_node *out) {
  TPG_NODE_PROLOGUE();
  TPG_CHECK_ARG(count > 0, "count is 0: expected >= 1 element");
  TPG_TRY(check_view(p, __func__, "dst", dst, count, 1));
  TPG_TRY(check_device(p, __func__, "dst", dst));
  size_t es = tpg_dtype_size(p->slots[dst.slot - 1].dtype);
  TPG_CHECK_ARG(es == 4 || value <= 0xffffu, "value 0x%x does not fit the %zu-byte elements of slot \"%s\"", value,
                es, p->slots[dst.slot - 1].name);
  tpg_node_rec rec;
  memset(&rec, 0, sizeof rec);
  rec.kind = TPG_NK_MEMSET;
  rec.u.memset.dst = dst;
  rec.u.memset.value = value;
  rec.u.memset.count = count;
  return push_node(p, __func__, &rec, deps, ndeps, out);
}

tpg_status tpg_plan_add_memset(tpg_plan *p, tpg_view dst, uint32_t value, size_t count, const tpg_node *deps,
                               int ndeps, tpg_node *out) {
  TPG_NODE_WRAPPER(add_memset_impl(p, dst, value, count, deps, ndeps, &node_));
}

static tpg_status add_memcpy_impl(tpg_plan *p, tpg_view dst, tpg_view src, size_t count, const tpg_node *deps,
                               int ndeps, tpg_node *out) {
  TPG_NODE_PROLOGUE();
  TPG_CHECK_ARG(count > 0, "count is 0: expected >= 1 element");
  TPG_TRY(check_view(p, __func__, "dst", dst, count, 1));
  TPG_TRY(check_view(p, __func__, "src", src, count, 1));
  TPG_TRY(check_dtype(p, __func__, "src", src, p->slots[dst.slot - 1].dtype));
  TPG_CHECK_ARG(p->slots[dst.slot - 1].where != TPG_MEM_HOST || p->slots[src.slot - 1].where != TPG_MEM_HOST,
                "dst and src are both host slots: expected at least one device slot");
  if (dst.slot == src.slot)
    TPG_CHECK_ARG(dst.offset + count <= src.offset || src.offset + count <= dst.offset,
                  "dst and src overlap in slot \"%s\": expected disjoint ranges", p->slots[dst.slot - 1].name);
  tpg_node_rec rec;
  memset(&rec, 0, sizeof rec);
  rec.kind = TPG_NK_MEMCPY;
  rec.u.memcpy.dst = dst;
  rec.u.memcpy.src = src;
  rec.u.memcpy.count = count;
  return push_node(p, __func__, &rec, deps, ndeps, out);
}

tpg_status tpg_plan_add_memcpy(tpg_plan *p, tpg_view dst, tpg_view src, size_t count, const tpg_node *deps,
                               int ndeps, tpg_node *out) {
  TPG_NODE_WRAPPER(add_memcpy_impl(p, dst, src, count, deps, ndeps, &node_));
}

static tpg_status add_empty_impl(tpg_plan *p, const tpg_node *deps, int ndeps, tpg_node *out) {
  TPG_NODE_PROLOGUE();
  tpg_node_rec rec;
  memset(&rec, 0, sizeof rec);
  rec.kind = TPG_NK_EMPTY;
  return push_node(p, __func__, &rec, deps, ndeps, out);
}

tpg_status tpg_plan_add_empty(tpg_plan *p, const tpg_node *deps, int ndeps, tpg_node *out) {
  TPG_NODE_WRAPPER(add_empty_impl(p, deps, ndeps, &node_));
}

/* Two views of [offset, offset + n) overlap (same slot, ranges meet). */
static int views_overlap(tpg_view a, size_t na, tpg_view b, size_t nb) {
  return a.slot != TPG_SLOT_NONE && a.slot == b.slot && a.offset < b.offset + nb && b.offset < a.offset + na;
}

/* The all-reduce epilogue's rules (tpgraph.h, tpg_collective_desc). */
static tpg_status check_coll_epilogue(const tpg_plan *p, const char *fn, const tpg_collective_desc *d) {
  const int any = d->bias.slot || d->residual.slot || d->residual_out.slot || d->norm_weight.slot;
  if (!any) {
    if (d->hidden != 0)
      return tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn,
                     "desc->hidden is %zu but no epilogue view (bias, residual, residual_out, norm_weight) is set: "
                     "expected 0",
                     d->hidden);
    return TPG_SUCCESS;
  }
  const char *which = d->bias.slot ? "desc->bias" : d->residual.slot ? "desc->residual"
                      : d->residual_out.slot ? "desc->residual_out" : "desc->norm_weight";
  if (d->kind != TPG_ALL_REDUCE)
    return tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn, "%s is set for a kind-%d collective: only all-reduces have an "
                   "epilogue", which, (int)d->kind);
  if (d->hidden == 0)
    return tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn, "desc->hidden is 0 but %s is set: the epilogue needs the row length",
                   which);
  if (d->hidden % 8 != 0)
    return tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn, "desc->hidden is %zu: expected a multiple of 8 (16-byte rows)",
                   d->hidden);
  if (d->count % d->hidden != 0)
    return tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn, "desc->hidden %zu does not divide desc->count %zu: expected whole rows",
                   d->hidden, d->count);
  const tpg_dtype dt = p->slots[d->send.slot - 1].dtype;
  /* Our kernels and the epilogue node work on 16-byte vectors. */
  TPG_TRY(check_view(p, fn, "desc->send", d->send, d->count, 16));
  TPG_TRY(check_view(p, fn, "desc->recv", d->recv, d->count, 16));
  struct { const char *name; tpg_view v; size_t n; } ev[4] = {
      {"desc->bias", d->bias, d->hidden},
      {"desc->residual", d->residual, d->count},
      {"desc->residual_out", d->residual_out, d->count},
      {"desc->norm_weight", d->norm_weight, d->hidden},
  };
  for (int k = 0; k < 4; k++) {
    if (ev[k].v.slot == TPG_SLOT_NONE) continue;
    TPG_TRY(check_view(p, fn, ev[k].name, ev[k].v, ev[k].n, 16));
    TPG_TRY(check_dtype(p, fn, ev[k].name, ev[k].v, dt));
    TPG_TRY(check_device(p, fn, ev[k].name, ev[k].v));
  }
  if (d->norm_weight.slot && !(d->norm_eps >= 0.0f && isfinite(d->norm_eps)))
    return tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn, "desc->norm_eps is %g: expected a finite value >= 0",
                   (double)d->norm_eps);
  /* Aliasing: what one element's thread reads before it writes is allowed
   * (the in-place residual, recv == send); anything else would race between
   * blocks, or (recv vs residual) break the NCCL path, which writes the sum
   * into recv before its epilogue node reads residual. */
  const size_t n = d->count, hd = d->hidden;
  if (d->residual_out.slot) {
    const int same = d->residual_out.slot == d->residual.slot && d->residual_out.offset == d->residual.offset;
    if (!same && views_overlap(d->residual_out, n, d->residual, n))
      return tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn, "desc->residual_out overlaps desc->residual in slot \"%s\": "
                     "expected the same view (in place) or disjoint ranges", p->slots[d->residual.slot - 1].name);
    const struct { const char *name; tpg_view v; size_t n; } o[4] = {
        {"desc->send", d->send, n}, {"desc->recv", d->recv, n}, {"desc->bias", d->bias, hd},
        {"desc->norm_weight", d->norm_weight, hd}};
    for (int k = 0; k < 4; k++)
      if (views_overlap(d->residual_out, n, o[k].v, o[k].n))
        return tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn, "desc->residual_out overlaps %s in slot \"%s\": expected "
                       "disjoint ranges", o[k].name, p->slots[o[k].v.slot - 1].name);
  }
  const struct { const char *name; tpg_view v; size_t n; } r[3] = {
      {"desc->residual", d->residual, n}, {"desc->bias", d->bias, hd}, {"desc->norm_weight", d->norm_weight, hd}};
  for (int k = 0; k < 3; k++)
    if (views_overlap(d->recv, n, r[k].v, r[k].n))
      return tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn, "desc->recv overlaps %s in slot \"%s\": expected disjoint ranges",
                     r[k].name, p->slots[r[k].v.slot - 1].name);
  return TPG_SUCCESS;
}

/* Size of a tpg_collective_desc before the epilogue fields (tpgraph 0.1). */
#define TPG_COLLECTIVE_DESC_V1_SIZE (offsetof(tpg_collective_desc, algo) + sizeof(tpg_collective_algo))

static tpg_status add_collective_impl(tpg_plan *p, const tpg_collective_desc *d_in, const tpg_node *deps, int ndeps,
                                   tpg_node *out) {
  TPG_NODE_PROLOGUE();
  TPG_CHECK_ARG(d_in != NULL, "desc is NULL: expected a tpg_collective_desc (TPG_COLLECTIVE_DESC_INIT)");
  TPG_CHECK_ARG(d_in->size == sizeof(tpg_collective_desc) || d_in->size == TPG_COLLECTIVE_DESC_V1_SIZE,
                "desc->size is %zu: expected sizeof(tpg_collective_desc) = %zu (or %zu, the size without the "
                "epilogue fields)",
                d_in->size, sizeof(tpg_collective_desc), (size_t)TPG_COLLECTIVE_DESC_V1_SIZE);
  /* An older, shorter desc: its fields, then no epilogue. */
  tpg_collective_desc full;
  const tpg_collective_desc *d = d_in;
  if (d_in->size != sizeof full) {
    tpg_collective_desc init = TPG_COLLECTIVE_DESC_INIT;
    full = init;
    memcpy(&full, d_in, TPG_COLLECTIVE_DESC_V1_SIZE);
    full.size = sizeof full;
    d = &full;
  }
  TPG_CHECK_ARG(d->kind >= 0 && d->kind < TPG_COLLECTIVE_COUNT,
                "desc->kind is %d: expected TPG_ALL_REDUCE, TPG_ALL_GATHER or TPG_REDUCE_SCATTER", (int)d->kind);
  TPG_CHECK_ARG(d->count > 0, "desc->count is 0: expected >= 1 element");
  TPG_CHECK_ARG(d->algo == TPG_ALGO_AUTO || d->algo == TPG_ALGO_NCCL || d->algo == TPG_ALGO_ONESHOT ||
                    d->algo == TPG_ALGO_TWOSHOT,
                "desc->algo is %d: expected TPG_ALGO_AUTO, TPG_ALGO_NCCL, TPG_ALGO_ONESHOT or TPG_ALGO_TWOSHOT",
                (int)d->algo);
  TPG_CHECK_ARG((d->algo != TPG_ALGO_ONESHOT && d->algo != TPG_ALGO_TWOSHOT) || d->kind == TPG_ALL_REDUCE,
                "desc->algo is %s for a kind-%d collective: only all-reduces have it",
                d->algo == TPG_ALGO_ONESHOT ? "TPG_ALGO_ONESHOT" : "TPG_ALGO_TWOSHOT", (int)d->kind);
  /* Sizes that depend on the rank count are checked again with the comm. */
  TPG_TRY(check_view(p, __func__, "desc->send", d->send, d->count, 1));
  TPG_TRY(check_view(p, __func__, "desc->recv", d->recv, d->count, 1));
  TPG_TRY(check_device(p, __func__, "desc->send", d->send));
  TPG_TRY(check_device(p, __func__, "desc->recv", d->recv));
  TPG_TRY(check_dtype(p, __func__, "desc->recv", d->recv, p->slots[d->send.slot - 1].dtype));
  TPG_TRY(check_coll_epilogue(p, __func__, d));
  tpg_node_rec rec;
  memset(&rec, 0, sizeof rec);
  rec.kind = TPG_NK_COLLECTIVE;
  rec.u.coll = *d;
  return push_node(p, __func__, &rec, deps, ndeps, out);
}

tpg_status tpg_plan_add_collective(tpg_plan *p, const tpg_collective_desc *d, const tpg_node *deps, int ndeps,
                                   tpg_node *out) {
  TPG_NODE_WRAPPER(add_collective_impl(p, d, deps, ndeps, &node_));
}

static tpg_status add_concat_impl(tpg_plan *p, tpg_view dst, tpg_view src, int blocks, int rows, int cols,
                                  const tpg_node *deps, int ndeps, tpg_node *out) {
  TPG_NODE_PROLOGUE();
  TPG_CHECK_ARG(blocks >= 1, "blocks is %d: expected >= 1", blocks);
  TPG_CHECK_ARG(rows >= 1, "rows is %d: expected >= 1", rows);
  TPG_CHECK_ARG(cols >= 1, "cols is %d: expected >= 1", cols);
  size_t n, per;
  TPG_CHECK_ARG(tpg_mul_ok((size_t)rows, (size_t)cols, &per) && tpg_mul_ok(per, (size_t)blocks, &n),
                "blocks * rows * cols overflows: expected a size that fits in memory");
  TPG_TRY(check_view(p, __func__, "dst", dst, n, 1));
  TPG_TRY(check_device(p, __func__, "dst", dst));
  TPG_TRY(check_view(p, __func__, "src", src, n, 1));
  TPG_TRY(check_device(p, __func__, "src", src));
  TPG_TRY(check_dtype(p, __func__, "src", src, p->slots[dst.slot - 1].dtype));
  if (dst.slot == src.slot)
    TPG_CHECK_ARG(dst.offset + n <= src.offset || src.offset + n <= dst.offset,
                  "dst and src overlap in slot \"%s\": expected disjoint ranges (the move is not in place)",
                  p->slots[dst.slot - 1].name);
  tpg_node_rec rec;
  memset(&rec, 0, sizeof rec);
  rec.kind = TPG_NK_CONCAT;
  rec.u.concat.dst = dst;
  rec.u.concat.src = src;
  rec.u.concat.blocks = blocks;
  rec.u.concat.rows = rows;
  rec.u.concat.cols = cols;
  return push_node(p, __func__, &rec, deps, ndeps, out);
}

tpg_status tpg_plan_add_concat_cols(tpg_plan *p, tpg_view dst, tpg_view src, int blocks, int rows, int cols,
                                    const tpg_node *deps, int ndeps, tpg_node *out) {
  TPG_NODE_WRAPPER(add_concat_impl(p, dst, src, blocks, rows, cols, deps, ndeps, &node_));
}

tpg_status tpg_plan_add_dependency(tpg_plan *p, tpg_node from, tpg_node to) {
  tpg_err_clear();
  TPG_TRY(tpg_plan_check(p, __func__, "plan"));
  int f = node_index(p, from), t = node_index(p, to);
  TPG_CHECK_ARG(f >= 0, "from (0x%llx) is not a node of this plan", (unsigned long long)from);
  TPG_CHECK_ARG(t >= 0, "to (0x%llx) is not a node of this plan", (unsigned long long)to);
  TPG_CHECK_ARG(f != t, "from and to are the same node: a node cannot wait for itself");
  tpg_node_rec *n = &p->nodes[t];
  for (int i = 0; i < n->ndeps; i++)
    TPG_CHECK_ARG(n->deps[i] != f, "to already depends on from: expected each edge once");
  if (n->ndeps == n->capdeps) {
    int cap = n->capdeps ? 2 * n->capdeps : 4;
    int *d = realloc(n->deps, (size_t)cap * sizeof *d);
    if (!d) return TPG_FAIL(TPG_ERROR_OUT_OF_MEMORY, "out of host memory");
    n->deps = d;
    n->capdeps = cap;
  }
  n->deps[n->ndeps++] = f;
  return TPG_SUCCESS;
}

tpg_status tpg_plan_set_node_name(tpg_plan *p, tpg_node node, const char *name) {
  tpg_err_clear();
  TPG_TRY(tpg_plan_check(p, __func__, "plan"));
  int i = node_index(p, node);
  TPG_CHECK_ARG(i >= 0, "node (0x%llx) is not a node of this plan", (unsigned long long)node);
  TPG_CHECK_ARG(name != NULL && name[0], "name is NULL or empty: expected a label");
  TPG_CHECK_ARG(strlen(name) < TPG_MAX_NAME, "name is %zu bytes long: expected < %d", strlen(name), TPG_MAX_NAME);
  char *nm = dup_str(name);
  if (!nm) return TPG_FAIL(TPG_ERROR_OUT_OF_MEMORY, "out of host memory");
  free(p->nodes[i].name);
  p->nodes[i].name = nm;
  return TPG_SUCCESS;
}

/* ---- whole-plan checks -------------------------------------------------- */

tpg_status tpg_plan_topo(const tpg_plan *p, int *order) {
  int n = p->nnodes;
  if (n == 0) return TPG_SUCCESS;
  int *indeg = calloc((size_t)n, sizeof *indeg);
  int *cnt = calloc((size_t)n + 1, sizeof *cnt); /* CSR of successors */
  int *succ = NULL;
  tpg_status st = TPG_SUCCESS;
  size_t nedges = 0;
  if (!indeg || !cnt) goto oom;
  for (int i = 0; i < n; i++) {
    indeg[i] = p->nodes[i].ndeps;
    for (int j = 0; j < p->nodes[i].ndeps; j++) cnt[p->nodes[i].deps[j] + 1]++;
    nedges += (size_t)p->nodes[i].ndeps;
  }
  for (int i = 0; i < n; i++) cnt[i + 1] += cnt[i];
  succ = malloc((nedges ? nedges : 1) * sizeof *succ);
  if (!succ) goto oom;
  {
    int *fill = calloc((size_t)n, sizeof *fill);
    if (!fill) goto oom;
    for (int i = 0; i < n; i++)
      for (int j = 0; j < p->nodes[i].ndeps; j++) {
        int d = p->nodes[i].deps[j];
        succ[cnt[d] + fill[d]++] = i;
      }
    free(fill);
  }
  /* A FIFO over ready nodes seeded in index order: deterministic, so every
   * rank that built the same plan gets the same collective order. */
  int head = 0, tail = 0;
  for (int i = 0; i < n; i++)
    if (indeg[i] == 0) order[tail++] = i;
  while (head < tail) {
    int u = order[head++];
    for (int e = cnt[u]; e < cnt[u + 1]; e++)
      if (--indeg[succ[e]] == 0) order[tail++] = succ[e];
  }
  if (tail < n) {
    int bad = 0;
    for (int i = 0; i < n; i++)
      if (indeg[i] > 0) { bad = i; break; }
    char lb[160];
    st = TPG_FAIL(TPG_ERROR_INVALID_ARGUMENT, "the plan has a cycle through node %s (%d of %d nodes are on or after it)",
                  tpg_node_label(p, bad, lb, sizeof lb), n - tail, n);
  }
  free(indeg);
  free(cnt);
  free(succ);
  return st;
oom:
  free(indeg);
  free(cnt);
  free(succ);
  return TPG_FAIL(TPG_ERROR_OUT_OF_MEMORY, "out of host memory");
}

tpg_status tpg_plan_validate(const tpg_plan *p) {
  tpg_err_clear();
  TPG_TRY(tpg_plan_check(p, __func__, "plan"));
  if (p->nnodes == 0) return TPG_ARG_FAIL("plan has no nodes: expected at least one");
  int *order = malloc((size_t)p->nnodes * sizeof *order);
  if (!order) return TPG_FAIL(TPG_ERROR_OUT_OF_MEMORY, "out of host memory");
  tpg_status st = tpg_plan_topo(p, order);
  free(order);
  return st;
}

int tpg_node_views(const tpg_node_rec *n, tpg_view *v) {
  int k = 0;
  switch (n->kind) {
    case TPG_NK_GEMM:
      v[k++] = n->u.gemm.x;
      v[k++] = n->u.gemm.w;
      v[k++] = n->u.gemm.y;
      if (n->u.gemm.bias.slot) v[k++] = n->u.gemm.bias;
      if (n->u.gemm.residual.slot) v[k++] = n->u.gemm.residual;
      break;
    case TPG_NK_AXPBY: v[k++] = n->u.axpby.y; v[k++] = n->u.axpby.x; break;
    case TPG_NK_MEMSET: v[k++] = n->u.memset.dst; break;
    case TPG_NK_MEMCPY: v[k++] = n->u.memcpy.dst; v[k++] = n->u.memcpy.src; break;
    case TPG_NK_COLLECTIVE:
      v[k++] = n->u.coll.send;
      v[k++] = n->u.coll.recv;
      if (n->u.coll.bias.slot) v[k++] = n->u.coll.bias;
      if (n->u.coll.residual.slot) v[k++] = n->u.coll.residual;
      if (n->u.coll.residual_out.slot) v[k++] = n->u.coll.residual_out;
      if (n->u.coll.norm_weight.slot) v[k++] = n->u.coll.norm_weight;
      break;
    case TPG_NK_CONCAT: v[k++] = n->u.concat.dst; v[k++] = n->u.concat.src; break;
    default: break;
  }
  return k;
}

tpg_status tpg_plan_stats(const tpg_plan *p, int *nodes, int *slots, int *collectives) {
  tpg_err_clear();
  TPG_TRY(tpg_plan_check(p, __func__, "plan"));
  int c = 0;
  for (int i = 0; i < p->nnodes; i++) c += p->nodes[i].kind == TPG_NK_COLLECTIVE;
  if (nodes) *nodes = p->nnodes;
  if (slots) *slots = p->nslots;
  if (collectives) *collectives = c;
  return TPG_SUCCESS;
}

tpg_status tpg_plan_same_topology(const tpg_plan *a, const tpg_plan *b) {
  char la[160];
  if (a->nnodes != b->nnodes)
    return TPG_ARG_FAIL("plan has %d nodes, the graph's has %d: expected the same topology", b->nnodes, a->nnodes);
  for (int i = 0; i < a->nnodes; i++) {
    const tpg_node_rec *x = &a->nodes[i], *y = &b->nodes[i];
    tpg_node_label(a, i, la, sizeof la);
    if (x->kind != y->kind)
      return TPG_ARG_FAIL("node %s is a %s in the graph but a %s in plan: expected the same kinds", la,
                          tpg_node_kind_name(x->kind), tpg_node_kind_name(y->kind));
    if (x->ndeps != y->ndeps)
      return TPG_ARG_FAIL("node %s has %d dependencies in the graph, %d in plan: expected the same edges", la,
                          x->ndeps, y->ndeps);
    for (int j = 0; j < x->ndeps; j++)
      if (x->deps[j] != y->deps[j])
        return TPG_ARG_FAIL("node %s: dependency %d differs between the graph and plan", la, j);
    if (x->kind == TPG_NK_COLLECTIVE && x->u.coll.kind != y->u.coll.kind)
      return TPG_ARG_FAIL("node %s: collective kind differs between the graph and plan", la);
    /* An epilogue after an NCCL all-reduce is a node of its own. */
    if (x->kind == TPG_NK_COLLECTIVE && (x->u.coll.hidden != 0) != (y->u.coll.hidden != 0))
      return TPG_ARG_FAIL("node %s: the all-reduce has an epilogue in %s but not in %s: expected the same topology", la,
                          x->u.coll.hidden ? "the graph" : "plan", x->u.coll.hidden ? "plan" : "the graph");
  }
  if (a->nslots != b->nslots)
    return TPG_ARG_FAIL("plan has %d slots, the graph's has %d: expected the same slots", b->nslots, a->nslots);
  return TPG_SUCCESS;
}

/* ---- DOT ---------------------------------------------------------------- */

typedef struct { char *buf; size_t cap, len; } sbuf;

static void sb_printf(sbuf *s, const char *fmt, ...) TPG_PRINTF(2, 3);
static void sb_printf(sbuf *s, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  size_t room = s->len < s->cap ? s->cap - s->len : 0;
  int n = vsnprintf(room ? s->buf + s->len : NULL, room, fmt, ap);
  va_end(ap);
  if (n > 0) s->len += (size_t)n;
}

/* Appends n bytes as they are (what fits; len counts them all, as above). */
static void sb_put(sbuf *s, const char *text, size_t n) {
  if (s->len < s->cap) {
    size_t room = s->cap - s->len - 1; /* keep the NUL */
    size_t k = n < room ? n : room;
    memcpy(s->buf + s->len, text, k);
    s->buf[s->len + k] = '\0';
  }
  s->len += n;
}

/* User text inside a DOT string: names may hold any byte but NUL, and a raw
 * quote would end the label early (a newline splits it), so the file would
 * not parse. Quote and backslash get a backslash, newline becomes DOT's \n,
 * other control bytes '?'. Plain runs are copied whole: DOT of a big plan is
 * mostly names. */
static void sb_quoted(sbuf *s, const char *text) {
  const char *run = text;
  for (const unsigned char *c = (const unsigned char *)text;; c++) {
    int plain = *c >= 0x20 && *c != 0x7f && *c != '"' && *c != '\\';
    if (plain) continue;
    sb_put(s, run, (size_t)((const char *)c - run));
    if (!*c) return;
    if (*c == '"' || *c == '\\') {
      char esc[2] = {'\\', (char)*c};
      sb_put(s, esc, 2);
    } else {
      sb_put(s, *c == '\n' ? "\\n" : "?", *c == '\n' ? 2 : 1);
    }
    run = (const char *)c + 1;
  }
}

static void dot_view(sbuf *s, const tpg_plan *p, const char *role, tpg_view v) {
  if (!v.slot) return;
  sb_printf(s, "\\n%s=", role);
  sb_quoted(s, p->slots[v.slot - 1].name);
  if (v.offset) sb_printf(s, "+%llu", (unsigned long long)v.offset);
}

tpg_status tpg_plan_dot(const tpg_plan *p, char *buf, size_t cap, size_t *needed) {
  tpg_err_clear();
  TPG_TRY(tpg_plan_check(p, __func__, "plan"));
  TPG_CHECK_ARG(needed != NULL, "needed is NULL: expected a size_t to receive the length");
  TPG_CHECK_ARG(buf != NULL || cap == 0, "buf is NULL but cap is %zu: expected cap 0 to query the size", cap);
  sbuf s = {buf, cap, 0};
  static const char *shape[TPG_NK_COUNT] = {"box", "box", "note", "note", "circle", "doubleoctagon", "box"};
  static const char *epi[] = {"", "+bias", "+bias,gelu", "+bias,silu", "swiglu", "+residual", "f32 partial"};
  sb_printf(&s, "digraph tpg_plan {\n  rankdir=TB;\n  node [fontname=\"monospace\", fontsize=10];\n");
  char lb[160];
  for (int i = 0; i < p->nnodes; i++) {
    const tpg_node_rec *n = &p->nodes[i];
    sb_printf(&s, "  n%d [shape=%s, label=\"", i, shape[n->kind]);
    sb_quoted(&s, tpg_node_label(p, i, lb, sizeof lb));
    switch (n->kind) {
      case TPG_NK_GEMM:
        sb_printf(&s, "\\n%dx%dx%d %s", n->u.gemm.m, n->u.gemm.n, n->u.gemm.k, epi[n->u.gemm.epilogue]);
        dot_view(&s, p, "x", n->u.gemm.x);
        dot_view(&s, p, "w", n->u.gemm.w);
        dot_view(&s, p, "y", n->u.gemm.y);
        break;
      case TPG_NK_AXPBY:
        sb_printf(&s, "\\ny=%g*x+%g*y n=%zu", (double)n->u.axpby.alpha, (double)n->u.axpby.beta, n->u.axpby.count);
        dot_view(&s, p, "y", n->u.axpby.y);
        dot_view(&s, p, "x", n->u.axpby.x);
        break;
      case TPG_NK_MEMSET:
        sb_printf(&s, "\\n0x%x n=%zu", n->u.memset.value, n->u.memset.count);
        dot_view(&s, p, "dst", n->u.memset.dst);
        break;
      case TPG_NK_MEMCPY:
        sb_printf(&s, "\\nn=%zu", n->u.memcpy.count);
        dot_view(&s, p, "dst", n->u.memcpy.dst);
        dot_view(&s, p, "src", n->u.memcpy.src);
        break;
      case TPG_NK_COLLECTIVE:
        /* What the plan knows: AUTO is decided at tpg_graph_create (size,
         * ranks, peer access), where tpg_graph_write_dot shows the outcome. */
        sb_printf(&s, "\\nn=%zu (%s)", n->u.coll.count,
                  n->u.coll.kind != TPG_ALL_REDUCE || n->u.coll.algo == TPG_ALGO_NCCL ? "NCCL child graph"
                  : n->u.coll.algo == TPG_ALGO_ONESHOT                             ? "one-shot kernel node"
                  : n->u.coll.algo == TPG_ALGO_TWOSHOT                             ? "two-shot kernel node"
                                                                                   : "AUTO: our kernel node or NCCL");
        dot_view(&s, p, "send", n->u.coll.send);
        dot_view(&s, p, "recv", n->u.coll.recv);
        if (n->u.coll.hidden) sb_printf(&s, "\\nepilogue hidden=%zu", n->u.coll.hidden);
        if (n->u.coll.bias.slot) dot_view(&s, p, "bias", n->u.coll.bias);
        if (n->u.coll.residual.slot) dot_view(&s, p, "residual", n->u.coll.residual);
        if (n->u.coll.residual_out.slot) dot_view(&s, p, "residual_out", n->u.coll.residual_out);
        if (n->u.coll.norm_weight.slot) dot_view(&s, p, "norm_weight", n->u.coll.norm_weight);
        break;
      case TPG_NK_CONCAT:
        sb_printf(&s, "\\n%d x [%d, %d] -> [%d, %lld]", n->u.concat.blocks, n->u.concat.rows, n->u.concat.cols,
                  n->u.concat.rows, (long long)n->u.concat.blocks * n->u.concat.cols);
        dot_view(&s, p, "dst", n->u.concat.dst);
        dot_view(&s, p, "src", n->u.concat.src);
        break;
      default: break;
    }
    sb_printf(&s, "\"];\n");
  }
  for (int i = 0; i < p->nnodes; i++)
    for (int j = 0; j < p->nodes[i].ndeps; j++) sb_printf(&s, "  n%d -> n%d;\n", p->nodes[i].deps[j], i);
  sb_printf(&s, "}\n");
  *needed = s.len + 1;
  if (!buf) return TPG_SUCCESS; /* size query */
  if (s.len + 1 > cap)
    return TPG_ARG_FAIL("cap is %zu bytes: the DOT text needs %zu (call with buf NULL, cap 0 to size it)", cap,
                        s.len + 1);
  return TPG_SUCCESS;
}
