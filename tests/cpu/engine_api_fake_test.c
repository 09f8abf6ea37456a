/* engine_api_fake_test.c - what an engine otherwise writes by hand, on the
 * stand-in driver of //tests/fake:
 * - tpg_module_load_embedded: a blob of a cuda_fatbin-style table found by
 *   name and loaded (its kernel runs in a graph and computes), a name the
 *   table lacks refused with the names it has, a blob the driver refuses
 *   named, a table without its NULL entry refused, every bad argument named;
 * - tpg_plan_copy_slots: src's slots declared in order (so tpg_plan_append
 *   takes src), kept where plan has them, refused with plan unchanged where
 *   they differ.
 * Nothing may stay live in the fake, and no violation may be recorded.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/fake/tpgfake.h"
#include "tests/tpg_test.h"

enum { N = 64 };

/* What cuda_fatbin writes, with images the fake knows: "fake..." loads (its
 * kernels are the fake's C kernels), "junk" has a NUL (so it passes the
 * library's own image check as PTX text) but the driver refuses it. */
static const unsigned char k_kernels[] = "fake kernels";
static const unsigned char k_junk[] = "junk image";
static const tpg_embedded_blob g_table[] = {
    {"junk", k_junk, k_junk + sizeof k_junk},
    {"kernels", k_kernels, k_kernels + sizeof k_kernels},
    {"broken", k_kernels + 4, k_kernels},
    {NULL, NULL, NULL},
};

static int slots_of(const tpg_plan *p) {
  int n = -1;
  tpg_plan_get_stats(p, NULL, &n, NULL);
  return n;
}

static void embedded_refusals(void) {
  tpg_module *m = (tpg_module *)1;
  CHECK_ST(tpg_module_load_embedded(g_table, "kernels", NULL), TPG_ERROR_INVALID_ARGUMENT, "out is NULL");
  CHECK_ST(tpg_module_load_embedded(NULL, "kernels", &m), TPG_ERROR_INVALID_ARGUMENT, "table is NULL");
  CHECK(m == NULL);
  CHECK_ST(tpg_module_load_embedded(g_table, NULL, &m), TPG_ERROR_INVALID_ARGUMENT, "name is NULL or empty");
  CHECK_ST(tpg_module_load_embedded(g_table, "", &m), TPG_ERROR_INVALID_ARGUMENT, "name is NULL or empty");
  CHECK_ST(tpg_module_load_embedded(g_table, "attention", &m), TPG_ERROR_INVALID_ARGUMENT,
           "name \"attention\": the table has no such blob (it has 3: junk, kernels, broken)");
  CHECK(strncmp(tpg_last_error(), "tpg_module_load_embedded: ", 26) == 0);
  CHECK_ST(tpg_module_load_embedded(g_table, "broken", &m), TPG_ERROR_INVALID_ARGUMENT,
           "table[2] (\"broken\"): start and end do not delimit an image");
  CHECK_ST(tpg_module_load_embedded(g_table, "junk", &m), TPG_ERROR_INVALID_ARGUMENT,
           "blob \"junk\": the driver refused the image");
  CHECK(m == NULL);
  static const tpg_embedded_blob empty[] = {{NULL, NULL, NULL}};
  CHECK_ST(tpg_module_load_embedded(empty, "kernels", &m), TPG_ERROR_INVALID_ARGUMENT, "(it has 0: none)");
  /* No NULL entry: the scan stops at 4096 entries instead of reading on. */
  tpg_embedded_blob *open = malloc(4097 * sizeof *open);
  for (int i = 0; open && i < 4097; i++) open[i] = (tpg_embedded_blob){"other", k_kernels, k_kernels + 4};
  CHECK_ST(tpg_module_load_embedded(open, "kernels", &m), TPG_ERROR_INVALID_ARGUMENT,
           "table has no NULL entry among its first 4096");
  free(open);
}

