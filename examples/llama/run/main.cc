// main.cc - the Llama-3 decode example: ranks, steps, outputs, benchmark.
//
// One process per GPU. `llama --tp N` starts its N ranks itself (fork + exec
// of this binary, the NCCL id passed through a file in a fresh temporary
// directory); under `mpirun -np N` each process takes its rank from Open
// MPI's environment and the id goes through --id-file (default: a name made
// from the job's namespace). Every rank builds ONE graph for the whole
// L-layer decode step (step.cc) and launches it once per token; rank 0
// writes the outputs and prints the results.
//
//   llama --config 70b --layers 4 --tp 2 --bench --sweep --out DIR
//   llama --weights DIR --tp 2 --lm-head --out OUT    (files of docs/llama.md)
//   llama --model HF_DIR --prompt-ids 1,2,3 --max-new-tokens 32 --tp 2
//                                                     (run/generate.h)
#include <getopt.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "examples/llama/kernels/kernels.h"
#include "examples/llama/llama.h"
#include "examples/llama/graphs/decode.h"
#include "examples/llama/run/generate.h"
#include "examples/llama/model/hf/checkpoint.h"
#include "lib/embedded.h"

extern "C" const tpg_embedded_blob llama_kernels[];  // //examples/llama:device_code

namespace llama {
namespace {

struct Options {
  Config c;
  int tp = 1;
  std::string weights, out, id_file;
  bool bench = false, sweep = false, lm_head = false, pdl = true, verify = false;
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
};

void usage(FILE *f) {
  std::fprintf(f,
               "usage: llama [flags]\n"
               "  --config 8b|70b   Llama-3-8B-like (4096 hidden, 32/8 heads, ffn 14336; default)\n"
               "                    or 70B-like (8192, 64/8, 28672)\n"
               "  --layers L        decoder layers in the graph (default 4)\n"
               "  --batch B         sequences, 1..64 (default 1)\n"
               "  --ctx C           positions already in the KV cache (default 512)\n"
               "  --steps S         decode steps; ctx + S <= 8192 (default 4)\n"
               "  --tp N            tensor-parallel ranks, 1..8 (default 1); started by this\n"
               "                    program unless run under mpirun -np N\n"
               "  --weights DIR     read config.txt, weights, caches and inputs from DIR\n"
               "                    (docs/llama.md); without: seeded random, same on every rank\n"
               "  --seed N          the random model's seed (default 1)\n"
               "  --lm-head         add the LM head (cuBLAS, vocab-parallel)\n"
               "  --vocab V         vocabulary without --weights (default 128256)\n"
               "  --out DIR         write y.s<step> (and logits.s<step>), or bench.json\n"
               "  --verify          rank 0 also runs the steps in fp64 on the host (whole\n"
               "                    tensors, no TP) and compares y and logits: catches layout\n"
               "                    and sharding errors (small models: fp64 caches <= 16 GiB)\n"
               "  --bench           time the step instead (median of --iters launches)\n"
               "  --sweep           with --bench: batch 1/8/32 x ctx 512/4096\n"
               "  --iters N, --warmup N   bench launches (default 200, 20)\n"
               "  --mode M          with --bench: explicit (tpgraph's graph, default), capture\n"
               "                    (the same nodes stream-captured) or eager (no graph)\n"
               "  --pdl, --no-pdl   programmatic dependent launch on (default) or off\n"
               "                    (TPG_GRAPH_PDL; the engine's kernels wait with griddepcontrol.wait\n"
               "                    and then let the next node launch)\n"
               "  --attn fused|tc|fma  attention: RoPE + KV append + tensor-core attention + the\n"
               "                    split merge in one kernel (fused, default), or the three-node\n"
               "                    form with the tensor-core (tc) or fp32-FMA (fma) first pass\n"
               "  --attn-bps N      attention's context split: about N blocks per SM (0, the default:\n"
               "                    the wave rule of step.cc, attn_split)\n"

               "  --id-file PATH    under mpirun: where rank 0 leaves the NCCL id\n"
               "  --decode N        greedy-decode up to N tokens per sequence, host loop (a launch\n"
               "                    per token) vs device loop (one launch, a conditional WHILE\n"
               "                    node); checks the tokens are identical; needs --lm-head\n"
               "  --end-token T     with --decode or --model: a sequence ends at token T (default: never)\n"
               "  --model DIR       a Hugging Face checkpoint (config.json, model.safetensors or\n"
               "                    model.safetensors.index.json): Llama, Mistral or Qwen2 at what the\n"
               "                    engine runs (docs/llama.md, \"Hugging Face checkpoints\"); each rank\n"
               "                    reads its shard. With --prompt-ids: one sequence, greedy\n"
               "  --prompt-ids L    token ids, comma-separated (no tokenizer here). The prompt runs as\n"
               "                    a prefill of M-row graphs (causal attention over the cache), whose\n"
               "                    last row gives the first new token; then the host and device loops\n"
               "  --max-new-tokens N  tokens to make, 1..8191 (default 32); prompt + N <= 8192\n"
               "  --prefill graph|steps  with --model: the prompt as M-row graphs (default), or as\n"
               "                    single-token decode steps (the older path, for comparison)\n"
               "  --prefill-chunk N rows per prefill graph, a multiple of 64 up to 8192 (default 2048)\n"
               "  --prompt-logits F with --model: write the last prompt row's logits (fp32, vocab_size)\n"
               "                    to file F (prefill graph only)\n"
               "  --iters N         with --model: timed runs after one warm-up (default 1; medians)\n");
}

// "1,2,3" -> {1, 2, 3}: non-negative integers, nothing else.
bool parse_ids(const char *s, std::vector<int> *out) {
  out->clear();
  const char *p = s;
  for (;;) {
    char *end;
    errno = 0;
    const long v = std::strtol(p, &end, 10);
    if (end == p || errno || v < 0 || v > (1L << 30) || (*end && *end != ',') || *p == '+' || *p == '-' ||
        *p == ' ') {
      std::fprintf(stderr, "llama: --prompt-ids '%s': expected token ids separated by commas (e.g. 128000,791,6460)\n",
                   s);
      return false;
    }
    out->push_back((int)v);
    if (!*end) return true;
    p = end + 1;
  }
}

bool parse_int(const char *flag, const char *s, int lo, int hi, int *out) {
  char *end;
  errno = 0;
  long v = std::strtol(s, &end, 10);
  if (errno || *end || end == s || v < lo || v > hi) {
    std::fprintf(stderr, "llama: %s '%s': expected an integer in %d..%d\n", flag, s, lo, hi);
    return false;
  }
  *out = (int)v;
  return true;
}

// --model: the run is one sequence of the prompt plus --max-new-tokens; the
// model, and whether the engine can run it, come from the checkpoint (read
// here already, headers only, so a refusal costs no GPU time: exit 2).
int parse_model(Options *o) {
  if (o->model.empty() || o->prompt.empty()) {
    std::fprintf(stderr, "llama: --model, --prompt-ids (and --max-new-tokens) go together\n");
    return 2;
  }
  if (!o->other_flag.empty()) {
    std::fprintf(stderr, "llama: %s does not go with --model (the checkpoint sets the model; the prompt, the run)\n",
                 o->other_flag.c_str());
    return 2;
  }
  if (!o->prompt_logits.empty() && o->prefill != GenerateOptions::PREFILL_GRAPH) {
    std::fprintf(stderr, "llama: --prompt-logits needs --prefill graph (the prompt's logits come from its last chunk)\n");
    return 2;
  }
  if (o->set_prefill_chunk && o->prefill != GenerateOptions::PREFILL_GRAPH) {
    std::fprintf(stderr, "llama: --prefill-chunk %d needs --prefill graph (--prefill steps runs no chunks)\n",
                 o->prefill_chunk);
    return 2;
  }
  if (!o->prompt_logits.empty()) {  // the file is written after the whole run: refuse it now, not then
    const char *f = o->prompt_logits.c_str();
    const bool existed = access(f, F_OK) == 0;
    FILE *t = std::fopen(f, "ab");  // appends nothing: an existing file stays as it is
    if (!t) {
      std::fprintf(stderr, "llama: --prompt-logits '%s': cannot write it (%s)\n", f, std::strerror(errno));
      return 2;
    }
    std::fclose(t);
    if (!existed) unlink(f);
  }
  if (!o->set_iters) o->iters = 1;
  const int P = (int)o->prompt.size(), need = P + o->max_new;
  if (need > 8192) {
    std::fprintf(stderr,
                 "llama: --prompt-ids (%d tokens) + --max-new-tokens %d = %d: the cache holds at most 8192 positions\n",
                 P, o->max_new, need);
    return 2;
  }
  Config &c = o->c;
  c.batch = 1;
  c.ctx = 0;
  c.steps = o->max_new;
  c.max_ctx = need;
  HfModel m;
  std::string err;
  if (m.open(o->model, o->tp, need, &c, &err)) {
    std::fprintf(stderr, "llama: --model: %s\n", err.c_str());
    return 2;
  }
  if (o->attn == Rank::ATTN_FMA && c.head_dim != LLAMA_HEAD_DIM) {
    std::fprintf(stderr, "llama: --attn fma: head_dim %d: the scalar attention is for head_dim 128 (use fused or tc)\n",
                 c.head_dim);
    return 2;
  }
  for (int id : o->prompt)
    if (id >= c.vocab) {
      std::fprintf(stderr, "llama: --prompt-ids: token %d is outside the vocabulary (vocab_size %d)\n", id, c.vocab);
      return 2;
    }
  o->lm_head = true;
  return 0;
}

int parse(int argc, char **argv, Options *o) {
  enum { DECODE = 100, ENDTOKEN };  // decode.h's flags
  enum { MODEL = 200, PROMPTIDS, MAXNEW, PREFILL, PREFILLCHUNK, PROMPTLOGITS };  // run/generate.h's
  enum { CONFIG = 1, LAYERS, BATCH, CTX, STEPS, TP, WEIGHTS, OUT, BENCH, SWEEP, LMHEAD, VOCAB, SEED, ITERS, WARMUP,
         IDFILE, PDL, NOPDL, MODE, VERIFY, ATTN, ATTNBPS, HELP };
  static const option opts[] = {
      {"config", required_argument, 0, CONFIG}, {"layers", required_argument, 0, LAYERS},
      {"decode", required_argument, 0, DECODE}, {"end-token", required_argument, 0, ENDTOKEN},
      {"batch", required_argument, 0, BATCH},   {"ctx", required_argument, 0, CTX},
      {"steps", required_argument, 0, STEPS},   {"tp", required_argument, 0, TP},
      {"weights", required_argument, 0, WEIGHTS}, {"out", required_argument, 0, OUT},
      {"bench", no_argument, 0, BENCH},         {"sweep", no_argument, 0, SWEEP},
      {"lm-head", no_argument, 0, LMHEAD},      {"vocab", required_argument, 0, VOCAB},
      {"seed", required_argument, 0, SEED},     {"iters", required_argument, 0, ITERS},
      {"warmup", required_argument, 0, WARMUP}, {"id-file", required_argument, 0, IDFILE},
      {"pdl", no_argument, 0, PDL},             {"no-pdl", no_argument, 0, NOPDL},
      {"mode", required_argument, 0, MODE},
      {"verify", no_argument, 0, VERIFY},       {"help", no_argument, 0, HELP},
      {"attn", required_argument, 0, ATTN},     {"attn-bps", required_argument, 0, ATTNBPS},
      {"model", required_argument, 0, MODEL},   {"prompt-ids", required_argument, 0, PROMPTIDS},
      {"max-new-tokens", required_argument, 0, MAXNEW},
      {"prefill", required_argument, 0, PREFILL},
      {"prefill-chunk", required_argument, 0, PREFILLCHUNK},
      {"prompt-logits", required_argument, 0, PROMPTLOGITS},
      {0, 0, 0, 0}};
  int ch, v, idx = -1;
  Config &c = o->c;
  while ((ch = getopt_long(argc, argv, "", opts, &idx)) != -1) {
    // --model takes the model and the run from the checkpoint and the
    // prompt: flags that set either are refused with it, not ignored.
    if (idx >= 0 && o->other_flag.empty() && ch != MODEL && ch != PROMPTIDS && ch != MAXNEW && ch != TP &&
        ch != ENDTOKEN && ch != PDL && ch != NOPDL && ch != ATTN && ch != ATTNBPS && ch != IDFILE && ch != HELP &&
        ch != PREFILL && ch != PREFILLCHUNK && ch != PROMPTLOGITS && ch != ITERS)
      o->other_flag = std::string("--") + opts[idx].name;
    // ... and its own flags need it.
    if (idx >= 0 && (ch == PREFILL || ch == PREFILLCHUNK || ch == PROMPTLOGITS) && o->model_flag.empty())
      o->model_flag = std::string("--") + opts[idx].name;
    idx = -1;
    switch (ch) {
      case MODEL: o->model = optarg; break;
      case PROMPTIDS: if (!parse_ids(optarg, &o->prompt)) return 2; break;
      case MAXNEW: if (!parse_int("--max-new-tokens", optarg, 1, 8191, &o->max_new)) return 2; o->set_max_new = true; break;
      case PREFILL:
        if (!std::strcmp(optarg, "graph")) o->prefill = GenerateOptions::PREFILL_GRAPH;
        else if (!std::strcmp(optarg, "steps")) o->prefill = GenerateOptions::PREFILL_STEPS;
        else {
          std::fprintf(stderr, "llama: --prefill '%s': expected graph or steps\n", optarg);
          return 2;
        }
        break;
      case PREFILLCHUNK:
        if (!parse_int("--prefill-chunk", optarg, 64, 8192, &o->prefill_chunk)) return 2;
        if (o->prefill_chunk % 64) {
          std::fprintf(stderr, "llama: --prefill-chunk %d: expected a multiple of 64\n", o->prefill_chunk);
          return 2;
        }
        o->set_prefill_chunk = true;
        break;
      case PROMPTLOGITS: o->prompt_logits = optarg; break;
      case CONFIG:
        if (!std::strcmp(optarg, "8b")) {
          c.hidden = 4096, c.heads = 32, c.kv_heads = 8, c.ffn = 14336;
        } else if (!std::strcmp(optarg, "70b")) {
          c.hidden = 8192, c.heads = 64, c.kv_heads = 8, c.ffn = 28672;
        } else {
          std::fprintf(stderr, "llama: --config '%s': expected 8b or 70b\n", optarg);
          return 2;
        }
        break;
      case DECODE: if (!parse_int("--decode", optarg, 1, 8192, &o->decode)) return 2; break;
      case ENDTOKEN: if (!parse_int("--end-token", optarg, 0, 1 << 30, &o->end_token)) return 2; break;
      case LAYERS: if (!parse_int("--layers", optarg, 1, 1000, &c.layers)) return 2; o->set_layers = true; break;
      case BATCH: if (!parse_int("--batch", optarg, 1, 64, &c.batch)) return 2; o->set_batch = true; break;
      case CTX: if (!parse_int("--ctx", optarg, 0, 8191, &c.ctx)) return 2; o->set_ctx = true; break;
      case STEPS: if (!parse_int("--steps", optarg, 1, 8192, &c.steps)) return 2; o->set_steps = true; break;
      case TP: if (!parse_int("--tp", optarg, 1, 8, &o->tp)) return 2; break;
      case WEIGHTS: o->weights = optarg; break;
      case OUT: o->out = optarg; break;
      case BENCH: o->bench = true; break;
      case SWEEP: o->sweep = true; break;
      case LMHEAD: o->lm_head = true; break;
      case VOCAB: if (!parse_int("--vocab", optarg, 8, 1 << 20, &o->vocab)) return 2; break;
      case SEED: if (!parse_int("--seed", optarg, 0, 1 << 30, &v)) return 2; c.seed = (uint64_t)v; break;
      case ITERS: if (!parse_int("--iters", optarg, 1, 1000000, &o->iters)) return 2; o->set_iters = true; break;
      case WARMUP: if (!parse_int("--warmup", optarg, 0, 1000000, &o->warmup)) return 2; break;
      case IDFILE: o->id_file = optarg; break;
      case PDL: o->pdl = true; break;
      case NOPDL: o->pdl = false; break;
      case VERIFY: o->verify = true; break;
      case ATTN:
        if (!std::strcmp(optarg, "fused")) o->attn = Rank::ATTN_FUSED;
        else if (!std::strcmp(optarg, "tc")) o->attn = Rank::ATTN_TC;
        else if (!std::strcmp(optarg, "fma")) o->attn = Rank::ATTN_FMA;
        else {
          std::fprintf(stderr, "llama: --attn '%s': expected fused, tc or fma\n", optarg);
          return 2;
        }
        break;
      case ATTNBPS: if (!parse_int("--attn-bps", optarg, 0, 64, &o->attn_bps)) return 2; break;
      case MODE:
        if (!std::strcmp(optarg, "explicit")) o->mode = TPG_MODE_EXPLICIT;
        else if (!std::strcmp(optarg, "capture")) o->mode = TPG_MODE_CAPTURE;
        else if (!std::strcmp(optarg, "eager")) o->mode = TPG_MODE_EAGER;
        else {
          std::fprintf(stderr, "llama: --mode '%s': expected explicit, capture or eager\n", optarg);
          return 2;
        }
        o->set_mode = true;
        break;
      case HELP: usage(stdout); return 1;
      default: usage(stderr); return 2;
    }
  }
  if (optind < argc) {
    std::fprintf(stderr, "llama: unexpected argument '%s'\n", argv[optind]);
    return 2;
  }
  if (!o->model.empty() || !o->prompt.empty() || o->set_max_new) return parse_model(o);
  if (!o->model_flag.empty()) {
    std::fprintf(stderr, "llama: %s goes with --model\n", o->model_flag.c_str());
    return 2;
  }
  if (o->decode && (o->bench || !o->lm_head)) {
    std::fprintf(stderr, "llama: --decode needs --lm-head (the tokens come from the logits), not --bench\n");
    return 2;
  }
  if (o->decode) c.steps = o->decode;  // the caches' capacity: ctx + N
  if (o->sweep && !o->bench) {
    std::fprintf(stderr, "llama: --sweep needs --bench\n");
    return 2;
  }
  if (o->verify && o->bench) {
    std::fprintf(stderr, "llama: --verify checks the decode steps; it does not go with --bench\n");
    return 2;
  }
  if (o->set_mode && !o->bench) {  // the check run rebinds, which TPG_MODE_CAPTURE cannot
    std::fprintf(stderr, "llama: --mode needs --bench\n");
    return 2;
  }
  if (!o->weights.empty()) {
    std::string err;
    if (read_config(o->weights, &c, &err)) {
      std::fprintf(stderr, "llama: --weights: %s\n", err.c_str());
      return 2;
    }
    if (o->set_layers || o->set_batch || o->set_ctx || o->set_steps)
      std::fprintf(stderr, "llama: --weights: config.txt sets the model and run; --layers/--batch/--ctx/--steps ignored\n");
    if (o->lm_head && c.vocab == 0) {
      std::fprintf(stderr, "llama: --lm-head: %s/config.txt has vocab 0 (no lm_head file)\n", o->weights.c_str());
      return 2;
    }
    if (!o->lm_head) c.vocab = 0;
  } else {
    c.vocab = o->lm_head ? o->vocab : 0;
  }
  const int need = c.ctx + c.steps;
  if (c.max_ctx < need) c.max_ctx = need;
  const char *bad = nullptr;
  char why[160];
  if (c.head_dim != LLAMA_HEAD_DIM && c.head_dim != LLAMA_HEAD_DIM_SMALL) bad = "head_dim must be 128 or 64";
  else if (c.heads % c.kv_heads == 0 && c.heads / c.kv_heads > LLAMA_ATTN_MAX_GROUP)
    bad = "heads / kv_heads must be 1..16";
  else if (o->attn == Rank::ATTN_FMA && c.head_dim != LLAMA_HEAD_DIM)
    bad = "--attn fma: head_dim 128 only (use fused or tc)";
  else if (c.hidden % 8 || c.hidden <= 0) bad = "hidden must be a positive multiple of 8";
  else if (c.heads % c.kv_heads) bad = "heads must be a multiple of kv_heads";
  else if (c.kv_heads % o->tp) { std::snprintf(why, sizeof why, "--tp %d must divide kv_heads %d", o->tp, c.kv_heads); bad = why; }
  else if (c.ffn % (8 * o->tp)) { std::snprintf(why, sizeof why, "ffn %d must be a multiple of 8 x --tp", c.ffn); bad = why; }
  else if (c.vocab % (8 * o->tp)) { std::snprintf(why, sizeof why, "vocab %d must be a multiple of 8 x --tp", c.vocab); bad = why; }
  else if (c.batch < 1 || c.batch > 64) bad = "batch must be 1..64";
  else if (c.max_ctx > 8192) { std::snprintf(why, sizeof why, "ctx + steps = %d: the cache holds at most 8192 positions", c.max_ctx); bad = why; }
  if (bad) {
    std::fprintf(stderr, "llama: %s\n", bad);
    return 2;
  }
  return 0;
}

#define CHECK_TPG(call)                                                                   \
  do {                                                                                    \
    tpg_status s_ = (call);                                                               \
    if (s_ != TPG_SUCCESS) {                                                              \
      std::fprintf(stderr, "llama rank %d: %s: %s\n", R.rank, #call, tpg_last_error());   \
      return 1;                                                                           \
    }                                                                                     \
  } while (0)
#define CHECK_CUDA(call)                                                                          \
  do {                                                                                            \
    cudaError_t e_ = (call);                                                                      \
    if (e_ != cudaSuccess) {                                                                      \
      std::fprintf(stderr, "llama rank %d: %s: %s\n", R.rank, #call, cudaGetErrorString(e_));     \
      return 1;                                                                                   \
    }                                                                                             \
  } while (0)
#define CHECK_OK(call)                                                        \
  do {                                                                        \
    if (call) {                                                               \
      std::fprintf(stderr, "llama rank %d: %s\n", R.rank, err.c_str());      \
      return 1;                                                               \
    }                                                                         \
  } while (0)

float bf16_to_float(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

bool write_file(const std::string &path, const void *p, size_t n) {
  FILE *f = std::fopen(path.c_str(), "wb");
  if (!f) return false;
  const bool ok = std::fwrite(p, 1, n, f) == n;
  return std::fclose(f) == 0 && ok;
}

// Everything a rank holds; released in the order the API requires (graphs,
// then module and comm).
struct RankState {
  Rank R;
  Weights w;
  std::vector<std::vector<double>> ref_y, ref_logits;  // --verify, rank 0
  ~RankState() {
    free_weights(&w);
    if (R.cublas) cublasDestroy(R.cublas);
    cudaFree(R.cublas_ws);
    if (R.stream) cudaStreamDestroy(R.stream);
    tpg_module_destroy(R.module);
    tpg_module_destroy(R.prefill_module);
    tpg_comm_destroy(R.comm);
  }
};

struct StepGuard {  // a Step and its caches, freed before the rank's state
  Step s;
  Caches a, b;
  ~StepGuard() {
    free_step(&s);
    free_caches(&a);
    free_caches(&b);
  }
};

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

// What tpgraph built: the node kinds, the memory it owns, the build time.
int print_graph_info(const Step &s) {
  tpg_graph_info gi;
  if (tpg_graph_get_info(s.graph, &gi, sizeof gi) != TPG_SUCCESS) {  // informative only (eager mode has no graph)
    std::printf("llama: tpg_graph_get_info: %s\n", tpg_last_error());
    return 0;
  }
  std::printf("llama: CUDA graph: %d nodes (%d tpgraph kernels, %d engine kernels, %d NCCL child graphs, %d "
              "captured, %d memcpy), %d programmatic edges, workspace %.1f MiB, materialize %.0f us, instantiate "
              "%.0f us\n",
              gi.nodes, gi.kernel_nodes, gi.user_kernel_nodes, gi.child_nodes, gi.captured_nodes, gi.memcpy_nodes,
              gi.programmatic_edges, gi.workspace_bytes / 1048576.0, gi.materialize_us, gi.instantiate_us);
  return 0;
}

// One launch; positions of this step from the host.
int run_one(Rank &R, Step &s, const Config &c, int step) {
  for (int b = 0; b < c.batch; b++) s.h_pos[b] = c.ctx + step;
  CHECK_TPG(tpg_graph_launch(s.graph, R.stream));
  CHECK_TPG(wait_rank(R));
  return 0;
}

// The steps, twice: on caches A, then on caches B (rebound, same initial
// contents), which must give bit-identical outputs.
int run_check(Options &o, RankState &st) {
  Rank &R = st.R;
  const Config &c = o.c;
  Source src{o.weights, c.seed};
  StepGuard g;
  std::string err;
  LmHead lm{};
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

int run_rank(Options &o, int rank, int nranks, int device, const std::string &id_file) {
  RankState st;
  Rank &R = st.R;
  R.rank = rank;
  R.nranks = nranks;
  R.device = device;
  R.pdl = o.pdl;
  R.attn = o.attn;
  R.attn_bps = o.attn_bps;
  R.mode = o.mode;
  std::string err;
  if (rank == 0 && !o.out.empty() && mkdir(o.out.c_str(), 0755) != 0 && errno != EEXIST) {
    std::fprintf(stderr, "llama: --out %s: %s\n", o.out.c_str(), std::strerror(errno));
    return 1;
  }
  CHECK_CUDA(cudaSetDevice(device));
  CHECK_CUDA(cudaDeviceGetAttribute(&R.sm_count, cudaDevAttrMultiProcessorCount, device));
  CHECK_CUDA(cudaStreamCreate(&R.stream));  // blocking: ordered after the legacy-stream fills and copies
  if (o.verify && rank == 0) {  // before the comm: the others wait for the id file meanwhile
    Source src{o.weights, o.c.seed};
    CHECK_OK(reference_steps(o.c, src, &st.ref_y, &st.ref_logits, &err));
    std::printf("llama: fp64 reference of %d steps computed on the host\n", o.c.steps);
  }
  if (nranks > 1) {  // TP 1: no comm (the plan's all-reduces become their epilogues; tpgraph needs none)
    tpg_comm_id id;
    if (rank == 0) {
      CHECK_TPG(tpg_comm_id_create(&id));
      CHECK_TPG(tpg_comm_id_write_file(&id, id_file.c_str()));
    } else {
      CHECK_TPG(tpg_comm_id_read_file(id_file.c_str(), 600000, &id));  // rank 0 may be computing --verify's reference
    }
    tpg_comm_config cc = TPG_COMM_CONFIG_INIT;
    cc.device = device;
    cc.rank = rank;
    cc.nranks = nranks;
    cc.timeout_ms = 120000;
    CHECK_TPG(tpg_comm_create(&id, &cc, &R.comm));
  }
  const tpg_embedded_blob *blob = llama_kernels;
  while (blob->name && std::strcmp(blob->name, "kernels")) blob++;
  if (!blob->name) {
    std::fprintf(stderr, "llama: the embedded device code has no 'kernels' image\n");
    return 1;
  }
  CHECK_TPG(tpg_module_load(blob->start, (size_t)(blob->end - blob->start), &R.module));
  if (!o.model.empty()) {  // the prefill's kernels (kernels/prefill.cu), a blob of the same fatbin
    const tpg_embedded_blob *pb = llama_kernels;
    while (pb->name && std::strcmp(pb->name, "prefill_kernels")) pb++;
    if (!pb->name) {
      std::fprintf(stderr, "llama: the embedded device code has no 'prefill_kernels' image\n");
      return 1;
    }
    CHECK_TPG(tpg_module_load(pb->start, (size_t)(pb->end - pb->start), &R.prefill_module));
  }
  if (o.c.vocab > 0) {
    if (cublasCreate(&R.cublas) != CUBLAS_STATUS_SUCCESS) {
      std::fprintf(stderr, "llama rank %d: cublasCreate failed\n", rank);
      return 1;
    }
    R.cublas_ws_bytes = 32u << 20;
    CHECK_CUDA(cudaMalloc(&R.cublas_ws, R.cublas_ws_bytes));
    if (cublasSetWorkspace(R.cublas, R.cublas_ws, R.cublas_ws_bytes) != CUBLAS_STATUS_SUCCESS) {
      std::fprintf(stderr, "llama rank %d: cublasSetWorkspace failed\n", rank);
      return 1;
    }
  }
  Source src{o.bench ? std::string() : o.weights, o.c.seed};
  HfModel model;  // --model: this rank maps the checkpoint and reads its shard
  if (!o.model.empty()) {
    Config c = o.c;
    CHECK_OK(model.open(o.model, nranks, o.c.max_ctx, &c, &err));
    src.reader = &model;
  }
  CHECK_OK(load_weights(o.c, R, src, &st.w, &err));
  if (rank == 0)
    std::printf("llama: rank 0 of %d on GPU %d: %.1f MiB of weights (%s)\n", nranks, device, st.w.bytes / 1048576.0,
                !o.model.empty() ? o.model.c_str() : src.dir.empty() ? "random" : src.dir.c_str());
  if (!o.model.empty()) {
    GenerateOptions g;
    g.prompt = o.prompt;
    g.max_new = o.max_new;
    g.end_token = o.end_token;
    g.prefill = o.prefill;
    g.chunk = o.prefill_chunk;
    g.iters = o.iters;
    g.logits_out = o.prompt_logits;
    if (rank == 0)
      std::printf("llama: %s, %d layers, hidden %d, %d/%d heads, ffn %d, vocab %d, theta %g%s, eps %g\n",
                  model.config().arch.c_str(), o.c.layers, o.c.hidden, o.c.heads, o.c.kv_heads, o.c.ffn, o.c.vocab,
                  (double)o.c.theta, o.c.rope_inv_freq.empty() ? "" : " (llama3 scaling: inv_freq table)",
                  (double)o.c.eps);
    CHECK_OK(run_generate(o.c, R, st.w, src, g, &err));
    return 0;
  }
  if (o.decode) {
    DecodeOptions d;
    d.steps = o.decode;
    d.end_token = o.end_token;
    CHECK_OK(run_decode(o.c, R, st.w, src, d, &err));
    return 0;
  }
  return o.bench ? run_bench(o, st) : run_check(o, st);
}

int env_int(const char *name, int dflt) {
  const char *s = std::getenv(name);
  return s && *s ? std::atoi(s) : dflt;
}

// Starts `tp` copies of this program as ranks and waits for them; when one
// fails, the others are stopped (they would wait for it until a timeout).
int spawn(int tp, char **argv) {
  char dir[] = "/tmp/llama.XXXXXX";
  if (!mkdtemp(dir)) {
    std::perror("llama: mkdtemp");
    return 1;
  }
  const std::string id = std::string(dir) + "/comm_id";
  std::vector<pid_t> pids;
  for (int r = 0; r < tp; r++) {
    pid_t p = fork();
    if (p < 0) {
      std::perror("llama: fork");
      for (pid_t q : pids) kill(q, SIGTERM);
      break;
    }
    if (p == 0) {
      setenv("LLAMA_RANK", std::to_string(r).c_str(), 1);
      setenv("LLAMA_NRANKS", std::to_string(tp).c_str(), 1);
      setenv("LLAMA_ID_FILE", id.c_str(), 1);
      execv("/proc/self/exe", argv);
      std::perror("llama: exec");
      _exit(127);
    }
    pids.push_back(p);
  }
  int failed = (int)pids.size() < tp;
  for (size_t left = pids.size(); left > 0; left--) {
    int status;
    pid_t p = wait(&status);
    if (p < 0) break;
    const bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
    if (!ok && !failed) {
      failed = 1;
      const size_t r = std::find(pids.begin(), pids.end(), p) - pids.begin();
      std::fprintf(stderr, "llama: rank %zu failed (%s %d); stopping the others\n", r,
                   WIFEXITED(status) ? "exit" : "signal", WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
      for (pid_t q : pids)
        if (q != p) kill(q, SIGTERM);
    }
  }
  unlink(id.c_str());
  rmdir(dir);
  return failed;
}

}  // namespace
}  // namespace llama

int main(int argc, char **argv) {
  using namespace llama;
  Options o;
  const int pr = parse(argc, argv, &o);
  if (pr) return pr == 1 ? 0 : 2;
  // Before any CUDA call: without a usable driver or GPU (a CPU build box, CI)
  // say so plainly, as tpbench does, instead of the CUDA runtime's message.
  tpg_runtime_info ri;
  if (tpg_runtime_get_info(&ri, sizeof ri) != TPG_SUCCESS || ri.device_count < 1) {
    std::fprintf(stderr, "llama: no GPU here (%s). Run it on a machine with NVIDIA GPUs.\n",
                 ri.driver_error[0] ? ri.driver_error : "the driver sees no device");
    return 1;
  }
  const int mpi_size = env_int("OMPI_COMM_WORLD_SIZE", 0), own = env_int("LLAMA_NRANKS", 0);
  if (mpi_size == 0 && own == 0 && o.tp > ri.device_count) {  // ranks spawned here, one GPU each
    std::fprintf(stderr, "llama: --tp %d: this machine has %d GPU(s) (run under mpirun to span machines)\n", o.tp,
                 ri.device_count);
    return 2;
  }
  if (mpi_size > 0) {
    if (mpi_size != o.tp) {
      std::fprintf(stderr, "llama: mpirun -np %d but --tp %d: they must agree\n", mpi_size, o.tp);
      return 2;
    }
    const int rank = env_int("OMPI_COMM_WORLD_RANK", 0);
    const int local = env_int("OMPI_COMM_WORLD_LOCAL_RANK", rank);
    std::string id = o.id_file;
    if (id.empty()) {  // one name per mpirun job: its PMIx namespace, else the launcher's pid
      const char *ns = std::getenv("PMIX_NAMESPACE");
      id = "/tmp/llama-comm-" + (ns ? std::string(ns) : std::to_string(getppid())) + ".id";
    }
    const int rc = run_rank(o, rank, mpi_size, local, id);
    if (rank == 0 && o.tp > 1) unlink(id.c_str());
    return rc;
  }
  if (own > 0) return run_rank(o, env_int("LLAMA_RANK", 0), own, env_int("LLAMA_RANK", 0), std::getenv("LLAMA_ID_FILE"));
  if (o.tp == 1) return run_rank(o, 0, 1, 0, "");
  return spawn(o.tp, argv);
}
