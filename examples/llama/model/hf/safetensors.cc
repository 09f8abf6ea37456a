// safetensors.cc - safetensors.h: the files opened and their headers checked,
// the index read, reads with pread.
#include "examples/llama/model/hf/safetensors.h"

#include <sys/stat.h>

#include <algorithm>
#include <cstring>

#include "examples/llama/model/hf/safetensors_header.h"
#include "examples/llama/model/hf/safetensors_index.h"
#include "examples/llama/model/input_file.h"

namespace llama {
namespace {

// A header lists each tensor in about 100 bytes (kMaxTensors of them: 1.6
// MiB); safetensors' own reader allows 100 MB, which this engine never needs.
constexpr uint64_t kMaxHeader = 16u << 20;

bool exists(const std::string &path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

enum Kind { BF16, F16, F32 };

// One row of cols elements of kind at src (no alignment: the file promises
// none) to bf16. The data is little-endian, as is every host this engine
// runs on (x86-64, aarch64).
void to_bf16(Kind kind, const unsigned char *src, size_t cols, uint16_t *out) {
  if (kind == BF16) {
    std::memcpy(out, src, cols * 2);
  } else if (kind == F16) {
    for (size_t c = 0; c < cols; c++) {
      uint16_t h;
      std::memcpy(&h, src + 2 * c, 2);
      out[c] = f16_to_bf16(h);
    }
  } else {
    for (size_t c = 0; c < cols; c++) {
      float f;
      std::memcpy(&f, src + 4 * c, 4);
      out[c] = f32_to_bf16(f);
    }
  }
}

}  // namespace

std::string shape_string(const std::vector<int64_t> &shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); i++) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

uint16_t f32_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x0040u);  // NaN: quiet, sign kept
  u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest even (overflow rounds to inf, as it should)
  return (uint16_t)(u >> 16);
}

