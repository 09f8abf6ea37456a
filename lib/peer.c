/* peer.c - buffers every rank of a communicator can read and write directly.
 *
 * Our all-reduce kernels need each rank's staging buffer mapped on every
 * other rank. One buffer per communicator, set up once and collectively:
 * each rank allocates it (cuMemAlloc) and describes it — host hash, pid,
 * device, pointer, CUDA IPC handle — in an all-gather over the NCCL comm
 * itself. Ranks in the same process use the pointer with peer access on;
 * ranks in other processes open the IPC handle. If any rank cannot map any
 * peer (another host, no peer access), a second all-gather makes every rank
 * fall back together, so all ranks always take the same algorithm.
 *
 * "Same process" is same host (hostname + boot id), same PID namespace and
 * same pid: two containers sharing the host network but not the PID
 * namespace both see pid 1, and must use IPC, not each other's pointers.
 *
 * Within one process a rank's buffer is used by its peers directly, so it
 * must outlive them: a rank that fails or is destroyed first must not free
 * memory a peer's graph still writes into. Buffers are therefore reference
 * counted process-wide (one count for the owner, one per peer that mapped
 * it) and freed by whoever drops the last count, in the owner's context (the
 * entry keeps the owner's primary context retained until then) — what CUDA
 * IPC does for mappings across processes.
 */
#define _GNU_SOURCE
#include "lib/peer.h"

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "lib/comm.h"

/* Layout of a rank's peer buffer (49.3 MiB per comm and rank):
 *   [flags 4 KiB][pull staging 2 x 4 MiB][push receive 2 x 4 MiB]
 *   [two-shot scatter 2 x TW][two-shot gather 2 x TW][small push receive 2 x 512 KiB]
 * Each algorithm has its own areas and epoch counters, so their protocols
 * never see each other's data. Two-shot halves are 8 MiB + 64 KiB: a slot per
 * source rank of (8 MiB + 64 KiB) / R holds a piece of every block of an
 * 8 MiB message plus the per-block padding (kernels/allreduce.cu). */
#define TPG_PEER_SLOT_BYTES ((size_t)4 << 20) /* pull: messages up to 4 MiB; push: rounds of 4 MiB / (ranks - 1) */
#define TPG_PEER_TWOSHOT_BYTES (((size_t)8 << 20) + ((size_t)64 << 10))
#define TPG_PEER_FLAG_BYTES 4096
/* The small push kernel (lamport): a slot per rank, itself included, in each
 * half: messages up to 512 KiB / ranks (256 KiB at 2 ranks). */
#define TPG_PEER_SMALL_BYTES ((size_t)512 << 10)
_Static_assert(TPG_AR_MAX_RANKS * TPG_AR_MAX_BLOCKS * 4 <= TPG_PEER_FLAG_BYTES, "the pull kernel's flag array fits");
_Static_assert(TPG_AR_PUSH_BLOCKS < TPG_AR_EPOCHS /* the last: push's failed word */ && TPG_AR_ONESHOT_BLOCKS <= TPG_AR_EPOCHS &&
                   TPG_AR_MAX_BLOCKS <= TPG_AR_EPOCHS,
               "every grid has an epoch counter per block");

typedef struct {
  uint64_t host;
  int32_t pid, device;
  uint64_t ptr;
  uint64_t pidns;  /* PID namespace: device and inode of /proc/self/ns/pid */
  CUipcMemHandle ipc;
  unsigned char pad_[128 - 8 - 8 - 8 - 8 - sizeof(CUipcMemHandle)];
} peer_card;
_Static_assert(sizeof(peer_card) == 128, "peer_card is 128 bytes");

static uint64_t host_hash(void) {
  char h[256] = {0};
  gethostname(h, sizeof h - 1);
  uint64_t x = 1469598103934665603ull;
  for (const char *p = h; *p; p++) x = (x ^ (unsigned char)*p) * 1099511628211ull;
  /* Containers share a hostname across machines rarely; boot id makes it exact. */
  FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
  if (f) {
    int ch;
    while ((ch = fgetc(f)) != EOF) x = (x ^ (unsigned)ch) * 1099511628211ull;
    fclose(f);
  }
  return x;
}

static uint64_t pid_namespace(void) {
  struct stat st;
  if (stat("/proc/self/ns/pid", &st) != 0) return 0; /* no procfs: pid + host decide, as before */
  return ((uint64_t)st.st_dev << 32) ^ (uint64_t)st.st_ino;
}

