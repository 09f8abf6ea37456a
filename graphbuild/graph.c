/* graph.c - create (materialize + instantiate), launch, inspect, destroy.
 *
 * A graph owns everything it made (plan copy, template graph, exec, private
 * stream, event, workspaces outside a set's arena) and borrows the comm and the bound buffers. The
 * comm counts its live graphs, so destroying a comm before its graphs is an
 * error instead of NCCL freeing resources a graph still points at.
 */
#define _POSIX_C_SOURCE 200809L
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "graphbuild/graph.h"
#include "lib/handle.h"
#include "lib/gemm/tune_device.h"

#define TPG_DESTROY_WAIT_MS 10000

static tpg_status graph_check(const tpg_graph *g, const char *fn) {
  if (!g) return tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn, "graph is NULL: expected a tpg_graph");
  if (!tpg_graph_live(g))
    return tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn, "graph is not a live tpg_graph (destroyed or corrupt handle)");
  return TPG_SUCCESS;
}

/* Waits for the last launch with a deadline (the comm's, if any). */
static tpg_status wait_done(tpg_graph *g, const char *fn) {
  if (!g->launched) return TPG_SUCCESS;
  int ms = g->comm ? g->comm->timeout_ms : TPG_DESTROY_WAIT_MS;
  double t0 = tpg_now_us(), deadline = t0 + 1000.0 * ms;
  for (;;) {
    CUresult r = tpg_cu->cuEventQuery(g->done);
    if (r == CUDA_SUCCESS) return TPG_SUCCESS;
    if (r != CUDA_ERROR_NOT_READY) return tpg_cu_fail(r, fn, "cuEventQuery(last launch)");
    if (tpg_now_us() > deadline) {
      if (g->comm && !g->comm->aborted) tpg_comm_abort(g->comm);
      return tpg_err(TPG_ERROR_TIMEOUT, fn,
                     "the graph's last launch did not finish within %d ms%s", ms,
                     g->comm ? "; its comm was aborted (a peer is gone?)" : "");
    }
    struct timespec ts = {0, 100000};
    nanosleep(&ts, NULL);
  }
}

/* Device objects of the graph; its context must be current. */
static void release_device(tpg_graph *g) {
  tpg_gemm_dev_timer_destroy(g->gemm_timer); /* only set while create prepares the nodes */
  g->gemm_timer = NULL;
  if (g->exec) tpg_cu->cuGraphExecDestroy(g->exec);
  if (g->graph) tpg_cu->cuGraphDestroy(g->graph);
  if (g->nodes && g->plan) tpg_gnodes_free(g, g->nodes, g->plan->nnodes);
  g->nodes = NULL;
  for (int q = 0; g->scratch && g->plan && q < g->plan->nslots; q++) tpg_scratch_free(g, &g->scratch[q]);
  if (g->ws_mem) tpg_cu->cuMemFree(g->ws_mem);
  g->ws_mem = 0;
  if (g->done) tpg_cu->cuEventDestroy(g->done);
  if (g->cap_stream) tpg_cu->cuStreamDestroy(g->cap_stream);
  g->exec = NULL;
  g->graph = NULL;
  g->done = NULL;
  g->cap_stream = NULL;
}

/* Host side, the comm's count and the context retain. */
static void release_host(tpg_graph *g) {
  if (g->comm && g->comm->magic == TPG_MAGIC_COMM && g->counted) atomic_fetch_sub(&g->comm->graphs, 1);
  tpg_dev_close(&g->dev);
  tpg_plan_destroy(g->plan);
  free(g->bind);
  free(g->scratch);
  free(g->cond_handles);
  tpg_state_free(g->st);
  tpg_ws_plan_free(&g->ws);
  free(g->nodes);
  tpg_handle_remove(g);
  tpg_handle_poison(&g->magic);
  free(g);
}

/* A graph that failed to be created: everything it holds. The caller has
 * no handle to call destroy again with, so a failed push is tried once more
 * here (what that second destroy would do); only if that fails too is the
 * device side lost (found by the fault loop: a push failing in this path). */
