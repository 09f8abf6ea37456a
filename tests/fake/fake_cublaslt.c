/* fake_cublaslt.c - the stand-in cuBLASLt: the calls tpgraph's cuBLASLt
 * GEMM family makes (lib/gemm/cublaslt.c), on the fake's model.
 *
 * Handles, matmul descriptors, layouts and preferences are live objects
 * (a test fails if one is left behind), every call but the destroys and
 * the version / status text is a numbered failure point, and a matmul is a
 * kernel launched on the caller's stream ("lt_matmul", one of the fake's C
 * kernels): captured when the stream captures, checked against the live
 * allocations, and computed, so a test can check the product after a
 * rebind (a child graph captured with old pointers writes old buffers).
 * The heuristic answers three algorithms needing 0, 1 MiB and 8 MiB of
 * workspace, which a matmul leaves dirty (0x5A: scratch, as cuBLASLt's
 * is); a matmul given less workspace than its algorithm needs, a
 * bias epilogue without a bias pointer, or layouts that do not fit the
 * operation is a violation and an error. Only the operation tpgraph uses
 * is modelled: D = act(alpha op(A) op(B) + beta C + bias) with op(A) = A^T,
 * op(B) = B, A and B bf16 or f16, C and D the same type or fp32.
 * The shim (shim.c) forwards libcublasLt's names here through
 * tpgfake_entry_cublaslt, as it does NCCL's.
 */
#define _GNU_SOURCE
#include <cublasLt.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/tpg_kargs.h"
#include "tests/fake/fake_entry.h"
#include "tests/fake/tpgfake.h"

enum { LT_HANDLE = 0x4c54483u, LT_DESC, LT_LAYOUT, LT_PREF };

typedef struct lt_obj {
  unsigned magic;
  /* matmul descriptor */
  cublasComputeType_t compute;
  cudaDataType_t scale;
  int32_t transa, transb;
  uint32_t epilogue;
  const void *bias;
  int32_t sm_target; /* 0: none set */
  /* layout */
  cudaDataType_t type;
  uint64_t rows, cols;
  int64_t ld;
  /* preference */
  size_t max_ws;
} lt_obj;

static const size_t kAlgoWorkspace[3] = {0, (size_t)1 << 20, (size_t)8 << 20};

#define LT_ENTER(name)                                                                                 \
  cublasStatus_t r_ = CUBLAS_STATUS_SUCCESS;                                                           \
  fk_lock();                                                                                           \
  if (fk_inject(name)) {                                                                               \
    r_ = strstr(name, "Create") ? CUBLAS_STATUS_ALLOC_FAILED : CUBLAS_STATUS_INTERNAL_ERROR;            \
    goto out;                                                                                          \
  }
#define LT_FAIL(code) \
  do {                \
    r_ = (code);      \
    goto out;         \
  } while (0)
#define LT_LEAVE \
  out:           \
  fk_unlock();   \
  return r_;

/* The object behind a handle of the given kind, or NULL (a violation). */
static lt_obj *obj(const void *h, unsigned magic, const char *fn) {
  if (!h || !fk_live_has(FK_LT, h) || ((const lt_obj *)h)->magic != magic) {
    fk_violation("%s: %p is not a live cuBLASLt object of the kind it takes", fn, h);
    return NULL;
  }
  return (lt_obj *)h;
}

static cublasStatus_t make(unsigned magic, void **out) {
  lt_obj *o = calloc(1, sizeof *o);
  if (!o) return CUBLAS_STATUS_ALLOC_FAILED;
  o->magic = magic;
  fk_live_add(FK_LT, o);
  *out = o;
  return CUBLAS_STATUS_SUCCESS;
}

static void drop(void *h, unsigned magic, const char *fn) {
  fk_lock();
  if (h && obj(h, magic, fn)) {
    fk_live_del(FK_LT, h);
    free(h);
  }
  fk_unlock();
}

size_t cublasLtGetVersion(void) { return 130000; }
const char *cublasLtGetStatusString(cublasStatus_t s) { return s ? "fake cuBLASLt failure" : "success"; }

