// kernels.h - the Llama example engine's own kernels: names and parameters.
//
// The engine never links these: it loads examples/llama/kernels/step.cu's fatbin
// with tpg_module_load and adds the kernels to its plan by NAME, so the
// names are extern "C" (unmangled) and the parameter lists below are the
// contract its tpg_arg lists must match (tpg_graph_create checks them
// against the real layout). kernel_check.cu launches them directly through
// these declarations. Shapes of one decode step, R = tensor-parallel ranks:
//   nq  = heads / R query heads, nkv = kv_heads / R KV heads of this rank,
//   D = head dim (128, or 64), G = nq / nkv query heads per KV head (the
//   GQA group: any of 1 .. LLAMA_ATTN_MAX_GROUP).
//   qkv      [B, (nq + 2 nkv) * D]  the QKV projection's output: q heads,
//                                   then k heads, then v heads
//   q        [B, nq, D]             rotated queries
//   k_cache, v_cache [B, nkv, max_ctx, D]  keys stored rotated
//   pos      int32 [B]              this step's position of each sequence:
//                                   the token is written there and attends
//                                   to positions 0..pos (length pos + 1)
// Names: every kernel below is for head dim 128; its twin for head dim 64
// puts "_d64" after the stem (llama_rope_append_d64, llama_attn_tc_d64_g5,
// llama_prefill_attn_d64_g4), same parameters, with 64 for 128 in the
// shapes and D / 2 threads where the block is 64. llama_kernel_name makes
// them. The scalar first pass llama_attn_g<G> (--attn fma) has no twin.
#ifndef LLAMA_KERNELS_H
#define LLAMA_KERNELS_H

// The blobs of the engine's embedded fatbin (//examples/llama:device_code):
// one per kernels/*.cu file, named by the file's stem.
#define LLAMA_BLOB_STEP "step"        // kernels/step.cu
#define LLAMA_BLOB_PREFILL "prefill"  // kernels/prefill.cu

// The head dims with compiled kernels.
#define LLAMA_HEAD_DIM 128
#define LLAMA_HEAD_DIM_SMALL 64
// Keys per shared-memory tile of the attention kernel; split lengths are
// multiples of it.
#define LLAMA_ATTN_TILE 64
// Every GQA group 1 .. LLAMA_ATTN_MAX_GROUP has its attention kernels: a
// group is at most the 16 rows of one MMA. LLAMA_GROUPS(X) expands X(G) for
// each.
#define LLAMA_ATTN_MAX_GROUP 16
#define LLAMA_GROUPS(X) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11) X(12) X(13) X(14) X(15) X(16)
// Query rows per block of llama_prefill_attn_g<G>: 4 warps x 16 MMA rows,
// each row one (position, query head) pair. A block holds the whole groups
// of floor(64 / G) positions; rows left over (64 mod G) compute a copy of a
// real row and store nothing. llama_prefill_blocks: the grid's x.
#define LLAMA_PREFILL_ROWS 64
#define LLAMA_PREFILL_POSITIONS(G) (LLAMA_PREFILL_ROWS / (G))
// Threads of llama_prefill_rope's block (one block a row).
#define LLAMA_PREFILL_ROPE_THREADS 256

#ifdef __cplusplus
#include <string>
// The kernel of stem ("llama_attn_tc", "llama_rope_append", ...) for head
// dim D and group G (0: a kernel without one): llama_kernel_name
// ("llama_attn_tc", 64, 5) is "llama_attn_tc_d64_g5".
inline std::string llama_kernel_name(const char *stem, int head_dim, int group) {
  std::string s = stem;
  if (head_dim == LLAMA_HEAD_DIM_SMALL) s += "_d64";
  if (group > 0) s += "_g" + std::to_string(group);
  return s;
}
inline unsigned llama_prefill_blocks(int rows, int group) {
  const int per = LLAMA_PREFILL_POSITIONS(group);
  return (unsigned)((rows + per - 1) / per);
}
#endif

#ifdef __CUDACC__
#include <cuda_bf16.h>

// y[b, :] = x[b, :] / sqrt(mean(x[b, :]^2) + eps) * w, fp32 inside, one
// rounding to bf16. grid (B), block 256; hidden a multiple of 8.
extern "C" __global__ void llama_rmsnorm(__nv_bfloat16 *y, const __nv_bfloat16 *x, const __nv_bfloat16 *w,
                                         int hidden, float eps);

