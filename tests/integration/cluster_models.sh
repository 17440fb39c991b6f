#!/usr/bin/env bash
# Promise: several models share one cluster. Each worker registers the model it serves
# (--served-model-name, else the GGUF's name); /v1/models lists them with the pools; a request's
# "model" keeps it to that model's workers whatever pool the classifier picks (a model with no
# worker in that pool is served by a pool that has one); a pool name still works; an unknown model
# is a 404 naming the served ones; a model whose workers are all gone is a 503, not a 404; a request
# queued for a busy model does not hold back another model's request behind it; a bad name is
# refused by its key.
. "$(dirname "$0")/lib.sh"
LIB_SERVED_MODEL=none # the models the workers register, nothing else

"$WORKER_BIN" --backend sim --served-model-name "two words" >"$T_DIR/bad.log" 2>&1 && fail "a name with a space was accepted"
grep -q "worker.served_model_name" "$T_DIR/bad.log" || fail "the refusal does not name the key: $(cat "$T_DIR/bad.log")"
ok "a bad --served-model-name is refused by its key"

start_router
start_worker q1 precise 1 2000 --served-model-name qwen
start_worker q2 fast 1 2000 --served-model-name qwen
start_worker l1 precise 1 20 --served-model-name llama --set worker.scheduler.max_num_seqs=1
wait_ready
for w in q1 q2 l1; do wait_worker "$w"; done
[ "$(workers_field l1 model)" = llama ] || fail "l1 registered model $(workers_field l1 model)"

ids=$(curl -s "$BASE/v1/models" | json_get '" ".join(m["id"] for m in d["data"])')
case "$ids" in # models in the order they registered, then the pools
"qwen llama fast precise" | "llama qwen fast precise") ;;
*) fail "/v1/models lists: $ids" ;;
esac
ok "/v1/models lists the registered models, then the pools"

served() { for w in q1 q2 l1; do printf '%s ' "$(workers_field "$w" served)"; done; }
before=$(served)
for i in 1 2 3; do
    post /v1/completions '{"model":"llama","prompt":"hello","max_tokens":2}' >/dev/null
    [ "$(status)" = 200 ] || fail "llama: $(status) $(cat "$T_DIR/body")"
    [ "$(json_get 'd["model"]' <"$T_DIR/body")" = llama ] || fail "the answer names another model"
done
# the classifier's pool (a tag) is fast, which has no llama worker: precise's llama serves it
post /v1/completions '{"model":"llama","prompt":"hello","max_tokens":2}' -H 'X-Sol-Tags: fast' >/dev/null
[ "$(status)" = 200 ] || fail "llama tagged fast: $(status) $(cat "$T_DIR/body")"
for i in 1 2 3 4; do
    post /v1/completions '{"model":"qwen","prompt":"hello","max_tokens":2}' >/dev/null
    [ "$(status)" = 200 ] || fail "qwen: $(status) $(cat "$T_DIR/body")"
done
sleep 0.5 # served counts come from the broker's snapshot
read -r q1a q2a l1a <<<"$before"
read -r q1b q2b l1b <<<"$(served)"
[ $((l1b - l1a)) = 4 ] || fail "llama's worker served $((l1b - l1a)) of the 4 llama requests"
[ $((q1b - q1a + q2b - q2a)) = 4 ] || fail "qwen's workers served $((q1b - q1a + q2b - q2a)) of 4"
ok "\"model\" keeps a request to its model's workers (a pool without one falls over to one with one)"

post /v1/completions '{"model":"precise","prompt":"hello","max_tokens":2}' >/dev/null
[ "$(status)" = 200 ] || fail "a pool name: $(status) $(cat "$T_DIR/body")"
post /v1/completions '{"model":"gpt-4o","prompt":"hello","max_tokens":2}' >/dev/null
[ "$(status)" = 404 ] || fail "an unknown model: $(status) $(cat "$T_DIR/body")"
python3 - "$T_DIR/body" <<'EOF' || fail "404 body: $(cat "$T_DIR/body")"
import json, sys
e = json.load(open(sys.argv[1]))["error"]
assert e["type"] == "invalid_request_error" and e["code"] == "model_not_found", e
assert e["param"] == "model" and "'gpt-4o'" in e["message"], e
assert "'qwen'" in e["message"] and "'llama'" in e["message"], e
EOF
ok "a pool name still works; an unknown model is a 404 naming the served ones"

# l1 takes one request at a time: a second llama request waits in precise's queue, and a qwen
# request sent after it is served at once by q1 (it is not stuck behind the llama one).
curl -sN "$BASE/v1/completions" -d '{"model":"llama","prompt":"long","max_tokens":100,"stream":true}' >"$T_DIR/long.1" &
LONG=$!
wait_inflight l1 long 1
curl -s "$BASE/v1/completions" -d '{"model":"llama","prompt":"queued","max_tokens":2}' >"$T_DIR/queued" &
QUEUED=$!
for _ in $(seq 100); do
    [ "$(curl -s "$BASE/admin/workers" | json_get '[p["queued"] for p in d["pools"] if p["name"] == "precise"][0]')" = 1 ] && break
    sleep 0.05
done
[ "$(curl -s "$BASE/admin/workers" | json_get '[p["queued"] for p in d["pools"] if p["name"] == "precise"][0]')" = 1 ] || fail "the second llama request is not queued"
post /v1/completions '{"model":"qwen","prompt":"hello","max_tokens":2}' >/dev/null
[ "$(status)" = 200 ] || fail "qwen behind a queued llama request: $(status) $(cat "$T_DIR/body")"
kill -0 "$LONG" 2>/dev/null && [ ! -s "$T_DIR/queued" ] || fail "the qwen request waited for the llama stream ahead of it to end"
ok "a queued request of a busy model does not hold back another model's request"
wait "$LONG" || fail "the long llama stream's curl failed"
wait "$QUEUED" || fail "the queued llama request's curl failed"
[ "$(json_get 'd["choices"][0]["finish_reason"]' <"$T_DIR/queued")" = length ] || fail "queued llama: $(cat "$T_DIR/queued")"
[ "$(sse_text "$T_DIR/long.1" | wc -w)" = 100 ] || fail "the long llama stream is incomplete"

kill "${W_PID[l1]}"
wait "${W_PID[l1]}" 2>/dev/null
for _ in $(seq 50); do [ -z "$(workers_field l1 id)" ] && break; sleep 0.1; done
post /v1/completions '{"model":"llama","prompt":"hello","max_tokens":2}' >/dev/null
[ "$(status)" = 503 ] || fail "llama without a worker: $(status) $(cat "$T_DIR/body")"
grep -q "model 'llama'" "$T_DIR/body" || fail "the 503 does not name the model: $(cat "$T_DIR/body")"
[ -n "$(header Retry-After)" ] || fail "the 503 has no Retry-After"
ok "a model whose workers are gone is a 503 with Retry-After, not a 404"
