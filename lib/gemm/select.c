/* select.c - pick a tpgraph GEMM kernel and its launch configuration.
 *
 * Selection table (constants mirror the kernels; keep them in step):
 *
 *   rule                        kernel                      grid                         block  smem
 *   m <= 8                      tpg_gemv_<dt>_m8 (W rows      (tiles, S), tiles =          256    0
 *                               < 4608) or _m8w4              ceil(n / 16)                 128
 *   m <= 16                     tpg_gemv_<dt>_m16w4 (W rows     [SWIGLU ceil(n / 8)];        128    0
 *                               < 9216) or _m16               S = gemv_splits() (below)    256
 *   m <= 32                     tpg_gemv_<dt>_m32                                           256    0
 *   m <= 64                     tpg_gemv_<dt>_m64                                           256    0
 *     (split-K GEMV; W rows = 2n with SWIGLU; S > 1: workspace = 256-byte-
 *      rounded uint32 counters per tile, which the kernel leaves zero, then
 *      tiles * S fp32 slots of MT*4*32 values, scratch)
 *   m > 64, sm_arch == 90       tpg_gemm_sm90_<dt>          min(tiles, num_sms)           384    197696
 *                               tiles = ceil(m/128) * ceil(n/256) [SWIGLU ceil(n/128)]
 *   m > 64, other sm_arch >= 80 tpg_gemm_mma_<dt>           (ceil(m/128), ceil(n/128))    256    61440
 *                                                           [SWIGLU (ceil(m/128), ceil(n/64))]
 *   <dt> = bf16 | f16. split_k = 1 always; workspace_bytes = 0 except the
 *   split GEMV with S > 1 and stream-K.
 *
 * Why: the decode kernels (M <= 64) are weight-streaming and their M variants
 * only trade registers for the width of the M tile; sm_90a wgmma is the fast
 * path for everything larger on Hopper; mma.sync covers sm_80..sm_89 and any
 * architecture where the sm_90a image cannot run (sm_100+ runs the compute_90
 * PTX of the other two families).
 * Rejections: m < 1; n or k not a multiple of 8 (rows must be whole 16-byte
 * vectors); dtype not F16/BF16; unknown epilogue; sm_arch < 80.
 */
#include "lib/gemm/select.h"

#include <stdio.h>
#include <string.h>

#include "kernels/tpg_kargs.h"
#include "lib/gemm/family.h"

/* The epilogue staging of the 128-row TMA kernels, after their ring
 * (kernels/gemm/sm90_tma.cu cfg::EPI_BYTES: two consumers x 4 boxes of 64 x 32
 * elements), and their ring (cfg::RING) */
#define SM90_EPI_BYTES (2 * 4 * 64 * 32 * 2)
#ifndef TPG_SM90_STAGED_RING
#define TPG_SM90_STAGED_RING 196608
#endif

static int reject(char *why, size_t whylen, const char *msg) {
  if (why && whylen) {
    strncpy(why, msg, whylen - 1);
    why[whylen - 1] = '\0';
  }
  return 1;
}

static unsigned cdiv(long a, long b) { return (unsigned)((a + b - 1) / b); }

/* The decode GEMV's configurations (kernels/gemm/gemv.cu entry points
 * tpg_gemv_<dt>_m8, _m8w4, _m16, _m16w4, _m32, _m64; keep in step): X rows
 * per mma tile / 8 (MT), 16-row W tiles per CTA (R), warps (KW), CTAs per SM
 * (occ, from __launch_bounds__ and ptxas -v). */
typedef struct gemv_cfg {
  int mt, r, kw, occ;
  const char *bf16, *f16;
} gemv_cfg;
static const gemv_cfg kGemv[6] = {
    {1, 1, 8, 2, "tpg_gemv_bf16_m8", "tpg_gemv_f16_m8"},     {1, 1, 4, 4, "tpg_gemv_bf16_m8w4", "tpg_gemv_f16_m8w4"},
    {2, 1, 8, 3, "tpg_gemv_bf16_m16", "tpg_gemv_f16_m16"},   {2, 1, 4, 4, "tpg_gemv_bf16_m16w4", "tpg_gemv_f16_m16w4"},
    {4, 1, 8, 2, "tpg_gemv_bf16_m32", "tpg_gemv_f16_m32"},   {8, 1, 8, 2, "tpg_gemv_bf16_m64", "tpg_gemv_f16_m64"},
};
#define TPG_GEMV_MAX_SPLITS 16
/* Which configuration: by M class, and at M <= 16 by the W rows (2N with
 * SwiGLU). Fitted on gemv_lab round 2 (H200, commit e7909f2, the zoo's 93
 * decode shapes; geometric mean of time / cuBLASLt): M = 1 0.954, M = 8 0.975
 * with the split below 4608 W rows (0.958 / 0.983 with m8 only, 0.966 / 0.986
 * with m8w4 only); M = 16 1.051 with the split below 9216 (1.062 with m16 only). */
static const gemv_cfg *gemv_config(int m, int n, int swiglu) {
  const long wrows = swiglu ? 2L * n : (long)n;
  if (m <= 8) return &kGemv[wrows < 4608 ? 0 : 1];
  if (m <= 16) return &kGemv[wrows < 9216 ? 3 : 2];
  return &kGemv[m <= 32 ? 4 : 5];
}
static unsigned gemv_tiles(const gemv_cfg *c, int n, int swiglu) { return cdiv(n, (swiglu ? 8 : 16) * c->r); }

/* How many K ranges (S) the GEMV splits each row tile into: the fewest that
 * give the grid at least GEMV_FILL waves of CTAs on the machine, while every
 * CTA keeps at least GEMV_MIN_CHUNKS 32-wide K chunks (below that the split's
 * fixed costs, a slot write, a counter and the last CTA's sum, outweigh what
 * it streams); at most TPG_GEMV_MAX_SPLITS. Fitted on the same data: splitting
 * pays only when the row tiles fill less than half the CTA slots (small N);
 * GEMV_FILL 1.0 instead cost 5-7% (M = 1: 1.009, M = 16: 1.095). */
#define GEMV_FILL 0.5
#define GEMV_MIN_CHUNKS 32
static int gemv_splits(const gemv_cfg *c, unsigned tiles, int k, int num_sms) {
  const double want = GEMV_FILL * c->occ * num_sms;
  const int kc = (int)cdiv(k, 32);
  int s = 1;
  while (s < TPG_GEMV_MAX_SPLITS && (double)tiles * s < want && kc / (s + 1) >= GEMV_MIN_CHUNKS) ++s;
  return s;
}

/* Fill `out` for the GEMV with S K ranges. */
static void gemv_fill(int m, int n, int dtype, int epilogue, int splits, tpg_kernel_launch *out) {
  const gemv_cfg *c = gemv_config(m, n, epilogue == TPG_EPI_SWIGLU);
  const size_t tiles = gemv_tiles(c, n, epilogue == TPG_EPI_SWIGLU);
  out->kernel = dtype == TPG_KDT_BF16 ? c->bf16 : c->f16;
  out->grid[0] = (unsigned)tiles;
  out->grid[1] = (unsigned)splits;
  out->grid[2] = 1;
  out->block[0] = 32u * (unsigned)c->kw;
  out->block[1] = out->block[2] = 1;
  out->smem_bytes = 0; /* static shared memory only, <= 16 KB */
  out->split_k = 1;
  out->workspace_zeroed = splits > 1 ? ((tiles * 4 + 255) & ~(size_t)255) : 0;
  out->workspace_bytes =
      splits > 1 ? out->workspace_zeroed + tiles * (size_t)splits * (size_t)(c->r * c->mt * 4 * 32 * 4) : 0;
}

