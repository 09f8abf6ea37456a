/* gemv.cu - decode GEMM (M <= 64): stream W once at full HBM rate.
 *
 * Design: at M <= 64 a Linear layer is a weight read (N*K*2 bytes) with at
 * most 64 FLOP per weight byte, so the only goal is to keep enough 16-byte
 * loads of W in flight on every SM, on every SM for the same time. A CTA
 * owns R tiles of 16 W rows and one of S contiguous K ranges (split-K, grid
 * = tiles x S, S from the selector: enough CTAs for every SM whatever N is);
 * its KW warps take groups of U 32-wide K chunks round-robin. A lane loads
 * 16 contiguous bytes (8 k values) of two rows per chunk with
 * ld.global.nc.L1::no_allocate, all of a group's loads before its mmas.
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
 * memory; the S K ranges of a tile through per-split workspace slots summed
 * in a fixed order by the last CTA to finish (deterministic).
 * A stream-K twin (equal work per CTA, fp32 atomics into the workspace)
 * remains as a tuner candidate for tiny N.
 */
#include "kernels/common.cuh"

namespace tpg {

/* Sum the KW warps' accumulators (each a partial K slice) into warp 0's: a
 * tree through shared memory, log2(KW) steps. Every thread of the CTA calls
 * it (it synchronises the CTA). */
template <int MT, int R, int KW>
__device__ __forceinline__ void reduce_warps(float (&acc)[R][MT][4], float (&red)[KW / 2][R * MT * 4][32], int w,
                                             int lane) {
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
}

/* The same sum with one barrier: warps 1..KW-1 park their accumulators in
 * shared memory, warp 0 adds them in warp order (deterministic). The tree
 * above pays 2 log2(KW) barriers, each a wait for the slowest warp, at the
 * end of every CTA, which is on the critical path of a 10 us GEMV. Needs
 * (KW - 1) * R * MT * 512 bytes of shared memory. */
template <int MT, int R, int KW>
__device__ __forceinline__ void reduce_warps_flat(float (&acc)[R][MT][4], float (&red)[KW - 1][R * MT * 4][32], int w,
                                                  int lane) {
  if (w > 0) {
#pragma unroll
    for (int rt = 0; rt < R; ++rt)
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int i = 0; i < 4; ++i) red[w - 1][(rt * MT + mt) * 4 + i][lane] = acc[rt][mt][i];
  }
  __syncthreads();
  if (w == 0) {
#pragma unroll
    for (int j = 0; j < KW - 1; ++j)
#pragma unroll
      for (int rt = 0; rt < R; ++rt)
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
          for (int i = 0; i < 4; ++i) acc[rt][mt][i] += red[j][(rt * MT + mt) * 4 + i][lane];
  }
}

/* A folded norm's producer (a.y_ssq set): the sums of squares ss of the
 * values lane (g, t4) stored for rows m = mt * 8 + 2 * t4 + j of 16-column
 * group `group`, summed over the 8 lanes of the group (g) in a fixed order
 * and written by lanes g == 0. The whole warp calls it. */
template <int MT>
__device__ __forceinline__ void store_ssq(const tpg_gemm_args &a, float (&ss)[MT][2], int group, int g, int t4,
                                          int M, int N) {
  const int ng = TPG_FOLD_GROUPS(N);
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      float v = ss[mt][j];
      v += __shfl_xor_sync(0xffffffffu, v, 4);
      v += __shfl_xor_sync(0xffffffffu, v, 8);
      v += __shfl_xor_sync(0xffffffffu, v, 16);
      const int m = mt * 8 + 2 * t4 + j;
      if (g == 0 && m < M && group < ng) a.y_ssq[(size_t)m * ng + group] = v;
    }
}

/* Warp 0's epilogue for its R x MT accumulator tiles. Accumulator c0,c1:
 * W row g, m = 2*t4 + {0,1}; c2,c3: W row g+8 (SWIGLU: gate g, up g+8 of
 * output obase+g). The whole warp calls it. */
