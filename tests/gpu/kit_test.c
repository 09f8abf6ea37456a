/* kit_test.c - the kit on one GPU, against fp64 references:
 * (a) engine kernels as kernel nodes: loaded from a fatbin by name, as a
 *     CUkernel (cudaGetKernel) and as a CUfunction (cudaGetFuncBySymbol);
 *     by-value and view arguments, rebinding a view, dynamic shared memory
 *     above 48 KiB, a cluster launch (sm_90); argument lists checked against
 *     the kernel's real parameters;
 * (b) a cuBLAS GEMM (bf16 in, fp32 accumulate) as a captured node, checked,
 *     rebound (re-captured) and checked again; callbacks that allocate,
 *     synchronize, do nothing or fail are refused with clear errors;
 * (c) a host node, and event record / wait nodes ordering the graph against
 *     a second stream;
 * (d) tpg_graph_export embedded as a child of the test's own graph, and
 *     refreshed with cudaGraphExecChildGraphNodeSetParams after a rebind;
 * (e) tpg_graph_launch inside the test's stream capture;
 * (f) TPG_MODE_EAGER and TPG_MODE_CAPTURE give the explicit graph's results.
 */
#include <cublas_v2.h>
#include <math.h>

#include "lib/embedded.h"
#include "tests/gpu/gpu_common.h"

extern const tpg_embedded_blob kit_test_blobs[]; /* kit_kernels.cu as a fatbin */
void *kit_rt_axpy_kernel(void);
void *kit_rt_axpy_function(void);
void tpgt_spin(long long cycles, cudaStream_t s);

static int g_dev = 0;
static tpg_device_info g_di;
static int g_driver = 0;
static tpg_module *g_mod = NULL;

static tpg_view V(tpg_slot s, uint64_t off) {
  tpg_view v = {s, 0, off};
  return v;
}

static float *dev_floats(size_t n) {
  float *d;
  CUDA_OK(cudaMalloc((void **)&d, n * 4));
  poison(d, n * 4);
  return d;
}

static float *host_rnd(uint64_t seed, size_t n) {
  float *f = malloc(n * 4);
  for (size_t i = 0; i < n; i++) f[i] = rnd(seed, i);
  return f;
}

static float *upload_f32(const float *f, size_t n) {
  float *d = dev_floats(n);
  CUDA_OK(cudaMemcpy(d, f, n * 4, cudaMemcpyHostToDevice));
  return d;
}

static float *download(const float *d, size_t n) {
  float *h = malloc(n * 4);
  CUDA_OK(cudaMemcpy(h, d, n * 4, cudaMemcpyDeviceToHost));
  return h;
}

/* kit_axpy's result: one fp64 fma rounded once to float, as the kernel
 * computes it: equal bit for bit (tolerance 0). */
static int axpy_wrong(const float *dy, const float *x, size_t n, double a, float b) {
  float *y = download(dy, n);
  int bad = 0;
  for (size_t i = 0; i < n; i++) {
    float want = (float)fma(a, (double)x[i], (double)b);
    if (memcmp(&y[i], &want, 4) != 0) bad++;
  }
  free(y);
  return bad;
}

static tpg_graph *make(const tpg_plan *p, const tpg_binding *b, int nb, tpg_graph_mode mode) {
  tpg_graph_config cfg = TPG_GRAPH_CONFIG_INIT;
  cfg.device = g_dev;
  cfg.bindings = b;
  cfg.nbindings = nb;
  cfg.mode = mode;
  tpg_graph *g = NULL;
  tpg_status st = tpg_graph_create(p, &cfg, &g);
  if (st != TPG_SUCCESS) fprintf(stderr, "tpg_graph_create: %s\n", tpg_last_error());
  CHECK(st == TPG_SUCCESS);
  return g;
}

/* A kit_axpy node of `n` elements: y = a x + b. */
static tpg_kernel_desc axpy_desc(tpg_arg *args, tpg_slot y, tpg_slot x, const int *n, const double *a,
                                 const float *b) {
  args[0] = tpg_arg_view(y, 0);
  args[1] = tpg_arg_view(x, 0);
  args[2] = tpg_arg_bytes(n, sizeof *n);
  args[3] = tpg_arg_bytes(a, sizeof *a);
  args[4] = tpg_arg_bytes(b, sizeof *b);
  tpg_kernel_desc d = TPG_KERNEL_DESC_INIT;
  d.grid[0] = (unsigned)((*n + 255) / 256);
  d.block[0] = 256;
  d.args = args;
  d.nargs = 5;
  return d;
}

/* ---- (a) engine kernels ------------------------------------------------ */

