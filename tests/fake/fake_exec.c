/* fake_exec.c - the stand-in driver's graphs, streams and "device" work.
 *
 * A node is a self-contained copy of what it will do (kernel argument block,
 * fill, copy, collective, event record). Graphs own their nodes; execs own
 * deep copies, in creation order, which is a topological order because a
 * node's dependencies must exist before it. Launching an exec enqueues a copy
 * of each node, so later exec updates never change a launch already made, as
 * in CUDA. Work runs when it reaches the head of its stream's queue: at
 * once, unless a collective ahead of it waits for the other ranks.
 *
 * Kernels do not compute; they check that every pointer in their argument
 * block (kernels/tpg_kargs.h) lies, with the extent the kernel would touch,
 * inside a live allocation. Fills and copies run on the host memory behind
 * the fake device pointers after the same check.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/tpg_kargs.h"
#include "kernels/tpg_cutlass_args.h"
#include "kernels/tpg_tma_args.h"
#include "tests/fake/fake_internal.h"
#include "tests/fake/tpgfake.h"

/* ---- graphs ---- */

fk_graph *fk_graph_new(void) { return calloc(1, sizeof(fk_graph)); }

fk_node *fk_node_clone(const fk_node *n) {
  fk_node *c = malloc(sizeof *c);
  if (!c) return NULL;
  memcpy(c, n, sizeof *c);
  if (n->type == FK_N_CHILD) {
    c->child = fk_graph_clone(n->child);
    if (!c->child) {
      free(c);
      return NULL;
    }
  }
  if (n->type == FK_N_COND && fk_cond_parts_copy(c, n) != 0) {
    free(c);
    return NULL;
  }
  if (n->type == FK_N_COLL) fk_clique_ref(n->cq, +1);
  return c;
}

int fk_cond_parts_copy(fk_node *d, const fk_node *s) {
  d->bodies = calloc((size_t)(s->nbodies > 0 ? s->nbodies : 1), sizeof *d->bodies);
  if (!d->bodies) return -1;
  for (int b = 0; b < s->nbodies; b++)
    if (!(d->bodies[b] = fk_graph_clone(s->bodies[b]))) {
      for (int k = 0; k < b; k++) fk_graph_free(d->bodies[k]);
      free(d->bodies);
      d->bodies = NULL;
      return -1;
    }
  fk_cond_ref(s->cond, +1);
  return 0;
}

void fk_cond_parts_free(fk_node *n) {
  for (int b = 0; b < n->nbodies; b++) fk_graph_free(n->bodies[b]);
  free(n->bodies);
  n->bodies = NULL;
  fk_cond_ref(n->cond, -1);
}

void fk_node_free(fk_node *n) {
  if (!n) return;
  if (n->type == FK_N_CHILD) fk_graph_free(n->child);
  if (n->type == FK_N_COLL) fk_clique_ref(n->cq, -1);
  if (n->type == FK_N_COND) fk_cond_parts_free(n);
  free(n);
}

void fk_graph_free(fk_graph *g) {
  if (!g) return;
  for (int i = 0; i < g->n; i++) fk_node_free(g->nodes[i]);
  free(g->nodes);
  free(g->edges);
  free(g);
}

static int add_edge(fk_graph *g, int from, int to, const CUgraphEdgeData *d) {
  if (g->ne == g->ecap) {
    int cap = g->ecap ? 2 * g->ecap : 16;
    fk_edge *e = realloc(g->edges, (size_t)cap * sizeof *e);
    if (!e) return -1;
    g->edges = e;
    g->ecap = cap;
  }
  fk_edge *e = &g->edges[g->ne++];
  e->from = from;
  e->to = to;
  memset(&e->data, 0, sizeof e->data);
  if (d) e->data = *d;
  return 0;
}

