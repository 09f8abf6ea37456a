#!/bin/sh
# Build the benchmark outside Bazel (development): bench/build.sh OUTDIR
# (EXTRA=-DTPG_SM90_TRACE: the timeline build behind gemm_bench --zoo --trace)
# Without the library's embedded fatbins (Bazel's //kernels:device_code) this
# gemm_bench has no CUTLASS kernels: it says so and checks and times ours only.
set -e
out=${1:-.kdev}
NVCC=${NVCC:-/usr/local/cuda/bin/nvcc}
CUTLASS_INC=${TPG_CUTLASS_HOME:-$HOME/.cache/tpgraph/cutlass-4.2.0.0}/cutlass_library/source/include
mkdir -p "$out"
for f in select family; do gcc -std=c11 -O2 -Wall -I. -I/usr/local/cuda/include -c lib/gemm/$f.c -o "$out/$f.o"; done
# CUTLASS's host code (the selector names its launches); this program links the runtime anyway
$NVCC -std=c++17 -O2 -c -x cu -I. -I"$CUTLASS_INC" -DNDEBUG -DCUTLASS_ENABLE_DIRECT_CUDA_DRIVER_CALL=1 \
  --expt-relaxed-constexpr -gencode=arch=compute_90a,code=compute_90a lib/gemm/cutlass_params.cu -o "$out/cutlass_params.o"
$NVCC -std=c++17 -O3 -I. -lineinfo -Xptxas -v ${EXTRA:-} \
  -gencode=arch=compute_90a,code=sm_90a \
  -cudart static -o "$out/gemm_bench" bench/gemm_bench.cu "$out/select.o" "$out/family.o" "$out/cutlass_params.o" \
  -lcublas -lcublasLt 2> "$out/ptxas.txt" || { cat "$out/ptxas.txt"; exit 1; }
