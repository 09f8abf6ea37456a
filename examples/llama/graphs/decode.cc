// decode.cc - the host loop and the device loop of decode.h.
//
// One plan per loop, both made of the same pieces:
//   the decode step (step.cc with device_loop: positions in device memory,
//   each rank's logits its vocab slice), appended with tpg_plan_append;
//   llama_argmax_part: this rank's best (logit, token) per sequence into its
//     own entry of cand [B][R][2], zeros elsewhere;
//   an all-reduce (sum) of cand (our kernel: every rank then holds every
//     rank's candidate; this is the reduction that keeps the ranks in
//     lock-step, since the token and the stop decision are computed from it
//     alike everywhere);
//   llama_decode_pick: the token, streamed to pinned host memory; done at the
//     end token; position + 1; x = emb[token] for the next step;
//   host loop: llama_decode_count (the host reads the token and decides);
//   device loop: llama_decode_cond sets the WHILE node's condition (go on
//     while a sequence is unfinished and fewer than N steps were made), and
//     the whole is the body of that WHILE, after memsets of the counters.
// The embedding table is a random [vocab, hidden] bf16 tensor (the example
// has none of its own): what matters here is that the token feeds back.
#include "examples/llama/graphs/decode.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <vector>

#include "examples/llama/graphs/layer.h"

extern const tpg_embedded_blob llama_decode_kernels[];
extern "C" cudaError_t llama_fill_part(void *dst, size_t pitch, size_t rows, size_t cols, size_t whole_cols,
                                       size_t row0, size_t col0, uint64_t seed, uint32_t tensor, float lo, float hi,
                                       cudaStream_t stream);

