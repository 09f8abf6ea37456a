/* gemm_bench.cu - validation and benchmark of tpgraph's GEMM kernels against
 * an fp64 CPU reference and cuBLAS (only this program uses cuBLAS).
 *
 * llm.c dev/cuda style: the kernel sources are #included and launched with
 * <<<>>>, with the launch configuration from lib/gemm/select.c (linked as C),
 * so what is checked here is exactly what the graph builder will launch.
 *
 *   gemm_bench [--check-only] [--quick] [--m LIST] [--json PATH]   (--m: check only these M)
 *   gemm_bench --zoo [--budget-s S] [--models SUBSTR] [--tp LIST] [--m LIST] [--cand | --cutlass] [--graph] [--json PATH]
 *     (model shapes vs cuBLASLt, bench/gemm_zoo.cuh; --cutlass: ours vs the CUTLASS candidates, per M)
 *
 * 1. Checks: fresh random inputs per shape, outputs poisoned (0xFF bytes = NaN)
 *    before every launch, every epilogue, bf16 and fp16, the sm_90 selection
 *    and the sm_80 (mma.sync) fallback; relative norm error against fp64 on all
 *    rows (M <= 64) or a sample of rows, and a scan of the whole output for
 *    NaN (an unwritten element). Limit 1e-2.
 * 2. Device pure-read bandwidth (the ceiling for decode).
 * 3. Timing, epilogue NONE, bf16, ours vs cublasGemmEx (bf16 in/out, fp32
 *    compute): median of many launches timed with events, inputs rotated over
 *    enough copies to exceed L2 several times.
 * Exit status nonzero if any check fails.
 */
#include <cublas_v2.h>
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "../kernels/gemm/gemv.cu"
#include "../kernels/gemm/lt_swiglu.cu"
#include "../kernels/gemm/sm80_mma.cu"
#include "../kernels/gemm/sm90_tma.cu"
#include "../lib/gemm/ours.h"
#include "../lib/gemm/select.h"
#include "bench_cuda.cuh"

