/* graphset.c - one step at many batch sizes (tpg_graph_set).
 *
 * The decisions:
 * - The builder runs for every size before any graph exists (plans are host
 *   data, built in milliseconds), and every graph is begun (its nodes'
 *   kernels and GEMM workspace lanes chosen) before any is finished, so the
 *   one arena is sized first: the largest scratch need of any size, then
 *   lane k as large as any size's lane k. Each graph lays its scratch slots
 *   out from the arena's start (scratch.c) and its k-th lane at the k-th
 *   place (workspace.c says why the places are fixed); one graph of a set
 *   runs at a time (the documented rule), so they never meet.
 * - One graph per size is the default: a pick is a search of a short array
 *   and the launch is the graph's own. Retargeting (one exec) trades that
 *   for memory; docs/batching.md has both measured.
 * - Retargeting reuses the node kinds' patch, the path a rebind takes: every
 *   size's nodes are prepared and filled at creation against the one
 *   graph's bindings (their lanes in the arena as above); a pick swaps the graph's plan, state and node array
 *   for that size's and patches every node (its kind's exec setter). Patch
 *   reads the graph's bindings as they are then, so a rebind made while one
 *   size was picked holds for the others too.
 * - TPG_GRAPH_SET_PARALLEL finishes the begun graphs (nodes, captures,
 *   instantiation: most of a size's time) on worker threads, each with the
 *   set's context current; plans, beginnings and the arena stay on the
 *   calling thread, so kernel choice and lane sizes are as in a serial
 *   build. Not with a communicator of several ranks: NCCL captures must be
 *   made in one order on every rank.
 */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "graphbuild/graph.h"
#include "lib/handle.h"

#define TPG_MAGIC_GSET 0x47534554u /* GSET */
#define TPG_SET_MAX_SIZES 1024
#define TPG_SET_THREADS 8 /* TPG_GRAPH_SET_PARALLEL: at most this many workers */

/* RETARGET: one size's plan, state and nodes for the one graph (the
 * largest size's are the graph's own), its workspace lanes and the memory
 * of those alone. */
typedef struct set_variant {
  tpg_plan *plan;
  tpg_state *st;
  tpg_gnode *nodes;
  tpg_ws_plan ws;
  CUdeviceptr ws_mem;
} set_variant;

/* A built step: the builder's plan (owned) and a copy of its bindings. */
typedef struct set_step {
  tpg_plan *plan;
  tpg_binding *b;
  int nb;
} set_step;

struct tpg_graph_set {
  unsigned magic;
  unsigned flags;
  int n;
  int *sizes;                    /* ascending */
  tpg_graph **graphs;            /* [n]; RETARGET: only [n-1] */
  tpg_graph_set_size_info *info; /* [n] */
  tpg_graph_set_info total;
  set_step *steps;               /* [n], during creation only */
  tpg_dev dev;                   /* the arena's device, retained while open */
  CUdeviceptr arena;             /* scratch from its start, then the workspace lanes */
  tpg_ws_plan caps;              /* lane k: the largest lane k of any size (workspace.c) */
  set_variant *var;              /* RETARGET: [n] */
  int cur;                       /* RETARGET: the size the exec runs now */
};

static int set_live(const tpg_graph_set *s) {
  return tpg_handle_live(s, TPG_MAGIC_GSET) && s->magic == TPG_MAGIC_GSET;
}

static int cmp_int(const void *a, const void *b) {
  int x = *(const int *)a, y = *(const int *)b;
  return (x > y) - (x < y);
}

/* ---- teardown ------------------------------------------------------------ */

/* A variant's nodes (their kinds free what prepare and fill took), lanes,
 * state and plan; the graph's context is current (g NULL: the set's, the
 * graph's creation having failed). */
static void variant_free(tpg_graph *g, set_variant *v) {
  for (int i = 0; v->nodes && v->plan && i < v->plan->nnodes; i++) {
    const tpg_kind_ops *k = tpg_kind(v->plan->nodes[i].kind);
    if (k->release) k->release(g, &v->nodes[i]);
  }
  if (v->ws_mem) tpg_cu->cuMemFree(v->ws_mem);
  tpg_ws_plan_free(&v->ws);
  free(v->nodes);
  tpg_state_free(v->st);
  tpg_plan_destroy(v->plan);
  memset(v, 0, sizeof *v);
}

/* RETARGET: the graph gets its own (largest) plan, state and nodes back,
 * and the other sizes' are freed once its launches are done. */
static tpg_status variants_free(tpg_graph_set *s) {
  tpg_graph *g = s->graphs[s->n - 1];
  if (!s->var) return TPG_SUCCESS;
  TPG_TRY(tpg_dev_push(g ? &g->dev : &s->dev));
  if (g && g->launched) tpg_cu->cuEventSynchronize(g->done);
  if (g) {
    g->plan = s->var[s->n - 1].plan;
    g->st = s->var[s->n - 1].st;
    g->nodes = s->var[s->n - 1].nodes;
  }
  for (int i = 0; i < s->n - 1; i++) variant_free(g, &s->var[i]);
  tpg_dev_pop();
  free(s->var);
  s->var = NULL;
  return TPG_SUCCESS;
}

