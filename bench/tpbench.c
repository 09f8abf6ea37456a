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
 *             experimental, only with --modes)
 *   pdl       explicit with TPG_GRAPH_PDL: programmatic edges GEMV -> GEMV and
 *             all-reduce -> next GEMV (sm_90+; the same as explicit below)
 *   overlap   our explicit graph, token chunks on separate branches
 *   compute   explicit without collectives: exposed comm = explicit - compute
 * Floors per layer and rank: weight bytes / 4.3 TB/s and FLOPs / 790 TFLOP/s.
 * With python3 + torch present it also runs bench/torch_mlp.py (PyTorch eager
 * and torch.cuda.graph, one process per GPU) and puts it beside ours.
 * Prints a table, writes JSON and an SVG plot of per-layer time vs tokens.
 *
 *   tpbench [--hidden 8192,4096 --ffn 28672,14336] [--tokens 1,16,128,1024]
 *           [--tp N] [--layers 4] [--reps 20] [--kind gelu|swiglu]
 *           [--modes eager,captured,nccl,symmetric,explicit,pdl,overlap,compute] [--chunks 2]
 *           [--json tpbench.json] [--svg tpbench.svg] [--no-torch] [--torch-script PATH]
 */
#define _GNU_SOURCE
#include <cuda_runtime_api.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench/bench_common.h"

#define MAXV 8
enum { M_EAGER, M_CAPTURED, M_NCCL, M_SYM, M_EXPLICIT, M_PDL, M_OVERLAP, M_COMPUTE, NMODES };
static const char *mode_name[NMODES] = {"eager", "captured", "nccl", "symmetric", "explicit", "pdl", "overlap", "compute"};

static int hid[MAXV] = {8192, 4096}, ffn[MAXV] = {28672, 14336}, nshape = 2;
static int toks[MAXV] = {1, 16, 128, 1024}, ntok = 4;
static int TP = 0, LAYERS = 4, REPS = 20, CHUNKS = 2, use_torch = 1;
static int mode_on[NMODES] = {1, 1, 1, 0, 1, 1, 1, 1}; /* symmetric: experimental, --modes to try */
static tpg_mlp_kind KIND = TPG_MLP_GELU;
static const char *json_path = "tpbench.json", *svg_path = "tpbench.svg", *torch_script = NULL;

/* results[shape][tok][mode] in us per layer (rank 0); NAN = not run */
static double res[MAXV][MAXV][NMODES];
static double torch_res[MAXV][MAXV][4]; /* eager, graph, eager noAR, graph noAR */

static pthread_barrier_t barrier;
static tpg_comm_id g_id;

