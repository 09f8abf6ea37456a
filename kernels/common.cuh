/* common.cuh - device helpers shared by tpgraph's GEMM kernel families.
 *
 * Design: every family (gemm/gemv.cu, gemm/sm80_mma.cu, gemm/sm90_tma.cu) is templated on the
 * operand type T (__nv_bfloat16 or __half) and takes the epilogue as a run-time
 * field of tpg_gemm_args. The epilogue runs once per output element, after the
 * K loop, so a uniform switch there costs nothing measurable while it divides
 * the number of compiled kernels (and the fatbin) by TPG_EPI_COUNT.
 *
 * SWIGLU row interleave (used by all families): a W tile is read in groups of
 * 16 rows, rows 0-7 from the gate half (W rows [0,N)) and rows 8-15 from the
 * up half (W rows [N,2N)) for the same 8 outputs. With mma/wgmma accumulator
 * layouts a thread then holds gate and up of the same output in registers and
 * the epilogue needs no shared-memory exchange.
 */
#ifndef TPG_KERNELS_COMMON_CUH
#define TPG_KERNELS_COMMON_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>
#include "tpg_kargs.h"

#define TPG_DEV __device__ __forceinline__

namespace tpg {

/* ---- element type traits -------------------------------------------------- */
template <typename T> struct dt;
template <> struct dt<__nv_bfloat16> {
  static TPG_DEV float to_f(__nv_bfloat16 v) { return __bfloat162float(v); }
  static TPG_DEV __nv_bfloat16 from_f(float v) { return __float2bfloat16_rn(v); }
  static TPG_DEV uint32_t pack2(float a, float b) {
    __nv_bfloat162 h = __floats2bfloat162_rn(a, b);
    return *reinterpret_cast<uint32_t *>(&h);
  }
  static constexpr bool is_bf16 = true;
};
template <> struct dt<__half> {
  static TPG_DEV float to_f(__half v) { return __half2float(v); }
  static TPG_DEV __half from_f(float v) { return __float2half_rn(v); }
  static TPG_DEV uint32_t pack2(float a, float b) {
    __half2 h = __floats2half2_rn(a, b);
    return *reinterpret_cast<uint32_t *>(&h);
  }
  static constexpr bool is_bf16 = false;
};
/* fp32: for the element-wise and all-reduce kernels, which also take f32. */
template <> struct dt<float> {
  static TPG_DEV float to_f(float v) { return v; }
  static TPG_DEV float from_f(float v) { return v; }
  static constexpr bool is_bf16 = false;
};

/* ---- loads ----------------------------------------------------------------- */
/* Weight stream: read once, never reused by this SM, so skip L1 allocation and
 * ask L2 to fetch the whole 256-byte line (neighbouring lanes want it next). */
TPG_DEV uint4 ld_stream(const void *p) {
  uint4 r;
  asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0,%1,%2,%3}, [%4];"
               : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "l"(p));
  return r;
}
/* Variants of the weight stream load, for measurement (gemv LDF parameter):
 * 0 = ld_stream above; 1 = no L2 prefetch hint; 2 = L2::128B; 3 = L2 evict_first. */
template <int LDF> TPG_DEV uint4 ld_w(const void *p) {
  uint4 r;
  if constexpr (LDF == 1) {
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "l"(p));
  } else if constexpr (LDF == 2) {
    asm volatile("ld.global.nc.L1::no_allocate.L2::128B.v4.u32 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "l"(p));
  } else if constexpr (LDF == 3) {
    asm volatile("{\n.reg .b64 pol;\ncreatepolicy.fractional.L2::evict_first.b64 pol, 1.0;\n"
                 "ld.global.nc.L1::no_allocate.L2::cache_hint.L2::256B.v4.u32 {%0,%1,%2,%3}, [%4], pol;\n}\n"
                 : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "l"(p));
  } else {
    r = ld_stream(p);
  }
  return r;
}
/* Activations: small and re-read by every CTA of the SM, so keep them in L1. */
TPG_DEV uint4 ld_keep(const void *p) {
  uint4 r;
  asm volatile("ld.global.nc.v4.u32 {%0,%1,%2,%3}, [%4];"
               : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "l"(p));
  return r;
}

