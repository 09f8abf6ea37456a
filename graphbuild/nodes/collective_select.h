/* collective_select.h - the all-reduce backend's choices, in one place:
 * which of our kernels (or NCCL) serves an all-reduce node, its kernel name,
 * grid and block, and the size limits of TPG_ALGO_AUTO (collective_select.c).
 */
#ifndef TPG_COLLECTIVE_SELECT_H
#define TPG_COLLECTIVE_SELECT_H

#include "graphbuild/plan.h"
#include "lib/peer.h"

struct tpg_comm;

/* AUTO's default limits (tpg_graph_config.allreduce_* and the environment
 * move them; collective_select.c says why these values). */
#define TPG_SMALL_MAX_DEFAULT ((size_t)256 << 10)
#define TPG_PUSH_MAX_DEFAULT ((size_t)2 << 20)
#define TPG_TWOSHOT_MAX_DEFAULT ((size_t)8 << 20)
#define TPG_ROUNDS_MAX_DEFAULT ((size_t)64 << 20)
#define TPG_TWOSHOT_BLOCKS_DEFAULT 128

/* The resolved tuning of the all-reduce backend. */
typedef struct tpg_allreduce_tuning {
  size_t small_max, push_max, twoshot_max; /* bytes */
  size_t rounds_max;            /* bytes: push in rounds above twoshot_max (2 ranks) */
  unsigned twoshot_blocks;      /* 1..TPG_AR_MAX_BLOCKS */
} tpg_allreduce_tuning;

/* What serves one all-reduce: ours (kernel != NULL) or NCCL (kernel NULL,
 * why says why not ours). */
typedef struct tpg_allreduce_choice {
  tpg_peer_kernel k;
  const char *kernel;           /* entry point, NULL: NCCL */
  unsigned grid, block;
  char why[160];
} tpg_allreduce_choice;

/* Chooses for an all-reduce of `bytes` (send/recv offsets in bytes) with
 * algorithm `algo` on comm c (peer buffers set up on first use: a collective
 * call every rank makes alike). A forced ONESHOT/TWOSHOT that cannot be
 * served fails from fn naming `label`. */
TPG_HIDDEN tpg_status tpg_allreduce_select(struct tpg_comm *c, const tpg_allreduce_tuning *t, tpg_collective_algo algo,
                                           size_t bytes, size_t send_off, size_t recv_off, const char *label,
                                           tpg_allreduce_choice *out);

#endif
