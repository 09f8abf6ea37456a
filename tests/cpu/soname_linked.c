/* soname_linked.c - a program linked against the shared library through
 * //lib:tpgraph_shared, the way Bazel programs link it (soname_test.sh runs
 * it): it starts only if the loader finds the library by its SONAME. */
#include <stdio.h>

#include "tpgraph.h"

int main(void) {
  if (tpg_version() != TPG_VERSION_CODE) {
    printf("linked: header %d, library %d\n", TPG_VERSION_CODE, tpg_version());
    return 1;
  }
  printf("linked: ok (tpgraph %d)\n", tpg_version());
  return 0;
}
