// rank.h - one rank of the engine (one process, one GPU): what it holds,
// and the runs it can do with it: the checked steps (check.cc), the
// benchmark (bench.cc), --decode (graphs/decode.h) and --model
// (run/generate.h).
#ifndef LLAMA_RUN_RANK_H
#define LLAMA_RUN_RANK_H

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "examples/llama/llama.h"
#include "examples/llama/run/cli.h"

namespace llama {

// Everything a rank holds; released in the order the API requires (graphs,
// then module and comm).
struct RankState {
  Rank R;
  Weights w;
  std::vector<std::vector<double>> ref_y, ref_logits;  // --verify, rank 0
  ~RankState() {
    free_weights(&w);
    if (R.cublas) cublasDestroy(R.cublas);
    cudaFree(R.cublas_ws);
    if (R.stream) cudaStreamDestroy(R.stream);
    tpg_module_destroy(R.module);
    tpg_module_destroy(R.prefill_module);
    tpg_comm_destroy(R.comm);
  }
};

struct StepGuard {  // a Step and its caches, freed before the rank's state
  Step s;
  Caches a, b;
  ~StepGuard() {
    free_step(&s);
    free_caches(&a);
    free_caches(&b);
  }
};

// Sets up rank `rank` of `nranks` on GPU `device` (the comm through
// id_file at TP > 1), loads the weights and runs what *o asks for.
int run_rank(Options &o, int rank, int nranks, int device, const std::string &id_file);

int run_check(Options &o, RankState &st);  // check.cc
int run_bench(Options &o, RankState &st);  // bench.cc
// Whether this rank's weights for --bench fit the GPU's free memory; if
// not, rank 0 says so (and writes bench.json's row) and the run is skipped.
bool bench_weights_fit(const Options &o, const Rank &R);  // bench.cc

// What tpgraph built: the node kinds, the memory it owns, the build time.
int print_graph_info(const Step &s);
float bf16_to_float(uint16_t h);
bool write_file(const std::string &path, const void *p, size_t n);

// Each returns 1 from the calling function (which has a Rank R, and for
// CHECK_OK a std::string err) after printing what failed.
#define CHECK_TPG(call)                                                                   \
  do {                                                                                    \
    tpg_status s_ = (call);                                                               \
    if (s_ != TPG_SUCCESS) {                                                              \
      std::fprintf(stderr, "llama rank %d: %s: %s\n", R.rank, #call, tpg_last_error());   \
      return 1;                                                                           \
    }                                                                                     \
  } while (0)
#define CHECK_CUDA(call)                                                                          \
  do {                                                                                            \
    cudaError_t e_ = (call);                                                                      \
    if (e_ != cudaSuccess) {                                                                      \
      std::fprintf(stderr, "llama rank %d: %s: %s\n", R.rank, #call, cudaGetErrorString(e_));     \
      return 1;                                                                                   \
    }                                                                                             \
  } while (0)
#define CHECK_OK(call)                                                        \
  do {                                                                        \
    if (call) {                                                               \
      std::fprintf(stderr, "llama rank %d: %s\n", R.rank, err.c_str());      \
      return 1;                                                               \
    }                                                                         \
  } while (0)

}  // namespace llama

#endif
