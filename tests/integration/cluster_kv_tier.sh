#!/usr/bin/env bash
# Promise: a worker with a second KV tier (worker.kv.tier2_blocks) keeps the blocks other work
# evicts from its pool, on the CPU backend (a file-backed store) and on the CUDA backend's code
# (cuda-emu: page-locked host memory, copies queued on the stream): the conversation's links stay
# reported held, in the second tier (the router's index knows the tier: a hit there costs a copy),
# its next request is served from the tier (cached tokens, tier-2 hits in /admin/workers and
# /metrics) with the same greedy answer it had cold; keys that cannot apply are refused by name.
. "$(dirname "$0")/lib.sh"
LIB_SERVED_MODEL=none

M="$T_DIR/m.gguf"
mkmodel "$M" --preset tiny --ctx 2048 --seed 2
"$WORKER_BIN" --backend sim --router "$ZMQ_EP" --set worker.kv.tier2_blocks=8 \
    >"$T_DIR/refused.log" 2>&1 && fail "backend sim took worker.kv.tier2_blocks"
grep -q "worker.kv.tier2_blocks" "$T_DIR/refused.log" || fail "the refusal does not name the key: $(tail -n 3 "$T_DIR/refused.log")"
"$WORKER_BIN" --backend cuda-emu --model "$M" --router "$ZMQ_EP" --set worker.kv.tier2_blocks=8 \
    --set worker.kv.tier2_dir=/var/tmp >"$T_DIR/refused.log" 2>&1 && fail "cuda-emu took worker.kv.tier2_dir"
grep -q "worker.kv.tier2_dir" "$T_DIR/refused.log" || fail "the refusal does not name the key: $(tail -n 3 "$T_DIR/refused.log")"
ok "a backend without a second tier refuses worker.kv.tier2_blocks, and one without a file-backed tier worker.kv.tier2_dir, by name"

start_router --routing-policy cache_aware
KV=(--set worker.kv.num_blocks=48 --set worker.kv.block_size=16 --set worker.kv.max_model_len=768
    --set worker.kv.tier2_blocks=64)
SYS="You are a careful assistant for the archive. $(printf 'Every record is kept in order and checked twice. %.0s' $(seq 6))"

# On the CPU: a chat with a long system prompt, evicted by long decodes (the synthetic
# vocabulary's EOS, id 2, barred). On cuda-emu, whose host kernels run a few tokens a second: a
# pool of 4-token blocks, a short completion prompt, evicted by two short prompts.
CHAT='{"model":"%p","max_tokens":8,"temperature":0,"messages":[{"role":"system","content":"'$SYS'"},{"role":"user","content":"tell me about record a and its history"}]}'
FLOOD_DECODE='{"model":"%p","prompt":"%i","max_tokens":360,"temperature":0,"logit_bias":{"2":-100},"stream":true}'
SHORT='{"model":"%p","max_tokens":4,"temperature":0,"logprobs":1,"prompt":"Keep records: tell of a."}'
FLOOD_PROMPT='{"model":"%p","prompt":"%i ledger ledger ledger ledger","max_tokens":1}'
ANSWER='d["choices"][0].get("text") or d["choices"][0]["message"]["content"]'

