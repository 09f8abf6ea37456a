#!/usr/bin/env bash
# coverage.sh - line coverage of lib/, graphbuild/ (with nodes/) and layers/
# from the CPU tests.
#
#   tests/fake/coverage.sh            prints one line per file and the totals
#
# gcc --coverage + gcov, outside Bazel (offline, no lcov needed): the library
# sources are compiled once with coverage, each CPU test program is linked
# against them (the fault-tier tests with the fake driver + NCCL, and the
# embedded-kernel table of tests/fuzz/kernels_fake.c, which the fake accepts),
# and run as CI runs them: plan, linear, runtime (no driver, and the stub),
# threads, gemm_select, gemm_tune, kit, state, config, fake_smoke, comm_fault,
# graph_fault, kit_fake, update_fake, rebind_fake and the fault loop (2 ranks
# at every 4th point). The GPU tests are not run.
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${TPG_COV_OUT:-${TMPDIR:-/tmp}/tpg_cov}
cuda=${CUDA_PATH:-/usr/local/cuda}
nccl=${NCCL_HOME:-$cuda}
rm -rf "$out"
mkdir -p "$out/obj" "$out/bin"
inc=(-I. -Ilib -I"$cuda/include" -I"$nccl/include")
cov=(-std=c11 -O0 -g --coverage "${inc[@]}")

objs=()
srcs=(lib/*.c lib/gemm/*.c graphbuild/*.c graphbuild/nodes/*.c layers/*.c)
obj_of() { local n=${1%.c}; echo "$out/obj/${n//\//_}.o"; } # unique names: a file of graphbuild/nodes/ may share a basename with another
for f in "${srcs[@]}"; do
  o=$(obj_of "$f")
  gcc "${cov[@]}" -c "$f" -o "$o"
  objs+=("$o")
done
gcc -std=c11 -O1 "${inc[@]}" -c tests/fuzz/kernels_fake.c -o "$out/kernels_fake.o"
# CUTLASS's host code needs nvcc: its API refuses here (tests/fuzz/cutlass_stub.c)
gcc -std=c11 -O1 "${inc[@]}" -c tests/fuzz/cutlass_stub.c -o "$out/cutlass_stub.o"
fake=()
for f in tests/fake/fake_*.c; do
  gcc -std=c11 -O1 -g "${inc[@]}" -c "$f" -o "$out/$(basename "${f%.c}").o"
  fake+=("$out/$(basename "${f%.c}").o")
done
gcc -shared -fPIC -O1 -I"$cuda/include" -I"$nccl/include" tests/fake/shim.c -o "$out/libcuda_fake.so"

link() { # name source [extra objects...]
  local name=$1 src=$2
  shift 2
  gcc "${cov[@]}" "$src" "${objs[@]}" "$out/kernels_fake.o" "$out/cutlass_stub.o" "$@" -rdynamic -ldl -lpthread -lm \
    -o "$out/bin/$name"
}
link plan_test tests/cpu/plan_test.c
link linear_test tests/cpu/linear_test.c
link runtime_test tests/cpu/runtime_test.c
link threads_test tests/cpu/threads_test.c
link gemm_select_test tests/cpu/gemm_select_test.c
link kit_test tests/cpu/kit_test.c
link state_test tests/cpu/state_test.c
link config_test tests/cpu/config_test.c
link gemm_tune_test tests/cpu/gemm_tune_test.c
link fault_tier_test tests/cpu/fault_tier_test.c "${fake[@]}"
link comm_fault_test tests/cpu/comm_fault_test.c "${fake[@]}"
link graph_fault_test tests/cpu/graph_fault_test.c "${fake[@]}"
link kit_fake_test tests/cpu/kit_fake_test.c "${fake[@]}"
link update_fake_test tests/cpu/update_fake_test.c "${fake[@]}"
link rebind_fake_test tests/cpu/rebind_fake_test.c "${fake[@]}"

run() { echo "coverage: $*" >&2; "$@" > "$out/last.log" 2>&1 || { tail -20 "$out/last.log"; echo "coverage: FAILED: $*"; exit 1; }; }
export TEST_TMPDIR=$out
run "$out/bin/plan_test"
run "$out/bin/linear_test"
run "$out/bin/runtime_test"
run "$out/bin/runtime_test" "$cuda/lib64/stubs/libcuda.so"
run "$out/bin/threads_test"
run "$out/bin/gemm_select_test"
run "$out/bin/kit_test"
run "$out/bin/state_test"
run "$out/bin/config_test"
run "$out/bin/gemm_tune_test"
run "$out/bin/graph_fault_test" "$out/libcuda_fake.so"
run "$out/bin/kit_fake_test" "$out/libcuda_fake.so"
run "$out/bin/update_fake_test" "$out/libcuda_fake.so"
run "$out/bin/rebind_fake_test" "$out/libcuda_fake.so"
run "$out/bin/fault_tier_test" "$out/libcuda_fake.so" smoke
run "$out/bin/comm_fault_test" "$out/libcuda_fake.so"
run "$out/bin/fault_tier_test" "$out/libcuda_fake.so" loop 2 012 4

report=$(for f in "${srcs[@]}"; do gcov -n -o "$(obj_of "$f")" "$f" 2>/dev/null; done)
echo "$report" | awk '
  /^File / { f = $2; gsub(/\x27/, "", f) }
  /^Lines executed:/ {
    split($2, a, ":"); pct = a[2]; sub(/%/, "", pct); n = $4;
    if (f ~ /^(lib|graphbuild|layers)\/.*\.c$/) {
      hit = pct * n / 100; d = f; sub(/\/.*/, "", d);
      H[d] += hit; N[d] += n; TH += hit; TN += n;
      printf "  %-28s %6.1f%% of %4d lines\n", f, pct, n
    }
    f = ""  # a line after no File line is the invocation total: skipped
  }
  END {
    for (d in N) printf "coverage: %-11s %6.1f%% of %5d lines\n", d "/", 100 * H[d] / N[d], N[d];
    printf "coverage: total       %6.1f%% of %5d lines\n", 100 * TH / TN, TN
  }'
