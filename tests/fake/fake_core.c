/* fake_core.c - the stand-in driver's bookkeeping: the lock, fault injection,
 * the violation log, live-object sets, the memory registry, contexts and the
 * kernel table, and the control API of tpgfake.h.
 *
 * Memory is host memory: an allocation is a malloc'ed block whose address is
 * the "device pointer", registered with its size so that every access the
 * fake performs or is asked to perform can be checked against it. Handles are
 * pointers into the fake's own structures, kept in per-kind live sets that are
 * consulted before any handle is dereferenced: a stale or foreign handle is a
 * violation and CUDA_ERROR_INVALID_HANDLE, never a crash in the fake.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/fake/fake_internal.h"
#include "tests/fake/tpgfake.h"

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
void fk_lock(void) { pthread_mutex_lock(&g_mu); }
void fk_unlock(void) { pthread_mutex_unlock(&g_mu); }

/* ---- fault injection and logs (under the lock) ---- */

static long g_calls, g_polls, g_fail_at, g_name_n, g_name_seen, g_violations;
long fk_kernel_runs, fk_tma_gemm_runs, fk_cutlass_gemm_runs;
static char g_fail_name[64], g_failed[64];
static char g_vtext[2048];
static int g_env_read, g_verbose;

static void read_env(void) {
  if (g_env_read) return;
  g_env_read = 1;
  const char *v = getenv("TPG_FAKE_VERBOSE");
  g_verbose = v && v[0] == '1';
  const char *f = getenv("TPG_FAKE_FAIL");
  if (f && f[0] == '#') g_fail_at = atol(f + 1);
  else if (f && strchr(f, ':')) {
    size_t n = (size_t)(strchr(f, ':') - f);
    if (n < sizeof g_fail_name) {
      memcpy(g_fail_name, f, n);
      g_fail_name[n] = '\0';
      g_name_n = atol(f + n + 1);
    }
  }
}

int fk_inject(const char *name) {
  read_env();
  g_calls++;
  if (g_verbose) fprintf(stderr, "tpgfake: #%ld %s\n", g_calls, name);
  int fire = 0;
  if (g_fail_at > 0 && g_calls == g_fail_at) fire = 1;
  if (g_fail_name[0] && strcmp(name, g_fail_name) == 0 && (++g_name_seen == g_name_n || g_name_n <= 0)) fire = 1;
  if (fire) {
    snprintf(g_failed, sizeof g_failed, "%s", name);
    if (g_verbose) fprintf(stderr, "tpgfake: failing call #%ld %s\n", g_calls, name);
  }
  return fire;
}

int fk_inject_poll(const char *name) {
  read_env();
  g_polls++;
  if (g_fail_name[0] && strcmp(name, g_fail_name) == 0 && (++g_name_seen == g_name_n || g_name_n <= 0)) {
    snprintf(g_failed, sizeof g_failed, "%s", name);
    return 1;
  }
  return 0;
}

void fk_trace(const char *fmt, ...) {
  read_env();
  if (!g_verbose) return;
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "tpgfake: ");
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, "\n");
  va_end(ap);
}

