/* plan.c - the plan as data: create/destroy/clone, slots, the node array and
 * its edges, and the view checks every node kind's check uses.
 *
 * Nothing here knows a node kind: the builders (plan_add.c) fill a record
 * and ask the kind's check (graphbuild/nodes/) before tpg_plan_push_node adds
 * it; whole-plan checks (cycles, DOT, topology) are plan_check.c's.
 */
#define _POSIX_C_SOURCE 200809L
#include "graphbuild/plan.h"
#include "graphbuild/nodes/kind.h"
#include "lib/handle.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static atomic_uint g_plan_serial = 1;

#define TPG_MAX_NAME 128
#define TPG_MAX_NODES (1 << 24)
#define TPG_MAX_SLOTS (1 << 20)

static char *dup_str(const char *s) {
  size_t n = strlen(s) + 1;
  char *d = malloc(n);
  if (d) memcpy(d, s, n);
  return d;
}

tpg_status tpg_plan_check(const tpg_plan *p, const char *fn, const char *arg) {
  if (!p) return tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn, "%s is NULL: expected a tpg_plan", arg);
  if (!tpg_handle_live(p, TPG_MAGIC_PLAN) || p->magic != TPG_MAGIC_PLAN)
    return tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn, "%s is not a live tpg_plan (destroyed or corrupt handle)", arg);
  return TPG_SUCCESS;
}

tpg_status tpg_plan_create(tpg_plan **out) {
  tpg_err_clear();
  TPG_CHECK_ARG(out != NULL, "out is NULL: expected a tpg_plan * to set");
  *out = NULL;
  tpg_plan *p = calloc(1, sizeof *p);
  if (!p) return TPG_FAIL(TPG_ERROR_OUT_OF_MEMORY, "out of host memory");
  p->magic = TPG_MAGIC_PLAN;
  p->scope = -1;
  if (tpg_handle_add(p, TPG_MAGIC_PLAN) != TPG_SUCCESS) {
    free(p);
    return TPG_FAIL(TPG_ERROR_OUT_OF_MEMORY, "out of host memory");
  }
  p->serial = atomic_fetch_add(&g_plan_serial, 1);
  if (p->serial == 0) p->serial = atomic_fetch_add(&g_plan_serial, 1);
  *out = p;
  return TPG_SUCCESS;
}

/* Frees a live plan (internal copies too). */
static void plan_free(tpg_plan *p) {
  for (int i = 0; i < p->nslots; i++) free(p->slots[i].name);
  for (int i = 0; i < p->nnodes; i++) {
    free(p->nodes[i].name);
    free(p->nodes[i].deps);
    free(p->nodes[i].data);
  }
  free(p->slots);
  free(p->nodes);
  free(p->conds);
  tpg_plan_drop_indexes(p);
  tpg_handle_remove(p);
  tpg_handle_poison(&p->magic);
  free(p);
}

/* A success leaves this thread's message as it was: destroying is cleanup,
 * often of a call that failed, whose message the caller still wants. */
tpg_status tpg_plan_destroy(tpg_plan *p) {
  if (!p) return TPG_SUCCESS;
  TPG_TRY(tpg_plan_check(p, __func__, "plan"));
  plan_free(p);
  return TPG_SUCCESS;
}

