// inputs_test.cc - hostile model files refused in bounded time and memory,
// on a CPU: each row of docs/reliability.md's "Model files" table, built
// here at the size that hurt (a 160k-key header, files at their caps, 2^31
// layers, FIFOs, links to /dev/zero, a shard truncated after it was opened).
//
// Each case runs in a child process of its own, so that its peak memory can
// be measured (VmHWM after the peak is reset, less VmRSS at the start) and
// a hang or a signal is caught instead of stopping the test
// (alarm(10) in the child). A case passes when the input is refused with a
// message holding the expected words, within 1 s, and with its peak memory
// growth below twice the case's files plus 4 MiB (the allowance is the
// largest table model/limits.h lets a file of any size build: 16448
// tensors' names, dtypes, shapes and offsets).
//
//   bazel test //examples/llama:inputs_test
#include <fcntl.h>
#include <malloc.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "examples/llama/llama.h"
#include "examples/llama/model/hf/checkpoint.h"
#include "examples/llama/model/limits.h"
#include "examples/llama/test/checkpoint_writer.h"

using namespace llama;
using namespace llama_test;

namespace {

#if defined(__SANITIZE_ADDRESS__)
constexpr bool kMeasureMemory = false;  // ASan's shadow and quarantine are not the reader's
constexpr double kTimeLimitMs = 10000;
#else
constexpr bool kMeasureMemory = true;
constexpr double kTimeLimitMs = 1000;
#endif
// The largest tables the limits allow: kMaxTensors entries of about 250
// bytes (name, dtype, shape, offsets) in a header's table.
constexpr double kAllowanceMiB = 4;

int g_pass = 0, g_fail = 0;
std::string g_root;

// The bytes of the regular files under dir (links and FIFOs count nothing).
uint64_t files_bytes(const std::string &dir, const std::vector<std::string> &names) {
  uint64_t n = 0;
  for (const std::string &f : names) {
    struct stat st;
    if (lstat((dir + "/" + f).c_str(), &st) == 0 && S_ISREG(st.st_mode)) n += (uint64_t)st.st_size;
  }
  return n;
}

// A field of /proc/self/status in MiB ("VmRSS", "VmHWM"), -1 if absent.
double status_mib(const char *field) {
  double kib = -1;
  if (FILE *f = std::fopen("/proc/self/status", "r")) {
    char line[256];
    const size_t n = std::strlen(field);
    while (std::fgets(line, sizeof line, f))
      if (!std::strncmp(line, field, n) && line[n] == ':') kib = std::atof(line + n + 1);
    std::fclose(f);
  }
  return kib < 0 ? -1 : kib / 1024;
}

// Every readable page of the program's and its libraries' files made
// resident: a forked child faults in the code it runs as it runs it (about
// 1.5 MiB for a refusal here), which is not the reader's memory. Not
// instrumented: under ASan the pages hold globals' redzones, which a plain
// read would report.
__attribute__((no_sanitize("address"))) void prefault_files() {
  FILE *f = std::fopen("/proc/self/maps", "r");
  if (!f) return;
  char line[512];
  while (std::fgets(line, sizeof line, f)) {
    unsigned long lo, hi;
    char perms[8] = "", path[400] = "";
    if (std::sscanf(line, "%lx-%lx %7s %*s %*s %*s %399s", &lo, &hi, perms, path) < 3) continue;
    if (perms[0] != 'r' || path[0] != '/') continue;
    for (unsigned long a = lo; a < hi; a += 4096) (void)*reinterpret_cast<volatile const char *>(a);
  }
  std::fclose(f);
}

// The peak resident size restarts from the current one ("5" to clear_refs,
// Linux 4.0+): a forked child inherits its parent's peak, which would hide
// the child's own growth. False when the kernel refuses.
bool reset_peak() {
  const int fd = open("/proc/self/clear_refs", O_WRONLY);
  const bool ok = fd >= 0 && write(fd, "5", 1) == 1;
  if (fd >= 0) close(fd);
  return ok;
}

struct Outcome {
  int rc = -1;
  double ms = 0, grew_mib = 0;
  char message[512] = "";
};

// Runs `action` in a child; what it returned, how long it took and how much
// its peak memory grew, or the signal that ended it.
bool in_child(const std::function<int(std::string *)> &action, Outcome *o, std::string *died) {
  int fds[2];
  if (pipe(fds) != 0) return *died = "pipe failed", false;
  std::fflush(stdout);
  const pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    alarm(10);  // a FIFO waited on would hang: SIGALRM ends it, reported below
    Outcome r;
    r.grew_mib = -1;  // unmeasured
    malloc_trim(0);  // the parent's freed heap, still resident, would be reused unseen
    prefault_files();
    const bool peak = reset_peak();
    const double base = status_mib("VmRSS");
    std::string err;
    const auto t0 = std::chrono::steady_clock::now();
    r.rc = action(&err);
    r.ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (peak && base >= 0) r.grew_mib = status_mib("VmHWM") - base;
    std::snprintf(r.message, sizeof r.message, "%s", err.c_str());
    if (write(fds[1], &r, sizeof r) != (ssize_t)sizeof r) _exit(3);
    _exit(0);
  }
  close(fds[1]);
  const ssize_t got = read(fds[0], o, sizeof *o);
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  if (WIFSIGNALED(status)) {
    *died = std::string("killed by ") + strsignal(WTERMSIG(status)) + (WTERMSIG(status) == SIGALRM ? " (hung)" : "");
    return false;
  }
  if (got != (ssize_t)sizeof *o) return *died = "the child reported nothing", false;
  return true;
}