int tpg_gemm_select(int m, int n, int k, int dtype, int epilogue, int sm_arch, int num_sms,
                    tpg_kernel_launch *out, char *why, size_t whylen) {
  char buf[160];
  const int bf16 = dtype == TPG_KDT_BF16;
  const int swiglu = epilogue == TPG_EPI_SWIGLU;

  if (!out) return reject(why, whylen, "out is NULL");
  if (m < 1) {
    snprintf(buf, sizeof buf, "m=%d: M must be >= 1", m);
    return reject(why, whylen, buf);
  }
  if (n < 8 || n % 8) {
    snprintf(buf, sizeof buf, "n=%d: N must be a positive multiple of 8 (16-byte rows)", n);
    return reject(why, whylen, buf);
  }
  if (k < 8 || k % 8) {
    snprintf(buf, sizeof buf, "k=%d: K must be a positive multiple of 8 (16-byte rows)", k);
    return reject(why, whylen, buf);
  }
  if (dtype != TPG_KDT_BF16 && dtype != TPG_KDT_F16) {
    snprintf(buf, sizeof buf, "dtype=%d: operands must be F16 or BF16", dtype);
    return reject(why, whylen, buf);
  }
  if (epilogue < 0 || epilogue >= TPG_EPI_COUNT) {
    snprintf(buf, sizeof buf, "epilogue=%d: unknown TPG_EPI_* value", epilogue);
    return reject(why, whylen, buf);
  }
  if (sm_arch < 80) {
    snprintf(buf, sizeof buf, "sm_arch=%d: the kernels need sm_80 or newer (mma.sync bf16)", sm_arch);
    return reject(why, whylen, buf);
  }
  if (num_sms < 1) num_sms = 1;

  memset(out, 0, sizeof *out);
  out->block[1] = out->block[2] = 1;
  out->grid[1] = out->grid[2] = 1;
  out->split_k = 1;
  out->workspace_bytes = 0;

  if (m <= 64) {
    const gemv_cfg *c = gemv_config(m, n, swiglu);
    gemv_fill(m, n, dtype, epilogue, gemv_splits(c, gemv_tiles(c, n, swiglu), k, num_sms), out);
  } else if (sm_arch == 90) {
    const unsigned tiles = cdiv(m, 128) * cdiv(n, swiglu ? 128 : 256);
    out->kernel = bf16 ? "tpg_gemm_sm90_bf16" : "tpg_gemm_sm90_f16";
    out->grid[0] = tiles < (unsigned)num_sms ? tiles : (unsigned)num_sms;
    out->block[0] = 384;
    out->smem_bytes = 4 * (128 + 256) * 64 * 2 + 1024 + 2 * 4 * 8; /* 197696 */
  } else {
    out->kernel = bf16 ? "tpg_gemm_mma_bf16" : "tpg_gemm_mma_f16";
    out->grid[0] = cdiv(m, 128);
    out->grid[1] = cdiv(n, swiglu ? 64 : 128);
    out->block[0] = 256;
    out->smem_bytes = 3 * (128 + 128) * 40 * 2; /* 61440 */
  }
  if (why && whylen) why[0] = '\0';
  return 0;
}

/* ---------------------------------------------------------------------------
 * tpg_gemm_select_tma: the Hopper path (sm_90; other architectures get
 * tpg_gemm_select). Derived from the model zoo (gemm_bench --zoo --cand on one
 * H200, commit f02745a: 1302 shapes of 8 models at TP 1..8, every candidate
 * timed): bench/zoo_rules.py holds the same rule in Python and prints its
 * predicted geometric mean of time / cuBLASLt on the zoo: 1.128, against
 * 1.115 for the best candidate of every shape and 1.233 for the rule before.
 * The m > 64 constants were refitted (zoo_rules.py --fit-from-rule) when the
 * _c2 and BN 192 kernels came in, on a zoo run that timed them (H200, commit
 * 6a048dc, M = 128..8192, all models at TP 2/4/8 + Llama-3 8B TP 1: 504
 * shapes): rule 1.182 there, against 1.215 for the previous rule's picks
 * measured in the same run and 1.163 for the best candidate of each shape.
 * Keep the two in step (the constants below are the script's).
 *
 *   m <= 8, or m <= 16 with fewer than TPG_DEC_SW_W W rows: the decode GEMV
 *                          (tpg_gemm_select): the split-K GEMV beat the best
 *                          unswapped TMA candidate on 90 of the 93 zoo shapes
 *                          at M = 16 (gemv_lab round 2 against the zoo's TMA
 *                          times, each relative to its run's cuBLAS); from
 *                          8192 W rows the swapped 16-token tiles stream W
 *                          faster (zoo of commit 756c3fa: M = 16 1.061 -> 1.038)
 *   m <= 32, W rows <= 4096 and k < 8192: the GEMV (same data: geomean
 *                          1.128 against 1.176 for the TMA rule alone at M = 32;
 *                          at K = 8192 the zoo of round 3 (commit a93acb0) had
 *                          the GEMV 3-9% behind TMA 64 x 64 stream-K)
 *   m > 8 otherwise        the TMA tile (BM x BN, or swapped: BM tokens x BN
 *                          W rows, "sw" in the tables) and split with the lowest
 *                          modelled cost, BM = 64 only while m <= 256, the
 *                          128-row _c2 clusters only while m > 128 and
 *                          stream-K, the 64-row _c2 only for 64 < m <= 128
 *                          and not with SwiGLU:
 *     whole tiles:  ceil(tiles / slots) * kb * BM * BN * eff
 *     stream-K:     tiles * kb / slots * BM * BN * eff + fix * BM * BN
 *                   (+ kk * kb * BM * BN * eff when tiles < slots)
 *   kb = ceil(k / 64); tiles over W rows (2n with SwiGLU), units of two M-tiles
 *   for _c2; slots = num_sms (num_sms / 2 for _c2); eff, fix, kk:
 *   m <= 32: eff 0.6 (BN 256, 128), 1.4 (64), fix 40, kk 0.1 (refitted alone on
 *     the zoo of commit 0364843: M = 32 predicted 1.106 against 1.129 with the
 *     m <= 64 constants; best candidate 1.095);
 *   m <= 64 (weight streaming, 64-row tiles): eff 0.6 (BN 256, 128), 0.8 (64),
 *     fix 20, kk 0.1 (0.05 before the sm90b R3 zoo run); m > 128 (compute):
 *     eff 1.0 (128 x 256), 1.15 (128 x 128), 1.4 (128 x 64), 1.3 (64 x 256),
 *     1.5 (64 x 128), 1.0 (128 x 192), _c2: 0.95 (128 x 256), 1.05 (128 x
 *     128), 0.9 (128 x 192); fix 40, kk 0; 64 < m <= 128: the same but 1.1
 *     (128 x 128), _c2 1.0 (128 x 128), 64-row _c2 1.3 (BN 128) / 2.0 (BN
 *     64), kk 0.05 (sm90b R3 zoo run, M = 128: predicted 1.192 against 1.224
 *     with the m > 128 table, best candidate 1.170). The _cn2 kernels are
 *     candidates only (never paid in that run: cl 3, eff 9 = never).
 *   The swapped tiles (refit on the zoo of commit 756c3fa, M = 16..128): m <= 16
 *     16 x 64 1.2, 16 x 128 1.0, fix 40, kk 0.1; m <= 32 32 x 64 1.2, 32 x 128
 *     1.0; m <= 64 32 x 64 1.4, 64 x 64 0.7; 64 < m <= 128 64 x 64 1.7, 64 x 128
 *     1.2, and that table's 128 x 128 1.05, 64 x 128 1.3, 64-row _c2 (BN 128)
 *     1.1, fix 30 (the fit said 20; 30 keeps whole 128 x 128 tiles where the
 *     _c2 stream-K pick ran slower in tpbench: zoo_rules.py SK_FIX).
 *   streamk: 1 the model decides, 0 whole tiles only, 2 stream-K only (tests).
 *   Stream-K: grid = min(tiles * kb, num_sms), split_k TPG_SPLITK_STREAM,
 *   workspace tpg_sk_workspace_bytes(tiles, grid, BN) (tpg_kargs.h); with
 *   several waves the kernel splits only the last. Whole tiles: grid =
 *   min(tiles, num_sms), no workspace. block 384; smem as in fill_tma.
 * ------------------------------------------------------------------------- */
static void fill_map(tpg_tma_encode *e, int rank, const unsigned long long *dims,
                     const unsigned long long *strides, const unsigned *box) {
  int i;
  memset(e, 0, sizeof *e);
  e->rank = rank;
  e->swizzle = 128;
  for (i = 0; i < rank; ++i) {
    e->dims[i] = dims[i];
    e->box[i] = box[i];
  }
  for (i = 0; i + 1 < rank; ++i) e->strides[i] = strides[i];
}

void tpg_gemm_y_map(int m, int n, int ldy, tpg_tma_encode *y_map) {
  const unsigned long long yd[2] = {(unsigned long long)n, (unsigned long long)m};
  const unsigned long long ys[1] = {(unsigned long long)ldy * 2};
  const unsigned yb[2] = {32, 64}; /* kernels/gemm/sm90_tma.cu cfg::EPI_BOX */
  fill_map(y_map, 2, yd, ys, yb);
  y_map->swizzle = 64;
}

