/* cond_test.c - conditional nodes on the plan side, without a GPU:
 * conditions, IF / WHILE / SWITCH records and their rules, bodies as scopes
 * (edges stay inside one body, nesting, rollback), what CUDA forbids in a
 * body refused when it is added (host, event, NCCL collectives), and
 * condition-handle kernel arguments (TPG_ARG_COND) checked and laid out. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/kit_args.h"
#include "tests/tpg_test.h"

static int nodes_of(const tpg_plan *p) {
  int n = -1;
  tpg_plan_get_stats(p, &n, NULL, NULL);
  return n;
}
static void host_fn(void *u) { (void)u; }

/* A kernel node of a function we never launch (plan side only). */
static tpg_status add_k(tpg_plan *p, tpg_slot s, tpg_cond c, const tpg_node *deps, int nd, tpg_node *out) {
  tpg_kernel_desc d = TPG_KERNEL_DESC_INIT;
  d.cu_function = (void *)(uintptr_t)0x1000;
  tpg_arg a[2] = {tpg_arg_view(s, 0), tpg_arg_cond(c)};
  d.args = a;
  d.nargs = c ? 2 : 1;
  return tpg_plan_add_kernel(p, &d, deps, nd, out);
}

static tpg_status add_cond_node(tpg_plan *p, tpg_cond_type t, tpg_cond c, int nb, tpg_node *out) {
  tpg_conditional_desc d = TPG_CONDITIONAL_DESC_INIT;
  d.type = t;
  d.cond = c;
  d.nbodies = nb;
  return tpg_plan_add_conditional(p, &d, NULL, 0, out);
}

static void test_conds(void) {
  tpg_plan *p;
  CHECK_OK(tpg_plan_create(&p));
  tpg_cond c = 99;
  CHECK_ST(tpg_plan_add_cond(p, 0, 1, NULL), TPG_ERROR_INVALID_ARGUMENT, "out is NULL");
  CHECK_ST(tpg_plan_add_cond(p, 0, 2, &c), TPG_ERROR_INVALID_ARGUMENT, "reset is 2");
  CHECK(c == 0);
  CHECK_OK(tpg_plan_add_cond(p, 1, 1, &c));
  CHECK(c == 1);
  CHECK_OK(tpg_plan_add_cond(p, 0, 0, &c));
  CHECK(c == 2);
  tpg_node n = 7;
  tpg_conditional_desc d = TPG_CONDITIONAL_DESC_INIT;
  CHECK_ST(tpg_plan_add_conditional(p, NULL, NULL, 0, &n), TPG_ERROR_INVALID_ARGUMENT, "desc is NULL");
  CHECK(n == 0);
  d.size = 3;
  CHECK_ST(tpg_plan_add_conditional(p, &d, NULL, 0, &n), TPG_ERROR_INVALID_ARGUMENT, "desc->size is 3");
  CHECK_ST(add_cond_node(p, (tpg_cond_type)7, 1, 1, &n), TPG_ERROR_INVALID_ARGUMENT, "desc->type is 7");
  CHECK_ST(add_cond_node(p, TPG_COND_IF, 1, 3, &n), TPG_ERROR_INVALID_ARGUMENT, "an IF has 1 body, or 2");
  CHECK_ST(add_cond_node(p, TPG_COND_WHILE, 1, 2, &n), TPG_ERROR_INVALID_ARGUMENT, "a WHILE has 1 body");
  CHECK_ST(add_cond_node(p, TPG_COND_SWITCH, 1, 257, &n), TPG_ERROR_INVALID_ARGUMENT, "a SWITCH has 1..256");
  CHECK_ST(add_cond_node(p, TPG_COND_SWITCH, 0, 2, &n), TPG_ERROR_INVALID_ARGUMENT, "desc->cond is 0");
  CHECK_ST(add_cond_node(p, TPG_COND_SWITCH, 3, 2, &n), TPG_ERROR_INVALID_ARGUMENT, "expected 1..2");
  CHECK(nodes_of(p) == 0);
  CHECK_OK(add_cond_node(p, TPG_COND_WHILE, 1, 0, &n)); /* nbodies 0: 1 */
  CHECK_ST(add_cond_node(p, TPG_COND_IF, 1, 1, NULL), TPG_ERROR_INVALID_ARGUMENT, "already drives conditional node while#0");
  CHECK_OK(add_cond_node(p, TPG_COND_SWITCH, 2, 3, NULL));
  CHECK(nodes_of(p) == 2);
  /* Rolling the node back frees its condition for another node. */
  tpg_plan_mark m;
  tpg_cond c3;
  CHECK_OK(tpg_plan_add_cond(p, 0, 1, &c3));
  CHECK_OK(tpg_plan_checkpoint(p, &m));
  CHECK_OK(add_cond_node(p, TPG_COND_IF, c3, 2, NULL));
  CHECK_OK(tpg_plan_rollback(p, m));
  CHECK_OK(add_cond_node(p, TPG_COND_IF, c3, 2, NULL));
  CHECK_OK(tpg_plan_destroy(p));
}

