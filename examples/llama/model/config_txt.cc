// config_txt.cc - config.txt of a --weights directory (docs/llama.md,
// "Files"): `key value` lines setting the model and the run.
//
// The file follows input_file.h's rule (a regular file, at most 64 KiB), and
// every value is parsed in the type it is used in and range-checked there:
// integers exactly (4.0, 1e3, 2^31 are refused, not truncated), counts
// within model/limits.h and the run's own bounds (those of the matching
// flags), eps and theta as fp32. A bad line names the file, the line, the
// key and the value; nothing reaches the engine (kv_heads 0 was a SIGFPE).
#include <cerrno>
#include <cfloat>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <sstream>

#include "examples/llama/llama.h"
#include "examples/llama/model/input_file.h"
#include "examples/llama/model/limits.h"

namespace llama {
namespace {

struct IntKey {
  const char *name;
  int Config::*field;
  int lo, hi;
};

// The run's bounds are the widest the flags allow (run/cli.cc: --batch up
// to 256 for the bench), --ctx, --steps; finish_args checks the rest.
const IntKey kIntKeys[] = {
    {"hidden", &Config::hidden, 8, kMaxHidden},   {"heads", &Config::heads, 1, kMaxHeads},
    {"kv_heads", &Config::kv_heads, 1, kMaxHeads}, {"head_dim", &Config::head_dim, 1, kMaxHidden},
    {"ffn", &Config::ffn, 8, kMaxFfn},             {"layers", &Config::layers, 1, kMaxLayers},
    {"vocab", &Config::vocab, 0, kMaxVocab},       {"batch", &Config::batch, 1, 256},
    {"ctx", &Config::ctx, 0, 8191},                {"steps", &Config::steps, 1, 8192},
    {"max_ctx", &Config::max_ctx, 0, 8192},
};

// An integer literal ([-]digits, nothing else) in [lo, hi].
bool int_value(const std::string &s, long long lo, long long hi, long long *v) {
  if (s.empty() || (s[0] != '-' && (s[0] < '0' || s[0] > '9'))) return false;
  char *end;
  errno = 0;
  *v = std::strtoll(s.c_str(), &end, 10);
  return !errno && *end == '\0' && end != s.c_str() && *v >= lo && *v <= hi;
}

// One `key value` line into *c; "" or what is wrong with it.
std::string apply(const std::string &key, const std::string &value, Config *c) {
  const std::string kv = key + " " + printable(value);
  for (const IntKey &k : kIntKeys)
    if (key == k.name) {
      long long v;
      if (!int_value(value, k.lo, k.hi, &v))
        return kv + ": expected an integer in " + std::to_string(k.lo) + ".." + std::to_string(k.hi);
      c->*k.field = (int)v;
      return "";
    }
  if (key == "seed") {
    char *end;
    errno = 0;
    const unsigned long long v = std::strtoull(value.c_str(), &end, 10);
    if (value.empty() || value[0] < '0' || value[0] > '9' || errno || *end)
      return kv + ": expected an integer in 0..2^64-1";
    c->seed = v;
    return "";
  }
  if (key == "eps" || key == "theta") {  // checked as fp32, the kernels' type
    char *end;
    const double d = std::strtod(value.c_str(), &end);
    const float f = (float)d;
    const bool ok = !value.empty() && *end == '\0' &&
                    (key == "eps" ? f >= FLT_MIN && f <= 1 : f > 1 && f <= FLT_MAX);
    if (!ok)
      return kv + (key == "eps" ? ": expected a normal fp32 in (0, 1]" : ": expected a finite fp32 above 1");
    (key == "eps" ? c->eps : c->theta) = f;
    return "";
  }
  return "?";  // not a key of config.txt
}

}  // namespace

int read_config(const std::string &dir, Config *c, std::string *err) {
  const std::string path = dir + "/config.txt";
  std::string text;
  if (read_input_file(path, kMaxConfigTxtBytes, &text, err)) return 1;
  std::istringstream lines(text);
  std::string line;
  std::map<std::string, int> seen;  // key -> its line
  for (int no = 1; std::getline(lines, line); no++) {
    std::istringstream in(line);
    std::string key, value, extra;
    if (!(in >> key) || key[0] == '#') continue;
    const std::string at = path + ": line " + std::to_string(no) + ": ";
    if (!(in >> value)) return *err = at + "key '" + printable(key) + "' has no value", 1;
    if (in >> extra) return *err = at + "'" + printable(line) + "': expected `key value`", 1;
    const std::string bad = apply(key, value, c);
    if (bad == "?") {
      std::fprintf(stderr, "llama: %sunknown key '%s' ignored\n", at.c_str(), printable(key).c_str());
      continue;
    }
    if (!bad.empty()) return *err = at + bad, 1;
    const auto first = seen.emplace(key, no);
    if (!first.second)
      return *err = at + "key '" + key + "' given again (first on line " + std::to_string(first.first->second) + ")", 1;
  }
  if (seen.empty()) {
    *err = path + ": no keys";
    return 1;
  }
  return 0;
}

}  // namespace llama
