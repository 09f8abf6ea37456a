/* linear_test.c - tensor-parallel linear layers on the CPU: the nodes each
 * kind adds (counts, shapes, offsets, edges, read from the plan's DOT), the
 * column->row composition, and every refusal, each naming its argument and
 * leaving the plan unchanged. No GPU needed (tests/gpu/linear_test.c runs
 * the same layers against an fp64 reference).
 */
#include <stddef.h>
#include <stdlib.h>

#include "tests/tpg_test.h"

static tpg_view V(tpg_slot s, uint64_t off) {
  tpg_view v = {s, 0, off};
  return v;
}

/* The plan's DOT text (caller frees). */
static char *dot_of(const tpg_plan *p) {
  size_t need = 0;
  if (tpg_plan_dot(p, NULL, 0, &need) != TPG_SUCCESS) return NULL;
  char *b = malloc(need);
  if (b && tpg_plan_dot(p, b, need, &need) != TPG_SUCCESS) {
    free(b);
    return NULL;
  }
  return b;
}

static int has(const char *dot, const char *needle) {
  int ok = dot && strstr(dot, needle) != NULL;
  if (!ok) fprintf(stderr, "  DOT lacks \"%s\"\n", needle);
  return ok;
}

static int has_quiet(const char *dot, const char *needle) { return dot && strstr(dot, needle) != NULL; }

static int nodes_of(const tpg_plan *p) {
  int n = -1;
  tpg_plan_get_stats(p, &n, NULL, NULL);
  return n;
}

static int colls_of(const tpg_plan *p) {
  int c = -1;
  tpg_plan_get_stats(p, NULL, NULL, &c);
  return c;
}

enum { T = 5, H = 64, D = 256 };

typedef struct {
  tpg_plan *p;
  tpg_slot x, w1, b1, h, w2, b2, y, work, yg, res, xh, f32, x1;
} fixture;

/* Slots for a column layer H -> D and a row layer D -> H at ranks R. */
static void fixture_make(fixture *f, int R) {
  CHECK_OK(tpg_plan_create(&f->p));
  tpg_plan *p = f->p;
  CHECK_OK(tpg_plan_add_slot(p, "x", TPG_BF16, TPG_MEM_DEVICE, (size_t)T * H, &f->x));
  CHECK_OK(tpg_plan_add_slot(p, "w1", TPG_BF16, TPG_MEM_DEVICE, (size_t)2 * D / R * H, &f->w1));
  CHECK_OK(tpg_plan_add_slot(p, "b1", TPG_BF16, TPG_MEM_DEVICE, (size_t)2 * D / R, &f->b1));
  CHECK_OK(tpg_plan_add_slot(p, "h", TPG_BF16, TPG_MEM_SCRATCH, (size_t)T * D / R, &f->h));
  CHECK_OK(tpg_plan_add_slot(p, "w2", TPG_BF16, TPG_MEM_DEVICE, (size_t)H * D / R, &f->w2));
  CHECK_OK(tpg_plan_add_slot(p, "b2", TPG_BF16, TPG_MEM_DEVICE, (size_t)H, &f->b2));
  CHECK_OK(tpg_plan_add_slot(p, "y", TPG_BF16, TPG_MEM_DEVICE, (size_t)T * H, &f->y));
  CHECK_OK(tpg_plan_add_slot(p, "work", TPG_BF16, TPG_MEM_SCRATCH, (size_t)T * D, &f->work));
  CHECK_OK(tpg_plan_add_slot(p, "yg", TPG_BF16, TPG_MEM_DEVICE, (size_t)T * D, &f->yg));
  CHECK_OK(tpg_plan_add_slot(p, "res", TPG_BF16, TPG_MEM_DEVICE, (size_t)T * H, &f->res));
  CHECK_OK(tpg_plan_add_slot(p, "xh", TPG_BF16, TPG_MEM_HOST, (size_t)T * H, &f->xh));
  CHECK_OK(tpg_plan_add_slot(p, "f32", TPG_F32, TPG_MEM_DEVICE, (size_t)T * D, &f->f32));
  CHECK_OK(tpg_plan_add_slot(p, "x1", TPG_BF16, TPG_MEM_DEVICE, (size_t)H, &f->x1));
}

static tpg_linear_desc column(const fixture *f, int rank, int R) {
  tpg_linear_desc d = TPG_LINEAR_DESC_INIT;
  d.kind = TPG_LINEAR_COLUMN;
  d.rank = rank;
  d.nranks = R;
  d.tokens = T;
  d.in_features = H;
  d.out_features = D;
  d.x = V(f->x, 0);
  d.w = V(f->w1, 0);
  d.y = V(f->h, 0);
  return d;
}

static tpg_linear_desc row(const fixture *f, int rank, int R) {
  tpg_linear_desc d = TPG_LINEAR_DESC_INIT;
  d.kind = TPG_LINEAR_ROW;
  d.rank = rank;
  d.nranks = R;
  d.tokens = T;
  d.in_features = D;
  d.out_features = H;
  d.x = V(f->h, 0);
  d.w = V(f->w2, 0);
  d.y = V(f->y, 0);
  return d;
}

