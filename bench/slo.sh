#!/usr/bin/env bash
# Goodput with and without latency targets (issue 35): one router, W simulated workers (capacity
# CAP streams each; a stream's first token after TTFT_MS, then TPS tokens/s: the same service time
# on every run), and tools/sol-bench offering Poisson arrivals at RATE req/s with bursts at 3x that
# (3 s of every 9: the bursts run at 2-3x the pool's capacity), 32-token completions. Two arms,
# interleaved and repeated R times, differ only in whether sol-bench sends its --slo to the router
# as X-Sol-TTFT-Ms / X-Sol-TPOT-Ms (the router then refuses at once what it predicts would miss,
# and expires what waits too long); goodput (requests per second meeting every target) is judged
# by sol-bench the same way on both. The table: medians over the runs of goodput, requests served
# and refused, and the served requests' TTFT p50/p99.
# usage: bench/slo.sh [BUILD (build)] [REPEATS (3)] [WORKERS (3)] [RATE (6)] [PROMPTS (240)]
#   env: CAP (4), TTFT_MS (100), TPS (20), SLO (ttft=1,tpot=0.1)
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$src/build}
repeats=${2:-3}
workers=${3:-3}
rate=${4:-6}
prompts=${5:-240}
cap=${CAP:-4}
ttft=${TTFT_MS:-100}
tps=${TPS:-20}
slo=${SLO:-ttft=1,tpot=0.1}
cmake --build "$build" --target sol-router sol-worker >/dev/null
. "$src/bench/lib.sh"
bench_harness slo
http=$(port)
zmq=tcp://127.0.0.1:$(port)
"$build/router/sol-router" --listen "127.0.0.1:$http" --bind "$zmq" --log-level warn \
    --set router.workers.heartbeat_ms=200 --set router.workers.max_queue_per_pool=100000 \
    --set router.http.max_connections=4096 --set router.http.max_connections_per_client=4096 \
    >"$dir/router.log" 2>&1 &
pids+=($!)
for i in $(seq "$workers"); do
    "$build/worker/sol-worker" --backend sim --pool fast --id "w$i" --router "$zmq" --log-level warn \
        --set worker.heartbeat_ms=200 --set worker.scheduler.max_num_seqs="$cap" \
        --set worker.sim.ttft_ms="$ttft" --set worker.sim.tokens_per_s="$tps" >"$dir/w$i.log" 2>&1 &
    pids+=($!)
done
for _ in $(seq 100); do
    [ "$(curl -fs "http://127.0.0.1:$http/admin/workers" 2>/dev/null | python3 -c 'import json,sys; print(len(json.load(sys.stdin)["workers"]))' 2>/dev/null)" = "$workers" ] && break
    sleep 0.1
done
service=$(python3 -c "print(round($ttft / 1000 + 31 / $tps, 2))")
capacity=$(python3 -c "print(round($workers * $cap / $service, 1))")
echo "## goodput: $workers sim workers x $cap streams (TTFT $ttft ms, $tps tokens/s: ~$service s a 32-token request, ~$capacity req/s), Poisson $rate req/s with 3x bursts 3 s of every 9, $prompts requests, --slo $slo, $repeats repeats" >&2
for r in $(seq "$repeats"); do
    for arm in without with; do
        extra=()
        [ "$arm" = with ] && extra=(--slo-headers)
        "$src/tools/sol-bench" --url "http://127.0.0.1:$http" --model fast --num-prompts "$prompts" \
            --concurrency 4096 --rate "$rate" --burst 3,3,6 --input-len 200 --output-len 32 \
            --warmup 4 --seed "$r" --slo "$slo" "${extra[@]}" --json "$dir/$arm.$r.json" \
            >"$dir/$arm.$r.out" 2>&1 || true
        echo "  run $r $arm done" >&2
    done
done
python3 - "$dir" "$repeats" <<'PYEOF'
import json, statistics as st, sys
d, reps = sys.argv[1], int(sys.argv[2])
rows = {}
for arm in ("without", "with"):
    cols = []
    for r in range(1, reps + 1):
        s = json.load(open(f"{d}/{arm}.{r}.json"))["levels"][0]
        cols.append((s["goodput"], s["completed"], s["verdicts"]["refused"],
                     s["verdicts"]["errored"] + s["verdicts"]["lost"] + s["verdicts"]["cut"],
                     s["ttft"]["p50"] or 0, s["ttft"]["p99"] or 0))
    rows[arm] = [st.median(c[i] for c in cols) for i in range(6)]
print("| latency targets sent | goodput (req/s) | served | refused, never run (429/503) | other errors | served TTFT p50 (ms) | served TTFT p99 (ms) |")
print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
for arm in ("without", "with"):
    g, c, rf, er, p50, p99 = rows[arm]
    print(f"| {arm} | {g:.2f} | {c:.0f} | {rf:.0f} | {er:.0f} | {p50 * 1e3:.0f} | {p99 * 1e3:.0f} |")
print(f"\ngoodput with / without: {rows['with'][0] / max(1e-9, rows['without'][0]):.2f}")
PYEOF
