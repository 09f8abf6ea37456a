/* state_test.c - the derived state a whole-graph update rebuilds
 * (graphbuild/state.h), and the checks an update makes against it, on the
 * CPU: no driver. The update's checks (a)-(c) at the layer where each is
 * decided:
 *   (a) slot -> users index: built from the NEW plan (a memset that moved
 *       from slot A to slot B is a user of B, no longer of A), so a rebind
 *       after the update patches the right nodes;
 *   (b) a slot the new plan uses but nobody bound is refused, naming it;
 *   (c) a slot that changes kind (scratch <-> device) is refused by the
 *       topology check, and a scratch slot that grows is re-allocated (the
 *       state asks for the new size), or refused where it is an NCCL window.
 * Plus tpg_plan_same_topology comparing slot ownership (scratch or bound).
 * The graph-level halves (the graph swapping the state in, the allocation)
 * need a driver: update_fake_test checks them on the stand-in libcuda
 * (tests/fake/).
 */
#include <stdlib.h>

#include "graphbuild/state.h"
#include "tests/tpg_test.h"

static tpg_view V(tpg_slot s) {
  tpg_view v = {s, 0, 0};
  return v;
}

/* slots a, b (device, 64 f32 each), c (device), s (scratch, `scratch` f32);
 * one memset of 64 elements into `target`, one axpby c += s. */
static tpg_plan *make(const char *target, tpg_memory s_where, size_t scratch, tpg_dtype c_dtype) {
  tpg_plan *p = NULL;
  tpg_slot a, b, c, s;
  if (tpg_plan_create(&p) != TPG_SUCCESS) return NULL;
  tpg_plan_add_slot(p, "a", TPG_F32, TPG_MEM_DEVICE, 64, &a);
  tpg_plan_add_slot(p, "b", TPG_F32, TPG_MEM_DEVICE, 64, &b);
  tpg_plan_add_slot(p, "c", c_dtype, TPG_MEM_DEVICE, 64, &c);
  tpg_plan_add_slot(p, "s", TPG_F32, s_where, scratch, &s);
  tpg_node m = 0, x = 0;
  tpg_plan_add_memset(p, V(target[0] == 'a' ? a : b), 0, 64, NULL, 0, &m);
  if (c_dtype == TPG_F32) tpg_plan_add_axpby(p, V(c), V(s), 64, 1.0f, 1.0f, &m, 1, &x);
  else tpg_plan_add_empty(p, &m, 1, &x);
  return p;
}

static int users_of(const tpg_state *st, tpg_slot s, int node) {
  for (int u = st->users_at[s - 1]; u < st->users_at[s]; u++)
    if (st->users[u] == node) return 1;
  return 0;
}

