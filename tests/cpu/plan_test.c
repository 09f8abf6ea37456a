/* plan_test.c - the CPU-side plan: building, every bad input, cycles, DOT.
 *
 * No GPU and no driver needed: this is the builder's logic, run in CI.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/tpg_test.h"

static tpg_view V(tpg_slot s, uint64_t off) {
  tpg_view v = {s, 0, off};
  return v;
}

static void test_lifecycle(void) {
  tpg_plan *p = (tpg_plan *)0x1;
  CHECK_ST(tpg_plan_create(NULL), TPG_ERROR_INVALID_ARGUMENT, "out is NULL");
  CHECK_OK(tpg_plan_create(&p));
  CHECK(p != NULL);
  tpg_plan_destroy(p);
  tpg_plan_destroy(NULL); /* no-op */
}

static void test_slots(void) {
  tpg_plan *p;
  tpg_slot s = 99, t;
  CHECK_OK(tpg_plan_create(&p));
  CHECK_ST(tpg_plan_add_slot(NULL, "x", TPG_BF16, TPG_MEM_DEVICE, 8, &s), TPG_ERROR_INVALID_ARGUMENT, "plan is NULL");
  CHECK(s == TPG_SLOT_NONE);
  CHECK_ST(tpg_plan_add_slot(p, NULL, TPG_BF16, TPG_MEM_DEVICE, 8, &s), TPG_ERROR_INVALID_ARGUMENT, "name");
  CHECK_ST(tpg_plan_add_slot(p, "", TPG_BF16, TPG_MEM_DEVICE, 8, &s), TPG_ERROR_INVALID_ARGUMENT, "name");
  CHECK_ST(tpg_plan_add_slot(p, "x", TPG_BF16, TPG_MEM_DEVICE, 0, &s), TPG_ERROR_INVALID_ARGUMENT, "count");
  CHECK_ST(tpg_plan_add_slot(p, "x", (tpg_dtype)7, TPG_MEM_DEVICE, 8, &s), TPG_ERROR_INVALID_ARGUMENT, "dtype");
  CHECK_ST(tpg_plan_add_slot(p, "x", TPG_BF16, (tpg_memory)5, 8, &s), TPG_ERROR_INVALID_ARGUMENT, "where");
  CHECK_ST(tpg_plan_add_slot(p, "x", TPG_BF16, TPG_MEM_DEVICE, (size_t)-1, &s), TPG_ERROR_INVALID_ARGUMENT, "count");
  CHECK_ST(tpg_plan_add_slot(p, "x", TPG_BF16, TPG_MEM_DEVICE, 8, NULL), TPG_ERROR_INVALID_ARGUMENT, "out");
  CHECK_OK(tpg_plan_add_slot(p, "x", TPG_BF16, TPG_MEM_DEVICE, 8, &s));
  CHECK(s == 1);
  CHECK_ST(tpg_plan_add_slot(p, "x", TPG_F32, TPG_MEM_DEVICE, 8, &t), TPG_ERROR_INVALID_ARGUMENT, "already");
  CHECK_OK(tpg_plan_find_slot(p, "x", &t));
  CHECK(t == s);
  CHECK_ST(tpg_plan_find_slot(p, "nope", &t), TPG_ERROR_INVALID_ARGUMENT, "nope");
  tpg_plan_destroy(p);
}

