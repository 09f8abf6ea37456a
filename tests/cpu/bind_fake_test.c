/* bind_fake_test.c - a binding whose allocation ends before ptr + the slot's
 * bytes is refused at create, rebind and update, on the stand-in
 * driver, whose allocations report their exact range as the driver does:
 * TPG_ERROR_INVALID_ARGUMENT naming the binding, the slot and both sizes,
 * the graph unchanged (its next launch still copies the old buffers, and
 * no access strays outside a live allocation), nothing leaked. Legal
 * bindings at an offset inside a larger allocation are taken. Slots: "a"
 * (device, read), "b" (device, written), "h" (pinned host, written). */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <stdlib.h>

#include "tests/fake/tpgfake.h"
#include "tests/tpg_test.h"

#define N 256 /* floats per slot: 1024 bytes */

typedef struct {
  tpg_plan *p;
  tpg_slot a, b, h;
} gemm_like;

/* a -> b (device copy), b -> h (to pinned host): every slot read or written. */
static void make_plan(gemm_like *f, size_t n) {
  CHECK_OK(tpg_plan_create(&f->p));
  CHECK_OK(tpg_plan_add_slot(f->p, "a", TPG_F32, TPG_MEM_DEVICE, n, &f->a));
  CHECK_OK(tpg_plan_add_slot(f->p, "b", TPG_F32, TPG_MEM_DEVICE, n, &f->b));
  CHECK_OK(tpg_plan_add_slot(f->p, "h", TPG_F32, TPG_MEM_HOST, n, &f->h));
  tpg_node c1;
  CHECK_OK(tpg_plan_add_memcpy(f->p, (tpg_view){f->b, 0, 0}, (tpg_view){f->a, 0, 0}, n, NULL, 0, &c1));
  CHECK_OK(tpg_plan_add_memcpy(f->p, (tpg_view){f->h, 0, 0}, (tpg_view){f->b, 0, 0}, n, &c1, 1, NULL));
}

static int all(const float *p, size_t n, float v) {
  for (size_t i = 0; i < n; i++)
    if (p[i] != v) return 0;
  return 1;
}

