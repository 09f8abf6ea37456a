// safetensors_header.cc - safetensors_header.h: one pass of the cursor, an
// entry at a time, then the entries sorted once by offset to check that
// they tile the data.
#include "examples/llama/model/hf/safetensors_header.h"

#include <algorithm>
#include <set>
#include <vector>

#include "examples/llama/model/hf/json.h"
#include "examples/llama/model/input_file.h"
#include "examples/llama/model/limits.h"

namespace llama {
namespace {

constexpr size_t kMaxRank = 16;
constexpr size_t kMaxMetadata = 4096;  // __metadata__ entries (writers put one: "format")
// Names, dtypes and metadata keys longer than this are refused as they are
// read (a tensor name is under 100 bytes); metadata values are checked
// without being kept, so they cost nothing whatever their length.
constexpr size_t kMaxString = 1u << 16;

// Bits per element of every dtype safetensors defines; 0: not one of them.
unsigned dtype_bits(const std::string &d) {
  static const struct {
    const char *name;
    unsigned bits;
  } table[] = {{"BOOL", 8},     {"F4", 4},       {"F6_E2M3", 6}, {"F6_E3M2", 6}, {"U8", 8},   {"I8", 8},
               {"F8_E5M2", 8},  {"F8_E4M3", 8},  {"F8_E8M0", 8}, {"I16", 16},    {"U16", 16}, {"F16", 16},
               {"BF16", 16},    {"I32", 32},     {"U32", 32},    {"F32", 32},    {"C64", 64}, {"F64", 64},
               {"I64", 64},     {"U64", 64}};
  for (const auto &t : table)
    if (d == t.name) return t.bits;
  return 0;
}

std::string u128_string(unsigned __int128 v) {
  std::string s;
  do {
    s.insert(s.begin(), (char)('0' + (int)(v % 10)));
    v /= 10;
  } while (v);
  return s;
}

std::string offsets_string(uint64_t b, uint64_t e) {
  return "[" + std::to_string(b) + ", " + std::to_string(e) + "]";
}

const char *const kEntry = ": expected {\"dtype\": string, \"shape\": [...], \"data_offsets\": [begin, end]}";

struct Reader {
  JsonCursor c;
  const std::string &path;
  std::string *err;

  bool refuse(const std::string &what) {
    *err = path + ": " + what;
    return false;
  }
  bool json() { return refuse("header: " + c.error()); }
  bool duplicate(const std::string &key) {
    c.fail(c.key_at(), "duplicate key \"" + printable(key) + "\"");
    return json();
  }
  // The next value must be of kind k; else "WHAT: expected WANT, got KIND".
  bool expect(Json::Kind k, const std::string &what, const std::string &want) {
    Json::Kind got;
    if (!c.peek(&got)) return json();
    return got == k || refuse(what + ": expected " + want + ", got " + Json::kind_name(got));
  }
  // An integer literal in [0, 2^63): what shapes and offsets are.
  bool integer(const std::string &what, uint64_t *v) {
    JsonNumber n;
    if (!expect(Json::NUMBER, what, "a non-negative integer")) return false;
    if (!c.number(&n)) return json();
    if (!json_uint64(n, v) || *v > (uint64_t)INT64_MAX)
      return refuse(what + ": expected a non-negative integer below 2^63, got " + n.text);
    return true;
  }

  bool metadata() {
    Json::Kind k;
    if (!c.peek(&k)) return json();
    if (k == Json::NUL) return c.null() || json();
    if (k != Json::OBJECT) return refuse(std::string("__metadata__: expected a map of strings, got ") + Json::kind_name(k));
    std::set<std::string> keys;
    std::string key;
    bool end = false;
    if (!c.enter_object()) return json();
    while (c.next_key(&key, &end) && !end) {
      if (keys.size() >= kMaxMetadata) return refuse("__metadata__: more than " + std::to_string(kMaxMetadata) + " entries");
      if (!keys.insert(key).second) return duplicate(key);
      if (!expect(Json::STRING, "__metadata__[\"" + printable(key) + "\"]", "a string")) return false;
      if (!c.string(nullptr)) return json();
    }
    return c.error().empty() || json();
  }

  bool shape(const std::string &at, TensorInfo *t) {
    bool end = false;
    if (!expect(Json::ARRAY, at + ": shape", "an array of integers") || !c.enter_array()) return c.error().empty() ? false : json();
    while (c.next_item(&end) && !end) {
      uint64_t v;
      if (t->shape.size() >= kMaxRank) return refuse(at + ": shape: more than " + std::to_string(kMaxRank) + " dimensions");
      if (!integer(at + ": shape[" + std::to_string(t->shape.size()) + "]", &v)) return false;
      t->shape.push_back((int64_t)v);
    }
    return c.error().empty() || json();
  }

  bool offsets(const std::string &at, uint64_t *b, uint64_t *e) {
    bool end = false;
    uint64_t v[3];
    int n = 0;
    if (!expect(Json::ARRAY, at + ": data_offsets", "[begin, end]") || !c.enter_array()) return c.error().empty() ? false : json();
    while (c.next_item(&end) && !end) {
      if (n == 2) return refuse(at + ": data_offsets: expected [begin, end], got more than two numbers");
      if (!integer(at + ": data_offsets[" + std::to_string(n) + "]", &v[n])) return false;
      n++;
    }
    if (!c.error().empty()) return json();
    if (n != 2) return refuse(at + ": data_offsets: expected [begin, end], got " + std::to_string(n) + " numbers");
    *b = v[0];
    *e = v[1];
    return true;
  }

