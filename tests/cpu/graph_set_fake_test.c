/* graph_set_fake_test.c - tpg_graph_set on the stand-in driver of
 * //tests/fake: one step at many batch sizes.
 *
 * The step (per size s, H floats a row): t = x (a copy into scratch),
 * u = 2 t and y = 2 u (the fake's C kernel "scale2", which computes, with
 * its element count s*H a by-value argument), and a bf16 GEMM into scratch
 * whose pointers and extents the fake checks. So a launch at size s must
 * give y = 4 x on the first s*H elements and leave the rest as poisoned:
 * a graph (or a retargeted exec) that ran another size is caught. Checked:
 * one graph per size (finished on one thread or on workers) and one
 * retargeted exec, every pick, the shared
 * scratch arena and the memory reported, a rebind at one size seen at
 * another, every refusal naming its argument, builder failures, and that
 * nothing stays live in the fake and no access falls outside an allocation.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/fake/tpgfake.h"
#include "tests/tpg_test.h"

enum { H = 16, K = 64, N = 64, MAX = 40 };
#define R256(b) (((size_t)(b) + 255) & ~(size_t)255)

typedef struct {
  tpg_module *mod;
  float *x, *x2, *y;
  void *a, *w;
  tpg_binding b[4];
  int nb;
  int extra;     /* 1: a host node (not retargetable); 2: a memset of the size's width */
  int fail_size; /* the builder fails at this size */
  int twice;     /* the builder returns one plan for every size */
  int no_plan;   /* the builder succeeds without a plan */
  int unbound;   /* size 8's plan leaves "y" unbound */
  int other_x;   /* size 8 binds x to x2 (a retargeting set refuses it) */
  tpg_plan *last;
  int calls;
} step_ctx;

static void host_fn(void *u) { (void)u; }

static tpg_status add_scale2(tpg_plan *p, const step_ctx *c, tpg_slot y, tpg_slot x, const int *n, tpg_node dep,
                             tpg_node *out) {
  tpg_arg a[3] = {tpg_arg_view(y, 0), tpg_arg_view(x, 0), tpg_arg_bytes(n, sizeof *n)};
  tpg_kernel_desc k = TPG_KERNEL_DESC_INIT;
  k.module = c->mod;
  k.name = "scale2";
  k.grid[0] = (unsigned)(*n + 255) / 256;
  k.block[0] = 256;
  k.args = a;
  k.nargs = 3;
  return tpg_plan_add_kernel(p, &k, &dep, 1, out);
}

#define T(call)                         \
  do {                                  \
    tpg_status s_ = (call);             \
    if (s_ != TPG_SUCCESS) return s_;   \
  } while (0)

static tpg_status step_plan(step_ctx *c, int s, tpg_plan *p) {
  tpg_slot x, y, t, u, a, w, cc;
  T(tpg_plan_add_slot(p, "x", TPG_F32, TPG_MEM_DEVICE, (size_t)MAX * H, &x));
  T(tpg_plan_add_slot(p, "y", TPG_F32, TPG_MEM_DEVICE, (size_t)MAX * H, &y));
  T(tpg_plan_add_slot(p, "t", TPG_F32, TPG_MEM_SCRATCH, (size_t)s * H, &t));
  T(tpg_plan_add_slot(p, "u", TPG_F32, TPG_MEM_SCRATCH, (size_t)s * H, &u));
  T(tpg_plan_add_slot(p, "a", TPG_BF16, TPG_MEM_DEVICE, (size_t)MAX * K, &a));
  T(tpg_plan_add_slot(p, "w", TPG_BF16, TPG_MEM_DEVICE, (size_t)N * K, &w));
  T(tpg_plan_add_slot(p, "c", TPG_BF16, TPG_MEM_SCRATCH, (size_t)s * N, &cc));
  const int n = s * H;
  tpg_node cp, k1, k2, g;
  T(tpg_plan_add_memcpy(p, (tpg_view){t, 0, 0}, (tpg_view){x, 0, 0}, (size_t)n, NULL, 0, &cp));
  T(add_scale2(p, c, u, t, &n, cp, &k1));
  T(add_scale2(p, c, y, u, &n, k1, &k2));
  tpg_gemm_desc gd = TPG_GEMM_DESC_INIT;
  gd.m = s;
  gd.n = N;
  gd.k = K;
  gd.x.slot = a;
  gd.w.slot = w;
  gd.y.slot = cc;
  T(tpg_plan_add_gemm(p, &gd, &k2, 1, &g));
  if (c->extra == 1) T(tpg_plan_add_host(p, host_fn, NULL, &g, 1, NULL));
  if (c->extra == 2) T(tpg_plan_add_memset(p, (tpg_view){u, 0, 0}, 0, (size_t)n, &g, 1, NULL));
  c->b[0] = (tpg_binding){x, c->other_x && s == 8 ? c->x2 : c->x};
  c->b[1] = (tpg_binding){y, c->y};
  c->b[2] = (tpg_binding){a, c->a};
  c->b[3] = (tpg_binding){w, c->w};
  c->nb = c->unbound && s == 8 ? 3 : 4;
  if (c->unbound && s == 8) c->b[1] = c->b[3];
  return TPG_SUCCESS;
}

