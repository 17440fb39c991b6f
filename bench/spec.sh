#!/usr/bin/env bash
# Speculative decoding benchmark. Batch 1: for each target type and k = 1..8, sol-generate with a
# derived draft model and with n-gram lookup against no speculation, run alternately (baseline,
# then speculative, REPS times) so machine noise hits both alike; prints the medians, the median
# of the paired ratios, acceptance, tokens per verify step, and whether the greedy ids equal the
# baseline's (they must). Then (CONC=8, 0 to skip) the same through the engine at CONC concurrent
# sequences with the draft model (bench_serving --mode spec).
#   bench/spec.sh [BUILD_DIR] [N_PREDICT]
#   env: PRESET=1b TARGETS="f16 q4_0" DRAFT_LAYERS=2 THREADS=2 REPS=3 KS="1 2 3 4 5 6 7 8"
#        DRAFTERS="draft ngram" CONC=8 SKIP_BATCH1= SPEC_WORK=DIR (models are kept there)
# Models: target-f16 = sol-mkmodel --preset PRESET; target-q4_0 = sol-quantize of it (mixed
# precision default: embeddings and head at Q8_0). Drafts are derived from their target: its
# first DRAFT_LAYERS layers with its embeddings and head (sol-mkmodel --draft-of); the Q4_0
# target's draft keeps the target's types, the F16 target's draft is quantized to Q4_0 (mixed).
# Weights are read into memory (--no-mmap) so page-cache eviction cannot slow one side.
# DEMO=models/demo: the trained demo models instead (target F16 as committed, its Q4_0 by
# sol-quantize, the trained draft for both); the batch-1 prompt is PROMPT_TEXT (real text, \n for
# newlines) and the batched runs read 32-token windows of DEMO/heldout.txt.
set -euo pipefail
B=${1:-build}; N=${2:-64}; PRESET=${PRESET:-1b}; DL=${DRAFT_LAYERS:-2}; T=${THREADS:-2}
REPS=${REPS:-3}; TARGETS=${TARGETS:-f16 q4_0}; DRAFTERS=${DRAFTERS:-draft ngram}; CONC=${CONC:-8}
KS=${KS:-1 2 3 4 5 6 7 8}
work=${SPEC_WORK:-$(mktemp -d)}; mkdir -p "$work"
note() { echo "# $*" >&2; }

demo_models() {
  ln -sf "$(realpath "$DEMO/demo-target-f16.gguf")" "$work/target-f16.gguf"
  for ty in $TARGETS; do
    [ "$ty" = f16 ] || [ -f "$work/target-$ty.gguf" ] ||
      "$B/tools/sol-quantize" "$work/target-f16.gguf" "$work/target-$ty.gguf" --type "$ty" --quiet >/dev/null
    ln -sf "$(realpath "$DEMO/demo-draft-f16.gguf")" "$work/draft-$ty.gguf"
  done
  P=$(printf '%s\n' "${PROMPT_TEXT:?DEMO needs PROMPT_TEXT}" |
      "$B/tools/sol-tokenize" -m "$work/target-f16.gguf" --no-bos --escapes | tr ' ' ',')
  TEXT_ARGS=(--prompt-file "$DEMO/heldout.txt")
}

make_models() {
  [ -z "${DEMO:-}" ] || { demo_models; return; }
  local f16="$work/target-f16.gguf"
  [ -f "$f16" ] || { note "making $PRESET F16 target"; "$B/tools/sol-mkmodel" --preset "$PRESET" --type f16 -o "$f16" >/dev/null 2>&1; }
  for ty in $TARGETS; do
    local t="$work/target-$ty.gguf" d="$work/draft-$ty.gguf"
    [ -f "$t" ] || "$B/tools/sol-quantize" "$f16" "$t" --type "$ty" --quiet >/dev/null
    [ -f "$d" ] && continue
    if [ "$ty" = f16 ]; then
      "$B/tools/sol-mkmodel" --draft-of "$f16" --layers "$DL" -o "$work/draft-f16-raw.gguf" >/dev/null 2>&1
      "$B/tools/sol-quantize" "$work/draft-f16-raw.gguf" "$d" --type q4_0 --quiet >/dev/null
      rm -f "$work/draft-f16-raw.gguf"
    else
      "$B/tools/sol-mkmodel" --draft-of "$t" --layers "$DL" -o "$d" >/dev/null 2>&1
    fi
  done
}

