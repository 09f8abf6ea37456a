/* materialize.c - plan -> CUDA graph, through explicit driver-API nodes.
 *
 * Our kernels are kernel nodes (cuGraphAddKernelNode), copies and fills are
 * memcpy/memset nodes, joins are empty nodes; no stream capture for any of
 * them, so each node's parameters are ours and dependencies are exactly the
 * plan's edges. An all-reduce our one-shot or two-shot kernel can serve is
 * a kernel node too (its epilogue fused). NCCL collectives are the
 * exception: NCCL only enqueues onto streams, so each is captured alone on a
 * private stream into a child graph and added with cuGraphAddChildGraphNode;
 * an NCCL all-reduce with an epilogue is followed by the epilogue's own
 * kernel node, which later nodes then depend on.
 *
 * Collectives of one graph (NCCL or ours) are chained in the plan's
 * topological order (an implicit edge from each to the next): every rank must
 * run a communicator's operations in the same order, and two collectives on
 * independent branches could otherwise run in either order.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graphbuild/graph.h"

static size_t slot_esize(const tpg_plan *p, tpg_slot s) { return tpg_dtype_size(p->slots[s - 1].dtype); }

static CUdeviceptr view_ptr(const tpg_plan *p, void **bind, tpg_view v) {
  if (v.slot == TPG_SLOT_NONE) return 0;
  return (CUdeviceptr)(uintptr_t)bind[v.slot - 1] + (CUdeviceptr)(v.offset * slot_esize(p, v.slot));
}

tpg_status tpg_check_binding(const tpg_graph *g, const tpg_plan *p, tpg_slot slot, void *ptr, const char *fn,
                             int index) {
  if (slot == TPG_SLOT_NONE || slot > (tpg_slot)p->nslots)
    return tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn, "bindings[%d].slot is %u: not a slot of the plan (expected 1..%d)",
                   index, slot, p->nslots);
  const tpg_slot_rec *s = &p->slots[slot - 1];
  if (s->where == TPG_MEM_SCRATCH)
    return tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn,
                   "bindings[%d]: slot \"%s\" is scratch memory the graph owns: it cannot be bound", index, s->name);
  if (!ptr) return tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn, "bindings[%d].ptr is NULL for slot \"%s\"", index, s->name);
  if ((uintptr_t)ptr % 16 != 0)
    return tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn,
                   "bindings[%d].ptr %p for slot \"%s\" is misaligned: expected 16-byte alignment", index, ptr,
                   s->name);
  size_t bytes = s->count * tpg_dtype_size(s->dtype);
  CUdeviceptr dp = (CUdeviceptr)(uintptr_t)ptr;
  unsigned int memtype = 0;
  CUresult r = tpg_cu->cuPointerGetAttribute(&memtype, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, dp);
  if (r != CUDA_SUCCESS)
    return tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn,
                   "bindings[%d].ptr %p for slot \"%s\" is not memory CUDA knows: expected %s", index, ptr, s->name,
                   s->where == TPG_MEM_DEVICE ? "device memory (cuMemAlloc/cudaMalloc)"
                                              : "page-locked host memory (cuMemHostAlloc/cuMemHostRegister)");
  if (s->where == TPG_MEM_DEVICE) {
    if (memtype != CU_MEMORYTYPE_DEVICE)
      return tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn,
                     "bindings[%d].ptr %p for device slot \"%s\" is host memory: expected device memory", index, ptr,
                     s->name);
    int ord = -1;
    if (tpg_cu->cuPointerGetAttribute(&ord, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, dp) == CUDA_SUCCESS &&
        ord != g->dev.ordinal)
      return tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn,
                     "bindings[%d].ptr %p for slot \"%s\" is memory of device %d: expected device %d", index, ptr,
                     s->name, ord, g->dev.ordinal);
  } else if (memtype != CU_MEMORYTYPE_HOST) {
    return tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn,
                   "bindings[%d].ptr %p for host slot \"%s\" is device memory: expected page-locked host memory",
                   index, ptr, s->name);
  }
  CUdeviceptr base = 0;
  size_t size = 0;
  if (tpg_cu->cuPointerGetAttribute(&base, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, dp) == CUDA_SUCCESS &&
      tpg_cu->cuPointerGetAttribute(&size, CU_POINTER_ATTRIBUTE_RANGE_SIZE, dp) == CUDA_SUCCESS && size > 0) {
    size_t avail = (size_t)(base + size - dp);
    if (avail < bytes)
      return tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn,
                     "bindings[%d].ptr %p for slot \"%s\": the allocation has %zu bytes from there, the slot needs "
                     "%zu",
                     index, ptr, s->name, avail, bytes);
  }
  return TPG_SUCCESS;
}

tpg_gnode *tpg_gnodes_alloc(int n) {
  size_t bytes = (size_t)(n > 0 ? n : 1) * sizeof(tpg_gnode);
  bytes = (bytes + 63) & ~(size_t)63;
  tpg_gnode *p = aligned_alloc(64, bytes);
  if (p) memset(p, 0, bytes);
  return p;
}

/* The GEMM args inside a node's parameter block (after the maps for TMA). */
static tpg_gemm_args *gemm_args(tpg_gnode *gn) { return gn->tma ? &gn->args.gemm_tma.a : &gn->args.gemm; }

