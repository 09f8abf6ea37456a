/* tpbench.c - the main job: tensor-parallel MLP layers, every way of running
 * them side by side, on all visible GPUs.
 *
 * For each shape (hidden/ffn), token count and mode it builds a stack of
 * --layers MLP blocks per rank (tpg_plan_mlp, random bf16 weights) and times
 * graph launches with CUDA events (warm-up, then the median of --reps), one
 * host thread per GPU, ranks kept in step by a barrier. Modes:
 *   eager     kernel-by-kernel launches on one stream, NCCL (TPG_MODE_EAGER)
 *   captured  the same sequence stream-captured into a graph, NCCL
 *             (TPG_MODE_CAPTURE), the approach tpgraph started from
 *   nccl      our explicit graph, all-reduces through NCCL child graphs
 *   explicit  our explicit graph, all-reduce algorithm picked by tpgraph
 *             (the one-shot kernel node up to 4 MiB on one machine)
 *   symmetric explicit, NCCL buffers as symmetric windows (TPG_GRAPH_NCCL_SYMMETRIC;
 *             only with --modes)
 *   pdl       explicit with TPG_GRAPH_PDL: programmatic edges GEMV -> GEMV and
 *             all-reduce -> next GEMV (sm_90+; the same as explicit below)
 *   overlap   our explicit graph, token chunks on separate branches
 *   compute   explicit without collectives: exposed comm = explicit - compute
 * Floors per layer and rank: weight bytes / 4.3 TB/s and FLOPs / 790 TFLOP/s.
 * With python3 + torch present it also runs bench/torch_mlp.py (PyTorch eager,
 * torch.cuda.graph and torch.compile + graph, one process per GPU) and puts it beside ours.
 * Prints a table, writes JSON (with the run's metadata and p10/p50/p90) and
 * an SVG plot of per-layer time vs tokens, plus a PNG of it when a converter
 * is there (rsvg-convert, ImageMagick, python3 cairosvg, or bench/report.py
 * --png over Pillow).
 * Flags: tpbench --help.
 */
#define _GNU_SOURCE
#include <cuda_runtime_api.h>
#include <getopt.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench/bench_common.h"
#include "kernels/tpg_kargs.h"
#include "lib/gemm/select.h"

#define MAXV 8
enum { M_EAGER, M_CAPTURED, M_NCCL, M_SYM, M_EXPLICIT, M_PDL, M_OVERLAP, M_COMPUTE, NMODES };
static const char *mode_name[NMODES] = {"eager", "captured", "nccl", "symmetric", "explicit", "pdl", "overlap", "compute"};

static int hid[MAXV] = {8192, 4096}, ffn[MAXV] = {28672, 14336}, nshape = 2;
static int toks[MAXV] = {1, 16, 128, 1024}, ntok = 4;
static int TP = 0, LAYERS = 4, REPS = 20, CHUNKS = 2, SM_RESERVE = 0, use_torch = 1, PASSES = 1;
static int mode_on[NMODES] = {1, 1, 1, 0, 1, 1, 1, 1}; /* symmetric: only when named in --modes */
static tpg_mlp_kind KIND = TPG_MLP_GELU;
static const char *json_path = "tpbench.json", *svg_path = "tpbench.svg", *torch_script = NULL;
static const char *PROG = "tpbench";
static int make_png = 1;

/* results[shape][tok][mode] in us per layer (rank 0), the median; NAN = not
 * run. res_lo / res_hi: p10 and p90 of the same launches. */
static double res[MAXV][MAXV][NMODES], res_lo[MAXV][MAXV][NMODES], res_hi[MAXV][MAXV][NMODES];
static double torch_res[MAXV][MAXV][6]; /* eager, graph, eager noAR, graph noAR, compile + graph, the same noAR */
/* Which GEMM family ran each graph's GEMM nodes (tpg_graph_info, rank 0):
 * ours, CUTLASS, cuBLASLt; and rank 0's fc1 / fc2 by the rule's names
 * ("family:variant", lib/gemm/select.h: what the graph picks with tuning off). */
static int gemm_fam[MAXV][MAXV][NMODES][3];
static char gemm_pick[MAXV][MAXV][2][48];

static pthread_barrier_t barrier;
static tpg_comm_id g_id;

/* A comma list of 1..MAXV integers in [lo, hi] for `flag`; its length, or 0
 * after printing what is wrong. */
static int parse_list(const char *flag, const char *s, int lo, int hi, int *out) {
  char buf[512];
  if (strlen(s) >= sizeof buf) {
    fprintf(stderr, "%s: %s: list too long\n", PROG, flag);
    return 0;
  }
  snprintf(buf, sizeof buf, "%s", s);
  int n = 0;
  for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
    if (n == MAXV) {
      fprintf(stderr, "%s: %s: at most %d values\n", PROG, flag, MAXV);
      return 0;
    }
    if (!bench_parse_int(PROG, flag, t, lo, hi, &out[n])) return 0;
    n++;
  }
  if (n == 0) fprintf(stderr, "%s: %s: empty list\n", PROG, flag);
  return n;
}

typedef struct {
  int rank;
  tpg_comm *comm;
  cudaStream_t stream;
  void *wbuf;       /* all weights of one shape: layers x (w1, b1, w2, b2) */
  size_t wbytes;
  void *x, *y;
} rank_state;

static void fill_random(void *d, size_t bytes, uint64_t seed) {
  /* One random block copied over the buffer: real bit patterns (zeros and
   * constants run faster than real data), cheap to make. */
  size_t blk = 64u << 20;
  uint16_t *h = malloc(blk);
  uint64_t z = seed * 0x9E3779B97F4A7C15ull + 1;
  for (size_t i = 0; i < blk / 2; i++) {
    z ^= z << 13; z ^= z >> 7; z ^= z << 17;
    /* bf16 in +-[2^-8, 2^-6): finite, small, random mantissa and sign */
    h[i] = (uint16_t)(0x3b80u + (z & 0x7fu) + ((z >> 8) & 1u ? 0x8000u : 0u) + ((z >> 9) & 1u) * 0x80u);
  }
  for (size_t off = 0; off < bytes; off += blk)
    CUDA_OK(cudaMemcpy((char *)d + off, h, bytes - off < blk ? bytes - off : blk, cudaMemcpyHostToDevice));
  free(h);
}

typedef struct { int shape, tok, mode; } job;