static void graph_free(tpg_graph *g) {
  if (!g) return;
  if (g->dev.ctx && (tpg_dev_push(&g->dev) == TPG_SUCCESS || tpg_dev_push(&g->dev) == TPG_SUCCESS)) {
    release_device(g);
    tpg_dev_pop();
  }
  release_host(g);
}

/* What the nodes need before any fill: each kind prepares its nodes
 * (kernel choice, workspace need), then their workspace lanes are planned
 * (workspace.c); memory is laid out by tpg_graph_finish. */
static tpg_status prepare_all(tpg_graph *g) {
  /* GEMM tuning times only here, at the nodes' first pick; fill, update and
   * rebind then find every choice in the process cache. */
  tpg_gemm_tune_cfg tc = TPG_GEMM_TUNE_CFG_INIT;
  tc.cache_path = g->tune.gemm_tune_cache;
  tc.family = g->tune.gemm_family;
  memset(&g->gemm_tune, 0, sizeof g->gemm_tune);
  g->gemm_tune.cfg = tc;
  g->gemm_tune.budget_us = g->tune.gemm_tune_budget_us;
  g->gemm_tune.may_time = g->tune.gemm_tune;
  tpg_status st = tpg_prepare_nodes(g, g->st, g->plan, g->nodes);
  g->gemm_tune.may_time = 0;
  g->gemm_tune.cfg.cache_path = NULL; /* borrowed from the config or the environment */
  tpg_gemm_dev_timer_destroy(g->gemm_timer);
  g->gemm_timer = NULL;
  g->info.gemm_tune_us = g->gemm_tune.spent_us;
  g->info.gemm_tuned = g->gemm_tune.timed;
  g->info.gemm_tune_cached = g->gemm_tune.cached;
  TPG_TRY(st);
  return tpg_ws_plan_build(g, g->st, g->plan, g->nodes, &g->ws);
}

/* tpg_graph_config as tpgraph 0.2.0 had it (before the tuning fields). */
#define TPG_GRAPH_CONFIG_V02_SIZE (offsetof(tpg_graph_config, flags) + sizeof(unsigned))
/* The oldest header whose configs and descriptors are accepted (0.1.0). */
#define TPG_VERSION_OLDEST 100

/* Everything about create's arguments that needs no driver, so it is caught
 * on any machine: the config (into *cfg, zero-filled past an older header's
 * size), its tuning, the plan, the comm, the bindings. *colls: the plan's
 * collective count. */
