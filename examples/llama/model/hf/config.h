// config.h - a Hugging Face config.json, and whether this engine runs it.
//
// Two steps, kept apart so that a message can say which went wrong:
// read_hf_config reads the fields of the three families the engine knows
// (LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM) with
// transformers' defaults for absent ones, and refuses a field of the wrong
// type; hf_engine_config then refuses what the engine cannot run, naming
// the field and its value ("config.json: head_dim 64: this engine supports
// 128"), and fills the engine's Config. Both the transformers 4.x layout
// (rope_theta, rope_scaling) and 5.x's (rope_parameters) are read.
#ifndef LLAMA_MODEL_HF_CONFIG_H
#define LLAMA_MODEL_HF_CONFIG_H

#include <string>
#include <vector>

#include "examples/llama/llama.h"
#include "examples/llama/model/rope.h"

namespace llama {

struct HfConfig {
  std::string path;  // config.json's path, the prefix of every message
  std::string arch;  // architectures[0], or derived from model_type
  int hidden = 0, heads = 0, kv_heads = 0, head_dim = 0, ffn = 0, layers = 0, vocab = 0, max_pos = 0;
  bool head_dim_given = false;  // false: head_dim = hidden_size / num_attention_heads
  double eps = 1e-6, theta = 10000.0, partial_rotary = 1.0;
  // RoPE: "default" or a scaling type; rope_field names where it was read
  // ("rope_scaling.rope_type", "rope_parameters.rope_type", ...).
  std::string rope_type = "default", rope_field;
  double rope_factor = 0, rope_low = 0, rope_high = 0, rope_orig_max = 0;  // llama3's parameters
  std::string act = "silu";
  bool tie = false;
  bool attention_bias = false, mlp_bias = false;  // Llama's flags
  bool qkv_bias = false;                          // Qwen2: its q/k/v projections always have biases
  long sliding_window = 0;                        // 0: attention sees the whole context
  std::string sliding_field;                      // which field set it
  std::string quantization;                       // quantization_config.quant_method, when present
};

// Reads DIR/config.json. 0 on success; else *err names the file and field.
int read_hf_config(const std::string &dir, HfConfig *h, std::string *err);

// What this engine runs, for --tp tp and contexts up to max_ctx positions;
// on success c's model fields (hidden .. theta, rope_inv_freq) are set.
int hf_engine_config(const HfConfig &h, int tp, int max_ctx, Config *c, std::string *err);

}  // namespace llama

#endif
