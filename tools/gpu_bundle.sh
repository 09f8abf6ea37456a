#!/usr/bin/env bash
# gpu_bundle.sh - pack the GPU suite, benchmarks and the example for a GPU
# machine that has no Bazel, from a clean clone of HEAD.
#
#   tools/gpu_bundle.sh            # -> .gpu/ in this checkout; carry ".gpu"
#   # on the GPU machine, from the repository root:
#   bash .gpu/suite.sh [STAGE...]  # tests, example, faults, soak, benchmarks
#
# Why a clean clone: the working tree may hold half-written files of other
# engineers; the bundle must be exactly a commit. Runfiles are dropped (the
# binaries need none, and NCCL copies in them blow the 64 MiB carry limit);
# libtpgraph.so travels for the example engine.
set -euo pipefail
top=$(git rev-parse --show-toplevel)
tmp=${TPG_BUNDLE_CLONE:-/tmp/tpgraph-bundle}
if [ -d "$tmp/.git" ]; then git -C "$tmp" fetch -q "$top" HEAD && git -C "$tmp" checkout -q --detach FETCH_HEAD
else rm -rf "$tmp"; git clone -q "$top" "$tmp"; git -C "$tmp" checkout -q --detach "$(git -C "$top" rev-parse HEAD)"; fi
bundle=${GPU_BUNDLE:-$top/../shared/tools/gpu-bundle}
(cd "$tmp" && "$bundle" //tests/gpu:graph_test //tests/gpu:nccl_test //tests/gpu:mlp_test //tests/gpu:linear_test //tests/gpu:allreduce_test //tests/gpu:kit_test //tests/gpu:cond_test //tests/gpu:fault_test //tests/gpu:soak_test //tests/gpu:set_test //tests/gpu:gemm_lt_test //tests/gpu:workspace_test \
  //bench:tpbench //bench:allreduce_bench //bench:rebind_bench //bench:gemm_bench //bench:gemv_lab //bench:gemm_tune_bench //bench:set_bench //examples:engine \
  //examples/llama:llama //examples/llama:kernel_check //examples/llama:prefill_check //examples/llama:paged_check)
# fault_test and soak_test run on their own (suite.sh), not in run.sh's loop.
sed -i '/^fault_test$/d; /^soak_test$/d' "$tmp/.gpu/tests.txt"
rm -rf "$top/.gpu"
# Copy without the runfiles (copies of NCCL and cuBLAS per binary, ~5.8 GB
# in all): copying them first and deleting them after once filled the disk
# when a CI clone was building beside it. The clone's unpacked bundle goes too.
mkdir -p "$top/.gpu"
tar -C "$tmp/.gpu" --exclude='*.runfiles' -cf - . | tar -C "$top/.gpu" -xf -
rm -rf "$tmp/.gpu"
# The shared library under its SONAME (libtpgraph.so.MAJOR.MINOR, what the
# engine and the Llama example need) and the development name (ctypes).
so=libtpgraph.so.$(sed -nE 's/^#define TPG_VERSION_(MAJOR|MINOR) ([0-9]+).*/\2/p' "$tmp/lib/tpgraph.h" | paste -sd.)
cp -L "$tmp/bazel-bin/lib/$so" "$top/.gpu/bin/"
ln -sf "$so" "$top/.gpu/bin/libtpgraph.so"
cp "$top/tools/gpu_suite.sh" "$top/.gpu/suite.sh"
git -C "$tmp" rev-parse --short HEAD > "$top/.gpu/COMMIT"
# Every binary embeds the same kernel fatbins (~5 MB): one solid xz archive
# stores them once and keeps the bundle under the 64 MiB carry limit.
# suite.sh unpacks it.
tar -C "$top/.gpu" -cf - bin | xz -9e -T2 > "$top/.gpu/bin.tar.xz"
rm -rf "$top/.gpu/bin"
du -sh "$top/.gpu"
echo "gpu_bundle: commit $(cat "$top/.gpu/COMMIT"); carry \".gpu\" and run: bash .gpu/suite.sh"
