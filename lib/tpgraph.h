/* tpgraph.h - tensor-parallel inference graphs built node by node.
 *
 * The one public header of tpgraph, and its reference. C11; usable from C++.
 *
 * The flow: describe the work in a CPU-side PLAN (buffer slots, nodes,
 * explicit dependencies), MATERIALIZE and instantiate it into a CUDA graph
 * for one GPU (tpg_graph_create), LAUNCH it on a stream as often as you like,
 * and REBIND slots to other buffers between launches without re-instantiating.
 *
 *   tpg_plan *plan;  tpg_slot x, w, y, out;  tpg_node mm, ar;
 *   tpg_plan_create(&plan);
 *   tpg_plan_add_slot(plan, "x",   TPG_BF16, TPG_MEM_DEVICE, (size_t)M * K, &x);
 *   tpg_plan_add_slot(plan, "w",   TPG_BF16, TPG_MEM_DEVICE, (size_t)N * K, &w);
 *   tpg_plan_add_slot(plan, "y",   TPG_BF16, TPG_MEM_DEVICE, (size_t)M * N, &y);
 *   tpg_plan_add_slot(plan, "out", TPG_BF16, TPG_MEM_DEVICE, (size_t)M * N, &out);
 *   tpg_gemm_desc g = TPG_GEMM_DESC_INIT;
 *   g.m = M; g.n = N; g.k = K; g.dtype = TPG_BF16;
 *   g.x.slot = x; g.w.slot = w; g.y.slot = y;
 *   tpg_plan_add_gemm(plan, &g, NULL, 0, &mm);             // row-parallel partial
 *   tpg_collective_desc c = TPG_COLLECTIVE_DESC_INIT;
 *   c.kind = TPG_ALL_REDUCE; c.send.slot = y; c.recv.slot = out; c.count = (size_t)M * N;
 *   tpg_plan_add_collective(plan, &c, &mm, 1, &ar);        // runs after mm
 *
 *   tpg_binding b[4] = { {x, dx}, {w, dw}, {y, dy}, {out, dout} };
 *   tpg_graph_config cfg = TPG_GRAPH_CONFIG_INIT;
 *   cfg.device = dev; cfg.comm = comm; cfg.bindings = b; cfg.nbindings = 4;
 *   tpg_graph *gr;
 *   if (tpg_graph_create(plan, &cfg, &gr) != TPG_SUCCESS) puts(tpg_last_error());
 *   tpg_plan_destroy(plan);                  // the graph keeps its own copy
 *   tpg_graph_launch(gr, stream);
 *   tpg_binding nb = { x, dx2 };
 *   tpg_graph_rebind(gr, &nb, 1);            // next launch reads dx2
 *   tpg_graph_launch(gr, stream);
 *   tpg_graph_destroy(gr);                   // before the comm it uses
 *
 * Conventions, for every call:
 * - Every call returns a tpg_status. On failure, tpg_last_error() gives this
 *   thread's message naming the argument that was wrong and what was expected,
 *   and OUT handles are set to NULL. Nothing is leaked on any failure path.
 *   Copy the message before the next call: calls that succeed may clear it.
 * - Handles are opaque. X_destroy(NULL) is a no-op. Arguments marked
 *   "borrowed" stay owned by the caller and must outlive the handle that uses
 *   them; "OUT" is written by the call.
 * - Threads: a handle is used by one thread at a time; different handles may
 *   be used from different threads at once (one exception: tpg_comm_abort,
 *   callable from any thread). tpg_last_error is per thread.
 * - The host library uses the CUDA driver API only and needs no CUDA runtime.
 *   The driver (libcuda.so.1, or $TPG_LIBCUDA) is loaded when a call first
 *   needs a GPU, and NCCL (libnccl.so.2, or $TPG_LIBNCCL) when the first
 *   communicator or comm id is made: a program that makes none runs where
 *   NCCL is absent. Neither is linked, and tpgraph.h includes no CUDA header.
 * - Contexts: all of a graph's or comm's work runs in the PRIMARY context of
 *   its device (cuDevicePrimaryCtxRetain: the one the CUDA runtime, PyTorch
 *   and NCCL use); the caller's current context is left as it was. What the
 *   caller hands in must belong to that context: device buffers allocated in
 *   it (cudaMalloc, cudaMallocAsync pools, PyTorch, or cuMemAlloc with it
 *   current) or VMM mappings made accessible to the device; pinned host
 *   memory from cudaHostAlloc / cuMemHostAlloc in it (or portable); streams
 *   and events created in it (cudaStreamCreate after cudaSetDevice(device);
 *   NULL is its legacy default stream); CUfunctions of it. Buffers are
 *   checked when bound (below); a stream or event of another context is
 *   refused by the driver when it is used (TPG_ERROR_CUDA naming the call).
 * - Messages: tpg_last_error() names the public call that failed first
 *   ("tpg_graph_rebind: bindings[0].ptr ...", never an inner function), then
 *   the argument and what was expected.
 */
#ifndef TPGRAPH_H
#define TPGRAPH_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32)
#define TPG_API
#else
#define TPG_API __attribute__((visibility("default")))
#endif

/* ------------------------------------------------------------------------ */
/* Version                                                                   */

#define TPG_VERSION_MAJOR 0
#define TPG_VERSION_MINOR 3 /* 0.3: node-kind table, the kit (engine kernels,
                               captured work, host/event nodes, export),
                               conditional nodes, GEMM tuning; getters renamed
                               tpg_<object>_get_<what> with a size argument.
                               0.2: linear layers, all-reduce epilogue.
                               0.x: no ABI promise between minor versions;
                               configs, descs and OUT structs only grow. */
#define TPG_VERSION_PATCH 0
#define TPG_VERSION_CODE (TPG_VERSION_MAJOR * 10000 + TPG_VERSION_MINOR * 100 + TPG_VERSION_PATCH)

/* The library's TPG_VERSION_CODE; compare with the header's to catch a mismatch. */
TPG_API int tpg_version(void);

/* ------------------------------------------------------------------------ */
/* Status and errors                                                         */

typedef enum tpg_status {
  TPG_SUCCESS = 0,
  TPG_ERROR_INVALID_ARGUMENT = 1, /* a bad argument; the message names it     */
  TPG_ERROR_INVALID_STATE = 2,    /* not allowed now (aborted comm, ...)      */
  TPG_ERROR_OUT_OF_MEMORY = 3,    /* host or device allocation failed         */
  TPG_ERROR_NO_DRIVER = 4,        /* libcuda missing, or the build-time stub  */
  TPG_ERROR_NO_DEVICE = 5,        /* no such GPU, or no kernels for its arch  */
  TPG_ERROR_CUDA = 6,             /* a CUDA driver call failed                */
  TPG_ERROR_NCCL = 7,             /* an NCCL call failed                      */
  TPG_ERROR_UNSUPPORTED = 8,      /* valid, but not supported here            */
  TPG_ERROR_TIMEOUT = 9,          /* a deadline passed; the comm was aborted  */
  TPG_ERROR_PEER = 10,            /* a peer rank failed; the comm was aborted */
  TPG_ERROR_INTERNAL = 11,        /* a bug in tpgraph: please report it       */
  TPG_STATUS_COUNT = 12
} tpg_status;

/* Name and meaning of a status ("TPG_ERROR_INVALID_ARGUMENT: ..."); never
 * NULL. A static string: valid for the life of the process, never changed,
 * from any thread. */
TPG_API const char *tpg_status_string(tpg_status s);

/* This thread's message for its last failed call ("" if none): names the
 * public call, the argument and what was expected. The text lives in a
 * buffer of the calling thread (at most 1023 characters): valid until this
 * thread's next tpgraph call of any kind (one that succeeds may clear it;
 * tpg_status_string does not touch it) or the thread's exit. Copy it to keep
 * it; never free it. */
TPG_API const char *tpg_last_error(void);

/* ------------------------------------------------------------------------ */
/* Types, devices, run-time information                                      */

typedef enum tpg_dtype { TPG_F32 = 0, TPG_F16 = 1, TPG_BF16 = 2, TPG_DTYPE_COUNT = 3 } tpg_dtype;

/* Bytes per element (4, 2, 2), or 0 for an unknown dtype. */
TPG_API size_t tpg_dtype_size(tpg_dtype t);

/* A CUDA stream (CUstream == cudaStream_t); NULL is the legacy default stream. */
typedef struct CUstream_st *tpg_stream;

typedef struct tpg_runtime_info {
  int version;             /* TPG_VERSION_CODE of the library              */
  int driver_version;      /* cuDriverGetVersion, e.g. 13000; 0: no driver */
  int nccl_version;        /* ncclGetVersion, e.g. 22809; 0: no NCCL       */
  int device_count;        /* 0 when there is no driver                    */
  char kernel_archs[64];   /* targets of the embedded device code          */
  char driver_error[256];  /* why the driver could not be used, or ""      */
  /* Appended in 0.4: */
  char nccl_error[320];    /* why NCCL could not be loaded, or ""          */
} tpg_runtime_info;

/* Getters, all alike: tpg_<object>_get_<what>(object, ..., out, size). An OUT
 * struct only ever grows at its end, so `size` is sizeof(*out) as the
 * caller's header knows it: a caller built against an older header gets the
 * fields it knows, one built against a newer header gets the rest zeroed. */

/* Never fails for lack of a driver: it reports it in driver_error instead,
 * and likewise a driver that loads but cannot count its devices
 * (cuDeviceGetCount failed: device_count 0, driver_error says why), so "no
 * GPU" is never reported silently for a driver error. */
TPG_API tpg_status tpg_runtime_get_info(tpg_runtime_info *out /* OUT */, size_t size /* sizeof *out */);

typedef struct tpg_device_info {
  char name[96];
  int sm_arch;             /* 90 for Hopper (H100/H200), 80 for A100, ... */
  int sm_count;
  size_t total_memory;     /* bytes */
  size_t l2_bytes;
  int kernels_supported;   /* 1 if the embedded device code runs here     */
} tpg_device_info;

TPG_API tpg_status tpg_device_get_info(int device, tpg_device_info *out /* OUT */, size_t size /* sizeof *out */);

/* ------------------------------------------------------------------------ */
/* Communicators (NCCL)                                                      */
/*
 * One process per GPU is the default: rank 0 calls tpg_comm_id_create and
 * passes the bytes to the other ranks (the launcher's channel, or a file via
 * tpg_comm_id_write_file / tpg_comm_id_read_file); every rank then calls
 * tpg_comm_create. In-process mode: one host thread per GPU, each calling
 * tpg_comm_create with the same id. Across machines the same calls work;
 * NCCL picks its network transport.
 *
 * tpg_comm_id_create and tpg_comm_create load NCCL (libnccl.so.2, or
 * $TPG_LIBNCCL) the first time; a missing or too old NCCL is TPG_ERROR_NCCL
 * naming the file. tpg_comm_create initialises NCCL non-blocking and waits at most
 * timeout_ms, then runs one small all-reduce so the communicator is warmed
 * up before any graph captures it. A failure or a deadline aborts the NCCL
 * communicator; the call returns TPG_ERROR_TIMEOUT / TPG_ERROR_NCCL.
 */

#define TPG_COMM_ID_BYTES 128
typedef struct tpg_comm_id { unsigned char bytes[TPG_COMM_ID_BYTES]; } tpg_comm_id;

typedef struct tpg_comm tpg_comm;

#define TPG_CONFIG_MAGIC 0x74706731u /* "tpg1" */

typedef struct tpg_comm_config {
  size_t size;          /* sizeof(tpg_comm_config): lets fields be added   */
  unsigned magic;       /* TPG_CONFIG_MAGIC                                 */
  int version;          /* TPG_VERSION_CODE of the header compiled against */
  int device;           /* CUDA device ordinal of this rank                */
  int rank;             /* 0 .. nranks-1                                    */
  int nranks;           /* >= 1                                             */
  int timeout_ms;       /* deadline for init and for tpg_comm_wait; 0: 5 s  */
} tpg_comm_config;

#define TPG_COMM_CONFIG_INIT { sizeof(tpg_comm_config), TPG_CONFIG_MAGIC, TPG_VERSION_CODE, 0, 0, 1, 0 }

/* On the rank that creates the id (usually rank 0). */
TPG_API tpg_status tpg_comm_id_create(tpg_comm_id *out /* OUT */);
/* Writes the id to path atomically: a fresh temp file "<path>.tmp.<pid>"
 * created O_EXCL | O_NOFOLLOW with mode 0600 (whatever the umask), then
 * renamed over path. The file holds a format tag, a nonce of the job
 * ($TPG_JOB_ID, when set; give every rank the same) and the id: 144 bytes.
 * Something already at the temp path (a planted file or link) is refused. */
TPG_API tpg_status tpg_comm_id_write_file(const tpg_comm_id *id, const char *path);
/* Waits up to timeout_ms for path to appear, then reads the id. The file is
 * a trust boundary: it is opened without following links and without
 * blocking (a FIFO does not hang), and refused at once with
 * TPG_ERROR_INVALID_ARGUMENT, naming path and why, unless it is a regular
 * file of this user, mode 0600, of exactly 144 bytes in the writer's format.
 * A file whose job nonce differs ($TPG_JOB_ID: a stale file of an earlier
 * job) is waited past: TPG_ERROR_TIMEOUT says so if no new one appears. */
