# Promise: sol-router + real CPU workers (tiny synthetic models: F16 precise, Q4_0 fast) serve
# completions and chat, plain and streamed, in both pools, with usage from the real tokenizer,
# greedy and seeded reproducibility, stop strings, length finishes, well-formed logprobs, a clear
# 400 for a prompt over the context, cancellation on client disconnect, and token-exact failover
# when a worker is killed mid-stream.
. "$(dirname "$0")/lib.sh"

TOK_BIN=$SOL_BUILD/tools/sol-tokenize
# The tiny preset, widened so that one token takes about a millisecond: long streams then last long
# enough for a client to leave or a worker to die in the middle of them.
SHAPE=(--preset tiny --dim 256 --ffn 768 --layers 4 --ctx 2048 --seed 1)
mkmodel "$T_DIR/precise.gguf" "${SHAPE[@]}" --type f16
mkmodel "$T_DIR/fast.gguf" "${SHAPE[@]}" --type q4_0

# Workers are frozen (SIGSTOP) for a moment below: a long silence limit keeps them in the table on
# a loaded machine; a killed worker is still noticed at once (its connection drops).
start_router --set router.workers.dead_after_ms=10000
start_cpu_worker p1 precise "$T_DIR/precise.gguf"
start_cpu_worker p2 precise "$T_DIR/precise.gguf"
start_cpu_worker f1 fast "$T_DIR/fast.gguf"
wait_ready 300
for w in p1 p2 f1; do wait_worker "$w"; done
[ "$(workers_field p1 backend)" = cpu ] || fail "p1 does not announce backend cpu"

# sse FILE: one JSON line summarising an SSE stream: text, finish, usage, logprob token count,
# whether it ended with data: [DONE], and an error object if one came.
sse() {
    python3 - "$1" <<'EOF'
import json, sys
r = {"text": "", "finish": None, "usage": None, "n_lp": 0, "done": False, "error": None}
for line in open(sys.argv[1], encoding="utf-8"):
    line = line.rstrip("\r\n")
    if not line.startswith("data: "): continue
    if line == "data: [DONE]": r["done"] = True; continue
    d = json.loads(line[6:])
    if "error" in d: r["error"] = d["error"]; continue
    if d.get("usage"): r["usage"] = d["usage"]
    for c in d.get("choices", []):
        r["text"] += c.get("text") or (c.get("delta") or {}).get("content") or ""
        if c.get("finish_reason"): r["finish"] = c["finish_reason"]
        lp = c.get("logprobs") or {}
        r["n_lp"] += len(lp.get("tokens") or lp.get("content") or [])
print(json.dumps(r))
EOF
}
field() { json_get "d$1"; } # field '["a"]["b"]' < json

n_prompt_tokens() { printf '%s\n' "$1" | "$TOK_BIN" -m "$T_DIR/precise.gguf" | wc -w; }

