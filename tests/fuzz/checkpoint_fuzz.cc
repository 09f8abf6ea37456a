// checkpoint_fuzz.cc - libFuzzer on a whole Hugging Face model directory as
// --model reads it (examples/llama/model/hf/checkpoint.h): config.json, the
// index and the safetensors files, checked together, then every piece of
// every rank's shard read as load_weights reads them.
//
// The input: one byte of options (bit 0: --tp 2 instead of 1; bits 1-3: the
// context, 16 << k positions), then the files, separated by the line
// "\n--8<--\n": config.json; the index (empty: none, the model is one
// model.safetensors); then the files a.safetensors, b.safetensors and
// c.safetensors (or model.safetensors alone without an index).
//
// Promises checked (abort() if broken):
//   - open returns 0 or 1, and a refusal says something;
//   - an accepted model is within the engine's limits (model/limits.h, the
//     kernels' head dims and groups, the TP's divisibility), and every piece
//     of rank 0's and the last rank's shards, and the embedding, reads.
#include <cstdint>
#include <string>
#include <vector>

#include "examples/llama/kernels/kernels.h"
#include "examples/llama/model/hf/checkpoint.h"
#include "examples/llama/model/limits.h"
#include "tests/fuzz/llama_fuzz_util.h"

using llama_fuzz::must;

namespace {

const char *const kFiles[] = {"config.json", "model.safetensors.index.json", "a.safetensors", "b.safetensors",
                              "c.safetensors", "model.safetensors"};

// The input's sections after the options byte.
std::vector<std::string> sections(const uint8_t *data, size_t size) {
  static const std::string sep = "\n--8<--\n";
  std::vector<std::string> out;
  const std::string s(reinterpret_cast<const char *>(data), size);
  size_t at = 0;
  for (size_t next; (next = s.find(sep, at)) != std::string::npos && out.size() < 5; at = next + sep.size())
    out.push_back(s.substr(at, next - at));
  out.push_back(s.substr(at));
  return out;
}

void check_limits(const llama::Config &c, int tp) {
  must(c.layers >= 1 && c.layers <= llama::kMaxLayers, "layers within the limit");
  must(c.hidden >= 8 && c.hidden <= llama::kMaxHidden && c.hidden % 8 == 0, "hidden within the limit");
  must(c.heads >= 1 && c.kv_heads >= 1 && c.heads % c.kv_heads == 0 && c.heads / c.kv_heads <= LLAMA_ATTN_MAX_GROUP,
       "heads a multiple of kv_heads, a group the kernels have");
  must(c.head_dim == LLAMA_HEAD_DIM || c.head_dim == LLAMA_HEAD_DIM_SMALL, "a head dim the kernels have");
  must(c.kv_heads % tp == 0 && c.ffn % (8 * tp) == 0 && c.vocab % (8 * tp) == 0, "the TP divides the model");
  must(c.vocab >= 1 && c.vocab <= llama::kMaxVocab, "vocab within fp32's exact ids");
  must(c.eps > 0 && c.theta > 1, "eps and theta in range");
}

void read_rank(const llama::HfModel &m, const llama::Config &c, int rank, int tp) {
  llama::Rank r;
  r.rank = rank;
  r.nranks = tp;
  std::string err;
  for (const llama::ShardPiece &p : llama::shard_pieces(c, r)) {
    std::vector<uint16_t> buf(p.rows * p.cols + 1);
    must(m.read(p.name, p.whole_rows, p.whole_cols, p.row0, p.rows, p.col0, p.cols, buf.data(), p.cols, &err) == 0,
         "an accepted model's pieces read", err);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  const std::string &dir = llama_fuzz::fuzz_dir("checkpoint_fuzz");
  for (const char *f : kFiles) unlink((dir + "/" + f).c_str());
  const int tp = 1 + (data[0] & 1), max_ctx = 16 << ((data[0] >> 1) & 7);
  const std::vector<std::string> s = sections(data + 1, size - 1);
  llama_fuzz::write_file(dir + "/config.json", s[0].data(), s[0].size());
  const bool index = s.size() > 1 && !s[1].empty();
  if (index) llama_fuzz::write_file(dir + "/model.safetensors.index.json", s[1].data(), s[1].size());
  for (size_t k = 2; k < s.size() && k < 5; k++)
    llama_fuzz::write_file(dir + "/" + (index ? kFiles[k] : "model.safetensors"), s[k].data(), s[k].size());
  llama::HfModel m;
  llama::Config c;
  std::string err;
  const int rc = m.open(dir, tp, max_ctx, &c, &err);
  must(rc == 0 || rc == 1, "open returns 0 or 1");
  llama_fuzz::say(rc ? "refused: " + err : "accepted");
  if (rc) {
    must(!err.empty(), "a refusal says why");
    return 0;
  }
  check_limits(c, tp);
  read_rank(m, c, 0, tp);
  if (tp > 1) read_rank(m, c, tp - 1, tp);
  std::vector<uint16_t> emb((size_t)c.vocab * c.hidden);
  must(m.read("embed", c.vocab, c.hidden, 0, c.vocab, 0, c.hidden, emb.data(), c.hidden, &err) == 0, "embed reads",
       err);
  return 0;
}
