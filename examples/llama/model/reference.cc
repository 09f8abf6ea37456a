// reference.cc - the decode steps in fp64 on the host, for `llama --verify`.
//
// A second, independent reading of the model: plain loops over the WHOLE
// (unsplit) tensors, no tensor parallelism, no tpgraph, no bf16 rounding
// after the inputs. It catches layout and sharding mistakes (a wrong head,
// split, position or cache row changes y by a large fraction); rounding-level
// agreement is judged by the transformers comparison (tests/gpu/llama_ref.py).
#include <cmath>
#include <cstring>

#include "examples/llama/llama.h"

namespace llama {
namespace {

double bf(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// y[b, o] = sum_i x[b, i] w[o, i]; w [out, in] bf16.
void matmul(const std::vector<double> &x, int B, const std::vector<uint16_t> &w, size_t out, size_t in,
            std::vector<double> *y) {
  y->assign((size_t)B * out, 0.0);
  parallel_for(out, [&](size_t a, size_t e) {
    std::vector<double> wr(in);
    for (size_t o = a; o < e; o++) {
      for (size_t i = 0; i < in; i++) wr[i] = bf(w[o * in + i]);
      for (int b = 0; b < B; b++) {
        const double *xb = &x[(size_t)b * in];
        double s = 0;
        for (size_t i = 0; i < in; i++) s += xb[i] * wr[i];
        (*y)[(size_t)b * out + o] = s;
      }
    }
  });
}

void rmsnorm(const std::vector<double> &x, int B, int H, const std::vector<uint16_t> &w, double eps,
             std::vector<double> *y) {
  y->resize((size_t)B * H);
  for (int b = 0; b < B; b++) {
    double ss = 0;
    for (int i = 0; i < H; i++) ss += x[(size_t)b * H + i] * x[(size_t)b * H + i];
    const double r = 1.0 / std::sqrt(ss / H + eps);
    for (int i = 0; i < H; i++) (*y)[(size_t)b * H + i] = x[(size_t)b * H + i] * r * bf(w[i]);
  }
}

// Llama-3 RoPE without scaling, rotate_half layout, on t [B, heads, D].
void rope(std::vector<double> *t, int B, int heads, int D, int pos, double theta) {
  for (int b = 0; b < B; b++)
    for (int h = 0; h < heads; h++) {
      double *v = &(*t)[((size_t)b * heads + h) * D];
      for (int i = 0; i < D / 2; i++) {
        const double ang = pos * std::pow(theta, -2.0 * i / D), cs = std::cos(ang), sn = std::sin(ang);
        const double a = v[i], c = v[i + D / 2];
        v[i] = a * cs - c * sn;
        v[i + D / 2] = c * cs + a * sn;
      }
    }
}

// Softmax attention of every query head over positions [0, pos] of its KV
// head's cache (GQA: NH / KV query heads per KV head).
void attend(const std::vector<double> &q, const std::vector<double> &kc, const std::vector<double> &vc, int B, int NH,
            int KV, int D, int max_ctx, int pos, std::vector<double> *att) {
  const int G = NH / KV;
  std::vector<double> scores;
  att->assign((size_t)B * NH * D, 0.0);
  for (int b = 0; b < B; b++)
    for (int hq = 0; hq < NH; hq++) {
      const size_t base = ((size_t)b * KV + hq / G) * max_ctx * D;
      const double *qq = &q[((size_t)b * NH + hq) * D];
      scores.assign(pos + 1, 0.0);
      double m = -INFINITY, sum = 0;
      for (int t = 0; t <= pos; t++) {
        double dt = 0;
        for (int e = 0; e < D; e++) dt += qq[e] * kc[base + (size_t)t * D + e];
        scores[t] = dt / std::sqrt((double)D);
        m = std::max(m, scores[t]);
      }
      for (int t = 0; t <= pos; t++) sum += (scores[t] = std::exp(scores[t] - m));
      double *out = &(*att)[((size_t)b * NH + hq) * D];
      for (int t = 0; t <= pos; t++)
        for (int e = 0; e < D; e++) out[e] += scores[t] / sum * vc[base + (size_t)t * D + e];
    }
}

}  // namespace

int reference_steps(const Config &c, const Source &src, std::vector<std::vector<double>> *y,
                    std::vector<std::vector<double>> *logits, std::string *err) {
  const int B = c.batch, H = c.hidden, D = c.head_dim, NH = c.heads, KV = c.kv_heads, F = c.ffn;
  const size_t cache_n = (size_t)B * KV * c.max_ctx * D;
  if (2.0 * c.layers * cache_n * sizeof(double) > 16.0 * (1u << 30)) {
    *err = "--verify: the fp64 caches would take more than 16 GiB: use fewer layers, sequences or positions";
    return 1;
  }
  struct Layer {
    std::vector<uint16_t> attn_norm, wq, wk, wv, wo, mlp_norm, w_gate, w_up, w_down;
  };
  std::vector<Layer> L(c.layers);
  std::vector<std::vector<double>> kc(c.layers), vc(c.layers);
  std::vector<uint16_t> final_norm, lm, tmp;
  for (int l = 0; l < c.layers; l++) {
    const std::string p = "l" + std::to_string(l) + ".";
    Layer &w = L[l];
    if (host_tensor(src, c, p + "attn_norm", 1, H, &w.attn_norm, err) ||
        host_tensor(src, c, p + "wq", (size_t)NH * D, H, &w.wq, err) ||
        host_tensor(src, c, p + "wk", (size_t)KV * D, H, &w.wk, err) ||
        host_tensor(src, c, p + "wv", (size_t)KV * D, H, &w.wv, err) ||
        host_tensor(src, c, p + "wo", H, (size_t)NH * D, &w.wo, err) ||
        host_tensor(src, c, p + "mlp_norm", 1, H, &w.mlp_norm, err) ||
        host_tensor(src, c, p + "w_gate", F, H, &w.w_gate, err) || host_tensor(src, c, p + "w_up", F, H, &w.w_up, err) ||
        host_tensor(src, c, p + "w_down", H, F, &w.w_down, err))
      return 1;
    for (int kv = 0; kv < 2; kv++) {  // [B, KV, ctx, D] -> [B, KV, max_ctx, D]
      std::vector<double> &cache = kv ? vc[l] : kc[l];
      cache.assign(cache_n, 0.0);
      if (c.ctx == 0) continue;
      if (host_tensor(src, c, p + (kv ? "v_cache" : "k_cache"), (size_t)B * KV * c.ctx, D, &tmp, err)) return 1;
      for (size_t bh = 0; bh < (size_t)B * KV; bh++)
        for (size_t e = 0; e < (size_t)c.ctx * D; e++) cache[bh * c.max_ctx * D + e] = bf(tmp[bh * c.ctx * D + e]);
    }
  }
  if (host_tensor(src, c, "final_norm", 1, H, &final_norm, err)) return 1;
  if (c.vocab > 0 && host_tensor(src, c, "lm_head", c.vocab, H, &lm, err)) return 1;

  y->assign(c.steps, {});
  logits->assign(c.steps, {});
  std::vector<double> x, h, q, k, v, att, o, g, u, d;
  for (int s = 0; s < c.steps; s++) {
    if (host_tensor(src, c, "x.s" + std::to_string(s), B, H, &tmp, err)) return 1;
    x.resize((size_t)B * H);
    for (size_t i = 0; i < x.size(); i++) x[i] = bf(tmp[i]);
    const int pos = c.ctx + s;
    for (int l = 0; l < c.layers; l++) {
      const Layer &w = L[l];
      rmsnorm(x, B, H, w.attn_norm, c.eps, &h);
      matmul(h, B, w.wq, (size_t)NH * D, H, &q);
      matmul(h, B, w.wk, (size_t)KV * D, H, &k);
      matmul(h, B, w.wv, (size_t)KV * D, H, &v);
      rope(&q, B, NH, D, pos, c.theta);
      rope(&k, B, KV, D, pos, c.theta);
      for (int b = 0; b < B; b++)
        for (int j = 0; j < KV; j++)
          for (int e = 0; e < D; e++) {
            const size_t at = (((size_t)b * KV + j) * c.max_ctx + pos) * D + e;
            kc[l][at] = k[((size_t)b * KV + j) * D + e];
            vc[l][at] = v[((size_t)b * KV + j) * D + e];
          }
      attend(q, kc[l], vc[l], B, NH, KV, D, c.max_ctx, pos, &att);
      matmul(att, B, w.wo, H, (size_t)NH * D, &o);
      for (size_t i = 0; i < x.size(); i++) x[i] += o[i];
      rmsnorm(x, B, H, w.mlp_norm, c.eps, &h);
      matmul(h, B, w.w_gate, F, H, &g);
      matmul(h, B, w.w_up, F, H, &u);
      for (size_t i = 0; i < g.size(); i++) g[i] = g[i] / (1.0 + std::exp(-g[i])) * u[i];
      matmul(g, B, w.w_down, H, F, &d);
      for (size_t i = 0; i < x.size(); i++) x[i] += d[i];
    }
    (*y)[s] = x;
    if (c.vocab > 0) {
      rmsnorm(x, B, H, final_norm, c.eps, &h);
      matmul(h, B, lm, c.vocab, H, &(*logits)[s]);
    }
  }
  return 0;
}

}  // namespace llama
