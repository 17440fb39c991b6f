#!/usr/bin/env bash
# Promise: Sol's forward pass matches llama.cpp on the same GGUF file — for three model shapes
# (GQA, multi-head, odd vocab) and every weight type, greedy ids are identical for 32 steps and the
# last prompt position's logits agree within 1e-3 relative L2 (F32) or 1e-2 (other types).
# Known gap: with Q8_0 weights llama.cpp's decode drifts from Sol's after a few steps although
# the logits agree within 1e-2 and Sol's Q8_0 matmul equals the exact quantized-activation math to
# 1e-7 (docs/benchmarks.md, "llama.cpp equivalence"); Q8_0 ids are required to agree for
# Q8_IDS steps only, and the gap is reported on every run.
set -euo pipefail
B=${SOL_BUILD:?}; S=${SOL_SOURCE:?}
peer=$S/tests/peer
if [ ! -d "$peer/node_modules/node-llama-cpp" ]; then
  if [ "${CI:-}" = true ]; then echo "FAIL: node-llama-cpp missing (scripts/setup installs it)"; exit 1; fi
  echo "SKIP: node-llama-cpp is not installed (run scripts/setup)"; exit 0
fi
work=${PEER_WORK:-$(mktemp -d)}; [ -n "${PEER_WORK:-}" ] || trap 'rm -rf "$work"' EXIT; mkdir -p "$work"
N=32
Q8_IDS=6
PROMPT=1,15,27,300,42,7,99,128,5,260,311

# name: mkmodel shape flags
shapes=(
  "gqa:--dim 64 --layers 2 --heads 4 --kv-heads 2 --ffn 192 --vocab 512 --ctx 256"
  "mha:--dim 128 --layers 3 --heads 4 --kv-heads 4 --ffn 320 --vocab 777 --ctx 256"
  "odd:--dim 96 --layers 2 --heads 3 --kv-heads 1 --ffn 256 --vocab 1001 --ctx 256"
)
types=(f32 f16 bf16 q8_0 q4_0)

jobs="["
for s in "${shapes[@]}"; do
  name=${s%%:*}; flags=${s#*:}
  for t in "${types[@]}"; do
    m=$work/$name-$t.gguf
    # shellcheck disable=SC2086
    "$B/tools/sol-mkmodel" -o "$m" $flags --type "$t" --seed 7 >/dev/null 2>&1
    "$B/tools/sol-generate" -m "$m" --prompt-tokens "$PROMPT" -n $N --temp 0 --tokens \
      --threads 2 --logits "$work/$name-$t.sol.json" >"$work/$name-$t.sol.ids" 2>"$work/$name-$t.err" \
      || { cat "$work/$name-$t.err"; exit 1; }
    jobs+="{\"model\":\"$m\",\"tokens\":[$PROMPT],\"n\":$N,\"out\":\"$work/$name-$t.ref.ids\",\"logits\":\"$work/$name-$t.ref.json\"},"
  done
done
echo "${jobs%,}]" >"$work/jobs.json"
node "$peer/llamacpp_ref.mjs" "$work/jobs.json"

pass=0; fail=0
for s in "${shapes[@]}"; do
  name=${s%%:*}
  for t in "${types[@]}"; do
    tol=0.01; [ "$t" = f32 ] && tol=0.001
    want=$N; [ "$t" = q8_0 ] && want=$Q8_IDS
    same=$(paste -d' ' "$work/$name-$t.sol.ids" "$work/$name-$t.ref.ids" | awk '$1 != $2 {print NR - 1; f = 1; exit} END {if (!f) print NR}')
    if [ "$same" -lt "$want" ]; then
      echo "FAIL $name $t: greedy ids differ"; paste "$work/$name-$t.sol.ids" "$work/$name-$t.ref.ids" | head -40
      fail=$((fail + 1)); continue
    fi
    rel=$(node -e '
      const fs = require("fs");
      const a = JSON.parse(fs.readFileSync(process.argv[1])), b = JSON.parse(fs.readFileSync(process.argv[2]));
      if (a.length !== b.length) { console.log("len"); process.exit(0); }
      let d = 0, n = 0;
      for (let i = 0; i < a.length; i++) { d += (a[i] - b[i]) ** 2; n += b[i] ** 2; }
      console.log(Math.sqrt(d / n).toExponential(3));' "$work/$name-$t.sol.json" "$work/$name-$t.ref.json")
    if [ "$rel" = len ] || ! node -e "process.exit(+process.argv[1] <= +process.argv[2] ? 0 : 1)" "$rel" "$tol"; then
      echo "FAIL $name $t: logits relative L2 $rel > $tol"; fail=$((fail + 1)); continue
    fi
    echo "ok   $name $t: $same of $N greedy ids identical (need $want), logits relative L2 $rel (limit $tol)"
    pass=$((pass + 1))
  done
done
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
