// prefill.cu - the engine's device code for the prompt: the token
// embedding, RoPE + KV append of M rows, and causal attention of a chunk of
// M query rows over the cache, on tensor cores.
//
// Decisions:
// - The prompt is compute-bound (M rows share every weight), so attention
//   is a flash-attention-2 kernel: a block takes 64 query rows of one KV
//   head and streams that head's keys and values through shared memory once
//   for all of them; each warp owns 16 rows (one m16n8k16 A tile) and keeps
//   its own online softmax, so nothing but the tile loads is shared.
// - GQA the way the decode kernels do it: a block's rows are (position,
//   query head) pairs of ONE KV head's group, G heads per position, so a
//   block reads its K/V tiles once for G x (64 / G) rows.
// - Fragment layouts are the decode kernel's (llama_attn_tc_g<G>,
//   kernels/step.cu), checked there: Q K^T sums the dims in a permuted order so
//   that Q and K fragments are whole 16-byte loads; P's A fragments are S's
//   accumulators; V's B fragments pair two keys at one dim with byte
//   permutes. P enters as plain bf16, one MMA (prefill_tile, common.cuh,
//   says why), so the fp64 bounds add 2^-9 max |v| for its rounding.
// - Positions come from device memory (pos[0] = the chunk's first
//   position), never from arguments: one graph serves every chunk of its
//   size, rebound per chunk.
#include <cuda_bf16.h>
#include <stdint.h>

#include "examples/llama/kernels/kernels.h"
#include "examples/llama/kernels/common.cuh"

extern "C" __global__ void __launch_bounds__(128)
    llama_embed(__nv_bfloat16 *x, const __nv_bfloat16 *emb, const int *ids, int hidden, int vocab) {
  const int i = blockIdx.x, nv = hidden / 8;
  pdl_wait();
  const int id = ids[i];
  uint4 *dst = reinterpret_cast<uint4 *>(x + (size_t)i * hidden);
  if (id < 0 || id >= vocab) {
    for (int j = threadIdx.x; j < nv; j += blockDim.x) dst[j] = make_uint4(~0u, ~0u, ~0u, ~0u);  // NaN
    return;
  }
  const uint4 *src = reinterpret_cast<const uint4 *>(emb + (size_t)id * hidden);
  for (int j = threadIdx.x; j < nv; j += blockDim.x) dst[j] = src[j];
}

// One block per row, not per (row, head): the angle depends on the
// position and the pair only, so thread t computes sin/cos once for pair i
// = t % (D/2) and applies them to heads t / (D/2), + HS, ... (HS = threads /
// (D/2) heads in flight). A block per (row, head) computed them again for
// every head, and its 2048 x 48 tiny blocks took 120 us at M = 2048 (ncu),
// a tenth of a layer's prefill; this is memory-bound.
namespace {
template <int D>
__device__ __forceinline__ void prefill_rope(__nv_bfloat16 *q, __nv_bfloat16 *k_cache, __nv_bfloat16 *v_cache,
                                             const __nv_bfloat16 *qkv, const int *pos, int nq, int nkv, int max_ctx,
                                             float theta, const float *inv_freq) {
  static_assert(kHeadDimOk<D>, "a head dim with kernels");
  constexpr int HS = LLAMA_PREFILL_ROPE_THREADS / (D / 2);
  const int row = blockIdx.x, i = threadIdx.x % (D / 2), nh = nq + 2 * nkv;
  pdl_wait();
  const int p = pos[0] + row;
  const bool cache = p >= 0 && p < max_ctx;  // else the engine's bug: never write outside the cache
  float sn, cs;
  rope_sincos<D>(p, i, theta, inv_freq, sn, cs);
  const __nv_bfloat16 *src = qkv + (size_t)row * nh * D;
#pragma unroll 4
  for (int h = threadIdx.x / (D / 2); h < nh; h += HS) {
    float a = __bfloat162float(src[(size_t)h * D + i]), c = __bfloat162float(src[(size_t)h * D + i + D / 2]);
    if (h < nq + nkv) rope_apply(a, c, sn, cs);
    __nv_bfloat16 *dst;
    if (h < nq) {
      dst = q + ((size_t)row * nq + h) * D;
    } else {
      if (!cache) continue;
      const int kv = h < nq + nkv ? h - nq : h - nq - nkv;
      dst = (h < nq + nkv ? k_cache : v_cache) + ((size_t)kv * max_ctx + p) * D;
    }
    dst[i] = __float2bfloat16_rn(a);
    dst[i + D / 2] = __float2bfloat16_rn(c);
  }
}
}  // namespace

