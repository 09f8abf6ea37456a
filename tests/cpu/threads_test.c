/* threads_test.c - the thread rules of docs/reliability.md, exercised.
 *
 * Eight threads start together (a barrier, so the first calls race): each
 * builds and checks its own plans, makes failing calls whose messages name
 * its own values, and asks tpg_runtime_get_info, which loads the driver table
 * under pthread_once. Afterwards: every thread saw only its own messages,
 * node handles of plans made on different threads never collide, and a plan
 * built on one thread is usable on another once handed over. Run under
 * ThreadSanitizer as well (docs/reliability.md has the command).
 */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>

#include "tests/tpg_test.h"

#define NTHREADS 8
#define ROUNDS 200

static pthread_barrier_t start;
static tpg_node first_node[NTHREADS][ROUNDS]; /* first node handle of each plan */

typedef struct {
  int id;
  int bad;                 /* checks that failed on this thread */
  int driver_error_seen;   /* tpg_runtime_get_info gave a reason   */
  tpg_plan *handover;      /* built here, used by the main thread */
} worker;

static void *run(void *arg) {
  worker *w = arg;
  char name[32], want[64];
  pthread_barrier_wait(&start);
  tpg_runtime_info ri;
  if (tpg_runtime_get_info(&ri, sizeof ri) != TPG_SUCCESS) w->bad++;
  w->driver_error_seen = ri.driver_error[0] != '\0';
  for (int r = 0; r < ROUNDS; r++) {
    tpg_plan *p;
    tpg_slot a, b;
    if (tpg_plan_create(&p) != TPG_SUCCESS) { w->bad++; continue; }
    snprintf(name, sizeof name, "t%d.r%d", w->id, r);
    if (tpg_plan_add_slot(p, name, TPG_F32, TPG_MEM_DEVICE, 64, &a) != TPG_SUCCESS) w->bad++;
    if (tpg_plan_add_slot(p, "b", TPG_F32, TPG_MEM_DEVICE, 64, &b) != TPG_SUCCESS) w->bad++;
    tpg_view va = {a, 0, 0}, vb = {b, 0, 0};
    tpg_node prev = 0;
    if (tpg_plan_add_memcpy(p, va, vb, 64, NULL, 0, &prev) != TPG_SUCCESS) w->bad++;
    first_node[w->id][r] = prev;
    for (int k = 0; k < 8; k++)
      if (tpg_plan_add_empty(p, &prev, 1, &prev) != TPG_SUCCESS) w->bad++;
    if (tpg_plan_validate(p) != TPG_SUCCESS) w->bad++;
    /* A failure whose message holds this thread's slot name; other threads
     * fail at the same time with theirs. */
    tpg_slot s;
    if (tpg_plan_add_slot(p, name, TPG_F32, TPG_MEM_DEVICE, 8, &s) != TPG_ERROR_INVALID_ARGUMENT) w->bad++;
    snprintf(want, sizeof want, "\"%s\" is already slot 1", name);
    sched_yield();
    if (!strstr(tpg_last_error(), want)) w->bad++;
    /* A success clears only this thread's message. */
    int nodes = 0;
    if (tpg_plan_get_stats(p, &nodes, NULL, NULL) != TPG_SUCCESS || nodes != 9 || tpg_last_error()[0]) w->bad++;
    size_t need = 0;
    if (tpg_plan_dot(p, NULL, 0, &need) != TPG_SUCCESS || need < 16) w->bad++;
    if (r == ROUNDS - 1) w->handover = p;
    else tpg_plan_destroy(p);
  }
  return NULL;
}

int main(void) {
  pthread_t th[NTHREADS];
  worker w[NTHREADS];
  pthread_barrier_init(&start, NULL, NTHREADS);
  for (int i = 0; i < NTHREADS; i++) {
    w[i] = (worker){i, 0, 0, NULL};
    CHECK(pthread_create(&th[i], NULL, run, &w[i]) == 0);
  }
  for (int i = 0; i < NTHREADS; i++) CHECK(pthread_join(th[i], NULL) == 0);
  pthread_barrier_destroy(&start);

  for (int i = 0; i < NTHREADS; i++) {
    CHECK(w[i].bad == 0);
    if (w[i].bad) fprintf(stderr, "thread %d: %d checks failed\n", i, w[i].bad);
    /* The driver is loaded once; every thread gets the same answer. */
    CHECK(w[i].driver_error_seen == w[0].driver_error_seen);
  }
  /* Plans made concurrently hand out distinct node handles. */
  static tpg_node all[NTHREADS * ROUNDS];
  int n = 0, dup = 0;
  for (int i = 0; i < NTHREADS; i++)
    for (int r = 0; r < ROUNDS; r++) all[n++] = first_node[i][r];
  for (int i = 0; i < n && !dup; i++)
    for (int j = 0; j < i; j++)
      if (all[i] == all[j] || all[i] == 0) { dup = 1; break; }
  CHECK(!dup);
  /* A plan moves between threads: used here after its builder joined. And a
   * node of one thread's plan is refused by another thread's plan. */
  tpg_plan *p = w[0].handover, *q = w[1].handover;
  CHECK(p && q);
  if (p && q) {
    tpg_node e;
    CHECK_OK(tpg_plan_add_empty(p, &first_node[0][ROUNDS - 1], 1, &e));
    CHECK_ST(tpg_plan_add_empty(q, &first_node[0][ROUNDS - 1], 1, &e), TPG_ERROR_INVALID_ARGUMENT, "another plan");
    CHECK_OK(tpg_plan_validate(p));
  }
  for (int i = 0; i < NTHREADS; i++) tpg_plan_destroy(w[i].handover);
  return TPG_TEST_END();
}
