/* fake_nccl.c - the NCCL entry points tpgraph calls, over the fake's streams.
 *
 * tpgraph loads NCCL at its first comm (lib/nccl_loader.c): TPG_LIBNCCL names
 * the shim (shim.c), whose nccl* forward to these functions through
 * tpgfake_entry_nccl at the end of this file. Ranks are threads (or one rank) of this process: ranks that
 * pass the same unique id form a clique. A collective is work on a stream;
 * when it reaches the head of its stream it "arrives" with a copy of its send
 * buffer, and completes once every rank arrived (matched by per-rank arrival
 * order, as NCCL matches by issue order). Arrival checks that the ranks agree
 * on kind, count and type, and that send and recv lie inside live
 * allocations with the extents NCCL would touch.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "tests/fake/fake_internal.h"

typedef struct fk_rdv {
  struct fk_rdv *next;
  long seq;
  int kind, dtype, redop, bad;
  size_t count;
  int arrived, consumed;
  unsigned char *in, *sum; /* in: nranks x send bytes; sum: reductions */
} fk_rdv;

typedef struct fk_comm fk_comm;
struct fk_clique {
  fk_clique *next;
  unsigned char id[NCCL_UNIQUE_ID_BYTES];
  int nranks, joined, refs;
  fk_comm **comms;
  int *revoked;
  long *seq;
  fk_rdv *rdv;
};

struct fk_comm {
  fk_clique *cq;
  int rank, ready;
  ncclResult_t async;
  int nonblocking;
  /* A window registration still "running" on a non-blocking comm (NCCL
   * 2.28.9 returns ncclSuccess before its group job ends): polls left
   * until it ends, and where the window handle is written then. */
  int reg_polls;
  ncclWindow_t *reg_out;
  void *reg_win;
};

/* What NCCL 2.28.9 does with a call on a non-blocking comm whose previous
 * operation has not completed: refuses it (ncclCommEnsureReady). tpgraph
 * must never get here, so it is also a violation. */
#define COMM_READY(c)                                                                                        if ((c)->reg_polls > 0) {                                                                                    fk_violation("%s: the comm's previous operation (a window registration) has not completed: "                          "\"Attempt to use communicator before the previous operation returned ncclSuccess\"",                    __func__);                                                                                   FAIL(ncclInvalidArgument);                                                                               }

/* A registered window; all of a comm's go with it. */
typedef struct fk_win {
  fk_comm *owner;
  struct fk_win *next;
} fk_win;
static fk_win *g_windows;
static void win_unlink(fk_win *w) {
  for (fk_win **pw = &g_windows; *pw; pw = &(*pw)->next)
    if (*pw == w) {
      *pw = w->next;
      return;
    }
}

enum { FK_AR, FK_AG, FK_RS };
static fk_clique *g_cliques;

static const char FK_ID_MAGIC[8] = "TPGFAKE";

static ncclResult_t inj(const char *name) {
  return strstr(name, "Alloc") || strstr(name, "Init") ? ncclSystemError : ncclUnhandledCudaError;
}

#define ENTER(name)             \
  ncclResult_t r_ = ncclSuccess; \
  fk_lock();                    \
  if (fk_inject(name)) {        \
    r_ = inj(name);             \
    goto out;                   \
  }
#define ENTER_POLL(name)        \
  ncclResult_t r_ = ncclSuccess; \
  fk_lock();                    \
  if (fk_inject_poll(name)) {   \
    r_ = ncclUnhandledCudaError; \
    goto out;                   \
  }
#define ENTER_NOFAIL()          \
  ncclResult_t r_ = ncclSuccess; \
  fk_lock();
#define FAIL(code) \
  do {             \
    r_ = (code);   \
    goto out;      \
  } while (0)
#define LEAVE  \
  out:         \
  fk_unlock(); \
  return r_;
#define COMM(var, h)                                                                   \
  if (!fk_live_has(FK_COMM, (h))) {                                                    \
    fk_violation("%s: comm %p is not a live NCCL comm (destroyed or never created)", __func__, (void *)(h)); \
    FAIL(ncclInvalidArgument);                                                         \
  }                                                                                    \
  fk_comm *var = (fk_comm *)(h);