# --- completions and chat, plain and streamed, both pools ---------------------------------------
PROMPT="Once upon a time there was"
want_pt=$(n_prompt_tokens "$PROMPT")
[ "$want_pt" -gt 2 ] || fail "sol-tokenize gave $want_pt tokens for the prompt"
for pool in precise fast; do
    out=$(post /v1/completions "{\"model\":\"$pool\",\"prompt\":\"$PROMPT\",\"max_tokens\":12,\"temperature\":0,\"logprobs\":0}")
    [ "$(status)" = 200 ] || fail "$pool completion: status $(status): $out"
    [ "$(header X-Sol-Pool)" = "$pool" ] || fail "$pool completion served by pool '$(header X-Sol-Pool)'"
    u=$(echo "$out" | field '["usage"]')
    [ "$(echo "$out" | field '["usage"]["prompt_tokens"]')" = "$want_pt" ] \
        || fail "$pool prompt_tokens: $u, sol-tokenize says $want_pt"
    [ "$(echo "$out" | field '["usage"]["completion_tokens"]')" = 12 ] || fail "$pool completion_tokens: $u"
    [ "$(echo "$out" | field '["usage"]["total_tokens"]')" = $((want_pt + 12)) ] || fail "$pool total_tokens: $u"
    [ "$(echo "$out" | field '["choices"][0]["finish_reason"]')" = length ] || fail "$pool finish: $out"
    [ "$(echo "$out" | field '["choices"][0]["logprobs"]["tokens"].__len__()')" = 12 ] \
        || fail "$pool: logprobs.tokens does not hold the 12 completion tokens: $out"
    plain=$(echo "$out" | field '["choices"][0]["text"]')
    [ -n "$plain" ] || fail "$pool completion text is empty"

    post /v1/completions "{\"model\":\"$pool\",\"prompt\":\"$PROMPT\",\"max_tokens\":12,\"temperature\":0,\"logprobs\":0,\"stream\":true,\"stream_options\":{\"include_usage\":true}}" >"$T_DIR/s.sse"
    s=$(sse "$T_DIR/s.sse")
    [ "$(echo "$s" | field '["done"]')" = True ] || fail "$pool stream has no [DONE]: $s"
    [ "$(echo "$s" | field '["text"]')" = "$plain" ] || fail "$pool streamed text differs from plain: $s vs '$plain'"
    [ "$(echo "$s" | field '["usage"]["completion_tokens"]')" = 12 ] || fail "$pool stream usage: $s"
    [ "$(echo "$s" | field '["n_lp"]')" = 12 ] || fail "$pool stream logprob tokens: $s"
    [ "$(echo "$s" | field '["finish"]')" = length ] || fail "$pool stream finish: $s"

    chat="{\"model\":\"$pool\",\"messages\":[{\"role\":\"system\",\"content\":\"Be brief.\"},{\"role\":\"user\",\"content\":\"$PROMPT\"}],\"max_tokens\":8,\"temperature\":0,\"logprobs\":true,\"top_logprobs\":2"
    out=$(post /v1/chat/completions "$chat}")
    [ "$(status)" = 200 ] || fail "$pool chat: status $(status): $out"
    [ "$(echo "$out" | field '["choices"][0]["message"]["role"]')" = assistant ] || fail "$pool chat role: $out"
    [ "$(echo "$out" | field '["usage"]["completion_tokens"]')" = 8 ] || fail "$pool chat usage: $out"
    [ "$(echo "$out" | field '["usage"]["prompt_tokens"]')" -gt "$want_pt" ] \
        || fail "$pool chat prompt_tokens should count the template and both messages: $out"
    echo "$out" | python3 -c '
import json, math, sys
d = json.load(sys.stdin)
c = d["choices"][0]["logprobs"]["content"]
assert len(c) == d["usage"]["completion_tokens"], "one logprob entry per token"
for e in c:
    assert e["logprob"] <= 0 and math.isfinite(e["logprob"]), e
    assert bytes(e["bytes"]).decode("utf-8", "replace") is not None
    assert 1 <= len(e["top_logprobs"]) <= 2, e
    lps = [t["logprob"] for t in e["top_logprobs"]]
    assert lps == sorted(lps, reverse=True), e
    assert e["top_logprobs"][0]["logprob"] >= e["logprob"] - 1e-4, e
' || fail "$pool chat logprobs malformed: $out"
    chat_plain=$(echo "$out" | field '["choices"][0]["message"]["content"]')
    post /v1/chat/completions "$chat,\"stream\":true}" >"$T_DIR/c.sse"
    s=$(sse "$T_DIR/c.sse")
    [ "$(echo "$s" | field '["done"]')" = True ] || fail "$pool chat stream has no [DONE]: $s"
    [ "$(echo "$s" | field '["text"]')" = "$chat_plain" ] || fail "$pool chat stream text differs: $s vs '$chat_plain'"
    [ "$(echo "$s" | field '["n_lp"]')" = 8 ] || fail "$pool chat stream logprob entries: $s"
done
ok "completions and chat, plain and streamed, both pools; usage matches the tokenizer; logprobs well-formed"

