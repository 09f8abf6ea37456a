/* ours_impl.h - what the files of our own kernels' selection share
 * (ours.c, ours_rule.c, ours_variant.c). Internal to lib/gemm/.
 */
#ifndef TPG_GEMM_OURS_IMPL_H
#define TPG_GEMM_OURS_IMPL_H

#include <stddef.h>

#include "lib/gemm/ours.h"

static inline unsigned cdiv(long a, long b) { return (unsigned)((a + b - 1) / b); }
/* SMs the grid may fill (at least one). */
static inline int tpg_ours_sms(const tpg_gemm_problem *p) { return p->sms < 1 ? 1 : p->sms; }

/* One decode GEMV configuration (ours.c kGemv). */
typedef struct gemv_cfg {
  int mt, r, kw, occ;
  const char *bf16, *f16;
  const char *bf16_xn, *f16_xn; /* x normalized as loaded (m <= TPG_FOLD_MAX_M) */
} gemv_cfg;
#define TPG_GEMV_MAX_SPLITS 16

const gemv_cfg *tpg_ours_gemv_config(int m, int n, int swiglu);
unsigned tpg_ours_gemv_tiles(const gemv_cfg *c, int n, int swiglu);
int tpg_ours_gemv_splits(const gemv_cfg *c, unsigned tiles, int k, int num_sms);
void tpg_ours_gemv_fill(const tpg_gemm_problem *p, int splits, tpg_kernel_launch *out);

/* A TMA tile and how its launch splits the work (tpg_ours_fill_tma). */
typedef struct tpg_ours_tile {
  int bm, bn; /* X rows (swapped: tokens) x W rows of a tile          */
  int sk;     /* stream-K (with ks >= 2: aligned split-K, ks ranges)  */
  int ks;     /* K ranges a unit (split-K) or a cluster (kc)          */
  int kc;     /* K over a launch-time cluster of ks CTAs ("_kc<S>")   */
  int cl;     /* 1, or 2: clusters of two CTAs                        */
  int cn;     /* with cl 2: the pair shares X along N ("_cn2")        */
  int sw;     /* swapped operands ("_sw")                             */
} tpg_ours_tile;

unsigned long tpg_ours_tma_units(int m, int n, int bm, int bn, int cl, int cn, int swiglu);
void tpg_ours_fill_tma(const tpg_gemm_problem *p, const tpg_ours_tile *t, tpg_kernel_launch *out,
                       tpg_tma_encode *x_map, tpg_tma_encode *w_map);
int tpg_ours_check_tma_lds(const tpg_gemm_problem *p, tpg_tma_encode *x_map, tpg_tma_encode *w_map, char *why,
                           size_t whylen);
int tpg_ours_ranges_of(unsigned long units, unsigned long slots, int k);
int tpg_ours_kc_ranges_of(unsigned long tiles, int num_sms, int k);

/* ours_variant.c: the family's variants (family.h operations). */
int tpg_ours_candidates(const tpg_gemm_problem *p, tpg_gemm_variant *list, int cap);
int tpg_ours_fill_variant(const tpg_gemm_problem *p, const tpg_gemm_variant *v, tpg_kernel_launch *out,
                          tpg_tma_encode *x_map, tpg_tma_encode *w_map, char *why, size_t whylen);
int tpg_ours_variant_name(const tpg_gemm_variant *v, char *buf, size_t len);
int tpg_ours_variant_parse(const char *s, tpg_gemm_variant *v);

#endif
