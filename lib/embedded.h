/* embedded.h - the device code compiled into the library.
 *
 * //tools/cuda:defs.bzl's cuda_fatbin writes a NULL-terminated table of these
 * (one fatbin per .cu file of kernels/) and the assembler embeds the bytes, so
 * the library carries its kernels and loads them with cuLibraryLoadData:
 * no files to ship next to it, no CUDA runtime.
 */
#ifndef TPG_EMBEDDED_H
#define TPG_EMBEDDED_H

typedef struct tpg_embedded_blob {
  const char *name;            /* source file stem, e.g. "gemv" */
  const unsigned char *start;  /* fatbin bytes                  */
  const unsigned char *end;
} tpg_embedded_blob;

/* Defined by //kernels:device_code. */
extern const tpg_embedded_blob tpg_kernels[];
extern const char tpg_kernels_archs[];

#endif
