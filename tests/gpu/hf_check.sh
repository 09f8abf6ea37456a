#!/usr/bin/env bash
# hf_check.sh - the Llama example engine on Hugging Face checkpoints (llama
# --model), on a GPU machine: random-initialised models of the real classes
# written by save_pretrained (tests/gpu/hf_check.py gen), the engine's
# greedy ids for a prompt of 120-200 ids and 32 new tokens at TP 1 (and 2
# with two GPUs) judged against transformers (hf_check.py check; the rule
# for near ties is in its docstring). The prompt runs through the prefill
# graphs in chunks of $HF_CHUNK rows (64: two to four chunks, both graphs),
# whose last-row logits are held to transformers' bf16 bounds too; then the
# same prompt as single-token steps (--prefill steps) must make the same ids
# (hf_check.py same: or part at a near tie). On the first case, 40 requests
# at once through llama --requests, each also alone, all judged the same way
# (hf_check.py many). Then configurations the engine must refuse, each with
# its message.
#
#   # from the repository root, with the bundle in .gpu (tools/gpu_bundle.sh)
#   bash tests/gpu/hf_check.sh [WORKDIR]
#   HF_CASES="llama3_8b_bf16" bash tests/gpu/hf_check.sh   # some cases only ("": refusals only)
#
# Needs //examples/llama:llama in the bundle and python3 with torch and
# transformers 5.x (no network). Ends with "hf_check: N passed, M failed".
set -uo pipefail
top=$(pwd)
bin=${LLAMA_BIN:-$top/.gpu/bin}
[ -d "$bin" ] || [ ! -f "$top/.gpu/bin.tar.xz" ] || tar -C "$top/.gpu" -xJf "$top/.gpu/bin.tar.xz"
work=${1:-$(mktemp -d /tmp/hf_check.XXXXXX)}
mkdir -p "$work"
cb=$(python3 -c 'import nvidia.cublas, os; print(os.path.join(nvidia.cublas.__path__[0], "lib"))' 2>/dev/null)
export LD_LIBRARY_PATH="$bin${cb:+:$cb}:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TRANSFORMERS_VERBOSITY=error
run=(bash "$top/.gpu/run.sh")  # finds NCCL; falls back to the binary itself
[ -f "$top/.gpu/run.sh" ] || run=()
if [ ${#run[@]} -gt 0 ]; then engine=("${run[@]}" llama); else engine=("$bin/llama"); fi
ngpu=$(nvidia-smi -L 2>/dev/null | wc -l)
pass=0 fail=0
new=32
chunk=${HF_CHUNK:-64}

# check NAME CMD...: runs it, logs to $work/NAME.log, prints its key lines.
check() {
  local name=$1; shift
  if timeout 600 "$@" > "$work/$name.log" 2>&1; then
    pass=$((pass + 1)); echo "PASS $name"
  else
    fail=$((fail + 1)); echo "FAIL $name (rc $?, $work/$name.log)"
  fi
  grep -E "^(gen:|hf_check|same:|requests:|serve:|  |new ids|llama: (prompt|prefill|[0-9]+ new|Llama|Mistral|Qwen))|FAIL|rror" \
    "$work/$name.log" |
    grep -v "^  File" | tail -14 | cut -c1-300 | sed 's/^/    /'
}

cases=(${HF_CASES-llama3_8b_bf16 llama31_8b_fp16_tied_sharded mistral_7b_fp32_sharded llama3_70b_1layer_bf16
  qwen25_3b_bf16_bias_tied llama32_1b_hd64_tied qwen25_14b_group5_bias qwen25_05b_hd64_group7})
for c in "${cases[@]}"; do
  d="$work/$c"
  check "gen_$c" python3 tests/gpu/hf_check.py gen "$d" --case "$c"
  [ -f "$d/prompt_ids.txt" ] || continue
  for tp in 1 2; do
    [ "$tp" -le "$ngpu" ] || { echo "SKIP ${c}_tp$tp: $ngpu GPU(s)"; continue; }
    check "engine_${c}_tp$tp" "${engine[@]}" --model "$d" --prompt-ids "$(cat "$d/prompt_ids.txt")" \
      --max-new-tokens $new --tp "$tp" --prefill-chunk "$chunk" --prompt-logits "$work/logits_${c}_tp$tp.f32"
    check "check_${c}_tp$tp" python3 tests/gpu/hf_check.py check "$d" "$work/engine_${c}_tp$tp.log" \
      --logits "$work/logits_${c}_tp$tp.f32"
    check "engine_steps_${c}_tp$tp" "${engine[@]}" --model "$d" --prompt-ids "$(cat "$d/prompt_ids.txt")" \
      --max-new-tokens $new --tp "$tp" --prefill steps
    check "same_${c}_tp$tp" python3 tests/gpu/hf_check.py same "$d" "$work/engine_${c}_tp$tp.log" \
      "$work/engine_steps_${c}_tp$tp.log"
  done
  if [ "$c" = "${HF_MANY_CASE-llama3_8b_bf16}" ]; then
    # Many requests at once (llama --requests, docs/serving.md): 40 of them
    # continuously batched, each also served alone (--check-alone; under
    # --batch-invariant the ids must be the same), every one judged against
    # transformers by the rule above.
    check "requests_$c" python3 tests/gpu/hf_check.py requests "$d" "$work/requests_$c.jsonl" --n 40
    check "engine_requests_$c" "${engine[@]}" --model "$d" --requests "$work/requests_$c.jsonl" --tp 1 \
      --batch-invariant --check-alone --max-seqs 16 --max-step-rows 128 --out "$work/serve_$c"
    check "many_$c" python3 tests/gpu/hf_check.py many "$d" "$work/requests_$c.jsonl" "$work/serve_$c/ids.jsonl"
  fi
  rm -rf "$d"/*.safetensors  # the disk holds one model at a time
done

# name | extra engine flags | the message the refusal must hold (exit 2, before any GPU work).
refusals=(
  "llama_attention_bias||attention_bias true (o_proj.bias): not supported yet"
  "llama_head_dim_96||head_dim 96: this engine supports 64 and 128"
  "llama_group_32||num_attention_heads/num_key_value_heads = 32 (32/1): supported 1..16"
  "mistral_window_256|--max-new-tokens 300|sliding_window 256 < max context 308"
)
for r in "${refusals[@]}"; do
  IFS='|' read -r c flags want <<< "$r"
  d="$work/$c"
  check "gen_$c" python3 tests/gpu/hf_check.py gen "$d" --case "$c"
  # shellcheck disable=SC2086
  "${engine[@]}" --model "$d" --prompt-ids "$(cat "$d/prompt_ids.txt" 2>/dev/null)" $flags > "$work/refuse_$c.log" 2>&1
  rc=$?
  if [ $rc -eq 2 ] && grep -qF -- "$want" "$work/refuse_$c.log"; then
    pass=$((pass + 1)); echo "PASS refuse_$c"
  else
    fail=$((fail + 1)); echo "FAIL refuse_$c (rc $rc, wanted exit 2 and '$want')"
  fi
  sed 's/^/    /' "$work/refuse_$c.log" | tail -2 | cut -c1-300
done
echo "hf_check: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
