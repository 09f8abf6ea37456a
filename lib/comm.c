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

#include "lib/handle.h"

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

/* Stops the comm's in-flight NCCL work without freeing it (see the top of
 * the file). Idempotent and thread-safe: the first caller revokes. */
static void abort_comm(tpg_comm *c) {
  int was = 0;
  if (!atomic_compare_exchange_strong(&c->aborted, &was, 1)) return;
  /* Our all-reduce kernels poll this word while they wait: set, the ones
   * running stop and the ones still queued in a graph exit at their first
   * wait instead of each sitting out its deadline. */
  uint32_t *w = atomic_load(&c->abort_word);
  if (w) __atomic_store_n(w, 1u, __ATOMIC_SEQ_CST);
  if (!c->nccl) return;
  if (!tpg_nccl->ncclCommRevoke) { /* NCCL older than 2.28 */
    /* No revoke: abort now if no graph holds the comm, else at destroy (a
     * running NCCL kernel then only stops at the graph's deadline). */
    if (atomic_load(&c->graphs) == 0) {
      tpg_nccl->ncclCommAbort(c->nccl);
      c->nccl = NULL;
    }
    return;
  }
  ncclResult_t r = tpg_nccl->ncclCommRevoke(c->nccl, NCCL_REVOKE_DEFAULT);
  double t0 = tpg_now_us(), deadline = t0 + 1000.0 * c->timeout_ms;
  while (r == ncclInProgress && tpg_now_us() < deadline) {
    if (tpg_nccl->ncclCommGetAsyncError(c->nccl, &r) != ncclSuccess) break;
    backoff(t0);
  }
}

/* Frees the NCCL comm of an aborted tpg_comm; no graph may hold it now. */
static void release_aborted(tpg_comm *c) {
  if (c->nccl) tpg_nccl->ncclCommAbort(c->nccl);
  c->nccl = NULL;
}

uint32_t tpg_comm_abort_word(const tpg_comm *c) {
  uint32_t *w = atomic_load(&((tpg_comm *)c)->abort_word);
  return w ? __atomic_load_n(w, __ATOMIC_SEQ_CST) : 0u;
}

/* The handle is one of ours and not destroyed (lib/handle.h): checked before
 * anything is read through it. */
static int comm_live(const tpg_comm *c) { return tpg_handle_live(c, TPG_MAGIC_COMM) && c->magic == TPG_MAGIC_COMM; }

tpg_status tpg_comm_check_usable(const tpg_comm *c, const char *fn, const char *argname) {
  if (!c) return tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn, "%s is NULL: expected a tpg_comm", argname);
  if (!comm_live(c))
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
    if (tpg_nccl->ncclCommGetAsyncError(c->nccl, &r) != ncclSuccess) break;
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
    const char *last = c->nccl ? tpg_nccl->ncclGetLastError(c->nccl) : NULL;
    abort_comm(c);
    return tpg_err(r == ncclRemoteError ? TPG_ERROR_PEER : TPG_ERROR_NCCL, fn, "%s failed: %s%s%s; comm aborted", what,
                   tpg_nccl->ncclGetErrorString(r), last && last[0] ? ": " : "", last ? last : "");
  }
  return TPG_SUCCESS;
}

/* ---- ids ---------------------------------------------------------------- */

tpg_status tpg_comm_id_create(tpg_comm_id *out) {
  tpg_err_clear();
  TPG_CHECK_ARG(out != NULL, "out is NULL: expected a tpg_comm_id to fill");
  TPG_TRY(tpg_nccl_load(__func__));
  _Static_assert(sizeof(ncclUniqueId) == TPG_COMM_ID_BYTES, "NCCL unique id size changed");
  ncclUniqueId id;
  ncclResult_t r = tpg_nccl->ncclGetUniqueId(&id);
  if (r != ncclSuccess)
    return TPG_FAIL(TPG_ERROR_NCCL, "ncclGetUniqueId failed: %s (no usable network interface for NCCL's bootstrap?)",
                    tpg_nccl->ncclGetErrorString(r));
  memcpy(out->bytes, id.internal, TPG_COMM_ID_BYTES);
  return TPG_SUCCESS;
}

/* The id file: magic, the job's nonce, the id (TPG_ID_FILE_BYTES). The file
 * is a trust boundary: another user may plant a link or a file at the path,
 * a FIFO would block a plain read, and a file left by an earlier job holds a
 * valid-looking id of a job that is gone. So the writer creates a fresh file
 * it alone can read (O_EXCL | O_NOFOLLOW, mode 0600) and renames it into
 * place; the reader opens without following links and without blocking, and
 * accepts only a regular file of this user, mode 0600, of the exact size and
 * format, written by the same job: TPG_JOB_ID, when set, must match (launchers
 * give every rank the same one). A file of another job may be replaced by the
 * right one any moment, so the reader keeps waiting for that until the
 * deadline; anything else is refused at once. */
