// kernel_check.cu - the Llama example's kernels against an fp64 CPU reference.
//
// Launches RMSNorm, RoPE + KV append, split-KV attention (+ combine) and
// the greedy argmax directly (CUDA runtime, no tpgraph) on shapes chosen to
// hit the edges: several batches, odd context lengths, a context of 1,
// lengths that end on and just past a tile and a split, every compiled GQA
// group size, grids with more splits than keys, and "needle" caches where one key dominates (a
// skipped or misplaced key then shows at full size). Outputs are poisoned
// with NaN first; each case prints its worst error over its bound and the
// relative norm error; the last line is "kernel_check: N passed, M failed".
//
//   bazel build //examples/llama:kernel_check && bazel-bin/examples/llama/kernel_check
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

int g_pass = 0, g_fail = 0;
std::mt19937 g_rng(1234);

std::vector<uint16_t> rnd(size_t n, float lo, float hi) {
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<uint16_t> v(n);
  for (auto &x : v) x = f2b(u(g_rng));
  return v;
}

// Element-wise |got - ref| <= tol[i] (NaN fails) and the relative norm
// error ||got - ref|| / ||ref|| <= rel_max.
struct Cmp {
  double worst = 0, num = 0, den = 0;  // worst: max |err| / tol
  size_t bad = 0, n = 0, first_bad = SIZE_MAX;
  void add(double got, double ref, double tol) {
    double e = std::fabs(got - ref);
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
    const bool ok = bad == 0 && rel <= rel_max;
    std::printf("%s %-58s max err/bound %.3f, rel norm %.2e (<= %.1e), %zu/%zu bad%s\n", ok ? "PASS" : "FAIL", what,
                worst, rel, rel_max, bad, n, bad ? " (first at" : "");
    if (bad) std::printf("      index %zu)\n", first_bad);
    (ok ? g_pass : g_fail)++;
  }
};

// bf16 output rounding: half an ulp, 2^-9 |x|; twice that as the bound
// leaves room for the fp32 arithmetic before it.
constexpr double kRound = 1.0 / 256;

void check_rmsnorm(int B, int hidden) {
  const float eps = 1e-5f;
  auto x = rnd((size_t)B * hidden, -2.f, 2.f), w = rnd(hidden, 0.5f, 1.5f);
  __nv_bfloat16 *dx = (__nv_bfloat16 *)up(x), *dw = (__nv_bfloat16 *)up(w);
  __nv_bfloat16 *dy = poisoned<__nv_bfloat16>((size_t)B * hidden);
  llama_rmsnorm<<<B, 256>>>(dy, dx, dw, hidden, eps);
  CK(cudaGetLastError());
  CK(cudaDeviceSynchronize());
  auto y = down((uint16_t *)dy, (size_t)B * hidden);
  Cmp c;
  for (int b = 0; b < B; b++) {
    double ss = 0;
    for (int i = 0; i < hidden; i++) ss += (double)b2f(x[(size_t)b * hidden + i]) * b2f(x[(size_t)b * hidden + i]);
    const double r = 1.0 / std::sqrt(ss / hidden + eps);
    for (int i = 0; i < hidden; i++) {
      const double ref = b2f(x[(size_t)b * hidden + i]) * r * b2f(w[i]);
      c.add(b2f(y[(size_t)b * hidden + i]), ref, kRound * std::fabs(ref) + 1e-6);
    }
  }
  char what[96];
  std::snprintf(what, sizeof what, "rmsnorm B=%d hidden=%d", B, hidden);
  c.report(what, kRound);
  CK(cudaFree(dx));
  CK(cudaFree(dw));
  CK(cudaFree(dy));
}

// table: RoPE's inverse frequencies given to the kernel (a scaled RoPE), or
// empty: the kernel's own 1 / theta^(2i/128).
typedef void (*rope_fn)(__nv_bfloat16 *, __nv_bfloat16 *, __nv_bfloat16 *, const __nv_bfloat16 *, const int *, int,
                        int, int, float, const float *);
rope_fn rope_kernel(int D) { return D == 64 ? llama_rope_append_d64 : llama_rope_append; }
typedef void (*combine_fn)(__nv_bfloat16 *, const float *, const float *, const int *, int, int, int);
combine_fn combine_kernel(int D) { return D == 64 ? llama_attn_combine_d64 : llama_attn_combine; }

