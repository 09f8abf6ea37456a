/* linear_test.c - tensor-parallel linear layers (tpg_plan_add_linear) against
 * an fp64 CPU reference of the UNSPLIT layer, on every visible GPU (TP =
 * 1..8), one process or one thread per GPU, and with NCCL's network
 * transport (tests/gpu/ranks.h).
 *
 * For tokens 1, 5 and 64 and every graph mode (explicit, stream-captured,
 * eager):
 *   - column-parallel without gather (each rank checks its slice of the
 *     reference): plain+bias, GeLU+bias, SwiGLU;
 *   - column-parallel with gather (every rank checks the whole [T, out],
 *     row-major: the rank-block layout trap): plain, SiLU+bias;
 *   - row-parallel: bias+residual (all-reduce AUTO), neither (NCCL);
 *   - a stack of two column->row pairs (attention-projection-like: GeLU up,
 *     row down with bias and residual), bound to whole-model references;
 *   - the row layer whose all-reduce adds bias and residual, updates the
 *     residual in place and applies RMSNorm (tpg_plan_add_linear_norm), by
 *     AUTO and NCCL, element-wise against fp64 with a stated bound;
 *   - that norm folded into the next linear (tpg_x_norm: one rank, up to 16
 *     rows; refused elsewhere), element-wise against fp64.
 * Weights are whole, fresh random (seeded, so every rank builds the same
 * model), split on the host per rank; outputs are poisoned (NaN) before each
 * launch; relative norm error <= 1e-2 (bf16). Explicit and eager graphs then
 * rebind x and y between launches with the unused buffers poisoned; captured
 * graphs must refuse rebinding. tpg_linear_shard is checked byte for byte
 * against the host split.
 */
#include "tests/gpu/ranks.h"

static double dev_err(const void *dy, const double *ref, size_t n) {
  void *h = malloc(n * 2);
  float *f = malloc(n * 4);
  CUDA_OK(cudaMemcpy(h, dy, n * 2, cudaMemcpyDeviceToHost));
  unpack(TPG_BF16, h, n, f);
  double e = rel_err(f, ref, n);
  free(h);
  free(f);
  return e;
}

static const char *mode_name(tpg_graph_mode m) {
  return m == TPG_MODE_EXPLICIT ? "explicit" : m == TPG_MODE_CAPTURE ? "capture" : "eager";
}

static double act_f(tpg_activation a, double z, double u) {
  switch (a) {
    case TPG_ACT_GELU: return 0.5 * z * (1.0 + tanh(0.7978845608028654 * (z + 0.044715 * z * z * z)));
    case TPG_ACT_SILU: return z / (1.0 + exp(-z));
    case TPG_ACT_SWIGLU: return z / (1.0 + exp(-z)) * u;
    default: return z;
  }
}

/* ---- one layer ----------------------------------------------------------- */

typedef struct {
  const char *label;
  tpg_linear_kind kind;
  tpg_activation act;
  int bias, gather, residual;
  tpg_collective_algo algo;
} spec;

/* The whole (unsplit) layer and its fp64 output. */
typedef struct {
  int T, in, out;
  float *x, *w, *wu, *b, *bu, *res; /* x [T,in]; w, wu [out,in]; b, bu [out]; res [T,out] */
  double *ref;                      /* [T, out] */
} whole;

static void whole_make(whole *m, const spec *s, int T, int in, int out, uint64_t seed) {
  memset(m, 0, sizeof *m);
  m->T = T; m->in = in; m->out = out;
  int sw = s->act == TPG_ACT_SWIGLU;
  m->x = rnd_bf16(seed, (size_t)T * in, 1.0f);
  m->w = rnd_bf16(seed + 1, (size_t)out * in, 1.0f / sqrtf((float)in));
  if (sw) m->wu = rnd_bf16(seed + 2, (size_t)out * in, 1.0f / sqrtf((float)in));
  if (s->bias) {
    m->b = rnd_bf16(seed + 3, (size_t)out, 0.1f);
    if (sw) m->bu = rnd_bf16(seed + 4, (size_t)out, 0.1f);
  }
  if (s->residual) m->res = rnd_bf16(seed + 5, (size_t)T * out, 1.0f);
  m->ref = malloc(sizeof(double) * (size_t)T * out);
  for (int t = 0; t < T; t++)
    for (int o = 0; o < out; o++) {
      double z = m->b ? m->b[o] : 0.0, u = m->bu ? m->bu[o] : 0.0;
      const float *xr = m->x + (size_t)t * in, *wr = m->w + (size_t)o * in;
      for (int k = 0; k < in; k++) z += (double)xr[k] * wr[k];
      if (sw) {
        const float *ur = m->wu + (size_t)o * in;
        for (int k = 0; k < in; k++) u += (double)xr[k] * ur[k];
      }
      double y = act_f(s->act, z, u);
      if (m->res) y += m->res[(size_t)t * out + o];
      m->ref[(size_t)t * out + o] = y;
    }
}

static void whole_free(whole *m) {
  free(m->x); free(m->w); free(m->wu); free(m->b); free(m->bu); free(m->res); free(m->ref);
}

/* Rank r's part, split on the host the way the header documents it. */
typedef struct {
  float *x, *w, *b;     /* as desc->x, desc->w, desc->bias expect */
  size_t nx, nw, nb;
} part;

