/* cutlass.c - the CUTLASS family (cutlass.h): its candidates, variant
 * names and launches.
 */
#include "lib/gemm/family.h"

#include <stdio.h>
#include <string.h>

#include "kernels/tpg_kargs.h"
#include "lib/gemm/cutlass.h"

static int reject(char *why, size_t whylen, const char *msg) {
  if (why && whylen) {
    strncpy(why, msg, whylen - 1);
    why[whylen - 1] = '\0';
  }
  return 1;
}

static long cdivl(long a, long b) { return (a + b - 1) / b; }

/* Whether the CUTLASS kernels can run this at all (not which one). */
int tpg_gemm_cutlass_applies(int dtype, int epilogue, int sm_arch) {
  return sm_arch == 90 && dtype == TPG_KDT_BF16 &&
         (epilogue == TPG_EPI_NONE || epilogue == TPG_EPI_BIAS || epilogue == TPG_EPI_BIAS_GELU ||
          epilogue == TPG_EPI_BIAS_SILU || epilogue == TPG_EPI_RESIDUAL);
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
int tpg_gemm_cutlass_ranges(int kernel, int m, int n, int k, int num_sms) {
  const long tiles = cutlass_tiles(kernel, m, n), kb = cdivl(k, 64);
  long s = tiles ? num_sms / tiles : 0;
  if (s > kb) s = kb;
  if (s > 16) s = 16;
  return s >= 2 ? (int)s : 0;
}

static void problem_of(const tpg_gemm_variant *v, int m, int n, int k, int dtype, int epilogue, int num_sms, int ldx,
                       int ldw, tpg_cutlass_problem *p) {
  memset(p, 0, sizeof *p);
  p->kernel = v->cutlass;
  p->mode = v->split >= 2 ? TPG_CUTLASS_SPLIT : v->streamk ? TPG_CUTLASS_SK : TPG_CUTLASS_DP;
  p->splits = v->split;
  p->m = m;
  p->n = n;
  p->k = k;
  p->ldx = ldx;
  p->ldw = ldw;
  p->ldy = n;
  p->ldr = n;
  p->dtype = dtype;
  p->epilogue = epilogue;
  p->num_sms = num_sms;
}

int tpg_gemm_cutlass_select(int m, int n, int k, int dtype, int epilogue, int sm_arch, int num_sms, int ldx, int ldw,
                            const tpg_gemm_variant *v, tpg_kernel_launch *out, char *why, size_t whylen) {
  char buf[160];
  tpg_cutlass_problem p;
  if (sm_arch != 90) {
    snprintf(buf, sizeof buf, "sm_arch=%d: the CUTLASS kernels are built for sm_90a only", sm_arch);
    return reject(why, whylen, buf);
  }
  problem_of(v, m, n, k, dtype, epilogue, num_sms, ldx, ldw, &p);
  return tpg_cutlass_launch(&p, out, why, whylen);
}


/* Candidates by M (CUTLASS's tiles are 128 or 64 rows of M, or with the
 * swapped kernel 64 tokens): the swapped 128 x 64 from 17 to 256 tokens;
 * 128 x 128 (X shared along N) from 17; 128 x 256 (W shared along M) and
 * ping-pong 128 x 128 from 129, ping-pong 64 x 96 from 65 (their 2 x 1
 * clusters want two M tiles). Each
 * cooperative kernel data-parallel, with stream-K when its tiles leave the
 * last wave partial, and split-K where the tiles leave SMs for >= 2 ranges. */
int tpg_gemm_cutlass_candidates(int m, int n, int k, int epilogue, int sm_arch, int num_sms, tpg_gemm_variant *list,
                                int cap) {
  int cnt = 0, i;
  if (sm_arch != 90 || !tpg_gemm_cutlass_applies(TPG_KDT_BF16, epilogue, sm_arch) || m <= 16) return 0;
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
      if (mode == 2 && !(v.split = tpg_gemm_cutlass_ranges(i, m, n, k, num_sms))) continue;
      if (list && cnt < cap) list[cnt] = v;
      ++cnt;
    }
  }
  return cnt < cap ? cnt : cap;
}

int tpg_gemm_cutlass_variant_name(const tpg_gemm_variant *v, char *buf, size_t len) {
  int r;
  if (v->cutlass < 0 || v->cutlass >= TPG_CUTLASS_COUNT) return 1;
  if (v->split >= 2)
    r = snprintf(buf, len, "cutlass_%s_k%d", tpg_cutlass_kernels[v->cutlass].name, v->split);
  else
    r = snprintf(buf, len, "cutlass_%s%s", tpg_cutlass_kernels[v->cutlass].name, v->streamk ? "_sk" : "");
  return r < 0 || (size_t)r >= len;
}

int tpg_gemm_cutlass_variant_parse(const char *s, tpg_gemm_variant *v) {
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