void check_rope(int D, int B, int nq, int nkv, int max_ctx, const std::vector<int> &pos,
                const std::vector<float> &table = {}) {
  const float theta = 500000.f;
  const int nh = nq + 2 * nkv;
  float *dtab = table.empty() ? nullptr : up(table);
  auto qkv = rnd((size_t)B * nh * D, -1.f, 1.f);
  const size_t csz = (size_t)B * nkv * max_ctx * D;
  auto kc0 = rnd(csz, -1.f, 1.f), vc0 = rnd(csz, -1.f, 1.f);
  __nv_bfloat16 *dqkv = (__nv_bfloat16 *)up(qkv), *dk = (__nv_bfloat16 *)up(kc0), *dv = (__nv_bfloat16 *)up(vc0);
  __nv_bfloat16 *dq = poisoned<__nv_bfloat16>((size_t)B * nq * D);
  int *dpos = up(pos);
  rope_kernel(D)<<<dim3(B, nh), D / 2>>>(dq, dk, dv, dqkv, dpos, nq, nkv, max_ctx, theta, dtab);
  CK(cudaGetLastError());
  CK(cudaDeviceSynchronize());
  auto q = down((uint16_t *)dq, (size_t)B * nq * D);
  auto kc = down((uint16_t *)dk, csz), vc = down((uint16_t *)dv, csz);
  Cmp c;
  size_t moved = 0, vbad = 0;  // cache rows that changed but should not; v not copied bit-exactly
  for (int b = 0; b < B; b++)
    for (int h = 0; h < nq + nkv; h++) {
      const uint16_t *src = &qkv[((size_t)b * nh + h) * D];
      const uint16_t *got = h < nq ? &q[((size_t)b * nq + h) * D]
                                   : &kc[(((size_t)b * nkv + (h - nq)) * max_ctx + pos[b]) * D];
      for (int i = 0; i < D / 2; i++) {
        const double inv = table.empty() ? std::pow((double)theta, -2.0 * i / D) : (double)table[i];
        const double ang = pos[b] * inv;
        const double a = b2f(src[i]), cc = b2f(src[i + D / 2]);
        const double r0 = a * std::cos(ang) - cc * std::sin(ang), r1 = cc * std::cos(ang) + a * std::sin(ang);
        // The kernel's angle is fl32(pos * fl32(1 / powf(theta, 2i/128))),
        // or fl32(pos * table[i]): a few fp32 ulps of the angle, 8 * 2^-24 *
        // angle rad, moves the output by that times |a| + |c|.
        const double ang_err = 8.0 * std::ldexp(1.0, -24) * ang + 1e-6;
        c.add(b2f(got[i]), r0, kRound * std::fabs(r0) + ang_err * (std::fabs(a) + std::fabs(cc)));
        c.add(b2f(got[i + D / 2]), r1, kRound * std::fabs(r1) + ang_err * (std::fabs(a) + std::fabs(cc)));
      }
    }
  for (int b = 0; b < B; b++)
    for (int h = 0; h < nkv; h++)
      for (int p = 0; p < max_ctx; p++) {
        const size_t row = (((size_t)b * nkv + h) * max_ctx + p) * D;
        if (p == pos[b]) {
          if (std::memcmp(&vc[row], &qkv[((size_t)b * nh + nq + nkv + h) * D], D * 2)) vbad++;
        } else {
          if (std::memcmp(&kc[row], &kc0[row], D * 2) || std::memcmp(&vc[row], &vc0[row], D * 2)) moved++;
        }
      }
  char what[96];
  std::snprintf(what, sizeof what, "rope+append D=%d B=%d nq=%d nkv=%d max_ctx=%d%s", D, B, nq, nkv, max_ctx,
                table.empty() ? "" : " inv_freq table");
  c.report(what, kRound);
  std::snprintf(what, sizeof what, "  cache rows: v copied exactly, others untouched");
  const bool ok = moved == 0 && vbad == 0;
  std::printf("%s %-58s %zu v rows wrong, %zu other rows changed\n", ok ? "PASS" : "FAIL", what, vbad, moved);
  (ok ? g_pass : g_fail)++;
  CK(cudaFree(dqkv));
  CK(cudaFree(dk));
  CK(cudaFree(dv));
  CK(cudaFree(dq));
  CK(cudaFree(dpos));
  CK(cudaFree(dtab));
}

