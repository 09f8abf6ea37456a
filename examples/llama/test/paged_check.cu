// paged_check.cu - the serving step's kernels over the paged KV cache
// (kernels/paged.cu) against an fp64 CPU reference.
//
// Launches llama_paged_attn_g<G> (decode rows: RoPE + append + split
// attention + merge; prefill rows: RoPE + append), llama_paged_prefill_g<G>
// and llama_gather_rows directly (CUDA runtime, no tpgraph) on fresh random
// inputs: both head dims, every group 1..16, block tables that are random
// permutations of the pool (no sequence's blocks are adjacent), steps that
// mix decode rows, prefill rows of several prompts and padding, contexts of 1
// to 8192 keys, splits of one tile and of many, "needle" keys that carry most
// of a row's weight, Llama 3.1's RoPE table. Pool rows no row may read hold
// NaN, outputs are poisoned first. Beyond the values:
// - bits: the decode path appends exactly what the prefill path appends, no
//   other pool row changes, the split counters return to 0, a second launch
//   repeats the first;
// - batch invariance: a decode row gives the same bits in another step (other
//   rows beside it, another size, another place in the step), and a prompt's
//   rows give the same bits however the prompt is cut into chunks.
// The last line is "paged_check: N passed, M failed". --quick: a subset (for
// compute-sanitizer). --bench: decode attention's K/V read rate at batch 32,
// ctx 512 and 4096 (Llama-3-8B, TP 1), beside llama_attn_fused_g4 at its
// best split (a program, not a check: prints, does not judge).
//
//   bazel build //examples/llama:paged_check && bazel-bin/examples/llama/paged_check [--quick|--bench]
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "examples/llama/kernels/kernels.h"
#include "examples/llama/model/rope.h"
#include "examples/llama/test/check_util.cuh"

namespace {

using llama_check::b2f;
using llama_check::Cmp;
using llama_check::down;
using llama_check::f2b;
using llama_check::poisoned;
using llama_check::up;

constexpr uint16_t kNaN = 0x7fc0;  // bf16 quiet NaN
constexpr int kBS = LLAMA_KV_BLOCK;
constexpr double kRound = 1.0 / 256;  // bf16 output rounding (2^-9 |x|), doubled for the fp32 work before it
constexpr float kTheta = 500000.f;
int g_pass = 0, g_fail = 0;
std::mt19937 g_rng(2468);

bool verdict(bool ok, const char *what, const char *detail) {
  return llama_check::verdict(ok, what, detail, &g_pass, &g_fail);
}

std::vector<uint16_t> rnd(size_t n, float lo, float hi) {
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<uint16_t> v(n);
  for (auto &x : v) x = f2b(u(g_rng));
  return v;
}
int irand(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(g_rng); }

// The kernels by head dim and group.
typedef void (*attn_fn)(__nv_bfloat16 *, __nv_bfloat16 *, float *, float *, unsigned *, __nv_bfloat16 *,
                        __nv_bfloat16 *, const int *, const __nv_bfloat16 *, const int *, const int *, const int *,
                        int, int, int, int, float, float, const float *);
typedef void (*prefill_fn)(__nv_bfloat16 *, const __nv_bfloat16 *, const __nv_bfloat16 *, const __nv_bfloat16 *,
                           const int *, const int *, const int *, const int *, const int *, int, int, float);
#define PC_A(G) llama_paged_attn_g##G,
#define PC_A64(G) llama_paged_attn_d64_g##G,
#define PC_P(G) llama_paged_prefill_g##G,
#define PC_P64(G) llama_paged_prefill_d64_g##G,
const attn_fn kAttn[] = {LLAMA_GROUPS(PC_A)}, kAttn64[] = {LLAMA_GROUPS(PC_A64)};
const prefill_fn kPre[] = {LLAMA_GROUPS(PC_P)}, kPre64[] = {LLAMA_GROUPS(PC_P64)};
attn_fn attn_kernel(int D, int G) {
  const attn_fn f = (D == 64 ? kAttn64 : kAttn)[G - 1];
  CK(cudaFuncSetAttribute(f, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)llama_paged_attn_smem(D)));
  return f;
}
prefill_fn prefill_kernel(int D, int G) { return (D == 64 ? kPre64 : kPre)[G - 1]; }
float scale_log2(int D) { return (float)(1.0 / std::sqrt((double)D) * 1.4426950408889634); }