// One hostile input: refused with `want` in the message, in bounded time and memory.
void check(const std::string &what, const std::string &dir, const std::vector<std::string> &files,
           const std::function<int(std::string *)> &action, const std::string &want) {
  Outcome o;
  std::string died;
  const double file_mib = (double)files_bytes(dir, files) / (1 << 20);
  if (!in_child(action, &o, &died)) {
    std::printf("FAIL %s: %s\n", what.c_str(), died.c_str());
    g_fail++;
    return;
  }
  std::string msg = o.message;
  for (size_t at; (at = msg.find(g_root)) != std::string::npos;) msg.replace(at, g_root.size(), "$TMP");
  const bool refused = o.rc != 0 && msg.find(want) != std::string::npos;
  const bool fast = o.ms < kTimeLimitMs;
  const bool small = !kMeasureMemory || (o.grew_mib >= 0 && o.grew_mib < 2 * file_mib + kAllowanceMiB);
  const bool ok = refused && fast && small;
  std::printf("%s %s: %s in %.1f ms, memory +%.1f MiB (files %.2f MiB): %s%s\n", ok ? "PASS" : "FAIL", what.c_str(),
              o.rc ? "refused" : "ACCEPTED", o.ms, o.grew_mib, file_mib, msg.c_str(),
              refused ? "" : (" (wanted '" + want + "')").c_str());
  (ok ? g_pass : g_fail)++;
}

int open_model(const std::string &dir, std::string *err) {
  HfModel m;
  Config c;
  return m.open(dir, 1, 256, &c, err);
}

// A model directory with config.json (llama_spec's, or `config`) and
// model.safetensors = `st`.
std::string model_dir(const std::string &name, const std::string &st, const Spec &s = llama_spec()) {
  const std::string dir = write_model(fresh_dir(g_root, name), s);
  if (!st.empty()) write_file(dir + "/model.safetensors", st);
  return dir;
}

// {"<prefix>0": <value>, "<prefix>1": <value>, ...} of n members.
std::string many_keys(size_t n, const std::string &prefix, const std::string &value) {
  std::string s = "{";
  for (size_t i = 0; i < n; i++) s += (i ? "," : "") + std::string("\"") + prefix + std::to_string(i) + "\":" + value;
  return s + "}";
}