# tier_flow ID POOL PATH BODY FLOOD MIN_LINKS MIN_CACHED: the request, a flood that evicts its
# blocks, the request again
tier_flow() {
    local id=$1 pool=$2 path=$3 body=${4//%p/$2} flood=${5//%p/$2} min_links=$6 min=$7
    grep -q "KV tier 2: 64 blocks" "$T_DIR/worker-$id.log" || fail "$id did not log its second tier"
    printf '%s' "$body" >"$T_DIR/body-$id"
    post "$path" "$body" >"$T_DIR/cold-$id.json"
    [ "$(status)" = 200 ] || fail "$id cold: $(status) $(cat "$T_DIR/body")"
    for _ in $(seq 50); do [ "$(workers_field "$id" kv_links)" -ge "$min_links" ] && break; sleep 0.1; done
    local links
    links=$(workers_field "$id" kv_links)
    [ "$links" -ge "$min_links" ] || fail "$id reports $links links after the request"

    burst /v1/completions "flood-$id" 2 0 "$flood"
    sleep 0.5
    [ "$(workers_field "$id" kv_tier2_used)" -gt 0 ] || fail "$id: nothing went to the second tier (kv_tier2_used $(workers_field "$id" kv_tier2_used))"
    [ "$(workers_field "$id" kv_links)" -ge "$links" ] || fail "$id: the conversation's links were reported gone though the tier holds them ($links, then $(workers_field "$id" kv_links))"
    local t2links
    t2links=$(workers_field "$id" kv_tier2_links)
    [ "$t2links" -ge 1 ] || fail "the router's index has $t2links of $id's links in its second tier"
    ok "$id: evicted blocks go to the second tier and stay reported held, there ($(workers_field "$id" kv_tier2_used) blocks, $t2links links)"

    post "$path" "$body" >"$T_DIR/warm-$id.json"
    [ "$(status)" = 200 ] || fail "$id again: $(status) $(cat "$T_DIR/body")"
    local cached hits
    cached=$(json_get 'd["usage"].get("prompt_tokens_details", {}).get("cached_tokens", 0)' <"$T_DIR/warm-$id.json")
    [ "$cached" -ge "$min" ] || fail "$id: the second request had $cached cached tokens"
    sleep 0.5
    hits=$(workers_field "$id" kv_tier2_hit_tokens)
    [ "$hits" -ge "$min" ] || fail "$id: kv_tier2_hit_tokens is $hits"
    [ "$(json_get "$ANSWER" <"$T_DIR/warm-$id.json")" = "$(json_get "$ANSWER" <"$T_DIR/cold-$id.json")" ] \
        || fail "$id: the answer from restored blocks differs from the cold one"
    # a random-weight model's greedy text can survive wrong K/V; its logprobs do not
    local drift
    drift=$(python3 -c 'import json,sys
lp = [json.load(open(f))["choices"][0].get("logprobs") for f in sys.argv[1:]]
print(max(abs(a - b) for a, b in zip(lp[0]["token_logprobs"], lp[1]["token_logprobs"])) if lp[0] else 0)' \
        "$T_DIR/cold-$id.json" "$T_DIR/warm-$id.json")
    python3 -c "import sys; sys.exit(0 if $drift <= 1e-3 else 1)" \
        || fail "$id: the logprobs from restored blocks drift $drift from the cold ones"
    curl -s "$BASE/metrics" >"$T_DIR/metrics" # (into a file: grep -q closing a pipe fails pipefail)
    grep -q "^sol_worker_kv_tier2_hit_tokens_total{pool=\"$pool\",worker=\"$id\"} [1-9]" "$T_DIR/metrics" \
        || fail "/metrics lacks $id's tier-2 hits"
    for _ in $(seq 50); do [ "$(workers_field "$id" kv_tier2_links)" -lt "$t2links" ] && break; sleep 0.1; done
    [ "$(workers_field "$id" kv_tier2_links)" -lt "$t2links" ] || fail "$id: the restored links are still reported in the second tier ($(workers_field "$id" kv_tier2_links))"
    ok "$id: the next request is served from the tier ($cached cached tokens, $hits tier-2 hit tokens) with the cold answer (logprobs within $drift)"
}

start_cpu_worker k1 precise "$M" "${KV[@]}"
wait_worker k1
tier_flow k1 precise /v1/chat/completions "$CHAT" "$FLOOD_DECODE" 2 64

"$WORKER_BIN" --backend cuda-emu --pool fast --id g1 --router "$ZMQ_EP" --model "$M" \
    --set worker.heartbeat_ms=200 --set worker.kv.num_blocks=12 --set worker.kv.block_size=4 \
    --set worker.kv.max_model_len=48 --set worker.kv.tier2_blocks=64 >>"$T_DIR/worker-g1.log" 2>&1 &
T_PIDS+=("$!")
wait_worker g1
tier_flow g1 fast /v1/completions "$SHORT" "$FLOOD_PROMPT" 1 16
post /v1/completions "$(sed 's/"model":"fast"/"model":"precise"/' "$T_DIR/body-g1")" >"$T_DIR/cpu-g1.json"
[ "$(status)" = 200 ] || fail "the CPU worker: $(status) $(cat "$T_DIR/body")"
[ "$(json_get "$ANSWER" <"$T_DIR/warm-g1.json")" = "$(json_get "$ANSWER" <"$T_DIR/cpu-g1.json")" ] \
    || fail "the cuda-emu worker's answer from its tier differs from the CPU worker's"
ok "the cuda-emu worker's answer from its tier is the CPU worker's"