TPG_API tpg_status tpg_comm_id_read_file(const char *path, int timeout_ms, tpg_comm_id *out /* OUT */);

TPG_API tpg_status tpg_comm_create(const tpg_comm_id *id, const tpg_comm_config *cfg,
                                   tpg_comm **out /* OUT, owned */);
/* Finalizes and destroys. Destroy every graph that uses the comm first (NCCL
 * keeps a reference per captured graph); a graph still alive makes this fail
 * with TPG_ERROR_INVALID_STATE and leaves the comm intact. If finalize does not
 * complete within the comm's timeout (a peer is gone), the comm is aborted.
 * If the comm's context cannot be made current (cuCtxPushCurrent failed),
 * nothing is freed: the call fails with that error and the comm stays
 * intact, so a second call can free it. A destroyed comm is refused
 * (TPG_ERROR_INVALID_ARGUMENT) without being read. */
TPG_API tpg_status tpg_comm_destroy(tpg_comm *comm);
/* Aborts the communicator at once (no peer needed): its in-flight NCCL work
 * stops (ncclCommRevoke), one-shot kernels stop at their deadline, and later
 * calls that need it return TPG_ERROR_INVALID_STATE; a tpg_comm_wait running
 * in another thread returns that too. Safe to call from any thread, any
 * number of times. After an abort: destroy the comm's graphs, then the comm
 * (NCCL frees it only once no graph holds it), then build a new one. */
TPG_API tpg_status tpg_comm_abort(tpg_comm *comm);
TPG_API tpg_status tpg_comm_get_info(const tpg_comm *comm, int *rank /* OUT, may be NULL */,
                                 int *nranks /* OUT, may be NULL */, int *device /* OUT, may be NULL */);
/* Waits for all work on stream with the comm's deadline, polling NCCL for
 * asynchronous errors: a dead or silent peer gives TPG_ERROR_PEER or
 * TPG_ERROR_TIMEOUT (the comm is then aborted) instead of a hang. */
TPG_API tpg_status tpg_comm_wait(tpg_comm *comm, tpg_stream stream);

/* ------------------------------------------------------------------------ */
/* Plans: CPU-side descriptions of a graph (no CUDA calls)                   */

typedef struct tpg_plan tpg_plan;

/* A named buffer a plan's nodes read or write. 0 means "none". */
typedef uint32_t tpg_slot;
#define TPG_SLOT_NONE 0u

/* A node of one plan. Handles of one plan are refused by another. */
typedef uint64_t tpg_node;

typedef enum tpg_memory {
  TPG_MEM_DEVICE = 0,  /* device memory of the graph's GPU (cuMemAlloc, cudaMalloc, VMM) */
  TPG_MEM_HOST = 1,    /* page-locked host memory (cuMemHostAlloc / cuMemHostRegister)   */
  TPG_MEM_SCRATCH = 2  /* device memory the graph allocates and owns: intermediates.
                          Never bound or rebound; counted in workspace_bytes.           */
} tpg_memory;

/* A place in a slot: offset counted in elements of the slot's dtype. */
typedef struct tpg_view { tpg_slot slot; uint32_t reserved_; uint64_t offset; } tpg_view;

TPG_API tpg_status tpg_plan_create(tpg_plan **out /* OUT, owned */);
/* Frees the plan (NULL: a no-op). Like every destroy it returns a status:
 * TPG_ERROR_INVALID_ARGUMENT for a handle that is not a live plan. Graphs
 * made from it keep their own copy. A success leaves tpg_last_error() as it
 * was (cleanup after a failed call keeps that call's message). */
TPG_API tpg_status tpg_plan_destroy(tpg_plan *plan);

/* Declares a slot of `count` elements. Names are unique within a plan. */
TPG_API tpg_status tpg_plan_add_slot(tpg_plan *plan, const char *name, tpg_dtype dtype,
                                     tpg_memory where, size_t count, tpg_slot *out /* OUT */);
TPG_API tpg_status tpg_plan_find_slot(const tpg_plan *plan, const char *name, tpg_slot *out /* OUT */);

/* What a slot was declared as. name is borrowed: valid until the plan is
 * destroyed or rolled back past the slot. */
typedef struct tpg_slot_info {
  const char *name;
  tpg_dtype dtype;
  tpg_memory where;
  size_t count;            /* elements */
} tpg_slot_info;
TPG_API tpg_status tpg_plan_get_slot_info(const tpg_plan *plan, tpg_slot slot, tpg_slot_info *out /* OUT */,
                                          size_t size /* sizeof *out */);

/* A point in a plan's building, for builders of several nodes (layers): a
 * call that fails part-way rolls the plan back so it is as it was. Opaque. */
typedef struct tpg_plan_mark { uint32_t serial_, nodes_, slots_, reserved_; } tpg_plan_mark;
TPG_API tpg_status tpg_plan_checkpoint(const tpg_plan *plan, tpg_plan_mark *out /* OUT */);
/* Drops every node and slot added after `mark`, and every edge to them
 * (tpg_plan_add_dependency onto older nodes included). Node names set on
 * older nodes since are kept. The mark must come from this plan, and the
 * plan must not have been rolled back past it. */
TPG_API tpg_status tpg_plan_rollback(tpg_plan *plan, tpg_plan_mark mark);

/* Nodes. deps/ndeps: nodes of this plan that must finish first (may be NULL/0). */

typedef enum tpg_epilogue {
  TPG_EPILOGUE_NONE = 0,        /* y = x w^T                                  */
  TPG_EPILOGUE_BIAS = 1,        /* y = x w^T + bias                           */
  TPG_EPILOGUE_BIAS_GELU = 2,   /* y = gelu_tanh(x w^T + bias)                */
  TPG_EPILOGUE_BIAS_SILU = 3,   /* y = silu(x w^T + bias)                     */
  TPG_EPILOGUE_SWIGLU = 4,      /* w is [2n, k]: rows [0,n) gate, [n,2n) up;
                                   y = silu(gate) * up (bias optional, [2n])   */
  TPG_EPILOGUE_RESIDUAL = 5,    /* y = x w^T (+ bias) + residual              */
  TPG_EPILOGUE_F32_PARTIAL = 6, /* y (fp32 slot) = x w^T, for a reduction     */
  TPG_EPILOGUE_COUNT = 7
} tpg_epilogue;

/* An RMSNorm folded into the decode GEMVs, so that no norm kernel runs
 * between two GEMMs of a layer at small batch (one rank, at most
 * TPG_NORM_FOLD_MAX_ROWS rows, served by our decode GEMV only). The GEMM
 * that writes the residual stream h also writes y_ssq: per row, the sums of
 * squares of the values it stored, one per 16-column group; the next GEMM
 * reads h as its x with x_norm set and normalizes it where it reads it:
 *   x'[m, c] = round(h[m, c] * rsqrt(sum_c h[m, c]^2 / k + eps) * weight[c])
 * which is what an RMSNorm node would have stored (up to the order of the
 * sum). The sums must come from the GEMM that wrote x, after it. */
#define TPG_NORM_FOLD_MAX_ROWS 16
#define TPG_NORM_FOLD_GROUPS(cols) (((cols) + 15) / 16) /* sums per row of `cols` columns */
typedef struct tpg_x_norm {
  tpg_view ssq;            /* fp32 [rows, TPG_NORM_FOLD_GROUPS(k)], the producer's
                              y_ssq; slot 0: x as it is                     */
  tpg_view weight;         /* [k], the norm's weight (x's dtype)             */
  float eps;               /* >= 0, finite                                   */
} tpg_x_norm;
#define TPG_X_NORM_NONE { {0, 0, 0}, {0, 0, 0}, 0.0f }

/* y[m, n] = epilogue(x[m, k] * w[n, k]^T): w as a PyTorch Linear weight. */
typedef struct tpg_gemm_desc {
  size_t size;             /* sizeof(tpg_gemm_desc)                        */
  int m, n, k;             /* m >= 1; n, k multiples of 8                  */
  tpg_dtype dtype;         /* TPG_BF16 or TPG_F16 (x, w, bias, residual)   */
  tpg_epilogue epilogue;
  tpg_view x, w, y, bias, residual; /* bias/residual: slot 0 when unused   */
  int sm_reserve;          /* SMs a GEMM leaves free for a collective
                              running beside it (overlap): our persistent
                              grids and cuBLASLt's SM-count target; 0: none */
  tpg_view y_ssq;          /* a folded norm's producer (above): fp32 [m,
                              TPG_NORM_FOLD_GROUPS(n)]; epilogue NONE, BIAS or
                              RESIDUAL; slot 0: none                        */
  tpg_x_norm x_norm;       /* a folded norm's consumer (above); ssq slot 0: none */
} tpg_gemm_desc;
#define TPG_GEMM_DESC_INIT { sizeof(tpg_gemm_desc) /* size */, 0, 0, 0 /* m, n, k: set them */,  \
                             TPG_BF16 /* dtype */, TPG_EPILOGUE_NONE /* epilogue */,              \
                             {0, 0, 0}, {0, 0, 0}, {0, 0, 0} /* x, w, y: set them */,             \
                             {0, 0, 0}, {0, 0, 0} /* bias, residual: none */, 0 /* sm_reserve */, \
                             {0, 0, 0} /* y_ssq: none */, TPG_X_NORM_NONE /* x_norm */ }

TPG_API tpg_status tpg_plan_add_gemm(tpg_plan *plan, const tpg_gemm_desc *desc,
                                     const tpg_node *deps, int ndeps, tpg_node *out /* OUT, may be NULL */);

/* y[i] = alpha * x[i] + beta * y[i] for i < count, fp32 arithmetic; x and y of
 * one dtype. A small kernel node (residual adds, scaling, tests). */
TPG_API tpg_status tpg_plan_add_axpby(tpg_plan *plan, tpg_view y, tpg_view x, size_t count,
                                      float alpha, float beta,
                                      const tpg_node *deps, int ndeps, tpg_node *out);

/* Sets count elements of dst to the bit pattern `value` (element width from
 * the slot's dtype: 4 or 2 bytes). A memset node. */
TPG_API tpg_status tpg_plan_add_memset(tpg_plan *plan, tpg_view dst, uint32_t value, size_t count,
                                       const tpg_node *deps, int ndeps, tpg_node *out);

/* Copies count elements src -> dst (same dtype). Device<->device and pinned
 * host<->device, so engine inputs and outputs can be graph nodes. */
TPG_API tpg_status tpg_plan_add_memcpy(tpg_plan *plan, tpg_view dst, tpg_view src, size_t count,
                                       const tpg_node *deps, int ndeps, tpg_node *out);

/* A node that does nothing: joins and forks branches. */
TPG_API tpg_status tpg_plan_add_empty(tpg_plan *plan, const tpg_node *deps, int ndeps, tpg_node *out);

typedef enum tpg_collective {
  TPG_ALL_REDUCE = 0,     /* recv[i] = sum over ranks of send[i], i < count  */
  TPG_ALL_GATHER = 1,     /* recv[r*count + i] = send_r[i]                   */
  TPG_REDUCE_SCATTER = 2, /* recv[i] = sum over ranks of send[rank*count + i] */
  TPG_COLLECTIVE_COUNT = 3
} tpg_collective;

/* How an all-reduce runs. Our kernels (ONESHOT, TWOSHOT) are single kernel
 * nodes that move data over NVLink through a peer buffer the comm owns; they
 * serve 2..8 ranks that all map each other's memory (one machine, peer
 * access) and 16-byte aligned send/recv views. */
typedef enum tpg_collective_algo {
  TPG_ALGO_AUTO = 0,    /* By size, every rank alike: ONESHOT (its small push
                           kernel up to 256 KiB where its area allows: 512 KiB
                           / ranks; its push kernel up to 2 MiB and 4 MiB /
                           ranks), TWOSHOT up to 8 MiB, at 2 ranks the push
                           kernel in rounds up to 64 MiB, NCCL above, or
                           whenever our kernels cannot serve the node. The
                           limits are set in one place
                           (graphbuild/nodes/collective_select.c) and can be
                           moved for tuning (tpg_graph_config's allreduce_*
                           fields, or TPG_ONESHOT_SMALL_MAX,
                           TPG_ONESHOT_PUSH_MAX, TPG_TWOSHOT_MAX and
                           TPG_PUSH_ROUNDS_MAX in bytes),
                           read at tpg_graph_create; every rank must use the
                           same values.                                       */
  TPG_ALGO_NCCL = 1,    /* NCCL, captured into a child-graph node              */
  TPG_ALGO_ONESHOT = 2, /* tpgraph's one-shot kernel node (push up to
                           TPG_ONESHOT_PUSH_MAX, 2 MiB by default, any size
                           below it; pull above, up to 4 MiB); an error if it
                           cannot serve the node                              */
  TPG_ALGO_TWOSHOT = 3  /* tpgraph's two-shot kernel node (reduce-scatter, then
                           all-gather, by remote stores; up to 8 MiB); an error
                           if it cannot serve the node                         */
} tpg_collective_algo;

