/* event.c - the event node kind (tpg_plan_add_event_record / _wait): order
 * the graph against the engine's other streams through a CUDA event it owns.
 *
 * Event record / wait nodes in the graph. In eager mode the same event is
 * recorded or waited for on the launch stream, with the EXTERNAL flags when
 * that stream is capturing (TPG_MODE_CAPTURE, or the engine capturing an
 * eager launch): then it becomes the same record / wait nodes, not a
 * capture-internal dependency that would never reach the engine's other
 * streams. (The flags are invalid outside a capture.)
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>

#include "graphbuild/nodes/common.h"

static tpg_status check(const tpg_plan *p, const char *fn, const tpg_node_rec *n) {
  (void)p;
  if (!n->u.event.event)
    return tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn, "event is NULL: expected a CUevent / cudaEvent_t of the engine");
  return TPG_SUCCESS;
}

static int views(const tpg_node_rec *n, tpg_view_use *v) {
  (void)n, (void)v;
  return 0;
}

static void label(const tpg_node_rec *n, int idx, char *buf, size_t cap) {
  snprintf(buf, cap, "%s#%d", n->u.event.wait ? "event_wait" : "event_record", idx);
}

static tpg_status fill(const tpg_nctx *c) {
  (void)c;
  return TPG_SUCCESS;
}

static tpg_status add(const tpg_nctx *c, CUgraph graph, const tpg_deps *deps) {
  CUevent ev = (CUevent)c->n->u.event.event;
  CUresult r = c->n->u.event.wait
                   ? tpg_cu->cuGraphAddEventWaitNode(&c->gn->cu[0], graph, deps->nodes, deps->n, ev)
                   : tpg_cu->cuGraphAddEventRecordNode(&c->gn->cu[0], graph, deps->nodes, deps->n, ev);
  if (r != CUDA_SUCCESS)
    return tpg_node_cu_fail(c, r, c->n->u.event.wait ? "cuGraphAddEventWaitNode" : "cuGraphAddEventRecordNode");
  c->gn->ncu = 1;
  return TPG_SUCCESS;
}

static tpg_status run_eager(const tpg_nctx *c, CUstream stream) {
  CUevent ev = (CUevent)c->n->u.event.event;
  /* The EXTERNAL flags are valid only while the stream is capturing. */
  CUstreamCaptureStatus cs = CU_STREAM_CAPTURE_STATUS_NONE;
  CUresult r = tpg_cu->cuStreamGetCaptureInfo(stream, &cs, NULL, NULL, NULL, NULL, NULL);
  if (r != CUDA_SUCCESS) return tpg_node_cu_fail(c, r, "cuStreamGetCaptureInfo");
  const int ext = cs == CU_STREAM_CAPTURE_STATUS_ACTIVE;
  r = c->n->u.event.wait ? tpg_cu->cuStreamWaitEvent(stream, ev, ext ? CU_EVENT_WAIT_EXTERNAL : 0)
                         : tpg_cu->cuEventRecordWithFlags(ev, stream, ext ? CU_EVENT_RECORD_EXTERNAL : 0);
  if (r != CUDA_SUCCESS)
    return tpg_node_cu_fail(c, r, c->n->u.event.wait ? "cuStreamWaitEvent" : "cuEventRecordWithFlags");
  return TPG_SUCCESS;
}

static tpg_status patch(const tpg_nctx *c) {
  (void)c;
  return TPG_SUCCESS;
}

static void count(const tpg_gnode *gn, tpg_graph_info *info) {
  (void)gn;
  info->nodes++;
  info->event_nodes++;
}

static tpg_status in_body(const tpg_plan *p, const char *fn, const tpg_node_rec *n, const char *parent) {
  (void)p;
  (void)n;
  return tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn,
                 "the open body is of conditional node %s: CUDA allows no event record / wait nodes in a conditional body "
                 "(kernel, memset, memcpy, empty, child-graph and conditional nodes only)",
                 parent);
}

const tpg_kind_ops tpg_kind_event = {
    .name = "event",
    .dot_shape = "cds",
    .check = check,
    .in_body = in_body,
    .views = views,
    .label = label,
    .fill = fill,
    .add = add,
    .run_eager = run_eager,
    .patch = patch,
    .count = count,
};
