/* comm.c - NCCL communicators that cannot hang the caller.
 *
 * Every NCCL communicator is created non-blocking, and every wait on it is a
 * poll loop with a deadline that also reads ncclCommGetAsyncError: a peer that
 * died or never joins turns into TPG_ERROR_TIMEOUT / TPG_ERROR_PEER and an
 * aborted communicator, never a stuck thread. Teardown finalizes first (with
 * the same deadline) and aborts if finalize cannot complete.
 *
 * "Aborting" is two steps, because ncclCommAbort blocks until every CUDA
 * graph that captured work on the comm is destroyed (NCCL's persistentRefs):
 * called while our graphs are alive — which is exactly when a wait times out —
 * it never returns. So an error only revokes the comm (ncclCommRevoke, NCCL
 * 2.28+: in-flight kernels stop, the handle stays valid), and the NCCL comm
 * is aborted and freed in tpg_comm_destroy, which runs after the graphs are
 * gone. The handle staying valid until destroy also makes tpg_comm_abort
 * safe from a watchdog thread while another thread waits on the comm.
 */
#define _POSIX_C_SOURCE 200809L
#include "lib/comm.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define TPG_DEFAULT_TIMEOUT_MS 5000

ncclDataType_t tpg_nccl_dtype(tpg_dtype t) {
  switch (t) {
    case TPG_F16: return ncclFloat16;
    case TPG_BF16: return ncclBfloat16;
    default: return ncclFloat32;
  }
}

static void nap_us(long us) {
  struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
  nanosleep(&ts, NULL);
}

/* Poll-wait backoff: spin briefly (latency), then sleep (CPU). */
static void backoff(double start_us) {
  double el = tpg_now_us() - start_us;
  if (el > 200.0) nap_us(el > 10000.0 ? 1000 : 50);
}

/* NCCL older than 2.28 has no ncclCommRevoke: resolve it weakly and fall
 * back (in abort_comm) instead of failing to load. */
#pragma weak ncclCommRevoke

/* Stops the comm's in-flight NCCL work without freeing it (see the top of
 * the file). Idempotent and thread-safe: the first caller revokes. */
static void abort_comm(tpg_comm *c) {
  int was = 0;
  if (!atomic_compare_exchange_strong(&c->aborted, &was, 1)) return;
  /* Our all-reduce kernels poll this word while they wait: set, the ones
   * running stop and the ones still queued in a graph exit at their first
   * wait instead of each sitting out its deadline. */
  if (c->peer.status_host) *(volatile uint32_t *)c->peer.status_host = 1u;
  if (!c->nccl) return;
  if (!ncclCommRevoke) {
    /* No revoke: abort now if no graph holds the comm, else at destroy (a
     * running NCCL kernel then only stops at the graph's deadline). */
    if (atomic_load(&c->graphs) == 0) {
      ncclCommAbort(c->nccl);
      c->nccl = NULL;
    }
    return;
  }
  ncclResult_t r = ncclCommRevoke(c->nccl, NCCL_REVOKE_DEFAULT);
  double t0 = tpg_now_us(), deadline = t0 + 1000.0 * c->timeout_ms;
  while (r == ncclInProgress && tpg_now_us() < deadline) {
    if (ncclCommGetAsyncError(c->nccl, &r) != ncclSuccess) break;
    backoff(t0);
  }
}

/* Frees the NCCL comm of an aborted tpg_comm; no graph may hold it now. */
static void release_aborted(tpg_comm *c) {
  if (c->nccl) ncclCommAbort(c->nccl);
  c->nccl = NULL;
}

tpg_status tpg_comm_check_usable(const tpg_comm *c, const char *fn, const char *argname) {
  if (!c) return tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn, "%s is NULL: expected a tpg_comm", argname);
  if (c->magic != TPG_MAGIC_COMM)
    return tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn, "%s is not a live tpg_comm (destroyed or corrupt handle)", argname);
  if (c->aborted)
    return tpg_err(TPG_ERROR_INVALID_STATE, fn,
                   "%s (rank %d) was aborted after an error or timeout; destroy it and create a new one", argname,
                   c->rank);
  return TPG_SUCCESS;
}

