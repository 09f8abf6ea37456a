/* select.h - host-side choice of GEMM kernel and launch configuration.
 *
 * Plain C11, no CUDA headers: the graph builder calls this, loads `kernel` by
 * name from the embedded fatbin (cuLibraryLoadData / cuLibraryGetKernel),
 * allocates `workspace_bytes` per node and launches with grid/block/smem.
 * See the selection table in ours.c and docs/kernels.md.
 */
#ifndef TPG_GEMM_SELECT_H
#define TPG_GEMM_SELECT_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tpg_kernel_launch {
  const char *kernel;        /* extern "C" entry point name in the fatbin        */
  unsigned grid[3], block[3];
  unsigned smem_bytes;       /* dynamic shared memory. When > 48 KB the launcher
                                must first set CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_
                                SHARED_SIZE_BYTES to this value on the function  */
  size_t workspace_bytes;    /* per-node workspace; zero it once when allocated */
  size_t workspace_zeroed;   /* its first bytes that the kernel leaves zero on
                                exit (counters), so no memset between launches;
                                the rest is scratch                            */
  int split_k;               /* value for tpg_gemm_args.split_k: 1,
                                TPG_SPLITK_STREAM (stream-K, sm90 TMA) or
                                TPG_SPLITK_CLUSTER (K over a cluster, "_kc<S>") */
  unsigned cluster;          /* > 1: launch with clusters of (cluster, cluster_y, 1) CTAs
                                (CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION; a graph
                                node: CU_KERNEL_NODE_ATTRIBUTE_CLUSTER_DIMENSION);
                                0: none asked (the _c2 kernels compile theirs in) */
  unsigned cluster_y;        /* 0 or 1: (cluster, 1, 1); > 1: the CUTLASS kernels'
                                clusters along N (cluster is then >= 1)       */
  int cutlass;               /* 0: one of our kernels (it takes tpg_gemm_args, or
                                tpg_gemm_tma_args when maps are described);
                                i + 1: CUTLASS kernel i (lib/gemm/cutlass.h),
                                whose argument block tpg_gemm_cutlass_args
                                tpg_cutlass_fill builds with these two: */
  int cutlass_mode;          /* TPG_CUTLASS_DP / _SK / _SPLIT                 */
  int cutlass_splits;        /* K ranges with TPG_CUTLASS_SPLIT                 */
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

/* Y[m,n] = epi(X[m,k] * W[n,k]^T). dtype: TPG_KDT_F16 or TPG_KDT_BF16;
 * epilogue: TPG_EPI_*; sm_arch: 10*major+minor (90 for H100/H200);
 * num_sms: multiprocessor count (132 on H200).
 * Returns 0 and fills *out, or nonzero with the failed rule in `why`.
 * Also required, not checkable here (the caller checks): x, w, y, bias,
 * residual 16-byte aligned; ldx, ldw, ldy, ldr multiples of 8 with
 * ldx >= k, ldw >= k, ldy >= n, ldr >= n. */
int tpg_gemm_select(int m, int n, int k, int dtype, int epilogue, int sm_arch, int num_sms,
                    tpg_kernel_launch *out, char *why, size_t whylen);

/* ---- opt-in TMA path (Hopper prefill, ~1.5x the cp.async kernel) --------
 * Kernels whose name contains "sm90tma" take tpg_gemm_tma_args
 * (kernels/tpg_tma_args.h): three CUtensorMap that the caller encodes with
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

/* The Y map of every TMA kernel (the epilogue's stores; the dtype is the
 * operands', also for F32_PARTIAL, whose kernels do not read it): rank 2
 * {n, m}, stride ldy * 2 bytes, box {32, 64}, swizzle 64. */
void tpg_gemm_y_map(int m, int n, int ldy, tpg_tma_encode *y_map);

/* Like tpg_gemm_select, but on sm_arch 90 for m > 8 it may pick the TMA
 * kernels (the rule derived from the model zoo, ours_rule.c and
 * bench/zoo_rules.py) and then fills x_map/w_map (rank 0 otherwise). A pure
 * function of its arguments: every rank picks the same. ldx/ldw: leading
 * dimensions. streamk (TMA picks only): 0 never, 1 when the cost model says
 * it pays, 2 always (tests):
 * stream-K sets split_k = TPG_SPLITK_STREAM and a workspace whose first
 * workspace_zeroed bytes (counters) the kernel leaves zero. */
int tpg_gemm_select_tma(int m, int n, int k, int dtype, int epilogue, int sm_arch, int num_sms, int ldx,
                        int ldw, int streamk, tpg_kernel_launch *out, tpg_tma_encode *x_map, tpg_tma_encode *w_map,
                        char *why, size_t whylen);

