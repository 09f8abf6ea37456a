/* sm90_tma.cu - prefill GEMM for Hopper (sm_90a): wgmma, warp-specialised,
 * persistent.
 *
 * Design:
 *  - CTA tile 128 x BN x 64 (M x W-rows x K), BN = 256 with a 4-stage or 128
 *    with a 6-stage shared-memory ring (192 KB either way), 384 threads = 3
 *    warpgroups: warpgroup 0 produces, warpgroups 1 and 2 each multiply a
 *    64-row half of the tile with wgmma.m64nBNk16 (fp32 accumulators in
 *    registers; setmaxnreg moves registers from the producer (40) to the
 *    consumers (232)).
 *  - Two producers for the same consumers:
 *    tpg_gemm_sm90_*: 128 threads of 16-byte cp.async. Everything comes from
 *      the raw pointers in tpg_gemm_args (no tensor map), with zero-fill at
 *      the M/N/K edges; each chunk goes straight into the 128-byte-swizzled
 *      K-major layout wgmma reads (chunk j of row r at r*128 + ((j ^ r%8)*16)),
 *      completion through cp.async.mbarrier.arrive.noinc, and the consumers
 *      run fence.proxy.async after the wait (generic-proxy writes, async-proxy
 *      reads). Measured at 0.5-0.65 of cuBLAS: the LSU copy path cannot feed
 *      the tensor cores (docs/kernels.md).
 *    tpg_gemm_sm90tma_*: one thread issues two TMA tensor copies a stage
 *      (maps encoded on the host, tpg_tma_args.h) with expect_tx: 0.9-1.0 of
 *      cuBLAS. This is why the TMA path exists despite needing host-side maps.
 *  - Persistent grid (min(tiles, SMs) CTAs) walks the tiles in groups of 8
 *    M-blocks, M fastest, so the CTAs running at once share W tiles in L2.
 *    The epilogue writes from registers (one compile-time epilogue per branch,
 *    small enough for the instruction cache) while the producer already
 *    fetches the next tile's stages.
 *  - Stream-K (TMA kernels, split_k = TPG_SPLITK_STREAM): when whole tiles
 *    would leave most SMs idle (e.g. 32 tiles for 132 SMs), the K blocks
 *    of the last (or only) wave are split evenly over all CTAs, across
 *    tile boundaries; full waves before it still run whole tiles. Split
 *    tiles are summed through the workspace (sk_fixup).
 *
 * All of this needs sm_90a. For the compute_90 / sm_80 passes the entry points
 * compile to a trap; the selector never picks them there.
 */
#include "kernels/common.cuh"
#include "kernels/tpg_tma_args.h"

namespace tpg {
namespace sm90 {
constexpr int BK = 64;
[[maybe_unused]] constexpr int THREADS = 384;
/* Tile BM x BN (X rows x W rows). BM = 128: each consumer warpgroup takes a
 * 64-row half and all BN columns. BM = 64 (small M: a 128-row tile would be
 * half zeros): both consumers share the 64 rows and each takes BN/2 columns.
 * CW = W rows one consumer multiplies, ACC = its fp32 accumulators a thread.
 * As many stages as fit 192 KB, at most 8: BM 128 x BN 256 / 192 / 128 / 64 ->
 * 4 / 4 / 6 / 8; BM 64 x BN 256 / 128 / 64 -> 4 / 8 / 8.
 * + 1024 to align the ring to the 1024-byte swizzle atom, + barriers */
#ifndef TPG_SM90_STAGED_RING
#define TPG_SM90_STAGED_RING 196608 /* the staged kernels' ring (lab builds vary it) */
#endif
#ifndef TPG_SM90_STAGE_EPI
#define TPG_SM90_STAGE_EPI 1 /* lab builds: 0 = every tile stores from registers (A/B) */
#endif
template <int BN, int BM = 128, bool TMA = true> struct cfg {
  static_assert(BM == 128 || BM == 64 || BM == 32 || BM == 16, "BM (32 and 16: swapped tiles only)");
  static_assert(BN == 256 || BN == 192 || BN == 128 || BN == 64, "BN");
  static_assert(BN != 192 || BM == 128, "BN 192: 128-row tiles only");
  static constexpr int A_BYTES = BM * BK * 2, B_BYTES = BN * BK * 2, STAGE_BYTES = A_BYTES + B_BYTES;
  /* At most 8 stages, for every tile, swapped ones too: deeper rings (up to
   * 16 stages, as cuBLASLt's kernels for these shapes run) and shallower
   * ones (5) were both slower on every shape tried, so the stage count is
   * not what these kernels lack (docs/gemm.md, "Ring depth"). */
  static constexpr int MAX_STAGES = 8;
  /* STAGED: the epilogue goes through TMA stores (128-row TMA tiles; see
   * gemm_sm90_body), staged after the ring in EPI_BUFS 64-row x 32-column
   * boxes per consumer. Only there: the 32 KB cost the 64-row and swapped
   * tiles up to 27% at M = 128 (docs/kernels.md, "Epilogue through TMA
   * stores"). */
  static constexpr bool STAGED = TMA && BM == 128 && TPG_SM90_STAGE_EPI;
  static constexpr int RING = STAGED ? TPG_SM90_STAGED_RING : 196608;
  static constexpr int STAGES = RING / STAGE_BYTES < MAX_STAGES ? RING / STAGE_BYTES : MAX_STAGES;
  static constexpr int EPI_BUFS = 4, EPI_BOX = 64 * 32 * 2, EPI_BYTES = STAGED ? 2 * EPI_BUFS * EPI_BOX : 0;
  static constexpr int SMEM_BYTES = STAGES * STAGE_BYTES + EPI_BYTES + 1024 + 2 * STAGES * 8;
  static_assert(SMEM_BYTES <= 227 * 1024, "dynamic shared memory per block");
  static constexpr int CW = BM == 128 ? BN : BN / 2, ACC = CW / 2;
};
/* Swapped tiles (SW, gemm_sm90_body): W rows are the wgmma M side and the
 * BM tokens its N side. BN >= 128: consumer c multiplies W rows
 * [c BN/2, (c+1) BN/2) as MW = BN/128 m64 blocks by all BM tokens; BN 64:
 * both take the 64 W rows, consumer c tokens [c BM/2, (c+1) BM/2). TN = the
 * wgmma N, ACC = fp32 accumulators a thread. */
template <int BN, int BM> struct swcfg {
  static_assert(BN == 256 || BN == 128 || BN == 64, "swapped BN");
  static_assert(BM == 64 || BM == 32 || BM == 16, "swapped BM");
  static constexpr int MW = BN >= 128 ? BN / 128 : 1, TN = BN >= 128 ? BM : BM / 2, ACC = MW * TN / 2;
};
constexpr int GROUP_M = 8;

TPG_DEV void tile_coords(int t, int mt, int nt, int &mb, int &nb) {
  const int group = t / (GROUP_M * nt);
  const int first = group * GROUP_M;
  const int gsz = min(mt - first, GROUP_M);
  const int local = t - group * GROUP_M * nt;
  mb = first + local % gsz;
  nb = local / gsz;
}

/* Stream-K: the grid splits the split wave's `total` K-block iterations
 * evenly, CTA c taking [sk_begin(c), sk_begin(c+1)); a tile whose
 * iterations span several CTAs is summed by the last of them to finish
 * (sk_fixup below). */
TPG_DEV long long sk_begin(int c, long long total, int grid) { return total * c / grid; }
TPG_DEV int sk_cta_of(long long g, long long total, int grid) {  /* the CTA whose range holds g */
  return (int)(((g + 1) * grid + total - 1) / total) - 1;
}

/* Development timeline (built only with -DTPG_SM90_TRACE, by gemm_bench's
 * trace build; never in the library): %globaltimer stamps per CTA, so a run
 * shows where a short GEMM's time goes (start-up, first data, main loop,
 * stream-K fixup, epilogue) instead of guessing from totals. */
#ifdef TPG_SM90_TRACE
constexpr int TRACE_CTAS = 1024, TRACE_POINTS = 12;
__device__ unsigned long long trace_buf[TRACE_CTAS][TRACE_POINTS];
TPG_DEV void trace(int i) {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  if (blockIdx.x < TRACE_CTAS) trace_buf[blockIdx.x][i] = t;
}
#define TPG_TRACE(i) ::tpg::sm90::trace(i)
#else
#define TPG_TRACE(i) ((void)0)
#endif

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
TPG_DEV void mbar_init(uint32_t bar, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" :: "r"(bar), "r"(count) : "memory");
}
TPG_DEV void mbar_wait(uint32_t bar, uint32_t parity) {
  uint32_t done;
  do {
    asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
                 : "=r"(done) : "r"(bar), "r"(parity) : "memory");
  } while (!done);
}
TPG_DEV void mbar_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" :: "r"(bar) : "memory");
}
TPG_DEV void cp_async_mbar_arrive(uint32_t bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" :: "r"(bar) : "memory");
}
TPG_DEV void mbar_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"(bar), "r"(bytes) : "memory");
}
TPG_DEV void tma_load_2d(uint32_t dst, const void *map, uint32_t bar, int c0, int c1) {
  asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4}], [%2];"
               :: "r"(dst), "l"(map), "r"(bar), "r"(c0), "r"(c1) : "memory");
}
/* Cluster variants: the same copy multicast to the CTAs of cta_mask, each at
 * the same CTA-relative smem offset and barrier offset as dst / bar. */
