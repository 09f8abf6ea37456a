/* collective.c - the collective node kind: all-reduce, all-gather,
 * reduce-scatter over the graph's communicator.
 *
 * An all-reduce our one-shot or two-shot kernel can serve is one kernel node
 * (its epilogue fused). Everything else goes to NCCL, which only enqueues
 * onto streams: the call is stream-captured alone on the graph's private
 * stream into a child graph (tpg_capture_child) and added as a child-graph
 * node; an NCCL all-reduce with an epilogue is followed by the epilogue's
 * own kernel node, the node later nodes depend on. A rebind that moves
 * NCCL's send or recv re-captures the child and swaps it in with
 * cuGraphExecChildGraphNodeSetParams (NCCL does not support editing its own
 * kernel nodes); a rebind of the epilogue's views alone is a kernel-node
 * update.
 *
 * Collectives are communicator operations: every rank must run them in the
 * same order with the same shapes, so materialize chains them (kind->collective)
 * and graph creation compares a fingerprint of them across ranks first.
 *
 * One rank (a graph without a comm, or with a one-rank comm: TP = 1) has
 * nobody to exchange with, so a collective is the identity on this rank's
 * data and what is left of it is data movement and the epilogue, never NCCL
 * (its one-rank "all-reduce" is a copy in a child graph, which a conditional
 * body cannot hold):
 *   - an all-reduce with an epilogue: the epilogue's kernel alone, reading
 *     send and writing recv (in place or not);
 *   - in place (send and recv the same range) with no epilogue: no CUDA node
 *     at all; the node's dependents wait for its dependencies instead
 *     (materialize.c forwards them);
 *   - otherwise (send -> recv): a memcpy node.
 * Such a node is in no collective chain and counts as a kernel or memcpy
 * node in tpg_graph_info, not as a collective.
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graphbuild/nodes/collective_select.h"
#include "graphbuild/nodes/common.h"

/* ---- plan time ---------------------------------------------------------- */

static const char *coll_name(tpg_collective c) {
  return c == TPG_ALL_REDUCE ? "all_reduce" : c == TPG_ALL_GATHER ? "all_gather"
                            : c == TPG_REDUCE_SCATTER ? "reduce_scatter" : "?";
}

/* The all-reduce epilogue's rules (tpgraph.h, tpg_collective_desc). */
static tpg_status check_epilogue(const tpg_plan *p, const char *fn, const tpg_collective_desc *d) {
  const int any = d->bias.slot || d->residual.slot || d->residual_out.slot || d->norm_weight.slot;
  if (!any) {
    if (d->hidden != 0)
      return tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn,
                     "desc->hidden is %zu but no epilogue view (bias, residual, residual_out, norm_weight) is set: "
                     "expected 0",
                     d->hidden);
    return TPG_SUCCESS;
  }
  const char *which = d->bias.slot ? "desc->bias" : d->residual.slot ? "desc->residual"
                      : d->residual_out.slot ? "desc->residual_out" : "desc->norm_weight";
  if (d->kind != TPG_ALL_REDUCE)
    return tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn, "%s is set for a kind-%d collective: only all-reduces have an "
                   "epilogue", which, (int)d->kind);
  if (d->hidden == 0)
    return tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn, "desc->hidden is 0 but %s is set: the epilogue needs the row length",
                   which);
  if (d->hidden % 8 != 0)
    return tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn, "desc->hidden is %zu: expected a multiple of 8 (16-byte rows)",
                   d->hidden);
  if (d->count % d->hidden != 0)
    return tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn, "desc->hidden %zu does not divide desc->count %zu: expected whole rows",
                   d->hidden, d->count);
  const tpg_dtype dt = p->slots[d->send.slot - 1].dtype;
  /* Our kernels and the epilogue node work on 16-byte vectors. */
  TPG_TRY(tpg_view_check(p, fn, "desc->send", d->send, d->count, 16));
  TPG_TRY(tpg_view_check(p, fn, "desc->recv", d->recv, d->count, 16));
  struct { const char *name; tpg_view v; size_t n; } ev[4] = {
      {"desc->bias", d->bias, d->hidden},
      {"desc->residual", d->residual, d->count},
      {"desc->residual_out", d->residual_out, d->count},
      {"desc->norm_weight", d->norm_weight, d->hidden},
  };
  for (int k = 0; k < 4; k++) {
    if (ev[k].v.slot == TPG_SLOT_NONE) continue;
    TPG_TRY(tpg_plan_check_view(p, fn, ev[k].name, ev[k].v, ev[k].n, 16, dt));
  }
  if (d->norm_weight.slot && !(d->norm_eps >= 0.0f && isfinite(d->norm_eps)))
    return tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn, "desc->norm_eps is %g: expected a finite value >= 0",
                   (double)d->norm_eps);
  /* Aliasing: what one element's thread reads before it writes is allowed
   * (the in-place residual, recv == send); anything else would race between
   * blocks, or (recv vs residual) break the NCCL path, which writes the sum
   * into recv before its epilogue node reads residual. */
  const size_t n = d->count, hd = d->hidden;
  if (d->residual_out.slot) {
    const int same = d->residual_out.slot == d->residual.slot && d->residual_out.offset == d->residual.offset;
    if (!same && tpg_views_overlap(d->residual_out, n, d->residual, n))
      return tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn, "desc->residual_out overlaps desc->residual in slot \"%s\": "
                     "expected the same view (in place) or disjoint ranges", p->slots[d->residual.slot - 1].name);
    const struct { const char *name; tpg_view v; size_t n; } o[4] = {
        {"desc->send", d->send, n}, {"desc->recv", d->recv, n}, {"desc->bias", d->bias, hd},
        {"desc->norm_weight", d->norm_weight, hd}};
    for (int k = 0; k < 4; k++)
      if (tpg_views_overlap(d->residual_out, n, o[k].v, o[k].n))
        return tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn, "desc->residual_out overlaps %s in slot \"%s\": expected "
                       "disjoint ranges", o[k].name, p->slots[o[k].v.slot - 1].name);
  }
  const struct { const char *name; tpg_view v; size_t n; } r[3] = {
      {"desc->residual", d->residual, n}, {"desc->bias", d->bias, hd}, {"desc->norm_weight", d->norm_weight, hd}};
  for (int k = 0; k < 3; k++)
    if (tpg_views_overlap(d->recv, n, r[k].v, r[k].n))
      return tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn, "desc->recv overlaps %s in slot \"%s\": expected disjoint ranges",
                     r[k].name, p->slots[r[k].v.slot - 1].name);
  return TPG_SUCCESS;
}