#define LLAMA_PREFILL_ROPE_DEF(SFX, D)                                                                           \
  extern "C" __global__ void __launch_bounds__(LLAMA_PREFILL_ROPE_THREADS)                                     \
      llama_prefill_rope##SFX(__nv_bfloat16 *q, __nv_bfloat16 *k_cache, __nv_bfloat16 *v_cache,                \
                              const __nv_bfloat16 *qkv, const int *pos, int nq, int nkv, int max_ctx,           \
                              float theta, const float *inv_freq) {                                             \
    prefill_rope<D>(q, k_cache, v_cache, qkv, pos, nq, nkv, max_ctx, theta, inv_freq);                          \
  }
LLAMA_PREFILL_ROPE_DEF(, 128)
LLAMA_PREFILL_ROPE_DEF(_d64, 64)

namespace {

// One block: KV head h, query rows r = 0..63 of block qb, row r being
// position i = qb * RPB + r / G and query head h * G + r % G (RPB =
// floor(64 / G) positions per block). When G does not divide 64 the last
// 64 mod G rows name position qb * RPB + RPB, past the block's last: they
// compute (as a copy of the block's last row) and are never stored. Blocks run from the last positions to the first
// (blockIdx.x reversed): those attend the most keys, so they start first.
// Warp w owns rows 16w .. 16w + 15; lane (g, tig) = (lane / 4, lane % 4)
// holds rows 16w + g ("row 0") and 16w + g + 8 ("row 1") of every
// accumulator, as in the decode kernel.
//
// Keys stream in tiles of KT = 32 (64 at D = 64) through two shared-memory stages
// (cp.async: tile t + 1 loads while tile t is used). Keys at or past the
// block's end (its last row's position + 1) are zero-filled, so V rows of 0
// keep 0 x garbage out of P V and no cache row past the chunk is ever read.
// Per tile and warp (skipped when all its rows end before the tile):
//   S [16 rows x KT keys] = Q K^T: KT/8 n-tiles of 8 keys x D/16 k-steps of 16 dims
//   causal mask (key > the row's position: -inf), online softmax (log2)
//   O [16 rows x D dims] += P V: KT/16 k-steps of 16 keys x D/8 n-tiles, P in bf16
// Shared-memory row pitches are chosen against bank conflicts of the
// 16-byte fragment loads (8 lanes per phase): K rows are read 8 rows x 4
// dim groups (pitch = 16 words mod 32), V rows 4 rows 2 apart x 2 dim
// groups (pitch = 4 words mod 32).
template <int D, int G>
__device__ __forceinline__ void prefill_attn(__nv_bfloat16 *out, const __nv_bfloat16 *q,
                                             const __nv_bfloat16 *k_cache, const __nv_bfloat16 *v_cache,
                                             const int *pos, int M, int nkv, int max_ctx, float scale_log2) {
  static_assert(G >= 1 && G <= 16, "a block's 64 rows hold at least 4 whole groups");
  static_assert(kHeadDimOk<D>, "a head dim with kernels");
  // Keys a tile (PTile): 32 at D = 128; 64 at D = 64, where a tile's MMAs are
  // half as many per key and the per-tile softmax and barriers would weigh twice.
  constexpr int W = 4, RPB = LLAMA_PREFILL_POSITIONS(G), KT = PTile<D>::KT, KJ = D / 32, CPR = D / 8;
  constexpr int KPK = PTile<D>::KPK, KPV = PTile<D>::KPV;  // shared row pitches (bf16) of K and V
  static_assert(W * 16 == LLAMA_PREFILL_ROWS, "4 warps x 16 MMA rows");
  __shared__ __align__(16) __nv_bfloat16 ks[2][KT * KPK];
  __shared__ __align__(16) __nv_bfloat16 vs[2][KT * KPV];

  const int qb = gridDim.x - 1 - blockIdx.x, h = blockIdx.y, t = threadIdx.x;
  const int w = t >> 5, lane = t & 31, g = lane >> 2, tig = lane & 3;
  pdl_wait();
  const int p0 = pos[0], nq = nkv * G;
  const int i_first = qb * RPB, i_last = min(M, i_first + RPB) - 1;  // the block's positions (indices in the chunk)
  const int kend = p0 + i_last + 1;                                    // keys the block needs: 0 .. kend - 1
  // This lane's two rows: chunk index (clamped: rows past M, or past the
  // block's whole groups, compute as the block's last valid one and are
  // never stored), query head, last key.
  const int ra = 16 * w + g, rb = ra + 8;
  const int ia = i_first + ra / G, ib = i_first + rb / G;
  const int ca = min(ia, i_last), cb = min(ib, i_last);
  const int ha = h * G + ra % G, hb = h * G + rb % G;
  const int lim0 = p0 + ca, lim1 = p0 + cb;  // row 0 attends keys <= lim0
  const int wend = p0 + min(i_first + (16 * w + 15) / G, i_last) + 1;  // the warp's rows need keys < wend

  // Q fragments for the whole key loop (dims permuted as in the decode kernel).
  uint4 qa[KJ], qb4[KJ];
  {
    const __nv_bfloat16 *qra = q + ((size_t)ca * nq + ha) * D, *qrb = q + ((size_t)cb * nq + hb) * D;
#pragma unroll
    for (int j = 0; j < KJ; j++) {
      qa[j] = *reinterpret_cast<const uint4 *>(qra + 32 * j + 8 * tig);
      qb4[j] = *reinterpret_cast<const uint4 *>(qrb + 32 * j + 8 * tig);
    }
  }
  WarpAcc<D> acc;  // l: this lane's keys only, summed at the end
  init_acc(acc);
  const size_t head = (size_t)h * max_ctx * D;
  const __nv_bfloat16 *kb = k_cache + head, *vb = v_cache + head;
  const int ntiles = (kend + KT - 1) / KT;
  // A tile: KT rows x D/8 chunks of 16 bytes, of K and of V: D/32 + D/32 per thread.
  auto load = [&](int tile, int buf) {
#pragma unroll
    for (int u = 0; u < KT * CPR / 128; u++) {
      const int c = t + 128 * u, row = c >> (CPR == 16 ? 4 : 3), col = c & (CPR - 1), key = tile * KT + row;
      const bool ok = key < kend;
      const size_t at = (size_t)(ok ? key : 0) * D + col * 8;
      cp_async16(&ks[buf][row * KPK + col * 8], kb + at, ok);
      cp_async16(&vs[buf][row * KPV + col * 8], vb + at, ok);
    }
    cp_async_commit();
  };
  load(0, 0);
  for (int tile = 0; tile < ntiles; tile++) {
    const int buf = tile & 1, k0 = tile * KT;
    if (tile + 1 < ntiles) {
      load(tile + 1, buf ^ 1);  // that stage was last read in tile - 1, before its closing barrier
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();  // tile's stage is in shared memory for every warp
    if (k0 < wend) prefill_tile<D>(ks[buf], vs[buf], k0, lim0, lim1, qa, qb4, scale_log2, acc);
    __syncthreads();  // every warp is done with this stage before tile + 2 loads into it
  }
  prefill_store<D>(out, acc, ((size_t)ia * nq + ha) * D, ((size_t)ib * nq + hb) * D, ia <= i_last, ib <= i_last);
}

}  // namespace

// Registers: 64 accumulators, 32 for the Q fragments, 32 for a k-step's V
// fragments; two blocks per SM leaves up to 255 per thread (no spills) and
// the 37 KB of shared memory twice.
#define LLAMA_PREFILL_ATTN_DEF(SFX, D, G)                                                                      \
  extern "C" __global__ void __launch_bounds__(128, 2)                                                        \
      llama_prefill_attn##SFX##_g##G(__nv_bfloat16 *out, const __nv_bfloat16 *q, const __nv_bfloat16 *k_cache, \
                                     const __nv_bfloat16 *v_cache, const int *pos, int M, int nkv, int max_ctx, \
                                     float scale_log2) {                                                       \
    prefill_attn<D, G>(out, q, k_cache, v_cache, pos, M, nkv, max_ctx, scale_log2);                            \
  }
#define LLAMA_PREFILL_ATTN_DEF_128(G) LLAMA_PREFILL_ATTN_DEF(, 128, G)
#define LLAMA_PREFILL_ATTN_DEF_64(G) LLAMA_PREFILL_ATTN_DEF(_d64, 64, G)
LLAMA_GROUPS(LLAMA_PREFILL_ATTN_DEF_128)
LLAMA_GROUPS(LLAMA_PREFILL_ATTN_DEF_64)