TPG_DEV void tma_load_2d_mc(uint32_t dst, const void *map, uint32_t bar, int c0, int c1, uint16_t mask) {
  asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster [%0], [%1, {%3, %4}], [%2], %5;"
               :: "r"(dst), "l"(map), "r"(bar), "r"(c0), "r"(c1), "h"(mask) : "memory");
}
TPG_DEV void tma_load_4d_mc(uint32_t dst, const void *map, uint32_t bar, int c0, int c1, int c2, int c3, uint16_t mask) {
  asm volatile("cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster [%0], [%1, {%3, %4, %5, %6}], [%2], %7;"
               :: "r"(dst), "l"(map), "r"(bar), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "h"(mask) : "memory");
}
/* Arrive on the barrier at local address bar in cluster CTA `rank` (itself
 * included). Default (.release.cta) semantics: the arrive only says "this
 * stage's smem has been read" (wgmma.wait_group already ordered the reads);
 * .release.cluster made every arrive a cluster-scope fence and halved the
 * tensor-pipe use (ncu, M=4096 N=6144 K=4096: 51% vs 81% unclustered; 81%
 * with this). */
TPG_DEV void mbar_arrive_cluster(uint32_t bar, uint32_t rank) {
  asm volatile("{\n.reg .b32 ra;\nmapa.shared::cluster.u32 ra, %0, %1;\n"
               "mbarrier.arrive.shared::cluster.b64 _, [ra];\n}" :: "r"(bar), "r"(rank) : "memory");
}
TPG_DEV void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release;\nbarrier.cluster.wait.acquire;" ::: "memory");
}
TPG_DEV uint32_t cluster_rank() {
  uint32_t r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
  return r;
}
TPG_DEV uint32_t cluster_size() {
  uint32_t r;
  asm volatile("mov.u32 %0, %%cluster_nctarank;" : "=r"(r));
  return r;
}
/* The shared::cluster address of CTA `rank`'s copy of the CTA-relative
 * shared address addr (32 bits: fewer registers than a generic pointer) */
TPG_DEV uint32_t mapa_u32(uint32_t addr, uint32_t rank) {
  uint32_t r;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(r) : "r"(addr), "r"(rank));
  return r;
}
TPG_DEV void st_cluster_v2(uint32_t addr, float a, float b) {
  asm volatile("st.shared::cluster.v2.f32 [%0], {%1, %2};" :: "r"(addr), "f"(a), "f"(b) : "memory");
}
TPG_DEV void tma_load_4d(uint32_t dst, const void *map, uint32_t bar, int c0, int c1, int c2, int c3) {
  asm volatile("cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5, %6}], [%2];"
               :: "r"(dst), "l"(map), "r"(bar), "r"(c0), "r"(c1), "r"(c2), "r"(c3) : "memory");
}
/* The epilogue's TMA store (the staged epilogue in gemm_sm90_body): a box of smem
 * written by the consumer warpgroup goes to global memory through the Y
 * map, asynchronously; bulk groups are per thread, so the thread that
 * commits a store is the one that waits for it. */
TPG_DEV void st_shared_u32(uint32_t addr, uint32_t v) {
  asm volatile("st.shared.u32 [%0], %1;" :: "r"(addr), "r"(v) : "memory");
}
TPG_DEV void tma_store_2d(const void *map, uint32_t src, int c0, int c1) {
  asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%2, %3}], [%1];"
               :: "l"(map), "r"(src), "r"(c0), "r"(c1) : "memory");
}
TPG_DEV void bulk_commit() { asm volatile("cp.async.bulk.commit_group;" ::: "memory"); }
/* at most N of this thread's stores still reading their smem */
template <int N> TPG_DEV void bulk_wait_read() { asm volatile("cp.async.bulk.wait_group.read %0;" :: "n"(N) : "memory"); }
TPG_DEV void bulk_wait_all() { asm volatile("cp.async.bulk.wait_group 0;" ::: "memory"); }
/* a barrier of one consumer warpgroup (ids 2, 3; 1 is both consumers') */
TPG_DEV void wg_bar(int id) { asm volatile("bar.sync %0, 128;" :: "r"(id) : "memory"); }
/* K-major operand, 128-byte swizzle: LBO unused (1), SBO = 1024 bytes between
 * 8-row groups, layout type 1 (SWIZZLE_128B) in bits 62-63. Advancing K by 16
 * elements (32 bytes) inside the swizzle atom = start address + 2 (16-byte units):
 * the hardware applies the XOR to the final address, as the atom is aligned. */
TPG_DEV uint64_t make_desc(uint32_t saddr) {
  return (uint64_t)((saddr & 0x3FFFF) >> 4) | ((uint64_t)1 << 16) | ((uint64_t)(1024 >> 4) << 32) |
         ((uint64_t)1 << 62);
}
TPG_DEV void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
TPG_DEV void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int N> TPG_DEV void wgmma_wait() { asm volatile("wgmma.wait_group.sync.aligned %0;" :: "n"(N) : "memory"); }
TPG_DEV void wgmma_m64n256k16_bf16(float (&d)[128], uint64_t da, uint64_t db, int scale_d) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 "
      "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63,%64,%65,%66,%67,%68,%69,%70,%71,%72,%73,%74,%75,%76,%77,%78,%79,%80,%81,%82,%83,%84,%85,%86,%87,%88,%89,%90,%91,%92,%93,%94,%95,%96,%97,%98,%99,%100,%101,%102,%103,%104,%105,%106,%107,%108,%109,%110,%111,%112,%113,%114,%115,%116,%117,%118,%119,%120,%121,%122,%123,%124,%125,%126,%127}, %128, %129, p, 1, 1, 0, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
      : "l"(da), "l"(db), "r"(scale_d));
}
TPG_DEV void wgmma_m64n256k16_f16(float (&d)[128], uint64_t da, uint64_t db, int scale_d) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n256k16.f32.f16.f16 "
      "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63,%64,%65,%66,%67,%68,%69,%70,%71,%72,%73,%74,%75,%76,%77,%78,%79,%80,%81,%82,%83,%84,%85,%86,%87,%88,%89,%90,%91,%92,%93,%94,%95,%96,%97,%98,%99,%100,%101,%102,%103,%104,%105,%106,%107,%108,%109,%110,%111,%112,%113,%114,%115,%116,%117,%118,%119,%120,%121,%122,%123,%124,%125,%126,%127}, %128, %129, p, 1, 1, 0, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
      : "l"(da), "l"(db), "r"(scale_d));
}
TPG_DEV void wgmma_m64n192k16_bf16(float (&d)[96], uint64_t da, uint64_t db, int scale_d) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %98, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n192k16.f32.bf16.bf16 "
      "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63,%64,%65,%66,%67,%68,%69,%70,%71,%72,%73,%74,%75,%76,%77,%78,%79,%80,%81,%82,%83,%84,%85,%86,%87,%88,%89,%90,%91,%92,%93,%94,%95}, %96, %97, p, 1, 1, 0, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95])
      : "l"(da), "l"(db), "r"(scale_d));
}
TPG_DEV void wgmma_m64n192k16_f16(float (&d)[96], uint64_t da, uint64_t db, int scale_d) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %98, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n192k16.f32.f16.f16 "
      "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63,%64,%65,%66,%67,%68,%69,%70,%71,%72,%73,%74,%75,%76,%77,%78,%79,%80,%81,%82,%83,%84,%85,%86,%87,%88,%89,%90,%91,%92,%93,%94,%95}, %96, %97, p, 1, 1, 0, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95])
      : "l"(da), "l"(db), "r"(scale_d));
}
TPG_DEV void wgmma_m64n128k16_bf16(float (&d)[64], uint64_t da, uint64_t db, int scale_d) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
      "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63}, %64, %65, p, 1, 1, 0, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
      : "l"(da), "l"(db), "r"(scale_d));
}
TPG_DEV void wgmma_m64n128k16_f16(float (&d)[64], uint64_t da, uint64_t db, int scale_d) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 "
      "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63}, %64, %65, p, 1, 1, 0, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
      : "l"(da), "l"(db), "r"(scale_d));
}

