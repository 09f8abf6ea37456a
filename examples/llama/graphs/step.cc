// step.cc - one rank's Llama-3 decode step, all L layers, as ONE tpgraph plan.
//
// Per layer (B sequences, one token each; R ranks; nq = heads/R, nkv =
// kv_heads/R; every node depends on the one before it):
//   layer 0 only: pos <- pos_host (memcpy node), h = RMSNorm(x)  (our kernel)
//   qkv  = h Wqkv_r^T             COLUMN linear (tpgraph's GEMM)
//   rope + append                  our kernel: q -> q, k/v -> caches at pos
//   attention partials + combine   our split-KV kernels -> attn [B, nq*128]
//   part = attn Wo_r^T             GEMM (this rank's partial sums)
//   all-reduce(part) with epilogue: x += sum; h2 = RMSNorm(x) * mlp_norm
//   act  = silu(h2 Wg_r^T) * (h2 Wu_r^T)   COLUMN linear, TPG_ACT_SWIGLU
//   part = act W2_r^T              GEMM
//   all-reduce(part) with epilogue: x += sum; h = RMSNorm(x) * the next
//                                  layer's attn_norm (last layer: final_norm)
//   after the last layer, --lm-head: logits_r = h Wlm_r^T (cuBLAS, a captured
//   node), then an all-gather of the vocab slices.
// Everything that changes from step to step is read from device memory the
// graph owns or the engine binds: positions come from a pinned host slot
// through the memcpy node, so one instantiated graph serves every step, and
// rebinding the cache slots swaps a whole batch's KV caches.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "examples/llama/kernels/kernels.h"
#include "examples/llama/llama.h"
#include "examples/llama/graphs/layer.h"

