/* collective_select.c - the all-reduce backend: which kernel serves an
 * all-reduce node and with what launch shape, decided here only.
 *
 * AUTO, by size: the small push kernel (lamport) up to small_max, the push
 * kernel up to push_max (and 4 MiB / ranks), two-shot up to twoshot_max,
 * then at 2 ranks the push kernel in rounds up to rounds_max, NCCL above.
 * Each limit is where the next kernel became faster on 2 x H200 (measured,
 * with the command: docs/performance.md, "Which kernel serves which size").
 * Push rather than two-shot up to 2 MiB although two-shot is as fast alone:
 * in a layer the ranks arrive at different times after their GEMMs, and
 * two-shot's two dependent NVLink phases pay that skew twice. The push
 * kernel moves R-1 copies of the message, so at R > 2 (not measured) AUTO
 * keeps it under 4 MiB / ranks and leaves large messages to two-shot and
 * NCCL. The two-shot grid defaults to 128 blocks: more SMs issuing NVLink
 * stores pay from 4 MiB and cost ~1% at 2 MiB (same page).
 * The peer buffers' capacities (staging per kernel) come from lib/peer.c,
 * which sizes them.
 */
#define _POSIX_C_SOURCE 200809L
#include "graphbuild/nodes/collective_select.h"

#include <stdio.h>

#include "lib/comm.h"

tpg_status tpg_allreduce_select(tpg_comm *c, const tpg_allreduce_tuning *t, tpg_collective_algo algo, size_t bytes,
                                size_t send_off, size_t recv_off, const char *label, tpg_allreduce_choice *out) {
  out->k = TPG_PEER_PULL;
  out->kernel = NULL;
  out->grid = out->block = 0;
  out->why[0] = '\0';
  const char *why = NULL;
  if (algo == TPG_ALGO_NCCL) return TPG_SUCCESS;
  if (c->nranks < 2) why = "a single rank has nothing to reduce";
  else {
    TPG_TRY(tpg_peer_setup(c));
    if (c->peer.state != 1) why = c->peer.why;
    else if (send_off % 16 || recv_off % 16) why = "send or recv is not 16-byte aligned";
  }
  tpg_peer_kernel k = TPG_PEER_PULL;
  if (!why) {
    const size_t cap_push = tpg_peer_max_push(c), cap_pull = tpg_peer_max_pull(c), cap_two = tpg_peer_max_twoshot(c);
    const size_t cap_small = tpg_peer_max_small(c);
    if (algo == TPG_ALGO_ONESHOT) {
      /* Push for small messages: one NVLink crossing; pull above push_max,
       * where moving R copies of the data costs more than the second one. */
      if (bytes <= t->small_max && bytes <= cap_small) k = TPG_PEER_SMALL;
      else if (bytes <= t->push_max && bytes <= cap_push) k = TPG_PEER_PUSH;
      else if (bytes <= cap_pull) k = TPG_PEER_PULL;
      else {
        snprintf(out->why, sizeof out->why,
                 "the message (%zu bytes) is larger than the one-shot staging buffer (%zu)", bytes, cap_pull);
        why = out->why;
      }
    } else if (algo == TPG_ALGO_TWOSHOT) {
      if (bytes <= cap_two) k = TPG_PEER_TWOSHOT;
      else {
        snprintf(out->why, sizeof out->why, "the message (%zu bytes) is larger than the two-shot areas allow (%zu)",
                 bytes, cap_two);
        why = out->why;
      }
    } else { /* AUTO */
      const size_t push_r = ((size_t)4 << 20) / (size_t)c->nranks; /* R-1 copies: see the top */
      if (bytes <= t->small_max && bytes <= cap_small) k = TPG_PEER_SMALL;
      else if (bytes <= t->push_max && bytes <= push_r && bytes <= cap_push) k = TPG_PEER_PUSH;
      else if (bytes <= t->twoshot_max && bytes <= cap_two) k = TPG_PEER_TWOSHOT;
      else if (c->nranks == 2 && bytes <= t->rounds_max && bytes <= cap_push) k = TPG_PEER_PUSH;
      else why = "NCCL serves messages of this size best";
    }
  }
  if (why) {
    if (why != out->why) snprintf(out->why, sizeof out->why, "%s", why);
    if (algo == TPG_ALGO_ONESHOT || algo == TPG_ALGO_TWOSHOT)
      return TPG_ARG_FAIL("node %s: TPG_ALGO_%s cannot serve it: %s", label,
                          algo == TPG_ALGO_ONESHOT ? "ONESHOT" : "TWOSHOT", why);
    return TPG_SUCCESS;
  }
  static const char *const knames[] = {"tpg_allreduce_oneshot", "tpg_allreduce_push", "tpg_allreduce_twoshot",
                                       "tpg_allreduce_lamport"};
  out->k = k;
  out->kernel = knames[k];
  /* Always the kernel's whole grid, empty blocks included: the kernels'
   * epoch counters are per block index, and their argument that a peer
   * cannot overwrite data still being read holds only if every block index
   * advances once per all-reduce. With grids sized by the message, two
   * all-reduces of different sizes on one comm put the same bytes under
   * different block indices and a rank running one node ahead could
   * overwrite what a slower peer had not read yet. The grid is fixed per
   * kernel (two-shot has its own epoch counters, so its grid may differ from
   * the one-shot kernels'); the two-shot grid is a tuning value that must be
   * the same on every rank (the fingerprint compares it). */
  out->grid = k == TPG_PEER_TWOSHOT ? t->twoshot_blocks : k == TPG_PEER_PUSH ? TPG_AR_PUSH_BLOCKS : TPG_AR_ONESHOT_BLOCKS;
  /* Two-shot: 512 threads, so a block keeps more remote stores and polls in
   * flight. Push: 264 x 256 (two blocks per SM, each sending its window by
   * bulk copies while its threads poll; the grids compared:
   * docs/kernels.md, "Push in rounds"). The small push and pull kernels: 256. */
  out->block = k == TPG_PEER_TWOSHOT ? 512 : 256;
  return TPG_SUCCESS;
}
