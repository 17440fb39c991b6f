#!/usr/bin/env bash
# Promise: a CPU worker with a second KV tier (worker.kv.tier2_blocks) keeps the blocks other work
# evicts from its pool: the conversation's links stay reported held, in the second tier (the
# router's index knows the tier: a hit there costs a copy), its next request is served
# from the tier (cached tokens, tier-2 hits in /admin/workers and /metrics) with the same greedy
# answer it had cold; a backend without the tier refuses the key by name.
. "$(dirname "$0")/lib.sh"
LIB_SERVED_MODEL=none

M="$T_DIR/m.gguf"
mkmodel "$M" --preset tiny --ctx 2048 --seed 2
"$WORKER_BIN" --backend cuda-emu --model "$M" --router "$ZMQ_EP" --set worker.kv.tier2_blocks=8 \
    >"$T_DIR/refused.log" 2>&1 && fail "cuda-emu took worker.kv.tier2_blocks"
grep -q "worker.kv.tier2_blocks" "$T_DIR/refused.log" || fail "the refusal does not name the key: $(tail -n 3 "$T_DIR/refused.log")"
ok "a backend without a second tier refuses worker.kv.tier2_blocks by name"

start_router --routing-policy cache_aware
start_cpu_worker k1 precise "$M" --set worker.kv.num_blocks=48 --set worker.kv.block_size=16 \
    --set worker.kv.max_model_len=768 --set worker.kv.tier2_blocks=64
wait_worker k1
grep -q "KV tier 2: 64 blocks" "$T_DIR/worker-k1.log" || fail "k1 did not log its second tier"

SYS="You are a careful assistant for the archive. $(printf 'Every record is kept in order and checked twice. %.0s' $(seq 6))"
BODY="{\"model\":\"precise\",\"max_tokens\":8,\"temperature\":0,\"messages\":[{\"role\":\"system\",\"content\":\"$SYS\"},{\"role\":\"user\",\"content\":\"tell me about record a and its history\"}]}"
post /v1/chat/completions "$BODY" >"$T_DIR/cold.json"
[ "$(status)" = 200 ] || fail "cold: $(status) $(cat "$T_DIR/body")"
for _ in $(seq 50); do [ "$(workers_field k1 kv_links)" -ge 2 ] && break; sleep 0.1; done
links=$(workers_field k1 kv_links)
[ "$links" -ge 2 ] || fail "k1 reports $links links after the conversation"

# other work that needs the whole pool (the synthetic vocabulary's EOS, id 2, barred)
burst /v1/completions flood 2 0 '{"model":"precise","prompt":"%i","max_tokens":360,"temperature":0,"logit_bias":{"2":-100},"stream":true}'
sleep 0.5
[ "$(workers_field k1 kv_tier2_used)" -gt 0 ] || fail "nothing went to the second tier (kv_tier2_used $(workers_field k1 kv_tier2_used))"
[ "$(workers_field k1 kv_links)" -ge "$links" ] || fail "the conversation's links were reported gone though the tier holds them ($links, then $(workers_field k1 kv_links))"
t2links=$(workers_field k1 kv_tier2_links)
[ "$t2links" -ge 2 ] || fail "the router's index has $t2links of k1's links in its second tier"
ok "evicted blocks go to the second tier and stay reported held, there ($(workers_field k1 kv_tier2_used) blocks, $t2links links)"

post /v1/chat/completions "$BODY" >"$T_DIR/warm.json"
[ "$(status)" = 200 ] || fail "again: $(status) $(cat "$T_DIR/body")"
cached=$(json_get 'd["usage"].get("prompt_tokens_details", {}).get("cached_tokens", 0)' <"$T_DIR/warm.json")
[ "$cached" -ge 64 ] || fail "the second request had $cached cached tokens"
sleep 0.5
hits=$(workers_field k1 kv_tier2_hit_tokens)
[ "$hits" -ge 64 ] || fail "kv_tier2_hit_tokens is $hits"
[ "$(json_get 'd["choices"][0]["message"]["content"]' <"$T_DIR/warm.json")" = "$(json_get 'd["choices"][0]["message"]["content"]' <"$T_DIR/cold.json")" ] \
    || fail "the answer from restored blocks differs from the cold one"
curl -s "$BASE/metrics" >"$T_DIR/metrics" # (into a file: grep -q closing a pipe fails pipefail)
grep -q '^sol_worker_kv_tier2_hit_tokens_total{pool="precise",worker="k1"} [1-9]' "$T_DIR/metrics" \
    || fail "/metrics lacks the tier-2 hits"
for _ in $(seq 50); do [ "$(workers_field k1 kv_tier2_links)" -lt "$t2links" ] && break; sleep 0.1; done
[ "$(workers_field k1 kv_tier2_links)" -lt "$t2links" ] || fail "the restored links are still reported in the second tier ($(workers_field k1 kv_tier2_links))"
ok "the next request is served from the tier ($cached cached tokens, $hits tier-2 hit tokens) with the cold answer"
