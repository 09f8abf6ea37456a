/* gemm_cublaslt_fake_test.c - the cuBLASLt GEMM family on the stand-in
 * driver and cuBLASLt (tests/fake), which compute: the family behind the
 * selector's operations table, and its nodes built, run, rebound and failed.
 *
 *  - the selector with the family present: AUTO's stated band takes it
 *    (M > 32, sm_90; SwiGLU from M = 128, its bf16 product in the
 *    workspace), not for SiLU or M <= 32, nor off sm_90; TPG_GEMM_FAMILY=cublaslt takes it wherever it
 *    can run (also sm_80); its candidates come right after the heuristic,
 *    their names round-trip, the heuristic's answers and workspaces, and an
 *    answer it did not give is refused naming the count;
 *  - nodes of every epilogue it runs (none, bias, bias + GELU, the residual
 *    in place with a bias and apart without, the fp32 partial, SwiGLU with
 *    and without a bias: cuBLASLt's product, then tpg_lt_swiglu), in explicit,
 *    capture and eager mode: the product checked against an fp64 reference
 *    after the first launch and, after a rebind that moves x, w, y, bias and
 *    residual, against the new buffers (a child graph left with the old
 *    pointers writes the old ones: caught twice over, the old y must not
 *    change); a rebind of another node's slot captures nothing, one of this
 *    node's captures once and swaps the child in once;
 *  - the tuner's pick from a cache file ("cublaslt_a2": the 8 MiB answer),
 *    its workspace owned by the graph and counted in its info;
 *  - every driver and cuBLASLt call of a node's life failed in turn: nothing
 *    leaks (cuBLASLt's objects are live objects of the fake), no violation,
 *    every failure with a message;
 *  - graph sets: one graph per size runs cuBLASLt nodes, the plans of the
 *    context sharing one cuBLASLt handle; a retargeting set refuses them,
 *    naming the node, and leaks nothing.
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernels/tpg_kargs.h"
#include "lib/gemm/cublaslt.h"
#include "lib/gemm/select.h"
#include "tests/fake/tpgfake.h"
#include "tests/fake/fake_clean.h"
#include "tests/tpg_test.h"
#include "tests/cpu/bf16_host.h"

static tpg_view V(tpg_slot s) { return (tpg_view){s, 0, 0}; }

/* ---- the selector with the family present ----------------------------------- */

static int family_of(int m, int n, int k, int epi, int arch, int family) {
  tpg_gemm_problem p = tpg_gemm_problem_make(m, n, k, TPG_KDT_BF16, epi, arch, 132);
  tpg_gemm_variant v;
  char why[300];
  if (tpg_gemm_select_rule_variant(&p, family, &v, why, sizeof why)) return -1;
  return tpg_gemm_variant_family(&v);
}

