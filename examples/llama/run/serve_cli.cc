// serve_cli.cc - serve_cli.h and serve.h's flags: each serving flag, the
// graph sizes a spec names, and the --requests run checked against the
// checkpoint (headers only) and the engine's limits.
#include "examples/llama/run/serve_cli.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "examples/llama/kernels/kernels.h"
#include "examples/llama/model/hf/checkpoint.h"
#include "examples/llama/run/serve.h"

namespace llama {
namespace {

struct FlagDef {
  const char *name;
  int arg;
};
#define LLAMA_SERVE_FLAG_DEF(name, arg) {name, arg},
const FlagDef kServe[] = {LLAMA_SERVE_FLAGS(LLAMA_SERVE_FLAG_DEF)};
const int kNServe = (int)(sizeof kServe / sizeof kServe[0]);

bool to_int(const char *flag, const char *s, long lo, long hi, int *out) {
  char *end;
  errno = 0;
  const long v = std::strtol(s, &end, 10);
  if (errno || end == s || *end || v < lo || v > hi) {
    std::fprintf(stderr, "llama: --%s '%s': expected an integer in %ld..%ld\n", flag, s, lo, hi);
    return false;
  }
  *out = (int)v;
  return true;
}

// Requests whose ids the checkpoint's vocabulary does not hold are refused
// alone (the file was read before the checkpoint's size was known).
void refuse_vocab(ServeOptions *s, int vocab) {
  std::vector<Request> keep;
  for (const Request &r : s->reqs) {
    size_t bad = 0;
    while (bad < r.prompt.size() && r.prompt[bad] < vocab) bad++;
    if (bad == r.prompt.size() && r.end_token < vocab) {
      keep.push_back(r);
      continue;
    }
    const std::string what = bad < r.prompt.size()
                                 ? "\"prompt_ids\"[" + std::to_string(bad) + "] = " + std::to_string(r.prompt[bad])
                                 : "\"end_token\" " + std::to_string(r.end_token);
    s->refused.push_back({r.line, "requests line " + std::to_string(r.line) + ": " + what +
                                      " is not below the vocabulary size " + std::to_string(vocab)});
  }
  s->reqs.swap(keep);
}

// Requests longer than the model's sliding window are refused alone: the
// engine attends to the whole context, which is the model only within it.
void refuse_window(ServeOptions *s, const HfConfig &h) {
  if (h.sliding_window <= 0) return;
  std::vector<Request> keep;
  for (const Request &r : s->reqs) {
    const long n = (long)r.prompt.size() + r.max_new;
    if (n <= h.sliding_window) {
      keep.push_back(r);
      continue;
    }
    s->refused.push_back({r.line, "requests line " + std::to_string(r.line) + ": " + std::to_string(n) +
                                      " positions (prompt + max_new_tokens) exceed " + h.sliding_field + " " +
                                      std::to_string(h.sliding_window) +
                                      " (the engine attends to the whole context)"});
  }
  s->reqs.swap(keep);
}

// --requests with --model: the flags that go with it, the requests, the
// checkpoint's headers, the limits.
int check_serve(Options *o) {
  ServeOptions &s = o->serve;
  const char *alone = !o->prompt.empty() ? "--prompt-ids" : o->set_max_new ? "--max-new-tokens"
                      : !o->model_flag.empty() ? o->model_flag.c_str() : o->end_token >= 0 ? "--end-token"
                      : o->set_iters ? "--iters" : o->attn != Rank::ATTN_FUSED ? "--attn"
                      : o->attn_bps ? "--attn-bps" : nullptr;
  if (o->model.empty() || alone || !o->other_flag.empty()) {
    std::fprintf(stderr, "llama: --requests %s\n",
                 o->model.empty() ? "needs --model DIR (the checkpoint)"
                 : alone ? (std::string("does not go with ") + alone +
                            " (the requests carry their own; the step has its own attention)").c_str()
                         : (std::string("does not go with ") + o->other_flag).c_str());
    return 2;
  }
  if (s.max_rows <= s.max_seqs) {
    std::fprintf(stderr, "llama: --max-step-rows %d must be above --max-seqs %d (a step holds every sequence's "
                 "decode row and a prompt row)\n", s.max_rows, s.max_seqs);
    return 2;
  }
  std::string err;
  std::vector<int> sizes;
  if (graph_sizes(s.sizes, s.max_rows, &sizes, &err)) {
    std::fprintf(stderr, "llama: --graph-sizes: %s\n", err.c_str());
    return 2;
  }
  RequestLimits lim;
  if (!is_synthetic(s.requests) && read_requests(s.requests, lim, &s.reqs, &s.refused, &err)) {
    std::fprintf(stderr, "llama: %s\n", err.c_str());
    return 2;
  }
  return 0;
}

// The checkpoint at the TP the run will have, its vocabulary applied to the
// requests; the longest request sizes the caches.
int open_model(Options *o, int gpus) {
  ServeOptions &s = o->serve;
  Config &c = o->c;
  HfModel m;
  std::string err;
  const bool pick = o->tp == 0;
  const int need = 1;  // a request beyond a sliding window is refused alone (refuse_window), not the run
  if (m.open(o->model, pick ? 1 : o->tp, need, &c, &err)) {
    std::fprintf(stderr, "llama: --model: %s\n", err.c_str());
    return 2;
  }
  if (pick) {
    o->tp = largest_tp(c, std::max(1, std::min(gpus, 8)));
    std::printf("llama: TP %d (%d GPU(s) here%s)\n", o->tp, gpus, o->tp < gpus ? "; the model divides no more" : "");
    if (o->tp > 1 && m.open(o->model, o->tp, need, &c, &err)) {
      std::fprintf(stderr, "llama: --model: %s\n", err.c_str());
      return 2;
    }
  }
  if (is_synthetic(s.requests) && synthetic_requests(s.requests, c.vocab, &s.reqs, &err)) {
    std::fprintf(stderr, "llama: %s\n", err.c_str());
    return 2;
  }
  refuse_vocab(&s, c.vocab);
  refuse_window(&s, m.config());
  s.max_ctx = 1;
  for (const Request &r : s.reqs) s.max_ctx = std::max(s.max_ctx, (int)r.prompt.size() + r.max_new);
  c.max_ctx = s.max_ctx;
  return 0;
}

}  // namespace

std::vector<option> serve_options(int base) {
  std::vector<option> v;
  for (int i = 0; i < kNServe; i++)
    v.push_back({kServe[i].name, kServe[i].arg ? required_argument : no_argument, 0, base + i});
  return v;
}

int apply_serve_flag(int which, const char *arg, ServeOptions *s) {
  if (which < 0 || which >= kNServe) return 2;
  const char *name = kServe[which].name;
  if (s->flag.empty()) s->flag = std::string("--") + name;
  switch (which) {
    case 0: s->requests = arg; break;
    case 1: s->batch_invariant = true; break;
    case 2: s->check_alone = true; break;
    case 3: return to_int(name, arg, 1, 1024, &s->max_seqs) ? 0 : 2;
    case 4: return to_int(name, arg, 2, 4096, &s->max_rows) ? 0 : 2;
    case 5: return to_int(name, arg, 1, 1 << 24, &s->kv_blocks) ? 0 : 2;
    case 6: s->sizes = arg; break;
    case 7:
      if (!to_int(name, arg, LLAMA_KV_BLOCK, 8192, &s->split)) return 2;
      if (s->split % LLAMA_KV_BLOCK) {
        std::fprintf(stderr, "llama: --attn-split %d: expected a multiple of %d\n", s->split, LLAMA_KV_BLOCK);
        return 2;
      }
      break;
  }
  return 0;
}

void serve_usage(FILE *f) {
  std::fprintf(f,
               "  --requests FILE|synthetic:N[:SEED]  with --model: serve requests (JSON lines: prompt_ids,\n"
               "                    max_new_tokens, optional end_token and id) by continuous batching over a paged\n"
               "                    KV cache; --out DIR gets ids.jsonl and summary.json (docs/serving.md)\n"
               "  --batch-invariant every GEMM pinned to one kernel: each request's ids are those of its\n"
               "                    own run (TP 1, sm_90); --check-alone then serves each again alone and compares\n"
               "  --max-seqs N      sequences at once, 1..1024 (default 256)\n"
               "  --max-step-rows N rows a step holds at most, above --max-seqs (default 512)\n"
               "  --kv-blocks N     KV-cache blocks of %d positions (default: what device memory holds)\n"
               "  --graph-sizes S   the step's graph sizes: vllm (1, 2, 4, 8..256 by 8), all, or a list\n"
               "                    (default 1, 2, 4, 8.. by 8 to --max-step-rows); without --requests: build\n"
               "                    them for --config/--layers with random weights and report time and memory\n"
               "  --attn-split K    decode attention's split in keys, a multiple of %d (default %d)\n",
               LLAMA_KV_BLOCK, LLAMA_KV_BLOCK, LLAMA_PAGED_SPLIT);
}

int finish_serve(Options *o, int gpus, bool *done) {
  ServeOptions &s = o->serve;
  *done = false;
  if (s.requests.empty()) {
    if (s.flag.empty()) return 0;
    if (s.sizes.empty() || !o->model.empty() || s.check_alone) {
      std::fprintf(stderr, "llama: %s goes with --requests (or --graph-sizes alone: the build report)\n",
                   s.check_alone ? "--check-alone" : !o->model.empty() ? "--graph-sizes" : s.flag.c_str());
      return 2;
    }
    std::vector<int> sizes;
    std::string err;
    if (graph_sizes(s.sizes, s.max_rows, &sizes, &err)) {
      std::fprintf(stderr, "llama: --graph-sizes: %s\n", err.c_str());
      return 2;
    }
    o->lm_head = true;  // the report: the step's graphs, LM head included, on random weights
    return 0;
  }
  *done = true;
  if (const int rc = check_serve(o)) return rc;
  if (const int rc = open_model(o, gpus)) return rc;
  if (s.batch_invariant && o->tp > 1) {
    std::fprintf(stderr, "llama: --batch-invariant runs at TP 1 (an all-reduce sums in an order that follows its "
                 "size); use --tp 1\n");
    return 2;
  }
  if (s.reqs.empty()) {  // (otherwise the run prints the refusals, once)
    for (const Refusal &f : s.refused) std::fprintf(stderr, "llama: refused: %s\n", f.why.c_str());
    std::fprintf(stderr, "llama: --requests %s: no request to serve (%zu refused)\n", s.requests.c_str(),
                 s.refused.size());
    return 2;
  }
  o->lm_head = true;
  o->c.batch = 1;
  o->c.ctx = 0;
  return 0;
}

}  // namespace llama
