#!/usr/bin/env bash
# The load tools count honestly (issue 28): bench_router, sol-bench and the soak's rule
# (bench/benchlib.py) each get streams whose only worker is killed mid-stream with no replacement,
# and must count every one as lost, none as served; a healthy run must count every stream served
# with every token. The router ends such a stream with an error event and then [DONE]: a tool that
# looked only for [DONE] (or counted done x max_tokens) would call it served.
. "$(dirname "$0")/lib.sh"
BENCH=$SOL_BUILD/bench/bench_router
[ -x "$BENCH" ] || fail "missing $BENCH"
field() { tr ' ' '\n' <<<"$1" | sed -n "s|^$2=||p" | tail -1; }
# kill_streaming ID N: once worker ID runs N streams, let them send tokens for a second, then
# kill -9 it (a deterministic point, whatever the machine's load)
kill_streaming() {
    for _ in $(seq 300); do [ "$(workers_field "$1" inflight)" = "$2" ] && break; sleep 0.05; done
    [ "$(workers_field "$1" inflight)" = "$2" ] || { echo "worker $1 never ran $2 streams" >&2; return 1; }
    sleep 1
    kill -9 "${W_PID[$1]}"
}

start_router
start_worker w1 fast 20 200
wait_worker w1

# healthy: 6 streams of 30 tokens, every one served whole
out=$("$BENCH" --port "$HTTP_PORT" --mode stream --model fast --conns 3 --requests 6 \
      --max-tokens 30 --time-limit 60) || fail "healthy run exited non-zero: $out"
[ "$(field "$out" served)" = 6 ] && [ "$(field "$out" tokens)" = 180 ] \
    || fail "healthy run: want served=6 tokens=180: $out"
for k in lost cut errored refused; do
    [ "$(field "$out" "$k")" = 0 ] || fail "healthy run counted $k: $out"
done
ok "bench_router: 6 healthy streams served, 180 tokens"
python3 "$SOL_SOURCE/tools/sol-bench" --url "$BASE" --model fast --endpoint completions \
    --concurrency 3 --num-prompts 3 --warmup 0 --output-len 20 --json "$T_DIR/ok.json" \
    >"$T_DIR/ok.out" 2>&1 || fail "sol-bench healthy run: $(cat "$T_DIR/ok.out")"
python3 -c 'import json, sys; v = json.load(open(sys.argv[1]))["levels"][0]["verdicts"]
assert v["served"] == 3, v' "$T_DIR/ok.json" || fail "sol-bench: healthy streams not served"
judge() { # judge FILE.sse STATUS MAX_TOKENS: benchlib's verdict
    python3 -c 'import sys; sys.path.insert(0, sys.argv[1] + "/bench"); import benchlib
print(benchlib.judge_sse(int(sys.argv[3]), open(sys.argv[2], "rb").read(), int(sys.argv[4])))' \
        "$SOL_SOURCE" "$@"
}
curl -sN "$BASE/v1/completions" -H 'Content-Type: application/json' -o "$T_DIR/ok.sse" \
    -d '{"model":"fast","prompt":"x","max_tokens":12,"stream":true,"stream_options":{"include_usage":true}}'
[ "$(judge "$T_DIR/ok.sse" 200 12)" = served ] || fail "benchlib: a whole stream not served"
[ "$(judge "$T_DIR/ok.sse" 200 13)" = cut ] || fail "benchlib: a stream a token short not cut"
ok "sol-bench and benchlib: healthy streams served, a short one cut"

# the same worker, slowed to 40 tokens/s, is killed 2 s into 4 streams of 400 tokens
kill -9 "${W_PID[w1]}"
start_worker w2 fast 20 40
wait_worker w2
"$BENCH" --port "$HTTP_PORT" --mode stream --model fast --conns 4 --requests 4 \
    --max-tokens 400 --time-limit 60 --read-timeout 30 >"$T_DIR/broken.out" 2>&1 &
bpid=$!
kill_streaming w2 4 || fail "bench_router's streams never reached the worker"
rc=0; wait "$bpid" || rc=$?
out=$(cat "$T_DIR/broken.out")
[ "$rc" = 1 ] || fail "bench_router exited $rc on lost streams (want 1): $out"
[ "$(field "$out" served)" = 0 ] || fail "bench_router counted a cut stream as served: $out"
[ "$(field "$out" lost)" = 4 ] || fail "bench_router: want lost=4: $out"
[ "$(field "$out" tokens)" = 0 ] || fail "bench_router counted tokens of lost streams: $out"
ok "bench_router: 4 streams whose worker died counted lost ($(field "$out" partial_events) partial events)"

# sol-bench: the same failure, seen through its verdicts (--json)
start_worker w3 fast 20 40
wait_worker w3
kill_streaming w3 3 >"$T_DIR/kill3.log" 2>&1 &
python3 "$SOL_SOURCE/tools/sol-bench" --url "$BASE" --model fast --endpoint completions \
    --concurrency 3 --num-prompts 3 --warmup 0 --output-len 400 \
    --json "$T_DIR/sb.json" >"$T_DIR/sb.out" 2>&1 || true
python3 - "$T_DIR/sb.json" <<'PY' || fail "sol-bench: $(cat "$T_DIR/sb.out")"
import json, sys
lv = json.load(open(sys.argv[1]))["levels"][0]
v = lv["verdicts"]
assert lv["completed"] == 0 and v["served"] == 0, f"counted as served: {v}"
assert v["lost"] == 3, f"want lost 3: {v} {lv.get('first_error')}"
PY
ok "sol-bench: 3 streams whose worker died counted lost"

# the soak's rule (benchlib.judge_sse) on a stream cut the same way, read by curl
start_worker w4 fast 20 40
wait_worker w4
kill_streaming w4 1 >"$T_DIR/kill4.log" 2>&1 &
curl -sN "$BASE/v1/completions" -H 'Content-Type: application/json' -o "$T_DIR/cut.sse" \
    -w '%{http_code}' -d '{"model":"fast","prompt":"x","max_tokens":400,"stream":true,
    "stream_options":{"include_usage":true}}' >"$T_DIR/cut.status"
grep -q '"error"' "$T_DIR/cut.sse" || fail "the cut stream carried no error event: $(tail -c 300 "$T_DIR/cut.sse")"
v=$(judge "$T_DIR/cut.sse" "$(cat "$T_DIR/cut.status")" 400)
[ "$v" = lost ] || fail "benchlib.judge_sse said '$v' for a stream cut by its worker's death"
ok "soak/benchlib: the cut stream is lost"
