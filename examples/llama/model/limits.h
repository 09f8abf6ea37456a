// limits.h - the largest model this engine runs, as counts: every count read
// from a file (config.json, config.txt, a safetensors header, the index) is
// checked against these before anything is sized from it, so a hostile file
// cannot make the engine allocate for 2^31 layers. Each bound is far above
// any released model of the families the engine runs (Llama 3.1 405B: 126
// layers, hidden 16384, 128 heads, ffn 53248; vocabularies up to 256k) and
// below what the engine's int arithmetic and fp32 token ids can carry.
#ifndef LLAMA_MODEL_LIMITS_H
#define LLAMA_MODEL_LIMITS_H

#include <cstddef>

namespace llama {

constexpr int kMaxLayers = 1024;
constexpr int kMaxHidden = 65536;
constexpr int kMaxHeads = 1024;       // query heads; KV heads divide them
constexpr int kMaxFfn = 1 << 20;
// Token ids travel through fp32 in the sampling kernels (kernels/loop.cu:
// (value, id) pairs): exact up to 2^24, so a larger vocabulary is refused.
constexpr int kMaxVocab = 1 << 24;
constexpr int kMaxPositions = 1 << 30;  // max_position_embeddings, sliding windows

// Tensors in one checkpoint (all its files): the engine reads at most 12 per
// layer and 3 more; a few per layer are tolerated unused (docs/llama.md).
constexpr size_t kMaxTensors = 16 * (size_t)kMaxLayers + 64;
// Distinct files an index may name (each is held open while the model loads).
constexpr size_t kMaxShardFiles = 1024;
// config.json's values (each key, scalar, array and object counts one): a
// real one has a few hundred.
constexpr size_t kMaxConfigJsonValues = 8192;

}  // namespace llama

#endif
