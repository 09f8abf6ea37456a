/* nccl_loader.c - loads NCCL at the first communicator and resolves tpgraph's
 * entry points (why at run time: lib/nccl_loader.h).
 *
 * One process-wide table, filled once under pthread_once, like the driver's.
 * The search is the dynamic loader's for "libnccl.so.2" (LD_LIBRARY_PATH,
 * ldconfig), so a process that already holds NCCL (PyTorch) shares that one
 * copy, as it did when tpgraph was linked against NCCL.
 */
#define _GNU_SOURCE
#include "lib/nccl_loader.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

static tpg_nccl_table g_table;
const tpg_nccl_table *tpg_nccl = NULL;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static char g_why[320];

static void load_once(void) {
  const char *path = getenv("TPG_LIBNCCL");
  void *h = NULL;
  if (path && path[0]) {
    h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  } else {
    path = "libnccl.so.2";
    h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) h = dlopen("libnccl.so", RTLD_NOW | RTLD_LOCAL);
  }
  if (!h) {
    const char *e = dlerror();
    snprintf(g_why, sizeof g_why,
             "cannot load NCCL (%s): %s; install NCCL 2.19 or newer where the dynamic loader finds it "
             "(LD_LIBRARY_PATH) or set TPG_LIBNCCL to its path",
             path, e ? e : "not found");
    return;
  }
#define TPG_NCCL_RESOLVE(name)                                                                        \
  if (!(g_table.name = (__typeof__(g_table.name))dlsym(h, #name))) {                                  \
    snprintf(g_why, sizeof g_why, "%s has no %s: NCCL 2.19 or newer is needed", path, #name);        \
    dlclose(h);                                                                                       \
    return;                                                                                           \
  }
  TPG_NCCL_FUNCS(TPG_NCCL_RESOLVE)
#undef TPG_NCCL_RESOLVE
#define TPG_NCCL_RESOLVE_OPTIONAL(name) g_table.name = (__typeof__(g_table.name))dlsym(h, #name);
  TPG_NCCL_FUNCS_OPTIONAL(TPG_NCCL_RESOLVE_OPTIONAL)
#undef TPG_NCCL_RESOLVE_OPTIONAL
  int v = 0;
  if (g_table.ncclGetVersion(&v) != ncclSuccess) v = 0;
  g_table.version = v;
  tpg_nccl = &g_table;
  /* The handle stays open for the life of the process, like the driver's. */
}

tpg_status tpg_nccl_load(const char *fn) {
  pthread_once(&g_once, load_once);
  if (!tpg_nccl) return tpg_err(TPG_ERROR_NCCL, fn, "%s", g_why);
  return TPG_SUCCESS;
}

const char *tpg_nccl_why(void) {
  pthread_once(&g_once, load_once);
  return tpg_nccl ? "" : g_why;
}
