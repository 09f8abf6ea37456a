/* kind.c - the node-kind table: one row per tpg_node_kind, each row the
 * operations of one file under graphbuild/nodes/. Adding a kind adds a row
 * here (kind.h says what else). */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>

#include "graphbuild/nodes/kind.h"

extern const tpg_kind_ops tpg_kind_gemm, tpg_kind_axpby, tpg_kind_memset, tpg_kind_memcpy, tpg_kind_empty,
    tpg_kind_collective, tpg_kind_concat, tpg_kind_kernel, tpg_kind_captured, tpg_kind_host, tpg_kind_event,
    tpg_kind_conditional;

static const tpg_kind_ops *const table[TPG_NK_COUNT] = {
    [TPG_NK_GEMM] = &tpg_kind_gemm,
    [TPG_NK_AXPBY] = &tpg_kind_axpby,
    [TPG_NK_MEMSET] = &tpg_kind_memset,
    [TPG_NK_MEMCPY] = &tpg_kind_memcpy,
    [TPG_NK_EMPTY] = &tpg_kind_empty,
    [TPG_NK_COLLECTIVE] = &tpg_kind_collective,
    [TPG_NK_CONCAT] = &tpg_kind_concat,
    [TPG_NK_KERNEL] = &tpg_kind_kernel,
    [TPG_NK_CAPTURED] = &tpg_kind_captured,
    [TPG_NK_HOST] = &tpg_kind_host,
    [TPG_NK_EVENT] = &tpg_kind_event,
    [TPG_NK_CONDITIONAL] = &tpg_kind_conditional,
};

const tpg_kind_ops *tpg_kind(tpg_node_kind k) { return table[k]; }

const char *tpg_node_label(const tpg_plan *p, int idx, char *buf, size_t cap) {
  return tpg_node_label_of(table[p->nodes[idx].kind], p, idx, buf, cap);
}

int tpg_node_views(const tpg_node_rec *n, tpg_view_use *out) { return table[n->kind]->views(n, out); }

void tpg_nctx_init(tpg_nctx *c, struct tpg_graph *g, const tpg_plan *p, void **bind, int i, tpg_gnode *gn, char *lb,
                   size_t lbcap) {
  c->g = g;
  c->p = p;
  c->bind = bind;
  c->i = i;
  c->n = &p->nodes[i];
  c->gn = gn;
  c->kind = table[p->nodes[i].kind];
  c->lb = lb;
  c->lbcap = lbcap;
  if (lbcap) lb[0] = '\0';
}