/* Fill `out` and the two map descriptions for the TMA kernel with BM x BN
 * tiles (whole tiles, or stream-K over min(tiles * K blocks, num_sms) CTAs).
 * cl = 2 (bm 128 only): the _c2 kernels, clusters of two CTAs on M-tile
 * pairs ("units") sharing the W tile by multicast; each CTA loads half of
 * the W box, the grid is twice the clusters (even), and the stream-K
 * workspace covers 2 * units tiles. The caller has checked the shape and
 * the leading dimensions. */
/* What one CTA (cl 1) or cluster (cl 2) of the TMA kernel takes at a time:
 * tiles, M-tile pairs (_c2) or, with cn, N-tile pairs (_cn2) */
static unsigned long tma_units(int m, int n, int bm, int bn, int cl, int cn, int swiglu) {
  const int clm = cn ? 1 : cl, cln = cn ? cl : 1;
  return (unsigned long)cdiv(m, (long)bm * clm) * cdiv(n, (long)(swiglu ? bn / 2 : bn) * cln);
}
/* kc (with ks >= 2, cl 1, bm 128): the ks K ranges of a tile are a
 * launch-time cluster of ks CTAs (TPG_SPLITK_CLUSTER): grid tiles * ks,
 * whatever fits at once (clusters do not wait for each other) */
static void fill_tma(int m, int n, int k, int dtype, int epilogue, int num_sms, int ldx, int ldw, int bm, int bn,
                     int sk, int ks, int kc, int cl, int cn, int sw, tpg_kernel_launch *out, tpg_tma_encode *x_map,
                     tpg_tma_encode *w_map) {
  /* swapped tiles (kernels/gemm/sm90_tma.cu SW): [bf16][bm 16, 32, 64][bn 64, 128, 256], and the _c2 pairs */
  static const char *const names_sw[2][3][3] = {
      {{"tpg_gemm_sm90tma_f16_sw16_n64", "tpg_gemm_sm90tma_f16_sw16_n128", NULL},
       {"tpg_gemm_sm90tma_f16_sw32_n64", "tpg_gemm_sm90tma_f16_sw32_n128", "tpg_gemm_sm90tma_f16_sw32_n256"},
       {"tpg_gemm_sm90tma_f16_sw64_n64", "tpg_gemm_sm90tma_f16_sw64_n128", "tpg_gemm_sm90tma_f16_sw64_n256"}},
      {{"tpg_gemm_sm90tma_bf16_sw16_n64", "tpg_gemm_sm90tma_bf16_sw16_n128", NULL},
       {"tpg_gemm_sm90tma_bf16_sw32_n64", "tpg_gemm_sm90tma_bf16_sw32_n128", "tpg_gemm_sm90tma_bf16_sw32_n256"},
       {"tpg_gemm_sm90tma_bf16_sw64_n64", "tpg_gemm_sm90tma_bf16_sw64_n128", "tpg_gemm_sm90tma_bf16_sw64_n256"}}};
  static const char *const names_sw_c2[2][2][2] = {
      /* [bf16][bm 32, 64][bn 64, 128] */
      {{"tpg_gemm_sm90tma_f16_sw32_n64_c2", "tpg_gemm_sm90tma_f16_sw32_n128_c2"},
       {"tpg_gemm_sm90tma_f16_sw64_n64_c2", "tpg_gemm_sm90tma_f16_sw64_n128_c2"}},
      {{"tpg_gemm_sm90tma_bf16_sw32_n64_c2", "tpg_gemm_sm90tma_bf16_sw32_n128_c2"},
       {"tpg_gemm_sm90tma_bf16_sw64_n64_c2", "tpg_gemm_sm90tma_bf16_sw64_n128_c2"}}};
  static const char *const names_c2_m64[2][2] = {
      /* [bf16][bn == 128] */
      {"tpg_gemm_sm90tma_f16_m64_n64_c2", "tpg_gemm_sm90tma_f16_m64_n128_c2"},
      {"tpg_gemm_sm90tma_bf16_m64_n64_c2", "tpg_gemm_sm90tma_bf16_m64_n128_c2"}};
  static const char *const names_cn2[2][2][2] = {
      /* [bf16][bm == 64][bn == 128] */
      {{"tpg_gemm_sm90tma_f16_n64_cn2", "tpg_gemm_sm90tma_f16_n128_cn2"},
       {"tpg_gemm_sm90tma_f16_m64_n64_cn2", "tpg_gemm_sm90tma_f16_m64_n128_cn2"}},
      {{"tpg_gemm_sm90tma_bf16_n64_cn2", "tpg_gemm_sm90tma_bf16_n128_cn2"},
       {"tpg_gemm_sm90tma_bf16_m64_n64_cn2", "tpg_gemm_sm90tma_bf16_m64_n128_cn2"}}};
  static const char *const names_c2[2][3] = {
      /* [bf16][bn 256, 192, 128] */
      {"tpg_gemm_sm90tma_f16_c2", "tpg_gemm_sm90tma_f16_n192_c2", "tpg_gemm_sm90tma_f16_n128_c2"},
      {"tpg_gemm_sm90tma_bf16_c2", "tpg_gemm_sm90tma_bf16_n192_c2", "tpg_gemm_sm90tma_bf16_n128_c2"}};
  static const char *const names[2][2][4] = {
      /* [bf16][bm == 64][bn 256, 128, 64, 192 (bm 128 only)] */
      {{"tpg_gemm_sm90tma_f16", "tpg_gemm_sm90tma_f16_n128", "tpg_gemm_sm90tma_f16_n64", "tpg_gemm_sm90tma_f16_n192"},
       {"tpg_gemm_sm90tma_f16_m64", "tpg_gemm_sm90tma_f16_m64_n128", "tpg_gemm_sm90tma_f16_m64_n64", NULL}},
      {{"tpg_gemm_sm90tma_bf16", "tpg_gemm_sm90tma_bf16_n128", "tpg_gemm_sm90tma_bf16_n64", "tpg_gemm_sm90tma_bf16_n192"},
       {"tpg_gemm_sm90tma_bf16_m64", "tpg_gemm_sm90tma_bf16_m64_n128", "tpg_gemm_sm90tma_bf16_m64_n64", NULL}}};
  const int swiglu = epilogue == TPG_EPI_SWIGLU;
  /* units: what one cluster (one CTA when cl = 1) takes at a time */
  /* cn: the cluster's two CTAs take N-tiles 2u, 2u+1 of one M-tile (_cn2) */
  const int clm = cn ? 1 : cl, cln = cn ? cl : 1;
  const unsigned long tiles = tma_units(m, n, bm, bn, cl, cn, swiglu);
  /* what the grid divides: tiles, K-block iterations (stream-K), or with ks
   * K ranges a unit (aligned split-K: a grid of units * ks, so that every
   * CTA takes one range of one unit and the CTAs of one range index move
   * through K together; the caller keeps units * ks <= the resident units) */
  const unsigned long work = sk ? (ks ? tiles * (unsigned long)ks : tiles * cdiv(k, 64)) : tiles;
  const unsigned long clusters = (unsigned long)(num_sms / cl > 0 ? num_sms / cl : 1); /* resident at once */
  /* the kernel's ring: as many stages as fit 192 KB, at most 8; the 128-row
   * unswapped tiles stage their epilogue after it (gemm_sm90.cu cfg) */
  const int staged = !sw && bm == 128;
  const unsigned ring = staged ? TPG_SM90_STAGED_RING : 196608;
  const unsigned stage = (unsigned)(bm + bn) * 64 * 2, stages = ring / stage < 8 ? ring / stage : 8;
  memset(out, 0, sizeof *out);
  const int bi = dtype == TPG_KDT_BF16, swm = bm == 16 ? 0 : bm == 32 ? 1 : 2, swn = bn == 64 ? 0 : bn == 128 ? 1 : 2;
  out->kernel = sw && cl == 2 ? names_sw_c2[bi][bm == 64][bn == 128]
              : sw ? names_sw[bi][swm][swn]
              : cn ? names_cn2[dtype == TPG_KDT_BF16][bm == 64][bn == 128]
              : cl == 2 && bm == 64 ? names_c2_m64[dtype == TPG_KDT_BF16][bn == 128]
              : cl == 2 ? names_c2[dtype == TPG_KDT_BF16][bn == 256 ? 0 : bn == 192 ? 1 : 2]
                        : names[dtype == TPG_KDT_BF16][bm == 64][bn == 256 ? 0 : bn == 128 ? 1 : bn == 64 ? 2 : 3];
  out->grid[0] = kc ? (unsigned)(tiles * (unsigned long)ks) : (unsigned)(cl * (work < clusters ? work : clusters));
  out->cluster = kc ? (unsigned)ks : 0;
  out->grid[1] = out->grid[2] = 1;
  out->block[0] = 384;
  out->block[1] = out->block[2] = 1;
  out->smem_bytes = stages * stage + (staged ? SM90_EPI_BYTES : 0) + 1024 + 2 * stages * 8; /* 230464 (128 x 256) */
  /* partial slots are sized for 128-row tiles (tpg_sk_workspace_bytes); 64-row tiles use half */
  out->workspace_bytes = sk ? tpg_sk_workspace_bytes(tiles * cl, out->grid[0], (size_t)bn) : 0;
  out->workspace_zeroed = sk ? ((tiles * cl * 4 + 255) & ~(size_t)255) : 0;
  out->split_k = sk ? TPG_SPLITK_STREAM : kc ? TPG_SPLITK_CLUSTER : 1;
  {
    const unsigned long long xd[2] = {(unsigned long long)k, (unsigned long long)m};
    const unsigned long long xs[1] = {(unsigned long long)ldx * 2};
    const unsigned xb[2] = {64, (unsigned)(bm / cln)}; /* _cn2: each CTA loads half the X rows, multicast */
    fill_map(x_map, 2, xd, xs, xb);
  }
  if (swiglu) {
    /* 4-D view of W [2][n/8][8][k] walked as (k, row-in-8, half, block-of-8):
     * one box brings 8 gate rows then their 8 up rows, BN/16 times. */
    const unsigned long long wd[4] = {(unsigned long long)k, 8, 2, (unsigned long long)n / 8};
    const unsigned long long ws[3] = {(unsigned long long)ldw * 2, (unsigned long long)n * ldw * 2,
                                      (unsigned long long)8 * ldw * 2};
    const unsigned wb[4] = {64, 8, 2, (unsigned)bn / 16 / clm};
    fill_map(w_map, 4, wd, ws, wb);
  } else {
    const unsigned long long wd[2] = {(unsigned long long)k, (unsigned long long)n};
    const unsigned long long ws[1] = {(unsigned long long)ldw * 2};
    const unsigned wb[2] = {64, (unsigned)bn / clm};
    fill_map(w_map, 2, wd, ws, wb);
  }
}

