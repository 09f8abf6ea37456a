// step.cu - the Llama example engine's own device code: RMSNorm, RoPE +
// KV-cache append, and split-KV (flash-decoding) attention with GQA.
//
// This is engine code, not tpgraph's: the engine embeds this file's fatbin
// and hands it to tpg_module_load, then adds these kernels to its plan by
// name (kernels.h has the contract). Decisions:
// - One token per sequence (decode), so every kernel is memory-bound; the
//   only large one is attention, which reads the KV cache once: a block takes
//   one KV head and ALL G query heads of its group (GQA), so each key and
//   value is read from memory once per step, not G times.
// - The context is split over blocks (flash-decoding) so that batch 1 with 4
//   KV heads still fills the GPU; a second small kernel merges the splits
//   with their (max, sum) statistics. Softmax is fp32 in the log2 domain.
// - Per-step inputs come from device memory (pos), never from kernel
//   arguments, so one instantiated graph serves every step.
#include <cuda_bf16.h>
#include <stdint.h>

#include "examples/llama/kernels/kernels.h"
#include "examples/llama/kernels/common.cuh"

namespace {

// The head dim of the scalar first pass (llama_attn_g<G>) and the rows of
// RMSNorm's vectors; the tensor-core kernels take theirs as a parameter D.
constexpr int kD = LLAMA_HEAD_DIM;

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// 8 bf16 in a 16-byte word <-> floats.
__device__ __forceinline__ void unpack8(const uint4 &u, float f[8]) {
  const __nv_bfloat162 *p = reinterpret_cast<const __nv_bfloat162 *>(&u);
#pragma unroll
  for (int i = 0; i < 4; i++) {
    float2 t = __bfloat1622float2(p[i]);
    f[2 * i] = t.x;
    f[2 * i + 1] = t.y;
  }
}
__device__ __forceinline__ uint4 pack8(const float f[8]) {
  uint4 u;
  __nv_bfloat162 *p = reinterpret_cast<__nv_bfloat162 *>(&u);
#pragma unroll
  for (int i = 0; i < 4; i++) p[i] = __floats2bfloat162_rn(f[2 * i], f[2 * i + 1]);
  return u;
}

}  // namespace

// One block per row. Rows of up to 8 vectors per thread (hidden <= 16384 at
// 256 threads) stay in registers: every load of x and w is issued before any
// is used (one memory round trip, not one per loop trip plus a second pass
// that reads x and w again). Longer rows take the two-pass loop.
extern "C" __global__ void __launch_bounds__(256)
    llama_rmsnorm(__nv_bfloat16 *y, const __nv_bfloat16 *x, const __nv_bfloat16 *w, int hidden, float eps) {
  constexpr int kMaxV = 8;
  __shared__ float part[32];
  const int nv = hidden / 8, t = threadIdx.x, nt = blockDim.x;
  const bool regs = nv <= kMaxV * nt;
  const uint4 *wr = reinterpret_cast<const uint4 *>(w);
  uint4 wv[kMaxV], xv[kMaxV];
  pdl_wait();
  const uint4 *xr = reinterpret_cast<const uint4 *>(x + (size_t)blockIdx.x * hidden);
  float ss = 0.f;
  if (regs) {
#pragma unroll
    for (int u = 0; u < kMaxV; u++)
      if (t + u * nt < nv) {
        xv[u] = xr[t + u * nt];
        wv[u] = wr[t + u * nt];
      }
#pragma unroll
    for (int u = 0; u < kMaxV; u++)
      if (t + u * nt < nv) {
        float f[8];
        unpack8(xv[u], f);
#pragma unroll
        for (int j = 0; j < 8; j++) ss += f[j] * f[j];
      }
  } else {
    for (int i = t; i < nv; i += nt) {
      float f[8];
      unpack8(xr[i], f);
#pragma unroll
      for (int j = 0; j < 8; j++) ss += f[j] * f[j];
    }
  }
  ss = warp_sum(ss);
  if ((t & 31) == 0) part[t >> 5] = ss;
  __syncthreads();
  if (t < 32) {
    float v = t < (nt + 31) / 32 ? part[t] : 0.f;
    v = warp_sum(v);
    if (t == 0) part[0] = v;
  }
  __syncthreads();
  const float r = rsqrtf(part[0] / (float)hidden + eps);
  uint4 *yr = reinterpret_cast<uint4 *>(y + (size_t)blockIdx.x * hidden);
  if (regs) {
#pragma unroll
    for (int u = 0; u < kMaxV; u++)
      if (t + u * nt < nv) {
        float f[8], g[8];
        unpack8(xv[u], f);
        unpack8(wv[u], g);
#pragma unroll
        for (int j = 0; j < 8; j++) f[j] = f[j] * r * g[j];
        yr[t + u * nt] = pack8(f);
      }
  } else {
    for (int i = t; i < nv; i += nt) {
      float f[8], g[8];
      unpack8(xr[i], f);
      unpack8(wr[i], g);
#pragma unroll
      for (int j = 0; j < 8; j++) f[j] = f[j] * r * g[j];
      yr[i] = pack8(f);
    }
  }
}

