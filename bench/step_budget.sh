#!/usr/bin/env bash
# step_budget.sh - the Llama decode step's time budget, kernel by kernel, on
# a GPU machine from the repository root (tools/gpu_bundle.sh here first;
# carry ".gpu"):
#
#   bash bench/step_budget.sh [CFG...]     # default: 8b 70b; TP 1, 4 layers
#
# Per model: `llama --bench --sweep GRID` (the step's time per layer, no
# profiler), then for each point (batch 1/8/32 x ctx 512/4096 unless
# $TPG_BUDGET_GRID says otherwise) one launch of the step
# under ncu (--clock-control none: clocks as found; --cache-control none:
# L2 as the graph leaves it), every kernel's time and DRAM bytes; then
# bench/step_budget.py prints one table (kernels per layer, their sum, the
# step, the gaps, the floor). Extra engine flags (e.g. --pdl) from
# $TPG_BUDGET_ARGS; other points from $TPG_BUDGET_GRID (BATCHES x CTXS as
# --sweep takes it, e.g. 64,128,256x512); kernels ncu times from
# $TPG_BUDGET_KERNELS (an ncu -k filter; the default names ours, NCCL's and
# cuBLASLt's; "all" times every kernel of the run, the bench's copies and
# fills too, which at batch 128 took ncu past two minutes). Logs and CSVs
# under $OUT/budget (or a temp dir).
set -uo pipefail
top=$(pwd)
gpu=$top/.gpu
[ -d "$gpu/bin" ] || tar -C "$gpu" -xJf "$gpu/bin.tar.xz" || { echo "step_budget: no .gpu/bin (tools/gpu_bundle.sh)"; exit 1; }
bin=$gpu/bin
logs=${OUT:-$(mktemp -d /tmp/budget.XXXXXX)}/budget${TPG_BUDGET_TAG:-}
mkdir -p "$logs"
py_lib() { python3 -c "import nvidia.$1, os; print(os.path.join(nvidia.$1.__path__[0], 'lib'))" 2>/dev/null; }
nd=$(py_lib nccl) cb=$(py_lib cublas)
export LD_LIBRARY_PATH="$bin${nd:+:$nd}${cb:+:$cb}:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
ncu=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
[ -n "$ncu" ] || { echo "step_budget: ncu not found"; exit 1; }
extra=${TPG_BUDGET_ARGS:-}
grid=${TPG_BUDGET_GRID:-1,8,32x512,4096}
batches=${grid%x*} ctxs=${grid#*x}
kfilter=(-k "${TPG_BUDGET_KERNELS:-regex:^(llama_|tpg_|nccl|nvjet|sm90_|cutlass|splitKreduce)}")
[ "${TPG_BUDGET_KERNELS:-}" = all ] && kfilter=()
cfgs=("$@")
[ ${#cfgs[@]} -gt 0 ] || cfgs=(8b 70b)
for cfg in "${cfgs[@]}"; do
  mkdir -p "$logs/sweep_$cfg"
  timeout 300 "$bin/llama" --config "$cfg" --layers 4 --tp 1 --bench --sweep "$grid" $extra --out "$logs/sweep_$cfg" \
    > "$logs/sweep_$cfg.log" 2>&1 || echo "step_budget: sweep $cfg rc $? ($logs/sweep_$cfg.log)"
  grep "^bench:" "$logs/sweep_$cfg.log"
  for ctx in ${ctxs//,/ }; do
    for b in ${batches//,/ }; do
      f=$logs/ncu_${cfg}_b${b}_c${ctx}.csv
      timeout 150 "$ncu" --clock-control none --cache-control none --csv --print-units base \
        "${kfilter[@]}" --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum \
        "$bin/llama" --config "$cfg" --layers 4 --tp 1 --bench --batch "$b" --ctx "$ctx" --iters 1 --warmup 1 $extra \
        > "$f" 2> "$f.err" || echo "step_budget: ncu $cfg b$b c$ctx rc $? ($f.err)"
    done
  done
done
python3 "$top/bench/step_budget.py" "$logs" | tee "$logs/budget.txt"