static void rdv_free(fk_rdv *r) {
  free(r->in);
  free(r->sum);
  free(r);
}

void fk_clique_ref(fk_clique *c, int delta) {
  c->refs += delta;
  if (c->refs > 0) return;
  for (fk_clique **p = &g_cliques; *p; p = &(*p)->next)
    if (*p == c) {
      *p = c->next;
      break;
    }
  while (c->rdv) {
    fk_rdv *r = c->rdv;
    c->rdv = r->next;
    rdv_free(r);
  }
  free(c->comms);
  free(c->revoked);
  free(c->seq);
  free(c);
}

/* ---- element types ---- */

static size_t dt_size(int dt) {
  switch (dt) {
    case ncclInt8: case ncclUint8: return 1;
    case ncclFloat16: case ncclBfloat16: return 2;
    case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
    case ncclInt64: case ncclUint64: case ncclFloat64: return 8;
    default: return 0;
  }
}

static float half_to_float(uint16_t h) {
  uint32_t s = (uint32_t)(h >> 15) << 31, e = (h >> 10) & 31, m = h & 1023, bits;
  if (e == 0) {
    float f = (float)m * (1.0f / 16777216.0f); /* subnormal: m * 2^-24 */
    return s ? -f : f;
  }
  if (e == 31) bits = s | 0x7f800000u | (m << 13);
  else bits = s | ((e + 112) << 23) | (m << 13);
  float f;
  memcpy(&f, &bits, 4);
  return f;
}

static uint16_t float_to_half(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  uint32_t s = (x >> 16) & 0x8000u;
  int e = (int)((x >> 23) & 255) - 127 + 15;
  uint32_t m = x & 0x7fffffu;
  if (((x >> 23) & 255) == 255) return (uint16_t)(s | 0x7c00u | (m ? 0x200u : 0));
  if (e >= 31) return (uint16_t)(s | 0x7c00u);
  if (e <= 0) {
    if (e < -10) return (uint16_t)s;
    m |= 0x800000u;
    uint32_t shift = (uint32_t)(14 - e), v = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (v & 1))) v++;
    return (uint16_t)(s | v);
  }
  uint32_t v = ((uint32_t)e << 10) | (m >> 13), rem = m & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (v & 1))) v++;
  return (uint16_t)(s | v);
}

static double get(const unsigned char *p, int dt) {
  switch (dt) {
    case ncclInt8: return *(const int8_t *)p;
    case ncclUint8: return *p;
    case ncclInt32: { int32_t v; memcpy(&v, p, 4); return v; }
    case ncclUint32: { uint32_t v; memcpy(&v, p, 4); return v; }
    case ncclInt64: { int64_t v; memcpy(&v, p, 8); return (double)v; }
    case ncclUint64: { uint64_t v; memcpy(&v, p, 8); return (double)v; }
    case ncclFloat32: { float v; memcpy(&v, p, 4); return v; }
    case ncclFloat64: { double v; memcpy(&v, p, 8); return v; }
    case ncclFloat16: { uint16_t v; memcpy(&v, p, 2); return half_to_float(v); }
    case ncclBfloat16: {
      uint16_t v;
      memcpy(&v, p, 2);
      uint32_t b = (uint32_t)v << 16;
      float f;
      memcpy(&f, &b, 4);
      return f;
    }
    default: return 0;
  }
}

static void put(unsigned char *p, int dt, double d) {
  switch (dt) {
    case ncclInt8: *(int8_t *)p = (int8_t)d; break;
    case ncclUint8: *p = (unsigned char)(long long)d; break;
    case ncclInt32: { int32_t v = (int32_t)d; memcpy(p, &v, 4); break; }
    case ncclUint32: { uint32_t v = (uint32_t)(long long)d; memcpy(p, &v, 4); break; }
    case ncclInt64: { int64_t v = (int64_t)d; memcpy(p, &v, 8); break; }
    case ncclUint64: { uint64_t v = (uint64_t)d; memcpy(p, &v, 8); break; }
    case ncclFloat32: { float v = (float)d; memcpy(p, &v, 4); break; }
    case ncclFloat64: memcpy(p, &d, 8); break;
    case ncclFloat16: { uint16_t v = float_to_half((float)d); memcpy(p, &v, 2); break; }
    case ncclBfloat16: {
      float f = (float)d;
      uint32_t b;
      memcpy(&b, &f, 4);
      b += 0x7fffu + ((b >> 16) & 1); /* round to nearest even */
      uint16_t v = (uint16_t)(b >> 16);
      memcpy(p, &v, 2);
      break;
    }
    default: break;
  }
}

