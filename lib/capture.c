/* capture.c - capturing an engine's library work into a child graph.
 *
 * Every way the capture can go wrong ends the capture (a stream left
 * capturing would break the graph's next use of it) and frees what was
 * captured, then reports one message naming the node: the most specific
 * cause first (the callback's own return value, then the driver's verdict
 * on the capture, then what the inspection of the child found).
 */
#include "lib/capture.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *cu_name(CUresult r) {
  const char *n = NULL;
  tpg_cu->cuGetErrorName(r, &n);
  return n ? n : "CUDA error";
}

/* Why cuStreamEndCapture refused, in the terms of the callback's rules. */
static tpg_status end_fail(const char *fn, const char *label, CUresult r) {
  switch (r) {
    case CUDA_ERROR_STREAM_CAPTURE_INVALIDATED:
      return tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn,
                     "node %s: the capture was invalidated (CUDA_ERROR_STREAM_CAPTURE_INVALIDATED): the callback did "
                     "something a capture cannot hold (synchronized a stream, event or the device; cudaMalloc or "
                     "cudaFree; used the legacy default stream)",
                     label);
    case CUDA_ERROR_STREAM_CAPTURE_UNJOINED:
      return tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn,
                     "node %s: the callback forked work to another stream and did not join it back to the stream "
                     "it was given (CUDA_ERROR_STREAM_CAPTURE_UNJOINED): record an event there and wait for it",
                     label);
    case CUDA_ERROR_ILLEGAL_STATE:
    case CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD:
    case CUDA_ERROR_STREAM_CAPTURE_UNMATCHED:
      return tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn,
                     "node %s: the capture was ended or changed by someone else (%s): the callback must not begin "
                     "or end captures on the stream it is given",
                     label, cu_name(r));
    default: {
      const char *text = NULL;
      tpg_cu->cuGetErrorString(r, &text);
      return tpg_err(r == CUDA_ERROR_OUT_OF_MEMORY ? TPG_ERROR_OUT_OF_MEMORY : TPG_ERROR_CUDA, fn,
                     "node %s: cuStreamEndCapture failed: %s (%s)", label, cu_name(r), text ? text : "?");
    }
  }
}

tpg_status tpg_capture_user(const char *fn, const char *label, CUcontext ctx, CUstream stream, tpg_capture_fn cb,
                            void *user, void *const *ptrs, int nptrs, CUgraph *out) {
  *out = NULL;
  CUresult r = tpg_cu->cuCtxPushCurrent(ctx);
  if (r != CUDA_SUCCESS) return tpg_cu_fail(r, fn, "cuCtxPushCurrent");
  r = tpg_cu->cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL);
  if (r != CUDA_SUCCESS) {
    CUcontext c;
    tpg_cu->cuCtxPopCurrent(&c);
    return tpg_cu_fail(r, fn, "cuStreamBeginCapture");
  }
  int rc = cb(user, (tpg_stream)stream, ptrs, nptrs);
  /* cudaSetDevice replaces the top of the context stack: then our push is
   * the one replaced, and popping below still restores the caller's. */
  CUcontext cur = NULL;
  tpg_cu->cuCtxGetCurrent(&cur);
  int switched = cur != ctx;
  if (switched) {
    CUcontext c;
    tpg_cu->cuCtxPopCurrent(&c);
    tpg_cu->cuCtxPushCurrent(ctx);
  }
  CUgraph g = NULL;
  CUresult er = tpg_cu->cuStreamEndCapture(stream, &g);
  CUcontext c;
  tpg_cu->cuCtxPopCurrent(&c);
  tpg_status st = TPG_SUCCESS;
  if (rc != 0) {
    if (er != CUDA_SUCCESS)
      st = tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn,
                   "node %s: the capture callback returned %d (and the capture failed: %s)", label, rc, cu_name(er));
    else
      st = tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn, "node %s: the capture callback returned %d", label, rc);
  } else if (switched) {
    st = tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn,
                 "node %s: the capture callback left another context current: it must not switch devices or "
                 "contexts (cudaSetDevice)",
                 label);
  } else if (er != CUDA_SUCCESS || !g) {
    st = end_fail(fn, label, er != CUDA_SUCCESS ? er : CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
  } else {
    st = tpg_capture_validate(fn, label, g, ctx);
  }
  if (st != TPG_SUCCESS) {
    if (g) tpg_cu->cuGraphDestroy(g);
    return st;
  }
  *out = g;
  return TPG_SUCCESS;
}

/* Counts g's nodes that do work (not empty nodes) into *work, recursing into
 * child graphs, and refuses the first forbidden one. */
