/* cutlass_params.cu - host code: CUTLASS's own Arguments -> Params for the
 * kernels of kernels/gemm/sm90_cutlass_list.h, behind the C API of
 * cutlass.h.
 *
 * Why nvcc compiles this host code: CUTLASS's headers are written for it
 * (device builtins in inline functions, version checks on
 * __CUDACC_VER_MAJOR__), and Params must have the layout the device code
 * (nvcc, sm90_cutlass*.cu) reads. Three things keep the library what it is
 * (C11, no CUDA runtime, no libstdc++), each checked by the build rule
 * (tools/cuda/defs.bzl cuda_host_object: nm on the object):
 *  - nvcc registers every translation unit's (here empty) device image with
 *    the CUDA runtime at load time; the rule renames those __cuda* calls to
 *    the no-ops in cutlass_rt_stubs.c.
 *  - CUTLASS encodes TMA descriptors with cuTensorMapEncodeTiled, which we
 *    route (a macro, before cuda.h) to tpg_cutlass_encode_tiled below and
 *    from there to the caller's encoder (CUTLASS_ENABLE_DIRECT_CUDA_DRIVER_CALL
 *    keeps it from looking the driver up through the runtime).
 *  - CUTLASS prints a failed encode to std::cerr (and a few host helpers
 *    to std::cout). <iostream> is kept out (its include guard, below) and
 *    both are sinks here, so nothing of libstdc++ is referenced; the
 *    failure is reported by tpg_cutlass_fill instead (the encoder's first
 *    error).
 * Exceptions: CUTLASS throws only from switches over enum values it
 * computes itself; -fno-exceptions would reject the throw expressions, and
 * the rule fails if __cxa_throw is ever referenced.
 */
#define cuTensorMapEncodeTiled tpg_cutlass_encode_tiled
#include <cuda.h>
#include <new>
#include <ostream>
#include <string.h>
#include <type_traits>

/* <iostream> out, and a std::cerr that discards (see the top comment). */
#define _GLIBCXX_IOSTREAM 1
namespace std {
struct tpg_null_ostream {
  template <class T>
  tpg_null_ostream &operator<<(const T &) { return *this; }
  tpg_null_ostream &operator<<(std::ostream &(*)(std::ostream &)) { return *this; }
};
static tpg_null_ostream cerr, cout;
}  // namespace std

#define TPG_CUTLASS_HOST 1
#include "kernels/gemm/sm90_cutlass.cuh"
#include "lib/gemm/cutlass.h"

namespace {

/* The encoder of the tpg_cutlass_fill running on this thread (NULL: a
 * launch-shape query, whose descriptors are never used). */
struct encode_state {
  tpg_cutlass_encode_fn fn;
  void *ctx;
  CUresult first;
  int n; /* descriptors encoded */
};

}  // namespace

/* static, not in the anonymous namespace: nvcc gives that namespace an
 * external name, and a hidden global TLS symbol stays behind in the shared
 * library's dynamic symbol table (LOCAL, but cmake_ci's export check counts
 * every defined dynamic symbol) */
static __thread encode_state *g_encode;