cublasStatus_t cublasLtCreate(cublasLtHandle_t *h) {
  LT_ENTER("cublasLtCreate");
  if (!fk_current()) fk_violation("cublasLtCreate without a current context");
  r_ = make(LT_HANDLE, (void **)h);
  if (r_ == CUBLAS_STATUS_SUCCESS) fk_counters[TPGFAKE_C_LT_HANDLES]++;
  LT_LEAVE
}
cublasStatus_t cublasLtDestroy(cublasLtHandle_t h) {
  drop(h, LT_HANDLE, "cublasLtDestroy");
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *d, cublasComputeType_t compute, cudaDataType_t scale) {
  LT_ENTER("cublasLtMatmulDescCreate");
  r_ = make(LT_DESC, (void **)d);
  if (r_ == CUBLAS_STATUS_SUCCESS) {
    lt_obj *o = (lt_obj *)*d;
    o->compute = compute, o->scale = scale, o->epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  }
  LT_LEAVE
}
cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t d) {
  drop(d, LT_DESC, "cublasLtMatmulDescDestroy");
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t attr,
                                              const void *buf, size_t size) {
  LT_ENTER("cublasLtMatmulDescSetAttribute");
  lt_obj *o = obj(d, LT_DESC, "cublasLtMatmulDescSetAttribute");
  if (!o || !buf) LT_FAIL(CUBLAS_STATUS_INVALID_VALUE);
  if (attr == CUBLASLT_MATMUL_DESC_TRANSA && size == 4) memcpy(&o->transa, buf, 4);
  else if (attr == CUBLASLT_MATMUL_DESC_TRANSB && size == 4) memcpy(&o->transb, buf, 4);
  else if (attr == CUBLASLT_MATMUL_DESC_EPILOGUE && size == 4) memcpy(&o->epilogue, buf, 4);
  else if (attr == CUBLASLT_MATMUL_DESC_BIAS_POINTER && size == sizeof(void *)) memcpy(&o->bias, buf, size);
  else if (attr == CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET && size == 4) {
    int32_t v;
    memcpy(&v, buf, 4);
    if (v < 0) LT_FAIL(CUBLAS_STATUS_INVALID_VALUE);
    o->sm_target = v;
  } else LT_FAIL(CUBLAS_STATUS_NOT_SUPPORTED);
  LT_LEAVE
}

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *l, cudaDataType type, uint64_t rows, uint64_t cols,
                                          int64_t ld) {
  LT_ENTER("cublasLtMatrixLayoutCreate");
  if (ld < (int64_t)rows) LT_FAIL(CUBLAS_STATUS_INVALID_VALUE);
  r_ = make(LT_LAYOUT, (void **)l);
  if (r_ == CUBLAS_STATUS_SUCCESS) {
    lt_obj *o = (lt_obj *)*l;
    o->type = type, o->rows = rows, o->cols = cols, o->ld = ld;
  }
  LT_LEAVE
}
cublasStatus_t cublasLtMatrixLayoutDestroy(const cublasLtMatrixLayout_t l) {
  drop(l, LT_LAYOUT, "cublasLtMatrixLayoutDestroy");
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *p) {
  LT_ENTER("cublasLtMatmulPreferenceCreate");
  r_ = make(LT_PREF, (void **)p);
  LT_LEAVE
}
cublasStatus_t cublasLtMatmulPreferenceDestroy(const cublasLtMatmulPreference_t p) {
  drop(p, LT_PREF, "cublasLtMatmulPreferenceDestroy");
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t p,
                                                    cublasLtMatmulPreferenceAttributes_t attr, const void *buf,
                                                    size_t size) {
  LT_ENTER("cublasLtMatmulPreferenceSetAttribute");
  lt_obj *o = obj(p, LT_PREF, "cublasLtMatmulPreferenceSetAttribute");
  if (!o || !buf) LT_FAIL(CUBLAS_STATUS_INVALID_VALUE);
  if (attr == CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES && size == sizeof(uint64_t)) memcpy(&o->max_ws, buf, size);
  LT_LEAVE
}

static int is_in(cudaDataType_t t) { return t == CUDA_R_16BF || t == CUDA_R_16F; }

/* Whether the descriptors describe the operation tpgraph uses: A^T B with
 * A k x M and B k x N, C and D M x N, types as above; 0 or a violation. */
static int shapes_ok(const lt_obj *op, const lt_obj *a, const lt_obj *b, const lt_obj *c, const lt_obj *d,
                     const char *fn) {
  const int ok = op->transa == CUBLAS_OP_T && op->transb == CUBLAS_OP_N && op->compute == CUBLAS_COMPUTE_32F &&
                 op->scale == CUDA_R_32F && is_in(a->type) && b->type == a->type && c->type == d->type &&
                 (d->type == a->type || d->type == CUDA_R_32F) && a->rows == b->rows && c->rows == a->cols &&
                 d->rows == a->cols && c->cols == b->cols && d->cols == b->cols;
  if (!ok) fk_violation("%s: descriptors that do not describe D = act(A^T B + C + bias) as tpgraph asks it", fn);
  return ok;
}

cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t h, cublasLtMatmulDesc_t op, cublasLtMatrixLayout_t A,
                                              cublasLtMatrixLayout_t B, cublasLtMatrixLayout_t C,
                                              cublasLtMatrixLayout_t D, cublasLtMatmulPreference_t pref,
                                              int requested, cublasLtMatmulHeuristicResult_t results[], int *found) {
  static const char fn[] = "cublasLtMatmulAlgoGetHeuristic";
  LT_ENTER(fn);
  lt_obj *po = obj(pref, LT_PREF, fn), *oo = obj(op, LT_DESC, fn), *a = obj(A, LT_LAYOUT, fn), *b = obj(B, LT_LAYOUT, fn),
         *c = obj(C, LT_LAYOUT, fn), *d = obj(D, LT_LAYOUT, fn);
  if (!obj(h, LT_HANDLE, fn) || !po || !oo || !a || !b || !c || !d || !results || !found || requested < 1)
    LT_FAIL(CUBLAS_STATUS_INVALID_VALUE);
  if (!fk_current()) fk_violation("%s without a current context", fn);
  if (!shapes_ok(oo, a, b, c, d, fn)) LT_FAIL(CUBLAS_STATUS_NOT_SUPPORTED);
  *found = 0;
  for (int i = 0; i < 3 && i < requested; i++) {
    if (kAlgoWorkspace[i] > po->max_ws) continue;
    memset(&results[*found], 0, sizeof results[*found]);
    results[*found].algo.data[0] = (uint64_t)i;
    results[*found].algo.data[1] = kAlgoWorkspace[i];
    results[*found].workspaceSize = kAlgoWorkspace[i];
    results[*found].state = CUBLAS_STATUS_SUCCESS;
    results[*found].wavesCount = 1.0f;
    ++*found;
  }
  if (!*found) LT_FAIL(CUBLAS_STATUS_NOT_SUPPORTED);
  LT_LEAVE
}

/* ---- the matmul, as a C kernel ---- */

static float h2f(uint16_t h) { /* IEEE half */
  const uint32_t s = (uint32_t)(h >> 15) << 31, e = (h >> 10) & 31, m = h & 1023;
  uint32_t u;
  if (e == 0) {
    float f = ldexpf((float)m, -24);
    return s ? -f : f;
  }
  u = e == 31 ? s | 0x7f800000u | (m << 13) : s | ((e + 112) << 23) | (m << 13);
  float f;
  memcpy(&f, &u, 4);
  return f;
}
static uint16_t f2h(float f) {
  const uint16_t s = signbit(f) ? 0x8000 : 0;
  const float a = fabsf(f);
  if (!(a == a)) return 0x7e00;
  if (a >= 65520.0f) return s | 0x7c00;
  if (a < ldexpf(1.0f, -14)) return s | (uint16_t)lrintf(ldexpf(a, 24));
  int e;
  const float fr = frexpf(a, &e); /* a = fr 2^e, fr in [0.5, 1) */
  long mant = lrintf(ldexpf(fr, 11)); /* 1024..2048 */
  if (mant == 2048) mant = 1024, e++;
  return s | (uint16_t)(((e + 14) << 10) | (mant - 1024));
}
static float bf2f(uint16_t b) {
  const uint32_t u = (uint32_t)b << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}
static uint16_t f2bf(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fc0;
  u += 0x7fffu + ((u >> 16) & 1);
  return (uint16_t)(u >> 16);
}
static float load(const void *p, size_t i, int type) {
  if (type == CUDA_R_32F) return ((const float *)p)[i];
  const uint16_t v = ((const uint16_t *)p)[i];
  return type == CUDA_R_16BF ? bf2f(v) : h2f(v);
}
static void store(void *p, size_t i, int type, float f) {
  if (type == CUDA_R_32F) ((float *)p)[i] = f;
  else ((uint16_t *)p)[i] = type == CUDA_R_16BF ? f2bf(f) : f2h(f);
}
static size_t esize(int type) { return type == CUDA_R_32F ? 4 : 2; }

