// scheduler.cc - scheduler.h: admission, the rows of each step, blocks and
// retirement, in plain C++ (serve_test.cc checks it on a CPU).
#include "examples/llama/run/scheduler.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>

namespace llama {

int Scheduler::init(const SchedConfig &c, const std::vector<Request> &reqs, std::string *err) {
  cfg_ = c;
  reqs_ = reqs;
  const bool sorted = std::is_sorted(c.sizes.begin(), c.sizes.end());
  if (c.sizes.empty() || !sorted || c.sizes[0] < 1 || c.max_seqs < 1 || c.max_prompts < 1 || c.nblocks < 1 ||
      c.block < 1 || c.max_blocks < 1 || c.rows_per_item < 1 || c.sizes.back() <= c.max_seqs) {
    *err = "scheduler: graph sizes ascending from 1 with the largest above max_seqs (" +
           std::to_string(c.max_seqs) + "), and every count positive";
    return 1;
  }
  for (const Request &r : reqs) {
    const long need = (long)r.prompt.size() + r.max_new;
    if (r.prompt.empty() || r.max_new < 1 || need > (long)c.max_blocks * c.block || need_blocks(r) > c.nblocks) {
      *err = "scheduler: request of line " + std::to_string(r.line) + " cannot run here (" +
             std::to_string(r.prompt.size()) + " + " + std::to_string(r.max_new) + " positions)";
      return 1;
    }
  }
  out_.assign(reqs.size(), Outcome());
  waiting_.clear();
  for (size_t i = 0; i < reqs.size(); i++) waiting_.push_back((int)i);
  seqs_.assign(c.max_seqs, Seq());
  admitted_.clear();
  free_.clear();
  for (int b = c.nblocks - 1; b >= 0; b--) free_.push_back(b);  // taken from the back: block 0 first
  table_.assign((size_t)c.max_seqs * c.max_blocks, -1);
  changed_.assign(c.max_seqs, 0);
  promised_ = finished_ = running_ = peak_ = 0;
  return 0;
}

int Scheduler::need_blocks(const Request &r) const {
  return (int)(((long)r.prompt.size() + r.max_new + cfg_.block - 1) / cfg_.block);
}

// The oldest waiting requests, while a slot is free and the pool can promise
// their blocks.
void Scheduler::admit() {
  while (!waiting_.empty()) {
    int slot = 0;
    while (slot < cfg_.max_seqs && seqs_[slot].req >= 0) slot++;
    if (slot == cfg_.max_seqs) return;
    const int need = need_blocks(reqs_[waiting_.front()]);
    if ((int)free_.size() - promised_ < need) return;
    seqs_[slot] = Seq{waiting_.front(), 0, 0, need};
    promised_ += need;
    admitted_.push_back(slot);
    running_++;
    waiting_.pop_front();
  }
}

bool Scheduler::take_block(int slot) {
  Seq &s = seqs_[slot];
  if (free_.empty() || s.promised < 1 || s.held >= cfg_.max_blocks) return false;  // the promise makes this unreachable
  table_[(size_t)slot * cfg_.max_blocks + s.held++] = free_.back();
  free_.pop_back();
  s.promised--;
  promised_--;
  changed_[slot] = 1;
  peak_ = std::max(peak_, blocks_in_use());
  return true;
}

void Scheduler::add_row(StepPlan *p, int slot, int id, int pos) {
  while (seqs_[slot].held * cfg_.block <= pos && take_block(slot)) {
  }
  p->ids.push_back(id);
  p->pos.push_back(pos);
  p->seq.push_back(slot);
}

// The step's size for nd decode rows and `pending` prompt rows that could run.
int Scheduler::choose_size(int nd, int pending) const {
  const int lo = nd + (pending > 0 ? 1 : 0), hi = std::min(nd + pending, cfg_.sizes.back());
  int best = -1;
  for (int s : cfg_.sizes)
    if (s >= lo && s <= hi) best = s;  // the largest without padding
  if (best > 0) return best;
  for (int s : cfg_.sizes)
    if (s >= lo) return s;  // the smallest that holds them all
  return cfg_.sizes.back();
}

// Prompt chunks, oldest prompt first, up to `budget` rows: each a run of
// consecutive positions, cut into work items; a run that ends its prompt
// has its last row sampled.
void Scheduler::add_prompts(StepPlan *p, const std::vector<int> &order, int budget) {
  std::vector<int> last_rows;
  for (int slot : order) {
    if (budget <= 0) break;
    const Seq &s = seqs_[slot];
    const std::vector<int> &prompt = reqs_[s.req].prompt;
    const int n = std::min(budget, (int)prompt.size() - s.cached), i0 = (int)p->seq.size();
    for (int k = 0; k < n; k++) add_row(p, slot, prompt[s.cached + k], s.cached + k);
    for (int k = 0; k < n; k += cfg_.rows_per_item) {
      p->work.push_back(i0 + k);
      p->work.push_back(std::min(cfg_.rows_per_item, n - k));
    }
    if (s.cached + n == (int)prompt.size()) last_rows.push_back(i0 + n - 1);
    budget -= n;
    p->prompt_rows += n;
  }
  p->sample.insert(p->sample.end(), last_rows.begin(), last_rows.end());
}

bool Scheduler::next(StepPlan *p) {
  *p = StepPlan();
  admit();
  std::vector<int> decode, prompts;
  int pending = 0;
  for (int slot : admitted_) {
    const Seq &s = seqs_[slot];
    const int plen = (int)reqs_[s.req].prompt.size();
    if (s.cached >= plen) {
      decode.push_back(slot);
    } else if ((int)prompts.size() < cfg_.max_prompts) {
      prompts.push_back(slot);
      pending += plen - s.cached;
    }
  }
  if (decode.empty() && prompts.empty()) return false;
  p->nd = (int)decode.size();
  p->size = choose_size(p->nd, pending);
  for (int slot : decode) {
    const Seq &s = seqs_[slot];
    p->sample.push_back((int)p->seq.size());
    add_row(p, slot, out_[s.req].ids.back(), s.cached);
  }
  add_prompts(p, prompts, p->size - p->nd);
  while ((int)p->seq.size() < p->size) p->ids.push_back(0), p->pos.push_back(0), p->seq.push_back(-1);
  for (int slot = 0; slot < cfg_.max_seqs; slot++)
    if (changed_[slot]) p->changed.push_back(slot), changed_[slot] = 0;
  return true;
}

void Scheduler::finish(int slot) {
  Seq &s = seqs_[slot];
  for (int b = 0; b < s.held; b++) {
    int &e = table_[(size_t)slot * cfg_.max_blocks + b];
    free_.push_back(e);
    e = -1;
  }
  promised_ -= s.promised;
  admitted_.erase(std::find(admitted_.begin(), admitted_.end(), slot));
  s = Seq();
  running_--;
  finished_++;
}

void Scheduler::commit(const StepPlan &p, const std::vector<int> &tokens, double now_s) {
  for (int slot : p.seq)
    if (slot >= 0) seqs_[slot].cached++;  // a row wrote the sequence's next position
  for (size_t j = 0; j < p.sample.size() && j < tokens.size(); j++) {
    const int slot = p.seq[p.sample[j]];
    const Request &r = reqs_[seqs_[slot].req];
    Outcome &o = out_[seqs_[slot].req];
    o.ids.push_back(tokens[j]);
    o.token_s.push_back(now_s);
    if (o.first_s < 0) o.first_s = now_s;
    o.ended = tokens[j] == r.end_token;
    if (o.ended || (int)o.ids.size() >= r.max_new) finish(slot);
  }
}

int graph_sizes(const std::string &spec, int max_rows, std::vector<int> *out, std::string *err) {
  out->clear();
  if (spec == "vllm") {
    for (int v : {1, 2, 4}) out->push_back(v);
    for (int v = 8; v <= 256; v += 8) out->push_back(v);
  } else if (spec == "all") {
    for (int v = 1; v <= max_rows; v++) out->push_back(v);
  } else if (spec.empty()) {
    for (int v : {1, 2, 4}) out->push_back(v);
    for (int v = 8; v <= max_rows; v += 8) out->push_back(v);
  } else {
    const char *p = spec.c_str();
    for (;;) {
      char *end;
      errno = 0;
      const long v = std::strtol(p, &end, 10);
      if (end == p || errno || v < 1 || v > 4096 || (*end && *end != ',') || *p == '+' || *p == '-' || *p == ' ') {
        *err = "'" + spec + "': expected vllm, all, or sizes separated by commas (1..4096)";
        return 1;
      }
      out->push_back((int)v);
      if (!*end) break;
      p = end + 1;
    }
  }
  std::sort(out->begin(), out->end());
  out->erase(std::unique(out->begin(), out->end()), out->end());
  if (out->empty() || out->back() > max_rows) {
    *err = "'" + spec + "': sizes above --max-step-rows " + std::to_string(max_rows);
    return 1;
  }
  return 0;
}

}  // namespace llama
