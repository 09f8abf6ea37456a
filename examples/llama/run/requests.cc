// requests.cc - requests.h: a bounded line reader, one strict JSON object a
// line (model/hf/json.h), and the synthetic generator.
#include "examples/llama/run/requests.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "examples/llama/model/hf/json.h"

namespace llama {
namespace {

// s as a JSON string literal.
std::string quoted(const std::string &s) {
  std::string o = "\"";
  for (unsigned char ch : s) {
    if (ch == '"' || ch == '\\') {
      o += '\\';
      o += (char)ch;
    } else if (ch < 0x20) {
      char b[8];
      std::snprintf(b, sizeof b, "\\u%04x", ch);
      o += b;
    } else {
      o += (char)ch;
    }
  }
  return o + "\"";
}

// An integer JSON value in [lo, hi] into *out, or false.
bool int_in(const Json &v, long lo, long hi, long *out) {
  if (v.kind != Json::NUMBER || !v.integer || !(v.number >= (double)lo && v.number <= (double)hi)) return false;
  *out = (long)v.number;
  return true;
}

// The members of a request object, each checked; *why names the first wrong one.
bool fields(const Json &j, const RequestLimits &lim, Request *r, std::string *why) {
  const long vmax = lim.vocab > 0 ? lim.vocab - 1 : (1L << 30);
  bool have_prompt = false, have_new = false;
  for (const auto &m : j.members) {
    const Json &v = m.second;
    long x = 0;
    if (m.first == "prompt_ids") {
      if (v.kind != Json::ARRAY || v.items.empty() || (long)v.items.size() >= lim.max_ctx) {
        *why = "\"prompt_ids\" must be an array of 1.." + std::to_string(lim.max_ctx - 1) + " token ids";
        return false;
      }
      for (size_t i = 0; i < v.items.size(); i++) {
        if (!int_in(v.items[i], 0, vmax, &x)) {
          *why = "\"prompt_ids\"[" + std::to_string(i) + "] is not a token id (" +
                 (lim.vocab > 0 ? "0.." + std::to_string(vmax) : std::string("an integer >= 0")) + ")";
          return false;
        }
        r->prompt.push_back((int)x);
      }
      have_prompt = true;
    } else if (m.first == "max_new_tokens") {
      if (!int_in(v, 1, lim.max_ctx - 1, &x)) {
        *why = "\"max_new_tokens\" must be an integer in 1.." + std::to_string(lim.max_ctx - 1);
        return false;
      }
      r->max_new = (int)x;
      have_new = true;
    } else if (m.first == "end_token") {
      if (v.kind != Json::NUL && !int_in(v, 0, vmax, &x)) {
        *why = "\"end_token\" must be a token id (an integer >= 0" +
               (lim.vocab > 0 ? " below " + std::to_string(lim.vocab) : std::string()) + ") or null";
        return false;
      }
      r->end_token = v.kind == Json::NUL ? -1 : (int)x;
    } else if (m.first == "id") {
      if (v.kind == Json::STRING) r->id = quoted(v.string);
      else if (v.kind == Json::NUMBER && v.integer && std::fabs(v.number) < 9e15)
        r->id = std::to_string((long long)v.number);
      else {
        *why = "\"id\" must be a string or an integer";
        return false;
      }
    } else {
      *why = "unknown key " + quoted(m.first) + " (expected prompt_ids, max_new_tokens, end_token, id)";
      return false;
    }
  }
  if (!have_prompt || !have_new) {
    *why = std::string("missing \"") + (have_prompt ? "max_new_tokens" : "prompt_ids") + "\"";
    return false;
  }
  return true;
}

// Reads one line of at most `max` bytes into *s (without its newline);
// longer lines are read to their end and reported by *too_long. false at
// the end of the file.
bool read_line(FILE *f, size_t max, std::string *s, bool *too_long) {
  s->clear();
  *too_long = false;
  int ch;
  bool any = false;
  while ((ch = std::fgetc(f)) != EOF) {
    any = true;
    if (ch == '\n') return true;
    if (s->size() < max) s->push_back((char)ch);
    else *too_long = true;
  }
  return any;
}

}  // namespace

int parse_request(const std::string &text, int line, const RequestLimits &lim, Request *r, std::string *why) {
  *r = Request();
  r->line = line;
  const std::string at = "requests line " + std::to_string(line) + ": ";
  Json j;
  std::string perr;
  if (json_parse(text, &j, &perr)) {
    const size_t p = perr.find("column");
    *why = at + (p == std::string::npos ? perr : perr.substr(p));  // one line: its column is what helps
    return 1;
  }
  if (j.kind != Json::OBJECT) {
    *why = at + "expected a JSON object, got " + j.kind_name();
    return 1;
  }
  std::string f;
  if (!fields(j, lim, r, &f)) {
    *why = at + f;
    return 1;
  }
  const long need = (long)r->prompt.size() + r->max_new;
  if (need > lim.max_ctx) {
    *why = at + std::to_string(r->prompt.size()) + " prompt ids + max_new_tokens " + std::to_string(r->max_new) +
           " = " + std::to_string(need) + " positions: a sequence holds at most " + std::to_string(lim.max_ctx);
    return 1;
  }
  return 0;
}

int read_requests(const std::string &path, const RequestLimits &lim, std::vector<Request> *ok,
                  std::vector<Refusal> *bad, std::string *err) {
  FILE *f = std::fopen(path.c_str(), "rb");
  if (!f) {
    *err = "--requests " + path + ": " + std::strerror(errno);
    return 1;
  }
  std::string text;
  bool too_long = false;
  int line = 0, count = 0;
  while (read_line(f, lim.max_line, &text, &too_long)) {
    line++;
    if (!too_long && text.find_first_not_of(" \t\r") == std::string::npos) continue;  // blank
    if (++count > lim.max_requests) {
      std::fclose(f);
      *err = "--requests " + path + ": more than " + std::to_string(lim.max_requests) + " requests";
      return 1;
    }
    Request r;
    std::string why;
    if (too_long) bad->push_back({line, "requests line " + std::to_string(line) + ": longer than " +
                                            std::to_string(lim.max_line) + " bytes"});
    else if (parse_request(text, line, lim, &r, &why)) bad->push_back({line, why});
    else ok->push_back(r);
  }
  const bool failed = std::ferror(f) != 0;
  std::fclose(f);
  if (failed) {
    *err = "--requests " + path + ": read error";
    return 1;
  }
  return 0;
}

uint64_t splitmix64(uint64_t *state) {
  uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

bool is_synthetic(const std::string &spec) { return spec.compare(0, 10, "synthetic:") == 0; }

int synthetic_requests(const std::string &spec, int vocab, std::vector<Request> *out, std::string *err) {
  const char *p = spec.c_str() + 10;
  char *end = nullptr;
  errno = 0;
  const long n = std::strtol(p, &end, 10);
  unsigned long long seed = 1;
  bool good = end != p && errno == 0 && n >= 1 && n <= 100000 && *p != '+' && *p != '-' && *p != ' ';
  if (good && *end == ':') {
    const char *q = end + 1;
    errno = 0;
    seed = std::strtoull(q, &end, 10);
    good = end != q && errno == 0 && *q >= '0' && *q <= '9';
  }
  if (!good || *end || vocab < 1) {
    *err = "--requests '" + spec + "': expected synthetic:N or synthetic:N:SEED (N 1..100000, SEED >= 0)";
    return 1;
  }
  uint64_t st = seed;
  auto len = [&](uint64_t lo, uint64_t hi) {
    const uint64_t a = splitmix64(&st) % (hi - lo + 1), b = splitmix64(&st) % (hi - lo + 1);
    return (int)(lo + (a < b ? a : b));
  };
  for (long i = 0; i < n; i++) {
    Request r;
    r.line = (int)i + 1;
    const int P = len(50, 1000);
    r.max_new = len(50, 500);
    for (int k = 0; k < P; k++) r.prompt.push_back((int)(splitmix64(&st) % (uint64_t)vocab));
    out->push_back(r);
  }
  return 0;
}

}  // namespace llama