static tpg_status check_args(const tpg_plan *plan, const tpg_graph_config *cfg_in, tpg_graph_config *cfg_full,
                             tpg_tuning *tune, int *colls) {
  TPG_TRY(tpg_plan_check(plan, __func__, "plan"));
  TPG_CHECK_ARG(cfg_in != NULL, "cfg is NULL: expected a tpg_graph_config (TPG_GRAPH_CONFIG_INIT)");
  /* A config from an older, smaller header: its fields, the rest zero (the
   * defaults). Never more than we know: a larger size is a newer header. */
  TPG_CHECK_ARG(cfg_in->magic == TPG_CONFIG_MAGIC && cfg_in->size >= TPG_GRAPH_CONFIG_V02_SIZE &&
                    cfg_in->size <= sizeof(tpg_graph_config),
                "cfg was not initialised with TPG_GRAPH_CONFIG_INIT (magic 0x%x, size %zu; expected 0x%x and %zu..%zu)",
                cfg_in->magic, cfg_in->size, TPG_CONFIG_MAGIC, (size_t)TPG_GRAPH_CONFIG_V02_SIZE,
                sizeof(tpg_graph_config));
  TPG_CHECK_ARG(cfg_in->version >= TPG_VERSION_OLDEST && cfg_in->version <= TPG_VERSION_CODE,
                "cfg->version is %d: expected the TPG_VERSION_CODE of a tpgraph header, %d..%d", cfg_in->version,
                TPG_VERSION_OLDEST, TPG_VERSION_CODE);
  memset(cfg_full, 0, sizeof *cfg_full);
  memcpy(cfg_full, cfg_in, cfg_in->size);
  const tpg_graph_config *cfg = cfg_full;
  TPG_TRY(tpg_tuning_resolve(cfg, tune, __func__));
  TPG_CHECK_ARG(cfg->device >= 0, "cfg->device is %d: expected a CUDA device ordinal >= 0", cfg->device);
  TPG_CHECK_ARG(cfg->nbindings >= 0, "cfg->nbindings is %d: expected >= 0", cfg->nbindings);
  TPG_CHECK_ARG((cfg->flags & ~(TPG_GRAPH_NCCL_SYMMETRIC | TPG_GRAPH_PDL)) == 0,
                "cfg->flags is 0x%x: expected TPG_GRAPH_* bits only (TPG_GRAPH_NCCL_SYMMETRIC, TPG_GRAPH_PDL)",
                cfg->flags);
  TPG_CHECK_ARG(cfg->mode == TPG_MODE_EXPLICIT || cfg->mode == TPG_MODE_CAPTURE || cfg->mode == TPG_MODE_EAGER,
                "cfg->mode is %d: expected TPG_MODE_EXPLICIT, TPG_MODE_CAPTURE or TPG_MODE_EAGER", (int)cfg->mode);
  TPG_CHECK_ARG(cfg->nbindings == 0 || cfg->bindings != NULL, "cfg->bindings is NULL but cfg->nbindings is %d",
                cfg->nbindings);
  TPG_TRY(tpg_plan_validate(plan));
  *colls = 0;
  tpg_plan_get_stats(plan, NULL, NULL, colls);
  /* No comm with collectives: one rank (TP = 1), whose collectives
   * exchange nothing (nodes/collective.c). */
  if (*colls && cfg->comm) {
    TPG_TRY(tpg_comm_check_usable(cfg->comm, __func__, "cfg->comm"));
    TPG_CHECK_ARG(cfg->comm->dev.ordinal == cfg->device,
                  "cfg->device is %d but cfg->comm is on device %d: expected the same device", cfg->device,
                  cfg->comm->dev.ordinal);
  } else if (cfg->comm) {
    TPG_TRY(tpg_comm_check_usable(cfg->comm, __func__, "cfg->comm"));
  }
  TPG_TRY(tpg_plan_comm_check(plan, *colls, cfg->comm, __func__, "cfg->comm"));
  /* Every slot the plan uses must be bound, exactly once. */
  for (int b = 0; b < cfg->nbindings; b++) {
    tpg_slot s = cfg->bindings[b].slot;
    TPG_CHECK_ARG(s != TPG_SLOT_NONE && s <= (tpg_slot)plan->nslots,
                  "cfg->bindings[%d].slot is %u: not a slot of the plan (expected 1..%d)", b, s, plan->nslots);
    TPG_CHECK_ARG(plan->slots[s - 1].where != TPG_MEM_SCRATCH,
                  "cfg->bindings[%d]: slot \"%s\" is scratch memory the graph owns: it cannot be bound", b,
                  plan->slots[s - 1].name);
    /* What needs no driver is checked here, so it is caught on any machine. */
    TPG_CHECK_ARG(cfg->bindings[b].ptr != NULL, "cfg->bindings[%d].ptr is NULL for slot \"%s\"", b,
                  plan->slots[s - 1].name);
    TPG_CHECK_ARG((uintptr_t)cfg->bindings[b].ptr % 16 == 0,
                  "cfg->bindings[%d].ptr %p for slot \"%s\" is misaligned: expected 16-byte alignment", b,
                  cfg->bindings[b].ptr, plan->slots[s - 1].name);
  }
  TPG_TRY(tpg_bindings_unique(plan, cfg->bindings, cfg->nbindings, __func__, "cfg->bindings"));
  return TPG_SUCCESS;
}

/* A failed creation: everything the graph holds, its message kept (cleanup
 * makes calls that may record messages) as the innermost one under the
 * public name, no doubled prefix. */