// RoPE: rope_rotate (kernels/common.cuh), shared with the prefill kernels.
namespace {
template <int D>
__device__ __forceinline__ void rope_append(__nv_bfloat16 *q, __nv_bfloat16 *k_cache, __nv_bfloat16 *v_cache,
                                            const __nv_bfloat16 *qkv, const int *pos, int nq, int nkv, int max_ctx,
                                            float theta, const float *inv_freq) {
  static_assert(kHeadDimOk<D>, "a head dim with kernels");
  const int b = blockIdx.x, h = blockIdx.y, i = threadIdx.x;
  pdl_wait();
  const int p = pos[b];
  const __nv_bfloat16 *src = qkv + ((size_t)b * (nq + 2 * nkv) + h) * D;
  float a = __bfloat162float(src[i]), c = __bfloat162float(src[i + D / 2]);
  if (h < nq + nkv) rope_rotate<D>(a, c, p, i, theta, inv_freq);
  __nv_bfloat16 *dst;
  if (h < nq) {
    dst = q + ((size_t)b * nq + h) * D;
  } else {
    if (p < 0 || p >= max_ctx) return;  // the engine's bug; never write outside the cache
    const int kv = h < nq + nkv ? h - nq : h - nq - nkv;
    dst = (h < nq + nkv ? k_cache : v_cache) + (((size_t)b * nkv + kv) * max_ctx + p) * D;
  }
  dst[i] = __float2bfloat16_rn(a);
  dst[i + D / 2] = __float2bfloat16_rn(c);
}
}  // namespace

#define LLAMA_ROPE_APPEND_DEF(SFX, D)                                                                            \
  extern "C" __global__ void __launch_bounds__(D / 2)                                                          \
      llama_rope_append##SFX(__nv_bfloat16 *q, __nv_bfloat16 *k_cache, __nv_bfloat16 *v_cache,                 \
                             const __nv_bfloat16 *qkv, const int *pos, int nq, int nkv, int max_ctx, float theta, \
                             const float *inv_freq) {                                                           \
    rope_append<D>(q, k_cache, v_cache, qkv, pos, nq, nkv, max_ctx, theta, inv_freq);                           \
  }
LLAMA_ROPE_APPEND_DEF(, 128)
LLAMA_ROPE_APPEND_DEF(_d64, 64)

