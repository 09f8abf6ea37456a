/* ours.h - our own GEMM kernels' selection, for what tests, benchmarks and
 * the graph node ask of this family directly (everything else goes through
 * select.h): the plain choice per architecture, the Hopper rule fitted on
 * the model zoo, and the Y map of the TMA kernels.
 */
#ifndef TPG_GEMM_OURS_H
#define TPG_GEMM_OURS_H

#include <stddef.h>

#include "lib/gemm/problem.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Our kernel for p without the TMA kernels: the decode GEMV for m <= 64,
 * else tpg_gemm_sm90_* on sm_90 and tpg_gemm_mma_* elsewhere (the table in
 * ours.c). Returns 0 and fills *out, or nonzero with the failed rule in why
 * (tpg_gemm_problem_check's). Also required, not checkable here (the caller
 * checks): x, w, y, bias, residual 16-byte aligned. */
int tpg_gemm_select(const tpg_gemm_problem *p, tpg_kernel_launch *out, char *why, size_t whylen);

/* Like tpg_gemm_select, but on arch 90 for m > 8 it may pick the TMA
 * kernels (the rule derived from the model zoo, ours_rule.c and
 * bench/zoo_rules.py) and then fills x_map / w_map (rank 0 otherwise). A
 * pure function of p: every rank picks the same. p->streamk (TMA picks
 * only): 0 never, 1 when the cost model says it pays, 2 always (tests):
 * stream-K sets split_k = TPG_SPLITK_STREAM and a workspace whose first
 * workspace_zeroed bytes (counters) the kernel leaves zero. */
int tpg_gemm_select_tma(const tpg_gemm_problem *p, tpg_kernel_launch *out, tpg_tma_encode *x_map,
                        tpg_tma_encode *w_map, char *why, size_t whylen);

/* The Y map of every TMA kernel (the epilogue's stores; the dtype is the
 * operands', also for F32_PARTIAL, whose kernels do not read it): rank 2
 * {n, m}, stride ldy * 2 bytes, box {32, 64}, swizzle 64. */
void tpg_gemm_y_map(int m, int n, int ldy, tpg_tma_encode *y_map);

#ifdef __cplusplus
}
#endif
#endif
