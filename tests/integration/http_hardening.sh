# Promise: hostile clients cannot hold the router. A header trickled a line at a time (slowloris)
# is cut off at router.http.header_timeout_s with a JSON 408, so is a connection that sends
# nothing, a body that stalls at body_timeout_s; one address cannot hold
# more than max_connections_per_client connections while another address is served at once; a
# stream whose client reads nothing is ended and cancelled on the worker once sse_max_buffer_bytes
# are unread; the router logs its open-file capacity at start. A header over max_header_bytes gets
# a JSON 431 (one under it is served). Connections are kept alive between requests, and an idle
# kept-alive one is closed at keepalive_timeout_s. libmicrohttpd's own messages keep --log-json
# output one JSON object per line.
. "$(dirname "$0")/lib.sh"

start_router --log-json --set router.http.header_timeout_s=2 --set router.http.body_timeout_s=2 \
    --set router.http.keepalive_timeout_s=2 --set router.http.max_connections_per_client=20 \
    --set router.http.sse_max_buffer_bytes=65536 --set router.http.max_header_bytes=8192
start_worker wf fast 1 200000 --set worker.kv.max_model_len=1048576
start_worker wp precise 1 100000
wait_ready
grep -q "open files: [0-9]*; HTTP connections at most" "$T_DIR/router.log" ||
    grep -q "open files limited to" "$T_DIR/router.log" || fail "no open-file capacity logged"

python3 - "$HTTP_PORT" "$T_DIR/router.log" <<'PY' || fail "see above"
import json, socket, sys, time
port = int(sys.argv[1])

def conn(src="127.0.0.1"):
    s = socket.socket()
    s.bind((src, 0))
    s.connect(("127.0.0.1", port))
    s.settimeout(10)
    return s

def read_all(s):
    data = b""
    try:
        while True:
            b = s.recv(65536)
            if not b:
                break
            data += b
    except (socket.timeout, ConnectionResetError):
        pass
    return data

# slowloris: a header line every 0.5 s, never finished
s = conn()
t = time.time()
s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n")
got = b""
try:
    for i in range(40):
        s.sendall(f"X-Slow-{i}: y\r\n".encode())
        time.sleep(0.5)
except (BrokenPipeError, ConnectionResetError):
    pass
got = read_all(s)
took = time.time() - t
assert got.startswith(b"HTTP/1.1 408"), got[:200]
body = json.loads(got.split(b"\r\n\r\n", 1)[1])
assert body["error"]["type"] == "invalid_request_error" and "header" in body["error"]["message"], body
assert took < 6, took
print(f"  slowloris: 408 JSON after {took:.1f} s")

# header size: 6 KiB is served, 12 KiB gets a JSON 431 naming the key
def get_health(pad, src="127.0.0.4"):
    s = conn(src)
    s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\nX-Pad: " + b"a" * pad
              + b"\r\n\r\n")
    return read_all(s)
got = get_health(6 * 1024)
assert got.startswith(b"HTTP/1.1 200"), got[:200]
got = get_health(12 * 1024)
assert got.startswith(b"HTTP/1.1 431"), got[:200]
head, body = got.split(b"\r\n\r\n", 1)
assert b"application/json" in head, head
err = json.loads(body)["error"]
assert err["code"] == "request_header_fields_too_large" and "max_header_bytes" in err["message"], err
print(f"  12 KiB header: 431 JSON ({err['message']})")

# keep-alive: two requests on one connection, then the idle connection is closed at
# keepalive_timeout_s
s = conn("127.0.0.5")
for _ in range(2):
    s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
    got = s.recv(65536)
    assert got.startswith(b"HTTP/1.1 200") and b"Connection: close" not in got, got[:200]
t = time.time()
rest = read_all(s)
assert time.time() - t < 5 and (rest == b"" or rest.startswith(b"HTTP/1.1 408")), rest[:100]
print(f"  keep-alive: 2 requests on one connection, idle one closed after {time.time() - t:.1f} s")
s = conn("127.0.0.5")
s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc")
got = read_all(s)
assert got.startswith(b"HTTP/1.1 400") and b"a GET takes no body" in got, got[:300]

# a body that stalls
s = conn()
t = time.time()
s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
          b"Content-Length: 100\r\n\r\n{\"prompt\":")
got = read_all(s)
assert got.startswith(b"HTTP/1.1 408") and b"body" in got, got[:200]
print(f"  stalled body: 408 JSON after {time.time() - t:.1f} s")

# a connection that sends nothing at all is closed at the header deadline too
s = conn()
t = time.time()
got = read_all(s)
assert got.startswith(b"HTTP/1.1 408") and time.time() - t < 6, got[:100]
print(f"  silent connection: 408 after {time.time() - t:.1f} s")

# one address holds at most 20 connections; another address is served meanwhile
held = [conn() for _ in range(20)]
extra = conn()
extra.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
assert read_all(extra)[:12] != b"HTTP/1.1 200", "a 21st connection from one address was served"
other = conn("127.0.0.2")
other.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
assert read_all(other).startswith(b"HTTP/1.1 200"), "another address was not served"
for h in held:
    h.close()
time.sleep(1)  # the router notices the closes
print("  21st connection from one address refused; another address served at once")

# a stream nobody reads is ended and cancelled once 64 KiB are unread (from a third address:
# the router may still be counting the first one's closed connections)
s = conn("127.0.0.3")
s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
# a million tokens: more than the kernel's socket buffers hold, so the router's own buffer grows
body = json.dumps({"model": "fast", "prompt": "x", "max_tokens": 1000000, "stream": True}).encode()
s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
          b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
for _ in range(100):  # never read; wait for the router to give up on it
    if "bytes unread" in open(sys.argv[2]).read():
        break
    time.sleep(0.1)
# reading now, the client finds the stream broken off: no [DONE], no chunked terminator (a clean
# end would pass a truncated answer off as whole)
got = read_all(s)
s.close()
assert got.startswith(b"HTTP/1.1 200") and b"data: " in got, got[:200]
assert b"[DONE]" not in got and not got.endswith(b"\r\n0\r\n\r\n"), got[-200:]
print(f"  unread stream: {len(got)} bytes, then broken off")
PY
for _ in $(seq 100); do grep -q "left [0-9]* bytes unread; ending its stream" "$T_DIR/router.log" && break; sleep 0.1; done
grep -q "left [0-9]* bytes unread; ending its stream" "$T_DIR/router.log" || fail "the unread stream was not ended"
for _ in $(seq 50); do [ "$(workers_field wf running)" = 0 ] && break; sleep 0.1; done
[ "$(workers_field wf running)" = 0 ] || fail "the worker still runs the unread stream"
metrics=$(curl -fsS "$BASE/metrics") # not piped into grep -q: pipefail fails curl's write
grep -q 'sol_requests_total{pool="fast",status="499"}' <<<"$metrics" ||
    fail "the unread stream is not counted as 499 (client closed)"
# libmicrohttpd's own messages (the 21st connection refused) come through Sol's log: with
# --log-json every line of the router's log is one JSON object
python3 - "$T_DIR/router.log" <<'PY' || fail "the router's log is not all JSON lines"
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
mhd = [l for l in lines if l["module"] == "http/mhd"]
assert any("connection limit" in l["msg"] and l["level"] == "warn" for l in mhd), mhd
assert not any("first option" in l["msg"] for l in mhd), mhd  # else some bypass the logger
PY
ok "slowloris, silent connection and stalled body get a JSON 408; per-address cap; unread stream cancelled"