namespace {

// The scalar first pass's shapes: K rows padded so that a warp's row reads
// avoid bank conflicts; HPT heads a thread, GP = G and the padding head.
template <int G>
struct Fma {
  static constexpr int T = LLAMA_ATTN_TILE, KP = kD + 8;
  static constexpr int HPT = G >= 2 ? (G + 1) / 2 : 1, GP = G >= 2 ? 2 * HPT : 1;
};

// Keys k0 .. k0 + nk - 1 of head kb / vb into ks / vs: 64 rows x 16 chunks of
// 16 bytes, 8 per thread, all loads issued before the stores; rows past nk
// are zeros (P V sums whole tiles, p = 0 there).
template <int G>
__device__ __forceinline__ void fma_tile(__nv_bfloat16 *ks, __nv_bfloat16 *vs, const __nv_bfloat16 *kb,
                                         const __nv_bfloat16 *vb, int k0, int nk) {
  constexpr int KP = Fma<G>::KP;
  const int t = threadIdx.x;
  uint4 kr[8], vr[8];
#pragma unroll
  for (int j = 0; j < 8; j++) {
    const int c = t + j * 128, row = c >> 4, col = c & 15;
    if (row < nk) {
      kr[j] = *reinterpret_cast<const uint4 *>(kb + (size_t)(k0 + row) * kD + col * 8);
      vr[j] = *reinterpret_cast<const uint4 *>(vb + (size_t)(k0 + row) * kD + col * 8);
    } else {
      kr[j] = vr[j] = make_uint4(0, 0, 0, 0);
    }
  }
#pragma unroll
  for (int j = 0; j < 8; j++) {
    const int c = t + j * 128, row = c >> 4, col = c & 15;
    *reinterpret_cast<uint4 *>(ks + row * KP + col * 8) = kr[j];
    *reinterpret_cast<uint4 *>(vs + row * kD + col * 8) = vr[j];
  }
}

// Scores of key kk for heads g0 .. g0 + HPT - 1 (the last may be the
// padding, whose p stay 0) into ps; keys past nk -inf.
template <int G>
__device__ __forceinline__ void fma_scores(const float *qs, const __nv_bfloat16 *ks, float *ps, int kk, int g0,
                                           int nk) {
  constexpr int T = Fma<G>::T, KP = Fma<G>::KP, HPT = Fma<G>::HPT, GP = Fma<G>::GP;
  float d[HPT];
#pragma unroll
  for (int j = 0; j < HPT; j++) d[j] = 0.f;
  const __nv_bfloat16 *krow = ks + kk * KP;
#pragma unroll 4
  for (int c = 0; c < kD; c += 8) {
    float kf[8];
    unpack8(*reinterpret_cast<const uint4 *>(krow + c), kf);
#pragma unroll
    for (int j = 0; j < HPT; j++) {
      const float4 qa = *reinterpret_cast<const float4 *>(qs + (g0 + j) * kD + c);
      const float4 qb = *reinterpret_cast<const float4 *>(qs + (g0 + j) * kD + c + 4);
      d[j] += qa.x * kf[0] + qa.y * kf[1] + qa.z * kf[2] + qa.w * kf[3] + qb.x * kf[4] + qb.y * kf[5] +
              qb.z * kf[6] + qb.w * kf[7];
    }
  }
#pragma unroll
  for (int j = 0; j < HPT; j++) {
    const bool real = GP == G || g0 + j < G;
    ps[(g0 + j) * T + kk] = !real ? 0.f : kk < nk ? d[j] : -INFINITY;
  }
}

// The online softmax of a tile, one warp per head: p = exp2(s - m) in ps,
// the running (max, sum) in ms, ls, and each head's rescale in alphas.
template <int G>
__device__ __forceinline__ void fma_softmax(float *ps, float *ms, float *ls, float *alphas) {
  constexpr int T = Fma<G>::T;
  const int w = threadIdx.x >> 5, lane = threadIdx.x & 31;
  for (int g = w; g < G; g += 4) {
    float a0 = ps[g * T + lane], a1 = ps[g * T + lane + 32];
    const float mold = ms[g];
    const float mnew = fmaxf(mold, warp_max(fmaxf(a0, a1)));  // key k0 is valid: finite
    a0 = exp2f(a0 - mnew);
    a1 = exp2f(a1 - mnew);
    ps[g * T + lane] = a0;
    ps[g * T + lane + 32] = a1;
    const float sum = warp_sum(a0 + a1);
    if (lane == 0) {
      const float al = exp2f(mold - mnew);  // 0 on the first tile (mold = -inf)
      alphas[g] = al;
      ls[g] = ls[g] * al + sum;
      ms[g] = mnew;
    }
  }
}

// P V into this thread's dims 2kk, 2kk + 1 of heads g0 ..: each value row
// read once for all HPT heads.
template <int G>
__device__ __forceinline__ void fma_pv(float (&acc)[Fma<G>::HPT][2], const float *alphas, const float *ps,
                                       const __nv_bfloat16 *vs, int kk, int g0) {
  constexpr int T = Fma<G>::T, HPT = Fma<G>::HPT;
#pragma unroll
  for (int j = 0; j < HPT; j++) {
    const float al = alphas[g0 + j];
    acc[j][0] *= al;
    acc[j][1] *= al;
  }
#pragma unroll 2
  for (int k = 0; k < T; k += 4) {
    float2 v[4];
#pragma unroll
    for (int u = 0; u < 4; u++)
      v[u] = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162 *>(vs + (k + u) * kD + 2 * kk));
#pragma unroll
    for (int j = 0; j < HPT; j++) {
      const float4 p4 = *reinterpret_cast<const float4 *>(ps + (g0 + j) * T + k);
      acc[j][0] += p4.x * v[0].x + p4.y * v[1].x + p4.z * v[2].x + p4.w * v[3].x;
      acc[j][1] += p4.x * v[0].y + p4.y * v[1].y + p4.z * v[2].y + p4.w * v[3].y;
    }
  }
}

