// gemm_pin.cc - gemm_pin.h: the tuner's cache file, written once.
#include "examples/llama/graphs/gemm_pin.h"

#include <algorithm>
#include <cstdio>
#include <tuple>

namespace llama {

int write_gemm_pins(const std::string &path, const std::vector<GemmShape> &shapes, int sm_count, int arch,
                    const char *variant, std::string *err) {
  if (arch != 90) {
    *err = "--batch-invariant pins every GEMM to a Hopper (sm_90) kernel; this GPU is sm_" + std::to_string(arch);
    return 1;
  }
  // The cache's key: m n k dtype epilogue sm_count arch (lib/gemm/tune.h);
  // dtype 2 is its code for bf16, epilogues are tpg_epilogue's values.
  const int kBf16 = 2;
  std::vector<std::tuple<int, int, int, int>> keys;
  for (const GemmShape &g : shapes) keys.emplace_back(g.m, g.n, g.k, (int)g.epilogue);
  std::sort(keys.begin(), keys.end());
  keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
  FILE *f = std::fopen(path.c_str(), "w");
  if (!f) {
    *err = "cannot write the pinned GEMM kernels' file " + path;
    return 1;
  }
  std::fprintf(f, "tpgraph-gemm-tune 1\n");
  for (const auto &k : keys)
    std::fprintf(f, "%d %d %d %d %d %d %d %s 0.000\n", std::get<0>(k), std::get<1>(k), std::get<2>(k), kBf16,
                 std::get<3>(k), sm_count, arch, variant);
  std::fprintf(f, "end %zu\n", keys.size());
  if (std::fclose(f) != 0) {
    *err = "cannot write the pinned GEMM kernels' file " + path;
    return 1;
  }
  return 0;
}

}  // namespace llama
