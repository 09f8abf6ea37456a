// cli_test.cc - llama's command line on a CPU (run/cli.h: parse_args,
// finish_args, largest_tp), as a library: no GPU, no CUDA call. Checks
//   - each kind of bad flag is refused with exit code 2 and a message;
//   - --tp left out follows the GPUs present (finish_args with 0, 1, 2, 8
//     and 16 GPUs), capped by what the model divides;
//   - --weights DIR's config.txt: kv_heads 0 (a SIGFPE once), negative,
//     fractional, huge, non-finite and repeated values, trailing text, a
//     FIFO, a link to /dev/zero, a directory and a file over its cap are
//     refused with exit code 2, naming the file, line, key and value;
//   - --model DIR: the checkpoint's refusals reach the command line as exit
//     code 2 (2^31 - 1 layers, a FIFO, a tensor the engine does not read);
//   - the llama program itself (built beside this test): the same inputs
//     end with exit code 2, never a signal.
//
//   bazel test //examples/llama:cli_test
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "examples/llama/run/cli.h"
#include "examples/llama/test/checkpoint_writer.h"

using namespace llama;
using namespace llama_test;

namespace {

int g_pass = 0, g_fail = 0;
std::string g_root;

void expect(bool ok, const std::string &what, const std::string &detail_in = "") {
  std::string detail = detail_in;
  for (size_t at; !g_root.empty() && (at = detail.find(g_root)) != std::string::npos;) detail.replace(at, g_root.size(), "$TMP");
  while (!detail.empty() && detail.back() == '\n') detail.pop_back();
  std::printf("%s %s%s%s\n", ok ? "PASS" : "FAIL", what.c_str(), detail.empty() ? "" : ": ", detail.c_str());
  (ok ? g_pass : g_fail)++;
}

struct Run {
  int rc = 0;
  std::string out;  // stdout and stderr together
  Options o;
};

// parse_args, then (when it says go on) finish_args with `gpus`, as main
// runs them; what they print is captured.
Run run(const std::vector<std::string> &args, int gpus) {
  std::vector<std::string> a{"llama"};
  a.insert(a.end(), args.begin(), args.end());
  std::vector<char *> argv;
  for (std::string &s : a) argv.push_back(&s[0]);
  argv.push_back(nullptr);
  std::fflush(stdout);
  std::fflush(stderr);
  FILE *tmp = std::tmpfile();
  const int out = dup(1), err = dup(2);
  dup2(fileno(tmp), 1);
  dup2(fileno(tmp), 2);
  Run r;
  r.rc = parse_args((int)a.size(), argv.data(), &r.o);
  if (r.rc == 0) r.rc = finish_args(&r.o, gpus);
  std::fflush(stdout);
  std::fflush(stderr);
  dup2(out, 1);
  dup2(err, 2);
  close(out);
  close(err);
  std::rewind(tmp);
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, tmp)) > 0;) r.out.append(buf, n);
  std::fclose(tmp);
  return r;
}

// Refused with code 2 and a message holding `want`.
void refused(const std::vector<std::string> &args, const std::string &want, const std::string &what, int gpus = 1) {
  const Run r = run(args, gpus);
  const bool ok = r.rc == 2 && r.out.find(want) != std::string::npos;
  const std::string first = r.out.substr(0, r.out.find('\n'));  // usage's text is long
  expect(ok, "refused: " + what, "rc " + std::to_string(r.rc) + ", " + first + (ok ? "" : " (wanted '" + want + "')"));
}