static tpg_status check(const tpg_plan *p, const char *fn, const tpg_node_rec *rec) {
  const tpg_collective_desc *d = &rec->u.coll;
#define CHECK(cond, ...) \
  do {                   \
    if (!(cond)) return tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn, __VA_ARGS__); \
  } while (0)
  CHECK(d->kind >= 0 && d->kind < TPG_COLLECTIVE_COUNT,
        "desc->kind is %d: expected TPG_ALL_REDUCE, TPG_ALL_GATHER or TPG_REDUCE_SCATTER", (int)d->kind);
  CHECK(d->count > 0, "desc->count is 0: expected >= 1 element");
  CHECK(d->algo == TPG_ALGO_AUTO || d->algo == TPG_ALGO_NCCL || d->algo == TPG_ALGO_ONESHOT ||
            d->algo == TPG_ALGO_TWOSHOT,
        "desc->algo is %d: expected TPG_ALGO_AUTO, TPG_ALGO_NCCL, TPG_ALGO_ONESHOT or TPG_ALGO_TWOSHOT", (int)d->algo);
  CHECK((d->algo != TPG_ALGO_ONESHOT && d->algo != TPG_ALGO_TWOSHOT) || d->kind == TPG_ALL_REDUCE,
        "desc->algo is %s for a kind-%d collective: only all-reduces have it",
        d->algo == TPG_ALGO_ONESHOT ? "TPG_ALGO_ONESHOT" : "TPG_ALGO_TWOSHOT", (int)d->kind);
#undef CHECK
  /* Sizes that depend on the rank count are checked again with the comm. */
  TPG_TRY(tpg_view_check(p, fn, "desc->send", d->send, d->count, 1));
  TPG_TRY(tpg_view_check(p, fn, "desc->recv", d->recv, d->count, 1));
  TPG_TRY(tpg_view_check_device(p, fn, "desc->send", d->send));
  TPG_TRY(tpg_view_check_device(p, fn, "desc->recv", d->recv));
  TPG_TRY(tpg_view_check_dtype(p, fn, "desc->recv", d->recv, p->slots[d->send.slot - 1].dtype));
  /* An all-reduce runs in place (recv == send) or between disjoint ranges;
   * a partial overlap would have blocks read what others already wrote.
   * (All-gather and reduce-scatter have NCCL's own in-place layouts, in
   * which send is a rank's block of recv.) */
  if (d->kind == TPG_ALL_REDUCE && tpg_views_overlap(d->send, d->count, d->recv, d->count) &&
      d->send.offset != d->recv.offset)
    return tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn,
                   "desc->send and desc->recv partly overlap in slot \"%s\": expected the same range (in place) or "
                   "disjoint ranges", p->slots[d->send.slot - 1].name);
  return check_epilogue(p, fn, d);
}

