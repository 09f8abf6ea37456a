// ar_epilogue.cuh - the fused all-reduce epilogue: +bias, +residual (and the
// new residual written out), RMSNorm.
//
// One implementation, used where our all-reduce kernels write their result
// (allreduce.cu) and by the kernel node that follows an NCCL all-reduce
// (elementwise.cu), so TPG_ALGO_AUTO/NCCL/ONESHOT/TWOSHOT give the same
// numbers. The semantics are in tpg_kargs.h (tpg_ar_epi).
//
// Two steps, because RMSNorm needs a whole row's sum of squares before any of
// its outputs can be written:
// 1. epi_store: per 16-byte vector of the sum, h = round(s + bias + residual)
//    goes to residual_out (if set) and to recv unless a norm follows; with a
//    norm and no residual_out, h is parked in recv.
// 2. epi_norm_rows: called by a whole block after a __syncthreads, for rows
//    whose every element this block stored in step 1: reads h back, reduces
//    its squares across the block, writes recv. Rows are never split across
//    blocks (the kernels partition by rows when a norm is requested), so no
//    grid-wide step is needed.
// h is rounded to the element type before the norm, as an unfused pipeline
// (residual add in bf16, then RMSNorm of that tensor) would compute it.
#ifndef TPG_AR_EPILOGUE_CUH
#define TPG_AR_EPILOGUE_CUH

#include "kernels/common.cuh"
#include "kernels/tpg_kargs.h"

namespace tpg {

TPG_DEV bool epi_on(const tpg_ar_epi &e) { return e.hidden != 0; }
TPG_DEV bool epi_norm(const tpg_ar_epi &e) { return e.norm_weight != nullptr; }

// Block b's share [v0, v1) of the message's 16-byte vectors. Without a norm:
// an even split of ceil(count / V) vectors. With a norm: whole rows (hidden is
// a multiple of 8, so rows are whole vectors and there is no partial tail).
// Every rank computes the same split (same arguments), which the peer
// protocols rely on.
template <typename T>
TPG_DEV void block_range(uint64_t count, const tpg_ar_epi &e, int b, int nb, uint64_t nvec, uint64_t &v0,
                         uint64_t &v1) {
  constexpr int V = 16 / sizeof(T);
  if (epi_norm(e)) {
    const uint64_t rows = count / e.hidden, rpb = (rows + nb - 1) / nb, vpr = e.hidden / V;
    const uint64_t r0 = min(rows, rpb * b), r1 = min(rows, r0 + rpb);
    v0 = r0 * vpr;
    v1 = r1 * vpr;
  } else {
    const uint64_t per = (nvec + nb - 1) / nb;
    v0 = min(nvec, per * b);
    v1 = min(nvec, v0 + per);
  }
}

// h for vector gi (elements gi*V ..) from the fp32 sums acc[]: + bias +
// residual, rounded to T. The epilogue must be on; only whole vectors reach
// here then (count is a multiple of hidden, a multiple of 8).
// rv: the residual's vector gi when the caller loaded it already (so that
// its load was in flight with the sum's), else NULL: loaded here.
template <typename T>
TPG_DEV uint4 epi_h(const tpg_ar_epi &e, uint64_t gi, const float *acc, const uint4 *rv = nullptr) {
  constexpr int V = 16 / sizeof(T);
  float h[V];
#pragma unroll
  for (int k = 0; k < V; k++) h[k] = acc[k];
  if (e.bias) {
    const uint64_t c = (gi * V) % e.hidden;  // a vector never crosses a row (hidden % 8 == 0)
    uint4 bv = reinterpret_cast<const uint4 *>(e.bias)[c / V];
    const T *bt = reinterpret_cast<const T *>(&bv);
#pragma unroll
    for (int k = 0; k < V; k++) h[k] += dt<T>::to_f(bt[k]);
  }
  if (e.residual) {
    // Read before residual_out (which may be the same buffer) is written.
    const uint4 r = rv ? *rv : reinterpret_cast<const uint4 *>(e.residual)[gi];
    const T *rt = reinterpret_cast<const T *>(&r);
#pragma unroll
    for (int k = 0; k < V; k++) h[k] += dt<T>::to_f(rt[k]);
  }
  uint4 o;
  T *ot = reinterpret_cast<T *>(&o);
#pragma unroll
  for (int k = 0; k < V; k++) ot[k] = dt<T>::from_f(h[k]);
  return o;
}

// Stores vector gi (elements gi*V ..) of the result from the fp32 sums acc[]:
// applies bias and residual when an epilogue is set.
template <typename T>
TPG_DEV void epi_store(const tpg_ar_epi &e, void *recv, uint64_t gi, const float *acc) {
  constexpr int V = 16 / sizeof(T);
  if (!epi_on(e)) {
    uint4 o;
    T *ot = reinterpret_cast<T *>(&o);
#pragma unroll
    for (int k = 0; k < V; k++) ot[k] = dt<T>::from_f(acc[k]);
    reinterpret_cast<uint4 *>(recv)[gi] = o;
    return;
  }
  const uint4 o = epi_h<T>(e, gi, acc);
  if (e.residual_out) reinterpret_cast<uint4 *>(e.residual_out)[gi] = o;
  if (!epi_norm(e) || !e.residual_out) reinterpret_cast<uint4 *>(recv)[gi] = o;
}

// Sum of squares of a vector's V elements.
template <typename T>
TPG_DEV float epi_sumsq(const uint4 &h) {
  constexpr int V = 16 / sizeof(T);
  const T *t = reinterpret_cast<const T *>(&h);
  float ss = 0.f;
#pragma unroll
  for (int k = 0; k < V; k++) {
    const float x = dt<T>::to_f(t[k]);
    ss += x * x;
  }
  return ss;
}

// Sum of v over the block (every thread gets it). Uses red[32] of shared memory.
TPG_DEV float block_sum(float v, float *red) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  const int w = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
  __syncthreads();  // red[] may still be read from the previous call
  if ((threadIdx.x & 31) == 0) red[w] = v;
  __syncthreads();
  float t = 0.f;
  for (int i = 0; i < nw; i++) t += red[i];
  return t;
}

