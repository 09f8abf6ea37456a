/* bind.c - checking a caller's buffer against the slot it is bound to:
 * memory kind, device, alignment, and that the allocation covers the slot
 * (the driver's pointer attributes). Create, rebind and update all use it,
 * update also for the bindings it keeps when the new plan's slot grew. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>

#include "graphbuild/graph.h"

/* A pointer query that failed after the memory type was known: the binding
 * cannot be checked, so it is refused, naming the binding and the query. */
static tpg_status query_failed(CUresult r, const char *fn, const char *who, const char *attr) {
  char what[256];
  snprintf(what, sizeof what, "%s: cuPointerGetAttribute(%s)", who, attr);
  return tpg_cu_fail(r, fn, what);
}

tpg_status tpg_check_binding(const tpg_graph *g, const tpg_plan *p, tpg_slot slot, void *ptr, const char *fn,
                             const char *what, int index) {
  if (slot == TPG_SLOT_NONE || slot > (tpg_slot)p->nslots)
    return tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn, "%s[%d].slot is %u: not a slot of the plan (expected 1..%d)", what,
                   index, slot, p->nslots);
  const tpg_slot_rec *s = &p->slots[slot - 1];
  if (s->where == TPG_MEM_SCRATCH)
    return tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn,
                   "%s[%d]: slot \"%s\" is scratch memory the graph owns: it cannot be bound", what, index, s->name);
  /* Who is refused: a binding of the call, or (index < 0) one the graph kept
   * from before, checked again against a new plan's larger slot. */
  char who[200];
  if (index >= 0) snprintf(who, sizeof who, "%s[%d].ptr %p for slot \"%s\"", what, index, ptr, s->name);
  else snprintf(who, sizeof who, "the buffer kept bound to slot \"%s\" (%p)", s->name, ptr);
  if (!ptr) return tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn, "%s[%d].ptr is NULL for slot \"%s\"", what, index, s->name);
  if ((uintptr_t)ptr % 16 != 0)
    return tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn, "%s is misaligned: expected 16-byte alignment", who);
  size_t bytes = s->count * tpg_dtype_size(s->dtype);
  CUdeviceptr dp = (CUdeviceptr)(uintptr_t)ptr;
  unsigned int memtype = 0;
  CUresult r = tpg_cu->cuPointerGetAttribute(&memtype, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, dp);
  if (r != CUDA_SUCCESS)
    return tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn, "%s is not memory CUDA knows: expected %s", who,
                   s->where == TPG_MEM_DEVICE ? "device memory (cuMemAlloc/cudaMalloc)"
                                              : "page-locked host memory (cuMemHostAlloc/cuMemHostRegister)");
  if (s->where == TPG_MEM_DEVICE) {
    if (memtype != CU_MEMORYTYPE_DEVICE)
      return tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn, "%s is host memory: expected device memory of a device slot",
                     who);
    int ord = -1;
    r = tpg_cu->cuPointerGetAttribute(&ord, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, dp);
    if (r != CUDA_SUCCESS) return query_failed(r, fn, who, "DEVICE_ORDINAL");
    if (ord != g->dev.ordinal)
      return tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn, "%s is memory of device %d: expected device %d", who, ord,
                     g->dev.ordinal);
  } else if (memtype != CU_MEMORYTYPE_HOST) {
    return tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn,
                   "%s is device memory: expected page-locked host memory of a host slot", who);
  }
  /* The allocation's range: without it the slot's size cannot be checked,
   * and a buffer that is too small would be written past its end at launch,
   * so a failed query refuses the binding (it used to skip the check). What
   * the driver calls an allocation is what cuMemAlloc / cudaMalloc /
   * cuMemHostAlloc returned: a sub-range a pool allocator (PyTorch's caching
   * allocator, cudaMallocAsync pools) hands out inside a larger block is not
   * one, and a buffer too small for its slot passes here when its block
   * goes on far enough; the Python binding checks a tensor's own size. */
  CUdeviceptr base = 0;
  size_t size = 0;
  r = tpg_cu->cuPointerGetAttribute(&base, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, dp);
  if (r != CUDA_SUCCESS) return query_failed(r, fn, who, "RANGE_START_ADDR");
  r = tpg_cu->cuPointerGetAttribute(&size, CU_POINTER_ATTRIBUTE_RANGE_SIZE, dp);
  if (r != CUDA_SUCCESS) return query_failed(r, fn, who, "RANGE_SIZE");
  size_t avail = dp >= base && dp - base <= size ? (size_t)(base + size - dp) : 0;
  if (avail < bytes)
    return tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn,
                   "%s: the allocation has %zu bytes from there (%zu in all), the slot needs %zu (%zu elements)", who,
                   avail, size, bytes, s->count);
  return TPG_SUCCESS;
}


tpg_status tpg_bindings_unique(const tpg_plan *p, const tpg_binding *b, int n, const char *fn, const char *what) {
  /* A slot -> first binding map: linear in bindings + slots, where a pairwise
   * scan would be quadratic in the bindings. Slots are checked valid before
   * this is called. */
  int *first = calloc((size_t)p->nslots + 1, sizeof *first);
  if (!first) return tpg_err(TPG_ERROR_OUT_OF_MEMORY, fn, "out of host memory");
  tpg_status st = TPG_SUCCESS;
  for (int i = 0; i < n && st == TPG_SUCCESS; i++) {
    tpg_slot s = b[i].slot;
    if (first[s])
      st = tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn, "%s[%d] binds slot \"%s\" again (first at [%d])", what, i,
                   p->slots[s - 1].name, first[s] - 1);
    else
      first[s] = i + 1;
  }
  free(first);
  return st;
}