void test_flags() {
  expect(run({"--help"}, 1).rc == 1, "--help: 1 (main exits 0)");
  expect(run({}, 1).rc == 0, "no flags: the random 8B-like model runs");
  refused({"--tp", "0"}, "--tp '0': expected an integer in 1..8", "--tp 0");
  refused({"--tp", "9"}, "--tp '9': expected an integer in 1..8", "--tp 9");
  refused({"--tp", "2x"}, "--tp '2x'", "--tp with trailing text");
  refused({"--layers", "0"}, "--layers '0'", "--layers 0");
  refused({"--layers", "99999999999999999999"}, "--layers '99999999999999999999'", "--layers beyond long");
  refused({"--batch", "300"}, "--batch '300': expected an integer in 1..", "--batch 300");
  refused({"--ctx", "-1"}, "--ctx '-1'", "--ctx -1");
  refused({"--vocab", "7"}, "--vocab '7'", "--vocab 7");
  refused({"--config", "13b"}, "--config '13b': expected 8b", "--config 13b");
  refused({"--attn", "flash"}, "--attn 'flash'", "--attn flash");
  refused({"--mode", "fast"}, "--mode 'fast'", "--mode fast");
  refused({"--prefill-chunk", "100"}, "--prefill-chunk 100: expected a multiple of 64", "--prefill-chunk 100");
  refused({"--nope"}, "usage: llama", "an unknown flag");
  refused({"extra"}, "unexpected argument 'extra'", "a positional argument");
  refused({"--prompt-ids", "1,,2"}, "--prompt-ids '1,,2'", "--prompt-ids with an empty id");
  refused({"--prompt-ids", "-1"}, "--prompt-ids '-1'", "--prompt-ids -1");
  refused({"--prompt-ids", "1,2,"}, "--prompt-ids '1,2,'", "--prompt-ids ending in a comma");
  refused({"--prompt-ids", "2000000000"}, "--prompt-ids '2000000000'", "--prompt-ids above 2^30");
  refused({"--max-new-tokens", "0"}, "--max-new-tokens '0'", "--max-new-tokens 0");
  refused({"--model", "x", "--prompt-ids", "1", "--layers", "2"}, "--layers does not go with --model", "--layers with --model");
  refused({"--prefill", "steps"}, "--prefill goes with --model", "--prefill without --model");
  refused({"--sweep"}, "--sweep needs --bench", "--sweep without --bench");
  refused({"--bench", "--verify"}, "--verify checks the decode steps", "--verify with --bench");
  refused({"--mode", "eager"}, "--mode needs --bench", "--mode without --bench");
  refused({"--decode", "4"}, "--decode needs --lm-head", "--decode without --lm-head");
  refused({"--ctx", "8000", "--steps", "500"}, "ctx + steps = 8500", "ctx + steps above the cache");
}

void test_tp_default() {
  struct Case {
    std::vector<std::string> args;
    int gpus, want;
  } cases[] = {
      {{}, 0, 1}, {{}, 1, 1}, {{}, 2, 2}, {{}, 8, 8}, {{}, 16, 8},  // 8B-like: 8 KV heads
      {{"--config", "70b", "--lm-head"}, 8, 8},                       // vocab 128256 = 64 x 2004
      {{"--lm-head", "--vocab", "1008"}, 8, 2},                       // 1008 divides by 16, not 32
      {{"--lm-head", "--vocab", "1000"}, 8, 1},                       // nor by 16
      {{"--tp", "4"}, 2, 4},                                          // given: kept (main checks the GPUs)
  };
  for (const Case &c : cases) {
    const Run r = run(c.args, c.gpus);
    std::string args;
    for (const std::string &a : c.args) args += " " + a;
    expect(r.rc == 0 && r.o.tp == c.want,
           "--tp left out:" + args + " with " + std::to_string(c.gpus) + " GPUs -> TP " + std::to_string(c.want),
           "rc " + std::to_string(r.rc) + ", tp " + std::to_string(r.o.tp) + ", " + r.out);
  }
  Config c;
  c.kv_heads = 0;
  expect(largest_tp(c, 8) == 1, "largest_tp: 0 KV heads gives 1, no division by zero");
}

const char *const kConfigTxt =
    "hidden 256\nheads 4\nkv_heads 2\nhead_dim 64\nffn 512\nlayers 2\nvocab 0\neps 1e-05\ntheta 500000.0\n"
    "batch 1\nctx 16\nsteps 4\nmax_ctx 0\nseed 7\n";

// config.txt with line `key` replaced by `line` (or appended when absent).
std::string config_with(const std::string &key, const std::string &line) {
  std::string t = kConfigTxt;
  const size_t at = t.find(key + " ");
  if (at == std::string::npos || (at > 0 && t[at - 1] != '\n')) return t + line + "\n";
  return t.substr(0, at) + line + t.substr(t.find('\n', at));
}

