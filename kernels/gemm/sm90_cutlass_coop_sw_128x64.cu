/* sm90_cutlass_coop_sw_128x64.cu - row 2 of sm90_cutlass_list.h as a kernel
 * (tpg_cutlass_bf16_coop_sw_128x64). One file per CUTLASS kernel: each is one nvcc
 * action of about a minute, run once per workspace (tools/cuda/defs.bzl). */
#include "kernels/gemm/sm90_cutlass.cuh"

TPG_CUTLASS_ROW2(TPG_CUTLASS_ENTRY)
