#!/usr/bin/env bash
# Promise: greedy decoding with speculation (draft model or n-gram lookup, k = 1..8, fixed or
# adaptive k) prints exactly the ids of greedy decoding without it, token for token.
set -euo pipefail
B=${SOL_BUILD:?}
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
"$B/tools/sol-mkmodel" -o "$work/t.gguf" --layers 3 --seed 11 >/dev/null 2>&1
"$B/tools/sol-mkmodel" --draft-of "$work/t.gguf" --layers 1 -o "$work/d1.gguf" >/dev/null 2>&1
"$B/tools/sol-mkmodel" --draft-of "$work/t.gguf" --layers 3 --type q8_0 -o "$work/d3.gguf" >/dev/null 2>&1
gen() { "$B/tools/sol-generate" -m "$work/t.gguf" --prompt-tokens "$P" -n 48 --temp 0 --tokens --threads 1 "$@"; }
fail=0
# The second prompt repeats itself so n-gram lookup finds matches (accepted and rejected).
for P in 1,15,27,300,42,7,99,128,5,260,311 1,40,41,42,43,44,40,41,42,43,44,40,41; do
  gen >"$work/base.ids" 2>/dev/null
  for k in 1 2 3 4 5 6 7 8; do
    for mode in "--spec ngram" "--draft-model $work/d1.gguf" "--draft-model $work/d3.gguf"; do
      # shellcheck disable=SC2086
      gen $mode --spec-k $k >"$work/s.ids" 2>"$work/s.err" || { cat "$work/s.err"; exit 1; }
      if ! cmp -s "$work/base.ids" "$work/s.ids"; then
        echo "FAIL prompt $P k=$k $mode: ids differ"; fail=1
      fi
    done
  done
  gen --spec ngram --spec-k 8 --spec-adaptive >"$work/s.ids" 2>/dev/null
  cmp -s "$work/base.ids" "$work/s.ids" || { echo "FAIL adaptive ngram"; fail=1; }
  gen --draft-model "$work/d3.gguf" --spec-k 8 --spec-adaptive >"$work/s.ids" 2>"$work/s.err"
  cmp -s "$work/base.ids" "$work/s.ids" || { echo "FAIL adaptive draft"; fail=1; }
  grep -q "acceptance" "$work/s.err" || { echo "FAIL: no acceptance figures on stderr"; fail=1; }
done
[ "$fail" -eq 0 ] && echo "ok: speculative greedy == greedy for k=1..8, ngram and draft models"
exit $fail
