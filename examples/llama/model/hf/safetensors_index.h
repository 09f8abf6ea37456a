// safetensors_index.h - model.safetensors.index.json: which file holds
// each tensor of a sharded checkpoint.
//
// {"weight_map": {tensor: file, ...}, ...}: other members (such as
// "metadata") are checked as JSON and dropped. Read through JsonCursor
// straight into the map, so no tree of a hostile index is held: a tensor
// listed twice, a file name that is empty or holds '/' or NUL, more than
// kMaxTensors tensors or kMaxShardFiles files are refused as they are read.
#ifndef LLAMA_MODEL_HF_SAFETENSORS_INDEX_H
#define LLAMA_MODEL_HF_SAFETENSORS_INDEX_H

#include <cstddef>
#include <map>
#include <string>
#include <vector>

namespace llama {

struct WeightMap {
  std::vector<std::string> files;         // in the order first named
  std::map<std::string, size_t> file_of;  // tensor -> its index in files
};

// Reads the index at path (input_file.h's rule, at most 16 MiB). 0 on
// success; else *err = "PATH: what".
int read_safetensors_index(const std::string &path, WeightMap *wm, std::string *err);

}  // namespace llama

#endif
