/* shim.c - libcuda_fake.so: what TPG_LIBCUDA points at.
 *
 * lib/cuda_driver.c dlopens a file and looks up three symbols in it; every
 * other entry point comes from cuGetProcAddress. The fake itself lives in the
 * test executable (linked from //tests/fake:fake, exported with -rdynamic) so
 * that it shares one state with the fake NCCL the executable also defines;
 * this library only forwards the three symbols to it. Loaded by a program
 * without the fake, dlopen fails on the undefined tpgfake_entry_* symbols:
 * a clear "cannot load", never a half-working driver.
 */
#include <cuda.h>

CUresult tpgfake_entry_get_proc(const char *sym, void **pfn, int ver, cuuint64_t flags,
                                CUdriverProcAddressQueryResult *found);
CUresult tpgfake_entry_init(unsigned flags);
CUresult tpgfake_entry_version(int *v);

#undef cuGetProcAddress
__attribute__((visibility("default"))) CUresult cuGetProcAddress_v2(const char *sym, void **pfn, int ver,
                                                                     cuuint64_t flags,
                                                                     CUdriverProcAddressQueryResult *found) {
  return tpgfake_entry_get_proc(sym, pfn, ver, flags, found);
}
__attribute__((visibility("default"))) CUresult cuInit(unsigned flags) { return tpgfake_entry_init(flags); }
__attribute__((visibility("default"))) CUresult cuDriverGetVersion(int *v) { return tpgfake_entry_version(v); }
