// requests.cc - requests.h: a bounded line reader, one strict JSON object a
// line (model/hf/json.h), and the synthetic generator.
#include "examples/llama/run/requests.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "examples/llama/model/hf/json.h"
#include "examples/llama/model/input_file.h"

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
      *why = "unknown key \"" + printable(m.first) + "\" (expected prompt_ids, max_new_tokens, end_token, id)";
      return false;
    }
  }
  if (!have_prompt || !have_new) {
    *why = std::string("missing \"") + (have_prompt ? "max_new_tokens" : "prompt_ids") + "\"";
    return false;
  }
  return true;
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

int RequestReader::end_line(std::string *err) {
  if (line_ >= lim_.max_lines) {  // before the count could pass INT_MAX
    failed_ = "more than " + std::to_string(lim_.max_lines) + " lines";
    *err = failed_;
    return 1;
  }
  line_++;
  const bool too_long = too_long_;
  open_ = too_long_ = false;
  if (!too_long && text_.find_first_not_of(" \t\r") == std::string::npos) {  // blank
    text_.clear();
    return 0;
  }
  if (++count_ > lim_.max_requests) {
    failed_ = "more than " + std::to_string(lim_.max_requests) + " requests";
    *err = failed_;
    return 1;
  }
  Request r;
  std::string why;
  if (too_long)
    bad_->push_back({line_, "requests line " + std::to_string(line_) + ": longer than " +
                                std::to_string(lim_.max_line) + " bytes"});
  else if (parse_request(text_, line_, lim_, &r, &why))
    bad_->push_back({line_, why});
  else
    ok_->push_back(std::move(r));
  text_.clear();
  return 0;
}

int RequestReader::feed(const char *p, size_t n, std::string *err) {
  if (!failed_.empty()) return *err = failed_, 1;
  const char *const end = p + n;
  while (p < end) {
    const char *nl = static_cast<const char *>(std::memchr(p, '\n', (size_t)(end - p)));
    const size_t len = (size_t)((nl ? nl : end) - p);
    const size_t room = lim_.max_line - std::min(text_.size(), lim_.max_line);
    text_.append(p, std::min(len, room));
    too_long_ |= len > room;
    open_ |= len > 0;
    if (!nl) break;
    if (end_line(err)) return 1;
    p = nl + 1;
  }
  return 0;
}

int RequestReader::finish(std::string *err) {
  if (!failed_.empty()) return *err = failed_, 1;
  return open_ ? end_line(err) : 0;
}

int parse_requests(const std::string &text, const RequestLimits &lim, std::vector<Request> *ok,
                   std::vector<Refusal> *bad, std::string *err) {
  RequestReader rd(lim, ok, bad);
  return rd.feed(text.data(), text.size(), err) || rd.finish(err);
}

int read_requests(const std::string &path, const RequestLimits &lim, std::vector<Request> *ok,
                  std::vector<Refusal> *bad, std::string *err) {
  // The model files' rule (model/input_file.h): a regular file, never a FIFO
  // or a device (/dev/zero is one endless line), read to its size at open.
  InputFile f;
  std::string why;
  if (f.open(path, &why)) return *err = "--requests " + why, 1;
  RequestReader rd(lim, ok, bad);
  std::vector<char> buf(1 << 16);
  for (uint64_t at = 0; at < f.size();) {
    const size_t n = (size_t)std::min<uint64_t>(buf.size(), f.size() - at);
    if (f.read_at(at, buf.data(), n, &why)) return *err = "--requests " + why, 1;
    if (rd.feed(buf.data(), n, &why)) return *err = "--requests " + path + ": " + why, 1;
    at += n;
  }
  if (rd.finish(&why)) return *err = "--requests " + path + ": " + why, 1;
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