static void test_bodies(void) {
  tpg_plan *p;
  CHECK_OK(tpg_plan_create(&p));
  tpg_slot x, h;
  CHECK_OK(tpg_plan_add_slot(p, "x", TPG_F32, TPG_MEM_DEVICE, 64, &x));
  CHECK_OK(tpg_plan_add_slot(p, "h", TPG_F32, TPG_MEM_HOST, 64, &h));
  tpg_cond cw, ci;
  CHECK_OK(tpg_plan_add_cond(p, 1, 1, &cw));
  CHECK_OK(tpg_plan_add_cond(p, 0, 1, &ci));
  tpg_node top, loop, a, b, iff, in_if;
  CHECK_OK(tpg_plan_add_memset(p, (tpg_view){x, 0, 0}, 0, 64, NULL, 0, &top));
  CHECK_ST(tpg_plan_body_end(p), TPG_ERROR_INVALID_ARGUMENT, "no body is open");
  CHECK_ST(tpg_plan_body_begin(p, top, 0), TPG_ERROR_INVALID_ARGUMENT, "is not a conditional node");
  tpg_conditional_desc d = TPG_CONDITIONAL_DESC_INIT;
  d.type = TPG_COND_WHILE;
  d.cond = cw;
  CHECK_OK(tpg_plan_add_conditional(p, &d, &top, 1, &loop));
  CHECK_ST(tpg_plan_body_begin(p, loop, 1), TPG_ERROR_INVALID_ARGUMENT, "body is 1: node while#1 has bodies 0..0");
  CHECK_OK(tpg_plan_body_begin(p, loop, 0));
  /* An edge out of the body is refused, both ways of making one. */
  CHECK_ST(add_k(p, x, cw, &top, 1, &a), TPG_ERROR_INVALID_ARGUMENT, "a node may depend only on nodes of the same body");
  CHECK_OK(add_k(p, x, cw, NULL, 0, &a));
  CHECK_ST(tpg_plan_add_dependency(p, top, a), TPG_ERROR_INVALID_ARGUMENT, "an edge stays inside one body");
  CHECK_OK(add_k(p, x, 0, &a, 1, &b));
  /* What CUDA forbids in a body, refused as it is added. */
  CHECK_ST(tpg_plan_add_host(p, host_fn, NULL, &b, 1, NULL), TPG_ERROR_INVALID_ARGUMENT,
           "CUDA allows no host nodes in a conditional body");
  CHECK_ST(tpg_plan_add_event_record(p, (tpg_event)(uintptr_t)0x10, &b, 1, NULL), TPG_ERROR_INVALID_ARGUMENT,
           "no event record / wait nodes in a conditional body");
  tpg_collective_desc cd = TPG_COLLECTIVE_DESC_INIT;
  cd.send = cd.recv = (tpg_view){x, 0, 0};
  cd.count = 64;
  cd.algo = TPG_ALGO_NCCL;
  CHECK_ST(tpg_plan_add_collective(p, &cd, &b, 1, NULL), TPG_ERROR_INVALID_ARGUMENT, "TPG_ALGO_NCCL in the open body of conditional node while#1");
  cd.algo = TPG_ALGO_AUTO;
  cd.kind = TPG_ALL_GATHER;
  cd.count = 32;
  CHECK_ST(tpg_plan_add_collective(p, &cd, &b, 1, NULL), TPG_ERROR_INVALID_ARGUMENT, "only an all-reduce may sit");
  cd.kind = TPG_ALL_REDUCE;
  cd.count = 64;
  CHECK_OK(tpg_plan_add_collective(p, &cd, &b, 1, NULL));
  /* Memcpy into pinned host memory (the token stream) is allowed. */
  CHECK_OK(tpg_plan_add_memcpy(p, (tpg_view){h, 0, 0}, (tpg_view){x, 0, 0}, 64, &b, 1, NULL));
  /* A nested IF with an ELSE body. */
  d.type = TPG_COND_IF;
  d.cond = ci;
  d.nbodies = 2;
  CHECK_OK(tpg_plan_add_conditional(p, &d, &b, 1, &iff));
  CHECK_OK(tpg_plan_body_end(p));
  CHECK_ST(tpg_plan_body_begin(p, iff, 1), TPG_ERROR_INVALID_ARGUMENT, "is not in the open scope");
  CHECK_OK(tpg_plan_body_begin(p, loop, 0));
  CHECK_OK(tpg_plan_body_begin(p, iff, 1));
  CHECK_OK(add_k(p, x, 0, NULL, 0, &in_if));
  CHECK_ST(add_k(p, x, 0, &a, 1, NULL), TPG_ERROR_INVALID_ARGUMENT, "same body");
  /* A conditional in the ELSE body cannot be opened from the IF body. */
  tpg_cond cn;
  tpg_node inner;
  CHECK_OK(tpg_plan_add_cond(p, 0, 1, &cn));
  d.cond = cn;
  d.nbodies = 1;
  CHECK_OK(tpg_plan_add_conditional(p, &d, &in_if, 1, &inner));
  CHECK_OK(tpg_plan_body_end(p));
  CHECK_OK(tpg_plan_body_begin(p, iff, 0));
  CHECK_ST(tpg_plan_body_begin(p, inner, 0), TPG_ERROR_INVALID_ARGUMENT, "is not in the open scope");
  CHECK_OK(tpg_plan_body_end(p));
  CHECK_OK(tpg_plan_body_begin(p, iff, 1));
  CHECK_OK(tpg_plan_body_begin(p, inner, 0));
  CHECK_OK(add_k(p, x, 0, NULL, 0, NULL));
  CHECK_OK(tpg_plan_body_end(p)); /* the ELSE body */
  CHECK_OK(tpg_plan_body_end(p)); /* back in the WHILE's body */
  CHECK_ST(add_k(p, x, 0, &in_if, 1, NULL), TPG_ERROR_INVALID_ARGUMENT, "same body");
  CHECK_OK(add_k(p, x, 0, &iff, 1, NULL));
  CHECK_OK(tpg_plan_body_end(p)); /* top level */
  CHECK_OK(tpg_plan_add_host(p, host_fn, NULL, &loop, 1, NULL));
  CHECK_OK(tpg_plan_validate(p));
  CHECK(nodes_of(p) == 12);
  size_t need = 0;
  CHECK_OK(tpg_plan_dot(p, NULL, 0, &need));
  char *buf = malloc(need);
  CHECK(buf != NULL);
  if (buf) {
    CHECK_OK(tpg_plan_dot(p, buf, need, &need));
    CHECK(strstr(buf, "condition 1, 1 body") != NULL);
    CHECK(strstr(buf, "condition 2, 2 bodies") != NULL);
    CHECK(strstr(buf, "n1 -> n2 [style=dashed, label=\"body 0\"]") != NULL); /* while#1's body starts at a */
    CHECK(strstr(buf, "n6 -> n7 [style=dashed, label=\"body 1\"]") != NULL); /* the IF's ELSE holds in_if */
    free(buf);
  }
  /* A kernel argument naming no condition of the plan. */
  CHECK_ST(add_k(p, x, 9, NULL, 0, NULL), TPG_ERROR_INVALID_ARGUMENT, "desc->args[1] is condition 9: not a condition");
  CHECK_OK(tpg_plan_destroy(p));
}

