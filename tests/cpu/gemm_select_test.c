/* gemm_select_test.c - the GEMM selection table and its shape rules. */
#include <stdio.h>
#include <string.h>

#include "kernels/tpg_kargs.h"
#include "lib/gemm_select.h"
#include "tests/tpg_test.h"

int main(void) {
  tpg_kernel_launch l;
  char why[200];
  CHECK(tpg_gemm_select(1, 14336, 8192, TPG_KDT_BF16, TPG_EPI_NONE, 90, 132, &l, why, sizeof why) == 0);
  CHECK(strstr(l.kernel, "gemv") != NULL && l.grid[0] > 0 && l.block[0] > 0);
  CHECK(tpg_gemm_select(64, 14336, 8192, TPG_KDT_BF16, TPG_EPI_BIAS, 90, 132, &l, why, sizeof why) == 0);
  CHECK(strstr(l.kernel, "gemv") != NULL);
  CHECK(tpg_gemm_select(4096, 14336, 8192, TPG_KDT_BF16, TPG_EPI_NONE, 90, 132, &l, why, sizeof why) == 0);
  CHECK(strstr(l.kernel, "sm90") != NULL && l.grid[0] <= 132);
  CHECK(tpg_gemm_select(4096, 14336, 8192, TPG_KDT_F16, TPG_EPI_NONE, 80, 108, &l, why, sizeof why) == 0);
  CHECK(strstr(l.kernel, "mma") != NULL && strstr(l.kernel, "f16") != NULL);
  CHECK(tpg_gemm_select(17, 100, 64, TPG_KDT_BF16, TPG_EPI_NONE, 90, 132, &l, why, sizeof why) != 0);
  CHECK(strstr(why, "multiple of 8") != NULL);
  CHECK(tpg_gemm_select(17, 64, 60, TPG_KDT_BF16, TPG_EPI_NONE, 90, 132, &l, why, sizeof why) != 0);
  CHECK(strstr(why, "k=60") != NULL);
  CHECK(tpg_gemm_select(0, 64, 64, TPG_KDT_BF16, TPG_EPI_NONE, 90, 132, &l, why, sizeof why) != 0);
  CHECK(tpg_gemm_select(8, 64, 64, TPG_KDT_F32, TPG_EPI_NONE, 90, 132, &l, why, sizeof why) != 0);
  CHECK(tpg_gemm_select(8, 64, 64, TPG_KDT_BF16, TPG_EPI_NONE, 75, 40, &l, why, sizeof why) != 0);
  CHECK(strstr(why, "sm_80") != NULL);
  return TPG_TEST_END();
}
