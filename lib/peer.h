/* peer.h - peer-visible buffers of a communicator, for our own collectives. */
#ifndef TPG_PEER_H
#define TPG_PEER_H

#include "kernels/tpg_kargs.h"
#include "lib/cuda_driver.h"

typedef struct tpg_peer {
  int state;                        /* 0 not tried, 1 ready, -1 unavailable */
  char why[160];                    /* why unavailable                      */
  CUdeviceptr local;                /* [flags 4 KiB][staging 2 x slot]      */
  size_t slot_bytes;
  void *base[TPG_AR_MAX_RANKS];     /* every rank's buffer, as mapped here  */
  int ipc_opened[TPG_AR_MAX_RANKS]; /* base[q] came from cuIpcOpenMemHandle */
  CUdeviceptr epochs;               /* [TPG_AR_MAX_BLOCKS] u32              */
  uint32_t *status_host;            /* host-mapped failure word             */
  CUdeviceptr status_dev;
} tpg_peer;

struct tpg_comm;

/* Collective over the comm (every rank, same point in its call sequence):
 * allocates and exchanges the buffers (IPC handles across processes, plain
 * pointers with peer access inside one). All ranks reach the same state. */
TPG_HIDDEN tpg_status tpg_peer_setup(struct tpg_comm *c);
TPG_HIDDEN void tpg_peer_free(struct tpg_comm *c);

/* Fills the peer part of a one-shot all-reduce's arguments. */
TPG_HIDDEN void tpg_peer_args(const struct tpg_comm *c, tpg_allreduce_args *a);

#endif
