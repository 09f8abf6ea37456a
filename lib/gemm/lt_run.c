/* lt_run.c - lt_run.h: a cuBLASLt plan and the kernel that ends it. */
#include "lib/gemm/lt_run.h"

#include "lib/device.h"
#include "lib/internal.h"

tpg_status tpg_lt_run(tpg_lt_plan *pl, const tpg_gemm_args *a, CUstream stream, const char *who) {
  char why[300];
  tpg_lt_post post;
  CUfunction f;
  if (tpg_lt_plan_run(pl, a, (void *)stream, why, sizeof why))
    return TPG_FAIL(TPG_ERROR_CUDA, "%s: cuBLASLt: %s", who, why);
  if (!tpg_lt_plan_post(pl, a, &post)) return TPG_SUCCESS;
  TPG_TRY(tpg_kernel_function(post.kernel, 0, &f));
  void *params[1] = {&post.args};
  CUresult r = tpg_cu->cuLaunchKernel(f, post.grid[0], post.grid[1], post.grid[2], post.block[0], post.block[1],
                                      post.block[2], 0, stream, params, NULL);
  return r == CUDA_SUCCESS ? TPG_SUCCESS : tpg_cu_fail(r, __func__, "cuLaunchKernel (tpg_lt_swiglu after cuBLASLt)");
}
