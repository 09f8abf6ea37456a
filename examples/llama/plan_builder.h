// plan_builder.h - the few lines every plan of the engine repeats (the
// decode step, step.cc, and the prefill, prefill.cc): a slot with its
// binding, a chain of nodes each after the one before, an engine kernel
// node by name.
#ifndef LLAMA_PLAN_BUILDER_H
#define LLAMA_PLAN_BUILDER_H

#include <string>
#include <vector>

#include "examples/llama/llama.h"

namespace llama {

// On failure: *err = the call and tpgraph's message, return 1.
#define LLAMA_TRY(call)                                                           \
  do {                                                                            \
    tpg_status s_ = (call);                                                       \
    if (s_ != TPG_SUCCESS) {                                                      \
      *err = std::string(#call) + ": " + tpg_last_error();                        \
      return 1;                                                                   \
    }                                                                             \
  } while (0)

struct PlanBuilder {
  tpg_plan *p;
  std::vector<tpg_binding> *bindings;  // non-scratch slots' buffers, in the order added
  std::string *err;
  tpg_node last = 0;
  bool have_last = false;

  int slot(const char *name, tpg_dtype t, tpg_memory m, size_t n, void *bound, tpg_slot *out) {
    LLAMA_TRY(tpg_plan_add_slot(p, name, t, m, n, out));
    if (m != TPG_MEM_SCRATCH) bindings->push_back({*out, bound});
    return 0;
  }
  int slot(const std::string &name, tpg_dtype t, tpg_memory m, size_t n, void *bound, tpg_slot *out) {
    return slot(name.c_str(), t, m, n, bound, out);
  }
  // The chain: every node after the previous one.
  const tpg_node *dep() const { return have_last ? &last : nullptr; }
  int ndep() const { return have_last ? 1 : 0; }
  void chain(tpg_node n) {
    last = n;
    have_last = true;
  }
  // An engine kernel by name: of r.module, or of `mod` when given. pdl:
  // the kernel waits with griddepcontrol.wait before it reads (kernels.cu's
  // and prefill_kernels.cu's do; decode_kernels.cu's do not), so it is
  // marked pdl when the rank runs with PDL.
  int kernel(const char *name, const std::string &label, unsigned gx, unsigned gy, unsigned gz, unsigned block,
             const std::vector<tpg_arg> &args, const Rank &r, const tpg_module *mod = nullptr, bool pdl = true) {
    tpg_kernel_desc k = TPG_KERNEL_DESC_INIT;
    k.module = mod ? mod : r.module;
    k.pdl = r.pdl && pdl ? 1 : 0;
    k.name = name;
    k.grid[0] = gx;
    k.grid[1] = gy;
    k.grid[2] = gz;
    k.block[0] = block;
    k.args = args.data();
    if (r.stub_function) {  // plan_test: no module without a GPU
      k.module = nullptr;
      k.name = nullptr;
      k.cu_function = r.stub_function;
    }
    k.nargs = (int)args.size();
    tpg_node n;
    LLAMA_TRY(tpg_plan_add_kernel(p, &k, dep(), ndep(), &n));
    LLAMA_TRY(tpg_plan_set_node_name(p, n, label.c_str()));
    chain(n);
    return 0;
  }
};

}  // namespace llama

#endif
