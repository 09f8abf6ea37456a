/* scratch.c - device memory a graph owns for its scratch slots: cuMemAlloc,
 * or ncclMemAlloc + an NCCL symmetric window for a slot a collective uses
 * when the graph has TPG_GRAPH_NCCL_SYMMETRIC (collective calls: every rank
 * creates the same plan's graph in the same order; on a non-blocking comm a
 * registration is only done once the comm says so, see below), or a place
 * in a graph set's arena. Creation allocates; a whole-graph update allocates
 * what grew (never a window) and frees the old after the last launch;
 * destroy frees. */
#define _POSIX_C_SOURCE 200809L
#include "graphbuild/graph.h"

tpg_status tpg_scratch_alloc(tpg_graph *g, const tpg_plan *p, int q, size_t bytes, int sym, tpg_scratch *out) {
  out->ptr = NULL;
  out->bytes = 0;
  out->how = 0;
  out->win = NULL;
  if (sym) {
    if (!tpg_nccl->ncclCommWindowRegister || !tpg_nccl->ncclCommWindowDeregister)
      return TPG_FAIL(TPG_ERROR_UNSUPPORTED,
                      "TPG_GRAPH_NCCL_SYMMETRIC needs NCCL 2.27 or newer (ncclCommWindowRegister); this NCCL is %d",
                      tpg_nccl->version);
    bytes = (bytes + 4095) & ~(size_t)4095;
    void *ptr = NULL;
    ncclResult_t r = tpg_nccl->ncclMemAlloc(&ptr, bytes);
    if (r != ncclSuccess || !ptr)
      return TPG_FAIL(TPG_ERROR_OUT_OF_MEMORY, "ncclMemAlloc(%zu bytes) for scratch slot \"%s\" failed: %s", bytes,
                      p->slots[q].name, tpg_nccl->ncclGetErrorString(r));
    out->ptr = ptr;
    out->bytes = bytes;
    out->how = 2;
    r = tpg_nccl->ncclCommWindowRegister(g->comm->nccl, ptr, bytes, &out->win, NCCL_WIN_COLL_SYMMETRIC);
    /* On a non-blocking comm NCCL 2.28.9 returns ncclSuccess here while the
     * registration (a group job ending in a barrier with every rank, which
     * writes out->win) still runs: its group end's ncclInProgress is dropped
     * by the check macro in dev_runtime.cc. Trusting that return made the
     * next call on the comm fail ("Attempt to use communicator before the
     * previous operation returned ncclSuccess"). So wait for the comm after
     * a success as after ncclInProgress; on an idle comm that is one poll. */
    if (r == ncclSuccess) r = ncclInProgress;
    return tpg_nccl_settle(g->comm, r, __func__, "ncclCommWindowRegister (symmetric)");
  }
  bytes = (bytes + 255) & ~(size_t)255;
  CUdeviceptr d;
  TPG_CU(cuMemAlloc(&d, bytes));
  out->ptr = (void *)(uintptr_t)d;
  out->bytes = bytes;
  out->how = 1;
  return TPG_SUCCESS;
}

void tpg_scratch_free(tpg_graph *g, tpg_scratch *s) {
  /* Deregistering is collective: skipped on an aborted comm (a peer may be
   * gone); NCCL frees the window with the comm. */
  if (s->win && g->comm && g->comm->nccl && !g->comm->aborted) {
    ncclResult_t r = tpg_nccl->ncclCommWindowDeregister(g->comm->nccl, s->win);
    tpg_nccl_settle(g->comm, r == ncclSuccess ? ncclInProgress : r, "tpg_graph_destroy", "ncclCommWindowDeregister");
  }
  if (s->how == 1 && s->ptr) tpg_cu->cuMemFree((CUdeviceptr)(uintptr_t)s->ptr);
  if (s->how == 2 && s->ptr) tpg_nccl->ncclMemFree(s->ptr);
  s->ptr = NULL;
  s->bytes = 0;
  s->how = 0;
  s->win = NULL;
}

tpg_status tpg_scratch_place(tpg_graph *g, const tpg_graph_ext *ext) {
  const tpg_plan *p = g->plan;
  const int sym_graph = g->comm && g->comm->nranks > 1 && (g->flags & TPG_GRAPH_NCCL_SYMMETRIC);
  size_t at = 0; /* a set's arena: slots one after another from its start (state.h) */
  for (int q = 0; q < p->nslots; q++) {
    if (p->slots[q].where != TPG_MEM_SCRATCH || !tpg_state_used(g->st, (tpg_slot)(q + 1))) continue;
    const int sym = sym_graph && g->st->coll_uses[q];
    const size_t bytes = TPG_ARENA_ROUND(g->st->bytes[q]);
    if (ext && !sym && at + bytes <= ext->arena_bytes) {
      g->scratch[q] = (tpg_scratch){(void *)(uintptr_t)(ext->arena + at), bytes, 0, NULL}; /* borrowed */
      at += bytes;
    } else {
      TPG_TRY(tpg_scratch_alloc(g, p, q, g->st->bytes[q], sym, &g->scratch[q]));
      g->info.workspace_bytes += g->scratch[q].bytes;
    }
    g->bind[q] = g->scratch[q].ptr;
  }
  return TPG_SUCCESS;
}