/* The blob found by name runs: y = 2 x through its "scale2" kernel. */
static void embedded_runs(void) {
  tpg_module *m = NULL;
  CHECK_OK(tpg_module_load_embedded(g_table, "kernels", &m));
  if (!m) return;
  tpg_plan *p = NULL;
  tpg_graph *g = NULL;
  float *x = tpgfake_dev_alloc(0, N * 4), *y = tpgfake_dev_alloc(0, N * 4);
  CHECK_OK(tpg_plan_create(&p));
  tpg_slot sx, sy;
  CHECK_OK(tpg_plan_add_slot(p, "x", TPG_F32, TPG_MEM_DEVICE, N, &sx));
  CHECK_OK(tpg_plan_add_slot(p, "y", TPG_F32, TPG_MEM_DEVICE, N, &sy));
  const int n = N;
  tpg_arg a[3] = {tpg_arg_view(sy, 0), tpg_arg_view(sx, 0), TPG_ARG_VALUE(n)};
  tpg_kernel_desc k = TPG_KERNEL_DESC_INIT;
  k.module = m;
  k.name = "scale2";
  k.args = a;
  k.nargs = 3;
  CHECK_OK(tpg_plan_add_kernel(p, &k, NULL, 0, NULL));
  tpg_binding b[2] = {{sx, x}, {sy, y}};
  tpg_graph_config cfg = TPG_GRAPH_CONFIG_INIT;
  cfg.bindings = b;
  cfg.nbindings = 2;
  CHECK_OK(tpg_graph_create(p, &cfg, &g));
  for (int i = 0; i < N; i++) x[i] = (float)i - 7.5f;
  memset(y, 0xff, N * 4);
  CHECK_OK(tpg_graph_launch(g, NULL));
  int wrong = 0;
  for (int i = 0; i < N; i++) wrong += y[i] != 2.0f * x[i];
  printf("embedded blob \"kernels\": scale2 in a graph, %d of %d wrong\n", wrong, N);
  CHECK(wrong == 0);
  CHECK_OK(tpg_graph_destroy(g));
  CHECK_OK(tpg_plan_destroy(p));
  CHECK_OK(tpg_module_destroy(m));
  tpgfake_free(x);
  tpgfake_free(y);
}

/* A source plan as an engine's step builder makes it: slots, then nodes. */
static tpg_plan *step_plan(size_t rows) {
  tpg_plan *p = NULL;
  tpg_slot x, y, t, h;
  CHECK_OK(tpg_plan_create(&p));
  CHECK_OK(tpg_plan_add_slot(p, "x", TPG_F32, TPG_MEM_DEVICE, rows * 8, &x));
  CHECK_OK(tpg_plan_add_slot(p, "y", TPG_F32, TPG_MEM_DEVICE, rows * 8, &y));
  CHECK_OK(tpg_plan_add_slot(p, "tmp", TPG_F32, TPG_MEM_SCRATCH, rows * 8, &t));
  CHECK_OK(tpg_plan_add_slot(p, "out", TPG_F32, TPG_MEM_HOST, rows * 8, &h));
  tpg_node a;
  CHECK_OK(tpg_plan_add_memcpy(p, (tpg_view){t, 0, 0}, (tpg_view){x, 0, 0}, rows * 8, NULL, 0, &a));
  CHECK_OK(tpg_plan_add_axpby(p, (tpg_view){y, 0, 0}, (tpg_view){t, 0, 0}, rows * 8, 2.0f, 0.0f, &a, 1, &a));
  CHECK_OK(tpg_plan_add_memcpy(p, (tpg_view){h, 0, 0}, (tpg_view){y, 0, 0}, rows * 8, &a, 1, NULL));
  return p;
}

