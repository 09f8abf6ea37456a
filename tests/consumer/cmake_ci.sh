#!/usr/bin/env bash
# cmake_ci.sh - CI's CMake pass (.ci/run): configure, build and install
# tpgraph with CMake the way a packager does — configured for the default
# prefix, installed with `cmake --install --prefix` into a temporary folder,
# then moved elsewhere — check that nothing installed names this machine
# (build folders, the CUDA toolkit, NCCL), what the library exports and
# needs, then build and run the consumers from the moved prefix (run.sh).
# One line per check, "cmake: <check>: ok" or "cmake: <check>: FAILED", for
# .ci/run to count.
#
#   tests/consumer/cmake_ci.sh [PREBUILT_KERNEL_DIR]
#
# With PREBUILT_KERNEL_DIR (Bazel's bazel-bin/kernels) the install embeds those
# fatbins, so CI compiles the kernels once; nvcc is still exercised by a
# second, build-only configuration for one SASS target (sm_80, ~40 s).
set -uo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
prebuilt=${1:-}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fails=0
ok() { echo "cmake: $1: ok${2:+ ($2)}"; }
bad() { echo "cmake: $1: FAILED${3:+ ($3)}"; [ -f "${2:-}" ] && tail -n 40 "$2"; fails=$((fails + 1)); }

gen=()
command -v ninja > /dev/null && gen=(-G Ninja)
pre=()
[ -n "$prebuilt" ] && pre=(-DTPGRAPH_PREBUILT_KERNELS="$prebuilt")
# No CMAKE_INSTALL_PREFIX: configured for /usr/local, installed elsewhere.
stage=$work/stage
if cmake -S "$top" -B "$work/build" "${gen[@]}" "${pre[@]}" > "$work/b.log" 2>&1 &&
   cmake --build "$work/build" -j 2 >> "$work/b.log" 2>&1 &&
   cmake --install "$work/build" --prefix "$stage" >> "$work/b.log" 2>&1; then
  ok "build+install --prefix" "${prebuilt:+prebuilt kernels}"
else
  bad "build+install --prefix" "$work/b.log"
  echo "cmake: the consumers need the install: skipped"
  exit 1
fi
# Relocated: the packages must find themselves wherever they are.
prefix=$work/elsewhere/tpgraph
mkdir -p "$work/elsewhere" && mv "$stage" "$prefix"

# Nothing installed may name a path of the build machine: the staging prefix,
# the build or source folder, /usr/local (the configured prefix), the CUDA
# toolkit or NCCL.
nccl_dir=$(dirname "$(readlink -f "$(ldconfig -p 2>/dev/null | sed -n 's/.*libnccl.so.2 .*=> //p' | head -n 1)" 2>/dev/null)" 2>/dev/null)
paths=("$stage" "$work/build" "$top" /usr/local "$(readlink -f /usr/local/cuda 2>/dev/null)" ${nccl_dir:+"$nccl_dir"})
hits=$(grep -rlF "${paths[@]/#/-e}" "$prefix"/lib*/cmake "$prefix"/lib*/pkgconfig 2>/dev/null)
if [ -z "$hits" ]; then
  ok "no build-machine paths" "cmake + pkg-config files"
else
  for f in $hits; do grep -nF "${paths[@]/#/-e}" "$f" | sed "s|^|$f: |"; done
  bad "no build-machine paths"
fi

lib=$(ls "$prefix"/lib*/libtpgraph.so.*.*.* 2>/dev/null | head -n 1)
soname=$(readelf -d "$lib" | sed -n 's/.*SONAME.*\[\(.*\)\]/\1/p')
needed=$(readelf -d "$lib" | sed -n 's/.*NEEDED.*\[\(.*\)\]/\1/p' | tr '\n' ' ')
# The installed library exports exactly the header's functions.
grep -oE 'TPG_API [^;]*' "$top/lib/tpgraph.h" | grep -oE '\btpg_[a-z0-9_]+ *\(' | tr -d ' (' | sort -u > "$work/hdr"
nm -D --defined-only "$lib" | awk '{print $3}' | sort -u > "$work/exp"
if [ -s "$work/hdr" ] && diff "$work/hdr" "$work/exp" > "$work/diff"; then
  ok "exports = header" "$(wc -l < "$work/exp") functions, soname $soname, needs $needed"
else
  echo "< header only, > exported only:"; cat "$work/diff"; bad "exports = header"
fi
# The SONAME rule Bazel's library follows too (lib/version.bzl): major.minor
# of the header; nothing of CUDA or NCCL needed (loaded at run time).
maj=$(sed -nE 's/^#define TPG_VERSION_MAJOR ([0-9]+).*/\1/p' "$top/lib/tpgraph.h")
min=$(sed -nE 's/^#define TPG_VERSION_MINOR ([0-9]+).*/\1/p' "$top/lib/tpgraph.h")
case "$soname:$needed" in
  *libstdc++* | *nccl* | *libcuda* | *cudart*) bad "soname+deps" "" "$soname: $needed";;
  "libtpgraph.so.$maj.$min:"*) ok "soname+deps" "$soname, no CUDA or NCCL";;
  *) bad "soname+deps" "" "$soname, expected libtpgraph.so.$maj.$min";;
esac

if bash "$top/tests/consumer/run.sh" "$prefix" > "$work/c.log" 2>&1; then :; fi
sed 's/^consumer:/cmake: consumer/' "$work/c.log" | grep -E ': (ok|FAILED)' || true
fails=$((fails + $(grep -c 'FAILED' "$work/c.log" || true)))

if [ -n "$prebuilt" ]; then
  if cmake -S "$top" -B "$work/nvcc" "${gen[@]}" -DTPGRAPH_CUDA_ARCHS=sm_80 > "$work/n.log" 2>&1 &&
     cmake --build "$work/nvcc" -j 2 >> "$work/n.log" 2>&1; then
    ok "nvcc build (sm_80)"
  else
    bad "nvcc build (sm_80)" "$work/n.log"
  fi
fi
exit $((fails > 0))
