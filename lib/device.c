/* device.c - devices, primary contexts, and loading the embedded kernels.
 *
 * The fatbins are loaded once per process with cuLibraryLoadData, each when a
 * graph first needs one of its kernels: a CUlibrary is context-independent,
 * so one load serves every GPU of an in-process (thread per GPU) job, and
 * each context gets its CUfunction on demand. The time spent here is
 * reported per graph (tpg_graph_info.kernel_load_us): the first graph of a
 * process pays for loading device code, later ones hardly at all.
 */
#define _POSIX_C_SOURCE 200809L
#include "lib/device.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "lib/embedded.h"

#define TPG_MAX_BLOBS 16
static pthread_mutex_t g_lib_mu = PTHREAD_MUTEX_INITIALIZER;
static CUlibrary g_libs[TPG_MAX_BLOBS]; /* NULL: not loaded (yet) */
static _Thread_local double tls_load_us; /* this thread's time in here (tpg_kernel_load_us) */

double tpg_kernel_load_us(void) { return tls_load_us; }
void tpg_kernel_load_add_us(double us) { tls_load_us += us; }

/* Library i, loaded now if it is not yet: each fatbin is loaded once per
 * process, and only when a graph first needs one of its kernels (a graph of
 * GEMMs never pays for the all-reduce kernels' 2 MB). Kept for the life of
 * the process, like the driver. */
static CUlibrary library(int i, tpg_status *st) {
  pthread_mutex_lock(&g_lib_mu);
  CUresult r = CUDA_SUCCESS;
  if (!g_libs[i]) r = tpg_cu->cuLibraryLoadData(&g_libs[i], tpg_kernels[i].start, NULL, NULL, 0, NULL, NULL, 0);
  if (r != CUDA_SUCCESS) g_libs[i] = NULL;
  CUlibrary lib = g_libs[i];
  pthread_mutex_unlock(&g_lib_mu);
  if (r != CUDA_SUCCESS) {
    char what[96];
    snprintf(what, sizeof what, "cuLibraryLoadData(embedded %s fatbin)", tpg_kernels[i].name);
    *st = tpg_cu_fail(r, "tpg_kernel_function", what);
  }
  return lib;
}

static int is_loaded(int i) {
  pthread_mutex_lock(&g_lib_mu);
  int loaded = g_libs[i] != NULL;
  pthread_mutex_unlock(&g_lib_mu);
  return loaded;
}

/* The order libraries are asked for a kernel: the one whose file stem the
 * name carries ("tpg_gemv_m8" lives in gemv.cu: the naming rule of
 * kernels/), then those already loaded, then the rest smallest first. A
 * hint, not a rule: every library is asked before a name is declared
 * missing, so a kernel named otherwise is still found. */
static int probe_order(const char *name, int n, int *order) {
  int k = 0, hint = -1;
  size_t best = 0;
  for (int i = 0; i < n; i++) {
    size_t len = strlen(tpg_kernels[i].name);
    if (strncmp(name, "tpg_", 4) == 0 && strncmp(name + 4, tpg_kernels[i].name, len) == 0 && len > best) {
      best = len;
      hint = i;
    }
  }
  if (hint >= 0) order[k++] = hint;
  for (int i = 0; i < n; i++)
    if (i != hint && is_loaded(i)) order[k++] = i;
  int first_unloaded = k;
  for (int i = 0; i < n; i++)
    if (i != hint && !is_loaded(i)) order[k++] = i;
  for (int a = first_unloaded + 1; a < k; a++) /* insertion sort by size: at most TPG_MAX_BLOBS */
    for (int b = a; b > first_unloaded; b--) {
      const tpg_embedded_blob *x = &tpg_kernels[order[b - 1]], *y = &tpg_kernels[order[b]];
      if (x->end - x->start <= y->end - y->start) break;
      int t = order[b - 1];
      order[b - 1] = order[b];
      order[b] = t;
    }
  return k;
}

static tpg_status kernel_function(const char *name, unsigned smem_bytes, CUfunction *out) {
  *out = NULL;
  int n = 0;
  while (tpg_kernels[n].name) n++;
  if (n > TPG_MAX_BLOBS) return TPG_FAIL(TPG_ERROR_INTERNAL, "more than %d embedded fatbins", TPG_MAX_BLOBS);
  int order[TPG_MAX_BLOBS];
  probe_order(name, n, order);
  for (int o = 0; o < n; o++) {
    tpg_status st = TPG_SUCCESS;
    CUlibrary lib = library(order[o], &st);
    if (!lib) return st;
    CUkernel k;
    if (tpg_cu->cuLibraryGetKernel(&k, lib, name) != CUDA_SUCCESS) continue;
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

tpg_status tpg_kernel_function(const char *name, unsigned smem_bytes, CUfunction *out) {
  double t0 = tpg_now_us();
  tpg_status st = kernel_function(name, smem_bytes, out);
  tls_load_us += tpg_now_us() - t0;
  return st;
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
