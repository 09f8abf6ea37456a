/* gemm_dispatch_test.c - the selector (lib/gemm/select.c) over its
 * operations table with a stand-in family in cuBLASLt's place: every call
 * of select.h reaches the family only through its operations, in the order
 * family.h states, and falls back to ours where the stand-in is absent,
 * refuses the shape, its rule declines or its fill fails.
 *
 * select.c is compiled here with TPG_GEMM_FAMILY_LIST naming the stand-in,
 * CUTLASS and ours (the real table, family_table.inc, whose rows for the
 * cuBLASLt family id then name the stand-in).
 */
#include <stdio.h>
#include <string.h>

#include "kernels/tpg_kargs.h"
#include "lib/gemm/family.h"
#include "tests/cpu/gemm_test.h"
#include "tests/tpg_test.h"

/* What the stand-in does and what was asked of it. */
static struct {
  int absent, refuse, rule_declines, fill_fails;
  int n_available, n_can, n_rule, n_cands, n_ws, n_fill;
  int last_kernel, last_mode;
} si;

static int si_available(char *why, size_t whylen) {
  ++si.n_available;
  return si.absent ? tpg_gemm_reject(why, whylen, "stand-in: no library") : 0;
}
static int si_can_implement(const tpg_gemm_problem *p, char *why, size_t whylen) {
  ++si.n_can;
  if (si.refuse || p->epilogue == TPG_EPI_SWIGLU) return tpg_gemm_reject(why, whylen, "stand-in: not this shape");
  return 0;
}
static int si_owns(const tpg_gemm_variant *v) { return v->kind == TPG_GEMM_VAR_CUBLASLT; }
static int si_rule(const tpg_gemm_problem *p, int kernel, int mode, tpg_gemm_variant *v) {
  (void)p;
  ++si.n_rule;
  si.last_kernel = kernel, si.last_mode = mode;
  if (si.rule_declines) return 1;
  memset(v, 0, sizeof *v);
  v->kind = TPG_GEMM_VAR_CUBLASLT;
  return 0;
}
static int si_candidates(const tpg_gemm_problem *p, tpg_gemm_variant *list, int cap) {
  (void)p;
  ++si.n_cands;
  int n = cap < 2 ? cap : 2;
  for (int i = 0; list && i < n; ++i) {
    memset(&list[i], 0, sizeof list[i]);
    list[i].kind = TPG_GEMM_VAR_CUBLASLT;
    list[i].lt_algo = i;
  }
  return n;
}
static int si_workspace_size(const tpg_gemm_problem *p, const tpg_gemm_variant *v, size_t *bytes, char *why,
                             size_t whylen) {
  (void)p, (void)why, (void)whylen;
  ++si.n_ws;
  *bytes = 4096 + (size_t)v->lt_algo;
  return 0;
}
static int si_fill(const tpg_gemm_problem *p, const tpg_gemm_variant *v, tpg_kernel_launch *out,
                   tpg_tma_encode *x_map, tpg_tma_encode *w_map, char *why, size_t whylen) {
  (void)p;
  ++si.n_fill;
  if (si.fill_fails) return tpg_gemm_reject(why, whylen, "stand-in: fill failed");
  memset(out, 0, sizeof *out);
  out->kernel = "standin";
  out->family = TPG_GEMM_FAMILY_CUBLASLT;
  out->lt_algo = v->lt_algo;
  out->workspace_bytes = 4096 + (size_t)v->lt_algo;
  if (x_map) x_map->rank = 0;
  if (w_map) w_map->rank = 0;
  return 0;
}
static int si_variant_name(const tpg_gemm_variant *v, char *buf, size_t len) {
  int r = snprintf(buf, len, "standin_%d", v->lt_algo);
  return r < 0 || (size_t)r >= len;
}
static int si_variant_parse(const char *s, tpg_gemm_variant *v) {
  int a;
  char tail;
  if (sscanf(s, "standin_%d%c", &a, &tail) != 1 || a < 0 || a > 1) return 1;
  memset(v, 0, sizeof *v);
  v->kind = TPG_GEMM_VAR_CUBLASLT;
  v->lt_algo = a;
  return 0;
}

static const tpg_gemm_family_ops standin = {
    .id = TPG_GEMM_FAMILY_CUBLASLT, .name = "standin", .available = si_available,
    .can_implement = si_can_implement, .owns = si_owns, .rule = si_rule, .candidates = si_candidates,
    .workspace_size = si_workspace_size, .fill = si_fill, .variant_name = si_variant_name,
    .variant_parse = si_variant_parse,
};

#define TPG_GEMM_FAMILY_LIST &standin, &tpg_gemm_family_cutlass, &tpg_gemm_family_ours
#include "lib/gemm/select.c"

