// paged_bench.cu - paged_check --bench: the decode attention's K/V read
// rate, llama_paged_attn_g4 (paged pool, cp.async stages) beside
// llama_attn_fused_g4 (contiguous caches, loads to registers), Llama-3-8B at
// TP 1 (32 query heads over 8, head dim 128), batch 32, every row at the same
// context. A program, not a check: it prints and judges nothing.
//
// Rate = the K and V bytes the step must read (batch x 8 heads x (ctx + 1)
// keys x 512 bytes) / the median time of 50 launches, each between two
// events, after 10 warm-up launches. Launches rotate over copies of the
// caches that together exceed L2 (so every launch reads HBM). Each kernel
// runs at several splits: the old one at its best is the strongest
// alternative; the paged one at the serving default (512 keys) and at its best.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <random>
#include <vector>

#include "examples/llama/kernels/kernels.h"
#include "examples/llama/test/check_util.cuh"

namespace {

constexpr int kB = 32, kNq = 32, kNkv = 8, kD = 128, kCopies = 4;

// Median milliseconds of `iters` launches of fn(i), each between two events.
template <class F>
float median_ms(F fn, int iters) {
  std::vector<cudaEvent_t> ev(2 * iters);
  for (auto &e : ev) CK(cudaEventCreate(&e));
  for (int i = 0; i < 10; i++) fn(i);
  for (int i = 0; i < iters; i++) {
    CK(cudaEventRecord(ev[2 * i]));
    fn(i);
    CK(cudaEventRecord(ev[2 * i + 1]));
  }
  CK(cudaGetLastError());
  CK(cudaDeviceSynchronize());
  std::vector<float> t(iters);
  for (int i = 0; i < iters; i++) CK(cudaEventElapsedTime(&t[i], ev[2 * i], ev[2 * i + 1]));
  for (auto &e : ev) CK(cudaEventDestroy(e));
  std::sort(t.begin(), t.end());
  return t[iters / 2];
}

// Device memory of n bf16 values in [-1, 1) (values do not matter to time;
// finite keeps the softmax ordinary).
__nv_bfloat16 *filled(size_t n, std::mt19937 &rng) {
  std::vector<uint16_t> h(n);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  for (auto &x : h) x = llama_check::f2b(u(rng));
  return (__nv_bfloat16 *)llama_check::up(h);
}

// One context: both kernels at each split, a line per kernel and split.
void bench_ctx(int ctx, std::mt19937 &rng) {
  const int len = ctx + 1, nblk = (len + LLAMA_KV_BLOCK - 1) / LLAMA_KV_BLOCK, nh = kNq + 2 * kNkv;
  const double bytes = (double)kB * kNkv * len * kD * 2 * 2;
  const float sl2 = (float)(1.0 / std::sqrt((double)kD) * 1.4426950408889634), theta = 500000.f;
  const size_t pool = (size_t)kB * nblk * kNkv * LLAMA_KV_BLOCK * kD, cont = (size_t)kB * kNkv * len * kD;
  std::vector<__nv_bfloat16 *> pk, pv, ck, cv;
  for (int c = 0; c < kCopies; c++) {
    pk.push_back(filled(pool, rng)), pv.push_back(filled(pool, rng));
    ck.push_back(filled(cont, rng)), cv.push_back(filled(cont, rng));
  }
  std::vector<int> table(kB * nblk), pos(kB, ctx), seq(kB), meta = {kB, 0, 0, 0};
  std::iota(table.begin(), table.end(), 0);
  std::shuffle(table.begin(), table.end(), rng);
  std::iota(seq.begin(), seq.end(), 0);
  int *dtab = llama_check::up(table), *dpos = llama_check::up(pos), *dseq = llama_check::up(seq),
      *dmeta = llama_check::up(meta);
  __nv_bfloat16 *qkv = filled((size_t)kB * nh * kD, rng), *out = filled((size_t)kB * kNq * kD, rng),
                *q = filled((size_t)kB * kNq * kD, rng);
  const int max_split = (len + LLAMA_KV_BLOCK - 1) / LLAMA_KV_BLOCK;
  float *op, *ml;
  unsigned *cnt;
  CK(cudaMalloc(&op, (size_t)kB * kNq * max_split * kD * 4));
  CK(cudaMalloc(&ml, (size_t)kB * kNq * max_split * 2 * 4));
  CK(cudaMalloc(&cnt, (size_t)kB * kNkv * 4));
  CK(cudaMemset(cnt, 0, (size_t)kB * kNkv * 4));
  CK(cudaFuncSetAttribute(llama_paged_attn_g4, cudaFuncAttributeMaxDynamicSharedMemorySize,
                          (int)llama_paged_attn_smem(kD)));
  for (int ns : {1, 2, 3, 4, 6, 8, 12, 16, 33}) {
    const int split = (len + ns * LLAMA_KV_BLOCK - 1) / (ns * LLAMA_KV_BLOCK) * LLAMA_KV_BLOCK;
    const int nsplit = (len + split - 1) / split;
    if (nsplit != ns) continue;  // this many splits cannot be made of whole tiles
    const float told = median_ms(
        [&](int i) {
          llama_attn_fused_g4<<<dim3(nsplit, kNkv, kB), 128>>>(out, op, ml, cnt, ck[i % kCopies], cv[i % kCopies], qkv,
                                                              dpos, kNkv, len, split, nsplit, sl2, theta, nullptr);
        },
        50);
    const float tnew = median_ms(
        [&](int i) {
          llama_paged_attn_g4<<<dim3(nsplit, kNkv, kB), 128, llama_paged_attn_smem(kD)>>>(
              out, q, op, ml, cnt, pk[i % kCopies], pv[i % kCopies], dtab, qkv, dmeta, dpos, dseq, kNkv, nblk, split,
              nsplit, sl2, theta, nullptr);
        },
        50);
    std::printf("attn bench: batch %d ctx %4d split %4d x %2d: fused (contiguous) %7.1f us %5.2f TB/s | paged "
                "%7.1f us %5.2f TB/s%s\n",
                kB, ctx, split, nsplit, told * 1e3, bytes / (told * 1e-3) / 1e12, tnew * 1e3,
                bytes / (tnew * 1e-3) / 1e12, split == LLAMA_PAGED_SPLIT ? "  (serving default split)" : "");
  }
  for (auto v : {&pk, &pv, &ck, &cv})
    for (auto p : *v) CK(cudaFree(p));
  for (void *p : {(void *)dtab, (void *)dpos, (void *)dseq, (void *)dmeta, (void *)qkv, (void *)out, (void *)q,
                  (void *)op, (void *)ml, (void *)cnt})
    CK(cudaFree(p));
}

}  // namespace

int paged_bench() {
  std::mt19937 rng(99);
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  std::printf("attn bench: %s, %d SMs, L2 %d MB; K/V bytes per launch / median time\n", prop.name,
              prop.multiProcessorCount, prop.l2CacheSize >> 20);
  for (int ctx : {512, 4096}) bench_ctx(ctx, rng);
  return 0;
}
