/* ours_variant.c - our kernels as forced variants: their names, their
 * launches with the shape rules of each kernel, and the candidates a tuner
 * times (tpg_gemm_candidates lists them after the other families').
 */
#include <stdio.h>
#include <string.h>

#include "kernels/tpg_kargs.h"
#include "lib/gemm/ours_impl.h"

int tpg_ours_variant_name(const tpg_gemm_variant *v, char *buf, size_t len) {
  const char *pair = v->cluster == 2 ? (v->cluster_n ? "_cn2" : "_c2") : "";
  int r;
  switch (v->kind) {
    case TPG_GEMM_VAR_OURS: r = snprintf(buf, len, "ours"); break;
    case TPG_GEMM_VAR_GEMV: r = v->split ? snprintf(buf, len, "gemv_s%d", v->split) : snprintf(buf, len, "gemv"); break;
    case TPG_GEMM_VAR_GEMV_SK: r = snprintf(buf, len, "gemv_sk"); break;
    case TPG_GEMM_VAR_TMA:
      if (v->kcluster)
        r = snprintf(buf, len, "tma_m%d_n%d_kc%d", v->bm, v->bn, v->split);
      else if (v->streamk && v->split)
        r = snprintf(buf, len, "tma_m%d_n%d%s%s_k%d", v->bm, v->bn, v->swap ? "_sw" : "", pair, v->split);
      else
        r = snprintf(buf, len, "tma_m%d_n%d%s%s%s", v->bm, v->bn, v->swap ? "_sw" : "", pair, v->streamk ? "_sk" : "");
      break;
    default: return 1;
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
int tpg_ours_variant_parse(const char *s, tpg_gemm_variant *v) {
  int bm = 0, bn = 0, used = 0;
  if (!s || !v) return 1;
  memset(v, 0, sizeof *v);
  if (!strcmp(s, "ours")) { v->kind = TPG_GEMM_VAR_OURS; return 0; }
  if (!strcmp(s, "gemv")) { v->kind = TPG_GEMM_VAR_GEMV; return 0; }
  if (sscanf(s, "gemv_s%d%n", &bm, &used) == 1 && s[used] == '\0' && bm >= 1 && bm <= TPG_GEMV_MAX_SPLITS &&
      s[6] >= '1' && s[6] <= '9') {
    v->kind = TPG_GEMM_VAR_GEMV;
    v->split = bm;
    return 0;
  }
  if (!strcmp(s, "gemv_sk")) { v->kind = TPG_GEMM_VAR_GEMV_SK; return 0; }
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

/* ---- launches -------------------------------------------------------------- */

/* "gemv" / "gemv_s<S>": the decode GEMV with S K ranges (0: the rule's). */
static int fill_gemv(const tpg_gemm_problem *p, const tpg_gemm_variant *v, tpg_kernel_launch *out, char *why,
                     size_t whylen) {
  const int swiglu = p->epilogue == TPG_EPI_SWIGLU, kc = (int)cdiv(p->k, 32);
  const gemv_cfg *c = tpg_ours_gemv_config(p->m, p->n, swiglu);
  int splits = v->split;
  if (p->m > 64) return tpg_gemm_reject(why, whylen, "m=%d: the gemv variant needs m <= 64", p->m);
  if (splits < 0 || splits > TPG_GEMV_MAX_SPLITS || splits > kc)
    return tpg_gemm_reject(why, whylen,
                           "variant gemv_s%d: K ranges must be 1..%d and at most the %d 32-wide chunks of k=%d",
                           splits, TPG_GEMV_MAX_SPLITS, kc, p->k);
  if (!splits) splits = tpg_ours_gemv_splits(c, tpg_ours_gemv_tiles(c, p->n, swiglu), p->k, tpg_ours_sms(p));
  tpg_ours_gemv_fill(p, splits, out);
  return 0;
}

/* "gemv_sk", m <= 16: the stream-K twin (MT, R as below; grid = CTAs/SM x SMs). */
static int fill_gemv_sk(const tpg_gemm_problem *p, tpg_kernel_launch *out, char *why, size_t whylen) {
  const int swiglu = p->epilogue == TPG_EPI_SWIGLU, num_sms = tpg_ours_sms(p);
  const int v16 = p->m > 8, bf16 = p->dtype == TPG_KDT_BF16, r = v16 ? 2 : 1, mt = v16 ? 2 : 1;
  const size_t tiles = cdiv(p->n, (swiglu ? 8 : 16) * r);
  if (p->m > 16) return tpg_gemm_reject(why, whylen, "m=%d: the gemv_sk variant needs m <= 16", p->m);
  if (p->fold) return tpg_gemm_reject(why, whylen, "fold=%d: a folded RMSNorm runs on the split GEMV (gemv)", p->fold);
  memset(out, 0, sizeof *out);
  out->family = TPG_GEMM_FAMILY_OURS;
  out->grid[1] = out->grid[2] = out->block[1] = out->block[2] = 1;
  out->split_k = 1;
  out->block[0] = v16 ? 512 : 256;
  out->kernel = v16 ? (bf16 ? "tpg_gemv_sk_bf16_m16" : "tpg_gemv_sk_f16_m16")
                    : (bf16 ? "tpg_gemv_sk_bf16_m8" : "tpg_gemv_sk_f16_m8");
  out->grid[0] = (unsigned)(v16 ? num_sms : 2 * num_sms);
  /* counters (zero at allocation; the kernel leaves them zero) + fp32 partials, which it adds into */
  out->workspace_bytes = ((tiles * 4 + 255) & ~(size_t)255) + tiles * (size_t)(r * mt * 4 * 32 * 4);
  out->workspace_zeroed = out->workspace_bytes;
  return 0;
}

/* A TMA variant's tile and cluster: the kernels that exist. */
static int check_tma_tile(const tpg_gemm_problem *p, const tpg_gemm_variant *v, char *why, size_t whylen) {
  const int cl = v->cluster == 2 ? 2 : 1, swiglu = p->epilogue == TPG_EPI_SWIGLU;
  if (v->swap) {
    if ((v->bm != 16 && v->bm != 32 && v->bm != 64) || (v->bn != 64 && v->bn != 128 && v->bn != 256) ||
        (v->bm == 16 && v->bn == 256))
      return tpg_gemm_reject(why, whylen, "variant swap: bm must be 16, 32 or 64 and bn 64, 128 or 256 (not 16 x 256)");
    if (v->cluster_n) return tpg_gemm_reject(why, whylen, "variant swap: no cluster_n (the pairs share W, not X)");
    if (cl == 2 && (v->bm == 16 || v->bn == 256))
      return tpg_gemm_reject(why, whylen, "variant swap with cluster 2: bm 32 or 64, bn 64 or 128");
    if (cl == 2 && swiglu)
      return tpg_gemm_reject(why, whylen, "variant swap with cluster 2: not offered with SwiGLU (as the 64-row _c2)");
  } else if ((v->bm != 64 && v->bm != 128) || (v->bn != 64 && v->bn != 128 && v->bn != 256 && v->bn != 192) ||
             (v->bn == 192 && v->bm != 128)) {
    return tpg_gemm_reject(why, whylen, "variant: bm must be 64 or 128, bn 64, 128 or 256 (or 192 with bm 128)");
  }
  if (v->cluster != 0 && v->cluster != 1 && v->cluster != 2)
    return tpg_gemm_reject(why, whylen, "variant: cluster must be 1 or 2");
  if (!v->swap && cl == 2 && !v->cluster_n && (v->bm != 128 || v->bn == 64) && !(v->bm == 64 && v->bn != 256))
    return tpg_gemm_reject(why, whylen,
                           "variant: cluster 2 needs bm 128 and bn 256, 192 or 128, or bm 64 and bn 128 or 64");
  if (!v->swap && cl == 2 && !v->cluster_n && v->bm == 64 && swiglu)
    return tpg_gemm_reject(why, whylen,
                           "variant: 64-row _c2 with SwiGLU is not offered (tma_m64_n64_c2_sk gave NaN outputs at "
                           "255 x 1096 x 776 on the GPU check, cause not found)");
  if (v->cluster_n && (cl != 2 || (v->bn != 64 && v->bn != 128)))
    return tpg_gemm_reject(why, whylen, "variant: cluster_n needs cluster 2 and bn 64 or 128");
  return 0;
}

/* A TMA variant's K split: stream-K, aligned split-K or K over a cluster. */
static int check_tma_split(const tpg_gemm_problem *p, const tpg_gemm_variant *v, char *why, size_t whylen) {
  const int cl = v->cluster == 2 ? 2 : 1, swiglu = p->epilogue == TPG_EPI_SWIGLU;
  const unsigned kb = cdiv(p->k, 64);
  const unsigned long tiles = (unsigned long)cdiv(p->m, v->bm) * cdiv(p->n, swiglu ? v->bn / 2 : v->bn);
  if (v->streamk && tiles * (unsigned long)kb >= 0x7fffffffUL)
    return tpg_gemm_reject(why, whylen, "variant: stream-K iteration count exceeds 2^31");
  if (v->kcluster) {
    /* K over a cluster: S CTAs a 128-row tile, one K range each */
    if (v->bm != 128 || cl != 1 || v->swap || v->streamk)
      return tpg_gemm_reject(why, whylen, "variant kcluster: bm 128 without cluster, swap or stream-K (got bm %d)",
                             v->bm);
    if (v->split < 2 || v->split > 8 || v->split > (int)kb)
      return tpg_gemm_reject(why, whylen,
                             "variant split=%d with kcluster: 2..8 K ranges (a portable cluster), at most the %u K "
                             "blocks of k=%d", v->split, kb, p->k);
    if (tiles * (unsigned long)kb >= 0x7fffffffUL)
      return tpg_gemm_reject(why, whylen,
                             "variant kcluster: tiles x K blocks exceeds 2^31 (32-bit iterations in the kernel)");
  } else if (v->split) {
    /* aligned split-K: every CTA one K range of one unit, all resident at once */
    const unsigned long units = tpg_ours_tma_units(p->m, p->n, v->bm, v->bn, cl, v->cluster_n != 0, swiglu),
                        slots = (unsigned long)(tpg_ours_sms(p) / cl > 0 ? tpg_ours_sms(p) / cl : 1);
    if (!v->streamk || v->split < 2 || v->split > 16 || v->split > (int)kb)
      return tpg_gemm_reject(why, whylen,
                             "variant split=%d: K ranges need stream-K and 2..16, at most the %u K blocks of k=%d",
                             v->split, kb, p->k);
    if (units * (unsigned long)v->split > slots)
      return tpg_gemm_reject(why, whylen, "variant split=%d: %lu units x %d ranges exceed the %lu resident at once",
                             v->split, units, v->split, slots);
  }
  return 0;
}

static int fill_tma_variant(const tpg_gemm_problem *p, const tpg_gemm_variant *v, tpg_kernel_launch *out,
                            tpg_tma_encode *x_map, tpg_tma_encode *w_map, char *why, size_t whylen) {
  tpg_ours_tile t;
  if (p->arch != 90)
    return tpg_gemm_reject(why, whylen, "sm_arch=%d: TMA variants need sm_90 (wgmma, sm_90a image)", p->arch);
  if (check_tma_tile(p, v, why, whylen) || tpg_ours_check_tma_lds(p, x_map, w_map, why, whylen) ||
      check_tma_split(p, v, why, whylen))
    return 1;
  memset(&t, 0, sizeof t);
  t.bm = v->bm, t.bn = v->bn, t.sk = v->streamk != 0, t.ks = v->split, t.kc = v->kcluster != 0;
  t.cl = v->cluster == 2 ? 2 : 1, t.cn = v->cluster_n != 0, t.sw = v->swap != 0;
  tpg_ours_fill_tma(p, &t, out, x_map, w_map);
  return 0;
}

int tpg_ours_fill_variant(const tpg_gemm_problem *p, const tpg_gemm_variant *v, tpg_kernel_launch *out,
                          tpg_tma_encode *x_map, tpg_tma_encode *w_map, char *why, size_t whylen) {
  int rc;
  if (x_map) memset(x_map, 0, sizeof *x_map);
  if (w_map) memset(w_map, 0, sizeof *w_map);
  /* the shape, dtype and architecture rules first, with their messages */
  if (tpg_gemm_select(p, out, why, whylen)) return 1;
  switch (v->kind) {
    case TPG_GEMM_VAR_GEMV: rc = fill_gemv(p, v, out, why, whylen); break;
    case TPG_GEMM_VAR_GEMV_SK: rc = fill_gemv_sk(p, out, why, whylen); break;
    case TPG_GEMM_VAR_TMA:
      rc = p->fold ? tpg_gemm_reject(why, whylen, "fold=%d: a folded RMSNorm runs on the split GEMV (gemv)", p->fold)
                   : fill_tma_variant(p, v, out, x_map, w_map, why, whylen);
      break;
    default: return tpg_gemm_reject(why, whylen, "variant kind=%d: not one of our kernels", v->kind);
  }
  if (!rc && why && whylen) why[0] = '\0';
  return rc;
}

/* ---- candidates --------------------------------------------------------------- */

/* The list being written: at most cap entries; cnt counts all offered. */
typedef struct clist {
  tpg_gemm_variant *list;
  int cap, cnt;
} clist;

/* Appends a variant; returns it, or NULL when it does not fit (counted anyway). */
static tpg_gemm_variant *add(clist *c, int kind, int bm, int bn, int sk, int cl) {
  tpg_gemm_variant *v = c->list && c->cnt < c->cap ? &c->list[c->cnt] : NULL;
  ++c->cnt;
  if (!v) return NULL;
  memset(v, 0, sizeof *v);
  v->kind = kind, v->bm = bm, v->bn = bn, v->streamk = sk;
  v->cluster = cl ? 2 : 0;
  v->cluster_n = cl == 3;
  return v;
}
static void add_split(clist *c, int bm, int bn, int cl, int split, int kcluster) {
  tpg_gemm_variant *v = add(c, TPG_GEMM_VAR_TMA, bm, bn, !kcluster, cl);
  if (v) v->split = split, v->kcluster = kcluster;
}
static unsigned long pairs_of(const tpg_gemm_problem *p) {
  return (unsigned long)(tpg_ours_sms(p) / 2 > 0 ? tpg_ours_sms(p) / 2 : 1);
}

/* m <= 64: the GEMV with the rule's K ranges, and with half and twice as many;
 * m <= 16: its stream-K twin. */
static void add_gemv(clist *c, const tpg_gemm_problem *p) {
  const int swiglu = p->epilogue == TPG_EPI_SWIGLU;
  const gemv_cfg *g = tpg_ours_gemv_config(p->m, p->n, swiglu);
  const int s = tpg_ours_gemv_splits(g, tpg_ours_gemv_tiles(g, p->n, swiglu), p->k, tpg_ours_sms(p));
  tpg_gemm_variant *v;
  add(c, TPG_GEMM_VAR_GEMV, 0, 0, 0, 0);
  if (s / 2 >= 1 && (v = add(c, TPG_GEMM_VAR_GEMV, 0, 0, 0, 0))) v->split = s / 2;
  if (2 * s <= TPG_GEMV_MAX_SPLITS && 2 * s <= (int)cdiv(p->k, 32) && (v = add(c, TPG_GEMM_VAR_GEMV, 0, 0, 0, 0)))
    v->split = 2 * s;
  if (p->m <= 16 && !p->fold) add(c, TPG_GEMM_VAR_GEMV_SK, 0, 0, 0, 0);
}

/* One-CTA tiles: 128-row at BN 256 / 192 / 128 / 64 and 64-row at 256 / 128
 * / 64 as M allows, each whole, stream-K where the last wave is partial, and
 * at m > 64 (128-row) aligned split-K and K over a cluster. */
static void add_tiles(clist *c, const tpg_gemm_problem *p) {
  static const int bms[2] = {128, 64}, bns[4] = {256, 192, 128, 64};
  const int m = p->m, swiglu = p->epilogue == TPG_EPI_SWIGLU, sms = tpg_ours_sms(p);
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 4; ++j) {
      const int bm = bms[i], bn = bns[j];
      if (bn == 192 && (bm != 128 || m <= 64)) continue; /* a 128-row-tile width for prefill */
      if (m <= 16 && (bm != 64 || bn == 256)) continue;
      if (m > 16 && m <= 64 && bm == 128 && bn != 128) continue;
      if (m > 64 && bm == 64 && (m > 256 || bn == 64)) continue;
      const unsigned long tiles = (unsigned long)cdiv(m, bm) * cdiv(p->n, swiglu ? bn / 2 : bn);
      add(c, TPG_GEMM_VAR_TMA, bm, bn, 0, 0);
      if (tiles % (unsigned long)sms) add(c, TPG_GEMM_VAR_TMA, bm, bn, 1, 0);
      if (bm != 128 || m <= 64) continue;
      const int s = tpg_ours_ranges_of(tiles, (unsigned long)sms, p->k);
      if (s >= 2) add_split(c, bm, bn, 0, s, 0);
      /* K over a cluster of S (at most 8: a portable cluster) */
      const int kc = tpg_ours_kc_ranges_of(tiles, sms, p->k);
      if (kc >= 2) add_split(c, bm, bn, 0, kc, 1);
    }
}

/* Pairs of CTAs: 128-row M-tile pairs sharing W (m > 128), 64-row ones
 * (64 < m <= 256, not with SwiGLU: tpg_ours_fill_variant), and N-tile
 * pairs sharing X ("_cn2", 16 < m <= 256: narrow tiles at small M, where
 * every N-tile re-reads the X tile from L2). */
static void add_pairs(clist *c, const tpg_gemm_problem *p) {
  static const int bns[4] = {256, 192, 128, 64};
  const int m = p->m, swiglu = p->epilogue == TPG_EPI_SWIGLU;
  const unsigned long slots = pairs_of(p);
  if (m > 128)
    for (int j = 0; j < 3; ++j) {
      const int bn = bns[j];
      const unsigned long units = (unsigned long)cdiv(m, 256) * cdiv(p->n, swiglu ? bn / 2 : bn);
      add(c, TPG_GEMM_VAR_TMA, 128, bn, 0, 2);
      if (units % slots) add(c, TPG_GEMM_VAR_TMA, 128, bn, 1, 2);
      const int s = tpg_ours_ranges_of(units, slots, p->k);
      if (s >= 2) add_split(c, 128, bn, 2, s, 0);
    }
  if (m > 64 && m <= 256 && !swiglu)
    for (int j = 2; j < 4; ++j) {
      const int bn = bns[j];
      const unsigned long units = (unsigned long)cdiv(m, 128) * cdiv(p->n, bn);
      add(c, TPG_GEMM_VAR_TMA, 64, bn, 0, 2);
      if (units % slots) add(c, TPG_GEMM_VAR_TMA, 64, bn, 1, 2);
    }
  if (m > 16 && m <= 256)
    for (int j = 2; j < 4; ++j) {
      const int bn = bns[j], bm = m <= 64 ? 64 : 128;
      const unsigned long units = (unsigned long)cdiv(m, bm) * cdiv(p->n, (swiglu ? bn / 2 : bn) * 2L);
      add(c, TPG_GEMM_VAR_TMA, bm, bn, 0, 3);
      if (units % slots) add(c, TPG_GEMM_VAR_TMA, bm, bn, 1, 3);
    }
}

/* Swapped tiles (tokens as the wgmma N side, "_sw"), m <= 128: 16-token
 * tiles at m <= 16, 32 at 17..64, 64 above 32; the _c2 pairs of 32- or
 * 64-token tiles sharing W wherever there are two token tiles (m > BM; not
 * with SwiGLU: tpg_ours_fill_variant). */
static void add_swapped(clist *c, const tpg_gemm_problem *p) {
  static const int sbm[3] = {16, 32, 64}, sbn[3] = {64, 128, 256};
  const int m = p->m, swiglu = p->epilogue == TPG_EPI_SWIGLU;
  const unsigned long slots[2] = {(unsigned long)tpg_ours_sms(p), pairs_of(p)};
  if (m > 128) return;
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j) {
      const int bm = sbm[i], bn = sbn[j];
      if ((bm == 16 && (m > 16 || bn == 256)) || (bm == 32 && (m <= 16 || m > 128)) || (bm == 64 && m <= 32)) continue;
      for (int cp = 0; cp < 2; ++cp) {
        if (cp && (swiglu || bm == 16 || bn == 256 || m <= bm)) continue; /* a pair needs two token tiles */
        if (!cp && bm == 32 && m > 64) continue;                           /* four token tiles: only as pairs */
        const unsigned long units = (unsigned long)cdiv(m, (long)bm * (cp ? 2 : 1)) * cdiv(p->n, swiglu ? bn / 2 : bn);
        tpg_gemm_variant *v = add(c, TPG_GEMM_VAR_TMA, bm, bn, 0, cp ? 2 : 0);
        if (v) v->swap = 1;
        if (units % slots[cp] && (v = add(c, TPG_GEMM_VAR_TMA, bm, bn, 1, cp ? 2 : 0))) v->swap = 1;
      }
    }
}

/* Our candidates by M (sm_90; elsewhere there is one kernel a shape):
 *   m <= 16: both decode GEMVs, 64-row TMA tiles at BN 128 / 64 (weight
 *            streaming through TMA), each whole-tile or stream-K;
 *   m <= 64: the GEMV, 64-row TMA tiles at BN 256 / 128 / 64, and 128-row
 *            BN 128;
 *   m > 64:  128-row tiles at BN 256 / 192 / 128 / 64, and 64-row tiles at
 *            BN 256 / 128 while m <= 256;
 * then the pairs and the swapped tiles (above). */
int tpg_ours_candidates(const tpg_gemm_problem *p, tpg_gemm_variant *list, int cap) {
  clist c = {list, cap, 0};
  if (p->arch != 90 || p->m < 1) return 0;
  if (p->m <= 64) add_gemv(&c, p);
  if (p->fold) return c.cnt < cap ? c.cnt : cap; /* only the split GEMV folds a norm */
  add_tiles(&c, p);
  add_pairs(&c, p);
  add_swapped(&c, p);
  return c.cnt < cap ? c.cnt : cap;
}