static tpg_status create_fail(tpg_graph *g, tpg_status st) {
  char msg[1024];
  snprintf(msg, sizeof msg, "%s", tpg_last_error());
  graph_free(g); /* drops the comm's graph count if it was taken */
  const char *rest = strstr(msg, ": ");
  tpg_err_clear();
  if (msg[0]) tpg_err(st, "tpg_graph_create", "%s", rest ? rest + 2 : msg);
  return st;
}

/* The host side: the plan's copy and what is derived from it, the bindings. */
static tpg_status setup_host(tpg_graph *g, const tpg_plan *plan, const tpg_graph_config *cfg) {
  TPG_TRY(tpg_plan_clone(plan, &g->plan));
  const tpg_plan *p = g->plan;
  g->bind = calloc((size_t)(p->nslots ? p->nslots : 1), sizeof *g->bind);
  g->scratch = calloc((size_t)(p->nslots ? p->nslots : 1), sizeof *g->scratch);
  g->mode = cfg->mode;
  g->flags = cfg->flags;
  g->nodes = tpg_gnodes_alloc(p->nnodes);
  if (!g->bind || !g->scratch || !g->nodes) return TPG_FAIL(TPG_ERROR_OUT_OF_MEMORY, "out of host memory");
  TPG_TRY(tpg_state_build(p, &g->st));
  for (int b = 0; b < cfg->nbindings; b++) g->bind[cfg->bindings[b].slot - 1] = cfg->bindings[b].ptr;
  return tpg_state_check_bound(g->st, p, g->bind, "tpg_graph_create");
}

/* The device side up to the nodes' kernel choices (the context current):
 * bindings, the comm's count, the ranks' plans compared, stream, event,
 * every node prepared and the workspace lanes planned. */
static tpg_status setup_device(tpg_graph *g, const tpg_graph_config *cfg, const tpg_tuning *tune, int colls) {
  const tpg_plan *p = g->plan;
  for (int b = 0; b < cfg->nbindings; b++)
    TPG_TRY(tpg_check_binding(g, p, cfg->bindings[b].slot, cfg->bindings[b].ptr, "tpg_graph_create",
                              "cfg->bindings", b));
  g->comm = cfg->comm;
  if (colls && g->comm) {
    atomic_fetch_add(&g->comm->graphs, 1);
    g->counted = 1;
  }
  /* Before anything collective (peer setup, captures): the same plans. */
  TPG_TRY(tpg_fingerprint_check(g, g->st, p, NULL, "at creation"));
  TPG_CU(cuStreamCreate(&g->cap_stream, CU_STREAM_NON_BLOCKING));
  TPG_CU(cuEventCreate(&g->done, CU_EVENT_DISABLE_TIMING));
  g->tune = *tune; /* once: workspaces are sized by it */
  /* Programmatic edges need griddepcontrol (sm_90+) in the image that runs:
   * below sm_90 the kernels run their sm_80 image, where pdl_wait is a no-op,
   * so the flag is ignored there (ordinary edges, same results). Capture and
   * eager modes run the nodes the ways this library replaces: no PDL. Known
   * before the lanes: they follow the edges that order. */
  g->pdl = (g->flags & TPG_GRAPH_PDL) && g->mode == TPG_MODE_EXPLICIT && g->dev.sm_arch >= 90;
  const double load0 = tpg_kernel_load_us(), tp = tpg_now_us();
  TPG_TRY(prepare_all(g));
  g->info.prepare_us = tpg_now_us() - tp;
  g->info.kernel_load_us = tpg_kernel_load_us() - load0;
  return TPG_SUCCESS;
}