static bench_pcts time_graph(rank_state *st, tpg_graph *g) {
  cudaEvent_t e0, e1;
  CUDA_OK(cudaEventCreate(&e0));
  CUDA_OK(cudaEventCreate(&e1));
  for (int i = 0; i < 3; i++) MUST(tpg_graph_launch(g, (tpg_stream)st->stream));
  MUST(tpg_comm_wait(st->comm, (tpg_stream)st->stream));
  double *v = malloc(sizeof(double) * (size_t)REPS);
  for (int r = 0; r < REPS; r++) {
    pthread_barrier_wait(&barrier);
    CUDA_OK(cudaEventRecord(e0, st->stream));
    MUST(tpg_graph_launch(g, (tpg_stream)st->stream));
    CUDA_OK(cudaEventRecord(e1, st->stream));
    MUST(tpg_comm_wait(st->comm, (tpg_stream)st->stream));
    float ms;
    CUDA_OK(cudaEventElapsedTime(&ms, e0, e1));
    v[r] = 1000.0 * ms;
  }
  bench_pcts pc = bench_percentiles(v, REPS);
  free(v);
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  return pc;
}

static int g_nranks;

/* Rank 0's fc1 and fc2 as the rule picks them on this GPU: the family and
 * variant names (TPG_GEMM_FAMILY as the graph reads it). */
static void gemm_picks(int si, int ti, int sm_reserve) {
  struct cudaDeviceProp pr;
  const char *env = getenv("TPG_GEMM_FAMILY");
  const int fam = env && env[0] ? tpg_gemm_family_parse(env) : TPG_GEMM_FAMILY_AUTO;
  const int sw = KIND == TPG_MLP_SWIGLU, Fr = ffn[si] / g_nranks, H = hid[si];
  CUDA_OK(cudaGetDeviceProperties(&pr, 0));
  const int sms = pr.multiProcessorCount - sm_reserve, arch = pr.major * 10 + pr.minor;
  const int shape[2][4] = {{Fr, H, sw ? TPG_EPI_SWIGLU : TPG_EPI_BIAS_GELU, 0},
                           {H, Fr, TPG_EPI_RESIDUAL, KIND == TPG_MLP_GELU}};
  for (int i = 0; i < 2; i++) {
    tpg_gemm_problem p = tpg_gemm_problem_make(toks[ti], shape[i][0], shape[i][1], TPG_KDT_BF16, shape[i][2], arch,
                                               sms >= pr.multiProcessorCount / 2 ? sms : pr.multiProcessorCount / 2);
    tpg_gemm_variant v;
    char name[32] = "?";
    memset(&v, 0, sizeof v);
    p.residual_bias = shape[i][3];
    if (fam >= 0 && !tpg_gemm_select_rule_variant(&p, fam, &v, NULL, 0)) tpg_gemm_variant_name(&v, name, sizeof name);
    snprintf(gemm_pick[si][ti][i], sizeof gemm_pick[si][ti][i], "%s:%s",
             tpg_gemm_family_name(fam >= 0 ? tpg_gemm_variant_family(&v) : -1), name);
  }
}

static void run_one(rank_state *st, int si, int ti, int mode) {
  int H = hid[si], F = ffn[si], M = toks[ti], n = g_nranks;
  tpg_mlp_desc d = TPG_MLP_DESC_INIT;
  d.kind = KIND;
  d.layers = LAYERS;
  d.tokens = M;
  d.hidden = H;
  d.ffn = F;
  d.rank = st->rank;
  d.nranks = n;
  d.bias = KIND == TPG_MLP_GELU;
  d.collectives = mode != M_COMPUTE;
  d.overlap = mode == M_OVERLAP ? TPG_OVERLAP_CHUNKED : TPG_OVERLAP_NONE;
  d.chunks = mode == M_OVERLAP ? CHUNKS : 0;
  d.sm_reserve = mode == M_OVERLAP ? SM_RESERVE : 0;
  d.allreduce = (mode == M_EAGER || mode == M_CAPTURED || mode == M_NCCL || mode == M_SYM) ? TPG_ALGO_NCCL : TPG_ALGO_AUTO;
  tpg_plan *p;
  MUST(tpg_plan_mlp(&d, &p));
  int sw = KIND == TPG_MLP_SWIGLU, Fr = F / n, F1 = sw ? 2 * Fr : Fr;
  size_t per_layer = ((size_t)F1 * H + (size_t)F1 + (size_t)H * Fr + (size_t)H) * 2;
  per_layer = (per_layer + 255) & ~(size_t)255;
  tpg_binding *b = calloc((size_t)(4 * LAYERS + 2), sizeof *b);
  int nb = 0;
  tpg_slot s;
  MUST(tpg_plan_find_slot(p, "x", &s)); b[nb++] = (tpg_binding){s, st->x};
  MUST(tpg_plan_find_slot(p, "y", &s)); b[nb++] = (tpg_binding){s, st->y};
  for (int l = 0; l < LAYERS; l++) {
    char nm[32];
    char *base = (char *)st->wbuf + (size_t)l * per_layer;
    size_t o_b1 = ((size_t)F1 * H * 2 + 255) & ~(size_t)255, o_w2 = o_b1 + (((size_t)F1 * 2 + 255) & ~(size_t)255);
    size_t o_b2 = o_w2 + (((size_t)H * Fr * 2 + 255) & ~(size_t)255);
    snprintf(nm, sizeof nm, "l%d.w1", l); MUST(tpg_plan_find_slot(p, nm, &s)); b[nb++] = (tpg_binding){s, base};
    snprintf(nm, sizeof nm, "l%d.w2", l); MUST(tpg_plan_find_slot(p, nm, &s)); b[nb++] = (tpg_binding){s, base + o_w2};
    if (d.bias) {
      snprintf(nm, sizeof nm, "l%d.b1", l); MUST(tpg_plan_find_slot(p, nm, &s)); b[nb++] = (tpg_binding){s, base + o_b1};
      if (st->rank == 0 || !d.collectives) {
        snprintf(nm, sizeof nm, "l%d.b2", l); MUST(tpg_plan_find_slot(p, nm, &s)); b[nb++] = (tpg_binding){s, base + o_b2};
      }
    }
  }
  tpg_graph_config cfg = TPG_GRAPH_CONFIG_INIT;
  cfg.device = st->rank;
  cfg.comm = st->comm;
  cfg.bindings = b;
  cfg.nbindings = nb;
  cfg.mode = mode == M_EAGER ? TPG_MODE_EAGER : mode == M_CAPTURED ? TPG_MODE_CAPTURE : TPG_MODE_EXPLICIT;
  cfg.flags = mode == M_SYM ? TPG_GRAPH_NCCL_SYMMETRIC : mode == M_PDL ? TPG_GRAPH_PDL : 0u;
  tpg_graph *g;
  MUST(tpg_graph_create(p, &cfg, &g));
  if (st->rank == 0) {
    tpg_graph_info gi;
    MUST(tpg_graph_get_info(g, &gi, sizeof gi));
    gemm_fam[si][ti][mode][0] = gi.gemm_ours_nodes;
    gemm_fam[si][ti][mode][1] = gi.gemm_cutlass_nodes;
    gemm_fam[si][ti][mode][2] = gi.gemm_cublaslt_nodes;
    if (mode == M_EXPLICIT || !gemm_pick[si][ti][0][0]) gemm_picks(si, ti, d.sm_reserve);
  }
  if (mode == M_PDL && st->rank == 0 && si == 0 && ti == 0) {
    tpg_graph_info gi;
    MUST(tpg_graph_get_info(g, &gi, sizeof gi));
    fprintf(stderr, "\rtpbench: pdl: %d programmatic edges in a %d-layer graph of %d nodes%s\n", gi.programmatic_edges,
            LAYERS, gi.nodes, gi.programmatic_edges ? "" : " (GPU below sm_90: the flag is ignored)");
  }
  bench_pcts pc = time_graph(st, g);
  if (st->rank == 0) {
    res[si][ti][mode] = pc.p50 / LAYERS;
    res_lo[si][ti][mode] = pc.p10 / LAYERS;
    res_hi[si][ti][mode] = pc.p90 / LAYERS;
  }
  MUST(tpg_graph_destroy(g));
  tpg_plan_destroy(p);
  free(b);
}