void fk_lt_matmul(void **p) {
  const fk_lt_kargs *a = (const fk_lt_kargs *)p[0];
  fk_counters[TPGFAKE_C_LT_MATMUL]++;
  if (a->sm_target > 0) fk_counters[TPGFAKE_C_LT_SM_TARGET]++;
  if (a->sm_target > 132) fk_violation("lt_matmul: an SM-count target of %d, past the device's 132", a->sm_target);
  const size_t ei = 2, eo = esize(a->out_type);
  const int bias = a->epilogue == CUBLASLT_EPILOGUE_BIAS || a->epilogue == CUBLASLT_EPILOGUE_GELU_BIAS;
  if (!fk_check_range((uintptr_t)a->a, ((size_t)(a->m - 1) * a->lda + a->k) * ei, "lt_matmul: A") ||
      !fk_check_range((uintptr_t)a->b, ((size_t)(a->n - 1) * a->ldb + a->k) * ei, "lt_matmul: B") ||
      !fk_check_range((uintptr_t)a->d, ((size_t)(a->n - 1) * a->ldd + a->m) * eo, "lt_matmul: D") ||
      (a->beta != 0 && !fk_check_range((uintptr_t)a->c, ((size_t)(a->n - 1) * a->ldc + a->m) * eo, "lt_matmul: C")) ||
      (bias && !fk_check_range((uintptr_t)a->bias, (size_t)a->m * ei, "lt_matmul: bias")) ||
      (a->ws_bytes && !fk_check_range((uintptr_t)a->ws, a->ws_bytes, "lt_matmul: workspace")))
    return;
  for (int j = 0; j < a->n; j++)
    for (int i = 0; i < a->m; i++) {
      double s = 0;
      for (int q = 0; q < a->k; q++)
        s += (double)load(a->a, (size_t)i * a->lda + q, a->in_type) * load(a->b, (size_t)j * a->ldb + q, a->in_type);
      float v = a->alpha * (float)s;
      if (a->beta != 0) v += a->beta * load(a->c, (size_t)j * a->ldc + i, a->out_type);
      if (bias) v += load(a->bias, (size_t)i, a->in_type);
      if (a->epilogue == CUBLASLT_EPILOGUE_GELU_BIAS)
        v = 0.5f * v * (1.0f + tanhf(0.7978845608f * (v + 0.044715f * v * v * v)));
      store(a->d, (size_t)j * a->ldd + i, a->out_type, v);
    }
  /* cuBLASLt's workspace is scratch: left dirty, so that a workspace shared
   * with a kernel that keeps counters shows whether they were covered */
  fk_ws_record(a->ws);
  if (a->ws_bytes) memset(a->ws, 0x5A, a->ws_bytes);
}

/* tpg_lt_swiglu (kernels/gemm/lt_swiglu.cu), the step after a SwiGLU
 * plan's matmul, computed as the kernel does (fake_exec.c checked the
 * ranges). */
void fk_lt_swiglu(const tpg_swiglu_args *a) {
  const int type = a->dtype == TPG_KDT_F16 ? CUDA_R_16F : CUDA_R_16BF;
  for (int r = 0; r < a->m; r++)
    for (int c = 0; c < a->n; c++) {
      const float bg = a->bias ? load(a->bias, (size_t)c, type) : 0.f;
      const float bu = a->bias ? load(a->bias, (size_t)a->n + c, type) : 0.f;
      const float g = load(a->t, (size_t)r * a->ldt + c, type) + bg, u = load(a->t, (size_t)r * a->ldt + a->n + c, type) + bu;
      store(a->y, (size_t)r * a->ldy + c, type, g / (1.f + expf(-g)) * u);
    }
}

