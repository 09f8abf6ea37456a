/* tune_device.c - the tuner's timing function on a real device (driver
 * API through tpg_cu): tpg_gemm_dev_time is a tpg_gemm_time_fn.
 *
 * Decisions:
 *  - Its own operand buffers (grown to the largest GEMM timed, kept for the
 *    timer's life), filled with small non-zero bf16/f16 patterns: all-zero
 *    operands would draw less power and time faster than real weights.
 *  - Each timed launch follows a 128 MiB memset (more than the 50-60 MB L2),
 *    so a candidate is timed with cold weights, as a layer meets them in a
 *    model; its own event pair; the median of `reps`.
 *  - Stream-K workspaces are zeroed before each candidate (graph.c zeroes a
 *    fresh one once; the kernels keep the counters zero).
 *  - A CUTLASS candidate gets its argument block built on these buffers
 *    (lib/gemm/cutlass.h, descriptors encoded by the driver) and its
 *    launch-time cluster, as the graph node does; a cuBLASLt candidate a
 *    plan of its own (lib/gemm/cublaslt.h), run on the timer's stream.
 * The caller makes the device's context current and owns the stream.
 */
#include "lib/gemm/tune_device.h"

#include <stdlib.h>
#include <string.h>

#include "kernels/tpg_cutlass_args.h"
#include "kernels/tpg_kargs.h"
#include "kernels/tpg_tma_args.h"
#include "lib/device.h"
#include "lib/gemm/cublaslt.h"
#include "lib/gemm/cutlass.h"
#include "lib/gemm/lt_run.h"
#include "lib/gemm/ours.h"

#define FLUSH_BYTES ((size_t)128 << 20)
#define MAX_REPS 32

struct tpg_gemm_dev_timer {
  CUstream stream;
  int reps;
  CUevent ev[2 * MAX_REPS];
  CUdeviceptr x, w, y, bias, res, ws, flush;
  size_t x_b, w_b, y_b, bias_b, res_b, ws_b;
};

static void free_buf(CUdeviceptr *p, size_t *bytes) {
  if (*p) tpg_cu->cuMemFree(*p);
  *p = 0;
  *bytes = 0;
}
/* Grow *p to at least `bytes` (16-byte multiple), filled with the 32-bit pattern. */
static tpg_status grow(CUdeviceptr *p, size_t *have, size_t bytes, unsigned pattern, CUstream s) {
  bytes = (bytes + 15) & ~(size_t)15;
  if (bytes <= *have) return TPG_SUCCESS;
  free_buf(p, have);
  TPG_CU(cuMemAlloc(p, bytes));
  *have = bytes;
  TPG_CU(cuMemsetD32Async(*p, pattern, bytes / 4, s));
  return TPG_SUCCESS;
}

void tpg_gemm_dev_timer_destroy(tpg_gemm_dev_timer *t) {
  int i;
  size_t fb = FLUSH_BYTES;
  if (!t) return;
  if (t->stream) tpg_cu->cuStreamSynchronize(t->stream);
  for (i = 0; i < 2 * MAX_REPS; ++i)
    if (t->ev[i]) tpg_cu->cuEventDestroy(t->ev[i]);
  free_buf(&t->x, &t->x_b);
  free_buf(&t->w, &t->w_b);
  free_buf(&t->y, &t->y_b);
  free_buf(&t->bias, &t->bias_b);
  free_buf(&t->res, &t->res_b);
  free_buf(&t->ws, &t->ws_b);
  free_buf(&t->flush, &fb);
  free(t);
}