/* The builder's steps: plans not yet made into graphs, binding copies. */
static void steps_free(tpg_graph_set *s) {
  for (int i = 0; s->steps && i < s->n; i++) {
    tpg_plan_destroy(s->steps[i].plan);
    free(s->steps[i].b);
  }
  free(s->steps);
  s->steps = NULL;
}

/* Everything the set holds. A graph whose destroy failed (its context could
 * not be made current) stays, and so does the set: the call can be made
 * again. */
static tpg_status set_release(tpg_graph_set *s) {
  tpg_status st = variants_free(s);
  if (st != TPG_SUCCESS) return st;
  int kept = 0;
  for (int i = 0; s->graphs && i < s->n; i++) {
    if (!s->graphs[i]) continue;
    s->graphs[i]->in_set = 0;
    tpg_status d = tpg_graph_destroy(s->graphs[i]);
    if (d != TPG_SUCCESS && tpg_graph_live(s->graphs[i])) {
      s->graphs[i]->in_set = 1;
      kept++;
      if (st == TPG_SUCCESS) st = d;
      continue;
    }
    s->graphs[i] = NULL;
  }
  if (kept) return st;
  if (s->arena) {
    tpg_status ps = tpg_dev_push(&s->dev);
    if (ps != TPG_SUCCESS) return ps;
    tpg_cu->cuMemFree(s->arena);
    tpg_dev_pop();
    s->arena = 0;
  }
  steps_free(s);
  tpg_ws_plan_free(&s->caps);
  tpg_dev_close(&s->dev);
  free(s->sizes);
  free(s->graphs);
  free(s->info);
  tpg_handle_remove(s);
  tpg_handle_poison(&s->magic);
  free(s);
  return st;
}

static tpg_status set_destroy(tpg_graph_set *s) {
  if (!s) return TPG_SUCCESS;
  TPG_CHECK_ARG(set_live(s), "set is not a live tpg_graph_set (destroyed or corrupt handle)");
  return set_release(s);
}

tpg_status tpg_graph_set_destroy(tpg_graph_set *s) {
  tpg_err_clear();
  return tpg_err_public(set_destroy(s), __func__);
}

/* ---- creation: arguments and the builder --------------------------------- */

static tpg_status check_args(const int *sizes, int nsizes, tpg_graph_set_builder build,
                             const tpg_graph_config *cfg, unsigned flags) {
  TPG_CHECK_ARG(nsizes >= 1 && nsizes <= TPG_SET_MAX_SIZES, "nsizes is %d: expected 1..%d", nsizes,
                TPG_SET_MAX_SIZES);
  TPG_CHECK_ARG(sizes != NULL, "sizes is NULL: expected %d batch sizes", nsizes);
  for (int i = 0; i < nsizes; i++)
    TPG_CHECK_ARG(sizes[i] >= 1, "sizes[%d] is %d: expected a batch size >= 1", i, sizes[i]);
  TPG_CHECK_ARG(build != NULL, "build is NULL: expected the step builder (tpg_graph_set_builder)");
  TPG_CHECK_ARG(cfg != NULL, "cfg is NULL: expected a tpg_graph_config (TPG_GRAPH_CONFIG_INIT)");
  TPG_CHECK_ARG(cfg->magic == TPG_CONFIG_MAGIC && cfg->size >= offsetof(tpg_graph_config, flags) + sizeof(unsigned),
                "cfg was not initialised with TPG_GRAPH_CONFIG_INIT (magic 0x%x, size %zu)", cfg->magic, cfg->size);
  TPG_CHECK_ARG(cfg->nbindings == 0 && cfg->bindings == NULL,
                "cfg->bindings is set (%d): the builder gives each size's bindings; expected none in cfg",
                cfg->nbindings);
  TPG_CHECK_ARG((flags & ~(TPG_GRAPH_SET_RETARGET | TPG_GRAPH_SET_PRIVATE_SCRATCH | TPG_GRAPH_SET_PARALLEL)) == 0,
                "flags is 0x%x: expected TPG_GRAPH_SET_* bits only (RETARGET, PRIVATE_SCRATCH, PARALLEL)", flags);
  TPG_CHECK_ARG(!(flags & TPG_GRAPH_SET_PARALLEL) || !(flags & TPG_GRAPH_SET_RETARGET),
                "flags has TPG_GRAPH_SET_PARALLEL and TPG_GRAPH_SET_RETARGET: a retargeted set has one graph");
  TPG_CHECK_ARG(!(flags & TPG_GRAPH_SET_PARALLEL) || !cfg->comm || cfg->comm->nranks == 1,
                "flags has TPG_GRAPH_SET_PARALLEL and cfg->comm has %d ranks: NCCL captures must be made in one "
                "order on every rank, so a set on several ranks is built on the calling thread",
                cfg->comm ? cfg->comm->nranks : 0);
  TPG_CHECK_ARG(!(flags & TPG_GRAPH_SET_RETARGET) || cfg->mode == TPG_MODE_EXPLICIT,
                "cfg->mode is %d with TPG_GRAPH_SET_RETARGET: retargeting needs TPG_MODE_EXPLICIT (exec setters)",
                (int)cfg->mode);
  return TPG_SUCCESS;
}

