// graph_set.h - one step at many sizes: a plan builder called once per size,
// a graph per size, all bound to the same buffers (the caller's builder
// binds them), each size's build time and device memory reported.
//
// This is the engine's stand-in for tpgraph's graph-set call, built on the
// public API of today (tpg_graph_create per size): when the library's call
// lands, build_graph_set is the one function that changes.
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
  std::vector<int> sizes;            // ascending, as built
  std::vector<tpg_plan *> plans;     // owned
  std::vector<tpg_graph *> graphs;   // owned
  std::vector<size_t> bytes;         // device memory each size's graph took (free memory before and after)
  std::vector<size_t> workspace;     // of which tpgraph's workspaces (tpg_graph_info.workspace_bytes)
  std::vector<double> plan_us, graph_us;  // host time to build the plan, to create the graph
};

// Makes the plan of one size: *plan owned by the caller, *bind its buffers.
using PlanFn = std::function<int(int size, tpg_plan **plan, std::vector<tpg_binding> *bind, std::string *err)>;

// The graphs of `sizes` (sorted, duplicates dropped) on rank r (collective
// over the ranks at TP > 1: every rank builds the same sizes). With
// o.gemm_pins every GEMM must be found there: a GEMM tpgraph had to time is
// an error (its kernel would not be the pinned one).
int build_graph_set(const Rank &r, std::vector<int> sizes, const PlanFn &fn, const GraphSetOptions &o, GraphSet *s,
                    std::string *err);
// The graph of exactly `size`, or null when the set has no such size.
tpg_graph *graph_of(const GraphSet &s, int size);
void free_graph_set(GraphSet *s);

}  // namespace llama

#endif
