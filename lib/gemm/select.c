/* select.c - the rule between the GEMM families, forced variants and the
 * tuner's candidates, over the families' operations table (family.h).
 *
 * Decision: the rule between families is a table of shape classes
 * (family_table.inc), not a cost model, because we have no model of the
 * other families' kernels and the table is what a zoo run can refit in one
 * step (bench/family_rules.py --emit). Our own kernels keep their
 * zoo-fitted cost model (ours_rule.c) wherever the table says "ours", and
 * ours is where every other choice falls back: ours runs every shape that
 * passes tpg_gemm_problem_check. This file knows the families only by their
 * operations; the families know nothing of each other.
 */
#include "lib/gemm/select.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/tpg_kargs.h"
#include "lib/gemm/family.h"

/* A row of family_table.inc. */
typedef struct tpg_family_row {
  int m_max;
  long wrows_max;
  int k_max;
  int family; /* TPG_GEMM_FAMILY_OURS, _CUTLASS, _CUBLASLT */
  int kernel; /* CUTLASS: kernel i + 1 */
  int mode;   /* CUTLASS: TPG_CUTLASS_* */
} tpg_family_row;
#define TPG_FR_ANY_M INT_MAX
#define TPG_FR_ANY_W LONG_MAX
#define TPG_FR_ANY_K INT_MAX
#include "lib/gemm/family_table.inc"

/* The families, in the order their candidates are listed (a tuner on a
 * budget times the first ones first); ours last, the fallback. A test may
 * compile this file with a list of its own (tests/cpu/gemm_dispatch_test.c:
 * a stand-in family). */
#ifndef TPG_GEMM_FAMILY_LIST
#define TPG_GEMM_FAMILY_LIST &tpg_gemm_family_cublaslt, &tpg_gemm_family_cutlass, &tpg_gemm_family_ours
#endif
static const tpg_gemm_family_ops *const kFamilies[] = {TPG_GEMM_FAMILY_LIST};
#define NFAM ((int)(sizeof kFamilies / sizeof kFamilies[0]))

const char *tpg_gemm_family_table_source(void) { return TPG_FAMILY_TABLE_SOURCE; }

static const tpg_gemm_family_ops *family_ops(int id) {
  for (int i = 0; i < NFAM; ++i)
    if (kFamilies[i]->id == id) return kFamilies[i];
  return NULL;
}

static const tpg_gemm_family_ops *owner_of(const tpg_gemm_variant *v) {
  for (int i = 0; i < NFAM; ++i)
    if (kFamilies[i]->owns(v)) return kFamilies[i];
  return NULL;
}

const char *tpg_gemm_family_name(int family) {
  const tpg_gemm_family_ops *f = family_ops(family);
  return family == TPG_GEMM_FAMILY_AUTO ? "auto" : f ? f->name : "?";
}

int tpg_gemm_family_parse(const char *s) {
  if (!s) return -1;
  if (!strcmp(s, "auto") || !strcmp(s, "0")) return TPG_GEMM_FAMILY_AUTO;
  for (int i = 0; i < NFAM; ++i) {
    char num[8];
    snprintf(num, sizeof num, "%d", kFamilies[i]->id);
    if (!strcmp(s, kFamilies[i]->name) || !strcmp(s, num)) return kFamilies[i]->id;
  }
  return -1;
}

int tpg_gemm_family_available(int family, char *why, size_t whylen) {
  const tpg_gemm_family_ops *f = family_ops(family);
  if (!f) return tpg_gemm_reject(why, whylen, "family=%d: not a GEMM family", family);
  return f->available ? f->available(why, whylen) : 0;
}

/* Whether family f can run p; a family the process lacks (cuBLASLt not
 * loaded) says why once, on stderr, the first time a rule wants it. */
static int can_run(const tpg_gemm_family_ops *f, const tpg_gemm_problem *p) {
  char why[400];
  if (f->available && f->available(why, sizeof why)) {
    static int said;
    if (!__atomic_exchange_n(&said, 1, __ATOMIC_RELAXED))
      fprintf(stderr, "tpgraph: note: GEMM family %s left out: %s\n", f->name, why);
    return 0;
  }
  return !f->can_implement(p, NULL, 0);
}

