/* status.c - status names, the per-thread error message, and the set of live
 * handles (lib/handle.h).
 *
 * Per thread, not global (NCCL keeps one global buffer, which threads
 * overwrite for each other): an engine drives one GPU per thread.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "lib/internal.h"

static _Thread_local char tls_msg[1024];

int tpg_version(void) { return TPG_VERSION_CODE; }

const char *tpg_status_string(tpg_status s) {
  switch (s) {
    case TPG_SUCCESS: return "TPG_SUCCESS: no error";
    case TPG_ERROR_INVALID_ARGUMENT: return "TPG_ERROR_INVALID_ARGUMENT: an argument is invalid";
    case TPG_ERROR_INVALID_STATE: return "TPG_ERROR_INVALID_STATE: the call is not allowed in the object's current state";
    case TPG_ERROR_OUT_OF_MEMORY: return "TPG_ERROR_OUT_OF_MEMORY: an allocation failed";
    case TPG_ERROR_NO_DRIVER: return "TPG_ERROR_NO_DRIVER: no usable CUDA driver (libcuda)";
    case TPG_ERROR_NO_DEVICE: return "TPG_ERROR_NO_DEVICE: no such GPU, or no kernels for it";
    case TPG_ERROR_CUDA: return "TPG_ERROR_CUDA: a CUDA driver call failed";
    case TPG_ERROR_NCCL: return "TPG_ERROR_NCCL: an NCCL call failed";
    case TPG_ERROR_UNSUPPORTED: return "TPG_ERROR_UNSUPPORTED: not supported in this configuration";
    case TPG_ERROR_TIMEOUT: return "TPG_ERROR_TIMEOUT: a deadline passed";
    case TPG_ERROR_PEER: return "TPG_ERROR_PEER: a peer rank failed";
    case TPG_ERROR_INTERNAL: return "TPG_ERROR_INTERNAL: internal error in tpgraph";
    case TPG_STATUS_COUNT: break;
  }
  return "TPG_STATUS_UNKNOWN: not a tpg_status value";
}

const char *tpg_last_error(void) { return tls_msg; }

void tpg_err_clear(void) { tls_msg[0] = '\0'; }

void tpg_err_rename(const char *fn) {
  const char *rest = strstr(tls_msg, ": ");
  char tmp[sizeof tls_msg];
  size_t n = strlen(fn);
  if (n + 2 >= sizeof tmp) return;
  memcpy(tmp, fn, n);
  memcpy(tmp + n, ": ", 2);
  const char *r = rest ? rest + 2 : tls_msg;
  size_t m = strlen(r);
  if (m > sizeof tmp - n - 3) m = sizeof tmp - n - 3;
  memcpy(tmp + n + 2, r, m);
  tmp[n + 2 + m] = '\0';
  memcpy(tls_msg, tmp, sizeof tls_msg);
}

tpg_status tpg_err_public(tpg_status st, const char *fn) {
  if (st != TPG_SUCCESS && tls_msg[0]) tpg_err_rename(fn);
  return st;
}

tpg_status tpg_err(tpg_status st, const char *fn, const char *fmt, ...) {
  int n = snprintf(tls_msg, sizeof tls_msg, "%s: ", fn);
  if (n < 0 || (size_t)n >= sizeof tls_msg) n = 0;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(tls_msg + n, sizeof tls_msg - (size_t)n, fmt, ap);
  va_end(ap);
  return st;
}

size_t tpg_dtype_size(tpg_dtype t) {
  switch (t) {
    case TPG_F32: return 4;
    case TPG_F16: return 2;
    case TPG_BF16: return 2;
    default: return 0;
  }
}

double tpg_now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec * 1e-3;
}

int tpg_mul_ok(size_t a, size_t b, size_t *out) {
  if (a != 0 && b > SIZE_MAX / a) return 0;
  *out = a * b;
  return 1;
}

/* ---- live handles (lib/handle.h) ----------------------------------------
 * Open addressing over pointer keys, doubled at half load; a removed slot
 * becomes a tombstone. One mutex: handles are created and destroyed rarely,
 * and a check is a few loads. */
#include <pthread.h>
#include <stdlib.h>

#include "lib/handle.h"

typedef struct {
  const void *key; /* NULL: empty; &g_tomb: removed */
  unsigned kind;
} handle_slot;

static pthread_mutex_t g_hmu = PTHREAD_MUTEX_INITIALIZER;
static handle_slot *g_hs;
static size_t g_hcap, g_hused; /* used counts tombstones too */
static const char g_tomb;

static size_t hash_ptr(const void *p, size_t cap) {
  uint64_t x = (uint64_t)(uintptr_t)p;
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  return (size_t)x & (cap - 1);
}

static handle_slot *find_slot(const void *h) {
  if (!g_hcap) return NULL;
  for (size_t i = hash_ptr(h, g_hcap), n = 0; n < g_hcap; i = (i + 1) & (g_hcap - 1), n++) {
    if (g_hs[i].key == h) return &g_hs[i];
    if (g_hs[i].key == NULL) return NULL;
  }
  return NULL;
}

static int grow(void) {
  size_t cap = g_hcap ? 2 * g_hcap : 64;
  handle_slot *ns = calloc(cap, sizeof *ns), *old = g_hs;
  if (!ns) return 0;
  size_t oldcap = g_hcap;
  g_hs = ns;
  g_hcap = cap;
  g_hused = 0;
  for (size_t i = 0; i < oldcap; i++)
    if (old[i].key && old[i].key != (const void *)&g_tomb) {
      size_t j = hash_ptr(old[i].key, cap);
      while (g_hs[j].key) j = (j + 1) & (cap - 1);
      g_hs[j] = old[i];
      g_hused++;
    }
  free(old);
  return 1;
}

tpg_status tpg_handle_add(const void *h, unsigned kind) {
  pthread_mutex_lock(&g_hmu);
  if ((g_hused + 1) * 2 > g_hcap && !grow()) {
    pthread_mutex_unlock(&g_hmu);
    return TPG_ERROR_OUT_OF_MEMORY;
  }
  size_t j = hash_ptr(h, g_hcap);
  while (g_hs[j].key && g_hs[j].key != (const void *)&g_tomb && g_hs[j].key != h) j = (j + 1) & (g_hcap - 1);
  if (g_hs[j].key == NULL) g_hused++;
  g_hs[j].key = h;
  g_hs[j].kind = kind;
  pthread_mutex_unlock(&g_hmu);
  return TPG_SUCCESS;
}

int tpg_handle_live(const void *h, unsigned kind) {
  if (!h) return 0;
  pthread_mutex_lock(&g_hmu);
  handle_slot *s = find_slot(h);
  int live = s && s->kind == kind;
  pthread_mutex_unlock(&g_hmu);
  return live;
}

int tpg_handle_remove(const void *h) {
  pthread_mutex_lock(&g_hmu);
  handle_slot *s = find_slot(h);
  if (s) s->key = &g_tomb;
  pthread_mutex_unlock(&g_hmu);
  return s != NULL;
}
