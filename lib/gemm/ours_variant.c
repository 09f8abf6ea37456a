/* ours_variant.c - our kernels as forced variants: names, launches and the
 * candidates a tuner times.
 */
#include "lib/gemm/ours.h"

#include <stdio.h>
#include <string.h>

#include "kernels/tpg_kargs.h"
#include "lib/gemm/family.h"


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
      const gemv_cfg *c = tpg_ours_gemv_config(m, n, epilogue == TPG_EPI_SWIGLU);
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
      if (!splits) splits = tpg_ours_gemv_splits(c, tpg_ours_gemv_tiles(c, n, epilogue == TPG_EPI_SWIGLU), k, num_sms);
      memset(out, 0, sizeof *out);
      tpg_ours_gemv_fill(m, n, dtype, epilogue, splits, out);
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
      if (tpg_ours_check_tma_lds(k, ldx, ldw, x_map, w_map, why, whylen)) return 1;
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
        const unsigned long units = tpg_ours_tma_units(m, n, v->bm, v->bn, cl, v->cluster_n != 0, swiglu),
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
      tpg_ours_fill_tma(m, n, k, dtype, epilogue, num_sms, ldx, ldw, v->bm, v->bn, v->streamk != 0, v->split, v->kcluster != 0, cl,
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
    const int s_ = tpg_ours_ranges_of((UNITS_), (SLOTS_), k);                                   \
    if (s_ >= 2) {                                                                     \
      TPG_ADD_C(TPG_GEMM_VAR_TMA, BM_, BN_, 1, CL_);                                   \
      if (cnt <= cap && list) list[cnt - 1].split = s_;                                \
    }                                                                                  \
  } while (0)
  TPG_ADD(TPG_GEMM_VAR_HEURISTIC, 0, 0, 0);
  if (sm_arch != 90 || m < 1) return cnt < cap ? cnt : cap;
  /* the CUTLASS family's, right after the heuristic (cutlass.c) */
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
    const gemv_cfg *c = tpg_ours_gemv_config(m, n, swiglu);
    const int s = tpg_ours_gemv_splits(c, tpg_ours_gemv_tiles(c, n, swiglu), k, num_sms), kc = (int)cdiv(k, 32);
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
          const int s_ = tpg_ours_kc_ranges_of(tiles, num_sms, k);
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
