/* kernels_stub.c - an empty embedded-kernel table for the fuzz build.
 *
 * The fuzzer links lib/ and graphbuild/ straight from source with clang,
 * without Bazel's nvcc step (//kernels:device_code). No call it makes can
 * reach a GPU, so the table only has to exist: no fatbins, no archs.
 */
#include <stddef.h>

#include "lib/embedded.h"

const tpg_embedded_blob tpg_kernels[] = {{NULL, NULL, NULL}};
const char tpg_kernels_archs[] = "";