void test_config_txt() {
  const std::string dir = fresh_dir(g_root, "weights");
  write_file(dir + "/config.txt", kConfigTxt);
  Run r = run({"--weights", dir}, 2);
  expect(r.rc == 0 && r.o.c.hidden == 256 && r.o.c.kv_heads == 2 && r.o.c.head_dim == 64 && r.o.c.seed == 7 &&
             r.o.c.eps == 1e-5f && r.o.tp == 2,
         "config.txt: every key read, TP 2 from 2 GPUs", r.out);
  const struct {
    std::string key, line, want;
  } bad[] = {
      {"kv_heads", "kv_heads 0", "line 3: kv_heads 0: expected an integer in 1..1024"},
      {"layers", "layers -3", "line 6: layers -3: expected an integer in 1..1024"},
      {"heads", "heads -1", "heads -1: expected an integer in 1..1024"},
      {"ffn", "ffn -8", "ffn -8: expected an integer in 8..1048576"},
      {"vocab", "vocab -5", "vocab -5: expected an integer in 0..16777216"},
      {"vocab", "vocab 16777217", "vocab 16777217: expected an integer in 0..16777216"},
      {"ctx", "ctx -1", "ctx -1: expected an integer in 0..8191"},
      {"batch", "batch 257", "batch 257: expected an integer in 1..256"},
      {"batch", "batch 65", "1..64"},  // the bench's batches go further; a decode run's not
      {"layers", "layers 4.0", "layers 4.0: expected an integer"},
      {"layers", "layers 1e3", "layers 1e3: expected an integer"},
      {"hidden", "hidden 99999999999999999999", "hidden 99999999999999999999: expected an integer in 8..65536"},
      {"eps", "eps 1e-300", "eps 1e-300: expected a normal fp32 in (0, 1]"},
      {"theta", "theta 1e39", "theta 1e39: expected a finite fp32 above 1"},
      {"theta", "theta nan", "theta nan: expected a finite fp32 above 1"},
      {"seed", "seed -1", "seed -1: expected an integer in 0..2^64-1"},
      {"layers", "layers", "key 'layers' has no value"},
      {"layers", "layers 2 # two", "'layers 2 # two': expected `key value`"},
      {"zz", "layers 3", "line 15: key 'layers' given again (first on line 6)"},
      {"kv_heads", "kv_heads 3", "heads must be a multiple of kv_heads"},
      {"head_dim", "head_dim 96", "head_dim must be 128 or 64"},
      {"ctx", "ctx 8190", "ctx + steps = 8194"},
  };
  for (const auto &b : bad) {
    write_file(dir + "/config.txt", config_with(b.key, b.line));
    refused({"--weights", dir}, b.want, "config.txt '" + b.line + "'");
  }
  write_file(dir + "/config.txt", std::string(kConfigTxt) + "colour blue\n");
  r = run({"--weights", dir}, 1);
  expect(r.rc == 0 && r.out.find("line 15: unknown key 'colour' ignored") != std::string::npos,
         "config.txt: an unknown key is named and ignored", r.out);
  write_file(dir + "/config.txt", std::string(kConfigTxt) + std::string(70000, '#') + "\n");
  refused({"--weights", dir}, "config.txt: 70133 bytes, more than the 64 KiB", "config.txt over its cap");
  unlink((dir + "/config.txt").c_str());
  expect(mkfifo((dir + "/config.txt").c_str(), 0600) == 0, "config.txt: a FIFO made");
  refused({"--weights", dir}, "config.txt: a FIFO, not a regular file", "config.txt a FIFO (never waited on)");
  unlink((dir + "/config.txt").c_str());
  expect(symlink("/dev/zero", (dir + "/config.txt").c_str()) == 0, "config.txt: a link to /dev/zero made");
  refused({"--weights", dir}, "config.txt: a character device, not a regular file", "config.txt a link to /dev/zero");
  unlink((dir + "/config.txt").c_str());
  mkdir((dir + "/config.txt").c_str(), 0755);
  refused({"--weights", dir}, "config.txt: a directory, not a regular file", "config.txt a directory");
  refused({"--weights", dir + "/none"}, "none/config.txt: cannot open", "no config.txt");
}