// Every element of out [B, nq, 128] against fp64 attention of queries q
// [B, nq, 128] over the first lens[b] keys and values of the caches
// [B, nkv, max_ctx, 128] (softmax scale 1/sqrt(128)). The bound: bf16
// rounding of the output, plus fp32 scores, exp2f and sums: errors of order
// 1e-6 relative per term, bounded by 2^-13 max |v| (a weight of 1/4097 on a
// skipped key is 2^-12 max |v|, and the needle cases make one key carry most
// of the weight).
void attn_reference(int D, Cmp &c, const std::vector<uint16_t> &out, const std::vector<uint16_t> &q,
                    const std::vector<uint16_t> &kc, const std::vector<uint16_t> &vc, int B, int nq, int nkv,
                    int max_ctx, const std::vector<int> &lens) {
  const int G = nq / nkv;
  const double scale = 1.0 / std::sqrt((double)D);
  std::vector<double> sc;
  for (int b = 0; b < B; b++)
    for (int hq = 0; hq < nq; hq++) {
      const int h = hq / G;
      const uint16_t *qq = &q[((size_t)b * nq + hq) * D];
      sc.assign(lens[b], 0);
      double m = -INFINITY;
      for (int p = 0; p < lens[b]; p++) {
        const uint16_t *kk = &kc[(((size_t)b * nkv + h) * max_ctx + p) * D];
        double d = 0;
        for (int i = 0; i < D; i++) d += (double)b2f(qq[i]) * b2f(kk[i]);
        sc[p] = d * scale;
        m = std::max(m, sc[p]);
      }
      double l = 0;
      for (int p = 0; p < lens[b]; p++) l += (sc[p] = std::exp(sc[p] - m));
      for (int i = 0; i < D; i++) {
        double o = 0, vmax = 0;
        for (int p = 0; p < lens[b]; p++) {
          const double v = b2f(vc[(((size_t)b * nkv + h) * max_ctx + p) * D + i]);
          o += sc[p] * v;
          vmax = std::max(vmax, std::fabs(v));
        }
        o /= l;
        c.add(b2f(out[((size_t)b * nq + hq) * D + i]), o, kRound * std::fabs(o) + std::ldexp(vmax, -13));
      }
    }
}

typedef void (*attn_fn)(float *, float *, const __nv_bfloat16 *, const __nv_bfloat16 *, const __nv_bfloat16 *,
                        const int *, int, int, int, int, float);
#define KC_FMA(G) llama_attn_g##G,
#define KC_TC(G) llama_attn_tc_g##G,
#define KC_TC64(G) llama_attn_tc_d64_g##G,
const attn_fn kFma[] = {LLAMA_GROUPS(KC_FMA)}, kTc[] = {LLAMA_GROUPS(KC_TC)}, kTc64[] = {LLAMA_GROUPS(KC_TC64)};
// The first pass for head dim D and group G: tensor cores, or the scalar
// one (head dim 128 only: null for 64).
attn_fn attn_kernel(int D, int G, bool tc) {
  if (G < 1 || G > LLAMA_ATTN_MAX_GROUP) {
    std::fprintf(stderr, "no attention kernel for group %d\n", G);
    std::exit(2);
  }
  return D == 64 ? (tc ? kTc64[G - 1] : nullptr) : (tc ? kTc : kFma)[G - 1];
}

