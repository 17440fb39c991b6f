#!/usr/bin/env bash
# Real-cluster benchmark: sol-router + one fast worker (Q4_0, + draft model when sol-mkmodel can
# derive one) + one precise worker (F16) on synthetic models, CPU backend, 127.0.0.1. For four cases
# (short/long prompt x short/long output) and both pools, streams requests one at a time and prints
# a markdown table of TTFT, TPOT (time per output token after the first) and decode throughput.
# usage: bench/cluster.sh [BUILD_DIR (build)] [PRESET (small)] [THREADS per worker (nproc/2)] [N (3)]
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$src/build}
preset=${2:-small}
threads=${3:-$(( $(nproc) / 2 > 0 ? $(nproc) / 2 : 1 ))}
n=${4:-3}
cmake -S "$src" -B "$build" >/dev/null
cmake --build "$build" -j"$(nproc)" --target sol-router sol-worker sol-mkmodel >/dev/null

models=$build/bench-models
mkdir -p "$models"
mk() { [ -f "$models/$1" ] || "$build/tools/sol-mkmodel" -o "$models/$1" "${@:2}" >/dev/null 2>&1; }
mk "$preset-f16.gguf" --preset "$preset" --type f16 --seed 1
mk "$preset-q4_0.gguf" --preset "$preset" --type q4_0 --seed 1
draft=()
if grep -q -- --draft-of <<<"$("$build/tools/sol-mkmodel" --help 2>&1)"; then
    mk "$preset-draft-q4_0.gguf" --draft-of "$models/$preset-f16.gguf" --type q4_0
    draft=(--draft-model "$models/$preset-draft-q4_0.gguf")
fi

. "$src/bench/lib.sh"
bench_harness cluster
http=$(port)
zmq=tcp://127.0.0.1:$(port)
"$build/router/sol-router" --listen "127.0.0.1:$http" --bind "$zmq" --log-level warn >"$dir/r.log" 2>&1 &
pids+=($!)
"$build/worker/sol-worker" --router "$zmq" --pool fast --model "$models/$preset-q4_0.gguf" "${draft[@]}" \
    --threads "$threads" --log-level warn >"$dir/fast.log" 2>&1 &
pids+=($!)
"$build/worker/sol-worker" --router "$zmq" --pool precise --model "$models/$preset-f16.gguf" \
    --threads "$threads" --log-level warn >"$dir/precise.log" 2>&1 &
pids+=($!)
for _ in $(seq 600); do
    curl -fs "http://127.0.0.1:$http/ready" >/dev/null 2>&1 && break
    sleep 0.2
done
curl -fs "http://127.0.0.1:$http/ready" >/dev/null || { tail "$dir"/*.log; exit 1; }

echo "## cluster: preset $preset, $threads thread(s) per worker, $n requests per cell, $(nproc) CPUs${draft:+, fast worker with draft model}"
python3 - "$http" "$n" <<'EOF'
import http.client, json, statistics, sys, time
port, n = int(sys.argv[1]), int(sys.argv[2])
words = "the quick brown fox jumps over a lazy dog while seven wizards quietly hex jumbled boxes".split()
def prompt(k):  # about k tokens of ordinary words
    return " ".join(words[i % len(words)] for i in range(k))
def run(pool, p, out):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
    body = json.dumps({"model": pool, "prompt": p, "max_tokens": out, "temperature": 0,
                       "stream": True, "stream_options": {"include_usage": True}})
    t0 = time.perf_counter()
    c.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
    r = c.getresponse()
    assert r.status == 200, r.read()
    ttft, usage = None, None
    for line in r:
        line = line.strip()
        if not line.startswith(b"data: {"): continue
        d = json.loads(line[6:])
        if d.get("usage"): usage = d["usage"]
        if ttft is None and any(ch.get("text") for ch in d.get("choices", [])):
            ttft = time.perf_counter() - t0
    e2e = time.perf_counter() - t0
    c.close()
    k = usage["completion_tokens"]
    return ttft, (e2e - ttft) / max(k - 1, 1), k / e2e, usage["prompt_tokens"], k
cases = [("short prompt, short output", 8, 16), ("short prompt, long output", 8, 128),
         ("long prompt, short output", 512, 16), ("long prompt, long output", 512, 128)]
print("| case | pool | prompt tok | output tok | TTFT p50 (ms) | TPOT p50 (ms) | tokens/s (e2e) |")
print("| --- | --- | ---: | ---: | ---: | ---: | ---: |")
for name, pk, out in cases:
    for pool in ("fast", "precise"):
        run(pool, "warm up " + prompt(4), 2)
        rs = [run(pool, f"{name} {i} " + prompt(pk), out) for i in range(n)]  # distinct: no cache hits
        med = lambda j: statistics.median(r[j] for r in rs)
        print(f"| {name} | {pool} | {rs[0][3]} | {rs[0][4]} | {med(0)*1e3:.0f} | {med(1)*1e3:.1f} | {med(2):.1f} |")
EOF
