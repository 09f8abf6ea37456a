/* fake_cuda.c - a stand-in libcuda for CPU tests of the kit's driver paths
 * (loaded through TPG_LIBCUDA by tests/cpu/kit_fake_test.c).
 *
 * "Device" memory is host memory, kernels are C functions registered by
 * name, streams run their work at once unless they are capturing, and graphs
 * are node lists run in insertion order (which is a topological order for
 * what tpgraph builds and what a single stream captures). That is enough to
 * run tpgraph's create / launch / rebind / update / export / capture code
 * for engine kernels, captured work, host and event nodes on a machine
 * without a GPU and check every result exactly, under ASan and valgrind;
 * what it cannot show (real driver semantics) is kit_test's on a GPU.
 * Entry points tpgraph resolves but this file does not implement answer
 * CUDA_ERROR_NOT_SUPPORTED, so a path that needs one fails loudly.
 */
#define _GNU_SOURCE
#include <cuda.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define API __attribute__((visibility("default")))
#define FAKE_CTX ((CUcontext)(uintptr_t)0xc7c7)
#define MAXP 8

/* ---- kernels ---------------------------------------------------------- */

typedef struct fk {
  const char *name;
  int nparams;
  size_t off[MAXP], size[MAXP];
  void (*run)(void **p);
} fk;

static void k_axpy(void **p) {
  float *y = *(float **)p[0];
  const float *x = *(const float **)p[1];
  int n = *(int *)p[2];
  double a = *(double *)p[3];
  float b = *(float *)p[4];
  for (int i = 0; i < n; i++) y[i] = (float)fma(a, (double)x[i], (double)b);
}
static void k_scale2(void **p) {
  float *y = *(float **)p[0];
  const float *x = *(const float **)p[1];
  int n = *(int *)p[2];
  for (int i = 0; i < n; i++) y[i] = 2.0f * x[i];
}

/* Conditions (cuGraphConditionalHandleCreate): handle h is conds[h - 1]. */
#define MAXCOND 64
static struct { unsigned value, dflt; int reset; } conds[MAXCOND];
static int nconds;
static void cond_write(unsigned long long h, unsigned v) {
  if (h >= 1 && h <= (unsigned long long)nconds) conds[h - 1].value = v;
}
/* cudaGraphSetConditional(h, v[0]) */
static void k_cond_set(void **p) { cond_write(*(unsigned long long *)p[0], (unsigned)**(int **)p[1]); }
/* A loop's last step: --ctr[0], and go on while it is positive. */
static void k_cond_countdown(void **p) {
  int *ctr = *(int **)p[1];
  ctr[0]--;
  cond_write(*(unsigned long long *)p[0], ctr[0] > 0);
}

static fk kernels[] = {
    {"axpy", 5, {0, 8, 16, 24, 32}, {8, 8, 4, 8, 4}, k_axpy},
    {"scale2", 3, {0, 8, 16}, {8, 8, 4}, k_scale2},
    {"cond_set", 2, {0, 8}, {8, 8}, k_cond_set},
    {"cond_countdown", 2, {0, 8}, {8, 8}, k_cond_countdown},
};
#define NKERNELS (int)(sizeof kernels / sizeof kernels[0])

static fk *kernel_named(const char *name) {
  for (int i = 0; i < NKERNELS; i++)
    if (!strcmp(kernels[i].name, name)) return &kernels[i];
  return NULL;
}

/* ---- graphs ------------------------------------------------------------- */

typedef struct fgraph fgraph;
typedef struct fnode {
  CUgraphNodeType type;
  fgraph *owner;
  int idx;
  fk *fn;                       /* kernel */
  unsigned char pbuf[64];
  void *pptr[MAXP];
  unsigned grid, block, smem;
  CUDA_HOST_NODE_PARAMS hp;     /* host */
  CUDA_MEMSET_NODE_PARAMS ms;
  CUDA_MEMCPY3D cp;
  fgraph *child;                /* owned */
  CUevent ev;
  /* conditional: its bodies (owned), the handle, the type */
  fgraph **bodies;
  int nbodies;
  unsigned long long cond;
  CUgraphConditionalNodeType ctype;
} fnode;

struct fgraph {
  fnode **nodes;
  int n, cap;
  fnode *parent;                /* a body: the conditional node holding it */
  int body;                     /* ... and which of its bodies it is       */
};

typedef struct fexec {
  fgraph *g; /* node i runs for template node idx i */
} fexec;

typedef struct fstream {
  fgraph *cap;
  int capturing, invalid;
  fnode *last;
} fstream;

static int counters[16];
enum { C_LAUNCH, C_EXEC_KSET, C_EXEC_CHILD, C_EXEC_UPDATE, C_TMPL_KSET, C_CAPTURES, C_HOST, C_EVREC, C_EVWAIT,
       C_CLUSTER_NODE, C_CLUSTER_LAUNCH };

static fgraph *graph_new(void) { return calloc(1, sizeof(fgraph)); }

