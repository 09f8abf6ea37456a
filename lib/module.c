/* module.c - engine device code loaded by tpgraph, and engine kernels
 * resolved on a graph's device.
 *
 * Modules are CUlibrary objects (cuLibraryLoadData): context-independent,
 * so one load serves every GPU and every graph, and a kernel becomes a
 * CUfunction of a context only when a graph on that device needs it. The
 * parameter layout comes from the driver (cuKernelGetParamInfo, 12.4+), so
 * an argument list is checked against the kernel itself, not against what
 * the engine believes its signature is.
 */
#define _POSIX_C_SOURCE 200809L
#include "lib/module.h"
#include "lib/device.h"
#include "lib/handle.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* "<fn>: node <label>: <call> failed: CUDA_ERROR_X (text)" */
static tpg_status kit_cu_fail(CUresult r, const char *fn, const char *label, const char *call) {
  const char *name = NULL, *text = NULL;
  tpg_cu->cuGetErrorName(r, &name);
  tpg_cu->cuGetErrorString(r, &text);
  return tpg_err(r == CUDA_ERROR_OUT_OF_MEMORY ? TPG_ERROR_OUT_OF_MEMORY : TPG_ERROR_CUDA, fn,
                 "node %s: %s failed: %s (%s)", label, call, name ? name : "CUDA error", text ? text : "?");
}

tpg_status tpg_module_check(const tpg_module *m, const char *fn, const char *what) {
  if (!m) return tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn, "%s is NULL", what);
  if (!tpg_handle_live(m, TPG_MAGIC_MODULE) || m->magic != TPG_MAGIC_MODULE)
    return tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn, "%s is not a live tpg_module (destroyed or corrupt handle)", what);
  return TPG_SUCCESS;
}

/* ---- loading ------------------------------------------------------------ */

static uint64_t rd_le(const unsigned char *p, int n) {
  uint64_t v = 0;
  for (int i = n - 1; i >= 0; i--) v = (v << 8) | p[i];
  return v;
}

/* cuLibraryLoadData takes no size: it reads an ELF or fatbin by its own
 * headers and PTX up to its NUL. So the image's claims are checked against
 * `bytes` first, and a truncated or unterminated image is refused here
 * instead of being read past its end. */
static tpg_status check_image(const char *fn, const char *what, const unsigned char *im, size_t bytes) {
  if (bytes >= 4 && im[0] == 0x7f && im[1] == 'E' && im[2] == 'L' && im[3] == 'F') {
    if (bytes < 64 || im[4] != 2)
      return tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn, "%s is an ELF file of %zu bytes but not a 64-bit cubin",
                     what, bytes);
    uint64_t shoff = rd_le(im + 0x28, 8), shentsize = rd_le(im + 0x3a, 2), shnum = rd_le(im + 0x3c, 2);
    if (shoff > bytes || shentsize * shnum > bytes - shoff)
      return tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn,
                     "%s: the cubin's section table ends at byte %llu, past its %zu bytes (truncated?)",
                     what, (unsigned long long)(shoff + shentsize * shnum), bytes);
    return TPG_SUCCESS;
  }
  if (bytes >= 4 && rd_le(im, 4) == 0xba55ed50u) {
    if (bytes < 16) return tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn, "%s: a fatbin header is 16 bytes, it has %zu", what, bytes);
    const uint64_t head = rd_le(im + 6, 2), body = rd_le(im + 8, 8);
    if (body > bytes || head > bytes - body) /* not head + body: a body near 2^64 would wrap */
      return tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn,
                     "%s: the fatbin's header says %llu%s bytes, past its %zu bytes (truncated?)", what,
                     (unsigned long long)(body > UINT64_MAX - head ? UINT64_MAX : head + body),
                     body > UINT64_MAX - head ? " or more" : "", bytes);
    return TPG_SUCCESS;
  }
  if (!memchr(im, 0, bytes))
    return tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn,
                   "%s is neither a cubin (ELF) nor a fatbin, and as PTX text it has no NUL within its %zu bytes: "
                   "PTX must be NUL-terminated, with bytes counting the NUL",
                   what, bytes);
  return TPG_SUCCESS;
}