TPG_DEV uint32_t smem_u32(const void *p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

/* 16-byte cp.async; src_bytes = 0 zero-fills the destination (out-of-range
 * rows or K tail) without touching global memory. */
TPG_DEV void cp_async16(uint32_t dst, const void *src, bool valid) {
  asm volatile("cp.async.cg.shared.global.L2::128B [%0], [%1], 16, %2;"
               :: "r"(dst), "l"(src), "r"(valid ? 16 : 0) : "memory");
}
TPG_DEV void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N> TPG_DEV void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;" :: "n"(N) : "memory");
}

/* ---- programmatic dependent launch (sm_90+) --------------------------------
 * With TPG_GRAPH_PDL a kernel node may be the secondary of a programmatic
 * edge: it is launched while its predecessor still runs. Such a kernel must
 * reach pdl_wait() (griddepcontrol.wait: returns once every primary grid has
 * completed and its memory is visible) in every block, on every path, before
 * it reads what a predecessor wrote, before it writes what a predecessor may
 * still read, and before it exits (so nodes after it by ordinary edges still
 * run after the primary). Without a programmatic launch the instruction
 * returns at once. Below sm_90 there is no such instruction and the host
 * never makes programmatic edges (graphbuild/materialize.c), so these are
 * no-ops there. The compute_90 PTX carries them to newer GPUs. */
TPG_DEV void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
/* Lets this grid's programmatic dependents launch once every block of it has
 * called this (or exited). It orders nothing in memory: dependents still wait
 * for our completion in pdl_wait(). */
TPG_DEV void pdl_launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
/* Asks L2 to fetch [p, p + bytes) (16-byte aligned, bytes a multiple of 16):
 * one bulk-prefetch instruction, no registers written, only a hint, so it is
 * safe before pdl_wait(). sm_90+ only; a no-op below. */
TPG_DEV void prefetch_l2_bulk(const void *p, uint32_t bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if (bytes >= 16) asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p), "r"(bytes) : "memory");
#endif
}

/* ---- mma.sync m16n8k16 (sm_80+) -------------------------------------------- */
template <typename T>
TPG_DEV void mma16816(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                      uint32_t b0, uint32_t b1) {
  if constexpr (dt<T>::is_bf16) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  } else {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
                 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  }
}

/* ---- epilogue ---------------------------------------------------------------- */
/* The epilogue is a compile-time parameter of the store code, selected once
 * per tile by epi_dispatch. Measured reason (run 2, docs/kernels.md): with a
 * run-time switch inside a fully unrolled 128-value store loop the sm90
 * kernel's SASS was 390 KB, every tile's epilogue missed the instruction
 * cache and cost ~60 us. */
template <int E> struct epi_c { static constexpr int value = E; };

template <typename F> TPG_DEV void epi_dispatch(int epi, F &&f) {
  switch (epi) {
    case TPG_EPI_BIAS: f(epi_c<TPG_EPI_BIAS>{}); break;
    case TPG_EPI_BIAS_GELU: f(epi_c<TPG_EPI_BIAS_GELU>{}); break;
    case TPG_EPI_BIAS_SILU: f(epi_c<TPG_EPI_BIAS_SILU>{}); break;
    case TPG_EPI_SWIGLU: f(epi_c<TPG_EPI_SWIGLU>{}); break;
    case TPG_EPI_RESIDUAL: f(epi_c<TPG_EPI_RESIDUAL>{}); break;
    case TPG_EPI_F32_PARTIAL: f(epi_c<TPG_EPI_F32_PARTIAL>{}); break;
    default: f(epi_c<TPG_EPI_NONE>{}); break;
  }
}