void test_model() {
  Spec s = llama_spec();
  const std::string good = write_model(fresh_dir(g_root, "model"), s);
  Run r = run({"--model", good, "--prompt-ids", "1,2,3"}, 8);
  expect(r.rc == 0 && r.o.tp == 2 && r.o.c.layers == 2 && r.o.c.vocab == 32,
         "--model: a tiny checkpoint read, TP 2 (its 2 KV heads) from 8 GPUs", r.out);
  refused({"--model", good, "--prompt-ids", "1,32"}, "token 32 is outside the vocabulary (vocab_size 32)",
          "--prompt-ids beyond the vocabulary");
  refused({"--model", good, "--prompt-ids", "1", "--tp", "4"}, "num_key_value_heads 2: --tp 4 must divide it",
          "--tp that does not divide the KV heads");
  Spec l = llama_spec();
  l.cfg["num_hidden_layers"] = "2147483647";
  const std::string layers = write_model(fresh_dir(g_root, "layers"), l);
  refused({"--model", layers, "--prompt-ids", "1"}, "num_hidden_layers 2147483647: expected 1..1024",
          "--model with 2^31 - 1 layers");
  Spec q = llama_spec();
  q.add = {{"model.layers.0.self_attn.q_norm.weight", {128}}};
  const std::string qnorm = write_model(fresh_dir(g_root, "qnorm"), q);
  refused({"--model", qnorm, "--prompt-ids", "1"}, "q_norm.weight [128]: not a tensor this engine reads",
          "--model with Qwen3's q_norm");
  const std::string fifo = write_model(fresh_dir(g_root, "fifo"), s);
  unlink((fifo + "/model.safetensors").c_str());
  expect(mkfifo((fifo + "/model.safetensors").c_str(), 0600) == 0, "--model: a FIFO made");
  refused({"--model", fifo, "--prompt-ids", "1"}, "model.safetensors: a FIFO, not a regular file",
          "--model whose model.safetensors is a FIFO");
  // A request past a sliding window is refused alone; the others are served.
  Spec w = llama_spec();
  w.cfg["architectures"] = "[\"MistralForCausalLM\"]";
  w.cfg["model_type"] = "\"mistral\"";
  w.cfg["sliding_window"] = "64";
  const std::string win = write_model(fresh_dir(g_root, "window"), w);
  const std::string reqs = win + "/requests.jsonl";
  write_file(reqs, "{\"prompt_ids\": [1, 2], \"max_new_tokens\": 8}\n"
                   "{\"prompt_ids\": [1, 2, 3], \"max_new_tokens\": 62}\n");
  Run q2 = run({"--model", win, "--requests", reqs}, 1);
  const std::string want = "65 positions (prompt + max_new_tokens) exceed sliding_window 64";
  const bool one_left = q2.o.serve.reqs.size() == 1 && q2.o.serve.refused.size() == 1 &&
                        q2.o.serve.refused[0].line == 2 && q2.o.serve.refused[0].why.find(want) != std::string::npos;
  expect(q2.rc == 0 && one_left, "--requests: a request past the sliding window refused alone, line 1 kept",
         q2.out + (q2.o.serve.refused.empty() ? "" : q2.o.serve.refused[0].why));
}

// The program itself, when Bazel built it beside this test: the inputs
// above end with exit code 2, never a signal (kv_heads 0 was SIGFPE, 136).
void test_program() {
  const char *prog = "examples/llama/llama";
  if (access(prog, X_OK) != 0) {
    expect(false, "the llama program is in this test's runfiles", prog);
    return;
  }
  const std::string dir = fresh_dir(g_root, "program");
  write_file(dir + "/config.txt", config_with("kv_heads", "kv_heads 0"));
  Spec l = llama_spec();
  l.cfg["num_hidden_layers"] = "2147483647";
  const std::string layers = write_model(fresh_dir(g_root, "program_layers"), l);
  const std::vector<std::vector<std::string>> cases = {
      {"--weights", dir}, {"--model", layers, "--prompt-ids", "1"}, {"--tp", "0"}, {"--prompt-ids", "1,,2"}};
  for (const auto &args : cases) {
    const pid_t pid = fork();
    if (pid == 0) {
      std::vector<char *> argv{const_cast<char *>(prog)};
      for (const std::string &a : args) argv.push_back(const_cast<char *>(a.c_str()));
      argv.push_back(nullptr);
      const int null = open("/dev/null", O_WRONLY);
      dup2(null, 1);
      dup2(null, 2);
      execv(prog, argv.data());
      _exit(127);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    std::string joined;
    for (const std::string &a : args) joined += " " + a;
    expect(WIFEXITED(status) && WEXITSTATUS(status) == 2, "llama" + joined + ": exit code 2",
           WIFSIGNALED(status) ? "signal " + std::to_string(WTERMSIG(status))
                               : "exit code " + std::to_string(WEXITSTATUS(status)));
  }
}

}  // namespace

int main() {
  g_root = temp_root("cli_test");
  test_flags();
  test_tp_default();
  test_config_txt();
  test_model();
  test_program();
  remove_tree(g_root);
  std::printf("cli_test: %d passed, %d failed\n", g_pass, g_fail);
  return g_fail ? 1 : 0;
}