tpg_status tpg_graph_begin(const tpg_plan *plan, const tpg_graph_config *cfg_in, tpg_graph **out) {
  TPG_CHECK_ARG(out != NULL, "out is NULL: expected a tpg_graph * to set");
  *out = NULL;
  tpg_graph_config cfg;
  tpg_tuning tune;
  int colls;
  TPG_TRY(check_args(plan, cfg_in, &cfg, &tune, &colls));
  tpg_status st = TPG_SUCCESS;
  tpg_graph *g = calloc(1, sizeof *g);
  if (!g) return TPG_FAIL(TPG_ERROR_OUT_OF_MEMORY, "out of host memory");
  g->magic = TPG_MAGIC_GRAPH;
  if (tpg_handle_add(g, TPG_MAGIC_GRAPH) != TPG_SUCCESS) {
    free(g);
    return TPG_FAIL(TPG_ERROR_OUT_OF_MEMORY, "out of host memory");
  }
  TPG_TRYGOTO(setup_host(g, plan, &cfg), st, fail);
  TPG_TRYGOTO(tpg_dev_open(cfg.device, &g->dev), st, fail);
  TPG_TRYGOTO(tpg_dev_push(&g->dev), st, fail);
  st = setup_device(g, &cfg, &tune, colls);
  tpg_dev_pop();
  if (st != TPG_SUCCESS) goto fail;
  *out = g;
  return TPG_SUCCESS;
fail:
  return create_fail(g, st);
}

/* Memory, the CUDA graph and its exec (the context current). */
static tpg_status build(tpg_graph *g, const tpg_graph_ext *ext) {
  const tpg_plan *p = g->plan;
  const double load0 = tpg_kernel_load_us(), tp = tpg_now_us();
  TPG_TRY(tpg_ws_alloc(g, ext));
  TPG_TRY(tpg_scratch_place(g, ext));
  TPG_CU(cuStreamSynchronize(g->cap_stream)); /* the workspaces' memset */
  g->info.prepare_us += tpg_now_us() - tp;
  double t0 = tpg_now_us();
  if (g->mode == TPG_MODE_EXPLICIT) {
    TPG_TRY(tpg_materialize(g, g->st, p, g->bind, g->nodes, &g->graph));
  } else {
    TPG_TRY(tpg_fill_nodes(g, g->st, p, g->bind, g->nodes));
    if (g->mode == TPG_MODE_CAPTURE) {
      TPG_CU(cuStreamBeginCapture(g->cap_stream, CU_STREAM_CAPTURE_MODE_RELAXED));
      tpg_status rs = tpg_run_nodes(g, g->cap_stream);
      CUresult er = tpg_cu->cuStreamEndCapture(g->cap_stream, &g->graph);
      TPG_TRY(rs);
      if (er != CUDA_SUCCESS) return tpg_cu_fail(er, __func__, "cuStreamEndCapture");
    }
  }
  double t1 = tpg_now_us();
  if (g->pdl) TPG_TRY(tpg_count_programmatic_edges(g->graph, &g->info.programmatic_edges));
  if (g->graph) TPG_CU(cuGraphInstantiateWithFlags(&g->exec, g->graph, 0));
  double t2 = tpg_now_us();
  g->info.materialize_us = t1 - t0;
  g->info.instantiate_us = t2 - t1;
  g->info.kernel_load_us += tpg_kernel_load_us() - load0;
  for (int i = 0; i < p->nnodes; i++) tpg_kind(p->nodes[i].kind)->count(&g->nodes[i], &g->info);
  return TPG_SUCCESS;
}

tpg_status tpg_graph_finish(tpg_graph *g, const tpg_graph_ext *ext) {
  tpg_status st = tpg_dev_push(&g->dev);
  if (st == TPG_SUCCESS) {
    st = build(g, ext);
    tpg_dev_pop();
  }
  return st == TPG_SUCCESS ? st : create_fail(g, st);
}

/* Every message under the public name, whichever inner call failed (no
 * internal function names, no doubled prefix). */
tpg_status tpg_graph_create(const tpg_plan *plan, const tpg_graph_config *cfg, tpg_graph **out) {
  tpg_err_clear();
  tpg_status st = tpg_graph_begin(plan, cfg, out);
  if (st == TPG_SUCCESS) {
    st = tpg_graph_finish(*out, NULL);
    if (st != TPG_SUCCESS) *out = NULL;
  }
  if (st != TPG_SUCCESS) tpg_err_rename(__func__);
  return st;
}