/* Calls the builder for size i into s->steps[i]; the step's plan is the
 * set's from here on, whatever the builder returned. */
static tpg_status build_one(tpg_graph_set *s, int i, tpg_graph_set_builder build, void *user) {
  const int size = s->sizes[i];
  tpg_graph_set_step out;
  memset(&out, 0, sizeof out);
  const double t0 = tpg_now_us();
  tpg_err_clear();
  tpg_status rc = build(user, size, &out);
  s->info[i].builder_us = tpg_now_us() - t0;
  if (out.plan) {
    if (tpg_plan_check(out.plan, __func__, "plan") != TPG_SUCCESS)
      return TPG_ARG_FAIL("the builder's plan for size %d is not a live tpg_plan", size);
    for (int j = i + 1; j < s->n; j++)
      if (s->steps[j].plan == out.plan)
        return TPG_ARG_FAIL("the builder returned the same plan for sizes %d and %d: expected one plan per size",
                            size, s->sizes[j]);
    s->steps[i].plan = out.plan;
  }
  if (rc != TPG_SUCCESS) {
    char msg[900];
    snprintf(msg, sizeof msg, "%s", tpg_last_error());
    return tpg_err(rc, __func__, "the builder failed for size %d: %s", size, msg[0] ? msg : "(no message)");
  }
  TPG_CHECK_ARG(out.plan != NULL, "the builder returned TPG_SUCCESS for size %d without a plan", size);
  TPG_CHECK_ARG(out.nbindings >= 0 && (out.nbindings == 0 || out.bindings != NULL),
                "the builder's bindings for size %d: %d bindings at %p", size, out.nbindings,
                (const void *)out.bindings);
  s->steps[i].b = malloc((size_t)(out.nbindings ? out.nbindings : 1) * sizeof *s->steps[i].b);
  if (!s->steps[i].b) return TPG_FAIL(TPG_ERROR_OUT_OF_MEMORY, "out of host memory");
  if (out.nbindings) memcpy(s->steps[i].b, out.bindings, (size_t)out.nbindings * sizeof *out.bindings);
  s->steps[i].nb = out.nbindings;
  return TPG_SUCCESS;
}

/* The sorted, distinct sizes and the arrays sized by them. */
static tpg_status set_alloc(const int *sizes, int nsizes, unsigned flags, tpg_graph_set **out) {
  tpg_graph_set *s = calloc(1, sizeof *s);
  int *list = malloc((size_t)nsizes * sizeof *list);
  if (!s || !list) {
    free(s);
    free(list);
    return TPG_FAIL(TPG_ERROR_OUT_OF_MEMORY, "out of host memory");
  }
  memcpy(list, sizes, (size_t)nsizes * sizeof *list);
  qsort(list, (size_t)nsizes, sizeof *list, cmp_int);
  int n = 0;
  for (int i = 0; i < nsizes; i++)
    if (n == 0 || list[n - 1] != list[i]) list[n++] = list[i];
  s->magic = TPG_MAGIC_GSET;
  s->flags = flags;
  s->n = n;
  s->sizes = list;
  s->graphs = calloc((size_t)n, sizeof *s->graphs);
  s->info = calloc((size_t)n, sizeof *s->info);
  s->steps = calloc((size_t)n, sizeof *s->steps);
  if (!s->graphs || !s->info || !s->steps || tpg_handle_add(s, TPG_MAGIC_GSET) != TPG_SUCCESS) {
    free(s->graphs);
    free(s->info);
    free(s->steps);
    free(list);
    free(s);
    return TPG_FAIL(TPG_ERROR_OUT_OF_MEMORY, "out of host memory");
  }
  for (int i = 0; i < n; i++) s->info[i].size = list[i];
  *out = s;
  return TPG_SUCCESS;
}

/* Each step's arena need (its used scratch slots, as its graph will lay
 * them out); the arena is the largest. */
