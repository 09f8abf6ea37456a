// json.h - a small, strict JSON reader for the files of a Hugging Face model
// directory (config.json, model.safetensors.index.json, safetensors headers).
//
// Why our own: the engine takes no third-party dependency, and these files
// are small. Strict (RFC 8259) because a file this reader half-understands
// would give a model that is silently wrong: a value with anything after it,
// a duplicate key, a control character in a string, invalid UTF-8, a lone
// surrogate, NaN / Infinity (which Python's json.dumps can write) and nesting
// deeper than 128 are all refused with "line L, column C: what".
#ifndef LLAMA_MODEL_JSON_H
#define LLAMA_MODEL_JSON_H

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
};

// Parses a whole document (one value, whitespace around it). 0 on success;
// otherwise 1 and *err = "line L, column C: what was wrong".
int json_parse(const std::string &text, Json *out, std::string *err);

// Reads and parses a file; errors start with its path.
int json_read_file(const std::string &path, Json *out, std::string *err);

}  // namespace llama

#endif
