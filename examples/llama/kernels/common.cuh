// common.cuh - device helpers shared by the engine's kernel files:
// kernels/step.cu (decode), kernels/prefill.cu (prefill) and kernels/paged.cu
// (both over the paged KV cache). One copy of each, so that every path
// rotates with the same function (the prefill's cache rows are then what the
// decode step would have written), feeds the tensor cores the same way and
// merges attention splits in the same order.
#ifndef LLAMA_KERNELS_COMMON_CUH
#define LLAMA_KERNELS_COMMON_CUH

#include <cuda_bf16.h>
#include <stdint.h>

#include "examples/llama/kernels/kernels.h"

namespace {

// Programmatic dependent launch: the engine may let these kernels start
// while the node before them still runs (tpg_kernel_desc.pdl = 1 with
// TPG_GRAPH_PDL); every block waits here for that node's completion and
// memory flush before it reads anything, then lets the node after it
// launch. Without PDL both return at once.
__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
  // Once every block of this grid is past here, the next node (a GEMM of
  // tpgraph's, which only prefetches its weights into L2 before its own
  // wait) may be launched; it still waits for this grid to complete before
  // it reads anything, so this changes when it starts, never what it sees.
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// Thread i rotates the pair (i, i + D/2): rotate_half pairs each element of
// the first half with the same index of the second. The angle is computed
// as transformers does (fp32 inv_freq = 1 / theta^(2i/D), times the fp32
// position), with the accurate sincosf: at positions near 8192 the fast
// intrinsics would be off by far more than a bf16 ulp. A scaled RoPE (Llama
// 3.1's "llama3") brings its own inv_freq table, made on the host as
// transformers makes it (model/rope.cc), instead of the formula.
// rope_rotate turns the pair (a, c) = (x[i], x[i + D/2]) of one head by
// position p: the one rotation of the engine (llama_rope_append, the fused
// attention kernel and the prefill's llama_prefill_rope), so all store the
// same bits. inv_freq: [D / 2] or null.
// rope_sincos: the angle's sine and cosine for pair i at position p (the
// same for every head of a row, so a kernel may compute it once per row);
// rope_apply turns the pair with them. rope_rotate is the two together.
template <int D>
__device__ __forceinline__ void rope_sincos(int p, int i, float theta, const float *inv_freq, float &sn, float &cs) {
  const float inv = inv_freq ? inv_freq[i] : 1.0f / powf(theta, (float)(2 * i) / (float)D);
  sincosf((float)p * inv, &sn, &cs);
}
__device__ __forceinline__ void rope_apply(float &a, float &c, float sn, float cs) {
  const float a2 = a * cs - c * sn;
  c = c * cs + a * sn;
  a = a2;
}
template <int D>
__device__ __forceinline__ void rope_rotate(float &a, float &c, int p, int i, float theta, const float *inv_freq) {
  float sn, cs;
  rope_sincos<D>(p, i, theta, inv_freq, sn, cs);
  rope_apply(a, c, sn, cs);
}

// The head dims with kernels (kernels.h): the templates below are
// instantiated for these only.
template <int D>
constexpr bool kHeadDimOk = D == LLAMA_HEAD_DIM || D == LLAMA_HEAD_DIM_SMALL;

// D += A B, m16n8k16, bf16 inputs, fp32 accumulators (sm_80+).
__device__ __forceinline__ void mma_bf16(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                         uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}
__device__ __forceinline__ uint32_t word(const uint4 &u, int i) {
  return i == 0 ? u.x : i == 1 ? u.y : i == 2 ? u.z : u.w;
}
// (x, y) as bf16x2 (x in the low half) = hi, and the rounding residue as
// bf16x2 = lo: hi + lo is x, y to about 2^-17 relative, so P V through the
// bf16 tensor cores keeps the fp32 softmax's precision.
__device__ __forceinline__ void split2(float x, float y, uint32_t &hi, uint32_t &lo) {
  const __nv_bfloat162 h = __floats2bfloat162_rn(x, y);
  const float2 hf = __bfloat1622float2(h);
  const __nv_bfloat162 l = __floats2bfloat162_rn(x - hf.x, y - hf.y);
  hi = *reinterpret_cast<const uint32_t *>(&h);
  lo = *reinterpret_cast<const uint32_t *>(&l);
}

// The flash-attention inner step both attention kernels run per warp
// (llama_attn_tc_g<G> / llama_attn_fused_g<G> over 16 keys, the prefill
// over a tile): the lane holds two MMA rows, row 0 in sc[n][0..1] and row
// 1 in sc[n][2..3] of NT n-tiles of 8 keys, a row's keys spread over the 4
// lanes of its group (tig).
//
// softmax_step: sc enters as scaled scores (log2 domain, -inf where
// masked) and leaves as p = exp2(s - m); the running max m and this lane's
// sum l are updated, and al0 / al1 (exp2(m_old - m_new): 0 on the first
// step, where m_old = -inf) rescale the row's earlier output. The caller
// guarantees each row a finite max from its first step on.
template <int NT>
__device__ __forceinline__ void softmax_step(float (&sc)[NT][4], float &m0, float &m1, float &l0, float &l1,
                                             float &al0, float &al1) {
  float mx0 = -INFINITY, mx1 = -INFINITY;
#pragma unroll
  for (int n = 0; n < NT; n++)
#pragma unroll
    for (int c = 0; c < 4; c++) {
      if (c < 2)
        mx0 = fmaxf(mx0, sc[n][c]);
      else
        mx1 = fmaxf(mx1, sc[n][c]);
    }
#pragma unroll
  for (int o = 1; o <= 2; o <<= 1) {
    mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, o));
    mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, o));
  }
  const float mn0 = fmaxf(m0, mx0), mn1 = fmaxf(m1, mx1);
  al0 = exp2f(m0 - mn0);
  al1 = exp2f(m1 - mn1);
  m0 = mn0;
  m1 = mn1;
  l0 *= al0;
  l1 *= al1;
