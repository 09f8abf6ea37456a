// serve.cc - serve.h: the serving loop. Each step: the scheduler's plan into
// the pinned inputs, the block-table rows that changed to the device, one
// launch of the graph of the step's size, a wait, the sampled tokens back
// to the scheduler. Every rank runs the same loop on the same tokens (the
// step all-reduces the argmax candidates), so the ranks stay in step with
// no other exchange. The KV pool takes what device memory is left after the
// weights and the graphs' scratch (or --kv-blocks).
#include "examples/llama/run/serve.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>

#include "examples/llama/graphs/gemm_pin.h"
#include "examples/llama/graphs/graph_set.h"
#include "examples/llama/graphs/serve_step.h"
#include "examples/llama/kernels/kernels.h"
#include "examples/llama/run/serve_report.h"

namespace llama {
namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Everything the loop holds, released in reverse order.
struct Engine {
  ServeShape sh;
  ServeBuffers b;
  GraphSet set;
  std::vector<int> sizes;
  std::string pins;  // the pinned GEMM kernels' file, removed at the end
  int G = 1;
  ~Engine() {
    free_graph_set(&set);
    free_serve(&b);
    if (!pins.empty()) unlink(pins.c_str());
  }
};

// Device memory the graph set's scratch and the engine's other buffers take
// besides the pools (an estimate that errs high: the pool gets the rest).
size_t others_bytes(const Config &c, const Rank &r, const ServeShape &sh) {
  const size_t T = sh.max_rows, S = sh.max_seqs, H = c.hidden, D = c.head_dim, nq = q_heads(c, r);
  const size_t wqkv = (nq + 2 * kv_heads(c, r)) * D, F = c.ffn / r.nranks, vpart = c.vocab / r.nranks;
  const size_t act = T * 2 * (5 * H + wqkv + 2 * nq * D + F), split = S * nq * sh.nsplit() * (D + 2) * 4;
  return act + split + S * (2 * H + 4 * vpart + 64) + (size_t)c.vocab * H * 2 + S * sh.max_blocks() * 4;
}

// The shape of the set and the pool: blocks from --kv-blocks, or what free
// memory holds after the rest and a reserve (1 GiB + 5%: the execs, cuBLAS,
// the driver), never more than every sequence at max_ctx needs.
int make_shape(const Config &c, const Rank &r, const ServeOptions &o, int max_ctx, ServeShape *sh, std::string *err) {
  sh->max_rows = o.max_rows;
  sh->max_seqs = o.max_seqs;
  sh->max_ctx = std::max(LLAMA_KV_BLOCK, (max_ctx + LLAMA_KV_BLOCK - 1) / LLAMA_KV_BLOCK * LLAMA_KV_BLOCK);
  sh->split_len = o.split;
  const size_t block = (size_t)c.layers * 2 * kv_heads(c, r) * LLAMA_KV_BLOCK * c.head_dim * 2;
  const long most = (long)sh->max_seqs * sh->max_blocks();
  if (o.kv_blocks > 0) {
    sh->nblocks = o.kv_blocks;
    return 0;
  }
  size_t fr = 0, total = 0;
  if (cudaMemGetInfo(&fr, &total) != cudaSuccess) {
    *err = "cudaMemGetInfo failed";
    return 1;
  }
  const size_t keep = others_bytes(c, r, *sh) + (1ull << 30) + total / 20;
  const long fit = fr > keep ? (long)((fr - keep) / block) : 0;
  sh->nblocks = (int)std::min(most, fit);
  if (sh->nblocks < 1) {
    *err = "no device memory left for the KV pool (" + std::to_string(fr >> 20) + " MiB free, " +
           std::to_string(keep >> 20) + " MiB kept for the graphs; try smaller --max-step-rows or --max-seqs)";
    return 1;
  }
  return 0;
}

// The set's plans, its pinned GEMMs (--batch-invariant) and its graphs.
int build_set(const Config &c, const Rank &r, const Weights &w, bool invariant, Engine &e, std::string *err) {
  GraphSetOptions go;
  for (const char *v : {"TPG_GEMM_TUNE", "TPG_GEMM_TUNE_CACHE"})  // they override the graph config's tuning
    if (invariant && std::getenv(v) && *std::getenv(v)) {
      *err = std::string("--batch-invariant pins the GEMMs through the graph config's tuning cache: unset ") + v;
      return 1;
    }
  if (invariant) {
    std::vector<GemmShape> shapes;
    for (int T : e.sizes) {
      const std::vector<GemmShape> v = serve_step_gemms(c, r, w, e.sh, T);
      shapes.insert(shapes.end(), v.begin(), v.end());
    }
    int major = 0, minor = 0;
    if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, r.device) != cudaSuccess ||
        cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, r.device) != cudaSuccess) {
      *err = "--batch-invariant: the GPU's compute capability could not be read";
      return 1;
    }
    e.pins = "/tmp/llama-gemm-pins-" + std::to_string(getpid()) + "-" + std::to_string(r.rank) + ".txt";
    if (write_gemm_pins(e.pins, shapes, r.sm_count, 10 * major + minor, LLAMA_PINNED_GEMM, err)) return 1;
    go.gemm_pins = e.pins.c_str();
  }
  const PlanFn fn = [&](int size, tpg_plan **p, std::vector<tpg_binding> *bind, std::string *e2) {
    return build_serve_step(c, r, w, e.sh, e.b, size, p, bind, e2);
  };
  return build_graph_set(r, e.sizes, fn, go, &e.set, err);
}

