/* workspace_test.c - GEMM workspaces shared (graphbuild/workspace.c) on a
 * GPU: one graph set whose sizes' GEMMs keep their counters and scratch in
 * one arena, checked element-wise against fp64 on every launch.
 *
 * The step at batch size B (bf16; TPG_GRAPH_PDL; stream-K always, so that
 * every tensor-map GEMM of ours keeps counters and partials):
 *   y1 = x  W1^T   [B, 4096]  K  512
 *   y2 = y1 W2^T   [B, 1024]  K 4096
 *   y3 = y2 W3^T   [B, 4096]  K 1024
 *   yb = x  Wb^T   [B, 1024]  K  512   on a branch of its own, beside the chain
 * each on cuBLASLt past 32 rows (the rule's stated row), ours at 32 rows or
 * fewer: stream-K at 24, the split GEMV at 1 and 8.
 * The chain shares one buffer, the branch has its own; every size's k-th
 * buffer lies at one place of the arena. Sizes are launched in an order
 * that switches kernels and families at every step (96, 1, 40, 24, 8, ...), each
 * launch with every output poisoned first: a kernel that found another's
 * dirt where it keeps its counters (stream-K, split GEMV) computes garbage
 * or hangs, and the rows past B must stay poisoned. Each stage is checked
 * against fp64 from the inputs the device gave it, per element within
 * 2 u |ref| + (K/16 + 16) 2^-23 sum |x w| (fp32 accumulation in any order or
 * split; u = 2^-8, bf16 output), and by relative norm. The whole again with
 * TPG_GEMM_WORKSPACE_SHARE=0 (every node its own buffer): the same results,
 * the memory of both in the table last.
 *
 *   workspace_test     (cuBLASLt from LD_LIBRARY_PATH: tests/gpu/batching_check.sh)
 */
#define _POSIX_C_SOURCE 200809L
#include "tests/gpu/gpu_common.h"

enum { K0 = 512, N1 = 4096, N2 = 1024, MAXB = 96, NS = 5 };
static const int g_sizes[NS] = {1, 8, 24, 40, 96};
static const int g_order[] = {96, 1, 40, 24, 8, 96, 24, 40, 1, 8, 40, 96, 24};

static tpg_view V(tpg_slot s) { return (tpg_view){s, 0, 0}; }

/* Weights and inputs (host floats, bf16-exact) and device buffers. */
typedef struct model {
  float *x, *w1, *w2, *w3, *wb;
  void *dx, *dw1, *dw2, *dw3, *dwb, *dy1, *dy2, *dy3, *dyb;
  tpg_slot s[9];
  tpg_binding b[9];
} model;

static void model_make(model *m) {
  memset(m, 0, sizeof *m);
  m->x = rnd_bf16(11, (size_t)MAXB * K0, 1.0f);
  m->w1 = rnd_bf16(12, (size_t)N1 * K0, 1.7f / sqrtf((float)K0));
  m->w2 = rnd_bf16(13, (size_t)N2 * N1, 1.7f / sqrtf((float)N1));
  m->w3 = rnd_bf16(14, (size_t)N1 * N2, 1.7f / sqrtf((float)N2));
  m->wb = rnd_bf16(15, (size_t)N2 * K0, 1.7f / sqrtf((float)K0));
  m->dx = upload(m->x, (size_t)MAXB * K0);
  m->dw1 = upload(m->w1, (size_t)N1 * K0);
  m->dw2 = upload(m->w2, (size_t)N2 * N1);
  m->dw3 = upload(m->w3, (size_t)N1 * N2);
  m->dwb = upload(m->wb, (size_t)N2 * K0);
  CUDA_OK(cudaMalloc(&m->dy1, (size_t)MAXB * N1 * 2));
  CUDA_OK(cudaMalloc(&m->dy2, (size_t)MAXB * N2 * 2));
  CUDA_OK(cudaMalloc(&m->dy3, (size_t)MAXB * N1 * 2));
  CUDA_OK(cudaMalloc(&m->dyb, (size_t)MAXB * N2 * 2));
}

static void model_free(model *m) {
  free(m->x), free(m->w1), free(m->w2), free(m->w3), free(m->wb);
  cudaFree(m->dx), cudaFree(m->dw1), cudaFree(m->dw2), cudaFree(m->dw3), cudaFree(m->dwb);
  cudaFree(m->dy1), cudaFree(m->dy2), cudaFree(m->dy3), cudaFree(m->dyb);
}

static tpg_status gemm(tpg_plan *p, int m, int n, int k, tpg_slot x, tpg_slot w, tpg_slot y, const tpg_node *dep,
                       tpg_node *out) {
  tpg_gemm_desc d = TPG_GEMM_DESC_INIT;
  d.m = m, d.n = n, d.k = k;
  d.x = V(x), d.w = V(w), d.y = V(y);
  return tpg_plan_add_gemm(p, &d, dep, dep ? 1 : 0, out);
}