tpg_status tpg_gemm_dev_timer_create(CUstream stream, int reps, tpg_gemm_dev_timer **out) {
  tpg_gemm_dev_timer *t;
  tpg_status st = TPG_SUCCESS;
  int i;
  TPG_CHECK_ARG(out != NULL, "out is NULL");
  *out = NULL;
  TPG_CHECK_ARG(reps >= 1 && reps <= MAX_REPS, "reps=%d: must be 1..%d", reps, MAX_REPS);
  TPG_TRY(tpg_cu_load());
  t = (tpg_gemm_dev_timer *)calloc(1, sizeof *t);
  if (!t) return TPG_FAIL(TPG_ERROR_OUT_OF_MEMORY, "timer: out of host memory");
  t->stream = stream;
  t->reps = reps;
  for (i = 0; i < 2 * reps; ++i) TPG_CUGOTO(cuEventCreate(&t->ev[i], CU_EVENT_DEFAULT), st, fail);
  TPG_CUGOTO(cuMemAlloc(&t->flush, FLUSH_BYTES), st, fail);
  *out = t;
  return TPG_SUCCESS;
fail:
  tpg_gemm_dev_timer_destroy(t);
  return st;
}

static int cmp_float(const void *a, const void *b) {
  const float x = *(const float *)a, y = *(const float *)b;
  return x < y ? -1 : x > y;
}

/* The tensor map from the selector's description, on our own buffer. */
static tpg_status encode(const tpg_tma_encode *e, CUdeviceptr base, int dtype, tpg_tmap *map) {
  cuuint32_t es[4] = {1, 1, 1, 1};
  TPG_CU(cuTensorMapEncodeTiled((CUtensorMap *)map,
                                dtype == TPG_KDT_BF16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16,
                                (cuuint32_t)e->rank, (void *)base, (const cuuint64_t *)e->dims,
                                (const cuuint64_t *)e->strides, (const cuuint32_t *)e->box, es,
                                CU_TENSOR_MAP_INTERLEAVE_NONE,
                                e->swizzle == 64 ? CU_TENSOR_MAP_SWIZZLE_64B : CU_TENSOR_MAP_SWIZZLE_128B,
                                CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE));
  return TPG_SUCCESS;
}

/* One launch as the graph node makes it: with the launch-time cluster
 * shape of a "_kc<S>" variant or a CUTLASS kernel (the kernel does not
 * compile one in). */
static tpg_status launch(CUfunction f, const tpg_kernel_launch *L, CUstream stream, void **params) {
  unsigned cluster[3];
  tpg_kernel_launch_cluster(L, cluster);
  if (!cluster[0]) {
    TPG_CU(cuLaunchKernel(f, L->grid[0], L->grid[1], L->grid[2], L->block[0], L->block[1], L->block[2], L->smem_bytes,
                          stream, params, NULL));
    return TPG_SUCCESS;
  }
  CUresult r = tpg_launch_ex(f, L->grid, L->block, L->smem_bytes, cluster, stream, params);
  return r == CUDA_SUCCESS ? TPG_SUCCESS : tpg_cu_fail(r, __func__, "cuLaunchKernelEx (a GEMM candidate with a cluster)");
}

/* The operand buffers, grown to p, filled with small non-zero patterns; a
 * fresh zeroed workspace of the launch's size. */
static tpg_status operands(tpg_gemm_dev_timer *t, const tpg_gemm_problem *p, const tpg_kernel_launch *L) {
  const int bf16 = p->dtype == TPG_KDT_BF16;
  const size_t nw = (size_t)tpg_gemm_wrows(p);
  /* two bf16/f16 values per word: x ~0.5/0.25, w ~0.01/-0.01 (sums stay finite in f16) */
  const unsigned xp = bf16 ? 0x3F003E80u : 0x38003400u, wp = bf16 ? 0x3C24BC24u : 0x211FA11Fu;
  TPG_TRY(grow(&t->x, &t->x_b, (size_t)p->m * (size_t)p->ldx * 2, xp, t->stream));
  TPG_TRY(grow(&t->w, &t->w_b, nw * (size_t)p->ldw * 2, wp, t->stream));
  TPG_TRY(grow(&t->y, &t->y_b, (size_t)p->m * (size_t)p->ldy * 4, 0, t->stream));
  TPG_TRY(grow(&t->bias, &t->bias_b, 2 * (size_t)p->n * 2, xp, t->stream));
  TPG_TRY(grow(&t->res, &t->res_b, (size_t)p->m * (size_t)p->ldr * 2, xp, t->stream));
  if (L->workspace_bytes) {
    TPG_TRY(grow(&t->ws, &t->ws_b, L->workspace_bytes, 0, t->stream));
    TPG_CU(cuMemsetD32Async(t->ws, 0, t->ws_b / 4, t->stream));
  }
  return TPG_SUCCESS;
}

