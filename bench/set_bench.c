/* set_bench.c - one step at many batch sizes: build time, memory, switching
 * and launching, one graph per size against one retargeted exec.
 *
 * The step is step-like and stands alone (no engine kernels): per layer, at
 * the 8B widths by default,
 *   qkv  = h W_qkv^T                      column linear (GEMM)
 *   attn = qkv[:, :H]                     an element-wise node standing in
 *                                         for attention
 *   x   += attn W_o^T;  h2 = rmsnorm(x)   tpg_plan_add_linear_norm
 *   act  = swiglu(h2 W_gu^T)              column linear, SwiGLU
 *   x   += act W_2^T;   h  = rmsnorm(x)   tpg_plan_add_linear_norm
 * at TP 1 (the all-reduces are their epilogue kernels): 5 kernel nodes a
 * layer. Intermediates are scratch slots, so a set shares them in its
 * arena. Weights are shared by the layers unless --distinct-weights (the
 * figures here are the graphs', not the model's).
 *
 * For vLLM's 35 batch sizes (1, 2, 4, 8, 16, ..., 256; --sizes), it prints
 * and writes (--json):
 *   - one graph of the largest size by tpg_graph_create: the floor of a build;
 *   - tpg_graph_set_create, one graph per size: seconds, the arena, each
 *     graph's own allocations and the free-memory drop per graph (what the
 *     driver took for the exec), and with TPG_GRAPH_SET_PRIVATE_SCRATCH what
 *     sharing the arena saves;
 *   - the same with TPG_GRAPH_SET_RETARGET;
 *   - for both: host time of pick + launch over --reps random batch sizes
 *     (the size changing nearly every step, as continuous batching does),
 *     the pick alone when the size changed (the retargeted exec's switch),
 *     and the GPU time of the step at a few sizes (events, median).
 * A benchmark, not a test: it checks return codes, not numbers.
 *
 *   set_bench [--layers 32] [--hidden 4096] [--qkv 6144] [--ffn 14336]
 *             [--sizes 1,2,4,8,...,256] [--reps 200] [--distinct-weights]
 *             [--json PATH]
 */
#define _GNU_SOURCE
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench_common.h"

#define MAX_SIZES 256

static int L = 32, H = 4096, QKV = 6144, FFN = 14336, REPS = 200, DISTINCT = 0;
static int sizes[MAX_SIZES], nsizes;
static const char *json;

/* The engine-side state the builder binds: buffers of the largest size. */
typedef struct {
  void *x, *h;              /* [max, H] residual stream and normed input/output */
  void **w;                 /* per weight set: wqkv, wo, w13, w2, n1, n2 */
  int nsets;
  tpg_binding *b;
  int nb, calls;
} step_state;

static tpg_view V(tpg_slot s) {
  tpg_view v = {s, 0, 0};
  return v;
}

static const char *const wname[6] = {"wqkv", "wo", "w13", "w2", "n1", "n2"};
static size_t wcount(int k) {
  const size_t c[6] = {(size_t)QKV * H, (size_t)H * H, (size_t)2 * FFN * H, (size_t)H * FFN, (size_t)H, (size_t)H};
  return c[k];
}