/* The first row of table t (n rows) whose class holds p and whose family
 * can run it; NULL: none. */
static const tpg_family_row *row_of(const tpg_family_row *t, size_t n, const tpg_gemm_problem *p) {
  const long wrows = tpg_gemm_wrows(p);
  for (size_t i = 0; i < n; ++i) {
    const tpg_gemm_family_ops *f = family_ops(t[i].family);
    if (p->m <= t[i].m_max && wrows <= t[i].wrows_max && p->k <= t[i].k_max && f && can_run(f, p)) return &t[i];
  }
  return NULL;
}

/* The family and its variant that `family` asks for on p; ours (kind OURS)
 * where the table names none, the family cannot run p or its rule refuses.
 * The tables were fitted on one architecture: elsewhere AUTO is ours. */
static const tpg_gemm_family_ops *choose(const tpg_gemm_problem *p, int family, tpg_gemm_variant *v) {
  const tpg_family_row *r = NULL;
  const tpg_gemm_family_ops *f = NULL;
  if (family == TPG_GEMM_FAMILY_AUTO && p->arch == TPG_FAMILY_TABLE_ARCH)
    r = row_of(kFamilyAuto, sizeof kFamilyAuto / sizeof kFamilyAuto[0], p);
  else if (family == TPG_GEMM_FAMILY_CUTLASS)
    r = row_of(kFamilyCutlass, sizeof kFamilyCutlass / sizeof kFamilyCutlass[0], p);
  else if (family != TPG_GEMM_FAMILY_AUTO && family != TPG_GEMM_FAMILY_OURS && (f = family_ops(family)) &&
           can_run(f, p) && !f->rule(p, 0, 0, v))
    return f;
  if (r && (f = family_ops(r->family)) != &tpg_gemm_family_ours && !f->rule(p, r->kernel, r->mode, v)) return f;
  tpg_gemm_family_ours.rule(p, 0, 0, v);
  return &tpg_gemm_family_ours;
}

static int check_family(int family, char *why, size_t whylen) {
  if (family == TPG_GEMM_FAMILY_AUTO || family_ops(family)) return 0;
  return tpg_gemm_reject(why, whylen, "family=%d: TPG_GEMM_FAMILY_AUTO, _OURS, _CUTLASS or _CUBLASLT", family);
}

int tpg_gemm_select_rule_variant(const tpg_gemm_problem *p, int family, tpg_gemm_variant *v, char *why,
                                 size_t whylen) {
  tpg_kernel_launch l;
  tpg_tma_encode x, w;
  if (!v) return tpg_gemm_reject(why, whylen, "variant is NULL");
  if (check_family(family, why, whylen)) return 1;
  /* ours first: it checks the shape with the rule's messages */
  if (tpg_gemm_family_ours.fill(p, &(tpg_gemm_variant){.kind = TPG_GEMM_VAR_OURS}, &l, &x, &w, why, whylen)) return 1;
  const tpg_gemm_family_ops *f = choose(p, family, v);
  /* a variant that cannot run the shape after all (leading dimensions) leaves ours */
  if (f != &tpg_gemm_family_ours && f->fill(p, v, &l, &x, &w, NULL, 0)) tpg_gemm_family_ours.rule(p, 0, 0, v);
  if (why && whylen) why[0] = '\0';
  return 0;
}

int tpg_gemm_select_rule(const tpg_gemm_problem *p, int family, tpg_kernel_launch *out, tpg_tma_encode *x_map,
                         tpg_tma_encode *w_map, char *why, size_t whylen) {
  tpg_gemm_variant v;
  if (tpg_gemm_select_rule_variant(p, family, &v, why, whylen)) return 1;
  if (!out) return tpg_gemm_reject(why, whylen, "out is NULL");
  return owner_of(&v)->fill(p, &v, out, x_map, w_map, why, whylen);
}