static int parse_list(const char *s, int *out) {
  int n = 0;
  while (*s && n < MAXV) {
    out[n++] = atoi(s);
    const char *c = strchr(s, ',');
    if (!c) break;
    s = c + 1;
  }
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

static double time_graph(rank_state *st, tpg_graph *g) {
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
  double med = bench_median(v, REPS);
  free(v);
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  return med;
}

static int g_nranks;

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
  if (mode == M_PDL && st->rank == 0 && si == 0 && ti == 0) {
    tpg_graph_info gi;
    MUST(tpg_graph_info_get(g, &gi));
    fprintf(stderr, "\rtpbench: pdl: %d programmatic edges in a %d-layer graph of %d nodes%s\n", gi.programmatic_edges,
            LAYERS, gi.nodes, gi.programmatic_edges ? "" : " (GPU below sm_90: the flag is ignored)");
  }
  double us = time_graph(st, g);
  if (st->rank == 0) res[si][ti][mode] = us / LAYERS;
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
    double e, g, en, gn;
    if (sscanf(line, "TORCH %d %d %d %lf %lf %lf %lf", &H, &F, &M, &e, &g, &en, &gn) == 7) {
      for (int si = 0; si < nshape; si++)
        for (int ti = 0; ti < ntok; ti++)
          if (hid[si] == H && ffn[si] == F && toks[ti] == M) {
            torch_res[si][ti][0] = e; torch_res[si][ti][1] = g; torch_res[si][ti][2] = en; torch_res[si][ti][3] = gn;
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

static void write_svg(int n) {
  FILE *f = fopen(svg_path, "w");
  if (!f) { fprintf(stderr, "tpbench: cannot write %s\n", svg_path); return; }
  const int W = 560, Hh = 380, ml = 70, mr = 150, mt = 40, mb = 50;
  const char *col[] = {"#d62728", "#ff7f0e", "#1f77b4", "#17becf", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#bcbd22", "#7f7f7f"};
  fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" font-family=\"sans-serif\" font-size=\"11\">\n",
          W * nshape, Hh);
  fprintf(f, "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n");
  for (int si = 0; si < nshape; si++) {
    int ox = si * W;
    /* log-log: decode (tens of us) and prefill (hundreds) on one chart */
    double ymax = 0, ymin = INFINITY;
    for (int ti = 0; ti < ntok; ti++) {
      for (int m = 0; m < NMODES; m++)
        if (res[si][ti][m] > 0) { if (res[si][ti][m] > ymax) ymax = res[si][ti][m]; if (res[si][ti][m] < ymin) ymin = res[si][ti][m]; }
      for (int k = 0; k < 2; k++)
        if (use_torch && torch_res[si][ti][k] > 0) {
          if (torch_res[si][ti][k] > ymax) ymax = torch_res[si][ti][k];
          if (torch_res[si][ti][k] < ymin) ymin = torch_res[si][ti][k];
        }
      double fl = floor_us(si, ti, n);
      if (fl < ymin) ymin = fl;
    }
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
    for (int k = 0; k <= 4; k++) {
      double v = exp(ly0 + (ly1 - ly0) * k / 4);
      fprintf(f, "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\">%.0f</text>\n", ox + ml - 4, PY(v) + 4, v);
      fprintf(f, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#ddd\"/>\n", ox + ml, PY(v), ox + W - mr, PY(v));
    }
    for (int ti = 0; ti < ntok; ti++)
      fprintf(f, "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">%d</text>\n", PX(toks[ti]), Hh - mb + 15, toks[ti]);
    fprintf(f, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\">tokens</text>\n", ox + (W - mr + ml) / 2, Hh - 12);
    int li = 0;
    for (int s = 0; s < NMODES + 3; s++) {
      const char *name;
      double vals[MAXV];
      int ok = 0;
      for (int ti = 0; ti < ntok; ti++) {
        double v = NAN;
        if (s < NMODES) v = res[si][ti][s];
        else if (s == NMODES && use_torch) v = torch_res[si][ti][0];
        else if (s == NMODES + 1 && use_torch) v = torch_res[si][ti][1];
        else if (s == NMODES + 2) v = floor_us(si, ti, n);
        vals[ti] = v;
        ok += v > 0;
      }
      name = s < NMODES ? mode_name[s] : s == NMODES ? "torch eager" : s == NMODES + 1 ? "torch graph" : "floor";
      if (!ok) continue;
      const char *c = s == NMODES + 2 ? "black" : col[s % 10];
      fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"2\"%s points=\"", c,
              s == NMODES + 2 ? " stroke-dasharray=\"4,3\"" : s >= NMODES ? " stroke-dasharray=\"1,2\"" : "");
      for (int ti = 0; ti < ntok; ti++)
        if (vals[ti] > 0) fprintf(f, "%.1f,%.1f ", PX(toks[ti]), PY(vals[ti]));
      fprintf(f, "\"/>\n");
      fprintf(f, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"%s\" stroke-width=\"2\"/>", ox + W - mr + 10,
              mt + 14 * li, ox + W - mr + 30, mt + 14 * li, c);
      fprintf(f, "<text x=\"%d\" y=\"%d\">%s</text>\n", ox + W - mr + 35, mt + 14 * li + 4, name);
      li++;
    }
#undef PX
#undef PY
  }
  fprintf(f, "</svg>\n");
  fclose(f);
}

static void write_json(int n) {
  FILE *f = fopen(json_path, "w");
  if (!f) { fprintf(stderr, "tpbench: cannot write %s\n", json_path); return; }
  fprintf(f, "{\"tp\": %d, \"layers\": %d, \"reps\": %d, \"kind\": \"%s\", \"dtype\": \"bf16\", \"unit\": \"us per layer\", \"rows\": [\n",
          n, LAYERS, REPS, KIND == TPG_MLP_GELU ? "gelu" : "swiglu");
  int first = 1;
  for (int si = 0; si < nshape; si++)
    for (int ti = 0; ti < ntok; ti++) {
      fprintf(f, "%s  {\"hidden\": %d, \"ffn\": %d, \"tokens\": %d, \"floor\": %.2f", first ? "" : ",\n", hid[si], ffn[si],
              toks[ti], floor_us(si, ti, n));
      first = 0;
      for (int m = 0; m < NMODES; m++)
        if (res[si][ti][m] > 0) fprintf(f, ", \"%s\": %.2f", mode_name[m], res[si][ti][m]);
      if (use_torch && torch_res[si][ti][0] > 0)
        fprintf(f, ", \"torch_eager\": %.2f, \"torch_graph\": %.2f, \"torch_eager_noar\": %.2f, \"torch_graph_noar\": %.2f",
                torch_res[si][ti][0], torch_res[si][ti][1], torch_res[si][ti][2], torch_res[si][ti][3]);
      fprintf(f, "}");
    }
  fprintf(f, "\n]}\n");
  fclose(f);
}

static void print_table(int n) {
  printf("\ntpbench: TP=%d, %s MLP, bf16, %d layers per graph, median of %d; us per layer (rank 0)\n", n,
         KIND == TPG_MLP_GELU ? "GeLU (Megatron)" : "SwiGLU", LAYERS, REPS);
  printf("%-12s %6s %8s %8s %8s %8s %8s %8s %8s %8s %8s %8s %9s %9s %10s\n", "hidden/ffn", "tokens", "eager", "captured",
         "nccl", "symmetr", "explicit", "pdl", "overlap", "compute", "exposed", "floor", "torch-eag", "torch-grf",
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
      printf(" %9.2fx\n", best / fl);
    }
  printf("exposed = best explicit (plain, pdl or overlap) - compute-only (no PDL); floor = max(weight bytes / 4.3 TB/s, FLOPs / 790 TFLOP/s)\n");
}

static void usage(void) {
  fprintf(stderr,
          "usage: tpbench [--hidden 8192,4096 --ffn 28672,14336] [--tokens 1,16,128,1024] [--tp N] [--layers 4]\n"
          "               [--reps 20] [--kind gelu|swiglu] [--modes eager,captured,nccl,symmetric,explicit,pdl,overlap,compute]\n"
          "               [--chunks 2] [--json PATH] [--svg PATH] [--no-torch] [--torch-script PATH]\n");
}

int main(int argc, char **argv) {
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--no-torch")) { use_torch = 0; continue; }
    if (!v) { usage(); return 2; }
    i++;
    if (!strcmp(a, "--hidden")) nshape = parse_list(v, hid);
    else if (!strcmp(a, "--ffn")) parse_list(v, ffn);
    else if (!strcmp(a, "--tokens")) ntok = parse_list(v, toks);
    else if (!strcmp(a, "--tp")) TP = atoi(v);
    else if (!strcmp(a, "--layers")) LAYERS = atoi(v);
    else if (!strcmp(a, "--reps")) REPS = atoi(v);
    else if (!strcmp(a, "--chunks")) CHUNKS = atoi(v);
    else if (!strcmp(a, "--json")) json_path = v;
    else if (!strcmp(a, "--svg")) svg_path = v;
    else if (!strcmp(a, "--torch-script")) torch_script = v;
    else if (!strcmp(a, "--kind")) KIND = !strcmp(v, "swiglu") ? TPG_MLP_SWIGLU : TPG_MLP_GELU;
    else if (!strcmp(a, "--modes")) {
      for (int m = 0; m < NMODES; m++) mode_on[m] = strstr(v, mode_name[m]) != NULL;
    } else { usage(); return 2; }
  }
  if (LAYERS < 1 || REPS < 1 || CHUNKS < 2) { usage(); return 2; }
  /* Under `bazel run` the working directory is the runfiles tree: write the
   * JSON and SVG where the user ran the command. */
  static char jbuf[4096], sbuf[4096];
  const char *bwd = getenv("BUILD_WORKING_DIRECTORY");
  if (bwd && bwd[0]) {
    if (json_path[0] != '/') { snprintf(jbuf, sizeof jbuf, "%s/%s", bwd, json_path); json_path = jbuf; }
    if (svg_path[0] != '/') { snprintf(sbuf, sizeof sbuf, "%s/%s", bwd, svg_path); svg_path = sbuf; }
  }
  tpg_runtime_info ri;
  MUST(tpg_runtime_query(&ri));
  if (ri.device_count < 1) {
    fprintf(stderr, "tpbench: no GPU here (%s). Run it on a machine with NVIDIA GPUs.\n",
            ri.driver_error[0] ? ri.driver_error : "the driver sees no device");
    return 1;
  }
  int n = TP ? TP : (ri.device_count > 8 ? 8 : ri.device_count);
  if (n < 1 || n > ri.device_count) {
    fprintf(stderr, "tpbench: --tp %d: expected 1..%d (GPUs visible)\n", TP, ri.device_count);
    return 2;
  }
  for (int si = 0; si < nshape; si++)
    if (ffn[si] % n || (ffn[si] / n) % 8 || hid[si] % 8) {
      fprintf(stderr, "tpbench: shape %d/%d does not split over TP=%d (ffn/tp must be a multiple of 8)\n", hid[si],
              ffn[si], n);
      return 2;
    }
  for (int si = 0; si < MAXV; si++)
    for (int ti = 0; ti < MAXV; ti++)
      for (int m = 0; m < NMODES; m++) res[si][ti][m] = NAN;
  g_nranks = n;
  printf("tpbench: %d x GPU, driver %d, NCCL %d, kernels %s\n", n, ri.driver_version, ri.nccl_version, ri.kernel_archs);
  MUST(tpg_comm_id_create(&g_id));
  pthread_barrier_init(&barrier, NULL, (unsigned)n);
  rank_state st[8];
  pthread_t th[8];
  for (int r = 0; r < n; r++) {
    memset(&st[r], 0, sizeof st[r]);
    st[r].rank = r;
    pthread_create(&th[r], NULL, rank_main, &st[r]);
  }
  for (int r = 0; r < n; r++) pthread_join(th[r], NULL);
  if (use_torch) run_torch(n);
  print_table(n);
  write_json(n);
  write_svg(n);
  printf("wrote %s and %s\n", json_path, svg_path);
  return 0;
}