template <typename T, int MT, int R>
__device__ __forceinline__ void store_tile(const tpg_gemm_args &a, const float (&acc)[R][MT][4], const int (&obase)[R],
                                           int g, int t4, int M, int N) {
  epi_dispatch(a.epilogue, [&](auto ec) {
    constexpr int EPI = decltype(ec)::value;
#pragma unroll
    for (int rt = 0; rt < R; ++rt) {
      float ss[MT][2];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int j = 0; j < 2; ++j) {
          ss[mt][j] = 0.f;
          const int m = mt * 8 + 2 * t4 + j;
          if (m >= M) continue;
          if constexpr (EPI == TPG_EPI_SWIGLU) {
            const int n = obase[rt] + g;
            if (n < N) epi_store1<T, EPI>(a, m, n, acc[rt][mt][j], acc[rt][mt][2 + j]);
          } else if constexpr (EPI == TPG_EPI_F32_PARTIAL) {
            const int n0 = obase[rt] + g, n1 = n0 + 8;
            if (n0 < N) epi_store1<T, EPI>(a, m, n0, acc[rt][mt][j], 0.f);
            if (n1 < N) epi_store1<T, EPI>(a, m, n1, acc[rt][mt][2 + j], 0.f);
          } else {
            const int n0 = obase[rt] + g, n1 = n0 + 8;
            if (n0 < N) ss[mt][j] += epi_store1_sq<T, EPI>(a, m, n0, acc[rt][mt][j]);
            if (n1 < N) ss[mt][j] += epi_store1_sq<T, EPI>(a, m, n1, acc[rt][mt][2 + j]);
          }
        }
      if constexpr (EPI != TPG_EPI_SWIGLU && EPI != TPG_EPI_F32_PARTIAL)
        if (a.y_ssq) store_ssq<MT>(a, ss, obase[rt] / 16, g, t4, M, N);
    }
  });
}

/* A folded norm's consumer: xs[m] = the RMSNorm scale of x's row m,
 * rsqrt(sum of squares / k + eps) from the producer's TPG_FOLD_GROUPS(k)
 * sums, each row summed by one warp in the same order whatever the grid
 * (lane i takes sums i, i + 32, ...; then a fixed shuffle tree). Every
 * thread of the CTA calls it (it synchronises the CTA). */
template <int KW>
__device__ __forceinline__ void row_scales(const tpg_gemm_args &a, float *xs, int w, int lane) {
  const int ng = TPG_FOLD_GROUPS(a.k);
  for (int m = w; m < a.m; m += KW) {
    float v = 0.f;
    for (int i = lane; i < ng; i += 32) v += a.x_ssq[(size_t)m * ng + i];
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    if (lane == 0) xs[m] = rsqrtf(v / (float)a.k + a.x_norm_eps);
  }
  __syncthreads();
}

/* The W rows lane group g reads in 16-row tile `rt` (global index): rows
 * rt*16 + g and + 8, or with SwiGLU output rt*8 + g's gate row and its up
 * row N + that; clamped into range (the stores skip what is past N).
 * obase: the tile's first output. One definition for every body, so the
 * prefetch, the stream-K and the split kernels read the same rows. */
TPG_DEV void w_rows(int rt, int g, int N, bool swiglu, int &obase, int &r0, int &r1) {
  if (swiglu) {
    obase = rt * 8;
    r0 = min(obase + g, N - 1);
    r1 = N + r0;
  } else {
    obase = rt * 16;
    r0 = min(obase + g, N - 1);
    r1 = min(obase + g + 8, N - 1);
  }
}

