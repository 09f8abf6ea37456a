/* cuda_driver.h - the CUDA driver entry points tpgraph uses, loaded at run time.
 *
 * libcuda is dlopen'ed, not linked: the library then loads and answers on a
 * machine with no driver (CI, a build box) with TPG_ERROR_NO_DRIVER instead of
 * failing to start, and every entry point is pinned to the ABI version this
 * file names (cuGetProcAddress), not to whatever the headers' macros map to.
 * $TPG_LIBCUDA overrides the file loaded (tests point it at the stub).
 */
#ifndef TPG_CUDA_DRIVER_H
#define TPG_CUDA_DRIVER_H

#include <cuda.h>
#include <cudaTypedefs.h>

#include "lib/internal.h"

/* Each list: X(name, abi version of its PFN_ typedef in cudaTypedefs.h).
 * The kit's entry points (lib/module.c, lib/capture.c, its node kinds,
 * export, launch under capture): a list of their own because the stand-in
 * driver (tests/fake/fake_entry.h) declares exactly these across files. */
#define TPG_CU_FUNCS_KIT(X) \
  X(cuCtxGetCurrent, 4000) \
  X(cuFuncGetAttribute, 2020) \
  X(cuLaunchKernelEx, 11060) \
  X(cuLaunchHostFunc, 10000) \
  X(cuStreamWaitEvent, 3020) \
  X(cuGraphAddHostNode, 10000) \
  X(cuGraphAddEventRecordNode, 11010) \
  X(cuGraphAddEventWaitNode, 11010) \
  X(cuGraphNodeGetType, 10000) \
  X(cuGraphKernelNodeGetParams, 12000) \
  X(cuGraphKernelNodeSetParams, 12000) \
  X(cuGraphMemsetNodeGetParams, 10000) \
  X(cuGraphMemsetNodeSetParams, 10000) \
  X(cuGraphMemcpyNodeGetParams, 10000) \
  X(cuGraphMemcpyNodeSetParams, 10000) \
  X(cuGraphHostNodeGetParams, 10000) \
  X(cuGraphHostNodeSetParams, 10000) \
  X(cuGraphChildGraphNodeGetGraph, 10000) \
  X(cuStreamGetCaptureInfo, 12030) \
  X(cuStreamUpdateCaptureDependencies, 12030) \
  X(cuEventRecordWithFlags, 11010) \
  X(cuGraphKernelNodeSetAttribute, 11000) \
/* end */