static void graph_free(fgraph *g) {
  if (!g) return;
  for (int i = 0; i < g->n; i++) {
    graph_free(g->nodes[i]->child);
    for (int b = 0; b < g->nodes[i]->nbodies; b++) graph_free(g->nodes[i]->bodies[b]);
    free(g->nodes[i]->bodies);
    free(g->nodes[i]);
  }
  free(g->nodes);
  free(g);
}

static fnode *node_add(fgraph *g, CUgraphNodeType t) {
  if (g->n == g->cap) {
    g->cap = g->cap ? 2 * g->cap : 8;
    g->nodes = realloc(g->nodes, (size_t)g->cap * sizeof *g->nodes);
  }
  fnode *n = calloc(1, sizeof *n);
  n->type = t;
  n->owner = g;
  n->idx = g->n;
  g->nodes[g->n++] = n;
  return n;
}

static fgraph *graph_clone(const fgraph *s);

static void node_copy(fnode *d, const fnode *s) {
  fgraph *owner = d->owner;
  int idx = d->idx;
  graph_free(d->child);
  for (int b = 0; b < d->nbodies; b++) graph_free(d->bodies[b]);
  free(d->bodies);
  *d = *s;
  d->owner = owner;
  d->idx = idx;
  for (int i = 0; d->fn && i < d->fn->nparams; i++) d->pptr[i] = d->pbuf + d->fn->off[i];
  d->child = s->child ? graph_clone(s->child) : NULL;
  d->bodies = s->nbodies ? calloc((size_t)s->nbodies, sizeof *d->bodies) : NULL;
  for (int b = 0; b < s->nbodies; b++) {
    d->bodies[b] = graph_clone(s->bodies[b]);
    d->bodies[b]->parent = d;
    d->bodies[b]->body = b;
  }
}

static fgraph *graph_clone(const fgraph *s) {
  fgraph *g = graph_new();
  for (int i = 0; i < s->n; i++) node_copy(node_add(g, s->nodes[i]->type), s->nodes[i]);
  return g;
}

static CUresult kernel_set(fnode *n, const CUDA_KERNEL_NODE_PARAMS *kp) {
  fk *f = (fk *)kp->func;
  if (!f) return CUDA_ERROR_INVALID_VALUE;
  n->fn = f;
  n->grid = kp->gridDimX;
  n->block = kp->blockDimX;
  n->smem = kp->sharedMemBytes;
  memset(n->pbuf, 0, sizeof n->pbuf);
  for (int i = 0; i < f->nparams; i++) {
    memcpy(n->pbuf + f->off[i], kp->kernelParams[i], f->size[i]);
    n->pptr[i] = n->pbuf + f->off[i];
  }
  return CUDA_SUCCESS;
}

static void graph_run(const fgraph *g);

static void node_run(const fnode *n) {
  switch (n->type) {
    case CU_GRAPH_NODE_TYPE_KERNEL: n->fn->run((void **)n->pptr); break;
    case CU_GRAPH_NODE_TYPE_HOST: n->hp.fn(n->hp.userData); counters[C_HOST]++; break;
    case CU_GRAPH_NODE_TYPE_MEMSET:
      for (size_t i = 0; i < n->ms.width; i++) {
        if (n->ms.elementSize == 4) ((uint32_t *)(uintptr_t)n->ms.dst)[i] = n->ms.value;
        else ((uint16_t *)(uintptr_t)n->ms.dst)[i] = (uint16_t)n->ms.value;
      }
      break;
    case CU_GRAPH_NODE_TYPE_MEMCPY: {
      const void *s = n->cp.srcMemoryType == CU_MEMORYTYPE_HOST ? n->cp.srcHost : (const void *)(uintptr_t)n->cp.srcDevice;
      void *d = n->cp.dstMemoryType == CU_MEMORYTYPE_HOST ? n->cp.dstHost : (void *)(uintptr_t)n->cp.dstDevice;
      memcpy(d, s, n->cp.WidthInBytes);
      break;
    }
    case CU_GRAPH_NODE_TYPE_GRAPH: graph_run(n->child); break;
    case CU_GRAPH_NODE_TYPE_CONDITIONAL: {
      unsigned v = conds[n->cond - 1].value;
      if (n->ctype == CU_GRAPH_COND_TYPE_IF) {
        if (v) graph_run(n->bodies[0]);
        else if (n->nbodies == 2) graph_run(n->bodies[1]);
      } else if (n->ctype == CU_GRAPH_COND_TYPE_SWITCH) {
        if (v < (unsigned)n->nbodies) graph_run(n->bodies[v]);
      } else {
        for (int k = 0; k < 100000 && conds[n->cond - 1].value; k++) graph_run(n->bodies[0]);
      }
      break;
    }
    case CU_GRAPH_NODE_TYPE_EVENT_RECORD: counters[C_EVREC]++; break;
    case CU_GRAPH_NODE_TYPE_WAIT_EVENT: counters[C_EVWAIT]++; break;
    default: break;
  }
}

