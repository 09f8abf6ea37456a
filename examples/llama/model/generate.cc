// generate.cc - generate.h: the prompt token by token, then decode.h's two
// greedy loops from the last prompt token.
//
// Three graphs over one set of caches: the decode step alone (the prompt's
// steps; built with device_loop, so positions and x are device buffers the
// host sets with stream-ordered copies, and no host wait between steps),
// and the host and device loops of decode.cc around the same step. Each
// run is warm-up then timed; both loops start from the same caches (the
// prompt's positions 0 .. P-2, written once per run) and must make the same
// tokens, as in --decode.
#include "examples/llama/model/generate.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>

#include "examples/llama/decode.h"

namespace llama {
namespace {

double now_us() {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Everything run_generate creates, released in reverse order.
struct Run {
  DecodeIo io;
  Caches k;
  Step s;
  tpg_plan *hp = nullptr, *dp = nullptr;
  tpg_graph *hg = nullptr, *dg = nullptr;
  int *d_pos_table = nullptr;  // [P]: 0, 1, ..., P-1 (the prompt's positions, copied on the device)
  ~Run() {
    if (hg) tpg_graph_destroy(hg);
    if (dg) tpg_graph_destroy(dg);
    tpg_plan_destroy(hp);
    tpg_plan_destroy(dp);
    free_step(&s);
    free_caches(&k);
    cudaFree(d_pos_table);
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

// Positions 0 .. P-2: one launch of the step each, back to back (the copies
// and launches are ordered on the stream; the host waits once at the end).
bool run_prompt(const Config &c, const Rank &r, Run &g, const std::vector<int> &ids, std::string *err) {
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

// Both loops start here: the last prompt token at position P-1, counters
// zero, no tokens.
bool reset_loop(const Config &c, const Rank &r, Run &g, const std::vector<int> &ids, int n_max, std::string *err) {
  const int P = (int)ids.size();
  if (!set_input(c, r, g, ids[P - 1], P - 1, err) ||
      !cuda_ok(cudaMemsetAsync(g.io.step, 0, 4 * sizeof(int), r.stream), "step", err) ||
      !cuda_ok(cudaMemsetAsync(g.io.done, 0, 4 * sizeof(int), r.stream), "done", err) ||
      !cuda_ok(cudaStreamSynchronize(r.stream), "reset", err))
    return false;
  std::memset(g.io.out, 0xff, ((size_t)n_max + 4) * sizeof(int));
  return true;
}

}  // namespace

int run_generate(const Config &c, const Rank &r, const Weights &w, const Source &src, const GenerateOptions &o,
                 std::string *err) {
  const int P = (int)o.prompt.size(), N = o.max_new;
  if (c.batch != 1 || P < 1 || N < 1 || c.max_ctx < P + N || !w.lm_head) {
    *err = "generate: needs batch 1, a prompt, --max-new-tokens >= 1, caches for prompt + new tokens and the LM head";
    return 1;
  }
  for (int id : o.prompt)
    if (id < 0 || id >= c.vocab) {
      *err = "--prompt-ids: token " + std::to_string(id) + " is outside the vocabulary (vocab_size " +
             std::to_string(c.vocab) + ")";
      return 1;
    }
  Run g;
  g.s.device_loop = true;
  DecodeOptions d;
  d.steps = N;
  d.end_token = o.end_token;
  LmHead lm{};
  std::vector<tpg_binding> hb, db;
  std::vector<int> pos(P);
  for (int i = 0; i < P; i++) pos[i] = i;
  if (alloc_decode_io(c, r, N, &g.io, err) || load_tensor(c, src, "embed", c.vocab, c.hidden, g.io.emb, err) ||
      !cuda_ok(cudaMalloc(reinterpret_cast<void **>(&g.d_pos_table), P * sizeof(int)), "positions", err) ||
      !cuda_ok(cudaMemcpy(g.d_pos_table, pos.data(), P * sizeof(int), cudaMemcpyHostToDevice), "positions", err) ||
      alloc_caches(c, r, &g.k, err) || alloc_step_io(c, &g.s, err) ||
      build_step(c, r, w, g.k, P + N, &lm, &g.s, err) || warm_lm_head(r, w, &lm, &g.s, err) ||
      create_step_graph(r, &g.s, err) || build_loop(c, r, g.s, g.io, d, false, &g.hp, &hb, err) ||
      build_loop(c, r, g.s, g.io, d, true, &g.dp, &db, err) || create_loop_graph(r, g.hp, hb, &g.hg, err) ||
      create_loop_graph(r, g.dp, db, &g.dg, err))
    return 1;

  std::vector<int> host_tok, dev_tok;
  double prompt_us = 0, first_us = 0, host_us = 0, dev_us = 0, dev_first_us = -1;
  for (int it = 0; it < 2; it++) {  // run 0 warms up (first launches upload the graphs)
    double t0 = now_us();
    if (!run_prompt(c, r, g, o.prompt, err)) return 1;
    prompt_us = now_us() - t0;
    // Host loop: launch, wait, read the token, decide.
    if (!reset_loop(c, r, g, o.prompt, N, err)) return 1;
    host_tok.clear();
    t0 = now_us();
    for (int n = 0; n < N; n++) {
      if (tpg_graph_launch(g.hg, r.stream) != TPG_SUCCESS || wait_rank(r) != TPG_SUCCESS) {
        *err = std::string("host loop: ") + tpg_last_error();
        return 1;
      }
      if (n == 0) first_us = now_us() - t0;
      host_tok.push_back(g.io.out[n]);
      if (host_tok.back() == o.end_token) break;
    }
    host_us = now_us() - t0;
    // Device loop: one launch from the same state; the host watches the
    // first token arrive (or gives up watching after 10 s and just waits).
    if (!reset_loop(c, r, g, o.prompt, N, err)) return 1;
    volatile int *progress = g.io.out + N;
    t0 = now_us();
    if (tpg_graph_launch(g.dg, r.stream) != TPG_SUCCESS) {
      *err = std::string("device loop: ") + tpg_last_error();
      return 1;
    }
    dev_first_us = -1;
    while (dev_first_us < 0 && now_us() - t0 < 1e7 && cudaStreamQuery(r.stream) == cudaErrorNotReady)
      if (*progress >= 1) dev_first_us = now_us() - t0;
    if (wait_rank(r) != TPG_SUCCESS) {
      *err = std::string("device loop: ") + tpg_last_error();
      return 1;
    }
    dev_us = now_us() - t0;
    const int dev_n = std::max(0, std::min(N, g.io.out[N]));
    dev_tok.assign(g.io.out, g.io.out + dev_n);
    if (dev_tok != host_tok) break;
  }
  const int n = (int)host_tok.size();
  const bool same = dev_tok == host_tok;
  if (r.rank == 0) {
    std::printf("llama: prompt of %d tokens as %d single-token decode steps (a stand-in for an M-row prefill "
                "graph): %.2f ms (%.1f us/step)\n",
                P, P - 1, prompt_us / 1e3, P > 1 ? prompt_us / (P - 1) : 0.0);
    std::printf("new ids:");
    for (int i = 0; i < n; i++) std::printf("%s%d", i ? "," : " ", host_tok[i]);
    std::printf("\n");
    std::printf("llama: %d new tokens, TP %d: time to first token %.2f ms (prompt steps + the first host-loop step); "
                "per token: host loop %.1f us, device loop %.1f us (first token visible %.0f us into it); device loop "
                "tokens %s\n",
                n, r.nranks, (prompt_us + first_us) / 1e3, n > 1 ? (host_us - first_us) / (n - 1) : first_us,
                dev_tok.empty() ? 0.0 : dev_us / dev_tok.size(), dev_first_us, same ? "identical" : "DIFFER");
    std::fflush(stdout);
  }
  if (!same) {
    size_t i = 0;
    while (i < std::min(host_tok.size(), dev_tok.size()) && host_tok[i] == dev_tok[i]) i++;
    *err = "the device loop's tokens differ from the host loop's from new token " + std::to_string(i) + " on";
    return 1;
  }
  return 0;
}

}  // namespace llama
