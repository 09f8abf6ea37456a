/* allreduce_test.c - the one-shot all-reduce kernel node under replay.
 *
 * Each rank's graph: x += 1 (axpby), then all-reduce x -> out (forced
 * TPG_ALGO_ONESHOT), f32 so sums stay exact. After every replay a small
 * kernel on the same stream counts elements of `out` that differ from the
 * expected sum, on the device; the host reads the count once at the end.
 * 100,000 replays with changing inputs; every 997th replay rank 1 is held
 * back by a spin kernel first (a slow rank). Then NCCL and one-shot graphs
 * give the same results for bf16 at odd sizes, and rebinding the all-reduce's
 * slots costs no NCCL capture. Then one-shot all-reduces of three different
 * sizes chained in one graph, replayed with drifting ranks.
 *
 *   allreduce_test [--iters 100000] [--modes proc,thread]
 */
#include "tests/gpu/ranks.h"

void tpgt_count_mismatch(const float *out, unsigned long long n, float expected, unsigned *bad, cudaStream_t s);
void tpgt_spin(long long cycles, cudaStream_t s);

static tpg_view V(tpg_slot s) {
  tpg_view v = {s, 0, 0};
  return v;
}

static void replay_test(tpg_rank *c, tpg_comm *comm) {
  const size_t n = 4099; /* odd: exercises the tail */
  tpg_plan *p;
  tpg_slot sx, sone, sout;
  MUST(tpg_plan_create(&p));
  MUST(tpg_plan_add_slot(p, "x", TPG_F32, TPG_MEM_DEVICE, n, &sx));
  MUST(tpg_plan_add_slot(p, "ones", TPG_F32, TPG_MEM_DEVICE, n, &sone));
  MUST(tpg_plan_add_slot(p, "out", TPG_F32, TPG_MEM_DEVICE, n, &sout));
  tpg_node inc, ar;
  MUST(tpg_plan_add_axpby(p, V(sx), V(sone), n, 1.0f, 1.0f, NULL, 0, &inc));
  tpg_collective_desc cd = TPG_COLLECTIVE_DESC_INIT;
  cd.send = V(sx); cd.recv = V(sout); cd.count = n; cd.algo = TPG_ALGO_ONESHOT;
  MUST(tpg_plan_add_collective(p, &cd, &inc, 1, &ar));
  float *h = malloc(n * 4);
  void *dx, *dones, *dout;
  unsigned *bad;
  CUDA_OK(cudaMalloc(&dx, n * 4));
  CUDA_OK(cudaMalloc(&dones, n * 4));
  CUDA_OK(cudaMalloc(&dout, n * 4));
  CUDA_OK(cudaMalloc((void **)&bad, 4));
  CUDA_OK(cudaMemset(bad, 0, 4));
  for (size_t i = 0; i < n; i++) h[i] = (float)c->rank;
  CUDA_OK(cudaMemcpy(dx, h, n * 4, cudaMemcpyHostToDevice));
  for (size_t i = 0; i < n; i++) h[i] = 1.0f;
  CUDA_OK(cudaMemcpy(dones, h, n * 4, cudaMemcpyHostToDevice));
  tpg_binding b[3] = {{sx, dx}, {sone, dones}, {sout, dout}};
  tpg_graph_config cfg = TPG_GRAPH_CONFIG_INIT;
  cfg.device = c->rank; cfg.comm = comm; cfg.bindings = b; cfg.nbindings = 3;
  tpg_graph *g;
  tpg_status st = tpg_graph_create(p, &cfg, &g);
  RCHECK(c, st == TPG_SUCCESS, "create: %s", tpg_last_error());
  if (st != TPG_SUCCESS) return;
  tpg_graph_info info;
  MUST(tpg_graph_info_get(g, &info));
  RCHECK(c, info.kernel_nodes == 2 && info.child_nodes == 0, "one-shot is a kernel node (%d kernel, %d child)",
         info.kernel_nodes, info.child_nodes);
  cudaStream_t s;
  CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  /* sum over ranks of (rank + it) = R(R-1)/2 + R*it, exact in f32 */
  const int R = c->nranks;
  int iters = c->iters;
  for (int it = 1; it <= iters; it++) {
    if (c->rank == 1 && it % 997 == 0) tpgt_spin(2000000, s); /* ~1 ms late */
    if (tpg_graph_launch(g, (tpg_stream)s) != TPG_SUCCESS) {
      RCHECK(c, 0, "launch %d: %s", it, tpg_last_error());
      break;
    }
    tpgt_count_mismatch(dout, n, (float)(R * (R - 1) / 2) + (float)R * (float)it, bad, s);
    if (it % 10000 == 0 && tpg_comm_wait(comm, (tpg_stream)s) != TPG_SUCCESS) {
      RCHECK(c, 0, "wait at %d: %s", it, tpg_last_error());
      break;
    }
  }
  RCHECK(c, tpg_comm_wait(comm, (tpg_stream)s) == TPG_SUCCESS, "wait: %s", tpg_last_error());
  unsigned nbad = 0;
  CUDA_OK(cudaMemcpy(&nbad, bad, 4, cudaMemcpyDeviceToHost));
  RCHECK(c, nbad == 0, "%u wrong elements over %d replays", nbad, iters);
  if (c->rank == 0)
    printf("one-shot all-reduce: %d replays, inputs changing, rank 1 late every 997th: %u wrong elements\n", iters,
           nbad);
  /* Rebinding the all-reduce's output: a kernel-node update, no capture. */
  void *dout2;
  CUDA_OK(cudaMalloc(&dout2, n * 4));
  tpg_binding nb = {sout, dout2};
  RCHECK(c, tpg_graph_rebind(g, &nb, 1) == TPG_SUCCESS, "rebind: %s", tpg_last_error());
  CUDA_OK(cudaMemset(bad, 0, 4));
  MUST(tpg_graph_launch(g, (tpg_stream)s));
  tpgt_count_mismatch(dout2, n, (float)(R * (R - 1) / 2) + (float)R * (float)(iters + 1), bad, s);
  RCHECK(c, tpg_comm_wait(comm, (tpg_stream)s) == TPG_SUCCESS, "wait: %s", tpg_last_error());
  CUDA_OK(cudaMemcpy(&nbad, bad, 4, cudaMemcpyDeviceToHost));
  RCHECK(c, nbad == 0, "after rebind: %u wrong", nbad);
  MUST(tpg_graph_destroy(g));
  tpg_plan_destroy(p);
  cudaFree(dx); cudaFree(dones); cudaFree(dout); cudaFree(dout2); cudaFree(bad);
  cudaStreamDestroy(s);
  free(h);
}

