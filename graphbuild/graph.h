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

#include "graphbuild/nodes/kind.h"
#include "lib/comm.h"

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
  int export_stale;             /* an NCCL child was re-captured: the template
                                   no longer matches the exec (export.c) */
  int template_dirty;           /* rebound since the template was last brought
                                   up to date (tpg_graph_export does it) */
};

/* ---- bind.c ---- */
/* Checks one binding against its slot: memory kind, device, alignment, and
 * that the allocation covers the slot. */
TPG_HIDDEN tpg_status tpg_check_binding(const tpg_graph *g, const tpg_plan *p, tpg_slot slot, void *ptr,
                                        const char *fn, int index);

/* ---- materialize.c ---- */
/* The node array: 64-byte aligned (tensor maps live in it), zeroed. */
TPG_HIDDEN tpg_gnode *tpg_gnodes_alloc(int n);
/* Each node's kind releases what it took (workspaces, ext), then the array. */
TPG_HIDDEN void tpg_gnodes_free(tpg_graph *g, tpg_gnode *nodes, int n);
/* Every node's kind prepares it (kernel choice, workspace) in topological order. */
TPG_HIDDEN tpg_status tpg_prepare_nodes(tpg_graph *g, const tpg_plan *p, tpg_gnode *nodes);
/* Fills every node's parameters from plan p and bind (no CUDA graph). */
TPG_HIDDEN tpg_status tpg_fill_nodes(tpg_graph *g, const tpg_plan *p, void **bind, tpg_gnode *nodes);
/* Programmatic edges of a CUDA graph (cuGraphGetEdges with edge data). */
TPG_HIDDEN tpg_status tpg_count_programmatic_edges(CUgraph graph, int *out);
/* Builds a CUDA graph of plan p with bind; fills nodes[] (params + handles). */
TPG_HIDDEN tpg_status tpg_materialize(tpg_graph *g, const tpg_plan *p, void **bind, tpg_gnode *nodes,
                                      CUgraph *out);

/* ---- eager.c ---- */
/* Issues every node on stream in topological order (eager mode, and what
 * the capture mode captures). */
TPG_HIDDEN tpg_status tpg_run_nodes(tpg_graph *g, CUstream stream);

/* ---- export.c ---- */
/* After a node was patched (rebind, explicit mode): the template's kernel,
 * memset and memcpy nodes are brought to the exec's parameters at the next
 * tpg_graph_export. nccl_recaptured: the patch re-captured an NCCL child,
 * which the template cannot follow. */
TPG_HIDDEN void tpg_template_mark(tpg_graph *g, int nccl_recaptured);
/* After a whole-graph update applied graph `ng` (materialized into `fresh`)
 * to the exec: the template takes its parameters likewise. */
TPG_HIDDEN tpg_status tpg_template_update(tpg_graph *g, const tpg_plan *p, const tpg_gnode *fresh);
/* tpg_graph_launch on a capturing stream: the template added as one child
 * node of the capture (*into = 1), an eager graph whose work the caller
 * issues into the capture (*into = 2), or no capture (*into = 0). */
TPG_HIDDEN tpg_status tpg_launch_into_capture(tpg_graph *g, CUstream stream, int *into);

/* ---- nodes/gemm.c ---- */
/* TPG_GEMM_STREAMK as tpg_gemm_select_tma's streamk (default 1). */
TPG_HIDDEN int tpg_gemm_streamk_env(void);

#endif