/* Encodes a tensor map for the TMA GEMM kernels from the selector's recipe. */
static tpg_status encode_map(tpg_tmap *map, const tpg_tma_encode *e, int kdt, const void *base) {
  cuuint64_t dims[4] = {0, 0, 0, 0}, strides[3] = {0, 0, 0};
  cuuint32_t box[4] = {0, 0, 0, 0}, es[4] = {1, 1, 1, 1};
  for (int i = 0; i < e->rank; i++) {
    dims[i] = e->dims[i];
    box[i] = e->box[i];
    if (i < 3) strides[i] = e->strides[i];
  }
  TPG_CU(cuTensorMapEncodeTiled((CUtensorMap *)map,
                                kdt == TPG_KDT_BF16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16,
                                (cuuint32_t)e->rank, (void *)base, dims, strides, box, es,
                                CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE));
  return TPG_SUCCESS;
}

static tpg_status encode_maps(tpg_gnode *gn) {
  tpg_gemm_args *a = &gn->args.gemm_tma.a;
  TPG_TRY(encode_map(&gn->args.gemm_tma.tx, &gn->xe, a->dtype, a->x));
  TPG_TRY(encode_map(&gn->args.gemm_tma.tw, &gn->we, a->dtype, a->w));
  return TPG_SUCCESS;
}

/* TPG_GEMM_STREAMK: 0 never, 1 (default) where the selector's rule says
 * stream-K pays, 2 always on the Hopper TMA path. Tuning and A/B runs. */
int tpg_gemm_streamk_env(void) {
  const char *env = getenv("TPG_GEMM_STREAMK");
  if (!env || !env[0]) return 1;
  int v = atoi(env);
  return v < 0 ? 0 : v > 2 ? 2 : v;
}

int tpg_gemm_pick(const tpg_graph *g, const tpg_gemm_desc *d, tpg_kernel_launch *l, tpg_tma_encode *xe,
                  tpg_tma_encode *we, char *why, size_t whylen) {
  int kdt = d->dtype == TPG_F16 ? TPG_KDT_F16 : TPG_KDT_BF16;
  return tpg_gemm_select_tma(d->m, d->n, d->k, kdt, (int)d->epilogue, g->dev.sm_arch, tpg_gemm_sms(g, d), d->k, d->k,
                             g->streamk,
                             l, xe, we, why, whylen);
}

int tpg_gemm_sms(const tpg_graph *g, const tpg_gemm_desc *d) {
  int n = g->dev.sm_count - d->sm_reserve;
  return n >= g->dev.sm_count / 2 ? n : g->dev.sm_count / 2; /* never starve the GEMM itself */
}


static unsigned grid_for(size_t work, unsigned per_block, unsigned max_blocks) {
  size_t b = (work + per_block - 1) / per_block;
  if (b < 1) b = 1;
  if (b > max_blocks) b = max_blocks;
  return (unsigned)b;
}

/* AUTO's size limits, in one place (documented at tpg_collective_algo):
 * push one-shot up to TPG_PUSH_MAX, two-shot up to TPG_TWOSHOT_MAX, NCCL
 * above. Push wins while a message is small enough that R copies of it cost
 * less than a second NVLink crossing (measured: 1.3-1.9x NCCL up to 1 MiB,
 * docs/performance.md); two-shot sends 2(R-1)/R of the message with no flag
 * round trip; NCCL's ring reaches higher bandwidth on large messages. The
 * environment overrides are for tuning and benchmarks (bytes). */
/* Push up to 2 MiB (where its staging allows: 4 MiB / ranks): in a layer,
 * 8192/28672 at M=128 (a 2 MiB all-reduce after the row-parallel GEMM), the
 * exposed all-reduce measured 18.4 us with push against 24.3 us with
 * two-shot, although two-shot is faster alone (12.7-13.0 vs 14.3 us in
 * allreduce_bench's lock-step chain): its two dependent NVLink phases each
 * wait for the later rank, so the ranks' skew after a GEMM is paid twice. */
#ifndef TPG_PUSH_MAX
#define TPG_PUSH_MAX ((size_t)2 << 20)
#endif
#ifndef TPG_TWOSHOT_MAX
#define TPG_TWOSHOT_MAX ((size_t)8 << 20)
#endif

static size_t env_bytes(const char *name, size_t dflt) {
  const char *env = getenv(name);
  return env && env[0] ? (size_t)strtoull(env, NULL, 10) : dflt;
}

/* 128 blocks: on 2 x H200 (allreduce_bench, 2026-11-29) 8.3 / 13.0 / 18.4 /
 * 32.1 us at 1 / 2 / 4 / 8 MiB against 8.8 / 12.8 / 21.0 / 39.7 with 64 and
 * 8.9 / 14.2 / 20.9 / 36.0 with 96: more SMs issuing NVLink stores pays from
 * 4 MiB up and costs ~1% at 2 MiB. */
#ifndef TPG_TWOSHOT_BLOCKS
#define TPG_TWOSHOT_BLOCKS 128
#endif
static unsigned twoshot_blocks(void) {
  size_t b = env_bytes("TPG_TWOSHOT_BLOCKS", TPG_TWOSHOT_BLOCKS);
  return b < 1 ? 1 : b > TPG_AR_MAX_BLOCKS ? TPG_AR_MAX_BLOCKS : (unsigned)b;
}

/* The epilogue's pointers and shape from the desc (all zero: none). */
static void fill_epi(const tpg_plan *p, void **bind, const tpg_collective_desc *d, tpg_ar_epi *e) {
  memset(e, 0, sizeof *e);
  if (d->kind != TPG_ALL_REDUCE || d->hidden == 0) return;
  e->bias = (const void *)(uintptr_t)view_ptr(p, bind, d->bias);
  e->residual = (const void *)(uintptr_t)view_ptr(p, bind, d->residual);
  e->residual_out = (void *)(uintptr_t)view_ptr(p, bind, d->residual_out);
  e->norm_weight = (const void *)(uintptr_t)view_ptr(p, bind, d->norm_weight);
  e->hidden = d->hidden;
  e->eps = d->norm_eps;
}