int tpg_peer_same_process(uint64_t host_a, int32_t pid_a, uint64_t ns_a, uint64_t host_b, int32_t pid_b,
                          uint64_t ns_b) {
  return host_a == host_b && pid_a == pid_b && ns_a == ns_b;
}

/* ---- process-wide reference counts of the ranks' buffers ---- */

typedef struct shared_buf {
  struct shared_buf *next;
  CUdeviceptr ptr;
  CUdevice dev;     /* owner's device; its primary context is retained */
  CUcontext ctx;
  int refs;
} shared_buf;

static pthread_mutex_t g_sb_mu = PTHREAD_MUTEX_INITIALIZER;
static shared_buf *g_sb;

/* Registers a new buffer of the current context's device with one count. */
static tpg_status sb_add(CUdeviceptr ptr, const tpg_dev *d) {
  shared_buf *b = calloc(1, sizeof *b);
  if (!b) return TPG_FAIL(TPG_ERROR_OUT_OF_MEMORY, "out of host memory");
  CUresult r = tpg_cu->cuDevicePrimaryCtxRetain(&b->ctx, d->dev);
  if (r != CUDA_SUCCESS) {
    free(b);
    return tpg_cu_fail(r, "tpg_graph_create", "cuDevicePrimaryCtxRetain(peer buffer owner)");
  }
  b->ptr = ptr;
  b->dev = d->dev;
  b->refs = 1;
  pthread_mutex_lock(&g_sb_mu);
  b->next = g_sb;
  g_sb = b;
  pthread_mutex_unlock(&g_sb_mu);
  return TPG_SUCCESS;
}

/* Takes a count on a peer's buffer; 0 if that buffer is already gone. */
static int sb_ref(CUdeviceptr ptr) {
  pthread_mutex_lock(&g_sb_mu);
  shared_buf *b = g_sb;
  while (b && b->ptr != ptr) b = b->next;
  if (b) b->refs++;
  pthread_mutex_unlock(&g_sb_mu);
  return b != NULL;
}

/* Drops a count; the last one frees the buffer in its owner's context. */
static void sb_unref(CUdeviceptr ptr) {
  pthread_mutex_lock(&g_sb_mu);
  shared_buf **p = &g_sb, *b = NULL;
  while (*p && (*p)->ptr != ptr) p = &(*p)->next;
  if (*p && --(*p)->refs == 0) {
    b = *p;
    *p = b->next;
  }
  pthread_mutex_unlock(&g_sb_mu);
  if (!b) return;
  if (tpg_cu->cuCtxPushCurrent(b->ctx) == CUDA_SUCCESS) {
    tpg_cu->cuMemFree(b->ptr);
    CUcontext popped;
    tpg_cu->cuCtxPopCurrent(&popped);
  } else {
    tpg_cu->cuMemFree(b->ptr); /* unified addressing: the pointer names its allocation */
  }
  tpg_cu->cuDevicePrimaryCtxRelease(b->dev);
  free(b);
}

static void peer_release(tpg_comm *c) { tpg_peer_free(c); }

/* Rank q's buffer in this rank's address space (P->base[q]): directly
 * within one process, else through its IPC handle. 0, with P->why, when it
 * cannot be mapped. */
