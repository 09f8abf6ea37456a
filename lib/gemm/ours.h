/* ours.h - what the files of our own GEMM kernels' selection share
 * (ours.c, ours_rule.c, ours_variant.c). Internal to lib/gemm/.
 */
#ifndef TPG_GEMM_OURS_H
#define TPG_GEMM_OURS_H

#include <stddef.h>
#include <string.h>

#include "lib/gemm/select.h"

static inline int reject(char *why, size_t whylen, const char *msg) {
  if (why && whylen) {
    strncpy(why, msg, whylen - 1);
    why[whylen - 1] = '\0';
  }
  return 1;
}

static inline unsigned cdiv(long a, long b) { return (unsigned)((a + b - 1) / b); }

/* One decode GEMV configuration (ours.c kGemv). */
typedef struct gemv_cfg {
  int mt, r, kw, occ;
  const char *bf16, *f16;
} gemv_cfg;
#define TPG_GEMV_MAX_SPLITS 16

const gemv_cfg *tpg_ours_gemv_config(int m, int n, int swiglu);
unsigned tpg_ours_gemv_tiles(const gemv_cfg *c, int n, int swiglu);
int tpg_ours_gemv_splits(const gemv_cfg *c, unsigned tiles, int k, int num_sms);
void tpg_ours_gemv_fill(int m, int n, int dtype, int epilogue, int splits, tpg_kernel_launch *out);
unsigned long tpg_ours_tma_units(int m, int n, int bm, int bn, int cl, int cn, int swiglu);
void tpg_ours_fill_tma(int m, int n, int k, int dtype, int epilogue, int num_sms, int ldx, int ldw, int bm, int bn,
                       int sk, int ks, int kc, int cl, int cn, int sw, tpg_kernel_launch *out, tpg_tma_encode *x_map,
                       tpg_tma_encode *w_map);
int tpg_ours_check_tma_lds(int k, int ldx, int ldw, tpg_tma_encode *x_map, tpg_tma_encode *w_map, char *why,
                           size_t whylen);
int tpg_ours_ranges_of(unsigned long units, unsigned long slots, int k);
int tpg_ours_kc_ranges_of(unsigned long tiles, int num_sms, int k);

#endif
