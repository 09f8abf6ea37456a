// cli_fuzz.cc - libFuzzer on llama's command line (examples/llama/run/cli.h:
// parse_args, then finish_args) and the config.txt it reads.
//
// The input: one byte, the GPUs present (0..16); then the arguments, one a
// line; then, after a line "--config.txt--", config.txt's text. An argument
// "@" is the harness's directory (where config.txt is); any other argument
// that names a path outside it (a leading '/', or "..") becomes "@" too, so
// that --prompt-logits, which creates its file, stays inside.
//
// Promises checked (abort() if broken):
//   - parse_args returns 0, 1 or 2, finish_args 0 or 2;
//   - an accepted run is one the engine can build: a TP of 1..8 that
//     divides the KV heads, FFN and vocabulary as the shards need, heads a
//     multiple of positive KV heads in a group the kernels have, a head dim
//     they have, batch 1..64, a cache of at most 8192 positions that holds
//     ctx + steps.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "examples/llama/kernels/kernels.h"
#include "examples/llama/run/cli.h"
#include "tests/fuzz/llama_fuzz_util.h"

using llama_fuzz::must;

namespace {
std::string g_cwd;  // libFuzzer's: it reads the next input from there
}

extern "C" int LLVMFuzzerInitialize(int *, char ***) {
  char cwd[4096];
  must(getcwd(cwd, sizeof cwd) != nullptr, "getcwd");
  g_cwd = cwd;
  llama_fuzz::fuzz_dir("cli_fuzz");
  // The parser's messages are not the harness's (LLAMA_FUZZ_VERBOSE=1 keeps
  // them): libFuzzer keeps the FILE it took at start, and sanitizers write
  // to fd 2 themselves.
  if (!llama_fuzz::verbose()) {
    stdout = std::fopen("/dev/null", "w");
    stderr = std::fopen("/dev/null", "w");
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  const std::string &dir = llama_fuzz::fuzz_dir("cli_fuzz");
  const int gpus = data[0] % 17;
  std::string text(reinterpret_cast<const char *>(data + 1), size - 1);
  const std::string mark = "--config.txt--\n";
  const size_t cut = text.find(mark);
  const std::string config = cut == std::string::npos ? "" : text.substr(cut + mark.size());
  if (cut != std::string::npos) text.resize(cut);
  unlink((dir + "/config.txt").c_str());
  if (cut != std::string::npos) llama_fuzz::write_file(dir + "/config.txt", config.data(), config.size());
  std::vector<std::string> args{"llama"};
  for (size_t at = 0; at < text.size() && args.size() < 64;) {
    size_t nl = text.find('\n', at);
    if (nl == std::string::npos) nl = text.size();
    std::string a = text.substr(at, nl - at);
    if (a == "@" || (!a.empty() && a[0] == '/') || a.find("..") != std::string::npos) a = dir;
    args.push_back(a);
    at = nl + 1;
  }
  std::vector<char *> argv;
  for (std::string &a : args) argv.push_back(&a[0]);
  argv.push_back(nullptr);
  llama::Options o;
  must(chdir(dir.c_str()) == 0, "chdir");  // a relative path (--prompt-logits creates its file) lands here
  const int pr = llama::parse_args((int)args.size(), argv.data(), &o);
  const int fr = pr ? -1 : llama::finish_args(&o, gpus);
  must(chdir(g_cwd.c_str()) == 0, "chdir back");
  must(pr == 0 || pr == 1 || pr == 2, "parse_args returns 0, 1 or 2");
  must(fr == -1 || fr == 0 || fr == 2, "finish_args returns 0 or 2");
  if (fr != 0) return 0;
  const llama::Config &c = o.c;
  must(o.tp >= 1 && o.tp <= 8, "TP 1..8");
  must(c.heads >= 1 && c.kv_heads >= 1 && c.heads % c.kv_heads == 0 && c.heads / c.kv_heads <= LLAMA_ATTN_MAX_GROUP,
       "heads a multiple of positive kv_heads, a group the kernels have");
  must(c.head_dim == LLAMA_HEAD_DIM || c.head_dim == LLAMA_HEAD_DIM_SMALL, "a head dim the kernels have");
  must(c.kv_heads % o.tp == 0 && c.ffn % (8 * o.tp) == 0 && c.vocab % (8 * o.tp) == 0, "the TP divides the model");
  must(c.batch >= 1 && c.batch <= 64, "batch 1..64");
  must(c.max_ctx <= 8192 && c.ctx + c.steps <= c.max_ctx, "the cache holds ctx + steps, at most 8192");
  return 0;
}
