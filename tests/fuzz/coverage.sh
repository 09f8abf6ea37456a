#!/usr/bin/env bash
# coverage.sh - what the fuzzers reach: line coverage of lib/ and graphbuild/
# when the corpora are replayed (clang source-based coverage, llvm-cov).
#
#   tests/fuzz/coverage.sh [seconds]   default 0: replay only; >0 fuzz that
#                                      long first (per harness), then replay
#
# Replays the committed corpora plus what tests/fuzz/run.sh learned in
# $TPG_FUZZ_OUT (default /tmp/tpg_fuzz), for plan_fuzz and graph_fuzz apart
# and together.
set -euo pipefail
cd "$(dirname "$0")/../.."
secs=${1:-0}
fz=${TPG_FUZZ_OUT:-${TMPDIR:-/tmp}/tpg_fuzz}
out=${TPG_FUZZ_COV:-${TMPDIR:-/tmp}/tpg_fuzz_cov}
cuda=${CUDA_PATH:-/usr/local/cuda}
nccl=${NCCL_HOME:-$cuda}
nccl_lib=$nccl/lib64
[ -d "$nccl_lib" ] || nccl_lib=$nccl/lib
cc=${CLANG:-clang}
prof=$(command -v llvm-profdata || command -v llvm-profdata-14)
cov=$(command -v llvm-cov || command -v llvm-cov-14)
rm -rf "$out"
mkdir -p "$out" "$fz/corpus" "$fz/graph_corpus"
flags=(-std=c11 -fsanitize=fuzzer -fprofile-instr-generate -fcoverage-mapping -g -O1 -I. -I"$cuda/include" -I"$nccl/include")
"$cc" "${flags[@]}" lib/*.c graphbuild/*.c tests/fuzz/kernels_stub.c tests/fuzz/plan_fuzz.c \
  -L"$nccl_lib" -Wl,-rpath,"$nccl_lib" -lnccl -ldl -lpthread -o "$out/plan_fuzz"
"$cc" "${flags[@]}" lib/*.c graphbuild/*.c tests/fuzz/kernels_fake.c tests/fake/fake_*.c tests/fuzz/graph_fuzz.c \
  -rdynamic -L"$nccl_lib" -Wl,-rpath,"$nccl_lib" -lnccl -ldl -lpthread -o "$out/graph_fuzz"
"$cc" -shared -fPIC -O1 -I"$cuda/include" tests/fake/shim.c -o "$out/libcuda_fake.so"
export TPG_LIBCUDA="$out/libcuda_fake.so"
if [ "$secs" -gt 0 ]; then
  LLVM_PROFILE_FILE="$out/ignore.profraw" "$out/plan_fuzz" -max_total_time="$secs" "$fz/corpus" tests/fuzz/corpus >/dev/null 2>&1 || true
  LLVM_PROFILE_FILE="$out/ignore.profraw" "$out/graph_fuzz" -max_total_time="$secs" "$fz/graph_corpus" tests/fuzz/graph_corpus >/dev/null 2>&1 || true
fi
LLVM_PROFILE_FILE="$out/plan.profraw" "$out/plan_fuzz" -runs=0 "$fz/corpus" tests/fuzz/corpus >/dev/null 2>&1
LLVM_PROFILE_FILE="$out/graph.profraw" "$out/graph_fuzz" -runs=0 "$fz/graph_corpus" tests/fuzz/graph_corpus >/dev/null 2>&1
"$prof" merge -o "$out/plan.profdata" "$out/plan.profraw"
"$prof" merge -o "$out/graph.profdata" "$out/graph.profraw"
report() { # binary profdata label
  "$cov" report "$1" -instr-profile="$2" lib/*.c graphbuild/*.c 2>/dev/null |
    awk -v l="$3" '$1 ~ /^(lib|graphbuild)\// { printf "  %-10s %-26s %s lines, %s missed: %s\n", l, $1, $8, $9, $10 }
                   $1 == "TOTAL" { printf "fuzz coverage: %-10s lines %s (of %s)\n", l, $10, $8 }'
}
report "$out/plan_fuzz" "$out/plan.profdata" plan_fuzz
report "$out/graph_fuzz" "$out/graph.profdata" graph_fuzz
