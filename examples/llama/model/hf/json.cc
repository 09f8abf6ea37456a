// json.cc - json.h's reader: a cursor over the text (one function per token
// kind, the position kept for messages), and the tree built on it. Nesting
// is bounded (max_depth), so a hostile file cannot exhaust the stack, and
// so is the tree (max_values), so it cannot exhaust memory either.
#include "examples/llama/model/hf/json.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "examples/llama/model/input_file.h"

namespace llama {
namespace {

// "line L, column C" of offset at (1-based; columns count bytes).
std::string where(const std::string &s, size_t at) {
  size_t line = 1, col = 1;
  for (size_t k = 0; k < at && k < s.size(); k++) {
    if (s[k] == '\n') {
      line++;
      col = 1;
    } else {
      col++;
    }
  }
  return "line " + std::to_string(line) + ", column " + std::to_string(col);
}

// Code point cp as UTF-8 into b; its length.
size_t utf8(unsigned cp, char *b) {
  if (cp < 0x80) {
    b[0] = (char)cp;
    return 1;
  }
  if (cp < 0x800) {
    b[0] = (char)(0xc0 | cp >> 6);
    b[1] = (char)(0x80 | (cp & 0x3f));
    return 2;
  }
  if (cp < 0x10000) {
    b[0] = (char)(0xe0 | cp >> 12);
    b[1] = (char)(0x80 | (cp >> 6 & 0x3f));
    b[2] = (char)(0x80 | (cp & 0x3f));
    return 3;
  }
  b[0] = (char)(0xf0 | cp >> 18);
  b[1] = (char)(0x80 | (cp >> 12 & 0x3f));
  b[2] = (char)(0x80 | (cp >> 6 & 0x3f));
  b[3] = (char)(0x80 | (cp & 0x3f));
  return 4;
}

}  // namespace

const char *Json::kind_name(Kind k) {
  switch (k) {
    case NUL: return "null";
    case BOOL: return "a bool";
    case NUMBER: return "a number";
    case STRING: return "a string";
    case ARRAY: return "an array";
    case OBJECT: return "an object";
  }
  return "?";
}

const char *Json::kind_name() const { return kind_name(kind); }

const Json *Json::get(const std::string &key) const {
  if (kind != OBJECT) return nullptr;
  for (const auto &m : members)
    if (m.first == key) return &m.second;
  return nullptr;
}

bool json_uint64(const JsonNumber &n, uint64_t *out) {
  if (!n.integer || n.text.empty() || n.text[0] == '-') return false;
  uint64_t v = 0;
  for (char c : n.text) {
    const uint64_t d = (uint64_t)(c - '0');
    if (v > (UINT64_MAX - d) / 10) return false;
    v = v * 10 + d;
  }
  *out = v;
  return true;
}

// ------------------------------------------------------------ the cursor

bool JsonCursor::fail(size_t at, const std::string &what) {
  if (err_.empty()) err_ = where(s_, at) + ": " + what;
  return false;
}

// What is at offset at, for messages: "'x'", "byte 0x07", "the end of the text".
std::string JsonCursor::seen(size_t at) const {
  if (at >= s_.size()) return "the end of the text";
  const unsigned char ch = (unsigned char)s_[at];
  if (ch >= 0x20 && ch < 0x7f) return std::string("'") + (char)ch + "'";
  char b[16];
  std::snprintf(b, sizeof b, "byte 0x%02x", ch);
  return b;
}

void JsonCursor::ws() {
  while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\n' || s_[i_] == '\r')) i_++;
}

size_t JsonCursor::pos() {
  ws();
  return i_;
}

bool JsonCursor::literal(const char *word) {
  const size_t n = std::strlen(word);
  if (s_.compare(i_, n, word) != 0) return false;
  i_ += n;
  return true;
}

bool JsonCursor::peek(Json::Kind *kind) {
  if (!err_.empty()) return false;
  if (i_ == 0 && s_.compare(0, 3, "\xef\xbb\xbf") == 0)
    return fail(0, "a UTF-8 byte-order mark (not allowed in JSON)");
  ws();
  if (i_ >= s_.size()) return fail(i_, "expected a value, found the end of the text");
  const char ch = s_[i_];
  if (ch == '{') *kind = Json::OBJECT;
  else if (ch == '[') *kind = Json::ARRAY;
  else if (ch == '"') *kind = Json::STRING;
  else if (ch == '-' || (ch >= '0' && ch <= '9')) *kind = Json::NUMBER;
  else if (ch == 't' || ch == 'f') *kind = Json::BOOL;
  else if (ch == 'n') *kind = Json::NUL;
  else if (s_.compare(i_, 3, "NaN") == 0 || s_.compare(i_, 8, "Infinity") == 0)
    return fail(i_, "'" + std::string(ch == 'N' ? "NaN" : "Infinity") +
                        "' is not JSON (Python's json.dumps writes it for a non-finite float)");
  else return fail(i_, "expected a value, found " + seen(i_));
  return true;
}

bool JsonCursor::enter_object() {
  if (!err_.empty()) return false;
  ws();
  if (i_ >= s_.size() || s_[i_] != '{') return fail(i_, "expected an object, found " + seen(i_));
  if ((int)first_.size() >= max_depth_) return fail(i_, "nested deeper than " + std::to_string(max_depth_));
  i_++;
  first_.push_back(true);
  return true;
}

bool JsonCursor::enter_array() {
  if (!err_.empty()) return false;
  ws();
  if (i_ >= s_.size() || s_[i_] != '[') return fail(i_, "expected an array, found " + seen(i_));
  if ((int)first_.size() >= max_depth_) return fail(i_, "nested deeper than " + std::to_string(max_depth_));
  i_++;
  first_.push_back(true);
  return true;
}

// The closing brace or bracket at i_: the object or array ends.
bool JsonCursor::close() {
  i_++;
  first_.pop_back();
  return true;
}

bool JsonCursor::next_key(std::string *key, bool *end) {
  if (!err_.empty() || first_.empty()) return false;
  ws();
  *end = false;
  if (first_.back()) {
    if (i_ < s_.size() && s_[i_] == '}') return *end = true, close();
  } else if (i_ < s_.size() && s_[i_] == '}') {
    return *end = true, close();
  } else if (i_ < s_.size() && s_[i_] == ',') {
    i_++;
    ws();
  } else {
    return fail(i_, "expected ',' or '}' in an object, found " + seen(i_));
  }
  first_.back() = false;
  if (i_ >= s_.size() || s_[i_] != '"') return fail(i_, "expected a key (a string), found " + seen(i_));
  key_at_ = i_;
  if (key) key->clear();
  if (!expect_string(key)) return false;
  ws();
  if (i_ >= s_.size() || s_[i_] != ':')
    return fail(i_, "expected ':' after the key" + (key ? " \"" + printable(*key) + "\"" : std::string()) + ", found " +
                        seen(i_));
  i_++;
  return true;
}

bool JsonCursor::next_item(bool *end) {
  if (!err_.empty() || first_.empty()) return false;
  ws();
  *end = false;
  if (first_.back()) {
    if (i_ < s_.size() && s_[i_] == ']') return *end = true, close();
  } else if (i_ < s_.size() && s_[i_] == ']') {
    return *end = true, close();
  } else if (i_ < s_.size() && s_[i_] == ',') {
    i_++;
  } else {
    return fail(i_, "expected ',' or ']' in an array, found " + seen(i_));
  }
  first_.back() = false;
  return true;
}

bool JsonCursor::boolean(bool *out) {
  if (!err_.empty()) return false;
  ws();
  const size_t at = i_;
  if (literal("true") || literal("false")) {
    *out = s_[at] == 't';
    return true;
  }
  return fail(at, "expected a value, found " + seen(at));
}

bool JsonCursor::null() {
  if (!err_.empty()) return false;
  ws();
  const size_t at = i_;
  return literal("null") ? true : fail(at, "expected a value, found " + seen(at));
}

// -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?, then strtod on exactly
// that text (the C locale's decimal point: the engine never changes locale).
bool JsonCursor::number(JsonNumber *out) {
  if (!err_.empty()) return false;
  ws();
  const size_t at = i_;
  auto digits = [&] {
    const size_t from = i_;
    while (i_ < s_.size() && s_[i_] >= '0' && s_[i_] <= '9') i_++;
    return i_ > from;
  };
  if (i_ < s_.size() && s_[i_] == '-') i_++;
  if (i_ < s_.size() && s_[i_] == '0') {
    i_++;
    if (i_ < s_.size() && s_[i_] >= '0' && s_[i_] <= '9') return fail(at, "a number may not start with 0");
  } else if (!digits()) {
    return fail(i_, "expected a digit, found " + seen(i_));
  }
  bool integer = true;
  if (i_ < s_.size() && s_[i_] == '.') {
    i_++;
    integer = false;
    if (!digits()) return fail(i_, "expected a digit after '.', found " + seen(i_));
  }
  if (i_ < s_.size() && (s_[i_] == 'e' || s_[i_] == 'E')) {
    i_++;
    integer = false;
    if (i_ < s_.size() && (s_[i_] == '+' || s_[i_] == '-')) i_++;
    if (!digits()) return fail(i_, "expected a digit in the exponent, found " + seen(i_));
  }
  out->text.assign(s_, at, i_ - at);
  const double v = std::strtod(out->text.c_str(), nullptr);
  if (!std::isfinite(v)) return fail(at, "number " + out->text + " is out of range");
  out->value = v;
  out->integer = integer;
  return true;
}

bool JsonCursor::hex4(unsigned *u) {
  *u = 0;
  for (int k = 0; k < 4; k++, i_++) {
    const char c = i_ < s_.size() ? s_[i_] : '\0';
    const int d = c >= '0' && c <= '9'   ? c - '0'
                  : c >= 'a' && c <= 'f' ? c - 'a' + 10
                  : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                         : -1;
    if (d < 0) return fail(i_, "expected a hex digit in \\u, found " + seen(i_));
    *u = *u * 16 + (unsigned)d;
  }
  return true;
}

// One UTF-8 sequence starting at i_ (its first byte >= 0x80), copied to o:
// shortest form, no surrogates, at most U+10FFFF.
bool JsonCursor::utf8_seq(std::string *o) {
  const size_t at = i_;
  const unsigned char b0 = (unsigned char)s_[i_];
  int n;
  unsigned cp, lo;
  if (b0 >= 0xc2 && b0 <= 0xdf) n = 1, cp = b0 & 0x1f, lo = 0x80;
  else if (b0 >= 0xe0 && b0 <= 0xef) n = 2, cp = b0 & 0x0f, lo = 0x800;
  else if (b0 >= 0xf0 && b0 <= 0xf4) n = 3, cp = b0 & 0x07, lo = 0x10000;
  else return fail(at, "invalid UTF-8 (" + seen(at) + ")");
  if (i_ + n >= s_.size()) return fail(at, "invalid UTF-8 (a sequence cut short)");
  for (int k = 1; k <= n; k++) {
    const unsigned char b = (unsigned char)s_[i_ + k];
    if ((b & 0xc0) != 0x80) return fail(i_ + k, "invalid UTF-8 (" + seen(i_ + k) + " inside a sequence)");
    cp = cp << 6 | (b & 0x3f);
  }
  if (cp < lo || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
    return fail(at, "invalid UTF-8 (an overlong form, a surrogate or beyond U+10FFFF)");
  i_ += n + 1;
  return add(o, &s_[at], n + 1, at);
}

// Appends n bytes to o (nothing when o is null: the string is only
// checked), refusing a string that grows past max_string.
bool JsonCursor::add(std::string *o, const char *p, size_t n, size_t at) {
  if (!o) return true;
  if (o->size() + n > max_string_) return fail(at, "a string longer than " + std::to_string(max_string_) + " bytes");
  o->append(p, n);
  return true;
}

bool JsonCursor::string(std::string *out) {
  if (!err_.empty()) return false;
  ws();
  if (i_ >= s_.size() || s_[i_] != '"') return fail(i_, "expected a string, found " + seen(i_));
  if (out) out->clear();
  return expect_string(out);
}

// The string at i_ (its opening quote), decoded into o (or only checked).
bool JsonCursor::expect_string(std::string *o) {
  const size_t at = i_;
  i_++;  // '"'
  for (;;) {
    // The plain run up to the next quote, backslash, control or non-ASCII byte, at once.
    const size_t run = i_;
    while (i_ < s_.size()) {
      const unsigned char ch = (unsigned char)s_[i_];
      if (ch == '"' || ch == '\\' || ch < 0x20 || ch >= 0x80) break;
      i_++;
    }
    if (!add(o, &s_[0] + run, i_ - run, at)) return false;
    if (i_ >= s_.size()) return fail(at, "a string that never ends");
    const unsigned char ch = (unsigned char)s_[i_];
    if (ch == '"') {
      i_++;
      return true;
    }
    if (ch < 0x20) return fail(i_, "a control character (" + seen(i_) + ") in a string: write it as an escape");
    if (ch >= 0x80) {
      if (!utf8_seq(o)) return false;
      continue;
    }
    const size_t esc = i_++;  // a backslash
    if (i_ >= s_.size()) return fail(esc, "a string that never ends");
    const char e = s_[i_++];
    char b[4];
    size_t n = 1;
    switch (e) {
      case '"': b[0] = '"'; break;
      case '\\': b[0] = '\\'; break;
      case '/': b[0] = '/'; break;
      case 'b': b[0] = '\b'; break;
      case 'f': b[0] = '\f'; break;
      case 'n': b[0] = '\n'; break;
      case 'r': b[0] = '\r'; break;
      case 't': b[0] = '\t'; break;
      case 'u': {
        unsigned u;
        if (!hex4(&u)) return false;
        if (u >= 0xdc00 && u <= 0xdfff) return fail(esc, "a lone low surrogate \\u escape");
        if (u >= 0xd800 && u <= 0xdbff) {  // a high surrogate: its low half must follow
          unsigned v;
          if (s_.compare(i_, 2, "\\u") != 0) return fail(esc, "a high surrogate \\u escape without its low half");
          i_ += 2;
          if (!hex4(&v)) return false;
          if (v < 0xdc00 || v > 0xdfff) return fail(esc, "a high surrogate \\u escape without its low half");
          u = 0x10000 + ((u - 0xd800) << 10) + (v - 0xdc00);
        }
        n = utf8(u, b);
        break;
      }
      default: return fail(esc, "unknown escape: " + seen(esc + 1) + " after a backslash");
    }
    if (!add(o, b, n, at)) return false;
  }
}

bool JsonCursor::skip() {
  Json::Kind k;
  if (!peek(&k)) return false;
  bool end = false, b;
  JsonNumber n;
  switch (k) {
    case Json::OBJECT:
      if (!enter_object()) return false;
      while (next_key(nullptr, &end) && !end)
        if (!skip()) return false;
      return err_.empty();
    case Json::ARRAY:
      if (!enter_array()) return false;
      while (next_item(&end) && !end)
        if (!skip()) return false;
      return err_.empty();
    case Json::STRING: return string(nullptr);
    case Json::NUMBER: return number(&n);
    case Json::BOOL: return boolean(&b);
    case Json::NUL: return null();
  }
  return false;
}

bool JsonCursor::finish() {
  if (!err_.empty()) return false;
  ws();
  return i_ == s_.size() ? true : fail(i_, "unexpected " + seen(i_) + " after the value");
}

// ------------------------------------------------------------ the tree

namespace {

struct Builder {
  JsonCursor &c;
  size_t budget;
  const size_t max;

  bool count() {
    if (budget == 0) return c.fail(c.pos(), "more than " + std::to_string(max) + " values (keys count one each)");
    budget--;
    return true;
  }

  // Keys must be unique: each object's keys sorted once (n log n, not a
  // scan per key), the first repeat in file order reported.
  bool unique_keys(const Json &o, const std::vector<size_t> &at) {
    const size_t n = o.members.size();
    if (n < 2) return true;
    std::vector<uint32_t> idx(n);
    for (size_t k = 0; k < n; k++) idx[k] = (uint32_t)k;
    std::sort(idx.begin(), idx.end(), [&](uint32_t a, uint32_t b) {
      const int cmp = o.members[a].first.compare(o.members[b].first);
      return cmp < 0 || (cmp == 0 && a < b);
    });
    size_t dup = n;
    for (size_t k = 1; k < n; k++)
      if (o.members[idx[k]].first == o.members[idx[k - 1]].first) dup = std::min<size_t>(dup, idx[k]);
    if (dup == n) return true;
    return c.fail(at[dup], "duplicate key \"" + printable(o.members[dup].first) + "\"");
  }

  bool value(Json *out) {
    Json::Kind k;
    if (!count() || !c.peek(&k)) return false;
    out->kind = k;
    bool end = false;
    switch (k) {
      case Json::OBJECT: {
        std::vector<size_t> at;
        std::string key;
        if (!c.enter_object()) return false;
        while (c.next_key(&key, &end) && !end) {
          at.push_back(c.key_at());
          out->members.emplace_back(std::move(key), Json());
          if (!count() || !value(&out->members.back().second)) return false;
        }
        return c.error().empty() && unique_keys(*out, at);
      }
      case Json::ARRAY:
        if (!c.enter_array()) return false;
        while (c.next_item(&end) && !end) {
          out->items.emplace_back();
          if (!value(&out->items.back())) return false;
        }
        return c.error().empty();
      case Json::STRING: return c.string(&out->string);
      case Json::NUMBER: {
        JsonNumber n;
        if (!c.number(&n)) return false;
        out->number = n.value;
        out->integer = n.integer;
        return true;
      }
      case Json::BOOL: return c.boolean(&out->boolean);
      case Json::NUL: return c.null();
    }
    return false;
  }
};

}  // namespace

int json_parse(const std::string &text, Json *out, std::string *err, size_t max_values) {
  *out = Json();
  JsonCursor c(text);
  Builder b{c, max_values, max_values};
  if (!b.value(out) || !c.finish()) {
    *err = c.error();
    *out = Json();
    return 1;
  }
  return 0;
}

int json_read_file(const std::string &path, size_t cap, size_t max_values, Json *out, std::string *err) {
  std::string text;
  if (read_input_file(path, cap, &text, err)) return 1;
  if (json_parse(text, out, err, max_values)) {
    *err = path + ": " + *err;
    return 1;
  }
  return 0;
}

}  // namespace llama