/* Two chained one-shot all-reduces of different sizes (push 1 KiB, then
 * pull 2 MiB, then push 64 KiB) in one graph, replayed with changing inputs:
 * a rank that runs one node ahead must not overwrite what a slower peer has
 * not read (each block index advances once per all-reduce). Rank 1 is held
 * back every 7th replay so the ranks drift. */
static void mixed_sizes_test(tpg_rank *c, tpg_comm *comm) {
  static const size_t n[3] = {256, 524288, 16384}; /* f32 elements */
  tpg_plan *p;
  tpg_slot sx[3], so[3], sone;
  MUST(tpg_plan_create(&p));
  MUST(tpg_plan_add_slot(p, "ones", TPG_F32, TPG_MEM_DEVICE, n[1], &sone));
  tpg_node prev = 0;
  for (int k = 0; k < 3; k++) {
    char nm[16];
    snprintf(nm, sizeof nm, "x%d", k);
    MUST(tpg_plan_add_slot(p, nm, TPG_F32, TPG_MEM_DEVICE, n[k], &sx[k]));
    snprintf(nm, sizeof nm, "o%d", k);
    MUST(tpg_plan_add_slot(p, nm, TPG_F32, TPG_MEM_DEVICE, n[k], &so[k]));
    tpg_node inc;
    MUST(tpg_plan_add_axpby(p, V(sx[k]), V(sone), n[k], 1.0f, 1.0f, k ? &prev : NULL, k ? 1 : 0, &inc));
    tpg_collective_desc cd = TPG_COLLECTIVE_DESC_INIT;
    cd.send = V(sx[k]); cd.recv = V(so[k]); cd.count = n[k]; cd.algo = TPG_ALGO_ONESHOT;
    MUST(tpg_plan_add_collective(p, &cd, &inc, 1, &prev));
  }
  void *dx[3], *dout[3], *dones;
  unsigned *bad;
  float *h = malloc(n[1] * 4);
  CUDA_OK(cudaMalloc(&dones, n[1] * 4));
  for (size_t i = 0; i < n[1]; i++) h[i] = 1.0f;
  CUDA_OK(cudaMemcpy(dones, h, n[1] * 4, cudaMemcpyHostToDevice));
  for (size_t i = 0; i < n[1]; i++) h[i] = (float)c->rank;
  tpg_binding b[7];
  b[0] = (tpg_binding){sone, dones};
  for (int k = 0; k < 3; k++) {
    CUDA_OK(cudaMalloc(&dx[k], n[k] * 4));
    CUDA_OK(cudaMalloc(&dout[k], n[k] * 4));
    CUDA_OK(cudaMemcpy(dx[k], h, n[k] * 4, cudaMemcpyHostToDevice));
    b[1 + 2 * k] = (tpg_binding){sx[k], dx[k]};
    b[2 + 2 * k] = (tpg_binding){so[k], dout[k]};
  }
  CUDA_OK(cudaMalloc((void **)&bad, 4));
  CUDA_OK(cudaMemset(bad, 0, 4));
  tpg_graph_config cfg = TPG_GRAPH_CONFIG_INIT;
  cfg.device = c->rank; cfg.comm = comm; cfg.bindings = b; cfg.nbindings = 7;
  tpg_graph *g;
  tpg_status st = tpg_graph_create(p, &cfg, &g);
  RCHECK(c, st == TPG_SUCCESS, "mixed sizes: create: %s", tpg_last_error());
  if (st == TPG_SUCCESS) {
    cudaStream_t s;
    CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    const int R = c->nranks, iters = c->iters < 2000 ? c->iters : 2000;
    for (int it = 1; it <= iters; it++) {
      if (c->rank == 1 && it % 7 == 0) tpgt_spin(200000, s);
      MUST(tpg_graph_launch(g, (tpg_stream)s));
      for (int k = 0; k < 3; k++)
        tpgt_count_mismatch(dout[k], n[k], (float)(R * (R - 1) / 2) + (float)R * (float)it, bad, s);
    }
    RCHECK(c, tpg_comm_wait(comm, (tpg_stream)s) == TPG_SUCCESS, "mixed sizes: wait: %s", tpg_last_error());
    unsigned nbad = 0;
    CUDA_OK(cudaMemcpy(&nbad, bad, 4, cudaMemcpyDeviceToHost));
    RCHECK(c, nbad == 0, "mixed sizes: %u wrong elements over %d replays", nbad, iters);
    if (c->rank == 0) printf("one-shot all-reduces of 1 KiB, 2 MiB and 64 KiB chained: %d replays, %u wrong\n", iters, nbad);
    MUST(tpg_graph_destroy(g));
    cudaStreamDestroy(s);
  }
  tpg_plan_destroy(p);
  for (int k = 0; k < 3; k++) { cudaFree(dx[k]); cudaFree(dout[k]); }
  cudaFree(dones);
  cudaFree(bad);
  free(h);
}

