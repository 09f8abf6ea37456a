/* mlp_test.c - tensor-parallel MLP stacks (tpg_plan_mlp) against an fp64 CPU
 * reference of the unsplit model, on every visible GPU (TP = 1..8), in both
 * process modes and with NCCL's network transport (tests/gpu/ranks.h).
 *
 * For GeLU (Megatron, with biases) and SwiGLU (Llama, without), tokens 1, 17
 * and 300, every overlap strategy (none, chunked) and every graph mode
 * (explicit, stream-captured, eager): fresh random whole weights, split per
 * rank here the way an engine would; output poisoned before the launch;
 * relative norm error <= 1e-2 (bf16). Then rebinding x and y between
 * launches (the decode loop) with the old buffers poisoned.
 * Every explicit case runs a second time with TPG_GRAPH_PDL (programmatic
 * edges GEMV -> GEMV and all-reduce -> next GEMV): the same checks, plus 16
 * launches back to back, a whole-graph update, and the count of
 * programmatic edges (> 0 on sm_90+, 0 below, where the flag is ignored).
 */
#include "tests/gpu/ranks.h"

enum { L = 3, H = 256, FFN = 1024 };

typedef struct {
  tpg_mlp_kind kind;
  int M, n, rank;
  float *x;                 /* [M, H], rounded to bf16 */
  float *w1[L], *b1[L];     /* whole: [F1w, H] (SwiGLU: gate rows then up rows), [F1w] */
  float *w2[L], *b2[L];     /* whole: [H, FFN], [H] */
  double *ref;              /* [M, H] */
} model;

static void model_make(model *m, tpg_mlp_kind kind, int M, uint64_t seed) {
  memset(m, 0, sizeof *m);
  m->kind = kind;
  m->M = M;
  int sw = kind == TPG_MLP_SWIGLU, F1w = sw ? 2 * FFN : FFN;
  m->x = rnd_bf16(seed, (size_t)M * H, 1.0f);
  for (int l = 0; l < L; l++) {
    m->w1[l] = rnd_bf16(seed + 10 + l, (size_t)F1w * H, 1.0f / sqrtf((float)H));
    m->b1[l] = sw ? NULL : rnd_bf16(seed + 20 + l, (size_t)F1w, 0.1f);
    m->w2[l] = rnd_bf16(seed + 30 + l, (size_t)H * FFN, 1.0f / sqrtf((float)FFN));
    m->b2[l] = sw ? NULL : rnd_bf16(seed + 40 + l, (size_t)H, 0.1f);
  }
  /* fp64 reference of the unsplit model */
  double *x = malloc(sizeof(double) * (size_t)M * H), *h = malloc(sizeof(double) * FFN);
  for (size_t i = 0; i < (size_t)M * H; i++) x[i] = m->x[i];
  for (int l = 0; l < L; l++)
    for (int t = 0; t < M; t++) {
      double *xt = x + (size_t)t * H;
      for (int f = 0; f < FFN; f++) {
        double a = 0, u = 0;
        const float *wr = m->w1[l] + (size_t)f * H, *ur = m->w1[l] + (size_t)(FFN + f) * H;
        for (int k = 0; k < H; k++) a += xt[k] * wr[k];
        if (sw) {
          for (int k = 0; k < H; k++) u += xt[k] * ur[k];
          h[f] = a / (1.0 + exp(-a)) * u;
        } else {
          a += m->b1[l][f];
          h[f] = 0.5 * a * (1.0 + tanh(0.7978845608028654 * (a + 0.044715 * a * a * a)));
        }
      }
      double y[H];
      for (int o = 0; o < H; o++) {
        double s = sw ? 0.0 : m->b2[l][o];
        const float *wr = m->w2[l] + (size_t)o * FFN;
        for (int f = 0; f < FFN; f++) s += wr[f] * h[f];
        y[o] = s;
      }
      for (int o = 0; o < H; o++) xt[o] += y[o];
    }
  m->ref = x;
  free(h);
}

static void model_free(model *m) {
  free(m->x);
  free(m->ref);
  for (int l = 0; l < L; l++) { free(m->w1[l]); free(m->b1[l]); free(m->w2[l]); free(m->b2[l]); }
}

