#!/usr/bin/env bash
# Sol vs llama.cpp through its C API (shared/peers/llamacpp_peer: no JS binding between tokens),
# on the same GGUF files: decode and prompt tok/s, Sol and llama.cpp alternated per repetition,
# medians and ratios; the machine's read bandwidth measured in the same window.
#   bench/llamacpp_capi_compare.sh --peer PATH/llamacpp_peer [--reps 5] [--threads 2]
#                                  [--prompt 512] [--gen 128] [--build build] FILE.gguf ...
# Build the peer once: LAB=/tmp/peerlab bash ../shared/peers/build_llamacpp_peer.sh (it lands in
# /tmp/peerlab/cbuild/llamacpp_peer). Weights are read into memory on both sides (Sol --no-mmap,
# the peer's default), so page-cache eviction cannot slow one side down.
set -euo pipefail
cd "$(dirname "$0")/.."
peer=""; reps=5; threads=2; nprompt=512; ngen=128; B=build; files=()
while [ $# -gt 0 ]; do
  case "$1" in
    --peer) peer=$2; shift 2 ;; --reps) reps=$2; shift 2 ;; --threads) threads=$2; shift 2 ;;
    --prompt) nprompt=$2; shift 2 ;; --gen) ngen=$2; shift 2 ;; --build) B=$2; shift 2 ;;
    -h|--help) sed -n '2,9p' "$0"; exit 0 ;;
    -*) echo "unknown option $1 (try --help)" >&2; exit 2 ;;
    *) files+=("$1"); shift ;;
  esac
done
[ -x "$peer" ] || { echo "--peer: give the llamacpp_peer binary (see --help)" >&2; exit 2; }
[ ${#files[@]} -gt 0 ] || { echo "give at least one GGUF file (see --help)" >&2; exit 2; }
prompt=$(seq -s, 100 $((99 + nprompt)))
median() { sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.2f", a / b}'; }

echo "# $(date -u +%FT%TZ) threads=$threads prompt=$nprompt gen=$ngen reps=$reps (weights read into memory)"
"$B/bench/bench_membw" "$threads" 1024 5 2>/dev/null | tail -1
echo "| file | MiB | Sol decode | llama.cpp decode | ratio | Sol prompt | llama.cpp prompt | ratio |"
echo "|---|---|---|---|---|---|---|---|"
for f in "${files[@]}"; do
  sd=(); ld=(); sp=(); lp=()
  for r in $(seq "$reps"); do
    out=$("$B/tools/sol-generate" -m "$f" --prompt-tokens "$prompt" -n "$ngen" --temp 0 --tokens \
      --threads "$threads" --no-mmap 2>&1 >/dev/null)
    sp+=("$(sed -nE 's/^prompt:.* ([0-9.]+) tok\/s/\1/p' <<<"$out")")
    sd+=("$(sed -nE 's/^generation:.* ([0-9.]+) tok\/s/\1/p' <<<"$out")")
    js=$("$peer" -m "$f" -t "$prompt" -n "$ngen" --threads "$threads" 2>&1 >/dev/null | tail -1)
    lp+=("$(sed -nE 's/.*"prompt_tok_s":([0-9.]+).*/\1/p' <<<"$js")")
    ld+=("$(sed -nE 's/.*"gen_tok_s":([0-9.]+).*/\1/p' <<<"$js")")
    echo "  rep $r $(basename "$f"): Sol ${sp[-1]} / ${sd[-1]}, llama.cpp ${lp[-1]} / ${ld[-1]} (prompt / decode tok/s)" >&2
  done
  msd=$(printf '%s\n' "${sd[@]}" | median); mld=$(printf '%s\n' "${ld[@]}" | median)
  msp=$(printf '%s\n' "${sp[@]}" | median); mlp=$(printf '%s\n' "${lp[@]}" | median)
  mib=$(( $(stat -c %s "$f") >> 20 ))
  echo "| $(basename "$f") | $mib | $msd | $mld | $(ratio "$msd" "$mld")× | $msp | $mlp | $(ratio "$msp" "$mlp")× |"
done