/* bf16, several sizes: one-shot and NCCL agree with the CPU sum. */
static void algo_test(tpg_rank *c, tpg_comm *comm) {
  static const size_t sizes[] = {1, 7, 8, 513, 8192, 65536 + 3, 1 << 20, (2 << 20) - 8};
  for (int algo = TPG_ALGO_NCCL; algo <= TPG_ALGO_ONESHOT; algo++)
    for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
      size_t n = sizes[si];
      float *f = malloc(n * 4), *back = malloc(n * 4), *out = malloc(n * 4);
      double *ref = calloc(n, sizeof *ref);
      for (int r = 0; r < c->nranks; r++) {
        for (size_t i = 0; i < n; i++) f[i] = rnd((uint64_t)(77 + r + 10 * si), i);
        free(pack(TPG_BF16, f, n, back));
        for (size_t i = 0; i < n; i++) ref[i] += back[i];
      }
      for (size_t i = 0; i < n; i++) f[i] = rnd((uint64_t)(77 + c->rank + 10 * si), i);
      void *hb = pack(TPG_BF16, f, n, NULL), *d, *o;
      size_t bytes = (n * 2 + 15) & ~(size_t)15;
      CUDA_OK(cudaMalloc(&d, bytes));
      CUDA_OK(cudaMalloc(&o, bytes));
      CUDA_OK(cudaMemcpy(d, hb, n * 2, cudaMemcpyHostToDevice));
      poison(o, bytes);
      tpg_plan *p;
      tpg_slot sd, so;
      MUST(tpg_plan_create(&p));
      MUST(tpg_plan_add_slot(p, "d", TPG_BF16, TPG_MEM_DEVICE, n, &sd));
      MUST(tpg_plan_add_slot(p, "o", TPG_BF16, TPG_MEM_DEVICE, n, &so));
      tpg_collective_desc cd = TPG_COLLECTIVE_DESC_INIT;
      cd.send = V(sd); cd.recv = V(so); cd.count = n; cd.algo = (tpg_collective_algo)algo;
      MUST(tpg_plan_add_collective(p, &cd, NULL, 0, NULL));
      tpg_binding b[2] = {{sd, d}, {so, o}};
      tpg_graph_config cfg = TPG_GRAPH_CONFIG_INIT;
      cfg.device = c->rank; cfg.comm = comm; cfg.bindings = b; cfg.nbindings = 2;
      tpg_graph *g;
      tpg_status st = tpg_graph_create(p, &cfg, &g);
      RCHECK(c, st == TPG_SUCCESS, "create algo %d n %zu: %s", algo, n, tpg_last_error());
      if (st == TPG_SUCCESS) {
        MUST(tpg_graph_launch(g, NULL));
        RCHECK(c, tpg_comm_wait(comm, NULL) == TPG_SUCCESS, "wait: %s", tpg_last_error());
        CUDA_OK(cudaMemcpy(hb, o, n * 2, cudaMemcpyDeviceToHost));
        unpack(TPG_BF16, hb, n, out);
        double e = rel_err(out, ref, n);
        RCHECK(c, e <= 1e-2, "algo %d n %zu: rel err %.2e", algo, n, e);
        if (c->rank == 0 && (si == 0 || si == 7))
          printf("bf16 all-reduce %s n=%zu: rel err %.2e (tol 1e-2)\n", algo == TPG_ALGO_NCCL ? "nccl   " : "oneshot", n, e);
        MUST(tpg_graph_destroy(g));
      }
      tpg_plan_destroy(p);
      cudaFree(d); cudaFree(o);
      free(hb); free(f); free(back); free(out); free(ref);
    }
}

