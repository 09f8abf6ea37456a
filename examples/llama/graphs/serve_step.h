// serve_step.h - the serving step: one launch runs T rows, each one token of
// one of many sequences (decode rows, then prompt chunks, then padding), over
// the paged KV cache, and samples the next token of the sequences that need
// one. One plan per step size T, built into a graph set (graph_set.h): every
// size binds the same buffers (ServeBuffers) and shares one arena (scratch and GEMM workspaces),
// so a size costs little more than its GEMM workspaces and its exec.
//
// Per step (R ranks; nq, nkv as the decode step's; kernels.h, "The serving
// step", has the row layout and the per-step inputs):
//   in  <- in_host                  memcpy node: ids, positions, sequences,
//                                   prefill work items, sampled rows (pinned
//                                   host -> device; the host writes them
//                                   before each launch: nothing is rebound)
//   x = emb[ids]                    llama_embed
//   h = RMSNorm(x) * attn_norm[0]   llama_rmsnorm
//   per layer, the decode step's sharding and linears (graphs/layer.h):
//     qkv  = h Wqkv_r^T             COLUMN linear, T rows
//     attn                          llama_paged_attn_g<G>: decode rows' RoPE +
//                                   append + attention; prefill rows' RoPE + append
//     attn                          llama_paged_prefill_g<G>: prefill rows
//     o, gate_up, down              as the decode step (residual + RMSNorm in
//                                   the all-reduces' epilogues)
//   lm_in = h[sample]               llama_gather_rows: L = min(T, max_seqs) rows
//   logits_r = lm_in Wlm_r^T        tpgraph's GEMM, fp32 out (pinned with the
//                                   other GEMMs under --batch-invariant)
//   greedy argmax across ranks      llama_argmax_part (+ a one-shot all-reduce
//                                   of the candidates at R > 1), llama_serve_pick:
//                                   the tokens to pinned host memory
#ifndef LLAMA_GRAPHS_SERVE_STEP_H
#define LLAMA_GRAPHS_SERVE_STEP_H

#include <string>
#include <vector>

#include "examples/llama/llama.h"

namespace llama {

// What every graph of a set shares.
struct ServeShape {
  int max_rows = 512;      // T of the largest step
  int max_seqs = 256;      // sequences in flight at once: block-table rows, decode rows, sampled rows
  int max_prompts = 16;    // prompts that may share one step's prefill rows
  int max_ctx = 8192;      // positions a sequence may reach (prompt + new tokens)
  int nblocks = 0;         // blocks of LLAMA_KV_BLOCK positions in each layer's pool
  int split_len = 0;       // decode attention's split in keys (0: LLAMA_PAGED_SPLIT)
  int max_blocks() const;  // blocks a sequence may hold: ceil(max_ctx / LLAMA_KV_BLOCK)
  int nsplit() const;      // splits of the longest context
};

// Where each per-step input lives in the int32 input buffer of a graph of T
// rows (offsets in elements, each 16-byte aligned): kernels.h's meta, ids,
// pos, seq, work (W items) and sample (L rows: the rows the LM head reads).
struct StepLayout {
  int T = 0, W = 0, L = 0;
  int meta = 0, ids = 0, pos = 0, seq = 0, work = 0, sample = 0, total = 0;
};
// G: the GQA group (a prefill work item holds LLAMA_PREFILL_POSITIONS(G) rows).
StepLayout step_layout(const ServeShape &sh, int T, int G);

// What the graphs of a set bind (owned; device memory unless said
// otherwise). The activations are tpgraph scratch: a graph set lays every
// size's out in one arena, as large as the largest size needs.
struct ServeBuffers {
  int *in_host = nullptr;             // pinned: the step's inputs, step_layout(max_rows)
  int *tables = nullptr;              // [max_seqs, max_blocks] block tables (the scheduler keeps the host's copy)
  std::vector<void *> k_pool, v_pool; // per layer [nblocks, nkv, LLAMA_KV_BLOCK, D]
  void *emb = nullptr;                // [vocab, hidden] the token embedding (filled by the caller)
  unsigned *counters = nullptr;       // [max_seqs * nkv] the decode splits' counters: zero, and left zero
  int *out = nullptr;                 // pinned, mapped: [max_seqs] the sampled tokens
  int ncand = 0;                      // the candidates' length (scratch)
  size_t bytes = 0;                   // device memory above, pools included
  size_t pool_bytes = 0;              // the pools alone
};
int alloc_serve(const Config &c, const Rank &r, const ServeShape &sh, ServeBuffers *b, std::string *err);
void free_serve(ServeBuffers *b);

// The step's plan for T rows (1 <= T <= sh.max_rows) over b (*plan: owned
// by the caller), and the buffers for its slots (appended to *bind). c.vocab
// > 0 and w.lm_head are required. On failure *plan is null and *err says
// why. The graph is made by the caller (graph_set.h).
int build_serve_step(const Config &c, const Rank &r, const Weights &w, const ServeShape &sh, const ServeBuffers &b,
                     int T, tpg_plan **plan, std::vector<tpg_binding> *bind, std::string *err);

// The GEMMs of build_serve_step's plan at T rows (for pinning their kernels:
// graphs/gemm_pin.h): {m, n, k, epilogue} each, in plan order.
struct GemmShape {
  int m, n, k;
  tpg_epilogue epilogue;
};
std::vector<GemmShape> serve_step_gemms(const Config &c, const Rank &r, const Weights &w, const ServeShape &sh, int T);

}  // namespace llama

#endif