/* ---------------------------------------------------------------------------
 * Stream-K variant (tpg_gemv_sk_*): the same warp-level streaming, but the
 * grid is sized to the machine (selector: CTAs_per_SM * SMs) and the linear
 * space of (row tile, 32-wide K chunk) pairs is cut into equal contiguous
 * ranges, one per CTA, so every CTA streams the same number of W bytes and
 * they all finish together (the plain kernel's last partial wave of CTAs left
 * SMs idle: ncu showed 13% idle SM cycles on 1x8192x14336). A tile cut by a
 * range boundary is summed in fp32 in the workspace with atomics; the CTA
 * that brings the tile's counter to its contributor count applies the
 * epilogue and reads the sums back with atomicExch(..., 0), so workspace
 * partials and counters are zero again when the kernel exits.
 * Workspace: [tiles] uint32 counters (rounded up to 256 bytes), then
 * [tiles][R*MT*4][32] fp32 partials.
 * ------------------------------------------------------------------------- */
template <typename T, int MT, int R, int U, int KW>
__device__ __forceinline__ void gemv_sk_body(const tpg_gemm_args &a) {
  __shared__ float red[KW / 2][R * MT * 4][32];
  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
  const int g = lane >> 2, t4 = lane & 3;
  const int M = a.m, N = a.n, K = a.k;
  const bool swiglu = a.epilogue == TPG_EPI_SWIGLU;
  const int rows_per_tile = swiglu ? 8 * R : 16 * R;   /* outputs a tile produces */
  const int ntiles = (N + rows_per_tile - 1) / rows_per_tile;
  const int KC = (K + 31) / 32;
  const long long total = (long long)ntiles * KC;
  const long long per = (total + gridDim.x - 1) / gridDim.x;
  long long b0 = (long long)blockIdx.x * per;
  const long long b1 = min(total, b0 + per);
  unsigned *cnt = static_cast<unsigned *>(a.workspace);
  float *ws = reinterpret_cast<float *>(static_cast<char *>(a.workspace) + (((size_t)ntiles * 4 + 255) & ~(size_t)255));
  /* PDL prologue, as in gemv_split_body: the W rows of this CTA's first tile from
   * its first K chunk go to L2, then every block waits for the predecessor
   * (before the workspace atomics, reads of x and stores of y). */
  if (a.pdl_prefetch > 0 && w == 0 && t4 == 0 && b0 < b1) {
    const int t = (int)(b0 / KC), c0 = (int)(b0 - (long long)t * KC);
    const uint32_t left = (uint32_t)(K - c0 * 32) * (uint32_t)sizeof(T);
    const uint32_t bytes = min((uint32_t)a.pdl_prefetch, left) & ~15u;
#pragma unroll
    for (int rt = 0; rt < R; ++rt) {
      int ob, r0, r1;
      w_rows(t * R + rt, g, N, swiglu, ob, r0, r1);
      prefetch_l2_bulk(static_cast<const T *>(a.w) + (size_t)r0 * a.ldw + c0 * 32, bytes);
      prefetch_l2_bulk(static_cast<const T *>(a.w) + (size_t)r1 * a.ldw + c0 * 32, bytes);
    }
  }
  pdl_wait();
  pdl_launch_dependents();
  const T *xp[MT];
  bool xv[MT];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
    const int m = mt * 8 + g;
    xv[mt] = m < M;
    xp[mt] = static_cast<const T *>(a.x) + (size_t)min(m, M - 1) * a.ldx + 8 * t4;
  }

  while (b0 < b1) {
    const int t = (int)(b0 / KC);
    const int c0 = (int)(b0 - (long long)t * KC);
    const int c1 = (int)min((long long)KC, c0 + (b1 - b0));
    const T *wp[R][2];
    int obase[R];
#pragma unroll
    for (int rt = 0; rt < R; ++rt) {
      int r0, r1;
      w_rows(t * R + rt, g, N, swiglu, obase[rt], r0, r1);
      wp[rt][0] = static_cast<const T *>(a.w) + (size_t)r0 * a.ldw + 8 * t4;
      wp[rt][1] = static_cast<const T *>(a.w) + (size_t)r1 * a.ldw + 8 * t4;
    }
    float acc[R][MT][4];
#pragma unroll
    for (int rt = 0; rt < R; ++rt)
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int i = 0; i < 4; ++i) acc[rt][mt][i] = 0.f;

    for (int cg = c0 + w * U; cg < c1; cg += KW * U) {
      uint4 wv[U][R][2], xq[U][MT];
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int c = cg + u, k = c * 32 + 8 * t4;
        const bool ok = c < c1 && k < K;
#pragma unroll
        for (int rt = 0; rt < R; ++rt) {
          wv[u][rt][0] = ok ? ld_stream(wp[rt][0] + c * 32) : make_uint4(0, 0, 0, 0);
          wv[u][rt][1] = ok ? ld_stream(wp[rt][1] + c * 32) : make_uint4(0, 0, 0, 0);
        }
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) xq[u][mt] = (ok && xv[mt]) ? ld_keep(xp[mt] + c * 32) : make_uint4(0, 0, 0, 0);
      }