static void test_nodes_and_bad_inputs(void) {
  tpg_plan *p, *q;
  CHECK_OK(tpg_plan_create(&p));
  CHECK_OK(tpg_plan_create(&q));
  const int M = 3, N = 64, K = 128;
  tpg_slot x, w, y, yf, bias, h, o, qs;
  CHECK_OK(tpg_plan_add_slot(p, "x", TPG_BF16, TPG_MEM_DEVICE, (size_t)M * K, &x));
  CHECK_OK(tpg_plan_add_slot(p, "w", TPG_BF16, TPG_MEM_DEVICE, (size_t)2 * N * K, &w));
  CHECK_OK(tpg_plan_add_slot(p, "y", TPG_BF16, TPG_MEM_DEVICE, (size_t)M * N, &y));
  CHECK_OK(tpg_plan_add_slot(p, "yf", TPG_F32, TPG_MEM_DEVICE, (size_t)M * N, &yf));
  CHECK_OK(tpg_plan_add_slot(p, "bias", TPG_BF16, TPG_MEM_DEVICE, (size_t)2 * N, &bias));
  CHECK_OK(tpg_plan_add_slot(p, "host", TPG_BF16, TPG_MEM_HOST, (size_t)M * N, &h));
  CHECK_OK(tpg_plan_add_slot(p, "out", TPG_BF16, TPG_MEM_DEVICE, (size_t)M * N, &o));
  CHECK_OK(tpg_plan_add_slot(q, "other", TPG_BF16, TPG_MEM_DEVICE, 64, &qs));

  tpg_gemm_desc g = TPG_GEMM_DESC_INIT;
  g.m = M; g.n = N; g.k = K; g.dtype = TPG_BF16;
  g.x = V(x, 0); g.w = V(w, 0); g.y = V(y, 0);
  tpg_node mm = 0, ar = 0, e = 0;
  CHECK_OK(tpg_plan_add_gemm(p, &g, NULL, 0, &mm));
  CHECK(mm != 0);

  tpg_gemm_desc b = g;
  CHECK_ST(tpg_plan_add_gemm(NULL, &g, NULL, 0, NULL), TPG_ERROR_INVALID_ARGUMENT, "plan is NULL");
  CHECK_ST(tpg_plan_add_gemm(p, NULL, NULL, 0, NULL), TPG_ERROR_INVALID_ARGUMENT, "desc is NULL");
  b.size = 3;
  CHECK_ST(tpg_plan_add_gemm(p, &b, NULL, 0, NULL), TPG_ERROR_INVALID_ARGUMENT, "desc->size");
  b = g; b.m = 0;
  CHECK_ST(tpg_plan_add_gemm(p, &b, NULL, 0, NULL), TPG_ERROR_INVALID_ARGUMENT, "desc->m is 0");
  b = g; b.m = -4;
  CHECK_ST(tpg_plan_add_gemm(p, &b, NULL, 0, NULL), TPG_ERROR_INVALID_ARGUMENT, "desc->m is -4");
  b = g; b.n = 60;
  CHECK_ST(tpg_plan_add_gemm(p, &b, NULL, 0, NULL), TPG_ERROR_INVALID_ARGUMENT, "multiple of 8");
  b = g; b.k = 100;
  CHECK_ST(tpg_plan_add_gemm(p, &b, NULL, 0, NULL), TPG_ERROR_INVALID_ARGUMENT, "desc->k is 100");
  b = g; b.dtype = TPG_F32;
  CHECK_ST(tpg_plan_add_gemm(p, &b, NULL, 0, NULL), TPG_ERROR_INVALID_ARGUMENT, "desc->dtype");
  b = g; b.x = V(77, 0);
  CHECK_ST(tpg_plan_add_gemm(p, &b, NULL, 0, NULL), TPG_ERROR_INVALID_ARGUMENT, "desc->x.slot is 77");
  b = g; b.x = V(x, 4); /* 8 bytes: misaligned */
  CHECK_ST(tpg_plan_add_gemm(p, &b, NULL, 0, NULL), TPG_ERROR_INVALID_ARGUMENT, "aligned");
  b = g; b.x = V(x, 8); /* aligned but out of range */
  CHECK_ST(tpg_plan_add_gemm(p, &b, NULL, 0, NULL), TPG_ERROR_INVALID_ARGUMENT, "outside slot \"x\"");
  b = g; b.y = V(yf, 0); /* dtype mismatch */
  CHECK_ST(tpg_plan_add_gemm(p, &b, NULL, 0, NULL), TPG_ERROR_INVALID_ARGUMENT, "dtype mismatch");
  b = g; b.epilogue = TPG_EPILOGUE_F32_PARTIAL; b.y = V(yf, 0);
  CHECK_OK(tpg_plan_add_gemm(p, &b, NULL, 0, NULL));
  b = g; b.epilogue = TPG_EPILOGUE_BIAS;
  CHECK_ST(tpg_plan_add_gemm(p, &b, NULL, 0, NULL), TPG_ERROR_INVALID_ARGUMENT, "needs a bias");
  b.bias = V(bias, 0);
  CHECK_OK(tpg_plan_add_gemm(p, &b, NULL, 0, NULL));
  b = g; b.bias = V(bias, 0);
  CHECK_ST(tpg_plan_add_gemm(p, &b, NULL, 0, NULL), TPG_ERROR_INVALID_ARGUMENT, "takes no bias");
  b = g; b.epilogue = TPG_EPILOGUE_RESIDUAL;
  CHECK_ST(tpg_plan_add_gemm(p, &b, NULL, 0, NULL), TPG_ERROR_INVALID_ARGUMENT, "residual");
  b.residual = V(o, 0);
  CHECK_OK(tpg_plan_add_gemm(p, &b, NULL, 0, NULL));
  b = g; b.epilogue = TPG_EPILOGUE_SWIGLU; b.bias = V(bias, 0);
  CHECK_OK(tpg_plan_add_gemm(p, &b, NULL, 0, NULL)); /* w holds 2N rows */
  b = g; b.x = V(h, 0); b.k = N; /* host slot */
  CHECK_ST(tpg_plan_add_gemm(p, &b, NULL, 0, NULL), TPG_ERROR_INVALID_ARGUMENT, "host memory");
  b = g; b.epilogue = (tpg_epilogue)42;
  CHECK_ST(tpg_plan_add_gemm(p, &b, NULL, 0, NULL), TPG_ERROR_INVALID_ARGUMENT, "desc->epilogue");

  /* Dependencies: foreign nodes, bogus handles, repeats. */
  tpg_node foreign = 0;
  CHECK_OK(tpg_plan_add_empty(q, NULL, 0, &foreign));
  CHECK_ST(tpg_plan_add_empty(p, &foreign, 1, &e), TPG_ERROR_INVALID_ARGUMENT, "another plan");
  CHECK(e == 0);
  tpg_node bogus = mm + 1000;
  CHECK_ST(tpg_plan_add_empty(p, &bogus, 1, &e), TPG_ERROR_INVALID_ARGUMENT, "not a node of this plan");
  tpg_node two[2] = {mm, mm};
  CHECK_ST(tpg_plan_add_empty(p, two, 2, &e), TPG_ERROR_INVALID_ARGUMENT, "repeats");
  CHECK_ST(tpg_plan_add_empty(p, NULL, 1, &e), TPG_ERROR_INVALID_ARGUMENT, "deps is NULL");
  CHECK_ST(tpg_plan_add_empty(p, &mm, -1, &e), TPG_ERROR_INVALID_ARGUMENT, "tpg_plan_add_empty: ndeps is -1");
  /* out may alias deps: prev = add(prev) */
  tpg_node chain = mm;
  CHECK_OK(tpg_plan_add_empty(p, &chain, 1, &chain));
  CHECK(chain != mm && chain != 0);

  /* Collectives. */
  tpg_collective_desc c = TPG_COLLECTIVE_DESC_INIT;
  c.kind = TPG_ALL_REDUCE; c.send = V(y, 0); c.recv = V(o, 0); c.count = (size_t)M * N;
  CHECK_OK(tpg_plan_add_collective(p, &c, &mm, 1, &ar));
  tpg_collective_desc cb = c;
  cb.count = 0;
  CHECK_ST(tpg_plan_add_collective(p, &cb, NULL, 0, NULL), TPG_ERROR_INVALID_ARGUMENT, "desc->count is 0");
  cb = c; cb.recv = V(yf, 0);
  CHECK_ST(tpg_plan_add_collective(p, &cb, NULL, 0, NULL), TPG_ERROR_INVALID_ARGUMENT, "dtype mismatch");
  cb = c; cb.kind = (tpg_collective)9;
  CHECK_ST(tpg_plan_add_collective(p, &cb, NULL, 0, NULL), TPG_ERROR_INVALID_ARGUMENT, "desc->kind");
  cb = c; cb.send = V(h, 0);
  CHECK_ST(tpg_plan_add_collective(p, &cb, NULL, 0, NULL), TPG_ERROR_INVALID_ARGUMENT, "host memory");
  cb = c; cb.recv = V(qs, 0); /* a slot id of another plan that is not a slot here */
  cb.recv.slot = 999;
  CHECK_ST(tpg_plan_add_collective(p, &cb, NULL, 0, NULL), TPG_ERROR_INVALID_ARGUMENT, "desc->recv.slot is 999");
  {
    tpg_plan *t;
    tpg_slot ts;
    CHECK_OK(tpg_plan_create(&t));
    CHECK_OK(tpg_plan_add_slot(t, "t", TPG_BF16, TPG_MEM_DEVICE, 64, &ts));
    tpg_collective_desc ct = TPG_COLLECTIVE_DESC_INIT;
    ct.send = V(ts, 0); ct.recv = V(ts, 0); ct.count = 64; ct.algo = TPG_ALGO_TWOSHOT;
    CHECK_OK(tpg_plan_add_collective(t, &ct, NULL, 0, NULL));
    tpg_plan_destroy(t);
  }
  cb = c; cb.algo = TPG_ALGO_TWOSHOT;
  cb.kind = TPG_ALL_GATHER;
  CHECK_ST(tpg_plan_add_collective(p, &cb, NULL, 0, NULL), TPG_ERROR_INVALID_ARGUMENT,
           "desc->algo is TPG_ALGO_TWOSHOT for a kind-1 collective");
  cb = c; cb.algo = (tpg_collective_algo)4;
  CHECK_ST(tpg_plan_add_collective(p, &cb, NULL, 0, NULL), TPG_ERROR_INVALID_ARGUMENT,
           "desc->algo is 4: expected TPG_ALGO_AUTO, TPG_ALGO_NCCL, TPG_ALGO_ONESHOT or TPG_ALGO_TWOSHOT");

  /* Memset, memcpy, axpby. */
  tpg_node ms, cp, ax;
  CHECK_OK(tpg_plan_add_memset(p, V(yf, 0), 0x7fc00000u, (size_t)M * N, NULL, 0, &ms));
  CHECK_ST(tpg_plan_add_memset(p, V(y, 0), 0x12345u, 4, NULL, 0, NULL), TPG_ERROR_INVALID_ARGUMENT, "does not fit");
  CHECK_ST(tpg_plan_add_memset(p, V(h, 0), 0, 4, NULL, 0, NULL), TPG_ERROR_INVALID_ARGUMENT, "host memory");
  CHECK_ST(tpg_plan_add_memset(p, V(y, 0), 0, 0, NULL, 0, NULL), TPG_ERROR_INVALID_ARGUMENT, "count is 0");
  CHECK_OK(tpg_plan_add_memcpy(p, V(h, 0), V(o, 0), (size_t)M * N, &ar, 1, &cp));
  CHECK_ST(tpg_plan_add_memcpy(p, V(h, 0), V(yf, 0), 4, NULL, 0, NULL), TPG_ERROR_INVALID_ARGUMENT, "dtype mismatch");
  CHECK_ST(tpg_plan_add_memcpy(p, V(h, 0), V(h, 8), 4, NULL, 0, NULL), TPG_ERROR_INVALID_ARGUMENT, "both host");
  CHECK_ST(tpg_plan_add_memcpy(p, V(y, 0), V(y, 4), 8, NULL, 0, NULL), TPG_ERROR_INVALID_ARGUMENT, "overlap");
  CHECK_OK(tpg_plan_add_axpby(p, V(o, 0), V(y, 0), (size_t)M * N, 1.0f, 1.0f, &ar, 1, &ax));
  CHECK_ST(tpg_plan_add_axpby(p, V(o, 0), V(yf, 0), 8, 1.0f, 1.0f, NULL, 0, NULL), TPG_ERROR_INVALID_ARGUMENT,
           "dtype mismatch");

  /* Names, stats, validation. */
  CHECK_OK(tpg_plan_set_node_name(p, mm, "layer0.fc2"));
  CHECK_ST(tpg_plan_set_node_name(p, foreign, "x"), TPG_ERROR_INVALID_ARGUMENT, "not a node of this plan");
  int nn = 0, ns = 0, nc = 0;
  CHECK_OK(tpg_plan_get_stats(p, &nn, &ns, &nc));
  CHECK(nc == 1);
  CHECK(ns == 7);
  CHECK_OK(tpg_plan_validate(p));

  /* DOT: size query, too-small buffer, content. */
  size_t need = 0;
  CHECK_OK(tpg_plan_dot(p, NULL, 0, &need));
  CHECK(need > 100);
  char small[16];
  CHECK_ST(tpg_plan_dot(p, small, sizeof small, &need), TPG_ERROR_INVALID_ARGUMENT, "cap is 16");
  char *dot = malloc(need);
  CHECK_OK(tpg_plan_dot(p, dot, need, &need));
  CHECK(strncmp(dot, "digraph", 7) == 0);
  CHECK(strstr(dot, "layer0.fc2") != NULL);
  CHECK(strstr(dot, "all_reduce#") != NULL);
  CHECK(strstr(dot, "n0 -> n") != NULL);
  free(dot);

  /* A cycle, made with an explicit edge. */
  CHECK_ST(tpg_plan_add_dependency(p, mm, mm), TPG_ERROR_INVALID_ARGUMENT, "itself");
  CHECK_ST(tpg_plan_add_dependency(p, mm, ar), TPG_ERROR_INVALID_ARGUMENT, "already depends");
  CHECK_ST(tpg_plan_add_dependency(p, foreign, ar), TPG_ERROR_INVALID_ARGUMENT, "from");
  CHECK_OK(tpg_plan_add_dependency(p, cp, mm));
  CHECK_ST(tpg_plan_validate(p), TPG_ERROR_INVALID_ARGUMENT, "cycle");
  /* named by the public call, not the internal one that found it */
  CHECK(strncmp(tpg_last_error(), "tpg_plan_validate: the plan has a cycle", 39) == 0);
  CHECK(strstr(tpg_last_error(), "tpg_plan_topo") == NULL);

  tpg_plan_destroy(p);
  tpg_plan_destroy(q);
}