/* The handle is an 8-byte parameter; a kernel taking something else is named. */
static void test_cond_args(void) {
  tpg_arg a[2] = {tpg_arg_view(1, 0), tpg_arg_cond(1)};
  CHECK_OK(tpg_kit_args_check("f", "k#0", a, 2));
  a[1].size = 4;
  CHECK_ST(tpg_kit_args_check("f", "k#0", a, 2), TPG_ERROR_INVALID_ARGUMENT, "condition handle with size 4");
  a[1].size = 8;
  static const size_t off[] = {0, 8}, sz4[] = {8, 4}, sz8[] = {8, 8};
  tpg_param_layout l = {2, off, sz4};
  tpg_kit_args *k = NULL;
  CHECK_ST(tpg_kit_args_layout("f", "k#0", a, 2, &l, &k), TPG_ERROR_INVALID_ARGUMENT,
           "args[1] is a condition handle (8 bytes); the kernel's parameter 1 is 4 bytes at offset 8");
  l.size = sz8;
  CHECK_OK(tpg_kit_args_layout("f", "k#0", a, 2, &l, &k));
  if (k) {
    tpg_kit_args_set_ptr(k, 1, 0x1234567890ull);
    uint64_t v;
    memcpy(&v, k->buf + 8, 8);
    CHECK(v == 0x1234567890ull);
    tpg_kit_args_free(k);
  }
  a[1].kind = (tpg_arg_kind)5;
  CHECK_ST(tpg_kit_args_check("f", "k#0", a, 2), TPG_ERROR_INVALID_ARGUMENT, "or TPG_ARG_COND (2)");
}

