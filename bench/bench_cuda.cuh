/* bench_cuda.cuh - what the GEMM benchmarks (gemm_bench and its zoo,
 * gemv_lab) share on the CUDA side, so that they time and compare the same
 * way: status checks that end the program, the L2 flush before a timed
 * launch, the median, and cuBLASLt called as PyTorch's F.linear calls it on
 * Hopper (the baseline every table quotes). Header-only: each benchmark is
 * one translation unit.
 */
#pragma once
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "../kernels/tpg_kargs.h"

#define CK(x)                                                                          \
  do {                                                                                 \
    cudaError_t e_ = (x);                                                              \
    if (e_ != cudaSuccess) {                                                           \
      fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      exit(2);                                                                         \
    }                                                                                  \
  } while (0)
#define CKL(x)                                                                         \
  do {                                                                                 \
    cublasStatus_t s_ = (x);                                                           \
    if (s_ != CUBLAS_STATUS_SUCCESS) {                                                 \
      fprintf(stderr, "%s:%d: %s: cublasLt status %d\n", __FILE__, __LINE__, #x, (int)s_); \
      exit(2);                                                                         \
    }                                                                                  \
  } while (0)

static const size_t kLtWorkspace = 32u << 20;

/* Ordinary (L2-allocating) loads of a buffer larger than L2: afterwards L2
 * holds only clean lines of it, so the timed kernel starts cold and evicts
 * them for free. */
__global__ void flush_kernel(const unsigned *__restrict__ p, size_t n, unsigned *sink) {
  unsigned s = 0;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) s ^= __ldcg(p + i);
  if (s == 0x9e3779b9u) sink[0] = s;
}
static double median_d(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

/* ---- cuBLASLt, as PyTorch's F.linear calls it on Hopper ---- */
struct Lt {
  cublasLtHandle_t h = nullptr;
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t la = nullptr, lb = nullptr, lc = nullptr;
  cublasLtMatmulHeuristicResult_t heur;
  float one = 1.f, zero = 0.f;
  bool ok = false;
  void release() {
    if (op) cublasLtMatmulDescDestroy(op);
    if (la) cublasLtMatrixLayoutDestroy(la);
    if (lb) cublasLtMatrixLayoutDestroy(lb);
    if (lc) cublasLtMatrixLayoutDestroy(lc);
    op = nullptr; la = lb = lc = nullptr; ok = false;
  }
  /* Y[M, Nw] = X[M, K] W[Nw, K]^T (+ bias, GELU): column-major D^T = W X^T */
  void setup(int M, int Nw, int K, int epi, const void *bias) {
    release();
    CKL(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    CKL(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    CKL(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
    cublasLtEpilogue_t e = CUBLASLT_EPILOGUE_DEFAULT;
    if (epi == TPG_EPI_BIAS) e = CUBLASLT_EPILOGUE_BIAS;
    if (epi == TPG_EPI_BIAS_GELU) e = CUBLASLT_EPILOGUE_GELU_BIAS;
    CKL(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &e, sizeof e));
    if (e != CUBLASLT_EPILOGUE_DEFAULT)
      CKL(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
    CKL(cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, K, Nw, K));
    CKL(cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, K, M, K));
    CKL(cublasLtMatrixLayoutCreate(&lc, CUDA_R_16BF, Nw, M, Nw));
    cublasLtMatmulPreference_t pref;
    CKL(cublasLtMatmulPreferenceCreate(&pref));
    const size_t wsz = kLtWorkspace;
    CKL(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsz, sizeof wsz));
    int found = 0;
    const cublasStatus_t s = cublasLtMatmulAlgoGetHeuristic(h, op, la, lb, lc, lc, pref, 1, &heur, &found);
    cublasLtMatmulPreferenceDestroy(pref);
    ok = s == CUBLAS_STATUS_SUCCESS && found > 0;
  }
  void run(const void *x, const void *w, void *y, void *ws, cudaStream_t st = 0) {
    CKL(cublasLtMatmul(h, op, &one, w, la, x, lb, &zero, y, lc, y, lc, &heur.algo, ws, kLtWorkspace, st));
  }
};