static void test_column_shapes(void) {
  fixture f;
  /* TP=1, bias + GeLU fused: one GEMM node. */
  fixture_make(&f, 1);
  tpg_linear_desc d = column(&f, 0, 1);
  d.bias = V(f.b1, 0);
  d.activation = TPG_ACT_GELU;
  d.gather = 1; /* nothing to gather with one rank */
  d.name = "up";
  tpg_node n = 0;
  CHECK_OK(tpg_plan_add_linear(f.p, &d, NULL, 0, &n));
  CHECK(n != 0 && nodes_of(f.p) == 1 && colls_of(f.p) == 0);
  char *dot = dot_of(f.p);
  CHECK(has(dot, "up.gemm\\n5x256x64 +bias,gelu\\nx=x\\nw=w1\\ny=h\""));
  free(dot);
  tpg_plan_destroy(f.p);

  /* TP=2 rank 1, no gather, SwiGLU without bias: w holds 2F rows. */
  fixture_make(&f, 2);
  d = column(&f, 1, 2);
  d.activation = TPG_ACT_SWIGLU;
  CHECK_OK(tpg_plan_add_linear(f.p, &d, NULL, 0, &n));
  dot = dot_of(f.p);
  CHECK(has(dot, "5x128x64 swiglu"));
  free(dot);
  CHECK(nodes_of(f.p) == 1 && colls_of(f.p) == 0);
  tpg_plan_destroy(f.p);

  /* TP=4 rank 2, gather, 5 tokens: GEMM into work's rank block, all-gather in
   * place on work, concat work -> yg; a chain. */
  fixture_make(&f, 4);
  d = column(&f, 2, 4);
  d.gather = 1;
  d.y = V(f.yg, 0);
  d.work = V(f.work, 0);
  d.bias = V(f.b1, 0);
  d.name = "qkv";
  CHECK_OK(tpg_plan_add_linear(f.p, &d, NULL, 0, &n));
  CHECK(nodes_of(f.p) == 3 && colls_of(f.p) == 1);
  dot = dot_of(f.p);
  CHECK(has(dot, "qkv.gemm\\n5x64x64 +bias\\nx=x\\nw=w1\\ny=work+640\"")); /* rank 2 * 5 tokens * 64 */
  CHECK(has(dot, "qkv.all_gather\\nn=320 (NCCL child graph)\\nsend=work+640\\nrecv=work\""));
  CHECK(has(dot, "qkv.concat\\n4 x [5, 64] -> [5, 256]\\ndst=yg\\nsrc=work\""));
  CHECK(has(dot, "n0 -> n1;") && has(dot, "n1 -> n2;"));
  free(dot);
  CHECK_OK(tpg_plan_validate(f.p));
  tpg_plan_destroy(f.p);

  /* TP=2 rank 1, gather, 1 token: rank blocks already are row-major, so the
   * all-gather writes y in place and no work view is needed. */
  fixture_make(&f, 2);
  d = column(&f, 1, 2);
  d.tokens = 1;
  d.gather = 1;
  d.y = V(f.yg, 0);
  CHECK_OK(tpg_plan_add_linear(f.p, &d, NULL, 0, &n));
  CHECK(nodes_of(f.p) == 2 && colls_of(f.p) == 1);
  dot = dot_of(f.p);
  CHECK(has(dot, "1x128x64 \\nx=x\\nw=w1\\ny=yg+128\""));
  CHECK(has(dot, "n=128 (NCCL child graph)\\nsend=yg+128\\nrecv=yg\""));
  free(dot);
  tpg_plan_destroy(f.p);
}

static void test_row_shapes(void) {
  fixture f;
  /* Rank 0 adds bias and residual in its epilogue, then the all-reduce. */
  fixture_make(&f, 2);
  tpg_linear_desc d = row(&f, 0, 2);
  d.bias = V(f.b2, 0);
  d.residual = V(f.res, 0);
  d.algo = TPG_ALGO_NCCL;
  tpg_node n;
  CHECK_OK(tpg_plan_add_linear(f.p, &d, NULL, 0, &n));
  CHECK(nodes_of(f.p) == 2 && colls_of(f.p) == 1);
  char *dot = dot_of(f.p);
  CHECK(has(dot, "5x64x128 +residual\\nx=h\\nw=w2\\ny=y\""));
  CHECK(has(dot, "all_reduce#1\\nn=320 (NCCL child graph)\\nsend=y\\nrecv=y\""));
  free(dot);
  /* Rank 1 of the same layer: a plain partial, the same collective. */
  d.rank = 1;
  CHECK_OK(tpg_plan_add_linear(f.p, &d, &n, 1, &n));
  dot = dot_of(f.p);
  CHECK(has(dot, "5x64x128 \\nx=h"));
  CHECK(has(dot, "n1 -> n2;"));
  free(dot);
  /* The all-reduce algorithm is passed through: two-shot forced. */
  d.rank = 0;
  d.algo = TPG_ALGO_TWOSHOT;
  CHECK_OK(tpg_plan_add_linear(f.p, &d, &n, 1, &n));
  dot = dot_of(f.p);
  CHECK(has(dot, "n=320 (two-shot kernel node)"));
  free(dot);
  tpg_plan_destroy(f.p);
  /* TP=1: one GEMM with bias only; residual may be y itself (in place). */
  fixture_make(&f, 1);
  d = row(&f, 0, 1);
  d.bias = V(f.b2, 0);
  CHECK_OK(tpg_plan_add_linear(f.p, &d, NULL, 0, &n));
  d.residual = d.y;
  CHECK_OK(tpg_plan_add_linear(f.p, &d, &n, 1, &n));
  CHECK(nodes_of(f.p) == 2 && colls_of(f.p) == 0);
  dot = dot_of(f.p);
  CHECK(has(dot, "5x64x256 +bias") && has(dot, "5x64x256 +residual"));
  free(dot);
  tpg_plan_destroy(f.p);
}

