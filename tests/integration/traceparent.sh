#!/usr/bin/env bash
# Promise: a W3C `traceparent` header follows the request across processes: the router logs it
# with the request id and the pool, the worker logs it with the same request id when it accepts
# the request; a malformed traceparent is a 400 naming the header, never silently dropped.
. "$(dirname "$0")/lib.sh"
start_router
start_worker w1 fast 5 2000
wait_worker w1
tp=00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01
post /v1/completions '{"model":"fast","prompt":"hello","max_tokens":3}' -H "traceparent: $tp" \
  -H "X-Request-Id: trace-me-1" >/dev/null
[ "$(status)" = 200 ] || fail "completion: $(status) $(cat "$T_DIR/body")"
grep -q "request trace-me-1 traceparent $tp → pool fast" "$T_DIR/router.log" ||
  fail "router did not log the traceparent: $(grep -c traceparent "$T_DIR/router.log")"
for _ in $(seq 20); do grep -q "request trace-me-1\.[0-9.]* traceparent $tp accepted" "$T_DIR/worker-w1.log" && break; sleep 0.1; done
grep -q "request trace-me-1\.[0-9.]* traceparent $tp accepted" "$T_DIR/worker-w1.log" ||
  fail "worker did not log the traceparent with the request id"
for bad in "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7" \
           "00-00000000000000000000000000000000-00f067aa0ba902b7-01" \
           "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01" "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"; do
  post /v1/chat/completions '{"model":"fast","messages":[{"role":"user","content":"hi"}]}' -H "traceparent: $bad" >/dev/null
  [ "$(status)" = 400 ] && grep -q '"param":"traceparent"' "$T_DIR/body" ||
    fail "traceparent '$bad': $(status) $(cat "$T_DIR/body")"
done
post /v1/completions '{"model":"fast","prompt":"hello","max_tokens":3}' >/dev/null
[ "$(status)" = 200 ] || fail "without traceparent: $(status)"
ok "traceparent logged by router and worker with the request id; malformed ones refused"
