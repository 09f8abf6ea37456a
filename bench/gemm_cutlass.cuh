/* gemm_cutlass.cuh - gemm_bench's side of the CUTLASS family: the kernels
 * come from the library's embedded fatbins (//kernels:device_code, linked
 * into the bench), not from an #include like ours, so the bench launches the
 * very images the library loads and does not compile CUTLASS a second time;
 * their argument blocks come from lib/gemm/cutlass.h, as the graph node
 * builds them. Included by gemm_bench.cu after its helpers (CK, g_encode).
 *
 * Also the SwiGLU combine kernel: CUTLASS cannot fuse our gate/up layout
 * (kernels/gemm/sm90_cutlass.cuh), so the zoo times the unfused way, a
 * 2N-wide CUTLASS GEMM and then y = silu(gate) * up, as one candidate.
 */
#include <map>
#include <memory>
#include <string>

#include "../lib/embedded.h"
#include "../lib/gemm/cutlass.h"

/* Weak: bench/build.sh links no embedded fatbins; CUTLASS is then absent. */
extern "C" const tpg_embedded_blob tpg_kernels[] __attribute__((weak));

static bool cutlass_available() { return &tpg_kernels[0] != nullptr && tpg_kernels[0].name != nullptr; }

/* The runtime's handle of an embedded kernel (loaded once per blob). */
static cudaKernel_t cutlass_kernel(const char *name, unsigned smem) {
  static std::map<std::string, cudaKernel_t> have;
  static std::map<std::string, cudaLibrary_t> libs;
  auto it = have.find(name);
  if (it != have.end()) return it->second;
  if (!cutlass_available()) {
    fprintf(stderr, "%s: this gemm_bench has no embedded kernels (built by bench/build.sh?); use the Bazel build\n", name);
    exit(2);
  }
  for (int i = 0; tpg_kernels[i].name; ++i) {
    const std::string blob = tpg_kernels[i].name;
    if (blob.compare(0, 12, "sm90_cutlass")) continue;
    if (!libs.count(blob)) {
      cudaLibrary_t lib;
      CK(cudaLibraryLoadData(&lib, tpg_kernels[i].start, nullptr, nullptr, 0, nullptr, nullptr, 0));
      libs[blob] = lib;
    }
    cudaKernel_t k;
    if (cudaLibraryGetKernel(&k, libs[blob], name) != cudaSuccess) {
      cudaGetLastError();
      continue;
    }
    int dev = 0;
    CK(cudaGetDevice(&dev));
    CK(cudaKernelSetAttributeForDevice(k, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem, dev));
    have[name] = k;
    return k;
  }
  fprintf(stderr, "%s: not in the embedded fatbins\n", name);
  exit(2);
}

static CUresult bench_encode(void *ctx, CUtensorMap *map, CUtensorMapDataType dt, cuuint32_t rank, void *base,
                             const cuuint64_t *dims, const cuuint64_t *strides, const cuuint32_t *box,
                             const cuuint32_t *es, CUtensorMapInterleave il, CUtensorMapSwizzle sw,
                             CUtensorMapL2promotion l2, CUtensorMapFloatOOBfill oob) {
  (void)ctx;
  return g_encode(map, dt, rank, base, dims, strides, box, es, il, sw, l2, oob);
}

/* The block for a CUTLASS launch L on the pointers of a (a.workspace holds
 * L.workspace_bytes), as the graph node makes it. Exits on failure. */
static std::shared_ptr<tpg_gemm_cutlass_args> cutlass_block(const tpg_kernel_launch &L, const tpg_gemm_args &a) {
  auto blk = std::make_shared<tpg_gemm_cutlass_args>();
  tpg_cutlass_problem p;
  CUresult cu;
  char why[256];
  ensure_encode();
  memset(&p, 0, sizeof p);
  p.kernel = L.cutlass - 1;
  p.mode = L.cutlass_mode;
  p.splits = L.cutlass_splits;
  p.m = a.m, p.n = a.n, p.k = a.k, p.ldx = a.ldx, p.ldw = a.ldw, p.ldy = a.ldy, p.ldr = a.ldr;
  p.dtype = a.dtype, p.epilogue = a.epilogue, p.num_sms = g_sms;
  if (tpg_cutlass_fill(&p, &a, bench_encode, nullptr, blk.get(), &cu, why, sizeof why)) {
    fprintf(stderr, "tpg_cutlass_fill %s: %s\n", L.kernel, why);
    exit(2);
  }
  return blk;
}

static void cutlass_launch(const tpg_kernel_launch &L, const tpg_gemm_cutlass_args &blk, cudaStream_t st = 0) {
  const cudaKernel_t k = cutlass_kernel(L.kernel, L.smem_bytes);
  unsigned cl[3];
  tpg_kernel_launch_cluster(&L, cl);
  cudaLaunchConfig_t cfg = {};
  cudaLaunchAttribute at[1];
  cfg.gridDim = dim3(L.grid[0], L.grid[1], L.grid[2]);
  cfg.blockDim = dim3(L.block[0], L.block[1], L.block[2]);
  cfg.dynamicSmemBytes = L.smem_bytes;
  cfg.stream = st;
  if (cl[0]) {
    at[0].id = cudaLaunchAttributeClusterDimension;
    at[0].val.clusterDim.x = cl[0];
    at[0].val.clusterDim.y = cl[1];
    at[0].val.clusterDim.z = cl[2];
    cfg.attrs = at;
    cfg.numAttrs = 1;
  }
  void *args[1] = {(void *)&blk};
  CK(cudaLaunchKernelExC(&cfg, (const void *)k, args));
}

/* What a CUTLASS launch must leave zero in its workspace: the done counter
 * and the reduction's barrier words (stream-K, split-K). Counts non-zero
 * words (the check reads them back after the launch). */
static size_t cutlass_dirty_words(const tpg_gemm_cutlass_args &blk) {
  size_t dirty = 0;
  if (!blk.done) return 0;
  std::vector<uint32_t> h(1 + blk.lock_words);
  CK(cudaMemcpy(h.data(), blk.done, 4, cudaMemcpyDeviceToHost));
  if (blk.lock_words) CK(cudaMemcpy(h.data() + 1, blk.locks, blk.lock_words * 4, cudaMemcpyDeviceToHost));
  for (auto v : h) dirty += v != 0;
  return dirty;
}

/* y[m, n] = silu(t[m, n]) * t[m, N + n] (t: [M, 2N] from a 2N-wide GEMM),
 * fp32 math, bf16 out: PyTorch's silu-and-mul after an unfused gate-up GEMM. */
__global__ void swiglu_combine_kernel(const __nv_bfloat16 *t, __nv_bfloat16 *y, int m, int n) {
  const size_t total = (size_t)m * n;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total; i += (size_t)gridDim.x * blockDim.x) {
    const size_t r = i / n, c = i % n;
    const float g = __bfloat162float(t[r * 2 * n + c]), u = __bfloat162float(t[r * 2 * n + n + c]);
    y[i] = __float2bfloat16_rn(g / (1.f + __expf(-g)) * u);
  }
}