static void graph_run(const fgraph *g) {
  for (int i = 0; i < g->n; i++) node_run(g->nodes[i]);
}

/* Work issued on a stream: captured, or run now. */
static fnode *stream_node(CUstream s, CUgraphNodeType t, fnode *tmp) {
  fstream *fs = (fstream *)s;
  if (fs && fs->capturing) {
    fnode *n = node_add(fs->cap, t);
    node_copy(n, tmp);
    n->type = t;
    fs->last = n;
    return n;
  }
  node_run(tmp);
  return NULL;
}

/* ---- entry points -------------------------------------------------------- */

static CUresult f_unsupported(void) { return CUDA_ERROR_NOT_SUPPORTED; }
static CUresult f_ok(void) { return CUDA_SUCCESS; }

API CUresult cuInit(unsigned flags) {
  (void)flags;
  return CUDA_SUCCESS;
}
API CUresult cuDriverGetVersion(int *v) {
  *v = 13000;
  return CUDA_SUCCESS;
}
static CUresult f_cuDeviceGetCount(int *n) { *n = 1; return CUDA_SUCCESS; }
static CUresult f_cuDeviceGet(CUdevice *d, int o) { *d = o; return o == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE; }
static CUresult f_cuDeviceGetName(char *name, int len, CUdevice d) {
  (void)d;
  snprintf(name, (size_t)len, "fake sm_90");
  return CUDA_SUCCESS;
}
static CUresult f_cuDeviceGetAttribute(int *v, CUdevice_attribute a, CUdevice d) {
  (void)d;
  switch (a) {
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: *v = 9; break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: *v = 0; break;
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: *v = 132; break;
    case CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE: *v = 50 << 20; break;
    default: *v = 0; break;
  }
  return CUDA_SUCCESS;
}
static CUresult f_cuDeviceTotalMem(size_t *b, CUdevice d) { (void)d; *b = (size_t)1 << 34; return CUDA_SUCCESS; }
static CUresult f_cuDevicePrimaryCtxRetain(CUcontext *c, CUdevice d) { (void)d; *c = FAKE_CTX; return CUDA_SUCCESS; }
static CUresult f_cuDevicePrimaryCtxRelease(CUdevice d) { (void)d; return CUDA_SUCCESS; }
static __thread CUcontext ctx_stack[64];
static __thread int ctx_depth;
static CUresult f_cuCtxPushCurrent(CUcontext c) { ctx_stack[ctx_depth++] = c; return CUDA_SUCCESS; }
static CUresult f_cuCtxPopCurrent(CUcontext *c) {
  if (!ctx_depth) return CUDA_ERROR_INVALID_CONTEXT;
  if (c) *c = ctx_stack[ctx_depth - 1];
  ctx_depth--;
  return CUDA_SUCCESS;
}
static CUresult f_cuCtxGetCurrent(CUcontext *c) { *c = ctx_depth ? ctx_stack[ctx_depth - 1] : NULL; return CUDA_SUCCESS; }
static CUresult f_cuGetErrorName(CUresult r, const char **s) {
  static char buf[32];
  snprintf(buf, sizeof buf, "CUDA_ERROR_%d", (int)r);
  *s = r == CUDA_ERROR_STREAM_CAPTURE_INVALIDATED ? "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED" : buf;
  return CUDA_SUCCESS;
}
static CUresult f_cuGetErrorString(CUresult r, const char **s) { (void)r; *s = "fake"; return CUDA_SUCCESS; }

/* modules */
static int library_loads;
static CUresult f_cuLibraryLoadData(CUlibrary *l, const void *code, CUjit_option *o, void **ov, unsigned no,
                                    CUlibraryOption *lo, void **lov, unsigned nlo) {
  (void)o, (void)ov, (void)no, (void)lo, (void)lov, (void)nlo;
  if (!code || strncmp(code, "fake", 4)) return CUDA_ERROR_INVALID_IMAGE;
  *l = (CUlibrary)(uintptr_t)(0x1000 + ++library_loads);
  return CUDA_SUCCESS;
}
static CUresult f_cuLibraryUnload(CUlibrary l) { (void)l; return CUDA_SUCCESS; }
static CUresult f_cuLibraryGetKernel(CUkernel *k, CUlibrary l, const char *name) {
  (void)l;
  fk *f = kernel_named(name);
  if (!f) return CUDA_ERROR_NOT_FOUND;
  *k = (CUkernel)f;
  return CUDA_SUCCESS;
}
static CUresult f_cuKernelGetFunction(CUfunction *f, CUkernel k) { *f = (CUfunction)k; return CUDA_SUCCESS; }
static CUresult f_param_info(void *k, size_t i, size_t *off, size_t *size) {
  fk *f = k;
  if (i >= (size_t)f->nparams) return CUDA_ERROR_INVALID_VALUE;
  *off = f->off[i];
  *size = f->size[i];
  return CUDA_SUCCESS;
}
static CUresult f_cuKernelGetParamInfo(CUkernel k, size_t i, size_t *o, size_t *s) { return f_param_info(k, i, o, s); }
static CUresult f_cuFuncGetParamInfo(CUfunction k, size_t i, size_t *o, size_t *s) { return f_param_info(k, i, o, s); }
static CUresult f_cuFuncGetAttribute(int *v, CUfunction_attribute a, CUfunction f) {
  (void)f;
  *v = a == CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK ? 1024 : 0;
  return CUDA_SUCCESS;
}
static CUresult f_cuFuncSetAttribute(CUfunction f, CUfunction_attribute a, int v) {
  (void)f, (void)a;
  return v > 227 * 1024 ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
}

