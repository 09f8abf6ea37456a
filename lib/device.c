/* device.c - devices, primary contexts, and loading the embedded kernels.
 *
 * The fatbins are loaded once per process with cuLibraryLoadData: a CUlibrary
 * is context-independent, so one load serves every GPU of an in-process
 * (thread per GPU) job, and each context gets its CUfunction on demand.
 */
#define _POSIX_C_SOURCE 200809L
#include "lib/device.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "lib/embedded.h"

#define TPG_MAX_BLOBS 16
static pthread_mutex_t g_lib_mu = PTHREAD_MUTEX_INITIALIZER;
static CUlibrary g_libs[TPG_MAX_BLOBS];
static int g_libs_loaded = 0; /* 0: not tried, 1: loaded, -1: failed */

static tpg_status load_libraries_locked(void) {
  if (g_libs_loaded == 1) return TPG_SUCCESS;
  int i = 0;
  for (; tpg_kernels[i].name; i++) {
    if (i >= TPG_MAX_BLOBS) return TPG_FAIL(TPG_ERROR_INTERNAL, "more than %d embedded fatbins", TPG_MAX_BLOBS);
    CUresult r = tpg_cu->cuLibraryLoadData(&g_libs[i], tpg_kernels[i].start, NULL, NULL, 0, NULL, NULL, 0);
    if (r != CUDA_SUCCESS) {
      for (int j = 0; j < i; j++) tpg_cu->cuLibraryUnload(g_libs[j]);
      return tpg_cu_fail(r, "tpg_kernel_function", "cuLibraryLoadData(embedded fatbin)");
    }
  }
  g_libs_loaded = 1;
  return TPG_SUCCESS;
}

tpg_status tpg_kernel_function(const char *name, unsigned smem_bytes, CUfunction *out) {
  *out = NULL;
  pthread_mutex_lock(&g_lib_mu);
  tpg_status st = load_libraries_locked();
  pthread_mutex_unlock(&g_lib_mu);
  if (st != TPG_SUCCESS) return st;
  for (int i = 0; tpg_kernels[i].name; i++) {
    CUkernel k;
    if (tpg_cu->cuLibraryGetKernel(&k, g_libs[i], name) != CUDA_SUCCESS) continue;
    CUresult r = tpg_cu->cuKernelGetFunction(out, k);
    if (r == CUDA_ERROR_NO_BINARY_FOR_GPU || r == CUDA_ERROR_INVALID_PTX || r == CUDA_ERROR_UNSUPPORTED_PTX_VERSION)
      return TPG_FAIL(TPG_ERROR_NO_DEVICE, "kernel %s has no code for this GPU (library built for %s)", name,
                      tpg_kernels_archs);
    if (r != CUDA_SUCCESS) return tpg_cu_fail(r, __func__, "cuKernelGetFunction");
    if (smem_bytes > 48 * 1024) {
      r = tpg_cu->cuFuncSetAttribute(*out, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, (int)smem_bytes);
      if (r != CUDA_SUCCESS) return tpg_cu_fail(r, __func__, "cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)");
    }
    return TPG_SUCCESS;
  }
  return TPG_FAIL(TPG_ERROR_INTERNAL, "kernel %s is not in the embedded device code", name);
}

tpg_status tpg_dev_open(int ordinal, tpg_dev *out) {
  memset(out, 0, sizeof *out);
  TPG_TRY(tpg_cu_load());
  int n = 0;
  TPG_CU(cuDeviceGetCount(&n));
  if (ordinal < 0 || ordinal >= n)
    return TPG_FAIL(TPG_ERROR_NO_DEVICE, "device %d does not exist: expected 0..%d (%d GPU%s visible)", ordinal,
                    n - 1, n, n == 1 ? "" : "s");
  out->ordinal = ordinal;
  TPG_CU(cuDeviceGet(&out->dev, ordinal));
  int major = 0, minor = 0;
  TPG_CU(cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, out->dev));
  TPG_CU(cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, out->dev));
  TPG_CU(cuDeviceGetAttribute(&out->sm_count, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, out->dev));
  out->sm_arch = major * 10 + minor;
  if (out->sm_arch < 80)
    return TPG_FAIL(TPG_ERROR_NO_DEVICE, "device %d is sm_%d; tpgraph's kernels need sm_80 (Ampere) or newer",
                    ordinal, out->sm_arch);
  TPG_CU(cuDevicePrimaryCtxRetain(&out->ctx, out->dev));
  return TPG_SUCCESS;
}

void tpg_dev_close(tpg_dev *d) {
  if (d && d->ctx) {
    tpg_cu->cuDevicePrimaryCtxRelease(d->dev);
    d->ctx = NULL;
  }
}

tpg_status tpg_dev_push(const tpg_dev *d) {
  TPG_CU(cuCtxPushCurrent(d->ctx));
  return TPG_SUCCESS;
}

void tpg_dev_pop(void) {
  CUcontext c;
  tpg_cu->cuCtxPopCurrent(&c);
}

CUresult tpg_launch_ex(CUfunction f, const unsigned grid[3], const unsigned block[3], unsigned smem_bytes,
                       const unsigned *cluster, CUstream stream, void **params) {
  CUlaunchAttribute attr[1];
  CUlaunchConfig cfg;
  memset(&cfg, 0, sizeof cfg);
  cfg.gridDimX = grid[0];
  cfg.gridDimY = grid[1];
  cfg.gridDimZ = grid[2];
  cfg.blockDimX = block[0];
  cfg.blockDimY = block[1];
  cfg.blockDimZ = block[2];
  cfg.sharedMemBytes = smem_bytes;
  cfg.hStream = stream;
  if (cluster && cluster[0]) {
    memset(attr, 0, sizeof attr);
    attr[0].id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
    attr[0].value.clusterDim.x = cluster[0];
    attr[0].value.clusterDim.y = cluster[1];
    attr[0].value.clusterDim.z = cluster[2];
    cfg.attrs = attr;
    cfg.numAttrs = 1;
  }
  return tpg_cu->cuLaunchKernelEx(&cfg, f, params, NULL);
}

CUresult tpg_tmap_encode_driver(void *ctx, CUtensorMap *map, CUtensorMapDataType dtype, cuuint32_t rank, void *base,
                                const cuuint64_t *dims, const cuuint64_t *strides, const cuuint32_t *box,
                                const cuuint32_t *elem_strides, CUtensorMapInterleave interleave,
                                CUtensorMapSwizzle swizzle, CUtensorMapL2promotion l2, CUtensorMapFloatOOBfill oob) {
  (void)ctx;
  return tpg_cu->cuTensorMapEncodeTiled(map, dtype, rank, base, dims, strides, box, elem_strides, interleave, swizzle,
                                        l2, oob);
}
