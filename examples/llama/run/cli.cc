// cli.cc - cli.h: the flags (a getopt_long table, one switch), then the
// run they describe, checked against the engine's limits.
#include "examples/llama/run/cli.h"

#include <getopt.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "examples/llama/kernels/kernels.h"
#include "examples/llama/model/hf/checkpoint.h"
#include "examples/llama/run/serve_cli.h"

namespace llama {
namespace {

enum { DECODE = 100, ENDTOKEN };  // decode.h's flags
enum { MODEL = 200, PROMPTIDS, MAXNEW, PREFILL, PREFILLCHUNK, PROMPTLOGITS };  // run/generate.h's
enum { WHOLE = 300 };  // bench.cc's
enum { SERVE = 400 };  // run/serve.h's flags: SERVE + their index (serve_options)
enum { CONFIG = 1, LAYERS, BATCH, CTX, STEPS, TP, WEIGHTS, OUT, BENCH, SWEEP, LMHEAD, VOCAB, SEED, ITERS, WARMUP,
       IDFILE, PDL, NOPDL, FOLD, NOFOLD, MODE, VERIFY, ATTN, ATTNBPS, HELP };

const option kOpts[] = {
    {"config", required_argument, 0, CONFIG}, {"layers", required_argument, 0, LAYERS},
    {"decode", required_argument, 0, DECODE}, {"end-token", required_argument, 0, ENDTOKEN},
    {"batch", required_argument, 0, BATCH},   {"ctx", required_argument, 0, CTX},
    {"steps", required_argument, 0, STEPS},   {"tp", required_argument, 0, TP},
    {"weights", required_argument, 0, WEIGHTS}, {"out", required_argument, 0, OUT},
    {"bench", no_argument, 0, BENCH},         {"sweep", optional_argument, 0, SWEEP},
    {"lm-head", no_argument, 0, LMHEAD},      {"vocab", required_argument, 0, VOCAB},
    {"seed", required_argument, 0, SEED},     {"iters", required_argument, 0, ITERS},
    {"warmup", required_argument, 0, WARMUP}, {"id-file", required_argument, 0, IDFILE},
    {"pdl", no_argument, 0, PDL},             {"no-pdl", no_argument, 0, NOPDL},
    {"fold-norm", no_argument, 0, FOLD},      {"no-fold-norm", no_argument, 0, NOFOLD},
    {"mode", required_argument, 0, MODE},
    {"verify", no_argument, 0, VERIFY},       {"help", no_argument, 0, HELP},
    {"attn", required_argument, 0, ATTN},     {"attn-bps", required_argument, 0, ATTNBPS},
    {"model", required_argument, 0, MODEL},   {"prompt-ids", required_argument, 0, PROMPTIDS},
    {"max-new-tokens", required_argument, 0, MAXNEW},
    {"prefill", required_argument, 0, PREFILL},
    {"prefill-chunk", required_argument, 0, PREFILLCHUNK},
    {"prompt-logits", required_argument, 0, PROMPTLOGITS},
    {"whole", no_argument, 0, WHOLE},
    {0, 0, 0, 0}};

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

// The batch the bench goes up to (a serving engine's sizes); the checked
// steps and --decode stay at kMaxBatch, what their tests cover.
const int kMaxBatch = 64, kMaxBenchBatch = 256;

// --config: the widths of a Llama, and its layer count for --whole.
bool apply_config(const char *arg, Options *o) {
  struct Preset {
    const char *name;
    int hidden, heads, kv_heads, head_dim, ffn, layers;
  };
  static const Preset presets[] = {{"8b", 4096, 32, 8, 128, 14336, 32},
                                   {"70b", 8192, 64, 8, 128, 28672, 80},
                                   {"1b", 2048, 32, 8, 64, 8192, 16}};  // Llama-3.2-1B: head_dim 64
  for (const Preset &p : presets)
    if (!std::strcmp(arg, p.name)) {
      Config &c = o->c;
      c.hidden = p.hidden, c.heads = p.heads, c.kv_heads = p.kv_heads, c.head_dim = p.head_dim, c.ffn = p.ffn;
      o->config_name = p.name;
      o->full_layers = p.layers;
      return true;
    }
  std::fprintf(stderr, "llama: --config '%s': expected 8b, 70b or 1b\n", arg);
  return false;
}

// --sweep's grid: "full" (batch 1..256 x ctx 512/2048/4096), "small" (batch
// 1/8/32 x ctx 512/4096), or "B,B,...xC,C,..." (e.g. 1,8x512,4096).
bool parse_grid(const char *s, Options *o) {
  o->sweep_batch.clear();
  o->sweep_ctx.clear();
  if (!std::strcmp(s, "full")) {
    o->sweep_batch = {1, 8, 32, 64, 128, 256};
    o->sweep_ctx = {512, 2048, 4096};
    return true;
  }
  if (!std::strcmp(s, "small")) {
    o->sweep_batch = {1, 8, 32};
    o->sweep_ctx = {512, 4096};
    return true;
  }
  const char *x = std::strchr(s, 'x');
  bool ok = x && x != s && x[1];
  for (int part = 0; ok && part < 2; part++) {
    const std::string list = part ? std::string(x + 1) : std::string(s, x);
    std::vector<int> &out = part ? o->sweep_ctx : o->sweep_batch;
    size_t p = 0;
    while (ok && p <= list.size()) {
      const size_t q = std::min(list.find(',', p), list.size());
      const std::string item = list.substr(p, q - p);
      char *end;
      errno = 0;
      const long v = std::strtol(item.c_str(), &end, 10);
      ok = !item.empty() && std::isdigit((unsigned char)item[0]) && !*end && !errno &&
           (part ? v >= 0 && v <= 8191 : v >= 1 && v <= kMaxBenchBatch);
      if (ok) out.push_back((int)v);
      p = q + 1;
    }
  }
  if (!ok)
    std::fprintf(stderr,
                 "llama: --sweep '%s': expected full, small or BATCHES x CTXS (e.g. 1,8x512,4096; batch 1..%d, "
                 "ctx 0..8191)\n",
                 s, kMaxBenchBatch);
  return ok;
}

// --tp left out: the largest TP up to the GPUs here that the model divides,
// said once (the ranks this process starts are told theirs).
int chosen_tp(const Config &c, int gpus) {
  const int t = largest_tp(c, std::max(1, std::min(gpus, 8)));
  std::printf("llama: TP %d (%d GPU(s) here%s)\n", t, gpus, t < gpus ? "; the model divides no more" : "");
  return t;
}

// --bench's own flags: --sweep and --whole need it; --whole runs the
// whole model of --config (its layers, the LM head), so --layers and
// --weights (config.txt's layers) do not go with it, nor --batch / --ctx
// with --sweep (the grid sets them). The bench's points go up to batch
// kMaxBenchBatch; the other runs stay at kMaxBatch.
int check_bench_flags(Options *o) {
  const char *bad = nullptr;
  if ((o->sweep || o->whole) && !o->bench) bad = o->sweep ? "--sweep needs --bench" : "--whole needs --bench";
  else if (o->whole && o->set_layers) bad = "--whole runs every layer of --config; it does not go with --layers";
  else if (o->whole && !o->weights.empty()) bad = "--whole runs --config's model; it does not go with --weights";
  else if (o->sweep && (o->set_batch || o->set_ctx))
    bad = "--sweep sets batch and ctx (--sweep 1,8x512,4096 names others); it does not go with --batch or --ctx";
  if (bad) {
    std::fprintf(stderr, "llama: %s\n", bad);
    return 2;
  }
  if (o->whole) {
    o->c.layers = o->full_layers;
    o->lm_head = true;
  }
  return 0;
}

// --model: the run is one sequence of the prompt plus --max-new-tokens; the
// model, and whether the engine can run it, come from the checkpoint (read
// here already, headers only, so a refusal costs no GPU time: exit 2).
int parse_model(Options *o, int gpus) {
  if (o->model.empty() || o->prompt.empty()) {
    std::fprintf(stderr, "llama: --model, --prompt-ids (and --max-new-tokens) go together\n");
    return 2;
  }
  if (!o->other_flag.empty() || !o->out.empty()) {
    std::fprintf(stderr, "llama: %s does not go with --model (the checkpoint sets the model; the prompt, the run)\n",
                 o->other_flag.empty() ? "--out" : o->other_flag.c_str());
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
  const bool pick = o->tp == 0;  // the checkpoint's widths first, at TP 1, then the TP they allow
  if (m.open(o->model, pick ? 1 : o->tp, need, &c, &err) ||
      (pick && (o->tp = chosen_tp(c, gpus)) > 1 && m.open(o->model, o->tp, need, &c, &err))) {
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

// One flag and its argument into *o: 0, or 1 (--help), or 2 (refused).
int apply_flag(int ch, const char *arg, Options *o) {
  Config &c = o->c;
  int v;
  switch (ch) {
    case MODEL: o->model = arg; break;
    case PROMPTIDS: if (!parse_ids(arg, &o->prompt)) return 2; break;
    case MAXNEW: if (!parse_int("--max-new-tokens", arg, 1, 8191, &o->max_new)) return 2; o->set_max_new = true; break;
    case PREFILL:
      if (!std::strcmp(arg, "graph")) o->prefill = GenerateOptions::PREFILL_GRAPH;
      else if (!std::strcmp(arg, "steps")) o->prefill = GenerateOptions::PREFILL_STEPS;
      else {
        std::fprintf(stderr, "llama: --prefill '%s': expected graph or steps\n", arg);
        return 2;
      }
      break;
    case PREFILLCHUNK:
      if (!parse_int("--prefill-chunk", arg, 64, 8192, &o->prefill_chunk)) return 2;
      if (o->prefill_chunk % 64) {
        std::fprintf(stderr, "llama: --prefill-chunk %d: expected a multiple of 64\n", o->prefill_chunk);
        return 2;
      }
      o->set_prefill_chunk = true;
      break;
    case PROMPTLOGITS: o->prompt_logits = arg; break;
    case CONFIG: if (!apply_config(arg, o)) return 2; break;
    case DECODE: if (!parse_int("--decode", arg, 1, 8192, &o->decode)) return 2; break;
    case ENDTOKEN: if (!parse_int("--end-token", arg, 0, 1 << 30, &o->end_token)) return 2; break;
    case LAYERS: if (!parse_int("--layers", arg, 1, 1000, &c.layers)) return 2; o->set_layers = true; break;
    case BATCH: if (!parse_int("--batch", arg, 1, kMaxBenchBatch, &c.batch)) return 2; o->set_batch = true; break;
    case CTX: if (!parse_int("--ctx", arg, 0, 8191, &c.ctx)) return 2; o->set_ctx = true; break;
    case STEPS: if (!parse_int("--steps", arg, 1, 8192, &c.steps)) return 2; o->set_steps = true; break;
    case TP: if (!parse_int("--tp", arg, 1, 8, &o->tp)) return 2; break;
    case WEIGHTS: o->weights = arg; break;
    case OUT: o->out = arg; break;
    case BENCH: o->bench = true; break;
    case SWEEP: if (!parse_grid(arg ? arg : "full", o)) return 2; o->sweep = true; break;
    case WHOLE: o->whole = true; break;
    case LMHEAD: o->lm_head = true; break;
    case VOCAB: if (!parse_int("--vocab", arg, 8, 1 << 20, &o->vocab)) return 2; break;
    case SEED: if (!parse_int("--seed", arg, 0, 1 << 30, &v)) return 2; c.seed = (uint64_t)v; break;
    case ITERS: if (!parse_int("--iters", arg, 1, 1000000, &o->iters)) return 2; o->set_iters = true; break;
    case WARMUP: if (!parse_int("--warmup", arg, 0, 1000000, &o->warmup)) return 2; break;
    case IDFILE: o->id_file = arg; break;
    case PDL: o->pdl = true; break;
    case NOPDL: o->pdl = false; break;
    case FOLD: o->fold_norm = true; break;
    case NOFOLD: o->fold_norm = false; break;
    case VERIFY: o->verify = true; break;
    case ATTN:
      if (!std::strcmp(arg, "fused")) o->attn = Rank::ATTN_FUSED;
      else if (!std::strcmp(arg, "tc")) o->attn = Rank::ATTN_TC;
      else if (!std::strcmp(arg, "fma")) o->attn = Rank::ATTN_FMA;
      else {
        std::fprintf(stderr, "llama: --attn '%s': expected fused, tc or fma\n", arg);
        return 2;
      }
      break;
    case ATTNBPS: if (!parse_int("--attn-bps", arg, 0, 64, &o->attn_bps)) return 2; break;
    case MODE:
      if (!std::strcmp(arg, "explicit")) o->mode = TPG_MODE_EXPLICIT;
      else if (!std::strcmp(arg, "capture")) o->mode = TPG_MODE_CAPTURE;
      else if (!std::strcmp(arg, "eager")) o->mode = TPG_MODE_EAGER;
      else {
        std::fprintf(stderr, "llama: --mode '%s': expected explicit, capture or eager\n", arg);
        return 2;
      }
      o->set_mode = true;
      break;
    case HELP: usage(stdout); return 1;
    default:
      if (ch >= SERVE) return apply_serve_flag(ch - SERVE, arg, &o->serve);
      usage(stderr);
      return 2;
  }
  return 0;
}

}  // namespace

void usage(FILE *f) {
  std::fprintf(f,
               "usage: llama [flags]\n"
               "  --config 8b|70b|1b  Llama-3-8B-like (4096 hidden, 32/8 heads, ffn 14336, 32 layers;\n"
               "                    default), 70B-like (8192, 64/8, 28672, 80) or Llama-3.2-1B-like\n"
               "                    (2048, 32/8, head_dim 64, ffn 8192, 16)\n"
               "  --layers L        decoder layers in the graph (default 4)\n"
               "  --batch B         sequences, 1..64, or 1..256 with --bench (default 1)\n"
               "  --ctx C           positions already in the KV cache (default 512)\n"
               "  --steps S         decode steps; ctx + S <= 8192 (default 4)\n"
               "  --tp N            tensor-parallel ranks, 1..8 (default: the GPUs here, or mpirun's\n"
               "                    -np, capped by what the model divides); started by this\n"
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
               "  --sweep [GRID]    with --bench: each point of GRID, instead of --batch and --ctx:\n"
               "                    full (default: batch 1/8/32/64/128/256 x ctx 512/2048/4096),\n"
               "                    small (batch 1/8/32 x ctx 512/4096) or BATCHES x CTXS, e.g.\n"
               "                    1,8,64x512,4096; a point the GPU's memory cannot hold is skipped\n"
               "                    with its reason\n"
               "  --whole           with --bench: the whole model of --config (all its layers, the\n"
               "                    LM head): ms per token, tokens/s, bytes read per token and the\n"
               "                    share of the device-to-device copy bandwidth measured first\n"
               "  --iters N, --warmup N   bench launches (default 200, 20)\n"
               "  --mode M          with --bench: explicit (tpgraph's graph, default), capture\n"
               "                    (the same nodes stream-captured) or eager (no graph)\n"
               "  --pdl, --no-pdl   programmatic dependent launch on (default) or off\n"
               "                    (TPG_GRAPH_PDL; the engine's kernels wait with griddepcontrol.wait\n"
               "                    and then let the next node launch)\n"
               "  --fold-norm, --no-fold-norm  at TP 1 and up to 16 rows, the RMSNorms inside the\n"
               "                    GEMVs (the O and down GEMVs write the residual stream and its\n"
               "                    rows' sums of squares, the next GEMV normalizes x where it reads\n"
               "                    it) or each its own kernel (default: off)\n"
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
  serve_usage(f);
}

int largest_tp(const Config &c, int limit) {
  for (int t = limit; t > 1; t--)
    if (c.kv_heads > 0 && c.kv_heads % t == 0 && c.ffn % (8 * t) == 0 && c.vocab % (8 * t) == 0) return t;
  return 1;
}

int parse_args(int argc, char **argv, Options *o) {
  int ch, idx = -1;
  optind = 0;  // getopt_long's state starts afresh: the parser may run more than once (tests, fuzzer)
  std::vector<option> opts(kOpts, kOpts + sizeof kOpts / sizeof kOpts[0] - 1);
  const std::vector<option> serve = serve_options(SERVE);
  opts.insert(opts.end(), serve.begin(), serve.end());
  opts.push_back({0, 0, 0, 0});
  while ((ch = getopt_long(argc, argv, "", opts.data(), &idx)) != -1) {
    // --model takes the model and the run from the checkpoint and the
    // prompt: flags that set either are refused with it, not ignored.
    if (idx >= 0 && o->other_flag.empty() && ch != MODEL && ch != PROMPTIDS && ch != MAXNEW && ch != TP &&
        ch != ENDTOKEN && ch != PDL && ch != NOPDL && ch != ATTN && ch != ATTNBPS && ch != IDFILE && ch != HELP &&
        ch != PREFILL && ch != PREFILLCHUNK && ch != PROMPTLOGITS && ch != ITERS && ch != OUT && ch < SERVE)
      o->other_flag = std::string("--") + opts[idx].name;
    // ... and its own flags need it.
    if (idx >= 0 && (ch == PREFILL || ch == PREFILLCHUNK || ch == PROMPTLOGITS) && o->model_flag.empty())
      o->model_flag = std::string("--") + opts[idx].name;
    idx = -1;
    const char *arg = optarg;
    // "--sweep small" as well as "--sweep=small": the next word, when it is
    // no flag, is the grid (the program takes no other words).
    if (ch == SWEEP && !arg && optind < argc && argv[optind][0] != '-') arg = argv[optind++];
    if (const int rc = apply_flag(ch, arg, o)) return rc;
  }
  if (optind < argc) {
    std::fprintf(stderr, "llama: unexpected argument '%s'\n", argv[optind]);
    return 2;
  }
  return 0;
}

int finish_args(Options *o, int gpus) {
  Config &c = o->c;
  bool served = false;  // --requests: run/serve_cli.cc checks the whole run
  if (const int rc = finish_serve(o, gpus, &served)) return rc;
  if (served) return 0;
  if (!o->model.empty() || !o->prompt.empty() || o->set_max_new) return parse_model(o, gpus);
  if (!o->model_flag.empty()) {
    std::fprintf(stderr, "llama: %s goes with --model\n", o->model_flag.c_str());
    return 2;
  }
  if (o->decode && (o->bench || !o->lm_head)) {
    std::fprintf(stderr, "llama: --decode needs --lm-head (the tokens come from the logits), not --bench\n");
    return 2;
  }
  if (o->decode) c.steps = o->decode;  // the caches' capacity: ctx + N
  if (check_bench_flags(o)) return 2;
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
  if (o->tp == 0) o->tp = chosen_tp(c, gpus);
  const int need = c.ctx + c.steps;
  if (c.max_ctx < need) c.max_ctx = need;
  const char *bad = nullptr;
  char why[160];
  if (c.heads < 1 || c.kv_heads < 1) bad = "heads and kv_heads must be positive";  // before any % by them
  else if (c.head_dim != LLAMA_HEAD_DIM && c.head_dim != LLAMA_HEAD_DIM_SMALL) bad = "head_dim must be 128 or 64";
  else if (c.heads % c.kv_heads == 0 && c.heads / c.kv_heads > LLAMA_ATTN_MAX_GROUP)
    bad = "heads / kv_heads must be 1..16";
  else if (o->attn == Rank::ATTN_FMA && c.head_dim != LLAMA_HEAD_DIM)
    bad = "--attn fma: head_dim 128 only (use fused or tc)";
  else if (c.hidden % 8 || c.hidden <= 0) bad = "hidden must be a positive multiple of 8";
  else if (c.heads % c.kv_heads) bad = "heads must be a multiple of kv_heads";
  else if (c.kv_heads % o->tp) { std::snprintf(why, sizeof why, "--tp %d must divide kv_heads %d", o->tp, c.kv_heads); bad = why; }
  else if (c.ffn % (8 * o->tp)) { std::snprintf(why, sizeof why, "ffn %d must be a multiple of 8 x --tp", c.ffn); bad = why; }
  else if (c.vocab % (8 * o->tp)) { std::snprintf(why, sizeof why, "vocab %d must be a multiple of 8 x --tp", c.vocab); bad = why; }
  else if (c.batch < 1 || c.batch > (o->bench ? kMaxBenchBatch : kMaxBatch)) {
    std::snprintf(why, sizeof why, "--batch %d: 1..%d (up to %d with --bench)", c.batch, kMaxBatch, kMaxBenchBatch);
    bad = why;
  }
  else if (c.max_ctx > 8192) { std::snprintf(why, sizeof why, "ctx + steps = %d: the cache holds at most 8192 positions", c.max_ctx); bad = why; }
  if (bad) {
    std::fprintf(stderr, "llama: %s\n", bad);
    return 2;
  }
  return 0;
}
}  // namespace llama