fk_graph *fk_graph_clone(const fk_graph *g) {
  fk_graph *c = fk_graph_new();
  if (!c) return NULL;
  for (int i = 0; i < g->n; i++) {
    fk_node *n = fk_node_clone(g->nodes[i]);
    if (!n || fk_graph_add(c, n, NULL, 0) != CUDA_SUCCESS) {
      fk_node_free(n);
      fk_graph_free(c);
      return NULL;
    }
  }
  for (int e = 0; e < g->ne; e++)
    if (add_edge(c, g->edges[e].from, g->edges[e].to, &g->edges[e].data) != 0) {
      fk_graph_free(c);
      return NULL;
    }
  return c;
}

int fk_graph_index(const fk_graph *g, const void *node) {
  for (int i = 0; i < g->n; i++)
    if ((const void *)g->nodes[i] == node) return i;
  return -1;
}

CUresult fk_graph_add(fk_graph *g, fk_node *n, const CUgraphNode *deps, size_t ndeps) {
  int idx[64];
  if (ndeps > 0 && !deps) return CUDA_ERROR_INVALID_VALUE;
  for (size_t j = 0; j < ndeps; j++) {
    int k = fk_graph_index(g, deps[j]);
    if (k < 0) {
      fk_violation("graph node dependency %zu is not a node of this graph", j);
      return CUDA_ERROR_INVALID_VALUE;
    }
    if (j < 64) idx[j] = k;
  }
  if (g->n == g->cap) {
    int cap = g->cap ? 2 * g->cap : 16;
    fk_node **v = realloc(g->nodes, (size_t)cap * sizeof *v);
    if (!v) return CUDA_ERROR_OUT_OF_MEMORY;
    g->nodes = v;
    g->cap = cap;
  }
  g->nodes[g->n] = n;
  for (size_t j = 0; j < ndeps; j++) {
    int k = j < 64 ? idx[j] : fk_graph_index(g, deps[j]);
    if (add_edge(g, k, g->n, NULL) != 0) return CUDA_ERROR_OUT_OF_MEMORY;
  }
  g->n++;
  return CUDA_SUCCESS;
}

CUresult fk_graph_add_copy(CUgraphNode *out, fk_graph *g, const CUgraphNode *deps, size_t ndeps, const fk_node *n) {
  fk_node *c = fk_node_clone(n);
  if (!c) return CUDA_ERROR_OUT_OF_MEMORY;
  CUresult r = fk_graph_add(g, c, deps, ndeps);
  if (r != CUDA_SUCCESS) {
    fk_node_free(c);
    return r;
  }
  *out = (CUgraphNode)c;
  return CUDA_SUCCESS;
}

static int cond_same_shape(const fk_node *x, const fk_node *y) {
  int sub;
  if (x->ctype != y->ctype || x->nbodies != y->nbodies) return 0;
  for (int b = 0; b < x->nbodies; b++)
    if (!fk_graph_same_shape(x->bodies[b], y->bodies[b], &sub)) return 0;
  return 1;
}

int fk_graph_same_shape(const fk_graph *a, const fk_graph *b, int *bad) {
  *bad = -1;
  if (a->n != b->n || a->ne != b->ne) return 0;
  for (int i = 0; i < a->n; i++) {
    const fk_node *x = a->nodes[i], *y = b->nodes[i];
    int sub = 0;
    if (x->type != y->type || (x->type == FK_N_CHILD && !fk_graph_same_shape(x->child, y->child, &sub)) ||
        (x->type == FK_N_COND && !cond_same_shape(x, y))) {
      *bad = i;
      return 0;
    }
  }
  for (int e = 0; e < a->ne; e++)
    if (a->edges[e].from != b->edges[e].from || a->edges[e].to != b->edges[e].to ||
        a->edges[e].data.type != b->edges[e].data.type)
      return 0;
  return 1;
}

/* ---- kernel argument checks ---- */

static size_t kdt_size(int dt) { return dt == TPG_KDT_F32 ? 4 : 2; }

/* A pointer argument that may be NULL: when set, [p, p + bytes) must be live. */
static void arg(const fk_kernel *k, const char *field, const void *p, size_t bytes) {
  if (!p) return;
  char what[160];
  snprintf(what, sizeof what, "kernel %s argument %s", k->name, field);
  fk_check_range((uintptr_t)p, bytes ? bytes : 1, what);
}