// The engine for `reqs`: shape, buffers, the token embedding, the graphs.
int setup(const Config &c, const Rank &r, const Weights &w, const Source &src, const ServeOptions &o, int max_ctx,
          Engine &e, std::string *err) {
  e.G = q_heads(c, r) / kv_heads(c, r);
  if (graph_sizes(o.sizes, o.max_rows, &e.sizes, err)) return 1;
  if (e.sizes.back() != o.max_rows) e.sizes.push_back(o.max_rows);  // the scheduler needs a step above max_seqs
  if (make_shape(c, r, o, max_ctx, &e.sh, err) || alloc_serve(c, r, e.sh, &e.b, err) ||
      load_tensor(c, src, "embed", c.vocab, c.hidden, e.b.emb, err))
    return 1;
  return build_set(c, r, w, o.batch_invariant, e, err);
}

// One step: inputs, changed block tables, the launch, the tokens.
int run_step(Engine &e, const Rank &r, const Scheduler &s, const StepPlan &p, std::vector<int> *tokens,
             std::string *err) {
  tpg_graph *g = graph_of(e.set, p.size);
  const StepLayout lay = step_layout(e.sh, p.size, e.G);
  const int npw = (int)p.work.size() / 2, ns = (int)p.sample.size(), mb = e.sh.max_blocks();
  if (!g || npw > lay.W || ns > lay.L) {
    *err = "step of " + std::to_string(p.size) + " rows: no graph of that size, or " + std::to_string(npw) +
           " work items / " + std::to_string(ns) + " sampled rows beyond its " + std::to_string(lay.W) + " / " +
           std::to_string(lay.L);
    return 1;
  }
  int *in = e.b.in_host;
  std::memset(in, 0, (size_t)lay.total * 4);
  in[lay.meta] = p.nd;
  in[lay.meta + 1] = npw;
  std::copy(p.ids.begin(), p.ids.end(), in + lay.ids);
  std::copy(p.pos.begin(), p.pos.end(), in + lay.pos);
  std::copy(p.seq.begin(), p.seq.end(), in + lay.seq);
  std::copy(p.work.begin(), p.work.end(), in + lay.work);
  std::copy(p.sample.begin(), p.sample.end(), in + lay.sample);
  for (int slot : p.changed)
    if (cudaMemcpyAsync(e.b.tables + (size_t)slot * mb, s.tables().data() + (size_t)slot * mb, (size_t)mb * 4,
                        cudaMemcpyHostToDevice, r.stream) != cudaSuccess) {
      *err = "block table copy failed";
      return 1;
    }
  if (tpg_graph_launch(g, r.stream) != TPG_SUCCESS || wait_rank(r) != TPG_SUCCESS) {
    *err = std::string("step of ") + std::to_string(p.size) + " rows: " + tpg_last_error();
    return 1;
  }
  tokens->assign(e.b.out, e.b.out + ns);
  return 0;
}

// Every request of `reqs` through the scheduler and the graphs.
int serve_all(Engine &e, const Rank &r, const std::vector<Request> &reqs, Scheduler *s, ServeStats *st,
              std::string *err) {
  SchedConfig sc;
  sc.sizes = e.sizes;
  sc.max_seqs = e.sh.max_seqs;
  sc.max_prompts = e.sh.max_prompts;
  sc.nblocks = e.sh.nblocks;
  sc.block = LLAMA_KV_BLOCK;
  sc.max_blocks = e.sh.max_blocks();
  sc.rows_per_item = LLAMA_PREFILL_POSITIONS(e.G);
  if (s->init(sc, reqs, err)) return 1;
  const double t0 = now_s();
  std::vector<int> tokens;
  while (!s->done()) {
    StepPlan p;
    if (!s->next(&p)) {
      *err = "the scheduler found nothing to run with requests left";
      return 1;
    }
    if (run_step(e, r, *s, p, &tokens, err)) return 1;
    s->commit(p, tokens, now_s() - t0);
    st->add_step(p);
  }
  st->seconds = now_s() - t0;
  st->peak_blocks = s->peak_blocks();
  return 0;
}

