/* graph.c - create (materialize + instantiate), launch, inspect, destroy.
 *
 * A graph owns everything it made (plan copy, template graph, exec, private
 * stream, event, workspaces) and borrows the comm and the bound buffers. The
 * comm counts its live graphs, so destroying a comm before its graphs is an
 * error instead of NCCL freeing resources a graph still points at.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "graphbuild/graph.h"

#define TPG_DESTROY_WAIT_MS 10000

static tpg_status graph_check(const tpg_graph *g, const char *fn) {
  if (!g) return tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn, "graph is NULL: expected a tpg_graph");
  if (g->magic != TPG_MAGIC_GRAPH)
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

static void graph_free(tpg_graph *g) {
  if (!g) return;
  if (g->dev.ctx && tpg_dev_push(&g->dev) == TPG_SUCCESS) {
    if (g->exec) tpg_cu->cuGraphExecDestroy(g->exec);
    if (g->graph) tpg_cu->cuGraphDestroy(g->graph);
    if (g->nodes && g->plan) tpg_gnodes_free(g, g->nodes, g->plan->nnodes);
    g->nodes = NULL;
    if (g->owned && g->bind)
      for (int s = 0; g->plan && s < g->plan->nslots; s++) {
        /* Deregistering is collective: skipped on an aborted comm (a peer
         * may be gone); NCCL frees the window with the comm. */
        if (g->wins && g->wins[s] && g->comm && g->comm->nccl && !g->comm->aborted) {
          ncclResult_t r = ncclCommWindowDeregister(g->comm->nccl, g->wins[s]);
          tpg_nccl_settle(g->comm, r, "tpg_graph_destroy", "ncclCommWindowDeregister");
        }
        if (g->owned[s] == 1 && g->bind[s]) tpg_cu->cuMemFree((CUdeviceptr)(uintptr_t)g->bind[s]);
        if (g->owned[s] == 2 && g->bind[s]) ncclMemFree(g->bind[s]);
      }
    if (g->done) tpg_cu->cuEventDestroy(g->done);
    if (g->cap_stream) tpg_cu->cuStreamDestroy(g->cap_stream);
    tpg_dev_pop();
  }
  if (g->comm && g->comm->magic == TPG_MAGIC_COMM && g->counted) atomic_fetch_sub(&g->comm->graphs, 1);
  tpg_dev_close(&g->dev);
  tpg_plan_destroy(g->plan);
  free(g->bind);
  free(g->owned);
  free(g->wins);
  free(g->users);
  free(g->users_at);
  free(g->order);
  free(g->nodes);
  g->magic = TPG_MAGIC_DEAD;
  free(g);
}

static tpg_status build_users(tpg_graph *g) {
  const tpg_plan *p = g->plan;
  g->users_at = calloc((size_t)p->nslots + 1, sizeof *g->users_at);
  if (!g->users_at) return TPG_FAIL(TPG_ERROR_OUT_OF_MEMORY, "out of host memory");
  tpg_view_use v[TPG_MAX_NODE_VIEWS];
  size_t total = 0;
  for (int i = 0; i < p->nnodes; i++) {
    int k = tpg_node_views(&p->nodes[i], v);
    for (int j = 0; j < k; j++) {
      int dup = 0;
      for (int q = 0; q < j; q++) dup |= v[q].v.slot == v[j].v.slot;
      if (!dup) { g->users_at[v[j].v.slot]++; total++; }
    }
  }
  for (int s = 0; s < p->nslots; s++) g->users_at[s + 1] += g->users_at[s];
  g->users = malloc((total ? total : 1) * sizeof *g->users);
  int *fill = calloc((size_t)p->nslots + 1, sizeof *fill);
  if (!g->users || !fill) {
    free(fill);
    return TPG_FAIL(TPG_ERROR_OUT_OF_MEMORY, "out of host memory");
  }
  /* Users in topological order: rebinding re-captures collectives in the
   * same order on every rank. */
  for (int oi = 0; oi < p->nnodes; oi++) {
    int i = g->order[oi];
    int k = tpg_node_views(&p->nodes[i], v);
    for (int j = 0; j < k; j++) {
      int dup = 0;
      for (int q = 0; q < j; q++) dup |= v[q].v.slot == v[j].v.slot;
      if (!dup) {
        int s = (int)v[j].v.slot - 1;
        g->users[g->users_at[s] + fill[s]++] = i;
      }
    }
  }
  free(fill);
  return TPG_SUCCESS;
}

