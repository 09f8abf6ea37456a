// main.cc - the Llama-3 example engine's entry: the command line
// (cli.h), then its ranks, one process per GPU (rank.h).
//
// `llama --tp N` starts its N ranks itself (fork + exec of this binary, the
// NCCL id passed through a file in a fresh temporary directory); under
// `mpirun -np N` each process takes its rank from Open MPI's environment and
// the id goes through --id-file (default: a name made from the job's
// namespace). Every rank builds ONE graph for the whole L-layer decode step
// (graphs/step.cc) and launches it once per token; rank 0 writes the outputs
// and prints the results.
//
//   llama --config 70b --layers 4 --bench --sweep --out DIR
//   llama --weights DIR --lm-head --out OUT         (files of docs/llama.md)
//   llama --model HF_DIR --prompt-ids 1,2,3 --max-new-tokens 32
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "examples/llama/run/cli.h"
#include "examples/llama/run/rank.h"

namespace llama {
namespace {

int env_int(const char *name, int dflt) {
  const char *s = std::getenv(name);
  return s && *s ? std::atoi(s) : dflt;
}

// Starts `tp` copies of this program as ranks and waits for them; when one
// fails, the others are stopped (they would wait for it until a timeout).
int spawn(int tp, char **argv) {
  char dir[] = "/tmp/llama.XXXXXX";
  if (!mkdtemp(dir)) {
    std::perror("llama: mkdtemp");
    return 1;
  }
  const std::string id = std::string(dir) + "/comm_id";
  std::vector<pid_t> pids;
  for (int r = 0; r < tp; r++) {
    pid_t p = fork();
    if (p < 0) {
      std::perror("llama: fork");
      for (pid_t q : pids) kill(q, SIGTERM);
      break;
    }
    if (p == 0) {
      setenv("LLAMA_RANK", std::to_string(r).c_str(), 1);
      setenv("LLAMA_NRANKS", std::to_string(tp).c_str(), 1);
      setenv("LLAMA_ID_FILE", id.c_str(), 1);
      execv("/proc/self/exe", argv);
      std::perror("llama: exec");
      _exit(127);
    }
    pids.push_back(p);
  }
  int failed = (int)pids.size() < tp;
  for (size_t left = pids.size(); left > 0; left--) {
    int status;
    pid_t p = wait(&status);
    if (p < 0) break;
    const bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
    if (!ok && !failed) {
      failed = 1;
      const size_t r = std::find(pids.begin(), pids.end(), p) - pids.begin();
      std::fprintf(stderr, "llama: rank %zu failed (%s %d); stopping the others\n", r,
                   WIFEXITED(status) ? "exit" : "signal", WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
      for (pid_t q : pids)
        if (q != p) kill(q, SIGTERM);
    }
  }
  unlink(id.c_str());
  rmdir(dir);
  return failed;
}

}  // namespace
}  // namespace llama

int main(int argc, char **argv) {
  using namespace llama;
  Options o;
  const int pr = parse_args(argc, argv, &o);
  if (pr) return pr == 1 ? 0 : 2;
  // Ranks under mpirun, or started by this program, are told their TP;
  // otherwise it follows the GPUs here (the driver asked, no CUDA work).
  const int mpi_size = env_int("OMPI_COMM_WORLD_SIZE", 0), own = env_int("LLAMA_NRANKS", 0);
  if (o.tp == 0) o.tp = mpi_size > 0 ? mpi_size : own;
  tpg_runtime_info ri;
  const bool driver = tpg_runtime_get_info(&ri, sizeof ri) == TPG_SUCCESS;
  if (finish_args(&o, driver ? ri.device_count : 0)) return 2;
  // Without a usable driver or GPU (a CPU build box, CI) say so plainly,
  // as tpbench does, instead of the CUDA runtime's message.
  if (!driver || ri.device_count < 1) {
    std::fprintf(stderr, "llama: no GPU here (%s). Run it on a machine with NVIDIA GPUs.\n",
                 ri.driver_error[0] ? ri.driver_error : "the driver sees no device");
    return 1;
  }
  if (mpi_size == 0 && own == 0 && o.tp > ri.device_count) {  // ranks spawned here, one GPU each
    std::fprintf(stderr, "llama: --tp %d: this machine has %d GPU(s) (run under mpirun to span machines)\n", o.tp,
                 ri.device_count);
    return 2;
  }
  if (mpi_size > 0) {
    if (mpi_size != o.tp) {
      std::fprintf(stderr, "llama: mpirun -np %d but --tp %d: they must agree\n", mpi_size, o.tp);
      return 2;
    }
    const int rank = env_int("OMPI_COMM_WORLD_RANK", 0);
    const int local = env_int("OMPI_COMM_WORLD_LOCAL_RANK", rank);
    std::string id = o.id_file;
    if (id.empty()) {  // one name per mpirun job: its PMIx namespace, else the launcher's pid
      const char *ns = std::getenv("PMIX_NAMESPACE");
      id = "/tmp/llama-comm-" + (ns ? std::string(ns) : std::to_string(getppid())) + ".id";
    }
    const int rc = run_rank(o, rank, mpi_size, local, id);
    if (rank == 0 && o.tp > 1) unlink(id.c_str());
    return rc;
  }
  if (own > 0) {
    const char *idf = std::getenv("LLAMA_ID_FILE");
    if (!idf || !idf[0]) {
      std::fprintf(stderr, "llama: LLAMA_NRANKS is set but LLAMA_ID_FILE is not (both come from the launcher)\n");
      return 2;
    }
    return run_rank(o, env_int("LLAMA_RANK", 0), own, env_int("LLAMA_RANK", 0), idf);
  }
  if (o.tp == 1) return run_rank(o, 0, 1, 0, "");
  return spawn(o.tp, argv);
}
