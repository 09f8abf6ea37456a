/* gemv.cu - decode GEMM (M <= 64): stream W once at full HBM rate.
 *
 * Design: at M <= 64 a Linear layer is a weight read (N*K*2 bytes) with at
 * most 64 FLOP per weight byte, so the only goal is to keep enough 16-byte
 * loads of W in flight on every SM. Each warp owns R tiles of 16 W rows and a
 * K slice; a lane loads 16 contiguous bytes (8 k values) of two rows per
 * 32-wide K chunk with ld.global.nc.L1::no_allocate, prefetching the next
 * iteration's W into registers before it computes the current one.
 *
 * The dot products run on the tensor cores (mma.sync m16n8k16, W as the A
 * operand, X^T as the B operand, M in the n8 dimension): the FMA pipe could not
 * keep up with HBM above M ~ 8, while mma keeps one code path for M = 1..64.
 * The register layout of mma wants each lane to hold k = {2t,2t+1,2t+8,2t+9}
 * of a 16-wide K step; a 16-byte load gives a lane 8 *contiguous* k values.
 * Because a dot product does not care about the order of k, we renumber k
 * inside each 32-wide chunk so lane t4 = lane%4 owns physical k [8*t4, 8*t4+8)
 * for two consecutive mma steps, and load X with the same renumbering. So W
 * goes straight from global memory into mma registers: no shared memory, no
 * shuffles. The K slices of the KW warps of a CTA are summed through shared
 * memory once at the end; there is no split-K across CTAs, so no workspace.
 */
#include "common.cuh"

namespace tpg {

/* PF: prefetch the next iteration's W and X into registers before computing
 * the current one (more bytes in flight per warp, more registers). */
template <typename T, int MT, int R, int U, int KW, bool PF, int LDF = 0>
__device__ __forceinline__ void gemv_body(const tpg_gemm_args &a) {
  __shared__ float red[KW / 2][R * MT * 4][32];
  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
  const int g = lane >> 2, t4 = lane & 3;
  const int M = a.m, N = a.n, K = a.k;
  const bool swiglu = a.epilogue == TPG_EPI_SWIGLU;

  /* W row pointers for the two fragment rows (g, g+8) of each row tile. */
  const T *wp[R][2];
  int obase[R];
#pragma unroll
  for (int rt = 0; rt < R; ++rt) {
    int r0, r1;
    if (swiglu) {  /* rows g: gate of output obase+g; rows g+8: its up row */
      obase[rt] = (blockIdx.x * R + rt) * 8;
      const int o = min(obase[rt] + g, N - 1);
      r0 = o;
      r1 = N + o;
    } else {
      obase[rt] = (blockIdx.x * R + rt) * 16;
      r0 = min(obase[rt] + g, N - 1);     /* clamp: rows past N are read, never stored */
      r1 = min(obase[rt] + g + 8, N - 1);
    }
    wp[rt][0] = static_cast<const T *>(a.w) + (size_t)r0 * a.ldw + 8 * t4;
    wp[rt][1] = static_cast<const T *>(a.w) + (size_t)r1 * a.ldw + 8 * t4;
  }
  const T *xp[MT];
  bool xv[MT];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
    const int m = mt * 8 + g;
    xv[mt] = m < M;
    xp[mt] = static_cast<const T *>(a.x) + (size_t)min(m, M - 1) * a.ldx + 8 * t4;
  }

  float acc[R][MT][4];
#pragma unroll
  for (int rt = 0; rt < R; ++rt)
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int i = 0; i < 4; ++i) acc[rt][mt][i] = 0.f;

  auto mma_chunk = [&](const uint4 (&wv)[R][2], const uint4 (&x)[MT]) {
#pragma unroll
    for (int rt = 0; rt < R; ++rt)
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        mma16816<T>(acc[rt][mt], wv[rt][0].x, wv[rt][1].x, wv[rt][0].y, wv[rt][1].y, x[mt].x, x[mt].y);
        mma16816<T>(acc[rt][mt], wv[rt][0].z, wv[rt][1].z, wv[rt][0].w, wv[rt][1].w, x[mt].z, x[mt].w);
      }
  };

  /* Main loop: iteration `it` covers KW*U chunks of 32; warp w takes U
   * adjacent chunks, so a warp reads 64*U contiguous bytes per row and the
   * CTA 64*U*KW. */
  const int step = 32 * U * KW;
  const int iters = K / step;
  auto load = [&](uint4 (&dw)[U][R][2], uint4 (&dx)[U][MT], int it) {
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int k = ((it * KW + w) * U + u) * 32;
#pragma unroll
      for (int rt = 0; rt < R; ++rt) {
        dw[u][rt][0] = ld_w<LDF>(wp[rt][0] + k);
        dw[u][rt][1] = ld_w<LDF>(wp[rt][1] + k);
      }
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) dx[u][mt] = xv[mt] ? ld_keep(xp[mt] + k) : make_uint4(0, 0, 0, 0);
    }
  };
  if constexpr (PF) {
    uint4 wc[U][R][2], xc[U][MT];
    if (iters > 0) load(wc, xc, 0);
    for (int it = 0; it < iters; ++it) {
      uint4 wn[U][R][2], xn[U][MT];
      if (it + 1 < iters) load(wn, xn, it + 1);  /* next W and X in flight while we compute */
#pragma unroll
      for (int u = 0; u < U; ++u) mma_chunk(wc[u], xc[u]);
      if (it + 1 < iters) {
#pragma unroll
        for (int u = 0; u < U; ++u) {
#pragma unroll
          for (int rt = 0; rt < R; ++rt) { wc[u][rt][0] = wn[u][rt][0]; wc[u][rt][1] = wn[u][rt][1]; }
#pragma unroll
          for (int mt = 0; mt < MT; ++mt) xc[u][mt] = xn[u][mt];
        }
      }
    }
  } else {
    /* all of an iteration's loads first, then the mmas; latency is hidden by
     * the other warps (fewer registers, more CTAs per SM) */
    for (int it = 0; it < iters; ++it) {
      uint4 wc[U][R][2], xc[U][MT];
      load(wc, xc, it);
#pragma unroll
      for (int u = 0; u < U; ++u) mma_chunk(wc[u], xc[u]);
    }
  }
  /* K tail (K % step != 0): one chunk at a time, per-lane predicate on the
   * 8-wide piece (K % 8 == 0, so a piece is all in or all out). */
  for (int c = iters * KW * U + w; c * 32 < K; c += KW) {
    const int k = c * 32;
    const bool ok = k + 8 * t4 < K;
    uint4 wv[R][2], x[MT];
#pragma unroll
    for (int rt = 0; rt < R; ++rt) {
      wv[rt][0] = ok ? ld_w<LDF>(wp[rt][0] + k) : make_uint4(0, 0, 0, 0);
      wv[rt][1] = ok ? ld_w<LDF>(wp[rt][1] + k) : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) x[mt] = (ok && xv[mt]) ? ld_keep(xp[mt] + k) : make_uint4(0, 0, 0, 0);
    mma_chunk(wv, x);
  }

  /* Sum the KW warps' partial K slices: a tree through shared memory. */
