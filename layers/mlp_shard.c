/* mlp_shard.c - tpg_mlp_shard_layer: one rank's part of a whole MLP layer,
 * copied on the device into the buffers tpg_plan_mlp's slots expect.
 *
 * Copies rows of W1 (and of the up projection), the matching biases, and the
 * strided columns of W2, on the caller's stream. The shapes are checked once,
 * by building the plan (tpg_plan_mlp) and destroying it. From inside the
 * library it takes what the public header cannot give: the device's primary
 * context made current (lib/device.h) and the driver the library loaded at
 * run time (TPG_CU: the library links no CUDA, so there is no other
 * cuMemcpyAsync to call), and lib/internal.h's error reporting, so a refusal
 * is named under tpg_mlp_shard_layer.
 */
#define _POSIX_C_SOURCE 200809L
#include <string.h>

#include "lib/device.h"
#include "lib/internal.h"

/* rows [r0, r0 + rows) of a [*, cols] matrix: one contiguous copy */
static tpg_status copy_rows(CUdeviceptr dst, const void *src, size_t r0, size_t rows, size_t cols, size_t es,
                            CUstream s) {
  TPG_CU(cuMemcpyAsync(dst, (CUdeviceptr)(uintptr_t)src + r0 * cols * es, rows * cols * es, s));
  return TPG_SUCCESS;
}

static tpg_status mlp_shard_layer(const tpg_mlp_desc *d, int device, const tpg_mlp_whole_layer *w,
                                  const tpg_mlp_rank_layer *o, tpg_stream stream) {
  TPG_CHECK_ARG(w != NULL, "whole is NULL: expected the layer's unsplit weights");
  TPG_CHECK_ARG(o != NULL, "out is NULL: expected this rank's buffers");
  tpg_plan *p;
  TPG_TRY(tpg_plan_mlp(d, &p)); /* all shape rules, once */
  tpg_plan_destroy(p);
  const int sw = d->kind == TPG_MLP_SWIGLU;
  TPG_CHECK_ARG(w->w1 && w->w2, "whole->w1 and whole->w2 must be set");
  TPG_CHECK_ARG(!sw || w->w1_up, "whole->w1_up is NULL: TPG_MLP_SWIGLU needs the up projection");
  TPG_CHECK_ARG(o->w1 && o->w2, "out->w1 and out->w2 must be set");
  if (d->bias) {
    TPG_CHECK_ARG(w->b1 && (!sw || w->b1_up) && w->b2, "desc->bias is 1: whole->b1%s and whole->b2 must be set",
                  sw ? ", b1_up" : "");
    TPG_CHECK_ARG(o->b1 && o->b2, "desc->bias is 1: out->b1 and out->b2 must be set");
  }
  const size_t es = tpg_dtype_size(d->dtype), H = (size_t)d->hidden, FF = (size_t)d->ffn;
  const size_t F = FF / (size_t)d->nranks, r0 = (size_t)d->rank * F;
  tpg_dev dev;
  TPG_TRY(tpg_dev_open(device, &dev));
  tpg_status st = tpg_dev_push(&dev);
  if (st != TPG_SUCCESS) {
    tpg_dev_close(&dev);
    return st;
  }
  CUstream s = (CUstream)stream;
  CUdeviceptr ow1 = (CUdeviceptr)(uintptr_t)o->w1;
  TPG_TRYGOTO(copy_rows(ow1, w->w1, r0, F, H, es, s), st, out);
  if (sw) TPG_TRYGOTO(copy_rows(ow1 + F * H * es, w->w1_up, r0, F, H, es, s), st, out);
  if (d->bias) {
    CUdeviceptr ob1 = (CUdeviceptr)(uintptr_t)o->b1;
    TPG_TRYGOTO(copy_rows(ob1, w->b1, r0, F, 1, es, s), st, out);
    if (sw) TPG_TRYGOTO(copy_rows(ob1 + F * es, w->b1_up, r0, F, 1, es, s), st, out);
    TPG_CUGOTO(cuMemcpyAsync((CUdeviceptr)(uintptr_t)o->b2, (CUdeviceptr)(uintptr_t)w->b2, H * es, s), st, out);
  }
  /* W2's columns [r0, r0 + F): a strided 2-D copy, hidden rows of F elements. */
  CUDA_MEMCPY2D c;
  memset(&c, 0, sizeof c);
  c.srcMemoryType = CU_MEMORYTYPE_DEVICE;
  c.srcDevice = (CUdeviceptr)(uintptr_t)w->w2 + r0 * es;
  c.srcPitch = FF * es;
  c.dstMemoryType = CU_MEMORYTYPE_DEVICE;
  c.dstDevice = (CUdeviceptr)(uintptr_t)o->w2;
  c.dstPitch = F * es;
  c.WidthInBytes = F * es;
  c.Height = H;
  TPG_CUGOTO(cuMemcpy2DAsync(&c, s), st, out);
out:
  tpg_dev_pop();
  tpg_dev_close(&dev);
  return st;
}

tpg_status tpg_mlp_shard_layer(const tpg_mlp_desc *d, int device, const tpg_mlp_whole_layer *w,
                               const tpg_mlp_rank_layer *o, tpg_stream stream) {
  tpg_err_clear();
  return tpg_err_public(mlp_shard_layer(d, device, w, o, stream), __func__);
}