static tpg_status build(void *user, int size, tpg_graph_set_step *out) {
  step_ctx *c = user;
  c->calls++;
  if (c->no_plan) return TPG_SUCCESS;
  if (c->twice && c->last) {
    out->plan = c->last;
    return TPG_SUCCESS;
  }
  tpg_plan *p = NULL;
  T(tpg_plan_create(&p));
  out->plan = p; /* the set's from here on, also when we fail */
  c->last = p;
  if (size == c->fail_size) return tpg_plan_add_slot(p, "", TPG_F32, TPG_MEM_DEVICE, 1, &(tpg_slot){0});
  T(step_plan(c, size, p));
  out->bindings = c->b;
  out->nbindings = c->nb;
  return TPG_SUCCESS;
}

static const int g_sizes[] = {8, 1, 40, 8, 16}; /* unsorted, one duplicate: 1, 8, 16, 40 */

static int is_poison(const float *p) {
  uint32_t u;
  memcpy(&u, p, 4);
  return u == 0xffffffffu;
}

/* Launch for `batch` rows: the picked size's rows get 4 x, the rest stays
 * poisoned. Returns the wrong elements. */
static int run_batch(tpg_graph_set *set, step_ctx *c, const float *x, int batch, int want_size) {
  int size = 0;
  tpg_graph *g = NULL;
  CHECK_OK(tpg_graph_set_pick(set, batch, &size, &g));
  CHECK(size == want_size && g != NULL);
  if (!g) return 1;
  memset(c->y, 0xff, (size_t)MAX * H * 4);
  CHECK_OK(tpg_graph_launch(g, NULL));
  int wrong = 0;
  for (int i = 0; i < MAX * H; i++) wrong += i < size * H ? c->y[i] != 4.0f * x[i] : !is_poison(&c->y[i]);
  return wrong;
}

static void fill_x(float *x, float base) {
  for (int i = 0; i < MAX * H; i++) x[i] = base + (float)(i % 97) * 0.25f;
}

static tpg_graph_config config(void) {
  tpg_graph_config cfg = TPG_GRAPH_CONFIG_INIT;
  return cfg;
}

static void per_size(step_ctx *c, unsigned flags) {
  tpg_graph_config cfg = config();
  tpg_graph_set *set = NULL;
  c->calls = 0;
  CHECK_OK(tpg_graph_set_create(g_sizes, 5, build, c, &cfg, flags, &set));
  if (!set) return;
  CHECK(c->calls == 4);
  tpg_graph_set_info si;
  CHECK_OK(tpg_graph_set_get_info(set, &si, sizeof si));
  const size_t want_arena = 2 * R256((size_t)MAX * H * 4) + R256((size_t)MAX * N * 2);
  const int priv = (flags & TPG_GRAPH_SET_PRIVATE_SCRATCH) != 0, par = (flags & TPG_GRAPH_SET_PARALLEL) != 0;
  CHECK(si.count == 4 && si.graphs == 4 && si.retarget == 0);
  CHECK(si.arena_bytes == (priv ? 0 : want_arena));
  CHECK(si.measured_bytes >= si.arena_bytes + si.own_bytes); /* the fake's free memory counts allocations */
  CHECK(si.build_us > 0 && si.builder_us > 0 && si.builder_us <= si.build_us);
  size_t own = 0;
  for (int i = 0; i < 4; i++) {
    tpg_graph_set_size_info zi;
    CHECK_OK(tpg_graph_set_get_size_info(set, i, &zi, sizeof zi));
    static const int want[4] = {1, 8, 16, 40};
    const size_t arena_i = 2 * R256((size_t)want[i] * H * 4) + R256((size_t)want[i] * N * 2);
    CHECK(zi.size == want[i] && zi.arena_bytes == arena_i);
    CHECK(priv ? zi.own_bytes >= arena_i : zi.own_bytes < arena_i);
    CHECK((par ? zi.measured_bytes == 0 : zi.measured_bytes >= zi.own_bytes) && zi.create_us > 0 &&
          zi.instantiate_us > 0);
    own += zi.own_bytes;
    printf("  size %2d: arena %6zu B, own %6zu B, measured %6zu B, builder %.1f us, create %.1f us\n", zi.size,
           zi.arena_bytes, zi.own_bytes, zi.measured_bytes, zi.builder_us, zi.create_us);
  }
  CHECK(own == si.own_bytes);
  fill_x(c->x, 1.0f);
  static const int batch[] = {1, 2, 8, 9, 16, 17, 40, 3};
  static const int want[] = {1, 8, 8, 16, 16, 40, 40, 8};
  int wrong = 0;
  for (int k = 0; k < 8; k++) wrong += run_batch(set, c, c->x, batch[k], want[k]);
  printf("%s: 4 graphs, arena %zu B, %d wrong\n",
         priv ? "one graph per size, private scratch" : par ? "one graph per size, finished in parallel"
                                                        : "one graph per size",
         si.arena_bytes, wrong);
  CHECK(wrong == 0);
  int size;
  tpg_graph *g;
  CHECK_OK(tpg_graph_set_pick(set, 16, &size, &g));
  CHECK_ST(tpg_graph_destroy(g), TPG_ERROR_INVALID_ARGUMENT, "graph belongs to a tpg_graph_set");
  CHECK_OK(tpg_graph_set_destroy(set));
  CHECK_ST(tpg_graph_set_pick(set, 1, &size, &g), TPG_ERROR_INVALID_ARGUMENT, "set is not a live tpg_graph_set");
}

