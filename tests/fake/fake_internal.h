/* fake_internal.h - what the stand-in driver's files share.
 *
 * One process-wide mutex guards every structure: the fake is about checking,
 * not speed, and one lock keeps it simple to reason about under TSan. Entry
 * points take it (fk_lock) and release it before returning; helpers assume
 * it is held. Work on a stream runs when it is enqueued unless the stream is
 * blocked by a collective whose other ranks have not arrived yet; then it
 * waits in the stream's queue and runs when the stream is queried or
 * synchronized (fk_stream_progress).
 */
#ifndef TPG_FAKE_INTERNAL_H
#define TPG_FAKE_INTERNAL_H

#include <cuda.h>
#include <nccl.h>
#include <stddef.h>
#include <stdint.h>

#define FK_MAX_DEV 8
#define FK_ARGS_MAX 4096 /* largest kernel argument block (tpg_gemm_cutlass_args is ~2.2 KB) */

void fk_lock(void);
void fk_unlock(void);

/* Counts the call; returns 1 if this call is the one to fail. */
int fk_inject(const char *name);
/* For calls that poll (stream and event queries, ncclCommGetAsyncError): how
 * often they run depends on timing, so they are no numbered failure points;
 * they fail only when named (tpgfake_fail_call). */
int fk_inject_poll(const char *name);
void fk_trace(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void fk_violation(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* ---- objects ---- */
enum { FK_STREAM, FK_EVENT, FK_GRAPH, FK_EXEC, FK_COMM, FK_WINDOW, FK_IPC, FK_RETAIN, FK_COND, FK_LT, FK_NKINDS };
void fk_live_add(int kind, const void *p);
int fk_live_has(int kind, const void *p);
int fk_live_del(int kind, const void *p);
long fk_live_count(int kind);
/* 1 if fn(obj, arg) is 1 for some live object of kind. */
int fk_live_each(int kind, int (*fn)(const void *obj, const void *arg), const void *arg);

/* ---- memory ---- */
enum { FK_MEM_DEVICE = 0, FK_MEM_HOST = 1, FK_MEM_NCCL = 2 };
typedef struct fk_alloc {
  uintptr_t base;
  size_t size;
  int kind;
  int device;
} fk_alloc;
void *fk_mem_alloc(size_t bytes, int kind, int device);
int fk_mem_free(void *p, int kind); /* 0 ok, -1 not a live allocation of that kind */
const fk_alloc *fk_mem_find(uintptr_t p);
/* Bytes of live device (and NCCL) allocations of `device`: what
 * cuMemGetInfo reports as taken. */
size_t fk_mem_device_bytes(int device);
/* Is [p, p + bytes) inside one live allocation? Counts a violation if not. */
int fk_check_range(uintptr_t p, size_t bytes, const char *what);

/* ---- contexts ---- */
typedef struct fk_stream fk_stream;
typedef struct fk_ctx {
  int device;
  int retains;
  int peer[FK_MAX_DEV];
  fk_stream *null_stream;
} fk_ctx;
extern fk_ctx fk_ctxs[FK_MAX_DEV];
int fk_ndevices(void);
fk_ctx *fk_current(void); /* NULL when none */
void fk_push(fk_ctx *c);
fk_ctx *fk_pop(void);

/* ---- kernels ---- */
/* tpgraph's kernels take one argument struct (nparams 0: one parameter of
 * argsz bytes); FK_K_C are the kit tests' kernels, C functions that compute,
 * with one parameter each at its offset in the node's argument block. */
enum {
  FK_K_GEMM,
  FK_K_GEMM_TMA,
  FK_K_GEMM_CUTLASS,
  FK_K_AXPBY,
  FK_K_CONCAT,
  FK_K_AR_EPI,
  FK_K_ALLREDUCE,
  FK_K_SWIGLU,
  FK_K_C
};
#define FK_PARAMS_MAX 8
typedef struct fk_kernel {
  const char *name;
  int type;
  size_t argsz;
  int nparams;
  size_t off[FK_PARAMS_MAX], size[FK_PARAMS_MAX];
  void (*run)(void **params);
} fk_kernel;
/* The C kernels (fake_kit.c). */
extern const fk_kernel fk_c_kernels[];
/* cuBLASLt's matmul as the fake runs it (fake_cublaslt.c): one argument,
 * this struct; the C kernel "lt_matmul". */
typedef struct fk_lt_kargs {
  const void *a, *b, *c, *bias;
  void *d, *ws;
  size_t ws_bytes;
  int64_t lda, ldb, ldc, ldd;
  int32_t m, n, k; /* cuBLASLt's: D is m x n, op(A) m x k */
  int32_t in_type, out_type, epilogue;
  int32_t sm_target; /* CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET; 0: none */
  float alpha, beta;
} fk_lt_kargs;
void fk_lt_matmul(void **p);
struct tpg_swiglu_args;
void fk_lt_swiglu(const struct tpg_swiglu_args *a); /* fake_cublaslt.c */
extern const int fk_n_c_kernels;
const fk_kernel *fk_kernel_find(const char *name);
int fk_kernel_valid(const void *f);

/* ---- nodes, graphs, execs ---- */
typedef struct fk_clique fk_clique;
enum { FK_N_KERNEL = 1, FK_N_MEMSET, FK_N_MEMCPY, FK_N_EMPTY, FK_N_CHILD, FK_N_COLL, FK_N_EVENT,
       /* the kit's: a host function, an event record / wait node of a graph
        * (no waiting to do: a stream runs in order), a captured allocation */
       FK_N_HOST, FK_N_EVREC, FK_N_EVWAIT, FK_N_MEMALLOC,
       /* a conditional node (IF / WHILE / SWITCH, fake_cond.c) */
       FK_N_COND };
typedef struct fk_graph fk_graph;
typedef struct fk_event fk_event;
typedef struct fk_node {
  int type;
  /* kernel */
  const fk_kernel *kern;
  unsigned grid[3], block[3], smem;
  unsigned char args[FK_ARGS_MAX]; /* copied to an aligned block to be read */
  /* memset: dst, value, esize, width (elements), height, pitch (bytes) */
  uintptr_t dst;
  unsigned value, esize;
  size_t width, height, pitch;
  /* memcpy: dst above, src, width (bytes), height, dpitch, spitch */
  uintptr_t src;
  size_t spitch;
  /* child graph (owned) */
  fk_graph *child;
  /* collective */
  fk_clique *cq;
  int rank, ckind, dtype, redop;
  uintptr_t send, recv;
  size_t count;
  /* event record */
  fk_event *ev;
  long ev_gen;
  /* host function */
  CUhostFn hostfn;
  void *hostdata;
  /* kernel parameters, filled when cuGraphKernelNodeGetParams hands them out */
  void *pptr[FK_PARAMS_MAX];
  /* conditional: its body graphs (owned, as child is), the condition's
   * handle (each copy of the node holds a reference on it), the type */
  fk_graph **bodies;
  int nbodies, ctype;
  unsigned long long cond;
} fk_node;

typedef struct fk_edge {
  int from, to;
  CUgraphEdgeData data;
} fk_edge;

struct fk_graph {
  fk_node **nodes;
  int n, cap;
  fk_edge *edges;
  int ne, ecap;
};

typedef struct fk_exec {
  fk_node **nodes; /* deep copies, in creation order (a topological order) */
  const void **orig; /* the template graph's node handles, for the setters */
  int n;
  fk_edge *edges;
  int ne;
} fk_exec;

fk_graph *fk_graph_new(void);
void fk_graph_free(fk_graph *g);
fk_graph *fk_graph_clone(const fk_graph *g);
fk_node *fk_node_clone(const fk_node *n);
void fk_node_free(fk_node *n);
/* Adds n (owned) after deps; returns 0 or a CUresult. */
CUresult fk_graph_add(fk_graph *g, fk_node *n, const CUgraphNode *deps, size_t ndeps);
/* Adds a copy of n after deps, *out = the copy; the caller keeps n. */
CUresult fk_graph_add_copy(CUgraphNode *out, fk_graph *g, const CUgraphNode *deps, size_t ndeps, const fk_node *n);
int fk_graph_index(const fk_graph *g, const void *node);
/* Deep-copies a conditional node's bodies into d (which has s's fields)
 * and takes a reference on its condition; frees them and drops it. */
int fk_cond_parts_copy(fk_node *d, const fk_node *s);
void fk_cond_parts_free(fk_node *n);
/* Same shape: node count, node types, children and bodies alike. */
int fk_graph_same_shape(const fk_graph *a, const fk_graph *b, int *bad_index);

/* ---- streams and events ---- */
typedef struct fk_op {
  struct fk_op *next;
  fk_node n;
  long seq;  /* collective: the rendezvous it joined, -1 before */
} fk_op;

struct fk_stream {
  fk_ctx *ctx;
  fk_op *head, *tail;
  fk_graph *capture;   /* capturing into this graph, or NULL */
  int cap_last;        /* index of the last captured node, -1 none */
  int cap_error;
  void *cap_dep;       /* the dependency cuStreamGetCaptureInfo handed out */
};

struct fk_event {
  long gen_recorded, gen_done;
  fk_stream *stream;
};

/* Resolves a CUstream (NULL: the current context's default stream). */
fk_stream *fk_stream_get(CUstream s, CUresult *err);
/* Enqueues (or captures) a copy of n on s. */
CUresult fk_stream_enqueue(fk_stream *s, const fk_node *n);
/* Runs what can run; returns 1 when the queue is empty. */
int fk_stream_progress(fk_stream *s);
void fk_stream_drop(fk_stream *s);
/* Unlinks an event from queued records (before it is freed). */
void fk_event_forget(fk_event *e);
/* Enqueues every node of exec (child graphs expanded). */
CUresult fk_exec_launch(fk_exec *x, fk_stream *s);
long fk_pending_ops(void);
extern long fk_kernel_runs, fk_tma_gemm_runs, fk_cutlass_gemm_runs;
/* Runs a graph's nodes at once, in order (tpgfake_run_graph). */
void fk_graph_run_now(const fk_graph *g);
/* What the kit tests count (tpgfake_counter). */
extern long fk_counters[16];
/* A GEMM kernel or cuBLASLt matmul ran with workspace ws (under the lock;
 * tpgfake_gemm_workspaces); the log is emptied by tpgfake_reset. */
void fk_ws_record(const void *ws);
void fk_ws_reset(void);

/* ---- conditions (fake_cond.c) ---- */
/* A reference on the condition h, taken (+1) or dropped (-1) by each copy
 * of a conditional node; the last one frees it. */
void fk_cond_ref(unsigned long long h, int delta);
/* The condition's value: 1 and *v, or 0 with a violation for a handle that
 * is not live. */
int fk_cond_value(unsigned long long h, unsigned *v);
/* What cudaGraphSetConditional does (the condition kernels). */
void fk_cond_set(unsigned long long h, unsigned v, const char *who);
/* At a launch: conditions made with CU_GRAPH_COND_ASSIGN_DEFAULT take their
 * default, for every conditional node among nodes (bodies and children too). */
void fk_cond_launch_reset(const fk_node *const *nodes, int n);
/* cuGraphDestroy: the graph's own references on the conditions made on it. */
void fk_cond_graph_gone(const fk_graph *g);
/* The exec's copy of template node `node` inside the bodies of the exec's
 * conditional nodes, or NULL. */
fk_node *fk_cond_exec_node(const fk_exec *x, const void *node);

/* ---- collectives (fake_nccl.c) ---- */
/* Runs a collective op: 1 done, 0 waiting for other ranks. */
int fk_coll_run(fk_op *op);
void fk_clique_ref(fk_clique *c, int delta);

#endif
