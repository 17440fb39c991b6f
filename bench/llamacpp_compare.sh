#!/usr/bin/env bash
# Sol vs llama.cpp on the same GGUF files: decode and prompt tok/s, interleaved A/B in one window,
# median of R repetitions; memory-bandwidth roofline; Sol's peak RSS.
#   bench/llamacpp_compare.sh [--preset 1b] [--types "q4_0 f16"] [--reps 5] [--threads 2]
#                             [--prompt 512] [--gen 64] [--dir models/bench] [--build build]
#                             [--layers N] [--arch llama|qwen2|qwen3|qwen3moe|gpt-oss]
#                             [--shape "MKMODEL FLAGS" --name TAG]
# Types: f32 f16 bf16 q8_0 q4_0 written by sol-mkmodel; q4_k_m q5_k_m q6_k mxfp4_moe written by
# llama.cpp's own quantizer from the f16 file (tests/peer/build_quantize.sh), as users' downloads
# are.
# Weights are read into memory (Sol --no-mmap, llama.cpp useMmap:false) so page-cache eviction on
# this shared machine cannot slow one side down. --shape passes more sol-mkmodel flags (a mixture
# of experts: --experts 48 --experts-used 8 --expert-ffn 512), named TAG in the files. The GB/s
# column is the weights one decoded token reads (sol-generate's figure: a mixture's experts at
# k / n_expert) times decode tok/s.
set -euo pipefail
cd "$(dirname "$0")/.."
preset=1b; types="q4_0 f16"; reps=5; threads=2; nprompt=512; ngen=64; dir=models/bench; B=build
layers=""; arch=llama; shape=""; name=""
while [ $# -gt 0 ]; do
  case "$1" in
    --preset) preset=$2; shift 2 ;; --types) types=$2; shift 2 ;; --reps) reps=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;; --prompt) nprompt=$2; shift 2 ;; --gen) ngen=$2; shift 2 ;;
    --dir) dir=$2; shift 2 ;; --build) B=$2; shift 2 ;;
    --layers) layers=$2; shift 2 ;; --arch) arch=$2; shift 2 ;;
    --shape) shape=$2; shift 2 ;; --name) name=$2; shift 2 ;;
    -h|--help) sed -n '2,15p' "$0"; exit 0 ;;
    *) echo "unknown option $1 (try --help)" >&2; exit 2 ;;
  esac
done
peer=tests/peer
[ -d "$peer/node_modules/node-llama-cpp" ] || { echo "run scripts/setup first (node-llama-cpp)" >&2; exit 1; }
mkdir -p "$dir"; work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
prompt=$(seq -s, 100 $((99 + nprompt)))

median() { sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }

shape_flags=(--preset "$preset" --arch "$arch"); [ -n "$layers" ] && shape_flags+=(--layers "$layers")
# shellcheck disable=SC2206
[ -n "$shape" ] && shape_flags+=($shape)
[ -z "$shape" ] || [ -n "$name" ] || { echo "--shape needs --name TAG" >&2; exit 2; }
tag=${name:-$preset${layers:+-l$layers}$([ "$arch" = llama ] || echo "-$arch")}
declare -A ftype=([q4_k_m]=15 [q5_k_m]=17 [q6_k]=18 [mxfp4_moe]=38)
for t in $types; do
  m=$dir/$tag-$t.gguf
  [ -f "$m" ] && continue
  if [ -n "${ftype[$t]:-}" ]; then
    f16=$dir/$tag-f16.gguf
    [ -f "$f16" ] || "$B/tools/sol-mkmodel" -o "$f16" "${shape_flags[@]}" --type f16 --seed 1
    lq=$(tests/peer/build_quantize.sh "$B/peer")
    echo "writing $m with llama.cpp's quantizer" >&2; "$lq" "$f16" "$m" "${ftype[$t]}" >/dev/null
  else
    echo "writing $m" >&2; "$B/tools/sol-mkmodel" -o "$m" "${shape_flags[@]}" --type "$t" --seed 1
  fi
done

