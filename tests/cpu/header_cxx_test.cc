// header_cxx_test.cc - the public header is usable from C++ (extern "C").
#include "tpgraph.h"

#include <cstdio>

int main() {
  tpg_gemm_desc g = TPG_GEMM_DESC_INIT;
  tpg_graph_config gc = TPG_GRAPH_CONFIG_INIT;
  tpg_linear_desc ld = TPG_LINEAR_DESC_INIT;
  tpg_plan *p = nullptr;
  tpg_binding b = tpg_binding_cu(3, 0x7f0000001000ull);
  bool ok = b.slot == 3 && reinterpret_cast<uintptr_t>(b.ptr) == 0x7f0000001000ull && g.size == sizeof g && ld.size == sizeof ld && ld.nranks == 1 && gc.magic == TPG_CONFIG_MAGIC && tpg_plan_create(&p) == TPG_SUCCESS;
  tpg_plan_destroy(p);
  std::printf("%d passed, %d failed\n", ok ? 1 : 0, ok ? 0 : 1);
  return ok ? 0 : 1;
}