static tpg_status walk(const char *fn, const char *label, CUgraph g, CUcontext ctx, int depth, size_t *work) {
  size_t n = 0;
  CUresult r = tpg_cu->cuGraphGetNodes(g, NULL, &n);
  if (r != CUDA_SUCCESS) return tpg_cu_fail(r, fn, "cuGraphGetNodes");
  if (n == 0) return TPG_SUCCESS;
  CUgraphNode *nodes = malloc(n * sizeof *nodes);
  if (!nodes) return tpg_err(TPG_ERROR_OUT_OF_MEMORY, fn, "out of host memory");
  tpg_status st = TPG_SUCCESS;
  r = tpg_cu->cuGraphGetNodes(g, nodes, &n);
  if (r != CUDA_SUCCESS) {
    st = tpg_cu_fail(r, fn, "cuGraphGetNodes");
    goto out;
  }
  for (size_t i = 0; i < n && st == TPG_SUCCESS; i++) {
    CUgraphNodeType t;
    r = tpg_cu->cuGraphNodeGetType(nodes[i], &t);
    if (r != CUDA_SUCCESS) {
      st = tpg_cu_fail(r, fn, "cuGraphNodeGetType");
      break;
    }
    if (t != CU_GRAPH_NODE_TYPE_EMPTY) (*work)++;
    if (t == CU_GRAPH_NODE_TYPE_MEM_ALLOC || t == CU_GRAPH_NODE_TYPE_MEM_FREE) {
      st = tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn,
                   "node %s: the captured work %s device memory (a memory %s node: cudaMallocAsync / cudaFreeAsync "
                   "or a library doing so); give the library a workspace before the graph is created instead",
                   label, t == CU_GRAPH_NODE_TYPE_MEM_ALLOC ? "allocates" : "frees",
                   t == CU_GRAPH_NODE_TYPE_MEM_ALLOC ? "allocation" : "free");
    } else if (t == CU_GRAPH_NODE_TYPE_KERNEL) {
      CUDA_KERNEL_NODE_PARAMS kp = {0};
      /* Where the driver tells a kernel node's context, it must be ours; a
       * driver that does not (ctx NULL, or an error) passes the check. */
      if (tpg_cu->cuGraphKernelNodeGetParams(nodes[i], &kp) == CUDA_SUCCESS && kp.ctx && kp.ctx != ctx)
        st = tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn,
                     "node %s: the captured work has a kernel of another context (another device, or a context "
                     "other than the device's primary one): a callback must use the graph's device only",
                     label);
    } else if (t == CU_GRAPH_NODE_TYPE_GRAPH) {
      CUgraph child = NULL;
      r = tpg_cu->cuGraphChildGraphNodeGetGraph(nodes[i], &child);
      if (r != CUDA_SUCCESS) st = tpg_cu_fail(r, fn, "cuGraphChildGraphNodeGetGraph");
      else if (depth < 16) st = walk(fn, label, child, ctx, depth + 1, work);
    }
  }
out:
  free(nodes);
  return st;
}

tpg_status tpg_capture_validate(const char *fn, const char *label, CUgraph graph, CUcontext ctx) {
  size_t work = 0;
  TPG_TRY(walk(fn, label, graph, ctx, 0, &work));
  if (work == 0)
    return tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn,
                   "node %s: the capture holds no work: the callback issued nothing on the stream it was given "
                   "(did it set its library's stream to that stream, e.g. cublasSetStream?)",
                   label);
  return TPG_SUCCESS;
}

/* The nodes of g, in the order cuGraphGetNodes lists them (caller frees). */
static tpg_status graph_nodes(const char *fn, CUgraph g, CUgraphNode **out, size_t *n) {
  *out = NULL;
  *n = 0;
  CUresult r = tpg_cu->cuGraphGetNodes(g, NULL, n);
  if (r != CUDA_SUCCESS) return tpg_cu_fail(r, fn, "cuGraphGetNodes");
  if (*n == 0) return TPG_SUCCESS;
  *out = malloc(*n * sizeof **out);
  if (!*out) return tpg_err(TPG_ERROR_OUT_OF_MEMORY, fn, "out of host memory");
  r = tpg_cu->cuGraphGetNodes(g, *out, n);
  if (r != CUDA_SUCCESS) {
    free(*out);
    *out = NULL;
    return tpg_cu_fail(r, fn, "cuGraphGetNodes");
  }
  return TPG_SUCCESS;
}

static tpg_status mirror_graph(const char *fn, CUgraph dst, CUgraph src, int depth);