  // The size shape x dtype must equal the offsets' span; the product is
  // formed in 128 bits, so the message says the true size.
  bool size(const std::string &at, unsigned bits, uint64_t b, uint64_t e, TensorInfo *t) {
    unsigned __int128 n = 1;
    bool huge = false;
    const unsigned __int128 cap = (unsigned __int128)1 << 100;
    for (int64_t d : t->shape) {  // checked before the product, which would wrap past 2^128
      if (d && n > cap / (uint64_t)d) huge = true, n = cap;
      else n *= (uint64_t)d;
    }
    const unsigned __int128 nbits = n * bits;
    if (!huge && nbits % 8)
      return refuse(at + ": " + t->dtype + " " + shape_string(t->shape) + " is " + u128_string(nbits) +
                    " bits, not a whole number of bytes");
    if (huge || nbits / 8 != e - b)
      return refuse(at + ": " + std::to_string(e - b) + " data bytes, but " + t->dtype + " " + shape_string(t->shape) +
                    " needs " + (huge ? "more than 2^100" : u128_string(nbits / 8)));
    return true;
  }

  bool entry(const std::string &name, uint64_t data_start, uint64_t data_len, TensorInfo *t) {
    const std::string at = "tensor " + printable(name);
    if (name.find('\0') != std::string::npos) return refuse(at + ": a NUL in the name");
    if (!expect(Json::OBJECT, at, std::string(kEntry + 11))) return false;
    unsigned seen = 0;
    uint64_t b = 0, e = 0;
    std::string key;
    bool end = false;
    if (!c.enter_object()) return json();
    while (c.next_key(&key, &end) && !end) {
      const unsigned bit = key == "dtype" ? 1 : key == "shape" ? 2 : key == "data_offsets" ? 4 : 0;
      if (!bit) return refuse(at + ": unknown field \"" + printable(key) + "\"" + kEntry);
      if (seen & bit) return duplicate(key);
      seen |= bit;
      if (bit == 1 && !(expect(Json::STRING, at + ": dtype", "a string") && (c.string(&t->dtype) || json())))
        return false;
      if ((bit == 2 && !shape(at, t)) || (bit == 4 && !offsets(at, &b, &e))) return false;
    }
    if (!c.error().empty()) return json();
    if (seen != 7)
      return refuse(at + kEntry + " (" + (seen & 1 ? "" : "dtype ") + (seen & 2 ? "" : "shape ") +
                    (seen & 4 ? "" : "data_offsets ") + "missing)");
    const unsigned bits = dtype_bits(t->dtype);
    if (!bits) return refuse(at + ": dtype \"" + printable(t->dtype) + "\": not a safetensors dtype");
    if (b > e || e > data_len)
      return refuse(at + ": data_offsets " + offsets_string(b, e) + " outside the file's " + std::to_string(data_len) +
                    " data bytes");
    if (!size(at, bits, b, e, t)) return false;
    t->name = name;
    t->elem_bytes = bits % 8 ? 0 : bits / 8;
    t->offset = data_start + b;
    t->bytes = (size_t)(e - b);
    return true;
  }

  // Sorted by offset, the tensors must tile [data_start, data_start + data_len).
  bool cover(const std::map<std::string, TensorInfo> &ts, uint64_t data_start, uint64_t data_len) {
    std::vector<const TensorInfo *> v;
    for (const auto &t : ts) v.push_back(&t.second);
    std::sort(v.begin(), v.end(), [](const TensorInfo *a, const TensorInfo *b) {
      return a->offset != b->offset ? a->offset < b->offset : a->bytes < b->bytes;
    });
    uint64_t next = data_start;
    const TensorInfo *prev = nullptr;
    for (const TensorInfo *t : v) {
      const std::string span = offsets_string(t->offset - data_start, t->offset - data_start + t->bytes);
      if (t->offset < next)
        return refuse("tensor " + printable(t->name) + " (data_offsets " + span + ") overlaps tensor " +
                      printable(prev->name) + " (ending at " + std::to_string(next - data_start) + ")");
      if (t->offset > next)
        return refuse(std::to_string(t->offset - next) + " data bytes before tensor " + printable(t->name) +
                      " (data_offsets " + span + ") belong to no tensor: the offsets must cover the data exactly");
      next = t->offset + t->bytes;
      prev = t;
    }
    if (next != data_start + data_len)
      return refuse(std::to_string(data_start + data_len - next) + " data bytes after the last tensor belong to no " +
                    "tensor: the offsets must cover the data exactly");
    return true;
  }
};

}  // namespace

int parse_safetensors_header(const std::string &header, const std::string &path, uint64_t data_start,
                             uint64_t data_len, std::map<std::string, TensorInfo> *out, std::string *err) {
  out->clear();
  Reader r{JsonCursor(header, 128, kMaxString), path, err};
  if (!r.expect(Json::OBJECT, "header", "an object")) return 1;
  std::string key;
  bool end = false, meta = false;
  if (!r.c.enter_object()) return r.json(), 1;
  while (r.c.next_key(&key, &end) && !end) {
    if (key == "__metadata__") {
      if (meta) return r.duplicate(key), 1;
      meta = true;
      if (!r.metadata()) return 1;
      continue;
    }
    if (out->size() >= kMaxTensors)
      return r.refuse("more than " + std::to_string(kMaxTensors) + " tensors: more than this engine runs"), 1;
    const auto ins = out->emplace(key, TensorInfo());
    if (!ins.second) return r.duplicate(key), 1;
    if (!r.entry(key, data_start, data_len, &ins.first->second)) return 1;
  }
  if (!r.c.error().empty() || !r.c.finish()) return r.json(), 1;
  return r.cover(*out, data_start, data_len) ? 0 : 1;
}

}  // namespace llama
