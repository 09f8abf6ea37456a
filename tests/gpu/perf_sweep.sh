#!/usr/bin/env bash
# perf_sweep.sh - the decode/prefill comparison against torch.compile + CUDA
# graph on one GPU, in one command, from the bundle: the example engine against PyTorch's strongest form of the same
# work (torch.compile captured in torch.cuda.graph), alternated in the same
# call, then the table and every target as MET / NOT MET.
#
#   tools/gpu_bundle.sh                         # here; carry ".gpu"
#   bash tests/gpu/perf_sweep.sh [PART...]      # on the GPU machine, from the repository root
#   python3 tests/gpu/perf_sweep.py DIR         # the table again, anywhere, from the JSON
#
# Parts, in the order given (default: decode whole prefill, each under its
# own timeout: 240 + 150 + 180 s at most, so one 10-minute call; were a part
# cut short, run `decode` and `whole prefill` as two calls and perf_sweep.py
# over one folder holding both calls' JSON):
#   decode   the step of 4 layers, 8b and 70b widths, TP 1, batch
#            1/8/32/64/128/256 x ctx 512/4096: `llama --bench --sweep`, then
#            bench/torch_llama.py (torch.compile + graph, one compile per
#            shape class; plain graph) -> decode.json
#   whole    the whole model (every layer, the LM head, vocab 128256), 8b and
#            the Llama-3.2-1B shape, batch 1, ctx 512: ms a token, tokens/s,
#            bytes a step and their share of the device-to-device copy
#            bandwidth measured in the same run -> whole.json
#   prefill  bench/torch_prefill.py: 1b, 8b, 14b and 70b widths, 4 layers,
#            prompts 512 and 2048: ours (--model, chunks of 2048) against the
#            lean step under torch.compile + graph and transformers' eager
#            module -> prefill.json
#   static   a check of decode's class compile: 8b and 70b at batch 1 and
#            64, ctx 512, compiled per point, ours beside it again: its
#            ours / compile next to decode's -> static.json
#   full     ours alone over `--sweep full` (ctx 2048 too), 8b and 70b
#            -> full_<cfg>/bench.json
# Everything lands in $OUT (at most 8 files come back): the JSON above,
# perf_sweep.log (every part's output, appended to when $OUT is used again) and targets.txt (the table, last on
# stdout too). PERF_TIMEOUT_<PART> (seconds), PERF_ITERS and decode's
# PERF_BATCHES / PERF_CTXS (e.g. 512,2048,4096: the issue's ctx 2048) override the
# defaults; PERF_OURS_FLAGS adds flags to every engine command (e.g.
# --no-fold-norm, --no-pdl). Needs //examples/llama:llama in the bundle and python3 with
# torch and transformers 5.x.
set -uo pipefail
top=$(pwd)
gpu=$top/.gpu
[ -d "$gpu/bin" ] || tar -C "$gpu" -xJf "$gpu/bin.tar.xz" || { echo "perf_sweep: no .gpu/bin (run tools/gpu_bundle.sh)"; exit 1; }
bin=$gpu/bin
out=${OUT:-$(mktemp -d /tmp/perf_sweep.XXXXXX)}
mkdir -p "$out"
log=$out/perf_sweep.log
py_lib() { python3 -c "import nvidia.$1, os; print(os.path.join(nvidia.$1.__path__[0], 'lib'))" 2>/dev/null; }
nd=$(py_lib nccl) cb=$(py_lib cublas)
export LD_LIBRARY_PATH="$bin${nd:+:$nd}${cb:+:$cb}:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TRANSFORMERS_VERBOSITY=error HF_HUB_DISABLE_PROGRESS_BARS=1
iters=${PERF_ITERS:-100}
# Checkpoints of the prefill part in memory when there is room (70b widths: ~8 GB).
ckpt=/tmp
[ -d /dev/shm ] && [ "$(df -k --output=avail /dev/shm 2>/dev/null | tail -1)" -gt 20000000 ] 2>/dev/null && ckpt=/dev/shm
llama="$bin/llama ${PERF_OURS_FLAGS:-}"
batches=${PERF_BATCHES:-1,8,32,64,128,256}
ctxs=${PERF_CTXS:-512,4096}

