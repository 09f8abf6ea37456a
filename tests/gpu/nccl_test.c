/* nccl_test.c - collectives as NCCL child-graph nodes, on every visible GPU.
 *
 * One command runs it all: the parent starts one process per GPU (the
 * default mode; ranks meet through an id file), then the same ranks as one
 * thread per GPU in one process, then processes again with NCCL forced onto
 * its network transport (NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1), the stand-in
 * for ranks on different machines. Each rank checks, for f32/bf16/f16:
 * all-reduce, all-gather and reduce-scatter against a CPU reference; a
 * kernel node feeding a collective in one graph; rebinding collective slots
 * (old buffers poisoned); 1000 launches with alternating bindings; and a
 * whole-graph update. Every wait is bounded (tpg_comm_wait), every child is
 * killed if the run passes its deadline.
 *
 *   nccl_test [--ranks N] [--modes proc,thread,net] [--iters 1000]
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tests/gpu/gpu_common.h"

static int g_iters = 1000;

typedef struct {
  int rank, nranks;
  tpg_comm_id id;
  int pass, fail;
} rank_ctx;

static tpg_view V(tpg_slot s, uint64_t off) {
  tpg_view v = {s, 0, off};
  return v;
}

/* Input of rank r for dtype case `t`, set `set`: reproducible on every rank. */
static float in_val(int r, int t, int set, size_t i) { return rnd((uint64_t)(1000 * t + 100 * set + r + 1), i); }

typedef struct {
  tpg_dtype dt;
  size_t count;       /* per-rank part */
  void *send[2], *ar[2], *ag[2], *rs[2], *kin[2];
  tpg_slot s_send, s_ar, s_ag, s_rs, s_kin;
} coll_bufs;

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

/* Fill set `set`'s inputs on this rank. kin = -send: the graph computes
 * send = -kin with an axpby node first (negation is exact in every dtype). */
static void fill_inputs(rank_ctx *c, coll_bufs *b, int t, int set) {
  size_t n = b->count * (size_t)c->nranks;
  float *f = calloc(n, 4);
  for (size_t i = 0; i < n; i++) f[i] = in_val(c->rank, t, set, i);
  void *h = pack(b->dt, f, n, NULL);
  CUDA_OK(cudaMemcpy(b->send[set], h, n * tpg_dtype_size(b->dt), cudaMemcpyHostToDevice));
  free(h);
  for (size_t i = 0; i < n; i++) f[i] = -in_val(c->rank, t, set, i);
  h = pack(b->dt, f, n, NULL);
  CUDA_OK(cudaMemcpy(b->kin[set], h, n * tpg_dtype_size(b->dt), cudaMemcpyHostToDevice));
  free(h);
  free(f);
  size_t es = tpg_dtype_size(b->dt);
  poison(b->ar[set], b->count * es);
  poison(b->ag[set], n * es);
  poison(b->rs[set], b->count * es);
}

/* Compare set `set`'s outputs with the CPU reference (sums of the rounded inputs). */
static int check_outputs(rank_ctx *c, coll_bufs *b, int t, int set, const char *what) {
  size_t cnt = b->count, n = cnt * (size_t)c->nranks, es = tpg_dtype_size(b->dt);
  float *rounded = malloc(n * 4), *tmpf = malloc(n * 4), *out = malloc(n * 4);
  double *ref = malloc(n * sizeof *ref);
  void *h = malloc(n * es);
  int ok = 1;
  /* all-reduce of send[0:cnt]: sum over ranks */
  for (size_t i = 0; i < cnt; i++) ref[i] = 0;
  for (int r = 0; r < c->nranks; r++) {
    for (size_t i = 0; i < n; i++) tmpf[i] = in_val(r, t, set, i);
    void *pk = pack(b->dt, tmpf, n, rounded);
    free(pk);
    for (size_t i = 0; i < cnt; i++) ref[i] += rounded[i];
  }
  CUDA_OK(cudaMemcpy(h, b->ar[set], cnt * es, cudaMemcpyDeviceToHost));
  unpack(b->dt, h, cnt, out);
  double e = rel_err(out, ref, cnt);
  RCHECK(c, e <= tol_for(b->dt), "%s all_reduce dtype %d: rel err %.2e > %.0e", what, (int)b->dt, e, tol_for(b->dt));
  ok &= e <= tol_for(b->dt);
  /* all-gather of send[0:cnt] */
  for (int r = 0; r < c->nranks; r++) {
    for (size_t i = 0; i < n; i++) tmpf[i] = in_val(r, t, set, i);
    void *pk = pack(b->dt, tmpf, n, rounded);
    free(pk);
    for (size_t i = 0; i < cnt; i++) ref[(size_t)r * cnt + i] = rounded[i];
  }
  CUDA_OK(cudaMemcpy(h, b->ag[set], n * es, cudaMemcpyDeviceToHost));
  unpack(b->dt, h, n, out);
  e = rel_err(out, ref, n);
  RCHECK(c, e == 0.0, "%s all_gather dtype %d: rel err %.2e, expected exact", what, (int)b->dt, e);
  ok &= e == 0.0;
  /* reduce-scatter of send[0:n]: my part is [rank*cnt, (rank+1)*cnt) */
  for (size_t i = 0; i < cnt; i++) ref[i] = 0;
  for (int r = 0; r < c->nranks; r++) {
    for (size_t i = 0; i < n; i++) tmpf[i] = in_val(r, t, set, i);
    void *pk = pack(b->dt, tmpf, n, rounded);
    free(pk);
    for (size_t i = 0; i < cnt; i++) ref[i] += rounded[(size_t)c->rank * cnt + i];
  }
  CUDA_OK(cudaMemcpy(h, b->rs[set], cnt * es, cudaMemcpyDeviceToHost));
  unpack(b->dt, h, cnt, out);
  e = rel_err(out, ref, cnt);
  RCHECK(c, e <= tol_for(b->dt), "%s reduce_scatter dtype %d: rel err %.2e", what, (int)b->dt, e);
  ok &= e <= tol_for(b->dt);
  free(rounded); free(tmpf); free(out); free(ref); free(h);
  return ok;
}

