/* kind.h - the node-kind table: every node kind implements one set of
 * operations, and every phase (plan checks, DOT, materialize, launch in
 * eager/capture mode, rebind, update, fingerprint) is a loop that calls
 * through this table. No code outside graphbuild/nodes/ looks at a node's
 * kind beyond indexing tpg_kind().
 *
 * How to add a kind (docs/design.md, "Node kinds"):
 * 1. a TPG_NK_* value in plan.h and the descriptor in tpg_node_rec's union;
 * 2. one file graphbuild/nodes/<kind>.c defining `const tpg_kind_ops
 *    tpg_kind_<kind>` (its static functions implement the operations below);
 * 3. one row in the table in kind.c, and the file in graphbuild/BUILD;
 * 4. the public builder (tpg_plan_add_<kind>) in plan_add.c: it fills a
 *    tpg_node_rec and calls the kind's check before adding it.
 *
 * Per-node state: tpg_gnode holds what today's kinds need inline (kernel
 * parameters, memset/memcpy parameters) and `ext`, a variable-size block a
 * kind may allocate in prepare or fill (an engine kernel's argument buffer)
 * and frees in release. A node may become several CUDA nodes (an NCCL
 * all-reduce and its epilogue kernel): add records them in cu[], and later
 * nodes depend on the last one (tpg_gnode_tail).
 *
 * The one rule that keeps fill and patch from disagreeing: each kind writes a
 * node's pointer fields in one function (its set_ptrs), which fill calls after
 * setting everything else and patch calls before handing the parameters to
 * the exec setter.
 */
#ifndef TPG_NODES_KIND_H
#define TPG_NODES_KIND_H

#include <cuda.h>

#include "graphbuild/plan.h"
#include "kernels/tpg_cutlass_args.h"
#include "kernels/tpg_kargs.h"
#include "kernels/tpg_tma_args.h"
#include "lib/gemm/select.h"

struct tpg_graph;

/* CUDA nodes one plan node may become (the NCCL all-reduce + epilogue: 2). */
#define TPG_GNODE_MAX_CU 4

/* A slot range a node touches: elements [v.offset, v.offset + count) of
 * v.slot. `count` is what the node needs at plan level (a collective's
 * per-rank send/recv range grows with the rank count at create time). */
typedef struct tpg_view_use {
  tpg_view v;
  size_t count;
  int writes;      /* the node writes (part of) this range */
} tpg_view_use;

