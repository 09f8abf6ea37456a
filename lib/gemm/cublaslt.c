/* cublaslt.c - cuBLASLt as a GEMM family beside ours and CUTLASS's: the
 * family's operations (family.h) and its plans (cublaslt.h).
 *
 * Decision: a cuBLASLt GEMM node is one cublasLtMatmul whose algorithm is
 * fixed when the node is made (the heuristic's first answer, or the
 * tuner's pick among its first TPG_LT_ALGOS), stream-captured into a child
 * graph per node and captured again when a rebind moves one of its
 * pointers (cuGraphExecChildGraphNodeSetParams, as the NCCL and captured
 * kit nodes are rebound). Not its kernel taken out of the capture as a
 * kernel node whose parameters a rebind patches: cuBLASLt's Hopper kernels
 * take TMA descriptors that embed the operands' addresses, in a parameter
 * block whose layout is cuBLASLt's own and changes between versions, so
 * patching pointers there is not sound; capturing again is, and costs a
 * capture only on a rebind that moves this node's buffers.
 *
 * The heuristic is asked for algorithms that work with 16-byte aligned
 * pointers (its default assumes 256), so that whatever views a rebind binds
 * run the same kernels and the re-captured child keeps the graph's shape.
 * A plan's workspace is what its algorithm needs (often nothing, at most
 * TPG_LT_WORKSPACE_MAX), in the node's workspace lane (graphbuild/workspace.c:
 * scratch after the lane's boundary, shared with GEMMs that never run beside it).
 *
 * Epilogues: none, bias, bias + GELU (CUBLASLT_EPILOGUE_GELU_BIAS), the
 * residual as C with beta = 1 (with a bias or not), the fp32 partial (D in
 * fp32). SwiGLU in two steps, as PyTorch runs it: the 2N-wide product of
 * the gate and up rows in the operands' type (bf16 or f16) into the node's
 * workspace, then our kernel tpg_lt_swiglu (kernels/gemm/lt_swiglu.cu, which
 * adds the bias) into y, both in the one child graph. The product is
 * rounded to 16 bits, as PyTorch's is: 4 bytes of traffic an output pair,
 * where an fp32 product (the fused epilogue's single rounding) costs 8. Not SiLU
 * (cuBLASLt has no such epilogue): ours and CUTLASS run it. cuBLASLt is
 * loaded when the family is first considered (cublaslt_loader.h); without
 * it the family is absent.
 */
#include "lib/gemm/cublaslt.h"

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/gemm/cublaslt_loader.h"
#include "lib/gemm/family.h"

/* The descriptors of one GEMM. */
typedef struct lt_desc {
  cublasLtMatmulDesc_t op;
  cublasLtMatrixLayout_t a, b, c, d;
} lt_desc;

/* What the heuristic answered for a problem. */
typedef struct lt_answer {
  int count;
  cublasLtMatmulAlgo_t algo[TPG_LT_ALGOS];
  size_t workspace[TPG_LT_ALGOS];
} lt_answer;

struct tpg_lt_plan {
  const tpg_lt_table *t;
  cublasLtHandle_t h; /* shared by the plans of `ctx` (handle_get), or its own when ctx is NULL */
  const void *ctx;
  lt_desc d;
  cublasLtMatmulAlgo_t algo;
  size_t workspace; /* cuBLASLt's own, at a->workspace */
  int bias;         /* the epilogue reads a bias */
  int residual;     /* C is the residual, beta = 1 */
  int swiglu;       /* D is the 16-bit product at a->workspace + tmp_off */
  int m, n;         /* SwiGLU: y's rows and columns */
  size_t tmp_off;
  size_t total;     /* the workspace a->workspace must hold */
};

static int lt_can_implement(const tpg_gemm_problem *p, char *why, size_t whylen);

static int lt_fail(char *why, size_t whylen, const char *call, cublasStatus_t s) {
  return tpg_gemm_reject(why, whylen, "%s: %s (cuBLAS status %d)", call, tpg_lt_status_string(s), (int)s);
}

int tpg_lt_available(char *why, size_t whylen) {
  if (tpg_lt_load()) return 0;
  return tpg_gemm_reject(why, whylen, "%s", tpg_lt_why());
}

