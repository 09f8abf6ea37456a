/* ranks.h - run a test body on every GPU, in the ways tpgraph supports:
 * one process per GPU (default; ranks meet through an id file), one thread
 * per GPU in one process, and processes with NCCL's network transport forced
 * (NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1), the stand-in for several machines.
 * One command starts its own ranks; a deadline kills ranks that hang.
 *
 *   TEST [--ranks N] [--modes proc,thread,net] [--iters N]
 */
#ifndef TPG_RANKS_H
#define TPG_RANKS_H

#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tests/gpu/gpu_common.h"

typedef struct tpg_rank {
  int rank, nranks;
  tpg_comm_id id;
  int pass, fail;
  int iters;
} tpg_rank;

typedef void (*tpg_rank_fn)(tpg_rank *r);

#define RCHECK(ctx, cond, ...)                                      \
  do {                                                              \
    if (cond) (ctx)->pass++;                                        \
    else {                                                          \
      (ctx)->fail++;                                                \
      fprintf(stderr, "rank %d: ", (ctx)->rank);                    \
      fprintf(stderr, __VA_ARGS__);                                 \
      fprintf(stderr, " (%s:%d)\n", __FILE__, __LINE__);            \
    }                                                               \
  } while (0)

typedef struct { tpg_rank r; tpg_rank_fn fn; } tpg_rank_thread;

static void *tpg_rank_thread_main(void *arg) {
  tpg_rank_thread *t = arg;
  t->fn(&t->r);
  return NULL;
}

static int tpg_run_processes(const char *self, int nranks, int net, int iters, int deadline_s) {
  char idpath[256];
  snprintf(idpath, sizeof idpath, "/tmp/tpg_ranks_id_%ld_%d", (long)getpid(), net);
  unlink(idpath);
  pid_t pids[8];
  for (int r = 0; r < nranks; r++) {
    pid_t pid = fork();
    if (pid == 0) {
      if (net) {
        setenv("NCCL_P2P_DISABLE", "1", 1);
        setenv("NCCL_SHM_DISABLE", "1", 1);
      }
      char rs[16], ns[16], its[16];
      snprintf(rs, sizeof rs, "%d", r);
      snprintf(ns, sizeof ns, "%d", nranks);
      snprintf(its, sizeof its, "%d", iters);
      execl(self, self, "--child", rs, ns, idpath, its, (char *)NULL);
      _exit(127);
    }
    pids[r] = pid;
  }
  int failed = 0, left = nranks;
  time_t deadline = time(NULL) + deadline_s;
  while (left > 0) {
    int status;
    pid_t w = waitpid(-1, &status, WNOHANG);
    if (w > 0) {
      left--;
      if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) failed++;
      continue;
    }
    if (time(NULL) > deadline) {
      fprintf(stderr, "ranks did not finish in %d s: killing them\n", deadline_s);
      for (int r = 0; r < nranks; r++) kill(pids[r], SIGKILL);
      while (waitpid(-1, &status, 0) > 0) {}
      failed = nranks;
      break;
    }
    struct timespec ts = {0, 20000000};
    nanosleep(&ts, NULL);
  }
  unlink(idpath);
  return failed;
}

/* The whole main() of a multi-rank test. */
static inline int tpg_ranks_main(int argc, char **argv, tpg_rank_fn fn, int default_iters) {
  if (argc >= 6 && strcmp(argv[1], "--child") == 0) {
    tpg_rank c;
    memset(&c, 0, sizeof c);
    c.rank = atoi(argv[2]);
    c.nranks = atoi(argv[3]);
    c.iters = atoi(argv[5]);
    if (c.rank == 0) {
      MUST(tpg_comm_id_create(&c.id));
      MUST(tpg_comm_id_write_file(&c.id, argv[4]));
    } else {
      MUST(tpg_comm_id_read_file(argv[4], 60000, &c.id));
    }
    fn(&c);
    printf("rank %d (pid %ld): %d passed, %d failed\n", c.rank, (long)getpid(), c.pass, c.fail);
    return c.fail ? 1 : 0;
  }
  int nranks = -1, iters = default_iters;
  const char *modes = "proc,thread,net";
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--ranks") && i + 1 < argc) nranks = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--modes") && i + 1 < argc) modes = argv[++i];
    else if (!strcmp(argv[i], "--iters") && i + 1 < argc) iters = atoi(argv[++i]);
  }
  tpg_runtime_info ri;
  MUST(tpg_runtime_get_info(&ri, sizeof ri));
  if (ri.device_count < 1) {
    fprintf(stderr, "no GPU (%s)\n", ri.driver_error);
    return 1;
  }
  if (nranks < 1) nranks = ri.device_count > 8 ? 8 : ri.device_count;
  if (nranks > ri.device_count || nranks > 8) {
    fprintf(stderr, "--ranks %d: expected 1..%d (GPUs visible)\n", nranks, ri.device_count < 8 ? ri.device_count : 8);
    return 1;
  }
  printf("%d rank%s, NCCL %d, modes %s\n", nranks, nranks == 1 ? "" : "s", ri.nccl_version, modes);
  fflush(stdout);
  int pass = 0, fail = 0;
  char self[4096];
  ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
  if (len <= 0) return 1;
  self[len] = '\0';
  if (strstr(modes, "proc")) {
    int f = tpg_run_processes(self, nranks, 0, iters, 240);
    printf("process per GPU: %s\n", f ? "FAILED" : "ok");
    f ? fail++ : pass++;
    fflush(stdout);
  }
  if (strstr(modes, "thread")) {
    tpg_rank_thread t[8];
    pthread_t th[8];
    tpg_comm_id id;
    MUST(tpg_comm_id_create(&id));
    for (int r = 0; r < nranks; r++) {
      memset(&t[r], 0, sizeof t[r]);
      t[r].r.rank = r;
      t[r].r.nranks = nranks;
      t[r].r.id = id;
      t[r].r.iters = iters;
      t[r].fn = fn;
      pthread_create(&th[r], NULL, tpg_rank_thread_main, &t[r]);
    }
    int f = 0;
    for (int r = 0; r < nranks; r++) {
      pthread_join(th[r], NULL);
      f += t[r].r.fail;
    }
    printf("thread per GPU: %s\n", f ? "FAILED" : "ok");
    f ? fail++ : pass++;
    fflush(stdout);
  }
  if (strstr(modes, "net")) {
    int f = tpg_run_processes(self, nranks, 1, iters, 240);
    printf("process per GPU, NCCL network transport (P2P and SHM off): %s\n", f ? "FAILED" : "ok");
    f ? fail++ : pass++;
  }
  printf("%d passed, %d failed\n", pass, fail);
  return fail ? 1 : 0;
}

/* This rank's comm, with a generous deadline for a cold first init. */
static inline tpg_comm *tpg_rank_comm(tpg_rank *c) {
  CUDA_OK(cudaSetDevice(c->rank));
  tpg_comm_config cc = TPG_COMM_CONFIG_INIT;
  cc.device = c->rank;
  cc.rank = c->rank;
  cc.nranks = c->nranks;
  cc.timeout_ms = 60000;
  tpg_comm *comm = NULL;
  tpg_status st = tpg_comm_create(&c->id, &cc, &comm);
  RCHECK(c, st == TPG_SUCCESS, "comm create: %s", tpg_last_error());
  return st == TPG_SUCCESS ? comm : NULL;
}

#endif
