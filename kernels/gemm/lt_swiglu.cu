// lt_swiglu.cu - SwiGLU as its own kernel, after a GEMM that left the
// 2N-wide product in the operands' type: the cuBLASLt family's form of the
// gate/up GEMM (lib/gemm/cublaslt.c), which cuBLASLt cannot fuse. The
// product is rounded to 16 bits as PyTorch's is; the bias, SiLU and the
// product of the halves run in fp32 (epi_value's SiLU, common.cuh).
//
// Launch (tpg_lt_plan_post in lib/gemm/cublaslt.c): block 256, grid
// (ceil(n / 1024), min(m, 65535)); a thread forms 4 adjacent outputs of a
// row from two 8-byte loads, the blocks of one grid row stride over rows.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

#include "kernels/common.cuh"
#include "kernels/tpg_kargs.h"

namespace tpg {

template <typename T>
__device__ void lt_swiglu_rows(const tpg_swiglu_args &a) {
  const T *bias = static_cast<const T *>(a.bias);
  const int c = (blockIdx.x * blockDim.x + threadIdx.x) * 4;
  if (c >= a.n) return;
  float bg[4] = {0.f, 0.f, 0.f, 0.f}, bu[4] = {0.f, 0.f, 0.f, 0.f};
  if (bias)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      bg[e] = dt<T>::to_f(bias[c + e]);
      bu[e] = dt<T>::to_f(bias[a.n + c + e]);
    }
  for (int r = blockIdx.y; r < a.m; r += gridDim.y) {
    const T *row = static_cast<const T *>(a.t) + (size_t)r * a.ldt;
    const uint2 g = *reinterpret_cast<const uint2 *>(row + c);
    const uint2 u = *reinterpret_cast<const uint2 *>(row + a.n + c);
    const T *gv = reinterpret_cast<const T *>(&g), *uv = reinterpret_cast<const T *>(&u);
    T out[4];
#pragma unroll
    for (int e = 0; e < 4; ++e)
      out[e] = dt<T>::from_f(silu(dt<T>::to_f(gv[e]) + bg[e]) * (dt<T>::to_f(uv[e]) + bu[e]));
    *reinterpret_cast<uint2 *>(static_cast<T *>(a.y) + (size_t)r * a.ldy + c) = *reinterpret_cast<const uint2 *>(out);
  }
}

}  // namespace tpg

// n, ldt, ldy multiples of 4 (the family checks): every thread's 4 columns
// lie inside the row or wholly past its end.
extern "C" __global__ void __launch_bounds__(256) tpg_lt_swiglu(const tpg_swiglu_args a) {
  tpg::pdl_wait();  // safe as a PDL secondary too (common.cuh); a child graph's kernel is none
  tpg::pdl_launch_dependents();
  if (a.dtype == TPG_KDT_F16) tpg::lt_swiglu_rows<__half>(a);
  else tpg::lt_swiglu_rows<__nv_bfloat16>(a);
}
