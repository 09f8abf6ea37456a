/* allreduce_bench.c - NCCL in a graph vs tpgraph's all-reduce kernel nodes
 * in a graph (one-shot, two-shot, and what TPG_ALGO_AUTO picks), and NCCL on
 * symmetric windows (TPG_GRAPH_NCCL_SYMMETRIC), bf16, on
 * every visible GPU (one thread per GPU).
 *
 * Each graph chains --ops all-reduces (alternating between two buffers, so
 * each op waits for the previous one, as layers do); time per op = graph
 * time / ops, over -n launches timed with events after -w warm-up launches
 * (median in the table; p10/p50/p90 in JSON). Bandwidths as nccl-tests
 * defines them: algbw = bytes / time, busbw = algbw * 2(n-1)/n. One-shot
 * serves messages up to 4 MiB (push up to TPG_ONESHOT_PUSH_MAX, pull above;
 * any size by push in rounds when TPG_ONESHOT_PUSH_MAX allows it),
 * two-shot up to 8 MiB ("-" above). The auto column runs TPG_ALGO_AUTO, whose
 * limits TPG_ONESHOT_PUSH_MAX and TPG_TWOSHOT_MAX move (docs/performance.md).
 * Flags: allreduce_bench --help.
 */
#define _GNU_SOURCE
#include <cuda_runtime_api.h>
#include <getopt.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench_common.h"

static const char *PROG = "allreduce_bench";
enum { MAXSIZES = 64 };
/* Default sweep (no -b/-e/-f/-i): the sizes docs/performance.md reports,
 * denser around the one-shot / two-shot limits than powers of 4. */
static const size_t default_sizes[] = {1 << 10, 4 << 10, 16 << 10, 64 << 10, 256 << 10, 512 << 10,
                                       1 << 20, 2 << 20,  4 << 20,  8 << 20,  16 << 20,  64 << 20};
static size_t sizes[MAXSIZES];
static int NSIZES;
static int OPS = 20, REPS = 30, WARMUP = 3, NR;
static unsigned PDL; /* --pdl: TPG_GRAPH_PDL on every graph */
enum { NALGO = 5, A_SYM = 1 };
static const tpg_collective_algo algos[NALGO] = {TPG_ALGO_NCCL, TPG_ALGO_NCCL, TPG_ALGO_ONESHOT, TPG_ALGO_TWOSHOT,
                                                 TPG_ALGO_AUTO};
static const char *algo_name[NALGO] = {"nccl", "nccl_sym", "oneshot", "twoshot", "auto"};
static int algo_on[NALGO] = {1, 1, 1, 1, 1};
static bench_pcts result[MAXSIZES][NALGO]; /* us per op (rank 0); p50 NAN: not run or not served */
static tpg_comm_id g_id;
static pthread_barrier_t bar;

/* ONESHOT above 4 MiB: only the push kernel (in rounds), when
 * TPG_ONESHOT_PUSH_MAX lets it. */
static int served(int algo, size_t bytes) {
  if (!algo_on[algo]) return 0;
  const char *pm = getenv("TPG_ONESHOT_PUSH_MAX");
  const size_t push_max = pm ? (size_t)strtoull(pm, NULL, 0) : 0;
  if (algos[algo] == TPG_ALGO_ONESHOT && bytes > ((size_t)4 << 20) && bytes > push_max) return 0;
  if (algos[algo] == TPG_ALGO_TWOSHOT && bytes > ((size_t)8 << 20)) return 0;
  return 1;
}

