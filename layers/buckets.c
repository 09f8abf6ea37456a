/* buckets.c - one graph per token-count bucket of an MLP stack.
 *
 * Graphs are built for fixed shapes; an engine serving any batch size keeps
 * a few and pads up to the next one. Every bucket's plan comes from the same
 * tpg_plan_mlp call with another token count, so slot ids agree and one set
 * of bindings (sized for the maximum) serves all. Memory is reported as
 * measured — free device memory before and after each graph — because what
 * NCCL's captures and CUDA's instantiation allocate is not ours to estimate.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdlib.h>
#include <string.h>

#include "lib/cuda_driver.h"
#include "lib/handle.h"

#define TPG_MAX_BUCKETS 32

struct tpg_mlp_buckets {
  unsigned magic;
  int n;
  int tokens[TPG_MAX_BUCKETS];
  size_t bytes[TPG_MAX_BUCKETS];
  tpg_graph *graph[TPG_MAX_BUCKETS];
};

#define TPG_MAGIC_BUCKETS 0x424b5453u /* BKTS */

static int cmp_int(const void *a, const void *b) { return *(const int *)a - *(const int *)b; }

static tpg_status mlp_find_slot(const tpg_mlp_desc *desc, const char *name, tpg_slot *out) {
  TPG_CHECK_ARG(out != NULL, "out is NULL: expected a tpg_slot to set");
  *out = TPG_SLOT_NONE;
  TPG_CHECK_ARG(name != NULL, "name is NULL: expected a slot name such as \"x\" or \"l0.w1\"");
  tpg_plan *p;
  TPG_TRY(tpg_plan_mlp(desc, &p));
  tpg_status st = tpg_plan_find_slot(p, name, out);
  tpg_plan_destroy(p);
  return st;
}

tpg_status tpg_mlp_find_slot(const tpg_mlp_desc *desc, const char *name, tpg_slot *out) {
  tpg_err_clear();
  return tpg_err_public(mlp_find_slot(desc, name, out), __func__);
}

static size_t free_bytes(int device) {
  CUdevice dev;
  CUcontext ctx;
  size_t fr = 0, tot = 0;
  if (tpg_cu->cuDeviceGet(&dev, device) != CUDA_SUCCESS) return 0;
  if (tpg_cu->cuDevicePrimaryCtxRetain(&ctx, dev) != CUDA_SUCCESS) return 0;
  if (tpg_cu->cuCtxPushCurrent(ctx) == CUDA_SUCCESS) {
    tpg_cu->cuMemGetInfo(&fr, &tot);
    tpg_cu->cuCtxPopCurrent(&ctx);
  }
  tpg_cu->cuDevicePrimaryCtxRelease(dev);
  return fr;
}

static int buckets_live(const tpg_mlp_buckets *b) {
  return tpg_handle_live(b, TPG_MAGIC_BUCKETS) && b->magic == TPG_MAGIC_BUCKETS;
}

/* As tpg_graph_destroy: a graph whose destroy failed and left it whole (its
 * context could not be made current) stays in the buckets, which then stay
 * live too, so that a second call frees what is left instead of leaking it. */
static tpg_status mlp_buckets_destroy(tpg_mlp_buckets *b) {
  if (!b) return TPG_SUCCESS;
  TPG_CHECK_ARG(buckets_live(b), "buckets is not a live tpg_mlp_buckets");
  tpg_status st = TPG_SUCCESS;
  int kept = 0;
  for (int i = 0; i < b->n; i++) {
    tpg_status s = tpg_graph_destroy(b->graph[i]);
    if (s != TPG_SUCCESS && st == TPG_SUCCESS) st = s;
    if (s != TPG_SUCCESS && tpg_handle_live(b->graph[i], TPG_MAGIC_GRAPH)) {
      b->tokens[kept] = b->tokens[i];
      b->bytes[kept] = b->bytes[i];
      b->graph[kept++] = b->graph[i];
    }
  }
  b->n = kept;
  if (kept) return st;
  tpg_handle_remove(b);
  tpg_handle_poison(&b->magic);
  free(b);
  return st;
}

tpg_status tpg_mlp_buckets_destroy(tpg_mlp_buckets *b) {
  tpg_err_clear();
  return tpg_err_public(mlp_buckets_destroy(b), __func__);
}

