/* gemm_cutlass_test.c - the CUTLASS family on the CPU: CUTLASS's own host
 * code (lib/gemm/cutlass_params.cu) runs here for every candidate of a grid
 * of shapes, with a recording encoder in place of the driver's.
 *
 * What it pins down: the kernel table matches sm90_cutlass_list.h; the
 * candidates exist where the family applies and nowhere else, and their
 * names round-trip; every launch is one the device accepts (block, shared
 * memory under the opt-in limit, cluster dividing the grid); the argument
 * block carries the plain view, CUTLASS's Params within bounds, every TMA
 * descriptor encoded on one of the GEMM's own buffers (so a rebind that
 * re-fills it moves them all), and for stream-K / split-K the barrier words
 * inside the workspace; refusals name the argument; an encoder failure fails
 * the fill and leaves no half block; the family rule picks ours by default.
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "kernels/tpg_cutlass_args.h"
#include "lib/gemm/cutlass.h"
#include "lib/gemm/ours.h"
#include "lib/gemm/select.h"
#include "tests/cpu/gemm_test.h"
#include "tests/tpg_test.h"

/* A recording encoder: the bases CUTLASS asked to map; fails on demand. */
typedef struct {
  int calls, fail_at;
  const void *bases[16];
} rec_t;
static CUresult rec_encode(void *ctx, CUtensorMap *map, CUtensorMapDataType dt, cuuint32_t rank, void *base,
                           const cuuint64_t *dims, const cuuint64_t *strides, const cuuint32_t *box,
                           const cuuint32_t *es, CUtensorMapInterleave il, CUtensorMapSwizzle sw,
                           CUtensorMapL2promotion l2, CUtensorMapFloatOOBfill oob) {
  rec_t *r = ctx;
  (void)dt, (void)dims, (void)strides, (void)box, (void)es, (void)il, (void)sw, (void)l2, (void)oob;
  if (rank < 2 || rank > 5) return CUDA_ERROR_INVALID_VALUE;
  if (r->calls < 16) r->bases[r->calls] = base;
  memset(map, 0xA5, sizeof *map);
  return ++r->calls == r->fail_at ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
}