static void *rank_main(void *arg) {
  int rank = (int)(intptr_t)arg;
  CUDA_OK(cudaSetDevice(rank));
  tpg_comm_config cc = TPG_COMM_CONFIG_INIT;
  cc.device = rank;
  cc.rank = rank;
  cc.nranks = NR;
  cc.timeout_ms = 60000;
  tpg_comm *comm;
  MUST(tpg_comm_create(&g_id, &cc, &comm));
  void *buf[2];
  size_t maxb = 0;
  for (int si = 0; si < NSIZES; si++)
    if (sizes[si] > maxb) maxb = sizes[si];
  for (int i = 0; i < 2; i++) {
    CUDA_OK(cudaMalloc(&buf[i], maxb));
    CUDA_OK(cudaMemset(buf[i], 0x3c, maxb)); /* small finite bf16 values */
  }
  cudaStream_t s;
  CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cudaEvent_t e0, e1;
  CUDA_OK(cudaEventCreate(&e0));
  CUDA_OK(cudaEventCreate(&e1));
  double *v = malloc(sizeof(double) * (size_t)REPS);
  for (int si = 0; si < NSIZES; si++)
    for (int algo = 0; algo < NALGO; algo++) {
      size_t n = sizes[si] / 2;
      if (!served(algo, sizes[si])) {
        if (rank == 0) result[si][algo].p50 = NAN;
        continue;
      }
      tpg_plan *p;
      tpg_slot a, b;
      MUST(tpg_plan_create(&p));
      /* nccl_sym: the graph's own scratch slots, which it allocates with
       * ncclMemAlloc and registers as NCCL symmetric windows. */
      const tpg_memory where = algo == A_SYM ? TPG_MEM_SCRATCH : TPG_MEM_DEVICE;
      MUST(tpg_plan_add_slot(p, "a", TPG_BF16, where, n, &a));
      MUST(tpg_plan_add_slot(p, "b", TPG_BF16, where, n, &b));
      tpg_node prev = 0;
      for (int o = 0; o < OPS; o++) {
        tpg_collective_desc cd = TPG_COLLECTIVE_DESC_INIT;
        tpg_view va = {o & 1 ? b : a, 0, 0}, vb = {o & 1 ? a : b, 0, 0};
        cd.send = va;
        cd.recv = vb;
        cd.count = n;
        cd.algo = algos[algo];
        MUST(tpg_plan_add_collective(p, &cd, o ? &prev : NULL, o ? 1 : 0, &prev));
      }
      tpg_binding bd[2] = {{a, buf[0]}, {b, buf[1]}};
      tpg_graph_config cfg = TPG_GRAPH_CONFIG_INIT;
      cfg.device = rank;
      cfg.comm = comm;
      cfg.bindings = algo == A_SYM ? NULL : bd;
      cfg.nbindings = algo == A_SYM ? 0 : 2;
      cfg.flags = (algo == A_SYM ? TPG_GRAPH_NCCL_SYMMETRIC : 0u) | PDL;
      tpg_graph *g;
      MUST(tpg_graph_create(p, &cfg, &g));
      for (int w = 0; w < WARMUP; w++) MUST(tpg_graph_launch(g, (tpg_stream)s));
      MUST(tpg_comm_wait(comm, (tpg_stream)s));
      for (int r = 0; r < REPS; r++) {
        pthread_barrier_wait(&bar);
        CUDA_OK(cudaEventRecord(e0, s));
        MUST(tpg_graph_launch(g, (tpg_stream)s));
        CUDA_OK(cudaEventRecord(e1, s));
        MUST(tpg_comm_wait(comm, (tpg_stream)s));
        float ms;
        CUDA_OK(cudaEventElapsedTime(&ms, e0, e1));
        v[r] = 1000.0 * ms / OPS;
      }
      bench_pcts pc = bench_percentiles(v, REPS);
      if (rank == 0) result[si][algo] = pc;
      MUST(tpg_graph_destroy(g));
      tpg_plan_destroy(p);
    }
  MUST(tpg_comm_destroy(comm));
  cudaFree(buf[0]);
  cudaFree(buf[1]);
  free(v);
  return NULL;
}