// A paged cache on the host: pool [nblocks, nkv, 64, D] of K and V, and
// block tables [nseq, max_blocks] handed out from a random permutation of the
// pool, so no sequence's blocks are adjacent. Unused table entries are -1.
struct Paged {
  int D, nkv, nblocks, max_blocks;
  std::vector<uint16_t> k, v;
  std::vector<int> table;
  size_t at(int blk, int h, int off) const { return (((size_t)blk * nkv + h) * kBS + off) * D; }
  size_t key(int s, int h, int p) const { return at(table[(size_t)s * max_blocks + p / kBS], h, p % kBS); }
};

// Sequences of cap[s] positions each; positions [0, filled[s]) hold random
// keys and values, the rest of every block NaN (a read there shows).
Paged make_paged(int D, int nkv, const std::vector<int> &cap, const std::vector<int> &filled) {
  Paged c;
  c.D = D;
  c.nkv = nkv;
  c.max_blocks = 0;
  int need = 0;
  for (int x : cap) {
    need += (x + kBS - 1) / kBS;
    c.max_blocks = std::max(c.max_blocks, (x + kBS - 1) / kBS);
  }
  c.nblocks = need + 3;  // spare blocks nobody owns
  const size_t n = (size_t)c.nblocks * nkv * kBS * D;
  c.k.assign(n, kNaN);
  c.v.assign(n, kNaN);
  std::vector<int> perm(c.nblocks);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), g_rng);
  c.table.assign(cap.size() * c.max_blocks, -1);
  int next = 0;
  for (size_t s = 0; s < cap.size(); s++)
    for (int b = 0; b < (cap[s] + kBS - 1) / kBS; b++) c.table[s * c.max_blocks + b] = perm[next++];
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  for (size_t s = 0; s < cap.size(); s++)
    for (int h = 0; h < nkv; h++)
      for (int p = 0; p < filled[s]; p++)
        for (int d = 0; d < D; d++) {
          c.k[c.key((int)s, h, p) + d] = f2b(u(g_rng));
          c.v[c.key((int)s, h, p) + d] = f2b(u(g_rng));
        }
  return c;
}

// The device side of a Paged.
struct DevPaged {
  __nv_bfloat16 *k = nullptr, *v = nullptr;
  int *table = nullptr;
  explicit DevPaged(const Paged &c) {
    k = (__nv_bfloat16 *)up(c.k);
    v = (__nv_bfloat16 *)up(c.v);
    table = up(c.table);
  }
  ~DevPaged() {
    cudaFree(k);
    cudaFree(v);
    cudaFree(table);
  }
};

// fp64 attention of query q (D values, bf16 bits) over keys 0 .. n - 1 of
// sequence s, head h; into c against got (D bf16 values). The bound is
// kernel_check's: bf16 output rounding plus 2^-13 max |v| (fp32 scores,
// exp2f and sums; a skipped key of weight 1/8192 is already 2^-13 max |v|);
// bf16_p: the prefill kernel's P rounded to bf16, 2^-9 max |v| more.
void attn_ref(Cmp &c, const Paged &pc, int s, int h, int n, const uint16_t *q, const uint16_t *got, bool bf16_p) {
  const int D = pc.D;
  const double scale = 1.0 / std::sqrt((double)D);
  std::vector<double> sc(n), o(D, 0.0), vmax(D, 0.0);
  double m = -INFINITY, l = 0;
  for (int p = 0; p < n; p++) {
    const uint16_t *kk = &pc.k[pc.key(s, h, p)];
    double d = 0;
    for (int i = 0; i < D; i++) d += (double)b2f(q[i]) * b2f(kk[i]);
    sc[p] = d * scale;
    m = std::max(m, sc[p]);
  }
  for (int p = 0; p < n; p++) {
    const double w = std::exp(sc[p] - m);
    l += w;
    const uint16_t *vv = &pc.v[pc.key(s, h, p)];
    for (int i = 0; i < D; i++) {
      o[i] += w * b2f(vv[i]);
      vmax[i] = std::max(vmax[i], (double)std::fabs(b2f(vv[i])));
    }
  }
  for (int i = 0; i < D; i++)
    c.add(b2f(got[i]), o[i] / l,
          kRound * std::fabs(o[i] / l) + std::ldexp(vmax[i], -13) + (bf16_p ? std::ldexp(vmax[i], -9) : 0.0));
}