TPG_DEV void wgmma_m64n64k16_bf16(float (&d)[32], uint64_t da, uint64_t db, int scale_d) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
      "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}, %32, %33, p, 1, 1, 0, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
      : "l"(da), "l"(db), "r"(scale_d));
}
TPG_DEV void wgmma_m64n64k16_f16(float (&d)[32], uint64_t da, uint64_t db, int scale_d) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 "
      "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}, %32, %33, p, 1, 1, 0, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
      : "l"(da), "l"(db), "r"(scale_d));
}
TPG_DEV void wgmma_m64n32k16_bf16(float (&d)[16], uint64_t da, uint64_t db, int scale_d) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 "
      "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15}, %16, %17, p, 1, 1, 0, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
      : "l"(da), "l"(db), "r"(scale_d));
}
TPG_DEV void wgmma_m64n32k16_f16(float (&d)[16], uint64_t da, uint64_t db, int scale_d) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n32k16.f32.f16.f16 "
      "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15}, %16, %17, p, 1, 1, 0, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
      : "l"(da), "l"(db), "r"(scale_d));
}

/* N = 16 and 8: the swapped tiles' token side (16- and 32-token tiles split
 * over the two consumers; see gemm_sm90_body's SW) */
TPG_DEV void wgmma_m64n16k16_bf16(float (&d)[8], uint64_t da, uint64_t db, int scale_d) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %10, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n16k16.f32.bf16.bf16 "
      "{%0,%1,%2,%3,%4,%5,%6,%7}, %8, %9, p, 1, 1, 0, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])
      : "l"(da), "l"(db), "r"(scale_d));
}
TPG_DEV void wgmma_m64n16k16_f16(float (&d)[8], uint64_t da, uint64_t db, int scale_d) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %10, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n16k16.f32.f16.f16 "
      "{%0,%1,%2,%3,%4,%5,%6,%7}, %8, %9, p, 1, 1, 0, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])
      : "l"(da), "l"(db), "r"(scale_d));
}
TPG_DEV void wgmma_m64n8k16_bf16(float (&d)[4], uint64_t da, uint64_t db, int scale_d) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %6, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16 "
      "{%0,%1,%2,%3}, %4, %5, p, 1, 1, 0, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "l"(da), "l"(db), "r"(scale_d));
}
TPG_DEV void wgmma_m64n8k16_f16(float (&d)[4], uint64_t da, uint64_t db, int scale_d) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %6, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n8k16.f32.f16.f16 "
      "{%0,%1,%2,%3}, %4, %5, p, 1, 1, 0, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "l"(da), "l"(db), "r"(scale_d));
}

/* One m64nCWk16 step: CW = the W rows (columns of the output) one consumer covers. */
template <typename T, int CW>
TPG_DEV void wgmma_tile(float (&d)[CW / 2], uint64_t da, uint64_t db, int scale_d) {
  if constexpr (CW == 256) {
    if constexpr (dt<T>::is_bf16) wgmma_m64n256k16_bf16(d, da, db, scale_d);
    else wgmma_m64n256k16_f16(d, da, db, scale_d);
  } else if constexpr (CW == 192) {
    if constexpr (dt<T>::is_bf16) wgmma_m64n192k16_bf16(d, da, db, scale_d);
    else wgmma_m64n192k16_f16(d, da, db, scale_d);
  } else if constexpr (CW == 128) {
    if constexpr (dt<T>::is_bf16) wgmma_m64n128k16_bf16(d, da, db, scale_d);
    else wgmma_m64n128k16_f16(d, da, db, scale_d);
  } else if constexpr (CW == 64) {
    if constexpr (dt<T>::is_bf16) wgmma_m64n64k16_bf16(d, da, db, scale_d);
    else wgmma_m64n64k16_f16(d, da, db, scale_d);
  } else if constexpr (CW == 32) {
    if constexpr (dt<T>::is_bf16) wgmma_m64n32k16_bf16(d, da, db, scale_d);
    else wgmma_m64n32k16_f16(d, da, db, scale_d);
  } else if constexpr (CW == 16) {
    if constexpr (dt<T>::is_bf16) wgmma_m64n16k16_bf16(d, da, db, scale_d);
    else wgmma_m64n16k16_f16(d, da, db, scale_d);
  } else {
    static_assert(CW == 8, "CW");
    if constexpr (dt<T>::is_bf16) wgmma_m64n8k16_bf16(d, da, db, scale_d);
    else wgmma_m64n8k16_f16(d, da, db, scale_d);
  }
}
#endif
}  // namespace sm90

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
/* Stream-K fixup for a consumer thread (ct = 0..255 over both consumer
 * warpgroups) holding its part of tile t's partial sum in d. Workspace:
 * uint32 counters [tiles] (256-byte rounded, zero between launches), then
 * fp32 partials, two slots per CTA (its first and its last segment may both
 * be partial), each [BN/8][256 threads] float4 so that every access is
 * coalesced and thread ct always meets its own fragment. Every contributor
 * stores its partial and counts itself in; the one that counts last sums
 * the partials in CTA order (its own read back too), so the result does not
 * depend on which CTA finished last: launches are bit-reproducible. Nothing
 * waits for another CTA, so no co-residency is assumed.
 * Clusters (CL = 2): work units are pairs of M-tiles (t: the unit), split the
 * same way for the CTAs of a cluster (me / grid: cluster index / count); each
 * rank keeps its own counters (t * CL + rank, tiles * CL of them) and slots
 * (slot * CL + rank), so the workspace is that of CL * tiles tiles and
 * gridDim.x CTAs. */
template <int ACC, int CL = 1>
TPG_DEV bool sk_fixup(const tpg_gemm_args &a, float (&d)[ACC], int t, int tiles, int dp_tiles, int nk,
                      long long total, int ct, int me, int grid, int rank) {
  using namespace sm90;
  __shared__ int last;
  constexpr int V = ACC / 4; /* float4 per thread (a slot: BM x BN floats) */
  const long long tb = (long long)(t - dp_tiles) * nk; /* t's first iteration in the split wave */
  const int c0 = sk_cta_of(tb, total, grid), c1 = sk_cta_of(tb + nk - 1, total, grid);
  uint32_t *ctr = static_cast<uint32_t *>(a.workspace);
  float4 *part = reinterpret_cast<float4 *>(static_cast<char *>(a.workspace) + (((size_t)tiles * CL * 4 + 255) & ~(size_t)255));
  const int ci = t * CL + rank; /* this rank's counter */
  /* CTA c's slot for tile t: CTAs after c0 begin inside t (their first
   * segment, slot 0); c0 uses slot 0 only if its range begins at t. */
  const int slot0 = 2 * c0 + (sk_begin(c0, total, grid) == tb ? 0 : 1);
  auto slot = [&](int c) { return part + ((size_t)(c == c0 ? slot0 : 2 * c) * CL + rank) * (V * 256) + ct; };
  float4 *mine = slot(me);
#pragma unroll
  for (int v = 0; v < V; ++v) __stcg(mine + v * 256, make_float4(d[4 * v], d[4 * v + 1], d[4 * v + 2], d[4 * v + 3]));
  __threadfence();
  asm volatile("bar.sync 1, 256;" ::: "memory");
  if (ct == 0) {
    const uint32_t seen = atomicAdd(ctr + ci, 1u);
    last = seen == (uint32_t)(c1 - c0);
    if (last) ctr[ci] = 0; /* every contributor has counted: ready for the next launch */
  }
  asm volatile("bar.sync 1, 256;" ::: "memory");
  if (!last) return false;
  __threadfence();
#pragma unroll
  for (int i = 0; i < ACC; ++i) d[i] = 0.f;
  for (int c = c0; c <= c1; ++c) {
    const float4 *p = slot(c);
#pragma unroll
    for (int v = 0; v < V; ++v) {
      /* 8 loads in flight at a time: all 32 at once would need 128 more
       * registers than the accumulators leave (ptxas spilled) */
      if (v % 8 == 0) asm volatile("" ::: "memory");
      const float4 q = __ldcg(p + v * 256);
      d[4 * v] += q.x; d[4 * v + 1] += q.y; d[4 * v + 2] += q.z; d[4 * v + 3] += q.w;
    }
  }
  return true;
}

/* K split over a cluster (split_k TPG_SPLITK_CLUSTER, variants "_kc<S>"):
 * the S CTAs of a launch-time cluster (S, 1, 1) take one 128-row tile and
 * one of S equal K ranges each, then sum through distributed shared memory
 * instead of stream-K's global workspace. CTA q owns rows [128 q / S,
 * 128 (q + 1) / S) of the tile. After a cluster barrier (every CTA is done
 * with its ring, which now serves as the receive buffer) each CTA stores
 * the rows of its partial to their owners (remote shared-memory stores:
 * nothing waits for a round trip), into one slot per sender; after a second
 * barrier each CTA adds its S slots in rank order from its own shared memory
 * (bit-reproducible, whichever CTA was fastest), runs the epilogue and
 * stores 16 bytes a thread. Nothing is read remotely, so no CTA needs a
 * third barrier before it exits.
 * Why: the aligned split-K's fix-up moves every partial through L2 and one
 * CTA reads all S of them; here all S CTAs share the sum (what each part
 * costs: docs/gemm.md, "K over a cluster"). Stores rather than remote
 * loads: pulling the rows took as long and needs a third barrier. The sum
 * loop is not unrolled over the tile: code that runs once a launch stalls
 * on instruction fetch when it is. Slots: (128 / S + 1) rows of BN + 8 floats
 * (the pad spreads a warp's 8-row store over all banks), S of them, at most
 * 136 x 264 x 4 bytes: inside the ring. ct = 0..255 over both consumers. */