// One block: KV head h of sequence b, keys of split s, the G query heads of
// the group. Per tile of LLAMA_ATTN_TILE keys: K and V to shared memory,
// scores, an online-softmax update per head (one warp per head), then P V.
// Thread t owns output dims 2(t%64), 2(t%64)+1 of heads (t/64)*HPT .. +HPT-1
// and computes the scores of key t%64 for the same heads. An odd group G > 1
// gets one padding head G (HPT = (G + 1) / 2 per half): its query is zero
// and its output is never stored, so both halves run the same unrolled code.
template <int G>
__device__ __forceinline__ void attn_partial(float *o_part, float *ml_part, const __nv_bfloat16 *q,
                                             const __nv_bfloat16 *k_cache, const __nv_bfloat16 *v_cache,
                                             const int *pos, int nkv, int max_ctx, int split_len, int nsplit,
                                             float scale_log2) {
  constexpr int T = Fma<G>::T, KP = Fma<G>::KP, HPT = Fma<G>::HPT, GP = Fma<G>::GP;
  static_assert(T == 64, "thread t%64 is a key of the tile");
  __shared__ __align__(16) __nv_bfloat16 ks[T * KP];
  __shared__ __align__(16) __nv_bfloat16 vs[T * kD];
  __shared__ __align__(16) float qs[GP * kD];
  __shared__ __align__(16) float ps[GP * T];
  __shared__ float ms[GP], ls[GP], alphas[GP];

  const int s = blockIdx.x, h = blockIdx.y, b = blockIdx.z, t = threadIdx.x;
  pdl_wait();
  const int nq = nkv * G;
  const int len = pos[b] + 1;
  const int start = s * split_len;
  if (start >= len) return;  // combine reads only the splits that hold keys
  const int end = min(len, start + split_len);

  const __nv_bfloat16 *qg = q + ((size_t)b * nq + (size_t)h * G) * kD;
  for (int i = t; i < GP * kD; i += blockDim.x) qs[i] = i < G * kD ? __bfloat162float(qg[i]) * scale_log2 : 0.f;
  if (t < GP) {
    ms[t] = -INFINITY;
    ls[t] = 0.f;
    alphas[t] = 0.f;  // the padding head's stays 0
  }
  const int kk = t & 63, hs = t >> 6, g0 = hs * HPT;
  float acc[HPT][2];
#pragma unroll
  for (int j = 0; j < HPT; j++) acc[j][0] = acc[j][1] = 0.f;
  const size_t head = ((size_t)b * nkv + h) * (size_t)max_ctx * kD;
  for (int k0 = start; k0 < end; k0 += T) {
    const int nk = min(T, end - k0);
    __syncthreads();  // the previous tile is consumed (first pass: qs, ms, ls written)
    fma_tile<G>(ks, vs, k_cache + head, v_cache + head, k0, nk);
    __syncthreads();
    if (g0 < G) fma_scores<G>(qs, ks, ps, kk, g0, nk);
    __syncthreads();
    fma_softmax<G>(ps, ms, ls, alphas);
    __syncthreads();
    if (g0 < G) fma_pv<G>(acc, alphas, ps, vs, kk, g0);
  }
#pragma unroll
  for (int j = 0; j < HPT; j++) {
    const int g = g0 + j;
    if (g < G)
      *reinterpret_cast<float2 *>(o_part + (((size_t)b * nq + (size_t)h * G + g) * nsplit + s) * kD + 2 * kk) =
          make_float2(acc[j][0], acc[j][1]);
  }
  if (t < G) {  // ms, ls: last written before the P V phase's barrier
    float *ml = ml_part + (((size_t)b * nq + (size_t)h * G + t) * nsplit + s) * 2;
    ml[0] = ms[t];
    ml[1] = ls[t];
  }
}

}  // namespace