// fp64 RoPE of the pair (x[j], x[j + D/2]) at position p against got's; the
// bound as kernel_check's: bf16 rounding plus a few fp32 ulps of the angle.
void rope_ref(Cmp &c, int D, const uint16_t *x, const uint16_t *got, int p, const std::vector<float> &table) {
  for (int j = 0; j < D / 2; j++) {
    const double inv = table.empty() ? std::pow((double)kTheta, -2.0 * j / D) : (double)table[j];
    const double ang = p * inv, a = b2f(x[j]), cc = b2f(x[j + D / 2]);
    const double r0 = a * std::cos(ang) - cc * std::sin(ang), r1 = cc * std::cos(ang) + a * std::sin(ang);
    const double ang_err = 8.0 * std::ldexp(1.0, -24) * ang + 1e-6, e = ang_err * (std::fabs(a) + std::fabs(cc));
    c.add(b2f(got[j]), r0, kRound * std::fabs(r0) + e);
    c.add(b2f(got[j + D / 2]), r1, kRound * std::fabs(r1) + e);
  }
}

// One step's rows: decode rows first (nd of them), then prefill rows and
// padding (seq -1).
struct Step {
  std::vector<int> seq, pos;
  int nd = 0;
  int T() const { return (int)seq.size(); }
};

// What one launch of llama_paged_attn leaves: out, q, the pool, the counters.
struct AttnRun {
  std::vector<uint16_t> out, q, k, v;
  std::vector<unsigned> cnt;
};

// llama_paged_attn over a fresh device copy of pc (so launches do not see
// each other's appends), outputs poisoned; `launches` times on the same
// buffers (the second must repeat the first).
AttnRun run_attn(const Paged &pc, const Step &st, int nq, const std::vector<uint16_t> &qkv, int split_len,
                 const std::vector<float> &table, int launches = 1) {
  const int D = pc.D, nkv = pc.nkv, G = nq / nkv, T = st.T();
  int maxlen = 1;
  for (int i = 0; i < st.nd; i++) maxlen = std::max(maxlen, st.pos[i] + 1);
  const int nsplit = (maxlen + split_len - 1) / split_len;
  DevPaged d(pc);
  std::vector<int> meta = {st.nd, 0, 0, 0};
  int *dmeta = up(meta), *dpos = up(st.pos), *dseq = up(st.seq);
  float *dtab = table.empty() ? nullptr : up(table);
  __nv_bfloat16 *dqkv = (__nv_bfloat16 *)up(qkv), *dout = poisoned<__nv_bfloat16>((size_t)T * nq * D),
                *dq = poisoned<__nv_bfloat16>((size_t)T * nq * D);
  float *dop = poisoned<float>((size_t)T * nq * nsplit * D), *dml = poisoned<float>((size_t)T * nq * nsplit * 2);
  unsigned *dcnt;
  CK(cudaMalloc(&dcnt, (size_t)T * nkv * 4));
  CK(cudaMemset(dcnt, 0, (size_t)T * nkv * 4));
  for (int l = 0; l < launches; l++)
    attn_kernel(D, G)<<<dim3(nsplit, nkv, T), 128, llama_paged_attn_smem(D)>>>(
        dout, dq, dop, dml, dcnt, d.k, d.v, d.table, dqkv, dmeta, dpos, dseq, nkv, pc.max_blocks, split_len, nsplit,
        scale_log2(D), kTheta, dtab);
  CK(cudaGetLastError());
  CK(cudaDeviceSynchronize());
  AttnRun r;
  r.out = down((uint16_t *)dout, (size_t)T * nq * D);
  r.q = down((uint16_t *)dq, (size_t)T * nq * D);
  r.k = down((uint16_t *)d.k, pc.k.size());
  r.v = down((uint16_t *)d.v, pc.v.size());
  r.cnt = down(dcnt, (size_t)T * nkv);
  for (void *p : {(void *)dmeta, (void *)dpos, (void *)dseq, (void *)dtab, (void *)dqkv, (void *)dout, (void *)dq,
                  (void *)dop, (void *)dml, (void *)dcnt})
    CK(cudaFree(p));
  return r;
}

// Every row as a prefill row (nd = 0): the rotated queries of every row and
// the appended keys and values, the reference for the decode rows' own.
AttnRun rope_all(const Paged &pc, const Step &st, int nq, const std::vector<uint16_t> &qkv,
                 const std::vector<float> &table) {
  Step all = st;
  all.nd = 0;
  return run_attn(pc, all, nq, qkv, kBS, table);
}

}  // namespace

