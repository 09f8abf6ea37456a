// rope.h - RoPE frequency tables made on the host, for the kernels' inv_freq
// argument (kernels.h). Its own file with no dependencies, because the engine
// (model/hf/config.cc) and the kernel check (kernel_check.cu) both need it.
#ifndef LLAMA_MODEL_ROPE_H
#define LLAMA_MODEL_ROPE_H

#include <vector>

namespace llama {

// Llama 3.1's RoPE frequencies ("rope_type": "llama3"), [dim / 2] fp32,
// computed as transformers' _compute_llama3_parameters computes them, op for
// op in fp32, so the table equals transformers' bit for bit (checked against
// transformers 5.24 on torch 2.15: test/hf_test.cc).
std::vector<float> llama3_inv_freq(int dim, double theta, double factor, double low_freq_factor,
                                   double high_freq_factor, double original_max_positions);

}  // namespace llama

#endif
