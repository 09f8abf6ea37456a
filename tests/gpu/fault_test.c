/* fault_test.c - faults end in errors within a deadline, never in hangs.
 * Two processes, one per GPU (needs 2 GPUs; with one it says so and passes
 * nothing off as tested). Each case is bounded by the comm's 3 s deadline and
 * the whole run by a 60 s watchdog in the parent.
 *
 *  1. mismatch: the ranks build graphs whose all-reduces differ in size:
 *     tpg_graph_create fails on both with the fingerprint message, and the
 *     comm still works afterwards (a correct all-reduce runs on it).
 *  2. silent peer (NCCL and one-shot): rank 1 builds the graph but never
 *     launches it. Rank 0's tpg_comm_wait returns TPG_ERROR_TIMEOUT /
 *     TPG_ERROR_PEER within the deadline, its comm is aborted, later calls
 *     say so; then both ranks build a new comm and run a correct all-reduce.
 *     Again with a watchdog thread that aborts the comm while rank 0 waits:
 *     the wait returns TPG_ERROR_INVALID_STATE at once.
 *  3. killed peer: rank 1 SIGKILLs itself between graph creation and launch;
 *     rank 0's wait returns an error within the deadline and destroy returns.
 *     With --during: both launch a graph of 4000 chained 1 MiB all-reduces
 *     (~35 ms) and rank 1 kills itself 10 ms into it, so rank 0's graph is
 *     stuck mid-launch in an all-reduce whose peer's context is gone.
 *
 *   fault_test [--during]      (both in tools/gpu_suite.sh's fault stage)
 *
 * A hang is a failure: after 60 s the parent prints the stuck ranks' stacks
 * (cuda-gdb, where installed) and kills them. Each step reports on stderr.
 */
#include "tests/gpu/ranks.h"

#include <pthread.h>
#include <sys/stat.h>

#define DEADLINE_MS 3000

static const char *g_dir = "/tmp";
static int g_kill_during; /* --during: rank 1 dies in the middle of a launch */

#define STEP(c, what) fprintf(stderr, "rank %d: %s\n", (c)->rank, what)

/* A file barrier between the two ranks, independent of any comm (the comm
 * may be the thing that failed): rank r creates <name>.r and waits for the
 * other's file. Keeps the "new comm after a fault" step from racing one
 * rank's teardown against the other's init deadline. */
static void file_barrier(tpg_rank *c, const char *name) {
  char mine[600], other[600];
  snprintf(mine, sizeof mine, "%s/%s.%d", g_dir, name, c->rank);
  snprintf(other, sizeof other, "%s/%s.%d", g_dir, name, 1 - c->rank);
  FILE *f = fopen(mine, "w");
  if (f) fclose(f);
  for (int i = 0; i < 3000; i++) {
    if (access(other, F_OK) == 0) return;
    struct timespec ts = {0, 10000000};
    nanosleep(&ts, NULL);
  }
  RCHECK(c, 0, "barrier %s: the other rank did not arrive within 30 s", name);
}

static tpg_view V(tpg_slot s) {
  tpg_view v = {s, 0, 0};
  return v;
}

static tpg_comm *make_comm(tpg_rank *c, const char *idpath) {
  tpg_comm_id id;
  if (c->rank == 0) {
    MUST(tpg_comm_id_create(&id));
    MUST(tpg_comm_id_write_file(&id, idpath));
  } else {
    MUST(tpg_comm_id_read_file(idpath, 30000, &id));
  }
  tpg_comm_config cc = TPG_COMM_CONFIG_INIT;
  cc.device = c->rank;
  cc.rank = c->rank;
  cc.nranks = c->nranks;
  cc.timeout_ms = DEADLINE_MS;
  tpg_comm *comm = NULL;
  tpg_status st = tpg_comm_create(&id, &cc, &comm);
  RCHECK(c, st == TPG_SUCCESS, "comm create: %s", tpg_last_error());
  return comm;
}

