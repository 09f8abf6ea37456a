// cli.h - llama's command line: its flags, their checks, and the run they
// describe. Nothing here touches a GPU: a bad flag, or a checkpoint or
// config.txt the engine cannot run, is refused with exit code 2 before any
// CUDA work, on any machine.
#ifndef LLAMA_RUN_CLI_H
#define LLAMA_RUN_CLI_H

#include <cstdio>
#include <string>
#include <vector>

#include "examples/llama/llama.h"
#include "examples/llama/run/generate.h"
#include "examples/llama/run/serve.h"

namespace llama {

struct Options {
  Config c;
  int tp = 0;  // --tp; 0: the GPUs present, capped by what the model divides
  std::string weights, out, id_file;
  bool bench = false, sweep = false, lm_head = false, pdl = true, verify = false;
  bool fold_norm = false;  // --fold-norm sets it (Rank::fold_norm)
  Rank::Attn attn = Rank::ATTN_FUSED;
  int attn_bps = 0;
  int vocab = 128256, warmup = 20, iters = 200;
  tpg_graph_mode mode = TPG_MODE_EXPLICIT;
  bool set_mode = false;
  bool set_layers = false, set_batch = false, set_ctx = false, set_steps = false;
  int decode = 0, end_token = -1;  // --decode N: decode.h's host loop vs device loop
  // --model DIR (a Hugging Face checkpoint): --prompt-ids in, new ids out
  // (run/generate.h); other_flag: the first flag seen that --model refuses.
  std::string model, other_flag, model_flag;  // model_flag: the first of --model's own flags seen
  std::vector<int> prompt;
  int max_new = 32;
  bool set_max_new = false, set_iters = false, set_prefill_chunk = false;
  GenerateOptions::Prefill prefill = GenerateOptions::PREFILL_GRAPH;  // --prefill graph|steps
  int prefill_chunk = 2048;
  std::string prompt_logits;  // --prompt-logits FILE
  // --bench's points: --sweep GRID (full, small or BATCHES x CTXS, e.g.
  // 1,8x512,4096), --whole (all layers of --config, the LM head), and what
  // --config names: its label and its layer count.
  std::vector<int> sweep_batch, sweep_ctx;
  bool whole = false;
  std::string config_name = "8b";
  int full_layers = 32;
  ServeOptions serve;         // --requests, --graph-sizes and their flags (run/serve.h, run/serve_cli.cc)
};

void usage(FILE *f);

// The flags alone: 0 to go on, 1 when --help was printed, 2 when refused
// (the message is on stderr).
int parse_args(int argc, char **argv, Options *o);

// The model and the run (the checkpoint's headers or config.txt read, every
// limit checked), with o->tp chosen when it was not given: the largest TP up
// to `gpus` that the model divides. 0 or 2, as parse_args.
int finish_args(Options *o, int gpus);

// The largest t <= limit that divides the model's KV heads, and whose 8 x t
// divides its FFN width and vocabulary: what every rank's shard needs.
int largest_tp(const Config &c, int limit);

}  // namespace llama

#endif
