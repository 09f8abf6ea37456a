// graph_set.cc - graph_set.h over tpg_graph_set_create.
#include "examples/llama/graphs/graph_set.h"

#include <algorithm>

#include "examples/llama/graphs/layer.h"

namespace llama {
namespace {

// The set's builder: the engine's PlanFn, its message kept for the caller.
struct Builder {
  const PlanFn *fn;
  std::vector<tpg_binding> bind;  // the last size's, alive until the set copies them
  std::string err;
};

tpg_status build_one(void *user, int size, tpg_graph_set_step *out) {
  Builder *b = static_cast<Builder *>(user);
  b->bind.clear();
  tpg_plan *p = nullptr;
  if ((*b->fn)(size, &p, &b->bind, &b->err)) return TPG_ERROR_INVALID_ARGUMENT;
  out->plan = p;
  out->bindings = b->bind.data();
  out->nbindings = (int)b->bind.size();
  return TPG_SUCCESS;
}

// With pinned GEMMs, every size must have found each GEMM in the file.
int check_pinned(const GraphSet &s, const char *pins, std::string *err) {
  for (int size : s.sizes) {
    tpg_graph_info gi;
    tpg_graph *g = graph_of(s, size);
    LLAMA_TRY(tpg_graph_get_info(g, &gi, sizeof gi));
    if (gi.gemm_tuned > 0) {
      *err = "graph of size " + std::to_string(size) + ": " + std::to_string(gi.gemm_tuned) +
             " GEMM(s) missing from the pinned kernels' file " + pins + " (timed instead: not pinned)";
      return 1;
    }
  }
  return 0;
}

}  // namespace

int build_graph_set(const Rank &r, const std::vector<int> &sizes, const PlanFn &fn, const GraphSetOptions &o,
                    GraphSet *s, std::string *err) {
  tpg_graph_config cfg = TPG_GRAPH_CONFIG_INIT;
  cfg.device = r.device;
  cfg.comm = r.comm;
  if (r.pdl) cfg.flags |= TPG_GRAPH_PDL;
  if (o.gemm_pins) {
    cfg.gemm_tune = TPG_TUNE_ON;
    cfg.gemm_tune_cache = o.gemm_pins;
  }
  Builder b{&fn, {}, {}};
  // One rank: the sizes' graphs are finished on worker threads (the plans
  // hold no captured work of the engine's, and no NCCL capture to order).
  const unsigned flags = r.nranks == 1 ? TPG_GRAPH_SET_PARALLEL : 0;
  if (tpg_graph_set_create(sizes.data(), (int)sizes.size(), build_one, &b, &cfg, flags, &s->set) != TPG_SUCCESS) {
    *err = b.err.empty() ? std::string("tpg_graph_set_create: ") + tpg_last_error() : b.err;
    s->set = nullptr;
    return 1;
  }
  LLAMA_TRY(tpg_graph_set_get_info(s->set, &s->total, sizeof s->total));
  for (int i = 0; i < s->total.count; i++) {
    tpg_graph_set_size_info si;
    LLAMA_TRY(tpg_graph_set_get_size_info(s->set, i, &si, sizeof si));
    s->sizes.push_back(si.size);
    s->info.push_back(si);
  }
  return o.gemm_pins ? check_pinned(*s, o.gemm_pins, err) : 0;
}

tpg_graph *graph_of(const GraphSet &s, int size) {
  if (!std::binary_search(s.sizes.begin(), s.sizes.end(), size)) return nullptr;
  int got = 0;
  tpg_graph *g = nullptr;
  return tpg_graph_set_pick(s.set, size, &got, &g) == TPG_SUCCESS && got == size ? g : nullptr;
}

void free_graph_set(GraphSet *s) {
  if (s->set) tpg_graph_set_destroy(s->set);
  *s = GraphSet();
}

}  // namespace llama
