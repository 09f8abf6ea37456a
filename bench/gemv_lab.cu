/* gemv_lab.cu - decode GEMM (M <= 64) experiments: configurations of the
 * split-K GEMV (kernels/gemm/gemv.cu, gemv_split_body) side by side with the
 * library's current decode GEMV and cuBLASLt, timed the way `gemm_bench
 * --zoo` times (a 256 MiB L2 flush, then one launch between two events,
 * median), with every configuration checked against an fp64 CPU reference.
 *
 * A measurement program for fitting the selector (lib/gemm/select.c), not a
 * test: it prints one JSON line per (shape, M) and a summary table last.
 *
 *   gemv_lab [--budget-s S] [--m LIST] [--shapes N:K:epi,...] [--reps R]
 *
 * Also measures what a single launch costs in this timing method (an empty
 * kernel, a pure streaming read of 8..512 MB), so the bandwidth figures can
 * be read against what the method allows.
 */
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "../kernels/gemm/gemv.cu"
#include "../lib/gemm/ours.h"
#include "bench_cuda.cuh"

typedef void (*kfn)(const tpg_gemm_args);

/* Lab configurations of the split-K body: (MT, R, U, KW, PF, MINB, LDF). */
#define LV(NAME, MT, R, U, KW, PF, MINB, LDF)                                          \
  __global__ void __launch_bounds__(KW * 32, MINB) NAME(const __grid_constant__ tpg_gemm_args a) { \
    tpg::gemv_split_body<__nv_bfloat16, MT, R, U, KW, PF, LDF>(a);                    \
  }
/* the same with the log2(KW)-step tree reduction of the warps (A/B) */
#define LVT(NAME, MT, R, U, KW, PF, MINB, LDF)                                         \
  __global__ void __launch_bounds__(KW * 32, MINB) NAME(const __grid_constant__ tpg_gemm_args a) { \
    tpg::gemv_split_body<__nv_bfloat16, MT, R, U, KW, PF, LDF, false>(a);             \
  }
/* the same loading X chunk by chunk before its mmas (fewer registers, larger U) */
#define LVX(NAME, MT, R, U, KW, PF, MINB, LDF)                                         \
  __global__ void __launch_bounds__(KW * 32, MINB) NAME(const __grid_constant__ tpg_gemm_args a) { \
    tpg::gemv_split_body<__nv_bfloat16, MT, R, U, KW, PF, LDF, true, true>(a);        \
  }
/* gemv_lab compared 36 configurations on an H200 (docs/gemm.md, "The decode
 * GEMV"; docs/kernels.md, "Decode GEMV"); the library has the winners.
 * Kept here: those, and the tree reduction for A/B. Add a line to try
 * another. */
LV(lv8, 1, 1, 8, 8, false, 2, 2)
LVT(lv8t, 1, 1, 8, 8, false, 2, 2)
LV(lv8w4, 1, 1, 8, 4, false, 4, 2)
LV(lv16, 2, 1, 2, 8, false, 3, 2)
LVX(lv16w4x, 2, 1, 8, 4, false, 4, 2)
LVX(lv32x, 4, 1, 4, 8, false, 2, 2)
LVX(lv64x, 8, 1, 4, 8, false, 2, 2)

struct Var { const char *name; kfn fn; int maxm, mt, r, threads; int occ; };
static Var kVars[] = {
    {"s8_r1u8", lv8, 8, 1, 1, 256},          {"s8_r1u8t", lv8t, 8, 1, 1, 256},
    {"s8_r1u8w4", lv8w4, 8, 1, 1, 128},      {"s16_r1u2b3", lv16, 16, 2, 1, 256},
    {"s16_r1u8w4x", lv16w4x, 16, 2, 1, 128}, {"s32_r1u4x", lv32x, 32, 4, 1, 256},
    {"s64_r1u4x", lv64x, 64, 8, 1, 256},
};
static const struct { const char *name; kfn fn; } kLib[] = {
    {"tpg_gemv_bf16_m8", tpg_gemv_bf16_m8},       {"tpg_gemv_bf16_m16", tpg_gemv_bf16_m16},
    {"tpg_gemv_bf16_m8w4", tpg_gemv_bf16_m8w4},   {"tpg_gemv_bf16_m16w4", tpg_gemv_bf16_m16w4},
    {"tpg_gemv_bf16_m32", tpg_gemv_bf16_m32},     {"tpg_gemv_bf16_m64", tpg_gemv_bf16_m64},
    {"tpg_gemv_sk_bf16_m8", tpg_gemv_sk_bf16_m8}, {"tpg_gemv_sk_bf16_m16", tpg_gemv_sk_bf16_m16},
};
static kfn lib_fn(const char *n) {
  for (auto &e : kLib)
    if (!strcmp(e.name, n)) return e.fn;
  fprintf(stderr, "no kernel %s\n", n);
  exit(2);
}