static void part_make(part *p, const whole *m, const spec *s, int r, int R) {
  memset(p, 0, sizeof *p);
  int sw = s->act == TPG_ACT_SWIGLU;
  if (s->kind == TPG_LINEAR_COLUMN) {
    size_t F = (size_t)m->out / R, in = (size_t)m->in;
    p->nx = (size_t)m->T * in;
    p->x = malloc(p->nx * 4);
    memcpy(p->x, m->x, p->nx * 4);
    p->nw = (sw ? 2 : 1) * F * in;
    p->w = malloc(p->nw * 4);
    memcpy(p->w, m->w + r * F * in, F * in * 4);
    if (sw) memcpy(p->w + F * in, m->wu + r * F * in, F * in * 4);
    if (s->bias) {
      p->nb = (sw ? 2 : 1) * F;
      p->b = malloc(p->nb * 4);
      memcpy(p->b, m->b + r * F, F * 4);
      if (sw) memcpy(p->b + F, m->bu + r * F, F * 4);
    }
  } else {
    size_t K = (size_t)m->in / R, in = (size_t)m->in, out = (size_t)m->out;
    p->nx = (size_t)m->T * K;
    p->x = malloc(p->nx * 4);
    for (int t = 0; t < m->T; t++) memcpy(p->x + t * K, m->x + t * in + r * K, K * 4);
    p->nw = out * K;
    p->w = malloc(p->nw * 4);
    for (size_t o = 0; o < out; o++) memcpy(p->w + o * K, m->w + o * in + r * K, K * 4);
    if (s->bias) {
      p->nb = out;
      p->b = malloc(p->nb * 4);
      memcpy(p->b, m->b, out * 4);
    }
  }
}

static void part_free(part *p) { free(p->x); free(p->w); free(p->b); }

/* What rank r must hold: its columns of the reference (column, not
 * gathered) or all of it. */
static double *expected(const whole *m, const spec *s, int r, int R, size_t *n) {
  int slice = s->kind == TPG_LINEAR_COLUMN && !s->gather;
  size_t F = slice ? (size_t)m->out / R : (size_t)m->out, off = slice ? (size_t)r * F : 0;
  *n = (size_t)m->T * F;
  double *e = malloc(*n * sizeof *e);
  for (int t = 0; t < m->T; t++)
    for (size_t o = 0; o < F; o++) e[t * F + o] = m->ref[(size_t)t * m->out + off + o];
  return e;
}

static void run_layer(tpg_rank *c, tpg_comm *comm, const spec *s, int T, tpg_graph_mode mode, uint64_t seed) {
  const int R = c->nranks, r = c->rank, col = s->kind == TPG_LINEAR_COLUMN;
  const int in = col ? 256 : 512, out = col ? 512 : 256;
  whole m;
  whole_make(&m, s, T, in, out, seed);
  part pt;
  part_make(&pt, &m, s, r, R);
  size_t ny;
  double *want = expected(&m, s, r, R, &ny);

  tpg_plan *p;
  MUST(tpg_plan_create(&p));
  tpg_slot sx, sw, sb = 0, sr = 0, sy, swk = 0;
  MUST(tpg_plan_add_slot(p, "x", TPG_BF16, TPG_MEM_DEVICE, pt.nx, &sx));
  MUST(tpg_plan_add_slot(p, "w", TPG_BF16, TPG_MEM_DEVICE, pt.nw, &sw));
  if (s->bias) MUST(tpg_plan_add_slot(p, "b", TPG_BF16, TPG_MEM_DEVICE, pt.nb, &sb));
  if (s->residual) MUST(tpg_plan_add_slot(p, "res", TPG_BF16, TPG_MEM_DEVICE, (size_t)T * out, &sr));
  MUST(tpg_plan_add_slot(p, "y", TPG_BF16, TPG_MEM_DEVICE, ny, &sy));
  if (s->gather) MUST(tpg_plan_add_slot(p, "work", TPG_BF16, TPG_MEM_SCRATCH, (size_t)T * out, &swk));
  tpg_linear_desc d = TPG_LINEAR_DESC_INIT;
  d.kind = s->kind;
  d.rank = r;
  d.nranks = R;
  d.tokens = T;
  d.in_features = in;
  d.out_features = out;
  d.gather = s->gather;
  d.activation = s->act;
  d.algo = s->algo;
  d.name = s->label;
  d.x = (tpg_view){sx, 0, 0};
  d.w = (tpg_view){sw, 0, 0};
  d.bias = (tpg_view){sb, 0, 0};
  d.residual = (tpg_view){sr, 0, 0};
  d.y = (tpg_view){sy, 0, 0};
  d.work = (tpg_view){swk, 0, 0};
  tpg_node last;
  tpg_status st = tpg_plan_add_linear(p, &d, NULL, 0, &last);
  RCHECK(c, st == TPG_SUCCESS, "%s: add_linear: %s", s->label, tpg_last_error());
  if (st != TPG_SUCCESS) goto out_plan;

  void *dx[2], *dy[2], *dw = upload(pt.w, pt.nw), *db = s->bias ? upload(pt.b, pt.nb) : NULL;
  void *dr = s->residual ? upload(m.res, (size_t)T * out) : NULL;
  for (int i = 0; i < 2; i++) {
    dx[i] = upload(pt.x, pt.nx);
    CUDA_OK(cudaMalloc(&dy[i], ny * 2));
    poison(dy[i], ny * 2);
  }
  tpg_binding b[5];
  int nb = 0;
  b[nb++] = (tpg_binding){sx, dx[0]};
  b[nb++] = (tpg_binding){sw, dw};
  b[nb++] = (tpg_binding){sy, dy[0]};
  if (db) b[nb++] = (tpg_binding){sb, db};
  if (dr) b[nb++] = (tpg_binding){sr, dr};
  tpg_graph_config cfg = TPG_GRAPH_CONFIG_INIT;
  cfg.device = r;
  cfg.comm = comm;
  cfg.bindings = b;
  cfg.nbindings = nb;
  cfg.mode = mode;
  tpg_graph *g = NULL;
  st = tpg_graph_create(p, &cfg, &g);
  RCHECK(c, st == TPG_SUCCESS, "%s M=%d %s: create: %s", s->label, T, mode_name(mode), tpg_last_error());
  if (st == TPG_SUCCESS) {
    if (mode == TPG_MODE_EXPLICIT && col && s->gather && R > 1 && T > 1) {
      tpg_graph_info info;
      MUST(tpg_graph_get_info(g, &info, sizeof info));
      RCHECK(c, info.nodes == 3 && info.kernel_nodes == 2 && info.child_nodes == 1,
             "%s M=%d: expected GEMM + all-gather + concat (3 nodes, 2 kernels, 1 child), got %d, %d, %d", s->label,
             T, info.nodes, info.kernel_nodes, info.child_nodes);
    }
    RCHECK(c, tpg_graph_launch(g, NULL) == TPG_SUCCESS, "launch: %s", tpg_last_error());
    RCHECK(c, tpg_comm_wait(comm, NULL) == TPG_SUCCESS, "wait: %s", tpg_last_error());
    double e = dev_err(dy[0], want, ny);
    RCHECK(c, e <= 1e-2, "%s M=%d %s: rel err %.2e > 1e-2", s->label, T, mode_name(mode), e);
    if (r == 0)
      printf("TP=%d %-22s M=%-2d mode %-8s: rel err %.2e (tol 1e-2)\n", R, s->label, T, mode_name(mode), e);
    if (mode != TPG_MODE_CAPTURE) {
      /* The decode loop: swap x and y by rebinding; the unused x is poisoned. */
      for (int step = 1; step <= 4; step++) {
        int k = step & 1;
        tpg_binding nbd[2] = {{sx, dx[k]}, {sy, dy[k]}};
        RCHECK(c, tpg_graph_rebind(g, nbd, 2) == TPG_SUCCESS, "rebind: %s", tpg_last_error());
        poison(dy[k], ny * 2);
        poison(dx[!k], pt.nx * 2);
        RCHECK(c, tpg_graph_launch(g, NULL) == TPG_SUCCESS, "launch: %s", tpg_last_error());
        RCHECK(c, tpg_comm_wait(comm, NULL) == TPG_SUCCESS, "wait: %s", tpg_last_error());
        double e2 = dev_err(dy[k], want, ny);
        RCHECK(c, e2 <= 1e-2, "%s M=%d %s after rebind step %d: rel err %.2e", s->label, T, mode_name(mode), step,
               e2);
        void *hx = pack(TPG_BF16, pt.x, pt.nx, NULL); /* restore the poisoned input */
        CUDA_OK(cudaMemcpy(dx[!k], hx, pt.nx * 2, cudaMemcpyHostToDevice));
        free(hx);
      }
    } else {
      tpg_binding nbd = {sx, dx[1]};
      RCHECK(c, tpg_graph_rebind(g, &nbd, 1) == TPG_ERROR_UNSUPPORTED, "capture-mode rebind must be refused");
    }
  }
  MUST(tpg_graph_destroy(g));
  for (int i = 0; i < 2; i++) { CUDA_OK(cudaFree(dx[i])); CUDA_OK(cudaFree(dy[i])); }
  CUDA_OK(cudaFree(dw));
  if (db) CUDA_OK(cudaFree(db));
  if (dr) CUDA_OK(cudaFree(dr));
out_plan:
  tpg_plan_destroy(p);
  free(want);
  part_free(&pt);
  whole_free(&m);
}