/* A collective (sum). NCCL collectives are captured once into a child-graph
 * node; a one-shot or two-shot all-reduce is one kernel node of ours.
 * count is NCCL's: elements per rank's part for all-gather/reduce-scatter.
 * send and recv may be the same slot (in place). dtype is the slots' (must
 * match).
 *
 * All-reduce epilogue (optional; fields after `algo`). With s the sum over
 * ranks, i an element, c = i % hidden its column (absent terms are 0):
 *   h               = round(s + bias[c] + residual[i])
 *   residual_out[i] = h                                    (if set)
 *   recv[i]         = norm_weight set ? round(h / sqrt(mean over i's row of
 *                     h^2 + norm_eps) * norm_weight[c]) : h
 * h is rounded to the dtype before the norm, as an unfused pipeline would
 * store the residual. Every algorithm computes it: our kernels fuse it where
 * they write recv; after an NCCL all-reduce it is one more kernel node, so
 * AUTO/NCCL/ONESHOT/TWOSHOT mean the same (results agree to rounding). Rules,
 * each refused by name: hidden > 0, a multiple of 8, dividing count, and set
 * exactly when an epilogue view is; views of the send dtype, device memory,
 * 16-byte aligned (send and recv too); bias and norm_weight have hidden
 * elements, residual and residual_out count; residual_out either is residual
 * (the same view: the residual updated in place) or does not overlap it, and
 * overlaps neither send, recv, bias nor norm_weight; recv overlaps neither
 * residual, bias nor norm_weight. A Llama block's "x = x + attn; y =
 * rmsnorm(x)" is: send = the partial sums, residual = residual_out = x,
 * norm_weight = the norm's weight, recv = y.
 *
 * One rank (a graph created with no comm, or a one-rank comm: TP = 1): there
 * is nothing to exchange, so no NCCL call and no collective order; an
 * all-reduce with an epilogue becomes the epilogue's kernel alone (s = send),
 * a collective in place without one becomes no CUDA node at all (nodes after
 * it wait for its dependencies), and any other one a device-to-device copy
 * of count elements. The same plan serves TP = 1 and TP > 1; this is also
 * what lets an all-reduce sit in a conditional body at TP = 1.
 * tpg_graph_get_info's collective_nodes is then 0. */
typedef struct tpg_collective_desc {
  size_t size;             /* sizeof(tpg_collective_desc); the size of the
                              version without the epilogue (up to `algo`) is
                              accepted too, as a desc with no epilogue       */
  tpg_collective kind;
  tpg_view send, recv;
  size_t count;
  tpg_collective_algo algo; /* all-reduce only; others always use NCCL */
  /* All-reduce epilogue (all slots 0 and hidden 0: none). */
  size_t hidden;           /* row length: bias/norm index, norm rows         */
  tpg_view bias;           /* [hidden], added once (not per rank)             */
  tpg_view residual;       /* [count], read                                   */
  tpg_view residual_out;   /* [count], written with h                         */
  tpg_view norm_weight;    /* [hidden]; set: RMSNorm of h into recv           */
  float norm_eps;          /* >= 0, finite; TPG_COLLECTIVE_DESC_INIT: 1e-6     */
} tpg_collective_desc;
#define TPG_COLLECTIVE_DESC_INIT { sizeof(tpg_collective_desc) /* size */, TPG_ALL_REDUCE /* kind */,          \
                                   {0, 0, 0}, {0, 0, 0} /* send, recv: set them */, 0 /* count: set it */,     \
                                   TPG_ALGO_AUTO /* algo */, 0 /* hidden: no epilogue */,                      \
                                   {0, 0, 0}, {0, 0, 0}, {0, 0, 0}, {0, 0, 0} /* bias, residual, residual_out, \
                                   norm_weight: none */, 1e-6f /* norm_eps */ }

TPG_API tpg_status tpg_plan_add_collective(tpg_plan *plan, const tpg_collective_desc *desc,
                                           const tpg_node *deps, int ndeps, tpg_node *out);

/* An extra edge from -> to (to runs after from). tpg_plan_validate refuses cycles. */
TPG_API tpg_status tpg_plan_add_dependency(tpg_plan *plan, tpg_node from, tpg_node to);

/* A label for DOT output and error messages (copied). Default: "gemm#3" etc. */
TPG_API tpg_status tpg_plan_set_node_name(tpg_plan *plan, tpg_node node, const char *name);

/* Checks the whole plan: cycles, slot ranges, shape rules. tpg_graph_create
 * calls it too; it is exposed so plans can be checked without a GPU. */
TPG_API tpg_status tpg_plan_validate(const tpg_plan *plan);

TPG_API tpg_status tpg_plan_get_stats(const tpg_plan *plan, int *nodes /* OUT, may be NULL */,
                                  int *slots /* OUT, may be NULL */, int *collectives /* OUT, may be NULL */);

/* Says how many ranks this plan (one rank's part) is sharded for. A graph of
 * a plan with collectives and nranks > 1 then needs cfg->comm with exactly
 * nranks ranks (TPG_ERROR_INVALID_ARGUMENT otherwise): without a comm, a
 * collective runs as one rank's (see "One rank" in docs/design.md), and every
 * sum would silently be this rank's share. tpg_plan_mlp and
 * tpg_plan_add_linear call it when they add collectives; an engine that
 * shards by hand may too. Never called: no requirement. A second call must
 * give the same count; kept across tpg_plan_rollback. */
TPG_API tpg_status tpg_plan_set_ranks(tpg_plan *plan, int nranks);

/* Graphviz DOT of the plan into buf (cap bytes, NUL-terminated). *needed gets
 * the full length + 1. buf = NULL, cap = 0 only sizes it (TPG_SUCCESS); a buf
 * too small gives TPG_ERROR_INVALID_ARGUMENT with *needed set. */
TPG_API tpg_status tpg_plan_dot(const tpg_plan *plan, char *buf, size_t cap, size_t *needed /* OUT */);

/* ------------------------------------------------------------------------ */
/* The kit: an engine's own kernels and any library's work as plan nodes     */
/*
 * So that an engine's whole step is one graph, a plan also holds:
 *   - the engine's own kernels (tpg_plan_add_kernel): device code tpgraph
 *     loads for you (tpg_module_load*, looked up by name), or a CUkernel /
 *     CUfunction the engine already holds (a CUDA-runtime engine gets a
 *     cudaKernel_t, which is a CUkernel, from cudaGetKernel). Each argument
 *     is bytes by value or a slot view: tpgraph passes the view's device
 *     address, fills it in at tpg_graph_create and patches it on rebind.
 *   - any library's work (tpg_plan_add_captured): a callback that issues the
 *     work on a stream; tpgraph stream-captures it into a child graph at
 *     tpg_graph_create and captures it again when a slot it declared is
 *     rebound (cuBLAS, attention libraries, NCCL itself).
 *   - host callbacks (tpg_plan_add_host) and event record / wait nodes
 *     (tpg_plan_add_event_record / _wait) to order the graph against the
 *     engine's other streams.
 * And a graph gives its CUDA graph out (tpg_graph_export) to be embedded in
 * the engine's own graph; tpg_graph_launch may be stream-captured.
 */

/* Engine device code loaded by tpgraph. */
typedef struct tpg_module tpg_module;

/* Loads a cubin, a fatbin, or NUL-terminated PTX (bytes counts the NUL)
 * with cuLibraryLoadData: context-independent, so one module serves every
 * GPU it has an image for. The module keeps its own copy of the image (the
 * driver may load it lazily, at a kernel's first use), so the caller's may
 * be freed when the call returns.
 * Needs the driver (TPG_ERROR_NO_DRIVER without one); a bad image is
 * TPG_ERROR_INVALID_ARGUMENT with the driver's reason. */
TPG_API tpg_status tpg_module_load(const void *image, size_t bytes, tpg_module **out /* OUT, owned */);
/* The same from a file (.cubin, .fatbin, .ptx). */
TPG_API tpg_status tpg_module_load_file(const char *path, tpg_module **out /* OUT, owned */);
/* Unloads. Destroy every graph made from a plan that names the module
 * first: their kernel nodes run its code. */
TPG_API tpg_status tpg_module_destroy(tpg_module *module);

/* One kernel parameter: bytes by value, or the device address of a view. */
typedef enum tpg_arg_kind {
  TPG_ARG_BYTES = 0,       /* `size` bytes at `bytes`, copied when the node is added;
                              change it between launches with tpg_graph_set_kernel_arg */
  TPG_ARG_VIEW = 1,        /* a pointer parameter: bound address of view.slot + offset
                              (elements); patched on rebind                        */
  TPG_ARG_COND = 2         /* a condition's CUDA handle (cudaGraphConditionalHandle,
                              8 bytes), for cudaGraphSetConditional in the kernel;
                              the condition (tpg_plan_add_cond) is view.offset:
                              build it with tpg_arg_cond                          */
} tpg_arg_kind;

typedef struct tpg_arg {
  tpg_arg_kind kind;
  uint32_t size;           /* BYTES: the parameter's size, 1..4096; VIEW: 0 (means 8) or 8 */
  const void *bytes;       /* BYTES: the value; VIEW: unused                      */
  tpg_view view;           /* VIEW: a slot of the plan (device, scratch or host
                              memory); unused for BYTES                           */
} tpg_arg;

static inline tpg_arg tpg_arg_bytes(const void *value, uint32_t size) {
  tpg_arg a = {TPG_ARG_BYTES, size, value, {0, 0, 0}};
  return a;
}
static inline tpg_arg tpg_arg_view(tpg_slot slot, uint64_t offset) {
  tpg_arg a = {TPG_ARG_VIEW, 8, NULL, {slot, 0, offset}};
  return a;
}
/* A condition handle argument (TPG_ARG_COND), for the kernel parameter of
 * type cudaGraphConditionalHandle; tpg_cond is declared below. */
static inline tpg_arg tpg_arg_cond(uint32_t cond) {
  tpg_arg a = {TPG_ARG_COND, 8, NULL, {0, 0, cond}};
  return a;
}
/* A by-value argument from an lvalue: TPG_ARG_VALUE(n) for `int n`. It
 * holds n's address, not its value: n must live until the node is added. */
#define TPG_ARG_VALUE(lvalue) tpg_arg_bytes(&(lvalue), (uint32_t)sizeof(lvalue))

/* An engine kernel launch. Exactly one of (module, name), cu_kernel and
 * cu_function names the kernel. */
typedef struct tpg_kernel_desc {
  size_t size;             /* sizeof(tpg_kernel_desc)                            */
  const tpg_module *module;/* borrowed: with name, a kernel of a loaded module   */
  const char *name;        /* the kernel's (mangled, for C++) name; copied       */
  void *cu_kernel;         /* or a CUkernel / cudaKernel_t (context-independent) */
  void *cu_function;       /* or a CUfunction of the graph device's primary
                              context (the context tpgraph runs everything in)   */
  unsigned grid[3];        /* blocks, each >= 1                                  */
  unsigned block[3];       /* threads, each >= 1, product <= 1024                */
  unsigned shared_bytes;   /* dynamic shared memory per block; above 48 KiB the
                              kernel's limit is raised at tpg_graph_create       */
  unsigned cluster[3];     /* thread-block cluster (sm_90+); {0, 0, 0}: none     */
  int pdl;                 /* 1: the kernel executes griddepcontrol.wait
                              (cudaGridDependencySynchronize) in every block
                              before it touches memory an earlier node writes or
                              reads, so with TPG_GRAPH_PDL edges from kernel
                              nodes into it may be programmatic. 0: ordinary.    */
  const tpg_arg *args;     /* the kernel's parameters in order; copied           */
  int nargs;               /* >= 0                                               */
} tpg_kernel_desc;
#define TPG_KERNEL_DESC_INIT { sizeof(tpg_kernel_desc), NULL, NULL, NULL, NULL, {1, 1, 1}, {1, 1, 1}, 0, \
                               {0, 0, 0}, 0, NULL, 0 }

/* Adds a kernel node. The plan checks what it can without a GPU (one way of
 * naming the kernel, grid/block/cluster shapes, argument kinds and sizes,
 * views inside their slots); tpg_graph_create resolves the kernel on the
 * graph's device and checks the argument list against the kernel's real
 * parameters (cuKernelGetParamInfo / cuFuncGetParamInfo): a count or size
 * that differs is TPG_ERROR_INVALID_ARGUMENT naming the node, the argument,
 * and the expected size and offset ("node attn: args[2] is 4 bytes; the
 * kernel's parameter 2 is 8 bytes at offset 16"). A driver older than 12.4
 * cannot report parameters: arguments are then laid out by natural
 * alignment (each at the largest power of two <= 16 dividing its size, as C
 * lays out scalars, pointers and aligned structs) and their sizes are not
 * checked. Also refused at create: an unknown name, a block larger than the
 * kernel allows, shared_bytes beyond the GPU's limit. Rebinding a slot of a
 * VIEW argument is a kernel-node update (no re-instantiation). */
