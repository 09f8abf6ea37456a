// checkpoint_writer.cc - checkpoint_writer.h.
#include "examples/llama/test/checkpoint_writer.h"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace llama_test {

using llama::shape_string;

std::string temp_root(const char *prefix) {
  const char *tmp = std::getenv("TEST_TMPDIR");
  std::string tmpl = std::string(tmp && *tmp ? tmp : "/tmp") + "/" + prefix + ".XXXXXX";
  std::vector<char> buf(tmpl.begin(), tmpl.end());
  buf.push_back('\0');
  if (!mkdtemp(buf.data())) {
    std::perror("test: mkdtemp");
    std::exit(2);
  }
  return buf.data();
}

void remove_tree(const std::string &path) {
  if (DIR *d = opendir(path.c_str())) {
    while (dirent *e = readdir(d)) {
      const std::string n = e->d_name;
      if (n == "." || n == "..") continue;
      const std::string p = path + "/" + n;
      struct stat st;
      if (lstat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) remove_tree(p);
      else unlink(p.c_str());
    }
    closedir(d);
  }
  rmdir(path.c_str());
}

std::string fresh_dir(const std::string &root, const std::string &name) {
  const std::string d = root + "/" + name;
  remove_tree(d);
  mkdir(d.c_str(), 0755);
  return d;
}

void write_file(const std::string &path, const std::string &bytes) {
  FILE *f = std::fopen(path.c_str(), "wb");
  if (!f || std::fwrite(bytes.data(), 1, bytes.size(), f) != bytes.size()) {
    std::fprintf(stderr, "test: cannot write %s\n", path.c_str());
    std::exit(2);
  }
  std::fclose(f);
}

uint32_t fnv(const std::string &s) {
  uint32_t h = 2166136261u;
  for (unsigned char ch : s) h = (h ^ ch) * 16777619u;
  return h;
}

// Element (r, c) of the tensor named n (a 1-D tensor is row 0): k / 8.
float val(const std::string &n, size_t r, size_t c) {
  uint64_t z = ((uint64_t)fnv(n) << 32) ^ (r * 0x9e3779b97f4a7c15ull) ^ (c * 0xbf58476d1ce4e5b9ull);
  z = (z ^ (z >> 31)) * 0x94d049bb133111ebull;
  z ^= z >> 29;
  return (float)((int)(z % 251) - 125) / 8.f;
}

uint16_t bits_bf16(float f) {  // f is exact in bf16 here
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return (uint16_t)(u >> 16);
}

uint16_t exact_f16(float f) {  // f is k/8, |k| <= 125: exact in fp16
  if (f == 0) return std::signbit(f) ? 0x8000 : 0;
  int e;
  const double m = std::frexp(std::fabs((double)f), &e);  // f = m 2^e, m in [0.5, 1)
  const uint16_t mant = (uint16_t)((m * 2 - 1) * 1024);
  return (uint16_t)((f < 0 ? 0x8000 : 0) | (e - 1 + 15) << 10 | mant);
}


// The tensor n of `shape` (1-D or 2-D) in dtype, values val(n, r, c).
Tensor make_tensor(const std::string &n, const std::vector<int64_t> &shape, const std::string &dtype) {
  Tensor t{n, dtype, shape, ""};
  const size_t R = shape.size() == 2 ? shape[0] : 1, C = shape.back();
  for (size_t r = 0; r < R; r++)
    for (size_t c = 0; c < C; c++) {
      const float v = val(n, r, c);
      if (dtype == "BF16") {
        const uint16_t b = bits_bf16(v);
        t.bytes.append(reinterpret_cast<const char *>(&b), 2);
      } else if (dtype == "F16") {
        const uint16_t h = exact_f16(v);
        t.bytes.append(reinterpret_cast<const char *>(&h), 2);
      } else if (dtype == "F32") {
        t.bytes.append(reinterpret_cast<const char *>(&v), 4);
      } else {  // a one-byte dtype (I8, U8): the refusals only look at its name
        t.bytes.push_back((char)(int)v);
      }
    }
  return t;
}

// A safetensors file: header padded with spaces to 8 bytes (as safetensors
// writes it) unless pad is false, data in the order given.
std::string safetensors_bytes(const std::vector<Tensor> &ts, bool pad) {
  std::string h = "{\"__metadata__\": {\"format\": \"pt\"}";
  size_t off = 0;
  for (const Tensor &t : ts) {
    h += ", \"" + t.name + "\": {\"dtype\": \"" + t.dtype + "\", \"shape\": " + shape_string(t.shape) +
         ", \"data_offsets\": [" + std::to_string(off) + ", " + std::to_string(off + t.bytes.size()) + "]}";
    off += t.bytes.size();
  }
  h += "}";
  while (pad && h.size() % 8) h += ' ';
  std::string out(8, '\0');
  const uint64_t n = h.size();
  for (int k = 0; k < 8; k++) out[k] = (char)(n >> (8 * k));
  out += h;
  for (const Tensor &t : ts) out += t.bytes;
  return out;
}

