#!/usr/bin/env bash
# run.sh - build the fuzzers (clang, libFuzzer, ASan + UBSan) and run them.
#
#   tests/fuzz/run.sh [seconds]     default 60; 0 only replays the corpora
#
# Six harnesses. plan_fuzz (the plan API, no driver) and graph_fuzz (graphs
# created, launched, rebound, updated and destroyed on the stand-in driver +
# NCCL of tests/fake, with failures injected; TPG_LIBCUDA points at the fake
# built here) run for the given seconds each. The llama example's parsers of
# untrusted input (examples/llama/model, run/cli.cc; docs/reliability.md,
# "Model files and the command line") share one more such budget, a fifth
# each: json_fuzz (the JSON reader), safetensors_fuzz (one safetensors file),
# checkpoint_fuzz (config.json + index + shards, read as --model reads them),
# cli_fuzz (the flags and config.txt) and requests_fuzz (the --requests
# file, run/requests.cc). First every committed input in
# tests/fuzz/corpus/ (plan_fuzz), tests/fuzz/graph_corpus/ (graph_fuzz) and
# tests/fuzz/<harness>_corpus/ (the llama ones; tests/fuzz/llama_seeds.py
# writes their seeds) is replayed: a regression fails at once, whatever the
# time budget. Then each fuzzer runs from its corpus. What they learn goes to
# $TPG_FUZZ_OUT/<corpus> (not the repository), crashers to $TPG_FUZZ_OUT/;
# copy a crasher into the committed corpus once it is fixed.
#
# Built straight from the C and C++ sources, not with Bazel: Bazel 4.2.3's
# toolchain here is gcc, and libFuzzer is clang's. Needs clang 14+ with its
# runtimes (Debian: clang, libclang-rt-14-dev), NCCL and the CUDA headers
# (CUDA_PATH / NCCL_HOME; the llama harnesses use the headers' types only).
set -euo pipefail
cd "$(dirname "$0")/../.."
secs=${1:-60}
out=${TPG_FUZZ_OUT:-${TMPDIR:-/tmp}/tpg_fuzz}
cuda=${CUDA_PATH:-/usr/local/cuda}
nccl=${NCCL_HOME:-$cuda}
cc=${CLANG:-clang}
cxx=${CLANGXX:-clang++}
llama_fuzzers=(json safetensors checkpoint cli requests)
mkdir -p "$out/corpus" "$out/graph_corpus" "$out/llama_obj"
for h in "${llama_fuzzers[@]}"; do mkdir -p "$out/${h}_corpus"; done

