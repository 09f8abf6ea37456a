// allreduce.cu - our all-reduce kernels, each a single kernel node of our
// graph: one-shot pull (tpg_allreduce_oneshot), one-shot push
// (tpg_allreduce_lamport) and two-shot (tpg_allreduce_twoshot, further down).
// All three apply the fused epilogue of ar_epilogue.cuh where they write
// their result.
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
// - Every wait is bounded by a %globaltimer deadline (and ends early once the
//   comm's status word says a failure or an abort); on expiry the kernel
//   records the failure in host-mapped memory and exits, so a dead peer
//   becomes an error the host sees, not a hung GPU.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

#include "kernels/ar_epilogue.cuh"
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

// A wait ends at the deadline, or as soon as any kernel of this comm has
// failed or the host aborted the comm (the host-mapped status word): then a
// graph of many chained all-reduces whose peer died drains in microseconds
// per node instead of one deadline per node. Checked once every 1024 spins:
// a read over PCIe, off the fast path.
__device__ __forceinline__ bool give_up(uint64_t deadline, const uint32_t *status) {
  return now_ns() > deadline || *reinterpret_cast<const volatile uint32_t *>(status) != 0u;
}

template <typename T> __device__ __forceinline__ float tf(T v) { return tpg::dt<T>::to_f(v); }
template <typename T> __device__ __forceinline__ T ft(float v) { return tpg::dt<T>::from_f(v); }

// Vector i of the input; the partial last vector (i == full) holds its valid
// elements and zeros after them. Every kernel reads its input this way.
template <typename T>
__device__ __forceinline__ uint4 load_in(const tpg_allreduce_args &a, uint64_t i, uint64_t full) {
  constexpr int V = 16 / sizeof(T);
  if (i < full) return static_cast<const uint4 *>(a.in)[i];
  uint4 v = make_uint4(0, 0, 0, 0);  // the partial last vector: valid elements, zeros after
  T *t = reinterpret_cast<T *>(&v);
  const int rem = (int)(a.count - full * V);
#pragma unroll
  for (int k = 0; k < V; k++)
    if (k < rem) t[k] = static_cast<const T *>(a.in)[full * V + k];
  return v;
}

