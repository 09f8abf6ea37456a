/* problem.h - one GEMM as every family reads it, and what a family answers
 * with: a variant (a kernel and how it splits the work) and its launch.
 *
 * Plain C11 data, no CUDA headers: the selector (select.h), the families
 * (ours*.c, cutlass.c, cublaslt.c), the tuner, the graph node and the
 * benchmarks all speak these types.
 */
#ifndef TPG_GEMM_PROBLEM_H
#define TPG_GEMM_PROBLEM_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Y[m, n] = epi(X[m, k] W[n, k]^T), W with 2n rows under SwiGLU. */
typedef struct tpg_gemm_problem {
  int m, n, k;
  int dtype;              /* TPG_KDT_F16 or TPG_KDT_BF16                       */
  int epilogue;           /* TPG_EPI_*                                          */
  int arch;               /* 10 * major + minor: 90 for H100 / H200             */
  int sms;                /* SMs the GEMM may fill                              */
  int ldx, ldw, ldy, ldr; /* leading dimensions in elements (>= k, k, n, n;
                             multiples of 8: 16-byte rows)                      */
  int streamk;            /* what our Hopper rule may split K with: 0 never,
                             1 where its cost model says it pays, 2 always      */
  int residual_bias;      /* TPG_EPI_RESIDUAL: 1 when a bias is added too (the
                             other epilogues say whether they take one)       */
  int fold;               /* a folded RMSNorm (TPG_GEMM_FOLD_*, or'ed; 0: none):
                             only our split decode GEMV runs it, m <=
                             TPG_FOLD_MAX_M                                    */
  int sm_target;          /* SMs cuBLASLt aims at (its SM-count target): sms
                             where the node leaves SMs to a collective beside
                             it (tpg_gemm_desc.sm_reserve); 0: the whole GPU.
                             Our kernels and CUTLASS's read sms alone       */
} tpg_gemm_problem;

/* tpg_gemm_problem.fold: the GEMM writes its rows' sums of squares
 * (tpg_gemm_args.y_ssq), and/or normalizes x as it loads it (x_ssq,
 * x_norm_w). */
enum { TPG_GEMM_FOLD_SSQ = 1, TPG_GEMM_FOLD_XNORM = 2 };

/* A problem with dense rows (ldx = ldw = k, ldy = ldr = n) and streamk 1. */
static inline tpg_gemm_problem tpg_gemm_problem_make(int m, int n, int k, int dtype, int epilogue, int arch,
                                                     int sms) {
  tpg_gemm_problem p;
  p.m = m, p.n = n, p.k = k, p.dtype = dtype, p.epilogue = epilogue, p.arch = arch, p.sms = sms;
  p.ldx = k, p.ldw = k, p.ldy = n, p.ldr = n;
  p.streamk = 1;
  p.residual_bias = 0;
  p.fold = 0;
  p.sm_target = 0;
  return p;
}

/* W's rows: 2n with SwiGLU (gate and up), else n. */
long tpg_gemm_wrows(const tpg_gemm_problem *p);

/* The rules every family shares: m >= 1, n and k positive multiples of 8,
 * dtype F16 or BF16, a known epilogue, arch >= 80. 0, or nonzero with the
 * rule that failed in why ("n=100: N must be ..."). */
int tpg_gemm_problem_check(const tpg_gemm_problem *p, char *why, size_t whylen);

/* Writes the message into why (when given) and returns 1: every refusal in
 * lib/gemm ends this way. */
