/* eager.c - the same nodes without our explicit graph: one after another on
 * a stream (TPG_MODE_EAGER), or that sequence stream-captured into a graph
 * (TPG_MODE_CAPTURE). These are what engines do today, kept here so a
 * benchmark compares them with explicit graphs on identical kernels and
 * parameters, and so a suspected graph problem can be checked eagerly.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>

#include "graphbuild/graph.h"

tpg_status tpg_run_nodes(tpg_graph *g, CUstream stream) {
  const tpg_plan *p = g->plan;
  char lb[160], what[200];
  for (int oi = 0; oi < p->nnodes; oi++) {
    int i = g->order[oi];
    const tpg_node_rec *n = &p->nodes[i];
    tpg_gnode *gn = &g->nodes[i];
    switch (n->kind) {
      case TPG_NK_GEMM:
      case TPG_NK_AXPBY:
      case TPG_NK_CONCAT:
      launch:
        TPG_CU(cuLaunchKernel(gn->kp.func, gn->kp.gridDimX, gn->kp.gridDimY, gn->kp.gridDimZ, gn->kp.blockDimX,
                              gn->kp.blockDimY, gn->kp.blockDimZ, gn->kp.sharedMemBytes, stream, gn->kp.kernelParams,
                              NULL));
        break;
      case TPG_NK_MEMSET:
        if (gn->ms.elementSize == 4) TPG_CU(cuMemsetD32Async(gn->ms.dst, gn->ms.value, gn->ms.width, stream));
        else TPG_CU(cuMemsetD16Async(gn->ms.dst, (unsigned short)gn->ms.value, gn->ms.width, stream));
        break;
      case TPG_NK_MEMCPY: {
        /* Unified addressing: a pinned host pointer is a valid CUdeviceptr here. */
        CUdeviceptr d = gn->cp.dstMemoryType == CU_MEMORYTYPE_HOST ? (CUdeviceptr)(uintptr_t)gn->cp.dstHost
                                                                   : gn->cp.dstDevice;
        CUdeviceptr s = gn->cp.srcMemoryType == CU_MEMORYTYPE_HOST ? (CUdeviceptr)(uintptr_t)gn->cp.srcHost
                                                                   : gn->cp.srcDevice;
        TPG_CU(cuMemcpyAsync(d, s, gn->cp.WidthInBytes, stream));
        break;
      }
      case TPG_NK_COLLECTIVE: {
        TPG_TRY(tpg_comm_check_usable(g->comm, __func__, "the graph's comm"));
        if (gn->fast) goto launch;
        const tpg_collective_desc *d = &n->u.coll;
        size_t es = tpg_dtype_size(p->slots[d->send.slot - 1].dtype);
        void *send = (char *)g->bind[d->send.slot - 1] + d->send.offset * es;
        void *recv = (char *)g->bind[d->recv.slot - 1] + d->recv.offset * es;
        ncclDataType_t dt = tpg_nccl_dtype(p->slots[d->send.slot - 1].dtype);
        ncclResult_t r;
        if (d->kind == TPG_ALL_REDUCE) r = ncclAllReduce(send, recv, d->count, dt, ncclSum, g->comm->nccl, stream);
        else if (d->kind == TPG_ALL_GATHER) r = ncclAllGather(send, recv, d->count, dt, g->comm->nccl, stream);
        else r = ncclReduceScatter(send, recv, d->count, dt, ncclSum, g->comm->nccl, stream);
        snprintf(what, sizeof what, "NCCL call for node %s", tpg_node_label(p, i, lb, sizeof lb));
        TPG_TRY(tpg_nccl_settle(g->comm, r, __func__, what));
        if (gn->has_epi)
          TPG_CU(cuLaunchKernel(gn->epi_kp.func, gn->epi_kp.gridDimX, 1, 1, gn->epi_kp.blockDimX, 1, 1, 0, stream,
                                gn->epi_kp.kernelParams, NULL));
        break;
      }
      default: break;
    }
  }
  return TPG_SUCCESS;
}
