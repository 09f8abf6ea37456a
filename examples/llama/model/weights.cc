// weights.cc - the model's tensors into one rank's device buffers.
//
// Every tensor is described as the WHOLE (unsplit) PyTorch tensor, and each
// rank takes its blocks of rows and columns of it (which ones: shard.cc):
// from a file of the directory given with --weights (the format shared with
// tests/gpu/llama_ref.py, docs/llama.md), from a TensorReader (a Hugging
// Face checkpoint, --model, read in place block by block), or from the
// seeded generator of fill.cu, which hashes whole-tensor indices so every
// rank and every TP degree sees one model. The engine shards; nothing
// outside it has to.
#include <cerrno>
#include <cstdint>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>

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

// The generator's range of a tensor, by the last part of its name. U(-a, a)
// has RMS a / sqrt(3); linear weights get a = gain * sqrt(3 / fan_in), so a
// projection maps RMS 1 to RMS gain. Queries and keys (new and cached) get
// RMS 1.5, so scores have std ~2.25 and softmax is peaked (a few dozen keys
// carry the weight) rather than a flat average of the values that would hide
// which keys were read; Wo gets gain 2 so attention moves the residual by
// O(1). Inputs and values RMS 1, norm weights around 1.
void value_range(const Config &c, const std::string &name, float *lo, float *hi) {
  const size_t dot = name.find('.');
  const std::string kind = name.compare(0, 2, "x.") == 0 ? "x" : dot == std::string::npos ? name : name.substr(dot + 1);
  const float s3 = std::sqrt(3.f);
  float a = s3;  // x, v_cache
  if (kind == "attn_norm" || kind == "mlp_norm" || kind == "final_norm") {
    *lo = 0.8f;
    *hi = 1.2f;
    return;
  }
  if (kind == "wq" || kind == "wk") a = 1.5f * s3 / std::sqrt((float)c.hidden);
  else if (kind == "k_cache") a = 1.5f * s3;
  else if (kind == "wv" || kind == "w_gate" || kind == "w_up" || kind == "lm_head") a = s3 / std::sqrt((float)c.hidden);
  else if (kind == "wo") a = 2.f * s3 / std::sqrt((float)c.heads * c.head_dim);
  else if (kind == "w_down") a = s3 / std::sqrt((float)c.ffn);
  *lo = -a;
  *hi = a;
}

// fill.cu's generator on the host, bit for bit (same hash, same fma, same
// rounding), for the reference of --verify.
uint64_t mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
uint16_t to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}

// A block of rows of the whole tensor, to dst (rows of `cols` elements,
// dst_pitch elements apart).
struct Block {
  size_t row0, rows;
  void *dst;
};