tpg_status tpg_plan_clone(const tpg_plan *src, tpg_plan **out) {
  *out = NULL;
  tpg_plan *p = calloc(1, sizeof *p);
  if (!p) return TPG_FAIL(TPG_ERROR_OUT_OF_MEMORY, "out of host memory");
  p->magic = TPG_MAGIC_PLAN;
  if (tpg_handle_add(p, TPG_MAGIC_PLAN) != TPG_SUCCESS) {
    free(p);
    return TPG_FAIL(TPG_ERROR_OUT_OF_MEMORY, "out of host memory");
  }
  p->serial = src->serial;
  p->coll_ranks = src->coll_ranks;
  p->scope = src->scope;
  p->scope_body = src->scope_body;
  if (src->nconds) {
    p->conds = malloc((size_t)src->nconds * sizeof *p->conds);
    if (!p->conds) {
      free(p);
      return TPG_FAIL(TPG_ERROR_OUT_OF_MEMORY, "out of host memory copying the plan");
    }
    memcpy(p->conds, src->conds, (size_t)src->nconds * sizeof *p->conds);
    p->nconds = p->capconds = src->nconds;
  }
  p->slots = calloc((size_t)(src->nslots ? src->nslots : 1), sizeof *p->slots);
  p->nodes = calloc((size_t)(src->nnodes ? src->nnodes : 1), sizeof *p->nodes);
  if (!p->slots || !p->nodes) goto oom;
  p->capslots = src->nslots ? src->nslots : 1;
  p->capnodes = src->nnodes ? src->nnodes : 1;
  for (int i = 0; i < src->nslots; i++) {
    p->slots[i] = src->slots[i];
    p->slots[i].name = dup_str(src->slots[i].name);
    p->nslots = i + 1;
    if (!p->slots[i].name) goto oom;
  }
  for (int i = 0; i < src->nnodes; i++) {
    const tpg_node_rec *s = &src->nodes[i];
    tpg_node_rec *d = &p->nodes[i];
    *d = *s;
    d->name = NULL;
    d->deps = NULL;
    d->data = NULL;
    p->nnodes = i + 1;
    if (s->name && !(d->name = dup_str(s->name))) goto oom;
    if (s->data) {
      if (!(d->data = malloc(s->data_bytes ? s->data_bytes : 1))) goto oom;
      memcpy(d->data, s->data, s->data_bytes);
    }
    if (s->ndeps) {
      d->deps = malloc((size_t)s->ndeps * sizeof *d->deps);
      if (!d->deps) goto oom;
      memcpy(d->deps, s->deps, (size_t)s->ndeps * sizeof *d->deps);
    }
    d->capdeps = s->ndeps;
  }
  *out = p;
  return TPG_SUCCESS;
oom:
  tpg_plan_destroy(p);
  return TPG_FAIL(TPG_ERROR_OUT_OF_MEMORY, "out of host memory copying the plan");
}

/* ---- indexes: slot names, edges ----------------------------------------- *
 * Every add_slot / find_slot / add_dependency makes a lookup; as linear
 * scans, building a plan of 100k slots or a node of 100k edges would take
 * quadratic time. Both indexes are open-addressing tables built
 * on first use and dropped (rebuilt lazily) when a rollback or a clone
 * would make them stale; they are caches, never the truth. */

static uint64_t hash_str(const char *s) {
  uint64_t h = 1469598103934665603ull;
  for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
  return h;
}

static uint64_t hash_u64(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  return x;
}

void tpg_plan_drop_indexes(tpg_plan *p) {
  free(p->name_idx);
  p->name_idx = NULL;
  p->name_cap = 0;
  free(p->edge_set);
  p->edge_set = NULL;
  p->edge_cap = p->nedges = 0;
}

/* Slot index + 1 of `name`, or 0; *slot_of_empty the table position to
 * insert at. Needs the table built and not full. */
static size_t name_probe(const tpg_plan *p, const char *name, int *found) {
  size_t m = p->name_cap - 1, i = (size_t)hash_str(name) & m;
  *found = 0;
  while (p->name_idx[i]) {
    if (strcmp(p->slots[p->name_idx[i] - 1].name, name) == 0) {
      *found = p->name_idx[i];
      break;
    }
    i = (i + 1) & m;
  }
  return i;
}

/* The name table holding every slot, with room for one more (load <= 1/2). */
static int name_index_ready(tpg_plan *p) {
  if (p->name_idx && (size_t)(p->nslots + 1) * 2 <= p->name_cap) return 1;
  size_t cap = 64;
  while (cap < (size_t)(p->nslots + 1) * 2) cap *= 2;
  int *t = calloc(cap, sizeof *t);
  if (!t) return 0;
  free(p->name_idx);
  p->name_idx = t;
  p->name_cap = cap;
  for (int s = 0; s < p->nslots; s++) {
    int found;
    size_t at = name_probe(p, p->slots[s].name, &found);
    p->name_idx[at] = s + 1;
  }
  return 1;
}

/* Position of edge key k in the set (its slot if present, else the empty one). */
static size_t edge_probe(const tpg_plan *p, uint64_t k, int *found) {
  size_t m = p->edge_cap - 1, i = (size_t)hash_u64(k) & m;
  *found = 0;
  while (p->edge_set[i]) {
    if (p->edge_set[i] == k) {
      *found = 1;
      break;
    }
    i = (i + 1) & m;
  }
  return i;
}

static uint64_t edge_key(int from, int to) { return ((uint64_t)(uint32_t)(from + 1) << 32) | (uint32_t)(to + 1); }