/* Ranks compare what their graphs will ask NCCL and our all-reduce kernels
 * to do — the collectives in execution order, their kinds, counts, dtypes,
 * algorithms and epilogue shapes — before the first capture: a mismatch, which would otherwise
 * hang inside a collective, is an error on every rank. */
static tpg_status check_fingerprint(tpg_graph *g) {
  const tpg_plan *p = g->plan;
  uint64_t h = 1469598103934665603ull;
#define TPG_MIX(v) (h = (h ^ (uint64_t)(v)) * 1099511628211ull)
  TPG_MIX(g->comm->nranks);
  for (int oi = 0; oi < p->nnodes; oi++) {
    const int i = g->order[oi];
    const tpg_kind_ops *k = tpg_kind(p->nodes[i].kind);
    if (k->fingerprint) k->fingerprint(p, &p->nodes[i], &g->nodes[i], &h);
  }
#undef TPG_MIX
  uint64_t all[TPG_AR_MAX_RANKS * 32];
  if (g->comm->nranks > (int)(sizeof all / sizeof all[0])) return TPG_SUCCESS;
  TPG_TRY(tpg_comm_allgather_host(g->comm, &h, all, sizeof h));
  for (int q = 0; q < g->comm->nranks; q++)
    if (all[q] != h)
      return TPG_FAIL(TPG_ERROR_INVALID_ARGUMENT,
                      "the graph's collectives differ between ranks (fingerprint 0x%016llx on rank %d, 0x%016llx on "
                      "rank %d): every rank must build the same collectives (kind, count, dtype, algorithm, "
                      "epilogue) in the same order",
                      (unsigned long long)h, g->comm->rank, (unsigned long long)all[q], q);
  return TPG_SUCCESS;
}

/* What the nodes need before any fill: each kind prepares its nodes
 * (kernel choice, workspace); then the scratch slots. */
static tpg_status alloc_workspaces(tpg_graph *g) {
  const tpg_plan *p = g->plan;
  TPG_TRY(tpg_prepare_nodes(g, p, g->nodes));
  for (int i = 0; i < p->nnodes; i++) g->info.workspace_bytes += g->nodes[i].res.workspace_bytes;
  /* Scratch slots the plan uses: allocated here, owned by the graph. Those a
   * collective touches become NCCL symmetric windows (collective calls: every
   * rank creates the same plan's graph in the same order). */
  for (int s = 0; s < p->nslots; s++) {
    if (p->slots[s].where != TPG_MEM_SCRATCH || g->users_at[s + 1] == g->users_at[s]) continue;
    int coll = 0;
    for (int u = g->users_at[s]; u < g->users_at[s + 1]; u++) coll |= tpg_kind(p->nodes[g->users[u]].kind)->collective;
    int sym = coll && g->comm && g->comm->nranks > 1 && (g->flags & TPG_GRAPH_NCCL_SYMMETRIC);
    size_t bytes = p->slots[s].count * tpg_dtype_size(p->slots[s].dtype);
    if (sym) {
      bytes = (bytes + 4095) & ~(size_t)4095;
      void *ptr = NULL;
      ncclResult_t r = ncclMemAlloc(&ptr, bytes);
      if (r != ncclSuccess || !ptr)
        return TPG_FAIL(TPG_ERROR_OUT_OF_MEMORY, "ncclMemAlloc(%zu bytes) for scratch slot \"%s\" failed: %s", bytes,
                        p->slots[s].name, ncclGetErrorString(r));
      g->bind[s] = ptr;
      g->owned[s] = 2;
      r = ncclCommWindowRegister(g->comm->nccl, ptr, bytes, &g->wins[s], NCCL_WIN_COLL_SYMMETRIC);
      TPG_TRY(tpg_nccl_settle(g->comm, r, __func__, "ncclCommWindowRegister (symmetric)"));
    } else {
      bytes = (bytes + 255) & ~(size_t)255;
      CUdeviceptr d;
      TPG_CU(cuMemAlloc(&d, bytes));
      g->bind[s] = (void *)(uintptr_t)d;
      g->owned[s] = 1;
    }
    g->info.workspace_bytes += bytes;
  }
  TPG_CU(cuStreamSynchronize(g->cap_stream));
  return TPG_SUCCESS;
}