// Columns [col0, col0 + cols) of the listed row blocks of whole tensor
// `name` [whole_rows, whole_cols].
bool put_blocks(const Source &src, const Config &c, const std::string &name, size_t whole_rows, size_t whole_cols,
                size_t col0, size_t cols, size_t dst_pitch, const std::vector<Block> &blocks, std::string *err) {
  if (src.reader) {
    // Staged through at most ~64 MiB of host memory at a time, so no rank
    // ever holds more than that of the model outside the GPU.
    const size_t chunk = std::max<size_t>(1, (64u << 20) / (cols * 2));
    for (const Block &b : blocks) {
      std::vector<uint16_t> host(std::min(chunk, b.rows) * cols);
      for (size_t r0 = 0; r0 < b.rows; r0 += chunk) {
        const size_t n = std::min(chunk, b.rows - r0);
        if (src.reader->read(name, whole_rows, whole_cols, b.row0 + r0, n, col0, cols, host.data(), cols, err) ||
            !cuda_ok(cudaMemcpy2D(static_cast<char *>(b.dst) + r0 * dst_pitch * 2, dst_pitch * 2, host.data(),
                                  cols * 2, cols * 2, n, cudaMemcpyHostToDevice),
                     name.c_str(), err))
          return false;
      }
    }
    return true;
  }
  if (src.dir.empty()) {
    float lo, hi;
    value_range(c, name, &lo, &hi);
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

int host_tensor(const Source &src, const Config &c, const std::string &name, size_t rows, size_t cols,
                std::vector<uint16_t> *out, std::string *err) {
  out->assign(rows * cols, 0);
  if (src.reader) return src.reader->read(name, rows, cols, 0, rows, 0, cols, out->data(), cols, err);
  if (!src.dir.empty()) {
    const std::string path = src.dir + "/" + name;
    std::ifstream f(path, std::ios::binary | std::ios::ate);
    const size_t want = rows * cols * 2;
    if (!f || (size_t)f.tellg() != want) {
      *err = path + ": cannot open, or not " + std::to_string(want) + " bytes";
      return 1;
    }
    f.seekg(0);
    if (!f.read(reinterpret_cast<char *>(out->data()), (std::streamsize)want)) {
      *err = path + ": read failed";
      return 1;
    }
    return 0;
  }
  float lo, hi;
  value_range(c, name, &lo, &hi);
  const uint32_t tensor = name_hash(name);
  const uint64_t key = ((src.seed * 0x9e3779b97f4a7c15ull) ^ ((uint64_t)tensor << 32 | tensor)) + 1;
  const size_t n = rows * cols;
  uint16_t *o = out->data();
  parallel_for(n, [&](size_t a, size_t b) {
    for (size_t e = a; e < b; e++) {
      const float u = (float)(mix(key ^ mix(e)) >> 40) * (1.0f / 16777216.0f);
      o[e] = to_bf16(std::fmaf(hi - lo, u, lo));
    }
  });
  return 0;
}

int load_weights(const Config &c, const Rank &r, const Source &src, Weights *w, std::string *err) {
  w->layers.assign(c.layers, LayerWeights());
  size_t *tot = &w->bytes;
  auto buffer = [&](int layer, WeightBuf b) -> void ** {
    if (layer < 0) return b == WB_FINAL_NORM ? &w->final_norm : &w->lm_head;
    LayerWeights &l = w->layers[layer];
    void **const per_layer[] = {&l.attn_norm, &l.mlp_norm, &l.wqkv, &l.wo, &l.w13, &l.w2};
    return b == WB_QKV_BIAS ? &l.bqkv : per_layer[b];
  };
  static const char *const names[] = {"attn_norm", "mlp_norm",   "wqkv",    "wo",  "w13",
                                      "w2",        "final_norm", "lm_head", "bqkv"};
  for (int i = 0; i < c.layers; i++)
    for (WeightBuf b : {WB_ATTN_NORM, WB_MLP_NORM, WB_QKV, WB_O, WB_13, WB_2, WB_QKV_BIAS})
      if (weight_buf_elems(c, r, b) && !alloc(buffer(i, b), weight_buf_elems(c, r, b), names[b], tot, err)) return 1;
  if (!alloc(&w->final_norm, weight_buf_elems(c, r, WB_FINAL_NORM), "final_norm", tot, err)) return 1;
  if (c.vocab > 0 && !alloc(&w->lm_head, weight_buf_elems(c, r, WB_LM_HEAD), "lm_head", tot, err)) return 1;
  for (const ShardPiece &p : shard_pieces(c, r)) {
    char *dst = static_cast<char *>(*buffer(p.layer, p.buf)) + p.off * 2;
    if (!put_blocks(src, c, p.name, p.whole_rows, p.whole_cols, p.col0, p.cols, p.pitch, {{p.row0, p.rows, dst}},
                    err))
      return 1;
  }
  if (!c.rope_inv_freq.empty()) {  // read by the RoPE kernels instead of 1 / theta^(2i/128)
    const size_t n = c.rope_inv_freq.size() * sizeof(float);
    if (!cuda_ok(cudaMalloc(reinterpret_cast<void **>(&w->rope_inv_freq), n), "rope_inv_freq", err) ||
        !cuda_ok(cudaMemcpy(w->rope_inv_freq, c.rope_inv_freq.data(), n, cudaMemcpyHostToDevice), "rope_inv_freq",
                 err))
      return 1;
  }
  return cuda_ok(cudaDeviceSynchronize(), "weights", err) ? 0 : 1;
}

void free_weights(Weights *w) {
  for (LayerWeights &l : w->layers)
    for (void *p : {l.attn_norm, l.mlp_norm, l.wqkv, l.wo, l.w13, l.w2, l.bqkv}) cudaFree(p);
  w->layers.clear();
  cudaFree(w->final_norm);
  cudaFree(w->lm_head);
  cudaFree(w->rope_inv_freq);
  w->final_norm = w->lm_head = nullptr;
  w->rope_inv_freq = nullptr;
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
      if (!put_blocks(src, c, name, (size_t)c.batch * c.kv_heads * ctx, D, 0, D, D, blocks, err)) return 1;
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
  return put_blocks(src, c, "x.s" + std::to_string(step), c.batch, c.hidden, 0, c.hidden, c.hidden,
                    {{0, (size_t)c.batch, dst}}, err)
             ? 0
             : 1;
}

int load_tensor(const Config &c, const Source &src, const std::string &name, size_t rows, size_t cols, void *dst,
                std::string *err) {
  return put_blocks(src, c, name, rows, cols, 0, cols, cols, {{0, rows, dst}}, err) &&
                 cuda_ok(cudaDeviceSynchronize(), name.c_str(), err)
             ? 0
             : 1;
}

}  // namespace llama