tpg_status tpg_nccl_settle(tpg_comm *c, ncclResult_t r, const char *fn, const char *what) {
  double t0 = tpg_now_us();
  double deadline = t0 + 1000.0 * c->timeout_ms;
  while (r == ncclInProgress && c->nccl && !atomic_load(&c->aborted)) {
    if (ncclCommGetAsyncError(c->nccl, &r) != ncclSuccess) break;
    if (r != ncclInProgress) break;
    if (tpg_now_us() > deadline) {
      abort_comm(c);
      return tpg_err(TPG_ERROR_TIMEOUT, fn, "%s did not complete within %d ms (rank %d of %d); comm aborted", what,
                     c->timeout_ms, c->rank, c->nranks);
    }
    backoff(t0);
  }
  if (r == ncclInProgress) /* revoked by another thread meanwhile */
    return tpg_err(TPG_ERROR_INVALID_STATE, fn, "%s: the comm (rank %d) was aborted meanwhile", what, c->rank);
  if (r != ncclSuccess) {
    const char *last = c->nccl ? ncclGetLastError(c->nccl) : NULL;
    abort_comm(c);
    return tpg_err(r == ncclRemoteError ? TPG_ERROR_PEER : TPG_ERROR_NCCL, fn, "%s failed: %s%s%s; comm aborted", what,
                   ncclGetErrorString(r), last && last[0] ? ": " : "", last ? last : "");
  }
  return TPG_SUCCESS;
}

/* ---- ids ---------------------------------------------------------------- */

tpg_status tpg_comm_id_create(tpg_comm_id *out) {
  tpg_err_clear();
  TPG_CHECK_ARG(out != NULL, "out is NULL: expected a tpg_comm_id to fill");
  _Static_assert(sizeof(ncclUniqueId) == TPG_COMM_ID_BYTES, "NCCL unique id size changed");
  ncclUniqueId id;
  ncclResult_t r = ncclGetUniqueId(&id);
  if (r != ncclSuccess)
    return TPG_FAIL(TPG_ERROR_NCCL, "ncclGetUniqueId failed: %s (no usable network interface for NCCL's bootstrap?)",
                    ncclGetErrorString(r));
  memcpy(out->bytes, id.internal, TPG_COMM_ID_BYTES);
  return TPG_SUCCESS;
}

tpg_status tpg_comm_id_write_file(const tpg_comm_id *id, const char *path) {
  tpg_err_clear();
  TPG_CHECK_ARG(id != NULL, "id is NULL: expected the tpg_comm_id to write");
  TPG_CHECK_ARG(path != NULL && path[0], "path is NULL or empty: expected a file path");
  char tmp[4096];
  int n = snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
  TPG_CHECK_ARG(n > 0 && (size_t)n < sizeof tmp, "path is longer than %zu bytes", sizeof tmp - 32);
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  if (fd < 0) return TPG_ARG_FAIL("path %s: cannot create %s: %s", path, tmp, strerror(errno));
  ssize_t w = write(fd, id->bytes, TPG_COMM_ID_BYTES);
  int e = errno;
  if (close(fd) != 0 && w == TPG_COMM_ID_BYTES) { w = -1; e = errno; }
  if (w != TPG_COMM_ID_BYTES) {
    unlink(tmp);
    return TPG_ARG_FAIL("path %s: write failed: %s", path, strerror(e));
  }
  if (rename(tmp, path) != 0) {
    e = errno;
    unlink(tmp);
    return TPG_ARG_FAIL("path %s: rename from %s failed: %s", path, tmp, strerror(e));
  }
  return TPG_SUCCESS;
}

tpg_status tpg_comm_id_read_file(const char *path, int timeout_ms, tpg_comm_id *out) {
  tpg_err_clear();
  TPG_CHECK_ARG(path != NULL && path[0], "path is NULL or empty: expected a file path");
  TPG_CHECK_ARG(out != NULL, "out is NULL: expected a tpg_comm_id to fill");
  TPG_CHECK_ARG(timeout_ms >= 0, "timeout_ms is %d: expected >= 0", timeout_ms);
  double deadline = tpg_now_us() + 1000.0 * timeout_ms;
  for (;;) {
    int fd = open(path, O_RDONLY);
    if (fd >= 0) {
      ssize_t r = read(fd, out->bytes, TPG_COMM_ID_BYTES);
      close(fd);
      if (r == TPG_COMM_ID_BYTES) return TPG_SUCCESS;
      return TPG_ARG_FAIL("path %s holds %zd bytes: expected a %d-byte tpg_comm_id", path, r, TPG_COMM_ID_BYTES);
    }
    if (errno != ENOENT) return TPG_ARG_FAIL("path %s: %s", path, strerror(errno));
    if (tpg_now_us() > deadline)
      return TPG_FAIL(TPG_ERROR_TIMEOUT, "path %s did not appear within %d ms (did rank 0 write it?)", path,
                      timeout_ms);
    nap_us(10000);
  }
}

/* ---- communicators ------------------------------------------------------ */