#pragma unroll
      for (int u = 0; u < U; ++u)
#pragma unroll
        for (int rt = 0; rt < R; ++rt)
#pragma unroll
          for (int mt = 0; mt < MT; ++mt) {
            mma16816<T>(acc[rt][mt], wv[u][rt][0].x, wv[u][rt][1].x, wv[u][rt][0].y, wv[u][rt][1].y, xq[u][mt].x, xq[u][mt].y);
            mma16816<T>(acc[rt][mt], wv[u][rt][0].z, wv[u][rt][1].z, wv[u][rt][0].w, wv[u][rt][1].w, xq[u][mt].z, xq[u][mt].w);
          }
    }
    reduce_warps<MT, R, KW>(acc, red, w, lane);
    if (w == 0) {
      bool store = true;
      if (c0 != 0 || c1 != KC) {
        /* partial tile: contributors are the CTAs whose ranges overlap it */
        const int first = (int)(((long long)t * KC) / per), last = (int)(((long long)(t + 1) * KC - 1) / per);
        float *tw = ws + (size_t)t * (R * MT * 4) * 32;
#pragma unroll
        for (int rt = 0; rt < R; ++rt)
#pragma unroll
          for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int i = 0; i < 4; ++i) atomicAdd(tw + ((rt * MT + mt) * 4 + i) * 32 + lane, acc[rt][mt][i]);
        __threadfence();
        __syncwarp();
        unsigned old = 0;
        if (lane == 0) old = atomicAdd(cnt + t, 1u);
        old = __shfl_sync(0xffffffffu, old, 0);
        store = old == (unsigned)(last - first);
        if (store) {
          __threadfence();
#pragma unroll
          for (int rt = 0; rt < R; ++rt)
#pragma unroll
            for (int mt = 0; mt < MT; ++mt)
#pragma unroll
              for (int i = 0; i < 4; ++i) acc[rt][mt][i] = atomicExch(tw + ((rt * MT + mt) * 4 + i) * 32 + lane, 0.f);
          if (lane == 0) atomicExch(cnt + t, 0u);
        }
      }
      if (store) store_tile<T, MT, R>(a, acc, obase, g, t4, M, N);
    }
    b0 += c1 - c0;
  }
}


/* ---------------------------------------------------------------------------
 * The decode GEMV (tpg_gemv_<dt>_m*): grid = (tiles, S). CTA (t, s) streams
 * row tile t over the s-th of S near-equal contiguous ranges of 32-wide K
 * chunks, so the launch has tiles * S CTAs whatever N is: the host splits
 * only when the row tiles alone would leave CTA slots idle (small N). Inside a CTA the range is cut into groups of U chunks taken by the
 * KW warps round-robin; every load is predicated (chunk in range, 8-wide
 * piece inside K), so a K that is not a multiple of the CTA step costs one
 * partly empty group, not a serial tail loop. PF: the next group's W and X
 * are loaded before the current group's mma (more bytes in flight per warp).
 * Reduction of the S partials: warp 0 of each CTA writes its fp32 tile to its
 * own workspace slot [t][s] (plain L2 stores), then bumps the tile's counter;
 * the CTA that brings it to S sums the S slots in a fixed order (s = 0..S-1,
 * so results are bit-identical run to run), applies the epilogue and resets
 * the counter to zero. Only the counters need zeroing at allocation.
 * Workspace: [tiles] uint32 counters (rounded up to 256 bytes), then
 * [tiles][S][R*MT*4][32] fp32 (gemv_fill in lib/gemm/select.c). S = 1: no
 * workspace, no counter. A workspace serves one (tiles, S): another grid's
 * counters would land on this one's dirty slots.
 * ------------------------------------------------------------------------- */
