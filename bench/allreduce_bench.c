/* allreduce_bench.c - NCCL in a graph vs tpgraph's all-reduce kernel nodes
 * in a graph (one-shot, two-shot, and what TPG_ALGO_AUTO picks), bf16,
 * 1 KiB .. 64 MiB, on every visible GPU (one thread per GPU).
 *
 * Each graph chains --ops all-reduces (alternating between two buffers, so
 * each op waits for the previous one, as layers do); time per op = graph
 * time / ops, median of --reps launches timed with events. Bus bandwidth
 * uses the nccl-tests convention: bytes * 2(n-1)/n / time. One-shot serves
 * messages up to 4 MiB (push up to TPG_ONESHOT_PUSH_MAX, pull above), two-shot
 * up to 8 MiB ("-" above). The auto column runs TPG_ALGO_AUTO, whose limits
 * TPG_ONESHOT_PUSH_MAX and TPG_TWOSHOT_MAX move (docs/performance.md).
 *
 *   allreduce_bench [--ops 20] [--reps 30] [--min BYTES] [--max BYTES] [--json PATH]
 */
#define _GNU_SOURCE
#include <cuda_runtime_api.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench_common.h"

enum { NSIZES = 12 };
static const size_t sizes[NSIZES] = {1 << 10, 4 << 10, 16 << 10, 64 << 10, 256 << 10, 512 << 10,
                                     1 << 20, 2 << 20,  4 << 20,  8 << 20,  16 << 20,  64 << 20};
static int OPS = 20, REPS = 30, NR;
enum { NALGO = 4 };
static const tpg_collective_algo algos[NALGO] = {TPG_ALGO_NCCL, TPG_ALGO_ONESHOT, TPG_ALGO_TWOSHOT, TPG_ALGO_AUTO};
static size_t MINB = 0, MAXB = SIZE_MAX;
static double result[NSIZES][NALGO]; /* us per op (rank 0), NAN: not served */
static tpg_comm_id g_id;
static pthread_barrier_t bar;

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
  size_t maxb = sizes[NSIZES - 1];
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
      if (sizes[si] < MINB || sizes[si] > MAXB ||
          (algos[algo] == TPG_ALGO_ONESHOT && sizes[si] > ((size_t)4 << 20)) ||
          (algos[algo] == TPG_ALGO_TWOSHOT && sizes[si] > ((size_t)8 << 20))) {
        if (rank == 0) result[si][algo] = NAN;
        continue;
      }
      tpg_plan *p;
      tpg_slot a, b;
      MUST(tpg_plan_create(&p));
      MUST(tpg_plan_add_slot(p, "a", TPG_BF16, TPG_MEM_DEVICE, n, &a));
      MUST(tpg_plan_add_slot(p, "b", TPG_BF16, TPG_MEM_DEVICE, n, &b));
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
      cfg.bindings = bd;
      cfg.nbindings = 2;
      tpg_graph *g;
      MUST(tpg_graph_create(p, &cfg, &g));
      for (int w = 0; w < 3; w++) MUST(tpg_graph_launch(g, (tpg_stream)s));
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
      double med = bench_median(v, REPS);
      if (rank == 0) result[si][algo] = med;
      MUST(tpg_graph_destroy(g));
      tpg_plan_destroy(p);
    }
  MUST(tpg_comm_destroy(comm));
  cudaFree(buf[0]);
  cudaFree(buf[1]);
  free(v);
  return NULL;
}

int main(int argc, char **argv) {
  const char *json = NULL;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--ops")) OPS = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--reps")) REPS = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--json")) json = argv[i + 1];
    else if (!strcmp(argv[i], "--min")) MINB = (size_t)strtoull(argv[i + 1], NULL, 10);
    else if (!strcmp(argv[i], "--max")) MAXB = (size_t)strtoull(argv[i + 1], NULL, 10);
  }
  tpg_runtime_info ri;
  MUST(tpg_runtime_query(&ri));
  if (ri.device_count < 2) {
    fprintf(stderr, "allreduce_bench: needs 2+ GPUs (%d visible%s%s)\n", ri.device_count,
            ri.driver_error[0] ? ": " : "", ri.driver_error);
    return 1;
  }
  NR = ri.device_count > 8 ? 8 : ri.device_count;
  MUST(tpg_comm_id_create(&g_id));
  pthread_barrier_init(&bar, NULL, (unsigned)NR);
  pthread_t th[8];
  for (int r = 0; r < NR; r++) pthread_create(&th[r], NULL, rank_main, (void *)(intptr_t)r);
  for (int r = 0; r < NR; r++) pthread_join(th[r], NULL);
  double f = 2.0 * (NR - 1) / NR;
  printf("\nallreduce_bench: %d GPUs, bf16, %d chained all-reduces per graph, median of %d, us per op "
         "(speedups: NCCL us / ours)\n", NR, OPS, REPS);
  printf("%10s %10s %10s %10s %10s %9s %9s %12s %12s %12s\n", "bytes", "nccl us", "oneshot us", "twoshot us",
         "auto us", "1s/nccl", "2s/nccl", "nccl busbw", "1s busbw", "2s busbw");
  FILE *jf = json ? fopen(json, "w") : NULL;
  if (jf) fprintf(jf, "{\"gpus\": %d, \"ops\": %d, \"reps\": %d, \"rows\": [", NR, OPS, REPS);
  for (int si = 0; si < NSIZES; si++) {
    const double nc = result[si][0];
    char us[NALGO][16], sp[2][16], bw[3][24];
    for (int a = 0; a < NALGO; a++) {
      if (result[si][a] > 0) snprintf(us[a], sizeof us[a], "%.2f", result[si][a]);
      else snprintf(us[a], sizeof us[a], "-");
    }
    for (int a = 0; a < 3; a++) {
      if (result[si][a] > 0) snprintf(bw[a], sizeof bw[a], "%.1f GB/s", sizes[si] * f / result[si][a] / 1e3);
      else snprintf(bw[a], sizeof bw[a], "-");
      if (a > 0) {
        if (result[si][a] > 0) snprintf(sp[a - 1], sizeof sp[a - 1], "%.2fx", nc / result[si][a]);
        else snprintf(sp[a - 1], sizeof sp[a - 1], "-");
      }
    }
    printf("%10zu %10s %10s %10s %10s %9s %9s %12s %12s %12s\n", sizes[si], us[0], us[1], us[2], us[3], sp[0], sp[1],
           bw[0], bw[1], bw[2]);
    if (jf)
      fprintf(jf, "%s{\"bytes\": %zu, \"nccl_us\": %.3f, \"oneshot_us\": %.3f, \"twoshot_us\": %.3f, \"auto_us\": %.3f}",
              si ? ", " : "", sizes[si], nc, result[si][1] > 0 ? result[si][1] : -1.0,
              result[si][2] > 0 ? result[si][2] : -1.0, result[si][3] > 0 ? result[si][3] : -1.0);
  }
  if (jf) {
    fprintf(jf, "]}\n");
    fclose(jf);
  }
  return 0;
}
