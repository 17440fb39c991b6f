#!/usr/bin/env bash
# Multi-turn routing benchmark (issue 34): one cluster of W CPU workers on one model, and for each
# routing policy (router.routing.policy) a fresh router in front of the same workers replays the
# same conversation trace (bench/multiturn.py: a shared 1,000-word system prompt, 12 conversations of
# 4 turns whose turns re-send their history, 6 in flight, users pausing ~0.5 s between turns). Policies are interleaved and repeated R times, each run
# under its own cache_salt so no run reuses another's KV; the table gives medians over the runs of
# each run's TTFT p50 / p99 of the later turns (2..T) and of the first turns, and the share of
# prompt tokens the workers reused (usage.prompt_tokens_details.cached_tokens).
# usage: bench/multiturn.sh [BUILD_DIR (build)] [WORKERS (3)] [REPEATS (3)] [MODEL.gguf]
#   MODEL default: a synthetic (random-weight) Q8_0 model written by sol-mkmodel (the small preset
#   cut to 6 layers, context 4096: ~0.7 s to prefill the 1,000-token system prompt on one core)
#   env: POLICIES (default "round_robin least_loaded affinity cache_aware"; an entry may carry
#        router flags after commas, compared as a row of its own, e.g.
#        "cache_aware cache_aware,--reply-tokens-mib,0"), THREADS per worker (1),
#        MT_ARGS (extra bench/multiturn.py flags, e.g. "--conversations 12 --system-words 900"),
#        CHAT_TEMPLATE (the workers' --chat-template, default chatml: the synthetic model's own
#        llama2 template writes a space between [/INST] and a reply that its generation never saw,
#        so a reply sent back cannot match its cached KV there; docs/kv_cache.md),
#        ROUTER_ARGS (extra sol-router flags, e.g. "--reply-tokens-mib 0")
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$src/build}
workers=${2:-3}
repeats=${3:-3}
model=${4:-}
policies=${POLICIES:-round_robin least_loaded affinity cache_aware}
threads=${THREADS:-1}
case "$workers$repeats$threads" in *[!0-9]*) echo "multiturn.sh: WORKERS, REPEATS, THREADS: numbers" >&2; exit 2 ;; esac
cmake --build "$build" --target sol-router sol-worker sol-mkmodel >/dev/null
if [ -z "$model" ]; then
  model=$build/bench-models/multiturn-q8_0.gguf
  mkdir -p "$build/bench-models"
  [ -f "$model" ] || "$build/tools/sol-mkmodel" -o "$model" --preset small --layers 6 --ctx 4096 \
    --type q8_0 --seed 1 >/dev/null 2>&1
fi
[ -f "$model" ] || { echo "multiturn.sh: no model at $model" >&2; exit 2; }

. "$src/bench/lib.sh"
bench_harness multiturn
zmq=tcp://127.0.0.1:$(port)
for i in $(seq "$workers"); do
  "$build/worker/sol-worker" --router "$zmq" --pool fast --id "w$i" --model "$model" \
    --threads "$threads" --chat-template "${CHAT_TEMPLATE:-chatml}" --log-level warn >"$dir/w$i.log" 2>&1 &
  pids+=($!)
done

router_pid=
start_router() { # POLICY[,FLAG,...]: a router with that policy (and flags); sets http
  http=$(port)
  local flags
  IFS=, read -r -a flags <<<"$1"
  # shellcheck disable=SC2086
  "$build/router/sol-router" --listen "127.0.0.1:$http" --bind "$zmq" --routing-policy "${flags[@]}" \
    ${ROUTER_ARGS:-} --log-level warn >>"$dir/router.log" 2>&1 &
  router_pid=$!
  for _ in $(seq 600); do
    [ "$(curl -fs "http://127.0.0.1:$http/admin/workers" 2>/dev/null |
      python3 -c 'import json,sys; print(sum(1 for w in json.load(sys.stdin)["workers"] if w.get("pool") == "fast"))' 2>/dev/null)" = "$workers" ] && return 0
    sleep 0.2
  done
  echo "multiturn.sh: the $workers workers did not all register" >&2; tail -5 "$dir"/*.log >&2; exit 1
}
stop_router() { kill -TERM "$router_pid" 2>/dev/null || true; wait "$router_pid" 2>/dev/null || true; }

echo "## multi-turn routing: $workers CPU workers x $threads thread(s), $(basename "$model"), $repeats repeats, $(nproc) CPUs; ${MT_ARGS:-defaults of bench/multiturn.py}" >&2
for r in $(seq "$repeats"); do
  for p in $policies; do
    start_router "$p"
    # shellcheck disable=SC2086
    python3 "$src/bench/multiturn.py" --port "$http" --salt "run-$r-$p-$$" ${MT_ARGS:-} >"$dir/$p.$r.json" ||
      { echo "multiturn.sh: run $r of $p failed:" >&2; cat "$dir/$p.$r.json" >&2; exit 1; }
    # replies sent back as their ids (docs/kv_cache.md), over every pool
    curl -fs "http://127.0.0.1:$http/metrics" | awk '/^sol_quoted_replies_total/ {n += $2} END {print n + 0}' \
      >"$dir/$p.$r.quoted"
    # requests each worker served in this run (the router is fresh: its counts are this run's)
    curl -fs "http://127.0.0.1:$http/admin/workers" |
      python3 -c 'import json,sys; print(" ".join(str(w.get("served", 0)) for w in sorted(json.load(sys.stdin)["workers"], key=lambda w: w["id"])))' \
      >"$dir/$p.$r.served"
    stop_router
    echo "  run $r $p done" >&2
  done
done
python3 - "$dir" "$repeats" $policies <<'EOF'
import json, statistics as st, sys
d, reps, pols = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
def q(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p * (len(xs) - 1))))]
rows = {}
for p in pols:
    later50, later99, first50, reuse, quoted = [], [], [], [], []
    for r in range(1, reps + 1):
        j = json.load(open(f"{d}/{p}.{r}.json"))
        quoted.append(int(open(f"{d}/{p}.{r}.quoted").read()) / max(1, j["assistant_messages"]))
        later = [x for t in j["ttft"][1:] for x in t]
        later50.append(q(later, 0.5)); later99.append(q(later, 0.99))
        first50.append(q(j["ttft"][0], 0.5))
        reuse.append(sum(j["cached_tokens"]) / max(1, sum(j["prompt_tokens"])))
    rows[p] = [st.median(later50), st.median(later99), st.median(first50), st.median(reuse),
               st.median(quoted)]
    served = [open(f"{d}/{p}.{r}.served").read().split() for r in range(1, reps + 1)]
    print(f"{p}: later-turn p50 per run (ms) {' '.join(f'{x * 1e3:.0f}' for x in later50)}; "
          f"requests per worker per run {' | '.join(' '.join(s) for s in served)}", file=sys.stderr)
print("| policy | later turns TTFT p50 (ms) | later turns p99 (ms) | first turns p50 (ms) | prompt tokens reused | replies sent as their ids |")
print("| --- | ---: | ---: | ---: | ---: | ---: |")
for p in pols:
    a, b, c, r, qd = rows[p]
    print(f"| {p} | {a * 1e3:.0f} | {b * 1e3:.0f} | {c * 1e3:.0f} | {100 * r:.0f}% | {100 * qd:.0f}% |")
if "cache_aware" in rows:
    ca = rows["cache_aware"][0]
    for p in pols:
        if p != "cache_aware" and "," not in p:
            print(f"\ncache_aware / {p}, later-turn median TTFT: {ca / rows[p][0]:.2f}", end="")
    print()
EOF