// lens[b] = pos[b] + 1 keys; nsplit splits of split_len keys (the grid may
// cover more than the longest sequence, as the engine's does). needle: in
// each (b, kv head) one random key gets a copy of the group's first query,
// scaled so that it dominates the softmax.
void check_attn(int D, int B, int nq, int nkv, int max_ctx, const std::vector<int> &lens, int split_len, int nsplit,
                bool needle) {
  const int G = nq / nkv;
  const double scale = 1.0 / std::sqrt((double)D);
  auto q = rnd((size_t)B * nq * D, -3.f, 3.f);
  const size_t csz = (size_t)B * nkv * max_ctx * D;
  auto kc = rnd(csz, -1.f, 1.f), vc = rnd(csz, -1.f, 1.f);
  std::vector<int> pos(B);
  for (int b = 0; b < B; b++) pos[b] = lens[b] - 1;
  if (needle)
    for (int b = 0; b < B; b++)
      for (int h = 0; h < nkv; h++) {
        const int p = std::uniform_int_distribution<int>(0, lens[b] - 1)(g_rng);
        for (int i = 0; i < D; i++)
          kc[(((size_t)b * nkv + h) * max_ctx + p) * D + i] =
              f2b(b2f(q[((size_t)b * nq + (size_t)h * G) * D + i]) * 2.f);
      }
  __nv_bfloat16 *dq = (__nv_bfloat16 *)up(q), *dk = (__nv_bfloat16 *)up(kc), *dv = (__nv_bfloat16 *)up(vc);
  int *dpos = up(pos);
  // Both first passes (fp32 FMA and tensor cores) on the same data, each
  // into freshly poisoned partials.
  for (int tc = 0; tc < 2; tc++) {
    if (!attn_kernel(D, G, tc)) continue;  // no scalar kernel at head dim 64
    float *dop = poisoned<float>((size_t)B * nq * nsplit * D), *dml = poisoned<float>((size_t)B * nq * nsplit * 2);
    __nv_bfloat16 *dout = poisoned<__nv_bfloat16>((size_t)B * nq * D);
    attn_kernel(D, G, tc)<<<dim3(nsplit, nkv, B), 128>>>(dop, dml, dq, dk, dv, dpos, nkv, max_ctx, split_len, nsplit,
                                                   (float)(scale * 1.4426950408889634));
    CK(cudaGetLastError());
    combine_kernel(D)<<<dim3(nq, B), 128>>>(dout, dop, dml, dpos, nq, split_len, nsplit);
    CK(cudaGetLastError());
    CK(cudaDeviceSynchronize());
    auto out = down((uint16_t *)dout, (size_t)B * nq * D);
    Cmp c;
    attn_reference(D, c, out, q, kc, vc, B, nq, nkv, max_ctx, lens);
    char what[128];
    int lmin = *std::min_element(lens.begin(), lens.end()), lmax = *std::max_element(lens.begin(), lens.end());
    std::snprintf(what, sizeof what, "attn%s D=%d B=%d nq=%d nkv=%d len %d..%d split %dx%d%s", tc ? "_tc" : "", D, B,
                  nq, nkv, lmin, lmax, nsplit, split_len, needle ? " needle" : "");
    c.report(what, kRound);
    CK(cudaFree(dop));
    CK(cudaFree(dml));
    CK(cudaFree(dout));
  }
  CK(cudaFree(dq));
  CK(cudaFree(dk));
  CK(cudaFree(dv));
  CK(cudaFree(dpos));
}

typedef void (*fused_fn)(__nv_bfloat16 *, float *, float *, unsigned *, __nv_bfloat16 *, __nv_bfloat16 *,
                         const __nv_bfloat16 *, const int *, int, int, int, int, float, float, const float *);
#define KC_FUSED(G) llama_attn_fused_g##G,
#define KC_FUSED64(G) llama_attn_fused_d64_g##G,
const fused_fn kFused[] = {LLAMA_GROUPS(KC_FUSED)}, kFused64[] = {LLAMA_GROUPS(KC_FUSED64)};
fused_fn fused_kernel(int D, int G) {
  if (G < 1 || G > LLAMA_ATTN_MAX_GROUP) {
    std::fprintf(stderr, "no fused attention kernel for group %d\n", G);
    std::exit(2);
  }
  return (D == 64 ? kFused64 : kFused)[G - 1];
}

