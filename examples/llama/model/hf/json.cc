// json.cc - json.h's reader: recursive descent over the text, one function
// per value kind, the position kept for messages. Recursion is bounded
// (kMaxDepth), so a hostile file cannot exhaust the stack.
#include "examples/llama/model/hf/json.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

namespace llama {
namespace {

constexpr int kMaxDepth = 128;

struct Parser {
  const std::string &s;
  size_t i = 0;
  std::string *err;

  // "line L, column C" of offset at (1-based; columns count bytes).
  std::string where(size_t at) const {
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
  bool fail(size_t at, const std::string &what) {
    *err = where(at) + ": " + what;
    return false;
  }
  // What is at offset at, for messages: "'x'", "byte 0x07", "the end of the text".
  std::string seen(size_t at) const {
    if (at >= s.size()) return "the end of the text";
    const unsigned char ch = (unsigned char)s[at];
    if (ch >= 0x20 && ch < 0x7f) return std::string("'") + (char)ch + "'";
    char b[16];
    std::snprintf(b, sizeof b, "byte 0x%02x", ch);
    return b;
  }
  void ws() {
    while (i < s.size() && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r')) i++;
  }
  bool literal(const char *word) {
    const size_t n = std::strlen(word);
    if (s.compare(i, n, word) != 0) return false;
    i += n;
    return true;
  }

  bool value(Json *out, int depth) {
    ws();
    if (i >= s.size()) return fail(i, "expected a value, found the end of the text");
    const char ch = s[i];
    if (ch == '{') return object(out, depth);
    if (ch == '[') return array(out, depth);
    if (ch == '"') {
      out->kind = Json::STRING;
      return string(&out->string);
    }
    if (ch == '-' || (ch >= '0' && ch <= '9')) return number(out);
    const size_t at = i;
    if (literal("true") || literal("false")) {
      out->kind = Json::BOOL;
      out->boolean = s[at] == 't';
      return true;
    }
    if (literal("null")) {
      out->kind = Json::NUL;
      return true;
    }
    if (literal("NaN") || literal("Infinity"))
      return fail(at, "'" + s.substr(at, i - at) + "' is not JSON (Python's json.dumps writes it for a non-finite float)");
    return fail(at, "expected a value, found " + seen(at));
  }

  bool object(Json *out, int depth) {
    if (depth >= kMaxDepth) return fail(i, "nested deeper than " + std::to_string(kMaxDepth));
    out->kind = Json::OBJECT;
    i++;  // '{'
    ws();
    if (i < s.size() && s[i] == '}') {
      i++;
      return true;
    }
    for (;;) {
      ws();
      if (i >= s.size() || s[i] != '"') return fail(i, "expected a key (a string), found " + seen(i));
      const size_t key_at = i;
      std::string key;
      if (!string(&key)) return false;
      for (const auto &m : out->members)
        if (m.first == key) return fail(key_at, "duplicate key \"" + key + "\"");
      ws();
      if (i >= s.size() || s[i] != ':') return fail(i, "expected ':' after the key \"" + key + "\", found " + seen(i));
      i++;
      out->members.emplace_back(key, Json());
      if (!value(&out->members.back().second, depth + 1)) return false;
      ws();
      if (i < s.size() && s[i] == ',') {
        i++;
        continue;
      }
      if (i < s.size() && s[i] == '}') {
        i++;
        return true;
      }
      return fail(i, "expected ',' or '}' in an object, found " + seen(i));
    }
  }

  bool array(Json *out, int depth) {
    if (depth >= kMaxDepth) return fail(i, "nested deeper than " + std::to_string(kMaxDepth));
    out->kind = Json::ARRAY;
    i++;  // '['
    ws();
    if (i < s.size() && s[i] == ']') {
      i++;
      return true;
    }
    for (;;) {
      out->items.emplace_back();
      if (!value(&out->items.back(), depth + 1)) return false;
      ws();
      if (i < s.size() && s[i] == ',') {
        i++;
        continue;
      }
      if (i < s.size() && s[i] == ']') {
        i++;
        return true;
      }
      return fail(i, "expected ',' or ']' in an array, found " + seen(i));
    }
  }

  bool digits(size_t *n) {
    const size_t at = i;
    while (i < s.size() && s[i] >= '0' && s[i] <= '9') i++;
    *n = i - at;
    return *n > 0;
  }

  // -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?, then strtod on exactly
  // that text (the C locale's decimal point: the engine never changes locale).
  bool number(Json *out) {
    const size_t at = i;
    size_t n;
    if (s[i] == '-') i++;
    if (i < s.size() && s[i] == '0') {
      i++;
      if (i < s.size() && s[i] >= '0' && s[i] <= '9') return fail(at, "a number may not start with 0");
    } else if (!digits(&n)) {
      return fail(i, "expected a digit, found " + seen(i));
    }
    bool integer = true;
    if (i < s.size() && s[i] == '.') {
      i++;
      integer = false;
      if (!digits(&n)) return fail(i, "expected a digit after '.', found " + seen(i));
    }
    if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
      i++;
      integer = false;
      if (i < s.size() && (s[i] == '+' || s[i] == '-')) i++;
      if (!digits(&n)) return fail(i, "expected a digit in the exponent, found " + seen(i));
    }
    const std::string text = s.substr(at, i - at);
    errno = 0;
    const double v = std::strtod(text.c_str(), nullptr);
    if (!std::isfinite(v)) return fail(at, "number " + text + " is out of range");
    out->kind = Json::NUMBER;
    out->number = v;
    out->integer = integer;
    return true;
  }

  bool hex4(unsigned *u) {
    *u = 0;
    for (int k = 0; k < 4; k++, i++) {
      const char c = i < s.size() ? s[i] : '\0';
      const int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
      if (d < 0) return fail(i, "expected a hex digit in \\u, found " + seen(i));
      *u = *u * 16 + (unsigned)d;
    }
    return true;
  }
  static void utf8(unsigned cp, std::string *o) {
    if (cp < 0x80) {
      *o += (char)cp;
    } else if (cp < 0x800) {
      *o += (char)(0xc0 | cp >> 6);
      *o += (char)(0x80 | (cp & 0x3f));
    } else if (cp < 0x10000) {
      *o += (char)(0xe0 | cp >> 12);
      *o += (char)(0x80 | (cp >> 6 & 0x3f));
      *o += (char)(0x80 | (cp & 0x3f));
    } else {
      *o += (char)(0xf0 | cp >> 18);
      *o += (char)(0x80 | (cp >> 12 & 0x3f));
      *o += (char)(0x80 | (cp >> 6 & 0x3f));
      *o += (char)(0x80 | (cp & 0x3f));
    }
  }
  // One UTF-8 sequence starting at i (its first byte >= 0x80), copied to o:
  // shortest form, no surrogates, at most U+10FFFF.
  bool utf8_seq(std::string *o) {
    const size_t at = i;
    const unsigned char b0 = (unsigned char)s[i];
    int n;
    unsigned cp, lo;
    if (b0 >= 0xc2 && b0 <= 0xdf) n = 1, cp = b0 & 0x1f, lo = 0x80;
    else if (b0 >= 0xe0 && b0 <= 0xef) n = 2, cp = b0 & 0x0f, lo = 0x800;
    else if (b0 >= 0xf0 && b0 <= 0xf4) n = 3, cp = b0 & 0x07, lo = 0x10000;
    else return fail(at, "invalid UTF-8 (" + seen(at) + ")");
    if (i + n >= s.size()) return fail(at, "invalid UTF-8 (a sequence cut short)");
    for (int k = 1; k <= n; k++) {
      const unsigned char b = (unsigned char)s[i + k];
      if ((b & 0xc0) != 0x80) return fail(i + k, "invalid UTF-8 (" + seen(i + k) + " inside a sequence)");
      cp = cp << 6 | (b & 0x3f);
    }
    if (cp < lo || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
      return fail(at, "invalid UTF-8 (an overlong form, a surrogate or beyond U+10FFFF)");
    o->append(s, i, n + 1);
    i += n + 1;
    return true;
  }

  bool string(std::string *o) {
    const size_t at = i;
    i++;  // '"'
    for (;;) {
      if (i >= s.size()) return fail(at, "a string that never ends");
      const unsigned char ch = (unsigned char)s[i];
      if (ch == '"') {
        i++;
        return true;
      }
      if (ch < 0x20) return fail(i, "a control character (" + seen(i) + ") in a string: write it as an escape");
      if (ch >= 0x80) {
        if (!utf8_seq(o)) return false;
        continue;
      }
      if (ch != '\\') {
        *o += (char)ch;
        i++;
        continue;
      }
      const size_t esc = i++;
      if (i >= s.size()) return fail(esc, "a string that never ends");
      const char e = s[i++];
      switch (e) {
        case '"': *o += '"'; break;
        case '\\': *o += '\\'; break;
        case '/': *o += '/'; break;
        case 'b': *o += '\b'; break;
        case 'f': *o += '\f'; break;
        case 'n': *o += '\n'; break;
        case 'r': *o += '\r'; break;
        case 't': *o += '\t'; break;
        case 'u': {
          unsigned u;
          if (!hex4(&u)) return false;
          if (u >= 0xdc00 && u <= 0xdfff) return fail(esc, "a lone low surrogate \\u escape");
          if (u >= 0xd800 && u <= 0xdbff) {  // a high surrogate: its low half must follow
            unsigned v;
            if (s.compare(i, 2, "\\u") != 0) return fail(esc, "a high surrogate \\u escape without its low half");
            i += 2;
            if (!hex4(&v)) return false;
            if (v < 0xdc00 || v > 0xdfff) return fail(esc, "a high surrogate \\u escape without its low half");
            u = 0x10000 + ((u - 0xd800) << 10) + (v - 0xdc00);
          }
          utf8(u, o);
          break;
        }
        default: return fail(esc, "unknown escape: " + seen(esc + 1) + " after a backslash");
      }
    }
  }
};

}  // namespace

const Json *Json::get(const std::string &key) const {
  if (kind != OBJECT) return nullptr;
  for (const auto &m : members)
    if (m.first == key) return &m.second;
  return nullptr;
}

const char *Json::kind_name() const {
  switch (kind) {
    case NUL: return "null";
    case BOOL: return "a bool";
    case NUMBER: return "a number";
    case STRING: return "a string";
    case ARRAY: return "an array";
    case OBJECT: return "an object";
  }
  return "?";
}

int json_parse(const std::string &text, Json *out, std::string *err) {
  *out = Json();
  Parser p{text, 0, err};
  if (text.compare(0, 3, "\xef\xbb\xbf") == 0) {
    *err = "line 1, column 1: a UTF-8 byte-order mark (not allowed in JSON)";
    return 1;
  }
  if (!p.value(out, 0)) {
    *out = Json();
    return 1;
  }
  p.ws();
  if (p.i != text.size()) {
    p.fail(p.i, "unexpected " + p.seen(p.i) + " after the value");
    *out = Json();
    return 1;
  }
  return 0;
}

int json_read_file(const std::string &path, Json *out, std::string *err) {
  std::ifstream f(path, std::ios::binary);
  if (!f) {
    *err = path + ": cannot open (" + std::strerror(errno) + ")";
    return 1;
  }
  std::ostringstream ss;
  ss << f.rdbuf();
  if (f.bad()) {
    *err = path + ": read failed";
    return 1;
  }
  if (json_parse(ss.str(), out, err)) {
    *err = path + ": " + *err;
    return 1;
  }
  return 0;
}

}  // namespace llama