// RoPE (rotate_half layout) on the q and k heads of qkv at position pos[b];
// q -> q, k -> k_cache[b, h, pos[b]], v -> v_cache[b, h, pos[b]]
// unrotated. inv_freq: [D / 2] fp32 inverse frequencies (a scaled RoPE such
// as Llama 3.1's), or null: Llama-3's unscaled 1 / theta^(2i/D), computed
// here. grid (B, nq + 2 nkv), block D / 2.
#define LLAMA_ROPE_APPEND_DECL(SFX)                                                                               \
  extern "C" __global__ void llama_rope_append##SFX(__nv_bfloat16 *q, __nv_bfloat16 *k_cache,                    \
                                                    __nv_bfloat16 *v_cache, const __nv_bfloat16 *qkv,            \
                                                    const int *pos, int nq, int nkv, int max_ctx, float theta,   \
                                                    const float *inv_freq);
LLAMA_ROPE_APPEND_DECL()
LLAMA_ROPE_APPEND_DECL(_d64)

// Split-KV decode attention, first pass. Block (s, h, b) attends query heads
// h*G .. h*G+G-1 of sequence b over keys [s*split_len, min((s+1)*split_len,
// pos[b]+1)) and writes its unnormalised output and (max, sum) of the scores
// (log2 domain): o_part [B, nq, nsplit, D] fp32, ml_part [B, nq, nsplit, 2].
// Blocks whose split starts at or after the length write nothing.
// grid (nsplit, nkv, B), block 128; split_len a multiple of LLAMA_ATTN_TILE.
// scale_log2 = softmax scale * log2(e). One kernel per group size G; head
// dim 128 only.
#define LLAMA_ATTN_DECL(G)                                                                                  \
  extern "C" __global__ void llama_attn_g##G(float *o_part, float *ml_part, const __nv_bfloat16 *q,          \
                                             const __nv_bfloat16 *k_cache, const __nv_bfloat16 *v_cache,     \
                                             const int *pos, int nkv, int max_ctx, int split_len, int nsplit, \
                                             float scale_log2);
LLAMA_GROUPS(LLAMA_ATTN_DECL)

// The same first pass on tensor cores (mma.sync m16n8k16, sm_80+): same
// grid, block, arguments and outputs; kernels/step.cu says how. The engine uses
// these unless --attn fma.
#define LLAMA_ATTN_TC_DECL(SFX, G)                                                                             \
  extern "C" __global__ void llama_attn_tc##SFX##_g##G(                                                        \
      float *o_part, float *ml_part, const __nv_bfloat16 *q, const __nv_bfloat16 *k_cache,                     \
      const __nv_bfloat16 *v_cache, const int *pos, int nkv, int max_ctx, int split_len, int nsplit,           \
      float scale_log2);
#define LLAMA_ATTN_TC_DECL_128(G) LLAMA_ATTN_TC_DECL(, G)
#define LLAMA_ATTN_TC_DECL_64(G) LLAMA_ATTN_TC_DECL(_d64, G)
LLAMA_GROUPS(LLAMA_ATTN_TC_DECL_128)
LLAMA_GROUPS(LLAMA_ATTN_TC_DECL_64)

// The decode attention of one layer in one node (the engine's default):
// RoPE + KV append + the tensor-core first pass + the merge. Block (s, h, b)
// rotates its group's G query heads from qkv itself (as llama_rope_append
// does); the block whose split holds pos[b] also rotates the new key and
// writes k_cache / v_cache at pos[b] before reading keys; every block that
// holds keys writes its partials as llama_attn_tc_g<G> does, then counts
// itself in counters[b * nkv + h]; the last one merges the splits into out
// [B, nq * D] (as llama_attn_combine) and resets the counter to 0.
// counters: [B * nkv] uint32, zero before the first launch. theta and
// inv_freq as llama_rope_append's. grid (nsplit, nkv, B), block 128; the
// scratch partials as above.
#define LLAMA_ATTN_FUSED_DECL(SFX, G)                                                                          \
  extern "C" __global__ void llama_attn_fused##SFX##_g##G(                                                     \
      __nv_bfloat16 *out, float *o_part, float *ml_part, unsigned *counters, __nv_bfloat16 *k_cache,           \
      __nv_bfloat16 *v_cache, const __nv_bfloat16 *qkv, const int *pos, int nkv, int max_ctx, int split_len,   \
      int nsplit, float scale_log2, float theta, const float *inv_freq);
