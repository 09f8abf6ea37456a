// json_fuzz.cc - libFuzzer on the model files' JSON reader
// (examples/llama/model/hf/json.h): the input is one document.
//
// Promises checked (abort() if broken, so libFuzzer keeps the input):
//   - json_parse returns 0 or 1; a refusal says where ("line L, column C: ...")
//     in one printable line (a key is shown escaped);
//   - the tree and the cursor agree: a document the tree accepts, the cursor
//     walks (skip + finish) too; the cursor may refuse only a string past its
//     max_string;
//   - the value limit holds: a document of more values is refused;
//   - an accepted tree's every integer literal that json_uint64 takes reads
//     back as its own text.
// Time and memory: libFuzzer's -timeout and -rss_limit_mb (tests/fuzz/run.sh).
#include <cstdint>
#include <string>

#include "examples/llama/model/hf/json.h"
#include "tests/fuzz/llama_fuzz_util.h"

using llama_fuzz::must;

namespace {

size_t count_values(const llama::Json &j) {
  size_t n = 1;
  for (const llama::Json &i : j.items) n += count_values(i);
  for (const auto &m : j.members) n += 1 + count_values(m.second);
  return n;
}

// Every number of the document through the cursor: exact integers read back.
void numbers(llama::JsonCursor &c) {
  llama::Json::Kind k;
  if (!c.peek(&k)) return;
  bool end = false;
  if (k == llama::Json::OBJECT) {
    if (!c.enter_object()) return;
    while (c.next_key(nullptr, &end) && !end) numbers(c);
  } else if (k == llama::Json::ARRAY) {
    if (!c.enter_array()) return;
    while (c.next_item(&end) && !end) numbers(c);
  } else if (k == llama::Json::NUMBER) {
    llama::JsonNumber n;
    uint64_t v;
    if (c.number(&n) && llama::json_uint64(n, &v)) {
      std::string t = n.text;
      must(std::to_string(v) == t, "json_uint64 reads its literal back", t);
    }
  } else {
    c.skip();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const std::string text(reinterpret_cast<const char *>(data), size);
  const size_t limit = 1 + (size > 0 ? data[0] % 64 : 0);  // small limits are reached too
  llama::Json j;
  std::string err;
  const int rc = llama::json_parse(text, &j, &err, limit);
  must(rc == 0 || rc == 1, "json_parse returns 0 or 1");
  llama_fuzz::say(rc ? "refused: " + err : "accepted");
  if (rc) must(err.compare(0, 5, "line ") == 0, "a refusal says where", err);
  for (unsigned char ch : err) must(ch >= 0x20 && ch != 0x7f, "a refusal is one printable line", err);
  if (rc == 0) must(count_values(j) <= limit, "the value limit holds");
  llama::Json big;
  const int rc_big = llama::json_parse(text, &big, &err, SIZE_MAX);
  llama::JsonCursor c(text, 128, 64);
  const bool walked = c.skip() && c.finish();
  if (rc_big == 0)
    must(walked || c.error().find("a string longer than 64 bytes") != std::string::npos,
         "a document the tree accepts, the cursor walks", c.error());
  if (rc_big == 0) {
    llama::JsonCursor n(text);
    numbers(n);
  }
  return 0;
}