static tpg_binding *bindings_for(coll_bufs *b, int set, tpg_binding *out) {
  out[0] = (tpg_binding){b->s_send, b->send[set]};
  out[1] = (tpg_binding){b->s_ar, b->ar[set]};
  out[2] = (tpg_binding){b->s_ag, b->ag[set]};
  out[3] = (tpg_binding){b->s_rs, b->rs[set]};
  out[4] = (tpg_binding){b->s_kin, b->kin[set]};
  return out;
}

static void run_dtype(rank_ctx *c, tpg_comm *comm, tpg_dtype dt, int t, int do_iters) {
  coll_bufs b;
  memset(&b, 0, sizeof b);
  b.dt = dt;
  b.count = 4099; /* odd: not a multiple of any vector width */
  size_t n = b.count * (size_t)c->nranks, es = tpg_dtype_size(dt);
  size_t pad = (n * es + 15) / 16 * 16 / es; /* slots hold whole 16-byte rows of the buffer */
  for (int s = 0; s < 2; s++) {
    CUDA_OK(cudaMalloc(&b.send[s], pad * es));
    CUDA_OK(cudaMalloc(&b.kin[s], pad * es));
    CUDA_OK(cudaMalloc(&b.ar[s], b.count * es));
    CUDA_OK(cudaMalloc(&b.ag[s], n * es));
    CUDA_OK(cudaMalloc(&b.rs[s], b.count * es));
  }
  tpg_plan *p;
  MUST(tpg_plan_create(&p));
  MUST(tpg_plan_add_slot(p, "send", dt, TPG_MEM_DEVICE, n, &b.s_send));
  MUST(tpg_plan_add_slot(p, "ar", dt, TPG_MEM_DEVICE, b.count, &b.s_ar));
  MUST(tpg_plan_add_slot(p, "ag", dt, TPG_MEM_DEVICE, n, &b.s_ag));
  MUST(tpg_plan_add_slot(p, "rs", dt, TPG_MEM_DEVICE, b.count, &b.s_rs));
  MUST(tpg_plan_add_slot(p, "kin", dt, TPG_MEM_DEVICE, n, &b.s_kin));
  /* send = -kin (kernel node), then the three collectives. The all-reduce
   * and all-gather sit on independent branches; the builder orders them. */
  tpg_node k, ar, ag, rs;
  MUST(tpg_plan_add_axpby(p, V(b.s_send, 0), V(b.s_kin, 0), n, -1.0f, 0.0f, NULL, 0, &k));
  tpg_collective_desc cd = TPG_COLLECTIVE_DESC_INIT;
  cd.kind = TPG_ALL_REDUCE; cd.send = V(b.s_send, 0); cd.recv = V(b.s_ar, 0); cd.count = b.count;
  MUST(tpg_plan_add_collective(p, &cd, &k, 1, &ar));
  cd.kind = TPG_ALL_GATHER; cd.recv = V(b.s_ag, 0);
  MUST(tpg_plan_add_collective(p, &cd, &k, 1, &ag));
  cd.kind = TPG_REDUCE_SCATTER; cd.recv = V(b.s_rs, 0);
  MUST(tpg_plan_add_collective(p, &cd, &k, 1, &rs));

  int dev;
  MUST(tpg_comm_info(comm, NULL, NULL, &dev));
  tpg_binding bind[5];
  tpg_graph_config cfg = TPG_GRAPH_CONFIG_INIT;
  cfg.device = dev;
  cfg.comm = comm;
  cfg.bindings = bindings_for(&b, 0, bind);
  cfg.nbindings = 5;
  tpg_graph *g;
  MUST(tpg_graph_create(p, &cfg, &g));
  cudaStream_t stream;
  CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));

  fill_inputs(c, &b, t, 0);
  poison(b.send[0], n * es);
  RCHECK(c, tpg_graph_launch(g, (tpg_stream)stream) == TPG_SUCCESS, "launch: %s", tpg_last_error());
  RCHECK(c, tpg_comm_wait(comm, (tpg_stream)stream) == TPG_SUCCESS, "wait: %s", tpg_last_error());
  check_outputs(c, &b, t, 0, "first launch");

  /* Rebind every slot (collectives re-captured on every rank in the same order). */
  fill_inputs(c, &b, t, 1);
  RCHECK(c, tpg_graph_rebind(g, bindings_for(&b, 1, bind), 5) == TPG_SUCCESS, "rebind: %s", tpg_last_error());
  poison(b.kin[0], n * es);
  poison(b.ar[0], b.count * es);
  poison(b.ag[0], n * es);
  poison(b.rs[0], b.count * es);
  RCHECK(c, tpg_graph_launch(g, (tpg_stream)stream) == TPG_SUCCESS, "launch: %s", tpg_last_error());
  RCHECK(c, tpg_comm_wait(comm, (tpg_stream)stream) == TPG_SUCCESS, "wait: %s", tpg_last_error());
  check_outputs(c, &b, t, 1, "after rebind");

  /* Whole-graph update back to set 0. */
  fill_inputs(c, &b, t, 0);
  RCHECK(c, tpg_graph_update(g, NULL, bindings_for(&b, 0, bind), 5) == TPG_SUCCESS, "update: %s", tpg_last_error());
  RCHECK(c, tpg_graph_launch(g, (tpg_stream)stream) == TPG_SUCCESS, "launch: %s", tpg_last_error());
  RCHECK(c, tpg_comm_wait(comm, (tpg_stream)stream) == TPG_SUCCESS, "wait: %s", tpg_last_error());
  check_outputs(c, &b, t, 0, "after whole-graph update");

  if (do_iters) {
    /* Alternate bindings every launch; inputs stay, outputs are poisoned
     * before each launch, every result is checked. */
    fill_inputs(c, &b, t, 1);
    int bad = 0;
    double t0 = (double)clock() / CLOCKS_PER_SEC;
    for (int it = 0; it < g_iters && bad < 5; it++) {
      int s = it & 1;
      size_t e2 = tpg_dtype_size(dt);
      poison(b.ar[s], b.count * e2);
      poison(b.ag[s], n * e2);
      poison(b.rs[s], b.count * e2);
      if (tpg_graph_rebind(g, bindings_for(&b, s, bind), 5) != TPG_SUCCESS ||
          tpg_graph_launch(g, (tpg_stream)stream) != TPG_SUCCESS ||
          tpg_comm_wait(comm, (tpg_stream)stream) != TPG_SUCCESS) {
        fprintf(stderr, "rank %d iter %d: %s\n", c->rank, it, tpg_last_error());
        bad++;
        break;
      }
      int sp = c->pass, sf = c->fail; /* per-iteration checks are summarised below */
      if (!check_outputs(c, &b, t, s, "alternating")) bad++;
      c->pass = sp;
      c->fail = sf;
    }
    double t1 = (double)clock() / CLOCKS_PER_SEC;
    RCHECK(c, bad == 0, "%d launches with alternating bindings: %d wrong", g_iters, bad);
    if (c->rank == 0)
      printf("rank 0 dtype %d: %d launches, alternating bindings, all checked: %d wrong (%.1f s cpu)\n", (int)dt,
             g_iters, bad, t1 - t0);
  }

  MUST(tpg_graph_destroy(g));
  tpg_plan_destroy(p);
  CUDA_OK(cudaStreamDestroy(stream));
  for (int s = 0; s < 2; s++) {
    cudaFree(b.send[s]); cudaFree(b.kin[s]); cudaFree(b.ar[s]); cudaFree(b.ag[s]); cudaFree(b.rs[s]);
  }
}

