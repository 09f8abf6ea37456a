// serve_test.cc - llama --requests on a CPU: the scheduler against a
// stand-in step, the requests reader, the synthetic requests, the graph
// sizes, and the pinned GEMM kernels' file read back by tpgraph's own tuner.
//
// The stand-in step keeps, per sequence slot, the tokens written at each
// position (what a KV cache would hold) and answers each sampled row with a
// hash of that history, so a request's tokens depend on its own history
// only, as the real step's do under --batch-invariant. Every step is checked
// against the contract of kernels.h's serving step (decode rows first, each
// a sequence's next position and last token; prompt rows consecutive per
// sequence and covered exactly by work items of at most rows_per_item rows;
// padding last; a size of the set; every position in a block the sequence
// owns alone; blocks within the pool); at the end each request's tokens must
// equal its direct generation, and so its run alone, whatever the pool,
// slots and step sizes.
//
//   bazel test //examples/llama:serve_test
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "examples/llama/graphs/gemm_pin.h"
#include "examples/llama/run/requests.h"
#include "examples/llama/run/scheduler.h"
#include "lib/gemm/select.h"
#include "lib/gemm/tune.h"

using namespace llama;

namespace {

int g_pass = 0, g_fail = 0;

bool expect(bool ok, const std::string &what) {
  std::printf("%s %s\n", ok ? "PASS" : "FAIL", what.c_str());
  (ok ? g_pass : g_fail)++;
  return ok;
}

constexpr int kVocab = 1000;

// The stand-in model: a token from the history (FNV-1a of the ids).
int next_token(const std::vector<int> &history) {
  uint64_t h = 1469598103934665603ull;
  for (int t : history) h = (h ^ (uint64_t)t) * 1099511628211ull;
  return (int)(h % kVocab);
}

// What a request makes on its own: tokens from prompt + tokens so far.
std::vector<int> direct(const Request &r) {
  std::vector<int> h = r.prompt, out;
  while ((int)out.size() < r.max_new) {
    const int t = next_token(h);
    out.push_back(t);
    if (t == r.end_token) break;
    h.push_back(t);
  }
  return out;
}

// The stand-in step: checks a plan against the serving step's contract and
// answers its sampled rows. *why gets the first broken rule.
struct FakeStep {
  SchedConfig cfg;
  std::vector<std::vector<int>> cache;  // per slot: the id at each position
  int steps = 0, max_rows_used = 0;