/* Validates the call under the lock and fills the kernel's arguments. */
static cublasStatus_t matmul_args(cublasLtHandle_t h, cublasLtMatmulDesc_t op, const void *alpha, const void *A,
                                  cublasLtMatrixLayout_t Ad, const void *B, cublasLtMatrixLayout_t Bd,
                                  const void *beta, const void *C, cublasLtMatrixLayout_t Cd, void *D,
                                  cublasLtMatrixLayout_t Dd, const cublasLtMatmulAlgo_t *algo, void *ws,
                                  size_t ws_bytes, fk_lt_kargs *k) {
  static const char fn[] = "cublasLtMatmul";
  lt_obj *o = obj(op, LT_DESC, fn), *a = obj(Ad, LT_LAYOUT, fn), *b = obj(Bd, LT_LAYOUT, fn), *c = obj(Cd, LT_LAYOUT, fn),
         *d = obj(Dd, LT_LAYOUT, fn);
  if (!obj(h, LT_HANDLE, fn) || !o || !a || !b || !c || !d || !alpha || !beta || !algo) return CUBLAS_STATUS_INVALID_VALUE;
  if (!fk_current()) fk_violation("%s without a current context", fn);
  if (!shapes_ok(o, a, b, c, d, fn)) return CUBLAS_STATUS_NOT_SUPPORTED;
  const int bias = o->epilogue == CUBLASLT_EPILOGUE_BIAS || o->epilogue == CUBLASLT_EPILOGUE_GELU_BIAS;
  if ((bias && !o->bias) || algo->data[0] > 2 || ws_bytes < algo->data[1] || (algo->data[1] && !ws) ||
      ((uintptr_t)A | (uintptr_t)B | (uintptr_t)C | (uintptr_t)D | (uintptr_t)o->bias) % 16) {
    fk_violation("%s: a bias epilogue without a bias, %zu bytes of workspace where the algorithm needs %llu, or an "
                 "operand not 16-byte aligned", fn, ws_bytes, (unsigned long long)algo->data[1]);
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  memset(k, 0, sizeof *k);
  k->a = A, k->b = B, k->c = C, k->d = D, k->bias = o->bias, k->ws = ws, k->ws_bytes = algo->data[1];
  k->lda = a->ld, k->ldb = b->ld, k->ldc = c->ld, k->ldd = d->ld;
  k->m = (int32_t)a->cols, k->n = (int32_t)b->cols, k->k = (int32_t)a->rows;
  k->in_type = a->type, k->out_type = d->type, k->epilogue = (int32_t)o->epilogue, k->sm_target = o->sm_target;
  memcpy(&k->alpha, alpha, 4);
  memcpy(&k->beta, beta, 4);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t h, cublasLtMatmulDesc_t op, const void *alpha, const void *A,
                              cublasLtMatrixLayout_t Ad, const void *B, cublasLtMatrixLayout_t Bd, const void *beta,
                              const void *C, cublasLtMatrixLayout_t Cd, void *D, cublasLtMatrixLayout_t Dd,
                              const cublasLtMatmulAlgo_t *algo, void *ws, size_t ws_bytes, cudaStream_t stream) {
  fk_lt_kargs k;
  LT_ENTER("cublasLtMatmul");
  r_ = matmul_args(h, op, alpha, A, Ad, B, Bd, beta, C, Cd, D, Dd, algo, ws, ws_bytes, &k);
  fk_unlock();
  if (r_ != CUBLAS_STATUS_SUCCESS) return r_;
  /* the launch, outside the lock (it takes it): a failure point of its own */
  void *params[1] = {&k};
  const CUlaunchConfig cfg = {.gridDimX = 1, .gridDimY = 1, .gridDimZ = 1, .blockDimX = 1, .blockDimY = 1,
                              .blockDimZ = 1, .hStream = (CUstream)stream};
  fk_lock();
  const fk_kernel *kern = fk_kernel_find("lt_matmul");
  fk_unlock();
  return fk_cuLaunchKernelEx(&cfg, (CUfunction)(uintptr_t)kern, params, NULL) == CUDA_SUCCESS
             ? CUBLAS_STATUS_SUCCESS
             : CUBLAS_STATUS_EXECUTION_FAILED;
out:
  fk_unlock();
  return r_;
}

void *tpgfake_entry_cublaslt(const char *name);
void *tpgfake_entry_cublaslt(const char *name) {
#define FK_LT_ENTRY(f) {#f, (void *)f}
  static const struct {
    const char *name;
    void *fn;
  } table[] = {
      FK_LT_ENTRY(cublasLtGetVersion),           FK_LT_ENTRY(cublasLtGetStatusString),
      FK_LT_ENTRY(cublasLtCreate),               FK_LT_ENTRY(cublasLtDestroy),
      FK_LT_ENTRY(cublasLtMatmulDescCreate),     FK_LT_ENTRY(cublasLtMatmulDescDestroy),
      FK_LT_ENTRY(cublasLtMatmulDescSetAttribute), FK_LT_ENTRY(cublasLtMatrixLayoutCreate),
      FK_LT_ENTRY(cublasLtMatrixLayoutDestroy),  FK_LT_ENTRY(cublasLtMatmulPreferenceCreate),
      FK_LT_ENTRY(cublasLtMatmulPreferenceDestroy), FK_LT_ENTRY(cublasLtMatmulPreferenceSetAttribute),
      FK_LT_ENTRY(cublasLtMatmulAlgoGetHeuristic), FK_LT_ENTRY(cublasLtMatmul),
  };
#undef FK_LT_ENTRY
  for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
    if (!strcmp(table[i].name, name)) return table[i].fn;
  return NULL;
}