static void selector(void) {
  char why[300], name[64];
  tpg_gemm_variant list[TPG_GEMM_MAX_CANDIDATES], v;
  tpg_kernel_launch l;
  tpg_tma_encode xe, we;
  tpgfake_ctx_push(); /* the heuristic runs in the device's context, as the graph's calls do */
  CHECK(tpg_gemm_family_available(TPG_GEMM_FAMILY_CUBLASLT, why, sizeof why) == 0);
  CHECK(family_of(128, 4096, 4096, TPG_EPI_BIAS, 90, TPG_GEMM_FAMILY_AUTO) == TPG_GEMM_FAMILY_CUBLASLT);
  CHECK(family_of(1024, 14336, 4096, TPG_EPI_BIAS_GELU, 90, TPG_GEMM_FAMILY_AUTO) == TPG_GEMM_FAMILY_CUBLASLT);
  /* SwiGLU: AUTO's band M >= 128; forced, any M it can hold */
  CHECK(family_of(127, 4096, 4096, TPG_EPI_SWIGLU, 90, TPG_GEMM_FAMILY_AUTO) == TPG_GEMM_FAMILY_OURS);
  CHECK(family_of(128, 4096, 4096, TPG_EPI_SWIGLU, 90, TPG_GEMM_FAMILY_AUTO) == TPG_GEMM_FAMILY_CUBLASLT);
  CHECK(family_of(8192, 4096, 4096, TPG_EPI_SWIGLU, 90, TPG_GEMM_FAMILY_AUTO) == TPG_GEMM_FAMILY_CUBLASLT);
  CHECK(family_of(40, 4096, 4096, TPG_EPI_SWIGLU, 90, TPG_GEMM_FAMILY_CUBLASLT) == TPG_GEMM_FAMILY_CUBLASLT);
  CHECK(family_of(16384, 8192, 4096, TPG_EPI_SWIGLU, 90, TPG_GEMM_FAMILY_CUBLASLT) == TPG_GEMM_FAMILY_CUBLASLT);
  CHECK(family_of(16392, 8192, 4096, TPG_EPI_SWIGLU, 90, TPG_GEMM_FAMILY_CUBLASLT) == TPG_GEMM_FAMILY_OURS); /* 512 MiB */
  CHECK(family_of(128, 4096, 4096, TPG_EPI_BIAS_SILU, 90, TPG_GEMM_FAMILY_AUTO) != TPG_GEMM_FAMILY_CUBLASLT);
  CHECK(family_of(16, 4096, 4096, TPG_EPI_NONE, 90, TPG_GEMM_FAMILY_AUTO) == TPG_GEMM_FAMILY_OURS);
  CHECK(family_of(32, 2048, 4096, TPG_EPI_NONE, 90, TPG_GEMM_FAMILY_AUTO) == TPG_GEMM_FAMILY_OURS);
  CHECK(family_of(33, 2048, 4096, TPG_EPI_NONE, 90, TPG_GEMM_FAMILY_AUTO) == TPG_GEMM_FAMILY_CUBLASLT);
  CHECK(family_of(4096, 2048, 4096, TPG_EPI_BIAS, 90, TPG_GEMM_FAMILY_AUTO) == TPG_GEMM_FAMILY_CUBLASLT);
  CHECK(family_of(128, 4096, 4096, TPG_EPI_NONE, 80, TPG_GEMM_FAMILY_AUTO) == TPG_GEMM_FAMILY_OURS);
  CHECK(family_of(128, 4096, 4096, TPG_EPI_NONE, 80, TPG_GEMM_FAMILY_CUBLASLT) == TPG_GEMM_FAMILY_CUBLASLT);
  CHECK(family_of(8, 256, 64, TPG_EPI_F32_PARTIAL, 90, TPG_GEMM_FAMILY_CUBLASLT) == TPG_GEMM_FAMILY_CUBLASLT);
  CHECK(family_of(128, 4096, 4096, TPG_EPI_BIAS_SILU, 90, TPG_GEMM_FAMILY_CUBLASLT) == TPG_GEMM_FAMILY_OURS);
  CHECK(family_of(128, 4096, 4096, TPG_EPI_BIAS, 90, TPG_GEMM_FAMILY_OURS) == TPG_GEMM_FAMILY_OURS);
  {
    tpg_gemm_problem p = tpg_gemm_problem_make(128, 4096, 4096, TPG_KDT_BF16, TPG_EPI_BIAS, 90, 132);
    const int nc = tpg_gemm_candidates(&p, list, TPG_GEMM_MAX_CANDIDATES);
    int lt = 0;
    CHECK(nc > TPG_LT_ALGOS + 1 && list[0].kind == TPG_GEMM_VAR_HEURISTIC);
    for (int i = 0; i < nc; i++) {
      tpg_gemm_variant back;
      if (list[i].kind != TPG_GEMM_VAR_CUBLASLT) continue;
      CHECK(i == ++lt); /* right after the heuristic */
      CHECK(tpg_gemm_variant_name(&list[i], name, sizeof name) == 0 && tpg_gemm_variant_parse(name, &back) == 0 &&
            !memcmp(&back, &list[i], sizeof back));
      CHECK(tpg_gemm_variant_family(&list[i]) == TPG_GEMM_FAMILY_CUBLASLT);
      const int rc = tpg_gemm_select_variant(&p, &list[i], &l, &xe, &we, why, sizeof why);
      /* the fake's heuristic gives three answers: 0, 1 MiB and 8 MiB of workspace */
      if (list[i].lt_algo < 3)
        CHECK(rc == 0 && l.family == TPG_GEMM_FAMILY_CUBLASLT && l.lt_algo == list[i].lt_algo && xe.rank == 0 &&
              l.workspace_bytes == (list[i].lt_algo == 0 ? 0u : list[i].lt_algo == 1 ? 1u << 20 : 8u << 20));
      else
        CHECK(rc != 0 && strstr(why, "cublaslt_a3") && strstr(why, "3 answers"));
    }
    CHECK(lt == TPG_LT_ALGOS);
    p.epilogue = TPG_EPI_SWIGLU; /* its bf16 product after cuBLASLt's own workspace */
    CHECK(tpg_gemm_variant_parse("cublaslt_a1", &v) == 0 && v.lt_algo == 1);
    CHECK(tpg_gemm_select_variant(&p, &v, &l, &xe, &we, why, sizeof why) == 0 &&
          l.workspace_bytes == (1u << 20) + (size_t)128 * 2 * 4096 * 2);
    p.epilogue = TPG_EPI_BIAS_SILU; /* none where it cannot run */
    const int ns = tpg_gemm_candidates(&p, list, TPG_GEMM_MAX_CANDIDATES);
    for (int i = 0; i < ns; i++) CHECK(list[i].kind != TPG_GEMM_VAR_CUBLASLT);
    CHECK(tpg_gemm_variant_parse("cublaslt", &v) == 0 && v.lt_algo == 0);
    CHECK(tpg_gemm_select_variant(&p, &v, &l, &xe, &we, why, sizeof why) != 0 && strstr(why, "epilogue=3"));
  }
  CHECK(tpg_gemm_variant_parse("cublaslt_a0", &v) != 0 && tpg_gemm_variant_parse("cublaslt_a4", &v) != 0 &&
        tpg_gemm_variant_parse("cublaslt_a12", &v) != 0 && tpg_gemm_variant_parse("cublaslt_", &v) != 0);
  CHECK(tpg_gemm_family_parse("cublaslt") == TPG_GEMM_FAMILY_CUBLASLT && tpg_gemm_family_parse("3") == 3 &&
        tpg_gemm_family_parse("cublas") == -1);
  tpgfake_ctx_pop();
}