static void test_kernels(void) {
  enum { N = 5000 };
  const int n = N;
  const double a = 1.0 / 3.0;
  const float b = 0.25f;
  float *hx = host_rnd(11, N), *hx2 = host_rnd(12, N);
  float *dx = upload_f32(hx, N), *dx2 = upload_f32(hx2, N);
  float *dy[3], *dy2 = dev_floats(N);
  for (int i = 0; i < 3; i++) dy[i] = dev_floats(N);

  void *rk = kit_rt_axpy_kernel(), *rf = kit_rt_axpy_function();
  CHECK(rk != NULL && rf != NULL);

  tpg_plan *p;
  MUST(tpg_plan_create(&p));
  tpg_slot x, y[3];
  MUST(tpg_plan_add_slot(p, "x", TPG_F32, TPG_MEM_DEVICE, N, &x));
  MUST(tpg_plan_add_slot(p, "y_module", TPG_F32, TPG_MEM_DEVICE, N, &y[0]));
  MUST(tpg_plan_add_slot(p, "y_cukernel", TPG_F32, TPG_MEM_DEVICE, N, &y[1]));
  MUST(tpg_plan_add_slot(p, "y_cufunction", TPG_F32, TPG_MEM_DEVICE, N, &y[2]));
  tpg_arg args[3][5];
  for (int i = 0; i < 3; i++) {
    tpg_kernel_desc d = axpy_desc(args[i], y[i], x, &n, &a, &b);
    if (i == 0) { d.module = g_mod; d.name = "kit_axpy"; }
    if (i == 1) d.cu_kernel = rk;
    if (i == 2) d.cu_function = rf;
    CHECK_OK(tpg_plan_add_kernel(p, &d, NULL, 0, NULL));
  }
  tpg_binding bind[4] = {{x, dx}, {y[0], dy[0]}, {y[1], dy[1]}, {y[2], dy[2]}};
  tpg_graph *g = make(p, bind, 4, TPG_MODE_EXPLICIT);
  if (g) {
    tpg_graph_info info;
    CHECK_OK(tpg_graph_get_info(g, &info, sizeof info));
    printf("kernels: %d nodes, %d engine kernel nodes\n", info.nodes, info.user_kernel_nodes);
    CHECK(info.user_kernel_nodes == 3);
    CHECK_OK(tpg_graph_launch(g, NULL));
    CUDA_OK(cudaDeviceSynchronize());
    static const char *how[3] = {"module", "cu_kernel", "cu_function"};
    for (int i = 0; i < 3; i++) {
      int bad = axpy_wrong(dy[i], hx, N, a, b);
      printf("kernel via %-11s: %d of %d elements differ from fp64 (tolerance 0: one rounding)\n", how[i], bad, N);
      CHECK(bad == 0);
    }
    /* Rebind the input of all three and the module node's output. */
    poison(dy[0], N * 4);
    tpg_binding nb[2] = {{x, dx2}, {y[0], dy2}};
    CHECK_OK(tpg_graph_rebind(g, nb, 2));
    CHECK_OK(tpg_graph_launch(g, NULL));
    CUDA_OK(cudaDeviceSynchronize());
    CHECK(axpy_wrong(dy2, hx2, N, a, b) == 0);
    CHECK(axpy_wrong(dy[1], hx2, N, a, b) == 0);
    CHECK(axpy_wrong(dy[2], hx2, N, a, b) == 0);
    float *old = download(dy[0], N);
    CHECK(isnan(old[0]) && isnan(old[N - 1])); /* the old output was left alone */
    free(old);
    CHECK_OK(tpg_graph_destroy(g));
  }
  tpg_plan_destroy(p);

  /* Argument lists against the real parameters (driver 12.4+ reports them). */
  MUST(tpg_plan_create(&p));
  MUST(tpg_plan_add_slot(p, "x", TPG_F32, TPG_MEM_DEVICE, N, &x));
  MUST(tpg_plan_add_slot(p, "y", TPG_F32, TPG_MEM_DEVICE, N, &y[0]));
  tpg_kernel_desc d = axpy_desc(args[0], y[0], x, &n, &a, &b);
  d.module = g_mod;
  d.name = "kit_axpy";
  float af = (float)a;
  args[0][3] = TPG_ARG_VALUE(af); /* a float where the kernel has a double */
  tpg_node kn;
  MUST(tpg_plan_add_kernel(p, &d, NULL, 0, &kn));
  MUST(tpg_plan_set_node_name(p, kn, "axpy"));
  tpg_graph_config cfg = TPG_GRAPH_CONFIG_INIT;
  cfg.device = g_dev;
  cfg.bindings = bind;
  cfg.nbindings = 2;
  tpg_graph *bad = (tpg_graph *)1;
  if (g_driver >= 12040)
    CHECK_ST(tpg_graph_create(p, &cfg, &bad), TPG_ERROR_INVALID_ARGUMENT,
             "node axpy: args[3] is 4 bytes; the kernel's parameter 3 is 8 bytes at offset 24");
  else
    printf("driver %d < 12.4: no parameter info, argument sizes are not checked\n", g_driver);
  CHECK(bad == NULL || g_driver < 12040);
  tpg_plan_destroy(p);

  MUST(tpg_plan_create(&p));
  MUST(tpg_plan_add_slot(p, "x", TPG_F32, TPG_MEM_DEVICE, N, &x));
  MUST(tpg_plan_add_slot(p, "y", TPG_F32, TPG_MEM_DEVICE, N, &y[0]));
  d = axpy_desc(args[0], y[0], x, &n, &a, &b);
  d.module = g_mod;
  d.name = "kit_axpy";
  d.nargs = 4; /* b missing */
  MUST(tpg_plan_add_kernel(p, &d, NULL, 0, NULL));
  if (g_driver >= 12040)
    CHECK_ST(tpg_graph_create(p, &cfg, &bad), TPG_ERROR_INVALID_ARGUMENT,
             "4 arguments given; the kernel takes 5 parameters");
  tpg_plan_destroy(p);

  MUST(tpg_plan_create(&p));
  MUST(tpg_plan_add_slot(p, "x", TPG_F32, TPG_MEM_DEVICE, N, &x));
  MUST(tpg_plan_add_slot(p, "y", TPG_F32, TPG_MEM_DEVICE, N, &y[0]));
  d = axpy_desc(args[0], y[0], x, &n, &a, &b);
  d.module = g_mod;
  d.name = "kit_axpy_missing";
  MUST(tpg_plan_add_kernel(p, &d, NULL, 0, NULL));
  CHECK_ST(tpg_graph_create(p, &cfg, &bad), TPG_ERROR_INVALID_ARGUMENT, "no kernel named \"kit_axpy_missing\"");
  tpg_plan_destroy(p);

  /* Dynamic shared memory above 48 KiB: 64 KiB of floats reversed by one block. */
  enum { S = 16384 };
  const int ns = S;
  MUST(tpg_plan_create(&p));
  tpg_slot xs, ys;
  MUST(tpg_plan_add_slot(p, "xs", TPG_F32, TPG_MEM_DEVICE, S, &xs));
  MUST(tpg_plan_add_slot(p, "ys", TPG_F32, TPG_MEM_DEVICE, S, &ys));
  float *hs = host_rnd(13, S), *ds = upload_f32(hs, S), *dr = dev_floats(S);
  tpg_arg ra[3] = {tpg_arg_view(ys, 0), tpg_arg_view(xs, 0), TPG_ARG_VALUE(ns)};
  d = (tpg_kernel_desc)TPG_KERNEL_DESC_INIT;
  d.module = g_mod;
  d.name = "kit_reverse_smem";
  d.block[0] = 1024;
  d.shared_bytes = S * 4;
  d.args = ra;
  d.nargs = 3;
  MUST(tpg_plan_add_kernel(p, &d, NULL, 0, NULL));
  tpg_binding sb[2] = {{xs, ds}, {ys, dr}};
  g = make(p, sb, 2, TPG_MODE_EXPLICIT);
  if (g) {
    CHECK_OK(tpg_graph_launch(g, NULL));
    CUDA_OK(cudaDeviceSynchronize());
    float *r = download(dr, S);
    int wrong = 0;
    for (int i = 0; i < S; i++) wrong += memcmp(&r[i], &hs[S - 1 - i], 4) != 0;
    printf("64 KiB dynamic shared memory: %d of %d elements wrong (exact copy)\n", wrong, S);
    CHECK(wrong == 0);
    free(r);
    CHECK_OK(tpg_graph_destroy(g));
  }
  tpg_plan_destroy(p);
  free(hs);
  CUDA_OK(cudaFree(ds));
  CUDA_OK(cudaFree(dr));

  /* A cluster launch (sm_90+): 8 blocks in clusters of 2 report ranks 0,1,0,1,... */
  if (g_di.sm_arch >= 90) {
    int *dc;
    CUDA_OK(cudaMalloc((void **)&dc, 8 * sizeof(int)));
    CUDA_OK(cudaMemset(dc, 0xff, 8 * sizeof(int)));
    MUST(tpg_plan_create(&p));
    tpg_slot c;
    MUST(tpg_plan_add_slot(p, "ranks", TPG_F32, TPG_MEM_DEVICE, 8, &c));
    tpg_arg ca[1] = {tpg_arg_view(c, 0)};
    d = (tpg_kernel_desc)TPG_KERNEL_DESC_INIT;
    d.module = g_mod;
    d.name = "kit_cluster_rank";
    d.grid[0] = 8;
    d.block[0] = 32;
    d.cluster[0] = 2;
    d.cluster[1] = 1;
    d.cluster[2] = 1;
    d.args = ca;
    d.nargs = 1;
    MUST(tpg_plan_add_kernel(p, &d, NULL, 0, NULL));
    tpg_binding cb1 = {c, dc};
    g = make(p, &cb1, 1, TPG_MODE_EXPLICIT);
    if (g) {
      CHECK_OK(tpg_graph_launch(g, NULL));
      CUDA_OK(cudaDeviceSynchronize());
      int hc[8];
      CUDA_OK(cudaMemcpy(hc, dc, sizeof hc, cudaMemcpyDeviceToHost));
      int wrong = 0;
      for (int i = 0; i < 8; i++) wrong += hc[i] != i % 2;
      printf("cluster 2x1x1: ranks %d %d %d %d %d %d %d %d\n", hc[0], hc[1], hc[2], hc[3], hc[4], hc[5], hc[6], hc[7]);
      CHECK(wrong == 0);
      CHECK_OK(tpg_graph_destroy(g));
    }
    tpg_plan_destroy(p);
    CUDA_OK(cudaFree(dc));
  }

  free(hx);
  free(hx2);
  CUDA_OK(cudaFree(dx));
  CUDA_OK(cudaFree(dx2));
  CUDA_OK(cudaFree(dy2));
  for (int i = 0; i < 3; i++) CUDA_OK(cudaFree(dy[i]));
}