template <typename T, int BN, int ACC>
TPG_DEV void kc_reduce(const tpg_gemm_args &a, const float (&d)[ACC], uint32_t base, int m0, int o0, int c, int ct) {
  using namespace sm90;
  static_assert(ACC == BN / 2, "128-row tiles: each consumer a 64-row half of all BN columns");
  constexpr int RS = BN + 8; /* floats a slot row */
  const int rank = (int)cluster_rank(), S = (int)cluster_size(), rmax = 128 / S + 1;
  const int warp = (ct & 127) >> 5, lane = ct & 31, g = lane >> 2;
  cluster_sync(); /* every CTA of the cluster is done reading its ring */
  if (ct == 0) TPG_TRACE(9);
  /* rows g and g + 8 of this warp's 16, in their owners' slots. (16-byte
   * stores, by swapping halves with the neighbour lane, made the kernels
   * spill: 8-byte ones.) */
  const int t2 = (lane & 3) * 2;
  uint32_t dst[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int row = 64 * c + 16 * warp + g + 8 * h;
    const int q = ((row + 1) * S - 1) / 128, lr = row - 128 * q / S; /* owner, row in its slice */
    dst[h] = mapa_u32(base + (uint32_t)((rank * rmax + lr) * RS + t2) * 4u, (uint32_t)q);
  }
#pragma unroll
  for (int jj = 0; jj < BN / 8; ++jj) /* in accumulator order: each value's register is free after its store */
#pragma unroll
    for (int h = 0; h < 2; ++h) st_cluster_v2(dst[h] + 32u * jj, d[4 * jj + 2 * h], d[4 * jj + 2 * h + 1]);
  if (ct == 0) TPG_TRACE(10);
  cluster_sync(); /* every slot is written (release / acquire) */
  if (ct == 0) TPG_TRACE(11);
  const int r0 = 128 * rank / S, nr = 128 * (rank + 1) / S - r0;
  /* the ring as a generic pointer (plain loads, which the compiler may batch):
   * made here, not passed in, so that it takes no registers during the stores */
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  const float *slots = reinterpret_cast<const float *>(smem_raw + (base - smem_u32(smem_raw)));
  epi_dispatch(a.epilogue, [&](auto ec) {
    constexpr int EPI = decltype(ec)::value;
    constexpr bool SWI = EPI == TPG_EPI_SWIGLU;
    /* 8 outputs an item: 8 accumulator columns, or with SwiGLU 8 gate
     * columns and the 8 up columns after them (the W tile's 16-row groups) */
    constexpr int CH = (SWI ? BN / 2 : BN) / 8, NV = SWI ? 16 : 8, RP = 256 / CH; /* rows at a time */
    /* each thread keeps one chunk of 8 outputs (its bias read once) and walks the rows */
    const int q8 = ct % CH, n = o0 + 8 * q8;
    if (ct >= RP * CH || n >= a.n) return; /* n, N multiples of 8: all 8 in or out */
    constexpr bool HAS_B = EPI != TPG_EPI_NONE && EPI != TPG_EPI_F32_PARTIAL;
    float b[NV];
#pragma unroll
    for (int e = 0; e < NV; ++e) b[e] = 0.f;
    if constexpr (HAS_B) {
      const T *bias = static_cast<const T *>(a.bias);
      if (bias)
#pragma unroll
        for (int e = 0; e < NV; ++e) b[e] = dt<T>::to_f(bias[(e < 8 ? 0 : a.n) + n + (e & 7)]);
    }
    for (int lr = ct / CH; lr < nr; lr += RP) {
      const int m = m0 + r0 + lr;
      if (m >= a.m) break;
      const float4 *src = reinterpret_cast<const float4 *>(slots + (size_t)lr * RS + (SWI ? 16 : 8) * q8);
      float v[NV];
#pragma unroll
      for (int e = 0; e < NV; ++e) v[e] = 0.f;
      for (int q = 0; q < S; ++q) {
#pragma unroll
        for (int f = 0; f < NV / 4; ++f) {
          const float4 p = src[(size_t)q * rmax * (RS / 4) + f];
          v[4 * f] += p.x; v[4 * f + 1] += p.y; v[4 * f + 2] += p.z; v[4 * f + 3] += p.w;
        }
      }
      if constexpr (EPI == TPG_EPI_F32_PARTIAL) {
        float4 *y = reinterpret_cast<float4 *>(static_cast<float *>(a.y) + (size_t)m * a.ldy + n);
        y[0] = make_float4(v[0], v[1], v[2], v[3]);
        y[1] = make_float4(v[4], v[5], v[6], v[7]);
      } else {
        /* epi_value's formulas, with the bias held in registers; the residual
         * (which may alias y) is read before this thread writes the same 16 bytes */
        float r[8];
#pragma unroll
        for (int e = 0; e < 8; ++e) r[e] = 0.f;
        if constexpr (EPI == TPG_EPI_RESIDUAL) {
          const uint4 rv = *reinterpret_cast<const uint4 *>(static_cast<const T *>(a.residual) + (size_t)m * a.ldr + n);
          const T *rt = reinterpret_cast<const T *>(&rv);
#pragma unroll
          for (int e = 0; e < 8; ++e) r[e] = dt<T>::to_f(rt[e]);
        }
        float w[8];
#pragma unroll
        for (int e = 0; e < 8; ++e) {
          const float x = HAS_B ? v[e] + b[e] : v[e];
          if constexpr (EPI == TPG_EPI_BIAS_GELU) w[e] = gelu_tanh(x);
          else if constexpr (EPI == TPG_EPI_BIAS_SILU) w[e] = silu(x);
          else if constexpr (EPI == TPG_EPI_SWIGLU) w[e] = silu(x) * (v[8 + e] + b[8 + e]);
          else if constexpr (EPI == TPG_EPI_RESIDUAL) w[e] = x + r[e];
          else w[e] = x; /* NONE (b = 0), BIAS */
        }
        *reinterpret_cast<uint4 *>(static_cast<T *>(a.y) + (size_t)m * a.ldy + n) =
            make_uint4(dt<T>::pack2(w[0], w[1]), dt<T>::pack2(w[2], w[3]), dt<T>::pack2(w[4], w[5]),
                       dt<T>::pack2(w[6], w[7]));
      }
    }
  });
}
#endif

/* TMA = false: cp.async producer (raw pointers only). TMA = true: one
 * producer thread issues two tensor-map bulk copies a stage (maps in p).
 * CL = 2 (TMA, BM 128 only): a cluster of two CTAs takes M-tiles 2u and 2u+1
 * of the same W tile; each CTA loads its own X tile and half of the W tile,
 * multicast into both CTAs' stage (W box BN/2 rows), so L2 -> SM traffic per
 * tile drops from (BM + BN) to (BM + BN/2) rows. A stage of one CTA is then
 * written by both producers: its empty barrier counts the consumer warps of
 * both CTAs (16), and each full barrier expects the whole stage. */
/* CN (with CL = 2; "_cn2" kernels): the cluster pairs N-tiles 2u and 2u+1
 * of the same M-tile instead, so X is what the two CTAs share: each loads
 * half of the X rows (box BM/2) into both, and its own whole W tile. For
 * small M with narrow tiles X is as many bytes a stage as W (64 x 64) or
 * half of them (128 x 64), and every N-tile re-reads it from L2. */
/* SW ("_sw" kernels): the same stages, but the consumers swap the wgmma
 * operands: the W tile is the A side (64-row blocks) and the BM tokens the
 * N side, so a tile can be 16 or 32 tokens wide with no zero rows (wgmma's
 * M is 64; the unswapped 64-row tile is half zeros at M = 32) and small M
 * gets twice the tiles without splitting K. The producer and the smem
 * layout are unchanged: X box {64, BM} first, then W box {64, BN}. */
template <bool SW, int BN, int BM> struct acc_of { static constexpr int v = sm90::cfg<BN, BM>::ACC; };
template <int BN, int BM> struct acc_of<true, BN, BM> { static constexpr int v = sm90::swcfg<BN, BM>::ACC; };