static int g_sms = 0;

__global__ void fill_kernel(uint16_t *p, size_t n, uint32_t seed, float scale) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    uint32_t h = (uint32_t)i * 2654435761u ^ seed;
    h ^= h >> 15; h *= 2246822519u; h ^= h >> 13; h *= 3266489917u; h ^= h >> 16;
    const float f = ((h & 0xFFFFFF) / 16777216.f * 2.f - 1.f) * scale;
    __nv_bfloat16 b = __float2bfloat16_rn(f);
    p[i] = *reinterpret_cast<uint16_t *>(&b);
  }
}
__global__ void empty_kernel(int) {}
/* persistent streaming read: 8 independent 16-byte loads in flight per thread */
__global__ void __launch_bounds__(512) read_kernel(const uint4 *__restrict__ p, size_t n, unsigned *sink) {
  uint32_t s = 0;
  const size_t stride = (size_t)gridDim.x * blockDim.x;
  size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  for (; i + 7 * stride < n; i += 8 * stride) {
    uint4 v[8];
#pragma unroll
    for (int j = 0; j < 8; ++j) v[j] = tpg::ld_stream(p + i + j * stride);
#pragma unroll
    for (int j = 0; j < 8; ++j) s ^= v[j].x ^ v[j].y ^ v[j].z ^ v[j].w;
  }
  for (; i < n; i += stride) { uint4 v = tpg::ld_stream(p + i); s ^= v.x ^ v.y ^ v.z ^ v.w; }
  if (s == 0x12345678u) sink[0] = s;
}

static float bf2f(uint16_t v) { uint32_t u = (uint32_t)v << 16; float f; memcpy(&f, &u, 4); return f; }

struct Shape { int n, k, epi; };
static const Shape kShapes[] = {
#include "gemv_lab_shapes.inc"
};