// The fused node (RoPE + append + attention + merge) on a random qkv and
// caches: its rotated keys and values must be exactly llama_rope_append's
// (that kernel is checked against fp64 above; both call one rotation), every
// other cache row untouched, and its output within check_attn's bound of an
// fp64 attention over llama_rope_append's queries and the appended caches.
// Launched twice on the same inputs: the second must give the same bits
// (its split counters were put back to 0 by the first).
void check_attn_fused(int D, int B, int nq, int nkv, int max_ctx, const std::vector<int> &lens, int split_len,
                      int nsplit, bool needle, const std::vector<float> &table = {}) {
  const int G = nq / nkv, nh = nq + 2 * nkv;
  float *dtab = table.empty() ? nullptr : up(table);
  const float theta = 500000.f;
  const double scale = 1.0 / std::sqrt((double)D);
  auto qkv = rnd((size_t)B * nh * D, -3.f, 3.f);
  const size_t csz = (size_t)B * nkv * max_ctx * D;
  auto kc0 = rnd(csz, -1.f, 1.f), vc0 = rnd(csz, -1.f, 1.f);
  std::vector<int> pos(B);
  for (int b = 0; b < B; b++) pos[b] = lens[b] - 1;
  __nv_bfloat16 *dqkv = (__nv_bfloat16 *)up(qkv);
  int *dpos = up(pos);
  // The reference's queries and appended rows: llama_rope_append's.
  __nv_bfloat16 *rq = poisoned<__nv_bfloat16>((size_t)B * nq * D), *rk = (__nv_bfloat16 *)up(kc0),
                *rv = (__nv_bfloat16 *)up(vc0);
  rope_kernel(D)<<<dim3(B, nh), D / 2>>>(rq, rk, rv, dqkv, dpos, nq, nkv, max_ctx, theta, dtab);
  CK(cudaGetLastError());
  CK(cudaDeviceSynchronize());
  auto q = down((uint16_t *)rq, (size_t)B * nq * D);
  auto kc = down((uint16_t *)rk, csz), vc = down((uint16_t *)rv, csz);
  if (needle)  // a cached key (not the new one) made to dominate, in both copies
    for (int b = 0; b < B; b++)
      for (int h = 0; h < nkv; h++) {
        if (lens[b] < 2) continue;
        const int p = std::uniform_int_distribution<int>(0, lens[b] - 2)(g_rng);
        for (int i = 0; i < D; i++) {
          const size_t at = (((size_t)b * nkv + h) * max_ctx + p) * D + i;
          kc[at] = kc0[at] = f2b(b2f(q[((size_t)b * nq + (size_t)h * G) * D + i]) * 2.f);
        }
      }
  __nv_bfloat16 *dk = (__nv_bfloat16 *)up(kc0), *dv = (__nv_bfloat16 *)up(vc0);
  unsigned *dcnt;
  CK(cudaMalloc(&dcnt, (size_t)B * nkv * 4));
  CK(cudaMemset(dcnt, 0, (size_t)B * nkv * 4));
  std::vector<uint16_t> out[2];
  for (int run = 0; run < 2; run++) {
    float *dop = poisoned<float>((size_t)B * nq * nsplit * D), *dml = poisoned<float>((size_t)B * nq * nsplit * 2);
    __nv_bfloat16 *dout = poisoned<__nv_bfloat16>((size_t)B * nq * D);
    fused_kernel(D, G)<<<dim3(nsplit, nkv, B), 128>>>(dout, dop, dml, dcnt, dk, dv, dqkv, dpos, nkv, max_ctx, split_len,
                                                   nsplit, (float)(scale * 1.4426950408889634), theta, dtab);
    CK(cudaGetLastError());
    CK(cudaDeviceSynchronize());
    out[run] = down((uint16_t *)dout, (size_t)B * nq * D);
    CK(cudaFree(dop));
    CK(cudaFree(dml));
    CK(cudaFree(dout));
  }
  auto fk = down((uint16_t *)dk, csz), fv = down((uint16_t *)dv, csz);
  auto cnt = down(dcnt, (size_t)B * nkv);
  Cmp c;
  attn_reference(D, c, out[0], q, kc, vc, B, nq, nkv, max_ctx, lens);
  char what[160];
  int lmin = *std::min_element(lens.begin(), lens.end()), lmax = *std::max_element(lens.begin(), lens.end());
  std::snprintf(what, sizeof what, "attn_fused D=%d B=%d nq=%d nkv=%d len %d..%d split %dx%d%s%s", D, B, nq, nkv,
                lmin, lmax, nsplit, split_len, needle ? " needle" : "", table.empty() ? "" : " table");
  c.report(what, kRound);
  const bool same = out[0] == out[1], caches = fk == kc && fv == vc;
  size_t left = 0;
  for (unsigned v : cnt) left += v != 0;
  const bool ok = same && caches && left == 0;
  std::printf("%s %-58s %s, %s, %zu counters left non-zero\n", ok ? "PASS" : "FAIL",
              "  caches = rope_append's; second launch; counters", caches ? "caches exact" : "CACHES DIFFER",
              same ? "second launch identical" : "SECOND LAUNCH DIFFERS", left);
  (ok ? g_pass : g_fail)++;
  for (void *d : {(void *)dqkv, (void *)dpos, (void *)rq, (void *)rk, (void *)rv, (void *)dk, (void *)dv, (void *)dcnt,
                  (void *)dtab})
    CK(cudaFree(d));
}