Spec llama_spec() {
  Spec s;
  s.cfg = {{"architectures", "[\"LlamaForCausalLM\"]"},
           {"model_type", "\"llama\""},
           {"hidden_size", "32"},
           {"num_attention_heads", "4"},
           {"num_key_value_heads", "2"},
           {"head_dim", "128"},
           {"intermediate_size", "48"},
           {"num_hidden_layers", "2"},
           {"vocab_size", "32"},
           {"rms_norm_eps", "1e-05"},
           {"hidden_act", "\"silu\""},
           {"max_position_embeddings", "8192"},
           {"attention_bias", "false"},
           {"mlp_bias", "false"},
           {"tie_word_embeddings", "false"},
           {"rope_parameters", "{\"rope_theta\": 500000.0, \"rope_type\": \"default\"}"},
           {"torch_dtype", "\"bfloat16\""},
           {"eos_token_id", "[1, 2]"}};
  return s;
}

// A Qwen2 checkpoint from a Llama one: its q/k/v biases, no sliding window,
// and none of Llama's bias fields.
void make_qwen2(Spec *s) {
  s->qkv_bias = true;
  s->cfg["architectures"] = "[\"Qwen2ForCausalLM\"]";
  s->cfg["model_type"] = "\"qwen2\"";
  s->cfg["use_sliding_window"] = "false";
  s->cfg["sliding_window"] = "null";
  s->cfg["attention_bias"] = s->cfg["mlp_bias"] = "";
}

std::vector<std::pair<std::string, std::vector<int64_t>>> hf_tensors(const Spec &s) {
  const int64_t H = s.hidden, D = s.head_dim;
  std::vector<std::pair<std::string, std::vector<int64_t>>> v;
  for (int i = 0; i < s.layers; i++) {
    const std::string l = "model.layers." + std::to_string(i) + ".";
    v.push_back({l + "input_layernorm.weight", {H}});
    v.push_back({l + "post_attention_layernorm.weight", {H}});
    v.push_back({l + "self_attn.q_proj.weight", {s.heads * D, H}});
    v.push_back({l + "self_attn.k_proj.weight", {s.kv * D, H}});
    v.push_back({l + "self_attn.v_proj.weight", {s.kv * D, H}});
    v.push_back({l + "self_attn.o_proj.weight", {H, s.heads * D}});
    v.push_back({l + "mlp.gate_proj.weight", {s.ffn, H}});
    v.push_back({l + "mlp.up_proj.weight", {s.ffn, H}});
    v.push_back({l + "mlp.down_proj.weight", {H, s.ffn}});
    if (s.qkv_bias) {
      v.push_back({l + "self_attn.q_proj.bias", {s.heads * D}});
      v.push_back({l + "self_attn.k_proj.bias", {s.kv * D}});
      v.push_back({l + "self_attn.v_proj.bias", {s.kv * D}});
    }
  }
  v.push_back({"model.norm.weight", {H}});
  v.push_back({"model.embed_tokens.weight", {s.vocab, H}});
  if (!s.tie) v.push_back({"lm_head.weight", {s.vocab, H}});
  return v;
}

std::string write_model(const std::string &dir, const Spec &s) {
  std::string cfg = "{\n";
  bool first = true;
  for (const auto &kv : s.cfg) {
    if (kv.second.empty()) continue;
    cfg += std::string(first ? "" : ",\n") + "  \"" + kv.first + "\": " + kv.second;
    first = false;
  }
  write_file(dir + "/config.json", cfg + "\n}\n");
  std::vector<std::vector<Tensor>> files(s.files);
  auto all = hf_tensors(s);
  for (const auto &a : s.add) all.push_back(a);
  size_t k = 0;
  for (auto &t : all) {
    bool dropped = false;
    for (const auto &d : s.drop) dropped |= d == t.first;
    if (dropped) continue;
    if (s.reshape.count(t.first)) t.second = s.reshape.at(t.first);
    files[k % s.files].push_back(make_tensor(t.first, t.second, s.dtype(k, t.first)));
    k++;
  }
  if (s.files == 1) {
    write_file(dir + "/model.safetensors", safetensors_bytes(files[0]));
    return dir;
  }
  std::string index = "{\"metadata\": {\"total_size\": 0}, \"weight_map\": {";
  bool firstw = true;
  for (int f = 0; f < s.files; f++) {
    char fname[64];
    std::snprintf(fname, sizeof fname, "model-%05d-of-%05d.safetensors", f + 1, s.files);
    write_file(dir + "/" + fname, safetensors_bytes(files[f]));
    for (const Tensor &t : files[f]) {
      index += std::string(firstw ? "" : ", ") + "\"" + t.name + "\": \"" + fname + "\"";
      firstw = false;
    }
  }
  write_file(dir + "/model.safetensors.index.json", index + "}}\n");
  return dir;
}

std::string with_header(const std::string &h, size_t data) {
  std::string out(8, '\0');
  for (int k = 0; k < 8; k++) out[k] = (char)((uint64_t)h.size() >> (8 * k));
  return out + h + std::string(data, '\0');
}

}  // namespace llama_test