static void need(const fk_kernel *k, const char *field, const void *p, size_t bytes) {
  if (!p) {
    fk_violation("kernel %s argument %s is NULL", k->name, field);
    return;
  }
  arg(k, field, p, bytes);
}

static void check_epi(const fk_kernel *k, const tpg_ar_epi *e, uint64_t count, size_t es) {
  if (e->hidden == 0) return;
  arg(k, "epi.bias", e->bias, e->hidden * es);
  arg(k, "epi.residual", e->residual, count * es);
  arg(k, "epi.residual_out", e->residual_out, count * es);
  arg(k, "epi.norm_weight", e->norm_weight, e->hidden * es);
}

static size_t rows_extent(int64_t rows, int64_t ld, int64_t cols, size_t es) {
  if (rows <= 0 || cols <= 0) return 0;
  return (size_t)((rows - 1) * ld + cols) * es;
}

/* Workspaces of the GEMMs run since the last reset, in order. */
#define FK_WS_LOG 1024
static const void *g_ws_log[FK_WS_LOG];
static long g_ws_n;
void fk_ws_record(const void *ws) {
  if (g_ws_n < FK_WS_LOG) g_ws_log[g_ws_n] = ws;
  g_ws_n++;
}
void fk_ws_reset(void) { g_ws_n = 0; }

long tpgfake_gemm_workspaces(void **out, long cap) {
  fk_lock();
  const long n = g_ws_n;
  for (long i = 0; out && i < cap && i < n && i < FK_WS_LOG; i++) out[i] = (void *)g_ws_log[i];
  fk_unlock();
  return n;
}

/* Every GEMM kernel with a workspace keeps counters in its first 256 bytes
 * at least (workspace_zeroed, lib/gemm/problem.h), zero at entry: where a
 * workspace is shared, no sharer may have left them dirty. */
#define FK_WS_COUNTERS 256

static void check_gemm(const fk_kernel *k, const tpg_gemm_args *a, int x_by_map) {
  if (a->m <= 0 || a->n <= 0 || a->k <= 0) fk_violation("kernel %s: shape %d x %d x %d", k->name, a->m, a->n, a->k);
  size_t es = kdt_size(a->dtype), yes = a->epilogue == TPG_EPI_F32_PARTIAL ? 4 : es;
  int wrows = a->epilogue == TPG_EPI_SWIGLU ? 2 * a->n : a->n;
  if (!x_by_map) {
    need(k, "x", a->x, rows_extent(a->m, a->ldx, a->k, es));
    need(k, "w", a->w, rows_extent(wrows, a->ldw, a->k, es));
  }
  need(k, "y", a->y, rows_extent(a->m, a->ldy, a->n, yes));
  arg(k, "bias", a->bias, (size_t)wrows * es);
  if (a->epilogue == TPG_EPI_RESIDUAL) arg(k, "residual", a->residual, rows_extent(a->m, a->ldr, a->n, es));
  arg(k, "workspace", a->workspace, 1);
  fk_ws_record(a->workspace);
  if (a->workspace && fk_check_range((uintptr_t)a->workspace, FK_WS_COUNTERS, "GEMM workspace counters")) {
    const unsigned char *c = a->workspace;
    size_t i = 0;
    while (i < FK_WS_COUNTERS && c[i] == 0) i++;
    if (i < FK_WS_COUNTERS)
      fk_violation("kernel %s: workspace %p byte %zu is 0x%02x at entry: its counters must be zero (a sharer left "
                   "dirt?)", k->name, a->workspace, i, c[i]);
  }
}

/* What fk's cuTensorMapEncodeTiled stores in a map's 128 bytes. */
typedef struct {
  uint64_t magic, base, rank, esize;
  uint64_t dims[5], strides[4];
} fk_tmap;
#define FK_TMAP_MAGIC 0x66616b65746d6170ull /* "faketmap" */
_Static_assert(sizeof(fk_tmap) <= sizeof(CUtensorMap), "fake tensor map fits");