echo "# $(date -u +%FT%TZ) model=$tag preset=$preset threads=$threads prompt=$nprompt gen=$ngen reps=$reps (weights read into memory)"
"$B/bench/bench_membw" "$threads" 1024 5 2>/dev/null | tee "$work/bw"
bw=$(sed -E 's/.*median ([0-9.]+) GB.*/\1/' "$work/bw")

for r in $(seq 1 "$reps"); do
  for t in $types; do
    m=$dir/$tag-$t.gguf
    /usr/bin/time -f "%M" -o "$work/rss-$t-$r" "$B/tools/sol-generate" -m "$m" --prompt-tokens "$prompt" \
      -n "$ngen" --temp 0 --tokens --threads "$threads" --no-mmap >/dev/null 2>"$work/sol-$t-$r"
    sed -nE 's/^prompt: .* ([0-9.]+) tok\/s$/\1/p' "$work/sol-$t-$r" >>"$work/sol-pp-$t"
    sed -nE 's/^generation: .* ([0-9.]+) tok\/s$/\1/p' "$work/sol-$t-$r" >>"$work/sol-tg-$t"
    echo "[{\"model\":\"$(realpath "$m")\",\"tokens\":[$prompt],\"n\":$ngen,\"out\":\"$work/ids\",\"timing\":\"$work/lc.json\",\"mmap\":false,\"threads\":$threads}]" >"$work/job.json"
    node "$peer/llamacpp_ref.mjs" "$work/job.json"
    node -e 'const j=require(process.argv[1]); console.log((j.prompt_tokens/(j.prompt_ms/1000)).toFixed(2), (j.gen_tokens/(j.gen_ms/1000)).toFixed(2))' "$work/lc.json" >"$work/lc-$t-$r"
    cut -d' ' -f1 "$work/lc-$t-$r" >>"$work/lc-pp-$t"; cut -d' ' -f2 "$work/lc-$t-$r" >>"$work/lc-tg-$t"
    echo "rep $r $t: sol pp $(tail -1 "$work/sol-pp-$t") tg $(tail -1 "$work/sol-tg-$t") | llama.cpp pp $(cut -d' ' -f1 "$work/lc-$t-$r") tg $(cut -d' ' -f2 "$work/lc-$t-$r")" >&2
  done
done

echo
echo "| type | file MiB | read per token MiB | Sol decode tok/s | llama.cpp decode tok/s | decode ratio | Sol prompt tok/s | llama.cpp prompt tok/s | prompt ratio | Sol decode GB/s (% of ${bw} GB/s) | Sol peak RSS MiB |"
echo "|---|---|---|---|---|---|---|---|---|---|---|"
for t in $types; do
  m=$dir/$tag-$t.gguf
  mib=$(( $(stat -c %s "$m") / 1048576 ))
  tok_mib=$(sed -nE 's/.*; ([0-9.]+) MiB of weights read per decoded token$/\1/p' "$work/sol-$t-1")
  stg=$(median <"$work/sol-tg-$t"); ltg=$(median <"$work/lc-tg-$t")
  spp=$(median <"$work/sol-pp-$t"); lpp=$(median <"$work/lc-pp-$t")
  rss=$(cat "$work"/rss-"$t"-* | median); rss=$((${rss%.*} / 1024))
  awk -v t="$t" -v mib="$mib" -v tmib="$tok_mib" -v stg="$stg" -v ltg="$ltg" -v spp="$spp" -v lpp="$lpp" -v bw="$bw" -v rss="$rss" 'BEGIN {
    gbs = stg * tmib * 1048576 / 1e9;
    printf "| %s | %d | %.1f | %.2f | %.2f | %.2fx | %.1f | %.1f | %.2fx | %.1f (%.0f%%) | %d |\n", t, mib, tmib, stg, ltg, stg / ltg, spp, lpp, spp / lpp, gbs, 100 * gbs / bw, rss }'
done
# which of its x86 builds llama.cpp's loader took here (sapphirerapids' AMX tiles, an AVX-512 or an
# AVX2 build): part of the comparison (docs/backend.md, "Which llama.cpp build")
echo
echo "llama.cpp CPU build: $(node -e 'console.log(require(process.argv[1]).cpu_build)' "$work/lc.json"); Sol: ${SOL_CPU_ISA:-the best ISA this CPU runs}"
