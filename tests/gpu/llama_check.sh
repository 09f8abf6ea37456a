#!/usr/bin/env bash
# llama_check.sh - the Llama decode example on a GPU machine: its kernels
# against fp64 (kernel_check; the prefill's, prefill_check), then the whole engine at TP = 1 and TP = 2
# against Hugging Face transformers (tests/gpu/llama_ref.py), on files made
# by llama_ref.py gen in the format of docs/llama.md. Every case runs
# several decode steps, so later steps read the K/V the engine appended.
#
#   # from the repository root, with the bundle unpacked in .gpu/bin
#   bash tests/gpu/llama_check.sh [WORKDIR]
#
# Needs //examples/llama:llama, :kernel_check and :prefill_check in the bundle, python3 with
# torch and transformers. Ends with "llama_check: N passed, M failed".
set -uo pipefail
top=$(pwd)
bin=${LLAMA_BIN:-$top/.gpu/bin}
work=${1:-$(mktemp -d /tmp/llama_check.XXXXXX)}
mkdir -p "$work"
cb=$(python3 -c 'import nvidia.cublas, os; print(os.path.join(nvidia.cublas.__path__[0], "lib"))' 2>/dev/null)
export LD_LIBRARY_PATH="$bin${cb:+:$cb}:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
run=(bash "$top/.gpu/run.sh")  # finds NCCL; falls back to the binary itself
[ -f "$top/.gpu/run.sh" ] || run=()
ngpu=$(nvidia-smi -L 2>/dev/null | wc -l)
pass=0 fail=0

# check NAME CMD...: runs it, logs to $work/NAME.log, prints its last lines.
check() {
  local name=$1; shift
  if timeout 900 "$@" > "$work/$name.log" 2>&1; then
    pass=$((pass + 1)); echo "PASS $name"
  else
    fail=$((fail + 1)); echo "FAIL $name (rc $?, $work/$name.log)"
  fi
  grep -E "passed|failed|rebind|verify|step [0-9]|FAIL|error|Error" "$work/$name.log" | tail -8 | sed 's/^/    /'
}
# The commands as arrays, not shell functions: check runs them under timeout.
if [ ${#run[@]} -gt 0 ]; then engine=("${run[@]}" llama) kcheck=("${run[@]}" kernel_check) pcheck=("${run[@]}" prefill_check)
else engine=("$bin/llama") kcheck=("$bin/kernel_check") pcheck=("$bin/prefill_check"); fi

check kernel_check "${kcheck[@]}"
check prefill_check "${pcheck[@]}"

# The engine alone on its seeded random model, against its own fp64 host
# reference (--verify): needs no Python. 8B-like with the LM head; 70B-like
# with a context crossing 4096.
for tp in 1 2; do
  [ "$tp" -le "$ngpu" ] || continue
  check "verify_8b_tp$tp" "${engine[@]}" --config 8b --layers 2 --batch 3 --ctx 301 --steps 3 --lm-head --vocab 4096 \
    --verify --tp "$tp"
  check "verify_70b_tp$tp" "${engine[@]}" --config 70b --layers 1 --batch 2 --ctx 4095 --steps 3 --verify --tp "$tp"
done

# name | gen arguments. 8B-like with the LM head over 3 sequences at an odd
# context; 70B-like (group of 8 query heads per KV head) at a context that
# crosses 4096 during the steps.
cases=(
  "8b_b3|--config 8b --layers 2 --batch 3 --ctx 301 --steps 3 --vocab 4096"
  "70b_b1|--config 70b --layers 1 --batch 1 --ctx 4095 --steps 3"
)
for c in "${cases[@]}"; do
  name=${c%%|*}; args=${c#*|}
  d="$work/$name"
  # shellcheck disable=SC2086
  check "gen_$name" python3 tests/gpu/llama_ref.py gen "$d" $args
  lm=(); grep -q '^vocab [1-9]' "$d/config.txt" 2>/dev/null && lm=(--lm-head)
  for tp in 1 2; do
    [ "$tp" -le "$ngpu" ] || { echo "SKIP ${name}_tp$tp: $ngpu GPU(s)"; continue; }
    mkdir -p "$d/out_tp$tp"
    check "engine_${name}_tp$tp" "${engine[@]}" --weights "$d" --tp "$tp" "${lm[@]}" --verify --out "$d/out_tp$tp"
    check "ref_${name}_tp$tp" python3 tests/gpu/llama_ref.py check "$d" "$d/out_tp$tp" --tp "$tp"
  done
done
echo "llama_check: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
