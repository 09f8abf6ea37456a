// allreduce.cu - one-shot all-reduce as a single kernel node of our graph.
//
// For decode-sized messages NCCL's latency (a child graph of several nodes,
// ~8-9 us for 16 KiB on 2 x H200) exceeds the work. Here every rank copies
// its input into its own slice of a peer-visible staging buffer, tells each
// peer "epoch e ready" by storing into the peer's flag array, waits for all
// peers' flags, then reads every peer's staging over NVLink, sums in fp32 and
// writes its own output. One kernel, no host involvement, safe under graph
// replay:
// - Epochs live in device memory (one counter per block), so replays keep
//   ranks in step without the host.
// - Staging is double-buffered by epoch parity: a rank can only be writing
//   epoch e+2's data after every peer has signalled epoch e+1, i.e. finished
//   reading epoch e's buffer, so no second barrier is needed.
// - Block b only waits for peers' block b (it reads only slice b): no grid
//   barrier.
// - Every wait is bounded by a %globaltimer deadline; on expiry the kernel
//   records the failure in host-mapped memory and exits, so a dead peer
//   becomes an error the host sees, not a hung GPU.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

#include "kernels/common.cuh"
#include "kernels/tpg_kargs.h"

namespace {

__device__ __forceinline__ uint64_t now_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
__device__ __forceinline__ void st_release(uint32_t *p, uint32_t v) {
  asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ uint32_t ld_acquire(const uint32_t *p) {
  uint32_t v;
  asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

template <typename T> __device__ __forceinline__ float tf(T v) { return tpg::dt<T>::to_f(v); }
template <typename T> __device__ __forceinline__ T ft(float v) { return tpg::dt<T>::from_f(v); }

template <typename T>
__device__ void oneshot(const tpg_allreduce_args &a) {
  constexpr int V = 16 / sizeof(T);  // elements per 16-byte vector
  __shared__ uint32_t s_epoch;
  __shared__ int s_fail;
  const int b = blockIdx.x, nb = gridDim.x, R = a.nranks;
  if (threadIdx.x == 0) {
    s_epoch = a.epochs[b] + 1;
    s_fail = 0;
  }
  __syncthreads();
  const uint32_t e = s_epoch;
  const uint64_t half = (e & 1u) ? a.slot_bytes : 0;
  // This block's share of the vectors; the tail (count % V) goes to the last block.
  const uint64_t nvec = a.count / V;
  const uint64_t per = (nvec + nb - 1) / nb;
  const uint64_t v0 = min(nvec, per * b), v1 = min(nvec, v0 + per);
  const bool tail = b == nb - 1 && (a.count % V) != 0;

  uint4 *mine = reinterpret_cast<uint4 *>(static_cast<char *>(a.staging[a.rank]) + half);
  const uint4 *in = static_cast<const uint4 *>(a.in);
  for (uint64_t i = v0 + threadIdx.x; i < v1; i += blockDim.x) mine[i] = in[i];
  if (tail && threadIdx.x < a.count % V) {
    uint64_t j = nvec * V + threadIdx.x;
    reinterpret_cast<T *>(mine)[j] = static_cast<const T *>(a.in)[j];
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence_system();
    for (int q = 0; q < R; q++) st_release(a.flags[q] + a.rank * TPG_AR_MAX_BLOCKS + b, e);
    const uint64_t deadline = now_ns() + a.timeout_ns;
    for (int q = 0; q < R && !s_fail; q++) {
      const uint32_t *f = a.flags[a.rank] + q * TPG_AR_MAX_BLOCKS + b;
      uint32_t spins = 0;
      while ((int32_t)(ld_acquire(f) - e) < 0) {
        if ((++spins & 1023u) == 0 && now_ns() > deadline) {
          s_fail = 1;
          break;
        }
      }
    }
    __threadfence_system();
  }
  __syncthreads();
  if (s_fail) {
    if (threadIdx.x == 0) {
      *a.status = 1u;  // host-mapped: the host reports a peer failure
      a.epochs[b] = e;
    }
    return;
  }
  // Peer reads cross NVLink (~1 us each way): issue U vectors from every peer
  // before using any, so a thread pays about one round trip per U vectors.
  T *out = static_cast<T *>(a.out);
  constexpr int U = 2;
  const uint64_t stride = blockDim.x;
  for (uint64_t i0 = v0 + threadIdx.x; i0 < v1; i0 += stride * U) {
    uint4 v[TPG_AR_MAX_RANKS][U];
#pragma unroll
    for (int q = 0; q < TPG_AR_MAX_RANKS; q++) {
      if (q >= R) break;
      const uint4 *src = reinterpret_cast<const uint4 *>(static_cast<const char *>(a.staging[q]) + half);
#pragma unroll
      for (int u = 0; u < U; u++) {
        uint64_t i = i0 + u * stride;
        if (i < v1) v[q][u] = __ldcg(src + i);
      }
    }
#pragma unroll
    for (int u = 0; u < U; u++) {
      uint64_t i = i0 + u * stride;
      if (i >= v1) break;
      float acc[V];
#pragma unroll
      for (int k = 0; k < V; k++) acc[k] = 0.f;
#pragma unroll
      for (int q = 0; q < TPG_AR_MAX_RANKS; q++) {
        if (q >= R) break;
        const T *t = reinterpret_cast<const T *>(&v[q][u]);
#pragma unroll
        for (int k = 0; k < V; k++) acc[k] += tf<T>(t[k]);
      }
      uint4 o;
      T *ot = reinterpret_cast<T *>(&o);
#pragma unroll
      for (int k = 0; k < V; k++) ot[k] = ft<T>(acc[k]);
      reinterpret_cast<uint4 *>(out)[i] = o;
    }
  }
  if (tail && threadIdx.x < a.count % V) {
    uint64_t j = nvec * V + threadIdx.x;
    float acc = 0.f;
    for (int q = 0; q < R; q++)
      acc += tf<T>(reinterpret_cast<const T *>(static_cast<const char *>(a.staging[q]) + half)[j]);
    out[j] = ft<T>(acc);
  }
  if (threadIdx.x == 0) a.epochs[b] = e;
}

// Push ("Lamport") variant: no flags. Every rank stores its data straight
// into its slot of every peer's receive buffer, which holds a sentinel
// (0x8000 halves: -0.0 in bf16/fp16) until written; each rank polls its own
// buffer until no element is the sentinel, sums, and writes the sentinel back
// so the buffer is ready again. One NVLink crossing instead of a flag round
// trip plus a pull. Inputs equal to the sentinel (-0.0) are sent as +0.0.
// Two receive buffers alternate by epoch: a peer can only write epoch e+2
// into the buffer this rank reads at epoch e after this rank sent its e+1
// data, i.e. after this kernel (and its clearing) finished.
template <typename T>
__device__ __forceinline__ uint4 unsentinel(uint4 v) {
  if (sizeof(T) == 2) {
    uint32_t *w = reinterpret_cast<uint32_t *>(&v);
#pragma unroll
    for (int k = 0; k < 4; k++) {
      if ((w[k] & 0xffffu) == 0x8000u) w[k] &= 0xffff0000u;
      if ((w[k] >> 16) == 0x8000u) w[k] &= 0x0000ffffu;
    }
  } else {
    uint32_t *w = reinterpret_cast<uint32_t *>(&v);
#pragma unroll
    for (int k = 0; k < 4; k++)
      if (w[k] == 0x80008000u) w[k] = 0;
  }
  return v;
}
template <typename T>
__device__ __forceinline__ bool arrived(uint4 v) {
  const uint32_t *w = reinterpret_cast<const uint32_t *>(&v);
  bool ok = true;
#pragma unroll
  for (int k = 0; k < 4; k++) {
    if (sizeof(T) == 2) ok &= (w[k] & 0xffffu) != 0x8000u && (w[k] >> 16) != 0x8000u;
    else ok &= w[k] != 0x80008000u;
  }
  return ok;
}
__device__ __forceinline__ uint4 ld_volatile(const uint4 *p) {
  uint4 v;
  asm volatile("ld.volatile.global.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  return v;
}

template <typename T>
__device__ void lamport(const tpg_allreduce_args &a) {
  constexpr int V = 16 / sizeof(T);
  __shared__ uint32_t s_epoch;
  const int b = blockIdx.x, nb = gridDim.x, R = a.nranks;
  if (threadIdx.x == 0) s_epoch = a.epochs[b] + 1;
  __syncthreads();
  const uint32_t e = s_epoch;
  const uint64_t buf = (e & 1u) ? a.slot_bytes : 0;  // which receive buffer
  const uint64_t per_rank = (a.slot_bytes / R) & ~15ull; // a rank's slot in it
  // Vectors of the (16-byte padded) message; the tail vector is padded with zeros.
  const uint64_t nvec = (a.count + V - 1) / V;
  const uint64_t per = (nvec + nb - 1) / nb;
  const uint64_t v0 = min(nvec, per * b), v1 = min(nvec, v0 + per);
  const uint64_t full = a.count / V;
  const uint4 *in = static_cast<const uint4 *>(a.in);
  for (uint64_t i = v0 + threadIdx.x; i < v1; i += blockDim.x) {
    uint4 v;
    if (i < full) v = in[i];
    else {  // the tail: copy the valid elements, zero the rest
      v = make_uint4(0, 0, 0, 0);
      T *t = reinterpret_cast<T *>(&v);
      const int rem = (int)(a.count - full * V);
#pragma unroll
      for (int k = 0; k < V; k++)
        if (k < rem) t[k] = static_cast<const T *>(a.in)[full * V + k];
    }
    v = unsentinel<T>(v);
    for (int q = 0; q < R; q++) {
      uint4 *dst = reinterpret_cast<uint4 *>(static_cast<char *>(a.staging[q]) + buf + a.rank * per_rank);
      __stcg(dst + i, v);
    }
  }
  uint4 *mine = reinterpret_cast<uint4 *>(static_cast<char *>(a.staging[a.rank]) + buf);
  T *out = static_cast<T *>(a.out);
  const uint64_t deadline = now_ns() + a.timeout_ns;
  bool failed = false;
  for (uint64_t i = v0 + threadIdx.x; i < v1 && !failed; i += blockDim.x) {
    float acc[V];
#pragma unroll
    for (int k = 0; k < V; k++) acc[k] = 0.f;
    for (int q = 0; q < R; q++) {
      const uint4 *src = mine + (q * per_rank) / 16 + i;
      uint4 v = ld_volatile(src);
      uint32_t spins = 0;
      while (!arrived<T>(v)) {
        if ((++spins & 1023u) == 0 && now_ns() > deadline) {
          failed = true;
          break;
        }
        v = ld_volatile(src);
      }
      const T *t = reinterpret_cast<const T *>(&v);
#pragma unroll
      for (int k = 0; k < V; k++) acc[k] += tf<T>(t[k]);
    }
    if (failed) break;
    if (i < full) {
      uint4 o;
      T *ot = reinterpret_cast<T *>(&o);
#pragma unroll
      for (int k = 0; k < V; k++) ot[k] = ft<T>(acc[k]);
      reinterpret_cast<uint4 *>(out)[i] = o;
    } else {
      const int rem = (int)(a.count - full * V);
#pragma unroll
      for (int k = 0; k < V; k++)
        if (k < rem) out[full * V + k] = ft<T>(acc[k]);
    }
    // Ready for the epoch after next: the sentinel back in every slot read.
    for (int q = 0; q < R; q++) mine[(q * per_rank) / 16 + i] = make_uint4(0x80008000u, 0x80008000u, 0x80008000u, 0x80008000u);
  }
  if (failed) *a.status = 1u;
  __syncthreads();
  if (threadIdx.x == 0) a.epochs[b] = e;
}

}  // namespace

extern "C" __global__ void __launch_bounds__(256) tpg_allreduce_lamport(const __grid_constant__ tpg_allreduce_args a) {
  switch (a.dtype) {
    case TPG_KDT_F32: lamport<float>(a); break;
    case TPG_KDT_F16: lamport<__half>(a); break;
    default: lamport<__nv_bfloat16>(a); break;
  }
}

extern "C" __global__ void __launch_bounds__(256) tpg_allreduce_oneshot(const __grid_constant__ tpg_allreduce_args a) {
  switch (a.dtype) {
    case TPG_KDT_F32: oneshot<float>(a); break;
    case TPG_KDT_F16: oneshot<__half>(a); break;
    default: oneshot<__nv_bfloat16>(a); break;
  }
}