/* Whether p's epilogue adds a bias. */
static int has_bias(const tpg_gemm_problem *p) {
  return p->epilogue == TPG_EPI_BIAS || p->epilogue == TPG_EPI_BIAS_GELU ||
         (p->epilogue == TPG_EPI_RESIDUAL && p->residual_bias);
}

/* The GEMM cuBLASLt runs for p: p itself, or for SwiGLU the 2N-wide product
 * in p's type with no bias (tpg_lt_swiglu adds it), rows 2N apart. */
static tpg_gemm_problem inner(const tpg_gemm_problem *p) {
  tpg_gemm_problem q = *p;
  if (p->epilogue != TPG_EPI_SWIGLU) return q;
  q.n = 2 * p->n;
  q.epilogue = TPG_EPI_NONE;
  q.ldy = q.ldr = q.n;
  q.residual_bias = 0;
  return q;
}

static size_t round256(size_t b) { return (b + 255) & ~(size_t)255; }

/* SwiGLU's 16-bit product: bytes after cuBLASLt's own workspace (0 otherwise). */
static size_t tmp_bytes(const tpg_gemm_problem *p) {
  return p->epilogue == TPG_EPI_SWIGLU ? round256((size_t)p->m * 2 * (size_t)p->n * 2) : 0;
}

/* ---- descriptors ------------------------------------------------------------ */

static void desc_destroy(const tpg_lt_table *t, lt_desc *d) {
  if (d->op) t->cublasLtMatmulDescDestroy(d->op);
  if (d->a) t->cublasLtMatrixLayoutDestroy(d->a);
  if (d->b) t->cublasLtMatrixLayoutDestroy(d->b);
  if (d->c) t->cublasLtMatrixLayoutDestroy(d->c);
  if (d->d) t->cublasLtMatrixLayoutDestroy(d->d);
  memset(d, 0, sizeof *d);
}

/* The operation: D^T = W X^T in cuBLASLt's column-major terms (A = W with
 * op T, B = X), fp32 accumulation, the epilogue. The bias pointer is set to
 * a 16-byte aligned stand-in: the heuristic reads its alignment from it.
 * A node that leaves SMs to a collective (sm_reserve) gives cuBLASLt its
 * SM-count target: its Hopper kernels size their grids to the SMs they
 * expect, and would otherwise take the collective's too. */
static int op_create(const tpg_lt_table *t, const tpg_gemm_problem *p, lt_desc *d, char *why, size_t whylen) {
  const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  const cublasLtEpilogue_t e = p->epilogue == TPG_EPI_BIAS_GELU ? CUBLASLT_EPILOGUE_GELU_BIAS
                               : has_bias(p)                     ? CUBLASLT_EPILOGUE_BIAS
                                                                 : CUBLASLT_EPILOGUE_DEFAULT;
  const void *probe = (const void *)(uintptr_t)16;
  const int32_t sms = p->sm_target;
  cublasStatus_t s = t->cublasLtMatmulDescCreate(&d->op, CUBLAS_COMPUTE_32F, CUDA_R_32F);
  if (s != CUBLAS_STATUS_SUCCESS) return lt_fail(why, whylen, "cublasLtMatmulDescCreate", s);
  if ((s = t->cublasLtMatmulDescSetAttribute(d->op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta)) ||
      (s = t->cublasLtMatmulDescSetAttribute(d->op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb)) ||
      (s = t->cublasLtMatmulDescSetAttribute(d->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &e, sizeof e)) ||
      (has_bias(p) &&
       (s = t->cublasLtMatmulDescSetAttribute(d->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &probe, sizeof probe))) ||
      (sms > 0 &&
       (s = t->cublasLtMatmulDescSetAttribute(d->op, CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET, &sms, sizeof sms))))
    return lt_fail(why, whylen, "cublasLtMatmulDescSetAttribute", s);
  return 0;
}

