/* plan_add_kit.c - the public builders of the kit's nodes: engine kernels,
 * captured library work, host callbacks, event record / wait.
 *
 * What the caller passes by pointer (arguments and their values, the kernel
 * name, views) is deep-copied into the node record's data, so the caller's
 * arrays may go as soon as the call returns, and plans clone and free these
 * nodes without knowing their kind. The kind's check (graphbuild/nodes/)
 * then judges the record exactly as it will be used.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "graphbuild/nodes/kind.h"
#include "lib/kit_args.h"
#include "lib/module.h"

#define TPG_MAX_KERNEL_NAME 4096

static tpg_node_rec record(tpg_node_kind kind) {
  tpg_node_rec rec;
  memset(&rec, 0, sizeof rec);
  rec.kind = kind;
  return rec;
}

/* The kind's check, then the plan takes rec (and its data); on failure the
 * data is freed here and the plan is unchanged. */
static tpg_status add_node(tpg_plan *p, const char *fn, tpg_node_rec *rec, const tpg_node *deps, int ndeps,
                           tpg_node *out) {
  tpg_status st = tpg_kind(rec->kind)->check(p, fn, rec);
  if (st == TPG_SUCCESS) st = tpg_plan_push_node(p, fn, rec, deps, ndeps, out);
  if (st != TPG_SUCCESS) free(rec->data);
  return st;
}

/* The bodies below take fn (the public name, for messages) and write the
 * new node to *node; the public wrappers store it in *out last, because out
 * may alias an element of deps ("prev = add(prev)"), which the body reads. */
#define KIT_CHECK(cond, ...)                                                \
  do {                                                                      \
    if (!(cond)) return tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn, __VA_ARGS__); \
  } while (0)

#define KIT_PUBLIC(call)           \
  do {                             \
    tpg_node node_ = 0;            \
    tpg_err_clear();               \
    tpg_status st_ = (call);       \
    if (out) *out = st_ == TPG_SUCCESS ? node_ : 0; \
    return st_;                    \
  } while (0)

static tpg_status enter(tpg_plan *p, const char *fn, const tpg_node *deps, int ndeps) {
  TPG_TRY(tpg_plan_check(p, fn, "plan"));
  return tpg_plan_check_deps(p, fn, deps, ndeps);
}

static tpg_status add_kernel(const char *fn, tpg_plan *p, const tpg_kernel_desc *d, const tpg_node *deps, int ndeps,
                             tpg_node *node) {
  TPG_TRY(enter(p, fn, deps, ndeps));
  KIT_CHECK(d != NULL, "desc is NULL: expected a tpg_kernel_desc (TPG_KERNEL_DESC_INIT)");
  KIT_CHECK(d->size == sizeof(tpg_kernel_desc), "desc->size is %zu: expected sizeof(tpg_kernel_desc) = %zu",
                d->size, sizeof(tpg_kernel_desc));
  int ways = (d->module || d->name) + (d->cu_kernel != NULL) + (d->cu_function != NULL);
  KIT_CHECK(ways == 1,
                "desc names %s kernel: expected exactly one of desc->module + desc->name, desc->cu_kernel, "
                "desc->cu_function",
                ways == 0 ? "no" : "more than one");
  KIT_CHECK(!d->module || d->name, "desc->module is set but desc->name is NULL: expected the kernel's name");
  KIT_CHECK(!d->name || d->module,
                "desc->name is \"%.64s\" but desc->module is NULL: a kernel is looked up by name in a module "
                "(tpg_module_load); pass desc->cu_kernel or desc->cu_function for kernels you hold",
                d->name);
  if (d->module) TPG_TRY(tpg_module_check(d->module, fn, "desc->module"));
  size_t name_len = d->name ? strlen(d->name) : 0;
  KIT_CHECK(!d->name || (name_len > 0 && name_len < TPG_MAX_KERNEL_NAME),
                "desc->name is %zu bytes: expected 1..%d", name_len, TPG_MAX_KERNEL_NAME - 1);
  /* The arguments' own rules first: their values are read below. */
  TPG_TRY(tpg_kit_args_check(fn, NULL, d->args, d->nargs));

  /* data: tpg_arg_rec[nargs], the values (16-byte aligned each), the name. */
  size_t at = (size_t)d->nargs * sizeof(tpg_arg_rec);
  for (int i = 0; i < d->nargs; i++)
    if (d->args[i].kind == TPG_ARG_BYTES) at = (at + 15) / 16 * 16 + d->args[i].size;
  size_t name_off = d->name ? at : SIZE_MAX;
  size_t bytes = at + (d->name ? name_len + 1 : 0);
  tpg_node_rec rec = record(TPG_NK_KERNEL);
  rec.data = calloc(1, bytes ? bytes : 1);
  if (!rec.data) return tpg_err(TPG_ERROR_OUT_OF_MEMORY, fn, "out of host memory");
  rec.data_bytes = bytes;
  tpg_arg_rec *ar = rec.data;
  unsigned char *base = rec.data;
  at = (size_t)d->nargs * sizeof(tpg_arg_rec);
  int nviews = 0;
  for (int i = 0; i < d->nargs; i++) {
    const tpg_arg *a = &d->args[i];
    ar[i].kind = a->kind;
    ar[i].size = a->kind == TPG_ARG_BYTES ? a->size : 8;
    ar[i].view = a->kind == TPG_ARG_BYTES ? (tpg_view){0, 0, 0} : a->view; /* COND: the condition in .offset */
    ar[i].value_off = SIZE_MAX;
    if (a->kind == TPG_ARG_BYTES) {
      at = (at + 15) / 16 * 16;
      ar[i].value_off = at;
      memcpy(base + at, a->bytes, a->size);
      at += a->size;
    } else if (a->kind == TPG_ARG_VIEW) {
      nviews++;
    }
  }
  if (d->name) memcpy(base + name_off, d->name, name_len + 1);
  rec.u.kernel.module = d->module;
  rec.u.kernel.cu_kernel = d->cu_kernel;
  rec.u.kernel.cu_function = d->cu_function;
  memcpy(rec.u.kernel.grid, d->grid, sizeof d->grid);
  memcpy(rec.u.kernel.block, d->block, sizeof d->block);
  memcpy(rec.u.kernel.cluster, d->cluster, sizeof d->cluster);
  rec.u.kernel.shared_bytes = d->shared_bytes;
  rec.u.kernel.pdl = d->pdl;
  rec.u.kernel.nargs = d->nargs;
  rec.u.kernel.nviews = nviews;
  rec.u.kernel.name_off = name_off;
  return add_node(p, fn, &rec, deps, ndeps, node);
}