/* Loads `image` (owned by the module from here on, success or not). */
static tpg_status load(const char *fn, void *image, const char *what, tpg_module **out) {
  tpg_module *m = calloc(1, sizeof *m);
  if (!m) {
    free(image);
    return tpg_err(TPG_ERROR_OUT_OF_MEMORY, fn, "out of host memory");
  }
  m->image = image;
  CUjit_option opt[2] = {CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
  void *val[2] = {m->jit_log, (void *)(uintptr_t)sizeof m->jit_log};
  CUresult r = tpg_cu->cuLibraryLoadData(&m->lib, m->image, opt, val, 2, NULL, NULL, 0);
  if (r != CUDA_SUCCESS) {
    char log[sizeof m->jit_log];
    memcpy(log, m->jit_log, sizeof log);
    log[sizeof log - 1] = '\0';
    free(m->image);
    free(m);
    if (r == CUDA_ERROR_OUT_OF_MEMORY) return tpg_cu_fail(r, fn, "cuLibraryLoadData");
    const char *name = NULL;
    tpg_cu->cuGetErrorName(r, &name);
    for (char *c = log; *c; c++)
      if (*c == '\n') *c = ' ';
    return tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn, "%s: the driver refused the image: cuLibraryLoadData: %s%s%s", what,
                   name ? name : "CUDA error", log[0] ? ": " : "", log);
  }
  m->magic = TPG_MAGIC_MODULE;
  if (tpg_handle_add(m, TPG_MAGIC_MODULE) != TPG_SUCCESS) {
    tpg_cu->cuLibraryUnload(m->lib);
    free(m->image);
    free(m);
    return tpg_err(TPG_ERROR_OUT_OF_MEMORY, fn, "out of host memory");
  }
  *out = m;
  return TPG_SUCCESS;
}

static tpg_status module_load(const void *image, size_t bytes, tpg_module **out) {
  TPG_CHECK_ARG(out != NULL, "out is NULL: expected a tpg_module * to fill");
  *out = NULL;
  TPG_CHECK_ARG(image != NULL, "image is NULL: expected a cubin, fatbin or NUL-terminated PTX");
  TPG_CHECK_ARG(bytes > 0, "bytes is 0: expected the image's size (PTX: including its NUL)");
  TPG_TRY(check_image(__func__, "image", image, bytes));
  TPG_TRY(tpg_cu_load());
  /* Our own copy: the caller may free theirs when we return (see module.h). */
  void *copy = malloc(bytes);
  if (!copy) return TPG_FAIL(TPG_ERROR_OUT_OF_MEMORY, "out of host memory for a %zu-byte image", bytes);
  memcpy(copy, image, bytes);
  return load(__func__, copy, "image", out);
}

tpg_status tpg_module_load(const void *image, size_t bytes, tpg_module **out) {
  tpg_err_clear();
  return tpg_err_public(module_load(image, bytes, out), __func__);
}

static tpg_status module_load_file(const char *path, tpg_module **out) {
  TPG_CHECK_ARG(out != NULL, "out is NULL: expected a tpg_module * to fill");
  *out = NULL;
  TPG_CHECK_ARG(path != NULL && path[0], "path is NULL or empty: expected a .cubin, .fatbin or .ptx file");
  FILE *f = fopen(path, "rb");
  if (!f) return TPG_ARG_FAIL("path \"%s\" cannot be opened: %s", path, strerror(errno));
  tpg_status st = TPG_SUCCESS;
  unsigned char *buf = NULL;
  long n = -1;
  if (fseek(f, 0, SEEK_END) == 0) n = ftell(f);
  if (n <= 0 || fseek(f, 0, SEEK_SET) != 0) {
    st = TPG_ARG_FAIL("path \"%s\" is empty or not a regular file", path);
    goto done;
  }
  /* One more byte, zero: PTX files are text without a NUL of their own. */
  buf = calloc((size_t)n + 1, 1);
  if (!buf) {
    st = TPG_FAIL(TPG_ERROR_OUT_OF_MEMORY, "out of host memory for %ld bytes of \"%s\"", n, path);
    goto done;
  }
  if (fread(buf, 1, (size_t)n, f) != (size_t)n) {
    st = TPG_ARG_FAIL("path \"%s\": read failed: %s", path, strerror(errno));
    goto done;
  }
  char what[300];
  snprintf(what, sizeof what, "path \"%s\"", path);
  TPG_TRYGOTO(check_image(__func__, what, buf, (size_t)n + 1), st, done);
  TPG_TRYGOTO(tpg_cu_load(), st, done);
  st = load(__func__, buf, what, out);
  buf = NULL; /* the module's now (freed by load on failure) */
done:
  free(buf);
  fclose(f);
  return st;
}

tpg_status tpg_module_load_file(const char *path, tpg_module **out) {
  tpg_err_clear();
  return tpg_err_public(module_load_file(path, out), __func__);
}

/* A table cuda_fatbin wrote is NULL-terminated. The scan stops after this
 * many entries, which bounds the search of a corrupt table; it cannot stop a
 * read past the end of a shorter table without its NULL entry. */
#define TPG_EMBEDDED_MAX_BLOBS 4096

