// paged.cu - the serving step's attention over the paged KV cache: decode
// rows and prefill rows of many sequences in one step (kernels.h, "The
// serving step", has the layout and the contract).
//
// Decisions:
// - One KV-cache block of one head is one 64-key tile (LLAMA_KV_BLOCK), so a
//   tile is one table lookup and one contiguous 16 KB load.
// - Decode attention streams K and V through shared memory with cp.async,
//   LLAMA_PAGED_STAGES stages: tile t + 1 is in flight while tile t is used,
//   and the loads of a tile go out all at once, not as each warp needs them.
//   The arithmetic per 16 keys is llama_attn_tc_g<G>'s (kernels/step.cu
//   explains the fragment layouts), reading fragments from shared memory.
// - Batch invariance (docs/serving.md): the split of a decode row is
//   split_len keys counted from position 0 whatever the step's size, and its
//   splits are merged in split order by whichever block finishes last; the
//   prefill's key tiles start at position 0 and a row ignores tiles past its
//   own position exactly (p = 0, alpha = 1). So a row's bits depend on its own
//   sequence alone, not on the rows beside it or on how its prompt was cut.
// - Prefill rows get their RoPE + append in the decode kernel (block (0, h,
//   i)), so a step is two attention nodes a layer, whatever its mix.
#include <cuda_bf16.h>
#include <stdint.h>

#include "examples/llama/kernels/kernels.h"
#include "examples/llama/kernels/common.cuh"

extern __shared__ __align__(16) unsigned char llama_paged_smem[];