/* ---- collectives ---- */

static size_t send_bytes(int kind, size_t count, size_t es, int nranks) {
  return (kind == FK_RS ? count * (size_t)nranks : count) * es;
}
static size_t recv_bytes(int kind, size_t count, size_t es, int nranks) {
  return (kind == FK_AG ? count * (size_t)nranks : count) * es;
}

static const char *const g_kname[] = {"ncclAllReduce", "ncclAllGather", "ncclReduceScatter"};

static fk_rdv *rdv_get(fk_clique *cq, long seq, const fk_node *n) {
  for (fk_rdv *r = cq->rdv; r; r = r->next)
    if (r->seq == seq) return r;
  fk_rdv *r = calloc(1, sizeof *r);
  if (!r) abort();
  r->seq = seq;
  r->kind = n->ckind;
  r->dtype = n->dtype;
  r->redop = n->redop;
  r->count = n->count;
  size_t sb = send_bytes(n->ckind, n->count, dt_size(n->dtype), cq->nranks);
  r->in = calloc((size_t)cq->nranks, sb ? sb : 1);
  if (!r->in) abort();
  r->next = cq->rdv;
  cq->rdv = r;
  return r;
}

static void reduce(fk_clique *cq, fk_rdv *r) {
  size_t es = dt_size(r->dtype);
  size_t n = r->kind == FK_RS ? r->count * (size_t)cq->nranks : r->count, sb = n * es;
  r->sum = malloc(sb ? sb : 1);
  if (!r->sum) abort();
  for (size_t i = 0; i < n; i++) {
    double acc = 0;
    for (int q = 0; q < cq->nranks; q++) {
      double v = get(r->in + (size_t)q * sb + i * es, r->dtype);
      if (q == 0) acc = v;
      else if (r->redop == ncclSum) acc += v;
      else if (r->redop == ncclProd) acc *= v;
      else if (r->redop == ncclMax) acc = v > acc ? v : acc;
      else if (r->redop == ncclMin) acc = v < acc ? v : acc;
      else acc += v;
    }
    put(r->sum + i * es, r->dtype, acc);
  }
}

int fk_coll_run(fk_op *op) {
  const fk_node *n = &op->n;
  fk_clique *cq = n->cq;
  int me = n->rank;
  if (cq->revoked[me]) return 1; /* a revoked comm's work stops */
  size_t es = dt_size(n->dtype);
  size_t sb = send_bytes(n->ckind, n->count, es, cq->nranks), rb = recv_bytes(n->ckind, n->count, es, cq->nranks);
  fk_rdv *r;
  if (op->seq < 0) {
    op->seq = cq->seq[me]++;
    r = rdv_get(cq, op->seq, n);
    if (r->kind != n->ckind || r->count != n->count || r->dtype != n->dtype || r->redop != n->redop) {
      fk_violation("collective #%ld: rank %d called %s(count %zu, type %d) where another rank called %s(count %zu, "
                   "type %d): ranks disagree",
                   op->seq, me, g_kname[n->ckind], n->count, n->dtype, g_kname[r->kind], r->count, r->dtype);
      r->bad = 1;
    }
    char what[96];
    snprintf(what, sizeof what, "%s rank %d sendbuff", g_kname[n->ckind], me);
    int ok = fk_check_range(n->send, sb ? sb : 1, what);
    snprintf(what, sizeof what, "%s rank %d recvbuff", g_kname[n->ckind], me);
    ok &= fk_check_range(n->recv, rb ? rb : 1, what);
    if (!ok) r->bad = 1;
    else if (!r->bad && sb) memcpy(r->in + (size_t)me * sb, (const void *)n->send, sb);
    if (++r->arrived == cq->nranks && !r->bad && r->kind != FK_AG) reduce(cq, r);
  } else {
    r = rdv_get(cq, op->seq, n);
  }
  if (r->arrived < cq->nranks) return 0;
  if (!r->bad && rb) {
    const unsigned char *src = r->kind == FK_AG ? r->in : r->kind == FK_RS ? r->sum + (size_t)me * rb : r->sum;
    memmove((void *)n->recv, src, rb);
  }
  if (++r->consumed == cq->nranks) {
    for (fk_rdv **p = &cq->rdv; *p; p = &(*p)->next)
      if (*p == r) {
        *p = r->next;
        break;
      }
    rdv_free(r);
  }
  return 1;
}

