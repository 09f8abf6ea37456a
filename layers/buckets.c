/* buckets.c - one graph per token-count bucket of an MLP stack.
 *
 * Graphs are built for fixed shapes; an engine serving any batch size keeps
 * a few and pads up to the next one. This is a graph set (tpg_graph_set)
 * whose builder is tpg_plan_mlp at each bucket's token count: slot ids agree
 * across buckets, so the caller's one set of bindings (sized for the
 * maximum) serves all, and the buckets' scratch ("act", "h") is one arena.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdlib.h>
#include <string.h>

#include "lib/handle.h"

#define TPG_MAX_BUCKETS 32

struct tpg_mlp_buckets {
  unsigned magic;
  tpg_graph_set *set;
};

#define TPG_MAGIC_BUCKETS 0x424b5453u /* BKTS */

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

static int buckets_live(const tpg_mlp_buckets *b) {
  return tpg_handle_live(b, TPG_MAGIC_BUCKETS) && b->magic == TPG_MAGIC_BUCKETS;
}

/* As tpg_graph_set_destroy: a set whose destroy failed (a context could not
 * be made current) stays whole, and the buckets with it, so that a second
 * call frees what is left instead of leaking it. */
static tpg_status mlp_buckets_destroy(tpg_mlp_buckets *b) {
  if (!b) return TPG_SUCCESS;
  TPG_CHECK_ARG(buckets_live(b), "buckets is not a live tpg_mlp_buckets");
  TPG_TRY(tpg_graph_set_destroy(b->set));
  tpg_handle_remove(b);
  tpg_handle_poison(&b->magic);
  free(b);
  return TPG_SUCCESS;
}

tpg_status tpg_mlp_buckets_destroy(tpg_mlp_buckets *b) {
  tpg_err_clear();
  return tpg_err_public(mlp_buckets_destroy(b), __func__);
}

/* The set's builder: the stack at one bucket's token count, bound to the
 * caller's buffers (the same slot ids in every bucket). */
typedef struct bucket_build {
  const tpg_mlp_desc *desc;
  const tpg_graph_config *cfg;
} bucket_build;

static tpg_status build_bucket(void *user, int tokens, tpg_graph_set_step *out) {
  const bucket_build *bb = user;
  tpg_mlp_desc d = *bb->desc;
  d.tokens = tokens;
  if (d.overlap == TPG_OVERLAP_CHUNKED && d.chunks > d.tokens) d.overlap = TPG_OVERLAP_NONE;
  if (d.overlap == TPG_OVERLAP_CHUNKED && d.chunks == 0 && d.tokens < 2) d.overlap = TPG_OVERLAP_NONE;
  out->bindings = bb->cfg->bindings;
  out->nbindings = bb->cfg->nbindings;
  return tpg_plan_mlp(&d, &out->plan);
}

static tpg_status mlp_buckets_create(const tpg_mlp_desc *desc, const int *sizes, int nsizes,
                                     const tpg_graph_config *cfg, tpg_mlp_buckets **out) {
  TPG_CHECK_ARG(out != NULL, "out is NULL: expected a tpg_mlp_buckets * to set");
  *out = NULL;
  TPG_CHECK_ARG(desc != NULL, "desc is NULL: expected the stack's tpg_mlp_desc (tokens = the maximum)");
  TPG_CHECK_ARG(cfg != NULL, "cfg is NULL: expected a tpg_graph_config with the bindings");
  TPG_CHECK_ARG(cfg->magic == TPG_CONFIG_MAGIC && cfg->size >= offsetof(tpg_graph_config, flags) + sizeof(unsigned),
                "cfg was not initialised with TPG_GRAPH_CONFIG_INIT (magic 0x%x, size %zu)", cfg->magic, cfg->size);
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
  tpg_plan *maxp;
  TPG_TRY(tpg_plan_mlp(desc, &maxp)); /* checks desc once, for the maximum */
  tpg_plan_destroy(maxp);

  tpg_mlp_buckets *b = calloc(1, sizeof *b);
  if (!b) return TPG_FAIL(TPG_ERROR_OUT_OF_MEMORY, "out of host memory");
  b->magic = TPG_MAGIC_BUCKETS;
  if (tpg_handle_add(b, TPG_MAGIC_BUCKETS) != TPG_SUCCESS) {
    free(b);
    return TPG_FAIL(TPG_ERROR_OUT_OF_MEMORY, "out of host memory");
  }
  tpg_graph_config c = *cfg; /* the bindings go through the builder */
  if (cfg->size < sizeof c) memset((char *)&c + cfg->size, 0, sizeof c - cfg->size);
  c.bindings = NULL;
  c.nbindings = 0;
  bucket_build bb = {desc, cfg};
  tpg_status st = tpg_graph_set_create(list, n, build_bucket, &bb, &c, 0, &b->set);
  if (st != TPG_SUCCESS) {
    char msg[1024];
    strncpy(msg, tpg_last_error(), sizeof msg - 1);
    msg[sizeof msg - 1] = '\0';
    tpg_handle_remove(b);
    free(b);
    const char *rest = strstr(msg, ": ");
    return tpg_err(st, __func__, "%s", rest ? rest + 2 : msg);
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
  tpg_status st = tpg_graph_set_pick(b->set, tokens, bucket_tokens, graph);
  if (st != TPG_SUCCESS) tpg_err_rename(__func__);
  return st;
}

tpg_status tpg_mlp_buckets_get_info(const tpg_mlp_buckets *b, int i, int *count, int *tokens, size_t *device_bytes) {
  tpg_err_clear();
  TPG_CHECK_ARG(b != NULL && buckets_live(b), "buckets is NULL or not a live tpg_mlp_buckets");
  tpg_graph_set_info si;
  TPG_TRY(tpg_graph_set_get_info(b->set, &si, sizeof si));
  if (count) *count = si.count;
  TPG_CHECK_ARG(i >= 0 && i < si.count, "i is %d: expected 0..%d", i, si.count - 1);
  tpg_graph_set_size_info zi;
  tpg_status st = tpg_graph_set_get_size_info(b->set, i, &zi, sizeof zi);
  if (st != TPG_SUCCESS) {
    tpg_err_rename(__func__);
    return st;
  }
  if (tokens) *tokens = zi.size;
  if (device_bytes) *device_bytes = zi.measured_bytes;
  return TPG_SUCCESS;
}