/* ---- nodes --------------------------------------------------------------- */

typedef struct lcase {
  int m, n, k;
  tpg_epilogue epi;
  int bias;     /* a bias view (RESIDUAL: optional) */
  int in_place; /* RESIDUAL: the residual is y */
  int reserve;  /* sm_reserve: SMs left to a collective beside the node */
} lcase;

/* Everything one run of a case holds. */
typedef struct bufs {
  uint16_t *x[2], *w[2], *b[2], *r[2];
  void *y[2];
  void *z;
} bufs;

/* W's rows: 2N with SwiGLU (gate, then up), as is the bias. */
static size_t wrows(const lcase *c) { return (size_t)c->n * (c->epi == TPG_EPILOGUE_SWIGLU ? 2 : 1); }

static size_t ysize(const lcase *c) { return (size_t)c->m * c->n * (c->epi == TPG_EPILOGUE_F32_PARTIAL ? 4 : 2); }

static void bufs_free(bufs *B) {
  for (int i = 0; i < 2; i++) {
    tpgfake_free(B->x[i]);
    tpgfake_free(B->w[i]);
    tpgfake_free(B->b[i]);
    tpgfake_free(B->r[i]);
    tpgfake_free(B->y[i]);
  }
  tpgfake_free(B->z);
  memset(B, 0, sizeof *B);
}

