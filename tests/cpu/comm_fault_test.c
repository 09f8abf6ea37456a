/* comm_fault_test.c - the communicator's failure paths (docs/reliability.md,
 * the stand-in driver tier's table of defects in lib/): the id file, a
 * destroyed comm, same-process detection, abort during peer setup, destroy
 * and setup when the driver fails, the peer buffers' lifetime, through the
 * stand-in driver + NCCL (tests/fake) and the public API.
 *
 *   comm_fault_test <libcuda_fake.so>
 *
 * Each block names the defect it guards; each fails if that defect comes
 * back (the message or the fake's live / violation counts show how).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "lib/peer.h"
#include "tests/fake/tpgfake.h"
#include "tests/tpg_test.h"

#define N 256

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

static long live(void) { return tpgfake_live(NULL, 0); }

/* ---- the id file is a trust boundary ------------------------------------ */

static void write_bytes(const char *path, const void *b, size_t n, mode_t mode) {
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, mode);
  if (fd >= 0) {
    if (write(fd, b, n) != (ssize_t)n) perror("write");
    fchmod(fd, mode);
    close(fd);
  }
}

static void id_file(void) {
  char dir[256], path[300], tmp[340], victim[300];
  const char *t = getenv("TEST_TMPDIR");
  snprintf(dir, sizeof dir, "%s/idf_%ld", t ? t : "/tmp", (long)getpid());
  mkdir(dir, 0700);
  snprintf(path, sizeof path, "%s/id", dir);
  snprintf(victim, sizeof victim, "%s/victim", dir);
  tpg_comm_id a, b;
  for (int i = 0; i < TPG_COMM_ID_BYTES; i++) a.bytes[i] = (unsigned char)(i * 5 + 1);

  /* The writer makes a 0600 file, and the round trip works. */
  CHECK_OK(tpg_comm_id_write_file(&a, path));
  struct stat st;
  CHECK(stat(path, &st) == 0 && (st.st_mode & 0777) == 0600);
  CHECK_OK(tpg_comm_id_read_file(path, 0, &b));
  CHECK(memcmp(&a, &b, sizeof a) == 0);

  /* A link planted at the writer's temporary name is not followed. */
  unlink(path);
  write_bytes(victim, "keep", 4, 0644);
  snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
  CHECK(symlink(victim, tmp) == 0);
  CHECK_ST(tpg_comm_id_write_file(&a, path), TPG_ERROR_INVALID_ARGUMENT, "already there");
  CHECK(stat(victim, &st) == 0 && st.st_size == 4 && (st.st_mode & 0777) == 0644);
  unlink(tmp);

  /* The reader refuses, at once, whatever tpg_comm_id_write_file did not make. */
  double t0 = now_ms();
  CHECK(mkfifo(path, 0600) == 0); /* a plain read of a FIFO blocks past any deadline */
  CHECK_ST(tpg_comm_id_read_file(path, 200, &b), TPG_ERROR_INVALID_ARGUMENT, "is a FIFO");
  CHECK(now_ms() - t0 < 150);
  unlink(path);
  CHECK(mkdir(path, 0700) == 0);
  CHECK_ST(tpg_comm_id_read_file(path, 0, &b), TPG_ERROR_INVALID_ARGUMENT, "is a directory");
  rmdir(path);
  CHECK(symlink("/dev/zero", path) == 0);
  CHECK_ST(tpg_comm_id_read_file(path, 0, &b), TPG_ERROR_INVALID_ARGUMENT, "symbolic link");
  unlink(path);
  CHECK_ST(tpg_comm_id_read_file("/dev/zero", 0, &b), TPG_ERROR_INVALID_ARGUMENT, "not a regular file");
  unsigned char big[4096] = {0};
  write_bytes(path, big, sizeof big, 0600);
  CHECK_ST(tpg_comm_id_read_file(path, 0, &b), TPG_ERROR_INVALID_ARGUMENT, "holds 4096 bytes");
  CHECK_OK(tpg_comm_id_write_file(&a, path));
  chmod(path, 0644);
  CHECK_ST(tpg_comm_id_read_file(path, 0, &b), TPG_ERROR_INVALID_ARGUMENT, "has mode 0644");
  chmod(path, 0600);
  if (geteuid() == 0) { /* only root can make a file of another uid here */
    CHECK(chown(path, 65534, 65534) == 0);
    CHECK_ST(tpg_comm_id_read_file(path, 0, &b), TPG_ERROR_INVALID_ARGUMENT, "owned by uid 65534");
  }
  unlink(path);
  unsigned char raw[144] = {0};
  write_bytes(path, raw, sizeof raw, 0600);
  CHECK_ST(tpg_comm_id_read_file(path, 0, &b), TPG_ERROR_INVALID_ARGUMENT, "not a tpg_comm_id file");
  unlink(path);

  /* A stale id (another job's) is waited out to the deadline, then named. */
  setenv("TPG_JOB_ID", "job-1", 1);
  CHECK_OK(tpg_comm_id_write_file(&a, path));
  setenv("TPG_JOB_ID", "job-2", 1);
  t0 = now_ms();
  CHECK_ST(tpg_comm_id_read_file(path, 100, &b), TPG_ERROR_TIMEOUT, "another job");
  CHECK(now_ms() - t0 < 1000);
  CHECK_OK(tpg_comm_id_write_file(&a, path)); /* the new job's file replaces it */
  CHECK_OK(tpg_comm_id_read_file(path, 0, &b));
  unsetenv("TPG_JOB_ID");
  unlink(path);
  unlink(victim);
  rmdir(dir);
}