/* ---- a stack of column -> row pairs -------------------------------------- */

enum { L = 2, H = 256, D = 512 };

/* x_{l+1} = x_l + W2 gelu(W1 x_l + b1) + b2: up is column-parallel (GeLU in
 * its epilogue, output stays split), down row-parallel on that slice (bias
 * and residual once, then the all-reduce). */
static void run_pairs(tpg_rank *c, tpg_comm *comm, int T, tpg_graph_mode mode, uint64_t seed) {
  const int R = c->nranks, r = c->rank, F = D / R;
  float *x = rnd_bf16(seed, (size_t)T * H, 1.0f), *w1[L], *b1[L], *w2[L], *b2[L];
  for (int l = 0; l < L; l++) {
    w1[l] = rnd_bf16(seed + 10 + l, (size_t)D * H, 1.0f / sqrtf((float)H));
    b1[l] = rnd_bf16(seed + 20 + l, (size_t)D, 0.1f);
    w2[l] = rnd_bf16(seed + 30 + l, (size_t)H * D, 1.0f / sqrtf((float)D));
    b2[l] = rnd_bf16(seed + 40 + l, (size_t)H, 0.1f);
  }
  /* fp64 reference of the unsplit stack */
  double *ref = malloc(sizeof(double) * (size_t)T * H), h[D];
  for (size_t i = 0; i < (size_t)T * H; i++) ref[i] = x[i];
  for (int l = 0; l < L; l++)
    for (int t = 0; t < T; t++) {
      double *xt = ref + (size_t)t * H, y[H];
      for (int f = 0; f < D; f++) {
        double z = b1[l][f];
        for (int k = 0; k < H; k++) z += xt[k] * w1[l][(size_t)f * H + k];
        h[f] = act_f(TPG_ACT_GELU, z, 0);
      }
      for (int o = 0; o < H; o++) {
        double z = b2[l][o];
        for (int f = 0; f < D; f++) z += w2[l][(size_t)o * D + f] * h[f];
        y[o] = z;
      }
      for (int o = 0; o < H; o++) xt[o] += y[o];
    }

  tpg_plan *p;
  MUST(tpg_plan_create(&p));
  tpg_slot sx, sy, sa, sh, sw1[L], sb1[L], sw2[L], sb2[L];
  MUST(tpg_plan_add_slot(p, "x", TPG_BF16, TPG_MEM_DEVICE, (size_t)T * H, &sx));
  MUST(tpg_plan_add_slot(p, "y", TPG_BF16, TPG_MEM_DEVICE, (size_t)T * H, &sy));
  MUST(tpg_plan_add_slot(p, "a", TPG_BF16, TPG_MEM_SCRATCH, (size_t)T * H, &sa)); /* between the pairs */
  MUST(tpg_plan_add_slot(p, "h", TPG_BF16, TPG_MEM_SCRATCH, (size_t)T * F, &sh));
  void *dw[4 * L];
  tpg_binding b[4 * L + 2];
  int nb = 0;
  for (int l = 0; l < L; l++) {
    char nm[32];
    float *w1r = malloc(sizeof(float) * (size_t)F * H), *w2r = malloc(sizeof(float) * (size_t)H * F);
    memcpy(w1r, w1[l] + (size_t)r * F * H, sizeof(float) * (size_t)F * H);
    for (int o = 0; o < H; o++) memcpy(w2r + (size_t)o * F, w2[l] + (size_t)o * D + (size_t)r * F, sizeof(float) * F);
    snprintf(nm, sizeof nm, "l%d.w1", l);
    MUST(tpg_plan_add_slot(p, nm, TPG_BF16, TPG_MEM_DEVICE, (size_t)F * H, &sw1[l]));
    snprintf(nm, sizeof nm, "l%d.b1", l);
    MUST(tpg_plan_add_slot(p, nm, TPG_BF16, TPG_MEM_DEVICE, (size_t)F, &sb1[l]));
    snprintf(nm, sizeof nm, "l%d.w2", l);
    MUST(tpg_plan_add_slot(p, nm, TPG_BF16, TPG_MEM_DEVICE, (size_t)H * F, &sw2[l]));
    snprintf(nm, sizeof nm, "l%d.b2", l);
    MUST(tpg_plan_add_slot(p, nm, TPG_BF16, TPG_MEM_DEVICE, (size_t)H, &sb2[l]));
    dw[4 * l] = upload(w1r, (size_t)F * H);
    dw[4 * l + 1] = upload(b1[l] + (size_t)r * F, (size_t)F);
    dw[4 * l + 2] = upload(w2r, (size_t)H * F);
    dw[4 * l + 3] = upload(b2[l], (size_t)H);
    b[nb++] = (tpg_binding){sw1[l], dw[4 * l]};
    b[nb++] = (tpg_binding){sb1[l], dw[4 * l + 1]};
    b[nb++] = (tpg_binding){sw2[l], dw[4 * l + 2]};
    b[nb++] = (tpg_binding){sb2[l], dw[4 * l + 3]};
    free(w1r);
    free(w2r);
  }
  tpg_node n = 0;
  int ok = 1;
  for (int l = 0; l < L; l++) {
    tpg_slot in = l == 0 ? sx : sa, outs = l == L - 1 ? sy : sa;
    tpg_linear_desc up = TPG_LINEAR_DESC_INIT;
    up.kind = TPG_LINEAR_COLUMN; up.rank = r; up.nranks = R; up.tokens = T;
    up.in_features = H; up.out_features = D; up.activation = TPG_ACT_GELU;
    up.x = (tpg_view){in, 0, 0}; up.w = (tpg_view){sw1[l], 0, 0}; up.bias = (tpg_view){sb1[l], 0, 0};
    up.y = (tpg_view){sh, 0, 0};
    up.name = l == 0 ? "l0.up" : "l1.up";
    tpg_linear_desc down = up;
    down.kind = TPG_LINEAR_ROW; down.in_features = D; down.out_features = H; down.activation = TPG_ACT_NONE;
    down.x = up.y; down.w = (tpg_view){sw2[l], 0, 0}; down.bias = (tpg_view){sb2[l], 0, 0};
    /* y = x + layer(x) in place on the scratch between pairs; the last pair reads it and writes y */
    down.residual = up.x;
    down.y = (tpg_view){outs, 0, 0};
    down.name = l == 0 ? "l0.down" : "l1.down";
    ok &= tpg_plan_add_linear(p, &up, n ? &n : NULL, n ? 1 : 0, &n) == TPG_SUCCESS;
    ok &= tpg_plan_add_linear(p, &down, &n, 1, &n) == TPG_SUCCESS;
  }
  RCHECK(c, ok, "pairs: add_linear: %s", tpg_last_error());
  void *dx[2], *dy[2];
  size_t n_xy = (size_t)T * H;
  for (int i = 0; i < 2; i++) {
    dx[i] = upload(x, n_xy);
    CUDA_OK(cudaMalloc(&dy[i], n_xy * 2));
    poison(dy[i], n_xy * 2);
  }
  b[nb++] = (tpg_binding){sx, dx[0]};
  b[nb++] = (tpg_binding){sy, dy[0]};
  tpg_graph_config cfg = TPG_GRAPH_CONFIG_INIT;
  cfg.device = r;
  cfg.comm = comm;
  cfg.bindings = b;
  cfg.nbindings = nb;
  cfg.mode = mode;
  tpg_graph *g = NULL;
  tpg_status st = ok ? tpg_graph_create(p, &cfg, &g) : TPG_ERROR_INVALID_ARGUMENT;
  RCHECK(c, st == TPG_SUCCESS, "pairs M=%d %s: create: %s", T, mode_name(mode), tpg_last_error());
  if (st == TPG_SUCCESS) {
    RCHECK(c, tpg_graph_launch(g, NULL) == TPG_SUCCESS, "launch: %s", tpg_last_error());
    RCHECK(c, tpg_comm_wait(comm, NULL) == TPG_SUCCESS, "wait: %s", tpg_last_error());
    double e = dev_err(dy[0], ref, n_xy);
    RCHECK(c, e <= 1e-2, "pairs M=%d %s: rel err %.2e > 1e-2", T, mode_name(mode), e);
    if (r == 0)
      printf("TP=%d %-22s M=%-2d mode %-8s: rel err %.2e (tol 1e-2)\n", R, "2 x (column->row) stack", T,
             mode_name(mode), e);
    if (mode != TPG_MODE_CAPTURE) {
      for (int step = 1; step <= 4; step++) {
        int k = step & 1;
        tpg_binding nbd[2] = {{sx, dx[k]}, {sy, dy[k]}};
        RCHECK(c, tpg_graph_rebind(g, nbd, 2) == TPG_SUCCESS, "rebind: %s", tpg_last_error());
        poison(dy[k], n_xy * 2);
        poison(dx[!k], n_xy * 2);
        RCHECK(c, tpg_graph_launch(g, NULL) == TPG_SUCCESS, "launch: %s", tpg_last_error());
        RCHECK(c, tpg_comm_wait(comm, NULL) == TPG_SUCCESS, "wait: %s", tpg_last_error());
        double e2 = dev_err(dy[k], ref, n_xy);
        RCHECK(c, e2 <= 1e-2, "pairs M=%d %s after rebind step %d: rel err %.2e", T, mode_name(mode), step, e2);
        void *hx = pack(TPG_BF16, x, n_xy, NULL);
        CUDA_OK(cudaMemcpy(dx[!k], hx, n_xy * 2, cudaMemcpyHostToDevice));
        free(hx);
      }
    } else {
      tpg_binding nbd = {sx, dx[1]};
      RCHECK(c, tpg_graph_rebind(g, &nbd, 1) == TPG_ERROR_UNSUPPORTED, "capture-mode rebind must be refused");
    }
  }
  MUST(tpg_graph_destroy(g));
  tpg_plan_destroy(p);
  for (int i = 0; i < 2; i++) { CUDA_OK(cudaFree(dx[i])); CUDA_OK(cudaFree(dy[i])); }
  for (int i = 0; i < 4 * L; i++) CUDA_OK(cudaFree(dw[i]));
  for (int l = 0; l < L; l++) { free(w1[l]); free(b1[l]); free(w2[l]); free(b2[l]); }
  free(x);
  free(ref);
}