TPG_API tpg_status tpg_plan_add_kernel(tpg_plan *plan, const tpg_kernel_desc *desc, const tpg_node *deps,
                                       int ndeps, tpg_node *out /* OUT, may be NULL */);

/* Issues a node's work on `stream`; ptrs[i] is the address of the desc's
 * views[i] (bound pointer + offset). Returns 0 on success; anything else
 * fails the call that captured it (tpg_graph_create, _rebind, _update) with
 * the value in the message. */
typedef int (*tpg_capture_fn)(void *user, tpg_stream stream, void *const *ptrs, int nptrs);

/* Library work captured into a child-graph node.
 *
 * When: at tpg_graph_create, and again at every tpg_graph_rebind /
 * tpg_graph_update that changes the address of one of its views (then
 * cuGraphExecChildGraphNodeSetParams; no re-instantiation). In
 * TPG_MODE_EAGER fn runs at every launch, on the launch stream.
 * How: on the calling thread (in a graph set made with
 * TPG_GRAPH_SET_PARALLEL: a worker thread, beside other sizes' captures),
 * with the graph device's primary context current, on a private stream
 * captured in thread-local mode.
 * The callback must NOT: synchronize (device, stream, event), allocate or
 * free device memory (cudaMalloc, cudaMallocAsync, cuMemAlloc: give
 * libraries a workspace, e.g. cublasSetWorkspace, beforehand), use another
 * device or context, or keep `stream` after it returns. It may fork work to
 * other streams if it joins them back to `stream` with events, and must set
 * the library's stream to `stream` on every call (cublasSetStream; then
 * cublasSetWorkspace again: setting the stream returns cuBLAS to its own
 * workspace pool, which allocates).
 * Detected and refused with the node's name: an invalidated capture, a
 * capture with no work, memory allocation or free nodes, work of another
 * context, a callback that leaves another context current, a non-zero
 * return. A re-capture must have the first capture's shape (the same
 * kernels in the same order: CUDA swaps only parameters into an instantiated
 * graph); a library that picks other kernels for the new addresses makes the
 * rebind TPG_ERROR_UNSUPPORTED. TPG_MODE_CAPTURE runs fn inside its own
 * relaxed capture of the whole node sequence, without these checks. */
typedef struct tpg_captured_desc {
  size_t size;             /* sizeof(tpg_captured_desc)                          */
  tpg_capture_fn fn;       /* required                                           */
  void *user;              /* borrowed; passed to fn at every capture            */
  const tpg_view *views;   /* the slots the work reads or writes; copied         */
  const size_t *counts;    /* elements of each view, range-checked against its
                              slot; NULL: from the offset to the slot's end      */
  int nviews;              /* >= 0                                               */
} tpg_captured_desc;
#define TPG_CAPTURED_DESC_INIT { sizeof(tpg_captured_desc), NULL, NULL, NULL, NULL, 0 }

TPG_API tpg_status tpg_plan_add_captured(tpg_plan *plan, const tpg_captured_desc *desc, const tpg_node *deps,
                                         int ndeps, tpg_node *out /* OUT, may be NULL */);

/* A host callback node (cuGraphAddHostNode): fn(user) runs on a driver
 * thread when the node's dependencies are done. It must not call CUDA. */
typedef void (*tpg_host_fn)(void *user);
TPG_API tpg_status tpg_plan_add_host(tpg_plan *plan, tpg_host_fn fn, void *user /* borrowed */,
                                     const tpg_node *deps, int ndeps, tpg_node *out /* OUT, may be NULL */);

/* A CUDA event (CUevent == cudaEvent_t), borrowed: it must outlive the graphs. */
typedef struct CUevent_st *tpg_event;
/* Records `event` when the node's dependencies are done (other streams of
 * the engine can wait for it). */
TPG_API tpg_status tpg_plan_add_event_record(tpg_plan *plan, tpg_event event, const tpg_node *deps, int ndeps,
                                             tpg_node *out /* OUT, may be NULL */);
/* Waits for the last record of `event` (work of the engine's other streams)
 * before the node's successors run. */
TPG_API tpg_status tpg_plan_add_event_wait(tpg_plan *plan, tpg_event event, const tpg_node *deps, int ndeps,
                                           tpg_node *out /* OUT, may be NULL */);

/* ------------------------------------------------------------------------ */
/* Conditional nodes: IF / IF-ELSE, WHILE, SWITCH on a device-set value      */
/*
 * A conditional node runs one of its bodies (IF, SWITCH) or its body again
 * and again (WHILE) by the value of a condition that device code sets:
 * an engine kernel of the plan receives the condition's handle (TPG_ARG_COND)
 * and calls cudaGraphSetConditional(handle, value) (CUDA 12.3+; IF-ELSE and
 * SWITCH need 12.8+). A body is a sub-plan over the same plan's slots: after
 * tpg_plan_body_begin(plan, node, b), every node added (by any builder,
 * layers included) goes into body b of that conditional node, until
 * tpg_plan_body_end. Nodes of a body may depend only on nodes of the same
 * body; a body node without dependencies starts when the body does. Bodies
 * may hold conditional nodes (nesting).
 *
 *   tpg_cond c;  tpg_node loop;
 *   tpg_plan_add_cond(plan, 1, 1, &c);                 // 1 at each launch
 *   tpg_conditional_desc d = TPG_CONDITIONAL_DESC_INIT;
 *   d.type = TPG_COND_WHILE; d.cond = c;
 *   tpg_plan_add_conditional(plan, &d, NULL, 0, &loop);
 *   tpg_plan_body_begin(plan, loop, 0);
 *   ... nodes of one iteration; the last kernel gets tpg_arg_cond(c) and
 *       sets it to 0 to stop ...
 *   tpg_plan_body_end(plan);
 *
 * CUDA's rules for bodies (refused with the node's name, when the node is
 * added or at tpg_graph_create): no host nodes, no event record / wait
 * nodes, no NCCL collectives (their child graphs hold what bodies may not):
 * an all-reduce in a body runs our one-shot / two-shot kernel (TPG_ALGO_AUTO
 * picks whichever can serve it, whatever its size; TPG_ALGO_NCCL and
 * all-gather / reduce-scatter are refused), memset / memcpy nodes on device
 * or pinned memory only (both slot kinds are). Captured nodes are child
 * graphs, which CUDA allows when their work is kernels, memsets and copies
 * (cuBLAS GEMMs are); one that holds anything else fails at
 * tpg_graph_create naming the node. Every rank must take the same branch
 * and run the same number of iterations when a body holds a collective:
 * reduce the condition across ranks first (an all-reduce of the stop flag).
 *
 * Modes: conditional nodes need TPG_MODE_EXPLICIT: tpg_graph_create refuses
 * them (and TPG_ARG_COND arguments) in TPG_MODE_CAPTURE and TPG_MODE_EAGER,
 * which have no graph the handles could belong to. Rebind reaches the nodes
 * inside bodies (their exec setters); a whole-graph update of a plan with
 * conditional nodes is TPG_ERROR_UNSUPPORTED (the new graph's handles would
 * differ from the ones the exec's kernels hold). CUDA refuses child graphs
 * that hold conditional nodes, so such a graph cannot be embedded from
 * tpg_graph_export with cuGraphAddChildGraphNode, and tpg_graph_launch on a
 * capturing stream is TPG_ERROR_UNSUPPORTED.
 */

/* A condition of a plan: 1, 2, ...; 0 is none. */
typedef uint32_t tpg_cond;

/* A new condition. default_value: the value it holds before any kernel sets
 * it. reset = 1: it is set to default_value at the start of every launch
 * (CU_GRAPH_COND_ASSIGN_DEFAULT); reset = 0: only when the graph is
 * created, and afterwards it keeps what the last launch left. */
TPG_API tpg_status tpg_plan_add_cond(tpg_plan *plan, unsigned default_value, int reset,
                                     tpg_cond *out /* OUT */);

typedef enum tpg_cond_type {
  TPG_COND_IF = 0,     /* body 0 when the value is non-zero; body 1 (nbodies 2) when zero */
  TPG_COND_WHILE = 1,  /* body 0 while the value is non-zero (tested before each run)    */
  TPG_COND_SWITCH = 2  /* body n when the value is n; none when it is >= nbodies         */
} tpg_cond_type;

typedef struct tpg_conditional_desc {
  size_t size;             /* sizeof(tpg_conditional_desc)                      */
  tpg_cond_type type;
  tpg_cond cond;           /* of this plan; one condition serves one node      */
  int nbodies;             /* IF: 1 or 2; WHILE: 1; SWITCH: 1..256; 0: 1       */
} tpg_conditional_desc;
#define TPG_CONDITIONAL_DESC_INIT { sizeof(tpg_conditional_desc), TPG_COND_IF, 0, 0 }

/* Adds a conditional node (in the current body, if one is open). */
TPG_API tpg_status tpg_plan_add_conditional(tpg_plan *plan, const tpg_conditional_desc *desc, const tpg_node *deps,
                                            int ndeps, tpg_node *out /* OUT, may be NULL */);
/* Nodes added from now on go into body `body` of conditional node `node`
 * (which is in the current body, or at the top level when none is open). */
TPG_API tpg_status tpg_plan_body_begin(tpg_plan *plan, tpg_node node, int body);
/* Back to where the conditional node of the open body sits. Refused when no
 * body is open. */
TPG_API tpg_status tpg_plan_body_end(tpg_plan *plan);

/* Appends a copy of src's nodes to plan, into the open body if one is open:
 * one graph can then hold several plans of one builder, e.g. tpg_plan_mlp
 * for several token counts as the bodies of a SWITCH keyed by the token
 * count in device memory (buckets chosen on the device, instead of the host
 * picking a graph with tpg_mlp_buckets_pick). Views keep their slot ids, so
 * src's slots must be plan's first slots: the same names, dtypes and memory
 * kinds in the same order, each no larger than plan's (declare plan's from
 * the largest shape's plan, with tpg_plan_get_slot_info; plan may have more
 * slots after them). src must have no conditions and no open body; it is
 * not changed. A node CUDA forbids in the open body fails the call, which
 * then leaves plan as it was. nodes (may be NULL): nodes[i] gets the handle
 * in plan of src's node i (tpg_plan_get_stats(src) counts them), to hang later
 * nodes behind appended ones. */
TPG_API tpg_status tpg_plan_append(tpg_plan *plan, const tpg_plan *src, tpg_node *nodes /* OUT, may be NULL */);

/* ------------------------------------------------------------------------ */
/* Tensor-parallel layers                                                    */
/*
 * A stack of MLP blocks, split Megatron-style over nranks GPUs, as a plan for
 * one rank. Per layer, with x the hidden state [tokens, hidden]:
 *   GELU:   x = x + W2 gelu_tanh(W1 x + b1) + b2
 *   SWIGLU: x = x + W2 (silu(Wg x + bg) * (Wu x + bu)) + b2     (Llama)
 * W1 (or [Wg; Wu]) is split by rows (column-parallel: each rank computes its
 * ffn/nranks slice of h, no communication), W2 by columns (row-parallel: each
 * rank produces a partial sum, then one all-reduce). Rank 0's second GEMM
 * adds b2 and the residual in its epilogue, so the all-reduce yields the
 * finished x and both are added once, not per rank: 3 nodes per layer.
 *
 * Slots the plan declares (bind them by name with tpg_plan_find_slot):
 *   "x"  [tokens, hidden]  input, read by layer 0           (device)
 *   "y"  [tokens, hidden]  output, written by a final copy  (device)
 *   "l<i>.w1" [f1, hidden] this rank's W1 rows; f1 = ffn/nranks, or 2*ffn/nranks
 *                          for SWIGLU laid out [Wg rows; Wu rows]
 *   "l<i>.b1" [f1]         (when desc.bias)
 *   "l<i>.w2" [hidden, ffn/nranks]  this rank's W2 columns, as a dense matrix
 *   "l<i>.b2" [hidden]     (when desc.bias; only rank 0 reads it)
 *   "act", "h"             scratch, owned by the graph
 * Only x and y are read/written by kernel nodes alone, so rebinding them per
 * decode step never re-captures NCCL.
 *
 * Overlap: TPG_OVERLAP_CHUNKED splits the tokens into `chunks` row blocks that
 * flow through the layers independently: chunk c's all-reduce runs on its own
 * branch beside chunk c+1's GEMMs (and the next layer's), the GEMMs leaving
 * `sm_reserve` SMs to NCCL. AUTO does not chunk: on 2 x H200 it measured
 * slower at every tpbench shape (docs/performance.md); CHUNKED stays for
 * machines and shapes where communication dominates.
 */

typedef enum tpg_mlp_kind { TPG_MLP_GELU = 0, TPG_MLP_SWIGLU = 1 } tpg_mlp_kind;

typedef enum tpg_overlap {
  TPG_OVERLAP_AUTO = 0,    /* NONE (measured faster than CHUNKED on 2 x H200)       */
  TPG_OVERLAP_NONE = 1,    /* one GEMM per weight, then the all-reduce              */
  TPG_OVERLAP_CHUNKED = 2  /* token chunks on separate branches                     */
} tpg_overlap;

