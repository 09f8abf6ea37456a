// kernels.h - the Llama example engine's own kernels: names and parameters.
//
// The engine never links these: it loads examples/llama/kernels.cu's fatbin
// with tpg_module_load and adds the kernels to its plan by NAME, so the
// names are extern "C" (unmangled) and the parameter lists below are the
// contract its tpg_arg lists must match (tpg_graph_create checks them
// against the real layout). kernel_check.cu launches them directly through
// these declarations. Shapes of one decode step, R = tensor-parallel ranks:
//   nq  = heads / R query heads, nkv = kv_heads / R KV heads of this rank,
//   head dim 128, G = nq / nkv query heads per KV head (GQA group).
//   qkv      [B, (nq + 2 nkv) * 128]  the QKV projection's output: q heads,
//                                     then k heads, then v heads
//   q        [B, nq, 128]             rotated queries
//   k_cache, v_cache [B, nkv, max_ctx, 128]  keys stored rotated
//   pos      int32 [B]                this step's position of each sequence:
//                                     the token is written there and attends
//                                     to positions 0..pos (length pos + 1)
#ifndef LLAMA_KERNELS_H
#define LLAMA_KERNELS_H

#define LLAMA_HEAD_DIM 128
// Keys per shared-memory tile of the attention kernel; split lengths are
// multiples of it.
#define LLAMA_ATTN_TILE 64
// The GQA group sizes with a compiled attention kernel (llama_attn_g<G>).
#define LLAMA_ATTN_MAX_GROUP 16
// Query rows per block of llama_prefill_attn_g<G>: 4 warps x 16 MMA rows,
// each row one (position, query head) pair; a block holds 64 / G positions.
#define LLAMA_PREFILL_ROWS 64

#ifdef __CUDACC__
#include <cuda_bf16.h>

// y[b, :] = x[b, :] / sqrt(mean(x[b, :]^2) + eps) * w, fp32 inside, one
// rounding to bf16. grid (B), block 256; hidden a multiple of 8.
extern "C" __global__ void llama_rmsnorm(__nv_bfloat16 *y, const __nv_bfloat16 *x, const __nv_bfloat16 *w,
                                         int hidden, float eps);

// RoPE (rotate_half layout) on the q and k heads of qkv at position pos[b];
// q -> q, k -> k_cache[b, h, pos[b]], v -> v_cache[b, h, pos[b]]
// unrotated. inv_freq: [64] fp32 inverse frequencies (a scaled RoPE such as
// Llama 3.1's), or null: Llama-3's unscaled 1 / theta^(2i/128), computed
// here. grid (B, nq + 2 nkv), block 64.
extern "C" __global__ void llama_rope_append(__nv_bfloat16 *q, __nv_bfloat16 *k_cache, __nv_bfloat16 *v_cache,
                                             const __nv_bfloat16 *qkv, const int *pos, int nq, int nkv,
                                             int max_ctx, float theta, const float *inv_freq);

// Split-KV decode attention, first pass. Block (s, h, b) attends query heads
// h*G .. h*G+G-1 of sequence b over keys [s*split_len, min((s+1)*split_len,
// pos[b]+1)) and writes its unnormalised output and (max, sum) of the scores
// (log2 domain): o_part [B, nq, nsplit, 128] fp32, ml_part [B, nq, nsplit, 2].
// Blocks whose split starts at or after the length write nothing.
// grid (nsplit, nkv, B), block 128; split_len a multiple of LLAMA_ATTN_TILE.
// scale_log2 = softmax scale * log2(e). One kernel per group size G.
#define LLAMA_ATTN_DECL(G)                                                                                  \
  extern "C" __global__ void llama_attn_g##G(float *o_part, float *ml_part, const __nv_bfloat16 *q,          \
                                             const __nv_bfloat16 *k_cache, const __nv_bfloat16 *v_cache,     \
                                             const int *pos, int nkv, int max_ctx, int split_len, int nsplit, \
                                             float scale_log2);
LLAMA_ATTN_DECL(1)
LLAMA_ATTN_DECL(2)
LLAMA_ATTN_DECL(4)
LLAMA_ATTN_DECL(8)
LLAMA_ATTN_DECL(16)

// The same first pass on tensor cores (mma.sync m16n8k16, sm_80+): same
// grid, block, arguments and outputs; kernels.cu says how. The engine uses
// these unless --attn fma.
#define LLAMA_ATTN_TC_DECL(G)                                                                                  \
  extern "C" __global__ void llama_attn_tc_g##G(float *o_part, float *ml_part, const __nv_bfloat16 *q,          \
                                                const __nv_bfloat16 *k_cache, const __nv_bfloat16 *v_cache,     \
                                                const int *pos, int nkv, int max_ctx, int split_len, int nsplit, \
                                                float scale_log2);
LLAMA_ATTN_TC_DECL(1)
LLAMA_ATTN_TC_DECL(2)
LLAMA_ATTN_TC_DECL(4)
LLAMA_ATTN_TC_DECL(8)
LLAMA_ATTN_TC_DECL(16)