/* A conditional body holds no NCCL child graph (its capture carries nodes
 * CUDA refuses there): only an all-reduce, which our kernels can run. */
static tpg_status in_body(const tpg_plan *p, const char *fn, const tpg_node_rec *n, const char *parent) {
  (void)p;
  const tpg_collective_desc *d = &n->u.coll;
  if (d->kind != TPG_ALL_REDUCE)
    return tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn,
                   "desc->kind is %s in the open body of conditional node %s: only an all-reduce may sit in a "
                   "conditional body (tpgraph's kernels run it; NCCL's child graphs are not allowed there)",
                   coll_name(d->kind), parent);
  if (d->algo == TPG_ALGO_NCCL)
    return tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn,
                   "desc->algo is TPG_ALGO_NCCL in the open body of conditional node %s: NCCL's child graphs are "
                   "not allowed in a conditional body; use TPG_ALGO_AUTO, _ONESHOT or _TWOSHOT",
                   parent);
  return TPG_SUCCESS;
}

static int views(const tpg_node_rec *n, tpg_view_use *v) {
  const tpg_collective_desc *d = &n->u.coll;
  int k = 0;
  v[k++] = (tpg_view_use){d->send, d->count, 0};
  v[k++] = (tpg_view_use){d->recv, d->count, 1};
  if (d->bias.slot) v[k++] = (tpg_view_use){d->bias, d->hidden, 0};
  if (d->residual.slot) v[k++] = (tpg_view_use){d->residual, d->count, 0};
  if (d->residual_out.slot) v[k++] = (tpg_view_use){d->residual_out, d->count, 1};
  if (d->norm_weight.slot) v[k++] = (tpg_view_use){d->norm_weight, d->hidden, 0};
  return k;
}

static void label(const tpg_node_rec *n, int idx, char *buf, size_t cap) {
  snprintf(buf, cap, "%s#%d", coll_name(n->u.coll.kind), idx);
}

static void dot(tpg_sbuf *s, const tpg_plan *p, const tpg_node_rec *n) {
  const tpg_collective_desc *d = &n->u.coll;
  /* What the plan knows: AUTO is decided at tpg_graph_create (size, ranks,
   * peer access), where tpg_graph_write_dot shows the outcome. */
  tpg_sb_printf(s, "\\nn=%zu (%s)", d->count,
                d->kind != TPG_ALL_REDUCE || d->algo == TPG_ALGO_NCCL ? "NCCL child graph"
                : d->algo == TPG_ALGO_ONESHOT                         ? "one-shot kernel node"
                : d->algo == TPG_ALGO_TWOSHOT                         ? "two-shot kernel node"
                                                                      : "AUTO: our kernel node or NCCL");
  tpg_sb_view(s, p, "send", d->send);
  tpg_sb_view(s, p, "recv", d->recv);
  if (d->hidden) tpg_sb_printf(s, "\\nepilogue hidden=%zu", d->hidden);
  tpg_sb_view(s, p, "bias", d->bias);
  tpg_sb_view(s, p, "residual", d->residual);
  tpg_sb_view(s, p, "residual_out", d->residual_out);
  tpg_sb_view(s, p, "norm_weight", d->norm_weight);
}

static tpg_status same_shape(const tpg_node_rec *x, const tpg_node_rec *y, const char *la) {
  if (x->u.coll.kind != y->u.coll.kind)
    return TPG_ARG_FAIL("node %s: collective kind differs between the graph and plan", la);
  /* An epilogue after an NCCL all-reduce is a node of its own. */
  if ((x->u.coll.hidden != 0) != (y->u.coll.hidden != 0))
    return TPG_ARG_FAIL("node %s: the all-reduce has an epilogue in %s but not in %s: expected the same topology", la,
                        x->u.coll.hidden ? "the graph" : "plan", x->u.coll.hidden ? "plan" : "the graph");
  return TPG_SUCCESS;
}

/* ---- algorithm: NCCL or one of our kernels ------------------------------- */

/* The epilogue's pointers and shape from the desc (all zero: none). */
static void fill_epi(const tpg_nctx *c, tpg_ar_epi *e) {
  const tpg_collective_desc *d = &c->n->u.coll;
  memset(e, 0, sizeof *e);
  if (d->kind != TPG_ALL_REDUCE || d->hidden == 0) return;
  e->bias = TPG_VPTR(c, d->bias);
  e->residual = TPG_VPTR(c, d->residual);
  e->residual_out = TPG_VPTR(c, d->residual_out);
  e->norm_weight = TPG_VPTR(c, d->norm_weight);
  e->hidden = d->hidden;
  e->eps = d->norm_eps;
}

