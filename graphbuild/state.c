/* state.c - a plan's derived state (state.h): order, slot users, slot sizes,
 * which scratch a graph needs. Plain data, no driver. */
#define _POSIX_C_SOURCE 200809L
#include "graphbuild/state.h"

#include <stdlib.h>
#include <string.h>

#include "graphbuild/nodes/kind.h"

void tpg_state_free(tpg_state *st) {
  if (!st) return;
  free(st->order);
  free(st->users);
  free(st->users_at);
  free(st->coll_uses);
  free(st->bytes);
  free(st);
}

/* Slots of node i's views, each once, into s[]; returns the count. */
static int node_slots(const tpg_plan *p, int i, tpg_slot *s) {
  tpg_view_use v[TPG_MAX_NODE_VIEWS];
  int k = tpg_node_views(&p->nodes[i], v), n = 0;
  for (int j = 0; j < k; j++) {
    int dup = 0;
    for (int q = 0; q < n; q++) dup |= s[q] == v[j].v.slot;
    if (!dup) s[n++] = v[j].v.slot;
  }
  return n;
}

static tpg_status build_users(const tpg_plan *p, tpg_state *st) {
  tpg_slot s[TPG_MAX_NODE_VIEWS];
  size_t total = 0;
  for (int i = 0; i < p->nnodes; i++) {
    int k = node_slots(p, i, s);
    const int coll = tpg_kind(p->nodes[i].kind)->collective;
    st->ncoll += coll;
    for (int j = 0; j < k; j++) {
      st->users_at[s[j]]++;
      st->coll_uses[s[j] - 1] |= (unsigned char)coll;
      total++;
    }
  }
  for (int q = 0; q < p->nslots; q++) st->users_at[q + 1] += st->users_at[q];
  st->users = malloc((total ? total : 1) * sizeof *st->users);
  int *fill = calloc((size_t)p->nslots + 1, sizeof *fill);
  if (!st->users || !fill) {
    free(fill);
    return TPG_FAIL(TPG_ERROR_OUT_OF_MEMORY, "out of host memory");
  }
  /* Users in topological order: rebinding re-captures collectives in the
   * same order on every rank. */
  for (int oi = 0; oi < p->nnodes; oi++) {
    int i = st->order[oi];
    int k = node_slots(p, i, s);
    for (int j = 0; j < k; j++) {
      int q = (int)s[j] - 1;
      st->users[st->users_at[q] + fill[q]++] = i;
    }
  }
  free(fill);
  return TPG_SUCCESS;
}

tpg_status tpg_state_build(const tpg_plan *p, tpg_state **out) {
  *out = NULL;
  tpg_state *st = calloc(1, sizeof *st);
  if (!st) return TPG_FAIL(TPG_ERROR_OUT_OF_MEMORY, "out of host memory");
  st->nnodes = p->nnodes;
  st->nslots = p->nslots;
  const size_t ns = (size_t)(p->nslots ? p->nslots : 1);
  st->order = malloc((size_t)(p->nnodes ? p->nnodes : 1) * sizeof *st->order);
  st->users_at = calloc((size_t)p->nslots + 1, sizeof *st->users_at);
  st->coll_uses = calloc(ns, 1);
  st->bytes = calloc(ns, sizeof *st->bytes);
  tpg_status rc = TPG_SUCCESS;
  if (!st->order || !st->users_at || !st->coll_uses || !st->bytes) {
    rc = TPG_FAIL(TPG_ERROR_OUT_OF_MEMORY, "out of host memory");
    goto fail;
  }
  for (int q = 0; q < p->nslots; q++) st->bytes[q] = p->slots[q].count * tpg_dtype_size(p->slots[q].dtype);
  TPG_TRYGOTO(tpg_plan_topo(p, st->order), rc, fail);
  TPG_TRYGOTO(build_users(p, st), rc, fail);
  *out = st;
  return TPG_SUCCESS;
fail:
  tpg_state_free(st);
  return rc;
}

tpg_status tpg_state_check_bound(const tpg_state *st, const tpg_plan *p, void *const *bind, const char *fn) {
  for (int q = 0; q < p->nslots; q++)
    if (p->slots[q].where != TPG_MEM_SCRATCH && tpg_state_used(st, (tpg_slot)(q + 1)) && !bind[q])
      return tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn,
                     "slot \"%s\" is used by the plan but not bound: expected a binding for it", p->slots[q].name);
  return TPG_SUCCESS;
}

tpg_status tpg_state_scratch_needs(const tpg_state *st, const tpg_plan *p, const size_t *owned_bytes, int sym,
                                   size_t *need, const char *fn) {
  for (int q = 0; q < p->nslots; q++) {
    need[q] = 0;
    if (p->slots[q].where != TPG_MEM_SCRATCH || !tpg_state_used(st, (tpg_slot)(q + 1))) continue;
    if (owned_bytes[q] >= st->bytes[q]) continue;
    if (sym && st->coll_uses[q])
      return tpg_err(TPG_ERROR_UNSUPPORTED, fn,
                     "scratch slot \"%s\" needs %zu bytes, the graph holds %zu, and a collective uses it as an NCCL "
                     "symmetric window (TPG_GRAPH_NCCL_SYMMETRIC): windows are registered at creation only; create "
                     "a new graph",
                     p->slots[q].name, st->bytes[q], owned_bytes[q]);
    need[q] = st->bytes[q];
  }
  return TPG_SUCCESS;
}

size_t tpg_state_arena_bytes(const tpg_state *st, const tpg_plan *p, int sym) {
  size_t total = 0;
  for (int q = 0; q < p->nslots; q++) {
    if (p->slots[q].where != TPG_MEM_SCRATCH || !tpg_state_used(st, (tpg_slot)(q + 1))) continue;
    if (sym && st->coll_uses[q]) continue; /* a window of its own (scratch.c) */
    total += TPG_ARENA_ROUND(st->bytes[q]);
  }
  return total;
}