#define TPG_ID_FILE_MAGIC "TPGID01\n"
#define TPG_ID_FILE_BYTES (8 + 8 + TPG_COMM_ID_BYTES)

static uint64_t job_nonce(void) {
  const char *e = getenv("TPG_JOB_ID");
  uint64_t x = 1469598103934665603ull;
  for (const char *p = e ? e : ""; *p; p++) x = (x ^ (unsigned char)*p) * 1099511628211ull;
  return x;
}

tpg_status tpg_comm_id_write_file(const tpg_comm_id *id, const char *path) {
  tpg_err_clear();
  TPG_CHECK_ARG(id != NULL, "id is NULL: expected the tpg_comm_id to write");
  TPG_CHECK_ARG(path != NULL && path[0], "path is NULL or empty: expected a file path");
  char tmp[4096];
  int n = snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
  TPG_CHECK_ARG(n > 0 && (size_t)n < sizeof tmp, "path is longer than %zu bytes", sizeof tmp - 32);
  unsigned char buf[TPG_ID_FILE_BYTES];
  uint64_t nonce = job_nonce();
  memcpy(buf, TPG_ID_FILE_MAGIC, 8);
  memcpy(buf + 8, &nonce, 8);
  memcpy(buf + 16, id->bytes, TPG_COMM_ID_BYTES);
  int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0)
    return TPG_ARG_FAIL("path %s: cannot create %s: %s%s", path, tmp, strerror(errno),
                        errno == EEXIST ? " (something is already there: refused, it may have been planted)" : "");
  int e = 0;
  ssize_t w = -1;
  if (fchmod(fd, 0600) != 0) e = errno; /* exactly 0600 whatever the umask: the reader insists */
  else if ((w = write(fd, buf, sizeof buf)) != (ssize_t)sizeof buf) e = w < 0 ? errno : EIO;
  if (close(fd) != 0 && !e) e = errno;
  if (e) {
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

/* One look at the file: 1 accepted, 0 not there yet (or another job's),
 * -1 refused (message recorded). */
static int read_id_once(const char *path, tpg_comm_id *out, int *stale, const char *fn) {
  int fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return 0;
    if (errno == ELOOP) {
      tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn, "path %s is a symbolic link: refused (expected the file "
              "tpg_comm_id_write_file writes)", path);
      return -1;
    }
    tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn, "path %s: %s", path, strerror(errno));
    return -1;
  }
  struct stat st;
  unsigned char buf[TPG_ID_FILE_BYTES + 1];
  ssize_t r = -1;
  const char *why = NULL;
  char whybuf[160];
  if (fstat(fd, &st) != 0) why = strerror(errno);
  else if (!S_ISREG(st.st_mode))
    why = S_ISDIR(st.st_mode) ? "is a directory" : S_ISFIFO(st.st_mode) ? "is a FIFO" : "is not a regular file";
  else if (st.st_uid != geteuid()) {
    snprintf(whybuf, sizeof whybuf, "is owned by uid %ld, not by this user (uid %ld): refused", (long)st.st_uid,
             (long)geteuid());
    why = whybuf;
  } else if (st.st_size != TPG_ID_FILE_BYTES) {
    snprintf(whybuf, sizeof whybuf, "holds %lld bytes: expected a %d-byte tpg_comm_id file", (long long)st.st_size,
             TPG_ID_FILE_BYTES);
    why = whybuf;
  } else if ((st.st_mode & 07777) != 0600) {
    snprintf(whybuf, sizeof whybuf, "has mode 0%o: expected 0600, as tpg_comm_id_write_file makes it",
             (unsigned)(st.st_mode & 07777));
    why = whybuf;
  } else if ((r = read(fd, buf, sizeof buf)) != TPG_ID_FILE_BYTES || memcmp(buf, TPG_ID_FILE_MAGIC, 8) != 0) {
    why = "is not a tpg_comm_id file (tpg_comm_id_write_file)";
  }
  close(fd);
  if (why) {
    tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn, "path %s %s", path, why);
    return -1;
  }
  uint64_t nonce, mine = job_nonce();
  memcpy(&nonce, buf + 8, 8);
  if (nonce != mine) {
    *stale = 1;
    return 0;
  }
  memcpy(out->bytes, buf + 16, TPG_COMM_ID_BYTES);
  return 1;
}