namespace llama {
namespace {

#define TRY LLAMA_TRY

using Builder = PlanBuilder;

}  // namespace

// The LM head: logits_r [B, V/R] fp32 = h [B, H] * Wlm_r^T, bf16 inputs, fp32
// accumulation. Row-major Y = X W^T is column-major Y^T = W X^T: cuBLAS sees
// W as a column-major [H, V/R] matrix, transposed.
int lm_head_capture(void *user, tpg_stream stream, void *const *ptrs, int nptrs) {
  const LmHead *lm = static_cast<const LmHead *>(user);
  if (nptrs != 3) return 100;
  cublasHandle_t h = lm->rank->cublas;
  if (cublasSetStream(h, reinterpret_cast<cudaStream_t>(stream)) != CUBLAS_STATUS_SUCCESS) return 101;
  // cublasSetStream puts the handle back on cuBLAS's own workspace pool,
  // which allocates (a memory node tpgraph refuses in a capture): hand it
  // ours again after every stream change.
  if (cublasSetWorkspace(h, lm->rank->cublas_ws, lm->rank->cublas_ws_bytes) != CUBLAS_STATUS_SUCCESS) return 102;
  const float one = 1.f, zero = 0.f;
  const cublasStatus_t st =
      cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, lm->vocab_part, lm->batch, lm->hidden, &one, ptrs[1], CUDA_R_16BF,
                   lm->hidden, ptrs[0], CUDA_R_16BF, lm->hidden, &zero, ptrs[2], CUDA_R_32F, lm->vocab_part,
                   CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
  return st == CUBLAS_STATUS_SUCCESS ? 0 : 200 + (int)st;
}

// The attention's split length (whole tiles of LLAMA_ATTN_TILE keys) for
// `heads` = B x nkv (sequence, KV head) pairs and contexts up to max_len.
// blocks = heads x nsplit run 3 to an SM (the kernels' launch bound), in
// waves; a wave costs about its blocks' keys plus a fixed ~192-key
// equivalent per block (the query fragments, the 4-warp merge, the partials
// and, fused, the last block's merge). So the cost of a split is
//   ceil(blocks / (3 SMs)) x (split_len + 192)
// and the cheapest wins (ties: fewer splits). Fitted on nvidia-h200, TP 1
// (--attn-bps sweeps, docs/performance.md): it picks what measured best
// there, e.g. 33 splits at batch 1 / ctx 4096 and 3 at batch 32 (a second,
// nearly empty wave cost 10% at batch 32 / ctx 4096 with 2). bps > 0 (--attn-bps)
// is the old rule instead: about bps blocks per SM.
int attn_split(int heads, int max_len, int sms, int bps) {
  const int T = LLAMA_ATTN_TILE, tiles = (max_len + T - 1) / T;
  auto whole = [&](int len) { return std::max(T, (len + T - 1) / T * T); };
  if (bps > 0) {
    const int target = std::max(1, (bps * sms + heads - 1) / heads);
    return whole((max_len + target - 1) / target);
  }
  const long long slots = 3LL * std::max(1, sms);
  int best = whole(max_len);
  double best_cost = INFINITY;
  for (int t = tiles; t >= 1; t--) {  // from one split up: ties keep fewer splits
    const int len = t * T, n = (max_len + len - 1) / len;
    const double cost = (double)((heads * (long long)n + slots - 1) / slots) * (len + 192);
    if (cost < best_cost) {
      best_cost = cost;
      best = len;
    }
  }
  return best;
}

int alloc_step_io(const Config &c, Step *s, std::string *err) {
  if (cudaMalloc(&s->d_x, (size_t)c.batch * c.hidden * 2) != cudaSuccess ||
      cudaMallocHost(reinterpret_cast<void **>(&s->h_pos), c.batch * sizeof(int)) != cudaSuccess) {
    *err = "out of memory for the step's x / positions";
    return 1;
  }
  if (s->device_loop && cudaMalloc(reinterpret_cast<void **>(&s->d_pos), c.batch * sizeof(int)) != cudaSuccess) {
    *err = "out of memory for the loop's positions";
    return 1;
  }
  if (c.vocab > 0 &&
      cudaMalloc(reinterpret_cast<void **>(&s->d_logits), (size_t)c.batch * c.vocab * 4) != cudaSuccess) {
    *err = "out of memory for the logits";
    return 1;
  }
  // The fused attention's counters start at 0 and each launch leaves them 0.
  const size_t ncnt = (size_t)c.batch * c.kv_heads;
  if (cudaMalloc(reinterpret_cast<void **>(&s->d_attn_cnt), ncnt * 4) != cudaSuccess ||
      cudaMemset(s->d_attn_cnt, 0, ncnt * 4) != cudaSuccess) {
    *err = "out of memory for the attention counters";
    return 1;
  }
  return 0;
}

namespace {

// The step's slots (in this order: plan_test's dumps name them by id).
struct StepSlots {
  tpg_slot x, pos_host, pos, h, qkv, q, attn, o_part, ml_part, part, h2, act, final_norm, attn_cnt;
  tpg_arg inv_freq;
  // RoPE without a table passes a null pointer by value: the plan copies
  // the bytes when the kernel node is added, so they live here, not in a
  // local of the function that sets inv_freq.
  const float *no_table = nullptr;
  std::vector<tpg_slot> attn_norm, mlp_norm, wqkv, wo, w13, w2;
};

// Every slot of the step, the bound ones to s's buffers, w and k.
int step_slots(const Config &c, const Rank &r, const Weights &w, const Caches &k, Step *s, Builder &b,
               StepSlots &sl) {
  const int B = c.batch, H = c.hidden, D = c.head_dim, nq = q_heads(c, r), nkv = kv_heads(c, r);
  const int F = c.ffn / r.nranks, wqkv = (nq + 2 * nkv) * D;
  const tpg_memory DEV = TPG_MEM_DEVICE, SCR = TPG_MEM_SCRATCH;
  // int32 data lives in TPG_F32 slots: tpgraph only needs its 4-byte width.
  if (b.slot("x", TPG_BF16, DEV, (size_t)B * H, s->d_x, &sl.x) ||
      b.slot("pos_host", TPG_F32, TPG_MEM_HOST, B, s->h_pos, &sl.pos_host) ||
      (s->device_loop ? b.slot("pos", TPG_F32, DEV, B, s->d_pos, &sl.pos)
                      : b.slot("pos", TPG_F32, SCR, B, nullptr, &sl.pos)) ||
      b.slot("h", TPG_BF16, SCR, (size_t)B * H, nullptr, &sl.h) ||
      b.slot("qkv", TPG_BF16, SCR, (size_t)B * wqkv, nullptr, &sl.qkv) ||
      b.slot("q", TPG_BF16, SCR, (size_t)B * nq * D, nullptr, &sl.q) ||
      b.slot("attn", TPG_BF16, SCR, (size_t)B * nq * D, nullptr, &sl.attn) ||
      b.slot("o_part", TPG_F32, SCR, (size_t)B * nq * s->nsplit * D, nullptr, &sl.o_part) ||
      b.slot("ml_part", TPG_F32, SCR, (size_t)B * nq * s->nsplit * 2, nullptr, &sl.ml_part) ||
      b.slot("part", TPG_BF16, SCR, (size_t)B * H, nullptr, &sl.part) ||
      b.slot("h2", TPG_BF16, SCR, (size_t)B * H, nullptr, &sl.h2) ||
      b.slot("act", TPG_BF16, SCR, (size_t)B * F, nullptr, &sl.act) ||
      b.slot("final_norm", TPG_BF16, DEV, H, w.final_norm, &sl.final_norm) ||
      b.slot("attn_cnt", TPG_F32, DEV, (size_t)B * nkv, s->d_attn_cnt, &sl.attn_cnt))
    return 1;
  // RoPE's inverse frequencies: a table when the model scales them (Llama
  // 3.1), else a null pointer and the kernels use theta.
  sl.inv_freq = TPG_ARG_VALUE(sl.no_table);
  if (w.rope_inv_freq) {
    tpg_slot t;
    if (b.slot("rope_inv_freq", TPG_F32, DEV, D / 2, w.rope_inv_freq, &t)) return 1;
    sl.inv_freq = tpg_arg_view(t, 0);
  }
  for (auto *v : {&sl.attn_norm, &sl.mlp_norm, &sl.wqkv, &sl.wo, &sl.w13, &sl.w2}) v->assign(c.layers, 0);
  s->k_cache.assign(c.layers, 0);
  s->v_cache.assign(c.layers, 0);
  const size_t cache_n = (size_t)B * nkv * c.max_ctx * D;
  for (int i = 0; i < c.layers; i++) {
    const std::string l = "l" + std::to_string(i) + ".";
    const LayerWeights &lw = w.layers[i];
    if (b.slot(l + "attn_norm", TPG_BF16, DEV, H, lw.attn_norm, &sl.attn_norm[i]) ||
        b.slot(l + "mlp_norm", TPG_BF16, DEV, H, lw.mlp_norm, &sl.mlp_norm[i]) ||
        b.slot(l + "wqkv", TPG_BF16, DEV, (size_t)wqkv * H, lw.wqkv, &sl.wqkv[i]) ||
        b.slot(l + "wo", TPG_BF16, DEV, (size_t)H * nq * D, lw.wo, &sl.wo[i]) ||
        b.slot(l + "w13", TPG_BF16, DEV, (size_t)2 * F * H, lw.w13, &sl.w13[i]) ||
        b.slot(l + "w2", TPG_BF16, DEV, (size_t)H * F, lw.w2, &sl.w2[i]) ||
        b.slot(l + "k_cache", TPG_BF16, DEV, cache_n, k.k[i], &s->k_cache[i]) ||
        b.slot(l + "v_cache", TPG_BF16, DEV, cache_n, k.v[i], &s->v_cache[i]))
      return 1;
  }
  return 0;
}

// Layer i's attention: one fused node, or (--attn tc|fma) RoPE + append,
// the first pass and the combine.
int step_attention(const Config &c, const Rank &r, const Step *s, const StepSlots &sl, int i, Builder &b) {
  const int B = c.batch, D = c.head_dim, nq = q_heads(c, r), nkv = kv_heads(c, r), G = nq / nkv;
  const float theta = c.theta, scale_log2 = (float)(1.0 / std::sqrt((double)D) * 1.4426950408889634);
  const int max_ctx = c.max_ctx, split_len = s->split_len, nsplit = s->nsplit;
  const std::string l = "l" + std::to_string(i) + ".";
  const std::string attn_name = llama_kernel_name(r.attn == Rank::ATTN_FUSED ? "llama_attn_fused"
                                                  : r.attn == Rank::ATTN_FMA ? "llama_attn"
                                                                             : "llama_attn_tc",
                                                  D, G),
                    rope_name = llama_kernel_name("llama_rope_append", D, 0),
                    combine_name = llama_kernel_name("llama_attn_combine", D, 0);
  const tpg_arg kc = tpg_arg_view(s->k_cache[i], 0), vc = tpg_arg_view(s->v_cache[i], 0),
                pos = tpg_arg_view(sl.pos, 0);
  if (r.attn == Rank::ATTN_FUSED)  // one node: RoPE, the KV append, the split attention and its merge
    return b.kernel(attn_name.c_str(), l + "attn", nsplit, nkv, B, 128,
                    {tpg_arg_view(sl.attn, 0), tpg_arg_view(sl.o_part, 0), tpg_arg_view(sl.ml_part, 0),
                     tpg_arg_view(sl.attn_cnt, 0), kc, vc, tpg_arg_view(sl.qkv, 0), pos, TPG_ARG_VALUE(nkv),
                     TPG_ARG_VALUE(max_ctx), TPG_ARG_VALUE(split_len), TPG_ARG_VALUE(nsplit),
                     TPG_ARG_VALUE(scale_log2), TPG_ARG_VALUE(theta), sl.inv_freq},
                    r);
  return b.kernel(rope_name.c_str(), l + "rope_append", B, nq + 2 * nkv, 1, D / 2,
                  {tpg_arg_view(sl.q, 0), kc, vc, tpg_arg_view(sl.qkv, 0), pos, TPG_ARG_VALUE(nq), TPG_ARG_VALUE(nkv),
                   TPG_ARG_VALUE(max_ctx), TPG_ARG_VALUE(theta), sl.inv_freq},
                  r) ||
         b.kernel(attn_name.c_str(), l + "attn", nsplit, nkv, B, 128,
                  {tpg_arg_view(sl.o_part, 0), tpg_arg_view(sl.ml_part, 0), tpg_arg_view(sl.q, 0), kc, vc, pos,
                   TPG_ARG_VALUE(nkv), TPG_ARG_VALUE(max_ctx), TPG_ARG_VALUE(split_len), TPG_ARG_VALUE(nsplit),
                   TPG_ARG_VALUE(scale_log2)},
                  r) ||
         b.kernel(combine_name.c_str(), l + "attn_combine", nq, B, 1, 128,
                  {tpg_arg_view(sl.attn, 0), tpg_arg_view(sl.o_part, 0), tpg_arg_view(sl.ml_part, 0), pos,
                   TPG_ARG_VALUE(nq), TPG_ARG_VALUE(split_len), TPG_ARG_VALUE(nsplit)},
                  r);
}

// --lm-head: the captured cuBLAS call, then (R > 1, not in a device loop)
// the all-gather of the vocab slices.
int step_lm_head(const Config &c, const Rank &r, const Weights &w, LmHead *lm, Step *s, const StepSlots &sl,
                 Builder &b, std::string *err) {
  const int B = c.batch, H = c.hidden, R = r.nranks, vpart = c.vocab / R;
  const tpg_memory DEV = TPG_MEM_DEVICE, SCR = TPG_MEM_SCRATCH;
  tpg_slot lm_w, logits, logits_all;
  if (b.slot("lm_head", TPG_BF16, DEV, (size_t)vpart * H, w.lm_head, &lm_w)) return 1;
  if (R == 1 || s->device_loop) {
    if (b.slot("logits", TPG_F32, DEV, (size_t)B * vpart, s->d_logits, &logits)) return 1;
    logits_all = logits;
  } else if (b.slot("logits", TPG_F32, SCR, (size_t)B * vpart, nullptr, &logits) ||
             b.slot("logits_all", TPG_F32, DEV, (size_t)B * c.vocab, s->d_logits, &logits_all)) {
    return 1;
  }
  lm->rank = &r;
  lm->batch = B;
  lm->hidden = H;
  lm->vocab_part = vpart;
  const tpg_view views[3] = {{sl.h, 0, 0}, {lm_w, 0, 0}, {logits, 0, 0}};
  tpg_captured_desc cd = TPG_CAPTURED_DESC_INIT;
  cd.fn = lm_head_capture;
  cd.user = lm;
  cd.views = views;
  cd.nviews = 3;
  tpg_node n;
  TRY(tpg_plan_add_captured(s->plan, &cd, b.dep(), b.ndep(), &n));
  TRY(tpg_plan_set_node_name(s->plan, n, "lm_head"));
  b.chain(n);
  if (R > 1 && !s->device_loop) {  // rank-major [R][B][V/R]; main.cc puts the vocab slices side by side
    tpg_collective_desc g = TPG_COLLECTIVE_DESC_INIT;
    g.kind = TPG_ALL_GATHER;
    g.send = tpg_view{logits, 0, 0};
    g.recv = tpg_view{logits_all, 0, 0};
    g.count = (size_t)B * vpart;
    TRY(tpg_plan_add_collective(s->plan, &g, b.dep(), b.ndep(), &n));
    TRY(tpg_plan_set_node_name(s->plan, n, "logits.allgather"));
    b.chain(n);
  }
  s->logits = logits_all;
  return 0;
}

}  // namespace

int build_step(const Config &c, const Rank &r, const Weights &w, const Caches &k, int max_len, LmHead *lm, Step *s,
               std::string *err) {
  const int B = c.batch, H = c.hidden, D = c.head_dim, nq = q_heads(c, r), nkv = kv_heads(c, r), G = nq / nkv;
  const int wqkv = (nq + 2 * nkv) * D;
  if ((D != LLAMA_HEAD_DIM && D != LLAMA_HEAD_DIM_SMALL) || G < 1 || G > LLAMA_ATTN_MAX_GROUP ||
      (r.attn == Rank::ATTN_FMA && D != LLAMA_HEAD_DIM)) {
    *err = "head_dim " + std::to_string(D) + ", heads/kv_heads " + std::to_string(G) +
           ": head_dim must be 128 or 64 (128 with --attn fma) and heads/kv_heads 1..16";
    return 1;
  }
  // Attention's context split for the longest context this graph serves.
  const int split = attn_split(B * nkv, max_len, r.sm_count, r.attn_bps);
  s->split_len = split;
  s->nsplit = (max_len + split - 1) / split;
  TRY(tpg_plan_create(&s->plan));
  Builder b{s->plan, &s->bindings, err};
  StepSlots sl;
  if (step_slots(c, r, w, k, s, b, sl)) return 1;
  s->x = sl.x;
  s->pos_host = sl.pos_host;
  s->pos = sl.pos;
  tpg_node n;
  if (!s->device_loop) {
    TRY(tpg_plan_add_memcpy(s->plan, tpg_view{sl.pos, 0, 0}, tpg_view{sl.pos_host, 0, 0}, B, nullptr, 0, &n));
    TRY(tpg_plan_set_node_name(s->plan, n, "pos<-host"));
    b.chain(n);
  }
  const float eps = c.eps;
  if (b.kernel("llama_rmsnorm", "l0.attn_norm", B, 1, 1, 256,
               {tpg_arg_view(sl.h, 0), tpg_arg_view(sl.x, 0), tpg_arg_view(sl.attn_norm[0], 0), TPG_ARG_VALUE(H),
                TPG_ARG_VALUE(eps)},
               r))
    return 1;
  tpg_slot ssq;
  if (b.ssq_slot(r, B, H, &ssq)) return 1;
  const Builder::Rows bufs{B, H, eps, sl.x, sl.h, sl.h2, sl.part, sl.act, ssq};
  for (int i = 0; i < c.layers; i++) {
    const std::string l = "l" + std::to_string(i) + ".";
    if (b.qkv_linear(r, B, H, wqkv, sl.h, sl.wqkv[i], sl.qkv, w.layers[i].bqkv, l) ||
        step_attention(c, r, s, sl, i, b) ||
        b.layer_after_attention(c, r, bufs, sl.attn, nq * D, sl.wo[i], sl.mlp_norm[i], sl.w13[i], sl.w2[i],
                                i + 1 == c.layers ? sl.final_norm : sl.attn_norm[i + 1], l,
                                i + 1 < c.layers))
      return 1;
  }
  if (c.vocab > 0 && step_lm_head(c, r, w, lm, s, sl, b, err)) return 1;
  TRY(tpg_plan_validate(s->plan));
  return 0;
}

int warm_lm_head(const Rank &r, const Weights &w, LmHead *lm, Step *s, std::string *err) {
  if (!w.lm_head || !lm->rank) return 0;
  // The step's x and logits buffers serve as input and output: both are
  // large enough ([B, hidden]; [B, vocab] >= [B, vocab/R]), and both are
  // rewritten before they are read.
  void *const ptrs[3] = {s->d_x, w.lm_head, s->d_logits};
  const int rc = lm_head_capture(lm, reinterpret_cast<tpg_stream>(r.stream), ptrs, 3);
  if (rc || cudaStreamSynchronize(r.stream) != cudaSuccess) {
    *err = "the LM head's cuBLAS call failed (code " + std::to_string(rc) + ")";
    return 1;
  }
  return 0;
}

int create_step_graph(const Rank &r, Step *s, std::string *err) {
  tpg_graph_config cfg = TPG_GRAPH_CONFIG_INIT;
  cfg.device = r.device;
  cfg.comm = r.comm;
  cfg.bindings = s->bindings.data();
  cfg.nbindings = (int)s->bindings.size();
  if (r.pdl) cfg.flags |= TPG_GRAPH_PDL;
  cfg.mode = r.mode;
  TRY(tpg_graph_create(s->plan, &cfg, &s->graph));
  return 0;
}

int bind_caches(Step *s, const Caches &k, std::string *err) {
  std::vector<tpg_binding> nb;
  for (size_t i = 0; i < s->k_cache.size(); i++) {
    nb.push_back({s->k_cache[i], k.k[i]});
    nb.push_back({s->v_cache[i], k.v[i]});
  }
  TRY(tpg_graph_rebind(s->graph, nb.data(), (int)nb.size()));
  return 0;
}

void free_step(Step *s) {
  if (s->graph) tpg_graph_destroy(s->graph);
  tpg_plan_destroy(s->plan);
  cudaFree(s->d_x);
  cudaFreeHost(s->h_pos);
  cudaFree(s->d_logits);
  cudaFree(s->d_pos);
  cudaFree(s->d_attn_cnt);
  *s = Step();
}

}  // namespace llama
