/* common.h - helpers the node kinds share: pointers of views, launch grids,
 * adding a kernel node behind (possibly programmatic) edges, capturing a
 * child graph, DOT text. Below every kind file and above plan.c only; no
 * kind logic lives here.
 */
#ifndef TPG_NODES_COMMON_H
#define TPG_NODES_COMMON_H

#include "graphbuild/graph.h"

static inline size_t tpg_slot_esize(const tpg_plan *p, tpg_slot s) { return tpg_dtype_size(p->slots[s - 1].dtype); }

/* The device (or pinned host) address of view v under bind; 0 for no view. */
static inline CUdeviceptr tpg_view_ptr(const tpg_plan *p, void **bind, tpg_view v) {
  if (v.slot == TPG_SLOT_NONE) return 0;
  return (CUdeviceptr)(uintptr_t)bind[v.slot - 1] + (CUdeviceptr)(v.offset * tpg_slot_esize(p, v.slot));
}
#define TPG_VPTR(c, v) ((void *)(uintptr_t)tpg_view_ptr((c)->p, (c)->bind, (v)))

/* Blocks for `work` items at `per_block` each, clamped to [1, max_blocks]. */
TPG_HIDDEN unsigned tpg_grid_for(size_t work, unsigned per_block, unsigned max_blocks);

/* The kernels' dtype code (TPG_KDT_*) of a tpg_dtype. */
TPG_HIDDEN int32_t tpg_kdt_of(tpg_dtype dt);

/* A 1-D launch of `blocks` x `threads` of kernel `func` whose only parameter
 * is the struct at `args`; kparams is the one-element array it points through. */
TPG_HIDDEN void tpg_kernel_params(CUDA_KERNEL_NODE_PARAMS *kp, void **kparams, void *args);

/* Adds kernel node kp as gn->cu[gn->ncu++] behind deps, with their edge data
 * when some are programmatic. */
TPG_HIDDEN tpg_status tpg_add_kernel_node(const tpg_nctx *c, CUgraph graph, const tpg_deps *deps,
                                          const CUDA_KERNEL_NODE_PARAMS *kp, const char *what);

/* Reports a failed driver call made for node c (names the call and the node). */
TPG_HIDDEN tpg_status tpg_node_cu_fail(const tpg_nctx *c, CUresult r, const char *call);

/* Launches kp on stream (eager mode). */
TPG_HIDDEN tpg_status tpg_launch_params(const CUDA_KERNEL_NODE_PARAMS *kp, CUstream stream);

/* Launches kp on stream by cuLaunchKernelEx with the cluster shape
 * cluster[3] ({0, 0, 0}: none; lib/device.h tpg_launch_ex) for node c, eager
 * or under capture; a failure names the node. For kernels that do not
 * compile their cluster shape in (an engine's kernel, a GEMM's "_kc<S>"). */
TPG_HIDDEN tpg_status tpg_launch_params_ex(const tpg_nctx *c, const CUDA_KERNEL_NODE_PARAMS *kp,
                                           const unsigned cluster[3], CUstream stream);

/* Gives node c's last kernel node the cluster shape cluster[3]
 * (CU_KERNEL_NODE_ATTRIBUTE_CLUSTER_DIMENSION), as the launch above. */
TPG_HIDDEN tpg_status tpg_node_set_cluster(const tpg_nctx *c, const unsigned cluster[3]);

/* Stream-captures what issue() enqueues on the graph's private stream into a
 * new graph (caller owns *out): how child-graph kinds (NCCL collectives,
 * library calls) become one node. */
typedef tpg_status (*tpg_issue_fn)(const tpg_nctx *c, CUstream stream);
TPG_HIDDEN tpg_status tpg_capture_child(const tpg_nctx *c, tpg_issue_fn issue, CUgraph *out);

/* The retarget operation of kinds that are one kernel node without launch
 * attributes (kind.h): its exec setter takes the whole launch. */
TPG_HIDDEN int tpg_retarget_kernel(const tpg_node_rec *a, const tpg_gnode *ga, const tpg_node_rec *b,
                                   const tpg_gnode *gb);

/* DOT text (NUL-terminated while it fits; len counts everything). */
TPG_HIDDEN void tpg_sb_printf(tpg_sbuf *s, const char *fmt, ...) TPG_PRINTF(2, 3);
TPG_HIDDEN void tpg_sb_quoted(tpg_sbuf *s, const char *text);
/* "\nrole=slotname+offset" for a set view; nothing for an empty one. */
TPG_HIDDEN void tpg_sb_view(tpg_sbuf *s, const tpg_plan *p, const char *role, tpg_view v);

#endif
