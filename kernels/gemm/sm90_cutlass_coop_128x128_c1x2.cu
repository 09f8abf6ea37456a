/* sm90_cutlass_coop_128x128_c1x2.cu - row 1 of sm90_cutlass_list.h as a kernel
 * (tpg_cutlass_bf16_coop_128x128_c1x2). One file per CUTLASS kernel: each is one nvcc
 * action of about a minute, run once per workspace (tools/cuda/defs.bzl). */
#include "kernels/gemm/sm90_cutlass.cuh"

TPG_CUTLASS_ROW1(TPG_CUTLASS_ENTRY)