/* The one writer of the node's pointer fields (fill and patch). NCCL's own
 * send/recv live in its captured child (cap_send/cap_recv record them). */
static tpg_status set_ptrs(const tpg_nctx *c) {
  const tpg_collective_desc *d = &c->n->u.coll;
  tpg_gnode *gn = c->gn;
  if (gn->solo == TPG_SOLO_EPILOGUE) {
    gn->epi.in = TPG_VPTR(c, d->send);
    gn->epi.recv = TPG_VPTR(c, d->recv);
    fill_epi(c, &gn->epi.epi);
  } else if (gn->solo == TPG_SOLO_COPY) {
    gn->cp.srcDevice = tpg_view_ptr(c->p, c->bind, d->send);
    gn->cp.dstDevice = tpg_view_ptr(c->p, c->bind, d->recv);
  } else if (gn->fast) {
    gn->args.ar.in = TPG_VPTR(c, d->send);
    gn->args.ar.out = TPG_VPTR(c, d->recv);
    fill_epi(c, &gn->args.ar.epi);
  } else if (gn->has_epi) {
    gn->epi.in = gn->epi.recv = TPG_VPTR(c, d->recv);
    fill_epi(c, &gn->epi.epi);
  }
  return TPG_SUCCESS;
}

/* The epilogue's kernel node: after an NCCL all-reduce it reads the sum
 * NCCL left in recv, on one rank the sum is send itself (set_ptrs); either
 * way it applies the same epilogue our kernels fuse. */
static tpg_status fill_epilogue_kernel(const tpg_nctx *c) {
  const tpg_collective_desc *d = &c->n->u.coll;
  tpg_gnode *gn = c->gn;
  const tpg_dtype dt = c->p->slots[d->send.slot - 1].dtype;
  tpg_ar_epilogue_args *a = &gn->epi;
  memset(a, 0, sizeof *a);
  a->count = d->count;
  a->dtype = tpg_kdt_of(dt);
  CUfunction f;
  TPG_TRY(tpg_kernel_function("tpg_ar_epilogue", 0, &f));
  memset(&gn->epi_kp, 0, sizeof gn->epi_kp);
  gn->epi_kp.func = f;
  const size_t vec = 16 / tpg_dtype_size(dt);
  const unsigned sms = (unsigned)c->g->dev.sm_count;
  if (d->norm_weight.slot) /* whole rows per block: at most one block per row */
    gn->epi_kp.gridDimX = tpg_grid_for(d->count / d->hidden, 1, sms * 4);
  else
    gn->epi_kp.gridDimX = tpg_grid_for(d->count / vec, 256 * 4, sms * 8);
  gn->epi_kp.gridDimY = gn->epi_kp.gridDimZ = 1;
  gn->epi_kp.blockDimX = 256;
  gn->epi_kp.blockDimY = gn->epi_kp.blockDimZ = 1;
  tpg_kernel_params(&gn->epi_kp, gn->epi_kparams, &gn->epi);
  return TPG_SUCCESS;
}

/* NCCL or one of our kernels for an all-reduce (collective_select.c
 * decides); every rank decides alike (same plan, same tuning — compared by
 * the fingerprint — and the peer buffers' state is agreed collectively).
 * Sets gn->fast and our kernel's launch when ours. */