// Vector i of the result from its fp32 sums: through the epilogue, or for the
// partial last vector (no epilogue is possible then) its valid elements only.
template <typename T>
__device__ __forceinline__ void store_acc(const tpg_allreduce_args &a, T *out, uint64_t i, uint64_t full,
                                          const float (&acc)[16 / sizeof(T)]) {
  constexpr int V = 16 / sizeof(T);
  if (i < full) {
    tpg::epi_store<T>(a.epi, out, i, acc);
  } else {
    const int rem = (int)(a.count - full * V);
#pragma unroll
    for (int k = 0; k < V; k++)
      if (k < rem) out[full * V + k] = ft<T>(acc[k]);
  }
}

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
  // This block's share of the vectors (whole rows when a norm follows); the
  // tail (count % V, never with an epilogue) goes to the last block.
  const uint64_t nvec = a.count / V;
  uint64_t v0, v1;
  tpg::block_range<T>(a.count, a.epi, b, nb, nvec, v0, v1);
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
        if ((++spins & 1023u) == 0 && give_up(deadline, a.status)) {
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
      tpg::epi_store<T>(a.epi, out, i, acc);
    }
  }
  if (tail && threadIdx.x < a.count % V) {
    uint64_t j = nvec * V + threadIdx.x;
    float acc = 0.f;
    for (int q = 0; q < R; q++)
      acc += tf<T>(reinterpret_cast<const T *>(static_cast<const char *>(a.staging[q]) + half)[j]);
    out[j] = ft<T>(acc);
  }
  if (tpg::epi_norm(a.epi)) {
    __syncthreads();  // every h of this block's rows is stored
    const uint64_t vpr = a.epi.hidden / V;
    tpg::epi_norm_rows<T>(a.epi, out, v0 / vpr, v1 / vpr);
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

// Polls p, starting from the value v already read there, until every
// half/word is data, and returns it; sets failed at the deadline. By value:
// taking an element of a per-thread array by reference put the array in
// local memory (push kernel: a 272-byte stack frame, +0.8 us at 16 KiB).
// NS > 0: sleep NS ns between polls (fewer loads competing with the
// arriving data).
template <typename T, int NS = 0>
__device__ __forceinline__ uint4 wait_arrived(const uint4 *p, uint4 v, uint64_t deadline, const uint32_t *status,
                                              bool &failed) {
  uint32_t spins = 0;
  while (!arrived<T>(v)) {
    if ((++spins & 1023u) == 0 && give_up(deadline, status)) {
      failed = true;
      break;
    }
    if (NS > 0) __nanosleep(NS);
    v = ld_volatile(p);
  }
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
  uint64_t v0, v1;
  tpg::block_range<T>(a.count, a.epi, b, nb, nvec, v0, v1);
  const uint64_t full = a.count / V;
  // A thread's vectors are read U at a time, all loads issued before any
  // store: with a norm one block owns a whole row (8192 bf16 at batch 1 = 4
  // vectors per thread), and a load-then-store loop would pay a memory round
  // trip per vector.
  const uint64_t bd = blockDim.x;
  constexpr int U = 4;
  for (uint64_t i0 = v0 + threadIdx.x; i0 < v1; i0 += bd * U) {
    uint4 vv[U];
#pragma unroll
    for (int u = 0; u < U; u++) {
      const uint64_t i = i0 + u * bd;
      if (i >= v1) break;
      vv[u] = load_in<T>(a, i, full);
    }
#pragma unroll
    for (int u = 0; u < U; u++) {
      const uint64_t i = i0 + u * bd;
      if (i >= v1) break;
      const uint4 v = unsentinel<T>(vv[u]);
      for (int q = 0; q < R; q++) {
        uint4 *dst = reinterpret_cast<uint4 *>(static_cast<char *>(a.staging[q]) + buf + a.rank * per_rank);
        __stcg(dst + i, v);
      }
    }
  }
  uint4 *mine = reinterpret_cast<uint4 *>(static_cast<char *>(a.staging[a.rank]) + buf);
  T *out = static_cast<T *>(a.out);
  const uint64_t deadline = now_ns() + a.timeout_ns;
  bool failed = false;
  // The first read of every slot of UP vectors is issued before waiting on
  // any of them (same reason); a slot still holding the sentinel is re-read
  // until it arrives, as before.
  constexpr int UP = 2;
  for (uint64_t i0 = v0 + threadIdx.x; i0 < v1 && !failed; i0 += bd * UP) {
    uint4 pv[UP][TPG_AR_MAX_RANKS];
#pragma unroll
    for (int u = 0; u < UP; u++) {
      const uint64_t i = i0 + u * bd;
      if (i >= v1) break;
#pragma unroll
      for (int q = 0; q < TPG_AR_MAX_RANKS; q++) {
        if (q >= R) break;
        pv[u][q] = ld_volatile(mine + (q * per_rank) / 16 + i);
      }
    }
#pragma unroll
    for (int u = 0; u < UP; u++) {
      const uint64_t i = i0 + u * bd;
      if (i >= v1) break;
      float acc[V];
#pragma unroll
      for (int k = 0; k < V; k++) acc[k] = 0.f;
#pragma unroll
      for (int q = 0; q < TPG_AR_MAX_RANKS; q++) {
        if (q >= R) break;
        const uint4 *src = mine + (q * per_rank) / 16 + i;
        uint4 v = pv[u][q];
        uint32_t spins = 0;
        while (!arrived<T>(v)) {
          if ((++spins & 1023u) == 0 && give_up(deadline, a.status)) {
            failed = true;
            break;
          }
          v = ld_volatile(src);
        }
        if (failed) break;
        const T *t = reinterpret_cast<const T *>(&v);
#pragma unroll
        for (int k = 0; k < V; k++) acc[k] += tf<T>(t[k]);
      }
      if (failed) break;
      store_acc<T>(a, out, i, full, acc);
      // Ready for the epoch after next: the sentinel back in every slot read.
      for (int q = 0; q < R; q++) mine[(q * per_rank) / 16 + i] = make_uint4(0x80008000u, 0x80008000u, 0x80008000u, 0x80008000u);
    }
  }
  if (failed) *a.status = 1u;
  const bool any_failed = __syncthreads_or(failed);
  if (!any_failed && tpg::epi_norm(a.epi)) {
    const uint64_t vpr = a.epi.hidden / V;
    tpg::epi_norm_rows<T>(a.epi, out, v0 / vpr, v1 / vpr);
  }
  if (threadIdx.x == 0) a.epochs[b] = e;
}

// Push one-shot, second form (tpg_allreduce_push): the same data-as-flag
// protocol as lamport() above, with these changes, which matter once a
// message is large enough to be bandwidth-bound (TP 2 moves the same bytes
// one-shot as two-shot, in one NVLink crossing instead of two):
// - a rank's own contribution is read from `in`, never copied into its own
//   receive slot and polled back: the local copy, its poll and its sentinel
//   reset were a third of the kernel's L2 traffic;
// - every store of a round is issued before any poll, so the peers' data is
//   in flight while a thread waits for the first of it; the first loads go
//   out before the epoch is read (they do not depend on it);
// - own data is sentinel-filtered like the peers' (-0.0 -> +0.0) and every
//   rank sums in rank order, so all ranks produce the same bits;
// - any size, in rounds. Each receive half holds R-1 slots (one per peer:
//   rank s's data lands at rank q in slot (s - q - 1) mod R), and block b
//   owns the window [b*S, (b+1)*S) of every slot, S = slot / grid. A block's
//   range goes in rounds of S vectors; every block runs the same number of
//   rounds (that of the longest range), so all per-block epochs stay equal.
//
// Why a half is never overwritten while a peer still reads it: round r of
// block b (epoch e) writes half e&1 of the peer's window b, last read by the
// peer's block b at epoch e-2. This block sends epoch e only after it has
// received the peer's epoch e-1 data (the previous round, or the previous
// kernel, which ended only once all of it arrived), and the peer's block b
// sent that only after all its threads had read and reset epoch e-2 (a
// __threadfence and a block barrier between rounds; a kernel boundary
// between kernels). Windows are per block in every kernel, so only the
// same block index on the peer ever shares positions with this block.

// Bulk (TMA) stores from shared memory into a peer's memory: one thread
// hands the copy engine a whole chunk, the block's other warps go on to
// poll. Push with its send phase as bulk stores beats each thread storing
// its vectors (st.global to the peer) at 2 MiB, though a bare bulk copy to
// the peer is slower than bare st: what wins is that no warp stalls issuing
// remote stores while data arrives (figures: docs/kernels.md, "Push in
// rounds"; ar_lab in docs/performance.md, "Which kernel serves which size").
// sm_90+ only (the sm_80 image has no bulk copies: no-ops there, unused).
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define TPG_BULK_ASM(...) asm volatile(__VA_ARGS__)
#else
#define TPG_BULK_ASM(...) ((void)0)
#endif
__device__ __forceinline__ void bulk_store(void *dst, const void *src_smem, uint32_t bytes) {
  TPG_BULK_ASM("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" ::"l"(dst),
               "r"(static_cast<uint32_t>(__cvta_generic_to_shared(src_smem))), "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void bulk_commit() { TPG_BULK_ASM("cp.async.bulk.commit_group;" ::: "memory"); }
// Until at most N committed groups still read their shared source.
template <int N> __device__ __forceinline__ void bulk_wait_read() {
  TPG_BULK_ASM("cp.async.bulk.wait_group.read %0;" ::"n"(N) : "memory");
}
// Until every committed group has completed (its writes performed).
__device__ __forceinline__ void bulk_wait_all() { TPG_BULK_ASM("cp.async.bulk.wait_group 0;" ::: "memory"); }
// Generic-proxy writes to shared memory before the bulk copies that read them.
__device__ __forceinline__ void fence_async_shared() { TPG_BULK_ASM("fence.proxy.async.shared::cta;" ::: "memory"); }
// Generic-proxy writes to global memory (the sentinel resets) before later
// bulk stores of this thread's block (the data that lets a peer write there).
__device__ __forceinline__ void fence_async_global() { TPG_BULK_ASM("fence.proxy.async.global;" ::: "memory"); }

// MR: the rank count rounded up to 2, 4 or 8. Per-thread arrays are sized by
// it; sized for 8 at every R they took registers enough to spill.
// CH x NB: the shared chunk buffers of the send phase (vectors, buffers),
// sm: the kernel's one such array (declared there: a __shared__ array here
// would be one per dtype and rank-count instance, 9 x the memory).
// OWN_SM: phase 2 takes this rank's own vectors from the chunk buffers
// (still there when the round fits in them) instead of reading `in` again.
// Which of a rank's R-1 receive slots serves a peer: x mod R, x in [1, 2R).
// At 2 ranks there is one slot: no integer division per vector.
template <int MR> __device__ __forceinline__ int peer_slot(int x, int R) { return MR == 2 ? 0 : x % R; }

// WAIT_ALL: end by waiting for the bulk stores to complete, not only to
// have read shared memory (ar_lab's A/B; a completion wait would also hang
// on a peer whose memory is gone).
template <typename T, int MR, int CH, int NB, bool OWN_SM = false, bool WAIT_ALL = false>
__device__ void push1(const tpg_allreduce_args &a, uint4 (*sm)[CH]) {
  constexpr int V = 16 / sizeof(T);
  constexpr int UP = MR <= 2 ? 2 : 1;  // vectors a thread polls at once (registers: UP x MR vectors)
  const uint4 SENT = make_uint4(0x80008000u, 0x80008000u, 0x80008000u, 0x80008000u);
  __shared__ uint32_t s_epoch, s_dead;
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
  // The last epoch counter, past every block of the grid, is the comm's
  // "an earlier push failed" word in device memory: read beside the epoch
  // (no extra latency), it lets every later push end at once, sending
  // nothing and polling nothing, where reading the host-mapped status word
  // would cost a PCIe round trip per launch. fault_test --during (a peer
  // killed in a chain of 4000 1 MiB all-reduces) took 11.6 s to error out
  // without it, over its 9 s bound: each later launch still sent its bulk
  // copies towards the dead peer and polled until the status check.
  uint32_t *dead = nb < TPG_AR_EPOCHS ? a.epochs + (TPG_AR_EPOCHS - 1) : nullptr;
  if (threadIdx.x == 0) {
    s_epoch = a.epochs[b] + 1;
    s_dead = dead ? *dead : 0u;
  }
  __syncthreads();
  if (s_dead) return;  // the status word is already set (it is sticky)
  const uint32_t e0 = s_epoch;
  uint64_t deadline = 0;
  bool failed = false;
  uint32_t k = 0;  // chunks sent so far (chunk k uses buffer k % NB)
  (void)k;
  for (uint32_t r = 0; r < rounds; r++) {
    const uint32_t e = e0 + r;
    const uint64_t half = ((e & 1u) ? a.slot_bytes : 0) / 16;  // in vectors
    const uint64_t r0 = v0 + (uint64_t)r * S, r1 = min(v1, r0 + S);  // this round's vectors
    const uint32_t k0 = k;  // the round's first chunk
    (void)k0;
    if (r > 0) {
      // The resets of the last round are done (fences: at this GPU's L2,
      // and ordered before the bulk stores that let the peer write into
      // that half again).
      __threadfence();
      fence_async_global();
      if (__syncthreads_or(failed)) break;
    }
    // Phase 1: this round's vectors, sentinel-filtered, through shared
    // memory in chunks to every peer's slot for this rank (below sm_90,
    // which has no bulk copies: each thread stores its vectors itself).
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
    for (uint64_t i = r0 + threadIdx.x; i < r1; i += bd) {
      const uint4 v = unsentinel<T>(load_in<T>(a, i, full));
      for (int q = 0; q < MR; q++)
        if (q < R && q != me)
          __stcg(static_cast<uint4 *>(a.staging[q]) + half + peer_slot<MR>(me - q - 1 + R, R) * slotv + b * S + (i - r0), v);
    }
#else
    for (uint64_t c = r0; c < r1; c += CH, k++) {
      const int buf = k % NB;
      if (k >= NB) {  // the buffer's previous bulk stores have read it
        if (threadIdx.x == 0) bulk_wait_read<NB - 1>();
        __syncthreads();
      }
      const uint64_t m = min((uint64_t)CH, r1 - c);
      for (uint64_t t = threadIdx.x; t < m; t += bd) sm[buf][t] = unsentinel<T>(load_in<T>(a, c + t, full));
      fence_async_shared();
      __syncthreads();
      if (threadIdx.x == 0) {
        for (int q = 0; q < MR; q++)
          if (q < R && q != me)
            bulk_store(static_cast<uint4 *>(a.staging[q]) + half + peer_slot<MR>(me - q - 1 + R, R) * slotv + b * S + (c - r0),
                       sm[buf], (uint32_t)(m * 16));
        bulk_commit();
      }
    }
#endif
    // Phase 2: own data from `in` (or the chunk buffers), the peers' from
    // this rank's window.
    if (r == 0) deadline = now_ns() + a.timeout_ns;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    const bool own_sm = OWN_SM && r1 - r0 <= (uint64_t)CH * NB;
#else
    const bool own_sm = false;
#endif
    // Own and peers' vectors in separate arrays, every index a compile-time
    // constant: choosing between them by rank at run time (q == me) cost
    // ~0.4 us at 2 MiB against this form in ar_lab (10.68 vs 10.24 us).
    for (uint64_t j0 = r0 + threadIdx.x; j0 < r1 && !failed; j0 += bd * UP) {
      uint4 own[UP], pv[UP][MR - 1];  // pv[u][j]: slot j, peer (me + 1 + j) mod R
#pragma unroll
      for (int u = 0; u < UP; u++) {
        const uint64_t i = j0 + u * bd;
        if (i >= r1) break;
        own[u] = own_sm ? sm[(k0 + (i - r0) / CH) % NB][(i - r0) % CH] : unsentinel<T>(load_in<T>(a, i, full));
#pragma unroll
        for (int j = 0; j < MR - 1; j++)
          if (j < R - 1) pv[u][j] = ld_volatile(mine + half + j * slotv + (i - r0));
      }
#pragma unroll
      for (int u = 0; u < UP; u++) {
        const uint64_t i = j0 + u * bd;
        if (i >= r1 || failed) break;
#pragma unroll
        for (int j = 0; j < MR - 1; j++) {
          if (j >= R - 1) break;
          pv[u][j] = wait_arrived<T>(mine + half + j * slotv + (i - r0), pv[u][j], deadline, a.status, failed);
          if (failed) break;
        }
        if (failed) break;
        // Summed in rank order on every rank (the same bits everywhere):
        // peers below me sit in slots R-1-me .. R-2, those above in 0 .. R-2-me.
        float acc[V];
#pragma unroll
        for (int kk = 0; kk < V; kk++) acc[kk] = 0.f;
#pragma unroll
        for (int j = 0; j < MR - 1; j++)
          if (j < R - 1 && j >= R - 1 - me) {
            const T *t = reinterpret_cast<const T *>(&pv[u][j]);
#pragma unroll
            for (int kk = 0; kk < V; kk++) acc[kk] += tf<T>(t[kk]);
          }
        {
          const T *t = reinterpret_cast<const T *>(&own[u]);
#pragma unroll
          for (int kk = 0; kk < V; kk++) acc[kk] += tf<T>(t[kk]);
        }
#pragma unroll
        for (int j = 0; j < MR - 1; j++)
          if (j < R - 1 - me) {
            const T *t = reinterpret_cast<const T *>(&pv[u][j]);
#pragma unroll
            for (int kk = 0; kk < V; kk++) acc[kk] += tf<T>(t[kk]);
          }
        store_acc<T>(a, out, i, full, acc);
#pragma unroll
        for (int j = 0; j < MR - 1; j++)
          if (j < R - 1) mine[half + j * slotv + (i - r0)] = SENT;  // ready for epoch e+2
      }
    }
  }
  // Shared memory must outlive the copies that read it. Their writes need
  // no wait: the peer polls for them, and the grid's completion performs
  // them like any store.
  if (threadIdx.x == 0) {
    if (WAIT_ALL) bulk_wait_all();
    else bulk_wait_read<0>();
  }
  if (failed) {
    *a.status = 1u;
    if (dead) *dead = 1u;
  }
  const bool any_failed = __syncthreads_or(failed);
  if (!any_failed && tpg::epi_norm(a.epi)) {
    const uint64_t vpr = a.epi.hidden / V;
    tpg::epi_norm_rows<T>(a.epi, out, v0 / vpr, v1 / vpr);
  }
  if (threadIdx.x == 0) a.epochs[b] = e0 + rounds - 1;
}

// Two-shot: reduce-scatter then all-gather, both by remote stores, for
// messages where one-shot moves too much (push: R copies of the message into
// every peer; pull: every peer's whole staging read over NVLink with few
// loads in flight). Rank q owns piece q of every block's range.
// A (scatter): rank r stores piece q of its input straight into rank q's
//    scatter area, slot r (its own piece into its own slot).
// B (reduce):  rank q polls its scatter area (local memory) until all R
//    slots hold data, sums in fp32, writes the sentinel back, rounds, stores
//    the result into its own out and into every peer's gather area, slot q.
// C (gather):  rank r polls its gather area until every peer's piece is
//    there, copies it to out, writes the sentinel back.
// Data is its own flag in both phases (sentinel halves, as in the push
// kernel): two NVLink crossings, no flag round trips, and each rank sends
// 2(R-1)/R of the message instead of R-1 copies of it.
//
// Why it is safe under replay with no barrier:
// - Both areas alternate by epoch parity. Rank r writes epoch e into q's
//   scatter half last read (and reset) by q at epoch e-2. r starts epoch e
//   only after its kernel for e-1 finished, which waited for q's gather data
//   of e-1, which q sent from its kernel for e-1, which started after its
//   kernel for e-2 (reads and resets included) had finished. The gather area
//   holds by the same chain one phase later (q's phase B of epoch e follows
//   r's scatter of e, so r has finished e-1 and e-2).
// - The chain needs every pair of ranks to exchange at least one vector per
//   epoch: each block splits its range into R pieces of cpb = ceil(n / R)
//   vectors, padded with zeros, so block 0 always sends a piece to and
//   receives one from every peer, even for a single element.
// - Pieces are addressed per block: block b's pieces sit at [v0/R + b,
//   v0/R + b + cpb) of every slot, which never overlaps another block's
//   (floor(v1/R) - floor(v0/R) + 1 >= ceil((v1-v0)/R)), so a slot of
//   floor(nvec/R) + 64 vectors serves any split; the host checks that.
// - The epoch counters are per block index and every launch runs all 64
//   blocks (see materialize.c), as for the one-shot kernels.
template <typename T>
__device__ __forceinline__ uint4 load_piece(const tpg_allreduce_args &a, uint64_t gi, uint64_t v1, uint64_t full) {
  return gi >= v1 ? make_uint4(0, 0, 0, 0) : load_in<T>(a, gi, full);  // padding past v1
}

// Writes vector gi of the result (the rounded sum r) through the epilogue.
template <typename T>
__device__ __forceinline__ void store_result(const tpg_allreduce_args &a, uint64_t gi, uint64_t full, uint4 r) {
  constexpr int V = 16 / sizeof(T);
  const T *t = reinterpret_cast<const T *>(&r);
  if (gi < full) {
    float acc[V];
#pragma unroll
    for (int k = 0; k < V; k++) acc[k] = tf<T>(t[k]);
    tpg::epi_store<T>(a.epi, a.out, gi, acc);
  } else {  // partial last vector (no epilogue is possible then)
    const int rem = (int)(a.count - full * V);
#pragma unroll  // a run-time bound would index t[] dynamically: local memory
    for (int k = 0; k < V; k++)
      if (k < rem) static_cast<T *>(a.out)[full * V + k] = t[k];
  }
}

template <typename T>
__device__ void twoshot(const tpg_allreduce_args &a) {
  constexpr int V = 16 / sizeof(T);
  constexpr int MR = TPG_AR_MAX_RANKS;
  const uint4 SENT = make_uint4(0x80008000u, 0x80008000u, 0x80008000u, 0x80008000u);
  __shared__ uint32_t s_epoch;
  const int b = blockIdx.x, nb = gridDim.x, R = a.nranks, me = a.rank;
  if (threadIdx.x == 0) s_epoch = a.epochs[b] + 1;
  __syncthreads();
  const uint32_t e = s_epoch;
  const uint64_t half = ((e & 1u) ? a.slot_bytes : 0) / 16;      // in vectors
  const uint64_t slotv = ((a.slot_bytes / R) & ~15ull) / 16;     // vectors per source rank
  const uint64_t nvec = (a.count + V - 1) / V, full = a.count / V;
  uint64_t v0, v1;
  tpg::block_range<T>(a.count, a.epi, b, nb, nvec, v0, v1);
  const uint64_t cpb = (v1 - v0 + R - 1) / R;  // piece length; 0 for an empty block
  const uint64_t base = v0 / R + b;            // this block's pieces in every slot

  // A: scatter. All R loads of a thread are in flight before its stores.
  for (uint64_t j = threadIdx.x; j < cpb; j += blockDim.x) {
    uint4 v[MR];
#pragma unroll
    for (int p = 0; p < MR; p++)
      if (p < R) v[p] = load_piece<T>(a, v0 + p * cpb + j, v1, full);
#pragma unroll
    for (int p = 0; p < MR; p++)
      if (p < R) __stcg(static_cast<uint4 *>(a.staging[p]) + half + me * slotv + base + j, unsentinel<T>(v[p]));
  }

  // B: reduce piece `me` from local memory, hand it to every rank.
  uint4 *scat = static_cast<uint4 *>(a.staging[me]) + half + base;
  uint4 *gath = static_cast<uint4 *>(a.gather[me]) + half + base;
  const uint64_t deadline = now_ns() + a.timeout_ns;
  bool failed = false;
  for (uint64_t j = threadIdx.x; j < cpb && !failed; j += blockDim.x) {
    uint4 v[MR];
#pragma unroll
    for (int p = 0; p < MR; p++)
      if (p < R) v[p] = ld_volatile(scat + p * slotv + j);
    float acc[V];
#pragma unroll
    for (int k = 0; k < V; k++) acc[k] = 0.f;
#pragma unroll
    for (int p = 0; p < MR; p++) {
      if (p >= R || failed) continue;
      const uint4 w = wait_arrived<T>(scat + p * slotv + j, v[p], deadline, a.status, failed);
      if (failed) continue;
      const T *t = reinterpret_cast<const T *>(&w);
#pragma unroll
      for (int k = 0; k < V; k++) acc[k] += tf<T>(t[k]);
    }
    if (failed) break;
#pragma unroll
    for (int p = 0; p < MR; p++)
      if (p < R) scat[p * slotv + j] = SENT;  // ready for epoch e+2
    uint4 r;
    T *rt = reinterpret_cast<T *>(&r);
#pragma unroll
    for (int k = 0; k < V; k++) rt[k] = ft<T>(acc[k]);
    r = unsentinel<T>(r);  // a sum can round to -0.0, the sentinel
#pragma unroll
    for (int p = 0; p < MR; p++)
      if (p < R && p != me) __stcg(static_cast<uint4 *>(a.gather[p]) + half + me * slotv + base + j, r);
    const uint64_t gi = v0 + me * cpb + j;
    if (gi < v1) store_result<T>(a, gi, full, r);  // every rank applies the epilogue to the same rounded sum
  }

  // C: gather the other ranks' reduced pieces.
  for (uint64_t j = threadIdx.x; j < cpb && !failed; j += blockDim.x) {
    uint4 v[MR];
#pragma unroll
    for (int p = 0; p < MR; p++)
      if (p < R && p != me) v[p] = ld_volatile(gath + p * slotv + j);
#pragma unroll
    for (int p = 0; p < MR; p++) {
      if (p >= R || p == me || failed) continue;
      const uint4 w = wait_arrived<T>(gath + p * slotv + j, v[p], deadline, a.status, failed);
      if (failed) continue;
      gath[p * slotv + j] = SENT;
      const uint64_t gi = v0 + p * cpb + j;
      if (gi < v1) store_result<T>(a, gi, full, w);
    }
  }
  if (failed) *a.status = 1u;
  const bool any_failed = __syncthreads_or(failed);
  if (!any_failed && tpg::epi_norm(a.epi)) {
    const uint64_t vpr = a.epi.hidden / V;
    tpg::epi_norm_rows<T>(a.epi, a.out, v0 / vpr, v1 / vpr);
  }
  if (threadIdx.x == 0) a.epochs[b] = e;
}

}  // namespace

// Programmatic dependent launch (TPG_GRAPH_PDL): these kernels are never the
// secondary of a programmatic edge (the host makes only their outgoing edges
// programmatic): they write peer-visible staging and flags whose epoch
// protocol assumes the previous node finished, and they work in place
// (in == out), so an early start would need a griddepcontrol.wait before
// the first staging store anyway and would win nothing. As primaries they
// let their dependents (the next layer's GEMV) launch at once: every block
// triggers first thing, so the GEMV's CTAs are resident and pull their
// first weights into L2 while we wait on the peers' flags over NVLink. The
// trigger orders no memory: the GEMV still waits for our completion and
// flush (griddepcontrol.wait) before it reads `out`. No deadlock: a
// trigger fires only when all our blocks are running, so the GEMV's spinning
// CTAs never keep one of ours (or, by the same argument on the peer, a
// peer's) from being scheduled.
extern "C" __global__ void __launch_bounds__(256) tpg_allreduce_lamport(const __grid_constant__ tpg_allreduce_args a) {
  tpg::pdl_wait();  // a programmatic secondary: the previous node has completed past here
  tpg::pdl_launch_dependents();
  switch (a.dtype) {
    case TPG_KDT_F32: lamport<float>(a); break;
    case TPG_KDT_F16: lamport<__half>(a); break;
    default: lamport<__nv_bfloat16>(a); break;
  }
}

extern "C" __global__ void __launch_bounds__(256) tpg_allreduce_oneshot(const __grid_constant__ tpg_allreduce_args a) {
  tpg::pdl_wait();  // a programmatic secondary: the previous node has completed past here
  tpg::pdl_launch_dependents();
  switch (a.dtype) {
    case TPG_KDT_F32: oneshot<float>(a); break;
    case TPG_KDT_F16: oneshot<__half>(a); break;
    default: oneshot<__nv_bfloat16>(a); break;
  }
}

extern "C" __global__ void __launch_bounds__(512) tpg_allreduce_twoshot(const __grid_constant__ tpg_allreduce_args a) {
  tpg::pdl_wait();  // a programmatic secondary: the previous node has completed past here
  tpg::pdl_launch_dependents();
  switch (a.dtype) {
    case TPG_KDT_F32: twoshot<float>(a); break;
    case TPG_KDT_F16: twoshot<__half>(a); break;
    default: twoshot<__nv_bfloat16>(a); break;
  }
}

template <int MR, int CH, int NB, bool OWN_SM, bool WAIT_ALL>
__device__ __forceinline__ void push_by_dtype(const tpg_allreduce_args &a, uint4 (*sm)[CH]) {
  switch (a.dtype) {
    case TPG_KDT_F32: push1<float, MR, CH, NB, OWN_SM, WAIT_ALL>(a, sm); break;
    case TPG_KDT_F16: push1<__half, MR, CH, NB, OWN_SM, WAIT_ALL>(a, sm); break;
    default: push1<__nv_bfloat16, MR, CH, NB, OWN_SM, WAIT_ALL>(a, sm); break;
  }
}
template <int CH, int NB, bool OWN_SM = false, bool WAIT_ALL = false>
__device__ __forceinline__ void push_by_ranks(const tpg_allreduce_args &a) {
  __shared__ __align__(128) uint4 sm[NB][CH];
  if (a.nranks <= 2) push_by_dtype<2, CH, NB, OWN_SM, WAIT_ALL>(a, sm);
  else if (a.nranks <= 4) push_by_dtype<4, CH, NB, OWN_SM, WAIT_ALL>(a, sm);
  else push_by_dtype<TPG_AR_MAX_RANKS, CH, NB, OWN_SM, WAIT_ALL>(a, sm);
}
// Chunks of 256 vectors (4 KiB, one per thread of a 256-thread block), 4
// buffers: at 2 MiB on 264 blocks a block's ~8 KiB leaves in two bulk
// copies (ar_lab: 256 x 4 ahead of 1024 x 2).
extern "C" __global__ void __launch_bounds__(512) tpg_allreduce_push(const __grid_constant__ tpg_allreduce_args a) {
  tpg::pdl_wait();  // a programmatic secondary: the previous node has completed past here
  tpg::pdl_launch_dependents();
  push_by_ranks<256, 4>(a);
}