static size_t layer_bytes_max(int n) {
  size_t mx = 0;
  for (int si = 0; si < nshape; si++) {
    int H = hid[si], Fr = ffn[si] / n, F1 = KIND == TPG_MLP_SWIGLU ? 2 * Fr : Fr;
    size_t per = ((size_t)F1 * H + (size_t)F1 + (size_t)H * Fr + (size_t)H) * 2 + 4 * 256;
    if (per > mx) mx = per;
  }
  return mx;
}

static void *rank_main(void *arg) {
  rank_state *st = arg;
  CUDA_OK(cudaSetDevice(st->rank));
  tpg_comm_config cc = TPG_COMM_CONFIG_INIT;
  cc.device = st->rank;
  cc.rank = st->rank;
  cc.nranks = g_nranks;
  cc.timeout_ms = 60000;
  MUST(tpg_comm_create(&g_id, &cc, &st->comm));
  CUDA_OK(cudaStreamCreateWithFlags(&st->stream, cudaStreamNonBlocking));
  st->wbytes = layer_bytes_max(g_nranks) * (size_t)LAYERS;
  CUDA_OK(cudaMalloc(&st->wbuf, st->wbytes));
  fill_random(st->wbuf, st->wbytes, 17 + (uint64_t)st->rank);
  int maxM = 1, maxH = 8;
  for (int i = 0; i < ntok; i++) if (toks[i] > maxM) maxM = toks[i];
  for (int i = 0; i < nshape; i++) if (hid[i] > maxH) maxH = hid[i];
  CUDA_OK(cudaMalloc(&st->x, (size_t)maxM * maxH * 2));
  CUDA_OK(cudaMalloc(&st->y, (size_t)maxM * maxH * 2));
  fill_random(st->x, (size_t)maxM * maxH * 2, 99 + (uint64_t)st->rank);
  int total = 0, done = 0;
  for (int si = 0; si < nshape; si++)
    for (int ti = 0; ti < ntok; ti++)
      for (int m = 0; m < NMODES; m++) total += mode_on[m] && !(m == M_OVERLAP && toks[ti] < CHUNKS);
  for (int si = 0; si < nshape; si++)
    for (int ti = 0; ti < ntok; ti++)
      for (int m = 0; m < NMODES; m++) {
        if (!mode_on[m] || (m == M_OVERLAP && toks[ti] < CHUNKS)) continue;
        if (st->rank == 0) {
          fprintf(stderr, "\rtpbench: [%d/%d] %d/%d tokens %-5d %-9s", ++done, total, hid[si], ffn[si], toks[ti],
                  mode_name[m]);
          fflush(stderr);
        }
        pthread_barrier_wait(&barrier);
        run_one(st, si, ti, m);
      }
  if (st->rank == 0) fprintf(stderr, "\rtpbench: %d runs done%40s\n", total, "");
  MUST(tpg_comm_destroy(st->comm));
  cudaFree(st->wbuf);
  cudaFree(st->x);
  cudaFree(st->y);
  cudaStreamDestroy(st->stream);
  return NULL;
}

/* ---- PyTorch baseline ---------------------------------------------------- */

static void run_torch(int n) {
  const char *cands[] = {torch_script, "bench/torch_mlp.py", NULL};
  const char *script = NULL;
  for (int i = 0; i < 3 && !script; i++)
    if (cands[i] && access(cands[i], R_OK) == 0) script = cands[i];
  if (!script) {
    printf("PyTorch baseline: bench/torch_mlp.py not found (run from the repository root or pass --torch-script)\n");
    use_torch = 0;
    return;
  }
  if (system("python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' >/dev/null 2>&1") != 0) {
    printf("PyTorch baseline: python3 with CUDA torch not found here; only tpgraph's modes are shown\n");
    use_torch = 0;
    return;
  }
  char cmd[2048], hs[128] = "", fs[128] = "", ts[128] = "";
  for (int i = 0; i < nshape; i++) snprintf(hs + strlen(hs), sizeof hs - strlen(hs), "%s%d", i ? "," : "", hid[i]);
  for (int i = 0; i < nshape; i++) snprintf(fs + strlen(fs), sizeof fs - strlen(fs), "%s%d", i ? "," : "", ffn[i]);
  for (int i = 0; i < ntok; i++) snprintf(ts + strlen(ts), sizeof ts - strlen(ts), "%s%d", i ? "," : "", toks[i]);
  snprintf(cmd, sizeof cmd, "timeout 900 python3 %s --tp %d --hidden %s --ffn %s --tokens %s --layers %d --reps %d --kind %s",
           script, n, hs, fs, ts, LAYERS, REPS, KIND == TPG_MLP_GELU ? "gelu" : "swiglu");
  fprintf(stderr, "tpbench: PyTorch baseline: %s\n", cmd);
  FILE *f = popen(cmd, "r");
  if (!f) { use_torch = 0; return; }
  char line[512];
  int got = 0;
  while (fgets(line, sizeof line, f)) {
    int H, F, M;
    double e, g, en, gn, c = 0, cn = 0;
    const int k = sscanf(line, "TORCH %d %d %d %lf %lf %lf %lf %lf %lf", &H, &F, &M, &e, &g, &en, &gn, &c, &cn);
    if (k == 7 || k == 9) { /* 9: with torch.compile + graph (the script's default) */
      for (int si = 0; si < nshape; si++)
        for (int ti = 0; ti < ntok; ti++)
          if (hid[si] == H && ffn[si] == F && toks[ti] == M) {
            torch_res[si][ti][0] = e; torch_res[si][ti][1] = g; torch_res[si][ti][2] = en; torch_res[si][ti][3] = gn;
            torch_res[si][ti][4] = c; torch_res[si][ti][5] = cn;
            got++;
          }
    } else {
      fputs(line, stderr);
    }
  }
  if (pclose(f) != 0 || !got) {
    printf("PyTorch baseline: the script failed; only tpgraph's modes are shown\n");
    use_torch = got > 0;
  }
}

