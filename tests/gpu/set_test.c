/* set_test.c - graph sets (tpg_graph_set) on real GPUs, every rank: one
 * graph per batch size and one retargeted exec, against an fp64 reference.
 *
 * The step at batch size B (TP = the ranks visible, Megatron split):
 *   t  = x W1_r^T                       column linear into scratch [B, F/R]
 *   h  = sum_r t_r W2_r^T + res         tpg_plan_add_linear_norm: res = h
 *   y  = RMSNorm(h) * nw                (in place), y the normed rows
 * For a sequence of batches (sizes 1, 5, 16, 64: the GEMMs change kernels
 * between them, GEMV to tensor-map), each launch must give the picked
 * size's rows of y and res within the bound below and leave the rows past
 * the size as they were (poisoned y, untouched res): a graph, or an exec
 * retargeted, that ran another size fails. The retargeted exec goes back and
 * forth between sizes through the exec setters (other kernels, grids,
 * counts). Where the library refuses to retarget (kernels whose launch
 * attributes differ across sizes), the refusal must name a node, and the
 * largest range of sizes it accepts is checked instead.
 */
#include "tests/gpu/ranks.h"

enum { H = 256, F = 512, NS = 4, MAXB = 64 };
static const int g_sizes[NS] = {1, 5, 16, 64};
static const float EPS = 1e-5f;
#define ARENA_ROUND(b) (((size_t)(b) + 255) & ~(size_t)255) /* each scratch slot in the set's arena */

typedef struct {
  int R, r;
  float *x, *w1, *w2, *res, *nw;     /* whole model (host) */
  void *dx, *dw1, *dw2, *dres, *dnw, *dy;
  double *h, *y;                     /* reference [MAXB, H] */
  tpg_binding b[6];
} model;

/* t = bf16(x W1^T) per rank slice, h = bf16(sum t W2^T + res), y = rms(h) nw:
 * the bf16 roundings the device stores (t, h) are the reference's too. */
static void reference(model *m) {
  double *t = malloc(sizeof(double) * MAXB * F);
  for (int b = 0; b < MAXB; b++)
    for (int f = 0; f < F; f++) {
      double z = 0;
      for (int k = 0; k < H; k++) z += (double)m->x[b * H + k] * m->w1[f * H + k];
      t[b * F + f] = bf2f(f2bf((float)z));
    }
  for (int b = 0; b < MAXB; b++) {
    double ss = 0;
    for (int o = 0; o < H; o++) {
      double z = m->res[b * H + o];
      for (int f = 0; f < F; f++) z += t[b * F + f] * m->w2[o * F + f];
      m->h[b * H + o] = bf2f(f2bf((float)z));
      ss += m->h[b * H + o] * m->h[b * H + o];
    }
    const double inv = 1.0 / sqrt(ss / H + EPS);
    for (int o = 0; o < H; o++) m->y[b * H + o] = m->h[b * H + o] * inv * m->nw[o];
  }
  free(t);
}

static void model_make(model *m, int r, int R) {
  memset(m, 0, sizeof *m);
  m->r = r, m->R = R;
  m->x = rnd_bf16(1, (size_t)MAXB * H, 1.0f);
  m->w1 = rnd_bf16(2, (size_t)F * H, 1.0f / 16.0f);
  m->w2 = rnd_bf16(3, (size_t)H * F, 1.0f / 22.0f);
  m->res = rnd_bf16(4, (size_t)MAXB * H, 1.0f);
  m->nw = rnd_bf16(5, H, 0.2f);
  for (int o = 0; o < H; o++) m->nw[o] += 1.0f;
  free(pack(TPG_BF16, m->nw, H, m->nw));
  m->h = malloc(sizeof(double) * MAXB * H);
  m->y = malloc(sizeof(double) * MAXB * H);
  reference(m);
  const int Fr = F / R;
  float *w1r = malloc(sizeof(float) * (size_t)Fr * H), *w2r = malloc(sizeof(float) * (size_t)H * Fr);
  memcpy(w1r, m->w1 + (size_t)r * Fr * H, sizeof(float) * (size_t)Fr * H);
  for (int o = 0; o < H; o++) memcpy(w2r + (size_t)o * Fr, m->w2 + (size_t)o * F + r * Fr, sizeof(float) * Fr);
  m->dx = upload(m->x, (size_t)MAXB * H);
  m->dw1 = upload(w1r, (size_t)Fr * H);
  m->dw2 = upload(w2r, (size_t)H * Fr);
  m->dres = upload(m->res, (size_t)MAXB * H);
  m->dnw = upload(m->nw, H);
  CUDA_OK(cudaMalloc(&m->dy, (size_t)MAXB * H * 2));
  free(w1r);
  free(w2r);
}