void test_headers() {
  Spec huge = llama_spec();
  huge.cfg["num_hidden_layers"] = "2147483647";
  std::string dir = model_dir("layers", with_header("{}", 0), huge);
  check("config.json num_hidden_layers 2^31 - 1, a {} header", dir, {"config.json", "model.safetensors"},
        [&](std::string *e) { return open_model(dir, e); }, "num_hidden_layers 2147483647: expected 1..1024");

  dir = model_dir("keys", with_header(many_keys(160000, "k", "0"), 0));
  check("header {\"k0\":0, ...}, 160k keys", dir, {"model.safetensors"}, [&](std::string *e) { return open_model(dir, e); },
        "tensor k0: expected {\"dtype\"");

  const std::string empty = "{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[0,0]}";
  dir = model_dir("tensors", with_header(many_keys(160000, "k", empty), 0));
  check("header of 160k well-formed empty tensors (9 MiB)", dir, {"model.safetensors"},
        [&](std::string *e) { return open_model(dir, e); },
        "more than " + std::to_string(kMaxTensors) + " tensors: more than this engine runs");

  std::string dup = many_keys(16000, "k", empty);
  dup.back() = ',';
  dir = model_dir("dup", with_header(dup + "\"k15999\":" + empty + "}", 0));
  check("header of 16k tensors, the last name repeated", dir, {"model.safetensors"},
        [&](std::string *e) { return open_model(dir, e); }, "duplicate key \"k15999\"");

  const std::string meta = "{\"__metadata__\": {\"s\": \"" + std::string((16u << 20) - 64, 'x') + "\"}}";
  dir = model_dir("cap", with_header(meta, 0));
  check("header at its 16 MiB cap (one metadata string)", dir, {"model.safetensors"},
        [&](std::string *e) { return open_model(dir, e); }, "missing tensor model.layers.0.input_layernorm.weight");

  std::string len(8, '\0');
  len[4] = 1;  // 2^32 bytes claimed
  dir = model_dir("length", len + "{}");
  check("header length 2^32 in a 10-byte file", dir, {"model.safetensors"},
        [&](std::string *e) { return open_model(dir, e); }, "header length 4294967296 exceeds the file (10 bytes)");
}

void test_json_files() {
  std::string dir = fresh_dir(g_root, "config_keys");
  write_file(dir + "/config.json", many_keys(90000, "k", "0"));
  check("config.json {\"k0\":0, ...}, 90k keys (1 MiB)", dir, {"config.json"},
        [&](std::string *e) { return open_model(dir, e); }, "more than 8192 values");

  dir = fresh_dir(g_root, "config_dup");
  std::string cfg = many_keys(4000, "k", "0");
  cfg.back() = ',';
  write_file(dir + "/config.json", cfg + "\"k0\":1}");
  check("config.json of 4000 keys, the last a repeat of the first", dir, {"config.json"},
        [&](std::string *e) { return open_model(dir, e); }, "duplicate key \"k0\"");

  dir = fresh_dir(g_root, "config_cap");
  write_file(dir + "/config.json", "{\"x\": \"" + std::string(1u << 20, 'x') + "\"}");
  check("config.json over its 1 MiB cap", dir, {"config.json"}, [&](std::string *e) { return open_model(dir, e); },
        "config.json: 1048585 bytes, more than the 1 MiB this engine reads for it");

  dir = model_dir("index_keys", "");
  unlink((dir + "/model.safetensors").c_str());
  write_file(dir + "/model.safetensors.index.json",
             "{\"weight_map\": " + many_keys(160000, "t", "\"model.safetensors-00001\"") + "}");
  check("index of 160k tensors (5 MiB)", dir, {"model.safetensors.index.json"},
        [&](std::string *e) { return open_model(dir, e); }, "weight_map: more than " + std::to_string(kMaxTensors));

  write_file(dir + "/model.safetensors.index.json",
             "{\"metadata\": {\"s\": \"" + std::string((16u << 20) - 64, 'x') + "\"}}");
  check("index at its 16 MiB cap (one metadata string)", dir, {"model.safetensors.index.json"},
        [&](std::string *e) { return open_model(dir, e); }, "no \"weight_map\" object");
}

