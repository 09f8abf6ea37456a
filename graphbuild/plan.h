/* plan.h - the CPU-side plan: slots, nodes and edges, as plain data.
 *
 * A plan makes no CUDA call, so everything about a graph's structure (shape
 * rules, ranges, cycles, collective order) is checked and unit-tested on a
 * machine without a GPU. What a node of each kind means lives in the kind's
 * file under graphbuild/nodes/ (the table in nodes/kind.h); materialize.c
 * turns a validated plan into a CUDA graph; the graph keeps its own copy
 * (tpg_plan_clone).
 */
#ifndef TPG_PLAN_H
#define TPG_PLAN_H

#include "lib/internal.h"

typedef struct tpg_slot_rec {
  char *name;
  tpg_dtype dtype;
  tpg_memory where;
  size_t count;   /* elements */
} tpg_slot_rec;

typedef enum tpg_node_kind {
  TPG_NK_GEMM = 0,
  TPG_NK_AXPBY,
  TPG_NK_MEMSET,
  TPG_NK_MEMCPY,
  TPG_NK_EMPTY,
  TPG_NK_COLLECTIVE,
  TPG_NK_CONCAT,      /* tpg_plan_add_concat_cols: a kernel node */
  TPG_NK_KERNEL,      /* the kit: an engine's kernel (nodes/kernel.c)          */
  TPG_NK_CAPTURED,    /* the kit: library work captured into a child (captured.c) */
  TPG_NK_HOST,        /* the kit: a host callback (host.c)                     */
  TPG_NK_EVENT,       /* the kit: event record or wait (event.c)               */
  TPG_NK_CONDITIONAL, /* IF / WHILE / SWITCH over bodies of this plan (conditional.c) */
  TPG_NK_COUNT
} tpg_node_kind;

/* One argument of an engine kernel node as its record keeps it: BYTES
 * values live in the record's data at value_off (kernel node data:
 * tpg_arg_rec[nargs], then the values, then the name). */
typedef struct tpg_arg_rec {
  tpg_arg_kind kind;
  uint32_t size;
  tpg_view view;
  size_t value_off;
} tpg_arg_rec;

typedef struct tpg_node_rec {
  tpg_node_kind kind;
  char *name;       /* NULL: default "<kind>#<index>" */
  int *deps;        /* indices of nodes this one waits for (all in the same scope) */
  int ndeps, capdeps;
  /* Scope: the conditional node (index) whose body `body` holds this node;
   * -1: the top level. Set by tpg_plan_push_node from the open body. */
  int parent, body;
  union {
    tpg_gemm_desc gemm;
    struct { tpg_view y, x; size_t count; float alpha, beta; } axpby;
    struct { tpg_view dst; uint32_t value; size_t count; } memset;
    struct { tpg_view dst, src; size_t count; } memcpy;
    tpg_collective_desc coll;
    struct { tpg_view dst, src; int blocks, rows, cols; } concat;
    struct {
      const tpg_module *module;  /* borrowed; with the name (in data)        */
      void *cu_kernel, *cu_function;
      unsigned grid[3], block[3], shared_bytes, cluster[3];
      int pdl, nargs, nviews;
      size_t name_off;           /* of the name in data; SIZE_MAX: none     */
    } kernel;                    /* data: the arguments (nodes/kernel.c)   */
    struct { tpg_capture_fn fn; void *user; int nviews; } captured; /* data: views, counts */
    struct { tpg_host_fn fn; void *user; } host;
    struct { tpg_event event; int wait; } event;
    struct { tpg_cond_type type; tpg_cond cond; int nbodies; } cond;
  } u;
  /* Owned bytes a kind keeps beside its descriptor (an engine kernel's
   * arguments and name, a captured node's views). Position-independent, so
   * the plan copies them with memcpy and frees them with free, knowing no
   * kind. NULL: none. */
  void *data;
  size_t data_bytes;
} tpg_node_rec;

struct tpg_plan {
  unsigned magic;
  uint32_t serial;  /* tags this plan's node handles */
  tpg_slot_rec *slots;  /* slot id s lives at slots[s - 1] */
  int nslots, capslots;
  tpg_node_rec *nodes;
  int nnodes, capnodes;
  /* conditions (tpg_plan_add_cond): cond c is conds[c - 1] */
  struct tpg_cond_rec {
    unsigned dflt;
    int reset;
    int node;           /* the conditional node using it (index), -1: none yet */
  } *conds;
  int nconds, capconds;
  int scope, scope_body;  /* the open body: conditional node index (-1: top level) and body */
  /* caches (plan.c): built on first use, dropped when they would go stale */
  int *name_idx;        /* open addressing over slot names: slot id, 0 empty */
  size_t name_cap;
  uint64_t *edge_set;   /* open addressing over edges (from + 1) << 32 | (to + 1), 0 empty */
  size_t edge_cap, nedges;
  /* tpg_plan_set_ranks (the layer helpers call it): the rank count this
   * plan's collectives are sharded for; 0: never said. Kept across rollback. */
  int coll_ranks;
};

