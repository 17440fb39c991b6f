# Promise: kill -9 of a worker mid-stream loses nothing (every stream completes with exactly the
# text of a run without the failure), a worker started later gets work, a SIGTERM drain loses no
# request, and a client that disconnects stops the generation on the worker.
. "$(dirname "$0")/lib.sh"

start_router
start_worker w1 precise 1 60
start_worker w2 precise 1 60
start_worker wf fast 1 2000
wait_ready
wait_worker w1
wait_worker w2

N=6
body() { echo "{\"model\":\"demo\",\"prompt\":\"failover prompt number $1\",\"max_tokens\":60,\"seed\":7${2:-}}"; }
for i in $(seq $N); do # reference texts, no failure
    post /v1/completions "$(body "$i")" | json_get 'd["choices"][0]["text"]' >"$T_DIR/ref.$i"
done

# run_streams TAG: N streams in the background; STREAM_PIDS set
run_streams() {
    STREAM_PIDS=()
    for i in $(seq $N); do
        curl -sN "$BASE/v1/completions" -d "$(body "$i" ',"stream":true')" >"$T_DIR/$1.$i" &
        STREAM_PIDS+=($!)
    done
}
check_streams() {
    for p in "${STREAM_PIDS[@]}"; do wait "$p" || fail "$1: a curl failed"; done
    for i in $(seq $N); do
        got=$(sse_text "$T_DIR/$1.$i")
        want=$(cat "$T_DIR/ref.$i")
        [ "$got" = "$want" ] || fail "$1: stream $i differs:\n got  '$got'\n want '$want'"
    done
}
# --- kill -9 mid-stream --------------------------------------------------------------------------
run_streams kill
wait_inflight w1 kill "$N"
kill -9 "${W_PID[w1]}"
check_streams kill
grep -q "fails over" "$T_DIR/router.log" || fail "no failover happened (w1 held no stream?)"
n_fo=$(curl -s "$BASE/metrics" | sed -n 's/^sol_failovers_total{pool="precise"} //p' | sed -n 1p)
[ "${n_fo:-0}" -ge 1 ] || fail "sol_failovers_total does not count the failovers: '$n_fo'"
ok "kill -9 mid-stream: $N streams complete, text identical to the undisturbed run ($n_fo failovers counted)"

# --- a worker started later receives work ----------------------------------------------------------
t0=$(date +%s%N)
start_worker w3 precise 1 60
wait_worker w3
run_streams late
for _ in $(seq 40); do [ "$(workers_field w3 inflight)" -gt 0 ] && break; sleep 0.05; done
t_ms=$(( ($(date +%s%N) - t0) / 1000000 ))
check_streams late
[ "$(workers_field w3 served)" -gt 0 ] || fail "late worker w3 served nothing"
ok "worker started later received work after $t_ms ms"

# --- SIGTERM drain loses nothing (worker.drain = migrate: the sim worker hands its streams back) --
run_streams drain
wait_inflight w2 drain "$N"
kill -TERM "${W_PID[w2]}"
check_streams drain
wait "${W_PID[w2]}" || fail "w2 did not exit 0 after its drain"
grep -q "migrates (its worker is draining" "$T_DIR/router.log" || fail "the drain moved no stream"
ok "SIGTERM drain: every stream moved and completed with its undisturbed text"

# --- client disconnect cancels on the worker -----------------------------------------------------
count_499() { curl -s "$BASE/metrics" | sed -n 's/^sol_requests_total{pool="fast",status="499"} //p' | sed -n 1p; }
before_499=$(count_499); before_499=${before_499:-0}
curl -sN "$BASE/v1/completions" -d '{"model":"fast","prompt":"endless","max_tokens":100000,"stream":true}' >/dev/null &
cpid=$!
for _ in $(seq 100); do [ "$(workers_field wf inflight)" = 1 ] && break; sleep 0.05; done
[ "$(workers_field wf inflight)" = 1 ] || fail "the long stream never reached wf"
kill "$cpid"; wait "$cpid" 2>/dev/null || true
for _ in $(seq 60); do
    [ "$(workers_field wf inflight)" = 0 ] && [ "$(workers_field wf running)" = 0 ] && break
    sleep 0.1
done
[ "$(workers_field wf running)" = 0 ] || fail "wf still runs the abandoned request (heartbeat running=$(workers_field wf running))"
for _ in $(seq 30); do [ "$(count_499)" -gt "$before_499" ] 2>/dev/null && break; sleep 0.1; done
[ "$(count_499)" -gt "$before_499" ] 2>/dev/null \
    || fail "metrics do not count the disconnect as 499 (before $before_499, now $(count_499))"
ok "client disconnect: the worker stopped generating (heartbeat running=0, 499 counted)"