static void usage(FILE *f) {
  fprintf(f,
          "usage: allreduce_bench [-b MINBYTES] [-e MAXBYTES] [-f FACTOR | -i STEPBYTES] [-n ITERS] [-w WARMUP]\n"
          "                       [--ops N] [--algos nccl,nccl_sym,oneshot,twoshot,auto] [--pdl] [--json PATH] [--help]\n"
          "\n"
          "Times bf16 all-reduces inside CUDA graphs on every visible GPU (2..8, one thread each),\n"
          "side by side for each algorithm tpgraph has:\n"
          "  nccl     ncclAllReduce captured once into a child-graph node\n"
          "  nccl_sym the same on the graph's scratch buffers registered as NCCL symmetric windows\n"
          "           (TPG_GRAPH_NCCL_SYMMETRIC; NCCL 2.27+ may then pick its symmetric kernels)\n"
          "  oneshot  tpgraph's one-shot kernel node: every rank reads (or pushes) all peers' data over\n"
          "           NVLink and sums; lowest latency, up to 4 MiB\n"
          "  twoshot  tpgraph's two-shot kernel node: reduce-scatter then all-gather by remote stores;\n"
          "           half the traffic per GPU, up to 8 MiB\n"
          "  auto     TPG_ALGO_AUTO: what tpgraph picks by size (TPG_ONESHOT_PUSH_MAX, TPG_TWOSHOT_MAX)\n"
          "Each graph chains --ops all-reduces; a time is graph time / ops.\n"
          "\n"
          "  -b, --minbytes BYTES   smallest message (nccl-tests style: 1024, 64K, 8M, 1G); default 1K\n"
          "  -e, --maxbytes BYTES   largest message; default 64M\n"
          "  -f, --stepfactor N     multiply the size by N (>= 2) each step; default 2 when -b/-e is given\n"
          "  -i, --stepbytes BYTES  add BYTES each step instead of -f\n"
          "      (none of -b/-e/-f/-i: the 12 sizes of docs/performance.md, 1K..64M)\n"
          "      sizes are rounded down to a multiple of 16 bytes (the kernels' vector width)\n"
          "  -n, --iters N          timed launches per size and algorithm (default 30; --reps is the same)\n"
          "  -w, --warmup_iters N   untimed launches before them (default 3)\n"
          "      --ops N            chained all-reduces per graph (default 20)\n"
          "      --algos LIST       which of nccl,nccl_sym,oneshot,twoshot,auto to run (default all)\n"
          "      --pdl              graphs with TPG_GRAPH_PDL: each of our all-reduce kernels launches while\n"
          "                         the one before it drains (programmatic edges; sm_90+)\n"
          "      --json PATH        also write the results, with p10/p50/p90 and the run's metadata\n"
          "      --min, --max       old names of -b, -e\n"
          "  -h, --help             this text\n"
          "\n"
          "Output columns per algorithm, as nccl-tests prints them: time (us, median), algbw = bytes / time,\n"
          "busbw = algbw * 2(n-1)/n (GB/s).\n");
}

static int parse_algos(const char *v) {
  int on[NALGO] = {0};
  char buf[256];
  snprintf(buf, sizeof buf, "%s", v);
  int any = 0;
  for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
    int k = -1;
    for (int a = 0; a < NALGO; a++)
      if (!strcmp(t, algo_name[a])) k = a;
    if (k < 0) {
      fprintf(stderr, "%s: --algos: unknown algorithm '%s' (expected some of nccl,nccl_sym,oneshot,twoshot,auto)\n", PROG, t);
      return 0;
    }
    on[k] = any = 1;
  }
  if (!any) {
    fprintf(stderr, "%s: --algos: empty list (expected some of nccl,nccl_sym,oneshot,twoshot,auto)\n", PROG);
    return 0;
  }
  memcpy(algo_on, on, sizeof on);
  return 1;
}