/* An attention-projection-like pair, as in the header's example, after
 * another node, twice (a stack): out aliases deps. */
static void test_pair_stack(void) {
  fixture f;
  fixture_make(&f, 2);
  tpg_node n;
  CHECK_OK(tpg_plan_add_memset(f.p, V(f.y, 0), 0, 8, NULL, 0, &n));
  for (int l = 0; l < 2; l++) {
    tpg_linear_desc up = column(&f, 1, 2);
    up.activation = TPG_ACT_GELU;
    up.bias = V(f.b1, 0);
    tpg_linear_desc down = row(&f, 1, 2);
    down.bias = V(f.b2, 0);
    down.residual = V(f.x, 0);
    tpg_node before = n;
    CHECK_OK(tpg_plan_add_linear(f.p, &up, &n, 1, &n));
    CHECK(n != before && n != 0);
    CHECK_OK(tpg_plan_add_linear(f.p, &down, &n, 1, &n));
  }
  CHECK(nodes_of(f.p) == 1 + 2 * 3 && colls_of(f.p) == 2);
  char *dot = dot_of(f.p);
  CHECK(has(dot, "n0 -> n1;") && has(dot, "n1 -> n2;") && has(dot, "n2 -> n3;") && has(dot, "n5 -> n6;"));
  free(dot);
  CHECK_OK(tpg_plan_validate(f.p));
  tpg_plan_destroy(f.p);
}