tpg_status tpg_graph_create(const tpg_plan *plan, const tpg_graph_config *cfg, tpg_graph **out) {
  tpg_err_clear();
  TPG_CHECK_ARG(out != NULL, "out is NULL: expected a tpg_graph * to set");
  *out = NULL;
  TPG_TRY(tpg_plan_check(plan, __func__, "plan"));
  TPG_CHECK_ARG(cfg != NULL, "cfg is NULL: expected a tpg_graph_config (TPG_GRAPH_CONFIG_INIT)");
  TPG_CHECK_ARG(cfg->magic == TPG_CONFIG_MAGIC && cfg->size >= sizeof(tpg_graph_config),
                "cfg was not initialised with TPG_GRAPH_CONFIG_INIT (magic 0x%x, size %zu)", cfg->magic, cfg->size);
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
  int colls = 0;
  tpg_plan_stats(plan, NULL, NULL, &colls);
  if (colls) {
    TPG_CHECK_ARG(cfg->comm != NULL, "cfg->comm is NULL but the plan has %d collective%s: expected a tpg_comm",
                  colls, colls == 1 ? "" : "s");
    TPG_TRY(tpg_comm_check_usable(cfg->comm, __func__, "cfg->comm"));
    TPG_CHECK_ARG(cfg->comm->dev.ordinal == cfg->device,
                  "cfg->device is %d but cfg->comm is on device %d: expected the same device", cfg->device,
                  cfg->comm->dev.ordinal);
  } else if (cfg->comm) {
    TPG_TRY(tpg_comm_check_usable(cfg->comm, __func__, "cfg->comm"));
  }
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
    for (int c = 0; c < b; c++)
      TPG_CHECK_ARG(cfg->bindings[c].slot != s, "cfg->bindings[%d] binds slot \"%s\" again (first at [%d])", b,
                    plan->slots[s - 1].name, c);
  }

  tpg_status st = TPG_SUCCESS;
  tpg_graph *g = calloc(1, sizeof *g);
  if (!g) return TPG_FAIL(TPG_ERROR_OUT_OF_MEMORY, "out of host memory");
  g->magic = TPG_MAGIC_GRAPH;
  TPG_TRYGOTO(tpg_plan_clone(plan, &g->plan), st, fail);
  const tpg_plan *p = g->plan;
  g->bind = calloc((size_t)(p->nslots ? p->nslots : 1), sizeof *g->bind);
  g->owned = calloc((size_t)(p->nslots ? p->nslots : 1), 1);
  g->wins = calloc((size_t)(p->nslots ? p->nslots : 1), sizeof *g->wins);
  g->mode = cfg->mode;
  g->flags = cfg->flags;
  g->order = malloc((size_t)p->nnodes * sizeof *g->order);
  g->nodes = tpg_gnodes_alloc(p->nnodes);
  if (!g->bind || !g->owned || !g->wins || !g->order || !g->nodes) {
    st = TPG_FAIL(TPG_ERROR_OUT_OF_MEMORY, "out of host memory");
    goto fail;
  }
  TPG_TRYGOTO(tpg_plan_topo(p, g->order), st, fail);
  TPG_TRYGOTO(build_users(g), st, fail);
  for (int s = 0; s < p->nslots; s++)
    if (g->users_at[s + 1] > g->users_at[s] && p->slots[s].where != TPG_MEM_SCRATCH) {
      int found = 0;
      for (int b = 0; b < cfg->nbindings; b++) found |= cfg->bindings[b].slot == (tpg_slot)(s + 1);
      if (!found) {
        st = TPG_ARG_FAIL("slot \"%s\" is used by the plan but not bound: expected a binding in cfg->bindings",
                          p->slots[s].name);
        goto fail;
      }
    }

  TPG_TRYGOTO(tpg_dev_open(cfg->device, &g->dev), st, fail);
  TPG_TRYGOTO(tpg_dev_push(&g->dev), st, fail);
  for (int b = 0; b < cfg->nbindings; b++) {
    TPG_TRYGOTO(tpg_check_binding(g, p, cfg->bindings[b].slot, cfg->bindings[b].ptr, __func__, b), st, fail_pop);
    g->bind[cfg->bindings[b].slot - 1] = cfg->bindings[b].ptr;
  }
  g->comm = cfg->comm;
  if (colls) {
    atomic_fetch_add(&g->comm->graphs, 1);
    g->counted = 1;
  }
  if (colls && g->comm->nranks > 1) TPG_TRYGOTO(check_fingerprint(g), st, fail_pop);
  TPG_CUGOTO(cuStreamCreate(&g->cap_stream, CU_STREAM_NON_BLOCKING), st, fail_pop);
  TPG_CUGOTO(cuEventCreate(&g->done, CU_EVENT_DISABLE_TIMING), st, fail_pop);
  g->streamk = tpg_gemm_streamk_env(); /* once: workspaces are sized by it */
  TPG_TRYGOTO(alloc_workspaces(g), st, fail_pop);

  /* Programmatic edges need griddepcontrol (sm_90+) in the image that runs:
   * below sm_90 the kernels run their sm_80 image, where pdl_wait is a no-op,
   * so the flag is ignored there (ordinary edges, same results). Capture and
   * eager modes run the nodes the ways this library replaces: no PDL. */
  g->pdl = (g->flags & TPG_GRAPH_PDL) && g->mode == TPG_MODE_EXPLICIT && g->dev.sm_arch >= 90;
  double t0 = tpg_now_us();
  if (g->mode == TPG_MODE_EXPLICIT) {
    TPG_TRYGOTO(tpg_materialize(g, p, g->bind, g->nodes, &g->graph), st, fail_pop);
  } else {
    TPG_TRYGOTO(tpg_fill_nodes(g, p, g->bind, g->nodes), st, fail_pop);
    if (g->mode == TPG_MODE_CAPTURE) {
      TPG_CUGOTO(cuStreamBeginCapture(g->cap_stream, CU_STREAM_CAPTURE_MODE_RELAXED), st, fail_pop);
      tpg_status rs = tpg_run_nodes(g, g->cap_stream);
      CUresult er = tpg_cu->cuStreamEndCapture(g->cap_stream, &g->graph);
      if (rs != TPG_SUCCESS) { st = rs; goto fail_pop; }
      if (er != CUDA_SUCCESS) { st = tpg_cu_fail(er, __func__, "cuStreamEndCapture"); goto fail_pop; }
    }
  }
  double t1 = tpg_now_us();
  if (g->pdl) TPG_TRYGOTO(tpg_count_programmatic_edges(g->graph, &g->info.programmatic_edges), st, fail_pop);
  if (g->graph) TPG_CUGOTO(cuGraphInstantiateWithFlags(&g->exec, g->graph, 0), st, fail_pop);
  double t2 = tpg_now_us();
  g->info.materialize_us = t1 - t0;
  g->info.instantiate_us = t2 - t1;
  for (int i = 0; i < p->nnodes; i++) {
    const tpg_kind_ops *k = tpg_kind(p->nodes[i].kind);
    k->count(&g->nodes[i], &g->info);
    g->ncoll += k->collective;
  }
  tpg_dev_pop();
  *out = g;
  return TPG_SUCCESS;