/* `ptr`: the pointer the map must describe (the same field of tpg_gemm_args):
 * a map left behind by a rebind would read or write the old buffer. */
static void check_map(const fk_kernel *k, const char *field, const void *map, const void *ptr) {
  fk_tmap t;
  memcpy(&t, map, sizeof t);
  if (t.magic != FK_TMAP_MAGIC || t.rank < 1 || t.rank > 5) {
    fk_violation("kernel %s argument %s is not a tensor map from cuTensorMapEncodeTiled", k->name, field);
    return;
  }
  if (t.base != (uint64_t)(uintptr_t)ptr)
    fk_violation("kernel %s argument %s maps 0x%llx, the argument block's pointer is %p", k->name, field,
                 (unsigned long long)t.base, ptr);
  size_t last = (size_t)t.dims[0] * t.esize;
  for (uint64_t i = 1; i < t.rank; i++) last += (size_t)(t.dims[i] - 1) * t.strides[i - 1];
  need(k, field, (const void *)(uintptr_t)t.base, last);
}

void fk_tmap_encode(void *map, uint64_t base, uint32_t rank, size_t esize, const cuuint64_t *dims,
                    const cuuint64_t *strides);
void fk_tmap_encode(void *map, uint64_t base, uint32_t rank, size_t esize, const cuuint64_t *dims,
                    const cuuint64_t *strides) {
  fk_tmap t;
  memset(&t, 0, sizeof t);
  t.magic = FK_TMAP_MAGIC;
  t.base = base;
  t.rank = rank;
  t.esize = esize;
  for (uint32_t i = 0; i < rank && i < 5; i++) t.dims[i] = dims[i];
  for (uint32_t i = 0; i + 1 < rank && i < 4; i++) t.strides[i] = strides[i];
  memset(map, 0, sizeof(CUtensorMap));
  memcpy(map, &t, sizeof t);
}

static void run_c_kernel(const fk_node *n, const unsigned char *A) {
  void *p[FK_PARAMS_MAX];
  for (int i = 0; i < n->kern->nparams; i++) p[i] = (void *)(A + n->kern->off[i]);
  n->kern->run(p);
}

