// serve_report.h - what the serving loop reports: per-step counts, the
// summary (output tokens/s, time to first token and inter-token latency
// percentiles, peak KV blocks), the files rank 0 writes (ids.jsonl,
// summary.json), and the graph-size report of --graph-sizes.
#ifndef LLAMA_RUN_SERVE_REPORT_H
#define LLAMA_RUN_SERVE_REPORT_H

#include <string>
#include <vector>

#include "examples/llama/graphs/graph_set.h"
#include "examples/llama/graphs/serve_step.h"
#include "examples/llama/run/requests.h"
#include "examples/llama/run/scheduler.h"

namespace llama {

struct ServeStats {
  long steps = 0, rows = 0, decode_rows = 0, prompt_rows = 0, padding_rows = 0;
  double seconds = 0;   // from the first step to the last token
  int peak_blocks = 0;
  void add_step(const StepPlan &p);
};

struct ServeSummary {
  int served = 0, refused = 0;
  long out_tokens = 0, prompt_tokens = 0;
  double seconds = 0, tokens_per_s = 0;
  double ttft_p50_ms = 0, ttft_p99_ms = 0, itl_p50_ms = 0, itl_p99_ms = 0;
  ServeStats st;
  int nblocks = 0, sizes = 0;
  double build_ms = 0;
  size_t arena = 0, own = 0, measured = 0;
  bool invariant = false;
};

// Times are from the start of the first step: every request of the run
// arrives then, so a request's time to first token includes its wait.
ServeSummary summarize(const std::vector<Request> &reqs, const std::vector<Outcome> &out, const ServeStats &st,
                       const ServeShape &sh, const GraphSet &set, int refused, bool invariant);
void print_summary(const ServeSummary &s);

// dir/ids.jsonl: one line per request line, in line order, served
// ({"line", "id", "prompt_tokens", "ids", "finish", "ttft_ms"}) or refused
// ({"line", "refused"}); dir/summary.json: the summary. 0, or 1 and *err.
int write_outputs(const std::string &dir, const std::vector<Request> &reqs, const std::vector<Outcome> &out,
                  const std::vector<Refusal> &refused, const ServeSummary &s, std::string *err);

// Per size: the builder's time, graph creation, instantiation, its own
// memory and the measured; then the set's totals against the targets.
// Returns the totals as JSON (build_s and measured_bytes, as
// bench/torch_capture.py's --ours reads them).
std::string print_graph_sizes(const GraphSet &set, const ServeBuffers &b, const Config &c);
// dir/graph_sizes.json. 0, or 1 and *err.
int write_graph_sizes(const std::string &dir, const std::string &json, std::string *err);

}  // namespace llama

#endif