// The requests the pool cannot hold (more blocks than it has) are refused
// alone; the rest go on.
void refuse_unfit(const Engine &e, const std::vector<Request> &all, std::vector<Request> *fit,
                  std::vector<Refusal> *refused) {
  for (const Request &q : all) {
    const long need = ((long)q.prompt.size() + q.max_new + LLAMA_KV_BLOCK - 1) / LLAMA_KV_BLOCK;
    if (need <= e.sh.nblocks) {
      fit->push_back(q);
      continue;
    }
    refused->push_back({q.line, "requests line " + std::to_string(q.line) + ": needs " + std::to_string(need) +
                                    " KV blocks of " + std::to_string(LLAMA_KV_BLOCK) + " positions; the pool has " +
                                    std::to_string(e.sh.nblocks)});
  }
}

// Each request again with nothing beside it: its ids must be the batch's.
int check_alone(Engine &e, const Rank &r, const std::vector<Request> &reqs, const std::vector<Outcome> &batch,
                bool must, std::string *err) {
  int same = 0;
  std::string first;
  for (size_t i = 0; i < reqs.size(); i++) {
    Scheduler one;
    ServeStats st;
    if (serve_all(e, r, {reqs[i]}, &one, &st, err)) return 1;
    const bool eq = one.outcomes()[0].ids == batch[i].ids;
    same += eq;
    if (!eq && first.empty()) first = "line " + std::to_string(reqs[i].line);
  }
  if (r.rank == 0)
    std::printf("serve: alone: %d of %zu requests made the same ids on their own as in the batch%s%s\n", same,
                reqs.size(), first.empty() ? "" : "; first difference: ", first.c_str());
  if (must && same != (int)reqs.size()) {
    *err = "--batch-invariant: " + std::to_string(reqs.size() - same) + " request(s) differ from their own run";
    return 1;
  }
  return 0;
}

}  // namespace

int run_serve(const Config &c, const Rank &r, const Weights &w, const Source &src, const ServeOptions &o,
              const std::string &out, std::string *err) {
  Engine e;
  if (setup(c, r, w, src, o, o.max_ctx, e, err)) return 1;
  std::vector<Request> fit;
  std::vector<Refusal> refused = o.refused;
  refuse_unfit(e, o.reqs, &fit, &refused);
  // In line order, whichever check refused them (the reader, the vocabulary,
  // the sliding window, the pool).
  std::stable_sort(refused.begin(), refused.end(), [](const Refusal &a, const Refusal &b) { return a.line < b.line; });
  if (r.rank == 0)
    for (const Refusal &f : refused) std::fprintf(stderr, "llama: refused: %s\n", f.why.c_str());
  if (fit.empty()) {
    *err = "no request fits the KV pool of " + std::to_string(e.sh.nblocks) + " blocks: nothing to serve";
    return 1;
  }
  Scheduler s;
  ServeStats st;
  if (serve_all(e, r, fit, &s, &st, err)) return 1;
  if (r.rank == 0) {
    const ServeSummary sum = summarize(fit, s.outcomes(), st, e.sh, e.set, (int)refused.size(), o.batch_invariant);
    print_summary(sum);
    if (!out.empty() && write_outputs(out, fit, s.outcomes(), refused, sum, err)) return 1;
  }
  return o.check_alone ? check_alone(e, r, fit, s.outcomes(), o.batch_invariant, err) : 0;
}

int run_graph_sizes(const Config &c, const Rank &r, const Weights &w, const Source &src, const ServeOptions &o,
                    const std::string &out, std::string *err) {
  Engine e;
  ServeOptions so = o;
  if (so.kv_blocks <= 0) so.kv_blocks = so.max_seqs;  // the pool's size changes no graph: one block a sequence
  e.G = q_heads(c, r) / kv_heads(c, r);
  if (graph_sizes(so.sizes, so.max_rows, &e.sizes, err) || make_shape(c, r, so, 8192, &e.sh, err) ||
      alloc_serve(c, r, e.sh, &e.b, err) || load_tensor(c, src, "embed", c.vocab, c.hidden, e.b.emb, err) ||
      build_set(c, r, w, so.batch_invariant, e, err))
    return 1;
  if (r.rank != 0) return 0;
  const std::string json = print_graph_sizes(e.set, e.b, c);
  return out.empty() ? 0 : write_graph_sizes(out, json, err);
}

}  // namespace llama