static tpg_status module_load_embedded(const tpg_embedded_blob *table, const char *name, tpg_module **out) {
  TPG_CHECK_ARG(out != NULL, "out is NULL: expected a tpg_module * to fill");
  *out = NULL;
  TPG_CHECK_ARG(table != NULL, "table is NULL: expected the NULL-terminated tpg_embedded_blob table of a cuda_fatbin "
                "target (its `symbol`)");
  TPG_CHECK_ARG(name != NULL && name[0], "name is NULL or empty: expected a blob's name (the stem of its .cu file)");
  char have[200] = "";
  size_t hl = 0;
  for (int i = 0; i < TPG_EMBEDDED_MAX_BLOBS; i++) {
    const tpg_embedded_blob *b = &table[i];
    if (!b->name)
      return TPG_ARG_FAIL("name \"%.100s\": the table has no such blob (it has %d: %s)", name, i, i ? have : "none");
    if (strcmp(b->name, name) != 0) {
      int w = snprintf(have + hl, sizeof have - hl, "%s%.40s", hl ? ", " : "", b->name);
      if (w > 0 && hl + (size_t)w < sizeof have) hl += (size_t)w;
      continue;
    }
    TPG_CHECK_ARG(b->start != NULL && b->end != NULL && b->end > b->start,
                  "table[%d] (\"%.100s\"): start and end do not delimit an image (start %p, end %p)", i, name,
                  (const void *)b->start, (const void *)b->end);
    const size_t bytes = (size_t)(b->end - b->start);
    char what[160];
    snprintf(what, sizeof what, "blob \"%.100s\"", name);
    TPG_TRY(check_image(__func__, what, b->start, bytes));
    TPG_TRY(tpg_cu_load());
    void *copy = malloc(bytes);
    if (!copy) return TPG_FAIL(TPG_ERROR_OUT_OF_MEMORY, "out of host memory for a %zu-byte image", bytes);
    memcpy(copy, b->start, bytes);
    return load(__func__, copy, what, out);
  }
  return TPG_ARG_FAIL("table has no NULL entry among its first %d: expected the NULL-terminated table cuda_fatbin "
                      "writes", TPG_EMBEDDED_MAX_BLOBS);
}

tpg_status tpg_module_load_embedded(const tpg_embedded_blob *table, const char *name, tpg_module **out) {
  tpg_err_clear();
  return tpg_err_public(module_load_embedded(table, name, out), __func__);
}

static tpg_status module_destroy(tpg_module *m) {
  if (!m) return TPG_SUCCESS;
  TPG_TRY(tpg_module_check(m, __func__, "module"));
  tpg_handle_remove(m);
  tpg_handle_poison(&m->magic);
  CUresult r = tpg_cu->cuLibraryUnload(m->lib);
  free(m->image);
  free(m);
  if (r != CUDA_SUCCESS) return tpg_cu_fail(r, __func__, "cuLibraryUnload");
  return TPG_SUCCESS;
}

tpg_status tpg_module_destroy(tpg_module *m) {
  tpg_err_clear();
  return tpg_err_public(module_destroy(m), __func__);
}

/* ---- resolving a kernel on the current context ------------------------- */

/* Asks the driver for parameter i; 0 = ok, 1 = no such parameter, -1 = the
 * driver cannot say. */
static int param_info(const tpg_kit_kernel *k, size_t i, size_t *off, size_t *size) {
  CUresult r;
  if (k->kernel && tpg_cu->cuKernelGetParamInfo) r = tpg_cu->cuKernelGetParamInfo(k->kernel, i, off, size);
  else if (!k->kernel && tpg_cu->cuFuncGetParamInfo) r = tpg_cu->cuFuncGetParamInfo(k->func, i, off, size);
  else return -1;
  if (r == CUDA_SUCCESS) return 0;
  return r == CUDA_ERROR_INVALID_VALUE ? 1 : -1;
}

static tpg_status read_params(const char *fn, tpg_kit_kernel *k) {
  size_t off, size;
  int n = 0, rc;
  while ((rc = param_info(k, (size_t)n, &off, &size)) == 0) {
    if (n >= (int)TPG_KIT_PARAMS_MAX_BYTES) return tpg_err(TPG_ERROR_INTERNAL, fn, "the driver reports > %d parameters", n);
    n++;
  }
  if (rc < 0) return TPG_SUCCESS; /* the driver cannot say: natural alignment (kit_args.h) */
  k->param_offset = malloc((size_t)(n ? n : 1) * sizeof(size_t));
  k->param_size = malloc((size_t)(n ? n : 1) * sizeof(size_t));
  if (!k->param_offset || !k->param_size) return tpg_err(TPG_ERROR_OUT_OF_MEMORY, fn, "out of host memory");
  for (int i = 0; i < n; i++)
    if (param_info(k, (size_t)i, &k->param_offset[i], &k->param_size[i]) != 0)
      return tpg_err(TPG_ERROR_INTERNAL, fn, "the driver stopped answering for parameter %d", i);
  k->nparams = n;
  return TPG_SUCCESS;
}

