/* module.h - engine device code (tpg_module) and engine kernels resolved on
 * a graph's device: the function to launch, its parameter layout, its limits.
 *
 * Three ways to name a kernel reach one result here (tpg_kit_kernel): a
 * module + name, a CUkernel (context-independent, what cudaGetKernel gives),
 * or a CUfunction of the graph's context. Everything runs in the context
 * current on the calling thread (the graph's primary context).
 */
#ifndef TPG_MODULE_H
#define TPG_MODULE_H

#include "lib/cuda_driver.h"
#include "lib/kit_args.h"

#define TPG_MAGIC_MODULE 0x4d4f444cu /* MODL */

struct tpg_module {
  unsigned magic;
  CUlibrary lib;                /* owned: cuLibraryUnload at destroy */
  /* Both live as long as the module: with lazy loading the driver may read
   * the image, and write the JIT log, when a kernel is first used on a
   * context (cuKernelGetFunction), long after cuLibraryLoadData returned. */
  void *image;                  /* owned copy of the caller's image */
  char jit_log[1024];           /* the latest JIT error (threads resolving kernels
                                   of one module at once may mix their logs) */
};

/* A tpg_module the caller may use (live handle), or an error naming `what`. */
TPG_HIDDEN tpg_status tpg_module_check(const tpg_module *m, const char *fn, const char *what);

/* An engine kernel as it runs in the current context. */
typedef struct tpg_kit_kernel {
  CUkernel kernel;              /* NULL when given as a CUfunction          */
  CUfunction func;              /* in the current context                   */
  int nparams;                  /* -1: the driver cannot say (before 12.4)  */
  size_t *param_offset;         /* owned, nparams entries                   */
  size_t *param_size;           /* owned                                    */
  int max_threads;              /* CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK  */
} tpg_kit_kernel;

/* Resolves the kernel a desc names (exactly one of module+name, cu_kernel,
 * cu_function; the plan checked that) in the current context, reads its
 * parameter layout and limits, and raises its dynamic shared memory limit
 * when shared_bytes > 48 KiB. Messages name the node (label). *out is zeroed
 * on failure; release with tpg_kit_kernel_release. */
TPG_HIDDEN tpg_status tpg_kit_kernel_resolve(const char *fn, const char *label, const tpg_module *module,
                                             const char *name, void *cu_kernel, void *cu_function,
                                             unsigned shared_bytes, tpg_kit_kernel *out);
TPG_HIDDEN void tpg_kit_kernel_release(tpg_kit_kernel *k);

/* The kernel's layout as kit_args takes it (count -1 when unknown). */
static inline tpg_param_layout tpg_kit_kernel_layout(const tpg_kit_kernel *k) {
  tpg_param_layout l = {k->nparams, k->param_offset, k->param_size};
  return l;
}

#endif
