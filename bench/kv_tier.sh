#!/usr/bin/env bash
# KV tier 2 benchmark (issue 34): the multi-turn trace (bench/multiturn.py) against two clusters
# side by side that differ only in the workers' second KV tier - W CPU workers each, the same model,
# KV pools too small for the trace's working set (worker.kv.num_blocks) - one without a second tier
# and one with worker.kv.tier2_blocks. Runs alternate between the clusters, R each, every run under
# its own cache_salt; the table gives medians over runs of the prompt tokens the workers computed
# (prompt - cached), the share reused, the share served by tier 2, and the later turns' TTFT.
# usage: bench/kv_tier.sh [BUILD_DIR (build)] [WORKERS (3)] [REPEATS (3)] [POOL_BLOCKS (192)]
#        [TIER2_BLOCKS (2048)]
#   env: MODEL (default: the synthetic Q8_0 model bench/multiturn.sh writes), POLICY (cache_aware),
#        MT_ARGS (extra bench/multiturn.py flags)
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$src/build}
workers=${2:-3}
repeats=${3:-3}
pool_blocks=${4:-192}
tier_blocks=${5:-2048}
policy=${POLICY:-cache_aware}
case "$workers$repeats$pool_blocks$tier_blocks" in *[!0-9]*) echo "kv_tier.sh: WORKERS, REPEATS, POOL_BLOCKS, TIER2_BLOCKS: numbers" >&2; exit 2 ;; esac
cmake --build "$build" --target sol-router sol-worker sol-mkmodel >/dev/null
model=${MODEL:-$build/bench-models/multiturn-q8_0.gguf}
if [ ! -f "$model" ]; then
  mkdir -p "$(dirname "$model")"
  "$build/tools/sol-mkmodel" -o "$model" --preset small --layers 6 --ctx 4096 --type q8_0 --seed 1 \
    >/dev/null 2>&1
fi
len=$((pool_blocks * 16 < 4096 ? pool_blocks * 16 : 4096))

. "$src/bench/lib.sh"
bench_harness kv_tier
declare -A http
for c in plain tier; do
  zmq=tcp://127.0.0.1:$(port)
  http[$c]=$(port)
  "$build/router/sol-router" --listen "127.0.0.1:${http[$c]}" --bind "$zmq" --routing-policy "$policy" \
    --log-level warn >"$dir/router-$c.log" 2>&1 &
  pids+=($!)
  extra=()
  [ "$c" = tier ] && extra=(--set worker.kv.tier2_blocks="$tier_blocks")
  for i in $(seq "$workers"); do
    "$build/worker/sol-worker" --router "$zmq" --pool fast --id "$c$i" --model "$model" --threads 1 \
      --log-level warn --set worker.kv.num_blocks="$pool_blocks" --set worker.kv.max_model_len="$len" \
      "${extra[@]}" >"$dir/$c$i.log" 2>&1 &
    pids+=($!)
  done
done
for c in plain tier; do
  for _ in $(seq 600); do
    [ "$(curl -fs "http://127.0.0.1:${http[$c]}/admin/workers" 2>/dev/null |
      python3 -c 'import json,sys; print(len(json.load(sys.stdin)["workers"]))' 2>/dev/null)" = "$workers" ] && break
    sleep 0.2
  done
done

echo "## KV tier 2: $workers CPU workers per cluster, pools of $pool_blocks blocks (16 tokens), tier 2 of $tier_blocks blocks, $policy, $repeats repeats, $(nproc) CPUs; ${MT_ARGS:-defaults of bench/multiturn.py}" >&2
tier_hits() { # the tier cluster's workers' tier-2 hit tokens, summed
  curl -fs "http://127.0.0.1:${http[tier]}/admin/workers" |
    python3 -c 'import json,sys; print(sum(w.get("kv_tier2_hit_tokens", 0) for w in json.load(sys.stdin)["workers"]))'
}
for r in $(seq "$repeats"); do
  for c in plain tier; do
    before=$(tier_hits)
    # shellcheck disable=SC2086
    python3 "$src/bench/multiturn.py" --port "${http[$c]}" --salt "run-$r-$c-$$" ${MT_ARGS:-} >"$dir/$c.$r.json" ||
      { echo "kv_tier.sh: run $r of $c failed:" >&2; cat "$dir/$c.$r.json" >&2; exit 1; }
    sleep 1.5 # a heartbeat brings the tier counters
    echo $(($(tier_hits) - before)) >"$dir/$c.$r.t2"
    echo "  run $r $c done" >&2
  done
done
python3 - "$dir" "$repeats" <<'EOF'
import json, statistics as st, sys
d, reps = sys.argv[1], int(sys.argv[2])
def q(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p * (len(xs) - 1))))]
rows = {}
for c in ("plain", "tier"):
    computed, reused, t2, later50 = [], [], [], []
    for r in range(1, reps + 1):
        j = json.load(open(f"{d}/{c}.{r}.json"))
        p, k = sum(j["prompt_tokens"]), sum(j["cached_tokens"])
        hits = int(open(f"{d}/{c}.{r}.t2").read()) if c == "tier" else 0
        computed.append(p - k); reused.append(k / max(1, p)); t2.append(hits / max(1, p))
        later50.append(q([x for t in j["ttft"][1:] for x in t], 0.5))
    rows[c] = [st.median(computed), st.median(reused), st.median(t2), st.median(later50)]
print("| cluster | prompt tokens computed | reused | from tier 2 | later turns TTFT p50 (ms) |")
print("| --- | ---: | ---: | ---: | ---: |")
for c in ("plain", "tier"):
    a, b, t, l = rows[c]
    print(f"| {c} | {a:.0f} | {100 * b:.0f}% | {100 * t:.0f}% | {l * 1e3:.0f} |")
print(f"\ntier / plain, prompt tokens computed: {rows['tier'][0] / max(1, rows['plain'][0]):.2f}")
EOF