/* The all-reduce epilogue: every rule refused with the argument named; the
 * desc of the version before the epilogue still accepted. */
static void test_allreduce_epilogue(void) {
  tpg_plan *p;
  CHECK_OK(tpg_plan_create(&p));
  const size_t H = 64, R = 4, N = H * R;
  tpg_slot x, y, out, b, w, res, rout, f, hs;
  CHECK_OK(tpg_plan_add_slot(p, "x", TPG_BF16, TPG_MEM_DEVICE, N, &x));
  CHECK_OK(tpg_plan_add_slot(p, "y", TPG_BF16, TPG_MEM_DEVICE, N, &y));
  CHECK_OK(tpg_plan_add_slot(p, "out", TPG_BF16, TPG_MEM_DEVICE, N, &out));
  CHECK_OK(tpg_plan_add_slot(p, "b", TPG_BF16, TPG_MEM_DEVICE, H, &b));
  CHECK_OK(tpg_plan_add_slot(p, "w", TPG_BF16, TPG_MEM_DEVICE, H, &w));
  CHECK_OK(tpg_plan_add_slot(p, "res", TPG_BF16, TPG_MEM_DEVICE, 2 * N, &res));
  CHECK_OK(tpg_plan_add_slot(p, "rout", TPG_BF16, TPG_MEM_DEVICE, N, &rout));
  CHECK_OK(tpg_plan_add_slot(p, "f", TPG_F32, TPG_MEM_DEVICE, N, &f));
  CHECK_OK(tpg_plan_add_slot(p, "h", TPG_BF16, TPG_MEM_HOST, N, &hs));
  tpg_collective_desc c = TPG_COLLECTIVE_DESC_INIT;
  CHECK(c.norm_eps == 1e-6f && c.hidden == 0);
  c.send = V(y, 0); c.recv = V(out, 0); c.count = N;
  c.hidden = H; c.bias = V(b, 0); c.residual = V(res, 0); c.residual_out = V(res, 0); c.norm_weight = V(w, 0);
  CHECK_OK(tpg_plan_add_collective(p, &c, NULL, 0, NULL)); /* the Llama pattern, residual in place */
  tpg_collective_desc d;
  d = c; d.residual_out = V(rout, 0);
  CHECK_OK(tpg_plan_add_collective(p, &d, NULL, 0, NULL));
  d = c; d.bias.slot = 0; d.norm_weight.slot = 0; d.residual_out.slot = 0; /* residual only */
  CHECK_OK(tpg_plan_add_collective(p, &d, NULL, 0, NULL));
  d = c; d.algo = TPG_ALGO_TWOSHOT;
  CHECK_OK(tpg_plan_add_collective(p, &d, NULL, 0, NULL));

  d = c; d.hidden = 0;
  CHECK_ST(tpg_plan_add_collective(p, &d, NULL, 0, NULL), TPG_ERROR_INVALID_ARGUMENT,
           "desc->hidden is 0 but desc->bias is set");
  d = c; d.bias.slot = d.residual.slot = d.residual_out.slot = d.norm_weight.slot = 0;
  CHECK_ST(tpg_plan_add_collective(p, &d, NULL, 0, NULL), TPG_ERROR_INVALID_ARGUMENT,
           "desc->hidden is 64 but no epilogue view");
  d = c; d.hidden = 12;
  CHECK_ST(tpg_plan_add_collective(p, &d, NULL, 0, NULL), TPG_ERROR_INVALID_ARGUMENT,
           "desc->hidden is 12: expected a multiple of 8");
  d = c; d.hidden = 24;
  CHECK_ST(tpg_plan_add_collective(p, &d, NULL, 0, NULL), TPG_ERROR_INVALID_ARGUMENT,
           "desc->hidden 24 does not divide desc->count 256");
  d = c; d.kind = TPG_ALL_GATHER;
  CHECK_ST(tpg_plan_add_collective(p, &d, NULL, 0, NULL), TPG_ERROR_INVALID_ARGUMENT,
           "desc->bias is set for a kind-1 collective: only all-reduces have an epilogue");
  d = c; d.bias = V(b, 8);
  CHECK_ST(tpg_plan_add_collective(p, &d, NULL, 0, NULL), TPG_ERROR_INVALID_ARGUMENT, "desc->bias: elements [8, 8 + 64)");
  d = c; d.bias = V(b, 3);
  CHECK_ST(tpg_plan_add_collective(p, &d, NULL, 0, NULL), TPG_ERROR_INVALID_ARGUMENT, "desc->bias: offset 3");
  d = c; d.norm_weight = V(f, 0);
  CHECK_ST(tpg_plan_add_collective(p, &d, NULL, 0, NULL), TPG_ERROR_INVALID_ARGUMENT, "desc->norm_weight: slot \"f\" holds f32");
  d = c; d.residual = V(hs, 0); d.residual_out.slot = 0;
  CHECK_ST(tpg_plan_add_collective(p, &d, NULL, 0, NULL), TPG_ERROR_INVALID_ARGUMENT, "desc->residual");
  d = c; d.residual_out = V(res, N + 8);
  CHECK_ST(tpg_plan_add_collective(p, &d, NULL, 0, NULL), TPG_ERROR_INVALID_ARGUMENT, "desc->residual_out: elements");
  d = c; d.residual_out = V(res, 8);
  CHECK_ST(tpg_plan_add_collective(p, &d, NULL, 0, NULL), TPG_ERROR_INVALID_ARGUMENT,
           "desc->residual_out overlaps desc->residual in slot \"res\"");
  d = c; d.residual_out = V(y, 0);
  CHECK_ST(tpg_plan_add_collective(p, &d, NULL, 0, NULL), TPG_ERROR_INVALID_ARGUMENT,
           "desc->residual_out overlaps desc->send");
  d = c; d.residual_out = V(out, 0);
  CHECK_ST(tpg_plan_add_collective(p, &d, NULL, 0, NULL), TPG_ERROR_INVALID_ARGUMENT,
           "desc->residual_out overlaps desc->recv");
  d = c; d.recv = V(res, 0); d.residual_out = V(rout, 0);
  CHECK_ST(tpg_plan_add_collective(p, &d, NULL, 0, NULL), TPG_ERROR_INVALID_ARGUMENT, "desc->recv overlaps desc->residual");
  d = c; d.norm_eps = -1.0f;
  CHECK_ST(tpg_plan_add_collective(p, &d, NULL, 0, NULL), TPG_ERROR_INVALID_ARGUMENT, "desc->norm_eps is -1");
  d = c; d.norm_eps = INFINITY;
  CHECK_ST(tpg_plan_add_collective(p, &d, NULL, 0, NULL), TPG_ERROR_INVALID_ARGUMENT, "desc->norm_eps is inf");
  d = c; d.norm_weight.slot = 0; d.norm_eps = -1.0f; /* eps only matters with a norm */
  CHECK_OK(tpg_plan_add_collective(p, &d, NULL, 0, NULL));
  d = c; d.send = V(y, 4); d.count = N - 64;
  CHECK_ST(tpg_plan_add_collective(p, &d, NULL, 0, NULL), TPG_ERROR_INVALID_ARGUMENT, "desc->send: offset 4");
  d = c; d.size = 7;
  CHECK_ST(tpg_plan_add_collective(p, &d, NULL, 0, NULL), TPG_ERROR_INVALID_ARGUMENT, "desc->size is 7");
  /* The desc before the epilogue fields: accepted, trailing bytes ignored. */
  d = c; d.size = offsetof(tpg_collective_desc, algo) + sizeof d.algo;
  CHECK_OK(tpg_plan_add_collective(p, &d, NULL, 0, NULL));
  size_t need = 0;
  CHECK_OK(tpg_plan_dot(p, NULL, 0, &need));
  char *dot = malloc(need);
  CHECK_OK(tpg_plan_dot(p, dot, need, &need));
  CHECK(dot && strstr(dot, "norm_weight") != NULL);
  free(dot);
  CHECK_OK(tpg_plan_validate(p));
  tpg_plan_destroy(p);
}

