/* gemm_select_test.c - the GEMM selection table and its shape rules. */
#include <stdio.h>
#include <string.h>

#include "kernels/tpg_kargs.h"
#include "lib/gemm/ours.h"
#include "lib/gemm/select.h"
#include "tests/cpu/gemm_test.h"
#include "tests/tpg_test.h"

int main(void) {
  gemm_test_without_cublaslt();
  tpg_kernel_launch l;
  char why[200];
  CHECK(tpg_gemm_select(PROB(1, 14336, 8192, TPG_KDT_BF16, TPG_EPI_NONE, 90, 132, 8192, 8192, 1), &l, why,
                        sizeof why) == 0);
  CHECK(strstr(l.kernel, "gemv") != NULL && l.grid[0] > 0 && l.block[0] > 0);
  CHECK(tpg_gemm_select(PROB(64, 14336, 8192, TPG_KDT_BF16, TPG_EPI_BIAS, 90, 132, 8192, 8192, 1), &l, why,
                        sizeof why) == 0);
  CHECK(strstr(l.kernel, "gemv") != NULL);
  CHECK(tpg_gemm_select(PROB(4096, 14336, 8192, TPG_KDT_BF16, TPG_EPI_NONE, 90, 132, 8192, 8192, 1), &l, why,
                        sizeof why) == 0);
  CHECK(strstr(l.kernel, "sm90") != NULL && l.grid[0] <= 132);
  CHECK(tpg_gemm_select(PROB(4096, 14336, 8192, TPG_KDT_F16, TPG_EPI_NONE, 80, 108, 8192, 8192, 1), &l, why,
                        sizeof why) == 0);
  CHECK(strstr(l.kernel, "mma") != NULL && strstr(l.kernel, "f16") != NULL);
  CHECK(tpg_gemm_select(PROB(17, 100, 64, TPG_KDT_BF16, TPG_EPI_NONE, 90, 132, 64, 64, 1), &l, why, sizeof why) != 0);
  CHECK(strstr(why, "multiple of 8") != NULL);
  CHECK(tpg_gemm_select(PROB(17, 64, 60, TPG_KDT_BF16, TPG_EPI_NONE, 90, 132, 60, 60, 1), &l, why, sizeof why) != 0);
  CHECK(strstr(why, "k=60") != NULL);
  CHECK(tpg_gemm_select(PROB(0, 64, 64, TPG_KDT_BF16, TPG_EPI_NONE, 90, 132, 64, 64, 1), &l, why, sizeof why) != 0);
  CHECK(tpg_gemm_select(PROB(8, 64, 64, TPG_KDT_F32, TPG_EPI_NONE, 90, 132, 64, 64, 1), &l, why, sizeof why) != 0);
  CHECK(tpg_gemm_select(PROB(8, 64, 64, TPG_KDT_BF16, TPG_EPI_NONE, 75, 40, 64, 64, 1), &l, why, sizeof why) != 0);
  CHECK(strstr(why, "sm_80") != NULL);
  /* The Hopper TMA path and its stream-K choice. */
  {
    tpg_tma_encode xe, we;
    /* The zoo-derived rule (lib/gemm/select.c, bench/zoo_rules.py). M = 128
     * at 7168 -> 4096: 64 tiles of 128 x 64, each K split over a cluster of
     * two ("_kc2": 128 CTAs, the cluster shape in the launch, no workspace;
     * X box 128 rows, W box 64). Stream-K forced: the whole grid and a
     * workspace. */
    CHECK(tpg_gemm_select_tma(PROB(128, 4096, 7168, TPG_KDT_BF16, TPG_EPI_RESIDUAL, 90, 132, 7168, 7168, 1), &l, &xe,
                              &we, why, sizeof why) == 0);
    CHECK(strcmp(l.kernel, "tpg_gemm_sm90tma_bf16_n64") == 0 && l.split_k == TPG_SPLITK_CLUSTER && l.cluster == 2 &&
          l.workspace_bytes == 0 && l.workspace_zeroed == 0);
    CHECK(l.grid[0] == 128 && xe.rank == 2 && we.rank == 2 && we.box[1] == 64 && xe.box[1] == 128);
    /* stream-K off (TPG_GEMM_STREAMK=0) splits no K at all: whole tiles, no cluster */
    CHECK(tpg_gemm_select_tma(PROB(128, 4096, 7168, TPG_KDT_BF16, TPG_EPI_RESIDUAL, 90, 132, 7168, 7168, 0), &l, &xe,
                              &we, why, sizeof why) == 0 &&
          l.split_k == 1 && l.cluster == 0 && l.workspace_bytes == 0);
    CHECK(tpg_gemm_select_tma(PROB(128, 4096, 7168, TPG_KDT_BF16, TPG_EPI_RESIDUAL, 90, 132, 7168, 7168, 2), &l, &xe,
                              &we, why, sizeof why) == 0);
    CHECK(l.split_k == TPG_SPLITK_STREAM && l.grid[0] == 132 && l.workspace_bytes > 0 && l.workspace_zeroed > 0);
    /* SwiGLU has no 64-row _c2: 128 x 4096 x 4096 takes a plain tile */
    CHECK(tpg_gemm_select_tma(PROB(128, 4096, 4096, TPG_KDT_BF16, TPG_EPI_SWIGLU, 90, 132, 4096, 4096, 1), &l, &xe, &we,
                              why, sizeof why) == 0);
    CHECK(strstr(l.kernel, "_c2") == NULL);
    /* streamk 0: whole tiles, no workspace, grid = tiles (swapped 64 x 64: 2 x 64) */
    CHECK(tpg_gemm_select_tma(PROB(128, 4096, 7168, TPG_KDT_BF16, TPG_EPI_RESIDUAL, 90, 132, 7168, 7168, 0), &l, &xe,
                              &we, why, sizeof why) == 0);
    CHECK(l.split_k == 1 && l.workspace_bytes == 0 && l.workspace_zeroed == 0 && l.grid[0] == 128);
    /* 112 tiles of 128 x 128 at 8192 -> 14336 fill most SMs: whole tiles (not
     * 64-row _c2 stream-K, which ran slower there in tpbench: zoo_rules.py SK_FIX) */
    CHECK(tpg_gemm_select_tma(PROB(128, 14336, 8192, TPG_KDT_BF16, TPG_EPI_BIAS_GELU, 90, 132, 8192, 8192, 1), &l, &xe,
                              &we, why, sizeof why) == 0);
    CHECK(strcmp(l.kernel, "tpg_gemm_sm90tma_bf16_n128") == 0 && l.split_k == 1 && l.workspace_bytes == 0 &&
          l.grid[0] == 112 && we.box[1] == 128);
    /* 1152 x 3840: whole 128 x 192 tiles (180: a full wave and 48), as
     * stream-K's k-steps cost 10% more in the model (zoo_rules.py SK_P);
     * forced stream-K, the same tiles with the last wave split (the kernel
     * splits only that one) */
    CHECK(tpg_gemm_select_tma(PROB(1152, 3840, 4096, TPG_KDT_BF16, TPG_EPI_NONE, 90, 132, 4096, 4096, 1), &l, &xe, &we,
                              why, sizeof why) == 0);
    CHECK(l.split_k == 1 && l.grid[0] == 132 && we.box[1] == 192 && l.workspace_bytes == 0);
    CHECK(tpg_gemm_select_tma(PROB(1152, 3840, 4096, TPG_KDT_BF16, TPG_EPI_NONE, 90, 132, 4096, 4096, 2), &l, &xe, &we,
                              why, sizeof why) == 0);
    CHECK(l.split_k == TPG_SPLITK_STREAM && l.grid[0] == 132 && we.box[1] == 192);
    CHECK(l.workspace_bytes == tpg_sk_workspace_bytes(180, 132, 192));
    /* M = 4096, N = 14336: the cost model takes 2-CTA clusters of 128 x 192 tiles (16 x 75 units on 66
     * clusters, stream-K over the last wave; each CTA loads half the W box); streamk 0: whole 128 x 256
     * tiles (1792) on the full grid, as _c2 is stream-K only */
    CHECK(tpg_gemm_select_tma(PROB(4096, 14336, 8192, TPG_KDT_BF16, TPG_EPI_NONE, 90, 132, 8192, 8192, 1), &l, &xe, &we,
                              why, sizeof why) == 0);
    CHECK(strcmp(l.kernel, "tpg_gemm_sm90tma_bf16_n192_c2") == 0 && l.grid[0] == 132 && we.box[1] == 96 &&
          xe.box[1] == 128 && l.split_k == TPG_SPLITK_STREAM && l.workspace_bytes == tpg_sk_workspace_bytes(2400, 132, 192));
    CHECK(tpg_gemm_select_tma(PROB(4096, 14336, 8192, TPG_KDT_BF16, TPG_EPI_NONE, 90, 132, 8192, 8192, 0), &l, &xe, &we,
                              why, sizeof why) == 0);
    CHECK(l.split_k == 1 && l.workspace_bytes == 0 && l.grid[0] == 132 && we.box[1] == 256);
    /* forced on a one-K-block shape: the grid never exceeds tiles x K blocks */
    CHECK(tpg_gemm_select_tma(PROB(33, 256, 64, TPG_KDT_F16, TPG_EPI_NONE, 90, 132, 64, 64, 2), &l, &xe, &we, why,
                              sizeof why) == 0);
    CHECK(l.split_k == TPG_SPLITK_STREAM && strcmp(l.kernel, "tpg_gemm_sm90tma_f16_sw32_n64") == 0 && xe.box[1] == 32);
    CHECK(l.grid[0] == 2 * (256 / we.box[1]) * 1); /* two 32-token tiles x four 64-row W tiles x one K block */
    /* M <= 16 stays on the GEMV, whatever streamk says; 4-warp CTAs from
     * 4608 W rows; no K split when the row tiles fill half the CTA slots
     * (896 tiles >= 0.5 x 4 CTAs x 132 SMs) */
    CHECK(tpg_gemm_select_tma(PROB(8, 14336, 8192, TPG_KDT_BF16, TPG_EPI_NONE, 90, 132, 8192, 8192, 2), &l, &xe, &we,
                              why, sizeof why) == 0);
    CHECK(strcmp(l.kernel, "tpg_gemv_bf16_m8w4") == 0 && xe.rank == 0 && l.split_k == 1 && l.grid[0] == 896 &&
          l.grid[1] == 1 && l.block[0] == 128 && l.workspace_bytes == 0);
    /* 48 tiles < 132 (half of 2 x 132 slots): K split in 3 ranges (144 CTAs);
     * counters rounded to 256 bytes, then 48 x 3 slots of 4 x 32 fp32 */
    CHECK(tpg_gemm_select_tma(PROB(1, 768, 4096, TPG_KDT_BF16, TPG_EPI_NONE, 90, 132, 4096, 4096, 1), &l, &xe, &we, why,
                              sizeof why) == 0);
    CHECK(strcmp(l.kernel, "tpg_gemv_bf16_m8") == 0 && l.grid[0] == 48 && l.grid[1] == 3 && l.block[0] == 256);
    CHECK(l.workspace_zeroed == 256 && l.workspace_bytes == 256 + 48 * 3 * 4 * 32 * 4);
    /* K = 512 is 16 chunks: too short to split */
    CHECK(tpg_gemm_select_tma(PROB(1, 256, 512, TPG_KDT_BF16, TPG_EPI_NONE, 90, 132, 512, 512, 1), &l, &xe, &we, why,
                              sizeof why) == 0);
    CHECK(strcmp(l.kernel, "tpg_gemv_bf16_m8") == 0 && l.grid[0] == 16 && l.grid[1] == 1 && l.workspace_bytes == 0);
    /* SwiGLU: 8 outputs (gate + up rows) per tile; 2048 W rows */
    CHECK(tpg_gemm_select(PROB(4, 1024, 4096, TPG_KDT_F16, TPG_EPI_SWIGLU, 90, 132, 4096, 4096, 1), &l, why,
                          sizeof why) == 0);
    CHECK(strcmp(l.kernel, "tpg_gemv_f16_m8") == 0 && l.grid[0] == 128 && l.grid[1] == 2);
    /* M = 9..16: the GEMV below 7168 W rows (4-warp CTAs), the swapped
     * 16-token tiles from there */
    CHECK(tpg_gemm_select_tma(PROB(16, 4096, 4096, TPG_KDT_BF16, TPG_EPI_NONE, 90, 132, 4096, 4096, 1), &l, &xe, &we,
                              why, sizeof why) == 0);
    CHECK(strcmp(l.kernel, "tpg_gemv_bf16_m16w4") == 0 && xe.rank == 0 && l.grid[0] == 256 && l.grid[1] == 2);
    CHECK(l.workspace_zeroed == 1024 && l.workspace_bytes == 1024 + 256 * 2 * 8 * 32 * 4 && l.block[0] == 128);
    CHECK(tpg_gemm_select_tma(PROB(16, 4096, 16384, TPG_KDT_BF16, TPG_EPI_NONE, 90, 132, 16384, 16384, 1), &l, &xe, &we,
                              why, sizeof why) == 0);
    CHECK(strcmp(l.kernel, "tpg_gemv_bf16_m16w4") == 0 && xe.rank == 0 && l.grid[1] == 2);
    CHECK(tpg_gemm_select_tma(PROB(16, 14336, 4096, TPG_KDT_BF16, TPG_EPI_NONE, 90, 132, 4096, 4096, 1), &l, &xe, &we,
                              why, sizeof why) == 0);
    CHECK(strcmp(l.kernel, "tpg_gemm_sm90tma_bf16_sw16_n128") == 0 && xe.rank == 2 && xe.box[1] == 16 &&
          we.box[1] == 128 && l.grid[0] == 112 && l.split_k == 1 && l.smem_bytes == 8 * 18432 + 1024 + 128);
    CHECK(tpg_gemm_select(PROB(16, 14336, 4096, TPG_KDT_BF16, TPG_EPI_NONE, 90, 132, 4096, 4096, 1), &l, why,
                          sizeof why) == 0);
    CHECK(strcmp(l.kernel, "tpg_gemv_bf16_m16") == 0 && l.grid[0] == 896 && l.grid[1] == 1 && l.block[0] == 256);
    /* M = 17..32: the GEMV for few W rows and K < 8192, else TMA */
    CHECK(tpg_gemm_select_tma(PROB(32, 4096, 8184, TPG_KDT_BF16, TPG_EPI_NONE, 90, 132, 8184, 8184, 1), &l, &xe, &we,
                              why, sizeof why) == 0);
    CHECK(strcmp(l.kernel, "tpg_gemv_bf16_m32") == 0 && xe.rank == 0);
    CHECK(tpg_gemm_select_tma(PROB(32, 4096, 8192, TPG_KDT_BF16, TPG_EPI_NONE, 90, 132, 8192, 8192, 1), &l, &xe, &we,
                              why, sizeof why) == 0);
    CHECK(strstr(l.kernel, "sm90tma") != NULL && xe.rank == 2);
    CHECK(tpg_gemm_select_tma(PROB(17, 2056, 4096, TPG_KDT_BF16, TPG_EPI_SWIGLU, 90, 132, 4096, 4096, 1), &l, &xe, &we,
                              why, sizeof why) == 0);
    CHECK(strstr(l.kernel, "sm90tma") != NULL && xe.rank == 2);
    /* ... whose leading dimensions the TMA maps must accept */
    CHECK(tpg_gemm_select_tma(PROB(40, 14336, 4096, TPG_KDT_BF16, TPG_EPI_NONE, 90, 132, 4000, 4096, 1), &l, &xe, &we,
                              why, sizeof why) != 0);
    /* off sm_90 the same shapes take tpg_gemm_select's kernels, no maps */
    CHECK(tpg_gemm_select_tma(PROB(16, 4096, 16384, TPG_KDT_BF16, TPG_EPI_NONE, 89, 128, 16384, 16384, 1), &l, &xe, &we,
                              why, sizeof why) == 0);
    CHECK(strstr(l.kernel, "gemv") != NULL && xe.rank == 0);
  }
  /* Forced variants: names round-trip, each candidate selects, refusals name the rule. */
  {
    tpg_tma_encode xe, we;
    tpg_gemm_variant v, list[TPG_GEMM_MAX_CANDIDATES], back;
    char name[64];
    static const int shapes[][4] = {{1, 14336, 8192, TPG_EPI_NONE},   {16, 4096, 14336, TPG_EPI_RESIDUAL},
                                    {32, 7168, 4096, TPG_EPI_SWIGLU}, {64, 1024, 4096, TPG_EPI_BIAS},
                                    {128, 4096, 7168, TPG_EPI_NONE},  {4096, 28672, 8192, TPG_EPI_SWIGLU},
                                    {17, 264, 520, TPG_EPI_BIAS_GELU}, {512, 1280, 8192, TPG_EPI_BIAS},
                                    {300, 1024, 192, TPG_EPI_SWIGLU}};
    size_t si;
    int ksplits = 0, kcs = 0; /* aligned split-K and K-over-a-cluster candidates seen (512 x 1280 x 8192 has them) */
    CHECK(tpg_gemm_variant_parse("tma_m64_n128_sk", &v) == 0 && v.kind == TPG_GEMM_VAR_TMA && v.bm == 64 &&
          v.bn == 128 && v.streamk == 1);
    CHECK(tpg_gemm_variant_parse("tma_m64_n96", &v) != 0);
    CHECK(tpg_gemm_variant_parse("tma_m128_n256_skx", &v) != 0);
    CHECK(tpg_gemm_variant_parse("", &v) != 0);
    /* swapped tiles: 16 / 32 / 64 tokens by 64 / 128 / 256 W rows; pairs (_c2) at 32 / 64 by 64 / 128 */
    CHECK(tpg_gemm_variant_parse("tma_m32_n128_sw_c2_sk", &v) == 0 && v.swap == 1 && v.bm == 32 && v.bn == 128 &&
          v.cluster == 2 && v.cluster_n == 0 && v.streamk == 1);
    CHECK(tpg_gemm_variant_parse("tma_m16_n64_sw", &v) == 0 && v.swap == 1 && v.cluster == 0 && v.streamk == 0);
    CHECK(tpg_gemm_variant_parse("tma_m16_n256_sw", &v) != 0);
    CHECK(tpg_gemm_variant_parse("tma_m32_n256_sw_c2", &v) != 0);
    CHECK(tpg_gemm_variant_parse("tma_m32_n64_sw_cn2", &v) != 0);
    CHECK(tpg_gemm_variant_parse("tma_m32_n64", &v) != 0); /* 32-token tiles are swapped ones only */
    CHECK(tpg_gemm_variant_parse("tma_m64_n192_sw", &v) != 0);
    /* aligned split-K: "_k<S>", S = 2..64, stream-K's summation */
    CHECK(tpg_gemm_variant_parse("tma_m128_n256_c2_k6", &v) == 0 && v.cluster == 2 && v.streamk == 1 && v.split == 6);
    CHECK(tpg_gemm_variant_name(&v, name, sizeof name) == 0 && strcmp(name, "tma_m128_n256_c2_k6") == 0);
    CHECK(tpg_gemm_variant_parse("tma_m128_n128_k1", &v) != 0 && tpg_gemm_variant_parse("tma_m128_n128_k17", &v) != 0 &&
          tpg_gemm_variant_parse("tma_m128_n128_k06", &v) != 0 && tpg_gemm_variant_parse("tma_m128_n128_k3x", &v) != 0 &&
          tpg_gemm_variant_parse("tma_m128_n128_sk_k3", &v) != 0);
    CHECK(tpg_gemm_variant_parse("tma_m128_n256_k6", &v) == 0);
    /* 512 x 1280: 4 x 5 tiles of 128 x 256, 6 ranges each on 120 of 132 SMs */
    CHECK(tpg_gemm_select_variant(PROB(512, 1280, 8192, TPG_KDT_BF16, TPG_EPI_NONE, 90, 132, 8192, 8192, 1), &v, &l,
                                  &xe, &we, why, sizeof why) == 0 &&
          l.grid[0] == 120 && l.split_k == TPG_SPLITK_STREAM &&
          l.workspace_bytes == tpg_sk_workspace_bytes(20, 120, 256));
    v.split = 7; /* 140 CTAs: not all resident */
    CHECK(tpg_gemm_select_variant(PROB(512, 1280, 8192, TPG_KDT_BF16, TPG_EPI_NONE, 90, 132, 8192, 8192, 1), &v, &l,
                                  &xe, &we, why, sizeof why) != 0 &&
          strstr(why, "split=7") != NULL);
    v.split = 3; /* more ranges than the 2 K blocks of k = 128 */
    CHECK(tpg_gemm_select_variant(PROB(512, 1280, 128, TPG_KDT_BF16, TPG_EPI_NONE, 90, 132, 128, 128, 1), &v, &l, &xe,
                                  &we, why, sizeof why) != 0 &&
          strstr(why, "split=3") != NULL);
    v.split = 2;
    v.streamk = 0;
    CHECK(tpg_gemm_select_variant(PROB(512, 1280, 8192, TPG_KDT_BF16, TPG_EPI_NONE, 90, 132, 8192, 8192, 1), &v, &l,
                                  &xe, &we, why, sizeof why) != 0 &&
          strstr(why, "stream-K") != NULL);
    /* K over a cluster: "_kc<S>", S = 2..8, 128-row tiles without cluster or
     * swap; grid tiles x S with the cluster shape in the launch, no workspace */
    CHECK(tpg_gemm_variant_parse("tma_m128_n256_kc6", &v) == 0 && v.kcluster == 1 && v.split == 6 && v.streamk == 0 &&
          v.cluster == 0);
    CHECK(tpg_gemm_variant_name(&v, name, sizeof name) == 0 && strcmp(name, "tma_m128_n256_kc6") == 0);
    CHECK(tpg_gemm_select_variant(PROB(512, 1280, 8192, TPG_KDT_BF16, TPG_EPI_BIAS, 90, 132, 8192, 8192, 1), &v, &l,
                                  &xe, &we, why, sizeof why) == 0 &&
          strcmp(l.kernel, "tpg_gemm_sm90tma_bf16") == 0 && l.grid[0] == 120 && l.cluster == 6 &&
          l.split_k == TPG_SPLITK_CLUSTER && l.workspace_bytes == 0 && l.workspace_zeroed == 0);
    CHECK(tpg_gemm_variant_parse("tma_m128_n64_kc1", &v) != 0 && tpg_gemm_variant_parse("tma_m128_n64_kc9", &v) != 0 &&
          tpg_gemm_variant_parse("tma_m128_n64_kc16", &v) != 0 && tpg_gemm_variant_parse("tma_m64_n128_kc2", &v) != 0 &&
          tpg_gemm_variant_parse("tma_m128_n128_c2_kc2", &v) != 0 &&
          tpg_gemm_variant_parse("tma_m64_n64_sw_kc2", &v) != 0 && tpg_gemm_variant_parse("tma_m128_n128_kc2_sk", &v) != 0);
    CHECK(tpg_gemm_variant_parse("tma_m128_n192_kc8", &v) == 0);
    v.split = 3; /* more ranges than the 2 K blocks of k = 128 */
    CHECK(tpg_gemm_select_variant(PROB(512, 1280, 128, TPG_KDT_BF16, TPG_EPI_NONE, 90, 132, 128, 128, 1), &v, &l, &xe,
                                  &we, why, sizeof why) != 0 &&
          strstr(why, "split=3") != NULL);
    v.split = 9; /* more than a portable cluster */
    CHECK(tpg_gemm_select_variant(PROB(512, 1280, 8192, TPG_KDT_BF16, TPG_EPI_NONE, 90, 132, 8192, 8192, 1), &v, &l,
                                  &xe, &we, why, sizeof why) != 0 &&
          strstr(why, "split=9") != NULL);
    v.split = 2;
    v.streamk = 1;
    CHECK(tpg_gemm_select_variant(PROB(512, 1280, 8192, TPG_KDT_BF16, TPG_EPI_NONE, 90, 132, 8192, 8192, 1), &v, &l,
                                  &xe, &we, why, sizeof why) != 0 &&
          strstr(why, "kcluster") != NULL);
    v.streamk = 0;
    v.bm = 64; /* (bn 128: 64 x 192 tiles do not exist) */
    v.bn = 128;
    CHECK(tpg_gemm_select_variant(PROB(512, 1280, 8192, TPG_KDT_BF16, TPG_EPI_NONE, 90, 132, 8192, 8192, 1), &v, &l,
                                  &xe, &we, why, sizeof why) != 0 &&
          strstr(why, "kcluster") != NULL);
    /* the rule takes it where the tiles leave SMs idle (512 x 1280 x 8192:
     * 28 tiles of 128 x 192, clusters of 4 on 112 SMs) and not where they
     * fill the machine */
    CHECK(tpg_gemm_select_tma(PROB(512, 1280, 8192, TPG_KDT_BF16, TPG_EPI_NONE, 90, 132, 8192, 8192, 1), &l, &xe, &we,
                              why, sizeof why) == 0 &&
          l.cluster == 4 && l.grid[0] == 112 && l.split_k == TPG_SPLITK_CLUSTER && we.box[1] == 192);
    CHECK(tpg_gemm_select_tma(PROB(4096, 4096, 4096, TPG_KDT_BF16, TPG_EPI_NONE, 90, 132, 4096, 4096, 1), &l, &xe, &we,
                              why, sizeof why) == 0 &&
          l.cluster == 0 && l.split_k != TPG_SPLITK_CLUSTER);
    memset(&v, 0, sizeof v);
    v.kind = TPG_GEMM_VAR_TMA;
    v.swap = 1;
    v.bm = 32;
    v.bn = 64;
    v.cluster = 2;
    CHECK(tpg_gemm_select_variant(PROB(64, 7168, 4096, TPG_KDT_BF16, TPG_EPI_SWIGLU, 90, 132, 4096, 4096, 1), &v, &l,
                                  &xe, &we, why, sizeof why) != 0 &&
          strstr(why, "SwiGLU") != NULL);
    CHECK(tpg_gemm_select_variant(PROB(64, 7168, 4096, TPG_KDT_F16, TPG_EPI_NONE, 90, 132, 4096, 4096, 1), &v, &l, &xe,
                                  &we, why, sizeof why) == 0 &&
          strcmp(l.kernel, "tpg_gemm_sm90tma_f16_sw32_n64_c2") == 0 && l.grid[0] == 132 && xe.box[1] == 32 &&
          we.box[1] == 32);
    for (si = 0; si < sizeof shapes / sizeof shapes[0]; ++si) {
      const int m = shapes[si][0], n = shapes[si][1], k = shapes[si][2], epi = shapes[si][3];
      const int cnt =
          tpg_gemm_candidates(PROB(m, n, k, TPG_KDT_BF16, epi, 90, 132, k, k, 1), list, TPG_GEMM_MAX_CANDIDATES);
      int i, j;
      CHECK(cnt >= 2 && cnt <= TPG_GEMM_MAX_CANDIDATES && list[0].kind == TPG_GEMM_VAR_HEURISTIC);
      CHECK(tpg_gemm_candidates(PROB(m, n, k, TPG_KDT_BF16, epi, 90, 132, k, k, 1), NULL, 0) == 0);
      for (i = 0; i < cnt; ++i) {
        CHECK(tpg_gemm_variant_name(&list[i], name, sizeof name) == 0);
        CHECK(tpg_gemm_variant_parse(name, &back) == 0 && memcmp(&back, &list[i], sizeof back) == 0);
        for (j = 0; j < i; ++j) CHECK(memcmp(&list[j], &list[i], sizeof back) != 0); /* no duplicates */
        CHECK(tpg_gemm_select_variant(PROB(m, n, k, TPG_KDT_BF16, epi, 90, 132, k, k, 1), &list[i], &l, &xe, &we, why,
                                      sizeof why) == 0);
        CHECK(l.grid[0] >= 1 && l.grid[0] <= (l.split_k == TPG_SPLITK_STREAM || strstr(l.kernel, "tma") ? 132u : 1u << 30));
        /* (a CUTLASS kernel's cluster is its own: gemm_cutlass_test) */
        CHECK(list[i].kind == TPG_GEMM_VAR_HEURISTIC || list[i].kind == TPG_GEMM_VAR_CUTLASS ||
              l.cluster == (list[i].kcluster ? (unsigned)list[i].split : 0u));
        CHECK(list[i].kind == TPG_GEMM_VAR_HEURISTIC || (list[i].kind == TPG_GEMM_VAR_TMA) == (xe.rank == 2));
        if (list[i].kind == TPG_GEMM_VAR_TMA) {
          /* _c2: each CTA of the pair loads half of the W tile; _cn2: half of the X tile */
          const unsigned wrows = (unsigned)list[i].bn / (list[i].cluster == 2 && !list[i].cluster_n ? 2u : 1u);
          const unsigned xrows = (unsigned)list[i].bm / (list[i].cluster_n ? 2u : 1u);
          CHECK(xe.box[1] == xrows && (epi == TPG_EPI_SWIGLU ? we.box[3] * 16 : we.box[1]) == wrows);
          CHECK(list[i].cluster != 2 ||
                (l.grid[0] % 2 == 0 && strstr(l.kernel, list[i].cluster_n ? "_cn2" : "_c2") != NULL));
          CHECK((l.split_k == TPG_SPLITK_STREAM) == (list[i].streamk != 0));
          /* aligned split-K: stream-K's partition on a grid of units x S */
          CHECK(!list[i].split || l.grid[0] % (unsigned)list[i].split == 0);
          CHECK((l.workspace_bytes != 0) == (list[i].streamk != 0));
          CHECK((l.split_k == TPG_SPLITK_CLUSTER) == (list[i].kcluster != 0));
          CHECK(!list[i].kcluster || (list[i].bm == 128 && list[i].split >= 2 && list[i].split <= 8 && !list[i].swap &&
                                      list[i].cluster == 0 && strstr(l.kernel, "_c") == NULL));
          if (list[i].kcluster) ++kcs;
          CHECK(l.smem_bytes <= 227 * 1024 && l.block[0] == 384);
          CHECK((strstr(l.kernel, "_sw") != NULL) == (list[i].swap != 0));
          if (list[i].split) ++ksplits;
        }
      }
    }
    CHECK(ksplits >= 3 && kcs >= 3);
    /* the heuristic variant is exactly the rule between the families (AUTO) */
    v.kind = TPG_GEMM_VAR_HEURISTIC;
    {
      tpg_kernel_launch l2;
      CHECK(tpg_gemm_select_variant(PROB(128, 4096, 7168, TPG_KDT_BF16, TPG_EPI_NONE, 90, 132, 7168, 7168, 1), &v, &l,
                                    &xe, &we, why, sizeof why) == 0);
      CHECK(tpg_gemm_select_rule(PROB(128, 4096, 7168, TPG_KDT_BF16, TPG_EPI_NONE, 90, 132, 7168, 7168, 1),
                                 TPG_GEMM_FAMILY_AUTO, &l2, &xe, &we, why, sizeof why) == 0);
      CHECK(memcmp(&l, &l2, sizeof l) == 0);
    }
    /* 64-row tiles, BN 128: one tile row at M = 32, X box 64 rows, 8 stages */
    CHECK(tpg_gemm_variant_parse("tma_m64_n128", &v) == 0);
    CHECK(tpg_gemm_select_variant(PROB(32, 7168, 4096, TPG_KDT_F16, TPG_EPI_NONE, 90, 132, 4096, 4096, 1), &v, &l, &xe,
                                  &we, why, sizeof why) == 0);
    CHECK(strcmp(l.kernel, "tpg_gemm_sm90tma_f16_m64_n128") == 0 && l.grid[0] == 56 && l.smem_bytes == 197760);
    CHECK(xe.box[0] == 64 && xe.box[1] == 64 && we.box[1] == 128 && l.split_k == 1 && l.workspace_bytes == 0);
    /* stream-K on it: all SMs, counters for 56 tiles */
    CHECK(tpg_gemm_variant_parse("tma_m64_n128_sk", &v) == 0);
    CHECK(tpg_gemm_select_variant(PROB(32, 7168, 4096, TPG_KDT_BF16, TPG_EPI_NONE, 90, 132, 4096, 4096, 1), &v, &l, &xe,
                                  &we, why, sizeof why) == 0);
    CHECK(l.grid[0] == 132 && l.workspace_zeroed == 256 && l.workspace_bytes == tpg_sk_workspace_bytes(56, 132, 128));
    /* BN 64, SwiGLU: 32 outputs a tile, W box 4 groups of 16 rows */
    CHECK(tpg_gemm_variant_parse("tma_m128_n64", &v) == 0);
    CHECK(tpg_gemm_select_variant(PROB(256, 4096, 4096, TPG_KDT_BF16, TPG_EPI_SWIGLU, 90, 132, 4096, 4096, 1), &v, &l,
                                  &xe, &we, why, sizeof why) == 0);
    CHECK(strcmp(l.kernel, "tpg_gemm_sm90tma_bf16_n64") == 0 && l.grid[0] == 132 && we.rank == 4 && we.box[3] == 4);
    /* clusters of two: names round-trip, only 128-row tiles at BN 256 / 128 */
    CHECK(tpg_gemm_variant_parse("tma_m128_n256_c2_sk", &v) == 0 && v.cluster == 2 && v.streamk == 1 && v.bn == 256);
    CHECK(tpg_gemm_variant_name(&v, name, sizeof name) == 0 && strcmp(name, "tma_m128_n256_c2_sk") == 0);
    CHECK(tpg_gemm_variant_parse("tma_m64_n256_c2", &v) != 0);
    CHECK(tpg_gemm_variant_parse("tma_m128_n64_c2", &v) != 0);
    CHECK(tpg_gemm_variant_parse("tma_m128_n256_sk_c2", &v) != 0);
    CHECK(tpg_gemm_variant_parse("tma_m128_n128_c2", &v) == 0 && v.cluster == 2 && v.streamk == 0);
    /* M = 384: three M-tiles, two units of M-tile pairs; 14336 / 128 = 112 W tiles:
     * 224 units, grid 2 * 66 (a cluster per SM pair), W box 64 rows */
    CHECK(tpg_gemm_select_variant(PROB(384, 14336, 4096, TPG_KDT_BF16, TPG_EPI_NONE, 90, 132, 4096, 4096, 1), &v, &l,
                                  &xe, &we, why, sizeof why) == 0);
    CHECK(strcmp(l.kernel, "tpg_gemm_sm90tma_bf16_n128_c2") == 0 && l.grid[0] == 132 && we.box[1] == 64 &&
          xe.box[1] == 128 && l.split_k == 1 && l.workspace_bytes == 0);
    /* stream-K: counters and partial slots for both ranks of the 224 units */
    CHECK(tpg_gemm_variant_parse("tma_m128_n128_c2_sk", &v) == 0);
    CHECK(tpg_gemm_select_variant(PROB(384, 14336, 4096, TPG_KDT_F16, TPG_EPI_NONE, 90, 132, 4096, 4096, 1), &v, &l,
                                  &xe, &we, why, sizeof why) == 0);
    CHECK(strcmp(l.kernel, "tpg_gemm_sm90tma_f16_n128_c2") == 0 && l.split_k == TPG_SPLITK_STREAM &&
          l.workspace_bytes == tpg_sk_workspace_bytes(448, 132, 128) && l.workspace_zeroed == 1792);
    /* SwiGLU, BN 256: 128 outputs a unit, W box 8 groups of 16 rows; 8 units on an odd SM count: grid 16 */
    CHECK(tpg_gemm_variant_parse("tma_m128_n256_c2", &v) == 0);
    CHECK(tpg_gemm_select_variant(PROB(512, 512, 4096, TPG_KDT_BF16, TPG_EPI_SWIGLU, 90, 131, 4096, 4096, 1), &v, &l,
                                  &xe, &we, why, sizeof why) == 0);
    CHECK(strcmp(l.kernel, "tpg_gemm_sm90tma_bf16_c2") == 0 && l.grid[0] == 16 && we.rank == 4 && we.box[3] == 8);
    /* BN 192: 128-row tiles only; N = 6144 at M = 512: 4 x 32 tiles, 4 stages of 40 KB */
    CHECK(tpg_gemm_variant_parse("tma_m64_n192", &v) != 0);
    CHECK(tpg_gemm_variant_parse("tma_m128_n192", &v) == 0 && v.bn == 192);
    CHECK(tpg_gemm_select_variant(PROB(512, 6144, 4096, TPG_KDT_BF16, TPG_EPI_NONE, 90, 132, 4096, 4096, 1), &v, &l,
                                  &xe, &we, why, sizeof why) == 0);
    CHECK(strcmp(l.kernel, "tpg_gemm_sm90tma_bf16_n192") == 0 && l.grid[0] == 128 && l.smem_bytes == 164928 + 32768 &&
          we.box[1] == 192 && xe.box[1] == 128);
    CHECK(tpg_gemm_variant_parse("tma_m128_n192_c2_sk", &v) == 0 && v.cluster == 2);
    CHECK(tpg_gemm_select_variant(PROB(512, 6144, 4096, TPG_KDT_F16, TPG_EPI_SWIGLU, 90, 132, 4096, 4096, 1), &v, &l,
                                  &xe, &we, why, sizeof why) == 0);
    /* SwiGLU: 96 outputs a unit, 2 x 64 units; W box 6 groups of 16 rows (half of 192) */
    CHECK(strcmp(l.kernel, "tpg_gemm_sm90tma_f16_n192_c2") == 0 && l.grid[0] == 132 && we.box[3] == 6 &&
          l.workspace_bytes == tpg_sk_workspace_bytes(256, 132, 192));
    v.bm = 64;
    CHECK(tpg_gemm_select_variant(PROB(512, 6144, 4096, TPG_KDT_F16, TPG_EPI_NONE, 90, 132, 4096, 4096, 1), &v, &l, &xe,
                                  &we, why, sizeof why) != 0 &&
          strstr(why, "192") != NULL);
    v.bm = 128;
    /* no clusters at M <= 128 (one M-tile: the pair's second CTA would idle) */
    {
      const int cnt = tpg_gemm_candidates(PROB(128, 4096, 4096, TPG_KDT_BF16, TPG_EPI_NONE, 90, 132, 4096, 4096, 1),
                                          list, TPG_GEMM_MAX_CANDIDATES);
      int i, c2 = 0;
      for (i = 0; i < cnt; ++i) c2 += list[i].cluster == 2 && !list[i].cluster_n && list[i].bm == 128;
      CHECK(c2 == 0);
      CHECK(tpg_gemm_candidates(PROB(129, 4096, 4096, TPG_KDT_BF16, TPG_EPI_NONE, 90, 132, 4096, 4096, 1), list,
                                TPG_GEMM_MAX_CANDIDATES) <= TPG_GEMM_MAX_CANDIDATES);
    }
    /* _cn2: pairs of N-tiles sharing X; each CTA loads half the X rows and its whole W tile */
    CHECK(tpg_gemm_variant_parse("tma_m64_n64_cn2_sk", &v) == 0 && v.cluster == 2 && v.cluster_n == 1 && v.streamk == 1);
    CHECK(tpg_gemm_select_variant(PROB(64, 4096, 4096, TPG_KDT_BF16, TPG_EPI_NONE, 90, 132, 4096, 4096, 1), &v, &l, &xe,
                                  &we, why, sizeof why) == 0);
    CHECK(strcmp(l.kernel, "tpg_gemm_sm90tma_bf16_m64_n64_cn2") == 0 && l.grid[0] == 132 && xe.box[1] == 32 &&
          we.box[1] == 64 && l.split_k == TPG_SPLITK_STREAM);
    /* 32 units (pairs of 64-wide N-tiles) of 64 K blocks: 2 * 32 tiles' counters */
    CHECK(l.workspace_zeroed == 256);
    CHECK(tpg_gemm_variant_parse("tma_m128_n128_cn2", &v) == 0 && v.cluster_n == 1 && v.streamk == 0);
    CHECK(tpg_gemm_select_variant(PROB(100, 4096, 4096, TPG_KDT_F16, TPG_EPI_SWIGLU, 90, 132, 4096, 4096, 1), &v, &l,
                                  &xe, &we, why, sizeof why) == 0);
    /* SwiGLU: 64 outputs a tile, 2 tiles a unit: 32 units */
    CHECK(strcmp(l.kernel, "tpg_gemm_sm90tma_f16_n128_cn2") == 0 && l.grid[0] == 64 && xe.box[1] == 64 &&
          we.box[3] == 8);
    CHECK(tpg_gemm_variant_parse("tma_m64_n256_cn2", &v) != 0);
    /* _c2 with 64-row tiles: the pair's M-tiles share W, each CTA loading half of it */
    CHECK(tpg_gemm_variant_parse("tma_m64_n64_c2_sk", &v) == 0 && v.cluster == 2 && v.cluster_n == 0);
    CHECK(tpg_gemm_select_variant(PROB(128, 4096, 4096, TPG_KDT_BF16, TPG_EPI_NONE, 90, 132, 4096, 4096, 1), &v, &l,
                                  &xe, &we, why, sizeof why) == 0);
    CHECK(strcmp(l.kernel, "tpg_gemm_sm90tma_bf16_m64_n64_c2") == 0 && l.grid[0] == 132 && xe.box[1] == 64 &&
          we.box[1] == 32);
    CHECK(tpg_gemm_select_variant(PROB(128, 4096, 4096, TPG_KDT_BF16, TPG_EPI_SWIGLU, 90, 132, 4096, 4096, 1), &v, &l,
                                  &xe, &we, why, sizeof why) != 0 &&
          strstr(why, "SwiGLU") != NULL);
    CHECK(tpg_gemm_variant_parse("tma_m64_n256_c2", &v) != 0);
    memset(&v, 0, sizeof v);
    v.kind = TPG_GEMM_VAR_TMA;
    v.bm = 64;
    v.bn = 64;
    v.cluster_n = 1; /* without cluster 2 */
    CHECK(tpg_gemm_select_variant(PROB(64, 4096, 4096, TPG_KDT_BF16, TPG_EPI_NONE, 90, 132, 4096, 4096, 1), &v, &l, &xe,
                                  &we, why, sizeof why) != 0 &&
          strstr(why, "cluster_n") != NULL);
    v.cluster_n = 0;
    v.bm = 128;
    v.bn = 256;
    v.cluster = 3;
    v.kind = TPG_GEMM_VAR_TMA;
    CHECK(tpg_gemm_select_variant(PROB(512, 4096, 4096, TPG_KDT_BF16, TPG_EPI_NONE, 90, 132, 4096, 4096, 1), &v, &l,
                                  &xe, &we, why, sizeof why) != 0 &&
          strstr(why, "cluster") != NULL);
    /* decode pair: plain and stream-K GEMV whatever the grid rule says */
    CHECK(tpg_gemm_variant_parse("gemv", &v) == 0);
    CHECK(tpg_gemm_select_variant(PROB(8, 1024, 4096, TPG_KDT_BF16, TPG_EPI_NONE, 90, 132, 4096, 4096, 1), &v, &l, &xe,
                                  &we, why, sizeof why) == 0);
    CHECK(strcmp(l.kernel, "tpg_gemv_bf16_m8") == 0 && l.grid[0] == 64 && l.grid[1] == 3 && xe.rank == 0);
    CHECK(l.workspace_bytes == 256 + 64 * 3 * 512 && l.workspace_zeroed == 256);
    /* forced K ranges: names round-trip, too many for K refused by name */
    CHECK(tpg_gemm_variant_parse("gemv_s3", &v) == 0 && v.kind == TPG_GEMM_VAR_GEMV && v.split == 3);
    CHECK(tpg_gemm_variant_name(&v, name, sizeof name) == 0 && strcmp(name, "gemv_s3") == 0);
    CHECK(tpg_gemm_variant_parse("gemv_s0", &v) != 0 && tpg_gemm_variant_parse("gemv_s17", &v) != 0);
    CHECK(tpg_gemm_variant_parse("gemv_s03", &v) != 0 && tpg_gemm_variant_parse("gemv_s3x", &v) != 0);
    CHECK(tpg_gemm_variant_parse("gemv_s", &v) != 0 && tpg_gemm_variant_parse("gemv_s+3", &v) != 0);
    CHECK(tpg_gemm_variant_parse("gemv_s3", &v) == 0);
    CHECK(tpg_gemm_select_variant(PROB(1, 4096, 4096, TPG_KDT_BF16, TPG_EPI_SWIGLU, 90, 132, 4096, 4096, 1), &v, &l,
                                  &xe, &we, why, sizeof why) == 0);
    CHECK(strcmp(l.kernel, "tpg_gemv_bf16_m8w4") == 0 && l.grid[0] == 512 && l.grid[1] == 3 && l.block[0] == 128);
    CHECK(l.workspace_zeroed == 2048 && l.workspace_bytes == 2048 + 512 * 3 * 512);
    CHECK(tpg_gemm_select_variant(PROB(1, 4096, 64, TPG_KDT_BF16, TPG_EPI_NONE, 90, 132, 64, 64, 1), &v, &l, &xe, &we,
                                  why, sizeof why) != 0);
    CHECK(strstr(why, "gemv_s3") != NULL && strstr(why, "k=64") != NULL);
    CHECK(tpg_gemm_variant_parse("gemv_s1", &v) == 0);
    CHECK(tpg_gemm_select_variant(PROB(16, 4096, 4096, TPG_KDT_BF16, TPG_EPI_NONE, 90, 132, 4096, 4096, 1), &v, &l, &xe,
                                  &we, why, sizeof why) == 0);
    CHECK(strcmp(l.kernel, "tpg_gemv_bf16_m16w4") == 0 && l.grid[1] == 1 && l.workspace_bytes == 0);
    CHECK(tpg_gemm_variant_parse("gemv", &v) == 0);
    CHECK(tpg_gemm_select_variant(PROB(40, 1024, 4096, TPG_KDT_BF16, TPG_EPI_NONE, 90, 132, 4096, 4096, 1), &v, &l, &xe,
                                  &we, why, sizeof why) == 0);
    CHECK(strcmp(l.kernel, "tpg_gemv_bf16_m64") == 0);
    CHECK(tpg_gemm_variant_parse("gemv_sk", &v) == 0);
    CHECK(tpg_gemm_select_variant(PROB(12, 14336, 8192, TPG_KDT_F16, TPG_EPI_NONE, 90, 132, 8192, 8192, 1), &v, &l, &xe,
                                  &we, why, sizeof why) == 0);
    CHECK(strcmp(l.kernel, "tpg_gemv_sk_f16_m16") == 0 && l.grid[0] == 132 && l.workspace_zeroed == l.workspace_bytes);
    CHECK(tpg_gemm_select_variant(PROB(20, 14336, 8192, TPG_KDT_F16, TPG_EPI_NONE, 90, 132, 8192, 8192, 1), &v, &l, &xe,
                                  &we, why, sizeof why) != 0);
    CHECK(strstr(why, "m=20") != NULL && strstr(why, "gemv_sk") != NULL);
    CHECK(tpg_gemm_variant_parse("tma_m128_n256", &v) == 0);
    CHECK(tpg_gemm_select_variant(PROB(256, 4096, 4096, TPG_KDT_BF16, TPG_EPI_NONE, 80, 108, 4096, 4096, 1), &v, &l,
                                  &xe, &we, why, sizeof why) != 0);
    CHECK(strstr(why, "sm_arch=80") != NULL);
    CHECK(tpg_gemm_select_variant(PROB(256, 4096, 4096, TPG_KDT_BF16, TPG_EPI_NONE, 90, 132, 4000, 4096, 1), &v, &l,
                                  &xe, &we, why, sizeof why) != 0);
    CHECK(strstr(why, "ldx") != NULL);
    /* other architectures: the heuristic only */
    CHECK(tpg_gemm_candidates(PROB(256, 4096, 4096, TPG_KDT_BF16, TPG_EPI_NONE, 80, 108, 4096, 4096, 1), list,
                              TPG_GEMM_MAX_CANDIDATES) == 1);
  }
  return TPG_TEST_END();
}