/* 8 < m <= 16: the GEMV below this many W rows, the swapped 16-token tiles
 * from there (zoo_rules.py DEC_SW_W: the zoo fit said 7168, tpbench's graph
 * disagreed at 7168) */
#define TPG_DEC_SW_W 8192
/* zoo fit of the _c2 and BN 192 kernels (bench/zoo_rules.py EFF_LARGE, R3 run) */
#define EFF_C2_256 0.95
#define EFF_C2_128 1.05
#define EFF_N192 1.0
#define EFF_C2_192 0.9
/* aligned split-K's fix-up (zoo_rules.py K_FIX, fitted alone in session 6) */
#define K_FIX_MID 15.0
#define K_FIX_LARGE 20.0
/* stream-K's k-steps at 1 + SK_P of whole tiles' for m > 128 (zoo_rules.py SK_P, session 6) */
#define SK_P_LARGE 0.1
/* K over a cluster's fix-up (zoo_rules.py KC_FIX, fitted alone in session 7) */
#define KC_FIX_MID 10.0
#define KC_FIX_LARGE 10.0

static int check_tma_lds(int k, int ldx, int ldw, tpg_tma_encode *x_map, tpg_tma_encode *w_map, char *why,
                         size_t whylen) {
  if (!x_map || !w_map) return reject(why, whylen, "x_map/w_map are NULL");
  if (ldx < k || ldx % 8 || ldw < k || ldw % 8)
    return reject(why, whylen, "ldx/ldw must be multiples of 8 and >= k (16-byte tensor-map strides)");
  return 0;
}

/* The cost model above for one candidate (relative units). cl = 2: the _c2
 * kernels, units of two M-tiles, num_sms / 2 of them at once; cl = 3: the
 * _cn2 kernels, units of two N-tiles (2 BN W rows), num_sms / 2 at once. */
typedef struct tma_eff {
  int bm, bn, cl;
  double eff;
  int sw; /* swapped tiles (bm tokens); cl 2 with it: pairs of token tiles sharing W */
} tma_eff;
/* S of an aligned split-K candidate ("_k<S>", tpg_gemm_candidates): as many
 * K ranges a unit as the resident units allow, at most the K blocks and 16 */
static int ranges_of(unsigned long units, unsigned long slots, int k) {
  const unsigned long s = units ? slots / units : 0, kb = cdiv(k, 64);
  const unsigned long r = s < kb ? s : kb;
  return (int)(r < 16 ? r : 16);
}
/* Clusters of s CTAs (one CTA an SM) resident at once. The GPCs pack them,
 * so above s = 2 fewer than num_sms / s fit: on the H200 (132 SMs,
 * cudaOccupancyMaxActiveClusters, `gemm_bench --clusters`) 66 39 30 22 17
 * 15 15 for s = 2..8. Other SM counts: the same fraction of num_sms (a
 * guess: their GPCs were not measured). A "_kc<S>" grid larger than this
 * runs in two waves (1.5-1.6x the time in the first zoo run). */
static unsigned long kc_clusters(int s, int num_sms) {
  static const int h200[9] = {0, 132, 66, 39, 30, 22, 17, 15, 15};
  if (s < 1 || s > 8) return 0;
  return num_sms == 132 ? (unsigned long)h200[s] : (unsigned long)num_sms * (unsigned long)h200[s] / 132ul;
}
/* S of a K-over-a-cluster candidate ("_kc<S>"): the most K ranges (at most
 * 8, a portable cluster, and the K blocks) whose clusters all fit at once;
 * 0 when not even pairs do */
static int kc_ranges_of(unsigned long tiles, int num_sms, int k) {
  const int kb = (int)cdiv(k, 64);
  int s;
  for (s = kb < 8 ? kb : 8; s >= 2; --s)
    if (tiles <= kc_clusters(s, num_sms)) return s;
  return 0;
}
/* sk 2: aligned split-K, fix = the class's kfix; sk 3: K over a cluster,
 * fix = its kcfix; +inf-like (-1) when S < 2 */
static double tma_cost(int m, int wrows, int k, int num_sms, const tma_eff *e, int sk, double fix, double kk,
                       double skp) {
  const int pair = e->cl > 1 ? 2 : 1, slots = num_sms / pair > 0 ? num_sms / pair : 1;
  const double tiles = e->cl == 3 ? (double)cdiv(m, e->bm) * cdiv(wrows, 2L * e->bn)
                                  : (double)cdiv(m, (long)e->bm * pair) * cdiv(wrows, e->bn),
               kb = cdiv(k, 64), area = (double)e->bm * e->bn;
  if (sk == 2) {
    const int s = ranges_of((unsigned long)tiles, (unsigned long)slots, k);
    return s >= 2 ? (double)cdiv((long)kb, s) * area * e->eff + fix * area : -1.0;
  }
  if (sk == 3) {
    const int s = kc_ranges_of((unsigned long)tiles, num_sms, k);
    return s >= 2 ? (double)cdiv((long)kb, s) * area * e->eff + fix * area : -1.0;
  }
  if (sk)
    return tiles * kb / slots * area * e->eff * (1.0 + skp) + fix * area + (tiles < slots ? kk * kb * area * e->eff : 0.0);
  return (double)cdiv((long)tiles, slots) * kb * area * e->eff;
}

