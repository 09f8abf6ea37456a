/* sm90_cutlass.cuh - CUTLASS 4.2 Hopper GEMMs as tpgraph kernels: the
 * kernel types of sm90_cutlass_list.h, our epilogues as a CUTLASS epilogue
 * fusion, and the extern "C" entry points the library loads by name.
 *
 * Design (docs/kernels.md, "CUTLASS candidates"):
 *  - A kernel is CUTLASS's collective builders' product: a TMA
 *    warp-specialized mainloop (cooperative or ping-pong), an epilogue
 *    collective with a fusion, a tile scheduler. Y = epi(X W^T) with X the
 *    A operand (row-major, K contiguous) and W the B operand ("column-major"
 *    in CUTLASS's K x N view, again K contiguous): a TN GEMM. Swapped
 *    kernels give W as A and X as B and store Y^T column-major.
 *  - One fusion serves five of our epilogues at run time:
 *        D = act(alpha * acc + bias + beta * C),  act in {identity, GeLU, SiLU}
 *    with CUTLASS's per-column (per-row when swapped) bias broadcast (a NULL
 *    bias reads as 0), C = the residual and beta = 1 for TPG_EPI_RESIDUAL
 *    (beta = 0 skips C's loads), and `act` a functor whose argument picks the
 *    activation (CUTLASS's Sm90Compute passes activation arguments to the
 *    functor). NONE, BIAS, BIAS_GELU, BIAS_SILU and RESIDUAL are therefore
 *    one compiled kernel, not five (~50 s of nvcc each). GeLU and SiLU are
 *    our own (kernels/common.cuh: tanh.approx GeLU, __expf SiLU), so every
 *    family computes the same activation. Not fused: SWIGLU (our W keeps
 *    gate rows [0, N) and up rows [N, 2N); a CUTLASS tile of W rows is one
 *    contiguous range, so gate and up of an output never meet in one CTA
 *    without a custom mainloop) and F32_PARTIAL (an fp32 Y is another kernel
 *    type); both stay with our kernels.
 *  - The entry point takes tpg_gemm_cutlass_args (kernels/tpg_cutlass_args.h)
 *    by value, hands its `params` bytes to the CUTLASS kernel as its Params
 *    (they live in the parameter space, as CUTLASS's own device_kernel<>'s
 *    __grid_constant__ Params do, so its TMA descriptors are where TMA wants
 *    them), and after it leaves the stream-K barrier words zero (the block's
 *    header says why).
 *  - PDL: like our GEMMs, griddepcontrol.wait first and launch_dependents
 *    right after (docs/design.md; CUTLASS's own GDC calls are compiled out).
 *  - Only the sm_90a image holds the kernels: CUTLASS's headers are read
 *    only when compiling for it (or, with TPG_CUTLASS_HOST, by the host code
 *    that builds Params). The compute_90 and sm_80 images get an entry that
 *    traps; the selector never picks a CUTLASS kernel there.
 */
#ifndef TPG_SM90_CUTLASS_CUH
#define TPG_SM90_CUTLASS_CUH

#include "kernels/gemm/sm90_cutlass_list.h"
#include "kernels/tpg_cutlass_args.h"

#if defined(__CUDA_ARCH_FEAT_SM90_ALL) || defined(TPG_CUTLASS_HOST)
#define TPG_CUTLASS_TYPES 1

/* CUTLASS's device code asserts; an assert is a call to __assertfail, and
 * a call inside the main loop makes ptxas serialize every wgmma (its
 * warning C7510) and spill (20-68 bytes measured). Release builds of
 * CUTLASS define NDEBUG; so do we, here, so no build system can forget it
 * (this header comes first in every file that includes CUTLASS). */
#ifndef NDEBUG
#define NDEBUG 1
#endif

#include <cute/tensor.hpp>
#include <cutlass/cutlass.h>
#include <cutlass/epilogue/collective/collective_builder.hpp>
#include <cutlass/epilogue/fusion/operations.hpp>
#include <cutlass/gemm/collective/collective_builder.hpp>
#include <cutlass/gemm/dispatch_policy.hpp>
#include <cutlass/gemm/kernel/gemm_universal.hpp>
#include <cutlass/gemm/kernel/tile_scheduler.hpp>

#include "kernels/common.cuh"