/* This rank's weights on the device, split as tpg_plan_mlp documents. */
typedef struct { void *w1[L], *b1[L], *w2[L], *b2[L]; } shard;

static void shard_make(shard *s, const model *m, int rank, int n) {
  int sw = m->kind == TPG_MLP_SWIGLU, F = FFN / n;
  for (int l = 0; l < L; l++) {
    float *w1 = malloc(sizeof(float) * (size_t)(sw ? 2 : 1) * F * H), *w2 = malloc(sizeof(float) * (size_t)H * F);
    memcpy(w1, m->w1[l] + (size_t)rank * F * H, sizeof(float) * (size_t)F * H);
    if (sw) memcpy(w1 + (size_t)F * H, m->w1[l] + (size_t)(FFN + rank * F) * H, sizeof(float) * (size_t)F * H);
    for (int o = 0; o < H; o++) memcpy(w2 + (size_t)o * F, m->w2[l] + (size_t)o * FFN + (size_t)rank * F, sizeof(float) * F);
    s->w1[l] = upload(w1, (size_t)(sw ? 2 : 1) * F * H);
    s->w2[l] = upload(w2, (size_t)H * F);
    s->b1[l] = sw ? NULL : upload(m->b1[l] + (size_t)rank * F, (size_t)F);
    s->b2[l] = sw ? NULL : upload(m->b2[l], H);
    free(w1);
    free(w2);
  }
}

static void shard_free(shard *s) {
  for (int l = 0; l < L; l++) { cudaFree(s->w1[l]); cudaFree(s->w2[l]); cudaFree(s->b1[l]); cudaFree(s->b2[l]); }
}

/* tpg_mlp_shard_layer on whole weights gives, byte for byte, the rank's
 * buffers that shard_make builds on the host. */
static void check_shard(tpg_rank *c, const model *m, const shard *ref) {
  int sw = m->kind == TPG_MLP_SWIGLU, n = c->nranks, F = FFN / n, F1 = sw ? 2 * F : F;
  tpg_mlp_desc d = TPG_MLP_DESC_INIT;
  d.kind = m->kind; d.layers = L; d.tokens = m->M; d.hidden = H; d.ffn = FFN;
  d.rank = c->rank; d.nranks = n; d.bias = !sw;
  int bad = 0;
  for (int l = 0; l < L; l++) {
    tpg_mlp_whole_layer w;
    memset(&w, 0, sizeof w);
    w.w1 = upload(m->w1[l], (size_t)FFN * H);
    if (sw) w.w1_up = upload(m->w1[l] + (size_t)FFN * H, (size_t)FFN * H);
    w.w2 = upload(m->w2[l], (size_t)H * FFN);
    if (!sw) { w.b1 = upload(m->b1[l], FFN); w.b2 = upload(m->b2[l], H); }
    tpg_mlp_rank_layer o;
    memset(&o, 0, sizeof o);
    CUDA_OK(cudaMalloc(&o.w1, (size_t)F1 * H * 2));
    CUDA_OK(cudaMalloc(&o.w2, (size_t)H * F * 2));
    if (!sw) { CUDA_OK(cudaMalloc(&o.b1, (size_t)F * 2)); CUDA_OK(cudaMalloc(&o.b2, (size_t)H * 2)); }
    tpg_status st = tpg_mlp_shard_layer(&d, c->rank, &w, &o, NULL);
    RCHECK(c, st == TPG_SUCCESS, "shard: %s", tpg_last_error());
    CUDA_OK(cudaDeviceSynchronize());
    struct { void *got, *want; size_t bytes; } cmp[4] = {
        {o.w1, ref->w1[l], (size_t)F1 * H * 2}, {o.w2, ref->w2[l], (size_t)H * F * 2},
        {o.b1, ref->b1[l], (size_t)F * 2}, {o.b2, ref->b2[l], (size_t)H * 2}};
    for (int k = 0; k < (sw ? 2 : 4); k++) {
      void *a = malloc(cmp[k].bytes), *b = malloc(cmp[k].bytes);
      CUDA_OK(cudaMemcpy(a, cmp[k].got, cmp[k].bytes, cudaMemcpyDeviceToHost));
      CUDA_OK(cudaMemcpy(b, cmp[k].want, cmp[k].bytes, cudaMemcpyDeviceToHost));
      bad += memcmp(a, b, cmp[k].bytes) != 0;
      free(a); free(b);
    }
    cudaFree((void *)w.w1); cudaFree((void *)w.w1_up); cudaFree((void *)w.w2); cudaFree((void *)w.b1);
    cudaFree((void *)w.b2); cudaFree(o.w1); cudaFree(o.w2); cudaFree(o.b1); cudaFree(o.b2);
  }
  RCHECK(c, bad == 0, "tpg_mlp_shard_layer (kind %d): %d buffers differ from the host split", (int)m->kind, bad);
  if (c->rank == 0 && bad == 0) printf("TP=%d %s: tpg_mlp_shard_layer matches the host split byte for byte\n", n,
                                       sw ? "swiglu" : "gelu");
}

