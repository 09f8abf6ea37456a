/* mlp.c - tensor-parallel MLP stacks as plans (tpg_plan_mlp).
 *
 * A stack is built with the public plan API only (tpg_plan_add_slot, _gemm,
 * _collective, _memcpy), so it validates, prints and rebinds like any plan a
 * caller builds. From inside the library it takes one thing: the error
 * reporting of lib/internal.h, so that a refused field is named under
 * tpg_plan_mlp's own name as every public call's message is; the public
 * header can read a message (tpg_last_error) but not set one. The weight
 * copies of tpg_mlp_shard_layer are in mlp_shard.c. The decisions:
 * - Bias and residual are added once, by rank 0's row-parallel GEMM epilogue,
 *   before the all-reduce; the sum then is the finished hidden state. Three
 *   nodes per layer (two GEMMs, one all-reduce) on the critical path.
 * - The all-reduce works in place on a scratch buffer the graph owns; user
 *   buffers x and y are touched only by kernel/copy nodes, so rebinding them
 *   costs a few microseconds instead of NCCL re-captures.
 * - Chunked overlap splits tokens into row blocks that flow through all
 *   layers independently, so one block's all-reduce runs beside another
 *   block's GEMMs with no barrier between layers. It is opt-in: AUTO does
 *   not chunk (below).
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <string.h>

#include "lib/internal.h"

static tpg_view at(tpg_slot s, uint64_t off) {
  tpg_view v = {s, 0, off};
  return v;
}

static tpg_status name_node(tpg_plan *p, tpg_node n, const char *fmt, int l, int c) {
  char nm[64];
  snprintf(nm, sizeof nm, fmt, l, c);
  return tpg_plan_set_node_name(p, n, nm);
}

/* The desc's fields, each refused by name. */
static tpg_status check_desc(const tpg_mlp_desc *d) {
  TPG_CHECK_ARG(d != NULL, "desc is NULL: expected a tpg_mlp_desc (TPG_MLP_DESC_INIT)");
  TPG_CHECK_ARG(d->size == sizeof(tpg_mlp_desc), "desc->size is %zu: expected sizeof(tpg_mlp_desc) = %zu", d->size,
                sizeof(tpg_mlp_desc));
  TPG_CHECK_ARG(d->kind == TPG_MLP_GELU || d->kind == TPG_MLP_SWIGLU,
                "desc->kind is %d: expected TPG_MLP_GELU or TPG_MLP_SWIGLU", (int)d->kind);
  TPG_CHECK_ARG(d->layers >= 1 && d->layers <= 4096, "desc->layers is %d: expected 1..4096", d->layers);
  TPG_CHECK_ARG(d->tokens >= 1, "desc->tokens is %d: expected >= 1", d->tokens);
  TPG_CHECK_ARG(d->hidden >= 8 && d->hidden % 8 == 0, "desc->hidden is %d: expected a positive multiple of 8",
                d->hidden);
  TPG_CHECK_ARG(d->nranks >= 1, "desc->nranks is %d: expected >= 1", d->nranks);
  TPG_CHECK_ARG(d->rank >= 0 && d->rank < d->nranks, "desc->rank is %d: expected 0..%d", d->rank, d->nranks - 1);
  TPG_CHECK_ARG(d->ffn >= 8, "desc->ffn is %d: expected >= 8", d->ffn);
  TPG_CHECK_ARG(d->ffn % d->nranks == 0,
                "desc->ffn %d does not split evenly over %d ranks: uneven tensor-parallel splits are not supported",
                d->ffn, d->nranks);
  TPG_CHECK_ARG((d->ffn / d->nranks) % 8 == 0,
                "desc->ffn / nranks = %d is not a multiple of 8 (16-byte rows): choose ffn divisible by 8 * nranks",
                d->ffn / d->nranks);
  TPG_CHECK_ARG(d->dtype == TPG_BF16 || d->dtype == TPG_F16, "desc->dtype is %d: expected TPG_BF16 or TPG_F16",
                (int)d->dtype);
  TPG_CHECK_ARG(d->bias == 0 || d->bias == 1, "desc->bias is %d: expected 0 or 1", d->bias);
  TPG_CHECK_ARG(d->collectives == 0 || d->collectives == 1, "desc->collectives is %d: expected 0 or 1",
                d->collectives);
  TPG_CHECK_ARG(d->overlap >= TPG_OVERLAP_AUTO && d->overlap <= TPG_OVERLAP_CHUNKED,
                "desc->overlap is %d: expected TPG_OVERLAP_AUTO, _NONE or _CHUNKED", (int)d->overlap);
  TPG_CHECK_ARG(d->chunks >= 0 && d->chunks <= 16, "desc->chunks is %d: expected 0 (auto) or 2..16", d->chunks);
  TPG_CHECK_ARG(d->sm_reserve >= 0 && d->sm_reserve <= 64, "desc->sm_reserve is %d: expected 0..64", d->sm_reserve);
  TPG_CHECK_ARG(d->allreduce >= TPG_ALGO_AUTO && d->allreduce <= TPG_ALGO_TWOSHOT,
                "desc->allreduce is %d: expected TPG_ALGO_AUTO, _NCCL, _ONESHOT or _TWOSHOT", (int)d->allreduce);

  TPG_CHECK_ARG(d->bias == 1 || d->kind == TPG_MLP_SWIGLU,
                "desc->bias is 0 with TPG_MLP_GELU: the GeLU epilogue takes a bias (Megatron's block has them)");
  return TPG_SUCCESS;
}

