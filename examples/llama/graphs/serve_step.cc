// serve_step.cc - serve_step.h: the serving step's buffers and its plan at
// one size.
//
// The activations are scratch, which a graph set lays out in one arena for
// every size (the sizes run one at a time, on one stream); what lives from
// one step to the next (block tables, pools, split counters) and the inputs
// and tokens are bound to ServeBuffers. The layer stack is the decode step's (graphs/layer.h); only the
// attention (two paged kernels) and the tail (gather, GEMM LM head, greedy
// pick) are the serving step's own.
#include "examples/llama/graphs/serve_step.h"

#include <algorithm>
#include <cmath>

#include "examples/llama/graphs/layer.h"
#include "examples/llama/kernels/kernels.h"

namespace llama {
namespace {

int round4(int n) { return (n + 3) / 4 * 4; }

bool cuda_alloc(void **p, size_t bytes, const char *what, size_t *total, std::string *err) {
  if (cudaMalloc(p, bytes) != cudaSuccess || cudaMemset(*p, 0, bytes) != cudaSuccess) {
    *err = std::string("out of device memory for the serving step's ") + what + " (" +
           std::to_string(bytes >> 20) + " MiB)";
    return false;
  }
  *total += bytes;
  return true;
}

// The slots of one step of T rows: what the layers and the tail read.
struct Slots {
  tpg_slot in_host, in, tables, emb, x, h, h2, part, qkv, q, attn, act, o_part, ml_part, counters, final_norm;
  tpg_slot lm_in, lm_w, logits, cand, out;
  tpg_arg inv_freq;
  // RoPE without a table passes a null pointer by value: the plan copies
  // the bytes when the kernel node is added, so they live here, not in a
  // local of the function that sets inv_freq.
  const float *no_table = nullptr;
  std::vector<tpg_slot> attn_norm, mlp_norm, wqkv, wo, w13, w2, k_pool, v_pool;
};

}  // namespace

int ServeShape::max_blocks() const { return (max_ctx + LLAMA_KV_BLOCK - 1) / LLAMA_KV_BLOCK; }
int ServeShape::nsplit() const {
  const int s = split_len > 0 ? split_len : LLAMA_PAGED_SPLIT;
  return (max_ctx + s - 1) / s;
}

StepLayout step_layout(const ServeShape &sh, int T, int G) {
  StepLayout l;
  l.T = T;
  l.W = (T + LLAMA_PREFILL_POSITIONS(G) - 1) / LLAMA_PREFILL_POSITIONS(G) + std::min(T, sh.max_prompts);
  l.L = std::min(T, sh.max_seqs);
  l.meta = 0;
  l.ids = 4;
  l.pos = l.ids + round4(T);
  l.seq = l.pos + round4(T);
  l.work = l.seq + round4(T);
  l.sample = l.work + round4(2 * l.W);
  l.total = l.sample + round4(l.L);
  return l;
}

int alloc_serve(const Config &c, const Rank &r, const ServeShape &sh, ServeBuffers *b, std::string *err) {
  const int nkv = kv_heads(c, r), D = c.head_dim, S = sh.max_seqs;
  const StepLayout lay = step_layout(sh, sh.max_rows, q_heads(c, r) / nkv);
  if (cudaHostAlloc(reinterpret_cast<void **>(&b->in_host), (size_t)lay.total * 4, cudaHostAllocPortable) !=
          cudaSuccess ||
      cudaHostAlloc(reinterpret_cast<void **>(&b->out), (size_t)S * 4, cudaHostAllocMapped | cudaHostAllocPortable) !=
          cudaSuccess) {
    *err = "out of pinned host memory for the serving step's inputs and tokens";
    return 1;
  }
  b->ncand = round4(S * r.nranks * 2);
  const size_t pool = (size_t)sh.nblocks * nkv * LLAMA_KV_BLOCK * D * 2;
  size_t *t = &b->bytes;
  if (!cuda_alloc(reinterpret_cast<void **>(&b->tables), (size_t)S * sh.max_blocks() * 4, "block tables", t, err) ||
      !cuda_alloc(&b->emb, (size_t)c.vocab * c.hidden * 2, "token embedding", t, err) ||
      !cuda_alloc(reinterpret_cast<void **>(&b->counters), (size_t)S * nkv * 4, "split counters", t, err))
    return 1;
  b->k_pool.assign(c.layers, nullptr);
  b->v_pool.assign(c.layers, nullptr);
  for (int i = 0; i < c.layers; i++)
    if (!cuda_alloc(&b->k_pool[i], pool, "K pool", t, err) || !cuda_alloc(&b->v_pool[i], pool, "V pool", t, err))
      return 1;
  b->pool_bytes = 2 * pool * c.layers;
  return 0;
}

void free_serve(ServeBuffers *b) {
  cudaFreeHost(b->in_host);
  cudaFreeHost(b->out);
  for (void *p : {(void *)b->tables, b->emb, (void *)b->counters}) cudaFree(p);
  for (void *p : b->k_pool) cudaFree(p);
  for (void *p : b->v_pool) cudaFree(p);
  *b = ServeBuffers();
}

namespace {

// Every slot of the step at T rows: the bound ones to b, the activations
// scratch (int32 data in TPG_F32 slots: tpgraph only needs the 4-byte width).
int add_slots(const Config &c, const Rank &r, const Weights &w, const ServeShape &sh, const ServeBuffers &b,
              const StepLayout &lay, int ncand, PlanBuilder &pb, Slots &s) {
  const int T = lay.T, L = lay.L, H = c.hidden, D = c.head_dim, R = r.nranks, nq = q_heads(c, r);
  const int nkv = kv_heads(c, r), wqkv = (nq + 2 * nkv) * D, F = c.ffn / R, vpart = c.vocab / R;
  const size_t ns = (size_t)sh.nsplit(), S = (size_t)sh.max_seqs;
  const size_t pool = (size_t)sh.nblocks * nkv * LLAMA_KV_BLOCK * D;
  const tpg_memory DEV = TPG_MEM_DEVICE, SCR = TPG_MEM_SCRATCH;
  if (pb.slot("in_host", TPG_F32, TPG_MEM_HOST, lay.total, b.in_host, &s.in_host) ||
      pb.slot("in", TPG_F32, SCR, lay.total, nullptr, &s.in) ||
      pb.slot("tables", TPG_F32, DEV, S * sh.max_blocks(), b.tables, &s.tables) ||
      pb.slot("emb", TPG_BF16, DEV, (size_t)c.vocab * H, b.emb, &s.emb) ||
      pb.slot("x", TPG_BF16, SCR, (size_t)T * H, nullptr, &s.x) ||
      pb.slot("h", TPG_BF16, SCR, (size_t)T * H, nullptr, &s.h) ||
      pb.slot("h2", TPG_BF16, SCR, (size_t)T * H, nullptr, &s.h2) ||
      pb.slot("part", TPG_BF16, SCR, (size_t)T * H, nullptr, &s.part) ||
      pb.slot("qkv", TPG_BF16, SCR, (size_t)T * wqkv, nullptr, &s.qkv) ||
      pb.slot("q", TPG_BF16, SCR, (size_t)T * nq * D, nullptr, &s.q) ||
      pb.slot("attn", TPG_BF16, SCR, (size_t)T * nq * D, nullptr, &s.attn) ||
      pb.slot("act", TPG_BF16, SCR, (size_t)T * F, nullptr, &s.act) ||
      pb.slot("o_part", TPG_F32, SCR, S * nq * ns * D, nullptr, &s.o_part) ||
      pb.slot("ml_part", TPG_F32, SCR, S * nq * ns * 2, nullptr, &s.ml_part) ||
      pb.slot("attn_cnt", TPG_F32, DEV, S * nkv, b.counters, &s.counters) ||
      pb.slot("final_norm", TPG_BF16, DEV, H, w.final_norm, &s.final_norm) ||
      pb.slot("lm_in", TPG_BF16, SCR, (size_t)L * H, nullptr, &s.lm_in) ||
      pb.slot("lm_head", TPG_BF16, DEV, (size_t)vpart * H, w.lm_head, &s.lm_w) ||
      pb.slot("logits", TPG_F32, SCR, (size_t)L * vpart, nullptr, &s.logits) ||
      pb.slot("cand", TPG_F32, SCR, ncand, nullptr, &s.cand) ||
      pb.slot("out", TPG_F32, TPG_MEM_HOST, L, b.out, &s.out))
    return 1;
  s.inv_freq = TPG_ARG_VALUE(s.no_table);
  if (w.rope_inv_freq) {
    tpg_slot t;
    if (pb.slot("rope_inv_freq", TPG_F32, DEV, D / 2, w.rope_inv_freq, &t)) return 1;
    s.inv_freq = tpg_arg_view(t, 0);
  }
  for (auto *v : {&s.attn_norm, &s.mlp_norm, &s.wqkv, &s.wo, &s.w13, &s.w2, &s.k_pool, &s.v_pool})
    v->assign(c.layers, 0);
  for (int i = 0; i < c.layers; i++) {
    const std::string l = "l" + std::to_string(i) + ".";
    const LayerWeights &lw = w.layers[i];
    if (pb.slot(l + "attn_norm", TPG_BF16, DEV, H, lw.attn_norm, &s.attn_norm[i]) ||
        pb.slot(l + "mlp_norm", TPG_BF16, DEV, H, lw.mlp_norm, &s.mlp_norm[i]) ||
        pb.slot(l + "wqkv", TPG_BF16, DEV, (size_t)wqkv * H, lw.wqkv, &s.wqkv[i]) ||
        pb.slot(l + "wo", TPG_BF16, DEV, (size_t)H * nq * D, lw.wo, &s.wo[i]) ||
        pb.slot(l + "w13", TPG_BF16, DEV, (size_t)2 * F * H, lw.w13, &s.w13[i]) ||
        pb.slot(l + "w2", TPG_BF16, DEV, (size_t)H * F, lw.w2, &s.w2[i]) ||
        pb.slot(l + "k_pool", TPG_BF16, DEV, pool, b.k_pool.empty() ? nullptr : b.k_pool[i], &s.k_pool[i]) ||
        pb.slot(l + "v_pool", TPG_BF16, DEV, pool, b.v_pool.empty() ? nullptr : b.v_pool[i], &s.v_pool[i]))
      return 1;
  }
  return 0;
}

// The inputs' copy, the embedding, the first norm, then every layer.
int add_layers(const Config &c, const Rank &r, const ServeShape &sh, const StepLayout &lay, const Weights &w,
               PlanBuilder &pb, const Slots &s) {
  const int T = lay.T, H = c.hidden, D = c.head_dim, nq = q_heads(c, r), nkv = kv_heads(c, r), G = nq / nkv;
  const int wqkv = (nq + 2 * nkv) * D, vocab = c.vocab, mb = sh.max_blocks(), nsplit = sh.nsplit();
  const int split = sh.split_len > 0 ? sh.split_len : LLAMA_PAGED_SPLIT;
  const float eps = c.eps, theta = c.theta, scale_log2 = (float)(1.0 / std::sqrt((double)D) * 1.4426950408889634);
  std::string *err = pb.err;
  tpg_node n;
  LLAMA_TRY(tpg_plan_add_memcpy(pb.p, tpg_view{s.in, 0, 0}, tpg_view{s.in_host, 0, 0}, lay.total, nullptr, 0, &n));
  LLAMA_TRY(tpg_plan_set_node_name(pb.p, n, "in<-host"));
  pb.chain(n);
  const tpg_arg meta = tpg_arg_view(s.in, lay.meta), pos = tpg_arg_view(s.in, lay.pos);
  const tpg_arg seq = tpg_arg_view(s.in, lay.seq);
  if (pb.kernel("llama_embed", "embed", T, 1, 1, 128,
                {tpg_arg_view(s.x, 0), tpg_arg_view(s.emb, 0), tpg_arg_view(s.in, lay.ids), TPG_ARG_VALUE(H),
                 TPG_ARG_VALUE(vocab)},
                r, r.prefill_module) ||
      pb.kernel("llama_rmsnorm", "l0.attn_norm", T, 1, 1, 256,
                {tpg_arg_view(s.h, 0), tpg_arg_view(s.x, 0), tpg_arg_view(s.attn_norm[0], 0), TPG_ARG_VALUE(H),
                 TPG_ARG_VALUE(eps)},
                r))
    return 1;
  const std::string attn = llama_kernel_name("llama_paged_attn", D, G);
  const std::string pre = llama_kernel_name("llama_paged_prefill", D, G);
  tpg_slot ssq;
  if (pb.ssq_slot(r, T, H, &ssq)) return 1;
  const PlanBuilder::Rows bufs{T, H, eps, s.x, s.h, s.h2, s.part, s.act, ssq};
  for (int i = 0; i < c.layers; i++) {
    const std::string l = "l" + std::to_string(i) + ".";
    if (pb.qkv_linear(r, T, H, wqkv, s.h, s.wqkv[i], s.qkv, w.layers[i].bqkv, l) ||
        pb.kernel(attn.c_str(), l + "attn", nsplit, nkv, T, 128,
                  {tpg_arg_view(s.attn, 0), tpg_arg_view(s.q, 0), tpg_arg_view(s.o_part, 0),
                   tpg_arg_view(s.ml_part, 0), tpg_arg_view(s.counters, 0), tpg_arg_view(s.k_pool[i], 0),
                   tpg_arg_view(s.v_pool[i], 0), tpg_arg_view(s.tables, 0), tpg_arg_view(s.qkv, 0), meta, pos, seq,
                   TPG_ARG_VALUE(nkv), TPG_ARG_VALUE(mb), TPG_ARG_VALUE(split), TPG_ARG_VALUE(nsplit),
                   TPG_ARG_VALUE(scale_log2), TPG_ARG_VALUE(theta), s.inv_freq},
                  r, r.paged_module, true, llama_paged_attn_smem(D)) ||
        pb.kernel(pre.c_str(), l + "prefill_attn", lay.W, nkv, 1, 128,
                  {tpg_arg_view(s.attn, 0), tpg_arg_view(s.q, 0), tpg_arg_view(s.k_pool[i], 0),
                   tpg_arg_view(s.v_pool[i], 0), tpg_arg_view(s.tables, 0), meta, pos, seq,
                   tpg_arg_view(s.in, lay.work), TPG_ARG_VALUE(nkv), TPG_ARG_VALUE(mb), TPG_ARG_VALUE(scale_log2)},
                  r, r.paged_module) ||
        pb.layer_after_attention(c, r, bufs, s.attn, nq * D, s.wo[i], s.mlp_norm[i], s.w13[i], s.w2[i],
                                 i + 1 == c.layers ? s.final_norm : s.attn_norm[i + 1], l,
                                 i + 1 < c.layers))
      return 1;
  }
  return 0;
}

// After the last layer: the sampled rows, the LM head, greedy argmax across
// the ranks, the tokens to pinned host memory.
int add_tail(const Config &c, const Rank &r, const StepLayout &lay, PlanBuilder &pb, const Slots &s, int ncand) {
  const int L = lay.L, H = c.hidden, R = r.nranks, rank = r.rank, vpart = c.vocab / R;
  std::string *err = pb.err;
  if (pb.kernel("llama_gather_rows", "lm_rows", L, 1, 1, 128,
                {tpg_arg_view(s.lm_in, 0), tpg_arg_view(s.h, 0), tpg_arg_view(s.in, lay.sample), TPG_ARG_VALUE(H)}, r,
                r.paged_module))
    return 1;
  tpg_gemm_desc g = TPG_GEMM_DESC_INIT;
  g.m = L;
  g.n = vpart;
  g.k = H;
  g.epilogue = TPG_EPILOGUE_F32_PARTIAL;
  g.x = tpg_view{s.lm_in, 0, 0};
  g.w = tpg_view{s.lm_w, 0, 0};
  g.y = tpg_view{s.logits, 0, 0};
  tpg_node n;
  LLAMA_TRY(tpg_plan_add_gemm(pb.p, &g, pb.dep(), pb.ndep(), &n));
  LLAMA_TRY(tpg_plan_set_node_name(pb.p, n, "lm_head"));
  pb.chain(n);
  if (pb.kernel("llama_argmax_part", "argmax", L, 1, 1, 1024,
                {tpg_arg_view(s.cand, 0), tpg_arg_view(s.logits, 0), TPG_ARG_VALUE(vpart), TPG_ARG_VALUE(rank),
                 TPG_ARG_VALUE(R), TPG_ARG_VALUE(ncand)},
                r, r.loop_module, false))
    return 1;
  if (R > 1) {  // a few KB: our one-shot kernel, every rank then holds every rank's candidates
    tpg_collective_desc a = TPG_COLLECTIVE_DESC_INIT;
    a.send = a.recv = tpg_view{s.cand, 0, 0};
    a.count = (size_t)ncand;
    a.algo = TPG_ALGO_ONESHOT;
    LLAMA_TRY(tpg_plan_add_collective(pb.p, &a, pb.dep(), pb.ndep(), &n));
    LLAMA_TRY(tpg_plan_set_node_name(pb.p, n, "cand.allreduce"));
    pb.chain(n);
  }
  return pb.kernel("llama_serve_pick", "pick", L, 1, 1, 32,
                   {tpg_arg_view(s.cand, 0), TPG_ARG_VALUE(R), tpg_arg_view(s.out, 0)}, r, r.loop_module, false);
}

int validate(const tpg_plan *p, std::string *err) {
  LLAMA_TRY(tpg_plan_validate(p));
  return 0;
}

}  // namespace

int build_serve_step(const Config &c, const Rank &r, const Weights &w, const ServeShape &sh, const ServeBuffers &b,
                     int T, tpg_plan **plan, std::vector<tpg_binding> *bind, std::string *err) {
  const int D = c.head_dim, nq = q_heads(c, r), nkv = kv_heads(c, r), G = nkv > 0 ? nq / nkv : 0;
  const int split = sh.split_len > 0 ? sh.split_len : LLAMA_PAGED_SPLIT;
  *plan = nullptr;
  if ((D != LLAMA_HEAD_DIM && D != LLAMA_HEAD_DIM_SMALL) || G < 1 || G > LLAMA_ATTN_MAX_GROUP) {
    *err = "serving step: head_dim " + std::to_string(D) + ", heads/kv_heads " + std::to_string(G) +
           ": head_dim must be 128 or 64 and heads/kv_heads 1..16";
    return 1;
  }
  std::string bad;
  if (T < 1 || T > sh.max_rows)
    bad = "rows " + std::to_string(T) + ": expected 1.." + std::to_string(sh.max_rows) + " (the largest step)";
  else if (sh.max_seqs < 1 || sh.max_prompts < 1 || sh.nblocks < 1 || sh.max_ctx < 1)
    bad = "sequences, prompts a step, pool blocks and context must each be at least 1";
  else if (split < LLAMA_KV_BLOCK || split % LLAMA_KV_BLOCK)
    bad = "split " + std::to_string(split) + ": expected a multiple of " + std::to_string(LLAMA_KV_BLOCK);
  else if (c.vocab <= 0 || !w.lm_head)
    bad = "no LM head (vocab " + std::to_string(c.vocab) + "): the step samples tokens";
  if (!bad.empty()) {
    *err = "serving step: " + bad;
    return 1;
  }
  const StepLayout lay = step_layout(sh, T, G);
  tpg_plan *p = nullptr;
  LLAMA_TRY(tpg_plan_create(&p));
  PlanBuilder pb{p, bind, err};
  Slots s;
  const int ncand = b.ncand > 0 ? b.ncand : round4(sh.max_seqs * r.nranks * 2);
  if (add_slots(c, r, w, sh, b, lay, ncand, pb, s) || add_layers(c, r, sh, lay, w, pb, s) ||
      add_tail(c, r, lay, pb, s, ncand) || validate(p, err)) {
    tpg_plan_destroy(p);
    bind->clear();
    return 1;
  }
  *plan = p;
  return 0;
}

std::vector<GemmShape> serve_step_gemms(const Config &c, const Rank &r, const Weights &w, const ServeShape &sh, int T) {
  const int R = r.nranks, nq = q_heads(c, r), nkv = kv_heads(c, r), D = c.head_dim, H = c.hidden;
  std::vector<GemmShape> v;
  for (int i = 0; i < c.layers; i++) {
    const bool bias = i < (int)w.layers.size() && w.layers[i].bqkv;
    v.push_back({T, (nq + 2 * nkv) * D, H, bias ? TPG_EPILOGUE_BIAS : TPG_EPILOGUE_NONE});
    v.push_back({T, H, nq * D, TPG_EPILOGUE_NONE});
    v.push_back({T, c.ffn / R, H, TPG_EPILOGUE_SWIGLU});
    v.push_back({T, H, c.ffn / R, TPG_EPILOGUE_NONE});
  }
  v.push_back({std::min(T, sh.max_seqs), c.vocab / R, H, TPG_EPILOGUE_F32_PARTIAL});
  return v;
}

}  // namespace llama