#define LLAMA_ATTN_DEF(G)                                                                                        \
  extern "C" __global__ void __launch_bounds__(128)                                                            \
      llama_attn_g##G(float *o_part, float *ml_part, const __nv_bfloat16 *q, const __nv_bfloat16 *k_cache,     \
                      const __nv_bfloat16 *v_cache, const int *pos, int nkv, int max_ctx, int split_len,        \
                      int nsplit, float scale_log2) {                                                           \
    attn_partial<G>(o_part, ml_part, q, k_cache, v_cache, pos, nkv, max_ctx, split_len, nsplit, scale_log2);  \
  }
LLAMA_GROUPS(LLAMA_ATTN_DEF)

namespace {

// The tensor-core form of attn_partial: same block (s, h, b), same outputs.
// Each of the 4 warps is its own little split: it takes keys base .. base+15
// for base = start + 16 w, start + 64 + 16 w, ..., keeps its own running
// (max, sum) per head and its own output, and the 4 are merged at the end,
// so there is no __syncthreads in the loop. Per 16 keys, with the GQA group as
// the 16 rows of m16n8k16 (G <= 8: rows G.. are zero queries, never written):
//   S [16 heads x 16 keys] = Q K^T : 2 n-tiles of 8 keys x 8 k-steps of 16 dims
//   O [16 heads x 128 dims] += P V : 16 n-tiles of 8 dims x 1 k-step of 16 keys
// Everything is loaded straight from global memory into fragments, no shared
// memory: lane (g, tig) = (lane / 4, lane % 4).
// - Q K^T: the dot product does not care in which order the dims are summed,
//   so k-step (j, A) takes dims 32j + 8 tig + {0,1 | 2,3} and (j, B) + {4,5 |
//   6,7} for slots {2tig, 2tig+1 | 2tig+8, 2tig+9}: Q's A fragments and K's B
//   fragments (key base + 8n + g) are then whole 16-byte loads of 8 dims.
// - P: S's accumulator layout is P's A-fragment layout (slot j <-> key base + j).
// - P V: V's B fragment pairs two keys at one dim, so lane (g, tig) loads keys
//   2tig, 2tig+1, 2tig+8, 2tig+9 at dims 64H + 8g .. +7 (16-byte loads) and
//   pairs them with byte permutes: n-tile (H, i) column g is dim 64H + 8g + i.
//   Its accumulator then holds dims 64H + 16 tig + i (c0) and + 8 + i (c1).
// - P enters as bf16 hi + lo (split2): two MMAs, fp32-softmax precision.
// The scale is applied to the fp32 scores (q and k enter exactly as stored).
// The fused form's extra arguments (llama_attn_fused_g<G>, FUSED = true).
struct FusedArgs {
  __nv_bfloat16 *out;          // [B, nq * D]: the merged attention output
  unsigned *counters;          // [B * nkv]: splits done per (sequence, KV head); 0 between launches
  __nv_bfloat16 *k_cache_w, *v_cache_w;  // the caches, written at pos (the same buffers as k_cache, v_cache)
  const __nv_bfloat16 *qkv;    // [B, (nq + 2 nkv) * D]: the QKV projection, unrotated
  float theta;
  const float *inv_freq;       // [D / 2] RoPE's inverse frequencies, or null (from theta)
};

// FUSED: RoPE here instead of a node of its own: the group's G query heads
// of sequence b, rotated and rounded to bf16 as llama_rope_append stores
// them, into qsm; the split that holds position p (last_split) also rotates
// the new key and writes it and the value into the caches, before any warp
// of this block reads keys (no other block reads position p).
template <int D, int G>
__device__ __forceinline__ void fused_rope(const FusedArgs &f, int b, int h, int nkv, int p, int max_ctx,
                                           bool last_split, __nv_bfloat16 (*qsm)[D]) {
  const int nq = nkv * G, nh = nq + 2 * nkv, t = threadIdx.x;
  const __nv_bfloat16 *src = f.qkv + (size_t)b * nh * D;
  rope_queries<D, G>(src, h, p, f.theta, f.inv_freq, qsm);
  if (last_split && p < max_ctx) {  // p >= max_ctx would be the engine's bug: never write outside the cache
    const size_t row = (((size_t)b * nkv + h) * max_ctx + p) * D;
    const int i = t & (D / 2 - 1);  // threads 0 .. D/2 - 1: the key; D/2 .. D - 1: the value
    if (t < D / 2) {
      const __nv_bfloat16 *x = src + ((size_t)nq + h) * D;
      float a = __bfloat162float(x[i]), c = __bfloat162float(x[i + D / 2]);
      rope_rotate<D>(a, c, p, i, f.theta, f.inv_freq);
      f.k_cache_w[row + i] = __float2bfloat16_rn(a);
      f.k_cache_w[row + i + D / 2] = __float2bfloat16_rn(c);
    } else if (t < D) {
      const __nv_bfloat16 *x = src + ((size_t)nq + nkv + h) * D;
      f.v_cache_w[row + i] = x[i];
      f.v_cache_w[row + i + D / 2] = x[i + D / 2];
    }
  }
}

// One warp's keys of the split [start, end): steps of 16 keys base = start
// + 16 w, start + 64 + 16 w, ... (the comment above attn_partial_tc says
// how). All 16 loads of a step go out first (8 KB per warp in flight); keys
// at or past the end load as zeros: their scores are masked, and V rows of 0
// keep 0 * garbage out of P V.
template <int D>
__device__ __forceinline__ void tc_keys(const __nv_bfloat16 *kb, const __nv_bfloat16 *vb, int start, int end,
                                        const uint4 (&qa)[D / 32], const uint4 (&qb)[D / 32], float scale_log2,
                                        WarpAcc<D> &acc) {
  constexpr int W = 4, KS = 16, KJ = D / 32, VH = D / 64;
  const int w = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, tig = lane & 3;
  for (int base = start + KS * w; base < end; base += KS * W) {
    uint4 kr[2][KJ], vr[4][VH];
#pragma unroll
    for (int n = 0; n < 2; n++) {
      const int key = base + 8 * n + g;
#pragma unroll
      for (int j = 0; j < KJ; j++)
        kr[n][j] = key < end ? *reinterpret_cast<const uint4 *>(kb + (size_t)key * D + 32 * j + 8 * tig)
                             : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int r = 0; r < 4; r++) {
      const int key = base + 2 * tig + (r & 1) + 8 * (r >> 1);
#pragma unroll
      for (int H = 0; H < VH; H++)
        vr[r][H] = key < end ? *reinterpret_cast<const uint4 *>(vb + (size_t)key * D + 64 * H + 8 * g)
                             : make_uint4(0, 0, 0, 0);
    }
    float sc[2][4];
#pragma unroll
    for (int n = 0; n < 2; n++) {
      sc[n][0] = sc[n][1] = sc[n][2] = sc[n][3] = 0.f;
#pragma unroll
      for (int j = 0; j < KJ; j++) {
        mma_bf16(sc[n], qa[j].x, qb[j].x, qa[j].y, qb[j].y, kr[n][j].x, kr[n][j].y);
        mma_bf16(sc[n], qa[j].z, qb[j].z, qa[j].w, qb[j].w, kr[n][j].z, kr[n][j].w);
      }
    }
    // Online softmax (log2 domain). sc[n][c]: row g (c < 2) or g + 8, key
    // base + 8n + 2tig + (c & 1); the row's 16 keys live in the 4 lanes tig.
#pragma unroll
    for (int n = 0; n < 2; n++)
#pragma unroll
      for (int c = 0; c < 4; c++)
        sc[n][c] = base + 8 * n + 2 * tig + (c & 1) < end ? sc[n][c] * scale_log2 : -INFINITY;
    float al0, al1;
    softmax_step(sc, acc.m0, acc.m1, acc.l0, acc.l1, al0, al1);  // key base is valid: the max is finite
    uint32_t ph[4], pl[4];  // A fragments of P: (row g | g+8) x (keys 2tig.. | 2tig+8..)
    p_fragments(sc[0], sc[1], ph, pl);
    rescale_pv<D>(acc, al0, al1, vr, ph, pl);
  }
}

template <int D, int G, bool FUSED>
__device__ __forceinline__ void attn_partial_tc(float *o_part, float *ml_part, const __nv_bfloat16 *q,
                                                const __nv_bfloat16 *k_cache, const __nv_bfloat16 *v_cache,
                                                const int *pos, int nkv, int max_ctx, int split_len, int nsplit,
                                                float scale_log2, const FusedArgs &f) {
  static_assert(G >= 1 && G <= 16, "the group is the 16 rows of one MMA");
  static_assert(kHeadDimOk<D>, "a head dim with kernels");
  constexpr int W = 4, OP = D + 4, KJ = D / 32;  // warps; padded rows of the merge; Q K^T k-step pairs
  constexpr int QG = FUSED ? G : 1;              // rotated queries staged in shared memory (fused form)
  __shared__ __align__(16) float osm[W][G][OP];
  __shared__ __align__(16) __nv_bfloat16 qsm[QG][D];
  const int s = blockIdx.x, h = blockIdx.y, b = blockIdx.z, t = threadIdx.x;
  const int g = (t & 31) >> 2, tig = t & 3;
  pdl_wait();
  const int nq = nkv * G;
  const int p = pos[b], len = p + 1;
  const int start = s * split_len;
  if (start >= len) return;  // the merge reads only the splits that hold keys
  const int end = min(len, start + split_len);
  const int ns = (len + split_len - 1) / split_len;  // splits that hold keys

  const __nv_bfloat16 *qg;
  if constexpr (FUSED) {
    fused_rope<D, G>(f, b, h, nkv, p, max_ctx, s == ns - 1, qsm);
    __syncthreads();  // qsm and the new cache row, before any warp reads them
    qg = &qsm[0][0];
  } else {
    qg = q + ((size_t)b * nq + (size_t)h * G) * D;
  }
  // Q fragments, fixed for the whole split: qa for head g, qb for head g + 8
  // (MMA rows holding no query head load zeros: kernels/paged.cu's rule).
  uint4 qa[KJ], qb[KJ];
#pragma unroll
  for (int j = 0; j < KJ; j++) {
    const uint4 z = make_uint4(0, 0, 0, 0);
    const bool r0 = G >= 8 || g < G, r1 = G == 16 || (G > 8 && g + 8 < G);
    qa[j] = r0 ? *reinterpret_cast<const uint4 *>(qg + (size_t)g * D + 32 * j + 8 * tig) : z;
    qb[j] = r1 ? *reinterpret_cast<const uint4 *>(qg + (size_t)(g + 8) * D + 32 * j + 8 * tig) : z;
  }
  WarpAcc<D> acc;  // rows g, g + 8; l: this lane's keys only
  init_acc(acc);
  const size_t head = ((size_t)b * nkv + h) * (size_t)max_ctx * D;
  tc_keys<D>(k_cache + head, v_cache + head, start, end, qa, qb, scale_log2, acc);
  const size_t row = (size_t)b * nq + (size_t)h * G;
  store_split_partials<D, G>(o_part, ml_part, row, nsplit, s, acc, &osm[0][0][0]);
  if constexpr (FUSED)
    merge_last_split<D, G>(f.out, o_part, ml_part, f.counters + (size_t)b * nkv + h, row, nsplit, ns);
  (void)t;
}

}  // namespace

