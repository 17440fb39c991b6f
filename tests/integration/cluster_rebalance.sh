#!/usr/bin/env bash
# Promise: live rebalancing (docs/broker.md, "Live rebalancing"). A stream whose worker gives
# tokens less often than its X-Sol-TPOT-Ms moves, token-exactly, to a worker that joins with
# room and speed; with router.workers.rebalance_hot_ratio a worker holding far more streams than
# a newly joined peer hands some over. Every moved stream ends with exactly the text an undisturbed
# run gives (simulated workers: text a pure function of prompt, seed and position; CPU workers:
# greedy on one model), and /metrics, /admin/workers and the router log say so.
. "$(dirname "$0")/lib.sh"
LIB_SERVED_MODEL=none

start_router --set router.workers.rebalance_hot_ratio=1
start_worker s1 fast 10 10 # 100 ms a token
wait_worker s1
BODY='{"model":"fast","prompt":"rebalance me","max_tokens":40,"seed":7,"stream":true}'
curl -sN "$BASE/v1/completions" -H 'X-Sol-TPOT-Ms: 50' -H 'Content-Type: application/json' \
    -d "$BODY" >"$T_DIR/moved" &
mover=$!
for _ in $(seq 50); do [ "$(workers_field s1 running)" = 1 ] && break; sleep 0.1; done
start_worker s2 fast 10 200 # 5 ms a token
wait_worker s2
wait "$mover"
[ "$(workers_field s1 rebalanced)" -ge 1 ] || fail "s1 kept the stream behind its TPOT target (rebalanced $(workers_field s1 rebalanced))"
grep -q "rebalanced: worker s1 gives a token every" "$T_DIR/router.log" || fail "the router did not log the move"
moved=$(sse_text "$T_DIR/moved")
curl -sN "$BASE/v1/completions" -H 'Content-Type: application/json' -d "$BODY" >"$T_DIR/plain"
[ "$moved" = "$(sse_text "$T_DIR/plain")" ] || fail "the moved stream's text differs from an undisturbed run:
moved: $moved
plain: $(sse_text "$T_DIR/plain")"
[ "$(wc -w <<<"$moved")" -ge 30 ] || fail "the moved stream is short: $moved"
ok "a stream behind its X-Sol-TPOT-Ms moved to a faster worker that joined, with the undisturbed text"

# load: three greedy streams on one CPU worker, then a peer joins
M="$T_DIR/m.gguf"
mkmodel "$M" --preset small --layers 2 --type q8_0 --ctx 4096 --seed 3
start_cpu_worker k1 precise "$M"
wait_worker k1
for i in 1 2 3; do
    curl -sN "$BASE/v1/completions" -H 'Content-Type: application/json' \
        -d "{\"model\":\"precise\",\"prompt\":\"tale $i\",\"max_tokens\":1500,\"temperature\":0,\"logit_bias\":{\"2\":-100},\"stream\":true}" \
        >"$T_DIR/load.$i" &
    pids+=($!)
done
for _ in $(seq 100); do [ "$(workers_field k1 running)" = 3 ] && break; sleep 0.05; done
start_cpu_worker k2 precise "$M"
wait_worker k2
wait "${pids[@]}"
[ "$(workers_field k1 rebalanced)" -ge 1 ] || fail "k1 kept all three streams beside an idle peer"
[ "$(workers_field k2 served)" -ge 1 ] || fail "k2 served none of the moved streams"
for i in 1 2 3; do
    got=$(sse_text "$T_DIR/load.$i")
    post /v1/completions "{\"model\":\"precise\",\"prompt\":\"tale $i\",\"max_tokens\":1500,\"temperature\":0,\"logit_bias\":{\"2\":-100}}" >/dev/null
    [ "$(status)" = 200 ] || fail "reference $i: $(status)"
    [ "$got" = "$(json_get 'd["choices"][0]["text"]' <"$T_DIR/body")" ] || fail "stream $i differs from its undisturbed greedy run"
done
curl -s "$BASE/metrics" >"$T_DIR/metrics"
grep -q '^sol_rebalanced_total{pool="precise"} [1-9]' "$T_DIR/metrics" || fail "sol_rebalanced_total: $(grep rebalanced "$T_DIR/metrics")"
ok "with rebalance_hot_ratio 1 a busy worker hands streams to a peer that joins ($(workers_field k1 rebalanced) moved), each ending with its undisturbed greedy text"