template <typename T, bool TMA, int BN, int BM = 128, int CL = 1, bool CN = false, bool SW = false>
__device__ __forceinline__ void gemm_sm90_body(const tpg_gemm_args &a, const tpg_gemm_tma_args *p) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using namespace sm90;
  static_assert(TMA || BM == 128, "the cp.async producer is written for 128-row tiles");
  static_assert(CL == 1 || (CL == 2 && TMA), "clusters: TMA, 2 CTAs");
  static_assert(!CN || CL == 2, "CN: pairs of N-tiles");
  static_assert(!SW || (TMA && !CN), "SW: TMA kernels, no N-tile pairs");
  static_assert(SW || BM >= 64, "BM 32 and 16: swapped tiles only");
  constexpr int STAGES = cfg<BN, BM, TMA>::STAGES, STAGE_BYTES = cfg<BN, BM, TMA>::STAGE_BYTES;
  constexpr int A_BYTES = cfg<BN, BM, TMA>::A_BYTES, CW = cfg<BN, BM, TMA>::CW, ACC = acc_of<SW, BN, BM>::v;
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  const uint32_t base = (smem_u32(smem_raw) + 1023u) & ~1023u;
  constexpr int EPI_BUFS = cfg<BN, BM, TMA>::EPI_BUFS, EPI_BOX = cfg<BN, BM, TMA>::EPI_BOX;
  const uint32_t epi_buf = base + STAGES * STAGE_BYTES; /* 1024-aligned: STAGE_BYTES is */
  const uint32_t full_bar = epi_buf + cfg<BN, BM, TMA>::EPI_BYTES, empty_bar = full_bar + STAGES * 8;
  const int tid = threadIdx.x, wg = tid >> 7;
  if (tid == 0) TPG_TRACE(0); /* entry */
  if (tid == 0) {
    for (int s = 0; s < STAGES; ++s) {
      mbar_init(full_bar + 8 * s, TMA ? 1 : 128);  /* expect_tx arrive, or one cp.async arrive a producer thread */
      mbar_init(empty_bar + 8 * s, 8 * CL);       /* lane 0 of each consumer warp (of each CTA) releases */
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  /* with a cluster, the peer's barriers must be initialised before anything
   * is multicast into or arrives at them */
  if constexpr (CL > 1) cluster_sync();
  else __syncthreads();
  if (tid == 0) TPG_TRACE(7); /* barriers initialised, CTA (cluster) synchronised */
  const int rank = CL > 1 ? (int)cluster_rank() : 0;
  /* K split over a launch-time cluster (kc_reduce): the 128-row unswapped
   * one-CTA kernels only; the cluster's kcs CTAs share one tile, CTA kcr
   * taking K range kcr of kcs */
  constexpr bool KC_OK = TMA && BM == 128 && CL == 1 && !SW && !CN;
  const bool kc = KC_OK && a.split_k == TPG_SPLITK_CLUSTER;
  const int kcs = kc ? (int)cluster_size() : 1, kcr = kc ? (int)cluster_rank() : 0;
  /* more ranges than K blocks would leave a CTA without a partial to give
   * and its peers waiting at kc_reduce's barriers: the host never launches
   * that (tpg_gemm_select_variant); a launch error rather than a hang */
  if (kc && kcs > (a.k + BK - 1) / BK) __trap();
  const int unit0 = (int)blockIdx.x / (CL * kcs), units = (int)gridDim.x / (CL * kcs); /* this cluster, clusters */

  const int M = a.m, N = a.n, K = a.k;
  const bool swiglu = a.epilogue == TPG_EPI_SWIGLU;
  const int out_n = swiglu ? BN / 2 : BN;  /* outputs a tile produces */
  /* tiles here are work units: CL M-tiles of one W tile (a cluster's), or
   * with CN CL N-tiles of one X tile */
  constexpr int CLM = CN ? 1 : CL, CLN = CN ? CL : 1;
  const int mt = (M + BM * CLM - 1) / (BM * CLM), nt = (N + out_n * CLN - 1) / (out_n * CLN), tiles = mt * nt;
  const int nk = (K + BK - 1) / BK;
  /* The CTA's work as segments: tile t, K blocks [kb0, kb1). Without
   * stream-K, whole tiles t = blockIdx.x, + gridDim.x, ... With it
   * (a.split_k == TPG_SPLITK_STREAM; TMA kernels, the only ones the
   * selector gives it), the full waves still go whole tiles at a time
   * (tiles [0, dp_tiles)), and only the last, partial wave's iterations
   * g = (t - dp_tiles) * nk + kb are split evenly: this CTA's [g0, g1),
   * in tile order. With fewer tiles than CTAs that is all of them. */
  const bool sk = TMA && a.split_k == TPG_SPLITK_STREAM && a.workspace != nullptr;
  /* kc: no whole tiles; the one segment is K range kcr of kcs of the
   * cluster's tile, written as split-wave iterations (g0, g1 below): the
   * host launches tiles x kcs CTAs with kcs <= nk, so every range is
   * non-empty (kc_reduce reads every CTA's partial) and a cluster has one
   * tile (a second would find the ring holding partials) */
  const int dp_tiles = sk ? tiles / units * units : kc ? 0 : tiles;
  /* 32-bit iteration counts: the selector keeps tiles * nk < 2^31 */
  const long long total = (long long)(tiles - dp_tiles) * nk;
  /* The split wave goes to the first sgrid CTAs, at least one iteration each:
   * with fewer iterations than CTAs (e.g. 1 leftover unit x 16 K-blocks on 66
   * clusters) splitting over all of them left CTAs with empty ranges between
   * a tile's contributors, which the fix-up counted and waited for: the tile
   * was never written (gemm_bench --check-only checks such a shape). */
  const int sgrid = total < units ? (int)total : units;
  const bool kc_tile = kc && unit0 < tiles;
  const int g0 = kc_tile ? unit0 * nk + nk * kcr / kcs : sk && unit0 < sgrid ? (int)sk_begin(unit0, total, sgrid) : 0;
  const int g1 = kc_tile ? unit0 * nk + nk * (kcr + 1) / kcs
                         : sk && unit0 < sgrid ? (int)sk_begin(unit0 + 1, total, sgrid) : 0;
  /* seg.next(): the next segment of this CTA; false when done. */
  struct segs {
    int g, g1, t, dp_tiles, nk, stride;
    TPG_DEV bool next(int &tile, int &kb0, int &kb1) {
      if (t < dp_tiles) {
        tile = t;
        kb0 = 0;
        kb1 = nk;
        t += stride;
        return true;
      }
      if (g >= g1) return false;
      const int tl = g / nk;
      tile = dp_tiles + tl;
      kb0 = g - tl * nk;
      kb1 = min(nk, kb0 + (g1 - g));
      g += kb1 - kb0;
      return true;
    }
  };
  const segs seg0 = {g0, g1, unit0, dp_tiles, nk, units};

  if (wg == 0) {
    /* ---------------- producer warpgroup ---------------- */
    asm volatile("setmaxnreg.dec.sync.aligned.u32 40;");
    if (tid == 0) TPG_TRACE(8); /* producer's registers handed back */
    if constexpr (TMA) {
      if (tid == 0) {
        int it = 0;
        segs sg = seg0;
        for (int t, kb0, kb1; sg.next(t, kb0, kb1);) {
          int mb, nb;
          tile_coords(t, mt, nt, mb, nb);
          mb = mb * CLM + (CN ? 0 : rank);
          nb = nb * CLN + (CN ? rank : 0);
          for (int kb = kb0; kb < kb1; ++kb, ++it) {
            const int s = it % STAGES;
            mbar_wait(empty_bar + 8 * s, ((it / STAGES) & 1) ^ 1);
            const uint32_t st = base + s * STAGE_BYTES, fb = full_bar + 8 * s;
            if (it == 0) TPG_TRACE(1); /* first copy issued */
            mbar_expect_tx(fb, STAGE_BYTES);  /* OOB parts of a box count too (zero-filled) */
            if constexpr (CN) {
              /* this rank's half of the X rows, into both CTAs (BM/2 rows: whole
               * 1024-byte atoms); the W tile is this CTA's own */
              tma_load_2d_mc(st + rank * (BM / 2) * 128, &p->tx, fb, kb * BK, mb * BM + rank * (BM / 2), 3);
              if (swiglu) tma_load_4d(st + A_BYTES, &p->tw, fb, kb * BK, 0, 0, nb * (BN / 16));
              else tma_load_2d(st + A_BYTES, &p->tw, fb, kb * BK, nb * BN);
            } else if constexpr (CL > 1) {
              tma_load_2d(st, &p->tx, fb, kb * BK, mb * BM);
              /* this rank's half of the W rows, into both CTAs (whole 1024-byte atoms) */
              const uint32_t wd = st + A_BYTES + rank * (BN / CL) * 128;
              if (swiglu) tma_load_4d_mc(wd, &p->tw, fb, kb * BK, 0, 0, nb * (BN / 16) + rank * (BN / 16 / CL), 3);
              else tma_load_2d_mc(wd, &p->tw, fb, kb * BK, nb * BN + rank * (BN / CL), 3);
            } else {
              tma_load_2d(st, &p->tx, fb, kb * BK, mb * BM);
              if (swiglu) tma_load_4d(st + A_BYTES, &p->tw, fb, kb * BK, 0, 0, nb * (BN / 16));
              else tma_load_2d(st + A_BYTES, &p->tw, fb, kb * BK, nb * BN);
            }
          }
        }
      }
      /* a cluster CTA must not exit while its peer may still multicast into
       * it or arrive at its barriers */
      if constexpr (CL > 1) cluster_sync();
      /* kc: every thread of the cluster takes part in kc_reduce's two barriers */
      if constexpr (KC_OK)
        if (kc) {
          cluster_sync();
          cluster_sync();
        }
      return;
    }
    const int row = tid >> 3, j = tid & 7;          /* rows row + 16*i, 16-byte chunk j */
    const uint32_t soff = row * 128 + ((j ^ (row & 7)) << 4);
    const T *X = static_cast<const T *>(a.x), *W = static_cast<const T *>(a.w);
    int it = 0;
    segs sg = seg0;
    for (int t, kb0, kb1; sg.next(t, kb0, kb1);) {
      int mb, nb;
      tile_coords(t, mt, nt, mb, nb);
      const int m0 = mb * BM, o0 = nb * out_n;
      int ob, rb, rstep;
      if (swiglu) {  /* smem rows 16p+0..7: gate of outputs o0+8p.., 16p+8..15: their up rows */
        ob = o0 + (row & 7);
        rb = (row >> 3) ? N + ob : ob;
        rstep = 8;
      } else {
        ob = o0 + row;
        rb = ob;
        rstep = 16;
      }
      const T *xa = X + (size_t)(m0 + row) * a.ldx + j * 8;
      const T *wb = W + (size_t)rb * a.ldw + j * 8;
      for (int kb = kb0; kb < kb1; ++kb, ++it) {
        const int s = it % STAGES;
        mbar_wait(empty_bar + 8 * s, ((it / STAGES) & 1) ^ 1);
        const uint32_t st = base + s * STAGE_BYTES + soff;
        const bool kin = kb * BK + j * 8 < K;
#pragma unroll
        for (int i = 0; i < BM / 16; ++i) {
          const bool v = kin && (m0 + row + 16 * i < M);
          cp_async16(st + i * 16 * 128, v ? xa + (size_t)16 * i * a.ldx + kb * BK : X, v);
        }
#pragma unroll
        for (int i = 0; i < BN / 16; ++i) {
          const bool v = kin && (ob + rstep * i < N);
          cp_async16(st + A_BYTES + i * 16 * 128, v ? wb + (size_t)rstep * i * a.ldw + kb * BK : W, v);
        }
        cp_async_mbar_arrive(full_bar + 8 * s);
      }
    }
    asm volatile("cp.async.wait_all;" ::: "memory");  /* no copy outlives its thread */
  } else {
    /* ---------------- consumer warpgroups ---------------- */
    asm volatile("setmaxnreg.inc.sync.aligned.u32 232;");
    const int c = wg - 1, ct = tid - 128 * wg, warp = ct >> 5, lane = ct & 31;
    const int g = lane >> 2, t2 = (lane & 3) * 2;
    /* a stage is free once every consumer warp of every CTA writing it is done */
    auto release = [](uint32_t bar) {
      if constexpr (CL > 1) {
#pragma unroll
        for (int r = 0; r < CL; ++r) mbar_arrive_cluster(bar, r);
      } else {
        mbar_arrive(bar);
      }
    };
    float d[ACC];
#pragma unroll
    for (int i = 0; i < ACC; ++i) d[i] = 0.f;
    int it = 0;
    int eb = 0; /* this consumer's epilogue boxes so far (staging ring position) */
    segs sg = seg0;
    for (int t, kb0, kb1; sg.next(t, kb0, kb1);) {
      int mb, nb;
      tile_coords(t, mt, nt, mb, nb);
      mb = mb * CLM + (CN ? 0 : rank);
      nb = nb * CLN + (CN ? rank : 0);
      const int m0 = mb * BM, o0 = nb * out_n;
      if (ct == 0) TPG_TRACE(6); /* (last) segment's main loop starts */
      for (int kb = kb0; kb < kb1; ++kb, ++it) {
        const int s = it % STAGES;
        mbar_wait(full_bar + 8 * s, (it / STAGES) & 1);
        if (it == 0 && ct == 0) TPG_TRACE(2); /* first stage landed */
        /* cp.async writes are generic-proxy writes; wgmma reads through the async proxy */
        if constexpr (!TMA) asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
        const uint32_t st = base + s * STAGE_BYTES;
        if constexpr (SW) {
          /* A = W rows (this consumer's BN/2, or all 64 with BN 64), B = the
           * tokens (all BM, or this consumer's BM/2 with BN 64); both offsets
           * are whole 1024-byte swizzle atoms (8 rows) */
          constexpr int MW = swcfg<BN, BM>::MW, TN = swcfg<BN, BM>::TN;
          const uint64_t dw = make_desc(st + A_BYTES + (BN >= 128 ? c * (BN / 2) * 128 : 0));
          const uint64_t dx = make_desc(st + (BN >= 128 ? 0 : c * (BM / 2) * 128));
          wgmma_fence();
#pragma unroll
          for (int kk = 0; kk < BK / 16; ++kk)
#pragma unroll
            for (int mw = 0; mw < MW; ++mw)
              wgmma_tile<T, TN>(*reinterpret_cast<float(*)[TN / 2]>(d + mw * (TN / 2)),
                                dw + mw * ((64 * 128) >> 4) + 2 * kk, dx + 2 * kk, (kb != kb0) | (kk != 0));
          wgmma_commit();
        } else {
        /* BM 128: consumer c takes X rows 64c.. and all W rows; BM 64: the
         * same X rows and W rows CW*c.. (CW*128 bytes: whole swizzle atoms) */
        const uint64_t da = make_desc(st + (BM == 128 ? c * (64 * 128) : 0));
        const uint64_t db = make_desc(st + A_BYTES + (BM == 128 ? 0 : c * (CW * 128)));
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < BK / 16; ++kk)
          wgmma_tile<T, CW>(d, da + 2 * kk, db + 2 * kk, (kb != kb0) | (kk != 0));
        wgmma_commit();
        }
        wgmma_wait<1>();  /* the previous stage's wgmmas are done: release it */
        if (kb > kb0 && lane == 0) release(empty_bar + 8 * ((it - 1) % STAGES));
      }
      wgmma_wait<0>();
      if (ct == 0) TPG_TRACE(3); /* (last) segment's main loop done */
      if (lane == 0) release(empty_bar + 8 * ((it - 1) % STAGES));
      if constexpr (KC_OK)
        if (kc) {
          /* (rank and size read again there: kept live across the main loop
           * they made the 128- and 192-wide kernels spill) */
          kc_reduce<T, BN, ACC>(a, d, base, m0, o0, c, tid - 128);
          if (ct == 0) TPG_TRACE(4);
          continue;
        }
      /* A tile split across CTAs: only the last contributor to finish goes on
       * to the epilogue, with the whole sum in d. */
      if (sk && (kb0 != 0 || kb1 != nk) &&
          !sk_fixup<ACC, CL>(a, d, t, tiles, dp_tiles, nk, total, tid - 128, unit0, sgrid, rank)) {
        if (ct == 0) TPG_TRACE(4);
        continue;
      }
      if (ct == 0) TPG_TRACE(4); /* fixup done (or none) */

      /* Epilogue: d[4j+2h], d[4j+2h+1] = row warp*16 + g + 8h, cols 8j + t2 + {0,1}
       * of the consumer's part: rows from 64c (BM 128) or columns from the
       * outputs of W rows CW*c.. (BM 64; SwiGLU: CW/2 outputs).
       * One compile-time epilogue per branch keeps the code that a tile runs
       * small enough for the instruction cache. */
      if constexpr (SW) {
        /* d[mw TN/2 + 4j + 2h + e] = W row wr + g + 8h of the tile (wr below),
         * token 8j + t2 + e of this consumer's. With SwiGLU the W rows come in
         * 16-row groups (8 gate rows, then the same outputs' 8 up rows), so
         * h = 0 holds a gate value and h = 1 its up value: output wr/2 + g. */
        constexpr int MW = swcfg<BN, BM>::MW, TN = swcfg<BN, BM>::TN;
        const int tk0 = m0 + (BN >= 128 ? 0 : c * (BM / 2));
        epi_dispatch(a.epilogue, [&](auto ec) {
          constexpr int EPI = decltype(ec)::value;
#pragma unroll
          for (int mw = 0; mw < MW; ++mw) {
            const int wr = (BN >= 128 ? c * (BN / 2) : 0) + mw * 64 + warp * 16;
            const float *dm = d + mw * (TN / 2);
            if constexpr (EPI == TPG_EPI_SWIGLU) {
              const int n = o0 + wr / 2 + g;
              if (n < N) {
#pragma unroll
                for (int j = 0; j < TN / 8; ++j)
#pragma unroll
                  for (int e = 0; e < 2; ++e) {
                    const int m = tk0 + 8 * j + t2 + e;
                    if (m < M) epi_store1<T, EPI>(a, m, n, dm[4 * j + e], dm[4 * j + 2 + e]);
                  }
              }
            } else {
#pragma unroll
              for (int h = 0; h < 2; ++h) {
                const int n = o0 + wr + g + 8 * h;
                if (n < N) {
#pragma unroll
                  for (int j = 0; j < TN / 8; ++j)
#pragma unroll
                    for (int e = 0; e < 2; ++e) {
                      const int m = tk0 + 8 * j + t2 + e;
                      if (m < M) epi_store1<T, EPI>(a, m, n, dm[4 * j + 2 * h + e], 0.f);
                    }
                }
              }
            }
          }
        });
        continue;
      }
      epi_dispatch(a.epilogue, [&](auto ec) {
        constexpr int EPI = decltype(ec)::value;
        constexpr int OUTC = EPI == TPG_EPI_SWIGLU ? CW / 2 : CW; /* outputs a row of this consumer's part */
        if constexpr (cfg<BN, BM, TMA>::STAGED && EPI != TPG_EPI_F32_PARTIAL && OUTC % 32 == 0) {
          /* Staged: the part goes out as 64-row x 32-column boxes, each
           * written to a staging buffer (64-byte rows, 64-byte swizzle: the 8
           * rows a warp's store touches hit 8 different 16-byte chunks, no
           * bank conflicts) and handed to TMA, which stores it while the
           * warpgroup goes on to the next box and the next tile's wgmmas.
           * Stores straight from registers kept the tensor pipe idle for the
           * whole epilogue (docs/kernels.md, "Epilogue through TMA stores").
           * One barrier a box: before it, the committing thread waits until
           * at most EPI_BUFS - 2 stores are still reading, so the box after
           * this one finds its buffer free. Rows >= M and columns >= N are
           * clipped by the Y map; their values are not computed. */
          static_assert(!cfg<BN, BM, TMA>::STAGED || BM == 128, "staged: each consumer a 64-row half, all outputs");
          const int r0 = c * 64, oc = o0;
          if (m0 + r0 < M) {
            const uint32_t ring = epi_buf + c * (EPI_BUFS * EPI_BOX);
#pragma unroll
            for (int sb = 0; sb < OUTC / 32; ++sb) {
              const uint32_t buf = ring + (eb % EPI_BUFS) * EPI_BOX;
#pragma unroll
              for (int h = 0; h < 2; ++h) {
                const int r = warp * 16 + g + 8 * h, m = m0 + r0 + r;
#pragma unroll
                for (int jl = 0; jl < 4; ++jl) {
                  const int n = oc + sb * 32 + jl * 8 + t2;
                  float v0 = 0.f, v1 = 0.f;
                  if (m < M && n < N) {
                    if constexpr (EPI == TPG_EPI_SWIGLU) {
                      const int jj = 2 * (4 * sb + jl); /* gate block jj, up block jj + 1 */
                      v0 = epi_value<T, EPI>(a, m, n, d[4 * jj + 2 * h], d[4 * (jj + 1) + 2 * h]);
                      v1 = epi_value<T, EPI>(a, m, n + 1, d[4 * jj + 2 * h + 1], d[4 * (jj + 1) + 2 * h + 1]);
                    } else {
                      const int jj = 4 * sb + jl;
                      v0 = epi_value<T, EPI>(a, m, n, d[4 * jj + 2 * h], 0.f);
                      v1 = epi_value<T, EPI>(a, m, n + 1, d[4 * jj + 2 * h + 1], 0.f);
                    }
                  }
                  st_shared_u32(buf + r * 64 + ((jl ^ ((r >> 1) & 3)) << 4) + t2 * 2, dt<T>::pack2(v0, v1));
                }
              }
              asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); /* generic writes -> TMA reads */
              if (ct == 0) bulk_wait_read<EPI_BUFS - 2>();
              wg_bar(2 + c);
              if (ct == 0) {
                tma_store_2d(&p->ty, buf, oc + sb * 32, m0 + r0);
                bulk_commit();
              }
              ++eb;
            }
          }
        } else {
          /* Straight from registers: the cp.async kernel (no maps), fp32
           * partials, and SwiGLU parts narrower than a box. */
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const int m = m0 + (BM == 128 ? c * 64 : 0) + warp * 16 + g + 8 * h;
            const int oc = o0 + (BM == 128 ? 0 : c * (swiglu ? CW / 2 : CW));
            if (m < M) {
              if constexpr (EPI == TPG_EPI_SWIGLU) {
#pragma unroll
                for (int jj = 0; jj < CW / 8; jj += 2) {
                  const int n = oc + (jj / 2) * 8 + t2;
                  if (n < N) epi_store2<T, EPI>(a, m, n, d[4 * jj + 2 * h], d[4 * jj + 2 * h + 1],
                                                d[4 * (jj + 1) + 2 * h], d[4 * (jj + 1) + 2 * h + 1]);
                }
              } else {
#pragma unroll
                for (int jj = 0; jj < CW / 8; ++jj) {
                  const int n = oc + jj * 8 + t2;
                  if (n < N) epi_store2<T, EPI>(a, m, n, d[4 * jj + 2 * h], d[4 * jj + 2 * h + 1], 0.f, 0.f);
                }
              }
            }
          }
        }
      });
    }
    /* the staging smem must outlive the stores' reads, and the kernel's
     * writes must be complete when it ends */
    if constexpr (cfg<BN, BM, TMA>::STAGED)
      if (ct == 0) bulk_wait_all();
    if (ct == 0) TPG_TRACE(5); /* consumer 0 done */
    if constexpr (CL > 1) cluster_sync(); /* see the producer's */
    if constexpr (KC_OK)
      if (kc && (int)blockIdx.x / (int)cluster_size() >= tiles) { /* a cluster without a tile: meet kc_reduce's barriers */
        cluster_sync();
        cluster_sync();
      }
  }
