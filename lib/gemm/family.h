/* family.h - the operations every GEMM family implements, in the order a
 * launch goes through them (CUTLASS's GemmUniversalAdapter order:
 * can_implement -> workspace size -> fill -> run, the run being the
 * caller's: a kernel launch, or cublasLtMatmul for cuBLASLt).
 *
 * The selector (select.c) knows the families only through this table: a
 * new family is one file defining one tpg_gemm_family_ops and one row in
 * select.c's list. A family never calls another; what they share lives
 * below them (problem.h). Internal to lib/gemm/.
 */
#ifndef TPG_GEMM_FAMILY_H
#define TPG_GEMM_FAMILY_H

#include <stddef.h>

#include "lib/gemm/problem.h"

typedef struct tpg_gemm_family_ops {
  int id;           /* TPG_GEMM_FAMILY_* */
  const char *name; /* "ours", "cutlass", "cublaslt": reports, TPG_GEMM_FAMILY */
  /* Whether the family's code is in this process at all (a library that
   * did not load is not): 0, or nonzero with why. NULL: always. */
  int (*available)(char *why, size_t whylen);
  /* Whether the family can run p at all (its code is here, the dtype,
   * epilogue, architecture, leading dimensions); 0 or nonzero with why. */
  int (*can_implement)(const tpg_gemm_problem *p, char *why, size_t whylen);
  /* Whether v is one of this family's variants. */
  int (*owns)(const tpg_gemm_variant *v);
  /* The family's variant for p where the rule table names it: `kernel` and
   * `mode` are the row's (0, 0: the family's own choice). 0 or nonzero. */
  int (*rule)(const tpg_gemm_problem *p, int kernel, int mode, tpg_gemm_variant *v);
  /* The variants worth timing for p, at most cap written to list (list may
   * be NULL); returns how many were written. */
  int (*candidates)(const tpg_gemm_problem *p, tpg_gemm_variant *list, int cap);
  /* The device workspace v needs on p, per node. 0 or nonzero with why. */
  int (*workspace_size)(const tpg_gemm_problem *p, const tpg_gemm_variant *v, size_t *bytes, char *why,
                        size_t whylen);
  /* The launch of v on p (and the TMA map recipes: rank 0 when the kernel
   * takes none). 0 or nonzero with why, *out then unspecified. */
  int (*fill)(const tpg_gemm_problem *p, const tpg_gemm_variant *v, tpg_kernel_launch *out, tpg_tma_encode *x_map,
              tpg_tma_encode *w_map, char *why, size_t whylen);
  /* The variant's stable name (problem.h); nonzero if it does not fit. */
  int (*variant_name)(const tpg_gemm_variant *v, char *buf, size_t len);
  /* A name written by variant_name; nonzero if it is not one of this family's. */
  int (*variant_parse)(const char *s, tpg_gemm_variant *v);
} tpg_gemm_family_ops;

extern const tpg_gemm_family_ops tpg_gemm_family_ours;
extern const tpg_gemm_family_ops tpg_gemm_family_cutlass;
extern const tpg_gemm_family_ops tpg_gemm_family_cublaslt;

#endif
