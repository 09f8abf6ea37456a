// decode.h - greedy decoding of many tokens, two ways, side by side:
//   host loop:   one launch per token; the host reads the token back and
//                decides whether to go on (what engines do today);
//   device loop: ONE launch runs up to N steps: a conditional WHILE node
//                (tpg_plan_add_conditional) whose body is the whole decode
//                step (step.cc's plan, appended with tpg_plan_append), greedy
//                argmax across the ranks, append + advance, and a kernel
//                that sets the loop's condition; tokens stream to pinned
//                host memory as they are made.
// Both run the very same kernels on the same inputs, so they must make the
// same tokens (checked).
#ifndef LLAMA_DECODE_H
#define LLAMA_DECODE_H

#include <string>

#include "examples/llama/llama.h"

namespace llama {

struct DecodeOptions {
  int steps = 128;       // N: tokens per sequence at most
  int end_token = -1;    // stop a sequence at this token (-1: never)
  int iters = 3;         // timed runs of each loop (the median is reported)
};

// Runs both loops for c.batch sequences of c.ctx context (random model and
// caches from `seed`, or the files of src), compares their tokens on every
// rank, and prints per-token times (rank 0). The comm, module, cuBLAS
// handle and stream of r are set up (main.cc). 0: identical tokens.
int run_decode(const Config &c, const Rank &r, const Weights &w, const Source &src, const DecodeOptions &o,
               std::string *err);

// The loops' own buffers, shared with run/generate.cc (which runs the
// same two loops on a checkpoint's embedding, after its prompt).
struct DecodeIo {
  tpg_module *mod = nullptr;  // kernels/loop.cu
  float *cand = nullptr;      // [ncand] device
  int ncand = 0;
  int *step = nullptr;        // [4] device: steps made
  int *done = nullptr;        // [B, rounded up to 4] device
  int *out = nullptr;         // pinned, mapped: [N * B] tokens, then [4] progress
  void *emb = nullptr;        // [vocab, hidden] bf16: x = emb[token] for the next step (filled by the caller)
  DecodeIo() = default;
  DecodeIo(const DecodeIo &) = delete;
  DecodeIo &operator=(const DecodeIo &) = delete;
  ~DecodeIo();
};
// Loads the loops' kernels and allocates everything but emb (and the
// embedding table itself: vocab x hidden bf16, not filled) for c.batch
// sequences, R ranks, up to `steps` tokens each.
int alloc_decode_io(const Config &c, const Rank &r, int steps, DecodeIo *io, std::string *err);
// A loop's plan over the decode step s (built with device_loop): the step,
// then greedy sampling across the ranks and the token fed back; device:
// all of it the body of one WHILE node (else the host decides after every
// launch). *bind: the step's bindings and the loop's.
int build_loop(const Config &c, const Rank &r, const Step &s, const DecodeIo &io, const DecodeOptions &o, bool device,
               tpg_plan **out, std::vector<tpg_binding> *bind, std::string *err);
// tpg_graph_create of a loop's plan for rank r (its comm, PDL as r.pdl).
int create_loop_graph(const Rank &r, tpg_plan *p, const std::vector<tpg_binding> &b, tpg_graph **g,
                      std::string *err);

}  // namespace llama

#endif
