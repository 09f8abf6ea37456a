// llama.h - the Llama-3 decode example engine: its model description, one
// rank's buffers, and the parts that use them (model/weights.cc loads or
// makes the weights, graphs/step.cc builds the one-graph decode step, run/
// runs ranks, steps and the benchmark).
#ifndef LLAMA_H
#define LLAMA_H

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "tpgraph.h"

namespace llama {

// A Llama-3 model and the run: config.txt's keys (docs/llama.md).
struct Config {
  int hidden = 4096, heads = 32, kv_heads = 8, head_dim = 128, ffn = 14336;
  int layers = 4, vocab = 0;
  float eps = 1e-5f, theta = 500000.f;
  int batch = 1, ctx = 512, steps = 4, max_ctx = 0;  // max_ctx: the caches' capacity
  uint64_t seed = 1;
  bool qkv_bias = false;  // the q/k/v projections have biases (Qwen2): l{i}.bq, l{i}.bk, l{i}.bv
  // RoPE's inverse frequencies [head_dim / 2] when the model scales them
  // (Llama-3.1's rope_scaling "llama3", model/hf/config.cc); empty: the
  // kernels compute 1 / theta^(2i/128) themselves.
  std::vector<float> rope_inv_freq;
};

// One process's place in the tensor-parallel group and what it holds open.
struct Rank {
  int rank = 0, nranks = 1, device = 0, sm_count = 0;
  bool pdl = false;              // --pdl: TPG_GRAPH_PDL, engine kernels marked pdl
  bool fold_norm = false;        // --fold-norm: at TP 1 and up to 16 rows the RMSNorms run
                                 // inside the GEMVs (tpg_x_norm), not as kernels of their own
  // --attn: fused (llama_attn_fused_g<G>: RoPE + append + attention + merge
  // in one node, the default), tc (llama_rope_append, llama_attn_tc_g<G>,
  // llama_attn_combine) or fma (the same with llama_attn_g<G>).
  enum Attn { ATTN_FUSED, ATTN_TC, ATTN_FMA } attn = ATTN_FUSED;
  int attn_bps = 0;              // --attn-bps: attention's split, about N blocks per SM; 0: the
                                 // wave rule (step.cc, attn_split)
  tpg_graph_mode mode = TPG_MODE_EXPLICIT;  // --mode (bench only)
  void *stub_function = nullptr; // plan_test only (no GPU): names every engine kernel
                                 // as this CUfunction instead of by name in `module`
  tpg_comm *comm = nullptr;       // null at TP 1: a one-rank plan needs none
  tpg_module *module = nullptr;  // examples/llama/kernels/step.cu
  tpg_module *prefill_module = nullptr;  // examples/llama/kernels/prefill.cu (--model's prefill)
  tpg_module *paged_module = nullptr;    // examples/llama/kernels/paged.cu (--requests: the serving step)
  tpg_module *loop_module = nullptr;     // examples/llama/kernels/loop.cu (--requests: sampling)
  cublasHandle_t cublas = nullptr;
  void *cublas_ws = nullptr;     // cuBLAS must not allocate while captured
  size_t cublas_ws_bytes = 0;
  cudaStream_t stream = nullptr;
};

// This rank's shards, device memory, bf16, laid out as the plan's slots.
struct LayerWeights {
  void *attn_norm = nullptr, *mlp_norm = nullptr;  // [hidden]
  void *wqkv = nullptr;  // [(nq + 2 nkv) * 128, hidden]: this rank's q, k, v head rows
  void *wo = nullptr;    // [hidden, nq * 128]: the columns of this rank's heads
  void *w13 = nullptr;   // [2 ffn/R, hidden]: this rank's gate rows, then its up rows
  void *w2 = nullptr;    // [hidden, ffn/R]
  void *bqkv = nullptr;  // [(nq + 2 nkv) * 128]: the q, k, v biases of this rank's rows (Config::qkv_bias), or null
};
struct Weights {
  std::vector<LayerWeights> layers;
  void *final_norm = nullptr;  // [hidden]
  void *lm_head = nullptr;     // [vocab/R, hidden]: this rank's vocab rows (or null)
  size_t bytes = 0;            // all of the above: what one step reads
  float *rope_inv_freq = nullptr;  // [64] fp32, Config::rope_inv_freq on the device (null when empty)
};

// One rank's weight buffers (LayerWeights per layer, then final_norm and
// lm_head) and which block of which whole tensor fills each part of them:
// the engine's tensor-parallel layout, in one place (shard.cc). load_weights
// copies by it; the checkpoint test applies it to host buffers.
enum WeightBuf { WB_ATTN_NORM, WB_MLP_NORM, WB_QKV, WB_O, WB_13, WB_2, WB_FINAL_NORM, WB_LM_HEAD, WB_QKV_BIAS };
struct ShardPiece {
  std::string name;               // the whole tensor, by the engine's name ("l3.wq", "final_norm", "lm_head")
  size_t whole_rows, whole_cols;  // its shape (a norm is one row)
  size_t row0, rows, col0, cols;  // the block of it
  int layer;                      // -1: final_norm, lm_head (the others are per layer)
  WeightBuf buf;
  size_t off, pitch;              // where the block starts in the buffer and its row pitch, in elements
};
size_t weight_buf_elems(const Config &c, const Rank &r, WeightBuf b);
std::vector<ShardPiece> shard_pieces(const Config &c, const Rank &r);

// One set of KV caches (a batch of sequences): per layer [B, nkv, max_ctx, 128].
struct Caches {
  std::vector<void *> k, v;
};

// A source of whole tensors on the host by the engine's names (those of
// docs/llama.md's files: "l{i}.wq", ..., "final_norm", "lm_head", and
// "embed", the token embedding [vocab, hidden]); model/hf/checkpoint.h reads them
// from a Hugging Face checkpoint.
struct TensorReader {
  virtual ~TensorReader() = default;
  // Rows [row0, row0 + rows) and columns [col0, col0 + cols) of whole tensor
  // `name` [whole_rows, whole_cols] as bf16 into dst, rows dst_pitch elements
  // apart. 0 on success; otherwise *err names the tensor and what is wrong.
  virtual int read(const std::string &name, size_t whole_rows, size_t whole_cols, size_t row0, size_t rows,
                   size_t col0, size_t cols, uint16_t *dst, size_t dst_pitch, std::string *err) const = 0;
};

// Where whole tensors come from: the files of a directory (--weights), a
// reader (--model), or a seeded generator that gives every rank the same
// values.
struct Source {
  std::string dir;  // empty (and no reader): random
  uint64_t seed = 1;
  const TensorReader *reader = nullptr;  // borrowed; when set, dir is not used
};

// Waits for the work on the rank's stream: tpg_comm_wait (which gives up
// on a lost peer) with a comm, a plain stream synchronize at TP 1.
// Without a comm a failure is a CUDA error that tpgraph never saw (its
// last error is empty): it is printed here, with the rank.
inline tpg_status wait_rank(const Rank &r) {
  if (r.comm) return tpg_comm_wait(r.comm, reinterpret_cast<tpg_stream>(r.stream));
  const cudaError_t e = cudaStreamSynchronize(r.stream);
  if (e == cudaSuccess) return TPG_SUCCESS;
  std::fprintf(stderr, "llama rank %d: the stream failed: %s\n", r.rank, cudaGetErrorString(e));
  return TPG_ERROR_CUDA;
}

// Shapes every rank derives alike.
inline int q_heads(const Config &c, const Rank &r) { return c.heads / r.nranks; }
inline int kv_heads(const Config &c, const Rank &r) { return c.kv_heads / r.nranks; }

// fn(begin, end) over [0, n) in contiguous chunks on all host cores.
template <class F>
void parallel_for(size_t n, F fn) {
  const size_t k = std::max<size_t>(1, std::min<size_t>(std::thread::hardware_concurrency(), n / 4096 + 1));
  std::vector<std::thread> t;
  for (size_t i = 0; i < k; i++) t.emplace_back([&, i] { fn(n * i / k, n * (i + 1) / k); });
  for (auto &x : t) x.join();
}

// config_txt.cc
int read_config(const std::string &dir, Config *c, std::string *err);
// weights.cc: 0 on success; otherwise *err says what was wrong (file and size).
int load_weights(const Config &c, const Rank &r, const Source &src, Weights *w, std::string *err);
void free_weights(Weights *w);
int alloc_caches(const Config &c, const Rank &r, Caches *k, std::string *err);
// The initial context: positions [0, ctx) of whole caches l{i}.k_cache/v_cache
// (file or random), the rest zero.
int load_caches(const Config &c, const Rank &r, const Source &src, const Caches &k, std::string *err);
void free_caches(Caches *k);
// Whole tensor `name` [rows, cols] on the host: the file, or the values the
// device generator gives (bit for bit).
int host_tensor(const Source &src, const Config &c, const std::string &name, size_t rows, size_t cols,
                std::vector<uint16_t> *out, std::string *err);
// x.s{step}: [B, hidden] into dst (device).
int load_input(const Config &c, const Source &src, int step, void *dst, cudaStream_t s, std::string *err);
// Whole tensor `name` [rows, cols] into dst (device, rows contiguous): the
// token embedding of --model, for one.
int load_tensor(const Config &c, const Source &src, const std::string &name, size_t rows, size_t cols, void *dst,
                std::string *err);

// step.cc: the attention's split length in keys (a multiple of
// LLAMA_ATTN_TILE) for heads = B x nkv and contexts up to max_len on sms SMs;
// bps > 0: about bps blocks per SM, 0: the wave rule.
int attn_split(int heads, int max_len, int sms, int bps);

// step.cc: one rank's decode step for c.layers layers as a plan, and the
// buffers bound to its slots.
struct Step {
  tpg_plan *plan = nullptr;
  tpg_graph *graph = nullptr;
  std::vector<tpg_binding> bindings;
  tpg_slot x = 0, pos_host = 0, logits = 0, pos = 0;
  std::vector<tpg_slot> k_cache, v_cache;
  void *d_x = nullptr;             // [B, hidden]: in the step's input, out the residual stream
  int *h_pos = nullptr;            // pinned [B]: this step's positions
  float *d_logits = nullptr;       // [R * B * vocab/R] (all-gathered), when vocab > 0
  unsigned *d_attn_cnt = nullptr;  // [B * kv_heads]: the fused attention's split counters, zeroed once
  int split_len = 0, nsplit = 0;   // attention's context split
  // Set before alloc_step_io / build_step for decode.cc's loops: positions
  // live in d_pos (device, advanced by the loop's kernel; no memcpy node
  // from h_pos) and logits stay this rank's vocab slice [B, vocab/R] (no
  // all-gather: NCCL cannot sit in a conditional body).
  bool device_loop = false;
  int *d_pos = nullptr;            // [B], device_loop only
};
struct LmHead {                    // the captured cuBLAS call's arguments
  const Rank *rank;
  int batch, hidden, vocab_part;
};
// The step's own buffers (x, pinned positions, logits), before build_step.
int alloc_step_io(const Config &c, Step *s, std::string *err);
// Builds the plan over the buffers given (bound as they are: null in
// plan_test); the graph is created by create_step_graph (collective over
// the ranks).
int build_step(const Config &c, const Rank &r, const Weights &w, const Caches &k, int max_len, LmHead *lm, Step *s,
               std::string *err);
// The LM head's captured cuBLAS call (tpg_capture_fn; user: the LmHead):
// views h [batch, hidden], this rank's LM-head rows, logits [batch, V/R] fp32.
int lm_head_capture(void *user, tpg_stream stream, void *const *ptrs, int nptrs);
// Runs the LM head's cuBLAS call once, eagerly, before it is captured: its
// first call loads kernels and picks an algorithm, work better kept out of
// the capture.
int warm_lm_head(const Rank &r, const Weights &w, LmHead *lm, Step *s, std::string *err);
int create_step_graph(const Rank &r, Step *s, std::string *err);
// Points the graph at another set of caches (tpg_graph_rebind).
int bind_caches(Step *s, const Caches &k, std::string *err);
void free_step(Step *s);

// reference.cc: the steps in fp64 on the host from the whole tensors (for
// --verify): y[s] [B, hidden] and, with vocab > 0, logits[s] [B, vocab].
int reference_steps(const Config &c, const Source &src, std::vector<std::vector<double>> *y,
                    std::vector<std::vector<double>> *logits, std::string *err);

}  // namespace llama

#endif
