/* common.c - what the node kinds share (common.h): launch grids, kernel
 * nodes behind programmatic edges, child-graph capture, DOT text. */
#define _POSIX_C_SOURCE 200809L
#include "graphbuild/nodes/common.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

unsigned tpg_grid_for(size_t work, unsigned per_block, unsigned max_blocks) {
  size_t b = (work + per_block - 1) / per_block;
  if (b < 1) b = 1;
  if (b > max_blocks) b = max_blocks;
  return (unsigned)b;
}

int32_t tpg_kdt_of(tpg_dtype dt) { return dt == TPG_F32 ? TPG_KDT_F32 : dt == TPG_F16 ? TPG_KDT_F16 : TPG_KDT_BF16; }

void tpg_kernel_params(CUDA_KERNEL_NODE_PARAMS *kp, void **kparams, void *args) {
  kparams[0] = args;
  kp->kernelParams = kparams;
}

const char *tpg_node_label_of(const tpg_kind_ops *k, const tpg_plan *p, int idx, char *buf, size_t cap) {
  const tpg_node_rec *n = &p->nodes[idx];
  if (n->name) snprintf(buf, cap, "%s", n->name);
  else if (k->label) k->label(n, idx, buf, cap);
  else snprintf(buf, cap, "%s#%d", k->name, idx);
  return buf;
}

const char *tpg_nctx_label(const tpg_nctx *c) {
  if (!c->lbcap) return "?";
  if (!c->lb[0]) tpg_node_label_of(c->kind, c->p, c->i, c->lb, c->lbcap);
  return c->lb;
}

tpg_status tpg_node_cu_fail(const tpg_nctx *c, CUresult r, const char *call) {
  char what[256];
  snprintf(what, sizeof what, "%s for node %s", call, tpg_nctx_label(c));
  return tpg_cu_fail(r, "tpg_graph_create", what);
}

tpg_status tpg_add_kernel_node(const tpg_nctx *c, CUgraph graph, const tpg_deps *deps,
                               const CUDA_KERNEL_NODE_PARAMS *kp, const char *what) {
  tpg_gnode *gn = c->gn;
  if (gn->ncu >= TPG_GNODE_MAX_CU) return TPG_FAIL(TPG_ERROR_INTERNAL, "node %s: too many CUDA nodes", tpg_nctx_label(c));
  CUgraphNode *slot = &gn->cu[gn->ncu];
  if (!deps->nprog || !deps->edata) {
    CUresult r = tpg_cu->cuGraphAddKernelNode(slot, graph, deps->nodes, deps->n, kp);
    if (r != CUDA_SUCCESS) return tpg_node_cu_fail(c, r, what);
    gn->ncu++;
    return TPG_SUCCESS;
  }
  /* Added alone, then every incoming edge with its edge data. */
  CUresult r = tpg_cu->cuGraphAddKernelNode(slot, graph, NULL, 0, kp);
  if (r != CUDA_SUCCESS) return tpg_node_cu_fail(c, r, what);
  gn->ncu++;
  CUgraphNode tos[64], *to = tos;
  if (deps->n > sizeof tos / sizeof tos[0]) {
    to = malloc(deps->n * sizeof *to);
    if (!to) return TPG_FAIL(TPG_ERROR_OUT_OF_MEMORY, "out of host memory");
  }
  for (size_t j = 0; j < deps->n; j++) to[j] = *slot;
  r = tpg_cu->cuGraphAddDependencies(graph, deps->nodes, to, deps->edata, deps->n);
  if (to != tos) free(to);
  if (r != CUDA_SUCCESS)
    return tpg_node_cu_fail(c, r, "cuGraphAddDependencies (programmatic edges, TPG_GRAPH_PDL)");
  return TPG_SUCCESS;
}

tpg_status tpg_launch_params(const CUDA_KERNEL_NODE_PARAMS *kp, CUstream stream) {
  TPG_CU(cuLaunchKernel(kp->func, kp->gridDimX, kp->gridDimY, kp->gridDimZ, kp->blockDimX, kp->blockDimY,
                        kp->blockDimZ, kp->sharedMemBytes, stream, kp->kernelParams, NULL));
  return TPG_SUCCESS;
}