int tpg_gemm_select_variant(const tpg_gemm_problem *p, const tpg_gemm_variant *v, tpg_kernel_launch *out,
                            tpg_tma_encode *x_map, tpg_tma_encode *w_map, char *why, size_t whylen) {
  const tpg_gemm_family_ops *f;
  if (!v) return tpg_gemm_reject(why, whylen, "variant is NULL");
  if (!out) return tpg_gemm_reject(why, whylen, "out is NULL");
  if (v->kind == TPG_GEMM_VAR_HEURISTIC) return tpg_gemm_select_rule(p, TPG_GEMM_FAMILY_AUTO, out, x_map, w_map, why, whylen);
  if (!(f = owner_of(v))) return tpg_gemm_reject(why, whylen, "variant kind=%d: unknown", v->kind);
  if (x_map) memset(x_map, 0, sizeof *x_map);
  if (w_map) memset(w_map, 0, sizeof *w_map);
  /* the shape, dtype and architecture rules first, with their messages */
  if (tpg_gemm_problem_check(p, why, whylen) || f->can_implement(p, why, whylen)) return 1;
  if (f->fill(p, v, out, x_map, w_map, why, whylen)) return 1;
  if (why && whylen) why[0] = '\0';
  return 0;
}

int tpg_gemm_workspace_size(const tpg_gemm_problem *p, const tpg_gemm_variant *v, size_t *bytes, char *why,
                            size_t whylen) {
  tpg_kernel_launch l;
  tpg_tma_encode x, w;
  const tpg_gemm_family_ops *f;
  if (!v || !bytes) return tpg_gemm_reject(why, whylen, "variant or bytes is NULL");
  if (v->kind == TPG_GEMM_VAR_HEURISTIC) {
    if (tpg_gemm_select_rule(p, TPG_GEMM_FAMILY_AUTO, &l, &x, &w, why, whylen)) return 1;
    *bytes = l.workspace_bytes;
    return 0;
  }
  if (!(f = owner_of(v))) return tpg_gemm_reject(why, whylen, "variant kind=%d: unknown", v->kind);
  if (tpg_gemm_problem_check(p, why, whylen) || f->can_implement(p, why, whylen)) return 1;
  return f->workspace_size(p, v, bytes, why, whylen);
}

int tpg_gemm_candidates(const tpg_gemm_problem *p, tpg_gemm_variant *list, int cap) {
  int cnt = 0;
  if (cap < 1 || !p) return 0;
  if (list) {
    memset(&list[0], 0, sizeof list[0]);
    list[0].kind = TPG_GEMM_VAR_HEURISTIC;
  }
  ++cnt;
  if (tpg_gemm_problem_check(p, NULL, 0)) return cnt;
  for (int i = 0; i < NFAM && cnt < cap; ++i) {
    if (kFamilies[i]->can_implement(p, NULL, 0)) continue;
    cnt += kFamilies[i]->candidates(p, list ? list + cnt : NULL, cap - cnt);
  }
  return cnt;
}

int tpg_gemm_variant_name(const tpg_gemm_variant *v, char *buf, size_t len) {
  const tpg_gemm_family_ops *f;
  int r;
  if (!v || !buf || !len) return 1;
  if (v->kind == TPG_GEMM_VAR_HEURISTIC) {
    r = snprintf(buf, len, "heuristic");
    return r < 0 || (size_t)r >= len;
  }
  if (!(f = owner_of(v))) {
    snprintf(buf, len, "?");
    return 1;
  }
  return f->variant_name(v, buf, len);
}

int tpg_gemm_variant_parse(const char *s, tpg_gemm_variant *v) {
  if (!s || !v) return 1;
  memset(v, 0, sizeof *v);
  if (!strcmp(s, "heuristic")) return 0; /* kind TPG_GEMM_VAR_HEURISTIC */
  for (int i = 0; i < NFAM; ++i)
    if (!kFamilies[i]->variant_parse(s, v)) return 0;
  memset(v, 0, sizeof *v);
  return 1;
}

int tpg_gemm_variant_family(const tpg_gemm_variant *v) {
  const tpg_gemm_family_ops *f = v && v->kind != TPG_GEMM_VAR_HEURISTIC ? owner_of(v) : NULL;
  return f ? f->id : TPG_GEMM_FAMILY_AUTO;
}
