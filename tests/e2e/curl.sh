# Promise: a plain curl client gets what docs/api.md promises from sol-router + sim workers:
# completions and chat bodies, SSE framing (only `data: ...` events separated by blank lines,
# ending with `data: [DONE]`), /v1/models, /health, /ready, /metrics with vllm: series, and
# OpenAI-shaped error bodies.
. "$(dirname "$0")/../integration/lib.sh"

start_router --served-model demo
start_worker wf fast 1 5000
start_worker wp precise 1 5000
wait_ready

# --- completions and chat ------------------------------------------------------------------------
out=$(post /v1/completions '{"model":"demo","prompt":"hello there","max_tokens":4}')
[ "$(status)" = 200 ] || fail "completion status $(status): $out"
echo "$out" | python3 -c '
import json, sys
d = json.load(sys.stdin)
assert d["object"] == "text_completion" and d["id"].startswith("cmpl-"), d
assert d["model"] == "demo" and isinstance(d["created"], int), d
c = d["choices"][0]
assert c["index"] == 0 and isinstance(c["text"], str) and c["finish_reason"] == "length", c
u = d["usage"]
assert u["completion_tokens"] == 4 and u["total_tokens"] == u["prompt_tokens"] + 4, u
' || fail "completion body: $out"
[ -n "$(header X-Request-Id)" ] || fail "no X-Request-Id header"
[ -n "$(header X-Sol-Pool)" ] || fail "no X-Sol-Pool header"
out=$(post /v1/chat/completions '{"model":"demo","messages":[{"role":"user","content":"hi"}],"max_tokens":3}' -H 'X-Request-Id: my-req-1')
[ "$(status)" = 200 ] || fail "chat status $(status): $out"
echo "$out" | python3 -c '
import json, sys
d = json.load(sys.stdin)
assert d["object"] == "chat.completion" and d["id"] == "chatcmpl-my-req-1", d
m = d["choices"][0]["message"]
assert m["role"] == "assistant" and isinstance(m["content"], str), m
assert d["usage"]["completion_tokens"] == 3, d
' || fail "chat body: $out"
[ "$(header X-Request-Id)" = my-req-1 ] || fail "X-Request-Id not echoed: $(header X-Request-Id)"
ok "completions and chat bodies"

# --- no "model": classification picks the pool (default precise) and the body names it ----------
out=$(post /v1/chat/completions '{"messages":[{"role":"user","content":"hi"}],"max_tokens":2}')
[ "$(status)" = 200 ] || fail "chat without model: status $(status): $out"
[ "$(header X-Sol-Pool)" = precise ] || fail "chat without model went to $(header X-Sol-Pool)"
echo "$out" | python3 -c 'import json,sys; d=json.load(sys.stdin); assert d["model"] == "precise", d' \
    || fail "chat without model: body $out"
ok "a request without \"model\" is routed by classification and names its pool"

# --- SSE framing ------------------------------------------------------------------------------------
# check_sse FILE OBJECT: every non-blank line is `data: <json>` or the final `data: [DONE]`, events are
# separated by blank lines, every JSON event has the object type, and the last one has a finish_reason.
check_sse() {
    python3 - "$1" "$2" <<'EOF'
import json, sys
raw = open(sys.argv[1], "rb").read().decode("utf-8")
assert raw.endswith("data: [DONE]\n\n"), "stream must end with data: [DONE] and a blank line: %r" % raw[-40:]
events = raw.split("\n\n")[:-1]
# Chunks that arrive together may share one event (the router coalesces under load), so only a
# JSON event plus [DONE] is guaranteed.
assert len(events) >= 2, "too few events: %r" % raw
finish = None
for i, ev in enumerate(events):
    assert ev.startswith("data: ") and "\n" not in ev, "bad event %d: %r" % (i, ev)
    if ev == "data: [DONE]":
        assert i == len(events) - 1, "[DONE] is not last"
        continue
    d = json.loads(ev[6:])
    assert d["object"] == sys.argv[2], d
    for c in d["choices"]:
        if c["finish_reason"]: finish = c["finish_reason"]
assert finish in ("stop", "length"), "no finish_reason in the stream"
EOF
}
curl -sN -D "$T_DIR/sh" "$BASE/v1/completions" -d '{"model":"demo","prompt":"stream me","max_tokens":5,"stream":true}' >"$T_DIR/c.sse"
grep -qi '^content-type: text/event-stream' "$T_DIR/sh" || fail "stream content type: $(cat "$T_DIR/sh")"
check_sse "$T_DIR/c.sse" text_completion || fail "completion SSE framing"
curl -sN "$BASE/v1/chat/completions" -d '{"model":"demo","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}],"max_tokens":4}' >"$T_DIR/ch.sse"
check_sse "$T_DIR/ch.sse" chat.completion.chunk || fail "chat SSE framing"
python3 - "$T_DIR/ch.sse" <<'EOF' || fail "chat stream: role first, usage chunk last"
import json, sys
ev = [json.loads(l[6:]) for l in open(sys.argv[1]) if l.startswith("data: {")]
assert ev[0]["choices"][0]["delta"]["role"] == "assistant", ev[0]
assert ev[-1]["choices"] == [] and ev[-1]["usage"]["completion_tokens"] == 4, ev[-1]
EOF
ok "SSE framing: data: events, blank-line separated, data: [DONE] last"

# --- models, health, ready, metrics ---------------------------------------------------------------
out=$(curl -s "$BASE/v1/models")
echo "$out" | python3 -c '
import json, sys
d = json.load(sys.stdin)
ids = [m["id"] for m in d["data"]]
assert d["object"] == "list" and "demo" in ids, d
' || fail "/v1/models: $out"
[ "$(curl -s "$BASE/health" | json_get 'd["status"]')" = ok ] || fail "/health"
[ "$(curl -s -o /dev/null -w '%{http_code}' "$BASE/ready")" = 200 ] || fail "/ready"
m=$(curl -s "$BASE/metrics")
for series in vllm:time_to_first_token_seconds vllm:e2e_request_latency_seconds vllm:num_requests_running; do
    grep -q "^$series" <<<"$m" || fail "/metrics lacks $series"
done
ok "/v1/models, /health, /ready, /metrics (vllm: series)"

# --- error bodies -----------------------------------------------------------------------------------
err() { # NAME STATUS TYPE METHOD PATH [BODY]
    local code
    code=$(curl -s -o "$T_DIR/e" -w '%{http_code}' -X "$4" "$BASE$5" ${6:+-d "$6"})
    [ "$code" = "$2" ] || fail "$1: status $code, expected $2: $(cat "$T_DIR/e")"
    python3 - "$T_DIR/e" "$3" <<'EOF' || fail "$1: bad error body: $(cat "$T_DIR/e")"
import json, sys
e = json.load(open(sys.argv[1]))["error"]
assert e["type"] == sys.argv[2] and e["message"], e
assert "param" in e and "code" in e, e
EOF
}
err "malformed JSON" 400 invalid_request_error POST /v1/completions '{"model":'
err "bad temperature" 400 invalid_request_error POST /v1/completions '{"model":"demo","prompt":"x","temperature":3}'
err "unknown model" 404 invalid_request_error POST /v1/completions '{"model":"nope","prompt":"x"}'
err "unknown path" 404 not_found_error GET /v1/nothing
err "wrong method" 405 invalid_request_error GET /v1/completions
ok "error bodies: 400, 404, 405 in OpenAI's shape"
