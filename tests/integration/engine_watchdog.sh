# Promise: a worker whose engine stops stepping while it has work (the test-only fault
# SOL_TEST_ENGINE_STALL: the engine thread stops before its N-th step, as a hung device would)
# reports itself unhealthy within worker.stall_after_ms although its link keeps heartbeating; the
# router then sends it nothing, fails its streams over with nothing lost or duplicated, and lists
# it as unhealthy with the reason in /admin/workers; its --health-file stops being renewed while a
# healthy worker's is.
. "$(dirname "$0")/lib.sh"

M=$T_DIR/m.gguf
mkmodel "$M" --seed 31
# round_robin: under cache_aware (the default) the streams' prompts are cached on ref, which ran
# them for the reference texts, so when the streams arrive spread out (a loaded machine) ref can
# take all four and the stalled worker never gets work to stall on. Two consecutive choices of
# round_robin include each of the pool's two workers.
start_router --routing-policy round_robin
start_worker wf fast 1 1000
start_cpu_worker ref precise "$M" --health-file "$T_DIR/ref.health"
wait_ready
wait_worker ref
N=4
body() { echo "{\"model\":\"precise\",\"prompt\":\"watchdog prompt $1\",\"max_tokens\":40,\"temperature\":0${2:-}}"; }
for i in $(seq $N); do
    post /v1/completions "$(body "$i")" | json_get 'd["choices"][0]["text"]' >"$T_DIR/ref.$i"
done
SOL_TEST_ENGINE_STALL=6 start_cpu_worker stuck precise "$M" --set worker.stall_after_ms=400 \
    --health-file "$T_DIR/stuck.health"
wait_worker stuck
PIDS=()
for i in $(seq $N); do
    curl -sN "$BASE/v1/completions" -d "$(body "$i" ',"stream":true')" >"$T_DIR/s.$i" &
    PIDS+=($!)
done
for p in "${PIDS[@]}"; do wait "$p" || fail "a stream's curl failed"; done
for i in $(seq $N); do
    got=$(sse_text "$T_DIR/s.$i")
    [ "$got" = "$(cat "$T_DIR/ref.$i")" ] || fail "stream $i differs:\n got  '$got'\n want '$(cat "$T_DIR/ref.$i")'"
done
for _ in $(seq 50); do [ "$(workers_field stuck state)" = unhealthy ] && break; sleep 0.1; done
[ "$(workers_field stuck state)" = unhealthy ] || fail "the stalled worker is $(workers_field stuck state)"
why=$(workers_field stuck unhealthy_reason)
grep -q "has not stepped for .* ms .*worker.stall_after_ms" <<<"$why" || fail "reason: '$why'"
[ "$(workers_field stuck failed_over)" -gt 0 ] || fail "no stream of the stalled worker failed over"
kill -0 "${W_PID[stuck]}" || fail "the stalled worker died instead of reporting"
# (the metrics text is read whole first: grep -q closing the pipe early fails curl under pipefail)
for _ in $(seq 30); do # metrics follow the heartbeats
    metrics=$(curl -s "$BASE/metrics")
    grep -q '^sol_worker_unhealthy{.*worker="stuck".*} 1' <<<"$metrics" && break
    sleep 0.1
done
grep -q '^sol_worker_unhealthy{.*worker="stuck".*} 1' <<<"$metrics" ||
    fail "metrics: $(grep sol_worker_unhealthy <<<"$metrics")"
ok "a stalled engine: unhealthy ('$why'), $N streams complete unchanged"

# The health file (--health-file, for container liveness probes): renewed every heartbeat by a
# healthy worker, no longer by the stalled one, whose file grows old while it still runs.
grep -q "^healthy [0-9]*$" "$T_DIR/stuck.health" || fail "no health file from the stalled worker"
before_ref=$(cat "$T_DIR/ref.health") before_stuck=$(cat "$T_DIR/stuck.health")
sleep 2.2
[ "$(cat "$T_DIR/ref.health")" != "$before_ref" ] || fail "the healthy worker's health file was not renewed"
[ "$(cat "$T_DIR/stuck.health")" = "$before_stuck" ] || fail "the stalled worker still renews its health file"
age=$(( $(date +%s) - $(stat -c %Y "$T_DIR/stuck.health") ))
ok "health files: the healthy worker's renewed, the stalled worker's ${age} s old and aging"

