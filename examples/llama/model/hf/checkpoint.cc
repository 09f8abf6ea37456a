// checkpoint.cc - model/hf/checkpoint.h: the name map, the checks at open, reads.
#include "examples/llama/model/hf/checkpoint.h"

#include <cstdlib>
#include <set>

#include "examples/llama/model/input_file.h"

namespace llama {
namespace {

// "l12.wq" -> (12, "wq"); false for a name without a layer.
bool split_layer(const std::string &n, int *layer, std::string *kind) {
  if (n.size() < 3 || n[0] != 'l') return false;
  const size_t dot = n.find('.');
  if (dot == std::string::npos || dot == 1) return false;
  for (size_t i = 1; i < dot; i++)
    if (n[i] < '0' || n[i] > '9') return false;
  *layer = std::atoi(n.c_str() + 1);
  *kind = n.substr(dot + 1);
  return true;
}

// "model.layers.12.mlp.up_proj.weight" -> (12, "mlp.up_proj.weight").
bool hf_layer(const std::string &n, int *layer, std::string *rest) {
  static const std::string p = "model.layers.";
  if (n.compare(0, p.size(), p) != 0) return false;
  size_t i = p.size(), v = 0;
  while (i < n.size() && n[i] >= '0' && n[i] <= '9' && i - p.size() < 9) v = v * 10 + (size_t)(n[i++] - '0');
  if (i == p.size() || i >= n.size() || n[i] != '.') return false;
  *layer = (int)v;
  *rest = n.substr(i + 1);
  return true;
}

}  // namespace

std::string HfModel::hf_name(const std::string &e) const {
  if (e == "final_norm") return "model.norm.weight";
  if (e == "embed") return "model.embed_tokens.weight";
  if (e == "lm_head") return h_.tie ? "model.embed_tokens.weight" : "lm_head.weight";
  int i;
  std::string k;
  if (!split_layer(e, &i, &k)) return "";
  const std::string l = "model.layers." + std::to_string(i) + ".";
  if (k == "attn_norm") return l + "input_layernorm.weight";
  if (k == "mlp_norm") return l + "post_attention_layernorm.weight";
  if (k == "wq") return l + "self_attn.q_proj.weight";
  if (k == "wk") return l + "self_attn.k_proj.weight";
  if (k == "wv") return l + "self_attn.v_proj.weight";
  if (k == "wo") return l + "self_attn.o_proj.weight";
  if (k == "w_gate") return l + "mlp.gate_proj.weight";
  if (k == "w_up") return l + "mlp.up_proj.weight";
  if (k == "w_down") return l + "mlp.down_proj.weight";
  if (k == "bq") return l + "self_attn.q_proj.bias";
  if (k == "bk") return l + "self_attn.k_proj.bias";
  if (k == "bv") return l + "self_attn.v_proj.bias";
  return "";
}

int HfModel::open(const std::string &dir, int tp, int max_ctx, Config *c, std::string *err) {
  if (read_hf_config(dir, &h_, err) || hf_engine_config(h_, tp, max_ctx, c, err) || ck_.open(dir, err)) return 1;
  // Every tensor the engine reads, with the shape the config implies
  // (shard_pieces at one rank lists them whole), and the embedding.
  Rank one;
  std::vector<std::pair<std::string, std::vector<int64_t>>> want;
  for (const ShardPiece &p : shard_pieces(*c, one)) {
    std::vector<int64_t> shape{(int64_t)p.whole_rows, (int64_t)p.whole_cols};
    if (p.whole_rows == 1) shape.erase(shape.begin());  // the norms are 1-D
    want.emplace_back(p.name, shape);
  }
  want.emplace_back("embed", std::vector<int64_t>{c->vocab, c->hidden});
  for (const auto &w : want) {
    const std::string n = hf_name(w.first);
    const TensorInfo *t = ck_.find(n);
    if (!t) {
      *err = dir + ": missing tensor " + n + " " + shape_string(w.second) +
             (w.first == "lm_head" ? " (tie_word_embeddings is false)" : "");
      return 1;
    }
    if (t->shape != w.second) {
      *err = *t->file + ": tensor " + n + ": shape " + shape_string(t->shape) + ", expected " +
             shape_string(w.second) + " from config.json";
      return 1;
    }
    if (t->dtype != "BF16" && t->dtype != "F16" && t->dtype != "F32") {
      *err = *t->file + ": tensor " + n + ": dtype " + t->dtype + ": supported BF16, F16, F32";
      return 1;
    }
  }
  std::set<std::string> used;
  for (const auto &w : want) used.insert(hf_name(w.first));
  return unexpected_tensors(used, c->layers, err);
}

// A tensor the engine does not read means a model it would run differently
// (Qwen3's q_norm and k_norm, an o_proj bias, layers beyond the config's):
// refused by name, but for the two kinds a family carries unused
// (docs/llama.md, "Tensors a checkpoint may carry unused").
int HfModel::unexpected_tensors(const std::set<std::string> &used, int layers, std::string *err) const {
  for (const auto &e : ck_.tensors()) {
    const std::string &n = e.first;
    if (used.count(n)) continue;
    int layer = -1;
    std::string rest;
    const bool in_layer = hf_layer(n, &layer, &rest);
    // transformers recomputes RoPE's table from config.json (older versions saved it), and
    // with tied embeddings it ties lm_head to the embedding, dropping a stored lm_head.weight.
    if ((in_layer && layer < layers && rest == "self_attn.rotary_emb.inv_freq") || (h_.tie && n == "lm_head.weight"))
      continue;
    const TensorInfo &t = *e.second;
    const std::string at = *t.file + ": tensor " + printable(n) + " " + shape_string(t.shape) + ": ";
    if (in_layer && layer >= layers)
      *err = at + "layer " + std::to_string(layer) + ", but num_hidden_layers is " + std::to_string(layers);
    else if (n.size() > 5 && n.compare(n.size() - 5, 5, ".bias") == 0)
      *err = at + "biases are not supported yet";
    else
      *err = at + "not a tensor this engine reads for " + printable(h_.arch) +
             " (a model it would run differently is refused)";
    return 1;
  }
  return 0;
}

int HfModel::read(const std::string &name, size_t whole_rows, size_t whole_cols, size_t row0, size_t rows,
                  size_t col0, size_t cols, uint16_t *dst, size_t dst_pitch, std::string *err) const {
  const std::string n = hf_name(name);
  const TensorInfo *t = n.empty() ? nullptr : ck_.find(n);
  if (!t) {
    *err = ck_.dir() + ": no tensor for the engine's " + name + (n.empty() ? "" : " (" + n + ")");
    return 1;
  }
  // open() checked the shapes; a caller asking for another one is the engine's bug.
  const std::vector<int64_t> want = whole_rows == 1 && t->shape.size() == 1
                                        ? std::vector<int64_t>{(int64_t)whole_cols}
                                        : std::vector<int64_t>{(int64_t)whole_rows, (int64_t)whole_cols};
  if (t->shape != want) {
    *err = *t->file + ": tensor " + n + ": shape " + shape_string(t->shape) + ", the engine asked for " +
           shape_string(want);
    return 1;
  }
  return ck_.read_bf16(n, row0, rows, col0, cols, dst, dst_pitch, err);
}

}  // namespace llama