typedef struct tpg_mlp_desc {
  size_t size;             /* sizeof(tpg_mlp_desc)                                */
  tpg_mlp_kind kind;
  int layers;              /* >= 1                                                */
  int tokens;              /* >= 1                                                */
  int hidden;              /* multiple of 8                                       */
  int ffn;                 /* the whole model's; nranks must divide it and
                              ffn / nranks must be a multiple of 8                */
  int rank, nranks;        /* this plan's rank; nranks >= 1                       */
  tpg_dtype dtype;         /* TPG_BF16 or TPG_F16                                 */
  int bias;                /* 1: b1 and b2 slots (Megatron); 0: none (Llama)      */
  int collectives;         /* 1: all-reduce per layer; 0: leave them out (compute
                              only, to measure exposed communication)             */
  tpg_overlap overlap;
  int chunks;              /* CHUNKED: 2..16, <= tokens; 0: 2                     */
  int sm_reserve;          /* CHUNKED: SMs left to NCCL by persistent GEMMs; 0: 16 */
  tpg_collective_algo allreduce; /* of every layer's all-reduce             */
} tpg_mlp_desc;
#define TPG_MLP_DESC_INIT { sizeof(tpg_mlp_desc) /* size */, TPG_MLP_GELU /* kind */, 1 /* layers */,         \
                            1 /* tokens */, 0, 0 /* hidden, ffn: set them */, 0, 1 /* rank, nranks */,      \
                            TPG_BF16 /* dtype */, 1 /* bias */, 1 /* collectives */,                       \
                            TPG_OVERLAP_AUTO /* overlap */, 0 /* chunks: 2 */, 0 /* sm_reserve: 16 */,      \
                            TPG_ALGO_AUTO /* allreduce */ }

/* A new plan holding the rank's part of the stack (see above). Uneven splits
 * are refused with the rule that failed. */
TPG_API tpg_status tpg_plan_mlp(const tpg_mlp_desc *desc, tpg_plan **out /* OUT, owned */);

/* Whole (unsplit) weights of one layer, device pointers, PyTorch layout. */
typedef struct tpg_mlp_whole_layer {
  const void *w1;          /* GELU: [ffn, hidden]; SWIGLU: gate [ffn, hidden]   */
  const void *w1_up;       /* SWIGLU: up [ffn, hidden]; GELU: NULL              */
  const void *b1;          /* [ffn] (SWIGLU with bias: gate bias)               */
  const void *b1_up;       /* SWIGLU with bias: up bias [ffn]; else NULL        */
  const void *w2;          /* [hidden, ffn]                                      */
  const void *b2;          /* [hidden]                                           */
} tpg_mlp_whole_layer;

/* This rank's buffers for one layer, laid out as tpg_plan_mlp's slots. */
typedef struct tpg_mlp_rank_layer {
  void *w1;                /* [f1, hidden]: GELU rows [r*F, (r+1)*F) of w1;
                              SWIGLU those rows of gate, then of up             */
  void *b1;                /* [f1] (when desc->bias)                            */
  void *w2;                /* [hidden, F]: columns [r*F, (r+1)*F) of w2         */
  void *b2;                /* [hidden] (when desc->bias)                        */
} tpg_mlp_rank_layer;

/* Copies desc->rank's part of one layer's whole weights into its buffers,
 * device to device on `stream` (asynchronous), for engines that load an
 * unsplit checkpoint. F = ffn / nranks. `device` holds both the whole and the
 * rank's buffers; the copies run in its primary context. */
TPG_API tpg_status tpg_mlp_shard_layer(const tpg_mlp_desc *desc, int device, const tpg_mlp_whole_layer *whole,
                                       const tpg_mlp_rank_layer *out, tpg_stream stream);

/* ------------------------------------------------------------------------ */
/* Graphs: a plan materialized and instantiated on one GPU                   */
/*
 * Ownership: the graph copies the plan, owns its CUDA graph, exec, child
 * graphs, kernel workspaces and private stream. Bound buffers are borrowed:
 * they must stay allocated while a launch that uses them may run (rebinding
 * away from a buffer does not end that duty for launches already queued).
 * The comm is borrowed and must outlive the graph.
 */

typedef struct tpg_graph tpg_graph;

/* A slot's buffer. ptr stays void * (ABI of 0.x): a device pointer is the
 * CUdeviceptr (an unsigned 64-bit integer) cast to it — tpg_binding_cu does
 * the cast — and a pinned host pointer is given as is.
 *
 * Checked when given (tpg_graph_create, _rebind, _update; refused with
 * TPG_ERROR_INVALID_ARGUMENT naming the binding, its slot and what was
 * expected): not NULL, 16-byte aligned, memory the driver knows, of the
 * slot's kind (device memory of the graph's GPU, or page-locked host memory),
 * and an ALLOCATION that covers the slot from ptr on (ptr + count * element
 * size; the driver reports the allocation's range, and the message gives
 * both sizes). What cannot be caught: the driver's allocation is what
 * cuMemAlloc / cudaMalloc / cuMemHostAlloc returned, so a buffer a pool
 * allocator carved from a larger block (PyTorch's caching allocator,
 * cudaMallocAsync pools, an engine's own arena) passes as long as the block
 * goes on far enough, whatever the buffer's own size; and the dtype of the
 * bytes is not known to the driver at all. The Python binding checks a
 * tensor's own dtype and size before C sees it; C callers with pools must
 * size their sub-buffers to the slot. */
typedef struct tpg_binding {
  tpg_slot slot;
  void *ptr;               /* device pointer (CUdeviceptr cast), or pinned host pointer */
} tpg_binding;

/* A binding from a CUdeviceptr (cuMemAlloc's type): {slot, (void *)dptr}. */
static inline tpg_binding tpg_binding_cu(tpg_slot slot, unsigned long long dptr) {
  tpg_binding b = {slot, (void *)(uintptr_t)dptr};
  return b;
}

/* How a graph runs. EXPLICIT is the product; the other two run the very same
 * nodes the ways this library replaces, for benchmarks and debugging. */
typedef enum tpg_graph_mode {
  TPG_MODE_EXPLICIT = 0, /* driver-API nodes, instantiated once (default)         */
  TPG_MODE_CAPTURE = 1,  /* the node sequence stream-captured on one stream into a
                            graph; rebind/update are TPG_ERROR_UNSUPPORTED          */
  TPG_MODE_EAGER = 2     /* no graph: each launch issues every node on the stream,
                            one after another (cuLaunchKernel, ncclAllReduce, ...) */
} tpg_graph_mode;

typedef struct tpg_graph_config {
  size_t size;             /* sizeof(tpg_graph_config)                          */
  unsigned magic;          /* TPG_CONFIG_MAGIC                                   */
  int version;             /* TPG_VERSION_CODE                                   */
  int device;              /* CUDA device ordinal; must match comm's device     */
  tpg_comm *comm;          /* borrowed; NULL: one rank (TP 1), where collectives
                              exchange nothing (see tpg_plan_add_collective)   */
  const tpg_binding *bindings; /* every non-scratch slot the plan uses, once    */
  int nbindings;
  tpg_graph_mode mode;     /* TPG_MODE_EXPLICIT unless benchmarking             */
  unsigned flags;          /* TPG_GRAPH_* below (NCCL_SYMMETRIC, PDL)           */
  /* Tuning (added after 0.2.0: a smaller config from an older header is
   * accepted, these read as 0). 0 everywhere means the built-in default; the
   * TPG_* environment variable named at each field overrides it (parsed
   * strictly: a value that is not a number in range is an error). Every rank
   * must use the same values: ranks compare the algorithms they resolved. */
  size_t allreduce_push_max;    /* bytes: TPG_ALGO_AUTO runs the push one-shot kernel up
                                   to this (default 2 MiB); $TPG_ONESHOT_PUSH_MAX      */
  size_t allreduce_twoshot_max; /* bytes: ... and two-shot up to this, NCCL above
                                   (default 8 MiB); $TPG_TWOSHOT_MAX                  */
  int allreduce_twoshot_blocks; /* the two-shot kernel's grid, 1..128 (default 128);
                                   $TPG_TWOSHOT_BLOCKS                                */
  int gemm_streamk;             /* Hopper GEMMs: TPG_STREAMK_AUTO (0, default),
                                   TPG_STREAMK_OFF, TPG_STREAMK_ALWAYS; $TPG_GEMM_STREAMK
                                   (0 off, 1 auto, 2 always)                          */
  int pdl_prefetch;             /* with TPG_GRAPH_PDL: W bytes per row a decode GEMV
                                   prefetches into L2 before its wait, 0..1 MiB (default
                                   0: measured a loss); $TPG_PDL_PREFETCH            */
  /* GEMM tuning (appended after pdl_prefetch: a config from a header without
   * them is smaller, accepted, and reads these as 0).
   * Off by default: the deterministic selector (derived from the model zoo,
   * docs/kernels.md) is within a few percent of the best candidate per shape
   * on H200, picks the same kernels on every rank, and costs nothing at
   * creation. On: each distinct GEMM (shape, dtype, epilogue, SM count) not
   * yet in the process cache or the cache file is timed once, during
   * tpg_graph_create only (a few ms each, within gemm_tune_budget_ms for the
   * graph); later graphs and, with a file, later processes only look up, so
   * creation stays fast on a warm cache. Update and rebind never re-time
   * (rebind keeps each kernel; update takes cached choices, else the
   * selector's). Ranks time independently and may pick different kernels
   * (same math, other rounding); a cache file filled beforehand (by one
   * process, e.g. bench/gemm_tune_bench) makes them agree. With tuning on,
   * gemm_streamk applies to the selector's candidate only: a timed stream-K
   * or whole-tile variant wins on its time. */
  int gemm_tune;                /* TPG_TUNE_DEFAULT (0: off), TPG_TUNE_OFF, TPG_TUNE_ON;
                                   $TPG_GEMM_TUNE (0 off, 1 on)                       */
  const char *gemm_tune_cache;  /* borrowed during create: a cache file shared between
                                   processes (locked, replaced atomically); NULL: the
                                   process cache only; $TPG_GEMM_TUNE_CACHE           */
  int gemm_tune_budget_ms;      /* timing one graph may spend, 1..3600000 (default
                                   2000); GEMMs past it take the selector's kernel;
                                   $TPG_GEMM_TUNE_BUDGET_MS                           */
} tpg_graph_config;
#define TPG_GRAPH_CONFIG_INIT { sizeof(tpg_graph_config) /* size */, TPG_CONFIG_MAGIC /* magic */,              \
                                TPG_VERSION_CODE /* version */, 0 /* device */, NULL /* comm */,               \
                                NULL, 0 /* bindings, nbindings */, TPG_MODE_EXPLICIT /* mode */, 0u /* flags */, \
                                0, 0, 0 /* allreduce_push_max, _twoshot_max, _twoshot_blocks: defaults */,     \
                                0 /* gemm_streamk: TPG_STREAMK_AUTO */, 0 /* pdl_prefetch: none */,            \
                                0 /* gemm_tune: off */, NULL /* gemm_tune_cache */, 0 /* budget: 2 s */ }

/* tpg_graph_config.gemm_streamk */
#define TPG_STREAMK_AUTO 0   /* stream-K where the selector's cost model says it pays (docs/kernels.md) */
#define TPG_STREAMK_OFF 1    /* never                                                             */
#define TPG_STREAMK_ALWAYS 2 /* always on the Hopper TMA path (only the last wave is split)       */

/* tpg_graph_config.gemm_tune */
#define TPG_TUNE_DEFAULT 0   /* today: off                                   */
#define TPG_TUNE_OFF 1       /* the deterministic selector                   */
#define TPG_TUNE_ON 2        /* time candidates at creation (see the config) */

/* Allocate scratch slots that collectives use with ncclMemAlloc and register
 * them as NCCL symmetric windows (every rank, same order, same size), so
 * NCCL 2.27+ may pick its symmetric kernels for the NCCL all-reduces of the
 * graph (TPG_ALGO_NCCL, or AUTO where NCCL serves). Windows are registered
 * at tpg_graph_create only (a whole-graph update that grows such a slot is
 * refused). Registration is collective and bounded by the comm's deadline.
 * Measured on 2 x H200 (docs/performance.md): faster than plain NCCL up to
 * 32 KiB and at 2-4 MiB, slower at 64 KiB-1 MiB and 16 MiB; tpgraph's own
 * kernels beat both up to 8 MiB. NCCL 2.28.9 returns ncclSuccess from the registration on
 * a non-blocking comm before it is done; tpgraph waits for it. */
#define TPG_GRAPH_NCCL_SYMMETRIC 0x1u