/* Deep copy (the graph keeps one). */
TPG_HIDDEN tpg_status tpg_plan_clone(const tpg_plan *src, tpg_plan **out);

/* Kahn order of the nodes into order[nnodes]; fails naming a node on a cycle
 * (plan_check.c). */
TPG_HIDDEN tpg_status tpg_plan_topo(const tpg_plan *p, int *order);

/* Views a node touches: at most TPG_MAX_NODE_VIEWS (a GEMM 5, an all-reduce
 * with every epilogue view 6, an engine kernel or captured node up to 64). */
#define TPG_MAX_NODE_VIEWS 64

TPG_HIDDEN tpg_status tpg_plan_check(const tpg_plan *p, const char *fn, const char *arg);

/* A view of `need` elements: the slot exists, the range fits, and the start
 * is `align` bytes aligned within the slot (buffers are checked at bind
 * time). Messages name `what` and come from `fn`. */
TPG_HIDDEN tpg_status tpg_view_check(const tpg_plan *p, const char *fn, const char *what, tpg_view v, size_t need,
                                     size_t align);
/* The view's slot holds `want`. */
TPG_HIDDEN tpg_status tpg_view_check_dtype(const tpg_plan *p, const char *fn, const char *what, tpg_view v,
                                           tpg_dtype want);
/* The view's slot is device memory (device or scratch). */
TPG_HIDDEN tpg_status tpg_view_check_device(const tpg_plan *p, const char *fn, const char *what, tpg_view v);
/* All three: range, dtype, device memory. */
TPG_HIDDEN tpg_status tpg_plan_check_view(const tpg_plan *p, const char *fn, const char *what, tpg_view v,
                                          size_t need, size_t align, tpg_dtype dtype);

/* Two views of [offset, offset + n) overlap (same slot, ranges meet). */
static inline int tpg_views_overlap(tpg_view a, size_t na, tpg_view b, size_t nb) {
  return a.slot != TPG_SLOT_NONE && a.slot == b.slot && a.offset < b.offset + nb && b.offset < a.offset + na;
}

/* Index of a node handle of plan p, or -1. */
TPG_HIDDEN int tpg_plan_node_index(const tpg_plan *p, tpg_node n);
/* deps[0..ndeps) are distinct nodes of p; messages come from fn. */
TPG_HIDDEN tpg_status tpg_plan_check_deps(const tpg_plan *p, const char *fn, const tpg_node *deps, int ndeps);
/* Appends rec (its kind's check passed) waiting for deps; *out its handle.
 * rec->data passes to the plan on success and stays the caller's on failure. */
TPG_HIDDEN tpg_status tpg_plan_push_node(tpg_plan *p, const char *fn, tpg_node_rec *rec, const tpg_node *deps,
                                         int ndeps, tpg_node *out);

/* Scope of node i (its parent conditional, or -1) as one number, so two
 * nodes are in the same body when their keys are equal. */
static inline long tpg_node_scope_key(const tpg_node_rec *n) { return n->parent < 0 ? -1 : (long)n->parent * 1024 + n->body; }
/* Node i sits (at any depth) inside a body of conditional node c. */
TPG_HIDDEN int tpg_node_inside(const tpg_plan *p, int i, int c);

/* Frees the name and edge indexes (rebuilt on next use): after anything that
 * removes slots or edges. */
TPG_HIDDEN void tpg_plan_drop_indexes(tpg_plan *p);

/* Drops the nodes added after the plan had `nnodes` (edges live in the later
 * nodes, so nothing else refers to them): a builder's rollback, so a call
 * that fails part-way leaves the plan as it was. */
TPG_HIDDEN void tpg_plan_truncate(tpg_plan *p, int nnodes);

/* Two plans with the same nodes (kinds, shapes that fix kernels) and edges
 * (plan_check.c). */
TPG_HIDDEN tpg_status tpg_plan_same_topology(const tpg_plan *a, const tpg_plan *b);

#endif