static void retarget(step_ctx *c) {
  tpg_graph_config cfg = config();
  tpg_graph_set *set = NULL;
  CHECK_OK(tpg_graph_set_create(g_sizes, 5, build, c, &cfg, TPG_GRAPH_SET_RETARGET, &set));
  if (!set) return;
  tpg_graph_set_info si;
  CHECK_OK(tpg_graph_set_get_info(set, &si, sizeof si));
  CHECK(si.count == 4 && si.graphs == 1 && si.retarget == 1 && si.arena_bytes == 0);
  fill_x(c->x, -3.0f);
  long k0 = tpgfake_counter(TPGFAKE_C_EXEC_KSET);
  int wrong = run_batch(set, c, c->x, 33, 40); /* the exec's own size: no setter */
  CHECK(tpgfake_counter(TPGFAKE_C_EXEC_KSET) == k0);
  wrong += run_batch(set, c, c->x, 5, 8);
  const long per_switch = tpgfake_counter(TPGFAKE_C_EXEC_KSET) - k0;
  CHECK(per_switch == 3); /* two engine kernels and the GEMM */
  wrong += run_batch(set, c, c->x, 7, 8); /* the same size again: nothing to do */
  CHECK(tpgfake_counter(TPGFAKE_C_EXEC_KSET) - k0 == per_switch);
  wrong += run_batch(set, c, c->x, 1, 1);
  wrong += run_batch(set, c, c->x, 12, 16);
  /* A rebind at size 16 holds at size 1 and 40 too. */
  int size;
  tpg_graph *g;
  CHECK_OK(tpg_graph_set_pick(set, 16, &size, &g));
  fill_x(c->x2, 5.0f);
  tpg_binding nb = {c->b[0].slot, c->x2};
  CHECK_OK(tpg_graph_rebind(g, &nb, 1));
  wrong += run_batch(set, c, c->x2, 16, 16);
  wrong += run_batch(set, c, c->x2, 1, 1);
  wrong += run_batch(set, c, c->x2, 40, 40);
  printf("retargeted exec: 1 graph, %ld kernel-node setters per switch, %d wrong\n", per_switch, wrong);
  CHECK(wrong == 0);
  CHECK_ST(tpg_graph_update(g, NULL, NULL, 0), TPG_ERROR_UNSUPPORTED, "retargeting tpg_graph_set");
  CHECK_ST(tpg_graph_destroy(g), TPG_ERROR_INVALID_ARGUMENT, "graph belongs to a tpg_graph_set");
  CHECK_OK(tpg_graph_set_destroy(set));
  c->b[0].ptr = c->x;
}

/* A size that fails on a worker: the set's message names it, and nothing
 * of any size stays live (the sizes finished before it, those begun and
 * never finished). */
