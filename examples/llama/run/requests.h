// requests.h - what `llama --requests` serves: a JSON-lines file, one
// request a line, or synthetic:N[:SEED] (docs/serving.md has the format and
// the limits).
//
//   {"prompt_ids": [128000, 791, 6460], "max_new_tokens": 64, "end_token": 128009, "id": "a"}
//
// "prompt_ids" (1 or more ids below the vocabulary) and "max_new_tokens"
// (>= 1) are required; "end_token" (an id, or null) and "id" (a string or a
// number, echoed in the output) are optional; any other key, a value of
// another kind, a line that is not one JSON object, or a request longer than
// a sequence may be is refused alone, by its line number, and the rest are
// served. Blank lines are skipped.
#ifndef LLAMA_RUN_REQUESTS_H
#define LLAMA_RUN_REQUESTS_H

#include <cstdint>
#include <string>
#include <vector>

#include "examples/llama/run/scheduler.h"

namespace llama {

struct RequestLimits {
  int vocab = 0;                  // ids must be below it (0: not checked yet)
  int max_ctx = 8192;             // prompt + max_new_tokens must be at most this
  size_t max_line = 1 << 20;      // bytes a line
  int max_requests = 100000;      // lines holding a request, refused or not
};

struct Refusal {
  int line;
  std::string why;  // "requests line L: what"
};

// One line (its text without the newline) as a request, or 1 and *why.
int parse_request(const std::string &text, int line, const RequestLimits &lim, Request *r, std::string *why);

// Every line of `path`: requests into *ok, refused lines into *bad (in line
// order). 1 and *err when the file cannot be read or holds more than
// lim.max_requests requests (nothing is served then).
int read_requests(const std::string &path, const RequestLimits &lim, std::vector<Request> *ok,
                  std::vector<Refusal> *bad, std::string *err);

// "synthetic:N" or "synthetic:N:SEED" (seed 1 by default): N requests whose
// prompt and output lengths follow chat traffic, seeded; 1 and *err on a
// malformed spec. Lengths: lo + min(a, b) for a, b uniform in [0, hi - lo]
// (a triangular distribution falling from lo to hi, mean lo + (hi - lo) / 3),
// prompts 50..1000 (mean 367), outputs 50..500 (mean 200); ids uniform below
// the vocabulary. The generator is splitmix64, one stream per seed, so
// bench/torch_serve.py makes the same requests.
bool is_synthetic(const std::string &spec);
int synthetic_requests(const std::string &spec, int vocab, std::vector<Request> *out, std::string *err);

// splitmix64: the synthetic requests' generator (*state advances).
uint64_t splitmix64(uint64_t *state);

}  // namespace llama

#endif
