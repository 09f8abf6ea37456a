/* copy.c - copy-engine node kinds: memset (fill a range with a 16- or
 * 32-bit value) and memcpy (device <-> device or pinned host), as driver
 * memset/memcpy nodes, and the matching async calls in eager mode.
 */
#define _POSIX_C_SOURCE 200809L
#include <string.h>

#include "graphbuild/nodes/common.h"

static void count_memset(const tpg_gnode *gn, tpg_graph_info *info) {
  (void)gn;
  info->nodes++;
  info->memset_nodes++;
}

static void count_memcpy(const tpg_gnode *gn, tpg_graph_info *info) {
  (void)gn;
  info->nodes++;
  info->memcpy_nodes++;
}

/* ---- memset ------------------------------------------------------------- */

static tpg_status memset_check(const tpg_plan *p, const char *fn, const tpg_node_rec *n) {
  tpg_view dst = n->u.memset.dst;
  size_t count = n->u.memset.count;
  uint32_t value = n->u.memset.value;
  if (count == 0) return tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn, "count is 0: expected >= 1 element");
  TPG_TRY(tpg_view_check(p, fn, "dst", dst, count, 1));
  TPG_TRY(tpg_view_check_device(p, fn, "dst", dst));
  size_t es = tpg_dtype_size(p->slots[dst.slot - 1].dtype);
  if (!(es == 4 || value <= 0xffffu))
    return tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn, "value 0x%x does not fit the %zu-byte elements of slot \"%s\"",
                   value, es, p->slots[dst.slot - 1].name);
  return TPG_SUCCESS;
}

static int memset_views(const tpg_node_rec *n, tpg_view_use *v) {
  v[0] = (tpg_view_use){n->u.memset.dst, n->u.memset.count, 1};
  return 1;
}

static void memset_dot(tpg_sbuf *s, const tpg_plan *p, const tpg_node_rec *n) {
  tpg_sb_printf(s, "\\n0x%x n=%zu", n->u.memset.value, n->u.memset.count);
  tpg_sb_view(s, p, "dst", n->u.memset.dst);
}

static tpg_status memset_set_ptrs(const tpg_nctx *c) {
  c->gn->ms.dst = tpg_view_ptr(c->p, c->bind, c->n->u.memset.dst);
  return TPG_SUCCESS;
}

static tpg_status memset_fill(const tpg_nctx *c) {
  size_t es = tpg_slot_esize(c->p, c->n->u.memset.dst.slot);
  CUDA_MEMSET_NODE_PARAMS *ms = &c->gn->ms;
  memset(ms, 0, sizeof *ms);
  ms->elementSize = (unsigned)es;
  ms->width = c->n->u.memset.count;
  ms->height = 1;
  ms->pitch = c->n->u.memset.count * es;
  ms->value = c->n->u.memset.value;
  return memset_set_ptrs(c);
}

static tpg_status memset_add(const tpg_nctx *c, CUgraph graph, const tpg_deps *deps) {
  CUresult r = tpg_cu->cuGraphAddMemsetNode(&c->gn->cu[0], graph, deps->nodes, deps->n, &c->gn->ms, c->g->dev.ctx);
  if (r != CUDA_SUCCESS) return tpg_node_cu_fail(c, r, "cuGraphAddMemsetNode");
  c->gn->ncu = 1;
  return TPG_SUCCESS;
}

static tpg_status memset_run(const tpg_nctx *c, CUstream stream) {
  const CUDA_MEMSET_NODE_PARAMS *ms = &c->gn->ms;
  if (ms->elementSize == 4) TPG_CU(cuMemsetD32Async(ms->dst, ms->value, ms->width, stream));
  else TPG_CU(cuMemsetD16Async(ms->dst, (unsigned short)ms->value, ms->width, stream));
  return TPG_SUCCESS;
}

static tpg_status memset_patch(const tpg_nctx *c) {
  TPG_TRY(memset_set_ptrs(c));
  if (c->g->mode == TPG_MODE_EAGER) return TPG_SUCCESS;
  TPG_CU(cuGraphExecMemsetNodeSetParams(c->g->exec, c->gn->cu[0], &c->gn->ms, c->g->dev.ctx));
  return TPG_SUCCESS;
}

/* The exec setter may refuse another width, element size or pitch (CUDA's
 * documentation): only the value and the pointer change. */
static int memset_retarget(const tpg_node_rec *a, const tpg_gnode *ga, const tpg_node_rec *b, const tpg_gnode *gb) {
  (void)a, (void)b;
  return ga->ms.width == gb->ms.width && ga->ms.height == gb->ms.height &&
         ga->ms.elementSize == gb->ms.elementSize && ga->ms.pitch == gb->ms.pitch;
}

const tpg_kind_ops tpg_kind_memset = {
    .name = "memset",
    .dot_shape = "note",
    .check = memset_check,
    .views = memset_views,
    .dot = memset_dot,
    .fill = memset_fill,
    .add = memset_add,
    .run_eager = memset_run,
    .patch = memset_patch,
    .retarget = memset_retarget,
    .count = count_memset,
};

/* ---- memcpy ------------------------------------------------------------- */