template <typename T, int MT, int R, int U, int KW, bool PF, int LDF, bool FLATRED = true, bool XLATE = false,
          bool XN = false>
__device__ __forceinline__ void gemv_split_body(const tpg_gemm_args &a) {
  /* one-barrier warp reduction where its shared memory stays <= 32 KB */
  constexpr bool FLAT = FLATRED && (KW - 1) * R * MT * 4 * 32 * 4 <= 32768;
  __shared__ float red[FLAT ? KW - 1 : KW / 2][R * MT * 4][32];
  constexpr int NV = R * MT * 4; /* accumulator values per lane */
  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
  const int g = lane >> 2, t4 = lane & 3;
  const int M = a.m, N = a.n, K = a.k;
  const bool swiglu = a.epilogue == TPG_EPI_SWIGLU;
  const int t = blockIdx.x, S = gridDim.y, s = blockIdx.y;
  const int KC = (K + 31) / 32;
  const int c0 = (int)((long long)s * KC / S), c1 = (int)((long long)(s + 1) * KC / S);

  const T *wp[R][2];
  int obase[R];
#pragma unroll
  for (int rt = 0; rt < R; ++rt) {
    int r0, r1;
    w_rows(t * R + rt, g, N, swiglu, obase[rt], r0, r1);
    wp[rt][0] = static_cast<const T *>(a.w) + (size_t)r0 * a.ldw + 8 * t4;
    wp[rt][1] = static_cast<const T *>(a.w) + (size_t)r1 * a.ldw + 8 * t4;
  }
  /* Programmatic dependent launch (TPG_GRAPH_PDL, sm_90+): this grid may be
   * running while its predecessor (the all-reduce or the other GEMV) still
   * does. W is not what the predecessor produces, so the first pdl_prefetch
   * bytes of this CTA's W rows (from its first K chunk) go to L2 now (lanes
   * t4 == 0 of warp 0 hold row starts: 16*R rows, one bulk prefetch each);
   * then every block waits for the predecessor before it reads x or writes y
   * or the workspace (pdl_wait is the only exit from here on every path).
   * Dependents may launch once every block got past the wait: not earlier,
   * so a chain of PDL edges never has more than the one successor launched
   * ahead, spinning on SM slots. */
  if (a.pdl_prefetch > 0 && w == 0 && t4 == 0 && c0 < c1) {
    const uint32_t bytes = min((uint32_t)a.pdl_prefetch, (uint32_t)(K - c0 * 32) * (uint32_t)sizeof(T)) & ~15u;
#pragma unroll
    for (int rt = 0; rt < R; ++rt) {
      prefetch_l2_bulk(wp[rt][0] + c0 * 32, bytes);
      prefetch_l2_bulk(wp[rt][1] + c0 * 32, bytes);
    }
  }
  pdl_wait();
  pdl_launch_dependents();
  const T *xp[MT];
  bool xv[MT];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
    const int m = mt * 8 + g;
    xv[mt] = m < M;
    xp[mt] = static_cast<const T *>(a.x) + (size_t)min(m, M - 1) * a.ldx + 8 * t4;
  }
  /* XN (a folded norm's consumer): X is RMSNorm(x) * x_norm_w, formed
   * right before its mmas (mma_group), with rs[mt] the scale of the row
   * this lane loads. Not at the load: there the next W load would wait for
   * each x value; this way x's loads stay in flight beside W's as plain X's
   * do. The norm weight's 8 values, the same for every row and CTA, are L1
   * hits where they are used. */
  float rs[MT];
  const T *nw = nullptr;
  if constexpr (XN) {
    static_assert(MT * 8 <= TPG_FOLD_MAX_M, "a folded norm serves m <= TPG_FOLD_MAX_M");
    __shared__ float xs[TPG_FOLD_MAX_M];
    row_scales<KW>(a, xs, w, lane);
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) rs[mt] = xs[min(mt * 8 + g, M - 1)];
    nw = static_cast<const T *>(a.x_norm_w) + 8 * t4;
  }
  auto ldx = [&](int mt, int k, bool ok) -> uint4 {
    if (!(ok && xv[mt])) return make_uint4(0, 0, 0, 0);
    return ld_keep(xp[mt] + k);
  };
  /* One accumulator per tile: splitting each group's chain of 2U dependent
   * mmas over 2 or 4 accumulator sets measured slower in gemv_lab
   * (docs/kernels.md, "Decode GEMV"). */
  float acc[R][MT][4];
