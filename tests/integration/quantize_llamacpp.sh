#!/usr/bin/env bash
# Promise: files written by sol-quantize (q8_0, q4_0 with the mixed default, q4_0 without it,
# q4_0 with --keep rules) load in llama.cpp, which decodes the same 32 greedy ids as Sol on them and
# whose last-prompt logits agree within 1e-2 relative L2. (llama.cpp rounds activations to q8_0
# before q4_0 dot products, so an exact near-tie can flip an argmax: seeds 5, 6, 8 and 9 of this shape have one
# (seed 5: at step 5, logit gap 0.003); seed 7 has none.)
set -euo pipefail
B=${SOL_BUILD:?}; S=${SOL_SOURCE:?}
. "$S/tests/peer/compare.sh"
require_peer
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
N=32; P=1,15,27,300,42,7,99,128,5,260,311
"$B/tools/sol-mkmodel" -o "$work/src.gguf" --dim 128 --layers 2 --heads 4 --kv-heads 2 --ffn 256 \
  --vocab 600 --type f16 --seed 7 >/dev/null 2>&1
variants=("q8_0:--type q8_0" "q4_0:--type q4_0" "q4_0-flat:--type q4_0 --no-mixed"
          "q4_0-keep:--type q4_0 --keep attn_output=q8_0 --keep blk.1.ffn_down*=f16")
jobs=""
for v in "${variants[@]}"; do
  name=${v%%:*}; flags=${v#*:}
  # shellcheck disable=SC2086
  "$B/tools/sol-quantize" "$work/src.gguf" "$work/$name.gguf" $flags --quiet 2>"$work/$name.qlog" \
    || { cat "$work/$name.qlog"; exit 1; }
  peer_next
  SOL_CPU_ISA=$pisa "$B/tools/sol-generate" -m "$work/$name.gguf" --prompt-tokens $P -n $N --temp 0 --tokens \
    --threads 2 --logits "$work/$name.sol.json" >"$work/$name.sol" 2>/dev/null
  jobs+="{\"cpu\":\"$pb\",\"model\":\"$work/$name.gguf\",\"tokens\":[$P],\"n\":$N,\"out\":\"$work/$name.ref\",\"logits\":\"$work/$name.ref.json\"},"
done
peer_run_jobs "$jobs"
fail=0
for v in "${variants[@]}"; do
  name=${v%%:*}
  rel=$(relL2 "$work/$name.sol.json" "$work/$name.ref.json")
  within "$rel" 0.01 || { echo "FAIL $name: logits differ (bad $rel)"; fail=1; }
  if cmp -s "$work/$name.sol" "$work/$name.ref"; then echo "ok   $name: $N greedy ids identical"
  else echo "FAIL $name: greedy ids differ"; paste "$work/$name.sol" "$work/$name.ref" | sed -n 1,10p; fail=1; fi
done
# Refusals: an already-quantized input, a pattern matching nothing, an unknown type.
expect_err() { if "$B/tools/sol-quantize" "$@" 2>"$work/err"; then echo "FAIL: accepted $*"; fail=1;
  elif ! grep -q "$1" "$work/err" 2>/dev/null && ! grep -qi "$EXPECT" "$work/err"; then
    echo "FAIL: unclear message for $*: $(cat "$work/err")"; fail=1; fi; }
EXPECT="already q8_0"; expect_err "$work/q8_0.gguf" "$work/x.gguf" --type q4_0
EXPECT="matches no tensor"; expect_err "$work/src.gguf" "$work/x.gguf" --type q4_0 --keep nope=f16
EXPECT="unknown type"; expect_err "$work/src.gguf" "$work/x.gguf" --type q4_0 --keep ffn=q3
EXPECT="expected q4_0, q8_0, q4_k_m, q5_k_m, q6_k or mxfp4_moe"; expect_err "$work/src.gguf" "$work/x.gguf" --type f16
exit $fail
