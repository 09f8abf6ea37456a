/* plan_add.c - the public node builders (tpg_plan_add_*).
 *
 * Each builder fills a node record from its arguments and asks the kind's
 * check (graphbuild/nodes/) before adding it, so a bad call fails where it
 * was made — the message names the argument and the rule — not later at
 * graph creation. What needs the whole plan (cycles) is tpg_plan_validate's.
 */
#define _POSIX_C_SOURCE 200809L
#include <stddef.h>
#include <string.h>

#include "graphbuild/nodes/kind.h"

/* Checks rec with its kind and appends it. `out` may alias an element of
 * `deps` (prev = add(prev) is natural), so it is written last, by the
 * public wrapper. */
static tpg_status add_node(tpg_plan *p, const char *fn, tpg_node_rec *rec, const tpg_node *deps, int ndeps,
                           tpg_node *out) {
  *out = 0;
  TPG_TRY(tpg_plan_check(p, fn, "plan"));
  TPG_TRY(tpg_plan_check_deps(p, fn, deps, ndeps));
  TPG_TRY(tpg_kind(rec->kind)->check(p, fn, rec));
  return tpg_plan_push_node(p, fn, rec, deps, ndeps, out);
}

#define TPG_ADD(rec)                                                   \
  do {                                                                 \
    tpg_node node_ = 0;                                                \
    tpg_err_clear();                                                   \
    tpg_status st_ = add_node(p, __func__, &(rec), deps, ndeps, &node_); \
    if (out) *out = st_ == TPG_SUCCESS ? node_ : 0;                    \
    return st_;                                                        \
  } while (0)

static tpg_node_rec record(tpg_node_kind kind) {
  tpg_node_rec rec;
  memset(&rec, 0, sizeof rec);
  rec.kind = kind;
  return rec;
}

/* Size of a tpg_gemm_desc before the folded norm's fields (tpgraph 0.3). */
#define TPG_GEMM_DESC_V3_SIZE offsetof(tpg_gemm_desc, y_ssq)

tpg_status tpg_plan_add_gemm(tpg_plan *p, const tpg_gemm_desc *d, const tpg_node *deps, int ndeps, tpg_node *out) {
  if (d == NULL || (d->size != sizeof(tpg_gemm_desc) && d->size != TPG_GEMM_DESC_V3_SIZE)) {
    tpg_err_clear();
    if (out) *out = 0;
    TPG_TRY(tpg_plan_check(p, __func__, "plan"));
    TPG_TRY(tpg_plan_check_deps(p, __func__, deps, ndeps));
    TPG_CHECK_ARG(d != NULL, "desc is NULL: expected a tpg_gemm_desc (TPG_GEMM_DESC_INIT)");
    return TPG_ARG_FAIL("desc->size is %zu: expected sizeof(tpg_gemm_desc) = %zu (or %zu, the size without the "
                        "folded norm's fields)", d->size, sizeof(tpg_gemm_desc), (size_t)TPG_GEMM_DESC_V3_SIZE);
  }
  tpg_node_rec rec = record(TPG_NK_GEMM);
  if (d->size == sizeof(tpg_gemm_desc)) {
    rec.u.gemm = *d;
  } else { /* an older, shorter desc: its fields, then no folded norm */
    tpg_gemm_desc init = TPG_GEMM_DESC_INIT;
    rec.u.gemm = init;
    memcpy(&rec.u.gemm, d, TPG_GEMM_DESC_V3_SIZE);
    rec.u.gemm.size = sizeof rec.u.gemm;
  }
  TPG_ADD(rec);
}

tpg_status tpg_plan_add_axpby(tpg_plan *p, tpg_view y, tpg_view x, size_t count, float alpha, float beta,
                              const tpg_node *deps, int ndeps, tpg_node *out) {
  tpg_node_rec rec = record(TPG_NK_AXPBY);
  rec.u.axpby.y = y;
  rec.u.axpby.x = x;
  rec.u.axpby.count = count;
  rec.u.axpby.alpha = alpha;
  rec.u.axpby.beta = beta;
  TPG_ADD(rec);
}

tpg_status tpg_plan_add_memset(tpg_plan *p, tpg_view dst, uint32_t value, size_t count, const tpg_node *deps,
                               int ndeps, tpg_node *out) {
  tpg_node_rec rec = record(TPG_NK_MEMSET);
  rec.u.memset.dst = dst;
  rec.u.memset.value = value;
  rec.u.memset.count = count;
  TPG_ADD(rec);
}

tpg_status tpg_plan_add_memcpy(tpg_plan *p, tpg_view dst, tpg_view src, size_t count, const tpg_node *deps,
                               int ndeps, tpg_node *out) {
  tpg_node_rec rec = record(TPG_NK_MEMCPY);
  rec.u.memcpy.dst = dst;
  rec.u.memcpy.src = src;
  rec.u.memcpy.count = count;
  TPG_ADD(rec);
}

tpg_status tpg_plan_add_empty(tpg_plan *p, const tpg_node *deps, int ndeps, tpg_node *out) {
  tpg_node_rec rec = record(TPG_NK_EMPTY);
  TPG_ADD(rec);
}

/* Size of a tpg_collective_desc before the epilogue fields (tpgraph 0.1). */
#define TPG_COLLECTIVE_DESC_V1_SIZE (offsetof(tpg_collective_desc, algo) + sizeof(tpg_collective_algo))

tpg_status tpg_plan_add_collective(tpg_plan *p, const tpg_collective_desc *d, const tpg_node *deps, int ndeps,
                                   tpg_node *out) {
  if (d == NULL || (d->size != sizeof(tpg_collective_desc) && d->size != TPG_COLLECTIVE_DESC_V1_SIZE)) {
    tpg_err_clear();
    if (out) *out = 0;
    TPG_TRY(tpg_plan_check(p, __func__, "plan"));
    TPG_TRY(tpg_plan_check_deps(p, __func__, deps, ndeps));
    TPG_CHECK_ARG(d != NULL, "desc is NULL: expected a tpg_collective_desc (TPG_COLLECTIVE_DESC_INIT)");
    return TPG_ARG_FAIL("desc->size is %zu: expected sizeof(tpg_collective_desc) = %zu (or %zu, the size without the "
                        "epilogue fields)",
                        d->size, sizeof(tpg_collective_desc), (size_t)TPG_COLLECTIVE_DESC_V1_SIZE);
  }
  tpg_node_rec rec = record(TPG_NK_COLLECTIVE);
  if (d->size == sizeof(tpg_collective_desc)) {
    rec.u.coll = *d;
  } else { /* an older, shorter desc: its fields, then no epilogue */
    tpg_collective_desc init = TPG_COLLECTIVE_DESC_INIT;
    rec.u.coll = init;
    memcpy(&rec.u.coll, d, TPG_COLLECTIVE_DESC_V1_SIZE);
    rec.u.coll.size = sizeof rec.u.coll;
  }
  TPG_ADD(rec);
}

tpg_status tpg_plan_add_concat_cols(tpg_plan *p, tpg_view dst, tpg_view src, int blocks, int rows, int cols,
                                    const tpg_node *deps, int ndeps, tpg_node *out) {
  tpg_node_rec rec = record(TPG_NK_CONCAT);
  rec.u.concat.dst = dst;
  rec.u.concat.src = src;
  rec.u.concat.blocks = blocks;
  rec.u.concat.rows = rows;
  rec.u.concat.cols = cols;
  TPG_ADD(rec);
}
