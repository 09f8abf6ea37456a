/* gemm_lt.h - a GEMM node that cuBLASLt runs (gemm.c hands it over when the
 * rule or the tuner picks the cuBLASLt family): one cublasLtMatmul with the
 * plan fixed at fill, a child graph in the CUDA graph (why: lib/gemm/
 * cublaslt.c). Internal to graphbuild/nodes/.
 */
#ifndef TPG_NODES_GEMM_LT_H
#define TPG_NODES_GEMM_LT_H

#include "graphbuild/nodes/common.h"
#include "lib/gemm/problem.h"

/* Whether the node is a cuBLASLt one (its state in gn->ext). */
static inline int tpg_gemm_lt_node(const tpg_gnode *gn) { return gn->ext != NULL; }

/* Makes the node's plan for problem p and the launch l picked (replacing
 * one an earlier fill made); the caller has set the node's argument view
 * (gn->args.gemm) but for the pointers, and sets them after. */
TPG_HIDDEN tpg_status tpg_gemm_lt_fill(const tpg_nctx *c, const tpg_gemm_problem *p, const tpg_kernel_launch *l);
/* Adds the node as a child graph holding the captured cublasLtMatmul. */
TPG_HIDDEN tpg_status tpg_gemm_lt_add(const tpg_nctx *c, CUgraph graph, const tpg_deps *deps);
/* Runs it on stream (eager mode, and what capture mode captures). */
TPG_HIDDEN tpg_status tpg_gemm_lt_run(const tpg_nctx *c, CUstream stream);
/* Applies new pointers (already in the argument view) to the exec:
 * captures again and swaps the child in when one of them moved. */
TPG_HIDDEN tpg_status tpg_gemm_lt_patch(const tpg_nctx *c);
/* Frees the plan (not the workspace: the graph's). */
TPG_HIDDEN void tpg_gemm_lt_release(tpg_gnode *gn);

#endif