static tpg_status size_arena(tpg_graph_set *s, const tpg_graph_config *cfg, size_t *arena) {
  *arena = 0;
  if (cfg->comm) TPG_TRY(tpg_comm_check_usable(cfg->comm, __func__, "cfg->comm"));
  const int sym = cfg->comm && cfg->comm->nranks > 1 && (cfg->flags & TPG_GRAPH_NCCL_SYMMETRIC);
  for (int i = 0; i < s->n; i++) {
    tpg_state *st = NULL;
    tpg_status rc = tpg_plan_validate(s->steps[i].plan);
    if (rc == TPG_SUCCESS) rc = tpg_state_build(s->steps[i].plan, &st);
    if (rc != TPG_SUCCESS) {
      char msg[900];
      snprintf(msg, sizeof msg, "%s", tpg_last_error());
      const char *rest = strstr(msg, ": ");
      return tpg_err(rc, __func__, "size %d: %s", s->sizes[i], rest ? rest + 2 : msg);
    }
    s->info[i].arena_bytes = tpg_state_arena_bytes(st, s->steps[i].plan, sym);
    tpg_state_free(st);
    if (s->info[i].arena_bytes > *arena) *arena = s->info[i].arena_bytes;
  }
  return TPG_SUCCESS;
}

/* ---- creation: graphs ---------------------------------------------------- */

/* Free device memory now (the set's context current); 0 when the driver
 * cannot say: a measurement, never a reason to fail. */
static size_t free_now(void) {
  size_t fr = 0, tot = 0;
  if (tpg_cu->cuMemGetInfo(&fr, &tot) != CUDA_SUCCESS) return 0;
  return fr;
}

/* "size N: " before the innermost message (no public name doubled). */
static tpg_status size_fail(tpg_status st, int size) {
  char msg[900];
  snprintf(msg, sizeof msg, "%s", tpg_last_error());
  const char *rest = strstr(msg, ": ");
  return tpg_err(st, "tpg_graph_set_create", "size %d: %s", size, rest ? rest + 2 : msg);
}

/* Size i's graph begun: its nodes' kernels and workspace lanes chosen, no
 * memory laid out yet; the set's context is current. */
static tpg_status begin_graph(tpg_graph_set *s, int i, const tpg_graph_config *cfg) {
  tpg_graph_config c;
  memset(&c, 0, sizeof c);
  memcpy(&c, cfg, cfg->size < sizeof c ? cfg->size : sizeof c);
  c.bindings = s->steps[i].b;
  c.nbindings = s->steps[i].nb;
  const int alone = !(s->flags & TPG_GRAPH_SET_PARALLEL); /* finish_graph says why */
  const size_t before = alone ? free_now() : 0;
  const double t0 = tpg_now_us();
  tpg_status st = tpg_graph_begin(s->steps[i].plan, &c, &s->graphs[i]);
  s->info[i].create_us = tpg_now_us() - t0;
  if (st != TPG_SUCCESS) return size_fail(st, s->sizes[i]);
  const size_t after = alone ? free_now() : 0;
  tpg_graph *g = s->graphs[i];
  g->in_set = 1;
  s->info[i].measured_bytes = before > after ? before - after : 0;
  s->info[i].workspace_bytes = tpg_ws_bytes(&g->ws, 0, g->ws.shared);
  s->info[i].arena_bytes += s->info[i].workspace_bytes;
  return tpg_ws_caps_merge(&s->caps, &g->ws);
}

/* Size i's graph finished (memory laid out, ext: in the set's arena; the
 * exec), its plan then dropped; a failure frees it. */
static tpg_status finish_graph(tpg_graph_set *s, int i, const tpg_graph_ext *ext) {
  tpg_graph *g = s->graphs[i];
  const int alone = !(s->flags & TPG_GRAPH_SET_PARALLEL); /* else the others' allocations would count */
  const size_t before = alone ? free_now() : 0;
  const double t0 = tpg_now_us();
  tpg_status st = tpg_graph_finish(g, ext);
  s->info[i].create_us += tpg_now_us() - t0;
  if (st != TPG_SUCCESS) {
    s->graphs[i] = NULL;
    return size_fail(st, s->sizes[i]);
  }
  const size_t after = alone ? free_now() : 0;
  s->info[i].measured_bytes += before > after ? before - after : 0;
  s->info[i].own_bytes = g->info.workspace_bytes;
  s->info[i].instantiate_us = g->info.instantiate_us;
  tpg_plan_destroy(s->steps[i].plan);
  s->steps[i].plan = NULL;
  return TPG_SUCCESS;
}

/* The arena: `scratch` bytes from its start, then the workspace lanes
 * (s->caps), zeroed on `stream` and waited for, so that every kernel finds
 * its counters zero. */
static tpg_status arena_alloc(tpg_graph_set *s, size_t scratch, CUstream stream) {
  const size_t ws = tpg_ws_bytes(&s->caps, 0, s->caps.n);
  CUdeviceptr a = 0;
  TPG_CU(cuMemAlloc(&a, scratch + ws));
  s->arena = a;
  s->total.arena_bytes = scratch + ws;
  s->total.workspace_bytes = ws;
  if (!ws) return TPG_SUCCESS;
  TPG_CU(cuMemsetD32Async(a + scratch, 0, ws / 4, stream));
  TPG_CU(cuStreamSynchronize(stream));
  return TPG_SUCCESS;
}