/* One layer's 5 nodes after *last. */
static void add_layer(tpg_plan *p, int B, const tpg_slot *s, const tpg_slot *w, tpg_node *last) {
  enum { X, HN, QKVS, ATTN, PART, H2, ACT };
  tpg_linear_desc c = TPG_LINEAR_DESC_INIT;
  c.kind = TPG_LINEAR_COLUMN;
  c.tokens = B;
  c.in_features = H;
  c.out_features = QKV;
  c.x = V(s[HN]), c.w = V(w[0]), c.y = V(s[QKVS]);
  MUST(tpg_plan_add_linear(p, &c, last, *last ? 1 : 0, last));
  MUST(tpg_plan_add_axpby(p, V(s[ATTN]), V(s[QKVS]), (size_t)B * H, 1.0f, 0.0f, last, 1, last));
  tpg_linear_desc r = TPG_LINEAR_DESC_INIT;
  r.kind = TPG_LINEAR_ROW;
  r.tokens = B;
  r.in_features = H;
  r.out_features = H;
  r.x = V(s[ATTN]), r.w = V(w[1]), r.residual = V(s[X]), r.y = V(s[H2]);
  tpg_linear_norm e = TPG_LINEAR_NORM_INIT;
  e.partial = V(s[PART]), e.residual_out = V(s[X]), e.norm_weight = V(w[5]), e.norm_eps = 1e-5f;
  MUST(tpg_plan_add_linear_norm(p, &r, &e, last, 1, last));
  c.out_features = FFN;
  c.activation = TPG_ACT_SWIGLU;
  c.x = V(s[H2]), c.w = V(w[2]), c.y = V(s[ACT]);
  MUST(tpg_plan_add_linear(p, &c, last, 1, last));
  r.in_features = FFN;
  r.x = V(s[ACT]), r.w = V(w[3]), r.y = V(s[HN]);
  e.norm_weight = V(w[4]);
  MUST(tpg_plan_add_linear_norm(p, &r, &e, last, 1, last));
}

/* The builder: the step at batch size B, bound to the largest size's buffers. */
static tpg_status build(void *user, int B, tpg_graph_set_step *out) {
  step_state *st = user;
  st->calls++;
  const int mx = sizes[nsizes - 1];
  tpg_plan *p;
  MUST(tpg_plan_create(&p));
  out->plan = p;
  tpg_slot s[7];
  static const char *const sn[7] = {"x", "h", "qkv", "attn", "part", "h2", "act"};
  const size_t cols[7] = {(size_t)H, (size_t)H, (size_t)QKV, (size_t)H, (size_t)H, (size_t)H, (size_t)FFN};
  for (int k = 0; k < 7; k++)
    MUST(tpg_plan_add_slot(p, sn[k], TPG_BF16, k < 2 ? TPG_MEM_DEVICE : TPG_MEM_SCRATCH,
                           (size_t)(k < 2 ? mx : B) * cols[k], &s[k]));
  st->nb = 0;
  st->b[st->nb++] = (tpg_binding){s[0], st->x};
  st->b[st->nb++] = (tpg_binding){s[1], st->h};
  tpg_slot *w = malloc(sizeof(tpg_slot) * 6 * (size_t)st->nsets);
  for (int set = 0; set < st->nsets; set++)
    for (int k = 0; k < 6; k++) {
      char name[32];
      snprintf(name, sizeof name, "l%d.%s", set, wname[k]);
      MUST(tpg_plan_add_slot(p, name, TPG_BF16, TPG_MEM_DEVICE, wcount(k), &w[set * 6 + k]));
      st->b[st->nb++] = (tpg_binding){w[set * 6 + k], st->w[set * 6 + k]};
    }
  tpg_node last = 0;
  for (int l = 0; l < L; l++) add_layer(p, B, s, &w[(l % st->nsets) * 6], &last);
  free(w);
  out->bindings = st->b;
  out->nbindings = st->nb;
  return TPG_SUCCESS;
}

static size_t free_mem(void) {
  size_t fr = 0, tot = 0;
  CUDA_OK(cudaMemGetInfo(&fr, &tot));
  return fr;
}

/* ---- measurements ------------------------------------------------------- */

typedef struct {
  const char *name;
  unsigned flags;
  int max_size;           /* the largest size it was built for */
  char refused[320];      /* why the library refused it, or "" */
  double build_s, builder_s, instantiate_s;
  size_t arena, own, measured, exec_bytes_max, exec_bytes_sum;
  int graphs;
  double pick_launch_us[3], switch_us[3]; /* p10, p50, p90 */
  double gpu_us[4];                        /* at gpu_sizes */
} result;