#pragma unroll
  for (int rt = 0; rt < R; ++rt)
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int i = 0; i < 4; ++i) acc[rt][mt][i] = 0.f;

  const int G = (c1 - c0 + U - 1) / U; /* groups of U chunks in this CTA's range */
  auto load = [&](uint4 (&dw)[U][R][2], uint4 (&dx)[U][MT], int grp) {
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int c = c0 + grp * U + u;
      const int k = c * 32;
      const bool ok = c < c1 && k + 8 * t4 < K;
#pragma unroll
      for (int rt = 0; rt < R; ++rt) {
        dw[u][rt][0] = ok ? ld_w<LDF>(wp[rt][0] + k) : make_uint4(0, 0, 0, 0);
        dw[u][rt][1] = ok ? ld_w<LDF>(wp[rt][1] + k) : make_uint4(0, 0, 0, 0);
      }
      if constexpr (!XLATE) {
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) dx[u][mt] = ldx(mt, k, ok);
      }
    }
  };
  /* XLATE: X is not loaded with W but chunk by chunk right before its mmas.
   * X is re-read by every CTA, so these are L1/L2 hits whose latency the
   * other warps hide; what it saves is registers: U*MT*4 of them held
   * across W's DRAM latency, which at M > 8 capped U (bytes in flight). */
  auto mma_group = [&](const uint4 (&wv)[U][R][2], const uint4 (&x)[U][MT], int grp) {
#pragma unroll
    for (int u = 0; u < U; ++u) {
      uint4 xl[MT];
      const int c = c0 + grp * U + u, k = c * 32;
      const bool ok = c < c1 && k + 8 * t4 < K;
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) xl[mt] = XLATE ? ldx(mt, k, ok) : x[u][mt];
      if constexpr (XN) {
        if (ok) {
          const uint4 nv = ld_keep(nw + k);
#pragma unroll
          for (int mt = 0; mt < MT; ++mt)
            if (xv[mt]) xl[mt] = epi_normed<T>(xl[mt], nv, rs[mt]);
        }
      }
#pragma unroll
      for (int rt = 0; rt < R; ++rt)
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          mma16816<T>(acc[rt][mt], wv[u][rt][0].x, wv[u][rt][1].x, wv[u][rt][0].y, wv[u][rt][1].y, xl[mt].x, xl[mt].y);
          mma16816<T>(acc[rt][mt], wv[u][rt][0].z, wv[u][rt][1].z, wv[u][rt][0].w, wv[u][rt][1].w, xl[mt].z, xl[mt].w);
        }
    }
  };
  if constexpr (PF) {
    uint4 wc[U][R][2], xc[U][MT];
    if (w < G) load(wc, xc, w);
    for (int grp = w; grp < G; grp += KW) {
      uint4 wn[U][R][2], xn[U][MT];
      const bool more = grp + KW < G;
      if (more) load(wn, xn, grp + KW);
      mma_group(wc, xc, grp);
      if (more) {
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
    for (int grp = w; grp < G; grp += KW) {
      uint4 wc[U][R][2], xc[U][MT];
      load(wc, xc, grp);
      mma_group(wc, xc, grp);
    }
  }

  if constexpr (FLAT) reduce_warps_flat<MT, R, KW>(acc, red, w, lane);
  else reduce_warps<MT, R, KW>(acc, red, w, lane);
  if (w != 0) return;
  if (S > 1) {
    unsigned *cnt = static_cast<unsigned *>(a.workspace);
    float *ws = reinterpret_cast<float *>(static_cast<char *>(a.workspace) + (((size_t)gridDim.x * 4 + 255) & ~(size_t)255));
    float *tw = ws + (size_t)t * S * NV * 32;
#pragma unroll
    for (int rt = 0; rt < R; ++rt)
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int i = 0; i < 4; ++i) __stcg(tw + ((size_t)s * NV + (rt * MT + mt) * 4 + i) * 32 + lane, acc[rt][mt][i]);
    __threadfence();
    __syncwarp();
    unsigned old = 0;
    if (lane == 0) old = atomicAdd(cnt + t, 1u);
    old = __shfl_sync(0xffffffffu, old, 0);
    if (old != (unsigned)(S - 1)) return;
    __threadfence();
#pragma unroll
    for (int rt = 0; rt < R; ++rt)
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int i = 0; i < 4; ++i) acc[rt][mt][i] = 0.f;
    for (int j = 0; j < S; ++j)
#pragma unroll
      for (int rt = 0; rt < R; ++rt)
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
          for (int i = 0; i < 4; ++i) acc[rt][mt][i] += __ldcg(tw + ((size_t)j * NV + (rt * MT + mt) * 4 + i) * 32 + lane);
    if (lane == 0) cnt[t] = 0u; /* every contributor has arrived: nobody else touches it in this launch */
  }
  store_tile<T, MT, R>(a, acc, obase, g, t4, M, N);
}

}  // namespace tpg

