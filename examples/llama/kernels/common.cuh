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

// o += P V for output n-tile i of a 64-dim half: v0..v3 are the lane's
// value rows of keys 2tig, 2tig + 1, 2tig + 8, 2tig + 9 at the half's dims
// 8g .. 8g + 7; byte permutes pair two keys at one dim into V's B
// fragment (column g of n-tile i is dim 8g + i), then hi and lo MMAs.
__device__ __forceinline__ void pv_mma(float (&o)[4], const uint4 &v0, const uint4 &v1, const uint4 &v2,
                                       const uint4 &v3, int i, const uint32_t (&ph)[4], const uint32_t (&pl)[4]) {
  const uint32_t sel = (i & 1) ? 0x7632u : 0x5410u;
  const uint32_t b0 = __byte_perm(word(v0, i >> 1), word(v1, i >> 1), sel);
  const uint32_t b1 = __byte_perm(word(v2, i >> 1), word(v3, i >> 1), sel);
  mma_bf16(o, ph[0], ph[1], ph[2], ph[3], b0, b1);
  mma_bf16(o, pl[0], pl[1], pl[2], pl[3], b0, b1);
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
