#!/usr/bin/env bash
# Overload (issue 16): a pool of 2 sim workers (32 sequences each: 64 streams at once; a stream is
# 50 tokens at 100 tokens/s, ~0.52 s, so the pool's capacity is ~123 streams/s) offered LOAD times
# that capacity for SECONDS as an open loop (requests arrive at LOAD x 123/s whatever happens to
# the earlier ones, over up to 640 connections), after an unloaded run (16 clients). LOAD=closed
# instead runs 640 clients in a closed loop that ask again the moment they are refused, ignoring
# Retry-After (the worst case: thousands of times the capacity). Prints what was served, how many
# got 429 (and with Retry-After), the served streams' time to first token against the unloaded
# p99, and the router's peak RSS. QUEUE is router.workers.max_queue_per_pool: requests waiting for
# a worker before the excess gets 429 at once (a long queue trades the served requests' TTFT for
# fewer refusals).
# usage: bench/overload.sh [BUILD (build)] [SECONDS (60)] [QUEUE (0)] [LOAD (10) | closed]
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$src/build}
secs=${2:-60}
queue=${3:-0}
load=${4:-10}
capacity=123 # streams/s: 64 at once, ~0.52 s each
if [ "$load" = closed ]; then
    offer=(--requests 10000000)
    what="640 clients in a closed loop ignoring Retry-After"
else
    rate=$(python3 -c "print($load * $capacity)")
    offer=(--rate "$rate" --requests "$(python3 -c "print(int($rate * $secs))")")
    what="an open loop at ${load}x capacity ($rate requests/s)"
fi
cmake --build "$build" -j"$(nproc)" --target sol-router sol-worker bench_router >/dev/null
. "$src/bench/lib.sh"
bench_harness overload
http=$(port)
zmq=tcp://127.0.0.1:$(port)
"$build/router/sol-router" --listen "127.0.0.1:$http" --bind "$zmq" --log-level warn \
    --set "router.workers.max_queue_per_pool=$queue" --set router.http.max_connections=4096 \
    --set router.http.max_connections_per_client=4096 >"$dir/router.log" 2>&1 &
rpid=$!
pids+=($rpid)
for i in 1 2; do
    "$build/worker/sol-worker" --backend sim --pool fast --id "w$i" --router "$zmq" --log-level warn \
        --set worker.sim.ttft_ms=20 --set worker.sim.tokens_per_s=100 \
        --set worker.scheduler.max_num_seqs=32 >"$dir/w$i.log" 2>&1 &
    pids+=($!)
done
"$build/worker/sol-worker" --backend sim --pool precise --id wp --router "$zmq" --log-level warn \
    >"$dir/wp.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do curl -fs "http://127.0.0.1:$http/ready" >/dev/null 2>&1 && break; sleep 0.1; done
b=$build/bench/bench_router
field() { tr ' ' '\n' <<<"$1" | sed -n "s|^$2=||p"; }
unloaded=$("$b" --port "$http" --mode stream --model fast --conns 16 --max-tokens 50 \
    --requests 200 --time-limit 60 || true)
rss_peak=0
( while kill -0 "$rpid" 2>/dev/null; do
      awk '/VmRSS/ {print $2}' "/proc/$rpid/status"; sleep 1
  done ) >"$dir/rss" &
pids+=($!)
rss0=$(awk '/VmRSS/ {print $2}' "/proc/$rpid/status")
loaded=$("$b" --port "$http" --mode stream --model fast --conns 640 --max-tokens 50 \
    "${offer[@]}" --time-limit "$secs" --read-timeout 60 || true)
rss_peak=$(sort -n "$dir/rss" | tail -1)
echo "## overload: 2 sim workers x 32 streams (capacity 64 at once, ~$capacity/s), $what for $secs s, queue $queue"
echo "unloaded (16 clients): served $(field "$unloaded" requests), TTFT p50 $(field "$unloaded" ttft_p50) p99 $(field "$unloaded" ttft_p99)"
echo "overloaded: served $(field "$loaded" requests) ($(field "$loaded" requests/s)/s), 429 $(field "$loaded" rejected_429) (with Retry-After $(field "$loaded" with_retry_after)), other errors $(( $(field "$loaded" errors) - $(field "$loaded" rejected_429) ))"
echo "overloaded: served streams' TTFT p50 $(field "$loaded" ttft_p50) p99 $(field "$loaded" ttft_p99)"
echo "router RSS: $((rss0 / 1024)) MiB before, $((rss_peak / 1024)) MiB peak"