san=(-fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer -g -O1)
# Every C source of the host library: a new file there needs no edit here.
srcs=(lib/*.c lib/gemm/*.c graphbuild/*.c graphbuild/nodes/*.c layers/*.c tests/fuzz/kernels_stub.c tests/fuzz/cutlass_stub.c
      tests/fuzz/plan_fuzz.c)
echo "fuzz: building $out/plan_fuzz with $($cc --version | head -1)"
"$cc" -std=c11 "${san[@]}" -Wall -Wextra -I. -I"$cuda/include" -I"$nccl/include" "${srcs[@]}" \
  -ldl -lpthread -o "$out/plan_fuzz"

# graph_fuzz: the library from source with an embedded-kernel table the fake
# accepts, the fake driver + NCCL linked in, and the shim TPG_LIBCUDA and
# TPG_LIBNCCL load, which finds the fake in the executable (-rdynamic).
gsrcs=(lib/*.c lib/gemm/*.c graphbuild/*.c graphbuild/nodes/*.c layers/*.c tests/fuzz/kernels_fake.c tests/fuzz/cutlass_stub.c
       tests/fake/fake_*.c tests/fuzz/graph_fuzz.c)
echo "fuzz: building $out/graph_fuzz"
"$cc" -std=c11 "${san[@]}" -Wall -Wextra -I. -I"$cuda/include" -I"$nccl/include" "${gsrcs[@]}" -rdynamic \
  -ldl -lpthread -lm -o "$out/graph_fuzz"
"$cc" -shared -fPIC -O1 -I"$cuda/include" -I"$nccl/include" tests/fake/shim.c -o "$out/libcuda_fake.so"
export TPG_LIBCUDA="$out/libcuda_fake.so" TPG_LIBNCCL="$out/libcuda_fake.so" TPG_LIBCUBLASLT="$out/libcuda_fake.so"

# The llama parsers: compiled once, linked into each harness.
lsrcs=(examples/llama/model/input_file.cc examples/llama/model/config_txt.cc examples/llama/model/rope.cc
       examples/llama/model/shard.cc examples/llama/model/hf/*.cc examples/llama/run/cli.cc
       examples/llama/run/serve_cli.cc examples/llama/run/requests.cc examples/llama/run/scheduler.cc)
echo "fuzz: building the llama harnesses (${llama_fuzzers[*]}) with $($cxx --version | head -1)"
lobjs=()
pids=()
for f in "${lsrcs[@]}"; do  # on every core
  o="$out/llama_obj/$(echo "$f" | tr / _).o"
  "$cxx" -c -std=c++17 "${san[@]/fuzzer,/fuzzer-no-link,}" -Wall -Wextra -I. -Ilib -I"$cuda/include" "$f" -o "$o" &
  pids+=($!)
  lobjs+=("$o")
done
for p in "${pids[@]}"; do wait "$p"; done
for h in "${llama_fuzzers[@]}"; do
  "$cxx" -std=c++17 "${san[@]}" -Wall -Wextra -I. -Ilib -I"$cuda/include" "${lobjs[@]}" "tests/fuzz/${h}_fuzz.cc" \
    -o "$out/${h}_fuzz"
done

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}

shopt -s nullglob
replay() { # harness corpus-dir
  local inputs=("$2"/*)
  echo "fuzz: $1: replaying ${#inputs[@]} committed inputs"
  if [ ${#inputs[@]} -gt 0 ]; then
    "$out/$1" -runs=1 "${inputs[@]}" > "$out/replay_$1.log" 2>&1 || { tail -40 "$out/replay_$1.log"; echo "fuzz: $1: corpus replay FAILED"; exit 1; }
  fi
}
replay plan_fuzz tests/fuzz/corpus
replay graph_fuzz tests/fuzz/graph_corpus
for h in "${llama_fuzzers[@]}"; do replay "${h}_fuzz" "tests/fuzz/${h}_corpus"; done
[ "$secs" -gt 0 ] || { echo "fuzz: replay only: OK"; exit 0; }

fuzz() { # harness learned-corpus committed-corpus [seconds [max_len]]
  local t=${4:-$secs} len=${5:-4096}
  echo "fuzz: $1: running for $t s"
  set +e
  "$out/$1" -max_total_time="$t" -max_len="$len" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
    -artifact_prefix="$out/" "$2" "$3" 2>&1 | tee "$out/$1.log" | grep -E '^#[0-9]+[[:space:]]+(pulse|DONE)|ERROR|SUMMARY|Test unit|broken promise'
  local rc=${PIPESTATUS[0]}
  set -e
  grep -E '^stat::number_of_executed_units|^stat::peak_rss_mb' "$out/$1.log" || true
  if [ "$rc" -ne 0 ]; then
    tail -60 "$out/$1.log"
    echo "fuzz: $1: FAILED (rc $rc); the input is in $out/ (crash-*, leak-*, timeout-*)"
    exit 1
  fi
}
fuzz plan_fuzz "$out/corpus" tests/fuzz/corpus
fuzz graph_fuzz "$out/graph_corpus" tests/fuzz/graph_corpus
# A checkpoint of the smallest model the engine runs is 6 to 10 KB.
share=$(( secs / ${#llama_fuzzers[@]} > 0 ? secs / ${#llama_fuzzers[@]} : 1 ))
for h in "${llama_fuzzers[@]}"; do
  fuzz "${h}_fuzz" "$out/${h}_corpus" "tests/fuzz/${h}_corpus" "$share" "$([ "$h" = checkpoint ] && echo 32768 || echo 4096)"
done
echo "fuzz: OK"