# --- determinism: greedy twice, seeded sampling twice --------------------------------------------
for pool in precise fast; do
    a=$(post /v1/completions "{\"model\":\"$pool\",\"prompt\":\"greedy twice\",\"max_tokens\":24,\"temperature\":0}")
    b=$(post /v1/completions "{\"model\":\"$pool\",\"prompt\":\"greedy twice\",\"max_tokens\":24,\"temperature\":0}")
    [ "$(echo "$a" | field '["choices"][0]["text"]')" = "$(echo "$b" | field '["choices"][0]["text"]')" ] \
        || fail "$pool: temperature 0 gave two different texts"
    body="{\"model\":\"$pool\",\"prompt\":\"seeded\",\"max_tokens\":24,\"temperature\":1.0,\"seed\":SEED}"
    a=$(post /v1/completions "${body/SEED/1234}" | field '["choices"][0]["text"]')
    b=$(post /v1/completions "${body/SEED/1234}" | field '["choices"][0]["text"]')
    c=$(post /v1/completions "${body/SEED/99}" | field '["choices"][0]["text"]')
    [ "$a" = "$b" ] || fail "$pool: the same seed gave different texts: '$a' vs '$b'"
    [ "$a" != "$c" ] || fail "$pool: seeds 1234 and 99 gave the same 24-token text (sampling ignores the seed?)"
done
ok "temperature 0 and a fixed seed are reproducible"

# --- stop strings ---------------------------------------------------------------------------------
full=$(post /v1/completions '{"model":"precise","prompt":"stop here","max_tokens":40,"temperature":0}' | field '["choices"][0]["text"]')
stop=$(python3 -c 'import sys; t=sys.argv[1]; print(t[len(t)//2:len(t)//2+3])' "$full")
want=$(python3 -c 'import sys; print(sys.argv[1][:sys.argv[1].find(sys.argv[2])])' "$full" "$stop")
stop_json=$(python3 -c 'import json,sys; print(json.dumps(sys.argv[1]))' "$stop")
out=$(post /v1/completions "{\"model\":\"precise\",\"prompt\":\"stop here\",\"max_tokens\":40,\"temperature\":0,\"stop\":[$stop_json]}")
[ "$(echo "$out" | field '["choices"][0]["text"]')" = "$want" ] || fail "stop $stop_json: got $out, want '$want'"
[ "$(echo "$out" | field '["choices"][0]["finish_reason"]')" = stop ] || fail "stop: finish_reason: $out"
ok "stop string ends the completion before it (finish_reason stop)"

# --- prompt over the context -------------------------------------------------------------------------
long=$(python3 -c 'print(" ".join(["word"] * 2500))')
out=$(post /v1/completions "{\"model\":\"precise\",\"prompt\":\"$long\",\"max_tokens\":4}")
[ "$(status)" = 400 ] || fail "prompt over the context: status $(status): $out"
msg=$(echo "$out" | field '["error"]["message"]')
grep -qi "context\|model length\|too long" <<<"$msg" || fail "prompt over the context: unclear message '$msg'"
still_serves "a prompt over the context"
ok "prompt over the context → 400: $msg"

# wait_chunks FILE N: until FILE holds N streamed data lines (the stream is under way)
wait_chunks() {
    for _ in $(seq 1000); do
        [ "$(grep -c '^data: {' "$1" 2>/dev/null)" -ge "$2" ] && return 0
        sleep 0.01
    done
    fail "stream $1 never produced $2 chunks"
}

# --- client disconnect cancels on the worker ----------------------------------------------------------
left=""
for attempt in 1 2 3 4; do # on a loaded machine the stream may end before the client leaves
    curl -sN "$BASE/v1/completions" -d '{"model":"fast","prompt":"endless","max_tokens":2000,"stream":true,"temperature":0}' >"$T_DIR/gone.sse" &
    cpid=$!
    wait_chunks "$T_DIR/gone.sse" 2
    # Freeze f1, let curl read what was sent, and leave only if the stream is not over. The router
    # notices the closed socket when f1 (continued) sends its next token.
    kill -STOP "${W_PID[f1]}"
    sleep 0.2
    if grep -q '^data: \[DONE\]' "$T_DIR/gone.sse"; then
        kill -CONT "${W_PID[f1]}"
        wait "$cpid" 2>/dev/null || true
        continue
    fi
    kill "$cpid" 2>/dev/null || true
    wait "$cpid" 2>/dev/null || true
    kill -CONT "${W_PID[f1]}"
    left=1
    break