int main(int argc, char **argv) {
  const char *json = NULL;
  size_t minb = 1 << 10, maxb = (size_t)64 << 20, stepb = 0;
  int factor = 0, sweep = 0;
  enum { O_OPS = 256, O_ALGOS, O_JSON, O_REPS, O_PDL };
  static const struct option opts[] = {
      {"minbytes", required_argument, NULL, 'b'}, {"maxbytes", required_argument, NULL, 'e'},
      {"min", required_argument, NULL, 'b'},      {"max", required_argument, NULL, 'e'},
      {"stepfactor", required_argument, NULL, 'f'}, {"stepbytes", required_argument, NULL, 'i'},
      {"iters", required_argument, NULL, 'n'},    {"reps", required_argument, NULL, 'n'},
      {"warmup_iters", required_argument, NULL, 'w'}, {"ops", required_argument, NULL, O_OPS},
      {"algos", required_argument, NULL, O_ALGOS}, {"json", required_argument, NULL, O_JSON},
      {"pdl", no_argument, NULL, O_PDL},
      {"help", no_argument, NULL, 'h'},           {NULL, 0, NULL, 0}};
  opterr = 0;
  int c, li;
  while ((c = getopt_long(argc, argv, ":b:e:f:i:n:w:h", opts, &li)) != -1) {
    int ok = 1;
    switch (c) {
      case 'b': ok = bench_parse_bytes(PROG, "-b/--minbytes", optarg, &minb); sweep = 1; break;
      case 'e': ok = bench_parse_bytes(PROG, "-e/--maxbytes", optarg, &maxb); sweep = 1; break;
      case 'f': ok = bench_parse_int(PROG, "-f/--stepfactor", optarg, 2, 1 << 20, &factor); sweep = 1; break;
      case 'i': ok = bench_parse_bytes(PROG, "-i/--stepbytes", optarg, &stepb); sweep = 1; break;
      case 'n': ok = bench_parse_int(PROG, "-n/--iters", optarg, 1, 1000000, &REPS); break;
      case 'w': ok = bench_parse_int(PROG, "-w/--warmup_iters", optarg, 0, 1000000, &WARMUP); break;
      case O_OPS: ok = bench_parse_int(PROG, "--ops", optarg, 1, 10000, &OPS); break;
      case O_ALGOS: ok = parse_algos(optarg); break;
      case O_PDL: PDL = TPG_GRAPH_PDL; break;
      case O_JSON: json = optarg; break;
      case 'h': usage(stdout); return 0;
      case ':':
        fprintf(stderr, "%s: %s needs a value (see --help)\n", PROG, argv[optind - 1]);
        return 2;
      default:
        fprintf(stderr, "%s: unknown option '%s' (see --help)\n", PROG, argv[optind - 1]);
        return 2;
    }
    if (!ok) return 2;
  }
  if (optind < argc) {
    fprintf(stderr, "%s: unexpected argument '%s' (see --help)\n", PROG, argv[optind]);
    return 2;
  }
  if (factor && stepb) {
    fprintf(stderr, "%s: -f/--stepfactor and -i/--stepbytes: give one of them, not both\n", PROG);
    return 2;
  }
  if (minb > maxb) {
    fprintf(stderr, "%s: -b/--minbytes %zu is above -e/--maxbytes %zu\n", PROG, minb, maxb);
    return 2;
  }
  if (sweep) {
    for (size_t b = minb; b <= maxb && NSIZES < MAXSIZES; b = stepb ? b + stepb : b * (size_t)(factor ? factor : 2)) {
      size_t r = b & ~(size_t)15;
      if (r && (NSIZES == 0 || sizes[NSIZES - 1] != r)) sizes[NSIZES++] = r;
    }
    if (NSIZES == 0) {
      fprintf(stderr, "%s: -b/-e: no size of at least 16 bytes in %zu..%zu\n", PROG, minb, maxb);
      return 2;
    }
    if (NSIZES == MAXSIZES) fprintf(stderr, "%s: the sweep stops at %d sizes (raise -f or -i)\n", PROG, MAXSIZES);
  } else {
    NSIZES = (int)(sizeof default_sizes / sizeof default_sizes[0]);
    memcpy(sizes, default_sizes, sizeof default_sizes);
  }

  tpg_runtime_info ri;
  MUST(tpg_runtime_get_info(&ri, sizeof ri));
  if (ri.device_count < 2) {
    fprintf(stderr, "%s: needs 2+ GPUs (%d visible%s%s)\n", PROG, ri.device_count, ri.driver_error[0] ? ": " : "",
            ri.driver_error);
    return 1;
  }
  NR = ri.device_count > 8 ? 8 : ri.device_count;
  MUST(tpg_comm_id_create(&g_id));
  pthread_barrier_init(&bar, NULL, (unsigned)NR);
  pthread_t th[8];
  for (int r = 0; r < NR; r++) pthread_create(&th[r], NULL, rank_main, (void *)(intptr_t)r);
  for (int r = 0; r < NR; r++) pthread_join(th[r], NULL);

  const double f = 2.0 * (NR - 1) / NR;
  printf("\n# allreduce_bench: %d GPUs, bf16 sum, %d chained all-reduces per graph, median of %d launches (after %d "
         "warm-up)\n#\n", NR, OPS, REPS, WARMUP);
  printf("# %12s %13s %6s", "", "", "");
  for (int a = 0; a < NALGO; a++)
    if (algo_on[a]) printf("  %-24s", algo_name[a]);
  printf("\n# %12s %13s %6s", "size", "count", "type");
  for (int a = 0; a < NALGO; a++)
    if (algo_on[a]) printf("  %8s %7s %7s", "time", "algbw", "busbw");
  printf("\n# %12s %13s %6s", "(B)", "(elements)", "");
  for (int a = 0; a < NALGO; a++)
    if (algo_on[a]) printf("  %8s %7s %7s", "(us)", "(GB/s)", "(GB/s)");
  printf("\n");
  double bus_sum[NALGO] = {0};
  int bus_n[NALGO] = {0};
  for (int si = 0; si < NSIZES; si++) {
    printf("  %12zu %13zu %6s", sizes[si], sizes[si] / 2, "bf16");
    for (int a = 0; a < NALGO; a++) {
      if (!algo_on[a]) continue;
      double t = result[si][a].p50;
      if (t > 0) {
        double alg = sizes[si] / t / 1e3;
        printf("  %8.2f %7.2f %7.2f", t, alg, alg * f);
        bus_sum[a] += alg * f;
        bus_n[a]++;
      } else {
        printf("  %8s %7s %7s", "-", "-", "-");
      }
    }
    printf("\n");
  }
  for (int a = 0; a < NALGO; a++)
    if (algo_on[a] && bus_n[a])
      printf("# Avg bus bandwidth (%s) : %.2f GB/s over %d sizes\n", algo_name[a], bus_sum[a] / bus_n[a], bus_n[a]);

  if (json) {
    FILE *jf = fopen(json, "w");
    if (!jf) {
      fprintf(stderr, "%s: --json: cannot write %s\n", PROG, json);
      return 1;
    }
    fprintf(jf, "{");
    bench_meta_json(jf, PROG, NR);
    fprintf(jf, ",\n \"gpus\": %d, \"ops\": %d, \"reps\": %d, \"warmup\": %d, \"dtype\": \"bf16\", \"unit\": \"us per op\","
                " \"busbw_factor\": %.6f, \"rows\": [", NR, OPS, REPS, WARMUP, f);
    for (int si = 0; si < NSIZES; si++) {
      /* <algo>_us (median) as before, -1 when not run; <algo>_pct = [p10, p50, p90]. */
      fprintf(jf, "%s\n  {\"bytes\": %zu", si ? "," : "", sizes[si]);
      for (int a = 0; a < NALGO; a++) {
        bench_pcts p = result[si][a];
        if (p.p50 > 0)
          fprintf(jf, ", \"%s_us\": %.3f, \"%s_pct\": [%.3f, %.3f, %.3f]", algo_name[a], p.p50, algo_name[a], p.p10,
                  p.p50, p.p90);
        else
          fprintf(jf, ", \"%s_us\": -1", algo_name[a]);
      }
      fprintf(jf, "}");
    }
    fprintf(jf, "\n]}\n");
    fclose(jf);
    printf("# wrote %s\n", json);
  }
  return 0;
}