void tpg_kit_kernel_release(tpg_kit_kernel *k) {
  if (!k) return;
  free(k->param_offset);
  free(k->param_size);
  memset(k, 0, sizeof *k);
  k->nparams = -1;
}

static tpg_status kit_kernel_resolve(const char *fn, const char *label, const tpg_module *module, const char *name,
                                     void *cu_kernel, void *cu_function, unsigned shared_bytes, tpg_kit_kernel *out) {
  memset(out, 0, sizeof *out);
  out->nparams = -1;
  tpg_status st = TPG_SUCCESS;
  CUresult r;
  if (module) {
    TPG_TRY(tpg_module_check(module, fn, "desc.module"));
    r = tpg_cu->cuLibraryGetKernel(&out->kernel, module->lib, name);
    if (r == CUDA_ERROR_NOT_FOUND || r == CUDA_ERROR_INVALID_VALUE)
      return tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn,
                     "node %s: the module has no kernel named \"%s\" (C++ kernels go by their mangled name unless "
                     "declared extern \"C\")",
                     label, name);
    if (r != CUDA_SUCCESS) return kit_cu_fail(r, fn, label, "cuLibraryGetKernel");
  } else if (cu_kernel) {
    out->kernel = (CUkernel)cu_kernel;
  }
  if (out->kernel) {
    r = tpg_cu->cuKernelGetFunction(&out->func, out->kernel);
    if (r == CUDA_ERROR_NO_BINARY_FOR_GPU || r == CUDA_ERROR_INVALID_PTX || r == CUDA_ERROR_UNSUPPORTED_PTX_VERSION) {
      /* With lazy loading the JIT runs here, and its log lands in the module. */
      const char *log = module && module->jit_log[0] ? module->jit_log : "";
      return tpg_err(TPG_ERROR_NO_DEVICE, fn, "node %s: the kernel has no code that runs on this GPU (%s)%s%.300s",
                     label,
                     r == CUDA_ERROR_NO_BINARY_FOR_GPU ? "no SASS for its architecture and no PTX to JIT"
                                                       : "its PTX does not compile with this driver",
                     log[0] ? ": " : "", log);
    }
    if (r == CUDA_ERROR_INVALID_HANDLE)
      return tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn, "node %s: %s is not a valid CUkernel", label,
                     module ? "the module's kernel" : "desc.cu_kernel");
    if (r != CUDA_SUCCESS) return kit_cu_fail(r, fn, label, "cuKernelGetFunction");
  } else {
    out->func = (CUfunction)cu_function;
  }
  r = tpg_cu->cuFuncGetAttribute(&out->max_threads, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, out->func);
  if (r == CUDA_ERROR_INVALID_HANDLE || r == CUDA_ERROR_INVALID_CONTEXT) {
    st = tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn,
                 "node %s: desc.cu_function is not a function of the graph device's primary context (%s)", label,
                 r == CUDA_ERROR_INVALID_HANDLE ? "invalid handle" : "another context");
    goto fail;
  }
  if (r != CUDA_SUCCESS) {
    st = kit_cu_fail(r, fn, label, "cuFuncGetAttribute(MAX_THREADS_PER_BLOCK)");
    goto fail;
  }
  TPG_TRYGOTO(read_params(fn, out), st, fail);
  if (shared_bytes > 48 * 1024) {
    r = tpg_cu->cuFuncSetAttribute(out->func, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, (int)shared_bytes);
    if (r == CUDA_ERROR_INVALID_VALUE) {
      int stat = 0;
      tpg_cu->cuFuncGetAttribute(&stat, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, out->func);
      st = tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn,
                   "node %s: shared_bytes = %u is more dynamic shared memory than this GPU gives the kernel (it has "
                   "%d bytes of static shared memory; the opt-in limit per block covers both)",
                   label, shared_bytes, stat);
      goto fail;
    }
    if (r != CUDA_SUCCESS) {
      st = kit_cu_fail(r, fn, label, "cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)");
      goto fail;
    }
  }
  return TPG_SUCCESS;
fail:
  tpg_kit_kernel_release(out);
  return st;
}

/* Timed: resolving an engine kernel may load its module's code into the
 * context (the driver loads lazily), which graph creation reports. */
tpg_status tpg_kit_kernel_resolve(const char *fn, const char *label, const tpg_module *module, const char *name,
                                  void *cu_kernel, void *cu_function, unsigned shared_bytes, tpg_kit_kernel *out) {
  double t0 = tpg_now_us();
  tpg_status st = kit_kernel_resolve(fn, label, module, name, cu_kernel, cu_function, shared_bytes, out);
  tpg_kernel_load_add_us(tpg_now_us() - t0);
  return st;
}