/* memory: host memory stands for device memory */
static CUresult f_cuMemAlloc(CUdeviceptr *p, size_t n) {
  void *m = NULL;
  if (posix_memalign(&m, 256, n ? n : 1)) return CUDA_ERROR_OUT_OF_MEMORY;
  memset(m, 0, n);
  *p = (CUdeviceptr)(uintptr_t)m;
  return CUDA_SUCCESS;
}
static CUresult f_cuMemFree(CUdeviceptr p) { free((void *)(uintptr_t)p); return CUDA_SUCCESS; }
static CUresult f_cuPointerGetAttribute(void *data, CUpointer_attribute a, CUdeviceptr p) {
  (void)p;
  if (a == CU_POINTER_ATTRIBUTE_MEMORY_TYPE) *(unsigned *)data = CU_MEMORYTYPE_DEVICE;
  else if (a == CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL) *(int *)data = 0;
  else return CUDA_ERROR_NOT_SUPPORTED; /* ranges: not checked here */
  return CUDA_SUCCESS;
}

/* streams and events */
static CUresult f_cuStreamCreate(CUstream *s, unsigned f) { (void)f; *s = calloc(1, sizeof(fstream)); return CUDA_SUCCESS; }
static CUresult f_cuStreamDestroy(CUstream s) {
  fstream *fs = (fstream *)s;
  if (fs) graph_free(fs->cap);
  free(fs);
  return CUDA_SUCCESS;
}
static CUresult f_cuStreamBeginCapture(CUstream s, CUstreamCaptureMode m) {
  (void)m;
  fstream *fs = (fstream *)s;
  if (!fs || fs->capturing) return CUDA_ERROR_ILLEGAL_STATE;
  fs->cap = graph_new();
  fs->capturing = 1;
  fs->invalid = 0;
  fs->last = NULL;
  counters[C_CAPTURES]++;
  return CUDA_SUCCESS;
}
static CUresult f_cuStreamEndCapture(CUstream s, CUgraph *g) {
  fstream *fs = (fstream *)s;
  *g = NULL;
  if (!fs || !fs->capturing) return CUDA_ERROR_ILLEGAL_STATE;
  fs->capturing = 0;
  if (fs->invalid) {
    graph_free(fs->cap);
    fs->cap = NULL;
    return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
  }
  *g = (CUgraph)fs->cap;
  fs->cap = NULL;
  return CUDA_SUCCESS;
}
static CUresult f_cuStreamGetCaptureInfo(CUstream s, CUstreamCaptureStatus *st, cuuint64_t *id, CUgraph *g,
                                         const CUgraphNode **deps, const CUgraphEdgeData **ed, size_t *nd) {
  fstream *fs = (fstream *)s;
  int cap = fs && fs->capturing;
  *st = cap ? (fs->invalid ? CU_STREAM_CAPTURE_STATUS_INVALIDATED : CU_STREAM_CAPTURE_STATUS_ACTIVE)
            : CU_STREAM_CAPTURE_STATUS_NONE;
  if (id) *id = cap ? 1 : 0;
  if (g) *g = cap ? (CUgraph)fs->cap : NULL;
  if (deps) *deps = cap && fs->last ? (const CUgraphNode *)&fs->last : NULL;
  if (ed) *ed = NULL;
  if (nd) *nd = cap && fs->last ? 1 : 0;
  return CUDA_SUCCESS;
}
static CUresult f_cuStreamUpdateCaptureDependencies(CUstream s, CUgraphNode *deps, const CUgraphEdgeData *ed,
                                                    size_t n, unsigned flags) {
  (void)ed, (void)flags;
  fstream *fs = (fstream *)s;
  if (!fs || !fs->capturing || n != 1) return CUDA_ERROR_INVALID_VALUE;
  fs->last = (fnode *)deps[0];
  return CUDA_SUCCESS;
}
static CUresult f_cuEventCreate(CUevent *e, unsigned f) { (void)f; *e = malloc(8); return CUDA_SUCCESS; }
static CUresult f_cuEventDestroy(CUevent e) { free(e); return CUDA_SUCCESS; }
static CUresult f_cuEventRecord(CUevent e, CUstream s) { (void)e, (void)s; return CUDA_SUCCESS; }
static CUresult f_cuEventRecordWithFlags(CUevent e, CUstream s, unsigned flags) {
  fstream *fs = (fstream *)s;
  int cap = fs && fs->capturing;
  if (flags && !cap) return CUDA_ERROR_INVALID_VALUE; /* as the driver: EXTERNAL only in a capture */
  fnode t;
  memset(&t, 0, sizeof t);
  t.type = CU_GRAPH_NODE_TYPE_EVENT_RECORD;
  t.ev = e;
  if (cap && flags) stream_node(s, CU_GRAPH_NODE_TYPE_EVENT_RECORD, &t);
  else counters[C_EVREC]++;
  return CUDA_SUCCESS;
}
static CUresult f_cuStreamWaitEvent(CUstream s, CUevent e, unsigned flags) {
  fstream *fs = (fstream *)s;
  int cap = fs && fs->capturing;
  if (flags && !cap) return CUDA_ERROR_INVALID_VALUE;
  fnode t;
  memset(&t, 0, sizeof t);
  t.type = CU_GRAPH_NODE_TYPE_WAIT_EVENT;
  t.ev = e;
  if (cap && flags) stream_node(s, CU_GRAPH_NODE_TYPE_WAIT_EVENT, &t);
  else counters[C_EVWAIT]++;
  return CUDA_SUCCESS;
}
static CUresult f_cuEventQuery(CUevent e) { (void)e; return CUDA_SUCCESS; }

