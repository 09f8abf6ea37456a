/* consumer.c - the smallest program an engine would write against an
 * installed or external tpgraph: one include, one library. Built three ways
 * by CI (a Bazel workspace through local_repository, CMake find_package,
 * pkg-config), so each way of consuming the library is proven to compile,
 * link and run, not just to configure.
 *
 * It builds a row-parallel linear's plan for rank 0 of 2, prints the plan's
 * DOT, then asks for a graph. Without a GPU (CI) that must fail with
 * TPG_ERROR_NO_DRIVER / NO_DEVICE and a message; anything else is a failure.
 */
#include <stdio.h>
#include <stdlib.h>

#include "tpgraph.h"

#define TRY(call)                                                                   \
  do {                                                                              \
    tpg_status s_ = (call);                                                         \
    if (s_ != TPG_SUCCESS) {                                                        \
      fprintf(stderr, "consumer: %s: %s\n", #call, tpg_last_error());               \
      return 1;                                                                     \
    }                                                                               \
  } while (0)

int main(void) {
  if (tpg_version() != TPG_VERSION_CODE) {
    fprintf(stderr, "consumer: header %d, library %d\n", TPG_VERSION_CODE, tpg_version());
    return 1;
  }
  enum { T = 4, IN = 64, OUT = 32, R = 2 };
  tpg_plan *plan;
  tpg_slot x, w, y;
  TRY(tpg_plan_create(&plan));
  TRY(tpg_plan_add_slot(plan, "x", TPG_BF16, TPG_MEM_DEVICE, (size_t)T * IN / R, &x));
  TRY(tpg_plan_add_slot(plan, "w", TPG_BF16, TPG_MEM_DEVICE, (size_t)OUT * IN / R, &w));
  TRY(tpg_plan_add_slot(plan, "y", TPG_BF16, TPG_MEM_DEVICE, (size_t)T * OUT, &y));
  tpg_linear_desc d = TPG_LINEAR_DESC_INIT;
  d.kind = TPG_LINEAR_ROW;
  d.rank = 0;
  d.nranks = R;
  d.tokens = T;
  d.in_features = IN;
  d.out_features = OUT;
  d.x.slot = x;
  d.w.slot = w;
  d.y.slot = y;
  TRY(tpg_plan_add_linear(plan, &d, NULL, 0, NULL));
  TRY(tpg_plan_validate(plan));

  size_t need = 0;
  TRY(tpg_plan_dot(plan, NULL, 0, &need));
  char *dot = malloc(need);
  if (!dot) return 1;
  TRY(tpg_plan_dot(plan, dot, need, &need));
  fputs(dot, stdout);
  free(dot);

  tpg_runtime_info ri;
  TRY(tpg_runtime_get_info(&ri, sizeof ri));
  printf("consumer: tpgraph %d, nccl %d, devices %d, kernels %s\n", ri.version, ri.nccl_version,
         ri.device_count, ri.kernel_archs);
  int rc = 0;
  if (ri.device_count == 0) {
    tpg_device_info di;
    tpg_status s = tpg_device_get_info(0, &di, sizeof di);
    const char *msg = tpg_last_error();
    printf("consumer: no GPU: %s: %s\n", tpg_status_string(s), msg);
    if ((s != TPG_ERROR_NO_DRIVER && s != TPG_ERROR_NO_DEVICE) || msg[0] == '\0') rc = 1;
  } else {
    printf("consumer: %d GPU(s) visible; the no-GPU check does not apply\n", ri.device_count);
  }
  tpg_plan_destroy(plan);
  if (rc == 0) printf("consumer: ok\n");
  return rc;
}
