// ar_lab.cu - probe: our all-reduce kernels against NCCL (plain buffers and
// symmetric windows) at TP 2, in graphs of chained all-reduces, one process
// driving both GPUs (peer access on). Used to fit the push / two-shot launch
// shapes and size limits (graphbuild/nodes/collective_select.c) and to check
// the kernels bit-exactly against an fp64 reference first.
// Not part of the build: on a 2-GPU machine,
//   nvcc -arch=sm_90a -O3 -I. -o ar_lab tools/probes/ar_lab.cu -lnccl
//   NCCL_NVLS_ENABLE=0 ./ar_lab [--ops 20] [--reps 50] [--nosym]
// It includes kernels/allreduce.cu itself, so it measures the library's kernels.
#include "kernels/allreduce.cu"

#include <cuda.h>
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <vector>
#include <algorithm>
#include <functional>

#define CK(x)                                                                                        \
  do {                                                                                               \
    cudaError_t e_ = (x);                                                                            \
    if (e_ != cudaSuccess) {                                                                         \
      fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_));             \
      exit(1);                                                                                       \
    }                                                                                                \
  } while (0)
#define NK(x)                                                                                        \
  do {                                                                                               \
    ncclResult_t r_ = (x);                                                                           \
    if (r_ != ncclSuccess) {                                                                         \
      fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, ncclGetErrorString(r_));             \
      exit(1);                                                                                       \
    }                                                                                                \
  } while (0)

enum { R = 2 };

