// bench.cc - --bench: the decode step's median time over --iters launches
// at one shape, at each point of --sweep's grid, or for the whole model
// (--whole: every layer of --config and the LM head), beside its floor: the
// bytes one step must read (this rank's weights, the K and V of the ctx + 1
// positions attended) at the device-to-device copy bandwidth measured first
// on this GPU, which is what HBM gives in practice (the datasheet's figure,
// memory clock x bus width, is printed beside it). A point whose caches the
// GPU cannot hold is skipped with the reason, before anything is allocated.
// bench.json (rank 0) with --out.
//
// make_step is the one place that uses the step's API (caches, I/O, plan,
// graph), and step_bytes the one place that knows the caches' size.
#include <algorithm>
#include <cstdarg>
#include <cstdio>

#include "examples/llama/run/rank.h"

namespace llama {
namespace {

struct Peak {
  double measured = 0, datasheet = 0;  // bytes/s
};

// The copy bandwidth: cudaMemcpy device to device of up to 1 GiB (far
// beyond L2), bytes read plus bytes written over the median of 20 copies.
int measure_peak(const Rank &R, Peak *p) {
  size_t free_b = 0, total_b = 0;
  CHECK_CUDA(cudaMemGetInfo(&free_b, &total_b));
  const size_t n = std::min<size_t>(1u << 30, free_b / 4) & ~(size_t)4095;
  if (n < (64u << 20)) {
    std::fprintf(stderr, "llama rank %d: %.0f MiB free: too little to measure the copy bandwidth\n", R.rank,
                 free_b / 1048576.0);
    return 1;
  }
  void *a = nullptr, *b = nullptr;
  CHECK_CUDA(cudaMalloc(&a, n));
  if (cudaMalloc(&b, n) != cudaSuccess) {
    cudaFree(a);
    std::fprintf(stderr, "llama rank %d: out of memory for the copy-bandwidth buffers\n", R.rank);
    return 1;
  }
  cudaEvent_t ev[2 * 20];
  int made = 0, rc = 0;
  for (; made < 40 && cudaEventCreate(&ev[made]) == cudaSuccess; made++) {
  }
  std::vector<float> t(20);
  rc = made < 40;
  for (int i = 0; !rc && i < 23; i++) {  // 3 untimed first
    if (i >= 3) rc |= cudaEventRecord(ev[2 * (i - 3)], R.stream) != cudaSuccess;
    rc |= cudaMemcpyAsync(b, a, n, cudaMemcpyDeviceToDevice, R.stream) != cudaSuccess;
    if (i >= 3) rc |= cudaEventRecord(ev[2 * (i - 3) + 1], R.stream) != cudaSuccess;
  }
  rc |= cudaStreamSynchronize(R.stream) != cudaSuccess;
  for (int i = 0; !rc && i < 20; i++) rc |= cudaEventElapsedTime(&t[i], ev[2 * i], ev[2 * i + 1]) != cudaSuccess;
  for (int i = 0; i < made; i++) cudaEventDestroy(ev[i]);
  cudaFree(a);
  cudaFree(b);
  if (rc) {
    std::fprintf(stderr, "llama rank %d: the copy-bandwidth measurement failed\n", R.rank);
    return 1;
  }
  std::sort(t.begin(), t.end());
  p->measured = 2.0 * n / (t[10] * 1e-3);
  int khz = 0, bits = 0;
  if (cudaDeviceGetAttribute(&khz, cudaDevAttrMemoryClockRate, R.device) == cudaSuccess &&
      cudaDeviceGetAttribute(&bits, cudaDevAttrGlobalMemoryBusWidth, R.device) == cudaSuccess)
    p->datasheet = 2.0 * khz * 1e3 * bits / 8;  // double data rate
  return 0;
}

// What one point allocates beyond the weights: its caches (as
// alloc_caches sizes them), and for the step's I/O, logits and the graph's
// scratch a reserve: 5% and 1 GiB.
double step_bytes(const Config &c, const Rank &R) {
  const double caches = 2.0 * c.layers * c.batch * kv_heads(c, R) * c.max_ctx * c.head_dim * 2;
  const double io = (double)c.batch * (c.hidden * 2 + (double)c.vocab * 4);
  return (caches + io) * 1.05 + (1u << 30);
}

// The bytes one step reads: this rank's weights, and the K and V of the
// ctx + 1 positions it attends in every layer.
double kv_read_bytes(const Config &c, const Rank &R) {
  return (double)c.layers * c.batch * kv_heads(c, R) * (c.ctx + 1) * c.head_dim * 2 * 2;
}

// One point's step, ready to launch: its caches (random context), I/O,
// plan and graph, positions at ctx. lm must outlive the graph.
int make_step(const Config &c, RankState &st, StepGuard *g, LmHead *lm, bool info) {
  Rank &R = st.R;
  std::string err;
  Source src{"", c.seed};  // the timing does not depend on the values
  CHECK_OK(alloc_caches(c, R, &g->a, &err) || load_caches(c, R, src, g->a, &err));
  CHECK_OK(alloc_step_io(c, &g->s, &err) || build_step(c, R, st.w, g->a, c.ctx + 1, lm, &g->s, &err));
  CHECK_OK(warm_lm_head(R, st.w, lm, &g->s, &err) || create_step_graph(R, &g->s, &err));
  if (info && print_graph_info(g->s)) return 1;
  CHECK_OK(load_input(c, src, 0, g->s.d_x, R.stream, &err));
  for (int b = 0; b < c.batch; b++) g->s.h_pos[b] = c.ctx;
  return 0;
}

// The median of o.iters launches queued back to back, each between two
// events, after o.warmup untimed ones.
int time_step(const Options &o, const Rank &R, const Step &s, double *med_us) {
  std::vector<cudaEvent_t> ev(2 * o.iters, nullptr);
  int rc = 0;
  for (auto &e : ev) rc |= cudaEventCreate(&e) != cudaSuccess;
  for (int it = 0; !rc && it < o.warmup; it++) rc |= tpg_graph_launch(s.graph, R.stream) != TPG_SUCCESS;
  rc |= !rc && wait_rank(R) != TPG_SUCCESS;
  for (int it = 0; !rc && it < o.iters; it++) {
    rc |= cudaEventRecord(ev[2 * it], R.stream) != cudaSuccess;
    rc |= tpg_graph_launch(s.graph, R.stream) != TPG_SUCCESS;
    rc |= cudaEventRecord(ev[2 * it + 1], R.stream) != cudaSuccess;
  }
  rc |= !rc && wait_rank(R) != TPG_SUCCESS;
  std::vector<float> t(o.iters);
  for (int it = 0; !rc && it < o.iters; it++) rc |= cudaEventElapsedTime(&t[it], ev[2 * it], ev[2 * it + 1]) != cudaSuccess;
  for (auto &e : ev)
    if (e) cudaEventDestroy(e);
  if (rc) {
    std::fprintf(stderr, "llama rank %d: timing the step failed: %s / %s\n", R.rank, tpg_last_error(),
                 cudaGetErrorString(cudaGetLastError()));
    return 1;
  }
  std::sort(t.begin(), t.end());
  *med_us = 1e3 * t[o.iters / 2];
  return 0;
}

std::string fmt(const char *f, ...) __attribute__((format(printf, 1, 2)));
std::string fmt(const char *f, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, f);
  std::vsnprintf(buf, sizeof buf, f, ap);
  va_end(ap);
  return buf;
}

// --config's name, or "custom" for config.txt's model (--weights).
std::string model_name(const Options &o) { return o.weights.empty() ? o.config_name : "custom"; }

// The point's label: the model, its layers, the run's knobs.
std::string label(const Options &o, const Config &c, const Rank &R) {
  static const char *const modes[] = {"", " capture", " eager"};
  std::string s = model_name(o) + (o.whole ? fmt(" whole (%d layers + LM head %d)", c.layers, c.vocab)
                                           : fmt(" layers %d", c.layers));
  s += fmt(" TP %d%s%s%s%s", R.nranks, R.pdl ? " pdl" : "", R.fold_norm ? " fold" : "", modes[R.mode],
           R.attn == Rank::ATTN_FMA ? " attn-fma" : R.attn == Rank::ATTN_TC ? " attn-tc" : "");
  if (R.attn_bps) s += fmt(" bps %d", R.attn_bps);
  return s;
}

// The point's line on stdout and its row of bench.json.
std::string report(const Options &o, const Config &c, const RankState &st, const Peak &pk, double med_us) {
  const Rank &R = st.R;
  const double bytes = st.w.bytes + kv_read_bytes(c, R), floor_us = bytes / pk.measured * 1e6;
  const double rate = bytes / (med_us * 1e-6), tok_s = c.batch / (med_us * 1e-6);
  const std::string head = fmt("bench: %s batch %2d ctx %4d: ", label(o, c, R).c_str(), c.batch, c.ctx);
  if (o.whole)
    std::printf("%s%8.3f ms/token %9.1f tokens/s, %.2f GB read a step, %.2f TB/s = %.1f%% of the measured copy "
                "peak (%.1f%% of the datasheet's); floor %.3f ms (%.2fx floor)\n",
                head.c_str(), med_us / 1e3, tok_s, bytes / 1e9, rate / 1e12, 100 * rate / pk.measured,
                pk.datasheet > 0 ? 100 * rate / pk.datasheet : 0.0, floor_us / 1e3, med_us / floor_us);
  else
    std::printf("%s%9.1f us/token  %7.1f us/layer  floor %7.1f us/layer  (%.2fx floor)\n", head.c_str(), med_us,
                med_us / c.layers, floor_us / c.layers, med_us / floor_us);
  std::fflush(stdout);
  return fmt("  {\"config\": \"%s\", \"whole\": %d, \"hidden\": %d, \"heads\": %d, \"kv_heads\": %d, \"head_dim\": %d, "
             "\"ffn\": %d, \"layers\": %d, \"tp\": %d, \"pdl\": %d, \"attn_bps\": %d, \"mode\": %d, ",
             model_name(o).c_str(), (int)o.whole, c.hidden, c.heads, c.kv_heads, c.head_dim, c.ffn, c.layers,
             R.nranks, (int)R.pdl, R.attn_bps, (int)R.mode) +
         fmt("\"batch\": %d, \"ctx\": %d, \"vocab\": %d, \"iters\": %d, \"median_us\": %.2f, \"us_per_layer\": %.2f, "
             "\"floor_us\": %.2f, \"floor_us_per_layer\": %.2f, \"weight_bytes\": %zu, \"kv_bytes\": %.0f, ",
             c.batch, c.ctx, c.vocab, o.iters, med_us, med_us / c.layers, floor_us, floor_us / c.layers, st.w.bytes,
             kv_read_bytes(c, R)) +
         fmt("\"tokens_per_s\": %.1f, \"bytes_per_step\": %.0f, \"peak_bw_measured\": %.4g, \"peak_bw_datasheet\": "
             "%.4g, \"pct_peak_measured\": %.2f}",
             tok_s, bytes, pk.measured, pk.datasheet, 100 * rate / pk.measured);
}

}  // namespace