static CUresult launch(CUfunction f, unsigned grid, unsigned block, unsigned smem, CUstream s, void **params) {
  fnode t;
  memset(&t, 0, sizeof t);
  CUDA_KERNEL_NODE_PARAMS kp;
  memset(&kp, 0, sizeof kp);
  kp.func = f;
  kp.gridDimX = grid;
  kp.blockDimX = block;
  kp.sharedMemBytes = smem;
  kp.kernelParams = params;
  t.type = CU_GRAPH_NODE_TYPE_KERNEL;
  kernel_set(&t, &kp);
  stream_node(s, CU_GRAPH_NODE_TYPE_KERNEL, &t);
  return CUDA_SUCCESS;
}
static CUresult f_cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                                 unsigned bz, unsigned smem, CUstream s, void **params, void **extra) {
  (void)gy, (void)gz, (void)by, (void)bz, (void)extra;
  return launch(f, gx, bx, smem, s, params);
}
static CUresult f_cuLaunchKernelEx(const CUlaunchConfig *c, CUfunction f, void **params, void **extra) {
  (void)extra;
  for (unsigned i = 0; i < c->numAttrs; i++)
    if (c->attrs[i].id == CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION && c->attrs[i].value.clusterDim.x == 2)
      counters[C_CLUSTER_LAUNCH]++;
  return launch(f, c->gridDimX, c->blockDimX, c->sharedMemBytes, c->hStream, params);
}
static CUresult f_cuLaunchHostFunc(CUstream s, CUhostFn fn, void *u) {
  fnode t;
  memset(&t, 0, sizeof t);
  t.type = CU_GRAPH_NODE_TYPE_HOST;
  t.hp.fn = fn;
  t.hp.userData = u;
  stream_node(s, CU_GRAPH_NODE_TYPE_HOST, &t);
  return CUDA_SUCCESS;
}