int tpg_gemm_select_tma(int m, int n, int k, int dtype, int epilogue, int sm_arch, int num_sms, int ldx,
                        int ldw, int streamk, tpg_kernel_launch *out, tpg_tma_encode *x_map, tpg_tma_encode *w_map,
                        char *why, size_t whylen) {
  /* zoo fit (bench/zoo_rules.py: EFF_SMALL, EFF_LARGE; table order breaks ties) */
  /* m <= 32 on its own (zoo_rules.py EFF_TINY): with 64-row tiles half of X is
   * zero fill and the 64 x 64 tile's fixed costs weigh more; sharing m <= 64's
   * constants picked 64 x 64 where 64 x 128 won most M = 32 shapes */
  /* cl 3: the _cn2 pairs (N-tiles sharing X); eff >= 9: never picked */
  /* sw 1: the swapped tiles (bm tokens x bn W rows; zoo_rules.py EFF_DEC and
   * the "sw" entries, fitted on the zoo run of commit 756c3fa); the entries
   * that fit never picked are left out */
  static const tma_eff dec[2] = {{16, 64, 1, 1.2, 1}, {16, 128, 1, 1.0, 1}};
  static const tma_eff tiny[7] = {{64, 256, 1, 0.6, 0}, {64, 128, 1, 0.6, 0}, {64, 64, 1, 1.4, 0}, {64, 128, 3, 9.0, 0},
                                  {64, 64, 3, 9.0, 0},  {32, 64, 1, 1.2, 1}, {32, 128, 1, 1.0, 1}};
  static const tma_eff small[7] = {{64, 256, 1, 0.6, 0}, {64, 128, 1, 0.6, 0},   {64, 64, 1, 0.8, 0},   {64, 128, 3, 9.0, 0},
                                   {64, 64, 3, 9.0, 0},  {32, 64, 1, 1.4, 1}, {64, 64, 1, 0.7, 1}};
  static const tma_eff large[9] = {{128, 256, 1, 1.0, 0},        {128, 128, 1, 1.15, 0},       {128, 64, 1, 1.4, 0},
                                   {64, 256, 1, 1.3, 0},         {64, 128, 1, 1.5, 0},         {128, 256, 2, EFF_C2_256, 0},
                                   {128, 128, 2, EFF_C2_128, 0}, {128, 192, 1, EFF_N192, 0}, {128, 192, 2, EFF_C2_192, 0}};
  /* 64 < m <= 128 (zoo_rules.py EFF_MID, refitted on the sm90b R3 zoo run): the
   * large table with 128 x 128 and its _c2 at 1.1 / 1.0, plus the 64-row _c2
   * pairs; the _cn2 pairs never paid (9.0) */
  /* (refitted with the swapped tiles: 128 x 128 1.1 -> 1.05, 64 x 128 1.5 ->
   * 1.3, its _c2 1.3 -> 1.1, fix 40 -> 30) */
  static const tma_eff mid[15] = {{128, 256, 1, 1.0, 0},      {128, 128, 1, 1.05, 0},     {128, 64, 1, 1.4, 0},
                                  {64, 256, 1, 1.3, 0},       {64, 128, 1, 1.3, 0},       {128, 256, 2, EFF_C2_256, 0},
                                  {128, 128, 2, 1.0, 0},      {128, 192, 1, EFF_N192, 0}, {128, 192, 2, EFF_C2_192, 0},
                                  {64, 128, 2, 1.1, 0},       {64, 64, 2, 2.0, 0},        {128, 128, 3, 9.0, 0},
                                  {128, 64, 3, 9.0, 0},       {64, 64, 1, 1.7, 1},     {64, 128, 1, 1.2, 1}};
  /* per class: table, entries, fix, kk, kfix, skp, kcfix (zoo_rules.py
   * SK_FIX, SK_K, K_FIX (< 0: no aligned split-K), SK_P, KC_FIX (< 0: no K
   * over a cluster)) */
  static const struct {
    const tma_eff *tab;
    int cnt;
    double fix, kk, kfix, skp, kcfix;
  } cls[5] = {{dec, 2, 40.0, 0.1, -1.0, 0.0, -1.0},
              {tiny, 7, 40.0, 0.1, -1.0, 0.0, -1.0},
              {small, 7, 20.0, 0.1, -1.0, 0.0, -1.0},
              {mid, 15, 30.0, 0.05, K_FIX_MID, 0.0, KC_FIX_MID},
              {large, 9, 40.0, 0.0, K_FIX_LARGE, SK_P_LARGE, KC_FIX_LARGE}};
  const int swiglu = epilogue == TPG_EPI_SWIGLU;
  int rc, i, s, bm = 0, bn = 0, sk = 0, cl = 1, sw = 0, ks = 0, kc = 0;
  double best = -1;
  if (x_map) memset(x_map, 0, sizeof *x_map);
  if (w_map) memset(w_map, 0, sizeof *w_map);
  rc = tpg_gemm_select(m, n, k, dtype, epilogue, sm_arch, num_sms, out, why, whylen);
  if (rc || sm_arch != 90 || m <= 8) return rc;
  if (num_sms < 1) num_sms = 1;
  {
    const long wrows = swiglu ? 2L * n : (long)n;
    if (m <= 16 && wrows < TPG_DEC_SW_W) return 0;                 /* the GEMV */
    if (m > 16 && m <= 32 && wrows <= 4096 && k < 8192) return 0; /* the GEMV */
    {
      const int ci = m <= 16 ? 0 : m <= 32 ? 1 : m <= 64 ? 2 : m <= 128 ? 3 : 4;
      const tma_eff *tab = cls[ci].tab;
      const int cnt = cls[ci].cnt;
      const double fix = cls[ci].fix, kk = cls[ci].kk, kfix = cls[ci].kfix, skp = cls[ci].skp, kcfix = cls[ci].kcfix;
      if (check_tma_lds(k, ldx, ldw, x_map, w_map, why, whylen)) return 1;
      for (i = 0; i < cnt; ++i) {
        if (tab[i].eff >= 9.0) continue;
        if (tab[i].bm == 64 && m > 256) continue;
        if (tab[i].cl == 2 && m <= tab[i].bm) continue; /* one M-tile: no pair to share W */
        if (tab[i].cl == 2 && (tab[i].bm == 64 || tab[i].sw) && swiglu) continue; /* not offered (tpg_gemm_select_variant) */
        if (tab[i].sw && ((tab[i].bm == 16 && m > 16) || (tab[i].bm == 32 && m > 64 && tab[i].cl != 2) ||
                          (tab[i].bm == 64 && m <= 32)))
          continue; /* the swapped candidates by M (tpg_gemm_candidates) */
        for (s = 0; s < 4; ++s) {
          double c;
          if ((streamk == 0 && s) || (streamk == 2 && s != 1)) continue;
          if (s == 2 && (kfix < 0 || tab[i].bm != 128 || tab[i].sw || tab[i].cl == 3))
            continue; /* aligned split-K: 128-row unswapped tiles and their _c2 (zoo_rules.py K_FIX) */
          if (s == 3 && (kcfix < 0 || tab[i].bm != 128 || tab[i].sw || tab[i].cl != 1))
            continue; /* K over a cluster: 128-row unswapped one-CTA tiles (zoo_rules.py KC_FIX) */
          if (tab[i].cl == 2 && tab[i].bm == 128 && !tab[i].sw && !s)
            continue; /* _c2 stream-K only (zoo_rules.py C2_SK_ONLY) */
          c = tma_cost(m, (int)wrows, k, num_sms, &tab[i], s, s == 2 ? kfix : s == 3 ? kcfix : fix, kk, skp);
          if (c < 0) continue;
          if (best < 0 || c < best) {
            best = c;
            bm = tab[i].bm;
            bn = tab[i].bn;
            cl = tab[i].cl;
            sw = tab[i].sw;
            sk = s;
          }
        }
      }
    }
    if (streamk == 0) sk = 0;
    if (streamk == 2) sk = 1;
    if (sk == 3) {
      ks = kc_ranges_of((unsigned long)cdiv(m, (long)bm) * cdiv(wrows, bn), num_sms, k);
      kc = 1;
      sk = 0;
    }
    if (sk == 2) {
      const int pair = cl == 2 ? 2 : 1;
      ks = ranges_of((unsigned long)cdiv(m, (long)bm * pair) * cdiv(wrows, bn),
                     (unsigned long)(num_sms / pair > 0 ? num_sms / pair : 1), k);
      sk = 1;
    }
    /* iteration counts are 32-bit in the kernel */
    if (sk && (unsigned long)cdiv(m, bm) * cdiv(wrows, bn) * (unsigned long)cdiv(k, 64) >= 0x7fffffffUL) sk = 0;
  }
  fill_tma(m, n, k, dtype, epilogue, num_sms, ldx, ldw, bm, bn, sk, ks, kc, cl > 1 ? 2 : 1, cl == 3, sw, out, x_map,
           w_map);
  return 0;
}

