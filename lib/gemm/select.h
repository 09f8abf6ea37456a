/* select.h - which GEMM kernel runs a problem: the rule between the
 * families (ours, CUTLASS, cuBLASLt), forced variants, and the candidates a
 * tuner times.
 *
 * Plain C11, no CUDA headers: the graph builder calls this and then runs
 * the launch (problem.h says how); the tuner (tune.h) times the candidates
 * and picks among them; the benchmarks call it to launch exactly what the
 * library would. The rule: select.c and docs/gemm.md.
 */
#ifndef TPG_GEMM_SELECT_H
#define TPG_GEMM_SELECT_H

#include <stddef.h>

#include "lib/gemm/problem.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The deterministic rule: `family` TPG_GEMM_FAMILY_AUTO (the default) takes
 * the shape class's family from the table (family_table.inc, fitted on a
 * zoo run by bench/family_rules.py), ours where it names none or where the
 * family it names cannot run p; _OURS, _CUTLASS, _CUBLASLT force a family
 * wherever it can run p (ours elsewhere: an A/B switch). A pure function of
 * its arguments and of which families this process has (every rank picks
 * the same). Returns 0 and fills *out (and the TMA map recipes, rank 0 when
 * the kernel takes none), or nonzero with the rule that failed in why. */
int tpg_gemm_select_rule(const tpg_gemm_problem *p, int family, tpg_kernel_launch *out, tpg_tma_encode *x_map,
                         tpg_tma_encode *w_map, char *why, size_t whylen);

/* The variant the rule resolves to (what tpg_gemm_select_rule launches):
 * kind TPG_GEMM_VAR_OURS where ours runs it, else the family's variant.
 * For reports: tpg_gemm_variant_family names the family. */
int tpg_gemm_select_rule_variant(const tpg_gemm_problem *p, int family, tpg_gemm_variant *v, char *why,
                                 size_t whylen);

/* The launch of a forced variant on p: the shape rules first
 * (tpg_gemm_problem_check), then the variant's family's (a variant that
 * cannot run the shape is refused with the reason). The heuristic variant
 * is tpg_gemm_select_rule with TPG_GEMM_FAMILY_AUTO. */
int tpg_gemm_select_variant(const tpg_gemm_problem *p, const tpg_gemm_variant *v, tpg_kernel_launch *out,
                            tpg_tma_encode *x_map, tpg_tma_encode *w_map, char *why, size_t whylen);

/* The device workspace a variant needs on p (what its launch's
 * workspace_bytes says). 0 or nonzero with why. */
int tpg_gemm_workspace_size(const tpg_gemm_problem *p, const tpg_gemm_variant *v, size_t *bytes, char *why,
                            size_t whylen);

/* The candidate variants worth timing for p, the heuristic first, then each
 * family's that can run p (cuBLASLt's, CUTLASS's, then ours; a tuner on a
 * budget times them in this order); writes at most cap of them to list
 * (list may be NULL) and returns how many were written (at most
 * TPG_GEMM_MAX_CANDIDATES). Ours and CUTLASS list theirs on sm_90 only,
 * cuBLASLt wherever it is loaded. */
int tpg_gemm_candidates(const tpg_gemm_problem *p, tpg_gemm_variant *list, int cap);

/* Writes the variant's name; nonzero if it does not fit or kind is unknown. */
int tpg_gemm_variant_name(const tpg_gemm_variant *v, char *buf, size_t len);
/* Parses a name written by tpg_gemm_variant_name; nonzero if it is not one. */
int tpg_gemm_variant_parse(const char *s, tpg_gemm_variant *v);

/* Which family runs a variant: TPG_GEMM_FAMILY_OURS, _CUTLASS, _CUBLASLT;
 * the heuristic: TPG_GEMM_FAMILY_AUTO. */
int tpg_gemm_variant_family(const tpg_gemm_variant *v);

/* "auto", "ours", "cutlass", "cublaslt"; "?" for anything else. */
const char *tpg_gemm_family_name(int family);
/* The family a name (or its number) means, or -1. */
int tpg_gemm_family_parse(const char *s);
/* Whether the family can run anything in this process (a library family
 * that did not load cannot): 0, or nonzero with the reason in why. */
int tpg_gemm_family_available(int family, char *why, size_t whylen);

/* Where the family tables came from (family_table.inc), for reports. */
const char *tpg_gemm_family_table_source(void);

#ifdef __cplusplus
}
#endif
#endif