/* A shape in the table's cuBLASLt band (m > 32). */
#define BAND(epi, arch) PROB(256, 4096, 4096, TPG_KDT_BF16, (epi), (arch), 132, 4096, 4096, 1)

static int family_of_rule(const tpg_gemm_problem *p, int family) {
  tpg_gemm_variant v;
  if (tpg_gemm_select_rule_variant(p, family, &v, NULL, 0)) return -1;
  return tpg_gemm_variant_family(&v);
}

static void test_rule(void) {
  tpg_kernel_launch l;
  tpg_tma_encode x, w;
  char why[200];
  /* AUTO in the band: the stand-in's rule with the row's kernel and mode (0, TPG_LT_AUTO_BAND), its fill */
  CHECK(tpg_gemm_select_rule(BAND(TPG_EPI_BIAS, 90), TPG_GEMM_FAMILY_AUTO, &l, &x, &w, why, sizeof why) == 0);
  CHECK(l.family == TPG_GEMM_FAMILY_CUBLASLT && !strcmp(l.kernel, "standin") && l.workspace_bytes == 4096);
  CHECK(si.last_kernel == 0 && si.last_mode == TPG_LT_AUTO_BAND && si.n_available > 0 && si.n_can > 0 &&
        si.n_fill > 0);
  /* out of the band, another architecture, or the shape refused: not the stand-in */
  CHECK(family_of_rule(PROB(16, 4096, 4096, TPG_KDT_BF16, TPG_EPI_BIAS, 90, 132, 4096, 4096, 1),
                       TPG_GEMM_FAMILY_AUTO) == TPG_GEMM_FAMILY_OURS);
  CHECK(family_of_rule(BAND(TPG_EPI_BIAS, 80), TPG_GEMM_FAMILY_AUTO) == TPG_GEMM_FAMILY_OURS);
  CHECK(family_of_rule(BAND(TPG_EPI_SWIGLU, 90), TPG_GEMM_FAMILY_AUTO) != TPG_GEMM_FAMILY_CUBLASLT);
  /* forced: the stand-in wherever it can run, also out of the band */
  CHECK(family_of_rule(PROB(16, 1024, 512, TPG_KDT_BF16, TPG_EPI_NONE, 90, 132, 512, 512, 1),
                       TPG_GEMM_FAMILY_CUBLASLT) == TPG_GEMM_FAMILY_CUBLASLT);
  CHECK(family_of_rule(BAND(TPG_EPI_SWIGLU, 90), TPG_GEMM_FAMILY_CUBLASLT) == TPG_GEMM_FAMILY_OURS);
  /* each way the stand-in can say no leaves ours (or the class's next row) */
  si.absent = 1;
  CHECK(family_of_rule(BAND(TPG_EPI_BIAS, 90), TPG_GEMM_FAMILY_AUTO) != TPG_GEMM_FAMILY_CUBLASLT);
  CHECK(family_of_rule(BAND(TPG_EPI_BIAS, 90), TPG_GEMM_FAMILY_CUBLASLT) == TPG_GEMM_FAMILY_OURS);
  CHECK(tpg_gemm_family_available(TPG_GEMM_FAMILY_CUBLASLT, why, sizeof why) != 0 && strstr(why, "no library"));
  si.absent = 0;
  CHECK(tpg_gemm_family_available(TPG_GEMM_FAMILY_CUBLASLT, why, sizeof why) == 0);
  si.refuse = 1;
  CHECK(family_of_rule(BAND(TPG_EPI_BIAS, 90), TPG_GEMM_FAMILY_AUTO) != TPG_GEMM_FAMILY_CUBLASLT);
  si.refuse = 0, si.rule_declines = 1;
  CHECK(family_of_rule(BAND(TPG_EPI_BIAS, 90), TPG_GEMM_FAMILY_AUTO) == TPG_GEMM_FAMILY_OURS);
  si.rule_declines = 0, si.fill_fails = 1;
  CHECK(family_of_rule(BAND(TPG_EPI_BIAS, 90), TPG_GEMM_FAMILY_AUTO) == TPG_GEMM_FAMILY_OURS);
  CHECK(tpg_gemm_select_rule(BAND(TPG_EPI_BIAS, 90), TPG_GEMM_FAMILY_AUTO, &l, &x, &w, why, sizeof why) == 0 &&
        l.family == TPG_GEMM_FAMILY_OURS);
  si.fill_fails = 0;
  /* a shape no family may run: the shared rules' message, no family asked */
  const int fills = si.n_fill;
  CHECK(tpg_gemm_select_rule(PROB(256, 100, 4096, TPG_KDT_BF16, TPG_EPI_NONE, 90, 132, 4096, 4096, 1),
                             TPG_GEMM_FAMILY_AUTO, &l, &x, &w, why, sizeof why) != 0 && strstr(why, "n=100"));
  CHECK(si.n_fill == fills);
  CHECK(tpg_gemm_select_rule(BAND(TPG_EPI_BIAS, 90), 9, &l, &x, &w, why, sizeof why) != 0 && strstr(why, "family=9"));
}

