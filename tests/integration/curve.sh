# Promise: workers authenticate to the router with CURVE. A router bound beyond loopback without
# CURVE refuses to start (naming the keys that fix it) unless allow_insecure (or its old name
# allow_public) is set, which it logs as INSECURE; with CURVE it binds 0.0.0.0 and admits only
# workers whose public key is in its authorized-keys directory: an unknown key is refused and
# logged, a plain-ZMTP worker cannot connect, garbage on the port is dropped, a recorded session
# of an admitted worker replayed gets nowhere, and the admitted workers keep serving throughout; a key added to the directory admits its worker at its next
# handshake (rotation without a restart).
. "$(dirname "$0")/lib.sh"

KEYGEN=$SOL_BUILD/tools/sol-keygen
K=$T_DIR/keys A=$T_DIR/authorized
mkdir -p "$K" "$A"
"$KEYGEN" -d "$K" router w1 rogue w3 >/dev/null || fail "sol-keygen failed"
[ "$(stat -c %a "$K/w1.key")" = 600 ] || fail "the secret key file is not mode 0600"
"$KEYGEN" -d "$K" w1 2>"$T_DIR/kg.err" && fail "sol-keygen overwrote w1.key"
grep -q "File exists" "$T_DIR/kg.err" || fail "no reason given: $(cat "$T_DIR/kg.err")"
cp "$K/w1.pub" "$A/"
PUB="tcp://0.0.0.0:$ZMQ_PORT"

# --- no CURVE beyond loopback: refused, unless the risk is accepted (and logged) -----------------
if "$ROUTER_BIN" --listen "127.0.0.1:$HTTP_PORT" --bind "$PUB" >"$T_DIR/refused.log" 2>&1; then
    fail "the router bound $PUB without CURVE"
fi
grep -q "router.workers.curve" "$T_DIR/refused.log" && grep -q "allow_insecure" "$T_DIR/refused.log" ||
    fail "the refusal does not say how to fix it: $(cat "$T_DIR/refused.log")"
for key in allow_insecure allow_public; do
    "$ROUTER_BIN" --listen "127.0.0.1:$HTTP_PORT" --bind "$PUB" --set "router.workers.$key=true" \
        >"$T_DIR/insecure.log" 2>&1 &
    pid=$!
    wait_http "$BASE/health" 200 || fail "router with $key did not start: $(cat "$T_DIR/insecure.log")"
    grep -q "INSECURE" "$T_DIR/insecure.log" || fail "$key: no INSECURE warning"
    kill "$pid" && wait "$pid" 2>/dev/null || true
done
ok "a public bind without CURVE is refused; allow_insecure / allow_public start it with a warning"

# --- CURVE ----------------------------------------------------------------------------------------
start_router --bind "$PUB" --curve-secret-key "$K/router.key" --curve-authorized-keys "$A"
CURVE_W=(--curve-server-key "$K/router.pub")
start_worker w1 fast 1 2000 --curve-secret-key "$K/w1.key" "${CURVE_W[@]}"
start_worker w2 precise 1 2000 --curve-secret-key "$K/w1.key" "${CURVE_W[@]}"
start_worker rogue fast 1 2000 --curve-secret-key "$K/rogue.key" "${CURVE_W[@]}"
start_worker plain fast 1 2000
wait_ready
wait_worker w1
wait_worker w2
out=$(post /v1/completions '{"model":"fast","prompt":"hello there","max_tokens":5}')
[ "$(status)" = 200 ] || fail "a request through the CURVE workers failed: $out"
ROGUE=$(sed -n 's/^public-key = //p' "$K/rogue.pub")
for _ in $(seq 50); do grep -qF "key $ROGUE is not in" "$T_DIR/router.log" && break; sleep 0.1; done
grep -qF "key $ROGUE is not in" "$T_DIR/router.log" || fail "the rogue key was not refused by name"
grep -q "refused a worker connection from" "$T_DIR/router.log" || fail "the refusal has no address"
[ -z "$(workers_field rogue id)" ] || fail "the rogue worker registered"
[ -z "$(workers_field plain id)" ] || fail "a plain-ZMTP worker registered"
ok "admitted keys serve; an unknown key is refused and logged; plain ZMTP cannot connect"