/* Opt-in: Programmatic Dependent Launch edges (CUDA 12.3+ graph edge data,
 * sm_90+). An edge from one of our kernel nodes (GEMM, axpby, concat, our
 * all-reduce, the epilogue after an NCCL all-reduce) to a GEMM, axpby,
 * concat or our all-reduce kernel node becomes programmatic: the later
 * kernel is launched while the
 * earlier one still runs, its blocks get resident, then wait in every block
 * for the earlier kernel's completion and memory flush before they touch
 * anything. Results are the same as without the flag; it hides part of the
 * ~0.8 us launch gap of each dependent kernel node (measured on 2 x H200,
 * TP=2: 0.6 us per layer at M=1, ~1%; docs/performance.md). Our all-reduce
 * kernels wait before anything else, so for them only the launch moves
 * earlier. Edges into NCCL child graphs, the epilogue after them, memcpy,
 * memset and empty nodes stay ordinary.
 * Ignored (ordinary edges, tpg_graph_info.programmatic_edges = 0) on GPUs
 * below sm_90 and in TPG_MODE_CAPTURE / TPG_MODE_EAGER. Rebind and update
 * keep the edges. cfg->pdl_prefetch or $TPG_PDL_PREFETCH (bytes per W row,
 * default 0) makes a decode GEMV (tokens <= 16) prefetch its first weights
 * into L2 before its wait — measured a loss (docs/performance.md), kept for
 * experiments; read at tpg_graph_create. */
#define TPG_GRAPH_PDL 0x2u

/* Validates the plan and the bindings (see tpg_binding), materializes every
 * node through the driver API and instantiates once. Time: the first graph of
 * a process also loads the embedded device code its kernels live in (each
 * fatbin once per process, only those needed); tpg_graph_info breaks the
 * creation down (prepare_us, materialize_us, instantiate_us, kernel_load_us). With collectives this is a collective call: ranks
 * first compare a fingerprint of their graphs' collectives (kind, count,
 * dtype, algorithm, epilogue shape, in order; a mismatch is TPG_ERROR_INVALID_ARGUMENT on
 * every rank instead of a hang), then NCCL collectives are captured into
 * child graphs — so every rank creates its graphs in the same order. */
TPG_API tpg_status tpg_graph_create(const tpg_plan *plan, const tpg_graph_config *cfg,
                                    tpg_graph **out /* OUT, owned */);
/* Waits for the graph's launches to finish, then frees everything it owns.
 * If its device context cannot be made current, nothing is freed and the
 * error is returned: the graph is intact, call destroy again. Any other
 * failure (the wait) is returned after everything was freed. A destroyed
 * graph, plan, module, comm or bucket set is refused by every call with
 * TPG_ERROR_INVALID_ARGUMENT naming it ("... is not a live tpg_graph"),
 * without reading through the pointer: live handles are kept in a set. */
TPG_API tpg_status tpg_graph_destroy(tpg_graph *graph);

/* Enqueues one run of the graph on stream (asynchronous). The stream may be
 * capturing (cudaStreamBeginCapture, any mode): in TPG_MODE_EXPLICIT and
 * TPG_MODE_CAPTURE the graph as bound now is added to the capture as one
 * child-graph node after the capture's current work (later rebinds do not
 * reach that copy); TPG_MODE_EAGER issues its work into the capture as it
 * goes (capture callbacks run inside the caller's capture). Either way the
 * engine's captured graph runs on the graph's scratch slots and workspaces:
 * keep this graph alive while that one may run (tpg_graph_destroy waits only
 * for launches made here). Like tpg_graph_export, refused
 * (TPG_ERROR_UNSUPPORTED) once a rebind or update re-captured an NCCL
 * collective of the graph. */
TPG_API tpg_status tpg_graph_launch(tpg_graph *graph, tpg_stream stream);

/* Points slots at other buffers for the next launches, updating exactly the
 * nodes that use them through the per-node exec setters: no re-instantiation.
 * A slot used by a collective is re-captured from NCCL, so every rank must
 * rebind its collective slots with the same calls in the same order. Stream-
 * ordered like a launch: launches already enqueued keep the old buffers. */
TPG_API tpg_status tpg_graph_rebind(tpg_graph *graph, const tpg_binding *bindings, int nbindings);

/* Whole-graph update: materializes `plan` (NULL: the graph's own plan) with the
 * graph's bindings overridden by `bindings`, and applies it with
 * cuGraphExecUpdate. The plan must have the same nodes, kinds and edges, and
 * each engine kernel the same desc.pdl; a GEMM whose kernel would need more
 * workspace than its place at creation, or a kernel that keeps state in a
 * workspace of its own where it had none, needs a new graph. If CUDA
 * refuses a node's change, the message names the node. On any refusal
 * nothing changes. Collective: every rank calls it when the plan has
 * collectives. */
TPG_API tpg_status tpg_graph_update(tpg_graph *graph, const tpg_plan *plan,
                                    const tpg_binding *bindings, int nbindings);

/* Sets by-value argument `index` (a TPG_ARG_BYTES of tpg_plan_add_kernel)
 * of engine kernel node `node` to the `size` bytes at `value` (copied) for
 * the next launches, through the exec's kernel node setter
 * (cuGraphExecKernelNodeSetParams): no re-instantiation, the way a rebind
 * changes a pointer. Arguments are otherwise frozen when the node is added;
 * this is for a scalar that changes between launches (a sequence length, a
 * step counter). `node` is the plan's handle for it (the graph's copy keeps
 * the handles); `size` must be the argument's size as added. The value
 * stays through later rebinds, a tpg_graph_update with plan NULL, and
 * tpg_graph_export (the template follows at the next export); a
 * tpg_graph_update with a new plan takes that plan's values. Stream-ordered
 * like a rebind: launches already enqueued keep the old value. A node in a
 * conditional body works the same. Refused with TPG_ERROR_INVALID_ARGUMENT
 * naming the node: another node kind, a view or condition argument (rebind
 * its slot instead), an index or size that does not match; TPG_MODE_CAPTURE
 * graphs: TPG_ERROR_UNSUPPORTED; TPG_MODE_EAGER: the next launch uses it. On
 * failure the argument keeps its value. */
TPG_API tpg_status tpg_graph_set_kernel_arg(tpg_graph *graph, tpg_node node, int index, const void *value,
                                           size_t size);

typedef struct tpg_graph_info {
  int nodes;                 /* nodes of the parent graph                 */
  int kernel_nodes;          /* ours: our all-reduces and the epilogue node
                                after an NCCL all-reduce included            */
  int memset_nodes, memcpy_nodes, empty_nodes;
  int child_nodes;           /* NCCL collectives (child graphs)            */
  size_t workspace_bytes;    /* device memory the graph owns: scratch slots
                                and kernel workspaces, as allocated          */
  double materialize_us;     /* host time to build the CUDA graph         */
  double instantiate_us;     /* host time of cuGraphInstantiate           */
  int programmatic_edges;    /* TPG_GRAPH_PDL: programmatic edges of the CUDA
                                graph, as cuGraphGetEdges reports them     */
  /* The kit's nodes (counted in `nodes` too): */
  int user_kernel_nodes;     /* engine kernels (tpg_plan_add_kernel)        */
  int captured_nodes;        /* captured library work (child graphs)       */
  int host_nodes;            /* host callbacks                              */
  int event_nodes;           /* event record and wait nodes                 */
  /* GEMM tuning at creation (cfg->gemm_tune; 0 when off): */
  double gemm_tune_us;       /* host time spent timing GEMM candidates      */
  int gemm_tuned;            /* GEMM nodes whose kernel was timed now       */
  int gemm_tune_cached;      /* GEMM nodes found in the process cache or the
                                cache file (a second node of one shape too) */
  /* Appended after 0.3.0 (a caller passing 0.3.0's size gets the fields
   * above). Where creation's time goes: creation is checks, then prepare_us,
   * materialize_us, instantiate_us: */
  double prepare_us;         /* host time before materialize: each node's
                                kernel choice and workspace, scratch slots,
                                GEMM tuning (gemm_tune_us) */
  double kernel_load_us;     /* host time, within prepare_us and
                                materialize_us, loading device code and getting
                                kernel functions: tpgraph's embedded fatbins
                                are loaded once per process, each when a graph
                                first needs one of its kernels, so the first
                                graph pays most of this and later ones little */
  int collective_nodes;      /* nodes that communicate: NCCL child graphs and
                                our all-reduce kernels. 0 on one rank (no
                                comm, or a one-rank comm), where a collective
                                becomes its epilogue kernel, a memcpy node or
                                nothing (counted as such above)              */
  /* GEMM nodes by the family that runs them (each is one of kernel_nodes;
   * a cuBLASLt one is a child graph of cuBLASLt's kernels): */
  int gemm_ours_nodes;       /* our kernels                                 */
  int gemm_cutlass_nodes;    /* the CUTLASS instantiations                  */
  int gemm_cublaslt_nodes;   /* cuBLASLt (TPG_GEMM_FAMILY, the rule, tuning)  */
  /* GEMM workspaces (split-K / stream-K partials, cuBLASLt's): nodes that
   * can never run at the same time (a path of edges leads from one to the
   * other) share one buffer, so a chain of GEMMs takes one: */
  int gemm_workspaces;       /* buffers the GEMM nodes' workspaces take     */
  size_t gemm_workspace_bytes; /* their bytes: in workspace_bytes when the
                                graph owns them; in a graph set, shared
                                ones in its arena (tpg_graph_set_size_info),
                                those kept alone in workspace_bytes         */
} tpg_graph_info;

TPG_API tpg_status tpg_graph_get_info(const tpg_graph *graph, tpg_graph_info *out /* OUT */, size_t size /* sizeof *out */);

/* A CUDA graph: CUgraph (== cudaGraph_t), without including cuda.h, as
 * tpg_stream is a CUstream. */
typedef struct CUgraph_st *tpg_cu_graph;

/* The graph's CUDA graph (borrowed: owned by the graph, valid until
 * tpg_graph_destroy), as the next launch runs it: the handle stays the
 * same, and each call brings it up to date with the rebinds, argument
 * changes and updates made since (rebind itself leaves that to this call,
 * to stay cheap), which is why the graph is not const here. To embed it
 * in an engine's own graph, add it as a child (cuGraphAddChildGraphNode
 * copies it); after a rebind, call this again and refresh the copy in the
 * engine's exec with cuGraphExecChildGraphNodeSetParams.
 * The engine's graph uses this graph's scratch slots and workspaces: keep
 * this graph alive while that one may run. TPG_MODE_EXPLICIT only
 * (TPG_ERROR_UNSUPPORTED otherwise). Once a rebind or update has re-captured
 * an NCCL collective, export is TPG_ERROR_UNSUPPORTED: NCCL's new capture
 * holds resources only the exec keeps, so the template cannot follow it
 * (export before rebinding collective buffers; rebinding buffers of kernel,
 * copy and captured nodes is fine). */
TPG_API tpg_status tpg_graph_get_cu_graph(tpg_graph *graph, tpg_cu_graph *out /* OUT, borrowed */);
/* The same, in its first form (kept for source compatibility): a void * for
 * the CUgraph, and a const graph although its template is brought up to
 * date. Prefer tpg_graph_get_cu_graph. */
TPG_API tpg_status tpg_graph_export(const tpg_graph *graph, void **cu_graph /* OUT, borrowed */);

/* Writes the instantiated graph as DOT (cuGraphDebugDotPrint, verbose). */
TPG_API tpg_status tpg_graph_write_dot(const tpg_graph *graph, const char *path);

/* ------------------------------------------------------------------------ */
/* Token-count buckets of an MLP stack                                      */

/* Token-count buckets: engines run many batch sizes, and a graph is built for
 * one. These make one graph per bucket size of the same stack (the list is
 * sorted, duplicates dropped, and desc->tokens — the maximum — always added),
 * all bound to the same buffers: bind x and y to buffers of the maximum size
 * (and the weights once); a smaller bucket reads and writes their first rows.
 * A call with `tokens` runs the smallest bucket >= tokens: pad rows beyond
 * `tokens` with anything (their results are ignored).
 * Creation, like tpg_graph_create, is collective over the comm's ranks. */
typedef struct tpg_mlp_buckets tpg_mlp_buckets;

TPG_API tpg_status tpg_mlp_buckets_create(const tpg_mlp_desc *desc, const int *sizes, int nsizes,
                                          const tpg_graph_config *cfg /* bindings by tpg_plan_mlp's slot ids */,
                                          tpg_mlp_buckets **out /* OUT, owned */);
/* As tpg_graph_destroy: a graph whose destroy failed because its context
 * could not be made current stays in b, which then stays live: call again. */
TPG_API tpg_status tpg_mlp_buckets_destroy(tpg_mlp_buckets *b);
/* The bucket for `tokens` (1..max): its size and graph (borrowed). */
TPG_API tpg_status tpg_mlp_buckets_pick(tpg_mlp_buckets *b, int tokens, int *bucket_tokens /* OUT */,
                                        tpg_graph **graph /* OUT, borrowed */);
/* Bucket i (0..count-1, ascending): its size and the device memory its graph
 * took, measured (free memory before and after creating it). The buckets are
 * a graph set (tpg_graph_set): their scratch is one arena, allocated before
 * the graphs and so in no bucket's figure. */
TPG_API tpg_status tpg_mlp_buckets_get_info(const tpg_mlp_buckets *b, int i, int *count /* OUT, may be NULL */,
                                        int *tokens /* OUT, may be NULL */, size_t *device_bytes /* OUT, may be NULL */);
