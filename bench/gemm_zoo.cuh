/* gemm_zoo.cuh - `gemm_bench --zoo`: our GEMMs against cuBLASLt on the
 * per-rank shapes of real models, in one bounded run (included by
 * gemm_bench.cu after its helpers; not a separate program so that the zoo
 * launches exactly what the checks and the selector use).
 *
 * Why this shape of benchmark:
 *  - A selector tuned on a few (K, N) pairs can be far off on other model
 *    shapes, so the zoo is every QKV / O / up-gate / down GEMM of Llama-3
 *    8B/70B/405B, Qwen2.5-7B/72B, Mistral-7B, Mixtral-8x22B experts and a
 *    GPT-3-style GeLU model at TP 1, 2, 4, 8 and M = 1..8192 (powers of
 *    two), deduplicated on (M, N, K, epilogue).
 *  - cuBLAS is called as PyTorch's F.linear does on Hopper: cublasLtMatmul,
 *    bf16 in and out, fp32 compute, the first heuristic result with a
 *    32 MiB workspace, the bias / GELU+bias fused as a Lt epilogue when the
 *    layer has one. For the fused gate-up (SwiGLU) GEMM cuBLAS computes the
 *    2N-wide product only (PyTorch runs silu-and-mul as a second kernel, not
 *    counted here): a bound in cuBLAS's favour.
 *  - Each timed launch follows a read of a 256 MiB buffer (4x the L2), so
 *    every launch starts with a cold L2 as a layer in a model does; single
 *    launches between two events, median of N. Ours and cuBLAS alternate
 *    per repetition so clock drift hits both.
 *  - Checks run on a subset (each distinct (N, K, role) at a few M, every
 *    epilogue) so the whole zoo fits a few minutes; --budget-s bounds the
 *    run (checks get at most a third of it).
 */
#include "bench_cuda.cuh"

#include <functional>
#include <map>
#include <thread>
#include <tuple>

#include <unistd.h>  /* _exit: a hung launch ends the run without waiting on the GPU */

namespace zoo {

static bool g_zoo_cutlass = false; /* --cutlass: the checks also run the CUTLASS candidates */

/* act: 0 SwiGLU MLP, 1 GeLU MLP (with biases), 2 MoE experts only (SwiGLU). */
struct Model { const char *name; int hidden, ffn, heads, kv_heads, qkv_bias, act; };
static const Model kModels[] = {
    {"llama3-8b", 4096, 14336, 32, 8, 0, 0},   {"llama3-70b", 8192, 28672, 64, 8, 0, 0},
    {"llama3-405b", 16384, 53248, 128, 8, 0, 0}, {"qwen2.5-7b", 3584, 18944, 28, 4, 1, 0},
    {"qwen2.5-72b", 8192, 29568, 64, 8, 1, 0}, {"mistral-7b", 4096, 14336, 32, 8, 0, 0},
    {"mixtral-8x22b-expert", 6144, 16384, 48, 8, 0, 2}, {"gpt3-gelu", 12288, 49152, 96, 96, 1, 1},
};
static const int kHeadDim = 128;

/* A distinct GEMM: N outputs (W has 2N rows for SWIGLU), K, the epilogue the
 * layer uses, and which model/TP/role lines use it. */
struct Gemm { int N, K, epi; std::string users; };

struct Opts {
  double budget_s = 330;
  std::string filter;          /* substring of the model name; empty: all */
  std::vector<int> tps{1, 2, 4, 8};
  std::vector<int> ms;         /* empty: 1..8192 */
  int reps = 15;
  bool check = true;
  bool cand = false;           /* also time every forced candidate (A/B) */
  bool graph = false;          /* M <= 16 also back to back in a CUDA graph */
  bool list = false;           /* print the distinct GEMMs and exit (no GPU) */
  bool trace = false;          /* --trace: per-CTA timeline of each TMA launch (trace build only) */
  bool cutlass = false;        /* --cutlass: ours (the rule) beside every CUTLASS candidate,
                                  the family rules' picks and cuBLASLt; per-M table */
};

static std::vector<Gemm> build_gemms(const Opts &o) {
  std::vector<Gemm> out;
  std::map<std::tuple<int, int, int>, size_t> at;
  auto add = [&](int n, int k, int epi, const std::string &who) {
    auto key = std::make_tuple(n, k, epi);
    auto it = at.find(key);
    if (it == at.end()) { at[key] = out.size(); out.push_back({n, k, epi, who}); }
    else out[it->second].users += " " + who;
  };
  for (const Model &md : kModels) {
    if (!o.filter.empty() && !strstr(md.name, o.filter.c_str())) continue;
    for (int tp : o.tps) {
      /* a TP degree the model cannot be split by (heads, 16-byte rows) is skipped */
      if (md.heads % tp || md.ffn % tp || (md.ffn / tp) % 8) continue;
      const int q = md.heads / tp, kv = std::max(1, md.kv_heads / tp), f = md.ffn / tp, h = md.hidden;
      char who[96];
      auto tag = [&](const char *role) { snprintf(who, sizeof who, "%s/tp%d/%s", md.name, tp, role); return std::string(who); };
      if (md.act != 2) {
        add((q + 2 * kv) * kHeadDim, h, md.qkv_bias ? TPG_EPI_BIAS : TPG_EPI_NONE, tag("qkv"));
        add(h, q * kHeadDim, TPG_EPI_NONE, tag("o"));
      }
      if (md.act == 1) add(f, h, TPG_EPI_BIAS_GELU, tag("up"));
      else add(f, h, TPG_EPI_SWIGLU, tag("gate_up"));
      add(h, f, TPG_EPI_NONE, tag("down"));
    }
  }
  return out;
}

static int list(const Opts &o) {
  const std::vector<Gemm> gs = build_gemms(o);
  const size_t nm = o.ms.empty() ? 14 : o.ms.size();
  for (auto &g : gs) printf("N=%6d K=%6d %-9s %s\n", g.N, g.K, epi_name[g.epi], g.users.c_str());
  printf("zoo: %zu distinct (N, K, epilogue) x %zu M = %zu shapes\n", gs.size(), nm, gs.size() * nm);
  return 0;
}

/* ---- device buffers shared by every shape (allocated once, at the largest size) ---- */
struct Arena {
  uint16_t *x = nullptr, *w = nullptr, *y = nullptr, *bias = nullptr, *res = nullptr;
  void *ws = nullptr, *lt_ws = nullptr;
  size_t ws_bytes = 0;
  unsigned *flush = nullptr, *sink = nullptr;
  size_t flush_words = 0;
  unsigned long long *nan_count = nullptr;
};

template <typename T>
__global__ void count_nan_kernel(const T *y, int m, int n, int ldy, unsigned long long *count) {
  unsigned long long c = 0;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < (size_t)m * n; i += (size_t)gridDim.x * blockDim.x) {
    const float v = (float)y[(i / n) * (size_t)ldy + i % n];
    c += v != v;
  }
  if (c) atomicAdd(count, c);
}

static void ensure_ws(Arena &A, size_t bytes) {
  if (bytes <= A.ws_bytes) return;
  if (A.ws) CK(cudaFree(A.ws));
  CK(cudaMalloc(&A.ws, bytes));
  A.ws_bytes = bytes;
}