static ncclResult_t coll(const char *name, int kind, const void *send, void *recv, size_t count, ncclDataType_t dt,
                         ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  ENTER(name);
  COMM(c, comm);
  if (!c->ready) {
    fk_violation("%s on a comm that is not initialized yet", name);
    FAIL(ncclInvalidUsage);
  }
  /* Revoked (tpg_comm_abort, possibly from another thread just now): NCCL
   * refuses the call; no misuse on the caller's side. */
  if (c->cq->revoked[c->rank]) FAIL(ncclInvalidUsage);
  COMM_READY(c);
  if (!dt_size(dt) || (kind != FK_AG && (op < ncclSum || op > ncclAvg))) FAIL(ncclInvalidArgument);
  if (count && (!send || !recv)) FAIL(ncclInvalidArgument);
  CUresult cr;
  fk_stream *s = fk_stream_get((CUstream)stream, &cr);
  if (!s) FAIL(ncclInvalidArgument);
  fk_node nd;
  memset(&nd, 0, sizeof nd);
  nd.type = FK_N_COLL;
  nd.cq = c->cq;
  nd.rank = c->rank;
  nd.ckind = kind;
  nd.dtype = dt;
  nd.redop = kind == FK_AG ? ncclSum : op;
  nd.send = (uintptr_t)send;
  nd.recv = (uintptr_t)recv;
  nd.count = count;
  if (fk_stream_enqueue(s, &nd) != CUDA_SUCCESS) FAIL(ncclUnhandledCudaError);
  LEAVE
}

ncclResult_t ncclAllReduce(const void *send, void *recv, size_t count, ncclDataType_t dt, ncclRedOp_t op,
                           ncclComm_t comm, cudaStream_t stream) {
  return coll("ncclAllReduce", FK_AR, send, recv, count, dt, op, comm, stream);
}
ncclResult_t ncclAllGather(const void *send, void *recv, size_t count, ncclDataType_t dt, ncclComm_t comm,
                           cudaStream_t stream) {
  return coll("ncclAllGather", FK_AG, send, recv, count, dt, ncclSum, comm, stream);
}
ncclResult_t ncclReduceScatter(const void *send, void *recv, size_t count, ncclDataType_t dt, ncclRedOp_t op,
                               ncclComm_t comm, cudaStream_t stream) {
  return coll("ncclReduceScatter", FK_RS, send, recv, count, dt, op, comm, stream);
}

/* ---- ids and communicators ---- */

ncclResult_t ncclGetVersion(int *v) {
  *v = NCCL_VERSION_CODE;
  return ncclSuccess;
}

ncclResult_t ncclGetUniqueId(ncclUniqueId *id) {
  static long counter;
  ENTER("ncclGetUniqueId");
  memset(id->internal, 0, sizeof id->internal);
  memcpy(id->internal, FK_ID_MAGIC, sizeof FK_ID_MAGIC);
  long n = ++counter;
  int pid = (int)getpid();
  memcpy(id->internal + 8, &n, sizeof n);
  memcpy(id->internal + 16, &pid, sizeof pid);
  LEAVE
}