/* ---- (b) library work as captured nodes --------------------------------- */

typedef struct gemm_user {
  cublasHandle_t h;
  int m, n, k;
  int captures;           /* how often tpgraph called us */
} gemm_user;

/* Row-major C[m, n] (fp32) = A[m, k] B[k, n] (bf16), fp32 accumulation:
 * column-major C^T = B^T A^T for cuBLAS. ptrs: a, b, c. */
static int gemm_cb(void *user, tpg_stream s, void *const *ptrs, int nptrs) {
  gemm_user *u = user;
  if (nptrs != 3) return -1;
  u->captures++;
  if (cublasSetStream(u->h, (cudaStream_t)s) != CUBLAS_STATUS_SUCCESS) return 1;
  const float one = 1.0f, zero = 0.0f;
  cublasStatus_t st = cublasGemmEx(u->h, CUBLAS_OP_N, CUBLAS_OP_N, u->n, u->m, u->k, &one, ptrs[1], CUDA_R_16BF, u->n,
                                   ptrs[0], CUDA_R_16BF, u->k, &zero, ptrs[2], CUDA_R_32F, u->n, CUBLAS_COMPUTE_32F,
                                   CUBLAS_GEMM_DEFAULT);
  return st == CUBLAS_STATUS_SUCCESS ? 0 : 1000 + (int)st;
}

/* C against fp64: bf16 products are exact in fp32, so the only error is the
 * fp32 sum of k terms: |err| <= k * 2^-24 * sum |a b| (the classic gamma_k
 * bound, whatever order or split cuBLAS sums in). Returns max |err| / bound
 * (must be <= 1) and prints it with the relative norm. */