/* The step at size B and its bindings (the set's builder). */
static tpg_status build(void *user, int B, tpg_graph_set_step *out) {
  model *m = user;
  static const char *names[9] = {"x", "w1", "w2", "w3", "wb", "y1", "y2", "y3", "yb"};
  const size_t counts[9] = {(size_t)B * K0, (size_t)N1 * K0, (size_t)N2 * N1, (size_t)N1 * N2, (size_t)N2 * K0,
                            (size_t)B * N1, (size_t)B * N2, (size_t)B * N1, (size_t)B * N2};
  void *const bufs[9] = {m->dx, m->dw1, m->dw2, m->dw3, m->dwb, m->dy1, m->dy2, m->dy3, m->dyb};
  tpg_plan *p = NULL;
  tpg_node g1, g2;
  tpg_status st = tpg_plan_create(&p);
  out->plan = p; /* the set's from here on */
  for (int i = 0; i < 9 && st == TPG_SUCCESS; i++) {
    st = tpg_plan_add_slot(p, names[i], TPG_BF16, TPG_MEM_DEVICE, counts[i], &m->s[i]);
    m->b[i] = (tpg_binding){m->s[i], bufs[i]};
  }
  const tpg_slot *s = m->s;
  if (st == TPG_SUCCESS) st = gemm(p, B, N1, K0, s[0], s[1], s[5], NULL, &g1);
  if (st == TPG_SUCCESS) st = gemm(p, B, N2, N1, s[5], s[2], s[6], &g1, &g2);
  if (st == TPG_SUCCESS) st = gemm(p, B, N1, N2, s[6], s[3], s[7], &g2, NULL);
  if (st == TPG_SUCCESS) st = gemm(p, B, N2, K0, s[0], s[4], s[8], NULL, NULL);
  out->bindings = m->b;
  out->nbindings = 9;
  return st;
}

/* Worst |got - ref| / bound of y [B, n] = x w^T (x host floats [B, k]) and
 * its relative norm; rows B.. of the buffer must still be poisoned. */
static double stage(const void *dy, const float *x, const float *w, int B, int n, int k, double *rel, int *kept) {
  const size_t all = (size_t)MAXB * n;
  uint16_t *h = malloc(all * 2);
  float *got = malloc(all * 4);
  double *ref = malloc((size_t)B * n * sizeof *ref), worst = 0;
  CUDA_OK(cudaMemcpy(h, dy, all * 2, cudaMemcpyDeviceToHost));
  unpack(TPG_BF16, h, all, got);
  const double u = ldexp(1.0, -8), eacc = (k / 16.0 + 16) * ldexp(1.0, -23);
  for (int r = 0; r < B; r++)
    for (int c = 0; c < n; c++) {
      double z = 0, S = 0;
      for (int q = 0; q < k; q++) {
        const double pq = (double)x[(size_t)r * k + q] * w[(size_t)c * k + q];
        z += pq, S += fabs(pq);
      }
      const size_t at = (size_t)r * n + c;
      ref[at] = z;
      const double e = isfinite(got[at]) ? fabs(got[at] - z) / (2 * u * fabs(z) + eacc * S) : INFINITY;
      if (e > worst) worst = e;
    }
  *rel = rel_err(got, ref, (size_t)B * n);
  *kept = 1;
  for (size_t i = (size_t)B * n; i < all; i++) *kept &= h[i] == 0xFFFF;
  free(h), free(got), free(ref);
  return worst;
}

/* The device's values of y [B, n] as floats (the next stage's input). */
static float *fetch(const void *dy, int B, int n) {
  const size_t cnt = (size_t)B * n;
  uint16_t *h = malloc(cnt * 2);
  float *f = malloc(cnt * 4);
  CUDA_OK(cudaMemcpy(h, dy, cnt * 2, cudaMemcpyDeviceToHost));
  unpack(TPG_BF16, h, cnt, f);
  free(h);
  return f;
}

