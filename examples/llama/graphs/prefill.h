// prefill.h - the prompt of one sequence as graphs of M rows (llama --model's
// prefill), before decode.h's loops take over.
//
// The prompt of P tokens is cut into chunks of at most `chunk` rows
// (prefill_chunks). Each chunk is one launch of a graph built for exactly
// its row count, so at most two graphs: one of `chunk` rows for every chunk
// but the last, and the last chunk's own, which also ends the prompt (the
// final norm's row P-1 through the LM head, greedy argmax, the first new
// token handed to the decode step). A graph serves every chunk of its size:
// the chunk's token ids and first position are read from device memory
// through two slots ("ids", "pos") that bind_chunk rebinds before each
// launch (tpg_graph_rebind: a kernel-node update, no re-instantiation).
//
// Per chunk (M rows at positions p0 .. p0+M-1; R ranks; nq, nkv as the step's):
//   x = emb[ids]                    llama_embed            (engine kernel)
//   h = RMSNorm(x) * attn_norm[0]   llama_rmsnorm
//   per layer, with the decode step's sharding:
//     qkv = h Wqkv_r^T              COLUMN linear, M tokens (tpgraph's GEMM)
//     q, caches[p0..] <- RoPE(qkv)  llama_prefill_rope
//     attn = causal attention       llama_prefill_attn_g<G> (row i: keys 0..p0+i)
//     part = attn Wo_r^T; all-reduce(part), epilogue x += sum, h2 = RMSNorm(x) * mlp_norm
//     act = silu(h2 Wg_r^T) * (h2 Wu_r^T); part = act W2_r^T
//     all-reduce(part), epilogue x += sum, h = RMSNorm(x) * (next attn_norm | final_norm)
//   last chunk only:
//     logits_r = h[M-1] Wlm_r^T     cuBLAS, captured (one row)
//     logits = all-gather           (R > 1; [V] in vocab order, since one row)
//     llama_argmax_part, llama_decode_pick (kernels/loop.cu): the token to
//     pinned host memory, the decode step's x = emb[token], its position + 1
#ifndef LLAMA_PREFILL_H
#define LLAMA_PREFILL_H

#include <string>
#include <vector>

#include "examples/llama/llama.h"

namespace llama {

struct PrefillChunk {
  int p0, rows;
};
// [0, chunk), [chunk, 2 chunk), ...: ceil(P / chunk) chunks, the last one
// holding the rest (1..chunk rows). Empty for P < 1 or chunk < 1.
std::vector<PrefillChunk> prefill_chunks(int P, int chunk);

// What the last chunk's graph reads and writes besides the model: borrowed
// buffers, all device memory except out.
struct PrefillTail {
  const tpg_module *decode_module = nullptr;  // kernels/loop.cu (llama_argmax_part, llama_decode_pick)
  float *logits = nullptr;  // [vocab] fp32: the last prompt row's logits, every rank's slice (vocab order)
  float *cand = nullptr;    // [4]: (value, token) of the best logit
  int *step = nullptr;      // [4], zero: pick writes out[step[0]]
  int *done = nullptr;      // [4]: pick marks the end token there (the host decides on its own)
  int *out = nullptr;       // pinned [4]: out[0] = the first new token
  void *dec_x = nullptr;    // the decode step's x [1, hidden]: set to emb[token]
  int *dec_pos = nullptr;   // the decode step's position [1]: + 1 (the caller sets it to P - 1 first)
  int end_token = -1;
};

// One graph of `rows` rows.
struct Prefill {
  int rows = 0;
  bool last = false;
  tpg_plan *plan = nullptr;
  tpg_graph *graph = nullptr;
  std::vector<tpg_binding> bindings;
  tpg_slot ids = 0, pos = 0;
  LmHead lm{};
};

// The plan of one chunk size. emb: the token embedding [vocab, hidden]
// (device, whole on every rank); ids, pos: where the first chunk's ids and
// first position are (device; bind_chunk moves them); tail: null unless
// this is the last chunk's graph. c.batch must be 1; k the sequence's
// caches. The graph is made by create_prefill_graph (collective over the
// ranks at TP > 1).
int build_prefill(const Config &c, const Rank &r, const Weights &w, const Caches &k, int rows, const void *emb,
                  const int *ids, const int *pos, const PrefillTail *tail, Prefill *p, std::string *err);
int create_prefill_graph(const Rank &r, Prefill *p, std::string *err);
// Points the graph at the chunk starting at position p0: ids + p0 and
// pos_table + p0, where pos_table[i] = i (both device, 16-byte aligned at
// p0: p0 is a multiple of the chunk size, a multiple of 4).
int bind_chunk(Prefill *p, const int *ids, const int *pos_table, int p0, std::string *err);
void free_prefill(Prefill *p);

}  // namespace llama

#endif
