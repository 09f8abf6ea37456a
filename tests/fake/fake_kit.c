/* fake_kit.c - the driver entry points of the kit (engine kernels as C
 * functions, parameter layouts, captured work, host and event nodes, node
 * parameters read back for export, launch under a capture, the tuner's
 * timer), on the fake's model of fake_cuda.c: every handle checked against
 * the live sets, every call a failure point (fake_entry.h), and the control
 * calls the kit's tests use (tpgfake.h).
 */
#define _GNU_SOURCE
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/fake/fake_entry.h"
#include "tests/fake/tpgfake.h"

/* ---- the C kernels ---- */

static void k_axpy(void **p) {
  float *y = *(float **)p[0];
  const float *x = *(const float **)p[1];
  int n = *(int *)p[2];
  double a = *(double *)p[3];
  float b = *(float *)p[4];
  if (!fk_check_range((uintptr_t)y, (size_t)n * 4, "kernel axpy: y") ||
      !fk_check_range((uintptr_t)x, (size_t)n * 4, "kernel axpy: x"))
    return;
  for (int i = 0; i < n; i++) y[i] = (float)fma(a, (double)x[i], (double)b);
}

static void k_scale2(void **p) {
  float *y = *(float **)p[0];
  const float *x = *(const float **)p[1];
  int n = *(int *)p[2];
  if (!fk_check_range((uintptr_t)y, (size_t)n * 4, "kernel scale2: y") ||
      !fk_check_range((uintptr_t)x, (size_t)n * 4, "kernel scale2: x"))
    return;
  for (int i = 0; i < n; i++) y[i] = 2.0f * x[i];
}

/* cudaGraphSetConditional(h, v[0]) */
static void k_cond_set(void **p) {
  unsigned long long h = *(unsigned long long *)p[0];
  const int *v = *(const int **)p[1];
  if (fk_check_range((uintptr_t)v, 4, "kernel cond_set: v")) fk_cond_set(h, (unsigned)v[0], "kernel cond_set");
}

/* A loop's last step: --ctr[0], and go on while it is positive. */
static void k_cond_countdown(void **p) {
  unsigned long long h = *(unsigned long long *)p[0];
  int *ctr = *(int **)p[1];
  if (!fk_check_range((uintptr_t)ctr, 4, "kernel cond_countdown: ctr")) return;
  ctr[0]--;
  fk_cond_set(h, ctr[0] > 0, "kernel cond_countdown");
}

const fk_kernel fk_c_kernels[] = {
    {"axpy", FK_K_C, 36, 5, {0, 8, 16, 24, 32}, {8, 8, 4, 8, 4}, k_axpy},
    {"scale2", FK_K_C, 20, 3, {0, 8, 16}, {8, 8, 4}, k_scale2},
    {"cond_set", FK_K_C, 16, 2, {0, 8}, {8, 8}, k_cond_set},
    {"cond_countdown", FK_K_C, 16, 2, {0, 8}, {8, 8}, k_cond_countdown},
    {"lt_matmul", FK_K_C, sizeof(fk_lt_kargs), 1, {0}, {sizeof(fk_lt_kargs)}, fk_lt_matmul},
};
const int fk_n_c_kernels = (int)(sizeof fk_c_kernels / sizeof fk_c_kernels[0]);

/* Parameter i of a kernel: tpgraph's take one struct, the C kernels theirs. */
static CUresult param_info(const void *k, size_t i, size_t *off, size_t *size) {
  if (!fk_kernel_valid(k)) return CUDA_ERROR_INVALID_HANDLE;
  const fk_kernel *f = k;
  int np = f->nparams ? f->nparams : 1;
  if (i >= (size_t)np) return CUDA_ERROR_INVALID_VALUE;
  if (off) *off = f->nparams ? f->off[i] : 0;
  if (size) *size = f->nparams ? f->size[i] : f->argsz;
  return CUDA_SUCCESS;
}

CUresult fk_cuKernelGetParamInfo(CUkernel k, size_t i, size_t *off, size_t *size) {
  ENTER("cuKernelGetParamInfo");
  r_ = param_info(k, i, off, size);
  LEAVE
}

