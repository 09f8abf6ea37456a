/* sm80_mma.cu - portable tiled GEMM on mma.sync (sm_80 and newer).
 *
 * Purpose: the fallback that is correct on any Ampere-or-newer GPU, used for
 * M > 64 where the sm_90a wgmma kernel is not available (sm_80, sm_89, or a
 * compute_90 PTX JIT). Speed is secondary; the design is the classic
 * Ampere multistage pipeline because it is short and well understood:
 * 128x128x32 CTA tile, 8 warps of 64x32, 3-stage cp.async ring with zero-fill
 * for the M/N/K edges, ldmatrix from rows padded to 80 bytes (conflict-free:
 * 8 rows of a 16-byte ldmatrix phase land in 8 distinct 4-bank groups),
 * fp32 accumulators, epilogue straight from registers.
 *
 * Shared memory: 3 * (128 + 128) * 40 * 2 = 61440 bytes, so the launcher must
 * raise CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES (selector: smem_bytes).
 */
#include "kernels/common.cuh"

namespace tpg {
namespace mma80 {
constexpr int BM = 128, BN = 128, BK = 32, STAGES = 3, LDS = BK + 8;  /* LDS: padded row, elements */
[[maybe_unused]] constexpr int THREADS = 256;  /* block size; the selector mirrors it */
[[maybe_unused]] constexpr int SMEM_BYTES = STAGES * (BM + BN) * LDS * 2;
}

template <typename T>
__device__ __forceinline__ void gemm_mma_body(const tpg_gemm_args &a) {
  using namespace mma80;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  T *sA = reinterpret_cast<T *>(smem_raw);            /* [STAGES][BM][LDS] */
  T *sB = sA + STAGES * BM * LDS;                      /* [STAGES][BN][LDS] */
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int wm = warp >> 2, wn = warp & 3;             /* 2 x 4 warps of 64 x 32 */
  const int M = a.m, N = a.n, K = a.k;
  const bool swiglu = a.epilogue == TPG_EPI_SWIGLU;
  const int m0 = blockIdx.x * BM;
  /* outputs per CTA: BN, or BN/2 for SWIGLU (gate+up rows interleaved by 8) */
  const int o0 = blockIdx.y * (swiglu ? BN / 2 : BN);

  /* Each thread copies 2 16-byte chunks of A and 2 of B per stage:
   * row = tid/4 + 64*i, chunk = tid%4. */
  const T *ga[2], *gb[2];
  bool va[2], vb[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int r = (tid >> 2) + 64 * i;
    va[i] = m0 + r < M;
    ga[i] = static_cast<const T *>(a.x) + (size_t)(va[i] ? m0 + r : 0) * a.ldx + (tid & 3) * 8;
    int wrow, o;
    if (swiglu) {
      o = o0 + (r >> 4) * 8 + (r & 7);
      wrow = ((r >> 3) & 1) ? N + o : o;
    } else {
      o = o0 + r;
      wrow = o;
    }
    vb[i] = o < N;
    gb[i] = static_cast<const T *>(a.w) + (size_t)(vb[i] ? wrow : 0) * a.ldw + (tid & 3) * 8;
  }
  const int nk = (K + BK - 1) / BK;
  auto load_stage = [&](int s, int kb) {
    const int k = kb * BK + (tid & 3) * 8;
    const bool kin = k < K;
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int r = (tid >> 2) + 64 * i;
      cp_async16(smem_u32(sA + (s * BM + r) * LDS + (tid & 3) * 8), ga[i] + (kin ? kb * BK : 0), va[i] && kin);
      cp_async16(smem_u32(sB + (s * BN + r) * LDS + (tid & 3) * 8), gb[i] + (kin ? kb * BK : 0), vb[i] && kin);
    }
  };

