/* header_c11_test.c - the public header compiles as strict C11
 * (-std=c11 -pedantic -Wall -Wextra -Werror) and its initialisers work. */
#include "tpgraph.h"

#include <stdio.h>

int main(void) {
  tpg_gemm_desc g = TPG_GEMM_DESC_INIT;
  tpg_collective_desc c = TPG_COLLECTIVE_DESC_INIT;
  tpg_comm_config cc = TPG_COMM_CONFIG_INIT;
  tpg_graph_config gc = TPG_GRAPH_CONFIG_INIT;
  tpg_linear_desc ld = TPG_LINEAR_DESC_INIT;
  tpg_binding b = tpg_binding_cu(3, 0x7f0000001000ull); /* a CUdeviceptr, cast for the caller */
  int ok = b.slot == 3 && (uintptr_t)b.ptr == 0x7f0000001000ull && g.size == sizeof g && c.size == sizeof c && ld.size == sizeof ld && ld.nranks == 1 && ld.tokens == 1 && cc.size == sizeof cc && gc.size == sizeof gc &&
           cc.magic == TPG_CONFIG_MAGIC && gc.version == TPG_VERSION_CODE && tpg_version() == TPG_VERSION_CODE;
  printf("%d passed, %d failed\n", ok, !ok);
  return ok ? 0 : 1;
}