CUresult fk_cuFuncGetParamInfo(CUfunction f, size_t i, size_t *off, size_t *size) {
  ENTER("cuFuncGetParamInfo");
  r_ = param_info(f, i, off, size);
  LEAVE
}

CUresult fk_cuFuncGetAttribute(int *v, CUfunction_attribute a, CUfunction f) {
  ENTER("cuFuncGetAttribute");
  if (!fk_kernel_valid(f)) FAIL(CUDA_ERROR_INVALID_HANDLE);
  *v = a == CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK ? 1024 : 0;
  LEAVE
}

/* ---- contexts ---- */

/* The driver fails it only before cuInit: not a failure point. */
CUresult fk_cuCtxGetCurrent(CUcontext *c) {
  fk_lock();
  *c = (CUcontext)fk_current();
  fk_unlock();
  return CUDA_SUCCESS;
}

/* ---- work on streams ---- */

CUresult fk_cuLaunchKernelEx(const CUlaunchConfig *c, CUfunction f, void **params, void **extra) {
  ENTER("cuLaunchKernelEx");
  NEED_CTX("cuLaunchKernelEx");
  STREAM(s, c->hStream);
  for (unsigned i = 0; i < c->numAttrs; i++)
    if (c->attrs[i].id == CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION) {
      const unsigned cx = c->attrs[i].value.clusterDim.x, cy = c->attrs[i].value.clusterDim.y;
      if (cx == 2) fk_counters[TPGFAKE_C_CLUSTER_LAUNCH]++;
      if (cy > 1) fk_counters[TPGFAKE_C_CLUSTER_Y]++;
      if (!cx || !cy || c->gridDimX % cx || c->gridDimY % cy)
        fk_violation("cuLaunchKernelEx: cluster %u x %u does not divide the grid %u x %u", cx, cy, c->gridDimX,
                     c->gridDimY);
    }
  static fk_node nd; /* big; the lock is held */
  unsigned grid[3] = {c->gridDimX, c->gridDimY, c->gridDimZ}, block[3] = {c->blockDimX, c->blockDimY, c->blockDimZ};
  r_ = fk_kernel_node(&nd, f, grid, block, c->sharedMemBytes, params, extra);
  if (r_ == CUDA_SUCCESS) r_ = fk_stream_enqueue(s, &nd);
  LEAVE
}

CUresult fk_cuLaunchHostFunc(CUstream h, CUhostFn fn, void *user) {
  ENTER("cuLaunchHostFunc");
  NEED_CTX("cuLaunchHostFunc");
  STREAM(s, h);
  if (!fn) FAIL(CUDA_ERROR_INVALID_VALUE);
  fk_node nd;
  memset(&nd, 0, sizeof nd);
  nd.type = FK_N_HOST;
  nd.hostfn = fn;
  nd.hostdata = user;
  r_ = fk_stream_enqueue(s, &nd);
  LEAVE
}

#define EVENT(e, call)                                                     \
  if (!fk_live_has(FK_EVENT, (e))) {                                       \
    fk_violation("%s(%p): not a live event", call, (void *)(e));           \
    FAIL(CUDA_ERROR_INVALID_HANDLE);                                       \
  }

/* Streams run in order at once, so a wait has nothing to wait for: outside a
 * capture it is counted; inside, it is a wait node (external or not). */
CUresult fk_cuStreamWaitEvent(CUstream h, CUevent e, unsigned flags) {
  ENTER("cuStreamWaitEvent");
  EVENT(e, "cuStreamWaitEvent");
  STREAM(s, h);
  if (flags & ~(unsigned)CU_EVENT_WAIT_EXTERNAL) FAIL(CUDA_ERROR_INVALID_VALUE);
  if (flags && !s->capture) FAIL(CUDA_ERROR_INVALID_VALUE); /* as the driver: EXTERNAL only in a capture */
  if (!s->capture) {
    fk_counters[TPGFAKE_C_EVWAIT]++;
    goto out;
  }
  fk_node nd;
  memset(&nd, 0, sizeof nd);
  nd.type = FK_N_EVWAIT;
  nd.ev = (fk_event *)e;
  r_ = fk_stream_enqueue(s, &nd);
  LEAVE
}

