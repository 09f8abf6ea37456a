/* gemm_test.h - what the GEMM selection tests share: a problem written in
 * one line, as the calls of lib/gemm/select.h and ours.h take it. */
#ifndef TPG_GEMM_TEST_H
#define TPG_GEMM_TEST_H

#include "lib/gemm/problem.h"

/* A pointer to a problem (a compound literal: lives to the end of the
 * enclosing block); ldy = ldr = n. */
#define PROB(m, n, k, dtype, epi, arch, sms, ldx, ldw, streamk) \
  (&(tpg_gemm_problem){(m), (n), (k), (dtype), (epi), (arch), (sms), (ldx), (ldw), (n), (n), (streamk)})

#endif