static tpg_status memcpy_check(const tpg_plan *p, const char *fn, const tpg_node_rec *n) {
  tpg_view dst = n->u.memcpy.dst, src = n->u.memcpy.src;
  size_t count = n->u.memcpy.count;
  if (count == 0) return tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn, "count is 0: expected >= 1 element");
  TPG_TRY(tpg_view_check(p, fn, "dst", dst, count, 1));
  TPG_TRY(tpg_view_check(p, fn, "src", src, count, 1));
  TPG_TRY(tpg_view_check_dtype(p, fn, "src", src, p->slots[dst.slot - 1].dtype));
  if (p->slots[dst.slot - 1].where == TPG_MEM_HOST && p->slots[src.slot - 1].where == TPG_MEM_HOST)
    return tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn, "dst and src are both host slots: expected at least one device slot");
  if (dst.slot == src.slot && !(dst.offset + count <= src.offset || src.offset + count <= dst.offset))
    return tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn, "dst and src overlap in slot \"%s\": expected disjoint ranges",
                   p->slots[dst.slot - 1].name);
  return TPG_SUCCESS;
}

static int memcpy_views(const tpg_node_rec *n, tpg_view_use *v) {
  v[0] = (tpg_view_use){n->u.memcpy.dst, n->u.memcpy.count, 1};
  v[1] = (tpg_view_use){n->u.memcpy.src, n->u.memcpy.count, 0};
  return 2;
}

static void memcpy_dot(tpg_sbuf *s, const tpg_plan *p, const tpg_node_rec *n) {
  tpg_sb_printf(s, "\\nn=%zu", n->u.memcpy.count);
  tpg_sb_view(s, p, "dst", n->u.memcpy.dst);
  tpg_sb_view(s, p, "src", n->u.memcpy.src);
}

/* Pinned host memory goes in the host fields (the memory types are set by fill). */
static tpg_status memcpy_set_ptrs(const tpg_nctx *c) {
  CUDA_MEMCPY3D *cp = &c->gn->cp;
  CUdeviceptr d = tpg_view_ptr(c->p, c->bind, c->n->u.memcpy.dst);
  CUdeviceptr s = tpg_view_ptr(c->p, c->bind, c->n->u.memcpy.src);
  if (cp->dstMemoryType == CU_MEMORYTYPE_HOST) cp->dstHost = (void *)(uintptr_t)d;
  else cp->dstDevice = d;
  if (cp->srcMemoryType == CU_MEMORYTYPE_HOST) cp->srcHost = (const void *)(uintptr_t)s;
  else cp->srcDevice = s;
  return TPG_SUCCESS;
}

static tpg_status memcpy_fill(const tpg_nctx *c) {
  const tpg_view dv = c->n->u.memcpy.dst, sv = c->n->u.memcpy.src;
  CUDA_MEMCPY3D *cp = &c->gn->cp;
  memset(cp, 0, sizeof *cp);
  cp->srcMemoryType = c->p->slots[sv.slot - 1].where == TPG_MEM_HOST ? CU_MEMORYTYPE_HOST : CU_MEMORYTYPE_DEVICE;
  cp->dstMemoryType = c->p->slots[dv.slot - 1].where == TPG_MEM_HOST ? CU_MEMORYTYPE_HOST : CU_MEMORYTYPE_DEVICE;
  cp->WidthInBytes = c->n->u.memcpy.count * tpg_slot_esize(c->p, dv.slot);
  cp->Height = 1;
  cp->Depth = 1;
  return memcpy_set_ptrs(c);
}

static tpg_status memcpy_add(const tpg_nctx *c, CUgraph graph, const tpg_deps *deps) {
  CUresult r = tpg_cu->cuGraphAddMemcpyNode(&c->gn->cu[0], graph, deps->nodes, deps->n, &c->gn->cp, c->g->dev.ctx);
  if (r != CUDA_SUCCESS) return tpg_node_cu_fail(c, r, "cuGraphAddMemcpyNode");
  c->gn->ncu = 1;
  return TPG_SUCCESS;
}

static tpg_status memcpy_run(const tpg_nctx *c, CUstream stream) {
  const CUDA_MEMCPY3D *cp = &c->gn->cp;
  /* Unified addressing: a pinned host pointer is a valid CUdeviceptr here. */
  CUdeviceptr d = cp->dstMemoryType == CU_MEMORYTYPE_HOST ? (CUdeviceptr)(uintptr_t)cp->dstHost : cp->dstDevice;
  CUdeviceptr s = cp->srcMemoryType == CU_MEMORYTYPE_HOST ? (CUdeviceptr)(uintptr_t)cp->srcHost : cp->srcDevice;
  TPG_CU(cuMemcpyAsync(d, s, cp->WidthInBytes, stream));
  return TPG_SUCCESS;
}

static tpg_status memcpy_patch(const tpg_nctx *c) {
  TPG_TRY(memcpy_set_ptrs(c));
  if (c->g->mode == TPG_MODE_EAGER) return TPG_SUCCESS;
  TPG_CU(cuGraphExecMemcpyNodeSetParams(c->g->exec, c->gn->cu[0], &c->gn->cp, c->g->dev.ctx));
  return TPG_SUCCESS;
}

/* One-dimensional copies between the same memory kinds take any length
 * through the exec setter. */
static int memcpy_retarget(const tpg_node_rec *a, const tpg_gnode *ga, const tpg_node_rec *b, const tpg_gnode *gb) {
  (void)a, (void)b;
  return ga->cp.srcMemoryType == gb->cp.srcMemoryType && ga->cp.dstMemoryType == gb->cp.dstMemoryType;
}

const tpg_kind_ops tpg_kind_memcpy = {
    .name = "memcpy",
    .dot_shape = "note",
    .check = memcpy_check,
    .views = memcpy_views,
    .dot = memcpy_dot,
    .fill = memcpy_fill,
    .add = memcpy_add,
    .run_eager = memcpy_run,
    .patch = memcpy_patch,
    .retarget = memcpy_retarget,
    .count = count_memcpy,
};
