/* lt_run.h - a cuBLASLt plan (lib/gemm/cublaslt.h) run on a device: its
 * cublasLtMatmul, then the kernel of ours that ends its operation, if any
 * (SwiGLU's tpg_lt_swiglu), on the same stream, so a stream capture holds
 * both. What the graph node captures and the tuner times.
 */
#ifndef TPG_GEMM_LT_RUN_H
#define TPG_GEMM_LT_RUN_H

#include "lib/cuda_driver.h"
#include "lib/gemm/cublaslt.h"

/* Enqueues the plan on stream with a's pointers, in the current context.
 * `who` starts the message of an error (the node, or the timer). */
TPG_HIDDEN tpg_status tpg_lt_run(tpg_lt_plan *pl, const tpg_gemm_args *a, CUstream stream, const char *who);

#endif
