// config_txt.cc - config.txt of a --weights directory (docs/llama.md,
// "Files"): `key value` lines setting the model and the run.
#include <cstdio>
#include <fstream>
#include <sstream>

#include "examples/llama/llama.h"

namespace llama {

int read_config(const std::string &dir, Config *c, std::string *err) {
  const std::string path = dir + "/config.txt";
  std::ifstream f(path);
  if (!f) {
    *err = path + ": cannot open";
    return 1;
  }
  std::string line;
  int n = 0;
  while (std::getline(f, line)) {
    std::istringstream in(line);
    std::string key;
    double v;
    if (!(in >> key) || key[0] == '#') continue;
    if (!(in >> v)) {
      *err = path + ": key '" + key + "' has no number";
      return 1;
    }
    n++;
    if (key == "hidden") c->hidden = (int)v;
    else if (key == "heads") c->heads = (int)v;
    else if (key == "kv_heads") c->kv_heads = (int)v;
    else if (key == "head_dim") c->head_dim = (int)v;
    else if (key == "ffn") c->ffn = (int)v;
    else if (key == "layers") c->layers = (int)v;
    else if (key == "vocab") c->vocab = (int)v;
    else if (key == "eps") c->eps = (float)v;
    else if (key == "theta") c->theta = (float)v;
    else if (key == "batch") c->batch = (int)v;
    else if (key == "ctx") c->ctx = (int)v;
    else if (key == "steps") c->steps = (int)v;
    else if (key == "max_ctx") c->max_ctx = (int)v;
    else if (key == "seed") c->seed = (uint64_t)v;
    else {
      std::fprintf(stderr, "llama: %s: unknown key '%s' ignored\n", path.c_str(), key.c_str());
      n--;
    }
  }
  if (n == 0) {
    *err = path + ": no keys";
    return 1;
  }
  return 0;
}

}  // namespace llama