static tpg_status wait_stream(tpg_comm *c, CUstream s, const char *fn) {
  double t0 = tpg_now_us();
  double deadline = t0 + 1000.0 * c->timeout_ms;
  for (;;) {
    if (atomic_load(&c->aborted)) /* by another thread: the results are void */
      return tpg_err(TPG_ERROR_INVALID_STATE, fn, "the comm (rank %d of %d) was aborted while waiting", c->rank,
                     c->nranks);
    CUresult q = tpg_cu->cuStreamQuery(s);
    if (q == CUDA_SUCCESS) {
      if (c->peer.status_host && *(volatile uint32_t *)c->peer.status_host) {
        abort_comm(c);
        return tpg_err(TPG_ERROR_PEER, fn,
                       "a peer did not reach the one-shot all-reduce within %d ms (rank %d of %d); comm aborted",
                       c->timeout_ms, c->rank, c->nranks);
      }
      return TPG_SUCCESS;
    }
    if (q != CUDA_ERROR_NOT_READY) {
      abort_comm(c);
      return tpg_cu_fail(q, fn, "cuStreamQuery");
    }
    ncclResult_t ar = ncclSuccess;
    if (c->nccl && ncclCommGetAsyncError(c->nccl, &ar) == ncclSuccess && ar != ncclSuccess && ar != ncclInProgress) {
      abort_comm(c);
      return tpg_err(ar == ncclRemoteError ? TPG_ERROR_PEER : TPG_ERROR_NCCL, fn,
                     "NCCL reported %s on rank %d while waiting; comm aborted", ncclGetErrorString(ar), c->rank);
    }
    if (tpg_now_us() > deadline) {
      abort_comm(c);
      return tpg_err(TPG_ERROR_TIMEOUT, fn,
                     "stream work did not finish within %d ms on rank %d of %d (a peer is gone or not "
                     "participating?); comm aborted",
                     c->timeout_ms, c->rank, c->nranks);
    }
    backoff(t0);
  }
}

static void comm_free(tpg_comm *c) {
  if (!c) return;
  if (c->nccl) { /* only reached on a failed create: no graphs */
    atomic_store(&c->aborted, 1);
    release_aborted(c);
  }
  if (c->dev.ctx) {
    if (tpg_dev_push(&c->dev) == TPG_SUCCESS) {
      tpg_peer_free(c);
      if (c->scratch) tpg_cu->cuMemFree(c->scratch);
      if (c->stream) tpg_cu->cuStreamDestroy(c->stream);
      tpg_dev_pop();
    }
    tpg_dev_close(&c->dev);
  }
  c->magic = TPG_MAGIC_DEAD;
  free(c);
}

tpg_status tpg_comm_create(const tpg_comm_id *id, const tpg_comm_config *cfg, tpg_comm **out) {
  tpg_err_clear();
  TPG_CHECK_ARG(out != NULL, "out is NULL: expected a tpg_comm * to set");
  *out = NULL;
  TPG_CHECK_ARG(id != NULL, "id is NULL: expected the tpg_comm_id from rank 0");
  TPG_CHECK_ARG(cfg != NULL, "cfg is NULL: expected a tpg_comm_config (TPG_COMM_CONFIG_INIT)");
  TPG_CHECK_ARG(cfg->magic == TPG_CONFIG_MAGIC && cfg->size >= sizeof(tpg_comm_config),
                "cfg was not initialised with TPG_COMM_CONFIG_INIT (magic 0x%x, size %zu)", cfg->magic, cfg->size);
  TPG_CHECK_ARG(cfg->nranks >= 1, "cfg->nranks is %d: expected >= 1", cfg->nranks);
  TPG_CHECK_ARG(cfg->rank >= 0 && cfg->rank < cfg->nranks, "cfg->rank is %d: expected 0..%d (nranks %d)", cfg->rank,
                cfg->nranks - 1, cfg->nranks);
  TPG_CHECK_ARG(cfg->timeout_ms >= 0, "cfg->timeout_ms is %d: expected >= 0 (0: default %d ms)", cfg->timeout_ms,
                TPG_DEFAULT_TIMEOUT_MS);
  TPG_CHECK_ARG(cfg->device >= 0, "cfg->device is %d: expected a CUDA device ordinal >= 0", cfg->device);

  tpg_comm *c = calloc(1, sizeof *c);
  if (!c) return TPG_FAIL(TPG_ERROR_OUT_OF_MEMORY, "out of host memory");
  c->magic = TPG_MAGIC_COMM;
  c->rank = cfg->rank;
  c->nranks = cfg->nranks;
  c->timeout_ms = cfg->timeout_ms ? cfg->timeout_ms : TPG_DEFAULT_TIMEOUT_MS;
  atomic_init(&c->graphs, 0);
  atomic_init(&c->aborted, 0);
  tpg_status st = tpg_dev_open(cfg->device, &c->dev);
  if (st != TPG_SUCCESS) goto fail;
  TPG_TRYGOTO(tpg_dev_push(&c->dev), st, fail);
  TPG_CUGOTO(cuStreamCreate(&c->stream, CU_STREAM_NON_BLOCKING), st, fail_pop);
  TPG_CUGOTO(cuMemAlloc(&c->scratch, 256), st, fail_pop);
  TPG_CUGOTO(cuMemsetD32Async(c->scratch, 0, 64, c->stream), st, fail_pop);

  ncclConfig_t ncfg = NCCL_CONFIG_INITIALIZER;
  ncfg.blocking = 0;
  ncclUniqueId uid;
  memcpy(uid.internal, id->bytes, TPG_COMM_ID_BYTES);
  ncclResult_t r = ncclCommInitRankConfig(&c->nccl, c->nranks, uid, c->rank, &ncfg);
  if (r != ncclSuccess && r != ncclInProgress) {
    c->nccl = NULL;
    st = TPG_FAIL(TPG_ERROR_NCCL, "ncclCommInitRankConfig(rank %d of %d, device %d) failed: %s", c->rank, c->nranks,
                  cfg->device, ncclGetErrorString(r));
    goto fail_pop;
  }
  TPG_TRYGOTO(tpg_nccl_settle(c, r, __func__, "ncclCommInitRankConfig (are all ranks starting?)"), st, fail_pop);
  /* Warm-up: connections are set up by the first collective, which must not
   * happen inside a graph capture. */
  r = ncclAllReduce((void *)c->scratch, (void *)(c->scratch + 128), 16, ncclFloat32, ncclSum, c->nccl, c->stream);
  TPG_TRYGOTO(tpg_nccl_settle(c, r, __func__, "warm-up ncclAllReduce"), st, fail_pop);
  TPG_TRYGOTO(wait_stream(c, c->stream, __func__), st, fail_pop);
  tpg_dev_pop();
  *out = c;
  return TPG_SUCCESS;
fail_pop:
  tpg_dev_pop();
fail:
  comm_free(c);
  return st;
}