tpg_status tpg_comm_id_read_file(const char *path, int timeout_ms, tpg_comm_id *out) {
  tpg_err_clear();
  TPG_CHECK_ARG(path != NULL && path[0], "path is NULL or empty: expected a file path");
  TPG_CHECK_ARG(out != NULL, "out is NULL: expected a tpg_comm_id to fill");
  TPG_CHECK_ARG(timeout_ms >= 0, "timeout_ms is %d: expected >= 0", timeout_ms);
  double deadline = tpg_now_us() + 1000.0 * timeout_ms;
  int stale = 0;
  for (;;) {
    int got = read_id_once(path, out, &stale, __func__);
    if (got > 0) return TPG_SUCCESS;
    if (got < 0) return TPG_ERROR_INVALID_ARGUMENT;
    if (tpg_now_us() > deadline) {
      if (stale)
        return TPG_FAIL(TPG_ERROR_TIMEOUT,
                        "path %s holds the id of another job (its TPG_JOB_ID differs: a stale file?) and no new one "
                        "appeared within %d ms",
                        path, timeout_ms);
      return TPG_FAIL(TPG_ERROR_TIMEOUT, "path %s did not appear within %d ms (did rank 0 write it?)", path,
                      timeout_ms);
    }
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
      if (tpg_comm_abort_word(c)) {
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
    if (c->nccl && tpg_nccl->ncclCommGetAsyncError(c->nccl, &ar) == ncclSuccess && ar != ncclSuccess &&
        ar != ncclInProgress) {
      abort_comm(c);
      return tpg_err(ar == ncclRemoteError ? TPG_ERROR_PEER : TPG_ERROR_NCCL, fn,
                     "NCCL reported %s on rank %d while waiting; comm aborted", tpg_nccl->ncclGetErrorString(ar),
                     c->rank);
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

/* Frees the comm's device side: NCCL comm, peer buffers, scratch, stream.
 * The comm's context must be current: called between push and pop, so a
 * context that cannot be made current never makes us skip (leak) these. */
static void comm_release(tpg_comm *c) {
  if (c->nccl) { /* on a failed create, or after an abort: no graph holds it */
    atomic_store(&c->aborted, 1);
    release_aborted(c);
  }
  if (c->release_peer) c->release_peer(c);
  c->release_peer = NULL;
  if (c->scratch) tpg_cu->cuMemFree(c->scratch);
  if (c->stream) tpg_cu->cuStreamDestroy(c->stream);
  c->scratch = 0;
  c->stream = NULL;
}

/* Frees the host side; the device side is gone (comm_release) or was never made. */
static void comm_dispose(tpg_comm *c) {
  if (!c) return;
  tpg_dev_close(&c->dev);
  tpg_handle_remove(c);
  tpg_handle_poison(&c->magic);
  free(c);
}

static tpg_status comm_create(const tpg_comm_id *id, const tpg_comm_config *cfg, tpg_comm **out) {
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
  /* NCCL is loaded here, at the first comm, not when the library is. */
  TPG_TRY(tpg_nccl_load(__func__));

  tpg_comm *c = calloc(1, sizeof *c);
  if (!c) return TPG_FAIL(TPG_ERROR_OUT_OF_MEMORY, "out of host memory");
  if (tpg_handle_add(c, TPG_MAGIC_COMM) != TPG_SUCCESS) {
    free(c);
    return TPG_FAIL(TPG_ERROR_OUT_OF_MEMORY, "out of host memory");
  }
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
  ncclResult_t r = tpg_nccl->ncclCommInitRankConfig(&c->nccl, c->nranks, uid, c->rank, &ncfg);
  if (r != ncclSuccess && r != ncclInProgress) {
    c->nccl = NULL;
    st = TPG_FAIL(TPG_ERROR_NCCL, "ncclCommInitRankConfig(rank %d of %d, device %d) failed: %s", c->rank, c->nranks,
                  cfg->device, tpg_nccl->ncclGetErrorString(r));
    goto fail_pop;
  }
  TPG_TRYGOTO(tpg_nccl_settle(c, r, __func__, "ncclCommInitRankConfig (are all ranks starting?)"), st, fail_pop);
  /* Warm-up: connections are set up by the first collective, which must not
   * happen inside a graph capture. */
  r = tpg_nccl->ncclAllReduce((void *)c->scratch, (void *)(c->scratch + 128), 16, ncclFloat32, ncclSum, c->nccl,
                              c->stream);
  TPG_TRYGOTO(tpg_nccl_settle(c, r, __func__, "warm-up ncclAllReduce"), st, fail_pop);
  TPG_TRYGOTO(wait_stream(c, c->stream, __func__), st, fail_pop);
  tpg_dev_pop();
  *out = c;
  return TPG_SUCCESS;
fail_pop:
  comm_release(c);
  tpg_dev_pop();
fail:
  comm_dispose(c);
  return st;
}

tpg_status tpg_comm_create(const tpg_comm_id *id, const tpg_comm_config *cfg, tpg_comm **out) {
  tpg_err_clear();
  return tpg_err_public(comm_create(id, cfg, out), __func__);
}

tpg_status tpg_comm_abort(tpg_comm *c) {
  tpg_err_clear();
  TPG_CHECK_ARG(c != NULL, "comm is NULL: expected a tpg_comm");
  TPG_CHECK_ARG(comm_live(c), "comm is not a live tpg_comm (destroyed or corrupt handle)");
  abort_comm(c);
  return TPG_SUCCESS;
}

static tpg_status comm_destroy(tpg_comm *c) {
  if (!c) return TPG_SUCCESS;
  TPG_CHECK_ARG(comm_live(c), "comm is not a live tpg_comm (destroyed or corrupt handle)");
  int live = atomic_load(&c->graphs);
  if (live > 0)
    return TPG_FAIL(TPG_ERROR_INVALID_STATE,
                    "%d graph%s still use this comm (NCCL holds a reference per captured graph): destroy them first",
                    live, live == 1 ? "" : "s");
  /* Without its context nothing device-side can be freed: fail and leave the
   * comm intact, so that a second destroy can free it, instead of freeing
   * the host side and leaking the rest. */
  tpg_status st = tpg_dev_push(&c->dev);
  if (st != TPG_SUCCESS) {
    tpg_err_rename(__func__);
    return st;
  }
  if (c->nccl && !atomic_load(&c->aborted)) {
    /* Finalize under the deadline; a peer that is gone makes settle revoke. */
    ncclResult_t r = tpg_nccl->ncclCommFinalize(c->nccl);
    st = tpg_nccl_settle(c, r, __func__, "ncclCommFinalize");
  }
  if (c->nccl && !atomic_load(&c->aborted)) {
    tpg_nccl->ncclCommDestroy(c->nccl);
    c->nccl = NULL;
  }
  comm_release(c); /* aborts and frees an NCCL comm still there: finalize is invalid after a revoke */
  tpg_dev_pop();
  comm_dispose(c);
  return st;
}

tpg_status tpg_comm_destroy(tpg_comm *c) {
  tpg_err_clear();
  return tpg_err_public(comm_destroy(c), __func__);
}

tpg_status tpg_comm_get_info(const tpg_comm *c, int *rank, int *nranks, int *device) {
  tpg_err_clear();
  TPG_CHECK_ARG(c != NULL && comm_live(c), "comm is NULL or not a live tpg_comm");
  if (rank) *rank = c->rank;
  if (nranks) *nranks = c->nranks;
  if (device) *device = c->dev.ordinal;
  return TPG_SUCCESS;
}

/* Used by graph creation (the collectives' fingerprint) and by peer setup
 * (the buffer exchange), so its failures are reported as tpg_graph_create's. */
tpg_status tpg_comm_allgather_host(tpg_comm *c, const void *mine, void *all, size_t bytes) {
  CUdeviceptr d = 0;
  tpg_status st = TPG_SUCCESS;
  size_t total = bytes * (size_t)c->nranks;
  const char *fn = "tpg_graph_create";
  CUresult cr = tpg_cu->cuMemAlloc(&d, total);
  if (cr != CUDA_SUCCESS) return tpg_cu_fail(cr, fn, "cuMemAlloc(all-gather buffer)");
  cr = tpg_cu->cuMemcpyHtoD(d + bytes * (size_t)c->rank, mine, bytes);
  if (cr != CUDA_SUCCESS) {
    st = tpg_cu_fail(cr, fn, "cuMemcpyHtoD(all-gather buffer)");
    goto out;
  }
  ncclResult_t r = tpg_nccl->ncclAllGather((void *)(d + bytes * (size_t)c->rank), (void *)d, bytes, ncclUint8, c->nccl,
                                           c->stream);
  TPG_TRYGOTO(tpg_nccl_settle(c, r, fn, "ncclAllGather (exchange between ranks)"), st, out);
  TPG_TRYGOTO(wait_stream(c, c->stream, fn), st, out);
  cr = tpg_cu->cuMemcpyDtoH(all, d, total);
  if (cr != CUDA_SUCCESS) st = tpg_cu_fail(cr, fn, "cuMemcpyDtoH(all-gather buffer)");
out:
  tpg_cu->cuMemFree(d);
  return st;
}

static tpg_status comm_wait(tpg_comm *c, tpg_stream stream) {
  TPG_TRY(tpg_comm_check_usable(c, __func__, "comm"));
  TPG_TRY(tpg_dev_push(&c->dev));
  tpg_status st = wait_stream(c, (CUstream)stream, __func__);
  tpg_dev_pop();
  return st;
}

tpg_status tpg_comm_wait(tpg_comm *c, tpg_stream stream) {
  tpg_err_clear();
  return tpg_err_public(comm_wait(c, stream), __func__);
}