P=1,450,3270,88,1023,77,450,3270,88,1023,77,450,3270,88,1023,77
TEXT_ARGS=()
tps() { sed -n 's/^generation: .* \([0-9.]*\) tok\/s$/\1/p' "$1"; }
acc() { sed -n 's/.*acceptance \([0-9.]*%\), \([0-9.]*\) tokens\/step.*/\1 \2/p' "$1"; }
gen() {
  local ty=$1; shift
  "$B/tools/sol-generate" -m "$work/target-$ty.gguf" --prompt-tokens $P -n "$N" --temp 0 --tokens \
    --threads "$T" --no-mmap "$@"
}
median() { tr ' ' '\n' | grep . | sort -g | awk '{v[NR]=$1} END {print (NR%2) ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2}'; }

batch1() {
  printf "%-6s %-6s %-3s %10s %10s %7s %11s %11s %s\n" target drafter k base_tok/s spec_tok/s ratio \
    acceptance tokens/step greedy
  for ty in $TARGETS; do
    for k in $KS; do
      for d in $DRAFTERS; do
        local bs="" ss="" rs="" same=identical
        for _ in $(seq "$REPS"); do
          gen "$ty" >"$work/base.ids" 2>"$work/base.err"
          if [ "$d" = draft ]; then gen "$ty" --draft-model "$work/draft-$ty.gguf" --spec-k "$k"
          else gen "$ty" --spec ngram --spec-k "$k"; fi >"$work/spec.ids" 2>"$work/spec.err"
          cmp -s "$work/base.ids" "$work/spec.ids" || same=DIFFERENT
          local b s; b=$(tps "$work/base.err"); s=$(tps "$work/spec.err")
          bs+=" $b"; ss+=" $s"; rs+=" $(echo "$s / $b" | bc -l)"
        done
        read -r a t <<<"$(acc "$work/spec.err")"
        printf "%-6s %-6s %-3s %10s %10s %7.2f %11s %11s %s\n" "$ty" "$d" "$k" \
          "$(echo "$bs" | median)" "$(echo "$ss" | median)" "$(echo "$rs" | median)" "$a" "$t" "$same"
      done
    done
  done
}

batched() {
  echo "# $CONC sequences through the engine (bench_serving --mode spec, draft model, $REPS rounds)"
  echo "# target k ratio acceptance base_tok/s spec_tok/s"
  for ty in $TARGETS; do
    for k in $KS; do
      "$B/bench/bench_serving" -m "$work/target-$ty.gguf" -t "$T" --mode spec --concurrency "$CONC" \
        --output ":$N" --rounds "$REPS" --no-mmap --draft-model "$work/draft-$ty.gguf" --spec-k "$k" \
        "${TEXT_ARGS[@]}" \
        >"$work/serve.out"
      r=$(sed -n 's/^RESULT spec: .*: \([0-9.]*\) tok\/s without, \([0-9.]*\) tok\/s with = \([0-9.]*\)x$/\3 \1 \2/p' "$work/serve.out")
      a=$(sed -n 's/.*acceptance \([0-9.]*%\).*/\1/p' "$work/serve.out" | tail -1)
      read -r ratio b s <<<"$r"
      echo "$ty $k $ratio $a $b $s"
    done
  done
}

make_models
if [ -n "${DEMO:-}" ]; then note "demo models from $DEMO in $work, trained draft, $T threads, $N tokens, prompt $P"
else note "models in $work; $PRESET, draft = first $DL layers, $T threads, $N tokens, weights read into memory"; fi
[ -n "${SKIP_BATCH1:-}" ] || batch1
[ "$CONC" -gt 0 ] || exit 0
batched