/* Materialized state of one plan node, built by fill, kept by the graph. */
typedef struct tpg_gnode {
  CUgraphNode cu[TPG_GNODE_MAX_CU]; /* nodes of the template graph, in add order */
  int ncu;
  CUgraph *bodies;              /* a conditional node's body graphs (CUDA's array) */
  int nbodies;
  /* kernel nodes */
  CUDA_KERNEL_NODE_PARAMS kp;
  void *kparams[1];             /* -> args: every kernel takes one struct */
  union {
    tpg_gemm_cutlass_args gemm_cutlass; /* first: the union starts 128-byte aligned */
    tpg_gemm_tma_args gemm_tma;
    tpg_gemm_args gemm;
    tpg_axpby_args axpby;
    tpg_concat_args concat;
    tpg_allreduce_args ar;
  } args;
  int fast;                     /* all-reduce run by our kernel (not NCCL)    */
  int solo;                     /* a collective on one rank (collective.c):
                                   TPG_SOLO_* below; 0 when ranks exchange    */
  int nfwd;                     /* a node with no CUDA node of its own (solo,
                                   elided): its dependents wait for cu[0..nfwd),
                                   its own dependencies' tails, instead        */
  /* NCCL all-reduce with an epilogue: one more kernel node after the child */
  int has_epi;
  CUDA_KERNEL_NODE_PARAMS epi_kp;
  void *epi_kparams[1];         /* -> epi                                     */
  tpg_ar_epilogue_args epi;
  CUdeviceptr cap_send, cap_recv; /* what the NCCL child was captured with:
                                   rebinding only epilogue views re-captures nothing */
  int tma;                      /* GEMM kernel takes tensor maps (args.gemm_tma) */
  tpg_tma_encode xe, we;        /* how to (re-)encode them                       */
  int cutlass;                  /* GEMM: CUTLASS kernel index + 1 (args.gemm_cutlass,
                                   rebuilt whole by set_ptrs from these), else 0 */
  int cutlass_mode, cutlass_splits;
  const char *kernel;           /* entry point name */
  unsigned cluster[3];          /* GEMM launched with this cluster shape
                                   (tpg_kernel_launch.cluster > 1: {S, 1, 1});
                                   {0, 0, 0}: none */
  /* A GEMM's workspace (graphbuild/workspace.c): what prepare's kernel
   * needs and the lane the graph placed it in, memory of the graph's or its
   * set's shared with nodes that never run at the same time. A kernel whose
   * first z bytes are counters (kept zero) gets `at - z`: every sharer's
   * counters end at `at`, where every sharer's scratch starts, so no
   * sharer's scratch covers another's counters. A whole-graph update hands
   * these to the new node state. */
  struct {
    size_t need, need_zeroed;   /* prepare's launch: workspace_bytes, _zeroed */
    int need_private;           /* its launch's workspace_private: a lane alone */
    int alone;                  /* placed in a lane of its own                */
    int lane;                   /* 1 + its lane in the graph's lanes; 0: none */
    CUdeviceptr at;             /* the lane's boundary */
    size_t zero_cap, tail_cap;  /* the lane's bytes before and after `at` */
    CUdeviceptr workspace;      /* what fill gave the kernel it picked (0: none) */
  } res;
  /* memset / memcpy nodes */
  CUDA_MEMSET_NODE_PARAMS ms;
  CUDA_MEMCPY3D cp;
  /* variable-size per-node state of a kind that needs it (owned by the kind:
   * allocated in prepare/fill, freed in release) */
  void *ext;
  size_t ext_bytes;
} tpg_gnode;

/* What a one-rank collective became (tpg_gnode.solo). */
#define TPG_SOLO_ELIDED 1   /* in place, no epilogue: no CUDA node       */
#define TPG_SOLO_EPILOGUE 2 /* the all-reduce epilogue's kernel alone    */
#define TPG_SOLO_COPY 3     /* send -> recv by a memcpy node             */

/* Workspace a launch whose first `zeroed` bytes are counters finds in the
 * node's lane: counters before the boundary, scratch after it. */
static inline size_t tpg_ws_room(const tpg_gnode *gn, size_t zeroed) {
  return gn->res.lane && zeroed <= gn->res.zero_cap ? zeroed + gn->res.tail_cap : 0;
}

/* The node later nodes depend on. */
static inline CUgraphNode tpg_gnode_tail(const tpg_gnode *gn) { return gn->ncu ? gn->cu[gn->ncu - 1] : NULL; }

/* Incoming edges of a node being added: the tails of its dependencies, and
 * for each, edge data (programmatic or ordinary; see materialize.c). */
typedef struct tpg_deps {
  const CUgraphNode *nodes;
  const CUgraphEdgeData *edata; /* NULL or nprog == 0: all ordinary */
  size_t n;
  size_t nprog;                 /* how many of them are programmatic */
  int32_t pdl_prefetch;         /* TPG_PDL_PREFETCH for a GEMM behind a programmatic edge */
} tpg_deps;

/* A text sink for DOT labels (plan_dot.c); helpers in nodes/common.h. */
typedef struct tpg_sbuf { char *buf; size_t cap, len; } tpg_sbuf;

/* Programmatic dependent launch roles (materialize.c states the rules). */
#define TPG_PDL_PRIMARY 0x1u   /* may start a programmatic edge */
#define TPG_PDL_SECONDARY 0x2u /* may end one: waits in every block (griddepcontrol.wait) */

