// input_file.h - the one rule for every file the engine reads from a model
// directory (config.json, model.safetensors.index.json, the safetensors
// files, config.txt): such a directory is untrusted input (people download
// them), so each file is
//   - a regular file: a FIFO, a device (a link to /dev/zero), a directory or
//     a socket is refused with its path before a byte is read, and a FIFO is
//     never waited on (symlinks are followed: the Hugging Face cache is made
//     of them);
//   - at most a cap of bytes, said per kind of file below, so that reading it
//     costs bounded time and memory;
//   - read with pread into the caller's buffer: a file truncated after it was
//     opened gives an error that names it, never a SIGBUS from a mapping.
// Limits: docs/reliability.md, "Model files".
#ifndef LLAMA_MODEL_INPUT_FILE_H
#define LLAMA_MODEL_INPUT_FILE_H

#include <cstddef>
#include <cstdint>
#include <string>

namespace llama {

// The caps, in bytes. A real config.json is about 1 KiB; an index lists one
// name per tensor (about 80 bytes each, at most kMaxTensors of them: 1.3 MiB).
constexpr size_t kMaxConfigJsonBytes = 1u << 20;
constexpr size_t kMaxIndexJsonBytes = 16u << 20;
constexpr size_t kMaxConfigTxtBytes = 64u << 10;

// An open regular file, closed by the destructor. Not copyable.
class InputFile {
 public:
  InputFile() = default;
  InputFile(const InputFile &) = delete;
  InputFile &operator=(const InputFile &) = delete;
  ~InputFile();
  // Opens path (a regular file, never blocking). 0 on success; otherwise
  // *err = "PATH: what it is instead" or the system's reason.
  int open(const std::string &path, std::string *err);
  // Exactly n bytes at offset off into dst. 0 on success; otherwise *err
  // names the file, the offset and what came back (a short read: the file
  // was truncated since it was opened).
  int read_at(uint64_t off, void *dst, size_t n, std::string *err) const;
  uint64_t size() const { return size_; }  // at open
  const std::string &path() const { return path_; }

 private:
  int fd_ = -1;
  uint64_t size_ = 0;
  std::string path_;
};

// The whole of a regular file of at most cap bytes into *out. 0 on success;
// otherwise *err = "PATH: what" (its size and the cap when it is larger).
int read_input_file(const std::string &path, size_t cap, std::string *out, std::string *err);

// "1 MiB", "64 KiB", "123 bytes": sizes in messages.
std::string byte_size_string(uint64_t bytes);

// Text from a file, fit for a message: control bytes (a NUL, a newline, a
// terminal escape) as \xNN, and at most 120 bytes of it ("..." after).
std::string printable(const std::string &s);

}  // namespace llama

#endif