/* Stream-K entry points: grid = CTAs_per_SM * SMs (2 for m8, 1 for m16),
 * workspace = tpg_gemv_sk_workspace_bytes (see lib/gemm/select.c). */
#define TPG_GEMV_SK(NAME, T, MT, R, U, KW, MINB)                                       \
  extern "C" __global__ void __launch_bounds__(KW * 32, MINB) NAME(const __grid_constant__ tpg_gemm_args a) { \
    tpg::gemv_sk_body<T, MT, R, U, KW>(a);                                             \
  }
TPG_GEMV_SK(tpg_gemv_sk_bf16_m8, __nv_bfloat16, 1, 1, 8, 8, 2)
TPG_GEMV_SK(tpg_gemv_sk_bf16_m16, __nv_bfloat16, 2, 2, 2, 16, 1)
TPG_GEMV_SK(tpg_gemv_sk_f16_m8, __half, 1, 1, 8, 8, 2)
TPG_GEMV_SK(tpg_gemv_sk_f16_m16, __half, 2, 2, 2, 16, 1)

/* Entry points: tpg_gemv_<dtype>_m<max M>[w4], grid = (tiles, S): tiles =
 * ceil(N / 16R) (ceil(N / 8R) for SWIGLU), S and the workspace from
 * lib/gemm/select.c (kGemv, gemv_splits), which mirrors these constants.
 * (MT, R, U, KW warps, min CTAs/SM, X late); all without register prefetch
 * (PF), with the L2::128B hint (LDF 2) and the one-barrier reduction. */
#define TPG_GEMV_SPLIT(NAME, T, MT, R, U, KW, MINB, XL)                                 \
  extern "C" __global__ void __launch_bounds__(KW * 32, MINB) NAME(const __grid_constant__ tpg_gemm_args a) { \
    tpg::gemv_split_body<T, MT, R, U, KW, false, 2, true, XL>(a);                      \
  }