int main(int argc, char **argv) {
  if (tpgfake_setup(argc, argv)) return 2;
  tpgfake_reset();
  gemm_like f;
  make_plan(&f, N);
  /* One big allocation holding a legal "a" at an offset, and short ones. */
  char *big = tpgfake_dev_alloc(0, 4 * N * 4);
  float *a = (float *)(big + 2 * N * 4); /* 2 slots' worth left from there: fine */
  float *b = tpgfake_dev_alloc(0, N * 4);
  float *h = tpgfake_host_alloc(N * 4);
  float *short_dev = tpgfake_dev_alloc(0, N * 4 - 64);
  float *short_host = tpgfake_host_alloc(N * 4 - 16);
  float *tail = (float *)(big + 4 * N * 4 - (N * 4 - 256)); /* 256 bytes short of a slot */
  for (int i = 0; i < N; i++) a[i] = 2.0f;

  /* Create: each short binding refused, naming the binding, the slot and both sizes. */
  tpg_graph_config cfg = TPG_GRAPH_CONFIG_INIT;
  tpg_binding bind[3] = {{f.a, a}, {f.b, b}, {f.h, h}};
  cfg.bindings = bind;
  cfg.nbindings = 3;
  tpg_graph *g = (tpg_graph *)&cfg; /* must come back NULL */
  bind[0].ptr = short_dev;
  CHECK_ST(tpg_graph_create(f.p, &cfg, &g), TPG_ERROR_INVALID_ARGUMENT, "cfg->bindings[0].ptr");
  CHECK(g == NULL);
  printf("create, short device buffer: %s\n", tpg_last_error());
  CHECK(strstr(tpg_last_error(), "slot \"a\": the allocation has 960 bytes from there (960 in all), the slot needs "
                                 "1024 (256 elements)") != NULL);
  bind[0].ptr = tail;
  CHECK_ST(tpg_graph_create(f.p, &cfg, &g), TPG_ERROR_INVALID_ARGUMENT,
           "the allocation has 768 bytes from there (4096 in all), the slot needs 1024");
  bind[0].ptr = a;
  bind[2].ptr = short_host;
  CHECK_ST(tpg_graph_create(f.p, &cfg, &g), TPG_ERROR_INVALID_ARGUMENT, "cfg->bindings[2].ptr");
  CHECK(strstr(tpg_last_error(), "slot \"h\": the allocation has 1008 bytes from there") != NULL);
  CHECK(strncmp(tpg_last_error(), "tpg_graph_create: ", 18) == 0);
  bind[2].ptr = h;
  CHECK(tpgfake_violations() == 0);

  /* The legal ones: "a" at an offset inside a larger allocation. */
  CHECK_OK(tpg_graph_create(f.p, &cfg, &g));
  CHECK_OK(tpg_graph_launch(g, NULL));
  CHECK_OK(tpg_graph_destroy(g));
  CHECK(all(h, N, 2.0f));
  CHECK_OK(tpg_graph_create(f.p, &cfg, &g));

  /* Rebind: refused the same way, the graph keeps its buffers. */
  tpg_binding nb = {f.a, short_dev};
  CHECK_ST(tpg_graph_rebind(g, &nb, 1), TPG_ERROR_INVALID_ARGUMENT, "tpg_graph_rebind: bindings[0].ptr");
  CHECK(strstr(tpg_last_error(), "slot \"a\": the allocation has 960 bytes") != NULL);
  nb = (tpg_binding){f.h, short_host};
  CHECK_ST(tpg_graph_rebind(g, &nb, 1), TPG_ERROR_INVALID_ARGUMENT, "slot \"h\": the allocation has 1008 bytes");
  tpg_binding two[2] = {{f.b, b}, {f.a, tail}}; /* the second is short: neither is taken */
  CHECK_ST(tpg_graph_rebind(g, two, 2), TPG_ERROR_INVALID_ARGUMENT, "bindings[1].ptr");
  for (int i = 0; i < N; i++) h[i] = -1.0f;
  CHECK_OK(tpg_graph_launch(g, NULL));
  /* Update with the same plan: the same check. */
  nb = (tpg_binding){f.b, short_dev};
  CHECK_ST(tpg_graph_update(g, NULL, &nb, 1), TPG_ERROR_INVALID_ARGUMENT, "tpg_graph_update: bindings[0].ptr");
  CHECK(strstr(tpg_last_error(), "slot \"b\": the allocation has 960 bytes") != NULL);
  /* Update with a plan whose slots are twice as large: the buffers kept
   * bound to "b" and "h" no longer cover them (a at its offset still does). */
  gemm_like f2;
  make_plan(&f2, 2 * N);
  float *b2 = tpgfake_dev_alloc(0, 2 * N * 4);
  nb = (tpg_binding){f2.b, b2};
  CHECK_ST(tpg_graph_update(g, f2.p, &nb, 1), TPG_ERROR_INVALID_ARGUMENT, "the buffer kept bound to slot \"h\"");
  printf("update, kept buffer too small for the new plan: %s\n", tpg_last_error());
  CHECK(strstr(tpg_last_error(), "the allocation has 1024 bytes from there (1024 in all), the slot needs 2048") !=
        NULL);
  float *h2 = tpgfake_host_alloc(2 * N * 4);
  tpg_binding both[2] = {{f2.b, b2}, {f2.h, h2}};
  CHECK_OK(tpg_graph_update(g, f2.p, both, 2)); /* a: 2048 bytes from its offset, enough */
  CHECK_OK(tpg_graph_destroy(g));
  CHECK(all(h, N, 2.0f)); /* the launch after the refusals used the old buffers */
  CHECK(tpgfake_violations() == 0);
  if (tpgfake_violations()) fprintf(stderr, "violations: %s\n", tpgfake_violation_text());

  tpg_plan_destroy(f.p);
  tpg_plan_destroy(f2.p);
  tpgfake_free(big);
  tpgfake_free(b);
  tpgfake_free(h);
  tpgfake_free(b2);
  tpgfake_free(h2);
  tpgfake_free(short_dev);
  tpgfake_free(short_host);
  char why[256] = "";
  CHECK(tpgfake_live(why, sizeof why) == 0);
  if (why[0] && tpgfake_live(NULL, 0)) fprintf(stderr, "live: %s\n", why);
  return TPG_TEST_END();
}