std::vector<int> rnd_lens(int B, int lo, int hi) {
  std::vector<int> v(B);
  for (auto &x : v) x = std::uniform_int_distribution<int>(lo, hi)(g_rng);
  return v;
}

// RMSNorm: rows in registers, the longest such row, one longer (two passes).
void check_norms() {
  for (int B : {1, 3, 64})
    for (int hidden : {1024, 4096, 8192}) check_rmsnorm(B, hidden);
  check_rmsnorm(2, 8);      // fewer vectors than threads
  check_rmsnorm(2, 16384);  // the longest row kept in registers (8 vectors per thread)
  check_rmsnorm(3, 16392);  // one vector longer: the two-pass loop
}

// RoPE + append, with and without Llama 3.1's scaled table (rope_type
// "llama3", factor 8: the kernel reads the table instead of computing
// 1 / theta^(2i/128); positions to 8191).
void check_ropes(const std::vector<float> &llama31) {
  check_rope(128, 1, 32, 8, 16, {0});
  check_rope(128, 3, 16, 4, 8192, {8191, 1, 4096});
  check_rope(128, 64, 4, 1, 64, rnd_lens(64, 0, 63));
  check_rope(128, 2, 64, 8, 32, {31, 17});
  check_rope(128, 3, 16, 4, 8192, {8191, 1, 4096}, llama31);
  check_rope(128, 64, 4, 1, 64, rnd_lens(64, 0, 63), llama31);
}

// The first passes + combine at head dim 128.
void check_attn_128() {
  const int T = LLAMA_ATTN_TILE;
  // ctx = 1, one split, every group size.
  for (int G = 1; G <= LLAMA_ATTN_MAX_GROUP; G++) check_attn(128, 1, 2 * G, 2, 8, {1}, T, 1, false);
  // Tile and split edges: 63, 64, 65 keys; split boundaries at 128.
  check_attn(128, 3, 32, 8, 300, {63, 64, 65}, T, 2, false);
  check_attn(128, 4, 8, 1, 300, {127, 128, 129, 257}, 2 * T, 3, false);
  check_attn(128, 4, 8, 1, 300, {127, 128, 129, 257}, 2 * T, 3, true);
  // Llama-3-70B-like group at TP = 2 (nq 32, nkv 4), long odd contexts.
  check_attn(128, 2, 32, 4, 4200, {4097, 4095}, 8 * T, 9, false);
  check_attn(128, 2, 32, 4, 4200, {4097, 1}, 8 * T, 9, true);
  // Llama-3-8B-like at TP = 1 (nq 32, nkv 8), one split over the whole context.
  check_attn(128, 2, 32, 8, 1100, {1031, 700}, 17 * T, 1, false);
  // Many sequences, a grid with more splits than any of them needs.
  check_attn(128, 64, 4, 2, 200, rnd_lens(64, 1, 130), T, 4, false);
  check_attn(128, 8, 16, 1, 700, rnd_lens(8, 1, 700), 3 * T, 4, true);
  // Long contexts over several splits for the group sizes the cases above
  // cover only briefly: 16 (a full MMA of query heads), 1 and 2.
  check_attn(128, 2, 16, 1, 1000, {999, 517}, 2 * T, 8, true);
  check_attn(128, 3, 8, 8, 500, {200, 77, 500}, T, 8, false);
  check_attn(128, 2, 8, 4, 500, {300, 129}, 2 * T, 4, true);
  // Near the longest context: 8192 keys in 16 splits.
  check_attn(128, 1, 8, 1, 8192, {8192}, 8 * T, 16, true);
  // Many splits: the combine's warps take several batches of 8 splits each
  // and rescale between them (the needle may sit in any batch); 125 of the
  // 128 splits hold keys.
  check_attn(128, 1, 8, 1, 8192, {8192}, T, 128, true);
  check_attn(128, 2, 16, 2, 8192, {8000, 4000}, T, 128, true);
  check_attn(128, 2, 16, 2, 8192, {8000, 33}, T, 128, false);
}

