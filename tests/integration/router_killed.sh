# Promise: behind a load balancer with two router replicas, a router killed (-9) mid-stream ends its
# clients' streams without [DONE] (a client sees the connection drop, never a truncated stream
# passed off as complete); the client's retry through the other replica gets the whole text, equal
# to an undisturbed run; the worker cancels the dead router's request (nothing left running) and
# keeps serving the other replica, and later requests through it succeed.
. "$(dirname "$0")/lib.sh"

Z=$(free_port) HA=$(free_port) HB=$(free_port)
NAMES=$T_DIR/names
echo "routers.sol.test 127.0.0.1 127.0.0.2" >"$NAMES"
declare -A RPID
for r in a:$HA:127.0.0.1 b:$HB:127.0.0.2; do
    IFS=: read -r id http addr <<<"$r"
    "$ROUTER_BIN" --listen "127.0.0.1:$http" --bind "tcp://$addr:$Z" \
        --set router.workers.heartbeat_ms=200 --set router.workers.dead_after_ms=1000 \
        >>"$T_DIR/router-$id.log" 2>&1 &
    RPID[$id]=$!
    T_PIDS+=($!)
    wait_http "http://127.0.0.1:$http/health" 200 || fail "router $id did not start"
done
# 20 tokens/s: a 40-token stream lasts 2 s, long enough to kill its router in the middle
SOL_TEST_RESOLVE_FILE=$NAMES start_worker w fast 1 20 --router "tcp://routers.sol.test:$Z" \
    --router-resolve-ms 200
for h in "$HA" "$HB"; do wait_http "http://127.0.0.1:$h/ready" 200 50 || true; done
for h in "$HA" "$HB"; do
    for _ in $(seq 100); do
        grep -q '"id":"w"' <<<"$(curl -s "http://127.0.0.1:$h/admin/workers")" && break
        sleep 0.1
    done
done

python3 - "$HA" "$HB" "${RPID[a]}" <<'PY' || fail "see above"
import http.client, json, os, signal, sys, time
ha, hb, pid_a = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
body = json.dumps({"model": "fast", "prompt": "through the balancer", "max_tokens": 40,
                   "stream": True})

def stream(port, kill_after=None):
    """(text, done, events): the stream's text and whether it ended with [DONE]."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=20)
    c.request("POST", "/v1/completions", body=body, headers={"Content-Type": "application/json"})
    r = c.getresponse()
    assert r.status == 200, r.status
    text, done, events = "", False, 0
    try:
        for raw in r:
            line = raw.decode().strip()
            if line == "data: [DONE]":
                done = True
            elif line.startswith("data: "):
                events += 1
                text += json.loads(line[6:])["choices"][0]["text"]
                if kill_after and events == kill_after:
                    os.kill(pid_a, signal.SIGKILL)
    except (http.client.IncompleteRead, ConnectionError):
        pass
    return text, done, events

ref, done, n = stream(hb)
assert done and n >= 20, (done, n)
part, done, n = stream(ha, kill_after=5)
assert not done, "a stream through the killed router claimed to be complete"
assert ref.startswith(part) and len(part) < len(ref), (part, ref)
print(f"  router a killed after 5 of {n} events: the stream ended without [DONE]")
again, done, n = stream(hb)  # the client's retry, through the other replica
assert done and again == ref, (again, ref)
print(f"  the retry through router b: the whole text ({n} events), equal to the undisturbed run")
PY
for _ in $(seq 50); do
    running=$(curl -s "http://127.0.0.1:$HB/admin/workers" | json_get \
        'sum(w["running"] + w["waiting"] for w in d["workers"])')
    [ "$running" = 0 ] && break
    sleep 0.1
done
[ "$running" = 0 ] || fail "the worker still runs the dead router's request"
for _ in $(seq 50); do grep -q "router tcp://127.0.0.1:$Z silent for" "$T_DIR/worker-w.log" && break; sleep 0.1; done
grep -q "router tcp://127.0.0.1:$Z silent for [0-9]* ms: cancelled" "$T_DIR/worker-w.log" ||
    fail "the worker did not notice router a's death"
code=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$HB/v1/completions" \
    -d '{"model":"fast","prompt":"after","max_tokens":3}')
[ "$code" = 200 ] || fail "router b stopped serving: $code"
ok "router killed mid-stream: its stream ends without [DONE], the retry through the other replica is whole, the worker cancels the orphan and keeps serving"
