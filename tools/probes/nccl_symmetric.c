// nccl_symmetric.c - probe: why TPG_GRAPH_NCCL_SYMMETRIC fails (docs/performance.md,
// "NCCL symmetric windows"). Two processes (fork), one per GPU; for blocking and
// non-blocking communicators, with send+recv or send alone registered as
// NCCL_WIN_COLL_SYMMETRIC windows, an eager then a stream-captured bf16 all-reduce.
// Not part of the build: on a 2-GPU machine,
//   nvcc -O1 -o nccl_symmetric tools/probes/nccl_symmetric.c -x c -lnccl
//   NCCL_NVLS_ENABLE=0 NCCL_DEBUG=WARN ./nccl_symmetric
// (LD_LIBRARY_PATH pointing at the NCCL to test). Each case prints OK or the failing call.
#define _GNU_SOURCE
#include <cuda_runtime.h>
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/wait.h>
#define CK(x) do { cudaError_t e = (x); if (e) { printf("r%d %s:%d %s: %s\n", rank, __FILE__, __LINE__, #x, cudaGetErrorString(e)); return 1; } } while (0)
static int rank;
// poll_always: NCCL 2.28.9's ncclCommWindowRegister returns ncclSuccess on a
// non-blocking comm while its group job (a bootstrap barrier, then *win) is
// still running (dev_runtime.cc swallows the group end's ncclInProgress), so
// a caller that trusts the return sees the next call refused. Polling
// ncclCommGetAsyncError after every call, success included, is the fix.
static int poll_always;
static ncclResult_t settle(ncclComm_t c, ncclResult_t r) {
  if (r == ncclSuccess && poll_always) r = ncclInProgress;
  while (r == ncclInProgress) { if (ncclCommGetAsyncError(c, &r) != ncclSuccess) break; }
  return r;
}
#define NK(x, what) do { ncclResult_t r_ = settle(comm, (x)); if (r_) { printf("r%d case %s: %s -> %s (%s)\n", rank, tag, what, ncclGetErrorString(r_), ncclGetLastError(comm)); ok = 0; goto out; } } while (0)
static int run_case(ncclUniqueId id, int blocking, int both, size_t count, int lazy_cap) {
  char tag[112]; snprintf(tag, sizeof tag, "blocking=%d both=%d count=%zu lazy=%d poll_always=%d", blocking, both, count, lazy_cap, poll_always);
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER; cfg.blocking = blocking;
  ncclComm_t comm = NULL; int ok = 1;
  ncclResult_t r = ncclCommInitRankConfig(&comm, 2, id, rank, &cfg);
  r = settle(comm, r);
  if (r) { printf("r%d init %s\n", rank, ncclGetErrorString(r)); return 0; }
  cudaStream_t s; cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  size_t bytes = count * 2; size_t al = (bytes + 4095) & ~(size_t)4095;
  void *send = NULL, *recv = NULL; ncclWindow_t ws = NULL, wr = NULL;
  NK(ncclMemAlloc(&send, al), "ncclMemAlloc send");
  if (both) NK(ncclMemAlloc(&recv, al), "ncclMemAlloc recv"); else cudaMalloc(&recv, al);
  NK(ncclCommWindowRegister(comm, send, al, &ws, NCCL_WIN_COLL_SYMMETRIC), "register send");
  if (both) NK(ncclCommWindowRegister(comm, recv, al, &wr, NCCL_WIN_COLL_SYMMETRIC), "register recv");
  if (!lazy_cap) { NK(ncclAllReduce(send, recv, count, ncclBfloat16, ncclSum, comm, s), "eager allreduce"); cudaStreamSynchronize(s); }
  cudaGraph_t g; cudaGraphExec_t ge;
  if (cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed)) { printf("begin capture failed\n"); ok = 0; goto out; }
  { ncclResult_t rr = ncclAllReduce(send, recv, count, ncclBfloat16, ncclSum, comm, s);
    cudaError_t ce = cudaStreamEndCapture(s, &g);
    rr = settle(comm, rr);
    if (rr || ce) { printf("r%d case %s: captured allreduce -> %s / %s (%s)\n", rank, tag, ncclGetErrorString(rr), cudaGetErrorString(ce), ncclGetLastError(comm)); ok = 0; goto out; } }
  if (cudaGraphInstantiate(&ge, g, 0)) { printf("r%d inst fail\n", rank); ok = 0; goto out; }
  for (int i = 0; i < 3; i++) cudaGraphLaunch(ge, s);
  { cudaError_t e = cudaStreamSynchronize(s); if (e) { printf("r%d case %s: launch %s\n", rank, tag, cudaGetErrorString(e)); ok = 0; } }
  cudaGraphExecDestroy(ge); cudaGraphDestroy(g);
out:
  printf("r%d case %s: %s\n", rank, tag, ok ? "OK" : "FAIL");
  fflush(stdout);
  if (ws) ncclCommWindowDeregister(comm, ws);
  if (wr) ncclCommWindowDeregister(comm, wr);
  ncclCommFinalize(comm); settle(comm, ncclSuccess); ncclCommDestroy(comm);
  return ok;
}
int main(void) {
  int fds[2]; if (pipe(fds)) return 1;
  ncclUniqueId ids[32];
  pid_t pid = fork();
  rank = pid == 0 ? 1 : 0;
  if (rank == 0) { for (int i = 0; i < 32; i++) ncclGetUniqueId(&ids[i]); if (write(fds[1], ids, sizeof ids) != sizeof ids) return 1; }
  else { size_t got = 0; while (got < sizeof ids) { ssize_t n = read(fds[0], (char *)ids + got, sizeof ids - got); if (n <= 0) return 1; got += n; } }
  cudaSetDevice(rank);
  int k = 0;
  // The fixed way first (poll after every call), then NCCL's return trusted:
  // the failing cases leave the process's NCCL state broken for later ones.
  for (poll_always = 1; poll_always >= 0; poll_always--)
  for (int blocking = 1; blocking >= 0; blocking--)
    for (int both = 1; both >= 0; both--)
      for (int lazy = 0; lazy <= 1; lazy++)
        run_case(ids[k++], blocking, both, 1 << 15, lazy);
  if (rank == 0) { int st; wait(&st); }
  return 0;
}
