#!/usr/bin/env bash
# Promise: a CPU worker reports, in its heartbeats, the prompt-chain links its prefix cache holds
# (KV events), in the router's own hashes: after four conversations /admin/workers counts their
# links on it; a restarted router rebuilds its index from the workers' snapshots alone, so each
# conversation's next turn goes to the worker holding it even though an idle worker is beside it
# (with hashes that did not match, the idle worker would take some); when other work evicts those
# blocks, the worker reports them removed; a worker that restarts reports an empty cache.
. "$(dirname "$0")/lib.sh"
LIB_SERVED_MODEL=none # the models the workers register, nothing else

M="$T_DIR/m.gguf"
mkmodel "$M" --preset tiny --ctx 2048 --seed 2
KV=(--set worker.kv.num_blocks=96 --set worker.kv.block_size=16 --set worker.kv.max_model_len=1536)
start_router --routing-policy cache_aware
start_cpu_worker k1 precise "$M" "${KV[@]}"
wait_worker k1

# Each conversation its own system prompt: no two share a link, so a worker is chosen for one only
# by what the index says of that conversation (a shared prefix would pull the rest after the first)
SYS="You are a careful assistant for the archive. $(printf 'Every record is kept in order and checked twice. %.0s' $(seq 6))"
conv() { # CONV TURN: a chat body
    local msgs="{\"role\":\"system\",\"content\":\"Conversation $1. $SYS\"},{\"role\":\"user\",\"content\":\"conversation $1: tell me about record $1 and its history in the archive\"}"
    [ "$2" -ge 2 ] && msgs="$msgs,{\"role\":\"assistant\",\"content\":\"record $1 is old\"},{\"role\":\"user\",\"content\":\"and what came after record $1?\"}"
    echo "{\"model\":\"precise\",\"max_tokens\":4,\"temperature\":0,\"messages\":[$msgs]}"
}
for c in a b c d; do
    post /v1/chat/completions "$(conv $c 1)" >/dev/null
    [ "$(status)" = 200 ] || fail "conversation $c: $(status) $(cat "$T_DIR/body")"
done
links=0
for _ in $(seq 50); do
    links=$(workers_field k1 kv_links)
    [ "$links" -ge 8 ] && break
    sleep 0.1
done
[ "$links" -ge 8 ] || fail "k1 reports $links links held after four conversations (expected two each)"
ok "a worker reports the links its prefix cache holds ($links after four conversations)"

start_cpu_worker k2 precise "$M" "${KV[@]}"
wait_worker k2
kill "$ROUTER_PID"
wait "$ROUTER_PID" 2>/dev/null
start_router --routing-policy cache_aware
for w in k1 k2; do wait_worker "$w"; done
for _ in $(seq 50); do
    [ "$(workers_field k1 kv_links)" = "$links" ] && break
    sleep 0.1
done
[ "$(workers_field k1 kv_links)" = "$links" ] || fail "after a router restart k1's snapshot says $(workers_field k1 kv_links) links, before $links"
[ "$(workers_field k1 kv_snapshots)" -ge 1 ] || fail "k1 sent no snapshot to the new router"
[ "$(workers_field k2 kv_links)" = 0 ] || fail "k2 reports links it never computed"
ok "a restarted router gets each worker's snapshot ($links links from k1, 0 from k2)"

served1=$(workers_field k1 served)
for c in a b c d; do
    post /v1/chat/completions "$(conv $c 2)" >/dev/null
    [ "$(status)" = 200 ] || fail "conversation $c turn 2: $(status) $(cat "$T_DIR/body")"
done
sleep 0.5
[ "$(workers_field k2 served)" = 0 ] || fail "k2 served $(workers_field k2 served) second turns: the rebuilt index did not match the requests' links"
[ $(($(workers_field k1 served) - served1)) = 4 ] || fail "k1 served $(($(workers_field k1 served) - served1)) of the 4 second turns"
ok "the rebuilt index routes every second turn to the worker holding its conversation"

# Other work on k1 alone that needs the whole pool: its cached blocks are evicted and reported.
kill "${W_PID[k2]}"
wait "${W_PID[k2]}" 2>/dev/null
before=$(workers_field k1 kv_links)
# (the synthetic vocabulary's EOS, id 2, is barred so that each stream takes its whole length)
burst /v1/completions flood 2 0 '{"model":"precise","prompt":"%i","max_tokens":700,"temperature":0,"logit_bias":{"2":-100},"stream":true}'
for _ in $(seq 50); do
    after=$(workers_field k1 kv_links)
    [ "$after" -lt $((before / 4 + 1)) ] && break
    sleep 0.1
done
[ "$after" -lt $((before / 4 + 1)) ] || fail "k1 still reports $after of $before links after the pool was reused"
ok "evicted blocks are reported removed ($before links, then $after)"

# Worker churn: k1 killed and started again under its id holds nothing, and says so.
post /v1/chat/completions "$(conv a 1)" >/dev/null
[ "$(status)" = 200 ] || fail "conversation a again: $(status) $(cat "$T_DIR/body")"
for _ in $(seq 50); do [ "$(workers_field k1 kv_links)" -ge 2 ] && break; sleep 0.1; done
[ "$(workers_field k1 kv_links)" -ge 2 ] || fail "k1 reports $(workers_field k1 kv_links) links after conversation a again"
snaps=$(workers_field k1 kv_snapshots)
kill -9 "${W_PID[k1]}"
wait "${W_PID[k1]}" 2>/dev/null || true # killed: 137
start_cpu_worker k1 precise "$M" "${KV[@]}"
# (the router may keep the old record, registered again, or make a new one: either way a snapshot)
for _ in $(seq 100); do [ "$(workers_field k1 kv_links)" = 0 ] && break; sleep 0.1; done
[ "$(workers_field k1 kv_links)" = 0 ] || fail "k1 restarted with an empty cache, but the router counts $(workers_field k1 kv_links) links"
ok "a worker that restarts reports an empty cache (snapshots: $snaps before, $(workers_field k1 kv_snapshots) now)"