/* ---- tpg_linear_shard ---------------------------------------------------- */

static int same_bytes(const void *dev, const float *host, size_t n) {
  void *a = malloc(n * 2), *b = pack(TPG_BF16, host, n, NULL);
  CUDA_OK(cudaMemcpy(a, dev, n * 2, cudaMemcpyDeviceToHost));
  int same = memcmp(a, b, n * 2) == 0;
  free(a);
  free(b);
  return same;
}

/* The rank's buffers from whole weights on the device equal the host split. */
static void check_shard(tpg_rank *c, const spec *s) {
  whole m;
  const int col = s->kind == TPG_LINEAR_COLUMN, in = col ? 256 : 512, out = col ? 512 : 256;
  whole_make(&m, s, 1, in, out, 9000 + (uint64_t)s->kind);
  part pt;
  part_make(&pt, &m, s, c->rank, c->nranks);
  tpg_linear_desc d = TPG_LINEAR_DESC_INIT;
  d.kind = s->kind; d.rank = c->rank; d.nranks = c->nranks; d.tokens = 1;
  d.in_features = in; d.out_features = out; d.activation = s->act;
  d.bias.slot = s->bias ? 1 : 0; /* "the layer has a bias" */
  int sw = s->act == TPG_ACT_SWIGLU;
  tpg_linear_whole w = {upload(m.w, (size_t)out * in), sw ? upload(m.wu, (size_t)out * in) : NULL,
                        s->bias ? upload(m.b, (size_t)out) : NULL, s->bias && sw ? upload(m.bu, (size_t)out) : NULL};
  tpg_linear_part o = {NULL, NULL};
  CUDA_OK(cudaMalloc(&o.w, pt.nw * 2));
  poison(o.w, pt.nw * 2);
  if (s->bias) {
    CUDA_OK(cudaMalloc(&o.bias, pt.nb * 2));
    poison(o.bias, pt.nb * 2);
  }
  tpg_status st = tpg_linear_shard(&d, c->rank, &w, &o, NULL);
  RCHECK(c, st == TPG_SUCCESS, "tpg_linear_shard (%s): %s", s->label, tpg_last_error());
  CUDA_OK(cudaDeviceSynchronize());
  int bad = !same_bytes(o.w, pt.w, pt.nw) + (s->bias ? !same_bytes(o.bias, pt.b, pt.nb) : 0);
  RCHECK(c, bad == 0, "tpg_linear_shard (%s): %d buffers differ from the host split", s->label, bad);
  if (c->rank == 0 && bad == 0)
    printf("TP=%d %s: tpg_linear_shard matches the host split byte for byte\n", c->nranks, s->label);
  CUDA_OK(cudaFree((void *)w.w));
  if (w.w_up) CUDA_OK(cudaFree((void *)w.w_up));
  if (w.bias) CUDA_OK(cudaFree((void *)w.bias));
  if (w.bias_up) CUDA_OK(cudaFree((void *)w.bias_up));
  CUDA_OK(cudaFree(o.w));
  if (o.bias) CUDA_OK(cudaFree(o.bias));
  part_free(&pt);
  whole_free(&m);
}

