/* ours_rule.c - our kernels' Hopper rule: tpg_gemm_select_tma, the cost
 * model fitted on the model zoo (the selection table: ours.c).
 */
#include "lib/gemm/ours.h"

#include <string.h>

#include "kernels/tpg_kargs.h"
#include "lib/gemm/ours_impl.h"

/* ---------------------------------------------------------------------------
 * tpg_gemm_select_tma: the Hopper path (sm_90; other architectures get
 * tpg_gemm_select). A cost model whose constants were fitted on the model
 * zoo (gemm_bench --zoo --cand, every candidate timed); bench/zoo_rules.py
 * holds the same rule in Python, and gemm_rule_test keeps the two equal.
 * The fits and what each constant bought: docs/gemm.md, "Our Hopper rule".
 *
 *   m <= 8, or m <= 16 with fewer than TPG_DEC_SW_W W rows: the decode GEMV
 *                          (tpg_gemm_select); from TPG_DEC_SW_W W rows the
 *                          swapped 16-token tiles stream W faster
 *   m <= 32, W rows <= 4096 and k < 8192: the GEMV (at K = 8192 TMA 64 x 64
 *                          stream-K wins)
 *   m > 8 otherwise        the TMA tile (BM x BN, or swapped: BM tokens x BN
 *                          W rows, "sw" in the tables) and split with the lowest
 *                          modelled cost, BM = 64 only while m <= 256, the
 *                          128-row _c2 clusters only while m > 128 and
 *                          stream-K, the 64-row _c2 only for 64 < m <= 128
 *                          and not with SwiGLU:
 *     whole tiles:  ceil(tiles / slots) * kb * BM * BN * eff
 *     stream-K:     tiles * kb / slots * BM * BN * eff * (1 + skp) + fix * BM * BN
 *                   (+ kk * kb * BM * BN * eff when tiles < slots)
 *     split-K (S):  ceil(kb / S) * BM * BN * eff + kfix * BM * BN
 *     K over a cluster of S: the same with kcfix
 *   kb = ceil(k / 64); tiles over W rows (2n with SwiGLU), units of two M-tiles
 *   for _c2; slots = num_sms (num_sms / 2 for _c2); eff per tile and fix, kk,
 *   kfix, skp, kcfix per class of M (m <= 16, 32, 64, 128, larger): class_of.
 *   An eff of 9 keeps a kernel a candidate the rule never picks (the _cn2
 *   pairs never paid).
 *   streamk: 1 the model decides, 0 whole tiles only, 2 stream-K only (tests).
 *   Stream-K: grid = min(tiles * kb, num_sms), split_k TPG_SPLITK_STREAM,
 *   workspace tpg_sk_workspace_bytes(tiles, grid, BN) (tpg_kargs.h); with
 *   several waves the kernel splits only the last. Whole tiles: grid =
 *   min(tiles, num_sms), no workspace. block 384; smem as in fill_tma.
 * ------------------------------------------------------------------------- */

/* 8 < m <= 16: the GEMV below this many W rows, the swapped 16-token tiles
 * from there (zoo_rules.py DEC_SW_W) */
#define TPG_DEC_SW_W 8192
/* the _c2 and BN 192 kernels (zoo_rules.py EFF_LARGE) */
#define EFF_C2_256 0.95
#define EFF_C2_128 1.05
#define EFF_N192 1.0
#define EFF_C2_192 0.9
/* aligned split-K's fix-up (zoo_rules.py K_FIX) */
#define K_FIX_MID 15.0
#define K_FIX_LARGE 20.0
/* stream-K's k-steps at 1 + SK_P of whole tiles' for m > 128 (zoo_rules.py SK_P) */
#define SK_P_LARGE 0.1
/* K over a cluster's fix-up (zoo_rules.py KC_FIX) */
#define KC_FIX_MID 10.0
#define KC_FIX_LARGE 10.0

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
int tpg_ours_ranges_of(unsigned long units, unsigned long slots, int k) {
  const unsigned long s = units ? slots / units : 0, kb = cdiv(k, 64);
  const unsigned long r = s < kb ? s : kb;
  return (int)(r < 16 ? r : 16);
}
/* Clusters of s CTAs (one CTA an SM) resident at once. The GPCs pack them,
 * so above s = 2 fewer than num_sms / s fit: with 132 SMs (H100 SXM, H200;
 * cudaOccupancyMaxActiveClusters, `gemm_bench --clusters`) 66 39 30 22 17
 * 15 15 for s = 2..8. Other SM counts: the same fraction of num_sms (a
 * guess: their GPCs were not measured). A "_kc<S>" grid larger than this
 * runs in two waves. */