static void rank_body(tpg_rank *c) {
  tpg_comm *comm = tpg_rank_comm(c);
  if (!comm) return;
  if (c->nranks >= 2) {
    replay_test(c, comm);
    mixed_sizes_test(c, comm);
    algo_test(c, comm);
  } else {
    /* One rank: ONESHOT has nothing to do and says so. */
    tpg_plan *p;
    tpg_slot s;
    MUST(tpg_plan_create(&p));
    MUST(tpg_plan_add_slot(p, "d", TPG_F32, TPG_MEM_DEVICE, 64, &s));
    tpg_collective_desc cd = TPG_COLLECTIVE_DESC_INIT;
    cd.send = V(s); cd.recv = V(s); cd.count = 64; cd.algo = TPG_ALGO_ONESHOT;
    MUST(tpg_plan_add_collective(p, &cd, NULL, 0, NULL));
    void *d;
    CUDA_OK(cudaMalloc(&d, 256));
    tpg_binding b = {s, d};
    tpg_graph_config cfg = TPG_GRAPH_CONFIG_INIT;
    cfg.device = 0; cfg.comm = comm; cfg.bindings = &b; cfg.nbindings = 1;
    tpg_graph *g;
    RCHECK(c, tpg_graph_create(p, &cfg, &g) == TPG_ERROR_INVALID_ARGUMENT && strstr(tpg_last_error(), "single rank"),
           "one rank + ONESHOT: %s", tpg_last_error());
    tpg_plan_destroy(p);
    cudaFree(d);
  }
  RCHECK(c, tpg_comm_destroy(comm) == TPG_SUCCESS, "comm destroy: %s", tpg_last_error());
}

int main(int argc, char **argv) { return tpg_ranks_main(argc, argv, rank_body, 100000); }
