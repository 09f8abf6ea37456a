// elementwise.cu - small element-wise kernels used as graph nodes.
//
// tpg_axpby: y = alpha * x + beta * y in fp32 arithmetic. Grid-stride with
// 16-byte accesses when both pointers allow it (the builder binds 16-byte
// aligned buffers), so one launch config serves every size.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

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
  switch (a.dtype) {
    case TPG_KDT_F32: axpby<float>(a); break;
    case TPG_KDT_F16: axpby<__half>(a); break;
    default: axpby<__nv_bfloat16>(a); break;
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
  const uint64_t row_bytes = a.cols * (uint64_t)a.esize;
  const uintptr_t addr = (uintptr_t)a.dst | (uintptr_t)a.src;
  if (row_bytes % 16 == 0 && addr % 16 == 0) concat_cols<uint4>(a, row_bytes / 16);
  else if (row_bytes % 4 == 0 && addr % 4 == 0) concat_cols<uint32_t>(a, row_bytes / 4);
  else concat_cols<uint16_t>(a, row_bytes / 2);
}