#pragma unroll
  for (int s = KW / 2; s >= 1; s >>= 1) {
    if (w >= s && w < 2 * s) {
#pragma unroll
      for (int rt = 0; rt < R; ++rt)
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
          for (int i = 0; i < 4; ++i) red[w - s][(rt * MT + mt) * 4 + i][lane] = acc[rt][mt][i];
    }
    __syncthreads();
    if (w < s) {
#pragma unroll
      for (int rt = 0; rt < R; ++rt)
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
          for (int i = 0; i < 4; ++i) acc[rt][mt][i] += red[w][(rt * MT + mt) * 4 + i][lane];
    }
    __syncthreads();
  }
  if (w != 0) return;

  /* Epilogue. Accumulator c0,c1: W row g, m = 2*t4 + {0,1}; c2,c3: W row g+8. */
  epi_dispatch(a.epilogue, [&](auto ec) {
    constexpr int EPI = decltype(ec)::value;
#pragma unroll
    for (int rt = 0; rt < R; ++rt)
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int j = 0; j < 2; ++j) {
          const int m = mt * 8 + 2 * t4 + j;
          if (m >= M) continue;
          if constexpr (EPI == TPG_EPI_SWIGLU) {
            const int n = obase[rt] + g;
            if (n < N) epi_store1<T, EPI>(a, m, n, acc[rt][mt][j], acc[rt][mt][2 + j]);
          } else {
            const int n0 = obase[rt] + g, n1 = n0 + 8;
            if (n0 < N) epi_store1<T, EPI>(a, m, n0, acc[rt][mt][j], 0.f);
            if (n1 < N) epi_store1<T, EPI>(a, m, n1, acc[rt][mt][2 + j], 0.f);
          }
        }
  });
}

}  // namespace tpg

/* Entry points: tpg_gemv_<dtype>_m<max M>. Block = 32*KW threads (512 for
 * m16, else 256); grid.x = ceil(N / (16*R)) (ceil(N / (8*R)) for SWIGLU):
 * R = 1 for m8, 2 otherwise. lib/gemm_select.c mirrors these constants. */
#define TPG_GEMV(NAME, T, MT, R, U, KW, PF, MINB)                                      \
  extern "C" __global__ void __launch_bounds__(KW * 32, MINB) NAME(const __grid_constant__ tpg_gemm_args a) { \
    tpg::gemv_body<T, MT, R, U, KW, PF>(a);                                            \
  }
/* Variants chosen by measurement (docs/kernels.md, runs 2-4): for M <= 8 no
 * register prefetch but 8 chunks (16 loads, 512 contiguous bytes a row) per
 * warp iteration at 2 CTAs/SM was fastest; for M <= 16 two row tiles (halves
 * the X bytes per W byte) and 16 warps splitting K.
 * (MT, R, U, KW warps, PF, min CTAs/SM) */
TPG_GEMV(tpg_gemv_bf16_m8, __nv_bfloat16, 1, 1, 8, 8, false, 2)
TPG_GEMV(tpg_gemv_bf16_m16, __nv_bfloat16, 2, 2, 2, 16, false, 1)
TPG_GEMV(tpg_gemv_bf16_m32, __nv_bfloat16, 4, 2, 2, 8, true, 1)
TPG_GEMV(tpg_gemv_bf16_m64, __nv_bfloat16, 8, 2, 1, 8, true, 1)
TPG_GEMV(tpg_gemv_f16_m8, __half, 1, 1, 8, 8, false, 2)
TPG_GEMV(tpg_gemv_f16_m16, __half, 2, 2, 2, 16, false, 1)
TPG_GEMV(tpg_gemv_f16_m32, __half, 4, 2, 2, 8, true, 1)
TPG_GEMV(tpg_gemv_f16_m64, __half, 8, 2, 1, 8, true, 1)
