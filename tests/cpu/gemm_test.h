/* gemm_test.h - what the GEMM selection tests share: a problem written in
 * one line, as the calls of lib/gemm/select.h and ours.h take it. */
#ifndef TPG_GEMM_TEST_H
#define TPG_GEMM_TEST_H

#include <stdlib.h>

#include "lib/gemm/problem.h"

/* These tests are about ours and CUTLASS: the cuBLASLt family left out
 * (a file that does not exist; before the first choice, as the library
 * loads cuBLASLt once). gemm_cublaslt_fake_test tests it. */
int setenv(const char *name, const char *value, int overwrite);
static inline void gemm_test_without_cublaslt(void) {
  setenv("TPG_LIBCUBLASLT", "/nonexistent/libcublasLt.so.13", 1);
}

/* A pointer to a problem (a compound literal: lives to the end of the
 * enclosing block); ldy = ldr = n. */
#define PROB(m, n, k, dtype, epi, arch, sms, ldx, ldw, streamk) \
  (&(tpg_gemm_problem){(m), (n), (k), (dtype), (epi), (arch), (sms), (ldx), (ldw), (n), (n), (streamk), 0})

#endif