/* The edge set holding every edge, with room for one more (load <= 1/2). */
static int edge_set_ready(tpg_plan *p) {
  if (p->edge_set && (p->nedges + 1) * 2 <= p->edge_cap) return 1;
  size_t total = 0;
  for (int i = 0; i < p->nnodes; i++) total += (size_t)p->nodes[i].ndeps;
  size_t cap = 64;
  while (cap < (total + 1) * 2) cap *= 2;
  uint64_t *t = calloc(cap, sizeof *t);
  if (!t) return 0;
  free(p->edge_set);
  p->edge_set = t;
  p->edge_cap = cap;
  p->nedges = 0;
  for (int i = 0; i < p->nnodes; i++)
    for (int j = 0; j < p->nodes[i].ndeps; j++) {
      int found;
      size_t at = edge_probe(p, edge_key(p->nodes[i].deps[j], i), &found);
      if (!found) {
        p->edge_set[at] = edge_key(p->nodes[i].deps[j], i);
        p->nedges++;
      }
    }
  return 1;
}

/* ---- slots -------------------------------------------------------------- */

tpg_status tpg_plan_add_slot(tpg_plan *p, const char *name, tpg_dtype dtype, tpg_memory where, size_t count,
                             tpg_slot *out) {
  tpg_err_clear();
  if (out) *out = TPG_SLOT_NONE;
  TPG_TRY(tpg_plan_check(p, __func__, "plan"));
  TPG_CHECK_ARG(out != NULL, "out is NULL: expected a tpg_slot to set");
  TPG_CHECK_ARG(name != NULL && name[0], "name is NULL or empty: expected a slot name");
  TPG_CHECK_ARG(strlen(name) < TPG_MAX_NAME, "name is %zu bytes long: expected < %d", strlen(name), TPG_MAX_NAME);
  TPG_CHECK_ARG(tpg_dtype_size(dtype) != 0, "dtype is %d: expected TPG_F32, TPG_F16 or TPG_BF16", (int)dtype);
  TPG_CHECK_ARG(where == TPG_MEM_DEVICE || where == TPG_MEM_HOST || where == TPG_MEM_SCRATCH,
                "where is %d: expected TPG_MEM_DEVICE, TPG_MEM_HOST or TPG_MEM_SCRATCH", (int)where);
  size_t bytes;
  TPG_CHECK_ARG(count > 0, "count of slot \"%s\" is 0: expected >= 1 element", name);
  TPG_CHECK_ARG(tpg_mul_ok(count, tpg_dtype_size(dtype), &bytes) && bytes <= ((size_t)1 << 48),
                "count of slot \"%s\" is %zu elements: larger than any GPU memory", name, count);
  if (!name_index_ready(p)) return TPG_FAIL(TPG_ERROR_OUT_OF_MEMORY, "out of host memory");
  int dup;
  size_t at = name_probe(p, name, &dup);
  TPG_CHECK_ARG(!dup, "name \"%s\" is already slot %d of this plan", name, dup);
  TPG_CHECK_ARG(p->nslots < TPG_MAX_SLOTS, "plan already has %d slots (the limit)", TPG_MAX_SLOTS);
  if (p->nslots == p->capslots) {
    int cap = p->capslots ? 2 * p->capslots : 16;
    tpg_slot_rec *s = realloc(p->slots, (size_t)cap * sizeof *s);
    if (!s) return TPG_FAIL(TPG_ERROR_OUT_OF_MEMORY, "out of host memory");
    p->slots = s;
    p->capslots = cap;
  }
  char *nm = dup_str(name);
  if (!nm) return TPG_FAIL(TPG_ERROR_OUT_OF_MEMORY, "out of host memory");
  p->slots[p->nslots] = (tpg_slot_rec){nm, dtype, where, count};
  p->nslots++;
  p->name_idx[at] = p->nslots;
  *out = (tpg_slot)p->nslots;
  return TPG_SUCCESS;
}

tpg_status tpg_plan_find_slot(const tpg_plan *p, const char *name, tpg_slot *out) {
  tpg_err_clear();
  if (out) *out = TPG_SLOT_NONE;
  TPG_TRY(tpg_plan_check(p, __func__, "plan"));
  TPG_CHECK_ARG(name != NULL, "name is NULL: expected a slot name");
  TPG_CHECK_ARG(out != NULL, "out is NULL: expected a tpg_slot to set");
  tpg_plan *w = (tpg_plan *)p; /* the index is a cache: building it changes nothing observable */
  int found = 0;
  if (name_index_ready(w)) name_probe(w, name, &found);
  else
    for (int i = 0; i < p->nslots && !found; i++) found = strcmp(p->slots[i].name, name) == 0 ? i + 1 : 0;
  if (found) {
    *out = (tpg_slot)found;
    return TPG_SUCCESS;
  }
  return TPG_ARG_FAIL("no slot named \"%s\" in this plan", name);
}

