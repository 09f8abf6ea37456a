/* allreduce_test.c - our all-reduce kernel nodes (one-shot push and pull,
 * two-shot) under replay, against NCCL and a CPU reference.
 *
 * Soak: each rank's graph is x += 1 (axpby), then all-reduce x -> out with a
 * forced algorithm, f32 so sums stay exact. After every replay a small
 * kernel on the same stream counts elements of `out` that differ from the
 * expected sum, on the device; the host reads the count once at the end.
 * --iters replays (100,000) with changing inputs for one-shot and two-shot
 * at 4099 elements, fewer for two-shot at 1.5 MiB; every 997th replay rank 1
 * is held back by a spin kernel first (a slow rank). Rebinding the output
 * costs no NCCL capture. Then all-reduces of six sizes and four algorithms
 * chained in one graph on one comm, replayed with drifting ranks. Then every
 * algorithm (NCCL, ONESHOT, TWOSHOT, AUTO) against the CPU sum for f32, bf16
 * and f16 at odd sizes from 1 element to 8 MiB, output poisoned first.
 * Then the fused epilogue (+bias, +residual with the new residual written
 * out or updated in place, RMSNorm): every combination on every algorithm
 * against an fp64 CPU reference, in every graph mode, and after a rebind.
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

static const char *algo_name(int algo) {
  switch (algo) {
    case TPG_ALGO_AUTO: return "auto";
    case TPG_ALGO_NCCL: return "nccl";
    case TPG_ALGO_ONESHOT: return "oneshot";
    case TPG_ALGO_TWOSHOT: return "twoshot";
    default: return "?";
  }
}

/* push_max: the config's allreduce_push_max (0: the default). */
static void replay_test(tpg_rank *c, tpg_comm *comm, tpg_collective_algo algo, size_t n, int iters, size_t push_max) {
  tpg_plan *p;
  tpg_slot sx, sone, sout;
  MUST(tpg_plan_create(&p));
  MUST(tpg_plan_add_slot(p, "x", TPG_F32, TPG_MEM_DEVICE, n, &sx));
  MUST(tpg_plan_add_slot(p, "ones", TPG_F32, TPG_MEM_DEVICE, n, &sone));
  MUST(tpg_plan_add_slot(p, "out", TPG_F32, TPG_MEM_DEVICE, n, &sout));
  tpg_node inc, ar;
  MUST(tpg_plan_add_axpby(p, V(sx), V(sone), n, 1.0f, 1.0f, NULL, 0, &inc));
  tpg_collective_desc cd = TPG_COLLECTIVE_DESC_INIT;
  cd.send = V(sx); cd.recv = V(sout); cd.count = n; cd.algo = algo;
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
  cfg.allreduce_push_max = push_max;
  tpg_graph *g;
  tpg_status st = tpg_graph_create(p, &cfg, &g);
  RCHECK(c, st == TPG_SUCCESS, "%s n %zu: create: %s", algo_name(algo), n, tpg_last_error());
  if (st != TPG_SUCCESS) return;
  tpg_graph_info info;
  MUST(tpg_graph_get_info(g, &info, sizeof info));
  RCHECK(c, info.kernel_nodes == 2 && info.child_nodes == 0, "%s is a kernel node (%d kernel, %d child)",
         algo_name(algo), info.kernel_nodes, info.child_nodes);
  cudaStream_t s;
  CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  /* sum over ranks of (rank + it) = R(R-1)/2 + R*it, exact in f32 */
  const int R = c->nranks;
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
  RCHECK(c, nbad == 0, "%s n %zu: %u wrong elements over %d replays", algo_name(algo), n, nbad, iters);
  if (c->rank == 0)
    printf("%s all-reduce, %zu f32: %d replays, inputs changing, rank 1 late every 997th: %u wrong elements\n",
           algo_name(algo), n, iters, nbad);
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
  RCHECK(c, nbad == 0, "%s n %zu: after rebind: %u wrong", algo_name(algo), n, nbad);
  MUST(tpg_graph_destroy(g));
  tpg_plan_destroy(p);
  cudaFree(dx); cudaFree(dones); cudaFree(dout); cudaFree(dout2); cudaFree(bad);
  cudaStreamDestroy(s);
  free(h);
}

