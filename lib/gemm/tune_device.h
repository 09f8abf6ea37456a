/* tune_device.h - the GEMM tuner's timer on a real device.
 *
 * For the graph builder:
 *   tpg_gemm_dev_timer *tm;                       // with the device's context current
 *   tpg_gemm_dev_timer_create(stream, 5, &tm);
 *   tpg_gemm_tune_cfg c = TPG_GEMM_TUNE_CFG_INIT;
 *   c.mode = TPG_GEMM_TUNE_ON; c.time_fn = tpg_gemm_dev_time; c.time_ctx = tm;
 *   c.cache_path = getenv("TPG_GEMM_TUNE_CACHE");  // or from the graph config
 *   tpg_gemm_tune_pick(&c, &problem, &launch, &x_map, &w_map, &info);
 *   ...                                          // every GEMM node
 *   tpg_gemm_dev_timer_destroy(tm);
 */
#ifndef TPG_GEMM_TUNE_DEVICE_H
#define TPG_GEMM_TUNE_DEVICE_H

#include "lib/cuda_driver.h"
#include "lib/gemm/tune.h"

typedef struct tpg_gemm_dev_timer tpg_gemm_dev_timer;

/* reps: timed launches per candidate (1..32, median). The stream is
 * borrowed; the timer synchronizes it on every timed candidate. Allocates a
 * 128 MiB L2-flush buffer, and operand buffers as large as the largest GEMM
 * timed (freed by destroy). */
TPG_HIDDEN tpg_status tpg_gemm_dev_timer_create(CUstream stream, int reps, tpg_gemm_dev_timer **out);
TPG_HIDDEN void tpg_gemm_dev_timer_destroy(tpg_gemm_dev_timer *t); /* NULL: no-op */

/* A tpg_gemm_time_fn; ctx is a tpg_gemm_dev_timer. Returns nonzero (the
 * candidate is skipped) when a driver call fails; tpg_last_error says why. */
TPG_HIDDEN int tpg_gemm_dev_time(void *ctx, const tpg_gemm_problem *p, const tpg_gemm_variant *v,
                                 const tpg_kernel_launch *launch, const tpg_tma_encode *x_map,
                                 const tpg_tma_encode *w_map, double *us);

#endif
