/* cutlass_stub.c - the CUTLASS family's host API for builds without nvcc
 * (the fuzzers, tests/fake/coverage.sh): the kernel table, and launches and
 * argument blocks refused with a reason.
 *
 * Bazel and CMake compile lib/gemm/cutlass_params.cu with nvcc (CUTLASS's
 * host code needs it); these clang builds link lib/ from source without it.
 * Nothing they run needs a CUTLASS kernel (the default family rule picks our
 * kernels; a refused candidate is skipped), so refusing is enough.
 */
#include <stdio.h>
#include <string.h>

#include "lib/gemm/cutlass.h"

const tpg_cutlass_kernel tpg_cutlass_kernels[TPG_CUTLASS_COUNT] = {
#define TPG_ROW(ID, NAME, TM, TN, CM, CN, SCHED, SWAP) {#NAME, "tpg_cutlass_bf16_" #NAME, TM, TN, CM, CN, SCHED, SWAP},
    TPG_CUTLASS_LIST(TPG_ROW)
#undef TPG_ROW
};

static int refuse(char *why, size_t whylen) {
  if (why && whylen) snprintf(why, whylen, "the CUTLASS kernels are not in this build (no nvcc host object)");
  return 1;
}

int tpg_cutlass_check(const tpg_cutlass_problem *p, char *why, size_t whylen) {
  (void)p;
  return refuse(why, whylen);
}

int tpg_cutlass_launch(const tpg_cutlass_problem *p, tpg_kernel_launch *out, char *why, size_t whylen) {
  (void)p;
  if (out) memset(out, 0, sizeof *out);
  return refuse(why, whylen);
}

int tpg_cutlass_fill(const tpg_cutlass_problem *p, const tpg_gemm_args *a, tpg_cutlass_encode_fn enc, void *enc_ctx,
                     tpg_gemm_cutlass_args *out, CUresult *cu, char *why, size_t whylen) {
  (void)p, (void)a, (void)enc, (void)enc_ctx;
  if (out) memset(out, 0, sizeof *out);
  if (cu) *cu = CUDA_SUCCESS;
  return refuse(why, whylen);
}