void fk_violation(const char *fmt, ...) {
  char line[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  g_violations++;
  fprintf(stderr, "tpgfake: VIOLATION: %s\n", line);
  size_t used = strlen(g_vtext);
  if (used + strlen(line) + 2 < sizeof g_vtext) snprintf(g_vtext + used, sizeof g_vtext - used, "%s\n", line);
}

/* ---- live sets ---- */

typedef struct {
  const void **v;
  long n, cap;
} ptrset;
static ptrset g_live[FK_NKINDS];

void fk_live_add(int kind, const void *p) {
  ptrset *s = &g_live[kind];
  if (s->n == s->cap) {
    long cap = s->cap ? 2 * s->cap : 64;
    const void **v = realloc(s->v, (size_t)cap * sizeof *v);
    if (!v) abort(); /* a test harness out of memory: nothing sensible to do */
    s->v = v;
    s->cap = cap;
  }
  s->v[s->n++] = p;
}

int fk_live_has(int kind, const void *p) {
  const ptrset *s = &g_live[kind];
  if (!p) return 0;
  for (long i = s->n - 1; i >= 0; i--)
    if (s->v[i] == p) return 1;
  return 0;
}

int fk_live_del(int kind, const void *p) {
  ptrset *s = &g_live[kind];
  for (long i = s->n - 1; i >= 0; i--)
    if (s->v[i] == p) {
      s->v[i] = s->v[--s->n];
      return 1;
    }
  return 0;
}

long fk_live_count(int kind) { return g_live[kind].n; }

int fk_live_each(int kind, int (*fn)(const void *obj, const void *arg), const void *arg) {
  const ptrset *s = &g_live[kind];
  for (long i = 0; i < s->n; i++)
    if (fn(s->v[i], arg)) return 1;
  return 0;
}

/* ---- memory ---- */

static fk_alloc *g_mem;
static long g_nmem, g_capmem;

void *fk_mem_alloc(size_t bytes, int kind, int device) {
  if (bytes == 0) return NULL;
  void *p = NULL;
  /* 256-byte aligned, as cuMemAlloc promises. */
  if (posix_memalign(&p, 256, bytes) != 0) return NULL;
  memset(p, 0xA5, bytes); /* neither zero nor a plausible float: reads of never-written memory stand out */
  if (g_nmem == g_capmem) {
    long cap = g_capmem ? 2 * g_capmem : 64;
    fk_alloc *m = realloc(g_mem, (size_t)cap * sizeof *m);
    if (!m) {
      free(p);
      return NULL;
    }
    g_mem = m;
    g_capmem = cap;
  }
  g_mem[g_nmem++] = (fk_alloc){(uintptr_t)p, bytes, kind, device};
  return p;
}

int fk_mem_free(void *p, int kind) {
  for (long i = 0; i < g_nmem; i++)
    if (g_mem[i].base == (uintptr_t)p && g_mem[i].kind == kind) {
      free(p);
      g_mem[i] = g_mem[--g_nmem];
      return 0;
    }
  return -1;
}

size_t fk_mem_device_bytes(int device) {
  size_t n = 0;
  for (long i = 0; i < g_nmem; i++)
    if (g_mem[i].kind != FK_MEM_HOST && g_mem[i].device == device) n += g_mem[i].size;
  return n;
}

const fk_alloc *fk_mem_find(uintptr_t p) {
  for (long i = 0; i < g_nmem; i++)
    if (p >= g_mem[i].base && p < g_mem[i].base + g_mem[i].size) return &g_mem[i];
  return NULL;
}

int fk_check_range(uintptr_t p, size_t bytes, const char *what) {
  const fk_alloc *a = fk_mem_find(p);
  if (!a) {
    fk_violation("%s: address 0x%llx (%zu bytes) is in no live allocation", what, (unsigned long long)p, bytes);
    return 0;
  }
  if (bytes > a->base + a->size - p) {
    fk_violation("%s: %zu bytes at 0x%llx run %zu bytes past the end of a %zu-byte allocation", what, bytes,
                 (unsigned long long)p, (size_t)(bytes - (a->base + a->size - p)), a->size);
    return 0;
  }
  return 1;
}

/* ---- contexts ---- */

fk_ctx fk_ctxs[FK_MAX_DEV];
static __thread fk_ctx *tls_stack[32];
static __thread int tls_depth;

int fk_ndevices(void) {
  const char *e = getenv("TPG_FAKE_DEVICES");
  int n = e && e[0] ? atoi(e) : 2;
  return n < 0 ? 0 : n > FK_MAX_DEV ? FK_MAX_DEV : n;
}

fk_ctx *fk_current(void) { return tls_depth > 0 ? tls_stack[tls_depth - 1] : NULL; }

void fk_push(fk_ctx *c) {
  if (tls_depth == (int)(sizeof tls_stack / sizeof tls_stack[0])) {
    fk_violation("cuCtxPushCurrent: context stack deeper than %d (a missing pop?)", tls_depth);
    return;
  }
  tls_stack[tls_depth++] = c;
}

fk_ctx *fk_pop(void) { return tls_depth > 0 ? tls_stack[--tls_depth] : NULL; }

/* ---- kernels: what tpgraph's entry points take (kernels/tpg_kargs.h) ---- */

#include "kernels/tpg_cutlass_args.h"
#include "kernels/tpg_kargs.h"
#include "kernels/tpg_tma_args.h"

static const struct {
  const char *prefix;
  int type;
  size_t argsz;
} g_kinds[] = {
    {"tpg_gemm_sm90tma_", FK_K_GEMM_TMA, sizeof(tpg_gemm_tma_args)},
    {"tpg_cutlass_", FK_K_GEMM_CUTLASS, sizeof(tpg_gemm_cutlass_args)},
    {"tpg_gemm_", FK_K_GEMM, sizeof(tpg_gemm_args)},
    {"tpg_gemv_", FK_K_GEMM, sizeof(tpg_gemm_args)},
    {"tpg_axpby", FK_K_AXPBY, sizeof(tpg_axpby_args)},
    {"tpg_concat_cols", FK_K_CONCAT, sizeof(tpg_concat_args)},
    {"tpg_ar_epilogue", FK_K_AR_EPI, sizeof(tpg_ar_epilogue_args)},
    {"tpg_allreduce_", FK_K_ALLREDUCE, sizeof(tpg_allreduce_args)},
    {"tpg_lt_swiglu", FK_K_SWIGLU, sizeof(tpg_swiglu_args)},
};
_Static_assert(sizeof(tpg_gemm_tma_args) <= FK_ARGS_MAX && sizeof(tpg_allreduce_args) <= FK_ARGS_MAX &&
                   sizeof(tpg_gemm_cutlass_args) <= FK_ARGS_MAX,
               "kernel argument blocks fit a node");

#define FK_MAX_KERNELS 128
static fk_kernel g_kernels[FK_MAX_KERNELS];
static char g_knames[FK_MAX_KERNELS][64];
static int g_nkernels;

const fk_kernel *fk_kernel_find(const char *name) {
  for (int i = 0; i < fk_n_c_kernels; i++)
    if (strcmp(fk_c_kernels[i].name, name) == 0) return &fk_c_kernels[i];
  for (int i = 0; i < g_nkernels; i++)
    if (strcmp(g_kernels[i].name, name) == 0) return &g_kernels[i];
  for (size_t k = 0; k < sizeof g_kinds / sizeof g_kinds[0]; k++)
    if (strncmp(name, g_kinds[k].prefix, strlen(g_kinds[k].prefix)) == 0) {
      if (g_nkernels == FK_MAX_KERNELS || strlen(name) >= sizeof g_knames[0]) return NULL;
      snprintf(g_knames[g_nkernels], sizeof g_knames[0], "%s", name);
      g_kernels[g_nkernels] = (fk_kernel){.name = g_knames[g_nkernels], .type = g_kinds[k].type, .argsz = g_kinds[k].argsz};
      return &g_kernels[g_nkernels++];
    }
  return NULL;
}

int fk_kernel_valid(const void *f) {
  for (int i = 0; i < fk_n_c_kernels; i++)
    if (f == (const void *)&fk_c_kernels[i]) return 1;
  for (int i = 0; i < g_nkernels; i++)
    if (f == (const void *)&g_kernels[i]) return 1;
  return 0;
}

/* ---- control API ---- */

int tpgfake_setup(int argc, char **argv) {
  const char *cur = getenv("TPG_LIBCUDA");
  if (!cur || !cur[0]) {
    if (argc < 2 || !argv[1][0]) {
      fprintf(stderr, "tpgfake: pass the path of libcuda_fake.so as the first argument or in TPG_LIBCUDA\n");
      return -1;
    }
    setenv("TPG_LIBCUDA", argv[1], 1);
    cur = argv[1];
  }
  /* The same shim serves NCCL and cuBLASLt (shim.c), unless a test chose another. */
  const char *nccl = getenv("TPG_LIBNCCL");
  if (!nccl || !nccl[0]) setenv("TPG_LIBNCCL", cur, 1);
  const char *lt = getenv("TPG_LIBCUBLASLT");
  if (!lt || !lt[0]) setenv("TPG_LIBCUBLASLT", cur, 1);
  return 0;
}

void tpgfake_reset(void) {
  fk_lock();
  read_env();
  g_calls = 0;
  g_polls = 0;
  g_fail_at = 0;
  g_fail_name[0] = '\0';
  g_name_n = g_name_seen = 0;
  g_failed[0] = '\0';
  g_violations = 0;
  g_vtext[0] = '\0';
  fk_kernel_runs = fk_tma_gemm_runs = fk_cutlass_gemm_runs = 0;
  fk_ws_reset();
  fk_unlock();
}

void tpgfake_fail_at(long k) {
  fk_lock();
  g_fail_at = k;
  fk_unlock();
}

void tpgfake_fail_call(const char *name, long n) {
  fk_lock();
  snprintf(g_fail_name, sizeof g_fail_name, "%s", name ? name : "");
  g_name_n = n;
  g_name_seen = 0;
  fk_unlock();
}

long tpgfake_calls(void) {
  fk_lock();
  long n = g_calls;
  fk_unlock();
  return n;
}

const char *tpgfake_failed(void) {
  fk_lock();
  const char *r = g_failed[0] ? g_failed : NULL;
  fk_unlock();
  return r;
}

long tpgfake_violations(void) {
  fk_lock();
  long n = g_violations;
  fk_unlock();
  return n;
}

const char *tpgfake_violation_text(void) { return g_vtext; }

long tpgfake_live(char *why, size_t cap) {
  fk_lock();
  long dev = 0, host = 0, nccl = 0;
  for (long i = 0; i < g_nmem; i++) {
    if (g_mem[i].kind == FK_MEM_DEVICE) dev++;
    else if (g_mem[i].kind == FK_MEM_HOST) host++;
    else nccl++;
  }
  long retains = 0;
  for (int d = 0; d < FK_MAX_DEV; d++) retains += fk_ctxs[d].retains;
  long k[FK_NKINDS];
  for (int i = 0; i < FK_NKINDS; i++) k[i] = fk_live_count(i);
  long total = dev + host + nccl + retains;
  for (int i = 0; i < FK_NKINDS; i++) total += i == FK_RETAIN ? 0 : k[i];
  if (why && cap)
    snprintf(why, cap,
             "%ld device allocations, %ld pinned host allocations, %ld ncclMemAlloc, %ld streams, %ld events, "
             "%ld graphs, %ld execs, %ld context retains, %ld IPC mappings, %ld NCCL comms, %ld NCCL windows, "
             "%ld conditional handles, %ld cuBLASLt objects",
             dev, host, nccl, k[FK_STREAM], k[FK_EVENT], k[FK_GRAPH], k[FK_EXEC], retains, k[FK_IPC], k[FK_COMM],
             k[FK_WINDOW], k[FK_COND], k[FK_LT]);
  fk_unlock();
  return total;
}

long tpgfake_pending(void) {
  fk_lock();
  long n = fk_pending_ops();
  fk_unlock();
  return n;
}

long tpgfake_kernels(void) {
  fk_lock();
  long n = fk_kernel_runs;
  fk_unlock();
  return n;
}

long tpgfake_tma_gemm_kernels(void) {
  fk_lock();
  long n = fk_tma_gemm_runs;
  fk_unlock();
  return n;
}

long tpgfake_cutlass_gemm_kernels(void) {
  fk_lock();
  long n = fk_cutlass_gemm_runs;
  fk_unlock();
  return n;
}

void *tpgfake_dev_alloc(int device, size_t bytes) {
  fk_lock();
  void *p = fk_mem_alloc(bytes, FK_MEM_DEVICE, device);
  fk_unlock();
  return p;
}

size_t tpgfake_device_bytes(int device) {
  fk_lock();
  const size_t n = fk_mem_device_bytes(device);
  fk_unlock();
  return n;
}

void *tpgfake_host_alloc(size_t bytes) {
  fk_lock();
  void *p = fk_mem_alloc(bytes, FK_MEM_HOST, 0);
  fk_unlock();
  return p;
}

void tpgfake_free(void *p) {
  if (!p) return;
  fk_lock();
  if (fk_mem_free(p, FK_MEM_DEVICE) != 0 && fk_mem_free(p, FK_MEM_HOST) != 0)
    fk_violation("tpgfake_free(%p): not a live allocation", p);
  fk_unlock();
}