/* The operation and the four layouts (W, X, C, D); all or none. */
static int desc_create(const tpg_lt_table *t, const tpg_gemm_problem *p, lt_desc *d, char *why, size_t whylen) {
  const cudaDataType_t in = p->dtype == TPG_KDT_BF16 ? CUDA_R_16BF : CUDA_R_16F;
  const cudaDataType_t out = p->epilogue == TPG_EPI_F32_PARTIAL ? CUDA_R_32F : in;
  const int residual = p->epilogue == TPG_EPI_RESIDUAL;
  cublasStatus_t s;
  memset(d, 0, sizeof *d);
  if (op_create(t, p, d, why, whylen)) goto fail;
  if ((s = t->cublasLtMatrixLayoutCreate(&d->a, in, (uint64_t)p->k, (uint64_t)p->n, p->ldw)) ||
      (s = t->cublasLtMatrixLayoutCreate(&d->b, in, (uint64_t)p->k, (uint64_t)p->m, p->ldx)) ||
      (s = t->cublasLtMatrixLayoutCreate(&d->c, out, (uint64_t)p->n, (uint64_t)p->m, residual ? p->ldr : p->ldy)) ||
      (s = t->cublasLtMatrixLayoutCreate(&d->d, out, (uint64_t)p->n, (uint64_t)p->m, p->ldy))) {
    lt_fail(why, whylen, "cublasLtMatrixLayoutCreate", s);
    goto fail;
  }
  return 0;
fail:
  desc_destroy(t, d);
  return 1;
}

/* ---- the heuristic -------------------------------------------------------------- */

/* Asks cuBLASLt (a handle of its own, in the current context) for up to
 * TPG_LT_ALGOS algorithms for p. */
static int ask(const tpg_lt_table *t, const tpg_gemm_problem *p, lt_answer *ans, char *why, size_t whylen) {
  static const uint32_t align = 16;
  const size_t wsmax = TPG_LT_WORKSPACE_MAX;
  cublasLtMatmulHeuristicResult_t res[TPG_LT_ALGOS];
  cublasLtMatmulPreference_t pref = NULL;
  cublasLtHandle_t h = NULL;
  lt_desc d;
  int found = 0, rc = 1;
  cublasStatus_t s = t->cublasLtCreate(&h);
  memset(&d, 0, sizeof d);
  if (s != CUBLAS_STATUS_SUCCESS) return lt_fail(why, whylen, "cublasLtCreate", s);
  if (desc_create(t, p, &d, why, whylen)) goto out;
  if ((s = t->cublasLtMatmulPreferenceCreate(&pref))) {
    lt_fail(why, whylen, "cublasLtMatmulPreferenceCreate", s);
    goto out;
  }
  if ((s = t->cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsmax,
                                                   sizeof wsmax)) ||
      (s = t->cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align,
                                                   sizeof align)) ||
      (s = t->cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &align,
                                                   sizeof align)) ||
      (s = t->cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &align,
                                                   sizeof align)) ||
      (s = t->cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align,
                                                   sizeof align))) {
    lt_fail(why, whylen, "cublasLtMatmulPreferenceSetAttribute", s);
    goto out;
  }
  memset(res, 0, sizeof res);
  s = t->cublasLtMatmulAlgoGetHeuristic(h, d.op, d.a, d.b, d.c, d.d, pref, TPG_LT_ALGOS, res, &found);
  if (s != CUBLAS_STATUS_SUCCESS) {
    lt_fail(why, whylen, "cublasLtMatmulAlgoGetHeuristic", s);
    goto out;
  }
  memset(ans, 0, sizeof *ans);
  for (int i = 0; i < found && i < TPG_LT_ALGOS; ++i) {
    if (res[i].state != CUBLAS_STATUS_SUCCESS || res[i].workspaceSize > wsmax) continue;
    ans->algo[ans->count] = res[i].algo;
    ans->workspace[ans->count++] = res[i].workspaceSize;
  }
  rc = ans->count ? 0
                  : tpg_gemm_reject(why, whylen, "cuBLASLt has no algorithm for %dx%dx%d epilogue %d", p->m, p->n,
                                    p->k, p->epilogue);
out:
  if (pref) t->cublasLtMatmulPreferenceDestroy(pref);
  desc_destroy(t, &d);
  t->cublasLtDestroy(h);
  return rc;
}

