#!/usr/bin/env bash
# Perplexity of the trained demo target (models/demo) on its held-out chapters (text it never
# saw), as committed (F16) and quantized by sol-quantize to Q8_0, Q4_0 (every matrix), Q4_0-mixed
# (the default: embeddings and head at Q8_0) and Q4_K_M; with each variant's mean KL divergence
# from F16 and top-1 agreement. Windows of CTX tokens (default 256, the models' context).
#   bench/demo_quality.sh [BUILD_DIR] [CTX]    env: THREADS=2 DEMO=models/demo WORK=DIR
set -euo pipefail
B=${1:-build}; CTX=${2:-256}; T=${THREADS:-2}; D=${DEMO:-models/demo}
work=${WORK:-$(mktemp -d)}; mkdir -p "$work"
ref=$D/demo-target-f16.gguf
variants=("q8_0:--type q8_0" "q4_0:--type q4_0 --no-mixed" "q4_0-mixed:--type q4_0" "q4_k_m:--type q4_k_m")
printf "| %-10s | %10s | %10s | %15s | %8s |\n" variant perplexity "size (KB)" "KL vs F16 (nats)" "top-1"
printf "|---|---|---|---|---|\n"
line=$("$B/bench/bench_quality" "$ref" "$ref" "$D/heldout.txt" "$CTX" "$T" | sed -n 's/^ref .*perplexity \([0-9.]*\)$/\1/p')
printf "| %-10s | %10s | %10s | %15s | %8s |\n" f16 "$line" $(( $(stat -c %s "$ref") / 1024 )) "-" "-"
for v in "${variants[@]}"; do
  name=${v%%:*}; flags=${v#*:}; f=$work/target-$name.gguf
  # shellcheck disable=SC2086
  [ -f "$f" ] || "$B/tools/sol-quantize" "$ref" "$f" $flags >/dev/null 2>&1
  out=$("$B/bench/bench_quality" "$ref" "$f" "$D/heldout.txt" "$CTX" "$T")
  ppl=$(sed -n 's/^test .*perplexity \([0-9.]*\)$/\1/p' <<<"$out")
  kl=$(sed -n 's/^mean KL(ref||test) \([0-9.]*\) nats, top-1 agreement \([0-9.]*%\)$/\1/p' <<<"$out")
  top=$(sed -n 's/^mean KL(ref||test) \([0-9.]*\) nats, top-1 agreement \([0-9.]*%\)$/\2/p' <<<"$out")
  printf "| %-10s | %10s | %10s | %15s | %8s |\n" "$name" "$ppl" $(( $(stat -c %s "$f") / 1024 )) "$kl" "$top"
done
echo "# held-out: $(sed -n 's/^corpus .*: \([0-9]*\) tokens.*/\1/p' <<<"$out") tokens of $D/heldout.txt, windows of $CTX, $T threads" >&2
