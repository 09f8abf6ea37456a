/* gemm_cublaslt.cuh - gemm_bench's side of the cuBLASLt family: the
 * library's own plans (lib/gemm/cublaslt.h: the algorithm the selector or
 * the tuner names, asked for with 16-byte alignment, the workspace its
 * algorithm needs), so that the checks and the zoo run exactly what a
 * graph node captures. The baseline the zoo compares with is another call
 * (bench_cuda.cuh Lt: PyTorch's, the heuristic's first answer with 32 MiB
 * and default alignment). Included by gemm_bench.cu after its helpers.
 */
#include <memory>

#include "../lib/gemm/cublaslt.h"

struct LtPlan {
  tpg_lt_plan *p = nullptr;
  ~LtPlan() { tpg_lt_plan_destroy(p); }
};

static bool lt_family_available() { return tpg_lt_available(nullptr, 0) == 0; }

/* The plan of problem p for the heuristic's answer `algo`. Exits on failure. */
static std::shared_ptr<LtPlan> lt_plan(const tpg_gemm_problem &p, int algo) {
  auto pl = std::make_shared<LtPlan>();
  char why[300];
  if (tpg_lt_plan_create(&p, algo, NULL, &pl->p, why, sizeof why)) {
    fprintf(stderr, "cuBLASLt plan %dx%dx%d epilogue %d answer %d: %s\n", p.m, p.n, p.k, p.epilogue, algo, why);
    exit(2);
  }
  return pl;
}

/* Runs the plan on a's pointers (a.workspace: at least its workspace). */
static void lt_launch(const LtPlan &pl, const tpg_gemm_args &a, cudaStream_t st = 0) {
  char why[300];
  if (tpg_lt_plan_run(pl.p, &a, (void *)st, why, sizeof why)) {
    fprintf(stderr, "cuBLASLt plan run: %s\n", why);
    exit(2);
  }
}