// The decode attention of one layer in one node (the engine's default):
// RoPE + KV append + the tensor-core first pass + the merge. Block (s, h, b)
// rotates its group's G query heads from qkv itself (as llama_rope_append
// does); the block whose split holds pos[b] also rotates the new key and
// writes k_cache / v_cache at pos[b] before reading keys; every block that
// holds keys writes its partials as llama_attn_tc_g<G> does, then counts
// itself in counters[b * nkv + h]; the last one merges the splits into out
// [B, nq * 128] (as llama_attn_combine) and resets the counter to 0.
// counters: [B * nkv] uint32, zero before the first launch. theta and
// inv_freq as llama_rope_append's. grid (nsplit, nkv, B), block 128; the
// scratch partials as above.
#define LLAMA_ATTN_FUSED_DECL(G)                                                                                 \
  extern "C" __global__ void llama_attn_fused_g##G(__nv_bfloat16 *out, float *o_part, float *ml_part,           \
                                                   unsigned *counters, __nv_bfloat16 *k_cache,                  \
                                                   __nv_bfloat16 *v_cache, const __nv_bfloat16 *qkv,             \
                                                   const int *pos, int nkv, int max_ctx, int split_len,          \
                                                   int nsplit, float scale_log2, float theta,                   \
                                                   const float *inv_freq);
LLAMA_ATTN_FUSED_DECL(1)
LLAMA_ATTN_FUSED_DECL(2)
LLAMA_ATTN_FUSED_DECL(4)
LLAMA_ATTN_FUSED_DECL(8)
LLAMA_ATTN_FUSED_DECL(16)

// Second pass: out[b, h*128 + d] = the softmax-weighted sum over the splits
// that hold keys (ceil((pos[b]+1) / split_len) of them). grid (nq, B), block 128.
extern "C" __global__ void llama_attn_combine(__nv_bfloat16 *out, const float *o_part, const float *ml_part,
                                              const int *pos, int nq, int split_len, int nsplit);
// ---- Prefill (prefill_kernels.cu: its own blob "prefill_kernels" of the
// same fatbin, a module of its own). One sequence, a chunk of M prompt rows
// at positions p0 .. p0 + M - 1, p0 = pos[0] read from device memory (the
// engine rebinds pos per chunk, so one graph serves every chunk of a size):
//   ids      int32 [M]               the chunk's token ids
//   x        [M, hidden]             the residual stream
//   qkv      [M, (nq + 2 nkv) * 128] the QKV projection's output
//   q        [M, nq, 128]            rotated queries
//   k_cache, v_cache [nkv, max_ctx, 128]  the sequence's caches (batch 1)
//   out      [M, nq * 128]           attention output

// x[i, :] = emb[ids[i], :]. A token outside [0, vocab) gives a NaN row (the
// host checks the ids; a NaN shows where it did not). grid (M), block 128;
// hidden a multiple of 8.
extern "C" __global__ void llama_embed(__nv_bfloat16 *x, const __nv_bfloat16 *emb, const int *ids, int hidden,
                                       int vocab);

// llama_rope_append for the M rows of one sequence: row i at position
// pos[0] + i; q -> q [M, nq, 128], rotated k and plain v -> the caches at
// that position. Rows whose position is not below max_ctx are not written.
// grid (M, nq + 2 nkv), block 64.
extern "C" __global__ void llama_prefill_rope(__nv_bfloat16 *q, __nv_bfloat16 *k_cache, __nv_bfloat16 *v_cache,
                                              const __nv_bfloat16 *qkv, const int *pos, int nq, int nkv,
                                              int max_ctx, float theta, const float *inv_freq);

// Causal attention of the chunk over the cache: row i (position p0 + i)
// attends to keys 0 .. p0 + i (earlier chunks' rows and this chunk's, which
// llama_prefill_rope appended first). Block (qb, h): KV head h and the
// LLAMA_PREFILL_ROWS (position, head) rows of positions qb * 64/G .. of its
// group. Tensor cores (mma.sync m16n8k16, bf16 in, fp32 accumulate) with an
// online softmax in fp32, log2 domain; prefill_kernels.cu says how.
// grid (ceil(M * G / 64), nkv), block 128.
#define LLAMA_PREFILL_ATTN_DECL(G)                                                                           \
  extern "C" __global__ void llama_prefill_attn_g##G(__nv_bfloat16 *out, const __nv_bfloat16 *q,             \
                                                     const __nv_bfloat16 *k_cache,                            \
                                                     const __nv_bfloat16 *v_cache, const int *pos, int M,     \
                                                     int nkv, int max_ctx, float scale_log2);
LLAMA_PREFILL_ATTN_DECL(1)
LLAMA_PREFILL_ATTN_DECL(2)
LLAMA_PREFILL_ATTN_DECL(4)
LLAMA_PREFILL_ATTN_DECL(8)
LLAMA_PREFILL_ATTN_DECL(16)
#endif

#endif
