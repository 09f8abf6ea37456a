// elementwise.cu - small element-wise kernels used as graph nodes.
//
// tpg_axpby: y = alpha * x + beta * y in fp32 arithmetic. Grid-stride with
// 16-byte accesses when both pointers allow it (the builder binds 16-byte
// aligned buffers), so one launch config serves every size.
//
// tpg_ar_epilogue: the fused all-reduce epilogue after an NCCL all-reduce (below).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

#include "kernels/ar_epilogue.cuh"
#include "kernels/common.cuh"
#include "kernels/tpg_kargs.h"

using tpg::dt;

template <typename T>
__device__ void axpby(const tpg_axpby_args &a) {
  constexpr int V = 16 / sizeof(T);
  T *y = static_cast<T *>(a.y);
  const T *x = static_cast<const T *>(a.x);
  const uint64_t n = a.count;
  const uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
  uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;
  const bool vec = (((uintptr_t)y | (uintptr_t)x) & 15) == 0;
  uint64_t nv = vec ? n / V : 0;
  for (uint64_t j = i; j < nv; j += stride) {
    uint4 xv = reinterpret_cast<const uint4 *>(x)[j];
    uint4 yv = reinterpret_cast<uint4 *>(y)[j];
    const T *xe = reinterpret_cast<const T *>(&xv);
    T *ye = reinterpret_cast<T *>(&yv);
#pragma unroll
    for (int e = 0; e < V; e++) ye[e] = dt<T>::from_f(a.alpha * dt<T>::to_f(xe[e]) + (a.beta != 0.f ? a.beta * dt<T>::to_f(ye[e]) : 0.f));
    reinterpret_cast<uint4 *>(y)[j] = yv;
  }
  for (uint64_t j = nv * V + i; j < n; j += stride)
    y[j] = dt<T>::from_f(a.alpha * dt<T>::to_f(x[j]) + (a.beta != 0.f ? a.beta * dt<T>::to_f(y[j]) : 0.f));
}

// beta == 0 ignores y's old contents (NaN included), as BLAS does.
extern "C" __global__ void __launch_bounds__(256) tpg_axpby(const tpg_axpby_args a) {
  tpg::pdl_wait();  // PDL secondary (TPG_GRAPH_PDL): before anything, see common.cuh
  tpg::pdl_launch_dependents();
  switch (a.dtype) {
    case TPG_KDT_F32: axpby<float>(a); break;
    case TPG_KDT_F16: axpby<__half>(a); break;
    default: axpby<__nv_bfloat16>(a); break;
  }
}