/* What a graph-time operation works on: node i of plan p, materialized into
 * gn, with slot pointers bind (the graph's, or an update's new set). */
typedef struct tpg_nctx {
  struct tpg_graph *g;
  const tpg_plan *p;
  void **bind;
  int i;
  const tpg_node_rec *n;  /* &p->nodes[i] */
  tpg_gnode *gn;
  const struct tpg_kind_ops *kind;
  char *lb;               /* the node's label, written on first use (tpg_nctx_label): only */
  size_t lbcap;           /* messages need it, and eager launches should not pay for it     */
} tpg_nctx;

typedef struct tpg_kind_ops {
  const char *name;      /* default label "<name>#<index>", messages */
  const char *dot_shape; /* tpg_plan_dot */
  int collective;        /* a communicator operation: chained in topological order, fingerprinted,
                            needs cfg->comm */

  /* ---- plan time: plain data, no driver ---- */
  /* Checks a node record as the public builder `fn` filled it (views exist,
   * ranges fit, dtypes, aliasing); messages come from fn and name the argument. */
  tpg_status (*check)(const tpg_plan *p, const char *fn, const tpg_node_rec *n);
  /* Whether record n may sit in a conditional body (of node `parent`, for
   * messages): CUDA allows kernel, memset, memcpy, empty, child-graph and
   * conditional nodes there. NULL: allowed. */
  tpg_status (*in_body)(const tpg_plan *p, const char *fn, const tpg_node_rec *n, const char *parent);
  /* The slot ranges the node touches into out[TPG_MAX_NODE_VIEWS]; returns the count. */
  int (*views)(const tpg_node_rec *n, tpg_view_use *out);
  /* The default label when the user gave none (NULL: "<name>#<index>"). */
  void (*label)(const tpg_node_rec *n, int idx, char *buf, size_t cap);
  /* The DOT label's lines after the node's name. */
  void (*dot)(tpg_sbuf *s, const tpg_plan *p, const tpg_node_rec *n);
  /* Whether b may replace a (whole-graph update): what fixes the CUDA
   * topology (a collective's kind, an epilogue node). NULL: the kind alone.
   * Fails with a message naming `label`. */
  tpg_status (*same_shape)(const tpg_node_rec *a, const tpg_node_rec *b, const char *label);

  /* ---- create time ---- */
  /* Resolves what the node needs before any fill (kernel choice and its
   * workspace need, into gn->res: the graph places every workspace once
   * all nodes are prepared, graphbuild/workspace.c). NULL: nothing. */
  tpg_status (*prepare)(const tpg_nctx *c);
  /* Every parameter from the plan node and the pointers in c->bind (kernel,
   * launch shape, algorithm) into c->gn; ends with the kind's set_ptrs. */
  tpg_status (*fill)(const tpg_nctx *c);
  /* Adds the filled node to graph behind deps: one CUDA node or several
   * (recorded in gn->cu, the last being the one later nodes wait for). */
  tpg_status (*add)(const tpg_nctx *c, CUgraph graph, const tpg_deps *deps);
  /* Issues the node's work on stream (TPG_MODE_EAGER, and what
   * TPG_MODE_CAPTURE captures). */
  tpg_status (*run_eager)(const tpg_nctx *c, CUstream stream);
  /* Child-graph kinds: issues the work to be stream-captured into the child
   * (tpg_capture_child). NULL for kinds that are plain CUDA nodes. */
  tpg_status (*capture)(const tpg_nctx *c, CUstream stream);

  /* ---- rebind ---- */
  /* c->bind changed for a slot this node uses: rewrite the pointer fields
   * (set_ptrs) and apply them to the exec (setter, or re-capture + child
   * setter). In eager mode only the node's copy is rewritten. */
  tpg_status (*patch)(const tpg_nctx *c);
  /* Whether patching the node with c->bind now would make a collective call
   * (an NCCL re-capture): it needs a usable comm and is not undone on a
   * later failure. NULL: never. */
  int (*patch_collective)(const tpg_nctx *c);

  /* ---- retargeting (a graph set's one exec, graphset.c) ---- */
  /* Whether the exec node built from record a (materialized as ga) runs
   * record b, a node of the same place in a plan of another batch size
   * filled as gb, once patch is called with gb (ga's template nodes copied
   * into it): the kind's exec setters take every parameter fill wrote and
   * the launch attributes (clusters) agree. NULL: never (child graphs,
   * host, event and conditional nodes). */
  int (*retarget)(const tpg_node_rec *a, const tpg_gnode *ga, const tpg_node_rec *b, const tpg_gnode *gb);

  /* ---- by-value arguments (tpg_graph_set_kernel_arg) ---- */
  /* Sets by-value argument `index` to `size` bytes at `value` in the graph's
   * own plan copy (c->n: a later fill, rebind or update from it keeps the
   * value), in the node's packed parameters and in the exec (its setter;
   * eager mode: the next launch reads them). On failure all three are as
   * before. Messages come from fn. NULL: the kind has no such arguments. */
  tpg_status (*set_arg)(const tpg_nctx *c, const char *fn, int index, const void *value, size_t size);

  /* ---- facts about the materialized node ---- */
  /* Mixes what every rank must agree on into *h (collective kinds): from
   * the plan record alone when gn is NULL, plus what fill resolved (the
   * algorithm, kernel, grid) when gn is the filled node. */
  void (*fingerprint)(const tpg_plan *p, const tpg_node_rec *n, const tpg_gnode *gn, uint64_t *h);
  /* Whether fill makes a choice for this node that ranks must agree on
   * beyond the plan (an all-reduce's algorithm): the fingerprint is then
   * compared again after fill. NULL: never. */
  int (*resolves)(const tpg_node_rec *n);
  /* TPG_PDL_* roles of the materialized node (NULL: none). */
  unsigned (*pdl)(const tpg_gnode *gn);
  /* Whether record n, as the secondary of a programmatic edge, may complete
   * before its primary did: it waits (griddepcontrol.wait) before touching
   * memory but not necessarily before it exits (an engine kernel's
   * desc.pdl), so it orders nothing after it against that primary
   * (workspace.c). NULL: never (our secondaries wait before anything; the
   * other kinds are never secondaries). */
  int (*pdl_early_exit)(const tpg_node_rec *n);
  /* Adds the node's CUDA nodes to the info counters. */
  void (*count)(const tpg_gnode *gn, tpg_graph_info *info);
  /* Frees what prepare/fill took (gn->ext; gn->res holds no memory of the
   * node's own); NULL: nothing. */
  void (*release)(struct tpg_graph *g, tpg_gnode *gn);
} tpg_kind_ops;

/* The table: one row per tpg_node_kind (kind.c). */
TPG_HIDDEN const tpg_kind_ops *tpg_kind(tpg_node_kind k);
/* "gemm#3" or the user's name, into buf. */
TPG_HIDDEN const char *tpg_node_label(const tpg_plan *p, int idx, char *buf, size_t cap);
/* The same for kind k's node (what kind.c and the kinds' messages share). */
TPG_HIDDEN const char *tpg_node_label_of(const struct tpg_kind_ops *k, const tpg_plan *p, int idx, char *buf,
                                         size_t cap);
/* The context's node label ("gemm#3" or the user's name), for messages. */
TPG_HIDDEN const char *tpg_nctx_label(const tpg_nctx *c);
/* The views of node n through its kind (TPG_MAX_NODE_VIEWS at most). */
TPG_HIDDEN int tpg_node_views(const tpg_node_rec *n, tpg_view_use *out);
/* A context for node i (its label goes into lb when a message needs it). */
TPG_HIDDEN void tpg_nctx_init(tpg_nctx *c, struct tpg_graph *g, const tpg_plan *p, void **bind, int i, tpg_gnode *gn,
                              char *lb, size_t lbcap);

#endif
