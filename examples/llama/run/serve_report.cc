// serve_report.cc - serve_report.h.
#include "examples/llama/run/serve_report.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>

namespace llama {
namespace {

// The q-quantile of v (nearest rank), in milliseconds of seconds given;
// NaN without samples (every request of one token has no inter-token gap),
// which the summary writes as null / n/a rather than a measured 0.
double pct_ms(std::vector<double> v, double q) {
  if (v.empty()) return NAN;
  std::sort(v.begin(), v.end());
  const size_t k = (size_t)std::ceil(q * v.size());
  return 1e3 * v[std::min(v.size() - 1, k > 0 ? k - 1 : 0)];
}

std::string ids_json(const std::vector<int> &ids) {
  std::string s = "[";
  for (size_t i = 0; i < ids.size(); i++) s += (i ? "," : "") + std::to_string(ids[i]);
  return s + "]";
}

// s as a JSON string literal (messages hold no control characters but may
// hold quotes).
std::string quoted(const std::string &s) {
  std::string o = "\"";
  for (char ch : s) {
    if (ch == '"' || ch == '\\') o += '\\';
    o += (unsigned char)ch < 0x20 ? ' ' : ch;
  }
  return o + "\"";
}

// A latency for the JSON summary: null when there were no samples.
std::string json_ms(double v, const char *fmt) {
  if (std::isnan(v)) return "null";
  char b[32];
  std::snprintf(b, sizeof b, fmt, v);
  return b;
}

std::string summary_json(const ServeSummary &s) {
  char b[1024];
  std::snprintf(b, sizeof b,
                "{\"served\": %d, \"refused\": %d, \"output_tokens\": %ld, \"prompt_tokens\": %ld, \"seconds\": %.4f, "
                "\"output_tokens_per_s\": %.1f, \"ttft_ms_p50\": %s, \"ttft_ms_p99\": %s, \"itl_ms_p50\": %s, "
                "\"itl_ms_p99\": %s, \"steps\": %ld, \"rows\": %ld, \"decode_rows\": %ld, \"prompt_rows\": %ld, "
                "\"padding_rows\": %ld, \"peak_kv_blocks\": %d, \"kv_blocks\": %d, \"graph_sizes\": %d, "
                "\"graph_build_ms\": %.1f, \"arena_bytes\": %zu, \"graph_own_bytes\": %zu, "
                "\"graph_measured_bytes\": %zu, \"batch_invariant\": %s}\n",
                s.served, s.refused, s.out_tokens, s.prompt_tokens, s.seconds, s.tokens_per_s,
                json_ms(s.ttft_p50_ms, "%.2f").c_str(), json_ms(s.ttft_p99_ms, "%.2f").c_str(),
                json_ms(s.itl_p50_ms, "%.3f").c_str(), json_ms(s.itl_p99_ms, "%.3f").c_str(), s.st.steps, s.st.rows,
                s.st.decode_rows, s.st.prompt_rows, s.st.padding_rows, s.st.peak_blocks, s.nblocks, s.sizes, s.build_ms,
                s.arena, s.own, s.measured, s.invariant ? "true" : "false");
  return b;
}

bool write_text(const std::string &path, const std::string &text) {
  FILE *f = std::fopen(path.c_str(), "w");
  if (!f) return false;
  const bool ok = std::fwrite(text.data(), 1, text.size(), f) == text.size();
  return std::fclose(f) == 0 && ok;
}

}  // namespace

void ServeStats::add_step(const StepPlan &p) {
  steps++;
  rows += p.size;
  decode_rows += p.nd;
  prompt_rows += p.prompt_rows;
  padding_rows += p.size - p.nd - p.prompt_rows;
}

ServeSummary summarize(const std::vector<Request> &reqs, const std::vector<Outcome> &out, const ServeStats &st,
                       const ServeShape &sh, const GraphSet &set, int refused, bool invariant) {
  ServeSummary s;
  s.served = (int)reqs.size();
  s.refused = refused;
  std::vector<double> ttft, itl;
  for (size_t i = 0; i < reqs.size(); i++) {
    s.prompt_tokens += (long)reqs[i].prompt.size();
    s.out_tokens += (long)out[i].ids.size();
    if (out[i].first_s >= 0) ttft.push_back(out[i].first_s);
    for (size_t k = 1; k < out[i].token_s.size(); k++) itl.push_back(out[i].token_s[k] - out[i].token_s[k - 1]);
  }
  s.seconds = st.seconds;
  s.tokens_per_s = st.seconds > 0 ? s.out_tokens / st.seconds : 0;
  s.ttft_p50_ms = pct_ms(ttft, 0.5);
  s.ttft_p99_ms = pct_ms(ttft, 0.99);
  s.itl_p50_ms = pct_ms(itl, 0.5);
  s.itl_p99_ms = pct_ms(itl, 0.99);
  s.st = st;
  s.nblocks = sh.nblocks;
  s.sizes = (int)set.sizes.size();
  s.build_ms = set.total.build_us / 1e3;
  s.arena = set.total.arena_bytes;
  s.own = set.total.own_bytes;
  s.measured = set.total.measured_bytes;
  s.invariant = invariant;
  return s;
}

void print_summary(const ServeSummary &s) {
  const double rows = s.st.steps ? (double)s.st.rows / s.st.steps : 0;
  std::printf("serve: %d requests served, %d refused; %ld output tokens (%ld prompt tokens) in %.2f s: %.0f output "
              "tokens/s\n",
              s.served, s.refused, s.out_tokens, s.prompt_tokens, s.seconds, s.tokens_per_s);
  if (std::isnan(s.ttft_p50_ms))
    std::printf("serve: time to first token n/a (nothing served)\n");
  else
    std::printf("serve: time to first token p50 %.1f ms, p99 %.1f ms\n", s.ttft_p50_ms, s.ttft_p99_ms);
  if (std::isnan(s.itl_p50_ms))
    std::printf("serve: inter-token latency n/a (no request made a second token)\n");
  else
    std::printf("serve: inter-token latency p50 %.2f ms, p99 %.2f ms\n", s.itl_p50_ms, s.itl_p99_ms);
  std::printf("serve: %ld steps of %.1f rows on average (decode %.1f, prompt %.1f, padding %.1f%%); peak KV blocks "
              "%d of %d (%.1f%%)\n",
              s.st.steps, rows, s.st.steps ? (double)s.st.decode_rows / s.st.steps : 0.0,
              s.st.steps ? (double)s.st.prompt_rows / s.st.steps : 0.0,
              s.st.rows ? 100.0 * s.st.padding_rows / s.st.rows : 0.0, s.st.peak_blocks, s.nblocks,
              s.nblocks ? 100.0 * s.st.peak_blocks / s.nblocks : 0.0);
  std::printf("serve: graph set of %d sizes built in %.1f ms: arena (scratch, GEMM workspaces) %.1f MiB, the "
              "graphs' own %.1f MiB, measured %.1f MiB; GEMMs %s\n",
              s.sizes, s.build_ms, s.arena / 1048576.0, s.own / 1048576.0, s.measured / 1048576.0,
              s.invariant ? "pinned to one kernel (--batch-invariant)" : "chosen per size by tpgraph's selector");
  std::printf("serve-json: %s", summary_json(s).c_str());
  std::fflush(stdout);
}

int write_outputs(const std::string &dir, const std::vector<Request> &reqs, const std::vector<Outcome> &out,
                  const std::vector<Refusal> &refused, const ServeSummary &s, std::string *err) {
  if (mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) {
    *err = "--out " + dir + ": " + std::strerror(errno);
    return 1;
  }
  std::vector<std::pair<int, std::string>> lines;
  for (size_t i = 0; i < reqs.size(); i++) {
    const Outcome &o = out[i];
    char t[64];
    std::snprintf(t, sizeof t, "%.2f", o.first_s * 1e3);
    lines.push_back({reqs[i].line, "{\"line\": " + std::to_string(reqs[i].line) + ", \"id\": " +
                                       (reqs[i].id.empty() ? "null" : reqs[i].id) + ", \"prompt_tokens\": " +
                                       std::to_string(reqs[i].prompt.size()) + ", \"ids\": " + ids_json(o.ids) +
                                       ", \"finish\": \"" + (o.ended ? "end" : "length") + "\", \"ttft_ms\": " + t +
                                       "}\n"});
  }
  for (const Refusal &f : refused)
    lines.push_back({f.line, "{\"line\": " + std::to_string(f.line) + ", \"refused\": " + quoted(f.why) + "}\n"});
  std::stable_sort(lines.begin(), lines.end(),
                   [](const std::pair<int, std::string> &a, const std::pair<int, std::string> &b) {
                     return a.first < b.first;
                   });
  std::string text;
  for (const auto &l : lines) text += l.second;
  if (!write_text(dir + "/ids.jsonl", text) || !write_text(dir + "/summary.json", summary_json(s))) {
    *err = "cannot write " + dir + "/ids.jsonl or summary.json";
    return 1;
  }
  return 0;
}

std::string print_graph_sizes(const GraphSet &set, const ServeBuffers &b, const Config &c) {
  std::printf("graph sizes: the serving step, %d layers, hidden %d, vocab %d: %zu sizes\n", c.layers, c.hidden,
              c.vocab, set.sizes.size());
  // Where creation goes (tpg_graph_info): prepare (kernel choice, GEMM
  // tuning), the first loads of kernel modules (within prepare and
  // materialize), materialize (nodes, cuBLASLt's captures), instantiate; and
  // the GEMM nodes by family.
  std::printf("graph sizes: %6s %10s %10s %10s %10s %10s %12s %10s %12s %14s\n", "size", "plan us", "create us",
              "prepare", "kern load", "material.", "instantiate", "own KiB", "measured KiB", "ours/cutl/lt");
  // Sizes finished in parallel (TPG_GRAPH_SET_PARALLEL) are not measured
  // one by one: "-" then, the set's total below holds.
  bool per_size = false;
  for (const tpg_graph_set_size_info &si : set.info) per_size |= si.measured_bytes > 0;
  for (const tpg_graph_set_size_info &si : set.info) {
    char measured[24] = "-";
    if (per_size) std::snprintf(measured, sizeof measured, "%.1f", si.measured_bytes / 1024.0);
    int got = 0;
    tpg_graph *g = nullptr;
    tpg_graph_info gi{};
    const bool have = tpg_graph_set_pick(set.set, si.size, &got, &g) == TPG_SUCCESS && got == si.size &&
                      tpg_graph_get_info(g, &gi, sizeof gi) == TPG_SUCCESS;
    std::printf("graph sizes: %6d %10.0f %10.0f %10.0f %10.0f %10.0f %12.0f %10.1f %12s %6d/%d/%d\n", si.size,
                si.builder_us, si.create_us, have ? gi.prepare_us : NAN, have ? gi.kernel_load_us : NAN,
                have ? gi.materialize_us : NAN, si.instantiate_us, si.own_bytes / 1024.0, measured,
                gi.gemm_ours_nodes, gi.gemm_cutlass_nodes, gi.gemm_cublaslt_nodes);
  }
  const tpg_graph_set_info &t = set.total;
  const double beyond = (t.measured_bytes > t.arena_bytes ? t.measured_bytes - t.arena_bytes : 0) / 1048576.0;
  std::printf("graph sizes: %d sizes built in %.1f ms (plans %.1f ms; target < 500 ms); arena (scratch, GEMM "
              "workspaces) %.1f MiB shared by all; beyond it the graphs hold %.1f MiB (own %.1f MiB + the driver's "
              "execs; target < 100 MiB); the engine's bound buffers (pools, tables, embedding) %.1f MiB\n",
              t.count, t.build_us / 1e3, t.builder_us / 1e3, t.arena_bytes / 1048576.0, beyond,
              t.own_bytes / 1048576.0, b.bytes / 1048576.0);
  char j[512];
  std::snprintf(j, sizeof j,
                "{\"sizes\": %d, \"build_s\": %.5f, \"builder_s\": %.5f, \"arena_bytes\": %zu, \"own_bytes\": %zu, "
                "\"measured_bytes\": %zu, \"beyond_arena_bytes\": %.0f, \"layers\": %d}\n",
                t.count, t.build_us / 1e6, t.builder_us / 1e6, t.arena_bytes, t.own_bytes, t.measured_bytes,
                beyond * 1048576.0, c.layers);
  std::printf("graph-sizes-json: %s", j);
  std::fflush(stdout);
  return j;
}

int write_graph_sizes(const std::string &dir, const std::string &json, std::string *err) {
  if (mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) {
    *err = "--out " + dir + ": " + std::strerror(errno);
    return 1;
  }
  if (!write_text(dir + "/graph_sizes.json", json)) {
    *err = "cannot write " + dir + "/graph_sizes.json";
    return 1;
  }
  return 0;
}

}  // namespace llama
