/* comm.h - the communicator as the graph builder sees it. */
#ifndef TPG_COMM_H
#define TPG_COMM_H

#include <nccl.h>
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
  tpg_peer peer;          /* buffers for our own collectives (lazy)      */
};

/* Checks a handle passed to a public call (magic, not aborted). */
TPG_HIDDEN tpg_status tpg_comm_check_usable(const tpg_comm *c, const char *fn, const char *argname);

/* After an NCCL call on a non-blocking comm: wait (bounded by the comm's
 * deadline) until it is no longer ncclInProgress. Aborts on failure. */
TPG_HIDDEN tpg_status tpg_nccl_settle(tpg_comm *c, ncclResult_t r, const char *fn, const char *what);

TPG_HIDDEN ncclDataType_t tpg_nccl_dtype(tpg_dtype t);

/* All-gather `bytes` per rank into all[nranks * bytes] (host memory),
 * synchronously, bounded by the comm's deadline. A collective call. */
TPG_HIDDEN tpg_status tpg_comm_allgather_host(tpg_comm *c, const void *mine, void *all, size_t bytes);

#endif
