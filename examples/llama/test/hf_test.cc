// hf_test.cc - the Hugging Face checkpoint reader on a CPU (no GPU).
//
// Writes its own tiny checkpoints (a few layers at head_dim 128 or 64, hidden 32)
// and checks:
//   - the JSON reader on good documents and on each kind of malformed one,
//     its cursor and its limits (values, string length);
//   - the rule for every file read (input_file.h): FIFOs, devices and
//     directories refused, caps, a file truncated after it was opened;
//   - bf16 conversion: every fp16 value and a million fp32 bit patterns
//     against an independent rounding (scaled nearbyint), NaN kept;
//   - safetensors reads: windows of rows and columns, unaligned data, each
//     dtype, a truncated file; broken headers refused by name, as strictly
//     as safetensors' own reader (gaps, overlaps, float shapes, unknown
//     dtypes, __metadata__, NUL, duplicates); index and shards agreeing;
//   - each rank's weight buffers at TP 1 and 2 (shard_pieces applied with
//     the reader, as load_weights does) against a layout computed here from
//     the whole tensors: single-file bf16, sharded with an index and mixed
//     bf16/fp16/fp32 tensors, tied embeddings, fp32;
//   - every refusal's message: field and value (counts bounded, numbers
//     checked in fp32), or tensor and shape (a tensor the engine does not
//     read included), and the tensors a family carries unused accepted.
// The checkpoints come from test/checkpoint_writer.h (values exact in
// every dtype, so every comparison is for equality).
//
//   bazel test //examples/llama:hf_test   (also under --config=asan)
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "examples/llama/llama.h"
#include "examples/llama/model/hf/config.h"
#include "examples/llama/model/hf/checkpoint.h"
#include "examples/llama/model/hf/json.h"
#include "examples/llama/model/hf/safetensors.h"
#include "examples/llama/model/input_file.h"
#include "examples/llama/test/checkpoint_writer.h"

using namespace llama;
using namespace llama_test;

