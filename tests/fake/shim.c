/* shim.c - libcuda_fake.so: what TPG_LIBCUDA and TPG_LIBNCCL point at.
 *
 * lib/cuda_driver.c dlopens a file and looks up three symbols in it; every
 * other entry point comes from cuGetProcAddress. lib/nccl_loader.c dlopens a
 * file and looks up each NCCL entry point by name. The fake itself lives in
 * the test executable (linked from //tests/fake:fake, exported with
 * -rdynamic) so that the driver and NCCL share one state; this library only
 * forwards to it: the three driver symbols directly, and each NCCL entry
 * point through the fake's table (tpgfake_entry_nccl), so the library's real
 * loading path — dlopen, then dlsym of every name — is what the tests run.
 * Loaded by a program without the fake, dlopen fails on the undefined
 * tpgfake_entry_* symbols: a clear "cannot load", never a half-working driver.
 */
#include <cuda.h>
#include <nccl.h>

CUresult tpgfake_entry_get_proc(const char *sym, void **pfn, int ver, cuuint64_t flags,
                                CUdriverProcAddressQueryResult *found);
CUresult tpgfake_entry_init(unsigned flags);
CUresult tpgfake_entry_version(int *v);
void *tpgfake_entry_nccl(const char *name);

#define EXPORT __attribute__((visibility("default")))

#undef cuGetProcAddress
EXPORT CUresult cuGetProcAddress_v2(const char *sym, void **pfn, int ver, cuuint64_t flags,
                                    CUdriverProcAddressQueryResult *found) {
  return tpgfake_entry_get_proc(sym, pfn, ver, flags, found);
}
EXPORT CUresult cuInit(unsigned flags) { return tpgfake_entry_init(flags); }
EXPORT CUresult cuDriverGetVersion(int *v) { return tpgfake_entry_version(v); }

/* The fake's function of the same name and type (looked up at each call:
 * no cache that threads would race on). */
#define FAKE(name) ((__typeof__(&name))tpgfake_entry_nccl(#name))

EXPORT ncclResult_t ncclGetVersion(int *v) { return FAKE(ncclGetVersion)(v); }
EXPORT ncclResult_t ncclGetUniqueId(ncclUniqueId *id) { return FAKE(ncclGetUniqueId)(id); }
EXPORT const char *ncclGetErrorString(ncclResult_t r) { return FAKE(ncclGetErrorString)(r); }
EXPORT const char *ncclGetLastError(ncclComm_t c) { return FAKE(ncclGetLastError)(c); }
EXPORT ncclResult_t ncclCommInitRankConfig(ncclComm_t *c, int n, ncclUniqueId id, int r, ncclConfig_t *cfg) {
  return FAKE(ncclCommInitRankConfig)(c, n, id, r, cfg);
}
EXPORT ncclResult_t ncclCommGetAsyncError(ncclComm_t c, ncclResult_t *r) { return FAKE(ncclCommGetAsyncError)(c, r); }
EXPORT ncclResult_t ncclCommFinalize(ncclComm_t c) { return FAKE(ncclCommFinalize)(c); }
EXPORT ncclResult_t ncclCommDestroy(ncclComm_t c) { return FAKE(ncclCommDestroy)(c); }
EXPORT ncclResult_t ncclCommAbort(ncclComm_t c) { return FAKE(ncclCommAbort)(c); }
EXPORT ncclResult_t ncclCommRevoke(ncclComm_t c, int flags) { return FAKE(ncclCommRevoke)(c, flags); }
EXPORT ncclResult_t ncclAllReduce(const void *s, void *r, size_t n, ncclDataType_t t, ncclRedOp_t op, ncclComm_t c,
                                  cudaStream_t st) {
  return FAKE(ncclAllReduce)(s, r, n, t, op, c, st);
}
EXPORT ncclResult_t ncclAllGather(const void *s, void *r, size_t n, ncclDataType_t t, ncclComm_t c, cudaStream_t st) {
  return FAKE(ncclAllGather)(s, r, n, t, c, st);
}
EXPORT ncclResult_t ncclReduceScatter(const void *s, void *r, size_t n, ncclDataType_t t, ncclRedOp_t op,
                                      ncclComm_t c, cudaStream_t st) {
  return FAKE(ncclReduceScatter)(s, r, n, t, op, c, st);
}
EXPORT ncclResult_t ncclMemAlloc(void **p, size_t n) { return FAKE(ncclMemAlloc)(p, n); }
EXPORT ncclResult_t ncclMemFree(void *p) { return FAKE(ncclMemFree)(p); }
EXPORT ncclResult_t ncclCommWindowRegister(ncclComm_t c, void *b, size_t n, ncclWindow_t *w, int flags) {
  return FAKE(ncclCommWindowRegister)(c, b, n, w, flags);
}
EXPORT ncclResult_t ncclCommWindowDeregister(ncclComm_t c, ncclWindow_t w) {
  return FAKE(ncclCommWindowDeregister)(c, w);
}