static void test_variants(void) {
  tpg_gemm_variant list[TPG_GEMM_MAX_CANDIDATES], v;
  tpg_kernel_launch l;
  tpg_tma_encode x, w;
  size_t bytes = 0;
  char why[200], name[64];
  /* candidates: the heuristic, then the stand-in's first (its place in the list) */
  const int n = tpg_gemm_candidates(BAND(TPG_EPI_BIAS, 90), list, TPG_GEMM_MAX_CANDIDATES);
  CHECK(n > 3 && list[0].kind == TPG_GEMM_VAR_HEURISTIC && list[1].kind == TPG_GEMM_VAR_CUBLASLT &&
        list[2].kind == TPG_GEMM_VAR_CUBLASLT && list[2].lt_algo == 1 && list[3].kind != TPG_GEMM_VAR_CUBLASLT);
  CHECK(tpg_gemm_candidates(BAND(TPG_EPI_BIAS, 90), NULL, TPG_GEMM_MAX_CANDIDATES) == n);
  CHECK(tpg_gemm_candidates(BAND(TPG_EPI_BIAS, 90), list, 2) == 2 && list[1].kind == TPG_GEMM_VAR_CUBLASLT);
  si.refuse = 1;
  const int m = tpg_gemm_candidates(BAND(TPG_EPI_BIAS, 90), list, TPG_GEMM_MAX_CANDIDATES);
  CHECK(m == n - 2 && list[1].kind != TPG_GEMM_VAR_CUBLASLT);
  si.refuse = 0;
  /* names: the owner's, and parsed back by the owner */
  CHECK(tpg_gemm_variant_parse("standin_1", &v) == 0 && v.kind == TPG_GEMM_VAR_CUBLASLT && v.lt_algo == 1);
  CHECK(tpg_gemm_variant_name(&v, name, sizeof name) == 0 && !strcmp(name, "standin_1"));
  CHECK(tpg_gemm_variant_family(&v) == TPG_GEMM_FAMILY_CUBLASLT);
  CHECK(tpg_gemm_variant_parse("standin_7", &v) != 0 && v.kind == TPG_GEMM_VAR_HEURISTIC);
  CHECK(tpg_gemm_family_parse("standin") == TPG_GEMM_FAMILY_CUBLASLT &&
        !strcmp(tpg_gemm_family_name(TPG_GEMM_FAMILY_CUBLASLT), "standin"));
  /* workspace and fill of a forced variant: the owner's, after the shared rules and can_implement */
  tpg_gemm_variant_parse("standin_1", &v);
  CHECK(tpg_gemm_workspace_size(BAND(TPG_EPI_BIAS, 90), &v, &bytes, why, sizeof why) == 0 && bytes == 4097);
  CHECK(tpg_gemm_select_variant(BAND(TPG_EPI_BIAS, 90), &v, &l, &x, &w, why, sizeof why) == 0 && l.lt_algo == 1 &&
        l.family == TPG_GEMM_FAMILY_CUBLASLT);
  CHECK(tpg_gemm_select_variant(BAND(TPG_EPI_SWIGLU, 90), &v, &l, &x, &w, why, sizeof why) != 0 &&
        strstr(why, "not this shape"));
  CHECK(tpg_gemm_workspace_size(BAND(TPG_EPI_SWIGLU, 90), &v, &bytes, why, sizeof why) != 0);
  si.fill_fails = 1;
  CHECK(tpg_gemm_select_variant(BAND(TPG_EPI_BIAS, 90), &v, &l, &x, &w, why, sizeof why) != 0 &&
        strstr(why, "fill failed"));
  si.fill_fails = 0;
  /* a variant no family owns */
  v.kind = 42;
  CHECK(tpg_gemm_select_variant(BAND(TPG_EPI_BIAS, 90), &v, &l, &x, &w, why, sizeof why) != 0 &&
        strstr(why, "unknown"));
  CHECK(tpg_gemm_variant_name(&v, name, sizeof name) != 0);
}

int main(void) {
  test_rule();
  test_variants();
  printf("stand-in asked: available %d, can_implement %d, rule %d, candidates %d, workspace %d, fill %d\n",
         si.n_available, si.n_can, si.n_rule, si.n_cands, si.n_ws, si.n_fill);
  return TPG_TEST_END();
}