# part NAME DEFAULT_TIMEOUT CMD...: runs CMD under its timeout (its whole
# process group: the ranks and the engine too), its output into the log and
# its headlines, skips and errors onto stdout (the tables come last, from
# perf_sweep.py); says how long it took.
part() {
  local name=$1 limit=$2; shift 2
  local var=PERF_TIMEOUT_${name^^}
  limit=${!var:-$limit}
  local t0=$EPOCHREALTIME
  echo "=== $name (timeout $limit s): $*" | tee -a "$log"
  timeout -k 10 "$limit" "$@" 2>&1 | tee -a "$log" |
    grep -E --line-buffered "^(peak|PyTorch|took|[0-9a-z]+: skipped)|skipped:|Error|error:|Traceback|failed|MISMATCH|ran past" |
    cut -c1-240
  local rc=${PIPESTATUS[0]}
  awk -v n="$name" -v r="$rc" -v a="$t0" -v b="$EPOCHREALTIME" \
    'BEGIN { printf "=== %s: rc %d, %.0f s%s\n", n, r, b - a, r == 124 ? " (timed out: its JSON holds the models done)" : "" }' | tee -a "$log"
}

parts=("$@")
[ ${#parts[@]} -gt 0 ] || parts=(decode whole prefill)
echo "perf_sweep: commit $(cat "$gpu/COMMIT" 2>/dev/null), $(nvidia-smi --query-gpu=name,memory.total --format=csv,noheader 2>/dev/null | head -1), parts ${parts[*]}, out $out" | tee -a "$log"
for p in "${parts[@]}"; do
  case "$p" in
  decode)
    part decode 240 python3 bench/torch_llama.py --config 8b,70b --layers 4 --tp 1 --batch "$batches" --ctx "$ctxs" \
      --iters "$iters" --compile-shapes class --json "$out/decode.json" --ours-timeout 150 \
      --ours "$llama --config {config} --layers {layers} --tp {tp} --bench --sweep {grid} --iters $iters --out {out}" ;;
  whole)
    part whole 150 python3 bench/torch_llama.py --whole --config 8b,1b --tp 1 --batch 1 --ctx 512 \
      --iters "$iters" --compile-shapes static --json "$out/whole.json" --ours-timeout 100 \
      --ours "$llama --config {config} --whole --tp {tp} --bench --sweep {grid} --iters $iters --out {out}" ;;
  prefill)
    part prefill 180 python3 bench/torch_prefill.py --config 1b,8b,14b,70b --layers 4 --prompts 512,2048 \
      --chunks 2048 --hf eager --compile-shapes static --dir "$ckpt" --ours "$llama --tp 1" --ours-timeout 60 \
      --json "$out/prefill.json" ;;
  static)
    part static 150 python3 bench/torch_llama.py --config 8b,70b --layers 4 --tp 1 --batch 1,64 --ctx 512 \
      --iters "$iters" --compile-shapes static --json "$out/static.json" --ours-timeout 100 \
      --ours "$llama --config {config} --layers {layers} --tp {tp} --bench --sweep {grid} --iters $iters --out {out}" ;;
  full)
    for cfg in 8b 70b; do
      mkdir -p "$out/full_$cfg"
      part "full_$cfg" 150 $llama --config $cfg --layers 4 --tp 1 --bench --sweep full --iters "$iters" \
        --out "$out/full_$cfg"
    done ;;
  *) echo "perf_sweep: unknown part $p" | tee -a "$log" ;;
  esac
done
python3 "$top/tests/gpu/perf_sweep.py" "$out" > "$out/targets.txt" 2>&1
cat "$out/targets.txt"