/* Every refusal names its argument, and the plan keeps its nodes. */
static void test_refusals(void) {
  fixture f;
  fixture_make(&f, 2);
  tpg_plan *p = f.p;
  tpg_node n0;
  CHECK_OK(tpg_plan_add_empty(p, NULL, 0, &n0));
  const tpg_linear_desc C = column(&f, 1, 2), R = row(&f, 1, 2);
  tpg_linear_desc d;
  tpg_node out = 77;
#define BAD(needle)                                                                 \
  do {                                                                              \
    out = 77;                                                                       \
    CHECK_ST(tpg_plan_add_linear(p, &d, &n0, 1, &out), TPG_ERROR_INVALID_ARGUMENT, needle); \
    CHECK(out == 0 && nodes_of(p) == 1);                                            \
  } while (0)
  CHECK_ST(tpg_plan_add_linear(NULL, &C, NULL, 0, &out), TPG_ERROR_INVALID_ARGUMENT, "tpg_plan_add_linear: plan is NULL");
  CHECK(out == 0);
  CHECK_ST(tpg_plan_add_linear(p, NULL, NULL, 0, &out), TPG_ERROR_INVALID_ARGUMENT, "desc is NULL");
  d = C; d.size = 8; BAD("desc->size is 8");
  d = C; d.kind = (tpg_linear_kind)5; BAD("desc->kind is 5");
  d = C; d.nranks = 0; BAD("desc->nranks is 0");
  d = C; d.rank = 2; BAD("desc->rank is 2: expected 0..1");
  d = C; d.rank = -1; BAD("desc->rank is -1");
  d = C; d.tokens = 0; BAD("desc->tokens is 0");
  d = C; d.dtype = TPG_F32; BAD("desc->dtype");
  d = C; d.activation = (tpg_activation)9; BAD("desc->activation is 9");
  d = C; d.algo = (tpg_collective_algo)7; BAD("desc->algo is 7");
  d = C; d.gather = 2; BAD("desc->gather is 2");
  d = C; d.in_features = 0; BAD("desc->in_features is 0");
  d = C; d.out_features = 4; BAD("desc->out_features is 4");
  d = C; d.out_features = 255; BAD("desc->out_features 255 does not split evenly over 2 ranks");
  d = C; d.out_features = 264; BAD("desc->out_features / nranks = 132 is not a multiple of 8");
  d = C; d.in_features = 68; BAD("desc->in_features is 68: expected a multiple of 8");
  d = R; d.in_features = 255; BAD("desc->in_features 255 does not split evenly");
  d = R; d.in_features = 264; BAD("desc->in_features / nranks = 132");
  d = R; d.out_features = 60; BAD("desc->out_features is 60");
  d = C; d.algo = TPG_ALGO_ONESHOT; BAD("all-gather, which always uses NCCL");
  d = C; d.algo = TPG_ALGO_TWOSHOT; BAD("TPG_ALGO_TWOSHOT for a column-parallel layer");
  d = R; d.activation = TPG_ACT_GELU; BAD("desc->activation is 1 for a row-parallel layer");
  d = R; d.gather = 1; BAD("desc->gather is 1 for a row-parallel layer");
  /* views */
  d = C; d.x = V(0, 0); BAD("desc->x.slot is 0");
  d = C; d.x = V(f.x, 8); BAD("desc->x: elements");
  d = C; d.x = V(f.x, 4); BAD("desc->x: offset 4 of slot \"x\" is not 16-byte aligned");
  d = C; d.x = V(f.f32, 0); BAD("desc->x: slot \"f32\" holds f32: expected bf16");
  d = C; d.x = V(f.xh, 0); BAD("desc->x: slot \"xh\" is host memory");
  d = C; d.w = V(f.w2, 0); d.activation = TPG_ACT_SWIGLU; BAD("desc->w: elements");
  d = C; d.y = V(f.x1, 0); BAD("desc->y: elements");
  d = C; d.gather = 1; BAD("desc->y: elements"); /* gathered y is [T, out] */
  d = C; d.activation = TPG_ACT_SILU; BAD("desc->bias.slot is 0 with desc->activation TPG_ACT_SILU");
  d = C; d.bias = V(f.b2, 0); BAD("desc->bias: elements"); /* [64] is too short for [128]: needs F */
  d = C; d.bias = V(f.b1, 0); d.activation = TPG_ACT_SWIGLU; d.bias.offset = 8; BAD("desc->bias: elements");
  d = C; d.residual = V(f.res, 0); BAD("only TPG_LINEAR_ROW adds a residual");
  d = R; d.residual = V(f.x1, 0); BAD("desc->residual: elements");
  d = R; d.y = V(f.yg, 0); d.residual = V(f.yg, 8); BAD("desc->residual overlaps desc->y");
  d = R; d.y = V(f.yg, 0); d.x = V(f.yg, 160); BAD("desc->y overlaps desc->x"); /* x [160, 800), y [0, 320) */
  d = C; d.gather = 1; d.y = V(f.yg, 0); BAD("desc->work.slot is 0: a gathered column-parallel layer over 2 ranks "
                                              "with 5 tokens needs a work view of tokens * out_features = 1280");
  d = C; d.gather = 1; d.y = V(f.yg, 0); d.work = V(f.work, 8); BAD("desc->work: elements");
  d = C; d.gather = 1; d.y = V(f.work, 0); d.work = V(f.work, 0); BAD("desc->work overlaps");
  d = C; d.name = ""; BAD("desc->name is empty");
  /* deps are checked by the first node; the message still names this call */
  d = C;
  tpg_node bogus = n0 + 99;
  CHECK_ST(tpg_plan_add_linear(p, &d, &bogus, 1, &out), TPG_ERROR_INVALID_ARGUMENT,
           "tpg_plan_add_linear: deps[0]");
  CHECK(nodes_of(p) == 1);
  CHECK_ST(tpg_plan_add_linear(p, &d, NULL, 1, &out), TPG_ERROR_INVALID_ARGUMENT, "deps is NULL");
  /* a fine call after all that; out may be NULL */
  CHECK_OK(tpg_plan_add_linear(p, &d, &n0, 1, NULL));
  CHECK(nodes_of(p) == 2);
#undef BAD
  tpg_plan_destroy(p);
}

/* The row layer whose all-reduce finishes the block (tpg_plan_add_linear_norm):
 * the GEMM writes the partial sums, the all-reduce adds bias and residual
 * once, updates the residual in place and applies the norm; refusals by name,
 * the plan unchanged after each. */