ncclResult_t ncclCommInitRankConfig(ncclComm_t *out, int nranks, ncclUniqueId id, int rank, ncclConfig_t *config) {
  ENTER("ncclCommInitRankConfig");
  if (!out || nranks < 1 || rank < 0 || rank >= nranks) FAIL(ncclInvalidArgument);
  *out = NULL;
  if (memcmp(id.internal, FK_ID_MAGIC, sizeof FK_ID_MAGIC) != 0) {
    fk_trace("ncclCommInitRankConfig: an id ncclGetUniqueId did not make");
    FAIL(ncclInvalidArgument);
  }
  fk_clique *cq = g_cliques;
  for (; cq; cq = cq->next)
    if (memcmp(cq->id, id.internal, sizeof cq->id) == 0) break;
  if (cq && cq->nranks != nranks) FAIL(ncclInvalidArgument);
  if (cq && (cq->comms[rank] || cq->revoked[rank])) FAIL(ncclInvalidUsage); /* the id's rank is taken (or was) */
  if (!cq) {
    cq = calloc(1, sizeof *cq);
    if (!cq) FAIL(ncclSystemError);
    memcpy(cq->id, id.internal, sizeof cq->id);
    cq->nranks = nranks;
    cq->comms = calloc((size_t)nranks, sizeof *cq->comms);
    cq->revoked = calloc((size_t)nranks, sizeof *cq->revoked);
    cq->seq = calloc((size_t)nranks, sizeof *cq->seq);
    if (!cq->comms || !cq->revoked || !cq->seq) abort();
    cq->next = g_cliques;
    g_cliques = cq;
  }
  fk_comm *c = calloc(1, sizeof *c);
  if (!c) abort();
  c->cq = cq;
  c->rank = rank;
  cq->comms[rank] = c;
  cq->joined++;
  cq->refs++;
  fk_live_add(FK_COMM, c);
  *out = (ncclComm_t)c;
  c->nonblocking = config && config->blocking == 0;
  if (config && config->blocking == 0) FAIL(ncclInProgress);
  /* Blocking: wait for every rank (no deadline, as NCCL). */
  while (cq->joined < cq->nranks) {
    fk_unlock();
    struct timespec ts = {0, 200000};
    nanosleep(&ts, NULL);
    fk_lock();
  }
  c->ready = 1;
  LEAVE
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *res) {
  ENTER_POLL("ncclCommGetAsyncError");
  COMM(c, comm);
  if (!c->ready && c->cq->joined == c->cq->nranks) c->ready = 1;
  if (c->reg_polls > 0 && --c->reg_polls == 0) { /* the registration ends now */
    *c->reg_out = (ncclWindow_t)c->reg_win;
    c->reg_out = NULL;
  }
  *res = c->async != ncclSuccess ? c->async : c->ready && c->reg_polls == 0 ? ncclSuccess : ncclInProgress;
  LEAVE
}

ncclResult_t ncclCommFinalize(ncclComm_t comm) {
  ENTER("ncclCommFinalize");
  COMM(c, comm);
  if (!c->ready) FAIL(ncclInvalidUsage);
  LEAVE
}

static void comm_release(fk_comm *c) {
  fk_clique *cq = c->cq;
  cq->comms[c->rank] = NULL;
  cq->revoked[c->rank] = 1; /* the rank is gone: its queued work is dropped */
  /* NCCL frees a comm's windows with it (what an aborted comm relies on). */
  for (fk_win **pw = &g_windows; *pw;) {
    fk_win *w = *pw;
    if (w->owner != c) {
      pw = &w->next;
      continue;
    }
    *pw = w->next;
    fk_live_del(FK_WINDOW, w);
    free(w);
  }
  fk_live_del(FK_COMM, c);
  free(c);
  fk_clique_ref(cq, -1);
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  ENTER_NOFAIL();
  COMM(c, comm);
  comm_release(c);
  LEAVE
}

ncclResult_t ncclCommAbort(ncclComm_t comm) {
  ENTER_NOFAIL();
  if (!comm) FAIL(ncclSuccess);
  COMM(c, comm);
  comm_release(c);
  LEAVE
}

ncclResult_t ncclCommRevoke(ncclComm_t comm, int flags) {
  ENTER("ncclCommRevoke");
  COMM(c, comm);
  if (flags != NCCL_REVOKE_DEFAULT) FAIL(ncclInvalidArgument);
  c->cq->revoked[c->rank] = 1;
  LEAVE
}

const char *ncclGetErrorString(ncclResult_t r) {
  switch (r) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error (injected by tpgfake)";
    case ncclSystemError: return "unhandled system error (injected by tpgfake)";
    case ncclInternalError: return "internal error";
    case ncclInvalidArgument: return "invalid argument";
    case ncclInvalidUsage: return "invalid usage";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
    default: return "unknown result code";
  }
}