static int bind_all(tpg_plan *p, const shard *s, void *dx, void *dy, tpg_binding *b) {
  int n = 0;
  char nm[32];
  tpg_slot sl;
  MUST(tpg_plan_find_slot(p, "x", &sl)); b[n++] = (tpg_binding){sl, dx};
  MUST(tpg_plan_find_slot(p, "y", &sl)); b[n++] = (tpg_binding){sl, dy};
  for (int l = 0; l < L; l++) {
    snprintf(nm, sizeof nm, "l%d.w1", l); MUST(tpg_plan_find_slot(p, nm, &sl)); b[n++] = (tpg_binding){sl, s->w1[l]};
    snprintf(nm, sizeof nm, "l%d.w2", l); MUST(tpg_plan_find_slot(p, nm, &sl)); b[n++] = (tpg_binding){sl, s->w2[l]};
    if (s->b1[l]) {
      snprintf(nm, sizeof nm, "l%d.b1", l); MUST(tpg_plan_find_slot(p, nm, &sl)); b[n++] = (tpg_binding){sl, s->b1[l]};
      snprintf(nm, sizeof nm, "l%d.b2", l); MUST(tpg_plan_find_slot(p, nm, &sl)); b[n++] = (tpg_binding){sl, s->b2[l]};
    }
  }
  return n;
}

static double out_err(const model *m, void *dy) {
  size_t n = (size_t)m->M * H;
  void *h = malloc(n * 2);
  float *f = malloc(n * 4);
  CUDA_OK(cudaMemcpy(h, dy, n * 2, cudaMemcpyDeviceToHost));
  unpack(TPG_BF16, h, n, f);
  double e = rel_err(f, m->ref, n);
  free(h);
  free(f);
  return e;
}

