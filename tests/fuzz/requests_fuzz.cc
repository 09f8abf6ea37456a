// requests_fuzz.cc - libFuzzer on the requests file of `llama --requests`
// (examples/llama/run/requests.h; docs/serving.md has its format and limits).
//
// The input: one byte choosing the limits (below), then the file's bytes.
// The file is read three ways, which must agree exactly: whole
// (parse_requests), in pieces cut where the input says (RequestReader), and,
// for one input in eight (by its size; the write and read of a file would
// halve the rate, for the very reader checked the other two ways), from a
// file in the harness's directory (read_requests, as llama reads it).
//
// Promises checked (abort() if broken, so libFuzzer keeps the input):
//   - the file is refused whole (1, "more than N requests" or "... lines")
//     exactly when it holds more than max_requests non-blank lines or more
//     than max_lines lines, at the first line past either, else 0;
//   - every line that is not blank (spaces, tabs, CRs; at most max_line
//     bytes) is served or refused, once, in line order, and no other line:
//     never more requests than lines;
//   - a refusal starts "requests line L: " with its own line, and is one
//     printable line (stderr and ids.jsonl carry it); a line over max_line
//     is refused as "longer than";
//   - a served request is within the limits: 1..max_ctx - 1 prompt ids and
//     max_new_tokens 1..max_ctx - 1, together at most max_ctx; every id
//     below the vocabulary (at most 2^30 while it is not known); an end
//     token too, or -1; its "id" JSON text of a string or an integer;
//   - and it is what its line says: the line, parsed again as JSON, holds
//     those very values and no other key.
// Time and memory: libFuzzer's -timeout and -rss_limit_mb (tests/fuzz/run.sh).
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "examples/llama/model/hf/json.h"
#include "examples/llama/run/requests.h"
#include "tests/fuzz/llama_fuzz_util.h"

using llama_fuzz::must;