static void run_kernel(const fk_node *nd) {
  /* The argument structs need up to 128-byte alignment (CUTLASS's Params
   * block; tensor maps need 64); node copies live anywhere, so read a copy.
   * Under the lock: one is enough. */
  static unsigned char A[FK_ARGS_MAX] __attribute__((aligned(128)));
  memcpy(A, nd->args, sizeof A);
  const fk_node *n = nd;
  const fk_kernel *k = n->kern;
  fk_kernel_runs++;
  if (k->type == FK_K_C) {
    run_c_kernel(n, A);
    return;
  }
  if (!n->grid[0] || !n->grid[1] || !n->grid[2] || !n->block[0] || !n->block[1] || !n->block[2] ||
      (size_t)n->block[0] * n->block[1] * n->block[2] > 1024)
    fk_violation("kernel %s: launch shape grid %ux%ux%u block %ux%ux%u", k->name, n->grid[0], n->grid[1], n->grid[2],
                 n->block[0], n->block[1], n->block[2]);
  switch (k->type) {
    case FK_K_GEMM: check_gemm(k, (const tpg_gemm_args *)A, 0); break;
    case FK_K_GEMM_TMA: {
      const tpg_gemm_tma_args *t = (const tpg_gemm_tma_args *)A;
      fk_tma_gemm_runs++;
      check_map(k, "tx", &t->tx, t->a.x);
      check_map(k, "tw", &t->tw, t->a.w);
      check_map(k, "ty", &t->ty, t->a.y);
      check_gemm(k, &t->a, 0);
      break;
    }
    case FK_K_GEMM_CUTLASS: {
      /* Params are CUTLASS's; what we can hold them to: each tensor map the
       * host found in them (map_off) is one of ours and maps one of the
       * plain view's buffers, within bounds; A, B and D at least; the
       * barrier words (stream-K) lie in the workspace */
      const tpg_gemm_cutlass_args *t = (const tpg_gemm_cutlass_args *)A;
      int maps = 0;
      fk_cutlass_gemm_runs++;
      check_gemm(k, &t->a, 0);
      if (t->params_bytes == 0 || t->params_bytes > TPG_CUTLASS_PARAMS_MAX || t->nmaps > TPG_CUTLASS_MAPS_MAX)
        fk_violation("kernel %s: params_bytes %u, %u maps (an argument block never filled?)", k->name, t->params_bytes,
                     t->nmaps);
      for (uint32_t i = 0; i < t->nmaps && i < TPG_CUTLASS_MAPS_MAX; i++) {
        const size_t off = t->map_off[i];
        fk_tmap m;
        if (off % 64 || off + sizeof(CUtensorMap) > t->params_bytes) {
          fk_violation("kernel %s: map %u at Params + %zu, outside or misaligned", k->name, i, off);
          continue;
        }
        memcpy(&m, t->params + off, sizeof m);
        const void *base = (const void *)(uintptr_t)m.base;
        const char *which = base == t->a.x ? "x" : base == t->a.w ? "w" : base == t->a.y ? "y"
                          : (t->a.residual && base == t->a.residual) ? "residual" : "none of x/w/y/residual";
        ++maps;
        if (m.magic == FK_TMAP_MAGIC && !strncmp(which, "none", 4))
          fk_violation("kernel %s: the tensor map at Params + %zu maps 0x%llx, none of the argument block's x %p, "
                       "w %p, y %p, residual %p (a rebind left it behind?)", k->name, off, (unsigned long long)m.base,
                       t->a.x, t->a.w, t->a.y, t->a.residual);
        else
          check_map(k, which, t->params + off, base);
      }
      if (maps < 3) fk_violation("kernel %s: %d tensor maps in Params, want A, B and D at least", k->name, maps);
      if (t->done) {
        need(k, "done", t->done, 4);
        need(k, "locks", t->locks, (size_t)t->lock_words * 4);
        if ((const void *)t->done != t->a.workspace)
          fk_violation("kernel %s: done counter %p is not the workspace %p", k->name, (void *)t->done, t->a.workspace);
      }
      break;
    }
    case FK_K_AXPBY: {
      const tpg_axpby_args *a = (const tpg_axpby_args *)A;
      size_t es = kdt_size(a->dtype);
      need(k, "y", a->y, a->count * es);
      need(k, "x", a->x, a->count * es);
      break;
    }
    case FK_K_CONCAT: {
      const tpg_concat_args *a = (const tpg_concat_args *)A;
      size_t bytes = (size_t)a->blocks * a->rows * a->cols * (size_t)a->esize;
      need(k, "dst", a->dst, bytes);
      need(k, "src", a->src, bytes);
      break;
    }
    case FK_K_AR_EPI: {
      const tpg_ar_epilogue_args *a = (const tpg_ar_epilogue_args *)A;
      size_t es = kdt_size(a->dtype);
      need(k, "in", a->in, a->count * es);
      need(k, "recv", a->recv, a->count * es);
      check_epi(k, &a->epi, a->count, es);
      break;
    }
    case FK_K_SWIGLU: { /* after cuBLASLt's 16-bit product, in the node's workspace */
      const tpg_swiglu_args *a = (const tpg_swiglu_args *)A;
      const size_t es = kdt_size(a->dtype);
      if (a->n % 4 || a->ldt < 2 * a->n || a->ldt % 4 || a->ldy < a->n || a->ldy % 4)
        fk_violation("kernel %s: n %d, ldt %d, ldy %d (multiples of 4, ldt >= 2n, ldy >= n)", k->name, a->n, a->ldt,
                     a->ldy);
      else if (a->t && a->y && a->m > 0 && a->n > 0 &&
               fk_check_range((uintptr_t)a->t, rows_extent(a->m, a->ldt, 2 * (int64_t)a->n, es), "tpg_lt_swiglu: t") &&
               fk_check_range((uintptr_t)a->y, rows_extent(a->m, a->ldy, a->n, es), "tpg_lt_swiglu: y") &&
               (!a->bias || fk_check_range((uintptr_t)a->bias, 2 * (size_t)a->n * es, "tpg_lt_swiglu: bias")))
        fk_lt_swiglu(a); /* computed, so the cuBLASLt family's SwiGLU nodes can be checked */
      else
        fk_violation("kernel %s: t %p, y %p, m %d, n %d", k->name, (const void *)a->t, a->y, a->m, a->n);
      break;
    }
    case FK_K_ALLREDUCE: {
      const tpg_allreduce_args *a = (const tpg_allreduce_args *)A;
      size_t es = kdt_size(a->dtype);
      need(k, "in", a->in, a->count * es);
      need(k, "out", a->out, a->count * es);
      if (a->nranks < 2 || a->nranks > TPG_AR_MAX_RANKS || a->rank < 0 || a->rank >= a->nranks)
        fk_violation("kernel %s: rank %d of %d", k->name, a->rank, a->nranks);
      else
        for (int q = 0; q < a->nranks; q++) {
          need(k, "staging[q]", a->staging[q], 2 * a->slot_bytes);
          need(k, "flags[q]", a->flags[q], TPG_AR_MAX_RANKS * TPG_AR_MAX_BLOCKS * 4);
          if (strstr(k->name, "twoshot")) need(k, "gather[q]", a->gather[q], 2 * a->slot_bytes);
        }
      need(k, "epochs", a->epochs, TPG_AR_EPOCHS * 4);
      need(k, "status", a->status, 4);
      check_epi(k, &a->epi, a->count, es);
      break;
    }
    default: break;
  }
}

