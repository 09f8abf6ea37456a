/* sm90_cutlass_list.h - the CUTLASS GEMM instantiations, one row each.
 *
 * Plain preprocessor, so that C (the selector, lib/gemm/), the device code
 * (sm90_cutlass.cuh and one .cu per row) and the host code that builds the
 * kernels' Params (lib/gemm/cutlass_params.cu) read the same table.
 *
 *   X(ID, NAME, TM, TN, CM, CN, SCHED, SWAP)
 *   ID      index, 0.. (variant names and tune cache files use NAME)
 *   NAME    entry point tpg_cutlass_bf16_<NAME>; variants "cutlass_<NAME>[_sk|_k<S>]"
 *   TM, TN  CTA tile in CUTLASS's M and N (K is 64): with SWAP 0 tokens x W
 *           rows, with SWAP 1 W rows x tokens (Y^T = W X^T, below)
 *   CM, CN  cluster shape (TMA multicast: CM > 1 shares the tile of
 *           CUTLASS's B among CTAs along M, CN > 1 that of A along N)
 *   SCHED   0: TMA warp-specialized cooperative mainloop (two consumer
 *           warpgroups on one tile) with CUTLASS's stream-K tile scheduler,
 *           which runs data-parallel, stream-K or split-K by a launch-time
 *           argument (so one compiled kernel is three candidates);
 *           1: ping-pong mainloop (the two consumer warpgroups on different
 *           tiles, one's epilogue under the other's MMAs) with the
 *           persistent scheduler (data-parallel only: CUTLASS 4.2 has no
 *           stream-K ping-pong)
 *   SWAP    1: CUTLASS computes Y^T[N, M] = W[N, K] X[M, K]^T, so the tokens
 *           are the tile's narrow N side (cuBLASLt's choice at small M);
 *           the bias is per row of Y^T, Y^T is stored column-major (= Y
 *           row-major)
 *
 * Why these five (each costs ~50 s of nvcc on a 2-core machine, once per
 * workspace): 128 x 256 with a 2 x 1 cluster is the tile, cluster and
 * schedule cuBLASLt runs at M >= 1024 (docs/kernels.md: our kernel keeps
 * the tensor pipe 81% busy there, cuBLASLt's 91%); 128 x 128 with 1 x 2
 * (X shared along N) covers M = 128..1024, where tiles of 256 W rows leave
 * SMs idle; the swapped 128 x 64 covers M <= 64..256 with whole W-row tiles
 * and stream-K over K (M = 64..512 stream W at 40-60% of DRAM peak in ours);
 * ping-pong 128 x 128 is the small-K, large-M case (the epilogue hidden
 * under the other warpgroup's MMAs). Ping-pong 64 x 96 (tokens x W rows,
 * W multicast to two token tiles) is the tile cuBLASLt's nvjet kernel runs
 * at M = 128, N = 6144, K = 12288 (ncu: 96 x 64, cluster 1 x 2 in its
 * order, 10 stages, 128 CTAs): tiles of 96 W rows make one wave of ~128
 * CTAs on 132 SMs at M = 128..256 without splitting K, where our 64 / 128 /
 * 256-row tiles leave 48 or 96 tiles and need stream-K. All bf16 (the zoo's and the layers'
 * dtype); f16 keeps our kernels.
 */
#ifndef TPG_SM90_CUTLASS_LIST_H
#define TPG_SM90_CUTLASS_LIST_H

#define TPG_CUTLASS_SCHED_COOP_SK 0
#define TPG_CUTLASS_SCHED_PINGPONG 1

/* One macro per row (a kernel's .cu expands just its own), and the list. */
#define TPG_CUTLASS_ROW0(X) X(0, coop_128x256_c2x1, 128, 256, 2, 1, TPG_CUTLASS_SCHED_COOP_SK, 0)
#define TPG_CUTLASS_ROW1(X) X(1, coop_128x128_c1x2, 128, 128, 1, 2, TPG_CUTLASS_SCHED_COOP_SK, 0)
#define TPG_CUTLASS_ROW2(X) X(2, coop_sw_128x64, 128, 64, 1, 1, TPG_CUTLASS_SCHED_COOP_SK, 1)
#define TPG_CUTLASS_ROW3(X) X(3, ping_128x128_c2x1, 128, 128, 2, 1, TPG_CUTLASS_SCHED_PINGPONG, 0)
#define TPG_CUTLASS_ROW4(X) X(4, ping_64x96_c2x1, 64, 96, 2, 1, TPG_CUTLASS_SCHED_PINGPONG, 0)
#define TPG_CUTLASS_LIST(X) \
  TPG_CUTLASS_ROW0(X) TPG_CUTLASS_ROW1(X) TPG_CUTLASS_ROW2(X) TPG_CUTLASS_ROW3(X) TPG_CUTLASS_ROW4(X)

#define TPG_CUTLASS_COUNT 5

#endif
