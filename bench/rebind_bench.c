/* rebind_bench.c - what rebinding costs against re-instantiating, at scale.
 *
 * A graph of L layers (default 64) per GPU, 4 nodes each:
 *   gemm(h -> t, column part) -> gemm(t -> p, row part) -> all-reduce(p -> a)
 *   -> axpby(h += a)
 * on every visible GPU, one thread per GPU. Prints host times (median of
 * --reps): graph create (materialize + instantiate), instantiate alone,
 * rebind of a kernel-only slot (h: 2 nodes per layer), rebind of a
 * collective slot (a: 64 NCCL re-captures + 64 kernel nodes), whole-graph
 * update, and the launch: host call time (idle queue) and device time per
 * graph (back-to-back launches).
 * A benchmark, not a test: it checks return codes, not numbers.
 *
 *   rebind_bench [--layers 64] [--reps 20] [--hidden 1024] [--tokens 1] [--json PATH]
 */
#define _GNU_SOURCE
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench/bench_common.h"

static int L = 64, REPS = 20, H = 1024, M = 1;
static const char *json = NULL;

typedef struct {
  int rank, nranks;
  tpg_comm_id id;
  double create_us, instantiate_us, rebind_kernel_us, rebind_nccl_us, update_us, launch_host_us, launch_dev_us;
  int nodes;
} job;

static tpg_view V(tpg_slot s) {
  tpg_view v = {s, 0, 0};
  return v;
}