done
[ -n "$left" ] || fail "every 2000-token stream finished before the client left; cannot test cancel"
for _ in $(seq 100); do
    [ "$(workers_field f1 inflight)" = 0 ] && [ "$(workers_field f1 running)" = 0 ] && break
    sleep 0.05
done
[ "$(workers_field f1 inflight)" = 0 ] || fail "the router still counts the abandoned request on f1"
[ "$(workers_field f1 running)" = 0 ] || fail "f1 still runs the abandoned request (running=$(workers_field f1 running))"
n499=$(curl -s "$BASE/metrics" | grep 'sol_requests_total{pool="fast",status="499"}' || true)
[ "${n499##* }" = 1 ] || fail "metrics do not count the disconnect as 499: '$n499'"
ok "client disconnect: f1 stops (running 0, 499 counted)"

# --- kill -9 mid-stream: token-exact failover through resume_tokens ------------------------------
FBODY='{"model":"precise","prompt":"failover story","max_tokens":1500,"temperature":0,"logprobs":0'
post /v1/completions "$FBODY}" >"$T_DIR/ref.json"
ref=$(field '["choices"][0]["text"]' <"$T_DIR/ref.json")
ref_toks=$(python3 -c 'import json,sys; print(json.dumps(json.load(open(sys.argv[1]))["choices"][0]["logprobs"]["tokens"]))' "$T_DIR/ref.json")
[ "$(field '["usage"]["completion_tokens"]' <"$T_DIR/ref.json")" = 1500 ] || fail "reference run ended early"
# Freeze both workers once the stream is under way so the victim cannot finish while we look up
# which one holds it; on a loaded machine the stream may still win the race, then try again.
victim=""
for attempt in 1 2 3 4; do
    curl -sN "$BASE/v1/completions" -d "$FBODY,\"stream\":true}" >"$T_DIR/kill.sse" &
    cpid=$!
    wait_chunks "$T_DIR/kill.sse" 5
    kill -STOP "${W_PID[p1]}" "${W_PID[p2]}"
    if grep -q '^data: \[DONE\]' "$T_DIR/kill.sse"; then
        kill -CONT "${W_PID[p1]}" "${W_PID[p2]}"
        wait "$cpid" || true
        echo "     stream finished before the kill (attempt $attempt); again"
        continue
    fi
    for w in p1 p2; do [ "$(workers_field "$w" inflight)" = 1 ] && victim=$w; done
    break
done
[ -n "$victim" ] || { kill -CONT "${W_PID[p1]}" "${W_PID[p2]}"; fail "no precise worker held the stream when frozen"; }
survivor=p1
[ "$victim" = p1 ] && survivor=p2
kill -9 "${W_PID[$victim]}"
kill -CONT "${W_PID[$survivor]}"
wait "$cpid" || fail "the failover stream's curl failed"
s=$(sse "$T_DIR/kill.sse")
[ "$(echo "$s" | field '["done"]')" = True ] || fail "failover stream did not end with [DONE]: $(tail -c 300 "$T_DIR/kill.sse")"
[ "$(echo "$s" | field '["error"]')" = None ] || fail "failover stream carried an error: $s"
python3 - "$T_DIR/kill.sse" "$ref_toks" <<'EOF' || fail "failover stream differs from the undisturbed run"
import json, sys
toks = []
for line in open(sys.argv[1], encoding="utf-8"):
    if line.startswith("data: {"):
        for c in json.loads(line[6:]).get("choices", []):
            toks += (c.get("logprobs") or {}).get("tokens") or []
ref = json.loads(sys.argv[2])
if toks != ref:
    i = next((k for k in range(min(len(toks), len(ref))) if toks[k] != ref[k]), min(len(toks), len(ref)))
    sys.exit(f"tokens differ at {i}: {len(toks)} streamed vs {len(ref)} reference")
EOF
[ "$(echo "$s" | field '["text"]')" = "$ref" ] || fail "failover text differs from the undisturbed run"
grep -q "fails over" "$T_DIR/router.log" || fail "the router log shows no failover"
[ "$(workers_field "$survivor" served)" -gt 0 ] || fail "$survivor served nothing"
ok "kill -9 of $victim mid-stream: the stream completed on $survivor, token-exact with the undisturbed run"