static double gemm_check(const char *what, const float *dc, const float *fa, const float *fb, int m, int n, int k) {
  float *c = download(dc, (size_t)m * n);
  double worst = 0, num = 0, den = 0;
  for (int i = 0; i < m; i++)
    for (int j = 0; j < n; j++) {
      double ref = 0, mag = 0;
      for (int l = 0; l < k; l++) {
        double t = (double)fa[(size_t)i * k + l] * fb[(size_t)l * n + j];
        ref += t;
        mag += fabs(t);
      }
      double got = c[(size_t)i * n + j], err = fabs(got - ref);
      double bound = k * ldexp(1.0, -24) * mag + 1e-30;
      if (isnan(got)) err = INFINITY;
      if (err / bound > worst) worst = err / bound;
      num += (got - ref) * (got - ref);
      den += ref * ref;
    }
  printf("%s: max |err| / (k 2^-24 sum|ab|) = %.3f (must be <= 1), rel norm %.2e\n", what, worst, sqrt(num / den));
  free(c);
  return worst;
}

/* Callbacks that break the rules, and one that fails. */
static int cb_malloc(void *u, tpg_stream s, void *const *p, int n) {
  (void)u; (void)n;
  void *m = NULL;
  cudaMemsetAsync(p[0], 0, 4, (cudaStream_t)s);
  cudaError_t e = cudaMalloc(&m, 1 << 20);
  if (e == cudaSuccess) {
    cudaFree(m);
    return 0;
  }
  return (int)e;
}
static int cb_sync(void *u, tpg_stream s, void *const *p, int n) {
  (void)u; (void)n;
  cudaMemsetAsync(p[0], 0, 4, (cudaStream_t)s);
  (void)cudaStreamSynchronize((cudaStream_t)s); /* error ignored, as careless code would */
  return 0;
}
static int cb_nothing(void *u, tpg_stream s, void *const *p, int n) {
  (void)u; (void)s; (void)p; (void)n;
  return 0;
}
static int cb_fail(void *u, tpg_stream s, void *const *p, int n) {
  (void)u; (void)n;
  cudaMemsetAsync(p[0], 0, 4, (cudaStream_t)s);
  return 7;
}
static int cb_mallocasync(void *u, tpg_stream s, void *const *p, int n) {
  (void)u; (void)p; (void)n;
  void *m = NULL;
  if (cudaMallocAsync(&m, 1 << 20, (cudaStream_t)s) != cudaSuccess) return 0;
  cudaMemsetAsync(m, 0, 1 << 20, (cudaStream_t)s);
  cudaFreeAsync(m, (cudaStream_t)s);
  return 0;
}

static void refused(tpg_capture_fn fn, const char *needle) {
  float *d = dev_floats(16);
  tpg_plan *p;
  MUST(tpg_plan_create(&p));
  tpg_slot c;
  MUST(tpg_plan_add_slot(p, "c", TPG_F32, TPG_MEM_DEVICE, 16, &c));
  tpg_view v = V(c, 0);
  tpg_captured_desc cd = TPG_CAPTURED_DESC_INIT;
  cd.fn = fn;
  cd.views = &v;
  cd.nviews = 1;
  tpg_node nd;
  MUST(tpg_plan_add_captured(p, &cd, NULL, 0, &nd));
  MUST(tpg_plan_set_node_name(p, nd, "lib"));
  tpg_binding b = {c, d};
  tpg_graph_config cfg = TPG_GRAPH_CONFIG_INIT;
  cfg.device = g_dev;
  cfg.bindings = &b;
  cfg.nbindings = 1;
  tpg_graph *g = (tpg_graph *)1;
  CHECK_ST(tpg_graph_create(p, &cfg, &g), TPG_ERROR_INVALID_ARGUMENT, needle);
  CHECK(g == NULL);
  printf("refused: %s\n", tpg_last_error());
  (void)cudaGetLastError(); /* the callbacks' own failed calls */
  tpg_plan_destroy(p);
  CUDA_OK(cudaFree(d));
}

/* A plan used by (b), (d), (e), (f): an engine kernel y = a x + b beside a
 * captured cuBLAS GEMM c = A B. */
enum { GM = 64, GN = 256, GK = 512, NX = 4096 };
typedef struct mixed {
  tpg_plan *p;
  tpg_slot x, y, a, b, c;
  tpg_node kern, gemm;
  tpg_arg args[5];
  int n;
  double alpha;
  float beta;
} mixed;

static void mixed_plan(mixed *m, gemm_user *u) {
  m->n = NX;
  m->alpha = 0.75;
  m->beta = -1.5f;
  MUST(tpg_plan_create(&m->p));
  MUST(tpg_plan_add_slot(m->p, "x", TPG_F32, TPG_MEM_DEVICE, NX, &m->x));
  MUST(tpg_plan_add_slot(m->p, "y", TPG_F32, TPG_MEM_DEVICE, NX, &m->y));
  MUST(tpg_plan_add_slot(m->p, "a", TPG_BF16, TPG_MEM_DEVICE, (size_t)GM * GK, &m->a));
  MUST(tpg_plan_add_slot(m->p, "b", TPG_BF16, TPG_MEM_DEVICE, (size_t)GK * GN, &m->b));
  MUST(tpg_plan_add_slot(m->p, "c", TPG_F32, TPG_MEM_DEVICE, (size_t)GM * GN, &m->c));
  tpg_kernel_desc d = axpy_desc(m->args, m->y, m->x, &m->n, &m->alpha, &m->beta);
  d.module = g_mod;
  d.name = "kit_axpy";
  MUST(tpg_plan_add_kernel(m->p, &d, NULL, 0, &m->kern));
  tpg_view views[3] = {V(m->a, 0), V(m->b, 0), V(m->c, 0)};
  tpg_captured_desc cd = TPG_CAPTURED_DESC_INIT;
  cd.fn = gemm_cb;
  cd.user = u;
  cd.views = views;
  cd.nviews = 3;
  MUST(tpg_plan_add_captured(m->p, &cd, NULL, 0, &m->gemm));
  MUST(tpg_plan_set_node_name(m->p, m->gemm, "cublas_gemm"));
}