/* The plain argument view on the timer's buffers. */
static void args_of(const tpg_gemm_dev_timer *t, const tpg_gemm_problem *p, const tpg_kernel_launch *L,
                    tpg_gemm_args *a) {
  memset(a, 0, sizeof *a);
  a->x = (const void *)t->x;
  a->w = (const void *)t->w;
  a->y = (void *)t->y;
  const int nobias = p->epilogue == TPG_EPI_NONE || p->epilogue == TPG_EPI_F32_PARTIAL ||
                     (p->epilogue == TPG_EPI_RESIDUAL && !p->residual_bias);
  a->bias = nobias ? NULL : (const void *)t->bias;
  a->residual = p->epilogue == TPG_EPI_RESIDUAL ? (const void *)t->res : NULL;
  a->workspace = L->workspace_bytes ? (void *)t->ws : NULL; /* CUTLASS: always (its done counter) */
  a->m = p->m, a->n = p->n, a->k = p->k;
  a->ldx = p->ldx, a->ldw = p->ldw, a->ldy = p->ldy, a->ldr = p->ldr;
  a->dtype = p->dtype;
  a->epilogue = p->epilogue;
  a->split_k = L->split_k;
}

/* CUTLASS: its own argument block, every descriptor on our buffers. */
static tpg_status cutlass_args(const tpg_gemm_problem *p, const tpg_kernel_launch *L, const tpg_gemm_args *a,
                               tpg_gemm_cutlass_args *cp) {
  tpg_cutlass_problem cq;
  CUresult cu;
  char why[200];
  memset(&cq, 0, sizeof cq);
  cq.kernel = L->cutlass - 1;
  cq.mode = L->cutlass_mode;
  cq.splits = L->cutlass_splits;
  cq.m = p->m, cq.n = p->n, cq.k = p->k;
  cq.ldx = p->ldx, cq.ldw = p->ldw, cq.ldy = p->ldy, cq.ldr = p->ldr;
  cq.dtype = p->dtype, cq.epilogue = p->epilogue, cq.num_sms = p->sms;
  if (tpg_cutlass_fill(&cq, a, tpg_tmap_encode_driver, NULL, cp, &cu, why, sizeof why))
    return cu != CUDA_SUCCESS ? tpg_cu_fail(cu, __func__, "cuTensorMapEncodeTiled (a CUTLASS candidate)")
                              : TPG_FAIL(TPG_ERROR_INTERNAL, "timer: CUTLASS candidate %s: %s", L->kernel, why);
  return TPG_SUCCESS;
}

/* One run of a candidate on the timer's stream. */
typedef tpg_status (*run_fn)(void *ctx, CUstream stream);

/* A kernel of ours or CUTLASS's with its parameter block. */
typedef struct kernel_run {
  CUfunction f;
  const tpg_kernel_launch *L;
  void **params;
} kernel_run;
static tpg_status run_kernel(void *ctx, CUstream stream) {
  const kernel_run *k = ctx;
  return launch(k->f, k->L, stream, k->params);
}

/* A cuBLASLt candidate: its plan on the timer's buffers. */
typedef struct lt_run {
  tpg_lt_plan *plan;
  const tpg_gemm_args *a;
} lt_run;
static tpg_status run_lt(void *ctx, CUstream stream) {
  const lt_run *r = ctx;
  return tpg_lt_run(r->plan, r->a, stream, "timer: cuBLASLt candidate");
}

/* One run after the warm-up per repetition, each after an L2 flush and
 * between its own events; *us the median. */