/* ---- fills and copies ---- */

static void run_memset(const fk_node *n) {
  size_t h = n->height ? n->height : 1;
  size_t extent = (h - 1) * n->pitch + n->width * n->esize;
  if (n->esize != 1 && n->esize != 2 && n->esize != 4) {
    fk_violation("memset: element size %u", n->esize);
    return;
  }
  if (!fk_check_range(n->dst, extent, "memset dst")) return;
  for (size_t r = 0; r < h; r++) {
    unsigned char *row = (unsigned char *)(n->dst + r * n->pitch);
    for (size_t i = 0; i < n->width; i++) memcpy(row + i * n->esize, &n->value, n->esize);
  }
}

static void run_memcpy(const fk_node *n) {
  size_t h = n->height ? n->height : 1;
  size_t dext = (h - 1) * n->pitch + n->width, sext = (h - 1) * n->spitch + n->width;
  int ok = fk_check_range(n->dst, dext, "memcpy dst");
  ok &= fk_check_range(n->src, sext, "memcpy src");
  if (!ok) return;
  for (size_t r = 0; r < h; r++)
    memmove((void *)(n->dst + r * n->pitch), (const void *)(n->src + r * n->spitch), n->width);
}

/* ---- streams ---- */

long fk_counters[16];

static void run_now(const fk_node *const *nodes, int n);

/* A WHILE whose body never clears its condition would hang a GPU; here it
 * is a violation after this many rounds. */
#define FK_WHILE_MAX 100000

/* A conditional node: the body its condition picks, run at once (a body
 * holds kernels, fills and copies; CUDA refuses collectives and host nodes
 * there, tpgraph refuses them earlier). */
static void run_cond(const fk_node *n) {
  unsigned v;
  if (!fk_cond_value(n->cond, &v)) return;
  if (n->ctype == CU_GRAPH_COND_TYPE_IF) {
    int b = v ? 0 : n->nbodies == 2 ? 1 : -1;
    if (b >= 0) run_now((const fk_node *const *)n->bodies[b]->nodes, n->bodies[b]->n);
  } else if (n->ctype == CU_GRAPH_COND_TYPE_SWITCH) {
    if (v < (unsigned)n->nbodies) run_now((const fk_node *const *)n->bodies[v]->nodes, n->bodies[v]->n);
  } else {
    for (long k = 0; v; k++) {
      if (k == FK_WHILE_MAX) {
        fk_violation("a WHILE node ran its body %d times and its condition is still set", FK_WHILE_MAX);
        return;
      }
      run_now((const fk_node *const *)n->bodies[0]->nodes, n->bodies[0]->n);
      if (!fk_cond_value(n->cond, &v)) return;
    }
  }
}

