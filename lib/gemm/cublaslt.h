/* cublaslt.h - the cuBLASLt GEMM family's plans: one GEMM set up for
 * cublasLtMatmul (handle, descriptors, layouts, the algorithm fixed when
 * the plan is made), as the graph node, the tuner's timer and gemm_bench
 * run it. How the family is chosen and why a node captures it: cublaslt.c.
 *
 * Plain C11, no CUDA headers (a stream is a CUstream / cudaStream_t passed
 * as void *).
 */
#ifndef TPG_GEMM_CUBLASLT_H
#define TPG_GEMM_CUBLASLT_H

#include <stddef.h>

#include "kernels/tpg_kargs.h"
#include "lib/gemm/problem.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Answers of cuBLASLt's heuristic a variant may name (problem.h:
 * "cublaslt", "cublaslt_a1" .. "_a3"). */
#define TPG_LT_ALGOS 4
/* The most workspace a plan may ask for (what PyTorch gives cuBLASLt on
 * Hopper); each plan gets what its algorithm needs, often nothing. */
#define TPG_LT_WORKSPACE_MAX ((size_t)32 << 20)

/* The most a SwiGLU plan's 16-bit product (m x 2n) may take of workspace. */
#define TPG_LT_SWIGLU_MAX ((size_t)512 << 20)

typedef struct tpg_lt_plan tpg_lt_plan;

/* The kernel of ours that finishes a plan's operation after its
 * cublasLtMatmul (tpg_lt_plan_post): its name, launch shape (no shared
 * memory, no cluster) and argument block. */
typedef struct tpg_lt_post {
  const char *kernel;
  unsigned grid[3], block[3];
  tpg_swiglu_args args;
} tpg_lt_post;

/* Whether cuBLASLt is loaded (it is, at the first call that needs it): 0, or
 * nonzero with why (the file that could not be loaded). */
int tpg_lt_available(char *why, size_t whylen);

/* The plan of p with the heuristic's answer `algo` (0..TPG_LT_ALGOS-1), for
 * any x, w, y, bias, residual aligned to 16 bytes. Needs the device's
 * context current; ctx names it (the plans of one context share a cuBLASLt
 * handle), or is NULL for a handle of the plan's own. Returns 0, or
 * nonzero with why (a cuBLASLt status, an epilogue it cannot fuse, fewer
 * answers than algo + 1); *out is NULL then and nothing is left allocated.
 * *out: owned by the caller. */
int tpg_lt_plan_create(const tpg_gemm_problem *p, int algo, const void *ctx, tpg_lt_plan **out, char *why,
                       size_t whylen);

/* The workspace its algorithm needs (bytes; 0: none). */
size_t tpg_lt_plan_workspace(const tpg_lt_plan *pl);

/* Enqueues the GEMM on stream with a's pointers (x, w, y, bias, residual;
 * a->workspace holding tpg_lt_plan_workspace bytes, NULL when 0): the
 * residual is cuBLASLt's C with beta = 1, in place when it is y. The
 * plan's attributes are written, so one plan runs on one thread at a time.
 * 0, or nonzero with why (the cuBLASLt status). A SwiGLU plan's y is
 * written only by the kernel tpg_lt_plan_post names, which the caller
 * launches next on the same stream (lib/gemm/lt_run.h does both). */
int tpg_lt_plan_run(tpg_lt_plan *pl, const tpg_gemm_args *a, void *stream, char *why, size_t whylen);

/* 1 and *out for a's pointers when the plan's operation ends in a kernel of
 * ours after tpg_lt_plan_run (SwiGLU); 0 (and *out zeroed) when the GEMM is
 * the whole of it. */
int tpg_lt_plan_post(const tpg_lt_plan *pl, const tpg_gemm_args *a, tpg_lt_post *out);

/* Frees the plan; NULL: no-op. */
void tpg_lt_plan_destroy(tpg_lt_plan *pl);

/* Forgets the heuristic's answers kept for each problem (tests). */
void tpg_lt_cache_reset(void);

#ifdef __cplusplus
}
#endif
#endif