static void copy_slots(void) {
  tpg_plan *big = step_plan(16), *small = step_plan(4), *p = NULL, *q = NULL;
  CHECK_OK(tpg_plan_create(&p));
  int added = -1;
  CHECK_ST(tpg_plan_copy_slots(NULL, big, &added), TPG_ERROR_INVALID_ARGUMENT, "plan is NULL");
  CHECK(added == 0);
  CHECK_ST(tpg_plan_copy_slots(p, NULL, &added), TPG_ERROR_INVALID_ARGUMENT, "src is NULL");
  CHECK_ST(tpg_plan_copy_slots(p, p, &added), TPG_ERROR_INVALID_ARGUMENT, "src is plan");
  /* Into an empty plan: every slot, same ids, names, kinds and counts. */
  CHECK_OK(tpg_plan_copy_slots(p, big, &added));
  CHECK(added == 4 && slots_of(p) == 4);
  int same = 1;
  for (tpg_slot s = 1; s <= 4; s++) {
    tpg_slot_info a, b;
    CHECK_OK(tpg_plan_get_slot_info(p, s, &a, sizeof a));
    CHECK_OK(tpg_plan_get_slot_info(big, s, &b, sizeof b));
    same &= !strcmp(a.name, b.name) && a.dtype == b.dtype && a.where == b.where && a.count == b.count;
  }
  CHECK(same);
  /* Again, and from the smaller plan: nothing more declared; both append. */
  CHECK_OK(tpg_plan_copy_slots(p, big, &added));
  CHECK(added == 0);
  CHECK_OK(tpg_plan_copy_slots(p, small, NULL));
  CHECK(slots_of(p) == 4);
  CHECK_OK(tpg_plan_append(p, big, NULL));
  CHECK_OK(tpg_plan_append(p, small, NULL));
  CHECK_OK(tpg_plan_validate(p));
  /* A plan of more slots than src keeps them; src's must be its first. */
  tpg_slot extra;
  CHECK_OK(tpg_plan_add_slot(p, "extra", TPG_F16, TPG_MEM_DEVICE, 8, &extra));
  CHECK_OK(tpg_plan_copy_slots(p, small, &added));
  CHECK(added == 0 && slots_of(p) == 5);
  /* The smaller first, then the larger: refused, plan unchanged. */
  CHECK_OK(tpg_plan_create(&q));
  CHECK_OK(tpg_plan_copy_slots(q, small, NULL));
  CHECK_ST(tpg_plan_copy_slots(q, big, &added), TPG_ERROR_INVALID_ARGUMENT,
           "src's slot \"x\" has 128 elements, plan's 32: copy from the plan of the largest shape first");
  CHECK(added == 0 && slots_of(q) == 4);
  /* A different first slot: refused by name, nothing added. */
  tpg_plan *r = NULL;
  tpg_slot s0;
  CHECK_OK(tpg_plan_create(&r));
  CHECK_OK(tpg_plan_add_slot(r, "x", TPG_F16, TPG_MEM_DEVICE, 1024, &s0));
  CHECK_ST(tpg_plan_copy_slots(r, big, &added), TPG_ERROR_INVALID_ARGUMENT,
           "plan's slot 1 is \"x\" (dtype 1, memory 0) but src's is \"x\" (dtype 0, memory 0)");
  CHECK(slots_of(r) == 1);
  CHECK_OK(tpg_plan_destroy(r));
  /* A destroyed plan is refused without being read. */
  CHECK_OK(tpg_plan_destroy(q));
  CHECK_ST(tpg_plan_copy_slots(q, big, NULL), TPG_ERROR_INVALID_ARGUMENT, "plan is not a live tpg_plan");
  CHECK_ST(tpg_plan_copy_slots(p, q, NULL), TPG_ERROR_INVALID_ARGUMENT, "src is not a live tpg_plan");
  CHECK_OK(tpg_plan_destroy(p));
  CHECK_OK(tpg_plan_destroy(big));
  CHECK_OK(tpg_plan_destroy(small));
}

int main(int argc, char **argv) {
  if (tpgfake_setup(argc, argv) != 0) return 2;
  embedded_refusals();
  embedded_runs();
  copy_slots();
  char why[256];
  long live = tpgfake_live(why, sizeof why), v = tpgfake_violations();
  if (live || v) fprintf(stderr, "fake: %ld live (%s), %ld violations\n%s", live, why, v, tpgfake_violation_text());
  CHECK(live == 0 && v == 0);
  return TPG_TEST_END();
}
