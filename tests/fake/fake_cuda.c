/* fake_cuda.c - the CUDA driver entry points tpgraph loads (lib/cuda_driver.h),
 * on host memory.
 *
 * Each entry point takes the fake's lock, counts itself as a possible failure
 * point (fk_inject), validates every handle against the live sets before
 * touching it, and reports misuse as a violation besides returning the error
 * CUDA would. The table handed to cuGetProcAddress is generated from
 * TPG_CU_FUNCS, with a compile-time check that each fake has the exact type
 * of the PFN_ typedef the library casts it to: an entry point added to the
 * library without a fake here fails the build, not a test.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "lib/cuda_driver.h"
#include "tests/fake/fake_entry.h"
#include "tests/fake/tpgfake.h"

#define FK_TOTAL_MEM ((size_t)141 << 30) /* an H200's 141 GiB, as far as cuMemGetInfo tells */

static int g_inited;

/* ---- init, version, errors ---- */

static CUresult fk_cuInit(unsigned flags) {
  (void)flags;
  fk_lock();
  g_inited = 1;
  fk_unlock();
  return CUDA_SUCCESS;
}

static CUresult fk_cuDriverGetVersion(int *v) {
  if (!v) return CUDA_ERROR_INVALID_VALUE;
  *v = 13000;
  return CUDA_SUCCESS;
}