/* The answers, kept per problem (the selector asks at prepare and at fill,
 * the tuner for each candidate): a small process-wide cache. */
#define CACHE_SIZE 256
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static struct {
  tpg_gemm_problem p;
  lt_answer a;
} g_cache[CACHE_SIZE];
static int g_used, g_next;

void tpg_lt_cache_reset(void) {
  pthread_mutex_lock(&g_mu);
  g_used = g_next = 0;
  pthread_mutex_unlock(&g_mu);
}

/* What cuBLASLt's answer depends on: not our stream-K setting, and the
 * residual's bias only with a residual. */
static tpg_gemm_problem key_of(const tpg_gemm_problem *p) {
  tpg_gemm_problem k = *p;
  k.streamk = 0;
  if (k.epilogue != TPG_EPI_RESIDUAL) k.residual_bias = 0;
  return k;
}

static int answer(const tpg_gemm_problem *p, lt_answer *ans, char *why, size_t whylen) {
  const tpg_lt_table *t = tpg_lt_load();
  const tpg_gemm_problem q = inner(p), k = key_of(&q);
  if (!t) return tpg_gemm_reject(why, whylen, "%s", tpg_lt_why());
  pthread_mutex_lock(&g_mu);
  for (int i = 0; i < g_used; ++i)
    if (!memcmp(&g_cache[i].p, &k, sizeof k)) {
      *ans = g_cache[i].a;
      pthread_mutex_unlock(&g_mu);
      return 0;
    }
  pthread_mutex_unlock(&g_mu);
  /* outside the lock: two threads asking for one problem both ask, harmlessly */
  if (ask(t, &k, ans, why, whylen)) return 1;
  pthread_mutex_lock(&g_mu);
  g_cache[g_next].p = k;
  g_cache[g_next].a = *ans;
  g_next = (g_next + 1) % CACHE_SIZE;
  if (g_used < CACHE_SIZE) ++g_used;
  pthread_mutex_unlock(&g_mu);
  return 0;
}

/* ---- plans ---------------------------------------------------------------------- */

/* Plans made in one CUDA context share one cuBLASLt handle, counted by
 * its plans and destroyed with the last: a graph set holds thousands of
 * cuBLASLt nodes, and each cublasLtCreate queries the device again. One
 * handle serves every thread (cuBLASLt keeps no stream or mode in it; a
 * plan's state is in its descriptors). Past TPG_LT_CONTEXTS contexts a
 * plan gets a handle of its own. */
#define TPG_LT_CONTEXTS 16
static struct {
  const void *ctx;
  cublasLtHandle_t h;
  int refs;
} g_handles[TPG_LT_CONTEXTS];

/* *h for a plan of ctx; *ctx is set to NULL when the handle is the plan's own. */
static cublasStatus_t handle_get(const tpg_lt_table *t, const void **ctx, cublasLtHandle_t *h) {
  int free_slot = -1;
  cublasStatus_t s;
  if (!*ctx) return t->cublasLtCreate(h);
  pthread_mutex_lock(&g_mu);
  for (int i = 0; i < TPG_LT_CONTEXTS; ++i) {
    if (g_handles[i].refs > 0 && g_handles[i].ctx == *ctx) {
      g_handles[i].refs++;
      *h = g_handles[i].h;
      pthread_mutex_unlock(&g_mu);
      return CUBLAS_STATUS_SUCCESS;
    }
    if (g_handles[i].refs == 0 && free_slot < 0) free_slot = i;
  }
  s = t->cublasLtCreate(h);
  if (s == CUBLAS_STATUS_SUCCESS && free_slot >= 0) {
    g_handles[free_slot].ctx = *ctx;
    g_handles[free_slot].h = *h;
    g_handles[free_slot].refs = 1;
  } else {
    *ctx = NULL;
  }
  pthread_mutex_unlock(&g_mu);
  return s;
}

