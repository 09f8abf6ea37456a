/* comm.h - the communicator as the graph builder sees it.
 *
 * comm.c knows nothing of peer.c (peer.c calls comm.c, never the reverse):
 * what the peer buffers need from the comm's life cycle is two fields peer.c
 * fills, a word an abort raises and a hook destroy calls.
 */
#ifndef TPG_COMM_H
#define TPG_COMM_H

#include "lib/nccl_loader.h"
#include <pthread.h>
#include <stdatomic.h>

#include "lib/device.h"
#include "lib/peer.h"

struct tpg_comm {
  unsigned magic;
  ncclComm_t nccl;
  tpg_dev dev;
  int rank, nranks;
  int timeout_ms;
  atomic_int aborted;     /* revoked after an error or tpg_comm_abort: only
                             destroy is allowed; nccl stays valid till then */
  atomic_int graphs;      /* live graphs that captured this comm        */
  CUstream stream;        /* private: warm-up                            */
  CUdeviceptr scratch;    /* warm-up buffer                              */
  /* Host-mapped word our all-reduce kernels poll; an abort sets it to 1 so
   * they stop. Published by peer setup (after zeroing it), read by
   * tpg_comm_abort from any thread: hence atomic. */
  _Atomic(uint32_t *) abort_word;
  /* Frees what peer setup made; called by destroy with the context current. */
  void (*release_peer)(struct tpg_comm *c);
  tpg_peer peer;          /* buffers for our own collectives (lazy)      */
};

/* Checks a handle passed to a public call (live, not aborted). */
TPG_HIDDEN tpg_status tpg_comm_check_usable(const tpg_comm *c, const char *fn, const char *argname);

/* After an NCCL call on a non-blocking comm: wait (bounded by the comm's
 * deadline) until it is no longer ncclInProgress. Aborts on failure. */
TPG_HIDDEN tpg_status tpg_nccl_settle(tpg_comm *c, ncclResult_t r, const char *fn, const char *what);

TPG_HIDDEN ncclDataType_t tpg_nccl_dtype(tpg_dtype t);

/* All-gather `bytes` per rank into all[nranks * bytes] (host memory),
 * synchronously, bounded by the comm's deadline. A collective call, made
 * while a graph is being created; the comm's context must be current. */
TPG_HIDDEN tpg_status tpg_comm_allgather_host(tpg_comm *c, const void *mine, void *all, size_t bytes);

/* Reads the abort word (0 when none is published). */
TPG_HIDDEN uint32_t tpg_comm_abort_word(const tpg_comm *c);

#endif