#define LLAMA_ATTN_FUSED_DECL_128(G) LLAMA_ATTN_FUSED_DECL(, G)
#define LLAMA_ATTN_FUSED_DECL_64(G) LLAMA_ATTN_FUSED_DECL(_d64, G)
LLAMA_GROUPS(LLAMA_ATTN_FUSED_DECL_128)
LLAMA_GROUPS(LLAMA_ATTN_FUSED_DECL_64)

// Second pass: out[b, h*D + d] = the softmax-weighted sum over the splits
// that hold keys (ceil((pos[b]+1) / split_len) of them). grid (nq, B), block 128.
#define LLAMA_ATTN_COMBINE_DECL(SFX)                                                                           \
  extern "C" __global__ void llama_attn_combine##SFX(__nv_bfloat16 *out, const float *o_part,                 \
                                                     const float *ml_part, const int *pos, int nq,             \
                                                     int split_len, int nsplit);
LLAMA_ATTN_COMBINE_DECL()
LLAMA_ATTN_COMBINE_DECL(_d64)

// ---- Prefill (kernels/prefill.cu: its own blob "prefill_kernels" of the
// same fatbin, a module of its own). One sequence, a chunk of M prompt rows
// at positions p0 .. p0 + M - 1, p0 = pos[0] read from device memory (the
// engine rebinds pos per chunk, so one graph serves every chunk of a size):
//   ids      int32 [M]               the chunk's token ids
//   x        [M, hidden]             the residual stream
//   qkv      [M, (nq + 2 nkv) * D]   the QKV projection's output
//   q        [M, nq, D]              rotated queries
//   k_cache, v_cache [nkv, max_ctx, D]  the sequence's caches (batch 1)
//   out      [M, nq * D]             attention output

// x[i, :] = emb[ids[i], :]. A token outside [0, vocab) gives a NaN row (the
// host checks the ids; a NaN shows where it did not). grid (M), block 128;
// hidden a multiple of 8.
extern "C" __global__ void llama_embed(__nv_bfloat16 *x, const __nv_bfloat16 *emb, const int *ids, int hidden,
                                       int vocab);

// llama_rope_append for the M rows of one sequence: row i at position
// pos[0] + i; q -> q [M, nq, D], rotated k and plain v -> the caches at
// that position. Rows whose position is not below max_ctx are not written.
// grid (M), block LLAMA_PREFILL_ROPE_THREADS.
#define LLAMA_PREFILL_ROPE_DECL(SFX)                                                                           \
  extern "C" __global__ void llama_prefill_rope##SFX(__nv_bfloat16 *q, __nv_bfloat16 *k_cache,                \
                                                     __nv_bfloat16 *v_cache, const __nv_bfloat16 *qkv,         \
                                                     const int *pos, int nq, int nkv, int max_ctx,             \
                                                     float theta, const float *inv_freq);
LLAMA_PREFILL_ROPE_DECL()
LLAMA_PREFILL_ROPE_DECL(_d64)

// Causal attention of the chunk over the cache: row i (position p0 + i)
// attends to keys 0 .. p0 + i (earlier chunks' rows and this chunk's, which
// llama_prefill_rope appended first). Block (qb, h): KV head h and the
// query heads of its group at positions qb * P .. qb * P + P - 1, P =
// LLAMA_PREFILL_POSITIONS(G). Tensor cores (mma.sync m16n8k16, bf16 in,
// fp32 accumulate) with an online softmax in fp32, log2 domain;
// kernels/prefill.cu says how. grid (llama_prefill_blocks(M, G), nkv),
// block 128.
#define LLAMA_PREFILL_ATTN_DECL(SFX, G)                                                                        \
  extern "C" __global__ void llama_prefill_attn##SFX##_g##G(                                                   \
      __nv_bfloat16 *out, const __nv_bfloat16 *q, const __nv_bfloat16 *k_cache, const __nv_bfloat16 *v_cache,  \
      const int *pos, int M, int nkv, int max_ctx, float scale_log2);
#define LLAMA_PREFILL_ATTN_DECL_128(G) LLAMA_PREFILL_ATTN_DECL(, G)
#define LLAMA_PREFILL_ATTN_DECL_64(G) LLAMA_PREFILL_ATTN_DECL(_d64, G)
LLAMA_GROUPS(LLAMA_PREFILL_ATTN_DECL_128)
LLAMA_GROUPS(LLAMA_PREFILL_ATTN_DECL_64)
#endif

#endif
