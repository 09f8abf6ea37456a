/* tpg_tma_args.h - argument block for the TMA (tensor-map) GEMM kernels.
 *
 * Separate from tpg_kargs.h on purpose: these kernels need three CUtensorMap
 * objects that only the driver API (cuTensorMapEncodeTiled) can build on the
 * host, so the graph builder must encode them (and re-encode them when it
 * rebinds x, w or y). Layout: the three 128-byte, 64-byte-aligned tensor maps
 * first, then the ordinary tpg_gemm_args (its pointers still at fixed offsets).
 * See docs/kernels.md ("TMA kernels") for the exact encode parameters.
 */
#ifndef TPG_TMA_ARGS_H
#define TPG_TMA_ARGS_H

#include "tpg_kargs.h"

#ifdef __cplusplus
#define TPG_ALIGN64 alignas(64)
extern "C" {
#else
#define TPG_ALIGN64 _Alignas(64)
#endif

/* Same size and alignment as CUtensorMap (CU_TENSOR_MAP_NUM_QWORDS = 16). */
typedef struct tpg_tmap {
  TPG_ALIGN64 unsigned long long opaque[16];
} tpg_tmap;

typedef struct tpg_gemm_tma_args {
  tpg_tmap tx;       /* X: bf16/f16, rank 2, dims {K, M}, box {64, 128}, SWIZZLE_128B */
  tpg_tmap tw;       /* W: rank 2 {K, N} box {64, 256}; SWIGLU: rank 4
                        {K, 8, 2, N/8}, strides {ldw, N*ldw, 8*ldw} elements,
                        box {64, 8, 2, 16}; SWIZZLE_128B, OOB zero fill     */
  tpg_tmap ty;       /* Y (the epilogue's TMA stores): rank 2 {N, M} (N: outputs,
                        also for SWIGLU), stride ldy, box {32, 64}, SWIZZLE_64B;
                        encoded for every TMA kernel, read by the unswapped ones
                        (not for F32_PARTIAL, whose Y is fp32)                */
  tpg_gemm_args a;
} tpg_gemm_tma_args;

#ifdef __cplusplus
}
#endif
#endif