static void model_free(model *m) {
  void *d[6] = {m->dx, m->dw1, m->dw2, m->dres, m->dnw, m->dy};
  for (int i = 0; i < 6; i++) CUDA_OK(cudaFree(d[i]));
  free(m->x), free(m->w1), free(m->w2), free(m->res), free(m->nw), free(m->h), free(m->y);
}

/* The builder: the step at batch size B on the largest size's buffers. */
static tpg_status build(void *user, int B, tpg_graph_set_step *out) {
  model *m = user;
  tpg_plan *p;
  tpg_status st = tpg_plan_create(&p);
  if (st != TPG_SUCCESS) return st;
  out->plan = p;
  tpg_slot x, w1, w2, res, nw, y, t, part;
#define T(call) if ((st = (call)) != TPG_SUCCESS) return st
  T(tpg_plan_add_slot(p, "x", TPG_BF16, TPG_MEM_DEVICE, (size_t)MAXB * H, &x));
  T(tpg_plan_add_slot(p, "w1", TPG_BF16, TPG_MEM_DEVICE, (size_t)F / m->R * H, &w1));
  T(tpg_plan_add_slot(p, "w2", TPG_BF16, TPG_MEM_DEVICE, (size_t)H * F / m->R, &w2));
  T(tpg_plan_add_slot(p, "res", TPG_BF16, TPG_MEM_DEVICE, (size_t)MAXB * H, &res));
  T(tpg_plan_add_slot(p, "nw", TPG_BF16, TPG_MEM_DEVICE, H, &nw));
  T(tpg_plan_add_slot(p, "y", TPG_BF16, TPG_MEM_DEVICE, (size_t)MAXB * H, &y));
  T(tpg_plan_add_slot(p, "t", TPG_BF16, TPG_MEM_SCRATCH, (size_t)B * F / m->R, &t));
  T(tpg_plan_add_slot(p, "part", TPG_BF16, TPG_MEM_SCRATCH, (size_t)B * H, &part));
  tpg_linear_desc d = TPG_LINEAR_DESC_INIT;
  d.kind = TPG_LINEAR_COLUMN, d.rank = m->r, d.nranks = m->R, d.tokens = B, d.in_features = H, d.out_features = F;
  d.x = (tpg_view){x, 0, 0}, d.w = (tpg_view){w1, 0, 0}, d.y = (tpg_view){t, 0, 0};
  tpg_node n;
  T(tpg_plan_add_linear(p, &d, NULL, 0, &n));
  d.kind = TPG_LINEAR_ROW, d.in_features = F, d.out_features = H;
  d.x = (tpg_view){t, 0, 0}, d.w = (tpg_view){w2, 0, 0}, d.y = (tpg_view){y, 0, 0}, d.residual = (tpg_view){res, 0, 0};
  tpg_linear_norm e = TPG_LINEAR_NORM_INIT;
  e.partial = (tpg_view){part, 0, 0}, e.residual_out = d.residual, e.norm_weight = (tpg_view){nw, 0, 0};
  e.norm_eps = EPS;
  T(tpg_plan_add_linear_norm(p, &d, &e, &n, 1, NULL));
#undef T
  const tpg_slot s[6] = {x, w1, w2, res, nw, y};
  void *ptr[6] = {m->dx, m->dw1, m->dw2, m->dres, m->dnw, m->dy};
  for (int i = 0; i < 6; i++) m->b[i] = (tpg_binding){s[i], ptr[i]};
  out->bindings = m->b;
  out->nbindings = 6;
  return TPG_SUCCESS;
}

/* Rows [0, size) within (R + 8) / 2 ulps of bf16 (2^-7 of max(|ref|, 1)):
 * the partial sums stored in bf16 (R half-ulps), t's and h's roundings that
 * may flip (2 ulps), y's own rounding, scaled by nw / rms; rows past size as
 * they were (y poisoned, res the input). Returns the wrong elements. */
static int check_rows(const model *m, int size, double *max_err) {
  uint16_t *y = malloc((size_t)MAXB * H * 2), *res = malloc((size_t)MAXB * H * 2);
  CUDA_OK(cudaMemcpy(y, m->dy, (size_t)MAXB * H * 2, cudaMemcpyDeviceToHost));
  CUDA_OK(cudaMemcpy(res, m->dres, (size_t)MAXB * H * 2, cudaMemcpyDeviceToHost));
  int bad = 0;
  for (int i = 0; i < MAXB * H; i++) {
    if (i >= size * H) {
      bad += y[i] != 0xffff || bf2f(res[i]) != m->res[i];
      continue;
    }
    const double ey = fabs(bf2f(y[i]) - m->y[i]), eh = fabs(bf2f(res[i]) - m->h[i]);
    const double ty = (m->R + 8) * 0.5 * ldexp(1.0, -7) * fmax(fabs(m->y[i]), 1.0);
    const double th = (m->R + 8) * 0.5 * ldexp(1.0, -7) * fmax(fabs(m->h[i]), 1.0);
    bad += !(ey <= ty) + !(eh <= th);
    *max_err = fmax(*max_err, fmax(ey, eh));
  }
  free(y);
  free(res);
  return bad;
}