static void test_empty_plan(void) {
  tpg_plan *p;
  CHECK_OK(tpg_plan_create(&p));
  CHECK_ST(tpg_plan_validate(p), TPG_ERROR_INVALID_ARGUMENT, "no nodes");
  CHECK_ST(tpg_plan_validate(NULL), TPG_ERROR_INVALID_ARGUMENT, "plan is NULL");
  tpg_plan_destroy(p);
  /* A destroyed handle is caught by its magic while the memory is still ours
   * to read; here we only check a never-valid one. */
  unsigned junk[16] = {0};
  CHECK_ST(tpg_plan_validate((tpg_plan *)junk), TPG_ERROR_INVALID_ARGUMENT, "not a live tpg_plan");
  /* tpg_plan_destroy returns a status like the other destroys, and keeps
   * the message of the failure it cleans up after. */
  CHECK_ST(tpg_plan_destroy((tpg_plan *)junk), TPG_ERROR_INVALID_ARGUMENT, "tpg_plan_destroy: plan is not a live");
  CHECK_OK(tpg_plan_destroy(NULL));
  CHECK_OK(tpg_plan_create(&p));
  CHECK_ST(tpg_plan_validate(p), TPG_ERROR_INVALID_ARGUMENT, "no nodes");
  CHECK(tpg_plan_destroy(p) == TPG_SUCCESS && strstr(tpg_last_error(), "no nodes") != NULL);
}

