#!/usr/bin/env bash
# soname_test.sh - the one SONAME rule (lib/version.bzl, CMakeLists.txt):
# Bazel's shared library is named libtpgraph.so.MAJOR.MINOR, from the
# header's version, and so is its SONAME; it needs nothing of CUDA or NCCL
# (both are loaded at run time); and a program linked against it through
# //lib:tpgraph_shared finds it at run time. cmake_ci.sh checks the
# installed library by the same rule.
#
#   soname_test.sh LIB HEADER LINKED_PROGRAM
set -uo pipefail
lib=$1 hdr=$2 prog=$3
fails=0
ok() { echo "soname: $1: ok"; }
bad() { echo "soname: $1: FAILED ($2)"; fails=$((fails + 1)); }
maj=$(sed -nE 's/^#define TPG_VERSION_MAJOR ([0-9]+).*/\1/p' "$hdr")
min=$(sed -nE 's/^#define TPG_VERSION_MINOR ([0-9]+).*/\1/p' "$hdr")
want="libtpgraph.so.$maj.$min"
soname=$(readelf -d "$lib" | sed -n 's/.*SONAME.*\[\(.*\)\]/\1/p')
needed=$(readelf -d "$lib" | sed -n 's/.*NEEDED.*\[\(.*\)\]/\1/p' | tr '\n' ' ')
[ "$(basename "$(readlink -f "$lib")")" = "$want" ] || [ "$(basename "$lib")" = "$want" ] && ok "file name $want" ||
  bad "file name" "$(basename "$lib"), the header says $want: update lib/version.bzl"
[ "$soname" = "$want" ] && ok "SONAME $soname" || bad "SONAME" "$soname, expected $want"
case "$needed" in
  *nccl* | *libcuda* | *cudart* | *libstdc++*) bad "needs" "$needed";;
  *) ok "needs only $needed";;
esac
if out=$("$prog" 2>&1) && echo "$out" | grep -q "^linked: ok"; then ok "a program linked through //lib:tpgraph_shared runs ($out)"
else bad "linked program" "$out"; fi
echo "$((4 - fails)) passed, $fails failed"
exit $((fails > 0))
