// prefill_check.cu - the prefill kernels (kernels/prefill.cu) against an
// fp64 CPU reference, as kernel_check.cu does for the decode kernels.
//
// Launches llama_embed, llama_prefill_rope and llama_prefill_attn_g<G>
// directly (CUDA runtime, no tpgraph) on fresh random inputs: both head
// dims (128, 64), every group size 1..16, chunks of 1 row, 63 / 64 / 65 rows (a block's 64 / G positions and
// the 32-key tiles end inside them), later chunks over a filled cache
// (p0 > 0, chunk boundaries), a tail that ends at position 8191, a 2048-row
// prompt in one chunk, "needle" keys that carry most of a row's weight (a
// skipped or misplaced key then shows at full size), and whole prompts run
// chunk by chunk through RoPE + append and attention, as the engine does.
// Outputs are poisoned with NaN first; cache rows past the chunk hold NaN,
// so a read beyond a row's last key shows. Each case prints its worst error
// over its bound and the relative norm error; the last line is
// "prefill_check: N passed, M failed". Every CUDA call is checked.
//
//   bazel build //examples/llama:prefill_check && bazel-bin/examples/llama/prefill_check
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "examples/llama/test/check_util.cuh"
#include "examples/llama/kernels/kernels.h"
#include "examples/llama/model/rope.h"