// Registers (ptxas -v, CUDA 13.0, sm_90a, D = 128): unbounded, 174-184 per
// thread, so 2 blocks (8 warps) per SM; held to 168 for a third block, i.e.
// 50% more loads in flight, for 0-24 spilled bytes per thread.
#define LLAMA_ATTN_TC_DEF(SFX, D, G)                                                                           \
  extern "C" __global__ void __launch_bounds__(128, 3)                                                         \
      llama_attn_tc##SFX##_g##G(float *o_part, float *ml_part, const __nv_bfloat16 *q,                          \
                                const __nv_bfloat16 *k_cache, const __nv_bfloat16 *v_cache, const int *pos,     \
                                int nkv, int max_ctx, int split_len, int nsplit, float scale_log2) {            \
    attn_partial_tc<D, G, false>(o_part, ml_part, q, k_cache, v_cache, pos, nkv, max_ctx, split_len, nsplit,   \
                                 scale_log2, FusedArgs{});                                                      \
  }                                                                                                             \
  extern "C" __global__ void __launch_bounds__(128, 3)                                                         \
      llama_attn_fused##SFX##_g##G(__nv_bfloat16 *out, float *o_part, float *ml_part, unsigned *counters,       \
                                   __nv_bfloat16 *k_cache, __nv_bfloat16 *v_cache, const __nv_bfloat16 *qkv,    \
                                   const int *pos, int nkv, int max_ctx, int split_len, int nsplit,             \
                                   float scale_log2, float theta, const float *inv_freq) {                      \
    const FusedArgs f{out, counters, k_cache, v_cache, qkv, theta, inv_freq};                                   \
    attn_partial_tc<D, G, true>(o_part, ml_part, nullptr, k_cache, v_cache, pos, nkv, max_ctx, split_len,      \
                                nsplit, scale_log2, f);                                                         \
  }