// The fused node: every group size; a split holding only the new key; one
// split; many splits with a needle; the 70B group at TP 1 over a long odd
// context; 64 sequences of random lengths; Llama 3.1's table (its rows must
// still be rope_append's, bit for bit). Then groups that are not powers of
// two (the MMA's rows G .. 15 and, for the scalar kernel, a padding head)
// over several splits with needles: 3 (Llama-3.2-3B), 5 (Qwen2.5-14B /
// 32B), 7 (Qwen2.5-7B), 12, 15.
void check_fused_and_odd_groups(const std::vector<float> &llama31) {
  const int T = LLAMA_ATTN_TILE;
  for (int G = 1; G <= LLAMA_ATTN_MAX_GROUP; G++) check_attn_fused(128, 2, 2 * G, 2, 300, {1, 65}, T, 2, false);
  check_attn_fused(128, 3, 32, 8, 300, {63, 64, 65}, T, 2, true);
  check_attn_fused(128, 2, 32, 8, 1100, {1031, 700}, 17 * T, 1, false);
  check_attn_fused(128, 1, 64, 8, 8192, {8192}, T, 128, true);
  check_attn_fused(128, 2, 64, 8, 4200, {4097, 4095}, 8 * T, 9, true);
  check_attn_fused(128, 64, 4, 2, 200, rnd_lens(64, 1, 130), T, 4, false);
  check_attn_fused(128, 32, 32, 8, 600, rnd_lens(32, 400, 513), 3 * T, 3, true);
  check_attn_fused(128, 2, 32, 8, 4200, {4097, 300}, 8 * T, 9, true, llama31);
  check_attn(128, 2, 15, 5, 700, {700, 333}, 2 * T, 6, true);
  check_attn(128, 3, 40, 8, 1100, {1031, 64, 65}, 3 * T, 6, true);
  check_attn(128, 2, 28, 4, 600, {513, 77}, T, 10, false);
  check_attn(128, 2, 24, 2, 300, {300, 129}, 2 * T, 3, true);
  check_attn(128, 1, 15, 1, 4100, {4097}, 8 * T, 9, true);
  check_attn_fused(128, 2, 40, 8, 1100, {1031, 700}, 3 * T, 6, true);
  check_attn_fused(128, 3, 21, 3, 600, {1, 64, 600}, T, 10, true);
  check_attn_fused(128, 2, 26, 2, 4200, {4097, 300}, 8 * T, 9, true, llama31);
}

// Head dim 64 (Llama-3.2-1B: 32 / 8; Qwen2.5-0.5B: 14 / 2): RoPE with and
// without a table, the tensor-core pass + combine, and the fused node,
// every group once, edges and needles as above.
void check_head_dim_64() {
  const int T = LLAMA_ATTN_TILE;
  const std::vector<float> llama32 = llama::llama3_inv_freq(64, 500000.0, 32.0, 1.0, 4.0, 8192.0);
  check_rope(64, 1, 32, 8, 16, {0});
  check_rope(64, 3, 14, 2, 8192, {8191, 1, 4096});
  check_rope(64, 3, 32, 8, 8192, {8191, 1, 4096}, llama32);
  for (int G = 1; G <= LLAMA_ATTN_MAX_GROUP; G++) check_attn(64, 1, 2 * G, 2, 8, {1}, T, 1, false);
  check_attn(64, 3, 32, 8, 300, {63, 64, 65}, T, 2, true);
  check_attn(64, 2, 14, 2, 4200, {4097, 1}, 8 * T, 9, true);
  check_attn(64, 1, 8, 1, 8192, {8192}, T, 128, true);
  check_attn(64, 8, 16, 1, 700, rnd_lens(8, 1, 700), 3 * T, 4, true);
  for (int G = 1; G <= LLAMA_ATTN_MAX_GROUP; G++) check_attn_fused(64, 2, 2 * G, 2, 300, {1, 65}, T, 2, false);
  check_attn_fused(64, 2, 32, 8, 4200, {4097, 300}, 8 * T, 9, true, llama32);
  check_attn_fused(64, 32, 14, 2, 600, rnd_lens(32, 400, 513), 3 * T, 3, true);
  check_attn_fused(64, 1, 32, 8, 8192, {8192}, T, 128, true);
}

}  // namespace

