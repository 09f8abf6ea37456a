/* gemm_lt_test.c - cuBLASLt GEMM nodes on the GPU: the family's graph
 * node (a child graph captured per node, lib/gemm/cublaslt.c) built, run,
 * rebound and checked element-wise against fp64.
 *
 * For each epilogue the family runs (none, bias, bias + GELU, the residual
 * as cuBLASLt's C with beta = 1, in place with a bias and apart without,
 * the fp32 partial, SwiGLU with a bias and without: cuBLASLt's 2N-wide
 * product in the operands' type, then tpg_lt_swiglu), bf16 and one f16 case, in explicit, eager and capture
 * mode (TPG_GEMM_FAMILY=cublaslt): fresh seeded inputs, the output poisoned
 * (NaN) before each launch; after the first launch, a rebind that moves A
 * (w), B (x), C (the residual), D (y) and the bias to a second set of
 * buffers holding other data, a second launch checked against that set,
 * and the first y unchanged (a child graph left with the old pointers
 * writes the old buffers). Then the rule's own pick (TPG_GEMM_FAMILY unset)
 * at a shape of its stated cuBLASLt band, and with on-device tuning on.
 * Bound per element: 2 u |ref| + (K/16 + 16) 2^-23 sum |x w| (fp32
 * accumulation, any order or split) + 2^-11 |z + b| with GELU (tanh and
 * erf forms differ by less); with SwiGLU the gate's and the up's sums
 * carried through silu(g) u (|silu'| <= 1.1), each rounded once to the
 * operands' type (unit roundoff u) before it, + 2^-11 |ref| (__expf). tpg_graph_info must name the family: a run
 * where cuBLASLt did not load fails (LD_LIBRARY_PATH: tests/gpu/gemm_check.sh).
 */
#define _POSIX_C_SOURCE 200809L
#include "tests/gpu/gpu_common.h"

static tpg_view V(tpg_slot s) { return (tpg_view){s, 0, 0}; }

typedef struct lcase {
  int m, n, k;
  tpg_dtype dt;
  tpg_epilogue epi;
  int bias, in_place;
} lcase;

/* One set of buffers and the host values they hold. */
typedef struct set {
  float *x, *w, *b, *r;
  void *dx, *dw, *db, *dr, *dy;
} set;

/* W's rows (and the bias's entries): 2N with SwiGLU, gate then up. */
static size_t wrows(const lcase *c) { return (size_t)c->n * (c->epi == TPG_EPILOGUE_SWIGLU ? 2 : 1); }

static size_t ybytes(const lcase *c) { return (size_t)c->m * c->n * (c->epi == TPG_EPILOGUE_F32_PARTIAL ? 4 : 2); }

static void *upload_dt(tpg_dtype dt, const float *f, size_t n) {
  void *h = pack(dt, f, n, NULL), *d;
  CUDA_OK(cudaMalloc(&d, n * 2));
  CUDA_OK(cudaMemcpy(d, h, n * 2, cudaMemcpyHostToDevice));
  free(h);
  return d;
}

static float *rnd_dt(tpg_dtype dt, uint64_t seed, size_t n, float scale) {
  float *f = malloc(n * 4);
  for (size_t i = 0; i < n; i++) f[i] = scale * rnd(seed, i);
  free(pack(dt, f, n, f)); /* rounded to the dtype, in place */
  return f;
}

static void set_make(const lcase *c, uint64_t seed, set *s) {
  const size_t xn = (size_t)c->m * c->k, wn = wrows(c) * c->k, yn = (size_t)c->m * c->n;
  s->x = rnd_dt(c->dt, seed, xn, 1.0f);
  s->w = rnd_dt(c->dt, seed + 1, wn, 1.7f / sqrtf((float)c->k));
  s->b = rnd_dt(c->dt, seed + 2, wrows(c), 0.5f);
  s->r = rnd_dt(c->dt, seed + 3, yn, 1.0f);
  s->dx = upload_dt(c->dt, s->x, xn);
  s->dw = upload_dt(c->dt, s->w, wn);
  s->db = upload_dt(c->dt, s->b, wrows(c));
  s->dr = upload_dt(c->dt, s->r, yn);
  CUDA_OK(cudaMalloc(&s->dy, ybytes(c)));
}

