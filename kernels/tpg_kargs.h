/* tpg_kargs.h - the argument blocks that host code hands to tpgraph's kernels.
 *
 * Shared by C11 host code (lib/, graphbuild/) and CUDA device code (kernels/).
 * Every kernel entry point takes exactly one of these structs by value, so a
 * graph kernel node's parameter block is a single plain struct: rebinding a
 * buffer slot patches a pointer field at a known offset (offsetof) and hands
 * the block back to cuGraphExecKernelNodeSetParams. Keep the structs POD, no
 * bitfields, pointers first, so offsets are identical in both compilers.
 */
#ifndef TPG_KARGS_H
#define TPG_KARGS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Element types as the kernels see them. Values match tpg_dtype in tpgraph.h. */
enum {
  TPG_KDT_F32 = 0,
  TPG_KDT_F16 = 1,
  TPG_KDT_BF16 = 2
};

/* GEMM epilogues: Y = epi(X * W^T). */
enum {
  TPG_EPI_NONE = 0,        /* Y = acc                                   */
  TPG_EPI_BIAS = 1,        /* Y = acc + bias[n]                         */
  TPG_EPI_BIAS_GELU = 2,   /* Y = gelu_tanh(acc + bias[n])              */
  TPG_EPI_BIAS_SILU = 3,   /* Y = silu(acc + bias[n])                   */
  TPG_EPI_SWIGLU = 4,      /* W has 2N rows: [0,N) gate, [N,2N) up;
                              Y[m,n] = silu(g + bias[n]) * (u + bias[N+n]),
                              bias optional (then 2N entries)           */
  TPG_EPI_RESIDUAL = 5,    /* Y = acc + bias[n] (if bias) + residual[m,n] */
  TPG_EPI_F32_PARTIAL = 6, /* Y is fp32, Y = acc (no bias): a partial sum
                              that a reduction (all-reduce) consumes     */
  TPG_EPI_COUNT = 7
};

/* tpg_gemm_args.split_k for stream-K (kernels/gemm/sm90_tma.cu). */
#define TPG_SPLITK_STREAM (-1) /* not 0: zeroed args mean whole tiles */
/* K split over the CTAs of a launch-time cluster (S, 1, 1), summed through
 * distributed shared memory (sm90 TMA kernels with 128-row tiles; grid =
 * tiles x S, no workspace) */
#define TPG_SPLITK_CLUSTER (-2)

/* Stream-K workspace of the sm90 kernels: uint32 counters, one per output
 * tile, rounded to 256 bytes (zero at allocation; the kernel leaves them
 * zero), then two fp32 partial tiles (128 x bn) per CTA of the grid. */
static inline size_t tpg_sk_workspace_bytes(size_t tiles, size_t grid, size_t bn) {
  return ((tiles * 4 + 255) & ~(size_t)255) + grid * 2 * 128 * bn * 4;
}

/* Y[M,N] = epi(X[M,K] * W[N,K]^T). Row-major, leading dims in elements. */
typedef struct tpg_gemm_args {
  const void *x;        /* [M, ldx]  operand dtype                      */
  const void *w;        /* [N(or 2N), ldw] operand dtype (Linear weight) */
  void *y;              /* [M, ldy]  operand dtype, fp32 for F32_PARTIAL */
  const void *bias;     /* [N] (or [2N] for SWIGLU), operand dtype; may be NULL */
  const void *residual; /* [M, ldr] operand dtype; RESIDUAL only; may alias y */
  void *workspace;      /* split-K fp32 partials + counters, owned by the
                           graph; kernels leave counters zero on exit so no
                           memset node is needed between launches       */
  /* RMSNorm folded into the decode GEMVs (one rank, m <= TPG_FOLD_MAX_M;
   * kernels/gemm/gemv.cu): a producer writes, per row of y, the sums of
   * squares of y's rounded values by 16-column group; a consumer's x is
   * RMSNorm(x) * x_norm_w from the sums its producer wrote. */
  float *y_ssq;         /* [m, ceil(n / 16)] fp32 or NULL                */
  const float *x_ssq;   /* [m, ceil(k / 16)] fp32; set with x_norm_w     */
  const void *x_norm_w; /* [k] operand dtype, or NULL: x as it is        */
  int32_t m, n, k;
  int32_t ldx, ldw, ldy, ldr;
  int32_t dtype;        /* TPG_KDT_F16 or TPG_KDT_BF16                   */
  int32_t epilogue;     /* TPG_EPI_*                                      */
  int32_t split_k;      /* 1: each CTA computes whole tiles.
                           TPG_SPLITK_CLUSTER (sm90 TMA kernels): K
                           split over a launch-time cluster (above).
                           TPG_SPLITK_STREAM (sm90 kernels only): stream-K,
                           the tiles' K blocks split evenly over the grid;
                           needs tpg_sk_workspace_bytes() of workspace */
  int32_t pdl_prefetch; /* the decode GEMVs, when the node is the secondary
                           of a programmatic edge (TPG_GRAPH_PDL): bytes of
                           each of the CTA's first W rows to prefetch into L2
                           before griddepcontrol.wait (multiple of 16;
                           0: none). A hint that writes no registers, so
                           correct even if a predecessor wrote W (L2 is
                           the GPU's point of coherence), only wasted. */
  float x_norm_eps;     /* with x_norm_w: the norm's epsilon             */
} tpg_gemm_args;

/* The most rows a folded RMSNorm serves (the GEMVs' M classes 8 and 16). */
#define TPG_FOLD_MAX_M 16
/* Sums of squares per row of a folded norm: one per 16-column group. */
#define TPG_FOLD_GROUPS(cols) (((cols) + 15) / 16)