static unsigned long kc_clusters(int s, int num_sms) {
  static const int sm132[9] = {0, 132, 66, 39, 30, 22, 17, 15, 15};
  if (s < 1 || s > 8) return 0;
  return num_sms == 132 ? (unsigned long)sm132[s] : (unsigned long)num_sms * (unsigned long)sm132[s] / 132ul;
}
/* S of a K-over-a-cluster candidate ("_kc<S>"): the most K ranges (at most
 * 8, a portable cluster, and the K blocks) whose clusters all fit at once;
 * 0 when not even pairs do */
int tpg_ours_kc_ranges_of(unsigned long tiles, int num_sms, int k) {
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
    const int s = tpg_ours_ranges_of((unsigned long)tiles, (unsigned long)slots, k);
    return s >= 2 ? (double)cdiv((long)kb, s) * area * e->eff + fix * area : -1.0;
  }
  if (sk == 3) {
    const int s = tpg_ours_kc_ranges_of((unsigned long)tiles, num_sms, k);
    return s >= 2 ? (double)cdiv((long)kb, s) * area * e->eff + fix * area : -1.0;
  }
  if (sk)
    return tiles * kb / slots * area * e->eff * (1.0 + skp) + fix * area + (tiles < slots ? kk * kb * area * e->eff : 0.0);
  return (double)cdiv((long)tiles, slots) * kb * area * e->eff;
}

/* A class of M: its cost-model entries and constants (the table above). */
typedef struct tma_class {
  const tma_eff *tab;
  int cnt;
  double fix, kk, kfix, skp, kcfix;
} tma_class;

