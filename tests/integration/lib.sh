# lib.sh: shared helpers for cluster tests — free ports, start/stop sol-router and sim workers,
# wait for readiness, and kill every child on exit (trap), whatever happens to the test.
# Source it: `. "$(dirname "$0")/lib.sh"`. Needs SOL_BUILD (build dir); SOL_SOURCE optional.

set -euo pipefail

SOL_BUILD=${SOL_BUILD:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)/build}
SOL_SOURCE=${SOL_SOURCE:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}
ROUTER_BIN=$SOL_BUILD/router/sol-router
WORKER_BIN=$SOL_BUILD/worker/sol-worker
. "$SOL_SOURCE/tests/skip.sh"
T_DIR=$(mktemp -d "${TMPDIR:-/tmp}/sol-it.XXXXXX")
T_PIDS=()
T_NAME=$(basename "$0" .sh)

t_cleanup() {
    local rc=$?
    pkill -9 -P "$T_WATCHDOG" 2>/dev/null || true
    kill -9 "$T_WATCHDOG" 2>/dev/null || true
    [ -f "$T_DIR/deadline" ] && cat "$T_DIR/deadline" >&2
    # T_ON_EXIT: a command the test registers to undo what lives outside its processes (containers)
    [ -n "${T_ON_EXIT:-}" ] && { eval "$T_ON_EXIT" || true; }
    for p in "${T_PIDS[@]:-}"; do [ -n "$p" ] && kill -9 "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    if [ $rc -ne 0 ] && [ $rc -ne 77 ]; then # 77: skip_test
        echo "--- $T_NAME failed (rc $rc); logs in $T_DIR:" >&2
        for f in "$T_DIR"/*.log; do [ -f "$f" ] && { echo "== $f" >&2; tail -n 20 "$f" >&2; }; done
    else
        rm -rf "$T_DIR"
    fi
    exit $rc
}
trap t_cleanup EXIT
trap 'exit 130' INT TERM
# ctest kills a test at its TIMEOUT (SOL_TEST_TIMEOUT, 600 s unless the script asks for more with
# a "# ctest-timeout: N" line) without a word from it; this watchdog ends it 30 s earlier,
# so the failure says so and the logs show where it was. Its output goes to a file, never to the
# test's pipes (an orphaned sleep holding them would keep ctest waiting).
T_DEADLINE=${T_DEADLINE:-$((${SOL_TEST_TIMEOUT:-600} - 30))}
(sleep "$T_DEADLINE" && echo "FAIL [$T_NAME]: still running after $T_DEADLINE s (ctest stops" \
    "it at ${SOL_TEST_TIMEOUT:-600} s); the logs below show where it was" >"$T_DIR/deadline" &&
    kill -TERM $$ &&
    pkill -TERM -P $$) >/dev/null 2>&1 & # the children too: bash runs the trap once they end
T_WATCHDOG=$!

fail() { echo "FAIL [$T_NAME]: $*" >&2; exit 1; }
ok() { echo "ok   [$T_NAME]: $*"; }

for b in "$ROUTER_BIN" "$WORKER_BIN"; do
    [ -x "$b" ] || fail "missing binary $b (build sol-router and sol-worker first)"
done

# A TCP port nobody listens on now, drawn below the kernel's ephemeral range: a port the kernel
# picks for bind(0) is one it also hands out as the local end of outgoing connections (curl,
# ZeroMQ peers of a concurrent test), so between the pick and the server's bind another socket
# could take it and the server fail with EADDRINUSE.
free_port() {
    python3 -c '
import random, socket
lo = int(open("/proc/sys/net/ipv4/ip_local_port_range").read().split()[0])
for _ in range(200):
    p = random.randrange(10000, max(lo, 10001))
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", p))
    except OSError:
        continue
    finally:
        s.close()
    print(p)
    break
else:
    raise SystemExit("free_port: no free port below the ephemeral range")'
}

HTTP_PORT=$(free_port)
ZMQ_PORT=$(free_port)
BASE="http://127.0.0.1:$HTTP_PORT"
ZMQ_EP="tcp://127.0.0.1:$ZMQ_PORT"

# start_router [extra flags...]: ROUTER_PID is set. Fast liveness so failover tests stay short.
# The tests' requests name the model "demo": --served-model demo makes it the cluster's public name
# (any worker), as a deployment with one model would; LIB_SERVED_MODEL=none starts the router
# without it (a test of the model names the workers register).
start_router() {
    local served=(--served-model "${LIB_SERVED_MODEL:-demo}")
    [ "${LIB_SERVED_MODEL:-}" = none ] && served=()
    "$ROUTER_BIN" --listen "127.0.0.1:$HTTP_PORT" --bind "$ZMQ_EP" "${served[@]}" \
        --set router.workers.heartbeat_ms=200 --set router.workers.dead_after_ms=1000 "$@" \
        >>"$T_DIR/router.log" 2>&1 &
    ROUTER_PID=$!
    T_PIDS+=("$ROUTER_PID")
    wait_http "$BASE/health" 200 || fail "router did not start"
}

# start_worker ID POOL TTFT_MS TOKENS_PER_S [extra flags...]: sets LAST_PID and W_PID[ID].
declare -A W_PID
start_worker() {
    local id=$1 pool=$2 ttft=$3 tps=$4
    shift 4
    "$WORKER_BIN" --backend sim --pool "$pool" --id "$id" --router "$ZMQ_EP" \
        --set worker.heartbeat_ms=200 --set worker.sim.ttft_ms="$ttft" \
        --set worker.sim.tokens_per_s="$tps" "$@" >>"$T_DIR/worker-$id.log" 2>&1 &
    LAST_PID=$!
    W_PID[$id]=$LAST_PID
    T_PIDS+=("$LAST_PID")
}

# start_cpu_worker ID POOL MODEL [extra flags...]: a real engine worker (one thread, a small KV pool
# so that several fit in memory); sets LAST_PID and W_PID[ID].
start_cpu_worker() {
    local id=$1 pool=$2 model=$3
    shift 3
    "$WORKER_BIN" --backend cpu --threads 1 --pool "$pool" --id "$id" --router "$ZMQ_EP" \
        --model "$model" --set worker.heartbeat_ms=200 --set worker.kv.num_blocks=1024 "$@" \
        >>"$T_DIR/worker-$id.log" 2>&1 &
    LAST_PID=$!
    W_PID[$id]=$LAST_PID
    T_PIDS+=("$LAST_PID")
}

# start_cluster ARGS...: scripts/start --no-setup ARGS on free ports (models written to
# $T_DIR/models, log in $T_DIR/start.log) until /ready; sets START_PID and START_PORT.
start_cluster() {
    START_PORT=$(free_port)
    SOL_BUILD_DIR=$SOL_BUILD SOL_MODELS_DIR=$T_DIR/models "$SOL_SOURCE/scripts/start" --no-setup \
        --port "$START_PORT" --zmq-port "$(free_port)" --threads 1 "$@" >"$T_DIR/start.log" 2>&1 &
    START_PID=$!
    T_PIDS+=("$START_PID")
    for _ in $(seq 240); do
        curl -fs "http://127.0.0.1:$START_PORT/ready" >/dev/null 2>&1 && return 0
        kill -0 "$START_PID" 2>/dev/null || fail "scripts/start exited: $(tail -5 "$T_DIR/start.log")"
        sleep 0.5
    done
    fail "cluster not ready: $(tail -5 "$T_DIR/start.log")"
}

# mkmodel OUT ARGS...: write a synthetic GGUF with sol-mkmodel (quietly; fails the test on error).
mkmodel() {
    local out=$1
    shift
    "$SOL_BUILD/tools/sol-mkmodel" -o "$out" "$@" >>"$T_DIR/mkmodel.log" 2>&1 \
        || fail "sol-mkmodel $* failed: $(tail -n 3 "$T_DIR/mkmodel.log")"
}

# wait_http URL STATUS [tries of 0.1 s]: poll until the URL answers STATUS.
wait_http() {
    local url=$1 want=$2 tries=${3:-100}
    for _ in $(seq "$tries"); do
        [ "$(curl -s -o /dev/null -w '%{http_code}' "$url" 2>/dev/null)" = "$want" ] && return 0
        sleep 0.1
    done
    return 1
}

wait_ready() { wait_http "$BASE/ready" 200 "${1:-100}" || fail "router never became ready"; }

# workers_field ID FIELD: one field of one worker from /admin/workers ("" when absent).
workers_field() {
    curl -s "$BASE/admin/workers" "${AUTH[@]}" | python3 -c '
import json, sys
d = json.load(sys.stdin)
for w in d["workers"]:
    if w["id"] == sys.argv[1]:
        print(w.get(sys.argv[2], "")); break' "$1" "$2"
}

# wait_inflight ID TAG N: until worker ID holds requests and the N streams in $T_DIR/TAG.* have
# all begun (the moment to kill or drain it mid-stream).
wait_inflight() {
    for _ in $(seq 300); do
        # every stream has a chunk (not N chunks in all: those could all be other workers'
        # streams while the worker's own were still on their way to it, and a drain then would
        # find nothing running to hand back)
        if [ "$(workers_field "$1" inflight)" -gt 0 ] 2>/dev/null &&
            [ "$(grep -l '^data: {' "$T_DIR/$2".* 2>/dev/null | wc -l)" -ge "$3" ]; then
            return 0
        fi
        sleep 0.02
    done
    fail "$1 never held a stream of $2"
}

# wait_worker ID: until the router lists ID.
wait_worker() {
    for _ in $(seq 100); do
        [ -n "$(workers_field "$1" id)" ] && return 0
        sleep 0.1
    done
    fail "worker $1 never registered"
}

AUTH=()

# post PATH BODY [curl args...]: prints the body; the status goes to $T_DIR/status.
post() {
    local path=$1 body=$2
    shift 2
    curl -s -o "$T_DIR/body" -w '%{http_code}' -D "$T_DIR/headers" "${AUTH[@]}" "$@" \
        -H 'Content-Type: application/json' --data-binary "$body" "$BASE$path" >"$T_DIR/status"
    cat "$T_DIR/body"
}
status() { cat "$T_DIR/status"; }
header() { grep -i -m1 "^$1:" "$T_DIR/headers" | cut -d' ' -f2- | tr -d '\r'; }

# sse_text FILE: the concatenated text of an SSE stream (completions or chat); fails if no [DONE].
# burst PATH TAG N WORDS BODY: N streams to PATH at once, BODY with every %i replaced by the
# stream's number; each must end with exactly WORDS words of text (0: not counted). Outputs stay in
# $T_DIR/TAG.N.
burst() {
    local path=$1 tag=$2 n=$3 words=$4 body=$5 i p pids=()
    for i in $(seq "$n"); do
        curl -sN "${AUTH[@]}" "$BASE$path" -d "${body//%i/$i}" >"$T_DIR/$tag.$i" &
        pids+=($!)
    done
    for p in "${pids[@]}"; do wait "$p" || fail "$tag: a stream's curl failed"; done
    [ "$words" = 0 ] && return 0
    for i in $(seq "$n"); do
        [ "$(sse_text "$T_DIR/$tag.$i" | wc -w)" = "$words" ] || fail "$tag: stream $i incomplete"
    done
}

sse_text() {
    python3 - "$1" <<'EOF'
import json, sys
t, done = "", False
for line in open(sys.argv[1], encoding="utf-8"):
    line = line.strip()
    if line == "data: [DONE]": done = True
    elif line.startswith("data: {"):
        d = json.loads(line[6:])
        if "error" in d: print("ERROR:" + json.dumps(d)); sys.exit(0)
        for c in d.get("choices", []):
            t += c.get("text") or (c.get("delta") or {}).get("content") or ""
sys.stdout.write(t if done else "NO-DONE:" + t)
EOF
}

# json_get EXPR: evaluate a Python expression over the JSON on stdin (bound to d).
json_get() { python3 -c "import json,sys; d=json.load(sys.stdin); print($1)"; }

# still_serves: a normal request still gets 200 (after a bad one).
still_serves() {
    post /v1/completions '{"model":"demo","prompt":"still alive?","max_tokens":2}' >/dev/null
    [ "$(status)" = 200 ] || fail "router stopped serving after: $1 (status $(status))"
}

# streams_match_refs WHAT N: N streaming completions of the script's `body I`, at once; each must
# end with the text in $T_DIR/ref.I (WHAT, e.g. "the stall", names the fault for the message): a
# failover that loses or repeats a token fails here.
streams_match_refs() {
  local what=$1 n=$2 i p pids=()
  for i in $(seq "$n"); do
    curl -sN "$BASE/v1/completions" -d "$(body "$i" ',"stream":true')" >"$T_DIR/stream.$i" &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p" || fail "a stream's curl failed"; done
  for i in $(seq "$n"); do
    local got
    got=$(sse_text "$T_DIR/stream.$i")
    [ "$got" = "$(cat "$T_DIR/ref.$i")" ] || fail "stream $i differs after $what:\n got '$got'"
  done
}

# wait_unhealthy ID: the worker reports itself unhealthy within 5 s.
wait_unhealthy() {
  for _ in $(seq 50); do [ "$(workers_field "$1" state)" = unhealthy ] && return 0; sleep 0.1; done
  fail "worker $1 is $(workers_field "$1" state), not unhealthy"
}
