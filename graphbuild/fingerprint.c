/* fingerprint.c - ranks compare what their graphs will ask NCCL and our
 * all-reduce kernels to do before the first capture or launch: a mismatch,
 * which would otherwise hang inside a collective, is an error on every rank.
 *
 * The hash covers the rank count and, in execution order, every collective
 * node as its kind's fingerprint op describes it. Checked twice per
 * materialization: from the plan alone (nodes == NULL: kinds, counts,
 * dtypes, requested algorithms, epilogue shapes) before anything collective
 * happens, and again once every node is filled, with what was resolved on
 * this rank (the algorithm actually chosen, its grid) — so two ranks whose
 * environment or peer state made them choose differently fail instead of
 * running different kernels. Any rank count: the all-gather buffer is sized
 * by the comm. Before any of that, without a driver: a plan sharded for R
 * ranks gets a comm of R ranks (tpg_plan_comm_check).
 */
#define _POSIX_C_SOURCE 200809L
#include <stdlib.h>

#include "graphbuild/graph.h"

tpg_status tpg_plan_comm_check(const tpg_plan *p, int colls, const tpg_comm *comm, const char *fn,
                               const char *what) {
  const int R = p->coll_ranks;
  if (colls == 0 || R < 2) return TPG_SUCCESS;
  if (!comm)
    return tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn,
                   "%s is NULL but the plan's %d collectives are sharded for %d ranks (tpg_plan_set_ranks): pass "
                   "that comm; a graph without one runs as one rank and would leave every sum this rank's share",
                   what, colls, R);
  if (comm->nranks != R)
    return tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn,
                   "%s has %d ranks but the plan's collectives are sharded for %d (tpg_plan_set_ranks): expected "
                   "a comm of %d ranks", what, comm->nranks, R, R);
  return TPG_SUCCESS;
}

tpg_status tpg_fingerprint_check(tpg_graph *g, const tpg_state *st, const tpg_plan *p, const tpg_gnode *nodes,
                                 const char *when) {
  if (!g->comm || g->comm->nranks < 2 || st->ncoll == 0) return TPG_SUCCESS;
  uint64_t h = 1469598103934665603ull;
  h = (h ^ (uint64_t)g->comm->nranks) * 1099511628211ull;
  for (int oi = 0; oi < p->nnodes; oi++) {
    const int i = st->order[oi];
    const tpg_kind_ops *k = tpg_kind(p->nodes[i].kind);
    if (k->fingerprint) k->fingerprint(p, &p->nodes[i], nodes ? &nodes[i] : NULL, &h);
  }
  uint64_t *all = malloc((size_t)g->comm->nranks * sizeof *all);
  if (!all) return TPG_FAIL(TPG_ERROR_OUT_OF_MEMORY, "out of host memory");
  tpg_status rc = tpg_comm_allgather_host(g->comm, &h, all, sizeof h);
  for (int q = 0; rc == TPG_SUCCESS && q < g->comm->nranks; q++)
    if (all[q] != h)
      rc = TPG_FAIL(TPG_ERROR_INVALID_ARGUMENT,
                    "the graph's collectives differ between ranks %s (fingerprint 0x%016llx on rank %d, 0x%016llx on "
                    "rank %d): every rank must build the same collectives (kind, count, dtype, algorithm, epilogue) "
                    "in the same order, with the same tuning (tpg_graph_config, TPG_* environment)",
                    when, (unsigned long long)h, g->comm->rank, (unsigned long long)all[q], q);
  free(all);
  return rc;
}