/* All-reduces of six sizes and four algorithms chained in one graph on one
 * comm, replayed with changing inputs: small push 1 KiB, two-shot 2 MiB,
 * small push 64 KiB, two-shot of 7 elements (padding only, mostly), push
 * 2 MiB, NCCL 256 KiB. A rank that runs one node ahead must not overwrite what a slower
 * peer has not read (each block index advances once per all-reduce of each
 * kernel; each kernel has its own areas). Rank 1 is held back every 7th
 * replay so the ranks drift. */
static void mixed_sizes_test(tpg_rank *c, tpg_comm *comm) {
  enum { K = 6 };
  static const size_t n[K] = {256, 524288, 16384, 7, 524288, 65536}; /* f32 elements */
  static const tpg_collective_algo al[K] = {TPG_ALGO_ONESHOT, TPG_ALGO_TWOSHOT, TPG_ALGO_ONESHOT,
                                            TPG_ALGO_TWOSHOT, TPG_ALGO_ONESHOT, TPG_ALGO_NCCL};
  const size_t nmax = 524288;
  tpg_plan *p;
  tpg_slot sx[K], so[K], sone;
  MUST(tpg_plan_create(&p));
  MUST(tpg_plan_add_slot(p, "ones", TPG_F32, TPG_MEM_DEVICE, nmax, &sone));
  tpg_node prev = 0;
  for (int k = 0; k < K; k++) {
    char nm[16];
    snprintf(nm, sizeof nm, "x%d", k);
    MUST(tpg_plan_add_slot(p, nm, TPG_F32, TPG_MEM_DEVICE, n[k], &sx[k]));
    snprintf(nm, sizeof nm, "o%d", k);
    MUST(tpg_plan_add_slot(p, nm, TPG_F32, TPG_MEM_DEVICE, n[k], &so[k]));
    tpg_node inc;
    MUST(tpg_plan_add_axpby(p, V(sx[k]), V(sone), n[k], 1.0f, 1.0f, k ? &prev : NULL, k ? 1 : 0, &inc));
    tpg_collective_desc cd = TPG_COLLECTIVE_DESC_INIT;
    cd.send = V(sx[k]); cd.recv = V(so[k]); cd.count = n[k]; cd.algo = al[k];
    MUST(tpg_plan_add_collective(p, &cd, &inc, 1, &prev));
  }
  void *dx[K], *dout[K], *dones;
  unsigned *bad;
  float *h = malloc(nmax * 4);
  CUDA_OK(cudaMalloc(&dones, nmax * 4));
  for (size_t i = 0; i < nmax; i++) h[i] = 1.0f;
  CUDA_OK(cudaMemcpy(dones, h, nmax * 4, cudaMemcpyHostToDevice));
  for (size_t i = 0; i < nmax; i++) h[i] = (float)c->rank;
  tpg_binding b[1 + 2 * K];
  b[0] = (tpg_binding){sone, dones};
  for (int k = 0; k < K; k++) {
    CUDA_OK(cudaMalloc(&dx[k], n[k] * 4));
    CUDA_OK(cudaMalloc(&dout[k], n[k] * 4));
    CUDA_OK(cudaMemcpy(dx[k], h, n[k] * 4, cudaMemcpyHostToDevice));
    b[1 + 2 * k] = (tpg_binding){sx[k], dx[k]};
    b[2 + 2 * k] = (tpg_binding){so[k], dout[k]};
  }
  CUDA_OK(cudaMalloc((void **)&bad, 4));
  CUDA_OK(cudaMemset(bad, 0, 4));
  tpg_graph_config cfg = TPG_GRAPH_CONFIG_INIT;
  cfg.device = c->rank; cfg.comm = comm; cfg.bindings = b; cfg.nbindings = 1 + 2 * K;
  tpg_graph *g;
  tpg_status st = tpg_graph_create(p, &cfg, &g);
  RCHECK(c, st == TPG_SUCCESS, "mixed sizes: create: %s", tpg_last_error());
  if (st == TPG_SUCCESS) {
    tpg_graph_info info;
    MUST(tpg_graph_get_info(g, &info, sizeof info));
    RCHECK(c, info.kernel_nodes == 2 * K - 1 && info.child_nodes == 1, "mixed: %d kernel nodes, %d child (want %d, 1)",
           info.kernel_nodes, info.child_nodes, 2 * K - 1);
    cudaStream_t s;
    CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    const int R = c->nranks, iters = c->iters < 2000 ? c->iters : 2000;
    for (int it = 1; it <= iters; it++) {
      if (c->rank == 1 && it % 7 == 0) tpgt_spin(200000, s);
      MUST(tpg_graph_launch(g, (tpg_stream)s));
      for (int k = 0; k < K; k++)
        tpgt_count_mismatch(dout[k], n[k], (float)(R * (R - 1) / 2) + (float)R * (float)it, bad, s);
    }
    RCHECK(c, tpg_comm_wait(comm, (tpg_stream)s) == TPG_SUCCESS, "mixed sizes: wait: %s", tpg_last_error());
    unsigned nbad = 0;
    CUDA_OK(cudaMemcpy(&nbad, bad, 4, cudaMemcpyDeviceToHost));
    RCHECK(c, nbad == 0, "mixed sizes: %u wrong elements over %d replays", nbad, iters);
    if (c->rank == 0)
      printf("small push 1 KiB, two-shot 2 MiB, small push 64 KiB, two-shot 28 B, push 2 MiB, NCCL 256 KiB chained: "
             "%d replays, "
             "%u wrong\n", iters, nbad);
    MUST(tpg_graph_destroy(g));
    CUDA_OK(cudaStreamDestroy(s));
  }
  tpg_plan_destroy(p);
  for (int k = 0; k < K; k++) { cudaFree(dx[k]); cudaFree(dout[k]); }
  cudaFree(dones);
  cudaFree(bad);
  free(h);
}