#pragma unroll
  for (int n = 0; n < NT; n++) {
    sc[n][0] = exp2f(sc[n][0] - mn0);  // masked keys: exp2(-inf) = 0
    sc[n][1] = exp2f(sc[n][1] - mn0);
    sc[n][2] = exp2f(sc[n][2] - mn1);
    sc[n][3] = exp2f(sc[n][3] - mn1);
    l0 += sc[n][0] + sc[n][1];
    l1 += sc[n][2] + sc[n][3];
  }
}

// P's A fragments for 16 keys, the n-tiles s0 (keys 0..7) and s1 (8..15)
// of softmax_step's output: S's accumulator layout is P's A-fragment
// layout; each as bf16 hi + lo parts (split2).
__device__ __forceinline__ void p_fragments(const float (&s0)[4], const float (&s1)[4], uint32_t (&ph)[4],
                                            uint32_t (&pl)[4]) {
  split2(s0[0], s0[1], ph[0], pl[0]);
  split2(s0[2], s0[3], ph[1], pl[1]);
  split2(s1[0], s1[1], ph[2], pl[2]);
  split2(s1[2], s1[3], ph[3], pl[3]);
}

// P's A fragments as plain bf16 (the prefill's form: one MMA per n-tile,
// P rounded as FlashAttention rounds it; see prefill_tile).
__device__ __forceinline__ void p_fragments_bf16(const float (&s0)[4], const float (&s1)[4], uint32_t (&ph)[4]) {
  const __nv_bfloat162 a = __floats2bfloat162_rn(s0[0], s0[1]), b = __floats2bfloat162_rn(s0[2], s0[3]),
                       c = __floats2bfloat162_rn(s1[0], s1[1]), d = __floats2bfloat162_rn(s1[2], s1[3]);
  ph[0] = *reinterpret_cast<const uint32_t *>(&a);
  ph[1] = *reinterpret_cast<const uint32_t *>(&b);
  ph[2] = *reinterpret_cast<const uint32_t *>(&c);
  ph[3] = *reinterpret_cast<const uint32_t *>(&d);
}

// V's B fragment for output n-tile i of a 64-dim half: v0..v3 are the
// lane's value rows of keys 2tig, 2tig + 1, 2tig + 8, 2tig + 9 at the
// half's dims 8g .. 8g + 7; byte permutes pair two keys at one dim
// (column g of n-tile i is dim 8g + i).
__device__ __forceinline__ void v_fragment(const uint4 &v0, const uint4 &v1, const uint4 &v2, const uint4 &v3, int i,
                                           uint32_t &b0, uint32_t &b1) {
  const uint32_t sel = (i & 1) ? 0x7632u : 0x5410u;
  b0 = __byte_perm(word(v0, i >> 1), word(v1, i >> 1), sel);
  b1 = __byte_perm(word(v2, i >> 1), word(v3, i >> 1), sel);
}

