/* kit_args.c - checking and packing an engine kernel's arguments.
 *
 * The kernel node hands the driver one pointer per parameter (kernelParams),
 * and the driver copies as many bytes as the kernel's parameter has. A value
 * shorter than that parameter would be over-read, a longer one silently cut:
 * so the sizes are compared with the kernel's own layout before any launch,
 * and the values live in one buffer at the kernel's offsets, which keeps the
 * packed image equal to what the kernel sees (and easy to print or compare).
 */
#include "lib/kit_args.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* "node x: " or "" */
static const char *prefix(const char *label, char *buf, size_t cap) {
  if (!label) return "";
  snprintf(buf, cap, "node %s: ", label);
  return buf;
}

/* The size an argument occupies: a VIEW is a 64-bit device address. */
static size_t arg_size(const tpg_arg *a) { return a->kind == TPG_ARG_BYTES ? (size_t)a->size : 8u; }

/* Largest power of two dividing n, at most 16 (n >= 1). */
static size_t natural_align(size_t n) {
  size_t a = 1;
  while (a < 16 && n % (a * 2) == 0) a *= 2;
  return a;
}

static tpg_status check_one(const char *fn, const char *pre, const tpg_arg *a, int i) {
  if (a->kind == TPG_ARG_BYTES) {
    if (a->size == 0 || a->size > TPG_ARG_MAX_BYTES)
      return tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn, "%sargs[%d] has size %u: a by-value argument is 1..%u bytes",
                     pre, i, a->size, TPG_ARG_MAX_BYTES);
    if (!a->bytes)
      return tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn, "%sargs[%d].bytes is NULL: expected the %u-byte value", pre, i,
                     a->size);
    return TPG_SUCCESS;
  }
  if (a->kind == TPG_ARG_VIEW) {
    if (a->size != 0 && a->size != 8)
      return tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn,
                     "%sargs[%d] is a view with size %u: a view is a 64-bit device address (size 0 or 8)", pre, i,
                     a->size);
    return TPG_SUCCESS;
  }
  if (a->kind == TPG_ARG_COND) {
    if (a->size != 0 && a->size != 8)
      return tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn,
                     "%sargs[%d] is a condition handle with size %u: a cudaGraphConditionalHandle is 8 bytes (size 0 "
                     "or 8)",
                     pre, i, a->size);
    return TPG_SUCCESS;
  }
  return tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn,
                 "%sargs[%d].kind is %d: expected TPG_ARG_BYTES (0), TPG_ARG_VIEW (1) or TPG_ARG_COND (2)", pre, i,
                 (int)a->kind);
}

/* Natural-alignment offsets into off[] (may be NULL); the extent, or 0 with
 * an error when it passes TPG_KIT_PARAMS_MAX_BYTES. */
static tpg_status natural_layout(const char *fn, const char *pre, const tpg_arg *args, int nargs, size_t *off,
                                 size_t *extent) {
  size_t at = 0;
  for (int i = 0; i < nargs; i++) {
    size_t sz = arg_size(&args[i]), al = natural_align(sz);
    at = (at + al - 1) / al * al;
    if (off) off[i] = at;
    at += sz;
    if (at > TPG_KIT_PARAMS_MAX_BYTES)
      return tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn,
                     "%sargs[0..%d] take %zu bytes or more: a kernel's parameters are at most %u bytes", pre, i, at,
                     TPG_KIT_PARAMS_MAX_BYTES);
  }
  *extent = at;
  return TPG_SUCCESS;
}

tpg_status tpg_kit_args_check(const char *fn, const char *label, const tpg_arg *args, int nargs) {
  char pb[200];
  const char *pre = prefix(label, pb, sizeof pb);
  if (nargs < 0) return tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn, "%snargs is %d: expected >= 0", pre, nargs);
  if (nargs > 0 && !args)
    return tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn, "%sargs is NULL with nargs = %d", pre, nargs);
  for (int i = 0; i < nargs; i++) TPG_TRY(check_one(fn, pre, &args[i], i));
  size_t extent;
  return natural_layout(fn, pre, args, nargs, NULL, &extent);
}

