// kernels_common.cuh - device helpers shared by the engine's two kernel
// files: kernels.cu (decode) and prefill_kernels.cu (prefill). One copy of
// each, so that both paths rotate with the same function (the prefill's
// cache rows are then what the decode step would have written) and feed
// the tensor cores the same way.
#ifndef LLAMA_KERNELS_COMMON_CUH
#define LLAMA_KERNELS_COMMON_CUH

#include <cuda_bf16.h>
#include <stdint.h>

#include "examples/llama/kernels.h"

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

}  // namespace

#endif
