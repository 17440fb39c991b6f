# Promise: after the router restarts (same ports), the running workers re-register on their own and
# new requests succeed within 3 s; /ready reflects whether every configured pool has a worker.
. "$(dirname "$0")/lib.sh"

start_router
start_worker wf fast 1 2000
wait_http "$BASE/ready" 503 30 || fail "/ready must be 503 while pool precise has no worker"
start_worker wp precise 1 2000
wait_ready
post /v1/completions '{"model":"demo","prompt":"before restart","max_tokens":3}' >/dev/null
[ "$(status)" = 200 ] || fail "request before restart: $(status)"

kill -TERM "$ROUTER_PID"
wait "$ROUTER_PID" || fail "router did not exit 0 on SIGTERM"
t0=$(date +%s%N)
start_router
wait_http "$BASE/ready" 200 30 || fail "workers did not re-register within 3 s"
post /v1/completions '{"model":"demo","prompt":"after restart","max_tokens":3}' >/dev/null
t_ms=$(( ($(date +%s%N) - t0) / 1000000 ))
[ "$(status)" = 200 ] || fail "request after restart: $(status)"
[ "$t_ms" -lt 3000 ] || fail "first request after restart succeeded only after $t_ms ms"
ok "router restart: workers re-registered, request served $t_ms ms after the restart"