/* RETARGET: size i's step has the one graph's layout: the same nodes, kinds,
 * edges and slots (none larger), bound to the same buffers. */
static tpg_status same_layout(const tpg_graph_set *s, const tpg_graph *g, int i) {
  const set_step *st = &s->steps[i];
  const tpg_plan *p = st->plan;
  TPG_TRY(tpg_plan_same_topology(g->plan, p));
  for (int q = 0; q < p->nslots; q++) {
    const tpg_slot_rec *a = &g->plan->slots[q], *b = &p->slots[q];
    TPG_CHECK_ARG(!strcmp(a->name, b->name) && a->dtype == b->dtype && a->where == b->where && b->count <= a->count,
                  "slot %d is \"%s\" (dtype %d, memory %d, %zu elements) but the largest size's is \"%s\" (dtype %d, "
                  "memory %d, %zu): a retargeting set needs one slot layout, no slot larger than the largest size's",
                  q + 1, b->name, (int)b->dtype, (int)b->where, b->count, a->name, (int)a->dtype, (int)a->where,
                  a->count);
  }
  TPG_CHECK_ARG(st->nb == s->steps[s->n - 1].nb, "%d bindings, the largest size %d: a retargeting set binds every "
                "size alike", st->nb, s->steps[s->n - 1].nb);
  for (int k = 0; k < st->nb; k++) {
    const tpg_slot q = st->b[k].slot;
    TPG_CHECK_ARG(q >= 1 && q <= (tpg_slot)p->nslots && st->b[k].ptr == g->bind[q - 1],
                  "bindings[%d] (slot %u) is %p, the largest size's %p: a retargeting set binds every size alike", k,
                  q, st->b[k].ptr, q >= 1 && q <= (tpg_slot)p->nslots ? g->bind[q - 1] : NULL);
  }
  return TPG_SUCCESS;
}

/* Each node of size i (filled as v->nodes) against the exec's node of the
 * largest size: its kind can retarget it. Copies the exec's node handles in. */
static tpg_status check_retarget(const set_variant *big, set_variant *v) {
  char lb[160];
  for (int j = 0; j < v->plan->nnodes; j++) {
    const tpg_kind_ops *k = tpg_kind(v->plan->nodes[j].kind);
    tpg_gnode *gn = &v->nodes[j];
    const tpg_gnode *ga = &big->nodes[j];
    memcpy(gn->cu, ga->cu, sizeof gn->cu);
    gn->ncu = ga->ncu;
    gn->nfwd = ga->nfwd;
    if (!k->retarget)
      return TPG_FAIL(TPG_ERROR_UNSUPPORTED, "node %s is a %s node, which an exec cannot retarget (its parameters "
                      "are a child graph's or fixed): use one graph per size (no TPG_GRAPH_SET_RETARGET)",
                      tpg_node_label(v->plan, j, lb, sizeof lb), k->name);
    if (!k->retarget(&big->plan->nodes[j], ga, &v->plan->nodes[j], gn))
      return TPG_FAIL(TPG_ERROR_UNSUPPORTED, "node %s needs a launch the largest size's exec node cannot take "
                      "(another cluster shape, memset width, memory kind or all-reduce path): use one graph per "
                      "size (no TPG_GRAPH_SET_RETARGET)", tpg_node_label(v->plan, j, lb, sizeof lb));
  }
  return TPG_SUCCESS;
}

/* RETARGET: size i's nodes prepared against the one graph (kernels,
 * workspace lanes); the graph's context is current. */
static tpg_status variant_prepare(tpg_graph_set *s, int i) {
  tpg_graph *g = s->graphs[s->n - 1];
  set_variant *v = &s->var[i];
  const double t0 = tpg_now_us();
  TPG_TRY(same_layout(s, g, i));
  v->plan = s->steps[i].plan; /* the set's: handles of the largest size's plan reach it */
  s->steps[i].plan = NULL;
  v->plan->serial = g->plan->serial;
  TPG_TRY(tpg_state_build(v->plan, &v->st));
  v->nodes = tpg_gnodes_alloc(v->plan->nnodes);
  if (!v->nodes) return TPG_FAIL(TPG_ERROR_OUT_OF_MEMORY, "out of host memory");
  TPG_TRY(tpg_prepare_nodes(g, v->st, v->plan, v->nodes));
  TPG_TRY(tpg_ws_plan_build(g, v->st, v->plan, v->nodes, &v->ws));
  s->info[i].workspace_bytes = tpg_ws_bytes(&v->ws, 0, v->ws.shared);
  s->info[i].arena_bytes += s->info[i].workspace_bytes;
  s->info[i].create_us = tpg_now_us() - t0;
  return tpg_ws_caps_merge(&s->caps, &v->ws);
}

