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

#include "graphbuild/nodes/collective_select.h"
#include "graphbuild/nodes/kind.h"
#include "graphbuild/state.h"
#include "lib/comm.h"
#include "lib/gemm/tune.h"
#include "lib/handle.h"

/* Memory the graph owns for one scratch slot (scratch.c). */
typedef struct tpg_scratch {
  void *ptr;
  size_t bytes;                 /* as allocated (rounded up) */
  unsigned char how;            /* 0 none, or ptr borrowed from a set's arena;
                                   1 cuMemAlloc, 2 ncclMemAlloc + window */
  ncclWindow_t win;
} tpg_scratch;

/* GEMM workspace lanes (workspace.c): one buffer shared by nodes that never
 * run at the same time, [counters | scratch] around its boundary `at`. */
typedef struct tpg_ws_lane {
  size_t zero, tail;            /* its nodes' largest counters and scratch (bytes) */
  int alone;                    /* one node's (workspace_private): never in a set's arena */
  CUdeviceptr at;               /* placed: the boundary */
  size_t zero_cap, tail_cap;    /* placed: the room before and after it */
} tpg_ws_lane;

/* A node array's lanes: `shared` ones largest first, then those alone. */
typedef struct tpg_ws_plan {
  tpg_ws_lane *lane;
  int n, shared;
} tpg_ws_plan;

/* Tuning resolved once at creation from tpg_graph_config and the
 * environment (tuning.c). */
typedef struct tpg_tuning {
  tpg_allreduce_tuning ar;
  int streamk;                  /* tpg_gemm_select_tma's streamk: 0 never, 1 rule, 2 always */
  int gemm_family;              /* TPG_GEMM_FAMILY_* ($TPG_GEMM_FAMILY; lib/gemm/select.h) */
  int32_t pdl_prefetch;         /* bytes per W row, multiple of 16 */
  int gemm_tune;                /* 1: time GEMM candidates at creation */
  const char *gemm_tune_cache;  /* borrowed during create only (cfg or environment) */
  double gemm_tune_budget_us;   /* per graph */
  int gemm_ws_share;            /* 1: GEMM workspaces shared (workspace.c); 0: each
                                   node its own ($TPG_GEMM_WORKSPACE_SHARE, A/B runs) */
  int pdl_bodies;               /* 1 (default): programmatic edges inside conditional
                                   bodies too ($TPG_GRAPH_PDL_BODIES, materialize.c) */
} tpg_tuning;

struct tpg_graph {
  unsigned magic;
  tpg_plan *plan;               /* owned copy */
  tpg_comm *comm;               /* borrowed */
  tpg_dev dev;                  /* retains the primary context */
  tpg_state *st;                /* derived from plan (state.h); replaced whole by an update */
  void **bind;                  /* bind[s - 1]: pointer bound to slot s (ours for scratch) */
  tpg_gnode *nodes;             /* one per plan node; replaced whole by an update */
  CUgraph graph;                /* template, owned */
  CUgraphExec exec;             /* owned */
  CUstream cap_stream;          /* private: NCCL captures */
  CUevent done;                 /* recorded after each launch */
  int launched;
  int counted;                  /* holds one of comm->graphs */
  tpg_graph_mode mode;
  tpg_scratch *scratch;         /* scratch[s - 1]: the memory the graph owns for scratch slot s */
  unsigned flags;
  int pdl;                      /* TPG_GRAPH_PDL in effect: explicit mode, sm_90+ */
  tpg_tuning tune;
  tpg_gemm_tune_graph gemm_tune;     /* the GEMM tuner's policy and counts (nodes/gemm.c) */
  struct tpg_gemm_dev_timer *gemm_timer; /* created at the first timing, destroyed once the
                                            nodes are prepared (create only) */
  tpg_graph_info info;
  int export_stale;             /* an NCCL child was re-captured: the template
                                   no longer matches the exec (export.c) */
  CUgraphConditionalHandle *cond_handles; /* [plan->nconds]: made against `graph` at
                                   materialize for the conditions a conditional
                                   node uses (0: unused); NULL in other modes */
  int template_dirty;           /* rebound since the template was last brought
                                   up to date (tpg_graph_export does it) */
  int in_set;                   /* 1: a graph set's (graphset.c), destroyed only by
                                   it; 2: its one retargeted exec, whose plan, state
                                   and nodes are the picked size's (no update) */
  tpg_ws_plan ws;               /* the GEMM nodes' workspace lanes (workspace.c) */
  CUdeviceptr ws_mem;           /* owned: the lanes not in a set's arena */
};