/* ---- a 1-rank comm on device 0 ------------------------------------------ */

static tpg_status comm1(tpg_comm **c) {
  tpg_comm_id id;
  tpg_status st = tpg_comm_id_create(&id);
  if (st != TPG_SUCCESS) return st;
  tpg_comm_config cc = TPG_COMM_CONFIG_INIT;
  cc.timeout_ms = 2000;
  return tpg_comm_create(&id, &cc, c);
}

/* ---- a destroyed comm is detected, without reading freed memory ---------- */

static void handles(void) {
  tpg_comm *c = NULL;
  CHECK_OK(comm1(&c));
  CHECK_OK(tpg_comm_destroy(c));
  /* Under ASan the old magic check read freed memory here. */
  CHECK_ST(tpg_comm_destroy(c), TPG_ERROR_INVALID_ARGUMENT, "not a live tpg_comm");
  CHECK_ST(tpg_comm_abort(c), TPG_ERROR_INVALID_ARGUMENT, "not a live tpg_comm");
  CHECK_ST(tpg_comm_get_info(c, NULL, NULL, NULL), TPG_ERROR_INVALID_ARGUMENT, "not a live tpg_comm");
  CHECK_ST(tpg_comm_wait(c, NULL), TPG_ERROR_INVALID_ARGUMENT, "not a live tpg_comm");
  tpg_comm *foreign = (tpg_comm *)&c; /* any pointer that is not a comm */
  CHECK_ST(tpg_comm_get_info(foreign, NULL, NULL, NULL), TPG_ERROR_INVALID_ARGUMENT, "not a live tpg_comm");
  CHECK(live() == 0);
}

/* ---- same process means same PID namespace too -------------------------- */

static void same_process(void) {
  CHECK(tpg_peer_same_process(7, 1, 100, 7, 1, 100) == 1);
  CHECK(tpg_peer_same_process(7, 1, 100, 7, 1, 200) == 0); /* two containers, both pid 1 */
  CHECK(tpg_peer_same_process(7, 1, 100, 8, 1, 100) == 0);
  CHECK(tpg_peer_same_process(7, 1, 100, 7, 2, 100) == 0);
}

/* ---- destroy when the context cannot be made current -------------------- */

static void destroy_without_context(void) {
  tpg_comm *c = NULL;
  CHECK_OK(comm1(&c));
  long before = live();
  tpgfake_reset();
  tpgfake_fail_call("cuCtxPushCurrent", 1);
  /* Was: TPG_SUCCESS, the host side freed, stream + scratch + NCCL comm leaked. */
  CHECK_ST(tpg_comm_destroy(c), TPG_ERROR_CUDA, "tpg_comm_destroy");
  CHECK(live() == before); /* intact */
  tpgfake_reset();
  CHECK_OK(tpg_comm_destroy(c));
  CHECK(live() == 0);
}

/* ---- two thread ranks ---------------------------------------------------- */

typedef struct {
  int rank;
  tpg_comm_id id;
  tpg_comm *comm;
  tpg_plan *plan;
  tpg_graph *g;
  float *buf[3];
  tpg_status st_first, st_retry;
  long live_after_fail;
  pthread_barrier_t *bar;
} rank_t;

