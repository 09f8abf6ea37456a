// bench.cc - --bench: the step's median time over --iters launches at one
// shape, or at each shape of --sweep, beside its floor (this rank's weights
// and KV cache read once at 4.3 TB/s); bench.json with --out.
#include <algorithm>

#include "examples/llama/run/rank.h"

namespace llama {

int run_bench(Options &o, RankState &st) {
  Rank &R = st.R;
  std::vector<std::pair<int, int>> shapes;  // (batch, ctx)
  if (o.sweep) {
    for (int ctx : {512, 4096})
      for (int b : {1, 8, 32}) shapes.push_back({b, ctx});
  } else {
    shapes.push_back({o.c.batch, o.c.ctx});
  }
  std::string json = "[\n", err;
  const double bw = 4.3e12;
  for (size_t i = 0; i < shapes.size(); i++) {
    Config c = o.c;
    c.batch = shapes[i].first;
    c.ctx = shapes[i].second;
    c.steps = 1;
    c.max_ctx = c.ctx + 1;
    Source src{"", c.seed};  // the timing does not depend on the values
    StepGuard g;
    LmHead lm{};
    CHECK_OK(alloc_caches(c, R, &g.a, &err) || load_caches(c, R, src, g.a, &err));
    CHECK_OK(alloc_step_io(c, &g.s, &err) || build_step(c, R, st.w, g.a, c.ctx + 1, &lm, &g.s, &err));
    CHECK_OK(warm_lm_head(R, st.w, &lm, &g.s, &err) || create_step_graph(R, &g.s, &err));
    if (R.rank == 0 && i == 0 && print_graph_info(g.s)) return 1;
    CHECK_OK(load_input(c, src, 0, g.s.d_x, R.stream, &err));
    for (int b = 0; b < c.batch; b++) g.s.h_pos[b] = c.ctx;
    std::vector<cudaEvent_t> ev(2 * o.iters);
    for (auto &e : ev) CHECK_CUDA(cudaEventCreate(&e));
    for (int it = 0; it < o.warmup; it++) CHECK_TPG(tpg_graph_launch(g.s.graph, R.stream));
    CHECK_TPG(wait_rank(R));
    for (int it = 0; it < o.iters; it++) {
      CHECK_CUDA(cudaEventRecord(ev[2 * it], R.stream));
      CHECK_TPG(tpg_graph_launch(g.s.graph, R.stream));
      CHECK_CUDA(cudaEventRecord(ev[2 * it + 1], R.stream));
    }
    CHECK_TPG(wait_rank(R));
    std::vector<float> t(o.iters);
    for (int it = 0; it < o.iters; it++) CHECK_CUDA(cudaEventElapsedTime(&t[it], ev[2 * it], ev[2 * it + 1]));
    for (auto &e : ev) cudaEventDestroy(e);
    std::sort(t.begin(), t.end());
    const double med_us = 1e3 * t[o.iters / 2];
    // The floor: this rank's weights and the KV cache it reads (ctx + 1
    // positions of its heads, k and v), once, at 4.3 TB/s.
    const double kv = (double)c.layers * c.batch * kv_heads(c, R) * (c.ctx + 1) * c.head_dim * 2 * 2;
    const double floor_us = (st.w.bytes + kv) / bw * 1e6;
    if (R.rank == 0) {
      static const char *const modes[] = {"", " capture", " eager"};
      char knobs[96] = "";
      if (R.attn_bps) std::snprintf(knobs, sizeof knobs, " bps %d", R.attn_bps);
      std::printf("bench: %s layers %d TP %d%s%s%s%s batch %2d ctx %4d: %9.1f us/token  %7.1f us/layer  floor %7.1f us/layer"
                  "  (%.2fx floor)\n",
                  c.hidden == 8192 ? "70b" : c.hidden == 4096 ? "8b" : "custom", c.layers, R.nranks,
                  R.pdl ? " pdl" : "", modes[R.mode], R.attn == Rank::ATTN_FMA ? " attn-fma" : R.attn == Rank::ATTN_TC ? " attn-tc" : "", knobs, c.batch, c.ctx,
                  med_us, med_us / c.layers, floor_us / c.layers, med_us / floor_us);
      char line[768];
      std::snprintf(line, sizeof line,
                    "  {\"hidden\": %d, \"heads\": %d, \"kv_heads\": %d, \"ffn\": %d, \"layers\": %d, \"tp\": %d, "
                    "\"pdl\": %d, \"attn_bps\": %d, \"mode\": %d, \"batch\": %d, \"ctx\": %d, \"vocab\": %d, \"iters\": %d, \"median_us\": %.2f, "
                    "\"us_per_layer\": %.2f, \"floor_us_per_layer\": %.2f, \"weight_bytes\": %zu, \"kv_bytes\": %.0f}%s\n",
                    c.hidden, c.heads, c.kv_heads, c.ffn, c.layers, R.nranks, (int)R.pdl, R.attn_bps, (int)R.mode, c.batch, c.ctx, c.vocab, o.iters,
                    med_us,
                    med_us / c.layers, floor_us / c.layers, st.w.bytes, kv, i + 1 < shapes.size() ? "," : "");
      json += line;
      std::fflush(stdout);
    }
  }
  json += "]\n";
  if (R.rank == 0 && !o.out.empty() && !write_file(o.out + "/bench.json", json.data(), json.size())) {
    std::fprintf(stderr, "llama: cannot write %s/bench.json\n", o.out.c_str());
    return 1;
  }
  return 0;
}

}  // namespace llama