void tpg_kit_args_free(tpg_kit_args *k) { free(k); }

tpg_status tpg_kit_args_layout(const char *fn, const char *label, const tpg_arg *args, int nargs,
                               const tpg_param_layout *layout, tpg_kit_args **out) {
  *out = NULL;
  TPG_TRY(tpg_kit_args_check(fn, label, args, nargs));
  char pb[200];
  const char *pre = prefix(label, pb, sizeof pb);
  int known = layout && layout->count >= 0;
  if (known && layout->count != nargs)
    return tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn, "%s%d argument%s given; the kernel takes %d parameter%s", pre,
                   nargs, nargs == 1 ? "" : "s", layout->count, layout->count == 1 ? "" : "s");
  size_t extent = 0;
  if (known) {
    for (int i = 0; i < nargs; i++) {
      size_t want = layout->size[i], off = layout->offset[i], got = arg_size(&args[i]);
      if (got != want) {
        if (args[i].kind == TPG_ARG_COND)
          return tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn,
                         "%sargs[%d] is a condition handle (8 bytes); the kernel's parameter %d is %zu bytes at "
                         "offset %zu",
                         pre, i, i, want, off);
        if (args[i].kind == TPG_ARG_VIEW)
          return tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn,
                         "%sargs[%d] is a view (an 8-byte device address); the kernel's parameter %d is %zu bytes at "
                         "offset %zu",
                         pre, i, i, want, off);
        return tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn,
                       "%sargs[%d] is %zu bytes; the kernel's parameter %d is %zu bytes at offset %zu", pre, i, got, i,
                       want, off);
      }
      /* The driver's numbers are trusted, but a buffer is never written out
       * of its bounds on their word alone. */
      if (off > TPG_KIT_PARAMS_MAX_BYTES || want > TPG_KIT_PARAMS_MAX_BYTES - off)
        return tpg_err(TPG_ERROR_INTERNAL, fn, "%sthe kernel's parameter %d is reported at offset %zu, size %zu", pre,
                       i, off, want);
      if (off + want > extent) extent = off + want;
    }
  }
  /* One block: header, params[nargs], offset[nargs], then the 16-aligned buffer. */
  size_t head = sizeof(tpg_kit_args) + (size_t)nargs * (sizeof(void *) + sizeof(size_t));
  head = (head + 15) / 16 * 16;
  size_t natural_extent = 0;
  size_t *tmp_off = NULL;
  if (!known) {
    tmp_off = malloc((size_t)(nargs ? nargs : 1) * sizeof *tmp_off);
    if (!tmp_off) return tpg_err(TPG_ERROR_OUT_OF_MEMORY, fn, "%sout of host memory", pre);
    tpg_status st = natural_layout(fn, pre, args, nargs, tmp_off, &natural_extent);
    if (st != TPG_SUCCESS) {
      free(tmp_off);
      return st;
    }
    extent = natural_extent;
  }
  /* aligned_alloc needs a multiple of the alignment; 16 covers every parameter. */
  size_t total = (head + extent + 15) / 16 * 16;
  tpg_kit_args *k = aligned_alloc(16, total);
  if (!k) {
    free(tmp_off);
    return tpg_err(TPG_ERROR_OUT_OF_MEMORY, fn, "%sout of host memory for %zu bytes of kernel arguments", pre, total);
  }
  memset(k, 0, total);
  k->nargs = nargs;
  k->bytes = extent;
  k->params = (void **)(k + 1);
  k->offset = (size_t *)(k->params + nargs);
  k->buf = (unsigned char *)k + head;
  for (int i = 0; i < nargs; i++) {
    k->offset[i] = known ? layout->offset[i] : tmp_off[i];
    k->params[i] = k->buf + k->offset[i];
    if (args[i].kind == TPG_ARG_BYTES) memcpy(k->buf + k->offset[i], args[i].bytes, args[i].size);
  }
  free(tmp_off);
  *out = k;
  return TPG_SUCCESS;
}

void tpg_kit_args_set_ptr(tpg_kit_args *k, int i, uint64_t addr) { memcpy(k->buf + k->offset[i], &addr, 8); }