static int32_t kdt_of(tpg_dtype dt) { return dt == TPG_F32 ? TPG_KDT_F32 : dt == TPG_F16 ? TPG_KDT_F16 : TPG_KDT_BF16; }

/* The kernel node after an NCCL all-reduce with an epilogue: it reads the
 * sum NCCL left in recv and applies the same epilogue our kernels fuse. */
static tpg_status fill_nccl_epilogue(tpg_graph *g, const tpg_plan *p, void **bind, const tpg_collective_desc *d,
                                     tpg_gnode *gn) {
  gn->has_epi = 1;
  tpg_ar_epilogue_args *a = &gn->epi;
  memset(a, 0, sizeof *a);
  a->recv = (void *)(uintptr_t)view_ptr(p, bind, d->recv);
  a->count = d->count;
  a->dtype = kdt_of(p->slots[d->send.slot - 1].dtype);
  fill_epi(p, bind, d, &a->epi);
  CUfunction f;
  TPG_TRY(tpg_kernel_function("tpg_ar_epilogue", 0, &f));
  memset(&gn->epi_kp, 0, sizeof gn->epi_kp);
  gn->epi_kp.func = f;
  const size_t vec = 16 / tpg_dtype_size(p->slots[d->send.slot - 1].dtype);
  if (d->norm_weight.slot) /* whole rows per block: at most one block per row */
    gn->epi_kp.gridDimX = grid_for(d->count / d->hidden, 1, (unsigned)g->dev.sm_count * 4);
  else
    gn->epi_kp.gridDimX = grid_for(d->count / vec, 256 * 4, (unsigned)g->dev.sm_count * 8);
  gn->epi_kp.gridDimY = gn->epi_kp.gridDimZ = 1;
  gn->epi_kp.blockDimX = 256;
  gn->epi_kp.blockDimY = gn->epi_kp.blockDimZ = 1;
  return TPG_SUCCESS;
}

/* NCCL or one of our kernels for a collective node; every rank decides
 * alike (same plan, same environment, and the peer buffers' state is agreed
 * collectively). */
static tpg_status pick_collective(tpg_graph *g, const tpg_plan *p, void **bind, int i, tpg_gnode *gn) {
  const tpg_collective_desc *d = &p->nodes[i].u.coll;
  char lb[160], whybuf[160];
  if (d->kind != TPG_ALL_REDUCE || d->algo == TPG_ALGO_NCCL || !g->comm) return TPG_SUCCESS;
  const char *why = NULL;
  size_t es = tpg_dtype_size(p->slots[d->send.slot - 1].dtype), bytes = d->count * es;
  if (g->comm->nranks < 2) why = "a single rank has nothing to reduce";
  else {
    TPG_TRY(tpg_peer_setup(g->comm));
    if (g->comm->peer.state != 1) why = g->comm->peer.why;
    else if ((d->send.offset * es) % 16 || (d->recv.offset * es) % 16) why = "send or recv is not 16-byte aligned";
  }
  const size_t push_max = env_bytes("TPG_ONESHOT_PUSH_MAX", TPG_PUSH_MAX);
  const size_t twoshot_max = env_bytes("TPG_TWOSHOT_MAX", TPG_TWOSHOT_MAX);
  tpg_peer_kernel k = TPG_PEER_PULL;
  if (!why) {
    const size_t cap_push = tpg_peer_max_push(g->comm), cap_pull = tpg_peer_max_pull(g->comm);
    const size_t cap_two = tpg_peer_max_twoshot(g->comm);
    if (d->algo == TPG_ALGO_ONESHOT) {
      /* Push for small messages: one NVLink crossing; pull above push_max,
       * where moving R copies of the data costs more than the second one. */
      if (bytes <= push_max && bytes <= cap_push) k = TPG_PEER_PUSH;
      else if (bytes <= cap_pull) k = TPG_PEER_PULL;
      else {
        snprintf(whybuf, sizeof whybuf, "the message (%zu bytes) is larger than the one-shot staging buffer (%zu)",
                 bytes, cap_pull);
        why = whybuf;
      }
    } else if (d->algo == TPG_ALGO_TWOSHOT) {
      if (bytes <= cap_two) k = TPG_PEER_TWOSHOT;
      else {
        snprintf(whybuf, sizeof whybuf, "the message (%zu bytes) is larger than the two-shot areas allow (%zu)",
                 bytes, cap_two);
        why = whybuf;
      }
    } else { /* AUTO */
      if (bytes <= push_max && bytes <= cap_push) k = TPG_PEER_PUSH;
      else if (bytes <= twoshot_max && bytes <= cap_two) k = TPG_PEER_TWOSHOT;
      else why = "NCCL serves messages of this size best";
    }
  }
  if (why) {
    if (d->algo == TPG_ALGO_ONESHOT || d->algo == TPG_ALGO_TWOSHOT)
      return TPG_ARG_FAIL("node %s: TPG_ALGO_%s cannot serve it: %s", tpg_node_label(p, i, lb, sizeof lb),
                          d->algo == TPG_ALGO_ONESHOT ? "ONESHOT" : "TWOSHOT", why);
    return TPG_SUCCESS;
  }
  tpg_allreduce_args *a = &gn->args.ar;
  memset(a, 0, sizeof *a);
  tpg_peer_args(g->comm, k, a);
  a->in = (const void *)(uintptr_t)view_ptr(p, bind, d->send);
  a->out = (void *)(uintptr_t)view_ptr(p, bind, d->recv);
  a->count = d->count;
  a->dtype = kdt_of(p->slots[d->send.slot - 1].dtype);
  fill_epi(p, bind, d, &a->epi);
  CUfunction f;
  static const char *const knames[] = {"tpg_allreduce_oneshot", "tpg_allreduce_lamport", "tpg_allreduce_twoshot"};
  const char *kname = knames[k];
  TPG_TRY(tpg_kernel_function(kname, 0, &f));
  memset(&gn->kp, 0, sizeof gn->kp);
  gn->kp.func = f;
  /* Always the kernel's whole grid, empty blocks included: the kernels'
   * epoch counters are per block index, and their argument that a peer
   * cannot overwrite data still being read holds only if every block index
   * advances once per all-reduce. With grids sized by the message, two
   * all-reduces of different sizes on one comm put the same bytes under
   * different block indices and a rank running one node ahead could
   * overwrite what a slower peer had not read yet. */
  /* The grid is fixed per kernel (two-shot has its own epoch counters, so
   * its grid may differ from the one-shot kernels'); TPG_TWOSHOT_BLOCKS is a
   * tuning override that must be the same on every rank and process. */
  gn->kp.gridDimX = k == TPG_PEER_TWOSHOT ? twoshot_blocks() : TPG_AR_ONESHOT_BLOCKS;
  gn->kp.gridDimY = gn->kp.gridDimZ = 1;
  /* Two-shot: 512 threads, so a block keeps more remote stores and polls in
   * flight. */
  gn->kp.blockDimX = k == TPG_PEER_TWOSHOT ? 512 : 256;
  gn->kp.blockDimY = gn->kp.blockDimZ = 1;
  gn->kernel = kname;
  gn->fast = 1;
  return TPG_SUCCESS;
}

