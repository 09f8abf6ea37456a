#!/usr/bin/env bash
# serve_check.sh - llama --requests (docs/serving.md) on a GPU machine, in
# three stages:
#   1. kernels   kernel_check, prefill_check, paged_check (the paged KV
#                kernels against fp64, batch and chunk invariance), and
#                paged_check --quick under compute-sanitizer memcheck; then
#                paged_check --bench (decode attention's K/V rate, printed)
#   2. requests  a small random checkpoint (hf_check.py gen): 40 mixed
#                requests with 5 malformed lines, --batch-invariant
#                --check-alone (every request's ids = its own run), each bad
#                line refused by number, all ids judged against transformers
#                (hf_check.py many: its near-tie rule); the same requests
#                with a pool of 12 blocks (they wait: same ids), without
#                --batch-invariant (judged the same way), and with a pool of
#                3 blocks (the requests longer than it refused alone)
#   3. speed     a Llama-3-8B-shaped checkpoint (random weights, written by
#                transformers; SERVE_LAYERS layers, 32 by default), 256
#                synthetic requests: the engine (and with SERVE_INVARIANT=1
#                under --batch-invariant too), then transformers' continuous
#                batching and a static-batch torch.compile + graph loop
#                (bench/torch_serve.py); the serving step's graphs for vLLM's
#                35 batch sizes (build time, memory), and what capture costs
#                PyTorch for them (bench/torch_capture.py, plain mode)
# A short table last, then "serve_check: N passed, M failed". Each stage is
# meant to fit one GPU call of under ten minutes: run them one a call.
# WORKDIR gets the logs and small outputs (give one under the call's $OUT to
# keep them); checkpoints go to SERVE_SCRATCH (default: a new /tmp folder).
#
#   # from the repository root, with the bundle in .gpu (tools/gpu_bundle.sh)
#   SERVE_STAGES=kernels bash tests/gpu/serve_check.sh "$OUT/serve"
#   SERVE_STAGES=requests bash tests/gpu/serve_check.sh "$OUT/serve"
#   SERVE_STAGES=speed bash tests/gpu/serve_check.sh "$OUT/serve"
#   SERVE_LAYERS=16 SERVE_N=128 SERVE_STAGES=speed bash tests/gpu/serve_check.sh   # a smaller speed stage
#
# Needs //examples/llama:llama, :kernel_check, :prefill_check and :paged_check
# in the bundle; python3 with torch and transformers 5.x (no network).
set -uo pipefail
top=$(pwd)
bin=${LLAMA_BIN:-$top/.gpu/bin}
[ -d "$bin" ] || [ ! -f "$top/.gpu/bin.tar.xz" ] || tar -C "$top/.gpu" -xJf "$top/.gpu/bin.tar.xz"
work=${1:-$(mktemp -d /tmp/serve_check.XXXXXX)}
scratch=${SERVE_SCRATCH:-$(mktemp -d /tmp/serve_scratch.XXXXXX)}
mkdir -p "$work" "$scratch"
cb=$(python3 -c 'import nvidia.cublas, os; print(os.path.join(nvidia.cublas.__path__[0], "lib"))' 2>/dev/null)
export LD_LIBRARY_PATH="$bin${cb:+:$cb}:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TRANSFORMERS_VERBOSITY=error
run=(bash "$top/.gpu/run.sh")  # finds NCCL; falls back to the binary itself
[ -f "$top/.gpu/run.sh" ] || run=()
tool() { if [ ${#run[@]} -gt 0 ]; then echo "${run[*]} $1"; else echo "$bin/$1"; fi; }
read -r -a engine <<< "$(tool llama)"
stages=${SERVE_STAGES-kernels requests speed}
layers=${SERVE_LAYERS:-32}
nreq=${SERVE_N:-256}
pass=0 fail=0

# check NAME TIMEOUT CMD...: runs it, logs to $work/NAME.log, prints its key lines.
check() {
  local name=$1 limit=$2; shift 2
  if timeout "$limit" "$@" > "$work/$name.log" 2>&1; then
    pass=$((pass + 1)); echo "PASS $name"
  else
    fail=$((fail + 1)); echo "FAIL $name (rc $?, $work/$name.log)"
  fi
  local keys="passed|failed|alone|refused|FAIL|rror"
  keys+="|^(serve|hf_check|torch_serve|graph sizes: [0-9]+ sizes|attn bench|checkpoint|gen|requests):"
  grep -E "$keys" "$work/$name.log" | grep -v "^  File" | tail -8 | cut -c1-240 | sed 's/^/    /'
}
# verdict NAME PYTHON-EXPR-PRINTING-OK: a check written in Python over the files.
verdict() {
  local name=$1; shift
  if python3 - "$@" > "$work/$name.log" 2>&1; then pass=$((pass + 1)); echo "PASS $name"
  else fail=$((fail + 1)); echo "FAIL $name ($work/$name.log)"; fi
  tail -8 "$work/$name.log" | cut -c1-240 | sed 's/^/    /'
}

if [[ " $stages " == *" kernels "* ]]; then
  for k in kernel_check prefill_check paged_check; do
    read -r -a cmd <<< "$(tool $k)"
    check "$k" 300 "${cmd[@]}"
  done
  cs=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null)
  if [ -n "$cs" ]; then
    check sanitize_paged_check 300 "$cs" --tool memcheck --error-exitcode 99 "$bin/paged_check" --quick
  else
    echo "SKIP sanitize_paged_check: no compute-sanitizer"
  fi
  read -r -a cmd <<< "$(tool paged_check)"
  check paged_bench 120 "${cmd[@]}" --bench
fi

if [[ " $stages " == *" requests "* ]]; then
  d="$scratch/small"
  check gen_small 300 python3 tests/gpu/hf_check.py gen "$d" --case llama3_8b_bf16
  check requests_small 300 python3 tests/gpu/hf_check.py requests "$d" "$work/requests.jsonl" --n 40 --bad
  opts=(--model "$d" --requests "$work/requests.jsonl" --tp 1 --max-seqs 16 --max-step-rows 128)
  check serve_invariant 300 "${engine[@]}" "${opts[@]}" --batch-invariant --check-alone --out "$work/inv"
  verdict refusals_by_line "$work/requests.jsonl.refusals" "$work/inv/ids.jsonl" <<'EOF'
import json, sys
want = [l.split(" ", 1) for l in open(sys.argv[1]) if l.strip()]
got = {o["line"]: o for o in map(json.loads, open(sys.argv[2]))}
ok = bool(want)
for line, why in want:
    o = got.get(int(line), {})
    hit = why.strip() in o.get("refused", "")
    ok &= hit
    print("line %s: %s" % (line, o.get("refused", "NOT REFUSED")))
served = sum("ids" in o for o in got.values())
print("%d lines refused as expected, %d served, every line accounted for: %s" % (len(want), served, ok))
sys.exit(0 if ok and served == 40 else 1)
EOF
  check many_invariant 300 python3 tests/gpu/hf_check.py many "$d" "$work/requests.jsonl" "$work/inv/ids.jsonl"
  check serve_tiny_pool 240 "${engine[@]}" "${opts[@]}" --batch-invariant --kv-blocks 12 --out "$work/tiny"
  verdict tiny_pool_same_ids "$work/inv" "$work/tiny" <<'EOF'
import json, sys
ids = [{o["line"]: o.get("ids") for o in map(json.loads, open(d + "/ids.jsonl"))} for d in sys.argv[1:]]
s = json.load(open(sys.argv[2] + "/summary.json"))
same = ids[0] == ids[1]
print("pool of %d blocks: peak %d; the ids %s the big pool's" % (s["kv_blocks"], s["peak_kv_blocks"],
                                                                  "equal" if same else "DIFFER FROM"))
sys.exit(0 if same and s["peak_kv_blocks"] <= 12 and s["served"] == 40 else 1)
EOF
  check serve_default 300 "${engine[@]}" "${opts[@]}" --check-alone --out "$work/dflt"
  check many_default 300 python3 tests/gpu/hf_check.py many "$d" "$work/requests.jsonl" "$work/dflt/ids.jsonl"
  check serve_pool_of_3 240 "${engine[@]}" "${opts[@]}" --kv-blocks 3 --out "$work/three"
  verdict longer_than_the_pool "$work/requests.jsonl" "$work/inv/ids.jsonl" "$work/three/ids.jsonl" <<'EOF'
import json, sys
lines = open(sys.argv[1]).read().split("\n")
big_pool = [o for o in map(json.loads, open(sys.argv[2])) if "ids" in o]  # the requests that can run at all
got = {o["line"]: o for o in map(json.loads, open(sys.argv[3]))}
size = {o["line"]: len(json.loads(lines[o["line"] - 1])["prompt_ids"]) +
        json.loads(lines[o["line"] - 1])["max_new_tokens"] for o in big_pool}
big = [n for n, k in size.items() if k > 3 * 64]
ok = all("needs" in got[n].get("refused", "") for n in big) and all("ids" in got[n] for n in size if n not in big)
print("%d requests longer than the 3-block pool refused alone, %d served: %s" % (len(big), len(size) - len(big), ok))
sys.exit(0 if ok and big else 1)
EOF
  rm -rf "$d"
fi

if [[ " $stages " == *" speed "* ]]; then
  d="$scratch/llama8b"
  check checkpoint_8b 300 python3 bench/torch_serve.py checkpoint "$d" --layers "$layers"
  check gen_requests 60 python3 bench/torch_serve.py gen "$work/synthetic.jsonl" --n "$nreq" --seed 1
  check serve_8b 240 "${engine[@]}" --model "$d" --requests "$work/synthetic.jsonl" --tp 1 --out "$work/speed"
  if [ "${SERVE_INVARIANT:-0}" = 1 ]; then
    check serve_8b_invariant 240 "${engine[@]}" --model "$d" --requests "$work/synthetic.jsonl" --tp 1 \
      --batch-invariant --out "$work/speed_inv"
  fi
  check torch_serve 480 python3 bench/torch_serve.py run "$d" "$work/synthetic.jsonl" --json "$work/torch_serve.json"
  rm -rf "$d"
  check graph_sizes 180 "${engine[@]}" --config 8b --layers 32 --graph-sizes vllm --out "$work/sizes"
  check torch_capture 240 python3 bench/torch_capture.py --layers 32 --modes plain \
    --ours "cp $work/sizes/graph_sizes.json {out}" --json "$work/torch_capture.json"
  verdict speed_targets "$work" <<'EOF'
import json, os, sys
w = sys.argv[1]
def load(p):
    try:
        return json.load(open(os.path.join(w, p)))
    except (OSError, ValueError):
        return {}
e, ei = load("speed/summary.json"), load("speed_inv/summary.json")
t, g = load("torch_serve.json"), load("sizes/graph_sizes.json")
rows = [("engine (tpgraph)", e)] + ([("engine --batch-invariant", ei)] if ei else []) + [
    ("transformers CB", t.get("cb", {})), ("static compile+graph", t.get("static", {}))]
print("%-26s %10s %9s %9s %9s %9s" % ("serving", "tok/s", "TTFT p50", "TTFT p99", "ITL p50", "ITL p99"))
for name, r in rows:
    note = "  " + r["error"][:60] if "error" in r else ""
    v = [r.get(k) or 0 for k in ("output_tokens_per_s", "ttft_ms_p50", "ttft_ms_p99", "itl_ms_p50", "itl_ms_p99")]
    print("%-26s %10.0f %9.1f %9.1f %9.2f %9.2f%s" % tuple([name] + v + [note]))  # null (no samples) as 0
ours = e.get("output_tokens_per_s", 0)
cb, st = t.get("cb", {}).get("output_tokens_per_s", 0), t.get("static", {}).get("output_tokens_per_s", 0)
r_cb, r_st = (ours / cb if cb else 0), (ours / st if st else 0)
build, beyond = g.get("build_s", 0) * 1e3, g.get("beyond_arena_bytes", 0) / 2**20
print("engine / transformers CB %.2fx (target >= 3), engine / static loop %.2fx (target >= 1.3); "
      "graph set of %s sizes: %.0f ms (target < 500), %.1f MiB beyond the arena (target < 100)"
      % (r_cb, r_st, g.get("sizes", "?"), build, beyond))
sys.exit(0 if r_cb >= 3 and r_st >= 1.3 and 0 < build < 500 and beyond < 100 else 1)
EOF
fi
echo "serve_check: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
