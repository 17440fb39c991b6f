#!/usr/bin/env bash
# Serving benchmarks (bench_serving) on a synthetic model: builds what it needs, then runs the
# three claims (batch scaling, prefix-cache TTFT, scheduler overhead) and a mixed load.
# usage: bench/serving.sh [BUILD_DIR (build)] [PRESET (small)] [THREADS (0 = all cores)]
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$src/build}
preset=${2:-small}
threads=${3:-0}
cmake -S "$src" -B "$build" >/dev/null
cmake --build "$build" -j"$(nproc)" --target sol-mkmodel bench_serving >/dev/null
model="$build/bench-models/$preset-f16.gguf"
mkdir -p "$(dirname "$model")"
[ -f "$model" ] || "$build/tools/sol-mkmodel" -o "$model" --preset "$preset" --type f16 --seed 1
b="$build/bench/bench_serving"
set -x
"$b" -m "$model" -t "$threads" --mode batch --concurrency 16 --output :64
"$b" -m "$model" -t "$threads" --mode prefix
"$b" -m "$model" -t "$threads" --mode overhead --concurrency 64 --output :32
"$b" -m "$model" -t "$threads" --mode load -n 64 --prompt 32:256 --output 32:128 --rate 4