namespace {

// The appended rows of `r` (every non-padding row's position) against fp64
// RoPE of qkv (k) and bit-exact (v); every other pool row must equal pc's.
void check_appends(const char *what, const Paged &pc, const Step &st, int nq, const std::vector<uint16_t> &qkv,
                   const AttnRun &r, const std::vector<float> &table) {
  const int D = pc.D, nkv = pc.nkv, nh = nq + 2 * nkv;
  Cmp c;
  std::vector<char> written(pc.k.size() / D, 0);
  size_t vbad = 0, moved = 0;
  for (int i = 0; i < st.T(); i++) {
    if (st.seq[i] < 0) continue;
    for (int h = 0; h < nkv; h++) {
      const size_t row = pc.key(st.seq[i], h, st.pos[i]);
      written[row / D] = 1;
      rope_ref(c, D, &qkv[((size_t)i * nh + nq + h) * D], &r.k[row], st.pos[i], table);
      vbad += std::memcmp(&r.v[row], &qkv[((size_t)i * nh + nq + nkv + h) * D], D * 2) != 0;
    }
  }
  for (size_t row = 0; row < written.size(); row++)
    if (!written[row])
      moved += std::memcmp(&r.k[row * D], &pc.k[row * D], D * 2) || std::memcmp(&r.v[row * D], &pc.v[row * D], D * 2);
  char w[160], detail[96];
  std::snprintf(w, sizeof w, "%s: appended keys (RoPE)", what);
  c.report(w, kRound, &g_pass, &g_fail);
  std::snprintf(w, sizeof w, "%s: values exact, other pool rows untouched", what);
  std::snprintf(detail, sizeof detail, "%zu v rows wrong, %zu other rows changed", vbad, moved);
  verdict(vbad == 0 && moved == 0, w, detail);
}

// The queries every row rotated (r.q of rope_all) against fp64 RoPE.
void check_queries(const char *what, const Step &st, int D, int nq, int nkv, const std::vector<uint16_t> &qkv,
                   const AttnRun &r, const std::vector<float> &table) {
  const int nh = nq + 2 * nkv;
  Cmp c;
  for (int i = 0; i < st.T(); i++)
    if (st.seq[i] >= 0)
      for (int hq = 0; hq < nq; hq++)
        rope_ref(c, D, &qkv[((size_t)i * nh + hq) * D], &r.q[((size_t)i * nq + hq) * D], st.pos[i], table);
  char w[160];
  std::snprintf(w, sizeof w, "%s: rotated queries", what);
  c.report(w, kRound, &g_pass, &g_fail);
}

// Rows of a [T, width] bf16 output that must still hold the poison.
size_t unpoisoned(const std::vector<uint16_t> &v, int width, const std::vector<char> &keep) {
  size_t n = 0;
  for (size_t i = 0; i < keep.size(); i++)
    if (keep[i])
      for (int j = 0; j < width; j++) n += v[i * width + j] != 0xffff;
  return n;
}

// A step's decode rows at needle positions: in each (decode row, KV head) a
// random cached key (not the new one) becomes twice the group's first
// rotated query, so one key carries most of the weight.
void add_needles(Paged &pc, const Step &st, int nq, const AttnRun &ref) {
  const int D = pc.D, G = nq / pc.nkv;
  for (int i = 0; i < st.nd; i++) {
    if (st.pos[i] < 1) continue;
    for (int h = 0; h < pc.nkv; h++) {
      const int p = irand(0, st.pos[i] - 1);
      for (int d = 0; d < D; d++)
        pc.k[pc.key(st.seq[i], h, p) + d] = f2b(b2f(ref.q[((size_t)i * nq + (size_t)h * G) * D + d]) * 2.f);
    }
  }
}

}  // namespace

