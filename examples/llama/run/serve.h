// serve.h - llama --model DIR --requests FILE: continuous batching over the
// paged KV cache (docs/serving.md). The scheduler (scheduler.h) makes each
// step; the step runs as the graph of its size from one graph set
// (graphs/serve_step.h, graphs/graph_set.h); the sampled tokens go back to
// the scheduler. Rank 0 writes every request's ids and a summary.
//
// Also: llama --config 8b --layers 32 --graph-sizes vllm builds the serving
// step's graph set for vLLM's 35 batch sizes (random weights) and reports
// its build time and memory, size by size.
#ifndef LLAMA_RUN_SERVE_H
#define LLAMA_RUN_SERVE_H

#include <cstdio>
#include <string>
#include <vector>

#include "examples/llama/llama.h"
#include "examples/llama/run/requests.h"
#include "examples/llama/run/scheduler.h"

namespace llama {

// The serving flags (cli.cc lists them with getopt_long): name, whether it
// takes an argument.
#define LLAMA_SERVE_FLAGS(X)                                                                                   \
  X("requests", 1) X("batch-invariant", 0) X("check-alone", 0) X("max-seqs", 1) X("max-step-rows", 1)      \
  X("kv-blocks", 1) X("graph-sizes", 1) X("attn-split", 1)

struct ServeOptions {
  std::string requests;          // --requests FILE | synthetic:N[:SEED]
  std::string sizes;             // --graph-sizes vllm | all | N,N,...; empty: 1, 2, 4, then every 8 to max_rows
  bool batch_invariant = false;  // --batch-invariant: every GEMM pinned to one kernel (TP 1, sm_90)
  bool check_alone = false;      // --check-alone: then each request again on its own; ids must match
  int max_seqs = 256;            // --max-seqs: sequences at once, 1..1024
  int max_rows = 512;            // --max-step-rows: rows a step holds at most, above max_seqs
  int kv_blocks = 0;             // --kv-blocks: blocks in the pool (0: as free memory allows)
  int split = 0;                 // --attn-split: decode split in keys (0: LLAMA_PAGED_SPLIT)
  std::string flag;              // the first serving flag given ("--max-seqs"), for messages
  // Filled by finish_serve:
  std::vector<Request> reqs;     // the requests to serve
  std::vector<Refusal> refused;  // lines refused before any GPU work
  int max_ctx = 0;               // the longest request's prompt + max_new_tokens
};

// One serving flag (index into LLAMA_SERVE_FLAGS) with its argument: 0, or 2
// (refused, the message on stderr).
int apply_serve_flag(int which, const char *arg, ServeOptions *o);
void serve_usage(FILE *f);

// The requests served on this rank's GPU (the model loaded in w; `src`
// gives the token embedding). out: where rank 0 writes ids.jsonl and
// summary.json (empty: nowhere). 0: served (and, with check_alone under
// batch_invariant, every request identical alone).
int run_serve(const Config &c, const Rank &r, const Weights &w, const Source &src, const ServeOptions &o,
              const std::string &out, std::string *err);

// The serving step's graph set at o.sizes on random weights: build time and
// memory per size and in all; with out, rank 0 writes out/graph_sizes.json.
int run_graph_sizes(const Config &c, const Rank &r, const Weights &w, const Source &src, const ServeOptions &o,
                    const std::string &out, std::string *err);

}  // namespace llama

#endif