#define TPG_CU_FUNCS(X) \
  X(cuInit, 2000) \
  X(cuDriverGetVersion, 2020) \
  X(cuDeviceGetCount, 2000) \
  X(cuDeviceGet, 2000) \
  X(cuDeviceGetName, 2000) \
  X(cuDeviceGetAttribute, 2000) \
  X(cuDeviceTotalMem, 3020) \
  X(cuDevicePrimaryCtxRetain, 7000) \
  X(cuDevicePrimaryCtxRelease, 11000) \
  X(cuCtxPushCurrent, 4000) \
  X(cuCtxPopCurrent, 4000) \
  X(cuGetErrorName, 6000) \
  X(cuGetErrorString, 6000) \
  X(cuLibraryLoadData, 12000) \
  X(cuLibraryUnload, 12000) \
  X(cuLibraryGetKernel, 12000) \
  X(cuKernelGetFunction, 12000) \
  X(cuFuncSetAttribute, 9000) \
  X(cuMemAlloc, 3020) \
  X(cuMemFree, 3020) \
  X(cuMemGetAddressRange, 3020) \
  X(cuPointerGetAttribute, 4000) \
  X(cuStreamCreate, 2000) \
  X(cuStreamDestroy, 4000) \
  X(cuStreamSynchronize, 2000) \
  X(cuStreamQuery, 2000) \
  X(cuStreamBeginCapture, 10010) \
  X(cuStreamEndCapture, 10000) \
  X(cuEventCreate, 2000) \
  X(cuEventRecord, 2000) \
  X(cuEventQuery, 2000) \
  X(cuEventDestroy, 4000) \
  X(cuEventSynchronize, 2000) \
  X(cuEventElapsedTime, 2000) /* the GEMM tuner's timer */ \
  X(cuGraphCreate, 10000) \
  X(cuGraphDestroy, 10000) \
  X(cuGraphAddKernelNode, 12000) \
  X(cuGraphAddMemsetNode, 10000) \
  X(cuGraphAddMemcpyNode, 10000) \
  X(cuGraphAddEmptyNode, 10000) \
  X(cuGraphAddChildGraphNode, 10000) \
  X(cuGraphInstantiateWithFlags, 11040) \
  X(cuGraphExecDestroy, 10000) \
  X(cuGraphLaunch, 10000) \
  X(cuGraphExecKernelNodeSetParams, 12000) \
  X(cuGraphExecMemsetNodeSetParams, 10020) \
  X(cuGraphExecMemcpyNodeSetParams, 10020) \
  X(cuGraphExecChildGraphNodeSetParams, 11010) \
  X(cuGraphExecUpdate, 12000) \
  X(cuGraphDebugDotPrint, 11030) \
  X(cuMemGetInfo, 3020) \
  X(cuGraphGetNodes, 10000) \
  X(cuMemsetD32Async, 3020) \
  X(cuMemsetD16Async, 3020) \
  X(cuMemcpyAsync, 4000) \
  X(cuMemcpy2DAsync, 3020) \
  X(cuLaunchKernel, 4000) \
  X(cuTensorMapEncodeTiled, 12000) \
  X(cuIpcGetMemHandle, 4010) \
  X(cuIpcOpenMemHandle, 11000) \
  X(cuIpcCloseMemHandle, 4010) \
  X(cuCtxEnablePeerAccess, 4000) \
  X(cuMemHostAlloc, 2020) \
  X(cuMemHostGetDevicePointer, 3020) \
  X(cuMemFreeHost, 2000) \
  X(cuMemcpyDtoH, 3020) \
  X(cuMemcpyHtoD, 3020) \
  X(cuDeviceCanAccessPeer, 4000) \
  X(cuMemsetD32, 3020) \
  X(cuGraphAddDependencies, 12030) /* with CUgraphEdgeData: TPG_GRAPH_PDL */ \
  X(cuGraphGetEdges, 12030) \
  TPG_CU_FUNCS_KIT(X) \
/* end */

/* Entry points newer than the oldest driver accepted: NULL in the table when
 * the driver lacks them, and their callers fall back (say how where used). */
#define TPG_CU_FUNCS_OPTIONAL(X) \
  X(cuKernelGetParamInfo, 12040) /* 12.4: argument checks against the real layout */ \
  X(cuFuncGetParamInfo, 12040) \
  X(cuGraphConditionalHandleCreate, 12030) /* 12.3: conditional nodes (refused without) */ \
  X(cuGraphAddNode, 12030) \
/* end */

typedef struct tpg_cu_table {
#define TPG_CU_FIELD(name, ver) PFN_##name##_v##ver name;
  TPG_CU_FUNCS(TPG_CU_FIELD)
  TPG_CU_FUNCS_OPTIONAL(TPG_CU_FIELD)
#undef TPG_CU_FIELD
  int driver_version;
} tpg_cu_table;

/* The loaded table; NULL until tpg_cu_load succeeded. */
TPG_HIDDEN extern const tpg_cu_table *tpg_cu;

/* Loads libcuda once per process and runs cuInit(0). Thread-safe. On failure
 * records why (missing library, stub library, driver too old) and returns
 * TPG_ERROR_NO_DRIVER; the failure is remembered, later calls return it too. */
TPG_HIDDEN tpg_status tpg_cu_load(void);

/* Records a failed driver call: "<what>: CUDA_ERROR_X (text)". */
TPG_HIDDEN tpg_status tpg_cu_fail(CUresult r, const char *fn, const char *what);

/* Call a driver entry point; on error record and return TPG_ERROR_CUDA. */
#define TPG_CU(call)                                                          \
  do {                                                                        \
    CUresult tpg_r_ = tpg_cu->call;                                           \
    if (tpg_r_ != CUDA_SUCCESS) return tpg_cu_fail(tpg_r_, __func__, #call);  \
  } while (0)
/* Same, into `st` and a cleanup label. */
#define TPG_CUGOTO(call, st, label)                                           \
  do {                                                                        \
    CUresult tpg_r_ = tpg_cu->call;                                           \
    if (tpg_r_ != CUDA_SUCCESS) { (st) = tpg_cu_fail(tpg_r_, __func__, #call); goto label; } \
  } while (0)

#endif
