// read_bench.cc - how fast a checkpoint's tensors come off the host: a 1 GB
// fake checkpoint (8 BF16 tensors [8192, 8192], or 4 F32 ones) read through
// Checkpoint::read_bf16 as load_weights reads it (64 MiB chunks), whole rows
// (TP 1) and column halves (TP 2, both ranks), the checkpoint opened afresh
// for each run as the engine opens it once per load; page cache warm. Prints
// the median of 5 runs (after one warm-up) per TP. A program, not a test:
// docs/reliability.md, "Model files and the command line", has the figures.
//
//   bazel run //examples/llama:read_bench -- /tmp/read_bench_bf16 BF16
//   bazel run //examples/llama:read_bench -- /tmp/read_bench_f32 F32
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "examples/llama/model/hf/safetensors.h"

using namespace llama;

namespace {

constexpr size_t R = 8192, C = 8192;

// DIR/model.safetensors with n tensors "t<i>" [R, C] of dtype, unless there.
void make(const std::string &dir, const std::string &dtype, size_t n, size_t eb) {
  struct stat st;
  if (stat((dir + "/model.safetensors").c_str(), &st) == 0) return;
  mkdir(dir.c_str(), 0755);
  std::string h = "{";
  for (size_t i = 0; i < n; i++)
    h += std::string(i ? ", " : "") + "\"t" + std::to_string(i) + "\": {\"dtype\": \"" + dtype +
         "\", \"shape\": [8192, 8192], \"data_offsets\": [" + std::to_string(i * R * C * eb) + ", " +
         std::to_string((i + 1) * R * C * eb) + "]}";
  h += "}";
  while (h.size() % 8) h += ' ';
  FILE *f = std::fopen((dir + "/model.safetensors").c_str(), "wb");
  const uint64_t len = h.size();
  std::vector<unsigned char> row(C * eb);
  bool ok = f && std::fwrite(&len, 8, 1, f) == 1 && std::fwrite(h.data(), 1, h.size(), f) == h.size();
  for (size_t i = 0; ok && i < n * R; i++) {
    for (size_t c = 0; c < row.size(); c++) row[c] = (unsigned char)((i * 31 + c * 7) & 0x3f);
    ok = std::fwrite(row.data(), 1, row.size(), f) == row.size();
  }
  if (!f || std::fclose(f) != 0 || !ok) {
    std::fprintf(stderr, "read_bench: cannot write %s/model.safetensors\n", dir.c_str());
    std::exit(2);
  }
}

// Seconds for one load of every tensor at tp, each rank its column slice.
double load(const std::string &dir, size_t n, int tp) {
  const auto t0 = std::chrono::steady_clock::now();
  Checkpoint ck;
  std::string err;
  if (ck.open(dir, &err)) {
    std::fprintf(stderr, "read_bench: %s\n", err.c_str());
    std::exit(2);
  }
  const size_t cols = C / tp, chunk = std::max<size_t>(1, (64u << 20) / (cols * 2));
  std::vector<uint16_t> host(std::min(chunk, R) * cols);
  for (size_t i = 0; i < n; i++)
    for (int rank = 0; rank < tp; rank++)
      for (size_t r0 = 0; r0 < R; r0 += chunk)
        if (ck.read_bf16("t" + std::to_string(i), r0, std::min(chunk, R - r0), rank * cols, cols, host.data(), cols,
                         &err)) {
          std::fprintf(stderr, "read_bench: %s\n", err.c_str());
          std::exit(2);
        }
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

int main(int argc, char **argv) {
  const std::string dir = argc > 1 ? argv[1] : "/tmp/read_bench_bf16", dtype = argc > 2 ? argv[2] : "BF16";
  if (dtype != "BF16" && dtype != "F32") {
    std::fprintf(stderr, "usage: read_bench [DIR] [BF16|F32]\n");
    return 2;
  }
  const size_t eb = dtype == "F32" ? 4 : 2, n = (1u << 30) / (R * C * eb);
  make(dir, dtype, n, eb);
  for (int tp : {1, 2}) {
    load(dir, n, tp);  // warm-up: the page cache
    std::vector<double> t;
    for (int k = 0; k < 5; k++) t.push_back(load(dir, n, tp));
    std::sort(t.begin(), t.end());
    std::printf("%s TP %d: %.3f s median of 5 (%.2f GB/s), min %.3f, max %.3f\n", dtype.c_str(), tp, t[2],
                1.073741824 / t[2], t[0], t[4]);
  }
  return 0;
}