static tpg_status mirror_node(const char *fn, CUgraphNode d, CUgraphNode s, int depth) {
  CUgraphNodeType td, ts;
  CUresult r = tpg_cu->cuGraphNodeGetType(d, &td);
  if (r == CUDA_SUCCESS) r = tpg_cu->cuGraphNodeGetType(s, &ts);
  if (r != CUDA_SUCCESS) return tpg_cu_fail(r, fn, "cuGraphNodeGetType");
  if (td != ts) return tpg_err(TPG_ERROR_INTERNAL, fn, "mirroring a graph: node types differ (%d, %d)", (int)td, (int)ts);
  switch (td) {
    case CU_GRAPH_NODE_TYPE_KERNEL: {
      CUDA_KERNEL_NODE_PARAMS kp;
      memset(&kp, 0, sizeof kp);
      r = tpg_cu->cuGraphKernelNodeGetParams(s, &kp);
      if (r == CUDA_SUCCESS) r = tpg_cu->cuGraphKernelNodeSetParams(d, &kp);
      if (r != CUDA_SUCCESS) return tpg_cu_fail(r, fn, "cuGraphKernelNodeSetParams (mirror)");
      return TPG_SUCCESS;
    }
    case CU_GRAPH_NODE_TYPE_MEMSET: {
      CUDA_MEMSET_NODE_PARAMS ms;
      memset(&ms, 0, sizeof ms);
      r = tpg_cu->cuGraphMemsetNodeGetParams(s, &ms);
      if (r == CUDA_SUCCESS) r = tpg_cu->cuGraphMemsetNodeSetParams(d, &ms);
      if (r != CUDA_SUCCESS) return tpg_cu_fail(r, fn, "cuGraphMemsetNodeSetParams (mirror)");
      return TPG_SUCCESS;
    }
    case CU_GRAPH_NODE_TYPE_MEMCPY: {
      CUDA_MEMCPY3D cp;
      memset(&cp, 0, sizeof cp);
      r = tpg_cu->cuGraphMemcpyNodeGetParams(s, &cp);
      if (r == CUDA_SUCCESS) r = tpg_cu->cuGraphMemcpyNodeSetParams(d, &cp);
      if (r != CUDA_SUCCESS) return tpg_cu_fail(r, fn, "cuGraphMemcpyNodeSetParams (mirror)");
      return TPG_SUCCESS;
    }
    case CU_GRAPH_NODE_TYPE_HOST: {
      CUDA_HOST_NODE_PARAMS hp;
      memset(&hp, 0, sizeof hp);
      r = tpg_cu->cuGraphHostNodeGetParams(s, &hp);
      if (r == CUDA_SUCCESS) r = tpg_cu->cuGraphHostNodeSetParams(d, &hp);
      if (r != CUDA_SUCCESS) return tpg_cu_fail(r, fn, "cuGraphHostNodeSetParams (mirror)");
      return TPG_SUCCESS;
    }
    case CU_GRAPH_NODE_TYPE_GRAPH: {
      CUgraph gd, gs;
      r = tpg_cu->cuGraphChildGraphNodeGetGraph(d, &gd);
      if (r == CUDA_SUCCESS) r = tpg_cu->cuGraphChildGraphNodeGetGraph(s, &gs);
      if (r != CUDA_SUCCESS) return tpg_cu_fail(r, fn, "cuGraphChildGraphNodeGetGraph (mirror)");
      if (depth >= 16) return tpg_err(TPG_ERROR_INTERNAL, fn, "mirroring a graph: child graphs nested too deep");
      return mirror_graph(fn, gd, gs, depth + 1);
    }
    default:
      return TPG_SUCCESS;
  }
}

static tpg_status mirror_graph(const char *fn, CUgraph dst, CUgraph src, int depth) {
  CUgraphNode *dn = NULL, *sn = NULL;
  size_t nd = 0, ns = 0;
  tpg_status st = graph_nodes(fn, dst, &dn, &nd);
  if (st == TPG_SUCCESS) st = graph_nodes(fn, src, &sn, &ns);
  if (st == TPG_SUCCESS && nd != ns)
    st = tpg_err(TPG_ERROR_INTERNAL, fn, "mirroring a graph: %zu nodes against %zu", nd, ns);
  for (size_t i = 0; st == TPG_SUCCESS && i < nd; i++) st = mirror_node(fn, dn[i], sn[i], depth);
  free(dn);
  free(sn);
  return st;
}

tpg_status tpg_graph_mirror(const char *fn, CUgraph dst, CUgraph src) { return mirror_graph(fn, dst, src, 0); }
