/* shim.c - libcuda_fake.so: what TPG_LIBCUDA, TPG_LIBNCCL and
 * TPG_LIBCUBLASLT point at.
 *
 * lib/cuda_driver.c dlopens a file and looks up three symbols in it; every
 * other entry point comes from cuGetProcAddress. lib/nccl_loader.c dlopens a
 * file and looks up each NCCL entry point by name. The fake itself lives in
 * the test executable (linked from //tests/fake:fake, exported with
 * -rdynamic) so that the driver and NCCL share one state; this library only
 * forwards to it: the three driver symbols directly, and each NCCL entry
 * point through the fake's table (tpgfake_entry_nccl), so the library's real
 * loading path — dlopen, then dlsym of every name — is what the tests run;
 * lib/gemm/cublaslt_loader.c the same way for cuBLASLt's
 * (tpgfake_entry_cublaslt).
 * Loaded by a program without the fake, dlopen fails on the undefined
 * tpgfake_entry_* symbols: a clear "cannot load", never a half-working driver.
 */
#include <cublasLt.h>
#include <cuda.h>
#include <nccl.h>

CUresult tpgfake_entry_get_proc(const char *sym, void **pfn, int ver, cuuint64_t flags,
                                CUdriverProcAddressQueryResult *found);
CUresult tpgfake_entry_init(unsigned flags);
CUresult tpgfake_entry_version(int *v);
void *tpgfake_entry_nccl(const char *name);
void *tpgfake_entry_cublaslt(const char *name);

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

/* cuBLASLt's, through the fake's table of them. */
#define LT(name) ((__typeof__(&name))tpgfake_entry_cublaslt(#name))

EXPORT size_t cublasLtGetVersion(void) { return LT(cublasLtGetVersion)(); }
EXPORT const char *cublasLtGetStatusString(cublasStatus_t s) { return LT(cublasLtGetStatusString)(s); }
EXPORT cublasStatus_t cublasLtCreate(cublasLtHandle_t *h) { return LT(cublasLtCreate)(h); }
EXPORT cublasStatus_t cublasLtDestroy(cublasLtHandle_t h) { return LT(cublasLtDestroy)(h); }
EXPORT cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *d, cublasComputeType_t c, cudaDataType_t s) {
  return LT(cublasLtMatmulDescCreate)(d, c, s);
}
EXPORT cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t d) { return LT(cublasLtMatmulDescDestroy)(d); }
EXPORT cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t a,
                                                     const void *buf, size_t n) {
  return LT(cublasLtMatmulDescSetAttribute)(d, a, buf, n);
}
EXPORT cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *l, cudaDataType t, uint64_t rows,
                                                 uint64_t cols, int64_t ld) {
  return LT(cublasLtMatrixLayoutCreate)(l, t, rows, cols, ld);
}
EXPORT cublasStatus_t cublasLtMatrixLayoutDestroy(const cublasLtMatrixLayout_t l) {
  return LT(cublasLtMatrixLayoutDestroy)(l);
}
EXPORT cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *p) {
  return LT(cublasLtMatmulPreferenceCreate)(p);
}
EXPORT cublasStatus_t cublasLtMatmulPreferenceDestroy(const cublasLtMatmulPreference_t p) {
  return LT(cublasLtMatmulPreferenceDestroy)(p);
}
EXPORT cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t p,
                                                           cublasLtMatmulPreferenceAttributes_t a, const void *buf,
                                                           size_t n) {
  return LT(cublasLtMatmulPreferenceSetAttribute)(p, a, buf, n);
}
EXPORT cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t h, cublasLtMatmulDesc_t op,
                                                     cublasLtMatrixLayout_t A, cublasLtMatrixLayout_t B,
                                                     cublasLtMatrixLayout_t C, cublasLtMatrixLayout_t D,
                                                     cublasLtMatmulPreference_t p, int req,
                                                     cublasLtMatmulHeuristicResult_t r[], int *found) {
  return LT(cublasLtMatmulAlgoGetHeuristic)(h, op, A, B, C, D, p, req, r, found);
}
EXPORT cublasStatus_t cublasLtMatmul(cublasLtHandle_t h, cublasLtMatmulDesc_t op, const void *alpha, const void *A,
                                     cublasLtMatrixLayout_t Ad, const void *B, cublasLtMatrixLayout_t Bd,
                                     const void *beta, const void *C, cublasLtMatrixLayout_t Cd, void *D,
                                     cublasLtMatrixLayout_t Dd, const cublasLtMatmulAlgo_t *algo, void *ws,
                                     size_t wsb, cudaStream_t s) {
  return LT(cublasLtMatmul)(h, op, alpha, A, Ad, B, Bd, beta, C, Cd, D, Dd, algo, ws, wsb, s);
}
