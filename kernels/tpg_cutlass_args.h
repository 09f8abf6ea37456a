/* tpg_cutlass_args.h - the argument block of the CUTLASS GEMM kernels
 * (kernels/gemm/sm90_cutlass*.cu), shared by C11 host code and CUDA.
 *
 * A CUTLASS kernel takes its own `Params` (TMA descriptors of X, W, Y and
 * the residual, epilogue and scheduler parameters), whose layout only C++
 * with CUTLASS's headers knows (lib/gemm/cutlass_params.cu builds it). Our
 * entry points wrap it in one fixed-size block so that a graph node, the
 * tuner and the stand-in driver handle every CUTLASS kernel alike:
 *   a          the plain GEMM view, as every other GEMM kernel takes it:
 *              pointers, shape, epilogue. The kernel reads only the
 *              workspace from it; it is what a rebind rewrites first and
 *              what the stand-in driver checks (bounds, and that each tensor
 *              map inside `params` maps one of these pointers).
 *   done, locks  stream-K / split-K only (NULL otherwise): CUTLASS's tile
 *              reduction counts on barrier words that must be zero at every
 *              launch, and CUTLASS zeroes them with a memset before each
 *              launch. Ours instead counts finished CTAs in `done` and the
 *              last one zeroes `locks` and `done`, so a graph node needs no
 *              memset node (the contract of tpg_kernel_launch.workspace).
 *   params     CUTLASS's Params, params_bytes of them, 128-byte aligned (TMA
 *              descriptors); a larger Params does not compile (static_assert).
 */
#ifndef TPG_CUTLASS_ARGS_H
#define TPG_CUTLASS_ARGS_H

#include "tpg_tma_args.h"

#ifdef __cplusplus
extern "C" {
#endif

/* CUTLASS 4.2's Params of the kernels in sm90_cutlass_list.h: 1792-1920
 * bytes, 128-byte aligned (four TMA descriptors and the scheduler's). */
#define TPG_CUTLASS_PARAMS_MAX 2048
#define TPG_CUTLASS_MAPS_MAX 8
#ifdef __cplusplus
#define TPG_ALIGN128 alignas(128)
#else
#define TPG_ALIGN128 _Alignas(128)
#endif

typedef struct tpg_gemm_cutlass_args {
  tpg_gemm_args a;
  uint32_t *done;        /* workspace: CTAs that finished (left 0)          */
  uint32_t *locks;       /* workspace: CUTLASS's reduction barriers (left 0) */
  uint64_t lock_words;   /* uint32 words at locks                            */
  uint32_t ctas;         /* grid size: the CTA that makes done == ctas is last */
  uint32_t params_bytes; /* sizeof(Params) of this kernel                    */
  uint32_t nmaps;        /* the TMA descriptors in params (A, B, C, D),       */
  uint16_t map_off[TPG_CUTLASS_MAPS_MAX]; /* at these offsets (from CUTLASS's
                            accessors; the kernel does not read this): what a
                            checker may hold to mapping x, w, y or residual */
  TPG_ALIGN128 unsigned char params[TPG_CUTLASS_PARAMS_MAX];
} tpg_gemm_cutlass_args;

/* Workspace bytes in front of CUTLASS's own: the `done` counter. */
#define TPG_CUTLASS_WS_HEAD 256

#ifdef __cplusplus
}
#endif
#endif