namespace {

constexpr int kBS = LLAMA_KV_BLOCK;

// Row `off` of head h in pool block blk.
template <int D>
__device__ __forceinline__ size_t pool_row(int blk, int nkv, int h, int off) {
  return (((size_t)blk * nkv + h) * kBS + off) * D;
}

// A stage of the decode pipeline: one K tile, then one V tile. Row pitches
// against bank conflicts of the 16-byte fragment loads (8 lanes a phase):
// K rows are read 8 rows x 4 dim groups (pitch 16 words mod 32), V rows 4
// keys 2 apart x 2 dim groups (pitch 4 words mod 32), as in prefill.cu.
template <int D>
struct Stage {
  static constexpr int KP = D + 32, VP = D + 8;
  static constexpr int ELEMS = kBS * (KP + VP);
};
static_assert(LLAMA_PAGED_STAGES * kBS * (2 * 128 + 40) == LLAMA_PAGED_STAGES * Stage<128>::ELEMS,
              "llama_paged_attn_smem (kernels.h) is the stages' size");

// llama_paged_attn's arguments, in one place for its parts.
struct PagedArgs {
  __nv_bfloat16 *out, *q;
  float *o_part, *ml_part;
  unsigned *counters;
  __nv_bfloat16 *k_pool, *v_pool;
  const int *tables;
  const __nv_bfloat16 *qkv;
  const int *meta, *pos, *seq;
  int nkv, max_blocks, split_len, nsplit;
  float scale_log2, theta;
  const float *inv_freq;
};

// A prefill row (block (0, h, i)): the G query heads of group h rotated into
// q; key h rotated and value h copied into the pool at position p. The same
// rotation (rope_rotate) as the decode rows', so the cache holds the same
// bits whichever path wrote a position.
template <int D, int G>
__device__ __forceinline__ void prefill_row_rope(const PagedArgs &a, int i, int h, int p, const int *bt) {
  const int nq = a.nkv * G, nh = nq + 2 * a.nkv;
  const __nv_bfloat16 *src = a.qkv + (size_t)i * nh * D;
  const int blk = p >= 0 && p < a.max_blocks * kBS ? bt[p / kBS] : -1;
  const bool cache = blk >= 0;  // else the engine's bug: never write outside the pool
  for (int idx = threadIdx.x; idx < (G + 2) * (D / 2); idx += blockDim.x) {
    const int hh = idx / (D / 2), j = idx % (D / 2);
    const int head = hh < G ? h * G + hh : hh == G ? nq + h : nq + a.nkv + h;
    float x0 = __bfloat162float(src[(size_t)head * D + j]), x1 = __bfloat162float(src[(size_t)head * D + j + D / 2]);
    if (hh <= G) rope_rotate<D>(x0, x1, p, j, a.theta, a.inv_freq);
    __nv_bfloat16 *dst;
    if (hh < G) {
      dst = a.q + ((size_t)i * nq + head) * D;
    } else {
      if (!cache) continue;
      dst = (hh == G ? a.k_pool : a.v_pool) + pool_row<D>(blk, a.nkv, h, p % kBS);
    }
    dst[j] = __float2bfloat16_rn(x0);
    dst[j + D / 2] = __float2bfloat16_rn(x1);
  }
}

// A decode row's queries and new key: the G query heads of group h rotated
// and rounded to bf16 into qsm; the split that holds position p (the last)
// also rotates key h and appends it and value h at p, before any block of
// the row reads keys there (no other split covers p).
template <int D, int G>
__device__ __forceinline__ void decode_row_rope(const PagedArgs &a, int i, int h, int p, bool last_split,
                                                const int *bt, __nv_bfloat16 (*qsm)[D]) {
  const int nq = a.nkv * G, nh = nq + 2 * a.nkv, t = threadIdx.x;
  const __nv_bfloat16 *src = a.qkv + (size_t)i * nh * D;
  rope_queries<D, G>(src, h, p, a.theta, a.inv_freq, qsm);
  const int blk = bt[p / kBS];
  if (last_split && t < D && blk >= 0) {  // blk < 0: the engine's bug, never write outside the pool
    const size_t row = pool_row<D>(blk, a.nkv, h, p % kBS);
    const int j = t & (D / 2 - 1);  // threads 0 .. D/2 - 1: the key; D/2 .. D - 1: the value
    if (t < D / 2) {
      const __nv_bfloat16 *x = src + ((size_t)nq + h) * D;
      float x0 = __bfloat162float(x[j]), x1 = __bfloat162float(x[j + D / 2]);
      rope_rotate<D>(x0, x1, p, j, a.theta, a.inv_freq);
      a.k_pool[row + j] = __float2bfloat16_rn(x0);
      a.k_pool[row + j + D / 2] = __float2bfloat16_rn(x1);
    } else {
      const __nv_bfloat16 *x = src + ((size_t)nq + a.nkv + h) * D;
      a.v_pool[row + j] = x[j];
      a.v_pool[row + j + D / 2] = x[j + D / 2];
    }
  }
}

// Keys [0, nvalid) of pool block blk, head h, into a stage (cp.async, one
// group per call's caller); rows at or past nvalid are zeros (V rows of 0
// keep 0 x garbage out of P V; their scores are masked).
template <int D>
__device__ __forceinline__ void load_tile(__nv_bfloat16 *stage, const PagedArgs &a, int blk, int h, int nvalid) {
  constexpr int CPR = D / 8;  // 16-byte chunks a row
  const size_t base = pool_row<D>(blk, a.nkv, h, 0);
  const __nv_bfloat16 *kb = a.k_pool + base, *vb = a.v_pool + base;
  __nv_bfloat16 *ks = stage, *vs = stage + kBS * Stage<D>::KP;
#pragma unroll
  for (int u = 0; u < kBS * CPR / 128; u++) {
    const int c = threadIdx.x + 128 * u, row = c / CPR, col = c % CPR;
    const bool ok = row < nvalid;
    const size_t at = (size_t)(ok ? row : 0) * D + col * 8;
    cp_async16(ks + row * Stage<D>::KP + col * 8, kb + at, ok);
    cp_async16(vs + row * Stage<D>::VP + col * 8, vb + at, ok);
  }
}

// Warp w's 16 keys of a stage (tile rows 16w .. 16w + 15, nk of them valid):
// Q K^T, masking, the online softmax and P V, as llama_attn_tc_g<G> does per
// 16 keys (kernels/step.cu: the dims of Q K^T permuted so Q and K fragments
// are whole 16-byte loads; P from S's accumulators as bf16 hi + lo; V's B
// fragments paired with byte permutes).
template <int D>
__device__ __forceinline__ void warp_keys(const __nv_bfloat16 *stage, int nk, const uint4 *qa, const uint4 *qb,
                                          float scale_log2, WarpAcc<D> &acc) {
  constexpr int KJ = D / 32, VH = D / 64, KP = Stage<D>::KP, VP = Stage<D>::VP;
  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, g = lane >> 2, tig = lane & 3;
  const __nv_bfloat16 *kw = stage + 16 * w * KP, *vw = stage + kBS * KP + 16 * w * VP;
  float sc[2][4];
#pragma unroll
  for (int n = 0; n < 2; n++) {
    sc[n][0] = sc[n][1] = sc[n][2] = sc[n][3] = 0.f;
#pragma unroll
    for (int j = 0; j < KJ; j++) {
      const uint4 kr = *reinterpret_cast<const uint4 *>(kw + (8 * n + g) * KP + 32 * j + 8 * tig);
      mma_bf16(sc[n], qa[j].x, qb[j].x, qa[j].y, qb[j].y, kr.x, kr.y);
      mma_bf16(sc[n], qa[j].z, qb[j].z, qa[j].w, qb[j].w, kr.z, kr.w);
    }
  }
#pragma unroll
  for (int n = 0; n < 2; n++)
#pragma unroll
    for (int c = 0; c < 4; c++) sc[n][c] = 8 * n + 2 * tig + (c & 1) < nk ? sc[n][c] * scale_log2 : -INFINITY;
  float al0, al1;
  softmax_step(sc, acc.m0, acc.m1, acc.l0, acc.l1, al0, al1);  // the warp's first key is valid: finite max
  uint32_t ph[4], pl[4];
  p_fragments(sc[0], sc[1], ph, pl);
  uint4 vr[4][VH];
#pragma unroll
  for (int r = 0; r < 4; r++)
#pragma unroll
    for (int H = 0; H < VH; H++)
      vr[r][H] = *reinterpret_cast<const uint4 *>(vw + (2 * tig + (r & 1) + 8 * (r >> 1)) * VP + 64 * H + 8 * g);
  rescale_pv<D>(acc, al0, al1, vr, ph, pl);
}

// Keys [start, end) of row i's head h through the stages: tile t (keys
// start + 64t ..) is pool block bt[start / 64 + t]; LLAMA_PAGED_STAGES - 1
// tiles are in flight while one is used. Warps whose 16 keys of a tile all
// lie at or past end skip it.
template <int D>
__device__ __forceinline__ void decode_tiles(const PagedArgs &a, int h, int start, int end, const int *bt,
                                             const uint4 *qa, const uint4 *qb, WarpAcc<D> &acc) {
  constexpr int NS = LLAMA_PAGED_STAGES;
  __nv_bfloat16 *smem = reinterpret_cast<__nv_bfloat16 *>(llama_paged_smem);
  const int w = threadIdx.x >> 5, ntile = (end - start + kBS - 1) / kBS, b0 = start / kBS;
#pragma unroll
  for (int st = 0; st < NS - 1; st++) {
    if (st < ntile) load_tile<D>(smem + st * Stage<D>::ELEMS, a, bt[b0 + st], h, min(kBS, end - start - st * kBS));
    cp_async_commit();
  }
  for (int t = 0; t < ntile; t++) {
    cp_async_wait<NS - 2>();
    __syncthreads();  // tile t is in its stage for every warp; every warp is done with tile t - 1
    const int nt = t + NS - 1;
    if (nt < ntile)
      load_tile<D>(smem + (nt % NS) * Stage<D>::ELEMS, a, bt[b0 + nt], h, min(kBS, end - start - nt * kBS));
    cp_async_commit();
    const int nk = min(16, end - (start + t * kBS + 16 * w));
    if (nk > 0) warp_keys<D>(smem + (t % NS) * Stage<D>::ELEMS, nk, qa, qb, a.scale_log2, acc);
  }
  cp_async_wait<0>();
  __syncthreads();  // the stages are free: the caller reuses them
}

// Split s of decode row i (position p), KV head h.
template <int D, int G>
__device__ __forceinline__ void decode_row(const PagedArgs &a, int i, int h, int s, int p, const int *bt) {
  static_assert(G >= 1 && G <= 16, "the group is the 16 rows of one MMA");
  constexpr int KJ = D / 32;
  __shared__ __align__(16) __nv_bfloat16 qsm[G][D];
  const int len = p + 1, ns = (len + a.split_len - 1) / a.split_len;
  if (s >= ns || p >= a.max_blocks * kBS) return;  // past the row's keys; or the engine's bug: outside its table
  const int start = s * a.split_len, end = min(len, start + a.split_len);
  decode_row_rope<D, G>(a, i, h, p, s == ns - 1, bt, qsm);
  __threadfence_block();
  __syncthreads();  // qsm and the new cache row, before any warp reads them
  const int g = (threadIdx.x & 31) >> 2, tig = threadIdx.x & 3;
  uint4 qa[KJ], qb[KJ];  // Q fragments for the whole split: head g (rows 0..7), head g + 8
#pragma unroll
  for (int j = 0; j < KJ; j++) {
    const uint4 z = make_uint4(0, 0, 0, 0);
    const bool r0 = G >= 8 || g < G, r1 = G == 16 || (G > 8 && g + 8 < G);
    qa[j] = r0 ? *reinterpret_cast<const uint4 *>(&qsm[g][32 * j + 8 * tig]) : z;
    qb[j] = r1 ? *reinterpret_cast<const uint4 *>(&qsm[g + 8][32 * j + 8 * tig]) : z;
  }
  WarpAcc<D> acc;
  init_acc(acc);
  decode_tiles<D>(a, h, start, end, bt, qa, qb, acc);
  const size_t row = (size_t)i * a.nkv * G + (size_t)h * G;  // row i's first query head of group h
  store_split_partials<D, G>(a.o_part, a.ml_part, row, a.nsplit, s, acc, reinterpret_cast<float *>(llama_paged_smem));
  merge_last_split<D, G>(a.out, a.o_part, a.ml_part, a.counters + (size_t)i * a.nkv + h, row, a.nsplit, ns);
}

// Block (s, h, i): row i's kind decides its work.
template <int D, int G>
__device__ __forceinline__ void paged_attn(const PagedArgs &a) {
  static_assert(kHeadDimOk<D>, "a head dim with kernels");
  const int s = blockIdx.x, h = blockIdx.y, i = blockIdx.z;
  pdl_wait();
  const int sq = a.seq[i];
  if (sq < 0) return;  // padding
  const int p = a.pos[i];
  const int *bt = a.tables + (size_t)sq * a.max_blocks;
  if (i >= a.meta[0]) {
    if (s == 0) prefill_row_rope<D, G>(a, i, h, p, bt);
    return;
  }
  decode_row<D, G>(a, i, h, s, p, bt);
}

}  // namespace