/* ---- graph.c ---- */
/* What a graph set (graphset.c) gives a graph it creates: the scratch slots
 * are laid out from `arena`'s start (the set's; at most arena_bytes; state.h)
 * instead of being allocated, except NCCL symmetric windows; the shared
 * workspace lanes lie at `ws`, lane k where ws_caps places it (workspace.c),
 * NULL: in the graph's own memory. */
typedef struct tpg_graph_ext {
  CUdeviceptr arena;
  size_t arena_bytes;
  CUdeviceptr ws;
  const tpg_ws_plan *ws_caps;
} tpg_graph_ext;
/* tpg_graph_create in two steps, so that a set sizes its arena by every
 * size's workspace lanes: begin does everything before memory is laid out
 * (the nodes' kernel choices and lanes: g->ws); finish lays it out (ext as
 * above, or NULL: all the graph's own), builds and instantiates. Either
 * frees the graph when it fails (messages under tpg_graph_create). */
TPG_HIDDEN tpg_status tpg_graph_begin(const tpg_plan *plan, const tpg_graph_config *cfg, tpg_graph **out);
TPG_HIDDEN tpg_status tpg_graph_finish(tpg_graph *g, const tpg_graph_ext *ext);

/* ---- workspace.c ---- */
/* The lanes of the nodes of plan p (state st), prepared into nodes[] (each
 * one's res.need*), for graph g (its mode and PDL decide what is ordered);
 * sets each node's res.lane. */
TPG_HIDDEN tpg_status tpg_ws_plan_build(const tpg_graph *g, const tpg_state *st, const tpg_plan *p,
                                        tpg_gnode *nodes, tpg_ws_plan *out);
TPG_HIDDEN void tpg_ws_plan_free(tpg_ws_plan *wp);
/* Bytes of lanes [from, to) one after another (each a whole 256-byte block count). */
TPG_HIDDEN size_t tpg_ws_bytes(const tpg_ws_plan *wp, int from, int to);
/* Widens caps (caps->n = caps->shared lanes) so that lane k holds wp's shared lane k. */
TPG_HIDDEN tpg_status tpg_ws_caps_merge(tpg_ws_plan *caps, const tpg_ws_plan *wp);
/* Places wp's lanes, shared lane k at `shared` + caps' lanes before k (its
 * room caps' lane k; caps may be wp), the lanes alone one after another from
 * `own`, and points nodes[0..n) at their lanes (res.at, caps). */
TPG_HIDDEN void tpg_ws_place(tpg_ws_plan *wp, const tpg_ws_plan *caps, CUdeviceptr shared, CUdeviceptr own,
                             tpg_gnode *nodes, int nnodes);
/* At creation: memory for the graph's lanes that are its own (all, or with
 * ext->ws_caps those alone), zeroed on its stream, counted in its info, and
 * every node placed (tpg_ws_place). */
TPG_HIDDEN tpg_status tpg_ws_alloc(tpg_graph *g, const tpg_graph_ext *ext);
/* `bytes` of device memory for lanes, zeroed on `stream` (0: none needed);
 * the caller frees it. */
TPG_HIDDEN tpg_status tpg_ws_mem(size_t bytes, CUstream stream, CUdeviceptr *out);

/* ---- bind.c ---- */
/* Checks one binding against its slot: memory kind, device, alignment, and
 * that the allocation covers the slot. Messages name what[index] (the
 * caller's array: "cfg->bindings", "bindings"); index < 0: a binding the
 * graph kept, named by its slot. */
TPG_HIDDEN tpg_status tpg_check_binding(const tpg_graph *g, const tpg_plan *p, tpg_slot slot, void *ptr,
                                        const char *fn, const char *what, int index);
/* No slot is bound twice in b[0..n) (slots already checked to be the plan's);
 * the message names `what`[i] and the first binding of that slot. */
TPG_HIDDEN tpg_status tpg_bindings_unique(const tpg_plan *p, const tpg_binding *b, int n, const char *fn,
                                          const char *what);

/* ---- scratch.c ---- */
/* Allocates `bytes` for scratch slot q (0-based) of p: an NCCL symmetric
 * window when sym (a collective call). */
TPG_HIDDEN tpg_status tpg_scratch_alloc(tpg_graph *g, const tpg_plan *p, int q, size_t bytes, int sym,
                                        tpg_scratch *out);