void test_not_regular() {
  const std::string dir = model_dir("fifo", "");
  const std::string st = dir + "/model.safetensors";
  unlink(st.c_str());
  mkfifo(st.c_str(), 0600);
  check("model.safetensors a FIFO", dir, {}, [&](std::string *e) { return open_model(dir, e); },
        "model.safetensors: a FIFO, not a regular file");
  unlink(st.c_str());
  if (symlink("/dev/zero", st.c_str()) != 0) std::perror("symlink");
  check("model.safetensors linked to /dev/zero", dir, {}, [&](std::string *e) { return open_model(dir, e); },
        "model.safetensors: a character device, not a regular file");
  unlink(st.c_str());
  write_file(dir + "/model.safetensors.index.json", "{\"weight_map\": {\"x\": \"shard.safetensors\"}}");
  mkfifo((dir + "/shard.safetensors").c_str(), 0600);
  check("a shard a FIFO", dir, {}, [&](std::string *e) { return open_model(dir, e); },
        "shard.safetensors: a FIFO, not a regular file");
  unlink((dir + "/model.safetensors.index.json").c_str());
  if (symlink("/dev/zero", (dir + "/model.safetensors.index.json").c_str()) != 0) std::perror("symlink");
  check("the index linked to /dev/zero", dir, {}, [&](std::string *e) { return open_model(dir, e); },
        "model.safetensors.index.json: a character device, not a regular file");
  const std::string cfg = dir + "/config.json";
  unlink(cfg.c_str());
  mkfifo(cfg.c_str(), 0600);
  check("config.json a FIFO", dir, {}, [&](std::string *e) { return open_model(dir, e); },
        "config.json: a FIFO, not a regular file");
  unlink(cfg.c_str());
  if (symlink("/dev/zero", cfg.c_str()) != 0) std::perror("symlink");
  check("config.json linked to /dev/zero", dir, {}, [&](std::string *e) { return open_model(dir, e); },
        "config.json: a character device, not a regular file");
}

// Opened, then truncated under the reader, then every shard piece read as
// load_weights reads them.
int open_truncate_read(const std::string &dir, const std::string &file, std::string *err) {
  HfModel m;
  Config c;
  if (m.open(dir, 1, 256, &c, err)) return 1;
  if (truncate(file.c_str(), 4096) != 0) return *err = "truncate failed", 1;
  Rank one;
  for (const ShardPiece &p : shard_pieces(c, one)) {
    std::vector<uint16_t> buf(p.rows * p.cols);
    if (m.read(p.name, p.whole_rows, p.whole_cols, p.row0, p.rows, p.col0, p.cols, buf.data(), p.cols, err)) return 1;
  }
  return 0;
}

void test_truncated_and_config_txt() {
  Spec s = llama_spec();
  s.files = 2;
  const std::string dir = write_model(fresh_dir(g_root, "truncated"), s);
  const std::string shard = dir + "/model-00002-of-00002.safetensors";
  check("a shard truncated after it was opened", dir, {"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"},
        [&](std::string *e) { return open_truncate_read(dir, shard, e); },
        "model-00002-of-00002.safetensors: 2888 of 16384 bytes at offset 1208 could be read: the file is shorter");

  const std::string w = fresh_dir(g_root, "config_txt");
  write_file(w + "/config.txt", "hidden 4096\nheads 32\nkv_heads 0\n");
  check("config.txt kv_heads 0", w, {"config.txt"}, [&](std::string *e) { Config c; return read_config(w, &c, e); },
        "line 3: kv_heads 0: expected an integer in 1..1024");
  write_file(w + "/config.txt", std::string(64u << 10, '\n') + "\n");
  check("config.txt over its 64 KiB cap", w, {"config.txt"}, [&](std::string *e) { Config c; return read_config(w, &c, e); },
        "65537 bytes, more than the 64 KiB");
  unlink((w + "/config.txt").c_str());
  mkfifo((w + "/config.txt").c_str(), 0600);
  check("config.txt a FIFO", w, {}, [&](std::string *e) { Config c; return read_config(w, &c, e); },
        "config.txt: a FIFO, not a regular file");
}

}  // namespace

int main() {
  g_root = temp_root("inputs_test");
  std::printf("bounds: %.0f ms, memory growth < 2 x the files + %.0f MiB%s\n", kTimeLimitMs, kAllowanceMiB,
              kMeasureMemory ? "" : " (not measured under ASan)");
  test_headers();
  test_json_files();
  test_not_regular();
  test_truncated_and_config_txt();
  remove_tree(g_root);
  std::printf("inputs_test: %d passed, %d failed\n", g_pass, g_fail);
  return g_fail ? 1 : 0;
}