/* ---------------------------------------------------------------------------
 * Forced variants: the candidates a tuner times, and gemm_bench's A/B.
 * ------------------------------------------------------------------------- */
int tpg_gemm_variant_name(const tpg_gemm_variant *v, char *buf, size_t len) {
  int r;
  if (!v || !buf || !len) return 1;
  switch (v->kind) {
    case TPG_GEMM_VAR_HEURISTIC: r = snprintf(buf, len, "heuristic"); break;
    case TPG_GEMM_VAR_GEMV:
      r = v->split ? snprintf(buf, len, "gemv_s%d", v->split) : snprintf(buf, len, "gemv");
      break;
    case TPG_GEMM_VAR_GEMV_SK: r = snprintf(buf, len, "gemv_sk"); break;
    case TPG_GEMM_VAR_CUTLASS: return tpg_gemm_cutlass_variant_name(v, buf, len);
    case TPG_GEMM_VAR_TMA:
      if (v->kcluster)
        r = snprintf(buf, len, "tma_m%d_n%d_kc%d", v->bm, v->bn, v->split);
      else if (v->streamk && v->split)
        r = snprintf(buf, len, "tma_m%d_n%d%s%s_k%d", v->bm, v->bn, v->swap ? "_sw" : "",
                     v->cluster == 2 ? (v->cluster_n ? "_cn2" : "_c2") : "", v->split);
      else
        r = snprintf(buf, len, "tma_m%d_n%d%s%s%s", v->bm, v->bn, v->swap ? "_sw" : "",
                     v->cluster == 2 ? (v->cluster_n ? "_cn2" : "_c2") : "", v->streamk ? "_sk" : "");
      break;
    default: r = snprintf(buf, len, "?"); return 1;
  }
  return r < 0 || (size_t)r >= len;
}

/* A TMA name's tail: "" whole tiles, "_sk" stream-K, "_k<S>" S aligned K
 * ranges a unit (2..16, no leading zero), "_kc<S>" S K ranges over a
 * cluster (2..8; the caller checks the rest of the name allows it);
 * sets streamk, split and kcluster. */
static int parse_split(const char *rest, tpg_gemm_variant *v) {
  int s = 0, used = 0;
  v->streamk = 0;
  v->split = 0;
  v->kcluster = 0;
  if (rest[0] == '\0') return 0;
  if (!strncmp(rest, "_kc", 3) && rest[3] >= '2' && rest[3] <= '8' && rest[4] == '\0') {
    v->split = rest[3] - '0';
    v->kcluster = 1;
    return 0;
  }
  if (!strcmp(rest, "_sk")) {
    v->streamk = 1;
    return 0;
  }
  if (rest[0] == '_' && rest[1] == 'k' && rest[2] >= '1' && rest[2] <= '9' && sscanf(rest + 2, "%d%n", &s, &used) == 1 &&
      rest[2 + used] == '\0' && s >= 2 && s <= 16) {
    v->streamk = 1;
    v->split = s;
    return 0;
  }
  return 1;
}
int tpg_gemm_variant_parse(const char *s, tpg_gemm_variant *v) {
  int bm = 0, bn = 0, used = 0;
  if (!s || !v) return 1;
  memset(v, 0, sizeof *v);
  if (!strcmp(s, "heuristic")) { v->kind = TPG_GEMM_VAR_HEURISTIC; return 0; }
  if (!strcmp(s, "gemv")) { v->kind = TPG_GEMM_VAR_GEMV; return 0; }
  if (sscanf(s, "gemv_s%d%n", &bm, &used) == 1 && s[used] == '\0' && bm >= 1 && bm <= TPG_GEMV_MAX_SPLITS &&
      s[6] >= '1' && s[6] <= '9') {
    v->kind = TPG_GEMM_VAR_GEMV;
    v->split = bm;
    return 0;
  }
  if (!strcmp(s, "gemv_sk")) { v->kind = TPG_GEMM_VAR_GEMV_SK; return 0; }
  if (!strncmp(s, "cutlass_", 8)) return tpg_gemm_cutlass_variant_parse(s, v);
  if (sscanf(s, "tma_m%d_n%d%n", &bm, &bn, &used) == 2 && !strncmp(s + used, "_sw", 3)) {
    const char *rest = s + used + 3;
    const int c2 = !strncmp(rest, "_c2", 3);
    if (c2) rest += 3;
    if ((bm != 16 && bm != 32 && bm != 64) || (bn != 64 && bn != 128 && bn != 256) || (bm == 16 && bn == 256)) return 1;
    if (c2 && (bm == 16 || bn == 256)) return 1;
    if (parse_split(rest, v) || v->kcluster) return 1;
    v->kind = TPG_GEMM_VAR_TMA;
    v->bm = bm;
    v->bn = bn;
    v->swap = 1;
    v->cluster = c2 ? 2 : 0;
    return 0;
  }
  if (sscanf(s, "tma_m%d_n%d%n", &bm, &bn, &used) == 2 && (bm == 64 || bm == 128) &&
      (bn == 64 || bn == 128 || bn == 256 || (bn == 192 && bm == 128))) {
    const char *rest = s + used;
    const int c2 = !strncmp(rest, "_c2", 3), cn2 = !strncmp(rest, "_cn2", 4);
    if (c2) rest += 3;
    if (cn2) rest += 4;
    if (c2 && (bm != 128 || bn == 64) && !(bm == 64 && (bn == 64 || bn == 128))) return 1;
    if (cn2 && bn != 64 && bn != 128) return 1;
    if (parse_split(rest, v)) return 1;
    if (v->kcluster && (c2 || cn2 || bm != 128)) return 1;
    v->kind = TPG_GEMM_VAR_TMA;
    v->bm = bm;
    v->bn = bn;
    v->cluster = c2 || cn2 ? 2 : 0;
    v->cluster_n = cn2;
    return 0;
  }
  return 1;
}

