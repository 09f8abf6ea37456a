// cond_kernels.cu - an engine's kernels for tests/gpu/cond_test.c: a loop
// step, and kernels that set a conditional node's value from device memory
// (cudaGraphSetConditional, CUDA 12.3+). Loaded as a tpg_module; the
// condition handle arrives as a TPG_ARG_COND argument.
#include <cuda_runtime.h>

// One loop step: x[i] += add; thread 0 counts the step and writes this
// rank's wish to go on (1: its counter is below its own limit) into flag[0]
// (flag[1..3] = 0: the all-reduce moves 16 bytes).
extern "C" __global__ void cond_step(float *x, int n, float add, int *ctr, float *flag, int limit) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) x[i] += add;
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    int c = ++ctr[0];
    flag[0] = c < limit ? 1.0f : 0.0f;
    flag[1] = flag[2] = flag[3] = 0.0f;
  }
}

// Go on while every rank wants to (the all-reduced sum of the wishes equals
// the rank count): every rank sets the same value, so all take the same
// branch and the loop's collectives stay in lock-step.
extern "C" __global__ void cond_while_all(cudaGraphConditionalHandle h, const float *flag_sum, float nranks) {
  if (blockIdx.x == 0 && threadIdx.x == 0) cudaGraphSetConditional(h, flag_sum[0] == nranks ? 1u : 0u);
}

// The condition takes v[0] (IF: non-zero or zero; SWITCH: the body index).
extern "C" __global__ void cond_set_value(cudaGraphConditionalHandle h, const int *v) {
  if (blockIdx.x == 0 && threadIdx.x == 0) cudaGraphSetConditional(h, (unsigned)v[0]);
}

// y[i] = value (a body's work, telling which body ran).
extern "C" __global__ void cond_fill(float *y, int n, float value) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) y[i] = value;
}

// Buckets chosen on the device: the SWITCH takes the index of the smallest
// bucket holding tokens[0] (bounds ascending, nb of them; nb: none fits, no
// body runs).
struct cond_bounds {
  int b[8];
};
extern "C" __global__ void cond_bucket(cudaGraphConditionalHandle h, const int *tokens, cond_bounds bounds, int nb) {
  if (blockIdx.x != 0 || threadIdx.x != 0) return;
  int i = 0;
  while (i < nb && bounds.b[i] < tokens[0]) i++;
  cudaGraphSetConditional(h, (unsigned)i);
}