static void handle_put(const tpg_lt_table *t, const void *ctx, cublasLtHandle_t h) {
  if (!ctx) {
    t->cublasLtDestroy(h);
    return;
  }
  pthread_mutex_lock(&g_mu);
  for (int i = 0; i < TPG_LT_CONTEXTS; ++i)
    if (g_handles[i].refs > 0 && g_handles[i].ctx == ctx && g_handles[i].h == h) {
      if (--g_handles[i].refs == 0) t->cublasLtDestroy(h);
      break;
    }
  pthread_mutex_unlock(&g_mu);
}

int tpg_lt_plan_create(const tpg_gemm_problem *p, int algo, const void *ctx, tpg_lt_plan **out, char *why,
                       size_t whylen) {
  const tpg_lt_table *t = tpg_lt_load();
  tpg_lt_plan *pl;
  lt_answer ans;
  if (!out) return tpg_gemm_reject(why, whylen, "out is NULL");
  *out = NULL;
  if (!t) return tpg_gemm_reject(why, whylen, "%s", tpg_lt_why());
  if (lt_can_implement(p, why, whylen) || answer(p, &ans, why, whylen)) return 1;
  if (algo < 0 || algo >= ans.count)
    return tpg_gemm_reject(why, whylen, "cuBLASLt answer %d: its heuristic gave %d for %dx%dx%d", algo, ans.count,
                           p->m, p->n, p->k);
  if (!(pl = calloc(1, sizeof *pl))) return tpg_gemm_reject(why, whylen, "out of host memory");
  pl->t = t;
  pl->algo = ans.algo[algo];
  pl->workspace = ans.workspace[algo];
  pl->bias = has_bias(p);
  pl->residual = p->epilogue == TPG_EPI_RESIDUAL;
  pl->swiglu = p->epilogue == TPG_EPI_SWIGLU;
  pl->m = p->m, pl->n = p->n;
  pl->tmp_off = round256(pl->workspace);
  pl->total = pl->swiglu ? pl->tmp_off + tmp_bytes(p) : pl->workspace;
  pl->ctx = ctx;
  cublasStatus_t s = handle_get(t, &pl->ctx, &pl->h);
  if (s != CUBLAS_STATUS_SUCCESS) {
    free(pl);
    return lt_fail(why, whylen, "cublasLtCreate", s);
  }
  const tpg_gemm_problem q = inner(p);
  if (desc_create(t, &q, &pl->d, why, whylen)) {
    handle_put(t, pl->ctx, pl->h);
    free(pl);
    return 1;
  }
  *out = pl;
  return 0;
}

size_t tpg_lt_plan_workspace(const tpg_lt_plan *pl) { return pl ? pl->total : 0; }

int tpg_lt_plan_run(tpg_lt_plan *pl, const tpg_gemm_args *a, void *stream, char *why, size_t whylen) {
  const float one = 1.0f, beta = pl->residual ? 1.0f : 0.0f;
  cublasStatus_t s;
  if (pl->bias) {
    if (!a->bias) return tpg_gemm_reject(why, whylen, "the plan's epilogue adds a bias, and bias is NULL");
    s = pl->t->cublasLtMatmulDescSetAttribute(pl->d.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &a->bias, sizeof a->bias);
    if (s != CUBLAS_STATUS_SUCCESS) return lt_fail(why, whylen, "cublasLtMatmulDescSetAttribute(BIAS_POINTER)", s);
  }
  if (pl->residual && !a->residual) return tpg_gemm_reject(why, whylen, "the plan adds a residual, and it is NULL");
  if (pl->swiglu && !a->workspace)
    return tpg_gemm_reject(why, whylen, "the plan's SwiGLU product goes to the workspace, and it is NULL");
  void *d = pl->swiglu ? (char *)a->workspace + pl->tmp_off : a->y;
  s = pl->t->cublasLtMatmul(pl->h, pl->d.op, &one, a->w, pl->d.a, a->x, pl->d.b, &beta,
                            pl->residual ? a->residual : d, pl->d.c, d, pl->d.d, &pl->algo,
                            pl->workspace ? a->workspace : NULL, pl->workspace, (cudaStream_t)stream);
  if (s != CUBLAS_STATUS_SUCCESS) return lt_fail(why, whylen, "cublasLtMatmul", s);
  return 0;
}

