#!/usr/bin/env bash
# check_exports.sh - the shared library exports exactly the public header's
# TPG_API functions: nothing internal leaks (a leaked symbol becomes ABI that
# engines can bind to), nothing declared is missing.
#
#   tools/check_exports.sh LIB.so HEADER [PENDING]
#
# PENDING (optional): functions the header declares ahead of their
# implementation, one name per line, '#' comments allowed; they must NOT be
# exported yet (a stale entry fails, so the list shrinks as they land).
# Prints every difference and exits 1 if there is one. Runs in CI as
# //tests/cpu:exports_test.
set -euo pipefail
lib=$1 hdr=$2 pending=${3:-/dev/null}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# Declared: "TPG_API <type> name(" on one line (the header's style).
grep -oE '^TPG_API[^(]*[^A-Za-z0-9_(]([a-z][a-z0-9_]*)\(' "$hdr" | sed -E 's/.*[^A-Za-z0-9_]([a-z][a-z0-9_]*)\($/\1/' \
  | sort -u > "$tmp/declared"
# Exported: every defined dynamic symbol that is not a toolchain one.
nm -D --defined-only "$lib" | awk '$2 ~ /^[TDRBVWiu]$/ {print $3}' | sed 's/@.*//' \
  | grep -vE '^(_init|_fini|__bss_start|_edata|_end|__.*)$' | sort -u > "$tmp/exported"
grep -vE '^\s*(#|$)' "$pending" | awk '{print $1}' | sort -u > "$tmp/pending" || true
comm -23 "$tmp/declared" "$tmp/pending" > "$tmp/want"
bad=0
while read -r s; do echo "check_exports: $s is exported but not declared TPG_API in $hdr (a leak)"; bad=1; done \
  < <(comm -13 "$tmp/declared" "$tmp/exported")
while read -r s; do echo "check_exports: $s is declared TPG_API in $hdr but not exported"; bad=1; done \
  < <(comm -23 "$tmp/want" "$tmp/exported")
while read -r s; do echo "check_exports: $s is listed as pending in $pending but is exported: drop it from the list"; bad=1; done \
  < <(comm -12 "$tmp/pending" "$tmp/exported")
echo "check_exports: $(wc -l < "$tmp/exported") exported, $(wc -l < "$tmp/declared") declared, $(wc -l < "$tmp/pending") pending"
exit $bad