/* A batch sequence through the set: every size, back and forth. */
static void run_set(tpg_rank *c, tpg_comm *comm, model *m, tpg_graph_set *set, int maxb, const char *what) {
  static const int batches[] = {5, 64, 1, 16, 3, 64, 12, 1, 40, 5};
  double max_err = 0;
  int wrong = 0, runs = 0;
  for (size_t k = 0; k < sizeof batches / sizeof batches[0]; k++) {
    if (batches[k] > maxb) continue;
    int size = 0;
    tpg_graph *g = NULL;
    RCHECK(c, tpg_graph_set_pick(set, batches[k], &size, &g) == TPG_SUCCESS, "%s: pick %d: %s", what, batches[k],
           tpg_last_error());
    if (!g) return;
    void *hr = pack(TPG_BF16, m->res, (size_t)MAXB * H, NULL); /* res is updated in place */
    CUDA_OK(cudaMemcpy(m->dres, hr, (size_t)MAXB * H * 2, cudaMemcpyHostToDevice));
    free(hr);
    poison(m->dy, (size_t)MAXB * H * 2);
    RCHECK(c, tpg_graph_launch(g, NULL) == TPG_SUCCESS, "%s: launch: %s", what, tpg_last_error());
    RCHECK(c, tpg_comm_wait(comm, NULL) == TPG_SUCCESS, "%s: wait: %s", what, tpg_last_error());
    const int bad = check_rows(m, size, &max_err);
    RCHECK(c, bad == 0, "%s: batch %d (size %d): %d elements wrong", what, batches[k], size, bad);
    wrong += bad;
    runs++;
  }
  if (c->rank == 0)
    printf("TP=%d %-34s %2d launches over sizes 1..%d: max err %.2e, %d wrong\n", c->nranks, what, runs, maxb,
           max_err, wrong);
}

static void rank_body(tpg_rank *c) {
  tpg_comm *comm = tpg_rank_comm(c);
  if (!comm) return;
  model m;
  model_make(&m, c->rank, c->nranks);
  tpg_graph_config cfg = TPG_GRAPH_CONFIG_INIT;
  cfg.device = c->rank;
  cfg.comm = comm;
  tpg_graph_set *set = NULL;
  tpg_status st = tpg_graph_set_create(g_sizes, NS, build, &m, &cfg, 0, &set);
  RCHECK(c, st == TPG_SUCCESS, "per size: create: %s", tpg_last_error());
  if (st == TPG_SUCCESS) {
    tpg_graph_set_info si;
    MUST(tpg_graph_set_get_info(set, &si, sizeof si));
    const size_t want = ARENA_ROUND((size_t)MAXB * F / c->nranks * 2) + ARENA_ROUND((size_t)MAXB * H * 2);
    RCHECK(c, si.graphs == NS && si.arena_bytes == want, "per size: %d graphs, arena %zu (want %d, %zu)", si.graphs,
           si.arena_bytes, NS, want);
    if (c->rank == 0)
      printf("TP=%d per size: built in %.1f ms, arena %zu B, own %zu B, measured %zu B\n", c->nranks,
             si.build_us / 1e3, si.arena_bytes, si.own_bytes, si.measured_bytes);
    run_set(c, comm, &m, set, MAXB, "one graph per size");
    MUST(tpg_graph_set_destroy(set));
  }
  /* Retargeting: over all sizes, or the largest range the library takes. */
  for (int n = NS; n >= 2; n--) {
    set = NULL;
    st = tpg_graph_set_create(g_sizes, n, build, &m, &cfg, TPG_GRAPH_SET_RETARGET, &set);
    if (st == TPG_ERROR_UNSUPPORTED) {
      RCHECK(c, strstr(tpg_last_error(), "node ") != NULL, "retarget refusal names no node: %s", tpg_last_error());
      if (c->rank == 0) printf("TP=%d retarget over sizes 1..%d refused: %s\n", c->nranks, g_sizes[n - 1],
                               tpg_last_error());
      continue;
    }
    RCHECK(c, st == TPG_SUCCESS, "retarget: create: %s", tpg_last_error());
    if (st == TPG_SUCCESS) run_set(c, comm, &m, set, g_sizes[n - 1], "one exec, retargeted");
    MUST(tpg_graph_set_destroy(set));
    break;
  }
  model_free(&m);
  RCHECK(c, tpg_comm_destroy(comm) == TPG_SUCCESS, "comm destroy: %s", tpg_last_error());
}

int main(int argc, char **argv) { return tpg_ranks_main(argc, argv, rank_body, 0); }