// o += P V for output n-tile i (v_fragment), P as hi and lo MMAs.
__device__ __forceinline__ void pv_mma(float (&o)[4], const uint4 &v0, const uint4 &v1, const uint4 &v2,
                                       const uint4 &v3, int i, const uint32_t (&ph)[4], const uint32_t (&pl)[4]) {
  uint32_t b0, b1;
  v_fragment(v0, v1, v2, v3, i, b0, b1);
  mma_bf16(o, ph[0], ph[1], ph[2], ph[3], b0, b1);
  mma_bf16(o, pl[0], pl[1], pl[2], pl[3], b0, b1);
}

// The same with P as plain bf16 (p_fragments_bf16): one MMA.
__device__ __forceinline__ void pv_mma_bf16(float (&o)[4], const uint4 &v0, const uint4 &v1, const uint4 &v2,
                                            const uint4 &v3, int i, const uint32_t (&ph)[4]) {
  uint32_t b0, b1;
  v_fragment(v0, v1, v2, v3, i, b0, b1);
  mma_bf16(o, ph[0], ph[1], ph[2], ph[3], b0, b1);
}

// One warp's share of a split merge: splits first, first + stride, ... <
// ns of one (query head, sequence) row, lane l owning dims 4l..4l+3 (op is
// already offset by the lane; at D = 64 lanes 16.. repeat lanes 0..15).
// kCU splits' loads go out before any is used
// (from L2: other blocks or kernels wrote them), and the running max
// rescales the sums when it grows, so a row of many splits costs a few
// memory round trips. Folds into (m, l, o); the result is sum_s exp2(m_s -
// m) o_s / sum_s exp2(m_s - m) l_s up to fp32 summation order.
template <int D>
__device__ __forceinline__ void merge_splits(const float2 *ml, const float4 *op, int first, int stride, int ns,
                                             float &m, float &l, float4 &o) {
  constexpr int kCU = 8;
  for (int s0 = first; s0 < ns; s0 += stride * kCU) {
    float2 st[kCU];
    float4 v[kCU];
#pragma unroll
    for (int u = 0; u < kCU; u++) {
      const int sp = s0 + u * stride;
      if (sp < ns) {
        st[u] = __ldcg(ml + sp);
        v[u] = __ldcg(op + (size_t)sp * (D / 4));
      } else {
        st[u] = make_float2(-INFINITY, 0.f);
        v[u] = make_float4(0.f, 0.f, 0.f, 0.f);
      }
    }
    float mb = st[0].x;  // split s0 < ns holds keys: finite
#pragma unroll
    for (int u = 1; u < kCU; u++) mb = fmaxf(mb, st[u].x);
    const float mnew = fmaxf(m, mb);
    const float al = exp2f(m - mnew);  // 0 on the first batch (m = -inf)
    l *= al;
    o.x *= al;
    o.y *= al;
    o.z *= al;
    o.w *= al;
#pragma unroll
    for (int u = 0; u < kCU; u++) {
      const float wgt = exp2f(st[u].x - mnew);  // 0 for the padding (-inf)
      l += wgt * st[u].y;
      o.x += wgt * v[u].x;
      o.y += wgt * v[u].y;
      o.z += wgt * v[u].z;
      o.w += wgt * v[u].w;
    }
    m = mnew;
  }
}

// One warp's running state over its keys: rows g, g + 8 of the MMA.
template <int D>
struct WarpAcc {
  float o[D / 64][8][4];
  float m0, m1, l0, l1;  // l: this lane's keys only
};

template <int D>
__device__ __forceinline__ void init_acc(WarpAcc<D> &acc) {
#pragma unroll
  for (int H = 0; H < D / 64; H++)
#pragma unroll
    for (int k = 0; k < 8; k++) acc.o[H][k][0] = acc.o[H][k][1] = acc.o[H][k][2] = acc.o[H][k][3] = 0.f;
  acc.m0 = acc.m1 = -INFINITY;
  acc.l0 = acc.l1 = 0.f;
}