static void set_free(set *s) {
  free(s->x), free(s->w), free(s->b), free(s->r);
  cudaFree(s->dx), cudaFree(s->dw), cudaFree(s->db), cudaFree(s->dr), cudaFree(s->dy);
}

/* Before a launch: y poisoned, or holding the residual when it is y. */
static void prime(const lcase *c, const set *s) {
  if (c->in_place) CUDA_OK(cudaMemcpy(s->dy, s->dr, ybytes(c), cudaMemcpyDeviceToDevice));
  else poison(s->dy, ybytes(c));
}

/* Worst |got - ref| / bound over y of set s (inf for NaN); *rel the norm. */
static double check_set(const lcase *c, const set *s, double *rel) {
  const size_t yn = (size_t)c->m * c->n;
  const tpg_dtype ydt = c->epi == TPG_EPILOGUE_F32_PARTIAL ? TPG_F32 : c->dt;
  const double u = ydt == TPG_F32 ? ldexp(1.0, -24) : c->dt == TPG_BF16 ? ldexp(1.0, -8) : ldexp(1.0, -11);
  const double eacc = (c->k / 16.0 + 16) * ldexp(1.0, -23);
  void *h = malloc(ybytes(c));
  float *got = malloc(yn * 4);
  double *ref = malloc(yn * sizeof *ref), worst = 0;
  CUDA_OK(cudaMemcpy(h, s->dy, ybytes(c), cudaMemcpyDeviceToHost));
  unpack(ydt, h, yn, got);
  for (int mm = 0; mm < c->m; mm++)
    for (int nn = 0; nn < c->n; nn++) {
      double z = 0, S = 0, zu = 0, Su = 0;
      for (int q = 0; q < c->k; q++) {
        const double p = (double)s->x[(size_t)mm * c->k + q] * s->w[(size_t)nn * c->k + q];
        z += p, S += fabs(p);
      }
      const size_t at = (size_t)mm * c->n + nn;
      const double zb = z + (c->bias ? s->b[nn] : 0.0);
      double v = zb, approx = 0, sens = eacc * S;
      if (c->epi == TPG_EPILOGUE_SWIGLU) {
        for (int q = 0; q < c->k; q++) {
          const double p = (double)s->x[(size_t)mm * c->k + q] * s->w[(size_t)(c->n + nn) * c->k + q];
          zu += p, Su += fabs(p);
        }
        const double ub = zu + (c->bias ? s->b[c->n + nn] : 0.0), sg = zb / (1 + exp(-zb));
        v = sg * ub;
        /* the product rounded to dtype: g and u each off by u |g|, u |u| */
        sens = 1.1 * fabs(ub) * (eacc * S + u * fabs(z)) + fabs(sg) * (eacc * Su + u * fabs(zu));
        approx = ldexp(fabs(v), -11);
      }
      if (c->epi == TPG_EPILOGUE_BIAS_GELU) {
        v = 0.5 * zb * (1 + tanh(0.7978845608028654 * (zb + 0.044715 * zb * zb * zb)));
        approx = ldexp(fabs(zb), -11), sens *= 1.13;
      }
      if (c->epi == TPG_EPILOGUE_RESIDUAL) v += s->r[at];
      ref[at] = v;
      const double bound = 2 * u * fabs(v) + sens + approx + (c->dt == TPG_F16 && ydt != TPG_F32 ? ldexp(1.0, -24) : 0);
      const double e = isfinite(got[at]) ? fabs(got[at] - v) / bound : INFINITY;
      if (e > worst) worst = e;
    }
  *rel = rel_err(got, ref, yn);
  free(h), free(got), free(ref);
  return worst;
}