namespace {

// A step mixing decode rows (sequence i at position lens[i], lens[i] keys
// cached), prefill rows (a prompt chunk of `chunk` rows of one more sequence
// at positions pre0 .., pre0 positions cached) and `pad` padding rows: its
// values against fp64, its bits against the prefill path, a second launch,
// the counters, the untouched outputs.
void check_step(int D, int nq, int nkv, const std::vector<int> &lens, int pre0, int chunk, int pad, int split_len,
                bool needle, const std::vector<float> &table = {}) {
  const int nd = (int)lens.size(), ns = nd + (chunk > 0), T = nd + chunk + pad, nh = nq + 2 * nkv;
  std::vector<int> cap(lens), filled(lens);
  for (int &x : cap) x += 1;
  if (chunk > 0) cap.push_back(pre0 + chunk), filled.push_back(pre0);
  Paged pc = make_paged(D, nkv, cap, filled);
  Step st;
  st.nd = nd;
  for (int i = 0; i < nd; i++) st.seq.push_back(i), st.pos.push_back(lens[i]);
  for (int i = 0; i < chunk; i++) st.seq.push_back(ns - 1), st.pos.push_back(pre0 + i);
  for (int i = 0; i < pad; i++) st.seq.push_back(-1), st.pos.push_back(irand(0, 5000));
  const std::vector<uint16_t> qkv = rnd((size_t)T * nh * D, -3.f, 3.f);
  AttnRun ref = rope_all(pc, st, nq, qkv, table);
  if (needle) {
    add_needles(pc, st, nq, ref);
    ref = rope_all(pc, st, nq, qkv, table);
  }
  const AttnRun r = run_attn(pc, st, nq, qkv, split_len, table, 2);
  char what[160];
  std::snprintf(what, sizeof what,
                "paged_attn D=%d G=%d nkv=%d: %d decode (len %d..%d) + %d prefill + %d pad, split %d%s%s", D, nq / nkv,
                nkv, nd, nd ? *std::min_element(lens.begin(), lens.end()) + 1 : 0,
                nd ? *std::max_element(lens.begin(), lens.end()) + 1 : 0, chunk, pad, split_len,
                needle ? " needle" : "", table.empty() ? "" : " table");
  Cmp c;
  Paged after = pc;
  after.k = r.k;
  after.v = r.v;
  for (int i = 0; i < nd; i++)
    for (int hq = 0; hq < nq; hq++)
      attn_ref(c, after, i, hq / (nq / nkv), lens[i] + 1, &ref.q[((size_t)i * nq + hq) * D],
               &r.out[((size_t)i * nq + hq) * D], false);
  if (nd) c.report(what, kRound, &g_pass, &g_fail);
  else std::printf("      %s\n", what);
  check_queries("  prefill path", st, D, nq, nkv, qkv, ref, table);
  check_appends("  prefill path", pc, st, nq, qkv, ref, table);
  std::vector<char> dec(T, 0), other(T, 0);
  for (int i = 0; i < T; i++) (i < nd ? dec : other)[i] = 1;
  size_t qdiff = 0;
  for (int i = nd; i < nd + chunk; i++)
    qdiff += std::memcmp(&r.q[(size_t)i * nq * D], &ref.q[(size_t)i * nq * D], (size_t)nq * D * 2) != 0;
  size_t left = 0;
  for (unsigned v : r.cnt) left += v != 0;
  const bool same_pool = r.k == ref.k && r.v == ref.v;
  const size_t stray = unpoisoned(r.out, nq * D, other) + unpoisoned(r.q, nq * D, dec);
  char detail[200];
  std::snprintf(detail, sizeof detail, "pool %s the prefill path's, %zu q rows differ, %zu stray stores, %zu "
                "counters left", same_pool ? "=" : "DIFFERS FROM", qdiff, stray, left);
  verdict(same_pool && qdiff == 0 && stray == 0 && left == 0, "  bits: decode appends, q, outputs, counters", detail);
}

}  // namespace