/* MUFU tanh: relative error ~2^-11, below bf16/fp16 output rounding. */
TPG_DEV float tanh_fast(float x) {
  float y;
  asm("tanh.approx.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}
TPG_DEV float gelu_tanh(float x) {
  const float k0 = 0.7978845608028654f, k1 = 0.044715f;
  return 0.5f * x * (1.f + tanh_fast(k0 * (x + k1 * x * x * x)));
}
TPG_DEV float silu(float x) { return x / (1.f + __expf(-x)); }

/* Final value of Y[m,n] from the fp32 accumulator `acc` (`up`: the up-half
 * accumulator for SWIGLU). Not for F32_PARTIAL (stored as is). */
template <typename T, int EPI>
TPG_DEV float epi_value(const tpg_gemm_args &a, int m, int n, float acc, float up) {
  if constexpr (EPI == TPG_EPI_NONE || EPI == TPG_EPI_F32_PARTIAL) {
    return acc;
  } else {
    const T *bias = static_cast<const T *>(a.bias);
    const float b = bias ? dt<T>::to_f(bias[n]) : 0.f;
    if constexpr (EPI == TPG_EPI_BIAS) return acc + b;
    if constexpr (EPI == TPG_EPI_BIAS_GELU) return gelu_tanh(acc + b);
    if constexpr (EPI == TPG_EPI_BIAS_SILU) return silu(acc + b);
    if constexpr (EPI == TPG_EPI_SWIGLU) {
      const float bu = bias ? dt<T>::to_f(bias[a.n + n]) : 0.f;
      return silu(acc + b) * (up + bu);
    }
    if constexpr (EPI == TPG_EPI_RESIDUAL) {
      /* residual may alias y: this thread reads the element before writing it */
      const T *r = static_cast<const T *>(a.residual);
      return acc + b + dt<T>::to_f(r[(size_t)m * a.ldr + n]);
    }
    return acc;
  }
}

/* An RMSNorm's output vector: h (rounded, as stored) times the row's scale
 * and the weight vector, rounded once (the all-reduce epilogue's norm and
 * the GEMVs' folded norm compute it alike). */
template <typename T>
TPG_DEV uint4 epi_normed(const uint4 &h, const uint4 &wv, float scale) {
  constexpr int V = 16 / sizeof(T);
  uint4 o;
  const T *t = reinterpret_cast<const T *>(&h), *wt = reinterpret_cast<const T *>(&wv);
  T *ot = reinterpret_cast<T *>(&o);
#pragma unroll
  for (int k = 0; k < V; k++) ot[k] = dt<T>::from_f(dt<T>::to_f(t[k]) * scale * dt<T>::to_f(wt[k]));
  return o;
}

/* Store one output element and return the square of the value stored. */
template <typename T, int EPI>
TPG_DEV float epi_store1_sq(const tpg_gemm_args &a, int m, int n, float acc) {
  const T v = dt<T>::from_f(epi_value<T, EPI>(a, m, n, acc, 0.f));
  static_cast<T *>(a.y)[(size_t)m * a.ldy + n] = v;
  const float f = dt<T>::to_f(v);
  return f * f;
}

/* Store one output element. */
template <typename T, int EPI>
TPG_DEV void epi_store1(const tpg_gemm_args &a, int m, int n, float acc, float up) {
  if constexpr (EPI == TPG_EPI_F32_PARTIAL) {
    static_cast<float *>(a.y)[(size_t)m * a.ldy + n] = acc;
  } else {
    static_cast<T *>(a.y)[(size_t)m * a.ldy + n] = dt<T>::from_f(epi_value<T, EPI>(a, m, n, acc, up));
  }
}

/* Store two adjacent outputs (n even; N, ldy multiples of 8 keep it aligned
 * and in range whenever n < N). */
template <typename T, int EPI>
TPG_DEV void epi_store2(const tpg_gemm_args &a, int m, int n, float acc0, float acc1, float up0, float up1) {
  if constexpr (EPI == TPG_EPI_F32_PARTIAL) {
    *reinterpret_cast<float2 *>(static_cast<float *>(a.y) + (size_t)m * a.ldy + n) = make_float2(acc0, acc1);
  } else {
    const float v0 = epi_value<T, EPI>(a, m, n, acc0, up0);
    const float v1 = epi_value<T, EPI>(a, m, n + 1, acc1, up1);
    *reinterpret_cast<uint32_t *>(static_cast<T *>(a.y) + (size_t)m * a.ldy + n) = dt<T>::pack2(v0, v1);
  }
}

}  // namespace tpg
#endif
