/* fake_entry.h - what the stand-in driver's entry-point files share
 * (fake_cuda.c: the driver tpgraph has always used; fake_kit.c: the kit's
 * entry points). Each entry point has the shape
 *   ENTER("cuX"); ...checks, FAIL(code) on error...; LEAVE
 * which takes the lock, counts the call as a failure point and releases the
 * lock on every path.
 */
#ifndef TPG_FAKE_ENTRY_H
#define TPG_FAKE_ENTRY_H

#include <string.h>

#include "lib/cuda_driver.h"
#include "tests/fake/fake_internal.h"

/* Allocation and creation calls fail as out of memory, everything else with
 * a generic error. */
static inline CUresult inj_err(const char *name) {
  return strstr(name, "Alloc") || strstr(name, "Create") || strstr(name, "Instantiate") || strstr(name, "Retain")
             ? CUDA_ERROR_OUT_OF_MEMORY
             : CUDA_ERROR_UNKNOWN;
}

#define ENTER(name)                                                                   \
  CUresult r_ = CUDA_SUCCESS;                                                         \
  fk_lock();                                                                          \
  if (fk_inject(name)) {                                                              \
    r_ = inj_err(name);                                                               \
    goto out;                                                                         \
  }
#define ENTER_POLL(name)                                                              \
  CUresult r_ = CUDA_SUCCESS;                                                         \
  fk_lock();                                                                          \
  if (fk_inject_poll(name)) {                                                         \
    r_ = CUDA_ERROR_UNKNOWN;                                                          \
    goto out;                                                                         \
  }
#define ENTER_NOFAIL() \
  CUresult r_ = CUDA_SUCCESS; \
  fk_lock();
#define FAIL(code)  \
  do {              \
    r_ = (code);    \
    goto out;       \
  } while (0)
#define LEAVE   \
  out:          \
  fk_unlock();  \
  return r_;
#define NEED_CTX(fn)                                                                   \
  do {                                                                                 \
    if (!fk_current()) {                                                               \
      fk_violation("%s without a current context (missing cuCtxPushCurrent?)", fn);   \
      FAIL(CUDA_ERROR_INVALID_CONTEXT);                                                \
    }                                                                                  \
  } while (0)
#define STREAM(var, h)                              \
  fk_stream *var = fk_stream_get((h), &r_);         \
  if (!var) goto out;

/* A graph handle: a live graph, or the child graph of a node of one
 * (cuGraphChildGraphNodeGetGraph's, which may be read and edited). */
#define GRAPH(var, h)                                                        \
  if (!fk_graph_known(h)) {                                                  \
    fk_violation("%s: graph %p is not a live graph", __func__ + 3, (void *)(h)); \
    FAIL(CUDA_ERROR_INVALID_HANDLE);                                         \
  }                                                                          \
  fk_graph *var = (fk_graph *)(h);
#define EXEC(var, h)                                                         \
  if (!fk_live_has(FK_EXEC, (h))) {                                          \
    fk_violation("%s: exec %p is not a live graph exec", __func__ + 3, (void *)(h)); \
    FAIL(CUDA_ERROR_INVALID_HANDLE);                                         \
  }                                                                          \
  fk_exec *var = (fk_exec *)(h);

/* var: the exec's copy of template node `node` (top level, or in a body of
 * a conditional node). */
#define EXEC_NODE(var, x, node, type, fn)                                              \
  int var##_why_ = 0;                                                                  \
  fk_node *var = fk_exec_node((x), (node), (type), &var##_why_);                       \
  if (!var) {                                                                          \
    fk_violation("%s: node %p is %s", fn, (void *)(node),                              \
                 var##_why_ == -1 ? "not a node of the exec's template graph" : "of another type"); \
    FAIL(CUDA_ERROR_INVALID_VALUE);                                                    \
  }


/* Helpers of fake_cuda.c the kit's entry points reuse (under the lock). */
fk_ctx *fk_ctx_of(CUcontext c);
/* Fills nd from a launch: the function must be one cuKernelGetFunction gave,
 * its arguments are copied (one struct for tpgraph's kernels, each
 * parameter at its offset for the C kernels). */
CUresult fk_kernel_node(fk_node *nd, CUfunction f, const unsigned grid[3], const unsigned block[3], unsigned smem,
                        void **params, void **extra);
void fk_memset_from(fk_node *n, const CUDA_MEMSET_NODE_PARAMS *m);
int fk_memcpy_from(fk_node *n, const CUDA_MEMCPY3D *c);
/* The exec's copy of a template node, or NULL with *why -1 (not there) or
 * -2 (of another type). */
fk_node *fk_exec_node(const fk_exec *x, CUgraphNode node, int type, int *why);
long fk_sync_ms(void);
void fk_nap(void);
double fk_now_ms(void);

/* Node handles of the kit's calls: a node of some live graph (fake_kit.c). */
int fk_node_live(const void *n);
int fk_graph_known(const void *g);
/* Is g top itself, or a child graph or conditional body somewhere inside it? */
int fk_graph_within(const fk_graph *top, const fk_graph *g);
/* fake_cuda.c's entry points, for the test-side calls of tpgfake.h. */
CUresult fk_api_stream_create(CUstream *s);
CUresult fk_api_stream_destroy(CUstream s);
CUresult fk_api_begin(CUstream s);
CUresult fk_api_end(CUstream s, CUgraph *g);
CUresult fk_api_instantiate(CUgraphExec *x, CUgraph g);
CUresult fk_api_launch(CUgraphExec x, CUstream s);
CUresult fk_api_exec_destroy(CUgraphExec x);
CUresult fk_api_graph_destroy(CUgraph g);
CUresult fk_api_event_create(CUevent *e);
CUresult fk_api_event_destroy(CUevent e);

/* The entry points fake_kit.c defines, for the table in fake_cuda.c: the
 * library's kit list (lib/cuda_driver.h) and three more it implements. */
#define FK_KIT_FUNCS(X) \
  TPG_CU_FUNCS_KIT(X) \
  X(cuEventElapsedTime, 2000) \
  X(cuKernelGetParamInfo, 12040) \
  X(cuFuncGetParamInfo, 12040)
/* Conditional nodes' entry points (fake_cond.c). */
#define FK_COND_FUNCS(X) \
  X(cuGraphConditionalHandleCreate, 12030) \
  X(cuGraphAddNode, 12030)
#define FK_DECL(name, ver) __typeof__(*(PFN_##name##_v##ver)0) fk_##name;
FK_KIT_FUNCS(FK_DECL)
FK_COND_FUNCS(FK_DECL)
#undef FK_DECL

#endif