static tpg_status mlp_buckets_create(const tpg_mlp_desc *desc, const int *sizes, int nsizes,
                                     const tpg_graph_config *cfg, tpg_mlp_buckets **out) {
  TPG_CHECK_ARG(out != NULL, "out is NULL: expected a tpg_mlp_buckets * to set");
  *out = NULL;
  TPG_CHECK_ARG(desc != NULL, "desc is NULL: expected the stack's tpg_mlp_desc (tokens = the maximum)");
  TPG_CHECK_ARG(cfg != NULL, "cfg is NULL: expected a tpg_graph_config with the bindings");
  TPG_CHECK_ARG(nsizes >= 0 && nsizes < TPG_MAX_BUCKETS, "nsizes is %d: expected 0..%d", nsizes,
                TPG_MAX_BUCKETS - 1);
  TPG_CHECK_ARG(nsizes == 0 || sizes != NULL, "sizes is NULL but nsizes is %d", nsizes);
  int list[TPG_MAX_BUCKETS], n = 0;
  for (int i = 0; i < nsizes; i++) {
    TPG_CHECK_ARG(sizes[i] >= 1 && sizes[i] <= desc->tokens,
                  "sizes[%d] is %d: expected 1..%d (desc->tokens, the maximum)", i, sizes[i], desc->tokens);
    list[n++] = sizes[i];
  }
  list[n++] = desc->tokens;
  qsort(list, (size_t)n, sizeof list[0], cmp_int);
  int m = 0;
  for (int i = 0; i < n; i++)
    if (m == 0 || list[m - 1] != list[i]) list[m++] = list[i];
  tpg_plan *maxp;
  TPG_TRY(tpg_plan_mlp(desc, &maxp)); /* checks desc once, for the maximum */
  tpg_plan_destroy(maxp);
  TPG_TRY(tpg_cu_load());

  tpg_mlp_buckets *b = calloc(1, sizeof *b);
  if (!b) return TPG_FAIL(TPG_ERROR_OUT_OF_MEMORY, "out of host memory");
  b->magic = TPG_MAGIC_BUCKETS;
  if (tpg_handle_add(b, TPG_MAGIC_BUCKETS) != TPG_SUCCESS) {
    free(b);
    return TPG_FAIL(TPG_ERROR_OUT_OF_MEMORY, "out of host memory");
  }
  tpg_status st = TPG_SUCCESS;
  for (int i = 0; i < m; i++) {
    tpg_mlp_desc d = *desc;
    d.tokens = list[i];
    if (d.overlap == TPG_OVERLAP_CHUNKED && d.chunks > d.tokens) d.overlap = TPG_OVERLAP_NONE;
    if (d.overlap == TPG_OVERLAP_CHUNKED && d.chunks == 0 && d.tokens < 2) d.overlap = TPG_OVERLAP_NONE;
    tpg_plan *p;
    st = tpg_plan_mlp(&d, &p);
    if (st != TPG_SUCCESS) break;
    size_t before = free_bytes(cfg->device);
    st = tpg_graph_create(p, cfg, &b->graph[i]);
    size_t after = free_bytes(cfg->device);
    tpg_plan_destroy(p);
    if (st != TPG_SUCCESS) break;
    b->tokens[i] = list[i];
    b->bytes[i] = before > after ? before - after : 0;
    b->n = i + 1;
  }
  if (st != TPG_SUCCESS) {
    char msg[1024];
    strncpy(msg, tpg_last_error(), sizeof msg - 1);
    msg[sizeof msg - 1] = '\0';
    /* A destroy that failed left its graphs whole: once more (the second
     * call of the documented recovery); the caller has no handle to retry. */
    if (tpg_mlp_buckets_destroy(b) != TPG_SUCCESS) tpg_mlp_buckets_destroy(b);
    return tpg_err(st, __func__, "%s", msg);
  }
  *out = b;
  return TPG_SUCCESS;
}

tpg_status tpg_mlp_buckets_create(const tpg_mlp_desc *desc, const int *sizes, int nsizes,
                                  const tpg_graph_config *cfg, tpg_mlp_buckets **out) {
  tpg_err_clear();
  return tpg_err_public(mlp_buckets_create(desc, sizes, nsizes, cfg, out), __func__);
}

tpg_status tpg_mlp_buckets_pick(tpg_mlp_buckets *b, int tokens, int *bucket_tokens, tpg_graph **graph) {
  tpg_err_clear();
  TPG_CHECK_ARG(b != NULL && buckets_live(b), "buckets is NULL or not a live tpg_mlp_buckets");
  TPG_CHECK_ARG(bucket_tokens != NULL && graph != NULL, "bucket_tokens and graph must not be NULL");
  *graph = NULL;
  *bucket_tokens = 0;
  TPG_CHECK_ARG(tokens >= 1 && tokens <= b->tokens[b->n - 1], "tokens is %d: expected 1..%d (the largest bucket)",
                tokens, b->tokens[b->n - 1]);
  for (int i = 0; i < b->n; i++)
    if (b->tokens[i] >= tokens) {
      *bucket_tokens = b->tokens[i];
      *graph = b->graph[i];
      return TPG_SUCCESS;
    }
  return TPG_FAIL(TPG_ERROR_INTERNAL, "no bucket for %d tokens", tokens);
}

tpg_status tpg_mlp_buckets_get_info(const tpg_mlp_buckets *b, int i, int *count, int *tokens, size_t *device_bytes) {
  tpg_err_clear();
  TPG_CHECK_ARG(b != NULL && buckets_live(b), "buckets is NULL or not a live tpg_mlp_buckets");
  if (count) *count = b->n;
  TPG_CHECK_ARG(i >= 0 && i < b->n, "i is %d: expected 0..%d", i, b->n - 1);
  if (tokens) *tokens = b->tokens[i];
  if (device_bytes) *device_bytes = b->bytes[i];
  return TPG_SUCCESS;
}