static int run_op(fk_op *op) {
  switch (op->n.type) {
    case FK_N_HOST:
      /* Under the lock: a host function may not call the driver (CUDA's rule too). */
      fk_counters[TPGFAKE_C_HOST]++;
      op->n.hostfn(op->n.hostdata);
      return 1;
    case FK_N_EVREC: fk_counters[TPGFAKE_C_EVREC]++; return 1;
    case FK_N_EVWAIT: fk_counters[TPGFAKE_C_EVWAIT]++; return 1;
    case FK_N_KERNEL: run_kernel(&op->n); return 1;
    case FK_N_MEMSET: run_memset(&op->n); return 1;
    case FK_N_MEMCPY: run_memcpy(&op->n); return 1;
    case FK_N_COLL: return fk_coll_run(op);
    case FK_N_COND: run_cond(&op->n); return 1;
    case FK_N_EVENT:
      if (op->n.ev && op->n.ev->gen_done < op->n.ev_gen) op->n.ev->gen_done = op->n.ev_gen;
      return 1;
    default: return 1;
  }
}

static fk_stream **g_streams; /* every stream with queued work */
static long g_nstreams, g_capstreams;

static void remember(fk_stream *s) {
  for (long i = 0; i < g_nstreams; i++)
    if (g_streams[i] == s) return;
  if (g_nstreams == g_capstreams) {
    long cap = g_capstreams ? 2 * g_capstreams : 16;
    fk_stream **v = realloc(g_streams, (size_t)cap * sizeof *v);
    if (!v) abort();
    g_streams = v;
    g_capstreams = cap;
  }
  g_streams[g_nstreams++] = s;
}

static void forget(fk_stream *s) {
  for (long i = 0; i < g_nstreams; i++)
    if (g_streams[i] == s) {
      g_streams[i] = g_streams[--g_nstreams];
      return;
    }
}

long fk_pending_ops(void) {
  long n = 0;
  for (long i = 0; i < g_nstreams; i++)
    for (fk_op *o = g_streams[i]->head; o; o = o->next) n++;
  return n;
}

int fk_stream_progress(fk_stream *s) {
  while (s->head) {
    fk_op *op = s->head;
    if (!run_op(op)) return 0;
    s->head = op->next;
    if (!s->head) s->tail = NULL;
    if (op->n.type == FK_N_COLL) fk_clique_ref(op->n.cq, -1);
    if (op->n.type == FK_N_COND) fk_cond_parts_free(&op->n);
    free(op);
  }
  forget(s);
  return 1;
}

void fk_stream_drop(fk_stream *s) {
  while (s->head) {
    fk_op *op = s->head;
    s->head = op->next;
    if (op->n.type == FK_N_COLL) fk_clique_ref(op->n.cq, -1);
    if (op->n.type == FK_N_COND) fk_cond_parts_free(&op->n);
    /* Records behind dropped work count as reached: nothing will run after them. */
    if (op->n.type == FK_N_EVENT && op->n.ev && op->n.ev->gen_done < op->n.ev_gen) op->n.ev->gen_done = op->n.ev_gen;
    free(op);
  }
  s->tail = NULL;
  forget(s);
}

void fk_event_forget(fk_event *e) {
  for (long i = 0; i < g_nstreams; i++)
    for (fk_op *o = g_streams[i]->head; o; o = o->next)
      if (o->n.type == FK_N_EVENT && o->n.ev == e) o->n.ev = NULL;
}

