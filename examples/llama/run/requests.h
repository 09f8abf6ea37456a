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
  int max_lines = 10000000;       // lines in all, blank ones too (a line number is an int)
};

struct Refusal {
  int line;
  std::string why;  // "requests line L: what"
};

// One line (its text without the newline) as a request, or 1 and *why.
int parse_request(const std::string &text, int line, const RequestLimits &lim, Request *r, std::string *why);

// A requests file taken in pieces as they come, cut anywhere: read_requests
// feeds it a file, tests/fuzz/requests_fuzz.cc a buffer. A line ends at '\n'
// (a "\r" before it is JSON whitespace); the last one needs none. Requests go
// to *ok, refused lines to *bad, each in line order; a line holds at most
// lim.max_line bytes (the rest of a longer one is read and dropped).
class RequestReader {
 public:
  RequestReader(const RequestLimits &lim, std::vector<Request> *ok, std::vector<Refusal> *bad)
      : lim_(lim), ok_(ok), bad_(bad) {}
  // The next n bytes. 1 and *err once the file holds more than
  // lim.max_requests requests or lim.max_lines lines; every later call
  // fails alike.
  int feed(const char *p, size_t n, std::string *err);
  // The end of the file (its last line, if that has no newline).
  int finish(std::string *err);

 private:
  int end_line(std::string *err);

  RequestLimits lim_;
  std::vector<Request> *ok_;
  std::vector<Refusal> *bad_;
  std::string text_;       // the line so far, at most lim_.max_line bytes
  bool open_ = false;      // bytes since the last newline
  bool too_long_ = false;  // and more of them than lim_.max_line
  int line_ = 0, count_ = 0;
  std::string failed_;     // the refusal of the whole file, once there is one
};

// All of `text` as a requests file (one feed, then finish).
int parse_requests(const std::string &text, const RequestLimits &lim, std::vector<Request> *ok,
                   std::vector<Refusal> *bad, std::string *err);

// Every line of `path`, through a RequestReader. 1 and *err ("--requests
// PATH: what") when it is no regular file (a FIFO or a device is never
// read: /dev/zero would be one endless line), cannot be read, or holds more
// than lim.max_requests requests or lim.max_lines lines (nothing is served
// then). The file is read to its size at open.
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
