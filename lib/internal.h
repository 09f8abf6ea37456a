/* internal.h - what every tpgraph source file shares: error reporting and
 * argument checks.
 *
 * Errors: a failing function records one message in a per-thread buffer
 * (tpg_last_error) and returns a status; callers pass the status up unchanged
 * so the innermost, most specific message survives. Cleanup is a `fail:`
 * label per function (NCCL's style) so every early exit frees what it took.
 */
#ifndef TPG_INTERNAL_H
#define TPG_INTERNAL_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <string.h>

#include "lib/tpgraph.h"

#if defined(__GNUC__)
#define TPG_PRINTF(a, b) __attribute__((format(printf, a, b)))
#define TPG_HIDDEN __attribute__((visibility("hidden")))
#else
#define TPG_PRINTF(a, b)
#define TPG_HIDDEN
#endif

/* Records "fn: message" for this thread and returns st. */
TPG_HIDDEN tpg_status tpg_err(tpg_status st, const char *fn, const char *fmt, ...) TPG_PRINTF(3, 4);
/* Replaces the function name that prefixes this thread's message. */
TPG_HIDDEN void tpg_err_rename(const char *fn);
/* Clears this thread's message (every public entry point calls it first). */
TPG_HIDDEN void tpg_err_clear(void);
/* How a public entry point returns what its body returned: a failure's
 * message is put under the public name fn, whichever inner function
 * recorded it ("tpg_device_get_info: ...", never "tpg_dev_open: ..."). */
TPG_HIDDEN tpg_status tpg_err_public(tpg_status st, const char *fn);

#define TPG_FAIL(st, ...) tpg_err((st), __func__, __VA_ARGS__)
#define TPG_ARG_FAIL(...) tpg_err(TPG_ERROR_INVALID_ARGUMENT, __func__, __VA_ARGS__)

/* Argument check naming the argument: TPG_CHECK_ARG(plan != NULL, "plan is NULL"). */
#define TPG_CHECK_ARG(cond, ...)                                        \
  do {                                                                  \
    if (!(cond)) return tpg_err(TPG_ERROR_INVALID_ARGUMENT, __func__, __VA_ARGS__); \
  } while (0)

/* Pass a failing status up (its message is already recorded). */
#define TPG_TRY(expr)                                                   \
  do {                                                                  \
    tpg_status tpg_st_ = (expr);                                        \
    if (tpg_st_ != TPG_SUCCESS) return tpg_st_;                         \
  } while (0)

/* Same, jumping to the function's cleanup label with `st` set. */
#define TPG_TRYGOTO(expr, st, label)                                    \
  do {                                                                  \
    (st) = (expr);                                                      \
    if ((st) != TPG_SUCCESS) goto label;                                \
  } while (0)

/* Handle magics: catch use of a destroyed or foreign handle. */
#define TPG_MAGIC_PLAN  0x504c414eu /* PLAN */
#define TPG_MAGIC_GRAPH 0x47525048u /* GRPH */
#define TPG_MAGIC_COMM  0x434f4d4du /* COMM */
#define TPG_MAGIC_DEAD  0xdeadbeefu

/* Hands a filled OUT struct to a caller who said how large theirs is
 * (sizeof as their header knows it): OUT structs only grow at the end, so an
 * older, smaller one gets the prefix it knows and a newer, larger one gets
 * ours with its unknown tail zeroed. `first` is the struct's size in the
 * version that introduced it: anything smaller is not a struct of ours. */
static inline tpg_status tpg_out_copy(void *dst, size_t dst_size, const void *src, size_t src_size, size_t first,
                                      const char *fn, const char *what) {
  if (!dst) return tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn, "out is NULL: expected a %s to fill", what);
  if (dst_size < first)
    return tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn, "size is %zu: expected sizeof(%s) (at least %zu)", dst_size, what,
                   first);
  memcpy(dst, src, dst_size < src_size ? dst_size : src_size);
  if (dst_size > src_size) memset((char *)dst + src_size, 0, dst_size - src_size);
  return TPG_SUCCESS;
}

/* Monotonic clock in microseconds. */
TPG_HIDDEN double tpg_now_us(void);

/* Overflow-checked size arithmetic: 0 on overflow. */
TPG_HIDDEN int tpg_mul_ok(size_t a, size_t b, size_t *out);

#endif
