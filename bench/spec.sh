#!/usr/bin/env bash
# Speculative decoding benchmark at batch 1: for k = 1..8, tokens/s and acceptance of sol-generate
# with a derived draft model and with n-gram lookup, against no speculation measured interleaved
# (baseline, then speculative, REPS times per k) so machine noise hits both alike; each side keeps
# its best run (on a shared machine other load only ever slows a run down). Greedy, fixed prompt.
# Then (CONC=8, 0 to skip) the same through the engine at CONC concurrent sequences with the draft
# model (bench_serving --mode spec, REPS rounds each, mean tok/s): "k ratio acceptance" lines.
#   bench/spec.sh [BUILD_DIR] [N_PREDICT]   (env PRESET=small DRAFT_LAYERS=3 THREADS=2 REPS=3
#                   TYPE=f16 DRAFTERS="draft ngram" CONC=8 SKIP_BATCH1= SPEC_WORK=DIR)
set -euo pipefail
B=${1:-build}; N=${2:-64}; PRESET=${PRESET:-small}; DL=${DRAFT_LAYERS:-3}; T=${THREADS:-2}
REPS=${REPS:-3}; TYPE=${TYPE:-f16}; DRAFTERS=${DRAFTERS:-draft ngram}; CONC=${CONC:-8}
work=${SPEC_WORK:-$(mktemp -d)}; mkdir -p "$work"
[ -f "$work/target.gguf" ] || "$B/tools/sol-mkmodel" --preset "$PRESET" --type "$TYPE" -o "$work/target.gguf" >/dev/null 2>&1
[ -f "$work/draft.gguf" ] || "$B/tools/sol-mkmodel" --draft-of "$work/target.gguf" --layers "$DL" --type q8_0 -o "$work/draft.gguf" >/dev/null 2>&1
P=1,450,3270,88,1023,77,450,3270,88,1023,77,450,3270,88,1023,77
tps() { sed -n 's/^generation: .* \([0-9.]*\) tok\/s$/\1/p' "$1"; }
acc() { sed -n 's/.*acceptance \([0-9.]*%\), \([0-9.]*\) tokens\/step.*/\1 \2/p' "$1"; }
gen() { "$B/tools/sol-generate" -m "$work/target.gguf" --prompt-tokens $P -n "$N" --temp 0 --tokens --threads "$T" "$@" >/dev/null; }
max() { echo "$1 $2" | awk '{print ($1 > $2) ? $1 : $2}'; }
[ -n "${SKIP_BATCH1:-}" ] || {
printf "%-6s %-3s %10s %10s %8s %11s %11s\n" drafter k base_tok/s spec_tok/s ratio acceptance tokens/step
for k in 1 2 3 4 5 6 7 8; do
  for d in $DRAFTERS; do
    b=0; s=0
    for _ in $(seq "$REPS"); do
      gen 2>"$work/base.err"
      if [ "$d" = draft ]; then gen --draft-model "$work/draft.gguf" --spec-k $k 2>"$work/spec.err"
      else gen --spec ngram --spec-k $k 2>"$work/spec.err"; fi
      b=$(max "$b" "$(tps "$work/base.err")"); s=$(max "$s" "$(tps "$work/spec.err")")
    done
    read -r a t <<<"$(acc "$work/spec.err")"
    printf "%-6s %-3s %10s %10s %8.2f %11s %11s\n" "$d" $k "$b" "$s" "$(echo "$s / $b" | bc -l)" "$a" "$t"
  done
done
}
[ "$CONC" -gt 0 ] || exit 0
echo "# $CONC sequences through the engine (bench_serving --mode spec, draft model)"
echo "# k ratio acceptance base_tok/s spec_tok/s"
for k in 1 2 3 4 5 6 7 8; do
  "$B/bench/bench_serving" -m "$work/target.gguf" -t "$T" --mode spec --concurrency "$CONC" \
    --output ":$N" --rounds "$REPS" --draft-model "$work/draft.gguf" --spec-k $k >"$work/serve.out"
  r=$(sed -n 's/^RESULT spec: .*: \([0-9.]*\) tok\/s without, \([0-9.]*\) tok\/s with = \([0-9.]*\)x$/\3 \1 \2/p' "$work/serve.out")
  a=$(sed -n 's/.*acceptance \([0-9.]*%\).*/\1/p' "$work/serve.out" | tail -1)
  read -r ratio b s <<<"$r"
  echo "$k $ratio $a $b $s"
done
