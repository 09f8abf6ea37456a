#!/usr/bin/env bash
# gpu_suite.sh - on the GPU machine (packed by tools/gpu_bundle.sh as
# .gpu/suite.sh). Stages, in the order given (default: all but sanitize):
#   tests     the GPU tests (run.sh's loop) and the example engine
#   fault     fault_test: mismatch, silent and killed peers, watchdog abort
#   soak      soak_test: 100,000 launches with rebinding, RSS/device memory
#   soak64    the same at 64 tokens (stream-K GEMMs instead of GEMVs)
#   sanitize  compute-sanitizer memcheck and racecheck over the GPU tests
#   gemm      gemm_bench --check-only
#   gemmsan   compute-sanitizer memcheck over gemm_bench --check-only (small shapes)
#   gemmtime  gemm_bench timing against cuBLAS (JSON), stream-K A/B rows
#   zoo       gemm_bench --zoo: every model shape, the selected kernel against
#             cuBLASLt, every epilogue checked (JSON)
#   cutlass   gemm_bench --check-only with the CUTLASS candidates
#             (every one element-wise against fp64, bf16, each fused epilogue),
#             then gemm_bench --zoo --cutlass on a subset of M (TPG_CUTLASS_M,
#             default 64,128,256,512,1024,4096; ~6 min in all): ours, every
#             CUTLASS candidate, the family rules' picks and cuBLASLt, the
#             per-M table, and bench/family_rules.py's refit of the table on it
#   tuneon    the GPU tests again with on-device GEMM tuning (TPG_GEMM_TUNE=1)
#   skab      tpbench at 128 and 1024 tokens with stream-K off, then on
#   ar        allreduce_bench (JSON)
#   artune    two-shot grid sizes (TPG_TWOSHOT_BLOCKS 96, 128) at 1-8 MiB,
#             and allreduce_test under the largest
#   rebind    rebind_bench (JSON)
#   tpbench   the main job (JSON, SVG); extra flags in TPG_TPBENCH_ARGS
#   decode    the Llama example, host loop vs device loop (not by default)
#   pybind    the Python binding's checks on one GPU: every wrong
#             binding refused with a message, legal ones run and checked
#             (python/tests/test_gpu_bindings.py, test_bindings.py; the
#             package from ./python, the library from bin/)
# Logs go to $OUT; at most 8 files come back from there, so stages share.
#   bash .gpu/suite.sh tests fault soak
here=$(cd "$(dirname "$0")" && pwd)
out=${OUT:-$here/out}
mkdir -p "$out" /tmp/tpg-logs
[ -d "$here/bin" ] || tar -C "$here" -xJf "$here/bin.tar.xz" || { echo "suite: cannot unpack bin.tar.xz"; exit 1; }
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
cb=$(python3 -c 'import nvidia.cublas, os; print(os.path.join(nvidia.cublas.__path__[0], "lib"))' 2>/dev/null)
stages=("$@")
[ ${#stages[@]} -gt 0 ] || stages=(tests fault soak gemm ar rebind tpbench)
echo "commit $(cat "$here/COMMIT" 2>/dev/null); stages: ${stages[*]}"
for st in "${stages[@]}"; do
  case "$st" in
  tests)
    # kit_test links cuBLAS (a captured node): the toolkit's, or PyTorch's copy.
    OUT=/tmp/tpg-logs LD_LIBRARY_PATH="${cb:+$cb:}/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
      timeout 400 bash "$here/run.sh" > "$out/suite.txt" 2>&1
    grep -E "PASS|FAIL|passed" "$out/suite.txt" | tail -10
    LD_LIBRARY_PATH="$here/bin" timeout 120 bash "$here/run.sh" engine > /tmp/tpg-logs/engine.txt 2>&1
    echo "engine: $(tail -1 /tmp/tpg-logs/engine.txt)" ;;
  fault)
    NCCL_DEBUG=WARN timeout 150 bash "$here/run.sh" fault_test > "$out/fault.txt" 2>&1
    echo "fault_test (rc $?):"; grep -E "^(mismatch|silent|watchdog|killed|rank [01]:.*(passed|fail))|passed" "$out/fault.txt" | cut -c1-200
    NCCL_DEBUG=WARN timeout 150 bash "$here/run.sh" fault_test --during > /tmp/tpg-logs/fault_during.txt 2>&1
    echo "fault_test --during (rc $?):"; grep -E "^(killed|rank [01]:.*(passed|fail))|passed|hang" /tmp/tpg-logs/fault_during.txt | cut -c1-200
    cat /tmp/tpg-logs/fault_during.txt >> "$out/fault.txt" ;;
  soak)
    timeout 300 bash "$here/run.sh" soak_test > "$out/soak.txt" 2>&1
    echo "soak_test (rc $?):"; grep -E "launches|rel err|passed|differ|grew|took" "$out/soak.txt" | cut -c1-300 ;;
  soak64)
    TPG_SOAK_TOKENS=64 timeout 300 bash "$here/run.sh" soak_test > /tmp/tpg-logs/soak64.txt 2>&1
    echo "soak_test, 64 tokens (rc $?):"; grep -E "launches|rel err|passed|differ|grew|took" /tmp/tpg-logs/soak64.txt | cut -c1-300
    cat /tmp/tpg-logs/soak64.txt >> "$out/soak.txt" ;;
  sanitize)
    cs=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null)
    : > "$out/sanitizer.txt"
    # Memory errors only: API calls that fail on purpose (negative tests,
    # cuLibraryGetKernel probing each embedded library, NCCL's own probes)
    # are not defects; racecheck covers shared-memory hazards.
    for t in "memcheck graph_test" "memcheck allreduce_test --iters 50 --modes proc" "memcheck mlp_test --modes thread" \
             "memcheck linear_test --modes thread" "racecheck graph_test" ${TPG_SAN_EXTRA:-}; do
      set -- $t; tool=$1; shift
      s0=$EPOCHREALTIME
      ( cd "$here/bin" && d=$(python3 -c 'import nvidia.nccl, os; print(os.path.join(nvidia.nccl.__path__[0], "lib"))' 2>/dev/null);
        LD_LIBRARY_PATH="$d${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" timeout 300 "$cs" --tool "$tool" --target-processes all \
          --report-api-errors no --error-exitcode 99 "./$@" ) > /tmp/tpg-logs/cs.txt 2>&1
      rc=$?
      { echo "=== $tool $* (rc $rc)"; grep -E "ERROR SUMMARY|RACECHECK SUMMARY|passed" /tmp/tpg-logs/cs.txt | head -8
        echo "--- distinct reports (count, first line):"
        grep -E "^========= [A-Z]" /tmp/tpg-logs/cs.txt | grep -v SUMMARY | sed -E 's/0x[0-9a-f]+/0x_/g; s/[0-9]+ bytes/N bytes/' | sort | uniq -c | sort -rn | head -12
        echo "--- first report in full:"; grep -m1 -A14 -E "^========= (Invalid|Program hit|Race|Error)" /tmp/tpg-logs/cs.txt; } >> "$out/sanitizer.txt"
      awk -v t="$tool $*" -v r=$rc -v a=$s0 -v b=$EPOCHREALTIME 'BEGIN { printf "%-60s rc %d %6.1fs\n", t, r, b - a }'
    done ;;
  gemm)
    LD_LIBRARY_PATH="${cb:+$cb:}/usr/local/cuda/lib64" timeout ${TPG_GEMM_CHECK_TIMEOUT:-240} bash "$here/run.sh" gemm_bench --check-only > /tmp/tpg-logs/gemm.txt 2>&1
    echo "gemm_bench --check-only: $(grep -m1 'checks:' /tmp/tpg-logs/gemm.txt)" ;;
  zoo)
    LD_LIBRARY_PATH="${cb:+$cb:}/usr/local/cuda/lib64" timeout ${TPG_ZOO_TIMEOUT:-330} bash "$here/run.sh" gemm_bench --zoo \
      --budget-s ${TPG_ZOO_BUDGET:-300} --json "$out/zoo.json" > "$out/zoo.txt" 2>&1
    echo "gemm_bench --zoo (rc $?):"; grep -E "^zoo|geomean|slower|TB/s" "$out/zoo.txt" | tail -12 ;;
  cutlass)
    s0=$EPOCHREALTIME
    LD_LIBRARY_PATH="${cb:+$cb:}/usr/local/cuda/lib64" TPG_GEMM_CANDIDATES=cutlass timeout ${TPG_CUTLASS_CHECK_TIMEOUT:-240} \
      bash "$here/run.sh" gemm_bench --check-only > "$out/cutlass_check.txt" 2>&1
    echo "gemm_bench --check-only, CUTLASS candidates (rc $?, $(awk -v a=$s0 -v b=$EPOCHREALTIME 'BEGIN{printf "%.0f", b-a}') s):"
    grep -E "^(checks|CUTLASS checks):|^FAIL" "$out/cutlass_check.txt" | head -12
    s0=$EPOCHREALTIME
    LD_LIBRARY_PATH="${cb:+$cb:}/usr/local/cuda/lib64" timeout ${TPG_ZOO_TIMEOUT:-330} bash "$here/run.sh" gemm_bench --zoo --cutlass \
      --no-check --m ${TPG_CUTLASS_M:-64,128,256,512,1024,4096} --reps ${TPG_CUTLASS_REPS:-7} --budget-s ${TPG_ZOO_BUDGET:-240} \
      --json "$out/zoo_cutlass.json" > "$out/zoo_cutlass.txt" 2>&1
    echo "gemm_bench --zoo --cutlass (rc $?, $(awk -v a=$s0 -v b=$EPOCHREALTIME 'BEGIN{printf "%.0f", b-a}') s):"
    grep -E "^zoo:|^geometric|^per M|^ +(M|[0-9]+|all) +[0-9]" "$out/zoo_cutlass.txt" | tail -14
    python3 bench/family_rules.py "$out/zoo_cutlass.json" 2>&1 | tail -12 ;;
  tuneon)
    OUT=/tmp/tpg-logs/tune TPG_GEMM_TUNE=1 LD_LIBRARY_PATH="${cb:+$cb:}/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
      timeout 400 bash "$here/run.sh" > /tmp/tpg-logs/tuneon.txt 2>&1
    echo "GPU tests with TPG_GEMM_TUNE=1 (rc $?):"; grep -E "PASS|FAIL|passed" /tmp/tpg-logs/tuneon.txt | tail -10 ;;
  gemmsan)
    cs=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null)
    ( cd "$here/bin" && LD_LIBRARY_PATH="${cb:+$cb:}/usr/local/cuda/lib64" TPG_CHECK_SMALL=1 timeout 400 "$cs" --tool memcheck \
        --report-api-errors no --error-exitcode 99 ./gemm_bench --check-only ) > /tmp/tpg-logs/gemmsan.txt 2>&1
    echo "memcheck gemm_bench --check-only, small shapes (rc $?): $(grep -E 'ERROR SUMMARY|checks:' /tmp/tpg-logs/gemmsan.txt | tr '\n' ' ')"
    grep -m1 -A12 -E "^========= (Invalid|Program hit)" /tmp/tpg-logs/gemmsan.txt ;;
  gemmtime)
    LD_LIBRARY_PATH="${cb:+$cb:}/usr/local/cuda/lib64" timeout 300 bash "$here/run.sh" gemm_bench --json "$out/gemm.json" > "$out/gemm.txt" 2>&1
    echo "gemm_bench (rc $?):"; grep -E "^ +(128|1024) " "$out/gemm.txt" | cut -c1-90 ;;
  skab)
    for sk in 0 1; do
      echo "TPG_GEMM_STREAMK=$sk:"
      TPG_GEMM_STREAMK=$sk timeout 150 bash "$here/run.sh" tpbench --tokens 64,128,1024 --modes explicit,pdl,compute --no-torch \
        > /tmp/tpg-logs/skab$sk.txt 2>&1
      grep -E "^ *[0-9]+/[0-9]+|hidden" /tmp/tpg-logs/skab$sk.txt | tail -8
      cat /tmp/tpg-logs/skab$sk.txt >> "$out/skab.txt"
    done ;;
  ar)
    timeout 150 bash "$here/run.sh" allreduce_bench --json "$out/allreduce.json" > "$out/ar.txt" 2>&1
    tail -16 "$out/ar.txt" ;;
  artune)
    for b in 96 128; do
      echo "TPG_TWOSHOT_BLOCKS=$b:"
      TPG_TWOSHOT_BLOCKS=$b timeout 100 bash "$here/run.sh" allreduce_bench --min 1048576 --max 8388608 2>&1 | grep -E "^ +[0-9]+ "
    done
    TPG_TWOSHOT_BLOCKS=128 timeout 150 bash "$here/run.sh" allreduce_test --iters 5000 --modes proc > /tmp/tpg-logs/art.txt 2>&1
    echo "allreduce_test with 128 two-shot blocks (rc $?): $(tail -1 /tmp/tpg-logs/art.txt)" ;;
  rebind)
    timeout 150 bash "$here/run.sh" rebind_bench --layers 64 --reps 10 --json "$out/rebind.json" > /tmp/tpg-logs/rb.txt 2>&1
    tail -4 /tmp/tpg-logs/rb.txt ;;
  tpbench)
    timeout ${TPG_TPBENCH_TIMEOUT:-400} bash "$here/run.sh" tpbench ${TPG_TPBENCH_ARGS:-} --json "$out/tpbench.json" --svg "$out/tpbench.svg" --torch-script bench/torch_mlp.py > "$out/tpbench.txt" 2>&1
    tail -12 "$out/tpbench.txt" ;;
  decode)
    # Not a default stage: 128 greedy tokens, host loop vs one launch of the device
    # loop (a conditional WHILE around the whole step), TP 2; tokens must be identical.
    for cfg in 8b 70b; do for b in 1 8; do
      LD_LIBRARY_PATH="$here/bin${cb:+:$cb}:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
        timeout 300 bash "$here/run.sh" llama --config $cfg --layers 4 --tp 2 --lm-head --decode 128 --batch $b \
        > "/tmp/tpg-logs/decode_${cfg}_b$b.txt" 2>&1
      echo "decode $cfg batch $b (rc $?):"; grep -E "^decode|llama" "/tmp/tpg-logs/decode_${cfg}_b$b.txt" | cut -c1-260
    done; done ;;
  pybind)
    # From the repository copy beside .gpu: the package as ./python has it.
    top=$(cd "$here/.." && pwd)
    if python3 -c 'import pytest' 2> /dev/null; then
      (cd /tmp && TPGRAPH_LIBRARY="$here/bin/libtpgraph.so" TPGRAPH_INCLUDE="$top/lib" PYTHONPATH="$top/python" \
        timeout 300 python3 -m pytest -q -s -p no:cacheprovider "$top/python/tests/test_bindings.py" \
        "$top/python/tests/test_gpu_bindings.py") > "$out/pybind.txt" 2>&1
    else
      TPGRAPH_LIBRARY="$here/bin/libtpgraph.so" PYTHONPATH="$top/python" \
        timeout 300 python3 "$top/python/tests/test_gpu_bindings.py" > "$out/pybind.txt" 2>&1
    fi
    echo "python binding tests (rc $?):"
    grep -E "^(python binding test|create +graph|PROBLEM|note)|passed|failed" "$out/pybind.txt" | cut -c1-240 ;;
  *) echo "unknown stage $st" ;;
  esac
done