/* RETARGET: size i's nodes placed (shared lanes in the set's arena, those
 * alone in memory of its own) and filled against the one graph. */
static tpg_status variant_fill(tpg_graph_set *s, int i) {
  tpg_graph *g = s->graphs[s->n - 1];
  set_variant *v = &s->var[i];
  const double t0 = tpg_now_us();
  const size_t own = tpg_ws_bytes(&v->ws, v->ws.shared, v->ws.n);
  TPG_TRY(tpg_ws_mem(own, g->cap_stream, &v->ws_mem));
  s->info[i].own_bytes += own;
  tpg_ws_place(&v->ws, &s->caps, s->arena, v->ws_mem, v->nodes, v->plan->nnodes);
  TPG_TRY(tpg_fill_nodes(g, v->st, v->plan, g->bind, v->nodes));
  TPG_TRY(check_retarget(&s->var[s->n - 1], v));
  s->info[i].create_us += tpg_now_us() - t0;
  return TPG_SUCCESS;
}

/* A step of size i's variant, its free-memory drop measured, a failure
 * named by the size. */
static tpg_status variant_step(tpg_graph_set *s, int i, tpg_status (*step)(tpg_graph_set *, int)) {
  const size_t before = free_now();
  tpg_status st = step(s, i);
  const size_t after = free_now();
  s->info[i].measured_bytes += before > after ? before - after : 0;
  return st == TPG_SUCCESS ? st : size_fail(st, s->sizes[i]);
}

/* RETARGET: the one graph (the largest size, its own scratch) begun, every
 * other size's variant prepared, the arena sized by all their lanes, the
 * graph finished in it, then the variants filled. */
static tpg_status create_retarget(tpg_graph_set *s, const tpg_graph_config *cfg) {
  TPG_TRY(begin_graph(s, s->n - 1, cfg));
  tpg_graph *g = s->graphs[s->n - 1];
  g->in_set = 2;
  s->var = calloc((size_t)s->n, sizeof *s->var);
  if (!s->var) return TPG_FAIL(TPG_ERROR_OUT_OF_MEMORY, "out of host memory");
  s->var[s->n - 1] = (set_variant){g->plan, g->st, g->nodes, {NULL, 0, 0}, 0};
  s->cur = s->n - 1;
  TPG_TRY(tpg_dev_push(&g->dev));
  tpg_status st = TPG_SUCCESS;
  for (int i = s->n - 2; i >= 0 && st == TPG_SUCCESS; i--) st = variant_step(s, i, variant_prepare);
  if (st == TPG_SUCCESS && tpg_ws_bytes(&s->caps, 0, s->caps.n)) st = arena_alloc(s, 0, g->cap_stream);
  const tpg_graph_ext ext = {s->arena, 0, s->arena, &s->caps};
  if (st == TPG_SUCCESS) st = finish_graph(s, s->n - 1, &ext); /* frees the graph if it fails */
  for (int i = s->n - 2; i >= 0 && st == TPG_SUCCESS; i--) st = variant_step(s, i, variant_fill);
  /* The variants' own workspaces are zeroed on the graph's stream: done before any launch. */
  if (st == TPG_SUCCESS) {
    CUresult r = tpg_cu->cuStreamSynchronize(g->cap_stream);
    if (r != CUDA_SUCCESS) st = tpg_cu_fail(r, "tpg_graph_set_create", "cuStreamSynchronize");
  }
  tpg_dev_pop();
  return st;
}

/* TPG_GRAPH_SET_PARALLEL: the workers take sizes largest first until none
 * is left or one has failed; the first failure and its message are kept. */
typedef struct finish_pool {
  tpg_graph_set *s;
  const tpg_graph_ext *ext;
  pthread_mutex_t mu;
  int next; /* the next size to finish; -1: none left */
  tpg_status st;
  char msg[1024];
} finish_pool;

static void pool_fail(finish_pool *p, tpg_status st) {
  pthread_mutex_lock(&p->mu);
  if (p->st == TPG_SUCCESS) {
    p->st = st;
    snprintf(p->msg, sizeof p->msg, "%s", tpg_last_error());
  }
  pthread_mutex_unlock(&p->mu);
}

static void *finish_worker(void *arg) {
  finish_pool *p = arg;
  tpg_status st = tpg_dev_push(&p->s->dev);
  if (st != TPG_SUCCESS) {
    pool_fail(p, st);
    return NULL;
  }
  for (;;) {
    pthread_mutex_lock(&p->mu);
    const int i = p->st == TPG_SUCCESS ? p->next-- : -1;
    pthread_mutex_unlock(&p->mu);
    if (i < 0) break;
    if ((st = finish_graph(p->s, i, p->ext)) != TPG_SUCCESS) pool_fail(p, st);
  }
  tpg_dev_pop();
  return NULL;
}

