/* status.c - status names and the per-thread error message.
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
