/* fake_cond.c - conditional nodes in the stand-in driver (CUDA 12.3+):
 * condition handles (cuGraphConditionalHandleCreate: a default value, reset
 * at each launch or not), conditional nodes (cuGraphAddNode: IF with one or
 * two bodies, WHILE, SWITCH) whose bodies are graphs the node owns, and the
 * exec's copies of body nodes for the exec setters.
 *
 * A handle is the address of its condition record, a live object of kind
 * FK_COND: a stale or made-up handle is a violation wherever it appears (the
 * node, the kernel that sets it). The graph it was made on holds one
 * reference and every copy of a node using it (template, exec, clone, a
 * queued launch) another, so an exec keeps its conditions after its
 * template graph is destroyed, as CUDA's does; the last reference frees it,
 * and anything still live at the end shows in tpgfake_live.
 *
 * The bodies run in fake_exec.c (run_cond); the C kernels that set a
 * condition are fake_kit.c's "cond_set" and "cond_countdown".
 */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>

#include "tests/fake/fake_entry.h"

typedef struct fk_cond {
  const fk_graph *owner; /* the graph it was made on, NULL once destroyed */
  unsigned value, dflt;
  int reset;             /* CU_GRAPH_COND_ASSIGN_DEFAULT */
  int refs;
  int node;              /* a conditional node uses it (CUDA: one node per handle) */
} fk_cond;

/* Every live condition, for fk_cond_graph_gone. */
static fk_cond **g_conds;
static int g_nconds, g_capconds;

static fk_cond *cond_get(unsigned long long h, const char *who) {
  fk_cond *c = (fk_cond *)(uintptr_t)h;
  if (!h || !fk_live_has(FK_COND, c)) {
    fk_violation("%s: condition handle %#llx is not a live handle (cuGraphConditionalHandleCreate)", who, h);
    return NULL;
  }
  return c;
}

static void cond_free(fk_cond *c) {
  for (int i = 0; i < g_nconds; i++)
    if (g_conds[i] == c) {
      g_conds[i] = g_conds[--g_nconds];
      break;
    }
  fk_live_del(FK_COND, c);
  free(c);
}

void fk_cond_ref(unsigned long long h, int delta) {
  fk_cond *c = cond_get(h, "a conditional node");
  if (!c) return;
  c->refs += delta;
  if (c->refs <= 0) cond_free(c);
}

int fk_cond_value(unsigned long long h, unsigned *v) {
  const fk_cond *c = cond_get(h, "a conditional node run");
  if (!c) return 0;
  *v = c->value;
  return 1;
}

void fk_cond_set(unsigned long long h, unsigned v, const char *who) {
  fk_cond *c = cond_get(h, who);
  if (c) c->value = v;
}

static void reset_graph(const fk_graph *g) { fk_cond_launch_reset((const fk_node *const *)g->nodes, g->n); }

void fk_cond_launch_reset(const fk_node *const *nodes, int n) {
  for (int i = 0; i < n; i++) {
    const fk_node *x = nodes[i];
    if (x->type == FK_N_CHILD) reset_graph(x->child);
    if (x->type != FK_N_COND) continue;
    fk_cond *c = (fk_cond *)(uintptr_t)x->cond;
    if (fk_live_has(FK_COND, c) && c->reset) c->value = c->dflt;
    for (int b = 0; b < x->nbodies; b++) reset_graph(x->bodies[b]);
  }
}

void fk_cond_graph_gone(const fk_graph *g) {
  for (int i = g_nconds - 1; i >= 0; i--) {
    if (i >= g_nconds || g_conds[i]->owner != g) continue;
    fk_cond *c = g_conds[i];
    c->owner = NULL;
    if (--c->refs <= 0) cond_free(c);
  }
}

/* node in the bodies of template conditional node t, whose exec copy is e
 * (same shape: both come from the template at instantiation or update). */
static fk_node *body_match(const fk_node *t, fk_node *e, const void *node) {
  for (int b = 0; b < t->nbodies && b < e->nbodies; b++) {
    const fk_graph *tb = t->bodies[b];
    fk_graph *eb = e->bodies[b];
    for (int j = 0; j < tb->n && j < eb->n; j++) {
      if ((const void *)tb->nodes[j] == node) return eb->nodes[j];
      if (tb->nodes[j]->type == FK_N_COND && eb->nodes[j]->type == FK_N_COND) {
        fk_node *m = body_match(tb->nodes[j], eb->nodes[j], node);
        if (m) return m;
      }
    }
  }
  return NULL;
}

fk_node *fk_cond_exec_node(const fk_exec *x, const void *node) {
  for (int i = 0; i < x->n; i++) {
    /* The template node is read only while its graph is live. */
    if (x->nodes[i]->type != FK_N_COND || !fk_node_live(x->orig[i])) continue;
    const fk_node *t = x->orig[i];
    if (t->type != FK_N_COND) continue;
    fk_node *m = body_match(t, x->nodes[i], node);
    if (m) return m;
  }
  return NULL;
}

