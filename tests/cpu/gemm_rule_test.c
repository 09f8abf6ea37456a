/* gemm_rule_test.c - lib/gemm/select.c's Hopper rule equals bench/zoo_rules.py's
 * rule(): for every shape in gemm_rule_picks.txt (the zoo's 1302 and a grid
 * around them, written by `zoo_rules.py ZOO.json --picks`) the selector's
 * launch is the launch of the variant the Python rule names. The rule was
 * derived and scored in Python; this keeps the C transcription from drifting.
 * argv[1]: the picks file. */
#include <stdio.h>
#include <string.h>

#include "kernels/tpg_kargs.h"
#include "lib/gemm/ours.h"
#include "lib/gemm/select.h"
#include "tests/cpu/gemm_test.h"
#include "tests/tpg_test.h"

static int same(const tpg_kernel_launch *a, const tpg_kernel_launch *b) {
  return !strcmp(a->kernel, b->kernel) && !memcmp(a->grid, b->grid, sizeof a->grid) &&
         !memcmp(a->block, b->block, sizeof a->block) && a->smem_bytes == b->smem_bytes &&
         a->split_k == b->split_k && a->workspace_bytes == b->workspace_bytes &&
         a->workspace_zeroed == b->workspace_zeroed && a->cluster == b->cluster;
}

int main(int argc, char **argv) {
  gemm_test_without_cublaslt();
  char line[256], name[64], why[200];
  int lines = 0, differ = 0;
  FILE *f = argc > 1 ? fopen(argv[1], "r") : NULL;
  CHECK(f != NULL);
  if (!f) return TPG_TEST_END();
  while (fgets(line, sizeof line, f)) {
    int m, n, k, e;
    tpg_gemm_variant v;
    tpg_kernel_launch a, b;
    tpg_tma_encode xa, wa, xb, wb;
    if (line[0] == '#') continue;
    if (sscanf(line, "%d %d %d %d %63s", &m, &n, &k, &e, name) != 5) {
      CHECK(!"a line of the picks file does not parse");
      continue;
    }
    ++lines;
    if (tpg_gemm_variant_parse(name, &v) ||
        tpg_gemm_select_tma(PROB(m, n, k, TPG_KDT_BF16, e, 90, 132, k, k, 1), &a, &xa, &wa, why, sizeof why) ||
        tpg_gemm_select_variant(PROB(m, n, k, TPG_KDT_BF16, e, 90, 132, k, k, 1), &v, &b, &xb, &wb, why, sizeof why)) {
      fprintf(stderr, "%d x %d x %d epi %d (%s): refused: %s\n", m, n, k, e, name, why);
      ++differ;
      continue;
    }
    if (!same(&a, &b) || memcmp(&xa, &xb, sizeof xa) || memcmp(&wa, &wb, sizeof wa)) {
      if (differ < 10)
        fprintf(stderr, "%d x %d x %d epi %d: zoo_rules.py picks %s (%s, grid %u), lib/gemm/select.c %s (grid %u)\n", m,
                n, k, e, name, b.kernel, b.grid[0], a.kernel, a.grid[0]);
      ++differ;
    }
  }
  fclose(f);
  printf("gemm_rule_test: %d shapes, %d differ\n", lines, differ);
  CHECK(lines >= 2000);
  CHECK(differ == 0);
  return TPG_TEST_END();
}