/* A view of `need` elements: the slot exists, the range fits, and the start is
 * `align` bytes aligned within the slot (buffers are checked at bind time). */
tpg_status tpg_view_check(const tpg_plan *p, const char *fn, const char *what, tpg_view v, size_t need,
                             size_t align) {
  if (v.slot == TPG_SLOT_NONE || v.slot > (tpg_slot)p->nslots)
    return tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn, "%s.slot is %u: not a slot of this plan (expected 1..%d)", what,
                   v.slot, p->nslots);
  if (v.reserved_ != 0)
    return tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn, "%s.reserved_ is %u: expected 0 (a view is {slot, 0, offset})", what,
                   v.reserved_);
  const tpg_slot_rec *s = &p->slots[v.slot - 1];
  if (align > 1 && (v.offset * tpg_dtype_size(s->dtype)) % align != 0)
    return tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn,
                   "%s: offset %llu of slot \"%s\" is not %zu-byte aligned (expected a multiple of %zu elements)", what,
                   (unsigned long long)v.offset, s->name, align, align / tpg_dtype_size(s->dtype));
  if (v.offset > s->count || need > s->count - v.offset)
    return tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn,
                   "%s: elements [%llu, %llu + %zu) fall outside slot \"%s\" (%zu elements)", what,
                   (unsigned long long)v.offset, (unsigned long long)v.offset, need, s->name, s->count);
  return TPG_SUCCESS;
}

tpg_status tpg_view_check_dtype(const tpg_plan *p, const char *fn, const char *what, tpg_view v, tpg_dtype want) {
  const tpg_slot_rec *s = &p->slots[v.slot - 1];
  if (s->dtype != want) {
    static const char *nm[] = {"f32", "f16", "bf16"};
    return tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn, "%s: slot \"%s\" holds %s: expected %s (dtype mismatch)", what,
                   s->name, nm[s->dtype], nm[want]);
  }
  return TPG_SUCCESS;
}

tpg_status tpg_view_check_device(const tpg_plan *p, const char *fn, const char *what, tpg_view v) {
  const tpg_slot_rec *s = &p->slots[v.slot - 1];
  if (s->where == TPG_MEM_HOST)
    return tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn, "%s: slot \"%s\" is host memory: expected a device slot", what,
                   s->name);
  return TPG_SUCCESS;
}

tpg_status tpg_plan_check_view(const tpg_plan *p, const char *fn, const char *what, tpg_view v, size_t need,
                               size_t align, tpg_dtype dtype) {
  TPG_TRY(tpg_view_check(p, fn, what, v, need, align));
  TPG_TRY(tpg_view_check_dtype(p, fn, what, v, dtype));
  return tpg_view_check_device(p, fn, what, v);
}

void tpg_plan_truncate(tpg_plan *p, int nnodes) {
  while (p->nnodes > nnodes) {
    p->nnodes--;
    free(p->nodes[p->nnodes].name);
    free(p->nodes[p->nnodes].deps);
    free(p->nodes[p->nnodes].data);
  }
  if (p->scope >= p->nnodes) p->scope = -1; /* the open body's node is gone */
  for (int c = 0; c < p->nconds; c++)
    if (p->conds[c].node >= p->nnodes) p->conds[c].node = -1;
  tpg_plan_drop_indexes(p);
}

/* Appending copies records as clone does (data is position-independent),
 * with indices moved by the nodes already in p; views keep their slot ids,
 * which is why src's slots must be p's first ones. */
