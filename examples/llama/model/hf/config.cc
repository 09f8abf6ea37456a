// config.cc - model/hf/config.h: config.json's fields, then the engine's limits.
//
// Absent fields take transformers' defaults (so a config that transformers
// accepts means the same here); a present field of the wrong type is an
// error, never a default. The limits are the engine's today: head_dim 128
// or 64, GQA groups 1..16 (kernels.h), no biases but Qwen2's q/k/v
// ones (the QKV GEMM's bias epilogue), RoPE unscaled or
// Llama 3.1's "llama3" scaling, full attention over the whole context.
#include "examples/llama/model/hf/config.h"

#include <cfloat>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "examples/llama/kernels/kernels.h"
#include "examples/llama/model/hf/json.h"
#include "examples/llama/model/input_file.h"
#include "examples/llama/model/limits.h"

namespace llama {
namespace {

// The shortest text that reads back as v ("1e-300", "0.1").
std::string num_string(double v) {
  char b[32];
  for (int digits = 1; digits <= 17; digits++) {
    std::snprintf(b, sizeof b, "%.*g", digits, v);
    if (std::strtod(b, nullptr) == v) break;
  }
  return b;
}

// Typed field access for messages of one shape: "PATH: FIELD: expected ..., got ...".
struct Fields {
  const Json &j;
  const std::string &path;
  std::string *err;

