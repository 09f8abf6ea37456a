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

/* Runs the plan on a's pointers (a.workspace: at least its workspace), and
 * the kernel that ends it (SwiGLU's tpg_lt_swiglu), as lib/gemm/lt_run.c. */
static void lt_launch(const LtPlan &pl, const tpg_gemm_args &a, cudaStream_t st = 0) {
  char why[300];
  tpg_lt_post post;
  if (tpg_lt_plan_run(pl.p, &a, (void *)st, why, sizeof why)) {
    fprintf(stderr, "cuBLASLt plan run: %s\n", why);
    exit(2);
  }
  if (!tpg_lt_plan_post(pl.p, &a, &post)) return;
  tpg_lt_swiglu<<<dim3(post.grid[0], post.grid[1], post.grid[2]), dim3(post.block[0], post.block[1], post.block[2]),
                  0, st>>>(post.args);
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) {
    fprintf(stderr, "tpg_lt_swiglu after cuBLASLt: %s\n", cudaGetErrorString(e));
    exit(2);
  }
}