namespace {

// Batch invariance of decode rows: rows of one step recomputed in another
// (a subset in another order, other rows beside them, another size) must
// give the very same bits.
void check_invariance(int D, int nq, int nkv, int nseq, int split_len) {
  std::vector<int> lens(nseq);
  for (int &x : lens) x = irand(0, 1500);
  std::vector<int> cap(lens);
  for (int &x : cap) x += 1;
  cap.push_back(300);
  std::vector<int> filled(lens);
  filled.push_back(200);
  const Paged pc = make_paged(D, nkv, cap, filled);
  const int nh = nq + 2 * nkv;
  const std::vector<uint16_t> rowqkv = rnd((size_t)nseq * nh * D, -3.f, 3.f);  // row of sequence s: its qkv
  auto build = [&](const std::vector<int> &order, int chunk, int pad, std::vector<uint16_t> *qkv) {
    Step st;
    st.nd = (int)order.size();
    for (int s : order) st.seq.push_back(s), st.pos.push_back(lens[s]);
    for (int i = 0; i < chunk; i++) st.seq.push_back(nseq), st.pos.push_back(200 + i);
    for (int i = 0; i < pad; i++) st.seq.push_back(-1), st.pos.push_back(0);
    qkv->assign((size_t)st.T() * nh * D, 0);
    const std::vector<uint16_t> extra = rnd((size_t)(chunk + pad) * nh * D, -3.f, 3.f);
    for (size_t i = 0; i < order.size(); i++)
      std::memcpy(&(*qkv)[i * nh * D], &rowqkv[(size_t)order[i] * nh * D], (size_t)nh * D * 2);
    std::memcpy(&(*qkv)[order.size() * nh * D], extra.data(), extra.size() * 2);
    return st;
  };
  std::vector<int> a(nseq), b;
  std::iota(a.begin(), a.end(), 0);
  for (int s = nseq - 1; s >= 0; s -= 2) b.push_back(s);  // every other sequence, reversed
  std::vector<uint16_t> qa, qb;
  const Step sa = build(a, 0, 0, &qa), sb = build(b, 37, 5, &qb);
  const AttnRun ra = run_attn(pc, sa, nq, qa, split_len, {}), rb = run_attn(pc, sb, nq, qb, split_len, {});
  size_t diff = 0;
  for (size_t j = 0; j < b.size(); j++)
    diff += std::memcmp(&ra.out[(size_t)b[j] * nq * D], &rb.out[j * nq * D], (size_t)nq * D * 2) != 0;
  char what[160], detail[96];
  std::snprintf(what, sizeof what, "batch invariance D=%d G=%d: %zu decode rows in a step of %d and of %d",
                D, nq / nkv, b.size(), sa.T(), sb.T());
  std::snprintf(detail, sizeof detail, "%zu of %zu rows differ in any bit", diff, b.size());
  verdict(diff == 0, what, detail);
}

// Work items of llama_paged_prefill for row ranges (i0, n) of one sequence
// each: pieces of at most LLAMA_PREFILL_POSITIONS(G) rows (what the
// scheduler does).
std::vector<int> make_work(const std::vector<std::pair<int, int>> &ranges, int G) {
  std::vector<int> w;
  const int per = LLAMA_PREFILL_POSITIONS(G);
  for (auto r : ranges)
    for (int k = 0; k < r.second; k += per) w.push_back(r.first + k), w.push_back(std::min(per, r.second - k));
  return w;
}

// llama_paged_prefill on rows (seq, pos) with work items `work`, over a
// device copy of pc; q [T, nq, D] random given. Returns out.
std::vector<uint16_t> run_prefill(const Paged &pc, const Step &st, int nq, const std::vector<uint16_t> &q,
                                  const std::vector<int> &work) {
  const int D = pc.D, nkv = pc.nkv, T = st.T(), W = (int)work.size() / 2 + 2;  // 2 items past npw: they exit
  DevPaged d(pc);
  std::vector<int> meta = {st.nd, (int)work.size() / 2, 0, 0}, wk(work);
  wk.resize((size_t)W * 2, 0);
  int *dmeta = up(meta), *dpos = up(st.pos), *dseq = up(st.seq), *dwork = up(wk);
  __nv_bfloat16 *dq = (__nv_bfloat16 *)up(q), *dout = poisoned<__nv_bfloat16>((size_t)T * nq * D);
  prefill_kernel(D, nq / nkv)<<<dim3(W, nkv), 128>>>(dout, dq, d.k, d.v, d.table, dmeta, dpos, dseq, dwork, nkv,
                                                     pc.max_blocks, scale_log2(D));
  CK(cudaGetLastError());
  CK(cudaDeviceSynchronize());
  std::vector<uint16_t> out = down((uint16_t *)dout, (size_t)T * nq * D);
  for (void *p : {(void *)dmeta, (void *)dpos, (void *)dseq, (void *)dwork, (void *)dq, (void *)dout}) CK(cudaFree(p));
  return out;
}

}  // namespace

