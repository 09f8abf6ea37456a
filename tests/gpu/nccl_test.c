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
 * killed if the run passes its deadline (tests/gpu/ranks.h).
 *
 *   nccl_test [--ranks N] [--modes proc,thread,net] [--iters 1000]
 */
#include "tests/gpu/ranks.h"

static int g_iters = 1000;

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

/* Fill set `set`'s inputs on this rank. kin = -send: the graph computes
 * send = -kin with an axpby node first (negation is exact in every dtype). */
static void fill_inputs(tpg_rank *c, coll_bufs *b, int t, int set) {
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
static int check_outputs(tpg_rank *c, coll_bufs *b, int t, int set, const char *what) {
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

static void run_dtype(tpg_rank *c, tpg_comm *comm, tpg_dtype dt, int t, int do_iters, tpg_collective_algo algo) {
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
  cd.kind = TPG_ALL_REDUCE; cd.send = V(b.s_send, 0); cd.recv = V(b.s_ar, 0); cd.count = b.count; cd.algo = algo;
  MUST(tpg_plan_add_collective(p, &cd, &k, 1, &ar));
  cd.kind = TPG_ALL_GATHER; cd.recv = V(b.s_ag, 0); cd.algo = TPG_ALGO_AUTO;
  MUST(tpg_plan_add_collective(p, &cd, &k, 1, &ag));
  cd.kind = TPG_REDUCE_SCATTER; cd.recv = V(b.s_rs, 0);
  MUST(tpg_plan_add_collective(p, &cd, &k, 1, &rs));

  int dev;
  MUST(tpg_comm_get_info(comm, NULL, NULL, &dev));
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

static void rank_body(tpg_rank *c) {
  g_iters = c->iters;
  tpg_comm *comm = tpg_rank_comm(c);
  if (!comm) return;
  /* f32 all-reduce through NCCL, bf16 and f16 as AUTO picks (one-shot on one machine) */
  run_dtype(c, comm, TPG_F32, 0, 1, TPG_ALGO_NCCL);
  run_dtype(c, comm, TPG_BF16, 1, 1, TPG_ALGO_AUTO);
  run_dtype(c, comm, TPG_F16, 2, 0, TPG_ALGO_AUTO);
  tpg_status st = tpg_comm_destroy(comm);
  RCHECK(c, st == TPG_SUCCESS, "comm destroy: %s", tpg_last_error());
}

int main(int argc, char **argv) { return tpg_ranks_main(argc, argv, rank_body, 1000); }
