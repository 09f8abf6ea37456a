/* nccl_loader.h - the NCCL entry points tpgraph uses, loaded at run time.
 *
 * NCCL is dlopen'ed when a communicator (or its id) is first made, as libcuda
 * is when a GPU is first needed, not linked: a program that never makes a
 * comm (one GPU, no collective) neither needs libnccl.so.2 on its machine nor
 * pays for loading it, and the installed packages name no NCCL path of the
 * build machine. Every other NCCL call goes through a tpg_comm, so it runs
 * after the load succeeded. $TPG_LIBNCCL overrides the file loaded (the
 * stand-in driver's tests point it at their fake).
 */
#ifndef TPG_NCCL_LOADER_H
#define TPG_NCCL_LOADER_H

#include <nccl.h>

#include "lib/internal.h"

/* X(name): every entry point the library calls, typed from nccl.h. */
#define TPG_NCCL_FUNCS(X)   \
  X(ncclGetVersion)         \
  X(ncclGetUniqueId)        \
  X(ncclGetErrorString)     \
  X(ncclGetLastError)       \
  X(ncclCommInitRankConfig) \
  X(ncclCommGetAsyncError)  \
  X(ncclCommFinalize)       \
  X(ncclCommDestroy)        \
  X(ncclCommAbort)          \
  X(ncclAllReduce)          \
  X(ncclAllGather)          \
  X(ncclReduceScatter)      \
  X(ncclMemAlloc)           \
  X(ncclMemFree)            \
/* end */

/* Newer than the oldest NCCL accepted: NULL when this NCCL lacks them; the
 * callers say what they do instead. */
#define TPG_NCCL_FUNCS_OPTIONAL(X)                                                \
  X(ncclCommRevoke)            /* 2.28: stop in-flight work, keep the handle */    \
  X(ncclCommWindowRegister)    /* 2.27: TPG_GRAPH_NCCL_SYMMETRIC (else refused) */ \
  X(ncclCommWindowDeregister)                                                      \
/* end */

typedef struct tpg_nccl_table {
#define TPG_NCCL_FIELD(name) __typeof__(&name) name;
  TPG_NCCL_FUNCS(TPG_NCCL_FIELD)
  TPG_NCCL_FUNCS_OPTIONAL(TPG_NCCL_FIELD)
#undef TPG_NCCL_FIELD
  int version; /* ncclGetVersion, e.g. 22809 */
} tpg_nccl_table;

/* The loaded table; NULL until tpg_nccl_load succeeded. */
TPG_HIDDEN extern const tpg_nccl_table *tpg_nccl;

/* Loads NCCL once per process (thread-safe). On failure records, under the
 * public call `fn`, which file could not be loaded or which entry point it
 * lacks, and returns TPG_ERROR_NCCL; the failure is remembered. */
TPG_HIDDEN tpg_status tpg_nccl_load(const char *fn);

/* Why NCCL could not be loaded ("" once loaded), loading it if not tried
 * yet, without recording an error: for tpg_runtime_get_info. */
TPG_HIDDEN const char *tpg_nccl_why(void);

#endif