int tpg_gemm_select_variant(int m, int n, int k, int dtype, int epilogue, int sm_arch, int num_sms, int ldx, int ldw,
                            const tpg_gemm_variant *v, tpg_kernel_launch *out, tpg_tma_encode *x_map,
                            tpg_tma_encode *w_map, char *why, size_t whylen) {
  char buf[160];
  int rc;
  if (!v) return reject(why, whylen, "variant is NULL");
  if (v->kind == TPG_GEMM_VAR_HEURISTIC)
    return tpg_gemm_select_tma(m, n, k, dtype, epilogue, sm_arch, num_sms, ldx, ldw, 1, out, x_map, w_map, why,
                               whylen);
  if (x_map) memset(x_map, 0, sizeof *x_map);
  if (w_map) memset(w_map, 0, sizeof *w_map);
  /* the shape, dtype and architecture rules first, with their messages */
  rc = tpg_gemm_select(m, n, k, dtype, epilogue, sm_arch, num_sms, out, why, whylen);
  if (rc) return rc;
  if (num_sms < 1) num_sms = 1;
  switch (v->kind) {
    case TPG_GEMM_VAR_GEMV: {
      const gemv_cfg *c = gemv_config(m, n, epilogue == TPG_EPI_SWIGLU);
      const int kc = (int)cdiv(k, 32);
      int splits = v->split;
      if (m > 64) {
        snprintf(buf, sizeof buf, "m=%d: the gemv variant needs m <= 64", m);
        return reject(why, whylen, buf);
      }
      if (splits < 0 || splits > TPG_GEMV_MAX_SPLITS || splits > kc) {
        snprintf(buf, sizeof buf, "variant gemv_s%d: K ranges must be 1..%d and at most the %d 32-wide chunks of k=%d",
                 splits, TPG_GEMV_MAX_SPLITS, kc, k);
        return reject(why, whylen, buf);
      }
      if (!splits) splits = gemv_splits(c, gemv_tiles(c, n, epilogue == TPG_EPI_SWIGLU), k, num_sms);
      memset(out, 0, sizeof *out);
      gemv_fill(m, n, dtype, epilogue, splits, out);
      break;
    }
    case TPG_GEMM_VAR_GEMV_SK: {
      /* m <= 16: the stream-K twin (MT, R as below; grid = CTAs/SM x SMs) */
      const int swiglu = epilogue == TPG_EPI_SWIGLU;
      const int v16 = m > 8, bf16 = dtype == TPG_KDT_BF16, r = v16 ? 2 : 1, mt = v16 ? 2 : 1;
      const size_t tiles = cdiv(n, (swiglu ? 8 : 16) * r);
      if (m > 16) {
        snprintf(buf, sizeof buf, "m=%d: the gemv_sk variant needs m <= 16", m);
        return reject(why, whylen, buf);
      }
      memset(out, 0, sizeof *out);
      out->grid[1] = out->grid[2] = out->block[1] = out->block[2] = 1;
      out->split_k = 1;
      out->block[0] = v16 ? 512 : 256;
      out->kernel = v16 ? (bf16 ? "tpg_gemv_sk_bf16_m16" : "tpg_gemv_sk_f16_m16")
                        : (bf16 ? "tpg_gemv_sk_bf16_m8" : "tpg_gemv_sk_f16_m8");
      out->grid[0] = (unsigned)(v16 ? num_sms : 2 * num_sms);
      /* counters (zero at allocation; the kernel leaves them zero) + fp32 partials, which it adds into */
      out->workspace_bytes = ((tiles * 4 + 255) & ~(size_t)255) + tiles * (size_t)(r * mt * 4 * 32 * 4);
      out->workspace_zeroed = out->workspace_bytes;
      break;
    }
    case TPG_GEMM_VAR_TMA: {
      const int swiglu = epilogue == TPG_EPI_SWIGLU;
      unsigned long tiles;
      if (sm_arch != 90) {
        snprintf(buf, sizeof buf, "sm_arch=%d: TMA variants need sm_90 (wgmma, sm_90a image)", sm_arch);
        return reject(why, whylen, buf);
      }
      const int cl = v->cluster == 2 ? 2 : 1;
      if (v->swap) {
        if ((v->bm != 16 && v->bm != 32 && v->bm != 64) || (v->bn != 64 && v->bn != 128 && v->bn != 256) ||
            (v->bm == 16 && v->bn == 256))
          return reject(why, whylen, "variant swap: bm must be 16, 32 or 64 and bn 64, 128 or 256 (not 16 x 256)");
        if (v->cluster_n) return reject(why, whylen, "variant swap: no cluster_n (the pairs share W, not X)");
        if (cl == 2 && (v->bm == 16 || v->bn == 256))
          return reject(why, whylen, "variant swap with cluster 2: bm 32 or 64, bn 64 or 128");
        if (cl == 2 && epilogue == TPG_EPI_SWIGLU)
          return reject(why, whylen, "variant swap with cluster 2: not offered with SwiGLU (as the 64-row _c2)");
      } else if ((v->bm != 64 && v->bm != 128) || (v->bn != 64 && v->bn != 128 && v->bn != 256 && v->bn != 192) ||
                 (v->bn == 192 && v->bm != 128))
        return reject(why, whylen, "variant: bm must be 64 or 128, bn 64, 128 or 256 (or 192 with bm 128)");
      if (v->cluster != 0 && v->cluster != 1 && v->cluster != 2)
        return reject(why, whylen, "variant: cluster must be 1 or 2");
      if (!v->swap && cl == 2 && !v->cluster_n && (v->bm != 128 || v->bn == 64) && !(v->bm == 64 && v->bn != 256))
        return reject(why, whylen, "variant: cluster 2 needs bm 128 and bn 256, 192 or 128, or bm 64 and bn 128 or 64");
      if (!v->swap && cl == 2 && !v->cluster_n && v->bm == 64 && epilogue == TPG_EPI_SWIGLU)
        return reject(why, whylen,
                      "variant: 64-row _c2 with SwiGLU is not offered (tma_m64_n64_c2_sk gave NaN outputs at "
                      "255 x 1096 x 776 on the GPU check, cause not found)");
      if (v->cluster_n && (cl != 2 || (v->bn != 64 && v->bn != 128)))
        return reject(why, whylen, "variant: cluster_n needs cluster 2 and bn 64 or 128");
      if (check_tma_lds(k, ldx, ldw, x_map, w_map, why, whylen)) return 1;
      tiles = (unsigned long)cdiv(m, v->bm) * cdiv(n, swiglu ? v->bn / 2 : v->bn);
      if (v->streamk && tiles * (unsigned long)cdiv(k, 64) >= 0x7fffffffUL)
        return reject(why, whylen, "variant: stream-K iteration count exceeds 2^31");
      if (v->kcluster) {
        /* K over a cluster: S CTAs a 128-row tile, one K range each */
        if (v->bm != 128 || cl != 1 || v->swap || v->streamk) {
          snprintf(buf, sizeof buf, "variant kcluster: bm 128 without cluster, swap or stream-K (got bm %d)", v->bm);
          return reject(why, whylen, buf);
        }
        if (v->split < 2 || v->split > 8 || v->split > (int)cdiv(k, 64)) {
          snprintf(buf, sizeof buf, "variant split=%d with kcluster: 2..8 K ranges (a portable cluster), at most the %u K blocks of k=%d",
                   v->split, cdiv(k, 64), k);
          return reject(why, whylen, buf);
        }
        if (tiles * (unsigned long)cdiv(k, 64) >= 0x7fffffffUL)
          return reject(why, whylen, "variant kcluster: tiles x K blocks exceeds 2^31 (32-bit iterations in the kernel)");
      } else if (v->split) {
        /* aligned split-K: every CTA one K range of one unit, all resident at once */
        const unsigned long units = tma_units(m, n, v->bm, v->bn, cl, v->cluster_n != 0, swiglu),
                            slots = (unsigned long)(num_sms / cl > 0 ? num_sms / cl : 1);
        if (!v->streamk || v->split < 2 || v->split > 16 || v->split > (int)cdiv(k, 64)) {
          snprintf(buf, sizeof buf, "variant split=%d: K ranges need stream-K and 2..16, at most the %u K blocks of k=%d",
                   v->split, cdiv(k, 64), k);
          return reject(why, whylen, buf);
        }
        if (units * (unsigned long)v->split > slots) {
          snprintf(buf, sizeof buf, "variant split=%d: %lu units x %d ranges exceed the %lu resident at once",
                   v->split, units, v->split, slots);
          return reject(why, whylen, buf);
        }
      }
      fill_tma(m, n, k, dtype, epilogue, num_sms, ldx, ldw, v->bm, v->bn, v->streamk != 0, v->split, v->kcluster != 0, cl,
               v->cluster_n != 0, v->swap != 0, out, x_map, w_map);
      break;
    }
    case TPG_GEMM_VAR_CUTLASS:
      if (tpg_gemm_cutlass_select(m, n, k, dtype, epilogue, sm_arch, num_sms, ldx, ldw, v, out, why, whylen)) return 1;
      break;
    default:
      snprintf(buf, sizeof buf, "variant kind=%d: unknown", v->kind);
      return reject(why, whylen, buf);
  }
  if (why && whylen) why[0] = '\0';
  return 0;
}

/* Candidates by M (sm_90; other architectures have one kernel family):
 *   m <= 16: both decode GEMVs, 64-row TMA tiles at BN 128 / 64 (weight
 *            streaming through TMA), each whole-tile or stream-K;
 *   m <= 64: the GEMV, 64-row TMA tiles at BN 256 / 128 / 64, and 128-row
 *            BN 128;
 *   m > 64:  128-row tiles at BN 256 / 128 / 64, and 64-row tiles at BN 256
 *            / 128 while m <= 256;
 * plus the swapped tiles at m <= 128 (below); each TMA tile size also with
 * stream-K when its tiles leave the last wave partial (tiles % num_sms != 0).
 * The heuristic's own choice comes first. */
