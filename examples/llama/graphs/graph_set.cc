// graph_set.cc - graph_set.h with tpg_graph_create per size.
#include "examples/llama/graphs/graph_set.h"

#include <algorithm>
#include <chrono>

#include "examples/llama/graphs/layer.h"

namespace llama {
namespace {

double now_us() {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

size_t free_bytes() {
  size_t f = 0, t = 0;
  return cudaMemGetInfo(&f, &t) == cudaSuccess ? f : 0;
}

// One size's graph over its plan and bindings.
int create_one(const Rank &r, const tpg_plan *p, const std::vector<tpg_binding> &b, const GraphSetOptions &o,
               tpg_graph **g, std::string *err) {
  tpg_graph_config cfg = TPG_GRAPH_CONFIG_INIT;
  cfg.device = r.device;
  cfg.comm = r.comm;
  cfg.bindings = b.data();
  cfg.nbindings = (int)b.size();
  if (r.pdl) cfg.flags |= TPG_GRAPH_PDL;
  if (o.gemm_pins) {
    cfg.gemm_tune = TPG_TUNE_ON;
    cfg.gemm_tune_cache = o.gemm_pins;
  }
  LLAMA_TRY(tpg_graph_create(p, &cfg, g));
  return 0;
}

}  // namespace

int build_graph_set(const Rank &r, std::vector<int> sizes, const PlanFn &fn, const GraphSetOptions &o, GraphSet *s,
                    std::string *err) {
  std::sort(sizes.begin(), sizes.end());
  sizes.erase(std::unique(sizes.begin(), sizes.end()), sizes.end());
  for (int size : sizes) {
    double t0 = now_us();
    tpg_plan *p = nullptr;
    std::vector<tpg_binding> b;
    if (fn(size, &p, &b, err)) return 1;
    s->sizes.push_back(size);
    s->plans.push_back(p);
    s->plan_us.push_back(now_us() - t0);
    const size_t before = free_bytes();
    t0 = now_us();
    tpg_graph *g = nullptr;
    if (create_one(r, p, b, o, &g, err)) return 1;
    s->graphs.push_back(g);
    s->graph_us.push_back(now_us() - t0);
    const size_t after = free_bytes();
    s->bytes.push_back(before > after ? before - after : 0);
    tpg_graph_info gi;
    if (tpg_graph_get_info(g, &gi, sizeof gi) != TPG_SUCCESS) gi = tpg_graph_info();
    s->workspace.push_back(gi.workspace_bytes);
    if (o.gemm_pins && gi.gemm_tuned > 0) {
      *err = "graph of size " + std::to_string(size) + ": " + std::to_string(gi.gemm_tuned) +
             " GEMM(s) missing from the pinned kernels' file " + o.gemm_pins + " (timed instead: not pinned)";
      return 1;
    }
  }
  return 0;
}

tpg_graph *graph_of(const GraphSet &s, int size) {
  const auto it = std::lower_bound(s.sizes.begin(), s.sizes.end(), size);
  return it != s.sizes.end() && *it == size ? s.graphs[it - s.sizes.begin()] : nullptr;
}

void free_graph_set(GraphSet *s) {
  for (tpg_graph *g : s->graphs) tpg_graph_destroy(g);
  for (tpg_plan *p : s->plans) tpg_plan_destroy(p);
  *s = GraphSet();
}

}  // namespace llama
