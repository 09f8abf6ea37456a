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

}  // namespace llama

#endif