/* ---- the library's own choice (and, with --cand, forced candidates) ---- */
struct Ours {
  std::string name;
  tpg_kernel_launch L;
  tpg_gemm_tma_args P;
  std::shared_ptr<tpg_gemm_cutlass_args> blk; /* CUTLASS: prebuilt (host work out of the timed launch) */
  std::shared_ptr<LtPlan> lt;                 /* cuBLASLt: the family's plan, prebuilt */
  bool sep = false; /* SwiGLU the unfused way: the 2N-wide CUTLASS GEMM into A.res, then swiglu_combine_kernel */
};
static tpg_gemm_args make_args(const Arena &A, int M, int N, int K, int epi, int dtype = TPG_KDT_BF16) {
  tpg_gemm_args a;
  memset(&a, 0, sizeof a);
  a.x = A.x; a.w = A.w; a.y = A.y; a.m = M; a.n = N; a.k = K; a.ldx = K; a.ldw = K; a.ldy = N; a.ldr = N;
  a.dtype = dtype; a.epilogue = epi; a.split_k = 1; a.workspace = A.ws;
  a.bias = (epi == TPG_EPI_NONE || epi == TPG_EPI_F32_PARTIAL || epi == TPG_EPI_RESIDUAL) ? nullptr : A.bias;
  a.residual = epi == TPG_EPI_RESIDUAL ? A.res : nullptr;
  return a;
}
/* Our kernels' own pick: tpg_gemm_select_tma with TPG_GEMM_STREAMK. */
static Ours pick_library(Arena &A, const tpg_gemm_args &a) {
  Ours o;
  const tpg_kernel_launch L0 = pick_tma(a, g_streamk);
  ensure_ws(A, L0.workspace_bytes);
  tpg_gemm_args b = a;
  b.workspace = A.ws;
  select_tma(b, o.L, o.P);
  o.name = o.L.kernel;
  return o;
}
/* The workspace pointer is taken at launch: ensure_ws may have moved it (a
 * CUTLASS block holds it, and is rebuilt then). */
static void run_ours(const Arena &A, Ours &o) {
  tpg_gemm_tma_args p = o.P;
  p.a.workspace = A.ws;
  if (o.lt) {
    lt_launch(*o.lt, p.a);
    return;
  }
  if (o.L.cutlass) {
    if (!o.blk || o.blk->a.workspace != A.ws) o.blk = cutlass_block(o.L, p.a);
    cutlass_launch(o.L, *o.blk);
    if (o.sep) {
      const int m = o.P.a.m, n = o.P.a.n / 2;
      swiglu_combine_kernel<<<std::min<size_t>(((size_t)m * n + 255) / 256, 4096), 256>>>(
          (const __nv_bfloat16 *)o.P.a.y, (__nv_bfloat16 *)A.y, m, n);
    }
    return;
  }
  launch_sel(o.L, p);
}
/* A CUTLASS launch's variant name (cutlass_<kernel>[_sk|_k<S>]). */
static std::string cutlass_name(const tpg_kernel_launch &L) {
  tpg_gemm_variant v;
  memset(&v, 0, sizeof v);
  v.kind = TPG_GEMM_VAR_CUTLASS;
  v.cutlass = L.cutlass - 1;
  v.streamk = L.cutlass_mode == TPG_CUTLASS_SK;
  v.split = L.cutlass_mode == TPG_CUTLASS_SPLIT ? L.cutlass_splits : 0;
  return var_name(v);
}
/* A forced variant, ready to run (a cuBLASLt one with its plan). */
static Ours ours_of(Arena &A, const tpg_gemm_args &a, const tpg_gemm_variant &v) {
  Ours o;
  tpg_tma_encode xe, we;
  char why[200];
  if (tpg_gemm_select_variant(prob_of(a), &v, &o.L, &xe, &we, why, sizeof why)) {
    fprintf(stderr, "select_variant %s rejected: %s\n", var_name(v).c_str(), why); exit(2);
  }
  ensure_ws(A, o.L.workspace_bytes);
  tpg_gemm_args b = a;
  b.workspace = A.ws;
  select_var(b, v, o.L, o.P);
  if (o.L.family == TPG_GEMM_FAMILY_CUBLASLT) o.lt = lt_plan(prob_of(a).p, o.L.lt_algo);
  o.name = var_name(v);
  return o;
}

/* What the rule picks with `family` (TPG_GEMM_FAMILY_AUTO: what ships), as
 * a run; `ours` when it is our kernels' own pick. *fam: the family. */
static Ours rule_pick(Arena &A, const tpg_gemm_args &a, int family, const Ours &ours, int *fam) {
  tpg_gemm_variant v;
  char why[200];
  if (tpg_gemm_select_rule_variant(prob_of(a), family, &v, why, sizeof why)) {
    fprintf(stderr, "select_rule_variant: %s\n", why); exit(2);
  }
  *fam = tpg_gemm_variant_family(&v);
  return v.kind == TPG_GEMM_VAR_OURS ? ours : ours_of(A, a, v);
}

/* Forced candidates beside the library's choice (--cand): every
 * tpg_gemm_candidates variant but the heuristic, named by variant;
 * cutlass_only: the CUTLASS family's (--cutlass), and for SwiGLU, which
 * CUTLASS cannot fuse, "sep:" + each CUTLASS candidate of the 2N-wide GEMM
 * followed by the combine kernel. */
static std::vector<Ours> candidates(Arena &A, const tpg_gemm_args &a, bool cutlass_only = false) {
  std::vector<Ours> out;
  if (cutlass_only && a.epilogue == TPG_EPI_SWIGLU && a.dtype == TPG_KDT_BF16 && cutlass_available()) {
    tpg_gemm_args b = a;
    b.n = 2 * a.n;
    b.ldy = 2 * a.n;
    b.epilogue = TPG_EPI_NONE;
    b.bias = nullptr;
    b.y = A.res; /* the [M, 2N] intermediate; the combine writes A.y */
    for (const tpg_gemm_variant &v : shape_candidates(b.m, b.n, b.k, b.epilogue, b.dtype)) {
      if (v.kind != TPG_GEMM_VAR_CUTLASS) continue;
      Ours o;
      tpg_tma_encode xe, we;
      char why[200];
      if (tpg_gemm_select_variant(prob_of(b), &v, &o.L, &xe, &we, why, sizeof why)) {
        fprintf(stderr, "select_variant %s rejected: %s\n", var_name(v).c_str(), why); exit(2);
      }
      ensure_ws(A, o.L.workspace_bytes);
      memset(&o.P, 0, sizeof o.P);
      o.P.a = b;
      o.sep = true;
      o.name = "sep:" + var_name(v);
      out.push_back(o);
    }
    return out;
  }
  for (const tpg_gemm_variant &v : shape_candidates(a.m, a.n, a.k, a.epilogue, a.dtype)) {
    if (cutlass_only && v.kind != TPG_GEMM_VAR_CUTLASS) continue;
    out.push_back(ours_of(A, a, v));
  }
  return out;
}

/* Appends o unless a run of its name is there; returns its index. */
static size_t add_run(std::vector<Ours> &runs, const Ours &o) {
  for (size_t i = 0; i < runs.size(); ++i)
    if (runs[i].name == o.name) return i;
  runs.push_back(o);
  return runs.size() - 1;
}

/* ---- checks: fp64 reference on sampled rows x sampled columns ---- */
struct CheckStat { int run = 0, failed = 0; double worst_norm = 0, worst_bound = 0; };

static double unit_roundoff(int dtype, int epi) {
  if (epi == TPG_EPI_F32_PARTIAL) return ldexp(1.0, -24);
  return dtype == TPG_KDT_BF16 ? ldexp(1.0, -8) : ldexp(1.0, -11);
}