static tpg_status fill_collective(tpg_graph *g, const tpg_plan *p, void **bind, int i, tpg_gnode *gn) {
  const tpg_collective_desc *d = &p->nodes[i].u.coll;
  gn->fast = 0;
  gn->has_epi = 0;
  TPG_TRY(pick_collective(g, p, bind, i, gn));
  if (!gn->fast && d->kind == TPG_ALL_REDUCE && d->hidden) TPG_TRY(fill_nccl_epilogue(g, p, bind, d, gn));
  return TPG_SUCCESS;
}

tpg_status tpg_fill_node(tpg_graph *g, const tpg_plan *p, void **bind, int i, tpg_gnode *gn) {
  const tpg_node_rec *n = &p->nodes[i];
  char lb[160];
  switch (n->kind) {
    case TPG_NK_GEMM: {
      const tpg_gemm_desc *d = &n->u.gemm;
      tpg_kernel_launch l;
      char why[256] = {0};
      int kdt = d->dtype == TPG_F16 ? TPG_KDT_F16 : TPG_KDT_BF16;
      memset(&gn->args, 0, sizeof gn->args);
      if (tpg_gemm_pick(g, d, &l, &gn->xe, &gn->we, why, sizeof why) != 0)
        return TPG_ARG_FAIL("node %s: no GEMM kernel for this shape: %s", tpg_node_label(p, i, lb, sizeof lb), why);
      gn->tma = gn->xe.rank > 0;
      if (l.workspace_bytes > g->nodes[i].workspace_bytes)
        return TPG_ARG_FAIL("node %s: needs %zu bytes of workspace, the graph allocated %zu at creation (a shape "
                            "change needs a new graph)",
                            tpg_node_label(p, i, lb, sizeof lb), l.workspace_bytes, g->nodes[i].workspace_bytes);
      CUfunction f;
      TPG_TRY(tpg_kernel_function(l.kernel, l.smem_bytes, &f));
      tpg_gemm_args *a = gemm_args(gn);
      a->x = (const void *)(uintptr_t)view_ptr(p, bind, d->x);
      a->w = (const void *)(uintptr_t)view_ptr(p, bind, d->w);
      a->y = (void *)(uintptr_t)view_ptr(p, bind, d->y);
      a->bias = (const void *)(uintptr_t)view_ptr(p, bind, d->bias);
      a->residual = (const void *)(uintptr_t)view_ptr(p, bind, d->residual);
      a->workspace = (void *)(uintptr_t)g->nodes[i].workspace;
      a->m = d->m;
      a->n = d->n;
      a->k = d->k;
      a->ldx = d->k;
      a->ldw = d->k;
      a->ldy = d->n;
      a->ldr = d->n;
      a->dtype = kdt;
      a->epilogue = (int32_t)d->epilogue;
      a->split_k = l.split_k;
      if (gn->tma) TPG_TRY(encode_maps(gn));
      gn->kernel = l.kernel;
      memset(&gn->kp, 0, sizeof gn->kp);
      gn->kp.func = f;
      gn->kp.gridDimX = l.grid[0];
      gn->kp.gridDimY = l.grid[1];
      gn->kp.gridDimZ = l.grid[2];
      gn->kp.blockDimX = l.block[0];
      gn->kp.blockDimY = l.block[1];
      gn->kp.blockDimZ = l.block[2];
      gn->kp.sharedMemBytes = l.smem_bytes;
      break;
    }
    case TPG_NK_AXPBY: {
      tpg_axpby_args *a = &gn->args.axpby;
      memset(a, 0, sizeof *a);
      a->y = (void *)(uintptr_t)view_ptr(p, bind, n->u.axpby.y);
      a->x = (const void *)(uintptr_t)view_ptr(p, bind, n->u.axpby.x);
      a->count = n->u.axpby.count;
      a->alpha = n->u.axpby.alpha;
      a->beta = n->u.axpby.beta;
      a->dtype = (int32_t)p->slots[n->u.axpby.y.slot - 1].dtype;
      CUfunction f;
      TPG_TRY(tpg_kernel_function("tpg_axpby", 0, &f));
      gn->kernel = "tpg_axpby";
      memset(&gn->kp, 0, sizeof gn->kp);
      gn->kp.func = f;
      gn->kp.gridDimX = grid_for(n->u.axpby.count, 256 * 8, (unsigned)g->dev.sm_count * 8);
      gn->kp.gridDimY = gn->kp.gridDimZ = 1;
      gn->kp.blockDimX = 256;
      gn->kp.blockDimY = gn->kp.blockDimZ = 1;
      break;
    }
    case TPG_NK_CONCAT: {
      /* One kernel node rather than one strided 2-D memcpy node per block:
       * the same depth on the critical path, but R copy-engine nodes of
       * short rows (cols * 2 bytes each) cost more launches and run below
       * the bandwidth one grid-stride kernel gets. */
      tpg_concat_args *a = &gn->args.concat;
      memset(a, 0, sizeof *a);
      a->dst = (void *)(uintptr_t)view_ptr(p, bind, n->u.concat.dst);
      a->src = (const void *)(uintptr_t)view_ptr(p, bind, n->u.concat.src);
      a->rows = (uint64_t)n->u.concat.rows;
      a->cols = (uint64_t)n->u.concat.cols;
      a->blocks = n->u.concat.blocks;
      a->esize = (int32_t)slot_esize(p, n->u.concat.dst.slot);
      CUfunction f;
      TPG_TRY(tpg_kernel_function("tpg_concat_cols", 0, &f));
      gn->kernel = "tpg_concat_cols";
      memset(&gn->kp, 0, sizeof gn->kp);
      gn->kp.func = f;
      size_t bytes = (size_t)n->u.concat.blocks * a->rows * a->cols * (size_t)a->esize;
      gn->kp.gridDimX = grid_for(bytes / 16 + 1, 256, (unsigned)g->dev.sm_count * 8);
      gn->kp.gridDimY = gn->kp.gridDimZ = 1;
      gn->kp.blockDimX = 256;
      gn->kp.blockDimY = gn->kp.blockDimZ = 1;
      break;
    }
    case TPG_NK_MEMSET: {
      size_t es = slot_esize(p, n->u.memset.dst.slot);
      memset(&gn->ms, 0, sizeof gn->ms);
      gn->ms.dst = view_ptr(p, bind, n->u.memset.dst);
      gn->ms.elementSize = (unsigned)es;
      gn->ms.width = n->u.memset.count;
      gn->ms.height = 1;
      gn->ms.pitch = n->u.memset.count * es;
      gn->ms.value = n->u.memset.value;
      break;
    }
    case TPG_NK_MEMCPY: {
      const tpg_view dv = n->u.memcpy.dst, sv = n->u.memcpy.src;
      memset(&gn->cp, 0, sizeof gn->cp);
      CUdeviceptr dptr = view_ptr(p, bind, dv), sptr = view_ptr(p, bind, sv);
      if (p->slots[sv.slot - 1].where == TPG_MEM_HOST) {
        gn->cp.srcMemoryType = CU_MEMORYTYPE_HOST;
        gn->cp.srcHost = (const void *)(uintptr_t)sptr;
      } else {
        gn->cp.srcMemoryType = CU_MEMORYTYPE_DEVICE;
        gn->cp.srcDevice = sptr;
      }
      if (p->slots[dv.slot - 1].where == TPG_MEM_HOST) {
        gn->cp.dstMemoryType = CU_MEMORYTYPE_HOST;
        gn->cp.dstHost = (void *)(uintptr_t)dptr;
      } else {
        gn->cp.dstMemoryType = CU_MEMORYTYPE_DEVICE;
        gn->cp.dstDevice = dptr;
      }
      gn->cp.WidthInBytes = n->u.memcpy.count * slot_esize(p, dv.slot);
      gn->cp.Height = 1;
      gn->cp.Depth = 1;
      break;
    }
    case TPG_NK_COLLECTIVE: TPG_TRY(fill_collective(g, p, bind, i, gn)); break;
    default: break;
  }
  /* Every kernel takes one struct: its only parameter points at our copy. */
  gn->kparams[0] = &gn->args;
  gn->kp.kernelParams = gn->kparams;
  gn->epi_kparams[0] = &gn->epi;
  gn->epi_kp.kernelParams = gn->epi_kparams;
  return TPG_SUCCESS;
}

