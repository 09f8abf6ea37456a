#!/usr/bin/env bash
# setup.sh - install what a fresh Debian/Ubuntu machine lacks to build and test
# tpgraph offline. Idempotent: run it as often as you like.
#
# Needs: Bazel (Debian's bazel-bootstrap 4.2.3), gcc/g++, the CUDA toolkit
# (nvcc, cuda.h, stub libcuda) and NCCL. The toolkit is not a Debian package
# of the right version: point CUDA_PATH / NCCL_HOME at it if it is not in
# /usr/local/cuda.
# For the reliability passes of CI (.ci/run): valgrind (tests/valgrind.sh),
# and clang with its sanitizer and libFuzzer runtimes (tests/fuzz/run.sh).
# Each package is installed only when what it provides is missing.
set -euo pipefail

need=()
command -v bazel >/dev/null 2>&1 || need+=(bazel-bootstrap)
command -v gcc >/dev/null 2>&1 || need+=(gcc)
command -v g++ >/dev/null 2>&1 || need+=(g++)
command -v valgrind >/dev/null 2>&1 || need+=(valgrind)
# CI's CMake, pkg-config and Python passes (tests/consumer, python/).
command -v cmake >/dev/null 2>&1 || need+=(cmake)
command -v pkg-config >/dev/null 2>&1 || need+=(pkgconf)
python3 -c 'import ensurepip, venv' >/dev/null 2>&1 || need+=(python3-venv)
# pip installs the pinned CUTLASS headers (below).
python3 -m pip --version >/dev/null 2>&1 || need+=(python3-pip)
if ! command -v clang >/dev/null 2>&1; then
  need+=(clang libclang-rt-14-dev)
else
  # clang without its runtimes links no -fsanitize=fuzzer program.
  probe=$(mktemp -d)
  echo 'int LLVMFuzzerTestOneInput(const unsigned char *d, unsigned long n) { (void)d; (void)n; return 0; }' > "$probe/p.c"
  clang -fsanitize=fuzzer,address,undefined "$probe/p.c" -o "$probe/p" >/dev/null 2>&1 ||
    need+=("libclang-rt-$(clang -dumpversion | cut -d. -f1)-dev")
  rm -rf "$probe"
fi
if [ ${#need[@]} -gt 0 ]; then
  echo "setup: installing ${need[*]}"
  SUDO=""
  [ "$(id -u)" = 0 ] || SUDO=sudo
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${need[@]}"
fi

cuda=${CUDA_PATH:-}
if [ -z "$cuda" ]; then
  if command -v nvcc >/dev/null 2>&1; then cuda=$(dirname "$(dirname "$(readlink -f "$(command -v nvcc)")")")
  else cuda=/usr/local/cuda; fi
fi
if [ ! -x "$cuda/bin/nvcc" ] || [ ! -f "$cuda/include/cuda.h" ]; then
  echo "setup: no CUDA toolkit at $cuda (bin/nvcc, include/cuda.h). Install CUDA 12.3+ and set CUDA_PATH." >&2
  exit 1
fi
nccl_h=""
for d in "${NCCL_HOME:-/nonexistent}/include" "$cuda/include" /usr/include; do
  [ -f "$d/nccl.h" ] && { nccl_h=$d/nccl.h; break; }
done
if [ -z "$nccl_h" ]; then
  echo "setup: nccl.h not found (NCCL_HOME, $cuda/include, /usr/include). Install NCCL 2.19+ and set NCCL_HOME." >&2
  exit 1
fi
# CUTLASS's headers (the Hopper GEMM candidates; third_party/cutlass/README.md):
# the pinned wheel, hash-checked by pip, into $TPG_CUTLASS_HOME once. Bazel
# (third_party/cutlass/cutlass_configure.bzl) and CMake look there.
cutlass_home=${TPG_CUTLASS_HOME:-$HOME/.cache/tpgraph/cutlass-4.2.0.0}
cutlass_inc=$cutlass_home/cutlass_library/source/include
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
if ! grep -qs 'define CUTLASS_MINOR 2' "$cutlass_inc/cutlass/version.h" ||
   ! grep -qs 'define CUTLASS_MAJOR 4' "$cutlass_inc/cutlass/version.h"; then
  echo "setup: installing CUTLASS 4.2.0 headers (nvidia-cutlass==4.2.0.0) into $cutlass_home"
  rm -rf "$cutlass_home.tmp"
  python3 -m pip install -q --disable-pip-version-check --root-user-action=ignore --no-deps --no-compile --require-hashes \
    --target "$cutlass_home.tmp" -r "$here/third_party/cutlass/requirements.txt"
  rm -rf "$cutlass_home" && mv "$cutlass_home.tmp" "$cutlass_home"
fi
[ -f "$cutlass_inc/cute/tensor.hpp" ] || { echo "setup: CUTLASS headers missing under $cutlass_inc" >&2; exit 1; }

bz=$(dpkg-query -W -f='${Version}' bazel-bootstrap 2>/dev/null || echo "?")
ver=$("$cuda/bin/nvcc" --version | sed -n 's/.*release \([0-9.]*\).*/\1/p')
echo "setup: bazel-bootstrap $bz, CUDA $ver at $cuda, nccl.h at $nccl_h, CUTLASS 4.2.0 at $cutlass_inc"
echo "setup: $(clang --version | head -1), $(valgrind --version)"