static void test_linear_norm(void) {
  fixture f;
  fixture_make(&f, 2);
  tpg_slot part;
  CHECK_OK(tpg_plan_add_slot(f.p, "part", TPG_BF16, TPG_MEM_SCRATCH, (size_t)T * H, &part));
  tpg_linear_desc d = row(&f, 1, 2);
  d.residual = V(f.res, 0);
  d.bias = V(f.b2, 0);
  d.name = "o";
  tpg_linear_norm e = TPG_LINEAR_NORM_INIT;
  e.partial = V(part, 0);
  e.residual_out = V(f.res, 0);
  e.norm_weight = V(f.x1, 0);
  e.norm_eps = 1e-5f;
  tpg_node n = 0;
  CHECK_OK(tpg_plan_add_linear_norm(f.p, &d, &e, NULL, 0, &n));
  CHECK(n != 0 && nodes_of(f.p) == 2 && colls_of(f.p) == 1);
  char *dot = dot_of(f.p);
  CHECK(has(dot, "o.gemm\\n5x64x128 \\nx=h\\nw=w2\\ny=part\""));
  CHECK(has(dot, "o.all_reduce\\nn=320 (AUTO: our kernel node or NCCL)\\nsend=part\\nrecv=y\\nepilogue hidden=64"
                 "\\nbias=b2\\nresidual=res\\nresidual_out=res\\nnorm_weight=x1\""));
  CHECK(has(dot, "n0 -> n1;"));
  free(dot);
  /* Rank 0 alike: bias and residual are the epilogue's, not rank 0's GEMM's. */
  d.rank = 0;
  CHECK_OK(tpg_plan_add_linear_norm(f.p, &d, &e, &n, 1, &n));
  dot = dot_of(f.p);
  CHECK(!has_quiet(dot, "+residual") && !has_quiet(dot, "+bias"));
  free(dot);
  CHECK_OK(tpg_plan_validate(f.p));
  tpg_plan_destroy(f.p);

  /* One rank, no bias, no residual_out: still the GEMM and the all-reduce
   * node (the epilogue's kernel alone at create), no ranks requirement. */
  fixture_make(&f, 1);
  CHECK_OK(tpg_plan_add_slot(f.p, "part", TPG_BF16, TPG_MEM_SCRATCH, (size_t)T * H, &part));
  d = row(&f, 0, 1);
  d.residual = V(f.res, 0);
  e = (tpg_linear_norm)TPG_LINEAR_NORM_INIT;
  e.partial = V(part, 0);
  e.norm_weight = V(f.x1, 0);
  CHECK_OK(tpg_plan_add_linear_norm(f.p, &d, &e, NULL, 0, NULL));
  CHECK(nodes_of(f.p) == 2 && colls_of(f.p) == 1);
  dot = dot_of(f.p);
  CHECK(has(dot, "5x64x256 \\nx=h\\nw=w2\\ny=part\"") && has(dot, "epilogue hidden=64\\nresidual=res\\nnorm_weight=x1"));
  free(dot);
  /* No epilogue view at all: a plain all-reduce of partial into y. */
  e.norm_weight = V(0, 0);
  d.residual = V(0, 0);
  CHECK_OK(tpg_plan_add_linear_norm(f.p, &d, &e, NULL, 0, NULL));
  dot = dot_of(f.p);
  CHECK(has(dot, "send=part\\nrecv=y\""));
  free(dot);
  tpg_plan_destroy(f.p);

  fixture_make(&f, 2);
  tpg_plan *p = f.p;
  CHECK_OK(tpg_plan_add_slot(p, "part", TPG_BF16, TPG_MEM_SCRATCH, (size_t)T * H, &part));
  const int before = nodes_of(p);
  const tpg_linear_desc D0 = row(&f, 1, 2);
  tpg_linear_norm E0 = TPG_LINEAR_NORM_INIT;
  E0.partial = V(part, 0);
  E0.norm_weight = V(f.x1, 0);
  tpg_node out = 77;
#define BADN(needle)                                                                              \
  do {                                                                                            \
    out = 77;                                                                                     \
    CHECK_ST(tpg_plan_add_linear_norm(p, &d, &e, NULL, 0, &out), TPG_ERROR_INVALID_ARGUMENT, needle); \
    CHECK(out == 0 && nodes_of(p) == before);                                                     \
  } while (0)
  CHECK_ST(tpg_plan_add_linear_norm(NULL, &D0, &E0, NULL, 0, &out), TPG_ERROR_INVALID_ARGUMENT,
           "tpg_plan_add_linear_norm: plan is NULL");
  d = D0; e = E0; d.kind = TPG_LINEAR_COLUMN; d.x = V(f.x, 0); d.w = V(f.w1, 0); d.y = V(f.h, 0);
  BADN("expected TPG_LINEAR_ROW");
  d = D0;
  out = 77;
  CHECK_ST(tpg_plan_add_linear_norm(p, &d, NULL, NULL, 0, &out), TPG_ERROR_INVALID_ARGUMENT, "norm is NULL");
  CHECK(out == 0);
  d = D0; e = E0; e.size = 4; BADN("norm->size is 4");
  d = D0; e = E0; d.in_features = 255; BADN("desc->in_features 255 does not split evenly");
  d = D0; e = E0; e.partial = V(0, 0); BADN("norm->partial.slot is 0");
  d = D0; e = E0; e.partial = V(f.x1, 0); BADN("norm->partial: elements");
  d = D0; e = E0; e.partial = V(f.f32, 0); BADN("norm->partial: slot \"f32\" holds f32");
  d = D0; e = E0; e.norm_weight = V(f.x1, 8); BADN("norm->norm_weight: elements");
  d = D0; e = E0; e.norm_weight = V(f.xh, 0); BADN("norm->norm_weight: slot \"xh\" is host memory");
  d = D0; e = E0; e.norm_weight = V(f.res, 0); d.residual = V(f.res, 0); e.norm_eps = -1.0f;
  BADN("norm->norm_eps is -1: expected a finite value >= 0");
  d = D0; e = E0; e.norm_eps = 0.0f / 0.0f; BADN("nan: expected a finite value >= 0");
  d = D0; e = E0; e.partial = V(f.y, 0); BADN("norm->partial overlaps desc->y");
  d = D0; e = E0; d.residual = V(f.yg, 0); e.residual_out = V(f.yg, 8); BADN("norm->residual_out overlaps "
                                                                            "desc->residual in slot");
  d = D0; e = E0; d.residual = V(f.y, 0); BADN("desc->residual overlaps desc->y");
  d = D0; e = E0; e.residual_out = V(f.y, 0); BADN("norm->residual_out overlaps desc->y");
  d = D0; e = E0; e.norm_weight = V(f.y, 8); BADN("norm->norm_weight overlaps desc->y");
  d = D0; e = E0; d.name = ""; BADN("desc->name is empty");
#undef BADN
  CHECK_OK(tpg_plan_add_linear_norm(p, &D0, &E0, NULL, 0, NULL));
  CHECK(nodes_of(p) == before + 2);
  tpg_plan_destroy(p);
}