// Registers: the tensor-core decode kernel's (~170 a thread) plus the
// pipeline's addresses; two blocks an SM is what the shared memory allows.
#define LLAMA_PAGED_ATTN_DEF(SFX, D, G)                                                                        \
  extern "C" __global__ void __launch_bounds__(128, 2) llama_paged_attn##SFX##_g##G(                          \
      __nv_bfloat16 *out, __nv_bfloat16 *q, float *o_part, float *ml_part, unsigned *counters,                 \
      __nv_bfloat16 *k_pool, __nv_bfloat16 *v_pool, const int *tables, const __nv_bfloat16 *qkv,              \
      const int *meta, const int *pos, const int *seq, int nkv, int max_blocks, int split_len, int nsplit,     \
      float scale_log2, float theta, const float *inv_freq) {                                                  \
    const PagedArgs a{out,  q,    o_part,     ml_part,   counters,  k_pool, v_pool,     tables,     qkv,       \
                      meta, pos,  seq,        nkv,       max_blocks, split_len, nsplit, scale_log2, theta,     \
                      inv_freq};                                                                               \
    paged_attn<D, G>(a);                                                                                       \
  }
#define LLAMA_PAGED_ATTN_DEF_128(G) LLAMA_PAGED_ATTN_DEF(, 128, G)
#define LLAMA_PAGED_ATTN_DEF_64(G) LLAMA_PAGED_ATTN_DEF(_d64, 64, G)
LLAMA_GROUPS(LLAMA_PAGED_ATTN_DEF_128)
LLAMA_GROUPS(LLAMA_PAGED_ATTN_DEF_64)