// RMSNorm of rows [r0, r1), whose h this block stored (epi_store) before a
// __syncthreads. Every thread of the block must call it. Rows of up to
// kMaxV vectors per thread (8192 bf16 at 256 threads: 4) are read once into
// registers with all loads (the row's and the weight's) issued
// before any is used: one memory round trip per row instead of one per loop
// trip and a second pass. Each thread writes only vectors it read itself, so
// recv may be src (in place).
template <typename T>
TPG_DEV void epi_norm_rows(const tpg_ar_epi &e, void *recv, uint64_t r0, uint64_t r1) {
  constexpr int V = 16 / sizeof(T), kMaxV = 4;  // 4: the two-shot kernel's 512 threads have 128 registers
  __shared__ float red[32];
  const uint64_t vpr = e.hidden / V;
  const uint4 *src = reinterpret_cast<const uint4 *>(e.residual_out ? e.residual_out : recv);
  const uint4 *w = reinterpret_cast<const uint4 *>(e.norm_weight);
  uint4 *dst = reinterpret_cast<uint4 *>(recv);
  const unsigned t = threadIdx.x, nt = blockDim.x;
  if (vpr <= (uint64_t)kMaxV * nt) {
    for (uint64_t r = r0; r < r1; r++) {
      uint4 hv[kMaxV], wv[kMaxV];
      float ss = 0.f;
#pragma unroll
      for (int u = 0; u < kMaxV; u++)
        if (t + u * nt < vpr) {
          hv[u] = src[r * vpr + t + u * nt];  // plain load: written by this block
          wv[u] = w[t + u * nt];
        }
#pragma unroll
      for (int u = 0; u < kMaxV; u++)
        if (t + u * nt < vpr) ss += epi_sumsq<T>(hv[u]);
      const float scale = rsqrtf(block_sum(ss, red) / (float)e.hidden + e.eps);
#pragma unroll
      for (int u = 0; u < kMaxV; u++)
        if (t + u * nt < vpr) dst[r * vpr + t + u * nt] = epi_normed<T>(hv[u], wv[u], scale);
    }
    return;
  }
  for (uint64_t r = r0; r < r1; r++) {
    float ss = 0.f;
    for (uint64_t j = threadIdx.x; j < vpr; j += blockDim.x)
      ss += epi_sumsq<T>(src[r * vpr + j]);  // plain load: written by this block, not read-only data
    const float scale = rsqrtf(block_sum(ss, red) / (float)e.hidden + e.eps);
    for (uint64_t j = threadIdx.x; j < vpr; j += blockDim.x) dst[r * vpr + j] = epi_normed<T>(src[r * vpr + j], w[j], scale);
  }
}

}  // namespace tpg
#endif
