/* kernels_fake.c - an embedded-kernel table for the graph fuzzer.
 *
 * graph_fuzz runs on the stand-in driver, which accepts any bytes as a
 * fatbin and serves every tpgraph kernel name from it; one non-empty blob
 * and an sm_90 arch list are all the library needs to believe its kernels
 * are there.
 */
#include <stddef.h>

#include "lib/embedded.h"

static const unsigned char blob[] = "fake fatbin"; /* "fake...": an image the stand-in driver accepts */
const tpg_embedded_blob tpg_kernels[] = {{"fake", blob, blob + sizeof blob}, {NULL, NULL, NULL}};
const char tpg_kernels_archs[] = "sm_90a,sm_80";