#else
  __trap();  /* not sm_90a: the selector never launches this kernel here */
#endif
}

}  // namespace tpg

/* Entry points. tpg_gemm_sm90[tma]_<dt>[_m64][_n128|_n64]: BM = 128 X rows
 * a tile (64 with _m64), BN = 256 W rows a tile (128 / 64 with the suffix).
 * grid = min(tiles, SMs), tiles = ceil(M/BM) * ceil(N/BN) (ceil(N/(BN/2)) for
 * SWIGLU); block 384; dynamic smem tpg::sm90::cfg<BN, BM, TMA>::SMEM_BYTES
 * (TMA, with the epilogue staging: 230464 for BN=256, 197696 for BN=192,
 * 230496 for BN=128, 230528 for BN=64; BM 64: 164928 / 197760 / 132224;
 * the cp.async kernel 197696). The tma kernels take tpg_gemm_tma_args
 * (tensor maps encoded on the host, box {64, BM} for X, {64, BN} for W,
 * {32, 64} for Y; see tpg_tma_args.h). */
#define TPG_SM90(NAME, T, TMA, BN)                                                     \
  extern "C" __global__ void __launch_bounds__(384, 1) NAME(const __grid_constant__ tpg_gemm_args a) { \
    tpg::pdl_wait(); /* PDL secondary: before anything (common.cuh) */                 \
    tpg::pdl_launch_dependents();                                                      \
    tpg::gemm_sm90_body<T, TMA, BN>(a, nullptr);                                       \
  }