static void test_concat(void) {
  tpg_plan *p;
  tpg_slot a, b, h, f;
  CHECK_OK(tpg_plan_create(&p));
  CHECK_OK(tpg_plan_add_slot(p, "a", TPG_BF16, TPG_MEM_DEVICE, 3 * 5 * 7, &a));
  CHECK_OK(tpg_plan_add_slot(p, "b", TPG_BF16, TPG_MEM_SCRATCH, 3 * 5 * 7, &b));
  CHECK_OK(tpg_plan_add_slot(p, "h", TPG_BF16, TPG_MEM_HOST, 3 * 5 * 7, &h));
  CHECK_OK(tpg_plan_add_slot(p, "f", TPG_F32, TPG_MEM_DEVICE, 2 * 3 * 5 * 7, &f));
  tpg_node n = 5;
  CHECK_OK(tpg_plan_add_concat_cols(p, V(a, 0), V(b, 0), 3, 5, 7, NULL, 0, &n)); /* odd sizes are fine */
  CHECK(n != 0);
  CHECK_OK(tpg_plan_add_concat_cols(p, V(f, 0), V(f, 105), 3, 5, 7, &n, 1, &n)); /* f32, one slot, disjoint */
  CHECK_ST(tpg_plan_add_concat_cols(NULL, V(a, 0), V(b, 0), 3, 5, 7, NULL, 0, &n), TPG_ERROR_INVALID_ARGUMENT,
           "tpg_plan_add_concat_cols: plan is NULL");
  CHECK(n == 0);
  CHECK_ST(tpg_plan_add_concat_cols(p, V(a, 0), V(b, 0), 0, 5, 7, NULL, 0, NULL), TPG_ERROR_INVALID_ARGUMENT,
           "blocks is 0");
  CHECK_ST(tpg_plan_add_concat_cols(p, V(a, 0), V(b, 0), 3, -1, 7, NULL, 0, NULL), TPG_ERROR_INVALID_ARGUMENT,
           "rows is -1");
  CHECK_ST(tpg_plan_add_concat_cols(p, V(a, 0), V(b, 0), 3, 5, 0, NULL, 0, NULL), TPG_ERROR_INVALID_ARGUMENT,
           "cols is 0");
  CHECK_ST(tpg_plan_add_concat_cols(p, V(a, 0), V(b, 0), 1 << 30, 1 << 30, 1 << 30, NULL, 0, NULL),
           TPG_ERROR_INVALID_ARGUMENT, "overflows");
  CHECK_ST(tpg_plan_add_concat_cols(p, V(a, 1), V(b, 0), 3, 5, 7, NULL, 0, NULL), TPG_ERROR_INVALID_ARGUMENT,
           "dst: elements");
  CHECK_ST(tpg_plan_add_concat_cols(p, V(a, 0), V(b, 1), 3, 5, 7, NULL, 0, NULL), TPG_ERROR_INVALID_ARGUMENT,
           "src: elements");
  CHECK_ST(tpg_plan_add_concat_cols(p, V(h, 0), V(b, 0), 3, 5, 7, NULL, 0, NULL), TPG_ERROR_INVALID_ARGUMENT,
           "dst: slot \"h\" is host memory");
  CHECK_ST(tpg_plan_add_concat_cols(p, V(a, 0), V(f, 0), 3, 5, 7, NULL, 0, NULL), TPG_ERROR_INVALID_ARGUMENT,
           "src: slot \"f\" holds f32: expected bf16");
  CHECK_ST(tpg_plan_add_concat_cols(p, V(f, 0), V(f, 100), 3, 5, 7, NULL, 0, NULL), TPG_ERROR_INVALID_ARGUMENT,
           "overlap");
  CHECK(nodes_of(p) == 2);
  char *dot = dot_of(p);
  CHECK(has(dot, "concat_cols#0\\n3 x [5, 7] -> [5, 21]\\ndst=a\\nsrc=b\""));
  free(dot);
  CHECK_OK(tpg_plan_validate(p));
  tpg_plan_destroy(p);
}