  bool bad(const std::string &field, const char *want, const Json &v) {
    *err = path + ": " + field + ": expected " + want + ", got " + v.kind_name();
    return false;
  }
  // Absent or null leaves *out as it is (the default), unless required.
  const Json *field(const Json &obj, const char *key, bool required, const std::string &name) {
    const Json *v = obj.get(key);
    if ((!v || v->kind == Json::NUL) && required) {
      *err = path + ": " + name + ": missing";
      return nullptr;
    }
    return v && v->kind != Json::NUL ? v : nullptr;
  }
  // An integer literal (not 32.0: transformers would keep a float) in
  // [lo, hi]; the bounds are the engine's (limits.h) where it sizes from it.
  bool integer(const Json &obj, const char *key, int *out, int lo, int hi, bool required = false,
               const std::string &prefix = "") {
    const std::string name = prefix + key;
    const Json *v = field(obj, key, required, name);
    if (!v) return !required;
    if (v->kind != Json::NUMBER || !v->integer) return bad(name, "an integer", *v);
    if (!(v->number >= lo && v->number <= hi)) {
      *err = path + ": " + name + " " + num_string(v->number) + ": expected " + std::to_string(lo) + ".." +
             std::to_string(hi) + (hi < INT_MAX ? " (the largest model this engine runs)" : "");
      return false;
    }
    *out = (int)v->number;
    return true;
  }
  bool number(const Json &obj, const char *key, double *out, bool required = false, const std::string &prefix = "") {
    const std::string name = prefix + key;
    const Json *v = field(obj, key, required, name);
    if (!v) return !required;
    if (v->kind != Json::NUMBER) return bad(name, "a number", *v);
    *out = v->number;
    return true;
  }
  bool boolean(const Json &obj, const char *key, bool *out) {
    const Json *v = field(obj, key, false, key);
    if (!v) return true;
    if (v->kind != Json::BOOL) return bad(key, "true or false", *v);
    *out = v->boolean;
    return true;
  }
  bool string(const Json &obj, const char *key, std::string *out, const std::string &prefix = "") {
    const Json *v = field(obj, key, false, prefix + key);
    if (!v) return true;
    if (v->kind != Json::STRING) return bad(prefix + key, "a string", *v);
    *out = v->string;
    return true;
  }
};

// The RoPE fields: transformers 5 writes one "rope_parameters" object
// (rope_type, rope_theta, factor, ...); 4.x wrote "rope_theta" at the top and
// "rope_scaling" (null, or its type under "rope_type" or the older "type").
// As in transformers, a non-null rope_scaling wins, and the object's own
// rope_theta over the top-level one.
bool read_rope(Fields &f, HfConfig *h) {
  const Json &j = f.j;
  if (!f.number(j, "rope_theta", &h->theta) || !f.number(j, "partial_rotary_factor", &h->partial_rotary)) return false;
  const Json *rs = j.get("rope_scaling"), *rp = j.get("rope_parameters");
  const Json *r = nullptr;
  std::string name;
  if (rs && rs->kind != Json::NUL) r = rs, name = "rope_scaling";
  else if (rp && rp->kind != Json::NUL) r = rp, name = "rope_parameters";
  if (!r) return true;
  if (r->kind != Json::OBJECT) return f.bad(name, "an object or null", *r);
  if (!r->get("rope_type") && !r->get("type") && !r->get("rope_theta")) {
    *f.err = f.path + ": " + name + ": RoPE per layer type (" + (r->members.empty() ? "empty" : r->members[0].first) +
             ", ...): not supported";
    return false;
  }
  const std::string p = name + ".";
  h->rope_field = p + (r->get("rope_type") ? "rope_type" : r->get("type") ? "type" : "rope_type");
  if (!f.string(*r, "type", &h->rope_type, p) || !f.string(*r, "rope_type", &h->rope_type, p) ||
      !f.number(*r, "rope_theta", &h->theta, false, p) ||
      !f.number(*r, "partial_rotary_factor", &h->partial_rotary, false, p))
    return false;
  if (h->rope_type == "llama3") {
    // transformers: the object's original_max_position_embeddings, else the
    // top-level one, else max_position_embeddings.
    h->rope_orig_max = h->max_pos;
    if (!f.number(j, "original_max_position_embeddings", &h->rope_orig_max) ||
        !f.number(*r, "factor", &h->rope_factor, true, p) ||
        !f.number(*r, "low_freq_factor", &h->rope_low, true, p) ||
        !f.number(*r, "high_freq_factor", &h->rope_high, true, p) ||
        !f.number(*r, "original_max_position_embeddings", &h->rope_orig_max, false, p))
      return false;
  }
  return true;
}

}  // namespace

int read_hf_config(const std::string &dir, HfConfig *h, std::string *err) {
  *h = HfConfig();
  h->path = dir + "/config.json";
  Json j;
  if (json_read_file(h->path, kMaxConfigJsonBytes, kMaxConfigJsonValues, &j, err)) return 1;
  if (j.kind != Json::OBJECT) {
    *err = h->path + ": expected an object, got " + j.kind_name();
    return 1;
  }
  Fields f{j, h->path, err};
  const Json *arch = j.get("architectures");
  std::string model_type;
  if (!f.string(j, "model_type", &model_type)) return 1;
  if (arch && arch->kind != Json::NUL) {
    if (arch->kind != Json::ARRAY || arch->items.empty() || arch->items[0].kind != Json::STRING) {
      *err = h->path + ": architectures: expected an array of strings";
      return 1;
    }
    h->arch = arch->items[0].string;
  } else if (model_type == "llama") h->arch = "LlamaForCausalLM";
  else if (model_type == "mistral") h->arch = "MistralForCausalLM";
  else if (model_type == "qwen2") h->arch = "Qwen2ForCausalLM";
  else h->arch = "model_type '" + model_type + "'";
  // Every count bounded before anything is sized from it (2^31 layers would
  // be 9 x 2^31 shard pieces before a tensor is looked at).
  if (!f.integer(j, "hidden_size", &h->hidden, 1, kMaxHidden, true) ||
      !f.integer(j, "num_attention_heads", &h->heads, 1, kMaxHeads, true) ||
      !f.integer(j, "intermediate_size", &h->ffn, 1, kMaxFfn, true) ||
      !f.integer(j, "num_hidden_layers", &h->layers, 1, kMaxLayers, true) ||
      !f.integer(j, "vocab_size", &h->vocab, 1, kMaxVocab, true) ||
      !f.integer(j, "max_position_embeddings", &h->max_pos, 1, kMaxPositions) ||
      !f.number(j, "rms_norm_eps", &h->eps) || !f.string(j, "hidden_act", &h->act) ||
      !f.boolean(j, "tie_word_embeddings", &h->tie))
    return 1;
  h->kv_heads = h->heads;  // transformers: absent means multi-head attention
  if (!f.integer(j, "num_key_value_heads", &h->kv_heads, 1, kMaxHeads)) return 1;
  h->head_dim_given = j.get("head_dim") && j.get("head_dim")->kind != Json::NUL;
  if (!f.integer(j, "head_dim", &h->head_dim, 1, kMaxHidden)) return 1;
  if (!h->head_dim_given) h->head_dim = h->hidden / h->heads;
  if (!read_rope(f, h)) return 1;
  if (h->arch == "LlamaForCausalLM") {
    if (!f.boolean(j, "attention_bias", &h->attention_bias) || !f.boolean(j, "mlp_bias", &h->mlp_bias)) return 1;
  } else if (h->arch == "MistralForCausalLM") {
    int w = 4096;  // MistralConfig's default when the field is absent; null turns it off
    const Json *sw = j.get("sliding_window");
    if (sw && sw->kind == Json::NUL) w = 0;
    else if (!f.integer(j, "sliding_window", &w, 0, kMaxPositions)) return 1;
    h->sliding_window = w;
    h->sliding_field = "sliding_window";
  } else if (h->arch == "Qwen2ForCausalLM") {
    h->qkv_bias = true;  // Qwen2Attention: q/k/v_proj are built with bias=True whatever the config says
    bool use = false;
    int w = 4096, from = 28;
    if (!f.boolean(j, "use_sliding_window", &use) || !f.integer(j, "sliding_window", &w, 0, kMaxPositions) ||
        !f.integer(j, "max_window_layers", &from, 0, INT_MAX))
      return 1;
    // Layers >= max_window_layers slide (or those layer_types names), and
    // only with use_sliding_window: transformers' Qwen2Config.
    bool any = false;
    const Json *lt = j.get("layer_types");
    if (lt && lt->kind == Json::ARRAY) {
      for (const Json &t : lt->items) any |= t.kind == Json::STRING && t.string == "sliding_attention";
    } else {
      any = from < h->layers;
    }
    if (use && any) {
      h->sliding_window = w;
      h->sliding_field = "sliding_window (use_sliding_window true)";
    }
  }
  const Json *q = j.get("quantization_config");
  if (q && q->kind != Json::NUL) {
    h->quantization = "?";
    if (!f.string(*q, "quant_method", &h->quantization, "quantization_config.")) return 1;
  }
  return 0;
}

int hf_engine_config(const HfConfig &h, int tp, int max_ctx, Config *c, std::string *err) {
  const std::string &p = h.path;
  auto refuse = [&](const std::string &what) {
    *err = p + ": " + what;
    return 1;
  };
  if (h.arch != "LlamaForCausalLM" && h.arch != "MistralForCausalLM" && h.arch != "Qwen2ForCausalLM")
    return refuse("architectures " + printable(h.arch) + ": supported: LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM");
  if (!h.quantization.empty())
    return refuse("quantization_config.quant_method '" + printable(h.quantization) + "': quantized weights are not supported");
  if (h.act != "silu") return refuse("hidden_act '" + printable(h.act) + "': supported: 'silu'");
  // Qwen2's q/k/v biases are the QKV GEMM's bias epilogue; Llama's
  // attention_bias also gives o_proj a bias, which the engine has no place for yet.
  if (h.attention_bias) return refuse("attention_bias true (o_proj.bias): not supported yet");
  if (h.mlp_bias) return refuse("mlp_bias true: not supported yet");
  if (h.head_dim != LLAMA_HEAD_DIM && h.head_dim != LLAMA_HEAD_DIM_SMALL) {
    const std::string how =
        h.head_dim_given ? "" : " (hidden_size " + std::to_string(h.hidden) + " / num_attention_heads " +
                                    std::to_string(h.heads) + ")";
    return refuse("head_dim " + std::to_string(h.head_dim) + how + ": this engine supports " +
                  std::to_string(LLAMA_HEAD_DIM_SMALL) + " and " + std::to_string(LLAMA_HEAD_DIM));
  }
  if (h.partial_rotary != 1.0)
    return refuse("partial_rotary_factor " + num_string(h.partial_rotary) + ": supported: 1");
  if (h.heads % h.kv_heads)
    return refuse("num_attention_heads " + std::to_string(h.heads) + " is not a multiple of num_key_value_heads " +
                  std::to_string(h.kv_heads));
  const int g = h.heads / h.kv_heads;
  if (g > LLAMA_ATTN_MAX_GROUP)
    return refuse("num_attention_heads/num_key_value_heads = " + std::to_string(g) + " (" + std::to_string(h.heads) +
                  "/" + std::to_string(h.kv_heads) + "): supported 1.." + std::to_string(LLAMA_ATTN_MAX_GROUP));
  if (h.kv_heads % tp)
    return refuse("num_key_value_heads " + std::to_string(h.kv_heads) + ": --tp " + std::to_string(tp) +
                  " must divide it");
  if (h.hidden % 8) return refuse("hidden_size " + std::to_string(h.hidden) + ": must be a multiple of 8");
  if (h.ffn % (8 * tp))
    return refuse("intermediate_size " + std::to_string(h.ffn) + ": must be a multiple of 8 x --tp " +
                  std::to_string(tp));
  if (h.vocab % (8 * tp))
    return refuse("vocab_size " + std::to_string(h.vocab) + ": must be a multiple of 8 x --tp " + std::to_string(tp));
  // Ranges checked in fp32, the type the kernels use: 1e-300 would become 0
  // and 1e39 infinity after a check in double.
  const float eps = (float)h.eps, theta = (float)h.theta;
  if (!(eps >= FLT_MIN && eps <= 1))
    return refuse("rms_norm_eps " + num_string(h.eps) + ": " + num_string(eps) +
                  " in fp32 (the kernels' type): expected a normal fp32 in (0, 1]");
  if (!(theta > 1 && theta <= FLT_MAX))
    return refuse("rope_theta " + num_string(h.theta) + ": " + num_string(theta) +
                  " in fp32 (the kernels' type): expected a finite fp32 above 1");
  std::vector<float> inv;
  if (h.rope_type == "llama3") {
    const float fac = (float)h.rope_factor, lo = (float)h.rope_low, hi = (float)h.rope_high;
    const float old = (float)h.rope_orig_max;
    if (!(fac >= 1 && fac <= FLT_MAX) || !(lo > 0 && hi > lo && hi <= FLT_MAX) || !(old > 0 && old <= FLT_MAX))
      return refuse(h.rope_field + " 'llama3': factor " + num_string(h.rope_factor) + ", low_freq_factor " +
                    num_string(h.rope_low) + ", high_freq_factor " + num_string(h.rope_high) +
                    ", original_max_position_embeddings " + num_string(h.rope_orig_max) +
                    ": expected finite fp32 values, factor >= 1 and 0 < low_freq_factor < high_freq_factor");
    inv = llama3_inv_freq(h.head_dim, h.theta, h.rope_factor, h.rope_low, h.rope_high, h.rope_orig_max);
    for (float v : inv)
      if (!(v > 0 && v <= FLT_MAX))
        return refuse(h.rope_field + " 'llama3' with rope_theta " + num_string(h.theta) +
                      ": an inverse frequency of " + num_string(v) + " in fp32");
  } else if (h.rope_type != "default") {
    return refuse(h.rope_field + " '" + printable(h.rope_type) + "': supported: none, 'llama3'");
  }
  if (h.sliding_window > 0 && h.sliding_window < max_ctx)
    return refuse(h.sliding_field + " " + std::to_string(h.sliding_window) + " < max context " +
                  std::to_string(max_ctx) + " (prompt + new tokens): the engine attends to the whole context");
  c->hidden = h.hidden;
  c->heads = h.heads;
  c->kv_heads = h.kv_heads;
  c->head_dim = h.head_dim;
  c->ffn = h.ffn;
  c->layers = h.layers;
  c->vocab = h.vocab;
  c->eps = eps;
  c->theta = theta;
  c->rope_inv_freq = inv;
  c->qkv_bias = h.qkv_bias;
  return 0;
}

}  // namespace llama
