#!/usr/bin/env bash
# Promise: tools/sol-bench drives an OpenAI server (here sol-router + sim workers with a known TTFT
# of 50 ms and 100 tokens/s): a concurrency sweep completes every request, reports TTFT/TPOT/ITL/
# E2EL percentiles that respect the server's pacing (lower bounds only: a slow machine can only
# add), throughput and goodput under an SLO; the four cases run as four levels; --json, --compare
# and --plot (SVG) work; Ctrl-C still reports and writes what was measured; bad flags exit 2.
. "$(dirname "$0")/lib.sh"
SB=$SOL_SOURCE/tools/sol-bench
start_router
start_worker b1 fast 50 100
wait_worker b1
"$SB" --url "$BASE" --model fast --num-prompts 6 --concurrency 1,3 --output-len 8 --warmup 1 \
  --slo ttft=10,tpot=10 --json "$T_DIR/a.json" >"$T_DIR/a.out" 2>"$T_DIR/a.err" || fail "sweep: $(tail -3 "$T_DIR/a.err")"
python3 - "$T_DIR/a.json" <<'PYEOF' || fail "sweep results: $(cat "$T_DIR/a.out")"
import json, sys
d = json.load(open(sys.argv[1]))
assert [s["level"]["concurrency"] for s in d["levels"]] == [1, 3], d["levels"]
for s in d["levels"]:
    assert s["completed"] == 6 and s["failed"] == 0, s
    assert s["ttft"]["p50"] >= 0.045 and s["ttft"]["p99"] >= s["ttft"]["p50"], s["ttft"]
    assert s["tpot"]["p50"] >= 0.008, s["tpot"]       # 100 tok/s: 10 ms per token
    assert s["e2el"]["p50"] >= 0.045 + 7 * 0.008, s["e2el"]
    assert s["mean_output_tokens"] == 8 and s["output_token_throughput"] > 0
    assert 0 < s["goodput"] <= s["request_throughput"] + 1e-9, s
    assert len(s["samples"]["ttft"]) == 6
PYEOF
grep -q "TTFT .* TPOT\|^   TTFT" "$T_DIR/a.out" || fail "no table printed"

"$SB" --url "$BASE" --model fast --num-prompts 2 --concurrency 2 --dataset cases --short-output 4 \
  --long-output 12 --warmup 0 --json "$T_DIR/b.json" >"$T_DIR/b.out" 2>&1 || fail "cases: $(tail -3 "$T_DIR/b.out")"
[ "$(grep -c '^== concurrency 2, ' "$T_DIR/b.out")" = 4 ] || fail "cases: expected 4 levels: $(cat "$T_DIR/b.out")"
# captured first: grep -q stops reading at the match, and sol-bench's next line would then
# meet a closed pipe (BrokenPipeError, a failure under pipefail that depends on timing)
cmp_out=$("$SB" --compare "$T_DIR/a.json" "$T_DIR/a.json") || fail "--compare exited $?"
grep -q "output tok/s .* 1.00$" <<<"$cmp_out" || fail "--compare: $cmp_out"
"$SB" --plot "$T_DIR/p.svg" "$T_DIR/a.json" "$T_DIR/b.json" >/dev/null || fail "--plot"
python3 -c 'import sys, xml.dom.minidom as m; d = m.parse(sys.argv[1]); assert d.getElementsByTagName("polyline")' "$T_DIR/p.svg" || fail "--plot wrote no valid SVG"

"$SB" --url "$BASE" --model fast --num-prompts 500 --concurrency 2 --output-len 30 --warmup 0 \
  --json "$T_DIR/c.json" >"$T_DIR/c.out" 2>&1 & pid=$!
sleep 2; kill -INT $pid; rc=0; wait $pid || rc=$?
[ $rc = 130 ] || fail "Ctrl-C: exit $rc (expected 130): $(tail -3 "$T_DIR/c.out")"
python3 -c 'import json, sys; d = json.load(open(sys.argv[1])); s = d["levels"][0]; assert d["interrupted"] and s["level"]["partial"] and 0 < s["completed"] < 500, s["completed"]' "$T_DIR/c.json" || fail "Ctrl-C: no partial results"

# --slo-headers sends the targets: a 20 ms deadline on a 50 ms first token is never met, so no
# request is served (each ends with deadline_exceeded), where without the header all were
"$SB" --url "$BASE" --model fast --num-prompts 4 --concurrency 2 --output-len 4 --warmup 0 \
  --slo e2el=0.02 --slo-headers --json "$T_DIR/d.json" >"$T_DIR/d.out" 2>&1 && fail "--slo-headers: nothing failed, exit 0"
python3 -c 'import json, sys; s = json.load(open(sys.argv[1]))["levels"][0]; assert s["completed"] == 0 and s["failed"] == 4 and "deadline" in s["first_error"], s.get("first_error")' "$T_DIR/d.json" \
  || fail "--slo-headers: $(tail -3 "$T_DIR/d.out")"
# --burst: Poisson arrivals at 3x the rate for 0.2 s of every 0.4 s
"$SB" --url "$BASE" --model fast --num-prompts 8 --concurrency 8 --output-len 2 --warmup 0 \
  --rate 20 --burst 3,0.2,0.2 --json "$T_DIR/e.json" >"$T_DIR/e.out" 2>&1 || fail "--burst: $(tail -3 "$T_DIR/e.out")"
python3 -c 'import json, sys; s = json.load(open(sys.argv[1]))["levels"][0]; assert s["completed"] == 8, s' "$T_DIR/e.json" || fail "--burst: not all served"

for bad in "--concurrency 0" "--slo latency=1" "--range-ratio 2" "--dataset jsonl" "--rate x" \
  "--slo-headers" "--burst 3,1,1" "--rate 1 --burst 3,0,1"; do
  # shellcheck disable=SC2086
  out=$("$SB" --url "$BASE" --model fast $bad 2>&1) && fail "$bad accepted"
  grep -q "^sol-bench: " <<<"$out" || fail "$bad: $out"
done
echo '{"prompt":"hi","max_tokens":3,"top_k":2}' >"$T_DIR/bad.jsonl"
out=$("$SB" --url "$BASE" --model fast --dataset jsonl --file "$T_DIR/bad.jsonl" 2>&1) && fail "unknown jsonl key accepted"
grep -q "bad.jsonl:1: unknown key 'top_k'" <<<"$out" || fail "jsonl error: $out"
ok "sweep, cases, compare, plot, Ctrl-C, --slo-headers, --burst and flag errors"