/* Sharding checks its arguments before it needs the driver (none here). */
static void test_shard_args(void) {
  tpg_linear_desc d = TPG_LINEAR_DESC_INIT;
  d.kind = TPG_LINEAR_COLUMN; d.nranks = 2; d.rank = 1; d.in_features = 64; d.out_features = 256;
  char buf[64] __attribute__((aligned(16)));
  tpg_linear_whole w = {buf, NULL, NULL, NULL};
  tpg_linear_part o = {buf, NULL};
  CHECK_ST(tpg_linear_shard(NULL, 0, &w, &o, NULL), TPG_ERROR_INVALID_ARGUMENT, "tpg_linear_shard: desc is NULL");
  tpg_linear_desc b = d;
  b.out_features = 101;
  CHECK_ST(tpg_linear_shard(&b, 0, &w, &o, NULL), TPG_ERROR_INVALID_ARGUMENT, "does not split evenly");
  CHECK_ST(tpg_linear_shard(&d, 0, NULL, &o, NULL), TPG_ERROR_INVALID_ARGUMENT, "whole is NULL");
  CHECK_ST(tpg_linear_shard(&d, 0, &w, NULL, NULL), TPG_ERROR_INVALID_ARGUMENT, "out is NULL");
  tpg_linear_whole wb = w;
  wb.w = NULL;
  CHECK_ST(tpg_linear_shard(&d, 0, &wb, &o, NULL), TPG_ERROR_INVALID_ARGUMENT, "whole->w is NULL");
  b = d;
  b.activation = TPG_ACT_SWIGLU;
  CHECK_ST(tpg_linear_shard(&b, 0, &w, &o, NULL), TPG_ERROR_INVALID_ARGUMENT, "whole->w_up is NULL");
  wb = w;
  wb.w_up = buf;
  CHECK_ST(tpg_linear_shard(&d, 0, &wb, &o, NULL), TPG_ERROR_INVALID_ARGUMENT, "whole->w_up is set");
  tpg_linear_part ob = o;
  ob.w = NULL;
  CHECK_ST(tpg_linear_shard(&d, 0, &w, &ob, NULL), TPG_ERROR_INVALID_ARGUMENT, "out->w is NULL");
  b = d;
  b.bias.slot = 3;
  CHECK_ST(tpg_linear_shard(&b, 0, &w, &o, NULL), TPG_ERROR_INVALID_ARGUMENT, "whole->bias is NULL");
  wb = w;
  wb.bias = buf;
  CHECK_ST(tpg_linear_shard(&b, 0, &wb, &o, NULL), TPG_ERROR_INVALID_ARGUMENT, "out->bias is NULL");
  b.activation = TPG_ACT_SWIGLU;
  wb.w_up = buf;
  CHECK_ST(tpg_linear_shard(&b, 0, &wb, &o, NULL), TPG_ERROR_INVALID_ARGUMENT, "whole->bias_up is NULL");
  wb = w;
  wb.bias = buf;
  CHECK_ST(tpg_linear_shard(&d, 0, &wb, &o, NULL), TPG_ERROR_INVALID_ARGUMENT,
           "whole->bias is set but desc->bias.slot is 0");
  /* Good arguments: only the driver is missing (or, on a GPU machine, the
   * pointers are not device memory). */
  tpg_status st = tpg_linear_shard(&d, 0, &w, &o, NULL);
  CHECK(st != TPG_SUCCESS && st != TPG_ERROR_INVALID_ARGUMENT);
}

/* The norm folded into the next linear (tpg_x_norm): one GEMM node with
 * y_ssq, the consumer's GEMM with x_norm, each refusal by its rule, and a
 * tpgraph 0.3 caller's shorter descs read as no fold. */
