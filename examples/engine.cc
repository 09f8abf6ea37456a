// engine.cc - a small inference engine on top of libtpgraph.so.
//
// What an engine does with tpgraph: link the shared library, build a
// tensor-parallel MLP stack once per GPU (one host thread per GPU here), then
// run a decode loop in which each step's output is the next step's input.
// The two activation buffers swap roles every step by rebinding the graph's
// x and y slots: no re-instantiation, no NCCL re-capture (x and y are only
// touched by kernel and copy nodes). Rank 0 checks every step against an
// fp64 CPU reference applied to that step's own input.
//
//   bazel run //examples:engine -- [--steps 16] [--tokens 8]
#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "tpgraph.h"

namespace {

constexpr int kLayers = 4, kHidden = 512, kFfn = 2048;

#define TPG_OK(call)                                                                       \
  do {                                                                                     \
    tpg_status s_ = (call);                                                                \
    if (s_ != TPG_SUCCESS) {                                                               \
      std::fprintf(stderr, "%s:%d: %s\n  %s\n", __FILE__, __LINE__, #call, tpg_last_error()); \
      std::exit(2);                                                                        \
    }                                                                                      \
  } while (0)
#define CU_OK(call)                                                                        \
  do {                                                                                     \
    cudaError_t e_ = (call);                                                               \
    if (e_ != cudaSuccess) {                                                               \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
      std::exit(2);                                                                        \
    }                                                                                      \
  } while (0)

uint16_t to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}
float from_bf16(uint16_t h) {
  uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// The whole model, as every rank's loader would read it from a checkpoint.
struct Model {
  std::vector<float> w1[kLayers], b1[kLayers], w2[kLayers], b2[kLayers];
  Model() {
    std::mt19937 rng(42);
    std::uniform_real_distribution<float> u(-1.f, 1.f);
    auto fill = [&](std::vector<float> &v, size_t n, float scale) {
      v.resize(n);
      for (auto &x : v) x = from_bf16(to_bf16(scale * u(rng)));
    };
    for (int l = 0; l < kLayers; l++) {
      fill(w1[l], size_t(kFfn) * kHidden, 1.f / std::sqrt(float(kHidden)));
      fill(b1[l], kFfn, 0.1f);
      fill(w2[l], size_t(kHidden) * kFfn, 1.f / std::sqrt(float(kFfn)));
      fill(b2[l], kHidden, 0.1f);
    }
  }
  // y = stack(x) in fp64, x: [tokens, hidden]
  std::vector<double> forward(const std::vector<float> &x, int tokens) const {
    std::vector<double> s(x.begin(), x.end()), h(kFfn);
    for (int l = 0; l < kLayers; l++)
      for (int t = 0; t < tokens; t++) {
        double *xt = &s[size_t(t) * kHidden];
        for (int f = 0; f < kFfn; f++) {
          double a = b1[l][f];
          for (int k = 0; k < kHidden; k++) a += xt[k] * w1[l][size_t(f) * kHidden + k];
          h[f] = 0.5 * a * (1.0 + std::tanh(0.7978845608028654 * (a + 0.044715 * a * a * a)));
        }
        std::vector<double> y(kHidden);
        for (int o = 0; o < kHidden; o++) {
          double a = b2[l][o];
          for (int f = 0; f < kFfn; f++) a += w2[l][size_t(o) * kFfn + f] * h[f];
          y[o] = a;
        }
        for (int o = 0; o < kHidden; o++) xt[o] += y[o];
      }
    return s;
  }
};

void *upload(const std::vector<float> &v) {
  std::vector<uint16_t> h(v.size());
  for (size_t i = 0; i < v.size(); i++) h[i] = to_bf16(v[i]);
  void *d = nullptr;
  CU_OK(cudaMalloc(&d, h.size() * 2));
  CU_OK(cudaMemcpy(d, h.data(), h.size() * 2, cudaMemcpyHostToDevice));
  return d;
}

struct Result { int bad_steps = 0; double worst = 0; };

void rank_main(int rank, int nranks, const tpg_comm_id &id, const Model &model, int tokens, int steps, Result *out) {
  CU_OK(cudaSetDevice(rank));
  tpg_comm_config cc = TPG_COMM_CONFIG_INIT;
  cc.device = rank;
  cc.rank = rank;
  cc.nranks = nranks;
  cc.timeout_ms = 60000;
  tpg_comm *comm = nullptr;
  TPG_OK(tpg_comm_create(&id, &cc, &comm));

  tpg_mlp_desc d = TPG_MLP_DESC_INIT;
  d.kind = TPG_MLP_GELU;
  d.layers = kLayers;
  d.tokens = tokens;
  d.hidden = kHidden;
  d.ffn = kFfn;
  d.rank = rank;
  d.nranks = nranks;
  tpg_plan *plan = nullptr;
  TPG_OK(tpg_plan_mlp(&d, &plan));

  // This rank's slices: W1 rows and b1 entries [rank*F, (rank+1)*F), W2 columns likewise.
  const int F = kFfn / nranks;
  std::vector<void *> owned;
  std::vector<tpg_binding> b;
  auto bind = [&](const std::string &name, void *ptr) {
    tpg_slot s;
    TPG_OK(tpg_plan_find_slot(plan, name.c_str(), &s));
    b.push_back({s, ptr});
  };
  for (int l = 0; l < kLayers; l++) {
    std::vector<float> w1(model.w1[l].begin() + size_t(rank) * F * kHidden,
                          model.w1[l].begin() + size_t(rank + 1) * F * kHidden);
    std::vector<float> b1(model.b1[l].begin() + size_t(rank) * F, model.b1[l].begin() + size_t(rank + 1) * F);
    std::vector<float> w2(size_t(kHidden) * F);
    for (int o = 0; o < kHidden; o++)
      std::memcpy(&w2[size_t(o) * F], &model.w2[l][size_t(o) * kFfn + size_t(rank) * F], sizeof(float) * F);
    const std::string p = "l" + std::to_string(l) + ".";
    for (auto &[name, vec] : {std::pair<std::string, const std::vector<float> *>{"w1", &w1}, {"b1", &b1},
                              {"w2", &w2}, {"b2", &model.b2[l]}}) {
      void *ptr = upload(*vec);
      owned.push_back(ptr);
      bind(p + name, ptr);
    }
  }
  // Two activation buffers that trade places every step.
  const size_t act = size_t(tokens) * kHidden;
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::vector<float> x0(act);
  for (auto &v : x0) v = from_bf16(to_bf16(u(rng)));
  void *buf[2] = {upload(x0), upload(x0)};
  bind("x", buf[0]);
  bind("y", buf[1]);
  tpg_graph_config cfg = TPG_GRAPH_CONFIG_INIT;
  cfg.device = rank;
  cfg.comm = comm;
  cfg.bindings = b.data();
  cfg.nbindings = int(b.size());
  tpg_graph *graph = nullptr;
  TPG_OK(tpg_graph_create(plan, &cfg, &graph));  // once
  tpg_slot sx = b[b.size() - 2].slot, sy = b[b.size() - 1].slot;

  cudaStream_t stream;
  CU_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  std::vector<uint16_t> host(act);
  for (int step = 0; step < steps; step++) {
    void *in = buf[step & 1], *outb = buf[(step + 1) & 1];
    tpg_binding swap[2] = {{sx, in}, {sy, outb}};
    TPG_OK(tpg_graph_rebind(graph, swap, 2));  // a few microseconds, no re-instantiation
    std::vector<float> xin(act);
    if (rank == 0) {
      CU_OK(cudaMemcpy(host.data(), in, act * 2, cudaMemcpyDeviceToHost));
      for (size_t i = 0; i < act; i++) xin[i] = from_bf16(host[i]);
    }
    TPG_OK(tpg_graph_launch(graph, (tpg_stream)stream));
    TPG_OK(tpg_comm_wait(comm, (tpg_stream)stream));
    if (rank == 0) {
      std::vector<double> ref = model.forward(xin, tokens);
      CU_OK(cudaMemcpy(host.data(), outb, act * 2, cudaMemcpyDeviceToHost));
      double num = 0, den = 0;
      for (size_t i = 0; i < act; i++) {
        double dv = from_bf16(host[i]) - ref[i];
        num += dv * dv;
        den += ref[i] * ref[i];
      }
      double err = std::isfinite(num) ? std::sqrt(num / den) : INFINITY;
      std::printf("step %2d: rel err %.2e (tol 1e-2)\n", step, err);
      out->worst = std::max(out->worst, err);
      out->bad_steps += !(err <= 1e-2);
    }
  }
  TPG_OK(tpg_graph_destroy(graph));
  tpg_plan_destroy(plan);
  TPG_OK(tpg_comm_destroy(comm));
  for (void *p : owned) cudaFree(p);
  cudaFree(buf[0]);
  cudaFree(buf[1]);
  cudaStreamDestroy(stream);
}

}  // namespace

int main(int argc, char **argv) {
  int steps = 16, tokens = 8;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--steps")) steps = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--tokens")) tokens = std::atoi(argv[i + 1]);
  }
  tpg_runtime_info ri;
  TPG_OK(tpg_runtime_get_info(&ri, sizeof ri));
  if (ri.device_count < 1) {
    std::fprintf(stderr, "engine: no GPU: %s\n", ri.driver_error);
    return 1;
  }
  int n = ri.device_count >= 2 ? 2 : 1;
  std::printf("engine: TP=%d, %d-layer GeLU MLP, hidden %d, ffn %d, %d tokens, %d decode steps\n", n, kLayers,
              kHidden, kFfn, tokens, steps);
  Model model;
  tpg_comm_id id;
  TPG_OK(tpg_comm_id_create(&id));
  std::vector<Result> res(n);
  std::vector<std::thread> th;
  for (int r = 0; r < n; r++) th.emplace_back(rank_main, r, n, std::cref(id), std::cref(model), tokens, steps, &res[r]);
  for (auto &t : th) t.join();
  std::printf("engine: %d of %d steps within tolerance (worst rel err %.2e)\n", steps - res[0].bad_steps, steps,
              res[0].worst);
  std::printf("%d passed, %d failed\n", steps - res[0].bad_steps, res[0].bad_steps);
  return res[0].bad_steps ? 1 : 0;
}