  bool run(const StepPlan &p, const std::vector<int> &tables, std::vector<int> *tokens, std::string *why);
  bool check_rows(const StepPlan &p, std::string *why);
  bool check_blocks(const StepPlan &p, const std::vector<int> &tables, std::string *why);
};

bool FakeStep::check_rows(const StepPlan &p, std::string *why) {
  const int T = p.size;
  if (!std::binary_search(cfg.sizes.begin(), cfg.sizes.end(), T) || (int)p.seq.size() != T || (int)p.ids.size() != T ||
      (int)p.pos.size() != T)
    return *why = "step of " + std::to_string(T) + " rows: not a size of the set, or arrays of another length", false;
  std::set<int> dec;
  for (int i = 0; i < p.nd; i++)
    if (p.seq[i] < 0 || !dec.insert(p.seq[i]).second)
      return *why = "decode row " + std::to_string(i) + ": padding or a sequence twice", false;
  std::vector<char> covered(T, 0);
  for (size_t k = 0; k + 1 < p.work.size(); k += 2) {
    const int i0 = p.work[k], n = p.work[k + 1];
    if (i0 < p.nd || n < 1 || n > cfg.rows_per_item || i0 + n > T)
      return *why = "work item (" + std::to_string(i0) + ", " + std::to_string(n) + ") outside the prompt rows", false;
    for (int i = i0; i < i0 + n; i++) {
      if (covered[i]++ || p.seq[i] != p.seq[i0] || p.pos[i] != p.pos[i0] + (i - i0) || dec.count(p.seq[i]))
        return *why = "work item at row " + std::to_string(i) + ": not consecutive positions of one prompt", false;
    }
  }
  int prompt_rows = 0;
  bool pad = false;
  for (int i = p.nd; i < T; i++) {
    pad |= p.seq[i] < 0;
    if (p.seq[i] >= 0 && (pad || !covered[i]))
      return *why = "row " + std::to_string(i) + ": a prompt row after padding or in no work item", false;
    prompt_rows += p.seq[i] >= 0;
  }
  if (prompt_rows != p.prompt_rows) return *why = "prompt rows miscounted", false;
  std::set<int> prompts;
  for (int i = p.nd; i < p.nd + prompt_rows; i++) prompts.insert(p.seq[i]);
  if ((int)prompts.size() > cfg.max_prompts) return *why = "more prompts in a step than max_prompts", false;
  return true;
}

bool FakeStep::check_blocks(const StepPlan &p, const std::vector<int> &tables, std::string *why) {
  std::map<int, int> owner;
  for (int s = 0; s < cfg.max_seqs; s++)
    for (int b = 0; b < cfg.max_blocks; b++) {
      const int blk = tables[(size_t)s * cfg.max_blocks + b];
      if (blk < 0) continue;
      if (blk >= cfg.nblocks || !owner.insert({blk, s}).second)
        return *why = "block " + std::to_string(blk) + " outside the pool or owned twice", false;
    }
  for (int i = 0; i < p.size; i++)
    if (p.seq[i] >= 0 && tables[(size_t)p.seq[i] * cfg.max_blocks + p.pos[i] / cfg.block] < 0)
      return *why = "row " + std::to_string(i) + ": its position has no block", false;
  return true;
}

bool FakeStep::run(const StepPlan &p, const std::vector<int> &tables, std::vector<int> *tokens, std::string *why) {
  if (!check_rows(p, why) || !check_blocks(p, tables, why)) return false;
  steps++;
  max_rows_used = std::max(max_rows_used, p.nd + p.prompt_rows);
  cache.resize(cfg.max_seqs);
  for (int i = 0; i < p.size; i++) {
    const int s = p.seq[i];
    if (s < 0) continue;
    if (p.pos[i] == 0) cache[s].clear();  // a new sequence in this slot
    if (p.pos[i] != (int)cache[s].size())
      return *why = "row " + std::to_string(i) + ": position " + std::to_string(p.pos[i]) + ", the cache holds " +
                    std::to_string(cache[s].size()), false;
    cache[s].push_back(p.ids[i]);
  }
  tokens->clear();
  for (int row : p.sample) {
    const int s = p.seq[row];
    if (p.pos[row] + 1 != (int)cache[s].size()) return *why = "a sampled row that is not its sequence's last", false;
    tokens->push_back(next_token(cache[s]));
  }
  return true;
}

// Serves `reqs` under `cfg` with the stand-in step; checks every step and
// every request against its direct generation. Returns the outcomes.
std::vector<Outcome> serve(const SchedConfig &cfg, const std::vector<Request> &reqs, const std::string &what,
                           int *peak = nullptr) {
  Scheduler s;
  std::string err;
  if (s.init(cfg, reqs, &err)) {
    expect(false, what + ": " + err);
    return {};
  }
  FakeStep f;
  f.cfg = cfg;
  StepPlan p;
  std::vector<int> tokens;
  int steps = 0;
  while (!s.done() && steps < 100000) {
    if (!s.next(&p) || !f.run(p, s.tables(), &tokens, &err)) {
      expect(false, what + ": step " + std::to_string(steps) + ": " + (err.empty() ? "nothing to run" : err));
      return {};
    }
    s.commit(p, tokens, steps++);
  }
  size_t same = 0;
  for (size_t i = 0; i < reqs.size(); i++) same += s.outcomes()[i].ids == direct(reqs[i]);
  if (peak) *peak = s.peak_blocks();
  expect(s.done() && same == reqs.size() && s.blocks_in_use() == 0 && s.running() == 0,
         what + ": " + std::to_string(same) + " of " + std::to_string(reqs.size()) + " requests as generated "
         "directly, in " + std::to_string(steps) + " steps, peak " + std::to_string(s.peak_blocks()) + " of " +
         std::to_string(cfg.nblocks) + " blocks, all returned");
  return s.outcomes();
}

std::vector<Request> mixed_requests(int n, unsigned seed) {
  std::mt19937 rng(seed);
  std::vector<Request> v;
  for (int i = 0; i < n; i++) {
    Request r;
    r.line = i + 1;
    const int P = std::uniform_int_distribution<int>(1, i % 5 == 0 ? 700 : 150)(rng);
    for (int k = 0; k < P; k++) r.prompt.push_back(std::uniform_int_distribution<int>(0, kVocab - 1)(rng));
    r.max_new = std::uniform_int_distribution<int>(1, 60)(rng);
    if (i % 3 == 0) r.end_token = next_token(r.prompt) == 0 ? 1 : direct(r)[std::min(r.max_new - 1, 5)];
    v.push_back(r);
  }
  return v;
}

SchedConfig config(int max_seqs, int max_rows, int nblocks) {
  SchedConfig c;
  std::string err;
  graph_sizes("", max_rows, &c.sizes, &err);
  c.max_seqs = max_seqs;
  c.max_prompts = 4;
  c.nblocks = nblocks;
  c.block = 64;
  c.max_blocks = 16;
  c.rows_per_item = 16;
  return c;
}

}  // namespace