/* The slot id of a named slot of the stack (same in every bucket), for bindings. */
TPG_API tpg_status tpg_mlp_find_slot(const tpg_mlp_desc *desc, const char *name, tpg_slot *out /* OUT */);

/* ------------------------------------------------------------------------ */
/* Tensor-parallel linear layers: pieces to compose engines from            */
/*
 * tpg_plan_mlp builds a whole MLP stack; engines with their own blocks
 * (attention projections, LM heads) add single tensor-parallel linears to a
 * plan they build themselves, on slots they declared, and chain them with
 * the node each call returns. W is a PyTorch Linear weight [out, in], split
 * Megatron-style over nranks:
 *
 *   COLUMN  W split by output rows: rank r holds rows [r*F, (r+1)*F), F =
 *           out/nranks, and computes y_r = act(x W_r^T + b_r) for the whole
 *           x [tokens, in]. No communication, unless `gather`: then every
 *           rank gets the full y [tokens, out], row-major.
 *   ROW     W split by input columns: rank r holds columns [r*K, (r+1)*K),
 *           K = in/nranks, reads its slice x_r [tokens, K] (e.g. a COLUMN
 *           layer's y_r) and gets y = sum_r x_r W_r^T + b (+ residual) on
 *           every rank. Bias and residual are added once, by rank 0's GEMM
 *           epilogue before the all-reduce (not once per rank).
 *
 * Nodes added (tokens T, F = out/nranks):
 *   COLUMN, no gather or nranks 1:  GEMM -> y
 *   COLUMN, gather, T = 1:          GEMM -> y[r*F..]; all-gather in place on y
 *                                   (for one token rank blocks already are
 *                                   row-major [1, out]: no layout step)
 *   COLUMN, gather, T > 1:          GEMM -> work[r*T*F..]; all-gather in place
 *                                   on work ([R][T][F], rank-major); one
 *                                   tpg_plan_add_concat_cols node work -> y
 *                                   ([T][R*F]). A column split followed by an
 *                                   all-gather is NOT an all-reduce, and its
 *                                   raw result is not [T, out] when T > 1.
 *   ROW, nranks 1:                  GEMM (+bias, +residual) -> y
 *   ROW, nranks > 1:                GEMM -> y (rank 0: +bias, +residual);
 *                                   all-reduce in place on y (desc->algo)
 * The call adds nothing unless every argument is good: on failure the plan
 * is unchanged. Rebinding: x, w and bias are read by the GEMM alone (a kernel
 * node: cheap). y is the collective's buffer for ROW with nranks > 1 and for
 * gathered COLUMN at T = 1: rebinding it is a kernel-node update with the
 * one-shot all-reduce, but an NCCL re-capture (every rank, same order) with
 * NCCL. To keep y cheap to rebind, give the layer a TPG_MEM_SCRATCH y and add
 * a tpg_plan_add_memcpy to your own slot after it, as tpg_plan_mlp does.
 *
 * An attention-output-like pair (column, then row on its slice):
 *
 *   tpg_linear_desc up = TPG_LINEAR_DESC_INIT;             // [T,H] -> [T,D/R]
 *   up.kind = TPG_LINEAR_COLUMN; up.rank = r; up.nranks = R; up.tokens = T;
 *   up.in_features = H; up.out_features = D; up.activation = TPG_ACT_GELU;
 *   up.x = (tpg_view){x, 0, 0}; up.w = (tpg_view){w1, 0, 0};
 *   up.bias = (tpg_view){b1, 0, 0}; up.y = (tpg_view){h, 0, 0};   // h: scratch [T, D/R]
 *   tpg_node n;
 *   tpg_plan_add_linear(plan, &up, NULL, 0, &n);
 *   tpg_linear_desc down = up;                              // [T,D/R] -> [T,H]
 *   down.kind = TPG_LINEAR_ROW; down.in_features = D; down.out_features = H;
 *   down.activation = TPG_ACT_NONE; down.x = up.y; down.w = (tpg_view){w2, 0, 0};
 *   down.bias = (tpg_view){b2, 0, 0}; down.residual = up.x; down.y = (tpg_view){y, 0, 0};
 *   tpg_plan_add_linear(plan, &down, &n, 1, &n);            // after the first
 *
 * Splits must be even: nranks divides the split dimension and each part is a
 * multiple of 8 elements (16-byte rows); other splits are refused with the
 * rule (pad the weight to such a size instead).
 */

typedef enum tpg_linear_kind {
  TPG_LINEAR_COLUMN = 0,   /* W split by output rows    */
  TPG_LINEAR_ROW = 1       /* W split by input columns  */
} tpg_linear_kind;

/* Activations fused in a COLUMN layer's GEMM epilogue. */
typedef enum tpg_activation {
  TPG_ACT_NONE = 0,
  TPG_ACT_GELU = 1,        /* gelu_tanh(x W^T + b): needs a bias            */
  TPG_ACT_SILU = 2,        /* silu(x W^T + b): needs a bias                 */
  TPG_ACT_SWIGLU = 3,      /* silu(x Wg^T + bg) * (x Wu^T + bu), bias optional;
                              out_features is the activated width, and the
                              rank's w is [2F, in]: its Wg rows, then its Wu rows */
  TPG_ACTIVATION_COUNT = 4
} tpg_activation;

typedef struct tpg_linear_desc {
  size_t size;             /* sizeof(tpg_linear_desc)                              */
  tpg_linear_kind kind;
  int rank, nranks;        /* this plan's rank; nranks >= 1 (the comm's)           */
  int tokens;              /* rows of x, >= 1                                      */
  int in_features;         /* the whole (unsplit) layer's: multiple of 8 (COLUMN),
                              of 8 * nranks (ROW)                                  */
  int out_features;        /* the whole layer's: multiple of 8 * nranks (COLUMN),
                              of 8 (ROW)                                           */
  tpg_dtype dtype;         /* TPG_BF16 or TPG_F16: every view's slot               */
  int gather;              /* COLUMN: 1 = all-gather y to [tokens, out] on every rank */
  tpg_activation activation; /* COLUMN only                                        */
  tpg_collective_algo algo;  /* ROW: the all-reduce's; COLUMN: AUTO or NCCL
                                (all-gathers always use NCCL)                      */
  const char *name;        /* label prefix of the nodes ("<name>.gemm", ...); NULL:
                              default labels. Copied.                              */
  /* Views of slots of the plan, device or scratch memory, 16-byte aligned:   */
  tpg_view x;              /* COLUMN [tokens, in]; ROW [tokens, in/nranks]         */
  tpg_view w;              /* COLUMN [F, in] (SWIGLU [2F, in]); ROW [out, in/nranks] */
  tpg_view bias;           /* slot 0: none. COLUMN [F] (SWIGLU [2F]); ROW [out],
                              read by rank 0 only                                  */
  tpg_view residual;       /* ROW only; slot 0: none. [tokens, out], added once
                              (rank 0); may be exactly y (y += layer(x))           */
  tpg_view y;              /* COLUMN [tokens, F], gathered [tokens, out];
                              ROW [tokens, out]. Must not overlap x               */
  tpg_view work;           /* COLUMN, gather, nranks > 1, tokens > 1: [tokens * out],
                              the all-gather's rank-major buffer (a scratch slot
                              is the natural choice); unused otherwise             */
  tpg_x_norm x_norm;       /* ssq set: x is RMSNorm'd as the GEMM loads it, from
                              the sums a tpg_linear_norm with ssq wrote (tokens <=
                              TPG_NORM_FOLD_MAX_ROWS; tpg_gemm_desc's fold)        */
} tpg_linear_desc;
#define TPG_LINEAR_DESC_INIT { sizeof(tpg_linear_desc) /* size */, TPG_LINEAR_COLUMN /* kind */,                 \
                               0, 1 /* rank, nranks */, 1 /* tokens */, 0, 0 /* in_, out_features: set them */, \
                               TPG_BF16 /* dtype */, 0 /* gather */, TPG_ACT_NONE /* activation */,             \
                               TPG_ALGO_AUTO /* algo */, NULL /* name */,                                       \
                               {0, 0, 0}, {0, 0, 0} /* x, w: set them */, {0, 0, 0}, {0, 0, 0} /* bias,          \
                               residual: none */, {0, 0, 0} /* y: set it */, {0, 0, 0} /* work: none */,        \
                               TPG_X_NORM_NONE /* x_norm */ }

/* Adds one rank's part of a tensor-parallel linear layer to plan (see above),
 * after deps; *out (may be NULL, may alias a dep) gets the layer's last node.
 * With a collective, every rank must add its layers in the same order. */
TPG_API tpg_status tpg_plan_add_linear(tpg_plan *plan, const tpg_linear_desc *desc, const tpg_node *deps, int ndeps,
                                       tpg_node *out /* OUT, may be NULL */);

/* dst[r, b*cols + c] = src[b, r, c] for b < blocks, r < rows, c < cols: the
 * `blocks` row-major [rows, cols] matrices lying one after another in src
 * (what an all-gather of per-rank [rows, cols] parts gives) put side by side
 * as one row-major [rows, blocks*cols] matrix (torch.cat(parts, dim=1)). Any
 * dtype (same in both); dst and src disjoint. One kernel node. */
TPG_API tpg_status tpg_plan_add_concat_cols(tpg_plan *plan, tpg_view dst, tpg_view src, int blocks, int rows,
                                            int cols, const tpg_node *deps, int ndeps, tpg_node *out);

/* A whole (unsplit) layer's weights, device pointers, PyTorch layout. */
typedef struct tpg_linear_whole {
  const void *w;           /* [out, in]; SWIGLU: the gate projection             */
  const void *w_up;        /* SWIGLU: the up projection [out, in]; else NULL     */
  const void *bias;        /* [out] (SWIGLU: gate bias); NULL if desc has none   */
  const void *bias_up;     /* SWIGLU with a bias: the up bias [out]; else NULL   */
} tpg_linear_whole;

/* This rank's buffers, laid out as desc->w and desc->bias expect. */
typedef struct tpg_linear_part {
  void *w;                 /* COLUMN [F, in] (SWIGLU [2F, in]); ROW [out, in/nranks] */
  void *bias;              /* COLUMN [F] (SWIGLU [2F]); ROW [out] (the whole bias);
                              when desc->bias.slot != 0, else ignored            */
} tpg_linear_part;

/* Copies desc->rank's part of a whole layer into its buffers, device to device
 * on `stream` (asynchronous), in the primary context of `device`, which holds
 * both. desc is checked as tpg_plan_add_linear checks its shape fields; its
 * views are not used, except that bias.slot != 0 means "the layer has a bias". */
TPG_API tpg_status tpg_linear_shard(const tpg_linear_desc *desc, int device, const tpg_linear_whole *whole,
                                    const tpg_linear_part *out, tpg_stream stream);

/* ------------------------------------------------------------------------ */
/* Engines: device code embedded by name, a plan's slots in one call         */

/* One fatbin of a table that //tools/cuda:defs.bzl's cuda_fatbin (or CMake's
 * tpgraph_embed_kernels) embeds in a program: the rule defines
 * `const tpg_embedded_blob <symbol>[]`, one entry per .cu source, named by
 * its stem, and a last entry whose name is NULL. Declare it where it is used
 * (C++: extern "C" const tpg_embedded_blob my_kernels[];). */
typedef struct tpg_embedded_blob {
  const char *name;            /* the .cu file's stem, e.g. "kernels"; NULL ends the table */
  const unsigned char *start;  /* the fatbin's bytes                                       */
  const unsigned char *end;
} tpg_embedded_blob;

/* Loads blob `name` of `table` as tpg_module_load loads an image (the module
 * keeps its own copy). A name the table lacks is TPG_ERROR_INVALID_ARGUMENT
 * listing the names it has. The scan stops after 4096 entries (a corrupt
 * table); a shorter table without its NULL entry is read past its end. */
TPG_API tpg_status tpg_module_load_embedded(const tpg_embedded_blob *table /* borrowed */, const char *name,
                                            tpg_module **out /* OUT, owned */);

/* Declares in `plan` every slot of `src`, in order, with its name, dtype,
 * memory kind and count, so that src's slot ids are plan's and src can be
 * appended (tpg_plan_append). Where plan has slots already, its first ones
 * must be src's (same names, dtypes and memory kinds in the same order, each
 * at least as large): they are kept and only src's later slots are added, so
 * copying from the plan of the largest shape first and then from smaller
 * ones declares nothing more. On failure plan is unchanged; src is never
 * changed. *added (may be NULL): the number of slots declared now. */
TPG_API tpg_status tpg_plan_copy_slots(tpg_plan *plan, const tpg_plan *src, int *added /* OUT, may be NULL */);

