/* sm90_cutlass_ping_64x96_c2x1.cu - row 4 of sm90_cutlass_list.h as a kernel
 * (tpg_cutlass_bf16_ping_64x96_c2x1). One file per CUTLASS kernel: each is one nvcc
 * action of about a minute, run once per workspace (tools/cuda/defs.bzl). */
#include "kernels/gemm/sm90_cutlass.cuh"

TPG_CUTLASS_ROW4(TPG_CUTLASS_ENTRY)