CUresult fk_stream_enqueue(fk_stream *s, const fk_node *n) {
  if (s->capture) {
    if (s->cap_error) return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
    if (n->type == FK_N_EVENT) {
      s->cap_error = 1;
      return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    }
    fk_node *c = fk_node_clone(n);
    if (!c) return CUDA_ERROR_OUT_OF_MEMORY;
    CUgraphNode dep = s->cap_last >= 0 ? (CUgraphNode)s->capture->nodes[s->cap_last] : NULL;
    CUresult r = fk_graph_add(s->capture, c, dep ? &dep : NULL, dep ? 1 : 0);
    if (r != CUDA_SUCCESS) {
      fk_node_free(c);
      return r;
    }
    s->cap_last = s->capture->n - 1;
    return CUDA_SUCCESS;
  }
  fk_op *op = malloc(sizeof *op);
  if (!op) return CUDA_ERROR_OUT_OF_MEMORY;
  memset(op, 0, sizeof *op);
  memcpy(&op->n, n, sizeof *n);
  op->n.child = NULL;
  op->seq = -1;
  /* Its own bodies: an exec update or destroy after the launch must not
   * change or free what this launch runs. */
  if (n->type == FK_N_COND && fk_cond_parts_copy(&op->n, n) != 0) {
    free(op);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  if (n->type == FK_N_COLL) fk_clique_ref(n->cq, +1);
  if (s->tail) s->tail->next = op;
  else s->head = op;
  s->tail = op;
  remember(s);
  fk_stream_progress(s);
  return CUDA_SUCCESS;
}

static CUresult launch_graph(const fk_node *const *nodes, int n, fk_stream *s) {
  for (int i = 0; i < n; i++) {
    const fk_node *x = nodes[i];
    CUresult r = CUDA_SUCCESS;
    if (x->type == FK_N_CHILD) r = launch_graph((const fk_node *const *)x->child->nodes, x->child->n, s);
    else if (x->type != FK_N_EMPTY) r = fk_stream_enqueue(s, x);
    if (r != CUDA_SUCCESS) return r;
  }
  return CUDA_SUCCESS;
}

static void run_now(const fk_node *const *nodes, int n) {
  for (int i = 0; i < n; i++) {
    if (nodes[i]->type == FK_N_CHILD) {
      run_now((const fk_node *const *)nodes[i]->child->nodes, nodes[i]->child->n);
      continue;
    }
    if (nodes[i]->type == FK_N_COLL) {
      fk_violation("a graph with a collective run outside a stream");
      continue;
    }
    fk_op op;
    memset(&op, 0, sizeof op);
    memcpy(&op.n, nodes[i], sizeof op.n);
    run_op(&op);
  }
}

void fk_graph_run_now(const fk_graph *g) {
  fk_cond_launch_reset((const fk_node *const *)g->nodes, g->n);
  run_now((const fk_node *const *)g->nodes, g->n);
}

/* The conditions are reset when the launch is enqueued, not when the stream
 * reaches it: the same unless work ahead waits for a collective. */
CUresult fk_exec_launch(fk_exec *x, fk_stream *s) {
  fk_cond_launch_reset((const fk_node *const *)x->nodes, x->n);
  return launch_graph((const fk_node *const *)x->nodes, x->n, s);
}

fk_stream *fk_stream_get(CUstream h, CUresult *err) {
  *err = CUDA_SUCCESS;
  if (h == NULL || h == CU_STREAM_LEGACY || h == CU_STREAM_PER_THREAD) {
    fk_ctx *c = fk_current();
    if (!c) {
      fk_violation("work on the default stream without a current context");
      *err = CUDA_ERROR_INVALID_CONTEXT;
      return NULL;
    }
    if (!c->null_stream) {
      c->null_stream = calloc(1, sizeof *c->null_stream);
      if (!c->null_stream) {
        *err = CUDA_ERROR_OUT_OF_MEMORY;
        return NULL;
      }
      c->null_stream->ctx = c;
      c->null_stream->cap_last = -1;
    }
    return c->null_stream;
  }
  if (!fk_live_has(FK_STREAM, h)) {
    fk_violation("stream %p is not a live stream (destroyed, or never created)", (void *)h);
    *err = CUDA_ERROR_INVALID_HANDLE;
    return NULL;
  }
  return (fk_stream *)h;
}