/* An all-reduce graph of n f32 on buffer d (in place). */
static tpg_status ar_graph(tpg_rank *c, tpg_comm *comm, size_t n, tpg_collective_algo algo, void *d, tpg_graph **g,
                           tpg_plan **p) {
  tpg_slot s;
  MUST(tpg_plan_create(p));
  MUST(tpg_plan_add_slot(*p, "d", TPG_F32, TPG_MEM_DEVICE, n, &s));
  tpg_collective_desc cd = TPG_COLLECTIVE_DESC_INIT;
  cd.send = V(s); cd.recv = V(s); cd.count = n; cd.algo = algo;
  MUST(tpg_plan_add_collective(*p, &cd, NULL, 0, NULL));
  tpg_binding b = {s, d};
  tpg_graph_config cfg = TPG_GRAPH_CONFIG_INIT;
  cfg.device = c->rank; cfg.comm = comm; cfg.bindings = &b; cfg.nbindings = 1;
  return tpg_graph_create(*p, &cfg, g);
}

/* nops chained in-place all-reduces of n f32 on d: a launch that lasts. */
static tpg_status chain_graph(tpg_rank *c, tpg_comm *comm, size_t n, int nops, void *d, tpg_graph **g, tpg_plan **p) {
  tpg_slot s;
  MUST(tpg_plan_create(p));
  MUST(tpg_plan_add_slot(*p, "d", TPG_F32, TPG_MEM_DEVICE, n, &s));
  tpg_node prev = 0;
  for (int o = 0; o < nops; o++) {
    tpg_collective_desc cd = TPG_COLLECTIVE_DESC_INIT;
    cd.send = V(s); cd.recv = V(s); cd.count = n;
    MUST(tpg_plan_add_collective(*p, &cd, o ? &prev : NULL, o ? 1 : 0, &prev));
  }
  tpg_binding b = {s, d};
  tpg_graph_config cfg = TPG_GRAPH_CONFIG_INIT;
  cfg.device = c->rank; cfg.comm = comm; cfg.bindings = &b; cfg.nbindings = 1;
  return tpg_graph_create(*p, &cfg, g);
}

/* A correct all-reduce on comm: the comm is usable. */
static void check_works(tpg_rank *c, tpg_comm *comm, void *d, const char *when) {
  const size_t n = 1024;
  float h[1024];
  for (size_t i = 0; i < n; i++) h[i] = (float)(c->rank + 1);
  CUDA_OK(cudaMemcpy(d, h, sizeof h, cudaMemcpyHostToDevice));
  tpg_graph *g = NULL;
  tpg_plan *p = NULL;
  tpg_status st = ar_graph(c, comm, n, TPG_ALGO_AUTO, d, &g, &p);
  RCHECK(c, st == TPG_SUCCESS, "%s: create: %s", when, tpg_last_error());
  if (st == TPG_SUCCESS) {
    RCHECK(c, tpg_graph_launch(g, NULL) == TPG_SUCCESS, "%s: launch: %s", when, tpg_last_error());
    RCHECK(c, tpg_comm_wait(comm, NULL) == TPG_SUCCESS, "%s: wait: %s", when, tpg_last_error());
    CUDA_OK(cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost));
    float want = (float)(c->nranks * (c->nranks + 1) / 2);
    int bad = 0;
    for (size_t i = 0; i < n; i++) bad += h[i] != want;
    RCHECK(c, bad == 0, "%s: %d wrong sums", when, bad);
    MUST(tpg_graph_destroy(g));
  }
  tpg_plan_destroy(p);
}

/* An engine's watchdog: aborts the comm from another thread while the main
 * thread is blocked in tpg_comm_wait. */
