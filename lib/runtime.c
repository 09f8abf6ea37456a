/* runtime.c - what the library, the driver, NCCL and each GPU can do.
 *
 * tpg_runtime_get_info works with no driver at all: it is the call an engine
 * makes first, and the answer "no driver, because ..." is information, not
 * an error.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <string.h>

#include "lib/device.h"
#include "lib/embedded.h"
#include "lib/nccl_loader.h"

TPG_HIDDEN const char *tpg_cu_why(void);

/* The first (0.3.0) size of each OUT struct: callers may pass a larger one. */
#define RUNTIME_INFO_FIRST (offsetof(tpg_runtime_info, driver_error) + sizeof(((tpg_runtime_info *)0)->driver_error))
#define DEVICE_INFO_FIRST (offsetof(tpg_device_info, kernels_supported) + sizeof(int))

static void runtime_info(tpg_runtime_info *out) {
  memset(out, 0, sizeof *out);
  out->version = TPG_VERSION_CODE;
  snprintf(out->kernel_archs, sizeof out->kernel_archs, "%s", tpg_kernels_archs);
  /* The one call that loads NCCL without a comm: its version is asked for. */
  const char *nccl_why = tpg_nccl_why();
  if (nccl_why[0]) snprintf(out->nccl_error, sizeof out->nccl_error, "%s", nccl_why);
  else out->nccl_version = tpg_nccl->version;
  const char *why = tpg_cu_why();
  if (why[0]) {
    snprintf(out->driver_error, sizeof out->driver_error, "%s", why);
    return;
  }
  out->driver_version = tpg_cu->driver_version;
  CUresult r = tpg_cu->cuDeviceGetCount(&out->device_count);
  if (r != CUDA_SUCCESS) {
    /* Not "0 GPUs" silently: the caller would conclude there are none. */
    const char *name = NULL;
    tpg_cu->cuGetErrorName(r, &name);
    out->device_count = 0;
    snprintf(out->driver_error, sizeof out->driver_error, "cuDeviceGetCount failed: %s", name ? name : "CUDA error");
  }
}

tpg_status tpg_runtime_get_info(tpg_runtime_info *out, size_t size) {
  tpg_err_clear();
  tpg_runtime_info info;
  runtime_info(&info);
  return tpg_out_copy(out, size, &info, sizeof info, RUNTIME_INFO_FIRST, __func__, "tpg_runtime_info");
}

/* Does the embedded code run on sm_arch? SASS for the same major and a minor
 * not above it, or PTX for an arch not above it. "sm_90a" runs on 9.0 only. */
static int archs_cover(const char *archs, int sm_arch) {
  const char *p = archs;
  while (*p) {
    int v = 0, ptx = 0, consumed = 0;
    char suffix = 0;
    if (sscanf(p, "sm_%d%n", &v, &consumed) == 1) ptx = 0;
    else if (sscanf(p, "compute_%d%n", &v, &consumed) == 1) ptx = 1;
    else break;
    p += consumed;
    if (*p == 'a' || *p == 'f') { suffix = *p; p++; }
    if (ptx && !suffix && v <= sm_arch) return 1;
    if (!ptx && suffix && v == sm_arch) return 1;
    if (!ptx && !suffix && v / 10 == sm_arch / 10 && v <= sm_arch) return 1;
    while (*p && *p != ',') p++;
    if (*p == ',') p++;
  }
  return 0;
}

static tpg_status device_get_info(int device, tpg_device_info *out_, size_t size) {
  TPG_CHECK_ARG(out_ != NULL, "out is NULL: expected a tpg_device_info to fill");
  TPG_CHECK_ARG(size >= DEVICE_INFO_FIRST, "size is %zu: expected sizeof(tpg_device_info) (at least %zu)", size,
                DEVICE_INFO_FIRST);
  memset(out_, 0, size);
  tpg_device_info info, *out = &info;
  memset(out, 0, sizeof *out);
  tpg_dev d;
  tpg_status st = tpg_dev_open(device, &d);
  if (st != TPG_SUCCESS) return st;
  char name[96] = {0};
  int l2 = 0;
  size_t mem = 0;
  CUresult r = tpg_cu->cuDeviceGetName(name, (int)sizeof name - 1, d.dev);
  if (r == CUDA_SUCCESS) r = tpg_cu->cuDeviceGetAttribute(&l2, CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, d.dev);
  if (r == CUDA_SUCCESS) r = tpg_cu->cuDeviceTotalMem(&mem, d.dev);
  tpg_dev_close(&d);
  if (r != CUDA_SUCCESS) return tpg_cu_fail(r, __func__, "cuDeviceGetName/GetAttribute/TotalMem");
  memcpy(out->name, name, sizeof out->name);
  out->name[sizeof out->name - 1] = '\0';
  out->sm_arch = d.sm_arch;
  out->sm_count = d.sm_count;
  out->total_memory = mem;
  out->l2_bytes = (size_t)l2;
  out->kernels_supported = archs_cover(tpg_kernels_archs, d.sm_arch);
  return tpg_out_copy(out_, size, out, sizeof *out, DEVICE_INFO_FIRST, __func__, "tpg_device_info");
}

tpg_status tpg_device_get_info(int device, tpg_device_info *out_, size_t size) {
  tpg_err_clear();
  return tpg_err_public(device_get_info(device, out_, size), __func__);
}
