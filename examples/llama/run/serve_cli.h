// serve_cli.h - the serving flags on llama's command line (cli.cc holds the
// parser; the serving part lives here so the two change apart): their
// getopt entries, and the run they describe checked before any GPU work
// (exit code 2 on anything wrong, as cli.h's).
#ifndef LLAMA_RUN_SERVE_CLI_H
#define LLAMA_RUN_SERVE_CLI_H

#include <getopt.h>

#include <vector>

#include "examples/llama/run/cli.h"

namespace llama {

// LLAMA_SERVE_FLAGS as getopt_long entries whose val is base + the flag's index.
std::vector<option> serve_options(int base);

// After parse_args: --requests (with --model) is checked and read here
// (*done = true: the run is described); --graph-sizes alone sets what the
// report needs and leaves the rest to finish_args (*done = false); a serving
// flag without either is refused. 0 or 2.
int finish_serve(Options *o, int gpus, bool *done);

}  // namespace llama

#endif