namespace {

// The options byte: two bits each, 0 the engine's own limits (vocabulary
// not yet known), the others small enough for a fuzz input to reach
// (max_lines goes with max_requests).
llama::RequestLimits limits(uint8_t o) {
  static const int vocab[4] = {0, 16, 1000, 128256}, ctx[4] = {8192, 2, 16, 300};
  static const size_t line[4] = {1u << 20, 16, 64, 1024};
  static const int reqs[4] = {100000, 1, 3, 16}, all[4] = {10000000, 4, 8, 24};
  llama::RequestLimits l;
  l.vocab = vocab[o & 3];
  l.max_ctx = ctx[(o >> 2) & 3];
  l.max_line = line[(o >> 4) & 3];
  l.max_requests = reqs[(o >> 6) & 3];
  l.max_lines = all[(o >> 6) & 3];
  return l;
}

struct Result {
  int rc = 0;
  std::string err;
  std::vector<llama::Request> ok;
  std::vector<llama::Refusal> bad;
};

// The pieces: lengths 1..64 from a byte-driven generator, so the same input
// is cut the same way (a replay reproduces a finding).
Result pieces(const std::string &text, const llama::RequestLimits &lim, uint32_t seed) {
  Result r;
  llama::RequestReader rd(lim, &r.ok, &r.bad);
  for (size_t at = 0; at < text.size() && !r.rc;) {
    seed = seed * 1103515245u + 12345u;
    const size_t n = std::min(text.size() - at, (size_t)1 + (seed >> 16) % 64);
    r.rc = rd.feed(text.data() + at, n, &r.err);
    at += n;
  }
  if (!r.rc) r.rc = rd.finish(&r.err);
  return r;
}

void same(const Result &a, const Result &b, const char *how) {
  bool eq = a.rc == b.rc && a.ok.size() == b.ok.size() && a.bad.size() == b.bad.size();
  for (size_t i = 0; eq && i < a.ok.size(); i++)
    eq = a.ok[i].line == b.ok[i].line && a.ok[i].prompt == b.ok[i].prompt && a.ok[i].max_new == b.ok[i].max_new &&
         a.ok[i].end_token == b.ok[i].end_token && a.ok[i].id == b.ok[i].id;
  for (size_t i = 0; eq && i < a.bad.size(); i++) eq = a.bad[i].line == b.bad[i].line && a.bad[i].why == b.bad[i].why;
  must(eq, how);
}

bool printable_line(const std::string &s) {
  for (unsigned char ch : s)
    if (ch < 0x20 || ch == 0x7f) return false;
  return true;
}

// An integer of the tree equal to v.
bool is_int(const llama::Json *j, long v) {
  return j && j->kind == llama::Json::NUMBER && j->integer && j->number == (double)v;
}

// A served request against its line, parsed again, and the limits.
void check_served(const llama::Request &r, const std::string &text, const llama::RequestLimits &lim) {
  const long vmax = lim.vocab > 0 ? lim.vocab - 1 : (1L << 30);
  const long P = (long)r.prompt.size();
  must(P >= 1 && P <= lim.max_ctx - 1 && r.max_new >= 1 && r.max_new <= lim.max_ctx - 1 && P + r.max_new <= lim.max_ctx,
       "a served request fits a sequence", std::to_string(P) + " + " + std::to_string(r.max_new));
  for (int id : r.prompt) must(id >= 0 && id <= vmax, "prompt ids below the vocabulary", std::to_string(id));
  must(r.end_token == -1 || (r.end_token >= 0 && r.end_token <= vmax), "an end token below the vocabulary or -1");
  llama::Json j;
  std::string e;
  must(llama::json_parse(text, &j, &e) == 0 && j.kind == llama::Json::OBJECT, "a served line is a JSON object", e);
  for (const auto &m : j.members)
    must(m.first == "prompt_ids" || m.first == "max_new_tokens" || m.first == "end_token" || m.first == "id",
         "a served line has only the four keys", m.first);
  const llama::Json *p = j.get("prompt_ids"), *n = j.get("max_new_tokens"), *t = j.get("end_token"), *id = j.get("id");
  must(p && p->kind == llama::Json::ARRAY && p->items.size() == r.prompt.size(), "prompt_ids as the line says");
  for (size_t i = 0; i < r.prompt.size(); i++) must(is_int(&p->items[i], r.prompt[i]), "each prompt id as the line says");
  must(is_int(n, r.max_new), "max_new_tokens as the line says");
  must(r.end_token == -1 ? (!t || t->kind == llama::Json::NUL) : is_int(t, r.end_token), "end_token as the line says");
  if (!id) return must(r.id.empty(), "no id: none echoed");
  llama::Json echo;
  must(llama::json_parse(r.id, &echo, &e) == 0, "the echoed id is JSON", r.id);
  must(id->kind == llama::Json::STRING ? echo.kind == llama::Json::STRING && echo.string == id->string
                                       : echo.kind == llama::Json::NUMBER && echo.integer && echo.number == id->number,
       "the echoed id is the line's", r.id);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  const llama::RequestLimits lim = limits(data[0]);
  const std::string text(reinterpret_cast<const char *>(data + 1), size - 1);
  Result whole;
  whole.rc = llama::parse_requests(text, lim, &whole.ok, &whole.bad, &whole.err);
  must(whole.rc == 0 || whole.rc == 1, "parse_requests returns 0 or 1");
  same(whole, pieces(text, lim, (uint32_t)size * 2654435761u + data[0]), "pieces read as the whole text");
  if (size % 8 == 0) {
    const std::string path = llama_fuzz::fuzz_dir("requests_fuzz") + "/requests.jsonl";
    llama_fuzz::write_file(path, text.data(), text.size());
    Result file;
    file.rc = llama::read_requests(path, lim, &file.ok, &file.bad, &file.err);
    same(whole, file, "the file read as the whole text");
    must(!file.rc || file.err == "--requests " + path + ": " + whole.err, "the file's refusal names it", file.err);
  }

  // The lines as the format defines them, one by one.
  std::vector<std::string> lines;
  for (size_t at = 0; at < text.size();) {
    size_t nl = text.find('\n', at);
    if (nl == std::string::npos) nl = text.size();
    lines.push_back(text.substr(at, nl - at));
    at = nl + 1;
  }
  std::vector<int> want;  // the non-blank lines, up to the first line past a limit
  std::string over;       // which limit, as the refusal says it
  for (size_t i = 0; i < lines.size() && over.empty(); i++) {
    if ((long)i >= lim.max_lines) {
      over = "more than " + std::to_string(lim.max_lines) + " lines";
    } else if (lines[i].size() > lim.max_line || lines[i].find_first_not_of(" \t\r") != std::string::npos) {
      if ((long)want.size() < lim.max_requests) want.push_back((int)i + 1);
      else over = "more than " + std::to_string(lim.max_requests) + " requests";
    }
  }
  must(whole.rc == !over.empty(), "the file is refused whole exactly past a limit", whole.err);
  must(over.empty() || whole.err == over, "the refusal says the limit", whole.err + " (" + over + ")");
  llama_fuzz::say(whole.rc ? whole.err : std::to_string(whole.ok.size()) + " served");

  must(whole.ok.size() + whole.bad.size() == want.size() && want.size() <= lines.size(),
       "every non-blank line once, and no other");
  size_t o = 0, b = 0;
  for (int L : want) {  // both lists in line order, together every wanted line
    const std::string &t = lines[L - 1];
    if (o < whole.ok.size() && whole.ok[o].line == L) {
      must(t.size() <= lim.max_line, "a line over max_line is not served");
      check_served(whole.ok[o++], t, lim);
    } else {
      must(b < whole.bad.size() && whole.bad[b].line == L, "a non-blank line is served or refused", std::to_string(L));
      const std::string &why = whole.bad[b++].why;
      llama_fuzz::say(why);
      const std::string at = "requests line " + std::to_string(L) + ": ";
      must(why.compare(0, at.size(), at) == 0, "a refusal starts with its line", why);
      must(printable_line(why), "a refusal is one printable line", why);
      if (t.size() > lim.max_line) must(why.find(": longer than ") != std::string::npos, "says too long", why);
    }
  }
  return 0;
}