  float acc[4][4][4];
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.f;

#pragma unroll
  for (int s = 0; s < STAGES - 1; ++s) {
    if (s < nk) load_stage(s, s);
    cp_async_commit();
  }
  for (int kb = 0; kb < nk; ++kb) {
    cp_async_wait<STAGES - 2>();
    __syncthreads();  /* stage kb visible to all; stage kb-1 no longer read */
    if (kb + STAGES - 1 < nk) load_stage((kb + STAGES - 1) % STAGES, kb + STAGES - 1);
    cp_async_commit();
    const int s = kb % STAGES;
#pragma unroll
    for (int kk = 0; kk < BK; kk += 16) {
      uint32_t af[4][4], bf[4][2];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const T *p = sA + (s * BM + wm * 64 + i * 16 + (lane & 15)) * LDS + kk + (lane >> 4) * 8;
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                     : "=r"(af[i][0]), "=r"(af[i][1]), "=r"(af[i][2]), "=r"(af[i][3]) : "r"(smem_u32(p)));
      }
#pragma unroll
      for (int j = 0; j < 4; j += 2) {
        /* lanes 0-7: rows n..n+7 at kk, 8-15: same rows at kk+8, 16-31: rows n+8.. */
        const T *p = sB + (s * BN + wn * 32 + j * 8 + (lane & 7) + ((lane >> 4) << 3)) * LDS + kk + ((lane >> 3) & 1) * 8;
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                     : "=r"(bf[j][0]), "=r"(bf[j][1]), "=r"(bf[j + 1][0]), "=r"(bf[j + 1][1]) : "r"(smem_u32(p)));
      }
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j)
          mma16816<T>(acc[i][j], af[i][0], af[i][1], af[i][2], af[i][3], bf[j][0], bf[j][1]);
    }
  }
  cp_async_wait<0>();

  /* Epilogue: acc[i][j] c0,c1 -> row +lane/4, cols 2*(lane%4)+{0,1}; c2,c3 -> row+8. */
  const int g = lane >> 2, t2 = (lane & 3) * 2;
  epi_dispatch(a.epilogue, [&](auto ec) {
    constexpr int EPI = decltype(ec)::value;
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int m = m0 + wm * 64 + i * 16 + g + h * 8;
        if (m >= M) continue;
        if constexpr (EPI == TPG_EPI_SWIGLU) {
#pragma unroll
          for (int j = 0; j < 4; j += 2) {  /* frag j: gate, j+1: up of the same 8 outputs */
            const int n = o0 + (wn * 32 + j * 8) / 2 + t2;
            if (n < N) epi_store2<T, EPI>(a, m, n, acc[i][j][2 * h], acc[i][j][2 * h + 1],
                                          acc[i][j + 1][2 * h], acc[i][j + 1][2 * h + 1]);
          }
        } else {
#pragma unroll
          for (int j = 0; j < 4; ++j) {
            const int n = o0 + wn * 32 + j * 8 + t2;
            if (n < N) epi_store2<T, EPI>(a, m, n, acc[i][j][2 * h], acc[i][j][2 * h + 1], 0.f, 0.f);
          }
        }
      }
  });
}

}  // namespace tpg

/* grid = (ceil(M/128), ceil(N/128)) (ceil(N/64) for SWIGLU), block 256,
 * dynamic smem tpg::mma80::SMEM_BYTES (61440). */
extern "C" __global__ void __launch_bounds__(256) tpg_gemm_mma_bf16(const __grid_constant__ tpg_gemm_args a) {
  tpg::pdl_wait();  /* PDL secondary: before anything (see common.cuh) */
  tpg::pdl_launch_dependents();
  tpg::gemm_mma_body<__nv_bfloat16>(a);
}
extern "C" __global__ void __launch_bounds__(256) tpg_gemm_mma_f16(const __grid_constant__ tpg_gemm_args a) {
  tpg::pdl_wait();
  tpg::pdl_launch_dependents();
  tpg::gemm_mma_body<__half>(a);
}