/* One launch at size B, every stage checked; returns the worst error/bound. */
static double run_one(model *m, tpg_graph_set *set, int B) {
  int size = 0;
  tpg_graph *g = NULL;
  double worst = 0, rel[4];
  int kept[4];
  MUST(tpg_graph_set_pick(set, B, &size, &g));
  CHECK(size == B);
  poison(m->dy1, (size_t)MAXB * N1 * 2), poison(m->dy2, (size_t)MAXB * N2 * 2);
  poison(m->dy3, (size_t)MAXB * N1 * 2), poison(m->dyb, (size_t)MAXB * N2 * 2);
  CUDA_OK(cudaDeviceSynchronize());
  MUST(tpg_graph_launch(g, NULL));
  CUDA_OK(cudaDeviceSynchronize());
  float *y1 = fetch(m->dy1, B, N1), *y2 = fetch(m->dy2, B, N2);
  const double e[4] = {stage(m->dy1, m->x, m->w1, B, N1, K0, &rel[0], &kept[0]),
                       stage(m->dy2, y1, m->w2, B, N2, N1, &rel[1], &kept[1]),
                       stage(m->dy3, y2, m->w3, B, N1, N2, &rel[2], &kept[2]),
                       stage(m->dyb, m->x, m->wb, B, N2, K0, &rel[3], &kept[3])};
  for (int i = 0; i < 4; i++) {
    if (!(e[i] <= 1.0 && rel[i] <= 1e-2 && kept[i]))
      fprintf(stderr, "size %d stage %d: worst %.3g of the bound, rel %.3g, rows past B %s\n", B, i + 1, e[i], rel[i],
              kept[i] ? "kept" : "WRITTEN");
    CHECK(e[i] <= 1.0 && rel[i] <= 1e-2 && kept[i]);
    if (e[i] > worst) worst = e[i];
  }
  free(y1), free(y2);
  return worst;
}

typedef struct row {
  size_t arena, ws, own, measured;
  int lt_nodes, buffers;
  double worst;
} row;

/* The set with workspace sharing on or off: built, every launch of
 * g_order checked, its memory into *r. */
static void run_set(model *m, int share, row *r) {
  tpg_graph_config cfg = TPG_GRAPH_CONFIG_INIT;
  tpg_graph_set *set = NULL;
  tpg_graph_set_info si;
  cfg.flags = TPG_GRAPH_PDL;
  cfg.gemm_streamk = TPG_STREAMK_ALWAYS;
  setenv("TPG_GEMM_WORKSPACE_SHARE", share ? "1" : "0", 1);
  MUST(tpg_graph_set_create(g_sizes, NS, build, m, &cfg, 0, &set));
  unsetenv("TPG_GEMM_WORKSPACE_SHARE");
  MUST(tpg_graph_set_get_info(set, &si, sizeof si));
  memset(r, 0, sizeof *r);
  r->arena = si.arena_bytes, r->ws = si.workspace_bytes, r->own = si.own_bytes, r->measured = si.measured_bytes;
  for (int i = 0; i < NS; i++) {
    int size;
    tpg_graph *g;
    tpg_graph_info gi;
    MUST(tpg_graph_set_pick(set, g_sizes[i], &size, &g));
    MUST(tpg_graph_get_info(g, &gi, sizeof gi));
    printf("%s size %2d: %d cuBLASLt + %d ours GEMMs, %d workspace buffers, %zu KiB\n", share ? "share" : "own  ",
           size, gi.gemm_cublaslt_nodes, gi.gemm_ours_nodes, gi.gemm_workspaces, gi.gemm_workspace_bytes >> 10);
    r->lt_nodes += gi.gemm_cublaslt_nodes;
    if (gi.gemm_workspaces > r->buffers) r->buffers = gi.gemm_workspaces;
    /* cuBLASLt loaded: every GEMM past 32 rows, none below */
    CHECK(size > 32 ? gi.gemm_cublaslt_nodes == 4 && gi.gemm_ours_nodes == 0 : gi.gemm_cublaslt_nodes == 0);
    if (share) CHECK(gi.gemm_workspaces <= 2 + gi.gemm_cutlass_nodes); /* the chain's, the branch's; CUTLASS stream-K alone */
  }
  for (size_t k = 0; k < sizeof g_order / sizeof g_order[0]; k++) {
    const double w = run_one(m, set, g_order[k]);
    if (w > r->worst) r->worst = w;
  }
  MUST(tpg_graph_set_destroy(set));
}

int main(void) {
  model m;
  row r[2];
  model_make(&m);
  run_set(&m, 1, &r[0]);
  run_set(&m, 0, &r[1]);
  CHECK(r[0].own == 0 || r[0].own < r[1].own);  /* shared: nothing (or CUTLASS's alone) outside the arena */
  CHECK(r[0].ws <= r[1].own && r[1].ws == 0);   /* the arena's buffers hold less than every node's own */
  model_free(&m);
  printf("\n%-9s %10s %10s %10s %12s %8s %10s\n", "workspace", "arena MiB", "of it ws", "own MiB", "measured MiB",
         "buffers", "err/bound");
  for (int i = 0; i < 2; i++)
    printf("%-9s %10.2f %10.2f %10.2f %12.2f %8d %10.3f\n", i ? "own" : "shared", r[i].arena / 1048576.0,
           r[i].ws / 1048576.0, r[i].own / 1048576.0, r[i].measured / 1048576.0, r[i].buffers, r[i].worst);
  return TPG_TEST_END();
}
