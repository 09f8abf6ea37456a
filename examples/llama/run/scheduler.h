// scheduler.h - continuous batching over the paged KV cache, on the host:
// which requests run, which rows each step holds, which KV blocks each
// sequence owns. No CUDA here: the serving loop (serve.cc) turns a StepPlan
// into one graph launch and hands the sampled tokens back; serve_test runs
// the same logic against a stand-in step on a CPU.
//
// Policy (docs/serving.md):
// - Admission, first come first served: the oldest waiting request starts
//   when a sequence slot is free and the pool can promise it every block it
//   may need (ceil((prompt + max_new) / LLAMA_KV_BLOCK)); otherwise it and
//   every later one wait (no request overtakes an older one, none is ever
//   preempted, so a full pool means waiting, never failing). Blocks are
//   taken from the free list as positions are reached and return when the
//   sequence ends.
// - Each step: one decode row per sequence past its prompt, then chunks of
//   the prompts being read (oldest first, at most max_prompts of them), then
//   padding. Its size is one of the graph sizes: the largest that holds the
//   decode rows and at least one prompt row without padding, else the
//   smallest that holds them all (a prompt chunk then fills what it can).
// - A sequence ends after max_new tokens or at its end token; its slot and
//   blocks are free for the next step.
#ifndef LLAMA_RUN_SCHEDULER_H
#define LLAMA_RUN_SCHEDULER_H

#include <deque>
#include <string>
#include <vector>

namespace llama {

struct Request {
  int line = 0;              // its line in the requests file (1-based), or its index + 1 (synthetic)
  std::string id;            // the request's own "id", as JSON text (empty: none)
  std::vector<int> prompt;   // token ids, at least one
  int max_new = 1;           // tokens to make, >= 1
  int end_token = -1;        // stop at this token (-1: never)
};

struct SchedConfig {
  std::vector<int> sizes;    // graph sizes (rows a step may hold), ascending; the last is the most
  int max_seqs = 256;        // sequences at once (slots)
  int max_prompts = 16;      // prompts whose rows may share a step
  int nblocks = 0;           // blocks in the pool
  int block = 64;            // positions a block (LLAMA_KV_BLOCK)
  int max_blocks = 128;      // blocks a sequence may hold (its block-table row)
  int rows_per_item = 16;    // rows of a prefill work item (LLAMA_PREFILL_POSITIONS(G))
};

// One step, as the graph of `size` rows wants it (kernels.h, "The serving
// step"): rows [0, nd) decode, then prompt rows, then padding (seq -1).
struct StepPlan {
  int size = 0, nd = 0, prompt_rows = 0;
  std::vector<int> ids, pos, seq;   // `size` each
  std::vector<int> work;            // prefill work items, (first row, rows) pairs
  std::vector<int> sample;          // rows whose next token is wanted: decode rows, then prompts' last rows
  std::vector<int> changed;         // sequence slots whose block-table row changed since the last step
};

// What became of a request.
struct Outcome {
  std::vector<int> ids;             // the new tokens
  bool ended = false;               // stopped at its end token (else after max_new)
  double first_s = -1;              // time of its first token, from the start
  std::vector<double> token_s;      // the time each token came (first_s is token_s[0])
};

class Scheduler {
 public:
  // Every request must fit: prompt + max_new <= max_blocks * block positions,
  // and ceil((prompt + max_new) / block) <= nblocks (serve.cc refuses the
  // others before they get here). 0, or 1 and *err (a bad config).
  int init(const SchedConfig &c, const std::vector<Request> &reqs, std::string *err);
  bool done() const { return finished_ == (int)reqs_.size(); }
  // The next step; false when nothing can run (only when done()).
  bool next(StepPlan *p);
  // The tokens of p's sampled rows (tokens[j] for row p.sample[j]), at time
  // now_s since the start: each sequence takes its token; finished ones end.
  void commit(const StepPlan &p, const std::vector<int> &tokens, double now_s);
  // Block tables, [max_seqs][max_blocks], -1 where unused (the host's copy).
  const std::vector<int> &tables() const { return table_; }
  const std::vector<Outcome> &outcomes() const { return out_; }
  int peak_blocks() const { return peak_; }
  int blocks_in_use() const { return cfg_.nblocks - (int)free_.size(); }
  int running() const { return running_; }

 private:
  struct Seq {
    int req = -1;          // -1: a free slot
    int cached = 0;        // positions in the cache
    int held = 0;          // blocks it holds
    int promised = 0;      // blocks it may still need
  };
  int need_blocks(const Request &r) const;
  void admit();
  bool take_block(int slot);
  void add_row(StepPlan *p, int slot, int id, int pos);
  int choose_size(int nd, int pending) const;
  void add_prompts(StepPlan *p, const std::vector<int> &order, int budget);
  void finish(int slot);

  SchedConfig cfg_;
  std::vector<Request> reqs_;
  std::vector<Outcome> out_;
  std::deque<int> waiting_;        // request indices, oldest first
  std::vector<Seq> seqs_;          // by slot
  std::vector<int> admitted_;      // slots in admission order (the prompts' order)
  std::vector<int> free_;          // free blocks
  std::vector<int> table_;
  std::vector<char> changed_;
  int promised_ = 0, finished_ = 0, running_ = 0, peak_ = 0;
};

// The graph sizes a spec names, ascending: "vllm" (1, 2, 4, 8, 16, 24, ...,
// 256), "all" (1 .. max_rows), a comma list, or empty: 1, 2, 4 and every 8
// up to max_rows. 1 and *err on a malformed list or a size outside 1..max_rows.
int graph_sizes(const std::string &spec, int max_rows, std::vector<int> *out, std::string *err);

}  // namespace llama

#endif
