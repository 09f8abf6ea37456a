/* ours.c - our kernels as a GEMM family (family.h): the operations the
 * selector calls, over the rule (ours_rule.c), the forced variants
 * (ours_variant.c) and the launches (ours_launch.c).
 *
 * Decision: ours can run every problem that passes tpg_gemm_problem_check
 * (mma.sync from sm_80, the GEMV at any M <= 64), so it is the family every
 * other choice falls back to.
 */
#include <string.h>

#include "kernels/tpg_kargs.h"
#include "lib/gemm/family.h"
#include "lib/gemm/ours_impl.h"

/* ---- the family's operations (family.h) ---------------------------------- */

static int ours_can_implement(const tpg_gemm_problem *p, char *why, size_t whylen) {
  return tpg_gemm_problem_check(p, why, whylen);
}

static int ours_owns(const tpg_gemm_variant *v) {
  return v->kind == TPG_GEMM_VAR_OURS || v->kind == TPG_GEMM_VAR_GEMV || v->kind == TPG_GEMM_VAR_GEMV_SK ||
         v->kind == TPG_GEMM_VAR_TMA;
}

/* Ours in a table row: our own rule, whatever the row says. */
static int ours_rule(const tpg_gemm_problem *p, int kernel, int mode, tpg_gemm_variant *v) {
  (void)p, (void)kernel, (void)mode;
  memset(v, 0, sizeof *v);
  v->kind = TPG_GEMM_VAR_OURS;
  return 0;
}

static int ours_fill(const tpg_gemm_problem *p, const tpg_gemm_variant *v, tpg_kernel_launch *out,
                     tpg_tma_encode *x_map, tpg_tma_encode *w_map, char *why, size_t whylen) {
  if (v->kind == TPG_GEMM_VAR_OURS) return tpg_gemm_select_tma(p, out, x_map, w_map, why, whylen);
  return tpg_ours_fill_variant(p, v, out, x_map, w_map, why, whylen);
}

static int ours_workspace_size(const tpg_gemm_problem *p, const tpg_gemm_variant *v, size_t *bytes, char *why,
                               size_t whylen) {
  tpg_kernel_launch l;
  tpg_tma_encode x, w;
  if (ours_fill(p, v, &l, &x, &w, why, whylen)) return 1;
  *bytes = l.workspace_bytes;
  return 0;
}

const tpg_gemm_family_ops tpg_gemm_family_ours = {
    .id = TPG_GEMM_FAMILY_OURS,
    .name = "ours",
    .can_implement = ours_can_implement,
    .owns = ours_owns,
    .rule = ours_rule,
    .candidates = tpg_ours_candidates,
    .workspace_size = ours_workspace_size,
    .fill = ours_fill,
    .variant_name = tpg_ours_variant_name,
    .variant_parse = tpg_ours_variant_parse,
};
