/* collective_select.c - the all-reduce backend: which kernel serves an
 * all-reduce node and with what launch shape, decided here only.
 *
 * AUTO, by size: the small push kernel (lamport) up to small_max, the push
 * kernel up to push_max (and 4 MiB / ranks), two-shot up to twoshot_max,
 * then at 2 ranks the push kernel in rounds up to rounds_max, NCCL above.
 * Re-fitted on 2 x H200 after push became bulk copies on 264 x 256
 * (tools/probes/ar_lab.cu, 20 chained bf16 all-reduces, one thread driving
 * both GPUs, round 2 of 2026-11-30 session 3, commit 81e7e14;
 * docs/performance.md), us per all-reduce:
 *   bytes   small  push  two-shot  NCCL  NCCL symmetric
 *   16K      3.5   4.3     6.3      7.6     5.4
 *   256K     4.3   5.0     6.7      9.4     9.5
 *   512K     6.1   5.8     7.3     11.1    14.5
 *   1M       8.9   7.2     8.2     14.9    16.9
 *   2M      12.2  11.0    12.4     28.0    20.3
 *   4M      22.7  20.0    18.1     32.9    29.0
 *   8M      44.2  33.3    31.9     46.3    46.3
 *   16M       -   59.7    62.7     75.9    81.2
 * The limits stand as fitted before (small to 256K, push to 2M, two-shot
 * to 8M, push in rounds from 16M); the same figures from the merged tree's
 * st.global push (commit 7404a06): 4.6 / 5.2 / 5.7 / - / 11.3 / 18.6 / 32.7 /
 * 57.4. 32M, 64M: push in rounds 112.6 / 212.9 against NCCL 139.2 / 249.1
 *   (library, round 4 of session 2, commit 3ceb517; NCCL symmetric 160.0 / 306.4)
 * (ar_lab's figures where the library does not pick that kernel: small
 * above 256K, push below 512K and from 4M, two-shot at 16M; its chain runs
 * both GPUs from one thread, ~0.2-0.4 us above the library's.) The push kernel
 * moves R-1 copies of the message, so at R > 2 (not measured here) AUTO
 * keeps it under 4 MiB / ranks, the limit its staging had before it ran in
 * rounds, and leaves large messages to two-shot and NCCL.
 * Earlier reasoning, still true: push up to 2 MiB: in a layer,
 * 8192/28672 at M=128 (a 2 MiB all-reduce after the row-parallel GEMM), the
 * exposed all-reduce measured 18.4 us with push against 24.3 us with
 * two-shot, although two-shot is faster alone (12.7-13.0 vs 14.3 us in
 * allreduce_bench's lock-step chain): its two dependent NVLink phases each
 * wait for the later rank, so the ranks' skew after a GEMM is paid twice.
 * Two-shot grid 128 blocks: on 2 x H200 (allreduce_bench, 2026-11-29) 8.3 /
 * 13.0 / 18.4 / 32.1 us at 1 / 2 / 4 / 8 MiB against 8.8 / 12.8 / 21.0 /
 * 39.7 with 64 and 8.9 / 14.2 / 20.9 / 36.0 with 96: more SMs issuing NVLink
 * stores pays from 4 MiB up and costs ~1% at 2 MiB.
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
   * bulk copies while its threads poll; ar_lab, 2026-11-30 rounds 1-2, see
   * docs/performance.md). The small push and pull kernels: 256. */
  out->block = k == TPG_PEER_TWOSHOT ? 512 : 256;
  return TPG_SUCCESS;
}
