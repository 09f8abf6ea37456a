#!/usr/bin/env bash
# gemm_check.sh - the GEMM families on a GPU machine in one command (~5 min
# on an H100): the cuBLASLt family's nodes checked, rebound and timed beside
# ours and CUTLASS, and the family each shape chose.
#
#   tools/gpu_bundle.sh                       # here; carry ".gpu"
#   bash tests/gpu/gemm_check.sh [STAGE...]   # on the GPU machine, repo root
#
# Stages, in the order given (default: all five):
#   lt       gemm_lt_test: cuBLASLt nodes for every epilogue the family runs,
#            explicit / eager / capture, rebinding A, B, C, D and the bias,
#            element-wise against fp64; the rule's pick in its cuBLASLt band
#   check    gemm_bench --check-only with TPG_GEMM_CANDIDATES=cublaslt: the
#            rule's pick and each cuBLASLt candidate per shape, element-wise
#            against fp64 (needs "cuBLASLt checks: N" with N > 0)
#   zoo      gemm_bench --zoo on M = 1,16,32,64,128,256,512,1024,4096: per
#            shape the family chosen, ours, CUTLASS (its rule), cuBLASLt (the
#            family's node) and chosen / cuBLASLt; the per-M table (JSON:
#            $logs/zoo.json)
#   refit    bench/family_rules.py on that JSON: the per-M table and what a
#            refit table would give (prints only; docs/gemm.md says how to
#            emit lib/gemm/family_table.inc from a --cutlass zoo)
#   tpbench  tpbench at TP 1, 128 and 512 tokens, explicit and captured: the
#            JSON's "gemm" names each layer's family
# Ends with "gemm_check: N passed, N failed"; logs go to $OUT (or a
# temporary directory). cuBLASLt is loaded from PyTorch's nvidia.cublas when
# present, else the system's (ldconfig, /usr/local/cuda/lib64).
set -uo pipefail
top=$(pwd)
gpu=$top/.gpu
[ -d "$gpu/bin" ] || tar -C "$gpu" -xJf "$gpu/bin.tar.xz" || { echo "gemm_check: no .gpu/bin (run tools/gpu_bundle.sh)"; exit 1; }
bin=$gpu/bin
logs=${OUT:-$(mktemp -d /tmp/gemm_check.XXXXXX)}
mkdir -p "$logs"
py_lib() { python3 -c "import nvidia.$1, os; print(os.path.join(nvidia.$1.__path__[0], 'lib'))" 2>/dev/null; }
nd=$(py_lib nccl) cb=$(py_lib cublas)
export LD_LIBRARY_PATH="$bin${nd:+:$nd}${cb:+:$cb}:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
pass=0 fail=0
summary=()

# check NAME SECONDS GREP CMD...: runs CMD under a timeout, logs to
# $logs/NAME.log, prints the matching lines; the result is CMD's status
# unless a test after it (ok_if) says otherwise.
check() {
  local name=$1 secs=$2 pat=$3; shift 3
  local t0=$EPOCHREALTIME rc=0
  timeout "$secs" "$@" > "$logs/$name.log" 2>&1 || rc=$?
  local took
  took=$(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN{printf "%.0f", b-a}')
  grep -E "$pat" "$logs/$name.log" | tail -24 | cut -c1-160 | sed 's/^/    /'
  last_rc=$rc last_took=$took
}
verdict() {  # verdict NAME OK(0/1) NOTE
  if [ "$2" = 1 ]; then pass=$((pass + 1)); summary+=("$(printf 'PASS  %-8s %4ss  %s' "$1" "$last_took" "$3")")
  else fail=$((fail + 1)); summary+=("$(printf 'FAIL  %-8s %4ss  %s (log %s)' "$1" "$last_took" "$3" "$logs/$1.log")"); fi
}

stages=("$@")
[ ${#stages[@]} -gt 0 ] || stages=(lt check zoo refit tpbench)
echo "gemm_check: commit $(cat "$gpu/COMMIT" 2>/dev/null), $(nvidia-smi -L 2>/dev/null | head -1), cuBLAS ${cb:-system}, logs $logs"
for st in "${stages[@]}"; do
  echo "== $st"
  case "$st" in
  lt)
    check lt 150 "FAIL|passed|failed|cuBLASLt" "$bin/gemm_lt_test"
    verdict lt $([ $last_rc = 0 ] && echo 1 || echo 0) "$(grep -Eo '[0-9]+ passed, [0-9]+ failed' "$logs/lt.log" | tail -1)" ;;
  check)
    TPG_GEMM_CANDIDATES=cublaslt check check 200 "^checks:|checks:|FAIL" "$bin/gemm_bench" --check-only
    n=$(sed -nE 's/^cuBLASLt checks: ([0-9]+).*/\1/p' "$logs/check.log")
    ok=$([ $last_rc = 0 ] && [ "${n:-0}" -gt 0 ] && echo 1 || echo 0)
    verdict check "$ok" "$(grep -m1 '^checks:' "$logs/check.log" | cut -c1-60); cuBLASLt checks ${n:-0}" ;;
  zoo)
    check zoo 260 "^zoo|chosen / cuBLASLt|^per M|^ +M +shapes|[0-9]+ / [0-9]+ / [0-9]+$|geometric mean ours" \
      "$bin/gemm_bench" --zoo --m 1,16,32,64,128,256,512,1024,4096 --budget-s 180 --json "$logs/zoo.json"
    verdict zoo $([ $last_rc = 0 ] && [ -s "$logs/zoo.json" ] && echo 1 || echo 0) \
      "$(grep -m1 'chosen / cuBLASLt:' "$logs/zoo.log" | cut -c1-110)" ;;
  refit)
    if [ -s "$logs/zoo.json" ]; then
      check refit 60 "." python3 "$top/bench/family_rules.py" "$logs/zoo.json"
      verdict refit $([ $last_rc = 0 ] && echo 1 || echo 0) "family_rules.py on zoo.json"
    else last_took=0; verdict refit 0 "no zoo.json (run the zoo stage first)"; fi ;;
  tpbench)
    check tpbench 200 "gemm|tokens|explicit|captured" "$bin/tpbench" --tp 1 --hidden 8192 --ffn 28672 --tokens 128,512 \
      --modes explicit,captured --reps 10 --no-torch --no-png --json "$logs/tpbench.json" --svg "$logs/tpbench.svg"
    g=$(python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); print("; ".join("%d tokens: %s" % (p["tokens"], json.dumps(p.get("gemm"))) for p in r["rows"])[:240])' "$logs/tpbench.json" 2>/dev/null)
    verdict tpbench $([ $last_rc = 0 ] && grep -q '"gemm"' "$logs/tpbench.json" 2>/dev/null && echo 1 || echo 0) "${g:-no gemm in tpbench.json}" ;;
  *) echo "gemm_check: unknown stage '$st' (lt check zoo refit tpbench)"; last_took=0; verdict "$st" 0 "unknown stage" ;;
  esac
done
echo
printf '%s\n' "${summary[@]}"
echo "gemm_check: $pass passed, $fail failed"
[ "$fail" = 0 ]
