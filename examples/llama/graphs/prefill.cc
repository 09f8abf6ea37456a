// prefill.cc - prefill.h: the plan of one chunk size, its graph, and the
// per-chunk rebinding.
//
// The layer stack is the decode step's (step.cc) at M rows instead of B:
// the same slots and names for the weights and caches, the same
// column-parallel QKV and gate/up linears, the same row-parallel O and down
// GEMMs whose all-reduces carry the residual add and the next RMSNorm as
// their epilogue (TP 1: the epilogue alone). Only the attention differs:
// RoPE + append of M rows, then causal attention over the cache, both
// reading the chunk's first position from the "pos" slot.
#include "examples/llama/graphs/prefill.h"

#include <algorithm>
#include <cmath>

#include "examples/llama/kernels/kernels.h"
#include "examples/llama/graphs/layer.h"

namespace llama {

std::vector<PrefillChunk> prefill_chunks(int P, int chunk) {
  std::vector<PrefillChunk> v;
  if (P < 1 || chunk < 1) return v;
  for (int p0 = 0; p0 < P; p0 += chunk) v.push_back({p0, std::min(chunk, P - p0)});
  return v;
}

namespace {

// The prefill's slots (in this order: plan_test's dumps name them by id).
struct PrefillSlots {
  tpg_slot ids, pos, emb, x, h, qkv, q, attn, part, h2, act, final_norm;
  tpg_arg inv_freq;
  // RoPE without a table passes a null pointer by value: the plan copies
  // the bytes when the kernel node is added, so they live here, not in a
  // local of the function that sets inv_freq.
  const float *no_table = nullptr;
  std::vector<tpg_slot> attn_norm, mlp_norm, wqkv, wo, w13, w2, kc, vc;
};

int prefill_slots(const Config &c, const Rank &r, const Weights &w, const Caches &k, int M, const void *emb,
                  const int *ids, const int *pos, PlanBuilder &b, PrefillSlots &sl) {
  const int H = c.hidden, D = c.head_dim, nq = q_heads(c, r), nkv = kv_heads(c, r), F = c.ffn / r.nranks;
  const int wqkv = (nq + 2 * nkv) * D;
  const tpg_memory DEV = TPG_MEM_DEVICE, SCR = TPG_MEM_SCRATCH;
  // int32 data lives in TPG_F32 slots: tpgraph only needs its 4-byte width.
  if (b.slot("ids", TPG_F32, DEV, M, const_cast<int *>(ids), &sl.ids) ||
      b.slot("pos", TPG_F32, DEV, 1, const_cast<int *>(pos), &sl.pos) ||
      b.slot("emb", TPG_BF16, DEV, (size_t)c.vocab * H, const_cast<void *>(emb), &sl.emb) ||
      b.slot("x", TPG_BF16, SCR, (size_t)M * H, nullptr, &sl.x) ||
      b.slot("h", TPG_BF16, SCR, (size_t)M * H, nullptr, &sl.h) ||
      b.slot("qkv", TPG_BF16, SCR, (size_t)M * wqkv, nullptr, &sl.qkv) ||
      b.slot("q", TPG_BF16, SCR, (size_t)M * nq * D, nullptr, &sl.q) ||
      b.slot("attn", TPG_BF16, SCR, (size_t)M * nq * D, nullptr, &sl.attn) ||
      b.slot("part", TPG_BF16, SCR, (size_t)M * H, nullptr, &sl.part) ||
      b.slot("h2", TPG_BF16, SCR, (size_t)M * H, nullptr, &sl.h2) ||
      b.slot("act", TPG_BF16, SCR, (size_t)M * F, nullptr, &sl.act) ||
      b.slot("final_norm", TPG_BF16, DEV, H, w.final_norm, &sl.final_norm))
    return 1;
  sl.inv_freq = TPG_ARG_VALUE(sl.no_table);
  if (w.rope_inv_freq) {
    tpg_slot t;
    if (b.slot("rope_inv_freq", TPG_F32, DEV, D / 2, w.rope_inv_freq, &t)) return 1;
    sl.inv_freq = tpg_arg_view(t, 0);
  }
  for (auto *v : {&sl.attn_norm, &sl.mlp_norm, &sl.wqkv, &sl.wo, &sl.w13, &sl.w2, &sl.kc, &sl.vc})
    v->assign(c.layers, 0);
  const size_t cache_n = (size_t)nkv * c.max_ctx * D;
  for (int i = 0; i < c.layers; i++) {
    const std::string l = "l" + std::to_string(i) + ".";
    const LayerWeights &lw = w.layers[i];
    if (b.slot(l + "attn_norm", TPG_BF16, DEV, H, lw.attn_norm, &sl.attn_norm[i]) ||
        b.slot(l + "mlp_norm", TPG_BF16, DEV, H, lw.mlp_norm, &sl.mlp_norm[i]) ||
        b.slot(l + "wqkv", TPG_BF16, DEV, (size_t)wqkv * H, lw.wqkv, &sl.wqkv[i]) ||
        b.slot(l + "wo", TPG_BF16, DEV, (size_t)H * nq * D, lw.wo, &sl.wo[i]) ||
        b.slot(l + "w13", TPG_BF16, DEV, (size_t)2 * F * H, lw.w13, &sl.w13[i]) ||
        b.slot(l + "w2", TPG_BF16, DEV, (size_t)H * F, lw.w2, &sl.w2[i]) ||
        b.slot(l + "k_cache", TPG_BF16, DEV, cache_n, k.k[i], &sl.kc[i]) ||
        b.slot(l + "v_cache", TPG_BF16, DEV, cache_n, k.v[i], &sl.vc[i]))
      return 1;
  }
  return 0;
}

// The embedding, the first norm, then every layer (RoPE + append, causal
// attention, the decode step's linears).
int prefill_layers(const Config &c, const Rank &r, const Weights &w, int M, PlanBuilder &b, const PrefillSlots &sl) {
  const int H = c.hidden, D = c.head_dim, nq = q_heads(c, r), nkv = kv_heads(c, r), G = nq / nkv;
  const int wqkv = (nq + 2 * nkv) * D, max_ctx = c.max_ctx, vocab = c.vocab;
  const float eps = c.eps, theta = c.theta;
  const float scale_log2 = (float)(1.0 / std::sqrt((double)D) * 1.4426950408889634);
  const tpg_module *pm = r.prefill_module;
  if (b.kernel("llama_embed", "embed", M, 1, 1, 128,
               {tpg_arg_view(sl.x, 0), tpg_arg_view(sl.emb, 0), tpg_arg_view(sl.ids, 0), TPG_ARG_VALUE(H),
                TPG_ARG_VALUE(vocab)},
               r, pm) ||
      b.kernel("llama_rmsnorm", "l0.attn_norm", M, 1, 1, 256,
               {tpg_arg_view(sl.h, 0), tpg_arg_view(sl.x, 0), tpg_arg_view(sl.attn_norm[0], 0), TPG_ARG_VALUE(H),
                TPG_ARG_VALUE(eps)},
               r))
    return 1;
  const std::string attn_name = llama_kernel_name("llama_prefill_attn", D, G),
                    rope_name = llama_kernel_name("llama_prefill_rope", D, 0);
  const unsigned qblocks = llama_prefill_blocks(M, G);
  tpg_slot ssq;
  if (b.ssq_slot(r, M, H, &ssq)) return 1;
  const PlanBuilder::Rows bufs{M, H, eps, sl.x, sl.h, sl.h2, sl.part, sl.act, ssq};
  for (int i = 0; i < c.layers; i++) {
    const std::string l = "l" + std::to_string(i) + ".";
    if (b.qkv_linear(r, M, H, wqkv, sl.h, sl.wqkv[i], sl.qkv, w.layers[i].bqkv, l) ||
        b.kernel(rope_name.c_str(), l + "rope", M, 1, 1, LLAMA_PREFILL_ROPE_THREADS,
                 {tpg_arg_view(sl.q, 0), tpg_arg_view(sl.kc[i], 0), tpg_arg_view(sl.vc[i], 0),
                  tpg_arg_view(sl.qkv, 0), tpg_arg_view(sl.pos, 0), TPG_ARG_VALUE(nq), TPG_ARG_VALUE(nkv),
                  TPG_ARG_VALUE(max_ctx), TPG_ARG_VALUE(theta), sl.inv_freq},
                 r, pm) ||
        b.kernel(attn_name.c_str(), l + "attn", qblocks, nkv, 1, 128,
                 {tpg_arg_view(sl.attn, 0), tpg_arg_view(sl.q, 0), tpg_arg_view(sl.kc[i], 0),
                  tpg_arg_view(sl.vc[i], 0), tpg_arg_view(sl.pos, 0), TPG_ARG_VALUE(M), TPG_ARG_VALUE(nkv),
                  TPG_ARG_VALUE(max_ctx), TPG_ARG_VALUE(scale_log2)},
                 r, pm) ||
        b.layer_after_attention(c, r, bufs, sl.attn, nq * D, sl.wo[i], sl.mlp_norm[i], sl.w13[i], sl.w2[i],
                                i + 1 == c.layers ? sl.final_norm : sl.attn_norm[i + 1], l,
                                i + 1 < c.layers))
      return 1;
  }
  return 0;
}

// The prompt's last row only: h[M-1] (the final norm's output) through the
// LM head, greedy argmax, and the token into the decode step.
int prefill_tail(const Config &c, const Rank &r, const Weights &w, int M, const PrefillTail *tail, Prefill *p,
                 PlanBuilder &b, const PrefillSlots &sl, std::string *err) {
  const int H = c.hidden, R = r.nranks, vocab = c.vocab, vpart = vocab / R;
  const tpg_memory DEV = TPG_MEM_DEVICE, SCR = TPG_MEM_SCRATCH;
  if (vocab <= 0 || !w.lm_head) {
    *err = "prefill: the last chunk needs the LM head";
    return 1;
  }
  tpg_slot lm_w, logits, logits_all, cand, step, done, out, dec_x, dec_pos;
  if (b.slot("lm_head", TPG_BF16, DEV, (size_t)vpart * H, w.lm_head, &lm_w)) return 1;
  if (R == 1) {
    if (b.slot("logits", TPG_F32, DEV, vocab, tail->logits, &logits)) return 1;
    logits_all = logits;
  } else if (b.slot("logits", TPG_F32, SCR, vpart, nullptr, &logits) ||
             b.slot("logits_all", TPG_F32, DEV, vocab, tail->logits, &logits_all)) {
    return 1;
  }
  if (b.slot("pf.cand", TPG_F32, DEV, 4, tail->cand, &cand) || b.slot("pf.step", TPG_F32, DEV, 4, tail->step, &step) ||
      b.slot("pf.done", TPG_F32, DEV, 4, tail->done, &done) ||
      b.slot("pf.out", TPG_F32, TPG_MEM_HOST, 4, tail->out, &out) ||
      b.slot("dec.x", TPG_BF16, DEV, H, tail->dec_x, &dec_x) ||
      b.slot("dec.pos", TPG_F32, DEV, 1, tail->dec_pos, &dec_pos))
    return 1;
  p->lm.rank = &r;
  p->lm.batch = 1;
  p->lm.hidden = H;
  p->lm.vocab_part = vpart;
  const tpg_view views[3] = {{sl.h, 0, (uint64_t)(M - 1) * H}, {lm_w, 0, 0}, {logits, 0, 0}};
  const size_t counts[3] = {(size_t)H, (size_t)vpart * H, (size_t)vpart};
  tpg_captured_desc cd = TPG_CAPTURED_DESC_INIT;
  cd.fn = lm_head_capture;
  cd.user = &p->lm;
  cd.views = views;
  cd.counts = counts;
  cd.nviews = 3;
  tpg_node n;
  LLAMA_TRY(tpg_plan_add_captured(p->plan, &cd, b.dep(), b.ndep(), &n));
  LLAMA_TRY(tpg_plan_set_node_name(p->plan, n, "lm_head"));
  b.chain(n);
  if (R > 1) {  // one row: rank-major [R][V/R] is [V] in vocab order
    tpg_collective_desc g = TPG_COLLECTIVE_DESC_INIT;
    g.kind = TPG_ALL_GATHER;
    g.send = tpg_view{logits, 0, 0};
    g.recv = tpg_view{logits_all, 0, 0};
    g.count = (size_t)vpart;
    LLAMA_TRY(tpg_plan_add_collective(p->plan, &g, b.dep(), b.ndep(), &n));
    LLAMA_TRY(tpg_plan_set_node_name(p->plan, n, "logits.allgather"));
    b.chain(n);
  }
  // Every rank takes the argmax of the whole gathered row, so all pick the
  // same token (ties: the lowest id, as the decode loops), with no
  // collective of its own.
  const int one = 1, zero = 0, ncand = 4, end = tail->end_token;
  const tpg_module *dm = tail->decode_module;
  return b.kernel("llama_argmax_part", "pf.argmax", 1, 1, 1, 1024,
                  {tpg_arg_view(cand, 0), tpg_arg_view(logits_all, 0), TPG_ARG_VALUE(vocab), TPG_ARG_VALUE(zero),
                   TPG_ARG_VALUE(one), TPG_ARG_VALUE(ncand)},
                  r, dm, false) ||
         b.kernel("llama_decode_pick", "pf.pick", 1, 1, 1, 256,
                  {tpg_arg_view(cand, 0), TPG_ARG_VALUE(one), tpg_arg_view(out, 0), tpg_arg_view(step, 0),
                   tpg_arg_view(dec_pos, 0), tpg_arg_view(done, 0), TPG_ARG_VALUE(end), tpg_arg_view(dec_x, 0),
                   tpg_arg_view(sl.emb, 0), TPG_ARG_VALUE(H)},
                  r, dm, false);
}

}  // namespace

int build_prefill(const Config &c, const Rank &r, const Weights &w, const Caches &k, int rows, const void *emb,
                  const int *ids, const int *pos, const PrefillTail *tail, Prefill *p, std::string *err) {
  const int M = rows, D = c.head_dim, nq = q_heads(c, r), nkv = kv_heads(c, r), G = nq / nkv;
  if (c.batch != 1) {
    *err = "prefill: one sequence (batch 1), got batch " + std::to_string(c.batch);
    return 1;
  }
  if (M < 1 || M > c.max_ctx) {
    *err = "prefill: rows " + std::to_string(M) + " outside 1.." + std::to_string(c.max_ctx);
    return 1;
  }
  if ((D != LLAMA_HEAD_DIM && D != LLAMA_HEAD_DIM_SMALL) || G < 1 || G > LLAMA_ATTN_MAX_GROUP) {
    *err = "prefill: head_dim " + std::to_string(D) + ", heads/kv_heads " + std::to_string(G) +
           ": head_dim must be 128 or 64 and heads/kv_heads 1..16";
    return 1;
  }
  if (tail && (!tail->decode_module && !r.stub_function)) {
    *err = "prefill: the last chunk needs the decode kernels' module";
    return 1;
  }
  p->rows = M;
  p->last = tail != nullptr;
  LLAMA_TRY(tpg_plan_create(&p->plan));
  PlanBuilder b{p->plan, &p->bindings, err};
  PrefillSlots sl;
  if (prefill_slots(c, r, w, k, M, emb, ids, pos, b, sl)) return 1;
  p->ids = sl.ids;
  p->pos = sl.pos;
  if (prefill_layers(c, r, w, M, b, sl) || (tail && prefill_tail(c, r, w, M, tail, p, b, sl, err))) return 1;
  LLAMA_TRY(tpg_plan_validate(p->plan));
  return 0;
}

int create_prefill_graph(const Rank &r, Prefill *p, std::string *err) {
  tpg_graph_config cfg = TPG_GRAPH_CONFIG_INIT;
  cfg.device = r.device;
  cfg.comm = r.comm;
  cfg.bindings = p->bindings.data();
  cfg.nbindings = (int)p->bindings.size();
  if (r.pdl) cfg.flags |= TPG_GRAPH_PDL;
  LLAMA_TRY(tpg_graph_create(p->plan, &cfg, &p->graph));
  return 0;
}

int bind_chunk(Prefill *p, const int *ids, const int *pos_table, int p0, std::string *err) {
  const tpg_binding nb[2] = {{p->ids, const_cast<int *>(ids + p0)}, {p->pos, const_cast<int *>(pos_table + p0)}};
  LLAMA_TRY(tpg_graph_rebind(p->graph, nb, 2));
  return 0;
}

void free_prefill(Prefill *p) {
  if (p->graph) tpg_graph_destroy(p->graph);
  tpg_plan_destroy(p->plan);
  *p = Prefill();
}

}  // namespace llama