namespace {

using llama_check::b2f;
using llama_check::down;
using llama_check::f2b;
using llama_check::poisoned;
using llama_check::up;

constexpr uint16_t kNaN = 0x7fc0;  // bf16 quiet NaN
int g_pass = 0, g_fail = 0;
std::mt19937 g_rng(4321);

std::vector<uint16_t> rnd(size_t n, float lo, float hi) {
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<uint16_t> v(n);
  for (auto &x : v) x = f2b(u(g_rng));
  return v;
}

// Element-wise |got - ref| <= tol (NaN fails) and ||got - ref|| / ||ref||.
struct Cmp {
  double worst = 0, num = 0, den = 0;
  size_t bad = 0, n = 0, first_bad = SIZE_MAX;
  void add(double got, double ref, double tol) {
    const double e = std::fabs(got - ref);
    if (!(e <= tol)) {
      if (!bad) first_bad = n;
      bad++;
    }
    if (e / tol > worst || e != e) worst = e != e ? INFINITY : e / tol;
    num += (got - ref) * (got - ref);
    den += ref * ref;
    n++;
  }
  void report(const char *what, double rel_max) {
    const double rel = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
    const bool ok = bad == 0 && rel <= rel_max && n > 0;
    std::printf("%s %-62s max err/bound %.3f, rel norm %.2e (<= %.1e), %zu/%zu bad\n", ok ? "PASS" : "FAIL", what,
                worst, rel, rel_max, bad, n);
    if (bad) std::printf("      first bad at index %zu\n", first_bad);
    (ok ? g_pass : g_fail)++;
  }
};
void verdict(bool ok, const char *what, const char *detail) {
  std::printf("%s %-62s %s\n", ok ? "PASS" : "FAIL", what, detail);
  (ok ? g_pass : g_fail)++;
}

// bf16 output rounding: half an ulp is 2^-9 |x|; twice that leaves room for
// the fp32 arithmetic before the rounding.
constexpr double kRound = 1.0 / 256;

typedef void (*attn_fn)(__nv_bfloat16 *, const __nv_bfloat16 *, const __nv_bfloat16 *, const __nv_bfloat16 *,
                        const int *, int, int, int, float);
#define PC_ATTN(G) llama_prefill_attn_g##G,
#define PC_ATTN64(G) llama_prefill_attn_d64_g##G,
const attn_fn kAttn[] = {LLAMA_GROUPS(PC_ATTN)}, kAttn64[] = {LLAMA_GROUPS(PC_ATTN64)};
attn_fn attn_kernel(int D, int G) {
  if (G < 1 || G > LLAMA_ATTN_MAX_GROUP) {
    std::fprintf(stderr, "no prefill attention kernel for group %d\n", G);
    std::exit(2);
  }
  return (D == 64 ? kAttn64 : kAttn)[G - 1];
}
typedef void (*rope_fn)(__nv_bfloat16 *, __nv_bfloat16 *, __nv_bfloat16 *, const __nv_bfloat16 *, const int *, int,
                        int, int, float, const float *);
rope_fn rope_kernel(int D) { return D == 64 ? llama_prefill_rope_d64 : llama_prefill_rope; }
float scale_log2(int D) { return (float)(1.0 / std::sqrt((double)D) * 1.4426950408889634); }

// The engine's grid: llama_prefill_blocks (kernels.h), floor(64 / G)
// positions a block.
void launch_attn(int D, int G, __nv_bfloat16 *out, const __nv_bfloat16 *q, const __nv_bfloat16 *kc,
                 const __nv_bfloat16 *vc, const int *pos, int M, int nkv, int max_ctx) {
  attn_kernel(D, G)<<<dim3(llama_prefill_blocks(M, G), nkv), 128>>>(out, q, kc, vc, pos, M, nkv, max_ctx,
                                                                    scale_log2(D));
  CK(cudaGetLastError());
}

// out [M, nq, 128] (chunk rows at positions p0 ..) against fp64 causal
// attention of q [M, nq, 128] over the caches [nkv, max_ctx, 128]: row i
// attends keys 0 .. p0 + i. The bound is kernel_check's for the decode
// kernels (bf16 products exact in the MMA, fp32 sums, fp32 softmax in the
// log2 domain): bf16 output rounding plus 2^-13 max |v| for the fp32 scores,
// exp2f and sums (errors of order 1e-6 relative per term; a weight of
// 1/8192 on a skipped key is already 2^-13 max |v|, and the needle cases put
// most weight on one key), plus 2^-9 max |v| for P rounded to bf16 before
// P V (each weight off by at most 2^-9 of itself, the weights summing to
// the denominator).
void attn_reference(int D, Cmp &c, const std::vector<uint16_t> &out, const std::vector<uint16_t> &q,
                    const std::vector<uint16_t> &kc, const std::vector<uint16_t> &vc, int p0, int M, int nq, int nkv,
                    int max_ctx) {
  const int G = nq / nkv, len = p0 + M;
  const double scale = 1.0 / std::sqrt((double)D);
  // vmax[h, p, d]: max |v| over keys 0 .. p (the bound's scale for a row
  // whose last key is p).
  std::vector<float> kf((size_t)nkv * len * D), vf((size_t)nkv * len * D), vmax((size_t)nkv * len * D);
  for (int h = 0; h < nkv; h++)
    for (int p = 0; p < len; p++)
      for (int d = 0; d < D; d++) {
        const size_t at = ((size_t)h * len + p) * D + d;
        kf[at] = b2f(kc[((size_t)h * max_ctx + p) * D + d]);
        vf[at] = b2f(vc[((size_t)h * max_ctx + p) * D + d]);
        vmax[at] = std::max(p ? vmax[at - D] : 0.f, std::fabs(vf[at]));
      }
  std::vector<double> sc(len), o(D), qd(D);
  for (int i = 0; i < M; i++)
    for (int hq = 0; hq < nq; hq++) {
      const int h = hq / G, n = p0 + i + 1;
      for (int d = 0; d < D; d++) qd[d] = b2f(q[((size_t)i * nq + hq) * D + d]);
      double m = -INFINITY;
      for (int p = 0; p < n; p++) {
        const float *kk = &kf[((size_t)h * len + p) * D];
        double s = 0;
        for (int d = 0; d < D; d++) s += qd[d] * kk[d];
        sc[p] = s * scale;
        m = std::max(m, sc[p]);
      }
      double l = 0;
      std::fill(o.begin(), o.end(), 0.0);
      for (int p = 0; p < n; p++) {
        const double wgt = std::exp(sc[p] - m);
        l += wgt;
        const float *vv = &vf[((size_t)h * len + p) * D];
        for (int d = 0; d < D; d++) o[d] += wgt * vv[d];
      }
      for (int d = 0; d < D; d++) {
        const double ref = o[d] / l, vm = vmax[((size_t)h * len + n - 1) * D + d];
        c.add(b2f(out[((size_t)i * nq + hq) * D + d]), ref,
              kRound * std::fabs(ref) + std::ldexp(vm, -13) + std::ldexp(vm, -9));
      }
    }
}

// One chunk of M rows at p0 over a cache whose positions 0 .. p0+M-1 are
// random and the rest NaN. needle: in each KV head one random key (attended
// by some row) gets 2x that row's query, so it dominates the row's softmax.
void check_attn(int D, int p0, int M, int nq, int nkv, int max_ctx, bool needle) {
  const int G = nq / nkv, len = p0 + M;
  auto q = rnd((size_t)M * nq * D, -3.f, 3.f);
  const size_t csz = (size_t)nkv * max_ctx * D;
  auto kc = rnd(csz, -1.f, 1.f), vc = rnd(csz, -1.f, 1.f);
  for (int h = 0; h < nkv; h++)
    for (int p = len; p < max_ctx; p++)
      for (int d = 0; d < D; d++) kc[((size_t)h * max_ctx + p) * D + d] = vc[((size_t)h * max_ctx + p) * D + d] = kNaN;
  if (needle)
    for (int h = 0; h < nkv; h++) {
      const int i = std::uniform_int_distribution<int>(0, M - 1)(g_rng);
      const int p = std::uniform_int_distribution<int>(0, p0 + i)(g_rng);
      for (int d = 0; d < D; d++)
        kc[((size_t)h * max_ctx + p) * D + d] = f2b(b2f(q[((size_t)i * nq + (size_t)h * G) * D + d]) * 2.f);
    }
  __nv_bfloat16 *dq = (__nv_bfloat16 *)up(q), *dk = (__nv_bfloat16 *)up(kc), *dv = (__nv_bfloat16 *)up(vc);
  int *dpos = up(std::vector<int>{p0});
  __nv_bfloat16 *dout = poisoned<__nv_bfloat16>((size_t)M * nq * D);
  launch_attn(D, G, dout, dq, dk, dv, dpos, M, nkv, max_ctx);
  CK(cudaDeviceSynchronize());
  auto out = down((uint16_t *)dout, (size_t)M * nq * D);
  Cmp c;
  attn_reference(D, c, out, q, kc, vc, p0, M, nq, nkv, max_ctx);
  char what[128];
  std::snprintf(what, sizeof what, "prefill_attn D=%d p0=%d M=%d nq=%d nkv=%d (G %d) max_ctx=%d%s", D, p0, M, nq, nkv,
                G, max_ctx, needle ? " needle" : "");
  c.report(what, kRound);
  for (void *d : {(void *)dq, (void *)dk, (void *)dv, (void *)dpos, (void *)dout}) CK(cudaFree(d));
}

// fp64 RoPE of one (a, c) pair at position p; the bound as kernel_check's:
// bf16 rounding plus a few fp32 ulps of the angle times |a| + |c|.
void rope_ref(int D, Cmp &c, uint16_t got0, uint16_t got1, uint16_t a16, uint16_t c16, int p, int i,
              const std::vector<float> &table, double theta) {
  const double inv = table.empty() ? std::pow(theta, -2.0 * i / D) : (double)table[i];
  const double ang = p * inv, a = b2f(a16), cc = b2f(c16);
  const double r0 = a * std::cos(ang) - cc * std::sin(ang), r1 = cc * std::cos(ang) + a * std::sin(ang);
  const double ang_err = 8.0 * std::ldexp(1.0, -24) * ang + 1e-6;
  c.add(b2f(got0), r0, kRound * std::fabs(r0) + ang_err * (std::fabs(a) + std::fabs(cc)));
  c.add(b2f(got1), r1, kRound * std::fabs(r1) + ang_err * (std::fabs(a) + std::fabs(cc)));
}

// llama_prefill_rope on M rows at p0: q and the new cache rows against
// fp64, v copied bit-exactly, every other cache row untouched, rows at or
// past max_ctx not written.
void check_rope(int D, int p0, int M, int nq, int nkv, int max_ctx, const std::vector<float> &table = {}) {
  const float theta = 500000.f;
  const int nh = nq + 2 * nkv;
  float *dtab = table.empty() ? nullptr : up(table);
  auto qkv = rnd((size_t)M * nh * D, -1.f, 1.f);
  const size_t csz = (size_t)nkv * max_ctx * D;
  auto kc0 = rnd(csz, -1.f, 1.f), vc0 = rnd(csz, -1.f, 1.f);
  __nv_bfloat16 *dqkv = (__nv_bfloat16 *)up(qkv), *dk = (__nv_bfloat16 *)up(kc0), *dv = (__nv_bfloat16 *)up(vc0);
  __nv_bfloat16 *dq = poisoned<__nv_bfloat16>((size_t)M * nq * D);
  int *dpos = up(std::vector<int>{p0});
  rope_kernel(D)<<<M, LLAMA_PREFILL_ROPE_THREADS>>>(dq, dk, dv, dqkv, dpos, nq, nkv, max_ctx, theta, dtab);
  CK(cudaGetLastError());
  CK(cudaDeviceSynchronize());
  auto q = down((uint16_t *)dq, (size_t)M * nq * D);
  auto kc = down((uint16_t *)dk, csz), vc = down((uint16_t *)dv, csz);
  Cmp c;
  size_t moved = 0, vbad = 0;
  for (int i = 0; i < M; i++) {
    const int p = p0 + i;
    for (int h = 0; h < nq + nkv; h++) {
      if (h >= nq && p >= max_ctx) continue;
      const uint16_t *src = &qkv[((size_t)i * nh + h) * D];
      const uint16_t *got = h < nq ? &q[((size_t)i * nq + h) * D] : &kc[((size_t)(h - nq) * max_ctx + p) * D];
      for (int j = 0; j < D / 2; j++)
        rope_ref(D, c, got[j], got[j + D / 2], src[j], src[j + D / 2], p, j, table, theta);
    }
  }
  for (int h = 0; h < nkv; h++)
    for (int p = 0; p < max_ctx; p++) {
      const size_t row = ((size_t)h * max_ctx + p) * D;
      if (p >= p0 && p < p0 + M) {
        if (std::memcmp(&vc[row], &qkv[((size_t)(p - p0) * nh + nq + nkv + h) * D], D * 2)) vbad++;
      } else if (std::memcmp(&kc[row], &kc0[row], D * 2) || std::memcmp(&vc[row], &vc0[row], D * 2)) {
        moved++;
      }
    }
  char what[128];
  std::snprintf(what, sizeof what, "prefill_rope D=%d p0=%d M=%d nq=%d nkv=%d max_ctx=%d%s", D, p0, M, nq, nkv,
                max_ctx, table.empty() ? "" : " inv_freq table");
  c.report(what, kRound);
  char detail[96];
  std::snprintf(detail, sizeof detail, "%zu v rows wrong, %zu other rows changed", vbad, moved);
  verdict(moved == 0 && vbad == 0, "  cache rows: v exact, others untouched", detail);
  for (void *d : {(void *)dqkv, (void *)dk, (void *)dv, (void *)dq, (void *)dpos, (void *)dtab}) CK(cudaFree(d));
}

// x[i] = emb[ids[i]] bit for bit; an id outside the vocabulary gives NaN.
void check_embed(int M, int vocab, int hidden) {
  auto emb = rnd((size_t)vocab * hidden, -1.f, 1.f);
  std::vector<int> ids(M);
  for (auto &x : ids) x = std::uniform_int_distribution<int>(0, vocab - 1)(g_rng);
  ids[M / 2] = vocab;  // out of range
  __nv_bfloat16 *demb = (__nv_bfloat16 *)up(emb), *dx = poisoned<__nv_bfloat16>((size_t)M * hidden);
  int *dids = up(ids);
  llama_embed<<<M, 128>>>(dx, demb, dids, hidden, vocab);
  CK(cudaGetLastError());
  CK(cudaDeviceSynchronize());
  auto x = down((uint16_t *)dx, (size_t)M * hidden);
  size_t wrong = 0;
  for (int i = 0; i < M; i++)
    for (int j = 0; j < hidden; j++) {
      const uint16_t v = x[(size_t)i * hidden + j];
      wrong += i == M / 2 ? !std::isnan(b2f(v)) : v != emb[(size_t)ids[i] * hidden + j];
    }
  char what[96], detail[64];
  std::snprintf(what, sizeof what, "embed M=%d vocab=%d hidden=%d (one id out of range)", M, vocab, hidden);
  std::snprintf(detail, sizeof detail, "%zu elements wrong", wrong);
  verdict(wrong == 0, what, detail);
  for (void *d : {(void *)demb, (void *)dx, (void *)dids}) CK(cudaFree(d));
}

// A whole prompt of P rows as the engine runs it: chunk by chunk, RoPE +
// append then attention, the position read from a table on the device
// (pos = table + p0). Every row's output against fp64 attention over the
// caches as the kernels left them (their rotation is checked above).
void check_chunks(int D, int P, int chunk, int nq, int nkv, int max_ctx) {
  const int G = nq / nkv, nh = nq + 2 * nkv;
  const float theta = 500000.f;
  auto qkv = rnd((size_t)P * nh * D, -2.f, 2.f);
  std::vector<int> table(P + 1);
  for (int i = 0; i <= P; i++) table[i] = i;
  const size_t csz = (size_t)nkv * max_ctx * D;
  __nv_bfloat16 *dqkv = (__nv_bfloat16 *)up(qkv), *dk = poisoned<__nv_bfloat16>(csz),
                *dv = poisoned<__nv_bfloat16>(csz);  // NaN until appended
  __nv_bfloat16 *dq = poisoned<__nv_bfloat16>((size_t)P * nq * D), *dout = poisoned<__nv_bfloat16>((size_t)P * nq * D);
  int *dtab = up(table);
  int nchunks = 0;
  for (int p0 = 0; p0 < P; p0 += chunk, nchunks++) {
    const int M = std::min(chunk, P - p0);
    rope_kernel(D)<<<M, LLAMA_PREFILL_ROPE_THREADS>>>(dq + (size_t)p0 * nq * D, dk, dv, dqkv + (size_t)p0 * nh * D,
                                            dtab + p0, nq, nkv, max_ctx, theta, nullptr);
    CK(cudaGetLastError());
    launch_attn(D, G, dout + (size_t)p0 * nq * D, dq + (size_t)p0 * nq * D, dk, dv, dtab + p0, M, nkv, max_ctx);
  }
  CK(cudaDeviceSynchronize());
  auto q = down((uint16_t *)dq, (size_t)P * nq * D), out = down((uint16_t *)dout, (size_t)P * nq * D);
  auto kc = down((uint16_t *)dk, csz), vc = down((uint16_t *)dv, csz);
  Cmp c;
  attn_reference(D, c, out, q, kc, vc, 0, P, nq, nkv, max_ctx);
  char what[128];
  std::snprintf(what, sizeof what, "prompt D=%d P=%d in %d chunks of %d, nq=%d nkv=%d: rope+append, attention", D, P,
                nchunks, chunk, nq, nkv);
  c.report(what, kRound);
  for (void *d : {(void *)dqkv, (void *)dk, (void *)dv, (void *)dq, (void *)dout, (void *)dtab}) CK(cudaFree(d));
}

}  // namespace