static void parallel_failure(step_ctx *c) {
  tpg_graph_config cfg = config();
  tpg_graph_set *set = (tpg_graph_set *)1;
  const long live0 = tpgfake_live(NULL, 0);
  tpgfake_reset();
  tpgfake_fail_call("cuGraphInstantiateWithFlags", 3);
  tpg_status st = tpg_graph_set_create(g_sizes, 5, build, c, &cfg, TPG_GRAPH_SET_PARALLEL, &set);
  tpgfake_fail_call(NULL, 0);
  CHECK(st != TPG_SUCCESS && set == NULL);
  CHECK(strncmp(tpg_last_error(), "tpg_graph_set_create: size ", 27) == 0 && strstr(tpg_last_error(), "Instantiate"));
  printf("a size failing on a worker: %s\n", tpg_last_error());
  char why[256];
  const long live = tpgfake_live(why, sizeof why);
  CHECK(live == live0 || (fprintf(stderr, "live: %s\n", why), 0));
}

static void refusals(step_ctx *c) {
  tpg_graph_config cfg = config();
  tpg_graph_set *set = (tpg_graph_set *)1;
  const int one = 1, zero = 0;
  CHECK_ST(tpg_graph_set_create(g_sizes, 5, build, c, &cfg, 0, NULL), TPG_ERROR_INVALID_ARGUMENT, "out is NULL");
  CHECK_ST(tpg_graph_set_create(g_sizes, 0, build, c, &cfg, 0, &set), TPG_ERROR_INVALID_ARGUMENT, "nsizes is 0");
  CHECK(set == NULL);
  CHECK_ST(tpg_graph_set_create(NULL, 2, build, c, &cfg, 0, &set), TPG_ERROR_INVALID_ARGUMENT, "sizes is NULL");
  CHECK_ST(tpg_graph_set_create(&zero, 1, build, c, &cfg, 0, &set), TPG_ERROR_INVALID_ARGUMENT, "sizes[0] is 0");
  CHECK_ST(tpg_graph_set_create(&one, 1, NULL, c, &cfg, 0, &set), TPG_ERROR_INVALID_ARGUMENT, "build is NULL");
  CHECK_ST(tpg_graph_set_create(&one, 1, build, c, NULL, 0, &set), TPG_ERROR_INVALID_ARGUMENT, "cfg is NULL");
  tpg_graph_config bad = cfg;
  bad.bindings = c->b;
  bad.nbindings = 1;
  CHECK_ST(tpg_graph_set_create(&one, 1, build, c, &bad, 0, &set), TPG_ERROR_INVALID_ARGUMENT, "cfg->bindings is set");
  CHECK_ST(tpg_graph_set_create(&one, 1, build, c, &cfg, 0x10, &set), TPG_ERROR_INVALID_ARGUMENT, "flags is 0x10");
  CHECK_ST(tpg_graph_set_create(&one, 1, build, c, &cfg, TPG_GRAPH_SET_PARALLEL | TPG_GRAPH_SET_RETARGET, &set),
           TPG_ERROR_INVALID_ARGUMENT, "a retargeted set has one graph");
  bad = cfg;
  bad.mode = TPG_MODE_EAGER;
  CHECK_ST(tpg_graph_set_create(&one, 1, build, c, &bad, TPG_GRAPH_SET_RETARGET, &set), TPG_ERROR_INVALID_ARGUMENT,
           "retargeting needs TPG_MODE_EXPLICIT");
  /* The builder: failing (its message kept), one plan twice, no plan, a plan that cannot be bound. */
  c->fail_size = 8;
  CHECK_ST(tpg_graph_set_create(g_sizes, 5, build, c, &cfg, 0, &set), TPG_ERROR_INVALID_ARGUMENT,
           "the builder failed for size 8: tpg_plan_add_slot: name is NULL or empty");
  CHECK(strncmp(tpg_last_error(), "tpg_graph_set_create: ", 22) == 0);
  c->fail_size = 0;
  c->twice = 1;
  c->last = NULL;
  CHECK_ST(tpg_graph_set_create(g_sizes, 5, build, c, &cfg, 0, &set), TPG_ERROR_INVALID_ARGUMENT,
           "the builder returned the same plan for sizes 16 and 40");
  c->twice = 0;
  c->no_plan = 1;
  CHECK_ST(tpg_graph_set_create(g_sizes, 5, build, c, &cfg, 0, &set), TPG_ERROR_INVALID_ARGUMENT,
           "without a plan");
  c->no_plan = 0;
  c->unbound = 1;
  CHECK_ST(tpg_graph_set_create(g_sizes, 5, build, c, &cfg, 0, &set), TPG_ERROR_INVALID_ARGUMENT,
           "size 8: slot \"y\" is used by the plan but not bound");
  c->unbound = 0;
  /* What a retargeting set cannot take, by name. */
  c->extra = 1;
  CHECK_ST(tpg_graph_set_create(g_sizes, 5, build, c, &cfg, TPG_GRAPH_SET_RETARGET, &set), TPG_ERROR_UNSUPPORTED,
           "is a host node, which an exec cannot retarget");
  c->extra = 2;
  CHECK_ST(tpg_graph_set_create(g_sizes, 5, build, c, &cfg, TPG_GRAPH_SET_RETARGET, &set), TPG_ERROR_UNSUPPORTED,
           "size 16: node memset#4 needs a launch the largest size's exec node cannot take");
  c->extra = 0;
  c->other_x = 1;
  CHECK_ST(tpg_graph_set_create(g_sizes, 5, build, c, &cfg, TPG_GRAPH_SET_RETARGET, &set), TPG_ERROR_INVALID_ARGUMENT,
           "size 8: bindings[0] (slot 1)");
  c->other_x = 0;
  CHECK(set == NULL);
  /* One graph per size takes all of these. */
  c->extra = 1;
  CHECK_OK(tpg_graph_set_create(g_sizes, 5, build, c, &cfg, 0, &set));
  c->extra = 0;
  int size = -1;
  tpg_graph *g = (tpg_graph *)1;
  CHECK_ST(tpg_graph_set_pick(set, 0, &size, &g), TPG_ERROR_INVALID_ARGUMENT, "batch is 0: expected 1..40");
  CHECK(size == 0 && g == NULL);
  CHECK_ST(tpg_graph_set_pick(set, 41, &size, &g), TPG_ERROR_INVALID_ARGUMENT, "batch is 41");
  CHECK_ST(tpg_graph_set_pick(set, 1, NULL, &g), TPG_ERROR_INVALID_ARGUMENT, "size and graph must not be NULL");
  CHECK_ST(tpg_graph_set_pick(NULL, 1, &size, &g), TPG_ERROR_INVALID_ARGUMENT, "set is NULL");
  tpg_graph_set_size_info zi;
  CHECK_ST(tpg_graph_set_get_size_info(set, 4, &zi, sizeof zi), TPG_ERROR_INVALID_ARGUMENT, "i is 4: expected 0..3");
  CHECK_ST(tpg_graph_set_get_size_info(set, 0, &zi, 4), TPG_ERROR_INVALID_ARGUMENT, "size is 4");
  tpg_graph_set_info si;
  CHECK_ST(tpg_graph_set_get_info(NULL, &si, sizeof si), TPG_ERROR_INVALID_ARGUMENT, "set is NULL");
  CHECK_OK(tpg_graph_set_destroy(set));
  CHECK_OK(tpg_graph_set_destroy(NULL));
  CHECK_ST(tpg_graph_set_destroy(set), TPG_ERROR_INVALID_ARGUMENT, "set is not a live tpg_graph_set");
}