static int bufs_make(const lcase *c, bufs *B) {
  const size_t xn = (size_t)c->m * c->k, wn = wrows(c) * c->k, yn = (size_t)c->m * c->n;
  memset(B, 0, sizeof *B);
  for (int i = 0; i < 2; i++) {
    B->x[i] = tpgfake_dev_alloc(0, xn * 2);
    B->w[i] = tpgfake_dev_alloc(0, wn * 2);
    B->b[i] = tpgfake_dev_alloc(0, wrows(c) * 2);
    B->r[i] = tpgfake_dev_alloc(0, yn * 2);
    B->y[i] = tpgfake_dev_alloc(0, ysize(c));
    if (!B->x[i] || !B->w[i] || !B->b[i] || !B->r[i] || !B->y[i]) return 1;
    fill_bf(B->x[i], xn, 11u + 7u * (unsigned)i, 2.0f);
    fill_bf(B->w[i], wn, 23u + 5u * (unsigned)i, 0.5f);
    fill_bf(B->b[i], wrows(c), 31u + (unsigned)i, 1.0f);
    fill_bf(B->r[i], yn, 47u + (unsigned)i, 1.0f);
    if (c->in_place) memcpy(B->y[i], B->r[i], yn * 2);
    else memset(B->y[i], 0xFF, ysize(c)); /* poison: NaN */
  }
  B->z = tpgfake_dev_alloc(0, 64);
  return !B->z;
}

/* Row nn of x w^T + b at row mm (fp64). */
static double dot(const lcase *c, const bufs *B, int i, int mm, int nn) {
  double s = 0;
  for (int q = 0; q < c->k; q++) s += fb(B->x[i][(size_t)mm * c->k + q]) * fb(B->w[i][(size_t)nn * c->k + q]);
  return c->bias ? s + fb(B->b[i][nn]) : s;
}

/* Worst |got - ref| / (1 + |ref|) of y = epi(x w^T + b + r) on buffer set i;
 * r: the residual as it was before the launch. */
static double max_err(const lcase *c, const bufs *B, int i, const uint16_t *r) {
  double worst = 0;
  for (int mm = 0; mm < c->m; mm++)
    for (int nn = 0; nn < c->n; nn++) {
      double s = dot(c, B, i, mm, nn);
      if (c->epi == TPG_EPILOGUE_SWIGLU) s = s / (1 + exp(-s)) * dot(c, B, i, mm, c->n + nn);
      if (c->epi == TPG_EPILOGUE_RESIDUAL) s += fb(r[(size_t)mm * c->n + nn]);
      if (c->epi == TPG_EPILOGUE_BIAS_GELU) s = 0.5 * s * (1 + tanh(0.7978845608 * (s + 0.044715 * s * s * s)));
      const size_t at = (size_t)mm * c->n + nn;
      const double got = c->epi == TPG_EPILOGUE_F32_PARTIAL ? ((const float *)B->y[i])[at]
                                                            : fb(((const uint16_t *)B->y[i])[at]);
      const double e = isfinite(got) ? fabs(got - s) / (1 + fabs(s)) : INFINITY;
      if (e > worst) worst = e;
    }
  return worst;
}