int tpg_gemm_reject(char *why, size_t whylen, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

/* ---- the families --------------------------------------------------------
 * OURS: our kernels (ours*.c); CUTLASS: the CUTLASS instantiations
 * (cutlass.c); CUBLASLT: cuBLASLt, loaded at run time (cublaslt.c). AUTO is
 * not a family but the rule between them (select.c). */
enum {
  TPG_GEMM_FAMILY_AUTO = 0,
  TPG_GEMM_FAMILY_OURS = 1,
  TPG_GEMM_FAMILY_CUTLASS = 2,
  TPG_GEMM_FAMILY_CUBLASLT = 3,
  TPG_GEMM_FAMILY_COUNT = 4
};

/* ---- what a family answers with: the launch --------------------------------
 * For our kernels and CUTLASS's: the graph builder loads `kernel` by name
 * from the embedded fatbins, gives the node `workspace_bytes` of workspace
 * (zeroed once; nodes that never run at once share it:
 * graphbuild/workspace.c) and launches with grid / block / smem. A cuBLASLt
 * launch has no kernel of ours: the node runs cublasLtMatmul with the
 * algorithm `lt_algo` names (cublaslt.h) in its workspace. */
typedef struct tpg_kernel_launch {
  const char *kernel;        /* extern "C" entry point name in the fatbin ("cublasLt"
                                for the cuBLASLt family: no entry point)          */
  unsigned grid[3], block[3];
  unsigned smem_bytes;       /* dynamic shared memory. When > 48 KB the launcher
                                must first set CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_
                                SHARED_SIZE_BYTES to this value on the function  */
  size_t workspace_bytes;    /* the node's workspace; zero it once when allocated */
  size_t workspace_zeroed;   /* its first bytes that the kernel leaves zero on
                                exit (counters), so no memset between launches;
                                the rest is scratch                            */
  int workspace_private;     /* 1: zero words lie past workspace_zeroed too
                                (CUTLASS's reduction barriers after its
                                partials): no node may share the workspace
                                (graphbuild/workspace.c); 0: the rest is
                                scratch the kernel writes before it reads     */
  int split_k;               /* value for tpg_gemm_args.split_k: 1,
                                TPG_SPLITK_STREAM (stream-K, sm90 TMA) or
                                TPG_SPLITK_CLUSTER (K over a cluster, "_kc<S>") */
  unsigned cluster;          /* > 1: launch with clusters of (cluster, cluster_y, 1) CTAs
                                (CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION; a graph
                                node: CU_KERNEL_NODE_ATTRIBUTE_CLUSTER_DIMENSION);
                                0: none asked (the _c2 kernels compile theirs in) */
  unsigned cluster_y;        /* 0 or 1: (cluster, 1, 1); > 1: the CUTLASS kernels'
                                clusters along N (cluster is then >= 1)       */
  int cutlass;               /* 0: not a CUTLASS kernel; i + 1: CUTLASS kernel i
                                (lib/gemm/cutlass.h), whose argument block
                                tpg_gemm_cutlass_args tpg_cutlass_fill builds
                                with these two: */
  int cutlass_mode;          /* TPG_CUTLASS_DP / _SK / _SPLIT                 */
  int cutlass_splits;        /* K ranges with TPG_CUTLASS_SPLIT                 */
  int family;                /* TPG_GEMM_FAMILY_OURS, _CUTLASS or _CUBLASLT    */
  int lt_algo;               /* cuBLASLt: which of its heuristic's answers (0: the first) */
} tpg_kernel_launch;

/* The cluster shape a launch asks for at launch time, as
 * CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION takes it; {0, 0, 0}: none. */
static inline void tpg_kernel_launch_cluster(const tpg_kernel_launch *l, unsigned c[3]) {
  const unsigned x = l->cluster ? l->cluster : 1, y = l->cluster_y ? l->cluster_y : 1;
  c[0] = c[1] = c[2] = 0;
  if (x * y > 1) {
    c[0] = x;
    c[1] = y;
    c[2] = 1;
  }
}

/* A tensor map of our TMA kernels ("sm90tma" in the name: they take
 * tpg_gemm_tma_args, kernels/tpg_tma_args.h), which the caller encodes with
 *   cuTensorMapEncodeTiled(&map, BFLOAT16 or FLOAT16, e.rank, base pointer
 *     (x for x_map, w for w_map, y for the map of tpg_gemm_y_map), e.dims,
 *     e.strides, e.box, elementStrides = all 1, CU_TENSOR_MAP_INTERLEAVE_NONE,
 *     CU_TENSOR_MAP_SWIZZLE_128B (e.swizzle 128) or _64B (64),
 *     CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE)
 * and re-encodes whenever x, w or y is rebound. x, w and y must be 16-byte
 * aligned (TMA requires it). */
typedef struct tpg_tma_encode {
  int rank;                       /* 0: no map (the kernel takes tpg_gemm_args) */
  unsigned long long dims[4];     /* elements, innermost first                  */
  unsigned long long strides[3];  /* bytes, for dims 1..rank-1                  */
  unsigned box[4];                /* elements                                   */
  unsigned swizzle;               /* bytes: 128 (x, w) or 64 (y)                */
} tpg_tma_encode;

/* ---- what a family answers with: the variant -------------------------------
 * A variant names a kernel and how it splits the work, instead of letting a
 * rule choose: the tuner's candidates, gemm_bench's A/B, the tuning cache
 * file (the names below are stable: they key cache files).
 *   "heuristic"  the rule between the families (select.c), whatever it picks
 *   ours (ours_variant.c): "ours" (our Hopper rule, tpg_gemm_select_tma),
 *     "gemv" (the decode GEMV, m <= 64, with the selector's number of K
 *     ranges), "gemv_s<S>" (S K ranges, 1..16), "gemv_sk" (its stream-K
 *     twin, m <= 16), "tma_m<BM>_n<BN>[_sw][_c2|_cn2][_sk]" (sm_90 TMA
 *     kernel, BM 64|128, BN 64|128|256 (192 with BM 128), stream-K over the
 *     last or only wave; _sw: swapped operands, BM 16|32|64 tokens by BN
 *     64|128|256 W rows; _c2 / _cn2: clusters of two), "..._k<S>" (aligned
 *     split-K) and "tma_m128_n<BN>_kc<S>" (K over a cluster of S CTAs);
 *   CUTLASS (cutlass.c): "cutlass_<name>" (data-parallel), "cutlass_<name>_sk"
 *     (stream-K), "cutlass_<name>_k<S>" (split-K), <name> a row of
 *     kernels/gemm/sm90_cutlass_list.h;
 *   cuBLASLt (cublaslt.c): "cublaslt" (its heuristic's first algorithm, as
 *     PyTorch calls it), "cublaslt_a<i>" (its i-th, 1..3). */
enum {
  TPG_GEMM_VAR_HEURISTIC = 0,
  TPG_GEMM_VAR_GEMV = 1,
  TPG_GEMM_VAR_GEMV_SK = 2,
  TPG_GEMM_VAR_TMA = 3,
  TPG_GEMM_VAR_CUTLASS = 4,
  TPG_GEMM_VAR_OURS = 5,
  TPG_GEMM_VAR_CUBLASLT = 6
};
typedef struct tpg_gemm_variant {
  int kind;     /* TPG_GEMM_VAR_*                                   */
  int bm, bn;   /* TMA: 64|128 X rows, 64|128|256 W rows per tile   */
  int streamk;  /* TMA: 0 whole tiles, 1 stream-K                   */
  int split;    /* GEMV: K ranges (grid.y), 0: the selector's rule.
                   TMA with streamk: 0 stream-K over the machine ("_sk"); S >= 2
                   aligned split-K ("_k<S>"): a grid of units x S CTAs (units x S
                   <= the units resident at once), each one of S equal K ranges
                   of one tile (or cluster pair), summed as stream-K sums */
  int kcluster; /* TMA with split S: 1 = "_kc<S>", the S K ranges of a tile are the
                   CTAs of a launch-time cluster (S, 1, 1), summed through
                   distributed shared memory; grid tiles x S, no workspace, no
                   stream-K; bm 128, no cluster or swap, S 2..8 */
  int cluster;  /* TMA: 0 one CTA a tile (1 is read the same), 2 clusters of two CTAs
                   on M-tile pairs (bm 128, bn 256|192|128, or bm 64, bn 128|64; "_c2") */
  int cluster_n; /* TMA with cluster 2: 1 = the pair is two N-tiles sharing the
                   X tile instead (bm 64|128, bn 64|128; "_cn2")     */
  int swap;     /* TMA: 1 = swapped tiles ("_sw"): W rows are the wgmma M side,
                   bm 16|32|64 tokens its N side; bn 64|128|256; with
                   cluster 2 (token-tile pairs sharing W) bm 32|64, bn 64|128 */
  int cutlass;  /* CUTLASS: the kernel (index into tpg_cutlass_kernels);
                   streamk 1: stream-K, split S >= 2: split-K, else
                   data-parallel (the other fields 0)              */
  int lt_algo;  /* cuBLASLt: the heuristic's answer, 0..3           */
} tpg_gemm_variant;

#define TPG_GEMM_MAX_CANDIDATES 64

/* How a CUTLASS kernel divides the work (a variant's streamk / split, a rule
 * table row's mode): the cooperative kernels take all three, the ping-pong
 * ones data-parallel only. */
enum {
  TPG_CUTLASS_DP = 0,    /* persistent, whole tiles                      */
  TPG_CUTLASS_SK = 1,    /* stream-K over the tiles' K blocks            */
  TPG_CUTLASS_SPLIT = 2  /* split-K: `splits` K ranges a tile, then data-parallel */
};

/* A rule table row's mode for cuBLASLt: 0 wherever it can run the shape
 * (TPG_GEMM_FAMILY=cublaslt), or AUTO's band, SwiGLU only where it beat
 * our fused kernel (lib/gemm/cublaslt.c, lt_rule). */
enum { TPG_LT_ANYWHERE = 0, TPG_LT_AUTO_BAND = 1 };

#ifdef __cplusplus
}
#endif
#endif
