/* tpgfake.h - control of the stand-in CUDA driver + NCCL (tests/fake/).
 *
 * A test binary that links //tests/fake:fake and sets TPG_LIBCUDA to
 * //tests/fake:libcuda_fake.so (tpgfake_setup does it from argv[1]) runs
 * tpgraph with no GPU: device memory is host memory, every copy, fill,
 * collective and kernel pointer argument is checked against the live
 * allocations, every object is counted, and any driver or NCCL call can be
 * made to fail once. What the fake reports:
 *   violations  accesses outside a live allocation, invalid or stale handles,
 *               calls without a current context, mismatched collectives
 *   live        objects not released (allocations, streams, events, graphs,
 *               execs, context retains, IPC mappings, comms, windows,
 *               conditional handles)
 *   calls       numbered failure points passed since the last tpgfake_reset
 * Environment: TPG_FAKE_DEVICES (GPUs, default 2, at most 8),
 * TPG_FAKE_FAIL ("#k": fail the k-th injectable call; "name:n": the n-th
 * call of name), TPG_FAKE_VERBOSE=1 (trace every call to stderr).
 * Calls that release something (free, destroy, release, unload, close,
 * abort) and the error-text calls never fail: a failed release cannot be
 * handled by the caller, it can only leak.
 */
#ifndef TPGFAKE_H
#define TPGFAKE_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Sets TPG_LIBCUDA to argv[1] unless it is set already (tests get the shim's
 * path as their first argument from Bazel), and TPG_LIBNCCL and
 * TPG_LIBCUBLASLT to the same shim unless they are set (the stand-in
 * cuBLASLt: fake_cublaslt.c). Returns 0, or -1 with a message on stderr
 * when there is no path. */
int tpgfake_setup(int argc, char **argv);

/* Zeroes the call counter and the violation counter and cancels any planned
 * failure. Live objects are not touched. */
void tpgfake_reset(void);
/* Fails the k-th injectable call from the last reset (1-based); 0: none. */
void tpgfake_fail_at(long k);
/* Fails the n-th call of the named entry point ("cuMemAlloc",
 * "ncclAllReduce", ...) from the last reset; n = 0: every call of it (e.g.
 * so that every rank fails alike); NULL: none. */
void tpgfake_fail_call(const char *name, long n);
/* Injectable calls since the last reset. Polling calls (cuStreamQuery,
 * cuEventQuery, ncclCommGetAsyncError) are not counted: how often they run
 * depends on timing; they fail only by name. */
long tpgfake_calls(void);
/* The name of the call that was failed since the last reset, or NULL. */
const char *tpgfake_failed(void);
/* Violations since the last reset; the first few are kept as text. */
long tpgfake_violations(void);
const char *tpgfake_violation_text(void);
/* Live objects now; `why` (may be NULL) gets a summary "3 allocations, ...". */
long tpgfake_live(char *why, size_t cap);
/* Stream work that is waiting (for a collective's other ranks). */
long tpgfake_pending(void);
/* Kernel launches run (checked) since the last reset. */
long tpgfake_kernels(void);
/* Of those, the TMA GEMM kernels (tpg_gemm_sm90tma_*: three tensor maps
 * checked against the argument block's pointers). */
long tpgfake_tma_gemm_kernels(void);
/* Of those, the CUTLASS GEMM kernels (tpg_cutlass_*: the plain view checked
 * as any GEMM's, and every tensor map inside CUTLASS's Params checked to map
 * one of its pointers, so a rebind that left one behind is caught). */
long tpgfake_cutlass_gemm_kernels(void);

/* Buffers for tests, without a context: device memory of `device` (a pointer
 * tpgraph accepts for TPG_MEM_DEVICE slots, readable by the test directly:
 * it is host memory), pinned host memory (TPG_MEM_HOST), and their free.
 * They count as live objects like any other allocation. */
void *tpgfake_dev_alloc(int device, size_t bytes);
void *tpgfake_host_alloc(size_t bytes);
void tpgfake_free(void *p);
/* Bytes of device memory live on `device` now (the library's and the test's). */
size_t tpgfake_device_bytes(int device);