static const int gpu_sizes[4] = {1, 8, 64, 256};

/* The set of r->flags over sizes[0..nsizes); a refusal (a retargeting set
 * of a step whose kernels differ in launch attributes across sizes) is
 * recorded, not fatal. */
static tpg_status measure_build(step_state *st, result *r, tpg_graph_set **out) {
  tpg_graph_config cfg = TPG_GRAPH_CONFIG_INIT;
  CUDA_OK(cudaDeviceSynchronize());
  const size_t before = free_mem();
  const double t0 = bench_now_us();
  tpg_status rc = tpg_graph_set_create(sizes, nsizes, build, st, &cfg, r->flags, out);
  if (rc == TPG_ERROR_UNSUPPORTED) {
    snprintf(r->refused, sizeof r->refused, "%s", tpg_last_error());
    return rc;
  }
  MUST(rc);
  const double t1 = bench_now_us();
  r->refused[0] = '\0';
  r->max_size = sizes[nsizes - 1];
  const size_t after = free_mem();
  tpg_graph_set_info si;
  MUST(tpg_graph_set_get_info(*out, &si, sizeof si));
  r->build_s = (t1 - t0) * 1e-6;
  r->builder_s = si.builder_us * 1e-6;
  r->arena = si.arena_bytes;
  r->own = si.own_bytes;
  r->measured = before > after ? before - after : 0;
  r->graphs = si.graphs;
  for (int i = 0; i < si.count; i++) {
    tpg_graph_set_size_info zi;
    MUST(tpg_graph_set_get_size_info(*out, i, &zi, sizeof zi));
    const size_t exec = zi.measured_bytes > zi.own_bytes ? zi.measured_bytes - zi.own_bytes : 0;
    r->exec_bytes_sum += exec;
    if (exec > r->exec_bytes_max) r->exec_bytes_max = exec;
    r->instantiate_s += zi.instantiate_us * 1e-6;
  }
  return TPG_SUCCESS;
}

/* GPU time of one launch of g: median of 21 event-timed launches. */
static double gpu_time(tpg_graph *g, cudaStream_t s) {
  cudaEvent_t e0, e1;
  CUDA_OK(cudaEventCreate(&e0));
  CUDA_OK(cudaEventCreate(&e1));
  double t[21];
  for (int i = -3; i < 21; i++) {
    CUDA_OK(cudaEventRecord(e0, s));
    MUST(tpg_graph_launch(g, s));
    CUDA_OK(cudaEventRecord(e1, s));
    CUDA_OK(cudaEventSynchronize(e1));
    float ms;
    CUDA_OK(cudaEventElapsedTime(&ms, e0, e1));
    if (i >= 0) t[i] = ms * 1e3;
  }
  CUDA_OK(cudaEventDestroy(e0));
  CUDA_OK(cudaEventDestroy(e1));
  return bench_median(t, 21);
}

/* pick + launch host time over REPS random batches, the switch (the pick
 * alone when the size changed), then the GPU time at gpu_sizes. */
static void measure_run(tpg_graph_set *set, result *r, cudaStream_t s) {
  const int mx = sizes[nsizes - 1];
  double *pl = malloc(sizeof(double) * (size_t)REPS), *sw = malloc(sizeof(double) * (size_t)REPS);
  int nsw = 0, prev = 0;
  unsigned seed = 12345;
  for (int i = -10; i < REPS; i++) { /* 10 warm-up steps */
    seed = seed * 1103515245u + 12345u;
    const int batch = 1 + (int)((seed >> 8) % (unsigned)mx);
    int size;
    tpg_graph *g;
    const double t0 = bench_now_us();
    MUST(tpg_graph_set_pick(set, batch, &size, &g));
    const double t1 = bench_now_us();
    MUST(tpg_graph_launch(g, s));
    const double t2 = bench_now_us();
    CUDA_OK(cudaStreamSynchronize(s)); /* an engine waits for the step's tokens */
    if (i < 0) continue;
    pl[i] = t2 - t0;
    if (size != prev) sw[nsw++] = t1 - t0;
    prev = size;
  }
  bench_pcts a = bench_percentiles(pl, REPS), b = bench_percentiles(sw, nsw ? nsw : 1);
  r->pick_launch_us[0] = a.p10, r->pick_launch_us[1] = a.p50, r->pick_launch_us[2] = a.p90;
  r->switch_us[0] = b.p10, r->switch_us[1] = b.p50, r->switch_us[2] = b.p90;
  for (int k = 0; k < 4; k++) {
    if (gpu_sizes[k] > mx) continue;
    int size;
    tpg_graph *g;
    MUST(tpg_graph_set_pick(set, gpu_sizes[k], &size, &g));
    r->gpu_us[k] = gpu_time(g, s);
  }
  free(pl);
  free(sw);
}

