// safetensors.cc - safetensors.h: header checks at open, reads in place.
#include "examples/llama/model/hf/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "examples/llama/model/hf/json.h"
#include "examples/llama/model/input_file.h"
#include "examples/llama/model/limits.h"

namespace llama {
namespace {

// A header lists each tensor in about 100 bytes (kMaxTensors of them: 1.6
// MiB); safetensors' own reader allows 100 MB, which this engine never needs.
constexpr uint64_t kMaxHeader = 16u << 20;

size_t dtype_bytes(const std::string &d) {
  static const struct {
    const char *name;
    size_t bytes;
  } table[] = {{"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E4M3", 1}, {"F8_E5M2", 1}, {"I16", 2},
               {"U16", 2},  {"F16", 2}, {"BF16", 2}, {"I32", 4},     {"U32", 4},     {"F32", 4},
               {"I64", 8},  {"U64", 8}, {"F64", 8}};
  for (const auto &t : table)
    if (d == t.name) return t.bytes;
  return 0;
}

// A JSON integer that is exact in a double and in [0, 2^53].
bool whole(const Json &j, uint64_t *v) {
  if (j.kind != Json::NUMBER || j.number < 0 || j.number > 9007199254740992.0 || j.number != (double)(uint64_t)j.number)
    return false;
  *v = (uint64_t)j.number;
  return true;
}

bool exists(const std::string &path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
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

SafetensorsFile::~SafetensorsFile() {
  if (map_) munmap(map_, size_);
}

int SafetensorsFile::open(const std::string &path, std::string *err) {
  InputFile f;
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
  if (f.read_at(8, &header[0], header.size(), err)) return 1;
  size_ = (size_t)f.size();
  map_ = mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, f.fd(), 0);
  if (map_ == MAP_FAILED) {
    map_ = nullptr;
    *err = path + ": mmap failed (" + std::strerror(errno) + ")";
    return 1;
  }
  const unsigned char *base = static_cast<const unsigned char *>(map_);
  Json h;
  std::string jerr;
  if (json_parse(header, &h, &jerr, kMaxTensors * 16 + 4096)) {
    *err = path + ": header: " + jerr;
    return 1;
  }
  if (h.kind != Json::OBJECT) {
    *err = path + ": header is " + h.kind_name() + ", expected an object";
    return 1;
  }
  const unsigned char *data = base + 8 + n;
  const uint64_t data_len = size_ - 8 - n;
  for (const auto &m : h.members) {
    if (m.first == "__metadata__") continue;
    const std::string at = path + ": tensor " + m.first + ": ";
    const Json &t = m.second;
    const Json *dt = t.get("dtype"), *sh = t.get("shape"), *off = t.get("data_offsets");
    if (t.kind != Json::OBJECT || !dt || dt->kind != Json::STRING || !sh || sh->kind != Json::ARRAY || !off ||
        off->kind != Json::ARRAY || off->items.size() != 2) {
      *err = at + "expected {\"dtype\": string, \"shape\": [...], \"data_offsets\": [begin, end]}";
      return 1;
    }
    TensorInfo ti;
    ti.name = m.first;
    ti.dtype = dt->string;
    ti.file = path;
    uint64_t numel = 1;
    for (const Json &d : sh->items) {
      uint64_t v;
      if (!whole(d, &v)) {
        *err = at + "shape entries must be non-negative integers";
        return 1;
      }
      if (v && numel > UINT64_MAX / v) {
        *err = at + "shape overflows";
        return 1;
      }
      numel *= v;
      ti.shape.push_back((int64_t)v);
    }
    uint64_t b, e;
    if (!whole(off->items[0], &b) || !whole(off->items[1], &e) || b > e || e > data_len) {
      *err = at + "data_offsets outside the file's " + std::to_string(data_len) + " data bytes";
      return 1;
    }
    ti.elem_bytes = dtype_bytes(ti.dtype);
    if (ti.elem_bytes && (numel > UINT64_MAX / ti.elem_bytes || e - b != numel * ti.elem_bytes)) {
      *err = at + std::to_string(e - b) + " data bytes, but " + ti.dtype + " " + shape_string(ti.shape) + " needs " +
             std::to_string(numel * ti.elem_bytes);
      return 1;
    }
    ti.data = data + b;
    ti.bytes = e - b;
    tensors_.emplace(ti.name, std::move(ti));
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
  Json j;
  if (json_read_file(index, kMaxIndexJsonBytes, 2 * kMaxTensors + 4096, &j, err)) return 1;
  const Json *wm = j.get("weight_map");
  if (!wm || wm->kind != Json::OBJECT) {
    *err = index + ": no \"weight_map\" object";
    return 1;
  }
  std::map<std::string, SafetensorsFile *> opened;
  for (const auto &m : wm->members) {
    const Json &f = m.second;
    if (f.kind != Json::STRING || f.string.empty() || f.string.find('/') != std::string::npos) {
      *err = index + ": weight_map[\"" + m.first + "\"]: expected a file name in " + dir;
      return 1;
    }
    SafetensorsFile *&sf = opened[f.string];
    if (!sf) {
      files_.emplace_back(new SafetensorsFile);
      sf = files_.back().get();
      if (sf->open(dir + "/" + f.string, err)) return 1;
    }
    const TensorInfo *t = sf->find(m.first);
    if (!t) {
      *err = index + ": tensor " + m.first + " is mapped to " + f.string + ", which does not hold it";
      return 1;
    }
    index_[m.first] = t;
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
  enum { BF16, F16, F32 } kind;
  if (t->dtype == "BF16") kind = BF16;
  else if (t->dtype == "F16") kind = F16;
  else if (t->dtype == "F32") kind = F32;
  else {
    *err = "tensor " + name + ": dtype " + t->dtype + ": supported BF16, F16, F32";
    return 1;
  }
  // Element loads through memcpy: the file promises no alignment. The data
  // is little-endian, as is every host this engine runs on (x86-64, aarch64).
  for (size_t r = 0; r < rows; r++) {
    const unsigned char *src = t->data + ((row0 + r) * C + col0) * t->elem_bytes;
    uint16_t *out = dst + r * dst_pitch;
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
  return 0;
}

}  // namespace llama