float bf16_to_f32(uint16_t h) {
  const uint32_t u = (uint32_t)h << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

uint16_t f16_to_bf16(uint16_t h) {
  // fp16 -> fp32 is exact (subnormals become normal), then one rounding.
  const uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1f, m = h & 0x3ffu;
  uint32_t u;
  if (e == 0x1f) {
    u = sign | 0x7f800000u | (m << 13);  // inf, NaN (payload kept)
  } else if (e != 0) {
    u = sign | ((e + 112) << 23) | (m << 13);
  } else if (m == 0) {
    u = sign;
  } else {  // subnormal: m * 2^-24
    int shift = 0;
    uint32_t mm = m;
    while (!(mm & 0x400u)) {
      mm <<= 1;
      shift++;
    }
    u = sign | ((uint32_t)(113 - shift) << 23) | ((mm & 0x3ffu) << 13);
  }
  float f;
  std::memcpy(&f, &u, 4);
  return f32_to_bf16(f);
}

int SafetensorsFile::open(const std::string &path, std::string *err) {
  path_ = path;
  InputFile &f = in_;
  if (f.open(path, err)) return 1;
  if (f.size() < 8) {
    *err = path + ": " + std::to_string(f.size()) + " bytes, shorter than the 8-byte header length";
    return 1;
  }
  unsigned char len[8];
  if (f.read_at(0, len, 8, err)) return 1;
  uint64_t n = 0;
  for (int k = 7; k >= 0; k--) n = n << 8 | len[k];  // little-endian
  if (n > f.size() - 8 || n > kMaxHeader) {
    *err = path + ": header length " + std::to_string(n) + " exceeds the file (" + std::to_string(f.size()) +
           " bytes) or " + byte_size_string(kMaxHeader) + ": not a safetensors file";
    return 1;
  }
  std::string header((size_t)n, '\0');
  if (f.read_at(8, &header[0], header.size(), err) ||
      parse_safetensors_header(header, path, 8 + n, f.size() - 8 - n, &tensors_, err))
    return 1;
  for (auto &t : tensors_) {
    t.second.in = &in_;
    t.second.file = &path_;
  }
  return 0;
}

const TensorInfo *SafetensorsFile::find(const std::string &name) const {
  const auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

int Checkpoint::open(const std::string &dir, std::string *err) {
  dir_ = dir;
  files_.clear();
  index_.clear();
  const std::string single = dir + "/model.safetensors", index = dir + "/model.safetensors.index.json";
  if (exists(single)) {
    files_.emplace_back(new SafetensorsFile);
    if (files_.back()->open(single, err)) return 1;
    for (const auto &t : files_.back()->tensors()) index_[t.first] = &t.second;
    return 0;
  }
  if (!exists(index)) {
    *err = dir + ": neither model.safetensors nor model.safetensors.index.json (pytorch_model.bin is not read: " +
           "save the model with save_pretrained, which writes safetensors)";
    return 1;
  }
  WeightMap wm;
  if (read_safetensors_index(index, &wm, err)) return 1;
  for (size_t f = 0; f < wm.files.size(); f++) {
    files_.emplace_back(new SafetensorsFile);
    if (files_.back()->open(dir + "/" + wm.files[f], err)) return 1;
    // Every tensor of the file must be mapped to it: a tensor the index
    // does not list would be a model the index does not describe.
    for (const auto &t : files_.back()->tensors()) {
      const auto it = wm.file_of.find(t.first);
      if (it == wm.file_of.end() || it->second != f) {
        *err = index + ": tensor " + printable(t.first) + " is in " + wm.files[f] + ", but weight_map " +
               (it == wm.file_of.end() ? "does not list it" : "maps it to " + wm.files[it->second]);
        return 1;
      }
      index_[t.first] = &t.second;
    }
  }
  for (const auto &m : wm.file_of)
    if (!index_.count(m.first)) {
      *err = index + ": tensor " + printable(m.first) + " is mapped to " + wm.files[m.second] +
             ", which does not hold it";
      return 1;
    }
  return 0;
}

const TensorInfo *Checkpoint::find(const std::string &name) const {
  const auto it = index_.find(name);
  return it == index_.end() ? nullptr : it->second;
}

int Checkpoint::read_bf16(const std::string &name, size_t row0, size_t rows, size_t col0, size_t cols, uint16_t *dst,
                          size_t dst_pitch, std::string *err) const {
  const TensorInfo *t = find(name);
  if (!t) {
    *err = "tensor " + name + ": not in the checkpoint " + dir_;
    return 1;
  }
  if (t->shape.empty() || t->shape.size() > 2) {
    *err = "tensor " + name + ": shape " + shape_string(t->shape) + ": expected 1 or 2 dimensions";
    return 1;
  }
  const size_t R = t->shape.size() == 2 ? (size_t)t->shape[0] : 1, C = (size_t)t->shape.back();
  if (row0 > R || rows > R - row0 || col0 > C || cols > C - col0) {
    *err = "tensor " + name + " " + shape_string(t->shape) + ": rows " + std::to_string(row0) + "+" +
           std::to_string(rows) + ", columns " + std::to_string(col0) + "+" + std::to_string(cols) + " out of range";
    return 1;
  }
  Kind kind;
  if (t->dtype == "BF16") kind = BF16;
  else if (t->dtype == "F16") kind = F16;
  else if (t->dtype == "F32") kind = F32;
  else {
    *err = "tensor " + name + ": dtype " + t->dtype + ": supported BF16, F16, F32";
    return 1;
  }
  // Whole rows lie back to back in the file: up to 4 MiB of them per pread
  // (256 KiB when they are converted after: the staging buffer stays in
  // cache). A window of columns is read row by row: cutting it out of whole
  // rows, or preadv over windows and gaps, measured slower at TP 2
  // (docs/reliability.md). BF16 goes straight into the caller's buffer when
  // its rows are back to back there too; the rest through the staging buffer.
  const size_t eb = t->elem_bytes, row_bytes = cols * eb;
  const bool whole_rows = cols == C, direct = kind == BF16 && (dst_pitch == cols || rows == 1);
  const size_t chunk = direct ? 4u << 20 : 256u << 10;
  const size_t per_read = whole_rows ? std::max<size_t>(1, chunk / row_bytes) : 1;
  std::vector<unsigned char> stage(direct ? 0 : std::min(per_read, rows) * row_bytes);
  for (size_t r = 0; r < rows; r += per_read) {
    const size_t n = std::min(per_read, rows - r);  // n > 1: whole rows, so back to back in the file
    const uint64_t at = t->offset + ((row0 + r) * C + col0) * eb;
    unsigned char *buf = direct ? reinterpret_cast<unsigned char *>(dst + r * dst_pitch) : stage.data();
    if (t->in->read_at(at, buf, n * row_bytes, err)) return 1;
    if (!direct)
      for (size_t k = 0; k < n; k++) to_bf16(kind, stage.data() + k * row_bytes, cols, dst + (r + k) * dst_pitch);
  }
  return 0;
}

}  // namespace llama