static void test_big_plan(void) {
  /* 64 layers of (gemm -> collective -> axpby): validate and topo at scale. */
  tpg_plan *p;
  CHECK_OK(tpg_plan_create(&p));
  tpg_slot x, w, y, o;
  CHECK_OK(tpg_plan_add_slot(p, "x", TPG_BF16, TPG_MEM_DEVICE, 64 * 64, &x));
  CHECK_OK(tpg_plan_add_slot(p, "w", TPG_BF16, TPG_MEM_DEVICE, 64 * 64, &w));
  CHECK_OK(tpg_plan_add_slot(p, "y", TPG_BF16, TPG_MEM_DEVICE, 64 * 64, &y));
  CHECK_OK(tpg_plan_add_slot(p, "o", TPG_BF16, TPG_MEM_DEVICE, 64 * 64, &o));
  tpg_node prev = 0;
  int ok = 1;
  for (int l = 0; l < 64; l++) {
    tpg_gemm_desc g = TPG_GEMM_DESC_INIT;
    g.m = 64; g.n = 64; g.k = 64;
    g.x = V(x, 0); g.w = V(w, 0); g.y = V(y, 0);
    tpg_node a, b, c;
    ok &= tpg_plan_add_gemm(p, &g, prev ? &prev : NULL, prev ? 1 : 0, &a) == TPG_SUCCESS;
    tpg_collective_desc cd = TPG_COLLECTIVE_DESC_INIT;
    cd.send = V(y, 0); cd.recv = V(o, 0); cd.count = 64 * 64;
    ok &= tpg_plan_add_collective(p, &cd, &a, 1, &b) == TPG_SUCCESS;
    ok &= tpg_plan_add_axpby(p, V(x, 0), V(o, 0), 64 * 64, 1.0f, 1.0f, &b, 1, &c) == TPG_SUCCESS;
    prev = c;
  }
  CHECK(ok);
  int nn = 0;
  CHECK_OK(tpg_plan_get_stats(p, &nn, NULL, NULL));
  CHECK(nn == 192);
  CHECK_OK(tpg_plan_validate(p));
  tpg_plan_destroy(p);
}