static const struct {
  CUresult r;
  const char *name, *text;
} g_errs[] = {
    {CUDA_SUCCESS, "CUDA_SUCCESS", "no error"},
    {CUDA_ERROR_INVALID_VALUE, "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
    {CUDA_ERROR_OUT_OF_MEMORY, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
    {CUDA_ERROR_INVALID_CONTEXT, "CUDA_ERROR_INVALID_CONTEXT", "invalid device context"},
    {CUDA_ERROR_INVALID_HANDLE, "CUDA_ERROR_INVALID_HANDLE", "invalid resource handle"},
    {CUDA_ERROR_NOT_FOUND, "CUDA_ERROR_NOT_FOUND", "named symbol not found"},
    {CUDA_ERROR_NOT_READY, "CUDA_ERROR_NOT_READY", "device not ready"},
    {CUDA_ERROR_LAUNCH_TIMEOUT, "CUDA_ERROR_LAUNCH_TIMEOUT", "the launch timed out and was terminated"},
    {CUDA_ERROR_INVALID_DEVICE, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"},
    {CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED, "CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED",
     "peer access is already enabled"},
    {CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED",
     "operation not permitted when stream is capturing"},
    {CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED",
     "operation failed due to a previous error during capture"},
    {CUDA_ERROR_ILLEGAL_STATE, "CUDA_ERROR_ILLEGAL_STATE", "the operation is not permitted in this state"},
    {CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE, "CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE",
     "the graph update was not performed because it included changes which violated constraints"},
    {CUDA_ERROR_UNKNOWN, "CUDA_ERROR_UNKNOWN", "unknown error (injected by tpgfake)"},
};

static CUresult fk_cuGetErrorName(CUresult r, const char **s) {
  for (size_t i = 0; i < sizeof g_errs / sizeof g_errs[0]; i++)
    if (g_errs[i].r == r) {
      *s = g_errs[i].name;
      return CUDA_SUCCESS;
    }
  *s = NULL;
  return CUDA_ERROR_INVALID_VALUE;
}

static CUresult fk_cuGetErrorString(CUresult r, const char **s) {
  for (size_t i = 0; i < sizeof g_errs / sizeof g_errs[0]; i++)
    if (g_errs[i].r == r) {
      *s = g_errs[i].text;
      return CUDA_SUCCESS;
    }
  *s = NULL;
  return CUDA_ERROR_INVALID_VALUE;
}

/* ---- devices and contexts ---- */

static CUresult fk_cuDeviceGetCount(int *n) {
  ENTER("cuDeviceGetCount");
  *n = fk_ndevices();
  LEAVE
}

static CUresult fk_cuDeviceGet(CUdevice *d, int ordinal) {
  ENTER("cuDeviceGet");
  if (ordinal < 0 || ordinal >= fk_ndevices()) FAIL(CUDA_ERROR_INVALID_DEVICE);
  *d = ordinal;
  LEAVE
}

static int dev_ok(CUdevice d) { return d >= 0 && d < fk_ndevices(); }

static CUresult fk_cuDeviceGetName(char *name, int len, CUdevice d) {
  ENTER("cuDeviceGetName");
  if (!dev_ok(d) || len <= 0) FAIL(CUDA_ERROR_INVALID_VALUE);
  snprintf(name, (size_t)len, "tpgfake sm_90 #%d (host memory)", (int)d);
  LEAVE
}

static CUresult fk_cuDeviceGetAttribute(int *v, CUdevice_attribute a, CUdevice d) {
  ENTER("cuDeviceGetAttribute");
  if (!dev_ok(d)) FAIL(CUDA_ERROR_INVALID_DEVICE);
  switch (a) {
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: *v = 9; break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: *v = 0; break;
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: *v = 132; break;
    case CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE: *v = 50 << 20; break;
    default: *v = 0; break;
  }
  LEAVE
}

static CUresult fk_cuDeviceTotalMem(size_t *b, CUdevice d) {
  ENTER("cuDeviceTotalMem");
  if (!dev_ok(d)) FAIL(CUDA_ERROR_INVALID_DEVICE);
  *b = FK_TOTAL_MEM;
  LEAVE
}

static CUresult fk_cuDeviceCanAccessPeer(int *can, CUdevice d, CUdevice peer) {
  ENTER("cuDeviceCanAccessPeer");
  if (!dev_ok(d) || !dev_ok(peer)) FAIL(CUDA_ERROR_INVALID_DEVICE);
  *can = d != peer;
  LEAVE
}

static CUresult fk_cuDevicePrimaryCtxRetain(CUcontext *c, CUdevice d) {
  ENTER("cuDevicePrimaryCtxRetain");
  if (!dev_ok(d)) FAIL(CUDA_ERROR_INVALID_DEVICE);
  fk_ctxs[d].device = d;
  fk_ctxs[d].retains++;
  *c = (CUcontext)&fk_ctxs[d];
  LEAVE
}

static CUresult fk_cuDevicePrimaryCtxRelease(CUdevice d) {
  ENTER_NOFAIL();
  fk_trace("cuDevicePrimaryCtxRelease(%p)", (void *)(uintptr_t)d);
  if (!dev_ok(d)) FAIL(CUDA_ERROR_INVALID_DEVICE);
  if (fk_ctxs[d].retains <= 0) {
    fk_violation("cuDevicePrimaryCtxRelease(%d) without a retain", (int)d);
    FAIL(CUDA_ERROR_INVALID_CONTEXT);
  }
  if (--fk_ctxs[d].retains == 0) {
    /* The primary context goes away: its default stream and peer mappings too. */
    if (fk_ctxs[d].null_stream) {
      fk_stream_drop(fk_ctxs[d].null_stream);
      free(fk_ctxs[d].null_stream);
      fk_ctxs[d].null_stream = NULL;
    }
    memset(fk_ctxs[d].peer, 0, sizeof fk_ctxs[d].peer);
  }
  LEAVE
}

fk_ctx *fk_ctx_of(CUcontext c) {
  for (int d = 0; d < FK_MAX_DEV; d++)
    if ((void *)c == (void *)&fk_ctxs[d]) return &fk_ctxs[d];
  return NULL;
}

static CUresult fk_cuCtxPushCurrent(CUcontext c) {
  ENTER("cuCtxPushCurrent");
  fk_ctx *x = fk_ctx_of(c);
  if (!x || x->retains <= 0) {
    fk_violation("cuCtxPushCurrent of %p: not a retained primary context", (void *)c);
    FAIL(CUDA_ERROR_INVALID_CONTEXT);
  }
  fk_push(x);
  LEAVE
}

static CUresult fk_cuCtxPopCurrent(CUcontext *c) {
  ENTER_NOFAIL();
  fk_trace("cuCtxPopCurrent(%p)", (void *)(uintptr_t)c);
  fk_ctx *x = fk_pop();
  if (c) *c = (CUcontext)x;
  if (!x) {
    fk_violation("cuCtxPopCurrent with no current context (a pop without a push)");
    FAIL(CUDA_ERROR_INVALID_CONTEXT);
  }
  LEAVE
}

static CUresult fk_cuCtxEnablePeerAccess(CUcontext peer, unsigned flags) {
  ENTER("cuCtxEnablePeerAccess");
  NEED_CTX("cuCtxEnablePeerAccess");
  fk_ctx *me = fk_current(), *p = fk_ctx_of(peer);
  if (!p || p->retains <= 0 || flags) FAIL(CUDA_ERROR_INVALID_VALUE);
  if (p == me) FAIL(CUDA_ERROR_INVALID_DEVICE);
  if (me->peer[p->device]) FAIL(CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED);
  me->peer[p->device] = 1;
  LEAVE
}

/* ---- kernels ---- */

static int g_libs;
static char g_lib_token;

static CUresult fk_cuLibraryLoadData(CUlibrary *lib, const void *code, CUjit_option *jo, void **jv, unsigned nj,
                                     CUlibraryOption *lo, void **lv, unsigned nl) {
  (void)jo, (void)jv, (void)nj, (void)lo, (void)lv, (void)nl;
  ENTER("cuLibraryLoadData");
  if (!code || !lib) FAIL(CUDA_ERROR_INVALID_VALUE);
  /* A cubin, a fatbin (tpgraph's embedded kernels) or a test's "fake..."
   * module (its kernels are the C kernels of fake_kit.c); anything else is
   * refused as the driver refuses what it cannot parse. */
  const unsigned char *im = code;
  uint32_t magic;
  memcpy(&magic, im, 4);
  if (memcmp(im, "\x7f" "ELF", 4) != 0 && magic != 0xba55ed50u && memcmp(im, "fake", 4) != 0)
    FAIL(CUDA_ERROR_INVALID_IMAGE);
  g_libs++;
  *lib = (CUlibrary)&g_lib_token;
  LEAVE
}

static CUresult fk_cuLibraryUnload(CUlibrary lib) {
  ENTER_NOFAIL();
  if ((void *)lib != &g_lib_token || g_libs <= 0) {
    fk_violation("cuLibraryUnload of %p: not a loaded library", (void *)lib);
    FAIL(CUDA_ERROR_INVALID_HANDLE);
  }
  g_libs--;
  LEAVE
}

static CUresult fk_cuLibraryGetKernel(CUkernel *k, CUlibrary lib, const char *name) {
  ENTER("cuLibraryGetKernel");
  if ((void *)lib != &g_lib_token || g_libs <= 0) FAIL(CUDA_ERROR_INVALID_HANDLE);
  const fk_kernel *kk = fk_kernel_find(name);
  if (!kk) FAIL(CUDA_ERROR_NOT_FOUND);
  *k = (CUkernel)(uintptr_t)kk;
  LEAVE
}

static CUresult fk_cuKernelGetFunction(CUfunction *f, CUkernel k) {
  ENTER("cuKernelGetFunction");
  NEED_CTX("cuKernelGetFunction");
  if (!fk_kernel_valid(k)) FAIL(CUDA_ERROR_INVALID_HANDLE);
  *f = (CUfunction)(uintptr_t)k;
  LEAVE
}

static CUresult fk_cuFuncSetAttribute(CUfunction f, CUfunction_attribute a, int v) {
  ENTER("cuFuncSetAttribute");
  if (!fk_kernel_valid(f)) FAIL(CUDA_ERROR_INVALID_HANDLE);
  /* An H200's limit of dynamic shared memory per block. */
  if (a == CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES && (v < 0 || v > 227 * 1024)) FAIL(CUDA_ERROR_INVALID_VALUE);
  LEAVE
}

/* ---- memory ---- */

static CUresult fk_cuMemAlloc(CUdeviceptr *p, size_t bytes) {
  ENTER("cuMemAlloc");
  NEED_CTX("cuMemAlloc");
  if (!p || bytes == 0) FAIL(CUDA_ERROR_INVALID_VALUE);
  void *m = fk_mem_alloc(bytes, FK_MEM_DEVICE, fk_current()->device);
  if (!m) FAIL(CUDA_ERROR_OUT_OF_MEMORY);
  *p = (CUdeviceptr)(uintptr_t)m;
  LEAVE
}

static CUresult fk_cuMemFree(CUdeviceptr p) {
  ENTER_NOFAIL();
  fk_trace("cuMemFree(%p)", (void *)(uintptr_t)p);
  if (fk_mem_free((void *)(uintptr_t)p, FK_MEM_DEVICE) != 0) {
    fk_violation("cuMemFree(0x%llx): not a live device allocation (double free?)", (unsigned long long)p);
    FAIL(CUDA_ERROR_INVALID_VALUE);
  }
  LEAVE
}

static CUresult fk_cuMemHostAlloc(void **p, size_t bytes, unsigned flags) {
  (void)flags;
  ENTER("cuMemHostAlloc");
  NEED_CTX("cuMemHostAlloc");
  if (!p || bytes == 0) FAIL(CUDA_ERROR_INVALID_VALUE);
  *p = fk_mem_alloc(bytes, FK_MEM_HOST, fk_current()->device);
  if (!*p) FAIL(CUDA_ERROR_OUT_OF_MEMORY);
  LEAVE
}

static CUresult fk_cuMemFreeHost(void *p) {
  ENTER_NOFAIL();
  fk_trace("cuMemFreeHost(%p)", (void *)(uintptr_t)p);
  if (fk_mem_free(p, FK_MEM_HOST) != 0) {
    fk_violation("cuMemFreeHost(%p): not a live pinned allocation (double free?)", p);
    FAIL(CUDA_ERROR_INVALID_VALUE);
  }
  LEAVE
}

static CUresult fk_cuMemHostGetDevicePointer(CUdeviceptr *d, void *p, unsigned flags) {
  ENTER("cuMemHostGetDevicePointer");
  const fk_alloc *a = fk_mem_find((uintptr_t)p);
  if (!a || a->kind != FK_MEM_HOST || flags) FAIL(CUDA_ERROR_INVALID_VALUE);
  *d = (CUdeviceptr)(uintptr_t)p;
  LEAVE
}

static CUresult fk_cuMemGetAddressRange(CUdeviceptr *base, size_t *size, CUdeviceptr p) {
  ENTER("cuMemGetAddressRange");
  const fk_alloc *a = fk_mem_find((uintptr_t)p);
  if (!a) FAIL(CUDA_ERROR_NOT_FOUND);
  if (base) *base = a->base;
  if (size) *size = a->size;
  LEAVE
}

static CUresult fk_cuPointerGetAttribute(void *data, CUpointer_attribute attr, CUdeviceptr p) {
  ENTER("cuPointerGetAttribute");
  const fk_alloc *a = fk_mem_find((uintptr_t)p);
  if (!a) FAIL(CUDA_ERROR_INVALID_VALUE);
  switch (attr) {
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
      *(unsigned *)data = a->kind == FK_MEM_HOST ? CU_MEMORYTYPE_HOST : CU_MEMORYTYPE_DEVICE;
      break;
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL: *(int *)data = a->device; break;
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR: *(CUdeviceptr *)data = a->base; break;
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE: *(size_t *)data = a->size; break;
    default: FAIL(CUDA_ERROR_INVALID_VALUE);
  }
  LEAVE
}

static CUresult fk_cuMemGetInfo(size_t *free_b, size_t *total) {
  ENTER("cuMemGetInfo");
  NEED_CTX("cuMemGetInfo");
  /* What the device's live allocations take (host memory backs them), so
   * callers that measure memory by free-memory deltas see them. */
  size_t used = fk_mem_device_bytes(fk_current()->device);
  *free_b = used < FK_TOTAL_MEM ? FK_TOTAL_MEM - used : 0;
  *total = FK_TOTAL_MEM;
  LEAVE
}

static CUresult memset_node(CUdeviceptr dst, unsigned value, unsigned es, size_t n, CUstream h) {
  ENTER(es == 4 ? "cuMemsetD32Async" : "cuMemsetD16Async");
  NEED_CTX("cuMemsetAsync");
  STREAM(s, h);
  fk_node nd;
  memset(&nd, 0, sizeof nd);
  nd.type = FK_N_MEMSET;
  nd.dst = dst;
  nd.value = es == 2 ? (value & 0xffffu) : value;
  nd.esize = es;
  nd.width = n;
  nd.height = 1;
  nd.pitch = n * es;
  r_ = fk_stream_enqueue(s, &nd);
  LEAVE
}

static CUresult fk_cuMemsetD32Async(CUdeviceptr d, unsigned v, size_t n, CUstream s) { return memset_node(d, v, 4, n, s); }
static CUresult fk_cuMemsetD16Async(CUdeviceptr d, unsigned short v, size_t n, CUstream s) {
  return memset_node(d, v, 2, n, s);
}

static CUresult fk_cuMemsetD32(CUdeviceptr d, unsigned v, size_t n) {
  ENTER("cuMemsetD32");
  NEED_CTX("cuMemsetD32");
  if (!fk_check_range(d, n * 4, "cuMemsetD32 dst")) FAIL(CUDA_ERROR_INVALID_VALUE);
  for (size_t i = 0; i < n; i++) memcpy((void *)(uintptr_t)(d + 4 * i), &v, 4);
  LEAVE
}

static CUresult fk_cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t bytes, CUstream h) {
  ENTER("cuMemcpyAsync");
  NEED_CTX("cuMemcpyAsync");
  STREAM(s, h);
  fk_node nd;
  memset(&nd, 0, sizeof nd);
  nd.type = FK_N_MEMCPY;
  nd.dst = dst;
  nd.src = src;
  nd.width = bytes;
  nd.height = 1;
  r_ = fk_stream_enqueue(s, &nd);
  LEAVE
}

static uintptr_t side(CUmemorytype t, const void *host, CUdeviceptr dev, size_t x, size_t y, size_t pitch) {
  uintptr_t b = t == CU_MEMORYTYPE_HOST ? (uintptr_t)host : (uintptr_t)dev;
  return b + x + y * pitch;
}

static CUresult fk_cuMemcpy2DAsync(const CUDA_MEMCPY2D *c, CUstream h) {
  ENTER("cuMemcpy2DAsync");
  NEED_CTX("cuMemcpy2DAsync");
  STREAM(s, h);
  if ((c->Height > 1 && (c->srcPitch < c->WidthInBytes || c->dstPitch < c->WidthInBytes)))
    FAIL(CUDA_ERROR_INVALID_VALUE);
  fk_node nd;
  memset(&nd, 0, sizeof nd);
  nd.type = FK_N_MEMCPY;
  nd.dst = side(c->dstMemoryType, c->dstHost, c->dstDevice, c->dstXInBytes, c->dstY, c->dstPitch);
  nd.src = side(c->srcMemoryType, c->srcHost, c->srcDevice, c->srcXInBytes, c->srcY, c->srcPitch);
  nd.width = c->WidthInBytes;
  nd.height = c->Height;
  nd.pitch = c->dstPitch;
  nd.spitch = c->srcPitch;
  r_ = fk_stream_enqueue(s, &nd);
  LEAVE
}

static CUresult fk_cuMemcpyDtoH(void *dst, CUdeviceptr src, size_t bytes) {
  ENTER("cuMemcpyDtoH");
  NEED_CTX("cuMemcpyDtoH");
  if (!fk_check_range(src, bytes, "cuMemcpyDtoH src")) FAIL(CUDA_ERROR_INVALID_VALUE);
  memcpy(dst, (const void *)(uintptr_t)src, bytes);
  LEAVE
}

static CUresult fk_cuMemcpyHtoD(CUdeviceptr dst, const void *src, size_t bytes) {
  ENTER("cuMemcpyHtoD");
  NEED_CTX("cuMemcpyHtoD");
  if (!fk_check_range(dst, bytes, "cuMemcpyHtoD dst")) FAIL(CUDA_ERROR_INVALID_VALUE);
  memcpy((void *)(uintptr_t)dst, src, bytes);
  LEAVE
}

void fk_tmap_encode(void *map, uint64_t base, uint32_t rank, size_t esize, const cuuint64_t *dims,
                    const cuuint64_t *strides);

static CUresult fk_cuTensorMapEncodeTiled(CUtensorMap *map, CUtensorMapDataType dt, cuuint32_t rank, void *addr,
                                          const cuuint64_t *dims, const cuuint64_t *strides, const cuuint32_t *box,
                                          const cuuint32_t *es, CUtensorMapInterleave il, CUtensorMapSwizzle sw,
                                          CUtensorMapL2promotion l2, CUtensorMapFloatOOBfill oob) {
  (void)box, (void)es, (void)il, (void)sw, (void)l2, (void)oob;
  ENTER("cuTensorMapEncodeTiled");
  if (!map || rank < 1 || rank > 5 || ((uintptr_t)addr % 16) != 0) FAIL(CUDA_ERROR_INVALID_VALUE);
  for (cuuint32_t i = 0; i + 1 < rank; i++)
    if (strides[i] % 16) FAIL(CUDA_ERROR_INVALID_VALUE);
  size_t esz = dt == CU_TENSOR_MAP_DATA_TYPE_FLOAT32 ? 4 : dt == CU_TENSOR_MAP_DATA_TYPE_UINT8 ? 1 : 2;
  fk_tmap_encode(map, (uint64_t)(uintptr_t)addr, rank, esz, dims, strides);
  LEAVE
}

/* ---- IPC ---- */

#define FK_IPC_MAGIC 0x4650494b41465054ull

static CUresult fk_cuIpcGetMemHandle(CUipcMemHandle *h, CUdeviceptr p) {
  ENTER("cuIpcGetMemHandle");
  const fk_alloc *a = fk_mem_find((uintptr_t)p);
  if (!a || a->kind != FK_MEM_DEVICE || a->base != (uintptr_t)p) FAIL(CUDA_ERROR_INVALID_VALUE);
  memset(h, 0, sizeof *h);
  uint64_t w[2] = {FK_IPC_MAGIC, (uint64_t)p};
  memcpy(h->reserved, w, sizeof w);
  LEAVE
}

static CUresult fk_cuIpcOpenMemHandle(CUdeviceptr *dp, CUipcMemHandle h, unsigned flags) {
  (void)flags;
  ENTER("cuIpcOpenMemHandle");
  NEED_CTX("cuIpcOpenMemHandle");
  uint64_t w[2];
  memcpy(w, h.reserved, sizeof w);
  const fk_alloc *a = fk_mem_find((uintptr_t)w[1]);
  if (w[0] != FK_IPC_MAGIC || !a || a->base != (uintptr_t)w[1]) FAIL(CUDA_ERROR_INVALID_VALUE);
  *dp = (CUdeviceptr)w[1];
  fk_live_add(FK_IPC, (const void *)(uintptr_t)w[1]);
  LEAVE
}

static CUresult fk_cuIpcCloseMemHandle(CUdeviceptr dp) {
  ENTER_NOFAIL();
  if (!fk_live_del(FK_IPC, (const void *)(uintptr_t)dp)) {
    fk_violation("cuIpcCloseMemHandle(0x%llx): not an open IPC mapping", (unsigned long long)dp);
    FAIL(CUDA_ERROR_INVALID_VALUE);
  }
  LEAVE
}

/* ---- streams and events ---- */

static CUresult fk_cuStreamCreate(CUstream *out, unsigned flags) {
  (void)flags;
  ENTER("cuStreamCreate");
  NEED_CTX("cuStreamCreate");
  fk_stream *s = calloc(1, sizeof *s);
  if (!s) FAIL(CUDA_ERROR_OUT_OF_MEMORY);
  s->ctx = fk_current();
  s->cap_last = -1;
  fk_live_add(FK_STREAM, s);
  *out = (CUstream)s;
  LEAVE
}

static CUresult fk_cuStreamDestroy(CUstream h) {
  ENTER_NOFAIL();
  fk_trace("cuStreamDestroy(%p)", (void *)(uintptr_t)h);
  if (!fk_live_has(FK_STREAM, h)) {
    fk_violation("cuStreamDestroy(%p): not a live stream (double destroy?)", (void *)h);
    FAIL(CUDA_ERROR_INVALID_HANDLE);
  }
  fk_stream *s = (fk_stream *)h;
  if (s->capture) {
    fk_violation("cuStreamDestroy of a stream that is capturing");
    fk_live_del(FK_GRAPH, s->capture);
    fk_graph_free(s->capture);
  }
  fk_stream_drop(s);
  fk_live_del(FK_STREAM, s);
  free(s);
  LEAVE
}

long fk_sync_ms(void) {
  const char *e = getenv("TPG_FAKE_SYNC_MS");
  return e && e[0] ? atol(e) : 20000;
}

void fk_nap(void) {
  struct timespec ts = {0, 100000};
  nanosleep(&ts, NULL);
}

double fk_now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

static CUresult fk_cuStreamSynchronize(CUstream h) {
  ENTER("cuStreamSynchronize");
  double deadline = fk_now_ms() + (double)fk_sync_ms();
  for (;;) {
    STREAM(s, h);
    if (s->capture) FAIL(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    if (fk_stream_progress(s)) break;
    if (fk_now_ms() > deadline) {
      fk_violation("cuStreamSynchronize: stream work still waiting after %ld ms (a collective no peer joined)",
                   fk_sync_ms());
      FAIL(CUDA_ERROR_LAUNCH_TIMEOUT);
    }
    fk_unlock();
    fk_nap();
    fk_lock();
  }
  LEAVE
}

static CUresult fk_cuStreamQuery(CUstream h) {
  ENTER_POLL("cuStreamQuery");
  STREAM(s, h);
  if (s->capture) FAIL(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  if (!fk_stream_progress(s)) FAIL(CUDA_ERROR_NOT_READY);
  LEAVE
}

static CUresult fk_cuStreamBeginCapture(CUstream h, CUstreamCaptureMode mode) {
  (void)mode;
  ENTER("cuStreamBeginCapture");
  STREAM(s, h);
  if (h == NULL) FAIL(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  if (s->capture) FAIL(CUDA_ERROR_ILLEGAL_STATE);
  s->capture = fk_graph_new();
  if (!s->capture) FAIL(CUDA_ERROR_OUT_OF_MEMORY);
  /* Live from the start: the kit adds nodes to a capture in progress
   * (cuStreamGetCaptureInfo's graph), as the driver allows. */
  fk_live_add(FK_GRAPH, s->capture);
  s->cap_last = -1;
  s->cap_error = 0;
  fk_counters[TPGFAKE_C_CAPTURES]++;
  LEAVE
}

static CUresult fk_cuStreamEndCapture(CUstream h, CUgraph *g) {
  /* A failed end still ends the capture (CUDA invalidates it): injected
   * failures return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED after ending it. */
  ENTER_NOFAIL();
  int injected = fk_inject("cuStreamEndCapture");
  STREAM(s, h);
  *g = NULL;
  if (!s->capture) FAIL(CUDA_ERROR_ILLEGAL_STATE);
  fk_graph *cg = s->capture;
  int bad = s->cap_error || injected;
  s->capture = NULL;
  s->cap_error = 0;
  if (bad) {
    fk_live_del(FK_GRAPH, cg);
    fk_graph_free(cg);
    FAIL(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
  }
  *g = (CUgraph)cg;
  LEAVE
}

static CUresult fk_cuEventCreate(CUevent *e, unsigned flags) {
  (void)flags;
  ENTER("cuEventCreate");
  NEED_CTX("cuEventCreate");
  fk_event *ev = calloc(1, sizeof *ev);
  if (!ev) FAIL(CUDA_ERROR_OUT_OF_MEMORY);
  fk_live_add(FK_EVENT, ev);
  *e = (CUevent)ev;
  LEAVE
}

static CUresult fk_cuEventDestroy(CUevent e) {
  ENTER_NOFAIL();
  fk_trace("cuEventDestroy(%p)", (void *)(uintptr_t)e);
  if (!fk_live_has(FK_EVENT, e)) {
    fk_violation("cuEventDestroy(%p): not a live event (double destroy?)", (void *)e);
    FAIL(CUDA_ERROR_INVALID_HANDLE);
  }
  fk_event_forget((fk_event *)e);
  fk_live_del(FK_EVENT, e);
  free(e);
  LEAVE
}

static CUresult fk_cuEventRecord(CUevent e, CUstream h) {
  ENTER("cuEventRecord");
  if (!fk_live_has(FK_EVENT, e)) {
    fk_violation("cuEventRecord(%p): not a live event", (void *)e);
    FAIL(CUDA_ERROR_INVALID_HANDLE);
  }
  STREAM(s, h);
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
  }
  LEAVE
}

/* 1: done. Progresses the stream it was recorded on if that still exists. */
static int event_done(fk_event *ev) {
  if (ev->gen_done >= ev->gen_recorded) return 1;
  fk_stream *s = ev->stream;
  int live = fk_live_has(FK_STREAM, s);
  for (int d = 0; d < FK_MAX_DEV && !live; d++) live = fk_ctxs[d].null_stream == s;
  if (live) fk_stream_progress(s);
  return ev->gen_done >= ev->gen_recorded;
}

static CUresult fk_cuEventQuery(CUevent e) {
  ENTER_POLL("cuEventQuery");
  if (!fk_live_has(FK_EVENT, e)) {
    fk_violation("cuEventQuery(%p): not a live event", (void *)e);
    FAIL(CUDA_ERROR_INVALID_HANDLE);
  }
  if (!event_done((fk_event *)e)) FAIL(CUDA_ERROR_NOT_READY);
  LEAVE
}

static CUresult fk_cuEventSynchronize(CUevent e) {
  ENTER("cuEventSynchronize");
  double deadline = fk_now_ms() + (double)fk_sync_ms();
  for (;;) {
    if (!fk_live_has(FK_EVENT, e)) {
      fk_violation("cuEventSynchronize(%p): not a live event", (void *)e);
      FAIL(CUDA_ERROR_INVALID_HANDLE);
    }
    if (event_done((fk_event *)e)) break;
    if (fk_now_ms() > deadline) {
      fk_violation("cuEventSynchronize: still waiting after %ld ms", fk_sync_ms());
      FAIL(CUDA_ERROR_LAUNCH_TIMEOUT);
    }
    fk_unlock();
    fk_nap();
    fk_lock();
  }
  LEAVE
}

/* ---- kernels on streams ---- */

CUresult fk_kernel_node(fk_node *nd, CUfunction f, const unsigned grid[3], const unsigned block[3],
                        unsigned smem, void **params, void **extra) {
  if (!fk_kernel_valid(f)) {
    fk_violation("kernel launch with %p: not a function from cuKernelGetFunction", (void *)f);
    return CUDA_ERROR_INVALID_HANDLE;
  }
  const fk_kernel *k = (const fk_kernel *)(uintptr_t)f;
  int np = k->nparams ? k->nparams : 1;
  if (!params || extra) {
    fk_violation("kernel launch of %s without kernelParams", k->name);
    return CUDA_ERROR_INVALID_VALUE;
  }
  for (int i = 0; i < np; i++)
    if (!params[i]) {
      fk_violation("kernel launch of %s: kernelParams[%d] is NULL", k->name, i);
      return CUDA_ERROR_INVALID_VALUE;
    }
  memset(nd, 0, sizeof *nd);
  nd->type = FK_N_KERNEL;
  nd->kern = k;
  memcpy(nd->grid, grid, sizeof nd->grid);
  memcpy(nd->block, block, sizeof nd->block);
  nd->smem = smem;
  if (!k->nparams) memcpy(nd->args, params[0], k->argsz);
  for (int i = 0; i < k->nparams; i++) memcpy(nd->args + k->off[i], params[i], k->size[i]);
  return CUDA_SUCCESS;
}

static CUresult fk_cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                                  unsigned bz, unsigned smem, CUstream h, void **params, void **extra) {
  ENTER("cuLaunchKernel");
  NEED_CTX("cuLaunchKernel");
  STREAM(s, h);
  static fk_node nd; /* big; the lock is held */
  unsigned grid[3] = {gx, gy, gz}, block[3] = {bx, by, bz};
  r_ = fk_kernel_node(&nd, f, grid, block, smem, params, extra);
  if (r_ == CUDA_SUCCESS) r_ = fk_stream_enqueue(s, &nd);
  LEAVE
}

/* ---- graphs ---- */

static CUresult fk_cuGraphCreate(CUgraph *g, unsigned flags) {
  (void)flags;
  ENTER("cuGraphCreate");
  fk_graph *x = fk_graph_new();
  if (!x) FAIL(CUDA_ERROR_OUT_OF_MEMORY);
  fk_live_add(FK_GRAPH, x);
  *g = (CUgraph)x;
  LEAVE
}

static CUresult fk_cuGraphDestroy(CUgraph h) {
  ENTER_NOFAIL();
  fk_trace("cuGraphDestroy(%p)", (void *)(uintptr_t)h);
  if (!fk_live_has(FK_GRAPH, h)) {
    fk_violation("cuGraphDestroy: graph %p is not a live graph (double destroy, or a child graph?)", (void *)h);
    FAIL(CUDA_ERROR_INVALID_HANDLE);
  }
  fk_graph *g = (fk_graph *)h;
  fk_live_del(FK_GRAPH, g);
  fk_cond_graph_gone(g);
  fk_graph_free(g);
  LEAVE
}

static CUresult fk_cuGraphAddKernelNode(CUgraphNode *out, CUgraph h, const CUgraphNode *deps, size_t nd,
                                        const CUDA_KERNEL_NODE_PARAMS *p) {
  ENTER("cuGraphAddKernelNode");
  GRAPH(g, h);
  static fk_node n;
  unsigned grid[3] = {p->gridDimX, p->gridDimY, p->gridDimZ}, block[3] = {p->blockDimX, p->blockDimY, p->blockDimZ};
  r_ = fk_kernel_node(&n, p->func, grid, block, p->sharedMemBytes, p->kernelParams, p->extra);
  if (r_ == CUDA_SUCCESS) r_ = fk_graph_add_copy(out, g, deps, nd, &n);
  LEAVE
}

void fk_memset_from(fk_node *n, const CUDA_MEMSET_NODE_PARAMS *m) {
  memset(n, 0, sizeof *n);
  n->type = FK_N_MEMSET;
  n->dst = m->dst;
  n->value = m->elementSize == 2 ? (m->value & 0xffffu) : m->elementSize == 1 ? (m->value & 0xffu) : m->value;
  n->esize = m->elementSize;
  n->width = m->width;
  n->height = m->height;
  n->pitch = m->pitch;
}

int fk_memcpy_from(fk_node *n, const CUDA_MEMCPY3D *c) {
  if (c->Depth > 1 || c->srcZ || c->dstZ || c->srcLOD || c->dstLOD) return -1; /* not modelled */
  memset(n, 0, sizeof *n);
  n->type = FK_N_MEMCPY;
  n->dst = side(c->dstMemoryType, c->dstHost, c->dstDevice, c->dstXInBytes, c->dstY, c->dstPitch);
  n->src = side(c->srcMemoryType, c->srcHost, c->srcDevice, c->srcXInBytes, c->srcY, c->srcPitch);
  n->width = c->WidthInBytes;
  n->height = c->Height ? c->Height : 1;
  n->pitch = c->dstPitch;
  n->spitch = c->srcPitch;
  return 0;
}

static CUresult fk_cuGraphAddMemsetNode(CUgraphNode *out, CUgraph h, const CUgraphNode *deps, size_t nd,
                                        const CUDA_MEMSET_NODE_PARAMS *m, CUcontext ctx) {
  ENTER("cuGraphAddMemsetNode");
  GRAPH(g, h);
  if (!fk_ctx_of(ctx)) FAIL(CUDA_ERROR_INVALID_CONTEXT);
  fk_node n;
  fk_memset_from(&n, m);
  r_ = fk_graph_add_copy(out, g, deps, nd, &n);
  LEAVE
}

static CUresult fk_cuGraphAddMemcpyNode(CUgraphNode *out, CUgraph h, const CUgraphNode *deps, size_t nd,
                                        const CUDA_MEMCPY3D *c, CUcontext ctx) {
  ENTER("cuGraphAddMemcpyNode");
  GRAPH(g, h);
  if (!fk_ctx_of(ctx)) FAIL(CUDA_ERROR_INVALID_CONTEXT);
  fk_node n;
  if (fk_memcpy_from(&n, c) != 0) FAIL(CUDA_ERROR_INVALID_VALUE);
  r_ = fk_graph_add_copy(out, g, deps, nd, &n);
  LEAVE
}

static CUresult fk_cuGraphAddEmptyNode(CUgraphNode *out, CUgraph h, const CUgraphNode *deps, size_t nd) {
  ENTER("cuGraphAddEmptyNode");
  GRAPH(g, h);
  fk_node n;
  memset(&n, 0, sizeof n);
  n.type = FK_N_EMPTY;
  r_ = fk_graph_add_copy(out, g, deps, nd, &n);
  LEAVE
}

static CUresult fk_cuGraphAddChildGraphNode(CUgraphNode *out, CUgraph h, const CUgraphNode *deps, size_t nd,
                                            CUgraph child) {
  ENTER("cuGraphAddChildGraphNode");
  GRAPH(g, h);
  GRAPH(c, child);
  fk_node *n = malloc(sizeof *n);
  if (!n) FAIL(CUDA_ERROR_OUT_OF_MEMORY);
  memset(n, 0, sizeof *n);
  n->type = FK_N_CHILD;
  n->child = fk_graph_clone(c);
  if (!n->child) {
    free(n);
    FAIL(CUDA_ERROR_OUT_OF_MEMORY);
  }
  r_ = fk_graph_add(g, n, deps, nd);
  if (r_ != CUDA_SUCCESS) fk_node_free(n);
  else *out = (CUgraphNode)n;
  LEAVE
}

static CUresult fk_cuGraphAddDependencies(CUgraph h, const CUgraphNode *from, const CUgraphNode *to,
                                          const CUgraphEdgeData *ed, size_t n) {
  ENTER("cuGraphAddDependencies");
  GRAPH(g, h);
  for (size_t i = 0; i < n; i++) {
    int a = fk_graph_index(g, from[i]), b = fk_graph_index(g, to[i]);
    if (a < 0 || b < 0 || a >= b) {
      fk_violation("cuGraphAddDependencies: edge %zu joins nodes not of this graph or not in creation order", i);
      FAIL(CUDA_ERROR_INVALID_VALUE);
    }
  }
  for (size_t i = 0; i < n; i++) {
    CUgraphNode d = from[i];
    CUgraphEdgeData e;
    memset(&e, 0, sizeof e);
    if (ed) e = ed[i];
    if (e.type == CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC) fk_counters[TPGFAKE_C_PROG_EDGES]++;
    /* Appending the edge: reuse the graph's edge list through a 1-dep add. */
    int a = fk_graph_index(g, d), b = fk_graph_index(g, to[i]);
    if (g->ne == g->ecap) {
      int cap = g->ecap ? 2 * g->ecap : 16;
      fk_edge *v = realloc(g->edges, (size_t)cap * sizeof *v);
      if (!v) FAIL(CUDA_ERROR_OUT_OF_MEMORY);
      g->edges = v;
      g->ecap = cap;
    }
    g->edges[g->ne++] = (fk_edge){a, b, e};
  }
  LEAVE
}

static CUresult fk_cuGraphGetNodes(CUgraph h, CUgraphNode *nodes, size_t *n) {
  ENTER("cuGraphGetNodes");
  GRAPH(g, h);
  if (nodes)
    for (size_t i = 0; i < *n && i < (size_t)g->n; i++) nodes[i] = (CUgraphNode)g->nodes[i];
  *n = (size_t)g->n;
  LEAVE
}

static CUresult fk_cuGraphGetEdges(CUgraph h, CUgraphNode *from, CUgraphNode *to, CUgraphEdgeData *ed, size_t *n) {
  ENTER("cuGraphGetEdges");
  GRAPH(g, h);
  if (from && to)
    for (size_t i = 0; i < *n && i < (size_t)g->ne; i++) {
      from[i] = (CUgraphNode)g->nodes[g->edges[i].from];
      to[i] = (CUgraphNode)g->nodes[g->edges[i].to];
      if (ed) ed[i] = g->edges[i].data;
    }
  *n = (size_t)g->ne;
  LEAVE
}

static CUresult fk_cuGraphDebugDotPrint(CUgraph h, const char *path, unsigned flags) {
  (void)flags;
  ENTER("cuGraphDebugDotPrint");
  GRAPH(g, h);
  FILE *f = fopen(path, "w");
  if (!f) FAIL(CUDA_ERROR_OPERATING_SYSTEM);
  static const char *const kind[] = {[0] = "?",          [FK_N_KERNEL] = "kernel", [FK_N_MEMSET] = "memset",
                                     [FK_N_MEMCPY] = "memcpy", [FK_N_EMPTY] = "empty",   [FK_N_CHILD] = "child",
                                     [FK_N_COLL] = "nccl",    [FK_N_EVENT] = "event",   [FK_N_HOST] = "host",
                                     [FK_N_EVREC] = "event record", [FK_N_EVWAIT] = "event wait",
                                     [FK_N_MEMALLOC] = "mem alloc",  [FK_N_COND] = "conditional"};
  fprintf(f, "digraph tpgfake {\n");
  for (int i = 0; i < g->n; i++)
    fprintf(f, "  n%d [label=\"%s%s%s\"];\n", i, kind[g->nodes[i]->type],
            g->nodes[i]->type == FK_N_KERNEL ? " " : "", g->nodes[i]->type == FK_N_KERNEL ? g->nodes[i]->kern->name : "");
  for (int e = 0; e < g->ne; e++) fprintf(f, "  n%d -> n%d;\n", g->edges[e].from, g->edges[e].to);
  fprintf(f, "}\n");
  if (fclose(f) != 0) FAIL(CUDA_ERROR_OPERATING_SYSTEM);
  LEAVE
}

static void exec_free(fk_exec *x) {
  for (int i = 0; i < x->n; i++) fk_node_free(x->nodes[i]);
  free(x->nodes);
  free(x->orig);
  free(x->edges);
  free(x);
}

static CUresult fk_cuGraphInstantiateWithFlags(CUgraphExec *out, CUgraph h, unsigned long long flags) {
  (void)flags;
  ENTER("cuGraphInstantiateWithFlags");
  NEED_CTX("cuGraphInstantiateWithFlags");
  GRAPH(g, h);
  fk_exec *x = calloc(1, sizeof *x);
  if (!x) FAIL(CUDA_ERROR_OUT_OF_MEMORY);
  x->nodes = calloc((size_t)(g->n ? g->n : 1), sizeof *x->nodes);
  x->orig = calloc((size_t)(g->n ? g->n : 1), sizeof *x->orig);
  x->edges = calloc((size_t)(g->ne ? g->ne : 1), sizeof *x->edges);
  if (!x->nodes || !x->orig || !x->edges) {
    exec_free(x);
    FAIL(CUDA_ERROR_OUT_OF_MEMORY);
  }
  for (int i = 0; i < g->n; i++) {
    x->nodes[i] = fk_node_clone(g->nodes[i]);
    if (!x->nodes[i]) {
      exec_free(x);
      FAIL(CUDA_ERROR_OUT_OF_MEMORY);
    }
    x->n = i + 1;
    x->orig[i] = g->nodes[i];
  }
  if (g->ne) memcpy(x->edges, g->edges, (size_t)g->ne * sizeof *x->edges);
  x->ne = g->ne;
  fk_live_add(FK_EXEC, x);
  *out = (CUgraphExec)x;
  LEAVE
}

static CUresult fk_cuGraphExecDestroy(CUgraphExec h) {
  ENTER_NOFAIL();
  fk_trace("cuGraphExecDestroy(%p)", (void *)(uintptr_t)h);
  EXEC(x, h);
  fk_live_del(FK_EXEC, x);
  exec_free(x);
  LEAVE
}

static CUresult fk_cuGraphLaunch(CUgraphExec h, CUstream hs) {
  ENTER("cuGraphLaunch");
  NEED_CTX("cuGraphLaunch");
  EXEC(x, h);
  STREAM(s, hs);
  if (s->capture) FAIL(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  r_ = fk_exec_launch(x, s);
  if (r_ == CUDA_SUCCESS) fk_counters[TPGFAKE_C_LAUNCH]++;
  LEAVE
}

fk_node *fk_exec_node(const fk_exec *x, CUgraphNode node, int type, int *why) {
  fk_node *n = NULL;
  for (int i = 0; i < x->n && !n; i++)
    if (x->orig[i] == (const void *)node) n = x->nodes[i];
  if (!n) n = fk_cond_exec_node(x, node);
  *why = !n ? -1 : n->type != type ? -2 : 0;
  return *why ? NULL : n;
}

static CUresult fk_cuGraphExecKernelNodeSetParams(CUgraphExec h, CUgraphNode node, const CUDA_KERNEL_NODE_PARAMS *p) {
  ENTER("cuGraphExecKernelNodeSetParams");
  EXEC(x, h);
  EXEC_NODE(xn, x, node, FK_N_KERNEL, "cuGraphExecKernelNodeSetParams");
  static fk_node n;
  unsigned grid[3] = {p->gridDimX, p->gridDimY, p->gridDimZ}, block[3] = {p->blockDimX, p->blockDimY, p->blockDimZ};
  r_ = fk_kernel_node(&n, p->func, grid, block, p->sharedMemBytes, p->kernelParams, p->extra);
  if (r_ == CUDA_SUCCESS) {
    memcpy(xn, &n, sizeof n);
    fk_counters[TPGFAKE_C_EXEC_KSET]++;
  }
  LEAVE
}

static CUresult fk_cuGraphExecMemsetNodeSetParams(CUgraphExec h, CUgraphNode node, const CUDA_MEMSET_NODE_PARAMS *m,
                                                  CUcontext ctx) {
  ENTER("cuGraphExecMemsetNodeSetParams");
  EXEC(x, h);
  EXEC_NODE(xn, x, node, FK_N_MEMSET, "cuGraphExecMemsetNodeSetParams");
  if (!fk_ctx_of(ctx)) FAIL(CUDA_ERROR_INVALID_CONTEXT);
  fk_memset_from(xn, m);
  LEAVE
}

static CUresult fk_cuGraphExecMemcpyNodeSetParams(CUgraphExec h, CUgraphNode node, const CUDA_MEMCPY3D *c,
                                                  CUcontext ctx) {
  ENTER("cuGraphExecMemcpyNodeSetParams");
  EXEC(x, h);
  EXEC_NODE(xn, x, node, FK_N_MEMCPY, "cuGraphExecMemcpyNodeSetParams");
  if (!fk_ctx_of(ctx)) FAIL(CUDA_ERROR_INVALID_CONTEXT);
  fk_node n;
  if (fk_memcpy_from(&n, c) != 0) FAIL(CUDA_ERROR_INVALID_VALUE);
  memcpy(xn, &n, sizeof n);
  LEAVE
}

static CUresult fk_cuGraphExecChildGraphNodeSetParams(CUgraphExec h, CUgraphNode node, CUgraph child) {
  ENTER("cuGraphExecChildGraphNodeSetParams");
  EXEC(x, h);
  EXEC_NODE(xn, x, node, FK_N_CHILD, "cuGraphExecChildGraphNodeSetParams");
  GRAPH(c, child);
  int bad;
  if (!fk_graph_same_shape(xn->child, c, &bad)) FAIL(CUDA_ERROR_INVALID_VALUE);
  fk_graph *nc = fk_graph_clone(c);
  if (!nc) FAIL(CUDA_ERROR_OUT_OF_MEMORY);
  fk_graph_free(xn->child);
  xn->child = nc;
  fk_counters[TPGFAKE_C_EXEC_CHILD]++;
  LEAVE
}

static CUresult fk_cuGraphExecUpdate(CUgraphExec h, CUgraph hg, CUgraphExecUpdateResultInfo *info) {
  ENTER("cuGraphExecUpdate");
  EXEC(x, h);
  GRAPH(g, hg);
  memset(info, 0, sizeof *info);
  int bad = -1, same = g->n == x->n && g->ne == x->ne;
  for (int i = 0; same && i < g->n; i++) {
    /* Node by node, as fk_graph_same_shape does (children and bodies too). */
    fk_graph one_g = {.nodes = &g->nodes[i], .n = 1}, one_x = {.nodes = &x->nodes[i], .n = 1};
    int sub;
    if (!fk_graph_same_shape(&one_g, &one_x, &sub)) {
      same = 0;
      bad = i;
    }
  }
  for (int e = 0; same && e < g->ne; e++)
    if (g->edges[e].from != x->edges[e].from || g->edges[e].to != x->edges[e].to) same = 0;
  if (!same) {
    info->result = bad >= 0 ? CU_GRAPH_EXEC_UPDATE_ERROR_NODE_TYPE_CHANGED : CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED;
    info->errorNode = bad >= 0 ? (CUgraphNode)g->nodes[bad] : NULL;
    FAIL(CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE);
  }
  fk_node **nn = calloc((size_t)(g->n ? g->n : 1), sizeof *nn);
  if (!nn) FAIL(CUDA_ERROR_OUT_OF_MEMORY);
  for (int i = 0; i < g->n; i++)
    if (!(nn[i] = fk_node_clone(g->nodes[i]))) {
      for (int j = 0; j < i; j++) fk_node_free(nn[j]);
      free(nn);
      FAIL(CUDA_ERROR_OUT_OF_MEMORY);
    }
  for (int i = 0; i < x->n; i++) {
    fk_node_free(x->nodes[i]);
    x->nodes[i] = nn[i];
  }
  free(nn);
  info->result = CU_GRAPH_EXEC_UPDATE_SUCCESS;
  fk_counters[TPGFAKE_C_EXEC_UPDATE]++;
  LEAVE
}

/* ---- the table ---- */

typedef struct {
  const char *name;
  void *fn;
} fk_entry;

#define FK_ENTRY(name, ver)                                                                        \
  _Static_assert(__builtin_types_compatible_p(__typeof__(&fk_##name), PFN_##name##_v##ver),         \
                 "fake " #name " does not have the type of PFN_" #name "_v" #ver);                 \
  static const fk_entry fk_entry_##name = {#name, (void *)fk_##name};
TPG_CU_FUNCS(FK_ENTRY)
TPG_CU_FUNCS_OPTIONAL(FK_ENTRY)
#undef FK_ENTRY

#define FK_ROW(name, ver) &fk_entry_##name,
static const fk_entry *const g_table[] = {TPG_CU_FUNCS(FK_ROW) TPG_CU_FUNCS_OPTIONAL(FK_ROW) NULL};
#undef FK_ROW

/* Exported to the shim (tests/fake/shim.c), which libcuda_fake.so is. */
CUresult tpgfake_entry_get_proc(const char *sym, void **pfn, int ver, cuuint64_t flags,
                                CUdriverProcAddressQueryResult *found);
CUresult tpgfake_entry_init(unsigned flags);
CUresult tpgfake_entry_version(int *v);

CUresult tpgfake_entry_get_proc(const char *sym, void **pfn, int ver, cuuint64_t flags,
                                CUdriverProcAddressQueryResult *found) {
  (void)ver, (void)flags;
  for (int i = 0; g_table[i]; i++)
    if (strcmp(g_table[i]->name, sym) == 0) {
      *pfn = g_table[i]->fn;
      if (found) *found = CU_GET_PROC_ADDRESS_SUCCESS;
      return CUDA_SUCCESS;
    }
  *pfn = NULL;
  if (found) *found = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  return CUDA_ERROR_NOT_FOUND;
}
CUresult tpgfake_entry_init(unsigned flags) { return fk_cuInit(flags); }
CUresult tpgfake_entry_version(int *v) { return fk_cuDriverGetVersion(v); }

/* For tpgfake.h's test-side calls (fake_kit.c). */
CUresult fk_api_stream_create(CUstream *s) { return fk_cuStreamCreate(s, 0); }
CUresult fk_api_stream_destroy(CUstream s) { return fk_cuStreamDestroy(s); }
CUresult fk_api_begin(CUstream s) { return fk_cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL); }
CUresult fk_api_end(CUstream s, CUgraph *g) { return fk_cuStreamEndCapture(s, g); }
CUresult fk_api_instantiate(CUgraphExec *x, CUgraph g) { return fk_cuGraphInstantiateWithFlags(x, g, 0); }
CUresult fk_api_launch(CUgraphExec x, CUstream s) { return fk_cuGraphLaunch(x, s); }
CUresult fk_api_exec_destroy(CUgraphExec x) { return fk_cuGraphExecDestroy(x); }
CUresult fk_api_graph_destroy(CUgraph g) { return fk_cuGraphDestroy(g); }
CUresult fk_api_event_create(CUevent *e) { return fk_cuEventCreate(e, 0); }
CUresult fk_api_event_destroy(CUevent e) { return fk_cuEventDestroy(e); }