// The G query heads of KV head h in one row of the QKV projection (src),
// rotated for position p and rounded to bf16 as the unfused RoPE stores
// them, into shared memory; the block's threads share the work.
template <int D, int G>
__device__ __forceinline__ void rope_queries(const __nv_bfloat16 *src, int h, int p, float theta,
                                             const float *inv_freq, __nv_bfloat16 (*qsm)[D]) {
  for (int idx = threadIdx.x; idx < G * (D / 2); idx += blockDim.x) {
    const int gg = idx / (D / 2), i = idx % (D / 2);
    const __nv_bfloat16 *x = src + ((size_t)h * G + gg) * D;
    float a = __bfloat162float(x[i]), c = __bfloat162float(x[i + D / 2]);
    rope_rotate<D>(a, c, p, i, theta, inv_freq);
    qsm[gg][i] = __float2bfloat16_rn(a);
    qsm[gg][i + D / 2] = __float2bfloat16_rn(c);
  }
}

// A step of 16 keys into the accumulator: the output rows rescaled by the
// online softmax's al0 (row g) and al1 (row g + 8), then += P V, V being
// vr[r][H] (keys 2tig, 2tig + 1, 2tig + 8, 2tig + 9 of the 64-dim half H).
template <int D>
__device__ __forceinline__ void rescale_pv(WarpAcc<D> &acc, float al0, float al1, const uint4 (&vr)[4][D / 64],
                                           const uint32_t (&ph)[4], const uint32_t (&pl)[4]) {
#pragma unroll
  for (int H = 0; H < D / 64; H++)
#pragma unroll
    for (int i = 0; i < 8; i++) {
      float(&o)[4] = acc.o[H][i];
      o[0] *= al0;
      o[1] *= al0;
      o[2] *= al1;
      o[3] *= al1;
      pv_mma(o, vr[0][H], vr[1][H], vr[2][H], vr[3][H], i, ph, pl);
    }
}

// Keys a tile of the prefill: 32 at D = 128, 64 at D = 64 (prefill.cu says
// why); both divide LLAMA_KV_BLOCK, so a tile lies in one pool block.
template <int D>
struct PTile {
  static constexpr int KT = D == 64 ? 64 : 32, NT = KT / 8, KPK = D + 32, KPV = D + 8;
};

// One warp's share of a prefill key tile (keys k0 ..; kt, vt: the tile in
// shared memory at PTile's pitches): its rows 0 and 1 attend keys <= lim0
// and <= lim1. Q K^T, the causal mask, the online softmax, P V (prefill.cu
// says how). P enters P V as bf16, one MMA per n-tile, as in FlashAttention:
// the prompt is compute-bound, and the decode kernels' hi + lo split costs
// half as many MMAs again (P V is half of them); the output then carries
// P's rounding, at most 2^-9 max |v| (the checks' bound). A tile past a row's
// last key leaves the row exactly as it was (alpha 1, p 0), which keeps a
// row's bits independent of the rows beside it.
template <int D>
__device__ __forceinline__ void prefill_tile(const __nv_bfloat16 *kt, const __nv_bfloat16 *vt, int k0, int lim0,
                                             int lim1, const uint4 *qa, const uint4 *qb, float scale_log2,
                                             WarpAcc<D> &acc) {
  constexpr int KJ = D / 32, VH = D / 64, KT = PTile<D>::KT, NT = PTile<D>::NT;
  constexpr int KPK = PTile<D>::KPK, KPV = PTile<D>::KPV;
  const int lane = threadIdx.x & 31, g = lane >> 2, tig = lane & 3;
  float sc[NT][4];
#pragma unroll
  for (int n = 0; n < NT; n++) {
    sc[n][0] = sc[n][1] = sc[n][2] = sc[n][3] = 0.f;
#pragma unroll
    for (int j = 0; j < KJ; j++) {
      const uint4 kr = *reinterpret_cast<const uint4 *>(kt + (8 * n + g) * KPK + 32 * j + 8 * tig);
      mma_bf16(sc[n], qa[j].x, qb[j].x, qa[j].y, qb[j].y, kr.x, kr.y);
      mma_bf16(sc[n], qa[j].z, qb[j].z, qa[j].w, qb[j].w, kr.z, kr.w);
    }
  }
#pragma unroll
  for (int n = 0; n < NT; n++)
#pragma unroll
    for (int c = 0; c < 4; c++) {
      const int key = k0 + 8 * n + 2 * tig + (c & 1);
      sc[n][c] = key <= (c < 2 ? lim0 : lim1) ? sc[n][c] * scale_log2 : -INFINITY;
    }
  float al0, al1;
  softmax_step(sc, acc.m0, acc.m1, acc.l0, acc.l1, al0, al1);  // key 0 is in tile 0: m finite from there on
#pragma unroll
  for (int H = 0; H < VH; H++)
#pragma unroll
    for (int i = 0; i < 8; i++) {
      acc.o[H][i][0] *= al0;
      acc.o[H][i][1] *= al0;
      acc.o[H][i][2] *= al1;
      acc.o[H][i][3] *= al1;
    }
#pragma unroll
  for (int kk = 0; kk < KT / 16; kk++) {
    uint32_t ph[4];
    p_fragments_bf16(sc[2 * kk], sc[2 * kk + 1], ph);
    uint4 vr[4][VH];
#pragma unroll
    for (int r = 0; r < 4; r++)
#pragma unroll
      for (int H = 0; H < VH; H++)
        vr[r][H] = *reinterpret_cast<const uint4 *>(vt + (16 * kk + 2 * tig + (r & 1) + 8 * (r >> 1)) * KPV + 64 * H +
                                                    8 * g);
#pragma unroll
    for (int H = 0; H < VH; H++)
#pragma unroll
      for (int i = 0; i < 8; i++) pv_mma_bf16(acc.o[H][i], vr[0][H], vr[1][H], vr[2][H], vr[3][H], i, ph);
  }
}

