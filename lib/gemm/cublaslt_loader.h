/* cublaslt_loader.h - the cuBLASLt entry points the cuBLASLt GEMM family
 * uses, loaded at run time.
 *
 * cuBLASLt is dlopen'ed when the family is first considered (a rule table
 * row or TPG_GEMM_FAMILY names it, or a tuner lists candidates), never
 * linked: a program that never needs it neither needs libcublasLt on its
 * machine nor pays for loading its ~500 MB, and the installed packages name
 * no cuBLAS path of the build machine. Without it the family is absent and
 * tpg_lt_why() says why. $TPG_LIBCUBLASLT overrides the file loaded (the
 * stand-in driver's tests point it at their fake).
 */
#ifndef TPG_GEMM_CUBLASLT_LOADER_H
#define TPG_GEMM_CUBLASLT_LOADER_H

#include <cublasLt.h>

#ifdef __cplusplus
extern "C" {
#endif

/* X(name): every entry point the family calls, typed from cublasLt.h. */
#define TPG_LT_FUNCS(X)                   \
  X(cublasLtGetVersion)                   \
  X(cublasLtCreate)                       \
  X(cublasLtDestroy)                      \
  X(cublasLtMatmulDescCreate)             \
  X(cublasLtMatmulDescDestroy)            \
  X(cublasLtMatmulDescSetAttribute)       \
  X(cublasLtMatrixLayoutCreate)           \
  X(cublasLtMatrixLayoutDestroy)          \
  X(cublasLtMatmulPreferenceCreate)       \
  X(cublasLtMatmulPreferenceDestroy)      \
  X(cublasLtMatmulPreferenceSetAttribute) \
  X(cublasLtMatmulAlgoGetHeuristic)       \
  X(cublasLtMatmul)                       \
  /* end */

/* Present in the versions accepted, used for messages only: NULL is fine. */
#define TPG_LT_FUNCS_OPTIONAL(X) X(cublasLtGetStatusString) /* end */

typedef struct tpg_lt_table {
#define TPG_LT_FIELD(name) __typeof__(&name) name;
  TPG_LT_FUNCS(TPG_LT_FIELD)
  TPG_LT_FUNCS_OPTIONAL(TPG_LT_FIELD)
#undef TPG_LT_FIELD
  size_t version; /* cublasLtGetVersion, e.g. 130100 */
} tpg_lt_table;

/* Loads cuBLASLt once per process (thread-safe): $TPG_LIBCUBLASLT, else a
 * copy the process already holds (.13 or .12), else libcublasLt.so.13, then
 * .12, where the dynamic loader finds them. The
 * table, or NULL when it could not be loaded (remembered: not retried). */
const tpg_lt_table *tpg_lt_load(void);

/* Why cuBLASLt could not be loaded ("" once loaded), loading it if not
 * tried yet. */
const char *tpg_lt_why(void);

/* The text of a cuBLAS status, for messages. */
const char *tpg_lt_status_string(cublasStatus_t s);

#ifdef __cplusplus
}
#endif
#endif
