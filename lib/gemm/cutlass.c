/* cutlass.c - the CUTLASS family: which of its kernels (cutlass.h, the
 * rows of kernels/gemm/sm90_cutlass_list.h) are worth timing for a shape,
 * their variant names, and their launches (cutlass_params.cu builds the
 * launch and, at fill time, the argument block).
 *
 * Decision: no rule of its own beyond the table's rows (select.c,
 * family_table.inc), because we have no cost model of CUTLASS's kernels:
 * a row names the kernel and mode, and split-K's S follows from the shape.
 */
#include <stdio.h>
#include <string.h>

#include "kernels/tpg_kargs.h"
#include "lib/gemm/cutlass.h"
#include "lib/gemm/family.h"

static long cdivl(long a, long b) { return (a + b - 1) / b; }

/* Whether the CUTLASS kernels can run p at all (not which one): sm_90a,
 * bf16, the epilogues CUTLASS's EVT fuses here (not SwiGLU's gate/up
 * layout, not the fp32 partial). */
static int cutlass_can_implement(const tpg_gemm_problem *p, char *why, size_t whylen) {
  const int e = p->epilogue;
  if (p->arch != 90)
    return tpg_gemm_reject(why, whylen, "sm_arch=%d: the CUTLASS kernels are built for sm_90a only", p->arch);
  if (p->dtype != TPG_KDT_BF16) return tpg_gemm_reject(why, whylen, "dtype=%d: the CUTLASS kernels are bf16", p->dtype);
  if (p->fold) return tpg_gemm_reject(why, whylen, "fold=%d: a folded RMSNorm is our decode GEMV's", p->fold);
  if (e != TPG_EPI_NONE && e != TPG_EPI_BIAS && e != TPG_EPI_BIAS_GELU && e != TPG_EPI_BIAS_SILU &&
      e != TPG_EPI_RESIDUAL)
    return tpg_gemm_reject(why, whylen, "epilogue=%d: not one the CUTLASS kernels fuse", e);
  return 0;
}

/* Output tiles of kernel i for an m x n GEMM (CUTLASS's M x N: swapped
 * kernels put the W rows first), rounded up to whole clusters. */
static long cutlass_tiles(int i, int m, int n) {
  const tpg_cutlass_kernel *k = &tpg_cutlass_kernels[i];
  const long M = k->swap ? n : m, N = k->swap ? m : n;
  return cdivl(cdivl(M, k->tm), k->cm) * k->cm * cdivl(cdivl(N, k->tn), k->cn) * k->cn;
}

/* Split-K's S: as many K ranges a tile as the SMs allow, at most the K
 * blocks and 16 (the rule of our "_k<S>", ours_rule.c ranges_of); 0 below 2. */
static int cutlass_ranges(int kernel, int m, int n, int k, int num_sms) {
  const long tiles = cutlass_tiles(kernel, m, n), kb = cdivl(k, 64);
  long s = tiles ? num_sms / tiles : 0;
  if (s > kb) s = kb;
  if (s > 16) s = 16;
  return s >= 2 ? (int)s : 0;
}

static int cutlass_owns(const tpg_gemm_variant *v) { return v->kind == TPG_GEMM_VAR_CUTLASS; }

/* A table row's kernel (i + 1) and mode; split-K's S from the shape, or
 * stream-K where too many tiles leave no room for K ranges; p->streamk 0
 * (TPG_GEMM_STREAMK=0) turns off every K split. */
static int cutlass_rule(const tpg_gemm_problem *p, int kernel, int mode, tpg_gemm_variant *v) {
  if (kernel < 1 || kernel > TPG_CUTLASS_COUNT) return 1;
  memset(v, 0, sizeof *v);
  v->kind = TPG_GEMM_VAR_CUTLASS;
  v->cutlass = kernel - 1;
  v->streamk = mode == TPG_CUTLASS_SK;
  if (mode == TPG_CUTLASS_SPLIT) {
    v->split = cutlass_ranges(v->cutlass, p->m, p->n, p->k, p->sms);
    if (!v->split) v->streamk = 1;
  }
  if (p->streamk == 0) v->streamk = v->split = 0;
  return 0;
}

static int cutlass_fill(const tpg_gemm_problem *p, const tpg_gemm_variant *v, tpg_kernel_launch *out,
                        tpg_tma_encode *x_map, tpg_tma_encode *w_map, char *why, size_t whylen) {
  tpg_cutlass_problem cp;
  if (x_map) memset(x_map, 0, sizeof *x_map);
  if (w_map) memset(w_map, 0, sizeof *w_map);
  if (p->arch != 90)
    return tpg_gemm_reject(why, whylen, "sm_arch=%d: the CUTLASS kernels are built for sm_90a only", p->arch);
  memset(&cp, 0, sizeof cp);
  cp.kernel = v->cutlass;
  cp.mode = v->split >= 2 ? TPG_CUTLASS_SPLIT : v->streamk ? TPG_CUTLASS_SK : TPG_CUTLASS_DP;
  cp.splits = v->split;
  cp.m = p->m, cp.n = p->n, cp.k = p->k;
  cp.ldx = p->ldx, cp.ldw = p->ldw, cp.ldy = p->ldy, cp.ldr = p->ldr;
  cp.dtype = p->dtype, cp.epilogue = p->epilogue, cp.num_sms = p->sms;
  if (tpg_cutlass_launch(&cp, out, why, whylen)) return 1;
  out->family = TPG_GEMM_FAMILY_CUTLASS;
  return 0;
}