/* graphs */
static CUresult f_cuGraphCreate(CUgraph *g, unsigned f) { (void)f; *g = (CUgraph)graph_new(); return CUDA_SUCCESS; }
static CUresult f_cuGraphDestroy(CUgraph g) { graph_free((fgraph *)g); return CUDA_SUCCESS; }
static CUresult f_cuGraphAddKernelNode(CUgraphNode *n, CUgraph g, const CUgraphNode *d, size_t nd,
                                       const CUDA_KERNEL_NODE_PARAMS *kp) {
  (void)d, (void)nd;
  fnode *x = node_add((fgraph *)g, CU_GRAPH_NODE_TYPE_KERNEL);
  *n = (CUgraphNode)x;
  return kernel_set(x, kp);
}
static CUresult f_cuGraphAddEmptyNode(CUgraphNode *n, CUgraph g, const CUgraphNode *d, size_t nd) {
  (void)d, (void)nd;
  *n = (CUgraphNode)node_add((fgraph *)g, CU_GRAPH_NODE_TYPE_EMPTY);
  return CUDA_SUCCESS;
}
static CUresult f_cuGraphAddHostNode(CUgraphNode *n, CUgraph g, const CUgraphNode *d, size_t nd,
                                     const CUDA_HOST_NODE_PARAMS *hp) {
  (void)d, (void)nd;
  fnode *x = node_add((fgraph *)g, CU_GRAPH_NODE_TYPE_HOST);
  x->hp = *hp;
  *n = (CUgraphNode)x;
  return CUDA_SUCCESS;
}
static CUresult f_cuGraphAddEventRecordNode(CUgraphNode *n, CUgraph g, const CUgraphNode *d, size_t nd, CUevent e) {
  (void)d, (void)nd;
  fnode *x = node_add((fgraph *)g, CU_GRAPH_NODE_TYPE_EVENT_RECORD);
  x->ev = e;
  *n = (CUgraphNode)x;
  return CUDA_SUCCESS;
}
static CUresult f_cuGraphAddEventWaitNode(CUgraphNode *n, CUgraph g, const CUgraphNode *d, size_t nd, CUevent e) {
  (void)d, (void)nd;
  fnode *x = node_add((fgraph *)g, CU_GRAPH_NODE_TYPE_WAIT_EVENT);
  x->ev = e;
  *n = (CUgraphNode)x;
  return CUDA_SUCCESS;
}
static CUresult f_cuGraphAddChildGraphNode(CUgraphNode *n, CUgraph g, const CUgraphNode *d, size_t nd, CUgraph c) {
  (void)d, (void)nd;
  fnode *x = node_add((fgraph *)g, CU_GRAPH_NODE_TYPE_GRAPH);
  x->child = graph_clone((fgraph *)c);
  *n = (CUgraphNode)x;
  return CUDA_SUCCESS;
}
static CUresult f_cuGraphGetNodes(CUgraph g, CUgraphNode *nodes, size_t *n) {
  fgraph *fg = (fgraph *)g;
  if (nodes)
    for (size_t i = 0; i < *n && i < (size_t)fg->n; i++) nodes[i] = (CUgraphNode)fg->nodes[i];
  *n = (size_t)fg->n;
  return CUDA_SUCCESS;
}
static CUresult f_cuGraphNodeGetType(CUgraphNode n, CUgraphNodeType *t) { *t = ((fnode *)n)->type; return CUDA_SUCCESS; }
static CUresult f_cuGraphKernelNodeGetParams(CUgraphNode n, CUDA_KERNEL_NODE_PARAMS *kp) {
  fnode *x = (fnode *)n;
  memset(kp, 0, sizeof *kp);
  kp->func = (CUfunction)x->fn;
  kp->gridDimX = x->grid;
  kp->gridDimY = kp->gridDimZ = 1;
  kp->blockDimX = x->block;
  kp->blockDimY = kp->blockDimZ = 1;
  kp->sharedMemBytes = x->smem;
  kp->kernelParams = x->pptr;
  kp->ctx = FAKE_CTX;
  return CUDA_SUCCESS;
}
static CUresult f_cuGraphKernelNodeSetParams(CUgraphNode n, const CUDA_KERNEL_NODE_PARAMS *kp) {
  counters[C_TMPL_KSET]++;
  return kernel_set((fnode *)n, kp);
}
static CUresult f_cuGraphKernelNodeSetAttribute(CUgraphNode n, CUkernelNodeAttrID a, const CUkernelNodeAttrValue *v) {
  if (((fnode *)n)->type != CU_GRAPH_NODE_TYPE_KERNEL) return CUDA_ERROR_INVALID_VALUE;
  if (a == CU_KERNEL_NODE_ATTRIBUTE_CLUSTER_DIMENSION && v->clusterDim.x == 2) counters[C_CLUSTER_NODE]++;
  return CUDA_SUCCESS;
}
static CUresult f_cuGraphHostNodeGetParams(CUgraphNode n, CUDA_HOST_NODE_PARAMS *p) { *p = ((fnode *)n)->hp; return CUDA_SUCCESS; }
static CUresult f_cuGraphHostNodeSetParams(CUgraphNode n, const CUDA_HOST_NODE_PARAMS *p) { ((fnode *)n)->hp = *p; return CUDA_SUCCESS; }
static CUresult f_cuGraphChildGraphNodeGetGraph(CUgraphNode n, CUgraph *g) { *g = (CUgraph)((fnode *)n)->child; return CUDA_SUCCESS; }
static CUresult f_cuGraphInstantiateWithFlags(CUgraphExec *e, CUgraph g, unsigned long long f) {
  (void)f;
  fexec *x = calloc(1, sizeof *x);
  x->g = graph_clone((fgraph *)g);
  *e = (CUgraphExec)x;
  return CUDA_SUCCESS;
}
static CUresult f_cuGraphExecDestroy(CUgraphExec e) {
  fexec *x = (fexec *)e;
  graph_free(x->g);
  free(x);
  return CUDA_SUCCESS;
}
/* The exec's copy of a template node: same index, in the same body of the
 * exec's copy of the conditional node that holds it (top level: none). */