/* ---- for the kit's tests (kit_fake_test): C kernels, captures, graphs ----
 * The fake knows C kernels that compute, reachable as any module's kernels
 * by name: "axpy"(float *y, const float *x, int n, double a, float b):
 * y = a*x + b, "scale2"(float *y, const float *x, int n): y = 2x, and two
 * that set a condition of a conditional node (cudaGraphSetConditional):
 * "cond_set"(handle, const int *v): to v[0], and
 * "cond_countdown"(handle, int *ctr): --ctr[0], then to ctr[0] > 0.
 * Conditional nodes run the body their condition picks when the stream
 * reaches them; conditions made with CU_GRAPH_COND_ASSIGN_DEFAULT take their
 * default at each launch. */
enum {
  TPGFAKE_C_LAUNCH,       /* cuGraphLaunch */
  TPGFAKE_C_EXEC_KSET,    /* cuGraphExecKernelNodeSetParams */
  TPGFAKE_C_EXEC_CHILD,   /* cuGraphExecChildGraphNodeSetParams */
  TPGFAKE_C_EXEC_UPDATE,  /* successful cuGraphExecUpdate */
  TPGFAKE_C_TMPL_KSET,    /* cuGraphKernelNodeSetParams */
  TPGFAKE_C_CAPTURES,     /* cuStreamBeginCapture */
  TPGFAKE_C_HOST,         /* host functions run */
  TPGFAKE_C_EVREC,        /* event record nodes run / external records */
  TPGFAKE_C_EVWAIT,       /* event wait nodes run / external waits */
  TPGFAKE_C_CLUSTER_NODE, /* kernel nodes given a 2-CTA cluster */
  TPGFAKE_C_CLUSTER_LAUNCH, /* cuLaunchKernelEx with a 2-CTA cluster */
  TPGFAKE_C_CLUSTER_Y,    /* kernel nodes or cuLaunchKernelEx given a cluster
                             along y (the CUTLASS kernels' 1 x 2)        */
  TPGFAKE_C_LT_MATMUL,    /* cuBLASLt matmuls run (fake_cublaslt.c)      */
  TPGFAKE_C_PROG_EDGES,   /* programmatic edges added, in any graph (bodies too) */
  TPGFAKE_C_LT_HANDLES,   /* cuBLASLt handles made (cublasLtCreate)       */
  TPGFAKE_C_LT_SM_TARGET  /* cuBLASLt matmuls run with an SM-count target */
};
long tpgfake_counter(int which);
/* The workspace pointers (NULL: none) of the GEMM kernels and cuBLASLt
 * matmuls run since the last reset, in order: the first `cap` into out;
 * returns how many ran. A GEMM kernel whose workspace's first 256 bytes
 * (its counters) are not zero at entry is a violation; a matmul leaves its
 * workspace dirty (0x5A). */
long tpgfake_gemm_workspaces(void **out, long cap);
/* The C kernel `name` as a CUkernel / CUfunction handle (the same here). */
void *tpgfake_kernel(const char *name);
/* Launches C kernel `name` on `stream` (captured when capturing), as a
 * library would; 0 or the CUresult. */
int tpgfake_launch(void *stream, const char *name, void **params);
/* Adds a stream-ordered allocation to the capture on `stream` (what
 * cudaMallocAsync captures); marks the capture invalidated (what a
 * synchronize inside a capture does). */
void tpgfake_capture_alloc(void *stream);
void tpgfake_capture_invalidate(void *stream);
/* A stream of device 0, its capture begun / ended (the graph or NULL), a
 * graph instantiated, an exec run, and their destruction: the driver calls,
 * made with device 0's context current, for tests that drive captures and
 * graphs tpgraph gave them. tpgfake_run_graph runs a graph's nodes at once. */
void *tpgfake_stream(void);
void tpgfake_stream_destroy(void *stream);
int tpgfake_begin(void *stream);
void *tpgfake_end(void *stream);
void *tpgfake_instantiate(void *graph);
void tpgfake_exec_launch(void *exec);
void tpgfake_exec_destroy(void *exec);
void tpgfake_graph_destroy(void *graph);
void tpgfake_run_graph(void *graph);
/* Device 0's context made current on this thread (a retain of its own) and
 * popped again: for tests that call the library's internals directly, as
 * its graph calls do with the context current. */
void tpgfake_ctx_push(void);
void tpgfake_ctx_pop(void);
/* An event of device 0 (a live CUevent for event nodes) and its destruction. */
void *tpgfake_event(void);
void tpgfake_event_destroy(void *event);

#ifdef __cplusplus
}
#endif
#endif