static int cutlass_workspace_size(const tpg_gemm_problem *p, const tpg_gemm_variant *v, size_t *bytes, char *why,
                                  size_t whylen) {
  tpg_kernel_launch l;
  if (cutlass_fill(p, v, &l, NULL, NULL, why, whylen)) return 1;
  *bytes = l.workspace_bytes;
  return 0;
}

/* Candidates by M (CUTLASS's tiles are 128 or 64 rows of M, or with the
 * swapped kernel 64 tokens): the swapped 128 x 64 from 17 to 256 tokens;
 * 128 x 128 (X shared along N) from 17; 128 x 256 (W shared along M) and
 * ping-pong 128 x 128 from 129, ping-pong 64 x 96 from 65 (their 2 x 1
 * clusters want two M tiles). Each
 * cooperative kernel data-parallel, with stream-K when its tiles leave the
 * last wave partial, and split-K where the tiles leave SMs for >= 2 ranges. */
static int cutlass_candidates(const tpg_gemm_problem *p, tpg_gemm_variant *list, int cap) {
  const int m = p->m, n = p->n, k = p->k, num_sms = p->sms;
  int cnt = 0, i;
  if (cutlass_can_implement(p, NULL, 0) || m <= 16) return 0;
  for (i = 0; i < TPG_CUTLASS_COUNT; ++i) {
    const tpg_cutlass_kernel *kk = &tpg_cutlass_kernels[i];
    const long tiles = cutlass_tiles(i, m, n);
    int mode;
    if (kk->swap && m > 256) continue;
    if (kk->cm > 1 && !kk->swap && m <= kk->tm * (kk->cm - 1)) continue; /* a cluster wants cm M tiles */
    for (mode = 0; mode < 3; ++mode) {
      tpg_gemm_variant v;
      memset(&v, 0, sizeof v);
      v.kind = TPG_GEMM_VAR_CUTLASS;
      v.cutlass = i;
      if (mode > 0 && kk->sched != TPG_CUTLASS_SCHED_COOP_SK) break;
      if (mode == 1) {
        if (num_sms > 0 && tiles % num_sms == 0) continue;
        v.streamk = 1;
      }
      if (mode == 2 && !(v.split = cutlass_ranges(i, m, n, k, num_sms))) continue;
      if (list && cnt < cap) list[cnt] = v;
      ++cnt;
    }
  }
  return cnt < cap ? cnt : cap;
}

static int cutlass_variant_name(const tpg_gemm_variant *v, char *buf, size_t len) {
  int r;
  if (v->cutlass < 0 || v->cutlass >= TPG_CUTLASS_COUNT) return 1;
  if (v->split >= 2)
    r = snprintf(buf, len, "cutlass_%s_k%d", tpg_cutlass_kernels[v->cutlass].name, v->split);
  else
    r = snprintf(buf, len, "cutlass_%s%s", tpg_cutlass_kernels[v->cutlass].name, v->streamk ? "_sk" : "");
  return r < 0 || (size_t)r >= len;
}

static int cutlass_variant_parse(const char *s, tpg_gemm_variant *v) {
  int i;
  if (strncmp(s, "cutlass_", 8)) return 1;
  s += 8;
  for (i = 0; i < TPG_CUTLASS_COUNT; ++i) {
    const size_t l = strlen(tpg_cutlass_kernels[i].name);
    const char *rest = s + l;
    int sp = 0, used = 0;
    if (strncmp(s, tpg_cutlass_kernels[i].name, l)) continue;
    memset(v, 0, sizeof *v);
    v->kind = TPG_GEMM_VAR_CUTLASS;
    v->cutlass = i;
    if (rest[0] == '\0') return 0;
    if (!strcmp(rest, "_sk")) {
      v->streamk = 1;
      return 0;
    }
    if (rest[0] == '_' && rest[1] == 'k' && rest[2] >= '1' && rest[2] <= '9' &&
        sscanf(rest + 2, "%d%n", &sp, &used) == 1 && rest[2 + used] == '\0' && sp >= 2 && sp <= 16) {
      v->split = sp;
      return 0;
    }
  }
  return 1;
}

const tpg_gemm_family_ops tpg_gemm_family_cutlass = {
    .id = TPG_GEMM_FAMILY_CUTLASS,
    .name = "cutlass",
    .can_implement = cutlass_can_implement,
    .owns = cutlass_owns,
    .rule = cutlass_rule,
    .candidates = cutlass_candidates,
    .workspace_size = cutlass_workspace_size,
    .fill = cutlass_fill,
    .variant_name = cutlass_variant_name,
    .variant_parse = cutlass_variant_parse,
};
