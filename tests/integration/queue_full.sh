#!/usr/bin/env bash
# Promise: a full pool queue refuses at once with HTTP 429, a Retry-After header and an
# OpenAI-style error body, and nothing else is disturbed: the requests that were running and
# queued when it happened complete whole, and the pool serves again once the queue drains.
# A sim worker of capacity 2 and router.workers.max_queue_per_pool=2: 2 streams run, 2 wait, the
# 5th is refused.
. "$(dirname "$0")/lib.sh"
start_router --set router.workers.max_queue_per_pool=2
start_worker q1 fast 20 20 --set worker.scheduler.max_num_seqs=2
wait_worker q1
pids=()
# 100 tokens at 20 tokens/s: 5 s each, long enough for the checks below on a loaded machine
for i in 1 2 3 4; do
    curl -sN --max-time 120 "$BASE/v1/completions" -H 'Content-Type: application/json' \
        -d "{\"model\":\"fast\",\"prompt\":\"q$i\",\"max_tokens\":100,\"stream\":true}" >"$T_DIR/s$i" &
    pids+=($!)
done
queued() { curl -s "$BASE/admin/workers" | json_get '[p["queued"] for p in d["pools"] if p["name"] == "fast"][0]'; }
for _ in $(seq 100); do # the router holds the 4: 2 running on q1, 2 in the pool's queue
    [ "$(workers_field q1 inflight)" = 2 ] && [ "$(queued)" = 2 ] && break
    sleep 0.05
done
[ "$(workers_field q1 inflight)" = 2 ] && [ "$(queued)" = 2 ] ||
    fail "never 2 running and 2 queued: $(curl -s "$BASE/admin/workers")"
body=$(post /v1/completions '{"model":"fast","prompt":"one too many","max_tokens":4}')
[ "$(status)" = 429 ] || fail "a 5th request got $(status), want 429: $body"
ra=$(header Retry-After)
[[ "$ra" =~ ^[1-9][0-9]*$ ]] || fail "429 without a positive Retry-After (got '$ra')"
python3 -c '
import json, sys
e = json.loads(sys.argv[1])["error"]
assert e["type"] and "at capacity" in e["message"], e' "$body" || fail "429 body: $body"
ok "a full queue: 429 with Retry-After $ra and an error body"
for p in "${pids[@]}"; do wait "$p" || fail "a running or queued stream's curl failed"; done
for i in 1 2 3 4; do
    t=$(sse_text "$T_DIR/s$i")
    case "$t" in ERROR:* | NO-DONE:*) fail "stream $i was disturbed by the refusal: $t" ;; esac
    n=$(grep -c '"text"' "$T_DIR/s$i" || true)
    [ "$n" -ge 2 ] || fail "stream $i: $n chunks"
done
post /v1/completions '{"model":"fast","prompt":"after","max_tokens":4}' >/dev/null
[ "$(status)" = 200 ] || fail "the pool did not serve after the queue drained: $(status)"
ok "the 2 running and 2 queued streams completed; the pool serves again"