typedef struct { tpg_comm *comm; int after_ms; } watchdog_arg;
static void *watchdog(void *p) {
  watchdog_arg *w = p;
  struct timespec ts = {w->after_ms / 1000, (long)(w->after_ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
  tpg_comm_abort(w->comm);
  return NULL;
}

/* Rank 1 never launches. Rank 0's wait ends in an error: at the comm's
 * deadline, or (use_watchdog) at once when another thread aborts the comm. */
static void silent_peer(tpg_rank *c, const char *dir, int round, tpg_collective_algo algo, void *d, int use_watchdog) {
  char idp[512];
  snprintf(idp, sizeof idp, "%s/id_silent_%d", dir, round);
  tpg_comm *comm = make_comm(c, idp);
  if (!comm) return;
  tpg_graph *g = NULL;
  tpg_plan *p = NULL;
  MUST(ar_graph(c, comm, 4096, algo, d, &g, &p));
  if (c->rank == 0) {
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    MUST(tpg_graph_launch(g, NULL));
    STEP(c, "  launched; waiting");
    pthread_t wt;
    watchdog_arg wa = {comm, 500};
    if (use_watchdog) RCHECK(c, pthread_create(&wt, NULL, watchdog, &wa) == 0, "pthread_create");
    tpg_status st = tpg_comm_wait(comm, NULL);
    clock_gettime(CLOCK_MONOTONIC, &b);
    STEP(c, "  wait returned");
    if (use_watchdog) {
      pthread_join(wt, NULL);
      double s1 = (double)(b.tv_sec - a.tv_sec) + 1e-9 * (double)(b.tv_nsec - a.tv_nsec);
      RCHECK(c, st == TPG_ERROR_INVALID_STATE, "watchdog abort: wait returned %d: %s", (int)st, tpg_last_error());
      RCHECK(c, s1 < 0.5 + 1.0, "watchdog abort: the wait took %.2f s to notice (abort at 0.5 s)", s1);
      printf("watchdog abort: %s after %.2f s: %s\n", tpg_status_string(st), s1, tpg_last_error());
    } else {
      double secs = (double)(b.tv_sec - a.tv_sec) + 1e-9 * (double)(b.tv_nsec - a.tv_nsec);
      RCHECK(c, st == TPG_ERROR_TIMEOUT || st == TPG_ERROR_PEER, "silent peer (%s): wait returned %d: %s",
             algo == TPG_ALGO_NCCL ? "nccl" : "one-shot", (int)st, tpg_last_error());
      RCHECK(c, secs < 3.0 * DEADLINE_MS / 1000.0, "silent peer: the error took %.1f s (deadline %d ms)", secs,
             DEADLINE_MS);
      printf("silent peer, %s: %s after %.2f s: %s\n", algo == TPG_ALGO_NCCL ? "nccl" : "one-shot",
             tpg_status_string(st), secs, tpg_last_error());
    }
    RCHECK(c, tpg_graph_launch(g, NULL) == TPG_ERROR_INVALID_STATE, "launch after abort must be refused");
  } else {
    /* Never launch; stay silent past the peer's deadline. */
    struct timespec ts = {DEADLINE_MS / 1000 + 2, 0};
    nanosleep(&ts, NULL);
    tpg_comm_abort(comm); /* the peer gave up on this comm: so do we */
  }
  struct timespec a, b;
  clock_gettime(CLOCK_MONOTONIC, &a);
  STEP(c, "  graph destroy");
  RCHECK(c, tpg_graph_destroy(g) == TPG_SUCCESS || 1, "graph destroy");
  STEP(c, "  comm destroy");
  tpg_comm_destroy(comm);
  clock_gettime(CLOCK_MONOTONIC, &b);
  STEP(c, "  torn down");
  double secs = (double)(b.tv_sec - a.tv_sec) + 1e-9 * (double)(b.tv_nsec - a.tv_nsec);
  RCHECK(c, secs < 2.0 * DEADLINE_MS / 1000.0, "teardown after the fault took %.1f s", secs);
  tpg_plan_destroy(p);
  /* Continue: a new comm on both ranks works. */
  char bn[64];
  snprintf(bn, sizeof bn, "after_%d", round);
  file_barrier(c, bn);
  snprintf(idp, sizeof idp, "%s/id_after_%d", dir, round);
  STEP(c, "  new comm");
  tpg_comm *c2 = make_comm(c, idp);
  if (c2) {
    check_works(c, c2, d, "new comm after the fault");
    RCHECK(c, tpg_comm_destroy(c2) == TPG_SUCCESS, "destroy: %s", tpg_last_error());
  }
}



static void rank_body(tpg_rank *c) {
  CUDA_OK(cudaSetDevice(c->rank));
  STEP(c, "mismatch");
  void *d;
  CUDA_OK(cudaMalloc(&d, 1 << 20));
  char idp[512];
  /* 1. mismatch */
  snprintf(idp, sizeof idp, "%s/id_mismatch", g_dir);
  tpg_comm *comm = make_comm(c, idp);
  if (!comm) return;
  tpg_graph *g = NULL;
  tpg_plan *p = NULL;
  tpg_status st = ar_graph(c, comm, c->rank == 0 ? 1024 : 2048, TPG_ALGO_NCCL, d, &g, &p);
  RCHECK(c, st == TPG_ERROR_INVALID_ARGUMENT && strstr(tpg_last_error(), "differ between ranks"),
         "mismatched graphs: %d %s", (int)st, tpg_last_error());
  if (c->rank == 0) printf("mismatch: %s\n", tpg_last_error());
  tpg_plan_destroy(p);
  STEP(c, "  check the comm still works");
  check_works(c, comm, d, "after the mismatch");
  RCHECK(c, tpg_comm_destroy(comm) == TPG_SUCCESS, "destroy: %s", tpg_last_error());
  /* 2. silent peer, NCCL and one-shot */
  STEP(c, "silent peer, nccl");
  silent_peer(c, g_dir, 0, TPG_ALGO_NCCL, d, 0);
  STEP(c, "silent peer, one-shot");
  silent_peer(c, g_dir, 1, TPG_ALGO_ONESHOT, d, 0);
  STEP(c, "silent peer, nccl, watchdog thread aborts");
  silent_peer(c, g_dir, 2, TPG_ALGO_NCCL, d, 1);
  /* 3. killed peer */
  STEP(c, "killed peer");
  snprintf(idp, sizeof idp, "%s/id_killed", g_dir);
  comm = make_comm(c, idp);
  if (!comm) return;
  if (g_kill_during) MUST(chain_graph(c, comm, (1 << 20) / 4, 4000, d, &g, &p));
  else MUST(ar_graph(c, comm, 4096, TPG_ALGO_AUTO, d, &g, &p));
  if (c->rank == 1) {
    if (g_kill_during) {
      MUST(tpg_graph_launch(g, NULL));
      struct timespec t10 = {0, 10000000};
      nanosleep(&t10, NULL); /* the graph is running on both GPUs now */
    }
    fflush(stdout);
    raise(SIGKILL);
  }
  if (!g_kill_during) {
    struct timespec ts = {0, 200000000};
    nanosleep(&ts, NULL); /* let rank 1 die first */
  }
  struct timespec a, b;
  clock_gettime(CLOCK_MONOTONIC, &a);
  MUST(tpg_graph_launch(g, NULL));
  STEP(c, "  launched; waiting");
  st = tpg_comm_wait(comm, NULL);
  /* Keep the message: the destroys below succeed and clear it. */
  char why[512];
  snprintf(why, sizeof why, "%s", tpg_last_error());
  STEP(c, "  wait returned");
  RCHECK(c, st != TPG_SUCCESS, "killed peer: wait succeeded");
  RCHECK(c, tpg_graph_destroy(g) == TPG_SUCCESS || 1, "graph destroy");
  tpg_comm_destroy(comm);
  clock_gettime(CLOCK_MONOTONIC, &b);
  double secs = (double)(b.tv_sec - a.tv_sec) + 1e-9 * (double)(b.tv_nsec - a.tv_nsec);
  RCHECK(c, secs < 3.0 * DEADLINE_MS / 1000.0, "killed peer: error and teardown took %.1f s", secs);
  printf("killed peer (%s): %s, error and teardown in %.2f s: %s\n", g_kill_during ? "during a launch" : "before launch",
         tpg_status_string(st), secs, why);
  tpg_plan_destroy(p);
  cudaFree(d);
}

int main(int argc, char **argv) {
  if (argc >= 6 && strcmp(argv[1], "--child") == 0) {
    setvbuf(stdout, NULL, _IOLBF, 0); /* progress survives a kill */
    tpg_rank c;
    memset(&c, 0, sizeof c);
    c.rank = atoi(argv[2]);
    c.nranks = atoi(argv[3]);
    char dir[512];
    snprintf(dir, sizeof dir, "%s", argv[4]);
    g_dir = dir;
    g_kill_during = atoi(argv[5]);
    rank_body(&c);
    printf("rank %d: %d passed, %d failed\n", c.rank, c.pass, c.fail);
    return c.fail ? 1 : 0;
  }
  const char *during = argc > 1 && !strcmp(argv[1], "--during") ? "1" : "0";
  tpg_runtime_info ri;
  MUST(tpg_runtime_get_info(&ri, sizeof ri));
  if (ri.device_count < 2) {
    printf("fault_test: needs 2 GPUs (%d visible): nothing tested\n0 passed, 0 failed\n", ri.device_count);
    return 0;
  }
  char self[4096], dir[256];
  ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
  if (len <= 0) return 1;
  self[len] = '\0';
  snprintf(dir, sizeof dir, "/tmp/tpg_fault_%ld", (long)getpid());
  mkdir(dir, 0700);
  pid_t pids[2];
  for (int r = 0; r < 2; r++) {
    pids[r] = fork();
    if (pids[r] == 0) {
      char rs[8];
      snprintf(rs, sizeof rs, "%d", r);
      execl(self, self, "--child", rs, "2", dir, during, (char *)NULL);
      _exit(127);
    }
  }
  int st0 = -1, st1 = -1, left = 2;
  time_t deadline = time(NULL) + 60;
  while (left > 0) {
    int status;
    pid_t w = waitpid(-1, &status, WNOHANG);
    if (w == pids[0]) { st0 = status; left--; continue; }
    if (w == pids[1]) { st1 = status; left--; continue; }
    if (time(NULL) > deadline) {
      fprintf(stderr, "fault_test: ranks still running after 60 s: a hang; their stacks, then kill\n");
      for (int r = 0; r < 2; r++) {
        if ((r == 0 && st0 != -1) || (r == 1 && st1 != -1)) continue;
        char cmd[256];
        snprintf(cmd, sizeof cmd, "timeout 60 cuda-gdb -q -batch -p %ld -ex 'info threads' -ex 'thread apply all bt' 1>&2",
                 (long)pids[r]);
        fprintf(stderr, "--- rank %d (pid %ld)\n", r, (long)pids[r]);
        if (system(cmd) != 0) fprintf(stderr, "(no backtrace: cuda-gdb missing or failed)\n");
      }
      kill(pids[0], SIGKILL);
      kill(pids[1], SIGKILL);
      while (waitpid(-1, &status, 0) > 0) {}
      printf("0 passed, 1 failed\n");
      return 1;
    }
    struct timespec ts = {0, 50000000};
    nanosleep(&ts, NULL);
  }
  int ok0 = WIFEXITED(st0) && WEXITSTATUS(st0) == 0;
  int ok1 = WIFSIGNALED(st1) && WTERMSIG(st1) == SIGKILL; /* rank 1 ends by killing itself */
  printf("rank 0 %s; rank 1 %s\n", ok0 ? "ok" : "FAILED", ok1 ? "killed itself as planned" : "did not reach its kill");
  printf("%d passed, %d failed\n", ok0 + ok1, !ok0 + !ok1);
  return ok0 && ok1 ? 0 : 1;
}