static int map_peer(tpg_comm *c, int q, const peer_card *them, const peer_card *me) {
  tpg_peer *P = &c->peer;
  if (them->host != me->host) {
    snprintf(P->why, sizeof P->why, "rank %d is on another machine", q);
    return 0;
  }
  if (tpg_peer_same_process(them->host, them->pid, them->pidns, me->host, me->pid, me->pidns)) {
    CUdevice pd;
    CUcontext pctx;
    int can = 0;
    if (tpg_cu->cuDeviceGet(&pd, them->device) != CUDA_SUCCESS ||
        tpg_cu->cuDeviceCanAccessPeer(&can, c->dev.dev, pd) != CUDA_SUCCESS || !can ||
        tpg_cu->cuDevicePrimaryCtxRetain(&pctx, pd) != CUDA_SUCCESS) {
      snprintf(P->why, sizeof P->why, "device %d cannot access device %d directly", me->device, them->device);
      return 0;
    }
    CUresult r = tpg_cu->cuCtxEnablePeerAccess(pctx, 0);
    tpg_cu->cuDevicePrimaryCtxRelease(pd); /* the peer rank holds its own reference */
    if (r != CUDA_SUCCESS && r != CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED) {
      snprintf(P->why, sizeof P->why, "cuCtxEnablePeerAccess(device %d -> %d) failed (%d)", me->device,
               them->device, (int)r);
      return 0;
    }
    if (!sb_ref((CUdeviceptr)them->ptr)) { /* that rank failed and freed it meanwhile */
      snprintf(P->why, sizeof P->why, "rank %d's buffer is gone (that rank failed)", q);
      return 0;
    }
    P->base[q] = (void *)(uintptr_t)them->ptr;
    P->counted[q] = 1;
    return 1;
  }
  CUdeviceptr m = 0;
  CUresult r = tpg_cu->cuIpcOpenMemHandle(&m, them->ipc, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
  if (r != CUDA_SUCCESS) {
    snprintf(P->why, sizeof P->why, "cuIpcOpenMemHandle of rank %d's buffer failed (%d)", q, (int)r);
    return 0;
  }
  P->base[q] = (void *)(uintptr_t)m;
  P->ipc_opened[q] = 1;
  return 1;
}

/* The setup proper; on failure the caller frees whatever it made. */
static tpg_status peer_setup(tpg_comm *c) {
  tpg_peer *P = &c->peer;
  if (c->nranks < 2 || c->nranks > TPG_AR_MAX_RANKS) {
    P->state = -1;
    snprintf(P->why, sizeof P->why, "%d ranks: the one-shot all-reduce serves 2..%d", c->nranks, TPG_AR_MAX_RANKS);
    return TPG_SUCCESS;
  }
  P->slot_bytes = TPG_PEER_SLOT_BYTES;
  P->twoshot_bytes = TPG_PEER_TWOSHOT_BYTES;
  P->small_bytes = TPG_PEER_SMALL_BYTES;
  size_t bytes = TPG_PEER_FLAG_BYTES + 4 * P->slot_bytes + 4 * P->twoshot_bytes + 2 * P->small_bytes;
  TPG_CU(cuMemAlloc(&P->local, bytes));
  tpg_status st = sb_add(P->local, &c->dev);
  if (st != TPG_SUCCESS) {
    tpg_cu->cuMemFree(P->local);
    P->local = 0;
    return st;
  }
  P->local_counted = 1;
  TPG_CU(cuMemAlloc(&P->epochs, TPG_PEER_NKERNELS * TPG_AR_EPOCHS * sizeof(uint32_t)));
  TPG_CU(cuMemsetD32(P->local, 0, TPG_PEER_FLAG_BYTES / 4));
  /* The push, two-shot and small push areas start as all-sentinel (0x8000 halves). */
  TPG_CU(cuMemsetD32(P->local + TPG_PEER_FLAG_BYTES + 2 * P->slot_bytes, 0x80008000u,
                     (2 * P->slot_bytes + 4 * P->twoshot_bytes + 2 * P->small_bytes) / 4));
  TPG_CU(cuMemsetD32(P->epochs, 0, TPG_PEER_NKERNELS * TPG_AR_EPOCHS));
  void *hp = NULL;
  TPG_CU(cuMemHostAlloc(&hp, 64, CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE));
  P->status_host = hp;
  __atomic_store_n(P->status_host, 0u, __ATOMIC_SEQ_CST);
  /* Zeroed first, then published: an abort racing with this setup either
   * sees no word, or a word it raises that nothing clears again. */
  atomic_store(&c->abort_word, P->status_host);
  if (atomic_load(&c->aborted)) __atomic_store_n(P->status_host, 1u, __ATOMIC_SEQ_CST);
  TPG_CU(cuMemHostGetDevicePointer(&P->status_dev, hp, 0));

  peer_card me, all[TPG_AR_MAX_RANKS];
  memset(&me, 0, sizeof me);
  me.host = host_hash();
  me.pid = (int32_t)getpid();
  me.pidns = pid_namespace();
  me.device = c->dev.ordinal;
  me.ptr = (uint64_t)P->local;
  int ok = tpg_cu->cuIpcGetMemHandle(&me.ipc, P->local) == CUDA_SUCCESS;
  TPG_TRY(tpg_comm_allgather_host(c, &me, all, sizeof me));

  for (int q = 0; q < c->nranks; q++) {
    if (q == c->rank) {
      P->base[q] = (void *)(uintptr_t)P->local;
      continue;
    }
    if (!map_peer(c, q, &all[q], &me)) {
      ok = 0;
      break;
    }
  }
  /* Agree: one-shot only if every rank mapped every peer. */
  int32_t oks[TPG_AR_MAX_RANKS], mine = ok;
  TPG_TRY(tpg_comm_allgather_host(c, &mine, oks, sizeof mine));
  int all_ok = 1;
  for (int q = 0; q < c->nranks; q++) all_ok &= oks[q] != 0;
  if (!all_ok) {
    if (ok) snprintf(P->why, sizeof P->why, "a peer rank could not map the buffers");
    P->state = -1;
    return TPG_SUCCESS;
  }
  P->state = 1;
  return TPG_SUCCESS;
}

tpg_status tpg_peer_setup(tpg_comm *c) {
  tpg_peer *P = &c->peer;
  if (P->state != 0) return TPG_SUCCESS;
  c->release_peer = peer_release;
  tpg_status st = peer_setup(c);
  /* A failed setup leaves nothing behind (state 0: a later graph may try
   * again), instead of 48 MiB of buffers per attempt. A fallback (state -1)
   * keeps what it has until destroy: it decided for every rank alike. */
  if (st != TPG_SUCCESS) tpg_peer_free(c);
  return st;
}

void tpg_peer_free(tpg_comm *c) {
  tpg_peer *P = &c->peer;
  for (int q = 0; q < TPG_AR_MAX_RANKS; q++) {
    if (P->ipc_opened[q]) tpg_cu->cuIpcCloseMemHandle((CUdeviceptr)(uintptr_t)P->base[q]);
    if (P->counted[q]) sb_unref((CUdeviceptr)(uintptr_t)P->base[q]);
  }
  atomic_store(&c->abort_word, NULL);
  if (P->local_counted) sb_unref(P->local);
  else if (P->local) tpg_cu->cuMemFree(P->local);
  if (P->epochs) tpg_cu->cuMemFree(P->epochs);
  if (P->status_host) tpg_cu->cuMemFreeHost(P->status_host);
  memset(P, 0, sizeof *P);
}

size_t tpg_peer_max_pull(const tpg_comm *c) { return c->peer.slot_bytes; }
/* Push: any size. Each receive half holds one slot per peer and a message
 * larger than a slot goes in rounds through per-block windows of it
 * (kernels/allreduce.cu, push1). */
size_t tpg_peer_max_push(const tpg_comm *c) { return c->nranks > 1 ? SIZE_MAX : 0; }
size_t tpg_peer_max_small(const tpg_comm *c) { return (c->peer.small_bytes / (size_t)c->nranks) & ~(size_t)15; }
/* A two-shot slot (one source rank's) must hold floor(nvec / R) + 64
 * vectors (kernels/allreduce.cu): the largest message is what that allows. */
size_t tpg_peer_max_twoshot(const tpg_comm *c) {
  size_t slotv = ((c->peer.twoshot_bytes / (size_t)c->nranks) & ~(size_t)15) / 16;
  return slotv > TPG_AR_MAX_BLOCKS ? (slotv - TPG_AR_MAX_BLOCKS) * (size_t)c->nranks * 16 : 0;
}

void tpg_peer_args(const tpg_comm *c, tpg_peer_kernel k, tpg_allreduce_args *a) {
  const tpg_peer *P = &c->peer;
  size_t off = TPG_PEER_FLAG_BYTES + (k == TPG_PEER_PUSH ? 2 * P->slot_bytes : 0);
  if (k == TPG_PEER_TWOSHOT) off = TPG_PEER_FLAG_BYTES + 4 * P->slot_bytes;
  if (k == TPG_PEER_SMALL) off = TPG_PEER_FLAG_BYTES + 4 * P->slot_bytes + 4 * P->twoshot_bytes;
  for (int q = 0; q < c->nranks; q++) {
    a->flags[q] = (uint32_t *)P->base[q];
    a->staging[q] = (char *)P->base[q] + off;
    if (k == TPG_PEER_TWOSHOT) a->gather[q] = (char *)P->base[q] + off + 2 * P->twoshot_bytes;
  }
  a->epochs = (uint32_t *)(uintptr_t)(P->epochs + (size_t)k * TPG_AR_EPOCHS * sizeof(uint32_t));
  a->status = (uint32_t *)(uintptr_t)P->status_dev;
  a->slot_bytes = k == TPG_PEER_TWOSHOT ? P->twoshot_bytes : k == TPG_PEER_SMALL ? P->small_bytes : P->slot_bytes;
  a->timeout_ns = (uint64_t)c->timeout_ms * 1000000ull;
  a->nranks = c->nranks;
  a->rank = c->rank;
}
