// rank.cc - rank.h: a rank's device, comm, modules and weights, then the
// run its options ask for.
#include "examples/llama/run/rank.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>

#include "examples/llama/graphs/decode.h"
#include "examples/llama/kernels/kernels.h"
#include "examples/llama/model/hf/checkpoint.h"
#include "examples/llama/run/generate.h"
#include "examples/llama/run/serve.h"

extern "C" const tpg_embedded_blob llama_kernels[];  // //examples/llama:device_code
extern const tpg_embedded_blob llama_decode_kernels[];  // //examples/llama:decode_code (kernels/loop.cu)

namespace llama {
namespace {

// The NCCL communicator of TP > 1: rank 0 writes the id to id_file, the
// others read it (rank 0 may be computing --verify's reference meanwhile).
int open_comm(Rank &R, const std::string &id_file) {
  const int rank = R.rank, nranks = R.nranks, device = R.device;
  tpg_comm_id id;
  if (rank == 0) {
    CHECK_TPG(tpg_comm_id_create(&id));
    CHECK_TPG(tpg_comm_id_write_file(&id, id_file.c_str()));
  } else {
    CHECK_TPG(tpg_comm_id_read_file(id_file.c_str(), 600000, &id));  // rank 0 may be computing --verify's reference
  }
  tpg_comm_config cc = TPG_COMM_CONFIG_INIT;
  cc.device = device;
  cc.rank = rank;
  cc.nranks = nranks;
  cc.timeout_ms = 120000;
  CHECK_TPG(tpg_comm_create(&id, &cc, &R.comm));
  return 0;
}

// One blob of the engine's embedded fatbin (//examples/llama:device_code,
// one blob per kernels/*.cu file, named by its stem) as a module.
int load_blob(const Rank &R, const char *name, tpg_module **out) {
  CHECK_TPG(tpg_module_load_embedded(llama_kernels, name, out));
  return 0;
}

// The engine's kernels (and the prefill's, with --model) from the embedded
// fatbin, and cuBLAS for the LM head.
int load_modules(const Options &o, Rank &R) {
  const int rank = R.rank;
  if (load_blob(R, LLAMA_BLOB_STEP, &R.module)) return 1;
  const bool serving = !o.serve.requests.empty() || !o.serve.sizes.empty();  // run/serve.h
  if ((!o.model.empty() || serving) && load_blob(R, LLAMA_BLOB_PREFILL, &R.prefill_module)) return 1;
  if (serving) {
    if (load_blob(R, LLAMA_BLOB_PAGED, &R.paged_module)) return 1;
    CHECK_TPG(tpg_module_load_embedded(llama_decode_kernels, "loop", &R.loop_module));
  }
  if (o.c.vocab > 0) {
    if (cublasCreate(&R.cublas) != CUBLAS_STATUS_SUCCESS) {
      std::fprintf(stderr, "llama rank %d: cublasCreate failed\n", rank);
      return 1;
    }
    R.cublas_ws_bytes = 32u << 20;
    CHECK_CUDA(cudaMalloc(&R.cublas_ws, R.cublas_ws_bytes));
    if (cublasSetWorkspace(R.cublas, R.cublas_ws, R.cublas_ws_bytes) != CUBLAS_STATUS_SUCCESS) {
      std::fprintf(stderr, "llama rank %d: cublasSetWorkspace failed\n", rank);
      return 1;
    }
  }
  return 0;
}

}  // namespace

float bf16_to_float(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

bool write_file(const std::string &path, const void *p, size_t n) {
  FILE *f = std::fopen(path.c_str(), "wb");
  if (!f) return false;
  const bool ok = std::fwrite(p, 1, n, f) == n;
  return std::fclose(f) == 0 && ok;
}

// What tpgraph built: the node kinds, the memory it owns, the build time.
int print_graph_info(const Step &s) {
  tpg_graph_info gi;
  if (tpg_graph_get_info(s.graph, &gi, sizeof gi) != TPG_SUCCESS) {  // informative only (eager mode has no graph)
    std::printf("llama: tpg_graph_get_info: %s\n", tpg_last_error());
    return 0;
  }
  std::printf("llama: CUDA graph: %d nodes (%d tpgraph kernels, %d engine kernels, %d NCCL child graphs, %d "
              "captured, %d memcpy), %d programmatic edges, workspace %.1f MiB, materialize %.0f us, instantiate "
              "%.0f us\n",
              gi.nodes, gi.kernel_nodes, gi.user_kernel_nodes, gi.child_nodes, gi.captured_nodes, gi.memcpy_nodes,
              gi.programmatic_edges, gi.workspace_bytes / 1048576.0, gi.materialize_us, gi.instantiate_us);
  return 0;
}

// --model --prompt-ids: one prompt (run/generate.h).
int run_model(const Options &o, RankState &st, const Source &src) {
  const Rank &R = st.R;
  std::string err;
  GenerateOptions g;
  g.prompt = o.prompt;
  g.max_new = o.max_new;
  g.end_token = o.end_token;
  g.prefill = o.prefill;
  g.chunk = o.prefill_chunk;
  g.iters = o.iters;
  g.logits_out = o.prompt_logits;
  CHECK_OK(run_generate(o.c, R, st.w, src, g, &err));
  return 0;
}

int run_rank(Options &o, int rank, int nranks, int device, const std::string &id_file) {
  RankState st;
  Rank &R = st.R;
  R.rank = rank;
  R.nranks = nranks;
  R.device = device;
  R.pdl = o.pdl;
  R.fold_norm = o.fold_norm;
  R.attn = o.attn;
  R.attn_bps = o.attn_bps;
  R.mode = o.mode;
  std::string err;
  if (rank == 0 && !o.out.empty() && mkdir(o.out.c_str(), 0755) != 0 && errno != EEXIST) {
    std::fprintf(stderr, "llama: --out %s: %s\n", o.out.c_str(), std::strerror(errno));
    return 1;
  }
  CHECK_CUDA(cudaSetDevice(device));
  CHECK_CUDA(cudaDeviceGetAttribute(&R.sm_count, cudaDevAttrMultiProcessorCount, device));
  CHECK_CUDA(cudaStreamCreate(&R.stream));  // blocking: ordered after the legacy-stream fills and copies
  if (o.verify && rank == 0) {  // before the comm: the others wait for the id file meanwhile
    Source src{o.weights, o.c.seed};
    CHECK_OK(reference_steps(o.c, src, &st.ref_y, &st.ref_logits, &err));
    std::printf("llama: fp64 reference of %d steps computed on the host\n", o.c.steps);
  }
  if (nranks > 1 && open_comm(R, id_file)) return 1;  // TP 1: no comm (the plan's all-reduces become their epilogues)
  if (load_modules(o, R)) return 1;
  Source src{o.bench ? std::string() : o.weights, o.c.seed};
  HfModel model;  // --model: this rank maps the checkpoint and reads its shard
  if (!o.model.empty()) {
    Config c = o.c;
    CHECK_OK(model.open(o.model, nranks, o.c.max_ctx, &c, &err));
    src.reader = &model;
  }
  if (o.bench && !bench_weights_fit(o, R)) return 0;  // a --whole 70B on one GPU, say
  CHECK_OK(load_weights(o.c, R, src, &st.w, &err));
  if (rank == 0)
    std::printf("llama: rank 0 of %d on GPU %d: %.1f MiB of weights (%s)\n", nranks, device, st.w.bytes / 1048576.0,
                !o.model.empty() ? o.model.c_str() : src.dir.empty() ? "random" : src.dir.c_str());
  if (rank == 0 && !o.model.empty())
    std::printf("llama: %s, %d layers, hidden %d, %d/%d heads, ffn %d, vocab %d, theta %g%s, eps %g\n",
                model.config().arch.c_str(), o.c.layers, o.c.hidden, o.c.heads, o.c.kv_heads, o.c.ffn, o.c.vocab,
                (double)o.c.theta, o.c.rope_inv_freq.empty() ? "" : " (llama3 scaling: inv_freq table)",
                (double)o.c.eps);
  if (!o.serve.requests.empty()) {
    CHECK_OK(run_serve(o.c, R, st.w, src, o.serve, o.out, &err));
    return 0;
  }
  if (!o.serve.sizes.empty()) {
    CHECK_OK(run_graph_sizes(o.c, R, st.w, src, o.serve, o.out, &err));
    return 0;
  }
  if (!o.model.empty()) return run_model(o, st, src);
  if (o.decode) {
    DecodeOptions d;
    d.steps = o.decode;
    d.end_token = o.end_token;
    CHECK_OK(run_decode(o.c, R, st.w, src, d, &err));
    return 0;
  }
  return o.bench ? run_bench(o, st) : run_check(o, st);
}

}  // namespace llama