namespace {

int g_pass = 0, g_fail = 0;
std::string g_root;  // this run's temporary directory, removed at the end

void expect(bool ok, const std::string &what, const std::string &detail_in = "") {
  std::string detail = detail_in;  // messages name files under g_root: print it as $TMP
  for (size_t at; !g_root.empty() && (at = detail.find(g_root)) != std::string::npos;) detail.replace(at, g_root.size(), "$TMP");
  std::printf("%s %s%s%s\n", ok ? "PASS" : "FAIL", what.c_str(), detail.empty() ? "" : ": ", detail.c_str());
  (ok ? g_pass : g_fail)++;
}

// rc must be non-zero and the message must hold `want`.
void expect_error(int rc, const std::string &err, const std::string &want, const std::string &what) {
  const bool ok = rc != 0 && err.find(want) != std::string::npos;
  if (ok) expect(true, what, err);
  else expect(false, what, "rc " + std::to_string(rc) + ", message '" + err + "', wanted '" + want + "'");
}

std::string fresh_dir(const std::string &name) { return llama_test::fresh_dir(g_root, name); }

std::string write_test_model(const std::string &name, const Spec &s) {
  return llama_test::write_model(fresh_dir(name), s);
}

// ------------------------------------------------------------ values

// The independent reference rounding: x to the nearest bf16 (ties to even),
// by scaling to 8 significant bits and nearbyint; beyond the range: inf.
uint16_t ref_bf16(double x) {
  const uint16_t sign = std::signbit(x) ? 0x8000 : 0;
  if (std::isinf(x)) return sign | 0x7f80;
  if (x == 0) return sign;
  const int e = std::max(std::ilogb(x), -126);  // bf16 has fp32's exponent range and subnormals
  const double ulp = std::ldexp(1.0, e - 7);
  const double q = std::nearbyint(x / ulp) * ulp;
  if (std::fabs(q) >= std::ldexp(1.0, 128)) return sign | 0x7f80;
  return bits_bf16((float)q);
}

// ------------------------------------------------------------ JSON

void test_json() {
  Json j;
  std::string err;
  const std::string doc =
      "{\"a\": [1, -0, 2.5e-3, 1E+2, true, false, null, \"x\\\"\\\\\\/\\b\\f\\n\\r\\t\"], "
      "\"u\": \"\\u00e9\\ud83d\\ude00\xc3\xa9\", \"o\": {\"n\": {}}, \"e\": []}";
  int rc = json_parse(doc, &j, &err);
  const Json *a = j.get("a");
  bool ok = rc == 0 && j.kind == Json::OBJECT && a && a->kind == Json::ARRAY && a->items.size() == 8 &&
            a->items[0].integer && a->items[0].number == 1 && a->items[1].number == 0 && !a->items[2].integer &&
            a->items[2].number == 2.5e-3 && a->items[3].number == 100 && a->items[4].boolean &&
            !a->items[5].boolean && a->items[5].kind == Json::BOOL && a->items[6].kind == Json::NUL &&
            a->items[7].string == "x\"\\/\b\f\n\r\t" && j.get("u") &&
            j.get("u")->string == "\xc3\xa9\xf0\x9f\x98\x80\xc3\xa9" && j.get("o")->get("n")->kind == Json::OBJECT &&
            j.get("e")->items.empty() && !j.get("missing") && j.members[0].first == "a";
  expect(ok, "json: a document with every kind of value, escapes and a surrogate pair", err);
  rc = json_parse(" \n\t 42 \r\n", &j, &err);
  expect(rc == 0 && j.kind == Json::NUMBER && j.number == 42, "json: a bare number in whitespace");
  rc = json_parse("9007199254740993", &j, &err);
  expect(rc == 0 && j.integer, "json: an integer beyond 2^53 still parses (as the nearest double)");

  const struct {
    const char *text, *want;
  } bad[] = {
      {"", "line 1, column 1: expected a value, found the end of the text"},
      {"{\"a\": 1,}", "line 1, column 9: expected a key"},
      {"[1, 2,]", "line 1, column 7: expected a value, found ']'"},
      {"{'a': 1}", "expected a key (a string), found '''"},
      {"{\"a\" 1}", "expected ':' after the key \"a\""},
      {"{\"a\": 1 \"b\": 2}", "expected ',' or '}' in an object"},
      {"[1 2]", "expected ',' or ']' in an array"},
      {"{\"a\": 1, \"a\": 2}", "line 1, column 10: duplicate key \"a\""},
      {"01", "a number may not start with 0"},
      {"1.", "expected a digit after '.'"},
      {"1e", "expected a digit in the exponent"},
      {"-", "expected a digit"},
      {"+1", "expected a value, found '+'"},
      {"1e999", "number 1e999 is out of range"},
      {"{\"x\": NaN}", "'NaN' is not JSON"},
      {"[Infinity]", "'Infinity' is not JSON"},
      {"tru", "expected a value, found 't'"},
      {"\"abc", "a string that never ends"},
      {"\"a\tb\"", "a control character (byte 0x09) in a string"},
      {"\"\\x\"", "unknown escape: 'x'"},
      {"\"\\u12\"", "expected a hex digit in \\u"},
      {"\"\\ud800\"", "a high surrogate \\u escape without its low half"},
      {"\"\\udc00\"", "a lone low surrogate"},
      {"\"\xff\"", "invalid UTF-8 (byte 0xff)"},
      {"\"\xc0\xaf\"", "invalid UTF-8 (byte 0xc0)"},
      {"\"\xe0\x80\xaf\"", "invalid UTF-8 (an overlong form"},
      {"\"\xed\xa0\x80\"", "a surrogate"},
      {"\"\xe2\x82\"", "invalid UTF-8"},
      {"\xef\xbb\xbf{}", "byte-order mark"},
      {"{} {}", "line 1, column 4: unexpected '{' after the value"},
      {"{\n  \"a\": [1,\n   2,,]\n}", "line 3, column 6: expected a value, found ','"},
  };
  for (const auto &b : bad) {
    rc = json_parse(b.text, &j, &err);
    expect_error(rc, err, b.want, "json refuses a malformed document");
  }
  std::string deep(200, '[');
  deep += std::string(200, ']');
  rc = json_parse(deep, &j, &err);
  expect_error(rc, err, "nested deeper than 128", "json refuses nesting of 200 (bounded recursion)");
  std::string ok127(127, '[');
  ok127 += std::string(127, ']');
  expect(json_parse(ok127, &j, &err) == 0, "json: nesting of 127 is fine");
  rc = json_read_file(g_root + "/no_such.json", 1 << 20, 1000, &j, &err);
  expect_error(rc, err, "no_such.json: cannot open", "json_read_file names the missing file");
  rc = json_parse("{\"a\": 1, \"b\": 2, \"a\": 3, \"b\": 4, \"a\": 5}", &j, &err);
  expect_error(rc, err, "line 1, column 18: duplicate key \"a\"", "json: the first repeated key in file order");
  rc = json_parse("{\"x\": {\"a\": 1}, \"y\": {\"a\": 1}}", &j, &err);
  expect(rc == 0, "json: one key in two objects is no duplicate", err);
  rc = json_parse("[1, [2, 3], {\"k\": 4}]", &j, &err, 8);
  expect(rc == 0, "json: 8 values (the key counts) within a limit of 8", err);
  rc = json_parse("[1, [2, 3], {\"k\": 4}]", &j, &err, 7);
  expect_error(rc, err, "line 1, column 19: more than 7 values", "json: the 8th value past a limit of 7");

}

void test_json_cursor() {
  bool ok;
  // The cursor: a walk that keeps nothing, and exact integers.
  const std::string text = "{\"n\": [0, 18446744073709551615, 18446744073709551616, 2.0, 1e0, -1], \"s\": \"x\"}";
  JsonCursor c(text);
  bool end = false;
  ok = c.enter_object();
  std::string key;
  std::vector<int> exact;
  while (ok && c.next_key(&key, &end) && !end) {
    if (key == "n") {
      ok &= c.enter_array();
      while (ok && c.next_item(&end) && !end) {
        JsonNumber n;
        uint64_t v = 7;
        ok &= c.number(&n);
        exact.push_back(json_uint64(n, &v) ? (v == 0 ? 0 : v == UINT64_MAX ? 1 : 9) : -1);
      }
    } else {
      ok &= c.skip();
    }
  }
  ok &= c.finish();
  expect(ok && exact == std::vector<int>{0, 1, -1, -1, -1, -1},
         "json cursor: uint64 literals exact (0, 2^64-1); 2^64, 2.0, 1e0, -1 are not", c.error());
  const std::string vt = "{\"k\": [\"\\u00e9x\", {\"a\\n\": null}]}", wt = "{\"abcd\": 1, \"abcde\": 2}", dt = "[1, 2";
  JsonCursor v(vt, 128, 4);
  ok = v.skip() && v.finish();
  expect(ok, "json cursor: skip() checks without keeping (strings past max_string included)", v.error());
  JsonCursor w(wt, 128, 4);
  std::string k2;
  ok = w.enter_object() && w.next_key(&k2, &end) && w.skip() && w.next_key(&k2, &end);
  expect(!ok && w.error() == "line 1, column 13: a string longer than 4 bytes",
         "json cursor: a key past max_string is refused as it is read", w.error());
  JsonCursor d(dt);
  ok = d.enter_array() && d.next_item(&end) && d.skip() && d.next_item(&end) && d.skip() && d.next_item(&end);
  expect(!ok && d.error() == "line 1, column 6: expected ',' or ']' in an array, found the end of the text",
         "json cursor: a document cut short", d.error());
}

// ------------------------------------------------------------ the file rule

void test_input_files() {
  std::string err, out;
  const std::string dir = fresh_dir("files");
  write_file(dir + "/ok.json", "{}");
  int rc = read_input_file(dir + "/ok.json", 16, &out, &err);
  expect(rc == 0 && out == "{}", "input file: a regular file read whole", err);
  rc = read_input_file(dir + "/ok.json", 1, &out, &err);
  expect_error(rc, err, "ok.json: 2 bytes, more than the 1 bytes this engine reads for it", "input file: over its cap");
  expect(symlink((dir + "/ok.json").c_str(), (dir + "/link.json").c_str()) == 0, "input file: a symlink made");
  rc = read_input_file(dir + "/link.json", 16, &out, &err);
  expect(rc == 0 && out == "{}", "input file: a symlink to a regular file is followed (the Hugging Face cache)", err);
  expect(mkfifo((dir + "/fifo").c_str(), 0600) == 0, "input file: a FIFO made");
  rc = read_input_file(dir + "/fifo", 16, &out, &err);
  expect_error(rc, err, "fifo: a FIFO, not a regular file", "input file: a FIFO refused, not waited on");
  expect(symlink("/dev/zero", (dir + "/zero").c_str()) == 0, "input file: a link to /dev/zero made");
  rc = read_input_file(dir + "/zero", 16, &out, &err);
  expect_error(rc, err, "zero: a character device, not a regular file", "input file: a link to /dev/zero refused");
  rc = read_input_file(dir, 16, &out, &err);
  expect_error(rc, err, "files: a directory, not a regular file", "input file: a directory refused");
  InputFile f;
  rc = f.open(dir + "/ok.json", &err);
  char buf[4];
  expect(rc == 0 && truncate((dir + "/ok.json").c_str(), 1) == 0, "input file: opened, then truncated", err);
  rc = f.read_at(0, buf, 2, &err);
  expect_error(rc, err, "1 of 2 bytes at offset 0 could be read: the file is shorter than when it was opened (2 bytes)",
               "input file: a file truncated after it was opened");
}

// ------------------------------------------------------------ conversions

void test_conversions() {
  size_t bad16 = 0;
  for (uint32_t h = 0; h < 65536; h++) {
    const uint16_t got = f16_to_bf16((uint16_t)h);
    const int e = (h >> 10) & 0x1f, m = h & 0x3ff;
    const bool neg = h & 0x8000;
    if (e == 31 && m) {  // NaN must stay NaN with its sign
      bad16 += !((got & 0x7f80) == 0x7f80 && (got & 0x7f) && ((got & 0x8000) != 0) == neg);
      continue;
    }
    const double v = e == 31 ? INFINITY : e ? std::ldexp(1.0 + m / 1024.0, e - 15) : std::ldexp((double)m, -24);
    bad16 += got != ref_bf16(neg ? -v : v);
  }
  expect(bad16 == 0, "fp16 -> bf16: all 65536 values (ties to even, subnormals, inf, NaN)",
         std::to_string(bad16) + " wrong");
  std::mt19937 rng(7);
  size_t bad32 = 0, n = 0;
  std::vector<uint32_t> patterns;
  for (int i = 0; i < 1000000; i++) patterns.push_back(rng());
  // Edges: exact ties (even and odd), the largest finite (rounds to inf),
  // the smallest subnormals, negative zero, a NaN whose payload sits only in
  // the low half (a plain rounding add would make it inf).
  for (uint32_t u : {0x3f808000u, 0x3f818000u, 0x3f80ffffu, 0x7f7fffffu, 0x7f7f7fffu, 0x00000001u, 0x00008000u,
                     0x80000000u, 0x7f800000u, 0xff800000u, 0x7f800001u, 0xffc00000u})
    patterns.push_back(u);
  for (uint32_t u : patterns) {
    float f;
    std::memcpy(&f, &u, 4);
    const uint16_t got = f32_to_bf16(f);
    n++;
    if (std::isnan(f)) bad32 += !((got & 0x7f80) == 0x7f80 && (got & 0x7f) && (got >> 15) == (u >> 31));
    else bad32 += got != ref_bf16(f);
  }
  expect(bad32 == 0, "fp32 -> bf16: " + std::to_string(n) + " bit patterns incl. ties, overflow, subnormals, NaN",
         std::to_string(bad32) + " wrong");
  expect(bf16_to_f32(0x3f80) == 1.0f && bf16_to_f32(0xc040) == -3.0f, "bf16 -> fp32");
}

// ------------------------------------------------------------ safetensors

void test_safetensors() {
  std::string err;
  // Windows of rows and columns, each dtype, data deliberately unaligned (a
  // 1-byte tensor first, no header padding).
  {
    const std::string dir = fresh_dir("st_read");
    Tensor u8{"u8", "U8", {3}, "abc"};
    std::vector<float> fv = {1.0f, 1.00390625f /* tie: to 1.0 */, 1.01171875f /* tie: up */, -2.7182817f,
                             3.1415927f, 1e-40f /* subnormal */, 65504.f, -0.f, 1.5f, 0.1f};
    Tensor f32{"f32", "F32", {2, 5}, std::string(reinterpret_cast<const char *>(fv.data()), fv.size() * 4)};
    std::vector<uint16_t> hv = {0x3c00, 0x3c01, 0x0001, 0x7bff, 0xfc00, 0xc000};
    Tensor f16{"f16", "F16", {6}, std::string(reinterpret_cast<const char *>(hv.data()), hv.size() * 2)};
    Tensor bf = make_tensor("bf", {4, 3}, "BF16");
    write_file(dir + "/model.safetensors", safetensors_bytes({u8, f32, f16, bf}, false));
    Checkpoint ck;
    int rc = ck.open(dir, &err);
    expect(rc == 0 && ck.file_count() == 1 && ck.find("f32") && ck.find("f32")->shape == std::vector<int64_t>{2, 5},
           "safetensors: single file opened, shapes read", err);
    std::vector<uint16_t> out(2 * 4, 0xabcd);
    rc = ck.read_bf16("f32", 0, 2, 1, 3, out.data(), 4, &err);
    bool ok = rc == 0;
    for (int r = 0; r < 2; r++)
      for (int c = 0; c < 3; c++) ok &= out[r * 4 + c] == ref_bf16(fv[r * 5 + 1 + c]);
    ok &= out[3] == 0xabcd && out[7] == 0xabcd;  // the pitch's padding untouched
    expect(ok, "safetensors: F32 rows 0-1, columns 1-3 into a pitch of 4, rounded to nearest even", err);
    std::vector<uint16_t> o16(6);
    rc = ck.read_bf16("f16", 0, 1, 0, 6, o16.data(), 6, &err);
    ok = rc == 0;
    for (int c = 0; c < 6; c++) ok &= o16[c] == f16_to_bf16(hv[c]);
    expect(ok && o16[0] == 0x3f80 && o16[1] == 0x3f80 && o16[2] == 0x3380 && o16[4] == 0xff80,
           "safetensors: F16 1-D tensor (1+2^-10 -> 1, 2^-24 exact, -inf)", err);
    std::vector<uint16_t> ob(2 * 2);
    rc = ck.read_bf16("bf", 2, 2, 1, 2, ob.data(), 2, &err);
    ok = rc == 0;
    for (int r = 0; r < 2; r++)
      for (int c = 0; c < 2; c++) ok &= ob[r * 2 + c] == bits_bf16(val("bf", 2 + r, 1 + c));
    expect(ok, "safetensors: BF16 rows 2-3, columns 1-2 copied", err);
    rc = ck.read_bf16("u8", 0, 1, 0, 3, ob.data(), 3, &err);
    expect_error(rc, err, "tensor u8: dtype U8: supported BF16, F16, F32", "safetensors: U8 refused by name");
    rc = ck.read_bf16("bf", 3, 2, 0, 3, ob.data(), 3, &err);
    expect_error(rc, err, "tensor bf [4, 3]: rows 3+2, columns 0+3 out of range", "safetensors: a window past the end");
    rc = ck.read_bf16("nope", 0, 1, 0, 1, ob.data(), 1, &err);
    expect_error(rc, err, "tensor nope: not in the checkpoint", "safetensors: an unknown tensor");
  }
  // A file cut short after it was opened (a download replaced under a
  // running engine): an error naming it, not a SIGBUS from a mapping.
  {
    const std::string dir = fresh_dir("st_truncated");
    const std::string bytes = safetensors_bytes({make_tensor("a", {64, 64}, "BF16"), make_tensor("b", {64, 64}, "F32")});
    write_file(dir + "/model.safetensors", bytes);
    Checkpoint ck;
    std::vector<uint16_t> out(64 * 64);
    int rc = ck.open(dir, &err);
    expect(rc == 0 && truncate((dir + "/model.safetensors").c_str(), (off_t)(bytes.size() - 64 * 64 * 3)) == 0,
           "safetensors: opened, then truncated to the middle of tensor b", err);
    rc = ck.read_bf16("a", 0, 64, 0, 64, out.data(), 64, &err);
    expect(rc == 0, "safetensors: tensor a, before the cut, still reads", err);
    rc = ck.read_bf16("b", 0, 64, 8, 32, out.data(), 32, &err);
    expect_error(rc, err, "model.safetensors: 0 of 128 bytes at offset",
                 "safetensors: a window of tensor b past the cut is an error, not SIGBUS");
    rc = ck.read_bf16("b", 0, 64, 0, 64, out.data(), 64, &err);
    expect_error(rc, err, "could be read: the file is shorter than when it was opened",
                 "safetensors: whole rows of tensor b past the cut are an error, not SIGBUS");
  }
}

void test_safetensors_broken() {
  std::string err;
  // Broken files.
  auto broken = [&](const std::string &name, const std::string &bytes, const std::string &want) {
    const std::string dir = fresh_dir("st_" + name);
    write_file(dir + "/model.safetensors", bytes);
    Checkpoint ck;
    const int rc = ck.open(dir, &err);
    expect_error(rc, err, want, "safetensors refuses " + name);
  };
  broken("short", "abc", "3 bytes, shorter than the 8-byte header length");
  std::string len_big(8, '\0');
  len_big[0] = (char)200;
  broken("header_len", len_big + "{}", "header length 200 exceeds the file (10 bytes)");
  broken("not_json", with_header("{\"a\": ", 0), "model.safetensors: header: line 1, column 7");
  broken("not_object", with_header("[]", 0), "model.safetensors: header: expected an object, got an array");
  broken("offsets", with_header("{\"t\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]}}", 4),
         "tensor t: data_offsets [0, 8] outside the file's 4 data bytes");
  broken("size", with_header("{\"t\": {\"dtype\": \"F32\", \"shape\": [3], \"data_offsets\": [0, 8]}}", 8),
         "tensor t: 8 data bytes, but F32 [3] needs 12");
  broken("shape", with_header("{\"t\": {\"dtype\": \"F32\", \"shape\": [-1], \"data_offsets\": [0, 0]}}", 0),
         "tensor t: shape[0]: expected a non-negative integer below 2^63, got -1");
  broken("fields", with_header("{\"t\": {\"dtype\": \"F32\", \"shape\": [1]}}", 4),
         "tensor t: expected {\"dtype\": string, \"shape\": [...], \"data_offsets\": [begin, end]}");
  // As strict as safetensors' own reader (each of these was accepted once).
  const std::string f4 = "{\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": ";
  broken("overlap", with_header("{\"a\": " + f4 + "[0, 4]}, \"b\": " + f4 + "[2, 6]}}", 8),
         "tensor b (data_offsets [2, 6]) overlaps tensor a (ending at 4)");
  broken("gap", with_header("{\"a\": " + f4 + "[0, 4]}, \"b\": " + f4 + "[8, 12]}}", 12),
         "4 data bytes before tensor b (data_offsets [8, 12]) belong to no tensor");
  broken("trailing", with_header("{\"a\": " + f4 + "[0, 4]}}", 8),
         "4 data bytes after the last tensor belong to no tensor");
  broken("float_shape", with_header("{\"t\": {\"dtype\": \"F32\", \"shape\": [2.0, 1e0], \"data_offsets\": [0, 8]}}", 8),
         "tensor t: shape[0]: expected a non-negative integer below 2^63, got 2.0");
  broken("float_offset", with_header("{\"t\": " + f4 + "[0, 4.0]}}", 4),
         "tensor t: data_offsets[1]: expected a non-negative integer below 2^63, got 4.0");
  broken("three_offsets", with_header("{\"t\": " + f4 + "[0, 4, 4]}}", 4),
         "tensor t: data_offsets: expected [begin, end], got more than two numbers");
  broken("unknown_dtype", with_header("{\"t\": {\"dtype\": \"Q4\", \"shape\": [3], \"data_offsets\": [0, 5]}}", 5),
         "tensor t: dtype \"Q4\": not a safetensors dtype");
  broken("sub_byte", with_header("{\"t\": {\"dtype\": \"F4\", \"shape\": [3], \"data_offsets\": [0, 2]}}", 2),
         "tensor t: F4 [3] is 12 bits, not a whole number of bytes");
  broken("metadata_number", with_header("{\"__metadata__\": 7}", 0), "__metadata__: expected a map of strings, got a number");
  broken("metadata_value", with_header("{\"__metadata__\": {\"format\": [\"pt\"]}}", 0),
         "__metadata__[\"format\"]: expected a string, got an array");
  broken("nul_name", with_header("{\"a\\u0000b\": " + f4 + "[0, 4]}}", 4), "tensor a\\x00b: a NUL in the name");
  broken("duplicate", with_header("{\"t\": " + f4 + "[0, 4]}, \"t\": " + f4 + "[4, 8]}}", 8),
         "header: line 1, column 63: duplicate key \"t\"");
  broken("unknown_field", with_header("{\"t\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4], \"x\": 1}}", 4),
         "tensor t: unknown field \"x\": expected {\"dtype\"");
  broken("overflow", with_header("{\"t\": {\"dtype\": \"F32\", \"shape\": [2147483648, 2147483648], \"data_offsets\": [0, 4]}}", 4),
         "tensor t: 4 data bytes, but F32 [2147483648, 2147483648] needs 18446744073709551616");
  // 2^33 * 2^33 * 2^62 = 2^128: a product formed before its cap would wrap to 0 bytes and pass an empty span
  broken("overflow128",
         with_header("{\"t\": {\"dtype\": \"F32\", \"shape\": [8589934592, 8589934592, 4611686018427387904], "
                     "\"data_offsets\": [0, 0]}}", 0),
         "needs more than 2^100");
  broken("rank", with_header("{\"t\": {\"dtype\": \"U8\", \"shape\": [1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1], \"data_offsets\": [0, 1]}}", 1),
         "tensor t: shape: more than 16 dimensions");
  broken("missing", with_header("{\"t\": {\"shape\": [1], \"data_offsets\": [0, 4]}}", 4), "(dtype missing)");
  {
    const std::string dir = fresh_dir("st_accepted");
    write_file(dir + "/model.safetensors", with_header("{\"__metadata__\": null, \"z\": {\"dtype\": \"F32\", \"shape\": [0, "
                                                       "3], \"data_offsets\": [4, 4]}, \"a\": " + f4 + "[0, 4]}}", 4));
    Checkpoint ck;
    expect(ck.open(dir, &err) == 0 && ck.find("z") && ck.find("z")->bytes == 0,
           "safetensors: __metadata__ null and an empty tensor at the end are accepted", err);
  }
}

void test_checkpoint_files() {
  std::string err;
  {
    const std::string dir = fresh_dir("st_none");
    Checkpoint ck;
    expect_error(ck.open(dir, &err), err, "neither model.safetensors nor model.safetensors.index.json",
                 "checkpoint: an empty directory");
  }
  {
    const std::string dir = fresh_dir("st_index");
    write_file(dir + "/a.safetensors", safetensors_bytes({make_tensor("x", {2}, "BF16")}));
    write_file(dir + "/model.safetensors.index.json", "{\"weight_map\": {\"x\": \"a.safetensors\", \"y\": \"a.safetensors\"}}");
    Checkpoint ck;
    expect_error(ck.open(dir, &err), err, "tensor y is mapped to a.safetensors, which does not hold it",
                 "checkpoint: an index naming a tensor its file lacks");
    write_file(dir + "/model.safetensors.index.json", "{\"weight_map\": {\"x\": \"../a.safetensors\"}}");
    expect_error(ck.open(dir, &err), err, "weight_map[\"x\"]: expected a file name in",
                 "checkpoint: an index naming a path outside the directory");
    write_file(dir + "/model.safetensors.index.json", "{\"weight_map\": {\"x\": \"b.safetensors\"}}");
    expect_error(ck.open(dir, &err), err, "b.safetensors: cannot open", "checkpoint: an index naming a missing file");
    write_file(dir + "/model.safetensors.index.json", "{\"metadata\": {}}");
    expect_error(ck.open(dir, &err), err, "no \"weight_map\" object", "checkpoint: an index without weight_map");
    write_file(dir + "/b.safetensors", safetensors_bytes({make_tensor("y", {2}, "BF16"), make_tensor("x", {2}, "BF16")}));
    write_file(dir + "/model.safetensors.index.json", "{\"weight_map\": {\"x\": \"a.safetensors\", \"y\": \"b.safetensors\"}}");
    expect_error(ck.open(dir, &err), err, "tensor x is in b.safetensors, but weight_map maps it to a.safetensors",
                 "checkpoint: a tensor in two files");
    write_file(dir + "/b.safetensors", safetensors_bytes({make_tensor("y", {2}, "BF16"), make_tensor("z", {2}, "BF16")}));
    expect_error(ck.open(dir, &err), err, "tensor z is in b.safetensors, but weight_map does not list it",
                 "checkpoint: a tensor of a shard the index does not list");
    write_file(dir + "/model.safetensors.index.json", "{\"weight_map\": {\"x\": \"a.safetensors\", \"x\": \"a.safetensors\"}}");
    expect_error(ck.open(dir, &err), err, "line 1, column 39: duplicate key \"x\"", "checkpoint: an index listing a tensor twice");
    write_file(dir + "/model.safetensors.index.json", "{\"weight_map\": {\"x\": \"a.safetensors\\u0000.txt\"}}");
    expect_error(ck.open(dir, &err), err, "weight_map[\"x\"]: expected a file name in", "checkpoint: a NUL in a file name");
    write_file(dir + "/model.safetensors.index.json", "{\"weight_map\": [\"a.safetensors\"]}");
    expect_error(ck.open(dir, &err), err, "weight_map: expected an object, got an array", "checkpoint: weight_map an array");
    write_file(dir + "/model.safetensors.index.json", "{\"weight_map\": {\"x\": \"..\"}}");
    expect_error(ck.open(dir, &err), err, "..: a directory, not a regular file", "checkpoint: an index naming ..");
  }
}

// ------------------------------------------------------------ shards

// One rank's buffers filled as load_weights fills them (shard_pieces, the
// reader), on the host.
struct HostRank {
  std::vector<std::vector<std::vector<uint16_t>>> layer;  // [layer][WB_ATTN_NORM..WB_2, then WB_QKV_BIAS at 6]
  std::vector<uint16_t> final_norm, lm_head;
};

int load_host(const HfModel &m, const Config &c, const Rank &r, HostRank *h, std::string *err) {
  h->layer.assign(c.layers, std::vector<std::vector<uint16_t>>(7));
  for (int i = 0; i < c.layers; i++) {
    for (int b = WB_ATTN_NORM; b <= WB_2; b++) h->layer[i][b].assign(weight_buf_elems(c, r, (WeightBuf)b), 0xffff);
    h->layer[i][6].assign(weight_buf_elems(c, r, WB_QKV_BIAS), 0xffff);
  }
  h->final_norm.assign(weight_buf_elems(c, r, WB_FINAL_NORM), 0xffff);
  h->lm_head.assign(weight_buf_elems(c, r, WB_LM_HEAD), 0xffff);
  for (const ShardPiece &p : shard_pieces(c, r)) {
    std::vector<uint16_t> &buf = p.layer < 0                ? (p.buf == WB_FINAL_NORM ? h->final_norm : h->lm_head)
                                 : p.buf == WB_QKV_BIAS ? h->layer[p.layer][6]
                                                        : h->layer[p.layer][p.buf];
    if (p.off + (p.rows - 1) * p.pitch + p.cols > buf.size()) {
      *err = p.name + ": piece beyond its buffer";
      return 1;
    }
    if (m.read(p.name, p.whole_rows, p.whole_cols, p.row0, p.rows, p.col0, p.cols, buf.data() + p.off, p.pitch, err))
      return 1;
  }
  return 0;
}

// The layout of docs/llama.md, computed here from the whole tensors'
// values: how many elements of rank r's buffers differ from it.
size_t layout_errors(const Spec &s, const HostRank &h, int rank, int R) {
  const size_t H = s.hidden, D = s.head_dim, nq = s.heads / R, nkv = s.kv / R, F = s.ffn / R, V = s.vocab / R;
  size_t bad = 0;
  auto want = [](const std::string &n, size_t r, size_t c) { return bits_bf16(val(n, r, c)); };
  for (int i = 0; i < s.layers; i++) {
    const std::string l = "model.layers." + std::to_string(i) + ".";
    const auto &b = h.layer[i];
    for (size_t c = 0; c < H; c++) {
      bad += b[WB_ATTN_NORM][c] != want(l + "input_layernorm.weight", 0, c);
      bad += b[WB_MLP_NORM][c] != want(l + "post_attention_layernorm.weight", 0, c);
    }
    for (size_t j = 0; j < (nq + 2 * nkv) * D; j++)  // this rank's q heads' rows, then its k, then its v
      for (size_t c = 0; c < H; c++) {
        const uint16_t w = j < nq * D ? want(l + "self_attn.q_proj.weight", rank * nq * D + j, c)
                           : j < (nq + nkv) * D
                               ? want(l + "self_attn.k_proj.weight", rank * nkv * D + j - nq * D, c)
                               : want(l + "self_attn.v_proj.weight", rank * nkv * D + j - (nq + nkv) * D, c);
        bad += b[WB_QKV][j * H + c] != w;
      }
    for (size_t r = 0; r < H; r++)  // o_proj: this rank's heads' columns
      for (size_t c = 0; c < nq * D; c++) bad += b[WB_O][r * nq * D + c] != want(l + "self_attn.o_proj.weight", r, rank * nq * D + c);
    for (size_t j = 0; j < 2 * F; j++)  // gate rows of the slice, then up rows
      for (size_t c = 0; c < H; c++)
        bad += b[WB_13][j * H + c] != (j < F ? want(l + "mlp.gate_proj.weight", rank * F + j, c)
                                               : want(l + "mlp.up_proj.weight", rank * F + j - F, c));
    for (size_t r = 0; r < H; r++)
      for (size_t c = 0; c < F; c++) bad += b[WB_2][r * F + c] != want(l + "mlp.down_proj.weight", r, rank * F + c);
    if (b[6].size() != (s.qkv_bias ? (nq + 2 * nkv) * D : 0)) bad++;
    for (size_t j = 0; j < b[6].size(); j++)  // the biases of wqkv's rows, in its order
      bad += b[6][j] != (j < nq * D ? want(l + "self_attn.q_proj.bias", 0, rank * nq * D + j)
                         : j < (nq + nkv) * D
                             ? want(l + "self_attn.k_proj.bias", 0, rank * nkv * D + j - nq * D)
                             : want(l + "self_attn.v_proj.bias", 0, rank * nkv * D + j - (nq + nkv) * D));
  }
  for (size_t c = 0; c < H; c++) bad += h.final_norm[c] != want("model.norm.weight", 0, c);
  const std::string lm = s.tie ? "model.embed_tokens.weight" : "lm_head.weight";
  for (size_t j = 0; j < V; j++)
    for (size_t c = 0; c < H; c++) bad += h.lm_head[j * H + c] != want(lm, rank * V + j, c);
  return bad;
}

void check_model(const std::string &what, const Spec &s, const std::string &dir) {
  for (int R : {1, 2}) {
    HfModel m;
    Config c;
    std::string err;
    if (m.open(dir, R, 256, &c, &err)) {
      expect(false, what + " TP " + std::to_string(R) + ": open", err);
      continue;
    }
    const bool cfg_ok = c.hidden == s.hidden && c.heads == s.heads && c.kv_heads == s.kv && c.head_dim == s.head_dim &&
                        c.ffn == s.ffn && c.layers == s.layers && c.vocab == s.vocab && c.theta == 500000.f &&
                        c.eps == 1e-5f && c.rope_inv_freq.empty() && c.qkv_bias == s.qkv_bias;
    expect(cfg_ok, what + " TP " + std::to_string(R) + ": config.json into the engine's Config");
    for (int rank = 0; rank < R; rank++) {
      Rank r;
      r.rank = rank;
      r.nranks = R;
      HostRank h;
      if (load_host(m, c, r, &h, &err)) {
        expect(false, what + ": rank " + std::to_string(rank), err);
        continue;
      }
      const size_t bad = layout_errors(s, h, rank, R);
      expect(bad == 0, what + " TP " + std::to_string(R) + " rank " + std::to_string(rank) +
                           ": every buffer equals the layout computed from the whole tensors",
             std::to_string(bad) + " elements differ");
      if (rank == 1) {  // the check itself: rank 1's buffers are not rank 0's layout
        const size_t other = layout_errors(s, h, 0, R);
        expect(other > 0, what + ": rank 1's buffers against rank 0's layout differ (the check can fail)",
               std::to_string(other) + " elements differ");
      }
    }
    // The embedding, whole.
    std::vector<uint16_t> emb((size_t)s.vocab * s.hidden);
    int rc = m.read("embed", s.vocab, s.hidden, 0, s.vocab, 0, s.hidden, emb.data(), s.hidden, &err);
    size_t bad = 0;
    for (size_t j = 0; j < (size_t)s.vocab; j++)
      for (size_t k = 0; k < (size_t)s.hidden; k++)
        bad += emb[j * s.hidden + k] != bits_bf16(val("model.embed_tokens.weight", j, k));
    if (R == 1) expect(rc == 0 && bad == 0, what + ": the token embedding, whole", err);
  }
}

void test_shards() {
  Spec s = llama_spec();
  check_model("llama single-file bf16", s, write_test_model("m_bf16", s));

  Spec t = llama_spec();  // sharded with an index, tied embeddings, dtypes mixed tensor by tensor
  t.files = 3;
  t.tie = true;
  t.cfg["tie_word_embeddings"] = "true";
  t.dtype = [](size_t k, const std::string &) { return std::string(k % 3 == 0 ? "BF16" : k % 3 == 1 ? "F16" : "F32"); };
  check_model("llama sharded (index, 3 files) bf16/fp16/fp32 tied", t, write_test_model("m_sharded", t));

  Spec f = llama_spec();  // fp32, and the transformers 4.x RoPE fields
  f.dtype = [](size_t, const std::string &) { return std::string("F32"); };
  f.cfg["rope_parameters"] = "";
  f.cfg["rope_theta"] = "500000.0";
  f.cfg["rope_scaling"] = "null";
  check_model("llama fp32, rope_theta at the top (transformers 4.x)", f, write_test_model("m_f32", f));

  Spec m = llama_spec();  // Mistral: no sliding window, 8 heads over 2 (group 4)
  m.heads = 8;
  m.dtype = [](size_t, const std::string &) { return std::string("F16"); };
  m.cfg["architectures"] = "[\"MistralForCausalLM\"]";
  m.cfg["model_type"] = "\"mistral\"";
  m.cfg["num_attention_heads"] = "8";
  m.cfg["sliding_window"] = "null";
  m.cfg["attention_bias"] = m.cfg["mlp_bias"] = "";
  check_model("mistral fp16, group 4", m, write_test_model("m_mistral", m));

  Spec q = llama_spec();  // Qwen2: q/k/v biases (sharded as wqkv's rows), tied embeddings
  make_qwen2(&q);
  q.tie = true;
  q.cfg["tie_word_embeddings"] = "true";
  check_model("qwen2 bf16 with q/k/v biases, tied", q, write_test_model("m_qwen2", q));

  Spec d = llama_spec();  // Llama-3.2-1B-like: head_dim 64, tied embeddings
  d.head_dim = 64;
  d.tie = true;
  d.cfg["head_dim"] = "64";
  d.cfg["tie_word_embeddings"] = "true";
  check_model("llama head_dim 64, tied", d, write_test_model("m_hd64", d));

  Spec g = llama_spec();  // Qwen2.5-14B-like group of 5 (10 heads over 2), q/k/v biases
  make_qwen2(&g);
  g.heads = 10;
  g.cfg["num_attention_heads"] = "10";
  check_model("qwen2 group 5 (10 heads over 2) with biases", g, write_test_model("m_group5", g));
}

// ------------------------------------------------------------ refusals

// Writes a variant of the Llama spec and requires HfModel::open to refuse it
// with a message holding `want`.
void refuse(const std::string &what, const std::function<void(Spec *)> &change, const std::string &want, int tp = 1,
            int max_ctx = 256) {
  Spec s = llama_spec();
  change(&s);
  const std::string dir = write_test_model("r_" + std::to_string(g_pass + g_fail), s);
  HfModel m;
  Config c;
  std::string err;
  const int rc = m.open(dir, tp, max_ctx, &c, &err);
  expect_error(rc, err, want, "refused: " + what);
}

void test_refusals() {
  const std::string D = "model.layers.";
  refuse("a tensor stored as I8", [](Spec *s) { s->dtype = [](size_t, const std::string &n) {
           return std::string(n == "model.layers.1.mlp.down_proj.weight" ? "I8" : "BF16"); }; },
         "tensor model.layers.1.mlp.down_proj.weight: dtype I8: supported BF16, F16, F32");
  refuse("a missing tensor", [&](Spec *s) { s->drop = {D + "1.mlp.up_proj.weight"}; },
         "missing tensor model.layers.1.mlp.up_proj.weight [48, 32]");
  refuse("lm_head missing without tied embeddings", [](Spec *s) { s->drop = {"lm_head.weight"}; },
         "missing tensor lm_head.weight [32, 32] (tie_word_embeddings is false)");
  refuse("a tensor of the wrong shape", [&](Spec *s) { s->reshape[D + "0.self_attn.q_proj.weight"] = {512, 31}; },
         "tensor model.layers.0.self_attn.q_proj.weight: shape [512, 31], expected [512, 32] from config.json");
  refuse("a norm of the wrong shape", [](Spec *s) { s->reshape["model.norm.weight"] = {1, 32}; },
         "tensor model.norm.weight: shape [1, 32], expected [32]");
  refuse("a bias tensor the config does not announce", [&](Spec *s) { s->add = {{D + "0.self_attn.k_proj.bias", {256}}}; },
         "tensor model.layers.0.self_attn.k_proj.bias [256]: biases are not supported yet");
  refuse("Qwen3's q_norm (a model the engine would run differently)",
         [&](Spec *s) { s->add = {{D + "0.self_attn.q_norm.weight", {128}}}; },
         "tensor model.layers.0.self_attn.q_norm.weight [128]: not a tensor this engine reads for LlamaForCausalLM");
  refuse("a layer beyond num_hidden_layers", [&](Spec *s) { s->add = {{D + "2.mlp.up_proj.weight", {48, 32}}}; },
         "tensor model.layers.2.mlp.up_proj.weight [48, 32]: layer 2, but num_hidden_layers is 2");
  refuse("an unknown tensor outside the layers", [](Spec *s) { s->add = {{"model.extra", {4}}}; },
         "tensor model.extra [4]: not a tensor this engine reads");
  refuse("inv_freq of a layer beyond num_hidden_layers",
         [&](Spec *s) { s->add = {{D + "7.self_attn.rotary_emb.inv_freq", {64}}}; }, "layer 7, but num_hidden_layers is 2");
  refuse("an unknown tensor in a sharded checkpoint", [](Spec *s) { s->files = 2; s->add = {{"lm_head.bias", {32}}}; },
         "tensor lm_head.bias [32]: biases are not supported yet");
}

void test_refusals_config() {
  const std::string D = "model.layers.";
  refuse("head_dim 96", [](Spec *s) { s->cfg["head_dim"] = "96"; },
         "config.json: head_dim 96: this engine supports 64 and 128");
  refuse("head_dim from hidden/heads", [](Spec *s) { s->cfg["head_dim"] = ""; },
         "config.json: head_dim 8 (hidden_size 32 / num_attention_heads 4): this engine supports 64 and 128");
  refuse("a group of 32", [](Spec *s) { s->cfg["num_attention_heads"] = "64"; },
         "num_attention_heads/num_key_value_heads = 32 (64/2): supported 1..16");
  refuse("a group of 17", [](Spec *s) { s->cfg["num_attention_heads"] = "34"; },
         "num_attention_heads/num_key_value_heads = 17 (34/2): supported 1..16");
  refuse("heads not a multiple of kv heads", [](Spec *s) { s->cfg["num_key_value_heads"] = "3"; },
         "num_attention_heads 4 is not a multiple of num_key_value_heads 3");
  refuse("--tp that does not divide the KV heads", [](Spec *) {}, "num_key_value_heads 2: --tp 4 must divide it", 4);
  refuse("rope_parameters yarn (transformers 5)",
         [](Spec *s) { s->cfg["rope_parameters"] = "{\"rope_type\": \"yarn\", \"factor\": 4.0, \"rope_theta\": 1e6}"; },
         "config.json: rope_parameters.rope_type 'yarn': supported: none, 'llama3'");
  refuse("rope_scaling linear (transformers 4, 'type')",
         [](Spec *s) { s->cfg["rope_scaling"] = "{\"type\": \"linear\", \"factor\": 2.0}"; },
         "config.json: rope_scaling.type 'linear': supported: none, 'llama3'");
  refuse("llama3 scaling without its factors",
         [](Spec *s) { s->cfg["rope_parameters"] = "{\"rope_type\": \"llama3\", \"rope_theta\": 500000.0}"; },
         "config.json: rope_parameters.factor: missing");
  refuse("attention_bias", [](Spec *s) { s->cfg["attention_bias"] = "true"; },
         "config.json: attention_bias true (o_proj.bias): not supported yet");
  refuse("mlp_bias", [](Spec *s) { s->cfg["mlp_bias"] = "true"; }, "config.json: mlp_bias true: not supported yet");
  const auto qwen2 = make_qwen2;
  refuse("Qwen2 without its q_proj.bias", [&](Spec *s) { qwen2(s); s->drop = {D + "0.self_attn.q_proj.bias"}; },
         "missing tensor model.layers.0.self_attn.q_proj.bias [512]");
  refuse("Qwen2 with a k_proj.bias of the wrong shape",
         [&](Spec *s) { qwen2(s); s->reshape[D + "1.self_attn.k_proj.bias"] = {1, 256}; },
         "tensor model.layers.1.self_attn.k_proj.bias: shape [1, 256], expected [256]");
  refuse("Qwen2 with an o_proj.bias", [&](Spec *s) { qwen2(s); s->add = {{D + "0.self_attn.o_proj.bias", {32}}}; },
         "tensor model.layers.0.self_attn.o_proj.bias [32]: biases are not supported yet");
  refuse("Qwen2 with a sliding window shorter than the context",
         [&](Spec *s) { qwen2(s); s->cfg["use_sliding_window"] = "true"; s->cfg["sliding_window"] = "128";
                        s->cfg["max_window_layers"] = "0"; },
         "sliding_window (use_sliding_window true) 128 < max context 256");
  auto mistral = [](Spec *s) {
    s->cfg["architectures"] = "[\"MistralForCausalLM\"]";
    s->cfg["model_type"] = "\"mistral\"";
  };
  refuse("Mistral's sliding window shorter than the context",
         [&](Spec *s) { mistral(s); s->cfg["sliding_window"] = "4096"; },
         "config.json: sliding_window 4096 < max context 8192 (prompt + new tokens)", 1, 8192);
  refuse("Mistral without sliding_window (transformers' default 4096)", mistral,
         "config.json: sliding_window 4096 < max context 5000", 1, 5000);
  refuse("an unknown architecture", [](Spec *s) { s->cfg["architectures"] = "[\"GPT2LMHeadModel\"]"; },
         "config.json: architectures GPT2LMHeadModel: supported: LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM");
  refuse("hidden_act gelu", [](Spec *s) { s->cfg["hidden_act"] = "\"gelu\""; }, "config.json: hidden_act 'gelu': supported: 'silu'");
  refuse("quantized weights", [](Spec *s) { s->cfg["quantization_config"] = "{\"quant_method\": \"awq\", \"bits\": 4}"; },
         "quantization_config.quant_method 'awq': quantized weights are not supported");
  refuse("a field of the wrong type", [](Spec *s) { s->cfg["num_attention_heads"] = "\"4\""; },
         "config.json: num_attention_heads: expected an integer, got a string");
  refuse("a fractional integer field", [](Spec *s) { s->cfg["hidden_size"] = "32.5"; },
         "config.json: hidden_size: expected an integer, got a number");
  refuse("a missing field", [](Spec *s) { s->cfg["intermediate_size"] = ""; }, "config.json: intermediate_size: missing");
  refuse("a vocabulary not a multiple of 8 x TP", [](Spec *s) { s->vocab = 40; s->cfg["vocab_size"] = "40"; },
         "vocab_size 40: must be a multiple of 8 x --tp 2", 2);
  refuse("an intermediate size not a multiple of 8 x TP", [](Spec *s) { s->cfg["intermediate_size"] = "40"; },
         "intermediate_size 40: must be a multiple of 8 x --tp 2", 2);
  refuse("config.json not JSON", [](Spec *s) { s->cfg["x"] = "[1,"; }, "config.json: line");
}

void test_refusals_bounds() {
  // Counts bounded before anything is sized from them; numbers checked in fp32.
  refuse("2^31 - 1 layers", [](Spec *s) { s->cfg["num_hidden_layers"] = "2147483647"; },
         "config.json: num_hidden_layers 2147483647: expected 1..1024 (the largest model this engine runs)");
  refuse("0 layers", [](Spec *s) { s->cfg["num_hidden_layers"] = "0"; }, "num_hidden_layers 0: expected 1..1024");
  refuse("a negative head count", [](Spec *s) { s->cfg["num_key_value_heads"] = "-2"; },
         "num_key_value_heads -2: expected 1..1024");
  refuse("an integer beyond int", [](Spec *s) { s->cfg["intermediate_size"] = "100000000000000000000"; },
         "intermediate_size 1e+20: expected 1..1048576");
  refuse("a vocabulary above 2^24 (token ids pass through fp32)", [](Spec *s) { s->cfg["vocab_size"] = "16777224"; },
         "vocab_size 16777224: expected 1..16777216");
  refuse("an integer written as a float", [](Spec *s) { s->cfg["hidden_size"] = "32.0"; },
         "config.json: hidden_size: expected an integer, got a number");
  refuse("rms_norm_eps 1e-300 (0 in fp32)", [](Spec *s) { s->cfg["rms_norm_eps"] = "1e-300"; },
         "rms_norm_eps 1e-300: 0 in fp32 (the kernels' type): expected a normal fp32 in (0, 1]");
  refuse("rms_norm_eps 1e300 (inf in fp32)", [](Spec *s) { s->cfg["rms_norm_eps"] = "1e300"; },
         "rms_norm_eps 1e+300: inf in fp32");
  refuse("rope_theta 1e39 (inf in fp32)", [](Spec *s) { s->cfg["rope_parameters"] = "{\"rope_theta\": 1e39, \"rope_type\": \"default\"}"; },
         "rope_theta 1e+39: inf in fp32 (the kernels' type): expected a finite fp32 above 1");
  refuse("rope_theta 0.5", [](Spec *s) { s->cfg["rope_parameters"] = "{\"rope_theta\": 0.5}"; },
         "rope_theta 0.5: 0.5 in fp32 (the kernels' type): expected a finite fp32 above 1");
  refuse("llama3 scaling with a factor of 1e39",
         [](Spec *s) { s->cfg["rope_parameters"] = "{\"rope_type\": \"llama3\", \"rope_theta\": 500000.0, \"factor\": 1e39, "
                                                   "\"low_freq_factor\": 1.0, \"high_freq_factor\": 4.0}"; },
         "rope_parameters.rope_type 'llama3': factor 1e+39");
  refuse("a negative max_position_embeddings", [](Spec *s) { s->cfg["max_position_embeddings"] = "-1"; },
         "max_position_embeddings -1: expected 1..1073741824");
  refuse("a negative sliding window", [](Spec *s) {
           s->cfg["architectures"] = "[\"MistralForCausalLM\"]";
           s->cfg["sliding_window"] = "-5"; },
         "sliding_window -5: expected 0..1073741824");
  refuse("an architecture name with a newline", [](Spec *s) { s->cfg["architectures"] = "[\"X\\nY\"]"; },
         "architectures X\\x0aY: supported");
  refuse("per-layer RoPE", [](Spec *s) { s->cfg["rope_parameters"] = "{\"full_attention\": {\"rope_type\": \"default\"}}"; },
         "rope_parameters: RoPE per layer type (full_attention, ...): not supported");
}

// What is accepted at the edges, and llama3's frequency table.
void test_accepted() {
  std::string err;
  Spec s = llama_spec();
  s.cfg["architectures"] = "[\"MistralForCausalLM\"]";
  s.cfg["model_type"] = "\"mistral\"";
  s.cfg["sliding_window"] = "4096";
  {
    const std::string dir = write_test_model("a_mistral_sw", s);
    HfModel m;
    Config c;
    expect(m.open(dir, 1, 4096, &c, &err) == 0, "accepted: Mistral's sliding_window 4096 at a max context of 4096", err);
  }
  Spec u = llama_spec();  // what a family carries unused: RoPE's table (older transformers), a tied lm_head
  u.tie = true;
  u.cfg["tie_word_embeddings"] = "true";
  u.add = {{"model.layers.0.self_attn.rotary_emb.inv_freq", {64}},
           {"model.layers.1.self_attn.rotary_emb.inv_freq", {64}},
           {"lm_head.weight", {32, 32}}};
  {
    const std::string dir = write_test_model("a_unused", u);
    HfModel m;
    Config c;
    expect(m.open(dir, 1, 256, &c, &err) == 0,
           "accepted: rotary_emb.inv_freq per layer and lm_head.weight with tied embeddings (unused)", err);
  }
  Spec l = llama_spec();  // Llama 3.1's rope_scaling, transformers 4.x layout
  l.cfg["rope_parameters"] = "";
  l.cfg["rope_theta"] = "500000.0";
  l.cfg["rope_scaling"] =
      "{\"factor\": 8.0, \"low_freq_factor\": 1.0, \"high_freq_factor\": 4.0, "
      "\"original_max_position_embeddings\": 8192, \"rope_type\": \"llama3\"}";
  {
    const std::string dir = write_test_model("a_llama31", l);
    HfModel m;
    Config c;
    const int rc = m.open(dir, 2, 8192, &c, &err);
    const auto want = llama3_inv_freq(128, 500000.0, 8.0, 1.0, 4.0, 8192.0);
    expect(rc == 0 && c.rope_inv_freq == want, "accepted: Llama 3.1 rope_scaling llama3, its table in Config", err);
  }
  // The table itself: high frequencies as they are, low ones divided by the
  // factor, the band between smoothed (transformers: bit-identical, checked
  // against torch 2.15 / transformers 5.24 when written).
  const auto t = llama3_inv_freq(128, 500000.0, 8.0, 1.0, 4.0, 8192.0);
  bool ok = t.size() == 64 && t[0] == 1.0f;
  int high = 0, low = 0, mid = 0;
  for (int i = 0; i < 64; i++) {
    const float inv = 1.0f / powf(500000.f, (float)(2 * i) / 128.f);
    const double wavelen = 2 * M_PI / inv;
    if (wavelen < 8192.0 / 4) ok &= t[i] == inv, high++;
    else if (wavelen > 8192.0) ok &= t[i] == inv / 8.f, low++;
    else ok &= t[i] < inv && t[i] > inv / 8.f, mid++;
  }
  expect(ok && high > 0 && low > 0 && mid > 0,
         "llama3_inv_freq: " + std::to_string(high) + " high kept, " + std::to_string(low) + " low / 8, " +
             std::to_string(mid) + " smoothed in between");
  // Values transformers 5.24 computes (_compute_llama3_parameters, torch 2.15
  // on a CPU), bit for bit: i = 20 (kept), 45 (smoothed), 63 (divided).
  expect(t[20] == 0x1.0f5386p-6f && t[45] == 0x1.9ca3eap-17f && t[63] == 0x1.4985fep-22f,
         "llama3_inv_freq: i = 20, 45, 63 equal transformers' bits");
}

}  // namespace

int main() {
  g_root = temp_root("hf_test");
  test_json();
  test_json_cursor();
  test_input_files();
  test_conversions();
  test_safetensors();
  test_safetensors_broken();
  test_checkpoint_files();
  test_shards();
  test_refusals();
  test_refusals_config();
  test_refusals_bounds();
  test_accepted();
  remove_tree(g_root);
  std::printf("hf_test: %d passed, %d failed\n", g_pass, g_fail);
  return g_fail ? 1 : 0;
}