static const tma_class *class_of(int m) {
  /* {bm, bn, cl, eff, sw} per class (zoo_rules.py EFF_DEC, EFF_TINY,
   * EFF_SMALL, EFF_MID, EFF_LARGE; table order breaks ties). m <= 32 has its
   * own: with 64-row tiles half of X is zero fill and the 64 x 64 tile's
   * fixed costs weigh more. cl 3: the _cn2 pairs (N-tiles sharing X); eff
   * >= 9: never picked. sw 1: the swapped tiles (bm tokens x bn W rows); the
   * entries the fit never picked are left out */
  static const tma_eff dec[2] = {{16, 64, 1, 1.2, 1}, {16, 128, 1, 1.0, 1}};
  static const tma_eff tiny[7] = {{64, 256, 1, 0.6, 0}, {64, 128, 1, 0.6, 0}, {64, 64, 1, 1.4, 0}, {64, 128, 3, 9.0, 0},
                                  {64, 64, 3, 9.0, 0},  {32, 64, 1, 1.2, 1}, {32, 128, 1, 1.0, 1}};
  static const tma_eff small[7] = {{64, 256, 1, 0.6, 0}, {64, 128, 1, 0.6, 0},   {64, 64, 1, 0.8, 0},   {64, 128, 3, 9.0, 0},
                                   {64, 64, 3, 9.0, 0},  {32, 64, 1, 1.4, 1}, {64, 64, 1, 0.7, 1}};
  static const tma_eff large[9] = {{128, 256, 1, 1.0, 0},        {128, 128, 1, 1.15, 0},       {128, 64, 1, 1.4, 0},
                                   {64, 256, 1, 1.3, 0},         {64, 128, 1, 1.5, 0},         {128, 256, 2, EFF_C2_256, 0},
                                   {128, 128, 2, EFF_C2_128, 0}, {128, 192, 1, EFF_N192, 0}, {128, 192, 2, EFF_C2_192, 0}};
  /* 64 < m <= 128: the large table with 128 x 128 and its _c2 cheaper, plus
   * the 64-row _c2 pairs and the swapped 64-token tiles */
  static const tma_eff mid[15] = {{128, 256, 1, 1.0, 0},      {128, 128, 1, 1.05, 0},     {128, 64, 1, 1.4, 0},
                                  {64, 256, 1, 1.3, 0},       {64, 128, 1, 1.3, 0},       {128, 256, 2, EFF_C2_256, 0},
                                  {128, 128, 2, 1.0, 0},      {128, 192, 1, EFF_N192, 0}, {128, 192, 2, EFF_C2_192, 0},
                                  {64, 128, 2, 1.1, 0},       {64, 64, 2, 2.0, 0},        {128, 128, 3, 9.0, 0},
                                  {128, 64, 3, 9.0, 0},       {64, 64, 1, 1.7, 1},     {64, 128, 1, 1.2, 1}};
  /* per class: table, entries, fix, kk, kfix, skp, kcfix (zoo_rules.py
   * SK_FIX, SK_K, K_FIX (< 0: no aligned split-K), SK_P, KC_FIX (< 0: no K
   * over a cluster)) */
  static const tma_class cls[5] = {{dec, 2, 40.0, 0.1, -1.0, 0.0, -1.0},
                                   {tiny, 7, 40.0, 0.1, -1.0, 0.0, -1.0},
                                   {small, 7, 20.0, 0.1, -1.0, 0.0, -1.0},
                                   {mid, 15, 30.0, 0.05, K_FIX_MID, 0.0, KC_FIX_MID},
                                   {large, 9, 40.0, 0.0, K_FIX_LARGE, SK_P_LARGE, KC_FIX_LARGE}};
  return &cls[m <= 16 ? 0 : m <= 32 ? 1 : m <= 64 ? 2 : m <= 128 ? 3 : 4];
}

/* Whether entry e is a candidate at m at all (tpg_gemm_candidates' rules). */
static int offered(const tma_eff *e, int m, int swiglu) {
  if (e->eff >= 9.0) return 0;
  if (e->bm == 64 && m > 256) return 0;
  if (e->cl == 2 && m <= e->bm) return 0; /* one M-tile: no pair to share W */
  if (e->cl == 2 && (e->bm == 64 || e->sw) && swiglu) return 0; /* not offered (tpg_gemm_select_variant) */
  if (e->sw && ((e->bm == 16 && m > 16) || (e->bm == 32 && m > 64 && e->cl != 2) || (e->bm == 64 && m <= 32)))
    return 0; /* the swapped candidates by M (tpg_gemm_candidates) */
  return 1;
}

/* Whether entry e may split K the way s says (0 whole tiles, 1 stream-K,
 * 2 aligned split-K, 3 K over a cluster) under streamk and the class. */
static int split_allowed(const tma_eff *e, int s, int streamk, const tma_class *c) {
  if ((streamk == 0 && s) || (streamk == 2 && s != 1)) return 0;
  if (s == 2 && (c->kfix < 0 || e->bm != 128 || e->sw || e->cl == 3))
    return 0; /* aligned split-K: 128-row unswapped tiles and their _c2 (zoo_rules.py K_FIX) */
  if (s == 3 && (c->kcfix < 0 || e->bm != 128 || e->sw || e->cl != 1))
    return 0; /* K over a cluster: 128-row unswapped one-CTA tiles (zoo_rules.py KC_FIX) */
  if (e->cl == 2 && e->bm == 128 && !e->sw && !s) return 0; /* _c2 stream-K only (zoo_rules.py C2_SK_ONLY) */
  return 1;
}

