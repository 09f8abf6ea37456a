/* plan.h - the CPU-side plan: slots, nodes and edges, as plain data.
 *
 * A plan makes no CUDA call, so everything about a graph's structure (shape
 * rules, ranges, cycles, collective order) is checked and unit-tested on a
 * machine without a GPU. materialize.c turns a validated plan into a CUDA
 * graph; the graph keeps its own copy (tpg_plan_clone).
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
  TPG_NK_COUNT
} tpg_node_kind;

typedef struct tpg_node_rec {
  tpg_node_kind kind;
  char *name;       /* NULL: default "<kind>#<index>" */
  int *deps;        /* indices of nodes this one waits for */
  int ndeps, capdeps;
  union {
    tpg_gemm_desc gemm;
    struct { tpg_view y, x; size_t count; float alpha, beta; } axpby;
    struct { tpg_view dst; uint32_t value; size_t count; } memset;
    struct { tpg_view dst, src; size_t count; } memcpy;
    tpg_collective_desc coll;
    struct { tpg_view dst, src; int blocks, rows, cols; } concat;
  } u;
} tpg_node_rec;

struct tpg_plan {
  unsigned magic;
  uint32_t serial;  /* tags this plan's node handles */
  tpg_slot_rec *slots;  /* slot id s lives at slots[s - 1] */
  int nslots, capslots;
  tpg_node_rec *nodes;
  int nnodes, capnodes;
};

TPG_HIDDEN const char *tpg_node_kind_name(tpg_node_kind k);
/* "gemm#3" or the user's name, into buf. */
TPG_HIDDEN const char *tpg_node_label(const tpg_plan *p, int idx, char *buf, size_t cap);

/* Deep copy (the graph keeps one). */
TPG_HIDDEN tpg_status tpg_plan_clone(const tpg_plan *src, tpg_plan **out);

/* Kahn order of the nodes into order[nnodes]; fails naming a node on a cycle. */
TPG_HIDDEN tpg_status tpg_plan_topo(const tpg_plan *p, int *order);

/* Slots each node reads or writes: up to TPG_MAX_NODE_VIEWS views (a GEMM
 * 5, an all-reduce with every epilogue view 6); returns the count. */
#define TPG_MAX_NODE_VIEWS 6
TPG_HIDDEN int tpg_node_views(const tpg_node_rec *n, tpg_view *views);

TPG_HIDDEN tpg_status tpg_plan_check(const tpg_plan *p, const char *fn, const char *arg);

/* A view of `need` elements for a node: the slot exists, the range fits, the
 * start is `align` bytes aligned, the slot holds `dtype` and is device memory
 * (device or scratch). Messages name `what` and come from `fn`. For builders
 * of several nodes (lib/linear.c) that check everything before adding any. */
TPG_HIDDEN tpg_status tpg_plan_check_view(const tpg_plan *p, const char *fn, const char *what, tpg_view v,
                                          size_t need, size_t align, tpg_dtype dtype);

/* Drops the nodes added after the plan had `nnodes` (edges live in the later
 * nodes, so nothing else refers to them): a builder's rollback, so a call
 * that fails part-way leaves the plan as it was. */
TPG_HIDDEN void tpg_plan_truncate(tpg_plan *p, int nnodes);

/* Two plans with the same nodes (kinds, shapes that fix kernels) and edges. */
TPG_HIDDEN tpg_status tpg_plan_same_topology(const tpg_plan *a, const tpg_plan *b);

#endif