static tpg_status make_plan(tpg_plan **p, tpg_slot s[2]) {
  tpg_status st = tpg_plan_create(p);
  if (st != TPG_SUCCESS) return st;
  tpg_plan_add_slot(*p, "a", TPG_F32, TPG_MEM_DEVICE, N, &s[0]);
  tpg_plan_add_slot(*p, "b", TPG_F32, TPG_MEM_DEVICE, N, &s[1]);
  tpg_collective_desc d = TPG_COLLECTIVE_DESC_INIT; /* AUTO: our one-shot kernel over the peer buffers */
  d.send.slot = s[0];
  d.recv.slot = s[1];
  d.count = N;
  return tpg_plan_add_collective(*p, &d, NULL, 0, NULL);
}

static tpg_status make_graph(rank_t *r) {
  tpg_slot s[2];
  tpg_status st = r->plan ? TPG_SUCCESS : make_plan(&r->plan, s);
  if (st != TPG_SUCCESS) return st;
  tpg_plan_find_slot(r->plan, "a", &s[0]);
  tpg_plan_find_slot(r->plan, "b", &s[1]);
  tpg_binding b[2] = {{s[0], r->buf[0]}, {s[1], r->buf[1]}};
  tpg_graph_config gc = TPG_GRAPH_CONFIG_INIT;
  gc.device = r->rank;
  gc.comm = r->comm;
  gc.bindings = b;
  gc.nbindings = 2;
  return tpg_graph_create(r->plan, &gc, &r->g);
}

static tpg_status make_comm(rank_t *r, int timeout_ms) {
  tpg_comm_config cc = TPG_COMM_CONFIG_INIT;
  cc.device = cc.rank = r->rank;
  cc.nranks = 2;
  cc.timeout_ms = timeout_ms;
  return tpg_comm_create(&r->id, &cc, &r->comm);
}

static void teardown(rank_t *r) {
  tpg_graph_destroy(r->g);
  tpg_plan_destroy(r->plan);
  tpg_comm_destroy(r->comm);
  for (int i = 0; i < 3; i++) tpgfake_free(r->buf[i]);
}

static void two_ranks(void *(*fn)(void *), rank_t r[2]) {
  tpg_comm_id id;
  tpg_comm_id_create(&id);
  pthread_barrier_t bar;
  pthread_barrier_init(&bar, NULL, 2);
  pthread_t t[2];
  for (int i = 0; i < 2; i++) {
    memset(&r[i], 0, sizeof r[i]);
    r[i].rank = i;
    r[i].id = id;
    r[i].bar = &bar;
    for (int k = 0; k < 3; k++) r[i].buf[k] = tpgfake_dev_alloc(i, N * 4);
    pthread_create(&t[i], NULL, fn, &r[i]);
  }
  for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
  pthread_barrier_destroy(&bar);
}

/* A failed peer setup leaves nothing behind, and a retry works.
 * Every rank fails alike (cuMemHostAlloc fails for all), so no rank waits
 * for another and no comm is aborted. Was: 48 MiB kept per failed attempt,
 * and the retry overwrote (leaked) them. */
static void *setup_retry(void *arg) {
  rank_t *r = arg;
  if (make_comm(r, 3000) != TPG_SUCCESS) return NULL;
  make_plan(&r->plan, (tpg_slot[2]){0, 0});
  pthread_barrier_wait(r->bar);
  if (r->rank == 0) {
    tpgfake_reset();
    tpgfake_fail_call("cuMemHostAlloc", 0);
  }
  pthread_barrier_wait(r->bar);
  long before = live();
  pthread_barrier_wait(r->bar);
  r->st_first = make_graph(r);
  pthread_barrier_wait(r->bar);
  r->live_after_fail = live() - before;
  if (r->live_after_fail) { char w[400]; tpgfake_live(w, sizeof w); fprintf(stderr, "rank %d: +%ld: %s\n", r->rank, r->live_after_fail, w); }
  pthread_barrier_wait(r->bar);
  if (r->rank == 0) tpgfake_reset();
  pthread_barrier_wait(r->bar);
  r->st_retry = make_graph(r);
  if (r->st_retry == TPG_SUCCESS) r->st_retry = tpg_graph_launch(r->g, NULL);
  if (r->st_retry == TPG_SUCCESS) r->st_retry = tpg_comm_wait(r->comm, NULL);
  pthread_barrier_wait(r->bar);
  teardown(r);
  return NULL;
}