static tpg_status finish_parallel(tpg_graph_set *s, const tpg_graph_ext *ext) {
  finish_pool p;
  pthread_t th[TPG_SET_THREADS];
  const long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  int want = s->n < TPG_SET_THREADS ? s->n : TPG_SET_THREADS, started = 0;
  if (cpus >= 1 && cpus < want) want = (int)cpus;
  memset(&p, 0, sizeof p);
  p.s = s, p.ext = ext, p.next = s->n - 1, p.st = TPG_SUCCESS;
  pthread_mutex_init(&p.mu, NULL);
  while (started < want && pthread_create(&th[started], NULL, finish_worker, &p) == 0) started++;
  if (started == 0) finish_worker(&p); /* no thread to be had: this one */
  for (int i = 0; i < started; i++) pthread_join(th[i], NULL);
  pthread_mutex_destroy(&p.mu);
  if (p.st == TPG_SUCCESS) return TPG_SUCCESS;
  const char *rest = strstr(p.msg, ": "); /* the worker's "tpg_graph_set_create: " */
  return tpg_err(p.st, "tpg_graph_set_create", "%s", rest ? rest + 2 : p.msg);
}

/* Per size, largest first: every graph begun (kernels, workspace lanes),
 * the arena sized by them (the largest scratch, then lane k as large as
 * any size's lane k), every graph finished in it. */
static tpg_status create_graphs(tpg_graph_set *s, const tpg_graph_config *cfg, size_t scratch) {
  for (int i = s->n - 1; i >= 0; i--) TPG_TRY(begin_graph(s, i, cfg));
  tpg_graph_ext ext = {0, 0, 0, NULL};
  if (!(s->flags & TPG_GRAPH_SET_PRIVATE_SCRATCH) && scratch + tpg_ws_bytes(&s->caps, 0, s->caps.n)) {
    TPG_TRY(arena_alloc(s, scratch, s->graphs[s->n - 1]->cap_stream));
    ext = (tpg_graph_ext){s->arena, scratch, s->arena + scratch, &s->caps};
  }
  if (s->flags & TPG_GRAPH_SET_PARALLEL) return finish_parallel(s, s->arena ? &ext : NULL);
  for (int i = s->n - 1; i >= 0; i--) TPG_TRY(finish_graph(s, i, s->arena ? &ext : NULL));
  return TPG_SUCCESS;
}

static tpg_status set_create(const int *sizes, int nsizes, tpg_graph_set_builder build, void *user,
                             const tpg_graph_config *cfg, unsigned flags, tpg_graph_set **out) {
  TPG_CHECK_ARG(out != NULL, "out is NULL: expected a tpg_graph_set * to set");
  *out = NULL;
  TPG_TRY(check_args(sizes, nsizes, build, cfg, flags));
  const double t0 = tpg_now_us();
  tpg_graph_set *s = NULL;
  TPG_TRY(set_alloc(sizes, nsizes, flags, &s));
  tpg_status st = TPG_SUCCESS;
  size_t arena = 0;
  for (int i = s->n - 1; i >= 0 && st == TPG_SUCCESS; i--) st = build_one(s, i, build, user);
  if (st == TPG_SUCCESS) st = size_arena(s, cfg, &arena);
  if (st == TPG_SUCCESS) st = tpg_dev_open(cfg->device, &s->dev);
  if (st == TPG_SUCCESS) st = tpg_dev_push(&s->dev);
  if (st == TPG_SUCCESS) {
    const size_t before = free_now();
    st = flags & TPG_GRAPH_SET_RETARGET ? create_retarget(s, cfg) : create_graphs(s, cfg, arena);
    const size_t after = free_now();
    tpg_dev_pop();
    s->total.measured_bytes = before > after ? before - after : 0;
  }
  if (st != TPG_SUCCESS) {
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", tpg_last_error());
    /* A destroy that failed left its graphs whole: once more (the second
     * call of the documented recovery); the caller has no handle to retry. */
    if (set_release(s) != TPG_SUCCESS) set_release(s);
    const char *rest = strstr(msg, ": ");
    return tpg_err(st, "tpg_graph_set_create", "%s", rest ? rest + 2 : msg);
  }
  steps_free(s);
  s->total.count = s->n;
  s->total.retarget = (flags & TPG_GRAPH_SET_RETARGET) != 0;
  s->total.graphs = s->total.retarget ? 1 : s->n;
  for (int i = 0; i < s->n; i++) {
    s->total.own_bytes += s->info[i].own_bytes;
    s->total.builder_us += s->info[i].builder_us;
  }
  s->total.build_us = tpg_now_us() - t0;
  *out = s;
  return TPG_SUCCESS;
}