namespace llama {
namespace {

#define DCUDA(call)                                                               \
  do {                                                                            \
    cudaError_t e_ = (call);                                                      \
    if (e_ != cudaSuccess) {                                                      \
      *err = std::string(#call) + ": " + cudaGetErrorString(e_);                  \
      return 1;                                                                   \
    }                                                                             \
  } while (0)

}  // namespace

DecodeIo::~DecodeIo() {
  tpg_module_destroy(mod);
  cudaFree(cand);
  cudaFree(step);
  cudaFree(done);
  cudaFreeHost(out);
  cudaFree(emb);
}

int alloc_decode_io(const Config &c, const Rank &r, int steps, DecodeIo *io, std::string *err) {
  const int B = c.batch, R = r.nranks, N = steps;
  LLAMA_TRY(tpg_module_load_embedded(llama_decode_kernels, "loop", &io->mod));
  io->ncand = (B * R * 2 + 3) / 4 * 4;
  DCUDA(cudaMalloc(reinterpret_cast<void **>(&io->cand), io->ncand * sizeof(float)));
  DCUDA(cudaMalloc(reinterpret_cast<void **>(&io->step), 4 * sizeof(int)));
  DCUDA(cudaMalloc(reinterpret_cast<void **>(&io->done), (B + 3) / 4 * 4 * sizeof(int)));
  DCUDA(cudaHostAlloc(reinterpret_cast<void **>(&io->out), ((size_t)N * B + 4) * sizeof(int),
                      cudaHostAllocMapped | cudaHostAllocPortable));
  DCUDA(cudaMalloc(&io->emb, (size_t)c.vocab * c.hidden * 2));
  return 0;
}

// A loop's plan: the step's slots first (tpg_plan_copy_slots, so that
// tpg_plan_append keeps slot ids), then the loop's; bindings likewise.
int build_loop(const Config &c, const Rank &r, const Step &s, const DecodeIo &io, const DecodeOptions &o, bool device,
               tpg_plan **out, std::vector<tpg_binding> *bind, std::string *err) {
  const int B = c.batch, R = r.nranks, H = c.hidden, vpart = c.vocab / R;
  tpg_plan *p = nullptr;
  LLAMA_TRY(tpg_plan_create(&p));
  *out = p;
  int nn = 0;
  LLAMA_TRY(tpg_plan_get_stats(s.plan, &nn, nullptr, nullptr));
  LLAMA_TRY(tpg_plan_copy_slots(p, s.plan, nullptr));
  *bind = s.bindings;
  tpg_slot cand, step, done, outs, emb;
  const int nd = (B + 3) / 4 * 4;
  LLAMA_TRY(tpg_plan_add_slot(p, "dec.cand", TPG_F32, TPG_MEM_DEVICE, io.ncand, &cand));
  LLAMA_TRY(tpg_plan_add_slot(p, "dec.step", TPG_F32, TPG_MEM_DEVICE, 4, &step));
  LLAMA_TRY(tpg_plan_add_slot(p, "dec.done", TPG_F32, TPG_MEM_DEVICE, nd, &done));
  LLAMA_TRY(tpg_plan_add_slot(p, "dec.out", TPG_F32, TPG_MEM_HOST, (size_t)o.steps * B + 4, &outs));
  LLAMA_TRY(tpg_plan_add_slot(p, "dec.emb", TPG_BF16, TPG_MEM_DEVICE, (size_t)c.vocab * H, &emb));
  bind->push_back({cand, io.cand});
  bind->push_back({step, io.step});
  bind->push_back({done, io.done});
  bind->push_back({outs, io.out});
  bind->push_back({emb, io.emb});

  tpg_node loop = 0, n = 0, prev = 0;
  tpg_cond cond = 0;
  if (device) {
    // Counters zeroed at every launch; the condition is 1 at every launch,
    // so the body runs at least once (one token always).
    tpg_node z[2];
    LLAMA_TRY(tpg_plan_add_memset(p, tpg_view{step, 0, 0}, 0, 4, nullptr, 0, &z[0]));
    LLAMA_TRY(tpg_plan_add_memset(p, tpg_view{done, 0, 0}, 0, nd, nullptr, 0, &z[1]));
    LLAMA_TRY(tpg_plan_add_cond(p, 1, 1, &cond));
    tpg_conditional_desc cd = TPG_CONDITIONAL_DESC_INIT;
    cd.type = TPG_COND_WHILE;
    cd.cond = cond;
    LLAMA_TRY(tpg_plan_add_conditional(p, &cd, z, 2, &loop));
    LLAMA_TRY(tpg_plan_set_node_name(p, loop, "decode.while"));
    LLAMA_TRY(tpg_plan_body_begin(p, loop, 0));
  }
  std::vector<tpg_node> map(nn);
  LLAMA_TRY(tpg_plan_append(p, s.plan, map.data()));
  prev = map[nn - 1];
  auto kernel = [&](const char *name, unsigned grid, unsigned block, const std::vector<tpg_arg> &a) -> int {
    tpg_kernel_desc k = TPG_KERNEL_DESC_INIT;
    k.module = io.mod;
    k.name = name;
    k.grid[0] = grid;
    k.block[0] = block;
    k.args = a.data();
    k.nargs = (int)a.size();
    LLAMA_TRY(tpg_plan_add_kernel(p, &k, &prev, 1, &n));
    LLAMA_TRY(tpg_plan_set_node_name(p, n, name));
    prev = n;
    return 0;
  };
  const int rank = r.rank, ncand = io.ncand, end = o.end_token, steps = o.steps;
  if (kernel("llama_argmax_part", B, 1024,
             {tpg_arg_view(cand, 0), tpg_arg_view(s.logits, 0), TPG_ARG_VALUE(vpart), TPG_ARG_VALUE(rank),
              TPG_ARG_VALUE(R), TPG_ARG_VALUE(ncand)}))
    return 1;
  if (R > 1) {  // our one-shot kernel (a few hundred bytes); in a body AUTO could not pick NCCL anyway
    tpg_collective_desc a = TPG_COLLECTIVE_DESC_INIT;
    a.send = a.recv = tpg_view{cand, 0, 0};
    a.count = (size_t)ncand;
    a.algo = TPG_ALGO_ONESHOT;
    LLAMA_TRY(tpg_plan_add_collective(p, &a, &prev, 1, &n));
    LLAMA_TRY(tpg_plan_set_node_name(p, n, "decode.cand.allreduce"));
    prev = n;
  }
  if (kernel("llama_decode_pick", B, 256,
             {tpg_arg_view(cand, 0), TPG_ARG_VALUE(R), tpg_arg_view(outs, 0), tpg_arg_view(step, 0),
              tpg_arg_view(s.pos, 0), tpg_arg_view(done, 0), TPG_ARG_VALUE(end), tpg_arg_view(s.x, 0),
              tpg_arg_view(emb, 0), TPG_ARG_VALUE(H)}))
    return 1;
  const uint64_t progress = (uint64_t)steps * B;
  if (device) {
    if (kernel("llama_decode_cond", 1, 32,
               {tpg_arg_cond(cond), tpg_arg_view(step, 0), tpg_arg_view(done, 0), TPG_ARG_VALUE(B),
                TPG_ARG_VALUE(steps), tpg_arg_view(outs, progress)}))
      return 1;
    LLAMA_TRY(tpg_plan_body_end(p));
  } else if (kernel("llama_decode_count", 1, 32,
                    {tpg_arg_view(step, 0), tpg_arg_view(done, 0), TPG_ARG_VALUE(B), TPG_ARG_VALUE(steps),
                     tpg_arg_view(outs, progress)})) {
    return 1;
  }
  LLAMA_TRY(tpg_plan_validate(p));
  return 0;
}

int create_loop_graph(const Rank &r, tpg_plan *p, const std::vector<tpg_binding> &b, tpg_graph **g,
                      std::string *err) {
  tpg_graph_config cfg = TPG_GRAPH_CONFIG_INIT;
  cfg.device = r.device;
  cfg.comm = r.comm;
  cfg.bindings = b.data();
  cfg.nbindings = (int)b.size();
  if (r.pdl) cfg.flags |= TPG_GRAPH_PDL;
  LLAMA_TRY(tpg_graph_create(p, &cfg, g));
  return 0;
}

namespace {

// The state both loops start from: x = the step-0 input, every position at
// ctx, counters zero, no tokens. The caches need no reset: a run writes
// positions ctx, ctx + 1, ... before it reads them, with the same values.
int reset(const Config &c, const Rank &r, const Source &src, const Step &s, const DecodeIo &io, const DecodeOptions &o,
          std::string *err) {
  if (load_input(c, src, 0, s.d_x, r.stream, err)) return 1;
  std::vector<int> pos(c.batch, c.ctx);
  DCUDA(cudaMemcpyAsync(s.d_pos, pos.data(), pos.size() * sizeof(int), cudaMemcpyHostToDevice, r.stream));
  DCUDA(cudaMemsetAsync(io.step, 0, 4 * sizeof(int), r.stream));
  DCUDA(cudaMemsetAsync(io.done, 0, (c.batch + 3) / 4 * 4 * sizeof(int), r.stream));
  DCUDA(cudaStreamSynchronize(r.stream));
  std::memset(io.out, 0xff, ((size_t)o.steps * c.batch + 4) * sizeof(int));
  return 0;
}

double now_us() {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

namespace {

// Everything run_decode holds, released in reverse order.
struct DecodeRun {
  Config cc;
  DecodeIo io;
  Caches k;
  Step s;
  LmHead lm{};
  tpg_plan *hp = nullptr, *dp = nullptr;
  tpg_graph *hg = nullptr, *dg = nullptr;
  ~DecodeRun() {
    if (hg) tpg_graph_destroy(hg);
    if (dg) tpg_graph_destroy(dg);
    tpg_plan_destroy(hp);
    tpg_plan_destroy(dp);
    free_step(&s);
    free_caches(&k);
  }
};

// Host loop: launch, wait, read the token back, decide; the device loop's
// rule on the host: stop once every sequence has made the end token (at any
// step), or after N steps. *n: steps made; *us: per step.
int host_loop(const Rank &r, const Source &src, const DecodeOptions &o, DecodeRun &d, int *n, double *us,
              std::string *err) {
  const int B = d.cc.batch, N = o.steps;
  if (reset(d.cc, r, src, d.s, d.io, o, err)) return 1;
  const double t0 = now_us();
  std::vector<char> ended(B, 0);
  for (*n = 0; *n < N;) {
    if (tpg_graph_launch(d.hg, r.stream) != TPG_SUCCESS || wait_rank(r) != TPG_SUCCESS) {
      *err = std::string("host loop: ") + tpg_last_error();
      return 1;
    }
    bool all = true;
    for (int b = 0; b < B; b++) {
      ended[b] |= d.io.out[(size_t)*n * B + b] == o.end_token;
      all &= ended[b] != 0;
    }
    (*n)++;
    if (all) break;
  }
  *us = (now_us() - t0) / *n;
  return 0;
}

// Device loop: one launch; the host watches the first token arrive, then
// (or after 10 s, in case the loop hangs) leaves the waiting to wait_rank
// (tpg_comm_wait aborts on a lost peer). *n: steps made; *us: per step;
// *seen: when the first token was visible.
int device_loop(const Rank &r, const Source &src, const DecodeOptions &o, DecodeRun &d, int *n, double *us,
                double *seen, std::string *err) {
  const int B = d.cc.batch, N = o.steps;
  if (reset(d.cc, r, src, d.s, d.io, o, err)) return 1;
  const double t0 = now_us();
  if (tpg_graph_launch(d.dg, r.stream) != TPG_SUCCESS) {
    *err = std::string("device loop: ") + tpg_last_error();
    return 1;
  }
  volatile int *progress = d.io.out + (size_t)N * B;
  *seen = -1;
  while (*seen < 0 && now_us() - t0 < 1e7 && cudaStreamQuery(r.stream) == cudaErrorNotReady)
    if (*progress >= 1) *seen = now_us() - t0;
  if (wait_rank(r) != TPG_SUCCESS) {
    *err = std::string("device loop: ") + tpg_last_error();
    return 1;
  }
  *n = d.io.out[(size_t)N * B];
  *us = (now_us() - t0) / std::max(*n, 1);
  return 0;
}

// The body's device time alone: the host loop's graph (the same step,
// sampling and counting, with positions advanced on the device) launched
// host_n times back to back between two events, no host wait in between:
// what the device loop would cost per token if its WHILE node were free.
int body_time(const Rank &r, const Source &src, const DecodeOptions &o, DecodeRun &d, int host_n, double *us,
              std::string *err) {
  cudaEvent_t e0 = nullptr, e1 = nullptr;
  float ms = 0;
  bool ok = reset(d.cc, r, src, d.s, d.io, o, err) == 0 && cudaEventCreate(&e0) == cudaSuccess &&
            cudaEventCreate(&e1) == cudaSuccess && cudaEventRecord(e0, r.stream) == cudaSuccess;
  for (int n = 0; ok && n < host_n; n++) ok = tpg_graph_launch(d.hg, r.stream) == TPG_SUCCESS;
  ok = ok && cudaEventRecord(e1, r.stream) == cudaSuccess && wait_rank(r) == TPG_SUCCESS &&
       cudaEventElapsedTime(&ms, e0, e1) == cudaSuccess;
  if (e0) cudaEventDestroy(e0);
  if (e1) cudaEventDestroy(e1);
  if (!ok) {
    if (err->empty()) *err = std::string("body timing: ") + tpg_last_error();
    return 1;
  }
  *us = 1e3 * ms / host_n;
  return 0;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// What both loops made and took; 1 when their tokens differ.
struct LoopResults {
  std::vector<int> host_tok, dev_tok;
  std::vector<double> host_us, dev_us;
  int host_n = 0, dev_n = 0;
  double first_seen_us = -1, body_us = 0;
};
int report(const Config &c, const Rank &r, const LoopResults &lr, std::string *err) {
  const int B = c.batch;
  size_t diff = 0, first = (size_t)-1;
  for (size_t i = 0; i < std::min(lr.host_tok.size(), lr.dev_tok.size()); i++)
    if (lr.host_tok[i] != lr.dev_tok[i] && diff++ == 0) first = i;
  const bool same = lr.dev_n == lr.host_n && diff == 0;
  const double hu = median(lr.host_us), du = median(lr.dev_us);
  // us/token: per decode step (B tokens each); tokens/s counts all B.
  std::printf("decode rank %d: %d layers TP %d batch %d ctx %d: host loop %d steps %.1f us/token (%.0f tokens/s), "
              "device loop %d steps %.1f us/token (%.0f tokens/s), %.2fx; first token visible to the host %.0f us "
              "into the device loop; tokens %s (%zu of %zu differ)\n",
              r.rank, c.layers, r.nranks, B, c.ctx, lr.host_n, hu, hu > 0 ? B * 1e6 / hu : 0.0, lr.dev_n, du,
              du > 0 ? B * 1e6 / du : 0.0, du > 0 ? hu / du : 0.0, lr.first_seen_us, same ? "identical" : "DIFFER",
              diff, lr.host_tok.size());
  std::printf("decode rank %d: the body alone (%d launches back to back) %.1f us/token; device loop / body %.3f\n",
              r.rank, lr.host_n, lr.body_us, lr.body_us > 0 ? du / lr.body_us : 0.0);
  if (r.rank == 0) {
    std::printf("decode: tokens of sequence 0:");
    for (int i = 0; i < std::min(lr.host_n, 16); i++) std::printf(" %d", lr.host_tok[(size_t)i * B]);
    std::printf("%s\n", lr.host_n > 16 ? " ..." : "");
  }
  if (same) return 0;
  // A first difference late in the run, after identical steps, points at
  // a near-tie flipped by a reordered float sum (split-K GEMVs add
  // partials with atomics); one at step 0 at the loop itself.
  if (first != (size_t)-1)
    std::printf("decode rank %d: first difference at step %zu, sequence %zu: host %d, device %d\n", r.rank, first / B,
                first % B, lr.host_tok[first], lr.dev_tok[first]);
  *err = "the device loop's tokens differ from the host loop's";
  return 1;
}

}  // namespace

int run_decode(const Config &c, const Rank &r, const Weights &w, const Source &src, const DecodeOptions &o,
               std::string *err) {
  const int B = c.batch, N = o.steps;
  if (c.vocab <= 0 || !w.lm_head) {
    *err = "decoding needs the LM head (--vocab)";
    return 1;
  }
  DecodeRun d;
  d.cc = c;
  d.cc.max_ctx = std::max(c.max_ctx, c.ctx + N);
  if (alloc_decode_io(c, r, N, &d.io, err)) return 1;
  DCUDA(llama_fill_part(d.io.emb, c.hidden, c.vocab, c.hidden, c.hidden, 0, 0, c.seed, 0x454d4231u /* "EMB1" */, -1.f,
                        1.f, r.stream));
  d.s.device_loop = true;
  std::vector<tpg_binding> hb, db;
  if (alloc_caches(d.cc, r, &d.k, err) || load_caches(d.cc, r, src, d.k, err) || alloc_step_io(d.cc, &d.s, err) ||
      build_step(d.cc, r, w, d.k, d.cc.ctx + N, &d.lm, &d.s, err) || warm_lm_head(r, w, &d.lm, &d.s, err) ||
      build_loop(d.cc, r, d.s, d.io, o, false, &d.hp, &hb, err) ||
      build_loop(d.cc, r, d.s, d.io, o, true, &d.dp, &db, err) || create_loop_graph(r, d.hp, hb, &d.hg, err) ||
      create_loop_graph(r, d.dp, db, &d.dg, err))
    return 1;
  LoopResults lr;
  for (int it = 0; it <= o.iters; it++) {  // run 0 warms up
    double hu = 0, du = 0, seen = -1;
    if (host_loop(r, src, o, d, &lr.host_n, &hu, err)) return 1;
    if (it) lr.host_us.push_back(hu);
    lr.host_tok.assign(d.io.out, d.io.out + (size_t)lr.host_n * B);
    if (device_loop(r, src, o, d, &lr.dev_n, &du, &seen, err)) return 1;
    if (it) {
      lr.dev_us.push_back(du);
      lr.first_seen_us = seen;
    }
    lr.dev_tok.assign(d.io.out, d.io.out + (size_t)std::max(lr.dev_n, 0) * B);
    if (lr.dev_n != lr.host_n || lr.dev_tok != lr.host_tok) break;
  }
  if (lr.host_n > 0 && body_time(r, src, o, d, lr.host_n, &lr.body_us, err)) return 1;
  return report(c, r, lr, err);
}

}  // namespace llama