/* ---- the row layer whose all-reduce finishes the block -------------------- */

/* tpg_plan_add_linear_norm against fp64: h = x W^T + b + res over the WHOLE
 * layer, rounded to bf16 as the header says the epilogue stores it; res
 * becomes h (in place) and y = RMSNorm(h) * nw, rounded. Element-wise bound,
 * in ulps of bf16 (2^-7 of max(|ref|, 1)): every rank's partial sum is
 * stored in bf16 (R half-ulps summed), h's rounding may then flip (1 ulp),
 * y's own rounding (half), all scaled by nw / rms(h) (up to ~1.5 here):
 * |got - ref| <= (R + 6) / 2 ulps. Also the relative norm <= 1e-2. */
static int norm_bad(const void *dev, const double *ref, size_t n, int R, double *max_err, double *rel) {
  float *f = malloc(n * 4);
  void *h = malloc(n * 2);
  CUDA_OK(cudaMemcpy(h, dev, n * 2, cudaMemcpyDeviceToHost));
  unpack(TPG_BF16, h, n, f);
  int bad = 0;
  *max_err = 0;
  for (size_t i = 0; i < n; i++) {
    const double e = fabs((double)f[i] - ref[i]), tol = (R + 6) * 0.5 * ldexp(1.0, -7) * fmax(fabs(ref[i]), 1.0);
    if (!(e <= tol)) bad++;
    if (!(e <= *max_err)) *max_err = e;
  }
  *rel = rel_err(f, ref, n);
  free(f);
  free(h);
  return bad;
}

