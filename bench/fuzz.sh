#!/usr/bin/env bash
# Fuzzing at scale: builds every tests/fuzz/fuzz_*.c as a libFuzzer binary with ASan+UBSan
# (clang, SOL_FUZZ=ON, in BUILD_DIR), runs each for SECONDS on a copy of its corpus, merges what
# found new coverage back into tests/fuzz/corpus/NAME (so CI's replay keeps exercising it), and
# prints one line per target: executions, edges covered, corpus size. A crash stops the script
# with the reproducer in BUILD_DIR/fuzz-out/NAME/.
# usage: bench/fuzz.sh [SECONDS per target (60)] [BUILD_DIR (build-fuzz)] [target ...]
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
secs=${1:-60}
build=$(realpath -m "${2:-$src/build-fuzz}")
shift 2 2>/dev/null || shift $#
CC=clang CXX=clang++ cmake -S "$src" -B "$build" -DSOL_FUZZ=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DSOL_CUDA=OFF >/dev/null
targets=("$@")
[ ${#targets[@]} -gt 0 ] || for f in "$src"/tests/fuzz/fuzz_*.c; do targets+=("$(basename "$f" .c)"); done
cmake --build "$build" -j"$(nproc)" --target "${targets[@]}" >/dev/null
printf '%-16s %12s %10s %8s %8s\n' target executions exec/s edges corpus
for t in "${targets[@]}"; do
    name=${t#fuzz_}
    corpus=$src/tests/fuzz/corpus/$name
    work=$build/fuzz-out/$name
    rm -rf "$work" && mkdir -p "$work/corpus"
    cp "$corpus"/* "$work/corpus/" 2>/dev/null || true
    (cd "$work" && "$build/tests/fuzz/$t" -max_total_time="$secs" -print_final_stats=1 \
        -max_len=4096 -timeout=10 -rss_limit_mb=2048 corpus >"$work/log" 2>&1) || {
        echo "$t: crashed or failed; reproducer and log in $work" >&2
        tail -n 30 "$work/log" >&2
        exit 1
    }
    before=$(ls "$corpus" | wc -l)
    "$build/tests/fuzz/$t" -merge=1 "$corpus" "$work/corpus" >/dev/null 2>&1 || true
    after=$(ls "$corpus" | wc -l)
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$work/log" | tail -1)
    rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$work/log" | tail -1)
    cov=$(grep -o 'cov: [0-9]*' "$work/log" | tail -1 | cut -d' ' -f2)
    printf '%-16s %12s %10s %8s %8s\n' "$t" "${runs:-?}" "${rate:-?}" "${cov:-?}" "$before -> $after"
done