CUresult fk_cuEventRecordWithFlags(CUevent e, CUstream h, unsigned flags) {
  ENTER("cuEventRecordWithFlags");
  EVENT(e, "cuEventRecordWithFlags");
  STREAM(s, h);
  if (flags & ~(unsigned)CU_EVENT_RECORD_EXTERNAL) FAIL(CUDA_ERROR_INVALID_VALUE);
  if (flags && !s->capture) FAIL(CUDA_ERROR_INVALID_VALUE);
  if (!flags) { /* a plain record: what cuEventRecord does */
    if (s->capture) FAIL(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    fk_event *ev = (fk_event *)e;
    fk_node nd;
    memset(&nd, 0, sizeof nd);
    nd.type = FK_N_EVENT;
    nd.ev = ev;
    nd.ev_gen = ev->gen_recorded + 1;
    r_ = fk_stream_enqueue(s, &nd);
    if (r_ == CUDA_SUCCESS) {
      ev->gen_recorded++;
      ev->stream = s;
      fk_counters[TPGFAKE_C_EVREC]++;
    }
    goto out;
  }
  fk_node nd;
  memset(&nd, 0, sizeof nd);
  nd.type = FK_N_EVREC;
  nd.ev = (fk_event *)e;
  r_ = fk_stream_enqueue(s, &nd);
  LEAVE
}

/* No clock: a pair of recorded events is 0.001 ms apart. */
CUresult fk_cuEventElapsedTime(float *ms, CUevent a, CUevent b) {
  ENTER("cuEventElapsedTime");
  EVENT(a, "cuEventElapsedTime");
  EVENT(b, "cuEventElapsedTime");
  fk_event *x = (fk_event *)a, *y = (fk_event *)b;
  if (!x->gen_recorded || !y->gen_recorded) FAIL(CUDA_ERROR_INVALID_HANDLE);
  if (x->gen_done < x->gen_recorded || y->gen_done < y->gen_recorded) FAIL(CUDA_ERROR_NOT_READY);
  *ms = 0.001f;
  LEAVE
}

/* ---- captures ---- */

CUresult fk_cuStreamGetCaptureInfo(CUstream h, CUstreamCaptureStatus *st, cuuint64_t *id, CUgraph *g,
                                   const CUgraphNode **deps, const CUgraphEdgeData **ed, size_t *nd) {
  ENTER("cuStreamGetCaptureInfo");
  STREAM(s, h);
  int cap = s->capture != NULL;
  *st = !cap ? CU_STREAM_CAPTURE_STATUS_NONE
             : s->cap_error ? CU_STREAM_CAPTURE_STATUS_INVALIDATED : CU_STREAM_CAPTURE_STATUS_ACTIVE;
  s->cap_dep = cap && s->cap_last >= 0 ? (void *)s->capture->nodes[s->cap_last] : NULL;
  if (id) *id = cap ? (cuuint64_t)(uintptr_t)s->capture : 0;
  if (g) *g = cap ? (CUgraph)s->capture : NULL;
  if (deps) *deps = s->cap_dep ? (const CUgraphNode *)&s->cap_dep : NULL;
  if (ed) *ed = NULL;
  if (nd) *nd = s->cap_dep ? 1 : 0;
  LEAVE
}

CUresult fk_cuStreamUpdateCaptureDependencies(CUstream h, CUgraphNode *deps, const CUgraphEdgeData *ed, size_t n,
                                              unsigned flags) {
  (void)ed;
  ENTER("cuStreamUpdateCaptureDependencies");
  STREAM(s, h);
  if (!s->capture || n > 1 || flags != CU_STREAM_SET_CAPTURE_DEPENDENCIES) FAIL(CUDA_ERROR_INVALID_VALUE);
  int i = n ? fk_graph_index(s->capture, deps[0]) : -1;
  if (n && i < 0) {
    fk_violation("cuStreamUpdateCaptureDependencies: %p is not a node of the capture", (void *)deps[0]);
    FAIL(CUDA_ERROR_INVALID_VALUE);
  }
  s->cap_last = i;
  LEAVE
}

/* ---- graph nodes ---- */

CUresult fk_cuGraphAddHostNode(CUgraphNode *out, CUgraph h, const CUgraphNode *deps, size_t nd,
                               const CUDA_HOST_NODE_PARAMS *p) {
  ENTER("cuGraphAddHostNode");
  GRAPH(g, h);
  if (!p->fn) FAIL(CUDA_ERROR_INVALID_VALUE);
  fk_node n;
  memset(&n, 0, sizeof n);
  n.type = FK_N_HOST;
  n.hostfn = p->fn;
  n.hostdata = p->userData;
  r_ = fk_graph_add_copy(out, g, deps, nd, &n);
  LEAVE
}

static CUresult event_node(CUgraphNode *out, CUgraph h, const CUgraphNode *deps, size_t nd, CUevent e, int type) {
  ENTER(type == FK_N_EVREC ? "cuGraphAddEventRecordNode" : "cuGraphAddEventWaitNode");
  GRAPH(g, h);
  EVENT(e, type == FK_N_EVREC ? "cuGraphAddEventRecordNode" : "cuGraphAddEventWaitNode");
  fk_node n;
  memset(&n, 0, sizeof n);
  n.type = type;
  n.ev = (fk_event *)e;
  r_ = fk_graph_add_copy(out, g, deps, nd, &n);
  LEAVE
}

CUresult fk_cuGraphAddEventRecordNode(CUgraphNode *out, CUgraph h, const CUgraphNode *deps, size_t nd, CUevent e) {
  return event_node(out, h, deps, nd, e, FK_N_EVREC);
}

CUresult fk_cuGraphAddEventWaitNode(CUgraphNode *out, CUgraph h, const CUgraphNode *deps, size_t nd, CUevent e) {
  return event_node(out, h, deps, nd, e, FK_N_EVWAIT);
}

/* A node handle is the node itself; it must belong to a live graph (or to a
 * live graph's child or conditional body, or to a capture in progress). */
static int node_in(const fk_graph *g, const fk_node *n) {
  for (int i = 0; i < g->n; i++) {
    const fk_node *x = g->nodes[i];
    if (x == n || (x->type == FK_N_CHILD && node_in(x->child, n))) return 1;
    for (int b = 0; x->type == FK_N_COND && b < x->nbodies; b++)
      if (node_in(x->bodies[b], n)) return 1;
  }
  return 0;
}

#define NODE(var, h, type_, call)                                                         \
  if (!fk_node_live(h)) {                                                                 \
    fk_violation("%s: node %p is not a node of a live graph", call, (void *)(h));         \
    FAIL(CUDA_ERROR_INVALID_VALUE);                                                       \
  }                                                                                       \
  fk_node *var = (fk_node *)(h);                                                          \
  if ((type_) && var->type != (type_)) {                                                  \
    fk_violation("%s: node %p is of another type", call, (void *)(h));                    \
    FAIL(CUDA_ERROR_INVALID_VALUE);                                                       \
  }

CUresult fk_cuGraphNodeGetType(CUgraphNode h, CUgraphNodeType *t) {
  ENTER("cuGraphNodeGetType");
  NODE(n, h, 0, "cuGraphNodeGetType");
  static const CUgraphNodeType map[] = {
      [FK_N_KERNEL] = CU_GRAPH_NODE_TYPE_KERNEL,       [FK_N_MEMSET] = CU_GRAPH_NODE_TYPE_MEMSET,
      [FK_N_MEMCPY] = CU_GRAPH_NODE_TYPE_MEMCPY,       [FK_N_EMPTY] = CU_GRAPH_NODE_TYPE_EMPTY,
      [FK_N_CHILD] = CU_GRAPH_NODE_TYPE_GRAPH,         [FK_N_COLL] = CU_GRAPH_NODE_TYPE_KERNEL,
      [FK_N_EVENT] = CU_GRAPH_NODE_TYPE_EVENT_RECORD,  [FK_N_HOST] = CU_GRAPH_NODE_TYPE_HOST,
      [FK_N_EVREC] = CU_GRAPH_NODE_TYPE_EVENT_RECORD,  [FK_N_EVWAIT] = CU_GRAPH_NODE_TYPE_WAIT_EVENT,
      [FK_N_MEMALLOC] = CU_GRAPH_NODE_TYPE_MEM_ALLOC,  [FK_N_COND] = CU_GRAPH_NODE_TYPE_CONDITIONAL,
  };
  *t = map[n->type];
  LEAVE
}

CUresult fk_cuGraphKernelNodeGetParams(CUgraphNode h, CUDA_KERNEL_NODE_PARAMS *p) {
  ENTER("cuGraphKernelNodeGetParams");
  NODE(n, h, FK_N_KERNEL, "cuGraphKernelNodeGetParams");
  memset(p, 0, sizeof *p);
  p->func = (CUfunction)(uintptr_t)n->kern;
  p->gridDimX = n->grid[0];
  p->gridDimY = n->grid[1];
  p->gridDimZ = n->grid[2];
  p->blockDimX = n->block[0];
  p->blockDimY = n->block[1];
  p->blockDimZ = n->block[2];
  p->sharedMemBytes = n->smem;
  int np = n->kern->nparams ? n->kern->nparams : 1;
  for (int i = 0; i < np; i++) n->pptr[i] = n->args + (n->kern->nparams ? n->kern->off[i] : 0);
  p->kernelParams = n->pptr; /* valid while the node lives, as the driver's */
  LEAVE
}

CUresult fk_cuGraphKernelNodeSetParams(CUgraphNode h, const CUDA_KERNEL_NODE_PARAMS *p) {
  ENTER("cuGraphKernelNodeSetParams");
  NODE(n, h, FK_N_KERNEL, "cuGraphKernelNodeSetParams");
  static fk_node k;
  unsigned grid[3] = {p->gridDimX, p->gridDimY, p->gridDimZ}, block[3] = {p->blockDimX, p->blockDimY, p->blockDimZ};
  r_ = fk_kernel_node(&k, p->func, grid, block, p->sharedMemBytes, p->kernelParams, p->extra);
  if (r_ == CUDA_SUCCESS) {
    memcpy(n, &k, sizeof k);
    fk_counters[TPGFAKE_C_TMPL_KSET]++;
  }
  LEAVE
}

CUresult fk_cuGraphKernelNodeSetAttribute(CUgraphNode h, CUkernelNodeAttrID a, const CUkernelNodeAttrValue *v) {
  ENTER("cuGraphKernelNodeSetAttribute");
  NODE(n, h, FK_N_KERNEL, "cuGraphKernelNodeSetAttribute");
  if (a == CU_KERNEL_NODE_ATTRIBUTE_CLUSTER_DIMENSION) {
    if (v->clusterDim.x == 2) fk_counters[TPGFAKE_C_CLUSTER_NODE]++;
    if (v->clusterDim.y > 1) fk_counters[TPGFAKE_C_CLUSTER_Y]++;
    if (!v->clusterDim.x || !v->clusterDim.y || n->grid[0] % v->clusterDim.x || n->grid[1] % v->clusterDim.y)
      fk_violation("cuGraphKernelNodeSetAttribute: cluster %u x %u does not divide the grid %u x %u",
                   v->clusterDim.x, v->clusterDim.y, n->grid[0], n->grid[1]);
  }
  LEAVE
}

CUresult fk_cuGraphMemsetNodeGetParams(CUgraphNode h, CUDA_MEMSET_NODE_PARAMS *p) {
  ENTER("cuGraphMemsetNodeGetParams");
  NODE(n, h, FK_N_MEMSET, "cuGraphMemsetNodeGetParams");
  memset(p, 0, sizeof *p);
  p->dst = n->dst;
  p->value = n->value;
  p->elementSize = n->esize;
  p->width = n->width;
  p->height = n->height;
  p->pitch = n->pitch;
  LEAVE
}

CUresult fk_cuGraphMemsetNodeSetParams(CUgraphNode h, const CUDA_MEMSET_NODE_PARAMS *p) {
  ENTER("cuGraphMemsetNodeSetParams");
  NODE(n, h, FK_N_MEMSET, "cuGraphMemsetNodeSetParams");
  fk_memset_from(n, p);
  LEAVE
}

/* The fake keeps a copy as flat addresses: it reads back as device-to-device. */
CUresult fk_cuGraphMemcpyNodeGetParams(CUgraphNode h, CUDA_MEMCPY3D *p) {
  ENTER("cuGraphMemcpyNodeGetParams");
  NODE(n, h, FK_N_MEMCPY, "cuGraphMemcpyNodeGetParams");
  memset(p, 0, sizeof *p);
  p->srcMemoryType = p->dstMemoryType = CU_MEMORYTYPE_DEVICE;
  p->srcDevice = n->src;
  p->dstDevice = n->dst;
  p->srcPitch = n->spitch;
  p->dstPitch = n->pitch;
  p->WidthInBytes = n->width;
  p->Height = n->height;
  p->Depth = 1;
  LEAVE
}

CUresult fk_cuGraphMemcpyNodeSetParams(CUgraphNode h, const CUDA_MEMCPY3D *p) {
  ENTER("cuGraphMemcpyNodeSetParams");
  NODE(n, h, FK_N_MEMCPY, "cuGraphMemcpyNodeSetParams");
  fk_node c;
  if (fk_memcpy_from(&c, p) != 0) FAIL(CUDA_ERROR_INVALID_VALUE);
  memcpy(n, &c, sizeof c);
  LEAVE
}

CUresult fk_cuGraphHostNodeGetParams(CUgraphNode h, CUDA_HOST_NODE_PARAMS *p) {
  ENTER("cuGraphHostNodeGetParams");
  NODE(n, h, FK_N_HOST, "cuGraphHostNodeGetParams");
  p->fn = n->hostfn;
  p->userData = n->hostdata;
  LEAVE
}

CUresult fk_cuGraphHostNodeSetParams(CUgraphNode h, const CUDA_HOST_NODE_PARAMS *p) {
  ENTER("cuGraphHostNodeSetParams");
  NODE(n, h, FK_N_HOST, "cuGraphHostNodeSetParams");
  if (!p->fn) FAIL(CUDA_ERROR_INVALID_VALUE);
  n->hostfn = p->fn;
  n->hostdata = p->userData;
  LEAVE
}

/* The child graph a node owns; not a live graph of its own (the caller may
 * read it, not destroy it), so it is registered as a node container only. */
CUresult fk_cuGraphChildGraphNodeGetGraph(CUgraphNode h, CUgraph *g) {
  ENTER("cuGraphChildGraphNodeGetGraph");
  NODE(n, h, FK_N_CHILD, "cuGraphChildGraphNodeGetGraph");
  *g = (CUgraph)n->child;
  LEAVE
}

/* ---- control calls for the kit's tests (tpgfake.h) ---- */

long tpgfake_counter(int which) {
  fk_lock();
  long v = which >= 0 && which < 16 ? fk_counters[which] : -1;
  fk_unlock();
  return v;
}

void *tpgfake_kernel(const char *name) {
  fk_lock();
  const fk_kernel *k = fk_kernel_find(name);
  fk_unlock();
  return (void *)(uintptr_t)k;
}

/* The calls below act as device 0's code would: with its context current. */
#define WITH_CTX0(stmt)        \
  do {                         \
    fk_lock();                 \
    fk_push(&fk_ctxs[0]);      \
    fk_unlock();               \
    stmt;                      \
    fk_lock();                 \
    fk_pop();                  \
    fk_unlock();               \
  } while (0)

int tpgfake_launch(void *stream, const char *name, void **params) {
  void *k = tpgfake_kernel(name);
  if (!k) return (int)CUDA_ERROR_NOT_FOUND;
  CUresult r;
  WITH_CTX0(r = fk_cuLaunchKernelEx(&(CUlaunchConfig){.gridDimX = 1, .gridDimY = 1, .gridDimZ = 1, .blockDimX = 1,
                                                      .blockDimY = 1, .blockDimZ = 1, .hStream = (CUstream)stream},
                                    (CUfunction)k, params, NULL));
  return (int)r;
}

void tpgfake_ctx_push(void) {
  fk_lock();
  fk_ctxs[0].retains++;
  fk_push(&fk_ctxs[0]);
  fk_unlock();
}

void tpgfake_ctx_pop(void) {
  fk_lock();
  fk_pop();
  fk_ctxs[0].retains--;
  fk_unlock();
}

void tpgfake_capture_alloc(void *stream) {
  fk_lock();
  fk_stream *s = stream;
  if (fk_live_has(FK_STREAM, s) && s->capture && !s->cap_error) {
    fk_node n;
    memset(&n, 0, sizeof n);
    n.type = FK_N_MEMALLOC;
    fk_node *c = fk_node_clone(&n);
    CUgraphNode dep = s->cap_last >= 0 ? (CUgraphNode)s->capture->nodes[s->cap_last] : NULL;
    if (c && fk_graph_add(s->capture, c, dep ? &dep : NULL, dep ? 1 : 0) == CUDA_SUCCESS) s->cap_last = s->capture->n - 1;
    else fk_node_free(c);
  }
  fk_unlock();
}

void tpgfake_capture_invalidate(void *stream) {
  fk_lock();
  if (fk_live_has(FK_STREAM, stream)) ((fk_stream *)stream)->cap_error = 1;
  fk_unlock();
}


void *tpgfake_stream(void) {
  CUstream s = NULL;
  CUresult r;
  fk_lock();
  fk_ctxs[0].retains++; /* device 0's context exists while the test's stream does */
  fk_unlock();
  WITH_CTX0(r = fk_api_stream_create(&s));
  return r == CUDA_SUCCESS ? (void *)s : NULL;
}

void tpgfake_stream_destroy(void *s) {
  WITH_CTX0(fk_api_stream_destroy((CUstream)s));
  fk_lock();
  fk_ctxs[0].retains--;
  fk_unlock();
}

int tpgfake_begin(void *s) {
  CUresult r;
  WITH_CTX0(r = fk_api_begin((CUstream)s));
  return (int)r;
}

void *tpgfake_end(void *s) {
  CUgraph g = NULL;
  CUresult r;
  WITH_CTX0(r = fk_api_end((CUstream)s, &g));
  return r == CUDA_SUCCESS ? (void *)g : NULL;
}

void *tpgfake_instantiate(void *g) {
  CUgraphExec x = NULL;
  CUresult r;
  WITH_CTX0(r = fk_api_instantiate(&x, (CUgraph)g));
  return r == CUDA_SUCCESS ? (void *)x : NULL;
}

void tpgfake_exec_launch(void *x) { WITH_CTX0(fk_api_launch((CUgraphExec)x, NULL)); }
void tpgfake_exec_destroy(void *x) { WITH_CTX0(fk_api_exec_destroy((CUgraphExec)x)); }
void tpgfake_graph_destroy(void *g) { WITH_CTX0(fk_api_graph_destroy((CUgraph)g)); }

void *tpgfake_event(void) {
  CUevent e = NULL;
  CUresult r;
  WITH_CTX0(r = fk_api_event_create(&e));
  return r == CUDA_SUCCESS ? (void *)e : NULL;
}

void tpgfake_event_destroy(void *e) { WITH_CTX0(fk_api_event_destroy((CUevent)e)); }

void tpgfake_run_graph(void *g) {
  fk_lock();
  if (fk_live_has(FK_GRAPH, g)) fk_graph_run_now((const fk_graph *)g);
  else fk_violation("tpgfake_run_graph(%p): not a live graph", g);
  fk_unlock();
}

/* Used by NODE: is n a node of some live graph? */
static int graph_has(const void *g, const void *n) { return node_in((const fk_graph *)g, (const fk_node *)n); }
int fk_node_live(const void *n) { return fk_live_each(FK_GRAPH, graph_has, n); }

/* Used by GRAPH: a live graph, or a child graph or conditional body inside
 * one (tpgraph adds a body's nodes to the graph cuGraphAddNode handed out). */
static int child_in(const fk_graph *g, const fk_graph *c) {
  for (int i = 0; i < g->n; i++) {
    const fk_node *x = g->nodes[i];
    if (x->type == FK_N_CHILD && (x->child == c || child_in(x->child, c))) return 1;
    for (int b = 0; x->type == FK_N_COND && b < x->nbodies; b++)
      if (x->bodies[b] == c || child_in(x->bodies[b], c)) return 1;
  }
  return 0;
}
int fk_graph_within(const fk_graph *top, const fk_graph *g) { return top == g || child_in(top, g); }
static int graph_has_child(const void *g, const void *c) { return child_in((const fk_graph *)g, (const fk_graph *)c); }
int fk_graph_known(const void *g) {
  return g && (fk_live_has(FK_GRAPH, g) || fk_live_each(FK_GRAPH, graph_has_child, g));
}
