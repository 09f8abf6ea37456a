// gemm_pin.h - one GEMM kernel for every size of the serving step, so that a
// row's bits do not depend on how many rows share its step (--batch-invariant,
// docs/serving.md).
//
// tpgraph's selector picks a GEMM kernel by M (a split-K GEMV per M class up
// to 64 rows, tile kernels above), and each sums a row's products in its own
// order. The public tpg_gemm_desc names no kernel; what the public API does
// offer is the GEMM tuner's cache file (tpg_graph_config.gemm_tune_cache,
// format in lib/gemm/tune.h and docs/kernels.md): with tuning on, a GEMM
// found there runs the variant it names. So the engine writes one entry per
// GEMM shape of every step size, all naming one whole-tile TMA kernel (no
// split-K, no stream-K: each output element is one CTA's sum over K in K
// order, whatever M is). This file is the stand-in for a variant field in
// tpg_gemm_desc; when one lands, write_gemm_pins goes.
#ifndef LLAMA_GRAPHS_GEMM_PIN_H
#define LLAMA_GRAPHS_GEMM_PIN_H

#include <string>
#include <vector>

#include "examples/llama/graphs/serve_step.h"

namespace llama {

// The pinned kernel: a Hopper TMA kernel of 64 x 64 tiles (tpgraph's variant
// name). Small tiles: at decode sizes a 128-wide tile would leave most SMs
// idle on the 4096-wide projections (64 tiles for 132 SMs as it is).
#define LLAMA_PINNED_GEMM "tma_m64_n64"

// Writes the tuning cache at path: every shape in `shapes` on a GPU of
// sm_count SMs and architecture arch (10 x major + minor; the variant needs
// 90) names `variant`. 0, or 1 with *err.
int write_gemm_pins(const std::string &path, const std::vector<GemmShape> &shapes, int sm_count, int arch,
                    const char *variant, std::string *err);

}  // namespace llama

#endif