static tpg_status plan_append(tpg_plan *p, const tpg_plan *src, tpg_node *nodes) {
  TPG_TRY(tpg_plan_check(p, __func__, "plan"));
  TPG_TRY(tpg_plan_check(src, __func__, "src"));
  TPG_CHECK_ARG(src != p, "src is plan: expected another plan");
  TPG_CHECK_ARG(src->nconds == 0, "src has %d condition%s: conditional plans cannot be appended (build the bodies "
                "in plan itself)", src->nconds, src->nconds == 1 ? "" : "s");
  TPG_CHECK_ARG(src->scope < 0, "src has an open body (tpg_plan_body_end it first)");
  TPG_CHECK_ARG(src->nslots <= p->nslots, "src has %d slots, plan %d: src's slots must be plan's first ones",
                src->nslots, p->nslots);
  for (int s = 0; s < src->nslots; s++) {
    const tpg_slot_rec *a = &p->slots[s], *b = &src->slots[s];
    TPG_CHECK_ARG(!strcmp(a->name, b->name) && a->dtype == b->dtype && a->where == b->where,
                  "src's slot %d is \"%s\" (dtype %d, memory %d) but plan's is \"%s\" (dtype %d, memory %d): src's "
                  "slots must be plan's first ones, in order",
                  s + 1, b->name, (int)b->dtype, (int)b->where, a->name, (int)a->dtype, (int)a->where);
    TPG_CHECK_ARG(b->count <= a->count,
                  "src's slot \"%s\" has %zu elements, plan's %zu: build plan for the largest shape", b->name,
                  b->count, a->count);
  }
  TPG_CHECK_ARG(p->nnodes + src->nnodes <= TPG_MAX_NODES, "plan has %d nodes and src %d: more than the limit %d",
                p->nnodes, src->nnodes, TPG_MAX_NODES);
  const int base = p->nnodes;
  tpg_status st = TPG_SUCCESS;
  char lb[160];
  for (int i = 0; i < src->nnodes && st == TPG_SUCCESS; i++) {
    const tpg_node_rec *s = &src->nodes[i];
    if (p->scope >= 0 && tpg_kind(s->kind)->in_body) {
      st = tpg_kind(s->kind)->in_body(p, __func__, s, tpg_node_label(p, p->scope, lb, sizeof lb));
      if (st != TPG_SUCCESS) break;
    }
    if (p->nnodes == p->capnodes) {
      int cap = p->capnodes ? 2 * p->capnodes : 32;
      tpg_node_rec *n = realloc(p->nodes, (size_t)cap * sizeof *n);
      if (!n) {
        st = TPG_FAIL(TPG_ERROR_OUT_OF_MEMORY, "out of host memory");
        break;
      }
      p->nodes = n;
      p->capnodes = cap;
    }
    tpg_node_rec *d = &p->nodes[p->nnodes];
    *d = *s;
    d->name = NULL;
    d->deps = NULL;
    d->data = NULL;
    d->ndeps = d->capdeps = 0;
    d->parent = p->scope;
    d->body = p->scope < 0 ? 0 : p->scope_body;
    p->nnodes++; /* from here the node is the plan's: truncate frees it on failure */
    if ((s->name && !(d->name = dup_str(s->name))) ||
        (s->data && !(d->data = malloc(s->data_bytes ? s->data_bytes : 1))) ||
        (s->ndeps && !(d->deps = malloc((size_t)s->ndeps * sizeof *d->deps)))) {
      st = TPG_FAIL(TPG_ERROR_OUT_OF_MEMORY, "out of host memory");
      break;
    }
    if (s->data) memcpy(d->data, s->data, s->data_bytes);
    for (int j = 0; j < s->ndeps; j++) d->deps[j] = s->deps[j] + base;
    d->ndeps = d->capdeps = s->ndeps;
  }
  if (st != TPG_SUCCESS) {
    tpg_plan_truncate(p, base);
    return st;
  }
  tpg_plan_drop_indexes(p);
  for (int i = 0; nodes && i < src->nnodes; i++) nodes[i] = ((uint64_t)p->serial << 32) | (uint64_t)(base + i + 1);
  return TPG_SUCCESS;
}

tpg_status tpg_plan_append(tpg_plan *p, const tpg_plan *src, tpg_node *nodes) {
  tpg_err_clear();
  return tpg_err_public(plan_append(p, src, nodes), __func__);
}

/* Slots are compared as tpg_plan_append compares them, so a copy that
 * succeeds is exactly what an append of src needs. */
static tpg_status plan_copy_slots(tpg_plan *p, const tpg_plan *src, int *added) {
  if (added) *added = 0;
  TPG_TRY(tpg_plan_check(p, __func__, "plan"));
  TPG_TRY(tpg_plan_check(src, __func__, "src"));
  TPG_CHECK_ARG(src != p, "src is plan: expected another plan");
  const int keep = p->nslots < src->nslots ? p->nslots : src->nslots;
  for (int s = 0; s < keep; s++) {
    const tpg_slot_rec *a = &p->slots[s], *b = &src->slots[s];
    TPG_CHECK_ARG(!strcmp(a->name, b->name) && a->dtype == b->dtype && a->where == b->where,
                  "plan's slot %d is \"%s\" (dtype %d, memory %d) but src's is \"%s\" (dtype %d, memory %d): "
                  "plan's slots must be src's first ones, in order", s + 1, a->name, (int)a->dtype, (int)a->where,
                  b->name, (int)b->dtype, (int)b->where);
    TPG_CHECK_ARG(b->count <= a->count,
                  "src's slot \"%s\" has %zu elements, plan's %zu: copy from the plan of the largest shape first",
                  b->name, b->count, a->count);
  }
  const int before = p->nslots;
  for (int s = keep; s < src->nslots; s++) {
    const tpg_slot_rec *b = &src->slots[s];
    tpg_slot got;
    tpg_status st = tpg_plan_add_slot(p, b->name, b->dtype, b->where, b->count, &got);
    if (st != TPG_SUCCESS) {
      char msg[1024];
      snprintf(msg, sizeof msg, "%s", tpg_last_error());
      while (p->nslots > before) free(p->slots[--p->nslots].name);
      tpg_plan_drop_indexes(p);
      const char *rest = strstr(msg, ": ");
      return tpg_err(st, __func__, "slot %d (\"%s\"): %s", s + 1, b->name, rest ? rest + 2 : msg);
    }
  }
  if (added) *added = p->nslots - before;
  return TPG_SUCCESS;
}