/* One (N, K) at one M: every epilogue, the library's choice (and candidates).
 * Reference and bound, per checked element (row r, column c):
 *   z = sum_k x[r,k] w[c,k] in fp64, S = sum_k |x[r,k] w[c,k]|;
 *   |kernel - ref| <= 2 u_out |ref|               (rounding to the output type, once,
 *                                                    with one fp32 rounding before it)
 *                   + e_acc * (sensitivity to z)  (fp32 accumulation: K/16 wgmma/mma
 *                                                    steps plus <= 16 partial-sum adds
 *                                                    (K slices, stream-K), each rounding
 *                                                    with relative error 2^-24 of a partial
 *                                                    sum bounded by S; 2^-23 for slack)
 *                   + 2^-11 |z + b| for GELU (tanh.approx: relative error 2^-10.99
 *                                                    on the tanh term, times 0.5 |z + b|)
 *                   + 2^-11 |ref| for SiLU/SwiGLU (__expf, far below this)
 *                   + 2^-24 for fp16 (subnormal spacing).
 *   with e_acc = (K/16 + 16) 2^-23 S; sensitivity 1 for none/bias/residual,
 *   1.13 = max |GELU'|, |SiLU'| for the activations, and for SwiGLU
 *   1.1 |up| e_gate + |silu(gate)| e_up + 1.1 e_gate e_up, where the
 *   cuBLASLt family's e_gate and e_up also hold u |gate| and u |up| (its
 *   product is rounded to the output type before tpg_lt_swiglu).
 * Plus: the whole output poisoned (NaN) before the launch and scanned for NaN
 * on the GPU; relative Frobenius error over the checked elements <= 1e-2;
 * stream-K counters zero again after the launch. */
/* The sampled rows and columns of one (N, K) at one M, their fp64 dot
 * products z and sums S of |x w| (gate and up rows), and the bias. */
struct ZooRef {
  std::vector<int> rows, cols;
  std::vector<double> z, S;
  std::vector<uint16_t> hb;
};

static void zoo_sample(const Gemm &g, int M, ZooRef &f) {
  const int N = g.N;
  if (M <= 8) for (int i = 0; i < M; ++i) f.rows.push_back(i);
  else {
    f.rows = {0, M - 1};
    std::uniform_int_distribution<int> R(1, M - 2);
    while ((int)f.rows.size() < 8) f.rows.push_back(R(g_rng));
  }
  if (N <= 256) for (int i = 0; i < N; ++i) f.cols.push_back(i);
  else {
    f.cols = {0, N - 1};
    std::uniform_int_distribution<int> C(1, N - 2);
    while ((int)f.cols.size() < 256) f.cols.push_back(C(g_rng));
  }
}