#define TPG_SM90TMA(NAME, T, BN) TPG_SM90TMA_BM(NAME, T, 128, BN)
#define TPG_SM90TMA_BM(NAME, T, BM, BN)                                                \
  extern "C" __global__ void __launch_bounds__(384, 1) NAME(const __grid_constant__ tpg_gemm_tma_args p) { \
    tpg::pdl_wait();                                                                   \
    tpg::pdl_launch_dependents();                                                      \
    tpg::gemm_sm90_body<T, true, BN, BM>(p.a, &p);                                     \
  }
TPG_SM90(tpg_gemm_sm90_bf16, __nv_bfloat16, false, 256)
TPG_SM90(tpg_gemm_sm90_f16, __half, false, 256)
TPG_SM90TMA(tpg_gemm_sm90tma_bf16, __nv_bfloat16, 256)
TPG_SM90TMA(tpg_gemm_sm90tma_f16, __half, 256)
TPG_SM90TMA(tpg_gemm_sm90tma_bf16_n128, __nv_bfloat16, 128)
TPG_SM90TMA(tpg_gemm_sm90tma_f16_n128, __half, 128)
/* Candidates for the tuner and gemm_bench A/B (not picked by the heuristic):
 * BN = 64 (more tiles for small N), and 64-row tiles for M <= 64 with BN 256 /
 * 128 / 64 (_m64[_nBN]; X box {64, 64}). */
/* BN = 192 (4 stages): tile counts between the 256 and 128 ones, for N where
 * those leave a wave badly filled (e.g. N = 6144 at M = 512: 96 tiles of
 * 128 x 256 on 132 SMs, 128 of 128 x 192). */