static void run_case(tpg_rank *c, tpg_comm *comm, const model *m, const shard *s, tpg_overlap ov,
                     tpg_graph_mode mode, unsigned flags) {
  const int pdl = (flags & TPG_GRAPH_PDL) != 0;
  const char *mname = mode == TPG_MODE_EXPLICIT ? (pdl ? "pdl" : "explicit")
                      : mode == TPG_MODE_CAPTURE ? "capture" : "eager";
  tpg_mlp_desc d = TPG_MLP_DESC_INIT;
  d.kind = m->kind;
  d.layers = L;
  d.tokens = m->M;
  d.hidden = H;
  d.ffn = FFN;
  d.rank = c->rank;
  d.nranks = c->nranks;
  d.bias = m->kind == TPG_MLP_GELU;
  d.overlap = ov;
  d.chunks = ov == TPG_OVERLAP_CHUNKED ? 3 : 0;
  tpg_plan *p;
  MUST(tpg_plan_mlp(&d, &p));
  size_t n = (size_t)m->M * H;
  void *dx[2], *dy[2];
  for (int i = 0; i < 2; i++) {
    CUDA_OK(cudaMalloc(&dx[i], n * 2));
    CUDA_OK(cudaMalloc(&dy[i], n * 2));
    void *hx = pack(TPG_BF16, m->x, n, NULL);
    CUDA_OK(cudaMemcpy(dx[i], hx, n * 2, cudaMemcpyHostToDevice));
    free(hx);
    poison(dy[i], n * 2);
  }
  tpg_binding b[4 * L + 2];
  tpg_graph_config cfg = TPG_GRAPH_CONFIG_INIT;
  cfg.device = c->rank;
  cfg.comm = comm;
  cfg.bindings = b;
  cfg.nbindings = bind_all(p, s, dx[0], dy[0], b);
  cfg.mode = mode;
  cfg.flags = flags;
  tpg_graph *g = NULL;
  tpg_status st = tpg_graph_create(p, &cfg, &g);
  RCHECK(c, st == TPG_SUCCESS, "create (kind %d M %d overlap %d mode %s): %s", (int)m->kind, m->M, (int)ov, mname,
         tpg_last_error());
  if (st == TPG_SUCCESS) {
    RCHECK(c, tpg_graph_launch(g, NULL) == TPG_SUCCESS, "launch: %s", tpg_last_error());
    RCHECK(c, tpg_comm_wait(comm, NULL) == TPG_SUCCESS, "wait: %s", tpg_last_error());
    double e = out_err(m, dy[0]);
    RCHECK(c, e <= 1e-2, "kind %d M %d overlap %d mode %s: rel err %.2e > 1e-2", (int)m->kind, m->M, (int)ov, mname,
           e);
    tpg_graph_info gi;
    MUST(tpg_graph_get_info(g, &gi, sizeof gi));
    if (c->rank == 0)
      printf("TP=%d %s M=%-3d overlap %-7s mode %-8s: rel err %.2e (tol 1e-2)%s%d%s\n", c->nranks,
             m->kind == TPG_MLP_GELU ? "gelu  " : "swiglu", m->M, ov == TPG_OVERLAP_CHUNKED ? "chunked" : "none", mname,
             e, pdl ? ", programmatic edges " : "", pdl ? gi.programmatic_edges : 0, "");
    if (pdl) {
      /* Every GEMV1 -> GEMV2 edge (one per layer and chunk) is programmatic
       * on sm_90+; the all-reduce -> next GEMV ones too when our kernel runs
       * the all-reduce (not NCCL). None below sm_90, and none into
       * cuBLASLt's GEMMs (past 32 rows), which are child graphs. */
      tpg_device_info di;
      MUST(tpg_device_get_info(c->rank, &di, sizeof di));
      const int want = gi.gemm_cublaslt_nodes ? 0 : L;
      if (di.sm_arch >= 90)
        RCHECK(c, gi.programmatic_edges >= want, "pdl on sm_%d: %d programmatic edges, expected >= %d", di.sm_arch,
               gi.programmatic_edges, want);
      else
        RCHECK(c, gi.programmatic_edges == 0, "pdl on sm_%d (< 90): %d programmatic edges, expected 0 (ignored)",
               di.sm_arch, gi.programmatic_edges);
      /* Back-to-back launches: an early-launched kernel must never see a
       * half-written input or clobber one still being read. */
      poison(dy[0], n * 2);
      for (int r = 0; r < 16; r++) RCHECK(c, tpg_graph_launch(g, NULL) == TPG_SUCCESS, "launch: %s", tpg_last_error());
      RCHECK(c, tpg_comm_wait(comm, NULL) == TPG_SUCCESS, "wait: %s", tpg_last_error());
      double e3 = out_err(m, dy[0]);
      RCHECK(c, e3 <= 1e-2, "pdl after 16 launches back to back: rel err %.2e > 1e-2", e3);
      /* Whole-graph update keeps the programmatic edges (CUDA compares the
       * edge data): y moved to dy[1]. */
      tpg_slot sy0;
      MUST(tpg_plan_find_slot(p, "y", &sy0));
      tpg_binding ub = {sy0, dy[1]};
      poison(dy[1], n * 2);
      st = tpg_graph_update(g, NULL, &ub, 1);
      RCHECK(c, st == TPG_SUCCESS, "pdl whole-graph update: %s", tpg_last_error());
      if (st == TPG_SUCCESS) {
        RCHECK(c, tpg_graph_launch(g, NULL) == TPG_SUCCESS, "launch: %s", tpg_last_error());
        RCHECK(c, tpg_comm_wait(comm, NULL) == TPG_SUCCESS, "wait: %s", tpg_last_error());
        double e4 = out_err(m, dy[1]);
        RCHECK(c, e4 <= 1e-2, "pdl after whole-graph update: rel err %.2e > 1e-2", e4);
        ub.ptr = dy[0];
        RCHECK(c, tpg_graph_update(g, NULL, &ub, 1) == TPG_SUCCESS, "pdl update back: %s", tpg_last_error());
      }
    }
    if (mode != TPG_MODE_CAPTURE) {
      /* The decode loop: swap input and output buffers by rebinding. */
      tpg_slot sx, sy;
      MUST(tpg_plan_find_slot(p, "x", &sx));
      MUST(tpg_plan_find_slot(p, "y", &sy));
      for (int step = 1; step <= 4; step++) {
        int k = step & 1;
        tpg_binding nb[2] = {{sx, dx[k]}, {sy, dy[k]}};
        RCHECK(c, tpg_graph_rebind(g, nb, 2) == TPG_SUCCESS, "rebind: %s", tpg_last_error());
        poison(dy[k], n * 2);
        poison(dx[!k], n * 2); /* the other input must not be read */
        RCHECK(c, tpg_graph_launch(g, NULL) == TPG_SUCCESS, "launch: %s", tpg_last_error());
        RCHECK(c, tpg_comm_wait(comm, NULL) == TPG_SUCCESS, "wait: %s", tpg_last_error());
        double e2 = out_err(m, dy[k]);
        RCHECK(c, e2 <= 1e-2, "after rebind step %d: rel err %.2e", step, e2);
        void *hx = pack(TPG_BF16, m->x, n, NULL); /* restore the poisoned input */
        CUDA_OK(cudaMemcpy(dx[!k], hx, n * 2, cudaMemcpyHostToDevice));
        free(hx);
      }
    } else {
      tpg_binding nb = {b[0].slot, dx[1]};
      RCHECK(c, tpg_graph_rebind(g, &nb, 1) == TPG_ERROR_UNSUPPORTED, "capture-mode rebind must be refused");
    }
  }
  MUST(tpg_graph_destroy(g));
  tpg_plan_destroy(p);
  for (int i = 0; i < 2; i++) { cudaFree(dx[i]); cudaFree(dy[i]); }
}

