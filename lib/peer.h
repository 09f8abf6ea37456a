/* peer.h - peer-visible buffers of a communicator, for our own collectives. */
#ifndef TPG_PEER_H
#define TPG_PEER_H

#include "kernels/tpg_kargs.h"
#include "lib/cuda_driver.h"

typedef struct tpg_peer {
  int state;                        /* 0 not tried, 1 ready, -1 unavailable */
  char why[160];                    /* why unavailable                      */
  CUdeviceptr local;                /* [flags 4 KiB][pull staging 2 x slot]
                                       [push receive 2 x slot][two-shot
                                       scatter 2 x tw][two-shot gather 2 x tw]
                                       [small push receive 2 x small]       */
  size_t slot_bytes;
  size_t small_bytes;               /* one half of the small push area      */
  size_t twoshot_bytes;             /* tw: one half of a two-shot area      */
  void *base[TPG_AR_MAX_RANKS];     /* every rank's buffer, as mapped here  */
  int ipc_opened[TPG_AR_MAX_RANKS]; /* base[q] came from cuIpcOpenMemHandle */
  int counted[TPG_AR_MAX_RANKS];    /* base[q] is a same-process peer's buffer we hold a count on */
  int local_counted;                /* local is in the process-wide counts  */
  CUdeviceptr epochs;               /* [4][TPG_AR_EPOCHS] u32: pull, push, two-shot, small push */
  uint32_t *status_host;            /* host-mapped failure word (also the
                                       comm's abort_word once published)    */
  CUdeviceptr status_dev;
} tpg_peer;

struct tpg_comm;

/* Collective over the comm (every rank, same point in its call sequence):
 * allocates and exchanges the buffers (IPC handles across processes, plain
 * pointers with peer access inside one). All ranks reach the same state. */
TPG_HIDDEN tpg_status tpg_peer_setup(struct tpg_comm *c);
TPG_HIDDEN void tpg_peer_free(struct tpg_comm *c);

/* Two ranks share a process: same host, pid and PID namespace. */
TPG_HIDDEN int tpg_peer_same_process(uint64_t host_a, int32_t pid_a, uint64_t ns_a, uint64_t host_b, int32_t pid_b,
                                     uint64_t ns_b);

/* Our all-reduce kernels; the value indexes the epoch counters. Each has its
 * own area: the protocols' "no overwrite before read" arguments hold per
 * kernel, between launches of that kernel. */
typedef enum tpg_peer_kernel {
  TPG_PEER_PULL = 0,    /* tpg_allreduce_oneshot */
  TPG_PEER_PUSH = 1,    /* tpg_allreduce_push */
  TPG_PEER_TWOSHOT = 2, /* tpg_allreduce_twoshot */
  TPG_PEER_SMALL = 3    /* tpg_allreduce_lamport: the lowest latency */
} tpg_peer_kernel;
#define TPG_PEER_NKERNELS 4

/* Fills the peer part of an all-reduce kernel's arguments: flags + staging
 * (pull), receive buffers (push), scatter + gather areas (two-shot). */
TPG_HIDDEN void tpg_peer_args(const struct tpg_comm *c, tpg_peer_kernel k, tpg_allreduce_args *a);

/* Largest message (bytes) each kernel serves on this comm. */
TPG_HIDDEN size_t tpg_peer_max_pull(const struct tpg_comm *c);
TPG_HIDDEN size_t tpg_peer_max_push(const struct tpg_comm *c);
TPG_HIDDEN size_t tpg_peer_max_twoshot(const struct tpg_comm *c);
TPG_HIDDEN size_t tpg_peer_max_small(const struct tpg_comm *c);

#endif