/* The entry and split with the lowest modelled cost (ties: table order):
 * *best the entry, *split its s. */
static const tma_eff *cheapest(const tpg_gemm_problem *p, const tma_class *c, int *split) {
  const int swiglu = p->epilogue == TPG_EPI_SWIGLU, sms = tpg_ours_sms(p);
  const int wrows = (int)tpg_gemm_wrows(p);
  const tma_eff *best = NULL;
  double best_cost = -1;
  for (int i = 0; i < c->cnt; ++i) {
    if (!offered(&c->tab[i], p->m, swiglu)) continue;
    for (int s = 0; s < 4; ++s) {
      if (!split_allowed(&c->tab[i], s, p->streamk, c)) continue;
      const double cost = tma_cost(p->m, wrows, p->k, sms, &c->tab[i], s, s == 2 ? c->kfix : s == 3 ? c->kcfix : c->fix,
                                   c->kk, c->skp);
      if (cost < 0) continue;
      if (best_cost < 0 || cost < best_cost) {
        best_cost = cost;
        best = &c->tab[i];
        *split = s;
      }
    }
  }
  return best;
}

/* The tile of entry e with split s resolved into the launch's terms. */
static void tile_of(const tpg_gemm_problem *p, const tma_eff *e, int s, tpg_ours_tile *t) {
  const long wrows = tpg_gemm_wrows(p);
  const int m = p->m, k = p->k, num_sms = tpg_ours_sms(p);
  memset(t, 0, sizeof *t);
  t->bm = e->bm;
  t->bn = e->bn;
  t->sw = e->sw;
  t->cl = e->cl > 1 ? 2 : 1;
  t->cn = e->cl == 3;
  if (p->streamk == 0) s = 0;
  if (p->streamk == 2) s = 1;
  if (s == 3) {
    t->ks = tpg_ours_kc_ranges_of((unsigned long)cdiv(m, (long)e->bm) * cdiv(wrows, e->bn), num_sms, k);
    t->kc = 1;
    s = 0;
  }
  if (s == 2) {
    const int pair = e->cl == 2 ? 2 : 1;
    t->ks = tpg_ours_ranges_of((unsigned long)cdiv(m, (long)e->bm * pair) * cdiv(wrows, e->bn),
                               (unsigned long)(num_sms / pair > 0 ? num_sms / pair : 1), k);
    s = 1;
  }
  /* iteration counts are 32-bit in the kernel */
  if (s && (unsigned long)cdiv(m, e->bm) * cdiv(wrows, e->bn) * (unsigned long)cdiv(k, 64) >= 0x7fffffffUL) s = 0;
  t->sk = s;
}

int tpg_gemm_select_tma(const tpg_gemm_problem *p, tpg_kernel_launch *out, tpg_tma_encode *x_map,
                        tpg_tma_encode *w_map, char *why, size_t whylen) {
  if (x_map) memset(x_map, 0, sizeof *x_map);
  if (w_map) memset(w_map, 0, sizeof *w_map);
  if (tpg_gemm_select(p, out, why, whylen)) return 1;
  if (p->arch != 90 || p->m <= 8 || p->fold) return 0; /* the GEMV (the only kernel that folds a norm) */
  const long wrows = tpg_gemm_wrows(p);
  if (p->m <= 16 && wrows < TPG_DEC_SW_W) return 0;                       /* the GEMV */
  if (p->m > 16 && p->m <= 32 && wrows <= 4096 && p->k < 8192) return 0; /* the GEMV */
  if (tpg_ours_check_tma_lds(p, x_map, w_map, why, whylen)) return 1;
  int split = 0;
  const tma_eff *e = cheapest(p, class_of(p->m), &split);
  if (!e) return tpg_gemm_reject(why, whylen, "no TMA tile fits m=%d with streamk=%d", p->m, p->streamk);
  tpg_ours_tile t;
  tile_of(p, e, split, &t);
  tpg_ours_fill_tma(p, &t, out, x_map, w_map);
  return 0;
}