tpg_status tpg_plan_copy_slots(tpg_plan *p, const tpg_plan *src, int *added) {
  tpg_err_clear();
  return tpg_err_public(plan_copy_slots(p, src, added), __func__);
}

int tpg_node_inside(const tpg_plan *p, int i, int c) {
  for (int a = p->nodes[i].parent; a >= 0; a = p->nodes[a].parent)
    if (a == c) return 1;
  return 0;
}
/* ---- nodes -------------------------------------------------------------- */

/* Index of a node handle of plan p, or -1. */
int tpg_plan_node_index(const tpg_plan *p, tpg_node n) {
  uint32_t serial = (uint32_t)(n >> 32);
  uint32_t idx1 = (uint32_t)(n & 0xffffffffu);
  if (serial != p->serial || idx1 == 0 || idx1 > (uint32_t)p->nnodes) return -1;
  return (int)idx1 - 1;
}

struct dep_at {
  tpg_node node;
  int at;
};

static int cmp_dep_at(const void *a, const void *b) {
  const struct dep_at *x = a, *y = b;
  if (x->node != y->node) return x->node < y->node ? -1 : 1;
  return x->at < y->at ? -1 : x->at > y->at;
}

tpg_status tpg_plan_check_deps(const tpg_plan *p, const char *fn, const tpg_node *deps, int ndeps) {
  if (ndeps < 0) return tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn, "ndeps is %d: expected >= 0", ndeps);
  if (ndeps > 0 && !deps)
    return tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn, "deps is NULL but ndeps is %d: expected %d node handles", ndeps,
                   ndeps);
  for (int i = 0; i < ndeps; i++) {
    if (tpg_plan_node_index(p, deps[i]) < 0) {
      uint32_t serial = (uint32_t)(deps[i] >> 32);
      if (serial != p->serial && serial != 0)
        return tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn, "deps[%d] is a node of another plan: expected a node of this plan",
                       i);
      return tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn, "deps[%d] (0x%llx) is not a node of this plan", i,
                     (unsigned long long)deps[i]);
    }
    if (ndeps <= 32)
      for (int j = 0; j < i; j++)
        if (deps[j] == deps[i])
          return tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn, "deps[%d] repeats deps[%d]: expected each node once", i, j);
  }
  if (ndeps > 32) { /* many: sort (handle, index) pairs, n log n; name the earliest repeat */
    struct dep_at *c = malloc((size_t)ndeps * sizeof *c);
    if (!c) return tpg_err(TPG_ERROR_OUT_OF_MEMORY, fn, "out of host memory");
    for (int i = 0; i < ndeps; i++) c[i] = (struct dep_at){deps[i], i};
    qsort(c, (size_t)ndeps, sizeof *c, cmp_dep_at);
    int ri = -1, rj = -1;
    for (int k = 1; k < ndeps; k++) /* within a run of equal handles, indices ascend */
      if (c[k].node == c[k - 1].node && (k < 2 || c[k - 2].node != c[k].node) && (ri < 0 || c[k].at < ri)) {
        ri = c[k].at;
        rj = c[k - 1].at;
      }
    free(c);
    if (ri >= 0)
      return tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn, "deps[%d] repeats deps[%d]: expected each node once", ri, rj);
  }
  return TPG_SUCCESS;
}