/* ------------------------------------------------------------------------ */
/* A row-parallel linear whose all-reduce finishes the block                 */
/*
 * What every tensor-parallel block ends with: the row-parallel projection
 * (attention output, MLP down), its all-reduce, the residual add and the
 * next RMSNorm, as one call. With h = sum over ranks of x_r W_r^T + bias +
 * residual (bias and residual added once), per row of [tokens, out]:
 *   residual_out = h                                      (if set)
 *   y            = RMSNorm(h) * norm_weight               (h if no norm)
 * Nodes: the GEMM of every rank writes its partial sum into `partial` (no
 * bias or residual: the epilogue adds them once), then the all-reduce of
 * partial into y with the epilogue fused (tpg_collective_desc's epilogue;
 * desc->algo picks the algorithm). On one rank (nranks 1: no comm needed)
 * the same two nodes, the all-reduce being its epilogue's kernel alone.
 * A Llama block's "x = x + o_proj(attn); h2 = rmsnorm(x)" is: residual =
 * residual_out = x, norm_weight = the norm's weight, y = h2.
 *
 *   tpg_linear_desc d = TPG_LINEAR_DESC_INIT;           // as for ROW
 *   d.kind = TPG_LINEAR_ROW; d.rank = r; d.nranks = R; d.tokens = T;
 *   d.in_features = D; d.out_features = H;
 *   d.x = attn; d.w = wo; d.residual = x; d.y = h2;
 *   tpg_linear_norm e = TPG_LINEAR_NORM_INIT;
 *   e.partial = part;                  // [T, H] scratch
 *   e.residual_out = x; e.norm_weight = mlp_norm; e.norm_eps = 1e-5f;
 *   tpg_plan_add_linear_norm(plan, &d, &e, &prev, 1, &prev);
 *
 * With norm->ssq set (one rank, tokens <= TPG_NORM_FOLD_MAX_ROWS) the norm is
 * folded (tpg_x_norm): one node, the GEMM, adds bias and residual in its
 * epilogue, writes h to residual_out (required) and its rows' sums of
 * squares to ssq, and y is not written (its slot must be 0): the next linear
 * reads residual_out as its x with x_norm = {ssq, norm_weight, norm_eps}.
 * partial is then unused.
 *
 * desc is checked as tpg_plan_add_linear checks a ROW layer (kind must be
 * TPG_LINEAR_ROW). The views, each refused by name: partial [tokens, out],
 * a range of its own (it overlaps no other view); residual_out [tokens,
 * out], exactly desc->residual (updated in place) or a range of its own;
 * norm_weight [out]; y overlaps neither residual, residual_out, bias,
 * norm_weight, x nor w. Rebinding y or partial re-captures an NCCL all-reduce
 * (our kernels: a kernel-node update), as for tpg_plan_add_linear.
 */
typedef struct tpg_linear_norm {
  size_t size;             /* sizeof(tpg_linear_norm)                               */
  tpg_view partial;        /* [tokens, out]: this rank's GEMM output, the
                              all-reduce's send (a TPG_MEM_SCRATCH slot fits)      */
  tpg_view residual_out;   /* [tokens, out]: gets h; slot 0: h is not kept          */
  tpg_view norm_weight;    /* [out]; slot 0: no norm, y = h                         */
  float norm_eps;          /* >= 0, finite; TPG_LINEAR_NORM_INIT: 1e-6              */
  tpg_view ssq;            /* fp32 [tokens, TPG_NORM_FOLD_GROUPS(out)]: the norm
                              folded into the next linear (above); slot 0: not  */
} tpg_linear_norm;
#define TPG_LINEAR_NORM_INIT { sizeof(tpg_linear_norm) /* size */, {0, 0, 0} /* partial: set it */,           \
                               {0, 0, 0}, {0, 0, 0} /* residual_out, norm_weight: none */, 1e-6f /* norm_eps */, \
                               {0, 0, 0} /* ssq: not folded */ }

/* Adds the layer (above) after deps; *out (may be NULL, may alias a dep) gets
 * the all-reduce node. All or nothing: on failure the plan is unchanged.
 * With nranks > 1 every rank must add its layers in the same order. */
TPG_API tpg_status tpg_plan_add_linear_norm(tpg_plan *plan, const tpg_linear_desc *desc, const tpg_linear_norm *norm,
                                            const tpg_node *deps, int ndeps, tpg_node *out /* OUT, may be NULL */);

/* ------------------------------------------------------------------------ */
/* Graph sets: one step at many batch sizes                                  */
/*
 * An engine that batches continuously runs its step at whatever batch size
 * each step has. A graph set holds the step for a list of sizes, built
 * without stream capture: the engine's builder is called once per size and
 * hands back that size's plan and bindings; each step picks the smallest
 * size that holds its batch (the rows above the batch are padding, their
 * results ignored) and launches that graph.
 *
 *   static tpg_status build(void *user, int size, tpg_graph_set_step *out) {
 *     struct engine *e = user;
 *     out->plan = engine_step_plan(e, size);         // the set owns it now
 *     out->bindings = e->bind; out->nbindings = e->nbind;  // copied by the set
 *     return out->plan ? TPG_SUCCESS : TPG_ERROR_OUT_OF_MEMORY;
 *   }
 *   static const int sizes[] = {1, 2, 4, 8, 16, 24, 32, 40, ..., 248, 256};
 *   tpg_graph_set *set;                              // cfg: device, comm, flags
 *   tpg_graph_set_create(sizes, 35, build, &engine, &cfg, 0, &set);
 *   each step:  int s; tpg_graph *g;
 *               tpg_graph_set_pick(set, batch, &s, &g);  // s >= batch
 *               tpg_graph_launch(g, stream);
 *
 * Memory. The scratch slots (TPG_MEM_SCRATCH) and GEMM workspaces of every
 * size live in ONE arena the set owns: the largest scratch of any size,
 * then for each k the largest k-th GEMM workspace buffer of any size (the
 * sum may exceed any one size's need). Each graph lays its own scratch out
 * from the arena's start, and its k-th GEMM workspace buffer where every
 * size's k-th lies. So the set's
 * memory is the arena, plus each graph's own allocations (scratch that is
 * an NCCL window, a CUTLASS stream-K workspace), plus what the driver
 * allocates for each exec (tpg_graph_set_get_size_info reports each, the
 * last as measured). The price of sharing, and the rule: AT MOST
 * ONE GRAPH OF A SET RUNS AT A TIME. Launch them on one stream (the engine's
 * step stream), or order launches on other streams with events; scratch
 * holds nothing from one launch to the next. Bound buffers are the
 * builder's: usually buffers for the largest size, whose first rows the
 * smaller sizes use, bound once for all.
 *
 * Creation is tpg_graph_create's for each size, largest first (collective
 * with a comm: every rank creates its sets with the same sizes in the same
 * order). The graphs are borrowed from the set: launch and rebind them (a
 * rebind reaches one graph: rebind each graph the step uses, or keep
 * per-step values in a pinned slot), never destroy them.
 *
 * TPG_GRAPH_SET_RETARGET keeps one exec instead, built for the largest size,
 * and each pick of another size rewrites every node through the exec setters
 * (grids, GEMM shapes and kernels, counts) from parameters prepared at
 * creation: memory of one graph, a switch that costs host time per node
 * (docs/batching.md has the measurement and when each wins). It needs every
 * size's plan to have the largest's nodes, kinds, edges and slots, the same
 * bindings, TPG_MODE_EXPLICIT, and nodes whose exec setters take every
 * parameter: GEMM (of one pdl_prefetch), element-wise, memset (of one width),
 * memcpy, empty, engine kernels (of one cluster shape and desc.pdl) and
 * all-reduces by our kernels or on one
 * rank; an NCCL collective, captured work, a GEMM that cuBLASLt runs (a
 * child graph), host, event and conditional nodes are refused
 * (TPG_ERROR_UNSUPPORTED naming the node). tpg_graph_update
 * is refused on its graph, and tpg_graph_set_kernel_arg reaches the picked
 * size only.
 */
typedef struct tpg_graph_set tpg_graph_set;

/* What a builder hands back for one size. */
typedef struct tpg_graph_set_step {
  tpg_plan *plan;               /* OUT: the size's plan; the set owns it from
                                   here on (destroys it, also on failure)      */
  const tpg_binding *bindings;  /* OUT: every non-scratch slot's buffer, as
                                   tpg_graph_config's; copied before the builder
                                   is called again                              */
  int nbindings;
} tpg_graph_set_step;

/* Builds the step for batch size `size` into *out (zeroed before the call).
 * Return TPG_SUCCESS, or a failure (its tpg_last_error() is kept in the
 * set's message). */
typedef tpg_status (*tpg_graph_set_builder)(void *user, int size, tpg_graph_set_step *out);

#define TPG_GRAPH_SET_RETARGET 0x1u      /* one exec, retargeted at each pick (above)      */
#define TPG_GRAPH_SET_PRIVATE_SCRATCH 0x2u /* each graph allocates its own scratch and
                                            workspaces (no arena: what sharing saves,
                                            for measurements)                           */
#define TPG_GRAPH_SET_PARALLEL 0x4u      /* finish the graphs on up to 8 worker threads
                                            (below); not with RETARGET, nor with a comm
                                            of several ranks                            */

/* sizes: 1..1024 batch sizes, each >= 1, any order (sorted, duplicates
 * dropped). build(user, size, ...) is called once per size, largest first,
 * on the calling thread. cfg as for tpg_graph_create (device, comm, mode,
 * flags, tuning), but with no bindings of its own: they come from the
 * builder. With TPG_GRAPH_SET_PARALLEL each size's nodes are materialized
 * and its exec instantiated on worker threads, several sizes at once (the
 * kernels and GEMM choices are made first, on the calling thread): a
 * captured node's callback (tpg_plan_add_captured) then runs on a worker,
 * at the same time as other sizes' callbacks, and each size's
 * measured_bytes is 0 (the set's total still holds). */
TPG_API tpg_status tpg_graph_set_create(const int *sizes, int nsizes, tpg_graph_set_builder build,
                                        void *user /* borrowed, during the call */, const tpg_graph_config *cfg,
                                        unsigned flags, tpg_graph_set **out /* OUT, owned */);
/* Destroys every graph (waiting for their launches, as tpg_graph_destroy),
 * then the arena. A graph whose destroy failed because its context could not
 * be made current stays, and the set with it: call again. */
TPG_API tpg_status tpg_graph_set_destroy(tpg_graph_set *set);
/* The graph for `batch` rows (1..the largest size): the smallest size >=
 * batch, into *size, and its graph (borrowed). With TPG_GRAPH_SET_RETARGET
 * the one graph, retargeted to *size if another size was picked last
 * (stream-ordered like a rebind: launches already enqueued run as before). */
TPG_API tpg_status tpg_graph_set_pick(tpg_graph_set *set, int batch, int *size /* OUT */,
                                      tpg_graph **graph /* OUT, borrowed */);

typedef struct tpg_graph_set_info {
  int count;               /* sizes                                                  */
  int retarget;            /* 1: one exec (TPG_GRAPH_SET_RETARGET)                   */
  int graphs;              /* graphs (and execs) the set holds: count, or 1          */
  size_t arena_bytes;      /* the arena every size shares: scratch and GEMM
                              workspaces (RETARGET: the workspaces only, the
                              scratch being the one graph's own)                 */
  size_t own_bytes;        /* the graphs' own allocations, summed: kernel workspaces
                              and scratch outside the arena (tpg_graph_info's
                              workspace_bytes), and a retargeted exec's variants'   */
  size_t measured_bytes;   /* free device memory before creation less after it: the
                              arena, own_bytes and what the driver allocated for the
                              execs (approximate: the driver maps in pages, and other
                              work on the GPU moves it too)                          */
  double build_us;         /* host time of the whole creation                        */
  double builder_us;       /* of it, in the builder                                  */
  size_t workspace_bytes;  /* of arena_bytes, the GEMM workspaces every size shares:
                              buffer k as large as the largest size's k-th       */
} tpg_graph_set_info;
TPG_API tpg_status tpg_graph_set_get_info(const tpg_graph_set *set, tpg_graph_set_info *out /* OUT */,
                                          size_t size /* sizeof *out */);

typedef struct tpg_graph_set_size_info {
  int size;                /* the batch size                                          */
  size_t own_bytes;        /* this size's own allocations (as above)                  */
  size_t arena_bytes;      /* what this size needs of an arena: its scratch and
                              its shared GEMM workspaces, reported even where
                              the set keeps them elsewhere (PRIVATE_SCRATCH,
                              RETARGET's scratch)                                */
  size_t measured_bytes;   /* free device memory before its graph's creation less
                              after (own_bytes + the driver's for the exec); 0
                              with TPG_GRAPH_SET_PARALLEL                       */
  double builder_us;       /* the builder's time for this size                        */
  double create_us;        /* creating its graph (RETARGET: preparing its nodes)      */
  double instantiate_us;   /* of that, cuGraphInstantiate (0 for a retargeted size)   */
  size_t workspace_bytes;  /* of arena_bytes, its shared GEMM workspaces
                              (tpg_graph_info's gemm_workspace_bytes less the
                              buffers kept alone, which it owns)                  */
} tpg_graph_set_size_info;
/* Size i of the set, 0..count-1 in ascending order. */
TPG_API tpg_status tpg_graph_set_get_size_info(const tpg_graph_set *set, int i,
                                               tpg_graph_set_size_info *out /* OUT */, size_t size /* sizeof *out */);

#ifdef __cplusplus
}
#endif
#endif /* TPGRAPH_H */
