#!/usr/bin/env bash
# kperf_check.sh - the decode step's small kernels on a GPU machine, checked
# and then timed, in one command: the Llama example's kernels (RMSNorm, RoPE,
# both attention first passes, the split combine) and tpgraph's all-reduce
# epilogue (+residual, RMSNorm; fused in our all-reduce kernels and the
# standalone tpg_ar_epilogue after NCCL or at one rank).
#
#   tools/gpu_bundle.sh                       # here; carry ".gpu"
#   bash tests/gpu/kperf_check.sh [STAGE...]  # on the GPU machine, repo root
#
# Stages, in the order given (default: kernels tests bench ncu):
#   kernels  kernel_check: every kernel of examples/llama against fp64
#   tests    allreduce_test (its "epilogue" cases cover every algorithm,
#            NCCL + tpg_ar_epilogue included) and linear_test
#   llama    tests/gpu/llama_check.sh (engine --verify, transformers); slow
#   bench    llama --bench --sweep small, 70b and 8b, TP = min(GPUs, 2), attention
#            on tensor cores (default) and then --attn fma, for an A/B
#   ncu      if ncu is installed: per-kernel average time and DRAM bytes at
#            TP 1, 70b, one layer, batch 1 and 32 at context 4096, tc and fma
# Pass/fail stages end in "kperf_check: N passed, M failed"; logs go to
# $OUT (or a temporary directory).
set -uo pipefail
top=$(pwd)
gpu=$top/.gpu
[ -d "$gpu/bin" ] || tar -C "$gpu" -xJf "$gpu/bin.tar.xz" || { echo "kperf_check: no .gpu/bin (run tools/gpu_bundle.sh)"; exit 1; }
bin=$gpu/bin
logs=${OUT:-$(mktemp -d /tmp/kperf.XXXXXX)}
mkdir -p "$logs"
# NCCL and cuBLAS: PyTorch's copies when present (as .gpu/run.sh finds NCCL),
# so every binary, also under timeout and ncu, runs directly.
py_lib() { python3 -c "import nvidia.$1, os; print(os.path.join(nvidia.$1.__path__[0], 'lib'))" 2>/dev/null; }
nd=$(py_lib nccl) cb=$(py_lib cublas)
export LD_LIBRARY_PATH="$bin${nd:+:$nd}${cb:+:$cb}:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
ngpu=$(nvidia-smi -L 2>/dev/null | wc -l)
tp=$((ngpu >= 2 ? 2 : 1))
pass=0 fail=0

# check NAME GREP CMD...: runs CMD, logs to $logs/NAME.log, prints matching lines.
check() {
  local name=$1 pat=$2; shift 2
  if timeout 500 "$@" > "$logs/$name.log" 2>&1; then
    pass=$((pass + 1)); echo "PASS $name"
  else
    fail=$((fail + 1)); echo "FAIL $name (rc $?, $logs/$name.log)"
  fi
  grep -E "$pat" "$logs/$name.log" | tail -12 | cut -c1-200 | sed 's/^/    /'
}

stages=("$@")
[ ${#stages[@]} -gt 0 ] || stages=(kernels tests bench ncu)
echo "kperf_check: commit $(cat "$gpu/COMMIT" 2>/dev/null), $ngpu GPU(s), stages ${stages[*]}, logs $logs"
for st in "${stages[@]}"; do
  case "$st" in
  kernels)
    check kernel_check "FAIL|kernel_check:" "$bin/kernel_check" ;;
  tests)
    check allreduce_test "epilogue|FAIL|passed|failed" "$bin/allreduce_test" --iters 2000 --modes proc
    check linear_test "FAIL|passed|failed" "$bin/linear_test" --modes proc ;;
  llama)
    if LLAMA_BIN=$bin timeout 590 bash "$top/tests/gpu/llama_check.sh" "$logs/llama_check" > "$logs/llama_check.log" 2>&1; then
      pass=$((pass + 1)); echo "PASS llama_check"
    else
      fail=$((fail + 1)); echo "FAIL llama_check ($logs/llama_check.log)"
    fi
    grep -E "^(PASS|FAIL)|llama_check:" "$logs/llama_check.log" | tail -24 | sed 's/^/    /' ;;
  bench)
    for cfg in 70b 8b; do
      for attn in tc fma; do
        timeout 300 "$bin/llama" --config $cfg --layers 4 --tp $tp --bench --sweep small --attn $attn \
          > "$logs/bench_${cfg}_$attn.log" 2>&1 || echo "bench $cfg $attn: rc $? ($logs/bench_${cfg}_$attn.log)"
        grep "^bench:" "$logs/bench_${cfg}_$attn.log"
      done
    done ;;
  ncu)
    ncu=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null)
    [ -n "$ncu" ] || { echo "ncu: not installed, skipped"; continue; }
    for attn in tc fma; do
      for b in 1 32; do
        f=$logs/ncu_b${b}_$attn.csv
        timeout 300 "$ncu" --csv --print-units base -k 'regex:llama_|tpg_ar_epilogue|tpg_allreduce' \
          --metrics gpu__time_duration.sum,dram__bytes.sum "$bin/llama" --config 70b --layers 1 --tp 1 --bench \
          --batch $b --ctx 4096 --iters 3 --warmup 1 --attn $attn > "$f" 2> "$f.err" || echo "ncu b$b $attn: rc $?"
        echo "ncu 70b TP1 1 layer b$b c4096 attn $attn: kernel, instances, avg us, avg MB, TB/s"
        python3 - "$f" <<'EOF'
import csv, sys, collections
rows = [l for l in open(sys.argv[1]) if l.startswith('"')]
agg = collections.defaultdict(lambda: collections.defaultdict(list))
for r in csv.DictReader(rows):
    try:
        agg[r["Kernel Name"].split("(")[0]][r["Metric Name"]].append(float(r["Metric Value"].replace(",", "")))
    except (KeyError, ValueError):
        pass
for k, m in sorted(agg.items()):
    t = m.get("gpu__time_duration.sum", [0]); by = m.get("dram__bytes.sum", [0])
    us, mb = sum(t) / len(t) / 1e3, sum(by) / len(by) / 1e6
    print(f"    {k:28s} {len(t):4d} {us:9.2f} {mb:9.2f} {mb / us if us else 0:6.2f}")
EOF
      done
    done ;;
  *) echo "unknown stage $st" ;;
  esac
done
echo "kperf_check: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