tpg_status tpg_patch_node(const tpg_graph *g, int i) {
  const tpg_plan *p = g->plan;
  const tpg_node_rec *n = &p->nodes[i];
  tpg_gnode *gn = &g->nodes[i];
  void **bind = g->bind;
  switch (n->kind) {
    case TPG_NK_GEMM: {
      tpg_gemm_args *a = gemm_args(gn);
      a->x = (const void *)(uintptr_t)view_ptr(p, bind, n->u.gemm.x);
      a->w = (const void *)(uintptr_t)view_ptr(p, bind, n->u.gemm.w);
      a->y = (void *)(uintptr_t)view_ptr(p, bind, n->u.gemm.y);
      a->bias = (const void *)(uintptr_t)view_ptr(p, bind, n->u.gemm.bias);
      a->residual = (const void *)(uintptr_t)view_ptr(p, bind, n->u.gemm.residual);
      if (gn->tma) return encode_maps(gn); /* maps hold x's and w's base addresses */
      break;
    }
    case TPG_NK_AXPBY:
      gn->args.axpby.y = (void *)(uintptr_t)view_ptr(p, bind, n->u.axpby.y);
      gn->args.axpby.x = (const void *)(uintptr_t)view_ptr(p, bind, n->u.axpby.x);
      break;
    case TPG_NK_MEMSET: gn->ms.dst = view_ptr(p, bind, n->u.memset.dst); break;
    case TPG_NK_CONCAT:
      gn->args.concat.dst = (void *)(uintptr_t)view_ptr(p, bind, n->u.concat.dst);
      gn->args.concat.src = (const void *)(uintptr_t)view_ptr(p, bind, n->u.concat.src);
      break;
    case TPG_NK_COLLECTIVE:
      if (gn->fast) {
        gn->args.ar.in = (const void *)(uintptr_t)view_ptr(p, bind, n->u.coll.send);
        gn->args.ar.out = (void *)(uintptr_t)view_ptr(p, bind, n->u.coll.recv);
        fill_epi(p, bind, &n->u.coll, &gn->args.ar.epi);
      } else if (gn->has_epi) {
        gn->epi.recv = (void *)(uintptr_t)view_ptr(p, bind, n->u.coll.recv);
        fill_epi(p, bind, &n->u.coll, &gn->epi.epi);
      }
      break;
    case TPG_NK_MEMCPY: {
      CUdeviceptr d = view_ptr(p, bind, n->u.memcpy.dst), s = view_ptr(p, bind, n->u.memcpy.src);
      if (gn->cp.dstMemoryType == CU_MEMORYTYPE_HOST) gn->cp.dstHost = (void *)(uintptr_t)d;
      else gn->cp.dstDevice = d;
      if (gn->cp.srcMemoryType == CU_MEMORYTYPE_HOST) gn->cp.srcHost = (const void *)(uintptr_t)s;
      else gn->cp.srcDevice = s;
      break;
    }
    default: break;
  }
  return TPG_SUCCESS;
}