int main() {
  CK(cudaSetDevice(0));
  check_embed(37, 1000, 4096);
  check_embed(1, 50, 8);

  const std::vector<float> llama31 = llama::llama3_inv_freq(128, 500000.0, 8.0, 1.0, 4.0, 8192.0);
  check_rope(128, 0, 256, 32, 8, 300);
  check_rope(128, 0, 1, 8, 2, 16);
  check_rope(128, 7999, 193, 16, 4, 8192, llama31);  // the last row at 8191
  check_rope(128, 250, 64, 8, 1, 300);               // 14 rows past max_ctx: not written

  // One row, every group size (nq = 2G over 2 KV heads).
  for (int G = 1; G <= LLAMA_ATTN_MAX_GROUP; G++) check_attn(128, 0, 1, 2 * G, 2, 64, false);
  // A block's positions (64 / G) and the 32-key tiles end inside the chunk.
  for (int M : {63, 64, 65}) check_attn(128, 0, M, 8, 2, 128, false);
  check_attn(128, 0, 33, 16, 1, 64, false);
  // Llama-3-8B-like at TP 1 (32 / 8): a first and a second chunk of 256.
  check_attn(128, 0, 256, 32, 8, 600, false);
  check_attn(128, 256, 256, 32, 8, 600, true);
  // 70B-like at TP 2 (32 / 4, G 8): a tail of 200 after two chunks.
  check_attn(128, 512, 200, 32, 4, 800, false);
  // G 16 (a warp's 16 rows are one position), needles; G 2 after 4000 positions.
  check_attn(128, 0, 300, 16, 1, 320, true);
  check_attn(128, 4000, 97, 4, 2, 4100, true);
  // One row after a long context (what a decode step is), and the last
  // positions of the cache.
  check_attn(128, 1000, 1, 32, 8, 1001, true);
  check_attn(128, 8125, 67, 8, 1, 8192, true);
  // A 2048-row prompt in one chunk (the benchmark's long prompt).
  check_attn(128, 0, 2048, 8, 2, 2048, true);

  // Whole prompts chunk by chunk.
  check_chunks(128, 700, 256, 32, 8, 704);
  check_chunks(128, 300, 64, 16, 1, 300);
  check_chunks(128, 129, 128, 8, 8, 200);

  // Groups that are not powers of two: a block holds floor(64 / G)
  // positions and 64 mod G rows that store nothing; chunks that end inside
  // a block, later chunks, needles. 3, 5 (Qwen2.5-14B: 40 / 8), 7 (Qwen2.5-7B:
  // 28 / 4), 9 .. 15 (one or two positions a block).
  for (int G = 3; G <= LLAMA_ATTN_MAX_GROUP; G += 2) check_attn(128, 0, 67, 2 * G, 2, 80, true);
  check_attn(128, 0, 256, 40, 8, 600, false);
  check_attn(128, 256, 200, 40, 8, 600, true);
  check_attn(128, 1000, 1, 28, 4, 1001, true);
  check_attn(128, 0, 130, 12, 1, 200, true);
  check_chunks(128, 300, 64, 40, 8, 300);
  check_chunks(128, 200, 128, 21, 3, 256);

  // Head dim 64 (Llama-3.2-1B: 32 / 8 with its "llama3" table; Qwen2.5-0.5B:
  // 14 / 2): RoPE, every group, edges, needles, whole prompts.
  const std::vector<float> llama32 = llama::llama3_inv_freq(64, 500000.0, 32.0, 1.0, 4.0, 8192.0);
  check_rope(64, 0, 256, 32, 8, 300);
  check_rope(64, 7999, 193, 14, 2, 8192, llama32);
  check_rope(64, 250, 64, 8, 1, 300);
  for (int G = 1; G <= LLAMA_ATTN_MAX_GROUP; G++) check_attn(64, 0, 1, 2 * G, 2, 64, false);
  for (int M : {63, 64, 65}) check_attn(64, 0, M, 32, 8, 128, false);
  check_attn(64, 256, 256, 32, 8, 600, true);
  check_attn(64, 0, 300, 14, 2, 320, true);
  check_attn(64, 8125, 67, 16, 1, 8192, true);
  check_attn(64, 0, 2048, 8, 2, 2048, true);
  check_chunks(64, 700, 256, 32, 8, 704);
  check_chunks(64, 300, 64, 14, 2, 300);

  std::printf("prefill_check: %d passed, %d failed\n", g_pass, g_fail);
  return g_fail ? 1 : 0;
}
