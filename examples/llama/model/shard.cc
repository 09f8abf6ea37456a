// shard.cc - the engine's tensor-parallel layout as data: for one rank, which
// rows and columns of which whole (unsplit) tensor go where in its weight
// buffers (docs/llama.md, "The graph of one rank"). It is a table rather than
// code that copies so that every source (raw files, the seeded generator, a
// Hugging Face checkpoint) and the CPU test share one statement of it.
//   wqkv: this rank's query heads' rows of wq, then its KV heads' rows of wk
//         and of wv (the fused QKV linear is COLUMN-parallel over heads);
//   wo:   the columns of this rank's query heads (ROW-parallel);
//   w13:  this rank's slice of w_gate's rows, then the same slice of w_up's
//         (TPG_ACT_SWIGLU wants gate rows, then up rows);
//   w2:   the same slice of w_down's columns (ROW-parallel);
//   bqkv: with Config::qkv_bias, the biases of wqkv's rows (the same slices
//         of bq, bk, bv: the QKV GEMM adds them in its epilogue);
//   lm_head: this rank's vocab rows (vocab-parallel); norms whole on every rank.
#include "examples/llama/llama.h"

namespace llama {

size_t weight_buf_elems(const Config &c, const Rank &r, WeightBuf b) {
  const size_t H = c.hidden, D = c.head_dim, nq = q_heads(c, r), nkv = kv_heads(c, r), F = c.ffn / r.nranks;
  switch (b) {
    case WB_ATTN_NORM:
    case WB_MLP_NORM:
    case WB_FINAL_NORM: return H;
    case WB_QKV: return (nq + 2 * nkv) * D * H;
    case WB_O: return H * nq * D;
    case WB_13: return 2 * F * H;
    case WB_2: return H * F;
    case WB_LM_HEAD: return c.vocab > 0 ? (size_t)(c.vocab / r.nranks) * H : 0;
    case WB_QKV_BIAS: return c.qkv_bias ? (nq + 2 * nkv) * D : 0;
  }
  return 0;
}

std::vector<ShardPiece> shard_pieces(const Config &c, const Rank &r) {
  const size_t H = c.hidden, D = c.head_dim, nq = q_heads(c, r), nkv = kv_heads(c, r);
  const size_t F = c.ffn / r.nranks, qdim = (size_t)c.heads * D, kvdim = (size_t)c.kv_heads * D;
  const size_t r0q = r.rank * nq * D, r0kv = r.rank * nkv * D, r0f = r.rank * F;
  std::vector<ShardPiece> v;
  // Whole rows [row0, row0 + rows) of a [rows_all, cols] tensor at offset off of a buffer of pitch cols.
  auto rows = [&](const std::string &name, size_t rows_all, size_t cols, size_t row0, size_t n, int layer,
                  WeightBuf b, size_t off) { v.push_back({name, rows_all, cols, row0, n, 0, cols, layer, b, off, cols}); };
  // Columns [col0, col0 + n) of every row of a [rows_all, cols_all] tensor.
  auto cols = [&](const std::string &name, size_t rows_all, size_t cols_all, size_t col0, size_t n, int layer,
                  WeightBuf b) { v.push_back({name, rows_all, cols_all, 0, rows_all, col0, n, layer, b, 0, n}); };
  for (int i = 0; i < c.layers; i++) {
    const std::string p = "l" + std::to_string(i) + ".";
    rows(p + "attn_norm", 1, H, 0, 1, i, WB_ATTN_NORM, 0);
    rows(p + "mlp_norm", 1, H, 0, 1, i, WB_MLP_NORM, 0);
    rows(p + "wq", qdim, H, r0q, nq * D, i, WB_QKV, 0);
    rows(p + "wk", kvdim, H, r0kv, nkv * D, i, WB_QKV, nq * D * H);
    rows(p + "wv", kvdim, H, r0kv, nkv * D, i, WB_QKV, (nq + nkv) * D * H);
    cols(p + "wo", H, qdim, r0q, nq * D, i, WB_O);
    rows(p + "w_gate", c.ffn, H, r0f, F, i, WB_13, 0);
    rows(p + "w_up", c.ffn, H, r0f, F, i, WB_13, F * H);
    cols(p + "w_down", H, c.ffn, r0f, F, i, WB_2);
    if (c.qkv_bias) {  // 1-D [qdim] / [kvdim]: a slice of the one row
      v.push_back({p + "bq", 1, qdim, 0, 1, r0q, nq * D, i, WB_QKV_BIAS, 0, nq * D});
      v.push_back({p + "bk", 1, kvdim, 0, 1, r0kv, nkv * D, i, WB_QKV_BIAS, nq * D, nkv * D});
      v.push_back({p + "bv", 1, kvdim, 0, 1, r0kv, nkv * D, i, WB_QKV_BIAS, (nq + nkv) * D, nkv * D});
    }
  }
  rows("final_norm", 1, H, 0, 1, -1, WB_FINAL_NORM, 0);
  if (c.vocab > 0) {
    const size_t V = c.vocab / r.nranks;
    rows("lm_head", c.vocab, H, r.rank * V, V, -1, WB_LM_HEAD, 0);
  }
  return v;
}

}  // namespace llama