/* One graph of the largest size by tpg_graph_create: the floor of a build. */
static void measure_floor(step_state *st, result *r, cudaStream_t s) {
  tpg_graph_set_step step;
  memset(&step, 0, sizeof step);
  MUST(build(st, sizes[nsizes - 1], &step));
  tpg_graph_config cfg = TPG_GRAPH_CONFIG_INIT;
  cfg.bindings = step.bindings;
  cfg.nbindings = step.nbindings;
  CUDA_OK(cudaDeviceSynchronize());
  const size_t before = free_mem();
  const double t0 = bench_now_us();
  tpg_graph *g;
  MUST(tpg_graph_create(step.plan, &cfg, &g));
  const double t1 = bench_now_us();
  const size_t after = free_mem();
  tpg_graph_info gi;
  MUST(tpg_graph_get_info(g, &gi, sizeof gi));
  r->build_s = (t1 - t0) * 1e-6;
  r->instantiate_s = gi.instantiate_us * 1e-6;
  r->own = gi.workspace_bytes;
  r->measured = before > after ? before - after : 0;
  r->exec_bytes_max = r->exec_bytes_sum = r->measured > r->own ? r->measured - r->own : 0;
  r->graphs = 1;
  r->max_size = sizes[nsizes - 1];
  double t[21];
  for (int i = -3; i < 21; i++) { /* the launch alone, then the step on the GPU */
    const double h0 = bench_now_us();
    MUST(tpg_graph_launch(g, s));
    if (i >= 0) t[i] = bench_now_us() - h0;
    CUDA_OK(cudaStreamSynchronize(s));
  }
  r->pick_launch_us[1] = bench_median(t, 21);
  r->gpu_us[3] = gpu_time(g, s);
  MUST(tpg_graph_destroy(g));
  MUST(tpg_plan_destroy(step.plan));
}

static void parse(int argc, char **argv) {
  const char *prog = "set_bench";
  nsizes = 0;
  sizes[nsizes++] = 1, sizes[nsizes++] = 2, sizes[nsizes++] = 4;
  for (int b = 8; b <= 256; b += 8) sizes[nsizes++] = b; /* vLLM's 35 capture sizes */
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    int ok = 1;
    if (!strcmp(a, "--layers")) ok = bench_parse_int(prog, a, v, 1, 1024, &L), i++;
    else if (!strcmp(a, "--hidden")) ok = bench_parse_int(prog, a, v, 64, 65536, &H), i++;
    else if (!strcmp(a, "--qkv")) ok = bench_parse_int(prog, a, v, 64, 65536, &QKV), i++;
    else if (!strcmp(a, "--ffn")) ok = bench_parse_int(prog, a, v, 64, 262144, &FFN), i++;
    else if (!strcmp(a, "--reps")) ok = bench_parse_int(prog, a, v, 1, 1000000, &REPS), i++;
    else if (!strcmp(a, "--distinct-weights")) DISTINCT = 1;
    else if (!strcmp(a, "--json") && v) json = v, i++;
    else if (!strcmp(a, "--sizes") && v) {
      nsizes = 0;
      for (char *s = strdup(v), *tok = strtok(s, ","); tok; tok = strtok(NULL, ","))
        ok &= nsizes < MAX_SIZES && bench_parse_int(prog, a, tok, 1, 65536, &sizes[nsizes++]);
      i++;
    } else {
      fprintf(stderr, "%s: unknown or incomplete flag '%s'\n", prog, a);
      ok = 0;
    }
    if (!ok) bench_die();
  }
  if (H % 8 || QKV % 8 || FFN % 8 || QKV < H || nsizes == 0) {
    fprintf(stderr, "%s: --hidden, --qkv, --ffn must be multiples of 8, --qkv >= --hidden, --sizes not empty\n", prog);
    bench_die();
  }
  for (int i = 1; i < nsizes; i++)
    if (sizes[i] <= sizes[i - 1]) {
      fprintf(stderr, "%s: --sizes must be ascending and distinct\n", prog);
      bench_die();
    }
}

