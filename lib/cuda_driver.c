/* cuda_driver.c - loads libcuda at run time and resolves tpgraph's entry points.
 *
 * One process-wide table, filled once under pthread_once. The outcome,
 * success or the reason for failure, is kept: a machine without a driver
 * answers every call with the same clear message, cheaply.
 */
#define _GNU_SOURCE
#include "lib/cuda_driver.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Oldest driver accepted: 12.3 brought graph edge data (programmatic edges)
 * and every entry point above. */
#define TPG_MIN_DRIVER 12030

static tpg_cu_table g_table;
const tpg_cu_table *tpg_cu = NULL;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static tpg_status g_status = TPG_ERROR_NO_DRIVER;
static char g_why[256];

static void load_once(void) {
  const char *path = getenv("TPG_LIBCUDA");
  void *h = NULL;
  if (path && path[0]) {
    h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  } else {
    path = "libcuda.so.1";
    h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) h = dlopen("libcuda.so", RTLD_NOW | RTLD_LOCAL);
  }
  if (!h) {
    snprintf(g_why, sizeof g_why,
             "cannot load the CUDA driver library %s (not found or not loadable); install the NVIDIA driver or set "
             "TPG_LIBCUDA to its path",
             path);
    return;
  }
  PFN_cuGetProcAddress_v12000 gpa = (PFN_cuGetProcAddress_v12000)dlsym(h, "cuGetProcAddress_v2");
  PFN_cuInit_v2000 init = (PFN_cuInit_v2000)dlsym(h, "cuInit");
  PFN_cuDriverGetVersion_v2020 ver = (PFN_cuDriverGetVersion_v2020)dlsym(h, "cuDriverGetVersion");
  if (!gpa || !init || !ver) {
    snprintf(g_why, sizeof g_why, "%s has no cuGetProcAddress_v2: the driver is older than CUDA 12.0", path);
    dlclose(h);
    return;
  }
  CUresult r = init(0);
  if (r != CUDA_SUCCESS) {
    if (r == CUDA_ERROR_STUB_LIBRARY)
      snprintf(g_why, sizeof g_why,
               "%s is the toolkit's build-time stub, not a driver (cuInit: CUDA_ERROR_STUB_LIBRARY); "
               "run on a machine with the NVIDIA driver", path);
    else if (r == CUDA_ERROR_NO_DEVICE)
      snprintf(g_why, sizeof g_why, "cuInit: CUDA_ERROR_NO_DEVICE: the driver sees no GPU");
    else
      snprintf(g_why, sizeof g_why, "cuInit failed with CUresult %d", (int)r);
    g_status = (r == CUDA_ERROR_NO_DEVICE) ? TPG_ERROR_NO_DEVICE : TPG_ERROR_NO_DRIVER;
    dlclose(h);
    return;
  }
  int v = 0;
  if (ver(&v) != CUDA_SUCCESS || v < TPG_MIN_DRIVER) {
    snprintf(g_why, sizeof g_why, "driver supports CUDA %d.%d; tpgraph needs %d.%d or newer",
             v / 1000, (v % 1000) / 10, TPG_MIN_DRIVER / 1000, (TPG_MIN_DRIVER % 1000) / 10);
    dlclose(h);
    return;
  }
  CUdriverProcAddressQueryResult q;
#define TPG_CU_RESOLVE(name, abi)                                                          \
  if (gpa(#name, (void **)&g_table.name, abi, CU_GET_PROC_ADDRESS_DEFAULT, &q) != CUDA_SUCCESS || \
      q != CU_GET_PROC_ADDRESS_SUCCESS || !g_table.name) {                                 \
    snprintf(g_why, sizeof g_why, "driver lacks %s (ABI %d)", #name, abi);                 \
    dlclose(h);                                                                            \
    return;                                                                                \
  }
  TPG_CU_FUNCS(TPG_CU_RESOLVE)
#undef TPG_CU_RESOLVE
#define TPG_CU_RESOLVE_OPTIONAL(name, abi)                                                  \
  if (gpa(#name, (void **)&g_table.name, abi, CU_GET_PROC_ADDRESS_DEFAULT, &q) != CUDA_SUCCESS || \
      q != CU_GET_PROC_ADDRESS_SUCCESS)                                                     \
    g_table.name = NULL;
  TPG_CU_FUNCS_OPTIONAL(TPG_CU_RESOLVE_OPTIONAL)
#undef TPG_CU_RESOLVE_OPTIONAL
  g_table.driver_version = v;
  tpg_cu = &g_table;
  g_status = TPG_SUCCESS;
  /* The handle stays open for the life of the process, by design. */
}

tpg_status tpg_cu_load(void) {
  pthread_once(&g_once, load_once);
  if (g_status != TPG_SUCCESS) return tpg_err(g_status, "tpg_cu_load", "%s", g_why);
  return TPG_SUCCESS;
}

/* For tpg_runtime_get_info: the reason without recording an error. */
TPG_HIDDEN const char *tpg_cu_why(void);
const char *tpg_cu_why(void) {
  pthread_once(&g_once, load_once);
  return g_status == TPG_SUCCESS ? "" : g_why;
}

tpg_status tpg_cu_fail(CUresult r, const char *fn, const char *what) {
  const char *name = NULL, *text = NULL;
  if (tpg_cu) {
    tpg_cu->cuGetErrorName(r, &name);
    tpg_cu->cuGetErrorString(r, &text);
  }
  tpg_status st = TPG_ERROR_CUDA;
  if (r == CUDA_ERROR_OUT_OF_MEMORY) st = TPG_ERROR_OUT_OF_MEMORY;
  /* Strip the argument list: "cuMemAlloc_v2(&p, n)" -> "cuMemAlloc_v2". */
  char call[96];
  size_t i = 0;
  for (; what[i] && what[i] != '(' && i + 1 < sizeof call; i++) call[i] = what[i];
  call[i] = '\0';
  return tpg_err(st, fn, "%s failed: %s (%s)", call, name ? name : "CUDA error", text ? text : "?");
}
