/* plan_check.c - what needs the whole plan: topological order and cycles
 * (tpg_plan_validate), counts, topology comparison for whole-graph update,
 * DOT. Per-kind facts come from the node-kind table. */
#define _POSIX_C_SOURCE 200809L
#include <stdlib.h>

#include "graphbuild/nodes/common.h"

tpg_status tpg_plan_topo(const tpg_plan *p, int *order) {
  int n = p->nnodes;
  if (n == 0) return TPG_SUCCESS;
  int *indeg = calloc((size_t)n, sizeof *indeg);
  int *cnt = calloc((size_t)n + 1, sizeof *cnt); /* CSR of successors */
  int *succ = NULL;
  tpg_status st = TPG_SUCCESS;
  size_t nedges = 0;
  if (!indeg || !cnt) goto oom;
  for (int i = 0; i < n; i++) {
    indeg[i] = p->nodes[i].ndeps;
    for (int j = 0; j < p->nodes[i].ndeps; j++) cnt[p->nodes[i].deps[j] + 1]++;
    nedges += (size_t)p->nodes[i].ndeps;
  }
  for (int i = 0; i < n; i++) cnt[i + 1] += cnt[i];
  succ = malloc((nedges ? nedges : 1) * sizeof *succ);
  if (!succ) goto oom;
  {
    int *fill = calloc((size_t)n, sizeof *fill);
    if (!fill) goto oom;
    for (int i = 0; i < n; i++)
      for (int j = 0; j < p->nodes[i].ndeps; j++) {
        int d = p->nodes[i].deps[j];
        succ[cnt[d] + fill[d]++] = i;
      }
    free(fill);
  }
  /* A FIFO over ready nodes seeded in index order: deterministic, so every
   * rank that built the same plan gets the same collective order. */
  int head = 0, tail = 0;
  for (int i = 0; i < n; i++)
    if (indeg[i] == 0) order[tail++] = i;
  while (head < tail) {
    int u = order[head++];
    for (int e = cnt[u]; e < cnt[u + 1]; e++)
      if (--indeg[succ[e]] == 0) order[tail++] = succ[e];
  }
  if (tail < n) {
    int bad = 0;
    for (int i = 0; i < n; i++)
      if (indeg[i] > 0) { bad = i; break; }
    char lb[160];
    st = TPG_FAIL(TPG_ERROR_INVALID_ARGUMENT, "the plan has a cycle through node %s (%d of %d nodes are on or after it)",
                  tpg_node_label(p, bad, lb, sizeof lb), n - tail, n);
  }
  free(indeg);
  free(cnt);
  free(succ);
  return st;
oom:
  free(indeg);
  free(cnt);
  free(succ);
  return TPG_FAIL(TPG_ERROR_OUT_OF_MEMORY, "out of host memory");
}

static tpg_status validate(const tpg_plan *p) {
  TPG_TRY(tpg_plan_check(p, "tpg_plan_validate", "plan"));
  if (p->nnodes == 0) return TPG_ARG_FAIL("plan has no nodes: expected at least one");
  int *order = malloc((size_t)p->nnodes * sizeof *order);
  if (!order) return TPG_FAIL(TPG_ERROR_OUT_OF_MEMORY, "out of host memory");
  tpg_status st = tpg_plan_topo(p, order);
  free(order);
  return st;
}

/* Messages of what it calls (the order's cycle) carry this call's name. */
tpg_status tpg_plan_validate(const tpg_plan *p) {
  tpg_err_clear();
  tpg_status st = validate(p);
  if (st != TPG_SUCCESS) tpg_err_rename(__func__);
  return st;
}

tpg_status tpg_plan_get_stats(const tpg_plan *p, int *nodes, int *slots, int *collectives) {
  tpg_err_clear();
  TPG_TRY(tpg_plan_check(p, __func__, "plan"));
  int c = 0;
  for (int i = 0; i < p->nnodes; i++) c += tpg_kind(p->nodes[i].kind)->collective;
  if (nodes) *nodes = p->nnodes;
  if (slots) *slots = p->nslots;
  if (collectives) *collectives = c;
  return TPG_SUCCESS;
}

