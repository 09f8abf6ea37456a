// generate.h - token ids in, token ids out (llama --model DIR --prompt-ids ...).
//
// One sequence. By default the prompt runs through prefill.h's graphs of M
// rows (chunks of at most --prefill-chunk rows, causal attention over the
// cache), whose last chunk ends in the LM head on the prompt's last row and
// greedy argmax: the first new token, and the decode step's input and
// position set from it. Then decode.h's two loops (the host loop: a launch
// per token; the device loop: one launch of a WHILE node) make the rest on
// the same caches; their tokens must be identical.
// --prefill steps keeps the older path for comparison: the prompt through
// the ordinary decode step one token at a time (positions 0 .. P-2), then
// the loops from the last prompt token at position P-1. Both paths must
// make the same tokens (up to near ties of bf16 noise: the GEMMs sum in
// another order at M rows than at one).
#ifndef LLAMA_MODEL_GENERATE_H
#define LLAMA_MODEL_GENERATE_H

#include <string>
#include <vector>

#include "examples/llama/llama.h"

namespace llama {

struct GenerateOptions {
  std::vector<int> prompt;  // token ids, at least one, each < vocab
  int max_new = 32;         // tokens to make at most
  int end_token = -1;       // stop at this token (-1: never)
  enum Prefill { PREFILL_GRAPH, PREFILL_STEPS } prefill = PREFILL_GRAPH;  // --prefill graph|steps
  int chunk = 2048;         // --prefill-chunk: rows per prefill graph, a multiple of 64
  int iters = 1;            // --iters: timed runs (after one warm-up); medians are reported
  std::string logits_out;   // --prompt-logits FILE: the last prompt row's logits, fp32 [vocab] (graph only)
};

// c: the model (batch 1, max_ctx >= prompt + max_new), w its weights on this
// rank, src where "embed" (the token embedding) comes from. Prints the new
// ids and the times on rank 0. 0: done, host and device loops agreeing.
int run_generate(const Config &c, const Rank &r, const Weights &w, const Source &src, const GenerateOptions &o,
                 std::string *err);

}  // namespace llama

#endif
