#!/usr/bin/env bash
# Promise: every binary Sol builds answers --help with a usage text and exit code 0, and rejects
# an unknown flag with a non-zero exit and a message (never a crash).
set -uo pipefail
B=${SOL_BUILD:?}
pass=0; fail=0
for f in "$B"/router/sol-* "$B"/worker/sol-* "$B"/tools/sol-* "$B"/bench/bench_*; do
  [ -x "$f" ] && [ -f "$f" ] || continue
  name=$(basename "$f")
  out=$(timeout 20 "$f" --help 2>&1); rc=$?
  if [ $rc -ne 0 ] || ! grep -qi "usage" <<<"$out"; then
    echo "FAIL $name --help: exit $rc"; echo "$out" | head -5; fail=$((fail + 1)); continue
  fi
  out=$(timeout 20 "$f" --definitely-not-a-flag 2>&1 </dev/null); rc=$?
  if [ $rc -eq 0 ] || [ $rc -ge 124 ] || [ -z "$out" ]; then
    echo "FAIL $name --definitely-not-a-flag: exit $rc (expected an error message)"; fail=$((fail + 1)); continue
  fi
  echo "ok   $name"; pass=$((pass + 1))
done
echo "$pass passed, $fail failed"
[ $fail -eq 0 ] && [ $pass -gt 0 ]