static tpg_status pick(const tpg_nctx *c) {
  const tpg_collective_desc *d = &c->n->u.coll;
  tpg_graph *g = c->g;
  tpg_gnode *gn = c->gn;
  if (d->kind != TPG_ALL_REDUCE || !g->comm) return TPG_SUCCESS;
  const size_t es = tpg_dtype_size(c->p->slots[d->send.slot - 1].dtype);
  tpg_allreduce_choice ch;
  TPG_TRY(tpg_allreduce_select(g->comm, &g->tune.ar, d->algo, d->count * es, d->send.offset * es,
                               d->recv.offset * es, tpg_nctx_label(c), &ch));
  if (!ch.kernel && c->n->parent >= 0) {
    /* In a conditional body NCCL cannot serve: AUTO takes the two-shot
     * kernel whatever the size (it fails, naming the node, only when the
     * peer buffers cannot hold the message). */
    char why[160];
    snprintf(why, sizeof why, "%s", ch.why);
    tpg_status rs = TPG_SUCCESS;
    if (g->comm->nranks >= 2)
      rs = tpg_allreduce_select(g->comm, &g->tune.ar, TPG_ALGO_TWOSHOT, d->count * es, d->send.offset * es,
                                d->recv.offset * es, tpg_nctx_label(c), &ch);
    if (rs != TPG_SUCCESS || !ch.kernel) {
      char lb[160];
      if (rs != TPG_SUCCESS) snprintf(why, sizeof why, "%s", tpg_last_error());
      return TPG_ARG_FAIL("node %s sits in body %d of conditional node %s, where NCCL cannot run, and tpgraph's "
                          "all-reduce kernels cannot serve it: %s",
                          tpg_nctx_label(c), c->n->body, tpg_node_label(c->p, c->n->parent, lb, sizeof lb),
                          why);
    }
  }
  if (!ch.kernel) return TPG_SUCCESS;
  tpg_allreduce_args *a = &gn->args.ar;
  memset(a, 0, sizeof *a);
  tpg_peer_args(g->comm, ch.k, a);
  a->count = d->count;
  a->dtype = tpg_kdt_of(c->p->slots[d->send.slot - 1].dtype);
  CUfunction f;
  TPG_TRY(tpg_kernel_function(ch.kernel, 0, &f));
  memset(&gn->kp, 0, sizeof gn->kp);
  gn->kp.func = f;
  gn->kp.gridDimX = ch.grid;
  gn->kp.gridDimY = gn->kp.gridDimZ = 1;
  gn->kp.blockDimX = ch.block;
  gn->kp.blockDimY = gn->kp.blockDimZ = 1;
  tpg_kernel_params(&gn->kp, gn->kparams, &gn->args);
  gn->kernel = ch.kernel;
  gn->fast = 1;
  return TPG_SUCCESS;
}

/* The rank-dependent sizes: an all-gather receives count x ranks, a
 * reduce-scatter sends it. Checked in every mode, before any NCCL call. */
static tpg_status check_ranges(const tpg_nctx *c) {
  const tpg_collective_desc *d = &c->n->u.coll;
  const tpg_plan *p = c->p;
  size_t nr = (size_t)c->g->comm->nranks;
  size_t send_need = d->kind == TPG_REDUCE_SCATTER ? d->count * nr : d->count;
  size_t recv_need = d->kind == TPG_ALL_GATHER ? d->count * nr : d->count;
  const tpg_slot_rec *ss = &p->slots[d->send.slot - 1], *rs = &p->slots[d->recv.slot - 1];
  if (d->send.offset + send_need > ss->count)
    return TPG_ARG_FAIL("node %s: send needs %zu elements at offset %llu with %d ranks, slot \"%s\" has %zu", tpg_nctx_label(c),
                        send_need, (unsigned long long)d->send.offset, c->g->comm->nranks, ss->name, ss->count);
  if (d->recv.offset + recv_need > rs->count)
    return TPG_ARG_FAIL("node %s: recv needs %zu elements at offset %llu with %d ranks, slot \"%s\" has %zu", tpg_nctx_label(c),
                        recv_need, (unsigned long long)d->recv.offset, c->g->comm->nranks, rs->name, rs->count);
  return TPG_SUCCESS;
}

/* ---- one rank ------------------------------------------------------------ */

/* Whether the graph's collectives run on one rank (see the top). */
static int one_rank(const tpg_nctx *c) { return !c->g->comm || c->g->comm->nranks == 1; }

/* send and recv are the same range (sizes were checked at plan time). */
static int in_place(const tpg_collective_desc *d) {
  return d->send.slot == d->recv.slot && d->send.offset == d->recv.offset;
}

static tpg_status fill_solo(const tpg_nctx *c) {
  const tpg_collective_desc *d = &c->n->u.coll;
  tpg_gnode *gn = c->gn;
  if (d->kind == TPG_ALL_REDUCE && d->hidden) {
    TPG_TRY(fill_epilogue_kernel(c));
    gn->solo = TPG_SOLO_EPILOGUE;
  } else if (in_place(d)) {
    gn->solo = TPG_SOLO_ELIDED;
  } else {
    CUDA_MEMCPY3D *cp = &gn->cp;
    memset(cp, 0, sizeof *cp);
    cp->srcMemoryType = cp->dstMemoryType = CU_MEMORYTYPE_DEVICE; /* collectives take device slots only */
    cp->WidthInBytes = d->count * tpg_dtype_size(c->p->slots[d->send.slot - 1].dtype);
    cp->Height = cp->Depth = 1;
    gn->solo = TPG_SOLO_COPY;
  }
  return set_ptrs(c);
}

static tpg_status fill(const tpg_nctx *c) {
  const tpg_collective_desc *d = &c->n->u.coll;
  c->gn->fast = 0;
  c->gn->has_epi = 0;
  c->gn->solo = 0;
  if (one_rank(c)) return fill_solo(c); /* sizes at one rank are the plan's, checked already */
  TPG_TRY(check_ranges(c));
  TPG_TRY(pick(c));
  if (!c->gn->fast && d->kind == TPG_ALL_REDUCE && d->hidden) {
    TPG_TRY(fill_epilogue_kernel(c));
    c->gn->has_epi = 1;
  }
  return set_ptrs(c);
}

