/* kit_args.h - an engine kernel's argument list (tpg_arg[]) checked and
 * packed into the parameter buffer its kernel node launches with.
 *
 * Plain C, no driver: the plan checks what it can alone (kinds, sizes), and
 * tpg_graph_create checks again against the kernel's real parameter layout,
 * which the caller reads from the driver (lib/module.c) and hands in as
 * numbers. So every rule and message here is unit-tested on a machine with
 * no GPU (tests/cpu/kit_test.c).
 */
#ifndef TPG_KIT_ARGS_H
#define TPG_KIT_ARGS_H

#include "lib/internal.h"

/* One by-value argument at most (the header's rule). */
#define TPG_ARG_MAX_BYTES 4096u
/* A kernel's whole parameter list at most: CUDA 12.1+ on Volta and newer. */
#define TPG_KIT_PARAMS_MAX_BYTES 32764u

/* Checks args[0..nargs) as a plan takes them: known kinds; BYTES with a value
 * of 1..TPG_ARG_MAX_BYTES bytes; VIEW with size 0 or 8 (the view itself is
 * checked against the plan's slots by the caller); the natural-alignment
 * layout within TPG_KIT_PARAMS_MAX_BYTES. Messages come from fn and start
 * with "node <label>: " when label is not NULL. */
TPG_HIDDEN tpg_status tpg_kit_args_check(const char *fn, const char *label, const tpg_arg *args, int nargs);

/* A kernel's parameters as the driver reports them (cuKernelGetParamInfo):
 * count < 0 means unknown (a driver before 12.4), and args are then laid out
 * by natural alignment (each at the largest power of two <= 16 dividing its
 * size), which is what the C ABI does for scalars, pointers and the usual
 * aligned structs. */
typedef struct tpg_param_layout {
  int count;
  const size_t *offset;   /* count entries */
  const size_t *size;     /* count entries */
} tpg_param_layout;

/* Packed parameters of one kernel node: one allocation that owns itself
 * (params and offset point into it), so it may be handed around by pointer. */
typedef struct tpg_kit_args {
  int nargs;
  size_t bytes;           /* extent of the packed parameters               */
  void **params;          /* params[i] -> argument i in buf: kernelParams  */
  size_t *offset;         /* offset of argument i in buf                   */
  unsigned char *buf;     /* 16-byte aligned                               */
} tpg_kit_args;

/* Lays out args by `layout` (NULL or count < 0: natural alignment), after
 * tpg_kit_args_check's rules, refusing a count or size that differs from the
 * kernel's: "node <label>: args[2] is 4 bytes; the kernel's parameter 2 is 8
 * bytes at offset 16". BYTES values are copied; VIEW values are 0 until
 * tpg_kit_args_set_ptr. *out: owned, free with tpg_kit_args_free; NULL on
 * failure. */
TPG_HIDDEN tpg_status tpg_kit_args_layout(const char *fn, const char *label, const tpg_arg *args, int nargs,
                                          const tpg_param_layout *layout, tpg_kit_args **out);
TPG_HIDDEN void tpg_kit_args_free(tpg_kit_args *k);

/* Writes the address of VIEW argument i, or the handle of COND argument i
 * (fill and patch both call this). */
TPG_HIDDEN void tpg_kit_args_set_ptr(tpg_kit_args *k, int i, uint64_t addr);

#endif