static void run_norm(tpg_rank *c, tpg_comm *comm, int T, tpg_graph_mode mode, tpg_collective_algo algo,
                     uint64_t seed) {
  const int R = c->nranks, r = c->rank, in = 512, out = 256;
  const float eps = 1e-5f;
  const spec s = {"row+norm", TPG_LINEAR_ROW, TPG_ACT_NONE, 1, 0, 1, algo};
  whole m;
  whole_make(&m, &s, T, in, out, seed); /* m.ref = x W^T + b + res */
  part pt;
  part_make(&pt, &m, &s, r, R);
  float *nw = rnd_bf16(seed + 9, (size_t)out, 0.2f);
  for (int o = 0; o < out; o++) nw[o] += 1.0f; /* the norm's weight around 1 */
  free(pack(TPG_BF16, nw, (size_t)out, nw));     /* rounded to bf16 in place */
  double *h = malloc(sizeof(double) * (size_t)T * out), *y = malloc(sizeof(double) * (size_t)T * out);
  for (int t = 0; t < T; t++) {
    double ss = 0;
    for (int o = 0; o < out; o++) {
      h[t * out + o] = bf2f(f2bf((float)m.ref[t * out + o]));
      ss += h[t * out + o] * h[t * out + o];
    }
    const double inv = 1.0 / sqrt(ss / out + eps);
    for (int o = 0; o < out; o++) y[t * out + o] = h[t * out + o] * inv * nw[o];
  }
  tpg_plan *p;
  MUST(tpg_plan_create(&p));
  tpg_slot sx, sw, sb, sr, sy, sp, sn;
  MUST(tpg_plan_add_slot(p, "x", TPG_BF16, TPG_MEM_DEVICE, pt.nx, &sx));
  MUST(tpg_plan_add_slot(p, "w", TPG_BF16, TPG_MEM_DEVICE, pt.nw, &sw));
  MUST(tpg_plan_add_slot(p, "b", TPG_BF16, TPG_MEM_DEVICE, (size_t)out, &sb));
  MUST(tpg_plan_add_slot(p, "res", TPG_BF16, TPG_MEM_DEVICE, (size_t)T * out, &sr));
  MUST(tpg_plan_add_slot(p, "y", TPG_BF16, TPG_MEM_DEVICE, (size_t)T * out, &sy));
  MUST(tpg_plan_add_slot(p, "part", TPG_BF16, TPG_MEM_SCRATCH, (size_t)T * out, &sp));
  MUST(tpg_plan_add_slot(p, "nw", TPG_BF16, TPG_MEM_DEVICE, (size_t)out, &sn));
  tpg_linear_desc d = TPG_LINEAR_DESC_INIT;
  d.kind = TPG_LINEAR_ROW;
  d.rank = r, d.nranks = R, d.tokens = T, d.in_features = in, d.out_features = out, d.algo = algo;
  d.x = (tpg_view){sx, 0, 0}, d.w = (tpg_view){sw, 0, 0}, d.bias = (tpg_view){sb, 0, 0};
  d.residual = (tpg_view){sr, 0, 0}, d.y = (tpg_view){sy, 0, 0};
  tpg_linear_norm e = TPG_LINEAR_NORM_INIT;
  e.partial = (tpg_view){sp, 0, 0}, e.residual_out = d.residual, e.norm_weight = (tpg_view){sn, 0, 0};
  e.norm_eps = eps;
  tpg_status st = tpg_plan_add_linear_norm(p, &d, &e, NULL, 0, NULL);
  RCHECK(c, st == TPG_SUCCESS, "row+norm: add: %s", tpg_last_error());
  void *dx = upload(pt.x, pt.nx), *dw = upload(pt.w, pt.nw), *db = upload(m.b, (size_t)out);
  void *dr = upload(m.res, (size_t)T * out), *dn = upload(nw, (size_t)out), *dy;
  CUDA_OK(cudaMalloc(&dy, (size_t)T * out * 2));
  tpg_binding b[6] = {{sx, dx}, {sw, dw}, {sb, db}, {sr, dr}, {sy, dy}, {sn, dn}};
  tpg_graph_config cfg = TPG_GRAPH_CONFIG_INIT;
  cfg.device = r, cfg.comm = comm, cfg.bindings = b, cfg.nbindings = 6, cfg.mode = mode;
  tpg_graph *g = NULL;
  if (st == TPG_SUCCESS) st = tpg_graph_create(p, &cfg, &g);
  RCHECK(c, st == TPG_SUCCESS, "row+norm M=%d %s: create: %s", T, mode_name(mode), tpg_last_error());
  for (int rep = 0; st == TPG_SUCCESS && rep < 2; rep++) { /* res is updated in place: reload it each time */
    void *hr = pack(TPG_BF16, m.res, (size_t)T * out, NULL);
    CUDA_OK(cudaMemcpy(dr, hr, (size_t)T * out * 2, cudaMemcpyHostToDevice));
    free(hr);
    poison(dy, (size_t)T * out * 2);
    RCHECK(c, tpg_graph_launch(g, NULL) == TPG_SUCCESS, "launch: %s", tpg_last_error());
    RCHECK(c, tpg_comm_wait(comm, NULL) == TPG_SUCCESS, "wait: %s", tpg_last_error());
    double ey, ry, eh, rh;
    const int by = norm_bad(dy, y, (size_t)T * out, R, &ey, &ry), bh = norm_bad(dr, h, (size_t)T * out, R, &eh, &rh);
    RCHECK(c, by == 0 && bh == 0 && ry <= 1e-2 && rh <= 1e-2,
           "row+norm M=%d %s %s: y %d out of bound (max %.2e, rel %.2e), residual %d (max %.2e, rel %.2e)", T,
           mode_name(mode), algo == TPG_ALGO_NCCL ? "nccl" : "auto", by, ey, ry, bh, eh, rh);
    if (r == 0 && rep == 0)
      printf("TP=%d %-22s M=%-2d mode %-8s %s: y max err %.2e rel %.2e, residual max %.2e rel %.2e\n", R,
             "row+norm (linear_norm)", T, mode_name(mode), algo == TPG_ALGO_NCCL ? "nccl" : "auto", ey, ry, eh, rh);
  }
  MUST(tpg_graph_destroy(g));
  void *bufs[6] = {dx, dw, db, dr, dn, dy};
  for (int i = 0; i < 6; i++) CUDA_OK(cudaFree(bufs[i]));
  tpg_plan_destroy(p);
  free(h);
  free(y);
  free(nw);
  part_free(&pt);
  whole_free(&m);
}

/* ---- the norm folded into the next linear (tpg_x_norm) -------------------- */