/* Every algorithm and dtype at odd sizes agrees with the CPU sum (fp64 of
 * the rounded inputs); output poisoned (NaN) first, so an unwritten element
 * fails. Sizes an algorithm cannot serve (one-shot above 4 MiB) are skipped. */
static void algo_test(tpg_rank *c, tpg_comm *comm) {
  static const size_t sizes[] = {1, 7, 8, 513, 8192, 65536 + 3, 1 << 20, (2 << 20) - 8, (4 << 20) - 5};
  static const tpg_dtype dts[] = {TPG_F32, TPG_BF16, TPG_F16};
  static const int algos[] = {TPG_ALGO_NCCL, TPG_ALGO_ONESHOT, TPG_ALGO_TWOSHOT, TPG_ALGO_AUTO};
  for (int di = 0; di < 3; di++)
    for (int ai = 0; ai < 4; ai++)
      for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
        const tpg_dtype dt = dts[di];
        const int algo = algos[ai];
        const size_t n = sizes[si], es = tpg_dtype_size(dt);
        if (algo == TPG_ALGO_ONESHOT && n * es > ((size_t)4 << 20)) continue;
        if (algo == TPG_ALGO_TWOSHOT && n * es > ((size_t)8 << 20)) continue;
        float *f = malloc(n * 4), *back = malloc(n * 4), *out = malloc(n * 4);
        double *ref = calloc(n, sizeof *ref);
        for (int r = 0; r < c->nranks; r++) {
          for (size_t i = 0; i < n; i++) f[i] = rnd((uint64_t)(77 + r + 10 * si + 1000 * di), i);
          free(pack(dt, f, n, back));
          for (size_t i = 0; i < n; i++) ref[i] += back[i];
        }
        for (size_t i = 0; i < n; i++) f[i] = rnd((uint64_t)(77 + c->rank + 10 * si + 1000 * di), i);
        void *hb = pack(dt, f, n, NULL), *d, *o;
        size_t bytes = (n * es + 15) & ~(size_t)15;
        CUDA_OK(cudaMalloc(&d, bytes));
        CUDA_OK(cudaMalloc(&o, bytes));
        CUDA_OK(cudaMemcpy(d, hb, n * es, cudaMemcpyHostToDevice));
        poison(o, bytes);
        tpg_plan *p;
        tpg_slot sd, so;
        MUST(tpg_plan_create(&p));
        MUST(tpg_plan_add_slot(p, "d", dt, TPG_MEM_DEVICE, n, &sd));
        MUST(tpg_plan_add_slot(p, "o", dt, TPG_MEM_DEVICE, n, &so));
        tpg_collective_desc cd = TPG_COLLECTIVE_DESC_INIT;
        cd.send = V(sd); cd.recv = V(so); cd.count = n; cd.algo = (tpg_collective_algo)algo;
        MUST(tpg_plan_add_collective(p, &cd, NULL, 0, NULL));
        tpg_binding b[2] = {{sd, d}, {so, o}};
        tpg_graph_config cfg = TPG_GRAPH_CONFIG_INIT;
        cfg.device = c->rank; cfg.comm = comm; cfg.bindings = b; cfg.nbindings = 2;
        tpg_graph *g;
        tpg_status st = tpg_graph_create(p, &cfg, &g);
        RCHECK(c, st == TPG_SUCCESS, "create %s dtype %d n %zu: %s", algo_name(algo), (int)dt, n, tpg_last_error());
        if (st == TPG_SUCCESS) {
          /* Twice: the second launch runs on the other parity's buffers. */
          for (int rep = 0; rep < 2; rep++) {
            poison(o, bytes);
            MUST(tpg_graph_launch(g, NULL));
            RCHECK(c, tpg_comm_wait(comm, NULL) == TPG_SUCCESS, "wait: %s", tpg_last_error());
            CUDA_OK(cudaMemcpy(hb, o, n * es, cudaMemcpyDeviceToHost));
            unpack(dt, hb, n, out);
            double e = rel_err(out, ref, n);
            RCHECK(c, e <= tol_for(dt), "%s dtype %d n %zu launch %d: rel err %.2e (tol %.0e)", algo_name(algo),
                   (int)dt, n, rep, e, tol_for(dt));
            if (c->rank == 0 && rep == 1 && (si == 0 || si == 7))
              printf("%s all-reduce %-7s n=%zu: rel err %.2e (tol %.0e)\n", dt == TPG_F32 ? "f32 " : dt == TPG_BF16 ? "bf16" : "f16 ",
                     algo_name(algo), n, e, tol_for(dt));
          }
          MUST(tpg_graph_destroy(g));
        }
        tpg_plan_destroy(p);
        CUDA_OK(cudaFree(d)); CUDA_OK(cudaFree(o));
        free(hb); free(f); free(back); free(out); free(ref);
      }
}

