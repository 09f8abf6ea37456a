#!/usr/bin/env bash
# valgrind.sh - the CPU tests under valgrind memcheck, built without sanitizers.
#
#   tests/valgrind.sh [bazel test flags...]
#
# A second opinion beside --config=asan: memcheck runs the ordinary -O2
# binaries (what engines link), needs no rebuild with instrumentation, and
# sees uninitialised reads, which ASan does not. Bazel runs each test under
# valgrind (--run_under), with the test's own arguments, data and env.
# Fails on any memcheck error and on definite or indirect leaks. "Still
# reachable" blocks (NCCL's and libstdc++'s process-lifetime allocations,
# libdl's) are allowed and only listed.
# Prints one summary line per test from its log, then Bazel's verdicts.
set -uo pipefail
cd "$(dirname "$0")/.."
vg=$(command -v valgrind) || { echo "valgrind.sh: valgrind not found (apt-get install valgrind)" >&2; exit 1; }
opts="--leak-check=full --errors-for-leak-kinds=definite,indirect --show-leak-kinds=definite,indirect,possible"
opts="$opts --track-origins=yes --error-exitcode=1 --num-callers=30"
log=$(mktemp)
# Tests tagged "novalgrind" (the fault loops: minutes natively, hours under
# memcheck) are left to the native and ASan passes.
bazel test --nocache_test_results --test_output=errors --test_timeout=600 --test_tag_filters=-gpu,-novalgrind \
  --run_under="$vg $opts" "$@" //tests/... 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
echo "valgrind: memcheck per test: errors; heap in use at exit; definitely / indirectly lost"
testlogs=$(bazel info bazel-testlogs 2>/dev/null)
for t in $(grep -oE '^//tests/[^ ]+' "$log" | sort -u); do
  f="$testlogs/${t#//}"
  f="${f/://}/test.log"
  [ -f "$f" ] || continue
  errs=$(sed -n 's/.*ERROR SUMMARY: \([0-9]*\) errors.*/\1/p' "$f" | tail -1)
  inuse=$(sed -n 's/.*in use at exit: \(.*\)$/\1/p' "$f" | tail -1)
  def=$(sed -n 's/.*definitely lost: \([0-9,]*\) bytes.*/\1/p' "$f" | tail -1)
  ind=$(sed -n 's/.*indirectly lost: \([0-9,]*\) bytes.*/\1/p' "$f" | tail -1)
  printf '  %-34s errors %s; in use at exit %s; lost %s / %s bytes\n' "$t" "${errs:-?}" "${inuse:-?}" \
    "${def:-0}" "${ind:-0}"
done
rm -f "$log"
exit "$rc"
