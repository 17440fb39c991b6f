#!/usr/bin/env bash
# Adaptive speculation cuts its losses and keeps its gains (issue 28): batch-1 decode of N tokens
# (160, greedy) through sol-generate, which runs the serving engine, with no speculation (plain)
# and with --spec-adaptive --spec-k 4, alternated REPS times per case; medians of each side and of
# the paired ratios. Synthetic (random-weight) models, Q4_0 targets:
#   useless  small target (sol-mkmodel --preset small: 12 layers, dim 768, 32k vocabulary), an
#            unrelated random 2-layer model as the draft (acceptance 0)
#   nearly   small target without depth decay (--depth-decay 1: its first layers say little
#            about its output), its first 2 layers as the draft: acceptance ~30%
#   costly   small target, its own first 2 layers as the draft (sol-mkmodel --draft-of --layers
#            2): accepted often (depth decay 0.7), but with the 32k-vocabulary head it costs half a
#            target step
#   good     1b target (22 layers, dim 2048), its first 2 layers as the draft: cheap and accepted
# Then the served path: the same cases through bench_serving --mode spec --concurrency 1 (a
# worker's engine). The greedy ids must equal plain decoding's in every run (column ids).
#   bench/spec_adaptive.sh [BUILD (build)] [N (160)]
#   env: REPS=5 THREADS=2 WORK=DIR (models kept there) CASES="useless nearly costly good" SERVED=1 (0: skip)
set -euo pipefail
B=${1:-build}; N=${2:-160}; REPS=${REPS:-5}; T=${THREADS:-2}
work=${WORK:-$(mktemp -d)}; mkdir -p "$work"
cmake --build "$B" -j"$(nproc)" --target sol-generate sol-mkmodel sol-quantize bench_serving >/dev/null
mk() { [ -f "$work/$1" ] || "$B/tools/sol-mkmodel" -o "$work/$1" "${@:2}" >/dev/null 2>&1; }
q4() { [ -f "$work/$2" ] || "$B/tools/sol-quantize" "$work/$1" "$work/$2" --type q4_0 --quiet >/dev/null; }
[ -f "$work/small-q4_0.gguf" ] || { mk small-f16.gguf --preset small --type f16 --seed 1 &&
  q4 small-f16.gguf small-q4_0.gguf; }
[ -f "$work/useless-q4_0.gguf" ] || { mk useless-f16.gguf --preset small --layers 2 --seed 99 \
  --type f16 && q4 useless-f16.gguf useless-q4_0.gguf; }
mk costly-q4_0.gguf --draft-of "$work/small-q4_0.gguf" --layers 2
[ -f "$work/flat-q4_0.gguf" ] || { mk flat-f16.gguf --preset small --depth-decay 1 --type f16 \
  --seed 1 && q4 flat-f16.gguf flat-q4_0.gguf; }
mk nearly-q4_0.gguf --draft-of "$work/flat-q4_0.gguf" --layers 2
[ -f "$work/1b-q4_0.gguf" ] || { mk 1b-f16.gguf --preset 1b --type f16 --seed 1 &&
  q4 1b-f16.gguf 1b-q4_0.gguf && rm -f "$work/1b-f16.gguf"; } # 2.2 GiB, needed only once
mk good-q4_0.gguf --draft-of "$work/1b-q4_0.gguf" --layers 2
all=("useless:small-q4_0:useless-q4_0" "nearly:flat-q4_0:nearly-q4_0"
     "costly:small-q4_0:costly-q4_0" "good:1b-q4_0:good-q4_0")
cases=()
for c in "${all[@]}"; do [[ " ${CASES:-useless nearly costly good} " == *" ${c%%:*} "* ]] && cases+=("$c"); done
P=1,15,27,300,42,7,99,128,5,260,311,17,450,1000,2000,31
gen() { # OUT TARGET [flags...]: one run, ids to OUT.ids, stderr to OUT.err
  local out=$1 tgt=$2; shift 2
  "$B/tools/sol-generate" -m "$work/$tgt.gguf" --prompt-tokens "$P" -n "$N" --temp 0 --tokens \
    --threads "$T" --no-mmap "$@" >"$out.ids" 2>"$out.err"
}
tps() { sed -n 's/^generation: .* \([0-9.]*\) tok\/s$/\1/p' "$1"; }
median() { sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }
echo "sol-generate, $N tokens, batch 1, $T threads, $REPS interleaved pairs:"
echo "| case | plain tok/s | adaptive tok/s | ratio (median of pairs) | acceptance | verify steps | ids |"
echo "|---|---|---|---|---|---|---|"
for c in "${cases[@]}"; do
  IFS=: read -r name tgt drf <<<"$c"
  : >"$work/$name.ratios"; : >"$work/$name.base"; : >"$work/$name.spec"; same=yes
  for r in $(seq "$REPS"); do
    gen "$work/$name.base.$r" "$tgt"
    gen "$work/$name.spec.$r" "$tgt" --draft-model "$work/$drf.gguf" --spec-k 4 --spec-adaptive
    b=$(tps "$work/$name.base.$r.err"); s=$(tps "$work/$name.spec.$r.err")
    echo "$b" >>"$work/$name.base"; echo "$s" >>"$work/$name.spec"
    awk -v b="$b" -v s="$s" 'BEGIN {print s / b}' >>"$work/$name.ratios"
    cmp -s "$work/$name.base.$r.ids" "$work/$name.spec.$r.ids" || same=NO
  done
  line=$(grep '^speculative' "$work/$name.spec.$REPS.err")
  printf '| %s | %.1f | %.1f | %.3f | %s | %s | %s |\n' "$name" "$(median <"$work/$name.base")" \
    "$(median <"$work/$name.spec")" "$(median <"$work/$name.ratios")" \
    "$(sed -n 's/.*acceptance \([0-9.]*%\).*/\1/p' <<<"$line")" \
    "$(sed -n 's/.*: \([0-9]*\) steps.*/\1/p' <<<"$line")" "$same"
done
[ "${SERVED:-1}" = 1 ] || exit 0
echo
echo "served: bench_serving --mode spec --concurrency 1 --output :$N --spec-adaptive --spec-k 4 --rounds $REPS"
for c in "${cases[@]}"; do
  IFS=: read -r name tgt drf <<<"$c"
  echo "$name:"
  "$B/bench/bench_serving" -m "$work/$tgt.gguf" --draft-model "$work/$drf.gguf" --mode spec \
    --concurrency 1 --output ":$N" --spec-adaptive --spec-k 4 --rounds "$REPS" -t "$T" --no-mmap \
    >"$work/$name.serving" 2>&1
  grep -E '^  speculative:' "$work/$name.serving" | tail -1
  grep -E '^RESULT' "$work/$name.serving"
done
