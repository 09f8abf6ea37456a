/* plan_fuzz.c - libFuzzer harness for the public plan/builder API.
 *
 * The input is a program: each step reads an opcode and its arguments from the
 * bytes and calls one public function (plan create/destroy, add_slot, every
 * add_* node kind (collectives with every all-reduce epilogue field and
 * the pre-epilogue desc size), add_dependency, set_node_name, validate, stats, dot,
 * find_slot, tpg_plan_mlp, tpg_plan_add_linear (and its concat node and
 * weight sharding), graph_create, and the comm/device calls that need
 * a driver) with values that are valid, just invalid, or absurd; node calls
 * sometimes pass an out that aliases one of their deps. A shadow model of each
 * plan (slots, node handles, edges) lets the harness check what the header
 * promises, not just "no crash":
 *   - every call returns a tpg_status; a failure leaves a non-empty message
 *     and OUT handles NULL/0, a success leaves no message;
 *   - add_slot, add_empty, add_dependency, set_node_name, find_slot, stats and
 *     validate behave exactly as the model predicts (validate fails iff the
 *     plan is empty or has a cycle);
 *   - an accepted node never addresses elements outside its slots;
 *   - dot sizes, fills and truncates as documented, and names cannot break
 *     its strings;
 *   - an accepted MLP stack validates and has the counts its layout implies;
 *   - a linear layer adds exactly the nodes its kind lists, chained, or
 *     nothing (a refused call leaves the plan as it was);
 *   - the kit's builders (engine kernels, captured work, host and event
 *     nodes) accept only what the header allows (one way of naming the
 *     kernel, launch shapes, argument kinds and sizes, views inside their
 *     slots), copy what they keep, and add nothing when they refuse;
 *   - graph_create never succeeds here (no driver: TPG_LIBCUDA points at
 *     nothing) and never crashes.
 * A broken promise calls abort(), which libFuzzer reports with the input.
 * ASan's LeakSanitizer checks that failing calls free what they took.
 *
 * Build and run: tests/fuzz/run.sh [seconds].
 */
#define _POSIX_C_SOURCE 200809L
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/module.h" /* a module handle the plan accepts without a driver */
#include "lib/handle.h"
#include "lib/tpgraph.h"

/* Small on purpose: bounded per-input cost keeps the exec rate high, and
 * the model's edge matrix stays a few kilobytes. */
#define NPLANS 3
#define MAXS 48
#define MAXN 128
#define MAXOPS 400
#define NGRAVE 8

/* ---- reading the input -------------------------------------------------- */

typedef struct {
  const uint8_t *p;
  size_t n;
} rd;

static uint8_t u8(rd *r) {
  if (!r->n) return 0;
  r->n--;
  return *r->p++;
}
/* Little-endian, one statement per read: C leaves the order of two calls in
 * one expression open, and an input must decode the same everywhere. */
static uint16_t u16(rd *r) {
  uint16_t lo = u8(r);
  return (uint16_t)(lo | (u8(r) << 8));
}
static uint32_t u32(rd *r) {
  uint32_t lo = u16(r);
  return lo | ((uint32_t)u16(r) << 16);
}
static uint64_t u64(rd *r) {
  uint64_t lo = u32(r);
  return lo | ((uint64_t)u32(r) << 32);
}

/* ---- the model ---------------------------------------------------------- */

typedef struct {
  char *name;
  tpg_dtype dtype;
  tpg_memory where;
  size_t count;
} mslot;

typedef struct {
  tpg_plan *p; /* NULL: this plan index is free */
  int nslots, nnodes, ncoll;
  int ranks; /* what tpg_plan_add_linear set with its collectives (tpg_plan_set_ranks); 0: never */
  mslot slots[MAXS];
  tpg_node h[MAXN];         /* handle of node i; 0: unknown (added with out NULL) */
  uint64_t dep[MAXN][MAXN / 64]; /* dep[to] bit from: `to` waits for `from` */
} mplan;

static mplan P[NPLANS];
static tpg_node grave[NGRAVE]; /* handles of destroyed plans */
static int ngrave;