# --- garbage on the port; the good workers keep serving ---------------------------------------------
python3 - "$ZMQ_PORT" <<'PY'
import os, socket, sys
port = int(sys.argv[1])
for payload in (os.urandom(4096), b"\xff" + b"\x00" * 8 + b"\x7f\x03\x00CURVE" + os.urandom(500),
                b"GET / HTTP/1.1\r\n\r\n"):
    for _ in range(20):
        s = socket.create_connection(("127.0.0.1", port), timeout=2)
        try:
            s.sendall(payload)
        except OSError:
            pass
        s.close()
PY
for i in 1 2 3; do
    out=$(post /v1/completions '{"model":"fast","prompt":"still there?","max_tokens":4}')
    [ "$(status)" = 200 ] || fail "after garbage, request $i failed: $out"
done
kill -0 "$ROUTER_PID" || fail "the router died on garbage"
ok "60 garbage connections dropped; the admitted workers keep serving"

# --- replay: a recorded session of an admitted worker, sent again, gets nowhere --------------------
# A proxy records every byte a good worker (w1's key, id w4) sends the router through a whole
# session (handshake, Register, heartbeats); the worker is killed, and the recording is replayed on
# fresh connections, whole and in pieces. CURVE's per-session keys and the router's cookie make the
# old handshake fail: no worker registers from it, and the admitted workers keep serving.
PROXY=$(free_port)
python3 - "$PROXY" "$ZMQ_PORT" "$T_DIR/session.bin" <<'PY' &
import socket, sys, threading
lport, rport, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
srv = socket.socket()
srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.bind(("127.0.0.1", lport)); srv.listen(1)
c, _ = srv.accept()
r = socket.create_connection(("127.0.0.1", rport))
rec = open(out, "wb")
def pump(a, b, log):
    try:
        while (d := a.recv(65536)):
            if log:
                rec.write(d); rec.flush()
            b.sendall(d)
    except OSError:
        pass
    for s in (a, b):
        try: s.shutdown(socket.SHUT_RDWR)
        except OSError: pass
t = threading.Thread(target=pump, args=(r, c, False), daemon=True); t.start()
pump(c, r, True)
PY
T_PIDS+=($!)
sleep 0.3
"$WORKER_BIN" --backend sim --pool fast --id w4 --router "tcp://127.0.0.1:$PROXY" \
    --set worker.heartbeat_ms=200 --curve-secret-key "$K/w1.key" "${CURVE_W[@]}" \
    >>"$T_DIR/worker-w4.log" 2>&1 &
W4=$!
T_PIDS+=($W4)
wait_worker w4
sleep 1 # a few heartbeats in the recording
kill -9 $W4
for _ in $(seq 50); do [ -z "$(workers_field w4 id)" ] && break; sleep 0.1; done
[ -z "$(workers_field w4 id)" ] || fail "the killed worker w4 stayed registered"
[ "$(stat -c %s "$T_DIR/session.bin")" -gt 200 ] || fail "the proxy recorded no session"
python3 - "$ZMQ_PORT" "$T_DIR/session.bin" <<'PY'
import socket, sys, time
port, data = int(sys.argv[1]), open(sys.argv[2], "rb").read()
for chunk in (len(data), 64, 7):  # whole, then in pieces as a slow peer would send them
    s = socket.create_connection(("127.0.0.1", port), timeout=3)
    try:
        for i in range(0, len(data), chunk):
            s.sendall(data[i:i + chunk])
            if chunk < len(data):
                time.sleep(0.001)
        s.recv(4096)
    except OSError:
        pass
    s.close()
print(f"  replayed a {len(data)}-byte recorded session 3 times")
PY
sleep 1
[ -z "$(workers_field w4 id)" ] || fail "the replayed session registered worker w4"
for i in 1 2 3; do
    out=$(post /v1/completions '{"model":"fast","prompt":"after the replay","max_tokens":4}')
    [ "$(status)" = 200 ] || fail "after the replay, request $i failed: $out"
done
kill -0 "$ROUTER_PID" || fail "the router died on a replayed session"
ok "a recorded worker session replayed 3 times registers nothing; the admitted workers keep serving"

# --- rotation: a key added to the directory admits its worker at its handshake --------------------
cp "$K/w3.pub" "$A/"
start_worker w3 fast 1 2000 --curve-secret-key "$K/w3.key" "${CURVE_W[@]}"
wait_worker w3
grep -q "w3.pub) admitted" "$T_DIR/router.log" || fail "the admission is not logged with the key's file"
ok "a .pub added while running admits its worker (no restart)"
