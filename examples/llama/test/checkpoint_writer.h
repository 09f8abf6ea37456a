// checkpoint_writer.h - tiny Hugging Face checkpoints and hostile model
// files, written by the CPU tests (hf_test, inputs_test, cli_test) and by
// the fuzzers' seed corpora. Tensor values are k/8 (|k| <= 125, a hash of
// tensor, row and column): exact in bf16, fp16 and fp32, so every
// comparison is for equality.
#ifndef LLAMA_TEST_CHECKPOINT_WRITER_H
#define LLAMA_TEST_CHECKPOINT_WRITER_H

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "examples/llama/model/hf/safetensors.h"

namespace llama_test {

// A fresh directory $TEST_TMPDIR/PREFIX.XXXXXX (else under /tmp); exits 2 if
// it cannot be made.
std::string temp_root(const char *prefix);
void remove_tree(const std::string &path);
// root/name, emptied.
std::string fresh_dir(const std::string &root, const std::string &name);
// Exits 2 when it cannot.
void write_file(const std::string &path, const std::string &bytes);

// Element (r, c) of the tensor named n (a 1-D tensor is row 0): k / 8.
float val(const std::string &n, size_t r, size_t c);
uint16_t bits_bf16(float f);  // f exact in bf16
uint16_t exact_f16(float f);  // f = k/8, |k| <= 125

struct Tensor {
  std::string name, dtype;
  std::vector<int64_t> shape;
  std::string bytes;
};

// The tensor n of `shape` (1-D or 2-D) in dtype, values val(n, r, c).
Tensor make_tensor(const std::string &n, const std::vector<int64_t> &shape, const std::string &dtype);
// A safetensors file: header padded with spaces to 8 bytes (as safetensors
// writes it) unless pad is false, data in the order given.
std::string safetensors_bytes(const std::vector<Tensor> &ts, bool pad = true);
// The 8-byte length, header text h as given, then `data` zero bytes.
std::string with_header(const std::string &h, size_t data);

// A model to write: the engine's tiny shape (head_dim one of the engine's),
// config.json's fields as raw JSON (an empty value drops the field), and the
// dtype of each tensor.
struct Spec {
  int hidden = 32, heads = 4, kv = 2, ffn = 48, layers = 2, vocab = 32, head_dim = 128;
  bool tie = false;
  bool qkv_bias = false;  // q/k/v_proj.bias tensors (Qwen2)
  int files = 1;  // > 1: model-0000i-of-0000n.safetensors + model.safetensors.index.json
  std::map<std::string, std::string> cfg;
  std::function<std::string(size_t index, const std::string &name)> dtype = [](size_t, const std::string &) {
    return std::string("BF16");
  };
  std::vector<std::string> drop;                               // tensors left out
  std::map<std::string, std::vector<int64_t>> reshape;         // tensors written with another shape
  std::vector<std::pair<std::string, std::vector<int64_t>>> add;  // extra tensors
};

Spec llama_spec();
// A Qwen2 checkpoint from a Llama one: its q/k/v biases, no sliding window,
// and none of Llama's bias fields.
void make_qwen2(Spec *s);
// The tensors a Spec's model has, in the order written.
std::vector<std::pair<std::string, std::vector<int64_t>>> hf_tensors(const Spec &s);
// config.json and the safetensors files (with an index when s.files > 1)
// into dir (which exists); returns dir.
std::string write_model(const std::string &dir, const Spec &s);

}  // namespace llama_test

#endif
