/* eager.c - the same nodes without our explicit graph: one after another on
 * a stream (TPG_MODE_EAGER), or that sequence stream-captured into a graph
 * (TPG_MODE_CAPTURE). These are what engines do today, kept here so a
 * benchmark compares them with explicit graphs on identical kernels and
 * parameters, and so a suspected graph problem can be checked eagerly.
 */
#define _POSIX_C_SOURCE 200809L
#include "graphbuild/graph.h"

tpg_status tpg_run_nodes(tpg_graph *g, CUstream stream) {
  const tpg_plan *p = g->plan;
  char lb[160];
  for (int oi = 0; oi < p->nnodes; oi++) {
    int i = g->st->order[oi];
    tpg_nctx c;
    tpg_nctx_init(&c, g, p, g->bind, i, &g->nodes[i], lb, sizeof lb);
    TPG_TRY(tpg_kind(p->nodes[i].kind)->run_eager(&c, stream));
  }
  return TPG_SUCCESS;
}