tpg_status tpg_graph_destroy(tpg_graph *g) {
  tpg_err_clear();
  if (!g) return TPG_SUCCESS;
  TPG_TRY(graph_check(g, __func__));
  if (g->in_set)
    return TPG_FAIL(TPG_ERROR_INVALID_ARGUMENT, "graph belongs to a tpg_graph_set (tpg_graph_set_pick lends it): "
                    "destroy the set instead");
  /* Without its context current nothing of the device side can be freed:
   * the graph is then left whole and the error returned, so a second call
   * frees it (instead of leaking every device object). */
  tpg_status st = tpg_dev_push(&g->dev);
  if (st != TPG_SUCCESS) {
    tpg_err_rename(__func__);
    return st;
  }
  st = wait_done(g, __func__);
  /* Still freed after a timeout: the comm was aborted, so nothing of ours
   * is waited on any more. */
  release_device(g);
  tpg_dev_pop();
  release_host(g);
  return st;
}

static tpg_status launch(tpg_graph *g, tpg_stream stream) {
  TPG_TRY(graph_check(g, __func__));
  if (g->comm && g->st->ncoll) TPG_TRY(tpg_comm_check_usable(g->comm, __func__, "the graph's comm"));
  TPG_TRY(tpg_dev_push(&g->dev));
  tpg_status st = TPG_SUCCESS;
  /* A capturing stream (the engine's own capture) gets the graph as a child
   * node, or in eager mode the work itself; no `done` record then: nothing
   * of ours runs until the engine launches its graph. */
  int into = 0;
  TPG_TRYGOTO(tpg_launch_into_capture(g, (CUstream)stream, &into), st, out);
  if (into == 1) goto out;
  if (g->mode == TPG_MODE_EAGER) TPG_TRYGOTO(tpg_run_nodes(g, (CUstream)stream), st, out);
  else TPG_CUGOTO(cuGraphLaunch(g->exec, (CUstream)stream), st, out);
  if (into == 2) goto out;
  TPG_CUGOTO(cuEventRecord(g->done, (CUstream)stream), st, out);
  g->launched = 1;
out:
  tpg_dev_pop();
  return st;
}

tpg_status tpg_graph_launch(tpg_graph *g, tpg_stream stream) {
  tpg_err_clear();
  tpg_status st = launch(g, stream);
  if (st != TPG_SUCCESS) tpg_err_rename(__func__);
  return st;
}

tpg_status tpg_graph_get_info(const tpg_graph *g, tpg_graph_info *out, size_t size) {
  tpg_err_clear();
  TPG_TRY(graph_check(g, __func__));
  /* 0.3.0's struct ends with gemm_tune_cached; later fields are appended. */
  const size_t first = offsetof(tpg_graph_info, gemm_tune_cached) + sizeof(int);
  return tpg_out_copy(out, size, &g->info, sizeof g->info, first, __func__, "tpg_graph_info");
}

static tpg_status graph_write_dot(const tpg_graph *g, const char *path) {
  TPG_TRY(graph_check(g, __func__));
  TPG_CHECK_ARG(path != NULL && path[0], "path is NULL or empty: expected a file path");
  if (!g->graph) return TPG_FAIL(TPG_ERROR_UNSUPPORTED, "an eager-mode graph has no CUDA graph to print");
  TPG_TRY(tpg_dev_push(&g->dev));
  CUresult r = tpg_cu->cuGraphDebugDotPrint(g->graph, path, CU_GRAPH_DEBUG_DOT_FLAGS_VERBOSE);
  tpg_dev_pop();
  if (r != CUDA_SUCCESS) return tpg_cu_fail(r, __func__, "cuGraphDebugDotPrint");
  return TPG_SUCCESS;
}

tpg_status tpg_graph_write_dot(const tpg_graph *g, const char *path) {
  tpg_err_clear();
  return tpg_err_public(graph_write_dot(g, path), __func__);
}
