// rope.cc - rope.h: Llama 3.1's frequency table.
#include "examples/llama/model/rope.h"

#include <cmath>

namespace llama {

std::vector<float> llama3_inv_freq(int dim, double theta, double factor, double low_freq_factor,
                                   double high_freq_factor, double original_max_positions) {
  // transformers' _compute_llama3_parameters, op for op in fp32 as torch
  // runs it: its Python scalars enter fp32 tensor ops as fp32, and
  // `scalar / tensor` is tensor.reciprocal() * scalar.
  const float old = (float)original_max_positions, lo = (float)low_freq_factor;
  const float low_wl = (float)(original_max_positions / low_freq_factor);
  const float high_wl = (float)(original_max_positions / high_freq_factor);
  const float fac = (float)factor, two_pi = (float)(2 * M_PI);
  std::vector<float> out(dim / 2);
  for (int i = 0; i < dim / 2; i++) {
    const float inv = 1.0f / powf((float)theta, (float)(2 * i) / (float)dim);
    const float wavelen = (1.0f / inv) * two_pi;
    const float inv_l = wavelen > low_wl ? inv / fac : inv;
    const float smooth = ((1.0f / wavelen) * old - lo) / (float)(high_freq_factor - low_freq_factor);
    const float smoothed = (1.0f - smooth) * inv_l / fac + smooth * inv_l;
    const bool medium = !(wavelen < high_wl) && !(wavelen > low_wl);
    out[i] = medium ? smoothed : inv_l;
  }
  return out;
}

}  // namespace llama