namespace {

int reject(char *why, size_t whylen, const char *msg) {
  if (why && whylen) {
    strncpy(why, msg, whylen - 1);
    why[whylen - 1] = '\0';
  }
  return 1;
}

/* What one launch needs besides Params. */
struct shape {
  unsigned grid[3], block, smem;
  size_t workspace;   /* CUTLASS's own bytes (after TPG_CUTLASS_WS_HEAD) */
  size_t lock_off;    /* from the start of CUTLASS's workspace          */
  size_t lock_bytes;  /* 0: no reduction, nothing to leave zero          */
  size_t params_bytes;
  int nmaps;          /* the TMA descriptors in Params, at these offsets  */
  size_t map_off[TPG_CUTLASS_MAPS_MAX];
};

template <class T>
T *cv(const void *p) {
  return const_cast<T *>(static_cast<const T *>(p));
}

/* CUTLASS's Arguments for p and the pointers in q. */
template <int TM, int TN, int CM, int CN, int SCHED, int SWAP>
typename tpg_cutlass::gemm<TM, TN, CM, CN, SCHED, SWAP>::Kernel::Arguments arguments(const tpg_cutlass_problem *p,
                                                                                    const tpg_gemm_args &q) {
  using K = typename tpg_cutlass::gemm<TM, TN, CM, CN, SCHED, SWAP>::Kernel;
  using bf16 = tpg_cutlass::bf16;
  typename K::Arguments args{};
  const bool residual = p->epilogue == TPG_EPI_RESIDUAL;
  args.mode = cutlass::gemm::GemmUniversalMode::kGemm;
  /* swapped: CUTLASS's M is W's rows, its N the tokens */
  args.problem_shape = {SWAP ? p->n : p->m, SWAP ? p->m : p->n, p->k, 1};
  args.mainloop.ptr_A = static_cast<const bf16 *>(SWAP ? q.w : q.x);
  args.mainloop.dA = typename K::StrideA{int64_t(SWAP ? p->ldw : p->ldx), cute::_1{}, int64_t(0)};
  args.mainloop.ptr_B = static_cast<const bf16 *>(SWAP ? q.x : q.w);
  args.mainloop.dB = typename K::StrideB{int64_t(SWAP ? p->ldx : p->ldw), cute::_1{}, int64_t(0)};
  /* C is read only with beta = 1 (the residual); otherwise it names y, so
   * its descriptor is a valid one that is never used */
  args.epilogue.ptr_C = static_cast<const bf16 *>(residual ? q.residual : q.y);
  args.epilogue.ptr_D = static_cast<bf16 *>(q.y);
  const int64_t ldc = residual ? p->ldr : p->ldy, ldd = p->ldy;
  if constexpr (SWAP != 0) {
    args.epilogue.dC = typename K::StrideC{cute::_1{}, ldc, int64_t(0)};
    args.epilogue.dD = typename K::StrideD{cute::_1{}, ldd, int64_t(0)};
  } else {
    args.epilogue.dC = typename K::StrideC{ldc, cute::_1{}, int64_t(0)};
    args.epilogue.dD = typename K::StrideD{ldd, cute::_1{}, int64_t(0)};
  }
  args.epilogue.thread.alpha = 1.0f;
  args.epilogue.thread.beta = residual ? 1.0f : 0.0f;
  args.epilogue.thread.bias_ptr = static_cast<const bf16 *>(q.bias);
  args.epilogue.thread.activation.kind = p->epilogue == TPG_EPI_BIAS_GELU   ? tpg_cutlass::ACT_GELU
                                         : p->epilogue == TPG_EPI_BIAS_SILU ? tpg_cutlass::ACT_SILU
                                                                            : tpg_cutlass::ACT_NONE;
  args.hw_info.device_id = 0;
  args.hw_info.sm_count = p->num_sms;
  args.hw_info.max_active_clusters = 0;
  if constexpr (SCHED == TPG_CUTLASS_SCHED_COOP_SK) {
    using Dec = decltype(args.scheduler.decomposition_mode);
    args.scheduler.decomposition_mode =
        p->mode == TPG_CUTLASS_SK ? Dec::StreamK : p->mode == TPG_CUTLASS_SPLIT ? Dec::SplitK : Dec::DataParallel;
    args.scheduler.splits = p->mode == TPG_CUTLASS_SPLIT ? p->splits : 1;
    /* partial sums added in a fixed order: the same bits every launch */
    args.scheduler.reduction_mode = decltype(args.scheduler.reduction_mode)::Deterministic;
  }
  return args;
}

/* Where the descriptors are in Params: CUTLASS's own accessors (what its
 * kernel prefetches), so a checker need not guess. */
template <class Params>
int find_maps(const Params &prm, shape *sh, char *why, size_t whylen) {
  const unsigned char *base = reinterpret_cast<const unsigned char *>(&prm);
  const void *d[4] = {prm.mainloop.tma_load_a.get_tma_descriptor(), prm.mainloop.tma_load_b.get_tma_descriptor(),
                      prm.epilogue.tma_load_c.get_tma_descriptor(), prm.epilogue.tma_store_d.get_tma_descriptor()};
  sh->nmaps = 0;
  for (const void *x : d) {
    const size_t off = static_cast<size_t>(static_cast<const unsigned char *>(x) - base);
    if (off % 64 || off + sizeof(CUtensorMap) > sizeof prm)
      return reject(why, whylen, "a TMA descriptor outside Params or misaligned (a CUTLASS change?)");
    sh->map_off[sh->nmaps++] = off;
  }
  return 0;
}

/* The barrier words of the reduction, found as the kernel finds them
 * (sm90_tile_scheduler_stream_k.hpp, fixup): after reduction_tiles partial
 * tiles, which are all tiles with split-K and the stream-K tiles otherwise.
 * cutlass_ws: CUTLASS's workspace in the block (NULL: shape only). */
template <class G>
int find_locks(const typename G::Kernel::Params &prm, const void *cutlass_ws, shape *sh, char *why, size_t whylen) {
  using K = typename G::Kernel;
  using TS = typename K::TileScheduler;
  using SP = typename TS::Params;
  const SP &s = prm.scheduler;
  const uint64_t tiles = s.divmod_splits_.divisor > 1 ? s.units_per_problem_ : s.sk_tiles_;
  if (!tiles) return 0;
  const size_t red = SP::get_reduction_workspace_size(tiles, cutlass::gemm::to_gemm_coord(typename G::Tile{}),
                                                      cutlass::sizeof_bits<float>::value, 1);
  const size_t bar = SP::get_barrier_workspace_size(tiles, K::NumMmaWarpGroups,
                                                    cutlass::sizeof_bits<typename TS::BarrierType>::value);
  const size_t base = cutlass_ws ? static_cast<size_t>(static_cast<const unsigned char *>(s.reduction_workspace_) -
                                                       static_cast<const unsigned char *>(cutlass_ws))
                                 : sh->workspace - red - bar;
  if (base + red + bar > sh->workspace)
    return reject(why, whylen, "CUTLASS's reduction barriers lie outside its workspace (a CUTLASS change?)");
  sh->lock_off = base + red;
  sh->lock_bytes = bar;
  return 0;
}

/* CUTLASS's Arguments for p and the pointers in a (NULL a: shape only),
 * then Params; fills sh. 0 or nonzero with why. */
template <int TM, int TN, int CM, int CN, int SCHED, int SWAP>
int build(const tpg_cutlass_problem *p, const tpg_gemm_args *a, void *params, shape *sh, char *why, size_t whylen) {
  using G = tpg_cutlass::gemm<TM, TN, CM, CN, SCHED, SWAP>;
  using K = typename G::Kernel;
  const tpg_gemm_args none = {};
  const tpg_gemm_args &q = a ? *a : none;
  const typename K::Arguments args = arguments<TM, TN, CM, CN, SCHED, SWAP>(p, q);
  if (!K::can_implement(args))
    return reject(why, whylen,
                  "CUTLASS refuses the problem (can_implement: 16-byte rows and leading dimensions are its rules)");
  sh->workspace = K::get_workspace_size(args);
  unsigned char *ws = static_cast<unsigned char *>(q.workspace);
  void *cutlass_ws = ws ? ws + TPG_CUTLASS_WS_HEAD : nullptr;
  /* built in zeroed storage, so that Params' padding is zero rather than
   * whatever the stack held (the block is copied whole into graph nodes) */
  static_assert(std::is_trivially_destructible<typename K::Params>::value, "Params is left undestroyed");
  alignas(typename K::Params) unsigned char store[sizeof(typename K::Params)];
  memset(store, 0, sizeof store);
  const typename K::Params &prm = *::new (store) typename K::Params(K::to_underlying_arguments(args, cutlass_ws));
  const dim3 g = K::get_grid_shape(prm), b = K::get_block_shape();
  sh->grid[0] = g.x;
  sh->grid[1] = g.y;
  sh->grid[2] = g.z;
  sh->block = b.x;
  sh->smem = static_cast<unsigned>(K::SharedStorageSize);
  sh->params_bytes = sizeof prm;
  if (find_maps(prm, sh, why, whylen)) return 1;
  sh->lock_off = sh->lock_bytes = 0;
  if constexpr (SCHED == TPG_CUTLASS_SCHED_COOP_SK)
    if (find_locks<G>(prm, cutlass_ws, sh, why, whylen)) return 1;
  if (params) memcpy(params, &prm, sizeof prm);
  return 0;
}

int dispatch(const tpg_cutlass_problem *p, const tpg_gemm_args *a, void *params, shape *sh, char *why, size_t whylen) {
  switch (p->kernel) {
#define TPG_CASE(ID, NAME, TM, TN, CM, CN, SCHED, SWAP) \
  case ID:                                             \
    return build<TM, TN, CM, CN, SCHED, SWAP>(p, a, params, sh, why, whylen);
    TPG_CUTLASS_LIST(TPG_CASE)
#undef TPG_CASE
    default:
      return reject(why, whylen, "kernel index out of range");
  }
}

}  // namespace