static void zoo_reference(const Arena &A, const Gemm &g, int M, int dtype, ZooRef &f) {
  const int N = g.N, K = g.K;
  zoo_sample(g, M, f);
  const size_t nr = f.rows.size(), nc = f.cols.size();
  /* host copies of the sampled rows of X and of W (gate row c and up row N + c) */
  std::vector<uint16_t> hx(nr * K), hw(nc * 2 * K);
  for (size_t i = 0; i < nr; ++i)
    CK(cudaMemcpy(&hx[i * K], A.x + (size_t)f.rows[i] * K, (size_t)K * 2, cudaMemcpyDeviceToHost));
  for (size_t j = 0; j < nc; ++j) {
    CK(cudaMemcpy(&hw[(2 * j) * K], A.w + (size_t)f.cols[j] * K, (size_t)K * 2, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(&hw[(2 * j + 1) * K], A.w + (size_t)(N + f.cols[j]) * K, (size_t)K * 2, cudaMemcpyDeviceToHost));
  }
  f.hb.resize(2 * (size_t)N);
  CK(cudaMemcpy(f.hb.data(), A.bias, f.hb.size() * 2, cudaMemcpyDeviceToHost));
  /* z and S for every (row, col, gate/up): threads over columns */
  f.z.assign(nr * nc * 2, 0.0), f.S.assign(nr * nc * 2, 0.0);
  std::vector<double> xd(nr * (size_t)K);
  for (size_t i = 0; i < xd.size(); ++i) xd[i] = h2d(hx[i], dtype);
  const unsigned nt = std::max(1u, std::min(16u, std::thread::hardware_concurrency()));
  std::vector<std::thread> th;
  for (unsigned t = 0; t < nt; ++t)
    th.emplace_back([&, t] {
      std::vector<double> wd(K);
      for (size_t j = t; j < nc * 2; j += nt) {
        for (int k = 0; k < K; ++k) wd[k] = h2d(hw[j * K + k], dtype);
        for (size_t i = 0; i < nr; ++i) {
          const double *xr = &xd[i * K];
          double s = 0, a = 0;
          for (int k = 0; k < K; ++k) { const double p = xr[k] * wd[k]; s += p; a += fabs(p); }
          f.z[(i * nc + j / 2) * 2 + j % 2] = s;
          f.S[(i * nc + j / 2) * 2 + j % 2] = a;
        }
      }
    });
  for (auto &x : th) x.join();
}

/* NaN anywhere in the output (counted on the GPU). */
static unsigned long long zoo_nans(const Arena &A, int M, int N, int dtype, int epi) {
  CK(cudaMemset(A.nan_count, 0, 8));
  if (epi == TPG_EPI_F32_PARTIAL) count_nan_kernel<<<1024, 256>>>((const float *)A.y, M, N, N, A.nan_count);
  else if (dtype == TPG_KDT_BF16) count_nan_kernel<<<1024, 256>>>((const __nv_bfloat16 *)A.y, M, N, N, A.nan_count);
  else count_nan_kernel<<<1024, 256>>>((const __half *)A.y, M, N, N, A.nan_count);
  unsigned long long nans = 0;
  CK(cudaMemcpy(&nans, A.nan_count, 8, cudaMemcpyDeviceToHost));
  return nans;
}

/* The sampled outputs against the reference: *rel the relative norm,
 * returns the worst |got - ref| / bound (the bound above check_one). */
static double zoo_verify(const Arena &A, const Gemm &g, int M, int dtype, int epi, const tpg_gemm_args &a,
                         const ZooRef &f, const std::vector<uint16_t> &hr, bool rounded_product, double *rel) {
  const int N = g.N, K = g.K;
  const bool f32 = epi == TPG_EPI_F32_PARTIAL;
  const size_t es = f32 ? 4 : 2, nc = f.cols.size();
  std::vector<uint8_t> yrow((size_t)N * es);
  const double u = unit_roundoff(dtype, epi), eacc = (K / 16.0 + 16) * ldexp(1.0, -23);
  double num = 0, den = 0, worst = 0;
  for (size_t i = 0; i < f.rows.size(); ++i) {
    const int m = f.rows[i];
    CK(cudaMemcpy(yrow.data(), (char *)A.y + (size_t)m * N * es, yrow.size(), cudaMemcpyDeviceToHost));
    for (size_t j = 0; j < nc; ++j) {
      const int n = f.cols[j];
      double got;
      if (f32) { float v; memcpy(&v, &yrow[(size_t)n * 4], 4); got = v; }
      else { uint16_t v; memcpy(&v, &yrow[(size_t)n * 2], 2); got = h2d(v, dtype); }
      const double b = a.bias ? h2d(f.hb[n], dtype) : 0, bu = a.bias ? h2d(f.hb[N + n], dtype) : 0;
      const double r = a.residual ? h2d(hr[(size_t)m * N + n], dtype) : 0;
      const double zg = f.z[(i * nc + j) * 2], zu = f.z[(i * nc + j) * 2 + 1];
      const double pu = rounded_product ? u : 0;
      const double eg = eacc * f.S[(i * nc + j) * 2] + pu * fabs(zg), eu = eacc * f.S[(i * nc + j) * 2 + 1] + pu * fabs(zu);
      const double ref = ref_epi(epi, zg, zu, b, bu, r);
      double sens = eg, approx = 0;
      if (epi == TPG_EPI_BIAS_SILU) sens = 1.13 * eg, approx = ldexp(fabs(ref), -11);
      /* GELU: 0.5 z (1 + tanh(.)) with tanh.approx's error 2^-11 |tanh| is up
       * to 2^-12 |z| absolute, which is large next to GELU(z) for z << 0 */
      if (epi == TPG_EPI_BIAS_GELU) sens = 1.13 * eg, approx = ldexp(fabs(zg + b), -11);
      if (epi == TPG_EPI_SWIGLU) {
        const double gg = zg + b, uu = zu + bu, sg = gg / (1 + exp(-gg));
        sens = 1.1 * fabs(uu) * eg + fabs(sg) * eu + 1.1 * eg * eu;
        approx = ldexp(fabs(ref), -11);
      }
      const double bound = 2 * u * fabs(ref) + sens + approx + (dtype == TPG_KDT_F16 && !f32 ? ldexp(1.0, -24) : 0);
      const double d = got - ref;
      num += d * d, den += ref * ref;
      worst = std::max(worst, std::isfinite(got) ? fabs(d) / bound : INFINITY);
    }
  }
  *rel = sqrt(num / std::max(den, 1e-300));
  return worst;
}

/* One run checked and recorded. */
static void zoo_check_run(Arena &A, const Gemm &g, int M, int dtype, int epi, const tpg_gemm_args &a, Ours &o,
                          const ZooRef &f, const std::vector<uint16_t> &hr, CheckStat &st, FILE *log) {
  CK(cudaMemset(A.ws, 0, A.ws_bytes));                 /* as a graph zeroes a fresh workspace once */
  CK(cudaMemset(A.y, 0xFF, (size_t)M * g.N * 4));      /* poison: NaN in every dtype */
  run_ours(A, o);
  CK(cudaDeviceSynchronize());
  const unsigned long long nans = zoo_nans(A, M, g.N, dtype, epi);
  size_t ws_dirty = 0;
  if (o.L.workspace_zeroed) {
    std::vector<uint32_t> h32(o.L.workspace_zeroed / 4);
    CK(cudaMemcpy(h32.data(), A.ws, o.L.workspace_zeroed, cudaMemcpyDeviceToHost));
    for (auto v : h32) ws_dirty += v != 0;
  }
  if (o.L.cutlass) ws_dirty += cutlass_dirty_words(*o.blk);
  double rel = 0;
  const bool lt_swiglu = epi == TPG_EPI_SWIGLU && o.L.family == TPG_GEMM_FAMILY_CUBLASLT;
  const double worst = zoo_verify(A, g, M, dtype, epi, a, f, hr, lt_swiglu, &rel);
  const bool ok = nans == 0 && ws_dirty == 0 && worst <= 1.0 && rel <= 1e-2;
  ++st.run;
  st.failed += !ok;
  st.worst_norm = std::max(st.worst_norm, std::isfinite(rel) ? rel : 1e30);
  st.worst_bound = std::max(st.worst_bound, std::isfinite(worst) ? worst : 1e30);
  char what[256];
  snprintf(what, sizeof what, "zoo %-30s %s M=%d N=%d K=%d epi=%s", o.name.c_str(), dtype == TPG_KDT_BF16 ? "bf16" : "f16",
           M, g.N, g.K, epi_name[epi]);
  g_checks.push_back({what, rel, ok});
  if (!ok || getenv("TPG_VERBOSE"))
    printf("%s %s rel_norm=%.3e max_err/bound=%.3f nan=%llu ws_nonzero=%zu\n", ok ? "ok  " : "FAIL", what, rel, worst,
           nans, ws_dirty);
  if (log) fprintf(log, "%s rel_norm=%.3e max_err/bound=%.3f%s\n", what, rel, worst, ok ? "" : " FAIL");
}

static void check_one(Arena &A, const Gemm &g, int M, int dtype, bool cand, CheckStat &st, FILE *log) {
  ZooRef f;
  std::vector<uint16_t> hr;
  zoo_reference(A, g, M, dtype, f);
  for (int epi = 0; epi < TPG_EPI_COUNT; ++epi) {
    tpg_gemm_args a = make_args(A, M, g.N, g.K, epi, dtype);
    if (epi == TPG_EPI_RESIDUAL && (M & 1)) a.bias = nullptr; /* both forms */
    std::vector<Ours> runs{pick_library(A, a)};
    for (int fam : {TPG_GEMM_FAMILY_AUTO, TPG_GEMM_FAMILY_CUBLASLT}) { /* what ships, and cuBLASLt's own node */
      int fm = 0;
      add_run(runs, rule_pick(A, a, fam, runs[0], &fm));
    }
    if (cand || g_zoo_cutlass)
      for (auto &o : candidates(A, a, !cand))
        if (!o.sep) add_run(runs, o); /* (the unfused SwiGLU is a timing comparison, not a kernel to check) */
    if (epi == TPG_EPI_RESIDUAL) {
      hr.resize((size_t)M * g.N);
      CK(cudaMemcpy(hr.data(), A.res, hr.size() * 2, cudaMemcpyDeviceToHost));
    }
    for (Ours &o : runs) zoo_check_run(A, g, M, dtype, epi, a, o, f, hr, st, log);
  }
}

/* ---- timing ---- */
struct Row {
  int M, N, K, epi;
  std::string kernel, users;
  double us, cublas_us, best_cand_us = 0;
  double g_us = NAN, g_cublas_us = NAN;  /* --graph: per launch, back to back in a graph */
  std::string best_cand;
  std::vector<std::pair<std::string, double>> cands;
  /* what the rule between the families picks (TPG_GEMM_FAMILY=auto: what
   * ships) and its family, TPG_GEMM_FAMILY=cutlass's pick (where CUTLASS
   * runs the shape), and the cuBLASLt family's own node (where it runs it) */
  std::string chosen, family, cutlass_rule;
  double chosen_us = NAN, cutlass_rule_us = NAN, lt_us = NAN;
};

/* --trace (a build with -DTPG_SM90_TRACE, bench/build.sh trace): one launch
 * after the L2 flush, then per-CTA %globaltimer stamps (kernels/gemm/sm90_tma.cu) relative
 * to the earliest CTA entry: median / max over CTAs of entry, first copy
 * issued, first stage landed, main loop done, fixup done, consumer done,
 * the start of the last segment's main loop (so its main loop and its
 * epilogue, done - fixup, have a length), the end of the barrier set-up
 * (after the CTA's or cluster's sync), the producer past setmaxnreg, and in
 * a "_kc<S>" launch kc_reduce's first barrier, its stores and its second
 * barrier. */
template <typename F>
static void trace_launch(unsigned ctas, F launch, int M, int N, int K, const char *name, double event_us) {
#ifdef TPG_SM90_TRACE
  using tpg::sm90::TRACE_CTAS;
  using tpg::sm90::TRACE_POINTS;
  static unsigned long long h[TRACE_CTAS][TRACE_POINTS];
  memset(h, 0, sizeof h);
  CK(cudaMemcpyToSymbol(tpg::sm90::trace_buf, h, sizeof h));
  launch();
  CK(cudaDeviceSynchronize());
  CK(cudaMemcpyFromSymbol(h, tpg::sm90::trace_buf, sizeof h));
  const unsigned n = std::min<unsigned>(ctas, TRACE_CTAS);
  unsigned long long t0 = ~0ull;
  for (unsigned c = 0; c < n; ++c) if (h[c][0]) t0 = std::min(t0, h[c][0]);
  printf("trace M=%d N=%d K=%d %-22s ctas=%u event=%.1fus |", M, N, K, name, ctas, event_us);
  static const char *pt[12] = {"entry", "1st_copy", "1st_data", "loop_end", "fixup", "done", "last_seg", "synced",
                               "setmaxnreg", "kc_sync1", "kc_pushed", "kc_sync2"};
  for (int i = 0; i < 12; ++i) {
    std::vector<double> v;
    for (unsigned c = 0; c < n; ++c) if (h[c][i]) v.push_back((h[c][i] - t0) * 1e-3);
    std::sort(v.begin(), v.end());
    if (v.empty()) printf(" %s -", pt[i]);
    else printf(" %s %.2f/%.2f", pt[i], v[v.size() / 2], v.back());
  }
  printf("\n");
#else
  (void)ctas; (void)launch; (void)M; (void)N; (void)K; (void)name; (void)event_us;
  static bool said = false;
  if (!said) fprintf(stderr, "--trace: this gemm_bench was built without -DTPG_SM90_TRACE\n");
  said = true;
#endif
}

/* --cutlass: geometric means of time / cuBLASLt per M:
 * ours (the rule's pick of our kernels, "ours-before"), the best CUTLASS
 * candidate (for SwiGLU the unfused "sep:" ones), the better of the two per
 * shape, the family rules' picks (TPG_GEMM_FAMILY=auto: "chosen", what ships;
 * =cutlass), and how many shapes are over 1.10x. */
static void cutlass_table(const std::vector<Row> &rows) {
  struct Acc { int n = 0, over = 0, nc = 0; double ours = 0, cut = 0, both = 0, chosen = 0, rule = 0; };
  std::map<int, Acc> by;
  Acc all;
  for (auto &r : rows) {
    if (!std::isfinite(r.cublas_us)) continue;
    double cut = INFINITY;
    for (auto &c : r.cands) cut = std::min(cut, c.second);
    for (Acc *a : {&by[r.M], &all}) {
      a->n++;
      a->ours += log(r.us / r.cublas_us);
      const double both = std::min(r.us, cut);
      a->both += log(both / r.cublas_us);
      if (std::isfinite(cut)) { a->nc++; a->cut += log(cut / r.cublas_us); }
      a->chosen += log((std::isfinite(r.chosen_us) ? r.chosen_us : r.us) / r.cublas_us);
      a->rule += log((std::isfinite(r.cutlass_rule_us) ? r.cutlass_rule_us : r.us) / r.cublas_us);
      a->over += (std::isfinite(r.chosen_us) ? r.chosen_us : r.us) / r.cublas_us > 1.10;
    }
  }
  printf("\nper M, geometric mean of time / cuBLASLt (ours = our rule's pick; CUTLASS = its best candidate, over the shapes "
         "it runs; best = the better per shape; chosen = TPG_GEMM_FAMILY=auto, what ships; cutlass rule = "
         "TPG_GEMM_FAMILY=cutlass; table: %s)\n", tpg_gemm_family_table_source());
  printf("%6s %6s %8s %8s %6s %8s %8s %12s %8s\n", "M", "shapes", "ours", "CUTLASS", "(n)", "best", "chosen",
         "cutlass rule", ">1.10x");
  auto line = [](const char *m, const Acc &a) {
    printf("%6s %6d %8.3f %8.3f %6d %8.3f %8.3f %12.3f %8d\n", m, a.n, exp(a.ours / a.n), a.nc ? exp(a.cut / a.nc) : NAN,
           a.nc, exp(a.both / a.n), exp(a.chosen / a.n), exp(a.rule / a.n), a.over);
  };
  for (auto &kv : by) line(std::to_string(kv.first).c_str(), kv.second);
  if (all.n) line("all", all);
}

/* ---- the run: arena, checks, timing, reports ---- */

/* Device state the timing shares: events, the hang limit, --graph's stream. */
struct Timer {
  Arena *A = nullptr;
  cudaEvent_t ev[4];
  double hang_s = 20.0;
  cudaStream_t gs_st = nullptr;
  size_t maxw = 0;
};

/* Before every launch, outside the events: zero the shared workspace, then
 * evict L2. The candidates of one shape share A.ws but not its layout: a
 * stream-K or split-K kernel leaves its counters zero yet its partial sums
 * in place, and those partials can lie where the next candidate (another
 * CUTLASS mode, or ours) keeps its barrier words, which it then waits on
 * forever. A graph gives each node its own workspace, and the tuner zeroes
 * it before each candidate (lib/gemm/tune_device.c); this does the same. */
static void flush(const Timer &T) {
  CK(cudaMemsetAsync(T.A->ws, 0, T.A->ws_bytes));
  flush_kernel<<<g_sms * 4, 512>>>(T.A->flush, T.A->flush_words, T.A->sink);
}

/* Waits for ev[1] for at most TPG_ZOO_HANG_S seconds (default 20; the
 * longest zoo GEMM takes ~3 ms), else names the launch and exits 3: a
 * kernel that never ends (a barrier word it waits on forever) then says
 * which it is instead of eating the run's whole timeout in silence. */
static void wait_or_name(const Timer &T, const std::string &what) {
  const auto t0 = std::chrono::steady_clock::now();
  cudaError_t e;
  while ((e = cudaEventQuery(T.ev[1])) == cudaErrorNotReady) {
    if (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() > T.hang_s) {
      fprintf(stderr, "zoo: %s did not finish within %.0f s (TPG_ZOO_HANG_S): a launch that never ends\n",
              what.c_str(), T.hang_s);
      fflush(stdout);
      _exit(3);
    }
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  CK(e);
}

/* Each function once to warm up, then reps rounds of all of them in turn
 * (clock drift hits all alike), each launch between two events after a
 * flush; med[i]: the median of function i. */
static void time_all(const Timer &T, std::vector<std::function<void()>> &fns, const std::vector<std::string> &names,
                     int reps, std::vector<double> &med) {
  for (size_t i = 0; i < fns.size(); ++i) { /* warm-up (loads modules, heuristics) */
    flush(T);
    fns[i]();
    CK(cudaEventRecord(T.ev[1]));
    wait_or_name(T, names[i] + " (warm-up)");
  }
  std::vector<std::vector<double>> t(fns.size());
  for (int r = 0; r < reps; ++r)
    for (size_t i = 0; i < fns.size(); ++i) {
      flush(T);
      CK(cudaEventRecord(T.ev[0]));
      fns[i]();
      CK(cudaEventRecord(T.ev[1]));
      wait_or_name(T, names[i]);
      float ms_;
      CK(cudaEventElapsedTime(&ms_, T.ev[0], T.ev[1]));
      t[i].push_back(ms_ * 1e3);
    }
  CK(cudaGetLastError());
  med.clear();
  for (auto &v : t) med.push_back(median_d(v));
}

/* --graph (M <= 16, the decode GEMMs): the single launches above each pay
 * a launch's own start-up and tail between two events (an empty kernel
 * measures ~4.4 us that way), which no decode step pays: its GEMVs run back
 * to back in one graph. So also time GR launches of ours (each as the
 * library selects it) and GR of cuBLASLt, each captured into its own graph,
 * W rotated over copies spanning >= 256 MB of the arena so every launch
 * reads its weights from HBM, not L2; one L2 flush before each graph
 * launch, median of 5, time / GR per launch. */
static const int GR = 20;
static void graph_time(Timer &T, Lt &lt, const tpg_gemm_args &a0, size_t nw, double &ours_us, double &cb_us) {
  Arena &A = *T.A;
  const size_t wel = nw * (size_t)a0.k;
  size_t copies = ((size_t)256 << 20) / (2 * wel) + 2;
  copies = std::max<size_t>(1, std::min(copies, T.maxw / wel));
  std::vector<Ours> os;
  for (int i = 0; i < GR; ++i) {
    tpg_gemm_args a = a0;
    a.w = A.w + (i % copies) * wel;
    os.push_back(pick_library(A, a)); /* may grow the workspace: all picks before the capture */
  }
  cudaGraph_t g[2] = {nullptr, nullptr};
  cudaGraphExec_t ge[2] = {nullptr, nullptr};
  const int ng = lt.ok ? 2 : 1;
  CK(cudaStreamBeginCapture(T.gs_st, cudaStreamCaptureModeThreadLocal));
  for (int i = 0; i < GR; ++i) {
    tpg_gemm_tma_args p = os[i].P;
    p.a.workspace = A.ws;
    launch_sel(os[i].L, p, T.gs_st);
  }
  CK(cudaStreamEndCapture(T.gs_st, &g[0]));
  if (lt.ok) {
    CK(cudaStreamBeginCapture(T.gs_st, cudaStreamCaptureModeThreadLocal));
    for (int i = 0; i < GR; ++i) lt.run(A.x, A.w + (i % copies) * wel, A.y, A.lt_ws, T.gs_st);
    CK(cudaStreamEndCapture(T.gs_st, &g[1]));
  }
  std::vector<double> t[2];
  for (int j = 0; j < ng; ++j) {
    CK(cudaGraphInstantiate(&ge[j], g[j], 0));
    CK(cudaGraphLaunch(ge[j], T.gs_st)); /* warm-up */
  }
  CK(cudaStreamSynchronize(T.gs_st));
  for (int r = 0; r < 5; ++r)
    for (int j = 0; j < ng; ++j) {
      flush_kernel<<<g_sms * 4, 512, 0, T.gs_st>>>(A.flush, A.flush_words, A.sink);
      CK(cudaEventRecord(T.ev[2], T.gs_st));
      CK(cudaGraphLaunch(ge[j], T.gs_st));
      CK(cudaEventRecord(T.ev[3], T.gs_st));
      CK(cudaEventSynchronize(T.ev[3]));
      float ms_;
      CK(cudaEventElapsedTime(&ms_, T.ev[2], T.ev[3]));
      t[j].push_back(ms_ * 1e3 / GR);
    }
  for (int j = 0; j < ng; ++j) {
    CK(cudaGraphExecDestroy(ge[j]));
    CK(cudaGraphDestroy(g[j]));
  }
  ours_us = median_d(t[0]);
  cb_us = lt.ok ? median_d(t[1]) : NAN;
}

/* One shape timed: ours, what ships (the rule between the families), the
 * CUTLASS rule's pick and the cuBLASLt family's node (each once, where the
 * family runs the shape), the candidates (--cand / --cutlass) and the
 * cuBLASLt baseline, alternating, cold L2. */
static Row time_shape(Timer &T, Lt &lt, const Opts &o, const Gemm &g, int M) {
  Arena &A = *T.A;
  tpg_gemm_args a = make_args(A, M, g.N, g.K, g.epi);
  if (g.epi == TPG_EPI_SWIGLU) a.bias = nullptr; /* gate_up has no bias in these models */
  const int nw = g.N * (g.epi == TPG_EPI_SWIGLU ? 2 : 1);
  lt.setup(M, nw, g.K, g.epi == TPG_EPI_SWIGLU ? TPG_EPI_NONE : g.epi, A.bias);
  std::vector<Ours> os{pick_library(A, a)};
  int fam_chosen = 0, fam_cut = 0, fam_lt = 0;
  const size_t i_chosen = add_run(os, rule_pick(A, a, TPG_GEMM_FAMILY_AUTO, os[0], &fam_chosen));
  const size_t i_cut = add_run(os, rule_pick(A, a, TPG_GEMM_FAMILY_CUTLASS, os[0], &fam_cut));
  const size_t i_lt = add_run(os, rule_pick(A, a, TPG_GEMM_FAMILY_CUBLASLT, os[0], &fam_lt));
  const size_t npick = os.size();
  if (o.cand || o.cutlass)
    for (auto &x : candidates(A, a, o.cutlass)) add_run(os, x);
  CK(cudaMemset(A.ws, 0, A.ws_bytes));
  std::vector<std::function<void()>> fns;
  std::vector<std::string> names;
  char shape[96];
  snprintf(shape, sizeof shape, " at M=%d N=%d K=%d %s", M, g.N, g.K, epi_name[g.epi]);
  for (auto &x : os) {
    fns.push_back([&A, &x] { run_ours(A, x); });
    names.push_back(x.name + shape);
  }
  if (lt.ok) {
    fns.push_back([&] { lt.run(A.x, A.w, A.y, A.lt_ws); });
    names.push_back(std::string("cuBLASLt") + shape);
  }
  /* fewer repetitions for long GEMMs: ~40 ms per function at most */
  const double flops = 2.0 * M * (double)nw * g.K;
  const int reps = std::max(5, std::min(o.reps, (int)(40e-3 / std::max(flops / 600e12, 1e-6))));
  std::vector<double> med;
  time_all(T, fns, names, reps, med);
  Row r{M, g.N, g.K, g.epi, os[0].name, g.users, med[0], lt.ok ? med.back() : NAN};
  for (size_t i = npick; i < os.size(); ++i) {
    r.cands.push_back({os[i].name, med[i]});
    if (r.best_cand.empty() || med[i] < r.best_cand_us) r.best_cand = os[i].name, r.best_cand_us = med[i];
  }
  r.chosen = fam_chosen == TPG_GEMM_FAMILY_OURS ? "ours" : os[i_chosen].name;
  r.family = tpg_gemm_family_name(fam_chosen);
  r.chosen_us = med[i_chosen];
  if (fam_cut == TPG_GEMM_FAMILY_CUTLASS) r.cutlass_rule = os[i_cut].name, r.cutlass_rule_us = med[i_cut];
  if (fam_lt == TPG_GEMM_FAMILY_CUBLASLT) r.lt_us = med[i_lt];
  if (o.graph && M <= 16) graph_time(T, lt, a, (size_t)nw, r.g_us, r.g_cublas_us);
  if (o.trace)
    for (size_t i = 0; i < os.size(); ++i) {
      flush(T);
      trace_launch(os[i].L.grid[0], [&] { run_ours(A, os[i]); }, M, g.N, g.K, os[i].name.c_str(), med[i]);
    }
  return r;
}

static std::string us_or_dash(double us) {
  char b[32];
  if (!std::isfinite(us)) return "-";
  snprintf(b, sizeof b, "%.1f", us);
  return b;
}

/* The per-shape table: the family the rule chose and every family's time. */
static void print_rows(const std::vector<Row> &rows, bool cand) {
  printf("\n%5s %6s %6s %-9s %-8s %-30s %9s %9s %9s %9s %9s %7s %7s  %s\n", "M", "N", "K", "epi", "family",
         "chosen (what ships)", "chosen", "ours", "CUTLASS", "Lt node", "cuBLASLt", "ch/cblt", "TB/s",
         cand ? "best candidate (us)" : "");
  for (auto &r : rows) {
    const int nw = r.N * (r.epi == TPG_EPI_SWIGLU ? 2 : 1);
    const double bytes = 2.0 * ((double)r.M * r.K + (double)nw * r.K + (double)r.M * r.N);
    char best[96] = "";
    if (!r.best_cand.empty()) snprintf(best, sizeof best, "%s (%.1f)", r.best_cand.c_str(), r.best_cand_us);
    const std::string chosen = r.chosen == "ours" ? r.kernel : r.chosen;
    printf("%5d %6d %6d %-9s %-8s %-30s %9.1f %9.1f %9s %9s %9.1f %7.3f %7.3f  %s\n", r.M, r.N, r.K, epi_name[r.epi],
           r.family.c_str(), chosen.c_str(), r.chosen_us, r.us, us_or_dash(r.cutlass_rule_us).c_str(),
           us_or_dash(r.lt_us).c_str(), r.cublas_us, r.chosen_us / r.cublas_us, bytes / r.chosen_us / 1e6, best);
  }
  printf("(us; chosen = TPG_GEMM_FAMILY=auto, what ships; ours = our kernels' rule; CUTLASS = TPG_GEMM_FAMILY=cutlass's "
         "pick where a CUTLASS kernel runs the shape; Lt node = the cuBLASLt family's plan, as a graph node runs it; "
         "cuBLASLt = the baseline, cublasLtMatmul as PyTorch calls it; ch/cblt = chosen / cuBLASLt)\n");
}

/* Ours against the baseline, as before the families: the lines the GPU suite greps. */
static void ours_summary(const std::vector<Row> &rows, bool cand) {
  double lsum = 0, worst = 0, lsum_best = 0;
  int n = 0, over = 0, over_best = 0, bw_n = 0, bw_ok = 0;
  const Row *wr = nullptr;
  for (auto &r : rows) {
    const int nw = r.N * (r.epi == TPG_EPI_SWIGLU ? 2 : 1);
    const double bytes = 2.0 * ((double)r.M * r.K + (double)nw * r.K + (double)r.M * r.N), q = r.us / r.cublas_us;
    if (!std::isfinite(q)) continue;
    lsum += log(q), ++n, over += q > 1.05;
    if (q > worst) worst = q, wr = &r;
    const double qb = std::min(r.us, r.best_cand.empty() ? r.us : r.best_cand_us) / r.cublas_us;
    lsum_best += log(qb), over_best += qb > 1.05;
    if (r.M <= 16 && 2.0 * nw * r.K >= 32e6) ++bw_n, bw_ok += bytes / r.us / 1e6 >= 3.9;
  }
  if (!n) return;
  printf("geometric mean ours/cuBLAS time: %.3f; %d shapes slower than 1.05x cuBLAS\n", exp(lsum / n), over);
  if (wr)
    printf("worst: M=%d N=%d K=%d %s %s: %.1f us vs cuBLAS %.1f (%.3fx); used by %s\n", wr->M, wr->N, wr->K,
           epi_name[wr->epi], wr->kernel.c_str(), wr->us, wr->cublas_us, worst, wr->users.c_str());
  if (cand)
    printf("with the best candidate per shape: geometric mean %.3f, %d shapes over 1.05x\n", exp(lsum_best / n), over_best);
  printf("M <= 16, weights >= 32 MB: %d of %d at >= 3.9 TB/s\n", bw_ok, bw_n);
}

/* Per M and over the zoo: geometric means of time / the cuBLASLt baseline
 * for ours, the CUTLASS rule's pick, the cuBLASLt family's node and what
 * ships, and how many shapes each family was chosen for. */
static void families_table(const std::vector<Row> &rows) {
  struct Acc { int n = 0, nc = 0, nl = 0, fam[4] = {0, 0, 0, 0}; double ours = 0, cut = 0, lt = 0, chosen = 0; };
  std::map<int, Acc> by;
  Acc all;
  for (auto &r : rows) {
    if (!std::isfinite(r.cublas_us) || !std::isfinite(r.chosen_us)) continue;
    const int f = tpg_gemm_family_parse(r.family.c_str());
    for (Acc *a : {&by[r.M], &all}) {
      a->n++;
      a->ours += log(r.us / r.cublas_us);
      a->chosen += log(r.chosen_us / r.cublas_us);
      if (std::isfinite(r.cutlass_rule_us)) a->nc++, a->cut += log(r.cutlass_rule_us / r.cublas_us);
      if (std::isfinite(r.lt_us)) a->nl++, a->lt += log(r.lt_us / r.cublas_us);
      if (f >= 0 && f < 4) a->fam[f]++;
    }
  }
  printf("\nper M, geometric mean of time / cuBLASLt (the baseline; CUTLASS and Lt node over the shapes they run; table: "
         "%s)\n", tpg_gemm_family_table_source());
  printf("%6s %6s %8s %8s %5s %8s %5s %8s   %s\n", "M", "shapes", "ours", "CUTLASS", "(n)", "Lt node", "(n)", "chosen",
         "chosen: ours / cutlass / cublaslt");
  auto line = [](const char *m, const Acc &a) {
    printf("%6s %6d %8.3f %8.3f %5d %8.3f %5d %8.3f   %d / %d / %d\n", m, a.n, exp(a.ours / a.n),
           a.nc ? exp(a.cut / a.nc) : NAN, a.nc, a.nl ? exp(a.lt / a.nl) : NAN, a.nl, exp(a.chosen / a.n),
           a.fam[TPG_GEMM_FAMILY_OURS], a.fam[TPG_GEMM_FAMILY_CUTLASS], a.fam[TPG_GEMM_FAMILY_CUBLASLT]);
  };
  double worst_m = 0;
  for (auto &kv : by) {
    line(std::to_string(kv.first).c_str(), kv.second);
    worst_m = std::max(worst_m, exp(kv.second.chosen / kv.second.n));
  }
  if (!all.n) return;
  line("all", all);
  printf("chosen / cuBLASLt: %.3f over the zoo (target <= 0.97), %.3f in the worst M bucket (target <= 1.00)\n",
         exp(all.chosen / all.n), worst_m);
}

static void graph_summary(const std::vector<Row> &rows) {
  double gl = 0;
  int gn = 0, gbw_n = 0, gbw_ok = 0, gbw_cb = 0, gover = 0;
  for (auto &r : rows) {
    if (!std::isfinite(r.g_us)) continue;
    const int nw = r.N * (r.epi == TPG_EPI_SWIGLU ? 2 : 1);
    const double wbytes = 2.0 * nw * r.K;
    if (std::isfinite(r.g_cublas_us)) gl += log(r.g_us / r.g_cublas_us), ++gn, gover += r.g_us / r.g_cublas_us > 1.05;
    if (wbytes >= 32e6) {
      ++gbw_n;
      gbw_ok += wbytes / r.g_us / 1e6 >= 3.9;
      gbw_cb += std::isfinite(r.g_cublas_us) && wbytes / r.g_cublas_us / 1e6 >= 3.9;
    }
  }
  printf("graph mode (M <= 16, %d launches back to back in one CUDA graph, W rotated over >= 256 MB): geometric mean "
         "ours/cuBLAS %.3f over %d shapes, %d slower than 1.05x; weights >= 32 MB at >= 3.9 TB/s of W: ours %d of %d, "
         "cuBLAS %d\n", GR, gn ? exp(gl / gn) : NAN, gn, gover, gbw_ok, gbw_n, gbw_cb);
}

static double json_us(double us) { return std::isfinite(us) ? us : -1.0; }

/* The JSON: per shape ours ("us"), what ships ("family", "chosen",
 * "chosen_us"), the CUTLASS rule's pick, the cuBLASLt family's node
 * ("cublaslt_us") and the baseline ("cublas_us"); bench/family_rules.py
 * refits the rule between the families from it. */
static void write_json(const char *path, const char *device, const Opts &o, const std::vector<Row> &rows,
                       const CheckStat &cs, int checked_shapes, int check_total, size_t skipped) {
  FILE *f = fopen(path, "w");
  if (!f) { fprintf(stderr, "cannot write %s\n", path); return; }
  fprintf(f, "{\"device\":\"%s\",\"sms\":%d,\"streamk\":%d,\"mode\":\"%s\",\"table\":\"%s\",\"checks\":{\"shapes\":%d,"
             "\"of\":%d,\"launches\":%d,\"failed\":%d,\"worst_rel_norm\":%.4e,\"worst_err_over_bound\":%.4f},"
             "\"skipped\":%zu,\"rows\":[",
          device, g_sms, g_streamk, o.cutlass ? "cutlass" : o.cand ? "cand" : "plain", tpg_gemm_family_table_source(),
          checked_shapes, check_total, cs.run, cs.failed, cs.worst_norm, cs.worst_bound, skipped);
  for (size_t i = 0; i < rows.size(); ++i) {
    auto &r = rows[i];
    fprintf(f, "%s\n{\"M\":%d,\"N\":%d,\"K\":%d,\"epi\":\"%s\",\"kernel\":\"%s\",\"us\":%.2f,\"cublas_us\":%.2f,\"users\":\"%s\",",
            i ? "," : "", r.M, r.N, r.K, epi_name[r.epi], r.kernel.c_str(), r.us, r.cublas_us, r.users.c_str());
    if (std::isfinite(r.g_us)) fprintf(f, "\"graph_us\":%.2f,\"graph_cublas_us\":%.2f,", r.g_us, json_us(r.g_cublas_us));
    fprintf(f, "\"family\":\"%s\",\"chosen\":\"%s\",\"chosen_us\":%.2f,\"cutlass_rule\":\"%s\",\"cutlass_rule_us\":%.2f,"
               "\"cublaslt_us\":%.2f,", r.family.c_str(), r.chosen.c_str(), json_us(r.chosen_us), r.cutlass_rule.c_str(),
            json_us(r.cutlass_rule_us), json_us(r.lt_us));
    fprintf(f, "\"cand\":[");
    for (size_t j = 0; j < r.cands.size(); ++j)
      fprintf(f, "%s{\"kernel\":\"%s\",\"us\":%.2f}", j ? "," : "", r.cands[j].first.c_str(), r.cands[j].second);
    fprintf(f, "]}");
  }
  fprintf(f, "]}\n");
  fclose(f);
}

/* The arena: X, W, Y, bias, residual at the zoo's largest, filled once. */
static void arena_make(Arena &A, const std::vector<Gemm> &gs, const std::vector<int> &ms, size_t *maxw_out) {
  const int maxm = *std::max_element(ms.begin(), ms.end());
  size_t maxx = 0, maxw = 0, maxy = 0, maxb = 0;
  for (auto &g : gs) {
    const size_t nw = (size_t)g.N * (g.epi == TPG_EPI_SWIGLU ? 2 : 1);
    maxx = std::max(maxx, (size_t)maxm * g.K);
    maxw = std::max(maxw, nw * g.K);
    maxy = std::max(maxy, (size_t)maxm * nw * 2); /* elements of 2 bytes; fp32 partial at check M */
    maxb = std::max(maxb, 2 * (size_t)g.N);
  }
  /* W for the checks: every epilogue reads 2N rows at most; the arena holds them */
  for (auto &g : gs) maxw = std::max(maxw, 2 * (size_t)g.N * g.K);
  printf("zoo: %zu distinct (N, K, epilogue) x %zu M = %zu shapes; X %.2f GB, W %.2f GB, Y %.2f GB\n", gs.size(),
         ms.size(), gs.size() * ms.size(), maxx * 2e-9, maxw * 2e-9, maxy * 2e-9);
  CK(cudaMalloc(&A.x, maxx * 2)); CK(cudaMalloc(&A.w, maxw * 2)); CK(cudaMalloc(&A.y, maxy * 2));
  CK(cudaMalloc(&A.bias, maxb * 2)); CK(cudaMalloc(&A.res, maxy * 2));
  CK(cudaMalloc(&A.lt_ws, kLtWorkspace)); CK(cudaMalloc(&A.nan_count, 8));
  A.flush_words = (256u << 20) / 4;
  CK(cudaMalloc(&A.flush, A.flush_words * 4)); CK(cudaMalloc(&A.sink, 4));
  CK(cudaMemset(A.flush, 1, A.flush_words * 4));
  ensure_ws(A, 64u << 20); /* stream-K of the largest zoo shape needs ~35 MB */
  fill_kernel<<<4096, 256>>>(A.x, maxx, 7, 1.f, 1);
  fill_kernel<<<4096, 256>>>(A.w, maxw, 1001, 0.02f, 1);
  fill_kernel<<<1024, 256>>>(A.bias, maxb, 77, 0.5f, 1);
  fill_kernel<<<4096, 256>>>(A.res, maxy, 99, 1.f, 1);
  CK(cudaDeviceSynchronize());
  *maxw_out = maxw;
}

static void arena_free(Arena &A) {
  cudaFree(A.x); cudaFree(A.w); cudaFree(A.y); cudaFree(A.bias); cudaFree(A.res); cudaFree(A.lt_ws);
  cudaFree(A.nan_count); cudaFree(A.flush); cudaFree(A.sink);
  if (A.ws) cudaFree(A.ws);
}

/* Checks on a subset (each (N, K) at a few M), at most a third of the budget. */
static void checks(Arena &A, const Opts &o, const std::vector<Gemm> &gs, const std::vector<int> &ms,
                   double (*elapsed)(), CheckStat &cs, int *checked_shapes, int *check_total) {
  std::vector<int> cm;
  for (int m : {1, 16, 64, 128, 1024})
    if (std::find(ms.begin(), ms.end(), m) != ms.end()) cm.push_back(m);
  *check_total = (int)(gs.size() * cm.size());
  for (auto &g : gs)
    for (int m : cm) {
      if (elapsed() > o.budget_s / 3) break;
      check_one(A, g, m, TPG_KDT_BF16, o.cand, cs, nullptr);
      ++*checked_shapes;
    }
  printf("zoo checks: %d of %d (N, K, M) shapes in %.1f s, %d launches, %d failed; worst rel_norm %.3e (limit 1e-2), "
         "worst max_err/bound %.3f (limit 1)\n", *checked_shapes, *check_total, elapsed(), cs.run, cs.failed,
         cs.worst_norm, cs.worst_bound);
}

static std::chrono::steady_clock::time_point g_zoo_start;
static double zoo_elapsed() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - g_zoo_start).count();
}