/* SwiGLU after a GEMM that left the 2N-wide product in dtype (the cuBLASLt
 * family's form, lib/gemm/cublaslt.c; kernels/gemm/lt_swiglu.cu):
 * y[r][c] = silu(t[r][c] + bias[c]) * (t[r][N + c] + bias[N + c]) for
 * r < m, c < n, in fp32, rounded to dtype once more at the end.
 * n, ldt and ldy are multiples of 4 (8-byte loads of 4 values). */
typedef struct tpg_swiglu_args {
  const void *t;        /* [m, ldt] dtype: gate columns [0, n), up [n, 2n) */
  void *y;              /* [m, ldy] dtype                                */
  const void *bias;     /* [2n] dtype, or NULL                            */
  int32_t m, n, ldt, ldy;
  int32_t dtype;        /* TPG_KDT_F16 or TPG_KDT_BF16                   */
  int32_t pad_;
} tpg_swiglu_args;

/* y[i] = alpha * x[i] + beta * y[i], fp32 arithmetic, i < count. */
typedef struct tpg_axpby_args {
  void *y;
  const void *x;
  uint64_t count;
  float alpha, beta;
  int32_t dtype;        /* TPG_KDT_*                                      */
  int32_t pad_;
} tpg_axpby_args;

/* dst[r][b * cols + c] = src[b][r][c]: `blocks` row-major [rows, cols]
 * matrices laid one after another (what an all-gather of per-rank parts
 * gives) placed side by side as one [rows, blocks * cols] matrix. A pure
 * move, so only the element size matters. */
typedef struct tpg_concat_args {
  void *dst;
  const void *src;
  uint64_t rows, cols;  /* of one block; cols in elements                  */
  int32_t blocks;
  int32_t esize;        /* bytes per element: 2 or 4                       */
} tpg_concat_args;


/* Fused all-reduce epilogue (kernels/ar_epilogue.cuh), shared by our
 * all-reduce kernels and the kernel node that follows an NCCL all-reduce, so
 * every algorithm computes the same thing. With s = the sum over ranks, per
 * element i of row i / hidden, column c = i % hidden:
 *   h = round(s + bias[c] + residual[i])   (absent terms are 0)
 *   residual_out[i] = h                    (when residual_out is set)
 *   recv[i] = norm_weight ? round(h * rsqrt(mean_row(h^2) + eps) * w[c]) : h
 * All NULL (hidden 0): no epilogue, recv = round(s). */
typedef struct tpg_ar_epi {
  const void *bias;         /* [hidden] or NULL                                */
  const void *residual;     /* [count] or NULL; may equal residual_out         */
  void *residual_out;       /* [count] or NULL                                 */
  const void *norm_weight;  /* [hidden]; non-NULL: RMSNorm, whole rows per block */
  uint64_t hidden;          /* row length, a multiple of 8; 0: no epilogue     */
  float eps;
  int32_t pad_;
} tpg_ar_epi;

/* Our all-reduce kernels (kernels/allreduce.cu). Each rank's peer-visible
 * buffer holds a flag array [TPG_AR_MAX_RANKS][TPG_AR_MAX_BLOCKS] of u32 and,
 * at staging[r], two halves of slot_bytes (epoch parity picks one). The
 * two-shot kernel uses staging[] as its scatter area and gather[] as its
 * gather area, each two halves of slot_bytes. */
#define TPG_AR_MAX_RANKS 8
#define TPG_AR_MAX_BLOCKS 128   /* flag columns per kernel; two-shot's grid limit */
#define TPG_AR_EPOCHS 512       /* epoch counters per kernel (>= every grid)    */
#define TPG_AR_ONESHOT_BLOCKS 64 /* the one-shot kernels' fixed grid            */
#define TPG_AR_PUSH_BLOCKS 264   /* tpg_allreduce_push's fixed grid (x 256 threads: 2 per SM) */
typedef struct tpg_allreduce_args {
  const void *in;       /* count elements, 16-byte aligned (may equal out) */
  void *out;
  void *staging[TPG_AR_MAX_RANKS];   /* every rank's staging, mapped here  */
  uint32_t *flags[TPG_AR_MAX_RANKS]; /* every rank's flag array            */
  void *gather[TPG_AR_MAX_RANKS];    /* two-shot: every rank's gather area */
  uint32_t *epochs;     /* this rank: TPG_AR_EPOCHS counters, one per block;
                           push: the last one says an earlier push failed */
  uint32_t *status;     /* host-mapped: set to 1 when a peer never came    */
  uint64_t count;
  uint64_t slot_bytes;
  uint64_t timeout_ns;
  int32_t dtype;        /* TPG_KDT_*                                       */
  int32_t nranks, rank;
  int32_t pad_;
  tpg_ar_epi epi;       /* fused epilogue; all zero: none                  */
} tpg_allreduce_args;

/* The epilogue alone (kernels/elementwise.cu): after an NCCL all-reduce it
 * reads the sum from recv (in == recv) and applies tpg_ar_epi in place; on
 * one rank, where there is nothing to sum, it reads send (in) and writes
 * recv. */
typedef struct tpg_ar_epilogue_args {
  const void *in;
  void *recv;
  uint64_t count;
  int32_t dtype;
  int32_t pad_;
  tpg_ar_epi epi;
} tpg_ar_epilogue_args;

#ifdef __cplusplus
}
#endif
#endif /* TPG_KARGS_H */