// A warp's rows 0 and 1, normalised, to out at element offsets out_a and
// out_b (each stored only when asked).
template <int D>
__device__ __forceinline__ void prefill_store(__nv_bfloat16 *out, WarpAcc<D> &acc, size_t out_a, size_t out_b,
                                              bool store_a, bool store_b) {
  constexpr int VH = D / 64;
  const int tig = threadIdx.x & 3;
#pragma unroll
  for (int o = 1; o <= 2; o <<= 1) {
    acc.l0 += __shfl_xor_sync(0xffffffffu, acc.l0, o);
    acc.l1 += __shfl_xor_sync(0xffffffffu, acc.l1, o);
  }
  const float ia0 = 1.f / acc.l0, ia1 = 1.f / acc.l1;
#pragma unroll
  for (int H = 0; H < VH; H++)
#pragma unroll
    for (int half = 0; half < 2; half++) {
      uint4 va, vb;
      __nv_bfloat162 *pa = reinterpret_cast<__nv_bfloat162 *>(&va), *pb = reinterpret_cast<__nv_bfloat162 *>(&vb);
#pragma unroll
      for (int k = 0; k < 4; k++) {
        pa[k] = __floats2bfloat162_rn(acc.o[H][2 * k][half] * ia0, acc.o[H][2 * k + 1][half] * ia0);
        pb[k] = __floats2bfloat162_rn(acc.o[H][2 * k][2 + half] * ia1, acc.o[H][2 * k + 1][2 + half] * ia1);
      }
      const int d = 64 * H + 16 * tig + 8 * half;
      if (store_a) *reinterpret_cast<uint4 *>(out + out_a + d) = va;
      if (store_b) *reinterpret_cast<uint4 *>(out + out_b + d) = vb;
    }
}