int run_bench(Options &o, RankState &st) {
  Rank &R = st.R;
  std::vector<std::pair<int, int>> shapes;  // (batch, ctx)
  if (o.sweep) {
    for (int ctx : o.sweep_ctx)
      for (int b : o.sweep_batch) shapes.push_back({b, ctx});
  } else {
    shapes.push_back({o.c.batch, o.c.ctx});
  }
  Peak pk;
  if (measure_peak(R, &pk)) return 1;
  if (R.rank == 0)
    std::printf("bench: peak: device-to-device copy %.3f TB/s (read + write, 1 GiB, median of 20); datasheet "
                "(memory clock x bus width) %.3f TB/s; the floors use the copy's\n",
                pk.measured / 1e12, pk.datasheet / 1e12);
  std::vector<std::string> rows;
  bool info = true;
  for (const auto &shape : shapes) {
    Config c = o.c;
    c.batch = shape.first;
    c.ctx = shape.second;
    c.steps = 1;
    c.max_ctx = c.ctx + 1;
    size_t free_b = 0, total_b = 0;
    CHECK_CUDA(cudaMemGetInfo(&free_b, &total_b));
    const double need = step_bytes(c, R);
    if (need > (double)free_b) {
      const std::string why = fmt("needs %.1f GiB for its caches, I/O and scratch; %.1f GiB free", need / (1 << 30),
                                  (double)free_b / (1 << 30));
      if (R.rank == 0) {
        std::printf("bench: %s batch %2d ctx %4d: skipped: %s\n", label(o, c, R).c_str(), c.batch, c.ctx, why.c_str());
        rows.push_back(fmt("  {\"config\": \"%s\", \"whole\": %d, \"layers\": %d, \"tp\": %d, \"batch\": %d, \"ctx\": "
                           "%d, \"skipped\": \"%s\"}",
                           model_name(o).c_str(), (int)o.whole, c.layers, R.nranks, c.batch, c.ctx, why.c_str()));
      }
      continue;
    }
    LmHead lm{};  // before g: the graph's captured LM head holds its address
    StepGuard g;
    double med_us = 0;
    if (make_step(c, st, &g, &lm, R.rank == 0 && info) || time_step(o, R, g.s, &med_us)) return 1;
    info = false;
    if (R.rank == 0) rows.push_back(report(o, c, st, pk, med_us));
  }
  std::string json = "[\n";
  for (size_t i = 0; i < rows.size(); i++) json += rows[i] + (i + 1 < rows.size() ? ",\n" : "\n");
  json += "]\n";
  if (R.rank == 0 && !o.out.empty() && !write_file(o.out + "/bench.json", json.data(), json.size())) {
    std::fprintf(stderr, "llama: cannot write %s/bench.json\n", o.out.c_str());
    return 1;
  }
  return 0;
}

