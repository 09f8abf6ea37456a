// safetensors_fuzz.cc - libFuzzer on one safetensors file
// (examples/llama/model/hf/safetensors.h): the input is the file's bytes,
// written as model.safetensors in a directory of the harness's own, then
// opened as a checkpoint and every tensor the reader converts read back.
//
// Promises checked (abort() if broken):
//   - open returns 0 or 1, and a refusal names the file;
//   - an accepted file's tensors lie inside it and tile its data exactly
//     (their bytes sum to the data's length, none overlaps another), each of
//     the size its shape and dtype say;
//   - every tensor of dtype BF16, F16 or F32 and 1 or 2 dimensions reads
//     whole and as a window of rows and columns; any other is refused by
//     name, never read.
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "examples/llama/model/hf/safetensors.h"
#include "tests/fuzz/llama_fuzz_util.h"

using llama_fuzz::must;

namespace {

size_t dtype_size(const std::string &d) { return d == "F32" ? 4 : d == "BF16" || d == "F16" ? 2 : 0; }

void read_back(const llama::Checkpoint &ck, const std::string &name, const llama::TensorInfo &t) {
  std::string err;
  std::vector<uint16_t> out(1);
  const size_t eb = dtype_size(t.dtype);
  if (!eb || t.shape.empty() || t.shape.size() > 2) {
    must(ck.read_bf16(name, 0, 1, 0, 1, out.data(), 1, &err) != 0, "an unreadable tensor is refused", name);
    return;
  }
  const size_t R = t.shape.size() == 2 ? (size_t)t.shape[0] : 1, C = (size_t)t.shape.back();
  must(R * C * eb == t.bytes, "size = shape x dtype", name);
  out.assign(R * C + 1, 0);
  must(ck.read_bf16(name, 0, R, 0, C, out.data(), C, &err) == 0, "a whole tensor reads", err);
  if (R > 1 && C > 1)
    must(ck.read_bf16(name, 1, R - 1, 1, C - 1, out.data(), C, &err) == 0, "a window reads", err);
  must(ck.read_bf16(name, R, 1, 0, C, out.data(), C, &err) != 0, "a window past the end is refused", name);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const std::string &dir = llama_fuzz::fuzz_dir("safetensors_fuzz");
  llama_fuzz::write_file(dir + "/model.safetensors", data, size);
  llama::Checkpoint ck;
  std::string err;
  const int rc = ck.open(dir, &err);
  must(rc == 0 || rc == 1, "open returns 0 or 1");
  llama_fuzz::say(rc ? "refused: " + err : "accepted");
  if (rc) {
    must(err.find("model.safetensors") != std::string::npos, "a refusal names the file", err);
    return 0;
  }
  uint64_t n = 0;
  for (int k = 7; k >= 0; k--) n = n << 8 | data[k];
  std::vector<std::pair<uint64_t, uint64_t>> spans;  // (offset, bytes), sorted: each starts where the last ended
  for (const auto &e : ck.tensors()) {
    const llama::TensorInfo &t = *e.second;
    must(t.offset <= size && t.bytes <= size - t.offset, "a tensor lies inside its file", e.first);
    spans.emplace_back(t.offset, t.bytes);
  }
  std::sort(spans.begin(), spans.end());
  uint64_t next = 8 + n;
  for (const auto &s : spans) {
    must(s.first == next, "the tensors tile the data exactly (no gap, no overlap)");
    next += s.second;
  }
  must(next == size, "the tensors cover the data to its end");
  for (const auto &e : ck.tensors()) read_back(ck, e.first, *e.second);
  return 0;
}