/* ---- forced variants (tuner candidates, gemm_bench A/B) ------------------
 * A variant names a kernel family and tile instead of letting the heuristic
 * choose. Names (tpg_gemm_variant_name / _parse, stable: they key cache
 * files): "heuristic" (= tpg_gemm_select_tma with streamk 1), "gemv" (the
 * decode GEMV, m <= 64, with the selector's number of K ranges), "gemv_s<S>"
 * (the same with S K ranges, 1..16), "gemv_sk" (its stream-K twin, m <= 16),
 * "tma_m<BM>_n<BN>[_sw][_c2|_cn2][_sk]" (sm_90 TMA kernel, BM 64|128, BN
 * 64|128|256 (192 with BM 128), with stream-K over the last or only wave;
 * _sw: swapped operands, BM 16|32|64 tokens by BN 64|128|256 W rows; _c2 /
 * _cn2: clusters of two, below), "..._k<S>" (aligned split-K, below) and
 * "tma_m128_n<BN>_kc<S>" (K over a cluster of S CTAs, below), and the
 * CUTLASS family: "cutlass_<name>" (data-parallel), "cutlass_<name>_sk"
 * (stream-K), "cutlass_<name>_k<S>" (split-K), <name> a row of
 * kernels/gemm/sm90_cutlass_list.h (lib/gemm/cutlass.h). */
enum {
  TPG_GEMM_VAR_HEURISTIC = 0,
  TPG_GEMM_VAR_GEMV = 1,
  TPG_GEMM_VAR_GEMV_SK = 2,
  TPG_GEMM_VAR_TMA = 3,
  TPG_GEMM_VAR_CUTLASS = 4
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
} tpg_gemm_variant;

#define TPG_GEMM_MAX_CANDIDATES 64

/* Writes the variant's name; nonzero if it does not fit or kind is unknown. */
int tpg_gemm_variant_name(const tpg_gemm_variant *v, char *buf, size_t len);
/* Parses a name written by tpg_gemm_variant_name; nonzero if it is not one. */
int tpg_gemm_variant_parse(const char *s, tpg_gemm_variant *v);

/* Like tpg_gemm_select_tma, but the kernel family and tile are forced. The
 * shape rules are tpg_gemm_select's; a variant that cannot run the shape is
 * refused with the reason (gemv for m > 64 or more K ranges than 32-wide
 * chunks of k, gemv_sk for m > 16, TMA off
 * sm_90). Maps are filled for TMA variants (rank 0 otherwise). */
int tpg_gemm_select_variant(int m, int n, int k, int dtype, int epilogue, int sm_arch, int num_sms, int ldx, int ldw,
                            const tpg_gemm_variant *v, tpg_kernel_launch *out, tpg_tma_encode *x_map,
                            tpg_tma_encode *w_map, char *why, size_t whylen);

/* The candidate variants worth timing for a shape, the heuristic first;
 * writes at most cap of them to list (list may be NULL) and returns how many
 * were written (at most TPG_GEMM_MAX_CANDIDATES exist). The CUTLASS ones
 * (lib/gemm/cutlass.c) come right after the heuristic, so a tuner on a
 * budget times them first; they are listed whatever the dtype, and
 * tpg_gemm_select_variant refuses them for f16. */
int tpg_gemm_candidates(int m, int n, int k, int epilogue, int sm_arch, int num_sms, tpg_gemm_variant *list, int cap);

/* ---- families: ours, CUTLASS, and the rule between them (lib/gemm/select.c)
 * TPG_GEMM_FAMILY_OURS: tpg_gemm_select_tma (our kernels only).
 * TPG_GEMM_FAMILY_CUTLASS: the CUTLASS kernel of the shape's class in the
 *   CUTLASS table (lib/gemm/family_table.inc) where one can run it (sm_90,
 *   bf16, a fused epilogue, a class that names one), ours elsewhere: an
 *   A/B switch.
 * TPG_GEMM_FAMILY_AUTO (the default): the auto table's choice per class,
 *   ours where it names none. Both tables are written from a zoo run by
 *   bench/family_rules.py; until a run decides, the auto table names ours
 *   everywhere, so the default picks exactly tpg_gemm_select_tma's kernels. */
enum { TPG_GEMM_FAMILY_AUTO = 0, TPG_GEMM_FAMILY_OURS = 1, TPG_GEMM_FAMILY_CUTLASS = 2 };

/* The deterministic rule with a family: as tpg_gemm_select_tma, plus
 * `family`. A pure function of its arguments (every rank picks the same). */
int tpg_gemm_select_rule(int m, int n, int k, int dtype, int epilogue, int sm_arch, int num_sms, int ldx, int ldw,
                         int streamk, int family, tpg_kernel_launch *out, tpg_tma_encode *x_map, tpg_tma_encode *w_map,
                         char *why, size_t whylen);

/* Which family a variant runs: TPG_GEMM_FAMILY_CUTLASS for CUTLASS
 * variants, TPG_GEMM_FAMILY_OURS for the others (the heuristic: AUTO). */
int tpg_gemm_variant_family(const tpg_gemm_variant *v);

/* Where the family tables came from (family_table.inc), for reports. */
const char *tpg_gemm_family_table_source(void);

#ifdef __cplusplus
}
#endif
#endif