int main(int argc, char **argv) {
  double budget = 80;
  int reps_max = 15;
  std::vector<int> ms{1, 8, 16, 32, 64};
  bool graph_only = false;
  for (int i = 1; i < argc; ++i) {
    if (!strcmp(argv[i], "--graph")) graph_only = true;
    else if (!strcmp(argv[i], "--budget-s") && i + 1 < argc) budget = atof(argv[++i]);
    else if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps_max = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--m") && i + 1 < argc) {
      ms.clear();
      for (char *t = strtok(argv[++i], ","); t; t = strtok(nullptr, ",")) ms.push_back(atoi(t));
    } else { fprintf(stderr, "usage: gemv_lab [--budget-s S] [--reps R] [--m LIST] [--graph]\n"); return 2; }
  }
  const auto t0 = std::chrono::steady_clock::now();
  auto elapsed = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); };
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  g_sms = prop.multiProcessorCount;
  printf("device %s, %d SMs\n", prop.name, g_sms);
  for (auto &v : kVars) {
    CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&v.occ, v.fn, v.threads, 0));
    cudaFuncAttributes fa;
    CK(cudaFuncGetAttributes(&fa, v.fn));
    printf("var %-14s threads %d regs %d smem %zu occ %d\n", v.name, v.threads, fa.numRegs, fa.sharedSizeBytes, v.occ);
  }

  /* arena: W up to the largest shape (2N rows for SwiGLU), X for M = 64 */
  size_t maxw = 0, maxk = 0, maxn = 0;
  for (auto &s : kShapes) {
    maxw = std::max(maxw, (size_t)s.n * s.k * (s.epi == TPG_EPI_SWIGLU ? 2 : 1));
    maxk = std::max(maxk, (size_t)s.k);
    maxn = std::max(maxn, (size_t)s.n * 2);
  }
  uint16_t *W, *X, *Y, *B;
  unsigned *flush, *sink;
  void *ws, *ws_lib, *ltws; /* split slots are left dirty; the library's stream-K GEMV wants zeroed partials */
  const size_t flush_words = (256u << 20) / 4, ws_bytes = 256u << 20;
  CK(cudaMalloc(&W, maxw * 2)); CK(cudaMalloc(&X, 64 * maxk * 2)); CK(cudaMalloc(&Y, 64 * maxn * 4));
  CK(cudaMalloc(&B, maxn * 2)); CK(cudaMalloc(&flush, flush_words * 4)); CK(cudaMalloc(&sink, 4));
  CK(cudaMalloc(&ws, ws_bytes)); CK(cudaMemset(ws, 0, ws_bytes));
  CK(cudaMalloc(&ws_lib, ws_bytes)); CK(cudaMemset(ws_lib, 0, ws_bytes)); CK(cudaMalloc(&ltws, kLtWorkspace));  /* Lt::run passes that size */
  CK(cudaMemset(flush, 1, flush_words * 4));
  fill_kernel<<<4096, 256>>>(W, maxw, 1001, 0.02f);
  fill_kernel<<<1024, 256>>>(X, 64 * maxk, 7, 1.f);
  fill_kernel<<<256, 256>>>(B, maxn, 77, 0.5f);
  CK(cudaDeviceSynchronize());
  std::vector<uint16_t> hX(64 * maxk), hB(maxn);
  CK(cudaMemcpy(hX.data(), X, hX.size() * 2, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(hB.data(), B, hB.size() * 2, cudaMemcpyDeviceToHost));

  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0)); CK(cudaEventCreate(&e1));
  auto flushL2 = [&] { flush_kernel<<<g_sms * 4, 512>>>(flush, flush_words, sink); };
  /* zoo method: flush, event, one launch, event; median; functions alternate per repetition */
  auto time_all = [&](std::vector<std::function<void()>> &fns, int reps) {
    for (auto &f : fns) { flushL2(); f(); }
    CK(cudaDeviceSynchronize());
    std::vector<std::vector<double>> t(fns.size());
    for (int r = 0; r < reps; ++r)
      for (size_t i = 0; i < fns.size(); ++i) {
        flushL2();
        CK(cudaEventRecord(e0)); fns[i](); CK(cudaEventRecord(e1)); CK(cudaEventSynchronize(e1));
        float ms_; CK(cudaEventElapsedTime(&ms_, e0, e1)); t[i].push_back(ms_ * 1e3);
      }
    CK(cudaGetLastError());
    std::vector<double> med;
    for (auto &v : t) med.push_back(median_d(v));
    return med;
  };

  /* 1. what one launch costs in this method */
  {
    std::vector<std::function<void()>> fns;
    fns.push_back([&] { empty_kernel<<<1, 32>>>(0); });
    fns.push_back([&] { empty_kernel<<<264, 256>>>(0); });
    const size_t sizes[] = {8u << 20, 16u << 20, 32u << 20, 64u << 20, 128u << 20, 256u << 20, 512u << 20};
    for (size_t b : sizes)
      fns.push_back([&, b] { read_kernel<<<g_sms * 2, 512>>>((const uint4 *)W, b / 16, sink); });
    auto med = time_all(fns, 15);
    printf("overhead: empty 1x32 %.2f us, empty 264x256 %.2f us\n", med[0], med[1]);
    for (size_t i = 0; i < 7; ++i)
      printf("read %4zu MB: %7.2f us = %.2f TB/s (minus empty: %.2f TB/s)\n", sizes[i] >> 20, med[2 + i],
             sizes[i] / med[2 + i] / 1e6, sizes[i] / (med[2 + i] - med[1]) / 1e6);
  }

  /* cuBLASLt as the zoo calls it */
  cublasLtHandle_t lt;
  CKL(cublasLtCreate(&lt));

  /* 2. --graph: what a model's decode step sees. 20 launches back to back in
   * one CUDA graph, each on another copy of W (copies x W >= 256 MB, so L2
   * never holds the next one), the library's selection against cuBLASLt and
   * the streaming read of the same bytes; us per launch, median of 9 graph
   * launches. Without a launch's own ~4.4 us of event-to-kernel overhead
   * this is the bandwidth the layer gets. */
  if (graph_only) {
    static const int gs[][3] = {{4096, 4096, 0}, {6144, 4096, 0}, {4096, 14336, 0}, {8192, 8192, 0}, {14336, 4096, 4},
                                {8192, 28672, 0}, {28672, 8192, 4}, {8192, 3584, 0}, {16384, 2048, 0}};
    cudaStream_t st;
    CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    printf("graph: 20 launches per graph, W rotated over copies >= 256 MB; us per launch (TB/s of W)\n");
    printf("    M      N      K epi  kernel                 ours          cuBLASLt      read kernel\n");
    for (int M : ms)
      for (auto &g : gs) {
        const int N = g[0], K = g[1], epi = g[2], nw = epi == TPG_EPI_SWIGLU ? 2 * N : N;
        const size_t wel = (size_t)nw * K;
        const int copies = (int)std::min<size_t>(20, std::max<size_t>(2, (256u << 20) / (wel * 2) + 1));
        if (wel * copies > maxw) continue;
        tpg_kernel_launch L;
        char why[200];
        const tpg_gemm_problem P = tpg_gemm_problem_make(M, N, K, TPG_KDT_BF16, epi, 90, g_sms);
        if (tpg_gemm_select(&P, &L, why, sizeof why)) { fprintf(stderr, "%s\n", why); return 2; }
        const kfn f = lib_fn(L.kernel);
        tpg_gemm_args a;
        memset(&a, 0, sizeof a);
        a.x = X; a.y = Y; a.m = M; a.n = N; a.k = K; a.ldx = K; a.ldw = K; a.ldy = N; a.dtype = TPG_KDT_BF16;
        a.epilogue = epi; a.split_k = 1; a.workspace = ws_lib;
        CK(cudaMemset(ws_lib, 0, ws_bytes));
        /* cuBLASLt without its bias epilogue here: the graph rows compare W streaming */
        Lt blas;
        blas.h = lt;
        blas.setup(M, nw, K, TPG_EPI_NONE, nullptr);
        const bool ltok = blas.ok;
        double res[3] = {NAN, NAN, NAN};
        for (int which = 0; which < 3; ++which) {
          if (which == 1 && !ltok) continue;
          cudaGraph_t gr;
          cudaGraphExec_t ge;
          CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
          for (int i = 0; i < 20; ++i) {
            const uint16_t *wc = W + (size_t)(i % copies) * wel;
            if (which == 0) { a.w = wc; f<<<dim3(L.grid[0], L.grid[1], L.grid[2]), L.block[0], 0, st>>>(a); }
            else if (which == 1) blas.run(X, wc, Y, ltws, st);
            else read_kernel<<<g_sms * 2, 512, 0, st>>>((const uint4 *)wc, wel * 2 / 16, sink);
          }
          CK(cudaStreamEndCapture(st, &gr));
          CK(cudaGraphInstantiate(&ge, gr, 0));
          std::vector<double> t;
          for (int r = 0; r < 11; ++r) {
            CK(cudaEventRecord(e0, st)); CK(cudaGraphLaunch(ge, st)); CK(cudaEventRecord(e1, st));
            CK(cudaEventSynchronize(e1));
            float ms_; CK(cudaEventElapsedTime(&ms_, e0, e1));
            if (r >= 2) t.push_back(ms_ * 1e3 / 20);
          }
          res[which] = median_d(t);
          CK(cudaGraphExecDestroy(ge)); CK(cudaGraphDestroy(gr));
        }
        blas.release();
        const double mb = wel * 2 / 1e6;
        printf("%5d %6d %6d %3d  %-20s %6.1f (%.2f)  %6.1f (%.2f)  %6.1f (%.2f)\n", M, N, K, epi, L.kernel, res[0],
               mb / res[0], res[1], mb / res[1], res[2], mb / res[2]);
      }
    return 0;
  }

  struct Sum { int M; double lsum_lib = 0, lsum_best = 0; int n = 0, over_lib = 0, over_best = 0, big = 0, big_ok = 0, big_ok_lib = 0; };
  std::vector<Sum> sums;
  for (int M : ms) { Sum s; s.M = M; sums.push_back(s); }
  int checks = 0, failed = 0;
  double worst_rel = 0;
  size_t skipped = 0;
  for (int M : ms)
    for (const Shape &sh : kShapes) {
      if (elapsed() > budget) { ++skipped; continue; }
      const int N = sh.n, K = sh.k, epi = sh.epi, swiglu = epi == TPG_EPI_SWIGLU;
      const int nw = swiglu ? 2 * N : N;
      tpg_gemm_args a;
      memset(&a, 0, sizeof a);
      a.x = X; a.w = W; a.y = Y; a.bias = epi == TPG_EPI_NONE || swiglu ? nullptr : B;
      a.m = M; a.n = N; a.k = K; a.ldx = K; a.ldw = K; a.ldy = N; a.dtype = TPG_KDT_BF16; a.epilogue = epi;
      a.split_k = 1; a.workspace = ws;
      struct Cfg { std::string name; kfn fn; dim3 grid; unsigned threads; void *ws; };
      std::vector<Cfg> cfgs;
      {
        tpg_kernel_launch L;
        char why[200];
        const tpg_gemm_problem P = tpg_gemm_problem_make(M, N, K, TPG_KDT_BF16, epi, 90, g_sms);
        if (tpg_gemm_select(&P, &L, why, sizeof why)) { fprintf(stderr, "%s\n", why); return 2; }
        if (L.workspace_bytes > ws_bytes) { fprintf(stderr, "workspace\n"); return 2; }
        cfgs.push_back({std::string("lib:") + L.kernel, lib_fn(L.kernel), dim3(L.grid[0], L.grid[1], L.grid[2]), L.block[0], ws_lib});
      }
      const int KC = (K + 31) / 32;
      size_t ws_off = 0; /* each configuration its own zeroed region: counters of one must not land on another's slots */
      for (auto &v : kVars) {
        if (M > v.maxm || (v.maxm > 8 && M <= v.maxm / 2)) continue;
        const int tiles = (N + (swiglu ? 8 : 16) * v.r - 1) / ((swiglu ? 8 : 16) * v.r);
        const int slots = v.occ * g_sms;
        for (int S : {1, 2, 3, 4, 6}) {
          if (S > 1 && ((long)tiles * S > 4L * slots || KC / S < 4)) continue;
          const size_t need = (((size_t)tiles * 4 + 255) & ~(size_t)255) + (size_t)tiles * S * v.r * v.mt * 4 * 32 * 4;
          if (ws_off + need > ws_bytes) continue;
          char nm[64];
          snprintf(nm, sizeof nm, "%s_s%d", v.name, S);
          cfgs.push_back({nm, v.fn, dim3(tiles, S), (unsigned)v.threads, static_cast<char *>(ws) + ws_off});
          ws_off += (need + 255) & ~(size_t)255;
        }
      }
      /* fresh counters for this shape's layouts (the kernels leave their own zero; slots are scratch) */
      CK(cudaMemset(ws, 0, ws_bytes));
      CK(cudaMemset(ws_lib, 0, ws_bytes));
      /* checks: every configuration once, Y poisoned, fp64 reference on 48 sampled outputs x all M rows */
      {
        const int ncol = 48;
        std::vector<int> cols;
        for (int j = 0; j < ncol; ++j) cols.push_back((int)(((long long)j * 7919 + 13) % N));
        cols[0] = 0; cols[1] = N - 1;
        std::vector<double> ref(M * ncol), refabs(M * ncol);
        std::vector<uint16_t> wr(K), wu(K);
        for (int j = 0; j < ncol; ++j) {
          const int c = cols[j];
          CK(cudaMemcpy(wr.data(), W + (size_t)c * K, K * 2, cudaMemcpyDeviceToHost));
          if (swiglu) CK(cudaMemcpy(wu.data(), W + (size_t)(N + c) * K, K * 2, cudaMemcpyDeviceToHost));
          for (int m = 0; m < M; ++m) {
            double z = 0, za = 0, u = 0, ua = 0;
            for (int k = 0; k < K; ++k) {
              const double xv = bf2f(hX[(size_t)m * K + k]);
              z += xv * bf2f(wr[k]); za += fabs(xv * bf2f(wr[k]));
              if (swiglu) { u += xv * bf2f(wu[k]); ua += fabs(xv * bf2f(wu[k])); }
            }
            double v = z;
            if (epi == TPG_EPI_BIAS) v = z + bf2f(hB[c]);
            if (epi == TPG_EPI_BIAS_GELU) { const double q = z + bf2f(hB[c]); v = 0.5 * q * (1 + tanh(0.7978845608028654 * (q + 0.044715 * q * q * q))); }
            if (swiglu) v = z / (1 + exp(-z)) * u;
            ref[m * ncol + j] = v;
            refabs[m * ncol + j] = 1.2 * (swiglu ? za * (fabs(u) + ua) : za) + 1.0; /* |silu'|, |gelu'| <= 1.2 */
          }
        }
        std::vector<uint16_t> hy((size_t)M * N);
        for (auto &c : cfgs) {
          /* twice: the second launch finds the counters the first left (they must be zero again) */
          a.workspace = c.ws;
          c.fn<<<c.grid, c.threads>>>(a);
          CK(cudaMemset(Y, 0xFF, (size_t)M * N * 2));
          c.fn<<<c.grid, c.threads>>>(a);
          CK(cudaGetLastError());
          CK(cudaMemcpy(hy.data(), Y, hy.size() * 2, cudaMemcpyDeviceToHost));
          double num = 0, den = 0, worst = 0;
          bool nan = false;
          for (size_t i = 0; i < hy.size(); ++i) { const float f = bf2f(hy[i]); if (f != f) nan = true; }
          for (int m = 0; m < M; ++m)
            for (int j = 0; j < ncol; ++j) {
              const double got = bf2f(hy[(size_t)m * N + cols[j]]), r = ref[m * ncol + j];
              /* bound: bf16 output rounding (2^-8 relative) plus fp32 accumulation, K/16 + 16 roundings of |x w| sums */
              const double bound = ldexp(1.0, -8) * fabs(r) + (K / 16.0 + 16) * ldexp(1.0, -24) * refabs[m * ncol + j] + 1e-6;
              worst = std::max(worst, fabs(got - r) / bound);
              num += (got - r) * (got - r); den += r * r;
            }
          const double rel = sqrt(num / std::max(den, 1e-30));
          ++checks;
          worst_rel = std::max(worst_rel, rel);
          if (nan || worst > 1 || rel > 1e-2) {
            ++failed;
            printf("CHECK FAIL M=%d N=%d K=%d epi=%d %s: nan=%d max_err/bound=%.3f rel=%.3e\n", M, N, K, epi, c.name.c_str(), nan, worst, rel);
          }
        }
      }
      std::vector<std::function<void()>> fns;
      for (auto &c : cfgs) fns.push_back([a, &c] { tpg_gemm_args b = a; b.workspace = c.ws; c.fn<<<c.grid, c.threads>>>(b); });
      Lt blas;
      blas.h = lt;
      blas.setup(M, nw, K, epi, B);
      const bool ltok = blas.ok;
      if (ltok) fns.push_back([&] { blas.run(X, W, Y, ltws); });
      const double wbytes = (double)nw * K * 2;
      const int reps = std::max(5, std::min(reps_max, (int)(30e-3 / std::max(wbytes / 4e12, 1e-6) / fns.size())));
      auto med = time_all(fns, reps);
      blas.release();
      const double cb = ltok ? med.back() : NAN;
      size_t bi = 1;
      for (size_t i = 1; i < cfgs.size(); ++i) if (med[i] < med[bi]) bi = i;
      printf("{\"M\":%d,\"N\":%d,\"K\":%d,\"epi\":%d,\"cublas\":%.2f,\"t\":{", M, N, K, epi, cb);
      for (size_t i = 0; i < cfgs.size(); ++i) printf("%s\"%s\":%.2f", i ? "," : "", cfgs[i].name.c_str(), med[i]);
      printf("}}\n");
      for (auto &s : sums)
        if (s.M == M && ltok) {
          ++s.n;
          s.lsum_lib += log(med[0] / cb);
          s.lsum_best += log(std::min(med[0], med[bi]) / cb);
          s.over_lib += med[0] > 1.05 * cb;
          s.over_best += med[bi] > 1.05 * cb;
          if (wbytes >= 32e6) { ++s.big; s.big_ok += wbytes / med[bi] / 1e6 >= 3.9; s.big_ok_lib += wbytes / med[0] / 1e6 >= 3.9; }
        }
    }
  printf("checks: %d configurations x shapes, %d failed, worst rel_norm %.3e (limit 1e-2); %zu (shape, M) skipped by the budget; %.1f s\n",
         checks, failed, worst_rel, skipped, elapsed());
  printf("    M shapes  lib/cublas geomean (>1.05x)   best split/cublas geomean (>1.05x)   W>=32MB at >=3.9 TB/s lib, best\n");
  for (auto &s : sums)
    if (s.n)
      printf("%5d %6d  %8.3f (%3d)                 %8.3f (%3d)                          %d/%d, %d/%d\n", s.M, s.n,
             exp(s.lsum_lib / s.n), s.over_lib, exp(s.lsum_best / s.n), s.over_best, s.big_ok_lib, s.big, s.big_ok, s.big);
  cublasLtDestroy(lt);
  return failed ? 1 : 0;
}