static void test_fold(void) {
  fixture f;
  fixture_make(&f, 1);
  tpg_plan *p = f.p;
  tpg_slot ssq, nw;
  CHECK_OK(tpg_plan_add_slot(p, "ssq", TPG_F32, TPG_MEM_SCRATCH, (size_t)T * TPG_NORM_FOLD_GROUPS(H), &ssq));
  CHECK_OK(tpg_plan_add_slot(p, "nw", TPG_BF16, TPG_MEM_DEVICE, (size_t)H, &nw));
  tpg_linear_desc d = row(&f, 0, 1);
  d.residual = V(f.res, 0);
  d.y = V(0, 0);
  tpg_linear_norm e = TPG_LINEAR_NORM_INIT;
  e.residual_out = d.residual, e.norm_weight = V(nw, 0), e.ssq = V(ssq, 0);
  tpg_node n;
  CHECK_OK(tpg_plan_add_linear_norm(p, &d, &e, NULL, 0, &n));
  tpg_linear_desc c = column(&f, 0, 1);
  c.in_features = H, c.x = d.residual, c.x_norm = (tpg_x_norm){e.ssq, e.norm_weight, 1e-5f};
  CHECK_OK(tpg_plan_add_linear(p, &c, &n, 1, &n));
  char *dot = dot_of(p);
  CHECK(nodes_of(p) == 2 && colls_of(p) == 0);
  CHECK(has(dot, "5x64x256 +residual\\nx=h\\nw=w2\\ny=res\\ny_ssq=ssq"));
  CHECK(has(dot, "x=res\\nw=w1\\ny=h\\nx_norm.ssq=ssq\\nx_norm.weight=nw"));
  free(dot);
  tpg_linear_desc b = d;
  tpg_linear_norm eb = e;
  eb.norm_weight = V(0, 0);
  CHECK_ST(tpg_plan_add_linear_norm(p, &b, &eb, NULL, 0, NULL), TPG_ERROR_INVALID_ARGUMENT, "norm->norm_weight.slot is 0");
  eb = e, eb.residual_out = V(0, 0);
  CHECK_ST(tpg_plan_add_linear_norm(p, &b, &eb, NULL, 0, NULL), TPG_ERROR_INVALID_ARGUMENT, "norm->residual_out.slot is 0");
  b.y = V(f.y, 0);
  CHECK_ST(tpg_plan_add_linear_norm(p, &b, &e, NULL, 0, NULL), TPG_ERROR_INVALID_ARGUMENT, "writes no y");
  tpg_linear_desc cb = c;
  cb.x_norm.weight = V(0, 0);
  CHECK_ST(tpg_plan_add_linear(p, &cb, NULL, 0, NULL), TPG_ERROR_INVALID_ARGUMENT, "x_norm.weight.slot is 0");
  cb = c, cb.x_norm.eps = -1.0f;
  CHECK_ST(tpg_plan_add_linear(p, &cb, NULL, 0, NULL), TPG_ERROR_INVALID_ARGUMENT, "x_norm.eps is -1");
  cb = c, cb.x_norm.ssq = V(nw, 0);
  CHECK_ST(tpg_plan_add_linear(p, &cb, NULL, 0, NULL), TPG_ERROR_INVALID_ARGUMENT, "x_norm.ssq");
  tpg_gemm_desc g = TPG_GEMM_DESC_INIT;
  g.m = 5, g.n = H, g.k = H, g.x = V(f.x, 0), g.w = V(f.w2, 0), g.y = V(f.y, 0);
  g.epilogue = TPG_EPILOGUE_SWIGLU, g.y_ssq = V(ssq, 0);
  CHECK_ST(tpg_plan_add_gemm(p, &g, NULL, 0, NULL), TPG_ERROR_INVALID_ARGUMENT, "y_ssq is set with epilogue 4");
  g.epilogue = TPG_EPILOGUE_NONE, g.y_ssq = V(0, 0), g.x_norm.weight = V(nw, 0);
  CHECK_ST(tpg_plan_add_gemm(p, &g, NULL, 0, NULL), TPG_ERROR_INVALID_ARGUMENT, "without x_norm.ssq");
  CHECK(nodes_of(p) == 2);
  /* a 0.3 caller: the descs end before the new fields */
  g.x_norm.weight = V(0, 0), g.size = offsetof(tpg_gemm_desc, y_ssq);
  CHECK_OK(tpg_plan_add_gemm(p, &g, NULL, 0, NULL));
  c = column(&f, 0, 1), c.size = offsetof(tpg_linear_desc, x_norm);
  CHECK_OK(tpg_plan_add_linear(p, &c, NULL, 0, NULL));
  tpg_plan_destroy(p);
  fixture_make(&f, 2);
  d = row(&f, 0, 2), d.residual = V(f.res, 0), d.y = V(0, 0);
  CHECK_OK(tpg_plan_add_slot(f.p, "ssq", TPG_F32, TPG_MEM_SCRATCH, (size_t)T * TPG_NORM_FOLD_GROUPS(H), &ssq));
  CHECK_OK(tpg_plan_add_slot(f.p, "nw", TPG_BF16, TPG_MEM_DEVICE, (size_t)H, &nw));
  e.residual_out = d.residual, e.norm_weight = V(nw, 0), e.ssq = V(ssq, 0);
  CHECK_ST(tpg_plan_add_linear_norm(f.p, &d, &e, NULL, 0, NULL), TPG_ERROR_INVALID_ARGUMENT, "one rank");
  d = row(&f, 0, 2), d.x_norm = (tpg_x_norm){V(ssq, 0), V(nw, 0), 1e-5f};
  CHECK_ST(tpg_plan_add_linear(f.p, &d, NULL, 0, NULL), TPG_ERROR_INVALID_ARGUMENT, "whole rows");
  e = (tpg_linear_norm)TPG_LINEAR_NORM_INIT;
  e.partial = V(f.work, 0), e.size = offsetof(tpg_linear_norm, ssq);
  d = row(&f, 0, 2);
  CHECK_OK(tpg_plan_add_linear_norm(f.p, &d, &e, NULL, 0, NULL));
  tpg_plan_destroy(f.p);
}

int main(void) {
  test_column_shapes();
  test_row_shapes();
  test_pair_stack();
  test_refusals();
  test_linear_norm();
  test_fold();
  test_concat();
  test_shard_args();
  return TPG_TEST_END();
}