static fnode *exec_node(CUgraphExec e, CUgraphNode n) {
  fexec *x = (fexec *)e;
  const fnode *t = (const fnode *)n;
  const fgraph *in = x->g;
  if (t->owner->parent) {
    fnode *p = exec_node(e, (CUgraphNode)t->owner->parent);
    if (!p || t->owner->body >= p->nbodies) return NULL;
    in = p->bodies[t->owner->body];
  }
  return t->idx < in->n ? in->nodes[t->idx] : NULL;
}
static CUresult f_cuGraphExecKernelNodeSetParams(CUgraphExec e, CUgraphNode n, const CUDA_KERNEL_NODE_PARAMS *kp) {
  fnode *x = exec_node(e, n);
  if (!x || x->type != CU_GRAPH_NODE_TYPE_KERNEL) return CUDA_ERROR_INVALID_VALUE;
  counters[C_EXEC_KSET]++;
  return kernel_set(x, kp);
}
static int same_shape(const fgraph *a, const fgraph *b) {
  if (a->n != b->n) return 0;
  for (int i = 0; i < a->n; i++) {
    if (a->nodes[i]->type != b->nodes[i]->type || a->nodes[i]->nbodies != b->nodes[i]->nbodies) return 0;
    for (int k = 0; k < a->nodes[i]->nbodies; k++)
      if (!same_shape(a->nodes[i]->bodies[k], b->nodes[i]->bodies[k])) return 0;
    if (a->nodes[i]->child && !same_shape(a->nodes[i]->child, b->nodes[i]->child)) return 0;
  }
  return 1;
}
static CUresult f_cuGraphExecChildGraphNodeSetParams(CUgraphExec e, CUgraphNode n, CUgraph c) {
  fnode *x = exec_node(e, n);
  if (!x || x->type != CU_GRAPH_NODE_TYPE_GRAPH || !same_shape(x->child, (fgraph *)c)) return CUDA_ERROR_INVALID_VALUE;
  graph_free(x->child);
  x->child = graph_clone((fgraph *)c);
  counters[C_EXEC_CHILD]++;
  return CUDA_SUCCESS;
}
static CUresult f_cuGraphExecUpdate(CUgraphExec e, CUgraph g, CUgraphExecUpdateResultInfo *info) {
  fexec *x = (fexec *)e;
  memset(info, 0, sizeof *info);
  if (!same_shape(x->g, (fgraph *)g)) {
    info->result = CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED;
    return CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE;
  }
  graph_free(x->g);
  x->g = graph_clone((fgraph *)g);
  counters[C_EXEC_UPDATE]++;
  return CUDA_SUCCESS;
}
static CUresult f_cuGraphConditionalHandleCreate(CUgraphConditionalHandle *h, CUgraph g, CUcontext c, unsigned dflt,
                                                unsigned flags) {
  if (!g || c != FAKE_CTX || flags > CU_GRAPH_COND_ASSIGN_DEFAULT || nconds == MAXCOND) return CUDA_ERROR_INVALID_VALUE;
  conds[nconds].value = conds[nconds].dflt = dflt;
  conds[nconds].reset = flags == CU_GRAPH_COND_ASSIGN_DEFAULT;
  *h = (CUgraphConditionalHandle)++nconds;
  return CUDA_SUCCESS;
}
static CUresult f_cuGraphAddNode(CUgraphNode *n, CUgraph g, const CUgraphNode *d, const CUgraphEdgeData *ed, size_t nd,
                                 CUgraphNodeParams *np) {
  (void)d, (void)ed, (void)nd;
  if (np->type != CU_GRAPH_NODE_TYPE_CONDITIONAL) return CUDA_ERROR_NOT_SUPPORTED;
  CUDA_CONDITIONAL_NODE_PARAMS *cp = &np->conditional;
  if (cp->handle < 1 || cp->handle > (CUgraphConditionalHandle)nconds || cp->size < 1 || cp->ctx != FAKE_CTX ||
      (cp->type == CU_GRAPH_COND_TYPE_WHILE && cp->size != 1) || (cp->type == CU_GRAPH_COND_TYPE_IF && cp->size > 2))
    return CUDA_ERROR_INVALID_VALUE;
  fnode *x = node_add((fgraph *)g, CU_GRAPH_NODE_TYPE_CONDITIONAL);
  x->cond = cp->handle;
  x->ctype = cp->type;
  x->nbodies = (int)cp->size;
  x->bodies = calloc(cp->size, sizeof *x->bodies);
  for (unsigned b = 0; b < cp->size; b++) {
    x->bodies[b] = graph_new();
    x->bodies[b]->parent = x;
    x->bodies[b]->body = (int)b;
  }
  cp->phGraph_out = (CUgraph *)x->bodies;
  *n = (CUgraphNode)x;
  return CUDA_SUCCESS;
}
static CUresult f_cuGraphLaunch(CUgraphExec e, CUstream s) {
  (void)s;
  counters[C_LAUNCH]++;
  for (int c = 0; c < nconds; c++)
    if (conds[c].reset) conds[c].value = conds[c].dflt;
  graph_run(((fexec *)e)->g);
  return CUDA_SUCCESS;
}

/* ---- cuGetProcAddress ---------------------------------------------------- */