#define LLAMA_ATTN_TC_DEF_128(G) LLAMA_ATTN_TC_DEF(, 128, G)
#define LLAMA_ATTN_TC_DEF_64(G) LLAMA_ATTN_TC_DEF(_d64, 64, G)
LLAMA_GROUPS(LLAMA_ATTN_TC_DEF_128)
LLAMA_GROUPS(LLAMA_ATTN_TC_DEF_64)

// One block per (head, sequence) row, 128 threads = 4 warps. Warp w takes
// splits w, w+4, ... (merge_splits: 8 splits' loads in flight, a running
// max), so the whole row costs about one memory round trip per 32 splits
// instead of one per split; the 4 warps' (max, sum, o) are merged through
// shared memory. At D = 64 lanes 16.. of each warp repeat lanes 0..15 and
// threads 64.. store nothing.
namespace {
template <int D>
__device__ __forceinline__ void attn_combine(__nv_bfloat16 *out, const float *o_part, const float *ml_part,
                                             const int *pos, int nq, int split_len, int nsplit) {
  constexpr int kW = 4;
  __shared__ __align__(16) float os[kW][D];
  __shared__ float mws[kW], lws[kW];
  const int h = blockIdx.x, b = blockIdx.y, t = threadIdx.x, w = t >> 5, lane = (t & 31) % (D / 4);
  pdl_wait();
  const int len = pos[b] + 1;
  const int ns = min(nsplit, (len + split_len - 1) / split_len);
  const size_t row = (size_t)b * nq + h;
  const float2 *ml = reinterpret_cast<const float2 *>(ml_part + row * nsplit * 2);
  const float4 *op = reinterpret_cast<const float4 *>(o_part + row * nsplit * D) + lane;
  float m = -INFINITY, l = 0.f;
  float4 o = make_float4(0.f, 0.f, 0.f, 0.f);
  merge_splits<D>(ml, op, w, kW, ns, m, l, o);
  if ((t & 31) < D / 4) *reinterpret_cast<float4 *>(&os[w][4 * lane]) = o;
  if (lane == 0) {
    mws[w] = m;
    lws[w] = l;
  }
  __syncthreads();
  if (t >= D) return;
  float M = mws[0];
#pragma unroll
  for (int i = 1; i < kW; i++) M = fmaxf(M, mws[i]);
  float L = 0.f, O = 0.f;
#pragma unroll
  for (int i = 0; i < kW; i++) {
    const float f = mws[i] == -INFINITY ? 0.f : exp2f(mws[i] - M);  // a warp without splits adds nothing
    L += f * lws[i];
    O += f * os[i][t];
  }
  out[row * D + t] = __float2bfloat16_rn(O / L);
}
}  // namespace

#define LLAMA_ATTN_COMBINE_DEF(SFX, D)                                                                         \
  extern "C" __global__ void __launch_bounds__(128)                                                          \
      llama_attn_combine##SFX(__nv_bfloat16 *out, const float *o_part, const float *ml_part, const int *pos,  \
                              int nq, int split_len, int nsplit) {                                            \
    attn_combine<D>(out, o_part, ml_part, pos, nq, split_len, nsplit);                                        \
  }
LLAMA_ATTN_COMBINE_DEF(, 128)
LLAMA_ATTN_COMBINE_DEF(_d64, 64)