int tpg_gemm_candidates(int m, int n, int k, int epilogue, int sm_arch, int num_sms, tpg_gemm_variant *list,
                        int cap) {
  int cnt = 0;
  const int swiglu = epilogue == TPG_EPI_SWIGLU;
  if (num_sms < 1) num_sms = 1;
#define TPG_ADD_C(K_, BM_, BN_, SK_, CL_)                                              \
  do {                                                                                 \
    if (cnt < cap && list) {                                                           \
      list[cnt].kind = (K_); list[cnt].bm = (BM_); list[cnt].bn = (BN_); list[cnt].streamk = (SK_); \
      list[cnt].split = 0;                                                             \
      list[cnt].kcluster = 0;                                                          \
      list[cnt].cluster = (CL_) ? 2 : 0;                                               \
      list[cnt].cluster_n = (CL_) == 3;                                                \
      list[cnt].swap = 0;                                                              \
      list[cnt].cutlass = 0;                                                           \
    }                                                                                  \
    ++cnt;                                                                             \
  } while (0)
#define TPG_ADD(K_, BM_, BN_, SK_) TPG_ADD_C(K_, BM_, BN_, SK_, 0)
  /* aligned split-K (128-row tiles, m > 64) with ranges_of's S, where it is >= 2 */
#define TPG_ADD_KS(BM_, BN_, CL_, UNITS_, SLOTS_)                                      \
  do {                                                                                 \
    const int s_ = ranges_of((UNITS_), (SLOTS_), k);                                   \
    if (s_ >= 2) {                                                                     \
      TPG_ADD_C(TPG_GEMM_VAR_TMA, BM_, BN_, 1, CL_);                                   \
      if (cnt <= cap && list) list[cnt - 1].split = s_;                                \
    }                                                                                  \
  } while (0)
  TPG_ADD(TPG_GEMM_VAR_HEURISTIC, 0, 0, 0);
  if (sm_arch != 90 || m < 1) return cnt < cap ? cnt : cap;
  /* the CUTLASS family's, right after the heuristic (family.c) */
  {
    tpg_gemm_variant cv[16];
    const int nc = tpg_gemm_cutlass_candidates(m, n, k, epilogue, sm_arch, num_sms, cv, 16);
    int ci;
    for (ci = 0; ci < nc; ++ci) {
      if (cnt < cap && list) list[cnt] = cv[ci];
      ++cnt;
    }
  }
  if (m <= 64) {
    /* the GEMV with the rule's K ranges, and with half and twice as many */
    const gemv_cfg *c = gemv_config(m, n, swiglu);
    const int s = gemv_splits(c, gemv_tiles(c, n, swiglu), k, num_sms), kc = (int)cdiv(k, 32);
    TPG_ADD(TPG_GEMM_VAR_GEMV, 0, 0, 0);
    if (s / 2 >= 1) {
      TPG_ADD(TPG_GEMM_VAR_GEMV, 0, 0, 0);
      if (cnt <= cap && list) list[cnt - 1].split = s / 2;
    }
    if (2 * s <= TPG_GEMV_MAX_SPLITS && 2 * s <= kc) {
      TPG_ADD(TPG_GEMM_VAR_GEMV, 0, 0, 0);
      if (cnt <= cap && list) list[cnt - 1].split = 2 * s;
    }
    if (m <= 16) TPG_ADD(TPG_GEMM_VAR_GEMV_SK, 0, 0, 0);
  }
  {
    static const int bms[2] = {128, 64}, bns[4] = {256, 192, 128, 64};
    int i, j;
    for (i = 0; i < 2; ++i)
      for (j = 0; j < 4; ++j) {
        const int bm = bms[i], bn = bns[j];
        unsigned long tiles;
        if (bn == 192 && (bm != 128 || m <= 64)) continue; /* a 128-row-tile width for prefill */
        if (m <= 16 && (bm != 64 || bn == 256)) continue;
        if (m > 16 && m <= 64 && bm == 128 && bn != 128) continue;
        if (m > 64 && bm == 64 && (m > 256 || bn == 64)) continue;
        tiles = (unsigned long)cdiv(m, bm) * cdiv(n, swiglu ? bn / 2 : bn);
        TPG_ADD(TPG_GEMM_VAR_TMA, bm, bn, 0);
        if (tiles % (unsigned long)num_sms) TPG_ADD(TPG_GEMM_VAR_TMA, bm, bn, 1);
        if (bm == 128 && m > 64) TPG_ADD_KS(bm, bn, 0, tiles, (unsigned long)num_sms);
        if (bm == 128 && m > 64) {
          /* K over a cluster of S (ranges_of's S, at most 8: a portable cluster) */
          const int s_ = kc_ranges_of(tiles, num_sms, k);
          if (s_ >= 2) {
            TPG_ADD(TPG_GEMM_VAR_TMA, bm, bn, 0);
            if (cnt <= cap && list) {
              list[cnt - 1].split = s_;
              list[cnt - 1].kcluster = 1;
            }
          }
        }
      }
    /* clusters of two along M: only with at least two 128-row M-tiles */
    if (m > 128)
      for (j = 0; j < 3; ++j) {
        const int bn = bns[j];
        const unsigned long units = (unsigned long)cdiv(m, 256) * cdiv(n, swiglu ? bn / 2 : bn);
        TPG_ADD_C(TPG_GEMM_VAR_TMA, 128, bn, 0, 2);
        if (units % (unsigned long)(num_sms / 2 > 0 ? num_sms / 2 : 1)) TPG_ADD_C(TPG_GEMM_VAR_TMA, 128, bn, 1, 2);
        TPG_ADD_KS(128, bn, 2, units, (unsigned long)(num_sms / 2 > 0 ? num_sms / 2 : 1));
      }
    /* 64-row M-tile pairs sharing W (64 < m <= 256; not with SwiGLU: see
     * tpg_gemm_select_variant) */
    if (m > 64 && m <= 256 && !swiglu)
      for (j = 2; j < 4; ++j) {
        const int bn = bns[j];
        const unsigned long units = (unsigned long)cdiv(m, 128) * cdiv(n, swiglu ? bn / 2 : bn);
        TPG_ADD_C(TPG_GEMM_VAR_TMA, 64, bn, 0, 2);
        if (units % (unsigned long)(num_sms / 2 > 0 ? num_sms / 2 : 1)) TPG_ADD_C(TPG_GEMM_VAR_TMA, 64, bn, 1, 2);
      }
    /* clusters of two along N sharing X (_cn2, CL_ 3): narrow tiles at small M,
     * where every N-tile re-reads the X tile from L2 */
    if (m > 16 && m <= 256)
      for (j = 2; j < 4; ++j) {
        const int bn = bns[j], bm = m <= 64 ? 64 : 128;
        const unsigned long units = (unsigned long)cdiv(m, bm) * cdiv(n, (swiglu ? bn / 2 : bn) * 2L);
        TPG_ADD_C(TPG_GEMM_VAR_TMA, bm, bn, 0, 3);
        if (units % (unsigned long)(num_sms / 2 > 0 ? num_sms / 2 : 1)) TPG_ADD_C(TPG_GEMM_VAR_TMA, bm, bn, 1, 3);
      }
    /* swapped tiles (tokens as the wgmma N side, "_sw"), m <= 128: 16-token
     * tiles at m <= 16, 32 at 17..64, 64 above 32; the _c2 pairs of 32- or
     * 64-token tiles sharing W wherever there are two token tiles (m > BM; not
     * with SwiGLU: tpg_gemm_select_variant) */
    if (m <= 128) {
      static const int sbm[3] = {16, 32, 64};
      const int spairs = num_sms / 2 > 0 ? num_sms / 2 : 1;
      for (i = 0; i < 3; ++i)
        for (j = 0; j < 3; ++j) {
          const int bm = sbm[i], bn = bns[j == 0 ? 3 : j == 1 ? 2 : 0]; /* 64, 128, 256 */
          unsigned long tiles;
          int c;
          if ((bm == 16 && (m > 16 || bn == 256)) || (bm == 32 && (m <= 16 || m > 128)) || (bm == 64 && m <= 32))
            continue;
          tiles = (unsigned long)cdiv(m, bm) * cdiv(n, swiglu ? bn / 2 : bn);
          for (c = 0; c < 2; ++c) {
            const int cl = c ? 2 : 1;
            unsigned long units;
            if (c && (swiglu || bm == 16 || bn == 256 || m <= bm)) continue; /* a pair needs two token tiles */
            if (!c && bm == 32 && m > 64) continue; /* four token tiles: only as pairs */
            units = c ? (unsigned long)cdiv(m, 2L * bm) * cdiv(n, swiglu ? bn / 2 : bn) : tiles;
            TPG_ADD_C(TPG_GEMM_VAR_TMA, bm, bn, 0, c);
            if (cnt <= cap && list) list[cnt - 1].swap = 1;
            if (units % (unsigned long)(cl == 2 ? spairs : num_sms)) {
              TPG_ADD_C(TPG_GEMM_VAR_TMA, bm, bn, 1, c);
              if (cnt <= cap && list) list[cnt - 1].swap = 1;
            }
          }
        }
    }
  }
#undef TPG_ADD
#undef TPG_ADD_KS
#undef TPG_ADD_C
  return cnt < cap ? cnt : cap;
}