int tpg_lt_plan_post(const tpg_lt_plan *pl, const tpg_gemm_args *a, tpg_lt_post *out) {
  memset(out, 0, sizeof *out);
  if (!pl || !pl->swiglu) return 0;
  out->kernel = "tpg_lt_swiglu";
  out->args.t = (const char *)a->workspace + pl->tmp_off;
  out->args.y = a->y;
  out->args.bias = a->bias;
  out->args.m = pl->m, out->args.n = pl->n, out->args.ldt = 2 * pl->n, out->args.ldy = a->ldy;
  out->args.dtype = a->dtype;
  out->grid[0] = (unsigned)((pl->n + 1023) / 1024);
  out->grid[1] = (unsigned)(pl->m < 65535 ? pl->m : 65535);
  out->grid[2] = 1;
  out->block[0] = 256, out->block[1] = out->block[2] = 1;
  return 1;
}

void tpg_lt_plan_destroy(tpg_lt_plan *pl) {
  if (!pl) return;
  desc_destroy(pl->t, &pl->d);
  handle_put(pl->t, pl->ctx, pl->h);
  free(pl);
}

/* ---- the family's operations (family.h) ------------------------------------------ */

static int lt_available(char *why, size_t whylen) { return tpg_lt_available(why, whylen); }

static int lt_can_implement(const tpg_gemm_problem *p, char *why, size_t whylen) {
  const int e = p->epilogue;
  if (tpg_lt_available(why, whylen)) return 1;
  if (p->dtype != TPG_KDT_BF16 && p->dtype != TPG_KDT_F16)
    return tpg_gemm_reject(why, whylen, "dtype=%d: the cuBLASLt family takes F16 or BF16", p->dtype);
  if (e != TPG_EPI_NONE && e != TPG_EPI_BIAS && e != TPG_EPI_BIAS_GELU && e != TPG_EPI_RESIDUAL &&
      e != TPG_EPI_F32_PARTIAL && e != TPG_EPI_SWIGLU)
    return tpg_gemm_reject(why, whylen, "epilogue=%d: not one cuBLASLt fuses (SiLU is ours)", e);
  if (e == TPG_EPI_SWIGLU && (p->n % 4 || p->m < 1 || (size_t)p->m * 2 * (size_t)p->n * 2 > TPG_LT_SWIGLU_MAX))
    return tpg_gemm_reject(why, whylen,
                           "SwiGLU with n=%d, m=%d: the cuBLASLt family needs n a multiple of 4 and the 16-bit "
                           "product (m x 2n) within %zu MiB", p->n, p->m, TPG_LT_SWIGLU_MAX >> 20);
  if (p->fold) return tpg_gemm_reject(why, whylen, "fold=%d: a folded RMSNorm is our decode GEMV's", p->fold);
  if (p->ldx < p->k || p->ldw < p->k || p->ldy < p->n || p->ldr < p->n || p->ldx % 8 || p->ldw % 8 ||
      p->ldy % 8 || p->ldr % 8)
    return tpg_gemm_reject(why, whylen, "ldx/ldw/ldy/ldr must be multiples of 8, >= k, k, n, n (16-byte rows)");
  return 0;
}

static int lt_owns(const tpg_gemm_variant *v) { return v->kind == TPG_GEMM_VAR_CUBLASLT; }

/* Its rule: the heuristic's first answer, as PyTorch calls cuBLASLt; for
 * SwiGLU only from the M where the zoo had the two steps faster than our
 * fused kernel (gemm_check.sh zoo at bac9fac, the bf16 product, H100, 23
 * SwiGLU shapes a bucket: ours took 0.984 / 1.016 / 1.080 / 1.085 / 1.067 /
 * 1.034 of the node's time at M = 64 / 128 / 256 / 512 / 1024 / 4096; with
 * the fp32 product before it, 0.977 / 1.013 / 1.080 / 1.066 / 1.025 /
 * 0.978): mode TPG_LT_AUTO_BAND, AUTO's table row. Forced
 * (TPG_GEMM_FAMILY=cublaslt) it runs SwiGLU at any m; the tuner times it at
 * any m. */