bool bench_weights_fit(const Options &o, const Rank &R) {
  double need = 0;
  for (WeightBuf b : {WB_ATTN_NORM, WB_MLP_NORM, WB_QKV, WB_O, WB_13, WB_2, WB_QKV_BIAS})
    need += 2.0 * o.c.layers * weight_buf_elems(o.c, R, b);
  need += 2.0 * (weight_buf_elems(o.c, R, WB_FINAL_NORM) + (o.c.vocab > 0 ? weight_buf_elems(o.c, R, WB_LM_HEAD) : 0));
  size_t free_b = 0, total_b = 0;
  if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) return true;  // the allocation will say what is wrong
  // The weights, the copy measurement's 2 GiB and one point's reserve.
  if (need + (3.0 * (1u << 30)) <= (double)free_b) return true;
  if (R.rank == 0)
    std::printf("bench: %s layers %d TP %d: skipped: its weights need %.1f GiB a rank; %.1f GiB free\n",
                model_name(o).c_str(), o.c.layers, R.nranks, need / (1 << 30), (double)free_b / (1 << 30));
  if (R.rank == 0 && !o.out.empty()) {
    const std::string json = fmt("[\n  {\"config\": \"%s\", \"whole\": %d, \"layers\": %d, \"tp\": %d, \"skipped\": "
                                 "\"weights need %.1f GiB a rank, %.1f GiB free\"}\n]\n",
                                 model_name(o).c_str(), (int)o.whole, o.c.layers, R.nranks, need / (1 << 30),
                                 (double)free_b / (1 << 30));
    write_file(o.out + "/bench.json", json.data(), json.size());
  }
  return false;
}

}  // namespace llama
