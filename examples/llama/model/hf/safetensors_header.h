// safetensors_header.h - a safetensors header checked as strictly as
// safetensors' own reader, read through JsonCursor straight into the table
// of tensors (no tree: a hostile header costs no more memory than its text
// and is refused at its first bad entry).
//
// Refused, each with the file, the tensor and the value: a header that is no
// object; a tensor entry that is not exactly {"dtype", "shape",
// "data_offsets"}; an unknown dtype; a shape or offset that is not an integer
// literal in range (2.0, 1e0, -1, 2^64); more than 16 dimensions; a size
// other than shape x dtype (computed without overflow: the message says the
// true product); offsets outside the data, overlapping, leaving a gap or
// bytes after the last tensor; __metadata__ other than null or a map of
// strings; a NUL in a name; a name twice; more than kMaxTensors tensors.
#ifndef LLAMA_MODEL_HF_SAFETENSORS_HEADER_H
#define LLAMA_MODEL_HF_SAFETENSORS_HEADER_H

#include <cstdint>
#include <map>
#include <string>

#include "examples/llama/model/hf/safetensors.h"

namespace llama {

// The header text (after the 8-byte length) of the file `path`, whose data
// part starts at byte data_start and is data_len bytes. Fills *out with each
// tensor's name, dtype, shape, offset (from the file's start), bytes and
// element size; 0 on success, else *err = "PATH: what".
int parse_safetensors_header(const std::string &header, const std::string &path, uint64_t data_start,
                             uint64_t data_len, std::map<std::string, TensorInfo> *out, std::string *err);

}  // namespace llama

#endif
