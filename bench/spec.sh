#!/usr/bin/env bash
# Speculative decoding benchmark at batch 1: for k = 1..8, tokens/s and acceptance of sol-generate
# with a derived draft model and with n-gram lookup, against no speculation measured interleaved
# (baseline, then speculative, per k) so machine noise hits both alike. Greedy, fixed prompt.
#   bench/spec.sh [BUILD_DIR] [N_PREDICT]     (env PRESET=small DRAFT_LAYERS=3 THREADS=2)
set -euo pipefail
B=${1:-build}; N=${2:-64}; PRESET=${PRESET:-small}; DL=${DRAFT_LAYERS:-3}; T=${THREADS:-2}
work=${SPEC_WORK:-$(mktemp -d)}; mkdir -p "$work"
[ -f "$work/target.gguf" ] || "$B/tools/sol-mkmodel" --preset "$PRESET" --type f16 -o "$work/target.gguf" >/dev/null 2>&1
[ -f "$work/draft.gguf" ] || "$B/tools/sol-mkmodel" --draft-of "$work/target.gguf" --layers "$DL" --type q8_0 -o "$work/draft.gguf" >/dev/null 2>&1
P=1,450,3270,88,1023,77,450,3270,88,1023,77,450,3270,88,1023,77
tps() { sed -n 's/^generation: .* \([0-9.]*\) tok\/s$/\1/p' "$1"; }
acc() { sed -n 's/.*acceptance \([0-9.]*%\), \([0-9.]*\) tokens\/step.*/\1 \2/p' "$1"; }
gen() { "$B/tools/sol-generate" -m "$work/target.gguf" --prompt-tokens $P -n "$N" --temp 0 --tokens --threads "$T" "$@" >/dev/null; }
printf "%-6s %-3s %10s %10s %8s %11s %11s\n" drafter k base_tok/s spec_tok/s ratio acceptance tokens/step
for k in 1 2 3 4 5 6 7 8; do
  for d in draft ngram; do
    gen 2>"$work/base.err"
    if [ $d = draft ]; then gen --draft-model "$work/draft.gguf" --spec-k $k 2>"$work/spec.err"
    else gen --spec ngram --spec-k $k 2>"$work/spec.err"; fi
    b=$(tps "$work/base.err"); s=$(tps "$work/spec.err"); read -r a t <<<"$(acc "$work/spec.err")"
    printf "%-6s %-3s %10s %10s %8.2f %11s %11s\n" $d $k "$b" "$s" "$(echo "$s / $b" | bc -l)" "$a" "$t"
  done
done