int main(int argc, char **argv) {
  if (tpgfake_setup(argc, argv) != 0) return 2;
  /* Sizes past 32 rows would take cuBLASLt nodes (AUTO's band), which a
   * retargeting set refuses (docs/gemm.md); gemm_cublaslt_fake_test runs
   * them in sets. Here every GEMM is ours, as such a set needs. */
  setenv("TPG_GEMM_FAMILY", "ours", 1);
  static const unsigned char image[] = "fake kernels";
  static const tpg_embedded_blob table[] = {{"kernels", image, image + sizeof image}, {NULL, NULL, NULL}};
  step_ctx c;
  memset(&c, 0, sizeof c);
  CHECK_OK(tpg_module_load_embedded(table, "kernels", &c.mod));
  c.x = tpgfake_dev_alloc(0, (size_t)MAX * H * 4);
  c.x2 = tpgfake_dev_alloc(0, (size_t)MAX * H * 4);
  c.y = tpgfake_dev_alloc(0, (size_t)MAX * H * 4);
  c.a = tpgfake_dev_alloc(0, (size_t)MAX * K * 2);
  c.w = tpgfake_dev_alloc(0, (size_t)N * K * 2);
  per_size(&c, 0);
  per_size(&c, TPG_GRAPH_SET_PRIVATE_SCRATCH);
  per_size(&c, TPG_GRAPH_SET_PARALLEL);
  parallel_failure(&c);
  retarget(&c);
  refusals(&c);
  CHECK_OK(tpg_module_destroy(c.mod));
  tpgfake_free(c.x);
  tpgfake_free(c.x2);
  tpgfake_free(c.y);
  tpgfake_free(c.a);
  tpgfake_free(c.w);
  char why[256];
  long live = tpgfake_live(why, sizeof why), v = tpgfake_violations();
  if (live || v) fprintf(stderr, "fake: %ld live (%s), %ld violations\n%s", live, why, v, tpgfake_violation_text());
  CHECK(live == 0 && v == 0);
  return TPG_TEST_END();
}