// The push kernel's earlier form (each thread stores its vectors into the
// peer's slot with st.global), kept here for the A/B against the bulk form.
template <typename T, int MR, bool EARLY = true, int NS = 0>
__device__ void push_st1(const tpg_allreduce_args &a) {
  constexpr int V = 16 / sizeof(T);
  constexpr int U = MR <= 4 ? 4 : 2;  // vectors a thread loads before storing them
  constexpr int UP = MR <= 2 ? 2 : 1;  // vectors a thread polls at once (registers: UP x MR vectors)
  const uint4 SENT = make_uint4(0x80008000u, 0x80008000u, 0x80008000u, 0x80008000u);
  __shared__ uint32_t s_epoch;
  const int b = blockIdx.x, nb = gridDim.x, R = a.nranks, me = a.rank;
  const uint64_t slotv = ((a.slot_bytes / (R - 1)) & ~15ull) / 16;  // vectors per peer slot
  const uint64_t S = slotv / nb;                                       // this block's window
  const uint64_t nvec = (a.count + V - 1) / V, full = a.count / V;
  uint64_t v0, v1, f0, f1;
  tpg::block_range<T>(a.count, a.epi, b, nb, nvec, v0, v1);
  tpg::block_range<T>(a.count, a.epi, 0, nb, nvec, f0, f1);  // block 0's range is the longest
  const uint32_t rounds = f1 - f0 <= S ? 1u : (uint32_t)((f1 - f0 + S - 1) / S);
  const uint64_t bd = blockDim.x;
  uint4 *mine = static_cast<uint4 *>(a.staging[me]) + b * S;
  T *out = static_cast<T *>(a.out);

  uint4 vv[U];
  auto load_u = [&](uint64_t base, uint64_t end) {
#pragma unroll
    for (int u = 0; u < U; u++) {
      const uint64_t i = base + u * bd;
      if (i < end) vv[u] = unsentinel<T>(load_in<T>(a, i, full));
    }
  };
  const uint64_t first_end = min(v1, v0 + S);
  if (EARLY) load_u(v0 + threadIdx.x, first_end);
  if (threadIdx.x == 0) s_epoch = a.epochs[b] + 1;
  __syncthreads();
  const uint32_t e0 = s_epoch;
  uint64_t deadline = 0;
  bool failed = false;
  for (uint32_t r = 0; r < rounds; r++) {
    const uint32_t e = e0 + r;
    const uint64_t half = ((e & 1u) ? a.slot_bytes : 0) / 16;  // in vectors
    const uint64_t r0 = v0 + (uint64_t)r * S, r1 = min(v1, r0 + S);  // this round's vectors
    if (r > 0) {
      // The resets of the last round are done (fence: at this GPU's L2,
      // before the data that lets the peer write into that half again).
      __threadfence();
      if (__syncthreads_or(failed)) break;
    }
    // Phase 1: this round's vectors to every peer.
    uint64_t i0 = r0 + threadIdx.x;
    if (!EARLY || r > 0) load_u(i0, r1);
    while (i0 < r1) {
#pragma unroll
      for (int u = 0; u < U; u++) {
        const uint64_t i = i0 + u * bd;
        if (i >= r1) break;
#pragma unroll
        for (int q = 0; q < MR; q++)
          if (q < R && q != me)
            __stcg(static_cast<uint4 *>(a.staging[q]) + half + ((me - q - 1 + R) % R) * slotv + b * S + (i - r0),
                   vv[u]);
      }
      i0 += bd * U;
      if (i0 < r1) load_u(i0, r1);
    }
    // Phase 2: own data from `in`, the peers' from this rank's window.
    if (r == 0) deadline = now_ns() + a.timeout_ns;
    for (uint64_t j0 = r0 + threadIdx.x; j0 < r1 && !failed; j0 += bd * UP) {
      uint4 pv[UP][MR];
#pragma unroll
      for (int u = 0; u < UP; u++) {
        const uint64_t i = j0 + u * bd;
        if (i >= r1) break;
#pragma unroll
        for (int q = 0; q < MR; q++) {
          if (q >= R) break;
          pv[u][q] = q == me ? unsentinel<T>(load_in<T>(a, i, full))
                             : ld_volatile(mine + half + ((q - me - 1 + R) % R) * slotv + (i - r0));
        }
      }
#pragma unroll
      for (int u = 0; u < UP; u++) {
        const uint64_t i = j0 + u * bd;
        if (i >= r1 || failed) break;
        float acc[V];
#pragma unroll
        for (int k = 0; k < V; k++) acc[k] = 0.f;
#pragma unroll
        for (int q = 0; q < MR; q++) {
          if (q >= R) break;
          uint4 v = pv[u][q];
          if (q != me) {
            v = wait_arrived<T, NS>(mine + half + ((q - me - 1 + R) % R) * slotv + (i - r0), v, deadline, a.status,
                                    failed);
            if (failed) break;
          }
          const T *t = reinterpret_cast<const T *>(&v);
#pragma unroll
          for (int k = 0; k < V; k++) acc[k] += tf<T>(t[k]);
        }
        if (failed) break;
        if (i < full) {
          tpg::epi_store<T>(a.epi, out, i, acc);
        } else {
          const int rem = (int)(a.count - full * V);
#pragma unroll
          for (int k = 0; k < V; k++)
            if (k < rem) out[full * V + k] = ft<T>(acc[k]);
        }
#pragma unroll
        for (int j = 0; j < MR - 1; j++)
          if (j < R - 1) mine[half + j * slotv + (i - r0)] = SENT;  // ready for epoch e+2
      }
    }
  }
  if (failed) *a.status = 1u;
  const bool any_failed = __syncthreads_or(failed);
  if (!any_failed && tpg::epi_norm(a.epi)) {
    const uint64_t vpr = a.epi.hidden / V;
    tpg::epi_norm_rows<T>(a.epi, out, v0 / vpr, v1 / vpr);
  }
  if (threadIdx.x == 0) a.epochs[b] = e0 + rounds - 1;
}

extern "C" __global__ void __launch_bounds__(512) ar_lab_push_st(const __grid_constant__ tpg_allreduce_args a) {
  push_st1<__nv_bfloat16, 2>(a);
}
// A bulk push (bf16, 2 ranks only), the form the library's push1 grew from: A/B.
__device__ __forceinline__ uint32_t smem_u32(const void *p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void bulk_s2g(void *dst, const void *src_smem, uint32_t bytes) {
  asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" ::"l"(dst), "r"(smem_u32(src_smem)),
               "r"(bytes)
               : "memory");
  asm volatile("cp.async.bulk.commit_group;" ::: "memory");
}
template <int N>
__device__ __forceinline__ void lab_bulk_wait_read() {
  asm volatile("cp.async.bulk.wait_group.read %0;" ::"n"(N) : "memory");
}
__device__ __forceinline__ void fence_async_smem() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }

// Copies n vectors of `in` from v (unsentinel'd) to dst[0..n) through shared
// memory and bulk stores: CH vectors a chunk, NB buffers. Thread 0 issues.
template <int CH, int NB>
__device__ __forceinline__ void bulk_send(uint4 (*sm)[CH], uint32_t &k, const tpg_allreduce_args &a, uint64_t v,
                                          uint64_t n, uint4 *dst, uint64_t full) {
  for (uint64_t c = 0; c < n; c += CH, k++) {
    const int buf = k % NB;
    if (k >= NB) {
      if (threadIdx.x == 0) lab_bulk_wait_read<NB - 1>();
      __syncthreads();
    }
    const uint64_t m = min((uint64_t)CH, n - c);
    for (uint64_t t = threadIdx.x; t < m; t += blockDim.x) sm[buf][t] = unsentinel<__nv_bfloat16>(load_in<__nv_bfloat16>(a, v + c + t, full));
    fence_async_smem();
    __syncthreads();
    if (threadIdx.x == 0) bulk_s2g(dst + c, sm[buf], (uint32_t)(m * 16));
  }
}

// push1 (bf16, 2 ranks) with phase 1 as bulk stores of the block's window.
template <int CH, int NB>
__device__ void lab_push_bulk(const tpg_allreduce_args &a) {
  typedef __nv_bfloat16 T;
  constexpr int V = 8, UP = 2;
  __shared__ __align__(128) uint4 sm[NB][CH];
  const uint4 SENT = make_uint4(0x80008000u, 0x80008000u, 0x80008000u, 0x80008000u);
  __shared__ uint32_t s_epoch;
  const int b = blockIdx.x, nb = gridDim.x, me = a.rank, peer = 1 - a.rank;
  const uint64_t slotv = (a.slot_bytes & ~15ull) / 16;
  const uint64_t S = slotv / nb;
  const uint64_t nvec = (a.count + V - 1) / V, full = a.count / V;
  uint64_t v0, v1, f0, f1;
  tpg::block_range<T>(a.count, a.epi, b, nb, nvec, v0, v1);
  tpg::block_range<T>(a.count, a.epi, 0, nb, nvec, f0, f1);
  const uint32_t rounds = f1 - f0 <= S ? 1u : (uint32_t)((f1 - f0 + S - 1) / S);
  uint4 *mine = static_cast<uint4 *>(a.staging[me]) + b * S;
  uint4 *theirs = static_cast<uint4 *>(a.staging[peer]) + b * S;
  T *out = static_cast<T *>(a.out);
  if (threadIdx.x == 0) s_epoch = a.epochs[b] + 1;
  __syncthreads();
  const uint32_t e0 = s_epoch;
  uint64_t deadline = 0;
  bool failed = false;
  uint32_t k = 0;
  for (uint32_t r = 0; r < rounds; r++) {
    const uint32_t e = e0 + r;
    const uint64_t half = ((e & 1u) ? a.slot_bytes : 0) / 16;
    const uint64_t r0 = v0 + (uint64_t)r * S, r1 = min(v1, r0 + S);
    if (r > 0) {
      __threadfence();
      fence_async_smem();
      if (__syncthreads_or(failed)) break;
    }
    if (r1 > r0) bulk_send<CH, NB>(sm, k, a, r0, r1 - r0, theirs + half, full);
    if (r == 0) deadline = now_ns() + a.timeout_ns;
    for (uint64_t j0 = r0 + threadIdx.x; j0 < r1 && !failed; j0 += blockDim.x * UP) {
      uint4 pown[UP], ppeer[UP];  // separate arrays: indexing by rank put them in local memory
#pragma unroll
      for (int u = 0; u < UP; u++) {
        const uint64_t i = j0 + u * blockDim.x;
        if (i >= r1) break;
        pown[u] = unsentinel<T>(load_in<T>(a, i, full));
        ppeer[u] = ld_volatile(mine + half + (i - r0));
      }
#pragma unroll
      for (int u = 0; u < UP; u++) {
        const uint64_t i = j0 + u * blockDim.x;
        if (i >= r1 || failed) break;
        ppeer[u] = wait_arrived<T>(mine + half + (i - r0), ppeer[u], deadline, a.status, failed);
        if (failed) break;
        float acc[V];
#pragma unroll
        for (int kk = 0; kk < V; kk++) acc[kk] = 0.f;
        {  // two fp32 addends: a + b == b + a, so both ranks get the same bits in any order
          const T *t0 = reinterpret_cast<const T *>(&pown[u]);
          const T *t1 = reinterpret_cast<const T *>(&ppeer[u]);
#pragma unroll
          for (int kk = 0; kk < V; kk++) acc[kk] += tf<T>(t0[kk]) + tf<T>(t1[kk]);
        }
        if (i < full) {
          tpg::epi_store<T>(a.epi, out, i, acc);
        } else {
          const int rem = (int)(a.count - full * V);
#pragma unroll
          for (int kk = 0; kk < V; kk++)
            if (kk < rem) out[full * V + kk] = ft<T>(acc[kk]);
        }
        mine[half + (i - r0)] = SENT;
      }
    }
  }
  if (threadIdx.x == 0) lab_bulk_wait_read<0>();
  if (failed) *a.status = 1u;
  const bool any_failed = __syncthreads_or(failed);
  if (!any_failed && tpg::epi_norm(a.epi)) {
    const uint64_t vpr = a.epi.hidden / V;
    tpg::epi_norm_rows<T>(a.epi, out, v0 / vpr, v1 / vpr);
  }
  if (threadIdx.x == 0) a.epochs[b] = e0 + rounds - 1;
}
extern "C" __global__ void __launch_bounds__(512) ar_lab_r1bulk(const __grid_constant__ tpg_allreduce_args a) {
  lab_push_bulk<256, 4>(a);
}
// The library's push with its options switched.
extern "C" __global__ void __launch_bounds__(512) ar_lab_push_waitall(const __grid_constant__ tpg_allreduce_args a) {
  push_by_ranks<256, 4, false, true>(a);
}
// The library's push1 alone (bf16, 2 ranks): does the one kernel for every
// dtype and rank count cost anything?
extern "C" __global__ void __launch_bounds__(256) ar_lab_push_bf16r2(const __grid_constant__ tpg_allreduce_args a) {
  __shared__ __align__(128) uint4 sm[4][256];
  push1<__nv_bfloat16, 2, 256, 4>(a, sm);
}
extern "C" __global__ void __launch_bounds__(512) ar_lab_push_ownsm(const __grid_constant__ tpg_allreduce_args a) {
  push_by_ranks<256, 4, true, false>(a);
}
// Reference points, not all-reduces: an empty kernel (the graph's per-node
// cost) and a plain copy of the message into the peer's scratch (NVLink
// write bandwidth with no protocol and no waiting).
extern "C" __global__ void ar_lab_nop(const __grid_constant__ tpg_allreduce_args a) {}
extern "C" __global__ void __launch_bounds__(512) ar_lab_nvl_write(const __grid_constant__ tpg_allreduce_args a) {
  const uint64_t nvec = a.count / 8;
  uint4 *dst = reinterpret_cast<uint4 *>(a.flags[1 - a.rank]);
  const uint4 *src = static_cast<const uint4 *>(a.in);
  for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < nvec; i += (uint64_t)gridDim.x * blockDim.x)
    __stcg(dst + i, src[i]);
}
// push1 as the secondary of programmatic dependent launch: the blocks become
// resident and wait while the previous node drains (how much of the fixed
// per-node cost is launch).
extern "C" __global__ void __launch_bounds__(512) ar_lab_push_pdl(const __grid_constant__ tpg_allreduce_args a) {
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  asm volatile("griddepcontrol.wait;" ::: "memory");
  push_by_ranks<256, 4>(a);
}