static tpg_plan *make_plan(const lcase *c, tpg_slot s[5]) {
  tpg_plan *p;
  memset(s, 0, 5 * sizeof *s);
  MUST(tpg_plan_create(&p));
  MUST(tpg_plan_add_slot(p, "x", c->dt, TPG_MEM_DEVICE, (size_t)c->m * c->k, &s[0]));
  MUST(tpg_plan_add_slot(p, "w", c->dt, TPG_MEM_DEVICE, wrows(c) * c->k, &s[1]));
  MUST(tpg_plan_add_slot(p, "y", c->epi == TPG_EPILOGUE_F32_PARTIAL ? TPG_F32 : c->dt, TPG_MEM_DEVICE,
                         (size_t)c->m * c->n, &s[2]));
  if (c->bias) MUST(tpg_plan_add_slot(p, "b", c->dt, TPG_MEM_DEVICE, wrows(c), &s[3]));
  if (c->epi == TPG_EPILOGUE_RESIDUAL && !c->in_place)
    MUST(tpg_plan_add_slot(p, "r", c->dt, TPG_MEM_DEVICE, (size_t)c->m * c->n, &s[4]));
  tpg_gemm_desc d = TPG_GEMM_DESC_INIT;
  d.m = c->m, d.n = c->n, d.k = c->k, d.dtype = c->dt, d.epilogue = c->epi;
  d.x = V(s[0]), d.w = V(s[1]), d.y = V(s[2]);
  if (c->bias) d.bias = V(s[3]);
  if (c->epi == TPG_EPILOGUE_RESIDUAL) d.residual = V(c->in_place ? s[2] : s[4]);
  MUST(tpg_plan_add_gemm(p, &d, NULL, 0, NULL));
  return p;
}

static int bind_set(const tpg_slot sl[5], const set *s, tpg_binding *b) {
  int n = 0;
  b[n++] = (tpg_binding){sl[0], s->dx};
  b[n++] = (tpg_binding){sl[1], s->dw};
  b[n++] = (tpg_binding){sl[2], s->dy};
  if (sl[3]) b[n++] = (tpg_binding){sl[3], s->db};
  if (sl[4]) b[n++] = (tpg_binding){sl[4], s->dr};
  return n;
}

static const char *mode_name(tpg_graph_mode m) {
  return m == TPG_MODE_EXPLICIT ? "explicit" : m == TPG_MODE_EAGER ? "eager" : "capture";
}

/* One case in one mode; want_lt: the node must be cuBLASLt's. */
static void run_case(const lcase *c, tpg_graph_mode mode, int want_lt, const char *what) {
  set s[2];
  tpg_slot sl[5];
  tpg_binding b[5];
  tpg_graph *g = NULL;
  tpg_graph_info info;
  double rel, worst;
  set_make(c, 100 + (uint64_t)c->m, &s[0]);
  set_make(c, 900 + (uint64_t)c->n, &s[1]);
  tpg_plan *p = make_plan(c, sl);
  tpg_graph_config cfg = TPG_GRAPH_CONFIG_INIT;
  cfg.bindings = b;
  cfg.nbindings = bind_set(sl, &s[0], b);
  cfg.mode = mode;
  MUST(tpg_graph_create(p, &cfg, &g));
  MUST(tpg_graph_get_info(g, &info, sizeof info));
  CHECK(!want_lt || info.gemm_cublaslt_nodes == 1);
  if (want_lt && info.gemm_cublaslt_nodes != 1)
    fprintf(stderr, "%s: the node is not cuBLASLt's (ours %d, CUTLASS %d): did libcublasLt load? (stderr above)\n",
            what, info.gemm_ours_nodes, info.gemm_cutlass_nodes);
  prime(c, &s[0]);
  MUST(tpg_graph_launch(g, NULL));
  CUDA_OK(cudaDeviceSynchronize());
  worst = check_set(c, &s[0], &rel);
  printf("%-34s %-8s %4d x %5d x %5d: rel %.2e, max err/bound %.3f%s\n", what, mode_name(mode), c->m, c->n, c->k, rel,
         worst, worst <= 1 && rel <= 1e-2 ? "" : "  FAIL");
  CHECK(worst <= 1.0 && rel <= 1e-2);
  if (mode != TPG_MODE_CAPTURE) { /* (a captured graph cannot be rebound) */
    void *keep = malloc(ybytes(c)), *now = malloc(ybytes(c));
    CUDA_OK(cudaMemcpy(keep, s[0].dy, ybytes(c), cudaMemcpyDeviceToHost));
    const int n = bind_set(sl, &s[1], b);
    MUST(tpg_graph_rebind(g, b, n)); /* A, B, C, D and the bias move */
    prime(c, &s[1]);
    MUST(tpg_graph_launch(g, NULL));
    CUDA_OK(cudaDeviceSynchronize());
    worst = check_set(c, &s[1], &rel);
    CUDA_OK(cudaMemcpy(now, s[0].dy, ybytes(c), cudaMemcpyDeviceToHost));
    const int stale = memcmp(keep, now, ybytes(c)) != 0;
    printf("%-34s %-8s after rebind: rel %.2e, max err/bound %.3f%s%s\n", what, mode_name(mode), rel, worst,
           stale ? ", the old y changed" : "", worst <= 1 && rel <= 1e-2 && !stale ? "" : "  FAIL");
    CHECK(worst <= 1.0 && rel <= 1e-2 && !stale);
    free(keep), free(now);
  }
  MUST(tpg_graph_destroy(g));
  tpg_plan_destroy(p);
  set_free(&s[0]), set_free(&s[1]);
}

