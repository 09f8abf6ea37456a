/* ours_launch.c - our GEMM kernels' launches: the plain choice per
 * architecture (tpg_gemm_select) and the launch of a TMA tile.
 *
 * Selection table (constants mirror the kernels; keep them in step):
 *
 *   rule                        kernel                      grid                         block  smem
 *   m <= 8                      tpg_gemv_<dt>_m8 (W rows      (tiles, S), tiles =          256    0
 *                               < 4608) or _m8w4              ceil(n / 16)                 128
 *   m <= 16                     tpg_gemv_<dt>_m16w4 (W rows     [SWIGLU ceil(n / 8)];        128    0
 *                               < 9216) or _m16               S = tpg_ours_gemv_splits() (below)    256
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
#include "lib/gemm/ours.h"

#include <stdio.h>
#include <string.h>

#include "kernels/tpg_kargs.h"
#include "lib/gemm/ours_impl.h"

/* The epilogue staging of the 128-row TMA kernels, after their ring
 * (kernels/gemm/sm90_tma.cu cfg::EPI_BYTES: two consumers x 4 boxes of 64 x 32
 * elements), and their ring (cfg::RING) */
#define SM90_EPI_BYTES (2 * 4 * 64 * 32 * 2)
#ifndef TPG_SM90_STAGED_RING
#define TPG_SM90_STAGED_RING 196608
#endif

/* The decode GEMV's configurations (kernels/gemm/gemv.cu entry points
 * tpg_gemv_<dt>_m8, _m8w4, _m16, _m16w4, _m32, _m64; keep in step): X rows
 * per mma tile / 8 (MT), 16-row W tiles per CTA (R), warps (KW), CTAs per SM
 * (occ, from __launch_bounds__ and ptxas -v). */
static const gemv_cfg kGemv[6] = {
    {1, 1, 8, 2, "tpg_gemv_bf16_m8", "tpg_gemv_f16_m8", "tpg_gemv_bf16_m8_xn", "tpg_gemv_f16_m8_xn"},
    {1, 1, 4, 4, "tpg_gemv_bf16_m8w4", "tpg_gemv_f16_m8w4", "tpg_gemv_bf16_m8w4_xn", "tpg_gemv_f16_m8w4_xn"},
    {2, 1, 8, 3, "tpg_gemv_bf16_m16", "tpg_gemv_f16_m16", "tpg_gemv_bf16_m16_xn", "tpg_gemv_f16_m16_xn"},
    {2, 1, 4, 4, "tpg_gemv_bf16_m16w4", "tpg_gemv_f16_m16w4", "tpg_gemv_bf16_m16w4_xn", "tpg_gemv_f16_m16w4_xn"},
    {4, 1, 8, 2, "tpg_gemv_bf16_m32", "tpg_gemv_f16_m32", NULL, NULL},
    {8, 1, 8, 2, "tpg_gemv_bf16_m64", "tpg_gemv_f16_m64", NULL, NULL},
};
/* Which configuration: by M class, and at M <= 16 by the W rows (2N with
 * SwiGLU): the 4-warp CTAs from 4608 W rows at M <= 8, below 9216 at
 * M <= 16 (fitted with bench/gemv_lab on the zoo's decode shapes:
 * docs/gemm.md, "The decode GEMV"). */
const gemv_cfg *tpg_ours_gemv_config(int m, int n, int swiglu) {
  const long wrows = swiglu ? 2L * n : (long)n;
  if (m <= 8) return &kGemv[wrows < 4608 ? 0 : 1];
  if (m <= 16) return &kGemv[wrows < 9216 ? 3 : 2];
  return &kGemv[m <= 32 ? 4 : 5];
}
unsigned tpg_ours_gemv_tiles(const gemv_cfg *c, int n, int swiglu) { return cdiv(n, (swiglu ? 8 : 16) * c->r); }

/* How many K ranges (S) the GEMV splits each row tile into: the fewest that
 * give the grid at least GEMV_FILL waves of CTAs on the machine, while every
 * CTA keeps at least GEMV_MIN_CHUNKS 32-wide K chunks (below that the split's
 * fixed costs, a slot write, a counter and the last CTA's sum, outweigh what
 * it streams); at most TPG_GEMV_MAX_SPLITS. Fitted on the same data:
 * splitting pays only when the row tiles fill less than half the CTA slots
 * (small N). */
#define GEMV_FILL 0.5
#define GEMV_MIN_CHUNKS 32
int tpg_ours_gemv_splits(const gemv_cfg *c, unsigned tiles, int k, int num_sms) {
  const double want = GEMV_FILL * c->occ * num_sms;
  const int kc = (int)cdiv(k, 32);
  int s = 1;
  while (s < TPG_GEMV_MAX_SPLITS && (double)tiles * s < want && kc / (s + 1) >= GEMV_MIN_CHUNKS) ++s;
  return s;
}