static tpg_status coll_ranges(const tpg_graph *g, const tpg_plan *p, int i) {
  const tpg_collective_desc *d = &p->nodes[i].u.coll;
  size_t nr = (size_t)g->comm->nranks;
  size_t send_need = d->kind == TPG_REDUCE_SCATTER ? d->count * nr : d->count;
  size_t recv_need = d->kind == TPG_ALL_GATHER ? d->count * nr : d->count;
  const tpg_slot_rec *ss = &p->slots[d->send.slot - 1], *rs = &p->slots[d->recv.slot - 1];
  char lb[160];
  if (d->send.offset + send_need > ss->count)
    return TPG_ARG_FAIL("node %s: send needs %zu elements at offset %llu with %d ranks, slot \"%s\" has %zu",
                        tpg_node_label(p, i, lb, sizeof lb), send_need, (unsigned long long)d->send.offset,
                        g->comm->nranks, ss->name, ss->count);
  if (d->recv.offset + recv_need > rs->count)
    return TPG_ARG_FAIL("node %s: recv needs %zu elements at offset %llu with %d ranks, slot \"%s\" has %zu",
                        tpg_node_label(p, i, lb, sizeof lb), recv_need, (unsigned long long)d->recv.offset,
                        g->comm->nranks, rs->name, rs->count);
  return TPG_SUCCESS;
}

tpg_status tpg_capture_collective(tpg_graph *g, const tpg_plan *p, void **bind, int i, CUgraph *out) {
  *out = NULL;
  TPG_TRY(tpg_comm_check_usable(g->comm, __func__, "the graph's comm"));
  TPG_TRY(coll_ranges(g, p, i));
  const tpg_collective_desc *d = &p->nodes[i].u.coll;
  void *send = (void *)(uintptr_t)view_ptr(p, bind, d->send);
  void *recv = (void *)(uintptr_t)view_ptr(p, bind, d->recv);
  ncclDataType_t dt = tpg_nccl_dtype(p->slots[d->send.slot - 1].dtype);
  TPG_CU(cuStreamBeginCapture(g->cap_stream, CU_STREAM_CAPTURE_MODE_RELAXED));
  ncclResult_t r = ncclSuccess;
  switch (d->kind) {
    case TPG_ALL_REDUCE: r = ncclAllReduce(send, recv, d->count, dt, ncclSum, g->comm->nccl, g->cap_stream); break;
    case TPG_ALL_GATHER: r = ncclAllGather(send, recv, d->count, dt, g->comm->nccl, g->cap_stream); break;
    default: r = ncclReduceScatter(send, recv, d->count, dt, ncclSum, g->comm->nccl, g->cap_stream); break;
  }
  char lb[160], what[200];
  snprintf(what, sizeof what, "capturing NCCL for node %s", tpg_node_label(p, i, lb, sizeof lb));
  tpg_status st = tpg_nccl_settle(g->comm, r, __func__, what);
  CUgraph child = NULL;
  CUresult er = tpg_cu->cuStreamEndCapture(g->cap_stream, &child);
  if (st != TPG_SUCCESS) {
    if (child) tpg_cu->cuGraphDestroy(child);
    return st;
  }
  if (er != CUDA_SUCCESS || !child) {
    if (child) tpg_cu->cuGraphDestroy(child);
    return tpg_cu_fail(er != CUDA_SUCCESS ? er : CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, __func__,
                       "cuStreamEndCapture(NCCL collective)");
  }
  *out = child;
  return TPG_SUCCESS;
}