tpg_status tpg_plan_add_kernel(tpg_plan *p, const tpg_kernel_desc *d, const tpg_node *deps, int ndeps,
                               tpg_node *out) {
  KIT_PUBLIC(add_kernel(__func__, p, d, deps, ndeps, &node_));
}

static tpg_status add_captured(const char *fn, tpg_plan *p, const tpg_captured_desc *d, const tpg_node *deps,
                               int ndeps, tpg_node *node) {
  TPG_TRY(enter(p, fn, deps, ndeps));
  KIT_CHECK(d != NULL, "desc is NULL: expected a tpg_captured_desc (TPG_CAPTURED_DESC_INIT)");
  KIT_CHECK(d->size == sizeof(tpg_captured_desc),
                "desc->size is %zu: expected sizeof(tpg_captured_desc) = %zu", d->size, sizeof(tpg_captured_desc));
  KIT_CHECK(d->fn != NULL, "desc->fn is NULL: expected the callback that issues the work");
  KIT_CHECK(d->nviews >= 0 && d->nviews <= TPG_MAX_NODE_VIEWS, "desc->nviews is %d: expected 0..%d", d->nviews,
                TPG_MAX_NODE_VIEWS);
  KIT_CHECK(d->nviews == 0 || d->views != NULL, "desc->views is NULL but desc->nviews is %d", d->nviews);
  /* data: tpg_view[nviews], then size_t counts[nviews] (resolved: a NULL
   * counts means "to the slot's end", fixed now against the plan's slots). */
  size_t n = (size_t)d->nviews;
  tpg_node_rec rec = record(TPG_NK_CAPTURED);
  rec.data_bytes = n * (sizeof(tpg_view) + sizeof(size_t));
  rec.data = calloc(1, rec.data_bytes ? rec.data_bytes : 1);
  if (!rec.data) return tpg_err(TPG_ERROR_OUT_OF_MEMORY, fn, "out of host memory");
  tpg_view *v = rec.data;
  size_t *cnt = (size_t *)(v + n);
  for (size_t i = 0; i < n; i++) {
    v[i] = d->views[i];
    if (d->counts) cnt[i] = d->counts[i];
    else if (v[i].slot >= 1 && v[i].slot <= (tpg_slot)p->nslots && v[i].offset < p->slots[v[i].slot - 1].count)
      cnt[i] = p->slots[v[i].slot - 1].count - v[i].offset;
    else
      cnt[i] = 1; /* the check names the bad view */
  }
  rec.u.captured.fn = d->fn;
  rec.u.captured.user = d->user;
  rec.u.captured.nviews = d->nviews;
  return add_node(p, fn, &rec, deps, ndeps, node);
}

tpg_status tpg_plan_add_captured(tpg_plan *p, const tpg_captured_desc *d, const tpg_node *deps, int ndeps,
                                 tpg_node *out) {
  KIT_PUBLIC(add_captured(__func__, p, d, deps, ndeps, &node_));
}

/* Host and event nodes: a record of plain values. */
static tpg_status add_plain(const char *fn, tpg_plan *p, tpg_node_rec *rec, const tpg_node *deps, int ndeps,
                            tpg_node *node) {
  TPG_TRY(enter(p, fn, deps, ndeps));
  return add_node(p, fn, rec, deps, ndeps, node);
}

tpg_status tpg_plan_add_host(tpg_plan *p, tpg_host_fn fn, void *user, const tpg_node *deps, int ndeps,
                             tpg_node *out) {
  tpg_node_rec rec = record(TPG_NK_HOST);
  rec.u.host.fn = fn;
  rec.u.host.user = user;
  KIT_PUBLIC(add_plain(__func__, p, &rec, deps, ndeps, &node_));
}

tpg_status tpg_plan_add_event_record(tpg_plan *p, tpg_event event, const tpg_node *deps, int ndeps,
                                     tpg_node *out) {
  tpg_node_rec rec = record(TPG_NK_EVENT);
  rec.u.event.event = event;
  rec.u.event.wait = 0;
  KIT_PUBLIC(add_plain(__func__, p, &rec, deps, ndeps, &node_));
}

tpg_status tpg_plan_add_event_wait(tpg_plan *p, tpg_event event, const tpg_node *deps, int ndeps, tpg_node *out) {
  tpg_node_rec rec = record(TPG_NK_EVENT);
  rec.u.event.event = event;
  rec.u.event.wait = 1;
  KIT_PUBLIC(add_plain(__func__, p, &rec, deps, ndeps, &node_));
}
