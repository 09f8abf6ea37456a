/* runtime_test.c - version, status strings, and behaviour with no usable
 * driver: every call that needs the GPU says why it cannot, none crashes.
 *
 * Run twice by Bazel: with no argument (this machine's libcuda, absent on CI),
 * and with the toolkit's stub libcuda as argv[1] (TPG_LIBCUDA), which is
 * what a build box or a container without the driver mounted has.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdlib.h>
#include <unistd.h>

#include "tests/tpg_test.h"

int main(int argc, char **argv) {
  int stub = argc > 1;
  if (stub) setenv("TPG_LIBCUDA", argv[1], 1);

  CHECK(tpg_version() == TPG_VERSION_CODE);
  for (int s = 0; s <= TPG_STATUS_COUNT; s++) {
    const char *str = tpg_status_string((tpg_status)s);
    CHECK(str != NULL && strncmp(str, "TPG_", 4) == 0);
  }
  CHECK(strstr(tpg_status_string(TPG_ERROR_NO_DRIVER), "NO_DRIVER") != NULL);
  CHECK(strstr(tpg_status_string((tpg_status)-3), "UNKNOWN") != NULL);
  CHECK(tpg_dtype_size(TPG_BF16) == 2 && tpg_dtype_size(TPG_F32) == 4 && tpg_dtype_size((tpg_dtype)9) == 0);

  CHECK_ST(tpg_runtime_get_info(NULL, sizeof(tpg_runtime_info)), TPG_ERROR_INVALID_ARGUMENT, "out is NULL");
  tpg_runtime_info ri;
  CHECK_OK(tpg_runtime_get_info(&ri, sizeof ri));
  CHECK(tpg_last_error()[0] == '\0'); /* a success clears the message */
  /* OUT structs only grow: a caller's size below the first version's is not
   * ours; a larger one (a newer header) gets its unknown tail zeroed. */
  CHECK_ST(tpg_runtime_get_info(&ri, 8), TPG_ERROR_INVALID_ARGUMENT, "size is 8");
  {
    _Alignas(16) unsigned char big[sizeof(tpg_runtime_info) + 32];
    memset(big, 0xAA, sizeof big);
    CHECK_OK(tpg_runtime_get_info((tpg_runtime_info *)(void *)big, sizeof big));
    int tail_zero = 1;
    for (size_t i = sizeof(tpg_runtime_info); i < sizeof big; i++) tail_zero &= big[i] == 0;
    CHECK(tail_zero);
  }
  CHECK(ri.version == TPG_VERSION_CODE);
  CHECK(ri.nccl_version >= 22000);
  CHECK(strstr(ri.kernel_archs, "sm_") != NULL || strstr(ri.kernel_archs, "compute_") != NULL);
  printf("runtime: driver %d, nccl %d, devices %d, kernels %s, driver_error \"%s\"\n", ri.driver_version,
         ri.nccl_version, ri.device_count, ri.kernel_archs, ri.driver_error);
  int have_driver = ri.driver_version > 0;
  if (stub) {
    CHECK(!have_driver);
    CHECK(strstr(ri.driver_error, "stub") != NULL);
  }

  if (!have_driver) {
    tpg_device_info di;
    CHECK_ST(tpg_device_get_info(0, &di, sizeof di), TPG_ERROR_NO_DRIVER, stub ? "stub" : "libcuda");
    /* Every message is under the public call's name, not the inner
     * function that found the problem (tpg_cu_load, tpg_dev_open). */
    CHECK(strncmp(tpg_last_error(), "tpg_device_get_info: ", 21) == 0);
    tpg_module *mod = NULL;
    static const char ptx[] = "// no driver to read this";
    CHECK_ST(tpg_module_load(ptx, sizeof ptx, &mod), TPG_ERROR_NO_DRIVER, "tpg_module_load: ");
    tpg_linear_desc ld = TPG_LINEAR_DESC_INIT;
    ld.in_features = 64;
    ld.out_features = 32;
    static char w1[4096] __attribute__((aligned(16))), w2[4096] __attribute__((aligned(16)));
    tpg_linear_whole lw = {w1, NULL, NULL, NULL};
    tpg_linear_part lp = {w2, NULL};
    CHECK_ST(tpg_linear_shard(&ld, 0, &lw, &lp, NULL), TPG_ERROR_NO_DRIVER, "tpg_linear_shard: ");

    /* A valid plan still cannot become a graph: a clear error, no leak. */
    tpg_plan *p;
    tpg_slot a, b;
    CHECK_OK(tpg_plan_create(&p));
    CHECK_OK(tpg_plan_add_slot(p, "a", TPG_F32, TPG_MEM_DEVICE, 64, &a));
    CHECK_OK(tpg_plan_add_slot(p, "b", TPG_F32, TPG_MEM_DEVICE, 64, &b));
    tpg_view va = {a, 0, 0}, vb = {b, 0, 0};
    CHECK_OK(tpg_plan_add_memcpy(p, va, vb, 64, NULL, 0, NULL));
    static float fake[64] __attribute__((aligned(16)));
    tpg_binding bind[2] = {{a, fake}, {b, fake + 32}};
    tpg_graph_config cfg = TPG_GRAPH_CONFIG_INIT;
    cfg.bindings = bind;
    cfg.nbindings = 2;
    tpg_graph *g = (tpg_graph *)0x1;
    CHECK_ST(tpg_graph_create(p, &cfg, &g), TPG_ERROR_NO_DRIVER, "tpg_graph_create: ");
    CHECK(g == NULL);
    /* Bindings are checked before the driver is touched. */
    cfg.nbindings = 1;
    CHECK_ST(tpg_graph_create(p, &cfg, &g), TPG_ERROR_INVALID_ARGUMENT, "slot \"b\" is used by the plan but not bound");
    bind[1].slot = 9;
    cfg.nbindings = 2;
    CHECK_ST(tpg_graph_create(p, &cfg, &g), TPG_ERROR_INVALID_ARGUMENT, "cfg->bindings[1].slot is 9");
    bind[1].slot = a;
    CHECK_ST(tpg_graph_create(p, &cfg, &g), TPG_ERROR_INVALID_ARGUMENT, "again");
    bind[1].slot = b;
    bind[1].ptr = (char *)fake + 4;
    CHECK_ST(tpg_graph_create(p, &cfg, &g), TPG_ERROR_INVALID_ARGUMENT, "misaligned");
    bind[1].ptr = NULL;
    CHECK_ST(tpg_graph_create(p, &cfg, &g), TPG_ERROR_INVALID_ARGUMENT, "ptr is NULL");
    bind[1].ptr = fake + 32;
    /* Flags: TPG_GRAPH_PDL is a known bit (accepted, then no driver), in
     * every mode (capture and eager ignore it); unknown bits are refused
     * before the driver is touched, naming the valid ones. */
    cfg.flags = TPG_GRAPH_PDL;
    CHECK_ST(tpg_graph_create(p, &cfg, &g), TPG_ERROR_NO_DRIVER, "");
    cfg.flags = TPG_GRAPH_PDL | TPG_GRAPH_NCCL_SYMMETRIC;
    cfg.mode = TPG_MODE_EAGER;
    CHECK_ST(tpg_graph_create(p, &cfg, &g), TPG_ERROR_NO_DRIVER, "");
    cfg.mode = TPG_MODE_CAPTURE;
    CHECK_ST(tpg_graph_create(p, &cfg, &g), TPG_ERROR_NO_DRIVER, "");
    cfg.mode = TPG_MODE_EXPLICIT;
    cfg.flags = TPG_GRAPH_PDL | 0x80u;
    CHECK_ST(tpg_graph_create(p, &cfg, &g), TPG_ERROR_INVALID_ARGUMENT, "cfg->flags is 0x82");
    CHECK(strstr(tpg_last_error(), "TPG_GRAPH_PDL") != NULL);
    CHECK(g == NULL);
    cfg.flags = 0;
    tpg_graph_config bad = cfg;
    bad.magic = 0;
    CHECK_ST(tpg_graph_create(p, &bad, &g), TPG_ERROR_INVALID_ARGUMENT, "TPG_GRAPH_CONFIG_INIT");
    CHECK_ST(tpg_graph_create(p, NULL, &g), TPG_ERROR_INVALID_ARGUMENT, "cfg is NULL");
    CHECK_ST(tpg_graph_create(NULL, &cfg, &g), TPG_ERROR_INVALID_ARGUMENT, "plan is NULL");
    tpg_plan_destroy(p);

    /* A plan with a collective and no comm is one rank (TP = 1): its
     * arguments are accepted, and only the driver is missing here. */
    CHECK_OK(tpg_plan_create(&p));
    CHECK_OK(tpg_plan_add_slot(p, "a", TPG_F32, TPG_MEM_DEVICE, 64, &a));
    tpg_collective_desc cd = TPG_COLLECTIVE_DESC_INIT;
    cd.send = va;
    cd.recv = va;
    cd.count = 64;
    CHECK_OK(tpg_plan_add_collective(p, &cd, NULL, 0, NULL));
    tpg_binding one = {a, fake};
    cfg.bindings = &one;
    cfg.nbindings = 1;
    CHECK_ST(tpg_graph_create(p, &cfg, &g), TPG_ERROR_NO_DRIVER, "");
    tpg_plan_destroy(p);

    /* Communicators: arguments first, then the driver. */
    tpg_comm_id id;
    memset(&id, 7, sizeof id);
    tpg_comm_config cc = TPG_COMM_CONFIG_INIT;
    tpg_comm *c = (tpg_comm *)0x1;
    cc.nranks = 2;
    cc.rank = 2;
    CHECK_ST(tpg_comm_create(&id, &cc, &c), TPG_ERROR_INVALID_ARGUMENT, "cfg->rank is 2");
    CHECK(c == NULL);
    cc.rank = -1;
    CHECK_ST(tpg_comm_create(&id, &cc, &c), TPG_ERROR_INVALID_ARGUMENT, "cfg->rank is -1");
    cc.rank = 0;
    cc.nranks = 0;
    CHECK_ST(tpg_comm_create(&id, &cc, &c), TPG_ERROR_INVALID_ARGUMENT, "cfg->nranks is 0");
    cc.nranks = 2;
    cc.device = -2;
    CHECK_ST(tpg_comm_create(&id, &cc, &c), TPG_ERROR_INVALID_ARGUMENT, "cfg->device is -2");
    cc.device = 0;
    cc.timeout_ms = -5;
    CHECK_ST(tpg_comm_create(&id, &cc, &c), TPG_ERROR_INVALID_ARGUMENT, "cfg->timeout_ms");
    cc.timeout_ms = 0;
    CHECK_ST(tpg_comm_create(NULL, &cc, &c), TPG_ERROR_INVALID_ARGUMENT, "id is NULL");
    tpg_comm_config raw;
    memset(&raw, 0, sizeof raw);
    CHECK_ST(tpg_comm_create(&id, &raw, &c), TPG_ERROR_INVALID_ARGUMENT, "TPG_COMM_CONFIG_INIT");
    CHECK_ST(tpg_comm_create(&id, &cc, &c), TPG_ERROR_NO_DRIVER, "tpg_comm_create: ");
    CHECK(c == NULL);
  }

  /* Null handles everywhere. */
  CHECK_OK(tpg_graph_destroy(NULL));
  CHECK_OK(tpg_comm_destroy(NULL));
  CHECK_ST(tpg_graph_launch(NULL, NULL), TPG_ERROR_INVALID_ARGUMENT, "graph is NULL");
  CHECK_ST(tpg_graph_rebind(NULL, NULL, 0), TPG_ERROR_INVALID_ARGUMENT, "graph is NULL");
  CHECK_ST(tpg_graph_update(NULL, NULL, NULL, 0), TPG_ERROR_INVALID_ARGUMENT, "graph is NULL");
  CHECK_ST(tpg_graph_get_info(NULL, NULL, sizeof(tpg_graph_info)), TPG_ERROR_INVALID_ARGUMENT, "graph is NULL");
  CHECK_ST(tpg_graph_write_dot(NULL, "x"), TPG_ERROR_INVALID_ARGUMENT, "graph is NULL");
  CHECK_ST(tpg_comm_wait(NULL, NULL), TPG_ERROR_INVALID_ARGUMENT, "comm is NULL");
  CHECK_ST(tpg_comm_abort(NULL), TPG_ERROR_INVALID_ARGUMENT, "comm is NULL");
  CHECK_ST(tpg_comm_get_info(NULL, NULL, NULL, NULL), TPG_ERROR_INVALID_ARGUMENT, "comm");

  /* Comm ids through a file: round trip, a missing file times out, a short file is refused. */
  char path[256];
  const char *tmp = getenv("TEST_TMPDIR");
  snprintf(path, sizeof path, "%s/tpg_id_%ld", tmp ? tmp : "/tmp", (long)getpid());
  tpg_comm_id id1, id2;
  for (int i = 0; i < TPG_COMM_ID_BYTES; i++) id1.bytes[i] = (unsigned char)(i * 7 + 3);
  CHECK_OK(tpg_comm_id_write_file(&id1, path));
  CHECK_OK(tpg_comm_id_read_file(path, 0, &id2));
  CHECK(memcmp(&id1, &id2, sizeof id1) == 0);
  unlink(path);
  CHECK_ST(tpg_comm_id_read_file(path, 30, &id2), TPG_ERROR_TIMEOUT, "did not appear");
  FILE *f = fopen(path, "w");
  if (f) { fputs("short", f); fclose(f); }
  CHECK_ST(tpg_comm_id_read_file(path, 0, &id2), TPG_ERROR_INVALID_ARGUMENT, "holds 5 bytes");
  unlink(path);
  CHECK_ST(tpg_comm_id_write_file(&id1, "/nonexistent-dir/x"), TPG_ERROR_INVALID_ARGUMENT, "cannot create");
  CHECK_ST(tpg_comm_id_write_file(NULL, path), TPG_ERROR_INVALID_ARGUMENT, "id is NULL");
  return TPG_TEST_END();
}