static void *run(void *arg) {
  job *j = arg;
  CUDA_OK(cudaSetDevice(j->rank));
  tpg_comm_config cc = TPG_COMM_CONFIG_INIT;
  cc.device = j->rank;
  cc.rank = j->rank;
  cc.nranks = j->nranks;
  cc.timeout_ms = 60000;
  tpg_comm *comm;
  MUST(tpg_comm_create(&j->id, &cc, &comm));
  int F = 4 * H / j->nranks;
  size_t nh = (size_t)M * H, nt = (size_t)M * F;
  tpg_plan *p;
  tpg_slot h, t, pp, a, w1, w2;
  MUST(tpg_plan_create(&p));
  MUST(tpg_plan_add_slot(p, "h", TPG_BF16, TPG_MEM_DEVICE, nh, &h));
  MUST(tpg_plan_add_slot(p, "t", TPG_BF16, TPG_MEM_DEVICE, nt, &t));
  MUST(tpg_plan_add_slot(p, "p", TPG_BF16, TPG_MEM_DEVICE, nh, &pp));
  MUST(tpg_plan_add_slot(p, "a", TPG_BF16, TPG_MEM_DEVICE, nh, &a));
  MUST(tpg_plan_add_slot(p, "w1", TPG_BF16, TPG_MEM_DEVICE, (size_t)F * H, &w1));
  MUST(tpg_plan_add_slot(p, "w2", TPG_BF16, TPG_MEM_DEVICE, (size_t)H * F, &w2));
  tpg_node prev = 0;
  for (int l = 0; l < L; l++) {
    tpg_gemm_desc g1 = TPG_GEMM_DESC_INIT, g2 = TPG_GEMM_DESC_INIT;
    g1.m = M; g1.n = F; g1.k = H; g1.x = V(h); g1.w = V(w1); g1.y = V(t);
    g2.m = M; g2.n = H; g2.k = F; g2.x = V(t); g2.w = V(w2); g2.y = V(pp);
    tpg_node n1, n2, n3, n4;
    MUST(tpg_plan_add_gemm(p, &g1, l ? &prev : NULL, l ? 1 : 0, &n1));
    MUST(tpg_plan_add_gemm(p, &g2, &n1, 1, &n2));
    tpg_collective_desc cd = TPG_COLLECTIVE_DESC_INIT;
    cd.send = V(pp); cd.recv = V(a); cd.count = nh;
    MUST(tpg_plan_add_collective(p, &cd, &n2, 1, &n3));
    MUST(tpg_plan_add_axpby(p, V(h), V(a), nh, 1.0f, 1.0f, &n3, 1, &n4));
    prev = n4;
  }
  void *buf[2][6];
  size_t sizes[6] = {nh * 2, nt * 2, nh * 2, nh * 2, (size_t)F * H * 2, (size_t)H * F * 2};
  for (int s = 0; s < 2; s++)
    for (int k = 0; k < 6; k++) {
      CUDA_OK(cudaMalloc(&buf[s][k], sizes[k]));
      CUDA_OK(cudaMemset(buf[s][k], 0x3c, sizes[k])); /* small finite bf16 values */
    }
  tpg_slot slots[6] = {h, t, pp, a, w1, w2};
  tpg_binding b[2][6];
  for (int s = 0; s < 2; s++)
    for (int k = 0; k < 6; k++) b[s][k] = (tpg_binding){slots[k], buf[s][k]};
  tpg_graph_config cfg = TPG_GRAPH_CONFIG_INIT;
  cfg.device = j->rank;
  cfg.comm = comm;
  cfg.bindings = b[0];
  cfg.nbindings = 6;
  double *v = malloc(sizeof(double) * (size_t)REPS);
  double *vi = malloc(sizeof(double) * (size_t)REPS);
  tpg_graph *g = NULL;
  /* create (materialize + instantiate) REPS times; keep the last */
  for (int r = 0; r < REPS; r++) {
    if (g) MUST(tpg_graph_destroy(g));
    double t0 = bench_now_us();
    MUST(tpg_graph_create(p, &cfg, &g));
    v[r] = bench_now_us() - t0;
    tpg_graph_info info;
    MUST(tpg_graph_get_info(g, &info, sizeof info));
    vi[r] = info.instantiate_us;
    j->nodes = info.nodes;
  }
  j->create_us = bench_median(v, REPS);
  j->instantiate_us = bench_median(vi, REPS);
  cudaStream_t st;
  CUDA_OK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  for (int r = 0; r < REPS; r++) {
    double t0 = bench_now_us();
    MUST(tpg_graph_rebind(g, &b[(r + 1) & 1][0], 1));
    v[r] = bench_now_us() - t0;
  }
  j->rebind_kernel_us = bench_median(v, REPS);
  for (int r = 0; r < REPS; r++) {
    double t0 = bench_now_us();
    MUST(tpg_graph_rebind(g, &b[(r + 1) & 1][3], 1));
    v[r] = bench_now_us() - t0;
  }
  j->rebind_nccl_us = bench_median(v, REPS);
  for (int r = 0; r < REPS; r++) {
    double t0 = bench_now_us();
    MUST(tpg_graph_update(g, NULL, b[(r + 1) & 1], 6));
    v[r] = bench_now_us() - t0;
  }
  j->update_us = bench_median(v, REPS);
  /* launches: warm up, then host call time and device time per graph */
  for (int r = 0; r < 5; r++) MUST(tpg_graph_launch(g, (tpg_stream)st));
  MUST(tpg_comm_wait(comm, (tpg_stream)st));
  cudaEvent_t e0, e1;
  CUDA_OK(cudaEventCreate(&e0));
  CUDA_OK(cudaEventCreate(&e1));
  const int NL = 50;
  double *vh = malloc(sizeof(double) * NL);
  /* Host cost of one launch call, with an idle queue (back-to-back launches
   * would measure the device once the queue fills). */
  for (int r = 0; r < NL; r++) {
    CUDA_OK(cudaStreamSynchronize(st));
    double t0 = bench_now_us();
    MUST(tpg_graph_launch(g, (tpg_stream)st));
    vh[r] = bench_now_us() - t0;
  }
  MUST(tpg_comm_wait(comm, (tpg_stream)st));
  /* Device time per graph: back-to-back launches between two events. */
  CUDA_OK(cudaEventRecord(e0, st));
  for (int r = 0; r < NL; r++) MUST(tpg_graph_launch(g, (tpg_stream)st));
  CUDA_OK(cudaEventRecord(e1, st));
  MUST(tpg_comm_wait(comm, (tpg_stream)st));
  float ms = 0;
  CUDA_OK(cudaEventElapsedTime(&ms, e0, e1));
  j->launch_host_us = bench_median(vh, NL);
  j->launch_dev_us = 1000.0 * ms / NL;
  MUST(tpg_graph_destroy(g));
  MUST(tpg_comm_destroy(comm));
  tpg_plan_destroy(p);
  for (int s = 0; s < 2; s++)
    for (int k = 0; k < 6; k++) cudaFree(buf[s][k]);
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  cudaStreamDestroy(st);
  free(v); free(vi); free(vh);
  return NULL;
}