static void test_mlp(void) {
  tpg_mlp_desc d = TPG_MLP_DESC_INIT;
  d.layers = 4; d.tokens = 1; d.hidden = 1024; d.ffn = 4096; d.rank = 1; d.nranks = 2;
  tpg_plan *p = (tpg_plan *)0x1;
  CHECK_OK(tpg_plan_mlp(&d, &p));
  int nn = 0, ns = 0, nc = 0;
  CHECK_OK(tpg_plan_get_stats(p, &nn, &ns, &nc));
  CHECK(nn == 4 * 3 + 1 && nc == 4); /* 2 GEMMs + 1 all-reduce per layer, one copy out */
  CHECK(ns == 4 + 4 * 4);
  tpg_slot s;
  CHECK_OK(tpg_plan_find_slot(p, "l3.w2", &s));
  CHECK_OK(tpg_plan_validate(p));
  tpg_plan_destroy(p);
  d.tokens = 1024; d.overlap = TPG_OVERLAP_CHUNKED; d.chunks = 4;
  CHECK_OK(tpg_plan_mlp(&d, &p));
  CHECK_OK(tpg_plan_get_stats(p, &nn, NULL, &nc));
  CHECK(nn == 4 * 3 * 4 + 1 && nc == 16);
  size_t need;
  CHECK_OK(tpg_plan_dot(p, NULL, 0, &need));
  tpg_plan_destroy(p);
  d.collectives = 0; /* compute only */
  CHECK_OK(tpg_plan_mlp(&d, &p));
  CHECK_OK(tpg_plan_get_stats(p, NULL, NULL, &nc));
  CHECK(nc == 0);
  tpg_plan_destroy(p);
  tpg_mlp_desc b = d;
  b.ffn = 4097;
  CHECK_ST(tpg_plan_mlp(&b, &p), TPG_ERROR_INVALID_ARGUMENT, "evenly");
  CHECK(strncmp(tpg_last_error(), "tpg_plan_mlp: desc->ffn", 23) == 0); /* the public name, not a helper's */
  CHECK(p == NULL);
  b = d; b.ffn = 4096 + 16; b.nranks = 4; b.rank = 0; /* 1028 per rank */
  CHECK_ST(tpg_plan_mlp(&b, &p), TPG_ERROR_INVALID_ARGUMENT, "multiple of 8");
  b = d; b.rank = 2;
  CHECK_ST(tpg_plan_mlp(&b, &p), TPG_ERROR_INVALID_ARGUMENT, "desc->rank is 2");
  b = d; b.chunks = 20;
  CHECK_ST(tpg_plan_mlp(&b, &p), TPG_ERROR_INVALID_ARGUMENT, "desc->chunks");
  b = d; b.tokens = 1; b.chunks = 2;
  CHECK_ST(tpg_plan_mlp(&b, &p), TPG_ERROR_INVALID_ARGUMENT, "tokens");
  b = d; b.bias = 0;
  CHECK_ST(tpg_plan_mlp(&b, &p), TPG_ERROR_INVALID_ARGUMENT, "GeLU");
  b.kind = TPG_MLP_SWIGLU;
  CHECK_OK(tpg_plan_mlp(&b, &p));
  tpg_plan_destroy(p);
  b = d; b.size = 0;
  CHECK_ST(tpg_plan_mlp(&b, &p), TPG_ERROR_INVALID_ARGUMENT, "desc->size");
  CHECK_ST(tpg_plan_mlp(NULL, &p), TPG_ERROR_INVALID_ARGUMENT, "desc is NULL");
}

/* Bugs the fuzzer found (tests/fuzz/corpus/regress-*), as plain tests. */
static void test_fuzz_regressions(void) {
  /* Names are escaped in DOT: a quote or newline must not end or split a label. */
  tpg_plan *p;
  tpg_slot a;
  tpg_node n;
  CHECK_OK(tpg_plan_create(&p));
  CHECK_OK(tpg_plan_add_slot(p, "a\"b\\c\nd", TPG_F32, TPG_MEM_DEVICE, 64, &a));
  tpg_view va = {a, 0, 0};
  CHECK_OK(tpg_plan_add_memset(p, va, 0, 64, NULL, 0, &n));
  CHECK_OK(tpg_plan_set_node_name(p, n, "say \"hi\"\n\x01"));
  size_t need = 0;
  CHECK_OK(tpg_plan_dot(p, NULL, 0, &need));
  char *buf = malloc(need);
  CHECK(buf != NULL);
  if (buf) {
    CHECK_OK(tpg_plan_dot(p, buf, need, &need));
    CHECK(strstr(buf, "label=\"say \\\"hi\\\"\\n?") != NULL);
    CHECK(strstr(buf, "dst=a\\\"b\\\\c\\nd") != NULL);
    int quotes = 0;
    for (const char *c = buf; *c; c++) {
      if (*c == '\\' && c[1]) c++;
      else if (*c == '"') quotes++;
    }
    CHECK(quotes % 2 == 0);
    free(buf);
  }
  tpg_plan_destroy(p);
  /* SWIGLU with ffn near INT_MAX: 2 * (ffn / nranks) overflowed int (UBSan);
   * now the size is refused by name. */
  tpg_mlp_desc d = TPG_MLP_DESC_INIT;
  d.kind = TPG_MLP_SWIGLU; d.bias = 0; d.hidden = 1 << 16; d.ffn = 2147483640; d.nranks = 1;
  p = (tpg_plan *)0x1;
  CHECK_ST(tpg_plan_mlp(&d, &p), TPG_ERROR_INVALID_ARGUMENT, "l0.w1");
  CHECK(p == NULL);
}