/* A plan with src's slots (the largest bucket's), then "tokens". */
static tpg_plan *slots_of(const tpg_plan *src, tpg_slot *tokens) {
  tpg_plan *p = NULL;
  int ns = 0;
  CHECK_OK(tpg_plan_create(&p));
  CHECK_OK(tpg_plan_get_stats(src, NULL, &ns, NULL));
  for (tpg_slot s = 1; s <= (tpg_slot)ns; s++) {
    tpg_slot_info si;
    tpg_slot got;
    CHECK_OK(tpg_plan_get_slot_info(src, s, &si, sizeof si));
    CHECK_OK(tpg_plan_add_slot(p, si.name, si.dtype, si.where, si.count, &got));
  }
  CHECK_OK(tpg_plan_add_slot(p, "tokens", TPG_F32, TPG_MEM_DEVICE, 4, tokens));
  return p;
}

/* Buckets chosen on the device, plan side: MLP plans of several token
 * counts appended as the bodies of a SWITCH. */
static void test_append(void) {
  tpg_mlp_desc d = TPG_MLP_DESC_INIT;
  d.kind = TPG_MLP_SWIGLU;
  d.layers = 2;
  d.hidden = 256;
  d.ffn = 1024;
  d.rank = 0;
  d.nranks = 2;
  d.bias = 0;
  const int sizes[3] = {8, 16, 32};
  tpg_plan *b[3];
  int nb[3];
  for (int i = 0; i < 3; i++) {
    d.tokens = sizes[i];
    CHECK_OK(tpg_plan_mlp(&d, &b[i]));
    nb[i] = nodes_of(b[i]);
  }
  tpg_slot tok;
  tpg_plan *p = slots_of(b[2], &tok);
  tpg_cond c;
  CHECK_OK(tpg_plan_add_cond(p, 0, 1, &c));
  tpg_node key, sw;
  CHECK_OK(add_k(p, tok, c, NULL, 0, &key));
  tpg_conditional_desc cd = TPG_CONDITIONAL_DESC_INIT;
  cd.type = TPG_COND_SWITCH;
  cd.cond = c;
  cd.nbodies = 3;
  CHECK_OK(tpg_plan_add_conditional(p, &cd, &key, 1, &sw));
  for (int i = 0; i < 3; i++) {
    CHECK_OK(tpg_plan_body_begin(p, sw, i));
    CHECK_OK(tpg_plan_append(p, b[i], NULL));
    CHECK_OK(tpg_plan_body_end(p));
  }
  CHECK(nodes_of(p) == 2 + nb[0] + nb[1] + nb[2]);
  CHECK_OK(tpg_plan_validate(p));
  CHECK_ST(tpg_plan_append(p, p, NULL), TPG_ERROR_INVALID_ARGUMENT, "src is plan");
  CHECK_ST(tpg_plan_append(p, NULL, NULL), TPG_ERROR_INVALID_ARGUMENT, "src");
  /* A plan built for fewer tokens cannot take the larger one's nodes. */
  tpg_slot t2;
  tpg_plan *small = slots_of(b[0], &t2);
  CHECK_ST(tpg_plan_append(small, b[2], NULL), TPG_ERROR_INVALID_ARGUMENT, "build plan for the largest shape");
  CHECK_ST(tpg_plan_append(b[0], p, NULL), TPG_ERROR_INVALID_ARGUMENT, "src has 1 condition");
  tpg_plan *other;
  tpg_slot q;
  CHECK_OK(tpg_plan_create(&other));
  CHECK_OK(tpg_plan_add_slot(other, "q", TPG_BF16, TPG_MEM_DEVICE, 8, &q));
  CHECK_ST(tpg_plan_append(small, other, NULL), TPG_ERROR_INVALID_ARGUMENT, "src's slot 1 is \"q\"");
  /* NCCL all-reduces inside a body: refused, and the plan is as it was. */
  d.tokens = 8;
  d.allreduce = TPG_ALGO_NCCL;
  tpg_plan *nccl;
  CHECK_OK(tpg_plan_mlp(&d, &nccl));
  tpg_cond c2;
  tpg_node sw2;
  CHECK_OK(tpg_plan_add_cond(small, 0, 1, &c2));
  cd.cond = c2;
  cd.nbodies = 1;
  CHECK_OK(tpg_plan_add_conditional(small, &cd, NULL, 0, &sw2));
  int before = nodes_of(small);
  CHECK_OK(tpg_plan_body_begin(small, sw2, 0));
  CHECK_ST(tpg_plan_append(small, nccl, NULL), TPG_ERROR_INVALID_ARGUMENT, "TPG_ALGO_NCCL in the open body");
  CHECK(nodes_of(small) == before);
  CHECK_OK(tpg_plan_body_end(small));
  tpg_node map[64];
  CHECK(nodes_of(nccl) <= 64);
  CHECK_OK(tpg_plan_append(small, nccl, map)); /* at the top level NCCL is fine */
  CHECK(nodes_of(small) == before + nodes_of(nccl));
  /* The handles map src's nodes: a node hung behind the last appended one. */
  CHECK_OK(tpg_plan_add_memset(small, (tpg_view){t2, 0, 0}, 0, 4, &map[nodes_of(nccl) - 1], 1, NULL));
  CHECK_OK(tpg_plan_set_node_name(small, map[0], "first"));
  CHECK_OK(tpg_plan_validate(small));
  for (int i = 0; i < 3; i++) tpg_plan_destroy(b[i]);
  tpg_plan_destroy(nccl);
  tpg_plan_destroy(other);
  tpg_plan_destroy(small);
  tpg_plan_destroy(p);
}

int main(void) {
  test_conds();
  test_bodies();
  test_cond_args();
  test_append();
  return TPG_TEST_END();
}