/* The peer buffers' lifetime: rank 1 destroys its graph and comm first;
 * rank 0's graph still points into rank 1's buffer and launches once more.
 * Was: rank 1 freed the buffer at once, a use after free on the GPU (the
 * fake: a bounds violation of the one-shot kernel's staging / flags). */
static void *peer_lifetime(void *arg) {
  rank_t *r = arg;
  r->st_first = make_comm(r, 3000);
  if (r->st_first == TPG_SUCCESS) r->st_first = make_graph(r);
  pthread_barrier_wait(r->bar);
  if (r->rank == 1) {
    teardown(r);
    r->g = NULL;
  }
  pthread_barrier_wait(r->bar);
  if (r->rank == 0 && r->g) {
    r->st_retry = tpg_graph_launch(r->g, NULL);
    teardown(r);
  }
  return NULL;
}

/* tpg_comm_abort from another thread while peer setup runs (TSan
 * reported the status word's pointer written by setup and read by abort). */
static tpg_comm *g_abort_target; /* under g_abort_mu: no abort in flight once cleared */
static pthread_mutex_t g_abort_mu = PTHREAD_MUTEX_INITIALIZER;
static atomic_int g_abort_stop;
static void set_target(tpg_comm *c) {
  pthread_mutex_lock(&g_abort_mu);
  g_abort_target = c;
  pthread_mutex_unlock(&g_abort_mu);
}
static void *aborter(void *arg) {
  (void)arg;
  while (!atomic_load(&g_abort_stop)) {
    pthread_mutex_lock(&g_abort_mu);
    if (g_abort_target) tpg_comm_abort(g_abort_target);
    pthread_mutex_unlock(&g_abort_mu);
    struct timespec ts = {0, 20000};
    nanosleep(&ts, NULL);
  }
  return NULL;
}
static void *abort_during_setup(void *arg) {
  rank_t *r = arg;
  r->st_first = make_comm(r, 200);
  pthread_barrier_wait(r->bar);
  if (r->rank == 0) set_target(r->comm);
  if (r->st_first == TPG_SUCCESS) r->st_first = make_graph(r);
  pthread_barrier_wait(r->bar);
  if (r->rank == 0) set_target(NULL);
  pthread_barrier_wait(r->bar);
  teardown(r);
  return NULL;
}

int main(int argc, char **argv) {
  if (tpgfake_setup(argc, argv) != 0) return 2;
  tpg_runtime_info ri;
  CHECK_OK(tpg_runtime_get_info(&ri, sizeof ri));
  CHECK(ri.driver_error[0] == '\0' && ri.device_count == 2);

  id_file();
  handles();
  same_process();
  destroy_without_context();

  /* runtime: a failing cuDeviceGetCount is reported, not "0 GPUs". */
  tpgfake_reset();
  tpgfake_fail_call("cuDeviceGetCount", 1);
  CHECK_OK(tpg_runtime_get_info(&ri, sizeof ri));
  CHECK(ri.device_count == 0 && strstr(ri.driver_error, "cuDeviceGetCount") != NULL);
  tpgfake_reset();

  rank_t r[2];
  two_ranks(setup_retry, r);
  for (int i = 0; i < 2; i++) {
    CHECK(r[i].st_first == TPG_ERROR_OUT_OF_MEMORY);
    CHECK(r[i].live_after_fail == 0);
    CHECK(r[i].st_retry == TPG_SUCCESS);
  }
  CHECK(live() == 0);
  CHECK(tpgfake_violations() == 0);

  tpgfake_reset();
  two_ranks(peer_lifetime, r);
  CHECK(r[0].st_first == TPG_SUCCESS && r[1].st_first == TPG_SUCCESS && r[0].st_retry == TPG_SUCCESS);
  CHECK(tpgfake_violations() == 0);
  if (tpgfake_violations()) fprintf(stderr, "%s", tpgfake_violation_text());
  CHECK(live() == 0);

  tpgfake_reset();
  pthread_t ab;
  pthread_create(&ab, NULL, aborter, NULL);
  two_ranks(abort_during_setup, r);
  atomic_store(&g_abort_stop, 1);
  pthread_join(ab, NULL);
  CHECK(tpgfake_violations() == 0);
  CHECK(live() == 0);
  if (tpgfake_violations()) fprintf(stderr, "%s", tpgfake_violation_text());
  return TPG_TEST_END();
}
