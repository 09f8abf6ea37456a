/* problem.c - the rules every GEMM family shares, checked once with a
 * message that names the argument. */
#include "lib/gemm/problem.h"

#include <stdarg.h>
#include <stdio.h>

#include "kernels/tpg_kargs.h"

int tpg_gemm_reject(char *why, size_t whylen, const char *fmt, ...) {
  if (why && whylen) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, whylen, fmt, ap);
    va_end(ap);
  }
  return 1;
}

long tpg_gemm_wrows(const tpg_gemm_problem *p) { return p->epilogue == TPG_EPI_SWIGLU ? 2L * p->n : (long)p->n; }

int tpg_gemm_problem_check(const tpg_gemm_problem *p, char *why, size_t whylen) {
  if (!p) return tpg_gemm_reject(why, whylen, "problem is NULL");
  if (p->m < 1) return tpg_gemm_reject(why, whylen, "m=%d: M must be >= 1", p->m);
  if (p->n < 8 || p->n % 8)
    return tpg_gemm_reject(why, whylen, "n=%d: N must be a positive multiple of 8 (16-byte rows)", p->n);
  if (p->k < 8 || p->k % 8)
    return tpg_gemm_reject(why, whylen, "k=%d: K must be a positive multiple of 8 (16-byte rows)", p->k);
  if (p->dtype != TPG_KDT_BF16 && p->dtype != TPG_KDT_F16)
    return tpg_gemm_reject(why, whylen, "dtype=%d: operands must be F16 or BF16", p->dtype);
  if (p->epilogue < 0 || p->epilogue >= TPG_EPI_COUNT)
    return tpg_gemm_reject(why, whylen, "epilogue=%d: unknown TPG_EPI_* value", p->epilogue);
  if (p->fold < 0 || p->fold > (TPG_GEMM_FOLD_SSQ | TPG_GEMM_FOLD_XNORM))
    return tpg_gemm_reject(why, whylen, "fold=%d: expected 0 or TPG_GEMM_FOLD_SSQ | _XNORM", p->fold);
  if (p->fold && p->m > TPG_FOLD_MAX_M)
    return tpg_gemm_reject(why, whylen, "m=%d: a folded RMSNorm serves m <= %d", p->m, TPG_FOLD_MAX_M);
  if ((p->fold & TPG_GEMM_FOLD_SSQ) && p->epilogue != TPG_EPI_NONE && p->epilogue != TPG_EPI_BIAS &&
      p->epilogue != TPG_EPI_RESIDUAL)
    return tpg_gemm_reject(why, whylen, "epilogue=%d: sums of squares of y come with TPG_EPI_NONE, _BIAS or "
                           "_RESIDUAL", p->epilogue);
  if (p->arch < 80)
    return tpg_gemm_reject(why, whylen, "sm_arch=%d: the kernels need sm_80 or newer (mma.sync bf16)", p->arch);
  return 0;
}
