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
bz=$(dpkg-query -W -f='${Version}' bazel-bootstrap 2>/dev/null || echo "?")
ver=$("$cuda/bin/nvcc" --version | sed -n 's/.*release \([0-9.]*\).*/\1/p')
echo "setup: bazel-bootstrap $bz, CUDA $ver at $cuda, nccl.h at $nccl_h"
echo "setup: $(clang --version | head -1), $(valgrind --version)"
