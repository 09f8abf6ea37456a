/* graph.h - a plan materialized on one GPU: the CUDA graph, its exec, and our
 * own copy of every node's parameters.
 *
 * We never read parameters back from CUDA (no cuGraph*GetParams): the copy in
 * tpg_gnode is the truth, and a rebind rewrites it and hands it to the exec
 * setters. Node handles always refer to the template graph the exec was
 * instantiated from, which is kept for the exec's life (the per-node exec
 * setters take nodes of that graph, also after a whole-graph update).
 */
#ifndef TPG_GRAPH_H
#define TPG_GRAPH_H

#include "graphbuild/plan.h"
#include "kernels/tpg_kargs.h"
#include "kernels/tpg_tma_args.h"
#include "lib/comm.h"
#include "lib/gemm_select.h"

typedef struct tpg_gnode {
  CUgraphNode node;             /* node of the template graph */
  /* kernel nodes */
  CUDA_KERNEL_NODE_PARAMS kp;
  void *kparams[1];             /* -> args: every kernel takes one struct */
  union {
    tpg_gemm_tma_args gemm_tma; /* first: the union starts 64-byte aligned */
    tpg_gemm_args gemm;
    tpg_axpby_args axpby;
    tpg_concat_args concat;
    tpg_allreduce_args ar;
  } args;
  int fast;                     /* all-reduce run by our kernel (not NCCL)    */
  /* NCCL all-reduce with an epilogue: one more kernel node after the child */
  int has_epi;
  CUgraphNode epi_node;         /* of the template graph (explicit mode)      */
  CUDA_KERNEL_NODE_PARAMS epi_kp;
  void *epi_kparams[1];         /* -> epi                                     */
  tpg_ar_epilogue_args epi;
  CUdeviceptr cap_send, cap_recv; /* what the NCCL child was captured with:
                                   rebinding only epilogue views re-captures nothing */
  int tma;                      /* GEMM kernel takes tensor maps (args.gemm_tma) */
  tpg_tma_encode xe, we;        /* how to (re-)encode them                       */
  const char *kernel;           /* entry point name */
  CUdeviceptr workspace;        /* owned, GEMM split-K */
  size_t workspace_bytes;
  /* memset / memcpy nodes */
  CUDA_MEMSET_NODE_PARAMS ms;
  CUDA_MEMCPY3D cp;
} tpg_gnode;

struct tpg_graph {
  unsigned magic;
  tpg_plan *plan;               /* owned copy */
  tpg_comm *comm;               /* borrowed */
  tpg_dev dev;                  /* retains the primary context */
  void **bind;                  /* bind[s - 1]: pointer bound to slot s */
  int *users, *users_at;        /* CSR: nodes that use slot s: users[users_at[s-1] .. users_at[s]) */
  int *order;                   /* topological order of plan nodes */
  tpg_gnode *nodes;             /* one per plan node */
  CUgraph graph;                /* template, owned */
  CUgraphExec exec;             /* owned */
  CUstream cap_stream;          /* private: NCCL captures */
  CUevent done;                 /* recorded after each launch */
  int launched;
  int ncoll;                    /* collective nodes (NCCL or ours)            */
  int counted;                  /* holds one of comm->graphs */
  tpg_graph_mode mode;
  unsigned char *owned;         /* owned[s - 1]: 1 cuMemAlloc'ed scratch, 2 ncclMemAlloc'ed */
  ncclWindow_t *wins;           /* wins[s - 1]: NCCL symmetric window of scratch slot s */
  unsigned flags;
  int pdl;                      /* TPG_GRAPH_PDL in effect: explicit mode, sm_90+ */
  int streamk;                  /* TPG_GEMM_STREAMK at creation: 0, 1 or 2 */
  tpg_graph_info info;
};

/* Checks one binding against its slot: memory kind, device, alignment, and
 * that the allocation covers the slot. */
TPG_HIDDEN tpg_status tpg_check_binding(const tpg_graph *g, const tpg_plan *p, tpg_slot slot, void *ptr,
                                        const char *fn, int index);

/* The node later nodes depend on: the epilogue node after an NCCL
 * all-reduce that has one, else the node itself. */
static inline CUgraphNode tpg_gnode_tail(const tpg_gnode *gn) { return gn->epi_node ? gn->epi_node : gn->node; }

/* Fills nodes[i]'s parameters from plan p and the pointers in bind. */
TPG_HIDDEN tpg_status tpg_fill_node(tpg_graph *g, const tpg_plan *p, void **bind, int i, tpg_gnode *gn);

/* The node array: 64-byte aligned (tensor maps live in it), zeroed. */
TPG_HIDDEN tpg_gnode *tpg_gnodes_alloc(int n);

/* SMs a GEMM node may use: the GPU's less its sm_reserve (at least half). */
TPG_HIDDEN int tpg_gemm_sms(const tpg_graph *g, const tpg_gemm_desc *d);

/* Issues every node on stream in topological order (eager mode, and what the
 * capture mode captures). */
TPG_HIDDEN tpg_status tpg_run_nodes(tpg_graph *g, CUstream stream);

/* Rewrites only the buffer pointers of nodes[i] from g->bind: the rebind
 * path, which keeps the kernel, launch shape and everything else. */
TPG_HIDDEN tpg_status tpg_patch_node(const tpg_graph *g, int i);

/* TPG_GEMM_STREAMK as tpg_gemm_select_tma's streamk (default 1). */
TPG_HIDDEN int tpg_gemm_streamk_env(void);

/* The GEMM kernel for a node: tpg_gemm_select_tma on this GPU (0 = ok). */
TPG_HIDDEN int tpg_gemm_pick(const tpg_graph *g, const tpg_gemm_desc *d, tpg_kernel_launch *l, tpg_tma_encode *xe,
                             tpg_tma_encode *we, char *why, size_t whylen);

/* Captures collective node i of plan p from NCCL into a new graph (caller owns). */
TPG_HIDDEN tpg_status tpg_capture_collective(tpg_graph *g, const tpg_plan *p, void **bind, int i, CUgraph *out);

/* Programmatic edges of a CUDA graph (cuGraphGetEdges with edge data). */
TPG_HIDDEN tpg_status tpg_count_programmatic_edges(CUgraph graph, int *out);

/* Builds a CUDA graph of plan p with bind; fills nodes[] (params + handles).
 * Kernel functions and workspaces come from g. */
TPG_HIDDEN tpg_status tpg_materialize(tpg_graph *g, const tpg_plan *p, void **bind, tpg_gnode *nodes,
                                      CUgraph *out);

#endif
