#!/usr/bin/env bash
# Promise: on the CUDA backend (cuda-emu here, SOL_TEST_CUDA_SPEC=cuda on a GPU), decode steps
# replayed as CUDA graphs (the default) give the ids and logits of an --enforce-eager run, bit for
# bit; after the first decode step of each size every one was replayed with no record (its
# launches matched the graph's, so it launched nothing itself), also while the context grows
# across attention's split boundary (120 to 132 positions: 1 then 2 splits per token); a new
# step size (speculative verify steps of 5 tokens between decode steps of 1) is recorded, and
# the old size replays again; bench_decode, which tests/gpu/run.sh times with, runs on the
# backend (no timing is checked). Split from cuda_emu_model.sh so that each stays well inside
# the test timeout under ASan.
set -euo pipefail
B=${SOL_BUILD:?}
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
P=1,15,27,300,42,7,99
# one layer of two heads: the 120-token prompt's prefill is the slow part under the emulation
"$B/tools/sol-mkmodel" -o "$work/f32.gguf" --dim 64 --heads 2 --kv-heads 1 --layers 1 --ffn 128 \
  --vocab 300 --seed 4 >/dev/null 2>&1
"$B/tools/sol-mkmodel" -o "$work/tiny.gguf" --preset tiny --seed 3 >/dev/null 2>&1
"$B/tools/sol-mkmodel" -o "$work/qwen3.gguf" --arch qwen3 --dim 256 --heads 4 --kv-heads 2 \
  --head-dim 64 --ffn 512 --layers 2 --vocab 600 --ctx 128 --seed 5 --type f16 >/dev/null 2>&1
"$B/tools/sol-quantize" "$work/qwen3.gguf" "$work/q4k.gguf" --type q4_k_m --quiet 2>/dev/null
DEV=${SOL_TEST_CUDA_SPEC:-cuda-emu}
fail=0
# "N steps replayed (R with no record, U updated in place, I instantiated)" of a run's stats line,
# and "A run again recorded" (dry steps that differed from their graph)
counts() {
  sed -n 's/.*cuda graphs on: \([0-9]*\) steps replayed (\([0-9]*\) with no record, \([0-9]*\) updated in place, \([0-9]*\) instantiated).* \([0-9]*\) run again recorded.*/\1 \2 \3 \4 \5/p' "$1"
}

# One model two ways, graphs (on by default) and --enforce-eager: the same ids and logits, bit
# for bit. Then every graph launch was a replay with no record except at most $4 recorded ones
# (the first decode step of each size, and one cut short while the scratch is sized), and no dry
# step differed from its graph (a growing context keeps the launches: none ran again).
compare() { # name model prompt recorded-at-most [options...]
  local name=$1 model=$2 prompt=$3 most=$4; shift 4
  "$B/tools/sol-generate" -m "$work/$model.gguf" --backend "$DEV" --prompt-tokens "$prompt" \
    --temp 0 --tokens --enforce-eager --logits "$work/$name.eager.json" "$@" \
    >"$work/$name.eager.ids" 2>"$work/eager.err" ||
    { echo "FAIL --enforce-eager $name: $(tail -3 "$work/eager.err")"; exit 1; }
  "$B/tools/sol-generate" -m "$work/$model.gguf" --backend "$DEV" --prompt-tokens "$prompt" \
    --temp 0 --tokens --logits "$work/$name.graph.json" "$@" \
    >"$work/$name.graph.ids" 2>"$work/$name.graph.err" ||
    { echo "FAIL graphs $name: $(tail -3 "$work/$name.graph.err")"; exit 1; }
  read -r steps none upd inst again <<<"$(counts "$work/$name.graph.err")"
  if ! cmp -s "$work/$name.eager.ids" "$work/$name.graph.ids" ||
     ! cmp -s "$work/$name.eager.json" "$work/$name.graph.json"; then
    echo "FAIL $name: graphs vs eager differ: $(grep 'cuda graphs' "$work/$name.graph.err")"; fail=1
  elif [ "${steps:-0}" -lt 7 ] || [ "$none" -ne $((steps - upd - inst)) ] ||
       [ $((upd + inst)) -gt "$most" ] || [ "$again" -ne 0 ]; then
    echo "FAIL $name: expected replays with no record after at most $most records: $(grep 'cuda graphs' "$work/$name.graph.err")"; fail=1
  else
    echo "ok   $name: $steps graph steps ($none replayed with no record, $((upd + inst)) recorded) give the eager run's ids and logits"
  fi
}

compare f32-split f32 "$(seq -s, 1 120)" 2 -n 12
compare q4k q4k "$P" 2 -n 8
# ngram speculation: verify steps of 5 tokens between decode steps of 1; the ids are the
# eager run's, a third graph is recorded for the new size, and the decode steps replay again
compare f32-spec tiny "1,2,3,4,5,6,7,8,1,2,3,4,5,6,7,8,1,2,3,4" 3 -n 16 --spec ngram
read -r steps none upd inst again <<<"$(counts "$work/f32-spec.graph.err")"
if [ $((upd + inst)) -lt 3 ]; then
  echo "FAIL f32-spec: a verify step size should have been recorded: $(grep 'cuda graphs' "$work/f32-spec.graph.err")"; fail=1
fi

# The benchmark GPU runs use works on the backend (no timing is checked).
"$B/bench/bench_decode" -m "$work/q4k.gguf" --backend "$DEV" --batch 1,3 --ctx 4 --steps 1 \
  --prefill 17 --measure-membw 1 >"$work/bench" 2>&1 ||
  { echo "FAIL bench_decode on $DEV: $(tail -3 "$work/bench")"; exit 1; }
grep -q "decode batch   3" "$work/bench" && grep -q "prefill 17 tokens" "$work/bench" ||
  { echo "FAIL bench_decode printed: $(cat "$work/bench")"; exit 1; }
echo "ok   bench_decode runs on $DEV"
exit $fail