// The 4 warps' (max, sum, output) of a split merged into its partials
// o_part [.., nsplit, D] and ml_part [.., nsplit, 2] of rows row .. row + G
// - 1 (one per query head of the group), through shared memory osm (4 x G x
// (D + 4) floats, free to use). A warp that had no keys left max -inf, sum
// 0, output 0. Every thread of the block calls it.
template <int D, int G>
__device__ __forceinline__ void store_split_partials(float *o_part, float *ml_part, size_t row, int nsplit, int s,
                                                     WarpAcc<D> &acc, float *osm_base) {
  constexpr int W = 4, VH = D / 64, OP = D + 4;
  const auto row0 = [](int gr) { return G >= 8 || gr < G; };  // MMA rows holding query heads (kernels/step.cu)
  const auto row1 = [](int gr) { return G == 16 || (G > 8 && gr + 8 < G); };
  float(*osm)[G][OP] = reinterpret_cast<float(*)[G][OP]>(osm_base);
  __shared__ float msm[W][G], lsm[W][G];
  const int t = threadIdx.x, w = t >> 5, lane = t & 31, g = lane >> 2, tig = lane & 3;
#pragma unroll
  for (int o = 1; o <= 2; o <<= 1) {
    acc.l0 += __shfl_xor_sync(0xffffffffu, acc.l0, o);
    acc.l1 += __shfl_xor_sync(0xffffffffu, acc.l1, o);
  }
#pragma unroll
  for (int H = 0; H < VH; H++)
#pragma unroll
    for (int k = 0; k < 8; k++) {
      const int d = 64 * H + 16 * tig + k;
      if (row0(g)) osm[w][g][d] = acc.o[H][k][0], osm[w][g][d + 8] = acc.o[H][k][1];
      if (row1(g)) osm[w][g + 8][d] = acc.o[H][k][2], osm[w][g + 8][d + 8] = acc.o[H][k][3];
    }
  if (tig == 0) {
    if (row0(g)) msm[w][g] = acc.m0, lsm[w][g] = acc.l0;
    if (row1(g)) msm[w][g + 8] = acc.m1, lsm[w][g + 8] = acc.l1;
  }
  __syncthreads();
  for (int idx = t; idx < G * D; idx += blockDim.x) {
    const int gg = idx / D, d = idx % D;
    float M = msm[0][gg];  // warp 0 holds the split's first key: finite
#pragma unroll
    for (int v = 1; v < W; v++) M = fmaxf(M, msm[v][gg]);
    float o = 0.f;
#pragma unroll
    for (int v = 0; v < W; v++) o += (msm[v][gg] == -INFINITY ? 0.f : exp2f(msm[v][gg] - M)) * osm[v][gg][d];
    o_part[((row + gg) * nsplit + s) * D + d] = o;
  }
  if (t < G) {
    float M = msm[0][t], L = 0.f;
#pragma unroll
    for (int v = 1; v < W; v++) M = fmaxf(M, msm[v][t]);
#pragma unroll
    for (int v = 0; v < W; v++) L += (msm[v][t] == -INFINITY ? 0.f : exp2f(msm[v][t] - M)) * lsm[v][t];
    ml_part[((row + t) * nsplit + s) * 2] = M;
    ml_part[((row + t) * nsplit + s) * 2 + 1] = L;
  }
}

// The split handshake: every block publishes its partials (fence) and counts
// itself in *counter; the block that brings it to ns merges the ns splits of
// rows row .. row + G - 1 in split order (merge_splits, as
// llama_attn_combine) into out [.., D] and puts the counter back to 0 for the
// next launch (the graph's order makes that visible to it).
template <int D, int G>
__device__ __forceinline__ void merge_last_split(__nv_bfloat16 *out, const float *o_part, const float *ml_part,
                                                 unsigned *counter, size_t row0, int nsplit, int ns) {
  __shared__ int last;
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) {
    last = atomicAdd(counter, 1u) == (unsigned)ns - 1;
    if (last) *counter = 0;
  }
  __syncthreads();
  if (!last) return;
  __threadfence();
  const int w = threadIdx.x >> 5, lane = (threadIdx.x & 31) % (D / 4);  // D = 64: two lanes per 4 dims
  for (int gg = w; gg < G; gg += 4) {
    const size_t row = row0 + gg;
    const float2 *ml = reinterpret_cast<const float2 *>(ml_part + row * nsplit * 2);
    const float4 *op = reinterpret_cast<const float4 *>(o_part + row * nsplit * D) + lane;
    float m = -INFINITY, l = 0.f;
    float4 o = make_float4(0.f, 0.f, 0.f, 0.f);
    merge_splits<D>(ml, op, 0, 1, ns, m, l, o);
    if ((threadIdx.x & 31) >= D / 4) continue;  // the repeat stores nothing
    const float r = 1.f / l;
    const __nv_bfloat162 lo = __floats2bfloat162_rn(o.x * r, o.y * r), hi = __floats2bfloat162_rn(o.z * r, o.w * r);
    uint2 pk;
    pk.x = *reinterpret_cast<const uint32_t *>(&lo);
    pk.y = *reinterpret_cast<const uint32_t *>(&hi);
    *reinterpret_cast<uint2 *>(out + row * D + 4 * lane) = pk;
  }
}

// 16 bytes global -> shared without registers (sm_80+); ok = false writes
// 16 zero bytes and reads nothing (src-size 0), for keys past the end.
__device__ __forceinline__ void cp_async16(void *smem, const void *gmem, bool ok) {
  const unsigned s = (unsigned)__cvta_generic_to_shared(smem);
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(gmem), "r"(ok ? 16 : 0) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

}  // namespace

#endif