tpg_status tpg_plan_push_node(tpg_plan *p, const char *fn, tpg_node_rec *rec, const tpg_node *deps, int ndeps,
                            tpg_node *out) {
  if (p->nnodes >= TPG_MAX_NODES)
    return tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn, "plan already has %d nodes (the limit)", TPG_MAX_NODES);
  if (p->nnodes == p->capnodes) {
    int cap = p->capnodes ? 2 * p->capnodes : 32;
    tpg_node_rec *n = realloc(p->nodes, (size_t)cap * sizeof *n);
    if (!n) return tpg_err(TPG_ERROR_OUT_OF_MEMORY, fn, "out of host memory");
    p->nodes = n;
    p->capnodes = cap;
  }
  rec->name = NULL;
  rec->deps = NULL;
  rec->ndeps = rec->capdeps = 0;
  rec->parent = p->scope;
  rec->body = p->scope < 0 ? 0 : p->scope_body;
  /* A body is a graph of its own (a conditional node's body graph): edges
   * stay inside it. */
  for (int i = 0; i < ndeps; i++) {
    const tpg_node_rec *d = &p->nodes[tpg_plan_node_index(p, deps[i])];
    if (tpg_node_scope_key(d) != tpg_node_scope_key(rec)) {
      char lb[160], pl[160];
      const char *where = rec->parent < 0 ? "the top level" : "an open body";
      if (rec->parent >= 0) {
        snprintf(pl, sizeof pl, "body %d of %s", rec->body, tpg_node_label(p, rec->parent, lb, sizeof lb));
        where = pl;
      }
      return tpg_err(TPG_ERROR_INVALID_ARGUMENT, fn,
                     "deps[%d] is in %s, but the new node goes into %s: a node may depend only on nodes of "
                     "the same body (tpg_plan_body_begin / _end)",
                     i, d->parent < 0 ? "the top level" : "another conditional body", where);
    }
  }
  if (rec->parent >= 0) {
    const tpg_kind_ops *k = tpg_kind(rec->kind);
    if (k->in_body) {
      char lb[160];
      TPG_TRY(k->in_body(p, fn, rec, tpg_node_label(p, rec->parent, lb, sizeof lb)));
    }
  }
  if (ndeps > 0) {
    rec->deps = malloc((size_t)ndeps * sizeof *rec->deps);
    if (!rec->deps) return tpg_err(TPG_ERROR_OUT_OF_MEMORY, fn, "out of host memory");
    for (int i = 0; i < ndeps; i++) rec->deps[i] = tpg_plan_node_index(p, deps[i]);
    rec->ndeps = rec->capdeps = ndeps;
  }
  if (p->edge_set) { /* keep the set whole, or drop it (rebuilt on the next add_dependency) */
    if ((p->nedges + (size_t)ndeps + 1) * 2 > p->edge_cap) {
      free(p->edge_set);
      p->edge_set = NULL;
      p->edge_cap = p->nedges = 0;
    } else {
      for (int i = 0; i < ndeps; i++) {
        int found;
        size_t at = edge_probe(p, edge_key(rec->deps[i], p->nnodes), &found);
        if (!found) {
          p->edge_set[at] = edge_key(rec->deps[i], p->nnodes);
          p->nedges++;
        }
      }
    }
  }
  p->nodes[p->nnodes] = *rec;
  p->nnodes++;
  if (out) *out = ((uint64_t)p->serial << 32) | (uint64_t)p->nnodes;
  return TPG_SUCCESS;
}

tpg_status tpg_plan_add_dependency(tpg_plan *p, tpg_node from, tpg_node to) {
  tpg_err_clear();
  TPG_TRY(tpg_plan_check(p, __func__, "plan"));
  int f = tpg_plan_node_index(p, from), t = tpg_plan_node_index(p, to);
  TPG_CHECK_ARG(f >= 0, "from (0x%llx) is not a node of this plan", (unsigned long long)from);
  TPG_CHECK_ARG(t >= 0, "to (0x%llx) is not a node of this plan", (unsigned long long)to);
  TPG_CHECK_ARG(f != t, "from and to are the same node: a node cannot wait for itself");
  TPG_CHECK_ARG(tpg_node_scope_key(&p->nodes[f]) == tpg_node_scope_key(&p->nodes[t]),
                "from and to are in different scopes (the top level or conditional bodies): an edge stays inside "
                "one body");
  tpg_node_rec *n = &p->nodes[t];
  if (!edge_set_ready(p)) return TPG_FAIL(TPG_ERROR_OUT_OF_MEMORY, "out of host memory");
  int dup;
  size_t at = edge_probe(p, edge_key(f, t), &dup);
  TPG_CHECK_ARG(!dup, "to already depends on from: expected each edge once");
  if (n->ndeps == n->capdeps) {
    int cap = n->capdeps ? 2 * n->capdeps : 4;
    int *d = realloc(n->deps, (size_t)cap * sizeof *d);
    if (!d) return TPG_FAIL(TPG_ERROR_OUT_OF_MEMORY, "out of host memory");
    n->deps = d;
    n->capdeps = cap;
  }
  n->deps[n->ndeps++] = f;
  p->edge_set[at] = edge_key(f, t);
  p->nedges++;
  return TPG_SUCCESS;
}