/* ---- NCCL ---------------------------------------------------------------- */

/* Where NCCL's send and recv point under c->bind. */
static void nccl_ptrs(const tpg_nctx *c, CUdeviceptr *send, CUdeviceptr *recv) {
  *send = tpg_view_ptr(c->p, c->bind, c->n->u.coll.send);
  *recv = tpg_view_ptr(c->p, c->bind, c->n->u.coll.recv);
}

/* The NCCL call of the node, enqueued on stream. */
static tpg_status issue_nccl(const tpg_nctx *c, CUstream stream) {
  tpg_comm *comm = c->g->comm;
  TPG_TRY(tpg_comm_check_usable(comm, "tpg_graph", "the graph's comm"));
  const tpg_collective_desc *d = &c->n->u.coll;
  void *send = TPG_VPTR(c, d->send), *recv = TPG_VPTR(c, d->recv);
  ncclDataType_t dt = tpg_nccl_dtype(c->p->slots[d->send.slot - 1].dtype);
  ncclResult_t r;
  if (d->kind == TPG_ALL_REDUCE) r = tpg_nccl->ncclAllReduce(send, recv, d->count, dt, ncclSum, comm->nccl, stream);
  else if (d->kind == TPG_ALL_GATHER) r = tpg_nccl->ncclAllGather(send, recv, d->count, dt, comm->nccl, stream);
  else r = tpg_nccl->ncclReduceScatter(send, recv, d->count, dt, ncclSum, comm->nccl, stream);
  char what[200];
  snprintf(what, sizeof what, "NCCL call for node %s", tpg_nctx_label(c));
  return tpg_nccl_settle(comm, r, "tpg_graph", what);
}

/* A one-rank node: the epilogue's kernel, a memcpy node, or nothing, its
 * dependencies forwarded to its dependents (at most TPG_GNODE_MAX_CU of
 * them; with more, an empty node joins them, which is rare enough). */
static tpg_status add_solo(const tpg_nctx *c, CUgraph graph, const tpg_deps *deps) {
  tpg_gnode *gn = c->gn;
  CUresult r;
  switch (gn->solo) {
    case TPG_SOLO_EPILOGUE:
      return tpg_add_kernel_node(c, graph, deps, &gn->epi_kp, "cuGraphAddKernelNode (all-reduce epilogue, one rank)");
    case TPG_SOLO_COPY:
      r = tpg_cu->cuGraphAddMemcpyNode(&gn->cu[0], graph, deps->nodes, deps->n, &gn->cp, c->g->dev.ctx);
      if (r != CUDA_SUCCESS) return tpg_node_cu_fail(c, r, "cuGraphAddMemcpyNode (collective, one rank)");
      gn->ncu = 1;
      return TPG_SUCCESS;
    default:
      if (deps->n <= TPG_GNODE_MAX_CU) {
        for (size_t j = 0; j < deps->n; j++) gn->cu[j] = deps->nodes[j];
        gn->nfwd = (int)deps->n;
        return TPG_SUCCESS;
      }
      r = tpg_cu->cuGraphAddEmptyNode(&gn->cu[0], graph, deps->nodes, deps->n);
      if (r != CUDA_SUCCESS) return tpg_node_cu_fail(c, r, "cuGraphAddEmptyNode (collective, one rank)");
      gn->ncu = 1;
      return TPG_SUCCESS;
  }
}

static tpg_status add(const tpg_nctx *c, CUgraph graph, const tpg_deps *deps) {
  tpg_gnode *gn = c->gn;
  if (gn->solo) return add_solo(c, graph, deps);
  if (gn->fast) /* our kernel: a plain kernel node */
    return tpg_add_kernel_node(c, graph, deps, &gn->kp, "cuGraphAddKernelNode (one-shot all-reduce)");
  CUgraph child;
  TPG_TRY(tpg_capture_child(c, issue_nccl, &child));
  /* The child is cloned into the parent (NCCL's resources travel with the
   * clone as graph user objects), so our capture can go now. */
  CUresult r = tpg_cu->cuGraphAddChildGraphNode(&gn->cu[0], graph, deps->nodes, deps->n, child);
  tpg_cu->cuGraphDestroy(child);
  if (r != CUDA_SUCCESS) return tpg_node_cu_fail(c, r, "cuGraphAddChildGraphNode");
  gn->ncu = 1;
  nccl_ptrs(c, &gn->cap_send, &gn->cap_recv);
  if (!gn->has_epi) return TPG_SUCCESS;
  tpg_deps after = {&gn->cu[0], NULL, 1, 0, 0};
  return tpg_add_kernel_node(c, graph, &after, &gn->epi_kp, "cuGraphAddKernelNode (epilogue after the NCCL all-reduce)");
}