static void fail_at(int line, const char *what) {
  fprintf(stderr, "plan_fuzz.c:%d: broken promise: %s\n  last error: \"%s\"\n", line, what, tpg_last_error());
  abort();
}
#define REQUIRE(cond)                      \
  do {                                     \
    if (!(cond)) fail_at(__LINE__, #cond); \
  } while (0)

/* The conventions every call keeps. */
static tpg_status checked(tpg_status st, int line) {
  if ((int)st < 0 || st >= TPG_STATUS_COUNT) fail_at(line, "status out of range");
  const char *m = tpg_last_error();
  if (!m) fail_at(line, "tpg_last_error() is NULL");
  if (st != TPG_SUCCESS && (m[0] == '\0' || strncmp(m, "tpg_", 4) != 0))
    fail_at(line, "a failure without a message naming the function");
  if (st == TPG_SUCCESS && m[0] != '\0') fail_at(line, "a success left an error message");
  if (strlen(tpg_status_string(st)) == 0) fail_at(line, "empty status string");
  return st;
}
#define CALL(x) checked((x), __LINE__)

static void model_reset(mplan *m) {
  for (int i = 0; i < m->nslots; i++) free(m->slots[i].name);
  memset(m, 0, sizeof *m);
}

static int node_of(const mplan *m, tpg_node h) {
  if (h == 0) return -1;
  for (int i = 0; i < m->nnodes; i++)
    if (m->h[i] == h) return i;
  return -1;
}

static int has_edge(const mplan *m, int from, int to) { return (int)((m->dep[to][from / 64] >> (from % 64)) & 1); }
static void set_edge(mplan *m, int from, int to) { m->dep[to][from / 64] |= (uint64_t)1 << (from % 64); }

static int acyclic(const mplan *m) {
  int indeg[MAXN], done = 0, q[MAXN], head = 0, tail = 0;
  for (int t = 0; t < m->nnodes; t++) {
    indeg[t] = 0;
    for (int f = 0; f < m->nnodes; f++) indeg[t] += has_edge(m, f, t);
    if (!indeg[t]) q[tail++] = t;
  }
  while (head < tail) {
    int u = q[head++];
    done++;
    for (int t = 0; t < m->nnodes; t++)
      if (has_edge(m, u, t) && --indeg[t] == 0) q[tail++] = t;
  }
  return done == m->nnodes;
}

/* A view that an accepted node uses must lie inside its slot. */
static void require_inside(const mplan *m, tpg_view v, size_t need, int line) {
  if (v.slot == TPG_SLOT_NONE || v.slot > (tpg_slot)m->nslots) fail_at(line, "accepted a view of no slot");
  const mslot *s = &m->slots[v.slot - 1];
  if (v.offset > s->count || need > s->count - v.offset) fail_at(line, "accepted a view outside its slot");
}
static tpg_dtype dtype_of(const mplan *m, tpg_view v) { return m->slots[v.slot - 1].dtype; }

/* ---- choosing arguments ------------------------------------------------- */

static mplan *pick_plan_idx(rd *r) { return &P[u8(r) % NPLANS]; }

static char fake_plan[512] __attribute__((aligned(16))); /* zeros: not a live plan */

/* The plan pointer to pass: usually the live one, sometimes NULL or junk. */
/* Memory kinds the library accepts, probed once (LLVMFuzzerInitialize): the
 * model follows the header the harness is built against. */
static int mem_kind_ok[8];
static int mem_ok(tpg_memory w) { return (unsigned)w < 8 && mem_kind_ok[w]; }

static tpg_plan *plan_arg(rd *r, const mplan *m, int *ok) {
  uint8_t c = u8(r) % 16;
  *ok = 0;
  if (c == 0) return NULL;
  if (c == 1) return (tpg_plan *)fake_plan;
  *ok = m->p != NULL;
  return m->p;
}

static size_t pick_size(rd *r) {
  switch (u8(r) % 14) {
    case 0: return 0;
    case 1: return 1;
    case 2: return 8;
    case 3: return 16;
    case 4: return 64;
    case 5: return 4096;
    case 6: return (size_t)1 << 46;
    case 7: return ((size_t)1 << 47) + 1;
    case 8: return SIZE_MAX;
    case 9: return SIZE_MAX / 2 + 1;
    case 10: return u16(r);
    case 11: return u64(r);
    case 12: return (size_t)(u8(r) + 1) * 8;
    default: return u8(r);
  }
}

static int pick_int(rd *r) {
  switch (u8(r) % 14) {
    case 0: return 0;
    case 1: return -8;
    case 2: return 1;
    case 3: return 8;
    case 4: return 16;
    case 5: return 64;
    case 6: return (u8(r) + 1) * 8;
    case 7: return INT_MAX;
    case 8: return INT_MIN;
    case 9: return (int)u32(r);
    case 10: return 7;
    case 11: return 1 << 20;
    case 12: return u8(r) % 9;
    default: return INT_MAX - 7;
  }
}

static tpg_dtype pick_dtype(rd *r) {
  switch (u8(r) % 6) {
    case 0: return TPG_F32;
    case 1: return TPG_F16;
    case 2: return TPG_BF16;
    case 3: return TPG_DTYPE_COUNT;
    case 4: return (tpg_dtype)-1;
    default: return (tpg_dtype)(int)u32(r);
  }
}

static tpg_slot pick_slot(rd *r, const mplan *m) {
  switch (u8(r) % 10) {
    case 0: return TPG_SLOT_NONE;
    case 1: return (tpg_slot)m->nslots + 1;
    case 2: return UINT32_MAX;
    case 3: return u32(r);
    default: return m->nslots ? (tpg_slot)(1 + u8(r) % m->nslots) : (tpg_slot)(u8(r) % 3);
  }
}

static uint64_t pick_offset(rd *r, const mplan *m, tpg_slot s) {
  size_t cnt = (s && s <= (tpg_slot)m->nslots) ? m->slots[s - 1].count : 64;
  switch (u8(r) % 12) {
    case 0: return 1;
    case 1: return 8;
    case 2: return 16;
    case 3: return u8(r);
    case 4: return cnt;
    case 5: return cnt > 8 ? cnt - 8 : 0;
    case 6: return (uint64_t)cnt + 1;
    case 7: return UINT64_MAX;
    case 8: return (uint64_t)1 << 63;
    case 9: return u64(r);
    default: return 0;
  }
}

static tpg_view pick_view(rd *r, const mplan *m) {
  tpg_view v;
  v.slot = pick_slot(r, m);
  v.reserved_ = (u8(r) % 8 == 0) ? u32(r) : 0;
  v.offset = pick_offset(r, m, v.slot);
  return v;
}

/* A count that often fits the view's slot exactly. */
static size_t pick_count(rd *r, const mplan *m, tpg_view v) {
  if (u8(r) % 2 && v.slot && v.slot <= (tpg_slot)m->nslots && v.offset <= m->slots[v.slot - 1].count) {
    size_t room = m->slots[v.slot - 1].count - (size_t)v.offset;
    return room ? 1 + (size_t)u32(r) % room : 0;
  }
  return pick_size(r);
}

static tpg_node pick_node(rd *r, const mplan *m) {
  switch (u8(r) % 10) {
    case 0: return 0;
    case 1: return u64(r);
    case 2: { /* a node of another live plan */
      const mplan *o = &P[u8(r) % NPLANS];
      return o->nnodes ? o->h[u8(r) % o->nnodes] : 0;
    }
    case 3: return ngrave ? grave[u8(r) % ngrave] : 1;
    case 4: { /* near this plan's last handle: one or two past it, its other half */
      tpg_node base = m->nnodes ? m->h[m->nnodes - 1] : 0;
      switch (u8(r) % 4) {
        case 0: return base + 1;
        case 1: return base + 2;
        case 2: return base & 0xffffffff00000000ull;
        default: return base | 0xffffffffull;
      }
    }
    default: return m->nnodes ? m->h[u8(r) % m->nnodes] : 0;
  }
}

/* deps/ndeps for a node call. *valid: what the header allows (nodes of this
 * plan, each once, ndeps >= 0, deps non-NULL when ndeps > 0). */
static tpg_node *pick_deps(rd *r, const mplan *m, int *ndeps, int *valid, int *idx, int *len) {
  uint8_t c = u8(r) % 10;
  *valid = 1;
  *len = 0;
  if (c == 0) { *ndeps = 0; return NULL; }
  if (c == 1) { *ndeps = 1 + u8(r) % 3; *valid = 0; return NULL; }
  if (c == 2) { *ndeps = -(int)(1 + u8(r) % 3); *valid = 0; return NULL; }
  int n = u8(r) % 6;
  tpg_node *d = malloc(((size_t)n ? (size_t)n : 1) * sizeof *d); /* exact size: ASan sees over-reads */
  if (!d) abort();
  for (int i = 0; i < n; i++) {
    d[i] = pick_node(r, m);
    idx[i] = node_of(m, d[i]);
    if (idx[i] < 0) *valid = 0;
    for (int j = 0; j < i; j++)
      if (d[j] == d[i]) *valid = 0;
  }
  *ndeps = n;
  *len = n;
  if (c == 3) { *ndeps = -n - 1; *valid = 0; }
  return d;
}

/* A heap copy of exactly strlen + 1 bytes, or NULL. */
static char *pick_name(rd *r, const mplan *m) {
  static const char *dict[] = {"x", "w", "y", "out", "bias", "a", "b", "res", "q\"uote", "back\\slash", "new\nline",
                               "tab\t", "{}[];", "<html>"};
  char tmp[300];
  switch (u8(r) % 10) {
    case 0: return NULL;
    case 1: tmp[0] = '\0'; break;
    case 2: case 3: snprintf(tmp, sizeof tmp, "%s", dict[u8(r) % (sizeof dict / sizeof *dict)]); break;
    case 4: snprintf(tmp, sizeof tmp, "s%u", u8(r) % 16); break;
    case 5: { /* raw bytes, up to 255 of them */
      int n = u8(r), k = 0;
      for (int i = 0; i < n; i++) {
        char ch = (char)u8(r);
        if (ch) tmp[k++] = ch;
      }
      tmp[k] = '\0';
      break;
    }
    case 6: { /* at the length limit */
      int n = 126 + u8(r) % 4;
      memset(tmp, 'n', (size_t)n);
      tmp[n] = '\0';
      break;
    }
    case 7:
      if (m->nslots) { snprintf(tmp, sizeof tmp, "%s", m->slots[u8(r) % m->nslots].name); break; }
      /* fall through */
    default: snprintf(tmp, sizeof tmp, "t%u", u16(r)); break;
  }
  size_t n = strlen(tmp) + 1;
  char *s = malloc(n);
  if (!s) abort();
  memcpy(s, tmp, n);
  return s;
}

/* ---- operations --------------------------------------------------------- */

static void op_create(rd *r) {
  mplan *m = pick_plan_idx(r);
  if (u8(r) % 16 == 0) {
    REQUIRE(CALL(tpg_plan_create(NULL)) == TPG_ERROR_INVALID_ARGUMENT);
    return;
  }
  if (m->p) return;
  tpg_plan *p = (tpg_plan *)fake_plan;
  REQUIRE(CALL(tpg_plan_create(&p)) == TPG_SUCCESS);
  REQUIRE(p != NULL && p != (tpg_plan *)fake_plan);
  model_reset(m);
  m->p = p;
}

static void op_destroy(rd *r) {
  mplan *m = pick_plan_idx(r);
  if (u8(r) % 8 == 0) tpg_plan_destroy(NULL);
  if (!m->p) return;
  for (int i = 0; i < m->nnodes && i < 2; i++) grave[(ngrave < NGRAVE ? ngrave++ : (int)(u8(r) % NGRAVE))] = m->h[i];
  tpg_plan_destroy(m->p);
  model_reset(m);
}

static void op_add_slot(rd *r) {
  mplan *m = pick_plan_idx(r);
  int ok;
  tpg_plan *p = plan_arg(r, m, &ok);
  char *name = pick_name(r, m);
  tpg_dtype dt = pick_dtype(r);
  tpg_memory where = (tpg_memory)(u8(r) % 8 == 0 ? (int)u32(r) : u8(r) % 4);
  size_t count = pick_size(r);
  int want_out = u8(r) % 16 != 0;
  if (ok && m->nslots >= MAXS) { free(name); return; }
  tpg_slot s = 0xabcdu;
  tpg_status st = CALL(tpg_plan_add_slot(p, name, dt, where, count, want_out ? &s : NULL));
  /* The model: every rule of tpg_plan_add_slot's reference. */
  size_t es = tpg_dtype_size(dt), bytes = es * count;
  int expect = ok && want_out && name && name[0] && strlen(name) < 128 && es != 0 &&
               mem_ok(where) && count > 0 && bytes / es == count &&
               bytes <= ((size_t)1 << 48);
  for (int i = 0; expect && i < m->nslots; i++)
    if (strcmp(m->slots[i].name, name) == 0) expect = 0;
  REQUIRE((st == TPG_SUCCESS) == expect);
  if (st != TPG_SUCCESS) {
    REQUIRE(!want_out || s == TPG_SLOT_NONE);
    free(name);
    return;
  }
  REQUIRE(s == (tpg_slot)m->nslots + 1); /* slots are numbered 1, 2, ... (TPG_SLOT_NONE is 0) */
  m->slots[m->nslots++] = (mslot){name, dt, where, count};
}

static void op_find_slot(rd *r) {
  mplan *m = pick_plan_idx(r);
  int ok;
  tpg_plan *p = plan_arg(r, m, &ok);
  char *name = pick_name(r, m);
  int want_out = u8(r) % 16 != 0;
  tpg_slot s = 0xabcdu;
  tpg_status st = CALL(tpg_plan_find_slot(p, name, want_out ? &s : NULL));
  int found = 0;
  for (int i = 0; ok && name && i < m->nslots; i++)
    if (strcmp(m->slots[i].name, name) == 0) found = i + 1;
  REQUIRE((st == TPG_SUCCESS) == (ok && want_out && found));
  if (want_out) REQUIRE(s == (tpg_slot)(st == TPG_SUCCESS ? found : 0));
  free(name);
}

/* Shared tail of every add_* node call. */
static void node_added(mplan *m, int ok, int deps_ok, tpg_status st, tpg_node out, int want_out, int ndeps,
                       const int *idx, int line) {
  if (!ok || !deps_ok) {
    if (st == TPG_SUCCESS) fail_at(line, "a node was accepted with a bad plan or bad deps");
  }
  if (st != TPG_SUCCESS) {
    if (want_out && out != 0) fail_at(line, "a failed add left *out set");
    return;
  }
  if (want_out) {
    if (out == 0) fail_at(line, "an added node's handle is 0");
    for (int q = 0; q < NPLANS; q++)
      if (node_of(&P[q], out) >= 0) fail_at(line, "a node handle was handed out twice");
    for (int g = 0; g < ngrave; g++)
      if (grave[g] == out) fail_at(line, "a node handle of a destroyed plan was reused");
  }
  int i = m->nnodes++;
  memset(m->dep[i], 0, sizeof m->dep[i]);
  m->h[i] = want_out ? out : 0; /* without *out the handle is unknown to us */
  for (int d = 0; d < ndeps; d++) set_edge(m, idx[d], i);
}

/* out is sometimes one of the deps themselves: "prev = add(prev)" is how a
 * chain is built, so the call must read deps before it writes out. */
#define NODE_ARGS                                     \
  mplan *m = pick_plan_idx(r);                        \
  int ok, ndeps, deps_ok, idx[8], ndeps_len;          \
  tpg_plan *p = plan_arg(r, m, &ok);                  \
  if (ok && m->nnodes >= MAXN) return;                \
  tpg_node *deps = pick_deps(r, m, &ndeps, &deps_ok, idx, &ndeps_len); \
  int want_out = u8(r) % 8 != 0;                      \
  tpg_node out_ = 0x5555;                             \
  tpg_node *outp = want_out ? &out_ : NULL;           \
  if (want_out && ndeps_len > 0 && u8(r) % 4 == 0) outp = &deps[u8(r) % ndeps_len]

#define NODE_DONE(st)                                              \
  node_added(m, ok, deps_ok, (st), want_out ? *outp : 0, want_out, ndeps, idx, __LINE__); \
  free(deps)

static void op_add_empty(rd *r) {
  NODE_ARGS;
  tpg_status st = CALL(tpg_plan_add_empty(p, deps, ndeps, outp));
  REQUIRE((st == TPG_SUCCESS) == (ok && deps_ok));
  NODE_DONE(st);
}

static void op_add_memset(rd *r) {
  NODE_ARGS;
  tpg_view dst = pick_view(r, m);
  size_t count = pick_count(r, m, dst);
  uint32_t value = u8(r) % 2 ? u16(r) : u32(r);
  tpg_status st = CALL(tpg_plan_add_memset(p, dst, value, count, deps, ndeps, outp));
  if (st == TPG_SUCCESS) {
    REQUIRE(count > 0);
    require_inside(m, dst, count, __LINE__);
    REQUIRE(tpg_dtype_size(dtype_of(m, dst)) == 4 || value <= 0xffffu);
  }
  NODE_DONE(st);
}

static void op_add_memcpy(rd *r) {
  NODE_ARGS;
  tpg_view dst = pick_view(r, m), src = u8(r) % 4 ? pick_view(r, m) : dst;
  if (u8(r) % 4 == 0) src.offset = dst.offset + u8(r);
  size_t count = pick_count(r, m, dst);
  tpg_status st = CALL(tpg_plan_add_memcpy(p, dst, src, count, deps, ndeps, outp));
  if (st == TPG_SUCCESS) {
    REQUIRE(count > 0);
    require_inside(m, dst, count, __LINE__);
    require_inside(m, src, count, __LINE__);
    REQUIRE(dtype_of(m, dst) == dtype_of(m, src));
    REQUIRE(m->slots[dst.slot - 1].where != TPG_MEM_HOST || m->slots[src.slot - 1].where != TPG_MEM_HOST);
    if (dst.slot == src.slot) REQUIRE(dst.offset + count <= src.offset || src.offset + count <= dst.offset);
  }
  NODE_DONE(st);
}

static void op_add_axpby(rd *r) {
  NODE_ARGS;
  tpg_view y = pick_view(r, m), x = pick_view(r, m);
  size_t count = pick_count(r, m, y);
  union { uint32_t u; float f; } a, b;
  a.u = u32(r);
  b.u = u8(r) % 2 ? 0x3f800000u : u32(r);
  tpg_status st = CALL(tpg_plan_add_axpby(p, y, x, count, a.f, b.f, deps, ndeps, outp));
  if (st == TPG_SUCCESS) {
    require_inside(m, y, count, __LINE__);
    require_inside(m, x, count, __LINE__);
    REQUIRE(dtype_of(m, x) == dtype_of(m, y));
  }
  NODE_DONE(st);
}

static int overlap(tpg_view a, size_t na, tpg_view b, size_t nb) {
  return a.slot && a.slot == b.slot && a.offset < b.offset + nb && b.offset < a.offset + na;
}

static void op_add_collective(rd *r) {
  NODE_ARGS;
  tpg_collective_desc c = TPG_COLLECTIVE_DESC_INIT;
  const size_t v1_size = offsetof(tpg_collective_desc, algo) + sizeof c.algo; /* the desc before the epilogue */
  if (u8(r) % 16 == 0) c.size = u8(r) % 2 ? v1_size : u8(r);
  c.kind = (tpg_collective)(u8(r) % 8 == 0 ? (int)u32(r) : u8(r) % 3);
  c.algo = (tpg_collective_algo)(u8(r) % 16 == 0 ? (int)u32(r) : u8(r) % 5);
  c.send = pick_view(r, m);
  c.recv = u8(r) % 3 ? pick_view(r, m) : c.send;
  c.count = pick_count(r, m, c.send);
  /* The epilogue: each view absent, picked, or the in-place residual. */
  if (u8(r) % 3 == 0) {
    uint8_t h = u8(r);
    c.hidden = h % 4 == 0 ? (size_t)u32(r) : h % 4 == 1 ? 8u * (1 + u8(r) % 8) : h % 4 == 2 ? c.count : 0;
    if (u8(r) % 2) c.bias = pick_view(r, m);
    if (u8(r) % 2) c.residual = pick_view(r, m);
    uint8_t ro = u8(r) % 3;
    if (ro == 1) c.residual_out = pick_view(r, m);
    if (ro == 2) c.residual_out = c.residual;
    if (u8(r) % 2) c.norm_weight = pick_view(r, m);
    union { uint32_t u; float f; } e;
    e.u = u32(r);
    if (u8(r) % 2) c.norm_eps = e.f;
  }
  int null_desc = u8(r) % 32 == 0;
  tpg_status st = CALL(tpg_plan_add_collective(p, null_desc ? NULL : &c, deps, ndeps, outp));
  if (st == TPG_SUCCESS) {
    REQUIRE(!null_desc && (c.size == sizeof c || c.size == v1_size) && (int)c.kind >= 0 &&
            c.kind < TPG_COLLECTIVE_COUNT);
    REQUIRE((int)c.algo >= TPG_ALGO_AUTO && c.algo <= TPG_ALGO_TWOSHOT);
    REQUIRE(c.kind == TPG_ALL_REDUCE || c.algo == TPG_ALGO_AUTO || c.algo == TPG_ALGO_NCCL);
    require_inside(m, c.send, c.count, __LINE__);
    require_inside(m, c.recv, c.count, __LINE__);
    REQUIRE(dtype_of(m, c.send) == dtype_of(m, c.recv));
    const int epi = c.bias.slot || c.residual.slot || c.residual_out.slot || c.norm_weight.slot;
    if (c.size == sizeof c) {
      REQUIRE(epi == (c.hidden != 0));
      if (epi) {
        /* The epilogue rules the header promises. */
        REQUIRE(c.kind == TPG_ALL_REDUCE && c.hidden % 8 == 0 && c.count % c.hidden == 0);
        const tpg_view v[4] = {c.bias, c.residual, c.residual_out, c.norm_weight};
        const size_t n[4] = {c.hidden, c.count, c.count, c.hidden};
        for (int k = 0; k < 4; k++)
          if (v[k].slot) {
            require_inside(m, v[k], n[k], __LINE__);
            REQUIRE(dtype_of(m, v[k]) == dtype_of(m, c.send));
          }
        if (c.norm_weight.slot) REQUIRE(c.norm_eps >= 0.0f && isfinite(c.norm_eps));
        if (c.residual_out.slot) {
          REQUIRE(!overlap(c.residual_out, c.count, c.send, c.count));
          REQUIRE(!overlap(c.residual_out, c.count, c.recv, c.count));
          REQUIRE(!overlap(c.residual_out, c.count, c.bias, c.hidden));
          REQUIRE(!overlap(c.residual_out, c.count, c.norm_weight, c.hidden));
          REQUIRE((c.residual_out.slot == c.residual.slot && c.residual_out.offset == c.residual.offset) ||
                  !overlap(c.residual_out, c.count, c.residual, c.count));
        }
        REQUIRE(!overlap(c.recv, c.count, c.residual, c.count));
        REQUIRE(!overlap(c.recv, c.count, c.bias, c.hidden));
        REQUIRE(!overlap(c.recv, c.count, c.norm_weight, c.hidden));
      }
    }
    m->ncoll++;
  }
  NODE_DONE(st);
}

static void op_add_gemm(rd *r) {
  NODE_ARGS;
  tpg_gemm_desc g = TPG_GEMM_DESC_INIT;
  const size_t v3_size = offsetof(tpg_gemm_desc, y_ssq); /* a 0.3 caller's desc: no folded norm */
  if (u8(r) % 16 == 0) g.size = u8(r) % 2 ? v3_size : u8(r);
  g.m = pick_int(r);
  g.n = pick_int(r);
  g.k = pick_int(r);
  g.dtype = u8(r) % 4 ? (tpg_dtype)(1 + u8(r) % 2) : pick_dtype(r);
  g.epilogue = (tpg_epilogue)(u8(r) % 8 == 0 ? (int)u32(r) : u8(r) % TPG_EPILOGUE_COUNT);
  g.x = pick_view(r, m);
  g.w = pick_view(r, m);
  g.y = pick_view(r, m);
  if (u8(r) % 2) g.bias = pick_view(r, m);
  if (u8(r) % 2) g.residual = pick_view(r, m);
  if (u8(r) % 4 == 0) g.sm_reserve = pick_int(r);
  int null_desc = u8(r) % 32 == 0;
  tpg_status st = CALL(tpg_plan_add_gemm(p, null_desc ? NULL : &g, deps, ndeps, outp));
  if (st == TPG_SUCCESS) {
    REQUIRE(!null_desc && (g.size == sizeof g || g.size == v3_size));
    REQUIRE(g.m >= 1 && g.n >= 8 && g.k >= 8 && g.n % 8 == 0 && g.k % 8 == 0);
    REQUIRE((int)g.epilogue >= 0 && g.epilogue < TPG_EPILOGUE_COUNT);
    REQUIRE(g.dtype == TPG_BF16 || g.dtype == TPG_F16);
    REQUIRE(g.sm_reserve >= 0); /* an SM count */
    size_t M = (size_t)g.m, N = (size_t)g.n, K = (size_t)g.k;
    size_t wrows = g.epilogue == TPG_EPILOGUE_SWIGLU ? 2 * N : N;
    require_inside(m, g.x, M * K, __LINE__);
    require_inside(m, g.w, wrows * K, __LINE__);
    require_inside(m, g.y, M * N, __LINE__);
    REQUIRE(dtype_of(m, g.x) == g.dtype && dtype_of(m, g.w) == g.dtype);
    REQUIRE(dtype_of(m, g.y) == (g.epilogue == TPG_EPILOGUE_F32_PARTIAL ? TPG_F32 : g.dtype));
    if (g.bias.slot) require_inside(m, g.bias, g.epilogue == TPG_EPILOGUE_SWIGLU ? 2 * N : N, __LINE__);
    if (g.residual.slot) require_inside(m, g.residual, M * N, __LINE__);
    if (g.x.slot == g.y.slot) REQUIRE(g.x.offset + M * K <= g.y.offset || g.y.offset + M * N <= g.x.offset);
  }
  NODE_DONE(st);
}

/* Adds a slot the model knows, under a name no slot of the plan has yet.
 * Returns TPG_SLOT_NONE when the plan is full (for the model). */
static tpg_slot kit_slot(mplan *m, const char *stem, tpg_dtype dt, size_t count) {
  if (m->nslots >= MAXS) return TPG_SLOT_NONE;
  char name[64];
  for (int t = 0;; t++) {
    int dup = 0;
    snprintf(name, sizeof name, "%s.%d.%d", stem, m->nslots, t);
    for (int i = 0; i < m->nslots; i++) dup |= strcmp(m->slots[i].name, name) == 0;
    if (!dup) break;
  }
  tpg_slot s = 0;
  REQUIRE(CALL(tpg_plan_add_slot(m->p, name, dt, TPG_MEM_DEVICE, count, &s)) == TPG_SUCCESS);
  REQUIRE(s == (tpg_slot)m->nslots + 1);
  size_t n = strlen(name) + 1;
  char *copy = malloc(n);
  if (!copy) abort();
  memcpy(copy, name, n);
  m->slots[m->nslots++] = (mslot){copy, dt, TPG_MEM_DEVICE, count};
  return s;
}

/* A GEMM whose slots exist and fit, then perhaps one field spoiled: random
 * descriptors almost never get past the first checks, and the rules deeper in
 * (epilogue operands, in-place overlap, DOT of GEMMs) need accepted ones. */
static void op_gemm_kit(rd *r) {
  mplan *m = pick_plan_idx(r);
  if (!m->p || m->nnodes >= MAXN || m->nslots + 5 > MAXS) return;
  tpg_gemm_desc g = TPG_GEMM_DESC_INIT;
  g.m = 1 + u8(r) % 64;
  g.n = 8 * (1 + u8(r) % 16);
  g.k = 8 * (1 + u8(r) % 16);
  g.dtype = u8(r) % 2 ? TPG_BF16 : TPG_F16;
  g.epilogue = (tpg_epilogue)(u8(r) % TPG_EPILOGUE_COUNT);
  size_t M = (size_t)g.m, N = (size_t)g.n, K = (size_t)g.k;
  int swiglu = g.epilogue == TPG_EPILOGUE_SWIGLU;
  int f32y = g.epilogue == TPG_EPILOGUE_F32_PARTIAL;
  uint8_t shared = u8(r) % 4; /* 0: x and y in one slot, side by side */
  g.x.slot = kit_slot(m, "x", g.dtype, shared == 0 && !f32y ? M * K + M * N + 8 : M * K);
  g.w.slot = kit_slot(m, "w", g.dtype, (swiglu ? 2 : 1) * N * K);
  if (shared == 0 && !f32y) {
    g.y.slot = g.x.slot;
    g.y.offset = (M * K + 7) / 8 * 8;
  } else {
    g.y.slot = kit_slot(m, "y", f32y ? TPG_F32 : g.dtype, M * N);
  }
  if (g.epilogue == TPG_EPILOGUE_BIAS || g.epilogue == TPG_EPILOGUE_BIAS_GELU || g.epilogue == TPG_EPILOGUE_BIAS_SILU ||
      ((swiglu || g.epilogue == TPG_EPILOGUE_RESIDUAL) && u8(r) % 2))
    g.bias.slot = kit_slot(m, "b", g.dtype, (swiglu ? 2 : 1) * N);
  if (g.epilogue == TPG_EPILOGUE_RESIDUAL) g.residual.slot = kit_slot(m, "r", g.dtype, M * N);
  /* Spoil one thing, sometimes. */
  switch (u8(r) % 12) {
    case 0: g.x.offset = pick_offset(r, m, g.x.slot); break;
    case 1: g.y.offset = pick_offset(r, m, g.y.slot); break;
    case 2: g.w = pick_view(r, m); break;
    case 3: g.bias = pick_view(r, m); break;
    case 4: g.residual = pick_view(r, m); break;
    case 5: g.m = pick_int(r); break;
    case 6: g.epilogue = (tpg_epilogue)(u8(r) % TPG_EPILOGUE_COUNT); break;
    case 7: g.y.slot = g.x.slot; g.y.offset = u8(r); break;
    case 8: g.sm_reserve = pick_int(r); break;
    default: break;
  }
  int ndeps = 0, deps_ok, idx[8], ndeps_len;
  tpg_node *deps = pick_deps(r, m, &ndeps, &deps_ok, idx, &ndeps_len);
  tpg_node out_ = 0x5555, *outp = &out_;
  if (ndeps_len > 0 && u8(r) % 4 == 0) outp = &deps[u8(r) % ndeps_len];
  tpg_status st = CALL(tpg_plan_add_gemm(m->p, &g, deps, ndeps, outp));
  tpg_node out = *outp;
  if (st == TPG_SUCCESS) {
    size_t wrows = g.epilogue == TPG_EPILOGUE_SWIGLU ? 2 * (size_t)g.n : (size_t)g.n;
    M = (size_t)g.m;
    require_inside(m, g.x, M * K, __LINE__);
    require_inside(m, g.w, wrows * K, __LINE__);
    require_inside(m, g.y, M * N, __LINE__);
    if (g.x.slot == g.y.slot) REQUIRE(g.x.offset + M * K <= g.y.offset || g.y.offset + M * N <= g.x.offset);
  }
  node_added(m, 1, deps_ok, st, out, 1, ndeps, idx, __LINE__);
  free(deps);
}

static void op_add_concat(rd *r) {
  NODE_ARGS;
  tpg_view dst = pick_view(r, m), src = u8(r) % 4 ? pick_view(r, m) : dst;
  if (u8(r) % 4 == 0) src.offset = dst.offset + u8(r);
  int blocks = u8(r) % 2 ? 1 + u8(r) % 8 : pick_int(r);
  int rows = u8(r) % 2 ? 1 + u8(r) % 8 : pick_int(r);
  int cols = u8(r) % 2 ? 1 + u8(r) % 64 : pick_int(r);
  tpg_status st = CALL(tpg_plan_add_concat_cols(p, dst, src, blocks, rows, cols, deps, ndeps, outp));
  if (st == TPG_SUCCESS) {
    REQUIRE(blocks >= 1 && rows >= 1 && cols >= 1);
    size_t n = (size_t)blocks * (size_t)rows * (size_t)cols; /* < 2^93 would wrap: inside a slot it did not */
    REQUIRE(n / (size_t)blocks / (size_t)rows == (size_t)cols);
    require_inside(m, dst, n, __LINE__);
    require_inside(m, src, n, __LINE__);
    REQUIRE(dtype_of(m, dst) == dtype_of(m, src));
    REQUIRE(m->slots[dst.slot - 1].where != TPG_MEM_HOST && m->slots[src.slot - 1].where != TPG_MEM_HOST);
    if (dst.slot == src.slot) REQUIRE(dst.offset + n <= src.offset || src.offset + n <= dst.offset);
  }
  NODE_DONE(st);
}

/* A tensor-parallel linear whose slots exist and fit, then perhaps one field
 * spoiled. The header's promises: a layer adds exactly the nodes it lists
 * (1-3, one collective when ranks are summed or gathered), chained after
 * deps, or nothing at all; *out is its last node or 0. */
static void op_linear_kit(rd *r) {
  mplan *m = pick_plan_idx(r);
  if (!m->p || m->nnodes + 3 > MAXN || m->nslots + 6 > MAXS) return;
  tpg_linear_desc d = TPG_LINEAR_DESC_INIT;
  const size_t v3_size = offsetof(tpg_linear_desc, x_norm); /* a 0.3 caller's desc: no folded norm */
  d.kind = (tpg_linear_kind)(u8(r) % 2);
  const int col = d.kind == TPG_LINEAR_COLUMN;
  d.nranks = 1 + u8(r) % 4;
  d.rank = u8(r) % d.nranks;
  d.tokens = 1 + u8(r) % 9;
  int split = 8 * d.nranks * (1 + u8(r) % 4), other = 8 * (1 + u8(r) % 4);
  d.in_features = col ? other : split;
  d.out_features = col ? split : other;
  d.dtype = u8(r) % 2 ? TPG_BF16 : TPG_F16;
  d.gather = col && u8(r) % 2;
  d.activation = col ? (tpg_activation)(u8(r) % TPG_ACTIVATION_COUNT) : TPG_ACT_NONE;
  d.algo = (tpg_collective_algo)(u8(r) % (col ? 2 : 3));
  const int sw = d.activation == TPG_ACT_SWIGLU;
  size_t T = (size_t)d.tokens, in = (size_t)d.in_features, o = (size_t)d.out_features;
  size_t F = (size_t)split / (size_t)d.nranks;
  d.x.slot = kit_slot(m, "lx", d.dtype, T * (col ? in : F));
  d.w.slot = kit_slot(m, "lw", d.dtype, col ? (sw ? 2 : 1) * F * in : o * F);
  d.y.slot = kit_slot(m, "ly", d.dtype, col && !d.gather ? T * F : T * o);
  if ((col && (d.activation == TPG_ACT_GELU || d.activation == TPG_ACT_SILU)) || u8(r) % 2)
    d.bias.slot = kit_slot(m, "lb", d.dtype, col ? (sw ? 2 : 1) * F : o);
  if (!col && u8(r) % 2) d.residual = u8(r) % 4 ? (tpg_view){kit_slot(m, "lr", d.dtype, T * o), 0, 0} : d.y;
  if ((col && d.gather && d.nranks > 1 && T > 1) || u8(r) % 8 == 0) d.work.slot = kit_slot(m, "lwk", d.dtype, T * o);
  if (u8(r) % 4 == 0) d.name = u8(r) % 8 ? "layer" : "";
  switch (u8(r) % 20) {
    case 0: d.x.offset = pick_offset(r, m, d.x.slot); break;
    case 1: d.y = pick_view(r, m); break;
    case 2: d.w = pick_view(r, m); break;
    case 3: d.bias = pick_view(r, m); break;
    case 4: d.residual = pick_view(r, m); break;
    case 5: d.work.slot = 0; break;
    case 6: d.nranks = pick_int(r); break;
    case 7: d.rank = pick_int(r); break;
    case 8: d.tokens = pick_int(r); break;
    case 9: d.in_features = pick_int(r); break;
    case 10: d.out_features = pick_int(r); break;
    case 11: d.activation = (tpg_activation)(u8(r) % 6); break;
    case 12: d.size = u8(r) % 2 ? v3_size : u8(r); break;
    case 13: d.gather = pick_int(r); break;
    case 14: d.y = d.x; break;
    case 15: d.algo = (tpg_collective_algo)(u8(r) % 5); break;
    case 16: d.kind = (tpg_linear_kind)(u8(r) % 4); break;
    default: break;
  }
  int ndeps = 0, deps_ok, idx[8], ndeps_len;
  tpg_node *deps = pick_deps(r, m, &ndeps, &deps_ok, idx, &ndeps_len);
  int want_out = u8(r) % 8 != 0;
  tpg_node out_ = 0x5555, *outp = want_out ? &out_ : NULL;
  if (want_out && ndeps_len > 0 && u8(r) % 4 == 0) outp = &deps[u8(r) % ndeps_len];
  int null_desc = u8(r) % 32 == 0;
  int before = -1, colls = -1, after = -1, colls_after = -1;
  REQUIRE(CALL(tpg_plan_get_stats(m->p, &before, NULL, &colls)) == TPG_SUCCESS);
  REQUIRE(before == m->nnodes && colls == m->ncoll);
  tpg_status st = CALL(tpg_plan_add_linear(m->p, null_desc ? NULL : &d, deps, ndeps, outp));
  REQUIRE(CALL(tpg_plan_get_stats(m->p, &after, NULL, &colls_after)) == TPG_SUCCESS);
  tpg_node out = want_out ? *outp : 0;
  if (st != TPG_SUCCESS) {
    REQUIRE(after == before && colls_after == colls); /* nothing added */
    REQUIRE(!want_out || out == 0);
    free(deps);
    return;
  }
  REQUIRE(!null_desc && deps_ok && (d.size == sizeof d || d.size == v3_size));
  /* one plan is one rank's part of one comm: a layer with collectives for
   * another rank count than the plan's earlier ones is refused */
  const int adds_coll = d.nranks > 1 && (d.kind == TPG_LINEAR_ROW || d.gather);
  REQUIRE(!adds_coll || m->ranks == 0 || m->ranks == d.nranks);
  if (adds_coll) m->ranks = d.nranks;
  REQUIRE(d.nranks >= 1 && d.rank >= 0 && d.rank < d.nranks && d.tokens >= 1);
  REQUIRE(d.kind == TPG_LINEAR_COLUMN || d.kind == TPG_LINEAR_ROW);
  const int c2 = d.kind == TPG_LINEAR_COLUMN;
  const int sp = c2 ? d.out_features : d.in_features, ot = c2 ? d.in_features : d.out_features;
  REQUIRE(sp % d.nranks == 0 && (sp / d.nranks) % 8 == 0 && ot % 8 == 0 && ot >= 8);
  REQUIRE(c2 || (d.activation == TPG_ACT_NONE && d.gather == 0));
  const int coll = d.nranks > 1 && (!c2 || d.gather);
  const int concat = c2 && d.gather && d.nranks > 1 && d.tokens > 1;
  const int k = 1 + coll + concat;
  REQUIRE(after == before + k && colls_after == colls + coll);
  require_inside(m, d.x, (size_t)d.tokens * (size_t)(c2 ? d.in_features : sp / d.nranks), __LINE__);
  if (want_out) {
    REQUIRE(out != 0);
    for (int q = 0; q < NPLANS; q++) REQUIRE(node_of(&P[q], out) < 0);
  }
  /* The model: a chain of k nodes after deps; only the last handle is known. */
  for (int j = 0; j < k; j++) {
    int i = m->nnodes++;
    memset(m->dep[i], 0, sizeof m->dep[i]);
    m->h[i] = j == k - 1 && want_out ? out : 0;
    if (j == 0)
      for (int q = 0; q < ndeps; q++) set_edge(m, idx[q], i);
    else
      set_edge(m, i - 1, i);
  }
  m->ncoll += coll;
  /* Sharding takes the same desc; without a driver it never succeeds. */
  tpg_linear_whole w = {(const void *)(uintptr_t)0x7f0000001000ull, sw ? (const void *)(uintptr_t)0x7f0000001000ull : NULL,
                        NULL, NULL};
  tpg_linear_part pt = {(void *)(uintptr_t)0x7f0000002000ull, NULL};
  REQUIRE(CALL(tpg_linear_shard(&d, pick_int(r), u8(r) % 16 ? &w : NULL, u8(r) % 16 ? &pt : NULL, NULL)) !=
          TPG_SUCCESS);
  free(deps);
}

static void op_add_dependency(rd *r) {
  mplan *m = pick_plan_idx(r);
  int ok;
  tpg_plan *p = plan_arg(r, m, &ok);
  tpg_node from = pick_node(r, m), to = pick_node(r, m);
  tpg_status st = CALL(tpg_plan_add_dependency(p, from, to));
  int f = ok ? node_of(m, from) : -1, t = ok ? node_of(m, to) : -1;
  int expect = f >= 0 && t >= 0 && f != t && !has_edge(m, f, t);
  REQUIRE((st == TPG_SUCCESS) == expect);
  if (expect) set_edge(m, f, t);
}

static void op_set_name(rd *r) {
  mplan *m = pick_plan_idx(r);
  int ok;
  tpg_plan *p = plan_arg(r, m, &ok);
  tpg_node n = pick_node(r, m);
  char *name = pick_name(r, m);
  tpg_status st = CALL(tpg_plan_set_node_name(p, n, name));
  int expect = ok && node_of(m, n) >= 0 && name && name[0] && strlen(name) < 128;
  REQUIRE((st == TPG_SUCCESS) == expect);
  free(name);
}

static void op_validate(rd *r) {
  mplan *m = pick_plan_idx(r);
  int ok;
  tpg_plan *p = plan_arg(r, m, &ok);
  tpg_status st = CALL(tpg_plan_validate(p));
  REQUIRE((st == TPG_SUCCESS) == (ok && m->nnodes > 0 && acyclic(m)));
}

static void op_stats(rd *r) {
  mplan *m = pick_plan_idx(r);
  int ok;
  tpg_plan *p = plan_arg(r, m, &ok);
  int nodes = -1, slots = -1, colls = -1;
  uint8_t mask = u8(r);
  tpg_status st = CALL(tpg_plan_get_stats(p, mask & 1 ? &nodes : NULL, mask & 2 ? &slots : NULL, mask & 4 ? &colls : NULL));
  REQUIRE((st == TPG_SUCCESS) == ok);
  if (st != TPG_SUCCESS) return;
  if (mask & 1) REQUIRE(nodes == m->nnodes);
  if (mask & 2) REQUIRE(slots == m->nslots);
  if (mask & 4) REQUIRE(colls == m->ncoll);
}

static void op_dot(rd *r) {
  mplan *m = pick_plan_idx(r);
  int ok;
  tpg_plan *p = plan_arg(r, m, &ok);
  uint8_t mode = u8(r) % 8;
  size_t needed = 0;
  if (mode == 0) { /* misuse: no needed, or a NULL buffer with a size */
    REQUIRE(CALL(tpg_plan_dot(p, NULL, 0, NULL)) == TPG_ERROR_INVALID_ARGUMENT);
    REQUIRE(CALL(tpg_plan_dot(p, NULL, 1 + u8(r), &needed)) == TPG_ERROR_INVALID_ARGUMENT);
    return;
  }
  tpg_status st = CALL(tpg_plan_dot(p, NULL, 0, &needed));
  REQUIRE((st == TPG_SUCCESS) == ok);
  if (st != TPG_SUCCESS) return;
  REQUIRE(needed > 8);
  /* Fill with the exact size, or with a buffer too small by some bytes. */
  size_t cap = needed;
  if (mode >= 5) cap = 1 + (size_t)u32(r) % needed; /* 1 .. needed */
  char *buf = malloc(cap);
  if (!buf) abort();
  memset(buf, 'Z', cap);
  size_t needed2 = 0;
  st = CALL(tpg_plan_dot(p, buf, cap, &needed2));
  REQUIRE(needed2 == needed);
  if (cap >= needed) {
    REQUIRE(st == TPG_SUCCESS);
    REQUIRE(strncmp(buf, "digraph", 7) == 0);
    REQUIRE(strlen(buf) + 1 == needed);
    REQUIRE(buf[needed - 2] == '\n' && buf[needed - 3] == '}');
    /* Every label is one DOT string: quotes in names must be escaped. */
    int inq = 0;
    for (const char *c = buf; *c; c++) {
      if (*c == '\\' && inq && c[1]) { c++; continue; }
      if (*c == '"') inq = !inq;
      REQUIRE(!(inq && *c == '\n')); /* no raw newline inside a string either */
    }
    REQUIRE(!inq);
  } else {
    REQUIRE(st == TPG_ERROR_INVALID_ARGUMENT);
    REQUIRE(memchr(buf, '\0', cap) != NULL); /* still NUL-terminated within cap */
  }
  free(buf);
}

static void op_graph_create(rd *r) {
  mplan *m = pick_plan_idx(r);
  int ok;
  tpg_plan *p = plan_arg(r, m, &ok);
  tpg_graph_config cfg = TPG_GRAPH_CONFIG_INIT;
  uint8_t bad = u8(r);
  if (bad % 16 == 1) cfg.size = u8(r);
  if (bad % 16 == 2) cfg.magic = u32(r);
  if (bad % 16 == 3) cfg.device = pick_int(r);
  if (bad % 16 == 4) cfg.version = pick_int(r);
  int nb = m->nslots ? u8(r) % (m->nslots + 3) : u8(r) % 3;
  if (bad % 16 == 9) cfg.mode = (tpg_graph_mode)(u8(r) % 2 ? u8(r) % 4 : (int)u32(r));
  if (bad % 16 == 10) cfg.flags = u8(r) % 2 ? 1u << (u8(r) % 32) : u32(r);
  if (bad % 16 == 5) nb = -1 - u8(r) % 3;
  tpg_binding *b = nb > 0 ? malloc((size_t)nb * sizeof *b) : NULL;
  if (nb > 0 && !b) abort();
  /* Half the time, bind every slot the caller may bind (not the ones of a
   * kind the graph allocates itself), in order: the way past the checks. */
  int in_order = u8(r) % 2, next = 0;
  if (in_order && bad % 16 != 5) {
    nb = 0;
    for (int i = 0; i < m->nslots; i++) nb += m->slots[i].where == TPG_MEM_DEVICE || m->slots[i].where == TPG_MEM_HOST;
    free(b);
    b = malloc((size_t)(nb ? nb : 1) * sizeof *b);
    if (!b) abort();
  }
  for (int i = 0; i < nb; i++) {
    if (in_order)
      while (next < m->nslots && m->slots[next].where != TPG_MEM_DEVICE && m->slots[next].where != TPG_MEM_HOST) next++;
    b[i].slot = in_order ? (tpg_slot)(++next) : pick_slot(r, m);
    b[i].ptr = (void *)(uintptr_t)(u8(r) % 2 ? (uint64_t)0x7f0000000000ull + 256u * (uint64_t)i : u64(r));
  }
  cfg.bindings = bad % 16 == 6 ? NULL : b;
  cfg.nbindings = nb;
  tpg_graph *g = (tpg_graph *)fake_plan;
  int null_cfg = bad % 16 == 7, null_out = bad % 16 == 8;
  tpg_status st = CALL(tpg_graph_create(p, null_cfg ? NULL : &cfg, null_out ? NULL : &g));
  /* There is no driver here: never a graph, always a clean error. */
  REQUIRE(st != TPG_SUCCESS);
  REQUIRE(st == TPG_ERROR_INVALID_ARGUMENT || st == TPG_ERROR_NO_DRIVER || st == TPG_ERROR_NO_DEVICE);
  if (!null_out) REQUIRE(g == NULL);
  if (!ok || null_cfg || null_out) REQUIRE(st == TPG_ERROR_INVALID_ARGUMENT);
  if (ok && (m->nnodes == 0 || !acyclic(m))) REQUIRE(st == TPG_ERROR_INVALID_ARGUMENT);
  /* No comm given: one rank, unless the plan is sharded for more. */
  if (ok && m->ncoll && m->ranks > 1) REQUIRE(st == TPG_ERROR_INVALID_ARGUMENT);
  free(b);
}

/* tpg_plan_mlp: a whole plan from one descriptor. Small stacks only (layers
 * <= 8 when valid, two stacks per input) so an input stays cheap; the limits are tried as invalid
 * values. An accepted plan must be a good plan: it validates, its counts add
 * up, it prints, and it cannot become a graph here. */
static int mlp_calls; /* per input: a stack costs ~100x a node call */

static void op_plan_mlp(rd *r) {
  if (++mlp_calls > 2) return;
  tpg_mlp_desc d = TPG_MLP_DESC_INIT;
  uint8_t spoil = u8(r);
  d.kind = (tpg_mlp_kind)(u8(r) % 2);
  d.layers = 1 + u8(r) % 8;
  d.tokens = 1 + u16(r) % 1100;
  d.hidden = 8 * (1 + u8(r) % 32);
  d.nranks = 1 + u8(r) % 8;
  d.rank = u8(r) % d.nranks;
  d.ffn = 8 * d.nranks * (1 + u8(r) % 16);
  d.dtype = u8(r) % 2 ? TPG_BF16 : TPG_F16;
  d.bias = d.kind == TPG_MLP_GELU ? 1 : u8(r) % 2;
  d.collectives = u8(r) % 4 != 0;
  d.overlap = (tpg_overlap)(u8(r) % 3);
  d.chunks = u8(r) % 3 ? 0 : u8(r) % 17;
  d.sm_reserve = u8(r) % 65;
  switch (spoil % 24) { /* one field out of range, or at a limit */
    case 0: d.size = u8(r); break;
    case 1: d.kind = (tpg_mlp_kind)pick_int(r); break;
    case 2: d.layers = u8(r) % 2 ? pick_int(r) : 4097; break;
    case 3: d.tokens = pick_int(r); break;
    case 4: d.hidden = pick_int(r); break;
    case 5: d.ffn = pick_int(r); break;
    case 6: d.rank = pick_int(r); break;
    case 7: d.nranks = pick_int(r); break;
    case 8: d.dtype = pick_dtype(r); break;
    case 9: d.bias = pick_int(r); break;
    case 10: d.collectives = pick_int(r); break;
    case 11: d.overlap = (tpg_overlap)pick_int(r); break;
    case 12: d.chunks = pick_int(r); break;
    case 13: d.sm_reserve = pick_int(r); break;
    case 14: d.ffn = pick_int(r); d.nranks = 1; d.rank = 0; d.kind = TPG_MLP_SWIGLU; break;
    case 15: d.hidden = 1 << 20; d.tokens = 1 << 20; break;
    default: break;
  }
  int null_desc = spoil == 255, null_out = spoil == 254;
  tpg_plan *p = (tpg_plan *)fake_plan;
  tpg_status st = CALL(tpg_plan_mlp(null_desc ? NULL : &d, null_out ? NULL : &p));
  if (!null_out && st != TPG_SUCCESS) REQUIRE(p == NULL);
  if (st != TPG_SUCCESS) return;
  REQUIRE(!null_desc && !null_out && p != NULL);
  REQUIRE(d.layers >= 1 && d.layers <= 4096 && d.tokens >= 1 && d.hidden % 8 == 0 && d.nranks >= 1);
  REQUIRE(d.rank >= 0 && d.rank < d.nranks && d.ffn % d.nranks == 0 && (d.ffn / d.nranks) % 8 == 0);
  REQUIRE(CALL(tpg_plan_validate(p)) == TPG_SUCCESS);
  int nodes = 0, slots = 0, colls = 0;
  REQUIRE(CALL(tpg_plan_get_stats(p, &nodes, &slots, &colls)) == TPG_SUCCESS);
  int chunks = 1 + (nodes - 1 - colls) / (2 * d.layers) - 1; /* GEMMs come in pairs per layer and chunk */
  REQUIRE(nodes == 2 * d.layers * chunks + colls + 1);
  REQUIRE(colls == ((d.collectives && d.nranks > 1) ? d.layers * chunks : 0));
  REQUIRE(slots == 4 + d.layers * (d.bias ? 4 : 2));
  if (d.overlap == TPG_OVERLAP_NONE) REQUIRE(chunks == 1);
  if (d.overlap == TPG_OVERLAP_CHUNKED) REQUIRE(chunks == (d.chunks ? d.chunks : 2));
  /* AUTO does not chunk (the header's enum comment). */
  if (d.overlap == TPG_OVERLAP_AUTO) REQUIRE(chunks == 1);
  tpg_slot sx = 0, sy = 0;
  REQUIRE(CALL(tpg_plan_find_slot(p, "x", &sx)) == TPG_SUCCESS && sx != 0);
  REQUIRE(CALL(tpg_plan_find_slot(p, "y", &sy)) == TPG_SUCCESS && sy != 0 && sy != sx);
  if (nodes <= 24) { /* DOT was most of an input's time with big stacks; op_dot covers it */
    size_t need = 0;
    REQUIRE(CALL(tpg_plan_dot(p, NULL, 0, &need)) == TPG_SUCCESS && need > 8);
    char *buf = malloc(need);
    if (!buf) abort();
    REQUIRE(CALL(tpg_plan_dot(p, buf, need, &need)) == TPG_SUCCESS && strlen(buf) + 1 == need);
    free(buf);
  }
  /* Bind every slot but the scratch ones, so the driver is the only thing missing. */
  tpg_binding *b = malloc((size_t)slots * sizeof *b);
  if (!b) abort();
  int nb = 0;
  for (tpg_slot s = 1; s <= (tpg_slot)slots; s++) {
    tpg_slot act = 0, h = 0;
    tpg_plan_find_slot(p, "act", &act);
    tpg_plan_find_slot(p, "h", &h);
    if (s == act || s == h) continue;
    b[nb].slot = s;
    b[nb].ptr = (void *)(uintptr_t)(0x7f0000000000ull + 4096u * (uint64_t)s);
    nb++;
  }
  tpg_graph_config cfg = TPG_GRAPH_CONFIG_INIT;
  cfg.bindings = b;
  cfg.nbindings = nb;
  tpg_graph *g = (tpg_graph *)fake_plan;
  st = CALL(tpg_graph_create(p, &cfg, &g));
  REQUIRE(g == NULL);
  REQUIRE(st == (colls ? TPG_ERROR_INVALID_ARGUMENT : TPG_ERROR_NO_DRIVER)); /* no comm given */
  free(b);
  tpg_plan_destroy(p);
}

/* The MLP helpers around tpg_plan_mlp: slot lookup works without a driver;
 * buckets and sharding check their arguments, then need the driver. */
static void op_mlp_extras(rd *r) {
  tpg_mlp_desc d = TPG_MLP_DESC_INIT;
  d.layers = 1 + u8(r) % 4;
  d.tokens = 1 + u16(r) % 600;
  d.hidden = 8 * (1 + u8(r) % 16);
  d.nranks = 1 + u8(r) % 4;
  d.rank = u8(r) % d.nranks;
  d.ffn = 8 * d.nranks * (1 + u8(r) % 8);
  if (u8(r) % 8 == 0) d.ffn = pick_int(r);
  static const char *names[] = {"x", "y", "act", "h", "l0.w1", "l0.b2", "l9.w2", "", "nope"};
  const char *nm = names[u8(r) % 9];
  tpg_slot sl = 7;
  tpg_status st = CALL(tpg_mlp_find_slot(u8(r) % 16 ? &d : NULL, u8(r) % 16 ? nm : NULL, &sl));
  if (st != TPG_SUCCESS) REQUIRE(sl == TPG_SLOT_NONE);
  int sizes[4] = {pick_int(r), pick_int(r), 1, d.tokens};
  tpg_graph_config cfg = TPG_GRAPH_CONFIG_INIT;
  tpg_mlp_buckets *b = (tpg_mlp_buckets *)fake_plan;
  st = CALL(tpg_mlp_buckets_create(u8(r) % 16 ? &d : NULL, u8(r) % 8 ? sizes : NULL, (int)(u8(r) % 6) - 1,
                                   u8(r) % 16 ? &cfg : NULL, &b));
  REQUIRE(st != TPG_SUCCESS && b == NULL); /* no driver here */
  int bt = 1;
  tpg_graph *g = (tpg_graph *)fake_plan;
  REQUIRE(CALL(tpg_mlp_buckets_pick(NULL, 1, &bt, &g)) == TPG_ERROR_INVALID_ARGUMENT);
  REQUIRE(CALL(tpg_mlp_buckets_get_info(NULL, 0, NULL, NULL, NULL)) == TPG_ERROR_INVALID_ARGUMENT);
  REQUIRE(CALL(tpg_mlp_buckets_destroy(NULL)) == TPG_SUCCESS);
  tpg_mlp_whole_layer w;
  tpg_mlp_rank_layer o;
  memset(&w, 0, sizeof w);
  memset(&o, 0, sizeof o);
  if (u8(r) % 2) {
    w.w1 = w.w1_up = w.b1 = w.b1_up = w.w2 = w.b2 = (const void *)(uintptr_t)0x7f0000001000ull;
    o.w1 = o.b1 = o.w2 = o.b2 = (void *)(uintptr_t)0x7f0000002000ull;
  }
  REQUIRE(CALL(tpg_mlp_shard_layer(u8(r) % 16 ? &d : NULL, pick_int(r), u8(r) % 16 ? &w : NULL,
                                   u8(r) % 16 ? &o : NULL, NULL)) != TPG_SUCCESS);
}

/* The calls that need a driver or a comm: arguments first, then NO_DRIVER. */
static void op_driverless(rd *r) {
  switch (u8(r) % 6) {
    case 0: {
      tpg_comm_id id;
      memset(&id, u8(r), sizeof id);
      tpg_comm_config cc = TPG_COMM_CONFIG_INIT;
      cc.rank = pick_int(r);
      cc.nranks = pick_int(r);
      cc.device = u8(r) % 2 ? 0 : pick_int(r);
      cc.timeout_ms = u8(r) % 2 ? 0 : pick_int(r);
      if (u8(r) % 8 == 0) cc.magic = u32(r);
      tpg_comm *c = (tpg_comm *)fake_plan;
      tpg_status st = CALL(tpg_comm_create(u8(r) % 16 ? &id : NULL, &cc, &c));
      REQUIRE(st != TPG_SUCCESS && c == NULL);
      break;
    }
    case 1: {
      tpg_device_info di;
      REQUIRE(CALL(tpg_device_get_info(pick_int(r), u8(r) % 8 ? &di : NULL, sizeof *(u8(r) % 8 ? &di : NULL))) != TPG_SUCCESS);
      break;
    }
    case 2: {
      tpg_runtime_info ri;
      REQUIRE(CALL(tpg_runtime_get_info(&ri, sizeof ri)) == TPG_SUCCESS);
      REQUIRE(ri.driver_version == 0 && ri.device_count == 0 && ri.driver_error[0]);
      break;
    }
    case 3:
      REQUIRE(CALL(tpg_graph_launch(NULL, NULL)) == TPG_ERROR_INVALID_ARGUMENT);
      REQUIRE(CALL(tpg_graph_rebind(NULL, NULL, (int)u32(r))) == TPG_ERROR_INVALID_ARGUMENT);
      REQUIRE(CALL(tpg_graph_update(NULL, NULL, NULL, 0)) == TPG_ERROR_INVALID_ARGUMENT);
      REQUIRE(CALL(tpg_graph_destroy(NULL)) == TPG_SUCCESS);
      break;
    case 4:
      REQUIRE(CALL(tpg_comm_destroy(NULL)) == TPG_SUCCESS);
      REQUIRE(CALL(tpg_comm_abort(NULL)) == TPG_ERROR_INVALID_ARGUMENT);
      REQUIRE(CALL(tpg_comm_wait(NULL, NULL)) == TPG_ERROR_INVALID_ARGUMENT);
      REQUIRE(CALL(tpg_comm_get_info(NULL, NULL, NULL, NULL)) == TPG_ERROR_INVALID_ARGUMENT);
      break;
    default: {
      int s = (int)u32(r);
      REQUIRE(tpg_status_string((tpg_status)s) != NULL);
      REQUIRE(tpg_dtype_size((tpg_dtype)s) == (s == 0 ? 4u : (s == 1 || s == 2) ? 2u : 0u));
      REQUIRE(tpg_version() == TPG_VERSION_CODE);
      break;
    }
  }
}

/* ---- the kit ----------------------------------------------------------- */

static struct tpg_module fz_module = {TPG_MAGIC_MODULE, NULL};
static struct tpg_module fz_dead = {TPG_MAGIC_DEAD, NULL};
static unsigned char fz_bytes[8192]; /* by-value arguments point in here: any size <= 4096 is readable */

/* Registered as a loaded module is (lib/handle.h), once. */
static struct tpg_module *fz_live_module(void) {
  static int added;
  if (!added) added = tpg_handle_add(&fz_module, TPG_MAGIC_MODULE) == TPG_SUCCESS;
  return &fz_module;
}

static int fz_cb(void *u, tpg_stream s, void *const *ptrs, int n) {
  (void)u, (void)s, (void)ptrs, (void)n;
  return 0;
}
static void fz_host(void *u) { (void)u; }

static unsigned pick_dim(rd *r) {
  static const unsigned d[] = {0, 1, 1, 2, 3, 4, 8, 256, 1024, 1025, 65535, 65536, 0x7fffffffu, 0x80000000u};
  return u8(r) % 8 == 0 ? u32(r) : d[u8(r) % (sizeof d / sizeof *d)];
}

static void op_add_kernel(rd *r) {
  NODE_ARGS;
  enum { MAXA = 6 };
  tpg_arg *args = malloc(MAXA * sizeof *args); /* exact size: ASan sees over-reads */
  if (!args) abort();
  int nargs = u8(r) % (MAXA + 1);
  for (int i = 0; i < MAXA; i++) {
    if (u8(r) % 2) {
      args[i] = tpg_arg_view(0, 0);
      args[i].view = pick_view(r, m);
      if (u8(r) % 8 == 0) args[i].size = u8(r) % 2 ? 4 : 0;
    } else {
      static const uint32_t sz[] = {1, 2, 4, 8, 12, 16, 4096, 0, 4097, 0xffffffffu};
      args[i] = tpg_arg_bytes(fz_bytes + u8(r), sz[u8(r) % (sizeof sz / sizeof *sz)]);
      if (u8(r) % 16 == 0) args[i].bytes = NULL;
    }
    if (u8(r) % 32 == 0) args[i].kind = (tpg_arg_kind)(u8(r) % 4);
  }
  tpg_kernel_desc d = TPG_KERNEL_DESC_INIT;
  switch (u8(r) % 8) {
    case 0: d.cu_kernel = (void *)0x1000; break;
    case 1: d.cu_function = (void *)0x2000; break;
    case 2: break;                                           /* none */
    case 3: d.cu_kernel = d.cu_function = (void *)0x3000; break; /* two */
    case 4: d.module = fz_live_module(); break;                    /* no name */
    case 5: d.name = "k"; break;                             /* no module */
    case 6: d.module = &fz_dead; d.name = "k"; break;
    default: d.module = fz_live_module(); d.name = u8(r) % 8 ? "kit_kernel" : ""; break;
  }
  for (int i = 0; i < 3; i++) {
    d.grid[i] = u8(r) % 4 ? 1 + u8(r) % 8 : pick_dim(r);
    d.block[i] = u8(r) % 4 ? 1 + u8(r) % 8 : pick_dim(r);
  }
  if (u8(r) % 4 == 0)
    for (int i = 0; i < 3; i++) d.cluster[i] = u8(r) % 3;
  d.shared_bytes = u8(r) % 4 ? 0 : u32(r);
  d.pdl = u8(r) % 8 ? u8(r) % 2 : (int)u8(r) - 2;
  d.args = u8(r) % 16 ? args : NULL;
  d.nargs = u8(r) % 16 ? nargs : -(int)(1 + u8(r) % 4);
  if (u8(r) % 32 == 0) d.size = 8;
  tpg_status st = CALL(tpg_plan_add_kernel(p, u8(r) % 32 ? &d : NULL, deps, ndeps, outp));
  if (st == TPG_SUCCESS) {
    REQUIRE(d.size == sizeof d);
    REQUIRE((d.module != NULL) + (d.cu_kernel != NULL) + (d.cu_function != NULL) == 1);
    REQUIRE(!d.module || (d.module == &fz_module && d.name && d.name[0]));
    unsigned long long threads = 1;
    for (int i = 0; i < 3; i++) {
      REQUIRE(d.grid[i] >= 1 && d.block[i] >= 1);
      threads *= d.block[i];
      if (d.cluster[0] || d.cluster[1] || d.cluster[2]) REQUIRE(d.cluster[i] >= 1 && d.grid[i] % d.cluster[i] == 0);
    }
    REQUIRE(threads <= 1024 && d.grid[1] <= 65535 && d.grid[2] <= 65535);
    REQUIRE(d.pdl == 0 || d.pdl == 1);
    REQUIRE(d.nargs >= 0 && (d.nargs == 0 || d.args));
    for (int i = 0; i < d.nargs; i++) {
      if (args[i].kind == TPG_ARG_VIEW) {
        REQUIRE(args[i].size == 0 || args[i].size == 8);
        require_inside(m, args[i].view, 1, __LINE__);
      } else {
        REQUIRE(args[i].kind == TPG_ARG_BYTES && args[i].bytes && args[i].size >= 1 && args[i].size <= 4096);
      }
    }
  }
  /* What was accepted is the plan's own copy: scribbling on ours changes nothing it keeps. */
  memset(args, 0xa5, MAXA * sizeof *args);
  free(args);
  NODE_DONE(st);
}

static void op_add_captured(rd *r) {
  NODE_ARGS;
  enum { MAXV = 5 };
  tpg_view *views = malloc(MAXV * sizeof *views);
  size_t *counts = malloc(MAXV * sizeof *counts);
  if (!views || !counts) abort();
  for (int i = 0; i < MAXV; i++) {
    views[i] = pick_view(r, m);
    counts[i] = pick_count(r, m, views[i]);
  }
  tpg_captured_desc d = TPG_CAPTURED_DESC_INIT;
  d.fn = u8(r) % 16 ? fz_cb : NULL;
  d.views = u8(r) % 16 ? views : NULL;
  d.counts = u8(r) % 2 ? counts : NULL;
  d.nviews = u8(r) % 16 ? (int)(u8(r) % (MAXV + 1)) : pick_int(r);
  /* Never past our arrays: counts the library takes (up to 64) stay within them. */
  if (d.nviews > MAXV && d.nviews <= 64) d.nviews = -1;
  if (u8(r) % 32 == 0) d.size = 4;
  tpg_status st = CALL(tpg_plan_add_captured(p, &d, deps, ndeps, outp));
  if (st == TPG_SUCCESS) {
    REQUIRE(d.fn && d.size == sizeof d && d.nviews >= 0 && d.nviews <= MAXV);
    for (int i = 0; i < d.nviews; i++) {
      if (d.counts) {
        REQUIRE(d.counts[i] > 0);
        require_inside(m, views[i], d.counts[i], __LINE__);
      } else {
        require_inside(m, views[i], 1, __LINE__);
      }
    }
  }
  memset(views, 0xa5, MAXV * sizeof *views);
  free(views);
  free(counts);
  NODE_DONE(st);
}

static void op_add_host_event(rd *r) {
  NODE_ARGS;
  tpg_status st;
  int which = u8(r) % 3, null = u8(r) % 8 == 0;
  if (which == 0) st = CALL(tpg_plan_add_host(p, null ? NULL : fz_host, (void *)p, deps, ndeps, outp));
  else if (which == 1) st = CALL(tpg_plan_add_event_record(p, null ? NULL : (tpg_event)0x40, deps, ndeps, outp));
  else st = CALL(tpg_plan_add_event_wait(p, null ? NULL : (tpg_event)0x40, deps, ndeps, outp));
  REQUIRE((st == TPG_SUCCESS) == (ok && deps_ok && !null));
  NODE_DONE(st);
}

typedef void (*op_fn)(rd *);
static const op_fn ops[] = {
    op_create,   op_create,   op_destroy,  op_add_slot,      op_add_slot,    op_add_slot,       op_find_slot,
    op_add_gemm, op_gemm_kit, op_gemm_kit, op_add_axpby, op_add_memset,   op_add_memcpy,  op_add_empty,      op_add_empty,
    op_add_collective, op_add_dependency, op_add_dependency, op_set_name, op_validate, op_stats, op_dot,
    op_graph_create, op_driverless, op_plan_mlp, op_mlp_extras, op_linear_kit, op_linear_kit, op_add_concat,
    op_add_kernel, op_add_kernel, op_add_captured, op_add_host_event,
};

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  /* Behave the same on a GPU box: never find a real driver. */
  setenv("TPG_LIBCUDA", "/nonexistent/tpg-fuzz/libcuda.so.1", 1);
  /* DEVICE and HOST always; any other kind only if the library takes it. */
  mem_kind_ok[TPG_MEM_DEVICE] = mem_kind_ok[TPG_MEM_HOST] = 1;
  tpg_plan *p;
  if (tpg_plan_create(&p) != TPG_SUCCESS) abort();
  for (int w = 2; w < 8; w++) {
    char name[8];
    tpg_slot s;
    snprintf(name, sizeof name, "m%d", w);
    mem_kind_ok[w] = tpg_plan_add_slot(p, name, TPG_F32, (tpg_memory)w, 64, &s) == TPG_SUCCESS;
  }
  tpg_plan_destroy(p);
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  rd r = {data, size};
  /* Every input starts with one plan, so short inputs reach node code. */
  REQUIRE(CALL(tpg_plan_create(&P[0].p)) == TPG_SUCCESS);
  for (int n = 0; r.n > 0 && n < MAXOPS; n++) ops[u8(&r) % (sizeof ops / sizeof *ops)](&r);
  for (int i = 0; i < NPLANS; i++) {
    tpg_plan_destroy(P[i].p);
    model_reset(&P[i]);
  }
  ngrave = 0;
  mlp_calls = 0;
  return 0;
}