static tpg_status make_plan(const lcase *c, tpg_plan **out, tpg_slot s[6]) {
  tpg_plan *p = NULL;
  tpg_status st;
  const tpg_dtype ydt = c->epi == TPG_EPILOGUE_F32_PARTIAL ? TPG_F32 : TPG_BF16;
  *out = NULL;
  memset(s, 0, 6 * sizeof *s);
  if ((st = tpg_plan_create(&p)) != TPG_SUCCESS) return st;
  if ((st = tpg_plan_add_slot(p, "x", TPG_BF16, TPG_MEM_DEVICE, (size_t)c->m * c->k, &s[0])) ||
      (st = tpg_plan_add_slot(p, "w", TPG_BF16, TPG_MEM_DEVICE, wrows(c) * c->k, &s[1])) ||
      (st = tpg_plan_add_slot(p, "y", ydt, TPG_MEM_DEVICE, (size_t)c->m * c->n, &s[2])) ||
      (c->bias && (st = tpg_plan_add_slot(p, "b", TPG_BF16, TPG_MEM_DEVICE, wrows(c), &s[3]))) ||
      (c->epi == TPG_EPILOGUE_RESIDUAL && !c->in_place &&
       (st = tpg_plan_add_slot(p, "r", TPG_BF16, TPG_MEM_DEVICE, (size_t)c->m * c->n, &s[4]))) ||
      (st = tpg_plan_add_slot(p, "z", TPG_F32, TPG_MEM_DEVICE, 16, &s[5])))
    goto fail;
  tpg_gemm_desc d = TPG_GEMM_DESC_INIT;
  d.m = c->m, d.n = c->n, d.k = c->k, d.epilogue = c->epi, d.sm_reserve = c->reserve;
  d.x = V(s[0]), d.w = V(s[1]), d.y = V(s[2]);
  if (c->bias) d.bias = V(s[3]);
  if (c->epi == TPG_EPILOGUE_RESIDUAL) d.residual = V(c->in_place ? s[2] : s[4]);
  if ((st = tpg_plan_add_gemm(p, &d, NULL, 0, NULL)) || (st = tpg_plan_add_memset(p, V(s[5]), 0, 16, NULL, 0, NULL)))
    goto fail;
  *out = p;
  return TPG_SUCCESS;
fail:
  tpg_plan_destroy(p);
  return st;
}

/* The bindings of buffer set i. */
static int bind_set(const lcase *c, const bufs *B, int i, const tpg_slot s[6], tpg_binding *b) {
  int n = 0;
  b[n++] = (tpg_binding){s[0], B->x[i]};
  b[n++] = (tpg_binding){s[1], B->w[i]};
  b[n++] = (tpg_binding){s[2], B->y[i]};
  if (c->bias) b[n++] = (tpg_binding){s[3], B->b[i]};
  if (s[4]) b[n++] = (tpg_binding){s[4], B->r[i]};
  return n;
}

/* Counters a run compares (check). */
typedef struct counts {
  long captures, child_sets, matmuls, targeted;
} counts;
static counts now(void) {
  counts k = {tpgfake_counter(TPGFAKE_C_CAPTURES), tpgfake_counter(TPGFAKE_C_EXEC_CHILD),
              tpgfake_counter(TPGFAKE_C_LT_MATMUL), tpgfake_counter(TPGFAKE_C_LT_SM_TARGET)};
  return k;
}

/* After a rebind: only a move of this node's buffers captures again. */
static tpg_status rebind_checks(const lcase *c, tpg_graph *g, tpg_graph_mode mode, const bufs *B,
                                const tpg_slot s[6], int check) {
  tpg_binding bz = {s[5], B->z}, nb[6];
  counts k0 = now();
  tpg_status st = tpg_graph_rebind(g, &bz, 1);
  if (st) return st;
  if (check) CHECK(now().captures == k0.captures && now().child_sets == k0.child_sets);
  const int n = bind_set(c, B, 1, s, nb);
  k0 = now();
  if ((st = tpg_graph_rebind(g, nb, n))) return st;
  if (check && mode == TPG_MODE_EXPLICIT)
    CHECK(now().captures == k0.captures + 1 && now().child_sets == k0.child_sets + 1);
  return TPG_SUCCESS;
}