static tpg_status run_eager(const tpg_nctx *c, CUstream stream) {
  const tpg_gnode *gn = c->gn;
  if (gn->solo == TPG_SOLO_EPILOGUE) return tpg_launch_params(&gn->epi_kp, stream);
  if (gn->solo == TPG_SOLO_COPY) {
    TPG_CU(cuMemcpyAsync(gn->cp.dstDevice, gn->cp.srcDevice, gn->cp.WidthInBytes, stream));
    return TPG_SUCCESS;
  }
  if (gn->solo) return TPG_SUCCESS;
  TPG_TRY(tpg_comm_check_usable(c->g->comm, "tpg_graph_launch", "the graph's comm"));
  if (c->gn->fast) return tpg_launch_params(&c->gn->kp, stream);
  TPG_TRY(issue_nccl(c, stream));
  if (c->gn->has_epi) return tpg_launch_params(&c->gn->epi_kp, stream);
  return TPG_SUCCESS;
}

/* ---- rebind -------------------------------------------------------------- */

static int patch_collective(const tpg_nctx *c) {
  if (c->gn->solo || c->gn->fast || c->g->mode == TPG_MODE_EAGER) return 0;
  CUdeviceptr send, recv;
  nccl_ptrs(c, &send, &recv);
  return send != c->gn->cap_send || recv != c->gn->cap_recv;
}

static tpg_status patch(const tpg_nctx *c) {
  tpg_gnode *gn = c->gn;
  TPG_TRY(set_ptrs(c));
  if (c->g->mode == TPG_MODE_EAGER) return TPG_SUCCESS; /* the next launch reads the patched copy */
  if (gn->solo == TPG_SOLO_EPILOGUE) {
    TPG_CU(cuGraphExecKernelNodeSetParams(c->g->exec, gn->cu[0], &gn->epi_kp));
    return TPG_SUCCESS;
  }
  if (gn->solo == TPG_SOLO_COPY) {
    TPG_CU(cuGraphExecMemcpyNodeSetParams(c->g->exec, gn->cu[0], &gn->cp, c->g->dev.ctx));
    return TPG_SUCCESS;
  }
  if (gn->solo) return TPG_SUCCESS; /* elided: the same range moves with its slot */
  if (gn->fast) { /* our kernel: new pointers, no re-capture */
    TPG_CU(cuGraphExecKernelNodeSetParams(c->g->exec, gn->cu[0], &gn->kp));
    return TPG_SUCCESS;
  }
  /* Re-capture only when NCCL's own buffers moved: a rebind of the
   * epilogue's views alone is a kernel-node update. Every rank rebinds the
   * same slots, so every rank re-captures alike. */
  if (patch_collective(c)) {
    CUgraph child;
    TPG_TRY(tpg_capture_child(c, issue_nccl, &child));
    CUresult r = tpg_cu->cuGraphExecChildGraphNodeSetParams(c->g->exec, gn->cu[0], child);
    /* The exec keeps what it needs of the child (NCCL's resources are
     * reference-counted user objects, released when launches using the old
     * child have completed). */
    tpg_cu->cuGraphDestroy(child);
    if (r != CUDA_SUCCESS) return tpg_cu_fail(r, "tpg_graph_rebind", "cuGraphExecChildGraphNodeSetParams");
    nccl_ptrs(c, &gn->cap_send, &gn->cap_recv);
  }
  if (gn->has_epi) TPG_CU(cuGraphExecKernelNodeSetParams(c->g->exec, gn->cu[1], &gn->epi_kp));
  return TPG_SUCCESS;
}

/* Our all-reduce kernels and what a collective becomes on one rank are
 * kernel, memcpy or no nodes, whose setters take another count; an NCCL
 * child graph is captured for its count and cannot be retargeted. */
static int retarget(const tpg_node_rec *a, const tpg_gnode *ga, const tpg_node_rec *b, const tpg_gnode *gb) {
  (void)a, (void)b;
  if (ga->solo != gb->solo || ga->fast != gb->fast || ga->has_epi != gb->has_epi) return 0;
  if (ga->solo == TPG_SOLO_COPY)
    return ga->cp.srcMemoryType == gb->cp.srcMemoryType && ga->cp.dstMemoryType == gb->cp.dstMemoryType;
  return ga->solo || ga->fast;
}

/* ---- facts ---------------------------------------------------------------- */

