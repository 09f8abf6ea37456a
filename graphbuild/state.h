/* state.h - everything a graph derives from its plan, in one place.
 *
 * Whatever follows from a plan (the topological order, which nodes use each
 * slot, each slot's kind and size, which scratch slots the graph must
 * allocate, and which of them a collective touches) is computed by one
 * function, tpg_state_build, from the plan alone: no driver, so it is
 * unit-tested on any machine. Graph creation builds one; a whole-graph update
 * builds a new one from the new plan, checks the bindings against it, and the
 * graph swaps it in only when every step succeeded (derived state is rebuilt,
 * never edited). What needs the GPU (kernel choice, the all-reduce algorithm)
 * is resolved by the node kinds' fill into the node array, which an update
 * likewise rebuilds and swaps.
 */
#ifndef TPG_STATE_H
#define TPG_STATE_H

#include "graphbuild/plan.h"

typedef struct tpg_state {
  int nnodes, nslots;
  int *order;               /* topological order of the plan's nodes */
  int *users, *users_at;    /* CSR, users in topological order: nodes that use slot s
                               are users[users_at[s-1] .. users_at[s]) */
  unsigned char *coll_uses; /* coll_uses[s - 1]: a collective node uses slot s */
  size_t *bytes;            /* bytes[s - 1]: slot s's size in bytes */
  int ncoll;                /* collective nodes */
} tpg_state;

/* Derives the state of plan p (validated: no cycle, else the cycle's error). */
TPG_HIDDEN tpg_status tpg_state_build(const tpg_plan *p, tpg_state **out);
TPG_HIDDEN void tpg_state_free(tpg_state *st);

/* Slot s (1-based) is used by a node of the plan. */
static inline int tpg_state_used(const tpg_state *st, tpg_slot s) {
  return st->users_at[s] > st->users_at[s - 1];
}

/* Every slot the plan uses that the caller must bind (device, host) has a
 * pointer in bind[]; fails from fn naming the first that has none. */
TPG_HIDDEN tpg_status tpg_state_check_bound(const tpg_state *st, const tpg_plan *p, void *const *bind, const char *fn);

/* Scratch memory an update needs: for each scratch slot the new plan uses,
 * whether the graph's allocation (owned_bytes[s - 1], 0 for none) is missing
 * or too small: need[s - 1] = bytes to allocate, else 0. A scratch slot
 * that would be an NCCL symmetric window (sym: the graph has
 * TPG_GRAPH_NCCL_SYMMETRIC and several ranks) is refused instead: windows
 * are registered collectively at creation only. */
TPG_HIDDEN tpg_status tpg_state_scratch_needs(const tpg_state *st, const tpg_plan *p, const size_t *owned_bytes,
                                              int sym, size_t *need, const char *fn);

/* Scratch slots of a graph set (graphset.c) live in one arena the set owns,
 * one after another, each rounded up to this (what cuMemAlloc'd scratch is
 * rounded to): one graph of a set runs at a time, so each lays its slots out
 * from the arena's start. */
#define TPG_ARENA_ROUND(b) (((b) + 255) & ~(size_t)255)

/* Bytes of the arena plan p needs: its used scratch slots, except those a
 * collective uses when they become NCCL symmetric windows (sym), which the
 * graph allocates itself. */
TPG_HIDDEN size_t tpg_state_arena_bytes(const tpg_state *st, const tpg_plan *p, int sym);

#endif
