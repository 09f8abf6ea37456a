/* cublaslt_loader.c - loads cuBLASLt for the cuBLASLt GEMM family and
 * resolves its entry points (why at run time: cublaslt_loader.h).
 *
 * One process-wide table, filled once under pthread_once, like NCCL's
 * (lib/nccl_loader.c). A copy the process already holds (PyTorch's, of
 * either major) is taken first, so it is shared rather than loaded twice;
 * else the dynamic loader's search, major 13 first (this toolkit's), then
 * 12: the calls used here have the same signatures in both.
 */
#define _GNU_SOURCE
#include "lib/gemm/cublaslt_loader.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

static tpg_lt_table g_table;
static const tpg_lt_table *g_loaded;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static char g_why[400];

static void *open_lib(const char **path) {
  static const char *const names[] = {"libcublasLt.so.13", "libcublasLt.so.12"};
  const char *env = getenv("TPG_LIBCUBLASLT");
  void *h = NULL;
  if (env && env[0]) {
    *path = env;
    return dlopen(env, RTLD_NOW | RTLD_LOCAL);
  }
  for (size_t i = 0; i < sizeof names / sizeof names[0] && !h; ++i) { /* already loaded */
    *path = names[i];
    h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
  }
  for (size_t i = 0; i < sizeof names / sizeof names[0] && !h; ++i) {
    *path = names[i];
    h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
  }
  if (!h) *path = "libcublasLt.so.13 or .12";
  return h;
}

static void load_once(void) {
  const char *path = NULL;
  void *h = open_lib(&path);
  if (!h) {
    const char *e = dlerror();
    snprintf(g_why, sizeof g_why,
             "cannot load cuBLASLt (%s): %s; the cuBLASLt GEMM family is left out (install cuBLAS 12 or 13 where the "
             "dynamic loader finds it, e.g. LD_LIBRARY_PATH, or set TPG_LIBCUBLASLT to its path)",
             path, e ? e : "not found");
    return;
  }
#define TPG_LT_RESOLVE(name)                                                                            \
  if (!(g_table.name = (__typeof__(g_table.name))dlsym(h, #name))) {                                    \
    snprintf(g_why, sizeof g_why, "%s has no %s: the cuBLASLt GEMM family is left out (cuBLAS 12 or 13 is needed)", \
             path, #name);                                                                              \
    dlclose(h);                                                                                         \
    return;                                                                                             \
  }
  TPG_LT_FUNCS(TPG_LT_RESOLVE)
#undef TPG_LT_RESOLVE
#define TPG_LT_RESOLVE_OPTIONAL(name) g_table.name = (__typeof__(g_table.name))dlsym(h, #name);
  TPG_LT_FUNCS_OPTIONAL(TPG_LT_RESOLVE_OPTIONAL)
#undef TPG_LT_RESOLVE_OPTIONAL
  g_table.version = g_table.cublasLtGetVersion();
  g_loaded = &g_table;
  /* The handle stays open for the life of the process, like the driver's. */
}

const tpg_lt_table *tpg_lt_load(void) {
  pthread_once(&g_once, load_once);
  return g_loaded;
}

const char *tpg_lt_why(void) {
  pthread_once(&g_once, load_once);
  return g_loaded ? "" : g_why;
}

const char *tpg_lt_status_string(cublasStatus_t s) {
  const char *t = g_loaded && g_loaded->cublasLtGetStatusString ? g_loaded->cublasLtGetStatusString(s) : NULL;
  return t ? t : "a cuBLAS status";
}