static const size_t MAXB = (size_t)16 << 20;             // largest message
static const size_t SLOT = ((size_t)16 << 20) + (64 << 10);  // one parity half: R slots of MAXB + padding
static int OPS = 20, REPS = 50;

struct Rank {
  cudaStream_t s;
  void *buf[2];
  char *area;          // [staging 2 x SLOT][gather 2 x SLOT], all sentinel at start
  uint32_t *epochs;    // [kind][1024]
  uint32_t *status;    // host-mapped
  char *scratch;       // peer-written by the nvl_write probe kernel only
};
static Rank rk[R];

static tpg_allreduce_args make_args(int r, int kind, const void *in, void *out, size_t count, size_t slot) {
  tpg_allreduce_args a;
  memset(&a, 0, sizeof a);
  a.in = in;
  a.out = out;
  for (int q = 0; q < R; q++) {
    a.staging[q] = rk[q].area;
    a.gather[q] = rk[q].area + 2 * SLOT;
    a.flags[q] = reinterpret_cast<uint32_t *>(rk[q].scratch);  // unused by the all-reduce kernels
  }
  a.epochs = rk[r].epochs + kind * 1024;
  a.status = rk[r].status;
  a.count = count;
  a.slot_bytes = slot ? slot : SLOT;
  a.timeout_ns = 2000000000ull;
  a.dtype = TPG_KDT_BF16;
  a.nranks = R;
  a.rank = r;
  return a;
}