/* ---- the fused epilogue ------------------------------------------------ */

/* Rounds to dt and back (the host's view of a dt value). */
static float round_dt(tpg_dtype dt, float v) {
  float back;
  free(pack(dt, &v, 1, &back));
  return back;
}

static void *dev_from(tpg_dtype dt, const float *f, size_t n) {
  void *hb = pack(dt, f, n, NULL), *d;
  CUDA_OK(cudaMalloc(&d, (n * tpg_dtype_size(dt) + 15) & ~(size_t)15));
  CUDA_OK(cudaMemcpy(d, hb, n * tpg_dtype_size(dt), cudaMemcpyHostToDevice));
  free(hb);
  return d;
}

static double check_dev(tpg_dtype dt, const void *d, const double *ref, size_t n) {
  size_t es = tpg_dtype_size(dt);
  void *hb = malloc(n * es);
  float *out = malloc(n * sizeof *out);
  CUDA_OK(cudaMemcpy(hb, d, n * es, cudaMemcpyDeviceToHost));
  unpack(dt, hb, n, out);
  double e = rel_err(out, ref, n);
  free(hb);
  free(out);
  return e;
}

/* The header's formula in fp64, h rounded to dt: href = h, yref = recv. */
static void epi_ref(tpg_dtype dt, size_t rows, size_t H, const double *sum, const float *bias, const float *res,
                    const float *w, float eps, double *href, double *yref) {
  for (size_t i = 0; i < rows * H; i++)
    href[i] = round_dt(dt, (float)(sum[i] + (bias ? bias[i % H] : 0.0) + (res ? res[i] : 0.0)));
  for (size_t r = 0; r < rows; r++) {
    double sq = 0;
    for (size_t j = 0; j < H; j++) sq += href[r * H + j] * href[r * H + j];
    const double scale = 1.0 / sqrt(sq / (double)H + eps);
    for (size_t j = 0; j < H; j++) yref[r * H + j] = w ? href[r * H + j] * scale * w[j] : href[r * H + j];
  }
}