/* What every rank must agree on: kind, count, algorithm, dtype, and the
 * epilogue's shape (the algorithm's block split follows it: rows when a
 * norm is requested, and every rank must split alike). */
static void fingerprint(const tpg_plan *p, const tpg_node_rec *n, const tpg_gnode *gn, uint64_t *h) {
  const tpg_collective_desc *d = &n->u.coll;
#define TPG_MIX(v) (*h = (*h ^ (uint64_t)(v)) * 1099511628211ull)
  TPG_MIX(d->kind);
  /* Where it runs: which body, how deeply nested (a collective inside a
   * loop on one rank and outside it on another would hang). */
  int depth = 0;
  for (int a = n->parent; a >= 0; a = p->nodes[a].parent) depth++;
  TPG_MIX(depth);
  TPG_MIX(n->parent >= 0 ? n->body : -1);
  TPG_MIX(d->count);
  TPG_MIX(d->algo);
  TPG_MIX(p->slots[d->send.slot - 1].dtype);
  TPG_MIX(d->hidden);
  TPG_MIX((d->bias.slot != 0) | (d->residual.slot != 0) << 1 | (d->residual_out.slot != 0) << 2 |
          (d->norm_weight.slot != 0) << 3);
  uint32_t eps_bits = 0;
  if (d->norm_weight.slot) memcpy(&eps_bits, &d->norm_eps, sizeof eps_bits);
  TPG_MIX(eps_bits);
  if (gn) { /* resolved: NCCL or which kernel of ours, with what grid */
    TPG_MIX(gn->fast);
    TPG_MIX(gn->has_epi);
    if (gn->fast) {
      for (const char *c = gn->kernel; c && *c; c++) TPG_MIX((unsigned char)*c);
      TPG_MIX(gn->kp.gridDimX);
      TPG_MIX(gn->kp.blockDimX);
    }
  }
#undef TPG_MIX
}

/* AUTO, ONESHOT and TWOSHOT all-reduces are resolved per rank (peer state,
 * tuning): compared across ranks again after fill. */
static int resolves(const tpg_node_rec *n) { return n->u.coll.kind == TPG_ALL_REDUCE && n->u.coll.algo != TPG_ALGO_NCCL; }

/* Our all-reduce kernels, and the epilogue kernel after an NCCL one, start
 * programmatic edges (they trigger their dependents first thing). Our
 * kernels also end them: each executes griddepcontrol.wait first thing, in
 * every block, before it reads an epoch, its input or a peer's data, so
 * their staging/flag protocol still sees the previous node finished; what
 * the early launch saves is the launch itself (~0.6 us per all-reduce of a
 * chain in ar_lab; docs/design.md, "Programmatic dependent launch"). The
 * NCCL child graph never ends one. */
static unsigned pdl(const tpg_gnode *gn) {
  /* The epilogue kernel waits (griddepcontrol.wait) in every block before
   * it reads anything: alone on one rank it may end a programmatic edge
   * too. After an NCCL child it starts them only (the child never ends one). */
  if (gn->solo == TPG_SOLO_EPILOGUE) return TPG_PDL_PRIMARY | TPG_PDL_SECONDARY;
  if (gn->solo) return 0;
  return gn->fast ? TPG_PDL_PRIMARY | TPG_PDL_SECONDARY : gn->has_epi ? TPG_PDL_PRIMARY : 0;
}

static void count(const tpg_gnode *gn, tpg_graph_info *info) {
  if (gn->solo) { /* one rank: no collective left */
    if (gn->ncu) info->nodes++;
    if (gn->solo == TPG_SOLO_EPILOGUE) info->kernel_nodes++;
    else if (gn->solo == TPG_SOLO_COPY) info->memcpy_nodes++;
    else if (gn->ncu) info->empty_nodes++;
    return;
  }
  info->collective_nodes++;
  info->nodes++;
  if (gn->fast) info->kernel_nodes++;
  else info->child_nodes++;
  if (gn->has_epi) { /* the epilogue after NCCL */
    info->kernel_nodes++;
    info->nodes++;
  }
}

const tpg_kind_ops tpg_kind_collective = {
    .name = "collective",
    .dot_shape = "doubleoctagon",
    .collective = 1,
    .check = check,
    .in_body = in_body,
    .views = views,
    .label = label,
    .dot = dot,
    .same_shape = same_shape,
    .fill = fill,
    .add = add,
    .run_eager = run_eager,
    .capture = issue_nccl,
    .patch = patch,
    .patch_collective = patch_collective,
    .retarget = retarget,
    .fingerprint = fingerprint,
    .resolves = resolves,
    .pdl = pdl,
    .count = count,
};
