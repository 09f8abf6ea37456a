#!/usr/bin/env bash
# run.sh PREFIX - build and run the consumer program against a tpgraph
# installed in PREFIX, the two ways engines outside Bazel do it: CMake's
# find_package (shared and static targets) and pkg-config (plain cc), the
# latter once more with no NCCL to be found.
# Each program builds a plan, prints its DOT, and on a machine without a GPU
# must get the clear no-GPU error (consumer.c). Prints one line per program.
set -uo pipefail
prefix=$(readlink -f "$1")
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fails=0
check() {  # name, command...
  local name=$1; shift
  if "$@" > "$work/$name.log" 2>&1 && grep -q '^consumer: ok$' "$work/$name.log" &&
     grep -q '^digraph' "$work/$name.log"; then
    echo "consumer: $name: ok ($(grep -m1 -oE 'no GPU: TPG_[A-Z_]+|[0-9]+ GPU\(s\) visible' "$work/$name.log"))"
  else
    echo "consumer: $name: FAILED"; cat "$work/$name.log"; fails=$((fails + 1))
  fi
}

if cmake -S "$here/cmake" -B "$work/cmake" -DCMAKE_PREFIX_PATH="$prefix" > "$work/cmake.log" 2>&1 &&
   cmake --build "$work/cmake" >> "$work/cmake.log" 2>&1; then
  check find_package_shared "$work/cmake/consumer_shared"
  check find_package_static "$work/cmake/consumer_static"
else
  echo "consumer: find_package: FAILED to build"; cat "$work/cmake.log"; fails=$((fails + 2))
fi

export PKG_CONFIG_PATH="$prefix/lib/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
# shellcheck disable=SC2046
if cc -std=c11 -Wall -Wextra -Werror "$here/consumer.c" -o "$work/pc_consumer" $(pkg-config --cflags --libs tpgraph) \
     > "$work/pc.log" 2>&1; then
  check pkg_config env LD_LIBRARY_PATH="$prefix/lib" "$work/pc_consumer"
  # NCCL is loaded only for a communicator: a program that makes none runs
  # on a machine without it.
  check pkg_config_no_nccl env LD_LIBRARY_PATH="$prefix/lib" TPG_LIBNCCL=/nonexistent/libnccl.so.2 "$work/pc_consumer"
else
  echo "consumer: pkg_config: FAILED to build"; cat "$work/pc.log"; fails=$((fails + 1))
fi
exit $((fails > 0))