/* The same configurations with x normalized as it is loaded (a folded
 * norm's consumer, m <= TPG_FOLD_MAX_M): tpg_gemv_<dtype>_m<max M>[w4]_xn. */
#define TPG_GEMV_SPLIT_XN(NAME, T, MT, R, U, KW, MINB, XL)                              \
  extern "C" __global__ void __launch_bounds__(KW * 32, MINB) NAME(const __grid_constant__ tpg_gemm_args a) { \
    tpg::gemv_split_body<T, MT, R, U, KW, false, 2, true, XL, true>(a);                \
  }
/* Configurations chosen by measurement (gemv_lab's comparison on an H200:
 * docs/gemm.md, "The decode GEMV"; docs/kernels.md, "Decode GEMV"): per M
 * class the one or two that were fastest against cuBLASLt over the zoo's 93
 * decode shapes. LDF 2 (all): the L2::128B prefetch hint (58.3 us against
 * 60.1 us with L2::256B on 1x8192x14336). w4: 4 warps, 4 CTAs per SM
 * (finer grain: won on 2N or N >= 4608 / 9216 W rows). X late from m16w4
 * up. */
TPG_GEMV_SPLIT(tpg_gemv_bf16_m8, __nv_bfloat16, 1, 1, 8, 8, 2, false)
TPG_GEMV_SPLIT(tpg_gemv_bf16_m8w4, __nv_bfloat16, 1, 1, 8, 4, 4, false)
TPG_GEMV_SPLIT(tpg_gemv_bf16_m16, __nv_bfloat16, 2, 1, 2, 8, 3, false)
TPG_GEMV_SPLIT(tpg_gemv_bf16_m16w4, __nv_bfloat16, 2, 1, 8, 4, 4, true)
TPG_GEMV_SPLIT(tpg_gemv_bf16_m32, __nv_bfloat16, 4, 1, 4, 8, 2, true)
TPG_GEMV_SPLIT(tpg_gemv_bf16_m64, __nv_bfloat16, 8, 1, 4, 8, 2, true)
TPG_GEMV_SPLIT(tpg_gemv_f16_m8, __half, 1, 1, 8, 8, 2, false)
TPG_GEMV_SPLIT(tpg_gemv_f16_m8w4, __half, 1, 1, 8, 4, 4, false)
TPG_GEMV_SPLIT(tpg_gemv_f16_m16, __half, 2, 1, 2, 8, 3, false)
TPG_GEMV_SPLIT(tpg_gemv_f16_m16w4, __half, 2, 1, 8, 4, 4, true)
TPG_GEMV_SPLIT(tpg_gemv_f16_m32, __half, 4, 1, 4, 8, 2, true)
TPG_GEMV_SPLIT(tpg_gemv_f16_m64, __half, 8, 1, 4, 8, 2, true)
TPG_GEMV_SPLIT_XN(tpg_gemv_bf16_m8_xn, __nv_bfloat16, 1, 1, 8, 8, 2, false)
TPG_GEMV_SPLIT_XN(tpg_gemv_bf16_m8w4_xn, __nv_bfloat16, 1, 1, 8, 4, 4, false)
TPG_GEMV_SPLIT_XN(tpg_gemv_bf16_m16_xn, __nv_bfloat16, 2, 1, 2, 8, 3, false)
TPG_GEMV_SPLIT_XN(tpg_gemv_bf16_m16w4_xn, __nv_bfloat16, 2, 1, 8, 4, 4, true)
TPG_GEMV_SPLIT_XN(tpg_gemv_f16_m8_xn, __half, 1, 1, 8, 8, 2, false)
TPG_GEMV_SPLIT_XN(tpg_gemv_f16_m8w4_xn, __half, 1, 1, 8, 4, 4, false)
TPG_GEMV_SPLIT_XN(tpg_gemv_f16_m16_xn, __half, 2, 1, 2, 8, 3, false)
TPG_GEMV_SPLIT_XN(tpg_gemv_f16_m16w4_xn, __half, 2, 1, 8, 4, 4, true)