/* Fill `out` for the GEMV with S K ranges (the _xn entry point when p
 * normalizes x: tpg_gemm_problem_check keeps m <= TPG_FOLD_MAX_M there). */
void tpg_ours_gemv_fill(const tpg_gemm_problem *p, int splits, tpg_kernel_launch *out) {
  const int swiglu = p->epilogue == TPG_EPI_SWIGLU, bf16 = p->dtype == TPG_KDT_BF16;
  const int xn = (p->fold & TPG_GEMM_FOLD_XNORM) != 0;
  memset(out, 0, sizeof *out);
  out->family = TPG_GEMM_FAMILY_OURS;
  const gemv_cfg *c = tpg_ours_gemv_config(p->m, p->n, swiglu);
  const size_t tiles = tpg_ours_gemv_tiles(c, p->n, swiglu);
  out->kernel = xn ? (bf16 ? c->bf16_xn : c->f16_xn) : (bf16 ? c->bf16 : c->f16);
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

int tpg_gemm_select(const tpg_gemm_problem *p, tpg_kernel_launch *out, char *why, size_t whylen) {
  if (!out) return tpg_gemm_reject(why, whylen, "out is NULL");
  if (tpg_gemm_problem_check(p, why, whylen)) return 1;
  const int m = p->m, n = p->n, bf16 = p->dtype == TPG_KDT_BF16, swiglu = p->epilogue == TPG_EPI_SWIGLU;
  const int num_sms = tpg_ours_sms(p);
  memset(out, 0, sizeof *out);
  out->family = TPG_GEMM_FAMILY_OURS;
  out->block[1] = out->block[2] = 1;
  out->grid[1] = out->grid[2] = 1;
  out->split_k = 1;
  if (m <= 64) {
    const gemv_cfg *c = tpg_ours_gemv_config(m, n, swiglu);
    tpg_ours_gemv_fill(p, tpg_ours_gemv_splits(c, tpg_ours_gemv_tiles(c, n, swiglu), p->k, num_sms), out);
  } else if (p->arch == 90) {
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

static void fill_map(tpg_tma_encode *e, int rank, const unsigned long long *dims, const unsigned long long *strides,
                     const unsigned *box) {
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

/* What one CTA (cl 1) or cluster (cl 2) of the TMA kernel takes at a time:
 * tiles, M-tile pairs (_c2) or, with cn, N-tile pairs (_cn2) */
unsigned long tpg_ours_tma_units(int m, int n, int bm, int bn, int cl, int cn, int swiglu) {
  const int clm = cn ? 1 : cl, cln = cn ? cl : 1;
  return (unsigned long)cdiv(m, (long)bm * clm) * cdiv(n, (long)(swiglu ? bn / 2 : bn) * cln);
}

/* The TMA kernel of a tile (kernels/gemm/sm90_tma.cu entry points; keep in step). */
static const char *tma_kernel(int dtype, const tpg_ours_tile *t) {
  /* swapped tiles (SW): [bf16][bm 16, 32, 64][bn 64, 128, 256], and the _c2 pairs */
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
  const int bi = dtype == TPG_KDT_BF16, bm = t->bm, bn = t->bn;
  const int swm = bm == 16 ? 0 : bm == 32 ? 1 : 2, swn = bn == 64 ? 0 : bn == 128 ? 1 : 2;
  if (t->sw) return t->cl == 2 ? names_sw_c2[bi][bm == 64][bn == 128] : names_sw[bi][swm][swn];
  if (t->cn) return names_cn2[bi][bm == 64][bn == 128];
  if (t->cl == 2) return bm == 64 ? names_c2_m64[bi][bn == 128] : names_c2[bi][bn == 256 ? 0 : bn == 192 ? 1 : 2];
  return names[bi][bm == 64][bn == 256 ? 0 : bn == 128 ? 1 : bn == 64 ? 2 : 3];
}

/* The two map recipes of a tile: X's box of BM rows (_cn2: half of them per
 * CTA, multicast), W's of BN rows (_c2: half per CTA); with SwiGLU a 4-D view
 * of W [2][n/8][8][k] walked as (k, row-in-8, half, block-of-8): one box
 * brings 8 gate rows then their 8 up rows, BN/16 times. */
static void tma_maps(const tpg_gemm_problem *p, const tpg_ours_tile *t, tpg_tma_encode *x_map, tpg_tma_encode *w_map) {
  const int clm = t->cn ? 1 : t->cl, cln = t->cn ? t->cl : 1;
  const unsigned long long k = (unsigned long long)p->k, n = (unsigned long long)p->n;
  const unsigned long long xd[2] = {k, (unsigned long long)p->m}, xs[1] = {(unsigned long long)p->ldx * 2};
  const unsigned xb[2] = {64, (unsigned)(t->bm / cln)};
  fill_map(x_map, 2, xd, xs, xb);
  if (p->epilogue == TPG_EPI_SWIGLU) {
    const unsigned long long wd[4] = {k, 8, 2, n / 8};
    const unsigned long long ws[3] = {(unsigned long long)p->ldw * 2, n * (unsigned long long)p->ldw * 2,
                                      8ull * (unsigned long long)p->ldw * 2};
    const unsigned wb[4] = {64, 8, 2, (unsigned)t->bn / 16 / clm};
    fill_map(w_map, 4, wd, ws, wb);
  } else {
    const unsigned long long wd[2] = {k, n}, ws[1] = {(unsigned long long)p->ldw * 2};
    const unsigned wb[2] = {64, (unsigned)t->bn / clm};
    fill_map(w_map, 2, wd, ws, wb);
  }
}

/* Fill `out` and the two map descriptions for the TMA kernel with BM x BN
 * tiles (whole tiles, or stream-K over min(tiles * K blocks, num_sms) CTAs).
 * cl = 2: the _c2 kernels, clusters of two CTAs on M-tile pairs ("units")
 * sharing the W tile by multicast; each CTA loads half of the W box, the
 * grid is twice the clusters (even), and the stream-K workspace covers
 * 2 * units tiles. kc (with ks >= 2, cl 1, bm 128): the ks K ranges of a
 * tile are a launch-time cluster of ks CTAs (TPG_SPLITK_CLUSTER): grid
 * tiles * ks, whatever fits at once (clusters do not wait for each other).
 * The caller has checked the shape and the leading dimensions. */
void tpg_ours_fill_tma(const tpg_gemm_problem *p, const tpg_ours_tile *t, tpg_kernel_launch *out,
                       tpg_tma_encode *x_map, tpg_tma_encode *w_map) {
  const int num_sms = tpg_ours_sms(p), cl = t->cl, sk = t->sk, ks = t->ks, kc = t->kc;
  const unsigned long tiles = tpg_ours_tma_units(p->m, p->n, t->bm, t->bn, cl, t->cn, p->epilogue == TPG_EPI_SWIGLU);
  /* what the grid divides: tiles, K-block iterations (stream-K), or with ks
   * K ranges a unit (aligned split-K: a grid of units * ks, so that every
   * CTA takes one range of one unit and the CTAs of one range index move
   * through K together; the caller keeps units * ks <= the resident units) */
  const unsigned long work = sk ? (ks ? tiles * (unsigned long)ks : tiles * cdiv(p->k, 64)) : tiles;
  const unsigned long clusters = (unsigned long)(num_sms / cl > 0 ? num_sms / cl : 1); /* resident at once */
  /* the kernel's ring: as many stages as fit 192 KB, at most 8; the 128-row
   * unswapped tiles stage their epilogue after it (gemm_sm90.cu cfg) */
  const int staged = !t->sw && t->bm == 128;
  const unsigned ring = staged ? TPG_SM90_STAGED_RING : 196608;
  const unsigned stage = (unsigned)(t->bm + t->bn) * 64 * 2, stages = ring / stage < 8 ? ring / stage : 8;
  memset(out, 0, sizeof *out);
  out->family = TPG_GEMM_FAMILY_OURS;
  out->kernel = tma_kernel(p->dtype, t);
  out->grid[0] = kc ? (unsigned)(tiles * (unsigned long)ks) : (unsigned)(cl * (work < clusters ? work : clusters));
  out->cluster = kc ? (unsigned)ks : 0;
  out->grid[1] = out->grid[2] = 1;
  out->block[0] = 384;
  out->block[1] = out->block[2] = 1;
  out->smem_bytes = stages * stage + (staged ? SM90_EPI_BYTES : 0) + 1024 + 2 * stages * 8; /* 230464 (128 x 256) */
  /* partial slots are sized for 128-row tiles (tpg_sk_workspace_bytes); 64-row tiles use half */
  out->workspace_bytes = sk ? tpg_sk_workspace_bytes(tiles * cl, out->grid[0], (size_t)t->bn) : 0;
  out->workspace_zeroed = sk ? ((tiles * cl * 4 + 255) & ~(size_t)255) : 0;
  out->split_k = sk ? TPG_SPLITK_STREAM : kc ? TPG_SPLITK_CLUSTER : 1;
  tma_maps(p, t, x_map, w_map);
}

int tpg_ours_check_tma_lds(const tpg_gemm_problem *p, tpg_tma_encode *x_map, tpg_tma_encode *w_map, char *why,
                           size_t whylen) {
  if (!x_map || !w_map) return tpg_gemm_reject(why, whylen, "x_map/w_map are NULL");
  if (p->ldx < p->k || p->ldx % 8 || p->ldw < p->k || p->ldw % 8)
    return tpg_gemm_reject(why, whylen, "ldx/ldw must be multiples of 8 and >= k (16-byte tensor-map strides)");
  return 0;
}
