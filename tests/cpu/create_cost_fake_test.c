/* create_cost_fake_test.c - what graph creation spends, on the stand-in
 * driver (loading every fatbin at the first lookup made a 4-node graph take
 * 16 ms to create on an H200). tpgraph's embedded fatbins are loaded once per
 * process, each only when a graph first needs one of its kernels, and the
 * time is reported (tpg_graph_info.prepare_us, kernel_load_us). Checked in a
 * fresh process: a graph whose only kernel is axpby loads exactly one fatbin
 * (a second load is made to fail, and creation still succeeds); a second
 * graph of the same plan loads none; the breakdown adds up. The H200's
 * figures come from the GPU suite (pybind stage prints them). */
#define _POSIX_C_SOURCE 200809L
#include <stdlib.h>

#include "tests/fake/tpgfake.h"
#include "tests/tpg_test.h"

#define N 1024

static tpg_graph *create(tpg_plan *p, tpg_binding *b, tpg_graph_info *info) {
  tpg_graph_config cfg = TPG_GRAPH_CONFIG_INIT;
  cfg.bindings = b;
  cfg.nbindings = 2;
  tpg_graph *g = NULL;
  CHECK_OK(tpg_graph_create(p, &cfg, &g));
  if (g) CHECK_OK(tpg_graph_get_info(g, info, sizeof *info));
  return g;
}

int main(int argc, char **argv) {
  if (tpgfake_setup(argc, argv)) return 2;
  tpg_plan *p = NULL;
  tpg_slot x, y;
  tpg_node ms[2];
  CHECK_OK(tpg_plan_create(&p));
  CHECK_OK(tpg_plan_add_slot(p, "x", TPG_F32, TPG_MEM_DEVICE, N, &x));
  CHECK_OK(tpg_plan_add_slot(p, "y", TPG_F32, TPG_MEM_DEVICE, N, &y));
  CHECK_OK(tpg_plan_add_memset(p, (tpg_view){x, 0, 0}, 0x3f800000u, N, NULL, 0, &ms[0])); /* x = 1 */
  CHECK_OK(tpg_plan_add_memset(p, (tpg_view){y, 0, 0}, 0x3f800000u, N, NULL, 0, &ms[1])); /* y = 1 */
  CHECK_OK(tpg_plan_add_axpby(p, (tpg_view){y, 0, 0}, (tpg_view){x, 0, 0}, N, 2.0f, 1.0f, ms, 2, NULL));
  float *bx = tpgfake_dev_alloc(0, N * 4), *by = tpgfake_dev_alloc(0, N * 4);
  tpg_binding b[2] = {{x, bx}, {y, by}};

  tpgfake_reset();
  tpgfake_fail_call("cuLibraryLoadData", 2); /* one fatbin (elementwise) is all this graph needs */
  tpg_graph_info i1, i2;
  tpg_graph *g1 = create(p, b, &i1);
  CHECK(tpgfake_failed() == NULL);
  tpgfake_reset();
  tpgfake_fail_call("cuLibraryLoadData", 1); /* loaded already: none this time */
  tpg_graph *g2 = create(p, b, &i2);
  CHECK(tpgfake_failed() == NULL);
  tpgfake_reset();
  if (g1 && g2) {
    CHECK_OK(tpg_graph_launch(g2, NULL));
    CHECK_OK(tpg_graph_destroy(g2));
    CHECK(bx[0] == 1.0f && by[N - 1] == 1.0f); /* the fake checks axpby's bounds; it does not compute it */
    for (int k = 0; k < 2; k++) {
      const tpg_graph_info *in = k ? &i2 : &i1;
      printf("graph %d: prepare %.1f us, materialize %.1f us, instantiate %.1f us, of which loading device code "
             "%.1f us\n", k + 1, in->prepare_us, in->materialize_us, in->instantiate_us, in->kernel_load_us);
      CHECK(in->prepare_us >= 0 && in->kernel_load_us > 0);
      CHECK(in->kernel_load_us <= in->prepare_us + in->materialize_us + 1.0);
    }
    CHECK_OK(tpg_graph_destroy(g1));
  }
  tpg_plan_destroy(p);
  tpgfake_free(bx);
  tpgfake_free(by);
  CHECK(tpgfake_live(NULL, 0) == 0 && tpgfake_violations() == 0);
  return TPG_TEST_END();
}
