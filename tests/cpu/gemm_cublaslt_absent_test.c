/* gemm_cublaslt_absent_test.c - without cuBLASLt the family is left out,
 * with a message, and everything still runs on ours.
 *
 * TPG_LIBCUBLASLT names a file that does not exist (set before the first
 * GEMM choice: the library loads cuBLASLt once per process): the family
 * reports unavailable naming the file; the rule's stated band, a forced
 * TPG_GEMM_FAMILY=cublaslt and a cached "cublaslt" variant all run ours;
 * no cuBLASLt candidate is listed; a forced cuBLASLt variant is refused
 * with the loader's message; a graph is made and run on the stand-in
 * driver with ours (tpg_graph_info says so).
 */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/tpg_kargs.h"
#include "lib/gemm/select.h"
#include "tests/fake/tpgfake.h"
#include "tests/tpg_test.h"

static tpg_view V(tpg_slot s) { return (tpg_view){s, 0, 0}; }

int main(int argc, char **argv) {
  char why[400];
  setenv("TPG_LIBCUBLASLT", "/nonexistent/libcublasLt.so.13", 1);
  if (tpgfake_setup(argc, argv) != 0) return 2;
  CHECK(tpg_gemm_family_available(TPG_GEMM_FAMILY_CUBLASLT, why, sizeof why) != 0);
  CHECK(strstr(why, "/nonexistent/libcublasLt.so.13") && strstr(why, "left out") && strstr(why, "TPG_LIBCUBLASLT"));
  printf("cuBLASLt absent: %s\n", why);
  {
    tpg_gemm_problem p = tpg_gemm_problem_make(128, 4096, 4096, TPG_KDT_BF16, TPG_EPI_BIAS, 90, 132);
    tpg_gemm_variant v, list[TPG_GEMM_MAX_CANDIDATES];
    tpg_kernel_launch l;
    tpg_tma_encode xe, we;
    for (int fam = TPG_GEMM_FAMILY_AUTO; fam < TPG_GEMM_FAMILY_COUNT; fam++) {
      CHECK(tpg_gemm_select_rule_variant(&p, fam, &v, why, sizeof why) == 0);
      CHECK(tpg_gemm_variant_family(&v) != TPG_GEMM_FAMILY_CUBLASLT);
      CHECK(tpg_gemm_select_rule(&p, fam, &l, &xe, &we, why, sizeof why) == 0 && l.family != TPG_GEMM_FAMILY_CUBLASLT);
    }
    const int n = tpg_gemm_candidates(&p, list, TPG_GEMM_MAX_CANDIDATES);
    CHECK(n > 1);
    for (int i = 0; i < n; i++) CHECK(list[i].kind != TPG_GEMM_VAR_CUBLASLT);
    CHECK(tpg_gemm_variant_parse("cublaslt", &v) == 0);
    CHECK(tpg_gemm_select_variant(&p, &v, &l, &xe, &we, why, sizeof why) != 0 && strstr(why, "cannot load cuBLASLt"));
  }
  /* a graph asking for the family: ours */
  {
    enum { M = 128, N = 4096, K = 64 };
    uint16_t *x = tpgfake_dev_alloc(0, M * K * 2), *w = tpgfake_dev_alloc(0, (size_t)N * K * 2);
    uint16_t *y = tpgfake_dev_alloc(0, (size_t)M * N * 2), *b = tpgfake_dev_alloc(0, N * 2);
    tpg_plan *p = NULL;
    tpg_graph *g = NULL;
    tpg_slot s[4];
    tpg_graph_info info;
    setenv("TPG_GEMM_FAMILY", "cublaslt", 1);
    CHECK_OK(tpg_plan_create(&p));
    CHECK_OK(tpg_plan_add_slot(p, "x", TPG_BF16, TPG_MEM_DEVICE, (size_t)M * K, &s[0]));
    CHECK_OK(tpg_plan_add_slot(p, "w", TPG_BF16, TPG_MEM_DEVICE, (size_t)N * K, &s[1]));
    CHECK_OK(tpg_plan_add_slot(p, "y", TPG_BF16, TPG_MEM_DEVICE, (size_t)M * N, &s[2]));
    CHECK_OK(tpg_plan_add_slot(p, "b", TPG_BF16, TPG_MEM_DEVICE, N, &s[3]));
    tpg_gemm_desc d = TPG_GEMM_DESC_INIT;
    d.m = M, d.n = N, d.k = K, d.epilogue = TPG_EPILOGUE_BIAS;
    d.x = V(s[0]), d.w = V(s[1]), d.y = V(s[2]), d.bias = V(s[3]);
    CHECK_OK(tpg_plan_add_gemm(p, &d, NULL, 0, NULL));
    tpg_binding bd[4] = {{s[0], x}, {s[1], w}, {s[2], y}, {s[3], b}};
    tpg_graph_config cfg = TPG_GRAPH_CONFIG_INIT;
    cfg.bindings = bd;
    cfg.nbindings = 4;
    CHECK_OK(tpg_graph_create(p, &cfg, &g));
    CHECK_OK(tpg_graph_launch(g, NULL));
    CHECK(g && tpg_graph_get_info(g, &info, sizeof info) == TPG_SUCCESS && info.gemm_cublaslt_nodes == 0 &&
          info.gemm_ours_nodes + info.gemm_cutlass_nodes == 1);
    CHECK(tpgfake_counter(TPGFAKE_C_LT_MATMUL) == 0 && tpgfake_violations() == 0);
    if (g) tpg_graph_destroy(g);
    tpg_plan_destroy(p);
    tpgfake_free(x);
    tpgfake_free(w);
    tpgfake_free(y);
    tpgfake_free(b);
    unsetenv("TPG_GEMM_FAMILY");
  }
  CHECK(tpgfake_live(NULL, 0) == 0);
  return TPG_TEST_END();
}
