/* handle.h - telling a live handle from a destroyed or foreign one.
 *
 * A magic word inside the object cannot do it alone: reading it after free()
 * is itself undefined, and a "magic = DEAD; free()" pair is a dead store the
 * compiler may drop at -O2 (then a second destroy still sees a live magic
 * under allocators that do not scribble freed memory, e.g. jemalloc). So every
 * public object is also entered in one process-wide set of live handles, and
 * a public call checks membership before it reads anything through the
 * pointer: a destroyed handle is an error naming the argument, never a read
 * of freed memory. The poison store is kept as a second line (volatile, so it
 * is not elided), for debuggers and core dumps.
 */
#ifndef TPG_HANDLE_H
#define TPG_HANDLE_H

#include "lib/internal.h"

/* Enters h with its kind (one of the TPG_MAGIC_* values). Fails only when out
 * of host memory. */
TPG_HIDDEN tpg_status tpg_handle_add(const void *h, unsigned kind);
/* 1 if h was added with this kind and not removed since. */
TPG_HIDDEN int tpg_handle_live(const void *h, unsigned kind);
/* Removes h (before it is freed); 0 if it was not live. */
TPG_HIDDEN int tpg_handle_remove(const void *h);

/* The object's magic word, overwritten in a way the compiler keeps. */
static inline void tpg_handle_poison(unsigned *magic) { *(volatile unsigned *)magic = TPG_MAGIC_DEAD; }

#endif