// tpg_ar_epilogue: the all-reduce epilogue (ar_epilogue.cuh) as its own
// kernel node, after an NCCL all-reduce has left the sum in recv (in ==
// recv), or on one rank, where the GEMM's output in send is the sum (in =
// send, out to recv), so the NCCL path and TP = 1 mean exactly what our fused
// kernels compute. Without a norm: a grid-stride loop over 16-byte vectors.
// With a norm: block b owns whole rows [r0, r1) — h for all of them first,
// then the norm — as in the fused kernels. Rows of up to kMaxV vectors per
// thread (hidden <= 8192 in bf16 at 256 threads) stay in registers: the
// row's loads are all issued before any is used and h is not read back, so a
// decode row (1 token, 8192 wide) costs about two memory round trips, not one
// per loop trip and pass.
template <typename T>
__device__ void ar_epilogue(const tpg_ar_epilogue_args &a) {
  constexpr int V = 16 / sizeof(T), kMaxV = 4;
  const uint64_t nvec = a.count / V;  // count is a multiple of hidden, itself of 8
  const uint4 *sum = static_cast<const uint4 *>(a.in);
  auto acc_of = [](const uint4 &v, float *acc) {
    const T *t = reinterpret_cast<const T *>(&v);
#pragma unroll
    for (int k = 0; k < V; k++) acc[k] = dt<T>::to_f(t[k]);
  };
  auto one = [&](uint64_t j) {
    uint4 v = sum[j];  // read before epi_store may overwrite it (same thread, same vector)
    float acc[V];
    acc_of(v, acc);
    tpg::epi_store<T>(a.epi, a.recv, j, acc);
  };
  if (!tpg::epi_norm(a.epi)) {
    tpg::pdl_wait();
    tpg::pdl_launch_dependents();
    for (uint64_t j = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; j < nvec; j += (uint64_t)gridDim.x * blockDim.x)
      one(j);
    return;
  }
  const uint64_t rows = a.count / a.epi.hidden, vpr = a.epi.hidden / V, rpb = (rows + gridDim.x - 1) / gridDim.x;
  const uint64_t r0 = min(rows, rpb * blockIdx.x), r1 = min(rows, r0 + rpb);
  const unsigned t = threadIdx.x, nt = blockDim.x;
  const bool regs = vpr <= (uint64_t)kMaxV * nt;
  const uint4 *w = static_cast<const uint4 *>(a.epi.norm_weight);
  tpg::pdl_wait();  // before every read: a predecessor may write even the weight
  tpg::pdl_launch_dependents();
  if (!regs) {
    for (uint64_t j = r0 * vpr + t; j < r1 * vpr; j += nt) one(j);
    __syncthreads();
    tpg::epi_norm_rows<T>(a.epi, a.recv, r0, r1);
    return;
  }
  uint4 wv[kMaxV];  // in flight with the first row's loads
#pragma unroll
  for (int u = 0; u < kMaxV; u++)
    if (t + u * nt < vpr) wv[u] = w[t + u * nt];
  __shared__ float red[32];
  uint4 *recv = static_cast<uint4 *>(a.recv), *rout = static_cast<uint4 *>(a.epi.residual_out);
  const uint4 *res = static_cast<const uint4 *>(a.epi.residual);
  for (uint64_t r = r0; r < r1; r++) {
    uint4 hv[kMaxV], rv[kMaxV];
    // The sum's and the residual's loads of every u in flight together: one
    // memory round trip for both (a decode row is pure latency).
#pragma unroll
    for (int u = 0; u < kMaxV; u++)
      if (t + u * nt < vpr) {
        hv[u] = sum[r * vpr + t + u * nt];
        if (res) rv[u] = res[r * vpr + t + u * nt];
      }
    // No stores in this loop; residual_out may alias residual, so h is
    // stored only after all of them are read.
#pragma unroll
    for (int u = 0; u < kMaxV; u++)
      if (t + u * nt < vpr) {
        float acc[V];
        acc_of(hv[u], acc);
        hv[u] = tpg::epi_h<T>(a.epi, r * vpr + t + u * nt, acc, res ? &rv[u] : nullptr);
      }
    float ss = 0.f;
#pragma unroll
    for (int u = 0; u < kMaxV; u++)
      if (t + u * nt < vpr) {
        if (rout) rout[r * vpr + t + u * nt] = hv[u];
        ss += tpg::epi_sumsq<T>(hv[u]);
      }
    const float scale = rsqrtf(tpg::block_sum(ss, red) / (float)a.epi.hidden + a.epi.eps);
#pragma unroll
    for (int u = 0; u < kMaxV; u++)
      if (t + u * nt < vpr) recv[r * vpr + t + u * nt] = tpg::epi_normed<T>(hv[u], wv[u], scale);
  }
}

extern "C" __global__ void __launch_bounds__(256) tpg_ar_epilogue(const __grid_constant__ tpg_ar_epilogue_args a) {
  switch (a.dtype) {  // ar_epilogue does the PDL wait and trigger
    case TPG_KDT_F32: ar_epilogue<float>(a); break;
    case TPG_KDT_F16: ar_epilogue<__half>(a); break;
    default: ar_epilogue<__nv_bfloat16>(a); break;
  }
}

template <typename U>
__device__ void concat_cols(const tpg_concat_args &a, uint64_t cw) {
  U *dst = static_cast<U *>(a.dst);
  const U *src = static_cast<const U *>(a.src);
  const uint64_t row_units = (uint64_t)a.blocks * cw, n = a.rows * row_units;
  const uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
  for (uint64_t j = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; j < n; j += stride) {
    uint64_t r = j / row_units, rem = j - r * row_units;
    uint64_t b = rem / cw, c = rem - b * cw;
    dst[j] = src[(b * a.rows + r) * cw + c];
  }
}

extern "C" __global__ void __launch_bounds__(256) tpg_concat_cols(const tpg_concat_args a) {
  tpg::pdl_wait();
  tpg::pdl_launch_dependents();
  const uint64_t row_bytes = a.cols * (uint64_t)a.esize;
  const uintptr_t addr = (uintptr_t)a.dst | (uintptr_t)a.src;
  if (row_bytes % 16 == 0 && addr % 16 == 0) concat_cols<uint4>(a, row_bytes / 16);
  else if (row_bytes % 4 == 0 && addr % 4 == 0) concat_cols<uint32_t>(a, row_bytes / 4);
  else concat_cols<uint16_t>(a, row_bytes / 2);
}