tpg_status tpg_plan_set_node_name(tpg_plan *p, tpg_node node, const char *name) {
  tpg_err_clear();
  TPG_TRY(tpg_plan_check(p, __func__, "plan"));
  int i = tpg_plan_node_index(p, node);
  TPG_CHECK_ARG(i >= 0, "node (0x%llx) is not a node of this plan", (unsigned long long)node);
  TPG_CHECK_ARG(name != NULL && name[0], "name is NULL or empty: expected a label");
  TPG_CHECK_ARG(strlen(name) < TPG_MAX_NAME, "name is %zu bytes long: expected < %d", strlen(name), TPG_MAX_NAME);
  char *nm = dup_str(name);
  if (!nm) return TPG_FAIL(TPG_ERROR_OUT_OF_MEMORY, "out of host memory");
  free(p->nodes[i].name);
  p->nodes[i].name = nm;
  return TPG_SUCCESS;
}

/* ---- public accessors for layers built on the API ---------------------- */

tpg_status tpg_plan_set_ranks(tpg_plan *p, int nranks) {
  tpg_err_clear();
  TPG_TRY(tpg_plan_check(p, __func__, "plan"));
  TPG_CHECK_ARG(nranks >= 1 && nranks <= 4096, "nranks is %d: expected 1..4096", nranks);
  TPG_CHECK_ARG(p->coll_ranks == 0 || p->coll_ranks == nranks,
                "nranks is %d but the plan is already sharded for %d ranks: one plan is one rank's part of one "
                "comm", nranks, p->coll_ranks);
  p->coll_ranks = nranks;
  return TPG_SUCCESS;
}

tpg_status tpg_plan_get_slot_info(const tpg_plan *p, tpg_slot slot, tpg_slot_info *out, size_t size) {
  tpg_err_clear();
  TPG_TRY(tpg_plan_check(p, __func__, "plan"));
  TPG_CHECK_ARG(out != NULL, "out is NULL: expected a tpg_slot_info to fill");
  TPG_CHECK_ARG(slot != TPG_SLOT_NONE && slot <= (tpg_slot)p->nslots,
                "slot is %u: not a slot of this plan (expected 1..%d)", slot, p->nslots);
  const tpg_slot_rec *s = &p->slots[slot - 1];
  tpg_slot_info info;
  memset(&info, 0, sizeof info);
  info.name = s->name;
  info.dtype = s->dtype;
  info.where = s->where;
  info.count = s->count;
  return tpg_out_copy(out, size, &info, sizeof info, offsetof(tpg_slot_info, count) + sizeof(size_t), __func__,
                      "tpg_slot_info");
}

tpg_status tpg_plan_checkpoint(const tpg_plan *p, tpg_plan_mark *out) {
  tpg_err_clear();
  TPG_TRY(tpg_plan_check(p, __func__, "plan"));
  TPG_CHECK_ARG(out != NULL, "out is NULL: expected a tpg_plan_mark to fill");
  out->serial_ = p->serial;
  out->nodes_ = (uint32_t)p->nnodes;
  out->slots_ = (uint32_t)p->nslots;
  out->reserved_ = 0;
  return TPG_SUCCESS;
}

tpg_status tpg_plan_rollback(tpg_plan *p, tpg_plan_mark m) {
  tpg_err_clear();
  TPG_TRY(tpg_plan_check(p, __func__, "plan"));
  TPG_CHECK_ARG(m.serial_ == p->serial && m.reserved_ == 0, "mark is not a mark of this plan (tpg_plan_checkpoint)");
  TPG_CHECK_ARG(m.nodes_ <= (uint32_t)p->nnodes && m.slots_ <= (uint32_t)p->nslots,
                "mark is past the plan's end (%u nodes, %u slots; the plan has %d, %d): rolled back already?",
                m.nodes_, m.slots_, p->nnodes, p->nslots);
  tpg_plan_truncate(p, (int)m.nodes_);
  /* Edges from older nodes to dropped ones (tpg_plan_add_dependency). */
  for (int i = 0; i < p->nnodes; i++) {
    tpg_node_rec *n = &p->nodes[i];
    int k = 0;
    for (int j = 0; j < n->ndeps; j++)
      if (n->deps[j] < (int)m.nodes_) n->deps[k++] = n->deps[j];
    n->ndeps = k;
  }
  while (p->nslots > (int)m.slots_) free(p->slots[--p->nslots].name);
  tpg_plan_drop_indexes(p);
  return TPG_SUCCESS;
}