/* CUTLASS's calls to cuTensorMapEncodeTiled (the macro at the top). */
extern "C" CUresult tpg_cutlass_encode_tiled(CUtensorMap *map, CUtensorMapDataType dtype, cuuint32_t rank, void *base,
                                             const cuuint64_t *dims, const cuuint64_t *strides, const cuuint32_t *box,
                                             const cuuint32_t *elem_strides, CUtensorMapInterleave interleave,
                                             CUtensorMapSwizzle swizzle, CUtensorMapL2promotion l2,
                                             CUtensorMapFloatOOBfill oob) {
  encode_state *s = g_encode;
  memset(map, 0, sizeof *map);
  if (!s || !s->fn) return CUDA_SUCCESS; /* a shape query: never launched */
  const CUresult r = s->fn(s->ctx, map, dtype, rank, base, dims, strides, box, elem_strides, interleave, swizzle, l2, oob);
  if (r != CUDA_SUCCESS && s->first == CUDA_SUCCESS) s->first = r;
  s->n++;
  /* success to CUTLASS, which would only print; tpg_cutlass_fill reports it */
  return CUDA_SUCCESS;
}

extern "C" {

const tpg_cutlass_kernel tpg_cutlass_kernels[TPG_CUTLASS_COUNT] = {
#define TPG_ROW(ID, NAME, TM, TN, CM, CN, SCHED, SWAP) {#NAME, "tpg_cutlass_bf16_" #NAME, TM, TN, CM, CN, SCHED, SWAP},
    TPG_CUTLASS_LIST(TPG_ROW)
#undef TPG_ROW
};

int tpg_cutlass_check(const tpg_cutlass_problem *p, char *why, size_t whylen) {
  char buf[200];
  if (!p) return reject(why, whylen, "problem is NULL");
  if (p->kernel < 0 || p->kernel >= TPG_CUTLASS_COUNT) {
    snprintf(buf, sizeof buf, "kernel=%d: the CUTLASS kernels are 0..%d", p->kernel, TPG_CUTLASS_COUNT - 1);
    return reject(why, whylen, buf);
  }
  const tpg_cutlass_kernel *k = &tpg_cutlass_kernels[p->kernel];
  if (p->dtype != TPG_KDT_BF16) {
    snprintf(buf, sizeof buf, "dtype=%d: the CUTLASS kernels are compiled for bf16 only", p->dtype);
    return reject(why, whylen, buf);
  }
  if (p->epilogue != TPG_EPI_NONE && p->epilogue != TPG_EPI_BIAS && p->epilogue != TPG_EPI_BIAS_GELU &&
      p->epilogue != TPG_EPI_BIAS_SILU && p->epilogue != TPG_EPI_RESIDUAL) {
    snprintf(buf, sizeof buf,
             "epilogue=%d: not fused in the CUTLASS kernels (SwiGLU and fp32 partials: kernels/gemm/sm90_cutlass.cuh)",
             p->epilogue);
    return reject(why, whylen, buf);
  }
  if (p->m < 1 || p->n < 8 || p->n % 8 || p->k < 8 || p->k % 8) {
    snprintf(buf, sizeof buf, "m=%d n=%d k=%d: need m >= 1 and n, k positive multiples of 8", p->m, p->n, p->k);
    return reject(why, whylen, buf);
  }
  if (p->ldx < p->k || p->ldw < p->k || p->ldy < p->n || p->ldx % 8 || p->ldw % 8 || p->ldy % 8 ||
      (p->epilogue == TPG_EPI_RESIDUAL && (p->ldr < p->n || p->ldr % 8))) {
    snprintf(buf, sizeof buf, "ldx=%d ldw=%d ldy=%d ldr=%d: multiples of 8, at least k, k, n, n", p->ldx, p->ldw, p->ldy,
             p->ldr);
    return reject(why, whylen, buf);
  }
  if (p->mode != TPG_CUTLASS_DP && p->mode != TPG_CUTLASS_SK && p->mode != TPG_CUTLASS_SPLIT) {
    snprintf(buf, sizeof buf, "mode=%d: TPG_CUTLASS_DP, _SK or _SPLIT", p->mode);
    return reject(why, whylen, buf);
  }
  if (p->mode != TPG_CUTLASS_DP && k->sched != TPG_CUTLASS_SCHED_COOP_SK) {
    snprintf(buf, sizeof buf, "mode=%d: %s is a ping-pong kernel, data-parallel only", p->mode, k->name);
    return reject(why, whylen, buf);
  }
  if (p->mode == TPG_CUTLASS_SPLIT && (p->splits < 2 || p->splits > 16 || p->splits > (p->k + 63) / 64)) {
    snprintf(buf, sizeof buf, "splits=%d: 2..16 K ranges, at most the %d K blocks of k=%d", p->splits, (p->k + 63) / 64,
             p->k);
    return reject(why, whylen, buf);
  }
  if (p->num_sms < 1) {
    snprintf(buf, sizeof buf, "num_sms=%d: at least 1", p->num_sms);
    return reject(why, whylen, buf);
  }
  return 0;
}

int tpg_cutlass_launch(const tpg_cutlass_problem *p, tpg_kernel_launch *out, char *why, size_t whylen) {
  shape sh;
  encode_state st = {};
  if (!out) return reject(why, whylen, "out is NULL");
  memset(out, 0, sizeof *out);
  if (tpg_cutlass_check(p, why, whylen)) return 1;
  encode_state *prev = g_encode;
  g_encode = &st;
  const int rc = dispatch(p, nullptr, nullptr, &sh, why, whylen);
  g_encode = prev;
  if (rc) return rc;
  const tpg_cutlass_kernel *k = &tpg_cutlass_kernels[p->kernel];
  out->kernel = k->entry;
  out->grid[0] = sh.grid[0];
  out->grid[1] = sh.grid[1];
  out->grid[2] = sh.grid[2];
  out->block[0] = sh.block;
  out->block[1] = out->block[2] = 1;
  out->smem_bytes = sh.smem;
  out->workspace_bytes = TPG_CUTLASS_WS_HEAD + sh.workspace;
  out->workspace_zeroed = TPG_CUTLASS_WS_HEAD; /* and the barrier words at its end: */
  out->workspace_private = sh.lock_bytes > 0;  /* no other node's scratch may cover them */
  out->split_k = 1;
  out->cluster = (unsigned)k->cm;
  out->cluster_y = (unsigned)k->cn;
  out->cutlass = p->kernel + 1;
  out->cutlass_mode = p->mode;
  out->cutlass_splits = p->mode == TPG_CUTLASS_SPLIT ? p->splits : 0;
  if (why && whylen) why[0] = '\0';
  return 0;
}

int tpg_cutlass_fill(const tpg_cutlass_problem *p, const tpg_gemm_args *a, tpg_cutlass_encode_fn enc, void *enc_ctx,
                     tpg_gemm_cutlass_args *out, CUresult *cu, char *why, size_t whylen) {
  char buf[200];
  shape sh;
  encode_state st = {};
  st.fn = enc;
  st.ctx = enc_ctx;
  if (cu) *cu = CUDA_SUCCESS;
  if (!out) return reject(why, whylen, "out is NULL");
  memset(out, 0, sizeof *out);
  if (!a || !enc) return reject(why, whylen, a ? "enc is NULL" : "a is NULL");
  if (tpg_cutlass_check(p, why, whylen)) return 1;
  if (!a->x || !a->w || !a->y || !a->workspace || (p->epilogue == TPG_EPI_RESIDUAL && !a->residual)) {
    snprintf(buf, sizeof buf, "a->%s is NULL", !a->x ? "x" : !a->w ? "w" : !a->y ? "y" : !a->workspace ? "workspace" : "residual");
    return reject(why, whylen, buf);
  }
  encode_state *prev = g_encode;
  g_encode = &st;
  const int rc = dispatch(p, a, out->params, &sh, why, whylen);
  g_encode = prev;
  if (rc || st.first != CUDA_SUCCESS) {
    if (!rc) {
      snprintf(buf, sizeof buf, "encoding a TMA descriptor for %s failed (CUresult %d)",
               tpg_cutlass_kernels[p->kernel].name, (int)st.first);
      reject(why, whylen, buf);
    }
    if (cu) *cu = st.first;
    memset(out, 0, sizeof *out);
    return 1;
  }
  out->a = *a;
  out->ctas = sh.grid[0] * sh.grid[1] * sh.grid[2];
  out->params_bytes = (uint32_t)sh.params_bytes;
  /* the descriptors CUTLASS encoded are the four its Params hold */
  if (st.n != sh.nmaps) {
    snprintf(buf, sizeof buf, "%s encoded %d TMA descriptors, its Params hold %d (a CUTLASS change?)",
             tpg_cutlass_kernels[p->kernel].name, st.n, sh.nmaps);
    memset(out, 0, sizeof *out);
    return reject(why, whylen, buf);
  }
  out->nmaps = (uint32_t)sh.nmaps;
  for (int i = 0; i < sh.nmaps; ++i) out->map_off[i] = (uint16_t)sh.map_off[i];
  if (sh.lock_bytes) {
    unsigned char *ws = static_cast<unsigned char *>(a->workspace);
    out->done = reinterpret_cast<uint32_t *>(ws);
    out->locks = reinterpret_cast<uint32_t *>(ws + TPG_CUTLASS_WS_HEAD + sh.lock_off);
    out->lock_words = sh.lock_bytes / 4;
  }
  if (why && whylen) why[0] = '\0';
  return 0;
}

}  // extern "C"