/* ---- output ---------------------------------------------------------------- */

static double floor_us(int si, int ti, int n) {
  int H = hid[si], Fr = ffn[si] / n, M = toks[ti], sw = KIND == TPG_MLP_SWIGLU;
  double wbytes = ((double)(sw ? 2 : 1) * Fr * H + (double)H * Fr) * 2.0;
  double flops = 2.0 * M * ((double)(sw ? 2 : 1) * Fr * H + (double)H * Fr);
  double a = wbytes / 4.3e12 * 1e6, b = flops / 790e12 * 1e6;
  return a > b ? a : b;
}

/* Round tick values for a log axis over [lo, hi]: 1, 2, 5 x 10^k, or every
 * integer multiple of 10^k when the range is narrower than that gives two of. */
static int log_ticks(double lo, double hi, double *out, int cap) {
  static const int steps[2][9] = {{1, 2, 5}, {1, 2, 3, 4, 5, 6, 7, 8, 9}};
  static const int nsteps[2] = {3, 9};
  int n = 0;
  for (int dense = 0; dense < 2 && n < 2; dense++) {
    n = 0;
    for (int k = (int)floor(log10(lo)); k <= (int)ceil(log10(hi)); k++)
      for (int i = 0; i < nsteps[dense]; i++) {
        double v = steps[dense][i] * pow(10.0, k);
        if (v >= lo && v <= hi && n < cap) out[n++] = v;
      }
  }
  return n;
}

typedef struct {
  const char *name, *color, *dash;
  double vals[MAXV];
  double last; /* the rightmost value: orders the legend as the lines end */
} series;

static int series_cmp(const void *a, const void *b) {
  double x = ((const series *)a)->last, y = ((const series *)b)->last;
  return (x < y) - (x > y); /* highest first: the legend reads top to bottom like the lines */
}