#define F(name) {#name, (void *)f_##name}
static const struct { const char *name; void *fn; } table[] = {
    F(cuDeviceGetCount), F(cuDeviceGet), F(cuDeviceGetName), F(cuDeviceGetAttribute), F(cuDeviceTotalMem),
    F(cuDevicePrimaryCtxRetain), F(cuDevicePrimaryCtxRelease), F(cuCtxPushCurrent), F(cuCtxPopCurrent),
    F(cuCtxGetCurrent), F(cuGetErrorName), F(cuGetErrorString), F(cuLibraryLoadData), F(cuLibraryUnload),
    F(cuLibraryGetKernel), F(cuKernelGetFunction), F(cuKernelGetParamInfo), F(cuFuncGetParamInfo),
    F(cuFuncGetAttribute), F(cuFuncSetAttribute), F(cuMemAlloc), F(cuMemFree), F(cuPointerGetAttribute),
    F(cuStreamCreate), F(cuStreamDestroy), F(cuStreamBeginCapture), F(cuStreamEndCapture),
    F(cuStreamGetCaptureInfo), F(cuStreamUpdateCaptureDependencies), F(cuEventCreate), F(cuEventDestroy),
    F(cuEventRecord), F(cuEventRecordWithFlags), F(cuStreamWaitEvent), F(cuEventQuery), F(cuLaunchKernel),
    F(cuLaunchKernelEx), F(cuLaunchHostFunc), F(cuGraphCreate), F(cuGraphDestroy), F(cuGraphAddKernelNode),
    F(cuGraphAddEmptyNode), F(cuGraphAddHostNode), F(cuGraphAddEventRecordNode), F(cuGraphAddEventWaitNode),
    F(cuGraphAddChildGraphNode), F(cuGraphGetNodes), F(cuGraphNodeGetType), F(cuGraphKernelNodeGetParams),
    F(cuGraphKernelNodeSetParams), F(cuGraphKernelNodeSetAttribute), F(cuGraphHostNodeGetParams),
    F(cuGraphHostNodeSetParams), F(cuGraphChildGraphNodeGetGraph), F(cuGraphInstantiateWithFlags),
    F(cuGraphExecDestroy), F(cuGraphExecKernelNodeSetParams), F(cuGraphExecChildGraphNodeSetParams),
    F(cuGraphExecUpdate), F(cuGraphLaunch), F(cuGraphConditionalHandleCreate), F(cuGraphAddNode),
};
#undef F

/* Succeed without doing anything: what tpgraph calls only for cleanup or
 * waiting, which has nothing to do here. */
static const char *const no_ops[] = {"cuStreamSynchronize", "cuEventSynchronize", "cuStreamQuery"};

API CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int ver, cuuint64_t flags,
                                 CUdriverProcAddressQueryResult *st) {
  (void)ver, (void)flags;
  *pfn = (void *)f_unsupported;
  for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
    if (!strcmp(symbol, table[i].name)) *pfn = table[i].fn;
  for (size_t i = 0; i < sizeof no_ops / sizeof no_ops[0]; i++)
    if (!strcmp(symbol, no_ops[i])) *pfn = (void *)f_ok;
  if (st) *st = CU_GET_PROC_ADDRESS_SUCCESS;
  return CUDA_SUCCESS;
}

/* ---- for the test --------------------------------------------------------- */

/* A registered kernel issued on a stream, as a library would. */
API int fakecu_launch(void *stream, const char *kernel, void **params) {
  fk *f = kernel_named(kernel);
  return f ? (int)launch((CUfunction)f, 1, 1, 0, (CUstream)stream, params) : -1;
}
/* A stream-ordered allocation in the capture (cudaMallocAsync's node). */
API void fakecu_alloc_node(void *stream) {
  fstream *fs = stream;
  if (fs && fs->capturing) fs->last = node_add(fs->cap, CU_GRAPH_NODE_TYPE_MEM_ALLOC);
}
/* What a synchronize inside a capture does to it. */
API void fakecu_invalidate(void *stream) {
  fstream *fs = stream;
  if (fs) fs->invalid = 1;
}
API void fakecu_run_graph(void *graph) { graph_run((fgraph *)graph); }
API int fakecu_counter(int which) { return counters[which]; }
API void *fakecu_stream(void) {
  CUstream s;
  f_cuStreamCreate(&s, 0);
  return s;
}
API void fakecu_stream_destroy(void *s) { f_cuStreamDestroy(s); }
API int fakecu_begin(void *s) { return (int)f_cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL); }
API void *fakecu_end(void *s) {
  CUgraph g;
  return f_cuStreamEndCapture(s, &g) == CUDA_SUCCESS ? (void *)g : NULL;
}
API void *fakecu_instantiate(void *g) {
  CUgraphExec e;
  f_cuGraphInstantiateWithFlags(&e, g, 0);
  return e;
}
API void fakecu_exec_launch(void *e) { graph_run(((fexec *)e)->g); }
API void fakecu_exec_destroy(void *e) { f_cuGraphExecDestroy(e); }
API void fakecu_graph_destroy(void *g) { graph_free(g); }
/* A registered kernel as a CUkernel / CUfunction handle (the same here). */
API void *fakecu_kernel(const char *name) { return kernel_named(name); }