static void print_row(const result *r) {
  const double mib = 1.0 / (1 << 20);
  printf("%-22s %7.3f %6d %9.1f %8.1f %10.2f %10.1f %11.1f %9.1f %8.1f %8.1f %8.1f %8.1f\n", r->name, r->build_s,
         r->graphs, r->arena * mib, r->own * mib, r->exec_bytes_max * mib, r->measured * mib, r->pick_launch_us[1],
         r->switch_us[1], r->gpu_us[0], r->gpu_us[1], r->gpu_us[2], r->gpu_us[3]);
}

static void json_row(FILE *f, const result *r, int last) {
  fprintf(f,
          "    {\"name\": \"%s\", \"graphs\": %d, \"build_s\": %.6f, \"builder_s\": %.6f, \"instantiate_s\": %.6f, "
          "\"arena_bytes\": %zu, \"own_bytes\": %zu, \"exec_bytes_max\": %zu, \"exec_bytes_sum\": %zu, "
          "\"measured_bytes\": %zu, \"pick_launch_us\": [%.2f, %.2f, %.2f], \"switch_us\": [%.2f, %.2f, %.2f], "
          "\"gpu_us\": {\"1\": %.1f, \"8\": %.1f, \"64\": %.1f, \"256\": %.1f}, \"max_size\": %d}%s\n",
          r->name, r->graphs, r->build_s, r->builder_s, r->instantiate_s, r->arena, r->own, r->exec_bytes_max,
          r->exec_bytes_sum, r->measured, r->pick_launch_us[0], r->pick_launch_us[1], r->pick_launch_us[2],
          r->switch_us[0], r->switch_us[1], r->switch_us[2], r->gpu_us[0], r->gpu_us[1], r->gpu_us[2], r->gpu_us[3],
          r->max_size, last ? "" : ",");
}