static void rank_body(rank_ctx *c) {
  CUDA_OK(cudaSetDevice(c->rank));
  tpg_comm_config cc = TPG_COMM_CONFIG_INIT;
  cc.device = c->rank;
  cc.rank = c->rank;
  cc.nranks = c->nranks;
  cc.timeout_ms = 60000; /* first init on a cold machine can be slow */
  tpg_comm *comm;
  tpg_status st = tpg_comm_create(&c->id, &cc, &comm);
  RCHECK(c, st == TPG_SUCCESS, "comm create: %s", tpg_last_error());
  if (st != TPG_SUCCESS) return;
  run_dtype(c, comm, TPG_F32, 0, 1);
  run_dtype(c, comm, TPG_BF16, 1, 1);
  run_dtype(c, comm, TPG_F16, 2, 0);
  /* A comm with a live graph refuses destroy; after the graph it succeeds. */
  st = tpg_comm_destroy(comm);
  RCHECK(c, st == TPG_SUCCESS, "comm destroy: %s", tpg_last_error());
}

static void *thread_main(void *arg) {
  rank_body((rank_ctx *)arg);
  return NULL;
}

/* ---- parent: start ranks, bound everything by a deadline ---------------- */

static int run_processes(const char *self, int nranks, int net) {
  char idpath[256];
  snprintf(idpath, sizeof idpath, "/tmp/tpg_nccl_test_id_%ld_%d", (long)getpid(), net);
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
      snprintf(its, sizeof its, "%d", g_iters);
      execl(self, self, "--child", rs, ns, idpath, its, (char *)NULL);
      _exit(127);
    }
    pids[r] = pid;
  }
  int failed = 0, left = nranks;
  double deadline = (double)time(NULL) + 240;
  while (left > 0) {
    int status;
    pid_t w = waitpid(-1, &status, WNOHANG);
    if (w > 0) {
      left--;
      if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) failed++;
      continue;
    }
    if ((double)time(NULL) > deadline) {
      fprintf(stderr, "nccl_test: ranks did not finish in 240 s: killing them\n");
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

int main(int argc, char **argv) {
  if (argc >= 6 && strcmp(argv[1], "--child") == 0) {
    rank_ctx c;
    memset(&c, 0, sizeof c);
    c.rank = atoi(argv[2]);
    c.nranks = atoi(argv[3]);
    g_iters = atoi(argv[5]);
    if (c.rank == 0) {
      MUST(tpg_comm_id_create(&c.id));
      MUST(tpg_comm_id_write_file(&c.id, argv[4]));
    } else {
      MUST(tpg_comm_id_read_file(argv[4], 60000, &c.id));
    }
    rank_body(&c);
    printf("rank %d (pid %ld): %d passed, %d failed\n", c.rank, (long)getpid(), c.pass, c.fail);
    return c.fail ? 1 : 0;
  }
  int nranks = -1;
  const char *modes = "proc,thread,net";
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--ranks") && i + 1 < argc) nranks = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--modes") && i + 1 < argc) modes = argv[++i];
    else if (!strcmp(argv[i], "--iters") && i + 1 < argc) g_iters = atoi(argv[++i]);
  }
  tpg_runtime_info ri;
  MUST(tpg_runtime_query(&ri));
  if (ri.device_count < 1) {
    fprintf(stderr, "nccl_test: no GPU (%s)\n", ri.driver_error);
    return 1;
  }
  if (nranks < 1) nranks = ri.device_count > 8 ? 8 : ri.device_count;
  printf("nccl_test: %d rank%s, NCCL %d, modes %s\n", nranks, nranks == 1 ? "" : "s", ri.nccl_version, modes);
  fflush(stdout);
  int pass = 0, fail = 0;
  char self[4096];
  ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
  if (len <= 0) return 1;
  self[len] = '\0';
  if (strstr(modes, "proc")) {
    int f = run_processes(self, nranks, 0);
    printf("process per GPU: %s\n", f ? "FAILED" : "ok");
    f ? fail++ : pass++;
  }
  if (strstr(modes, "thread")) {
    rank_ctx ctx[8];
    pthread_t th[8];
    tpg_comm_id id;
    MUST(tpg_comm_id_create(&id));
    for (int r = 0; r < nranks; r++) {
      memset(&ctx[r], 0, sizeof ctx[r]);
      ctx[r].rank = r;
      ctx[r].nranks = nranks;
      ctx[r].id = id;
      pthread_create(&th[r], NULL, thread_main, &ctx[r]);
    }
    int f = 0;
    for (int r = 0; r < nranks; r++) {
      pthread_join(th[r], NULL);
      f += ctx[r].fail;
    }
    printf("thread per GPU: %s\n", f ? "FAILED" : "ok");
    f ? fail++ : pass++;
  }
  if (strstr(modes, "net")) {
    int f = run_processes(self, nranks, 1);
    printf("process per GPU, NCCL network transport (P2P and SHM off): %s\n", f ? "FAILED" : "ok");
    f ? fail++ : pass++;
  }
  printf("%d passed, %d failed\n", pass, fail);
  return fail ? 1 : 0;
}