namespace {

// Several prompts' chunks in one step (sequence s: `chunks[s]` rows at
// positions starts[s] .., the positions before them cached), after `lead`
// rows that are not prefill rows (their outputs must stay poisoned): every
// row against fp64 causal attention. needle: a key per head made dominant.
void check_prefill(int D, int nq, int nkv, const std::vector<int> &starts, const std::vector<int> &chunks, int lead,
                   bool needle) {
  const int G = nq / nkv;
  std::vector<int> cap, filled;
  for (size_t s = 0; s < starts.size(); s++) cap.push_back(starts[s] + chunks[s]), filled.push_back(cap.back());
  Paged pc = make_paged(D, nkv, cap, filled);
  Step st;
  st.nd = lead;
  for (int i = 0; i < lead; i++) st.seq.push_back(-1), st.pos.push_back(0);
  std::vector<std::pair<int, int>> ranges;
  for (size_t s = 0; s < starts.size(); s++) {
    ranges.push_back({st.T(), chunks[s]});
    for (int i = 0; i < chunks[s]; i++) st.seq.push_back((int)s), st.pos.push_back(starts[s] + i);
  }
  const std::vector<uint16_t> q = rnd((size_t)st.T() * nq * D, -3.f, 3.f);
  if (needle)
    for (size_t s = 0; s < starts.size(); s++)
      for (int h = 0; h < nkv; h++) {
        const int i = ranges[s].first + irand(0, chunks[s] - 1), p = irand(0, st.pos[i]);
        for (int d = 0; d < D; d++)
          pc.k[pc.key((int)s, h, p) + d] = f2b(b2f(q[((size_t)i * nq + h * G) * D + d]) * 2.f);
      }
  const std::vector<uint16_t> out = run_prefill(pc, st, nq, q, make_work(ranges, G));
  Cmp c;
  for (int i = lead; i < st.T(); i++)
    for (int hq = 0; hq < nq; hq++)
      attn_ref(c, pc, st.seq[i], hq / G, st.pos[i] + 1, &q[((size_t)i * nq + hq) * D], &out[((size_t)i * nq + hq) * D],
               true);
  char what[160];
  std::snprintf(what, sizeof what, "paged_prefill D=%d G=%d nkv=%d: %zu prompts, %d rows after %d others%s", D, G,
                nkv, starts.size(), st.T() - lead, lead, needle ? " needle" : "");
  c.report(what, kRound, &g_pass, &g_fail);
  std::vector<char> lead_rows(st.T(), 0);
  for (int i = 0; i < lead; i++) lead_rows[i] = 1;
  char detail[64];
  const size_t stray = unpoisoned(out, nq * D, lead_rows);
  std::snprintf(detail, sizeof detail, "%zu stray stores", stray);
  verdict(stray == 0, "  rows outside the work items untouched", detail);
}

// Chunk invariance: a prompt of P rows as one chunk and cut at other
// boundaries (each chunk a launch over the cache the earlier ones filled)
// gives the same bits row by row.
void check_chunking(int D, int nq, int nkv, int P, const std::vector<int> &cuts) {
  const int G = nq / nkv;
  const Paged pc = make_paged(D, nkv, {P}, {P});
  const std::vector<uint16_t> q = rnd((size_t)P * nq * D, -3.f, 3.f);
  Step whole;
  for (int i = 0; i < P; i++) whole.seq.push_back(0), whole.pos.push_back(i);
  const std::vector<uint16_t> one = run_prefill(pc, whole, nq, q, make_work({{0, P}}, G));
  std::vector<int> bounds = {0};
  for (int c : cuts) bounds.push_back(c);
  bounds.push_back(P);
  size_t diff = 0;
  for (size_t k = 0; k + 1 < bounds.size(); k++) {
    const int p0 = bounds[k], n = bounds[k + 1] - p0;
    Step st;
    for (int i = 0; i < n; i++) st.seq.push_back(0), st.pos.push_back(p0 + i);
    std::vector<uint16_t> qc(q.begin() + (size_t)p0 * nq * D, q.begin() + (size_t)(p0 + n) * nq * D);
    Paged upto = pc;  // what the cache holds when this chunk runs: nothing past it yet
    for (int h = 0; h < nkv; h++)
      for (int p = p0 + n; p < P; p++)
        for (int d = 0; d < D; d++) upto.k[upto.key(0, h, p) + d] = upto.v[upto.key(0, h, p) + d] = kNaN;
    const std::vector<uint16_t> part = run_prefill(upto, st, nq, qc, make_work({{0, n}}, G));
    for (int i = 0; i < n; i++)
      diff += std::memcmp(&part[(size_t)i * nq * D], &one[(size_t)(p0 + i) * nq * D], (size_t)nq * D * 2) != 0;
  }
  char what[160], detail[96];
  std::snprintf(what, sizeof what, "chunk invariance D=%d G=%d: a prompt of %d as 1 chunk and as %zu", D, G, P,
                bounds.size() - 1);
  std::snprintf(detail, sizeof detail, "%zu of %d rows differ in any bit", diff, P);
  verdict(diff == 0, what, detail);
}

void check_gather() {
  const int L = 37, T = 300, H = 4096;
  const std::vector<uint16_t> src = rnd((size_t)T * H, -1.f, 1.f);
  std::vector<int> rows(L);
  for (int &r : rows) r = irand(0, T - 1);
  __nv_bfloat16 *ds = (__nv_bfloat16 *)up(src), *dd = poisoned<__nv_bfloat16>((size_t)L * H);
  int *dr = up(rows);
  llama_gather_rows<<<L, 128>>>(dd, ds, dr, H);
  CK(cudaGetLastError());
  const std::vector<uint16_t> got = down((uint16_t *)dd, (size_t)L * H);
  size_t wrong = 0;
  for (int j = 0; j < L; j++) wrong += std::memcmp(&got[(size_t)j * H], &src[(size_t)rows[j] * H], H * 2) != 0;
  char detail[64];
  std::snprintf(detail, sizeof detail, "%zu rows wrong", wrong);
  verdict(wrong == 0, "gather_rows: 37 of 300 rows, hidden 4096", detail);
  for (void *p : {(void *)ds, (void *)dd, (void *)dr}) CK(cudaFree(p));
}

std::vector<int> lens_between(int n, int lo, int hi) {
  std::vector<int> v(n);
  for (int &x : v) x = irand(lo, hi);
  return v;
}

}  // namespace

