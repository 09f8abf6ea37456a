// loop.cu - the device side of decode.cc's loops: greedy sampling
// across tensor-parallel ranks, appending the token, advancing positions,
// and (device loop) setting the loop's condition. Loaded as a module of its
// own (symbol llama_decode_kernels); every parameter is listed in decode.cc.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

// Keeps (bv, bi) the better of itself and (v, j): the larger logit, ties
// the lower index; NaN never wins.
__device__ __forceinline__ void better(float v, int j, float &bv, int &bi) {
  if (v > bv || (v == bv && j < bi)) {
    bv = v;
    bi = j;
  }
}

// This rank's best logit of row b over its vocab slice (ties: the lowest
// index, so every rank and every run choose alike), written as candidate r
// of cand [B][R][2] = (value, global token id); the other ranks' entries
// are zero, so the all-reduce (a sum) leaves every rank all R candidates,
// exactly (x + 0 = x; token ids < 2^24 are exact in fp32). Block b, 1024
// threads; block 0 also zeroes the padding [B*R*2, ncand). One block reads
// a whole row, so its loads are 16-byte and four deep per thread: one scalar
// load at a time kept a 128256-logit row at 55 us on an H100.
extern "C" __global__ void llama_argmax_part(float *cand, const float *logits, int vpart, int rank, int nranks,
                                             int ncand) {
  const int b = blockIdx.x, nt = blockDim.x;
  const float *row = logits + (size_t)b * vpart;
  float bv = -INFINITY;
  int bi = 0x7fffffff;
  // Scalar up to the first 16-byte boundary (rows start wherever b * vpart
  // puts them), float4 through the body, scalar for the tail.
  const int lead = min(vpart, (int)((16 - ((size_t)row & 15)) & 15) / 4);
  const int n4 = (vpart - lead) / 4;
  const float4 *body = reinterpret_cast<const float4 *>(row + lead);
  for (int j = threadIdx.x; j < lead; j += nt) better(row[j], j, bv, bi);
  for (int i = threadIdx.x; i < n4; i += 4 * nt) {
    float4 q[4];
#pragma unroll
    for (int u = 0; u < 4; u++)
      if (i + u * nt < n4) q[u] = body[i + u * nt];
#pragma unroll
    for (int u = 0; u < 4; u++) {
      if (i + u * nt >= n4) break;
      const int j = lead + 4 * (i + u * nt);
      better(q[u].x, j, bv, bi);
      better(q[u].y, j + 1, bv, bi);
      better(q[u].z, j + 2, bv, bi);
      better(q[u].w, j + 3, bv, bi);
    }
  }
  for (int j = lead + 4 * n4 + threadIdx.x; j < vpart; j += nt) better(row[j], j, bv, bi);
  for (int off = 16; off > 0; off >>= 1) {
    const float ov = __shfl_down_sync(0xffffffffu, bv, off);
    const int oi = __shfl_down_sync(0xffffffffu, bi, off);
    better(ov, oi, bv, bi);
  }
  __shared__ float sv[32];
  __shared__ int si[32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) {
    sv[warp] = bv;
    si[warp] = bi;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < (nt + 31) / 32; w++) better(sv[w], si[w], bv, bi);
    if (bi == 0x7fffffff) bi = 0;  // a row of NaNs: token 0, alike everywhere
    for (int r = 0; r < nranks; r++) {
      cand[((size_t)b * nranks + r) * 2 + 0] = r == rank ? bv : 0.f;
      cand[((size_t)b * nranks + r) * 2 + 1] = r == rank ? (float)(rank * vpart + bi) : 0.f;
    }
  }
  if (b == 0)
    for (int i = gridDim.x * nranks * 2 + threadIdx.x; i < ncand; i += blockDim.x) cand[i] = 0.f;
}

// Sequence b's token: the best of the R candidates (ties: the lowest id),
// which every rank computes from the same all-reduced numbers. Streams it to
// pinned host memory (out[step * B + b]), marks the sequence done at the end
// token, advances its position, and makes it the next step's input
// (x[b] = emb[token]). Block b, 256 threads.
extern "C" __global__ void llama_decode_pick(const float *cand, int nranks, int *out, const int *step, int *pos,
                                             int *done, int end_token, __nv_bfloat16 *x, const __nv_bfloat16 *emb,
                                             int hidden) {
  const int b = blockIdx.x, B = gridDim.x;
  __shared__ int tok;
  if (threadIdx.x == 0) {
    float bv = cand[(size_t)b * nranks * 2];
    int bt = (int)cand[(size_t)b * nranks * 2 + 1];
    for (int r = 1; r < nranks; r++) {
      const float v = cand[((size_t)b * nranks + r) * 2];
      const int t = (int)cand[((size_t)b * nranks + r) * 2 + 1];
      if (v > bv || (v == bv && t < bt)) {
        bv = v;
        bt = t;
      }
    }
    tok = bt;
    out[(size_t)step[0] * B + b] = bt;
    __threadfence_system();  // the host may be reading while the loop runs
    if (bt == end_token) done[b] = 1;
    pos[b] += 1;
  }
  __syncthreads();
  const __nv_bfloat16 *e = emb + (size_t)tok * hidden;
  for (int i = threadIdx.x; i < hidden; i += blockDim.x) x[(size_t)b * hidden + i] = e[i];
}

// One step done: count it (streamed to progress[0]) and tell whether to go
// on: not every sequence has ended and fewer than max_steps were made.
__device__ __forceinline__ unsigned step_done(int *step, const int *done, int B, int max_steps, int *progress) {
  const int s = ++step[0];
  int all = 1;
  for (int b = 0; b < B; b++) all &= done[b] != 0;
  progress[0] = s;
  __threadfence_system();
  return !all && s < max_steps;
}

// The device loop's condition (its WHILE node's handle). Every rank sets
// the same value: its inputs are the same on every rank.
extern "C" __global__ void llama_decode_cond(cudaGraphConditionalHandle h, int *step, const int *done, int B,
                                             int max_steps, int *progress) {
  if (blockIdx.x == 0 && threadIdx.x == 0) cudaGraphSetConditional(h, step_done(step, done, B, max_steps, progress));
}

// The host loop's step counter (the host decides whether to go on).
extern "C" __global__ void llama_decode_count(int *step, const int *done, int B, int max_steps, int *progress) {
  if (blockIdx.x == 0 && threadIdx.x == 0) (void)step_done(step, done, B, max_steps, progress);
}

// The serving step's sampling (graphs/serve_step.cc): row b's token is the
// best of its R candidates (ties: the lowest id), as llama_decode_pick
// chooses it, written to pinned host memory; the host does the rest. Block
// b, one thread does the work.
extern "C" __global__ void llama_serve_pick(const float *cand, int nranks, int *out) {
  if (threadIdx.x) return;
  const int b = blockIdx.x;
  float bv = cand[(size_t)b * nranks * 2];
  int bt = (int)cand[(size_t)b * nranks * 2 + 1];
  for (int r = 1; r < nranks; r++) {
    const float v = cand[((size_t)b * nranks + r) * 2];
    const int t = (int)cand[((size_t)b * nranks + r) * 2 + 1];
    if (v > bv || (v == bv && t < bt)) {
      bv = v;
      bt = t;
    }
  }
  out[b] = bt;
}
