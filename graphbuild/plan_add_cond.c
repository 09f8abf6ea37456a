/* plan_add_cond.c - the public builders of conditional nodes: conditions,
 * the conditional node itself, and the open body that later nodes go into.
 *
 * A body is a scope of the same plan, not a plan of its own: its nodes use
 * the plan's slots, and every builder (layers included) adds into whichever
 * body is open, because tpg_plan_push_node stamps each new node with the
 * plan's scope. The conditional kind (nodes/conditional.c) checks the node.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdlib.h>
#include <string.h>

#include "graphbuild/nodes/kind.h"

tpg_status tpg_plan_add_cond(tpg_plan *p, unsigned default_value, int reset, tpg_cond *out) {
  tpg_err_clear();
  TPG_TRY(tpg_plan_check(p, __func__, "plan"));
  TPG_CHECK_ARG(out != NULL, "out is NULL: expected a tpg_cond to set");
  *out = 0;
  TPG_CHECK_ARG(reset == 0 || reset == 1, "reset is %d: expected 0 or 1", reset);
  TPG_CHECK_ARG(p->nconds < 4096, "plan already has %d conditions (the limit)", p->nconds);
  if (p->nconds == p->capconds) {
    int cap = p->capconds ? 2 * p->capconds : 4;
    struct tpg_cond_rec *c = realloc(p->conds, (size_t)cap * sizeof *c);
    if (!c) return TPG_FAIL(TPG_ERROR_OUT_OF_MEMORY, "out of host memory");
    p->conds = c;
    p->capconds = cap;
  }
  p->conds[p->nconds] = (struct tpg_cond_rec){default_value, reset, -1};
  *out = (tpg_cond)++p->nconds;
  return TPG_SUCCESS;
}

static tpg_status add_conditional(const char *fn, tpg_plan *p, const tpg_conditional_desc *d, const tpg_node *deps,
                                  int ndeps, tpg_node *node) {
  TPG_TRY(tpg_plan_check(p, fn, "plan"));
  TPG_TRY(tpg_plan_check_deps(p, fn, deps, ndeps));
  if (!d) return tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn, "desc is NULL: expected a tpg_conditional_desc");
  if (d->size != sizeof(tpg_conditional_desc))
    return tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn,
                   "desc->size is %zu: expected sizeof(tpg_conditional_desc) = %zu (TPG_CONDITIONAL_DESC_INIT)",
                   d->size, sizeof(tpg_conditional_desc));
  tpg_node_rec rec;
  memset(&rec, 0, sizeof rec);
  rec.kind = TPG_NK_CONDITIONAL;
  rec.u.cond.type = d->type;
  rec.u.cond.cond = d->cond;
  rec.u.cond.nbodies = d->nbodies ? d->nbodies : 1;
  TPG_TRY(tpg_kind(rec.kind)->check(p, fn, &rec));
  TPG_TRY(tpg_plan_push_node(p, fn, &rec, deps, ndeps, node));
  p->conds[d->cond - 1].node = p->nnodes - 1;
  return TPG_SUCCESS;
}

tpg_status tpg_plan_add_conditional(tpg_plan *p, const tpg_conditional_desc *d, const tpg_node *deps, int ndeps,
                                    tpg_node *out) {
  tpg_err_clear();
  tpg_node node = 0;
  tpg_status st = add_conditional(__func__, p, d, deps, ndeps, &node);
  if (out) *out = st == TPG_SUCCESS ? node : 0; /* last: out may alias deps[] */
  return st;
}

tpg_status tpg_plan_body_begin(tpg_plan *p, tpg_node node, int body) {
  tpg_err_clear();
  TPG_TRY(tpg_plan_check(p, __func__, "plan"));
  int i = tpg_plan_node_index(p, node);
  TPG_CHECK_ARG(i >= 0, "node (0x%llx) is not a node of this plan", (unsigned long long)node);
  const tpg_node_rec *n = &p->nodes[i];
  char lb[160];
  TPG_CHECK_ARG(n->kind == TPG_NK_CONDITIONAL, "node %s is not a conditional node (tpg_plan_add_conditional)",
                tpg_node_label(p, i, lb, sizeof lb));
  TPG_CHECK_ARG(n->parent == p->scope && (p->scope < 0 || n->body == p->scope_body),
                "node %s is not in the open scope: open the body that holds it first, or close the one open "
                "(tpg_plan_body_end)",
                tpg_node_label(p, i, lb, sizeof lb));
  TPG_CHECK_ARG(body >= 0 && body < n->u.cond.nbodies, "body is %d: node %s has bodies 0..%d", body,
                tpg_node_label(p, i, lb, sizeof lb), n->u.cond.nbodies - 1);
  p->scope = i;
  p->scope_body = body;
  return TPG_SUCCESS;
}

tpg_status tpg_plan_body_end(tpg_plan *p) {
  tpg_err_clear();
  TPG_TRY(tpg_plan_check(p, __func__, "plan"));
  TPG_CHECK_ARG(p->scope >= 0, "no body is open (tpg_plan_body_begin)");
  const tpg_node_rec *n = &p->nodes[p->scope];
  p->scope = n->parent;
  p->scope_body = n->body;
  return TPG_SUCCESS;
}
