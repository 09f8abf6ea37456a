// graph_set.h - the serving step at many sizes: tpgraph's graph set
// (tpg_graph_set) with the engine's plan builder, one graph per size, every
// size's scratch in one arena, each size's build time and memory reported.
#ifndef LLAMA_GRAPHS_GRAPH_SET_H
#define LLAMA_GRAPHS_GRAPH_SET_H

#include <functional>
#include <string>
#include <vector>

#include "examples/llama/llama.h"

namespace llama {

struct GraphSetOptions {
  const char *gemm_pins = nullptr;  // a tuning cache naming every GEMM's kernel (gemm_pin.h), or null:
                                    // tpgraph's selector picks per size
};

struct GraphSet {
  tpg_graph_set *set = nullptr;                // owned
  std::vector<int> sizes;                      // ascending
  std::vector<tpg_graph_set_size_info> info;   // per size, as sizes
  tpg_graph_set_info total{};
};

// Makes the plan of one size: *plan (the set takes it), *bind its buffers.
using PlanFn = std::function<int(int size, tpg_plan **plan, std::vector<tpg_binding> *bind, std::string *err)>;

// The graphs of `sizes` on rank r (collective over the ranks at TP > 1:
// every rank builds the same sizes). With o.gemm_pins every GEMM must be
// found there: a GEMM tpgraph had to time is an error (its kernel would not
// be the pinned one).
int build_graph_set(const Rank &r, const std::vector<int> &sizes, const PlanFn &fn, const GraphSetOptions &o,
                    GraphSet *s, std::string *err);
// The graph of exactly `size`, or null when the set has no such size.
tpg_graph *graph_of(const GraphSet &s, int size);
void free_graph_set(GraphSet *s);

}  // namespace llama

#endif