static tpg_status time_runs(tpg_gemm_dev_timer *t, run_fn run, void *ctx, double *us) {
  float ms[MAX_REPS];
  int i;
  /* warm-up: module load, first-touch */
  TPG_TRY(run(ctx, t->stream));
  for (i = 0; i < t->reps; ++i) {
    TPG_CU(cuMemsetD32Async(t->flush, (unsigned)i, FLUSH_BYTES / 4, t->stream));
    TPG_CU(cuEventRecord(t->ev[2 * i], t->stream));
    TPG_TRY(run(ctx, t->stream));
    TPG_CU(cuEventRecord(t->ev[2 * i + 1], t->stream));
  }
  TPG_CU(cuEventSynchronize(t->ev[2 * t->reps - 1]));
  for (i = 0; i < t->reps; ++i) TPG_CU(cuEventElapsedTime(&ms[i], t->ev[2 * i], t->ev[2 * i + 1]));
  qsort(ms, (size_t)t->reps, sizeof ms[0], cmp_float);
  *us = (t->reps % 2 ? ms[t->reps / 2] : 0.5f * (ms[t->reps / 2 - 1] + ms[t->reps / 2])) * 1e3;
  return TPG_SUCCESS;
}

/* A cuBLASLt candidate: a plan made for it and freed after. */
static tpg_status time_lt(tpg_gemm_dev_timer *t, const tpg_gemm_problem *p, const tpg_kernel_launch *L,
                          const tpg_gemm_args *a, double *us) {
  lt_run r = {NULL, a};
  char why[300];
  if (tpg_lt_plan_create(p, L->lt_algo, NULL, &r.plan, why, sizeof why))
    return TPG_FAIL(TPG_ERROR_CUDA, "timer: cuBLASLt candidate: %s", why);
  /* The plan asks cuBLASLt again: its answer may need more than the buffer
   * sized from the candidate's (a cache entry evicted between the two). */
  if (tpg_lt_plan_workspace(r.plan) > L->workspace_bytes) {
    const size_t need = tpg_lt_plan_workspace(r.plan);
    tpg_lt_plan_destroy(r.plan);
    return TPG_FAIL(TPG_ERROR_CUDA, "timer: cuBLASLt candidate %s needs %zu bytes of workspace, the timer holds %zu",
                    L->kernel ? L->kernel : "?", need, L->workspace_bytes);
  }
  tpg_status st = time_runs(t, run_lt, &r, us);
  tpg_lt_plan_destroy(r.plan);
  return st;
}

static tpg_status time_one(tpg_gemm_dev_timer *t, const tpg_gemm_problem *p, const tpg_kernel_launch *L,
                           const tpg_tma_encode *xm, const tpg_tma_encode *wm, double *us) {
  tpg_gemm_tma_args ta;
  tpg_gemm_cutlass_args cp;
  void *params[1];
  kernel_run k = {NULL, L, params};
  TPG_TRY(operands(t, p, L));
  memset(&ta, 0, sizeof ta);
  args_of(t, p, L, &ta.a);
  if (L->family == TPG_GEMM_FAMILY_CUBLASLT) return time_lt(t, p, L, &ta.a, us);
  if (L->cutlass) {
    TPG_TRY(cutlass_args(p, L, &ta.a, &cp));
    params[0] = &cp;
  } else if (xm->rank) {
    tpg_tma_encode ym;
    TPG_TRY(encode(xm, t->x, p->dtype, &ta.tx));
    TPG_TRY(encode(wm, t->w, p->dtype, &ta.tw));
    tpg_gemm_y_map(p->m, p->n, p->ldy, &ym);
    TPG_TRY(encode(&ym, t->y, p->dtype, &ta.ty));
    params[0] = &ta;
  } else {
    params[0] = &ta.a;
  }
  TPG_TRY(tpg_kernel_function(L->kernel, L->smem_bytes, &k.f));
  return time_runs(t, run_kernel, &k, us);
}

int tpg_gemm_dev_time(void *ctx, const tpg_gemm_problem *p, const tpg_gemm_variant *v, const tpg_kernel_launch *launch,
                      const tpg_tma_encode *x_map, const tpg_tma_encode *w_map, double *us) {
  (void)v;
  if (!ctx || !p || !launch || !x_map || !w_map || !us) return 1;
  return time_one((tpg_gemm_dev_timer *)ctx, p, launch, x_map, w_map, us) != TPG_SUCCESS;
}