TPG_SM90TMA(tpg_gemm_sm90tma_bf16_n192, __nv_bfloat16, 192)
TPG_SM90TMA(tpg_gemm_sm90tma_f16_n192, __half, 192)
TPG_SM90TMA(tpg_gemm_sm90tma_bf16_n64, __nv_bfloat16, 64)
TPG_SM90TMA(tpg_gemm_sm90tma_f16_n64, __half, 64)
TPG_SM90TMA_BM(tpg_gemm_sm90tma_bf16_m64, __nv_bfloat16, 64, 256)
TPG_SM90TMA_BM(tpg_gemm_sm90tma_f16_m64, __half, 64, 256)
TPG_SM90TMA_BM(tpg_gemm_sm90tma_bf16_m64_n128, __nv_bfloat16, 64, 128)
TPG_SM90TMA_BM(tpg_gemm_sm90tma_f16_m64_n128, __half, 64, 128)
TPG_SM90TMA_BM(tpg_gemm_sm90tma_bf16_m64_n64, __nv_bfloat16, 64, 64)
TPG_SM90TMA_BM(tpg_gemm_sm90tma_f16_m64_n64, __half, 64, 64)
/* Clusters of two CTAs along M sharing the W tile through TMA multicast
 * (_c2; BM 128, BN 256 / 128; W box {64, BN/2}, SWIGLU {64, 8, 2, BN/32}).
 * grid = 2 * min(units, SMs / 2), units = ceil(M/256) * ceil(N/BN) (the
 * grid must be even: the cluster shape is compiled in); stream-K splits
 * units over the clusters, workspace tpg_sk_workspace_bytes(2 * units,
 * grid, BN). */
/* the sm_80 pass (where these compile to a trap) rejects the attribute */
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 900
#define TPG_CLUSTER2 __cluster_dims__(2, 1, 1)
#else
#define TPG_CLUSTER2
#endif
#define TPG_SM90TMA_C2(NAME, T, BN)                                                    \
  extern "C" __global__ void TPG_CLUSTER2 __launch_bounds__(384, 1)                     \
      NAME(const __grid_constant__ tpg_gemm_tma_args p) {                              \
    tpg::pdl_wait();                                                                   \
    tpg::pdl_launch_dependents();                                                      \
    tpg::gemm_sm90_body<T, true, BN, 128, 2>(p.a, &p);                                 \
  }
TPG_SM90TMA_C2(tpg_gemm_sm90tma_bf16_c2, __nv_bfloat16, 256)
TPG_SM90TMA_C2(tpg_gemm_sm90tma_bf16_n192_c2, __nv_bfloat16, 192)
TPG_SM90TMA_C2(tpg_gemm_sm90tma_f16_n192_c2, __half, 192)
TPG_SM90TMA_C2(tpg_gemm_sm90tma_f16_c2, __half, 256)
TPG_SM90TMA_C2(tpg_gemm_sm90tma_bf16_n128_c2, __nv_bfloat16, 128)
TPG_SM90TMA_C2(tpg_gemm_sm90tma_f16_n128_c2, __half, 128)
/* Clusters of two along N sharing the X tile (_cn2; see gemm_sm90_body's
 * CN): X box {64, BM/2}, W box {64, BN} (SWIGLU {64, 8, 2, BN/16}); grid and
 * workspace as _c2 with units = ceil(M/BM) * ceil(N/(2 BN)). Candidates for
 * M <= 256 with narrow tiles, where X is re-read once per N-tile. */
#define TPG_SM90TMA_CN2(NAME, T, BM, BN)                                               \
  extern "C" __global__ void TPG_CLUSTER2 __launch_bounds__(384, 1)                     \
      NAME(const __grid_constant__ tpg_gemm_tma_args p) {                              \
    tpg::pdl_wait();                                                                   \
    tpg::pdl_launch_dependents();                                                      \
    tpg::gemm_sm90_body<T, true, BN, BM, 2, true>(p.a, &p);                            \
  }
TPG_SM90TMA_CN2(tpg_gemm_sm90tma_bf16_m64_n64_cn2, __nv_bfloat16, 64, 64)
TPG_SM90TMA_CN2(tpg_gemm_sm90tma_f16_m64_n64_cn2, __half, 64, 64)
TPG_SM90TMA_CN2(tpg_gemm_sm90tma_bf16_m64_n128_cn2, __nv_bfloat16, 64, 128)
TPG_SM90TMA_CN2(tpg_gemm_sm90tma_f16_m64_n128_cn2, __half, 64, 128)
TPG_SM90TMA_CN2(tpg_gemm_sm90tma_bf16_n64_cn2, __nv_bfloat16, 128, 64)
TPG_SM90TMA_CN2(tpg_gemm_sm90tma_f16_n64_cn2, __half, 128, 64)
TPG_SM90TMA_CN2(tpg_gemm_sm90tma_bf16_n128_cn2, __nv_bfloat16, 128, 128)
TPG_SM90TMA_CN2(tpg_gemm_sm90tma_f16_n128_cn2, __half, 128, 128)
/* _c2 with 64-row tiles (M = 65..256): the pair's two 64-row M-tiles share
 * the W tile as the 128-row _c2 do (cuBLASLt runs 64-token tiles in clusters
 * at M = 128: ncu, R1). */
#define TPG_SM90TMA_M64_C2(NAME, T, BN)                                                \
  extern "C" __global__ void TPG_CLUSTER2 __launch_bounds__(384, 1)                     \
      NAME(const __grid_constant__ tpg_gemm_tma_args p) {                              \
    tpg::pdl_wait();                                                                   \
    tpg::pdl_launch_dependents();                                                      \
    tpg::gemm_sm90_body<T, true, BN, 64, 2>(p.a, &p);                                  \
  }
TPG_SM90TMA_M64_C2(tpg_gemm_sm90tma_bf16_m64_n64_c2, __nv_bfloat16, 64)
TPG_SM90TMA_M64_C2(tpg_gemm_sm90tma_f16_m64_n64_c2, __half, 64)
TPG_SM90TMA_M64_C2(tpg_gemm_sm90tma_bf16_m64_n128_c2, __nv_bfloat16, 128)
TPG_SM90TMA_M64_C2(tpg_gemm_sm90tma_f16_m64_n128_c2, __half, 128)
/* Swapped tiles (_sw<BM>_n<BN>; see gemm_sm90_body's SW): BM = 16, 32 or 64
 * tokens by BN = 64, 128 or 256 W rows, X box {64, BM}, W box {64, BN}
 * (SWIGLU {64, 8, 2, BN/16}); grid, stages and workspace as the unswapped
 * kernel with the same BM x BN. _c2: pairs of token tiles sharing the W tile
 * by multicast (W box {64, BN/2}), as the 128-row _c2. Candidates for
 * M <= 128, where the token side of a tile is what cuBLASLt shrinks. */
#define TPG_SM90TMA_SW(NAME, T, BM, BN)                                                \
  extern "C" __global__ void __launch_bounds__(384, 1) NAME(const __grid_constant__ tpg_gemm_tma_args p) { \
    tpg::pdl_wait();                                                                   \
    tpg::pdl_launch_dependents();                                                      \
    tpg::gemm_sm90_body<T, true, BN, BM, 1, false, true>(p.a, &p);                     \
  }
#define TPG_SM90TMA_SW_C2(NAME, T, BM, BN)                                             \
  extern "C" __global__ void TPG_CLUSTER2 __launch_bounds__(384, 1)                     \
      NAME(const __grid_constant__ tpg_gemm_tma_args p) {                              \
    tpg::pdl_wait();                                                                   \
    tpg::pdl_launch_dependents();                                                      \
    tpg::gemm_sm90_body<T, true, BN, BM, 2, false, true>(p.a, &p);                     \
  }
#define TPG_SW_BOTH(BM, BN)                                                            \
  TPG_SM90TMA_SW(tpg_gemm_sm90tma_bf16_sw##BM##_n##BN, __nv_bfloat16, BM, BN)          \
  TPG_SM90TMA_SW(tpg_gemm_sm90tma_f16_sw##BM##_n##BN, __half, BM, BN)
#define TPG_SW_BOTH_C2(BM, BN)                                                         \
  TPG_SM90TMA_SW_C2(tpg_gemm_sm90tma_bf16_sw##BM##_n##BN##_c2, __nv_bfloat16, BM, BN)  \
  TPG_SM90TMA_SW_C2(tpg_gemm_sm90tma_f16_sw##BM##_n##BN##_c2, __half, BM, BN)
TPG_SW_BOTH(16, 64)
TPG_SW_BOTH(16, 128)
TPG_SW_BOTH(32, 64)
TPG_SW_BOTH(32, 128)
TPG_SW_BOTH(32, 256)
TPG_SW_BOTH(64, 64)
TPG_SW_BOTH(64, 128)
TPG_SW_BOTH(64, 256)
TPG_SW_BOTH_C2(32, 64)
TPG_SW_BOTH_C2(32, 128)
TPG_SW_BOTH_C2(64, 64)
TPG_SW_BOTH_C2(64, 128)