/* What every layer's nodes are built from. */
typedef struct mlp_shape {
  int M, H, F;       /* tokens, hidden, this rank's ffn part */
  size_t F1;         /* W1 rows: F, or 2F for SwiGLU (gate and up) */
  int swiglu, comm, chunks, reserve;
  tpg_slot x, act, h;
} mlp_shape;

/* Layer l: per token chunk, GEMM (W1) -> GEMM (W2, + b2 and the residual on
 * rank 0) -> all-reduce in place; last[c] is what chunk c's next step waits
 * for. */
static tpg_status add_layer(tpg_plan *p, const tpg_mlp_desc *d, const mlp_shape *s, int l, tpg_node *last) {
  const int M = s->M, H = s->H, F = s->F, comm = s->comm, chunks = s->chunks;
  char nm[64];
  tpg_slot w1, b1 = 0, w2, b2 = 0;
  snprintf(nm, sizeof nm, "l%d.w1", l);
  TPG_TRY(tpg_plan_add_slot(p, nm, d->dtype, TPG_MEM_DEVICE, s->F1 * (size_t)H, &w1));
  snprintf(nm, sizeof nm, "l%d.w2", l);
  TPG_TRY(tpg_plan_add_slot(p, nm, d->dtype, TPG_MEM_DEVICE, (size_t)H * F, &w2));
  if (d->bias) {
    snprintf(nm, sizeof nm, "l%d.b1", l);
    TPG_TRY(tpg_plan_add_slot(p, nm, d->dtype, TPG_MEM_DEVICE, s->F1, &b1));
    snprintf(nm, sizeof nm, "l%d.b2", l);
    TPG_TRY(tpg_plan_add_slot(p, nm, d->dtype, TPG_MEM_DEVICE, (size_t)H, &b2));
  }
  tpg_slot src = l == 0 ? s->x : s->act;
  for (int c = 0; c < chunks; c++) {
    int r0 = (int)((long)M * c / chunks), r1 = (int)((long)M * (c + 1) / chunks), mc = r1 - r0;
    tpg_node n1, n2;
    tpg_gemm_desc g1 = TPG_GEMM_DESC_INIT;
    g1.m = mc; g1.n = F; g1.k = H; g1.dtype = d->dtype;
    g1.epilogue = s->swiglu ? TPG_EPILOGUE_SWIGLU : TPG_EPILOGUE_BIAS_GELU;
    g1.x = at(src, (uint64_t)r0 * H);
    g1.w = at(w1, 0);
    g1.y = at(s->h, (uint64_t)r0 * F);
    if (d->bias) g1.bias = at(b1, 0);
    g1.sm_reserve = s->reserve;
    TPG_TRY(tpg_plan_add_gemm(p, &g1, last[c] ? &last[c] : NULL, last[c] ? 1 : 0, &n1));
    TPG_TRY(name_node(p, n1, "l%d.fc1.c%d", l, c));
    tpg_gemm_desc g2 = TPG_GEMM_DESC_INIT;
    g2.m = mc; g2.n = H; g2.k = F; g2.dtype = d->dtype;
    g2.x = at(s->h, (uint64_t)r0 * F);
    g2.w = at(w2, 0);
    g2.y = at(s->act, (uint64_t)r0 * H);
    g2.sm_reserve = s->reserve;
    /* Rank 0 (or every rank when nothing is summed) adds b2 and the residual. */
    if (d->rank == 0 || !comm) {
      g2.epilogue = TPG_EPILOGUE_RESIDUAL;
      g2.residual = at(src, (uint64_t)r0 * H);
      if (d->bias) g2.bias = at(b2, 0);
    }
    TPG_TRY(tpg_plan_add_gemm(p, &g2, &n1, 1, &n2));
    TPG_TRY(name_node(p, n2, "l%d.fc2.c%d", l, c));
    last[c] = n2;
    if (comm) {
      tpg_collective_desc cd = TPG_COLLECTIVE_DESC_INIT;
      cd.kind = TPG_ALL_REDUCE;
      cd.send = at(s->act, (uint64_t)r0 * H);
      cd.recv = cd.send;
      cd.count = (size_t)mc * H;
      cd.algo = d->allreduce;
      TPG_TRY(tpg_plan_add_collective(p, &cd, &n2, 1, &last[c]));
      TPG_TRY(name_node(p, last[c], "l%d.allreduce.c%d", l, c));
    }
  }
  return TPG_SUCCESS;
}