/* ---- entry points ---- */

CUresult fk_cuGraphConditionalHandleCreate(CUgraphConditionalHandle *out, CUgraph h, CUcontext ctx, unsigned dflt,
                                           unsigned flags) {
  ENTER("cuGraphConditionalHandleCreate");
  if (!out) FAIL(CUDA_ERROR_INVALID_VALUE);
  GRAPH(g, h);
  if (!fk_ctx_of(ctx)) {
    fk_violation("cuGraphConditionalHandleCreate: context %p is not a device's context", (void *)ctx);
    FAIL(CUDA_ERROR_INVALID_CONTEXT);
  }
  if (flags & ~(unsigned)CU_GRAPH_COND_ASSIGN_DEFAULT) FAIL(CUDA_ERROR_INVALID_VALUE);
  if (g_nconds == g_capconds) {
    int cap = g_capconds ? 2 * g_capconds : 16;
    fk_cond **v = realloc(g_conds, (size_t)cap * sizeof *v);
    if (!v) FAIL(CUDA_ERROR_OUT_OF_MEMORY);
    g_conds = v;
    g_capconds = cap;
  }
  fk_cond *c = calloc(1, sizeof *c);
  if (!c) FAIL(CUDA_ERROR_OUT_OF_MEMORY);
  c->owner = g;
  c->value = c->dflt = dflt;
  c->reset = (flags & CU_GRAPH_COND_ASSIGN_DEFAULT) != 0;
  c->refs = 1;
  g_conds[g_nconds++] = c;
  fk_live_add(FK_COND, c);
  *out = (CUgraphConditionalHandle)(uintptr_t)c;
  LEAVE
}

/* Only conditional nodes: tpgraph makes every other kind with its own call. */
CUresult fk_cuGraphAddNode(CUgraphNode *out, CUgraph h, const CUgraphNode *deps, const CUgraphEdgeData *ed, size_t nd,
                           CUgraphNodeParams *np) {
  (void)ed; /* programmatic edges are not modelled: a stream runs in order */
  ENTER("cuGraphAddNode");
  if (!out || !np) FAIL(CUDA_ERROR_INVALID_VALUE);
  GRAPH(g, h);
  if (np->type != CU_GRAPH_NODE_TYPE_CONDITIONAL) {
    fk_violation("cuGraphAddNode: node type %d: the fake models conditional nodes only", (int)np->type);
    FAIL(CUDA_ERROR_NOT_SUPPORTED);
  }
  CUDA_CONDITIONAL_NODE_PARAMS *cp = &np->conditional;
  fk_cond *c = cond_get(cp->handle, "cuGraphAddNode");
  if (!c) FAIL(CUDA_ERROR_INVALID_VALUE);
  if (!c->owner || !fk_graph_within(c->owner, g)) {
    fk_violation("cuGraphAddNode: condition %#llx belongs to another graph", (unsigned long long)cp->handle);
    FAIL(CUDA_ERROR_INVALID_VALUE);
  }
  if (c->node) {
    fk_violation("cuGraphAddNode: condition %#llx already drives a conditional node", (unsigned long long)cp->handle);
    FAIL(CUDA_ERROR_INVALID_VALUE);
  }
  if (!fk_ctx_of(cp->ctx)) {
    fk_violation("cuGraphAddNode: context %p is not a device's context", (void *)cp->ctx);
    FAIL(CUDA_ERROR_INVALID_CONTEXT);
  }
  unsigned size = cp->size;
  int ok = cp->type == CU_GRAPH_COND_TYPE_IF       ? size == 1 || size == 2
           : cp->type == CU_GRAPH_COND_TYPE_WHILE  ? size == 1
           : cp->type == CU_GRAPH_COND_TYPE_SWITCH ? size >= 1
                                                   : 0;
  if (!ok) FAIL(CUDA_ERROR_INVALID_VALUE);
  fk_node *n = calloc(1, sizeof *n);
  if (!n) FAIL(CUDA_ERROR_OUT_OF_MEMORY);
  n->type = FK_N_COND;
  n->ctype = (int)cp->type;
  n->cond = cp->handle;
  n->bodies = calloc(size, sizeof *n->bodies);
  c->refs++; /* the node's; fk_node_free drops it */
  if (!n->bodies) {
    fk_node_free(n);
    FAIL(CUDA_ERROR_OUT_OF_MEMORY);
  }
  for (unsigned b = 0; b < size; b++, n->nbodies++)
    if (!(n->bodies[b] = fk_graph_new())) {
      fk_node_free(n);
      FAIL(CUDA_ERROR_OUT_OF_MEMORY);
    }
  r_ = fk_graph_add(g, n, deps, nd);
  if (r_ != CUDA_SUCCESS) {
    fk_node_free(n);
    goto out;
  }
  c->node = 1;
  /* The bodies are the node's, for its life (CUDA's rule too). */
  cp->phGraph_out = (CUgraph *)n->bodies;
  *out = (CUgraphNode)n;
  LEAVE
}
