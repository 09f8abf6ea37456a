/* nccl_load_test.c - NCCL is loaded when a comm is made, not with the
 * library, on the stand-in driver. Each case runs in a child
 * process, because the loader, like the driver's, decides once per process:
 *   missing   TPG_LIBNCCL names no file: a graph without collectives is
 *             created, launched and destroyed as if NCCL did not exist; the
 *             runtime info says why there is no NCCL; the comm calls fail with
 *             TPG_ERROR_NCCL under their own names, naming TPG_LIBNCCL,
 *             leaking nothing, and again the same way on a second try.
 *   not NCCL  TPG_LIBNCCL names a library without NCCL's entry points (libc):
 *             refused naming the first entry point it lacks.
 *   fake      the shim (tests/fake): the comm is made through the loader. */
#define _POSIX_C_SOURCE 200809L
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/fake/tpgfake.h"
#include "tests/tpg_test.h"

#define N 256

/* A memset + copy graph on device 0: no collective, so no comm and no NCCL. */
static void graph_without_nccl(void) {
  float *a = tpgfake_dev_alloc(0, N * 4), *b = tpgfake_dev_alloc(0, N * 4);
  tpg_plan *p = NULL;
  tpg_graph *g = NULL;
  tpg_slot sa, sb;
  tpg_node n1;
  CHECK_OK(tpg_plan_create(&p));
  CHECK_OK(tpg_plan_add_slot(p, "a", TPG_F32, TPG_MEM_DEVICE, N, &sa));
  CHECK_OK(tpg_plan_add_slot(p, "b", TPG_F32, TPG_MEM_DEVICE, N, &sb));
  CHECK_OK(tpg_plan_add_memset(p, (tpg_view){sa, 0, 0}, 0x3f800000u, N, NULL, 0, &n1)); /* 1.0f */
  CHECK_OK(tpg_plan_add_memcpy(p, (tpg_view){sb, 0, 0}, (tpg_view){sa, 0, 0}, N, &n1, 1, NULL));
  tpg_binding bind[2] = {{sa, a}, {sb, b}};
  tpg_graph_config cfg = TPG_GRAPH_CONFIG_INIT;
  cfg.bindings = bind;
  cfg.nbindings = 2;
  CHECK_OK(tpg_graph_create(p, &cfg, &g));
  CHECK_OK(tpg_graph_launch(g, NULL));
  CHECK_OK(tpg_graph_destroy(g));
  CHECK(b[0] == 1.0f && b[N - 1] == 1.0f);
  tpg_plan_destroy(p);
  tpgfake_free(a);
  tpgfake_free(b);
}

static void comm_calls_fail(const char *needle) {
  for (int attempt = 0; attempt < 2; attempt++) { /* the failure is remembered, not retried into a crash */
    tpg_comm_id id;
    CHECK_ST(tpg_comm_id_create(&id), TPG_ERROR_NCCL, needle);
    CHECK(strncmp(tpg_last_error(), "tpg_comm_id_create: ", 20) == 0);
    memset(&id, 0, sizeof id);
    tpg_comm_config cc = TPG_COMM_CONFIG_INIT;
    tpg_comm *c = (tpg_comm *)&id; /* must come back NULL */
    CHECK_ST(tpg_comm_create(&id, &cc, &c), TPG_ERROR_NCCL, needle);
    CHECK(c == NULL && strncmp(tpg_last_error(), "tpg_comm_create: ", 17) == 0);
  }
}

static int case_missing(void) {
  setenv("TPG_LIBNCCL", "/nonexistent/libnccl.so.2", 1);
  graph_without_nccl();
  tpg_runtime_info ri;
  CHECK_OK(tpg_runtime_get_info(&ri, sizeof ri));
  CHECK(ri.nccl_version == 0 && strstr(ri.nccl_error, "/nonexistent/libnccl.so.2") != NULL &&
        strstr(ri.nccl_error, "TPG_LIBNCCL") != NULL);
  printf("missing: nccl_error \"%s\"\n", ri.nccl_error);
  comm_calls_fail("TPG_LIBNCCL");
  char why[256];
  CHECK(tpgfake_live(why, sizeof why) == 0);
  return TPG_TEST_END();
}

static int case_not_nccl(void) {
  setenv("TPG_LIBNCCL", "libc.so.6", 1);
  comm_calls_fail("libc.so.6 has no ncclGetVersion");
  printf("not NCCL: %s\n", tpg_last_error());
  graph_without_nccl();
  return TPG_TEST_END();
}

static int case_fake(void) {
  tpg_runtime_info ri;
  CHECK_OK(tpg_runtime_get_info(&ri, sizeof ri));
  CHECK(ri.nccl_version >= 22000 && ri.nccl_error[0] == '\0');
  tpg_comm_id id;
  CHECK_OK(tpg_comm_id_create(&id));
  tpg_comm_config cc = TPG_COMM_CONFIG_INIT;
  tpg_comm *c = NULL;
  CHECK_OK(tpg_comm_create(&id, &cc, &c));
  CHECK_OK(tpg_comm_destroy(c));
  CHECK(tpgfake_live(NULL, 0) == 0);
  return TPG_TEST_END();
}

int main(int argc, char **argv) {
  if (tpgfake_setup(argc, argv)) return 2;
  static const struct {
    const char *name;
    int (*run)(void);
  } cases[] = {{"missing", case_missing}, {"not NCCL", case_not_nccl}, {"fake", case_fake}};
  int failed = 0;
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
      if (i < 2) unsetenv("TPG_LIBNCCL"); /* the case sets its own */
      int rc = cases[i].run();
      fflush(stdout);
      _exit(rc);
    }
    int ws = 0;
    waitpid(pid, &ws, 0);
    int ok = WIFEXITED(ws) && WEXITSTATUS(ws) == 0;
    printf("case %s: %s\n", cases[i].name, ok ? "ok" : "FAILED");
    failed += !ok;
  }
  printf("%d passed, %d failed\n", (int)(sizeof cases / sizeof cases[0]) - failed, failed);
  return failed != 0;
}
