#!/usr/bin/env bash
# sol-bench against a local Sol cluster on the trained demo models (scripts/start: router + fast
# worker (Q4_0 + trained draft, speculating) + precise worker (F16), 1 thread each):
#   1. the four cases (short/long prompt x short/long output) on each pool, concurrency 1,
#      compared with --compare (B = precise, A = fast);
#   2. a concurrency sweep 1,2,4,8 on the fast pool, goodput at an SLO (ttft 0.5 s, tpot 50 ms);
#   3. plots (SVG) of both.
#   bench/sol_bench_demo.sh [OUT_DIR]    env: N=8 (requests per level) SOL_BUILD_DIR=build
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-$(mktemp -d)}; mkdir -p "$out"; N=${N:-8}
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
zport=$((port + 1))
scripts/start --no-setup --port "$port" --zmq-port "$zport" --threads 1 >"$out/start.log" 2>&1 &
pid=$!
trap 'kill -TERM $pid 2>/dev/null; wait $pid 2>/dev/null || true' EXIT
for _ in $(seq 240); do curl -fs "http://127.0.0.1:$port/ready" >/dev/null 2>&1 && break; sleep 0.5; done
U=http://127.0.0.1:$port
SB=tools/sol-bench
cases=(--dataset cases --short-input 8 --long-input 120 --short-output 16 --long-output 96)
for pool in fast precise; do
  $SB --url "$U" --model "$pool" --num-prompts "$N" --concurrency 1 "${cases[@]}" --warmup 1 \
    --json "$out/cases-$pool.json" 2>/dev/null >"$out/cases-$pool.txt"
done
$SB --compare "$out/cases-fast.json" "$out/cases-precise.json" | tee "$out/cases-compare.txt"
$SB --url "$U" --model fast --num-prompts $((N * 2)) --concurrency 1,2,4,8 --input-len 24 \
  --output-len 64 --slo ttft=0.5,tpot=0.05 --json "$out/sweep-fast.json" 2>/dev/null | tee "$out/sweep-fast.txt"
$SB --url "$U" --model precise --num-prompts $((N * 2)) --concurrency 1,2,4,8 --input-len 24 \
  --output-len 64 --slo ttft=0.5,tpot=0.05 --json "$out/sweep-precise.json" 2>/dev/null | tee "$out/sweep-precise.txt"
$SB --plot "$out/sweep.svg" "$out/sweep-fast.json" "$out/sweep-precise.json"
echo "# results in $out" >&2