tpg_status tpg_launch_params_ex(const tpg_nctx *c, const CUDA_KERNEL_NODE_PARAMS *kp, const unsigned cluster[3],
                                CUstream stream) {
  const unsigned grid[3] = {kp->gridDimX, kp->gridDimY, kp->gridDimZ};
  const unsigned block[3] = {kp->blockDimX, kp->blockDimY, kp->blockDimZ};
  CUresult r = tpg_launch_ex(kp->func, grid, block, kp->sharedMemBytes, cluster, stream, kp->kernelParams);
  if (r != CUDA_SUCCESS) {
    char what[200];
    snprintf(what, sizeof what, "cuLaunchKernelEx for node %s", tpg_nctx_label(c));
    return tpg_cu_fail(r, "tpg_graph_launch", what);
  }
  return TPG_SUCCESS;
}

tpg_status tpg_node_set_cluster(const tpg_nctx *c, const unsigned cluster[3]) {
  CUlaunchAttributeValue v;
  memset(&v, 0, sizeof v);
  v.clusterDim.x = cluster[0];
  v.clusterDim.y = cluster[1];
  v.clusterDim.z = cluster[2];
  CUresult r = tpg_cu->cuGraphKernelNodeSetAttribute(c->gn->cu[c->gn->ncu - 1], CU_KERNEL_NODE_ATTRIBUTE_CLUSTER_DIMENSION, &v);
  if (r != CUDA_SUCCESS) return tpg_node_cu_fail(c, r, "cuGraphKernelNodeSetAttribute(CLUSTER_DIMENSION)");
  return TPG_SUCCESS;
}

tpg_status tpg_capture_child(const tpg_nctx *c, tpg_issue_fn issue, CUgraph *out) {
  *out = NULL;
  CUstream s = c->g->cap_stream;
  TPG_CU(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_RELAXED));
  tpg_status st = issue(c, s);
  CUgraph child = NULL;
  CUresult er = tpg_cu->cuStreamEndCapture(s, &child);
  if (st != TPG_SUCCESS) {
    if (child) tpg_cu->cuGraphDestroy(child);
    return st;
  }
  if (er != CUDA_SUCCESS || !child) {
    if (child) tpg_cu->cuGraphDestroy(child);
    char what[256];
    snprintf(what, sizeof what, "cuStreamEndCapture (child graph of node %s)", tpg_nctx_label(c));
    return tpg_cu_fail(er != CUDA_SUCCESS ? er : CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, __func__, what);
  }
  *out = child;
  return TPG_SUCCESS;
}

/* ---- DOT text ------------------------------------------------------------ */

void tpg_sb_printf(tpg_sbuf *s, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  size_t room = s->len < s->cap ? s->cap - s->len : 0;
  int n = vsnprintf(room ? s->buf + s->len : NULL, room, fmt, ap);
  va_end(ap);
  if (n > 0) s->len += (size_t)n;
}

/* Appends n bytes as they are (what fits; len counts them all, as above). */
static void sb_put(tpg_sbuf *s, const char *text, size_t n) {
  if (s->len < s->cap) {
    size_t room = s->cap - s->len - 1; /* keep the NUL */
    size_t k = n < room ? n : room;
    memcpy(s->buf + s->len, text, k);
    s->buf[s->len + k] = '\0';
  }
  s->len += n;
}

/* User text inside a DOT string: names may hold any byte but NUL, and a raw
 * quote would end the label early (a newline splits it), so the file would
 * not parse. Quote and backslash get a backslash, newline becomes DOT's \n,
 * other control bytes '?'. Plain runs are copied whole: DOT of a big plan is
 * mostly names. */
void tpg_sb_quoted(tpg_sbuf *s, const char *text) {
  const char *run = text;
  for (const unsigned char *c = (const unsigned char *)text;; c++) {
    int plain = *c >= 0x20 && *c != 0x7f && *c != '"' && *c != '\\';
    if (plain) continue;
    sb_put(s, run, (size_t)((const char *)c - run));
    if (!*c) return;
    if (*c == '"' || *c == '\\') {
      char esc[2] = {'\\', (char)*c};
      sb_put(s, esc, 2);
    } else {
      sb_put(s, *c == '\n' ? "\\n" : "?", *c == '\n' ? 2 : 1);
    }
    run = (const char *)c + 1;
  }
}

void tpg_sb_view(tpg_sbuf *s, const tpg_plan *p, const char *role, tpg_view v) {
  if (!v.slot) return;
  tpg_sb_printf(s, "\\n%s=", role);
  tpg_sb_quoted(s, p->slots[v.slot - 1].name);
  if (v.offset) tpg_sb_printf(s, "+%llu", (unsigned long long)v.offset);
}

int tpg_retarget_kernel(const tpg_node_rec *a, const tpg_gnode *ga, const tpg_node_rec *b, const tpg_gnode *gb) {
  (void)a, (void)b;
  return ga->ncu == gb->ncu;
}