typedef struct bufs {
  float *hx, *hx2, *fa, *fa2, *fb;
  float *dx, *dx2, *dy, *dy2, *dc, *dc2;
  void *da, *da2, *db;
} bufs;

static void bufs_make(bufs *B) {
  B->hx = host_rnd(21, NX);
  B->hx2 = host_rnd(22, NX);
  B->fa = rnd_bf16(23, (size_t)GM * GK, 1.0f);
  B->fa2 = rnd_bf16(24, (size_t)GM * GK, 1.0f);
  B->fb = rnd_bf16(25, (size_t)GK * GN, 1.0f);
  B->dx = upload_f32(B->hx, NX);
  B->dx2 = upload_f32(B->hx2, NX);
  B->dy = dev_floats(NX);
  B->dy2 = dev_floats(NX);
  B->dc = dev_floats((size_t)GM * GN);
  B->dc2 = dev_floats((size_t)GM * GN);
  B->da = upload(B->fa, (size_t)GM * GK);
  B->da2 = upload(B->fa2, (size_t)GM * GK);
  B->db = upload(B->fb, (size_t)GK * GN);
}

static void bufs_free(bufs *B) {
  free(B->hx); free(B->hx2); free(B->fa); free(B->fa2); free(B->fb);
  void *d[] = {B->dx, B->dx2, B->dy, B->dy2, B->dc, B->dc2, B->da, B->da2, B->db};
  for (size_t i = 0; i < sizeof d / sizeof d[0]; i++) CUDA_OK(cudaFree(d[i]));
}

static void test_captured(cublasHandle_t h) {
  gemm_user u = {h, GM, GN, GK, 0};
  mixed m;
  mixed_plan(&m, &u);
  bufs B;
  bufs_make(&B);
  tpg_binding bind[5] = {{m.x, B.dx}, {m.y, B.dy}, {m.a, B.da}, {m.b, B.db}, {m.c, B.dc}};
  tpg_graph *g = make(m.p, bind, 5, TPG_MODE_EXPLICIT);
  if (g) {
    CHECK(u.captures == 1);
    tpg_graph_info info;
    CHECK_OK(tpg_graph_get_info(g, &info, sizeof info));
    CHECK(info.captured_nodes == 1 && info.user_kernel_nodes == 1);
    CHECK_OK(tpg_graph_launch(g, NULL));
    CUDA_OK(cudaDeviceSynchronize());
    CHECK(gemm_check("cuBLAS captured node", B.dc, B.fa, B.fb, GM, GN, GK) <= 1.0);
    CHECK(axpy_wrong(B.dy, B.hx, NX, m.alpha, m.beta) == 0);
    /* A slot the callback did not declare: a kernel-node update, no capture. */
    tpg_binding nx = {m.x, B.dx2};
    CHECK_OK(tpg_graph_rebind(g, &nx, 1));
    CHECK(u.captures == 1);
    /* One it declared: captured again with the new address. */
    poison(B.dc, (size_t)GM * GN * 4);
    tpg_binding na = {m.a, B.da2};
    CHECK_OK(tpg_graph_rebind(g, &na, 1));
    CHECK(u.captures == 2);
    CHECK_OK(tpg_graph_launch(g, NULL));
    CUDA_OK(cudaDeviceSynchronize());
    CHECK(gemm_check("after rebinding a (re-captured)", B.dc, B.fa2, B.fb, GM, GN, GK) <= 1.0);
    CHECK(axpy_wrong(B.dy, B.hx2, NX, m.alpha, m.beta) == 0);
    tpg_binding nc = {m.c, B.dc2};
    CHECK_OK(tpg_graph_rebind(g, &nc, 1));
    CHECK(u.captures == 3);
    CHECK_OK(tpg_graph_launch(g, NULL));
    CUDA_OK(cudaDeviceSynchronize());
    CHECK(gemm_check("after rebinding c", B.dc2, B.fa2, B.fb, GM, GN, GK) <= 1.0);
    /* Whole-graph update with the first bindings back: captured again too. */
    CHECK_OK(tpg_graph_update(g, NULL, bind, 5));
    CHECK(u.captures == 4);
    poison(B.dc, (size_t)GM * GN * 4);
    CHECK_OK(tpg_graph_launch(g, NULL));
    CUDA_OK(cudaDeviceSynchronize());
    CHECK(gemm_check("after tpg_graph_update", B.dc, B.fa, B.fb, GM, GN, GK) <= 1.0);
    CHECK_OK(tpg_graph_destroy(g));
  }
  tpg_plan_destroy(m.p);
  bufs_free(&B);

  refused(cb_malloc, "node lib: the capture callback returned");
  refused(cb_sync, "node lib: the capture was invalidated");
  refused(cb_nothing, "node lib: the capture holds no work");
  refused(cb_fail, "node lib: the capture callback returned 7");
  refused(cb_mallocasync, "node lib: the captured work allocates device memory");
}

/* ---- (c) host and event nodes ------------------------------------------- */

static void host_count(void *user) { (*(volatile int *)user)++; }

