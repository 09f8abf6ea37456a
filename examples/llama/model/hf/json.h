// json.h - a small, strict JSON reader for the files of a Hugging Face model
// directory (config.json, model.safetensors.index.json, safetensors headers).
//
// Why our own: the engine takes no third-party dependency, and these files
// are small. Strict (RFC 8259) because a file this reader half-understands
// would give a model that is silently wrong: a value with anything after it,
// a duplicate key, a control character in a string, invalid UTF-8, a lone
// surrogate, NaN / Infinity (which Python's json.dumps can write) and nesting
// deeper than 128 are all refused with "line L, column C: what".
//
// Two ways in, one grammar: JsonCursor walks a document value by value and
// keeps nothing (the safetensors header and the index are read through it
// straight into their tables, so a hostile file of a million keys costs no
// more memory than its text); json_parse builds a Json tree for a small file
// (config.json), refusing more than a given number of values. Both run in
// time linear in the text: the duplicate-key check sorts each object's keys
// once, and a message's line and column are counted only when one is made.
#ifndef LLAMA_MODEL_JSON_H
#define LLAMA_MODEL_JSON_H

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace llama {

struct Json {
  enum Kind { NUL, BOOL, NUMBER, STRING, ARRAY, OBJECT };
  Kind kind = NUL;
  bool boolean = false;
  double number = 0;  // every JSON number; integers are exact up to 2^53
  bool integer = false;  // the literal had neither a fraction nor an exponent
  std::string string;    // UTF-8
  std::vector<Json> items;                            // ARRAY
  std::vector<std::pair<std::string, Json>> members;  // OBJECT, in file order, keys unique

  // The member `key` of an object, or null (also when this is no object).
  const Json *get(const std::string &key) const;
  // "null", "a bool", "a number", "a string", "an array", "an object".
  const char *kind_name() const;
  static const char *kind_name(Kind k);
};

// A number as the cursor read it: its value, whether the literal was an
// integer (no fraction, no exponent), and the literal itself.
struct JsonNumber {
  double value = 0;
  bool integer = false;
  std::string text;
};

// The text's literal of a non-negative integer as a uint64_t, exactly: false
// for a sign, a fraction, an exponent or a value above 2^64 - 1.
bool json_uint64(const JsonNumber &n, uint64_t *out);

// One document, value by value. Every call skips whitespace first, consumes
// what it names and returns false on anything else, with error() set to
// "line L, column C: what" (calls after a failure keep failing).
class JsonCursor {
 public:
  // Strings (keys included) longer than max_string bytes are refused as
  // they are read, so a hostile key costs no more memory than that.
  explicit JsonCursor(const std::string &text, int max_depth = 128, size_t max_string = SIZE_MAX)
      : s_(text), max_depth_(max_depth), max_string_(max_string) {}
  // The cursor reads the caller's text in place: never a temporary.
  JsonCursor(std::string &&, int = 128, size_t = SIZE_MAX) = delete;
  // The kind of the next value, not consumed.
  bool peek(Json::Kind *kind);
  // '{' (or '['): the start of an object (array), counted against the depth.
  bool enter_object();
  bool enter_array();
  // Inside an object: the next key and its ':' (*end false), or the object's
  // closing brace (*end true). Commas between members are the cursor's. A
  // null key (or out, below) checks the string without keeping it.
  bool next_key(std::string *key, bool *end);
  // Where the last key next_key read starts (its quote), for messages.
  size_t key_at() const { return key_at_; }
  // Inside an array: whether another item follows (*end false) or ']'.
  bool next_item(bool *end);
  bool string(std::string *out);
  bool number(JsonNumber *out);
  bool boolean(bool *out);
  bool null();
  // One value of any kind, checked and dropped.
  bool skip();
  // Nothing but whitespace left.
  bool finish();
  // Where the next token starts (after whitespace), for messages.
  size_t pos();
  // Sets the error at offset `at` ("line L, column C: what"); returns false.
  bool fail(size_t at, const std::string &what);
  const std::string &error() const { return err_; }

 private:
  bool expect_string(std::string *o);
  bool add(std::string *o, const char *p, size_t n, size_t at);
  bool utf8_seq(std::string *o);
  bool hex4(unsigned *u);
  bool literal(const char *word);
  bool close();
  std::string seen(size_t at) const;
  void ws();

  const std::string &s_;
  size_t i_ = 0, key_at_ = 0;
  int max_depth_;
  size_t max_string_;
  std::vector<bool> first_;  // per open object or array: no member or item read yet
  std::string err_;
};

// Parses a whole document (one value, whitespace around it) of at most
// max_values values (each key, scalar, array and object counts one). 0 on
// success; otherwise 1 and *err = "line L, column C: what was wrong".
int json_parse(const std::string &text, Json *out, std::string *err, size_t max_values = 1u << 16);

// Reads (input_file.h: a regular file of at most cap bytes) and parses a
// file; errors start with its path.
int json_read_file(const std::string &path, size_t cap, size_t max_values, Json *out, std::string *err);

}  // namespace llama

#endif
