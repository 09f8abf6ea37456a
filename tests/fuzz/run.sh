#!/usr/bin/env bash
# run.sh - build the plan-API fuzzer (clang, libFuzzer, ASan + UBSan) and run it.
#
#   tests/fuzz/run.sh [seconds]     default 60; 0 only replays the corpus
#
# First every committed input in tests/fuzz/corpus/ (seeds and past crashers)
# is replayed: a regression fails at once, whatever the time budget. Then the
# fuzzer runs for the given time from that corpus. What it learns goes to
# $TPG_FUZZ_OUT/corpus (not the repository), crashers to $TPG_FUZZ_OUT/;
# copy a crasher into tests/fuzz/corpus/ once it is fixed.
#
# Built straight from the C sources, not with Bazel: Bazel 4.2.3's toolchain
# here is gcc, and libFuzzer is clang's. Needs clang 14+ with its runtimes
# (Debian: clang, libclang-rt-14-dev) and NCCL (CUDA_PATH / NCCL_HOME).
set -euo pipefail
cd "$(dirname "$0")/../.."
secs=${1:-60}
out=${TPG_FUZZ_OUT:-${TMPDIR:-/tmp}/tpg_fuzz}
cuda=${CUDA_PATH:-/usr/local/cuda}
nccl=${NCCL_HOME:-$cuda}
cc=${CLANG:-clang}
nccl_lib=$nccl/lib64
[ -d "$nccl_lib" ] || nccl_lib=$nccl/lib
mkdir -p "$out/corpus"

san=(-fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer -g -O1)
# Every C source of the host library: a new file there needs no edit here.
srcs=(lib/*.c graphbuild/*.c graphbuild/nodes/*.c layers/*.c tests/fuzz/kernels_stub.c tests/fuzz/plan_fuzz.c)
echo "fuzz: building $out/plan_fuzz with $($cc --version | head -1)"
"$cc" -std=c11 "${san[@]}" -Wall -Wextra -I. -I"$cuda/include" -I"$nccl/include" "${srcs[@]}" \
  -L"$nccl_lib" -Wl,-rpath,"$nccl_lib" -lnccl -ldl -lpthread -o "$out/plan_fuzz"

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}

shopt -s nullglob
inputs=(tests/fuzz/corpus/*)
echo "fuzz: replaying ${#inputs[@]} committed inputs"
if [ ${#inputs[@]} -gt 0 ]; then
  "$out/plan_fuzz" -runs=1 "${inputs[@]}" > "$out/replay.log" 2>&1 || { tail -40 "$out/replay.log"; echo "fuzz: corpus replay FAILED"; exit 1; }
fi
[ "$secs" -gt 0 ] || { echo "fuzz: replay only: OK"; exit 0; }

echo "fuzz: running for $secs s"
set +e
"$out/plan_fuzz" -max_total_time="$secs" -max_len=4096 -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
  -artifact_prefix="$out/" "$out/corpus" tests/fuzz/corpus 2>&1 | tee "$out/fuzz.log" | grep -E '^#[0-9]+[[:space:]]+(pulse|DONE)|ERROR|SUMMARY|Test unit|broken promise'
rc=${PIPESTATUS[0]}
set -e
grep -E '^stat::number_of_executed_units|^stat::peak_rss_mb' "$out/fuzz.log" || true
if [ "$rc" -ne 0 ]; then
  tail -60 "$out/fuzz.log"
  echo "fuzz: FAILED (rc $rc); the input is in $out/ (crash-*, leak-*, timeout-*)"
  exit 1
fi
echo "fuzz: OK"