/* tpg_plan_checkpoint / tpg_plan_rollback / tpg_plan_get_slot_info: what layers
 * built on the public API use to add a group of nodes all-or-nothing. */
static void test_checkpoint(void) {
  tpg_plan *p, *q;
  tpg_slot a, b, c;
  tpg_node n0, n1, n2;
  CHECK_OK(tpg_plan_create(&p));
  CHECK_OK(tpg_plan_create(&q));
  CHECK_OK(tpg_plan_add_slot(p, "a", TPG_F32, TPG_MEM_DEVICE, 64, &a));
  CHECK_OK(tpg_plan_add_slot(p, "b", TPG_F32, TPG_MEM_DEVICE, 64, &b));
  CHECK_OK(tpg_plan_add_memset(p, V(a, 0), 0, 64, NULL, 0, &n0));
  tpg_slot_info si;
  CHECK_OK(tpg_plan_get_slot_info(p, b, &si, sizeof si));
  CHECK(strcmp(si.name, "b") == 0 && si.dtype == TPG_F32 && si.where == TPG_MEM_DEVICE && si.count == 64);
  CHECK_ST(tpg_plan_get_slot_info(p, 3, &si, sizeof si), TPG_ERROR_INVALID_ARGUMENT, "slot is 3");
  CHECK_ST(tpg_plan_get_slot_info(p, a, NULL, sizeof(tpg_slot_info)), TPG_ERROR_INVALID_ARGUMENT, "out is NULL");
  tpg_plan_mark m, mq;
  CHECK_OK(tpg_plan_checkpoint(p, &m));
  CHECK_OK(tpg_plan_checkpoint(q, &mq));
  CHECK_OK(tpg_plan_add_slot(p, "c", TPG_F32, TPG_MEM_DEVICE, 64, &c));
  CHECK_OK(tpg_plan_add_memcpy(p, V(c, 0), V(a, 0), 64, &n0, 1, &n1));
  CHECK_OK(tpg_plan_add_memset(p, V(b, 0), 0, 64, NULL, 0, &n2));
  CHECK_OK(tpg_plan_add_dependency(p, n2, n0)); /* an edge onto an older node */
  CHECK_ST(tpg_plan_rollback(p, mq), TPG_ERROR_INVALID_ARGUMENT, "not a mark of this plan");
  CHECK_OK(tpg_plan_rollback(p, m));
  int nodes = 0, slots = 0;
  CHECK_OK(tpg_plan_get_stats(p, &nodes, &slots, NULL));
  CHECK(nodes == 1 && slots == 2);
  CHECK_OK(tpg_plan_validate(p)); /* no edge left to a dropped node */
  tpg_slot found;
  CHECK_ST(tpg_plan_find_slot(p, "c", &found), TPG_ERROR_INVALID_ARGUMENT, "no slot named");
  CHECK_OK(tpg_plan_add_slot(p, "c", TPG_F32, TPG_MEM_DEVICE, 64, &c)); /* the name is free again */
  CHECK(c == 3);
  CHECK_ST(tpg_plan_add_memset(p, V(a, 0), 0, 64, &n1, 1, NULL), TPG_ERROR_INVALID_ARGUMENT, "not a node of this plan");
  /* A mark past the end (rolled back already) is refused. */
  tpg_plan_mark late;
  CHECK_OK(tpg_plan_add_memset(p, V(a, 0), 0, 64, NULL, 0, NULL));
  CHECK_OK(tpg_plan_checkpoint(p, &late));
  CHECK_OK(tpg_plan_rollback(p, m));
  CHECK_ST(tpg_plan_rollback(p, late), TPG_ERROR_INVALID_ARGUMENT, "past the plan's end");
  CHECK_ST(tpg_plan_checkpoint(p, NULL), TPG_ERROR_INVALID_ARGUMENT, "out is NULL");
  CHECK_ST(tpg_plan_rollback(NULL, m), TPG_ERROR_INVALID_ARGUMENT, "plan is NULL");
  tpg_plan_destroy(p);
  tpg_plan_destroy(q);
}