#define TPG_LT_SWIGLU_M_MIN 128
static int lt_rule(const tpg_gemm_problem *p, int kernel, int mode, tpg_gemm_variant *v) {
  (void)kernel;
  if (mode == TPG_LT_AUTO_BAND && p->epilogue == TPG_EPI_SWIGLU && p->m < TPG_LT_SWIGLU_M_MIN) return 1;
  memset(v, 0, sizeof *v);
  v->kind = TPG_GEMM_VAR_CUBLASLT;
  return 0;
}

/* The heuristic's first answers (fill refuses those it did not give). */
static int lt_candidates(const tpg_gemm_problem *p, tpg_gemm_variant *list, int cap) {
  int n = 0;
  (void)p;
  for (int i = 0; i < TPG_LT_ALGOS && n < cap; ++i, ++n)
    if (list) {
      memset(&list[n], 0, sizeof list[n]);
      list[n].kind = TPG_GEMM_VAR_CUBLASLT;
      list[n].lt_algo = i;
    }
  return n;
}

static int lt_fill(const tpg_gemm_problem *p, const tpg_gemm_variant *v, tpg_kernel_launch *out,
                   tpg_tma_encode *x_map, tpg_tma_encode *w_map, char *why, size_t whylen) {
  lt_answer ans;
  if (x_map) memset(x_map, 0, sizeof *x_map);
  if (w_map) memset(w_map, 0, sizeof *w_map);
  if (answer(p, &ans, why, whylen)) return 1;
  if (v->lt_algo < 0 || v->lt_algo >= ans.count)
    return tpg_gemm_reject(why, whylen, "variant cublaslt_a%d: cuBLASLt's heuristic gave %d answers for %dx%dx%d",
                           v->lt_algo, ans.count, p->m, p->n, p->k);
  memset(out, 0, sizeof *out);
  out->kernel = "cublasLt"; /* not ours to launch: the node runs the plan */
  out->grid[0] = out->grid[1] = out->grid[2] = 1;
  out->block[0] = out->block[1] = out->block[2] = 1;
  out->split_k = 1;
  out->workspace_bytes = round256(ans.workspace[v->lt_algo]) + tmp_bytes(p);
  out->family = TPG_GEMM_FAMILY_CUBLASLT;
  out->lt_algo = v->lt_algo;
  return 0;
}

static int lt_workspace_size(const tpg_gemm_problem *p, const tpg_gemm_variant *v, size_t *bytes, char *why,
                             size_t whylen) {
  tpg_kernel_launch l;
  if (lt_fill(p, v, &l, NULL, NULL, why, whylen)) return 1;
  *bytes = l.workspace_bytes;
  return 0;
}

static int lt_variant_name(const tpg_gemm_variant *v, char *buf, size_t len) {
  const int r = v->lt_algo ? snprintf(buf, len, "cublaslt_a%d", v->lt_algo) : snprintf(buf, len, "cublaslt");
  return v->lt_algo < 0 || v->lt_algo >= TPG_LT_ALGOS || r < 0 || (size_t)r >= len;
}

static int lt_variant_parse(const char *s, tpg_gemm_variant *v) {
  int a = 0;
  if (strcmp(s, "cublaslt") && (strncmp(s, "cublaslt_a", 10) || s[10] < '1' || s[10] >= '0' + TPG_LT_ALGOS ||
                                s[11] != '\0'))
    return 1;
  if (s[8] == '_') a = s[10] - '0';
  memset(v, 0, sizeof *v);
  v->kind = TPG_GEMM_VAR_CUBLASLT;
  v->lt_algo = a;
  return 0;
}

const tpg_gemm_family_ops tpg_gemm_family_cublaslt = {
    .id = TPG_GEMM_FAMILY_CUBLASLT,
    .name = "cublaslt",
    .available = lt_available,
    .can_implement = lt_can_implement,
    .owns = lt_owns,
    .rule = lt_rule,
    .candidates = lt_candidates,
    .workspace_size = lt_workspace_size,
    .fill = lt_fill,
    .variant_name = lt_variant_name,
    .variant_parse = lt_variant_parse,
};
