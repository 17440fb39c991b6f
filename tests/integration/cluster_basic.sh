# Promise: a router with sim workers serves both endpoints (plain and streamed, usage right), routes
# by model, tag, rule and classifier to the right pool, and survives bad input of every kind.
. "$(dirname "$0")/lib.sh"

KEY=sk-test-0123456789
echo "$KEY" >"$T_DIR/keys"
cat >"$T_DIR/router.yaml" <<EOF
router:
  http: {api_keys_file: $T_DIR/keys, max_body_bytes: 4096}
  routing:
    default_pool: precise
    classifier: {weights_file: $SOL_SOURCE/deploy/classifier/weights.txt, threshold: 0.9}
    rules:
      - {if: {keywords: ["zebra-rule"]}, pool: fast}
EOF
start_router --config "$T_DIR/router.yaml" --served-model demo
start_worker wf fast 1 5000
start_worker wp precise 1 5000 --set worker.kv.max_model_len=64
AUTH=(-H "Authorization: Bearer $KEY")
wait_ready

# --- completions and chat, plain and streamed -----------------------------------------------
out=$(post /v1/completions '{"model":"demo","prompt":"one two three","max_tokens":5}')
[ "$(status)" = 200 ] || fail "completion: status $(status): $out"
[ "$(echo "$out" | json_get 'd["usage"]["completion_tokens"]')" = 5 ] || fail "completion usage: $out"
[ "$(echo "$out" | json_get 'd["usage"]["prompt_tokens"]')" = 3 ] || fail "prompt tokens: $out"
[ "$(echo "$out" | json_get 'd["usage"]["total_tokens"]')" = 8 ] || fail "total tokens: $out"
words=$(echo "$out" | json_get 'len(d["choices"][0]["text"].split())')
[ "$words" = 5 ] || fail "completion text has $words words, expected 5"
ok "completion with usage"

out=$(post /v1/chat/completions '{"model":"demo","messages":[{"role":"user","content":"hi you"}],"max_tokens":3}')
[ "$(status)" = 200 ] || fail "chat: status $(status): $out"
[ "$(echo "$out" | json_get 'd["choices"][0]["message"]["role"]')" = assistant ] || fail "chat role: $out"
[ "$(echo "$out" | json_get 'd["usage"]["completion_tokens"]')" = 3 ] || fail "chat usage: $out"
ok "chat with usage"

post /v1/completions '{"model":"demo","prompt":"one two three","max_tokens":5}' >"$T_DIR/plain.json"
plain=$(json_get 'd["choices"][0]["text"]' <"$T_DIR/plain.json")
post /v1/completions '{"model":"demo","prompt":"one two three","max_tokens":5,"stream":true,"stream_options":{"include_usage":true}}' >"$T_DIR/s.sse"
[ "$(sse_text "$T_DIR/s.sse")" = "$plain" ] || fail "streamed text differs from plain: $(sse_text "$T_DIR/s.sse") vs $plain"
grep -q '"completion_tokens":5' "$T_DIR/s.sse" || fail "stream usage chunk missing"
post /v1/chat/completions '{"model":"demo","stream":true,"messages":[{"role":"user","content":"hi"}],"max_tokens":4}' >"$T_DIR/c.sse"
t=$(sse_text "$T_DIR/c.sse")
[ "$(echo "$t" | wc -w)" = 4 ] || fail "chat stream text: '$t'"
ok "streaming completions and chat"