static void write_svg(int n) {
  FILE *f = fopen(svg_path, "w");
  if (!f) { fprintf(stderr, "%s: cannot write %s\n", PROG, svg_path); return; }
  const int W = 560, Hh = 380, ml = 70, mr = 150, mt = 40, mb = 50;
  const char *col[] = {"#d62728", "#ff7f0e", "#1f77b4", "#17becf", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#bcbd22", "#7f7f7f"};
  fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" font-family=\"sans-serif\" font-size=\"11\">\n",
          W * nshape, Hh);
  fprintf(f, "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n");
  for (int si = 0; si < nshape; si++) {
    int ox = si * W;
    /* log-log: decode (tens of us) and prefill (hundreds) on one chart */
    series ser[NMODES + 4];
    int ns = 0;
    double ymax = 0, ymin = INFINITY;
    for (int s = 0; s < NMODES + 4; s++) {
      series *q = &ser[ns];
      int ok = 0;
      q->last = NAN;
      for (int ti = 0; ti < ntok; ti++) {
        double v = NAN;
        if (s < NMODES) v = res[si][ti][s];
        else if (s == NMODES && use_torch) v = torch_res[si][ti][0];
        else if (s == NMODES + 1 && use_torch) v = torch_res[si][ti][1];
        else if (s == NMODES + 2) v = floor_us(si, ti, n);
        else if (s == NMODES + 3 && use_torch && torch_res[si][ti][4] > 0) v = torch_res[si][ti][4];
        q->vals[ti] = v;
        if (v > 0) {
          ok++;
          q->last = v;
          if (v > ymax) ymax = v;
          if (v < ymin) ymin = v;
        }
      }
      if (!ok) continue;
      q->name = s < NMODES ? mode_name[s] : s == NMODES ? "torch eager" : s == NMODES + 1 ? "torch graph"
              : s == NMODES + 2 ? "floor" : "torch compile";
      q->color = s == NMODES + 2 ? "black" : col[s % 10];
      q->dash = s == NMODES + 2 ? " stroke-dasharray=\"4,3\"" : s >= NMODES ? " stroke-dasharray=\"1,2\"" : "";
      ns++;
    }
    qsort(ser, (size_t)ns, sizeof ser[0], series_cmp);
    if (!(ymax > 0)) ymax = 1;
    if (!(ymin > 0) || ymin >= ymax) ymin = ymax / 10;
    ymax *= 1.15;
    ymin *= 0.85;
    const double ly0 = log(ymin), ly1 = log(ymax);
    double lx0 = log((double)toks[0]), lx1 = log((double)toks[ntok - 1]);
    if (lx1 <= lx0) lx1 = lx0 + 1;
#define PX(t) (ox + ml + (log((double)(t)) - lx0) / (lx1 - lx0) * (W - ml - mr))
#define PY(v) (mt + (1.0 - (log(v) - ly0) / (ly1 - ly0)) * (Hh - mt - mb))
    fprintf(f, "<text x=\"%d\" y=\"20\" font-size=\"13\">hidden %d / ffn %d, TP=%d, bf16: us per layer (log scale)</text>\n", ox + ml,
            hid[si], ffn[si], n);
    fprintf(f, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"black\"/>\n", ox + ml, Hh - mb, ox + W - mr, Hh - mb);
    fprintf(f, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"black\"/>\n", ox + ml, mt, ox + ml, Hh - mb);
    double ticks[64];
    int nt = log_ticks(ymin, ymax, ticks, 64);
    double last_y = INFINITY;
    for (int k = 0; k < nt; k++) {
      double y = PY(ticks[k]);
      fprintf(f, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#ddd\"/>\n", ox + ml, y, ox + W - mr, y);
      if (last_y - y < 13) continue; /* a label needs ~13 px: skip one that would touch the one below */
      fprintf(f, "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\">%g</text>\n", ox + ml - 4, y + 4, ticks[k]);
      last_y = y;
    }
    double last_x = -INFINITY;
    for (int ti = 0; ti < ntok; ti++) {
      double x = PX(toks[ti]);
      int digits = snprintf(NULL, 0, "%d", toks[ti]);
      if (x - last_x < 7.0 * digits + 6) continue; /* too close to the previous label */
      fprintf(f, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"black\"/>\n", x, Hh - mb, x, Hh - mb + 4);
      fprintf(f, "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">%d</text>\n", x, Hh - mb + 15, toks[ti]);
      last_x = x;
    }
    fprintf(f, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\">tokens</text>\n", ox + (W - mr + ml) / 2, Hh - 12);
    /* The legend sits right of the plot, one row per line in the order the
     * lines end (highest first), so no two labels share a place. */
    for (int li = 0; li < ns; li++) {
      const series *q = &ser[li];
      fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"2\"%s points=\"", q->color, q->dash);
      for (int ti = 0; ti < ntok; ti++)
        if (q->vals[ti] > 0) fprintf(f, "%.1f,%.1f ", PX(toks[ti]), PY(q->vals[ti]));
      fprintf(f, "\"/>\n");
      fprintf(f, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"%s\" stroke-width=\"2\"%s/>", ox + W - mr + 10,
              mt + 14 * li, ox + W - mr + 30, mt + 14 * li, q->color, q->dash);
      fprintf(f, "<text x=\"%d\" y=\"%d\">%s</text>\n", ox + W - mr + 35, mt + 14 * li + 4, q->name);
    }
#undef PX
#undef PY
  }
  fprintf(f, "</svg>\n");
  fclose(f);
}

/* A PNG beside the SVG (same name, .png) with the first converter found;
 * the SVG stays the source. Returns 1 if one was written. */
static int write_png(void) {
  char png[4200], cmd[9000];
  size_t l = strlen(svg_path);
  if (l > 4 && !strcmp(svg_path + l - 4, ".svg")) snprintf(png, sizeof png, "%.*s.png", (int)(l - 4), svg_path);
  else snprintf(png, sizeof png, "%s.png", svg_path);
  if (strchr(svg_path, '\'') || strchr(png, '\'')) return 0;
  unlink(png); /* a PNG from an earlier run must not pass for this one */
  const char *tries[] = {
      "command -v rsvg-convert >/dev/null 2>&1 && rsvg-convert -b white -z 2 -o '%2$s' '%1$s'",
      "command -v magick >/dev/null 2>&1 && magick -density 192 '%1$s' '%2$s'",
      "command -v convert >/dev/null 2>&1 && convert -density 192 '%1$s' '%2$s'",
      "python3 -c 'import sys, cairosvg; cairosvg.svg2png(url=sys.argv[1], write_to=sys.argv[2], scale=2)' '%1$s' '%2$s'",
  };
  /* Last: bench/report.py's own rasterizer over Pillow (torchvision brings it),
   * for GPU machines with none of the above. Found like torch_mlp.py. */
  char report[4200] = "bench/report.py", last[9000] = "false";
  if (torch_script && strrchr(torch_script, '/'))
    snprintf(report, sizeof report, "%.*s/report.py", (int)(strrchr(torch_script, '/') - torch_script), torch_script);
  if (access(report, R_OK) != 0) snprintf(report, sizeof report, "bench/report.py");
  if (access(report, R_OK) == 0 && !strchr(report, '\''))
    snprintf(last, sizeof last, "python3 '%s' --png '%%1$s' '%%2$s'", report);
  for (size_t i = 0; i <= sizeof tries / sizeof tries[0]; i++) {
    snprintf(cmd, sizeof cmd, i < sizeof tries / sizeof tries[0] ? tries[i] : last, svg_path, png);
    char quiet[9100];
    snprintf(quiet, sizeof quiet, "(%s) >/dev/null 2>&1", cmd);
    if (system(quiet) == 0 && access(png, R_OK) == 0) {
      printf("wrote %s\n", png);
      return 1;
    }
  }
  printf("no PNG: no converter here (rsvg-convert from librsvg2-bin, ImageMagick, python3 with cairosvg or with\n"
         "Pillow and bench/report.py); elsewhere:\n"
         "  rsvg-convert -b white -z 2 -o '%s' '%s'\n", png, svg_path);
  return 0;
}

static void write_json(int n) {
  FILE *f = fopen(json_path, "w");
  if (!f) { fprintf(stderr, "tpbench: cannot write %s\n", json_path); return; }
  fprintf(f, "{");
  bench_meta_json(f, PROG, n);
  fprintf(f, ",\n \"tp\": %d, \"layers\": %d, \"reps\": %d, \"kind\": \"%s\", \"dtype\": \"bf16\", \"unit\": \"us per layer\",\n"
          " \"overlap_chunks\": %d, \"overlap_sm_reserve\": %d, \"passes\": %d, \"rows\": [\n",
          n, LAYERS, REPS, KIND == TPG_MLP_GELU ? "gelu" : "swiglu", CHUNKS, SM_RESERVE ? SM_RESERVE : 16, PASSES);
  int first = 1;
  for (int si = 0; si < nshape; si++)
    for (int ti = 0; ti < ntok; ti++) {
      fprintf(f, "%s  {\"hidden\": %d, \"ffn\": %d, \"tokens\": %d, \"floor\": %.2f", first ? "" : ",\n", hid[si], ffn[si],
              toks[ti], floor_us(si, ti, n));
      first = 0;
      for (int m = 0; m < NMODES; m++)
        if (res[si][ti][m] > 0) fprintf(f, ", \"%s\": %.2f", mode_name[m], res[si][ti][m]);
      if (use_torch && torch_res[si][ti][0] > 0)
        fprintf(f, ", \"torch_eager\": %.2f, \"torch_graph\": %.2f, \"torch_eager_noar\": %.2f, \"torch_graph_noar\": %.2f"
                ", \"torch_compile\": %.2f, \"torch_compile_noar\": %.2f",
                torch_res[si][ti][0], torch_res[si][ti][1], torch_res[si][ti][2], torch_res[si][ti][3],
                torch_res[si][ti][4], torch_res[si][ti][5]);
      /* The GEMM families: rank 0's fc1 / fc2 by the rule, and per mode the
       * graph's GEMM nodes by family [ours, cutlass, cublaslt]. */
      fprintf(f, ", \"gemm\": {\"fc1\": \"%s\", \"fc2\": \"%s\"", gemm_pick[si][ti][0], gemm_pick[si][ti][1]);
      for (int m = 0; m < NMODES; m++)
        if (res[si][ti][m] > 0)
          fprintf(f, ", \"%s\": [%d, %d, %d]", mode_name[m], gemm_fam[si][ti][m][0], gemm_fam[si][ti][m][1],
                  gemm_fam[si][ti][m][2]);
      fprintf(f, "}");
      /* Each mode's spread over the launches: [p10, p50, p90] us per layer. */
      fprintf(f, ", \"pct\": {");
      int firstm = 1;
      for (int m = 0; m < NMODES; m++)
        if (res[si][ti][m] > 0) {
          fprintf(f, "%s\"%s\": [%.2f, %.2f, %.2f]", firstm ? "" : ", ", mode_name[m], res_lo[si][ti][m], res[si][ti][m],
                  res_hi[si][ti][m]);
          firstm = 0;
        }
      fprintf(f, "}}");
    }
  fprintf(f, "\n]}\n");
  fclose(f);
}

static void print_table(int n) {
  printf("\ntpbench: TP=%d, %s MLP, bf16, %d layers per graph, median of %d; us per layer (rank 0)\n", n,
         KIND == TPG_MLP_GELU ? "GeLU (Megatron)" : "SwiGLU", LAYERS, REPS);
  printf("%-12s %6s %8s %8s %8s %8s %8s %8s %8s %8s %8s %8s %9s %9s %9s %10s\n", "hidden/ffn", "tokens", "eager", "captured",
         "nccl", "symmetr", "explicit", "pdl", "overlap", "compute", "exposed", "floor", "torch-eag", "torch-grf", "torch-cmp",
         "best/floor");
  for (int si = 0; si < nshape; si++)
    for (int ti = 0; ti < ntok; ti++) {
      double *r = res[si][ti], fl = floor_us(si, ti, n);
      char sh[32];
      snprintf(sh, sizeof sh, "%d/%d", hid[si], ffn[si]);
      double best = INFINITY;
      for (int m = M_EAGER; m <= M_OVERLAP; m++) if (r[m] > 0 && r[m] < best) best = r[m];
      double bex = INFINITY; /* best explicit: plain, PDL or overlap */
      for (int m = M_EXPLICIT; m <= M_OVERLAP; m++) if (r[m] > 0 && r[m] < bex) bex = r[m];
      double exp_ = isfinite(bex) && r[M_COMPUTE] > 0 ? bex - r[M_COMPUTE] : NAN;
      printf("%-12s %6d", sh, toks[ti]);
      for (int m = 0; m < NMODES; m++) r[m] > 0 ? printf(" %8.1f", r[m]) : printf(" %8s", "-");
      printf(" %8.1f %8.1f", exp_, fl);
      if (use_torch && torch_res[si][ti][0] > 0) printf(" %9.1f %9.1f", torch_res[si][ti][0], torch_res[si][ti][1]);
      else printf(" %9s %9s", "-", "-");
      if (use_torch && torch_res[si][ti][4] > 0) printf(" %9.1f", torch_res[si][ti][4]);
      else printf(" %9s", "-");
      printf(" %9.2fx\n", best / fl);
    }
  printf("exposed = best explicit (plain, pdl or overlap) - compute-only (no PDL); floor = max(weight bytes / 4.3 TB/s, FLOPs / 790 TFLOP/s)\n");
  printf("GEMM families (rank 0, family:variant as the rule picks them; explicit graph's nodes ours/cutlass/cublaslt):\n");
  for (int si = 0; si < nshape; si++)
    for (int ti = 0; ti < ntok; ti++)
      printf("  %d/%d %5d tokens: fc1 %s, fc2 %s; nodes %d/%d/%d\n", hid[si], ffn[si], toks[ti], gemm_pick[si][ti][0],
             gemm_pick[si][ti][1], gemm_fam[si][ti][M_EXPLICIT][0], gemm_fam[si][ti][M_EXPLICIT][1],
             gemm_fam[si][ti][M_EXPLICIT][2]);
}

static void usage(FILE *f) {
  fprintf(f,
          "usage: tpbench [options]\n"
          "\n"
          "Times tensor-parallel MLP layers (tpg_plan_mlp, random bf16 weights) on the visible GPUs, one host\n"
          "thread per GPU, for every shape x token count x mode; prints a table (us per layer, median), writes\n"
          "JSON (p10/p50/p90 and the run's metadata), an SVG plot and, with a converter, a PNG of it.\n"
          "\n"
          "Modes (the same layers, run the ways tpgraph replaces and the ways it offers):\n"
          "  eager      every kernel and ncclAllReduce launched one by one on a stream (TPG_MODE_EAGER)\n"
          "  captured   that sequence stream-captured into a CUDA graph, NCCL all-reduces (TPG_MODE_CAPTURE)\n"
          "  nccl       tpgraph's explicit graph (driver-API nodes), all-reduces as NCCL child graphs\n"
          "  symmetric  nccl with NCCL symmetric-memory buffers (only when named in --modes)\n"
          "  explicit   tpgraph's explicit graph, all-reduce algorithm picked by tpgraph (its one-shot or\n"
          "             two-shot kernel node on one machine, NCCL above 8 MiB)\n"
          "  pdl        explicit with Programmatic Dependent Launch edges (TPG_GRAPH_PDL; sm_90+)\n"
          "  overlap    explicit with the tokens split into --chunks branches, so one chunk's all-reduce\n"
          "             overlaps the next chunk's GEMMs (TPG_OVERLAP_CHUNKED; needs tokens >= chunks)\n"
          "  compute    explicit without the all-reduces: exposed communication = best explicit - compute\n"
          "  (with python3 + CUDA torch: torch eager, torch.cuda.graph and torch.compile + graph columns from bench/torch_mlp.py)\n"
          "floor = max(weight bytes / 4.3 TB/s, FLOPs / 790 TFLOP/s) per layer and rank (H200 peak figures).\n"
          "\n"
          "Options (lists are comma separated, at most %d values):\n"
          "  --hidden LIST        hidden sizes, multiples of 8 (default 8192,4096)\n"
          "  --ffn LIST           ffn sizes, one per hidden size; ffn/tp a multiple of 8 (default 28672,14336)\n"
          "  --tokens LIST        token counts, 1..65536 (default 1,16,128,1024)\n"
          "  --tp N               GPUs to use, 1..visible (default all, at most 8)\n"
          "  --layers N           MLP blocks per graph, 1..256 (default 4)\n"
          "  --reps N             timed launches per point, 1..100000 (default 20)\n"
          "  --kind gelu|swiglu   GeLU (Megatron, with biases) or SwiGLU (Llama, no biases); default gelu\n"
          "  --modes LIST         which modes to run (default all but symmetric)\n"
          "  --chunks N           token chunks of the overlap mode, 2..16 (default 2)\n"
          "  --sm-reserve N       SMs the overlap mode's GEMMs leave to the all-reduce, 1..64 (default 16)\n"
          "  --json PATH          results (default tpbench.json)\n"
          "  --svg PATH           plot (default tpbench.svg); the PNG goes beside it, same name\n"
          "  --no-png             do not try to convert the SVG\n"
          "  --no-torch           skip the PyTorch baseline\n"
          "  --passes N           run ours, then PyTorch, N times in alternation (1..9, default 1) and report each\n"
          "                       point's median over the passes (p10/p90: the lowest and highest over them):\n"
          "                       the two are then measured in the same stretch of the machine's state\n"
          "  --torch-script PATH  where bench/torch_mlp.py is (default: that path from the working directory)\n"
          "  -h, --help           this text\n",
          MAXV);
}

static int fail_usage(void) {
  fprintf(stderr, "%s: see --help\n", PROG);
  return 2;
}

static int cmp_int(const void *a, const void *b) {
  int x = *(const int *)a, y = *(const int *)b;
  return (x > y) - (x < y);
}

int main(int argc, char **argv) {
  enum { O_HIDDEN = 256, O_FFN, O_TOKENS, O_TP, O_LAYERS, O_REPS, O_CHUNKS, O_SM_RESERVE, O_JSON, O_SVG, O_TORCH_SCRIPT, O_KIND,
         O_MODES, O_NO_TORCH, O_NO_PNG, O_PASSES };
  static const struct option opts[] = {
      {"hidden", required_argument, NULL, O_HIDDEN}, {"ffn", required_argument, NULL, O_FFN},
      {"tokens", required_argument, NULL, O_TOKENS}, {"tp", required_argument, NULL, O_TP},
      {"layers", required_argument, NULL, O_LAYERS}, {"reps", required_argument, NULL, O_REPS},
      {"chunks", required_argument, NULL, O_CHUNKS}, {"sm-reserve", required_argument, NULL, O_SM_RESERVE}, {"json", required_argument, NULL, O_JSON},
      {"svg", required_argument, NULL, O_SVG},       {"torch-script", required_argument, NULL, O_TORCH_SCRIPT},
      {"kind", required_argument, NULL, O_KIND},     {"modes", required_argument, NULL, O_MODES},
      {"no-torch", no_argument, NULL, O_NO_TORCH},   {"no-png", no_argument, NULL, O_NO_PNG},
      {"passes", required_argument, NULL, O_PASSES},
      {"help", no_argument, NULL, 'h'},              {NULL, 0, NULL, 0}};
  int nffn = 2;
  opterr = 0;
  int c, li;
  while ((c = getopt_long(argc, argv, ":h", opts, &li)) != -1) {
    int ok = 1;
    switch (c) {
      case O_HIDDEN: ok = (nshape = parse_list("--hidden", optarg, 8, 1 << 20, hid)) > 0; break;
      case O_FFN: ok = (nffn = parse_list("--ffn", optarg, 8, 1 << 22, ffn)) > 0; break;
      case O_TOKENS: ok = (ntok = parse_list("--tokens", optarg, 1, 65536, toks)) > 0; break;
      case O_TP: ok = bench_parse_int(PROG, "--tp", optarg, 1, 8, &TP); break;
      case O_LAYERS: ok = bench_parse_int(PROG, "--layers", optarg, 1, 256, &LAYERS); break;
      case O_REPS: ok = bench_parse_int(PROG, "--reps", optarg, 1, 100000, &REPS); break;
      case O_CHUNKS: ok = bench_parse_int(PROG, "--chunks", optarg, 2, 16, &CHUNKS); break;
      case O_SM_RESERVE: ok = bench_parse_int(PROG, "--sm-reserve", optarg, 1, 64, &SM_RESERVE); break;
      case O_JSON: json_path = optarg; break;
      case O_SVG: svg_path = optarg; break;
      case O_TORCH_SCRIPT: torch_script = optarg; break;
      case O_NO_TORCH: use_torch = 0; break;
      case O_PASSES: ok = bench_parse_int(PROG, "--passes", optarg, 1, 9, &PASSES); break;
      case O_NO_PNG: make_png = 0; break;
      case O_KIND:
        if (!strcmp(optarg, "gelu")) KIND = TPG_MLP_GELU;
        else if (!strcmp(optarg, "swiglu")) KIND = TPG_MLP_SWIGLU;
        else {
          fprintf(stderr, "%s: --kind: '%s' is neither gelu nor swiglu\n", PROG, optarg);
          ok = 0;
        }
        break;
      case O_MODES: {
        int on[NMODES] = {0}, any = 0;
        char buf[256];
        snprintf(buf, sizeof buf, "%s", optarg);
        for (char *save = NULL, *t = strtok_r(buf, ",", &save); t && ok; t = strtok_r(NULL, ",", &save)) {
          int k = -1;
          for (int m = 0; m < NMODES; m++)
            if (!strcmp(t, mode_name[m])) k = m;
          if (k < 0) {
            fprintf(stderr, "%s: --modes: unknown mode '%s' (expected some of eager,captured,nccl,symmetric,"
                            "explicit,pdl,overlap,compute)\n", PROG, t);
            ok = 0;
          } else {
            on[k] = any = 1;
          }
        }
        if (ok && !any) {
          fprintf(stderr, "%s: --modes: empty list\n", PROG);
          ok = 0;
        }
        if (ok) memcpy(mode_on, on, sizeof on);
        break;
      }
      case 'h': usage(stdout); return 0;
      case ':': fprintf(stderr, "%s: %s needs a value\n", PROG, argv[optind - 1]); return fail_usage();
      default: fprintf(stderr, "%s: unknown option '%s'\n", PROG, argv[optind - 1]); return fail_usage();
    }
    if (!ok) return fail_usage();
  }
  if (optind < argc) {
    fprintf(stderr, "%s: unexpected argument '%s'\n", PROG, argv[optind]);
    return fail_usage();
  }
  if (nffn != nshape) {
    fprintf(stderr, "%s: --hidden has %d values and --ffn %d: give one ffn per hidden size\n", PROG, nshape, nffn);
    return fail_usage();
  }
  for (int si = 0; si < nshape; si++)
    if (hid[si] % 8) {
      fprintf(stderr, "%s: --hidden: %d is not a multiple of 8\n", PROG, hid[si]);
      return fail_usage();
    }
  /* Ascending and distinct: the plot's x axis and the table read in order. */
  qsort(toks, (size_t)ntok, sizeof toks[0], cmp_int);
  int nt = 0;
  for (int i = 0; i < ntok; i++)
    if (nt == 0 || toks[nt - 1] != toks[i]) toks[nt++] = toks[i];
  ntok = nt;
  if (mode_on[M_OVERLAP] && toks[ntok - 1] < CHUNKS)
    fprintf(stderr, "%s: note: overlap needs tokens >= --chunks %d; no token count here has that\n", PROG, CHUNKS);
  /* Under `bazel run` the working directory is the runfiles tree: write the
   * JSON and SVG where the user ran the command. */
  static char jbuf[4096], sbuf[4096];
  const char *bwd = getenv("BUILD_WORKING_DIRECTORY");
  if (bwd && bwd[0]) {
    if (json_path[0] != '/') { snprintf(jbuf, sizeof jbuf, "%s/%s", bwd, json_path); json_path = jbuf; }
    if (svg_path[0] != '/') { snprintf(sbuf, sizeof sbuf, "%s/%s", bwd, svg_path); svg_path = sbuf; }
  }
  tpg_runtime_info ri;
  MUST(tpg_runtime_get_info(&ri, sizeof ri));
  if (ri.device_count < 1) {
    fprintf(stderr, "tpbench: no GPU here (%s). Run it on a machine with NVIDIA GPUs.\n",
            ri.driver_error[0] ? ri.driver_error : "the driver sees no device");
    return 1;
  }
  int n = TP ? TP : (ri.device_count > 8 ? 8 : ri.device_count);
  if (n < 1 || n > ri.device_count) {
    fprintf(stderr, "tpbench: --tp: %d, but %d GPU(s) are visible\n", TP, ri.device_count);
    return 2;
  }
  for (int si = 0; si < nshape; si++)
    if (ffn[si] % n || (ffn[si] / n) % 8 || hid[si] % 8) {
      fprintf(stderr, "tpbench: --ffn: %d does not split over TP=%d (ffn/tp must be a multiple of 8)\n", ffn[si], n);
      return 2;
    }
  g_nranks = n;
  printf("tpbench: %d x GPU, driver %d, NCCL %d, kernels %s\n", n, ri.driver_version, ri.nccl_version, ri.kernel_archs);
  pthread_barrier_init(&barrier, NULL, (unsigned)n);
  /* Each pass: ours (every mode), then PyTorch. PyTorch's times moved 5-10%
   * between single runs on the 2-GPU machine (docs/performance.md), so with
   * --passes the two alternate and each point reports its median. */
  static double pres[9][MAXV][MAXV][NMODES], plo[9][MAXV][MAXV][NMODES], phi[9][MAXV][MAXV][NMODES];
  static double ptorch[9][MAXV][MAXV][6];
  for (int pass = 0; pass < PASSES; pass++) {
    if (PASSES > 1) fprintf(stderr, "tpbench: pass %d of %d\n", pass + 1, PASSES);
    for (int si = 0; si < MAXV; si++)
      for (int ti = 0; ti < MAXV; ti++)
        for (int m = 0; m < NMODES; m++) res[si][ti][m] = NAN;
    memset(torch_res, 0, sizeof torch_res);
    MUST(tpg_comm_id_create(&g_id)); /* a fresh id: each pass creates its own communicators */
    rank_state st[8];
    pthread_t th[8];
    for (int r = 0; r < n; r++) {
      memset(&st[r], 0, sizeof st[r]);
      st[r].rank = r;
      pthread_create(&th[r], NULL, rank_main, &st[r]);
    }
    for (int r = 0; r < n; r++) pthread_join(th[r], NULL);
    if (use_torch) run_torch(n);
    memcpy(pres[pass], res, sizeof res);
    memcpy(plo[pass], res_lo, sizeof res_lo);
    memcpy(phi[pass], res_hi, sizeof res_hi);
    memcpy(ptorch[pass], torch_res, sizeof torch_res);
  }
  if (PASSES > 1) {
    for (int si = 0; si < MAXV; si++)
      for (int ti = 0; ti < MAXV; ti++) {
        for (int m = 0; m < NMODES; m++) {
          double v[9];
          int k = 0;
          res_lo[si][ti][m] = INFINITY;
          res_hi[si][ti][m] = 0;
          for (int p = 0; p < PASSES; p++)
            if (pres[p][si][ti][m] > 0) {
              v[k++] = pres[p][si][ti][m];
              res_lo[si][ti][m] = fmin(res_lo[si][ti][m], plo[p][si][ti][m]);
              res_hi[si][ti][m] = fmax(res_hi[si][ti][m], phi[p][si][ti][m]);
            }
          res[si][ti][m] = k ? bench_median(v, k) : NAN;
        }
        for (int q = 0; q < 6; q++) {
          double v[9];
          int k = 0;
          for (int p = 0; p < PASSES; p++)
            if (ptorch[p][si][ti][q] > 0) v[k++] = ptorch[p][si][ti][q];
          torch_res[si][ti][q] = k ? bench_median(v, k) : 0;
        }
      }
    printf("tpbench: %d passes (ours, then PyTorch, alternated); each point is the median over them\n", PASSES);
  }
  print_table(n);
  write_json(n);
  write_svg(n);
  printf("wrote %s and %s\n", json_path, svg_path);
  if (make_png) write_png();
  return 0;
}
