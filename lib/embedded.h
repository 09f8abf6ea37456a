/* embedded.h - the device code compiled into the library.
 *
 * //tools/cuda:defs.bzl's cuda_fatbin writes a NULL-terminated table of
 * tpg_embedded_blob (tpgraph.h: one fatbin per .cu file of kernels/) and the
 * assembler embeds the bytes, so the library carries its kernels and loads
 * them with cuLibraryLoadData: no files to ship next to it, no CUDA runtime.
 * Engines use the same rule for their own kernels and load a blob by name
 * with tpg_module_load_embedded.
 */
#ifndef TPG_EMBEDDED_H
#define TPG_EMBEDDED_H

#include "lib/tpgraph.h"

/* Defined by //kernels:device_code. */
extern const tpg_embedded_blob tpg_kernels[];
extern const char tpg_kernels_archs[];

#endif