namespace {

// Batches of every shape against the stand-in, and each request alone.
void check_scheduler() {
  const std::vector<Request> reqs = mixed_requests(40, 11);
  const std::vector<Outcome> big = serve(config(16, 64, 4096), reqs, "40 requests, 16 slots, steps up to 64 rows");
  serve(config(3, 8, 4096), reqs, "40 requests, 3 slots, steps up to 8 rows");
  int peak = 0;
  serve(config(16, 128, 30), reqs, "40 requests, a pool of 30 blocks (most wait for blocks)", &peak);
  expect(peak <= 30, "tiny pool: peak " + std::to_string(peak) + " blocks of 30, never more");
  size_t alone = 0;
  for (size_t i = 0; i < reqs.size() && !big.empty(); i++) {
    Scheduler s;
    std::string err;
    FakeStep f;
    f.cfg = config(1, 8, 64);
    s.init(f.cfg, {reqs[i]}, &err);
    StepPlan p;
    std::vector<int> t;
    int n = 0;
    while (!s.done() && s.next(&p) && f.run(p, s.tables(), &t, &err)) s.commit(p, t, n++);
    alone += s.done() && s.outcomes()[0].ids == big[i].ids && s.outcomes()[0].ended == big[i].ended;
  }
  expect(alone == reqs.size(), "each request alone (1 slot, 8-row steps) = in the batch: " + std::to_string(alone) +
                                   " of " + std::to_string(reqs.size()));
  // A request that does not fit is refused by init; one that fits the pool exactly runs.
  Scheduler s;
  std::string err;
  Request r;
  r.prompt.assign(100, 1);
  r.max_new = 29;  // 129 positions: 3 blocks
  const int a = s.init(config(2, 8, 2), {r}, &err);
  std::string err2;
  const int b = s.init(config(2, 8, 3), {r}, &err2);
  expect(a != 0 && err.find("cannot run here") != std::string::npos && b == 0,
         "a request of 3 blocks: refused by a pool of 2 (" + err + "), taken by one of 3");
}

// Admission is first come, first served: a request never starts before an
// older one, even when a younger one would fit the pool first.
void check_fifo() {
  std::vector<Request> reqs;
  for (int i = 0; i < 6; i++) {
    Request r;
    r.line = i + 1;
    r.prompt.assign(i == 2 ? 400 : 10, 7 + i);
    r.max_new = i == 2 ? 100 : 20;
    reqs.push_back(r);
  }
  Scheduler s;
  std::string err;
  s.init(config(8, 16, 10), reqs, &err);  // request 2 needs 8 of 10 blocks
  FakeStep f;
  f.cfg = config(8, 16, 10);
  std::vector<int> first(reqs.size(), -1), t;
  StepPlan p;
  int n = 0;
  while (!s.done() && s.next(&p) && f.run(p, s.tables(), &t, &err)) {
    for (int i = 0; i < p.size; i++)  // request k's prompt is all 7 + k: its first row names it
      if (p.seq[i] >= 0 && p.pos[i] == 0 && first[p.ids[i] - 7] < 0) first[p.ids[i] - 7] = n;
    s.commit(p, t, n++);
  }
  expect(s.done() && std::is_sorted(first.begin(), first.end()),
         "first come, first served: requests start in order (a big one holds the younger back)");
}

}  // namespace