static int run(const Opts &o, const char *device, const char *json) {
  g_zoo_start = std::chrono::steady_clock::now();
  g_zoo_cutlass = o.cutlass;
  std::vector<Gemm> gs = build_gemms(o);
  std::vector<int> ms = o.ms;
  if (ms.empty())
    for (int m = 1; m <= 8192; m *= 2) ms.push_back(m);
  Arena A;
  Timer T;
  T.A = &A;
  arena_make(A, gs, ms, &T.maxw);
  Lt lt;
  CKL(cublasLtCreate(&lt.h));
  CheckStat cs;
  int checked_shapes = 0, check_total = 0;
  if (o.check) checks(A, o, gs, ms, zoo_elapsed, cs, &checked_shapes, &check_total);
  for (auto &e : T.ev) CK(cudaEventCreate(&e));
  if (getenv("TPG_ZOO_HANG_S")) T.hang_s = atof(getenv("TPG_ZOO_HANG_S"));
  if (o.graph) CK(cudaStreamCreateWithFlags(&T.gs_st, cudaStreamNonBlocking));
  std::vector<Row> rows;
  size_t skipped = 0;
  for (auto &g : gs)
    for (int M : ms) {
      if (zoo_elapsed() > o.budget_s) { ++skipped; continue; }
      rows.push_back(time_shape(T, lt, o, g, M));
    }
  if (T.gs_st) CK(cudaStreamDestroy(T.gs_st));
  lt.release();
  cublasLtDestroy(lt.h);
  print_rows(rows, o.cand);
  printf("\nzoo: %zu shapes timed (%zu skipped by --budget-s %.0f), %.1f s\n", rows.size(), skipped, o.budget_s,
         zoo_elapsed());
  ours_summary(rows, o.cand);
  families_table(rows);
  if (o.cutlass) cutlass_table(rows);
  if (o.graph) graph_summary(rows);
  if (json) write_json(json, device, o, rows, cs, checked_shapes, check_total, skipped);
  for (auto &e : T.ev) cudaEventDestroy(e);
  arena_free(A);
  return cs.failed ? 1 : 0;
}

}  // namespace zoo
