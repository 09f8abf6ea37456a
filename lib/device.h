/* device.h - devices, their primary contexts, and tpgraph's kernels on them. */
#ifndef TPG_DEVICE_H
#define TPG_DEVICE_H

#include "lib/cuda_driver.h"

/* A device in use: its primary context is retained while this is open. The
 * primary context is the one the CUDA runtime and NCCL use, so pointers,
 * streams and captured NCCL work all live in one context. */
typedef struct tpg_dev {
  int ordinal;
  CUdevice dev;
  CUcontext ctx;
  int sm_arch;   /* major*10 + minor */
  int sm_count;
} tpg_dev;

TPG_HIDDEN tpg_status tpg_dev_open(int ordinal, tpg_dev *out);
TPG_HIDDEN void tpg_dev_close(tpg_dev *d);

/* Make d's context current for the duration of a public call. */
TPG_HIDDEN tpg_status tpg_dev_push(const tpg_dev *d);
TPG_HIDDEN void tpg_dev_pop(void);

/* A kernel of the embedded fatbins as a function of the current context.
 * smem_bytes > 48 KiB raises the function's dynamic shared memory limit. */
TPG_HIDDEN tpg_status tpg_kernel_function(const char *name, unsigned smem_bytes, CUfunction *out);
/* Host microseconds this thread has spent in tpg_kernel_function and in
 * resolving engine kernels (module.c): loading device code and getting
 * functions. A graph reports the difference over its creation. */
TPG_HIDDEN double tpg_kernel_load_us(void);
TPG_HIDDEN void tpg_kernel_load_add_us(double us);

/* cuLaunchKernelEx of f with the cluster shape cluster[0..2] as a launch
 * attribute (NULL or cluster[0] == 0: none), for kernels that do not compile
 * their cluster shape in (an engine's kernel node, a GEMM's "_kc<S>" launch).
 * Returns the driver's result: the caller names what failed. */
TPG_HIDDEN CUresult tpg_launch_ex(CUfunction f, const unsigned grid[3], const unsigned block[3], unsigned smem_bytes,
                                  const unsigned *cluster, CUstream stream, void **params);

/* cuTensorMapEncodeTiled through the loaded driver, as a
 * tpg_cutlass_encode_fn (lib/gemm/cutlass.h; ctx unused): how the library
 * has CUTLASS encode its descriptors. */
TPG_HIDDEN CUresult tpg_tmap_encode_driver(void *ctx, CUtensorMap *map, CUtensorMapDataType dtype, cuuint32_t rank,
                                           void *base, const cuuint64_t *dims, const cuuint64_t *strides,
                                           const cuuint32_t *box, const cuuint32_t *elem_strides,
                                           CUtensorMapInterleave interleave, CUtensorMapSwizzle swizzle,
                                           CUtensorMapL2promotion l2, CUtensorMapFloatOOBfill oob);

#endif