/* Residual modes: none; residual -> separate residual_out; residual updated in
 * place (residual_out = residual); residual read only; residual_out only. */
enum { RES_NONE, RES_OUT, RES_INPLACE, RES_READ, RES_OUTONLY, RES_MODES };
static const char *const res_name[RES_MODES] = {"-", "res->out", "res inplace", "res", "out only"};

/* One all-reduce with an epilogue: every rank's send is random, bias, residual
 * and weight are the same on every rank; recv and residual_out are poisoned
 * before each of two launches (the residual restored), and both are checked
 * against the fp64 reference of the header's formula: h = round(sum + bias +
 * residual), residual_out = h, recv = norm ? round(h * rsqrt(mean(h^2) + eps)
 * * w) : h. With `rebind`, bias, residual_out and recv are then rebound to
 * new buffers (new bias values) and checked again. */
static void epi_case(tpg_rank *c, tpg_comm *comm, tpg_dtype dt, tpg_collective_algo algo, size_t rows, size_t H,
                     int bias, int resmode, int norm, tpg_graph_mode mode, int rebind) {
  const size_t N = rows * H, es = tpg_dtype_size(dt);
  const float eps = 1e-5f;
  const uint64_t seed = 1000 + rows * 7 + H + (uint64_t)dt * 100000;
  float *f = malloc(N * 4), *back = malloc(N * 4), *fb = malloc(H * 4), *fw = malloc(H * 4), *fr = malloc(N * 4);
  double *sum = calloc(N, sizeof *sum), *href = malloc(N * sizeof *href), *yref = malloc(N * sizeof *yref);
  for (int r = 0; r < c->nranks; r++) {
    for (size_t i = 0; i < N; i++) f[i] = rnd(seed + (uint64_t)r, i);
    free(pack(dt, f, N, back));
    for (size_t i = 0; i < N; i++) sum[i] += back[i];
  }
  for (size_t i = 0; i < H; i++) fb[i] = 0.5f * rnd(seed + 50, i);
  for (size_t i = 0; i < H; i++) fw[i] = 1.0f + 0.5f * rnd(seed + 51, i);
  for (size_t i = 0; i < N; i++) fr[i] = rnd(seed + 52, i);
  free(pack(dt, fb, H, fb));
  free(pack(dt, fw, H, fw));
  free(pack(dt, fr, N, fr));
  const int has_res = resmode == RES_OUT || resmode == RES_INPLACE || resmode == RES_READ;
  const int has_rout = resmode == RES_OUT || resmode == RES_INPLACE || resmode == RES_OUTONLY;
  epi_ref(dt, rows, H, sum, bias ? fb : NULL, has_res ? fr : NULL, norm ? fw : NULL, eps, href, yref);
  for (size_t i = 0; i < N; i++) f[i] = rnd(seed + (uint64_t)c->rank, i);
  void *dsend = dev_from(dt, f, N), *dbias = dev_from(dt, fb, H), *dw = dev_from(dt, fw, H), *dres = dev_from(dt, fr, N);
  void *drecv, *drout, *drecv2, *drout2, *dbias2 = NULL;
  size_t nb = (N * es + 15) & ~(size_t)15;
  CUDA_OK(cudaMalloc(&drecv, nb));
  CUDA_OK(cudaMalloc(&drout, nb));
  CUDA_OK(cudaMalloc(&drecv2, nb));
  CUDA_OK(cudaMalloc(&drout2, nb));
  tpg_plan *p;
  tpg_slot ss_, sr_, sb_, sw_, sres_, srout_;
  MUST(tpg_plan_create(&p));
  MUST(tpg_plan_add_slot(p, "send", dt, TPG_MEM_DEVICE, N, &ss_));
  MUST(tpg_plan_add_slot(p, "recv", dt, TPG_MEM_DEVICE, N, &sr_));
  MUST(tpg_plan_add_slot(p, "bias", dt, TPG_MEM_DEVICE, H, &sb_));
  MUST(tpg_plan_add_slot(p, "w", dt, TPG_MEM_DEVICE, H, &sw_));
  MUST(tpg_plan_add_slot(p, "res", dt, TPG_MEM_DEVICE, N, &sres_));
  MUST(tpg_plan_add_slot(p, "rout", dt, TPG_MEM_DEVICE, N, &srout_));
  tpg_collective_desc cd = TPG_COLLECTIVE_DESC_INIT;
  cd.send = V(ss_); cd.recv = V(sr_); cd.count = N; cd.algo = algo; cd.hidden = H; cd.norm_eps = eps;
  if (bias) cd.bias = V(sb_);
  if (has_res) cd.residual = V(sres_);
  if (resmode == RES_OUT || resmode == RES_OUTONLY) cd.residual_out = V(srout_);
  if (resmode == RES_INPLACE) cd.residual_out = V(sres_);
  if (norm) cd.norm_weight = V(sw_);
  char what[160];
  snprintf(what, sizeof what, "epilogue %s dtype %d %zux%zu bias %d %s norm %d mode %d", algo_name(algo), (int)dt, rows,
           H, bias, res_name[resmode], norm, (int)mode);
  tpg_status st = tpg_plan_add_collective(p, &cd, NULL, 0, NULL);
  RCHECK(c, st == TPG_SUCCESS, "%s: add: %s", what, tpg_last_error());
  tpg_binding b[6] = {{ss_, dsend}, {sr_, drecv}, {sb_, dbias}, {sw_, dw}, {sres_, dres}, {srout_, drout}};
  tpg_graph_config cfg = TPG_GRAPH_CONFIG_INIT;
  cfg.device = c->rank; cfg.comm = comm; cfg.bindings = b; cfg.nbindings = 6; cfg.mode = mode;
  tpg_graph *g = NULL;
  if (st == TPG_SUCCESS) {
    st = tpg_graph_create(p, &cfg, &g);
    RCHECK(c, st == TPG_SUCCESS, "%s: create: %s", what, tpg_last_error());
  }
  if (st == TPG_SUCCESS) {
    void *hres = pack(dt, fr, N, NULL);
    for (int pass = 0; pass < (rebind ? 2 : 1); pass++) {
      void *recv = pass ? drecv2 : drecv, *rout = pass ? drout2 : drout;
      if (pass == 1) {
        for (size_t i = 0; i < H; i++) fb[i] = round_dt(dt, 0.25f * rnd(seed + 53, i)); /* new bias values */
        dbias2 = dev_from(dt, fb, H);
        tpg_binding nbd[3] = {{sb_, dbias2}, {srout_, drout2}, {sr_, drecv2}};
        RCHECK(c, tpg_graph_rebind(g, nbd, 3) == TPG_SUCCESS, "%s: rebind: %s", what, tpg_last_error());
        epi_ref(dt, rows, H, sum, bias ? fb : NULL, has_res ? fr : NULL, norm ? fw : NULL, eps, href, yref);
      }
      for (int rep = 0; rep < 2; rep++) { /* twice: both parities of our kernels' buffers */
        CUDA_OK(cudaMemcpy(dres, hres, N * es, cudaMemcpyHostToDevice));
        poison(recv, nb);
        poison(rout, nb);
        CUDA_OK(cudaDeviceSynchronize());
        st = tpg_graph_launch(g, NULL);
        RCHECK(c, st == TPG_SUCCESS, "%s: launch: %s", what, tpg_last_error());
        RCHECK(c, tpg_comm_wait(comm, NULL) == TPG_SUCCESS, "%s: wait: %s", what, tpg_last_error());
        const double tol = tol_for(dt);
        double e = check_dev(dt, recv, yref, N);
        RCHECK(c, e <= tol, "%s pass %d launch %d: recv rel err %.2e (tol %.0e)", what, pass, rep, e, tol);
        if (has_rout) {
          double er = check_dev(dt, resmode == RES_INPLACE ? dres : rout, href, N);
          RCHECK(c, er <= tol, "%s pass %d launch %d: residual_out rel err %.2e (tol %.0e)", what, pass, rep, er, tol);
        }
        if (resmode == RES_READ || resmode == RES_OUT) {
          /* the residual is read only: unchanged */
          double *fr_d = malloc(N * sizeof *fr_d);
          for (size_t i = 0; i < N; i++) fr_d[i] = fr[i];
          double er = check_dev(dt, dres, fr_d, N);
          RCHECK(c, er == 0.0, "%s: residual changed (rel %.2e)", what, er);
          free(fr_d);
        }
        if (c->rank == 0 && rep == 1 && bias && norm && resmode == RES_INPLACE && mode == TPG_MODE_EXPLICIT)
          printf("%s: recv rel err %.2e (tol %.0e)\n", what, e, tol);
      }
    }
    free(hres);
    MUST(tpg_graph_destroy(g));
  }
  tpg_plan_destroy(p);
  CUDA_OK(cudaFree(dsend)); CUDA_OK(cudaFree(dbias)); CUDA_OK(cudaFree(dw)); CUDA_OK(cudaFree(dres));
  CUDA_OK(cudaFree(drecv)); CUDA_OK(cudaFree(drout)); CUDA_OK(cudaFree(drecv2)); CUDA_OK(cudaFree(drout2));
  if (dbias2) CUDA_OK(cudaFree(dbias2));
  free(f); free(back); free(fb); free(fw); free(fr); free(sum); free(href); free(yref);
}

