#!/bin/sh
# Build the benchmark outside Bazel (development): bench/build.sh OUTDIR
# (EXTRA=-DTPG_SM90_TRACE: the timeline build behind gemm_bench --zoo --trace)
set -e
out=${1:-.kdev}
NVCC=${NVCC:-/usr/local/cuda/bin/nvcc}
mkdir -p "$out"
gcc -std=c11 -O2 -Wall -I. -c lib/gemm/select.c -o "$out/gemm_select.o"
$NVCC -std=c++17 -O3 -I. -lineinfo -Xptxas -v ${EXTRA:-} \
  -gencode=arch=compute_90a,code=sm_90a \
  -cudart static -o "$out/gemm_bench" bench/gemm_bench.cu "$out/gemm_select.o" -lcublas -lcublasLt 2> "$out/ptxas.txt" || { cat "$out/ptxas.txt"; exit 1; }
