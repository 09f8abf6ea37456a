#!/usr/bin/env bash
# bench_flags_test.sh - llama's --bench flags on a CPU (no GPU is touched):
# --help lists them; every bad combination is refused with exit 2 and a
# message naming the flag; good ones pass the checks and stop at "no GPU
# here" (exit 1; TPG_LIBCUDA points nowhere, so this holds on a GPU machine
# too).
#
#   bench_flags_test.sh LLAMA
set -uo pipefail
llama=$1
export TPG_LIBCUDA=/nonexistent/libcuda.so.1
pass=0 fail=0

# expect RC TEXT FLAGS...: llama FLAGS exits RC and prints TEXT.
expect() {
  local want=$1 text=$2; shift 2
  local out rc
  [ -n "$text" ] || { fail=$((fail + 1)); echo "FAIL: an empty expected text for llama $*"; return; }
  out=$("$llama" "$@" 2>&1)
  rc=$?
  if [ "$rc" -eq "$want" ] && grep -qF -- "$text" <<< "$out"; then
    pass=$((pass + 1))
  else
    fail=$((fail + 1))
    echo "FAIL: llama $*: exit $rc (want $want), output:"; sed 's/^/    /' <<< "$out" | head -5
    echo "    (wanted to see: $text)"
  fi
}

for flag in "--sweep [GRID]" "--whole" "--config 8b|70b|1b" "1..256 with --bench"; do
  expect 0 "$flag" --help
done
nogpu="no GPU here"
# Good: parsed and checked, then no GPU.
expect 1 "$nogpu" --bench --sweep
expect 1 "$nogpu" --bench --sweep small
expect 1 "$nogpu" --bench --sweep full --config 70b
expect 1 "$nogpu" --sweep=1,8,256x0,512,8191 --bench
expect 1 "$nogpu" --bench --sweep 64x2048 --tp 1
expect 1 "$nogpu" --bench --whole --config 1b
expect 1 "$nogpu" --bench --whole --sweep 1,8x512
expect 1 "$nogpu" --bench --batch 256 --ctx 4096
expect 1 "$nogpu" --config 1b --layers 2 --bench --attn tc
# Refused: exit 2 with the reason.
for g in 1,8x 0x512 257x512 1x8192 x512 1,,8x512 1x-5 " 1x512" "+1x512" 1 medium 8x512x1; do
  expect 2 "--sweep '$g': expected full, small or BATCHES x CTXS" --bench --sweep "$g"
done
expect 2 "--sweep needs --bench" --sweep
expect 2 "--sweep needs --bench" --sweep small
expect 2 "--whole needs --bench" --whole
expect 2 "--whole runs every layer of --config; it does not go with --layers" --bench --whole --layers 4
expect 2 "--whole runs --config's model; it does not go with --weights" --bench --whole --weights /tmp
expect 2 "--sweep sets batch and ctx" --bench --sweep --batch 8
expect 2 "--sweep sets batch and ctx" --bench --ctx 100 --sweep small
expect 2 "--batch 65: 1..64 (up to 256 with --bench)" --batch 65
expect 2 "--batch '257': expected an integer in 1..256" --bench --batch 257
expect 2 "--config '3b': expected 8b, 70b or 1b" --config 3b
expect 2 "--attn fma: head_dim 128 only" --config 1b --attn fma --bench
expect 2 "unexpected argument 'extra'" --bench --sweep small extra
expect 2 "--whole does not go with --model" --model /nonexistent --prompt-ids 1 --whole
expect 2 "--sweep does not go with --model" --model /nonexistent --prompt-ids 1 --sweep
echo "bench_flags_test: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