int main(int argc, char **argv) {
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--layers") && i + 1 < argc) L = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--reps") && i + 1 < argc) REPS = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--hidden") && i + 1 < argc) H = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--tokens") && i + 1 < argc) M = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--json") && i + 1 < argc) json = argv[++i];
    else { fprintf(stderr, "usage: rebind_bench [--layers N] [--reps N] [--hidden H] [--tokens M] [--json PATH]\n"); return 2; }
  }
  tpg_runtime_info ri;
  MUST(tpg_runtime_get_info(&ri, sizeof ri));
  if (ri.device_count < 1) {
    fprintf(stderr, "rebind_bench: no GPU: %s\n", ri.driver_error);
    return 1;
  }
  int n = ri.device_count > 8 ? 8 : ri.device_count;
  job jobs[8];
  pthread_t th[8];
  tpg_comm_id id;
  MUST(tpg_comm_id_create(&id));
  for (int r = 0; r < n; r++) {
    memset(&jobs[r], 0, sizeof jobs[r]);
    jobs[r].rank = r;
    jobs[r].nranks = n;
    jobs[r].id = id;
    pthread_create(&th[r], NULL, run, &jobs[r]);
  }
  for (int r = 0; r < n; r++) pthread_join(th[r], NULL);
  printf("\nrebind_bench: %d GPU(s), %d layers x 4 nodes, hidden %d, tokens %d, median of %d (host us)\n", n, L, H, M,
         REPS);
  printf("%-5s %7s %10s %12s %14s %14s %12s %12s %12s %10s\n", "rank", "nodes", "create", "instantiate",
         "rebind kernel", "rebind nccl", "update", "launch host", "launch dev", "inst/rbk");
  for (int r = 0; r < n; r++) {
    job *j = &jobs[r];
    printf("%-5d %7d %10.1f %12.1f %14.1f %14.1f %12.1f %12.1f %12.1f %9.0fx\n", r, j->nodes, j->create_us,
           j->instantiate_us, j->rebind_kernel_us, j->rebind_nccl_us, j->update_us, j->launch_host_us,
           j->launch_dev_us, j->instantiate_us / j->rebind_kernel_us);
  }
  if (json) {
    FILE *f = fopen(json, "w");
    if (f) {
      fprintf(f, "{\"gpus\": %d, \"layers\": %d, \"hidden\": %d, \"tokens\": %d, \"reps\": %d, \"ranks\": [", n, L, H,
              M, REPS);
      for (int r = 0; r < n; r++) {
        job *j = &jobs[r];
        fprintf(f,
                "%s{\"rank\": %d, \"nodes\": %d, \"create_us\": %.2f, \"instantiate_us\": %.2f, "
                "\"rebind_kernel_us\": %.2f, \"rebind_nccl_us\": %.2f, \"update_us\": %.2f, "
                "\"launch_host_us\": %.2f, \"launch_dev_us\": %.2f}",
                r ? ", " : "", r, j->nodes, j->create_us, j->instantiate_us, j->rebind_kernel_us, j->rebind_nccl_us,
                j->update_us, j->launch_host_us, j->launch_dev_us);
      }
      fprintf(f, "]}\n");
      fclose(f);
    }
  }
  return 0;
}