/* One rank, T <= TPG_NORM_FOLD_MAX_ROWS: linear_norm with norm->ssq writes h
 * (res, in place) and its rows' sums of squares; a column linear reads h
 * with x_norm and gives y2 = (RMSNorm(h) * nw) W2^T. Against fp64 from the
 * bf16 h the reference rounds (as the unfolded pair would store it):
 * |got - ref| <= 2^-8 |ref| (y2's rounding) + 4 * 2^-8 * sum_o |x'_o W2_jo|
 * (each normed input off by its rounding, half an ulp, plus h's own flip,
 * one ulp, scaled by nw / rms <= ~1.5). Relative norm <= 1e-2. On several
 * ranks, or past the rows, the fold is refused with its rule. */
static void run_fold(tpg_rank *c, int T, tpg_graph_mode mode, uint64_t seed) {
  const int R = c->nranks, in = 512, out = 256, out2 = 384;
  const float eps = 1e-5f;
  const spec s = {"row+norm", TPG_LINEAR_ROW, TPG_ACT_NONE, 1, 0, 1, TPG_ALGO_AUTO};
  whole m;
  whole_make(&m, &s, T, in, out, seed); /* m.ref = x W^T + b + res */
  float *nw = rnd_bf16(seed + 9, (size_t)out, 0.2f), *w2 = rnd_bf16(seed + 11, (size_t)out2 * out, 0.06f);
  for (int o = 0; o < out; o++) nw[o] += 1.0f;
  free(pack(TPG_BF16, nw, (size_t)out, nw));
  double *h = malloc(sizeof(double) * (size_t)T * out), *xn = malloc(sizeof(double) * (size_t)T * out);
  double *y2 = malloc(sizeof(double) * (size_t)T * out2), *mag = malloc(sizeof(double) * (size_t)T * out2);
  for (int t = 0; t < T; t++) {
    double ss = 0;
    for (int o = 0; o < out; o++) {
      h[t * out + o] = bf2f(f2bf((float)m.ref[t * out + o]));
      ss += h[t * out + o] * h[t * out + o];
    }
    for (int o = 0; o < out; o++) xn[t * out + o] = h[t * out + o] / sqrt(ss / out + eps) * nw[o];
    for (int j = 0; j < out2; j++) {
      double a = 0, b = 0;
      for (int o = 0; o < out; o++) a += xn[t * out + o] * w2[j * out + o], b += fabs(xn[t * out + o] * w2[j * out + o]);
      y2[t * out2 + j] = a, mag[t * out2 + j] = b;
    }
  }
  tpg_plan *p;
  MUST(tpg_plan_create(&p));
  tpg_slot sx, sw, sb, sr, sn, sq, sw2, sy2;
  MUST(tpg_plan_add_slot(p, "x", TPG_BF16, TPG_MEM_DEVICE, (size_t)T * in, &sx));
  MUST(tpg_plan_add_slot(p, "w", TPG_BF16, TPG_MEM_DEVICE, (size_t)out * in, &sw));
  MUST(tpg_plan_add_slot(p, "b", TPG_BF16, TPG_MEM_DEVICE, (size_t)out, &sb));
  MUST(tpg_plan_add_slot(p, "res", TPG_BF16, TPG_MEM_DEVICE, (size_t)T * out, &sr));
  MUST(tpg_plan_add_slot(p, "nw", TPG_BF16, TPG_MEM_DEVICE, (size_t)out, &sn));
  MUST(tpg_plan_add_slot(p, "ssq", TPG_F32, TPG_MEM_SCRATCH, (size_t)T * TPG_NORM_FOLD_GROUPS(out), &sq));
  MUST(tpg_plan_add_slot(p, "w2", TPG_BF16, TPG_MEM_DEVICE, (size_t)out2 * out, &sw2));
  MUST(tpg_plan_add_slot(p, "y2", TPG_BF16, TPG_MEM_DEVICE, (size_t)T * out2, &sy2));
  tpg_linear_desc d = TPG_LINEAR_DESC_INIT;
  d.kind = TPG_LINEAR_ROW;
  d.rank = c->rank, d.nranks = R, d.tokens = T, d.in_features = in, d.out_features = out;
  d.x = (tpg_view){sx, 0, 0}, d.w = (tpg_view){sw, 0, 0}, d.bias = (tpg_view){sb, 0, 0};
  d.residual = (tpg_view){sr, 0, 0};
  tpg_linear_norm e = TPG_LINEAR_NORM_INIT;
  e.residual_out = d.residual, e.norm_weight = (tpg_view){sn, 0, 0}, e.norm_eps = eps, e.ssq = (tpg_view){sq, 0, 0};
  tpg_node n;
  tpg_status st = tpg_plan_add_linear_norm(p, &d, &e, NULL, 0, &n);
  if (R > 1 || T > TPG_NORM_FOLD_MAX_ROWS) {
    RCHECK(c, st == TPG_ERROR_INVALID_ARGUMENT && strstr(tpg_last_error(), R > 1 ? "one rank" : "at most 16 rows"),
           "fold refused at TP %d M=%d: %s", R, T, tpg_last_error());
  } else {
    RCHECK(c, st == TPG_SUCCESS, "fold: add: %s", tpg_last_error());
    tpg_linear_desc d2 = TPG_LINEAR_DESC_INIT;
    d2.tokens = T, d2.in_features = out, d2.out_features = out2;
    d2.x = d.residual, d2.w = (tpg_view){sw2, 0, 0}, d2.y = (tpg_view){sy2, 0, 0};
    d2.x_norm = (tpg_x_norm){e.ssq, e.norm_weight, eps};
    if (st == TPG_SUCCESS) st = tpg_plan_add_linear(p, &d2, &n, 1, NULL);
    RCHECK(c, st == TPG_SUCCESS, "fold: consumer: %s", tpg_last_error());
    void *dx = upload(m.x, (size_t)T * in), *dw = upload(m.w, (size_t)out * in), *db = upload(m.b, (size_t)out);
    void *dr = upload(m.res, (size_t)T * out), *dn = upload(nw, (size_t)out), *dw2 = upload(w2, (size_t)out2 * out);
    void *dy2;
    CUDA_OK(cudaMalloc(&dy2, (size_t)T * out2 * 2));
    tpg_binding b[7] = {{sx, dx}, {sw, dw}, {sb, db}, {sr, dr}, {sn, dn}, {sw2, dw2}, {sy2, dy2}};
    tpg_graph_config cfg = TPG_GRAPH_CONFIG_INIT;
    cfg.device = c->rank, cfg.bindings = b, cfg.nbindings = 7, cfg.mode = mode;
    tpg_graph *g = NULL;
    if (st == TPG_SUCCESS) st = tpg_graph_create(p, &cfg, &g);
    RCHECK(c, st == TPG_SUCCESS, "fold M=%d %s: create: %s", T, mode_name(mode), tpg_last_error());
    for (int rep = 0; st == TPG_SUCCESS && rep < 2; rep++) { /* res is updated in place: reload it */
      void *hr = pack(TPG_BF16, m.res, (size_t)T * out, NULL);
      CUDA_OK(cudaMemcpy(dr, hr, (size_t)T * out * 2, cudaMemcpyHostToDevice));
      free(hr);
      poison(dy2, (size_t)T * out2 * 2);
      RCHECK(c, tpg_graph_launch(g, NULL) == TPG_SUCCESS, "launch: %s", tpg_last_error());
      CUDA_OK(cudaDeviceSynchronize());
      float *f = malloc(sizeof(float) * (size_t)T * out2);
      void *hy = malloc((size_t)T * out2 * 2);
      CUDA_OK(cudaMemcpy(hy, dy2, (size_t)T * out2 * 2, cudaMemcpyDeviceToHost));
      unpack(TPG_BF16, hy, (size_t)T * out2, f);
      int bad = 0;
      double emax = 0;
      for (size_t i = 0; i < (size_t)T * out2; i++) {
        const double err = fabs((double)f[i] - y2[i]), tol = ldexp(1.0, -8) * (fabs(y2[i]) + 4 * mag[i]);
        bad += !(err <= tol);
        if (!(err <= emax)) emax = err;
      }
      const double rel = rel_err(f, y2, (size_t)T * out2);
      double eh, rh;
      const int bh = norm_bad(dr, h, (size_t)T * out, 1, &eh, &rh);
      RCHECK(c, bad == 0 && bh == 0 && rel <= 1e-2 && rh <= 1e-2,
             "fold M=%d %s: y2 %d out of bound (max %.2e, rel %.2e), h %d (max %.2e, rel %.2e)", T, mode_name(mode),
             bad, emax, rel, bh, eh, rh);
      if (rep == 0)
        printf("TP=1 %-22s M=%-2d mode %-8s: y2 max err %.2e rel %.2e, h max %.2e rel %.2e\n", "norm folded (x_norm)",
               T, mode_name(mode), emax, rel, eh, rh);
      free(f);
      free(hy);
    }
    if (g) MUST(tpg_graph_destroy(g));
    void *bufs[7] = {dx, dw, db, dr, dn, dw2, dy2};
    for (int i = 0; i < 7; i++) CUDA_OK(cudaFree(bufs[i]));
  }
  tpg_plan_destroy(p);
  free(h), free(xn), free(y2), free(mag), free(nw), free(w2);
  whole_free(&m);
}