int main(void) {
  gemm_test_without_cublaslt();
  static const int ms[] = {17, 64, 100, 128, 255, 512, 1024, 4096};
  static const int nk[][2] = {{4096, 4096}, {1280, 8192}, {14336, 4096}, {1024, 512}, {24, 64}};
  static const int epis[] = {TPG_EPI_NONE, TPG_EPI_BIAS, TPG_EPI_BIAS_GELU, TPG_EPI_BIAS_SILU, TPG_EPI_RESIDUAL};
  char why[256], name[64];
  int checked = 0, i;

  /* the table is the list */
  for (i = 0; i < TPG_CUTLASS_COUNT; ++i) {
    const tpg_cutlass_kernel *k = &tpg_cutlass_kernels[i];
    CHECK(strstr(k->entry, "tpg_cutlass_bf16_") == k->entry && !strcmp(k->entry + 17, k->name));
    /* wgmma's shapes: 64 rows a warpgroup (the cooperative kernels split 128
     * between two), N a multiple of 8 up to 256 */
    CHECK((k->tm == 128 || (k->tm == 64 && k->sched == TPG_CUTLASS_SCHED_PINGPONG)) && k->tn % 8 == 0 &&
          k->tn >= 8 && k->tn <= 256 && k->cm * k->cn <= 2);
  }

  for (size_t s = 0; s < sizeof ms / sizeof ms[0]; ++s)
    for (size_t t = 0; t < sizeof nk / sizeof nk[0]; ++t)
      for (size_t e = 0; e < sizeof epis / sizeof epis[0]; ++e) {
        const int m = ms[s], n = nk[t][0], k = nk[t][1], epi = epis[e];
        tpg_gemm_variant cand[TPG_GEMM_MAX_CANDIDATES];
        const int nc =
            tpg_gemm_candidates(PROB(m, n, k, TPG_KDT_BF16, epi, 90, 132, k, k, 1), cand, TPG_GEMM_MAX_CANDIDATES);
        int ncut = 0;
        CHECK(nc <= TPG_GEMM_MAX_CANDIDATES &&
              tpg_gemm_candidates(PROB(m, n, k, TPG_KDT_BF16, epi, 90, 132, k, k, 1), NULL, 0) == 0);
        for (int c = 0; c < nc; ++c) {
          tpg_gemm_variant back;
          tpg_kernel_launch L;
          tpg_tma_encode xe, we;
          if (cand[c].kind != TPG_GEMM_VAR_CUTLASS) continue;
          ++ncut;
          CHECK(c == ncut); /* right after the heuristic */
          CHECK(tpg_gemm_variant_name(&cand[c], name, sizeof name) == 0);
          CHECK(tpg_gemm_variant_parse(name, &back) == 0 && back.kind == TPG_GEMM_VAR_CUTLASS &&
                back.cutlass == cand[c].cutlass && back.streamk == cand[c].streamk && back.split == cand[c].split);
          CHECK(tpg_gemm_variant_family(&cand[c]) == TPG_GEMM_FAMILY_CUTLASS);
          /* f16 is refused, naming the dtype */
          CHECK(tpg_gemm_select_variant(PROB(m, n, k, TPG_KDT_F16, epi, 90, 132, k, k, 1), &cand[c], &L, &xe, &we, why,
                                        sizeof why) != 0 &&
                strstr(why, "dtype"));
          if (tpg_gemm_select_variant(PROB(m, n, k, TPG_KDT_BF16, epi, 90, 132, k, k, 1), &cand[c], &L, &xe, &we, why,
                                      sizeof why)) {
            fprintf(stderr, "%s at %d x %d x %d epi %d refused: %s\n", name, m, n, k, epi, why);
            CHECK(0);
            continue;
          }
          const tpg_cutlass_kernel *kk = &tpg_cutlass_kernels[cand[c].cutlass];
          const unsigned cy = L.cluster_y ? L.cluster_y : 1;
          CHECK(L.cutlass == cand[c].cutlass + 1 && !strcmp(L.kernel, kk->entry) && xe.rank == 0 && we.rank == 0);
          CHECK(L.block[0] == 384 && L.block[1] == 1 && L.block[2] == 1);
          CHECK(L.smem_bytes > 100000 && L.smem_bytes <= 232448); /* Hopper's opt-in limit */
          CHECK(L.cluster == (unsigned)kk->cm && cy == (unsigned)kk->cn);
          CHECK(L.grid[0] >= 1 && L.grid[1] >= 1 && L.grid[2] >= 1 && L.grid[0] % L.cluster == 0 && L.grid[1] % cy == 0);
          CHECK((size_t)L.grid[0] * L.grid[1] * L.grid[2] <= 132 + 2);
          CHECK(L.workspace_bytes >= TPG_CUTLASS_WS_HEAD && L.workspace_zeroed == TPG_CUTLASS_WS_HEAD);
          if (!cand[c].streamk && !cand[c].split) CHECK(L.workspace_bytes == TPG_CUTLASS_WS_HEAD);
          CHECK(L.cutlass_mode == (cand[c].split ? TPG_CUTLASS_SPLIT : cand[c].streamk ? TPG_CUTLASS_SK : TPG_CUTLASS_DP));

          /* the argument block on made-up (aligned) buffers */
          {
            static tpg_gemm_cutlass_args blk;
            tpg_cutlass_problem p;
            tpg_gemm_args a;
            rec_t r;
            CUresult cu = CUDA_SUCCESS;
            static unsigned char ws_space[1 << 26] __attribute__((aligned(256)));
            memset(&a, 0, sizeof a);
            a.x = (const void *)(uintptr_t)0x100000000ull;
            a.w = (const void *)(uintptr_t)0x200000000ull;
            a.y = (void *)(uintptr_t)0x300000000ull;
            a.bias = epi == TPG_EPI_NONE ? NULL : (const void *)(uintptr_t)0x400000000ull;
            a.residual = epi == TPG_EPI_RESIDUAL ? (const void *)(uintptr_t)0x500000000ull : NULL;
            a.workspace = ws_space;
            a.m = m, a.n = n, a.k = k, a.ldx = k, a.ldw = k, a.ldy = n, a.ldr = n, a.dtype = TPG_KDT_BF16;
            a.epilogue = epi;
            a.split_k = 1;
            CHECK(L.workspace_bytes <= sizeof ws_space);
            memset(&p, 0, sizeof p);
            p.kernel = L.cutlass - 1, p.mode = L.cutlass_mode, p.splits = L.cutlass_splits;
            p.m = m, p.n = n, p.k = k, p.ldx = k, p.ldw = k, p.ldy = n, p.ldr = n;
            p.dtype = TPG_KDT_BF16, p.epilogue = epi, p.num_sms = 132;
            memset(&r, 0, sizeof r);
            CHECK(tpg_cutlass_fill(&p, &a, rec_encode, &r, &blk, &cu, why, sizeof why) == 0 && cu == CUDA_SUCCESS);
            CHECK(!memcmp(&blk.a, &a, sizeof a));
            CHECK(blk.params_bytes > 0 && blk.params_bytes <= TPG_CUTLASS_PARAMS_MAX);
            CHECK(blk.ctas == L.grid[0] * L.grid[1] * L.grid[2]);
            CHECK(r.calls >= 3 && r.calls <= 16); /* A, B, D (and C) at least */
            for (int q = 0; q < r.calls && q < 16; ++q)
              CHECK(r.bases[q] == a.x || r.bases[q] == a.w || r.bases[q] == a.y ||
                    (a.residual && r.bases[q] == a.residual));
            /* the descriptors landed in params where the block says */
            CHECK(blk.nmaps >= (unsigned)r.calls && blk.nmaps <= TPG_CUTLASS_MAPS_MAX);
            for (unsigned q = 0; q < blk.nmaps && q < TPG_CUTLASS_MAPS_MAX; ++q) {
              const unsigned char *d = blk.params + blk.map_off[q];
              int all = blk.map_off[q] % 64 == 0 && blk.map_off[q] + 128u <= blk.params_bytes;
              for (int b = 0; all && b < 128; ++b) all &= d[b] == 0xA5;
              CHECK(all);
            }
            if (blk.done) {
              const unsigned char *lo = (unsigned char *)ws_space + TPG_CUTLASS_WS_HEAD,
                                  *hi = (unsigned char *)ws_space + L.workspace_bytes;
              CHECK(cand[c].streamk || cand[c].split);
              CHECK((unsigned char *)blk.done == ws_space);
              CHECK((unsigned char *)blk.locks >= lo && (unsigned char *)(blk.locks + blk.lock_words) <= hi);
              CHECK(blk.lock_words > 0);
            } else {
              CHECK(!blk.locks && !blk.lock_words);
            }
            /* an encode that fails fails the fill, with its CUresult, and no half block */
            memset(&r, 0, sizeof r);
            r.fail_at = 2;
            CHECK(tpg_cutlass_fill(&p, &a, rec_encode, &r, &blk, &cu, why, sizeof why) != 0);
            CHECK(cu == CUDA_ERROR_INVALID_VALUE && strstr(why, "TMA descriptor") && blk.params_bytes == 0 &&
                  blk.a.x == NULL);
            ++checked;
          }
        }
        /* where the family applies */
        if (m <= 16) CHECK(ncut == 0);
        else CHECK(ncut >= 1);
      }

  /* none for SwiGLU, fp32 partials, decode M, or off sm_90 */
  {
    tpg_gemm_variant cand[TPG_GEMM_MAX_CANDIDATES];
    int nc = tpg_gemm_candidates(PROB(512, 4096, 4096, TPG_KDT_BF16, TPG_EPI_SWIGLU, 90, 132, 4096, 4096, 1), cand,
                                 TPG_GEMM_MAX_CANDIDATES);
    for (i = 0; i < nc; ++i) CHECK(cand[i].kind != TPG_GEMM_VAR_CUTLASS);
    nc = tpg_gemm_candidates(PROB(512, 4096, 4096, TPG_KDT_BF16, TPG_EPI_F32_PARTIAL, 90, 132, 4096, 4096, 1), cand,
                             TPG_GEMM_MAX_CANDIDATES);
    for (i = 0; i < nc; ++i) CHECK(cand[i].kind != TPG_GEMM_VAR_CUTLASS);
    nc = tpg_gemm_candidates(PROB(512, 4096, 4096, TPG_KDT_BF16, TPG_EPI_NONE, 80, 108, 4096, 4096, 1), cand,
                             TPG_GEMM_MAX_CANDIDATES);
    CHECK(nc == 1);
  }
  /* refusals name what is wrong */
  {
    tpg_gemm_variant v;
    tpg_kernel_launch L;
    tpg_tma_encode xe, we;
    CHECK(tpg_gemm_variant_parse("cutlass_ping_128x128_c2x1_sk", &v) == 0);
    CHECK(tpg_gemm_select_variant(PROB(512, 4096, 4096, TPG_KDT_BF16, TPG_EPI_NONE, 90, 132, 4096, 4096, 1), &v, &L,
                                  &xe, &we, why, sizeof why) != 0 &&
          strstr(why, "ping-pong"));
    CHECK(tpg_gemm_variant_parse("cutlass_coop_128x256_c2x1", &v) == 0);
    CHECK(tpg_gemm_select_variant(PROB(512, 4096, 4096, TPG_KDT_BF16, TPG_EPI_SWIGLU, 90, 132, 4096, 4096, 1), &v, &L,
                                  &xe, &we, why, sizeof why) != 0 &&
          strstr(why, "epilogue"));
    CHECK(tpg_gemm_select_variant(PROB(512, 4096, 4096, TPG_KDT_BF16, TPG_EPI_NONE, 80, 108, 4096, 4096, 1), &v, &L,
                                  &xe, &we, why, sizeof why) != 0 &&
          strstr(why, "sm_arch"));
    CHECK(tpg_gemm_variant_parse("cutlass_coop_128x256_c2x1_k1", &v) != 0);
    CHECK(tpg_gemm_variant_parse("cutlass_nosuch", &v) != 0);
    CHECK(tpg_gemm_variant_parse("cutlass_coop_128x256_c2x1_k17", &v) != 0);
  }
  /* the family rule: ours by default while no zoo run has set the auto table
   * (family_table.inc); after a refit, AUTO is ours or a CUTLASS kernel */
  const int auto_is_ours = strstr(tpg_gemm_family_table_source(), "no zoo run yet") != NULL;
  for (size_t s = 0; s < sizeof ms / sizeof ms[0]; ++s) {
    tpg_kernel_launch a, b, c;
    tpg_tma_encode xa, wa, xb, wb;
    const int m = ms[s];
    CHECK(tpg_gemm_select_tma(PROB(m, 4096, 4096, TPG_KDT_BF16, TPG_EPI_BIAS, 90, 132, 4096, 4096, 1), &a, &xa, &wa,
                              why, sizeof why) == 0);
    CHECK(tpg_gemm_select_rule(PROB(m, 4096, 4096, TPG_KDT_BF16, TPG_EPI_BIAS, 90, 132, 4096, 4096, 1),
                               TPG_GEMM_FAMILY_AUTO, &b, &xb, &wb, why, sizeof why) == 0);
    if (auto_is_ours)
      CHECK(!strcmp(a.kernel, b.kernel) && a.grid[0] == b.grid[0] && !memcmp(&xa, &xb, sizeof xa) && b.cutlass == 0);
    else
      CHECK(b.cutlass ? strstr(b.kernel, "tpg_cutlass_bf16_") != NULL : !strcmp(a.kernel, b.kernel));
    CHECK(tpg_gemm_select_rule(PROB(m, 4096, 4096, TPG_KDT_BF16, TPG_EPI_BIAS, 90, 132, 4096, 4096, 1),
                               TPG_GEMM_FAMILY_OURS, &b, &xb, &wb, why, sizeof why) == 0 &&
          !strcmp(a.kernel, b.kernel));
    CHECK(tpg_gemm_select_rule(PROB(m, 4096, 4096, TPG_KDT_BF16, TPG_EPI_BIAS, 90, 132, 4096, 4096, 1),
                               TPG_GEMM_FAMILY_CUTLASS, &c, &xb, &wb, why, sizeof why) == 0);
    CHECK(c.cutlass > 0 && strstr(c.kernel, "tpg_cutlass_bf16_") && xb.rank == 0);
    /* where CUTLASS cannot run it: ours, also under TPG_GEMM_FAMILY_CUTLASS */
    CHECK(tpg_gemm_select_rule(PROB(m, 4096, 4096, TPG_KDT_F16, TPG_EPI_BIAS, 90, 132, 4096, 4096, 1),
                               TPG_GEMM_FAMILY_CUTLASS, &c, &xb, &wb, why, sizeof why) == 0 &&
          c.cutlass == 0);
    CHECK(tpg_gemm_select_rule(PROB(m, 4096, 4096, TPG_KDT_BF16, TPG_EPI_SWIGLU, 90, 132, 4096, 4096, 1),
                               TPG_GEMM_FAMILY_CUTLASS, &c, &xb, &wb, why, sizeof why) == 0 &&
          c.cutlass == 0);
    /* TPG_GEMM_STREAMK=0: no K split in the CUTLASS pick either */
    CHECK(tpg_gemm_select_rule(PROB(m, 4096, 4096, TPG_KDT_BF16, TPG_EPI_BIAS, 90, 132, 4096, 4096, 0),
                               TPG_GEMM_FAMILY_CUTLASS, &c, &xb, &wb, why, sizeof why) == 0);
    CHECK(c.cutlass > 0 && c.cutlass_mode == TPG_CUTLASS_DP);
  }
  CHECK(tpg_gemm_select_rule(PROB(16, 4096, 4096, TPG_KDT_BF16, TPG_EPI_NONE, 90, 132, 4096, 4096, 1), 7, NULL, NULL,
                             NULL, why, sizeof why) != 0 &&
        strstr(why, "family=7"));
  printf("gemm_cutlass_test: %d CUTLASS launches and argument blocks checked\n", checked);
  return TPG_TEST_END();
}