const char *ncclGetLastError(ncclComm_t comm) {
  (void)comm;
  return "";
}

ncclResult_t ncclMemAlloc(void **ptr, size_t size) {
  ENTER("ncclMemAlloc");
  fk_ctx *cur = fk_current();
  if (!cur) {
    fk_violation("ncclMemAlloc without a current context");
    FAIL(ncclInvalidUsage);
  }
  *ptr = fk_mem_alloc(size, FK_MEM_NCCL, cur->device);
  if (!*ptr) FAIL(ncclSystemError);
  LEAVE
}

ncclResult_t ncclMemFree(void *ptr) {
  ENTER_NOFAIL();
  if (fk_mem_free(ptr, FK_MEM_NCCL) != 0) {
    fk_violation("ncclMemFree(%p): not a live ncclMemAlloc allocation", ptr);
    FAIL(ncclInvalidArgument);
  }
  LEAVE
}

ncclResult_t ncclCommWindowRegister(ncclComm_t comm, void *buff, size_t size, ncclWindow_t *win, int flags) {
  (void)flags;
  ENTER("ncclCommWindowRegister");
  COMM(c, comm);
  COMM_READY(c);
  const fk_alloc *a = fk_mem_find((uintptr_t)buff);
  if (!a || a->kind != FK_MEM_NCCL || !fk_check_range((uintptr_t)buff, size, "ncclCommWindowRegister"))
    FAIL(ncclInvalidArgument);
  fk_win *w = calloc(1, sizeof *w);
  if (!w) FAIL(ncclSystemError);
  w->owner = c;
  w->next = g_windows;
  g_windows = w;
  fk_live_add(FK_WINDOW, w);
  if (c->nonblocking) { /* as NCCL 2.28.9: success now, the window two polls later */
    *win = NULL;
    c->reg_polls = 2;
    c->reg_out = win;
    c->reg_win = w;
  } else {
    *win = (ncclWindow_t)w;
  }
  LEAVE
}

ncclResult_t ncclCommWindowDeregister(ncclComm_t comm, ncclWindow_t win) {
  ENTER_NOFAIL();
  COMM(c, comm);
  COMM_READY(c);
  if (!fk_live_del(FK_WINDOW, win)) {
    fk_violation("ncclCommWindowDeregister(%p): not a registered window", (void *)win);
    FAIL(ncclInvalidArgument);
  }
  win_unlink((fk_win *)win);
  free(win);
  LEAVE
}

/* ---- the shim's way in (shim.c): tpgraph loads NCCL with dlopen + dlsym,
 * and the shim forwards each name to the function above of that name. ---- */

void *tpgfake_entry_nccl(const char *name);
void *tpgfake_entry_nccl(const char *name) {
#define FK_NCCL_ENTRY(f) {#f, (void *)f}
  static const struct {
    const char *name;
    void *fn;
  } table[] = {
      FK_NCCL_ENTRY(ncclGetVersion),         FK_NCCL_ENTRY(ncclGetUniqueId),
      FK_NCCL_ENTRY(ncclGetErrorString),     FK_NCCL_ENTRY(ncclGetLastError),
      FK_NCCL_ENTRY(ncclCommInitRankConfig), FK_NCCL_ENTRY(ncclCommGetAsyncError),
      FK_NCCL_ENTRY(ncclCommFinalize),       FK_NCCL_ENTRY(ncclCommDestroy),
      FK_NCCL_ENTRY(ncclCommAbort),          FK_NCCL_ENTRY(ncclCommRevoke),
      FK_NCCL_ENTRY(ncclAllReduce),          FK_NCCL_ENTRY(ncclAllGather),
      FK_NCCL_ENTRY(ncclReduceScatter),      FK_NCCL_ENTRY(ncclMemAlloc),
      FK_NCCL_ENTRY(ncclMemFree),            FK_NCCL_ENTRY(ncclCommWindowRegister),
      FK_NCCL_ENTRY(ncclCommWindowDeregister),
  };
#undef FK_NCCL_ENTRY
  for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
    if (strcmp(table[i].name, name) == 0) return table[i].fn;
  fprintf(stderr, "tpgfake: the fake NCCL has no %s (add it to fake_nccl.c and shim.c)\n", name);
  abort();
}