/* Buckets {1, 16} + max 64: 10 tokens run the 16-token graph; its rows match
 * the reference (rows are independent); memory is reported per bucket. */
static void run_buckets(tpg_rank *c, tpg_comm *comm) {
  model m;
  model_make(&m, TPG_MLP_GELU, 64, 9100);
  shard s;
  shard_make(&s, &m, c->rank, c->nranks);
  tpg_mlp_desc d = TPG_MLP_DESC_INIT;
  d.layers = L; d.tokens = 64; d.hidden = H; d.ffn = FFN; d.rank = c->rank; d.nranks = c->nranks;
  size_t n = (size_t)64 * H;
  void *dx, *dy;
  CUDA_OK(cudaMalloc(&dx, n * 2));
  CUDA_OK(cudaMalloc(&dy, n * 2));
  void *hx = pack(TPG_BF16, m.x, n, NULL);
  CUDA_OK(cudaMemcpy(dx, hx, n * 2, cudaMemcpyHostToDevice));
  free(hx);
  poison(dy, n * 2);
  tpg_plan *p;
  MUST(tpg_plan_mlp(&d, &p));
  tpg_binding b[4 * L + 2];
  tpg_graph_config cfg = TPG_GRAPH_CONFIG_INIT;
  cfg.device = c->rank;
  cfg.comm = comm;
  cfg.bindings = b;
  cfg.nbindings = bind_all(p, &s, dx, dy, b);
  tpg_plan_destroy(p);
  tpg_slot sx;
  RCHECK(c, tpg_mlp_find_slot(&d, "x", &sx) == TPG_SUCCESS && sx == b[0].slot, "tpg_mlp_find_slot");
  int sizes[3] = {16, 1, 16};
  tpg_mlp_buckets *bk = NULL;
  tpg_status st = tpg_mlp_buckets_create(&d, sizes, 3, &cfg, &bk);
  RCHECK(c, st == TPG_SUCCESS, "buckets create: %s", tpg_last_error());
  if (st == TPG_SUCCESS) {
    int count = 0, tk = 0;
    size_t bytes = 0;
    RCHECK(c, tpg_mlp_buckets_get_info(bk, 0, &count, NULL, NULL) == TPG_SUCCESS && count == 3, "3 buckets");
    for (int i = 0; i < count; i++) {
      MUST(tpg_mlp_buckets_get_info(bk, i, NULL, &tk, &bytes));
      if (c->rank == 0) printf("bucket %d: %d tokens, %zu bytes of device memory (measured)\n", i, tk, bytes);
    }
    tpg_graph *g = NULL;
    RCHECK(c, tpg_mlp_buckets_pick(bk, 10, &tk, &g) == TPG_SUCCESS && tk == 16 && g, "pick 10 -> 16");
    RCHECK(c, tpg_mlp_buckets_pick(bk, 65, &tk, &g) == TPG_ERROR_INVALID_ARGUMENT, "pick 65 refused");
    MUST(tpg_mlp_buckets_pick(bk, 10, &tk, &g));
    RCHECK(c, tpg_graph_launch(g, NULL) == TPG_SUCCESS, "launch: %s", tpg_last_error());
    RCHECK(c, tpg_comm_wait(comm, NULL) == TPG_SUCCESS, "wait: %s", tpg_last_error());
    void *hy = malloc((size_t)10 * H * 2);
    float *f = malloc(sizeof(float) * 10 * H);
    CUDA_OK(cudaMemcpy(hy, dy, (size_t)10 * H * 2, cudaMemcpyDeviceToHost));
    unpack(TPG_BF16, hy, (size_t)10 * H, f);
    double e = rel_err(f, m.ref, (size_t)10 * H);
    RCHECK(c, e <= 1e-2, "bucket 16 for 10 tokens: rel err %.2e", e);
    if (c->rank == 0) printf("TP=%d buckets: 10 tokens in the 16-token graph: rel err %.2e (tol 1e-2)\n", c->nranks, e);
    free(hy);
    free(f);
  }
  RCHECK(c, tpg_mlp_buckets_destroy(bk) == TPG_SUCCESS, "buckets destroy: %s", tpg_last_error());
  cudaFree(dx);
  cudaFree(dy);
  shard_free(&s);
  model_free(&m);
}

