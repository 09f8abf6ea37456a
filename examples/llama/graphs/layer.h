// layer.h - what every plan of the engine repeats (the decode step,
// step.cc, and the prefill, prefill.cc): a slot with its binding, a chain
// of nodes each after the one before, an engine kernel node by name, and
// the layer's QKV linear and everything after its attention, which the two
// build alike at their own row counts.
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
  // the kernel waits with griddepcontrol.wait before it reads (kernels/step.cu's
  // and kernels/prefill.cu's do; kernels/loop.cu's do not), so it is
  // marked pdl when the rank runs with PDL.
  // smem: dynamic shared memory per block.
  int kernel(const char *name, const std::string &label, unsigned gx, unsigned gy, unsigned gz, unsigned block,
             const std::vector<tpg_arg> &args, const Rank &r, const tpg_module *mod = nullptr, bool pdl = true,
             unsigned smem = 0) {
    tpg_kernel_desc k = TPG_KERNEL_DESC_INIT;
    k.module = mod ? mod : r.module;
    k.pdl = r.pdl && pdl ? 1 : 0;
    k.name = name;
    k.grid[0] = gx;
    k.grid[1] = gy;
    k.grid[2] = gz;
    k.block[0] = block;
    k.shared_bytes = smem;
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

  // The parts of a layer the decode step (rows = B sequences) and the
  // prefill (rows = M prompt rows) build alike; l is the layer's name
  // prefix ("l3."), and the nodes are named as below.
  //
  // "<l>qkv": qkv = h Wqkv_r^T, a column linear over the whole layer's
  // width (each rank's rows are its own heads, weights.cc); bias: Qwen2's
  // q/k/v biases of this rank (slot "<l>bqkv", the GEMM's bias epilogue), or null.
  // h: the normed rows, unless the previous row linear folded the norm
  // (then x and the norm come from it: take_fold).
  int qkv_linear(const Rank &r, int rows, int hidden, int wqkv, tpg_slot h, tpg_slot w, tpg_slot qkv, void *bias,
                 const std::string &l) {
    tpg_linear_desc d = TPG_LINEAR_DESC_INIT;
    d.kind = TPG_LINEAR_COLUMN;
    d.rank = r.rank;
    d.nranks = r.nranks;
    d.tokens = rows;
    d.in_features = hidden;
    d.out_features = wqkv * r.nranks;
    d.x = tpg_view{h, 0, 0};
    take_fold(&d);
    d.w = tpg_view{w, 0, 0};
    d.y = tpg_view{qkv, 0, 0};
    if (bias) {
      tpg_slot bs;
      if (slot(l + "bqkv", TPG_BF16, TPG_MEM_DEVICE, (size_t)wqkv, bias, &bs)) return 1;
      d.bias = tpg_view{bs, 0, 0};
    }
    const std::string name = l + "qkv";
    d.name = name.c_str();
    tpg_node n;
    LLAMA_TRY(tpg_plan_add_linear(p, &d, dep(), ndep(), &n));
    chain(n);
    return 0;
  }

  // The rest of the layer after attention, on rows x hidden buffers:
  //   "<l>o":        part = attn Wo_r^T, all-reduce; x += sum, h2 = RMSNorm(x) * mlp_norm
  //   "<l>gate_up":  act = silu(h2 Wg_r^T) * (h2 Wu_r^T), a column linear with SwiGLU
  //   "<l>down":     part = act W2_r^T, all-reduce; x += sum, h = RMSNorm(x) * next_norm
  // (each row-parallel GEMM then its all-reduce, whose epilogue adds the
  // residual x in place and applies the next RMSNorm: tpg_plan_add_linear_norm).
  //
  // ssq (folds): the norms are folded into the next linear's loads
  // (tpg_x_norm): "<l>o" and "<l>down" are then their GEMMs alone, writing
  // x and its rows' sums of squares into ssq, and gate_up (and the next
  // layer's qkv, when fold_next) normalize x where they read it.
  struct Rows {
    int rows, hidden;
    float eps;
    tpg_slot x, h, h2, part, act;
    tpg_slot ssq = 0;  // 0: every norm is its own kernel
  };
  // Whether a plan of `rows` rows folds its norms: one rank, the GEMVs' rows.
  static bool folds(const Rank &r, int rows) {
    return r.fold_norm && r.nranks == 1 && rows <= TPG_NORM_FOLD_MAX_ROWS;
  }
  // Rows::ssq for such a plan (a scratch slot), else 0.
  int ssq_slot(const Rank &r, int rows, int hidden, tpg_slot *out) {
    *out = 0;
    if (!folds(r, rows)) return 0;
    return slot("ssq", TPG_F32, TPG_MEM_SCRATCH, (size_t)rows * TPG_NORM_FOLD_GROUPS(hidden), nullptr, out);
  }
  int layer_after_attention(const Config &c, const Rank &r, const Rows &b, tpg_slot attn, int attn_width, tpg_slot wo,
                            tpg_slot mlp_norm, tpg_slot w13, tpg_slot w2, tpg_slot next_norm, const std::string &l,
                            bool fold_next) {
    if (row_allreduce(b, attn, attn_width, wo, mlp_norm, b.h2, l + "o", r.nranks, r.rank, b.ssq != 0)) return 1;
    tpg_linear_desc up = TPG_LINEAR_DESC_INIT;
    up.kind = TPG_LINEAR_COLUMN;
    up.rank = r.rank;
    up.nranks = r.nranks;
    up.tokens = b.rows;
    up.in_features = b.hidden;
    up.out_features = c.ffn;
    up.activation = TPG_ACT_SWIGLU;
    up.x = tpg_view{b.h2, 0, 0};
    up.w = tpg_view{w13, 0, 0};
    up.y = tpg_view{b.act, 0, 0};
    take_fold(&up);
    const std::string un = l + "gate_up";
    up.name = un.c_str();
    tpg_node n;
    LLAMA_TRY(tpg_plan_add_linear(p, &up, dep(), ndep(), &n));
    chain(n);
    return row_allreduce(b, b.act, c.ffn / r.nranks, w2, next_norm, b.h, l + "down", r.nranks, r.rank,
                         b.ssq != 0 && fold_next);
  }

  // The norm the last row linear folded, for the next linear to apply
  // (take_fold; public only so that the builder stays an aggregate).
  tpg_x_norm folded = TPG_X_NORM_NONE;
  tpg_slot folded_x = 0;

 private:
  void take_fold(tpg_linear_desc *d) {
    if (!folded.ssq.slot) return;
    d->x = tpg_view{folded_x, 0, 0};
    d->x_norm = folded;
    folded = TPG_X_NORM_NONE;
  }

  // "<name>.gemm" then "<name>.all_reduce": tpgraph's row-parallel linear
  // whose all-reduce adds the residual x in place and applies RMSNorm with
  // `norm` into out (tpg_plan_add_linear_norm; on one rank the all-reduce is
  // its epilogue's kernel alone).
  // fold: the GEMM alone (norm->ssq), the norm left to the next linear.
  int row_allreduce(const Rows &b, tpg_slot in, int k_in, tpg_slot wt, tpg_slot norm, tpg_slot out,
                    const std::string &name, int nranks, int rank, bool fold) {
    tpg_linear_desc d = TPG_LINEAR_DESC_INIT;
    d.kind = TPG_LINEAR_ROW;
    d.rank = rank;
    d.nranks = nranks;
    d.tokens = b.rows;
    d.in_features = k_in * nranks;
    d.out_features = b.hidden;
    d.name = name.c_str();
    d.x = tpg_view{in, 0, 0};
    d.w = tpg_view{wt, 0, 0};
    d.residual = tpg_view{b.x, 0, 0};
    d.y = tpg_view{out, 0, 0};
    tpg_linear_norm e = TPG_LINEAR_NORM_INIT;
    e.partial = tpg_view{b.part, 0, 0};
    e.residual_out = tpg_view{b.x, 0, 0};
    e.norm_weight = tpg_view{norm, 0, 0};
    e.norm_eps = b.eps;
    if (fold) {
      d.y = tpg_view{0, 0, 0};
      e.partial = tpg_view{0, 0, 0};
      e.ssq = tpg_view{b.ssq, 0, 0};
    }
    tpg_node n;
    LLAMA_TRY(tpg_plan_add_linear_norm(p, &d, &e, dep(), ndep(), &n));
    chain(n);
    if (fold) {
      folded = tpg_x_norm{tpg_view{b.ssq, 0, 0}, tpg_view{norm, 0, 0}, b.eps};
      folded_x = b.x;
    }
    return 0;
  }
};

}  // namespace llama

#endif
