// generate.cc - generate.h: the prompt (prefill graphs, or token by token),
// then decode.h's two greedy loops.
//
// Graphs over one set of caches: the decode step alone (built with
// device_loop, so positions and x are device buffers), the host and device
// loops of decode.cc around the same step, and (--prefill graph, the
// default) prefill.h's one or two chunk graphs, whose last one hands the
// first new token to the step. Each run is a warm-up, then --iters timed
// runs (medians); every run starts from an empty prompt (the caches are
// rewritten at every position before they are read) and both loops start
// from the same state, so every run must make the same tokens.
#include "examples/llama/run/generate.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>

#include "examples/llama/graphs/decode.h"
#include "examples/llama/graphs/prefill.h"

namespace llama {
namespace {

double now_us() {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Everything run_generate creates, released in reverse order.
struct Run {
  DecodeIo io;
  Caches k;
  Step s;
  LmHead lm{};                 // the step's LM head call (the plan keeps its address)
  tpg_plan *hp = nullptr, *dp = nullptr;
  tpg_graph *hg = nullptr, *dg = nullptr;
  int *d_pos_table = nullptr;  // [P + 1]: 0, 1, ..., P (positions, copied and bound on the device)
  // --prefill graph
  Prefill full, last;          // chunks of `chunk` rows (when there are two or more), the last chunk
  int *d_ids = nullptr;        // [P] the prompt
  float *d_logits = nullptr;   // [vocab] the last prompt row's logits
  float *d_cand = nullptr;     // [4]
  int *d_pf_step = nullptr, *d_pf_done = nullptr;  // [4] each
  int *h_pf_out = nullptr;     // pinned [4]: the first new token
  cudaEvent_t ev[2] = {nullptr, nullptr};
  ~Run() {
    free_prefill(&full);
    free_prefill(&last);
    if (hg) tpg_graph_destroy(hg);
    if (dg) tpg_graph_destroy(dg);
    tpg_plan_destroy(hp);
    tpg_plan_destroy(dp);
    free_step(&s);
    free_caches(&k);
    cudaFree(d_pos_table);
    cudaFree(d_ids);
    cudaFree(d_logits);
    cudaFree(d_cand);
    cudaFree(d_pf_step);
    cudaFree(d_pf_done);
    cudaFreeHost(h_pf_out);
    for (cudaEvent_t e : ev)
      if (e) cudaEventDestroy(e);
  }
};

bool cuda_ok(cudaError_t e, const char *what, std::string *err) {
  if (e == cudaSuccess) return true;
  *err = std::string(what) + ": " + cudaGetErrorString(e);
  return false;
}

// x = emb[token], the sequence's position = p: the state before a step.
bool set_input(const Config &c, const Rank &r, Run &g, int token, int p, std::string *err) {
  const size_t row = (size_t)c.hidden * 2;
  return cuda_ok(cudaMemcpyAsync(g.s.d_x, static_cast<const char *>(g.io.emb) + (size_t)token * row, row,
                                 cudaMemcpyDeviceToDevice, r.stream),
                 "x <- emb[token]", err) &&
         cuda_ok(cudaMemcpyAsync(g.s.d_pos, g.d_pos_table + p, sizeof(int), cudaMemcpyDeviceToDevice, r.stream),
                 "pos", err);
}

// --prefill steps: positions 0 .. P-2, one launch of the step each, back to
// back (the copies and launches are ordered on the stream; the host waits
// once at the end).
bool run_prompt_steps(const Config &c, const Rank &r, Run &g, const std::vector<int> &ids, std::string *err) {
  for (size_t t = 0; t + 1 < ids.size(); t++) {
    if (!set_input(c, r, g, ids[t], (int)t, err)) return false;
    if (tpg_graph_launch(g.s.graph, r.stream) != TPG_SUCCESS) {
      *err = std::string("prompt step: ") + tpg_last_error();
      return false;
    }
  }
  if (wait_rank(r) != TPG_SUCCESS) {
    *err = std::string("prompt steps: ") + tpg_last_error();
    return false;
  }
  return true;
}

// --prefill graph: every chunk one launch (the full-size graph rebound to
// its chunk first), the decode step's position set to P-1 for the last
// chunk's pick to advance. Returns the first new token in *tok; *dev_ms:
// the device time between the first launch and the last node.
bool run_prefill(const Rank &r, Run &g, int P, const std::vector<PrefillChunk> &chunks, int *tok, float *dev_ms,
                 std::string *err) {
  if (!cuda_ok(cudaMemcpyAsync(g.s.d_pos, g.d_pos_table + (P - 1), sizeof(int), cudaMemcpyDeviceToDevice, r.stream),
               "pos <- P-1", err) ||
      !cuda_ok(cudaEventRecord(g.ev[0], r.stream), "event", err))
    return false;
  g.h_pf_out[0] = -1;
  for (size_t i = 0; i < chunks.size(); i++) {
    Prefill &pg = i + 1 == chunks.size() ? g.last : g.full;  // the last graph is bound to its chunk at build
    if (&pg == &g.full && bind_chunk(&pg, g.d_ids, g.d_pos_table, chunks[i].p0, err)) return false;
    if (tpg_graph_launch(pg.graph, r.stream) != TPG_SUCCESS) {
      *err = std::string("prefill chunk ") + std::to_string(i) + ": " + tpg_last_error();
      return false;
    }
  }
  if (!cuda_ok(cudaEventRecord(g.ev[1], r.stream), "event", err)) return false;
  if (wait_rank(r) != TPG_SUCCESS) {
    *err = std::string("prefill: ") + tpg_last_error();
    return false;
  }
  if (!cuda_ok(cudaEventElapsedTime(dev_ms, g.ev[0], g.ev[1]), "event time", err)) return false;
  *tok = g.h_pf_out[0];
  return true;
}

// Both loops start here: `token` at position p (the last prompt token at
// P-1, or the prefill's token at P), counters zero, no tokens.
bool reset_loop(const Config &c, const Rank &r, Run &g, int token, int p, int n_max, std::string *err) {
  if (!set_input(c, r, g, token, p, err) ||
      !cuda_ok(cudaMemsetAsync(g.io.step, 0, 4 * sizeof(int), r.stream), "step", err) ||
      !cuda_ok(cudaMemsetAsync(g.io.done, 0, 4 * sizeof(int), r.stream), "done", err) ||
      !cuda_ok(cudaStreamSynchronize(r.stream), "reset", err))
    return false;
  std::memset(g.io.out, 0xff, ((size_t)n_max + 4) * sizeof(int));
  return true;
}

// The prefill's buffers and its one or two graphs (after the step's: the
// LM head's cuBLAS call is warm by then and stays out of the capture's
// first-call work).
int setup_prefill(const Config &c, const Rank &r, const Weights &w, const GenerateOptions &o,
                  const std::vector<PrefillChunk> &chunks, Run &g, std::string *err) {
  const int P = (int)o.prompt.size();
  if (!cuda_ok(cudaMalloc(reinterpret_cast<void **>(&g.d_ids), P * sizeof(int)), "prompt ids", err) ||
      !cuda_ok(cudaMemcpy(g.d_ids, o.prompt.data(), P * sizeof(int), cudaMemcpyHostToDevice), "prompt ids", err) ||
      !cuda_ok(cudaMalloc(reinterpret_cast<void **>(&g.d_logits), (size_t)c.vocab * 4), "prompt logits", err) ||
      !cuda_ok(cudaMalloc(reinterpret_cast<void **>(&g.d_cand), 4 * sizeof(float)), "prefill argmax", err) ||
      !cuda_ok(cudaMalloc(reinterpret_cast<void **>(&g.d_pf_step), 4 * sizeof(int)), "prefill step", err) ||
      !cuda_ok(cudaMemset(g.d_pf_step, 0, 4 * sizeof(int)), "prefill step", err) ||
      !cuda_ok(cudaMalloc(reinterpret_cast<void **>(&g.d_pf_done), 4 * sizeof(int)), "prefill done", err) ||
      !cuda_ok(cudaHostAlloc(reinterpret_cast<void **>(&g.h_pf_out), 4 * sizeof(int),
                             cudaHostAllocMapped | cudaHostAllocPortable),
               "prefill token", err) ||
      !cuda_ok(cudaEventCreate(&g.ev[0]), "event", err) || !cuda_ok(cudaEventCreate(&g.ev[1]), "event", err))
    return 1;
  PrefillTail tail;
  tail.decode_module = g.io.mod;
  tail.logits = g.d_logits;
  tail.cand = g.d_cand;
  tail.step = g.d_pf_step;
  tail.done = g.d_pf_done;
  tail.out = g.h_pf_out;
  tail.dec_x = g.s.d_x;
  tail.dec_pos = g.s.d_pos;
  tail.end_token = o.end_token;
  const PrefillChunk &lc = chunks.back();
  if (chunks.size() > 1 &&
      (build_prefill(c, r, w, g.k, o.chunk, g.io.emb, g.d_ids, g.d_pos_table, nullptr, &g.full, err) ||
       create_prefill_graph(r, &g.full, err)))
    return 1;
  return build_prefill(c, r, w, g.k, lc.rows, g.io.emb, g.d_ids + lc.p0, g.d_pos_table + lc.p0, &tail, &g.last,
                       err) ||
         create_prefill_graph(r, &g.last, err);
}

bool write_floats(const std::string &path, const std::vector<float> &v) {
  FILE *f = std::fopen(path.c_str(), "wb");
  if (!f) return false;
  const bool ok = std::fwrite(v.data(), 4, v.size(), f) == v.size();
  return std::fclose(f) == 0 && ok;
}

}  // namespace

namespace {

// The run's arguments against the engine's limits.
int check_generate(const Config &c, const Weights &w, const GenerateOptions &o, std::string *err) {
  const int P = (int)o.prompt.size(), N = o.max_new;
  const bool graph = o.prefill == GenerateOptions::PREFILL_GRAPH;
  if (c.batch != 1 || P < 1 || N < 1 || c.max_ctx < P + N || !w.lm_head || o.iters < 1) {
    *err = "generate: needs batch 1, a prompt, --max-new-tokens >= 1, caches for prompt + new tokens, the LM head "
           "and --iters >= 1";
    return 1;
  }
  if (graph && (o.chunk < 64 || o.chunk % 64)) {
    *err = "--prefill-chunk " + std::to_string(o.chunk) + ": a positive multiple of 64";
    return 1;
  }
  if (!graph && !o.logits_out.empty()) {
    *err = "--prompt-logits: the prompt's logits come from the prefill graph (not with --prefill steps)";
    return 1;
  }
  for (int id : o.prompt)
    if (id < 0 || id >= c.vocab) {
      *err = "--prompt-ids: token " + std::to_string(id) + " is outside the vocabulary (vocab_size " +
             std::to_string(c.vocab) + ")";
      return 1;
    }
  return 0;
}

// The buffers, the step, the two loops (nloop > 0) and the prefill's graphs.
int setup_generate(const Config &c, const Rank &r, const Weights &w, const Source &src, const GenerateOptions &o,
                   const std::vector<PrefillChunk> &chunks, int nloop, Run &g, std::string *err) {
  const int P = (int)o.prompt.size(), N = o.max_new;
  g.s.device_loop = true;
  DecodeOptions d;
  d.steps = std::max(nloop, 1);
  d.end_token = o.end_token;
  std::vector<tpg_binding> hb, db;
  std::vector<int> pos(P + 1);
  for (int i = 0; i <= P; i++) pos[i] = i;
  if (alloc_decode_io(c, r, d.steps, &g.io, err) || load_tensor(c, src, "embed", c.vocab, c.hidden, g.io.emb, err) ||
      !cuda_ok(cudaMalloc(reinterpret_cast<void **>(&g.d_pos_table), (P + 1) * sizeof(int)), "positions", err) ||
      !cuda_ok(cudaMemcpy(g.d_pos_table, pos.data(), (P + 1) * sizeof(int), cudaMemcpyHostToDevice), "positions",
               err) ||
      alloc_caches(c, r, &g.k, err) || alloc_step_io(c, &g.s, err) ||
      build_step(c, r, w, g.k, P + N, &g.lm, &g.s, err) || warm_lm_head(r, w, &g.lm, &g.s, err) ||
      create_step_graph(r, &g.s, err))
    return 1;
  if (nloop > 0 &&
      (build_loop(c, r, g.s, g.io, d, false, &g.hp, &hb, err) || build_loop(c, r, g.s, g.io, d, true, &g.dp, &db, err) ||
       create_loop_graph(r, g.hp, hb, &g.hg, err) || create_loop_graph(r, g.dp, db, &g.dg, err)))
    return 1;
  return o.prefill == GenerateOptions::PREFILL_GRAPH ? setup_prefill(c, r, w, o, chunks, g, err) : 0;
}

// Every run's tokens and times (run 0, the warm-up, adds no times).
struct GenResults {
  std::vector<int> host_tok, dev_tok, first_tok;
  std::vector<double> prompt_us, prompt_dev_us, first_us, host_us, dev_us, dev_first_us;
};

// Host loop from (start_tok, start_pos): launch, wait, read the token, decide.
int gen_host_loop(const Config &c, const Rank &r, const GenerateOptions &o, Run &g, int nloop, int start_tok,
                  int start_pos, bool timed, GenResults &gr, std::string *err) {
  const bool graph = o.prefill == GenerateOptions::PREFILL_GRAPH;
  if (!reset_loop(c, r, g, start_tok, start_pos, nloop, err)) return 1;
  const double t0 = now_us();
  double first = 0;
  for (int n = 0; n < nloop; n++) {
    if (tpg_graph_launch(g.hg, r.stream) != TPG_SUCCESS || wait_rank(r) != TPG_SUCCESS) {
      *err = std::string("host loop: ") + tpg_last_error();
      return 1;
    }
    if (n == 0) first = now_us() - t0;
    gr.host_tok.push_back(g.io.out[n]);
    if (gr.host_tok.back() == o.end_token) break;
  }
  const int host_n = (int)gr.host_tok.size() - (graph ? 1 : 0);
  if (timed) {
    gr.first_us.push_back(first);
    gr.host_us.push_back(host_n > 1 ? (now_us() - t0 - first) / (host_n - 1) : first);
  }
  return 0;
}

// Device loop: one launch from the same state; the host watches the first
// token arrive (or gives up watching after 10 s and just waits).
int gen_device_loop(const Config &c, const Rank &r, Run &g, int nloop, int start_tok, int start_pos, bool timed,
                    GenResults &gr, std::string *err) {
  if (!reset_loop(c, r, g, start_tok, start_pos, nloop, err)) return 1;
  volatile int *progress = g.io.out + nloop;
  const double t0 = now_us();
  if (tpg_graph_launch(g.dg, r.stream) != TPG_SUCCESS) {
    *err = std::string("device loop: ") + tpg_last_error();
    return 1;
  }
  double seen = -1;
  while (seen < 0 && now_us() - t0 < 1e7 && cudaStreamQuery(r.stream) == cudaErrorNotReady)
    if (*progress >= 1) seen = now_us() - t0;
  if (wait_rank(r) != TPG_SUCCESS) {
    *err = std::string("device loop: ") + tpg_last_error();
    return 1;
  }
  const double dus = now_us() - t0;
  const int dev_n = std::max(0, std::min(nloop, g.io.out[nloop]));
  gr.dev_tok.insert(gr.dev_tok.end(), g.io.out, g.io.out + dev_n);
  if (timed) {
    gr.dev_us.push_back(dev_n ? dus / dev_n : 0.0);
    gr.dev_first_us.push_back(seen);
  }
  return 0;
}

// Run `it`: the prompt, then both loops from where it left off. *stop: the
// loops' tokens differ (no more runs).
int one_run(const Config &c, const Rank &r, const GenerateOptions &o, const std::vector<PrefillChunk> &chunks,
            int nloop, int it, Run &g, GenResults &gr, bool *stop, std::string *err) {
  const int P = (int)o.prompt.size();
  const bool graph = o.prefill == GenerateOptions::PREFILL_GRAPH;
  const double t0 = now_us();
  int t_first = -1;
  if (graph) {
    float ms = 0;
    if (!run_prefill(r, g, P, chunks, &t_first, &ms, err)) return 1;
    if (it) gr.prompt_dev_us.push_back(1e3 * ms);
  } else if (!run_prompt_steps(c, r, g, o.prompt, err)) {
    return 1;
  }
  if (it) gr.prompt_us.push_back(now_us() - t0);
  if (graph && (t_first < 0 || t_first >= c.vocab)) {
    *err = "prefill: no first token (got " + std::to_string(t_first) + ")";
    return 1;
  }
  gr.host_tok.clear();
  gr.dev_tok.clear();
  if (graph) {
    gr.host_tok.push_back(t_first);
    gr.dev_tok.push_back(t_first);
    if (!gr.first_tok.empty() && gr.first_tok[0] != t_first) {
      *err = "prefill: run " + std::to_string(it) + " made first token " + std::to_string(t_first) + ", run 0 " +
             std::to_string(gr.first_tok[0]);
      return 1;
    }
    gr.first_tok.assign(1, t_first);
  }
  if (nloop == 0 || (graph && t_first == o.end_token)) return 0;
  // Where both loops start: the prefill's token at position P, or the last
  // prompt token at P-1.
  const int start_tok = graph ? t_first : o.prompt[P - 1], start_pos = graph ? P : P - 1;
  if (gen_host_loop(c, r, o, g, nloop, start_tok, start_pos, it > 0, gr, err) ||
      gen_device_loop(c, r, g, nloop, start_tok, start_pos, it > 0, gr, err))
    return 1;
  *stop = gr.dev_tok != gr.host_tok;
  return 0;
}

// Rank 0's lines: the prompt's time, the ids, time to first token and the loops.
void print_generate(const Rank &r, const GenerateOptions &o, const std::vector<PrefillChunk> &chunks, int nloop,
                    const GenResults &gr) {
  const int P = (int)o.prompt.size(), N = o.max_new, n = (int)gr.host_tok.size();
  const bool graph = o.prefill == GenerateOptions::PREFILL_GRAPH;
  const bool same = gr.dev_tok == gr.host_tok, loops = nloop > 0 && !(graph && gr.host_tok[0] == o.end_token);
  if (graph)
    std::printf("llama: prefill of %d tokens in %zu chunk(s) of up to %d rows (M-row graphs): %.2f ms, device "
                "%.2f ms (median of %d)\n",
                P, chunks.size(), o.chunk, median(gr.prompt_us) / 1e3, median(gr.prompt_dev_us) / 1e3, o.iters);
  else
    std::printf("llama: prompt of %d tokens as %d single-token decode steps (--prefill steps): %.2f ms (%.1f "
                "us/step; median of %d)\n",
                P, P - 1, median(gr.prompt_us) / 1e3, P > 1 ? median(gr.prompt_us) / (P - 1) : 0.0, o.iters);
  std::printf("new ids:");
  for (int i = 0; i < n; i++) std::printf("%s%d", i ? "," : " ", gr.host_tok[i]);
  std::printf("\n");
  const double ttft = graph ? median(gr.prompt_us) : median(gr.prompt_us) + median(gr.first_us);
  char loop[256];
  if (loops)
    std::snprintf(loop, sizeof loop,
                  "per token: host loop %.1f us, device loop %.1f us (first token visible %.0f us into it); device "
                  "loop tokens %s",
                  median(gr.host_us), median(gr.dev_us), median(gr.dev_first_us), same ? "identical" : "DIFFER");
  else
    std::snprintf(loop, sizeof loop, "no decode loop (%s)", graph && N > 1 ? "the end token came first" : "one token");
  std::printf("llama: %d new tokens, TP %d: time to first token %.2f ms (%s); %s\n", n, r.nranks, ttft / 1e3,
              graph ? "the prefill" : "prompt steps + the first host-loop step", loop);
  std::fflush(stdout);
}

}  // namespace

int run_generate(const Config &c, const Rank &r, const Weights &w, const Source &src, const GenerateOptions &o,
                 std::string *err) {
  if (check_generate(c, w, o, err)) return 1;
  const bool graph = o.prefill == GenerateOptions::PREFILL_GRAPH;
  const int nloop = graph ? o.max_new - 1 : o.max_new;  // the prefill makes the first token itself
  const std::vector<PrefillChunk> chunks = prefill_chunks((int)o.prompt.size(), o.chunk);
  Run g;
  if (setup_generate(c, r, w, src, o, chunks, nloop, g, err)) return 1;
  GenResults gr;
  bool stop = false;
  for (int it = 0; it <= o.iters && !stop; it++)  // run 0 warms up (first launches upload the graphs)
    if (one_run(c, r, o, chunks, nloop, it, g, gr, &stop, err)) return 1;
  if (r.rank == 0) print_generate(r, o, chunks, nloop, gr);
  if (gr.dev_tok != gr.host_tok) {
    size_t i = 0;
    while (i < std::min(gr.host_tok.size(), gr.dev_tok.size()) && gr.host_tok[i] == gr.dev_tok[i]) i++;
    *err = "the device loop's tokens differ from the host loop's from new token " + std::to_string(i) + " on";
    return 1;
  }
  if (r.rank == 0 && !o.logits_out.empty()) {
    std::vector<float> lg(c.vocab);
    if (!cuda_ok(cudaMemcpy(lg.data(), g.d_logits, lg.size() * 4, cudaMemcpyDeviceToHost), "prompt logits", err))
      return 1;
    if (!write_floats(o.logits_out, lg)) {
      *err = "--prompt-logits: cannot write " + o.logits_out;
      return 1;
    }
    std::printf("llama: the last prompt row's logits (fp32 [%d]) in %s\n", c.vocab, o.logits_out.c_str());
  }
  return 0;
}

}  // namespace llama