namespace {

void check_requests() {
  const char *path = "/tmp/serve_test_requests.jsonl";
  FILE *f = std::fopen(path, "w");
  std::fprintf(f,
               "{\"prompt_ids\": [1, 2, 3], \"max_new_tokens\": 4}\n"                 // 1 ok
               "\n"                                                                     // 2 blank
               "{\"prompt_ids\": [1, 2], \"max_new_tokens\": 4\n"                      // 3 bad JSON
               "[1, 2]\n"                                                               // 4 not an object
               "{\"prompt_ids\": [1], \"max_new_tokens\": 2, \"temperature\": 0}\n"     // 5 unknown key
               "{\"prompt_ids\": [1, -4], \"max_new_tokens\": 2}\n"                    // 6 negative id
               "{\"prompt_ids\": [1, 2.5], \"max_new_tokens\": 2}\n"                   // 7 not an integer
               "{\"max_new_tokens\": 2}\n"                                              // 8 missing prompt
               "{\"prompt_ids\": [5], \"max_new_tokens\": 0}\n"                        // 9 no token to make
               "{\"prompt_ids\": [5, 6, 7, 8, 9], \"max_new_tokens\": 8190}\n"         // 10 too long for a sequence
               "{\"prompt_ids\": [5], \"max_new_tokens\": 3, \"end_token\": null, \"id\": \"a\\\"b\"}\n"  // 11 ok
               "{\"prompt_ids\": [5], \"max_new_tokens\": 3, \"max_new_tokens\": 3}\n"  // 12 duplicate key
               "{\"prompt_ids\": [], \"max_new_tokens\": 3}\n"                         // 13 empty prompt
               "{\"prompt_ids\": [7, 8], \"max_new_tokens\": 3, \"end_token\": 9, \"id\": 42}\n");  // 14 ok
  std::fprintf(f, "{\"prompt_ids\": [%s1], \"max_new_tokens\": 1}\n",
               std::string(3000, ' ').c_str());  // 15 too long a line
  std::fclose(f);
  RequestLimits lim;
  lim.max_ctx = 8192;
  lim.max_line = 2000;
  std::vector<Request> ok;
  std::vector<Refusal> bad;
  std::string err;
  const int rc = read_requests(path, lim, &ok, &bad, &err);
  std::string lines, msgs;
  for (const Refusal &b : bad) lines += " " + std::to_string(b.line), msgs += "\n      " + b.why;
  const bool good = rc == 0 && ok.size() == 3 && ok[0].line == 1 && ok[1].line == 11 && ok[1].id == "\"a\\\"b\"" &&
                    ok[1].end_token == -1 && ok[2].line == 14 && ok[2].id == "42" && ok[2].end_token == 9 &&
                    lines == " 3 4 5 6 7 8 9 10 12 13 15";
  expect(good, "requests file: lines 1, 11, 14 served; refused, each by its line:" + lines + msgs);
  bool named = true;
  for (const Refusal &b : bad) named &= b.why.find("requests line " + std::to_string(b.line) + ": ") == 0;
  expect(named && bad.size() > 8 && bad[2].why.find("unknown key \"temperature\"") != std::string::npos &&
             bad[7].why.find("8195 positions") != std::string::npos,
         "every refusal starts with its line and says what is wrong");
  lim.max_requests = 2;
  ok.clear();
  bad.clear();
  const int many = read_requests(path, lim, &ok, &bad, &err);
  expect(many != 0 && err.find("more than 2 requests") != std::string::npos,
         "more requests than the limit: the file is refused (" + err + ")");
  const int none = read_requests("/tmp/no/such/file", lim, &ok, &bad, &err);
  expect(none != 0 && err.find("No such file") != std::string::npos, "an unreadable file is refused: " + err);
  lim = RequestLimits();
  lim.max_lines = 14;
  const int capped = read_requests(path, lim, &ok, &bad, &err);
  expect(capped != 0 && err.find("more than 14 lines") != std::string::npos,
         "more lines than the limit, blank ones counted: the file is refused (" + err + ")");
}

// What is no regular file is refused at once by its path, never read: a
// device (/dev/zero is one endless line: the reader looped on it), a FIFO
// with no writer (opening it waited), a directory. alarm() turns a hang into
// a failure.
void check_special_files() {
  const char *fifo = "/tmp/serve_test_requests.fifo";
  unlink(fifo);
  const bool made = mkfifo(fifo, 0600) == 0;
  std::fflush(stdout);  // what passed so far shows, should the alarm end the test
  alarm(10);
  std::string all;
  int refused = 0;
  for (const char *p : {"/dev/zero", fifo, "/tmp"}) {
    std::vector<Request> ok;
    std::vector<Refusal> bad;
    std::string err;
    const bool no = read_requests(p, RequestLimits(), &ok, &bad, &err) != 0 && ok.empty() && bad.empty() &&
                    err.find("not a regular file") != std::string::npos && err.find(p) != std::string::npos;
    refused += no;
    all += "\n      " + err;
  }
  alarm(0);
  unlink(fifo);
  expect(made && refused == 3, "a device, a FIFO and a directory as --requests: refused by path" + all);
}

// The reader takes a file in pieces cut anywhere: one byte at a time gives
// what the whole text gives (the last line without its newline, a line over
// the limit split across pieces, CRLF).
void check_reader_pieces() {
  const std::string text = "{\"prompt_ids\": [1], \"max_new_tokens\": 2}\r\n\n  \r\n[1]\n" + std::string(60, ' ') +
                           "1\n{\"prompt_ids\": [3, 4], \"max_new_tokens\": 1, \"id\": 7}";
  RequestLimits lim;
  lim.max_line = 56;
  std::vector<Request> ok, ok1;
  std::vector<Refusal> bad, bad1;
  std::string err;
  const int whole = parse_requests(text, lim, &ok, &bad, &err);
  RequestReader rd(lim, &ok1, &bad1);
  int bytes = 0;
  for (char ch : text) bytes |= rd.feed(&ch, 1, &err);
  bytes |= rd.finish(&err);
  bool same = ok.size() == ok1.size() && bad.size() == bad1.size();
  for (size_t i = 0; same && i < ok.size(); i++)
    same = ok[i].line == ok1[i].line && ok[i].prompt == ok1[i].prompt && ok[i].id == ok1[i].id;
  for (size_t i = 0; same && i < bad.size(); i++) same = bad[i].line == bad1[i].line && bad[i].why == bad1[i].why;
  expect(whole == 0 && bytes == 0 && same && ok.size() == 2 && ok[0].line == 1 && ok[1].line == 6 &&
             ok[1].id == "7" && bad.size() == 2 && bad[0].line == 4 && bad[1].line == 5 &&
             bad[1].why.find("longer than 56 bytes") != std::string::npos,
         "the reader fed one byte at a time: lines 1 and 6 served, 4 and 5 refused, as from the whole text");
}

// A refusal is one printable line (stderr and ids.jsonl carry it): a key
// the line spells with a DEL, an escape or a newline is shown escaped, and
// cut short past 120 bytes. requests_fuzz found the DEL in an unknown key.
void check_refusals_printable() {
  const std::string text = std::string("{\"prompt_ids\": [1], \"max_new_tokens\": 1, \"max_ne\x7f_tokens\": 1}\n") +
                           "{\"\\u001b[2J\" 1}\n"                                // bad JSON after a key of escapes
                           "{\"a\\nb\": 1, \"a\\nb\": 2}\n"                 // a duplicate key with a newline
                           "{\"" + std::string(300, 'k') + "\": 1}\n";          // a long unknown key
  RequestLimits lim;
  std::vector<Request> ok;
  std::vector<Refusal> bad;
  std::string err, msgs;
  const int rc = parse_requests(text, lim, &ok, &bad, &err);
  bool clean = rc == 0 && ok.empty() && bad.size() == 4;
  for (const Refusal &b : bad) {
    msgs += "\n      " + b.why;
    for (unsigned char ch : b.why) clean &= ch >= 0x20 && ch != 0x7f;
    clean &= b.why.size() < 300;
  }
  expect(clean && bad[0].why.find("unknown key \"max_ne\\x7f_tokens\"") != std::string::npos &&
             bad[1].why.find("\"\\x1b[2J\"") != std::string::npos && bad[2].why.find("\"a\\x0ab\"") != std::string::npos,
         "refusals are printable lines, keys escaped:" + msgs);
}

// synthetic:3:7 against bench/torch_serve.py's generator (the same values).
void check_synthetic() {
  std::vector<Request> v, w;
  std::string err;
  const int rc = synthetic_requests("synthetic:3:7", 128256, &v, &err);
  const bool ok = rc == 0 && v.size() == 3 && v[0].prompt.size() == 251 && v[0].max_new == 325 &&
                  v[0].prompt[0] == 104410 && v[0].prompt[1] == 123921 && v[0].prompt.back() == 19983 &&
                  v[1].prompt.size() == 278 && v[1].max_new == 149 && v[2].prompt.size() == 63 && v[2].max_new == 142 &&
                  v[2].prompt.back() == 35427;
  expect(ok, "synthetic:3:7: the lengths and ids bench/torch_serve.py makes");
  synthetic_requests("synthetic:2000", 128256, &w, &err);
  double p = 0, n = 0;
  int lo = 1 << 30, hi = 0;
  for (const Request &r : w) {
    p += r.prompt.size(), n += r.max_new;
    lo = std::min(lo, (int)r.prompt.size()), hi = std::max(hi, (int)r.prompt.size());
  }
  char what[160];
  std::snprintf(what, sizeof what, "synthetic:2000: prompts %d..%d, mean %.0f (367 expected), outputs mean %.0f (200)",
                lo, hi, p / w.size(), n / w.size());
  expect(w.size() == 2000 && lo >= 50 && hi <= 1000 && p / w.size() > 340 && p / w.size() < 395 &&
             n / w.size() > 185 && n / w.size() < 215,
         what);
  int bad = 0;
  for (const char *s :
       {"synthetic:", "synthetic:0", "synthetic:x", "synthetic:5:", "synthetic:5:-1", "synthetic:100001"})
    bad += synthetic_requests(s, 100, &v, &err) != 0;
  expect(bad == 6, "malformed synthetic specs refused: " + err);
}

void check_graph_sizes() {
  std::vector<int> v;
  std::string err;
  const bool vllm = graph_sizes("vllm", 512, &v, &err) == 0 && v.size() == 35 && v[3] == 8 && v.back() == 256;
  const bool dflt = graph_sizes("", 512, &v, &err) == 0 && v.size() == 67 && v.back() == 512;
  const bool list = graph_sizes("8,1,8,300", 512, &v, &err) == 0 && v == std::vector<int>({1, 8, 300});
  const bool bad = graph_sizes("1,,2", 512, &v, &err) != 0 && graph_sizes("600", 512, &v, &err) != 0 &&
                   graph_sizes("0", 512, &v, &err) != 0;
  expect(vllm && dflt && list && bad, "graph sizes: vllm 35, default 67 to 512, lists sorted, bad ones refused");
}

// The pinned kernels' file is one tpgraph's tuner reads, names the variant
// for every GEMM of every size, and the variant can run each of them.
void check_pins() {
  Config c;
  c.layers = 3;
  c.vocab = 128256;
  Rank r;
  Weights w;
  w.layers.resize(c.layers);
  ServeShape sh;
  std::vector<GemmShape> shapes;
  std::vector<int> sizes;
  std::string err;
  graph_sizes("", sh.max_rows, &sizes, &err);
  for (int T : sizes) {
    const std::vector<GemmShape> v = serve_step_gemms(c, r, w, sh, T);
    shapes.insert(shapes.end(), v.begin(), v.end());
  }
  const char *path = "/tmp/serve_test_pins.txt";
  const int rc = write_gemm_pins(path, shapes, 132, 90, LLAMA_PINNED_GEMM, &err);
  tpg_gemm_tune_reset();
  const int loaded = tpg_gemm_tune_load(path);
  int found = 0, runs = 0;
  for (const GemmShape &g : shapes) {
    const tpg_gemm_key k = {g.m, g.n, g.k, 2, (int)g.epilogue, 132, 90};
    tpg_gemm_variant v;
    double us;
    char name[64] = "", why[256];
    found += tpg_gemm_tune_lookup(&k, &v, &us) == 0 && tpg_gemm_variant_name(&v, name, sizeof name) == 0 &&
             !std::strcmp(name, LLAMA_PINNED_GEMM);
    tpg_kernel_launch l;
    tpg_tma_encode xm, wm;
    const tpg_gemm_problem p = tpg_gemm_problem_make(g.m, g.n, g.k, 2, (int)g.epilogue, 90, 132);
    runs += tpg_gemm_select_variant(&p, &v, &l, &xm, &wm, why, sizeof why) == 0;
  }
  char what[200];
  std::snprintf(what, sizeof what, "pinned GEMMs: %zu GEMMs of %zu sizes, %d keys in the file, %d found as %s, %d "
                "runnable by it", shapes.size(), sizes.size(), loaded, found, LLAMA_PINNED_GEMM, runs);
  expect(rc == 0 && found == (int)shapes.size() && runs == (int)shapes.size() && loaded > 0, what);
  std::string e2;
  const int off = write_gemm_pins(path, shapes, 132, 80, LLAMA_PINNED_GEMM, &e2);
  expect(off != 0 && e2.find("sm_80") != std::string::npos, "pins refused off Hopper: " + e2);
}

}  // namespace

int main() {
  check_scheduler();
  check_fifo();
  check_requests();
  check_special_files();
  check_reader_pieces();
  check_refusals_printable();
  check_synthetic();
  check_graph_sizes();
  check_pins();
  std::printf("serve_test: %d passed, %d failed\n", g_pass, g_fail);
  return g_fail ? 1 : 0;
}
