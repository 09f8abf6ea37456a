// generate.h - token ids in, token ids out (llama --model DIR --prompt-ids ...).
//
// One sequence. The prompt goes through the ordinary decode step one token
// at a time (positions 0 .. P-2, each launch writing that position's K and
// V): a STAND-IN for a prefill graph of M rows with causal attention, which
// is not built yet, so the time to first token grows with P launches of the
// whole step. Then greedy decoding from the last prompt token at position
// P-1 with decode.h's two loops on the same caches (the host loop: a launch
// per token; the device loop: one launch of a WHILE node), whose tokens
// must be identical. Every next-token embedding is written by an engine
// kernel inside the graph (llama_decode_pick: x = emb[token]); the prompt's
// embeddings are row copies from the same table.
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
};

// c: the model (batch 1, max_ctx >= prompt + max_new), w its weights on this
// rank, src where "embed" (the token embedding) comes from. Prints the new
// ids and the times on rank 0. 0: done, host and device loops agreeing.
int run_generate(const Config &c, const Rank &r, const Weights &w, const Source &src, const GenerateOptions &o,
                 std::string *err);

}  // namespace llama

#endif