// kernels/loop.cu, built into this binary beside kernels/step.cu.
extern "C" __global__ void llama_argmax_part(float *cand, const float *logits, int vpart, int rank, int nranks,
                                             int ncand);

// llama_argmax_part against a CPU scan, compared exactly: row lengths that
// leave rows off 16-byte boundaries and end inside a float4, the maximum
// planted twice (the lower index wins), a row of NaNs (token 0), rows of
// -inf (the first index), NaNs beside the maximum, rank 1 of 2 (its
// candidate filled, the other zero, ids offset by the rank's slice) and the
// padding past B x R candidates zeroed. Candidates are poisoned first.
void check_argmax() {
  const int B = 6;
  for (int vpart : {1, 3, 7, 1029, 32001, 64128, 128256})
    for (int rank = 0; rank < 2; rank++) {
      const int nranks = rank + 1, ncand = B * nranks * 2 + 7;
      std::normal_distribution<float> g(0.f, 3.f);
      std::uniform_int_distribution<int> at(0, vpart - 1);
      std::vector<float> lg((size_t)B * vpart);
      for (auto &x : lg) x = g(g_rng);
      float *r0 = &lg[0], *r1 = &lg[(size_t)vpart], *r2 = &lg[2 * (size_t)vpart], *r3 = &lg[3 * (size_t)vpart];
      const int i1 = at(g_rng), i2 = at(g_rng);
      r0[i1] = r0[i2] = 100.f;  // twice (or once, when i1 == i2): the lower index
      for (int j = 0; j < vpart; j++) r1[j] = NAN, r2[j] = -INFINITY;
      for (int j = 0; j < vpart; j += 3) r3[j] = NAN;
      r3[vpart - 1] = 50.f;  // the last logit, in the tail or the last float4
      float *dl = (float *)up(lg), *dc = poisoned<float>(ncand);
      llama_argmax_part<<<B, 1024>>>(dc, dl, vpart, rank, nranks, ncand);
      CK(cudaGetLastError());
      CK(cudaDeviceSynchronize());
      const std::vector<float> c = down(dc, ncand);
      bool ok = true;
      for (int b = 0; b < B; b++) {
        const float *row = &lg[(size_t)b * vpart];
        float bv = -INFINITY;
        int bi = -1;
        for (int j = 0; j < vpart; j++)
          if (row[j] > bv || (row[j] == bv && bi < 0)) bv = row[j], bi = j;
        if (bi < 0) bi = 0;  // a row of NaNs: -inf, token 0
        for (int r = 0; r < nranks; r++) {
          const float v = c[((size_t)b * nranks + r) * 2], t = c[((size_t)b * nranks + r) * 2 + 1];
          if (r != rank)
            ok &= v == 0.f && t == 0.f;
          else
            ok &= v == bv && t == (float)(rank * vpart + bi);
        }
      }
      for (int i = B * nranks * 2; i < ncand; i++) ok &= c[i] == 0.f;
      std::printf("%s argmax vpart=%d rank %d of %d (ties, NaN, -inf rows, padding)\n", ok ? "PASS" : "FAIL", vpart,
                  rank, nranks);
      (ok ? g_pass : g_fail)++;
      CK(cudaFree(dl));
      CK(cudaFree(dc));
    }
}

int main() {
  CK(cudaSetDevice(0));
  const std::vector<float> llama31 = llama::llama3_inv_freq(128, 500000.0, 8.0, 1.0, 4.0, 8192.0);
  check_norms();
  check_ropes(llama31);
  check_attn_128();
  check_fused_and_odd_groups(llama31);
  check_head_dim_64();
  check_argmax();
  std::printf("kernel_check: %d passed, %d failed\n", g_pass, g_fail);
  return g_fail ? 1 : 0;
}