tpg_status tpg_graph_set_create(const int *sizes, int nsizes, tpg_graph_set_builder build, void *user,
                                const tpg_graph_config *cfg, unsigned flags, tpg_graph_set **out) {
  tpg_err_clear();
  return tpg_err_public(set_create(sizes, nsizes, build, user, cfg, flags, out), __func__);
}

/* ---- picking ------------------------------------------------------------- */

/* The exec runs size i's nodes: the graph takes its plan, state and node
 * array, and every node is patched (its kind's exec setter) in topological
 * order. The graph's context is current. */
static tpg_status apply_variant(tpg_graph_set *s, tpg_graph *g, int i) {
  g->plan = s->var[i].plan;
  g->st = s->var[i].st;
  g->nodes = s->var[i].nodes;
  s->cur = i;
  char lb[160];
  for (int oi = 0; oi < g->plan->nnodes; oi++) {
    const int j = g->st->order[oi];
    tpg_nctx c;
    tpg_nctx_init(&c, g, g->plan, g->bind, j, &g->nodes[j], lb, sizeof lb);
    TPG_TRY(c.kind->patch(&c));
  }
  tpg_template_mark(g, 0); /* tpg_graph_export follows the picked size */
  return TPG_SUCCESS;
}

/* A retarget that fails part-way goes back to the size the exec ran. */
static tpg_status retarget_to(tpg_graph_set *s, int i) {
  if (s->cur == i) return TPG_SUCCESS;
  tpg_graph *g = s->graphs[s->n - 1];
  TPG_TRY(tpg_dev_push(&g->dev));
  const int from = s->cur;
  tpg_status st = apply_variant(s, g, i);
  if (st != TPG_SUCCESS) {
    char msg[900];
    snprintf(msg, sizeof msg, "%s", tpg_last_error());
    const int back = apply_variant(s, g, from) == TPG_SUCCESS;
    const char *rest = strstr(msg, ": ");
    tpg_err(st, "tpg_graph_set_pick", "retargeting to size %d: %s (%s)", s->sizes[i], rest ? rest + 2 : msg,
            back ? "the exec still runs the size picked before" : "the exec could NOT be restored: destroy the set");
  }
  tpg_dev_pop();
  return st;
}

static tpg_status set_pick(tpg_graph_set *s, int batch, int *size, tpg_graph **graph) {
  if (size) *size = 0;
  if (graph) *graph = NULL;
  TPG_CHECK_ARG(s != NULL, "set is NULL: expected a tpg_graph_set");
  TPG_CHECK_ARG(set_live(s), "set is not a live tpg_graph_set (destroyed or corrupt handle)");
  TPG_CHECK_ARG(size != NULL && graph != NULL, "size and graph must not be NULL");
  TPG_CHECK_ARG(batch >= 1 && batch <= s->sizes[s->n - 1], "batch is %d: expected 1..%d (the largest size)", batch,
                s->sizes[s->n - 1]);
  int lo = 0, hi = s->n - 1; /* the first size >= batch */
  while (lo < hi) {
    const int mid = (lo + hi) / 2;
    if (s->sizes[mid] >= batch) hi = mid;
    else lo = mid + 1;
  }
  if (s->var) TPG_TRY(retarget_to(s, lo));
  *size = s->sizes[lo];
  *graph = s->graphs[s->var ? s->n - 1 : lo];
  return TPG_SUCCESS;
}

tpg_status tpg_graph_set_pick(tpg_graph_set *s, int batch, int *size, tpg_graph **graph) {
  tpg_err_clear();
  return tpg_err_public(set_pick(s, batch, size, graph), __func__);
}

/* ---- information --------------------------------------------------------- */

tpg_status tpg_graph_set_get_info(const tpg_graph_set *s, tpg_graph_set_info *out, size_t size) {
  tpg_err_clear();
  TPG_CHECK_ARG(s != NULL && set_live(s), "set is NULL or not a live tpg_graph_set");
  /* workspace_bytes was appended: a struct without it is an older header's */
  const size_t first = offsetof(tpg_graph_set_info, builder_us) + sizeof(double);
  return tpg_out_copy(out, size, &s->total, sizeof s->total, first, __func__, "tpg_graph_set_info");
}

tpg_status tpg_graph_set_get_size_info(const tpg_graph_set *s, int i, tpg_graph_set_size_info *out, size_t size) {
  tpg_err_clear();
  TPG_CHECK_ARG(s != NULL && set_live(s), "set is NULL or not a live tpg_graph_set");
  TPG_CHECK_ARG(i >= 0 && i < s->n, "i is %d: expected 0..%d (the set's sizes, ascending)", i, s->n - 1);
  const size_t first = offsetof(tpg_graph_set_size_info, instantiate_us) + sizeof(double);
  return tpg_out_copy(out, size, &s->info[i], sizeof s->info[i], first, __func__, "tpg_graph_set_size_info");
}
