#!/usr/bin/env bash
# Scale simulation (issue 15): ROUTERS routers + WORKERS sim workers (two pools) + STREAMS
# concurrent streams for SECONDS, with CHURN worker events (leave / die / join) per minute.
# usage: bench/scale.sh [BUILD (build)] [ROUTERS (1)] [WORKERS (100)] [STREAMS (2000)]
#                       [SECONDS (60)] [CHURN_PER_MIN (10)]
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$src/build}
cmake --build "$build" -j"$(nproc)" --target sol-router sol-worker bench_router >/dev/null
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
exec python3 "$src/bench/scale.py" "$build" "${2:-1}" "${3:-100}" "${4:-2000}" "${5:-60}" "${6:-10}"
