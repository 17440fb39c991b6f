#!/usr/bin/env bash
# Promise: on the CUDA backend (cuda-emu here, SOL_TEST_CUDA_SPEC=cuda on a GPU), decode steps
# replayed as CUDA graphs (the default) give the ids of an --enforce-eager run, bit for bit, and
# every decode step after the first was replayed; bench_decode, which tests/gpu/run.sh times
# with, runs on the backend (no timing is checked). Split from cuda_emu_model.sh so that each
# stays well inside the test timeout under ASan.
set -euo pipefail
B=${SOL_BUILD:?}
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
P=1,15,27,300,42,7,99
"$B/tools/sol-mkmodel" -o "$work/f32.gguf" --preset tiny --seed 3 >/dev/null 2>&1
"$B/tools/sol-mkmodel" -o "$work/qwen3.gguf" --arch qwen3 --dim 256 --heads 4 --kv-heads 2 \
  --head-dim 64 --ffn 512 --layers 2 --vocab 600 --ctx 128 --seed 5 --type f16 >/dev/null 2>&1
"$B/tools/sol-quantize" "$work/qwen3.gguf" "$work/q4k.gguf" --type q4_k_m --quiet 2>/dev/null
DEV=${SOL_TEST_CUDA_SPEC:-cuda-emu}
fail=0
# CUDA graphs (on by default) against --enforce-eager: the same ids and logits, bit for bit; the
# decode steps were replayed as graphs.
for m in f32 q4k; do
  "$B/tools/sol-generate" -m "$work/$m.gguf" --backend "$DEV" --prompt-tokens "$P" -n 8 --temp 0 \
    --tokens --enforce-eager --logits "$work/$m.eager.json" >"$work/$m.eager.ids" 2>"$work/eager.err" ||
    { echo "FAIL --enforce-eager $m: $(tail -3 "$work/eager.err")"; exit 1; }
  "$B/tools/sol-generate" -m "$work/$m.gguf" --backend "$DEV" --prompt-tokens "$P" -n 8 --temp 0 \
    --tokens --logits "$work/$m.graph.json" >"$work/$m.graph.ids" 2>"$work/graph.err" ||
    { echo "FAIL graphs $m: $(tail -3 "$work/graph.err")"; exit 1; }
  steps=$(sed -n 's/.*cuda graphs on: \([0-9]*\) steps replayed.*/\1/p' "$work/graph.err")
  if cmp -s "$work/$m.eager.ids" "$work/$m.graph.ids" && cmp -s "$work/$m.eager.json" "$work/$m.graph.json" &&
     [ "${steps:-0}" -ge 7 ]; then
    echo "ok   $m: CUDA graphs ($steps decode steps replayed) give the eager run's ids and logits"
  else
    echo "FAIL $m: graphs vs eager: $(grep 'cuda graphs' "$work/graph.err")"; fail=1
  fi
done

# The benchmark GPU runs use works on the backend (no timing is checked).
"$B/bench/bench_decode" -m "$work/q4k.gguf" --backend "$DEV" --batch 1,3 --ctx 4 --steps 1 \
  --prefill 17 --measure-membw 1 >"$work/bench" 2>&1 ||
  { echo "FAIL bench_decode on $DEV: $(tail -3 "$work/bench")"; exit 1; }
grep -q "decode batch   3" "$work/bench" && grep -q "prefill 17 tokens" "$work/bench" ||
  { echo "FAIL bench_decode printed: $(cat "$work/bench")"; exit 1; }
echo "ok   bench_decode runs on $DEV"
exit $fail
