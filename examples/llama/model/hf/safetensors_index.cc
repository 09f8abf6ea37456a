// safetensors_index.cc - safetensors_index.h: the cursor over the index,
// an entry at a time.
#include "examples/llama/model/hf/safetensors_index.h"

#include "examples/llama/model/hf/json.h"
#include "examples/llama/model/input_file.h"
#include "examples/llama/model/limits.h"

namespace llama {
namespace {

struct IndexReader {
  JsonCursor c;
  const std::string &path;
  std::string *err;

  int refuse(const std::string &what) {
    *err = path + ": " + what;
    return 1;
  }
  int json() { return refuse(c.error()); }

  // One weight_map entry: the key read, its value next.
  int entry(const std::string &key, std::map<std::string, size_t> *ids, WeightMap *wm) {
    const std::string at = "weight_map[\"" + printable(key) + "\"]: ";
    std::string file;
    Json::Kind k;
    if (!c.peek(&k)) return json();
    if (k != Json::STRING || !c.string(&file) || file.empty() || file.find('/') != std::string::npos ||
        file.find('\0') != std::string::npos)
      return c.error().empty() ? refuse(at + "expected a file name in " + path.substr(0, path.rfind('/'))) : json();
    if (key.find('\0') != std::string::npos) return refuse(at + "a NUL in the tensor's name");
    if (wm->file_of.size() >= kMaxTensors) return refuse("weight_map: more than " + std::to_string(kMaxTensors) + " tensors");
    const auto id = ids->emplace(file, wm->files.size());
    if (id.second) {
      if (wm->files.size() >= kMaxShardFiles)
        return refuse("weight_map: more than " + std::to_string(kMaxShardFiles) + " files");
      wm->files.push_back(file);
    }
    if (!wm->file_of.emplace(key, id.first->second).second)
      return c.fail(c.key_at(), "duplicate key \"" + printable(key) + "\""), json();
    return 0;
  }

  int weight_map(WeightMap *wm) {
    std::map<std::string, size_t> ids;
    std::string key;
    bool end = false;
    Json::Kind k;
    if (!c.peek(&k)) return json();
    if (k != Json::OBJECT) return refuse(std::string("weight_map: expected an object, got ") + Json::kind_name(k));
    c.enter_object();
    while (c.next_key(&key, &end) && !end)
      if (entry(key, &ids, wm)) return 1;
    return c.error().empty() ? 0 : json();
  }

  int read(WeightMap *wm) {
    std::string key;
    bool end = false, seen = false;
    Json::Kind k;
    if (!c.peek(&k)) return json();
    if (k != Json::OBJECT) return refuse(std::string("expected an object, got ") + Json::kind_name(k));
    c.enter_object();
    while (c.next_key(&key, &end) && !end) {
      if (key != "weight_map") {
        if (!c.skip()) return json();
      } else if (seen) {
        return c.fail(c.key_at(), "duplicate key \"weight_map\""), json();
      } else if (weight_map(wm)) {
        return 1;
      } else {
        seen = true;
      }
    }
    if (!c.error().empty() || !c.finish()) return json();
    return seen ? 0 : refuse("no \"weight_map\" object");
  }
};

}  // namespace

int read_safetensors_index(const std::string &path, WeightMap *wm, std::string *err) {
  std::string text;
  if (read_input_file(path, kMaxIndexJsonBytes, &text, err)) return 1;
  IndexReader r{JsonCursor(text, 128, 1u << 16), path, err};  // names: safetensors_header.cc's bound
  return r.read(wm);
}

}  // namespace llama
