#!/usr/bin/env bash
# gpu_suite.sh - on the GPU machine (packed by tools/gpu_bundle.sh as
# .gpu/suite.sh): the GPU tests, the example engine, the fault test, then
# the benchmarks. Logs and JSON go to $OUT (at most 8 files come back).
#   bash .gpu/suite.sh [quick|check|full]   # default full
#     quick: tests and example; check: + fault test, gemm checks, all-reduce
#     bench; full: + rebind bench and tpbench
here=$(cd "$(dirname "$0")" && pwd)
out=${OUT:-$here/out}
mode=${1:-full}
mkdir -p "$out" /tmp/tpg-logs
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
cb=$(python3 -c 'import nvidia.cublas, os; print(os.path.join(nvidia.cublas.__path__[0], "lib"))' 2>/dev/null)
echo "commit $(cat "$here/COMMIT" 2>/dev/null)"
OUT=/tmp/tpg-logs timeout 400 bash "$here/run.sh" > "$out/suite.txt" 2>&1
grep -E "PASS|FAIL|passed" "$out/suite.txt" | tail -10
LD_LIBRARY_PATH="$here/bin" timeout 120 bash "$here/run.sh" engine > /tmp/tpg-logs/engine.txt 2>&1
echo "engine: $(tail -1 /tmp/tpg-logs/engine.txt)"
[ "$mode" = quick ] && exit 0
NCCL_DEBUG=WARN timeout 150 bash "$here/run.sh" fault_test > "$out/fault.txt" 2>&1
echo "fault_test (rc $?): $(tail -1 "$out/fault.txt")"
LD_LIBRARY_PATH="${cb:+$cb:}/usr/local/cuda/lib64" timeout 120 bash "$here/run.sh" gemm_bench --check-only > /tmp/tpg-logs/gemm.txt 2>&1
echo "gemm_bench --check-only: $(grep -m1 'checks:' /tmp/tpg-logs/gemm.txt)"
timeout 150 bash "$here/run.sh" allreduce_bench --json "$out/allreduce.json" > "$out/ar.txt" 2>&1
tail -16 "$out/ar.txt"
[ "$mode" = check ] && exit 0
timeout 150 bash "$here/run.sh" rebind_bench --layers 64 --reps 10 --json "$out/rebind.json" > /tmp/tpg-logs/rb.txt 2>&1
timeout 400 bash "$here/run.sh" tpbench --json "$out/tpbench.json" --svg "$out/tpbench.svg" --torch-script bench/torch_mlp.py > "$out/tpbench.txt" 2>&1
tail -12 "$out/tpbench.txt"
