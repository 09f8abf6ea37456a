// input_file.cc - input_file.h: stat before open (a device is never opened),
// open without blocking (a FIFO swapped in between is not waited on), fstat
// again on what was opened, then pread.
#include "examples/llama/model/input_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace llama {
namespace {

// "" for a regular file, else what it is.
const char *not_regular(mode_t m) {
  if (S_ISREG(m)) return "";
  if (S_ISFIFO(m)) return "a FIFO";
  if (S_ISCHR(m)) return "a character device";
  if (S_ISBLK(m)) return "a block device";
  if (S_ISDIR(m)) return "a directory";
  if (S_ISSOCK(m)) return "a socket";
  return "not a plain file";
}

}  // namespace

std::string byte_size_string(uint64_t b) {
  if (b >= (1u << 20) && b % (1u << 20) == 0) return std::to_string(b >> 20) + " MiB";
  if (b >= (1u << 10) && b % (1u << 10) == 0) return std::to_string(b >> 10) + " KiB";
  return std::to_string(b) + " bytes";
}

std::string printable(const std::string &s) {
  std::string o;
  for (size_t k = 0; k < s.size() && k < 120; k++) {
    const unsigned char ch = (unsigned char)s[k];
    if (ch >= 0x20 && ch != 0x7f) {
      o += (char)ch;
    } else {
      static const char hex[] = "0123456789abcdef";
      o += "\\x";
      o += hex[ch >> 4];
      o += hex[ch & 15];
    }
  }
  return s.size() > 120 ? o + "..." : o;
}

InputFile::~InputFile() {
  if (fd_ >= 0) ::close(fd_);
}

int InputFile::open(const std::string &path, std::string *err) {
  path_ = path;
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) {
    *err = path + ": cannot open (" + std::strerror(errno) + ")";
    return 1;
  }
  if (*not_regular(st.st_mode)) {
    *err = path + ": " + not_regular(st.st_mode) + ", not a regular file";
    return 1;
  }
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) {
    *err = path + ": cannot open (" + std::strerror(errno) + ")";
    return 1;
  }
  if (fstat(fd, &st) != 0) {
    *err = path + ": cannot stat (" + std::strerror(errno) + ")";
    ::close(fd);
    return 1;
  }
  if (*not_regular(st.st_mode)) {  // replaced since the stat above
    *err = path + ": " + not_regular(st.st_mode) + ", not a regular file";
    ::close(fd);
    return 1;
  }
  if (fd_ >= 0) ::close(fd_);
  fd_ = fd;
  size_ = (uint64_t)st.st_size;
  return 0;
}

int InputFile::read_at(uint64_t off, void *dst, size_t n, std::string *err) const {
  char *p = static_cast<char *>(dst);
  size_t done = 0;
  while (done < n) {
    const ssize_t r = ::pread(fd_, p + done, n - done, (off_t)(off + done));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      *err = path_ + ": read of " + std::to_string(n) + " bytes at offset " + std::to_string(off) + " failed (" +
             std::strerror(errno) + ")";
      return 1;
    }
    if (r == 0) {
      *err = path_ + ": " + std::to_string(done) + " of " + std::to_string(n) + " bytes at offset " +
             std::to_string(off) + " could be read: the file is shorter than when it was opened (" +
             std::to_string(size_) + " bytes)";
      return 1;
    }
    done += (size_t)r;
  }
  return 0;
}

int read_input_file(const std::string &path, size_t cap, std::string *out, std::string *err) {
  out->clear();
  InputFile f;
  if (f.open(path, err)) return 1;
  if (f.size() > cap) {
    *err = path + ": " + std::to_string(f.size()) + " bytes, more than the " + byte_size_string(cap) +
           " this engine reads for it";
    return 1;
  }
  out->resize((size_t)f.size());
  if (f.read_at(0, &(*out)[0], out->size(), err)) {
    out->clear();
    return 1;
  }
  return 0;
}

}  // namespace llama