int main(void) {
  static const lcase cases[] = {
      {96, 1024, 512, TPG_BF16, TPG_EPILOGUE_NONE, 0, 0},      {64, 2048, 768, TPG_BF16, TPG_EPILOGUE_BIAS, 1, 0},
      {200, 1536, 1024, TPG_BF16, TPG_EPILOGUE_BIAS_GELU, 1, 0}, {128, 1024, 4096, TPG_BF16, TPG_EPILOGUE_RESIDUAL, 1, 1},
      {33, 3072, 512, TPG_BF16, TPG_EPILOGUE_RESIDUAL, 0, 0},   {48, 1024, 2048, TPG_BF16, TPG_EPILOGUE_F32_PARTIAL, 0, 0},
      {80, 1024, 512, TPG_F16, TPG_EPILOGUE_BIAS, 1, 0},       {72, 1536, 1024, TPG_BF16, TPG_EPILOGUE_SWIGLU, 1, 0},
      {40, 2048, 768, TPG_F16, TPG_EPILOGUE_SWIGLU, 0, 0},
  };
  static const tpg_graph_mode modes[3] = {TPG_MODE_EXPLICIT, TPG_MODE_EAGER, TPG_MODE_CAPTURE};
  static const char *const names[] = {"none", "bias", "bias+gelu", "residual in place + bias", "residual apart",
                                      "f32 partial", "bias (f16)", "swiglu + bias", "swiglu (f16)"};
  int dev = 0;
  CUDA_OK(cudaSetDevice(dev));
  setenv("TPG_GEMM_FAMILY", "cublaslt", 1);
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    for (int md = 0; md < 3; md++) {
      char what[64];
      snprintf(what, sizeof what, "cuBLASLt node, %s", names[i]);
      run_case(&cases[i], modes[md], 1, what);
    }
  /* the rule's own pick in its stated band (32 < M <= 1024 past 3072 W rows, sm_90) */
  unsetenv("TPG_GEMM_FAMILY");
  {
    const lcase c = {256, 4096, 1024, TPG_BF16, TPG_EPILOGUE_BIAS, 1, 0};
    tpg_device_info di;
    MUST(tpg_device_get_info(dev, &di, sizeof di));
    run_case(&c, TPG_MODE_EXPLICIT, di.sm_arch == 90, "AUTO (the rule), bias");
    const lcase sw = {256, 4096, 2048, TPG_BF16, TPG_EPILOGUE_SWIGLU, 0, 0}; /* in its band, M >= 128 */
    run_case(&sw, TPG_MODE_EXPLICIT, di.sm_arch == 90, "AUTO (the rule), swiglu");
  }
  /* tuning on: whatever it picks among every family's candidates, checked */
  setenv("TPG_GEMM_TUNE", "1", 1);
  {
    const lcase c = {128, 4096, 2048, TPG_BF16, TPG_EPILOGUE_BIAS_GELU, 1, 0};
    run_case(&c, TPG_MODE_EXPLICIT, 0, "tuned, bias+gelu");
  }
  unsetenv("TPG_GEMM_TUNE");
  return TPG_TEST_END();
}
