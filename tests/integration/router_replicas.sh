# Promise: a worker serves every replica of a router behind one name. With
# --router tcp://NAME:PORT --router-resolve-ms, the name is resolved to all its addresses again and
# again (as a Kubernetes headless Service has one per ready router pod), the worker keeps one
# connection per address: a replica that appears gets the worker within a few resolutions and
# serves through it, one that disappears from the name is disconnected (the other keeps serving).
# The name's answers come from a test-only file (SOL_TEST_RESOLVE_FILE), the two replicas listen on
# 127.0.0.1 and 127.0.0.2 with the same port.
. "$(dirname "$0")/lib.sh"

Z=$(free_port) HA=$(free_port) HB=$(free_port)
NAMES=$T_DIR/names
echo "routers.sol.test 127.0.0.1" >"$NAMES"
for r in a:$HA:127.0.0.1 b:$HB:127.0.0.2; do
    IFS=: read -r id http addr <<<"$r"
    "$ROUTER_BIN" --listen "127.0.0.1:$http" --bind "tcp://$addr:$Z" \
        --set router.workers.heartbeat_ms=200 --set router.workers.dead_after_ms=1000 \
        >>"$T_DIR/router-$id.log" 2>&1 &
    T_PIDS+=($!)
    wait_http "http://127.0.0.1:$http/health" 200 || fail "router $id did not start"
done
SOL_TEST_RESOLVE_FILE=$NAMES start_worker w fast 1 2000 --router "tcp://routers.sol.test:$Z" \
    --router-resolve-ms 200
start_worker wp precise 1 2000 --router "tcp://127.0.0.2:$Z" # router b's other pool

# listed ID HTTP_PORT: 1 when router at HTTP_PORT lists worker ID
listed() {
    curl -s "http://127.0.0.1:$2/admin/workers" | python3 -c '
import json, sys
print(int(any(w["id"] == sys.argv[1] for w in json.load(sys.stdin)["workers"])))' "$1"
}
wait_listed() { # wait_listed ID PORT WANT
    for _ in $(seq 100); do [ "$(listed "$1" "$2")" = "$3" ] && return 0; sleep 0.1; done
    fail "router on $2: worker $1 listed=$(listed "$1" "$2"), expected $3"
}
ask() { # ask HTTP_PORT: a completion through that router's fast pool
    curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$1/v1/completions" \
        -d '{"model":"fast","prompt":"hi","max_tokens":3}'
}

wait_listed w "$HA" 1
sleep 0.6
[ "$(listed w "$HB")" = 0 ] || fail "the worker joined router b before the name listed it"
[ "$(ask "$HA")" = 200 ] || fail "no answer through router a"
ok "the name's one address: the worker serves router a only"

echo "routers.sol.test 127.0.0.1 127.0.0.2" >"$NAMES"
wait_listed w "$HB" 1
[ "$(ask "$HB")" = 200 ] || fail "no answer through router b"
[ "$(ask "$HA")" = 200 ] || fail "router a stopped answering"
grep -q "router tcp://127.0.0.2:$Z joined its name" "$T_DIR/worker-w.log" || fail "no join logged"
ok "a replica added to the name gets the worker; both routers serve through it"

echo "routers.sol.test 127.0.0.2" >"$NAMES"
wait_listed w "$HA" 0
[ "$(ask "$HB")" = 200 ] || fail "router b stopped answering"
grep -q "router tcp://127.0.0.1:$Z left its name" "$T_DIR/worker-w.log" || fail "no leave logged"
ok "a replica removed from the name is disconnected; the other keeps serving"