/* Partial overlaps and garbage in reserved_ are refused. */
static void test_aliasing(void) {
  tpg_plan *p;
  tpg_slot a, w, b;
  CHECK_OK(tpg_plan_create(&p));
  CHECK_OK(tpg_plan_add_slot(p, "a", TPG_BF16, TPG_MEM_DEVICE, 4096, &a));
  CHECK_OK(tpg_plan_add_slot(p, "w", TPG_BF16, TPG_MEM_DEVICE, 4096, &w));
  CHECK_OK(tpg_plan_add_slot(p, "b", TPG_BF16, TPG_MEM_DEVICE, 64, &b));
  tpg_view bad = V(a, 0);
  bad.reserved_ = 7;
  CHECK_ST(tpg_plan_add_memset(p, bad, 0, 8, NULL, 0, NULL), TPG_ERROR_INVALID_ARGUMENT, "dst.reserved_ is 7");
  /* axpby: in place, or disjoint */
  CHECK_OK(tpg_plan_add_axpby(p, V(a, 0), V(a, 0), 64, 1.0f, 1.0f, NULL, 0, NULL));
  CHECK_OK(tpg_plan_add_axpby(p, V(a, 0), V(a, 64), 64, 1.0f, 1.0f, NULL, 0, NULL));
  CHECK_ST(tpg_plan_add_axpby(p, V(a, 0), V(a, 32), 64, 1.0f, 1.0f, NULL, 0, NULL), TPG_ERROR_INVALID_ARGUMENT,
           "y and x partly overlap");
  /* all-reduce: in place, or disjoint */
  tpg_collective_desc c = TPG_COLLECTIVE_DESC_INIT;
  c.send = V(a, 0);
  c.recv = V(a, 0);
  c.count = 256;
  CHECK_OK(tpg_plan_add_collective(p, &c, NULL, 0, NULL));
  c.recv = V(a, 256);
  CHECK_OK(tpg_plan_add_collective(p, &c, NULL, 0, NULL));
  c.recv = V(a, 128);
  CHECK_ST(tpg_plan_add_collective(p, &c, NULL, 0, NULL), TPG_ERROR_INVALID_ARGUMENT,
           "desc->send and desc->recv partly overlap");
  c.kind = TPG_ALL_GATHER; /* NCCL's in-place layouts: not refused */
  c.count = 128;
  CHECK_OK(tpg_plan_add_collective(p, &c, NULL, 0, NULL));
  /* GEMM: y must not overlap w or bias; residual is y exactly or disjoint */
  tpg_gemm_desc g = TPG_GEMM_DESC_INIT;
  g.m = 8;
  g.n = 32;
  g.k = 32;
  g.x = V(a, 0);
  g.w = V(w, 0);
  g.y = V(w, 1024); /* w is elements [0, 1024) */
  CHECK_OK(tpg_plan_add_gemm(p, &g, NULL, 0, NULL));
  g.y = V(w, 1024 + 256);
  CHECK_OK(tpg_plan_add_gemm(p, &g, NULL, 0, NULL));
  g.y = V(w, 1024 - 8);
  CHECK_ST(tpg_plan_add_gemm(p, &g, NULL, 0, NULL), TPG_ERROR_INVALID_ARGUMENT, "desc->y overlaps desc->w");
  g.y = V(a, 1024);
  g.epilogue = TPG_EPILOGUE_BIAS;
  g.bias = V(a, 1024 + 64);
  CHECK_ST(tpg_plan_add_gemm(p, &g, NULL, 0, NULL), TPG_ERROR_INVALID_ARGUMENT, "desc->y overlaps desc->bias");
  g.bias = V(b, 0);
  CHECK_OK(tpg_plan_add_gemm(p, &g, NULL, 0, NULL));
  g.epilogue = TPG_EPILOGUE_RESIDUAL;
  g.bias = V(0, 0);
  g.residual = V(a, 1024);
  CHECK_OK(tpg_plan_add_gemm(p, &g, NULL, 0, NULL)); /* in place */
  g.residual = V(a, 1024 + 256);
  CHECK_OK(tpg_plan_add_gemm(p, &g, NULL, 0, NULL)); /* disjoint */
  g.residual = V(a, 1024 + 128);
  CHECK_ST(tpg_plan_add_gemm(p, &g, NULL, 0, NULL), TPG_ERROR_INVALID_ARGUMENT,
           "desc->residual overlaps desc->y in slot");
  tpg_plan_destroy(p);
}

/* Slot names and edges are looked up in hash indexes, not scanned (a name
 * scan per call made 100k add_slot take 12 s). At these sizes a quadratic
 * path takes minutes (the test's timeout), a linear one well under a
 * second. */
static void test_scale(void) {
  enum { N = 100000 };
  tpg_plan *p;
  CHECK_OK(tpg_plan_create(&p));
  char name[32];
  tpg_slot s = 0;
  int ok = 1;
  for (int i = 0; i < N && ok; i++) {
    snprintf(name, sizeof name, "s%d", i);
    ok = tpg_plan_add_slot(p, name, TPG_F32, TPG_MEM_DEVICE, 16, &s) == TPG_SUCCESS && s == (tpg_slot)(i + 1);
  }
  CHECK(ok);
  CHECK_ST(tpg_plan_add_slot(p, "s4242", TPG_F32, TPG_MEM_DEVICE, 16, &s), TPG_ERROR_INVALID_ARGUMENT,
           "name \"s4242\" is already slot 4243");
  CHECK_OK(tpg_plan_find_slot(p, "s99999", &s));
  CHECK(s == N);
  tpg_node *nodes = malloc(N * sizeof *nodes);
  for (int i = 0; i < N && ok; i++) ok = tpg_plan_add_empty(p, NULL, 0, &nodes[i]) == TPG_SUCCESS;
  CHECK(ok);
  tpg_node join;
  CHECK_OK(tpg_plan_add_empty(p, nodes, N, &join)); /* one node, 100k deps: checked for repeats by sorting */
  tpg_node last;
  CHECK_OK(tpg_plan_add_empty(p, NULL, 0, &last));
  for (int i = 0; i < N && ok; i++) ok = tpg_plan_add_dependency(p, nodes[i], last) == TPG_SUCCESS;
  CHECK(ok);
  CHECK_ST(tpg_plan_add_dependency(p, nodes[777], last), TPG_ERROR_INVALID_ARGUMENT, "already depends");
  CHECK_ST(tpg_plan_add_dependency(p, nodes[777], join), TPG_ERROR_INVALID_ARGUMENT, "already depends");
  nodes[N - 1] = nodes[5];
  CHECK_ST(tpg_plan_add_empty(p, nodes, N, NULL), TPG_ERROR_INVALID_ARGUMENT, "deps[99999] repeats deps[5]");
  CHECK_OK(tpg_plan_validate(p));
  free(nodes);
  tpg_plan_destroy(p);
}

int main(void) {
  test_scale();
  test_aliasing();
  test_checkpoint();
  test_fuzz_regressions();
  test_mlp();
  test_lifecycle();
  test_slots();
  test_nodes_and_bad_inputs();
  test_allreduce_epilogue();
  test_empty_plan();
  test_big_plan();
  return TPG_TEST_END();
}
