#!/usr/bin/env bash
# cmake_ci.sh - CI's CMake pass (.ci/run): configure, build and install
# tpgraph with CMake into a temporary prefix, check what the installed
# library exports, then build and run the consumers (run.sh). One line per
# check, "cmake: <check>: ok" or "cmake: <check>: FAILED", for .ci/run to count.
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
bad() { echo "cmake: $1: FAILED"; [ -f "${2:-}" ] && tail -n 40 "$2"; fails=$((fails + 1)); }

gen=()
command -v ninja > /dev/null && gen=(-G Ninja)
pre=()
[ -n "$prebuilt" ] && pre=(-DTPGRAPH_PREBUILT_KERNELS="$prebuilt")
prefix=$work/prefix
if cmake -S "$top" -B "$work/build" "${gen[@]}" -DCMAKE_INSTALL_PREFIX="$prefix" "${pre[@]}" > "$work/b.log" 2>&1 &&
   cmake --build "$work/build" -j 2 >> "$work/b.log" 2>&1 && cmake --install "$work/build" >> "$work/b.log" 2>&1; then
  ok "build+install" "${prebuilt:+prebuilt kernels}"
else
  bad "build+install" "$work/b.log"
  echo "cmake: the consumers need the install: skipped"
  exit 1
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
case "$soname:$needed" in
  libtpgraph.so.[0-9]*.[0-9]*:*libstdc++*) bad "soname+deps";;
  libtpgraph.so.[0-9]*.[0-9]*:*) ok "soname+deps";;
  *) bad "soname+deps";;
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
