/* capture.h - an engine's library work (a tpg_capture_fn) stream-captured
 * into a child graph, and the checks that make such a child safe to embed.
 *
 * Thread-local capture mode: calls on this thread that a capture cannot
 * hold (cudaMalloc, synchronizing) fail and invalidate the capture instead
 * of silently running once at capture time, while other threads of the
 * engine stay free to use CUDA. The child is then inspected node by node,
 * because some forbidden work captures "successfully" (stream-ordered
 * allocation, another context's kernels, nothing at all).
 */
#ifndef TPG_CAPTURE_H
#define TPG_CAPTURE_H

#include "lib/cuda_driver.h"

/* Runs cb(user, stream, ptrs, nptrs) while `stream` is captured in
 * CU_STREAM_CAPTURE_MODE_THREAD_LOCAL with `ctx` current, ends the capture
 * and checks the result (tpg_capture_validate). `stream`: a private stream
 * of ctx, not capturing. Messages come from fn and name the node (label):
 * the callback's non-zero return (with its value), an invalidated or
 * unjoined capture, a callback that left another context current. *out:
 * owned by the caller (cuGraphDestroy); NULL on failure, nothing leaked. */
TPG_HIDDEN tpg_status tpg_capture_user(const char *fn, const char *label, CUcontext ctx, CUstream stream,
                                       tpg_capture_fn cb, void *user, void *const *ptrs, int nptrs, CUgraph *out);

/* Refuses a captured graph that has no work (only empty nodes or none),
 * memory allocation or free nodes, or kernel nodes of a context other than
 * ctx (where the driver reports a kernel node's context); child graphs are
 * searched too. */
TPG_HIDDEN tpg_status tpg_capture_validate(const char *fn, const char *label, CUgraph graph, CUcontext ctx);

/* Copies src's node parameters onto dst's nodes, pairwise in the order
 * cuGraphGetNodes lists them, which is the order they were added in: dst and
 * src have one shape (a re-capture of the same work, or a graph materialized
 * again from the same plan). Kernel, memset, memcpy and host nodes take
 * src's parameters, child graphs are mirrored recursively, other nodes
 * (empty, events) hold nothing a new address changes. A differing shape is
 * TPG_ERROR_INTERNAL and leaves dst partly updated. Keeps a graph handed out
 * for embedding (tpg_graph_export) equal to what its exec runs. */
TPG_HIDDEN tpg_status tpg_graph_mirror(const char *fn, CUgraph dst, CUgraph src);

#endif