TPG_HIDDEN void tpg_scratch_free(tpg_graph *g, tpg_scratch *s);
/* Every scratch slot the plan uses, at creation: laid out from a set's arena
 * (ext; NULL: none) where it fits and is no symmetric window, else
 * allocated (counted in info.workspace_bytes); bound into g->bind. */
TPG_HIDDEN tpg_status tpg_scratch_place(tpg_graph *g, const tpg_graph_ext *ext);

/* ---- fingerprint.c ---- */
/* A plan with colls collectives that tpg_plan_set_ranks said is sharded for
 * R > 1 ranks needs a comm (the graph's, or NULL) of exactly R ranks; fn and
 * what ("cfg->comm", "the graph's comm") go into the message. */
TPG_HIDDEN tpg_status tpg_plan_comm_check(const tpg_plan *p, int colls, const tpg_comm *comm, const char *fn,
                                          const char *what);

/* Ranks compare their collectives (all ranks call it at the same point);
 * nodes NULL: from the plan alone, else with what fill resolved. `when`
 * goes into the message ("at creation", ...). */
TPG_HIDDEN tpg_status tpg_fingerprint_check(tpg_graph *g, const tpg_state *st, const tpg_plan *p,
                                            const tpg_gnode *nodes, const char *when);

/* ---- materialize.c ---- */
/* The node array: 64-byte aligned (tensor maps live in it), zeroed. */
TPG_HIDDEN tpg_gnode *tpg_gnodes_alloc(int n);
/* Each node's kind releases what it took (workspaces, ext), then the array. */
TPG_HIDDEN void tpg_gnodes_free(tpg_graph *g, tpg_gnode *nodes, int n);
/* Every node's kind prepares it (kernel choice, workspace need) in topological order. */
TPG_HIDDEN tpg_status tpg_prepare_nodes(tpg_graph *g, const tpg_state *st, const tpg_plan *p, tpg_gnode *nodes);
/* Fills every node's parameters from plan p and bind (no CUDA graph), then
 * compares the resolved collectives across ranks. */
TPG_HIDDEN tpg_status tpg_fill_nodes(tpg_graph *g, const tpg_state *st, const tpg_plan *p, void **bind,
                                     tpg_gnode *nodes);
/* Programmatic edges of a CUDA graph (cuGraphGetEdges with edge data). */
TPG_HIDDEN tpg_status tpg_count_programmatic_edges(CUgraph graph, int *out);
/* Builds a CUDA graph of plan p (state st) with bind: fills nodes[]
 * (tpg_fill_nodes), then adds each node's CUDA node(s). */
TPG_HIDDEN tpg_status tpg_materialize(tpg_graph *g, const tpg_state *st, const tpg_plan *p, void **bind,
                                      tpg_gnode *nodes, CUgraph *out);

/* Adds the nodes of one scope (the top level: parent -1; or body `body` of
 * conditional node `parent`) to `graph`, in topological order, each behind
 * its dependencies (nodes[] already filled). The conditional kind calls it
 * for each body graph CUDA gave it. */
TPG_HIDDEN tpg_status tpg_materialize_scope(tpg_graph *g, const tpg_state *st, const tpg_plan *p, void **bind,
                                            tpg_gnode *nodes, int parent, int body, CUgraph graph);

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

/* ---- tuning.c ---- */
/* The tuning of a graph from cfg (its tuning fields, zero-filled for an
 * older header's config) overridden by the environment; a malformed or
 * out-of-range value is an error from fn naming the variable or field. */
TPG_HIDDEN tpg_status tpg_tuning_resolve(const tpg_graph_config *cfg, tpg_tuning *out, const char *fn);

/* Whether edges in the scope of conditional node `parent` (-1: the top
 * level) may be programmatic: TPG_GRAPH_PDL on an sm_90+ explicit graph
 * (g->pdl), and inside bodies too unless $TPG_GRAPH_PDL_BODIES=0. One rule
 * for the edges made (materialize.c) and the order they promise
 * (workspace.c). */
static inline int tpg_pdl_in_scope(const tpg_graph *g, int parent) {
  return g->pdl && (parent < 0 || g->tune.pdl_bodies);
}

/* A live graph: in the live-handle set (lib/handle.h) before anything is
 * read through the pointer, so a destroyed handle is refused, never read. */
static inline int tpg_graph_live(const tpg_graph *g) {
  return tpg_handle_live(g, TPG_MAGIC_GRAPH) && g->magic == TPG_MAGIC_GRAPH;
}

#endif