/* ---- Programmatic dependent launch (TPG_GRAPH_PDL) ------------------------
 *
 * An edge A -> B is made programmatic (CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC,
 * from port CU_GRAPH_KERNEL_NODE_PORT_PROGRAMMATIC) only when all of these
 * hold, and is ordinary otherwise:
 * - the graph has TPG_GRAPH_PDL, is explicit, and the GPU is sm_90+ (g->pdl):
 *   griddepcontrol exists only there; the sm_80 image would not wait.
 * - A is one of our kernel nodes (pdl_primary): a programmatic edge must
 *   start at a kernel node. NCCL child graphs, memcpy, memset and empty
 *   nodes never are primaries, and their successors wait for them normally.
 * - B is one of our kernels that executes griddepcontrol.wait in EVERY block
 *   on EVERY path (pdl_secondary: GEMM, axpby, concat): before it reads
 *   anything A wrote, before it writes anything A may still read (WAR: e.g.
 *   the all-reduce's in-place buffer, or a GEMV's input that the next one
 *   overwrites), and before it exits, so that a node C after B by an
 *   ordinary edge still runs after A (B cannot complete before A did).
 *   The GEMVs issue only an L2 bulk prefetch of their W rows before the
 *   wait: a hint that writes no registers, correct whatever A writes.
 * - B is not an all-reduce kernel: those write peer-visible staging and
 *   flags whose epoch protocol assumes the previous node has finished, and
 *   run in place (in == out); they stay behind ordinary edges. They are
 *   primaries, and trigger their dependents first thing (allreduce.cu), so
 *   the next layer's GEMV pulls its weights into L2 during the all-reduce.
 * Primaries that are GEMM/elementwise kernels trigger after their own wait
 * (griddepcontrol.launch_dependents), so at most one grid of a chain is
 * launched ahead. Only edge data changes: rebind (exec kernel-node setters)
 * and whole-graph update (the same code builds the same edges) keep them.
 */
static int pdl_secondary(const tpg_node_rec *n) {
  return n->kind == TPG_NK_GEMM || n->kind == TPG_NK_AXPBY || n->kind == TPG_NK_CONCAT;
}
static int pdl_primary(const tpg_plan *p, const tpg_gnode *nodes, int j) {
  const tpg_node_rec *n = &p->nodes[j];
  if (pdl_secondary(n)) return 1;
  /* our all-reduce kernel, or the epilogue kernel node after an NCCL one */
  return n->kind == TPG_NK_COLLECTIVE && (nodes[j].fast || nodes[j].has_epi);
}

/* W bytes per row a decode GEMV prefetches into L2 before its wait
 * (TPG_PDL_PREFETCH overrides). Off by default: on 2 x H200, TP=2, M=1, the
 * programmatic edges alone gave 38.9 / 118.1 us per layer (4096/14336,
 * 8192/28672) against 39.5 / 118.7 without PDL, while adding a 4096-byte
 * prefetch per row gave 41.2 / 124.5 — the early-launched CTAs' prefetches
 * compete with the all-reduce and the previous GEMV for HBM and SMs. */
#ifndef TPG_PDL_PREFETCH
#define TPG_PDL_PREFETCH 0
#endif
static int32_t pdl_prefetch_bytes(void) {
  size_t b = env_bytes("TPG_PDL_PREFETCH", TPG_PDL_PREFETCH);
  if (b > ((size_t)1 << 20)) b = (size_t)1 << 20;
  return (int32_t)(b & ~(size_t)15);
}

tpg_status tpg_count_programmatic_edges(CUgraph graph, int *out) {
  *out = 0;
  size_t n = 0;
  TPG_CU(cuGraphGetEdges(graph, NULL, NULL, NULL, &n));
  if (n == 0) return TPG_SUCCESS;
  CUgraphNode *from = malloc(n * sizeof *from), *to = malloc(n * sizeof *to);
  CUgraphEdgeData *ed = calloc(n, sizeof *ed);
  tpg_status st = TPG_SUCCESS;
  if (!from || !to || !ed) {
    st = TPG_FAIL(TPG_ERROR_OUT_OF_MEMORY, "out of host memory");
  } else {
    CUresult r = tpg_cu->cuGraphGetEdges(graph, from, to, ed, &n);
    if (r != CUDA_SUCCESS) st = tpg_cu_fail(r, __func__, "cuGraphGetEdges");
    else
      for (size_t e = 0; e < n; e++) *out += ed[e].type == CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC;
  }
  free(from);
  free(to);
  free(ed);
  return st;
}