int paged_bench();  // paged_bench.cu

int main(int argc, char **argv) {
  CK(cudaSetDevice(0));
  const bool quick = argc > 1 && !std::strcmp(argv[1], "--quick");
  if (argc > 1 && !std::strcmp(argv[1], "--bench")) return paged_bench();
  const int T = kBS;
  const std::vector<float> llama31 = llama::llama3_inv_freq(128, 500000.0, 8.0, 1.0, 4.0, 8192.0);
  // Every group, both head dims: decode rows of 1, 65 and 130 keys over
  // splits of one tile, a prompt chunk at 5, padding.
  for (int D : {128, 64})
    for (int G = 1; G <= LLAMA_ATTN_MAX_GROUP; G += quick ? 5 : 1)
      check_step(D, 2 * G, 2, {0, 64, 129}, 5, 3, 2, T, G % 3 == 0);
  check_gather();
  // Llama-3-8B at TP 1 (32 / 8): 32 decode rows up to 1100 keys beside a
  // chunk of 70 prompt rows, split 512; the 70B group at TP 2; long contexts.
  check_step(128, 32, 8, lens_between(quick ? 8 : 32, 0, 1100), 130, 70, 3, 8 * T, true);
  check_step(64, 32, 8, lens_between(16, 0, 700), 0, 33, 0, 4 * T, true);
  if (!quick) {
    check_step(128, 32, 4, {4096, 8191, 100}, 0, 0, 0, 8 * T, true, llama31);
    check_step(128, 8, 1, {8191, 4000}, 0, 0, 1, T, true);  // 128 splits
    check_step(128, 40, 8, lens_between(8, 0, 2000), 64, 64, 0, 8 * T, true);
    check_step(64, 14, 2, lens_between(64, 0, 300), 1, 1, 1, 2 * T, false);
  }
  check_invariance(128, 32, 8, quick ? 6 : 24, 8 * T);
  if (!quick) check_invariance(64, 14, 2, 17, 2 * T);
  // Prefill attention: several prompts a step (chunks at 0 and past cached
  // positions), every group, both head dims; chunk invariance.
  for (int D : {128, 64})
    for (int G = 1; G <= LLAMA_ATTN_MAX_GROUP; G += quick ? 5 : 1)
      check_prefill(D, 2 * G, 2, {0, 70, 200}, {67, 1, 65}, 3, G % 2 == 0);
  check_prefill(128, 32, 8, {0, 256, 900}, {256, 200, 99}, 17, true);
  if (!quick) check_prefill(64, 32, 8, {4000}, {300}, 0, true);
  if (!quick) check_prefill(128, 64, 8, {8125, 0}, {67, 512}, 1, true);
  check_chunking(128, 32, 8, quick ? 200 : 700, {1, 64, 65, 130});
  if (!quick) {
    check_chunking(128, 32, 8, 700, {1, 64, 65, 300, 512});
    check_chunking(64, 14, 2, 400, {7, 200, 333});
    check_chunking(128, 40, 8, 300, {100, 101});
  }
  std::printf("paged_check: %d passed, %d failed\n", g_pass, g_fail);
  return g_fail ? 1 : 0;
}
