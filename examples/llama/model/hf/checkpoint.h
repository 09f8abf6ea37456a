// checkpoint.h - a Hugging Face model directory as the engine's tensor source.
//
// Opens config.json (model/hf/config.h) and the safetensors files (safetensors.h),
// checks every tensor the engine will read before any is read (present,
// dtype BF16/F16/F32, the shape the config implies) and that the checkpoint
// holds no other (a bias the config did not announce, Qwen3's q_norm, a
// layer beyond num_hidden_layers: each a model the engine would run
// differently; docs/llama.md lists the two kinds tolerated unused), and
// then serves them by the engine's names (TensorReader, llama.h), so that
// weights.cc shards a checkpoint exactly as it shards its own files:
//   l{i}.attn_norm  model.layers.{i}.input_layernorm.weight           [hidden]
//   l{i}.mlp_norm   model.layers.{i}.post_attention_layernorm.weight  [hidden]
//   l{i}.wq/wk/wv   model.layers.{i}.self_attn.{q,k,v}_proj.weight    [heads|kv_heads x 128, hidden]
//   l{i}.wo         model.layers.{i}.self_attn.o_proj.weight          [hidden, heads x 128]
//   l{i}.w_gate/w_up model.layers.{i}.mlp.{gate,up}_proj.weight       [ffn, hidden]
//   l{i}.w_down     model.layers.{i}.mlp.down_proj.weight             [hidden, ffn]
//   final_norm      model.norm.weight                                 [hidden]
//   embed           model.embed_tokens.weight                         [vocab, hidden]
//   lm_head         lm_head.weight, or with tie_word_embeddings model.embed_tokens.weight
//   l{i}.bq/bk/bv   model.layers.{i}.self_attn.{q,k,v}_proj.bias      [heads|kv_heads x 128] (Qwen2)
// Reads go straight from the mapped files into the caller's buffer, block
// by block: a rank touches only the rows and columns of its shard.
#ifndef LLAMA_MODEL_HF_MODEL_H
#define LLAMA_MODEL_HF_MODEL_H

#include <set>
#include <string>

#include "examples/llama/llama.h"
#include "examples/llama/model/hf/config.h"
#include "examples/llama/model/hf/safetensors.h"

namespace llama {

class HfModel : public TensorReader {
 public:
  // Reads and checks DIR for --tp tp and contexts up to max_ctx positions;
  // on success *c holds the model (Config's model fields and rope_inv_freq).
  // 0 on success; otherwise *err names the field and value, or the tensor
  // and its shape.
  int open(const std::string &dir, int tp, int max_ctx, Config *c, std::string *err);
  int read(const std::string &name, size_t whole_rows, size_t whole_cols, size_t row0, size_t rows, size_t col0,
           size_t cols, uint16_t *dst, size_t dst_pitch, std::string *err) const override;
  // The checkpoint's name of an engine tensor; empty for an unknown name.
  std::string hf_name(const std::string &engine_name) const;
  const HfConfig &config() const { return h_; }

 private:
  int unexpected_tensors(const std::set<std::string> &used, int layers, std::string *err) const;
  HfConfig h_;
  Checkpoint ck_;
};

}  // namespace llama

#endif