tpg_status tpg_materialize(tpg_graph *g, const tpg_plan *p, void **bind, tpg_gnode *nodes, CUgraph *out) {
  *out = NULL;
  CUgraph graph = NULL;
  CUgraphNode *deps = NULL, *tos = NULL;
  CUgraphEdgeData *edata = NULL;
  int *dsrc = NULL;
  tpg_status st = TPG_SUCCESS;
  char lb[160];
  int maxdeps = 1;
  for (int i = 0; i < p->nnodes; i++)
    if (p->nodes[i].ndeps + 1 > maxdeps) maxdeps = p->nodes[i].ndeps + 1;
  deps = malloc((size_t)maxdeps * sizeof *deps);
  tos = malloc((size_t)maxdeps * sizeof *tos);
  edata = calloc((size_t)maxdeps, sizeof *edata);
  dsrc = malloc((size_t)maxdeps * sizeof *dsrc);
  if (!deps || !tos || !edata || !dsrc) {
    st = TPG_FAIL(TPG_ERROR_OUT_OF_MEMORY, "out of host memory");
    goto fail;
  }
  const int32_t prefetch = g->pdl ? pdl_prefetch_bytes() : 0;
  TPG_CUGOTO(cuGraphCreate(&graph, 0), st, fail);
  int last_coll = -1;
  for (int oi = 0; oi < p->nnodes; oi++) {
    int i = g->order[oi];
    const tpg_node_rec *n = &p->nodes[i];
    tpg_gnode *gn = &nodes[i];
    size_t nd = 0;
    int has_last = 0;
    for (int j = 0; j < n->ndeps; j++) {
      dsrc[nd] = n->deps[j];
      deps[nd++] = tpg_gnode_tail(&nodes[n->deps[j]]);
      has_last |= n->deps[j] == last_coll;
    }
    if (n->kind == TPG_NK_COLLECTIVE && last_coll >= 0 && !has_last) {
      dsrc[nd] = last_coll;
      deps[nd++] = tpg_gnode_tail(&nodes[last_coll]);
    }
    TPG_TRYGOTO(tpg_fill_node(g, p, bind, i, gn), st, fail);
    /* Which of this node's edges are programmatic (see the rules above). */
    size_t nprog = 0;
    if (g->pdl && pdl_secondary(n))
      for (size_t j = 0; j < nd; j++) {
        memset(&edata[j], 0, sizeof edata[j]);
        tos[j] = NULL;
        if (pdl_primary(p, nodes, dsrc[j])) {
          edata[j].type = CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC;
          edata[j].from_port = CU_GRAPH_KERNEL_NODE_PORT_PROGRAMMATIC;
          nprog++;
        }
      }
    if (nprog && n->kind == TPG_NK_GEMM) gemm_args(gn)->pdl_prefetch = prefetch;
    CUresult r = CUDA_SUCCESS;
    const char *call = "";
    switch (n->kind) {
      case TPG_NK_GEMM:
      case TPG_NK_AXPBY:
      case TPG_NK_CONCAT:
        call = "cuGraphAddKernelNode";
        if (!nprog) {
          r = tpg_cu->cuGraphAddKernelNode(&gn->node, graph, deps, nd, &gn->kp);
          break;
        }
        /* Added alone, then every incoming edge with its edge data. */
        r = tpg_cu->cuGraphAddKernelNode(&gn->node, graph, NULL, 0, &gn->kp);
        if (r != CUDA_SUCCESS) break;
        for (size_t j = 0; j < nd; j++) tos[j] = gn->node;
        call = "cuGraphAddDependencies (programmatic edges, TPG_GRAPH_PDL)";
        r = tpg_cu->cuGraphAddDependencies(graph, deps, tos, edata, nd);
        break;
      case TPG_NK_MEMSET:
        call = "cuGraphAddMemsetNode";
        r = tpg_cu->cuGraphAddMemsetNode(&gn->node, graph, deps, nd, &gn->ms, g->dev.ctx);
        break;
      case TPG_NK_MEMCPY:
        call = "cuGraphAddMemcpyNode";
        r = tpg_cu->cuGraphAddMemcpyNode(&gn->node, graph, deps, nd, &gn->cp, g->dev.ctx);
        break;
      case TPG_NK_EMPTY:
        call = "cuGraphAddEmptyNode";
        r = tpg_cu->cuGraphAddEmptyNode(&gn->node, graph, deps, nd);
        break;
      case TPG_NK_COLLECTIVE: {
        last_coll = i;
        if (gn->fast) { /* our one-shot kernel: a plain kernel node */
          call = "cuGraphAddKernelNode (one-shot all-reduce)";
          r = tpg_cu->cuGraphAddKernelNode(&gn->node, graph, deps, nd, &gn->kp);
          break;
        }
        CUgraph child;
        TPG_TRYGOTO(tpg_capture_collective(g, p, bind, i, &child), st, fail);
        call = "cuGraphAddChildGraphNode";
        /* The child is cloned into the parent (NCCL's resources travel with
         * the clone as graph user objects), so our capture can go now. */
        r = tpg_cu->cuGraphAddChildGraphNode(&gn->node, graph, deps, nd, child);
        tpg_cu->cuGraphDestroy(child);
        gn->cap_send = view_ptr(p, bind, n->u.coll.send);
        gn->cap_recv = view_ptr(p, bind, n->u.coll.recv);
        if (r == CUDA_SUCCESS && gn->has_epi) {
          call = "cuGraphAddKernelNode (epilogue after the NCCL all-reduce)";
          r = tpg_cu->cuGraphAddKernelNode(&gn->epi_node, graph, &gn->node, 1, &gn->epi_kp);
        }
        break;
      }
      default: break;
    }
    if (r != CUDA_SUCCESS) {
      char what[256];
      snprintf(what, sizeof what, "%s for node %s", call, tpg_node_label(p, i, lb, sizeof lb));
      st = tpg_cu_fail(r, __func__, what);
      goto fail;
    }
  }
  free(deps);
  free(tos);
  free(edata);
  free(dsrc);
  *out = graph;
  return TPG_SUCCESS;
fail:
  free(deps);
  free(tos);
  free(edata);
  free(dsrc);
  if (graph) tpg_cu->cuGraphDestroy(graph);
  return st;
}
