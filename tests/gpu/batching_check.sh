#!/usr/bin/env bash
# batching_check.sh - graph sets (tpg_graph_set) and the row linear with the
# all-reduce epilogue (tpg_plan_add_linear_norm) on a GPU machine, checked
# and then measured, in one command (docs/batching.md).
#
#   tools/gpu_bundle.sh                          # here; the bundle must hold
#                                                # //tests/gpu:set_test,
#                                                # //tests/gpu:workspace_test,
#                                                # //bench:set_bench and
#                                                # //examples/llama:llama; carry ".gpu"
#   bash tests/gpu/batching_check.sh [STAGE...]  # on the GPU machine, repo root
#
# Stages, in the order given (default: tests bench torch):
#   tests  set_test (one graph per size and one retargeted exec against
#          fp64, every GPU) and linear_test (its row+norm cases: the
#          epilogue by AUTO and NCCL against fp64), threads then processes
#   bench  set_bench: vLLM's 35 sizes of a 32-layer 8B-like step, one graph
#          per size against one retargeted exec (JSON: $OUT/set_bench.json)
#   torch  bench/torch_capture.py: PyTorch's capture of the 32-layer 8B step
#          for the same sizes, plain and compiled, with set_bench's figures
#          in the same call (JSON: $OUT/torch_capture.json); ~2 minutes
#   workspace  GEMM workspaces shared (docs/gemm.md, Workspaces):
#          workspace_test (a set whose cuBLASLt, stream-K and split-GEMV
#          nodes share buffers across sizes, every launch against fp64,
#          sharing on and off), then llama --config 8b --layers 32
#          --graph-sizes vllm with TPG_GEMM_WORKSPACE_SHARE=1 and =0: the
#          table compares the arena, own and measured MiB; ~3 minutes
# Pass/fail stages end in "batching_check: N passed, M failed"; the last
# table is the capture comparison.
set -uo pipefail
top=$(pwd)
gpu=$top/.gpu
[ -d "$gpu/bin" ] || tar -C "$gpu" -xJf "$gpu/bin.tar.xz" || { echo "batching_check: no .gpu/bin (run tools/gpu_bundle.sh)"; exit 1; }
bin=$gpu/bin
logs=${OUT:-$(mktemp -d /tmp/batching.XXXXXX)}
mkdir -p "$logs"
py_lib() { python3 -c "import nvidia.$1, os; print(os.path.join(nvidia.$1.__path__[0], 'lib'))" 2>/dev/null; }
nd=$(py_lib nccl)
export LD_LIBRARY_PATH="$bin${nd:+:$nd}:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
pass=0 fail=0

# check NAME SECONDS GREP CMD...: runs CMD, logs to $logs/NAME.log, prints matching lines.
check() {
  local name=$1 secs=$2 pat=$3; shift 3
  if timeout "$secs" "$@" > "$logs/$name.log" 2>&1; then
    pass=$((pass + 1)); echo "PASS $name"
  else
    fail=$((fail + 1)); echo "FAIL $name (rc $?, $logs/$name.log)"
  fi
  grep -E "$pat" "$logs/$name.log" | tail -14 | cut -c1-220 | sed 's/^/    /'
}

stages=("$@")
[ ${#stages[@]} -gt 0 ] || stages=(tests bench torch)
echo "batching_check: commit $(cat "$gpu/COMMIT" 2>/dev/null), $(nvidia-smi -L 2>/dev/null | wc -l) GPU(s), stages ${stages[*]}, logs $logs"
for st in "${stages[@]}"; do
  case "$st" in
  tests)
    check set_test 240 "TP=|refused|FAIL|passed|failed" "$bin/set_test" --modes thread,proc
    check linear_test 500 "row\+norm|FAIL|passed|failed" "$bin/linear_test" --modes thread ;;
  bench)
    check set_bench 400 "." "$bin/set_bench" --json "$logs/set_bench.json" ;;
  torch)
    check torch_capture 560 "." python3 "$top/bench/torch_capture.py" --json "$logs/torch_capture.json" \
      --ours "$bin/set_bench --reps 20 --json {out}" ;;
  workspace)
    cb=$(py_lib cublas) # cuBLASLt: the rule's band needs it loaded
    check workspace_test 300 "share|own  |workspace|shared|FAIL|passed|failed" \
      env LD_LIBRARY_PATH="${cb:+$cb:}$LD_LIBRARY_PATH" "$bin/workspace_test"
    for s in 1 0; do
      check "graph_sizes_share$s" 300 "graph sizes: [0-9]+ sizes" env TPG_GEMM_WORKSPACE_SHARE=$s \
        LD_LIBRARY_PATH="${cb:+$cb:}$LD_LIBRARY_PATH" "$bin/llama" --config 8b --layers 32 --graph-sizes vllm \
        --out "$logs/sizes$s"
    done
    python3 - "$logs" <<'EOF'
import json, os, sys
print("%-22s %10s %10s %10s %12s %12s" % ("vllm sizes, 8b x 32", "build ms", "arena MiB", "own MiB",
                                         "measured MiB", "beyond MiB"))
for s, name in (("1", "workspaces shared"), ("0", "one per node")):
    try:
        g = json.load(open(os.path.join(sys.argv[1], "sizes" + s, "graph_sizes.json")))
    except (OSError, ValueError):
        g = {}
    m = 1 / 2**20
    print("%-22s %10.0f %10.1f %10.1f %12.1f %12.1f" % (name, g.get("build_s", 0) * 1e3, g.get("arena_bytes", 0) * m,
          g.get("own_bytes", 0) * m, g.get("measured_bytes", 0) * m, g.get("beyond_arena_bytes", 0) * m))
EOF
    ;;
  *) echo "batching_check: unknown stage $st"; fail=$((fail + 1)) ;;
  esac
done
echo "batching_check: $pass passed, $fail failed"