namespace {

// llama_paged_prefill's arguments.
struct PrefillArgs {
  __nv_bfloat16 *out;
  const __nv_bfloat16 *q, *k_pool, *v_pool;
  const int *tables, *meta, *pos, *seq, *work;
  int nkv, max_blocks;
  float scale_log2;
};

// Block (wi, h): work item wi's rows i0 .. i0 + n - 1 (positions p0 ..) of
// one sequence, query heads of KV head h; block row r is position index
// r / G and query head h * G + r % G, as llama_prefill_attn_g<G>'s (rows past
// n compute as the last valid one and store nothing). Keys 0 .. p0 + n - 1
// in tiles of KT through two cp.async stages, each tile from the pool block
// the sequence's table names.
template <int D, int G>
__device__ __forceinline__ void paged_prefill(const PrefillArgs &a) {
  static_assert(G >= 1 && G <= 16 && kHeadDimOk<D>, "a group and head dim with kernels");
  constexpr int KJ = D / 32, KT = PTile<D>::KT, CPR = D / 8;
  constexpr int KPK = PTile<D>::KPK, KPV = PTile<D>::KPV;
  __shared__ __align__(16) __nv_bfloat16 ks[2][KT * KPK];
  __shared__ __align__(16) __nv_bfloat16 vs[2][KT * KPV];
  const int wi = blockIdx.x, h = blockIdx.y, t = threadIdx.x, w = t >> 5, g = (t & 31) >> 2, tig = t & 3;
  pdl_wait();
  if (wi >= a.meta[1]) return;
  const int i0 = a.work[2 * wi], n = a.work[2 * wi + 1], nq = a.nkv * G;
  const int p0 = a.pos[i0], kend = p0 + n;
  const int *bt = a.tables + (size_t)a.seq[i0] * a.max_blocks;
  if (kend > a.max_blocks * kBS) return;  // the engine's bug: keys outside the table
  const int ra = 16 * w + g, rb = ra + 8, ia = ra / G, ib = rb / G, ca = min(ia, n - 1), cb = min(ib, n - 1);
  const int ha = h * G + ra % G, hb = h * G + rb % G, lim0 = p0 + ca, lim1 = p0 + cb;
  const int wend = p0 + min((16 * w + 15) / G, n - 1) + 1;  // the warp's rows need keys < wend
  uint4 qa[KJ], qb[KJ];
  {
    const __nv_bfloat16 *qra = a.q + ((size_t)(i0 + ca) * nq + ha) * D, *qrb = a.q + ((size_t)(i0 + cb) * nq + hb) * D;
#pragma unroll
    for (int j = 0; j < KJ; j++) {
      qa[j] = *reinterpret_cast<const uint4 *>(qra + 32 * j + 8 * tig);
      qb[j] = *reinterpret_cast<const uint4 *>(qrb + 32 * j + 8 * tig);
    }
  }
  WarpAcc<D> acc;
  init_acc(acc);
  const int ntiles = (kend + KT - 1) / KT;
  auto load = [&](int tile, int buf) {
    const size_t base = pool_row<D>(bt[tile * KT / kBS], a.nkv, h, tile * KT % kBS);
#pragma unroll
    for (int u = 0; u < KT * CPR / 128; u++) {
      const int c = t + 128 * u, row = c / CPR, col = c % CPR;
      const bool ok = tile * KT + row < kend;
      const size_t at = base + (size_t)(ok ? row : 0) * D + col * 8;
      cp_async16(&ks[buf][row * KPK + col * 8], a.k_pool + at, ok);
      cp_async16(&vs[buf][row * KPV + col * 8], a.v_pool + at, ok);
    }
    cp_async_commit();
  };
  load(0, 0);
  for (int tile = 0; tile < ntiles; tile++) {
    const int buf = tile & 1;
    if (tile + 1 < ntiles) {
      load(tile + 1, buf ^ 1);  // that stage was last read in tile - 1, before its closing barrier
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    if (tile * KT < wend) prefill_tile<D>(ks[buf], vs[buf], tile * KT, lim0, lim1, qa, qb, a.scale_log2, acc);
    __syncthreads();  // every warp is done with this stage before tile + 2 loads into it
  }
  prefill_store<D>(a.out, acc, ((size_t)(i0 + ia) * nq + ha) * D, ((size_t)(i0 + ib) * nq + hb) * D, ia < n, ib < n);
}

}  // namespace

#define LLAMA_PAGED_PREFILL_DEF(SFX, D, G)                                                                     \
  extern "C" __global__ void __launch_bounds__(128, 2) llama_paged_prefill##SFX##_g##G(                       \
      __nv_bfloat16 *out, const __nv_bfloat16 *q, const __nv_bfloat16 *k_pool, const __nv_bfloat16 *v_pool,   \
      const int *tables, const int *meta, const int *pos, const int *seq, const int *work, int nkv,            \
      int max_blocks, float scale_log2) {                                                                      \
    const PrefillArgs a{out, q, k_pool, v_pool, tables, meta, pos, seq, work, nkv, max_blocks, scale_log2};    \
    paged_prefill<D, G>(a);                                                                                    \
  }
#define LLAMA_PAGED_PREFILL_DEF_128(G) LLAMA_PAGED_PREFILL_DEF(, 128, G)
#define LLAMA_PAGED_PREFILL_DEF_64(G) LLAMA_PAGED_PREFILL_DEF(_d64, 64, G)
LLAMA_GROUPS(LLAMA_PAGED_PREFILL_DEF_128)
LLAMA_GROUPS(LLAMA_PAGED_PREFILL_DEF_64)

extern "C" __global__ void __launch_bounds__(128)
    llama_gather_rows(__nv_bfloat16 *dst, const __nv_bfloat16 *src, const int *rows, int hidden) {
  const int j = blockIdx.x, nv = hidden / 8;
  pdl_wait();
  const uint4 *s = reinterpret_cast<const uint4 *>(src + (size_t)rows[j] * hidden);
  uint4 *d = reinterpret_cast<uint4 *>(dst + (size_t)j * hidden);
  for (int k = threadIdx.x; k < nv; k += blockDim.x) d[k] = s[k];
}
