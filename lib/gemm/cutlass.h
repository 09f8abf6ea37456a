/* cutlass.h - the CUTLASS GEMM family on the host: which kernels exist
 * (kernels/gemm/sm90_cutlass_list.h), what one launch of them looks like,
 * and the argument block it takes.
 *
 * C callers (the selector, the graph node, the tuner, the bench) see plain
 * data; the C++ that knows CUTLASS's Params lives in cutlass_params.cu,
 * compiled by nvcc as host code (tools/cuda/defs.bzl cuda_host_object: no
 * CUDA runtime, no libstdc++ in the object). CUTLASS encodes its own TMA
 * descriptors while it builds Params; it does so here through the encoder
 * the caller passes (the library: the driver's cuTensorMapEncodeTiled via
 * tpg_cu; the bench: the runtime's driver entry point; tests: a fake), so
 * the block depends on the pointers and a rebind rebuilds it whole
 * (graphbuild/nodes/gemm.c) instead of patching fields.
 */
#ifndef TPG_GEMM_CUTLASS_H
#define TPG_GEMM_CUTLASS_H

#include <cuda.h>
#include <stddef.h>

#include "kernels/gemm/sm90_cutlass_list.h"
#include "kernels/tpg_cutlass_args.h"
#include "lib/gemm/problem.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One row of sm90_cutlass_list.h. */
typedef struct tpg_cutlass_kernel {
  const char *name;  /* "coop_128x256_c2x1": variants are "cutlass_<name>[_sk|_k<S>]" */
  const char *entry; /* the extern "C" entry point, "tpg_cutlass_bf16_<name>"          */
  int tm, tn;        /* CTA tile in CUTLASS's M x N (swap: W rows x tokens)            */
  int cm, cn;        /* cluster shape                                                   */
  int sched;         /* TPG_CUTLASS_SCHED_*                                             */
  int swap;          /* 1: Y^T = W X^T, tokens on the tile's N side                     */
} tpg_cutlass_kernel;
extern const tpg_cutlass_kernel tpg_cutlass_kernels[TPG_CUTLASS_COUNT];

typedef struct tpg_cutlass_problem {
  int kernel;          /* index into tpg_cutlass_kernels                         */
  int mode, splits;    /* TPG_CUTLASS_*; splits 2..16 with SPLIT, else ignored   */
  int m, n, k;         /* Y[m, n] = epi(X[m, k] W[n, k]^T)                       */
  int ldx, ldw, ldy, ldr; /* leading dimensions in elements (multiples of 8)     */
  int dtype;           /* TPG_KDT_BF16 (the only one compiled)                   */
  int epilogue;        /* TPG_EPI_NONE, _BIAS, _BIAS_GELU, _BIAS_SILU, _RESIDUAL */
  int num_sms;         /* SMs the persistent grid may fill                       */
} tpg_cutlass_problem;

/* cuTensorMapEncodeTiled's signature with a context in front. */
typedef CUresult (*tpg_cutlass_encode_fn)(void *ctx, CUtensorMap *map, CUtensorMapDataType dtype, cuuint32_t rank,
                                          void *base, const cuuint64_t *dims, const cuuint64_t *strides,
                                          const cuuint32_t *box, const cuuint32_t *elem_strides,
                                          CUtensorMapInterleave interleave, CUtensorMapSwizzle swizzle,
                                          CUtensorMapL2promotion l2, CUtensorMapFloatOOBfill oob);

/* Whether the family can run the problem at all (kernel index, dtype,
 * epilogue, mode); 0 or nonzero with the reason. */
int tpg_cutlass_check(const tpg_cutlass_problem *p, char *why, size_t whylen);

/* The launch of p: kernel name, grid (CUTLASS's persistent grid for
 * num_sms), block 384, dynamic shared memory, cluster (cluster x
 * cluster_y), workspace_bytes (TPG_CUTLASS_WS_HEAD + CUTLASS's; zeroed once
 * at allocation, left zero by every launch), and the cutlass* fields. No
 * pointers needed. 0, or nonzero with the reason (naming the argument). */
int tpg_cutlass_launch(const tpg_cutlass_problem *p, tpg_kernel_launch *out, char *why, size_t whylen);

/* The argument block for the pointers in `a` (x, w, y, bias, residual,
 * workspace, as any GEMM kernel takes them; a->workspace must hold the
 * launch's workspace_bytes): a copied in, CUTLASS's Params built with every
 * TMA descriptor encoded by `enc`, and the reduction's barrier words
 * located. Fails (nonzero, the reason and the first failing encode's
 * CUresult in *cu when cu is not NULL) when CUTLASS refuses the problem
 * or an encode fails; *out is then zeroed. */
int tpg_cutlass_fill(const tpg_cutlass_problem *p, const tpg_gemm_args *a, tpg_cutlass_encode_fn enc, void *enc_ctx,
                     tpg_gemm_cutlass_args *out, CUresult *cu, char *why, size_t whylen);

#ifdef __cplusplus
}
#endif
#endif
