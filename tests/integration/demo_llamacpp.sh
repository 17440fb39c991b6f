#!/usr/bin/env bash
# Promise: the committed demo models (models/demo: trained here, see its README) run in Sol as in
# llama.cpp: the tokenizer gives llama.cpp's ids on the first 300 lines of the held-out text, and
# greedy generation from a text prompt gives llama.cpp's ids for 48 steps on the F16 target, its
# Q4_0 (sol-quantize) and the F16 draft in both of Sol's attention modes (the default and the
# llama.cpp-compatible one), with the last prompt position's logits within 1e-2 relative L2.
set -euo pipefail
B=${SOL_BUILD:?}; S=${SOL_SOURCE:?}
. "$S/tests/peer/compare.sh"
require_peer
peer_workdir
D=$S/models/demo; N=48

head -300 "$D/heldout.txt" | grep . >"$work/lines.txt"
"$B/tools/sol-tokenize" -m "$D/demo-target-f16.gguf" --no-bos <"$work/lines.txt" >"$work/sol.tok"
node "$peer/tokenize.mjs" --model "$D/demo-target-f16.gguf" <"$work/lines.txt" >"$work/ref.tok"
cmp -s "$work/sol.tok" "$work/ref.tok" ||
  { echo "FAIL tokenizer: $(diff "$work/sol.tok" "$work/ref.tok" | head -4)"; exit 1; }
echo "ok   tokenizer: $(wc -l <"$work/lines.txt") held-out lines, ids identical"

"$B/tools/sol-quantize" "$D/demo-target-f16.gguf" "$work/target-q4_0.gguf" --type q4_0 --quiet
models=("target-f16:$D/demo-target-f16.gguf" "target-q4_0:$work/target-q4_0.gguf"
        "draft-f16:$D/demo-draft-f16.gguf")
prompt=$(printf 'And God said, Let there be light' | "$B/tools/sol-tokenize" -m "$D/demo-target-f16.gguf" --no-bos | tr ' ' ',')
jobs=""
for e in "${models[@]}"; do
  name=${e%%:*}; m=${e#*:}
  peer_next
  for mode in exact llamacpp; do
    SOL_CPU_ISA=$pisa SOL_CPU_ATTN=$mode "$B/tools/sol-generate" -m "$m" --prompt-tokens "$prompt" -n $N --temp 0 \
      --tokens --threads 2 --logits "$work/$name.$mode.json" >"$work/$name.$mode.ids" 2>"$work/$name.err" ||
      { cat "$work/$name.err"; exit 1; }
  done
  jobs+="{\"cpu\":\"$pb\",\"model\":\"$m\",\"tokens\":[$prompt],\"n\":$N,\"out\":\"$work/$name.ref.ids\",\"logits\":\"$work/$name.ref.json\"},"
done
peer_run_jobs "$jobs"

fails=0
for e in "${models[@]}"; do
  name=${e%%:*}; ref=$work/$name.ref
  ci=$(same_prefix "$work/$name.llamacpp.ids" "$ref.ids"); cr=$(relL2 "$work/$name.llamacpp.json" "$ref.json")
  ei=$(same_prefix "$work/$name.exact.ids" "$ref.ids"); er=$(relL2 "$work/$name.exact.json" "$ref.json")
  line="$name: llama.cpp-compatible $ci/$N ids, logits $cr; default $ei/$N ids, logits $er (limit 1e-2)"
  if [ "$ci" -lt $N ] || [ "$ei" -lt $N ] || ! within "$cr" 0.01 || ! within "$er" 0.01; then
    echo "FAIL $line"; fails=$((fails + 1))
  else
    echo "ok   $line"
  fi
done
[ "$fails" -eq 0 ]
