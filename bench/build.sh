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
# the selector and its families (not the tuner, which needs the library's core)
objs=""
for f in lib/gemm/*.c; do
  case "$f" in */tune*.c|*/cutlass_rt_stubs.c) continue ;; esac
  o="$out/$(basename "$f" .c).o"
  gcc -std=c11 -O2 -Wall -I. -I/usr/local/cuda/include -c "$f" -o "$o"
  objs="$objs $o"
done
# CUTLASS's host code (the selector names its launches); this program links the runtime anyway
$NVCC -std=c++17 -O2 -c -x cu -I. -I"$CUTLASS_INC" -DNDEBUG -DCUTLASS_ENABLE_DIRECT_CUDA_DRIVER_CALL=1 \
  --expt-relaxed-constexpr -gencode=arch=compute_90a,code=compute_90a lib/gemm/cutlass_params.cu -o "$out/cutlass_params.o"
$NVCC -std=c++17 -O3 -I. -lineinfo -Xptxas -v ${EXTRA:-} \
  -gencode=arch=compute_90a,code=sm_90a \
  -cudart static -o "$out/gemm_bench" bench/gemm_bench.cu $objs "$out/cutlass_params.o" \
  -lcublas -lcublasLt 2> "$out/ptxas.txt" || { cat "$out/ptxas.txt"; exit 1; }