static const spec specs[] = {
    {"column+bias", TPG_LINEAR_COLUMN, TPG_ACT_NONE, 1, 0, 0, TPG_ALGO_AUTO},
    {"column gelu+bias", TPG_LINEAR_COLUMN, TPG_ACT_GELU, 1, 0, 0, TPG_ALGO_AUTO},
    {"column swiglu", TPG_LINEAR_COLUMN, TPG_ACT_SWIGLU, 0, 0, 0, TPG_ALGO_AUTO},
    {"column gather", TPG_LINEAR_COLUMN, TPG_ACT_NONE, 0, 1, 0, TPG_ALGO_AUTO},
    {"column gather silu+bias", TPG_LINEAR_COLUMN, TPG_ACT_SILU, 1, 1, 0, TPG_ALGO_NCCL},
    {"row bias+residual", TPG_LINEAR_ROW, TPG_ACT_NONE, 1, 0, 1, TPG_ALGO_AUTO},
    {"row nccl", TPG_LINEAR_ROW, TPG_ACT_NONE, 0, 0, 0, TPG_ALGO_NCCL},
};

static void rank_body(tpg_rank *c) {
  tpg_comm *comm = tpg_rank_comm(c);
  if (!comm) return;
  static const int Ms[] = {1, 5, 64};
  uint64_t seed = 100;
  for (size_t mi = 0; mi < sizeof Ms / sizeof Ms[0]; mi++)
    for (int mode = 0; mode < 3; mode++) {
      for (size_t k = 0; k < sizeof specs / sizeof specs[0]; k++)
        run_layer(c, comm, &specs[k], Ms[mi], (tpg_graph_mode)mode, seed += 10);
      run_pairs(c, comm, Ms[mi], (tpg_graph_mode)mode, seed += 100);
      run_norm(c, comm, Ms[mi], (tpg_graph_mode)mode, TPG_ALGO_AUTO, seed += 10);
      run_norm(c, comm, Ms[mi], (tpg_graph_mode)mode, TPG_ALGO_NCCL, seed += 10);
      run_fold(c, Ms[mi], (tpg_graph_mode)mode, seed += 10);
    }
  for (int mode = 0; mode < 3; mode++) run_fold(c, 12, (tpg_graph_mode)mode, seed += 10); /* the m16 GEMVs */
  static const spec shard_specs[] = {
      {"column swiglu+bias", TPG_LINEAR_COLUMN, TPG_ACT_SWIGLU, 1, 0, 0, TPG_ALGO_AUTO},
      {"column", TPG_LINEAR_COLUMN, TPG_ACT_NONE, 0, 0, 0, TPG_ALGO_AUTO},
      {"row+bias", TPG_LINEAR_ROW, TPG_ACT_NONE, 1, 0, 0, TPG_ALGO_AUTO},
  };
  for (size_t k = 0; k < sizeof shard_specs / sizeof shard_specs[0]; k++) check_shard(c, &shard_specs[k]);
  RCHECK(c, tpg_comm_destroy(comm) == TPG_SUCCESS, "comm destroy: %s", tpg_last_error());
}

int main(int argc, char **argv) { return tpg_ranks_main(argc, argv, rank_body, 0); }
