// check.cc - the checked run (no --bench): the decode steps on one set of
// KV caches, then again on a second set swapped in by rebinding, which must
// give bit-identical outputs; with --verify, against the fp64 reference.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "examples/llama/run/rank.h"

namespace llama {
namespace {

// --verify: got vs the fp64 reference. The engine rounds to bf16 at every
// node (relative 2^-9 each) and its residual stream after every add; over a
// few layers that is ~0.5% of the norm. The bounds (3% of the norm; an
// element within 1/8 of the row-set RMS plus 3% of itself) leave room for
// that and still fail on any layout error, which moves y by tens of percent.
bool verify_close(const char *what, int step, const std::vector<double> &ref, const float *got) {
  double num = 0, den = 0, worst = 0;
  size_t bad = 0;
  for (size_t i = 0; i < ref.size(); i++) {
    num += (got[i] - ref[i]) * (got[i] - ref[i]);
    den += ref[i] * ref[i];
  }
  const double rms = std::sqrt(den / ref.size()), rel = std::sqrt(num / den);
  for (size_t i = 0; i < ref.size(); i++) {
    const double e = std::fabs(got[i] - ref[i]), tol = rms / 8 + std::fabs(ref[i]) / 32;
    if (!(e <= tol)) bad++;
    worst = std::max(worst, e / tol);
  }
  const bool ok = bad == 0 && rel <= 1.0 / 32;
  std::printf("verify: step %d %-6s rel norm err %.2e (<= 3.1e-02), max err/bound %.3f, %zu bad: %s\n", step, what,
              rel, worst, bad, ok ? "PASS" : "FAIL");
  return ok;
}

// One launch; positions of this step from the host.
int run_one(Rank &R, Step &s, const Config &c, int step) {
  for (int b = 0; b < c.batch; b++) s.h_pos[b] = c.ctx + step;
  CHECK_TPG(tpg_graph_launch(s.graph, R.stream));
  CHECK_TPG(wait_rank(R));
  return 0;
}

}  // namespace

// The steps, twice: on caches A, then on caches B (rebound, same initial
// contents), which must give bit-identical outputs.
int run_check(Options &o, RankState &st) {
  Rank &R = st.R;
  const Config &c = o.c;
  Source src{o.weights, c.seed};
  LmHead lm{};  // before g: the graph's captured LM head holds its address
  StepGuard g;
  std::string err;
  CHECK_OK(alloc_caches(c, R, &g.a, &err) || load_caches(c, R, src, g.a, &err));
  CHECK_OK(alloc_step_io(c, &g.s, &err) || build_step(c, R, st.w, g.a, c.ctx + c.steps, &lm, &g.s, &err));
  CHECK_OK(warm_lm_head(R, st.w, &lm, &g.s, &err) || create_step_graph(R, &g.s, &err));
  if (R.rank == 0) {
    std::printf("llama: graph built: %d layers, batch %d, ctx %d, steps %d, TP %d, attention split %d x %d keys\n",
                c.layers, c.batch, c.ctx, c.steps, R.nranks, g.s.nsplit, g.s.split_len);
    if (print_graph_info(g.s)) return 1;
  }
  const size_t ny = (size_t)c.batch * c.hidden, nl = (size_t)c.batch * c.vocab;
  std::vector<uint16_t> y(ny);
  std::vector<float> lg(nl), lg_rows(nl);
  std::vector<std::vector<uint16_t>> y_a(c.steps);
  std::vector<std::vector<float>> l_a(c.steps);
  int mismatched = 0;
  bool verified = true;
  for (int pass = 0; pass < 2; pass++) {
    if (pass == 1) {  // the second batch of caches, swapped in by rebinding
      CHECK_OK(alloc_caches(c, R, &g.b, &err) || load_caches(c, R, src, g.b, &err));
      CHECK_OK(bind_caches(&g.s, g.b, &err));
    }
    for (int s = 0; s < c.steps; s++) {
      CHECK_OK(load_input(c, src, s, g.s.d_x, R.stream, &err));
      if (run_one(R, g.s, c, s)) return 1;
      CHECK_CUDA(cudaMemcpy(y.data(), g.s.d_x, ny * 2, cudaMemcpyDeviceToHost));
      if (nl) CHECK_CUDA(cudaMemcpy(lg.data(), g.s.d_logits, nl * 4, cudaMemcpyDeviceToHost));
      if (pass == 1) {
        mismatched += y != y_a[s] || lg != l_a[s];
        continue;
      }
      y_a[s] = y;
      l_a[s] = lg;
      if (R.rank != 0) continue;
      double ss = 0, mx = 0;
      size_t nonfinite = 0;
      for (uint16_t v : y) {
        const double f = bf16_to_float(v);
        if (!std::isfinite(f)) nonfinite++;
        else {
          ss += f * f;
          mx = std::max(mx, std::fabs(f));
        }
      }
      std::printf("step %d: y rms %.4f max %.4f, %zu non-finite", s, std::sqrt(ss / ny), mx, nonfinite);
      if (nl) {  // [R][B][V/R] -> [B][V]
        const int vp = c.vocab / R.nranks;
        for (int r = 0; r < R.nranks; r++)
          for (int b = 0; b < c.batch; b++)
            std::memcpy(&lg_rows[(size_t)b * c.vocab + (size_t)r * vp], &lg[((size_t)r * c.batch + b) * vp], vp * 4);
        const size_t am = std::max_element(lg_rows.begin(), lg_rows.begin() + c.vocab) - lg_rows.begin();
        std::printf(", logits[0] argmax %zu (%.4f)", am, lg_rows[am]);
      }
      std::printf("\n");
      if (nonfinite) {
        std::fprintf(stderr, "llama: step %d: non-finite outputs\n", s);
        return 1;
      }
      if (o.verify) {
        std::vector<float> yf(ny);
        for (size_t i = 0; i < ny; i++) yf[i] = bf16_to_float(y[i]);
        verified &= verify_close("y", s, st.ref_y[s], yf.data());
        if (nl) verified &= verify_close("logits", s, st.ref_logits[s], lg_rows.data());
      }
      if (!o.out.empty()) {
        const std::string p = o.out + "/y.s" + std::to_string(s);
        if (!write_file(p, y.data(), ny * 2) ||
            (nl && !write_file(o.out + "/logits.s" + std::to_string(s), lg_rows.data(), nl * 4))) {
          std::fprintf(stderr, "llama: cannot write %s\n", p.c_str());
          return 1;
        }
      }
    }
  }
  if (R.rank == 0)
    std::printf("rebind: KV caches B (tpg_graph_rebind) vs A over %d steps: %s\n", c.steps,
                mismatched ? "DIFFERENT" : "identical");
  if (!verified) std::fprintf(stderr, "llama: --verify: the engine does not match the fp64 reference\n");
  return mismatched || !verified ? 1 : 0;
}

}  // namespace llama
