// llama_fuzz_util.h - what the llama parsers' fuzz harnesses share: a
// directory of their own for the files an input becomes, writing them, and
// a promise check that aborts (so libFuzzer keeps the input) when broken.
#ifndef TESTS_FUZZ_LLAMA_FUZZ_UTIL_H
#define TESTS_FUZZ_LLAMA_FUZZ_UTIL_H

#include <dirent.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace llama_fuzz {

inline void must(bool ok, const char *what, const std::string &detail = "") {
  if (ok) return;
  std::fprintf(stderr, "llama fuzz: broken promise: %s%s%s\n", what, detail.empty() ? "" : ": ", detail.c_str());
  std::abort();
}

// LLAMA_FUZZ_VERBOSE=1: each refusal's message on stderr (to see what a
// seed exercises); off while fuzzing.
inline bool verbose() {
  static const bool v = std::getenv("LLAMA_FUZZ_VERBOSE") != nullptr;
  return v;
}

inline void say(const std::string &what) {
  if (verbose()) std::fprintf(stderr, "llama fuzz: %s\n", what.c_str());
}

inline std::string g_dir;

inline void remove_dir() {
  if (DIR *d = opendir(g_dir.c_str())) {
    while (dirent *e = readdir(d)) {
      const std::string n = e->d_name;
      if (n != "." && n != "..") unlink((g_dir + "/" + n).c_str());
    }
    closedir(d);
  }
  rmdir(g_dir.c_str());
}

// $TMPDIR/<name>.XXXXXX, removed at exit; files only, no subdirectories.
inline const std::string &fuzz_dir(const char *name) {
  if (!g_dir.empty()) return g_dir;
  const char *tmp = std::getenv("TMPDIR");
  std::string t = std::string(tmp && *tmp ? tmp : "/tmp") + "/" + name + ".XXXXXX";
  std::vector<char> buf(t.begin(), t.end());
  buf.push_back('\0');
  must(mkdtemp(buf.data()) != nullptr, "mkdtemp");
  g_dir = buf.data();
  std::atexit(remove_dir);
  return g_dir;
}

inline void write_file(const std::string &path, const void *data, size_t n) {
  FILE *f = std::fopen(path.c_str(), "wb");
  must(f != nullptr, "open for writing", path);
  must(n == 0 || std::fwrite(data, 1, n, f) == n, "write", path);
  std::fclose(f);
}

}  // namespace llama_fuzz

#endif
