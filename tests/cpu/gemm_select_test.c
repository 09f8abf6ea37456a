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
  /* The Hopper TMA path and its stream-K choice. */
  {
    tpg_tma_encode xe, we;
    /* M = 128 at 7168 -> 4096: 32 tiles of 128 for 132 SMs: stream-K on
     * BN 128, whole grid, counters + 2 partial tiles per CTA. */
    CHECK(tpg_gemm_select_tma(128, 4096, 7168, TPG_KDT_BF16, TPG_EPI_RESIDUAL, 90, 132, 7168, 7168, 1, &l, &xe, &we,
                              why, sizeof why) == 0);
    CHECK(strcmp(l.kernel, "tpg_gemm_sm90tma_bf16_n128") == 0 && l.split_k == TPG_SPLITK_STREAM);
    CHECK(l.grid[0] == 132 && xe.rank == 2 && we.rank == 2 && we.box[1] == 128);
    CHECK(l.workspace_bytes == tpg_sk_workspace_bytes(32, 132, 128) && l.workspace_zeroed == 256);
    /* streamk 0: whole tiles, no workspace */
    CHECK(tpg_gemm_select_tma(128, 4096, 7168, TPG_KDT_BF16, TPG_EPI_RESIDUAL, 90, 132, 7168, 7168, 0, &l, &xe, &we,
                              why, sizeof why) == 0);
    CHECK(strcmp(l.kernel, "tpg_gemm_sm90tma_bf16_n128") == 0 && l.split_k == 1 && l.workspace_bytes == 0);
    CHECK(l.grid[0] == 32);
    /* 112 tiles at 8192 -> 14336 fill most SMs: whole tiles (stream-K measured slower) */
    CHECK(tpg_gemm_select_tma(128, 14336, 8192, TPG_KDT_BF16, TPG_EPI_BIAS_GELU, 90, 132, 8192, 8192, 1, &l, &xe, &we,
                              why, sizeof why) == 0);
    CHECK(l.split_k == 1 && l.workspace_bytes == 0 && l.grid[0] == 112 && we.box[1] == 128);
    /* 270 tiles = 2 full waves + 6: whole tiles by default (several waves:
     * measured no gain); forced, the kernel splits only the last wave */
    CHECK(tpg_gemm_select_tma(1152, 3840, 4096, TPG_KDT_BF16, TPG_EPI_NONE, 90, 132, 4096, 4096, 1, &l, &xe, &we,
                              why, sizeof why) == 0);
    CHECK(l.split_k == 1 && l.workspace_bytes == 0 && l.grid[0] == 132);
    CHECK(tpg_gemm_select_tma(1152, 3840, 4096, TPG_KDT_BF16, TPG_EPI_NONE, 90, 132, 4096, 4096, 2, &l, &xe, &we,
                              why, sizeof why) == 0);
    CHECK(l.split_k == TPG_SPLITK_STREAM && l.grid[0] == 132 && we.box[1] == 128);
    CHECK(l.workspace_bytes == tpg_sk_workspace_bytes(270, 132, 128));
    /* M = 4096: 1792 tiles: whole tiles */
    CHECK(tpg_gemm_select_tma(4096, 14336, 8192, TPG_KDT_BF16, TPG_EPI_NONE, 90, 132, 8192, 8192, 1, &l, &xe, &we,
                              why, sizeof why) == 0);
    CHECK(l.split_k == 1 && l.workspace_bytes == 0 && l.grid[0] == 132);
    /* forced on a one-K-block shape: the grid never exceeds tiles x K blocks (2 x 1 on BN 128) */
    CHECK(tpg_gemm_select_tma(32, 256, 64, TPG_KDT_F16, TPG_EPI_NONE, 90, 132, 64, 64, 2, &l, &xe, &we, why,
                              sizeof why) == 0);
    CHECK(l.split_k == TPG_SPLITK_STREAM && l.grid[0] == 2 && we.box[1] == 128 && strstr(l.kernel, "f16") != NULL);
    /* decode stays on the GEMV, whatever streamk says */
    CHECK(tpg_gemm_select_tma(8, 14336, 8192, TPG_KDT_BF16, TPG_EPI_NONE, 90, 132, 8192, 8192, 2, &l, &xe, &we, why,
                              sizeof why) == 0);
    CHECK(strstr(l.kernel, "gemv") != NULL && xe.rank == 0 && l.split_k == 1);
  }
  return TPG_TEST_END();
}