tpg_status tpg_plan_same_topology(const tpg_plan *a, const tpg_plan *b) {
  char la[160];
  if (a->nnodes != b->nnodes)
    return TPG_ARG_FAIL("plan has %d nodes, the graph's has %d: expected the same topology", b->nnodes, a->nnodes);
  for (int i = 0; i < a->nnodes; i++) {
    const tpg_node_rec *x = &a->nodes[i], *y = &b->nodes[i];
    tpg_node_label(a, i, la, sizeof la);
    if (x->kind != y->kind)
      return TPG_ARG_FAIL("node %s is a %s in the graph but a %s in plan: expected the same kinds", la,
                          tpg_kind(x->kind)->name, tpg_kind(y->kind)->name);
    if (x->ndeps != y->ndeps)
      return TPG_ARG_FAIL("node %s has %d dependencies in the graph, %d in plan: expected the same edges", la,
                          x->ndeps, y->ndeps);
    for (int j = 0; j < x->ndeps; j++)
      if (x->deps[j] != y->deps[j])
        return TPG_ARG_FAIL("node %s: dependency %d differs between the graph and plan", la, j);
    if (tpg_kind(x->kind)->same_shape) TPG_TRY(tpg_kind(x->kind)->same_shape(x, y, la));
  }
  if (a->nslots != b->nslots)
    return TPG_ARG_FAIL("plan has %d slots, the graph's has %d: expected the same slots", b->nslots, a->nslots);
  /* Whether a slot is scratch fixes who owns its memory (the graph, or the
   * caller): that may not change under a graph (destroy would free the
   * caller's buffer, or leak the scratch). Everything else about a slot may:
   * an update derives the graph's state again from the new plan, checks
   * every binding against the new sizes and memory kinds, re-allocates
   * scratch that grew, and CUDA refuses node changes it cannot apply (a
   * memcpy between other memory kinds). */
  static const char *where[] = {"device", "host", "scratch"};
  for (int q = 0; q < a->nslots; q++) {
    const tpg_slot_rec *x = &a->slots[q], *y = &b->slots[q];
    if ((x->where == TPG_MEM_SCRATCH) != (y->where == TPG_MEM_SCRATCH))
      return TPG_ARG_FAIL("slot %d (\"%s\") is %s memory in the graph but %s in plan: a slot cannot change between "
                          "scratch (the graph's) and bound memory (the caller's) under a graph; create a new graph",
                          q + 1, x->name, where[x->where], where[y->where]);
  }
  return TPG_SUCCESS;
}

tpg_status tpg_plan_dot(const tpg_plan *p, char *buf, size_t cap, size_t *needed) {
  tpg_err_clear();
  TPG_TRY(tpg_plan_check(p, __func__, "plan"));
  TPG_CHECK_ARG(needed != NULL, "needed is NULL: expected a size_t to receive the length");
  TPG_CHECK_ARG(buf != NULL || cap == 0, "buf is NULL but cap is %zu: expected cap 0 to query the size", cap);
  tpg_sbuf s = {buf, cap, 0};
  tpg_sb_printf(&s, "digraph tpg_plan {\n  rankdir=TB;\n  node [fontname=\"monospace\", fontsize=10];\n");
  char lb[160];
  for (int i = 0; i < p->nnodes; i++) {
    const tpg_node_rec *n = &p->nodes[i];
    const tpg_kind_ops *k = tpg_kind(n->kind);
    tpg_sb_printf(&s, "  n%d [shape=%s, label=\"", i, k->dot_shape);
    tpg_sb_quoted(&s, tpg_node_label(p, i, lb, sizeof lb));
    if (k->dot) k->dot(&s, p, n);
    tpg_sb_printf(&s, "\"];\n");
  }
  for (int i = 0; i < p->nnodes; i++)
    for (int j = 0; j < p->nodes[i].ndeps; j++) tpg_sb_printf(&s, "  n%d -> n%d;\n", p->nodes[i].deps[j], i);
  /* A conditional body's nodes hang off their conditional node by a dashed
   * edge labelled with the body (the roots of the body: nodes with no
   * dependency), so the picture shows what each body holds. */
  for (int i = 0; i < p->nnodes; i++)
    if (p->nodes[i].parent >= 0 && p->nodes[i].ndeps == 0)
      tpg_sb_printf(&s, "  n%d -> n%d [style=dashed, label=\"body %d\"];\n", p->nodes[i].parent, i,
                    p->nodes[i].body);
  tpg_sb_printf(&s, "}\n");
  *needed = s.len + 1;
  if (!buf) return TPG_SUCCESS; /* size query */
  if (s.len + 1 > cap)
    return TPG_ARG_FAIL("cap is %zu bytes: the DOT text needs %zu (call with buf NULL, cap 0 to size it)", cap,
                        s.len + 1);
  return TPG_SUCCESS;
}