static void test_host_events(void) {
  enum { N = 1 << 16 };
  const int n = N;
  const double a = 2.0;
  const float b = 1.0f;
  cudaStream_t s1, s2;
  CUDA_OK(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
  CUDA_OK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
  cudaEvent_t ev_done, ev_ready;
  CUDA_OK(cudaEventCreateWithFlags(&ev_done, cudaEventDisableTiming));
  CUDA_OK(cudaEventCreateWithFlags(&ev_ready, cudaEventDisableTiming));
  volatile int count = 0;

  tpg_plan *p;
  MUST(tpg_plan_create(&p));
  tpg_slot x, y, z, w;
  MUST(tpg_plan_add_slot(p, "x", TPG_F32, TPG_MEM_DEVICE, N, &x));
  MUST(tpg_plan_add_slot(p, "y", TPG_F32, TPG_MEM_DEVICE, N, &y));
  MUST(tpg_plan_add_slot(p, "z", TPG_F32, TPG_MEM_DEVICE, N, &z));
  MUST(tpg_plan_add_slot(p, "w", TPG_F32, TPG_MEM_DEVICE, N, &w));
  tpg_arg aa[5];
  tpg_kernel_desc d = axpy_desc(aa, y, x, &n, &a, &b);
  d.module = g_mod;
  d.name = "kit_axpy";
  tpg_node k1, rec, host, wait, k2;
  MUST(tpg_plan_add_kernel(p, &d, NULL, 0, &k1));
  CHECK_OK(tpg_plan_add_event_record(p, (tpg_event)ev_done, &k1, 1, &rec));
  CHECK_OK(tpg_plan_add_host(p, host_count, (void *)&count, &k1, 1, &host));
  CHECK_OK(tpg_plan_add_event_wait(p, (tpg_event)ev_ready, NULL, 0, &wait));
  tpg_arg ka[4] = {tpg_arg_view(w, 0), tpg_arg_view(z, 0), tpg_arg_view(y, 0), TPG_ARG_VALUE(n)};
  tpg_kernel_desc d2 = TPG_KERNEL_DESC_INIT;
  d2.module = g_mod;
  d2.name = "kit_add";
  d2.grid[0] = N / 256;
  d2.block[0] = 256;
  d2.args = ka;
  d2.nargs = 4;
  tpg_node deps2[2] = {k1, wait};
  MUST(tpg_plan_add_kernel(p, &d2, deps2, 2, &k2));

  float *hx = host_rnd(31, N), *dx = upload_f32(hx, N), *dy = dev_floats(N), *dz = dev_floats(N),
        *dw = dev_floats(N), *dycopy = dev_floats(N);
  tpg_binding bind[4] = {{x, dx}, {y, dy}, {z, dz}, {w, dw}};
  static const tpg_graph_mode modes[3] = {TPG_MODE_EXPLICIT, TPG_MODE_CAPTURE, TPG_MODE_EAGER};
  for (int mi = 0; mi < 3; mi++) {
    tpg_graph *g = make(p, bind, 4, modes[mi]);
    if (!g) continue;
    count = 0;
    int wrong_w = 0, wrong_y = 0;
    for (int it = 0; it < 3; it++) {
      float *hz = host_rnd(40 + it, N), *dzsrc = upload_f32(hz, N);
      poison(dw, N * 4);
      poison(dz, N * 4);
      poison(dycopy, N * 4);
      CUDA_OK(cudaDeviceSynchronize());
      /* The engine's other stream: slow work, then z, then "ready". */
      tpgt_spin(20 * 1000 * 1000, s2);
      CUDA_OK(cudaMemcpyAsync(dz, dzsrc, N * 4, cudaMemcpyDeviceToDevice, s2));
      CUDA_OK(cudaEventRecord(ev_ready, s2));
      CHECK_OK(tpg_graph_launch(g, s1));
      /* ...and it waits for the graph's "done" before reading y. */
      CUDA_OK(cudaStreamWaitEvent(s2, ev_done, 0));
      CUDA_OK(cudaMemcpyAsync(dycopy, dy, N * 4, cudaMemcpyDeviceToDevice, s2));
      CUDA_OK(cudaDeviceSynchronize());
      float *hw = download(dw, N), *hy = download(dycopy, N);
      for (int i = 0; i < N; i++) {
        float yv = (float)fma(a, (double)hx[i], (double)b), wv = hz[i] + yv;
        wrong_w += memcmp(&hw[i], &wv, 4) != 0;
        wrong_y += memcmp(&hy[i], &yv, 4) != 0;
      }
      free(hw); free(hy); free(hz);
      CUDA_OK(cudaFree(dzsrc));
    }
    printf("events (mode %d): w = z + y wrong %d, y copied after the record wrong %d, host node ran %d of 3\n",
           (int)modes[mi], wrong_w, wrong_y, count);
    CHECK(wrong_w == 0 && wrong_y == 0 && count == 3);
    if (mi == 0) {
      tpg_graph_info info;
      CHECK_OK(tpg_graph_get_info(g, &info, sizeof info));
      CHECK(info.host_nodes == 1 && info.event_nodes == 2);
    }
    CHECK_OK(tpg_graph_destroy(g));
  }
  tpg_plan_destroy(p);
  free(hx);
  void *dd[] = {dx, dy, dz, dw, dycopy};
  for (int i = 0; i < 5; i++) CUDA_OK(cudaFree(dd[i]));
  CUDA_OK(cudaEventDestroy(ev_done));
  CUDA_OK(cudaEventDestroy(ev_ready));
  CUDA_OK(cudaStreamDestroy(s1));
  CUDA_OK(cudaStreamDestroy(s2));
}

/* ---- (d) export, (e) capture of tpg_graph_launch ------------------------ */

static void test_export(cublasHandle_t h) {
  gemm_user u = {h, GM, GN, GK, 0};
  mixed m;
  mixed_plan(&m, &u);
  bufs B;
  bufs_make(&B);
  tpg_binding bind[5] = {{m.x, B.dx}, {m.y, B.dy}, {m.a, B.da}, {m.b, B.db}, {m.c, B.dc}};
  tpg_graph *g = make(m.p, bind, 5, TPG_MODE_EXPLICIT);
  float *ycopy = dev_floats(NX);
  if (g) {
    void *cg = NULL;
    CHECK_OK(tpg_graph_export(g, &cg));
    CHECK(cg != NULL);
    /* The test's own graph: poison c, then tpgraph's graph as a child, then copy y out. */
    cudaGraph_t mine;
    CUDA_OK(cudaGraphCreate(&mine, 0));
    cudaGraphNode_t ms, child, cp;
    struct cudaMemsetParams mp = {0};
    mp.dst = B.dc;
    mp.value = 0xffffffffu;
    mp.elementSize = 4;
    mp.width = (size_t)GM * GN;
    mp.height = 1;
    CUDA_OK(cudaGraphAddMemsetNode(&ms, mine, NULL, 0, &mp));
    CUDA_OK(cudaGraphAddChildGraphNode(&child, mine, &ms, 1, (cudaGraph_t)cg));
    CUDA_OK(cudaGraphAddMemcpyNode1D(&cp, mine, &child, 1, ycopy, B.dy, NX * 4, cudaMemcpyDeviceToDevice));
    cudaGraphExec_t ex;
    CUDA_OK(cudaGraphInstantiate(&ex, mine, 0));
    CUDA_OK(cudaGraphLaunch(ex, NULL));
    CUDA_OK(cudaDeviceSynchronize());
    CHECK(axpy_wrong(ycopy, B.hx, NX, m.alpha, m.beta) == 0);
    CHECK(gemm_check("exported, embedded", B.dc, B.fa, B.fb, GM, GN, GK) <= 1.0);
    /* Rebind a kernel view and a captured view: the embedded copy keeps the
     * old graph until refreshed from the export. */
    tpg_binding nb[2] = {{m.x, B.dx2}, {m.a, B.da2}};
    CHECK_OK(tpg_graph_rebind(g, nb, 2));
    CUDA_OK(cudaGraphLaunch(ex, NULL));
    CUDA_OK(cudaDeviceSynchronize());
    CHECK(axpy_wrong(ycopy, B.hx, NX, m.alpha, m.beta) == 0);
    void *cg2 = NULL;
    CHECK_OK(tpg_graph_export(g, &cg2));
    CHECK(cg2 == cg);
    CUDA_OK(cudaGraphExecChildGraphNodeSetParams(ex, child, (cudaGraph_t)cg2));
    CUDA_OK(cudaGraphLaunch(ex, NULL));
    CUDA_OK(cudaDeviceSynchronize());
    int wrong = axpy_wrong(ycopy, B.hx2, NX, m.alpha, m.beta);
    printf("export: after rebind + cudaGraphExecChildGraphNodeSetParams, y wrong %d\n", wrong);
    CHECK(wrong == 0);
    CHECK(gemm_check("exported, rebound, refreshed", B.dc, B.fa2, B.fb, GM, GN, GK) <= 1.0);
    CUDA_OK(cudaGraphExecDestroy(ex));
    CUDA_OK(cudaGraphDestroy(mine));
    CHECK_OK(tpg_graph_destroy(g));
  }
  /* Export is explicit mode only. */
  tpg_graph *ge = make(m.p, bind, 5, TPG_MODE_EAGER);
  if (ge) {
    void *cg = (void *)1;
    CHECK_ST(tpg_graph_export(ge, &cg), TPG_ERROR_UNSUPPORTED, "TPG_MODE_EXPLICIT");
    CHECK(cg == NULL);
    CHECK_OK(tpg_graph_destroy(ge));
  }
  tpg_plan_destroy(m.p);
  bufs_free(&B);
  CUDA_OK(cudaFree(ycopy));
}

static void test_launch_captured(cublasHandle_t h, tpg_graph_mode mode, enum cudaStreamCaptureMode cmode) {
  gemm_user u = {h, GM, GN, GK, 0};
  mixed m;
  mixed_plan(&m, &u);
  bufs B;
  bufs_make(&B);
  tpg_binding bind[5] = {{m.x, B.dx}, {m.y, B.dy}, {m.a, B.da}, {m.b, B.db}, {m.c, B.dc}};
  tpg_graph *g = make(m.p, bind, 5, mode);
  float *ycopy = dev_floats(NX), *hsrc = host_rnd(51, NX), *dsrc = upload_f32(hsrc, NX);
  if (g) {
    /* Explicit mode: rebound before the capture (the capture must take the
     * graph as bound now) and back after it (the copy must keep dx2). */
    float *xin = mode == TPG_MODE_EXPLICIT ? B.dx2 : B.dx;
    if (mode == TPG_MODE_EXPLICIT) {
      tpg_binding nx = {m.x, B.dx2};
      CHECK_OK(tpg_graph_rebind(g, &nx, 1));
    }
    cudaStream_t s;
    CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    CUDA_OK(cudaStreamBeginCapture(s, cmode));
    /* The engine's work before and after ours, on the same stream. */
    CUDA_OK(cudaMemcpyAsync(xin, dsrc, NX * 4, cudaMemcpyDeviceToDevice, s));
    tpg_status st = tpg_graph_launch(g, (tpg_stream)s);
    CHECK_OK(st);
    CUDA_OK(cudaMemcpyAsync(ycopy, B.dy, NX * 4, cudaMemcpyDeviceToDevice, s));
    cudaGraph_t cap;
    CUDA_OK(cudaStreamEndCapture(s, &cap));
    cudaGraphExec_t ex;
    CUDA_OK(cudaGraphInstantiate(&ex, cap, 0));
    if (mode == TPG_MODE_EXPLICIT) {
      /* Rebinding now does not reach the captured copy. */
      tpg_binding nx = {m.x, B.dx};
      CHECK_OK(tpg_graph_rebind(g, &nx, 1));
    }
    CUDA_OK(cudaGraphLaunch(ex, s));
    CUDA_OK(cudaStreamSynchronize(s));
    int wrong = axpy_wrong(ycopy, hsrc, NX, m.alpha, m.beta);
    printf("tpg_graph_launch captured (mode %d, capture mode %d): y wrong %d\n", (int)mode, (int)cmode, wrong);
    CHECK(wrong == 0);
    CHECK(gemm_check("captured launch", B.dc, B.fa, B.fb, GM, GN, GK) <= 1.0);
    if (mode == TPG_MODE_EXPLICIT) { /* while the graph itself reads dx again */
      CHECK_OK(tpg_graph_launch(g, (tpg_stream)s));
      CUDA_OK(cudaStreamSynchronize(s));
      CHECK(axpy_wrong(B.dy, B.hx, NX, m.alpha, m.beta) == 0);
    }
    CUDA_OK(cudaGraphExecDestroy(ex));
    CUDA_OK(cudaGraphDestroy(cap));
    CUDA_OK(cudaStreamDestroy(s));
    CHECK_OK(tpg_graph_destroy(g));
  }
  tpg_plan_destroy(m.p);
  bufs_free(&B);
  free(hsrc);
  CUDA_OK(cudaFree(ycopy));
  CUDA_OK(cudaFree(dsrc));
}

/* ---- (f) the three modes agree ------------------------------------------ */

static void test_modes(cublasHandle_t h) {
  gemm_user u = {h, GM, GN, GK, 0};
  mixed m;
  mixed_plan(&m, &u);
  bufs B;
  bufs_make(&B);
  static const tpg_graph_mode modes[3] = {TPG_MODE_EXPLICIT, TPG_MODE_CAPTURE, TPG_MODE_EAGER};
  float *yref = NULL, *cref = NULL;
  for (int mi = 0; mi < 3; mi++) {
    poison(B.dy, NX * 4);
    poison(B.dc, (size_t)GM * GN * 4);
    tpg_binding bind[5] = {{m.x, B.dx}, {m.y, B.dy}, {m.a, B.da}, {m.b, B.db}, {m.c, B.dc}};
    u.captures = 0;
    tpg_graph *g = make(m.p, bind, 5, modes[mi]);
    if (!g) continue;
    for (int it = 0; it < 2; it++) CHECK_OK(tpg_graph_launch(g, NULL));
    CUDA_OK(cudaDeviceSynchronize());
    /* Explicit and capture capture once; eager calls the callback per launch. */
    CHECK(u.captures == (modes[mi] == TPG_MODE_EAGER ? 2 : 1));
    float *y = download(B.dy, NX), *c = download(B.dc, (size_t)GM * GN);
    if (mi == 0) {
      yref = y;
      cref = c;
      CHECK(axpy_wrong(B.dy, B.hx, NX, m.alpha, m.beta) == 0);
      CHECK(gemm_check("modes: explicit", B.dc, B.fa, B.fb, GM, GN, GK) <= 1.0);
    } else {
      int same_y = memcmp(y, yref, NX * 4) == 0, same_c = memcmp(c, cref, (size_t)GM * GN * 4) == 0;
      printf("mode %d vs explicit: y %s, c %s\n", (int)modes[mi], same_y ? "identical" : "DIFFERENT",
             same_c ? "identical" : "differs (checked against fp64 below)");
      CHECK(same_y);
      CHECK(gemm_check("modes: other", B.dc, B.fa, B.fb, GM, GN, GK) <= 1.0);
      free(y);
      free(c);
    }
    CHECK_OK(tpg_graph_destroy(g));
  }
  free(yref);
  free(cref);
  tpg_plan_destroy(m.p);
  bufs_free(&B);
}

int main(void) {
  const char *dv = getenv("TPG_TEST_DEVICE");
  if (dv) g_dev = atoi(dv);
  MUST(tpg_device_get_info(g_dev, &g_di, sizeof g_di));
  tpg_runtime_info ri;
  MUST(tpg_runtime_get_info(&ri, sizeof ri));
  g_driver = ri.driver_version;
  printf("device %d: %s sm_%d, driver %d\n", g_dev, g_di.name, g_di.sm_arch, g_driver);
  CUDA_OK(cudaSetDevice(g_dev));
  CUDA_OK(cudaFree(NULL)); /* the runtime's primary context, shared with tpgraph */
  const tpg_embedded_blob *blob = &kit_test_blobs[0];
  MUST(tpg_module_load(blob->start, (size_t)(blob->end - blob->start), &g_mod));

  test_kernels();
  cublasHandle_t h;
  if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS) {
    fprintf(stderr, "cublasCreate failed\n");
    return 2;
  }
  /* A workspace up front: cuBLAS must not allocate while being captured. */
  void *ws;
  CUDA_OK(cudaMalloc(&ws, 32 << 20));
  CHECK(cublasSetWorkspace(h, ws, 32 << 20) == CUBLAS_STATUS_SUCCESS);
  /* One GEMM outside any capture first, as engines warm up before capturing:
   * cuBLAS loads its kernels on first use, which a capture should not see. */
  {
    gemm_user wu = {h, GM, GN, GK, 0};
    float *fa = rnd_bf16(1, (size_t)GM * GK, 1.0f), *fb = rnd_bf16(2, (size_t)GK * GN, 1.0f);
    void *ptrs[3] = {upload(fa, (size_t)GM * GK), upload(fb, (size_t)GK * GN), dev_floats((size_t)GM * GN)};
    CHECK(gemm_cb(&wu, NULL, ptrs, 3) == 0);
    CUDA_OK(cudaDeviceSynchronize());
    CHECK(gemm_check("cuBLAS warm-up, no graph", ptrs[2], fa, fb, GM, GN, GK) <= 1.0);
    for (int i = 0; i < 3; i++) CUDA_OK(cudaFree(ptrs[i]));
    free(fa);
    free(fb);
  }
  test_captured(h);
  test_host_events();
  test_export(h);
  test_launch_captured(h, TPG_MODE_EXPLICIT, cudaStreamCaptureModeGlobal);
  test_launch_captured(h, TPG_MODE_EXPLICIT, cudaStreamCaptureModeRelaxed);
  test_launch_captured(h, TPG_MODE_EAGER, cudaStreamCaptureModeRelaxed);
  test_modes(h);
  CHECK(cublasDestroy(h) == CUBLAS_STATUS_SUCCESS);
  CUDA_OK(cudaFree(ws));

  CHECK_OK(tpg_module_destroy(g_mod));
  return TPG_TEST_END();
}