/* Every epilogue combination on every algorithm against the CPU reference:
 * decode rows (1 x 8192), a few rows (5 x 4096), fewer rows than blocks with
 * short rows (33 x 1024, 7 x 24), more rows than blocks (300 x 2048: 1.2 MiB
 * of bf16, which AUTO gives to two-shot), rows longer than the standalone
 * epilogue kernel keeps in registers (2 x 16392: its two-pass path); bf16 on
 * all, f32 and f16 on two.
 * Then the full epilogue in eager and capture modes, and rebinding bias,
 * residual_out and recv (a kernel-node update, also after NCCL). */
static void epilogue_test(tpg_rank *c, tpg_comm *comm) {
  static const size_t shapes[6][2] = {{1, 8192}, {5, 4096}, {33, 1024}, {7, 24}, {300, 2048}, {2, 16392}};
  static const tpg_collective_algo algos[4] = {TPG_ALGO_NCCL, TPG_ALGO_ONESHOT, TPG_ALGO_TWOSHOT, TPG_ALGO_AUTO};
  static const tpg_dtype dts[3] = {TPG_BF16, TPG_F32, TPG_F16};
  int cases = 0;
  const int fail0 = c->fail;
  for (int di = 0; di < 3; di++)
    for (int si = 0; si < 6; si++) {
      if (di > 0 && si != 1 && si != 2) continue;
      for (int ai = 0; ai < 4; ai++)
        for (int bias = 0; bias < 2; bias++)
          for (int rm = 0; rm < RES_MODES; rm++)
            for (int norm = 0; norm < 2; norm++) {
              if (!bias && rm == RES_NONE && !norm) continue; /* no epilogue */
              epi_case(c, comm, dts[di], algos[ai], shapes[si][0], shapes[si][1], bias, rm, norm, TPG_MODE_EXPLICIT,
                       0);
              cases++;
            }
    }
  for (int ai = 0; ai < 4; ai++) {
    for (int mode = TPG_MODE_CAPTURE; mode <= TPG_MODE_EAGER; mode++, cases++)
      epi_case(c, comm, TPG_BF16, algos[ai], 5, 4096, 1, RES_INPLACE, 1, (tpg_graph_mode)mode, 0);
    epi_case(c, comm, TPG_BF16, algos[ai], 33, 1024, 1, RES_OUT, 1, TPG_MODE_EXPLICIT, 1);
    epi_case(c, comm, TPG_BF16, algos[ai], 1, 8192, 1, RES_OUT, 0, TPG_MODE_EXPLICIT, 1);
    cases += 2;
  }
  if (c->rank == 0) printf("all-reduce epilogue: %d cases, %d failed checks\n", cases, c->fail - fail0);
}

