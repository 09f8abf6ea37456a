/* family.h - what select.c and ours_variant.c ask of the CUTLASS family
 * (cutlass.c): its candidates, variant names and launches. Internal to
 * lib/gemm/. */
#ifndef TPG_GEMM_FAMILY_H
#define TPG_GEMM_FAMILY_H

#include <stddef.h>

#include "lib/gemm/select.h"

/* Whether the CUTLASS kernels can run this at all (not which one). */
int tpg_gemm_cutlass_applies(int dtype, int epilogue, int sm_arch);
/* The CUTLASS variants worth timing for a shape (see cutlass.c); at most
 * cap written to list (may be NULL); returns how many were written. */
int tpg_gemm_cutlass_candidates(int m, int n, int k, int epilogue, int sm_arch, int num_sms, tpg_gemm_variant *list,
                                int cap);
/* The launch of a CUTLASS variant (tpg_gemm_select_variant's case). */
int tpg_gemm_cutlass_select(int m, int n, int k, int dtype, int epilogue, int sm_arch, int num_sms, int ldx, int ldw,
                            const tpg_gemm_variant *v, tpg_kernel_launch *out, char *why, size_t whylen);
/* Split-K's S for kernel i on this shape (0: fewer than 2 ranges fit). */
int tpg_gemm_cutlass_ranges(int kernel, int m, int n, int k, int num_sms);
/* "cutlass_<name>[_sk|_k<S>]": 0, or nonzero if it does not fit / parse. */
int tpg_gemm_cutlass_variant_name(const tpg_gemm_variant *v, char *buf, size_t len);
int tpg_gemm_cutlass_variant_parse(const char *s, tpg_gemm_variant *v);

#endif