# --- routing ------------------------------------------------------------------------------------
route() { # BODY [curl args] -> "pool reason"
    post /v1/completions "$@" >/dev/null
    [ "$(status)" = 200 ] || fail "routing request: status $(status)"
    echo "$(header X-Sol-Pool) $(header X-Sol-Route-Reason)"
}
r=$(route '{"model":"fast","prompt":"x y","max_tokens":1}'); [ "$r" = "fast model" ] || fail "model fast → $r"
r=$(route '{"model":"demo","prompt":"x y","max_tokens":1,"tags":["fast"]}'); [ "$r" = "fast tag" ] || fail "tag → $r"
r=$(route '{"model":"demo","prompt":"x y","max_tokens":1}' -H 'X-Sol-Tags: fast'); [ "$r" = "fast tag" ] || fail "header tag → $r"
r=$(route '{"model":"demo","prompt":"a zebra-rule here","max_tokens":1}'); [ "$r" = "fast rule:0" ] || fail "rule → $r"
r=$(route '{"model":"demo","prompt":"Prove step by step that the square root of two is irrational, with a rigorous argument.","max_tokens":1}')
case "$r" in precise\ classifier:*) ;; *) fail "classifier → $r" ;; esac
before=$(workers_field wf served)
r=$(route '{"model":"fast","prompt":"count me","max_tokens":1}')
sleep 0.2
[ "$(workers_field wf served)" -gt "$before" ] || fail "/admin/workers served count of wf did not grow"
ok "routing by model, tag, header tag, rule, classifier; /admin/workers counts"

# --- bad input, each followed by a request that must still succeed ------------------------------
bad() { # NAME WANT_STATUS PATH BODY [curl args]
    local name=$1 want=$2 path=$3 body=$4
    shift 4
    out=$(post "$path" "$body" "$@")
    [ "$(status)" = "$want" ] || fail "$name: expected $want, got $(status): $out"
    echo "$out" | json_get 'd["error"]["message"]' >/dev/null || fail "$name: no error message: $out"
    still_serves "$name"
}
bad "malformed JSON" 400 /v1/completions '{"model":"demo","prompt":'
bad "wrong type" 400 /v1/completions '{"model":"demo","prompt":"x","max_tokens":"many"}'
bad "unknown model" 404 /v1/completions '{"model":"gpt-9","prompt":"x"}'
bad "max_tokens 0" 400 /v1/completions '{"model":"demo","prompt":"x","max_tokens":0}'
bad "max_tokens -1" 400 /v1/chat/completions '{"model":"demo","messages":[{"role":"user","content":"x"}],"max_tokens":-1}'
long=$(python3 -c 'print(" ".join(["w"] * 200))')
bad "prompt over max context" 400 /v1/completions "{\"model\":\"precise\",\"prompt\":\"$long\",\"max_tokens\":4}"
big=$(python3 -c 'print("x" * 5000)')
bad "body over the limit" 413 /v1/completions "{\"model\":\"demo\",\"prompt\":\"$big\"}"
bad "invalid UTF-8" 400 /v1/completions "$(printf '{"model":"demo","prompt":"\xff\xfe"}')"
saved=("${AUTH[@]}")
AUTH=()
out=$(post /v1/completions '{"model":"demo","prompt":"x"}')
[ "$(status)" = 401 ] || fail "missing API key: $(status)"
AUTH=(-H "Authorization: Bearer wrong-key-123456")
out=$(post /v1/completions '{"model":"demo","prompt":"x"}')
[ "$(status)" = 401 ] || fail "wrong API key: $(status)"
echo "$out" | json_get 'd["error"]["message"]' >/dev/null || fail "401 without message: $out"
AUTH=("${saved[@]}")
still_serves "wrong API key"
# a slow client: sends headers and half a body, then never reads or writes again
python3 - "$HTTP_PORT" "$KEY" <<'EOF' &
import socket, sys, time
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + sys.argv[2].encode() +
          b"\r\nContent-Length: 100\r\n\r\n{\"model\"")
time.sleep(5)
EOF
T_PIDS+=($!)
# and a streaming client that never reads its socket
python3 - "$HTTP_PORT" "$KEY" <<'EOF' &
import socket, sys, time
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
b = b'{"model":"demo","prompt":"flood","max_tokens":3000,"stream":true}'
s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + sys.argv[2].encode() +
          b"\r\nContent-Length: " + str(len(b)).encode() + b"\r\n\r\n" + b)
time.sleep(5)
EOF
T_PIDS+=($!)
sleep 0.5
still_serves "slow clients"
ok "bad input answered with clear errors, router still serves"
