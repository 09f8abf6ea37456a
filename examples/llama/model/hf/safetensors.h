// safetensors.h - the tensors of a Hugging Face checkpoint, read block by block.
//
// A safetensors file is an 8-byte little-endian header length N, N bytes of
// JSON ({name: {"dtype", "shape", "data_offsets": [begin, end]}, optional
// "__metadata__"}), then the data; offsets count from the data's start.
// Each file stays open and is never copied whole: a rank reads only the rows
// and columns of its shard (Checkpoint::read_bf16) with pread, so the page
// cache, not every rank's heap, holds the model. pread, not a mapping: a
// file truncated after it was opened (a download replaced under a running
// engine) then gives an error that names it, where a mapping would give
// SIGBUS; it reads as fast (docs/reliability.md). A checkpoint directory is
// either model.safetensors or model.safetensors.index.json with its shards.
// Every header is checked when its file is opened, as strictly as
// safetensors' own reader: a known dtype, integer shape and offsets, each
// tensor's size equal to shape x dtype, the offsets covering the data
// exactly (no gap, no overlap, nothing after the last), __metadata__ a map
// of strings, no NUL in a name, no name twice, at most kMaxTensors tensors.
// The header is read through JsonCursor straight into the table, so a
// hostile one is refused at its first bad entry and never held as a tree.
#ifndef LLAMA_MODEL_SAFETENSORS_H
#define LLAMA_MODEL_SAFETENSORS_H

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "examples/llama/model/input_file.h"

namespace llama {

struct TensorInfo {
  std::string name, dtype;      // dtype as the file writes it: "BF16", "F16", "F32", ...
  std::vector<int64_t> shape;
  size_t elem_bytes = 0;        // 0: a dtype of fewer than 8 bits (F4, F6_*), never read here
  uint64_t offset = 0;          // of its first byte, from the file's start
  size_t bytes = 0;
  const InputFile *in = nullptr;     // the open file it is read from (owned by its SafetensorsFile)
  const std::string *file = nullptr;  // that file's path, for messages
};

// "[4096, 128]"
std::string shape_string(const std::vector<int64_t> &shape);

// One open safetensors file. Not copyable; the file stays open as long as it.
class SafetensorsFile {
 public:
  // Opens the file (input_file.h's rule) and checks its header. 0 on
  // success; else *err names the file and what is wrong.
  int open(const std::string &path, std::string *err);
  const TensorInfo *find(const std::string &name) const;
  const std::map<std::string, TensorInfo> &tensors() const { return tensors_; }
  const std::string &path() const { return path_; }

 private:
  std::string path_;
  InputFile in_;
  std::map<std::string, TensorInfo> tensors_;
};

// A checkpoint directory: model.safetensors, or the files that
// model.safetensors.index.json's "weight_map" names (each opened once). The
// index and the files must agree: every tensor it maps is in its file, and
// every tensor of a file is mapped to that file.
class Checkpoint {
 public:
  int open(const std::string &dir, std::string *err);
  // The tensor, wherever it is stored; null when no file holds it.
  const TensorInfo *find(const std::string &name) const;
  // Rows [row0, row0 + rows) and columns [col0, col0 + cols) of tensor
  // `name` ([R, C]; a 1-D [C] is one row) converted to bf16 into dst, rows
  // dst_pitch elements apart. BF16 is copied, F16 and F32 are rounded to
  // nearest even (NaN stays NaN); any other dtype is refused by name. A
  // file cut short since it was opened is an error naming it.
  int read_bf16(const std::string &name, size_t row0, size_t rows, size_t col0, size_t cols, uint16_t *dst,
                size_t dst_pitch, std::string *err) const;
  const std::string &dir() const { return dir_; }
  size_t file_count() const { return files_.size(); }
  // Every tensor of every file, by name.
  const std::map<std::string, const TensorInfo *> &tensors() const { return index_; }

 private:
  std::string dir_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, const TensorInfo *> index_;  // every tensor of every file
};

// The conversions of read_bf16, exposed for the tests.
uint16_t f32_to_bf16(float f);
uint16_t f16_to_bf16(uint16_t h);
float bf16_to_f32(uint16_t h);

}  // namespace llama

#endif