int main(int argc, char **argv) {
  parse(argc, argv);
  CUDA_OK(cudaSetDevice(0));
  const int mx = sizes[nsizes - 1];
  step_state st;
  memset(&st, 0, sizeof st);
  st.nsets = DISTINCT ? L : 1;
  st.w = calloc((size_t)st.nsets * 6, sizeof *st.w);
  st.b = calloc((size_t)st.nsets * 6 + 2, sizeof *st.b);
  CUDA_OK(cudaMalloc(&st.x, (size_t)mx * H * 2));
  CUDA_OK(cudaMalloc(&st.h, (size_t)mx * H * 2));
  CUDA_OK(cudaMemset(st.x, 0, (size_t)mx * H * 2));
  CUDA_OK(cudaMemset(st.h, 0, (size_t)mx * H * 2));
  for (int k = 0; k < st.nsets * 6; k++) {
    CUDA_OK(cudaMalloc(&st.w[k], wcount(k % 6) * 2));
    CUDA_OK(cudaMemset(st.w[k], 0, wcount(k % 6) * 2));
  }
  cudaStream_t s;
  CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  result r[4] = {{.name = "one graph (largest)"},
                 {.name = "graph per size"},
                 {.name = "per size, own scratch", .flags = TPG_GRAPH_SET_PRIVATE_SCRATCH},
                 {.name = "one exec, retargeted", .flags = TPG_GRAPH_SET_RETARGET}};
  measure_floor(&st, &r[0], s); /* also loads the kernels: later builds pay no first-load cost */
  measure_floor(&st, &r[0], s);
  for (int k = 1; k < 3; k++) {
    tpg_graph_set *set;
    MUST(measure_build(&st, &r[k], &set));
    if (k == 1) measure_run(set, &r[k], s);
    MUST(tpg_graph_set_destroy(set));
  }
  /* Retargeting needs every size's kernels to take the largest size's launch
   * attributes; where the step's do not, the largest range of sizes that
   * does is measured, and the refusal is printed. */
  const int all = nsizes;
  char first_refusal[320] = "";
  for (; nsizes > 0; nsizes--) {
    tpg_graph_set *set;
    if (measure_build(&st, &r[3], &set) != TPG_SUCCESS) {
      if (!first_refusal[0]) snprintf(first_refusal, sizeof first_refusal, "%s", r[3].refused);
      continue;
    }
    measure_run(set, &r[3], s);
    MUST(tpg_graph_set_destroy(set));
    break;
  }
  nsizes = all;
  tpg_device_info di;
  MUST(tpg_device_get_info(0, &di, sizeof di));
  printf("set_bench: %s, %d layers (H %d, qkv %d, ffn %d; %d nodes a graph), %d sizes %d..%d, weights %s\n", di.name,
         L, H, QKV, FFN, 5 * L, nsizes, sizes[0], mx, DISTINCT ? "per layer" : "shared by the layers");
  printf("%-22s %7s %6s %9s %8s %10s %10s %11s %9s %8s %8s %8s %8s\n", "", "build s", "graphs", "arena MiB", "own MiB",
         "exec MiB/g", "total MiB", "pick+launch", "switch us", "GPU@1", "GPU@8", "GPU@64", "GPU@256");
  for (int k = 0; k < 4; k++) print_row(&r[k]);
  if (first_refusal[0])
    printf("one exec, retargeted: %s over sizes 1..%d; refused over more: %s\n",
           r[3].max_size ? "measured" : "never accepted", r[3].max_size, first_refusal);
  printf("(build: host seconds of the whole creation; exec MiB/g: the largest free-memory drop of one graph\n"
         " beyond its own allocations, i.e. what the driver took for it; total: free-memory drop over the\n"
         " creation; pick+launch and switch: host us, median over %d random batch sizes; GPU: us per step,\n"
         " median of 21 event-timed launches)\n",
         REPS);
  if (json) {
    FILE *f = fopen(json, "w");
    if (!f) {
      fprintf(stderr, "set_bench: cannot write %s\n", json);
      bench_die();
    }
    fprintf(f, "{");
    bench_meta_json(f, "set_bench", 1);
    fprintf(f, ",\n  \"layers\": %d, \"hidden\": %d, \"qkv\": %d, \"ffn\": %d, \"nodes\": %d, \"sizes\": [", L, H, QKV,
            FFN, 5 * L);
    for (int i = 0; i < nsizes; i++) fprintf(f, "%s%d", i ? ", " : "", sizes[i]);
    fprintf(f, "],\n  \"results\": [\n");
    for (int k = 0; k < 4; k++) json_row(f, &r[k], k == 3);
    fprintf(f, "  ]\n}\n");
    fclose(f);
  }
  for (int k = 0; k < st.nsets * 6; k++) CUDA_OK(cudaFree(st.w[k]));
  CUDA_OK(cudaFree(st.x));
  CUDA_OK(cudaFree(st.h));
  CUDA_OK(cudaStreamDestroy(s));
  free(st.w);
  free(st.b);
  return 0;
}