#define CKB(x)                                                                         \
  do {                                                                                 \
    cublasStatus_t s_ = (x);                                                           \
    if (s_ != CUBLAS_STATUS_SUCCESS) {                                                 \
      fprintf(stderr, "%s:%d: %s: cublas status %d\n", __FILE__, __LINE__, #x, (int)s_); \
      exit(2);                                                                         \
    }                                                                                  \
  } while (0)

typedef void (*kfn)(const tpg_gemm_args);
static const struct { const char *name; kfn fn; } kTable[] = {
    {"tpg_gemv_bf16_m8", tpg_gemv_bf16_m8},   {"tpg_gemv_bf16_m16", tpg_gemv_bf16_m16},
    {"tpg_gemv_bf16_m32", tpg_gemv_bf16_m32}, {"tpg_gemv_bf16_m64", tpg_gemv_bf16_m64},
    {"tpg_gemv_f16_m8", tpg_gemv_f16_m8},     {"tpg_gemv_f16_m16", tpg_gemv_f16_m16},
    {"tpg_gemv_f16_m32", tpg_gemv_f16_m32},   {"tpg_gemv_f16_m64", tpg_gemv_f16_m64},
    {"tpg_gemm_sm90_bf16", tpg_gemm_sm90_bf16}, {"tpg_gemm_sm90_f16", tpg_gemm_sm90_f16},
    {"tpg_gemm_mma_bf16", tpg_gemm_mma_bf16}, {"tpg_gemm_mma_f16", tpg_gemm_mma_f16},
    {"tpg_gemv_bf16_m8w4", tpg_gemv_bf16_m8w4}, {"tpg_gemv_bf16_m16w4", tpg_gemv_bf16_m16w4},
    {"tpg_gemv_f16_m8w4", tpg_gemv_f16_m8w4},   {"tpg_gemv_f16_m16w4", tpg_gemv_f16_m16w4},
    {"tpg_gemv_sk_bf16_m8", tpg_gemv_sk_bf16_m8}, {"tpg_gemv_sk_bf16_m16", tpg_gemv_sk_bf16_m16},
    {"tpg_gemv_sk_f16_m8", tpg_gemv_sk_f16_m8},   {"tpg_gemv_sk_f16_m16", tpg_gemv_sk_f16_m16},
};
typedef void (*kfn_tma)(const tpg_gemm_tma_args);
static kfn_tma find_tma_kernel(const char *name) {
  if (!strcmp(name, "tpg_gemm_sm90tma_bf16")) return tpg_gemm_sm90tma_bf16;
  if (!strcmp(name, "tpg_gemm_sm90tma_f16")) return tpg_gemm_sm90tma_f16;
  if (!strcmp(name, "tpg_gemm_sm90tma_bf16_n128")) return tpg_gemm_sm90tma_bf16_n128;
  if (!strcmp(name, "tpg_gemm_sm90tma_f16_n128")) return tpg_gemm_sm90tma_f16_n128;
  static const struct { const char *name; kfn_tma fn; } more[] = {
      {"tpg_gemm_sm90tma_bf16_n64", tpg_gemm_sm90tma_bf16_n64},
      {"tpg_gemm_sm90tma_f16_n64", tpg_gemm_sm90tma_f16_n64},
      {"tpg_gemm_sm90tma_bf16_m64", tpg_gemm_sm90tma_bf16_m64},
      {"tpg_gemm_sm90tma_f16_m64", tpg_gemm_sm90tma_f16_m64},
      {"tpg_gemm_sm90tma_bf16_m64_n128", tpg_gemm_sm90tma_bf16_m64_n128},
      {"tpg_gemm_sm90tma_f16_m64_n128", tpg_gemm_sm90tma_f16_m64_n128},
      {"tpg_gemm_sm90tma_bf16_m64_n64", tpg_gemm_sm90tma_bf16_m64_n64},
      {"tpg_gemm_sm90tma_f16_m64_n64", tpg_gemm_sm90tma_f16_m64_n64},
      {"tpg_gemm_sm90tma_bf16_c2", tpg_gemm_sm90tma_bf16_c2},
      {"tpg_gemm_sm90tma_f16_c2", tpg_gemm_sm90tma_f16_c2},
      {"tpg_gemm_sm90tma_bf16_n128_c2", tpg_gemm_sm90tma_bf16_n128_c2},
      {"tpg_gemm_sm90tma_f16_n128_c2", tpg_gemm_sm90tma_f16_n128_c2},
      {"tpg_gemm_sm90tma_bf16_n192", tpg_gemm_sm90tma_bf16_n192},
      {"tpg_gemm_sm90tma_f16_n192", tpg_gemm_sm90tma_f16_n192},
      {"tpg_gemm_sm90tma_bf16_n192_c2", tpg_gemm_sm90tma_bf16_n192_c2},
      {"tpg_gemm_sm90tma_f16_n192_c2", tpg_gemm_sm90tma_f16_n192_c2},
      {"tpg_gemm_sm90tma_bf16_m64_n64_cn2", tpg_gemm_sm90tma_bf16_m64_n64_cn2},
      {"tpg_gemm_sm90tma_bf16_m64_n64_c2", tpg_gemm_sm90tma_bf16_m64_n64_c2},
      {"tpg_gemm_sm90tma_f16_m64_n64_c2", tpg_gemm_sm90tma_f16_m64_n64_c2},
      {"tpg_gemm_sm90tma_bf16_m64_n128_c2", tpg_gemm_sm90tma_bf16_m64_n128_c2},
      {"tpg_gemm_sm90tma_f16_m64_n128_c2", tpg_gemm_sm90tma_f16_m64_n128_c2},
      {"tpg_gemm_sm90tma_f16_m64_n64_cn2", tpg_gemm_sm90tma_f16_m64_n64_cn2},
      {"tpg_gemm_sm90tma_bf16_m64_n128_cn2", tpg_gemm_sm90tma_bf16_m64_n128_cn2},
      {"tpg_gemm_sm90tma_f16_m64_n128_cn2", tpg_gemm_sm90tma_f16_m64_n128_cn2},
      {"tpg_gemm_sm90tma_bf16_n64_cn2", tpg_gemm_sm90tma_bf16_n64_cn2},
      {"tpg_gemm_sm90tma_f16_n64_cn2", tpg_gemm_sm90tma_f16_n64_cn2},
      {"tpg_gemm_sm90tma_bf16_n128_cn2", tpg_gemm_sm90tma_bf16_n128_cn2},
      {"tpg_gemm_sm90tma_f16_n128_cn2", tpg_gemm_sm90tma_f16_n128_cn2},
#define TPG_SW_ENTRY(X) {#X, X}
      TPG_SW_ENTRY(tpg_gemm_sm90tma_bf16_sw16_n64),     TPG_SW_ENTRY(tpg_gemm_sm90tma_f16_sw16_n64),
      TPG_SW_ENTRY(tpg_gemm_sm90tma_bf16_sw16_n128),    TPG_SW_ENTRY(tpg_gemm_sm90tma_f16_sw16_n128),
      TPG_SW_ENTRY(tpg_gemm_sm90tma_bf16_sw32_n64),     TPG_SW_ENTRY(tpg_gemm_sm90tma_f16_sw32_n64),
      TPG_SW_ENTRY(tpg_gemm_sm90tma_bf16_sw32_n128),    TPG_SW_ENTRY(tpg_gemm_sm90tma_f16_sw32_n128),
      TPG_SW_ENTRY(tpg_gemm_sm90tma_bf16_sw32_n256),    TPG_SW_ENTRY(tpg_gemm_sm90tma_f16_sw32_n256),
      TPG_SW_ENTRY(tpg_gemm_sm90tma_bf16_sw64_n64),     TPG_SW_ENTRY(tpg_gemm_sm90tma_f16_sw64_n64),
      TPG_SW_ENTRY(tpg_gemm_sm90tma_bf16_sw64_n128),    TPG_SW_ENTRY(tpg_gemm_sm90tma_f16_sw64_n128),
      TPG_SW_ENTRY(tpg_gemm_sm90tma_bf16_sw64_n256),    TPG_SW_ENTRY(tpg_gemm_sm90tma_f16_sw64_n256),
      TPG_SW_ENTRY(tpg_gemm_sm90tma_bf16_sw32_n64_c2),  TPG_SW_ENTRY(tpg_gemm_sm90tma_f16_sw32_n64_c2),
      TPG_SW_ENTRY(tpg_gemm_sm90tma_bf16_sw32_n128_c2), TPG_SW_ENTRY(tpg_gemm_sm90tma_f16_sw32_n128_c2),
      TPG_SW_ENTRY(tpg_gemm_sm90tma_bf16_sw64_n64_c2),  TPG_SW_ENTRY(tpg_gemm_sm90tma_f16_sw64_n64_c2),
      TPG_SW_ENTRY(tpg_gemm_sm90tma_bf16_sw64_n128_c2), TPG_SW_ENTRY(tpg_gemm_sm90tma_f16_sw64_n128_c2),
#undef TPG_SW_ENTRY
  };
  for (auto &e : more)
    if (!strcmp(name, e.name)) return e.fn;
  return nullptr;
}
static kfn find_kernel(const char *name) {
  for (auto &e : kTable)
    if (!strcmp(e.name, name)) return e.fn;
  fprintf(stderr, "kernel %s not in bench table\n", name);
  exit(2);
}

static int g_sms = 132, g_arch = 90;
static int g_streamk = 1; /* TPG_GEMM_STREAMK, as the library reads it */

/* A problem for the selector (lib/gemm/problem.h), passed where its calls
 * take a pointer (the temporary lives to the end of the call's statement). */
struct Prob {
  tpg_gemm_problem p;
  operator const tpg_gemm_problem *() const { return &p; }
};
static Prob prob(int M, int N, int K, int dtype, int epi, int arch = -1, int ldx = 0, int ldw = 0, int streamk = 1) {
  Prob r;
  r.p = tpg_gemm_problem_make(M, N, K, dtype, epi, arch < 0 ? g_arch : arch, g_sms);
  if (ldx) r.p.ldx = ldx;
  if (ldw) r.p.ldw = ldw;
  r.p.streamk = streamk;
  return r;
}
/* The problem of an argument block (its leading dimensions). */
static Prob prob_of(const tpg_gemm_args &a, int streamk = g_streamk) {
  Prob r = prob(a.m, a.n, a.k, a.dtype, a.epilogue, -1, a.ldx, a.ldw, streamk);
  r.p.ldy = a.ldy ? a.ldy : a.n;
  r.p.ldr = a.ldr ? a.ldr : a.n;
  r.p.residual_bias = a.epilogue == TPG_EPI_RESIDUAL && a.bias != nullptr;
  return r;
}

static void launch(const tpg_kernel_launch &L, const tpg_gemm_args &a, cudaStream_t st = 0) {
  kfn f = find_kernel(L.kernel);
  if (L.smem_bytes > 48 * 1024)
    CK(cudaFuncSetAttribute((const void *)f, cudaFuncAttributeMaxDynamicSharedMemorySize, L.smem_bytes));
  f<<<dim3(L.grid[0], L.grid[1], L.grid[2]), dim3(L.block[0], L.block[1], L.block[2]), L.smem_bytes, st>>>(a);
  CK(cudaGetLastError());
}

/* ---------------- TMA kernels: tensor maps encoded here, as the builder would ---------------- */
static void encode_y(tpg_gemm_tma_args &p);
static PFN_cuTensorMapEncodeTiled_v12000 g_encode = nullptr;
static void ensure_encode() {
  if (!g_encode) {
    cudaDriverEntryPointQueryResult q;
    CK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", (void **)&g_encode, 12000, cudaEnableDefault, &q));
    if (q != cudaDriverEntryPointSuccess || !g_encode) { fprintf(stderr, "no cuTensorMapEncodeTiled\n"); exit(2); }
  }
}
static void encode_maps(tpg_gemm_tma_args &p, int bn) {
  ensure_encode();
  const tpg_gemm_args &a = p.a;
  const CUtensorMapDataType dt = a.dtype == TPG_KDT_BF16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
  {
    cuuint64_t dims[2] = {(cuuint64_t)a.k, (cuuint64_t)a.m}, strides[1] = {(cuuint64_t)a.ldx * 2};
    cuuint32_t box[2] = {64, 128}, es[2] = {1, 1};
    CUresult r = g_encode((CUtensorMap *)&p.tx, dt, 2, (void *)a.x, dims, strides, box, es, CU_TENSOR_MAP_INTERLEAVE_NONE,
                          CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS) { fprintf(stderr, "encode X failed %d\n", (int)r); exit(2); }
  }
  CUresult r;
  if (a.epilogue == TPG_EPI_SWIGLU) {
    cuuint64_t dims[4] = {(cuuint64_t)a.k, 8, 2, (cuuint64_t)a.n / 8};
    cuuint64_t strides[3] = {(cuuint64_t)a.ldw * 2, (cuuint64_t)a.n * a.ldw * 2, (cuuint64_t)8 * a.ldw * 2};
    cuuint32_t box[4] = {64, 8, 2, (cuuint32_t)bn / 16}, es[4] = {1, 1, 1, 1};
    r = g_encode((CUtensorMap *)&p.tw, dt, 4, (void *)a.w, dims, strides, box, es, CU_TENSOR_MAP_INTERLEAVE_NONE,
                 CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  } else {
    cuuint64_t dims[2] = {(cuuint64_t)a.k, (cuuint64_t)a.n}, strides[1] = {(cuuint64_t)a.ldw * 2};
    cuuint32_t box[2] = {64, (cuuint32_t)bn}, es[2] = {1, 1};
    r = g_encode((CUtensorMap *)&p.tw, dt, 2, (void *)a.w, dims, strides, box, es, CU_TENSOR_MAP_INTERLEAVE_NONE,
                 CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  }
  if (r != CUDA_SUCCESS) { fprintf(stderr, "encode W failed %d\n", (int)r); exit(2); }
  encode_y(p);
}
/* Encode one map from the selector's tpg_tma_encode, exactly as the builder will. */
static void encode_from(const tpg_tma_encode &e, const void *base, int dtype, tpg_tmap *map) {
  cuuint32_t es[4] = {1, 1, 1, 1};
  CUresult r = g_encode((CUtensorMap *)map,
                        dtype == TPG_KDT_BF16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16,
                        e.rank, (void *)base, (const cuuint64_t *)e.dims, (const cuuint64_t *)e.strides,
                        (const cuuint32_t *)e.box, es, CU_TENSOR_MAP_INTERLEAVE_NONE,
                        e.swizzle == 64 ? CU_TENSOR_MAP_SWIZZLE_64B : CU_TENSOR_MAP_SWIZZLE_128B,
                        CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) { fprintf(stderr, "encode (selector params) failed %d\n", (int)r); exit(2); }
}
/* Y's map (the epilogue's TMA stores), from the selector's recipe. */
static void encode_y(tpg_gemm_tma_args &p) {
  tpg_tma_encode ye;
  tpg_gemm_y_map(p.a.m, p.a.n, p.a.ldy, &ye);
  encode_from(ye, p.a.y, p.a.dtype, &p.ty);
}
#include "gemm_cutlass.cuh"
#include "gemm_cublaslt.cuh"

/* The last CUTLASS block launch_sel built (the checks read its workspace words). */
static tpg_gemm_cutlass_args g_last_cutlass;

/* Launch what tpg_gemm_select_tma chose (plain or TMA kernel), or a CUTLASS
 * kernel (its block built from p.a first: timing loops prebuild theirs). */
static void launch_sel(const tpg_kernel_launch &L, const tpg_gemm_tma_args &p, cudaStream_t st = 0) {
  if (L.family == TPG_GEMM_FAMILY_CUBLASLT) { /* a plan for this launch (timing loops prebuild theirs) */
    lt_launch(*lt_plan(prob_of(p.a).p, L.lt_algo), p.a, st);
    return;
  }
  if (L.cutlass) {
    g_last_cutlass = *cutlass_block(L, p.a);
    cutlass_launch(L, g_last_cutlass, st);
    return;
  }
  if (!strstr(L.kernel, "sm90tma")) { launch(L, p.a, st); return; }
  kfn_tma f = find_tma_kernel(L.kernel);
  if (!f) { fprintf(stderr, "unknown %s\n", L.kernel); exit(2); }
  CK(cudaFuncSetAttribute((const void *)f, cudaFuncAttributeMaxDynamicSharedMemorySize, L.smem_bytes));
  if (L.cluster > 1) {
    /* "_kc<S>": the cluster shape is the launch's, as the graph node sets it */
    cudaLaunchConfig_t cfg = {};
    cudaLaunchAttribute at[1];
    cfg.gridDim = dim3(L.grid[0], L.grid[1], L.grid[2]);
    cfg.blockDim = dim3(L.block[0], L.block[1], L.block[2]);
    cfg.dynamicSmemBytes = L.smem_bytes;
    cfg.stream = st;
    at[0].id = cudaLaunchAttributeClusterDimension;
    at[0].val.clusterDim.x = L.cluster;
    at[0].val.clusterDim.y = 1;
    at[0].val.clusterDim.z = 1;
    cfg.attrs = at;
    cfg.numAttrs = 1;
    CK(cudaLaunchKernelEx(&cfg, f, p));
    return;
  }
  f<<<dim3(L.grid[0], L.grid[1], L.grid[2]), dim3(L.block[0], L.block[1], L.block[2]), L.smem_bytes, st>>>(p);
  CK(cudaGetLastError());
}
/* The launch tpg_gemm_select_tma picks (streamk as TPG_GEMM_STREAMK: 0 never,
 * 1 by the selector's rule, 2 always): for sizing workspaces. */
static tpg_kernel_launch pick_tma(const tpg_gemm_args &a, int streamk) {
  tpg_kernel_launch L;
  tpg_tma_encode xe, we;
  char why[200];
  if (tpg_gemm_select_tma(prob_of(a, streamk), &L, &xe, &we, why, sizeof why)) {
    fprintf(stderr, "select_tma rejected: %s\n", why); exit(2);
  }
  return L;
}
/* The same, ready to launch: p.a = a with split_k from the selection, maps
 * encoded. a.workspace must hold at least L.workspace_bytes. */
static bool select_tma(const tpg_gemm_args &a, tpg_kernel_launch &L, tpg_gemm_tma_args &p, int streamk = g_streamk) {
  tpg_tma_encode xe, we;
  char why[200];
  if (tpg_gemm_select_tma(prob_of(a, streamk), &L, &xe, &we, why, sizeof why)) {
    fprintf(stderr, "select_tma rejected: %s\n", why); exit(2);
  }
  memset(&p, 0, sizeof p);
  p.a = a;
  p.a.split_k = L.split_k;
  if (xe.rank) {
    if (!g_encode) encode_maps(p, 256);  /* loads the entry point */
    encode_from(xe, a.x, a.dtype, &p.tx);
    encode_from(we, a.w, a.dtype, &p.tw);
    encode_y(p);
  }
  return xe.rank != 0;
}

/* A forced variant (tpg_gemm_select_variant), ready to launch as select_tma. */
static bool select_var(const tpg_gemm_args &a, const tpg_gemm_variant &v, tpg_kernel_launch &L, tpg_gemm_tma_args &p) {
  tpg_tma_encode xe, we;
  char why[200];
  if (tpg_gemm_select_variant(prob_of(a), &v, &L, &xe, &we, why, sizeof why)) {
    fprintf(stderr, "select_variant rejected: %s\n", why); exit(2);
  }
  memset(&p, 0, sizeof p);
  p.a = a;
  p.a.split_k = L.split_k;
  if (xe.rank) {
    if (!g_encode) encode_maps(p, 256);  /* loads the entry point */
    encode_from(xe, a.x, a.dtype, &p.tx);
    encode_from(we, a.w, a.dtype, &p.tw);
    encode_y(p);
  }
  return xe.rank != 0;
}
/* The candidates of a shape other than the heuristic (TPG_GEMM_CANDIDATES=0:
 * none; =cutlass, =cublaslt: that family's only). The CUTLASS kernels exist
 * for bf16 only, and only in a bench with the embedded fatbins; cuBLASLt's
 * where the library is loaded. */
static std::vector<tpg_gemm_variant> shape_candidates(int M, int N, int K, int epi, int dtype) {
  tpg_gemm_variant v[TPG_GEMM_MAX_CANDIDATES];
  const int n = tpg_gemm_candidates(prob(M, N, K, dtype, epi), v, TPG_GEMM_MAX_CANDIDATES);
  std::vector<tpg_gemm_variant> out;
  const char *e = getenv("TPG_GEMM_CANDIDATES");
  if (e && !strcmp(e, "0")) return out;
  for (int i = 0; i < n; ++i) {
    if (v[i].kind == TPG_GEMM_VAR_HEURISTIC) continue;
    if (v[i].kind == TPG_GEMM_VAR_CUTLASS && (dtype != TPG_KDT_BF16 || !cutlass_available())) continue;
    if (e && !strcmp(e, "cutlass") && v[i].kind != TPG_GEMM_VAR_CUTLASS) continue;
    if (e && !strcmp(e, "cublaslt") && v[i].kind != TPG_GEMM_VAR_CUBLASLT) continue;
    out.push_back(v[i]);
  }
  return out;
}
static std::string var_name(const tpg_gemm_variant &v) {
  char b[64];
  tpg_gemm_variant_name(&v, b, sizeof b);
  return b;
}

/* Launch a TMA kernel (BN = 256 or 128) with the launch rules of the selector;
 * sk: stream-K over the whole GPU (p.a.workspace: sk_bytes(bn, p.a) of it). */
static unsigned sk_grid(int bn, const tpg_gemm_args &a) {
  const int outn = a.epilogue == TPG_EPI_SWIGLU ? bn / 2 : bn;
  const size_t tiles = (size_t)((a.m + 127) / 128) * ((a.n + outn - 1) / outn), work = tiles * ((a.k + 63) / 64);
  return (unsigned)std::min<size_t>(work, g_sms);
}
static size_t sk_bytes(int bn, const tpg_gemm_args &a) {
  const int outn = a.epilogue == TPG_EPI_SWIGLU ? bn / 2 : bn;
  const size_t tiles = (size_t)((a.m + 127) / 128) * ((a.n + outn - 1) / outn);
  return tpg_sk_workspace_bytes(tiles, sk_grid(bn, a), bn);
}
static void launch_tma(int bn, const tpg_gemm_tma_args &p0, cudaStream_t st = 0, bool sk = false) {
  tpg_gemm_tma_args p = p0;
  p.a.split_k = sk ? TPG_SPLITK_STREAM : 1;
  const tpg_gemm_args &a = p.a;
  const bool bf16 = a.dtype == TPG_KDT_BF16;
  const char *name = bn == 256 ? (bf16 ? "tpg_gemm_sm90tma_bf16" : "tpg_gemm_sm90tma_f16")
                               : (bf16 ? "tpg_gemm_sm90tma_bf16_n128" : "tpg_gemm_sm90tma_f16_n128");
  kfn_tma f = find_tma_kernel(name);
  const int outn = a.epilogue == TPG_EPI_SWIGLU ? bn / 2 : bn;
  const unsigned tiles = (unsigned)((a.m + 127) / 128) * (unsigned)((a.n + outn - 1) / outn);
  const unsigned grid = sk ? sk_grid(bn, a) : std::min<unsigned>(tiles, g_sms);
  const unsigned smem = bn == 256 ? tpg::sm90::cfg<256>::SMEM_BYTES : tpg::sm90::cfg<128>::SMEM_BYTES;
  CK(cudaFuncSetAttribute((const void *)f, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  f<<<grid, 384, smem, st>>>(p);
  CK(cudaGetLastError());
}

/* The decode GEMV without split-K (variant gemv_s1: one CTA per row tile,
 * whole K); checked and timed beside the selector's split. */
static tpg_kernel_launch plain_decode(int M, int N, int K, int dtype, int epi) {
  tpg_kernel_launch L;
  tpg_gemm_variant v;
  char why[200];
  memset(&v, 0, sizeof v);
  v.kind = TPG_GEMM_VAR_GEMV;
  v.split = 1;
  if (tpg_gemm_select_variant(prob(M, N, K, dtype, epi), &v, &L, nullptr, nullptr, why, sizeof why)) {
    fprintf(stderr, "plain_decode: %s\n", why);
    exit(2);
  }
  return L;
}

/* ---------------- host helpers ---------------- */
static uint16_t f2h_bits(float f, int dtype) {
  if (dtype == TPG_KDT_BF16) {
    __nv_bfloat16 b = __float2bfloat16_rn(f);
    return *reinterpret_cast<uint16_t *>(&b);
  }
  __half h = __float2half_rn(f);
  return *reinterpret_cast<uint16_t *>(&h);
}
static double h2d(uint16_t v, int dtype) {
  if (dtype == TPG_KDT_BF16) {
    uint32_t u = (uint32_t)v << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
  }
  __half h;
  memcpy(&h, &v, 2);
  return __half2float(h);
}

static const char *epi_name[] = {"none", "bias", "bias_gelu", "bias_silu", "swiglu", "residual", "f32_partial"};

static double ref_epi(int epi, double acc, double up, double b, double bu, double r) {
  switch (epi) {
    case TPG_EPI_BIAS: return acc + b;
    case TPG_EPI_BIAS_GELU: {
      double x = acc + b;
      return 0.5 * x * (1 + tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
    }
    case TPG_EPI_BIAS_SILU: {
      double x = acc + b;
      return x / (1 + exp(-x));
    }
    case TPG_EPI_SWIGLU: {
      double g = acc + b;
      return g / (1 + exp(-g)) * (up + bu);
    }
    case TPG_EPI_RESIDUAL: return acc + b + r;
    default: return acc;
  }
}

struct CheckResult { std::string what; double err; bool ok; };
static std::vector<CheckResult> g_checks;
static int g_cutlass_checks = 0, g_lt_checks = 0, g_elem_over_ours = 0;
static std::mt19937_64 g_rng;

/* One shape's inputs (host and device, padded leading dimensions when
 * asked), the rows to check and their fp64 reference accumulators for all
 * 2N W rows with sum |x w| (the element-wise bound's scale). */
struct CheckData {
  int M, N, K, dtype, ldx, ldw, ldy, ldr;
  bool pad;
  std::vector<uint16_t> hx, hw, hb, hr;
  std::vector<int> rows;
  std::vector<double> acc, acc_abs;
  void *dx = nullptr, *dw = nullptr, *db = nullptr, *dr = nullptr, *dy = nullptr, *dws = nullptr;
  size_t ybytes = 0, ws_cap = 0;
};

static void reference(CheckData &d) {
  const int N = d.N, K = d.K;
  d.acc.assign(d.rows.size() * 2 * (size_t)N, 0.0);
  d.acc_abs.assign(d.rows.size() * 2 * (size_t)N, 0.0);
  std::vector<double> xr(K), wr((size_t)2 * N * K);
  for (int n = 0; n < 2 * N; ++n)
    for (int k = 0; k < K; ++k) wr[(size_t)n * K + k] = h2d(d.hw[(size_t)n * d.ldw + k], d.dtype);
  for (size_t ri = 0; ri < d.rows.size(); ++ri) {
    for (int k = 0; k < K; ++k) xr[k] = h2d(d.hx[(size_t)d.rows[ri] * d.ldx + k], d.dtype);
    for (int n = 0; n < 2 * N; ++n) {
      const double *w = &wr[(size_t)n * K];
      double s0 = 0, s1 = 0, s2 = 0, s3 = 0, sa = 0;
      int k = 0;
      for (; k + 4 <= K; k += 4) {
        s0 += xr[k] * w[k], s1 += xr[k + 1] * w[k + 1], s2 += xr[k + 2] * w[k + 2], s3 += xr[k + 3] * w[k + 3];
      }
      for (; k < K; ++k) s0 += xr[k] * w[k];
      for (k = 0; k < K; ++k) sa += fabs(xr[k] * w[k]);
      d.acc[ri * 2 * N + n] = s0 + s1 + s2 + s3;
      d.acc_abs[ri * 2 * N + n] = sa;
    }
  }
}

static void check_data_make(CheckData &d, int M, int N, int K, int dtype, bool pad) {
  d.M = M, d.N = N, d.K = K, d.dtype = dtype, d.pad = pad;
  d.ldx = K + (pad ? 16 : 0), d.ldw = K + (pad ? 8 : 0), d.ldy = N + (pad ? 8 : 0), d.ldr = N + (pad ? 24 : 0);
  std::uniform_real_distribution<float> U(-1.f, 1.f);
  const float ws = 1.f / sqrtf((float)K) * 1.7f;
  d.hx.resize((size_t)M * d.ldx), d.hw.resize((size_t)2 * N * d.ldw), d.hb.resize(2 * N), d.hr.resize((size_t)M * d.ldr);
  for (auto &v : d.hx) v = f2h_bits(U(g_rng), dtype);
  for (auto &v : d.hw) v = f2h_bits(U(g_rng) * ws, dtype);
  for (auto &v : d.hb) v = f2h_bits(U(g_rng) * 0.5f, dtype);
  for (auto &v : d.hr) v = f2h_bits(U(g_rng), dtype);
  /* rows to check: all when small, else a random sample plus first/last */
  if (M <= 64) for (int i = 0; i < M; ++i) d.rows.push_back(i);
  else {
    d.rows.push_back(0), d.rows.push_back(M - 1);
    std::uniform_int_distribution<int> R(0, M - 1);
    for (int i = 0; i < 14; ++i) d.rows.push_back(R(g_rng));
  }
  reference(d);
  d.ybytes = (size_t)M * d.ldy * 4;
  CK(cudaMalloc(&d.dx, d.hx.size() * 2)); CK(cudaMalloc(&d.dw, d.hw.size() * 2));
  CK(cudaMalloc(&d.db, d.hb.size() * 2)); CK(cudaMalloc(&d.dr, d.hr.size() * 2));
  CK(cudaMalloc(&d.dy, d.ybytes));
  CK(cudaMemcpy(d.dx, d.hx.data(), d.hx.size() * 2, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(d.dw, d.hw.data(), d.hw.size() * 2, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(d.db, d.hb.data(), d.hb.size() * 2, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(d.dr, d.hr.data(), d.hr.size() * 2, cudaMemcpyHostToDevice));
}

static void check_data_free(CheckData &d) {
  cudaFree(d.dx); cudaFree(d.dw); cudaFree(d.db); cudaFree(d.dr); cudaFree(d.dy);
  if (d.dws) cudaFree(d.dws);
}

/* Pass ai's launch of epilogue epi (false: the pass skips it). Passes: 0
 * tpg_gemm_select on this GPU, 1 its sm_80 fallback (when it differs), 2
 * and 3 the TMA kernels BN 256 and 128, 4 what tpg_gemm_select_tma picks,
 * 5 the decode GEMV without K split (gemv_s1, M <= 16), 6 tpg_gemm_select_tma
 * with stream-K forced, 7..: every tuner candidate (tpg_gemm_candidates)
 * other than the heuristic, every family's. */
static bool pass_launch(CheckData &d, int ai, int epi, tpg_kernel_launch &L, std::vector<tpg_gemm_variant> &cv) {
  const int arches[7] = {g_arch, 80, g_arch, g_arch, g_arch, g_arch, g_arch};
  char why[200];
  if (tpg_gemm_select(prob(d.M, d.N, d.K, d.dtype, epi, ai < 7 ? arches[ai] : g_arch), &L, why, sizeof why)) {
    fprintf(stderr, "select rejected: %s\n", why); exit(2);
  }
  if (ai == 5) {
    if (d.M > 16) return false;
    L = plain_decode(d.M, d.N, d.K, d.dtype, epi);
  }
  if (ai == 6 && (g_arch != 90 || d.M <= 16)) return false;
  if (ai >= 7) {
    if (g_arch != 90) return false;
    cv = shape_candidates(d.M, d.N, d.K, epi, d.dtype);
    if (ai - 7 >= (int)cv.size()) return false;
    tpg_tma_encode xe, we;
    Prob pv = prob(d.M, d.N, d.K, d.dtype, epi, -1, d.ldx, d.ldw);
    pv.p.ldy = d.ldy, pv.p.ldr = d.ldr;
    pv.p.residual_bias = epi == TPG_EPI_RESIDUAL && !(d.M & 1); /* as args_of's bias */
    if (tpg_gemm_select_variant(pv, &cv[ai - 7], &L, &xe, &we, why, sizeof why)) {
      fprintf(stderr, "select_variant %s rejected: %s\n", var_name(cv[ai - 7]).c_str(), why); exit(2);
    }
  }
  if (ai == 4 || ai == 6) { /* the TMA selection's own workspace (stream-K) */
    tpg_gemm_args q;
    memset(&q, 0, sizeof q);
    q.m = d.M, q.n = d.N, q.k = d.K, q.ldx = d.ldx, q.ldw = d.ldw, q.dtype = d.dtype, q.epilogue = epi;
    L = pick_tma(q, ai == 6 ? 2 : g_streamk);
  }
  if (L.workspace_bytes > d.ws_cap) {
    if (d.dws) cudaFree(d.dws);
    CK(cudaMalloc(&d.dws, L.workspace_bytes));
    CK(cudaMemset(d.dws, 0, L.workspace_bytes)); /* once, at allocation */
    d.ws_cap = L.workspace_bytes;
  }
  if (ai == 1) { /* skip the fallback pass when the selection is the same kernel */
    tpg_kernel_launch L90;
    tpg_gemm_select(prob(d.M, d.N, d.K, d.dtype, epi, arches[0]), &L90, why, sizeof why);
    if (!strcmp(L.kernel, L90.kernel)) return false;
  }
  return !(ai >= 2 && ai <= 4 && (g_arch != 90 || d.M <= 16));
}

static tpg_gemm_args args_of(const CheckData &d, int epi, const tpg_kernel_launch &L) {
  tpg_gemm_args a;
  memset(&a, 0, sizeof a);
  a.x = d.dx, a.w = d.dw, a.y = d.dy;
  a.bias = (epi == TPG_EPI_NONE || epi == TPG_EPI_F32_PARTIAL || (epi == TPG_EPI_RESIDUAL && (d.M & 1))) ? nullptr : d.db;
  a.residual = epi == TPG_EPI_RESIDUAL ? d.dr : nullptr;
  a.m = d.M, a.n = d.N, a.k = d.K, a.ldx = d.ldx, a.ldw = d.ldw, a.ldy = d.ldy, a.ldr = d.ldr;
  a.dtype = d.dtype, a.epilogue = epi, a.split_k = L.split_k;
  a.workspace = d.dws;
  return a;
}

/* Runs pass ai's launch once (and names it). */
static void run_pass(int ai, const tpg_gemm_args &a, const tpg_kernel_launch &L, const std::vector<tpg_gemm_variant> &cv,
                     std::string &kname) {
  tpg_gemm_tma_args p;
  tpg_kernel_launch LT;
  if (ai >= 7) {
    select_var(a, cv[ai - 7], LT, p);
    kname = "cand:" + var_name(cv[ai - 7]);
    launch_sel(LT, p);
  } else if (ai == 4 || ai == 6) {
    select_tma(a, LT, p, ai == 6 ? 2 : g_streamk);
    kname = std::string(ai == 6 ? "sk:" : "sel:") + LT.kernel;
    launch_sel(LT, p);
  } else if (ai >= 2) {
    memset(&p, 0, sizeof p);
    p.a = a;
    encode_maps(p, ai == 2 ? 256 : 128);
    launch_tma(ai == 2 ? 256 : 128, p);
  } else {
    launch(L, a);
  }
  CK(cudaDeviceSynchronize());
}

/* What the output check found. */
struct Verdict { double err = 0, elem_worst = 0; size_t nan_count = 0; };

/* The output against fp64: the relative norm over the checked rows, the
 * worst |got - ref| / bound (the zoo's bound, gemm_zoo.cuh above check_one:
 * output rounding, fp32 accumulation over K/16 steps and <= 16 partial
 * sums, tanh.approx for GeLU, __expf for SiLU/SwiGLU; the cuBLASLt family's
 * SwiGLU product rounded to the output type: rounded_product), NaN anywhere. */
static Verdict verify(const CheckData &d, int epi, const tpg_gemm_args &a, const std::vector<uint8_t> &hy,
                      bool rounded_product) {
  const int N = d.N, dtype = d.dtype;
  const bool f32 = epi == TPG_EPI_F32_PARTIAL;
  auto out = [&](int m, int n) -> double {
    if (f32) { float f; memcpy(&f, &hy[((size_t)m * d.ldy + n) * 4], 4); return f; }
    uint16_t v; memcpy(&v, &hy[((size_t)m * d.ldy + n) * 2], 2); return h2d(v, dtype);
  };
  Verdict v;
  for (int m = 0; m < d.M; ++m)
    for (int n = 0; n < N; ++n) v.nan_count += std::isnan(out(m, n));
  double num = 0, den = 0;
  const double u_out = f32 ? ldexp(1.0, -24) : dtype == TPG_KDT_BF16 ? ldexp(1.0, -8) : ldexp(1.0, -11);
  const double eacc = (d.K / 16.0 + 16) * ldexp(1.0, -23);
  for (size_t ri = 0; ri < d.rows.size(); ++ri) {
    const int m = d.rows[ri];
    for (int n = 0; n < N; ++n) {
      const double b = a.bias ? h2d(d.hb[n], dtype) : 0, bu = a.bias ? h2d(d.hb[N + n], dtype) : 0;
      const double r = a.residual ? h2d(d.hr[(size_t)m * d.ldr + n], dtype) : 0;
      const double zg = d.acc[ri * 2 * N + n], zu = d.acc[ri * 2 * N + N + n];
      const double ref = ref_epi(epi, zg, zu, b, bu, r);
      const double got = out(m, n), e = got - ref;
      num += e * e, den += ref * ref;
      const double pu = rounded_product ? u_out : 0;
      const double eg = eacc * d.acc_abs[ri * 2 * N + n] + pu * fabs(zg),
                   eu = eacc * d.acc_abs[ri * 2 * N + N + n] + pu * fabs(zu);
      double sens = eg, approx = 0;
      if (epi == TPG_EPI_BIAS_SILU) sens = 1.13 * eg, approx = ldexp(fabs(ref), -11);
      if (epi == TPG_EPI_BIAS_GELU) sens = 1.13 * eg, approx = ldexp(fabs(zg + b), -11);
      if (epi == TPG_EPI_SWIGLU) {
        const double gg = zg + b, uu = zu + bu, sg = gg / (1 + exp(-gg));
        sens = 1.1 * fabs(uu) * eg + fabs(sg) * eu + 1.1 * eg * eu;
        approx = ldexp(fabs(ref), -11);
      }
      const double bound = 2 * u_out * fabs(ref) + sens + approx + (dtype == TPG_KDT_F16 && !f32 ? ldexp(1.0, -24) : 0);
      v.elem_worst = std::max(v.elem_worst, std::isfinite(got) ? fabs(e) / bound : INFINITY);
    }
  }
  v.err = sqrt(num / std::max(den, 1e-300));
  return v;
}

/* Rows that differ when the launch runs again into a re-poisoned output:
 * stream-K promises bit-identical results launch after launch (the last
 * contributor sums the partials in CTA order), and so do K over a cluster
 * (rank order) and CUTLASS's deterministic reduction. */
static size_t repro_rows(const CheckData &d, int ai, int epi, const tpg_gemm_args &a, const tpg_kernel_launch &L,
                         const std::vector<tpg_gemm_variant> &cv, const std::vector<uint8_t> &hy) {
  if (L.split_k != TPG_SPLITK_STREAM && L.split_k != TPG_SPLITK_CLUSTER && !(L.cutlass && L.cutlass_mode != TPG_CUTLASS_DP))
    return 0;
  std::vector<uint8_t> hy2(d.ybytes);
  std::string kname;
  const size_t es = epi == TPG_EPI_F32_PARTIAL ? 4 : 2;
  CK(cudaMemset(d.dy, 0xFF, d.ybytes));
  run_pass(ai, a, L, cv, kname);
  CK(cudaMemcpy(hy2.data(), d.dy, d.ybytes, cudaMemcpyDeviceToHost));
  size_t diff = 0;
  for (int m = 0; m < d.M; ++m) diff += memcmp(&hy[(size_t)m * d.ldy * es], &hy2[(size_t)m * d.ldy * es], (size_t)d.N * es) != 0;
  return diff;
}

/* What a launch must leave zero (counters, CUTLASS's barrier words) is
 * zero again; then the scratch is zeroed for the decode kernels after. */
static size_t ws_dirty_words(const CheckData &d, const tpg_kernel_launch &L) {
  size_t dirty = 0;
  if (L.workspace_zeroed) {
    std::vector<uint32_t> hw32(L.workspace_zeroed / 4);
    CK(cudaMemcpy(hw32.data(), d.dws, L.workspace_zeroed, cudaMemcpyDeviceToHost));
    for (auto v : hw32) dirty += v != 0;
  }
  if (L.cutlass) dirty += cutlass_dirty_words(g_last_cutlass);
  if (L.workspace_bytes > L.workspace_zeroed) CK(cudaMemset(d.dws, 0, L.workspace_bytes));
  return dirty;
}

/* One pass of one epilogue: run, check, record. The element-wise bound
 * decides for the libraries' kernels (CUTLASS, cuBLASLt); for ours it is
 * reported (TPG_VERBOSE, the JSON), the norm decides. */
static void check_pass(CheckData &d, int ai, int epi, const tpg_kernel_launch &L,
                       const std::vector<tpg_gemm_variant> &cv) {
  const tpg_gemm_args a = args_of(d, epi, L);
  std::vector<uint8_t> hy(d.ybytes);
  std::string kname = ai == 2 ? "sm90tma(256)" : ai == 3 ? "sm90tma(128)" : L.kernel;
  CK(cudaMemset(d.dy, 0xFF, d.ybytes)); /* poison: NaN in every dtype */
  run_pass(ai, a, L, cv, kname);
  CK(cudaMemcpy(hy.data(), d.dy, d.ybytes, cudaMemcpyDeviceToHost));
  const size_t repro_diff = repro_rows(d, ai, epi, a, L, cv, hy);
  const Verdict v = verify(d, epi, a, hy, epi == TPG_EPI_SWIGLU && L.family == TPG_GEMM_FAMILY_CUBLASLT);
  const size_t ws_dirty = ws_dirty_words(d, L);
  const bool lib = L.cutlass || L.family == TPG_GEMM_FAMILY_CUBLASLT, elem_ok = v.elem_worst <= 1.0;
  if (!lib && !elem_ok) ++g_elem_over_ours;
  const bool ok = v.nan_count == 0 && ws_dirty == 0 && repro_diff == 0 && v.err <= 1e-2 && std::isfinite(v.err) &&
                  (!lib || elem_ok);
  char what[256];
  snprintf(what, sizeof what, "%-20s %s M=%d N=%d K=%d%s epi=%s", kname.c_str(), d.dtype == TPG_KDT_BF16 ? "bf16" : "f16",
           d.M, d.N, d.K, d.pad ? " (padded ld)" : "", epi_name[epi]);
  g_checks.push_back({what, v.err, ok});
  if (L.cutlass) ++g_cutlass_checks;
  if (L.family == TPG_GEMM_FAMILY_CUBLASLT) ++g_lt_checks;
  if (!ok || getenv("TPG_VERBOSE"))
    printf("%s %s rel_err=%.3e max_err/bound=%.3f nan=%zu ws_nonzero=%zu rows_differing_on_relaunch=%zu\n",
           ok ? "ok  " : "FAIL", what, v.err, v.elem_worst, v.nan_count, ws_dirty, repro_diff);
}

/* One shape: fresh inputs, every epilogue, every pass (pass_launch). */
static void check_shape(int M, int N, int K, int dtype, bool pad) {
  CheckData d;
  check_data_make(d, M, N, K, dtype, pad);
  for (int ai = 0; ai < 7 + TPG_GEMM_MAX_CANDIDATES; ++ai)
    for (int epi = 0; epi < TPG_EPI_COUNT; ++epi) {
      tpg_kernel_launch L;
      std::vector<tpg_gemm_variant> cv;
      if (pass_launch(d, ai, epi, L, cv)) check_pass(d, ai, epi, L, cv);
    }
  check_data_free(d);
}

/* ---------------- bandwidth ceiling ---------------- */
__global__ void read_kernel(const uint4 *__restrict__ p, size_t n, unsigned *sink) {
  /* 4 independent 16-byte streaming loads in flight per thread per step */
  uint32_t s = 0;
  const size_t stride = (size_t)gridDim.x * blockDim.x;
  size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  for (; i + 3 * stride < n; i += 4 * stride) {
    uint4 v0 = tpg::ld_stream(p + i), v1 = tpg::ld_stream(p + i + stride);
    uint4 v2 = tpg::ld_stream(p + i + 2 * stride), v3 = tpg::ld_stream(p + i + 3 * stride);
    s ^= v0.x ^ v0.y ^ v0.z ^ v0.w ^ v1.x ^ v1.y ^ v1.z ^ v1.w ^ v2.x ^ v2.y ^ v2.z ^ v2.w ^ v3.x ^ v3.y ^ v3.z ^ v3.w;
  }
  for (; i < n; i += stride) { uint4 v = tpg::ld_stream(p + i); s ^= v.x ^ v.y ^ v.z ^ v.w; }
  if (s == 0x12345678u) sink[0] = s;  /* keeps the loads alive */
}
__global__ void fill_kernel(uint16_t *p, size_t n, uint32_t seed, float scale, int bf16) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    uint32_t h = (uint32_t)i * 2654435761u ^ seed;
    h ^= h >> 15; h *= 2246822519u; h ^= h >> 13; h *= 3266489917u; h ^= h >> 16;
    float f = ((h & 0xFFFFFF) / 16777216.f * 2.f - 1.f) * scale;
    if (bf16) { __nv_bfloat16 b = __float2bfloat16_rn(f); p[i] = *reinterpret_cast<uint16_t *>(&b); }
    else { __half b = __float2half_rn(f); p[i] = *reinterpret_cast<uint16_t *>(&b); }
  }
}

static double median(std::vector<float> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

/* Pure-read bandwidth: `bytes` per launch, rotated over enough copies to
 * exceed L2, batches of 10 launches between events (as the GEMM timing). */
static double read_bandwidth(size_t bytes, int copies) {
  const size_t n = bytes / 16;
  std::vector<uint4 *> p(copies);
  unsigned *sink;
  for (auto &q : p) { CK(cudaMalloc(&q, bytes)); fill_kernel<<<4096, 256>>>((uint16_t *)q, bytes / 2, 1, 1.f, 1); }
  CK(cudaMalloc(&sink, 4));
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0)); CK(cudaEventCreate(&e1));
  std::vector<float> t;
  int c = 0;
  for (int i = 0; i < 12; ++i) {
    CK(cudaEventRecord(e0));
    for (int b = 0; b < 10; ++b) read_kernel<<<g_sms * 4, 512>>>(p[c++ % copies], n, sink);
    CK(cudaEventRecord(e1)); CK(cudaEventSynchronize(e1));
    float ms; CK(cudaEventElapsedTime(&ms, e0, e1));
    if (i >= 2) t.push_back(ms / 10);
  }
  CK(cudaGetLastError());
  for (auto &q : p) cudaFree(q);
  cudaFree(sink);
  return bytes / (median(t) * 1e-3) / 1e12;
}

struct TimeRow { int M, K, N; std::string kernel; double us, cublas_us, tbs, tflops, vs_cublas, vs_floor; };

static void time_shape(cublasHandle_t h, int M, int K, int N, int reps, std::vector<TimeRow> &rows,
                       std::vector<TimeRow> &alts) {
  const size_t xb = (size_t)M * K * 2, wb = (size_t)N * K * 2, yb = (size_t)M * N * 2;
  const size_t set = xb + wb + yb;
  const int copies = (int)std::min<size_t>(64, std::max<size_t>(2, (size_t)(4 * 60e6) / set + 1));
  std::vector<uint16_t *> X(copies), W(copies), Y(copies);
  for (int c = 0; c < copies; ++c) {
    CK(cudaMalloc(&X[c], xb)); CK(cudaMalloc(&W[c], wb)); CK(cudaMalloc(&Y[c], yb));
    fill_kernel<<<2048, 256>>>(X[c], xb / 2, 7 + c, 1.f, 1);
    fill_kernel<<<2048, 256>>>(W[c], wb / 2, 1000 + c, 0.02f, 1);
  }
  CK(cudaDeviceSynchronize());
  tpg_kernel_launch L;
  char why[200];
  if (tpg_gemm_select(prob(M, N, K, TPG_KDT_BF16, TPG_EPI_NONE), &L, why, sizeof why)) {
    fprintf(stderr, "select: %s\n", why); exit(2);
  }
  /* The TMA selections timed: as configured, and with stream-K off / forced. */
  tpg_gemm_args q;
  memset(&q, 0, sizeof q);
  q.m = M; q.n = N; q.k = K; q.ldx = K; q.ldw = K; q.dtype = TPG_KDT_BF16; q.epilogue = TPG_EPI_NONE;
  const tpg_kernel_launch Lsel = pick_tma(q, g_streamk), Loff = pick_tma(q, 0), Lsk = pick_tma(q, 2);
  const size_t wsb = std::max({L.workspace_bytes, Lsel.workspace_bytes, Loff.workspace_bytes, Lsk.workspace_bytes,
                               sk_bytes(256, q), sk_bytes(128, q)});
  std::vector<void *> WS(copies, nullptr);  /* one workspace per rotation copy (graph nodes own theirs) */
  if (wsb)
    for (auto &p : WS) { CK(cudaMalloc(&p, wsb)); CK(cudaMemset(p, 0, wsb)); }
  auto args = [&](int c) {
    tpg_gemm_args a; memset(&a, 0, sizeof a);
    a.x = X[c]; a.w = W[c]; a.y = Y[c]; a.m = M; a.n = N; a.k = K; a.ldx = K; a.ldw = K; a.ldy = N;
    a.dtype = TPG_KDT_BF16; a.epilogue = TPG_EPI_NONE; a.split_k = 1; a.workspace = WS[c];
    return a;
  };
  const float one = 1.f, zero = 0.f;
  auto run_cublas = [&](int c) {
    CKB(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, N, M, K, &one, W[c], CUDA_R_16BF, K, X[c], CUDA_R_16BF, K, &zero,
                     Y[c], CUDA_R_16BF, N, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  };
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0)); CK(cudaEventCreate(&e1));
  auto timeit = [&](auto fn) {
    for (int i = 0; i < 3; ++i) fn(i % copies);
    CK(cudaDeviceSynchronize());
    /* batches of B back-to-back launches between two events (launch latency
     * overlaps the previous kernel, as in a graph), median over batches */
    const int B = 10;
    std::vector<float> t;
    int c = 0;
    for (int i = 0; i < reps; ++i) {
      CK(cudaEventRecord(e0));
      for (int b = 0; b < B; ++b) fn(c++ % copies);
      CK(cudaEventRecord(e1)); CK(cudaEventSynchronize(e1));
      float ms; CK(cudaEventElapsedTime(&ms, e0, e1)); t.push_back(ms / B);
    }
    CK(cudaGetLastError());
    return median(t) * 1e3;
  };
  const double bytes = (double)xb + wb + yb, flops = 2.0 * M * N * (double)K;
  const double floor_us = std::max(bytes / 4.3e12, flops / 790e12) * 1e6;
  /* ours and cuBLAS timed in alternating batches so clock/thermal drift hits both */
  double cus = 0, primary_us = 0;
  tpg_kernel_launch LS;
  std::vector<tpg_gemm_tma_args> PS(copies);
  for (int c = 0; c < copies; ++c) select_tma(args(c), LS, PS[c]);
  {
    const int B = 10;
    for (int i = 0; i < 3; ++i) { run_cublas(i % copies); launch_sel(LS, PS[i % copies]); }
    CK(cudaDeviceSynchronize());
    std::vector<float> ta, tb;
    int c = 0;
    for (int i = 0; i < reps; ++i) {
      for (int which = 0; which < 2; ++which) {
        CK(cudaEventRecord(e0));
        for (int b = 0; b < B; ++b, ++c) {
          if (which == 0) launch_sel(LS, PS[c % copies]);
          else run_cublas(c % copies);
        }
        CK(cudaEventRecord(e1)); CK(cudaEventSynchronize(e1));
        float ms; CK(cudaEventElapsedTime(&ms, e0, e1));
        (which == 0 ? ta : tb).push_back(ms / B);
      }
    }
    CK(cudaGetLastError());
    primary_us = median(ta) * 1e3;
    cus = median(tb) * 1e3;
  }
  auto row = [&](const std::string &name, double us) {
    return TimeRow{M, K, N, name, us, cus, bytes / us / 1e6, flops / us / 1e6, cus / us, floor_us / us};
  };
  {
    rows.push_back(row(LS.kernel, primary_us));
    if (strcmp(LS.kernel, L.kernel))  /* the plain-args selection, when it differs */
      alts.push_back(row(std::string("plain:") + L.kernel, timeit([&](int c) { launch(L, args(c)); })));
  }
  if (g_arch == 90 && M > 16) {  /* stream-K A/B: whichever of off / forced the selection is not */
    for (int mode : {0, 2}) {
      std::vector<tpg_gemm_tma_args> PM(copies);
      tpg_kernel_launch LM;
      for (int c = 0; c < copies; ++c) select_tma(args(c), LM, PM[c], mode);
      if (LM.split_k == LS.split_k && !strcmp(LM.kernel, LS.kernel)) continue;
      alts.push_back(row(std::string(mode ? "sk:" : "nosk:") + LM.kernel, timeit([&](int c) { launch_sel(LM, PM[c]); })));
    }
  }
  /* alternatives */
  if (g_arch == 90 && M >= 64) {
    tpg_kernel_launch L9;
    tpg_gemm_select(prob(std::max(M, 65), N, K, TPG_KDT_BF16, TPG_EPI_NONE, 90), &L9, why, sizeof why);
    std::vector<tpg_gemm_tma_args> P(copies), P128(copies);
    for (int c = 0; c < copies; ++c) {
      memset(&P[c], 0, sizeof P[c]); P[c].a = args(c); encode_maps(P[c], 256);
      memset(&P128[c], 0, sizeof P128[c]); P128[c].a = args(c); encode_maps(P128[c], 128);
    }
    alts.push_back(row("sm90tma", timeit([&](int c) { launch_tma(256, P[c]); })));
    alts.push_back(row("sm90tma_n128", timeit([&](int c) { launch_tma(128, P128[c]); })));
    alts.push_back(row("sm90tma_sk", timeit([&](int c) { launch_tma(256, P[c], 0, true); })));
    alts.push_back(row("sm90tma_n128_sk", timeit([&](int c) { launch_tma(128, P128[c], 0, true); })));
    if (M == 64) {
      tpg_kernel_launch L8;
      tpg_gemm_select(prob(65, N, K, TPG_KDT_BF16, TPG_EPI_NONE, 80), &L8, why, sizeof why);
      alts.push_back(row("mma", timeit([&](int c) { launch(L8, args(c)); })));
    }
  }
  if (M <= 16) {
    tpg_kernel_launch LP = plain_decode(M, N, K, TPG_KDT_BF16, TPG_EPI_NONE);
    alts.push_back(row(std::string("plain:") + LP.kernel, timeit([&](int c) { launch(LP, args(c)); })));
  }
  for (int c = 0; c < copies; ++c) { cudaFree(X[c]); cudaFree(W[c]); cudaFree(Y[c]); if (WS[c]) cudaFree(WS[c]); }
  cudaEventDestroy(e0); cudaEventDestroy(e1);
}

/* --profile: one launch of each main kernel on the headline shapes, for ncu. */
static void profile_mode() {
  for (int M : {1, 16, 1024}) {
    const int K = 8192, N = 14336;
    uint16_t *X, *W, *Y;
    CK(cudaMalloc(&X, (size_t)M * K * 2)); CK(cudaMalloc(&W, (size_t)N * K * 2)); CK(cudaMalloc(&Y, (size_t)M * N * 2));
    fill_kernel<<<2048, 256>>>(X, (size_t)M * K, 7, 1.f, 1);
    fill_kernel<<<2048, 256>>>(W, (size_t)N * K, 9, 0.02f, 1);
    tpg_gemm_args a; memset(&a, 0, sizeof a);
    a.x = X; a.w = W; a.y = Y; a.m = M; a.n = N; a.k = K; a.ldx = K; a.ldw = K; a.ldy = N;
    a.dtype = TPG_KDT_BF16; a.split_k = 1;
    tpg_kernel_launch L; char why[200];
    tpg_gemm_select(prob(M, N, K, TPG_KDT_BF16, 0, 90), &L, why, sizeof why);
    void *ws = nullptr;
    if (L.workspace_bytes) { CK(cudaMalloc(&ws, L.workspace_bytes)); CK(cudaMemset(ws, 0, L.workspace_bytes)); }
    a.workspace = ws;
    launch(L, a);
    if (M <= 16) launch(plain_decode(M, N, K, TPG_KDT_BF16, 0), a);
    if (M > 64) {
      tpg_gemm_tma_args p; memset(&p, 0, sizeof p); p.a = a; encode_maps(p, 256);
      launch_tma(256, p);
    }
    CK(cudaDeviceSynchronize());
    cudaFree(X); cudaFree(W); cudaFree(Y); if (ws) cudaFree(ws);
  }
}

#include "gemm_zoo.cuh"

static std::vector<int> int_list(const char *s) {
  std::vector<int> v;
  for (const char *p = s; *p;) {
    char *end;
    const long x = strtol(p, &end, 10);
    if (end == p || x < 1) { fprintf(stderr, "bad number list '%s'\n", s); exit(2); }
    v.push_back((int)x);
    p = *end == ',' ? end + 1 : end;
  }
  return v;
}

/* --clusters: how many clusters of S CTAs of each one-CTA 128-row TMA kernel
 * are resident at once (cudaOccupancyMaxActiveClusters): what a "_kc<S>" grid
 * of tiles x S CTAs can run in one wave, as the GPCs pack them. */
static int clusters_mode() {
  const char *names[] = {"tpg_gemm_sm90tma_bf16", "tpg_gemm_sm90tma_bf16_n192", "tpg_gemm_sm90tma_bf16_n128",
                         "tpg_gemm_sm90tma_bf16_n64"};
  const unsigned smem[] = {tpg::sm90::cfg<256>::SMEM_BYTES, tpg::sm90::cfg<192>::SMEM_BYTES,
                           tpg::sm90::cfg<128>::SMEM_BYTES, tpg::sm90::cfg<64>::SMEM_BYTES};
  printf("resident clusters (CTAs) by cluster size S, one CTA an SM:\n%-30s", "kernel");
  for (int S = 1; S <= 8; ++S) printf(" S=%d     ", S);
  printf("\n");
  for (int i = 0; i < 4; ++i) {
    kfn_tma f = find_tma_kernel(names[i]);
    CK(cudaFuncSetAttribute((const void *)f, cudaFuncAttributeMaxDynamicSharedMemorySize, smem[i]));
    printf("%-30s", names[i]);
    for (int S = 1; S <= 8; ++S) {
      cudaLaunchConfig_t cfg = {};
      cudaLaunchAttribute at[1];
      cfg.gridDim = dim3(S * g_sms);
      cfg.blockDim = dim3(384);
      cfg.dynamicSmemBytes = smem[i];
      at[0].id = cudaLaunchAttributeClusterDimension;
      at[0].val.clusterDim.x = S;
      at[0].val.clusterDim.y = 1;
      at[0].val.clusterDim.z = 1;
      cfg.attrs = at;
      cfg.numAttrs = 1;
      int n = -1;
      const cudaError_t e = cudaOccupancyMaxActiveClusters(&n, f, &cfg);
      if (e != cudaSuccess) { printf(" err:%-5d", (int)e); cudaGetLastError(); continue; }
      printf(" %3d(%3d)", n, n * S);
    }
    printf("\n");
  }
  return 0;
}

/* The command line. */
struct MainOpts {
  bool check_only = false, quick = false, profile = false, zoo_mode = false, clusters = false;
  const char *json = nullptr;
  zoo::Opts zo;
};

static bool parse_args(int argc, char **argv, MainOpts &m) {
  zoo::Opts &zo = m.zo;
  for (int i = 1; i < argc; ++i) {
    if (!strcmp(argv[i], "--check-only")) m.check_only = true;
    else if (!strcmp(argv[i], "--quick")) m.quick = true;
    else if (!strcmp(argv[i], "--profile")) m.profile = true;
    else if (!strcmp(argv[i], "--json") && i + 1 < argc) m.json = argv[++i];
    else if (!strcmp(argv[i], "--zoo")) m.zoo_mode = true;
    else if (!strcmp(argv[i], "--budget-s") && i + 1 < argc) zo.budget_s = atof(argv[++i]);
    else if (!strcmp(argv[i], "--models") && i + 1 < argc) zo.filter = argv[++i];
    else if (!strcmp(argv[i], "--tp") && i + 1 < argc) zo.tps = int_list(argv[++i]);
    else if (!strcmp(argv[i], "--m") && i + 1 < argc) zo.ms = int_list(argv[++i]);
    else if (!strcmp(argv[i], "--reps") && i + 1 < argc) zo.reps = std::max(1, atoi(argv[++i]));
    else if (!strcmp(argv[i], "--no-check")) zo.check = false;
    else if (!strcmp(argv[i], "--cand")) zo.cand = true;
    else if (!strcmp(argv[i], "--cutlass")) zo.cutlass = true;
    else if (!strcmp(argv[i], "--graph")) zo.graph = true;
    else if (!strcmp(argv[i], "--trace")) zo.trace = true;
    else if (!strcmp(argv[i], "--list")) m.zoo_mode = zo.list = true;
    else if (!strcmp(argv[i], "--clusters")) m.clusters = true;
    else {
      fprintf(stderr,
              "usage: %s [--check-only] [--quick] [--m 1,3,...] [--json PATH] [--profile] [--clusters]\n"
              "       %s --zoo [--budget-s S] [--models SUBSTR] [--tp 1,2,4,8] [--m 1,16,...] [--reps N] [--no-check] [--graph]\n"
              "          [--cand | --cutlass] [--trace] [--json PATH] [--list]\n", argv[0], argv[0]);
      return false;
    }
  }
  return true;
}

/* The checks: each decode GEMV class, full and partial; 100: the swapped
 * tiles' token pairs (_sw _c2) with a partial second pair; 383: three
 * 128-row M-tiles, so a _c2 cluster's second tile is wholly past M. */
static void run_checks(const MainOpts &m, int &fails, double &worst) {
  const int Ms[] = {1, 3, 9, 16, 17, 33, 64, 100, 255, 383, 1024, 4096};
  const int NK[][2] = {{264, 520}, {1096, 776}, {2056, 4104}};
  const std::vector<int> &only = m.zo.ms; /* --m: these M only */
  auto t0 = std::chrono::steady_clock::now();
  int si = 0;
  const bool small = getenv("TPG_CHECK_SMALL") != nullptr; /* for compute-sanitizer runs */
  for (int M : Ms)
    for (auto &nk : NK) {
      if (!only.empty() && std::find(only.begin(), only.end(), M) == only.end()) continue;
      if (m.quick && nk[1] == 4104 && M > 64) continue;
      if (small && (nk[1] == 4104 || M > 255)) continue;
      check_shape(M, nk[0], nk[1], TPG_KDT_BF16, (si++ % 2) == 1);
      if (nk[1] != 4104) check_shape(M, nk[0], nk[1], TPG_KDT_F16, false);
    }
  /* Stream-K with fewer split iterations than CTAs (empty ranges): at 256 x 8576 x 1024 the
   * 128 x 128 _c2 has 67 units on 66 clusters, so the split wave is 1 unit x 16 K-blocks for 66
   * clusters, and 128 x 64 leaves 4 tiles x 16 for 132 CTAs. The fix-up once waited there for
   * CTAs with nothing to add and left those tiles unwritten. */
  if (!small && (only.empty() || std::find(only.begin(), only.end(), 256) != only.end()))
    check_shape(256, 8576, 1024, TPG_KDT_BF16, false);
  fails = 0, worst = 0;
  for (auto &c : g_checks) {
    fails += !c.ok;
    if (std::isfinite(c.err)) worst = std::max(worst, c.err);
  }
  printf("checks: %zu run, %d failed, worst rel_err %.3e (limit 1e-2), %.1f s\n", g_checks.size(), fails, worst,
         std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  printf("CUTLASS checks: %d (every candidate element-wise against fp64)%s; our kernels over the element-wise bound: %d "
         "(reported, not failed)\n", g_cutlass_checks,
         cutlass_available() ? "" : " - NONE: this gemm_bench has no embedded kernels", g_elem_over_ours);
  char lwhy[400] = "";
  tpg_lt_available(lwhy, sizeof lwhy);
  printf("cuBLASLt checks: %d (the family's plans, every answer and epilogue it runs, element-wise against fp64)%s%s\n",
         g_lt_checks, lwhy[0] ? " - NONE: " : "", lwhy);
}

static void print_time_rows(const char *title, const std::vector<TimeRow> &rows) {
  if (title) printf("%s", title);
  for (auto &r : rows)
    printf("%5d %6d %6d  %-20s %9.1f %9.1f %7.3f %8.1f %8.3f %8.3f\n", r.M, r.K, r.N, r.kernel.c_str(), r.us, r.cublas_us,
           r.tbs, r.tflops, r.vs_cublas, r.vs_floor);
}

/* The bandwidth ceiling, then ours against cublasGemmEx on the headline shapes. */
static double run_timing(bool quick, std::vector<TimeRow> &rows, std::vector<TimeRow> &alts) {
  const double bw = read_bandwidth((size_t)4 << 30, 1);
  const double bw_dec = read_bandwidth((size_t)8192 * 14336 * 2, 3);
  printf("pure-read bandwidth (ld.global.nc 16B): %.3f TB/s on 4 GiB; %.3f TB/s (%.1f us) on 235 MB = one 8192x14336 bf16 weight\n",
         bw, bw_dec, 8192.0 * 14336 * 2 / bw_dec / 1e6);
  cublasHandle_t h;
  CKB(cublasCreate(&h));
  const int TM[] = {1, 4, 16, 64, 128, 256, 1024, 4096};
  const int TKN[][2] = {{8192, 14336}, {14336, 8192}, {4096, 7168}, {7168, 4096}, {8192, 8192}};
  for (auto &kn : TKN)
    for (int M : TM) time_shape(h, M, kn[0], kn[1], quick ? 5 : (M >= 1024 ? 11 : 21), rows, alts);
  time_shape(h, 8192, 8192, 8192, quick ? 3 : 7, rows, alts); /* the 8192^3 reference */
  cublasDestroy(h);
  print_time_rows("\nalternatives (not selected):\n", alts);
  printf("\n%5s %6s %6s  %-20s %9s %9s %7s %8s %8s %8s\n", "M", "K", "N", "kernel", "us", "cublas_us", "TB/s",
         "TFLOP/s", "x_cublas", "x_floor");
  print_time_rows(nullptr, rows);
  printf("(x_cublas = cublas_us / us, >1 is faster than cuBLAS; x_floor = floor/us with floor = max(bytes/4.3TB/s, flops/790TFLOP/s); read ceiling %.3f TB/s)\n", bw);
  return bw;
}

static void write_main_json(const char *path, const char *device, double bw, const std::vector<TimeRow> &rows) {
  FILE *f = fopen(path, "w");
  if (!f) return;
  fprintf(f, "{\"device\":\"%s\",\"read_tbs\":%.4f,\"checks\":[", device, bw);
  for (size_t i = 0; i < g_checks.size(); ++i)
    fprintf(f, "%s{\"what\":\"%s\",\"rel_err\":%.4e,\"ok\":%s}", i ? "," : "", g_checks[i].what.c_str(),
            g_checks[i].err, g_checks[i].ok ? "true" : "false");
  fprintf(f, "],\"timing\":[");
  for (size_t i = 0; i < rows.size(); ++i) {
    auto &r = rows[i];
    fprintf(f, "%s{\"M\":%d,\"K\":%d,\"N\":%d,\"kernel\":\"%s\",\"us\":%.2f,\"cublas_us\":%.2f,\"tbs\":%.4f,\"tflops\":%.2f,\"x_cublas\":%.4f,\"x_floor\":%.4f}",
            i ? "," : "", r.M, r.K, r.N, r.kernel.c_str(), r.us, r.cublas_us, r.tbs, r.tflops, r.vs_cublas, r.vs_floor);
  }
  fprintf(f, "]}\n");
  fclose(f);
}

int main(int argc, char **argv) {
  /* Line-buffered even into a file: a run its caller's timeout kills still
   * shows the shapes it got through (the suite's stages log to files). */
  setvbuf(stdout, nullptr, _IOLBF, 0);
  MainOpts m;
  if (!parse_args(argc, argv, m)) return 2;
  if (m.zoo_mode && m.zo.list) return zoo::list(m.zo); /* no GPU needed */
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  g_sms = prop.multiProcessorCount;
  g_arch = prop.major * 10 + prop.minor;
  if (getenv("TPG_ARCH")) g_arch = atoi(getenv("TPG_ARCH")); /* e.g. 80: test the fallback selection */
  if (getenv("TPG_GEMM_STREAMK") && getenv("TPG_GEMM_STREAMK")[0]) g_streamk = atoi(getenv("TPG_GEMM_STREAMK"));
  printf("device: %s, %d SMs, sm_%d, L2 %d MB\n", prop.name, g_sms, g_arch, prop.l2CacheSize >> 20);
  if (m.profile) {
    profile_mode();
    printf("profile launches done\n");
    return 0;
  }
  if (m.clusters) return clusters_mode();
  g_rng.seed((uint64_t)std::chrono::high_resolution_clock::now().time_since_epoch().count());
  if (m.zoo_mode) {
    const int rc = zoo::run(m.zo, prop.name, m.json);
    int zf = 0;
    for (auto &c : g_checks) zf += !c.ok;
    printf("checks: %zu run, %d failed\n", g_checks.size(), zf);
    return rc;
  }
  int fails = 0;
  double worst = 0, bw = 0;
  run_checks(m, fails, worst);
  std::vector<TimeRow> rows, alts;
  if (!m.check_only) bw = run_timing(m.quick, rows, alts);
  for (auto &r : alts) rows.push_back(r);
  if (m.json) write_main_json(m.json, prop.name, bw, rows);
  printf("checks: %zu run, %d failed, worst rel_err %.3e\n", g_checks.size(), fails, worst);
  return fails ? 1 : 0;
}