struct Variant {
  const char *name;
  int kind;  // epoch array
  void (*kern)(tpg_allreduce_args);
  int grid, block;
  size_t slot;  // 0: SLOT; the library's 4 MiB makes push run in rounds above 4 MiB at TP 2
  int pdl;      // launched with programmatic stream serialization
};

static void launch(const Variant &v, int r, const void *in, void *out, size_t count) {
  tpg_allreduce_args a = make_args(r, v.kind, in, out, count, v.slot);
  void *args[] = {&a};
  if (!v.pdl) {
    CK(cudaLaunchKernel((const void *)v.kern, dim3(v.grid), dim3(v.block), args, 0, rk[r].s));
    return;
  }
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(v.grid);
  cfg.blockDim = dim3(v.block);
  cfg.stream = rk[r].s;
  cudaLaunchAttribute at[1];
  at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  at[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = at;
  cfg.numAttrs = 1;
  CK(cudaLaunchKernelExC(&cfg, (const void *)v.kern, args));
}

static uint16_t f2bf(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fc0;
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}
static double bf2d(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

// Bit-exact check: with 2 ranks the fp32 sum of two bf16 values is exact, so
// the result must equal the fp64 sum rounded to bf16 (zero's sign aside), and
// both ranks must agree bit for bit. Outputs are poisoned (NaN) first.
static int check(const Variant &v, size_t count, int inplace, unsigned seed, double *worst) {
  std::vector<uint16_t> h[R], o[R];
  for (int r = 0; r < R; r++) {
    h[r].resize(count);
    unsigned x = seed * 2654435761u + r * 40503u + 1;
    for (size_t i = 0; i < count; i++) {
      x = x * 1664525u + 1013904223u;
      float f = ((int)(x >> 9) % 8193 - 4096) / 1024.0f;  // [-4, 4] in 1/1024 steps
      if ((x & 0xff) == 7) f = -0.0f;                      // the sentinel value as input
      h[r][i] = f2bf(f);
    }
    CK(cudaSetDevice(r));
    // On the kernels' stream: a pageable cudaMemcpy may return before its DMA
    // lands, and the legacy stream does not order a non-blocking one (an
    // in-place run would read the previous inputs' tail).
    CK(cudaMemcpyAsync(rk[r].buf[0], h[r].data(), count * 2, cudaMemcpyHostToDevice, rk[r].s));
    if (!inplace) CK(cudaMemsetAsync(rk[r].buf[1], 0xff, count * 2 + 64, rk[r].s));
    CK(cudaStreamSynchronize(rk[r].s));
  }
  for (int r = 0; r < R; r++) {
    CK(cudaSetDevice(r));
    launch(v, r, rk[r].buf[0], inplace ? rk[r].buf[0] : rk[r].buf[1], count);
  }
  int bad = 0;
  for (int r = 0; r < R; r++) {
    CK(cudaSetDevice(r));
    CK(cudaStreamSynchronize(rk[r].s));
    o[r].resize(count + 32);
    CK(cudaMemcpy(o[r].data(), inplace ? rk[r].buf[0] : rk[r].buf[1], (count + 32) * 2, cudaMemcpyDeviceToHost));
    if (*rk[r].status) {
      printf("  %s: rank %d status set (timeout)\n", v.name, r);
      return 1;
    }
  }
  for (size_t i = 0; i < count; i++) {
    double ref = 0;
    for (int r = 0; r < R; r++) ref += bf2d(h[r][i]);
    uint16_t want = f2bf((float)ref);
    for (int r = 0; r < R; r++) {
      uint16_t got = o[r][i];
      double err = fabs(bf2d(got) - bf2d(want));
      if (err != err) err = INFINITY;
      if (err > *worst) *worst = err;
      const bool zeros = (got & 0x7fff) == 0 && (want & 0x7fff) == 0;
      if (!zeros && got != want) {
        if (bad < 3) printf("  %s count %zu: rank %d [%zu] got %04x want %04x\n", v.name, count, r, i, got, want);
        bad++;
      }
    }
    if (o[0][i] != o[1][i] && bad < 3) {
      printf("  %s: ranks differ at %zu: %04x %04x\n", v.name, i, o[0][i], o[1][i]);
      bad++;
    }
  }
  if (!inplace)  // the poison past the end is untouched
    for (int r = 0; r < R; r++)
      for (size_t i = count; i < count + 8; i++)
        if (o[r][i] != 0xffff && bad++ < 3) printf("  %s: rank %d wrote past the end at %zu\n", v.name, r, i);
  return bad;
}

static double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Graph of OPS chained ops per rank (alternating two buffers, in place), us per op on rank 0.
static double time_graph(const std::function<void(int, int)> &capture_ops) {
  cudaGraph_t g[R];
  cudaGraphExec_t ge[R];
  for (int r = 0; r < R; r++) {
    CK(cudaSetDevice(r));
    CK(cudaStreamBeginCapture(rk[r].s, cudaStreamCaptureModeRelaxed));
  }
  for (int op = 0; op < OPS; op++) capture_ops(op, -1);
  for (int r = 0; r < R; r++) {
    CK(cudaSetDevice(r));
    CK(cudaStreamEndCapture(rk[r].s, &g[r]));
    CK(cudaGraphInstantiate(&ge[r], g[r], 0));
  }
  cudaEvent_t e0[R], e1[R];
  for (int r = 0; r < R; r++) {
    CK(cudaSetDevice(r));
    CK(cudaEventCreate(&e0[r]));
    CK(cudaEventCreate(&e1[r]));
  }
  std::vector<double> t;
  for (int it = 0; it < REPS + 3; it++) {
    for (int r = 0; r < R; r++) {
      CK(cudaSetDevice(r));
      CK(cudaEventRecord(e0[r], rk[r].s));
      CK(cudaGraphLaunch(ge[r], rk[r].s));
      CK(cudaEventRecord(e1[r], rk[r].s));
    }
    float ms[R];
    for (int r = 0; r < R; r++) {
      CK(cudaSetDevice(r));
      CK(cudaEventSynchronize(e1[r]));
      CK(cudaEventElapsedTime(&ms[r], e0[r], e1[r]));
    }
    if (it >= 3) t.push_back(1000.0 * ms[0] / OPS);
  }
  for (int r = 0; r < R; r++) {
    CK(cudaSetDevice(r));
    CK(cudaGraphExecDestroy(ge[r]));
    CK(cudaGraphDestroy(g[r]));
    CK(cudaEventDestroy(e0[r]));
    CK(cudaEventDestroy(e1[r]));
    if (*rk[r].status) {
      printf("rank %d: status set during timing\n", r);
      exit(1);
    }
  }
  return median(t);
}

int main(int argc, char **argv) {
  int sym = 1, quick = 0;  // --quick: checks up to 1 M elements, times 256 KiB - 4 MiB
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--ops") && i + 1 < argc) OPS = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--reps") && i + 1 < argc) REPS = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--nosym")) sym = 0;
    else if (!strcmp(argv[i], "--quick")) quick = 1;
  }
  for (int r = 0; r < R; r++) {
    CK(cudaSetDevice(r));
    CK(cudaDeviceEnablePeerAccess(1 - r, 0));
    CK(cudaStreamCreateWithFlags(&rk[r].s, cudaStreamNonBlocking));
    for (int b = 0; b < 2; b++) {
      CK(cudaMalloc(&rk[r].buf[b], MAXB + 4096));
      CK(cudaMemset(rk[r].buf[b], 0, MAXB + 4096));
    }
    CK(cudaMalloc(&rk[r].area, 4 * SLOT));
    if (cuMemsetD32((CUdeviceptr)rk[r].area, 0x80008000u, 4 * SLOT / 4) != CUDA_SUCCESS) {
      fprintf(stderr, "cuMemsetD32 failed\n");
      return 1;
    }
    CK(cudaMalloc(&rk[r].scratch, MAXB));
    CK(cudaMalloc(&rk[r].epochs, 8 * 1024 * 4));
    CK(cudaMemset(rk[r].epochs, 0, 8 * 1024 * 4));
    CK(cudaHostAlloc(&rk[r].status, 64, cudaHostAllocMapped | cudaHostAllocPortable));
    *rk[r].status = 0;
    CK(cudaDeviceSynchronize());
  }

  std::vector<Variant> vs;
  const size_t LIB = (size_t)4 << 20;  // lib/peer.c's slot
  vs.push_back({"st264x256", 2, ar_lab_push_st, 264, 256, LIB});  // the merged tree's push kernel, its best shape
  vs.push_back({"push264x256", 4, tpg_allreduce_push, 264, 256, LIB});  // the library's
  vs.push_back({"r1bulk264x256", 4, ar_lab_r1bulk, 264, 256, LIB});
  vs.push_back({"ownsm264x256", 4, ar_lab_push_ownsm, 264, 256, LIB});
  vs.push_back({"pushpdl264x256", 4, ar_lab_push_pdl, 264, 256, LIB, 1});
  const size_t nchecked = vs.size();
  vs.push_back({"ref:nop132x512", 3, ar_lab_nop, 132, 512, 0});
  vs.push_back({"ref:nvlwr132x512", 3, ar_lab_nvl_write, 132, 512, 0});

  // Correctness first: sizes with tails, both parities, in place and not.
  int fails = 0;
  double worst = 0;
  static const size_t counts[] = {1, 7, 8, 1000, 65536 + 3, 1 << 20, (1 << 20) + 5, 4 << 20, 8 << 20};
  for (size_t vi = 0; vi < nchecked; vi++) {
    const Variant &v = vs[vi];
    int vf = 0;
    for (size_t c : counts) {
      if (c * 2 > MAXB || (quick && c > (1u << 20) + 5)) continue;
      if (v.kern == tpg_allreduce_lamport && c * 2 > SLOT / R) continue;
      if (c * 2 > (4u << 20) && !(v.grid == 128 && v.block == 512) && v.grid != 264) continue;  // big sizes: fewer shapes
      for (int rep = 0; rep < 6; rep++) vf += check(v, c, rep % 3 == 2, (unsigned)(c + rep), &worst);
    }
    printf("check %-16s %s\n", v.name, vf ? "FAIL" : "ok");
    fails += vf;
  }
  printf("checks: %d mismatches, worst abs error %.3g (bound: 0, bit-exact vs fp64 rounded)\n", fails, worst);

  // NCCL, blocking comms (single process), plain and symmetric windows.
  int devs[R] = {0, 1};
  ncclComm_t comms[R];
  NK(ncclCommInitAll(comms, R, devs));
  void *symb[R][2] = {};
  ncclWindow_t win[R][2] = {};
  if (sym) {
    for (int r = 0; r < R; r++) {
      CK(cudaSetDevice(r));
      for (int b = 0; b < 2; b++) NK(ncclMemAlloc(&symb[r][b], MAXB));
    }
    ncclResult_t rr = ncclGroupStart();
    for (int r = 0; r < R && rr == ncclSuccess; r++)
      for (int b = 0; b < 2 && rr == ncclSuccess; b++)
        rr = ncclCommWindowRegister(comms[r], symb[r][b], MAXB, &win[r][b], NCCL_WIN_COLL_SYMMETRIC);
    ncclResult_t re = ncclGroupEnd();
    if (rr != ncclSuccess || re != ncclSuccess) {
      printf("symmetric windows: registration failed (%s / %s): column skipped\n", ncclGetErrorString(rr),
             ncclGetErrorString(re));
      sym = 0;
    }
    printf("symmetric windows: %p %p %p %p\n", (void *)win[0][0], (void *)win[0][1], (void *)win[1][0], (void *)win[1][1]);
  }

  static const size_t sizes[] = {16 << 10, 64 << 10, 256 << 10, 512 << 10, 1 << 20, 2 << 20, 4 << 20, 8 << 20, 16 << 20};
  const int NS = sizeof sizes / sizeof sizes[0];
  const int NV = (int)vs.size();
  std::vector<std::vector<double>> res(NS, std::vector<double>(NV + 2, NAN));
  for (int si = 0; si < NS; si++) {
    const size_t bytes = sizes[si], n = bytes / 2;
    if (quick && (bytes < (256u << 10) || bytes > (4u << 20))) continue;
    res[si][0] = time_graph([&](int op, int) {
      NK(ncclGroupStart());
      for (int r = 0; r < R; r++)
        NK(ncclAllReduce(rk[r].buf[op & 1], rk[r].buf[op & 1], n, ncclBfloat16, ncclSum, comms[r], rk[r].s));
      NK(ncclGroupEnd());
    });
    if (sym)
      res[si][1] = time_graph([&](int op, int) {
        NK(ncclGroupStart());
        for (int r = 0; r < R; r++)
          NK(ncclAllReduce(symb[r][op & 1], symb[r][op & 1], n, ncclBfloat16, ncclSum, comms[r], rk[r].s));
        NK(ncclGroupEnd());
      });
    for (int vi = 0; vi < NV; vi++) {
      const Variant &v = vs[vi];
      if (v.kern == tpg_allreduce_lamport && bytes > SLOT / R) continue;
      res[si][vi + 2] = time_graph([&](int op, int) {
        for (int r = 0; r < R; r++) {
          CK(cudaSetDevice(r));
          launch(v, r, rk[r].buf[op & 1], rk[r].buf[op & 1], n);
        }
      });
    }
  }
  printf("\nus per all-reduce, bf16, TP 2, graph of %d chained ops, median of %d launches (rank 0)\n", OPS, REPS);
  printf("%-16s", "variant");
  for (int si = 0; si < NS; si++) printf(" %8zuK", sizes[si] >> 10);
  printf("\n%-16s", "nccl");
  for (int si = 0; si < NS; si++) printf(" %9.2f", res[si][0]);
  printf("\n%-16s", "nccl_sym");
  for (int si = 0; si < NS; si++) printf(" %9.2f", res[si][1]);
  for (int vi = 0; vi < NV; vi++) {
    printf("\n%-16s", vs[vi].name);
    for (int si = 0; si < NS; si++) printf(" %9.2f", res[si][vi + 2]);
  }
  printf("\n");
  // No teardown: destroying comms of one process rank by rank from one thread hangs (h200-pair.md); exit frees.
  return fails ? 1 : 0;
}