namespace tpg_cutlass {

using bf16 = cutlass::bfloat16_t;

/* The activation of the fusion, chosen at launch: kind 0 identity, 1 GeLU
 * (tanh), 2 SiLU (TPG_CUTLASS_ACT_*). */
enum { ACT_NONE = 0, ACT_GELU = 1, ACT_SILU = 2 };
struct act_args {
  int kind = ACT_NONE;
};
template <class T>
struct act {
  using Arguments = act_args;
  CUTLASS_HOST_DEVICE T operator()(T const &x, act_args const &a) const {
#if defined(__CUDA_ARCH__)
    if (a.kind == ACT_GELU) return tpg::gelu_tanh(x);
    if (a.kind == ACT_SILU) return tpg::silu(x);
#endif
    return x;
  }
};
template <class T, int N>
struct act<cutlass::Array<T, N>> {
  using Arguments = act_args;
  CUTLASS_HOST_DEVICE cutlass::Array<T, N> operator()(cutlass::Array<T, N> const &x, act_args const &a) const {
    cutlass::Array<T, N> y;
    act<T> f;
    /* one uniform branch per fragment, outside the element loop */
    if (a.kind == ACT_NONE) return x;
    CUTLASS_PRAGMA_UNROLL
    for (int i = 0; i < N; ++i) y[i] = f(x[i], a);
    return y;
  }
};

/* The kernel type of one row of sm90_cutlass_list.h. */
template <int TM, int TN, int CM, int CN, int SCHED, int SWAP>
struct gemm {
  using Tile = cute::Shape<cute::Int<TM>, cute::Int<TN>, cute::_64>;
  using Cluster = cute::Shape<cute::Int<CM>, cute::Int<CN>, cute::_1>;
  static constexpr bool coop = SCHED == TPG_CUTLASS_SCHED_COOP_SK;
  using MainSchedule = cute::conditional_t<coop, cutlass::gemm::KernelTmaWarpSpecializedCooperative,
                                           cutlass::gemm::KernelTmaWarpSpecializedPingpong>;
  using EpiSchedule = cute::conditional_t<coop, cutlass::epilogue::TmaWarpSpecializedCooperative,
                                          cutlass::epilogue::TmaWarpSpecialized>;
  using TileScheduler = cute::conditional_t<coop, cutlass::gemm::StreamKScheduler, cutlass::gemm::PersistentScheduler>;
  using LayoutCD = cute::conditional_t<SWAP != 0, cutlass::layout::ColumnMajor, cutlass::layout::RowMajor>;
  using Fusion = cute::conditional_t<
      SWAP != 0, cutlass::epilogue::fusion::LinCombPerRowBiasEltAct<act, bf16, float, bf16, bf16, float>,
      cutlass::epilogue::fusion::LinCombPerColBiasEltAct<act, bf16, float, bf16, bf16, float>>;
  using Epilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, Tile, Cluster, cutlass::epilogue::collective::EpilogueTileAuto,
      float, float, bf16, LayoutCD, 8, bf16, LayoutCD, 8, EpiSchedule, Fusion>::CollectiveOp;
  using Mainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, bf16, cutlass::layout::RowMajor, 8, bf16,
      cutlass::layout::ColumnMajor, 8, float, Tile, Cluster,
      cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(sizeof(typename Epilogue::SharedStorage))>,
      MainSchedule>::CollectiveOp;
  using Kernel = cutlass::gemm::kernel::GemmUniversal<cute::Shape<int, int, int, int>, Mainloop, Epilogue, TileScheduler>;
  static_assert(sizeof(typename Kernel::Params) <= TPG_CUTLASS_PARAMS_MAX,
                "CUTLASS Params outgrew tpg_gemm_cutlass_args.params: raise TPG_CUTLASS_PARAMS_MAX");
  static_assert(alignof(typename Kernel::Params) <= 128, "Params needs more than the block's 128-byte alignment");
  static_assert(Kernel::MaxThreadsPerBlock == 384 && Kernel::MinBlocksPerMultiprocessor == 1,
                "the entry's __launch_bounds__(384, 1)");
};

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
/* The body of every entry point. */
template <class Kernel>
__device__ __forceinline__ void run(const tpg_gemm_cutlass_args &a) {
  extern __shared__ char smem[];
  tpg::pdl_wait(); /* PDL secondary: before anything (common.cuh) */
  tpg::pdl_launch_dependents();
  Kernel op;
  op(*reinterpret_cast<const typename Kernel::Params *>(a.params), smem);
  if (!a.done) return;
  /* Stream-K / split-K: the last CTA to get here zeroes the reduction's
   * barrier words for the next launch. The first barrier: every thread of
   * this CTA is past its last use of them; the fence orders this CTA's
   * barrier updates before its count. The thread index is read again here
   * (asm volatile): reusing CUTLASS's copy from the kernel's start kept a
   * register live across the whole kernel and made ptxas spill. */
  unsigned tid, nthreads;
  asm volatile("mov.u32 %0, %%tid.x;" : "=r"(tid));
  asm volatile("mov.u32 %0, %%ntid.x;" : "=r"(nthreads));
  __syncthreads();
  int last = 0;
  if (tid == 0) {
    __threadfence();
    last = atomicAdd(a.done, 1u) == a.ctas - 1;
  }
  if (__syncthreads_or(last)) {
    __threadfence();
    for (uint64_t i = tid; i < a.lock_words; i += nthreads) a.locks[i] = 0;
    if (tid == 0) *a.done = 0;
  }
}
#endif

}  // namespace tpg_cutlass
#endif /* CUTLASS types */

/* The entry point of one row: each kernel's .cu expands its row with it
 * (TPG_CUTLASS_ROW<i>(TPG_CUTLASS_ENTRY)), so each kernel is one nvcc action. */
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define TPG_CUTLASS_BODY(TM, TN, CM, CN, SCHED, SWAP) \
  tpg_cutlass::run<typename tpg_cutlass::gemm<TM, TN, CM, CN, SCHED, SWAP>::Kernel>(a);
#else
#define TPG_CUTLASS_BODY(TM, TN, CM, CN, SCHED, SWAP) \
  (void)a;                                             \
  __trap();
#endif
#define TPG_CUTLASS_ENTRY(ID, NAME, TM, TN, CM, CN, SCHED, SWAP)                                              \
  extern "C" __global__ void __launch_bounds__(384, 1)                                                         \
      tpg_cutlass_bf16_##NAME(const __grid_constant__ tpg_gemm_cutlass_args a) {                               \
    TPG_CUTLASS_BODY(TM, TN, CM, CN, SCHED, SWAP)                                                              \
  }

#endif