static void rank_body(tpg_rank *c) {
  tpg_comm *comm = tpg_rank_comm(c);
  if (!comm) return;
  if (c->nranks >= 2) {
    const int few = c->iters < 5000 ? c->iters : 5000;
    replay_test(c, comm, TPG_ALGO_ONESHOT, 4099, c->iters, 0); /* small push; odd: exercises the tail */
    replay_test(c, comm, TPG_ALGO_TWOSHOT, 4099, c->iters, 0);
    replay_test(c, comm, TPG_ALGO_TWOSHOT, 393219, few, 0);     /* 1.5 MiB */
    replay_test(c, comm, TPG_ALGO_ONESHOT, 131075, few, 0);     /* push, one round (512 KiB) */
    /* push in rounds: 6 MiB through 4 MiB receive halves (2 rounds at 2
     * ranks), replayed with drift: rounds of one launch and the next. */
    replay_test(c, comm, TPG_ALGO_ONESHOT, 1572867, few < 2000 ? few : 2000, (size_t)16 << 20);
    mixed_sizes_test(c, comm);
    algo_test(c, comm);
    epilogue_test(c, comm);
  } else {
    /* One rank (TP = 1): nothing to exchange, whatever the algorithm. An
     * in-place all-reduce without an epilogue is no CUDA node at all, and
     * every epilogue case (each algorithm, dtype, shape, mode, rebind) is
     * the epilogue kernel alone reading send: checked against the host as
     * at two ranks. */
    static const tpg_collective_algo algos[3] = {TPG_ALGO_ONESHOT, TPG_ALGO_TWOSHOT, TPG_ALGO_NCCL};
    void *d;
    CUDA_OK(cudaMalloc(&d, 256));
    for (int ai = 0; ai < 3; ai++) {
      tpg_plan *p;
      tpg_slot s;
      MUST(tpg_plan_create(&p));
      MUST(tpg_plan_add_slot(p, "d", TPG_F32, TPG_MEM_DEVICE, 64, &s));
      tpg_collective_desc cd = TPG_COLLECTIVE_DESC_INIT;
      cd.send = V(s); cd.recv = V(s); cd.count = 64; cd.algo = algos[ai];
      MUST(tpg_plan_add_collective(p, &cd, NULL, 0, NULL));
      tpg_binding b = {s, d};
      tpg_graph_config cfg = TPG_GRAPH_CONFIG_INIT;
      cfg.device = 0; cfg.comm = comm; cfg.bindings = &b; cfg.nbindings = 1;
      tpg_graph *g = NULL;
      tpg_graph_info info;
      memset(&info, 0xff, sizeof info);
      const tpg_status st = tpg_graph_create(p, &cfg, &g);
      if (st == TPG_SUCCESS) MUST(tpg_graph_get_info(g, &info, sizeof info));
      RCHECK(c, st == TPG_SUCCESS && info.nodes == 0 && info.collective_nodes == 0,
             "one rank, %s in place: %s (%d nodes, %d collective)", algo_name(algos[ai]),
             st == TPG_SUCCESS ? "created" : tpg_last_error(), info.nodes, info.collective_nodes);
      if (g) {
        RCHECK(c, tpg_graph_launch(g, NULL) == TPG_SUCCESS, "one rank launch: %s", tpg_last_error());
        CUDA_OK(cudaDeviceSynchronize());
        tpg_graph_destroy(g);
      }
      tpg_plan_destroy(p);
    }
    cudaFree(d);
    epilogue_test(c, comm);
  }
  RCHECK(c, tpg_comm_destroy(comm) == TPG_SUCCESS, "comm destroy: %s", tpg_last_error());
}

int main(int argc, char **argv) { return tpg_ranks_main(argc, argv, rank_body, 100000); }