int main(void) {
  tpg_plan *p1 = make("a", TPG_MEM_SCRATCH, 64, TPG_F32), *p2 = make("b", TPG_MEM_SCRATCH, 64, TPG_F32);
  CHECK(p1 && p2);
  tpg_state *s1 = NULL, *s2 = NULL;
  CHECK_OK(tpg_state_build(p1, &s1));
  CHECK_OK(tpg_state_build(p2, &s2));

  /* (a) the memset (node 0) writes a in plan 1 and b in plan 2. */
  CHECK(users_of(s1, 1, 0) && !users_of(s1, 2, 0));
  CHECK(!users_of(s2, 1, 0) && users_of(s2, 2, 0));
  CHECK(tpg_state_used(s2, 2) && !tpg_state_used(s2, 1));
  CHECK(s1->order[0] == 0 && s1->order[1] == 1 && s1->ncoll == 0);
  CHECK(s2->bytes[3] == 64 * 4);
  CHECK_OK(tpg_plan_same_topology(p1, p2)); /* same kinds, edges, slot kinds: an update may apply it */

  /* (b) plan 2 uses b, which the graph of plan 1 never bound. */
  void *bind[4] = {(void *)0x1000, NULL, (void *)0x3000, (void *)0x4000};
  CHECK_OK(tpg_state_check_bound(s1, p1, bind, "tpg_graph_update"));
  CHECK_ST(tpg_state_check_bound(s2, p2, bind, "tpg_graph_update"), TPG_ERROR_INVALID_ARGUMENT,
           "slot \"b\" is used by the plan but not bound");
  bind[1] = (void *)0x2000;
  CHECK_OK(tpg_state_check_bound(s2, p2, bind, "tpg_graph_update"));

  /* (c) scratch -> device: refused before anything is touched, naming the slot. */
  tpg_plan *p3 = make("a", TPG_MEM_DEVICE, 64, TPG_F32);
  CHECK_ST(tpg_plan_same_topology(p1, p3), TPG_ERROR_INVALID_ARGUMENT,
           "slot 4 (\"s\") is scratch memory in the graph but device in plan: a slot cannot change between scratch");
  CHECK_ST(tpg_plan_same_topology(p3, p1), TPG_ERROR_INVALID_ARGUMENT, "is device memory in the graph but scratch");
  /* dtypes and device <-> host may change (bindings and CUDA check those) */
  tpg_plan *p4 = make("a", TPG_MEM_SCRATCH, 64, TPG_BF16);
  {
    /* same nodes as p4 (memset + empty), c as f32 instead of bf16, b as host */
    tpg_plan *q = NULL;
    tpg_slot a, b, c, s;
    tpg_node m, x;
    CHECK_OK(tpg_plan_create(&q));
    tpg_plan_add_slot(q, "a", TPG_F32, TPG_MEM_DEVICE, 64, &a);
    tpg_plan_add_slot(q, "b", TPG_F32, TPG_MEM_HOST, 64, &b);
    tpg_plan_add_slot(q, "c", TPG_F32, TPG_MEM_DEVICE, 64, &c);
    tpg_plan_add_slot(q, "s", TPG_F32, TPG_MEM_SCRATCH, 64, &s);
    tpg_plan_add_memset(q, V(a), 0, 64, NULL, 0, &m);
    tpg_plan_add_empty(q, &m, 1, &x);
    CHECK_OK(tpg_plan_same_topology(p4, q));
    tpg_plan_destroy(q);
  }

  /* (c) a scratch slot that grows: the state asks for the new size. */
  tpg_plan *p6 = make("a", TPG_MEM_SCRATCH, 256, TPG_F32);
  CHECK_OK(tpg_plan_same_topology(p1, p6));
  tpg_state *s6 = NULL;
  CHECK_OK(tpg_state_build(p6, &s6));
  size_t owned[4] = {0, 0, 0, 256}, need[4] = {9, 9, 9, 9};
  CHECK_OK(tpg_state_scratch_needs(s6, p6, owned, 0, need, "tpg_graph_update"));
  CHECK(need[0] == 0 && need[1] == 0 && need[2] == 0 && need[3] == 256 * 4);
  owned[3] = 1024; /* already big enough: nothing to allocate */
  CHECK_OK(tpg_state_scratch_needs(s6, p6, owned, 0, need, "tpg_graph_update"));
  CHECK(need[3] == 0);
  owned[3] = 256; /* grows, but no collective uses it: a window is not involved even with sym */
  CHECK_OK(tpg_state_scratch_needs(s6, p6, owned, 1, need, "tpg_graph_update"));
  CHECK(need[3] == 1024);

  /* A scratch slot an all-reduce uses, in a graph whose scratch of
   * collectives are NCCL windows: growing it is refused, naming it. */
  {
    tpg_plan *q = NULL;
    tpg_slot x, y;
    tpg_node n;
    CHECK_OK(tpg_plan_create(&q));
    tpg_plan_add_slot(q, "x", TPG_BF16, TPG_MEM_SCRATCH, 4096, &x);
    tpg_plan_add_slot(q, "y", TPG_BF16, TPG_MEM_DEVICE, 4096, &y);
    tpg_collective_desc d = TPG_COLLECTIVE_DESC_INIT;
    d.send = V(x);
    d.recv = V(y);
    d.count = 4096;
    CHECK_OK(tpg_plan_add_collective(q, &d, NULL, 0, &n));
    tpg_state *sq = NULL;
    CHECK_OK(tpg_state_build(q, &sq));
    CHECK(sq && sq->ncoll == 1 && sq->coll_uses[0] && sq->coll_uses[1]);
    size_t own[2] = {1024, 0}, nd[2];
    CHECK_ST(tpg_state_scratch_needs(sq, q, own, 1, nd, "tpg_graph_update"), TPG_ERROR_UNSUPPORTED,
             "scratch slot \"x\" needs 8192 bytes, the graph holds 1024");
    CHECK_OK(tpg_state_scratch_needs(sq, q, own, 0, nd, "tpg_graph_update"));
    CHECK(nd[0] == 8192 && nd[1] == 0);
    tpg_state_free(sq);
    tpg_plan_destroy(q);
  }

  /* A cycle is the state's error too (it is built from the order). */
  {
    tpg_plan *q = make("a", TPG_MEM_SCRATCH, 64, TPG_F32);
    tpg_state *sq = (tpg_state *)1;
    tpg_plan_add_dependency(q, ((tpg_node)q->serial << 32) | 2, ((tpg_node)q->serial << 32) | 1);
    CHECK_ST(tpg_state_build(q, &sq), TPG_ERROR_INVALID_ARGUMENT, "cycle");
    CHECK(sq == NULL);
    tpg_plan_destroy(q);
  }

  tpg_state_free(s1);
  tpg_state_free(s2);
  tpg_state_free(s6);
  tpg_plan_destroy(p1);
  tpg_plan_destroy(p2);
  tpg_plan_destroy(p3);
  tpg_plan_destroy(p4);
  tpg_plan_destroy(p6);
  return TPG_TEST_END();
}
