// weights.cc - the model's tensors into one rank's device buffers.
//
// Every tensor is described as the WHOLE (unsplit) PyTorch tensor, and each
// rank takes its blocks of rows and columns of it: from a file of the
// directory given with --weights (the format shared with
// tests/gpu/llama_ref.py, docs/llama.md), or from the seeded generator of
// fill.cu, which hashes whole-tensor indices so every rank and every TP
// degree sees one model. The engine shards; nothing outside it has to.
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include "examples/llama/llama.h"

extern "C" cudaError_t llama_fill_part(void *dst, size_t pitch, size_t rows, size_t cols, size_t whole_cols,
                                       size_t row0, size_t col0, uint64_t seed, uint32_t tensor, float lo, float hi,
                                       cudaStream_t stream);

namespace llama {
namespace {

bool cuda_ok(cudaError_t e, const char *what, std::string *err) {
  if (e == cudaSuccess) return true;
  *err = std::string(what) + ": " + cudaGetErrorString(e);
  return false;
}

uint32_t name_hash(const std::string &s) {  // FNV-1a: a tensor's id for the generator
  uint32_t h = 2166136261u;
  for (unsigned char ch : s) h = (h ^ ch) * 16777619u;
  return h;
}

// A block of rows of the whole tensor, to dst (rows of `cols` elements,
// dst_pitch elements apart).
struct Block {
  size_t row0, rows;
  void *dst;
};

// Columns [col0, col0 + cols) of the listed row blocks of whole tensor
// `name` [whole_rows, whole_cols]. Random values are U(lo, hi).
bool put_blocks(const Source &src, const std::string &name, size_t whole_rows, size_t whole_cols, size_t col0,
                size_t cols, size_t dst_pitch, const std::vector<Block> &blocks, float lo, float hi, std::string *err) {
  if (src.dir.empty()) {
    for (const Block &b : blocks)
      if (!cuda_ok(llama_fill_part(b.dst, dst_pitch, b.rows, cols, whole_cols, b.row0, col0, src.seed,
                                   name_hash(name), lo, hi, nullptr),
                   name.c_str(), err))
        return false;
    return true;
  }
  const std::string path = src.dir + "/" + name;
  std::ifstream f(path, std::ios::binary | std::ios::ate);
  if (!f) {
    *err = path + ": cannot open (" + std::strerror(errno) + ")";
    return false;
  }
  const size_t want = whole_rows * whole_cols * 2, got = (size_t)f.tellg();
  if (got != want) {
    *err = path + ": " + std::to_string(got) + " bytes, expected " + std::to_string(want) + " ([" +
           std::to_string(whole_rows) + ", " + std::to_string(whole_cols) + "] bf16)";
    return false;
  }
  std::vector<uint16_t> host(whole_rows * whole_cols);
  f.seekg(0);
  if (!f.read(reinterpret_cast<char *>(host.data()), (std::streamsize)want)) {
    *err = path + ": read failed";
    return false;
  }
  for (const Block &b : blocks)
    if (!cuda_ok(cudaMemcpy2D(b.dst, dst_pitch * 2, host.data() + b.row0 * whole_cols + col0, whole_cols * 2,
                              cols * 2, b.rows, cudaMemcpyHostToDevice),
                 path.c_str(), err))
      return false;
  return true;
}

bool alloc(void **p, size_t elems, const char *what, size_t *total, std::string *err) {
  if (!cuda_ok(cudaMalloc(p, elems * 2), what, err)) return false;
  if (total) *total += elems * 2;
  return true;
}

}  // namespace

int read_config(const std::string &dir, Config *c, std::string *err) {
  const std::string path = dir + "/config.txt";
  std::ifstream f(path);
  if (!f) {
    *err = path + ": cannot open";
    return 1;
  }
  std::string line;
  int n = 0;
  while (std::getline(f, line)) {
    std::istringstream in(line);
    std::string key;
    double v;
    if (!(in >> key) || key[0] == '#') continue;
    if (!(in >> v)) {
      *err = path + ": key '" + key + "' has no number";
      return 1;
    }
    n++;
    if (key == "hidden") c->hidden = (int)v;
    else if (key == "heads") c->heads = (int)v;
    else if (key == "kv_heads") c->kv_heads = (int)v;
    else if (key == "head_dim") c->head_dim = (int)v;
    else if (key == "ffn") c->ffn = (int)v;
    else if (key == "layers") c->layers = (int)v;
    else if (key == "vocab") c->vocab = (int)v;
    else if (key == "eps") c->eps = (float)v;
    else if (key == "theta") c->theta = (float)v;
    else if (key == "batch") c->batch = (int)v;
    else if (key == "ctx") c->ctx = (int)v;
    else if (key == "steps") c->steps = (int)v;
    else if (key == "max_ctx") c->max_ctx = (int)v;
    else if (key == "seed") c->seed = (uint64_t)v;
    else {
      std::fprintf(stderr, "llama: %s: unknown key '%s' ignored\n", path.c_str(), key.c_str());
      n--;
    }
  }
  if (n == 0) {
    *err = path + ": no keys";
    return 1;
  }
  return 0;
}

int load_weights(const Config &c, const Rank &r, const Source &src, Weights *w, std::string *err) {
  const size_t H = c.hidden, D = c.head_dim, nq = q_heads(c, r), nkv = kv_heads(c, r);
  const size_t F = c.ffn / r.nranks, qdim = (size_t)c.heads * D, kvdim = (size_t)c.kv_heads * D;
  const float aH = std::sqrt(3.f / H), aQ = std::sqrt(3.f / qdim), aF = std::sqrt(3.f / c.ffn);
  w->layers.assign(c.layers, LayerWeights());
  size_t *tot = &w->bytes;
  for (int i = 0; i < c.layers; i++) {
    LayerWeights &l = w->layers[i];
    const std::string p = "l" + std::to_string(i) + ".";
    const size_t rows_qkv = (nq + 2 * nkv) * D;
    if (!alloc(&l.attn_norm, H, "attn_norm", tot, err) || !alloc(&l.mlp_norm, H, "mlp_norm", tot, err) ||
        !alloc(&l.wqkv, rows_qkv * H, "wqkv", tot, err) || !alloc(&l.wo, H * nq * D, "wo", tot, err) ||
        !alloc(&l.w13, 2 * F * H, "w13", tot, err) || !alloc(&l.w2, H * F, "w2", tot, err))
      return 1;
    char *qkv = static_cast<char *>(l.wqkv), *w13 = static_cast<char *>(l.w13);
    const size_t r0q = r.rank * nq * D, r0kv = r.rank * nkv * D;
    if (!put_blocks(src, p + "attn_norm", 1, H, 0, H, H, {{0, 1, l.attn_norm}}, 0.8f, 1.2f, err) ||
        !put_blocks(src, p + "mlp_norm", 1, H, 0, H, H, {{0, 1, l.mlp_norm}}, 0.8f, 1.2f, err) ||
        // COLUMN-parallel QKV: this rank's query heads, then its KV heads' k and v rows.
        !put_blocks(src, p + "wq", qdim, H, 0, H, H, {{r0q, nq * D, qkv}}, -aH, aH, err) ||
        !put_blocks(src, p + "wk", kvdim, H, 0, H, H, {{r0kv, nkv * D, qkv + nq * D * H * 2}}, -aH, aH, err) ||
        !put_blocks(src, p + "wv", kvdim, H, 0, H, H, {{r0kv, nkv * D, qkv + (nq + nkv) * D * H * 2}}, -aH, aH,
                    err) ||
        // ROW-parallel O: the columns of this rank's heads.
        !put_blocks(src, p + "wo", H, qdim, r0q, nq * D, nq * D, {{0, H, l.wo}}, -aQ, aQ, err) ||
        // SwiGLU gate/up (TPG_ACT_SWIGLU: the rank's gate rows, then its up rows).
        !put_blocks(src, p + "w_gate", c.ffn, H, 0, H, H, {{r.rank * F, F, w13}}, -aH, aH, err) ||
        !put_blocks(src, p + "w_up", c.ffn, H, 0, H, H, {{r.rank * F, F, w13 + F * H * 2}}, -aH, aH, err) ||
        !put_blocks(src, p + "w_down", H, c.ffn, r.rank * F, F, F, {{0, H, l.w2}}, -aF, aF, err))
      return 1;
  }
  if (!alloc(&w->final_norm, H, "final_norm", tot, err) ||
      !put_blocks(src, "final_norm", 1, H, 0, H, H, {{0, 1, w->final_norm}}, 0.8f, 1.2f, err))
    return 1;
  if (c.vocab > 0) {
    const size_t V = c.vocab / r.nranks;  // vocab-parallel: this rank's rows
    if (!alloc(&w->lm_head, V * H, "lm_head", tot, err) ||
        !put_blocks(src, "lm_head", c.vocab, H, 0, H, H, {{r.rank * V, V, w->lm_head}}, -aH, aH, err))
      return 1;
  }
  return cuda_ok(cudaDeviceSynchronize(), "weights", err) ? 0 : 1;
}

void free_weights(Weights *w) {
  for (LayerWeights &l : w->layers)
    for (void *p : {l.attn_norm, l.mlp_norm, l.wqkv, l.wo, l.w13, l.w2}) cudaFree(p);
  w->layers.clear();
  cudaFree(w->final_norm);
  cudaFree(w->lm_head);
  w->final_norm = w->lm_head = nullptr;
  w->bytes = 0;
}

int alloc_caches(const Config &c, const Rank &r, Caches *k, std::string *err) {
  const size_t n = (size_t)c.batch * kv_heads(c, r) * c.max_ctx * c.head_dim;
  k->k.assign(c.layers, nullptr);
  k->v.assign(c.layers, nullptr);
  for (int i = 0; i < c.layers; i++)
    if (!alloc(&k->k[i], n, "k_cache", nullptr, err) || !alloc(&k->v[i], n, "v_cache", nullptr, err) ||
        !cuda_ok(cudaMemset(k->k[i], 0, n * 2), "k_cache", err) ||
        !cuda_ok(cudaMemset(k->v[i], 0, n * 2), "v_cache", err))
      return 1;
  return 0;
}

int load_caches(const Config &c, const Rank &r, const Source &src, const Caches &k, std::string *err) {
  if (c.ctx == 0) return 0;
  const size_t D = c.head_dim, nkv = kv_heads(c, r), ctx = c.ctx;
  for (int i = 0; i < c.layers; i++)
    for (int kv = 0; kv < 2; kv++) {
      // Whole [B, kv_heads, ctx, D] as rows of D; the rank's heads into [B, nkv, max_ctx, D].
      std::vector<Block> blocks;
      for (int b = 0; b < c.batch; b++)
        for (size_t h = 0; h < nkv; h++)
          blocks.push_back({((size_t)b * c.kv_heads + r.rank * nkv + h) * ctx, ctx,
                            static_cast<char *>(kv ? k.v[i] : k.k[i]) + ((size_t)b * nkv + h) * c.max_ctx * D * 2});
      const std::string name = "l" + std::to_string(i) + (kv ? ".v_cache" : ".k_cache");
      if (!put_blocks(src, name, (size_t)c.batch * c.kv_heads * ctx, D, 0, D, D, blocks, -1.f, 1.f, err)) return 1;
    }
  return cuda_ok(cudaDeviceSynchronize(), "caches", err) ? 0 : 1;
}

void free_caches(Caches *k) {
  for (void *p : k->k) cudaFree(p);
  for (void *p : k->v) cudaFree(p);
  k->k.clear();
  k->v.clear();
}

int load_input(const Config &c, const Source &src, int step, void *dst, cudaStream_t s, std::string *err) {
  (void)s;  // file copies are synchronous; the generator runs on the legacy stream, ordered before the launch
  return put_blocks(src, "x.s" + std::to_string(step), c.batch, c.hidden, 0, c.hidden, c.hidden,
                    {{0, (size_t)c.batch, dst}}, -1.f, 1.f, err)
             ? 0
             : 1;
}

}  // namespace llama