static tpg_status plan_mlp(const tpg_mlp_desc *d, tpg_plan **out) {
  TPG_CHECK_ARG(out != NULL, "out is NULL: expected a tpg_plan * to set");
  *out = NULL;
  tpg_status cs = check_desc(d);
  if (cs != TPG_SUCCESS) {
    tpg_err_rename(__func__); /* the rule, under this call's name */
    return cs;
  }
  mlp_shape s;
  memset(&s, 0, sizeof s);
  s.M = d->tokens;
  s.H = d->hidden;
  s.F = d->ffn / d->nranks;
  s.swiglu = d->kind == TPG_MLP_SWIGLU;
  /* size_t: ffn near INT_MAX is a valid int, and 2 * F must not overflow
   * before add_slot gets to refuse the size. */
  s.F1 = s.swiglu ? 2 * (size_t)s.F : (size_t)s.F;
  s.comm = d->collectives && d->nranks > 1;
  s.chunks = 1;
  tpg_overlap ov = d->overlap;
  /* AUTO is NONE: the half-size GEMMs of two chunks, on fewer SMs, lose
   * more than the hidden all-reduce gives back at nearly every shape tpbench
   * runs on 2 x H200 (docs/performance.md, "Chunked overlap"). */
  if (ov == TPG_OVERLAP_AUTO) ov = TPG_OVERLAP_NONE;
  if (ov == TPG_OVERLAP_CHUNKED) {
    s.chunks = d->chunks ? d->chunks : 2;
    TPG_CHECK_ARG(s.chunks >= 2 && s.chunks <= s.M,
                  "desc->chunks is %d with %d tokens: expected 2..min(16, tokens)", s.chunks, s.M);
  }
  s.reserve = ov == TPG_OVERLAP_CHUNKED && s.comm ? (d->sm_reserve ? d->sm_reserve : 16) : 0;

  tpg_plan *p = NULL;
  tpg_status st;
  TPG_TRY(tpg_plan_create(&p));
  tpg_slot y;
  const size_t MH = (size_t)s.M * s.H;
  TPG_TRYGOTO(tpg_plan_add_slot(p, "x", d->dtype, TPG_MEM_DEVICE, MH, &s.x), st, fail);
  TPG_TRYGOTO(tpg_plan_add_slot(p, "y", d->dtype, TPG_MEM_DEVICE, MH, &y), st, fail);
  TPG_TRYGOTO(tpg_plan_add_slot(p, "act", d->dtype, TPG_MEM_SCRATCH, MH, &s.act), st, fail);
  TPG_TRYGOTO(tpg_plan_add_slot(p, "h", d->dtype, TPG_MEM_SCRATCH, (size_t)s.M * s.F, &s.h), st, fail);
  tpg_node last[16]; /* per chunk: the node the chunk's next step waits for */
  for (int c = 0; c < s.chunks; c++) last[c] = 0;
  for (int l = 0; l < d->layers; l++) TPG_TRYGOTO(add_layer(p, d, &s, l, last), st, fail);
  tpg_node cp;
  TPG_TRYGOTO(tpg_plan_add_memcpy(p, at(y, 0), at(s.act, 0), MH, last, s.chunks, &cp), st, fail);
  TPG_TRYGOTO(tpg_plan_set_node_name(p, cp, "copy_out"), st, fail);
  /* its graph then refuses to run without a comm of these ranks */
  if (s.comm) TPG_TRYGOTO(tpg_plan_set_ranks(p, d->nranks), st, fail);
  *out = p;
  return TPG_SUCCESS;
fail:
  tpg_plan_destroy(p);
  return st;
}

tpg_status tpg_plan_mlp(const tpg_mlp_desc *d, tpg_plan **out) {
  tpg_err_clear();
  return tpg_err_public(plan_mlp(d, out), __func__);
}
