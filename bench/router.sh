#!/usr/bin/env bash
# Router benchmarks: sol-router + sim workers (TTFT 0, 1e6 tokens/s, so the workers cost ~nothing
# and what is measured is the router) on 127.0.0.1, driven by bench_router over keep-alive sockets:
#   1. non-streaming requests/s (closed loop)          target >= 5,000
#   2. latency at 1,000 requests/s (open loop), p99    target <= 2 ms added
#   3. streamed tokens/s through one router            target >= 50,000
# Each run is bounded by a request count and a time limit; a stalled response fails after 10 s.
# With `curve` as the third argument, workers connect over CURVE (encrypted, authenticated): run
# both ways in one window to see what CURVE costs the router.
# usage: bench/router.sh [BUILD_DIR (build)] [WORKERS (2)] [plain|curve]
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$src/build}
nw=${2:-2}
transport=${3:-plain}
cmake -S "$src" -B "$build" >/dev/null
cmake --build "$build" -j"$(nproc)" --target sol-router sol-worker sol-keygen bench_router >/dev/null

. "$src/bench/lib.sh"
bench_harness router
http=$(port)
zmq=tcp://127.0.0.1:$(port)
rcurve=() wcurve=()
if [ "$transport" = curve ]; then
    mkdir -p "$dir/auth"
    "$build/tools/sol-keygen" -d "$dir" router worker >/dev/null
    cp "$dir/worker.pub" "$dir/auth/"
    rcurve=(--curve-secret-key "$dir/router.key" --curve-authorized-keys "$dir/auth")
    wcurve=(--curve-secret-key "$dir/worker.key" --curve-server-key "$dir/router.pub")
fi

"$build/router/sol-router" --listen "127.0.0.1:$http" --bind "$zmq" --log-level warn \
    --set router.workers.max_queue_per_pool=100000 "${rcurve[@]}" >"$dir/router.log" 2>&1 &
pids+=($!)
for i in $(seq "$nw"); do
    "$build/worker/sol-worker" --backend sim --pool precise --id "sim$i" --router "$zmq" \
        --log-level warn --set worker.sim.ttft_ms=0 --set worker.sim.tokens_per_s=1000000 \
        --set worker.scheduler.max_num_seqs=1024 "${wcurve[@]}" >"$dir/worker$i.log" 2>&1 &
    pids+=($!)
done
# The streaming pool: 1,000 tokens/s per sequence, so each chunk carries one token and the router
# does per-token work (a faster sim packs many tokens into one chunk).
for i in $(seq "$nw"); do
    "$build/worker/sol-worker" --backend sim --pool fast --id "simf$i" --router "$zmq" \
        --log-level warn --set worker.sim.ttft_ms=0 --set worker.sim.tokens_per_s=1000 \
        --set worker.scheduler.max_num_seqs=1024 "${wcurve[@]}" >"$dir/workerf$i.log" 2>&1 &
    pids+=($!)
done
for _ in $(seq 100); do
    curl -fs "http://127.0.0.1:$http/ready" >/dev/null 2>&1 && break
    sleep 0.1
done
curl -fs "http://127.0.0.1:$http/ready" >/dev/null || { cat "$dir"/*.log; exit 1; }

b=$build/bench/bench_router
"$b" --port "$http" --mode rps --conns 32 --requests 2000 --time-limit 10 >/dev/null # warm-up
echo "## router benchmarks ($nw sim workers, $(nproc) CPUs, $transport ZeroMQ)"
echo "requests/s, non-streaming, 32 connections, max_tokens 1:"
"$b" --port "$http" --mode rps --conns 32 --requests 50000 --time-limit 20
echo "latency, open loop at 1000 requests/s, 16 connections, max_tokens 1:"
"$b" --port "$http" --mode latency --rate 1000 --conns 16 --requests 10000 --time-limit 20
echo "streamed tokens/s, 128 concurrent streams of 500 tokens (1 token per SSE event):"
"$b" --port "$http" --mode stream --model fast --conns 128 --max-tokens 500 --requests 512 --time-limit 30