tpg_status tpg_comm_abort(tpg_comm *c) {
  tpg_err_clear();
  TPG_CHECK_ARG(c != NULL, "comm is NULL: expected a tpg_comm");
  TPG_CHECK_ARG(c->magic == TPG_MAGIC_COMM, "comm is not a live tpg_comm (destroyed or corrupt handle)");
  abort_comm(c);
  return TPG_SUCCESS;
}

tpg_status tpg_comm_destroy(tpg_comm *c) {
  tpg_err_clear();
  if (!c) return TPG_SUCCESS;
  TPG_CHECK_ARG(c->magic == TPG_MAGIC_COMM, "comm is not a live tpg_comm (destroyed or corrupt handle)");
  int live = atomic_load(&c->graphs);
  if (live > 0)
    return TPG_FAIL(TPG_ERROR_INVALID_STATE,
                    "%d graph%s still use this comm (NCCL holds a reference per captured graph): destroy them first",
                    live, live == 1 ? "" : "s");
  tpg_status st = TPG_SUCCESS;
  if (c->nccl && tpg_dev_push(&c->dev) == TPG_SUCCESS) {
    if (!atomic_load(&c->aborted)) {
      /* Finalize under the deadline; a peer that is gone makes settle revoke. */
      ncclResult_t r = ncclCommFinalize(c->nccl);
      st = tpg_nccl_settle(c, r, __func__, "ncclCommFinalize");
    }
    if (atomic_load(&c->aborted)) release_aborted(c); /* finalize is invalid after a revoke */
    else ncclCommDestroy(c->nccl);
    c->nccl = NULL;
    tpg_dev_pop();
  }
  comm_free(c);
  return st;
}

tpg_status tpg_comm_get_info(const tpg_comm *c, int *rank, int *nranks, int *device) {
  tpg_err_clear();
  TPG_CHECK_ARG(c != NULL && c->magic == TPG_MAGIC_COMM, "comm is NULL or not a live tpg_comm");
  if (rank) *rank = c->rank;
  if (nranks) *nranks = c->nranks;
  if (device) *device = c->dev.ordinal;
  return TPG_SUCCESS;
}

tpg_status tpg_comm_wait(tpg_comm *c, tpg_stream stream) {
  tpg_err_clear();
  TPG_TRY(tpg_comm_check_usable(c, __func__, "comm"));
  TPG_TRY(tpg_dev_push(&c->dev));
  tpg_status st = wait_stream(c, (CUstream)stream, __func__);
  tpg_dev_pop();
  return st;
}