fail_pop:
  tpg_dev_pop();
fail:
  {
    /* Cleanup makes calls that may record messages; keep the cause. */
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", tpg_last_error());
    graph_free(g); /* drops the comm's graph count if it was taken */
    tpg_err_clear();
    if (msg[0]) tpg_err(st, "tpg_graph_create", "%s", msg);
  }
  return st;
}

tpg_status tpg_graph_destroy(tpg_graph *g) {
  tpg_err_clear();
  if (!g) return TPG_SUCCESS;
  TPG_TRY(graph_check(g, __func__));
  tpg_status st = TPG_SUCCESS;
  if (tpg_dev_push(&g->dev) == TPG_SUCCESS) {
    st = wait_done(g, __func__);
    tpg_dev_pop();
  }
  /* Still freed after a timeout: the comm was aborted, so nothing of ours
   * is waited on any more. */
  graph_free(g);
  return st;
}

tpg_status tpg_graph_launch(tpg_graph *g, tpg_stream stream) {
  tpg_err_clear();
  TPG_TRY(graph_check(g, __func__));
  if (g->comm && g->ncoll) TPG_TRY(tpg_comm_check_usable(g->comm, __func__, "the graph's comm"));
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

tpg_status tpg_graph_info_get(const tpg_graph *g, tpg_graph_info *out) {
  tpg_err_clear();
  TPG_TRY(graph_check(g, __func__));
  TPG_CHECK_ARG(out != NULL, "out is NULL: expected a tpg_graph_info to fill");
  *out = g->info;
  return TPG_SUCCESS;
}

tpg_status tpg_graph_write_dot(const tpg_graph *g, const char *path) {
  tpg_err_clear();
  TPG_TRY(graph_check(g, __func__));
  TPG_CHECK_ARG(path != NULL && path[0], "path is NULL or empty: expected a file path");
  if (!g->graph) return TPG_FAIL(TPG_ERROR_UNSUPPORTED, "an eager-mode graph has no CUDA graph to print");
  TPG_TRY(tpg_dev_push(&g->dev));
  CUresult r = tpg_cu->cuGraphDebugDotPrint(g->graph, path, CU_GRAPH_DEBUG_DOT_FLAGS_VERBOSE);
  tpg_dev_pop();
  if (r != CUDA_SUCCESS) return tpg_cu_fail(r, __func__, "cuGraphDebugDotPrint");
  return TPG_SUCCESS;
}