static tpg_status run(const lcase *c, tpg_graph_mode mode, int check, char *msg, size_t cap) {
  bufs B;
  tpg_plan *p = NULL;
  tpg_graph *g = NULL;
  tpg_slot s[6];
  tpg_binding bd[6];
  tpg_status st = TPG_SUCCESS;
  uint16_t *r0 = NULL, *r1 = NULL, *ykeep = NULL;
  msg[0] = '\0';
#define STEP(call)                                            \
  do {                                                        \
    if ((st = (call)) != TPG_SUCCESS) {                       \
      snprintf(msg, cap, "%s [%s]", tpg_last_error(), #call); \
      goto done;                                              \
    }                                                         \
  } while (0)
  if (bufs_make(c, &B) || !(r0 = malloc((size_t)c->m * c->n * 2)) || !(r1 = malloc((size_t)c->m * c->n * 2)) ||
      !(ykeep = malloc(ysize(c)))) {
    st = TPG_ERROR_OUT_OF_MEMORY;
    snprintf(msg, cap, "setup: out of memory");
    goto done;
  }
  memcpy(r0, c->in_place ? B.y[0] : B.r[0], (size_t)c->m * c->n * 2);
  memcpy(r1, c->in_place ? B.y[1] : B.r[1], (size_t)c->m * c->n * 2);
  STEP(make_plan(c, &p, s));
  {
    tpg_graph_config cfg = TPG_GRAPH_CONFIG_INIT;
    cfg.bindings = bd;
    cfg.nbindings = bind_set(c, &B, 0, s, bd);
    bd[cfg.nbindings++] = (tpg_binding){s[5], B.z};
    cfg.mode = mode;
    STEP(tpg_graph_create(p, &cfg, &g));
  }
  const counts k0 = now();
  STEP(tpg_graph_launch(g, NULL));
  if (check) {
    tpg_graph_info info;
    CHECK(max_err(c, &B, 0, r0) <= 1e-2);
    CHECK(now().matmuls == k0.matmuls + 1);
    CHECK(now().targeted == k0.targeted + (c->reserve > 0)); /* the SMs left to a collective, left */
    CHECK(tpg_graph_get_info(g, &info, sizeof info) == TPG_SUCCESS && info.gemm_cublaslt_nodes == 1 &&
          info.gemm_ours_nodes == 0 && info.kernel_nodes == 1);
  }
  memcpy(ykeep, B.y[0], ysize(c));
  if (mode != TPG_MODE_CAPTURE) { /* (a captured graph cannot be rebound) */
    STEP(rebind_checks(c, g, mode, &B, s, check));
    STEP(tpg_graph_launch(g, NULL));
    if (check) {
      CHECK(max_err(c, &B, 1, r1) <= 1e-2);
      CHECK(memcmp(ykeep, B.y[0], ysize(c)) == 0); /* the old y untouched */
    }
  }
done:
  if (st != TPG_SUCCESS && !msg[0]) snprintf(msg, cap, "%s", tpg_last_error());
  if (g && tpg_graph_destroy(g) != TPG_SUCCESS) tpg_graph_destroy(g);
  tpg_plan_destroy(p);
  bufs_free(&B);
  free(r0);
  free(r1);
  free(ykeep);
#undef STEP
  return st;
}

static const lcase kCases[] = {
    {40, 136, 72, TPG_EPILOGUE_NONE, 0, 0},      {24, 64, 128, TPG_EPILOGUE_BIAS, 1, 0},
    {33, 96, 64, TPG_EPILOGUE_BIAS_GELU, 1, 0},  {16, 72, 40, TPG_EPILOGUE_RESIDUAL, 1, 1},
    {8, 80, 48, TPG_EPILOGUE_RESIDUAL, 0, 0},    {12, 64, 56, TPG_EPILOGUE_F32_PARTIAL, 0, 0},
    {36, 48, 40, TPG_EPILOGUE_SWIGLU, 1, 0},     {9, 24, 32, TPG_EPILOGUE_SWIGLU, 0, 0},
    {40, 136, 72, TPG_EPILOGUE_NONE, 0, 0, 16},  {36, 48, 40, TPG_EPILOGUE_SWIGLU, 1, 0, 100},
};
static const tpg_graph_mode kModes[3] = {TPG_MODE_EXPLICIT, TPG_MODE_CAPTURE, TPG_MODE_EAGER};

/* Every driver and cuBLASLt call of one case's run failed in turn. */
static void fault_loop(const lcase *c, int md) {
  char msg[1024];
  tpgfake_reset();
  CHECK(run(c, kModes[md], 0, msg, sizeof msg) == TPG_SUCCESS);
  const long calls = tpgfake_calls();
  long bad = 0;
  for (long k = 1; k <= calls; k++) {
    tpgfake_reset();
    tpg_lt_cache_reset(); /* so that the heuristic's calls are failure points every time */
    tpgfake_fail_at(k);
    const tpg_status st = run(c, kModes[md], 0, msg, sizeof msg);
    char what[200];
    snprintf(what, sizeof what, "cuBLASLt GEMM node, epilogue %d, mode %d, fail call %ld (%s)", (int)c->epi, md, k,
             tpgfake_failed() ? tpgfake_failed() : "-");
    if (st != TPG_SUCCESS && (!msg[0] || strstr(msg, ": ") == NULL)) {
      fprintf(stderr, "%s: failed without a message\n", what);
      bad++;
    }
    if (!tpgfake_clean(what)) bad++;
  }
  printf("cuBLASLt GEMM node, epilogue %d, mode %d: %ld failure points, %ld bad\n", (int)c->epi, md, calls, bad);
  CHECK(bad == 0);
}

/* The tuner's pick from a file: the fake's 8 MiB answer, the graph's own workspace. */
static void tuned(void) {
  const lcase c = {40, 136, 72, TPG_EPILOGUE_BIAS, 1, 0};
  char path[] = "/tmp/tpg_lt_fake_XXXXXX", msg[1024];
  const int fd = mkstemp(path);
  FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
  CHECK(f != NULL);
  if (!f) return;
  fprintf(f, "tpgraph-gemm-tune 1\n%d %d %d 2 %d 132 90 cublaslt_a2 10.0\nend 1\n", c.m, c.n, c.k, (int)c.epi);
  fclose(f);
  setenv("TPG_GEMM_TUNE", "1", 1);
  setenv("TPG_GEMM_TUNE_CACHE", path, 1);
  setenv("TPG_GEMM_FAMILY", "auto", 1);
  {
    bufs B;
    tpg_plan *p = NULL;
    tpg_graph *g = NULL;
    tpg_slot s[6];
    tpg_binding bd[6];
    tpg_graph_info info;
    CHECK(bufs_make(&c, &B) == 0 && make_plan(&c, &p, s) == TPG_SUCCESS);
    tpg_graph_config cfg = TPG_GRAPH_CONFIG_INIT;
    cfg.bindings = bd;
    cfg.nbindings = bind_set(&c, &B, 0, s, bd);
    bd[cfg.nbindings++] = (tpg_binding){s[5], B.z};
    CHECK_OK(tpg_graph_create(p, &cfg, &g));
    CHECK_OK(tpg_graph_launch(g, NULL));
    CHECK(g && tpg_graph_get_info(g, &info, sizeof info) == TPG_SUCCESS && info.gemm_cublaslt_nodes == 1 &&
          info.gemm_tune_cached == 1 && info.workspace_bytes >= (size_t)8 << 20);
    CHECK(max_err(&c, &B, 0, B.r[0]) <= 1e-2);
    if (g) tpg_graph_destroy(g);
    tpg_plan_destroy(p);
    bufs_free(&B);
  }
  (void)msg;
  unsetenv("TPG_GEMM_TUNE");
  unsetenv("TPG_GEMM_TUNE_CACHE");
  unlink(path);
  CHECK(tpgfake_clean("tuned cuBLASLt node"));
}

/* Graph sets: one graph per size takes cuBLASLt nodes; a retargeting set
 * refuses them naming the node (a child graph whose kernels follow its M). */
typedef struct set_ctx {
  tpg_slot s[3];
  tpg_binding b[3];
} set_ctx;
enum { SET_N = 136, SET_K = 72, SET_MAX = 40 };

static tpg_status set_build(void *user, int size, tpg_graph_set_step *out) {
  set_ctx *c = user;
  tpg_plan *p = NULL;
  tpg_status st = tpg_plan_create(&p);
  if (st) return st;
  out->plan = p; /* the set's from here on */
  if ((st = tpg_plan_add_slot(p, "x", TPG_BF16, TPG_MEM_DEVICE, (size_t)SET_MAX * SET_K, &c->s[0])) ||
      (st = tpg_plan_add_slot(p, "w", TPG_BF16, TPG_MEM_DEVICE, (size_t)SET_N * SET_K, &c->s[1])) ||
      (st = tpg_plan_add_slot(p, "y", TPG_BF16, TPG_MEM_DEVICE, (size_t)SET_MAX * SET_N, &c->s[2])))
    return st;
  tpg_gemm_desc d = TPG_GEMM_DESC_INIT;
  d.m = size, d.n = SET_N, d.k = SET_K;
  d.x = V(c->s[0]), d.w = V(c->s[1]), d.y = V(c->s[2]);
  if ((st = tpg_plan_add_gemm(p, &d, NULL, 0, NULL))) return st;
  for (int i = 0; i < 3; i++) c->b[i].slot = c->s[i];
  out->bindings = c->b;
  out->nbindings = 3;
  return TPG_SUCCESS;
}

static void graph_sets(void) {
  static const int sizes[2] = {8, SET_MAX};
  const lcase c = {8, SET_N, SET_K, TPG_EPILOGUE_NONE, 0, 0};
  set_ctx sc;
  bufs B;
  tpg_graph_set *set = NULL;
  tpg_graph *g = NULL;
  int size = 0;
  memset(&sc, 0, sizeof sc);
  const lcase big = {SET_MAX, SET_N, SET_K, TPG_EPILOGUE_NONE, 0, 0};
  CHECK(bufs_make(&big, &B) == 0);
  sc.b[0].ptr = B.x[0], sc.b[1].ptr = B.w[0], sc.b[2].ptr = B.y[0];
  setenv("TPG_GEMM_FAMILY", "cublaslt", 1);
  tpg_graph_config cfg = TPG_GRAPH_CONFIG_INIT;
  CHECK_ST(tpg_graph_set_create(sizes, 2, set_build, &sc, &cfg, TPG_GRAPH_SET_RETARGET, &set), TPG_ERROR_UNSUPPORTED,
           "needs a launch the largest size's exec node cannot take");
  CHECK(set == NULL);
  /* The heuristic's answers for both sizes are kept from the refused set
   * above, so the handles made now are the plans': one for the context. */
  const long handles = tpgfake_counter(TPGFAKE_C_LT_HANDLES);
  CHECK_OK(tpg_graph_set_create(sizes, 2, set_build, &sc, &cfg, 0, &set));
  CHECK(tpgfake_counter(TPGFAKE_C_LT_HANDLES) == handles + 1);
  CHECK_OK(tpg_graph_set_pick(set, 5, &size, &g));
  CHECK(size == 8);
  CHECK_OK(tpg_graph_launch(g, NULL));
  CHECK(max_err(&c, &B, 0, NULL) <= 1e-2);
  CHECK(((const uint16_t *)B.y[0])[(size_t)8 * SET_N] == 0xFFFF); /* row 8 on: the poison */
  if (set) tpg_graph_set_destroy(set);
  unsetenv("TPG_GEMM_FAMILY");
  bufs_free(&B);
  CHECK(tpgfake_clean("graph sets of cuBLASLt nodes"));
}

int main(int argc, char **argv) {
  char msg[1024];
  if (tpgfake_setup(argc, argv) != 0) return 2;
  selector();
  CHECK(tpgfake_clean("selector"));
  setenv("TPG_GEMM_FAMILY", "cublaslt", 1);
  for (size_t i = 0; i < sizeof kCases / sizeof kCases[0]; i++)
    for (int md = 0; md < 3; md++) {
      tpgfake_reset();
      const tpg_status st = run(&kCases[i], kModes[md], 1, msg, sizeof msg);
      if (st) fprintf(stderr, "case %zu mode %d: %s\n", i, md, msg);
      CHECK(st == TPG_SUCCESS);
      CHECK(tpgfake_clean("cuBLASLt GEMM node"));
    }
  fault_loop(&kCases[1], 0);
  fault_loop(&kCases[3], 2);
  fault_loop(&kCases[5], 1);
  fault_loop(&kCases[6], 0);
  fault_loop(&kCases[8], 0);
  tuned();
  unsetenv("TPG_GEMM_FAMILY");
  graph_sets();
  return TPG_TEST_END();
}
