/* select.c - the GEMM families side by side: our kernels (ours*.c) and
 * CUTLASS's (cutlass.h), the deterministic rule between them, and the
 * CUTLASS variants a tuner times.
 *
 * Decision: the rule between families is a table of shape classes
 * (family_table.inc), not a cost model, because we have no model of
 * CUTLASS's kernels and the table is what a zoo run can refit in one step
 * (bench/family_rules.py --emit). Our own kernels keep their zoo-fitted cost
 * model (ours_rule.c) wherever the table says "ours". The families meet only
 * here.
 */
#include "lib/gemm/select.h"

#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "kernels/tpg_kargs.h"
#include "lib/gemm/cutlass.h"
#include "lib/gemm/family.h"

/* A row of family_table.inc. */
typedef struct tpg_family_row {
  int m_max;
  long wrows_max;
  int k_max;
  int cutlass; /* 0: ours; i + 1: CUTLASS kernel i */
  int mode;    /* TPG_CUTLASS_* */
} tpg_family_row;
#define TPG_FR_ANY_M INT_MAX
#define TPG_FR_ANY_W LONG_MAX
#define TPG_FR_ANY_K INT_MAX
#include "lib/gemm/family_table.inc"

const char *tpg_gemm_family_table_source(void) { return TPG_FAMILY_TABLE_SOURCE; }

static int reject(char *why, size_t whylen, const char *msg) {
  if (why && whylen) {
    strncpy(why, msg, whylen - 1);
    why[whylen - 1] = '\0';
  }
  return 1;
}

/* The class row of a shape in a table. */
static const tpg_family_row *row_of(const tpg_family_row *t, size_t n, int m, long wrows, int k) {
  for (size_t i = 0; i < n; ++i)
    if (m <= t[i].m_max && wrows <= t[i].wrows_max && k <= t[i].k_max) return &t[i];
  return NULL;
}

int tpg_gemm_select_rule(int m, int n, int k, int dtype, int epilogue, int sm_arch, int num_sms, int ldx, int ldw,
                         int streamk, int family, tpg_kernel_launch *out, tpg_tma_encode *x_map, tpg_tma_encode *w_map,
                         char *why, size_t whylen) {
  char buf[160];
  const tpg_family_row *r = NULL;
  if (family != TPG_GEMM_FAMILY_AUTO && family != TPG_GEMM_FAMILY_OURS && family != TPG_GEMM_FAMILY_CUTLASS) {
    snprintf(buf, sizeof buf, "family=%d: TPG_GEMM_FAMILY_AUTO, _OURS or _CUTLASS", family);
    return reject(why, whylen, buf);
  }
  /* ours first: it checks the shape with the rule's messages */
  if (tpg_gemm_select_tma(m, n, k, dtype, epilogue, sm_arch, num_sms, ldx, ldw, streamk, out, x_map, w_map, why,
                          whylen))
    return 1;
  if (family == TPG_GEMM_FAMILY_OURS || !tpg_gemm_cutlass_applies(dtype, epilogue, sm_arch)) return 0;
  {
    const long wrows = epilogue == TPG_EPI_SWIGLU ? 2L * n : (long)n;
    if (family == TPG_GEMM_FAMILY_CUTLASS)
      r = row_of(kFamilyCutlass, sizeof kFamilyCutlass / sizeof kFamilyCutlass[0], m, wrows, k);
    else
      r = row_of(kFamilyAuto, sizeof kFamilyAuto / sizeof kFamilyAuto[0], m, wrows, k);
  }
  if (!r || r->cutlass < 1 || r->cutlass > TPG_CUTLASS_COUNT) return 0;
  {
    tpg_gemm_variant v;
    tpg_kernel_launch l;
    memset(&v, 0, sizeof v);
    v.kind = TPG_GEMM_VAR_CUTLASS;
    v.cutlass = r->cutlass - 1;
    v.streamk = r->mode == TPG_CUTLASS_SK;
    if (r->mode == TPG_CUTLASS_SPLIT) {
      v.split = tpg_gemm_cutlass_ranges(v.cutlass, m, n, k, num_sms);
      if (!v.split) v.streamk = 1; /* too many tiles for K ranges: stream-K */
    }
    if (streamk == 0) v.streamk = v.split = 0; /* TPG_GEMM_STREAMK=0 turns off every K split */
    /* a kernel that cannot run the shape (leading dimensions) leaves ours */
    if (tpg_gemm_cutlass_select(m, n, k, dtype, epilogue, sm_arch, num_sms, ldx, ldw, &v, &l, NULL, 0)) return 0;
    *out = l;
    if (x_map) memset(x_map, 0, sizeof *x_map);
    if (w_map) memset(w_map, 0, sizeof *w_map);
  }
  if (why && whylen) why[0] = '\0';
  return 0;
}

int tpg_gemm_variant_family(const tpg_gemm_variant *v) {
  if (!v || v->kind == TPG_GEMM_VAR_HEURISTIC) return TPG_GEMM_FAMILY_AUTO;
  return v->kind == TPG_GEMM_VAR_CUTLASS ? TPG_GEMM_FAMILY_CUTLASS : TPG_GEMM_FAMILY_OURS;
}