static void rank_body(tpg_rank *c) {
  tpg_comm *comm = tpg_rank_comm(c);
  if (!comm) return;
  static const int Ms[] = {1, 17, 300};
  for (int kind = 0; kind < 2; kind++)
    for (size_t mi = 0; mi < sizeof Ms / sizeof Ms[0]; mi++) {
      model m;
      model_make(&m, (tpg_mlp_kind)kind, Ms[mi], 7000 + 100 * (uint64_t)kind + mi);
      shard s;
      shard_make(&s, &m, c->rank, c->nranks);
      if (mi == 0) check_shard(c, &m, &s);
      for (int ov = TPG_OVERLAP_NONE; ov <= TPG_OVERLAP_CHUNKED; ov++) {
        if (ov == TPG_OVERLAP_CHUNKED && m.M < 3) continue;
        for (int mode = 0; mode < 3; mode++) {
          run_case(c, comm, &m, &s, (tpg_overlap)ov, (tpg_graph_mode)mode, 0u);
          if (mode == TPG_MODE_EXPLICIT) run_case(c, comm, &m, &s, (tpg_overlap)ov, (tpg_graph_mode)mode, TPG_GRAPH_PDL);
        }
      }
      shard_free(&s);
      model_free(&m);
    }
  run_buckets(c, comm);
  /* Bad shapes are refused with the rule. */
  tpg_mlp_desc d = TPG_MLP_DESC_INIT;
  d.layers = 1; d.tokens = 4; d.hidden = H; d.ffn = 1000; d.nranks = 3;
  tpg_plan *p;
  RCHECK(c, tpg_plan_mlp(&d, &p) == TPG_ERROR_INVALID_ARGUMENT && strstr(tpg_last_error(), "evenly"),
         "uneven split: %s", tpg_last_error());
  RCHECK(c, tpg_comm_destroy(comm) == TPG_SUCCESS, "comm destroy: %s", tpg_last_error());
}

int main(int argc, char **argv) { return tpg_ranks_main(argc, argv, rank_body, 0); }
